"""Dense and elementwise ops: the small pieces of a CNN training step.

* ``relu``: y = max(x, 0); its gradient ``relu_backward``: dx = dy * [y > 0]
  (y is the relu *output*: y > 0 iff x > 0).
* ``add``: a + b, same shapes; ``bias_add``: y[n, c, ...] = x[n, c, ...] + b[c],
  whose gradient ``bias_grad`` sums dy over every axis but 1.
* ``reshape`` / ``flatten``: the same bytes under a new static shape (the plan
  aliases the input's buffer, no thunk runs).
* ``linear``: y = x W^T + b with x [N, in], W [out, in]; its gradients are two
  GEMMs, dx = dy W (``linear_backward_input``) and dW = dy^T x
  (``linear_backward_weight``).
* ``softmax_cross_entropy``: loss = mean_n(-log softmax(z_n)[label_n]); its
  gradient ``softmax_cross_entropy_backward``: dz = g / N * (softmax(z) - onehot).

Kernels: src/_train.pyx.
"""
import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from .. import _matmul, _train
from ..ir import fmt_shape
from ..registry import compile_rule, gradient, graph_method
from ..shapes import check_blas_dims
from ..thunks import Slice, Thunk, view_or_none


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

@graph_method()
def relu(graph, x, name=None):
    """max(x, 0) elementwise (NaN stays NaN)."""
    x = graph._value(x, "relu", "input")
    return graph._add("relu", [x], x.shape, name)


@graph_method()
def relu_backward(graph, grad_output, y, name=None):
    """grad_output where y > 0, else 0; y is the relu *output* (y > 0 iff x > 0),
    which the next layer keeps alive anyway."""
    op = "relu_backward"
    dy = graph._value(grad_output, op, "grad_output")
    y = graph._value(y, op, "y")
    if dy.shape != y.shape:
        raise ValueError(f"{op}: grad_output {fmt_shape(dy.shape)} and y {fmt_shape(y.shape)} must have the same shape")
    return graph._add(op, [dy, y], y.shape, name)


@graph_method()
def add(graph, a, b, name=None):
    """a + b elementwise, same shapes (no broadcasting)."""
    a = graph._value(a, "add", "a")
    b = graph._value(b, "add", "b")
    if a.shape != b.shape:
        raise ValueError(f"add: a {fmt_shape(a.shape)} and b {fmt_shape(b.shape)} must have the same shape")
    return graph._add("add", [a, b], a.shape, name)


@graph_method()
def bias_add(graph, x, bias, name=None):
    """x + bias broadcast over axis 1 (channels / features) of [N, C, ...]."""
    op = "bias_add"
    x = graph._value(x, op, "input")
    bias = graph._value(bias, op, "bias")
    if len(x.shape) < 2:
        raise ValueError(f"{op}: input must have rank >= 2 (N, C, ...), got {fmt_shape(x.shape)}")
    if bias.shape != (x.shape[1],):
        raise ValueError(f"{op}: bias must have shape [{x.shape[1]}] for input {fmt_shape(x.shape)}, "
                         f"got {fmt_shape(bias.shape)}")
    return graph._add(op, [x, bias], x.shape, name)


@graph_method()
def bias_grad(graph, grad_output, name=None):
    """Sum of grad_output over every axis but 1: the gradient of a bias added
    along axis 1 (conv channels, dense features)."""
    op = "bias_grad"
    dy = graph._value(grad_output, op, "grad_output")
    if len(dy.shape) < 2:
        raise ValueError(f"{op}: grad_output must have rank >= 2 (N, C, ...), got {fmt_shape(dy.shape)}")
    return graph._add(op, [dy], (dy.shape[1],), name)


@graph_method()
def reshape(graph, x, shape, name=None):
    """Same values, new static shape (one dim may be -1); no copy is made:
    the compiled plan aliases the input's bytes."""
    op = "reshape"
    x = graph._value(x, op, "input")
    try:
        dims = [int(d) for d in shape]
    except TypeError:
        raise TypeError(f"{op}: shape must be a sequence of ints, got {shape!r}") from None
    size = math.prod(x.shape)
    if dims.count(-1) > 1 or any(d < 1 and d != -1 for d in dims):
        raise ValueError(f"{op}: shape must be positive ints with at most one -1, got {list(dims)}")
    if -1 in dims:
        known = math.prod([d for d in dims if d != -1])
        if size % known:
            raise ValueError(f"{op}: cannot reshape input {fmt_shape(x.shape)} ({size} values) to {list(dims)}")
        dims[dims.index(-1)] = size // known
    if math.prod(dims) != size:
        raise ValueError(f"{op}: cannot reshape input {fmt_shape(x.shape)} ({size} values) to {list(dims)}")
    return graph._add(op, [x], tuple(dims), name)


