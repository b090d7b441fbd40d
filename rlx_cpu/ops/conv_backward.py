"""Conv gradients: conv{1,2,3}d_backward_input and conv{1,2,3}d_backward_weight.

For y = conv(x, W) with stride s, dilation d and begin padding p (see ops/conv.py)::

    dx[b, G(o) + c, i] = sum_{o, t : i = q * s + t * d - p} dy[b, o, q] * W[o, c, t]
    dW[o, c, t]        = sum_{b, q} dy[b, o, q] * x[b, G(o) + c, q * s + t * d - p]

dx is the transposed conv of dy (scattered back through the same windows);
dW correlates x with dy.  Both run on the kernels of src/_backward.pyx over
the canonical three-axis :class:`~rlx_cpu.ops.conv.ConvNDDims` of the forward
conv.  The functional module also offers torch.nn.grad's names and argument
order (``conv2d_input(input_size, weight, grad_output, ...)``).  Gradient ops
are not themselves differentiable.
"""
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from .. import _backward, _conv2d, _convnd
from ..algorithms import ConvBackwardAlgorithm, select_conv_backward_algorithm
from ..compiler import compile as _compile
from ..functional import as_real, cached_plan, freeze, shape_key
from ..ir import Graph, fmt_shape, shape_arg
from ..registry import compile_rule, functional, graph_method, per_rank
from ..shapes import as_tuple, conv_out_size, layout_hint, resolve_padding
from ..threads import threads_key
from ..thunks import Slice, Thunk, view_or_none
from .conv import RANKS, ConvAttrs, Conv2DDims, Conv3DThunk, ConvNDDims, check_groups, emit_conv2d, \
    emit_conv_nd_dims, named

BACKWARD_INPUT_OPS = per_rank("conv{}d_backward_input")
BACKWARD_WEIGHT_OPS = per_rank("conv{}d_backward_weight")
BACKWARD_INPUT = {}      # rank -> Graph.conv{rank}d_backward_input, filled at registration
BACKWARD_WEIGHT = {}     # rank -> Graph.conv{rank}d_backward_weight
_INPUT_LAYOUT = {1: "[N, C_in, L]", 2: "[N, C_in, H, W]", 3: "[N, C_in, D, H, W]"}
_WEIGHT_LAYOUT = {1: "[C_out, C_in/groups, k]", 2: "[C_out, C_in/groups, kH, kW]",
                  3: "[C_out, C_in/groups, kD, kH, kW]"}


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

def _conv_backward_attrs(op, nsp, xs, ws, dys, stride, padding, dilation, groups):
    """Validate the forward conv these gradients belong to; return its ConvAttrs."""
    ctx = f"input {fmt_shape(xs)}, weight {fmt_shape(ws)}, grad_output {fmt_shape(dys)}"
    for arg, shape in (("input", xs), ("weight", ws), ("grad_output", dys)):
        if len(shape) != nsp + 2:
            raise ValueError(f"{op}: {arg} must have rank {nsp + 2}, got {ctx}")
    groups = check_groups(op, groups)
    c_in, c_out, cpg = xs[1], ws[0], ws[1]
    if c_in % groups or c_out % groups:
        raise ValueError(f"{op}: groups={groups} must divide in_channels={c_in} and out_channels={c_out} ({ctx})")
    if cpg * groups != c_in:
        raise ValueError(f"{op}: channel mismatch: input has {c_in} channels but weight expects "
                         f"{cpg} x groups={groups} = {cpg * groups} ({ctx}){layout_hint(xs, cpg * groups)}")
    kernel = tuple(ws[2:])
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
    out = tuple(conv_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i]) for i in range(nsp))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: the kernel does not fit the padded input ({ctx}, pads {begin}/{end}, "
                         f"dilation {dilation})")
    want = (xs[0], c_out) + out
    if tuple(dys) != want:
        raise ValueError(f"{op}: grad_output must have the conv's output shape {fmt_shape(want)} "
                         f"(stride {stride}, pads {begin}/{end}, dilation {dilation}), got {ctx}")
    return ConvAttrs(kernel, stride, begin, end, dilation, groups)


