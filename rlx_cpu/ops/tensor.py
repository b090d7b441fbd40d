"""Data movement of inference graphs (float32; no arithmetic):

* ``transpose``: y = x.transpose(perm);
* ``slice``: y = x[starts:ends:steps] along the listed axes (numpy basic
  slicing; negative steps included);
* ``pad``: constant / reflect / edge padding, per-axis (begin, end) amounts
  (negative amounts crop);
* ``gather``: y = numpy.take(x, indices, axis) with compile-time indices;
* ``concat``: numpy.concatenate along one axis.

Reshape, Flatten, Squeeze and Unsqueeze are the dense family's zero-copy
``reshape``.  ONNX Shape, Cast, ConstantOfShape, Dropout (inference) and
Split convert here too; nodes whose inputs are all compile-time arrays are
folded with numpy at import (see ``_common``).

Transpose, slice, pad and gather are one kernel: a gather through per-axis
offset tables built at compile (src/_tensor.pyx GatherLaunch); concat and a
unit-step slice along one axis are row block copies (BlockCopyLaunch).
"""
from dataclasses import dataclass
from typing import ClassVar, Tuple

import numpy as np

from .. import _tensor
from ..ir import Node, fmt_shape
from ..registry import compile_rule, graph_method, onnx_op
from ..thunks import Slice, Thunk
from ._common import (all_const, contiguous_strides, emit, expect_inputs, folded, fresh, is_const, norm_axes,
                      norm_axis, numel)

MAX_RANK = _tensor.MAX_RANK
PAD_MODES = ("constant", "reflect", "edge")


# ---------------------------------------------------------------------------
# Attrs: every gather-style op is described by its per-axis index maps
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class GatherAttrs:
    """Output axis k reads input axis perm[k] at the indices index_maps[k]
    (-1: padding, value pad_value)."""
    perm: Tuple[int, ...]
    index_maps: Tuple[Tuple[int, ...], ...]
    pad_value: float = 0.0

    def __repr__(self):
        return f"GatherAttrs(perm={list(self.perm)}, sizes={[len(m) for m in self.index_maps]})"


@dataclass(frozen=True)
class ConcatAttrs:
    axis: int


def _check_rank(op, shape):
    if len(shape) > MAX_RANK:
        raise ValueError(f"{op}: rank {len(shape)} ({fmt_shape(shape)}) exceeds the supported {MAX_RANK}")


def _add_gather(graph, op, x, perm, maps, pad_value, name):
    shape = tuple(len(m) for m in maps)
    if any(d < 1 for d in shape):
        raise ValueError(f"{op}: the result {fmt_shape(shape)} of input {fmt_shape(x.shape)} would be empty")
    return graph._add(op, [x], shape, name, GatherAttrs(tuple(perm), tuple(tuple(int(i) for i in m) for m in maps),
                                                        float(pad_value)))


@graph_method()
def transpose(graph, x, perm=None, name=None):
    """x.transpose(perm) (default: reverse the axes)."""
    op = "transpose"
    x = graph._value(x, op, "input")
    r = len(x.shape)
    _check_rank(op, x.shape)
    perm = tuple(range(r))[::-1] if perm is None else tuple(int(p) for p in perm)
    if sorted(perm) != list(range(r)):
        raise ValueError(f"{op}: perm {list(perm)} is not a permutation of the {r} axes of {fmt_shape(x.shape)}")
    return _add_gather(graph, op, x, perm, [range(x.shape[p]) for p in perm], 0.0, name)


def slice_indices(dim, start, end, step):
    """numpy's indices of x[start:end:step] along an axis of length dim (ONNX
    Slice clamping)."""
    return range(*slice(int(start), int(end), int(step)).indices(int(dim)))


