"""Reverse-mode differentiation over a :class:`~rlx_cpu.ir.Graph`.

``grads(graph, loss, wrt)`` appends the backward ops of ``loss`` to the same
graph and returns one gradient node per ``wrt`` node, so forward and backward
compile into one plan over one arena::

    g = Graph()
    x, labels = g.input("x", (32, 1, 28, 28)), g.input("labels", (32,))
    w = g.input("conv.weight", (8, 1, 3, 3))
    logits = ...                                   # forward ops
    loss = g.softmax_cross_entropy(logits, labels)
    (dw,) = grads(g, loss, [w])
    g.output(loss, dw)
    plan = rlx_cpu.compile(g)

Each differentiable op kind has one rule in ``VJP``: given the node and the
gradient of the loss w.r.t. its output, it builds the gradients w.r.t. the
inputs that need one (``needs[i]``).  A value used several times gets the sum
of its gradients (``add`` nodes).  Gradient ops themselves are not
differentiable (no double backward).
"""
import numpy as np

from .ir import Graph, Node
from .registry import GRADIENTS

__all__ = ["grads"]


def grads(graph, loss, wrt):
    """Append d loss / d w for every w in `wrt` to `graph`; return those nodes.

    `loss` must hold a single value (shape () or all-ones dims).  Every `wrt`
    node must be a node of `graph` that `loss` depends on.  Only the ops on a
    path from some `wrt` node to `loss` are differentiated.
    """
    if not isinstance(graph, Graph):
        raise TypeError(f"grads: expected a rlx_cpu.Graph, got {type(graph).__name__}")
    if not isinstance(loss, Node) or loss.graph is not graph:
        raise TypeError(f"grads: loss must be a node of this graph, got {loss!r}")
    if int(np.prod(loss.shape, dtype=np.int64)) != 1:
        raise ValueError(f"grads: loss must hold one value, got {loss!r}")
    wrt = list(wrt)
    for w in wrt:
        if not isinstance(w, Node) or w.graph is not graph:
            raise TypeError(f"grads: wrt must hold nodes of this graph, got {w!r}")

    # Values that depend on some wrt node: only those need gradients.
    depends = {w.id for w in wrt}
    for node in graph.nodes[:loss.id + 1]:
        if any(i in depends for i in node.inputs):
            depends.add(node.id)
    # ... and that loss depends on.
    feeds_loss = {loss.id}
    for node in reversed(graph.nodes[:loss.id + 1]):
        if node.id in feeds_loss:
            feeds_loss.update(node.inputs)
    for w in wrt:
        if w.id not in feeds_loss:
            raise ValueError(f"grads: loss {loss.name!r} does not depend on {w!r}")
    active = depends & feeds_loss

    cotangent = {loss.id: graph.constant(np.ones(loss.shape, np.float32), name=f"d_{loss.name}.seed")}
    for node in reversed(graph.nodes[:loss.id + 1]):
        dy = cotangent.get(node.id)
        if dy is None or node.op in ("input", "constant"):
            continue
        rule = GRADIENTS.get(node.op)
        if rule is None:
            raise ValueError(f"grads: op {node.op!r} (node {node.name!r}) has no gradient rule; "
                             f"differentiable ops: {sorted(GRADIENTS)}")
        needs = [i in active for i in node.inputs]
        for i, gi in zip(node.inputs, rule(graph, node, dy, needs)):
            if gi is None or i not in active:
                continue
            prev = cotangent.get(i)
            cotangent[i] = gi if prev is None else graph.add(prev, gi)
    return [cotangent[w.id] for w in wrt]