def _backward_input_builder(nd):
    op = BACKWARD_INPUT_OPS[nd]

    def backward_input(graph, grad_output, weight, input_shape, stride=1, padding=0, dilation=1, groups=1,
                       name=None):
        dy = graph._value(grad_output, op, "grad_output")
        w = graph._value(weight, op, "weight")
        xs = shape_arg(input_shape, op, "input_shape")
        attrs = _conv_backward_attrs(op, nd, xs, w.shape, dy.shape, stride, padding, dilation, groups)
        return graph._add(op, [dy, w], xs, name, attrs)

    doc = (f"Gradient of conv{nd}d w.r.t. its input: {_INPUT_LAYOUT[nd]} from grad_output "
           f"(torch.nn.grad.conv{nd}d_input).")
    return op, backward_input, doc


def _backward_weight_builder(nd):
    op = BACKWARD_WEIGHT_OPS[nd]

    def backward_weight(graph, x, grad_output, weight_shape, stride=1, padding=0, dilation=1, groups=1,
                        name=None):
        x = graph._value(x, op, "input")
        dy = graph._value(grad_output, op, "grad_output")
        ws = shape_arg(weight_shape, op, "weight_shape")
        attrs = _conv_backward_attrs(op, nd, x.shape, ws, dy.shape, stride, padding, dilation, groups)
        return graph._add(op, [x, dy], ws, name, attrs)

    doc = (f"Gradient of conv{nd}d w.r.t. its weight {_WEIGHT_LAYOUT[nd]} "
           f"(torch.nn.grad.conv{nd}d_weight).")
    return op, backward_weight, doc


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ConvBackwardInputThunk(Thunk):
    """dx of a conv (any rank) from dy and the weight."""
    dy: Slice
    weight: Slice
    dx: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvBackwardAlgorithm
    max_threads: int

    kind: ClassVar[str] = "conv_backward_input"
    reads: ClassVar[tuple] = ("dy", "weight")
    writes: ClassVar[tuple] = ("dx",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return self.dims.flops(False)      # the same multiply-adds as the forward conv

    def bind(self, view):
        return _backward.ConvBackwardInputLaunch(view(self.dy), view(self.weight), view(self.dx),
                                                 view_or_none(view, self.scratch), self.dims.as_tuple(),
                                                 int(self.algorithm), self.max_threads)


@dataclass(frozen=True, repr=False)
class ConvBackwardWeightThunk(Thunk):
    """dW of a conv (any rank) from x and dy; per-thread partial sums live in
    `scratch` and are reduced in a fixed order."""
    x: Slice
    dy: Slice
    dw: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvBackwardAlgorithm
    max_threads: int

    kind: ClassVar[str] = "conv_backward_weight"
    reads: ClassVar[tuple] = ("x", "dy")
    writes: ClassVar[tuple] = ("dw",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return self.dims.flops(False)      # the same multiply-adds as the forward conv

    def bind(self, view):
        return _backward.ConvBackwardWeightLaunch(view(self.x), view(self.dy), view(self.dw),
                                                  view_or_none(view, self.scratch), self.dims.as_tuple(),
                                                  int(self.algorithm), self.max_threads)


@dataclass(frozen=True, repr=False)
class WeightPhaseThunk(Thunk):
    """The forward weight of one phase of a lowered transposed conv, written
    each run when the weight is a plan input: [c_src, c_dst/g, *k] ->
    [c_dst, c_src/g, *phase kernel], taps chosen by `tapmap`
    (src/_backward.pyx)."""
    src: Slice
    dst: Slice
    c_src: int
    c_dst: int
    groups: int
    taps_src: int
    tapmap: Tuple[int, ...]
    max_threads: int

    kind: ClassVar[str] = "weight_phase"
    reads: ClassVar[tuple] = ("src",)
    writes: ClassVar[tuple] = ("dst",)

    def bind(self, view):
        return _backward.WeightPhaseLaunch(view(self.src), view(self.dst), self.c_src, self.c_dst, self.groups,
                                           self.taps_src, self.tapmap, self.max_threads)


@dataclass(frozen=True, repr=False)
class PhaseScatterThunk(Thunk):
    """One phase's output z [planes, *m] into y [planes, *out] (three
    spatial axes d, h, w) at origin[a] + step[a] * i along each axis."""
    z: Slice
    y: Slice
    planes: int
    m: Tuple[int, int, int]
    origin: Tuple[int, int, int]
    step: Tuple[int, int, int]
    out: Tuple[int, int, int]
    max_threads: int

    kind: ClassVar[str] = "phase_scatter"
    reads: ClassVar[tuple] = ("z",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _backward.PhaseScatterLaunch(view(self.z), view(self.y), self.planes, self.m, self.origin,
                                            self.step, self.out, self.max_threads)


# ---------------------------------------------------------------------------
# Lowering a transposed conv to forward convs
# ---------------------------------------------------------------------------
#
# A transposed conv (conv backward input; conv-transpose) of stride 1 is the
# forward conv of its input with the weight's channels swapped per group and
# its taps reversed, begin padding d*(k-1) - p.  At stride s > 1 (dilation
# 1, k >= s) it splits by output phase: the outputs o with (o + p) mod s = r
# only see taps t = r, r + s, ..., so along each axis
#     y[s*m + r - p] = sum_j x[m - j] W[r + s*j]
# is a stride-1 forward conv of x with those taps reversed, begin padding
# J - 1 - m0 (J taps, m0 the first m inside y).  A 2-D op has s_h * s_w such
# phases, a 3-D one s_d * s_h * s_w; each runs on the forward kernels
# (Winograd, the implicit-GEMM microkernel; conv3d's implicit GEMM) into its
# own buffer, and a scatter puts it in place: no col2im scatter-add, no patch
# matrix k*k/s*s times y's size.

@dataclass(frozen=True)
class TransposedPhase:
    """One forward conv of a lowered transposed conv."""
    dims: object                # its geometry, x -> this phase's outputs: Conv2DDims (1-D, 2-D) or ConvNDDims (3-D)
    taps: Tuple[int, ...]       # source tap (flattened kd*kh*kw index) of each forward tap, row-major
    origin: Tuple[int, int, int]    # y position (d, h, w) of the phase's first output
    step: Tuple[int, int, int]      # y distance between neighbouring phase outputs


def _axis_phases(k, s, d, p, n_in, n_out):
    """[(forward taps as source tap indices, begin pad, outputs, first y
    position, dilation)] along one axis, or None when it does not lower."""
    if s == 1:
        b = d * (k - 1) - p
        if b < 0 or n_out - n_in - b + d * (k - 1) < 0:
            return None
        return [(tuple(k - 1 - u for u in range(k)), b, n_out, 0, d)]
    if d != 1 or k < s:
        return None
    out = []
    for r in range(s):
        taps = list(range(r, k, s))
        j = len(taps)
        m0 = -((r - p) // s)                     # ceil((p - r) / s)
        m = (n_out - 1 + p - r) // s - m0 + 1
        if m <= 0:
            continue
        b = j - 1 - m0
        if b < 0 or m - n_in - b + j - 1 < 0:
            return None
        out.append((tuple(reversed(taps)), b, m, s * m0 + r - p, 1))
    return out


def transposed_phases(n, c_src, c_dst, sp_src, sp_dst, kernel, stride, pad, dilation, groups):
    """The forward convs (TransposedPhase list) computing a transposed conv
    from (c_src, sp_src) to (c_dst, sp_dst) (three spatial axes each, leading
    ones of size 1 for 1-D and 2-D ops), or None when it does not lower: a
    1x1(x1) kernel at stride 1 (the 1x1 GEMM paths already read the operands
    directly), a dilation above 1 with a stride above 1, a kernel smaller than
    its stride, or a padding the forward conv cannot express."""
    if all(k == 1 for k in kernel) and all(s == 1 for s in stride):
        return None
    axes = [_axis_phases(kernel[ax], stride[ax], dilation[ax], pad[ax], sp_src[ax], sp_dst[ax]) for ax in range(3)]
    if any(a is None for a in axes):
        return None
    three_d = sp_src[0] != 1 or sp_dst[0] != 1 or kernel[0] != 1
    phases = []
    for td, bd, md, od, dd in axes[0]:
        for th, bh, mh, oh, dh in axes[1]:
            for tw, bw, mw, ow, dw in axes[2]:
                if three_d:
                    dims = ConvNDDims(n, c_src, c_dst, groups, tuple(sp_src), (md, mh, mw), (len(td), len(th), len(tw)),
                                      (1, 1, 1), (bd, bh, bw), (dd, dh, dw))
                else:
                    dims = Conv2DDims(n, c_src, sp_src[1], sp_src[2], c_dst, mh, mw, len(th), len(tw), 1, 1, bh, bw,
                                      dh, dw, groups)
                taps = tuple((a * kernel[1] + b) * kernel[2] + c for a in td for b in th for c in tw)
                phases.append(TransposedPhase(dims, taps, (od, oh, ow), tuple(stride)))
    return phases


@dataclass(frozen=True, repr=False)
class PhasedConvThunk(Thunk):
    """Every phase of a lowered transposed conv at once (_convnd.PhasedConvLaunch):
    the in-place GEMM of each phase reads one zero-padded copy of x and
    writes y at the phase's strided places.  `phases`: per phase (taps,
    dilation, shift into the copy, extents, origin in y, first float of its
    packed weight in `weight`), each a 3-tuple per axis but the last."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Slice
    n: int
    c_in: int
    c_out: int
    groups: int
    size: Tuple[int, int, int]
    out: Tuple[int, int, int]
    pad: Tuple[int, int, int]
    q: Tuple[int, int, int]
    step: Tuple[int, int, int]
    phases: Tuple[tuple, ...]
    flop_count: int
    max_threads: int

    kind: ClassVar[str] = "conv_phases"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return self.flop_count

    def bind(self, view):
        return _convnd.PhasedConvLaunch(view(self.x), view(self.weight), view_or_none(view, self.bias),
                                        view(self.y), view(self.scratch), self.n, self.c_in, self.c_out, self.groups,
                                        self.size, self.out, self.pad, self.q, self.step, self.phases,
                                        self.max_threads)


def _phase_axes(d):
    """Per axis (d, h, w) of a phase's forward conv: (input size, taps, begin
    pad, dilation, outputs)."""
    if isinstance(d, ConvNDDims):
        return tuple(zip(d.in_sp, d.kernel, d.pad, d.dilation, d.out_sp))
    return ((1, 1, 0, 1, 1), (d.h, d.kh, d.ph, d.dh, d.h_out), (d.w, d.kw, d.pw, d.dw, d.w_out))


def phases_share_one_copy(ctx, phases, weight_constant):
    """Whether a lowered transposed conv runs all its phases in one
    PhasedConvLaunch: more than one phase, a constant weight, and every phase
    a conv that 'auto' would run on the in-place implicit GEMM anyway, or a
    1x1 phase on the microkernel (the same chain of FMAs from 0, so the same
    bits), with no tuning asked for."""
    from ..algorithms import (ConvAlgorithm, conv_microkernel_layout, implicit_reads_in_place,
                              select_conv_algorithm, select_convnd_algorithm)
    from .conv import conv3d_implicit_ok
    if len(phases) < 2 or not weight_constant or ctx.tune:
        return False
    for ph in phases:
        d = ph.dims
        if isinstance(d, ConvNDDims):
            algo = select_convnd_algorithm(d, "auto", ctx.flags, op="conv3d", transposed=False,
                                           nthreads=ctx.num_threads)
            k = (d.c_in // d.groups) * d.kernel[0] * d.kernel[1] * d.kernel[2]
            if algo != ConvAlgorithm.IM2COL or not conv3d_implicit_ok(d, ctx.flags) or \
                    not implicit_reads_in_place(d.c_out // d.groups, k, ctx.flags):
                return False
        else:
            algo = select_conv_algorithm(d, "auto", ctx.flags)
            layout = conv_microkernel_layout(d, algo, ctx.flags) if algo in (ConvAlgorithm.IM2COL,
                                                                            ConvAlgorithm.GEMM_1X1) else 0
            # a 1x1 phase on the microkernel sums in the same order from 0
            if not (layout == _conv2d.GEMM_LAYOUT_IMPLICIT_DIRECT or
                    (algo == ConvAlgorithm.GEMM_1X1 and layout)):
                return False
    return True


def _emit_phased(ctx, node, phases, x, w_value, bias, y, out):
    """One PhasedConvThunk for `phases` (phases_share_one_copy said yes)."""
    d0 = phases[0].dims
    axes = [_phase_axes(ph.dims) for ph in phases]
    size = tuple(axes[0][a][0] for a in range(3))
    pad = tuple(max(ax[a][2] for ax in axes) for a in range(3))
    q = tuple(max(pad[a] - ax[a][2] + (ax[a][1] - 1) * ax[a][3] + ax[a][4] for ax in axes) for a in range(3))
    cog = d0.c_out // d0.groups
    packed, records, woff, flops = [], [], 0, 0
    for ph, ax in zip(phases, axes):
        d = ph.dims
        fwd_kernel = d.kernel if isinstance(d, ConvNDDims) else (d.kh, d.kw)
        wv = _backward.phase_weight(w_value, d.c_out, d.groups, ph.taps, fwd_kernel)
        wp = _conv2d.gemm_pack_weight(wv, d.groups, _conv2d.GEMM_LAYOUT_ROWS)
        taps = tuple(a[1] for a in ax)
        records.append((taps, tuple(a[3] for a in ax), tuple(pad[i] - ax[i][2] for i in range(3)),
                        tuple(a[4] for a in ax), ph.origin, woff))
        packed.append(wp)
        woff += wp.size
        flops += 2 * d.n * d.c_out * (d.c_in // d.groups) * taps[0] * taps[1] * taps[2] * \
            ax[0][4] * ax[1][4] * ax[2][4]
    w = ctx.constant(np.concatenate(packed), f"{node.name}.phases.W")
    nfloats = _convnd.phased_scratch_floats(d0.c_in, d0.groups, size, pad, q, ctx.num_threads)
    scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
    ctx.emit(PhasedConvThunk(node.name, x, w, bias, y, scratch, d0.n, d0.c_in, d0.c_out, d0.groups, size, out,
                             pad, q, phases[0].step, tuple(records), flops, ctx.num_threads))


@dataclass(frozen=True)
class TransposedGeom:
    """A transposed conv's geometry from its source (x, or dy) to its
    destination (y, or dx), three spatial axes; pad is the begin padding."""
    c_src: int
    c_dst: int
    groups: int
    sp_src: tuple
    sp_dst: tuple
    stride: tuple
    pad: tuple
    dilation: tuple


@dataclass(frozen=True, repr=False)
class DepthwiseTransposedThunk(Thunk):
    """A depthwise (one output channel per input channel) 2-D transposed conv
    straight from the input (_backward.DepthwiseTransposedLaunch): per
    output row, each column phase a short 1-D conv over contiguous inputs,
    the phases interleaved into y.  dims = (h, w, oh, ow, kh, kw, sh, sw,
    ph, pw)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Slice
    n: int
    c: int
    dims: Tuple[int, ...]
    max_threads: int

    kind: ClassVar[str] = "conv_transpose_depthwise"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        h, w, _, _, kh, kw = self.dims[:6]
        return 2 * self.n * self.c * h * w * kh * kw

    def bind(self, view):
        return _backward.DepthwiseTransposedLaunch(view(self.x), view(self.weight), view_or_none(view, self.bias),
                                                   view(self.y), view(self.scratch), self.n, self.c, self.dims,
                                                   self.max_threads)


def depthwise_transposed_dims(geom, kernel):
    """The DepthwiseTransposedThunk dims of a transposed conv, or None when it
    is not a 2-D (or 1-D) depthwise one with multiplier 1, dilation 1 and a
    kernel at least its stride on each axis."""
    g = geom
    if not (g.groups == g.c_src == g.c_dst and g.groups > 1):
        return None
    if g.sp_src[0] != 1 or g.sp_dst[0] != 1 or kernel[0] != 1 or any(d != 1 for d in g.dilation):
        return None
    if any(kernel[a] < g.stride[a] for a in (1, 2)) or any(p < 0 for p in g.pad):
        return None
    if not _backward.depthwise_transposed_supported(kernel[1], kernel[2], g.stride[1], g.stride[2]):
        return None
    return (g.sp_src[1], g.sp_src[2], g.sp_dst[1], g.sp_dst[2], kernel[1], kernel[2], g.stride[1], g.stride[2],
            g.pad[1], g.pad[2])


def emit_transposed_phases(ctx, node, phases, src_id, w_id, bias_id, kernel, geom=None):
    """Emit `phases` (transposed_phases) for `node`: per phase its weight
    (made now for a constant weight, else by a WeightPhaseThunk each run), its
    forward conv (auto picks the algorithm; with tune=True a 1-D/2-D one is
    timed) and, unless the one phase is y itself (stride 1), the scatter into
    y.  Only under conv_algorithm='auto'; a forced 'im2col' or 'reference'
    keeps the op's own GEMM or reference kernels."""
    taps_src = kernel[0] * kernel[1] * kernel[2]
    y = ctx.buf(node.id)
    x = ctx.buf(src_id)
    bias = ctx.buf(bias_id) if bias_id is not None else None
    direct = len(phases) == 1 and phases[0].origin == (0, 0, 0) and phases[0].step == (1, 1, 1)
    wconst = ctx.is_constant(w_id)
    out = (1,) * (5 - len(node.shape)) + tuple(node.shape[2:])
    op = f"{node.op} {node.name!r}"
    dw = depthwise_transposed_dims(geom, kernel) if geom is not None and len(phases) > 1 else None
    if dw is not None:
        # one launch from the input: no phase convs of one channel each, no scatters
        scratch = ctx.scratch(4 * _backward.depthwise_transposed_scratch_floats(dw, ctx.num_threads),
                              node.name + ".scratch")
        ctx.emit(DepthwiseTransposedThunk(node.name, x, ctx.buf(w_id), bias, y, scratch, phases[0].dims.n,
                                          geom.c_src, dw, ctx.num_threads))
        return
    if phases_share_one_copy(ctx, phases, wconst):
        _emit_phased(ctx, node, phases, x, ctx.graph.node(w_id).value, bias, y, out)
        return
    for i, ph in enumerate(phases):
        d = ph.dims
        three_d = isinstance(d, ConvNDDims)
        fwd_kernel = d.kernel if three_d else (d.kh, d.kw)
        m = d.out_sp if three_d else (1, d.h_out, d.w_out)
        name = node.name if direct else f"{node.name}.phase{i}"
        if wconst:
            w_value = _backward.phase_weight(ctx.graph.node(w_id).value, d.c_out, d.groups, ph.taps, fwd_kernel)
            w = ctx.constant(w_value, name + ".W")
        else:
            w_value = None
            w = ctx.temp(4 * d.c_out * (d.c_in // d.groups) * len(ph.taps), name + ".W")
            ctx.emit(WeightPhaseThunk(name, ctx.buf(w_id), w, d.c_in, d.c_out, d.groups, taps_src, ph.taps,
                                      ctx.num_threads))
        z = y if direct else ctx.temp(4 * d.n * d.c_out * m[0] * m[1] * m[2], name + ".out")
        if three_d:
            emit_conv_nd_dims(ctx, name, op, Conv3DThunk, d, x, w, w_value, bias, z, requested="auto")
        else:
            emit_conv2d(ctx, name, op, d, x, w, w_value, bias, None, None, z, requested="auto")
        if not direct:
            ctx.emit(PhaseScatterThunk(name, z, y, d.n * d.c_out, tuple(m), ph.origin, ph.step, out,
                                       ctx.num_threads))


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

@compile_rule(*BACKWARD_INPUT_OPS.values())
def compile_conv_backward_input(ctx, node):
    dy_node = ctx.graph.node(node.inputs[0])
    dims = ConvNDDims.from_attrs(node.shape, dy_node.shape, node.attrs)
    algo = select_conv_backward_algorithm(dims, ctx.conv_algorithm, ctx.flags, kernel="input")
    if ctx.conv_algorithm == "auto" and algo != ConvBackwardAlgorithm.REFERENCE:
        phases = transposed_phases(dims.n, dims.c_out, dims.c_in, dims.out_sp, dims.in_sp, dims.kernel,
                                   dims.stride, dims.pad, dims.dilation, dims.groups)
        if phases is not None:
            emit_transposed_phases(ctx, node, phases, node.inputs[0], node.inputs[1], None, dims.kernel,
                                   TransposedGeom(dims.c_out, dims.c_in, dims.groups, dims.out_sp, dims.in_sp,
                                                  dims.stride, dims.pad, dims.dilation))
            return
    t = ctx.num_threads
    nbytes = 4 * _backward.conv_backward_input_scratch_floats(dims.as_tuple(), int(algo), t)
    ctx.emit(ConvBackwardInputThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                    ctx.buf(node.id), ctx.scratch(nbytes, node.name + ".scratch"),
                                    dims, algo, t))


@compile_rule(*BACKWARD_WEIGHT_OPS.values())
def compile_conv_backward_weight(ctx, node):
    x_node, dy_node = ctx.graph.node(node.inputs[0]), ctx.graph.node(node.inputs[1])
    dims = ConvNDDims.from_attrs(x_node.shape, dy_node.shape, node.attrs)
    t = ctx.num_threads
    algo = select_conv_backward_algorithm(dims, ctx.conv_algorithm, ctx.flags, nthreads=t)
    nbytes = 4 * _backward.conv_backward_weight_scratch_floats(dims.as_tuple(), int(algo), t)
    ctx.emit(ConvBackwardWeightThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                     ctx.buf(node.id), ctx.scratch(nbytes, node.name + ".scratch"),
                                     dims, algo, t))


# ---------------------------------------------------------------------------
# Functional
# ---------------------------------------------------------------------------

def _run_backward(op, first, second, target_shape, stride, padding, dilation, groups, conv_algorithm):
    """Compile (cached) and run one gradient op of two array inputs, named as
    the graph method's arguments, and a static target shape."""
    (a_name, a), (b_name, b) = first, second
    a = as_real(a_name, op, a)
    b = as_real(b_name, op, b)
    target = shape_key(target_shape)
    key = (op, a.shape, b.shape, target, freeze(stride), freeze(padding), freeze(dilation), freeze(groups),
           conv_algorithm, threads_key())

    def build():
        g = Graph()
        out = getattr(g, op)(g.input(a_name, a.shape), g.input(b_name, b.shape), target, stride=stride,
                             padding=padding, dilation=dilation, groups=groups)
        g.output(out)
        return _compile(g, conv_algorithm=conv_algorithm)

    return cached_plan(key, build).run({a_name: a, b_name: b})[0]


def _backward_input_function(nd):
    op = BACKWARD_INPUT_OPS[nd]

    def backward_input(grad_output, weight, input_shape, stride=1, padding=0, dilation=1, groups=1, *,
                       conv_algorithm="auto"):
        return _run_backward(op, ("grad_output", grad_output), ("weight", weight), input_shape, stride,
                             padding, dilation, groups, conv_algorithm)

    backward_input.__doc__ = f"Gradient of conv{nd}d w.r.t. its input, shape input_shape {_INPUT_LAYOUT[nd]}."

    def torch_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
        return backward_input(grad_output, weight, input_size, stride, padding, dilation, groups)

    torch_input.__doc__ = f"As torch.nn.grad.conv{nd}d_input."
    return backward_input, torch_input


def _backward_weight_function(nd):
    op = BACKWARD_WEIGHT_OPS[nd]

    def backward_weight(input, grad_output, weight_shape, stride=1, padding=0, dilation=1, groups=1, *,
                        conv_algorithm="auto"):
        return _run_backward(op, ("input", input), ("grad_output", grad_output), weight_shape, stride,
                             padding, dilation, groups, conv_algorithm)

    backward_weight.__doc__ = (f"Gradient of conv{nd}d w.r.t. its weight, shape weight_shape "
                               f"{_WEIGHT_LAYOUT[nd]}.")

    def torch_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
        return backward_weight(input, grad_output, weight_size, stride, padding, dilation, groups)

    torch_weight.__doc__ = f"As torch.nn.grad.conv{nd}d_weight."
    return backward_weight, torch_weight


# ---------------------------------------------------------------------------
# Registration: one definition, three ranks
# ---------------------------------------------------------------------------

for _nd in RANKS:
    for _builder, _table, _function in ((_backward_input_builder, BACKWARD_INPUT, _backward_input_function),
                                        (_backward_weight_builder, BACKWARD_WEIGHT, _backward_weight_function)):
        _op, _method, _doc = _builder(_nd)
        graph_method(_op, doc=_doc)(named(_method, _op))
        _table[_nd] = getattr(Graph, _op)
        _fn, _torch_fn = _function(_nd)
        functional(_op)(named(_fn, _op))
        _torch_name = _op.replace("_backward", "")          # conv2d_input, conv2d_weight (torch.nn.grad)
        functional(_torch_name)(named(_torch_fn, _torch_name))
del _nd, _builder, _table, _function, _op, _method, _doc, _fn, _torch_fn, _torch_name
