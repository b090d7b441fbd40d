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
from .registry import GRADIENTS, gradient

__all__ = ["grads", "VJP"]


def _pads(attrs):
    """ONNX-style (begin, end) pairs, accepted by every op's padding argument."""
    return tuple(zip(attrs.pads_begin, attrs.pads_end))


def _vjp_conv(g, node, dy, needs):
    a = node.attrs
    nd = a.ndim
    x, w = g.node(node.inputs[0]), g.node(node.inputs[1])
    geo = dict(stride=a.stride, padding=_pads(a), dilation=a.dilation, groups=a.groups)
    out = [None] * len(node.inputs)
    if needs[0]:
        out[0] = getattr(g, f"conv{nd}d_backward_input")(dy, w, x.shape, **geo)
    if needs[1]:
        out[1] = getattr(g, f"conv{nd}d_backward_weight")(x, dy, w.shape, **geo)
    if len(node.inputs) > 2 and needs[2]:
        out[2] = g.bias_grad(dy)
    return out


_POOL_OPS = {("max", 1): "max_pool1d", ("max", 2): "max_pool2d", ("max", 3): "max_pool3d",
             ("avg", 1): "avg_pool1d", ("avg", 2): "avg_pool2d", ("avg", 3): "avg_pool3d"}


def _vjp_pool(g, node, dy, needs):
    a = node.attrs
    op = _POOL_OPS[a.kind, a.ndim]
    if a.ndim == 3:
        raise NotImplementedError(f"grads: {op} (node {node.name!r}) is not differentiable: pooling "
                                  f"gradients exist for 1-D and 2-D pools only")
    x = g.node(node.inputs[0])
    geo = dict(stride=a.stride, padding=_pads(a), ceil_mode=a.ceil_mode)
    if a.kind == "max":
        return [getattr(g, f"{op}_backward")(x, dy, a.kernel, dilation=a.dilation, **geo)]
    return [getattr(g, f"{op}_backward")(dy, x.shape, a.kernel, count_include_pad=a.count_include_pad,
                                         divisor_override=a.divisor_override or None, dilation=a.dilation,
                                         **geo)]


def _vjp_conv_transpose(g, node, dy, needs):
    """y = conv_transpose(x, W) is the adjoint of a conv from y's space to x's
    with the same weight, so dx = conv(dy, W) and dW is that conv's weight
    gradient with the roles of input and output swapped."""
    a = node.attrs
    nd = a.ndim
    op = f"conv_transpose{nd}d"
    x, w = g.node(node.inputs[0]), g.node(node.inputs[1])
    geo = dict(stride=a.stride, padding=_pads(a), dilation=a.dilation, groups=a.groups)
    # The conv of dy has floor((out_sp + pads - d(k-1) - 1) / s) + 1 outputs,
    # which is x's size only while output_padding < stride.
    if any(p >= s for p, s in zip(a.output_padding, a.stride)):
        raise NotImplementedError(f"grads: {op} (node {node.name!r}) with output_padding {a.output_padding} "
                                  f">= stride {a.stride} is not differentiable")
    out = [None] * len(node.inputs)
    if needs[0]:
        out[0] = getattr(g, f"conv{nd}d")(dy, w, **geo)
    if needs[1]:
        out[1] = getattr(g, f"conv{nd}d_backward_weight")(dy, x, w.shape, **geo)
    if len(node.inputs) > 2 and needs[2]:
        out[2] = g.bias_grad(dy)
    return out


VJP = {
    "conv": _vjp_conv,
    "conv_transpose": _vjp_conv_transpose,
    "pool": _vjp_pool,
}

# Rules not yet moved into their op family register here.
for _op, _fn in VJP.items():
    gradient(_op)(_fn)
del _op, _fn


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