@graph_method("slice")
def slice_op(graph, x, starts, ends, axes=None, steps=None, name=None):
    """x[starts[i]:ends[i]:steps[i]] along axes[i] (default axes 0..len-1,
    steps 1); out-of-range bounds clamp as in numpy."""
    op = "slice"
    x = graph._value(x, op, "input")
    r = len(x.shape)
    _check_rank(op, x.shape)
    starts, ends = [int(v) for v in starts], [int(v) for v in ends]
    axes = list(range(len(starts))) if axes is None else norm_axes(axes, r, op)
    steps = [1] * len(starts) if steps is None else [int(v) for v in steps]
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"{op}: starts, ends, axes and steps must have one entry per sliced axis, got "
                         f"{starts}, {ends}, {axes}, {steps}")
    if any(s == 0 for s in steps):
        raise ValueError(f"{op}: steps must not be 0, got {steps}")
    maps = [range(d) for d in x.shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        maps[a] = slice_indices(x.shape[a], s, e, st)
    return _add_gather(graph, op, x, range(r), maps, 0.0, name)


def pad_indices(dim, before, after, mode):
    """Source index per output position of one padded axis (-1: the constant)."""
    out = []
    for o in range(-before, dim + after):
        if 0 <= o < dim:
            out.append(o)
        elif mode == "constant":
            out.append(-1)
        elif mode == "edge":
            out.append(0 if o < 0 else dim - 1)
        else:                                   # reflect (the edge itself is not repeated)
            period = 2 * (dim - 1)
            m = o % period
            out.append(m if m < dim else period - m)
    return out


@graph_method()
def pad(graph, x, pads, mode="constant", value=0.0, name=None):
    """Pad x by pads = ((begin, end), ...) per axis; mode 'constant' (value),
    'reflect' or 'edge'.  Negative amounts crop."""
    op = "pad"
    x = graph._value(x, op, "input")
    r = len(x.shape)
    _check_rank(op, x.shape)
    try:
        pairs = [(int(b), int(e)) for b, e in pads]
    except (TypeError, ValueError):
        raise TypeError(f"{op}: pads must be (begin, end) pairs, got {pads!r}") from None
    if len(pairs) != r:
        raise ValueError(f"{op}: pads must have one (begin, end) pair per axis of {fmt_shape(x.shape)}, "
                         f"got {len(pairs)}")
    if mode not in PAD_MODES:
        raise ValueError(f"{op}: mode must be one of {list(PAD_MODES)}, got {mode!r}")
    maps = []
    for d, (b, e) in zip(x.shape, pairs):
        if mode == "reflect" and (max(b, e) > d - 1) and (b > 0 or e > 0):
            raise ValueError(f"{op}: reflect padding ({b}, {e}) needs an axis longer than the padding, got {d}")
        if mode == "edge" and d < 1:
            raise ValueError(f"{op}: edge padding of an empty axis")
        full = pad_indices(d, max(b, 0), max(e, 0), mode)
        lo = max(-b, 0)
        hi = len(full) - max(-e, 0)
        maps.append(full[lo:hi])
    return _add_gather(graph, op, x, range(r), maps, value, name)


@graph_method()
def gather(graph, x, indices, axis=0, name=None):
    """numpy.take(x, indices, axis) with compile-time integer indices
    (negative ones count from the end)."""
    op = "gather"
    x = graph._value(x, op, "input")
    r = len(x.shape)
    axis = norm_axis(axis, r, op)
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{op}: indices must be integers, got dtype {idx.dtype}")
    d = x.shape[axis]
    if idx.size and (idx.min() < -d or idx.max() >= d):
        raise ValueError(f"{op}: indices must lie in [{-d}, {d}) for axis {axis} of {fmt_shape(x.shape)}, got "
                         f"{idx.min()}..{idx.max()}")
    flat = [int(i) % d for i in idx.reshape(-1)]
    out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1:]
    _check_rank(op, out_shape)
    maps = [range(s) for s in x.shape]
    maps[axis] = flat
    node = _add_gather(graph, op, x, range(r), maps, 0.0, name)
    return node if node.shape == out_shape else graph.reshape(node, out_shape, name=(name or node.name) + ".shape")


@graph_method()
def concat(graph, xs, axis=0, name=None):
    """numpy.concatenate(xs, axis)."""
    op = "concat"
    xs = [graph._value(x, op, f"inputs[{i}]") for i, x in enumerate(xs)]
    if not xs:
        raise ValueError(f"{op}: at least one input is required")
    r = len(xs[0].shape)
    axis = norm_axis(axis, r, op)
    for i, x in enumerate(xs):
        if len(x.shape) != r or any(a != b for k, (a, b) in enumerate(zip(x.shape, xs[0].shape)) if k != axis):
            raise ValueError(f"{op}: inputs[{i}] {fmt_shape(x.shape)} does not match inputs[0] "
                             f"{fmt_shape(xs[0].shape)} outside axis {axis}")
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    return graph._add(op, xs, shape, name, ConcatAttrs(axis))


