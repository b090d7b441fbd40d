"""Convolution: conv1d, conv2d, conv3d (cross-correlation, as PyTorch and ONNX).

For x [N, C_in, *in], weight [C_out, C_in/g, *k] in g groups, output point p
on n spatial axes (n = 1, 2, 3)::

    y[b, o, p] = bias[o] + sum_{c, t} x[b, G(o) + c, p * s + t * d - pad_begin] * W[o, c, t]

with G(o) the first input channel of o's group, t running over the kernel
taps and out-of-range reads being zero (padding).  Per axis the output size is
floor((in + pads - d * (k - 1) - 1) / s) + 1.

conv1d and conv2d run on the 2-D kernels (src/_conv2d.pyx: reference,
im2col, direct, Winograd F(2x2, 3x3) and F(4x4, 3x3), 1x1 GEMM) over :class:`Conv2DDims`; a
1-D conv is a 2-D conv with H = 1.  conv3d runs on the N-d kernels
(src/_convnd.pyx) over :class:`ConvNDDims`, the canonical three-axis geometry
that conv-transpose and the conv gradients share.

The gradients (see ``_vjp_conv``) are the ops of ``conv_backward``.
"""
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from .. import _conv2d, _convnd
from ..algorithms import (ConvAlgorithm, conv_microkernel_layout, implicit_reads_in_place, prefers_conv_microkernel,
                          select_conv_algorithm, select_convnd_algorithm, winograd_on_microkernel)
from ..shapes import pad_pairs
from ..compiler import compile as _compile
from ..functional import as_real, cached_plan, freeze
from ..ir import Graph, fmt_shape
from ..onnx_import import graph_op, spatial_rank, window_padding
from ..registry import compile_rule, functional, gradient, graph_method, onnx_op, per_rank
from ..shapes import as_tuple, conv_out_size, layout_hint, resolve_padding
from ..threads import threads_key
from ..tuning import tune_conv
from ..thunks import Slice, Thunk

Shape = Tuple[int, ...]

RANKS = (1, 2, 3)
CONV_OPS = per_rank("conv{}d")            # rank -> graph method / node op / function name
CONV = {}                                 # rank -> Graph.conv{rank}d, filled at registration
_LAYOUT = {1: ("[N, C, L]", "k"), 2: ("[N, C, H, W]", "kH, kW"), 3: ("[N, C, D, H, W]", "kD, kH, kW")}


# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvEpilogue:
    """What a conv1d/conv2d node applies to its output before storing it:
    y = act(conv(x, W) + bias + residual).  Only the graph passes
    (rlx_cpu/passes.py) build it, by fusing the elementwise nodes after a
    conv; `act` is an activation op name (a key of EPILOGUE_ACTS) or None,
    with that op's alpha and beta, and `residual` says the node's last input
    is a tensor of the output's shape added before the activation."""
    act: Optional[str] = None
    alpha: float = 0.0
    beta: float = 0.0
    residual: bool = False

    def __repr__(self):
        parts = ["add"] if self.residual else []
        if self.act is not None:
            parts.append(self.act if self.act not in ("clip", "leaky_relu") else
                         f"{self.act}({self.alpha:g}, {self.beta:g})" if self.act == "clip" else
                         f"{self.act}({self.alpha:g})")
        return "+".join(parts) or "none"


# Activation op -> epilogue code of the conv2d kernels (src/rlx_epilogue.h).
EPILOGUE_ACTS = {"relu": _conv2d.ACT_RELU, "clip": _conv2d.ACT_CLIP, "leaky_relu": _conv2d.ACT_LEAKY_RELU,
                 "sigmoid": _conv2d.ACT_SIGMOID, "hard_sigmoid": _conv2d.ACT_HARD_SIGMOID,
                 "hard_swish": _conv2d.ACT_HARD_SWISH, "tanh": _conv2d.ACT_TANH,
                 "silu": _conv2d.ACT_SILU}


@dataclass(frozen=True)
class ConvAttrs:
    """Canonical convolution attributes for n spatial axes (n = 1, 2, 3).
    `epilogue` (conv1d/conv2d only, set by the graph passes) is fused into
    the kernel; the node's inputs are then x, W, [bias], [residual]."""
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    groups: int
    epilogue: Optional[ConvEpilogue] = None

    @property
    def ndim(self):
        return len(self.kernel)


