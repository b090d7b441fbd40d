"""Binary arithmetic with numpy broadcasting, and inference batch norm:

* ``broadcast_add``, ``sub``, ``mul``, ``div``: y = a (op) b, the shapes
  broadcast as numpy does (a squeeze-excitation scale [N, C, 1, 1] times the
  feature map [N, C, H, W]); the dense family's ``add`` is the same-shape
  case, which ONNX ``Add`` uses when the shapes agree;
* ``batch_norm``: y = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c]
  over axis 1 of [N, C, ...], the four statistics constants, folded at
  compile into y = x * k[c] + b[c] (computed in float64).

Kernels: src/_elementwise.pyx (BinaryLaunch, ChannelAffineLaunch).
"""
from dataclasses import dataclass
from typing import ClassVar, Tuple

import numpy as np

from .. import _elementwise
from ..ir import fmt_shape
from ..registry import compile_rule, graph_method, onnx_op
from ..thunks import Slice, Thunk
from ._common import (all_const, broadcast_shape, contiguous_strides, emit, expect_inputs, folded, fresh,
                      numel)

_BINARY = {"broadcast_add": (_elementwise.BINARY_ADD, "a + b", np.add),
           "sub": (_elementwise.BINARY_SUB, "a - b", np.subtract),
           "mul": (_elementwise.BINARY_MUL, "a * b", np.multiply),
           "div": (_elementwise.BINARY_DIV, "a / b", np.divide)}
MAX_RANK = _elementwise.MAX_RANK


def _binary_builder(op):
    doc = _BINARY[op][1]

    def build(graph, a, b, name=None):
        a = graph._value(a, op, "a")
        b = graph._value(b, op, "b")
        shape = broadcast_shape(a.shape, b.shape, op)
        if len(_collapse(shape, a.shape, b.shape)[0]) > MAX_RANK:
            raise ValueError(f"{op}: broadcasting {fmt_shape(a.shape)} with {fmt_shape(b.shape)} needs more "
                             f"than {MAX_RANK} axes")
        return graph._add(op, [a, b], shape, name)

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"{doc} elementwise with numpy broadcasting."
    return build


def _collapse(out, a_shape, b_shape):
    """(dims, strides_a, strides_b): the output dims with adjacent axes merged
    where both operands stay contiguous-or-broadcast across the seam."""
    r = len(out)
    pa = (1,) * (r - len(a_shape)) + tuple(a_shape)
    pb = (1,) * (r - len(b_shape)) + tuple(b_shape)
    sa = [s if d != 1 else 0 for d, s in zip(pa, contiguous_strides(pa))]
    sb = [s if d != 1 else 0 for d, s in zip(pb, contiguous_strides(pb))]
    dims, ka, kb = [], [], []
    for d, x, y in zip(out, sa, sb):
        if d == 1:
            continue
        if dims and ka[-1] == x * d and kb[-1] == y * d:
            dims[-1] *= d
            ka[-1], kb[-1] = x, y
        else:
            dims.append(d)
            ka.append(x)
            kb.append(y)
    return dims or [1], ka or [0], kb or [0]


