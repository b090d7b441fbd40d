"""Reductions of inference graphs, float32 in and out, double accumulation:

* ``reduce_mean``: mean over a set of axes (kept as size 1 or dropped);
* ``softmax``: exp(x - max) / sum exp(x - max) along one axis.

Both run on an [outer, k, inner] view; reduced axes that are not adjacent are
first moved together by a transpose (the tensor family's gather).
Kernels: src/_reduce.pyx.
"""
from dataclasses import dataclass
from typing import ClassVar, Tuple

import numpy as np

from .. import _reduce
from ..ir import fmt_shape
from ..registry import compile_rule, graph_method, onnx_op
from ..thunks import Slice, Thunk
from ._common import all_const, emit, expect_inputs, folded, fresh, norm_axes, norm_axis, numel
from .tensor import MAX_RANK, GatherThunk, gather_tables


@dataclass(frozen=True)
class ReduceAttrs:
    axes: Tuple[int, ...]
    keepdims: bool


@dataclass(frozen=True)
class SoftmaxAttrs:
    axis: int


@graph_method()
def reduce_mean(graph, x, axes=None, keepdims=True, name=None):
    """Mean of x over `axes` (default: all)."""
    op = "reduce_mean"
    x = graph._value(x, op, "input")
    r = len(x.shape)
    if r > MAX_RANK:
        raise ValueError(f"{op}: rank {r} exceeds the supported {MAX_RANK}")
    axes = tuple(sorted(norm_axes(range(r) if axes is None else axes, r, op)))
    if keepdims:
        shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
    else:
        shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
    return graph._add(op, [x], shape, name, ReduceAttrs(axes, bool(keepdims)))


@graph_method()
def softmax(graph, x, axis=-1, name=None):
    """Softmax of x along `axis`."""
    op = "softmax"
    x = graph._value(x, op, "input")
    axis = norm_axis(axis, len(x.shape), op)
    return graph._add(op, [x], x.shape, name, SoftmaxAttrs(axis))


@dataclass(frozen=True, repr=False)
class ReduceMeanThunk(Thunk):
    x: Slice
    y: Slice
    outer: int
    k: int
    inner: int
    max_threads: int

    kind: ClassVar[str] = "reduce_mean"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _reduce.ReduceMeanLaunch(view(self.x), view(self.y), self.outer, self.k, self.inner, self.max_threads)


@dataclass(frozen=True, repr=False)
class SoftmaxThunk(Thunk):
    x: Slice
    y: Slice
    outer: int
    k: int
    inner: int
    max_threads: int

    kind: ClassVar[str] = "softmax"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _reduce.SoftmaxLaunch(view(self.x), view(self.y), self.outer, self.k, self.inner, self.max_threads)


@dataclass(frozen=True, repr=False)
class ReduceTransposeThunk(GatherThunk):
    kind: ClassVar[str] = "reduce_transpose"


@compile_rule("reduce_mean")
def compile_reduce_mean(ctx, node):
    x = ctx.graph.node(node.inputs[0])
    axes = node.attrs.axes
    src = ctx.buf(x.id)
    shape = x.shape
    if axes and list(axes) != list(range(axes[0], axes[-1] + 1)):
        # move the reduced axes to the end, keeping order
        keep = [k for k in range(len(shape)) if k not in axes]
        perm = keep + list(axes)
        dims, tables = gather_tables(shape, perm, [range(shape[p]) for p in perm])
        tmp = ctx.temp(numel(shape) * 4, node.name + ".transposed")
        ctx.emit(ReduceTransposeThunk(node.name + ".transpose", src, tmp, dims, tables, 0.0, ctx.num_threads))
        src, shape, axes = tmp, tuple(shape[p] for p in perm), tuple(range(len(keep), len(shape)))
    if not axes:
        outer, k, inner = numel(shape), 1, 1
    else:
        outer, k, inner = numel(shape[:axes[0]]), numel(shape[axes[0]:axes[-1] + 1]), numel(shape[axes[-1] + 1:])
    ctx.emit(ReduceMeanThunk(node.name, src, ctx.buf(node.id), outer, k, inner, ctx.num_threads))


@compile_rule("softmax")
def compile_softmax(ctx, node):
    a = node.attrs.axis
    s = node.shape
    ctx.emit(SoftmaxThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), numel(s[:a]), s[a], numel(s[a + 1:]),
                          ctx.num_threads))


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

@onnx_op("ReduceMean", versions=(1, 18), parameter_inputs=(1,))
def _onnx_reduce_mean(nc):
    if nc.version < 18:
        nc.check_attrs(("axes", "keepdims"))
        expect_inputs(nc, 1, 1)
        axes = nc.attr("axes")
        noop = False
    else:
        nc.check_attrs(("keepdims", "noop_with_empty_axes"))
        expect_inputs(nc, 1, 2)
        v = nc.const(1, "axes")
        axes = None if v is None else [int(e) for e in v.reshape(-1)]
        noop = bool(nc.attr("noop_with_empty_axes", 0))
    keepdims = bool(nc.attr("keepdims", 1))
    data = nc.imp.values[nc.node.input[0]]
    if axes is not None and len(axes) == 0:
        axes = None
    if axes is None and noop:
        nc.imp.set_output(nc.out_name(), data)
        return
    if all_const(nc):
        x = nc.const(0, "data")
        folded(nc, np.mean(x, axis=None if axes is None else tuple(axes), keepdims=keepdims).astype(x.dtype))
        return
    emit(nc, nc.graph.reduce_mean(nc.tensor(0, "data"), axes, keepdims, name=fresh(nc)))


@onnx_op("Softmax", versions=(1, 13))
def _onnx_softmax(nc):
    nc.check_attrs(("axis",))
    expect_inputs(nc, 1, 1)
    if all_const(nc):
        x = nc.const(0, "input")
        r = x.ndim
        if nc.version >= 13:
            axes = (norm_axis(nc.attr("axis", -1), r, nc.where),)
        else:
            axes = tuple(range(norm_axis(nc.attr("axis", 1), r, nc.where), r))
        e = np.exp(x - x.max(axis=axes, keepdims=True))
        folded(nc, (e / e.sum(axis=axes, keepdims=True)).astype(x.dtype))
        return
    x = nc.tensor(0, "input")
    r = len(x.shape)
    if nc.version >= 13:
        emit(nc, nc.graph.softmax(x, int(nc.attr("axis", -1)), name=fresh(nc)))
        return
    # opset < 13: softmax over the flattened trailing block [axis:]
    axis = norm_axis(nc.attr("axis", 1), r, nc.where)
    flat = nc.graph.reshape(x, (numel(x.shape[:axis]), numel(x.shape[axis:])),
                            name=fresh(nc, suffixes=(".2d", ".softmax")) + ".2d")
    y = nc.graph.softmax(flat, 1, name=flat.name[:-3] + ".softmax")
    emit(nc, nc.graph.reshape(y, x.shape, name=fresh(nc)))
