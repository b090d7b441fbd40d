"""The channel-blocked activation layout (NCHW8c) and the ops that run on it.

A float32 activation [N, C, H, W] with C a multiple of 8 can be stored as
[N, C/8, H, W, 8]: the 8 channels of a block next to each other at every
pixel.  The graph pass ``blocked_layout`` (rlx_cpu/passes.py) rewrites chains
of convs that have blocked kernels into these node ops and puts one reorder at
each end of a chain:

``to_nchwc``       x [N, C, H, W] -> [N, C/8, H, W, 8]
``from_nchwc``     [N, C/8, H, W, 8] -> [N, C, H, W]
``pool2d_nchwc``   a 2-D max/avg pool (its PoolAttrs, no indices) on blocked
                   input and output
``global_pool_nchwc`` a global max/avg pool from blocked input to [N, C, 1, 1]
                   (the same memory in both layouts, so a chain ends there
                   without a reorder)
``channel_binary_nchwc`` x (op) g for op add / sub / mul / div, with x a
                   blocked value and g a per-channel operand [N or 1, C, 1,
                   ...] (squeeze-excitation's gate, which a global pool and
                   two tiny convs computed in NCHW: [N, C, 1, 1] is the same
                   memory in both layouts); inputs x, g; ChannelBinaryAttrs
                   says the op and which side x is on
``batch_norm_nchwc`` inference batch norm of a blocked value (one the
                   fold_batch_norm pass left: DenseNet's after a concat);
                   inputs x, scale, bias, mean, var as batch_norm's
``inverted_residual_nchwc`` MobileNetV2's block as one node (pass
                   ``fuse_inverted_residual``): [expand 1x1 ->] depthwise
                   3x3 (stride 1 or 2, padding 1) -> project 1x1 (+ the
                   block's residual), each conv with its bias and
                   activation (InvertedResidualAttrs); the two inner
                   tensors never reach the arena
``conv3d_nchwc``   a conv3d (groups with whole blocks, any kernel, stride,
                   padding and dilation) on blocked [N, C/8, D, H, W, 8]
                   input and output: the dense kernel over the output
                   volume; inputs x, W, [bias]
``conv_transpose2d_nchwc`` a conv_transpose1d/2d (groups 1, dilation 1,
                   a kernel at least its stride on each axis; its
                   ConvTransposeAttrs as 2-D) on blocked input and output;
                   inputs x, W, [bias].  One dense conv per output phase
                   of the stride, then each phase's outputs copied to their
                   strided places; constant weights, packed at compile time
``conv_transpose3d_nchwc`` the same for a conv_transpose3d, on blocked
                   [N, C/8, D, H, W, 8] input and output (each phase a
                   dense conv over its output volume, as conv3d_nchwc)
``conv2d_nchwc``   a conv2d (its ConvAttrs, fused epilogue included) on
                   blocked input, residual and output; inputs x, W, [bias],
                   [residual].  Four kinds: 1x1 (groups 1, stride 1, no
                   padding); depthwise 3x3 or 5x5 (stride 1 or 2,
                   padding 0 to 1 or 0 to 2 on every side); dense:
                   grouped convs with whole blocks per group, and groups 1 with any other geometry where it
                   beats the NCHW algorithms (strided, or an output plane of
                   at most dense_max_plane(C_in) pixels), a stride-1 3x3 by
                   Winograd on the blocked layout where blocked_winograd_tile
                   says so (src/rlx_nchwc_wino.h); and the stem, a
                   dense conv from an NCHW input of channels that are no
                   whole blocks (a network's first conv, or SqueezeNet's
                   3x3 expands of 12 channels) to a blocked output.  Constant
                   weights, packed at compile time, and any fused activation
                   but tanh.

The kernels are in src/rlx_nchwc.h (see there for why the layout pays: a
1x1 conv reads and writes whole vectors of consecutive floats and touches C/8
memory streams instead of C planes).  These nodes only ever come from the
pass, so they have no graph builder, gradient or ONNX converter: the pass
runs at compile time, after autograd built its graph.
"""
import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar, Optional

from .. import _elementwise, _nchwc
from ..registry import compile_rule
from ..thunks import Slice, Thunk
from .conv import ConvEpilogue, conv_operands

BLOCK = _nchwc.BLOCK
# The activations the blocked kernels apply in registers.
ACTS = ("relu", "clip", "leaky_relu", "sigmoid", "silu", "hard_sigmoid", "hard_swish")
# A dense conv (groups 1, not 1x1 stride 1) runs the blocked direct kernel
# when it is strided, or when its output plane has at most
# dense_max_plane(C_in) pixels: on larger stride-1 planes Winograd (its tile
# GEMMs on the conv microkernel) does fewer multiplies, the more so the more
# channels (the transforms are O(C P), the tile GEMMs O(C^2 P)).  Measured
# 3x3 stride 1, C_in = C_out, ms blocked / best Winograd at 1 thread (2
# threads): C 8 at 56x56 0.068 / 0.078 (im2col 0.067), at 112x112 0.290 /
# 0.279 (im2col 0.238); C 16 at 28x28 0.046 / 0.055, at 32x32 0.058 / 0.042,
# at 56x56 0.177 / 0.151; C 32 at
# 14x14 0.043 / 0.048, at 28x28 0.168 / 0.132; C 64 at 8x8 0.054 / 0.055, at
# 14x14 0.161 / 0.118 (0.124 / 0.141); C 128 at 7x7 0.159 / 0.150 (0.120 /
# 0.172; staged F(2x2) 0.161 / 0.134), C 512 at 7x7 2.77 / 2.01 (1.38 /
# 1.48-1.70 with F(2x2)'s one block of 16 tiles staged on both threads), at
# 4x4 1.07 / 2.02; C 256 at 8x8 0.86 / 0.49.  Within a
# chain the blocked kernel also saves the two reorders around an NCHW conv
# and keeps its neighbours blocked: so 8 channels run blocked on any plane and
# 16 up to 32x32 (the U-Net of the model zoo, 32x32 input, b1 1T: 0.31 ms
# with its 8- and 16-channel 32x32 convs blocked, 0.45 with them on
# Winograd / im2col).
# Strided, ms NCHW / blocked at 1 thread: 3x3 s2 256->512 to 7x7 (im2col)
# 1.71 / 1.30, 1x1 s2 1024->2048 to 7x7 2.87 / 2.46.
# With more than 64 input channels at 1 thread the 7x7 and 8x8 planes go to
# Winograd F(2x2) too; at 2 threads the blocked kernel stays a little ahead
# there at batch 1 (Winograd's single block of 16 tiles splits less evenly:
# ResNet-50 b1 2T 41.6-41.7 ms against 41.7-41.9 with F(2x2)), but not with
# more images (b8 2T: 321 ms against 307 with F(2x2)).
DENSE_MAX_PLANE = 64
DENSE_MAX_PLANE_ONE_THREAD = 36
DENSE_MAX_PLANE_BY_CIN = ((8, None), (16, 32 * 32), (32, 14 * 14))
# All of the above is for the AVX2 tiles (the Zen 4 the rule was measured
# on).  Where the AVX-512 tiles run (simd_level 2: a Xeon with two 512-bit
# FMA pipes), the blocked kernel's FMAs are twice as wide, and so are those
# of Winograd's tile GEMMs (the microkernel's AVX-512 tile), but not its
# transforms.  Measured there (Xeon, family 6 model 207), ResNet-18 b1 at 1
# thread, ms per conv in the model, blocked / NCHW: 3x3 64 at 56x56 2.48-2.51
# / 1.93-2.03 (Winograd F4), 128 at 28x28 2.40-2.43 / 2.14-2.26 (F4), 256 at
# 14x14 2.76-2.77 / 2.73-2.85 (F4), 512 at 7x7 3.06-3.10 / 5.20-5.68 (F2),
# the 3x3 s2 ones 1.39-1.66 / 1.95-2.60 (im2col).  So there a dense conv of
# more than 32 input channels runs blocked on planes up to 14x14 (and always
# when strided), Winograd above; 32 channels and fewer, where the transforms
# weigh most, run blocked on any plane.  Whole models, ORT ms / rlx ms, this
# rule against every dense conv blocked (each pair interleaved, the host's
# speed varied by up to 2x between runs): ResNet-18 1 thread 0.84 / 0.82, 2
# threads 0.93 / 0.84 and 1.12 / 0.93; ResNet-50 1 thread 0.91 / 0.84, 2
# threads 0.86 / 0.86, 0.88 / 0.85 and once 0.72 / 0.85.
# The SIMD level whose kernels include the AVX-512 tiles (src/rlx_simd.h):
# every rule of the layout pass measured with them keys on it.
AVX512_SIMD_LEVEL = 2
DENSE_AVX512_ALL_PLANES_MAX_CIN = 32
DENSE_MAX_PLANE_AVX512 = 14 * 14
# On a core that splits each 512-bit FMA into two 256-bit halves (AMD Zen 4,
# _nchwc.zmm_half_rate()), the AVX-512 tiles have AVX2's FMA peak, and
# Winograd F(4x4)'s 2.25x fewer multiplies win on 14x14 from 64 input
# channels.  Measured there (family 25 model 17), one conv, kernel ms
# blocked / F(4x4) at 1 thread (2 threads): 48 at 14x14 0.086 / 0.091
# (0.064 / 0.081), 64 0.134 / 0.097 (0.132 / 0.116), 128 0.547-0.574 /
# 0.349-0.425 (0.298-0.318 / 0.256-0.258), 256 about 2.1 in ResNet-18 /
# 0.89-0.96 alone.  Whole models, ORT ms / rlx ms with planes up to 14x14
# blocked / up to 7x7 (each pair interleaved in one process): ResNet-18 b1
# 1T 1.166 / 1.231 and 1.213 / 1.308, 2T 1.173 / 1.223; ResNet-50 b1 1T
# 1.030 / 1.096 and 1.038 / 1.099, 2T 0.996 / 1.027; b8: ResNet-18 1T
# 1.219 / 1.271, 2T 1.239 / 1.343, ResNet-50 1T 0.958 / 0.999, 2T 0.928 /
# 1.028.  (Moving 512 channels at 7x7 to F(2x2) as well was mixed:
# ResNet-50 b1 2T 1.027 -> 0.830 in the same run.)
DENSE_HALF_RATE_WINOGRAD_MIN_CIN = 64
DENSE_MAX_PLANE_HALF_RATE = 7 * 7
# On such a core, a batch also moves the small planes to Winograd once
# F(4x4) has a whole panel of tiles over it (winograd4_tiles >= 16, which
# is where auto picks F(4x4) on the microkernel: batch 4 on 7x7).  Its U is
# then read once for all images, and its 2.25x (here 3x with the 8x8 tiles
# that cover 7x7) fewer multiplies win.  Measured (family 25 model 17), a
# chain of three 512->512 3x3 convs on 7x7 with distinct weights (every U
# read cold), ms per conv blocked / F(2x2) / F(4x4) at 1 thread (2
# threads): batch 1 2.56 / 2.20 / 5.14 (1.36 / 1.58 / 2.99), batch 2 5.39
# / 4.47 / 5.72 (2.50 / 2.39 / 3.34), batch 4 9.93 / 7.09 / 5.69 (4.94 /
# 4.26 / 3.09), batch 8 20.9 / 14.2 / 11.8 (10.8 / 7.90 / 6.30).
DENSE_HALF_RATE_WINOGRAD_MIN_TILES = 16


