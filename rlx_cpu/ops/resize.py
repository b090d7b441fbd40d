"""Nearest resize: y[n, c, o1, o2, ...] = x[n, c, t1[o1], t2[o2], ...] over 1 to
3 spatial axes, with one source-index table t_i per axis fixed at build time.

Every nearest convention is a choice of tables:

* PyTorch ``interpolate`` ('nearest': src = min(floor(dst * scale), in - 1)
  with a float32 product; 'nearest-exact': floor((dst + 0.5) * scale));
* ONNX Resize-11+ (a coordinate transformation mode maps dst to a source
  coordinate, exactly, then a nearest mode rounds it);
* ONNX Upsample-7/9 and Resize-10 (x = dst / scale in float32, floor when
  upsampling, ceil when downsampling).

The tables live in the plan as an int32 constant; the exact 2x duplication
of a 2-D image has its own kernel.  Node op: ``resize_nearest`` (also built by
``upsample_nearest2x`` and ``interpolate``).

Linear resize (``resize_linear``, ONNX Resize-11+ mode 'linear'): along each
resized axis, output index j reads (1 - w[j]) * x[i0[j]] + w[j] * x[i1[j]]
where the source coordinate c comes from the same exact coordinate
transformation as nearest, i0 = floor(c), i1 = i0 + 1 (both clamped to the
axis, which is ONNX's edge padding) and w = c - floor(c); one pass per resized
axis (src/_resize_linear.pyx).
"""
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar, Tuple

import numpy as np

from .. import _resize, _resize_linear
from ..ir import fmt_shape
from ..registry import compile_rule, functional, graph_method, onnx_op
from ..functional import run_unary
from ..shapes import as_tuple
from ..thunks import Slice, Thunk


# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ResizeNearestAttrs:
    """tables[i][o] = source index of output index o on spatial axis i."""
    tables: Tuple[np.ndarray, ...]


# ---------------------------------------------------------------------------
# PyTorch's source indices (interpolate)
# ---------------------------------------------------------------------------

def torch_nearest_scale(in_size, out_size, scale_factor):
    """PyTorch's compute_scales_value in float32: 1/scale_factor when a scale
    factor reaches the kernel, else in/out."""
    if scale_factor is not None and scale_factor > 0:
        return np.float32(1.0 / float(scale_factor))
    return np.float32(np.float32(in_size) / np.float32(out_size))


def torch_nearest_table(in_size, out_size, scale_factor=None, mode="nearest", shortcuts=False):
    """Source index of every output index along one axis, as PyTorch computes it.

    'nearest' (legacy): min(floor(dst * scale), in - 1) with a float32 product;
    with `shortcuts` (PyTorch's 2-D kernel) out == in copies and out == 2 in
    halves the index whatever the scale factor;
    'nearest-exact':    min(floor(float32((dst + 0.5) * scale)), in - 1)."""
    dst = np.arange(out_size, dtype=np.int64)
    if mode == "nearest":
        if shortcuts and out_size == in_size:
            return dst
        if shortcuts and out_size == 2 * in_size:
            return dst >> 1
        scale = torch_nearest_scale(in_size, out_size, scale_factor)
        src = np.floor(dst.astype(np.float32) * scale).astype(np.int64)
    elif mode == "nearest-exact":
        scale = torch_nearest_scale(in_size, out_size, scale_factor)
        src = np.floor(((dst + 0.5) * np.float64(scale)).astype(np.float32)).astype(np.int64)
    else:
        raise ValueError(f"unknown nearest mode {mode!r}")
    return np.minimum(src, in_size - 1)


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