# ---------------------------------------------------------------------------
# Thunks and compile rules
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class GatherThunk(Thunk):
    """y = x gathered through per-axis offset tables (see _tensor.GatherLaunch)."""
    x: Slice
    y: Slice
    dims: Tuple[int, ...]
    tables: Tuple[int, ...]
    pad_value: float
    max_threads: int

    kind: ClassVar[str] = "gather"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def __repr__(self):
        return f"{self.kind}({self.op_name!r}, x={self.x!r}, y={self.y!r}, dims={list(self.dims)})"

    def bind(self, view):
        return _tensor.GatherLaunch(view(self.x), view(self.y), self.dims, np.asarray(self.tables, np.int64),
                                    self.pad_value, self.max_threads)


@dataclass(frozen=True, repr=False)
class BlockCopyThunk(Thunk):
    """dst[r * dst_row + dst_off + j] = src[r * src_row + src_off + j]."""
    src: Slice
    dst: Slice
    rows: int
    width: int
    src_row: int
    src_off: int
    dst_row: int
    dst_off: int
    max_threads: int

    kind: ClassVar[str] = "copy"
    reads: ClassVar[tuple] = ("src",)
    writes: ClassVar[tuple] = ("dst",)

    def bind(self, view):
        return _tensor.BlockCopyLaunch(view(self.src), view(self.dst), self.rows, self.width, self.src_row,
                                       self.src_off, self.dst_row, self.dst_off, self.max_threads)


_KINDS = {op: dataclass(frozen=True, repr=False)(
    type(f"{op.title()}Thunk", (GatherThunk,), {"__annotations__": {}, "kind": op, "__module__": __name__}))
    for op in ("transpose", "slice", "pad", "gather")}


def gather_tables(in_shape, perm, maps):
    """(dims, tables) of GatherLaunch for output axis k reading input axis
    perm[k] at maps[k], padded to MAX_RANK axes."""
    strides = contiguous_strides(in_shape)
    tables = []
    for p, m in zip(perm, maps):
        m = np.asarray(m, np.int64)
        tables.append(np.where(m < 0, -1, m * strides[p]))
    pad = MAX_RANK - len(tables)
    dims = (1,) * pad + tuple(len(t) for t in tables)
    flat = np.concatenate([np.zeros(pad, np.int64)] + tables) if tables else np.zeros(pad, np.int64)
    return dims, tuple(int(v) for v in flat)


def _unit_block(in_shape, attrs):
    """(rows, width, src_row, src_off) when the gather is a unit-step slice of
    one axis (identity elsewhere): a row block copy; else None."""
    if list(attrs.perm) != list(range(len(in_shape))):
        return None
    changed = [k for k, (d, m) in enumerate(zip(in_shape, attrs.index_maps)) if tuple(m) != tuple(range(d))]
    if len(changed) > 1:
        return None
    if not changed:
        return 1, numel(in_shape), 0, 0
    k = changed[0]
    m = attrs.index_maps[k]
    if any(i < 0 for i in m) or any(b - a != 1 for a, b in zip(m, m[1:])):
        return None
    inner = numel(in_shape[k + 1:])
    return numel(in_shape[:k]), len(m) * inner, in_shape[k] * inner, m[0] * inner


@compile_rule("transpose", "slice", "pad", "gather")
def compile_gather(ctx, node):
    x = ctx.graph.node(node.inputs[0])
    block = _unit_block(x.shape, node.attrs)
    if block is not None:
        rows, width, src_row, src_off = block
        ctx.emit(BlockCopyThunk(node.name, ctx.buf(x.id), ctx.buf(node.id), rows, width, src_row, src_off,
                                width, 0, ctx.num_threads))
        return
    dims, tables = gather_tables(x.shape, node.attrs.perm, node.attrs.index_maps)
    ctx.emit(_KINDS[node.op](node.name, ctx.buf(x.id), ctx.buf(node.id), dims, tables, node.attrs.pad_value,
                             ctx.num_threads))


# A Concat whose inputs are each one contiguous run of its output (one row:
# every axis before the concat axis has size 1, as for the channels of one
# image, in NCHW and in the blocked layout alike) has its inputs written
# straight into their runs where the planner allows it (ctx.can_place_in:
# intermediates no other node shares; the output may be a graph output) and
# the run starts 64-byte aligned, as every buffer does; only the other inputs
# are copied.  DenseNet's concatenations (each layer's new channels appended
# to the block's) then copy nothing: the whole block lives in its last
# concat's buffer.
CONCAT_IN_PLACE_ALIGN = 64