# A stride-1 3x3 conv (groups 1, dilation 1) to fewer output channels than
# the blocked Winograd kernel takes (c_out < WINO_MIN_CHANNELS: 8), from at
# least NARROW_OUT_MIN_CIN input channels, runs blocked on any plane with the
# AVX2 tiles: its NCHW alternatives (Winograd, im2col) amortise their input
# transform or copy over a single 8-channel panel of outputs.  Measured on a
# Zen 3 (family 25 model 1, AVX2), a chain 1x1 C -> C, 3x3 C -> 8, 1x1 8 -> 16
# with both reorders, ms all blocked (this rule) against the plane rule (the
# chain NCHW), every plane 112x112 to 14x14: C 32 1.00-1.25x at batch 1 and 1
# thread, 1.15-1.44x at 2 threads, 1.00-1.28x at batch 8 and 2 threads; C 64
# 1.16-1.40x, 1.25-1.52x, 1.10-1.57x; C 128 1.12-1.33x, 1.20-1.53x,
# 1.12-1.24x.  16 input channels gained at 2 threads (1.04-1.27x) but lost
# at batch 1 and 1 thread (0.83-0.91x on 112x112 and 56x56), so they keep
# the plane rule.  A reduced DenseNet (growth 8: its 3x3s are 32 -> 8) at
# 224x224, batch 8, 2 threads: whole runs 1.07-1.24x, its four NCHW 3x3s and
# their eight reorders 2.93 ms -> 2.32 ms.  The AVX-512 tiles keep their
# own rule (dense_max_plane), not measured for this.
NARROW_OUT_MIN_CIN = 32


def narrow_out_blocked(c_in, c_out, attrs, simd=None):
    """True when a stride-1 3x3 conv (conv2d attrs) of c_in -> c_out
    channels runs blocked on any plane by the rule above."""
    simd = _nchwc.simd_level() if simd is None else simd
    return (simd == 1 and attrs.ndim == 2 and attrs.kernel == (3, 3) and attrs.stride == (1, 1)
            and attrs.dilation == (1, 1) and attrs.groups == 1 and c_out < WINO_MIN_CHANNELS
            and c_in >= NARROW_OUT_MIN_CIN)


def dense_max_plane(c_in, nthreads=1, batch=1, simd=None, half_rate=None):
    """The largest stride-1 output plane (pixels) on which a dense conv with
    c_in input channels runs blocked in a plan for `nthreads` threads and
    `batch` images, with the kernels of SIMD level `simd` (default: the one
    that runs, _nchwc.simd_level()) on a CPU whose 512-bit FMAs run at half
    rate or not (`half_rate`; default: this CPU's, _nchwc.zmm_half_rate())."""
    if (_nchwc.simd_level() if simd is None else simd) >= AVX512_SIMD_LEVEL:
        if c_in <= DENSE_AVX512_ALL_PLANES_MAX_CIN:
            return float("inf")
        if c_in >= DENSE_HALF_RATE_WINOGRAD_MIN_CIN and (
                _nchwc.zmm_half_rate() if half_rate is None else half_rate):
            return DENSE_MAX_PLANE_HALF_RATE
        return DENSE_MAX_PLANE_AVX512
    for c, plane in DENSE_MAX_PLANE_BY_CIN:
        if c_in <= c:
            return plane if plane is not None else float("inf")
    if c_in > 64 and (nthreads <= 1 or batch > 1):
        return DENSE_MAX_PLANE_ONE_THREAD
    return DENSE_MAX_PLANE