@graph_method()
def resize_nearest(graph, x, sizes, index_tables, name=None, *, op="resize_nearest"):
    """Nearest resize of the spatial axes of [N, C, *spatial] (1 to 3 axes)
    by explicit source-index tables: y[..., o1, o2] = x[..., t1[o1], t2[o2]].

    sizes: output size per spatial axis; index_tables: one int sequence per
    spatial axis, of that length, with values in [0, input size).  Any
    coordinate convention (PyTorch, ONNX Resize modes) is a choice of tables."""
    x = graph._value(x, op, "input")
    xs = x.shape
    nsp = len(xs) - 2
    if nsp not in (1, 2, 3):
        raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {fmt_shape(xs)}")
    sizes = as_tuple(sizes, nsp, op, "sizes")
    try:
        tables = list(index_tables)
    except TypeError:
        raise TypeError(f"{op}: index_tables must be a sequence of {nsp} integer arrays") from None
    if len(tables) != nsp:
        raise ValueError(f"{op}: index_tables must have one table per spatial axis ({nsp}), got {len(tables)}")
    out_tables = []
    for i, t in enumerate(tables):
        arr = np.asarray(t)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"{op}: index_tables[{i}] must hold integers, got dtype {arr.dtype}")
        if arr.shape != (sizes[i],):
            raise ValueError(f"{op}: index_tables[{i}] must have shape [{sizes[i]}] (the output size), "
                             f"got {fmt_shape(arr.shape)}")
        if arr.size and (arr.min() < 0 or arr.max() >= xs[2 + i]):
            raise ValueError(f"{op}: index_tables[{i}] values must be in [0, {xs[2 + i]}) for input "
                             f"{fmt_shape(xs)}, got range [{arr.min()}, {arr.max()}]")
        arr = np.array(arr, dtype=np.int32)
        arr.setflags(write=False)
        out_tables.append(arr)
    name = name if name is not None else f"{op}_{len(graph.nodes)}"
    return graph._add("resize_nearest", [x], (xs[0], xs[1], *sizes), name, ResizeNearestAttrs(tuple(out_tables)))