@compile_rule("concat")
def compile_concat(ctx, node):
    axis = node.attrs.axis
    inner = numel(node.shape[axis + 1:])
    rows = numel(node.shape[:axis])
    dst_row = node.shape[axis] * inner
    itemsize = np.dtype(node.dtype).itemsize
    placing = rows == 1 and ctx.can_hold_views(node.id)
    off = 0
    for k, i in enumerate(node.inputs):
        x = ctx.graph.node(i)
        width = x.shape[axis] * inner
        if (placing and (off * itemsize) % CONCAT_IN_PLACE_ALIGN == 0 and i not in node.inputs[:k]
                and i not in node.inputs[k + 1:] and ctx.can_place_in(i)):
            ctx.place_in(i, node.id, off * itemsize)
        else:
            ctx.emit(BlockCopyThunk(f"{node.name}[{off}:]", ctx.buf(i), ctx.buf(node.id), rows, width, width, 0,
                                    dst_row, off, ctx.num_threads))
        off += width


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

def _int_list(nc, i, arg):
    v = nc.const(i, arg)
    if v is None:
        return None
    if v.dtype.kind not in "iu":
        raise TypeError(f"{nc.where}: input {arg} must be integers, got {v.dtype}")
    return [int(e) for e in v.reshape(-1)]


def _const_input(nc, i, arg):
    v = nc.const(i, arg)
    if v is None:
        raise ValueError(f"{nc.where}: input {i} ({arg}) is required")
    return v


@onnx_op("Transpose", versions=(1, 25))
def _onnx_transpose(nc):
    nc.check_attrs(("perm",))
    expect_inputs(nc, 1, 1)
    perm = nc.attr("perm")
    if is_const(nc, 0):
        x = nc.const(0, "data")
        folded(nc, np.transpose(x, None if perm is None else [int(p) for p in perm]))
        return
    emit(nc, nc.graph.transpose(nc.tensor(0, "data"), perm, name=fresh(nc)))


@onnx_op("Slice", versions=(1, 13), parameter_inputs=(1, 2, 3, 4))
def _onnx_slice(nc):
    if nc.version < 10:
        nc.check_attrs(("starts", "ends", "axes"))
        expect_inputs(nc, 1, 1)
        starts, ends = nc.attr("starts"), nc.attr("ends")
        if starts is None or ends is None:
            raise ValueError(f"{nc.where}: attributes starts and ends are required")
        axes, steps = nc.attr("axes"), None
    else:
        nc.check_attrs(())
        expect_inputs(nc, 3, 5)
        starts, ends = _int_list(nc, 1, "starts"), _int_list(nc, 2, "ends")
        axes, steps = _int_list(nc, 3, "axes"), _int_list(nc, 4, "steps")
    data = nc.imp.values[nc.node.input[0]]
    r = len(data.shape)
    axes_n = list(range(len(starts))) if axes is None else norm_axes(axes, r, nc.where)
    steps = steps or [1] * len(starts)
    if len(starts) != len(ends) or len(axes_n) != len(starts) or len(steps) != len(starts):
        raise ValueError(f"{nc.where}: starts, ends, axes and steps must have the same length, got "
                         f"{starts}, {ends}, {axes}, {steps}")
    if is_const(nc, 0):
        sl = [np.s_[:]] * r
        for s, e, a, st in zip(starts, ends, axes_n, steps):
            if st == 0:
                raise ValueError(f"{nc.where}: steps must not be 0")
            sl[a] = np.s_[s:e:st]
        folded(nc, data[tuple(sl)])
        return
    if any(st != 0 and len(slice_indices(data.shape[a], s, e, st)) == 0
           for s, e, a, st in zip(starts, ends, axes_n, steps)):
        raise NotImplementedError(f"{nc.where}: starts {starts}, ends {ends} select nothing from "
                                  f"{list(data.shape)}; empty tensors are not supported")
    emit(nc, nc.graph.slice(nc.tensor(0, "data"), starts, ends, axes_n, steps, name=fresh(nc)))