def conv_operands(node):
    """(x, W, bias or None, residual or None) node ids of a conv node."""
    ins = list(node.inputs)
    residual = ins.pop() if node.attrs.epilogue is not None and node.attrs.epilogue.residual else None
    return ins[0], ins[1], (ins[2] if len(ins) > 2 else None), residual


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

def check_groups(op, groups):
    """groups as a positive int (conv, conv-transpose and conv gradients)."""
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
    return int(groups)


def _conv(graph, op, nsp, x, weight, bias, stride, padding, dilation, groups, name):
    x = graph._value(x, op, "input")
    weight = graph._value(weight, op, "weight")
    xs, ws = x.shape, weight.shape
    ctx = f"input {fmt_shape(xs)}, weight {fmt_shape(ws)}"
    if len(xs) != nsp + 2:
        raise ValueError(f"{op}: input must have rank {nsp + 2} (N, C, {'spatial, ' * nsp}...), got {ctx}")
    if len(ws) != nsp + 2:
        raise ValueError(f"{op}: weight must have rank {nsp + 2} [C_out, C_in/groups, k...], got {ctx}")
    groups = check_groups(op, groups)
    n, c_in = xs[0], xs[1]
    c_out, cpg = ws[0], ws[1]
    if c_in % groups:
        raise ValueError(f"{op}: groups={groups} does not divide in_channels={c_in} "
                         f"({ctx}){layout_hint(xs, cpg * groups)}")
    if c_out % groups:
        raise ValueError(f"{op}: groups={groups} does not divide out_channels={c_out} ({ctx})")
    if cpg * groups != c_in:
        raise ValueError(
            f"{op}: channel mismatch: input has {c_in} channels but weight expects "
            f"{cpg} x groups={groups} = {cpg * groups} ({ctx}){layout_hint(xs, cpg * groups)}")
    kernel = tuple(ws[2:])
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
    out_sp = []
    for i in range(nsp):
        o = conv_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i])
        if o < 1:
            raise ValueError(
                f"{op}: kernel extent {dilation[i] * (kernel[i] - 1) + 1} (kernel {kernel[i]}, dilation "
                f"{dilation[i]}) is larger than padded input {xs[2 + i] + begin[i] + end[i]} on spatial "
                f"axis {i} ({ctx}, pads {begin}/{end})")
        out_sp.append(o)
    attrs = ConvAttrs(kernel, stride, begin, end, dilation, groups)
    return graph._add(op, with_bias(graph, op, [x, weight], bias, c_out, ctx), (n, c_out, *out_sp), name, attrs)


def with_bias(graph, op, inputs, bias, c_out, ctx):
    """`inputs` plus the optional bias node, which must have shape [c_out]."""
    if bias is None:
        return inputs
    bias = graph._value(bias, op, "bias")
    if bias.shape != (c_out,):
        raise ValueError(f"{op}: bias must have shape [{c_out}], got {fmt_shape(bias.shape)} ({ctx})")
    return inputs + [bias]


