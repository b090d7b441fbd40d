"""Conv2D algorithm choice: one pure function, run at compile time.

``select_conv_algorithm(dims, requested, flags)`` returns a
:class:`ConvAlgorithm`; eligibility lives in the named predicates below, each
saying why.  Choosing is separate from doing: the choice is stored in the
thunk and the executor never re-decides.
"""
import enum
import os
from dataclasses import dataclass
from typing import Optional

from . import _backward, _conv2d, _convnd, _runtime
from .shapes import BLAS_INT_MAX


class ConvAlgorithm(enum.IntEnum):
    REFERENCE = _conv2d.ALGO_REFERENCE
    IM2COL = _conv2d.ALGO_IM2COL
    GEMM_1X1 = _conv2d.ALGO_GEMM_1X1
    DIRECT = _conv2d.ALGO_DIRECT
    WINOGRAD = _conv2d.ALGO_WINOGRAD
    WINOGRAD_F4 = _conv2d.ALGO_WINOGRAD_F4

    @property
    def label(self):
        return self.name.lower()


# 'winograd' is F(2x2, 3x3) (the finite range below is exact for it);
# 'winograd_f4' is F(4x4, 3x3).  'auto' picks between them per shape.
CONV_ALGORITHM_NAMES = ("auto", "reference", "im2col", "direct", "winograd", "winograd_f4")

_ON = ("1", "on", "true", "yes")
_OFF = ("0", "off", "false", "no")


_SIMD_VALUES = ("auto", "baseline", "avx2")