@onnx_op("Pad", versions=(1, 25), parameter_inputs=(1, 2, 3))
def _onnx_pad(nc):
    if nc.version < 11:
        nc.check_attrs(("mode", "pads", "value") if nc.version >= 2 else ("mode", "paddings", "value"))
        expect_inputs(nc, 1, 1)
        pads = nc.attr("pads" if nc.version >= 2 else "paddings")
        if pads is None:
            raise ValueError(f"{nc.where}: attribute pads is required")
        pads = [int(p) for p in pads]
        value, axes = float(nc.attr("value", 0.0)), None
    else:
        nc.check_attrs(("mode",))
        expect_inputs(nc, 2, 4)
        pads = _int_list(nc, 1, "pads")
        cv = nc.const(2, "constant_value")
        if cv is not None and cv.size not in (0, 1):
            raise ValueError(f"{nc.where}: constant_value must be a scalar, got shape {list(cv.shape)}")
        value = float(cv.reshape(-1)[0]) if cv is not None and cv.size else 0.0
        axes = _int_list(nc, 3, "axes")
    mode = nc.attr("mode", "constant")
    if mode not in PAD_MODES:
        nc.unsupported("mode", mode, f"supported modes: {', '.join(PAD_MODES)}")
    data = nc.imp.values[nc.node.input[0]]
    r = len(data.shape)
    axes = list(range(r)) if axes is None else norm_axes(axes, r, nc.where)
    if len(pads) != 2 * len(axes):
        raise ValueError(f"{nc.where}: pads must have {2 * len(axes)} values (begins then ends), got {pads}")
    pairs = [(0, 0)] * r
    for k, a in enumerate(axes):
        pairs[a] = (pads[k], pads[len(axes) + k])
    if is_const(nc, 0):
        folded(nc, _np_pad(data, pairs, mode, value))
        return
    emit(nc, nc.graph.pad(nc.tensor(0, "data"), pairs, mode, value, name=fresh(nc)))


def _np_pad(x, pairs, mode, value):
    x = x[tuple(np.s_[max(-b, 0):x.shape[k] - max(-e, 0)] for k, (b, e) in enumerate(pairs))]
    widths = [(max(b, 0), max(e, 0)) for b, e in pairs]
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=mode)


@onnx_op("Concat", versions=(1, 13))
def _onnx_concat(nc):
    nc.check_attrs(("axis",))
    if nc.n_inputs() < 1:
        raise ValueError(f"{nc.where}: expects at least 1 input")
    axis = nc.attr("axis", 1 if nc.version < 4 else None)
    if axis is None:
        raise ValueError(f"{nc.where}: attribute axis is required")
    if all_const(nc):
        folded(nc, np.concatenate([nc.const(i, f"inputs[{i}]") for i in range(nc.n_inputs())], axis=int(axis)))
        return
    xs = [nc.tensor(i, f"inputs[{i}]") for i in range(nc.n_inputs())]
    emit(nc, nc.graph.concat(xs, int(axis), name=fresh(nc)))