def _conv_builder(nd):
    op = CONV_OPS[nd]

    def conv(graph, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None):
        return _conv(graph, op, nd, x, weight, bias, stride, padding, dilation, groups, name)

    layout, taps = _LAYOUT[nd]
    doc = f"{nd}-D convolution on {layout} with weight [C_out, C_in/groups, {taps}]."
    return op, conv, doc


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Conv2DDims:
    """Canonical conv2d geometry.  Padding is the *begin* padding; the end
    padding is implied by (h_out, w_out).  1-D convs use h = kh = 1."""
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    h_out: int
    w_out: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int

    def as_tuple(self):
        # Field by field: dataclasses.astuple deep-copies (tens of us), and
        # binding calls this whenever a run context re-binds a launch.
        return (self.n, self.c_in, self.h, self.w, self.c_out, self.h_out, self.w_out, self.kh, self.kw,
                self.sh, self.sw, self.ph, self.pw, self.dh, self.dw, self.groups)

    @property
    def flops(self):
        return 2 * self.n * self.c_out * self.h_out * self.w_out * (self.c_in // self.groups) * self.kh * self.kw

    def __repr__(self):
        return (f"n={self.n} {self.c_in}->{self.c_out} {self.h}x{self.w}->{self.h_out}x{self.w_out} "
                f"k={self.kh}x{self.kw} s={self.sh},{self.sw} p={self.ph},{self.pw} "
                f"d={self.dh},{self.dw} g={self.groups}")


def _epilogue_args(epilogue, view, residual):
    """The Conv2DLaunch keyword arguments of an epilogue (None: bias only)."""
    if epilogue is None:
        return {}
    return dict(act=EPILOGUE_ACTS[epilogue.act] if epilogue.act is not None else _conv2d.ACT_NONE,
                alpha=epilogue.alpha, beta=epilogue.beta,
                residual=view(residual) if residual is not None else None)


@dataclass(frozen=True, repr=False)
class ConvThunk(Thunk):
    """conv1d / conv2d with fused bias and epilogue (activation, residual);
    `algorithm` was chosen at compile time.  For Winograd, `weight` is the
    transformed filter U[16, c_out, c_in] (F(2x2,3x3)) or U[36, c_out, c_in]
    (F(4x4,3x3))."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    dims: Conv2DDims
    algorithm: ConvAlgorithm
    max_threads: int
    block: int = 0
    residual: Optional[Slice] = None
    epilogue: Optional[ConvEpilogue] = None
    packed: bool = False        # weight packed for the conv microkernel

    kind: ClassVar[str] = "conv"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _conv2d.Conv2DLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y),
            view(self.scratch) if self.scratch else None, self.dims.as_tuple(), int(self.algorithm),
            self.max_threads, self.block, packed=self.packed,
            **_epilogue_args(self.epilogue, view, self.residual))


@dataclass(frozen=True, repr=False)
class Conv1x1Thunk(Thunk):
    """1x1, stride 1, unpadded conv1d / conv2d: one GEMM per (image, group),
    or with a bias/epilogue one GEMM per block of `block` output columns,
    each finished while in cache."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    n: int
    c_in: int
    c_out: int
    hw: int
    groups: int
    max_threads: int
    block: int = 0
    residual: Optional[Slice] = None
    epilogue: Optional[ConvEpilogue] = None
    packed: int = 0             # weight packed for the conv microkernel: its layout (GEMM_LAYOUT_*)

    kind: ClassVar[str] = "conv_1x1"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual")
    writes: ClassVar[tuple] = ("y",)

    @property
    def flops(self):
        return 2 * self.n * self.c_out * self.hw * (self.c_in // self.groups)

    def bind(self, view):
        dims = (self.n, self.c_in, 1, self.hw, self.c_out, 1, self.hw, 1, 1, 1, 1, 0, 0, 1, 1, self.groups)
        return _conv2d.Conv2DLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y), None,
            dims, int(ConvAlgorithm.GEMM_1X1), self.max_threads, self.block, packed=self.packed,
            **_epilogue_args(self.epilogue, view, self.residual))


@dataclass(frozen=True, repr=False)
class GemmPackThunk(Thunk):
    """The weight packed for the conv microkernel when it is not a constant
    (e.g. a graph input); constant weights are packed at compile time."""
    weight: Slice
    packed: Slice
    c_out: int
    k: int
    groups: int
    layout: int = 1             # _conv2d.GEMM_LAYOUT_ROWS or GEMM_LAYOUT_CHANNELS

    kind: ClassVar[str] = "gemm_pack"
    reads: ClassVar[tuple] = ("weight",)
    writes: ClassVar[tuple] = ("packed",)

    def bind(self, view):
        return _conv2d.GemmPackLaunch(view(self.weight), view(self.packed), self.c_out, self.k, self.groups,
                                      self.layout)


@dataclass(frozen=True, repr=False)
class WinogradFilterThunk(Thunk):
    """U = G g G^T for a weight that is not a constant (e.g. a graph input);
    constant weights are transformed at compile time instead.  `tile` is the
    output tile size: 2 for F(2x2,3x3) (U[16, ...]), 4 for F(4x4,3x3) (U[36, ...])."""
    weight: Slice
    u: Slice
    c_out: int
    c_in: int
    tile: int = 2
    staging: Optional[Slice] = None     # set: U is packed for the microkernel via this buffer

    kind: ClassVar[str] = "winograd_filter"
    reads: ClassVar[tuple] = ("weight",)
    writes: ClassVar[tuple] = ("u",)
    scratch_fields: ClassVar[tuple] = ("staging",)

    def bind(self, view):
        return _conv2d.WinogradFilterLaunch(view(self.weight), view(self.u), self.c_out, self.c_in,
                                            self.tile, view(self.staging) if self.staging else None)