@dataclass(frozen=True, repr=False)
class BinaryThunk(Thunk):
    a: Slice
    b: Slice
    y: Slice
    op: int
    dims: Tuple[int, ...]
    strides_a: Tuple[int, ...]
    strides_b: Tuple[int, ...]
    max_threads: int

    kind: ClassVar[str] = "binary"
    reads: ClassVar[tuple] = ("a", "b")
    writes: ClassVar[tuple] = ("y",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _elementwise.BinaryLaunch(self.op, view(self.a), view(self.b), view(self.y), self.dims,
                                         self.strides_a, self.strides_b, self.max_threads)


_THUNKS = {}
for _op in _BINARY:
    graph_method(_op)(_binary_builder(_op))
    _THUNKS[_op] = dataclass(frozen=True, repr=False)(
        type(f"{_op.title().replace('_', '')}Thunk", (BinaryThunk,),
             {"__annotations__": {}, "kind": _op, "__module__": __name__}))
del _op


@compile_rule(*_BINARY)
def compile_binary(ctx, node):
    a, b = (ctx.graph.node(i) for i in node.inputs)
    dims, sa, sb = _collapse(node.shape, a.shape, b.shape)
    pad = MAX_RANK - len(dims)
    ctx.emit(_THUNKS[node.op](node.name, ctx.buf(a.id), ctx.buf(b.id), ctx.buf(node.id), _BINARY[node.op][0],
                              (1,) * pad + tuple(dims), (0,) * pad + tuple(sa), (0,) * pad + tuple(sb),
                              ctx.num_threads))


# ---------------------------------------------------------------------------
# Batch normalization (inference)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BatchNormAttrs:
    epsilon: float
    relu: bool = False        # a relu fused after it (passes.fuse_norm_relu; blocked batch norms only)


@graph_method()
def batch_norm(graph, x, scale, bias, mean, var, epsilon=1e-5, name=None):
    """Inference batch norm over axis 1 of x [N, C, ...]; scale, bias, mean
    and var are [C] constants (arrays or constant nodes)."""
    op = "batch_norm"
    x = graph._value(x, op, "input")
    if len(x.shape) < 2:
        raise ValueError(f"{op}: input must have rank >= 2 (N, C, ...), got {fmt_shape(x.shape)}")
    stats = []
    for v, arg in ((scale, "scale"), (bias, "bias"), (mean, "mean"), (var, "var")):
        v = graph._value(v, op, arg)
        if v.op != "constant":
            raise ValueError(f"{op}: {arg} must be a constant (inference batch norm folds the statistics "
                             f"at compile), got the {v.op} node {v.name!r}")
        if v.shape != (x.shape[1],):
            raise ValueError(f"{op}: {arg} must have shape [{x.shape[1]}], got {fmt_shape(v.shape)}")
        stats.append(v)
    eps = float(epsilon)
    if not eps >= 0:
        raise ValueError(f"{op}: epsilon must be >= 0, got {epsilon!r}")
    return graph._add(op, [x] + stats, x.shape, name, BatchNormAttrs(eps))


@dataclass(frozen=True, repr=False)
class ChannelAffineThunk(Thunk):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c]."""
    x: Slice
    scale: Slice
    shift: Slice
    y: Slice
    n: int
    c: int
    s: int
    max_threads: int

    kind: ClassVar[str] = "batch_norm"
    reads: ClassVar[tuple] = ("x", "scale", "shift")
    writes: ClassVar[tuple] = ("y",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _elementwise.ChannelAffineLaunch(view(self.x), view(self.scale), view(self.shift), view(self.y),
                                                self.n, self.c, self.s, self.max_threads)


def batch_norm_coefficients(scale, bias, mean, var, epsilon):
    """(k, b) in float64 with batch_norm(x) = x * k + b."""
    k = np.asarray(scale, np.float64) / np.sqrt(np.asarray(var, np.float64) + epsilon)
    return k, np.asarray(bias, np.float64) - np.asarray(mean, np.float64) * k


@compile_rule("batch_norm")
def compile_batch_norm(ctx, node):
    if getattr(node.attrs, "relu", False):
        raise ValueError(f"batch_norm {node.name!r}: a fused relu runs on the blocked layout only "
                         "(batch_norm_nchwc)")
    x = ctx.graph.node(node.inputs[0])
    scale, bias, mean, var = (ctx.graph.node(i).value for i in node.inputs[1:])
    k, b = batch_norm_coefficients(scale, bias, mean, var, node.attrs.epsilon)
    ctx.emit(ChannelAffineThunk(node.name, ctx.buf(x.id), ctx.constant(k, node.name + ".scale"),
                                ctx.constant(b, node.name + ".shift"), ctx.buf(node.id), x.shape[0], x.shape[1],
                                numel(x.shape[2:]), ctx.num_threads))


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

_ONNX_BINARY = {"Add": "broadcast_add", "Sub": "sub", "Mul": "mul", "Div": "div"}


def _legacy_align(nc, a_shape, b):
    """Opset < 7: b broadcasts only with broadcast=1, aligned at `axis`."""
    if not int(nc.attr("broadcast", 0)):
        return b
    axis = nc.attr("axis")
    if axis is None:
        return b
    r = len(a_shape)
    axis = int(axis) + r if int(axis) < 0 else int(axis)
    bs = tuple(b.shape)
    if axis + len(bs) > r:
        raise ValueError(f"{nc.where}: B {list(bs)} does not fit A {list(a_shape)} at axis {axis}")
    new = (1,) * axis + bs + (1,) * (r - axis - len(bs))
    return b.reshape(new) if isinstance(b, np.ndarray) else nc.graph.reshape(b, new, name=fresh(nc, suffixes=(".b",)) + ".b")


def _binary_converter(onnx_type):
    op = _ONNX_BINARY[onnx_type]
    np_fn = _BINARY[op][2]

    def convert(nc):
        legacy = nc.version < 7
        nc.check_attrs(("broadcast", "axis") + (("consumed_inputs",) if nc.version < 6 else ()) if legacy else ())
        expect_inputs(nc, 2, 2)
        if all_const(nc):
            a, b = nc.const(0, "A"), nc.const(1, "B")
            if legacy:
                b = _legacy_align(nc, a.shape, b)
            if a.dtype != b.dtype:
                raise ValueError(f"{nc.where}: A is {a.dtype} and B is {b.dtype}; ONNX requires one type")
            if a.dtype.kind in "iu" and op == "div":
                out = np.trunc(a / b).astype(a.dtype)        # integer division truncates (C semantics)
            else:
                out = np_fn(a, b).astype(a.dtype)
            folded(nc, out)
            return
        a, b = nc.tensor(0, "A"), nc.tensor(1, "B")
        if legacy:
            if not int(nc.attr("broadcast", 0)) and a.shape != b.shape:
                raise ValueError(f"{nc.where}: A {list(a.shape)} and B {list(b.shape)} differ and broadcast=0")
            b = _legacy_align(nc, a.shape, b)
        if op == "broadcast_add" and a.shape == b.shape:
            emit(nc, nc.graph.add(a, b, name=fresh(nc)))
        else:
            emit(nc, getattr(nc.graph, op)(a, b, name=fresh(nc)))
    return convert


for _t in _ONNX_BINARY:
    onnx_op(_t, versions=(1, 14))(_binary_converter(_t))
del _t


@onnx_op("BatchNormalization", versions=(1, 15), parameter_inputs=(1, 2, 3, 4))
def _onnx_batch_norm(nc):
    allowed = ["epsilon", "momentum"]
    if nc.version < 9:
        allowed.append("spatial")
    if nc.version < 7:
        allowed.append("is_test")
    if nc.version < 6:
        allowed.append("consumed_inputs")
    if nc.version >= 14:
        allowed.append("training_mode")
    nc.check_attrs(allowed)
    expect_inputs(nc, 5, 5)
    if int(nc.attr("spatial", 1)) != 1:
        nc.unsupported("spatial", nc.attr("spatial"), "per-activation statistics")
    if int(nc.attr("training_mode", 0)) != 0:
        nc.unsupported("training_mode", nc.attr("training_mode"), "rlx_cpu imports inference graphs")
    if sum(1 for o in nc.node.output[1:] if o):
        raise NotImplementedError(f"{nc.where}: the running-statistics outputs are training outputs; "
                                  "only Y (inference) is supported")
    x = nc.tensor(0, "X")
    stats = []
    for i, arg in ((1, "scale"), (2, "B"), (3, "mean"), (4, "var")):
        nc.const(i, arg)             # compile-time: inference batch norm folds its statistics at compile
        stats.append(nc.tensor(i, arg))
    emit(nc, nc.graph.batch_norm(x, *stats, epsilon=float(nc.attr("epsilon", 1e-5)), name=fresh(nc)))