def _tristate(name):
    """True / False for an on / off value, None when unset or empty; any
    other value raises (a typo must not silently keep the default)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return None
    value = raw.strip().lower()
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={raw!r} is not a recognised value; use one of {_ON} to turn it on, "
                     f"{_OFF} to turn it off, or leave it unset")


def check_simd_env():
    """RLX_SIMD is read by the C kernels (src/rlx_simd.h): 'baseline' forces
    the portable variant, 'avx2' at most AVX2+FMA (no AVX-512 tiles),
    anything else means 'detect'.  Only 'auto', 'baseline', 'avx2' or unset
    are accepted, so a typo cannot silently run the widest variant."""
    raw = os.environ.get("RLX_SIMD")
    if raw is None or raw == "":
        return
    if raw not in _SIMD_VALUES:
        raise ValueError(f"RLX_SIMD={raw!r} is not a recognised value; use one of {_SIMD_VALUES} "
                         f"or leave it unset")


@dataclass(frozen=True)
class ConvFlags:
    """The environment switches, read when a plan is compiled.

    fast      RLX_FAST_CONV: off (0/off/false/no) -> reference kernels everywhere.
    winograd  RLX_WINOGRAD: on -> Winograd wherever eligible; off -> never under auto.
    direct    RLX_DIRECT_CONV: on -> direct wherever eligible (after Winograd);
              off -> never under auto.
    microkernel  RLX_CONV_MICROKERNEL: on -> the gemm_1x1 and im2col GEMMs run
              on the conv microkernel (src/rlx_gemm.h) on every shape; off ->
              always sgemm; unset -> where `prefers_conv_microkernel` says so.
    implicit  RLX_IMPLICIT_GEMM: off -> an im2col conv on the microkernel builds
              its patch matrix; on or unset -> it packs the GEMM's panels from
              one phase-split copy of the input instead (same bits; see
              `conv_microkernel_layout`).
    implicit_direct  RLX_IMPLICIT_DIRECT: on -> an implicit im2col GEMM reads
              X in place from the input copy on every shape; off -> it always
              packs X panels; unset -> where `implicit_reads_in_place` says so
              (same bits either way).
    bwd_wide  RLX_BWD_WIDE: on -> a conv's weight gradient runs the wide
              kernel wherever `is_backward_wide` holds; off -> never (the
              im2col GEMM); unset -> where `prefers_backward_wide` says so.
    bwd_winograd  RLX_BWD_WINOGRAD: on -> a conv's weight gradient runs the
              Winograd kernel wherever `is_backward_winograd` holds; off ->
              never; unset -> where `prefers_backward_winograd` says so.

    On is 1/on/true/yes, off 0/off/false/no (any case); unset or empty means
    the default.  Any other value raises ValueError naming the accepted ones,
    as does an RLX_SIMD other than 'auto' or 'baseline'.
    """
    fast: bool = True
    winograd: Optional[bool] = None
    direct: Optional[bool] = None
    microkernel: Optional[bool] = None
    implicit: Optional[bool] = None
    implicit_direct: Optional[bool] = None
    bwd_wide: Optional[bool] = None
    bwd_winograd: Optional[bool] = None

    @classmethod
    def from_env(cls):
        # Parsed again only when one of the raw values changed: the
        # functional API keys its plan cache on these flags on every call.
        raw = _runtime.env_values(_FLAG_ENV)
        memo = _flags_memo
        if memo and memo[0] == raw:
            return memo[1]
        check_simd_env()
        fast = _tristate("RLX_FAST_CONV") is not False
        flags = cls(fast, _tristate("RLX_WINOGRAD"), _tristate("RLX_DIRECT_CONV"),
                    _tristate("RLX_CONV_MICROKERNEL"), _tristate("RLX_IMPLICIT_GEMM"),
                    _tristate("RLX_IMPLICIT_DIRECT"), _tristate("RLX_BWD_WIDE"), _tristate("RLX_BWD_WINOGRAD"))
        _flags_memo[:] = [raw, flags]
        return flags


_FLAG_ENV = (b"RLX_SIMD", b"RLX_FAST_CONV", b"RLX_WINOGRAD", b"RLX_DIRECT_CONV", b"RLX_CONV_MICROKERNEL",
             b"RLX_IMPLICIT_GEMM", b"RLX_IMPLICIT_DIRECT", b"RLX_BWD_WIDE", b"RLX_BWD_WINOGRAD")
_flags_memo = []        # [raw env values, ConvFlags] of the last from_env


# -- eligibility --------------------------------------------------------------

def blas_int_reason(dims):
    """None when every GEMM dimension in {description: value} fits the C int
    BLAS takes (M, N, K and the leading dimensions), else the reason."""
    for what, v in dims.items():
        if v > BLAS_INT_MAX:
            return f"GEMM dimensions within BLAS's C int (max {BLAS_INT_MAX}); {what} = {v}"
    return None


def conv2d_blas_dims(d, algo):
    """The values the conv2d GEMM kernels pass to BLAS as C ints."""
    cpg, cog = d.c_in // d.groups, d.c_out // d.groups
    if algo == ConvAlgorithm.GEMM_1X1:
        return {"C_out/groups": cog, "C_in/groups": cpg, "H*W": d.h * d.w}
    if algo in (ConvAlgorithm.WINOGRAD, ConvAlgorithm.WINOGRAD_F4):
        return {"C_out": d.c_out, "C_in": d.c_in}
    return {"C_out/groups": cog, "H_out*W_out": d.h_out * d.w_out, "C_in/groups*kH*kW": cpg * d.kh * d.kw}


def convnd_blas_dims(d):
    """The values the N-d GEMM kernels (conv3d, conv-transpose, conv
    gradients) pass to BLAS as C ints, for a ConvNDDims."""
    cpg, cog = d.c_in // d.groups, d.c_out // d.groups
    taps = d.kernel[0] * d.kernel[1] * d.kernel[2]
    return {"C_out/groups": cog, "C_in/groups": cpg,
            "input points": d.in_sp[0] * d.in_sp[1] * d.in_sp[2],
            "output points": d.out_sp[0] * d.out_sp[1] * d.out_sp[2],
            "C_in/groups*kernel taps": cpg * taps, "C_out/groups*kernel taps": cog * taps}


def is_gemm_1x1(d):
    """A 1x1 kernel at stride 1 without padding: the input is already the GEMM
    operand (dilation is irrelevant for a 1-tap kernel)."""
    return d.kh == 1 and d.kw == 1 and d.sh == 1 and d.sw == 1 and d.ph == 0 and d.pw == 0 \
        and d.h_out == d.h and d.w_out == d.w


def is_depthwise_3x3_5x5(d, stride=None):
    """A depthwise conv (groups == C_in == C_out) with a 3x3 or 5x5 kernel at
    stride 1 or 2 (the same in both axes; `stride` asks for one of them) and
    dilation 1, any padding: MobileNet's and EfficientNet's depthwise layers.
    The direct algorithm runs them with their own plane kernels
    (rlx_dw_s1_rows / rlx_dw_s2_planes in src/rlx_simd.h, chosen by
    depthwise_stride in src/_conv2d.pyx, which tests the same), bias fused."""
    return d.groups == d.c_in == d.c_out and (d.kh, d.kw) in ((3, 3), (5, 5)) \
        and d.sh == d.sw and d.sh in ((1, 2) if stride is None else (stride,)) \
        and (d.dh, d.dw) == (1, 1) and _dw_columns_fit(d)


def _dw_columns_fit(d):
    # The AVX2 kernels mask their loads with 32-bit column indices, which run
    # from -pw to about max(w, 2 * w_out) + 16.
    return max(d.w, 2 * d.w_out) + d.pw + 64 < 2 ** 31


def direct_ineligible_reason(d):
    """Direct kernel: unit stride and dilation (any padding, any groups), or
    a depthwise 3x3/5x5 conv at stride 2 (is_depthwise_3x3_5x5); it checks
    every tap against the real output shape, so it never reads out of bounds."""
    if is_depthwise_3x3_5x5(d, stride=2):
        return None
    if (d.sh, d.sw) != (1, 1):
        if d.groups == d.c_in == d.c_out and (d.dh, d.dw) == (1, 1):
            return (f"stride 1, or stride 2 with a 3x3/5x5 kernel for a depthwise conv "
                    f"(got stride {d.sh},{d.sw}, kernel {d.kh}x{d.kw})")
        return f"stride 1 (got {d.sh},{d.sw})"
    if (d.dh, d.dw) != (1, 1):
        return f"dilation 1 (got {d.dh},{d.dw})"
    return None


# The finite range of Winograd F(2x2, 3x3).  Its input transform adds up to
# four inputs (|V| <= 4 max|x|), the filter transform at most 2.25 max|w|, the
# output transform sums nine products: the result and every intermediate
# stay finite whenever
#     max|x| <= WINOGRAD_MAX_ABS_INPUT (FLT_MAX / 4, about 8.5e37)  and
#     81 * C_in * max|x| * max|w| <= FLT_MAX (about 3.4e38),
# where the direct sum itself is bounded by 9 * C_in * max|x| * max|w|.  Past
# that range Winograd can return inf where direct and im2col are finite; the
# range cannot be checked at compile time (inputs are unknown), so it is
# documented (README "Numerics", help(rlx_cpu.conv2d)) and tested.
FLT_MAX = 3.4028234663852886e38
WINOGRAD_MAX_ABS_INPUT = FLT_MAX / 4
WINOGRAD_GROWTH = 81

# The same for F(4x4, 3x3).  Each row of its B^T has absolute sum <= 10, so
# |V| <= 100 max|x|; G's rows have absolute sums (1/4, 1/2, 1/2, 7/24, 7/24,
# 1), so |U_ij| <= g_i g_j max|w|; with gb = (2.5, 5, 5, 1.75, 1.75, 10) the
# per-plane products are bounded by C_in max|x| max|w| gb_i gb_j, and the
# largest row of A^T = (0 1 -1 8 -8 1) weights gb to 48, so every output and
# intermediate is at most 48^2 = 2304 times C_in * max|x| * max|w|.  Finite
# whenever max|x| <= FLT_MAX / 100 and 2304 * C_in * max|x| * max|w| <= FLT_MAX.
WINOGRAD_F4_MAX_ABS_INPUT = FLT_MAX / 100
WINOGRAD_F4_GROWTH = 2304


def winograd_ineligible_reason(d):
    """Winograd F(2x2,3x3) and F(4x4,3x3): 3x3 kernel, unit stride and
    dilation, groups 1 (any padding; partial edge tiles are zero-filled and
    clipped)."""
    if (d.kh, d.kw) != (3, 3):
        return f"a 3x3 kernel (got {d.kh}x{d.kw})"
    if (d.sh, d.sw) != (1, 1):
        return f"stride 1 (got {d.sh},{d.sw})"
    if (d.dh, d.dw) != (1, 1):
        return f"dilation 1 (got {d.dh},{d.dw})"
    if d.groups != 1:
        return f"groups 1 (got {d.groups})"
    return blas_int_reason(conv2d_blas_dims(d, ConvAlgorithm.WINOGRAD))


def im2col_col_floats(d):
    return (d.c_in // d.groups) * d.kh * d.kw * d.h_out * d.w_out


def gemm_1x1_ineligible_reason(d):
    if not is_gemm_1x1(d):
        return "a 1x1 kernel at stride 1 without padding"
    return blas_int_reason(conv2d_blas_dims(d, ConvAlgorithm.GEMM_1X1))


def im2col_ineligible_reason(d):
    """im2col: the per-(image, group) patch matrix must stay under 2 GB and
    every GEMM dimension must fit BLAS's C int."""
    reason = blas_int_reason(conv2d_blas_dims(d, ConvAlgorithm.IM2COL))
    if reason is not None:
        return reason
    if im2col_col_floats(d) > _conv2d.IM2COL_MAX_COL_FLOATS:
        return (f"a patch matrix of at most {_conv2d.IM2COL_MAX_COL_FLOATS} floats "
                f"(this conv needs {im2col_col_floats(d)})")
    return None


