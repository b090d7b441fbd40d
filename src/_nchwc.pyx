# Channel-blocked (NCHW8c) kernels with their bound launches
# (src/rlx_nchwc.h has the layout and the arithmetic):
#
#   launch                 work item (prange, static)          what
#   ---------------------  ----------------------------------  -------------------------------
#   NchwcReorderLaunch     one 8-channel block of one image    NCHW <-> NCHW8c
#   NchwcConv1x1Launch     (image, pixel chunk, panel group)   1x1 conv + epilogue
#   NchwcDepthwiseLaunch   one output row of one block (runs   depthwise 3x3/5x5 s1/s2 + epilogue
#                          of rows of a block in one call)
#   NchwcStemLaunch        one output row of one image         dense conv, NCHW in, blocked out
#   NchwcDenseLaunch       (image, output row, panel group)    dense conv + epilogue, blocked
#                          after a padded copy per (image, block)
#   NchwcPoolLaunch        one output row of one block         2-D max / avg pool
#   NchwcGlobalPoolLaunch  one 8-channel block of one image    global max / avg pool, to NCHW
#   NchwcInvertedResidual- (image, band of output rows), runs  expand 1x1 + depthwise 3x3 +
#     Launch               of consecutive bands per thread     project 1x1 (+ residual), fused
#   NchwcWinogradLaunch    (chunk of output tiles, panel       3x3 s1 conv + epilogue by
#                          group)                              Winograd F(2x2) or F(4x4)
#
# Every output element is computed by the same operations whichever item
# holds it, so results do not depend on the thread count; the portable
# variant gives the same bits as AVX2 (fused multiply-adds in the same order).
# Every geometry and length is checked when a launch is bound.
from cython.parallel cimport prange

from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_meter_bind, work_note

import math

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil
    int rlx_cpu_zmm_half_rate() nogil
    int rlx_simd_level() nogil