def half_rate_batch_winograd(c_in, out_shape, attrs, simd=None, half_rate=None):
    """True when a stride-1 3x3 conv (conv2d attrs) of c_in input channels
    and output shape [N, M, H, W] that dense_max_plane would keep blocked
    runs Winograd F(4x4) instead: on a core whose 512-bit FMAs run at half
    rate, from DENSE_HALF_RATE_WINOGRAD_MIN_CIN channels, when the batch
    gives F(4x4) at least DENSE_HALF_RATE_WINOGRAD_MIN_TILES tiles."""
    if (_nchwc.simd_level() if simd is None else simd) < AVX512_SIMD_LEVEL:
        return False
    if not (_nchwc.zmm_half_rate() if half_rate is None else half_rate):
        return False
    if attrs.kernel != (3, 3) or attrs.dilation != (1, 1) or attrs.stride != (1, 1) or attrs.groups != 1:
        return False
    if len(out_shape) != 4 or c_in < DENSE_HALF_RATE_WINOGRAD_MIN_CIN:
        return False
    n, _, h, w = out_shape
    return n * ((h + 3) // 4) * ((w + 3) // 4) >= DENSE_HALF_RATE_WINOGRAD_MIN_TILES


# A stride-1 3x3 conv (groups 1, dilation 1) with at least
# WINO_MIN_CHANNELS input and output channels and at least WINO_MIN_TILES
# 2x2 output tiles runs Winograd on the blocked layout (src/rlx_nchwc_wino.h:
# the transforms on 8-channel blocks, the tile GEMMs on the blocked 1x1
# kernel's register tiles).  Measured on a Zen 5 (family 26, full-rate
# AVX-512), kernel ms blocked direct / F(2x2) / F(4x4), one conv C -> C at
# 1 thread (2 threads): 64 at 56x56 0.92 / 0.58 / 0.40 (0.54 / 0.35 /
# 0.26), 128 at 28x28 0.90 / 0.54 / 0.29 (0.47 / 0.32 / 0.17), 256 at
# 14x14 0.90 / 0.48 / 0.52 (0.46 / 0.28 / 0.32), 512 at 7x7 1.27 / 0.88 /
# 1.09 (0.69 / 0.53 / 0.63), batch 8: 256 at 14x14 7.37 / 4.38 / 4.27,
# 512 at 7x7 8.22 / 6.14 / 4.55 (4.30 / 3.56 / 2.56); small ones: 16 at
# 56x56 0.078 / 0.089 / 0.052, 32 at 56x56 0.234 / 0.178 / 0.116, 96 at
# 14x14 0.127 / 0.072 / 0.079, 64 at 8x8 0.019 / 0.017 / 0.009, 512 at 4x4
# 0.74 / 0.48 / 0.74; but 8 at 64x64 0.066 / 0.100 / 0.067 and 256 at 2x2
# (one tile) 0.038 / 0.052 / 0.119.  With the AVX2 tiles (RLX_SIMD=avx2 on
# the same host) the gain is larger: 64 at 56x56 1.79 / 0.98 / 0.64, 256 at
# 14x14 1.79 / 1.00 / 1.17.
WINO_MIN_CHANNELS = 16
WINO_MIN_TILES = 4
# F(4x4) does 2.25x fewer multiplies than F(2x2) per output but streams a U
# 2.25x larger (36 x C x M floats) once per chunk of tiles: it wins from
# WINO_F4_MIN_TILES 4x4 tiles, or on fewer when its U is at most
# WINO_F4_SMALL_U bytes (64 at 8x8: 4 tiles, 0.017 / 0.009 ms above) -- if
# its tiles, padded to whole 4x4 ones, still take fewer multiplies (36 per
# 4x4 tile against 16 per 2x2 one: not on a 2x2 plane, where 64 at batch 8
# ran 0.007 ms by F(2x2), 0.014 by F(4x4)).
WINO_F4_MIN_TILES = 32
WINO_F4_SMALL_U = 1 << 20
# On the AVX2 level the tile GEMMs run at half the AVX-512 level's lanes, so
# F(4x4)'s fewer multiplies pay for its larger U on fewer tiles: from 16 4x4
# tiles (a 13x13 to 16x16 plane at batch 1).  Measured on a Zen 3 (AVX2, no
# AVX-512), kernel ms F(2x2) / F(4x4) at 1 thread with a cold cache (64 MiB
# touched between runs, as a model's layer finds it): 256 at 14x14 1.50 /
# 1.28, 384 at 14x14 4.10 / 2.93, 192 at 14x14 0.90 / 0.78, 128 at 14x14
# 0.43 / 0.41; but on 4 tiles (a 7x7 plane, padded to 8x8) F(2x2) stays
# ahead: 256 at 7x7 0.62 / 0.70, 512 at 7x7 2.37 / 2.36.
WINO_F4_MIN_TILES_AVX2 = 16


def blocked_winograd_tile(c_in, c_out, out_shape, attrs, simd=None):
    """The output tile side (4: F(4x4,3x3), 2: F(2x2,3x3)) of the blocked
    Winograd kernel for a conv2d with these channels, output shape
    [N, M, H, W] and attrs (ConvAttrs), or 0 when it runs another kernel."""
    simd = _nchwc.simd_level() if simd is None else simd
    if simd < 1:
        return 0
    if attrs.ndim != 2 or attrs.kernel != (3, 3) or attrs.stride != (1, 1) or attrs.dilation != (1, 1) \
            or attrs.groups != 1 or len(out_shape) != 4:
        return 0
    if c_in < WINO_MIN_CHANNELS or c_out < WINO_MIN_CHANNELS or c_in % BLOCK or c_out % BLOCK:
        return 0
    n, _, h, w = out_shape
    tiles2, tiles4 = n * ((h + 1) // 2) * ((w + 1) // 2), n * ((h + 3) // 4) * ((w + 3) // 4)
    if tiles2 < WINO_MIN_TILES:
        return 0
    min_tiles = WINO_F4_MIN_TILES_AVX2 if simd < AVX512_SIMD_LEVEL else WINO_F4_MIN_TILES
    if 36 * tiles4 < 16 * tiles2 and (tiles4 >= min_tiles or 36 * 4 * c_in * c_out <= WINO_F4_SMALL_U):
        return 4
    return 2


def blocked_shape(shape):
    """[N, C, H, W] -> [N, C/8, H, W, 8]; [N, C, L] (conv1d) -> [N, C/8, 1, L, 8];
    [N, C, D, H, W] (conv3d) -> [N, C/8, D, H, W, 8]."""
    if len(shape) == 3:
        n, c, w = shape
        return (n, c // BLOCK, 1, w, BLOCK)
    return (shape[0], shape[1] // BLOCK) + tuple(shape[2:]) + (BLOCK,)


def as_conv2d_attrs(attrs):
    """A conv1d's ConvAttrs as the conv2d over [N, C, 1, L] it equals (a
    conv2d's or conv3d's as they are)."""
    if attrs.ndim != 1:
        return attrs
    return dataclasses.replace(attrs, kernel=(1,) + attrs.kernel, stride=(1,) + attrs.stride,
                               pads_begin=(0,) + attrs.pads_begin, pads_end=(0,) + attrs.pads_end,
                               dilation=(1,) + attrs.dilation)


def nchwc_kind(graph, node, nthreads=1):
    """'1x1', 'depthwise' or 'dense' when the conv2d `node` has a blocked
    kernel, else None: float32 4-D, channels multiples of 8, a constant
    weight (and bias), an activation in ACTS or none, and the geometry of one of
    the kernels."""
    if node.op not in ("conv1d", "conv2d", "conv3d") or node.dtype != "float32":
        return None
    x_id, w_id, b_id, _ = conv_operands(node)
    xs = graph.node(x_id).shape
    rank = {"conv1d": 3, "conv2d": 4, "conv3d": 5}[node.op]
    if len(xs) != rank or len(node.shape) != rank:
        return None
    c_in, c_out = xs[1], node.shape[1]
    if c_in % BLOCK or c_out % BLOCK or c_in == 0 or c_out == 0 or 0 in node.shape:
        return None
    if graph.node(w_id).op != "constant" or (b_id is not None and graph.node(b_id).op != "constant"):
        return None
    a = as_conv2d_attrs(node.attrs)
    out_plane = math.prod(node.shape[2:])
    epi = a.epilogue
    if epi is not None and epi.act is not None and epi.act not in ACTS:
        return None
    if node.op == "conv3d":
        # the NCHW conv3d is a GEMM over an im2col volume; the blocked dense
        # kernel reads the taps in place (whole blocks per group)
        cg, mg = c_in // a.groups, c_out // a.groups
        return "dense" if epi is None and cg % BLOCK == 0 and mg % BLOCK == 0 else None
    if a.groups == 1 and a.dilation == (1, 1) and a.kernel == (1, 1) and a.stride == (1, 1) and a.pads_begin == (0, 0) \
            and a.pads_end == (0, 0):
        return "1x1"
    if a.groups == c_in == c_out and a.kernel in ((3, 3), (5, 5)) and a.stride[0] == a.stride[1] in (1, 2) \
            and a.pads_begin == a.pads_end and a.pads_begin[0] == a.pads_begin[1] <= a.kernel[0] // 2 \
            and a.dilation == (1, 1):
        return "depthwise"
    if a.groups > 1:
        # grouped (ResNeXt, RegNet): whole blocks per group; the NCHW path
        # runs a GEMM per group, narrow ones at that
        return "dense" if (c_in // a.groups) % BLOCK == 0 and (c_out // a.groups) % BLOCK == 0 else None
    if a.groups == 1:
        if a.stride != (1, 1):
            return "dense"
        # ahead of the rules below, which weigh the blocked direct kernel
        # against Winograd in NCHW: the blocked Winograd beats both
        if node.op == "conv2d" and blocked_winograd_tile(c_in, c_out, node.shape, a):
            return "dense"
        if node.op == "conv2d" and narrow_out_blocked(c_in, c_out, a):
            return "dense"
        if out_plane <= dense_max_plane(c_in, nthreads, node.shape[0]) and not half_rate_batch_winograd(
                c_in, node.shape, a):
            return "dense"
        # a conv1d has no Winograd: its NCHW path is im2col
        if node.op == "conv1d" and _nchwc.simd_level() >= AVX512_SIMD_LEVEL:
            return "dense"
    return None


# A lone stride-1 3x3 conv of one image runs blocked on planes up to
# ALONE_3X3_MAX_PLANE pixels, and on planes up to ALONE_3X3_WIDE_PLANE when
# it has at most ALONE_3X3_MAX_CHANNELS input channels (see dense_alone).
ALONE_3X3_MAX_PLANE = 7 * 7
ALONE_3X3_WIDE_PLANE = 14 * 14
ALONE_3X3_MAX_CHANNELS = 128
# A lone stride-1 1x1 conv2d runs blocked, with the AVX2 tiles, when its
# output plane has ALONE_1X1_MIN_PLANE to ALONE_1X1_MAX_PLANE pixels and it
# has at least ALONE_1X1_MIN_OUT output channels (see dense_alone).
ALONE_1X1_MIN_PLANE = 7 * 7
ALONE_1X1_MAX_PLANE = 28 * 28
ALONE_1X1_MIN_OUT = 64
# ... and with the AVX-512 tiles on planes of at most this many pixels
ALONE_1X1_512_MAX_PLANE = 14 * 14


def dense_alone(graph, node, nthreads=1):
    """True when the conv `node` runs blocked even alone, paying both
    reorders, with the AVX-512 tiles (and with the AVX2 tiles, but for a
    conv1d, measured below the list):

    - a dense (groups 1) conv whose NCHW path is im2col, i.e. a strided one
      or a conv1d.  Measured there, run_into ms NCHW / blocked with both
      reorders at 1 (2) threads: 3x3 s2 128->256 on 56x56 4.56 / 3.69
      (3.33 / 2.94), 3x3 s2 256->512 on 14x14 1.46 / 0.94 (1.25 / 0.74),
      conv1d 512->512 k7 on 8192 409 / 333 (201 / 164), conv1d 64->64 k5 on
      4096 3.82 / 2.20 (1.82 / 1.10);
    - a stride-1 3x3 that the blocked Winograd kernel runs
      (blocked_winograd_tile).  run_into ms of one conv + ReLU, blocked with
      both reorders / the faster of NCHW Winograd F(4x4) and F(2x2), at 1
      (2) threads: 64 at 56x56 0.72 / 0.76 (0.33 / 0.34), 128 at 28x28
      0.72 / 0.96 (0.21 / 0.29), 256 at 14x14 1.12 / 1.39 (0.32 / 0.45),
      512 at 7x7 1.00 / 1.96 (0.54 / 1.20), batch 8: 64 at 56x56 4.88 /
      5.48 (2.80 / 3.07), 256 at 14x14 4.62 / 5.63 (2.42 / 2.91); 16 at
      56x56 0.057 / 0.078 (0.036 / 0.046);
    - else a stride-1 3x3 of batch 1 on a small plane, where Winograd's NCHW
      path has too few tiles to amortise its transforms.  run_into ms NCHW /
      blocked, after 100 ms of busy waiting, at 1 (2) threads: 512 on 7x7
      4.96 / 3.39 (2.58 / 1.76), 256 on 7x7 1.21 / 0.77 (0.74 / 0.44), 128
      on 7x7 0.34 / 0.21 (0.25 / 0.13), 128 on 14x14 0.61 / 0.45 (0.74 /
      0.43), 64 on 14x14 0.28 / 0.19 (0.25 / 0.20).  Not at 256 channels on
      14x14 (2.91 / 2.89, 1.47 / 1.72) nor at batch 4 on 7x7 (256: 2.19 /
      2.39 at 2 threads).  Nor, on a core whose 512-bit FMAs run at half
      rate, on 14x14 from 64 channels, where Winograd F(4x4) is faster
      (dense_max_plane: the conv is not a "dense" kind there).

    With the AVX2 tiles (a Zen 3 without AVX-512), run_into ms NCHW /
    blocked with both reorders, interleaved in one process, at 1 (2)
    threads: 3x3 s2 128->256 from 28x28 1.58 / 1.32 (1.04 / 0.92), 256->512
    from 14x14 1.79 / 1.62 (1.23 / 1.09), 64->128 from 8 x 28x28 3.41 / 2.84
    (2.56 / 2.18); Winograd 3x3s 128 at 28x28 1.12 / 0.77 (0.85 / 0.61),
    512 at 7x7 2.20 / 1.95 (1.26 / 1.12), 64 at 14x14 0.131 / 0.103 (0.109 /
    0.075), 512 at 3x3 2.08 / 0.98 (1.56 / 0.64); the small-plane direct
    ones 64 at 2x2 0.037 / 0.008, 8 -> 16 at 7x7 0.011 / 0.005.  Level, or
    up to 6% behind at 2 threads: 3x3 s2 64->128 from 56x56 1.49 / 1.41
    (0.96 / 1.02), 256 at 14x14 1.13 / 1.13 (0.82 / 0.84).  A conv1d stays
    NCHW there (not measured).

    - a grouped conv2d with whole blocks per group (not a 1x1), whose NCHW
      path runs a narrow GEMM per group.  With the AVX2 tiles, run_into ms
      of one conv + ReLU, NCHW / blocked with both reorders, interleaved, at
      batch 1, 1 (2) threads: 3x3 400 in 25 groups on 7x7 0.41 / 0.09-0.13
      (0.35 / 0.09), 160 in 10 on 14x14 0.21 / 0.14 (0.15 / 0.14), 1024 in
      32 on 7x7 (2 threads) 0.96 / 0.32, 512 in 32 on 14x14 0.67 / 0.34,
      128 in 8 on 28x28 0.47 / 0.32, 5x5 256 in 16 on 14x14 0.68 / 0.48;
      batch 8, 2 threads: 400 on 7x7 1.52 / 0.50, 3x3 s2 512 in 32 from
      28x28 6.38 / 3.41, 160 in 10 1.25 / 1.01.  Level on large planes: 64
      in 4 on 56x56 0.83-0.86 / 0.84-0.85 (0.81 / 0.65), at batch 8 6.75-6.83
      / 6.78-7.30, 256 in 32 on 28x28 (2 threads) 0.53 / 0.52.  Grouped
      1x1s stay NCHW: 240 in 3 on 28x28 0.57 / 0.62.  Not measured with the
      AVX-512 tiles, whose blocked kernel is at least as fast against the
      same NCHW path.
    - with the AVX2 tiles only, a stride-1 1x1 conv2d on a plane of
      ALONE_1X1_MIN_PLANE to ALONE_1X1_MAX_PLANE pixels into at least
      ALONE_1X1_MIN_OUT channels, whose NCHW path is one sgemm of few
      columns.  run_into ms of one conv + ReLU, NCHW / blocked with both
      reorders, interleaved, batch 1, 1 thread: 160->960 on 7x7 0.24 / 0.19,
      320->1280 on 7x7 0.54 / 0.50, 512->2048 on 7x7 1.40 / 1.30, 2048->512 on
      7x7 1.33 / 1.27, 1024->256 on 14x14 1.27 / 1.14, 64->384 on 14x14 0.22 /
      0.18, 576->96 on 14x14 0.30 / 0.29, 32->192 on 28x28 0.23 / 0.19,
      192->32 on 28x28 0.23 / 0.19; batch 8: 960->160 on 7x7 1.74 / 1.41,
      512->2048 on 7x7 10.4 / 9.1, 128->512 on 28x28 11.4 / 10.0; 2 threads,
      batch 1: 64->384 on 14x14 0.16 / 0.13, 2048->512 on 7x7 0.93 / 0.83,
      192->32 on 28x28 0.18 / 0.14, but 32->192 on 28x28 0.13 / 0.14 and
      960->160 on 7x7 0.19 / 0.20.  Not on larger planes (32->16 on 112x112
      0.27 / 0.33, 144->24 on 56x56 0.41 / 0.58), nor into 32 channels at
      batch 8 (192->32 on 28x28 1.06 / 1.20).
    - with the AVX-512 tiles, such a 1x1 on a plane of ALONE_1X1_MIN_PLANE
      to ALONE_1X1_512_MAX_PLANE pixels, where the NCHW GEMM's microkernel
      runs at 86-89% of the FMA peak against the blocked kernel's 92-95%.
      Zen 4, run_into ms of one conv, NCHW / blocked with both reorders,
      batch 1, 1 thread: 1024->256 on 14x14 1.023 / 0.940 (ONNX Runtime
      0.93-0.95), 256->1024 on 14x14 0.997 / 0.945, 512->2048 on 7x7 1.005 /
      0.922 (ORT 0.92-0.94), 2048->512 on 7x7 0.966 / 0.929, 320->1280 on
      7x7 0.409 / 0.372, 160->960 on 7x7 0.165 / 0.141, 384->64 on 14x14
      0.102 / 0.094, 576->96 0.221 / 0.210, 128->128 0.065 / 0.061, 64->384
      0.098 / 0.096, 960->160 on 7x7 0.143 / 0.143; 2 threads: 1024->256
      0.558 / 0.507, 512->2048 0.511 / 0.479, 64->384 and 576->96 level,
      but 2048->512 on 7x7 0.49-0.50 / 0.50-0.53 (its 1 thread 0.96-0.98 /
      0.93-0.95);
      batch 8: 512->2048 8.16 / 7.66, 1024->256 8.78 / 8.44, 960->160 1.14 /
      1.13.  Not on 28x28 (128->512 0.949 / 0.984, 512->128 level) nor on
      larger planes (64->256 on 56x56 1.00 / 1.07, 144->24 0.195 / 0.262,
      16->96 on 112x112 0.45 / 0.60)."""
    level = _nchwc.simd_level()
    if level >= 1 and node.op == "conv2d" and nchwc_kind(graph, node, nthreads) == "1x1":
        most = ALONE_1X1_MAX_PLANE if level == 1 else ALONE_1X1_512_MAX_PLANE
        return ALONE_1X1_MIN_PLANE <= node.shape[2] * node.shape[3] <= most \
            and node.shape[1] >= ALONE_1X1_MIN_OUT
    if level < 1 or nchwc_kind(graph, node, nthreads) != "dense":
        return False
    a = as_conv2d_attrs(node.attrs)
    if node.op not in ("conv1d", "conv2d") or a.kernel == (1, 1):
        return False
    if a.groups != 1:
        return node.op == "conv2d"
    if node.op == "conv1d":
        return level >= AVX512_SIMD_LEVEL
    if a.stride != (1, 1):
        return True
    if a.kernel != (3, 3) or a.dilation != (1, 1):
        return False
    c_in = graph.node(conv_operands(node)[0]).shape[1]
    if blocked_winograd_tile(c_in, node.shape[1], node.shape, a):
        return True
    if node.shape[0] != 1:
        return False
    plane = node.shape[2] * node.shape[3]
    return plane <= ALONE_3X3_MAX_PLANE or (plane <= ALONE_3X3_WIDE_PLANE and c_in <= ALONE_3X3_MAX_CHANNELS)


def nchwc_stem(graph, node):
    """True when the conv2d `node` can run the stem kernel, which reads NCHW
    and writes the blocked layout: groups 1, input channels that are no
    whole blocks (fewer than 8, or more than 8 but not a multiple of 8 for a
    kernel larger than 1x1), at most _nchwc.STEM_MAX_TAPS taps, output
    channels a multiple of 8, a constant weight (and bias), an activation in
    ACTS or none, and no residual.

    The stem kernel is a direct conv over all C*kh*kw taps; for input
    channels that are no whole blocks the other kernels would need the NCHW
    path, whose im2col GEMM it beats on the kernels larger than 1x1 (run ms
    NCHW / stem, reorder included, relu fused, 1 and 2 threads: 12->48 3x3 on
    8 x 3x3 (SqueezeNet's fire 9) 0.032 / 0.011 and 0.028 / 0.011; 12->48 3x3
    on 8 x 14x14 0.163 / 0.113 and 0.100 / 0.078; 12->32 3x3 s2 from 56x56
    0.055 / 0.032 and 0.066 / 0.034; 36->64 3x3 on 8 x 14x14 0.344 / 0.306
    and 0.302 / 0.196; 20->64 3x3 on 8 x 28x28 0.657 / 0.691 and 0.399 /
    0.378), but not on the 1x1 ones, which are one GEMM in NCHW (20->120 on 8 x
    4x4: 0.009 / 0.019 at either thread count)."""
    if node.op != "conv2d" or node.dtype != "float32" or len(node.shape) != 4:
        return False
    x_id, w_id, b_id, r_id = conv_operands(node)
    xs = graph.node(x_id).shape
    a = node.attrs
    epi = a.epilogue
    if len(xs) != 4 or a.groups != 1 or xs[1] < 1 or node.shape[1] % BLOCK or 0 in node.shape:
        return False
    if xs[1] >= BLOCK and (xs[1] % BLOCK == 0 or a.kernel == (1, 1)):
        return False
    if a.kernel == (1, 1) and xs[2] * xs[3] == 1:
        # a squeeze-and-excitation block's conv on [N, C, 1, 1]: one small
        # GEMM in NCHW (6 -> 96 with a sigmoid on 8 images, 1 thread: 4.6 us
        # as a stem with its reorder, 0.73 as conv_1x1)
        return False
    if xs[1] * a.kernel[0] * a.kernel[1] > _nchwc.STEM_MAX_TAPS or r_id is not None:
        return False
    if epi is not None and epi.act is not None and epi.act not in ACTS:
        return False
    return graph.node(w_id).op == "constant" and (b_id is None or graph.node(b_id).op == "constant")


def as_transpose2d_attrs(attrs):
    """A conv_transpose1d's ConvTransposeAttrs as the 2-D one over [N, C, 1, L]
    it equals (2-D and 3-D ones as they are)."""
    if attrs.ndim != 1:
        return attrs
    return dataclasses.replace(attrs, kernel=(1,) + attrs.kernel, stride=(1,) + attrs.stride,
                               pads_begin=(0,) + attrs.pads_begin, pads_end=(0,) + attrs.pads_end,
                               dilation=(1,) + attrs.dilation, output_padding=(0,) + attrs.output_padding)


def nchwc_transpose(graph, node):
    """True when the conv_transpose1d/2d/3d `node` runs the blocked
    transposed kernel: float32, groups 1, dilation 1, channels multiples of
    8, a constant weight (and bias), at most _nchwc.TRANSPOSED_MAX_PHASES
    output phases, each with a tap and an output pixel."""
    rank = {"conv_transpose1d": 3, "conv_transpose2d": 4, "conv_transpose3d": 5}.get(node.op)
    if rank is None or node.dtype != "float32":
        return False
    if getattr(node.attrs, "epilogue", None) is not None:
        return False
    xs = graph.node(node.inputs[0]).shape
    if len(xs) != rank or len(node.shape) != rank or 0 in xs or 0 in node.shape:
        return False
    if xs[1] % BLOCK or node.shape[1] % BLOCK:
        return False
    a = as_transpose2d_attrs(node.attrs)
    if a.groups != 1 or any(d != 1 for d in a.dilation) or math.prod(a.stride) > _nchwc.TRANSPOSED_MAX_PHASES:
        return False
    if graph.node(node.inputs[1]).op != "constant" or (len(node.inputs) > 2 and
                                                        graph.node(node.inputs[2]).op != "constant"):
        return False
    in_sp, out_sp = blocked_shape(xs)[2:-1], blocked_shape(node.shape)[2:-1]
    try:
        _nchwc.transposed_scratch_floats(1, BLOCK, in_sp, BLOCK, out_sp, a.kernel, a.stride, a.pads_begin)
    except ValueError:                            # a phase without taps or pixels
        return False
    return True


def nchwc_pool(graph, node):
    """True when `node` is a 2-D max/avg pool the blocked pool kernel runs:
    float32, channels a multiple of 8, no indices output."""
    from .pool import indices_node
    if node.op not in ("max_pool2d", "avg_pool2d") or node.dtype != "float32" or len(node.shape) != 4:
        return False
    if node.shape[1] % BLOCK or 0 in node.shape or indices_node(graph, node) is not None:
        return False
    return node.attrs.ndim == 2


def nchwc_global_pool(graph, node):
    """True when `node` is a global max/avg pool of a float32 [N, C, H, W]
    with C a multiple of 8 (the blocked kernel writes [N, C, 1, 1]), or a
    reduce_mean over exactly H and W, which is the same average ([N, C, 1,
    1] or, without keepdims, [N, C]: the same memory)."""
    if node.dtype != "float32":
        return False
    if node.op == "reduce_mean":
        if node.attrs.axes != (2, 3):
            return False
    elif node.op not in ("global_avg_pool", "global_max_pool"):
        return False
    xs = graph.node(node.inputs[0]).shape
    return len(xs) == 4 and xs[1] % BLOCK == 0 and 0 not in xs


def _act(epilogue):
    """(act name or None, alpha, beta) of a conv epilogue."""
    if epilogue is None or epilogue.act is None:
        return None, 0.0, 0.0
    return epilogue.act, float(epilogue.alpha), float(epilogue.beta)


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ReorderNchwcThunk(Thunk):
    """x [N, C, P] -> y [N, C/8, P, 8] (to_blocked) or back."""
    x: Slice
    y: Slice
    n: int
    c: int
    pixels: int
    to_blocked: bool

    kind: ClassVar[str] = "reorder_nchwc"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _nchwc.NchwcReorderLaunch(view(self.x), view(self.y), self.n, self.c, self.pixels,
                                         self.to_blocked)


@dataclass(frozen=True, repr=False)
class NchwcConv1x1Thunk(Thunk):
    """1x1 conv on blocked x / residual / y; `weight` packed in panels of 16
    output channels (_nchwc.pack_1x1_weight)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    residual: Optional[Slice]
    y: Slice
    n: int
    c_in: int
    c_out: int
    pixels: int
    epilogue: Optional[ConvEpilogue]
    max_threads: int
    # a norm prologue (conv2d_nchwc_norm): x is read as
    # relu?(x * norm_scale + norm_shift), chunk by chunk through scratch
    norm_scale: Optional[Slice] = None
    norm_shift: Optional[Slice] = None
    norm_relu: Optional[bool] = None     # with a norm: whether the relu follows it
    scratch: Optional[Slice] = None

    kind: ClassVar[str] = "conv_nchwc_1x1"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual", "norm_scale", "norm_shift")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return 2 * self.n * self.c_out * self.c_in * self.pixels

    def bind(self, view):
        act, alpha, beta = _act(self.epilogue)
        norm = (view(self.norm_scale), view(self.norm_shift), bool(self.norm_relu)) if self.norm_scale else None
        return _nchwc.NchwcConv1x1Launch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None,
            view(self.residual) if self.residual else None, view(self.y), self.n, self.c_in, self.c_out,
            self.pixels, act, alpha, beta, self.max_threads, norm, view(self.scratch) if self.scratch else None)


@dataclass(frozen=True, repr=False)
class NchwcDepthwiseThunk(Thunk):
    """Depthwise KxK conv (`kernel` K 3 or 5; stride 1 or 2, padding 0 to
    K // 2) on blocked x / residual / y; `weight` as [C/8, K*K, 8]
    (_nchwc.pack_depthwise_weight)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    residual: Optional[Slice]
    y: Slice
    n: int
    c: int
    h: int
    w: int
    stride: int
    pad: int
    epilogue: Optional[ConvEpilogue]
    max_threads: int
    kernel: int = 3

    kind: ClassVar[str] = "conv_nchwc_dw"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual")
    writes: ClassVar[tuple] = ("y",)

    @property
    def flops(self):
        k = self.kernel
        ho = (self.h + 2 * self.pad - k) // self.stride + 1
        wo = (self.w + 2 * self.pad - k) // self.stride + 1
        return 2 * k * k * self.n * self.c * ho * wo

    def bind(self, view):
        act, alpha, beta = _act(self.epilogue)
        return _nchwc.NchwcDepthwiseLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None,
            view(self.residual) if self.residual else None, view(self.y), self.n, self.c, self.h, self.w,
            self.stride, self.pad, self.pad, act, alpha, beta, self.max_threads, self.kernel)


@dataclass(frozen=True, repr=False)
class NchwcDenseThunk(Thunk):
    """Dense or grouped conv on blocked x / residual / y (whole blocks per
    group); `weight` from _nchwc.pack_dense_weight; `scratch` the zero-padded
    input copy, or a strided 1x1 conv's subsampled one (None when neither)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    residual: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kernel: tuple
    stride: tuple
    pads_begin: tuple
    pads_end: tuple
    dilation: tuple
    epilogue: Optional[ConvEpilogue]
    max_threads: int
    groups: int = 1

    kind: ClassVar[str] = "conv_nchwc_dense"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        act, alpha, beta = _act(self.epilogue)
        return _nchwc.NchwcDenseLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None,
            view(self.residual) if self.residual else None, view(self.y),
            view(self.scratch) if self.scratch else None, self.n, self.c_in, self.h, self.w, self.c_out,
            self.kernel, self.stride, self.pads_begin, self.pads_end, self.dilation, act, alpha, beta,
            self.max_threads, self.groups)


@dataclass(frozen=True, repr=False)
class NchwcWinogradThunk(Thunk):
    """Stride-1 3x3 conv on blocked x / residual / y by Winograd F(tile x
    tile, 3x3); `weight` from _nchwc.winograd_pack_u, `scratch` the
    per-thread transformed tiles."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    residual: Optional[Slice]
    y: Slice
    scratch: Slice
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    pads_begin: tuple
    pads_end: tuple
    tile: int
    epilogue: Optional[ConvEpilogue]
    max_threads: int

    kind: ClassVar[str] = "conv_nchwc_winograd"
    reads: ClassVar[tuple] = ("x", "weight", "bias", "residual")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        """The direct conv's count (Winograd's own is smaller)."""
        ho = self.h + self.pads_begin[0] + self.pads_end[0] - 2
        wo = self.w + self.pads_begin[1] + self.pads_end[1] - 2
        return 2 * 9 * self.n * self.c_in * self.c_out * ho * wo

    def bind(self, view):
        act, alpha, beta = _act(self.epilogue)
        return _nchwc.NchwcWinogradLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None,
            view(self.residual) if self.residual else None, view(self.y), view(self.scratch), self.n, self.c_in,
            self.h, self.w, self.c_out, self.pads_begin, self.pads_end, self.tile, act, alpha, beta,
            self.max_threads)


@dataclass(frozen=True, repr=False)
class NchwcDense3dThunk(Thunk):
    """conv3d on blocked x / y (whole blocks per group); `weight` from
    _nchwc.pack_dense_weight of W [M, C/G, kd*kh, kw]; `scratch` the
    zero-padded input copy (None without padding)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    n: int
    c_in: int
    d: int
    h: int
    w: int
    c_out: int
    kernel: tuple
    stride: tuple
    pads_begin: tuple
    pads_end: tuple
    dilation: tuple
    max_threads: int
    groups: int = 1

    kind: ClassVar[str] = "conv3d_nchwc"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _nchwc.NchwcDense3dLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, None, view(self.y),
            view(self.scratch) if self.scratch else None, self.n, self.c_in, self.d, self.h, self.w, self.c_out,
            self.kernel, self.stride, self.pads_begin, self.pads_end, self.dilation, None, 0.0, 0.0,
            self.max_threads, self.groups)


@dataclass(frozen=True, repr=False)
class NchwcStemThunk(Thunk):
    """Dense conv from NCHW x (few input channels) to blocked y, or to NCHW y
    with nchw_out; `weight` packed like the 1x1 weight over k = (c, kh, kw);
    `scratch` the zero-padded input copy (None without padding; with
    nchw_out, split into column phases)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kernel: tuple
    stride: tuple
    pads_begin: tuple
    pads_end: tuple
    dilation: tuple
    epilogue: Optional[ConvEpilogue]
    max_threads: int
    nchw_out: bool = False

    kind: ClassVar[str] = "conv_nchwc_stem"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        act, alpha, beta = _act(self.epilogue)
        return _nchwc.NchwcStemLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y), self.n,
            self.c_in, self.h, self.w, self.c_out, self.kernel, self.stride, self.pads_begin, self.pads_end,
            self.dilation, act, alpha, beta, self.max_threads, view(self.scratch) if self.scratch else None,
            self.nchw_out)


@dataclass(frozen=True, repr=False)
class NchwcConvTransposeThunk(Thunk):
    """Transposed conv (2-D or 3-D) on blocked x and y by output phases;
    `weight` from _nchwc.pack_transposed_weight; `scratch` the padded input
    copy and the phases' outputs (_nchwc.transposed_scratch_floats)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Slice
    n: int
    c_in: int
    in_sp: tuple              # (H, W) or (D, H, W)
    c_out: int
    out_sp: tuple
    kernel: tuple
    stride: tuple
    pads_begin: tuple
    max_threads: int

    kind: ClassVar[str] = "conv_transpose_nchwc"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return 2 * self.n * self.c_in * self.c_out * math.prod(self.kernel) * math.prod(self.in_sp)

    def bind(self, view):
        return _nchwc.NchwcConvTransposeLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y),
            view(self.scratch), self.n, self.c_in, self.in_sp, self.c_out, self.out_sp, self.kernel, self.stride,
            self.pads_begin, self.max_threads)


@dataclass(frozen=True, repr=False)
class NchwcPoolThunk(Thunk):
    """2-D max/avg pool on blocked x and y (PoolAttrs geometry)."""
    x: Slice
    y: Slice
    n: int
    c: int
    h: int
    w: int
    h_out: int
    w_out: int
    pool_kind: str            # 'max' | 'avg'
    kernel: tuple
    stride: tuple
    pads_begin: tuple
    pads_end: tuple
    dilation: tuple
    count_include_pad: bool
    divisor_override: int
    max_threads: int

    kind: ClassVar[str] = "pool_nchwc"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _nchwc.NchwcPoolLaunch(view(self.x), view(self.y), self.n, self.c, self.h, self.w, self.h_out,
                                      self.w_out, self.kernel, self.stride, self.pads_begin, self.pads_end,
                                      self.dilation, self.pool_kind, self.count_include_pad, self.divisor_override,
                                      self.max_threads)


@dataclass(frozen=True, repr=False)
class NchwcGlobalPoolThunk(Thunk):
    """Global max/avg pool of blocked x [N, C/8, P, 8] into y [N, C, 1, 1]."""
    x: Slice
    y: Slice
    n: int
    c: int
    pixels: int
    pool_kind: str            # 'max' | 'avg'
    max_threads: int

    kind: ClassVar[str] = "global_pool_nchwc"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _nchwc.NchwcGlobalPoolLaunch(view(self.x), view(self.y), self.n, self.c, self.pixels,
                                            self.pool_kind, self.max_threads)


@dataclass(frozen=True)
class ChannelBinaryAttrs:
    """channel_binary_nchwc: y = x (op) g when x_first, else g (op) x."""
    op: str                       # 'add' | 'sub' | 'mul' | 'div'
    x_first: bool

    def __repr__(self):
        return f"{'x' if self.x_first else 'g'} {self.op} {'g' if self.x_first else 'x'}"


CHANNEL_BINARY_CODES = {"add": _elementwise.BINARY_ADD, "sub": _elementwise.BINARY_SUB,
                        "mul": _elementwise.BINARY_MUL, "div": _elementwise.BINARY_DIV}


def channel_operand_rows(x_shape, g_shape):
    """For an NCHW value of x_shape and another operand of g_shape: 1 or N when
    g is per channel ([C, 1, ...], [1, C, 1, ...] or [N, C, 1, ...]; rank at
    most x's), so that blocked x (op) g is channel_binary_nchwc; else None."""
    if len(g_shape) > len(x_shape) or len(x_shape) < 3:
        return None
    g = (1,) * (len(x_shape) - len(g_shape)) + tuple(g_shape)
    if g[1] != x_shape[1] or any(d != 1 for d in g[2:]) or g[0] not in (1, x_shape[0]):
        return None
    return g[0]


@dataclass(frozen=True, repr=False)
class NchwcChannelBinaryThunk(Thunk):
    """Blocked x [N, C/8, P, 8] (op) g [G, C] (G = 1 or N) into y like x."""
    x: Slice
    g: Slice
    y: Slice
    op: int
    x_first: bool
    n: int
    c: int
    pixels: int
    gate_n: int
    max_threads: int
    shift: Optional[Slice] = None         # op _elementwise.BINARY_AFFINE: y = x * g + shift

    kind: ClassVar[str] = "channel_binary_nchwc"
    reads: ClassVar[tuple] = ("x", "g", "shift")
    writes: ClassVar[tuple] = ("y",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _elementwise.ChannelBinaryLaunch(self.op, view(self.x), view(self.g), view(self.y), self.n, self.c,
                                                self.pixels, self.gate_n, self.x_first, self.max_threads,
                                                view(self.shift) if self.shift else None)


@dataclass(frozen=True)
class InvertedResidualAttrs:
    """The three convs of a fused inverted residual block (their ConvAttrs,
    epilogues included; expand None when the block has none) and which of
    them has a bias.  Node inputs: x, [W_expand, [b_expand]], W_dw, [b_dw],
    W_project, [b_project], [residual]."""
    expand: Optional[object]
    dw: object
    project: object
    biases: tuple                 # (expand, dw, project) has a bias

    def __repr__(self):
        parts = [] if self.expand is None else [f"expand {self.expand.epilogue!r}"]
        parts += [f"dw s{self.dw.stride[0]} {self.dw.epilogue!r}", f"project {self.project.epilogue!r}"]
        return "inverted_residual(" + ", ".join(parts) + ")"


def inverted_residual_operands(node):
    """(x, We, be, Wd, bd, Wp, bp, residual) node ids (None where absent)."""
    a = node.attrs
    ins = list(node.inputs)
    x = ins.pop(0)
    we = ins.pop(0) if a.expand is not None else None
    be = ins.pop(0) if a.expand is not None and a.biases[0] else None
    wd = ins.pop(0)
    bd = ins.pop(0) if a.biases[1] else None
    wp = ins.pop(0)
    bp = ins.pop(0) if a.biases[2] else None
    res = ins.pop(0) if a.project.epilogue is not None and a.project.epilogue.residual else None
    return x, we, be, wd, bd, wp, bp, res


@dataclass(frozen=True, repr=False)
class NchwcInvertedResidualThunk(Thunk):
    """[expand 1x1 ->] depthwise k x k (3 or 5) -> project 1x1 (+ residual)
    on blocked x / residual / y over bands of `band` output rows; weights
    packed as for the single convs; `scratch` the per-thread band buffers."""
    x: Slice
    w_expand: Optional[Slice]
    b_expand: Optional[Slice]
    w_dw: Slice
    b_dw: Optional[Slice]
    w_project: Slice
    b_project: Optional[Slice]
    residual: Optional[Slice]
    y: Slice
    scratch: Slice
    n: int
    c_in: int
    c_mid: int
    c_out: int
    h: int
    w: int
    stride: int
    band: int
    epilogues: tuple          # (expand, dw, project) ConvEpilogue or None
    max_threads: int
    k: int = 3                # the depthwise kernel's side

    kind: ClassVar[str] = "conv_nchwc_ir"
    reads: ClassVar[tuple] = ("x", "w_expand", "b_expand", "w_dw", "b_dw", "w_project", "b_project", "residual")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        ho = (self.h - 1) // self.stride + 1
        wo = (self.w - 1) // self.stride + 1
        expand = 2 * self.c_in * self.c_mid * self.h * self.w if self.w_expand is not None else 0
        return self.n * (expand + 2 * self.k * self.k * self.c_mid * ho * wo + 2 * self.c_mid * self.c_out * ho * wo)

    def bind(self, view):
        acts = tuple(_act(e) for e in self.epilogues)
        opt = lambda s: view(s) if s is not None else None
        return _nchwc.NchwcInvertedResidualLaunch(
            view(self.x), opt(self.w_expand), opt(self.b_expand), view(self.w_dw), opt(self.b_dw),
            view(self.w_project), opt(self.b_project), opt(self.residual), view(self.y), view(self.scratch),
            self.n, self.c_in, self.c_mid, self.c_out, self.h, self.w, self.stride, self.band, acts[0], acts[1],
            acts[2], self.max_threads, self.k)


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

@compile_rule("to_nchwc", "from_nchwc")
def compile_reorder(ctx, node):
    to_blocked = node.op == "to_nchwc"
    nchw = node.shape if not to_blocked else ctx.graph.node(node.inputs[0]).shape
    n, c = nchw[0], nchw[1]
    ctx.emit(ReorderNchwcThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), n, c,
                               math.prod(nchw[2:]), to_blocked))


@compile_rule("conv2d_nchwc")
def compile_conv2d_nchwc(ctx, node):
    x_id, w_id, b_id, r_id = conv_operands(node)
    xs = ctx.graph.node(x_id).shape               # [N, C/8, H, W, 8], or [N, C, H, W] for the stem
    c_out = node.shape[1] * BLOCK
    wv = ctx.graph.node(w_id).value
    if wv is not None and wv.ndim == 3:
        wv = wv[:, :, None, :]                    # a conv1d's weight: [M, C, 1, k]
    if wv is None:
        raise ValueError(f"conv2d_nchwc {node.name!r}: the weight must be a constant (the blocked_layout "
                         "pass only rewrites convs with constant weights)")
    bias = ctx.buf(b_id) if b_id is not None else None
    res = ctx.buf(r_id) if r_id is not None else None
    a = node.attrs
    if len(xs) == 4:
        n, c_in, h, w = xs
        # a 4-D output: the stem writes NCHW itself (blocked_layout, a stem
        # only NCHW ops read)
        nchw_out = len(node.shape) == 4
        if nchw_out:
            c_out = node.shape[1]
        packed = ctx.constant(_nchwc.pack_1x1_weight(wv.reshape(c_out, -1)), node.name + ".nchwc_W")
        # a padded copy of the few input planes: no tile gathers (3x3 s1 3->16
        # at 32x32: 12.9 us against 24.8 gathering; 7x7 s2 3->8 at 64x64:
        # 41 against 109, where the NCHW im2col takes 40)
        nfloats = _nchwc.stem_scratch_floats(n, c_in, h, w, a.pads_begin, a.pads_end, a.stride[1], nchw_out)
        scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
        ctx.emit(NchwcStemThunk(node.name, ctx.buf(x_id), packed, bias, ctx.buf(node.id), scratch, n, c_in, h, w,
                                c_out, a.kernel, a.stride, a.pads_begin, a.pads_end, a.dilation, a.epilogue,
                                ctx.num_threads, nchw_out))
        return
    n, c_in, h, w = xs[0], xs[1] * BLOCK, xs[2], xs[3]
    depthwise = a.groups > 1 and a.groups == c_in
    tile = blocked_winograd_tile(c_in, c_out, (n, c_out) + tuple(node.shape[2:4]), a) \
        if node.op == "conv2d_nchwc" and ctx.flags.winograd is not False else 0
    if tile:
        packed = ctx.constant(_nchwc.winograd_pack_u(wv, tile), node.name + ".winograd_U")
        nfloats = _nchwc.winograd_scratch_floats(n, c_in, h, w, c_out, a.pads_begin, a.pads_end, tile,
                                                 ctx.num_threads)
        scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
        ctx.emit(NchwcWinogradThunk(node.name, ctx.buf(x_id), packed, bias, res, ctx.buf(node.id), scratch, n, c_in,
                                    h, w, c_out, a.pads_begin, a.pads_end, tile, a.epilogue, ctx.num_threads))
        return
    if not depthwise and (a.groups > 1 or (a.kernel, a.stride, a.pads_begin, a.pads_end, a.dilation) !=
                          ((1, 1), (1, 1), (0, 0), (0, 0), (1, 1))):
        packed = ctx.constant(_nchwc.pack_dense_weight(wv, a.groups), node.name + ".nchwc_W")
        nfloats = _nchwc.dense_scratch_floats(n, c_in, h, w, a.pads_begin, a.pads_end, a.kernel, a.stride,
                                              a.dilation, a.groups, ctx.num_threads)
        scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
        ctx.emit(NchwcDenseThunk(node.name, ctx.buf(x_id), packed, bias, res, ctx.buf(node.id), scratch, n, c_in,
                                 h, w, c_out, a.kernel, a.stride, a.pads_begin, a.pads_end, a.dilation, a.epilogue,
                                 ctx.num_threads, a.groups))
        return
    if a.groups == 1:
        packed = ctx.constant(_nchwc.pack_1x1_weight(wv), node.name + ".nchwc_W")
        ctx.emit(NchwcConv1x1Thunk(node.name, ctx.buf(x_id), packed, bias, res, ctx.buf(node.id), n, c_in,
                                   c_out, h * w, a.epilogue, ctx.num_threads))
    else:
        packed = ctx.constant(_nchwc.pack_depthwise_weight(wv), node.name + ".nchwc_W")
        ctx.emit(NchwcDepthwiseThunk(node.name, ctx.buf(x_id), packed, bias, res, ctx.buf(node.id), n, c_in,
                                     h, w, a.stride[0], a.pads_begin[0], a.epilogue, ctx.num_threads,
                                     a.kernel[0]))


@compile_rule("conv3d_nchwc")
def compile_conv3d_nchwc(ctx, node):
    x_id, w_id, b_id, _ = conv_operands(node)
    n, cb, d, h, w, _ = ctx.graph.node(x_id).shape
    c_in, c_out = cb * BLOCK, node.shape[1] * BLOCK
    a = node.attrs
    wv = ctx.graph.node(w_id).value
    if wv is None:
        raise ValueError(f"conv3d_nchwc {node.name!r}: the weight must be a constant (the blocked_layout pass "
                         "only rewrites convs with constant weights)")
    kd, kh, kw = a.kernel
    packed = ctx.constant(_nchwc.pack_dense_weight(wv.reshape(c_out, -1, kd * kh, kw), a.groups),
                          node.name + ".nchwc_W")
    nfloats = _nchwc.dense3d_scratch_floats(n, c_in, d, h, w, a.pads_begin, a.pads_end)
    scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
    ctx.emit(NchwcDense3dThunk(node.name, ctx.buf(x_id), packed, ctx.buf(b_id) if b_id is not None else None,
                               ctx.buf(node.id), scratch, n, c_in, d, h, w, c_out, a.kernel, a.stride, a.pads_begin,
                               a.pads_end, a.dilation, ctx.num_threads, a.groups))


@compile_rule("conv_transpose2d_nchwc", "conv_transpose3d_nchwc")
def compile_conv_transpose_nchwc(ctx, node):
    xs = ctx.graph.node(node.inputs[0]).shape      # [N, C/8, (D,) H, W, 8]
    n, c_in, in_sp = xs[0], xs[1] * BLOCK, tuple(xs[2:-1])
    c_out, out_sp = node.shape[1] * BLOCK, tuple(node.shape[2:-1])
    a = node.attrs
    wv = ctx.graph.node(node.inputs[1]).value
    if wv is None:
        raise ValueError(f"{node.op} {node.name!r}: the weight must be a constant (the blocked_layout pass only "
                         "rewrites transposed convs with constant weights)")
    wv = wv.reshape(c_in, c_out, *a.kernel)       # a conv_transpose1d's [C, M, k] as [C, M, 1, k]
    packed = ctx.constant(_nchwc.pack_transposed_weight(wv, in_sp, out_sp, a.stride, a.pads_begin),
                          node.name + ".nchwc_W")
    nfloats = _nchwc.transposed_scratch_floats(n, c_in, in_sp, c_out, out_sp, a.kernel, a.stride, a.pads_begin)
    scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
    bias = ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None
    ctx.emit(NchwcConvTransposeThunk(node.name, ctx.buf(node.inputs[0]), packed, bias, ctx.buf(node.id), scratch,
                                     n, c_in, in_sp, c_out, out_sp, a.kernel, a.stride, a.pads_begin,
                                     ctx.num_threads))


@compile_rule("pool2d_nchwc")
def compile_pool2d_nchwc(ctx, node):
    n, cb, h, w, _ = ctx.graph.node(node.inputs[0]).shape
    a = node.attrs
    ctx.emit(NchwcPoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), n, cb * BLOCK, h, w,
                            node.shape[2], node.shape[3], a.kind, a.kernel, a.stride, a.pads_begin, a.pads_end,
                            a.dilation, a.count_include_pad, a.divisor_override or 0, ctx.num_threads))