@dataclass(frozen=True)
class ConvNDDims:
    """Canonical geometry on three spatial axes (D, H, W) for conv3d, for
    conv-transpose of every rank and for the conv gradients.  A 1-D or 2-D op
    has leading axes of size 1 (kernel 1, stride 1, pad 0, dilation 1), so W
    stays the contiguous axis.  `in_sp` is x's spatial size and `out_sp` y's
    (for conv-transpose too); `pad` is the begin padding, the end padding
    being implied by `out_sp`."""
    n: int
    c_in: int
    c_out: int
    groups: int
    in_sp: tuple
    out_sp: tuple
    kernel: tuple
    stride: tuple
    pad: tuple
    dilation: tuple

    def as_tuple(self):
        return (self.n, self.c_in, self.c_out, self.groups, *self.in_sp, *self.out_sp,
                *self.kernel, *self.stride, *self.pad, *self.dilation)

    @classmethod
    def from_attrs(cls, x_shape, y_shape, attrs):
        """From NC+spatial shapes and ConvAttrs/ConvTransposeAttrs, padded to 3 axes."""
        lead = 3 - attrs.ndim

        def pad3(t, fill):
            return (fill,) * lead + tuple(int(v) for v in t)

        return cls(int(x_shape[0]), int(x_shape[1]), int(y_shape[1]), int(attrs.groups),
                   pad3(x_shape[2:], 1), pad3(y_shape[2:], 1), pad3(attrs.kernel, 1),
                   pad3(attrs.stride, 1), pad3(attrs.pads_begin, 0), pad3(attrs.dilation, 1))

    def flops(self, transposed):
        """2 * multiply-adds of the dense maths (every tap of every input for a
        transposed conv, including taps that land in the cropped padding)."""
        kk = self.kernel[0] * self.kernel[1] * self.kernel[2]
        if transposed:
            pts = self.in_sp[0] * self.in_sp[1] * self.in_sp[2]
            return 2 * self.n * self.c_in * pts * (self.c_out // self.groups) * kk
        pts = self.out_sp[0] * self.out_sp[1] * self.out_sp[2]
        return 2 * self.n * self.c_out * pts * (self.c_in // self.groups) * kk

    def __repr__(self):
        def f(t):
            return "x".join(str(v) for v in t)
        return (f"n={self.n} {self.c_in}->{self.c_out} {f(self.in_sp)}->{f(self.out_sp)} "
                f"k={f(self.kernel)} s={f(self.stride)} p={f(self.pad)} d={f(self.dilation)} "
                f"g={self.groups}")


@dataclass(frozen=True, repr=False)
class ConvNDKernelThunk(Thunk):
    """Base of the records the N-d kernel (_convnd.ConvNDLaunch) runs, with
    fused bias: conv3d here and conv-transpose (``transposed``).  `algorithm`
    is REFERENCE (loops) or IM2COL (vol2col + GEMM, or GEMM + col2vol);
    `implicit` (conv3d only, 0 or _convnd.IMPLICIT_PACKED/IMPLICIT_DIRECT):
    IM2COL on the conv microkernel without the patch matrix, the weight
    packed in row panels (src/rlx_implicit.h), X panels packed from the
    input copy or read in place."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvAlgorithm
    max_threads: int
    implicit: int = 0

    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)
    transposed: ClassVar[bool] = False

    @property
    def flops(self):
        return self.dims.flops(self.transposed)

    def bind(self, view):
        return _convnd.ConvNDLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y),
            view(self.scratch) if self.scratch else None, self.dims.as_tuple(), self.transposed,
            self.algorithm == ConvAlgorithm.IM2COL, self.max_threads, self.implicit)


@dataclass(frozen=True, repr=False)
class Conv3DThunk(ConvNDKernelThunk):
    """conv3d with fused bias: REFERENCE is the gather loop, IM2COL vol2col + GEMM."""
    kind: ClassVar[str] = "conv3d"


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

def conv_dims(node, graph):
    """Conv2DDims for a conv1d or conv2d node.

    A 1-D conv [N, C, L] is run as a 2-D conv on [N, C, 1, L] (same bytes):
    the k taps, stride, padding and dilation all run along L, which is the
    contiguous axis, so the kernels' inner loops stay unit-stride."""
    a = node.attrs
    xs = graph.node(node.inputs[0]).shape
    if a.ndim == 1:
        return Conv2DDims(xs[0], xs[1], 1, xs[2], node.shape[1], 1, node.shape[2],
                          1, a.kernel[0], 1, a.stride[0], 0, a.pads_begin[0], 1, a.dilation[0], a.groups)
    if a.ndim == 2:
        return Conv2DDims(xs[0], xs[1], xs[2], xs[3], node.shape[1], node.shape[2], node.shape[3],
                          a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.pads_begin[0],
                          a.pads_begin[1], a.dilation[0], a.dilation[1], a.groups)
    raise NotImplementedError(f"conv with {a.ndim} spatial dims")


@compile_rule(CONV_OPS[1], CONV_OPS[2])
def compile_conv(ctx, node):
    x_id, w_id, b_id, r_id = conv_operands(node)
    wconst = ctx.is_constant(w_id)
    emit_conv2d(ctx, node.name, f"{node.op} {node.name!r}", conv_dims(node, ctx.graph), ctx.buf(x_id),
                ctx.buf(w_id), ctx.graph.node(w_id).value if wconst else None,
                ctx.buf(b_id) if b_id is not None else None, ctx.buf(r_id) if r_id is not None else None,
                node.attrs.epilogue, ctx.buf(node.id))


def emit_conv2d(ctx, name, op, dims, x, w, w_value, bias, residual, epilogue, y, requested=None):
    """Emit the thunks of one conv1d/conv2d of `dims` on the 2-D kernels:
    x, w, bias, residual, y are buffers; w_value is the weight's array when
    it is a compile-time constant (transformed or packed now), else None (a
    per-run transform or pack thunk comes first).  Other ops that lower to a
    conv (conv gradients, conv-transpose at stride 1) emit through here, with
    `requested` in place of the plan's conv_algorithm."""
    flags = ctx.flags
    wconst = w_value is not None
    requested = ctx.conv_algorithm if requested is None else requested
    if ctx.tune and requested == "auto":
        algo, flags, ms, best = tune_conv(dims, w_value, wconst, bias is not None, flags, ctx.num_threads)
        ctx.tuning[name] = (best, ms)
    else:
        algo = select_conv_algorithm(dims, requested, flags, op=op, weight_constant=wconst)
    t = ctx.num_threads
    packed = conv_microkernel_layout(dims, algo, flags)
    if packed:
        w = _packed_weight(ctx, name, w, w_value, dims, packed)
    if algo == ConvAlgorithm.GEMM_1X1:
        block = 0
        if bias is not None or epilogue is not None:
            block = _conv2d.gemm_1x1_col_block(dims.as_tuple(), t)
        ctx.emit(Conv1x1Thunk(name, x, w, bias, y, dims.n, dims.c_in, dims.c_out,
                              dims.h * dims.w, dims.groups, t, block, residual, epilogue, packed))
        return
    block = 0
    if algo == ConvAlgorithm.IM2COL:
        block = _conv2d.im2col_col_block(dims.as_tuple(), t, packed)
    if algo in (ConvAlgorithm.WINOGRAD, ConvAlgorithm.WINOGRAD_F4):
        f4 = algo == ConvAlgorithm.WINOGRAD_F4
        # U packed (at compile time for a constant weight, else by the filter
        # thunk): the tile GEMMs run on the microkernel
        packed = _conv2d.GEMM_LAYOUT_ROWS if winograd_on_microkernel(dims, flags) else 0
        block = (_conv2d.winograd4_tile_block if f4 else _conv2d.winograd_tile_block)(dims.as_tuple(), t,
                                                                                       packed != 0)
        if wconst:
            # Transform once, now; runs only read U.
            transform = _conv2d.winograd4_filter_transform if f4 else _conv2d.winograd_filter_transform
            u_value = transform(w_value)
            if packed:
                u_value = _conv2d.winograd_pack_u(u_value, dims.c_out, dims.c_in)
            w = ctx.constant(u_value, name + ".winograd_U")
        else:
            planes = 36 if f4 else 16
            if packed:
                nfloats = planes * _conv2d.gemm_packed_floats(dims.c_out, dims.c_in, 1)
                u = ctx.temp(4 * nfloats, name + ".winograd_U")
                staging = ctx.scratch(planes * dims.c_out * dims.c_in * 4, name + ".winograd_U_staging")
            else:
                u = ctx.temp(planes * dims.c_out * dims.c_in * 4, name + ".winograd_U")
                staging = None
            ctx.emit(WinogradFilterThunk(name, w, u, dims.c_out, dims.c_in, 4 if f4 else 2, staging))
            w = u
    scratch_nbytes = 4 * _conv2d.scratch_floats(dims.as_tuple(), int(algo), t, packed)
    scratch = ctx.scratch(scratch_nbytes, name + ".scratch")
    ctx.emit(ConvThunk(name, x, w, bias, y, scratch, dims, algo, t, block, residual, epilogue, packed))


def _packed_weight(ctx, name, w, w_value, dims, layout, k=None):
    """The buffer of the weight packed for the conv microkernel in `layout`:
    packed now for a constant weight (w_value), else by a GemmPackThunk at
    the start of each run.  k: the GEMM depth when the weight has more taps
    than dims (a conv3d)."""
    if k is None:
        k = (dims.c_in // dims.groups) * dims.kh * dims.kw
    if w_value is not None:
        return ctx.constant(_conv2d.gemm_pack_weight(w_value, dims.groups, layout), name + ".packed_W")
    nfloats = max(_conv2d.gemm_packed_floats(dims.c_out, k, dims.groups, layout), 1)
    packed = ctx.temp(4 * nfloats, name + ".packed_W")
    ctx.emit(GemmPackThunk(name, w, packed, dims.c_out, k, dims.groups, layout))
    return packed


def emit_conv_nd(ctx, node, thunk_cls):
    """Emit a ConvNDKernelThunk subclass for a conv3d or conv-transpose node."""
    if getattr(node.attrs, "epilogue", None) is not None:
        raise NotImplementedError(f"{node.op} {node.name!r}: the N-d conv kernels have no fused epilogue "
                                  f"({node.attrs.epilogue!r})")
    dims = ConvNDDims.from_attrs(ctx.graph.node(node.inputs[0]).shape, node.shape, node.attrs)
    wid = node.inputs[1]
    emit_conv_nd_dims(ctx, node.name, f"{node.op} {node.name!r}", thunk_cls, dims, ctx.buf(node.inputs[0]),
                      ctx.buf(wid), ctx.graph.node(wid).value if ctx.is_constant(wid) else None,
                      ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None, ctx.buf(node.id))


def emit_conv_nd_dims(ctx, name, op, thunk_cls, dims, x, w, w_value, bias, y, requested=None):
    """Emit one N-d kernel thunk of `dims` on buffers (w_value: the weight's
    array when it is a compile-time constant, else None); conv-transpose
    lowering emits its 3-D phases through here with `requested`."""
    transposed = thunk_cls.transposed
    t = ctx.num_threads
    algo = select_convnd_algorithm(dims, ctx.conv_algorithm if requested is None else requested, ctx.flags,
                                   op=op, transposed=transposed, nthreads=t)
    implicit = 0
    if not transposed and algo == ConvAlgorithm.IM2COL and conv3d_implicit_ok(dims, ctx.flags):
        k = (dims.c_in // dims.groups) * dims.kernel[0] * dims.kernel[1] * dims.kernel[2]
        direct = implicit_reads_in_place(dims.c_out // dims.groups, k, ctx.flags)
        implicit = _convnd.IMPLICIT_DIRECT if direct else _convnd.IMPLICIT_PACKED
        pack_dims = Conv2DDims(1, dims.c_in, 1, 1, dims.c_out, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, dims.groups)
        w = _packed_weight(ctx, name, w, w_value, pack_dims, _conv2d.GEMM_LAYOUT_ROWS, k=k)
    nfloats = _convnd.scratch_floats(dims.as_tuple(), transposed, algo == ConvAlgorithm.IM2COL, t, implicit)
    scratch = ctx.scratch(4 * nfloats, name + ".scratch")
    ctx.emit(thunk_cls(name, x, w, bias, y, scratch, dims, algo, t, implicit))


def conv3d_implicit_ok(dims, flags):
    """A conv3d on the GEMM path runs on the microkernel without a patch
    matrix (the implicit copy of src/rlx_implicit.h) with the AVX2+FMA
    variant, unless RLX_CONV_MICROKERNEL or RLX_IMPLICIT_GEMM is off, or
    its input copy would pass IMPLICIT_MAX_FLOATS; and not for a pointwise
    conv3d (1x1x1, stride 1, unpadded), whose input already is the patch
    matrix."""
    from ..algorithms import IMPLICIT_MAX_FLOATS
    if flags.microkernel is False or flags.implicit is False:
        return False
    if dims.kernel == (1, 1, 1) and dims.stride == (1, 1, 1) and dims.pad == (0, 0, 0) and dims.in_sp == dims.out_sp:
        return False
    if flags.microkernel is None and _conv2d.simd_level() < 1:
        return False
    return _convnd.implicit_floats(dims.as_tuple()) <= IMPLICIT_MAX_FLOATS


@compile_rule(CONV_OPS[3])
def compile_conv3d(ctx, node):
    emit_conv_nd(ctx, node, Conv3DThunk)


# ---------------------------------------------------------------------------
# Gradient
# ---------------------------------------------------------------------------

# y = conv(x, W) is linear in x and in W: dx = conv_backward_input(dy, W)
# (the transposed conv of dy), dW = conv_backward_weight(x, dy) (the
# correlation of x with dy), db = dy summed over every axis but channels.
@gradient(*CONV_OPS.values())
def _vjp_conv(g, node, dy, needs):
    # conv_backward imports this module, so its builder tables are read here.
    from .conv_backward import BACKWARD_INPUT, BACKWARD_WEIGHT
    a = node.attrs
    if a.epilogue is not None:
        raise ValueError(f"grads: {node.op} {node.name!r} has a fused epilogue ({a.epilogue!r}), which has no "
                         "gradient rule; differentiate the graph before the compile passes fuse it")
    x, w = g.node(node.inputs[0]), g.node(node.inputs[1])
    geo = dict(stride=a.stride, padding=pad_pairs(a), dilation=a.dilation, groups=a.groups)
    out = [None] * len(node.inputs)
    if needs[0]:
        out[0] = BACKWARD_INPUT[a.ndim](g, dy, w, x.shape, **geo)
    if needs[1]:
        out[1] = BACKWARD_WEIGHT[a.ndim](g, x, dy, w.shape, **geo)
    if len(node.inputs) > 2 and needs[2]:
        out[2] = g.bias_grad(dy)
    return out


# ---------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------

def onnx_conv_geometry(nc, x, w):
    """Spatial rank, strides and dilations of an ONNX Conv / ConvTranspose
    node, after checking W's rank and kernel_shape."""
    nsp = spatial_rank(nc, x)
    if len(w.shape) != nsp + 2:
        raise ValueError(f"{nc.where}: W must have rank {nsp + 2}, got {list(w.shape)} for X {list(x.shape)}")
    kernel = nc.ints("kernel_shape", nsp, tuple(w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ValueError(f"{nc.where}: kernel_shape {list(kernel)} does not match W {list(w.shape)}")
    return nsp, nc.ints("strides", nsp, (1,) * nsp), nc.ints("dilations", nsp, (1,) * nsp)


@onnx_op("Conv", versions=(1, 22))
def _onnx_conv(nc):
    nc.check_attrs(("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
    x = nc.tensor(0, "X")
    w = nc.tensor(1, "W")
    b = nc.optional_tensor(2, "B")
    nsp, strides, dilations = onnx_conv_geometry(nc, x, w)
    group = int(nc.attr("group", 1))
    padding = window_padding(nc, nsp)
    method = graph_op(nc, CONV_OPS[nsp])
    y = method(x, w, b, stride=strides, padding=padding, dilation=dilations, groups=group,
               name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


# ---------------------------------------------------------------------------
# Functional
# ---------------------------------------------------------------------------

def _run_conv(op, x, weight, bias, stride, padding, dilation, groups, conv_algorithm):
    x = as_real("input", op, x)
    weight = as_real("weight", op, weight)
    feeds = {"x": x, "weight": weight}
    if bias is not None:
        bias = as_real("bias", op, bias)
        feeds["bias"] = bias
    # Everything compile() reads goes into the key, including the RLX_* env
    # flags (threads_key holds every one), so a cached plan never hides a
    # change of them.
    key = (op, x.shape, weight.shape, None if bias is None else bias.shape, freeze(stride),
           freeze(padding), freeze(dilation), freeze(groups), conv_algorithm, threads_key())

    def build():
        g = Graph()
        xi = g.input("x", x.shape)
        wi = g.input("weight", weight.shape)
        bi = g.input("bias", bias.shape) if bias is not None else None
        y = getattr(g, op)(xi, wi, bi, stride=stride, padding=padding, dilation=dilation, groups=groups)
        g.output(y)
        return _compile(g, conv_algorithm=conv_algorithm)

    return cached_plan(key, build).run(feeds)[0]


def _conv_function(nd):
    op = CONV_OPS[nd]

    def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, conv_algorithm="auto"):
        return _run_conv(op, input, weight, bias, stride, padding, dilation, groups, conv_algorithm)

    layout, taps = _LAYOUT[nd]
    conv.__doc__ = _CONV_FUNCTION_DOC.format(nd=nd, layout=layout.replace("C", "C_in"), taps=taps,
                                             axes=("(w)", "(h, w)", "(d, h, w)")[nd - 1])
    if nd in (1, 2):
        conv.__doc__ += _WINOGRAD_RANGE_DOC
    return conv


_CONV_FUNCTION_DOC = """{nd}-D convolution (cross-correlation, as torch.nn.functional.conv{nd}d).

    input   {layout} array, channels first (a channels-last input is
            reported with a layout hint); any real dtype (float64, int, ...):
            it is converted to float32 and the computation is float32.
    weight  [C_out, C_in/groups, {taps}]; bias: None or [C_out].
    stride, dilation: an int or one int per spatial axis {axes}.
    padding: an int (every side); a per-axis tuple (symmetric); ONNX pads
            (b1, ..., bn, e1, ..., en); ((b, e), ...) pairs per axis;
            "valid" (none); "same" (PyTorch, stride 1: output size = input
            size); or ONNX "SAME_UPPER" / "SAME_LOWER".
    groups  divides C_in and C_out.
    conv_algorithm: "auto" (chosen per shape), "reference", "im2col",
            "direct", "winograd" (F(2x2, 3x3)) or "winograd_f4" (F(4x4, 3x3))
            (ValueError where it cannot run).

    Returns a new float32 array [N, C_out, out...].  Bad arguments raise
    ValueError/TypeError naming the argument and the shapes.

    Plan cache: the first call for a combination of shapes, attributes,
    conv_algorithm, thread count (rlx_cpu.get_num_threads()) and RLX_* conv
    flags compiles a plan whose weight and bias are *inputs*, and keeps it
    (least recently used of 128 evicted; rlx_cpu.functional.clear_plan_cache()
    empties it).  Later calls with new weights reuse it at no compile cost.
    For a fixed model, build a Graph and rlx_cpu.compile it instead.
    """


_WINOGRAD_RANGE_DOC = """

    Finite range: conv_algorithm='auto' may pick Winograd F(2x2, 3x3) (3x3
    kernel, stride 1, dilation 1, groups 1, C_in and C_out >= 16; also
    conv_algorithm='winograd').  Its result is finite whenever
    max|input| <= 8.5e37 (FLT_MAX / 4) and
    81 * C_in * max|input| * max|weight| <= 3.4e38 (FLT_MAX).  Beyond that it
    can return inf where the exact result is finite: for such data pass
    conv_algorithm='direct' or 'im2col', or set RLX_WINOGRAD=0.  Where auto
    picks Winograd F(4x4, 3x3) instead (at least 32 4x4 output tiles, C_in
    <= 192; also conv_algorithm='winograd_f4') the range is
    max|input| <= 3.4e36 (FLT_MAX / 100) and
    2304 * C_in * max|input| * max|weight| <= 3.4e38.
    'reference', 'im2col' and 'direct' overflow only where the float32 sums
    themselves do."""


# ---------------------------------------------------------------------------
# Registration: one definition, three ranks
# ---------------------------------------------------------------------------

def named(fn, name):
    """fn renamed to the op it implements (a rank-generated function)."""
    fn.__name__ = fn.__qualname__ = name
    return fn


for _nd in RANKS:
    _op, _builder, _doc = _conv_builder(_nd)
    graph_method(_op, doc=_doc)(named(_builder, _op))
    CONV[_nd] = getattr(Graph, _op)
    functional(_op)(named(_conv_function(_nd), _op))
del _nd, _op, _builder, _doc