@graph_method()
def flatten(graph, x, start_dim=1, end_dim=-1, name=None):
    """torch.flatten: merge dims start_dim..end_dim (a zero-copy reshape)."""
    # Builds a "reshape" node: flatten is only a way to compute the new shape.
    x = graph._value(x, "flatten", "input")
    r = len(x.shape)
    s = start_dim + r if start_dim < 0 else start_dim
    e = end_dim + r if end_dim < 0 else end_dim
    if not (0 <= s <= e < r):
        raise ValueError(f"flatten: start_dim={start_dim}, end_dim={end_dim} invalid for input {fmt_shape(x.shape)}")
    merged = math.prod(x.shape[s:e + 1])
    return graph.reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1:], name=name)


@graph_method()
def linear(graph, x, weight, bias=None, name=None):
    """Dense layer as torch.nn.functional.linear: x [N, in] . weight[out, in]^T + bias[out]."""
    op = "linear"
    x = graph._value(x, op, "input")
    w = graph._value(weight, op, "weight")
    if len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"{op}: expected input [N, in] and weight [out, in], got input {fmt_shape(x.shape)}, "
                         f"weight {fmt_shape(w.shape)}")
    inputs = [x, w]
    if bias is not None:
        bias = graph._value(bias, op, "bias")
        if bias.shape != (w.shape[0],):
            raise ValueError(f"{op}: bias must have shape [{w.shape[0]}], got {fmt_shape(bias.shape)}")
        inputs.append(bias)
    return graph._add(op, inputs, (x.shape[0], w.shape[0]), name)


@graph_method()
def linear_backward_input(graph, grad_output, weight, name=None):
    """dx [N, in] = grad_output [N, out] . weight [out, in]."""
    op = "linear_backward_input"
    dy = graph._value(grad_output, op, "grad_output")
    w = graph._value(weight, op, "weight")
    if len(dy.shape) != 2 or len(w.shape) != 2 or dy.shape[1] != w.shape[0]:
        raise ValueError(f"{op}: expected grad_output [N, out] and weight [out, in], got grad_output "
                         f"{fmt_shape(dy.shape)}, weight {fmt_shape(w.shape)}")
    return graph._add(op, [dy, w], (dy.shape[0], w.shape[1]), name)


@graph_method()
def linear_backward_weight(graph, x, grad_output, name=None):
    """dW [out, in] = grad_output^T [out, N] . x [N, in]."""
    op = "linear_backward_weight"
    x = graph._value(x, op, "input")
    dy = graph._value(grad_output, op, "grad_output")
    if len(dy.shape) != 2 or len(x.shape) != 2 or dy.shape[0] != x.shape[0]:
        raise ValueError(f"{op}: expected input [N, in] and grad_output [N, out], got input "
                         f"{fmt_shape(x.shape)}, grad_output {fmt_shape(dy.shape)}")
    return graph._add(op, [x, dy], (dy.shape[1], x.shape[1]), name)


def _check_xent(op, zs, ls):
    if len(zs) != 2:
        raise ValueError(f"{op}: logits must have shape [N, classes], got {fmt_shape(zs)}")
    if tuple(ls) != (zs[0],):
        raise ValueError(f"{op}: labels must have shape [{zs[0]}] (one class index per row of logits "
                         f"{fmt_shape(zs)}), got {fmt_shape(ls)}")


@graph_method()
def softmax_cross_entropy(graph, logits, labels, name=None):
    """Mean over the batch of -log softmax(logits)[label] (torch's cross_entropy
    with class-index targets); labels [N] hold class indices as floats.  A
    label outside [0, K) gives NaN.  The result has shape ()."""
    op = "softmax_cross_entropy"
    z = graph._value(logits, op, "logits")
    lab = graph._value(labels, op, "labels")
    _check_xent(op, z.shape, lab.shape)
    return graph._add(op, [z, lab], (), name)