@graph_method()
def upsample_nearest2x(graph, x, name=None):
    """[N, C, H, W] -> [N, C, 2H, 2W], each pixel repeated 2x2."""
    op = "upsample_nearest2x"
    x = graph._value(x, op, "input")
    if len(x.shape) != 4:
        raise ValueError(f"{op}: input must have rank 4 (N, C, H, W), got {fmt_shape(x.shape)}")
    h, w = x.shape[2:]
    tables = [np.arange(2 * h) // 2, np.arange(2 * w) // 2]
    return resize_nearest(graph, x, (2 * h, 2 * w), tables, name, op=op)


@graph_method()
def interpolate(graph, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False, name=None):
    """torch.nn.functional.interpolate for mode 'nearest' (legacy) and
    'nearest-exact' on [N, C, *spatial] (1 to 3 axes)."""
    op = "interpolate"
    x = graph._value(x, op, "input")
    xs = x.shape
    nsp = len(xs) - 2
    if nsp not in (1, 2, 3):
        raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {fmt_shape(xs)}")
    if mode not in ("nearest", "nearest-exact"):
        raise ValueError(f"{op}: mode must be 'nearest' or 'nearest-exact' (others are not implemented), "
                         f"got {mode!r}")
    if align_corners is not None:
        raise ValueError(f"{op}: align_corners can only be set with the interpolating modes, not {mode!r}")
    if antialias:
        raise ValueError(f"{op}: antialias applies to bilinear/bicubic modes only, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: exactly one of size and scale_factor must be given, got size={size!r}, "
                         f"scale_factor={scale_factor!r}")
    in_sp = xs[2:]
    scales = [None] * nsp
    if size is not None:
        sizes = as_tuple(size, nsp, op, "size")
    else:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != nsp:
                raise ValueError(f"{op}: scale_factor must have {nsp} values for input {fmt_shape(xs)}, "
                                 f"got {scale_factor!r}")
            factors = [float(f) for f in scale_factor]
        else:
            try:
                factors = [float(scale_factor)] * nsp
            except (TypeError, ValueError):
                raise TypeError(f"{op}: scale_factor must be a number or a sequence of numbers, "
                                f"got {scale_factor!r}") from None
        if any(not np.isfinite(f) or f <= 0 for f in factors):
            raise ValueError(f"{op}: scale_factor must be positive and finite, got {scale_factor!r}")
        # As PyTorch: out = floor(in * factor) in double; the factor itself
        # reaches the kernel unless recompute_scale_factor is set.
        sizes = tuple(int(np.floor(float(s) * f)) for s, f in zip(in_sp, factors))
        if not recompute_scale_factor:
            scales = factors
    if any(s < 1 for s in sizes):
        raise ValueError(f"{op}: output size must be >= 1 on every spatial axis, got {list(sizes)} "
                         f"for input {fmt_shape(xs)}")
    # PyTorch's 2-D nearest kernel (only) short-cuts out == in and out == 2 in.
    tables = [torch_nearest_table(in_sp[i], sizes[i], scales[i], mode, shortcuts=nsp == 2)
              for i in range(nsp)]
    return resize_nearest(graph, x, sizes, tables, name, op=op)


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ResizeNearestThunk(Thunk):
    """Nearest resize as a per-axis gather; `tables` is a constant of int32
    source indices [td | th | tw] (axes padded to 3, missing ones [0])."""
    x: Slice
    y: Slice
    tables: Slice
    planes: int
    size: Tuple[int, int, int]
    out: Tuple[int, int, int]

    kind: ClassVar[str] = "resize_nearest"
    reads: ClassVar[tuple] = ("x", "tables")
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _resize.ResizeNearestLaunch(view(self.x), view(self.y), view(self.tables), self.planes,
                                           self.size, self.out)


@dataclass(frozen=True, repr=False)
class ResizeNearest2xThunk(Thunk):
    """[planes, h, w] -> [planes, 2h, 2w], each pixel repeated 2x2."""
    x: Slice
    y: Slice
    planes: int
    h: int
    w: int

    kind: ClassVar[str] = "resize_nearest2x"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _resize.ResizeNearest2xLaunch(view(self.x), view(self.y), self.planes, self.h, self.w)


# ---------------------------------------------------------------------------
# Compile rule
# ---------------------------------------------------------------------------

def is_nearest_2x(in_sizes, tables):
    """True when a 2-D nearest resize is the exact 2x pixel duplication."""
    return len(in_sizes) == 2 and all(
        len(t) == 2 * s and np.array_equal(t, np.arange(2 * s) // 2) for s, t in zip(in_sizes, tables))


@compile_rule("resize_nearest")
def compile_resize_nearest(ctx, node):
    xs = ctx.graph.node(node.inputs[0]).shape
    tables = node.attrs.tables
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.id)
    planes = xs[0] * xs[1]
    if is_nearest_2x(xs[2:], tables):
        ctx.emit(ResizeNearest2xThunk(node.name, x, y, planes, xs[2], xs[3]))
        return
    pad = 3 - len(tables)
    size = (1,) * pad + tuple(xs[2:])
    out = (1,) * pad + tuple(node.shape[2:])
    flat = np.concatenate([np.zeros(1, np.int32)] * pad + [np.asarray(t, np.int32) for t in tables])
    tab = ctx.int32_constant(flat, node.name + ".index_tables")
    ctx.emit(ResizeNearestThunk(node.name, x, y, tab, planes, size, out))


# ---------------------------------------------------------------------------
# ONNX: Resize and Upsample (nearest), index tables computed at compile time
# ---------------------------------------------------------------------------

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def nearest_source_coords(mode, out_size, scale, in_size, roi=None):
    """Source coordinate of every output index along one axis, as exact
    fractions, by the formulas of ONNX Resize-11+ (as its reference
    implementation applies them).  `scale` is the axis' scale factor (a given
    float32 scale, or a Fraction such as output/input for sizes); roi =
    (start, end) for tf_crop_and_resize.

    Exact arithmetic decides rounding ties as the formulas mean them; float64
    can land an ulp off an integer (the reference then rounds the other way
    in rare half_pixel_symmetric cases, where ONNX Runtime agrees with us)."""
    scale = scale if isinstance(scale, Fraction) else Fraction(float(scale))
    half = Fraction(1, 2)
    out_width = scale * in_size              # not always an integer
    ys = range(out_size)
    if mode == "align_corners":
        if out_width == 1:
            return [Fraction(0)] * out_size
        return [y * (in_size - 1) / (out_width - 1) for y in ys]
    if mode == "asymmetric":
        return [y / scale for y in ys]
    if mode == "tf_crop_and_resize":
        start, end = (v if isinstance(v, Fraction) else Fraction(float(v)) for v in roi)
        if out_width == 1:
            return [(end - start) * (in_size - 1) / 2 + start * (in_size - 1)] * out_size
        return [y * (end - start) * (in_size - 1) / (out_width - 1) + start * (in_size - 1) for y in ys]
    if mode == "pytorch_half_pixel":
        if out_width == 1:
            return [-half] * out_size
        return [(y + half) / scale - half for y in ys]
    if mode == "half_pixel":
        return [(y + half) / scale - half for y in ys]
    if mode == "half_pixel_symmetric":
        offset = Fraction(in_size, 2) * (1 - out_size / out_width)
        return [offset + (y + half) / scale - half for y in ys]
    raise ValueError(f"coordinate_transformation_mode must be one of {COORDINATE_MODES}, got {mode!r}")


def nearest_index_table(in_size, out_size, scale, coordinate_mode="half_pixel",
                        nearest_mode="round_prefer_floor", roi=None, clamp=True):
    """Input index read by every output index along one axis (int64 array).

    -1 marks an output position outside the input, which tf_crop_and_resize
    fills with extrapolation_value; every other mode clamps to [0, in - 1].
    An integer coordinate is used as is; otherwise nearest_mode picks
    floor(x) or floor(x) + 1 (at exactly .5 by the *_prefer_* rule).
    clamp=False returns the raw neighbour index (may lie outside the input)."""
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"nearest_mode must be one of {NEAREST_MODES}, got {nearest_mode!r}")
    half = Fraction(1, 2)
    idx = np.empty(out_size, np.int64)
    for i, x in enumerate(nearest_source_coords(coordinate_mode, out_size, scale, in_size, roi)):
        lo = math.floor(x)
        frac = x - lo
        if frac == 0 or nearest_mode == "floor":
            j = lo
        elif nearest_mode == "ceil":
            j = lo + 1
        elif nearest_mode == "round_prefer_floor":
            j = lo + (frac > half)
        else:
            j = lo + (frac >= half)
        if not clamp:
            pass
        elif coordinate_mode == "tf_crop_and_resize" and (x < 0 or x > in_size - 1):
            j = -1
        else:
            j = min(max(j, 0), in_size - 1)
        idx[i] = j
    return idx


def linear_axis_table(in_size, out_size, scale, coordinate_mode="half_pixel", roi=None):
    """(i0, i1, w, outside) of a linear resize along one axis: the two source
    indices (clamped to the axis), the weight of i1, and where the coordinate
    falls outside the input (tf_crop_and_resize fills those)."""
    i0, i1 = np.empty(out_size, np.int64), np.empty(out_size, np.int64)
    w, outside = np.empty(out_size, np.float64), np.zeros(out_size, bool)
    for j, c in enumerate(nearest_source_coords(coordinate_mode, out_size, scale, in_size, roi)):
        lo = math.floor(c)
        i0[j] = min(max(lo, 0), in_size - 1)
        i1[j] = min(max(lo + 1, 0), in_size - 1)
        w[j] = float(c - lo)
        outside[j] = coordinate_mode == "tf_crop_and_resize" and (c < 0 or c > in_size - 1)
    return i0, i1, w, outside


def legacy_nearest_index_table(in_size, out_size, scale):
    """Upsample-7/9 and Resize-10 nearest (no rounding attributes; as ONNX
    Runtime defines them): x = y / scale in float32, floor when the axis is
    upsampled, ceil when it is downsampled, clamped."""
    s = np.float32(scale)
    x = np.arange(out_size, dtype=np.float32) / s
    idx = np.ceil(x) if s < 1 else np.floor(x)
    return np.clip(idx.astype(np.int64), 0, in_size - 1)


def resize_plan(in_shape, *, scales=None, sizes=None, axes=None, keep_aspect_ratio_policy="stretch",
                coordinate_mode="half_pixel", nearest_mode="round_prefer_floor", roi=None, clamp=True,
                linear=False):
    """Output shape and per-axis index tables of ONNX Resize-11+ nearest
    (linear=True: of mode 'linear').

    Returns (out_shape, tables): tables[d] is None where axis d is unchanged
    (scale 1 and same size), else the int64 table from nearest_index_table
    (linear: the tuple from linear_axis_table)."""
    r = len(in_shape)
    if axes is None:
        axes = list(range(r))
    axes = [int(a) + r if int(a) < 0 else int(a) for a in axes]
    if any(not 0 <= a < r for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes must be distinct axes of a rank-{r} input, got {axes}")
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of scales and sizes must be given")
    if roi is not None:
        roi = [Fraction(float(v)) for v in np.asarray(roi).astype(np.float64).reshape(-1)]
        if len(roi) == 2 * r and len(axes) != r:
            full = roi
        elif len(roi) == 2 * len(axes):
            full = [Fraction(0)] * r + [Fraction(1)] * r
            for i, a in enumerate(axes):
                full[a] = roi[i]
                full[r + a] = roi[len(axes) + i]
        else:
            raise ValueError(f"roi must have {2 * len(axes)} values, got {len(roi)}")
        roi = full
    scale_f = [Fraction(1)] * r
    out = list(in_shape)
    if scales is not None:
        scales = [Fraction(float(s)) for s in np.asarray(scales, dtype=np.float32).reshape(-1)]
        if len(scales) != len(axes):
            raise ValueError(f"scales must have {len(axes)} values (one per axis), got {len(scales)}")
        if any(s <= 0 for s in scales):
            raise ValueError(f"scales must be > 0, got {scales}")
        for a, s in zip(axes, scales):
            scale_f[a] = s
            out[a] = math.floor(s * in_shape[a])
    else:
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise ValueError(f"sizes must have {len(axes)} values (one per axis), got {len(sizes)}")
        if any(s < 1 for s in sizes):
            raise ValueError(f"sizes must be >= 1, got {sizes}")
        for a, s in zip(axes, sizes):
            scale_f[a] = Fraction(s, in_shape[a])
            out[a] = s
        if keep_aspect_ratio_policy != "stretch":
            picks = [scale_f[a] for a in axes]
            if keep_aspect_ratio_policy == "not_larger":
                common = min(picks)
            elif keep_aspect_ratio_policy == "not_smaller":
                common = max(picks)
            else:
                raise ValueError("keep_aspect_ratio_policy must be 'stretch', 'not_larger' or 'not_smaller', "
                                 f"got {keep_aspect_ratio_policy!r}")
            for a in axes:
                scale_f[a] = common
                out[a] = math.floor(common * in_shape[a] + Fraction(1, 2))   # round half up
    if any(o < 1 for o in out):
        raise ValueError(f"output shape {out} is empty (input {list(in_shape)}, scales {scale_f})")
    tables = [None] * r
    for a in axes:
        axis_roi = None if roi is None else (roi[a], roi[r + a])
        unchanged = scale_f[a] == 1 and out[a] == in_shape[a]
        if unchanged and (coordinate_mode != "tf_crop_and_resize" or (
                axis_roi is not None and axis_roi == (0, 1))):
            continue
        if coordinate_mode == "tf_crop_and_resize" and axis_roi is None:
            raise ValueError("coordinate_transformation_mode 'tf_crop_and_resize' needs roi")
        if linear:
            tables[a] = linear_axis_table(in_shape[a], out[a], scale_f[a], coordinate_mode, axis_roi)
        else:
            tables[a] = nearest_index_table(in_shape[a], out[a], scale_f[a], coordinate_mode, nearest_mode,
                                            axis_roi, clamp)
    return tuple(out), tables


def _emit_resize(nc, x, out_shape, tables):
    """Emit a nearest resize from full-rank tables (None = axis unchanged)."""
    tables = [None if t is not None and len(t) == d and np.array_equal(t, np.arange(d)) else t
              for t, d in zip(tables, x.shape)]
    if tables[0] is not None or tables[1] is not None:
        raise NotImplementedError(
            f"{nc.where}: resizing the batch or channel axis (input {list(x.shape)} -> {list(out_shape)}) is not "
            "supported; only spatial axes are")
    if all(t is None for t in tables):
        nc.imp.set_output(nc.out_name(), x)      # identity resize
        return
    sp = [np.arange(s) if t is None else t for s, t in zip(x.shape[2:], tables[2:])]
    y = nc.graph.resize_nearest(x, out_shape[2:], sp, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _nearest_mode_attr(nc):
    mode = nc.attr("mode", "nearest")
    if mode != "nearest":
        nc.unsupported("mode", mode, "only 'nearest' is implemented")


def _legacy_resize(nc, x, scales):
    """Upsample-7/9 and Resize-10: output floor(in * scale) and tables as
    legacy_nearest_index_table (float32 arithmetic, as ONNX Runtime)."""
    scales = np.asarray(scales, dtype=np.float32).reshape(-1)
    r = len(x.shape)
    if scales.size != r:
        raise ValueError(f"{nc.where}: scales must have one value per input axis ({r}), got {scales.tolist()}")
    if np.any(~np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"{nc.where}: scales must be positive, got {scales.tolist()}")
    out = tuple(int(np.float32(s) * np.float32(d)) for s, d in zip(scales, x.shape))
    if any(o < 1 for o in out):
        raise ValueError(f"{nc.where}: output shape {list(out)} is empty (input {list(x.shape)}, "
                         f"scales {scales.tolist()})")
    tables = [None if (s == 1 and o == d) else legacy_nearest_index_table(d, o, s)
              for s, o, d in zip(scales, out, x.shape)]
    _emit_resize(nc, x, out, tables)


@onnx_op("Upsample", versions=(1, 10), parameter_inputs=(1,))     # scales
def convert_upsample(nc):
    if nc.version == 1:
        nc.check_attrs(("height_scale", "mode", "width_scale"))
    elif nc.version == 7:
        nc.check_attrs(("mode", "scales"))
    else:
        nc.check_attrs(("mode",))
    _nearest_mode_attr(nc)
    x = nc.tensor(0, "X")
    if nc.version == 1:
        if len(x.shape) != 4:
            raise ValueError(f"{nc.where}: Upsample-1 takes a rank-4 input, got {list(x.shape)}")
        scales = [1.0, 1.0, float(nc.attr("height_scale", 1.0)), float(nc.attr("width_scale", 1.0))]
    elif nc.version == 7:
        scales = nc.attr("scales")
        if scales is None:
            raise ValueError(f"{nc.where}: attribute scales is required")
    else:
        scales = nc.const(1, "scales")
        if scales is None:
            raise ValueError(f"{nc.where}: input scales is required")
    if np.any(np.asarray(scales, dtype=np.float32) < 1):
        raise ValueError(f"{nc.where}: Upsample scales must be >= 1, got {np.asarray(scales).tolist()}")
    _legacy_resize(nc, x, scales)


# Resize-10: scales; 11+: roi, scales, sizes
@onnx_op("Resize", versions=(10, 19), parameter_inputs=(1, 2, 3))
def convert_resize(nc):
    if nc.version == 10:
        nc.check_attrs(("mode",))
        _nearest_mode_attr(nc)
        x = nc.tensor(0, "X")
        scales = nc.const(1, "scales")
        if scales is None:
            raise ValueError(f"{nc.where}: input scales is required")
        _legacy_resize(nc, x, scales)
        return
    allowed = ["coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value",
               "mode", "nearest_mode"]
    if nc.version >= 18:
        allowed += ["antialias", "axes", "keep_aspect_ratio_policy"]
    nc.check_attrs(allowed)
    mode = nc.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        nc.unsupported("mode", mode, "'nearest' and 'linear' are implemented")
    x = nc.tensor(0, "X")
    ctm = nc.attr("coordinate_transformation_mode", "half_pixel")
    modes = COORDINATE_MODES if nc.version >= 19 else tuple(m for m in COORDINATE_MODES
                                                              if m != "half_pixel_symmetric")
    if ctm not in modes:
        raise ValueError(f"{nc.where}: coordinate_transformation_mode must be one of {list(modes)}, got {ctm!r}")
    nearest_mode = nc.attr("nearest_mode", "round_prefer_floor")
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"{nc.where}: nearest_mode must be one of {list(NEAREST_MODES)}, got {nearest_mode!r}")
    if int(nc.attr("antialias", 0)):
        nc.unsupported("antialias", 1, "antialiased resizing is not implemented" if mode == "linear"
                       else "antialiasing applies to linear and cubic modes only")
    policy = nc.attr("keep_aspect_ratio_policy", "stretch")
    axes = nc.attr("axes")
    exclude_outside = int(nc.attr("exclude_outside", 0))
    extrapolation_value = float(nc.attr("extrapolation_value", 0.0))
    roi = nc.const(1, "roi")
    scales = nc.const(2, "scales")
    sizes = nc.const(3, "sizes")
    if scales is not None and scales.size == 0:
        scales = None                # Resize-11/13 exporters pass an empty scales with sizes
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ValueError(f"{nc.where}: exactly one of the inputs scales and sizes must be given")
    if ctm != "tf_crop_and_resize" or (roi is not None and roi.size == 0):
        roi = None
    if mode == "linear":
        _convert_linear(nc, x, scales, sizes, axes, policy, ctm, roi, extrapolation_value)
        return
    try:
        out, tables = resize_plan(x.shape, scales=scales, sizes=sizes, axes=axes,
                                  keep_aspect_ratio_policy=policy if sizes is not None else "stretch",
                                  coordinate_mode=ctm, nearest_mode=nearest_mode, roi=roi)
    except ValueError as e:
        raise ValueError(f"{nc.where}: {e}") from None
    if any(t is not None and (t < 0).any() for t in tables):
        nc.unsupported("coordinate_transformation_mode", ctm,
                       f"output positions outside the roi {np.asarray(roi).tolist()} would need "
                       f"extrapolation_value={extrapolation_value} filled in, which the resize kernel does not do")
    if exclude_outside:
        unclamped = resize_plan(x.shape, scales=scales, sizes=sizes, axes=axes,
                                keep_aspect_ratio_policy=policy if sizes is not None else "stretch",
                                coordinate_mode=ctm, nearest_mode=nearest_mode, roi=roi, clamp=False)[1]
        if any(t is not None and ((t < 0) | (t >= d)).any() for t, d in zip(unclamped, x.shape)):
            nc.unsupported("exclude_outside", exclude_outside,
                           "some nearest neighbours fall outside the input, which ONNX then sets to 0")
    _emit_resize(nc, x, out, tables)


def _convert_linear(nc, x, scales, sizes, axes, policy, ctm, roi, extrapolation_value):
    # exclude_outside needs nothing here: an outside neighbour is clamped onto
    # the inside one, so dropping its weight and renormalising gives the same value.
    try:
        out, tables = resize_plan(x.shape, scales=scales, sizes=sizes, axes=axes,
                                  keep_aspect_ratio_policy=policy if sizes is not None else "stretch",
                                  coordinate_mode=ctm, roi=roi, linear=True)
    except ValueError as e:
        raise ValueError(f"{nc.where}: {e}") from None
    if all(t is None for t in tables):
        nc.imp.set_output(nc.out_name(), x)      # identity resize
        return
    # positions outside the input (tf_crop_and_resize) read extrapolation_value: i0 = -1
    tabs = [None if t is None else (np.where(t[3], -1, t[0]), t[1], np.where(t[3], 0.0, t[2])) for t in tables]
    y = nc.graph.resize_linear(x, tabs, extrapolation_value, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


# ---------------------------------------------------------------------------
# Linear resize: graph op, thunk, compile rule
# ---------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class ResizeLinearAttrs:
    """Per axis None (unchanged) or (i0, i1, w) tuples of the output length."""
    tables: Tuple
    fill: float = 0.0

    def __repr__(self):
        return f"ResizeLinearAttrs(sizes={[None if t is None else len(t[0]) for t in self.tables]})"


@graph_method()
def resize_linear(graph, x, axis_tables, fill=0.0, name=None):
    """Linear resize: axis_tables[d] is None (axis unchanged) or (i0, i1, w)
    with output index j of axis d reading (1 - w[j]) x[i0[j]] + w[j] x[i1[j]]
    (indices inside the axis, 0 <= w <= 1); i0[j] = -1 makes every output
    at index j of that axis `fill`."""
    op = "resize_linear"
    x = graph._value(x, op, "input")
    if len(axis_tables) != len(x.shape):
        raise ValueError(f"{op}: one table (or None) per axis of {fmt_shape(x.shape)}, got {len(axis_tables)}")
    shape, tabs = [], []
    for d, t in zip(x.shape, axis_tables):
        if t is None:
            shape.append(d)
            tabs.append(None)
            continue
        i0, i1, w = (np.asarray(v) for v in t)
        if not (i0.ndim == i1.ndim == w.ndim == 1 and len(i0) == len(i1) == len(w) >= 1):
            raise ValueError(f"{op}: i0, i1, w must be 1-D of one non-zero length")
        if i0.min() < -1 or i1.min() < 0 or i0.max() >= d or i1.max() >= d:
            raise ValueError(f"{op}: source indices must lie in [0, {d})")
        if not (np.all(w >= 0) and np.all(w <= 1)):
            raise ValueError(f"{op}: weights must lie in [0, 1]")
        shape.append(len(i0))
        tabs.append((tuple(int(v) for v in i0), tuple(int(v) for v in i1), tuple(float(v) for v in w)))
    return graph._add(op, [x], shape, name, ResizeLinearAttrs(tuple(tabs), float(fill)))


@dataclass(frozen=True, repr=False)
class ResizeLinearAxisThunk(Thunk):
    """One linear pass along the middle axis of [outer, n_in, inner]."""
    x: Slice
    y: Slice
    outer: int
    n_in: int
    n_out: int
    inner: int
    i0: Tuple[int, ...]
    i1: Tuple[int, ...]
    w: Tuple[float, ...]
    fill: float
    max_threads: int

    kind: ClassVar[str] = "resize_linear"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def __repr__(self):
        return (f"{self.kind}({self.op_name!r}, x={self.x!r}, y={self.y!r}, outer={self.outer}, "
                f"n={self.n_in}->{self.n_out}, inner={self.inner})")

    def bind(self, view):
        return _resize_linear.LinearAxisLaunch(view(self.x), view(self.y), self.outer, self.n_in, self.n_out,
                                               self.inner, self.i0, self.i1, self.w, self.fill, self.max_threads)


@compile_rule("resize_linear")
def compile_resize_linear(ctx, node):
    shape = list(ctx.graph.node(node.inputs[0]).shape)
    axes = [a for a, t in enumerate(node.attrs.tables) if t is not None]
    src = ctx.buf(node.inputs[0])
    for k, a in enumerate(axes):
        i0, i1, w = node.attrs.tables[a]
        new = shape[:a] + [len(i0)] + shape[a + 1:]
        last = k == len(axes) - 1
        dst = ctx.buf(node.id) if last else ctx.temp(int(np.prod(new)) * 4, f"{node.name}.axis{a}")
        ctx.emit(ResizeLinearAxisThunk(node.name if last else f"{node.name}.axis{a}", src, dst,
                                       int(np.prod(shape[:a])), shape[a], len(i0), int(np.prod(shape[a + 1:])),
                                       i0, i1, w, node.attrs.fill, ctx.num_threads))
        src, shape = dst, new


# ---------------------------------------------------------------------------
# Functional wrappers
# ---------------------------------------------------------------------------

def _public(name):
    """Register fn as rlx_cpu.<name> (the graph builder of this module has the same name)."""
    def deco(fn):
        fn.__name__ = fn.__qualname__ = name
        return functional(name)(fn)
    return deco


@_public("upsample_nearest2x")
def upsample_nearest2x_function(input):
    """[N, C, H, W] -> [N, C, 2H, 2W], each pixel repeated 2x2."""
    return run_unary("upsample_nearest2x", input, (), lambda g, x: g.upsample_nearest2x(x))


@_public("interpolate")
def interpolate_function(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                         recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate for mode 'nearest' / 'nearest-exact'."""
    args = (size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    return run_unary("interpolate", input, args, lambda g, x: g.interpolate(
        x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias))