@onnx_op("Split", versions=(1, 18), parameter_inputs=(1,))
def _onnx_split(nc):
    allowed = ["axis"]
    if nc.version < 13:
        allowed.append("split")
    if nc.version >= 18:
        allowed.append("num_outputs")
    nc.check_attrs(allowed)
    expect_inputs(nc, 1, 2)
    split = nc.attr("split") if nc.version < 13 else None
    if nc.has_input(1):
        split = _int_list(nc, 1, "split")
    data = nc.imp.values[nc.node.input[0]]
    axis = norm_axis(nc.attr("axis", 0), len(data.shape), nc.where)
    d = data.shape[axis]
    n_out = len(nc.node.output)
    if split is not None:
        split = [int(s) for s in split]
        if len(split) != n_out or sum(split) != d or any(s < 0 for s in split):
            raise ValueError(f"{nc.where}: split {split} must have one non-negative size per output "
                             f"({n_out}) summing to {d}")
    else:
        parts = int(nc.attr("num_outputs", n_out))
        if parts != n_out:
            raise ValueError(f"{nc.where}: num_outputs={parts} but the node has {n_out} outputs")
        size = -(-d // parts)
        split = [min(size, d - i * size) for i in range(parts)]
        if nc.version < 18 and d % parts:
            raise ValueError(f"{nc.where}: axis {axis} of length {d} does not split into {parts} equal parts")
    off = 0
    for i, s in enumerate(split):
        if nc.node.output[i]:
            if is_const(nc, 0):
                folded_i = np.take(data, range(off, off + s), axis=axis)
                nc.imp.set_output(nc.node.output[i], folded_i)
            elif s == 0:
                raise NotImplementedError(f"{nc.where}: output {i} would be empty; empty tensors are not "
                                          "supported")
            else:
                emit(nc, nc.graph.slice(nc.tensor(0, "input"), [off], [off + s], [axis],
                                        name=fresh(nc, i)), i)
        off += s


@onnx_op("Gather", versions=(1, 13), parameter_inputs=(1,))
def _onnx_gather(nc):
    nc.check_attrs(("axis",))
    expect_inputs(nc, 2, 2)
    idx = _const_input(nc, 1, "indices")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{nc.where}: indices must be integers, got {idx.dtype}")
    axis = int(nc.attr("axis", 0))
    if is_const(nc, 0):
        data = nc.const(0, "data")
        a = norm_axis(axis, data.ndim, nc.where)
        d = data.shape[a]
        if idx.size and (idx.min() < -d or idx.max() >= d):
            raise ValueError(f"{nc.where}: indices out of range [{-d}, {d})")
        folded(nc, np.take(data, np.where(idx < 0, idx + d, idx), axis=a))
        return
    x = nc.tensor(0, "data")
    if idx.ndim == 0:
        # a scalar index drops the axis
        a = norm_axis(axis, len(x.shape), nc.where)
        y = nc.graph.gather(x, idx.reshape(1), a, name=fresh(nc, suffixes=(".shape",)) + ".take")
        emit(nc, nc.graph.reshape(y, x.shape[:a] + x.shape[a + 1:], name=fresh(nc)))
        return
    emit(nc, nc.graph.gather(x, idx, axis, name=fresh(nc, suffixes=(".shape",))))


def _reshape_target(nc, in_shape, shape, allowzero):
    shape = [int(s) for s in shape]
    out = []
    for k, s in enumerate(shape):
        if s == 0 and not allowzero:
            if k >= len(in_shape):
                raise ValueError(f"{nc.where}: shape {shape} copies dim {k} of an input of rank {len(in_shape)}")
            out.append(int(in_shape[k]))
        else:
            out.append(s)
    if 0 in out:
        raise NotImplementedError(f"{nc.where}: shape {shape} makes an empty tensor; empty tensors are not "
                                  "supported")
    return out


def _reshape_to(nc, dims):
    if is_const(nc, 0):
        folded(nc, nc.const(0, "data").reshape(dims))
        return
    emit(nc, nc.graph.reshape(nc.tensor(0, "data"), dims, name=fresh(nc)))


@onnx_op("Reshape", versions=(1, 25), parameter_inputs=(1,))
def _onnx_reshape(nc):
    if nc.version < 5:
        nc.check_attrs(("shape", "consumed_inputs"))
        expect_inputs(nc, 1, 1)
        shape = nc.attr("shape")
        if shape is None:
            raise ValueError(f"{nc.where}: attribute shape is required")
    else:
        nc.check_attrs(("allowzero",) if nc.version >= 14 else ())
        expect_inputs(nc, 2, 2)
        shape = _int_list(nc, 1, "shape")
    data = nc.imp.values[nc.node.input[0]]
    _reshape_to(nc, _reshape_target(nc, data.shape, shape, int(nc.attr("allowzero", 0))))


@onnx_op("Flatten", versions=(1, 25))
def _onnx_flatten(nc):
    nc.check_attrs(("axis",))
    expect_inputs(nc, 1, 1)
    data = nc.imp.values[nc.node.input[0]]
    r = len(data.shape)
    axis = int(nc.attr("axis", 1))
    if not -r <= axis <= r:
        raise ValueError(f"{nc.where}: axis={axis} is out of range for rank {r}")
    axis = axis + r if axis < 0 else axis
    _reshape_to(nc, [int(np.prod(data.shape[:axis], dtype=np.int64)),
                     int(np.prod(data.shape[axis:], dtype=np.int64))])


def _axes_arg(nc):
    if nc.version < 13:
        nc.check_attrs(("axes",))
        expect_inputs(nc, 1, 1)
        a = nc.attr("axes")
        return None if a is None else [int(v) for v in a]
    nc.check_attrs(())
    expect_inputs(nc, 1, 2)
    return _int_list(nc, 1, "axes")


@onnx_op("Squeeze", versions=(1, 25), parameter_inputs=(1,))
def _onnx_squeeze(nc):
    axes = _axes_arg(nc)
    shape = nc.imp.values[nc.node.input[0]].shape
    if axes is None:
        axes = [k for k, d in enumerate(shape) if d == 1]
    axes = norm_axes(axes, len(shape), nc.where)
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"{nc.where}: cannot squeeze axis {a} of length {shape[a]} (shape {list(shape)})")
    _reshape_to(nc, [d for k, d in enumerate(shape) if k not in axes])