@graph_method()
def softmax_cross_entropy_backward(graph, logits, labels, grad_loss, name=None):
    """d loss / d logits = grad_loss / N * (softmax(logits) - onehot(labels))."""
    op = "softmax_cross_entropy_backward"
    z = graph._value(logits, op, "logits")
    lab = graph._value(labels, op, "labels")
    gl = graph._value(grad_loss, op, "grad_loss")
    _check_xent(op, z.shape, lab.shape)
    if math.prod(gl.shape) != 1:
        raise ValueError(f"{op}: grad_loss must hold one value, got shape {fmt_shape(gl.shape)}")
    return graph._add(op, [z, lab, gl], z.shape, name)


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class BiasAddThunk(Thunk):
    """y[n, c, s] = x[n, c, s] + bias[c]."""
    x: Slice
    bias: Slice
    y: Slice
    n: int
    c: int
    s: int
    max_threads: int

    kind: ClassVar[str] = "bias_add"
    reads: ClassVar[tuple] = ("x", "bias")
    writes: ClassVar[tuple] = ("y",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _train.BiasAddLaunch(view(self.x), view(self.bias), view(self.y), self.n, self.c, self.s,
                                    self.max_threads)


@dataclass(frozen=True, repr=False)
class BiasGradThunk(Thunk):
    """db[c] = sum over n, s of dy[n, c, s]."""
    dy: Slice
    db: Slice
    n: int
    c: int
    s: int
    max_threads: int

    kind: ClassVar[str] = "bias_grad"
    reads: ClassVar[tuple] = ("dy",)
    writes: ClassVar[tuple] = ("db",)

    def bind(self, view):
        return _train.BiasGradLaunch(view(self.dy), view(self.db), self.n, self.c, self.s, self.max_threads)


@dataclass(frozen=True, repr=False)
class ElementwiseThunk(Thunk):
    """out = f(a[, b]) elementwise; `op` is one of the _train.ELEM_* codes
    (relu, relu backward mask, add).  Each subclass's kind names its op for
    profiles."""
    a: Slice
    b: Optional[Slice]
    out: Slice
    op: int
    size: int
    max_threads: int

    kind: ClassVar[str] = "elementwise"
    reads: ClassVar[tuple] = ("a", "b")
    writes: ClassVar[tuple] = ("out",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _train.ElementwiseLaunch(self.op, view(self.a), view_or_none(view, self.b), view(self.out),
                                        self.size, self.max_threads)


@dataclass(frozen=True, repr=False)
class ReluThunk(ElementwiseThunk):
    kind: ClassVar[str] = "relu"


@dataclass(frozen=True, repr=False)
class ReluBackwardThunk(ElementwiseThunk):
    kind: ClassVar[str] = "relu_backward"


@dataclass(frozen=True, repr=False)
class AddThunk(ElementwiseThunk):
    kind: ClassVar[str] = "add"


@dataclass(frozen=True, repr=False)
class GemmThunk(Thunk):
    """c[m, n] = op(a) . op(b) (+ bias[n] per row): the dense layer and its two
    gradients, one GEMM split into panels over the threads."""
    a: Slice
    b: Slice
    bias: Optional[Slice]
    c: Slice
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    max_threads: int

    kind: ClassVar[str] = "gemm"
    reads: ClassVar[tuple] = ("a", "b", "bias")
    writes: ClassVar[tuple] = ("c",)

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def bind(self, view):
        # the bias is Gemm's C broadcast along rows: element stride 0 per row, 1 per column
        return _matmul.GemmLaunch(view(self.a), view(self.b), view_or_none(view, self.bias), view(self.c),
                                  self.m, self.n, self.k, self.trans_a, self.trans_b, 1.0, 1.0, 0, 1,
                                  self.max_threads)


@dataclass(frozen=True, repr=False)
class SoftmaxCrossEntropyThunk(Thunk):
    logits: Slice
    labels: Slice
    loss: Slice
    n: int
    k: int

    kind: ClassVar[str] = "softmax_cross_entropy"
    reads: ClassVar[tuple] = ("logits", "labels")
    writes: ClassVar[tuple] = ("loss",)

    def bind(self, view):
        return _train.SoftmaxCrossEntropyLaunch(view(self.logits), view(self.labels), view(self.loss),
                                                self.n, self.k)


@dataclass(frozen=True, repr=False)
class SoftmaxCrossEntropyBackwardThunk(Thunk):
    logits: Slice
    labels: Slice
    grad_loss: Slice
    dlogits: Slice
    n: int
    k: int

    kind: ClassVar[str] = "softmax_cross_entropy_backward"
    reads: ClassVar[tuple] = ("logits", "labels", "grad_loss")
    writes: ClassVar[tuple] = ("dlogits",)

    def bind(self, view):
        return _train.SoftmaxCrossEntropyBackwardLaunch(view(self.logits), view(self.labels),
                                                        view(self.grad_loss), view(self.dlogits),
                                                        self.n, self.k)


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

def _numel(shape):
    return math.prod(shape)


_ELEMENTWISE = {"relu": (ReluThunk, _train.ELEM_RELU),
                "relu_backward": (ReluBackwardThunk, _train.ELEM_RELU_BACKWARD),
                "add": (AddThunk, _train.ELEM_ADD)}


@compile_rule(*_ELEMENTWISE)
def compile_elementwise(ctx, node):
    record, op = _ELEMENTWISE[node.op]
    b = ctx.buf(node.inputs[1]) if len(node.inputs) > 1 else None
    ctx.emit(record(node.name, ctx.buf(node.inputs[0]), b, ctx.buf(node.id), op, _numel(node.shape),
                    ctx.num_threads))


@compile_rule("bias_add")
def compile_bias_add(ctx, node):
    n, c = node.shape[:2]
    ctx.emit(BiasAddThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.id),
                          n, c, _numel(node.shape[2:]), ctx.num_threads))