def _prefers_winograd(d):
    # The transforms cost O(c_in + c_out) per tile while the GEMMs save
    # 2.25x on O(c_in * c_out): worth it once both channel counts are moderate.
    return d.c_in >= 16 and d.c_out >= 16


# F(4x4,3x3) vs F(2x2,3x3), from measurement (one thread, 2-core Zen 4,
# float32, interleaved medians): F(4x4) does 36 instead of 64 multiplies per
# 4x4 outputs per channel pair and measured 1.45-1.5x faster on 64->64 56x56
# (batch 1 and 8) and 128->128 28x28, but within noise of F(2x2) on 256->256
# 14x14 (0.9-1.07x, batch 1 and 8) and 512->512 7x7 at batch 8 (1.07x), and
# 1.7x slower on 512->512 7x7 at batch 1 (4 tiles).  Its 36 GEMMs per
# block each re-read a [C_out x C_in] filter plane (36 planes in all, from L3
# or memory once channels are large) while the block's transformed input is
# kept in L2, which holds fewer tiles as C_in grows: past about 192 input
# channels (or with fewer than 32 tiles in all) the GEMMs are too narrow for
# the filter stream to pay, and F(2x2) stays.  Its float32 error (measured
# <= 1e-5 of the result's magnitude on ResNet-like data up to C_in 2048,
# about 10x F(2x2)'s) is not what limits it.
WINOGRAD_F4_MIN_TILES = 32
WINOGRAD_F4_MAX_C_IN = 192