@onnx_op("Unsqueeze", versions=(1, 25), parameter_inputs=(1,))
def _onnx_unsqueeze(nc):
    axes = _axes_arg(nc)
    if axes is None:
        raise ValueError(f"{nc.where}: axes are required")
    shape = list(nc.imp.values[nc.node.input[0]].shape)
    r = len(shape) + len(axes)
    axes = sorted(norm_axes(axes, r, nc.where))
    for a in axes:
        shape.insert(a, 1)
    _reshape_to(nc, shape)


@onnx_op("Shape", versions=(1, 25))
def _onnx_shape(nc):
    nc.check_attrs(("start", "end") if nc.version >= 15 else ())
    expect_inputs(nc, 1, 1)
    shape = list(nc.imp.values[nc.node.input[0]].shape)
    r = len(shape)
    start, end = int(nc.attr("start", 0)), nc.attr("end")
    end = r if end is None else int(end)
    start = min(max(start + r if start < 0 else start, 0), r)
    end = min(max(end + r if end < 0 else end, 0), r)
    # Every shape is static: the result is a compile-time array.
    folded(nc, np.array(shape[start:end], dtype=np.int64))


@onnx_op("Cast", versions=(1, 25))
def _onnx_cast(nc):
    onnx = __import__("onnx")
    nc.check_attrs(("to", "saturate", "round_mode") if nc.version >= 19 else ("to",))
    expect_inputs(nc, 1, 1)
    to = nc.attr("to")
    if to is None:
        raise ValueError(f"{nc.where}: attribute to is required")
    if isinstance(to, str):
        to = onnx.TensorProto.DataType.Value(to.upper())
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(to)))
    except Exception:
        nc.unsupported("to", to, "no numpy equivalent")
    if is_const(nc, 0):
        x = nc.const(0, "input")
        if dtype.kind in "iu" and x.dtype.kind == "f" and not np.isfinite(x).all():
            raise ValueError(f"{nc.where}: casting non-finite floats to {dtype}")
        folded(nc, x.astype(dtype))
        return
    if dtype != np.float32:
        nc.unsupported("to", onnx.TensorProto.DataType.Name(int(to)),
                       "a runtime tensor can only be cast to float32 (rlx_cpu computes in float32)")
    emit(nc, nc.tensor(0, "input"))          # float32 -> float32: an alias


@onnx_op("ConstantOfShape", versions=(9, 25), parameter_inputs=(0,))
def _onnx_constant_of_shape(nc):
    onnx = __import__("onnx")
    nc.check_attrs(("value",))
    expect_inputs(nc, 1, 1)
    shape = _int_list(nc, 0, "input")
    a = nc.attrs.get("value")
    value = np.zeros(1, np.float32) if a is None else onnx.numpy_helper.to_array(a.t).reshape(-1)
    if value.size != 1:
        raise ValueError(f"{nc.where}: attribute value must hold one element, got {value.size}")
    if any(s < 0 for s in shape):
        raise ValueError(f"{nc.where}: shape {shape} has a negative dim")
    folded(nc, np.full(shape, value[0], dtype=value.dtype))


@onnx_op("Dropout", versions=(1, 22), parameter_inputs=(1, 2))
def _onnx_dropout(nc):
    allowed = ["seed"] if nc.version >= 12 else ["ratio"]
    if nc.version < 7:
        allowed.append("is_test")
    if nc.version < 6:
        allowed.append("consumed_inputs")
    nc.check_attrs(allowed)
    expect_inputs(nc, 1, 3)
    training = nc.const(2, "training_mode")
    if training is not None and bool(np.asarray(training).reshape(-1)[0]):
        nc.unsupported("training_mode", True, "rlx_cpu imports inference graphs (Dropout is the identity)")
    if nc.version < 7 and not int(nc.attr("is_test", 0)):
        nc.unsupported("is_test", 0, "training-mode Dropout is random; rlx_cpu imports inference graphs")
    x = nc.imp.values[nc.node.input[0]]
    nc.imp.set_output(nc.node.output[0], x)
    if len(nc.node.output) > 1 and nc.node.output[1]:
        # inference: nothing is dropped, the mask is all true
        nc.imp.set_output(nc.node.output[1], np.ones(x.shape, dtype=bool))