@compile_rule("bias_grad")
def compile_bias_grad(ctx, node):
    dy_shape = ctx.graph.node(node.inputs[0]).shape
    ctx.emit(BiasGradThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dy_shape[0], dy_shape[1],
                           _numel(dy_shape[2:]), ctx.num_threads))


@compile_rule("reshape")
def compile_reshape(ctx, node):
    ctx.alias(node.id, node.inputs[0])


@compile_rule("linear")
def compile_linear(ctx, node):
    x_shape = ctx.graph.node(node.inputs[0]).shape
    bias = ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None
    n_rows, n_out = node.shape
    check_blas_dims(f"linear {node.name!r}", {"rows": n_rows, "out_features": n_out, "in_features": x_shape[1]})
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), bias, ctx.buf(node.id),
                       n_rows, n_out, x_shape[1], False, True, ctx.num_threads))


@compile_rule("linear_backward_input")
def compile_linear_backward_input(ctx, node):
    dy_shape = ctx.graph.node(node.inputs[0]).shape          # dx = dy [N, out] . W [out, in]
    check_blas_dims(f"{node.op} {node.name!r}", {"rows": node.shape[0], "in_features": node.shape[1],
                                                 "out_features": dy_shape[1]})
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), None, ctx.buf(node.id),
                       node.shape[0], node.shape[1], dy_shape[1], False, False, ctx.num_threads))


@compile_rule("linear_backward_weight")
def compile_linear_backward_weight(ctx, node):
    x_shape = ctx.graph.node(node.inputs[0]).shape           # dW = dy^T [out, N] . x [N, in]
    check_blas_dims(f"{node.op} {node.name!r}", {"out_features": node.shape[0], "in_features": node.shape[1],
                                                 "rows": x_shape[0]})
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[1]), ctx.buf(node.inputs[0]), None, ctx.buf(node.id),
                       node.shape[0], node.shape[1], x_shape[0], True, False, ctx.num_threads))


@compile_rule("softmax_cross_entropy")
def compile_softmax_cross_entropy(ctx, node):
    n, k = ctx.graph.node(node.inputs[0]).shape
    ctx.emit(SoftmaxCrossEntropyThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                      ctx.buf(node.id), n, k))


@compile_rule("softmax_cross_entropy_backward")
def compile_softmax_cross_entropy_backward(ctx, node):
    n, k = node.shape
    ctx.emit(SoftmaxCrossEntropyBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                              ctx.buf(node.inputs[2]), ctx.buf(node.id), n, k))


# ---------------------------------------------------------------------------
# Gradient rules (the *_backward ops and bias_grad are not differentiable)
# ---------------------------------------------------------------------------

@gradient("relu")
def _vjp_relu(g, node, dy, needs):
    return [g.relu_backward(dy, node)]


@gradient("add")
def _vjp_add(g, node, dy, needs):
    return [dy, dy]


@gradient("bias_add")
def _vjp_bias_add(g, node, dy, needs):
    return [dy, g.bias_grad(dy) if needs[1] else None]


@gradient("reshape")
def _vjp_reshape(g, node, dy, needs):
    return [g.reshape(dy, g.node(node.inputs[0]).shape)]


@gradient("linear")
def _vjp_linear(g, node, dy, needs):
    x, w = g.node(node.inputs[0]), g.node(node.inputs[1])
    out = [None] * len(node.inputs)
    if needs[0]:
        out[0] = g.linear_backward_input(dy, w)
    if needs[1]:
        out[1] = g.linear_backward_weight(x, dy)
    if len(node.inputs) > 2 and needs[2]:
        out[2] = g.bias_grad(dy)
    return out


@gradient("softmax_cross_entropy")
def _vjp_softmax_cross_entropy(g, node, dy, needs):
    if needs[1]:
        raise ValueError(f"grads: the labels of {node.name!r} are class indices, not differentiable")
    z, labels = g.node(node.inputs[0]), g.node(node.inputs[1])
    return [g.softmax_cross_entropy_backward(z, labels, dy), None]