def winograd4_tiles(d):
    """4x4 output tiles of a conv (F(4x4,3x3)'s GEMM width over the batch)."""
    return d.n * ((d.h_out + 3) // 4) * ((d.w_out + 3) // 4)


# With the tile GEMMs on the conv microkernel (U packed, AVX2+FMA) both
# variants run faster than on sgemm, F(4x4) the more: 3x3 stride 1, batch 1,
# ms at 1 thread, microkernel against sgemm, F(4x4) 64->64 56x56 1.10 /
# 1.38, 128->128 28x28 1.07 / 1.21, 256->256 14x14 1.14 / 1.91 (F(2x2) 1.63
# / 1.81), 512->512 7x7 F(2x2) 2.17 / 2.97.  F(4x4) then wins from one
# 16-column panel of tiles up, at any channel count measured (512->512 14x14
# 5.65 against F(2x2) 6.79 at 1 thread, 2.78 against 3.38 at 2 threads, its
# 16 tiles one block that runs staged on both threads).
WINOGRAD_F4_MICRO_MIN_TILES = 16


def _prefers_winograd_f4(d, micro=False):
    if micro:
        return winograd4_tiles(d) >= WINOGRAD_F4_MICRO_MIN_TILES
    return winograd4_tiles(d) >= WINOGRAD_F4_MIN_TILES and d.c_in <= WINOGRAD_F4_MAX_C_IN


def _winograd_variant(d, micro=False):
    """The Winograd tile size auto (and RLX_WINOGRAD=1) uses for an eligible
    conv; micro: its tile GEMMs run on the conv microkernel
    (winograd_on_microkernel)."""
    return ConvAlgorithm.WINOGRAD_F4 if _prefers_winograd_f4(d, micro) else ConvAlgorithm.WINOGRAD


def _prefers_direct(d):
    # Few taps per output (depthwise and tiny channel groups): a GEMM with a
    # depth this small runs far below peak, the direct loop does not (and
    # depthwise 3x3/5x5 convs have their own plane kernels there).
    return is_depthwise_3x3_5x5(d) or (d.c_in // d.groups) * d.kh * d.kw < 32 and (d.c_out // d.groups) < 16


# -- GEMM engine of gemm_1x1 and im2col ----------------------------------------

# The conv microkernel (src/rlx_gemm.h: 6x16 AVX2+FMA register tile, weight
# packed at compile time, bias in the epilogue) against scipy's single-threaded
# OpenBLAS sgemm, GFLOP/s measured interleaved in one process on the 2-core
# Zen 4 (1 thread, load ~5 from other jobs), GEMM alone, M x K x N:
#     64 x  256 x 3136 (1x1 256->64 56x56)   88 vs 67
#     64 x  147 x 1024 (7x7 stem, one block)  79 vs 66
#     32 x    9 x  784 (MNIST conv1 image)    41 vs 33
#    256 x   64 x 3136                        89 vs 76
#    128 x 1152 x  196                        85 vs 78
#   1024 x  256 x  196 / 256 x 2304 x 196     90 vs 91 / 84 vs 84
#   2048 x  512 x   49 / 512 x 4608 x 49      73 vs 78 / 67 vs 72
# and as whole convs (im2col fill included, median of 31): 1x1 256->64 56x56
# 79 vs 62, stem 30 vs 27, MNIST conv1 N=64 19 vs 15.  It wins or ties
# everywhere but on small planes, where a 16-column panel has little to
# amortise its packing and the N remainder over: there im2col keeps sgemm.
MICROKERNEL_MIN_PIXELS = 64
# A gemm_1x1 plane of 2..63 pixels runs on the channel-panel variant instead
# (6 pixels x 16 output channels per tile, no column remainder), except when
# the pixel count is a multiple of 16 (the row-panel tile has no remainder
# there either).  Whole 1x1 convs, 1 thread, ms min of 15 interleaved runs,
# load ~7 from other jobs: channel panels / row panels / sgemm / ORT
#   49 px  160->960  0.268 / 0.271 / 0.315 / 0.336
#   49 px  960->160  0.257 / 0.336 / 0.363 / 0.314
#   49 px 320->1280  0.692 / 0.863 / 0.861 / 0.772
#   49 px 2048->512  1.494 / 1.610 / 1.588 / 1.411
#   49 px 512->2048  1.474 / 1.719 / 1.738 / 1.429
#   36 px  256->256  0.061 / 0.067 / 0.071 / 0.076
#   25 px  480->480  0.237 / 0.260 / 0.290 / 0.237
#    4 px  256->512  0.027 / 0.042 / 0.043 / 0.041
#   16 px  256->512  0.083 / 0.066 / 0.092 / 0.095   (row panels)
#    1 px  512->512  0.029 / 0.086 / 0.021 / 0.037   (sgemm)
# and at 196 px (14x14) the row panels won (64->384 0.116 vs 0.145).
# Those were the AVX2 tiles.  With the AVX-512 tiles of both (four channel
# panels per tile; the row panels' 6 x 64, 6 x 32 and (6 + 6) x 16 tiles) the
# channel panels won on every 49 px shape above (rows / channels: 160->960
# 0.219 / 0.179, 960->160 0.156 / 0.097, 512->2048 1.56 / 1.07, 2048->512
# 1.57 / 1.04), and up to MICROKERNEL_CHANNELS_WIDE_PIXELS pixels where the
# conv has at least as many input as output channels (9x9 512->128 0.138 /
# 0.103, 11x11 256->256 0.184 / 0.175, 384->64 0.074 / 0.060, 10x10
# 1024->256 0.461 / 0.402; but 64->384 0.066 / 0.091, 128->512 even).
MICROKERNEL_CHANNELS_MAX_PIXELS = 63
MICROKERNEL_CHANNELS_WIDE_PIXELS = 127


def _microkernel_wins(d, algo=None):
    p = d.h_out * d.w_out
    return p >= MICROKERNEL_MIN_PIXELS or (algo == ConvAlgorithm.GEMM_1X1 and p >= 2)


def prefers_conv_microkernel(d, algo, flags):
    """True when a gemm_1x1 or im2col conv runs its GEMMs on the conv
    microkernel rather than sgemm: forced by flags.microkernel, else only with
    the AVX2+FMA variant (the portable one exists for plans moved to an older
    CPU, and is slower than sgemm) on shapes where it measured faster."""
    if algo not in (ConvAlgorithm.GEMM_1X1, ConvAlgorithm.IM2COL):
        return False
    if flags.microkernel is not None:
        return flags.microkernel
    return _conv2d.simd_level() >= 1 and _microkernel_wins(d, algo)


def winograd_on_microkernel(d, flags):
    """True when a Winograd conv runs its tile GEMMs (U[p] . V[p] per
    transform position) on the conv microkernel, U packed in its row panels
    (at compile time for a constant weight, else right after the per-run
    filter transform), rather than sgemm: forced by flags.microkernel, else
    with the AVX2+FMA variant."""
    if flags.microkernel is not None:
        return flags.microkernel
    return _conv2d.simd_level() >= 1


# One (image, group) input copy of an implicit im2col conv (about the padded
# input's size; one per thread) stays under this many floats (256 MiB), or
# the conv builds its patch matrix in blocks instead.
IMPLICIT_MAX_FLOATS = 64 * 1024 * 1024


# An implicit im2col GEMM of at most IMPLICIT_DIRECT_MAX_ROWS rows (output
# channels per group) and at least IMPLICIT_DIRECT_MIN_K columns of W reads its
# X panels in place (src/rlx_gemm.h, rlx_gemm_conv_implicit_direct) instead
# of packing them: a packed float serves only rows / 6 register tiles, so for
# few rows the packing costs about as much as the FMAs.  Measured at 1 thread
# (same bits both ways): conv3d 16->16 3x3x3 at 4x8x16x16 1.42x faster, the
# 8 phases of conv_transpose3d 32->16 k4 s2 1.29x, the 7x7 stride-2 stem
# (64 rows, K = 147) 1.13x, conv_transpose2d 64->32 k4 s2 phases 1.12x;
# 128 rows (3x3 s2 64->128 at 56x56) 0.90x, and K = 9 (MNIST's 1->32
# conv) 0.58x, where the per-tile stores outweigh the few FMAs.
IMPLICIT_DIRECT_MAX_ROWS = 64
IMPLICIT_DIRECT_MIN_K = 32
# With the AVX-512 tiles of both (the packed path's 6 x 64, 6 x 32 and
# (6 + 6) x 16 ones; the in-place tile's 16-lane FMAs) packing pays from
# fewer rows: run_into-free kernel ms packed / in place at 1 thread (2
# threads), 3x3 unless noted: 64 rows 32->64 at 56x56 1.72 / 2.47 (0.79 /
# 0.89), the 7x7 s2 stem 3.62 / 5.25 (1.52 / 1.69), 5x5 64->64 at 28x28 2.14
# / 2.40; 128 rows s2 64->128 from 56x56 1.58 / 2.05; 32 rows s2 16->32 from
# 112x112 0.57 / 0.56 (0.38 / 0.40); 16 rows 8->16 at 56x56 0.152 / 0.110.
IMPLICIT_DIRECT_MAX_ROWS_AVX512 = 32


def implicit_reads_in_place(rows, k, flags):
    """Whether an implicit im2col GEMM of `rows` output channels per group
    and depth `k` (C_in/groups x taps) reads X in place; RLX_IMPLICIT_DIRECT
    overrides."""
    if flags.implicit_direct is not None:
        return flags.implicit_direct
    most = IMPLICIT_DIRECT_MAX_ROWS_AVX512 if _conv2d.simd_level() >= 2 else IMPLICIT_DIRECT_MAX_ROWS
    return rows <= most and k >= IMPLICIT_DIRECT_MIN_K


def conv_microkernel_layout(d, algo, flags):
    """0 when a gemm_1x1 or im2col conv runs its GEMMs on sgemm, else the
    packed-weight layout of the microkernel it runs on: for im2col the
    implicit patch matrix (src/rlx_implicit.h) unless RLX_IMPLICIT_GEMM is off
    or its input copy is too large; channel panels for gemm_1x1 planes of at
    most MICROKERNEL_CHANNELS_MAX_PIXELS pixels (with the AVX-512 tiles, up
    to MICROKERNEL_CHANNELS_WIDE_PIXELS for at least as many input as output
    channels); row panels otherwise (and for pixel counts that are multiples
    of 16)."""
    if not prefers_conv_microkernel(d, algo, flags):
        return 0
    if algo == ConvAlgorithm.IM2COL and flags.implicit is not False and \
            _conv2d.implicit_floats(d.as_tuple()) <= IMPLICIT_MAX_FLOATS:
        if implicit_reads_in_place(d.c_out // d.groups, (d.c_in // d.groups) * d.kh * d.kw, flags):
            return _conv2d.GEMM_LAYOUT_IMPLICIT_DIRECT
        return _conv2d.GEMM_LAYOUT_IMPLICIT
    p = d.h_out * d.w_out
    if algo == ConvAlgorithm.GEMM_1X1 and p % 16 and (
            p <= MICROKERNEL_CHANNELS_MAX_PIXELS or (p <= MICROKERNEL_CHANNELS_WIDE_PIXELS and d.c_in >= d.c_out
                                                     and _conv2d.simd_level() >= 2)):
        return _conv2d.GEMM_LAYOUT_CHANNELS
    return _conv2d.GEMM_LAYOUT_ROWS


# -- selection ----------------------------------------------------------------

# A weight that is not a constant (a plan input: the functional API, a
# trained weight fed each run) makes Winograd transform its filters on every
# run.  Per 3x3 filter, one thread (blocked transform, 256x256 filters):
# F(2x2) 7.5 ns, F(4x4) 29 ns (double intermediates).  Against the effective
# speed of each conv in GFLOP/s of the direct count 2*9*C_in*C_out*outputs
# (bench_conv2d, one thread, quiet): F(2x2) 110, F(4x4) 170, im2col on the
# conv microkernel 80.  Auto then takes the cheapest total, so a per-run
# transform never costs more than the algorithm it displaces would.
_FILTER_TRANSFORM_NS = {"winograd": 7.5, "winograd_f4": 29.0}
_EFFECTIVE_GFLOPS = {"winograd": 110.0, "winograd_f4": 170.0, "im2col": 80.0}


def runtime_weight_cost_ns(d, algo):
    """Estimated ns of one run of this 3x3 conv with `algo` when the filter
    transform runs every time (see _FILTER_TRANSFORM_NS)."""
    flops = 2.0 * 9 * d.c_in * d.c_out * d.n * d.h_out * d.w_out
    return flops / _EFFECTIVE_GFLOPS[algo.label] + _FILTER_TRANSFORM_NS.get(algo.label, 0.0) * d.c_in * d.c_out


def _winograd_for_runtime_weight(d):
    """F(4x4), F(2x2) or im2col for a Winograd-eligible conv whose weight is
    transformed every run: the cheapest by runtime_weight_cost_ns."""
    options = [_winograd_variant(d), ConvAlgorithm.WINOGRAD]
    if im2col_ineligible_reason(d) is None:
        options.append(ConvAlgorithm.IM2COL)
    return min(options, key=lambda a: runtime_weight_cost_ns(d, a))


def select_conv_algorithm(dims, requested="auto", flags=None, op="conv2d", weight_constant=True):
    """Return the ConvAlgorithm for a conv of these dims.

    `requested` is 'auto' or a forced algorithm ('reference', 'im2col',
    'direct', 'winograd' = F(2x2,3x3), 'winograd_f4' = F(4x4,3x3)); a forced
    algorithm overrides the environment flags and raises ValueError on a shape
    it cannot run.  Under 'auto' or 'im2col' a 1x1/stride-1/unpadded conv runs
    as a plain GEMM; where auto picks Winograd, _prefers_winograd_f4 picks the
    tile size.  weight_constant=False (the weight is a plan input) makes auto
    count Winograd's per-run filter transform (_winograd_for_runtime_weight).
    """
    if flags is None:
        flags = ConvFlags.from_env()
    if isinstance(requested, ConvAlgorithm):
        requested = requested.label
    if requested not in CONV_ALGORITHM_NAMES:
        raise ValueError(f"{op}: conv_algorithm must be one of {CONV_ALGORITHM_NAMES}, got {requested!r}")

    if requested != "auto":
        if requested == "reference":
            return ConvAlgorithm.REFERENCE
        if requested == "im2col":
            if is_gemm_1x1(dims):
                reason = gemm_1x1_ineligible_reason(dims)
                if reason is not None:
                    raise ValueError(f"{op}: conv_algorithm={requested!r} needs {reason}; conv is {dims!r}")
                return ConvAlgorithm.GEMM_1X1
            reason = im2col_ineligible_reason(dims)
            algo = ConvAlgorithm.IM2COL
        elif requested == "direct":
            reason = direct_ineligible_reason(dims)
            algo = ConvAlgorithm.DIRECT
        else:
            reason = winograd_ineligible_reason(dims)
            algo = ConvAlgorithm.WINOGRAD_F4 if requested == "winograd_f4" else ConvAlgorithm.WINOGRAD
        if reason is not None:
            raise ValueError(f"{op}: conv_algorithm={requested!r} needs {reason}; conv is {dims!r}")
        return algo

    if not flags.fast:
        return ConvAlgorithm.REFERENCE
    winograd_ok = winograd_ineligible_reason(dims) is None
    direct_ok = direct_ineligible_reason(dims) is None
    micro = winograd_on_microkernel(dims, flags)
    if flags.winograd and winograd_ok:
        return _winograd_variant(dims, micro)
    if flags.direct and direct_ok:
        return ConvAlgorithm.DIRECT
    if gemm_1x1_ineligible_reason(dims) is None:
        return ConvAlgorithm.GEMM_1X1
    if winograd_ok and flags.winograd is not False and _prefers_winograd(dims):
        return _winograd_variant(dims, micro) if weight_constant else _winograd_for_runtime_weight(dims)
    if direct_ok and flags.direct is not False and _prefers_direct(dims):
        return ConvAlgorithm.DIRECT
    if im2col_ineligible_reason(dims) is None:
        return ConvAlgorithm.IM2COL
    if direct_ok and flags.direct is not False:
        return ConvAlgorithm.DIRECT
    return ConvAlgorithm.REFERENCE


# -- N-d conv (conv3d) and conv-transpose (1-D, 2-D, 3-D) -----------------------
#
# Two algorithms: REFERENCE (plain loops; gather for conv3d, scatter for
# conv-transpose) and IM2COL (vol2col + GEMM, or GEMM + col2vol for
# conv-transpose).  `dims` is a thunks.ConvNDDims.

def convnd_scratch_floats(dims, transposed, nthreads=1):
    """Floats of scratch the GEMM path needs: patch-matrix column blocks, one
    per thread when (image, group) items run in parallel (src/_convnd.pyx)."""
    return _convnd.scratch_floats(dims.as_tuple(), transposed, True, nthreads)


def convnd_ineligible_reason(dims, transposed, nthreads=1):
    """The GEMM path: its scratch must stay under 2 GB, the same cap as
    conv2d's im2col.  The patch matrix is built in column blocks of at least
    64 columns, so only a gigantic number of rows (channels x taps) hits it."""
    reason = blas_int_reason(convnd_blas_dims(dims))
    if reason is not None:
        return reason
    need = convnd_scratch_floats(dims, transposed, nthreads)
    if need > _conv2d.IM2COL_MAX_COL_FLOATS:
        return (f"at most {_conv2d.IM2COL_MAX_COL_FLOATS} floats of patch-matrix scratch "
                f"(this op needs {need} with {nthreads} threads)")
    return None


def select_convnd_algorithm(dims, requested="auto", flags=None, op="conv3d", transposed=False,
                            nthreads=1):
    """REFERENCE or IM2COL for a conv3d (transposed=False) or conv-transpose
    compiled for `nthreads` threads.

    'auto' takes the GEMM path unless RLX_FAST_CONV is off or its scratch
    would be too large; 'reference' and 'im2col' force one (ValueError when im2col
    cannot run); 'direct' and 'winograd' exist for conv1d/conv2d only."""
    if flags is None:
        flags = ConvFlags.from_env()
    if isinstance(requested, ConvAlgorithm):
        requested = requested.label
    if requested not in CONV_ALGORITHM_NAMES:
        raise ValueError(f"{op}: conv_algorithm must be one of {CONV_ALGORITHM_NAMES}, got {requested!r}")
    if requested in ("direct", "winograd", "winograd_f4"):
        raise ValueError(f"{op}: conv_algorithm={requested!r} exists for conv1d/conv2d only; "
                         f"use 'auto', 'reference' or 'im2col' ({dims!r})")
    if requested == "reference":
        return ConvAlgorithm.REFERENCE
    reason = convnd_ineligible_reason(dims, transposed, nthreads)
    if requested == "im2col":
        if reason is not None:
            raise ValueError(f"{op}: conv_algorithm='im2col' needs {reason}; op is {dims!r}")
        return ConvAlgorithm.IM2COL
    if not flags.fast or reason is not None:
        return ConvAlgorithm.REFERENCE
    return ConvAlgorithm.IM2COL


# =============================================================================
# --- conv backward algorithm ---
# =============================================================================


class ConvBackwardAlgorithm(enum.IntEnum):
    """How a conv gradient (w.r.t. input or weight, any rank) is computed."""
    REFERENCE = _backward.BWD_REFERENCE
    GEMM = _backward.BWD_GEMM
    GEMM_1X1 = _backward.BWD_GEMM_1X1
    WIDE = _backward.BWD_WIDE
    WINOGRAD = _backward.BWD_WINOGRAD

    @property
    def label(self):
        return self.name.lower()


def is_backward_1x1(d):
    """One tap, unit stride, no padding: the patch matrix is the input itself,
    so the GEMMs read x / write dx directly (no im2col, no col2im)."""
    return d.kernel == (1, 1, 1) and d.stride == (1, 1, 1) and d.pad == (0, 0, 0) \
        and d.in_sp == d.out_sp


def is_backward_wide(d):
    """The wide weight-gradient kernel applies (src/rlx_bwd_wide.h): unit
    stride, conv1d / conv2d, so each patch-matrix row is a shifted run of the
    zero-padded input plane and no patch matrix is built."""
    return _backward.wide_eligible(d.as_tuple())


# The wide grid computes L = (out_h - 1) * Wp + out_w products per dot for
# out_h * out_w real ones (Wp = out_w + (kw-1)*dw); past 1.5x the wasted
# columns cost more than the im2col GEMM loses (a 3x3 conv on a 4-wide row).
# Below 16 items ((group, 4 output channels)) per thread, the items cannot be
# balanced over the threads, while the GEMM path splits images instead.
_WIDE_MAX_WASTE = 1.5
_WIDE_MIN_ITEMS_PER_THREAD = 4


def prefers_backward_wide(d, nthreads=1):
    """The wide kernel is eligible and expected to beat im2col + sgemm:
    the wide grid wastes at most _WIDE_MAX_WASTE and the (group, channel
    block) items split evenly enough over nthreads."""
    if not is_backward_wide(d):
        return False
    length, pixels = _backward.wide_pixels(d.as_tuple())
    items = _backward.wide_items(d.as_tuple())
    t = max(1, nthreads)
    balanced = t == 1 or items % t == 0 or items >= _WIDE_MIN_ITEMS_PER_THREAD * t
    return length <= _WIDE_MAX_WASTE * pixels and items >= t and balanced


def is_backward_winograd(d):
    """The Winograd weight-gradient kernel applies (src/rlx_bwd_wino.h): a
    3x3 conv2d at stride 1 and dilation 1."""
    return _backward.winograd_eligible(d.as_tuple())


# The transforms cost about as much per (tile, channel) as a dot row of 16
# products per tile saves; measured against the wide kernel at one thread
# (Zen 4, interleaved): 16->16 channels on 56x56 N=8 0.88x, 32->64 on 28x28
# N=32 1.27x, 64->64 56x56 N=8 1.24x, 128->128 28x28 1.41x, 256->256 14x14
# 1.60x; 512->512 on 7x7 N=8 (128 tiles in all) 0.74x, where every dot is
# a few tiles long and the lane sums dominate.
_WINO_MIN_CHANNELS = 32
_WINO_MIN_TILES = 256


def prefers_backward_winograd(d, nthreads=1):
    """The Winograd kernel is eligible and expected to beat the wide kernel
    and im2col + sgemm: every conv group has at least _WINO_MIN_CHANNELS
    input and output channels, and the dots run over at least
    _WINO_MIN_TILES tiles of 2x2 outputs."""
    if not is_backward_winograd(d):
        return False
    tiles = d.n * ((d.out_sp[1] + 1) // 2) * ((d.out_sp[2] + 1) // 2)
    return d.c_in // d.groups >= _WINO_MIN_CHANNELS and d.c_out // d.groups >= _WINO_MIN_CHANNELS \
        and tiles >= _WINO_MIN_TILES


def select_conv_backward_algorithm(dims, requested="auto", flags=None, nthreads=1,
                                   kernel="weight"):
    """ConvBackwardAlgorithm for a ConvNDDims.

    'reference' (or RLX_FAST_CONV off) -> the constant-memory reference loops;
    otherwise GEMM_1X1 where eligible; for the weight gradient then WINOGRAD
    where RLX_BWD_WINOGRAD (flags.bwd_winograd) forces it, or where it is
    not forced off, RLX_BWD_WIDE does not force the wide kernel and
    `prefers_backward_winograd` picks it; then WIDE where
    RLX_BWD_WIDE (flags.bwd_wide) or `prefers_backward_wide` picks it; then
    GEMM while one patch-matrix slab stays under the forward im2col bound,
    else the reference loops.  The forward-only choices ('direct',
    'winograd', 'winograd_f4') mean 'auto' here."""
    if flags is None:
        flags = ConvFlags.from_env()
    if isinstance(requested, ConvAlgorithm):
        requested = requested.label
    if requested == "reference" or not flags.fast:
        return ConvBackwardAlgorithm.REFERENCE
    if blas_int_reason(convnd_blas_dims(dims)) is not None:
        return ConvBackwardAlgorithm.REFERENCE
    if is_backward_1x1(dims):
        return ConvBackwardAlgorithm.GEMM_1X1
    if kernel == "weight" and is_backward_winograd(dims) and (
            flags.bwd_winograd or (flags.bwd_winograd is None and not flags.bwd_wide
                                   and prefers_backward_winograd(dims, nthreads))):
        return ConvBackwardAlgorithm.WINOGRAD
    if kernel == "weight" and flags.bwd_wide is not False and is_backward_wide(dims) \
            and (flags.bwd_wide or prefers_backward_wide(dims, nthreads)):
        return ConvBackwardAlgorithm.WIDE
    if _backward.col_floats(dims.as_tuple()) > _conv2d.IM2COL_MAX_COL_FLOATS:
        return ConvBackwardAlgorithm.REFERENCE
    return ConvBackwardAlgorithm.GEMM