@compile_rule("global_pool_nchwc")
def compile_global_pool_nchwc(ctx, node):
    n, cb, h, w, _ = ctx.graph.node(node.inputs[0]).shape
    ctx.emit(NchwcGlobalPoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), n, cb * BLOCK, h * w,
                                  node.attrs.kind, ctx.num_threads))


@compile_rule("channel_binary_nchwc")
def compile_channel_binary_nchwc(ctx, node):
    x, g = (ctx.graph.node(i) for i in node.inputs)
    n, cb = x.shape[0], x.shape[1]
    ctx.emit(NchwcChannelBinaryThunk(node.name, ctx.buf(x.id), ctx.buf(g.id), ctx.buf(node.id),
                                     CHANNEL_BINARY_CODES[node.attrs.op], node.attrs.x_first, n, cb * BLOCK,
                                     math.prod(x.shape[2:-1]), math.prod(g.shape) // (cb * BLOCK), ctx.num_threads))


@dataclass(frozen=True)
class NormConvAttrs:
    """conv2d_nchwc_norm: a 1x1 conv2d_nchwc (`conv`, its ConvAttrs) reading
    act(batch_norm(x)) (`epsilon`; act relu when `relu`).  Node inputs: x,
    the norm's scale, bias, mean and var, then the conv's W, [bias],
    [residual]."""
    conv: object
    epsilon: float
    relu: bool

    def __repr__(self):
        return f"norm(eps={self.epsilon}{', relu' if self.relu else ''}) -> conv {self.conv!r}"


def norm_conv_operands(node):
    """(x, [scale, bias, mean, var], W, bias or None, residual or None) node
    ids of a conv2d_nchwc_norm node."""
    ins = list(node.inputs)
    ep = node.attrs.conv.epilogue
    residual = ins.pop() if ep is not None and ep.residual else None
    return ins[0], ins[1:5], ins[5], (ins[6] if len(ins) > 6 else None), residual


@compile_rule("conv2d_nchwc_norm")
def compile_conv2d_nchwc_norm(ctx, node):
    from .arithmetic import batch_norm_coefficients
    x_id, norm_ids, w_id, b_id, r_id = norm_conv_operands(node)
    a = node.attrs
    k, b = batch_norm_coefficients(*(ctx.graph.node(i).value for i in norm_ids), a.epsilon)
    n, cb, h, w, _ = ctx.graph.node(x_id).shape
    c_in, c_out = cb * BLOCK, node.shape[1] * BLOCK
    packed = ctx.constant(_nchwc.pack_1x1_weight(ctx.graph.node(w_id).value), node.name + ".nchwc_W")
    scratch = ctx.scratch(4 * _nchwc.conv1x1_norm_scratch_floats(n, c_in, h * w, ctx.num_threads),
                          node.name + ".scratch")
    ctx.emit(NchwcConv1x1Thunk(node.name, ctx.buf(x_id), packed, ctx.buf(b_id) if b_id is not None else None,
                               ctx.buf(r_id) if r_id is not None else None, ctx.buf(node.id), n, c_in, c_out, h * w,
                               a.conv.epilogue, ctx.num_threads, ctx.constant(k, node.name + ".norm_scale"),
                               ctx.constant(b, node.name + ".norm_shift"), bool(a.relu), scratch))


@compile_rule("batch_norm_nchwc")
def compile_batch_norm_nchwc(ctx, node):
    from .arithmetic import batch_norm_coefficients
    x = ctx.graph.node(node.inputs[0])
    scale, bias, mean, var = (ctx.graph.node(i).value for i in node.inputs[1:])
    k, b = batch_norm_coefficients(scale, bias, mean, var, node.attrs.epsilon)
    n, cb = x.shape[0], x.shape[1]
    op = _elementwise.BINARY_AFFINE_RELU if getattr(node.attrs, "relu", False) else _elementwise.BINARY_AFFINE
    ctx.emit(NchwcChannelBinaryThunk(node.name, ctx.buf(x.id), ctx.constant(k, node.name + ".scale"),
                                     ctx.buf(node.id), op, True, n, cb * BLOCK,
                                     math.prod(x.shape[2:-1]), 1, ctx.num_threads,
                                     ctx.constant(b, node.name + ".shift")))


@compile_rule("inverted_residual_nchwc")
def compile_inverted_residual_nchwc(ctx, node):
    x, we, be, wd, bd, wp, bp, r = inverted_residual_operands(node)
    a = node.attrs
    n, cb, h, w, _ = ctx.graph.node(x).shape
    c_in, c_out = cb * BLOCK, node.shape[1] * BLOCK
    c_mid = ctx.graph.node(wd).shape[0]
    s = a.dw.stride[0]
    ho, wo = node.shape[2], node.shape[3]

    def const(i, what):
        v = ctx.graph.node(i).value
        if v is None:
            raise ValueError(f"inverted_residual_nchwc {node.name!r}: the {what} weight must be a constant")
        return v

    w_e = ctx.constant(_nchwc.pack_1x1_weight(const(we, "expand").reshape(c_mid, -1)), node.name + ".nchwc_We") \
        if we is not None else None
    w_d = ctx.constant(_nchwc.pack_depthwise_weight(const(wd, "depthwise")), node.name + ".nchwc_Wd")
    w_p = ctx.constant(_nchwc.pack_1x1_weight(const(wp, "project").reshape(c_out, -1)), node.name + ".nchwc_Wp")
    k = a.dw.kernel[0]
    band = _nchwc.ir_band_rows(c_mid, w, wo, ho, s, we is not None, ctx.num_threads, k)
    nfloats = _nchwc.ir_scratch_floats(c_mid, w, wo, s, band, we is not None, ctx.num_threads, k)
    scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
    buf = lambda i: ctx.buf(i) if i is not None else None
    ctx.emit(NchwcInvertedResidualThunk(
        node.name, ctx.buf(x), w_e, buf(be), w_d, buf(bd), w_p, buf(bp), buf(r), ctx.buf(node.id), scratch, n,
        c_in, c_mid, c_out, h, w, s, band, (a.expand.epilogue if a.expand is not None else None, a.dw.epilogue,
                                            a.project.epilogue), ctx.num_threads, k))