cdef extern from "rlx_nchwc.h":
    ctypedef struct NcAct "rlx_nchwc_act":
        int act
        float alpha, beta
    ctypedef struct Nc1x1Geom "rlx_nchwc_1x1_geom":
        Py_ssize_t n, k, m, p, chunk, groups
    ctypedef struct NcDwGeom "rlx_nchwc_dw_geom":
        Py_ssize_t cb, h, w, h_out, w_out, s, ph, pw, k, pairs16
    ctypedef struct NcStemGeom "rlx_nchwc_stem_geom":
        Py_ssize_t c, h, w, m, h_out, w_out, kh, kw, sh, sw, ph, pw, dh, dw
    enum: RLX_NCHWC_STEM_MAX_K
    enum: RLX_NCHWC_DENSE_ITEM
    enum: RLX_NCHWC_NP
    ctypedef struct NcDenseGeom "rlx_nchwc_dense_geom":
        Py_ssize_t n, c, h, w, m, h_out, w_out, sh, sw, pt, pl, hp, wp, nkb, cgroups, pixels, groups, d_out, sd, hs
        Py_ssize_t tap_rows, tap_cols, dh, rt, rb
    void rlx_nchwc_pad_phase2(const float* x, Py_ssize_t x_len, float* xp, Py_ssize_t xp_len, Py_ssize_t h,
                              Py_ssize_t w, Py_ssize_t hp, Py_ssize_t wq, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t i0,
                              Py_ssize_t i1) nogil
    void rlx_nchwc_pad(const float* x, Py_ssize_t x_len, float* xp, Py_ssize_t xp_len, const NcDenseGeom* g,
                       Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_pad3d(const float* x, Py_ssize_t x_len, float* xp, Py_ssize_t xp_len, Py_ssize_t d, Py_ssize_t h,
                         Py_ssize_t w, Py_ssize_t dp, Py_ssize_t hp, Py_ssize_t wp, Py_ssize_t pf, Py_ssize_t pt,
                         Py_ssize_t pl, Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_phase_scatter(const float* z, Py_ssize_t z_len, float* y, Py_ssize_t y_len, Py_ssize_t ph,
                                 Py_ssize_t pw, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t a, Py_ssize_t b,
                                 Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_subsample(const float* x, Py_ssize_t x_len, float* xs, Py_ssize_t xs_len, Py_ssize_t h,
                             Py_ssize_t w, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t sh, Py_ssize_t sw,
                             Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_dense_run(const float* xp, Py_ssize_t xp_len, const float* wq, Py_ssize_t wq_len,
                             const float* bias, const float* res, Py_ssize_t res_len, float* y, Py_ssize_t y_len,
                             const Py_ssize_t* koff, const NcDenseGeom* g, const NcAct* a, Py_ssize_t i0,
                             Py_ssize_t i1) nogil
    void rlx_nchwc_stem_offsets(const NcStemGeom* g, Py_ssize_t* koff) nogil
    void rlx_nchwc_stem_pad(const float* x, Py_ssize_t x_len, float* xp, Py_ssize_t xp_len, Py_ssize_t h,
                            Py_ssize_t w, Py_ssize_t hp, Py_ssize_t wp, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t i0,
                            Py_ssize_t i1) nogil
    void rlx_nchwc_stem_rows(const float* x, Py_ssize_t x_len, const float* wq, Py_ssize_t wq_len,
                             const float* bias, float* y, Py_ssize_t y_len, const Py_ssize_t* koff,
                             const NcStemGeom* g, const NcAct* a, Py_ssize_t r0, Py_ssize_t r1) nogil
    Py_ssize_t rlx_stem_nchw_wq(const NcStemGeom* g) nogil
    void rlx_stem_nchw_offsets(const NcStemGeom* g, Py_ssize_t* koff) nogil
    void rlx_stem_nchw_copy(const float* x, Py_ssize_t x_len, float* xq, Py_ssize_t xq_len, Py_ssize_t h,
                            Py_ssize_t w, Py_ssize_t hp, Py_ssize_t sw, Py_ssize_t wq, Py_ssize_t pt, Py_ssize_t pl,
                            Py_ssize_t bands, Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_stem_nchw_rows(const float* xq, Py_ssize_t xq_len, const float* wq, Py_ssize_t wq_len,
                            const float* bias, float* y, Py_ssize_t y_len, const Py_ssize_t* koff,
                            const NcStemGeom* g, const NcAct* a, Py_ssize_t chunk, Py_ssize_t i0,
                            Py_ssize_t i1) nogil
    enum: RLX_STEM_NCHW_ROW
    enum: RLX_STEM_NCHW_CHUNK
    enum: RLX_NCHWC_KC
    void rlx_nchwc_reorder(const float* src, Py_ssize_t src_len, float* dst, Py_ssize_t dst_len,
                           Py_ssize_t P, int to_blocked, Py_ssize_t i0, Py_ssize_t i1) nogil
    Py_ssize_t rlx_nchwc_1x1_packed_floats(Py_ssize_t m, Py_ssize_t k) nogil
    void rlx_nchwc_1x1_pack(const float* w, Py_ssize_t m, Py_ssize_t k, float* wq) nogil
    Py_ssize_t rlx_nchwc_1x1_items(const Nc1x1Geom* g) nogil
    void rlx_nchwc_1x1_run(const float* x, Py_ssize_t x_len, const float* wq, Py_ssize_t wq_len,
                           const float* bias, const float* res, Py_ssize_t res_len, float* y, Py_ssize_t y_len,
                           const Py_ssize_t* koff, const Nc1x1Geom* g, const NcAct* a, Py_ssize_t i0,
                           Py_ssize_t i1) nogil
    void rlx_nchwc_1x1_run_norm(const float* x, Py_ssize_t x_len, const float* wq, Py_ssize_t wq_len,
                                const float* bias, const float* res, Py_ssize_t res_len, float* y, Py_ssize_t y_len,
                                const Py_ssize_t* koff, const Nc1x1Geom* g, const NcAct* a, const float* nk,
                                const float* nb, int relu, float* scratch, Py_ssize_t scratch_len,
                                const Py_ssize_t* skoff, Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_dw_pack(const float* w, Py_ssize_t c, Py_ssize_t taps, float* wt) nogil
    ctypedef struct NcPoolGeom "rlx_nchwc_pool_geom":
        Py_ssize_t cb, h, w, h_out, w_out, kh, kw, sh, sw, ph, pw, dh, dw, lo_h, hi_h, lo_w, hi_w, divisor_override
        int is_max
    void rlx_nchwc_pool_taps(Py_ssize_t start, Py_ssize_t d, Py_ssize_t k, Py_ssize_t lo, Py_ssize_t hi,
                             Py_ssize_t* t0, Py_ssize_t* t1) nogil
    void rlx_nchwc_pool_rows(const float* x, Py_ssize_t x_len, float* y, Py_ssize_t y_len, const NcPoolGeom* g,
                             Py_ssize_t r0, Py_ssize_t r1) nogil
    void rlx_nchwc_global(const float* x, Py_ssize_t x_len, float* y, Py_ssize_t y_len, Py_ssize_t P, int is_max,
                          Py_ssize_t i0, Py_ssize_t i1) nogil
    void rlx_nchwc_dw_rows(const float* x, Py_ssize_t x_len, const float* wt, const float* bias,
                           const float* res, Py_ssize_t res_len, float* y, Py_ssize_t y_len,
                           const NcDwGeom* g, const NcAct* a, Py_ssize_t r0, Py_ssize_t r1) nogil
    bint rlx_nchwc_dw16_on(const NcDwGeom* g) nogil
    Py_ssize_t rlx_nchwc_dw_items(const NcDwGeom* g, Py_ssize_t n) nogil

    ctypedef struct NcIrGeom "rlx_nchwc_ir_geom":
        Py_ssize_t n, c, e, m, h, w, h_out, w_out, s, band, br
        int expand, k
    ctypedef struct NcIrOps "rlx_nchwc_ir_ops":
        const float* we
        const float* be
        const float* wd
        const float* bd
        const float* wp
        const float* bp
        NcAct ae, ad, ap
    Py_ssize_t rlx_nchwc_ir_scratch_floats(const NcIrGeom* g) nogil
    void rlx_nchwc_ir_run(const float* x, Py_ssize_t x_len, const float* res, Py_ssize_t res_len, float* y,
                          Py_ssize_t y_len, float* scratch, Py_ssize_t scratch_len, const Py_ssize_t* koff_e,
                          const Py_ssize_t* koff_p, const NcIrOps* o, const NcIrGeom* g, Py_ssize_t i0,
                          Py_ssize_t i1) nogil
cdef extern from "rlx_nchwc_wino.h":
    ctypedef struct NcWinoGeom "rlx_nchwc_wino_geom":
        Py_ssize_t n, c, m, h, w, h_out, w_out, pt, pl, mt, th, tw, chunk, groups
    Py_ssize_t rlx_nchwc_wino_chunks(const NcWinoGeom* g) nogil
    Py_ssize_t rlx_nchwc_wino_items(const NcWinoGeom* g) nogil
    Py_ssize_t rlx_nchwc_wino_scratch_floats(const NcWinoGeom* g) nogil
    Py_ssize_t rlx_nchwc_wino_packed_floats(Py_ssize_t mt, Py_ssize_t m, Py_ssize_t c) nogil
    void rlx_nchwc_wino_run(const float* x, Py_ssize_t x_len, const float* u, Py_ssize_t u_len, const float* bias,
                            const float* res, Py_ssize_t res_len, float* y, Py_ssize_t y_len, float* scratch,
                            Py_ssize_t scratch_len, const Py_ssize_t* koff, const NcWinoGeom* g, const NcAct* a,
                            Py_ssize_t i0, Py_ssize_t i1) nogil
cdef extern from "rlx_epilogue.h":
    enum:
        RLX_ACT_NONE
        RLX_ACT_RELU
        RLX_ACT_CLIP
        RLX_ACT_LEAKY_RELU
        RLX_ACT_SIGMOID
        RLX_ACT_SILU
        RLX_ACT_HARD_SIGMOID
        RLX_ACT_HARD_SWISH

rlx_simd_init()

cdef enum:
    NC_B = 8

BLOCK = NC_B
ACTS = {None: RLX_ACT_NONE, "relu": RLX_ACT_RELU, "clip": RLX_ACT_CLIP, "leaky_relu": RLX_ACT_LEAKY_RELU,
        "sigmoid": RLX_ACT_SIGMOID, "silu": RLX_ACT_SILU, "hard_sigmoid": RLX_ACT_HARD_SIGMOID,
        "hard_swish": RLX_ACT_HARD_SWISH}

# A 1x1 work item's pixels: the block of x a K block reads (pixels x
# RLX_NCHWC_KC channels) stays within about this many floats (64 KiB, in L2).
CHUNK_FLOATS = 16 * 1024


def simd_level():
    """The SIMD level (src/rlx_simd.h): 0 runs the portable loops, 1 the
    AVX2+FMA variants, 2 also the AVX-512 tiles (two output panels at once)."""
    return rlx_simd_level()


def zmm_half_rate():
    """True on a CPU whose cores run each 512-bit FMA as two 256-bit halves
    (AMD Zen 4: the AVX-512 tiles have AVX2's FMA peak there, not twice it),
    read from CPUID (src/rlx_simd.h rlx_cpu_zmm_half_rate)."""
    return bool(rlx_cpu_zmm_half_rate())


def _check_blocked_channels(op, what, c):
    if c <= 0 or c % BLOCK:
        raise ValueError(f"{op}: {what} must be a positive multiple of {BLOCK} for the blocked layout, got {c}")


def _check_len(op, what, view, need):
    if view.shape[0] < need:
        raise ValueError(f"{op}: {what} holds {view.shape[0]} floats, needs {need}")


def _conv_out(op, n, h, w, kernel, stride, pads_begin, pads_end, dilation):
    """(h_out, w_out) of a conv, or ValueError naming the bad geometry."""
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    if min(kh, kw, sh, sw, dh, dw) < 1 or min(pads_begin + pads_end) < 0:
        raise ValueError(f"{op}: kernel, stride and dilation must be >= 1 and padding >= 0, got kernel={kernel}, "
                         f"stride={stride}, dilation={dilation}, padding={pads_begin}+{pads_end}")
    h_out = (h + pads_begin[0] + pads_end[0] - dh * (kh - 1) - 1) // sh + 1
    w_out = (w + pads_begin[1] + pads_end[1] - dw * (kw - 1) - 1) // sw + 1
    if n < 1 or h_out < 1 or w_out < 1:
        raise ValueError(f"{op}: empty output for n={n}, input {h}x{w}, kernel {kernel}, stride {stride}")
    return h_out, w_out


def _act_code(op, act):
    if act not in ACTS:
        raise ValueError(f"{op}: activation must be one of {sorted(a for a in ACTS if a)} or None, got {act!r}")
    return ACTS[act]


def pack_1x1_weight(weight):
    """A [M, K] (or [M, K, 1, 1]) float32 1x1 conv weight in the blocked
    kernel's panels of 16 output channels (compile-time use)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    w = w.reshape(w.shape[0], -1)
    cdef Py_ssize_t m = w.shape[0], k = w.shape[1]
    _check_blocked_channels("pack_1x1_weight", "output channels", m)
    out = np.empty(rlx_nchwc_1x1_packed_floats(m, k), np.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] ov = out
    with nogil:
        rlx_nchwc_1x1_pack(&wv[0], m, k, &ov[0])
    return out


def pack_dense_weight(weight, Py_ssize_t groups=1):
    """A [M, C/G, kh, kw] float32 conv weight in G groups (C/G and M/G
    multiples of 8) for the blocked dense kernel: per group, depth k =
    ((cb*kh + i)*kw + j)*8 + channel in block, in panels of 16 of the group's
    output channels; the groups one after another (compile-time use)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 4:
        raise ValueError(f"pack_dense_weight: weight must be [M, C, kh, kw], got {w.shape}")
    m, c, kh, kw = w.shape
    _check_blocked_channels("pack_dense_weight", "input channels", c)
    if groups < 1 or m % groups:
        raise ValueError(f"pack_dense_weight: {m} output channels do not split into {groups} groups")
    _check_blocked_channels("pack_dense_weight", "output channels per group", m // groups)
    mg = m // groups
    return np.concatenate([
        pack_1x1_weight(w[g * mg:(g + 1) * mg].reshape(mg, c // NC_B, NC_B, kh, kw).transpose(0, 1, 3, 4, 2)
                        .reshape(mg, -1)) for g in range(groups)])


# Output pixels per work item of the blocked dense conv, about (the 3-D conv,
# and the 2-D one and the transposed conv's phases without the wide row
# tiles).
DENSE_ITEM_PIXELS = 64
# With the AVX2 tiles, output rows at least this wide make items of whole
# rows, and the tiles of a row stay in it: the tile of consecutive pixels
# keeps its offsets as constants, where a tile across a row end holds twelve
# offsets in registers.  Interleaved on Zen 3, kernel ms per-row / across,
# the same bits: RegNet's grouped 3x3 s2 (8 channels per group) 16->16 from
# 112x112 1.07-1.09x at batch 1 and 8, 1 and 2 threads; 64->64 g8 from 56x56
# 1.08x; 24->24 g3 1.06x; 64->128 s2 from 56x56 1.03x; stride-1 dense 3x3s
# 0.98-0.99x (noise); whole RegNets and ResNets at 224, 2 threads, batch 1
# and 8: 0.97-1.04x the runs, 1.02x in the middle.  Narrower rows (7x7, 14x14
# planes) gain from tiles that run across rows (49 pixels = 4 x 6 + 5 x 5).
DENSE_ROW_ITEM_MIN_W = 24


def dense_item_pixels(Py_ssize_t plane, Py_ssize_t w_out, Py_ssize_t sw):
    """Output pixels per work item of the 2-D blocked dense conv on a plane of
    `plane` pixels in rows of w_out.  Where the AVX-512 wide tiles run along
    output rows (rows wider than a 6-pixel tile, column stride 1 or 2), an
    item is whole rows, up to RLX_NCHWC_DENSE_ITEM pixels in equal row
    counts: no row splits into a short tile, and each K block of a weight
    panel serves more tiles from L1 (256->256 at 14x14, one item of 196
    pixels against four of 49: 1.08-1.14x with cold caches at 1 thread,
    1.03-1.07x at 2; 3x3 s2 256->256 from 28x28: 1.03-1.10x; the other
    ResNet 3x3 shapes within noise).  Rows longer than that split into
    equal items of at most RLX_NCHWC_DENSE_ITEM pixels (conv1d 512->512 k7
    on 8192: 1.08-1.14x at 1 thread and 1.07-1.10x at 2 against items of
    64; 256->256 k3 on 2048 and 64->64 k5 on 4096: 1.01-1.04x).  With the
    AVX2 tiles, planes of more than one row (not a conv1d's) in rows of
    DENSE_ROW_ITEM_MIN_W to RLX_NCHWC_DENSE_ITEM pixels make items of whole
    rows, about DENSE_ITEM_PIXELS pixels, whose tiles
    then stay within a row (see there).  Else about DENSE_ITEM_PIXELS
    pixels."""
    cdef Py_ssize_t h_out, rows, nblk
    if rlx_simd_level() >= 2 and RLX_NCHWC_NP < w_out and (sw == 1 or sw == 2):
        if w_out > RLX_NCHWC_DENSE_ITEM:
            nblk = (plane + RLX_NCHWC_DENSE_ITEM - 1) // RLX_NCHWC_DENSE_ITEM
            return (plane + nblk - 1) // nblk
        h_out = plane // w_out
        rows = RLX_NCHWC_DENSE_ITEM // w_out
        nblk = (h_out + rows - 1) // rows
        return (h_out + nblk - 1) // nblk * w_out
    if rlx_simd_level() == 1 and DENSE_ROW_ITEM_MIN_W <= w_out <= RLX_NCHWC_DENSE_ITEM and plane > w_out:
        h_out = plane // w_out
        rows = max(1, DENSE_ITEM_PIXELS // w_out)
        nblk = (h_out + rows - 1) // rows
        return (h_out + nblk - 1) // nblk * w_out
    nblk = (plane + DENSE_ITEM_PIXELS - 1) // DENSE_ITEM_PIXELS
    return (plane + nblk - 1) // nblk


def _subsampled_1x1(tuple kernel, tuple stride, tuple pads_begin, tuple pads_end, tuple dilation, Py_ssize_t groups):
    """A strided 1x1 conv without padding: run as a subsampled copy and the 1x1 kernel."""
    return kernel == (1, 1) and stride != (1, 1) and not any(pads_begin) and not any(pads_end) \
        and dilation == (1, 1) and groups == 1


def _phase_split(tuple kernel, tuple stride, tuple pads_begin, tuple pads_end, tuple dilation,
                 Py_ssize_t groups):
    """Whether a blocked dense conv reads a copy of its input split by column
    parity (rlx_nchwc_pad_phase2): at column stride 2 without column dilation
    (a strided 1x1 without padding reads a subsampled copy instead).  Its
    tiles then read consecutive pixels, as at stride 1, and run the wide row
    tiles.  Against the direct strided reads, interleaved: the 3x3 s2 convs
    of ResNet-18 and -50 in whole-model runs 1.00-1.02x at 1 thread and
    1.02-1.04x at 2; alone and hot (64->128 from 56x56 to 512->512 from
    14x14) 0.98-1.20x at 1 thread and 1.00-1.14x at 2; 32->64 from 112x112,
    where the copy weighs most, 0.95-1.00x."""
    return (stride[1] == 2 and dilation[1] == 1
            and not _subsampled_1x1(kernel, stride, pads_begin, pads_end, dilation, groups))


# The dense kernel's tiles skip the padding rows' taps on output rows at least
# this wide.  Narrower rows split into tiles too small to reuse a weight
# vector: three 3x3 64->64 convs at batch 8, 1 thread, min of 2000 runs,
# skipping against not: 2x2 planes 0.087 against 0.082 ms, 3x3 0.184 against
# 0.163, 4x4 0.242 against 0.275.
ROW_TAPS_MIN_WIDTH = 4


def _full_tap_rows(Py_ssize_t h, Py_ssize_t h_out, Py_ssize_t kh, Py_ssize_t sh, Py_ssize_t dh, Py_ssize_t pt):
    """(rt, rb): the output rows [rt, rb) of a conv whose every tap row
    reads inside the input's h rows; the dense kernel's tiles in the other
    rows skip the taps that read only the zero padding (on a 4x4 plane, 3x3
    taps with padding 1: 120 of 144 pixel-taps run, not all 144; on 2x2: 24
    of 36).  (h_out, h_out) when no row reads all its taps."""
    full = [oh * sh - pt >= 0 and oh * sh - pt + (kh - 1) * dh < h for oh in range(h_out)]
    if not any(full):
        return h_out, h_out
    rt = full.index(True)
    rb = h_out - full[::-1].index(True)
    return rt, rb


def dense_scratch_floats(Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, tuple pads_begin, tuple pads_end,
                         tuple kernel=None, tuple stride=None, tuple dilation=(1, 1), Py_ssize_t groups=1,
                         int max_threads=1):
    """Floats of a blocked dense conv's input copy: the zero-padded input (at
    column stride 2 split by column parity: _phase_split), or for a strided
    1x1 conv (kernel and stride given) the subsampled input; 0 when it reads
    its input in place.  With at least as many images as max_threads > 1,
    one image per thread (dense_images_per_thread)."""
    if kernel is not None and stride is not None and _subsampled_1x1(kernel, stride, pads_begin, pads_end,
                                                                     dilation, groups):
        per = c * ((h - 1) // stride[0] + 1) * ((w - 1) // stride[1] + 1)
    elif kernel is not None and stride is not None and _phase_split(kernel, stride, pads_begin, pads_end, dilation,
                                                                    groups):
        per = c * (h + pads_begin[0] + pads_end[0]) * 2 * ((w + pads_begin[1] + pads_end[1] + 1) // 2)
    elif not any(pads_begin) and not any(pads_end):
        return 0
    else:
        per = c * (h + pads_begin[0] + pads_end[0]) * (w + pads_begin[1] + pads_end[1])
    if dense_images_per_thread(n, max_threads):
        return max(dense_copy_images(n, per), max_threads) * per
    return dense_copy_images(n, per) * per


# The dense conv's copy holds this many floats or one image, whichever is
# more, and the conv copies and computes that many images at a time.
DENSE_COPY_FLOATS = 1 << 18


def dense_images_per_thread(Py_ssize_t n, int max_threads):
    """Whether a blocked dense conv that copies its input gives each thread
    whole images (its own copy of one, then every item of that image), not
    every thread a share of each image's copy and items: with at least one
    image per thread.  Each thread then reads back only what it copied, from
    its own cache; shared, half of each image's copy was written by the
    other core.  RegNetX-400MF at batch 8, its grouped 3x3 stride 2 from
    112x112 (32 channels in groups of 16), 2 threads: run alone and
    repeated, 3.6-4.2 ms shared (1 thread: 4.0) against 2.0-2.5; in the
    model's run 2.66-3.04 against 2.65-2.78."""
    return max_threads > 1 and n >= max_threads


def dense_copy_images(Py_ssize_t n, Py_ssize_t per_image):
    """Images of n a blocked dense conv copies at a time, at `per_image`
    floats each (dense_scratch_floats)."""
    return max(1, min(n, DENSE_COPY_FLOATS // max(1, per_image)))


def pack_depthwise_weight(weight):
    """A [C, 1, K, K] float32 depthwise weight (K 3 or 5) as [C/8, K*K, 8]
    (compile-time use)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 4 or w.shape[1:] not in ((1, 3, 3), (1, 5, 5)):
        raise ValueError(f"pack_depthwise_weight: weight must be [C, 1, 3, 3] or [C, 1, 5, 5], got {w.shape}")
    cdef Py_ssize_t c = w.shape[0]
    cdef Py_ssize_t taps = w.shape[2] * w.shape[3]
    _check_blocked_channels("pack_depthwise_weight", "channels", c)
    out = np.empty(c * taps, np.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] ov = out
    with nogil:
        rlx_nchwc_dw_pack(&wv[0], c, taps, &ov[0])
    return out


def to_blocked(x):
    """[N, C, H, W] -> [N, C/8, H, W, 8] in numpy (tests and references)."""
    n, c = x.shape[:2]
    return np.ascontiguousarray(np.moveaxis(x.reshape(n, c // BLOCK, BLOCK, *x.shape[2:]), 2, -1))


def from_blocked(xb):
    """[N, C/8, H, W, 8] -> [N, C, H, W] in numpy."""
    n, cb = xb.shape[:2]
    return np.ascontiguousarray(np.moveaxis(xb, -1, 2).reshape(n, cb * BLOCK, *xb.shape[2:xb.ndim - 1]))


def panel_groups(Py_ssize_t panels, Py_ssize_t blocks, int max_threads):
    """Groups of output panels a blocked conv splits each of its `blocks`
    (image, pixel block) work units into: 1 when there are 4 units per
    thread, else about 8 items per thread in groups of equal panel counts
    (ceil(panels / groups) panels each, none empty), so that consecutive
    runs of items carry equal work: 10 panels of one 7x7 block at 2 threads
    make 10 groups of 1, not 8 groups of which 5 hold 2 panels (8 panels on
    one thread, 2 on the other).  On the AVX-512 level the panels count in
    pairs, which its tiles run together."""
    cdef Py_ssize_t want = 4 * max(1, max_threads)
    if blocks >= want:
        return 1
    # where the AVX-512 tiles run two panels at once, in units of two
    # (rlx_nchwc_per_group)
    cdef Py_ssize_t unit = 2 if rlx_simd_level() >= 2 else 1
    cdef Py_ssize_t units = (panels + unit - 1) // unit
    target = (2 * want + blocks - 1) // blocks
    per_group = max(1, units // target)
    return (units + per_group - 1) // per_group


def conv1x1_chunk(Py_ssize_t k, Py_ssize_t p, int max_threads=1, Py_ssize_t n=1):
    """Pixels per work item of a 1x1 conv with k input channels on planes of
    p pixels: the planes in equal chunks of about CHUNK_FLOATS / min(k, KC),
    their count over the n images rounded up to a multiple of max_threads
    where that leaves fewer than 16 per thread (13 chunks of 3136 pixels
    ran 7 on one thread and 6 on the other; 14 run 7 each)."""
    cdef Py_ssize_t kc = k if k < RLX_NCHWC_KC else RLX_NCHWC_KC
    cdef Py_ssize_t target = max(6, CHUNK_FLOATS // max(kc, 1))
    cdef Py_ssize_t nchunks = (p + target - 1) // target
    cdef Py_ssize_t t = max(1, max_threads) // math.gcd(max(1, n), max(1, max_threads))
    if t > 1 and nchunks % t and n * nchunks < 16 * max_threads and nchunks >= t:
        nchunks = min(p, (nchunks + t - 1) // t * t)
    return (p + nchunks - 1) // nchunks


cdef class NchwcReorderLaunch(Launch):
    """x [N, C, P] -> y [N, C/8, P, 8] (to_blocked) or back."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef Py_ssize_t items, p
    cdef int to_blocked

    def __init__(self, x, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t p, bint to_blocked):
        op = "nchwc_reorder"
        _check_blocked_channels(op, "channels", c)
        if n < 1 or p < 1:
            raise ValueError(f"{op}: need at least one image and one pixel, got n={n}, pixels={p}")
        self.x = x
        self.y = y
        _check_len(op, "x", self.x, n * c * p)
        _check_len(op, "y", self.y, n * c * p)
        self.items = n * (c // BLOCK)
        self.p = p
        self.to_blocked = to_blocked
        self.max_threads = 0

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t i
        if self.items * self.p * NC_B < 32768:
            t = 1
        for i in prange(self.items, num_threads=t, schedule='static'):
            work_note(1)
            rlx_nchwc_reorder(&self.x[0], self.x.shape[0], &self.y[0], self.y.shape[0], self.p,
                              self.to_blocked, i, i + 1)
        return 0


cdef class _BlockedConv(Launch):
    """What every blocked conv launch binds: x, the packed weight wq, the
    optional bias and residual, y, and the epilogue's activation."""
    cdef const float[::1] x
    cdef const float[::1] wq
    cdef const float[::1] bias
    cdef const float[::1] res
    cdef float[::1] y
    cdef bint has_bias, has_res
    cdef NcAct a

    def _bind(self, op, x, wq, bias, residual, y, act, float alpha, float beta, Py_ssize_t x_floats,
              Py_ssize_t y_floats, Py_ssize_t w_floats, Py_ssize_t m):
        """Bind the operands, checking each length (the residual has y's)."""
        self.a.act = _act_code(op, act)
        self.a.alpha = alpha
        self.a.beta = beta
        self.x = x
        self.wq = wq
        self.y = y
        self.has_bias = bias is not None
        self.has_res = residual is not None
        self.bias = or_placeholder(bias, np.float32)
        self.res = or_placeholder(residual, np.float32)
        _check_len(op, "x", self.x, x_floats)
        _check_len(op, "y", self.y, y_floats)
        _check_len(op, "packed weight", self.wq, w_floats)
        if self.has_bias:
            _check_len(op, "bias", self.bias, m)
        if self.has_res:
            _check_len(op, "residual", self.res, y_floats)

    cdef void _dense_items(self, const float* src, Py_ssize_t src_len, const Py_ssize_t* koff,
                           const NcDenseGeom* g, Py_ssize_t items, Py_ssize_t yoff, int t) noexcept nogil:
        """Work items [0, items) of the dense kernel over x (or its copy at
        src) in `t` equal runs, one per thread, writing y (and reading the
        residual) from float `yoff` on: item 0's image is the one there."""
        cdef Py_ssize_t r, lo, hi
        cdef Py_ssize_t runs = t if t < items else items
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = items * r // runs
            hi = items * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_dense_run(src, src_len, &self.wq[0], self.wq.shape[0],
                                &self.bias[0] if self.has_bias else NULL,
                                &self.res[yoff] if self.has_res else NULL, self.res.shape[0] - yoff,
                                &self.y[yoff], self.y.shape[0] - yoff, koff, g, &self.a, lo, hi)


def conv1x1_norm_scratch_floats(Py_ssize_t n, Py_ssize_t k, Py_ssize_t p, int max_threads=1):
    """Floats of the scratch a 1x1 conv with a norm prologue
    (NchwcConv1x1Launch's norm) needs: one normed pixel chunk of all k
    input channels per thread."""
    return max(1, max_threads) * k * conv1x1_chunk(k, p, max_threads, n)


cdef class NchwcConv1x1Launch(_BlockedConv):
    """y = act(W . x + bias + residual) on blocked x [N, K/8, P, 8] and y,
    residual [N, M/8, P, 8]; `wq` from pack_1x1_weight.

    With norm = (scale, shift, relu): the conv reads act(x * scale + shift)
    (an inference batch norm, scale and shift [K], relu or none) computed
    chunk by chunk into `scratch` (conv1x1_norm_scratch_floats floats), the
    same bits as the norm's own kernel (ChannelBinaryLaunch's affine ops)
    followed by this conv."""
    cdef Nc1x1Geom g
    cdef Py_ssize_t items
    cdef Py_ssize_t[::1] koff
    cdef const float[::1] nk
    cdef const float[::1] nb
    cdef float[::1] scratch
    cdef Py_ssize_t[::1] skoff
    cdef bint has_norm
    cdef int norm_relu
    cdef Py_ssize_t per_run

    def __init__(self, x, wq, bias, residual, y, Py_ssize_t n, Py_ssize_t k, Py_ssize_t m, Py_ssize_t p,
                 act=None, float alpha=0.0, float beta=0.0, int max_threads=1, norm=None, scratch=None):
        op = "conv2d_nchwc 1x1"
        _check_blocked_channels(op, "input channels", k)
        _check_blocked_channels(op, "output channels", m)
        if n < 1 or p < 1:
            raise ValueError(f"{op}: need at least one image and one pixel, got n={n}, pixels={p}")
        self._bind(op, x, wq, bias, residual, y, act, alpha, beta, n * k * p, n * m * p,
                   rlx_nchwc_1x1_packed_floats(m, k), m)
        self.max_threads = max(1, max_threads)
        self.g.n, self.g.k, self.g.m, self.g.p = n, k, m, p
        self.g.chunk = conv1x1_chunk(k, p, self.max_threads, n)
        nchunks = (p + self.g.chunk - 1) // self.g.chunk
        panels = (m + 15) // 16
        # enough items for every thread: split the output panels when the
        # images and chunks alone give fewer than 4 per thread
        self.g.groups = panel_groups(panels, n * nchunks, self.max_threads)
        self.items = rlx_nchwc_1x1_items(&self.g)
        self.koff = np.arange(k // NC_B, dtype=np.intp) * (p * NC_B)
        self.has_norm = norm is not None
        self.nk = or_placeholder(None, np.float32)
        self.nb = or_placeholder(None, np.float32)
        self.scratch = or_placeholder(None, np.float32)
        self.skoff = self.koff
        self.per_run = 0
        if self.has_norm:
            if not isinstance(norm, tuple) or len(norm) != 3:
                raise TypeError(f"{op}: norm must be (scale, shift, relu), got {type(norm).__name__}")
            self.nk, self.nb = norm[0], norm[1]
            self.norm_relu = bool(norm[2])
            _check_len(op, "norm scale", self.nk, k)
            _check_len(op, "norm shift", self.nb, k)
            if scratch is None:
                raise ValueError(f"{op}: a norm prologue needs scratch "
                                 f"({conv1x1_norm_scratch_floats(n, k, p, self.max_threads)} floats), got None")
            self.scratch = scratch
            _check_len(op, "scratch", self.scratch, conv1x1_norm_scratch_floats(n, k, p, self.max_threads))
            self.per_run = k * self.g.chunk
            self.skoff = np.arange(k // NC_B, dtype=np.intp) * (self.g.chunk * NC_B)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t i, lo, hi, r
        cdef Py_ssize_t runs = t if t < self.items else self.items
        # with a norm, run r (one per thread) normalises its chunks into its
        # own part of scratch
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.items * r // runs
            hi = self.items * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_1x1_run_norm(&self.x[0], self.x.shape[0], &self.wq[0], self.wq.shape[0],
                                   &self.bias[0] if self.has_bias else NULL,
                                   &self.res[0] if self.has_res else NULL, self.res.shape[0],
                                   &self.y[0], self.y.shape[0], &self.koff[0], &self.g, &self.a,
                                   &self.nk[0] if self.has_norm else NULL, &self.nb[0] if self.has_norm else NULL,
                                   self.norm_relu, &self.scratch[r * self.per_run] if self.has_norm else NULL,
                                   self.per_run, &self.skoff[0], lo, hi)
        return 0


cdef class NchwcDepthwiseLaunch(_BlockedConv):
    """y = act(depthwise KxK(x) + bias + residual) on blocked x [N, C/8, H, W, 8]
    and y, residual [N, C/8, H_out, W_out, 8]; K (`kernel`) 3 or 5, stride 1
    or 2, padding 0 to K // 2 per side (the same on both sides); `wt` from
    pack_depthwise_weight."""
    cdef NcDwGeom g
    cdef Py_ssize_t rows

    def __init__(self, x, wt, bias, residual, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w,
                 Py_ssize_t stride, Py_ssize_t pad_h, Py_ssize_t pad_w, act=None, float alpha=0.0,
                 float beta=0.0, int max_threads=1, Py_ssize_t kernel=3):
        op = "conv2d_nchwc depthwise"
        _check_blocked_channels(op, "channels", c)
        if kernel not in (3, 5):
            raise ValueError(f"{op}: needs a 3x3 or 5x5 kernel, got {kernel}x{kernel}")
        if stride not in (1, 2) or not 0 <= pad_h <= kernel // 2 or not 0 <= pad_w <= kernel // 2:
            raise ValueError(f"{op}: needs stride 1 or 2 and padding 0 to {kernel // 2} for a {kernel}x{kernel} "
                             f"kernel, got stride={stride}, padding=({pad_h}, {pad_w})")
        h_out = (h + 2 * pad_h - kernel) // stride + 1
        w_out = (w + 2 * pad_w - kernel) // stride + 1
        if n < 1 or h_out < 1 or w_out < 1:
            raise ValueError(f"{op}: empty output for n={n}, input {h}x{w}, {kernel}x{kernel} kernel, "
                             f"stride {stride}, padding ({pad_h}, {pad_w})")
        self._bind(op, x, wt, bias, residual, y, act, alpha, beta, n * c * h * w, n * c * h_out * w_out,
                   c * kernel * kernel, c)
        self.g.cb, self.g.h, self.g.w, self.g.h_out, self.g.w_out = c // BLOCK, h, w, h_out, w_out
        self.g.s, self.g.ph, self.g.pw, self.g.k = stride, pad_h, pad_w, kernel
        self.g.pairs16 = rlx_nchwc_dw16_on(&self.g)
        self.rows = rlx_nchwc_dw_items(&self.g, n)
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi
        cdef Py_ssize_t runs = t if t < self.rows else self.rows
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.rows * r // runs
            hi = self.rows * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_dw_rows(&self.x[0], self.x.shape[0], &self.wq[0],
                              &self.bias[0] if self.has_bias else NULL,
                              &self.res[0] if self.has_res else NULL, self.res.shape[0],
                              &self.y[0], self.y.shape[0], &self.g, &self.a, lo, hi)
        return 0


STEM_MAX_TAPS = RLX_NCHWC_STEM_MAX_K


def stem_scratch_floats(Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, tuple pads_begin, tuple pads_end,
                        Py_ssize_t sw=1, bint nchw_out=False):
    """Floats of the stem's zero-padded NCHW input copy (0 without padding);
    with nchw_out, of the copy split into sw column phases that the NCHW
    output mode reads (0 without padding at column stride 1: it reads x in
    place)."""
    hp, wp = h + pads_begin[0] + pads_end[0], w + pads_begin[1] + pads_end[1]
    if nchw_out:
        if sw == 1 and not any(pads_begin) and not any(pads_end):
            return 0
        return n * c * hp * sw * ((wp + sw - 1) // sw)
    if not any(pads_begin) and not any(pads_end):
        return 0
    return n * c * hp * wp


cdef class NchwcStemLaunch(_BlockedConv):
    """y = act(conv(x, W) + bias): a dense conv (groups 1) from NCHW x
    [N, C, H, W] to blocked y [N, M/8, H_out, W_out, 8], for few input
    channels (the network's stem; C*kh*kw at most STEM_MAX_TAPS); `wq` from
    pack_1x1_weight of W reshaped to [M, C*kh*kw].  With `scratch`
    (stem_scratch_floats floats) a padded conv first copies x with its zero
    padding and every tile reads in place; without, the tiles that touch the
    padding gather their inputs.  Either way each output is the same chain
    of fused multiply-adds.

    With nchw_out, y is NCHW [N, M, H_out, W_out] (the same values as the
    blocked y reordered, bit for bit), and `scratch` holds the padded input
    split into column phases (stem_scratch_floats with sw and nchw_out;
    required unless that is 0: stride 1 along w without padding reads x in
    place)."""
    cdef Py_ssize_t[::1] koff
    cdef NcStemGeom g
    cdef Py_ssize_t rows
    cdef float[::1] xp
    cdef bint padded, nchw_out
    cdef Py_ssize_t h_in, w_in, pt, pl, wqn, chunk, items, bands

    def __init__(self, x, wq, bias, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, Py_ssize_t m,
                 tuple kernel, tuple stride, tuple pads_begin, tuple pads_end, tuple dilation, act=None,
                 float alpha=0.0, float beta=0.0, int max_threads=1, scratch=None, bint nchw_out=False):
        op = "conv2d_nchwc stem"
        _check_blocked_channels(op, "output channels", m)
        h_out, w_out = _conv_out(op, n, h, w, kernel, stride, pads_begin, pads_end, dilation)
        kh, kw = kernel
        sh, sw = stride
        dh, dw = dilation
        if c < 1 or c * kh * kw > RLX_NCHWC_STEM_MAX_K:
            raise ValueError(f"{op}: needs 1..{RLX_NCHWC_STEM_MAX_K} taps (input channels x kernel), "
                             f"got {c} x {kh}x{kw}")
        self._bind(op, x, wq, bias, None, y, act, alpha, beta, n * c * h * w, n * m * h_out * w_out,
                   rlx_nchwc_1x1_packed_floats(m, c * kh * kw), m)
        need = stem_scratch_floats(n, c, h, w, pads_begin, pads_end, stride[1], nchw_out)
        self.nchw_out = nchw_out
        if nchw_out and need and scratch is None:
            raise ValueError(f"{op}: the NCHW output mode needs scratch ({need} floats), got None")
        self.padded = need > 0 and scratch is not None
        self.xp = or_placeholder(scratch if self.padded else None, np.float32)
        if self.padded:
            _check_len(op, "scratch", self.xp, need)
        self.h_in, self.w_in, self.pt, self.pl = h, w, pads_begin[0], pads_begin[1]
        self.g.c, self.g.h, self.g.w, self.g.m, self.g.h_out, self.g.w_out = c, h, w, m, h_out, w_out
        self.g.kh, self.g.kw, self.g.sh, self.g.sw = kh, kw, sh, sw
        self.g.ph, self.g.pw, self.g.dh, self.g.dw = pads_begin[0], pads_begin[1], dh, dw
        if self.padded:
            # the kernel sees the padded copy as an unpadded input
            self.g.h, self.g.w = h + pads_begin[0] + pads_end[0], w + pads_begin[1] + pads_end[1]
            self.g.ph, self.g.pw = 0, 0
        self.koff = np.empty(c * kh * kw, np.intp)
        if nchw_out:
            self.g.h, self.g.w = h + pads_begin[0] + pads_end[0], w + pads_begin[1] + pads_end[1]
            self.g.ph, self.g.pw = 0, 0
            self.wqn = rlx_stem_nchw_wq(&self.g)
            rlx_stem_nchw_offsets(&self.g, &self.koff[0])
        else:
            rlx_nchwc_stem_offsets(&self.g, &self.koff[0])
        self.rows = n * h_out
        # the NCHW output mode's work items: rows, long ones in chunks
        self.chunk = w_out if w_out <= RLX_STEM_NCHW_ROW else RLX_STEM_NCHW_CHUNK
        self.items = self.rows * ((w_out + self.chunk - 1) // self.chunk)
        self.max_threads = max(1, max_threads)
        # the NCHW output mode's padded copy: bands of rows per plane, so that
        # there are about 4 items per thread (batch 1: 3 planes)
        self.bands = max(1, min(self.g.h, (4 * self.max_threads + n * c - 1) // (n * c)))

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi, i
        cdef Py_ssize_t runs = t if t < self.rows else self.rows
        cdef const float* src = &self.x[0]
        cdef Py_ssize_t src_len = self.x.shape[0]
        cdef Py_ssize_t planes = self.rows // self.g.h_out * self.g.c
        if self.nchw_out:
            if self.padded:
                for i in prange(planes * self.bands, num_threads=t, schedule='static'):
                    work_note(1)
                    rlx_stem_nchw_copy(&self.x[0], self.x.shape[0], &self.xp[0], self.xp.shape[0], self.h_in,
                                       self.w_in, self.g.h, self.g.sw, self.wqn, self.pt, self.pl, self.bands, i,
                                       i + 1)
                src = &self.xp[0]
                src_len = self.xp.shape[0]
            runs = t if t < self.items else self.items
            for r in prange(runs, num_threads=t, schedule='static'):
                lo = self.items * r // runs
                hi = self.items * (r + 1) // runs
                work_note(hi - lo)
                rlx_stem_nchw_rows(src, src_len, &self.wq[0], self.wq.shape[0],
                                   &self.bias[0] if self.has_bias else NULL, &self.y[0], self.y.shape[0],
                                   &self.koff[0], &self.g, &self.a, self.chunk, lo, hi)
            return 0
        cdef Py_ssize_t n = self.rows // self.g.h_out, img
        if self.padded and n > 1 and n % t == 0:
            # whole images per thread, each padded and then computed while its
            # copy is in this core's cache, with one parallel region, not two
            # (the dense conv's dense_images_per_thread): a 3->32 3x3 s2 stem
            # on 8 x 224x224, 2 threads, 1.07 -> 1.03 ms; 1 thread unchanged
            for r in prange(t, num_threads=t, schedule='static'):
                for img in range(n * r // t, n * (r + 1) // t):
                    work_note(1)
                    rlx_nchwc_stem_pad(&self.x[0], self.x.shape[0], &self.xp[0], self.xp.shape[0], self.h_in,
                                       self.w_in, self.g.h, self.g.w, self.pt, self.pl, img * self.g.c,
                                       (img + 1) * self.g.c)
                    rlx_nchwc_stem_rows(&self.xp[0], self.xp.shape[0], &self.wq[0], self.wq.shape[0],
                                        &self.bias[0] if self.has_bias else NULL, &self.y[0], self.y.shape[0],
                                        &self.koff[0], &self.g, &self.a, img * self.g.h_out,
                                        (img + 1) * self.g.h_out)
            return 0
        if self.padded:
            for i in prange(planes, num_threads=t, schedule='static'):
                work_note(1)
                rlx_nchwc_stem_pad(&self.x[0], self.x.shape[0], &self.xp[0], self.xp.shape[0], self.h_in,
                                   self.w_in, self.g.h, self.g.w, self.pt, self.pl, i, i + 1)
            src = &self.xp[0]
            src_len = self.xp.shape[0]
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.rows * r // runs
            hi = self.rows * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_stem_rows(src, src_len, &self.wq[0], self.wq.shape[0],
                                &self.bias[0] if self.has_bias else NULL, &self.y[0], self.y.shape[0],
                                &self.koff[0], &self.g, &self.a, lo, hi)
        return 0


cdef class NchwcDenseLaunch(_BlockedConv):
    """y = act(conv(x, W) + bias + residual) in `groups` conv groups (C/G
    and M/G multiples of 8) on blocked x [N, C/8, H, W, 8], y and residual
    [N, M/8, H_out, W_out, 8]; `wq` from pack_dense_weight, `scratch`
    dense_scratch_floats floats (None when that is 0).  A strided 1x1 conv
    without padding copies its input subsampled into `scratch` and runs the
    1x1 kernel on it (the same bits as the direct loop over its one tap); a
    conv at column stride 2 copies it padded and split by column parity
    (_phase_split) and runs at column stride 1 on the copy.  The copy holds
    dense_copy_images images at a time: each group is copied, then
    computed; with at least one image per thread (dense_images_per_thread)
    each thread copies and computes its own run of whole images instead."""
    cdef float[::1] xp
    cdef bint padded, subsampled, phased
    cdef Py_ssize_t[::1] koff
    cdef NcDenseGeom g
    cdef Nc1x1Geom g1
    cdef Py_ssize_t items, half_w, copy_images, per_copy
    cdef bint per_thread

    def __init__(self, x, wq, bias, residual, y, scratch, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h,
                 Py_ssize_t w, Py_ssize_t m, tuple kernel, tuple stride, tuple pads_begin, tuple pads_end,
                 tuple dilation, act=None, float alpha=0.0, float beta=0.0, int max_threads=1,
                 Py_ssize_t groups=1):
        op = "conv2d_nchwc dense"
        if groups < 1 or c % groups or m % groups:
            raise ValueError(f"{op}: {c} input and {m} output channels do not split into {groups} groups")
        _check_blocked_channels(op, "input channels per group", c // groups)
        _check_blocked_channels(op, "output channels per group", m // groups)
        h_out, w_out = _conv_out(op, n, h, w, kernel, stride, pads_begin, pads_end, dilation)
        kh, kw = kernel
        sh, sw = stride
        dh, dw = dilation
        self._bind(op, x, wq, bias, residual, y, act, alpha, beta, n * c * h * w, n * m * h_out * w_out,
                   groups * rlx_nchwc_1x1_packed_floats(m // groups, c // groups * kh * kw), m)
        self.subsampled = _subsampled_1x1(kernel, stride, pads_begin, pads_end, dilation, groups)
        self.phased = _phase_split(kernel, stride, pads_begin, pads_end, dilation, groups)
        need = dense_scratch_floats(n, c, h, w, pads_begin, pads_end, kernel, stride, dilation, groups,
                                    max(1, max_threads))
        self.padded = need > 0 and not self.subsampled
        self.xp = or_placeholder(scratch, np.float32) if need > 0 else or_placeholder(None, np.float32)
        if need > 0:
            _check_len(op, "scratch", self.xp, need)
        hp = h + pads_begin[0] + pads_end[0] if self.padded else h
        wp = w + pads_begin[1] + pads_end[1] if self.padded else w
        cb = np.arange(c // NC_B, dtype=np.intp)[:, None, None]
        ii = np.arange(kh, dtype=np.intp)[None, :, None]
        jj = np.arange(kw, dtype=np.intp)[None, None, :]
        if self.phased:
            # rows of 2 * half_w slots, column parity halves: the kernel sees
            # column stride 1, tap column j at (j & 1) * half_w + (j >> 1)
            self.half_w = (wp + 1) // 2
            wp = 2 * self.half_w
            self.koff = np.ascontiguousarray((cb * hp * wp + ii * dh * wp + (jj & 1) * self.half_w + (jj >> 1)) * NC_B,
                                             dtype=np.intp).reshape(-1)
            sw = 1
        else:
            self.koff = np.ascontiguousarray((cb * hp * wp + ii * dh * wp + jj * dw) * NC_B,
                                             dtype=np.intp).reshape(-1)
        self.g.n, self.g.c, self.g.h, self.g.w, self.g.m = n, c, h, w, m
        self.g.h_out, self.g.w_out, self.g.sh, self.g.sw = h_out, w_out, sh, sw
        self.g.pt, self.g.pl, self.g.hp, self.g.wp = pads_begin[0], pads_begin[1], hp, wp
        self.g.nkb = (c // groups // NC_B) * kh * kw
        self.g.cgroups = groups
        if self.padded and kh > 1 and w_out >= ROW_TAPS_MIN_WIDTH:
            self.g.rt, self.g.rb = _full_tap_rows(h, h_out, kh, sh, dh, pads_begin[0])
            if self.g.rt > 0 or self.g.rb < h_out:
                self.g.tap_rows, self.g.tap_cols, self.g.dh = kh, kw, dh
        self.max_threads = max(1, max_threads)
        # pixel blocks of dense_item_pixels, so a K block of a weight panel
        # serves many tiles from L1; then enough items for every thread (the
        # output panels split when too few)
        panels = groups * ((m // groups + 15) // 16)
        plane = h_out * w_out
        self.g.pixels = dense_item_pixels(plane, w_out, sw)
        nblk = (plane + self.g.pixels - 1) // self.g.pixels
        blocks = n * nblk
        self.g.groups = panel_groups(panels, blocks, self.max_threads)
        self.items = blocks * self.g.groups
        if self.subsampled:
            # the 1x1 kernel on the subsampled copy: each output is the same
            # chain of fused multiply-adds over the input channels
            self.g1.n, self.g1.k, self.g1.m, self.g1.p = n, c, m, plane
            self.g1.chunk = conv1x1_chunk(c, plane, self.max_threads, n)
            nchunks = (plane + self.g1.chunk - 1) // self.g1.chunk
            self.g1.groups = panel_groups((m + 15) // 16, n * nchunks, self.max_threads)
            self.items = rlx_nchwc_1x1_items(&self.g1)
            self.koff = np.arange(c // NC_B, dtype=np.intp) * (plane * NC_B)
        self.per_copy = dense_scratch_floats(1, c, h, w, pads_begin, pads_end, kernel, stride, dilation, groups)
        self.copy_images = dense_copy_images(n, self.per_copy)
        self.per_thread = need > 0 and dense_images_per_thread(n, self.max_threads)

    cdef void _copy(self, Py_ssize_t xo, float* dst, Py_ssize_t dlen, Py_ssize_t i0,
                    Py_ssize_t i1) noexcept nogil:
        """Blocks [i0, i1) (image-major) of x from float xo on into dst, as
        the items read them: subsampled (a strided 1x1), split by column
        parity (column stride 2) or zero-padded."""
        if self.subsampled:
            rlx_nchwc_subsample(&self.x[xo], self.x.shape[0] - xo, dst, dlen, self.g.h, self.g.w, self.g.h_out,
                                self.g.w_out, self.g.sh, self.g.sw, i0, i1)
        elif self.phased:
            rlx_nchwc_pad_phase2(&self.x[xo], self.x.shape[0] - xo, dst, dlen, self.g.h, self.g.w, self.g.hp,
                                 self.half_w, self.g.pt, self.g.pl, i0, i1)
        else:
            rlx_nchwc_pad(&self.x[xo], self.x.shape[0] - xo, dst, dlen, &self.g, i0, i1)

    cdef void _images_alone(self, Py_ssize_t r, Py_ssize_t count) noexcept nogil:
        """Images [r * count, (r + 1) * count), one at a time: its copy in
        the r-th image slot of the scratch, then all its items (the same
        items, copy and operations as the shared path)."""
        cdef Py_ssize_t cb = self.g.c // NC_B
        cdef Py_ssize_t per_img = self.items // self.g.n
        cdef Py_ssize_t x_img = self.g.c * self.g.h * self.g.w
        cdef Py_ssize_t y_img = self.g.m * self.g.h_out * self.g.w_out
        cdef Py_ssize_t so = r * self.per_copy
        cdef Py_ssize_t slen = self.per_copy
        cdef Py_ssize_t img, xo, yo
        for img in range(r * count, (r + 1) * count):
            xo = img * x_img
            yo = img * y_img
            work_note(cb + per_img)
            self._copy(xo, &self.xp[so], slen, 0, cb)
            if self.subsampled:
                rlx_nchwc_1x1_run(&self.xp[so], slen, &self.wq[0], self.wq.shape[0],
                                  &self.bias[0] if self.has_bias else NULL,
                                  &self.res[yo] if self.has_res else NULL, self.res.shape[0] - yo,
                                  &self.y[yo], self.y.shape[0] - yo, &self.koff[0], &self.g1, &self.a, 0, per_img)
                continue
            rlx_nchwc_dense_run(&self.xp[so], slen, &self.wq[0], self.wq.shape[0],
                                &self.bias[0] if self.has_bias else NULL,
                                &self.res[yo] if self.has_res else NULL, self.res.shape[0] - yo,
                                &self.y[yo], self.y.shape[0] - yo, &self.koff[0], &self.g, &self.a, 0, per_img)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi, i, n0, n1, k, items, runs, xo, yo
        cdef Py_ssize_t cb = self.g.c // NC_B
        cdef Py_ssize_t per_img = self.items // self.g.n
        cdef Py_ssize_t x_img = self.g.c * self.g.h * self.g.w
        cdef Py_ssize_t y_img = self.g.m * self.g.h_out * self.g.w_out
        if not (self.subsampled or self.phased or self.padded):
            self._dense_items(&self.x[0], self.x.shape[0], &self.koff[0], &self.g, self.items, 0, t)
            return 0
        n0 = 0
        if self.per_thread and t > 1:
            # whole images per thread, each copied into the thread's own part
            # of the scratch and then computed; the images left over after
            # equal runs go on below
            n0 = self.g.n // t * t
            for r in prange(t, num_threads=t, schedule='static'):
                self._images_alone(r, n0 // t)
        # images [n0, n1) at a time: their copy at the start of the scratch,
        # then the items that read it, while it is in cache
        while n0 < self.g.n:
            n1 = n0 + self.copy_images if n0 + self.copy_images < self.g.n else self.g.n
            k = n1 - n0
            xo = n0 * x_img
            yo = n0 * y_img
            items = k * per_img
            for i in prange(k * cb, num_threads=t, schedule='static'):
                work_note(1)
                self._copy(xo, &self.xp[0], self.xp.shape[0], i, i + 1)
            if self.subsampled:
                runs = t if t < items else items
                for r in prange(runs, num_threads=t, schedule='static'):
                    lo = items * r // runs
                    hi = items * (r + 1) // runs
                    work_note(hi - lo)
                    rlx_nchwc_1x1_run(&self.xp[0], self.xp.shape[0], &self.wq[0], self.wq.shape[0],
                                      &self.bias[0] if self.has_bias else NULL,
                                      &self.res[yo] if self.has_res else NULL, self.res.shape[0] - yo,
                                      &self.y[yo], self.y.shape[0] - yo, &self.koff[0], &self.g1, &self.a, lo, hi)
            else:
                self._dense_items(&self.xp[0], self.xp.shape[0], &self.koff[0], &self.g, items, yo, t)
            n0 = n1
        return 0


def dense3d_scratch_floats(Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h, Py_ssize_t w, tuple pads_begin,
                           tuple pads_end):
    """Floats of a blocked 3-D dense conv's zero-padded input copy (0 when it
    reads its input in place)."""
    if not any(pads_begin) and not any(pads_end):
        return 0
    return n * c * (d + pads_begin[0] + pads_end[0]) * (h + pads_begin[1] + pads_end[1]) * \
        (w + pads_begin[2] + pads_end[2])


cdef class NchwcDense3dLaunch(_BlockedConv):
    """y = act(conv3d(x, W) + bias + residual) in `groups` conv groups (C/G
    and M/G multiples of 8) on blocked x [N, C/8, D, H, W, 8] and y, residual
    [N, M/8, Do, Ho, Wo, 8], any kernel, stride, padding and dilation: the
    2-D dense kernel over the output volume's Do*Ho*Wo pixels, its tap
    blocks (cb, kd, kh, kw) reading a zero-padded copy of x (`scratch`,
    dense3d_scratch_floats floats, with padding).  `wq` from pack_dense_weight
    of W [M, C/G, kd, kh, kw] reshaped to [M, C/G, kd*kh, kw]."""
    cdef float[::1] xp
    cdef bint padded
    cdef Py_ssize_t[::1] koff
    cdef NcDenseGeom g
    cdef Py_ssize_t items, d, dp, pf

    def __init__(self, x, wq, bias, residual, y, scratch, Py_ssize_t n, Py_ssize_t c, Py_ssize_t d, Py_ssize_t h,
                 Py_ssize_t w, Py_ssize_t m, tuple kernel, tuple stride, tuple pads_begin, tuple pads_end,
                 tuple dilation, act=None, float alpha=0.0, float beta=0.0, int max_threads=1,
                 Py_ssize_t groups=1):
        op = "conv3d_nchwc dense"
        if not (len(kernel) == len(stride) == len(pads_begin) == len(pads_end) == len(dilation) == 3):
            raise ValueError(f"{op}: kernel, stride, padding and dilation need three values each, got {kernel}, "
                             f"{stride}, {pads_begin}+{pads_end}, {dilation}")
        if groups < 1 or c % groups or m % groups:
            raise ValueError(f"{op}: {c} input and {m} output channels do not split into {groups} groups")
        _check_blocked_channels(op, "input channels per group", c // groups)
        _check_blocked_channels(op, "output channels per group", m // groups)
        kd, sd, dd = kernel[0], stride[0], dilation[0]
        if min(kd, sd, dd) < 1 or pads_begin[0] < 0 or pads_end[0] < 0:
            raise ValueError(f"{op}: kernel, stride and dilation must be >= 1 and padding >= 0, got kernel={kernel}, "
                             f"stride={stride}, dilation={dilation}, padding={pads_begin}+{pads_end}")
        d_out = (d + pads_begin[0] + pads_end[0] - dd * (kd - 1) - 1) // sd + 1
        h_out, w_out = _conv_out(op, n, h, w, kernel[1:], stride[1:], pads_begin[1:], pads_end[1:], dilation[1:])
        if d < 1 or d_out < 1:
            raise ValueError(f"{op}: empty output for input depth {d}, kernel {kernel}, stride {stride}")
        kh, kw = kernel[1], kernel[2]
        self._bind(op, x, wq, bias, residual, y, act, alpha, beta, n * c * d * h * w, n * m * d_out * h_out * w_out,
                   groups * rlx_nchwc_1x1_packed_floats(m // groups, c // groups * kd * kh * kw), m)
        need = dense3d_scratch_floats(n, c, d, h, w, pads_begin, pads_end)
        self.padded = need > 0
        self.xp = or_placeholder(scratch if self.padded else None, np.float32)
        if self.padded:
            if scratch is None:
                raise ValueError(f"{op}: needs a scratch of {need} floats for its padding")
            _check_len(op, "scratch", self.xp, need)
        dp = d + pads_begin[0] + pads_end[0]
        hp = h + pads_begin[1] + pads_end[1]
        wp = w + pads_begin[2] + pads_end[2]
        self.d, self.dp, self.pf = d, dp, pads_begin[0]
        self.g.n, self.g.c, self.g.h, self.g.w, self.g.m = n, c, h, w, m
        self.g.h_out, self.g.w_out, self.g.sh, self.g.sw = h_out, w_out, stride[1], stride[2]
        self.g.pt, self.g.pl, self.g.hp, self.g.wp = pads_begin[1], pads_begin[2], dp * hp, wp
        self.g.d_out, self.g.sd, self.g.hs = d_out, sd, hp
        self.g.nkb = (c // groups // NC_B) * kd * kh * kw
        self.g.cgroups = groups
        cb = np.arange(c // NC_B, dtype=np.intp)[:, None, None, None]
        aa = np.arange(kd, dtype=np.intp)[None, :, None, None]
        ii = np.arange(kh, dtype=np.intp)[None, None, :, None]
        jj = np.arange(kw, dtype=np.intp)[None, None, None, :]
        self.koff = np.ascontiguousarray(((cb * dp * hp + aa * dd * hp + ii * dilation[1]) * wp + jj * dilation[2])
                                         * NC_B, dtype=np.intp).reshape(-1)
        self.max_threads = max(1, max_threads)
        panels = groups * ((m // groups + 15) // 16)
        vol = d_out * h_out * w_out
        nblk = (vol + DENSE_ITEM_PIXELS - 1) // DENSE_ITEM_PIXELS
        self.g.pixels = (vol + nblk - 1) // nblk
        self.g.groups = panel_groups(panels, n * nblk, self.max_threads)
        self.items = n * nblk * self.g.groups

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t i
        cdef Py_ssize_t blocks = self.g.n * (self.g.c // NC_B)
        cdef const float* src = &self.x[0]
        cdef Py_ssize_t src_len = self.x.shape[0]
        if self.padded:
            for i in prange(blocks, num_threads=t, schedule='static'):
                work_note(1)
                rlx_nchwc_pad3d(&self.x[0], self.x.shape[0], &self.xp[0], self.xp.shape[0], self.d, self.g.h,
                                self.g.w, self.dp, self.g.hs, self.g.wp, self.pf, self.g.pt, self.g.pl, i, i + 1)
            src = &self.xp[0]
            src_len = self.xp.shape[0]
        self._dense_items(src, src_len, &self.koff[0], &self.g, self.items, 0, t)
        return 0


# A transposed conv on the blocked layout runs by output phases, at most this
# many (the product of its strides).
TRANSPOSED_MAX_PHASES = 16


def _transposed_axes(tuple in_sp, tuple out_sp, tuple kernel, tuple stride, tuple pads_begin):
    """Per spatial axis of a transposed conv (groups 1, dilation 1): its
    phases [(a, taps, first, count, start)] and the zero padding (lo, hi) of
    the input copy they read; None when a phase would have no tap or no
    output pixel.  Phase a's outputs are a + s*i (i < count); its forward
    tap t (< taps) is kernel index first + s*(taps - 1 - t) and reads input
    index start + i + t (before padding)."""
    axes = []
    for n_in, n_out, k, s, p in zip(in_sp, out_sp, kernel, stride, pads_begin):
        if s < 1 or k < 1 or p < 0:
            return None
        ax = []
        for a in range(s):
            r = (a + p) % s
            taps = (k - r + s - 1) // s if r < k else 0
            m = (n_out - a + s - 1) // s if a < n_out else 0
            if taps < 1 or m < 1:
                return None
            ax.append((a, taps, r, m, (a + p - r) // s - taps + 1))
        lo = max(0, max(-st for _, _, _, _, st in ax))
        hi = max(0, max(st + m + taps - 2 for _, taps, _, m, st in ax) - (n_in - 1))
        axes.append((ax, lo, hi))
    return axes


def _transposed_geometry(op, tuple in_sp, tuple out_sp, tuple kernel, tuple stride, tuple pads_begin):
    """A 2-D or 3-D transposed conv's geometry as 3-D (a 2-D one of depth 1):
    (in_sp, out_sp, kernel, stride, pads_begin, axes) with axes from
    _transposed_axes.  Raises ValueError naming `op` when the phase plan
    does not take it."""
    nd = len(in_sp)
    if nd not in (2, 3) or not (len(out_sp) == len(kernel) == len(stride) == len(pads_begin) == nd):
        raise ValueError(f"{op}: input and output sizes, kernel, stride and pads_begin need two or three values "
                         f"each, got {in_sp}, {out_sp}, {kernel}, {stride}, {pads_begin}")
    if nd == 2:
        in_sp, out_sp, kernel = (1,) + in_sp, (1,) + out_sp, (1,) + kernel
        stride, pads_begin = (1,) + stride, (0,) + pads_begin
    axes = _transposed_axes(in_sp, out_sp, kernel, stride, pads_begin)
    if axes is None:
        raise ValueError(f"{op}: kernel {kernel[3 - nd:]} at stride {stride[3 - nd:]} from "
                         f"{'x'.join(map(str, in_sp[3 - nd:]))} to {'x'.join(map(str, out_sp[3 - nd:]))} has an "
                         f"output phase without taps or pixels")
    return in_sp, out_sp, kernel, stride, pads_begin, axes


def _phases(axes):
    """Every output phase of _transposed_axes' 3 axes, depth outermost: a
    tuple of its three axes' (a, taps, first, count, start)."""
    return [(pd, ph, pw) for pd in axes[0][0] for ph in axes[1][0] for pw in axes[2][0]]


def transposed_phase_plan(Py_ssize_t h, Py_ssize_t w, Py_ssize_t ho, Py_ssize_t wo, tuple kernel, tuple stride,
                          tuple pads_begin):
    """How a 2-D transposed conv (groups 1, dilation 1) from h x w to ho x wo
    splits into stride-1 dense convs, one per output phase; None when a phase
    would have no tap or no output pixel (a kernel smaller than its stride,
    or an output smaller than it).  (A 3-D one splits the same way on each
    axis: _transposed_axes.)

    Returns (pads, phases).  pads = (top, bottom, left, right): the zero
    padding of the input copy every phase reads.  Per phase (a, b, taps_h,
    taps_w, first_h, first_w, rows, cols, start_h, start_w): its outputs are
    y[a + sh*i, b + sw*j] (i < rows, j < cols); its forward tap t (< taps_h)
    is kernel row first_h + sh*(taps_h - 1 - t) and reads input row
    start_h + i + t (before padding); likewise along the columns."""
    axes = _transposed_axes((h, w), (ho, wo), kernel, stride, pads_begin)
    if axes is None:
        return None
    (ah, pt, pb), (aw, pl, pr) = axes
    return (pt, pb, pl, pr), [(a, b, th, tw, rh, rw, mh, mw, sth, stw)
                              for a, th, rh, mh, sth in ah for b, tw, rw, mw, stw in aw]


def pack_transposed_weight(weight, tuple in_sp, tuple out_sp, tuple stride, tuple pads_begin):
    """A [C, M, kh, kw] or [C, M, kd, kh, kw] float32 transposed-conv weight
    (groups 1) from spatial size in_sp to out_sp as the blocked dense
    kernel's packed weights of its output phases, one after another
    (_phases order; compile-time use)."""
    wt = np.ascontiguousarray(weight, dtype=np.float32)
    if wt.ndim not in (4, 5) or wt.ndim - 2 != len(in_sp):
        raise ValueError(f"pack_transposed_weight: weight must be [C, M, kh, kw] or [C, M, kd, kh, kw] for "
                         f"{len(in_sp)} spatial axes, got {wt.shape}")
    _, _, _, stride3, _, axes = _transposed_geometry("pack_transposed_weight", in_sp, out_sp, wt.shape[2:],
                                                      stride, pads_begin)
    if wt.ndim == 4:
        wt = wt[:, :, None]
    c, m = wt.shape[:2]
    parts = []
    for phase in _phases(axes):
        sub = wt
        for ax, (_, taps, first, _, _) in enumerate(phase):
            sub = np.take(sub, [first + stride3[ax] * (taps - 1 - t) for t in range(taps)], axis=2 + ax)
        td, th, tw = sub.shape[2:]
        parts.append(pack_dense_weight(sub.transpose(1, 0, 2, 3, 4).reshape(m, c, td * th, tw)))
    return np.concatenate(parts)


def transposed_scratch_floats(Py_ssize_t n, Py_ssize_t c, tuple in_sp, Py_ssize_t m, tuple out_sp, tuple kernel,
                              tuple stride, tuple pads_begin):
    """Floats of a blocked transposed conv's scratch: its zero-padded input
    copy (none without padding), then every phase's output."""
    in3, out3, _, _, _, axes = _transposed_geometry("transposed_scratch_floats", in_sp, out_sp, kernel, stride,
                                                    pads_begin)
    padded = [i + lo + hi for i, (_, lo, hi) in zip(in3, axes)]
    copy = n * c * padded[0] * padded[1] * padded[2] if any(lo or hi for _, lo, hi in axes) else 0
    return copy + n * m * out3[0] * out3[1] * out3[2]


cdef class NchwcConvTransposeLaunch(Launch):
    """y = conv_transpose2d/3d(x, W) + bias on blocked x [N, C/8, (D,) H, W,
    8] and y [N, M/8, (Do,) Ho, Wo, 8], groups 1, dilation 1, every output
    phase with a tap (_transposed_axes).  `scratch`
    (transposed_scratch_floats) holds the zero-padded input copy and each
    phase's output: the phases run the dense kernel (stride 1, the phase's
    taps flipped; a 3-D phase over its whole output volume, as the blocked
    conv3d) over all threads at once, then their outputs are copied to
    their strided places in y.  `wq` from pack_transposed_weight."""
    cdef const float[::1] x
    cdef const float[::1] wq
    cdef const float[::1] bias
    cdef float[::1] y
    cdef float[::1] sc
    cdef bint has_bias, padded
    cdef NcAct a
    cdef NcDenseGeom g[16]
    cdef Py_ssize_t woff[16]
    cdef Py_ssize_t zoff[16]
    cdef Py_ssize_t kstart[16]
    cdef Py_ssize_t istart[17]
    cdef Py_ssize_t pc[16]
    cdef Py_ssize_t pa[16]
    cdef Py_ssize_t pb[16]
    cdef Py_ssize_t[::1] koff
    cdef Py_ssize_t nph, sd, sh, sw, do, ho, wo, planes, blocks, zbase
    cdef Py_ssize_t d, h, w, dp, hp, wp, pf, pt, pl

    def __init__(self, x, wq, bias, y, scratch, Py_ssize_t n, Py_ssize_t c, tuple in_sp, Py_ssize_t m,
                 tuple out_sp, tuple kernel, tuple stride, tuple pads_begin, int max_threads=1):
        cdef NcDenseGeom* gi
        cdef Py_ssize_t i
        op = f"conv_transpose{len(in_sp)}d_nchwc"
        _check_blocked_channels(op, "input channels", c)
        _check_blocked_channels(op, "output channels", m)
        if n < 1 or min(in_sp, default=0) < 1 or min(out_sp, default=0) < 1:
            raise ValueError(f"{op}: need at least one image and pixel, got n={n}, input {in_sp}, output {out_sp}")
        if len(stride) == len(in_sp) and math.prod(stride) > TRANSPOSED_MAX_PHASES:
            raise ValueError(f"{op}: stride {stride} makes {math.prod(stride)} output phases, at most "
                             f"{TRANSPOSED_MAX_PHASES}")
        in3, out3, kernel3, stride3, _, axes = _transposed_geometry(op, in_sp, out_sp, kernel, stride, pads_begin)
        phases = _phases(axes)
        self.a.act = _act_code(op, None)
        self.a.alpha = 0
        self.a.beta = 0
        self.x, self.wq, self.y = x, wq, y
        self.has_bias = bias is not None
        self.bias = or_placeholder(bias, np.float32)
        self.sc = or_placeholder(scratch, np.float32)
        d, h, w = in3
        do, ho, wo = out3
        _check_len(op, "x", self.x, n * c * d * h * w)
        _check_len(op, "y", self.y, n * m * do * ho * wo)
        if self.has_bias:
            _check_len(op, "bias", self.bias, m)
        nw = sum(rlx_nchwc_1x1_packed_floats(m, c * pd[1] * ph[1] * pw[1]) for pd, ph, pw in phases)
        _check_len(op, "packed weight", self.wq, nw)
        need = transposed_scratch_floats(n, c, in_sp, m, out_sp, kernel, stride, pads_begin)
        if scratch is None:
            raise ValueError(f"{op}: needs a scratch of {need} floats")
        _check_len(op, "scratch", self.sc, need)
        (_, pf, pback), (_, pt, pbot), (_, pl, pr) = axes
        self.padded = bool(pf or pback or pt or pbot or pl or pr)
        dp, hp, wp = d + pf + pback, h + pt + pbot, w + pl + pr
        self.d, self.h, self.w, self.dp, self.hp, self.wp = d, h, w, dp, hp, wp
        self.pf, self.pt, self.pl = pf, pt, pl
        self.zbase = n * c * dp * hp * wp if self.padded else 0
        self.max_threads = max(1, max_threads)
        self.nph, self.sd, self.sh, self.sw = len(phases), stride3[0], stride3[1], stride3[2]
        self.do, self.ho, self.wo = do, ho, wo
        self.planes = n * (m // BLOCK)
        self.blocks = n * (c // BLOCK)
        panels = (m + 15) // 16
        # each phase a stride-1 conv on an md x mh x mw volume: its items as
        # the 2-D dense conv's, whole rows (1.02-1.11x against items of about
        # 64 pixels on ct1d 256->128 k16 s8, ct1d 512->256 and ct2d 64->32 k4
        # s2 from 28x28 at batch 1 and 8, 1 and 2 threads)
        pix, nblks = [], []
        for pd, ph, pw in phases:
            vol = pd[3] * ph[3] * pw[3]
            px = dense_item_pixels(vol, pw[3], 1)
            pix.append(px)
            nblks.append((vol + px - 1) // px)
        groups = panel_groups(panels, n * sum(nblks), self.max_threads)
        koff, woff, zoff, items = [], 0, self.zbase, 0
        cb = np.arange(c // NC_B, dtype=np.intp)[:, None, None, None]
        for i, ((ac, td, _, md, std), (aa, th, _, mh, sth), (ab, tw, _, mw, stw)) in enumerate(phases):
            gi = &self.g[i]
            gi.n, gi.c, gi.h, gi.w, gi.m = n, c, h, w, m
            gi.h_out, gi.w_out, gi.sh, gi.sw = mh, mw, 1, 1
            gi.pt, gi.pl, gi.hp, gi.wp = pt, pl, dp * hp, wp
            gi.d_out, gi.sd, gi.hs = md, 1, hp
            gi.nkb = (c // NC_B) * td * th * tw
            gi.cgroups = 1
            gi.pixels = pix[i]
            gi.groups = groups
            self.woff[i], self.zoff[i], self.kstart[i], self.istart[i] = woff, zoff, len(koff), items
            self.pc[i], self.pa[i], self.pb[i] = ac, aa, ab
            zz = np.arange(td, dtype=np.intp)[None, :, None, None]
            ii = np.arange(th, dtype=np.intp)[None, None, :, None]
            jj = np.arange(tw, dtype=np.intp)[None, None, None, :]
            koff.extend(((((cb * dp + pf + std + zz) * hp + pt + sth + ii) * wp + (pl + stw + jj)) * NC_B)
                        .reshape(-1).tolist())
            woff += rlx_nchwc_1x1_packed_floats(m, c * td * th * tw)
            zoff += n * m * md * mh * mw
            items += n * nblks[i] * groups
        self.istart[self.nph] = items
        self.koff = np.ascontiguousarray(koff, dtype=np.intp)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi, i, ph, a0, a1, k, zo, yo
        cdef Py_ssize_t total = self.istart[self.nph]
        cdef Py_ssize_t runs = t if t < total else total
        cdef const float* src = &self.x[0]
        cdef Py_ssize_t src_len = self.x.shape[0]
        cdef Py_ssize_t sc_len = self.sc.shape[0]
        cdef Py_ssize_t y_len = self.y.shape[0]
        cdef Py_ssize_t grid, plane = self.ho * self.wo * 8
        if self.padded:
            for i in prange(self.blocks, num_threads=t, schedule='static'):
                work_note(1)
                rlx_nchwc_pad3d(&self.x[0], self.x.shape[0], &self.sc[0], sc_len, self.d, self.h, self.w, self.dp,
                                self.hp, self.wp, self.pf, self.pt, self.pl, i, i + 1)
            src = &self.sc[0]
            src_len = self.zbase
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = total * r // runs
            hi = total * (r + 1) // runs
            work_note(hi - lo)
            for ph in range(self.nph):
                a0 = lo if lo > self.istart[ph] else self.istart[ph]
                a1 = hi if hi < self.istart[ph + 1] else self.istart[ph + 1]
                if a0 < a1:
                    rlx_nchwc_dense_run(src, src_len, &self.wq[self.woff[ph]], self.wq.shape[0] - self.woff[ph],
                                        &self.bias[0] if self.has_bias else NULL, NULL, 0,
                                        &self.sc[self.zoff[ph]], sc_len - self.zoff[ph],
                                        &self.koff[self.kstart[ph]], &self.g[ph], &self.a,
                                        a0 - self.istart[ph], a1 - self.istart[ph])
        # each (image, block) plane's depth slices: a phase's slice k goes
        # to output slice pc + sd*k, its rows and columns strided within it
        for i in prange(self.planes, num_threads=t, schedule='static'):
            work_note(1)
            for ph in range(self.nph):
                grid = self.g[ph].h_out * self.g[ph].w_out * 8
                for k in range(self.g[ph].d_out):
                    zo = self.zoff[ph] + (i * self.g[ph].d_out + k) * grid
                    yo = (i * self.do + self.pc[ph] + self.sd * k) * plane
                    rlx_nchwc_phase_scatter(&self.sc[zo], sc_len - zo, &self.y[yo], y_len - yo,
                                            self.g[ph].h_out, self.g[ph].w_out, self.ho, self.wo, self.pa[ph],
                                            self.pb[ph], self.sh, self.sw, 0, 1)
        return 0


cdef class NchwcPoolLaunch(Launch):
    """2-D max or avg pool on blocked x [N, C/8, H, W, 8] -> y [N, C/8,
    H_out, W_out, 8], any kernel, stride, padding, dilation and output size
    (ceil mode is the caller's h_out / w_out); every window must hold an
    input pixel.  avg divides by divisor_override when > 0, else by the taps
    inside the input, or with count_include_pad inside the padded input."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef NcPoolGeom g
    cdef Py_ssize_t rows

    def __init__(self, x, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, Py_ssize_t h_out,
                 Py_ssize_t w_out, tuple kernel, tuple stride, tuple pads_begin, tuple pads_end, tuple dilation,
                 kind, bint count_include_pad=True, Py_ssize_t divisor_override=0, int max_threads=1):
        op = f"{kind}_pool2d_nchwc"
        if kind not in ("max", "avg"):
            raise ValueError(f"pool2d_nchwc: kind must be 'max' or 'avg', got {kind!r}")
        _check_blocked_channels(op, "channels", c)
        kh, kw = kernel
        sh, sw = stride
        dh, dw = dilation
        if min(kh, kw, sh, sw, dh, dw) < 1 or min(pads_begin + pads_end) < 0 or n < 1 or h_out < 1 or w_out < 1:
            raise ValueError(f"{op}: kernel, stride, dilation, n and output size must be >= 1 and padding >= 0, "
                             f"got kernel={kernel}, stride={stride}, dilation={dilation}, "
                             f"padding={pads_begin}+{pads_end}, n={n}, output {h_out}x{w_out}")
        self.x = x
        self.y = y
        _check_len(op, "x", self.x, n * c * h * w)
        _check_len(op, "y", self.y, n * c * h_out * w_out)
        self.g.cb, self.g.h, self.g.w, self.g.h_out, self.g.w_out = c // BLOCK, h, w, h_out, w_out
        self.g.kh, self.g.kw, self.g.sh, self.g.sw = kh, kw, sh, sw
        self.g.ph, self.g.pw, self.g.dh, self.g.dw = pads_begin[0], pads_begin[1], dh, dw
        self.g.is_max = kind == "max"
        self.g.divisor_override = divisor_override if kind == "avg" and divisor_override > 0 else 0
        self.g.lo_h, self.g.hi_h, self.g.lo_w, self.g.hi_w = 0, h, 0, w
        if count_include_pad:
            self.g.lo_h, self.g.hi_h = -pads_begin[0], h + pads_end[0]
            self.g.lo_w, self.g.hi_w = -pads_begin[1], w + pads_end[1]
        cdef Py_ssize_t i, t0, t1
        for axis, size, o, k, s, p, d in (("h", h, h_out, kh, sh, pads_begin[0], dh),
                                          ("w", w, w_out, kw, sw, pads_begin[1], dw)):
            for i in range(o):
                rlx_nchwc_pool_taps(i * s - p, d, k, 0, size, &t0, &t1)
                if t0 == t1:
                    raise ValueError(f"{op}: output {axis} {i} has no input pixel in its window (input {size}, "
                                     f"kernel {k}, stride {s}, padding {p}, dilation {d})")
        self.rows = n * (c // BLOCK) * h_out
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi
        if self.y.shape[0] < 16384:
            t = 1
        cdef Py_ssize_t runs = t if t < self.rows else self.rows
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.rows * r // runs
            hi = self.rows * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_pool_rows(&self.x[0], self.x.shape[0], &self.y[0], self.y.shape[0], &self.g, lo, hi)
        return 0


cdef class NchwcGlobalPoolLaunch(Launch):
    """Global max or avg pool of blocked x [N, C/8, P, 8] into y [N, C]
    (which is [N, C, 1, 1] in NCHW and in the blocked layout alike)."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef Py_ssize_t items, p
    cdef int is_max

    def __init__(self, x, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t p, kind, int max_threads=1):
        op = f"global_{kind}_pool_nchwc"
        if kind not in ("max", "avg"):
            raise ValueError(f"global_pool_nchwc: kind must be 'max' or 'avg', got {kind!r}")
        _check_blocked_channels(op, "channels", c)
        if n < 1 or p < 1:
            raise ValueError(f"{op}: need at least one image and one pixel, got n={n}, pixels={p}")
        self.x = x
        self.y = y
        _check_len(op, "x", self.x, n * c * p)
        _check_len(op, "y", self.y, n * c)
        self.items = n * (c // BLOCK)
        self.p = p
        self.is_max = kind == "max"
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi
        # below about 64K floats (2 us at 1 thread) the fork/join costs what a
        # second thread saves (measured 50K: 1.9 us alone, 2.1 us on two)
        if self.x.shape[0] < 65536:
            t = 1
        cdef Py_ssize_t runs = t if t < self.items else self.items
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.items * r // runs
            hi = self.items * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_global(&self.x[0], self.x.shape[0], &self.y[0], self.y.shape[0], self.p, self.is_max, lo, hi)
        return 0


# The band buffers of a fused inverted residual block (expanded input rows and
# depthwise output rows) stay within about this many floats per thread (L2).
IR_BAND_FLOATS = 48 * 1024


def ir_band_rows(Py_ssize_t e, Py_ssize_t w, Py_ssize_t w_out, Py_ssize_t h_out, Py_ssize_t stride, bint expand,
                 int max_threads=1, int k=3):
    """Output rows per band of a fused inverted residual block (depthwise
    kernel k x k): the most whose buffers fit IR_BAND_FLOATS, at least 1,
    and at most h_out split over the threads (each thread a run of whole
    bands)."""
    cdef Py_ssize_t band = 1
    while band < h_out and ir_scratch_floats(e, w, w_out, stride, band + 1, expand, 1, k) <= IR_BAND_FLOATS:
        band += 1
    per_thread = (h_out + max(1, max_threads) - 1) // max(1, max_threads)
    return max(1, min(band, per_thread))


def ir_scratch_floats(Py_ssize_t e, Py_ssize_t w, Py_ssize_t w_out, Py_ssize_t stride, Py_ssize_t band,
                      bint expand, int max_threads=1, int k=3):
    """Floats of the band buffers of all threads of a fused block
    (depthwise kernel k x k)."""
    per_run = (e * ((band - 1) * stride + k) * w if expand else 0) + e * band * w_out
    return max(1, max_threads) * per_run


cdef _set_act(NcAct* a, op, tuple act):
    """A conv epilogue's (act, alpha, beta) into `a`, the name checked."""
    a.act = _act_code(op, act[0])
    a.alpha = act[1]
    a.beta = act[2]


cdef class NchwcInvertedResidualLaunch(Launch):
    """MobileNetV2's inverted residual block in one pass over row bands:
    y = project(dw(expand(x))) (+ residual), on blocked x [N, C/8, H, W, 8]
    and y, residual [N, M/8, H_out, W_out, 8].  expand: a 1x1 conv C -> E
    (`we` from pack_1x1_weight, or None: no expand, E = C); dw: depthwise
    k x k (3 or 5), stride 1 or 2, padding k // 2 (`wd` from
    pack_depthwise_weight); project:
    a 1x1 conv E -> M (`wp`).  Each conv has its bias (or None) and
    activation (act, alpha, beta).  `scratch`: ir_scratch_floats floats;
    `band`: output rows per work item (ir_band_rows)."""
    cdef const float[::1] x
    cdef const float[::1] we
    cdef const float[::1] be
    cdef const float[::1] wd
    cdef const float[::1] bd
    cdef const float[::1] wp
    cdef const float[::1] bp
    cdef const float[::1] res
    cdef float[::1] y
    cdef float[::1] scratch
    cdef Py_ssize_t[::1] koff_e
    cdef Py_ssize_t[::1] koff_p
    cdef bint has_res
    cdef NcIrGeom g
    cdef NcIrOps o
    cdef Py_ssize_t items, per_run

    def __init__(self, x, we, be, wd, bd, wp, bp, residual, y, scratch, Py_ssize_t n, Py_ssize_t c,
                 Py_ssize_t e, Py_ssize_t m, Py_ssize_t h, Py_ssize_t w, Py_ssize_t stride, Py_ssize_t band,
                 tuple act_expand=(None, 0.0, 0.0), tuple act_dw=(None, 0.0, 0.0),
                 tuple act_project=(None, 0.0, 0.0), int max_threads=1, int k=3):
        op = "inverted_residual_nchwc"
        _check_blocked_channels(op, "input channels", c)
        _check_blocked_channels(op, "expanded channels", e)
        _check_blocked_channels(op, "output channels", m)
        expand = we is not None
        if not expand and e != c:
            raise ValueError(f"{op}: without an expand conv the depthwise conv has the input's {c} channels, "
                             f"got {e}")
        if stride not in (1, 2):
            raise ValueError(f"{op}: the depthwise stride must be 1 or 2, got {stride}")
        if k not in (3, 5):
            raise ValueError(f"{op}: the depthwise kernel must be 3x3 or 5x5, got {k}x{k}")
        if n < 1 or h < 1 or w < 1:
            raise ValueError(f"{op}: need at least one image and one pixel, got n={n}, input {h}x{w}")
        h_out = (h - 1) // stride + 1
        w_out = (w - 1) // stride + 1
        if band < 1 or band > h_out:
            raise ValueError(f"{op}: band must be 1..{h_out} output rows, got {band}")
        self.max_threads = max(1, max_threads)
        self.g.n, self.g.c, self.g.e, self.g.m = n, c, e, m
        self.g.h, self.g.w, self.g.h_out, self.g.w_out, self.g.s = h, w, h_out, w_out, stride
        self.g.band, self.g.br, self.g.expand, self.g.k = band, (band - 1) * stride + k, expand, k
        self.per_run = rlx_nchwc_ir_scratch_floats(&self.g)
        self.x = x
        self.y = y
        self.wd = wd
        self.wp = wp
        self.we = or_placeholder(we, np.float32)
        self.be = or_placeholder(be, np.float32)
        self.bd = or_placeholder(bd, np.float32)
        self.bp = or_placeholder(bp, np.float32)
        self.has_res = residual is not None
        self.res = or_placeholder(residual, np.float32)
        self.scratch = scratch
        _check_len(op, "x", self.x, n * c * h * w)
        _check_len(op, "y", self.y, n * m * h_out * w_out)
        _check_len(op, "depthwise weight", self.wd, e * k * k)
        _check_len(op, "project weight", self.wp, rlx_nchwc_1x1_packed_floats(m, e))
        _check_len(op, "scratch", self.scratch, self.max_threads * self.per_run)
        if expand:
            _check_len(op, "expand weight", self.we, rlx_nchwc_1x1_packed_floats(e, c))
        if be is not None:
            _check_len(op, "expand bias", self.be, e)
        if bd is not None:
            _check_len(op, "depthwise bias", self.bd, e)
        if bp is not None:
            _check_len(op, "project bias", self.bp, m)
        if self.has_res:
            _check_len(op, "residual", self.res, n * m * h_out * w_out)
        _set_act(&self.o.ae, op, act_expand)
        _set_act(&self.o.ad, op, act_dw)
        _set_act(&self.o.ap, op, act_project)
        self.o.we = &self.we[0] if expand else NULL
        self.o.be = &self.be[0] if be is not None else NULL
        self.o.wd = &self.wd[0]
        self.o.bd = &self.bd[0] if bd is not None else NULL
        self.o.wp = &self.wp[0]
        self.o.bp = &self.bp[0] if bp is not None else NULL
        self.koff_e = np.arange(c // NC_B, dtype=np.intp) * (h * w * NC_B)
        self.koff_p = np.arange(e // NC_B, dtype=np.intp) * (band * w_out * NC_B)
        self.items = n * ((h_out + band - 1) // band)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi
        cdef Py_ssize_t runs = t if t < self.items else self.items
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.items * r // runs
            hi = self.items * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_ir_run(&self.x[0], self.x.shape[0], &self.res[0] if self.has_res else NULL,
                             self.res.shape[0], &self.y[0], self.y.shape[0], &self.scratch[r * self.per_run],
                             self.per_run, &self.koff_e[0], &self.koff_p[0], &self.o, &self.g, lo, hi)
        return 0


# ---- Winograd F(2x2, 3x3) and F(4x4, 3x3) on the blocked layout -----------
# (src/rlx_nchwc_wino.h).  G of each, as in Lavin & Gray with the
# interpolation points 0, +-1 (F(2x2)) and 0, +-1, +-2, inf (F(4x4)); the
# B^T and A^T that go with them are in the header.
_WINO_G = {
    2: np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]], np.float64),
    4: np.array([[6.0, 0.0, 0.0], [-4.0, -4.0, -4.0], [-4.0, 4.0, -4.0], [1.0, 2.0, 4.0], [1.0, -2.0, 4.0],
                 [0.0, 0.0, 24.0]], np.float64) / 24.0,
}
# V of one chunk (alpha^2 x C x tiles floats) stays within about this many
# floats (384 KiB: in L2 with the Mt of a pass, RLX_WINO_PASS channels),
# with at least WINO_MIN_CHUNK tiles per chunk: a 1x1 tile runs up to 6 of
# them, and every chunk reads all of U once more.
WINO_CHUNK_FLOATS = 96 * 1024
WINO_MIN_CHUNK = 16
WINO_SPLIT_U = 1 << 20


def winograd_pack_u(weight, int mt):
    """U = G g G^T of a [M, C, 3, 3] weight (computed in float64), each of
    its (mt + 2)^2 positions packed as a blocked 1x1 weight [M, C]
    (compile-time use)."""
    if mt not in _WINO_G:
        raise ValueError(f"winograd_pack_u: the output tile must be 2 or 4, got {mt}")
    w = np.asarray(weight)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd_pack_u: weight must be [M, C, 3, 3], got {w.shape}")
    m, c = w.shape[0], w.shape[1]
    _check_blocked_channels("winograd_pack_u", "output channels", m)
    G = _WINO_G[mt]
    u = np.einsum("ar,mcrs,bs->abmc", G, w.astype(np.float64), G).astype(np.float32)
    a = mt + 2
    return np.concatenate([pack_1x1_weight(u[i, j]) for i in range(a) for j in range(a)])


def winograd_chunk(Py_ssize_t c, Py_ssize_t m, Py_ssize_t tiles, int mt, int max_threads=1):
    """Tiles per chunk: the tiles in equal chunks of about WINO_CHUNK_FLOATS
    floats of V, at least WINO_MIN_CHUNK tiles each; and at least one chunk
    per thread when U is at most WINO_SPLIT_U bytes (every chunk reads all
    of U, but a chunk split into panel groups repeats its input transform
    and leaves one panel group of 32 channels or fewer on one thread:
    b8 32->32 3x3 at 8x8, F(4x4), 1 / 2 threads 18 / 24 us in one chunk)."""
    a2 = (mt + 2) * (mt + 2)
    target = max(WINO_MIN_CHUNK, WINO_CHUNK_FLOATS // max(1, a2 * c))
    nchunks = (tiles + target - 1) // target
    if nchunks < max_threads and 4 * a2 * c * m <= WINO_SPLIT_U:
        nchunks = min(max_threads, tiles)
    return (tiles + nchunks - 1) // nchunks


def winograd_groups(Py_ssize_t panels, Py_ssize_t chunks, int max_threads):
    """Panel groups per chunk: 1 when the chunks split evenly over the
    threads (or there are 4 per thread), else enough that the items do
    (t / gcd(chunks, t)), each group's input transform repeated, at most one
    group per panel (per pair of panels on the AVX-512 level)."""
    t = max(1, max_threads)
    if chunks % t == 0 or chunks >= 4 * t:
        return 1
    unit = 2 if rlx_simd_level() >= 2 else 1
    return min(t // math.gcd(chunks, t), (panels + unit - 1) // unit)


cdef _wino_geom(NcWinoGeom* g, op, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, Py_ssize_t m,
                tuple pads_begin, tuple pads_end, int mt, int max_threads):
    _check_blocked_channels(op, "input channels", c)
    _check_blocked_channels(op, "output channels", m)
    if mt not in (2, 4):
        raise ValueError(f"{op}: the output tile must be 2 or 4, got {mt}")
    if len(pads_begin) != 2 or len(pads_end) != 2 or min(pads_begin + pads_end) < 0:
        raise ValueError(f"{op}: pads must be two non-negative values each, got {pads_begin}, {pads_end}")
    h_out, w_out = h + pads_begin[0] + pads_end[0] - 2, w + pads_begin[1] + pads_end[1] - 2
    if n < 1 or h < 1 or w < 1 or h_out < 1 or w_out < 1:
        raise ValueError(f"{op}: need at least one image and one output pixel, got n={n}, input {h}x{w}, "
                         f"output {h_out}x{w_out}")
    g.n, g.c, g.m, g.h, g.w, g.h_out, g.w_out = n, c, m, h, w, h_out, w_out
    g.pt, g.pl, g.mt = pads_begin[0], pads_begin[1], mt
    g.th, g.tw = (h_out + mt - 1) // mt, (w_out + mt - 1) // mt
    g.chunk = winograd_chunk(c, m, n * g.th * g.tw, mt, max_threads)
    g.groups = winograd_groups((m + 15) // 16, rlx_nchwc_wino_chunks(g), max(1, max_threads))


def winograd_scratch_floats(Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w, Py_ssize_t m, tuple pads_begin,
                            tuple pads_end, int mt, int max_threads=1):
    """Floats of the V and Mt buffers of all threads of a blocked Winograd
    conv."""
    cdef NcWinoGeom g
    _wino_geom(&g, "winograd_scratch_floats", n, c, h, w, m, pads_begin, pads_end, mt, max_threads)
    return max(1, max_threads) * rlx_nchwc_wino_scratch_floats(&g)


cdef class NchwcWinogradLaunch(_BlockedConv):
    """y = act(conv3x3(x) + bias + residual), stride 1, on blocked x
    [N, C/8, H, W, 8] and y, residual [N, M/8, H_out, W_out, 8], by
    Winograd F(mt x mt, 3x3) (mt = 2 or 4); `u` from winograd_pack_u,
    `scratch` winograd_scratch_floats floats."""
    cdef float[::1] scratch
    cdef Py_ssize_t[::1] koff
    cdef NcWinoGeom g
    cdef Py_ssize_t items, per_run

    def __init__(self, x, u, bias, residual, y, scratch, Py_ssize_t n, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w,
                 Py_ssize_t m, tuple pads_begin, tuple pads_end, int mt, act=None, float alpha=0.0,
                 float beta=0.0, int max_threads=1):
        op = "conv2d_nchwc winograd"
        self.max_threads = max(1, max_threads)
        _wino_geom(&self.g, op, n, c, h, w, m, pads_begin, pads_end, mt, self.max_threads)
        self._bind(op, x, u, bias, residual, y, act, alpha, beta, n * c * h * w, n * m * self.g.h_out * self.g.w_out,
                   rlx_nchwc_wino_packed_floats(mt, m, c), m)
        self.per_run = rlx_nchwc_wino_scratch_floats(&self.g)
        self.scratch = scratch
        _check_len(op, "scratch", self.scratch, self.max_threads * self.per_run)
        self.items = rlx_nchwc_wino_items(&self.g)
        self.koff = np.arange(c // NC_B, dtype=np.intp) * (self.g.chunk * NC_B)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t r, lo, hi
        cdef Py_ssize_t runs = t if t < self.items else self.items
        for r in prange(runs, num_threads=t, schedule='static'):
            lo = self.items * r // runs
            hi = self.items * (r + 1) // runs
            work_note(hi - lo)
            rlx_nchwc_wino_run(&self.x[0], self.x.shape[0], &self.wq[0], self.wq.shape[0],
                               &self.bias[0] if self.has_bias else NULL,
                               &self.res[0] if self.has_res else NULL, self.res.shape[0],
                               &self.y[0], self.y.shape[0], &self.scratch[r * self.per_run], self.per_run,
                               &self.koff[0], &self.g, &self.a, lo, hi)
        return 0
