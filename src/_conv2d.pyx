# Conv2D forward kernels (NCHW, float32) and their bound launches.
#
# Every algorithm reads the input, weight and bias and writes the output via
# memoryviews over the plan's arena, so a debug build (RLX_CYTHON_DEBUG=1)
# bounds-checks every access.  Scratch space comes from the arena too: the
# compiler sizes it with `scratch_floats` below, so a run allocates nothing.
#
#   algorithm   eligibility (checked at compile time)      parallel over
#   ---------   -----------------------------------------  ------------------------
#   reference   any                                         (n, c_out) planes
#   im2col      K*P <= IM2COL_MAX_COL_FLOATS                (n, group, column block)
#                                                           items
#   gemm_1x1    1x1 kernel, stride 1, no padding            (n, group) items or
#                                                           GEMM panels (sgemm), or
#                                                           (n, group, column chunk)
#                                                           items (microkernel), or
#                                                           (n, group, channel run)
#                                                           items (its small-plane
#                                                           channel-panel variant)
#   direct      stride 1, dilation 1; or depthwise 3x3/5x5  (n, c_out) planes;
#               at stride 2 (its own plane kernel)          depthwise 3x3/5x5 at
#                                                           stride 1 (own kernel):
#                                                           runs of output rows
#   winograd    3x3, stride 1, dilation 1, groups 1         blocks of 2x2 tiles
#   winograd_f4 3x3, stride 1, dilation 1, groups 1         blocks of 4x4 tiles
#
# gemm_1x1 and im2col run their GEMMs either through sgemm or through the conv
# microkernel of src/rlx_gemm.h (`packed`: the weight was packed into its
# register-tile panels, and the bias is added in its epilogue).  im2col on the
# microkernel may skip the patch matrix (`packed` = LAYOUT_IMPLICIT, see
# src/rlx_implicit.h): one phase-split copy of each image's input, from which
# the GEMM packs its X panels directly; the same bits as the explicit one.
# K = c_in/groups * kh * kw (GEMM depth), P = h_out * w_out (GEMM width).
cimport cython
from cython.parallel cimport prange, threadid

from _blas cimport sgemm_rm, sgemm_rm_split
from _gemm_nt cimport rlx_gemm_nt_parts, rlx_gemm_nt_part
from _codes cimport (CONV_REFERENCE, CONV_IM2COL, CONV_GEMM_1X1, CONV_DIRECT, CONV_WINOGRAD,
                     CONV_WINOGRAD_F4, MAX_COL_FLOATS)
from libc.string cimport memcpy, memset

from _window cimport out_range
from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_note, work_meter_bind
from _implicit cimport (ImplicitEpilogue, ImplicitGeom, implicit_conv_run, rlx_implicit_floats,
                       rlx_implicit_offsets, rlx_implicit_slot_floats)

import time

import numpy as np


# Algorithm codes (src/_codes.pxd); rlx_cpu.algorithms.ConvAlgorithm takes
# its values from here.
# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


ALGO_REFERENCE = CONV_REFERENCE
ALGO_IM2COL = CONV_IM2COL
ALGO_GEMM_1X1 = CONV_GEMM_1X1
ALGO_DIRECT = CONV_DIRECT
ALGO_WINOGRAD = CONV_WINOGRAD
ALGO_WINOGRAD_F4 = CONV_WINOGRAD_F4

# Past this many floats of patch matrix (2 GB) no GEMM path is eligible
# (im2col here; vol2col and conv backward use the same cap, see _codes.pxd).
# The scratch im2col holds is only one column block per thread; the cap
# bounds the gather work.
IM2COL_MAX_COL_FLOATS = MAX_COL_FLOATS


cdef extern from "rlx_simd.h":
    ctypedef struct ConvGeom "rlx_conv_geom":
        Py_ssize_t n, c_in, h, w, c_out, h_out, w_out
        Py_ssize_t kh, kw, sh, sw, ph, pw, dh, dw, groups
    void rlx_simd_init() nogil
    int rlx_simd_level() nogil
    void rlx_direct_plane(const float* x, Py_ssize_t x_len, const float* wt, float* y,
                          Py_ssize_t y_len, const ConvGeom* g, Py_ssize_t item) nogil
    void rlx_dw_s2_planes(const float* x, Py_ssize_t x_len, const float* wt, const float* bias,
                          float* y, Py_ssize_t y_len, float* ring, Py_ssize_t ring_len,
                          const ConvGeom* g, const Epilogue* e, Py_ssize_t p0, Py_ssize_t p1) nogil
    Py_ssize_t rlx_dw_s2_scratch(const ConvGeom* g) nogil
    void rlx_dw_s1_rows(const float* x, Py_ssize_t x_len, const float* wt, const float* bias,
                        float* y, Py_ssize_t y_len, float* ring, Py_ssize_t ring_len,
                        const ConvGeom* g, const Epilogue* e, Py_ssize_t r0, Py_ssize_t r1) nogil
    Py_ssize_t rlx_dw_s1_scratch(const ConvGeom* g) nogil
    void rlx_dw_cb_run(const float* x, Py_ssize_t x_len, const float* wt, const float* bias,
                       float* y, Py_ssize_t y_len, float* buf, Py_ssize_t buf_len,
                       const ConvGeom* g, const Epilogue* e, Py_ssize_t i0, Py_ssize_t i1) nogil
    Py_ssize_t rlx_dw_cb_items(const ConvGeom* g) nogil
    Py_ssize_t rlx_dw_cb_scratch(const ConvGeom* g) nogil
    int rlx_dw_cb_use(const ConvGeom* g) nogil
    int rlx_dw_r512_use(const ConvGeom* g) nogil
    void rlx_dw_r512_run(const float* x, Py_ssize_t x_len, const float* wt, const float* bias,
                         float* y, Py_ssize_t y_len, const ConvGeom* g, const Epilogue* e, Py_ssize_t i0,
                         Py_ssize_t i1) nogil
    Py_ssize_t rlx_dw_cb_rows_per_strip(const ConvGeom* g) nogil
    void rlx_wino_input(const float* x, Py_ssize_t x_len, float* v, const ConvGeom* g,
                        Py_ssize_t t0, Py_ssize_t cnt, Py_ssize_t tb, Py_ssize_t pstride) nogil
    void rlx_wino_output(const float* m, float* y, Py_ssize_t y_len, const float* bias,
                         const Epilogue* epi, const ConvGeom* g, Py_ssize_t t0, Py_ssize_t cnt,
                         Py_ssize_t tb, Py_ssize_t pstride) nogil
    void rlx_wino4_input(const float* x, Py_ssize_t x_len, float* v, const ConvGeom* g,
                         Py_ssize_t t0, Py_ssize_t cnt, Py_ssize_t tb, Py_ssize_t pstride) nogil
    void rlx_wino4_output(const float* m, float* y, Py_ssize_t y_len, const float* bias,
                          const Epilogue* epi, const ConvGeom* g, Py_ssize_t t0, Py_ssize_t cnt,
                          Py_ssize_t tb, Py_ssize_t pstride) nogil



cdef extern from "rlx_epilogue.h":
    ctypedef struct Epilogue "rlx_epilogue":
        int act
        float alpha, beta
        const float* res
        Py_ssize_t res_len
    enum:
        RLX_ACT_NONE, RLX_ACT_RELU, RLX_ACT_CLIP, RLX_ACT_LEAKY_RELU, RLX_ACT_SIGMOID,
        RLX_ACT_HARD_SIGMOID, RLX_ACT_HARD_SWISH, RLX_ACT_TANH, RLX_ACT_SILU
    void rlx_epilogue_span(float* y, Py_ssize_t y_len, Py_ssize_t off, Py_ssize_t n, float b,
                           const Epilogue* e, int simd) nogil
    void rlx_epilogue_rows(float* y, Py_ssize_t y_len, Py_ssize_t off, Py_ssize_t ld, Py_ssize_t rows,
                           Py_ssize_t n, const float* ep_bias, const Epilogue* e, int simd) nogil
    int rlx_epilogue_active(const Epilogue* e) nogil


# Epilogue activation codes (rlx_cpu.ops.conv maps activation op names onto them).
ACT_NONE = RLX_ACT_NONE
ACT_RELU = RLX_ACT_RELU
ACT_CLIP = RLX_ACT_CLIP
ACT_LEAKY_RELU = RLX_ACT_LEAKY_RELU
ACT_SIGMOID = RLX_ACT_SIGMOID
ACT_HARD_SIGMOID = RLX_ACT_HARD_SIGMOID
ACT_HARD_SWISH = RLX_ACT_HARD_SWISH
ACT_TANH = RLX_ACT_TANH
ACT_SILU = RLX_ACT_SILU


cdef struct Fused:
    # What a conv applies to each span of output right after computing it:
    # y = act(y + bias[c] + residual).  `on` is 0 when there is nothing to do.
    Epilogue e
    const float* bias       # NULL: no bias
    bint on


cdef inline void _epilogue_rows(float[::1] y, const Fused* f, Py_ssize_t off, Py_ssize_t stride,
                                Py_ssize_t c0, Py_ssize_t nch, Py_ssize_t span) noexcept nogil:
    """The epilogue on nch output rows of `span` floats, row c at off + c * stride
    and of channel c0 + c."""
    rlx_epilogue_rows(&y[0], y.shape[0], off, stride, nch, span, f.bias + c0 if f.bias != NULL else NULL, &f.e,
                      rlx_simd_level())


cdef extern from "rlx_gemm.h":
    Py_ssize_t rlx_gemm_packed_floats(Py_ssize_t m, Py_ssize_t k) nogil
    void rlx_gemm_pack_w(const float* w, Py_ssize_t ldw, Py_ssize_t m, Py_ssize_t k, float* wp) nogil
    void rlx_gemm_conv(const float* wp, Py_ssize_t wp_len, Py_ssize_t m, Py_ssize_t k,
                       const float* x, Py_ssize_t x_len, Py_ssize_t x_off, Py_ssize_t ldx,
                       float* c, Py_ssize_t c_len, Py_ssize_t c_off, Py_ssize_t ldc, Py_ssize_t n,
                       const float* bias) nogil
    void rlx_gemm_conv_ep(const float* wp, Py_ssize_t wp_len, Py_ssize_t m, Py_ssize_t k,
                          const float* x, Py_ssize_t x_len, Py_ssize_t x_off, Py_ssize_t ldx,
                          float* c, Py_ssize_t c_len, Py_ssize_t c_off, Py_ssize_t ldc, Py_ssize_t n,
                          const float* bias, const Epilogue* ep, const float* ep_bias) nogil
    int RLX_GEMM_NR
    int RLX_GEMM_CH
    int RLX_GEMM_CH_MAX_N
    Py_ssize_t rlx_gemm_ch_packed_floats(Py_ssize_t m, Py_ssize_t k) nogil
    void rlx_gemm_ch_pack_w(const float* w, Py_ssize_t ldw, Py_ssize_t m, Py_ssize_t k, float* wq) nogil
    void rlx_gemm_conv_ch(const float* wq, Py_ssize_t wq_len, Py_ssize_t m, Py_ssize_t k,
                          const float* x, Py_ssize_t x_len, Py_ssize_t x_off, Py_ssize_t ldx,
                          float* c, Py_ssize_t c_len, Py_ssize_t c_off, Py_ssize_t ldc, Py_ssize_t n,
                          Py_ssize_t q0, Py_ssize_t q1, const Epilogue* ep, const float* ep_bias) nogil
    void rlx_gather_strided(const float* src, Py_ssize_t stride, float* dst, Py_ssize_t n) nogil


cdef extern from "rlx_implicit.h":
    ImplicitGeom rlx_implicit_geom_2d(const ConvGeom* g) nogil


# Packed weight layouts (the `packed` value of a conv launch): row panels for
# the 6x16 tile (gemm_1x1 and im2col), channel panels for the 6-pixel x
# 16-channel tile of small 1x1 planes (gemm_1x1 only), and row panels for an
# im2col conv whose patch matrix stays implicit (im2col only; the weight is
# packed as for LAYOUT_ROWS).
cdef enum:
    LAYOUT_ROWS = 1
    LAYOUT_CHANNELS = 2
    LAYOUT_IMPLICIT = 3
    LAYOUT_IMPLICIT_DIRECT = 4
GEMM_LAYOUT_ROWS = LAYOUT_ROWS
GEMM_LAYOUT_CHANNELS = LAYOUT_CHANNELS
GEMM_LAYOUT_IMPLICIT = LAYOUT_IMPLICIT
GEMM_LAYOUT_IMPLICIT_DIRECT = LAYOUT_IMPLICIT_DIRECT
# Largest plane the channel-panel layout may be chosen for.
GEMM_CHANNELS_MAX_PIXELS = RLX_GEMM_CH_MAX_N


# The SIMD variant is chosen here, at import, before any kernel runs.
rlx_simd_init()


def depthwise_channel_blocks(tuple dims):
    """(work items, output rows per strip) of the channel-block depthwise
    kernel for these dims, or None when it does not run them (not a
    depthwise 3x3/5x5 at stride 1 or 2, a large plane, or no AVX2)."""
    cdef ConvGeom g = _geom_from(dims)
    if not depthwise_stride(&g) or not rlx_dw_cb_use(&g) or rlx_dw_r512_use(&g):
        return None
    return int(rlx_dw_cb_items(&g)), int(rlx_dw_cb_rows_per_strip(&g))


def depthwise_rows512(tuple dims):
    """True when the AVX-512 row kernel (rlx_dw_r512_use) runs the
    depthwise conv of these dims."""
    cdef ConvGeom g = _geom_from(dims)
    return bool(depthwise_stride(&g) and rlx_dw_r512_use(&g))


def simd_level():
    """The SIMD level (src/rlx_simd.h): 0 runs the baseline, 1 the AVX2+FMA
    variants of the hot loops, 2 also the AVX-512 ones where they exist."""
    return rlx_simd_level()


cdef extern from "rlx_peak.h":
    double rlx_peak_flops_per_iter() nogil
    float rlx_fma_probe(long iters, float seed) nogil


cdef double _fma_probe_seconds(long iters, int threads):
    cdef int i
    cdef float sink = 0
    t0 = time.perf_counter()
    with nogil:
        for i in prange(threads, num_threads=threads, schedule='static'):
            sink += rlx_fma_probe(iters, <float>i)
    dt = time.perf_counter() - t0
    if sink != sink:        # keeps the probe's result alive; never NaN
        raise RuntimeError("fma_peak_gflops: the probe returned NaN")
    return dt


def fma_peak_gflops(int threads=1, double seconds=0.2):
    """Measured float32 FMA throughput in GFLOP/s per thread, with `threads`
    threads running the probe at once (src/rlx_peak.h: 12 independent
    vector FMA chains on the widest SIMD level this CPU runs, AVX-512 included), over about `seconds`
    after a warm-up of the same length: the peak that benchmarks state their
    GFLOP/s against."""
    if threads < 1 or not (seconds > 0):
        raise ValueError(f"fma_peak_gflops: threads must be >= 1 and seconds > 0, got {threads}, {seconds}")
    cdef long iters = 1 << 20
    while _fma_probe_seconds(iters, threads) < seconds / 8 and iters < (1 << 40):
        iters *= 2
    iters = <long>(iters * (seconds / max(_fma_probe_seconds(iters, threads), 1e-9)))
    _fma_probe_seconds(max(iters, 1), threads)            # warm-up at the full length
    dt = _fma_probe_seconds(max(iters, 1), threads)
    return float(max(iters, 1)) * rlx_peak_flops_per_iter() / dt / 1e9


# ---------------------------------------------------------------------------
# Conv GEMM microkernel (src/rlx_gemm.h): weight packing and a test entry
# ---------------------------------------------------------------------------

cdef inline Py_ssize_t _packed_per_group(Py_ssize_t cog, Py_ssize_t k, int layout) noexcept nogil:
    return rlx_gemm_ch_packed_floats(cog, k) if layout == LAYOUT_CHANNELS else rlx_gemm_packed_floats(cog, k)


def gemm_packed_floats(Py_ssize_t c_out, Py_ssize_t k, Py_ssize_t groups, int layout=GEMM_LAYOUT_ROWS):
    """Floats of a [c_out, k] weight (k = c_in/groups * kh * kw) packed for the
    microkernel: each group's c_out/groups rows in zero-padded 6-row panels
    (GEMM_LAYOUT_ROWS) or 16-channel panels (GEMM_LAYOUT_CHANNELS)."""
    if layout not in (GEMM_LAYOUT_ROWS, GEMM_LAYOUT_CHANNELS, GEMM_LAYOUT_IMPLICIT, GEMM_LAYOUT_IMPLICIT_DIRECT):
        raise ValueError(f"gemm_packed_floats: layout must be {GEMM_LAYOUT_ROWS}, {GEMM_LAYOUT_CHANNELS}, "
                         f"{GEMM_LAYOUT_IMPLICIT} or {GEMM_LAYOUT_IMPLICIT_DIRECT}, got {layout}")
    return int(groups * _packed_per_group(c_out // groups, k, layout))


cdef int gemm_pack_weight_into(const float[::1] w, float[::1] wp, Py_ssize_t c_out, Py_ssize_t k,
                               Py_ssize_t groups, int layout) except -1 nogil:
    cdef Py_ssize_t cog = c_out // groups
    cdef Py_ssize_t pf = _packed_per_group(cog, k, layout)
    cdef Py_ssize_t gi
    if k <= 0 or cog <= 0:
        return 0
    for gi in range(groups):
        # touch both ends so a debug build bounds-checks the whole range
        w[(gi + 1) * cog * k - 1]
        wp[(gi + 1) * pf - 1]
        if layout == LAYOUT_CHANNELS:
            rlx_gemm_ch_pack_w(&w[gi * cog * k], k, cog, k, &wp[gi * pf])
        else:
            rlx_gemm_pack_w(&w[gi * cog * k], k, cog, k, &wp[gi * pf])
    return 0


def winograd_pack_u(u, Py_ssize_t c_out, Py_ssize_t c_in):
    """A transformed Winograd filter U [planes, c_out, c_in] with each plane
    packed in the microkernel's 6-row panels, one after another: the tile
    GEMMs then run on rlx_gemm_conv instead of sgemm (compile-time use)."""
    u = np.ascontiguousarray(u, dtype=np.float32).reshape(-1, c_out, c_in)
    return np.concatenate([gemm_pack_weight(u[p].reshape(c_out, c_in, 1, 1), 1, GEMM_LAYOUT_ROWS)
                           for p in range(u.shape[0])])


def gemm_pack_weight(weight, Py_ssize_t groups, int layout=GEMM_LAYOUT_ROWS):
    """Pack a conv weight [c_out, c_in/groups, *kernel] for the microkernel
    (compile-time use for constant weights) in the given layout."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim < 2 or groups < 1 or w.shape[0] % groups:
        raise ValueError(f"gemm_pack_weight: weight must be [C_out, ...] with C_out divisible by "
                         f"groups={groups}, got {w.shape}")
    cdef Py_ssize_t c_out = w.shape[0]
    cdef Py_ssize_t k = w.size // max(c_out, 1)
    wp = np.zeros(max(gemm_packed_floats(c_out, k, groups, layout), 1), dtype=np.float32)
    cdef const float[::1] wv = w.reshape(-1) if w.size else np.zeros(1, np.float32)
    cdef float[::1] pv = wp
    with nogil:
        gemm_pack_weight_into(wv, pv, c_out, k, groups, layout)
    return wp


def gemm_microkernel(weight, x, bias=None, packed=None, out=None, int layout=GEMM_LAYOUT_ROWS):
    """C = W . X (+ bias[:, None]) through the conv microkernel, for tests and
    benchmarks: W [m, k] and X [k, n] float32; the weight is packed here
    unless `packed` (gemm_pack_weight(W, 1, layout)) is given; `out` is C
    [m, n].  GEMM_LAYOUT_CHANNELS runs the small-plane variant (n at most
    GEMM_CHANNELS_MAX_PIXELS; the bias added after the sum)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    xx = np.ascontiguousarray(x, dtype=np.float32)
    if w.ndim != 2 or xx.ndim != 2 or w.shape[1] != xx.shape[0]:
        raise ValueError(f"gemm_microkernel: need W [m, k] and X [k, n], got {w.shape} and {xx.shape}")
    cdef Py_ssize_t m = w.shape[0], k = w.shape[1], n = xx.shape[1]
    c = np.empty((m, n), dtype=np.float32) if out is None else out
    if c.shape != (m, n) or c.dtype != np.float32 or not c.flags.c_contiguous:
        raise ValueError(f"gemm_microkernel: out must be a C-contiguous float32 [{m}, {n}] array")
    if m == 0 or n == 0:
        return c
    if layout == LAYOUT_CHANNELS and n > GEMM_CHANNELS_MAX_PIXELS:
        raise ValueError(f"gemm_microkernel: the channel layout takes at most {GEMM_CHANNELS_MAX_PIXELS} "
                         f"columns, got {n}")
    wp = gemm_pack_weight(w, 1, layout) if packed is None else packed
    if wp.shape[0] < gemm_packed_floats(m, k, 1, layout):
        raise ValueError(f"gemm_microkernel: packed weight has {wp.shape[0]} floats, "
                         f"needs {gemm_packed_floats(m, k, 1, layout)}")
    b = None if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(m)
    cdef const float[::1] pv = wp
    cdef const float[::1] xv = xx.reshape(-1) if xx.size else np.zeros(1, np.float32)
    cdef float[::1] cv = c.reshape(-1)
    cdef const float[::1] bv = b if b is not None else np.zeros(1, np.float32)
    cdef bint has_bias = b is not None
    cdef Epilogue e
    e.act = RLX_ACT_NONE
    e.alpha = e.beta = 0.0
    e.res = NULL
    e.res_len = 0
    with nogil:
        if layout == LAYOUT_CHANNELS:
            rlx_gemm_conv_ch(&pv[0], pv.shape[0], m, k, &xv[0], xv.shape[0], 0, n,
                             &cv[0], cv.shape[0], 0, n, n, 0, (m + RLX_GEMM_CH - 1) // RLX_GEMM_CH,
                             &e if has_bias else NULL, &bv[0] if has_bias else NULL)
        else:
            rlx_gemm_conv(&pv[0], pv.shape[0], m, k, &xv[0], xv.shape[0], 0, n,
                          &cv[0], cv.shape[0], 0, n, n, &bv[0] if has_bias else NULL)
    return c


cdef ConvGeom _geom_from(tuple dims) except *:
    cdef ConvGeom g
    (g.n, g.c_in, g.h, g.w, g.c_out, g.h_out, g.w_out,
     g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups) = dims
    return g


# ---------------------------------------------------------------------------
# Scratch sizing (one formula, used by the compiler and checked by kernels)
# ---------------------------------------------------------------------------

# The 16 transform planes of V and M sit 16 floats further apart than
# their size: with power-of-two channel counts a plain c*tb stride is a
# multiple of 4 KiB and the 16 write streams would fight over the same L1 sets.
cdef inline Py_ssize_t _wino_v_stride(const ConvGeom* g, Py_ssize_t tb) noexcept nogil:
    return g.c_in * tb + 16

cdef inline Py_ssize_t _wino_m_stride(const ConvGeom* g, Py_ssize_t tb) noexcept nogil:
    return g.c_out * tb + 16

cdef inline Py_ssize_t _winograd_slab(const ConvGeom* g, Py_ssize_t tb) noexcept nogil:
    """Floats of per-thread Winograd scratch: V[16, c_in, tb] then M[16, c_out, tb]."""
    return 16 * (_wino_v_stride(g, tb) + _wino_m_stride(g, tb))


def winograd_tile_block(tuple dims, int nthreads, bint packed=False):
    """Tiles per Winograd block.  Large blocks make the 16 GEMMs wide enough
    for BLAS to run near peak; the cap keeps one block's V and M (16 planes
    each) within ~4 MiB, and there are enough blocks to feed every thread.
    `packed` (the GEMMs on the microkernel): whole 16-column panels."""
    cdef ConvGeom g = _geom_from(dims)
    cdef Py_ssize_t nt = g.n * ((g.h_out + 1) // 2) * ((g.w_out + 1) // 2)
    cdef Py_ssize_t per_thread = (nt + nthreads - 1) // max(nthreads, 1)
    cdef Py_ssize_t cap = (4 * 1024 * 1024) // (4 * 16 * (g.c_in + g.c_out))
    cdef Py_ssize_t q = 16 if packed else 8
    cap = min(max(cap // q * q if packed else cap, 16), 1024)
    cdef Py_ssize_t tb = min(max(per_thread, 1), cap)
    if packed and tb < 16:
        # a whole 16-column panel, or every tile (fewer blocks than threads
        # then run staged: every thread on each block)
        tb = min(16, (nt + 7) // 8 * 8)
    if tb > 8:
        tb = (tb + q - 1) // q * q
    return int(tb)


# F(4x4, 3x3): 36 planes of V and M, padded the same way.
cdef inline Py_ssize_t _winograd4_slab(const ConvGeom* g, Py_ssize_t tb) noexcept nogil:
    """Floats of per-thread F(4x4,3x3) scratch: V[36, c_in, tb] then M[36, c_out, tb]."""
    return 36 * (_wino_v_stride(g, tb) + _wino_m_stride(g, tb))


cdef inline Py_ssize_t _winograd4_tiles(const ConvGeom* g) noexcept nogil:
    return g.n * ((g.h_out + 3) // 4) * ((g.w_out + 3) // 4)


# Bytes of one F(4x4,3x3) block's transformed input V.  The block's 36 GEMMs
# each read one V plane while the filter planes stream past: with V in L2
# (1 MiB per Zen 4 core) those reads stay out of L3.  (Measured on one
# thread: V+M within 1 MiB made 256->256 blocks 16 tiles wide, too narrow for
# sgemm; 2-8 MiB of V+M were all within noise of this on 64..128 channels.)
WINOGRAD_F4_BLOCK_BYTES = 1024 * 1024


def winograd4_tile_block(tuple dims, int nthreads, bint packed=False):
    """Tiles per F(4x4,3x3) block: as many as keep one block's V within
    WINOGRAD_F4_BLOCK_BYTES (at least 16, a multiple of 8 for the 8-tile SIMD
    transforms; of 16 with `packed`, the GEMMs on the microkernel, whose
    tiles are 16 columns wide), and no more than give every one of `nthreads`
    threads a block.  `nthreads` is the launch's bound thread count, so a run
    on fewer threads cuts the same blocks and gives bitwise the same result."""
    cdef ConvGeom g = _geom_from(dims)
    cdef Py_ssize_t nt = _winograd4_tiles(&g)
    cdef Py_ssize_t per_thread = (nt + nthreads - 1) // max(nthreads, 1)
    cdef Py_ssize_t cap = WINOGRAD_F4_BLOCK_BYTES // (4 * 36 * g.c_in)
    cdef Py_ssize_t q = 16 if packed else 8
    cap = min(max(cap // q * q, 16), 1024)
    cdef Py_ssize_t tb = min(max(per_thread, 1), cap)
    if packed and tb < 16:
        # a whole 16-column panel, or every tile (fewer blocks than threads
        # then run staged: every thread on each block)
        tb = min(16, (nt + 7) // 8 * 8)
    if tb > 8:
        tb = (tb + q - 1) // q * q
    return int(tb)


def im2col_col_block(tuple dims, int nthreads, bint packed=False):
    """Output columns per im2col work item.  A block of the patch matrix
    (K rows x block columns) holds at most ~1 Mi floats (4 MiB), so it is
    still in cache when its GEMM reads it and the weight is repacked rarely;
    and there are enough (image, group, block) items to give every thread one.
    (Measured on a 2-core AVX2 machine: 1 Mi floats beat 64 Ki and 1 Gi.)
    For the microkernel (`packed`) the block is 64 Ki floats (256 KiB, in L2
    beside the packed weight, which it does not repack): 7x7 stem 70 vs 64
    GFLOP/s, 3x3 s2 64->128 at 56x56 73 vs 71 (1 Mi), 69 and 72 at 32 Ki."""
    cdef ConvGeom g = _geom_from(dims)
    cdef Py_ssize_t k = (g.c_in // g.groups) * g.kh * g.kw
    cdef Py_ssize_t p = g.h_out * g.w_out
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t cb = (64 * 1024 if packed else 1024 * 1024) // max(k, 1)
    cdef Py_ssize_t per_item = (nthreads + items - 1) // items
    cb = max(cb // 16 * 16, 64)
    if per_item > 1:
        cb = min(cb, ((p + per_item - 1) // per_item + 15) // 16 * 16)
    return int(min(cb, p))


def implicit_floats(tuple dims):
    """Floats of one (image, group) input copy of an implicit im2col conv."""
    cdef ConvGeom g = _geom_from(dims)
    cdef ImplicitGeom ig = rlx_implicit_geom_2d(&g)
    return int(rlx_implicit_floats(&ig))


def scratch_floats(tuple dims, int algorithm, int nthreads, int packed=0):
    """Floats of arena scratch an algorithm needs for these dims and threads
    (`packed`: the microkernel layout im2col runs on, 0 for sgemm)."""
    cdef ConvGeom g = _geom_from(dims)
    cdef Py_ssize_t k = (g.c_in // g.groups) * g.kh * g.kw
    cdef Py_ssize_t p = g.h_out * g.w_out
    cdef Py_ssize_t tb
    cdef ImplicitGeom ig = rlx_implicit_geom_2d(&g)
    if algorithm == CONV_IM2COL and packed in (LAYOUT_IMPLICIT, LAYOUT_IMPLICIT_DIRECT):
        return int(rlx_implicit_slot_floats(&ig) * nthreads)
    if algorithm == CONV_IM2COL:
        return int(k * im2col_col_block(dims, nthreads, packed) * nthreads)
    if algorithm == CONV_WINOGRAD:
        tb = winograd_tile_block(dims, nthreads, packed != 0)
        return int(_winograd_slab(&g, tb) * nthreads)
    if algorithm == CONV_DIRECT and depthwise_stride(&g) and rlx_dw_r512_use(&g):   # rows, in place
        return 0
    if algorithm == CONV_DIRECT and depthwise_stride(&g) and rlx_dw_cb_use(&g):   # channel blocks
        return int(rlx_dw_cb_scratch(&g) * nthreads)
    if algorithm == CONV_DIRECT and depthwise_stride(&g) == 2:      # split input rows
        return int(rlx_dw_s2_scratch(&g) * nthreads)
    if algorithm == CONV_DIRECT and depthwise_stride(&g) == 1:      # padded input rows
        return int(rlx_dw_s1_scratch(&g) * nthreads)
    if algorithm == CONV_WINOGRAD_F4:
        tb = winograd4_tile_block(dims, nthreads, packed != 0)
        return int(_winograd4_slab(&g, tb) * nthreads)
    return 0


# ---------------------------------------------------------------------------
# reference: plain loops, double accumulation, constant memory
# ---------------------------------------------------------------------------

cdef int _reference_plane(const float[::1] x, const float[::1] wt, float[::1] y,
                          const ConvGeom* g, Py_ssize_t item) except -1 nogil:
    cdef Py_ssize_t ni = item // g.c_out
    cdef Py_ssize_t co = item % g.c_out
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t ci0 = (co // (g.c_out // g.groups)) * cpg
    cdef Py_ssize_t ho, wo, cil, ki, kj, hi, wi, xb, wb
    cdef double acc
    for ho in range(g.h_out):
        for wo in range(g.w_out):
            acc = 0.0
            for cil in range(cpg):
                xb = (ni * g.c_in + ci0 + cil) * g.h * g.w
                wb = (co * cpg + cil) * g.kh * g.kw
                for ki in range(g.kh):
                    hi = ho * g.sh + ki * g.dh - g.ph
                    if hi < 0 or hi >= g.h:
                        continue
                    for kj in range(g.kw):
                        wi = wo * g.sw + kj * g.dw - g.pw
                        if wi < 0 or wi >= g.w:
                            continue
                        acc += <double>x[xb + hi * g.w + wi] * <double>wt[wb + ki * g.kw + kj]
            y[((ni * g.c_out + co) * g.h_out + ho) * g.w_out + wo] = <float>acc
    return 0


cdef int conv_reference(const float[::1] x, const float[::1] wt, float[::1] y,
                        const ConvGeom* g, const Fused* f, int nthreads) except -1 nogil:
    cdef Py_ssize_t item
    cdef Py_ssize_t plane = g.h_out * g.w_out
    for item in prange(g.n * g.c_out, num_threads=nthreads, schedule='static'):
        work_note(1)
        _reference_plane(x, wt, y, g, item)
        if f.on:
            _epilogue_rows(y, f, item * plane, plane, item % g.c_out, 1, plane)
    return 0


# ---------------------------------------------------------------------------
# im2col + GEMM, in blocks of output columns
# ---------------------------------------------------------------------------

cdef int _im2col_block_row(const float[::1] x, Py_ssize_t x_off, float[::1] col,
                           Py_ssize_t col_off, Py_ssize_t ld, const ConvGeom* g, Py_ssize_t r,
                           Py_ssize_t p0, Py_ssize_t p1) except -1 nogil:
    """Columns [p0, p1) of row r = (ci, ki, kj) of one (image, group)'s patch
    matrix, stored at col[col_off + r * ld + (p - p0)]; zeros in padding.

    conv3d and conv-transpose fill their patch matrices with the shared
    vol2col (src/_vol2col.pxd).  This 2-D copy stays: it decodes a row in 2-D
    and copies whole output rows with one memcpy/memset each, and counted
    with callgrind it fills a 3x3, 32-channel 28x28 block in about 70% of the
    instructions the generic N-d row fill needs (about 8% of the whole conv)."""
    cdef Py_ssize_t khw = g.kh * g.kw
    cdef Py_ssize_t ci = r // khw
    cdef Py_ssize_t ki = (r % khw) // g.kw
    cdef Py_ssize_t kj = r % g.kw
    cdef Py_ssize_t w_out = g.w_out
    cdef Py_ssize_t shift = kj * g.dw - g.pw          # wi = wo * sw + shift
    cdef Py_ssize_t wo_lo, wo_hi
    cdef Py_ssize_t p = p0, ho, ws, we, a, b, hi, dst, src, wo
    out_range(shift, g.sw, g.w, w_out, &wo_lo, &wo_hi)   # columns whose tap is inside the row
    while p < p1:
        ho = p // w_out
        ws = p - ho * w_out
        we = w_out if w_out - ws <= p1 - p else ws + (p1 - p)
        dst = col_off + r * ld + (p - p0) - ws      # col index of output column wo: dst + wo
        hi = ho * g.sh + ki * g.dh - g.ph
        a = wo_lo if wo_lo > ws else ws
        b = wo_hi if wo_hi < we else we
        if hi < 0 or hi >= g.h or a >= b:
            memset(&col[dst + ws], 0, (we - ws) * sizeof(float))
        else:
            if a > ws:
                memset(&col[dst + ws], 0, (a - ws) * sizeof(float))
            src = x_off + (ci * g.h + hi) * g.w + shift
            if g.sw == 1:
                memcpy(&col[dst + a], &x[src + a], (b - a) * sizeof(float))
            else:
                # the last element of each range, so a debug build checks both ends
                col[dst + b - 1]
                x[src + (b - 1) * g.sw]
                rlx_gather_strided(&x[src + a * g.sw], g.sw, &col[dst + a], b - a)
            if b < we:
                memset(&col[dst + b], 0, (we - b) * sizeof(float))
        p += we - ws
    return 0


cdef int _im2col_block_item(const float[::1] x, const float[::1] wt, bint packed, float[::1] y,
                            float[::1] scratch, const ConvGeom* g, const Fused* f, Py_ssize_t item,
                            Py_ssize_t cb, Py_ssize_t col_off) except -1 nogil:
    """One (image, group, column block): fill K x cb of the patch matrix into
    this thread's slab, then one single-threaded GEMM into those columns of y
    (sgemm, or the microkernel when `packed`), then the epilogue on them."""
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t k = cpg * g.kh * g.kw
    cdef Py_ssize_t p = g.h_out * g.w_out
    cdef Py_ssize_t nblk = (p + cb - 1) // cb
    cdef Py_ssize_t blk = item % nblk
    cdef Py_ssize_t ng = item // nblk
    cdef Py_ssize_t ni = ng // g.groups
    cdef Py_ssize_t gi = ng % g.groups
    cdef Py_ssize_t p0 = blk * cb
    cdef Py_ssize_t p1 = p0 + cb if p0 + cb < p else p
    cdef Py_ssize_t x_off = (ni * g.c_in + gi * cpg) * g.h * g.w
    cdef Py_ssize_t r
    cdef Py_ssize_t pf
    for r in range(k):
        _im2col_block_row(x, x_off, scratch, col_off, p1 - p0, g, r, p0, p1)
    if packed:
        pf = rlx_gemm_packed_floats(cog, k)
        rlx_gemm_conv(&wt[gi * pf], wt.shape[0] - gi * pf, cog, k, &scratch[0], scratch.shape[0],
                      col_off, p1 - p0, &y[0], y.shape[0], (ni * g.c_out + gi * cog) * p + p0, p,
                      p1 - p0, NULL)
    else:
        sgemm_rm(False, False, <int>cog, <int>(p1 - p0), <int>k, 1.0, &wt[gi * cog * k], <int>k,
                 &scratch[col_off], <int>(p1 - p0), 0.0, &y[(ni * g.c_out + gi * cog) * p + p0], <int>p)
    if f.on:
        _epilogue_rows(y, f, (ni * g.c_out + gi * cog) * p + p0, p, gi * cog, cog, p1 - p0)
    return 0


cdef int conv_im2col(const float[::1] x, const float[::1] wt, bint packed, float[::1] y,
                     float[::1] scratch, const ConvGeom* g, const Fused* f, Py_ssize_t cb,
                     int nthreads) except -1 nogil:
    """Work items are (image, group, block of cb output columns), one per
    thread at a time with its own K x cb slab; every output element comes from
    one single-threaded GEMM over the same block whatever the thread count."""
    cdef Py_ssize_t k = (g.c_in // g.groups) * g.kh * g.kw
    cdef Py_ssize_t p = g.h_out * g.w_out
    cdef Py_ssize_t items = g.n * g.groups * ((p + cb - 1) // cb)
    cdef Py_ssize_t item
    for item in prange(items, num_threads=nthreads, schedule='static'):
        work_note(1)
        _im2col_block_item(x, wt, packed, y, scratch, g, f, item, cb, threadid() * k * cb)
    return 0


# ---------------------------------------------------------------------------
# 1x1 (stride 1, no padding): the input already is the patch matrix
# ---------------------------------------------------------------------------

cdef int _gemm_1x1_block_item(const float[::1] x, const float[::1] wt, float[::1] y,
                              const ConvGeom* g, const Fused* f, Py_ssize_t item,
                              Py_ssize_t cb) except -1 nogil:
    """One (image, group, block of cb output columns): a single-threaded GEMM
    into those columns, then the epilogue on them while they are in cache."""
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t p = g.h * g.w
    cdef Py_ssize_t nblk = (p + cb - 1) // cb
    cdef Py_ssize_t ng = item // nblk
    cdef Py_ssize_t ni = ng // g.groups
    cdef Py_ssize_t gi = ng % g.groups
    cdef Py_ssize_t p0 = (item % nblk) * cb
    cdef Py_ssize_t p1 = p0 + cb if p0 + cb < p else p
    cdef Py_ssize_t y_off = (ni * g.c_out + gi * cog) * p + p0
    sgemm_rm(False, False, <int>cog, <int>(p1 - p0), <int>cpg, 1.0, &wt[gi * cog * cpg], <int>cpg,
             &x[(ni * g.c_in + gi * cpg) * p + p0], <int>p, 0.0, &y[y_off], <int>p)
    _epilogue_rows(y, f, y_off, p, gi * cog, cog, p1 - p0)
    return 0


cdef inline Py_ssize_t gemm_column_chunks(Py_ssize_t items, Py_ssize_t p, int split) noexcept nogil:
    """Column chunks per (image, group) for the microkernel: one when the
    (image, group) items already split evenly over `split` threads, else
    `split` chunks (so batch 1 feeds every core); chunks of at least two
    16-column panels."""
    if split <= 1 or items % split == 0:
        return 1
    if p < 32 * split:
        return max(1, p // 32)
    return split


cdef int conv_gemm_1x1_channels(const float[::1] x, const float[::1] wq, const Fused* f,
                                float[::1] y, const ConvGeom* g, int split,
                                int nthreads) except -1 nogil:
    """Small planes on the channel-panel kernel: work items are (image, group,
    run of 16-channel panels), `split` runs per (image, group) unless those
    items already split evenly over `split` threads.  Each output element's
    sum is the same whatever the runs, so the result depends on neither split
    nor nthreads."""
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t p = g.h * g.w
    cdef Py_ssize_t pf = rlx_gemm_ch_packed_floats(cog, cpg)
    cdef Py_ssize_t base = g.n * g.groups
    cdef Py_ssize_t panels = (cog + RLX_GEMM_CH - 1) // RLX_GEMM_CH
    cdef Py_ssize_t runs = 1 if split <= 1 or base % split == 0 else min(split, panels)
    cdef Py_ssize_t item, ni, gi, ng, r
    if p > RLX_GEMM_CH_MAX_N:
        with gil:
            raise ValueError(f"conv2d 1x1: channel-panel kernel on a plane of {p} pixels "
                             f"(at most {RLX_GEMM_CH_MAX_N})")
    for item in prange(base * runs, num_threads=nthreads, schedule='static'):
        work_note(1)
        ng = item // runs
        r = item % runs
        ni = ng // g.groups
        gi = ng % g.groups
        rlx_gemm_conv_ch(&wq[gi * pf], wq.shape[0] - gi * pf, cog, cpg, &x[0], x.shape[0],
                         (ni * g.c_in + gi * cpg) * p, p, &y[0], y.shape[0], (ni * g.c_out + gi * cog) * p, p, p,
                         panels * r // runs, panels * (r + 1) // runs,
                         &f.e if f.on else NULL, f.bias + gi * cog if f.bias != NULL else NULL)
    return 0


cdef int conv_gemm_1x1_packed(const float[::1] x, const float[::1] wp, const Fused* f,
                              float[::1] y, const ConvGeom* g, int split,
                              int nthreads) except -1 nogil:
    """Work items are (image, group, column chunk), the chunks decided by
    `split` alone; every output element's sum runs in the same order in any
    chunk, so the result depends on neither split nor nthreads."""
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t p = g.h * g.w
    cdef Py_ssize_t pf = rlx_gemm_packed_floats(cog, cpg)
    cdef Py_ssize_t base = g.n * g.groups
    cdef Py_ssize_t chunks = gemm_column_chunks(base, p, split)
    cdef Py_ssize_t width = ((p + chunks - 1) // chunks + RLX_GEMM_NR - 1) // RLX_GEMM_NR * RLX_GEMM_NR
    cdef Py_ssize_t item, ni, gi, ng, j0, j1
    for item in prange(base * chunks, num_threads=nthreads, schedule='static'):
        work_note(1)
        ng = item // chunks
        ni = ng // g.groups
        gi = ng % g.groups
        j0 = (item % chunks) * width
        j1 = j0 + width if j0 + width < p else p
        if j0 < j1:
            # the epilogue runs inside, on each block of columns as it is finished
            rlx_gemm_conv_ep(&wp[gi * pf], wp.shape[0] - gi * pf, cog, cpg, &x[0], x.shape[0],
                             (ni * g.c_in + gi * cpg) * p + j0, p, &y[0], y.shape[0],
                             (ni * g.c_out + gi * cog) * p + j0, p, j1 - j0,
                             NULL, &f.e if f.on else NULL, f.bias + gi * cog if f.bias != NULL else NULL)
    return 0


# A 1x1 conv on 1x1 planes of at most this many input channels runs as one
# GEMM over the batch, above it as a matrix-vector product per image.
# Measured, kernel us at batch 8, 1 thread, one GEMM / one per image (and
# the former per-image GEMM with a one-float epilogue span per channel):
# 10 -> 160 sigmoid 1.37 / 2.71 (9.33), 16 -> 64 sigmoid 0.90 / 1.15 (3.85),
# 24 -> 72 hard sigmoid 1.05 / 1.12 (3.87), 64 -> 256 sigmoid 7.87 / 5.67
# (15.6), 256 -> 64 relu 7.24 / 4.29 (6.23), 336 -> 14 silu 3.31 / 1.78
# (2.29), 1024 -> 1000 432 / 349 (367).  At batch 1 both are one
# matrix-vector product (1024 -> 1000: 43.0 against 45.9 before; 64 -> 256
# sigmoid 0.80 against 2.10).
cdef enum:
    PLANE1_ONE_GEMM_MAX_CIN = 32
    # At most this many images (with more than PLANE1_ONE_GEMM_MAX_CIN input
    # channels): rlx_gemm_nt, the dense layer's kernel, with blocks of output
    # channels over the threads, instead of a matrix-vector sgemm per image
    # on one thread.  EfficientNet-V2-S batch 1, its squeeze-and-excitation
    # convs summed (plan.profile, 9 alternating rounds): 1.58 -> 1.04 ms at 2
    # threads, 1.50 -> 1.62 ms at 1 (the sgemv is the faster kernel alone);
    # whole plans, pair ratios of 25: V2-S 1.004 (1 thread) / 1.026 (2),
    # B0 0.994 / 1.010, MobileNetV3-small 1.012 / 1.003.
    PLANE1_GEMM_NT_MAX_N = 16


cdef inline void _epilogue_channels(float[::1] y, const Fused* f, Py_ssize_t off,
                                    Py_ssize_t nch) noexcept nogil:
    """The epilogue on one image of a 1x1 plane: its nch channels are the
    consecutive floats from y[off].  The bias goes in first, as a vector;
    the span then adds the residual and applies the activation over all
    channels at once, the same arithmetic ((y + b) + r, then act) as a span
    per channel."""
    cdef Py_ssize_t c
    if f.bias != NULL:
        for c in range(nch):
            y[off + c] = y[off + c] + f.bias[c]
    rlx_epilogue_span(&y[0], y.shape[0], off, nch, 0.0, &f.e, rlx_simd_level())


cdef int conv_gemm_1x1_plane1(const float[::1] x, const float[::1] wt, float[::1] y,
                              const ConvGeom* g, const Fused* f, int split,
                              int nthreads) except -1 nogil:
    """A 1x1 conv (groups 1) on 1x1 planes, such as a squeeze-and-excitation
    block's: x is [N, C] and y [N, M].  With few input channels the whole
    batch is one GEMM y = x W^T (one sgemm in `split` column panels, whose
    result depends on split alone); else, for up to PLANE1_GEMM_NT_MAX_N
    images, rlx_gemm_nt over blocks of 4 output channels per thread (the
    same sums at any split), else one matrix-vector product per image;
    then the epilogue on each image's M consecutive channels as one
    span (PLANE1_ONE_GEMM_MAX_CIN).  A span per channel of one float cost
    most of the time before (14 -> 336 on 8 images with a sigmoid: 19 us,
    now 3)."""
    cdef Py_ssize_t ni, part, parts
    if g.c_in > PLANE1_ONE_GEMM_MAX_CIN and g.n <= PLANE1_GEMM_NT_MAX_N:
        # whole blocks of 4 output channels per thread: the same sums at any split
        parts = rlx_gemm_nt_parts(g.c_out, nthreads)
        for part in prange(parts, num_threads=nthreads, schedule='static'):
            work_note(1)
            rlx_gemm_nt_part(&x[0], x.shape[0], g.c_in, &wt[0], wt.shape[0], g.c_in, &y[0], y.shape[0], g.c_out,
                             g.n, g.c_out, g.c_in, part, parts, 1.0)
        if f.on:
            for ni in range(g.n):
                _epilogue_channels(y, f, ni * g.c_out, g.c_out)
        return 0
    if g.c_in > PLANE1_ONE_GEMM_MAX_CIN:
        for ni in prange(g.n, num_threads=nthreads, schedule='static'):
            work_note(1)
            sgemm_rm(False, False, <int>g.c_out, 1, <int>g.c_in, 1.0, &wt[0], <int>g.c_in, &x[ni * g.c_in], 1,
                     0.0, &y[ni * g.c_out], 1)
            if f.on:
                _epilogue_channels(y, f, ni * g.c_out, g.c_out)
        return 0
    sgemm_rm_split(False, True, <int>g.n, <int>g.c_out, <int>g.c_in, 1.0, &x[0], <int>g.c_in, &wt[0],
                   <int>g.c_in, 0.0, &y[0], <int>g.c_out, split, nthreads)
    if f.on:
        for ni in prange(g.n, num_threads=nthreads, schedule='static'):
            work_note(1)
            _epilogue_channels(y, f, ni * g.c_out, g.c_out)
    return 0


cdef int conv_gemm_1x1(const float[::1] x, const float[::1] wt, float[::1] y,
                       const ConvGeom* g, const Fused* f, Py_ssize_t cb, int split,
                       int nthreads) except -1 nogil:
    # split: the thread count the launch was bound for, which alone decides
    # how the work is cut (the result does not depend on nthreads)
    cdef Py_ssize_t cpg = g.c_in // g.groups
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t p = g.h * g.w
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t item, ni, gi
    if p == 1 and g.groups == 1:
        return conv_gemm_1x1_plane1(x, wt, y, g, f, split, nthreads)
    if f.on and cb > 0:
        # With an epilogue: blocks of output columns, each finished (GEMM, bias,
        # residual, activation) while it is in cache.
        for item in prange(items * ((p + cb - 1) // cb), num_threads=nthreads, schedule='static'):
            work_note(1)
            _gemm_1x1_block_item(x, wt, y, g, f, item, cb)
        return 0
    if split > 1 and items >= split:
        for item in prange(items, num_threads=nthreads, schedule='static'):
            work_note(1)
            ni = item // g.groups
            gi = item % g.groups
            sgemm_rm(False, False, <int>cog, <int>p, <int>cpg, 1.0, &wt[gi * cog * cpg], <int>cpg,
                     &x[(ni * g.c_in + gi * cpg) * p], <int>p, 0.0,
                     &y[(ni * g.c_out + gi * cog) * p], <int>p)
        return 0
    for item in range(items):
        ni = item // g.groups
        gi = item % g.groups
        sgemm_rm_split(False, False, <int>cog, <int>p, <int>cpg, 1.0, &wt[gi * cog * cpg], <int>cpg,
                       &x[(ni * g.c_in + gi * cpg) * p], <int>p, 0.0,
                       &y[(ni * g.c_out + gi * cog) * p], <int>p, split, nthreads)
    return 0


# ---------------------------------------------------------------------------
# direct (stride 1, dilation 1, any padding): contiguous row updates;
# depthwise 3x3/5x5 at stride 1 or 2: their own plane kernels
# ---------------------------------------------------------------------------

cdef inline int depthwise_stride(const ConvGeom* g) noexcept nogil:
    """1 or 2 for a depthwise conv (groups == c_in == c_out) with a 3x3 or
    5x5 kernel, dilation 1 and that stride in both axes, whose columns fit
    the AVX2 kernels' 32-bit lane indices (rlx_cpu.algorithms.is_depthwise_3x3_5x5
    is the same test); 0 for any other conv."""
    if not (g.groups == g.c_in and g.c_in == g.c_out and g.kh == g.kw and (g.kh == 3 or g.kh == 5)
            and g.dh == 1 and g.dw == 1 and g.sh == g.sw and (g.sh == 1 or g.sh == 2)):
        return 0
    if max(g.w, 2 * g.w_out) + g.pw + 64 >= (<Py_ssize_t>1) << 31:
        return 0
    return <int>g.sh


cdef int conv_direct(const float[::1] x, const float[::1] wt, float[::1] y,
                     const ConvGeom* g, const Fused* f, int nthreads) except -1 nogil:
    cdef Py_ssize_t item
    cdef Py_ssize_t plane = g.h_out * g.w_out
    for item in prange(g.n * g.c_out, num_threads=nthreads, schedule='static'):
        work_note(1)
        rlx_direct_plane(&x[0], x.shape[0], &wt[0], &y[0], y.shape[0], g, item)
        if f.on:
            _epilogue_rows(y, f, item * plane, plane, item % g.c_out, 1, plane)
    return 0


cdef int conv_depthwise(const float[::1] x, const float[::1] wt, const float[::1] bias,
                        bint has_bias, const Epilogue* e, float[::1] y, float[::1] scratch,
                        const ConvGeom* g, int split, int nthreads) except -1 nogil:
    """Depthwise (groups == c_in == c_out) 3x3/5x5 conv at stride 1 or 2,
    bias fused, and the epilogue e (NULL: none) on each row, plane or channel
    block as soon as it is written.  The work units -- on AVX-512 whole
    (image, channel) planes for the convs the zmm row kernel takes
    (rlx_dw_r512_use: most 3x3s of at least 12 output columns at stride 1
    and of 10 at stride 2, the 5x5s at stride 2 whose 16-column blocks are
    mostly outputs, and the 5x5s at stride 1 on planes 4 KiB apart; read
    and written in place);
    else blocks of 8 or 16 channels of one image on small planes
    (rlx_dw_cb_use); else output rows of all (image, channel) planes, counted
    plane after plane, at stride 1, whole planes at stride 2 -- are cut into
    `split` contiguous runs, split being
    the thread count the launch was bound for; a run on fewer threads takes
    several runs each.  Every output is computed by the same operations
    whichever run holds it, so the result never depends on either count.
    Each thread has its own slab of scratch (the AVX2 variants' padded,
    split or interleaved rows)."""
    cdef bint s2 = depthwise_stride(g) == 2
    cdef bint rows512 = rlx_dw_r512_use(g) != 0
    cdef bint cb = rlx_dw_cb_use(g) != 0
    cdef Py_ssize_t units = rlx_dw_cb_items(g) if cb else g.n * g.c_out * (1 if s2 else g.h_out)
    cdef Py_ssize_t runs = split if split < units else units
    cdef Py_ssize_t slab = rlx_dw_cb_scratch(g) if cb else (rlx_dw_s2_scratch(g) if s2 else rlx_dw_s1_scratch(g))
    cdef Py_ssize_t r, lo, hi
    cdef const float* b = &bias[0] if has_bias else NULL
    if rows512:
        # whole (image, channel) planes, read and written in place
        units = g.n * g.c_out
        runs = split if split < units else units
        for r in prange(runs, num_threads=nthreads, schedule='static'):
            lo = units * r // runs
            hi = units * (r + 1) // runs
            work_note(hi - lo)
            rlx_dw_r512_run(&x[0], x.shape[0], &wt[0], b, &y[0], y.shape[0], g, e, lo, hi)
        return 0
    if runs < 1:
        return 0
    if scratch.shape[0] < slab * nthreads:
        with gil:
            raise ValueError(f"conv2d depthwise stride {2 if s2 else 1}: scratch of {scratch.shape[0]} floats, "
                             f"needs {slab * nthreads}")
    for r in prange(runs, num_threads=nthreads, schedule='static'):
        lo = units * r // runs
        hi = units * (r + 1) // runs
        work_note(hi - lo)
        if cb:
            rlx_dw_cb_run(&x[0], x.shape[0], &wt[0], b, &y[0], y.shape[0], &scratch[threadid() * slab], slab,
                          g, e, lo, hi)
        elif s2:
            rlx_dw_s2_planes(&x[0], x.shape[0], &wt[0], b, &y[0], y.shape[0], &scratch[threadid() * slab], slab,
                             g, e, lo, hi)
        else:
            rlx_dw_s1_rows(&x[0], x.shape[0], &wt[0], b, &y[0], y.shape[0], &scratch[threadid() * slab], slab,
                           g, e, lo, hi)
    return 0


# ---------------------------------------------------------------------------
# Winograd F(2x2, 3x3)
#   Y = A^T [ (G g G^T) . (B^T d B) ] A on 4x4 input tiles d -> 2x2 outputs.
#   The filter transform U[16, c_out, c_in] is computed once (at compile time
#   for constant weights); a run transforms input tiles block by block, does 16
#   GEMMs per block and scatters the inverse-transformed outputs.
# ---------------------------------------------------------------------------

# Filters per block of the filter transforms.  U is position-major
# (U[k, c_out, c_in]), so writing each filter's 16 or 36 values straight to
# U strides by c_out * c_in floats: for a power-of-two channel product every
# one of those streams falls into the same L1 set and each store misses
# (256 -> 256 channels took 7 ms).  A block transforms FILTER_BLOCK filters
# at once (rlx_wino_filter_block), writing k contiguous runs.
cdef enum:
    FILTER_BLOCK = 64


cdef extern from *:
    """
    /* Filters p0 .. p0 + cnt - 1 (cnt <= 64) of w[pairs][9] into U[k][pairs]:
       transposed first so that every step below runs across the block's
       filters, contiguous loops the compiler vectorises, and every U row gets
       one contiguous run.  F(4x4,3x3) keeps its double intermediates (its
       G has 1/6 and 1/24). */
    static void rlx_wino_filter_block(const float* w, float* u, Py_ssize_t pairs, Py_ssize_t p0,
                                      Py_ssize_t cnt, int tile)
    {
        float g[9][64];
        Py_ssize_t p, j, i;
        for (p = 0; p < cnt; p++)
            for (j = 0; j < 9; j++)
                g[j][p] = w[(p0 + p) * 9 + j];
        if (tile == 2) {
            float t[4][3][64];
            for (j = 0; j < 3; j++)
                for (p = 0; p < cnt; p++) {            /* t = G g (4x3) */
                    float r0 = g[j][p], r1 = g[3 + j][p], r2 = g[6 + j][p];
                    t[0][j][p] = r0;
                    t[1][j][p] = 0.5f * (r0 + r1 + r2);
                    t[2][j][p] = 0.5f * (r0 - r1 + r2);
                    t[3][j][p] = r2;
                }
            for (i = 0; i < 4; i++) {                  /* u = t G^T (4x4) */
                float* o = u + (4 * i) * pairs + p0;
                for (p = 0; p < cnt; p++) {
                    float r0 = t[i][0][p], r1 = t[i][1][p], r2 = t[i][2][p];
                    o[p] = r0;
                    o[pairs + p] = 0.5f * (r0 + r1 + r2);
                    o[2 * pairs + p] = 0.5f * (r0 - r1 + r2);
                    o[3 * pairs + p] = r2;
                }
            }
        } else {
            /* products with the reciprocals, not divisions (several times
               slower); in double the difference is far below float rounding */
            const double S6 = 1.0 / 6.0, S24 = 1.0 / 24.0;
            double t[6][3][64];
            for (j = 0; j < 3; j++)
                for (p = 0; p < cnt; p++) {            /* t = G g (6x3) */
                    double r0 = g[j][p], r1 = g[3 + j][p], r2 = g[6 + j][p];
                    t[0][j][p] = r0 * 0.25;
                    t[1][j][p] = -(r0 + r1 + r2) * S6;
                    t[2][j][p] = -(r0 - r1 + r2) * S6;
                    t[3][j][p] = (r0 + 2.0 * r1 + 4.0 * r2) * S24;
                    t[4][j][p] = (r0 - 2.0 * r1 + 4.0 * r2) * S24;
                    t[5][j][p] = r2;
                }
            for (i = 0; i < 6; i++) {                  /* u = t G^T (6x6) */
                float* o = u + (6 * i) * pairs + p0;
                for (p = 0; p < cnt; p++) {
                    double r0 = t[i][0][p], r1 = t[i][1][p], r2 = t[i][2][p];
                    o[p] = (float)(r0 * 0.25);
                    o[pairs + p] = (float)(-(r0 + r1 + r2) * S6);
                    o[2 * pairs + p] = (float)(-(r0 - r1 + r2) * S6);
                    o[3 * pairs + p] = (float)((r0 + 2.0 * r1 + 4.0 * r2) * S24);
                    o[4 * pairs + p] = (float)((r0 - 2.0 * r1 + 4.0 * r2) * S24);
                    o[5 * pairs + p] = (float)r2;
                }
            }
        }
    }
    """
    void rlx_wino_filter_block(const float* w, float* u, Py_ssize_t pairs, Py_ssize_t p0,
                               Py_ssize_t cnt, int tile) noexcept nogil


cdef int _filter_transform_into(const float[::1] w, float[::1] u, Py_ssize_t c_out, Py_ssize_t c_in,
                                int tile, int nthreads) except -1 nogil:
    """U[k, co, ci] for every filter, k < 16 (tile 2) or 36 (tile 4), over
    blocks of FILTER_BLOCK filters split across threads."""
    cdef Py_ssize_t pairs = c_out * c_in, nblk = (pairs + FILTER_BLOCK - 1) // FILTER_BLOCK
    cdef Py_ssize_t blk
    if pairs == 0:
        return 0
    if w.shape[0] < pairs * 9 or u.shape[0] < (16 if tile == 2 else 36) * pairs:
        with gil:
            raise ValueError(f"winograd filter transform: {c_out}x{c_in} filters need {pairs * 9} weights and "
                             f"a U of {(16 if tile == 2 else 36) * pairs} floats, got {w.shape[0]} and {u.shape[0]}")
    for blk in prange(nblk, num_threads=nthreads, schedule='static'):
        work_note(1)
        rlx_wino_filter_block(&w[0], &u[0], pairs, blk * FILTER_BLOCK,
                              min(FILTER_BLOCK, pairs - blk * FILTER_BLOCK), tile)
    return 0


cdef int winograd_filter_transform_into(const float[::1] w, float[::1] u, Py_ssize_t c_out,
                                        Py_ssize_t c_in, int nthreads) except -1 nogil:
    return _filter_transform_into(w, u, c_out, c_in, 2, nthreads)


def winograd_filter_transform(weight):
    """U[16, c_out, c_in] for a [c_out, c_in, 3, 3] float32 weight (compile-time use)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd_filter_transform: weight must be [C_out, C_in, 3, 3], got {w.shape}")
    u = np.empty((16, w.shape[0], w.shape[1]), dtype=np.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] uv = u.reshape(-1)
    cdef Py_ssize_t co = w.shape[0], ci = w.shape[1]
    with nogil:
        winograd_filter_transform_into(wv, uv, co, ci, 1)
    return u


cdef inline void _wino_tile_gemms(const float[::1] u, float[::1] scratch, const ConvGeom* g, Py_ssize_t p0,
                                  Py_ssize_t planes, Py_ssize_t v_off, Py_ssize_t vps, Py_ssize_t m_off,
                                  Py_ssize_t mps, Py_ssize_t tb, Py_ssize_t cnt, bint packed) noexcept nogil:
    """M[p] = U[p] . V[p] for the transform positions p in [p0, p0 + planes)
    of a block of cnt tiles (V, M planes tb columns wide in scratch): on the
    microkernel with U[p] in its 6-row panels (winograd_pack_u), else on
    sgemm."""
    cdef Py_ssize_t pf = rlx_gemm_packed_floats(g.c_out, g.c_in)
    cdef Py_ssize_t p
    for p in range(p0, p0 + planes):
        if packed:
            rlx_gemm_conv(&u[p * pf], pf, g.c_out, g.c_in, &scratch[0], scratch.shape[0], v_off + p * vps, tb,
                          &scratch[0], scratch.shape[0], m_off + p * mps, tb, cnt, NULL)
        else:
            sgemm_rm(False, False, <int>g.c_out, <int>cnt, <int>g.c_in, 1.0,
                     &u[p * g.c_out * g.c_in], <int>g.c_in,
                     &scratch[v_off + p * vps], <int>tb, 0.0,
                     &scratch[m_off + p * mps], <int>tb)


cdef int _winograd_block(const float[::1] x, const float[::1] u, const float[::1] bias,
                         bint has_bias, const Epilogue* epi, float[::1] y, float[::1] scratch,
                         const ConvGeom* g,
                         Py_ssize_t blk, Py_ssize_t tb, Py_ssize_t nt,
                         Py_ssize_t slab, bint packed) except -1 nogil:
    cdef Py_ssize_t t0 = blk * tb
    cdef Py_ssize_t cnt = nt - t0 if nt - t0 < tb else tb
    cdef Py_ssize_t vps = _wino_v_stride(g, tb), mps = _wino_m_stride(g, tb)
    cdef Py_ssize_t v_off = slab
    cdef Py_ssize_t m_off = slab + 16 * vps
    rlx_wino_input(&x[0], x.shape[0], &scratch[v_off], g, t0, cnt, tb, vps)
    _wino_tile_gemms(u, scratch, g, 0, 16, v_off, vps, m_off, mps, tb, cnt, packed)
    rlx_wino_output(&scratch[m_off], &y[0], y.shape[0], &bias[0] if has_bias else NULL,
                    epi, g, t0, cnt, tb, mps)
    return 0


cdef int _winograd_staged(const float[::1] x, const float[::1] u, const float[::1] bias, bint has_bias,
                          const Epilogue* epi, float[::1] y, float[::1] scratch, const ConvGeom* g,
                          Py_ssize_t blk, Py_ssize_t tb, Py_ssize_t nt, bint f4, bint packed,
                          int nthreads) except -1 nogil:
    """One block of tiles on every thread (fewer blocks than bound threads):
    the input transform in chunks of 8 tiles, then the tile GEMMs split by
    transform position, then the output transform in the same chunks, all in
    thread 0's slab.  The path and its chunks are fixed when the launch is
    bound, so the bits do not depend on the thread count a run uses."""
    cdef Py_ssize_t planes = 36 if f4 else 16
    cdef Py_ssize_t t0 = blk * tb
    cdef Py_ssize_t cnt = nt - t0 if nt - t0 < tb else tb
    cdef Py_ssize_t vps = _wino_v_stride(g, tb), mps = _wino_m_stride(g, tb)
    cdef Py_ssize_t m_off = planes * vps
    cdef Py_ssize_t nch = (cnt + 7) // 8
    cdef Py_ssize_t c, j0, cj, p
    for c in prange(nch, num_threads=nthreads, schedule='static'):
        work_note(1)
        j0 = c * 8
        cj = cnt - j0 if cnt - j0 < 8 else 8
        if f4:
            rlx_wino4_input(&x[0], x.shape[0], &scratch[j0], g, t0 + j0, cj, tb, vps)
        else:
            rlx_wino_input(&x[0], x.shape[0], &scratch[j0], g, t0 + j0, cj, tb, vps)
    for p in prange(planes, num_threads=nthreads, schedule='static'):
        work_note(1)
        _wino_tile_gemms(u, scratch, g, p, 1, 0, vps, m_off, mps, tb, cnt, packed)
    for c in prange(nch, num_threads=nthreads, schedule='static'):
        work_note(1)
        j0 = c * 8
        cj = cnt - j0 if cnt - j0 < 8 else 8
        if f4:
            rlx_wino4_output(&scratch[m_off + j0], &y[0], y.shape[0], &bias[0] if has_bias else NULL,
                             epi, g, t0 + j0, cj, tb, mps)
        else:
            rlx_wino_output(&scratch[m_off + j0], &y[0], y.shape[0], &bias[0] if has_bias else NULL,
                            epi, g, t0 + j0, cj, tb, mps)
    return 0


cdef int conv_winograd(const float[::1] x, const float[::1] u, const float[::1] bias,
                       bint has_bias, const Epilogue* epi, float[::1] y, float[::1] scratch,
                       const ConvGeom* g, Py_ssize_t tb, int nthreads, bint packed=False,
                       bint staged=False) except -1 nogil:
    """The bias is added by the output transform; `epi` (NULL: none) adds the
    residual and applies the activation to each run of tiles as it is written.
    staged: each block on every thread (_winograd_staged)."""
    cdef Py_ssize_t nt = g.n * ((g.h_out + 1) // 2) * ((g.w_out + 1) // 2)
    cdef Py_ssize_t nblocks = (nt + tb - 1) // tb
    cdef Py_ssize_t slab = _winograd_slab(g, tb)
    cdef Py_ssize_t blk
    if staged:
        for blk in range(nblocks):
            _winograd_staged(x, u, bias, has_bias, epi, y, scratch, g, blk, tb, nt, False, packed, nthreads)
        return 0
    for blk in prange(nblocks, num_threads=nthreads, schedule='static'):
        work_note(1)
        _winograd_block(x, u, bias, has_bias, epi, y, scratch, g, blk, tb, nt, threadid() * slab, packed)
    return 0


# ---------------------------------------------------------------------------
# Winograd F(4x4, 3x3) (Lavin & Gray; interpolation points 0, +-1, +-2, inf)
#   Y = A^T [ (G g G^T) . (B^T d B) ] A on 6x6 input tiles d -> 4x4 outputs.
#   Same scheme as F(2x2, 3x3): U[36, c_out, c_in] once, then per block of
#   tiles the input transform, 36 GEMMs [c_out x c_in] . [c_in x tiles] and
#   the output transform with the bias.  B and A are in src/rlx_simd.h.
#   Points: in a numpy float32 emulation on ResNet-like data (normal input,
#   He-scaled weights, C_in 16..512) 0, +-1, +-2 and 0, +-1, +-1/2 gave the
#   same error within seed noise (max 2.7e-6..1.4e-5 of the result's
#   magnitude); the asymmetric 0, -1, 1, 1/2, -2 was about 3x smaller but
#   loses the even/odd pairing that keeps B^T and A^T at a few adds per
#   column, and all are far inside the 1e-4 bound.
# ---------------------------------------------------------------------------

cdef int winograd4_filter_transform_into(const float[::1] w, float[::1] u, Py_ssize_t c_out,
                                         Py_ssize_t c_in, int nthreads) except -1 nogil:
    return _filter_transform_into(w, u, c_out, c_in, 4, nthreads)


def winograd4_filter_transform(weight):
    """U[36, c_out, c_in] for a [c_out, c_in, 3, 3] float32 weight (compile-time use)."""
    w = np.ascontiguousarray(weight, dtype=np.float32)
    if w.ndim != 4 or w.shape[2:] != (3, 3):
        raise ValueError(f"winograd4_filter_transform: weight must be [C_out, C_in, 3, 3], got {w.shape}")
    u = np.empty((36, w.shape[0], w.shape[1]), dtype=np.float32)
    cdef const float[::1] wv = w.reshape(-1)
    cdef float[::1] uv = u.reshape(-1)
    cdef Py_ssize_t co = w.shape[0], ci = w.shape[1]
    with nogil:
        winograd4_filter_transform_into(wv, uv, co, ci, 1)
    return u


cdef int _winograd4_block(const float[::1] x, const float[::1] u, const float[::1] bias,
                          bint has_bias, const Epilogue* epi, float[::1] y, float[::1] scratch,
                          const ConvGeom* g,
                          Py_ssize_t blk, Py_ssize_t tb, Py_ssize_t nt,
                          Py_ssize_t slab, bint packed) except -1 nogil:
    cdef Py_ssize_t t0 = blk * tb
    cdef Py_ssize_t cnt = nt - t0 if nt - t0 < tb else tb
    cdef Py_ssize_t vps = _wino_v_stride(g, tb), mps = _wino_m_stride(g, tb)
    cdef Py_ssize_t v_off = slab
    cdef Py_ssize_t m_off = slab + 36 * vps
    rlx_wino4_input(&x[0], x.shape[0], &scratch[v_off], g, t0, cnt, tb, vps)
    _wino_tile_gemms(u, scratch, g, 0, 36, v_off, vps, m_off, mps, tb, cnt, packed)
    rlx_wino4_output(&scratch[m_off], &y[0], y.shape[0], &bias[0] if has_bias else NULL,
                     epi, g, t0, cnt, tb, mps)
    return 0


cdef int conv_winograd4(const float[::1] x, const float[::1] u, const float[::1] bias,
                        bint has_bias, const Epilogue* epi, float[::1] y, float[::1] scratch,
                        const ConvGeom* g, Py_ssize_t tb, int nthreads, bint packed=False,
                        bint staged=False) except -1 nogil:
    """Blocks of tb tiles (tb fixed at compile time from the bound thread
    count), one per thread at a time; each block's 36 GEMMs are
    single-threaded, so the result does not depend on nthreads.  The output
    transform adds the bias; `epi` (NULL: none) adds the residual and applies
    the activation to each run of tiles as it is written.  staged (fewer
    blocks than bound threads, fixed at bind): each block on every thread
    (_winograd_staged)."""
    cdef Py_ssize_t nt = _winograd4_tiles(g)
    cdef Py_ssize_t nblocks = (nt + tb - 1) // tb
    cdef Py_ssize_t slab = _winograd4_slab(g, tb)
    cdef Py_ssize_t blk
    if staged:
        for blk in range(nblocks):
            _winograd_staged(x, u, bias, has_bias, epi, y, scratch, g, blk, tb, nt, True, packed, nthreads)
        return 0
    for blk in prange(nblocks, num_threads=nthreads, schedule='static'):
        work_note(1)
        _winograd4_block(x, u, bias, has_bias, epi, y, scratch, g, blk, tb, nt, threadid() * slab, packed)
    return 0


# ---------------------------------------------------------------------------
# Launches: a thunk bound to one arena's memory, run by the executor.
# ---------------------------------------------------------------------------

cdef class Conv2DLaunch(Launch):
    """Conv2D with its fused epilogue, bound to arena views:
    y = act(conv(x, weight) + bias[c] + residual), each part optional.

    `weight` holds the raw weight, for Winograd the transformed U[16, c_out,
    c_in] (F(2x2,3x3)) or U[36, c_out, c_in] (F(4x4,3x3)), or when `packed`
    (gemm_1x1 and im2col) the weight packed for the microkernel
    (gemm_pack_weight).  `max_threads` is the thread count the scratch was
    sized for;
    `block` is the work-item size chosen at compile time (Winograd: tiles per
    block, im2col and 1x1 with an epilogue: output columns per block).
    `act` is one of the ACT_* codes with its parameters alpha, beta (the
    elementwise ops' meaning); `residual` (or None) has y's shape.  Every
    algorithm applies the epilogue to the output it has just computed (a
    plane, a column block, a run of Winograd tiles), so no separate pass over
    y runs."""
    cdef const float[::1] x
    cdef const float[::1] weight
    cdef const float[::1] bias
    cdef const float[::1] residual
    cdef float[::1] y
    cdef float[::1] scratch
    cdef ConvGeom g
    cdef int algorithm
    cdef bint has_bias
    cdef int packed
    cdef Py_ssize_t block
    cdef Fused fused
    cdef Py_ssize_t[::1] offs       # LAYOUT_IMPLICIT: the taps' offsets into the input copy
    cdef bint staged                # Winograd with fewer tile blocks than bound threads

    def __init__(self, x, weight, bias, y, scratch, tuple dims, int algorithm,
                 int max_threads, Py_ssize_t block=0, int act=RLX_ACT_NONE, float alpha=0.0,
                 float beta=0.0, residual=None, int packed=0):
        self.x = x
        self.weight = weight
        self.has_bias = bias is not None
        self.bias = or_placeholder(bias, np.float32)
        self.y = y
        self.scratch = or_placeholder(scratch, np.float32)
        self.g = _geom_from(dims)
        self.algorithm = algorithm
        self.max_threads = max(1, max_threads)
        self.block = block
        if not RLX_ACT_NONE <= act <= RLX_ACT_SILU:
            raise ValueError(f"Conv2DLaunch: unknown activation code {act}")
        if self.has_bias and self.bias.shape[0] < self.g.c_out:
            raise ValueError(f"Conv2DLaunch: bias holds {self.bias.shape[0]} values, need {self.g.c_out}")
        self.residual = or_placeholder(residual, np.float32)
        if residual is not None and self.residual.shape[0] != self.y.shape[0]:
            raise ValueError(f"Conv2DLaunch: residual holds {self.residual.shape[0]} values, "
                             f"y {self.y.shape[0]}")
        self.fused.e.act = act
        self.fused.e.alpha = alpha
        self.fused.e.beta = beta
        self.fused.e.res = &self.residual[0] if residual is not None else NULL
        self.fused.e.res_len = self.residual.shape[0]
        self.fused.bias = &self.bias[0] if self.has_bias else NULL
        self.fused.on = self.has_bias or rlx_epilogue_active(&self.fused.e)
        if packed not in (0, LAYOUT_ROWS, LAYOUT_CHANNELS, LAYOUT_IMPLICIT, LAYOUT_IMPLICIT_DIRECT) or (
                packed == LAYOUT_CHANNELS and (algorithm != CONV_GEMM_1X1
                                                    or self.g.h * self.g.w > RLX_GEMM_CH_MAX_N)) or (
                packed in (LAYOUT_IMPLICIT, LAYOUT_IMPLICIT_DIRECT) and algorithm != CONV_IM2COL):
            raise ValueError(f"Conv2DLaunch: packed layout {packed} does not fit algorithm {algorithm} "
                             f"on a {self.g.h}x{self.g.w} plane")
        self.packed = packed if algorithm in (CONV_IM2COL, CONV_GEMM_1X1, CONV_WINOGRAD, CONV_WINOGRAD_F4) else 0
        k = (self.g.c_in // self.g.groups) * self.g.kh * self.g.kw
        self.staged = False
        if self.packed and algorithm in (CONV_WINOGRAD, CONV_WINOGRAD_F4) and block > 0:
            nt = _winograd4_tiles(&self.g) if algorithm == CONV_WINOGRAD_F4 else \
                self.g.n * ((self.g.h_out + 1) // 2) * ((self.g.w_out + 1) // 2)
            self.staged = (nt + block - 1) // block < self.max_threads
        if self.packed and algorithm in (CONV_WINOGRAD, CONV_WINOGRAD_F4):
            if self.packed != LAYOUT_ROWS:
                raise ValueError(f"Conv2DLaunch: a Winograd U is packed in row panels ({LAYOUT_ROWS}), "
                                 f"got layout {self.packed}")
            need = (36 if algorithm == CONV_WINOGRAD_F4 else 16) * rlx_gemm_packed_floats(self.g.c_out, self.g.c_in)
            if self.weight.shape[0] < need:
                raise ValueError(f"Conv2DLaunch: packed Winograd U has {self.weight.shape[0]} floats, "
                                 f"needs {need}")
        elif self.packed:
            need = gemm_packed_floats(self.g.c_out, k, self.g.groups, self.packed)
            if self.weight.shape[0] < need:
                raise ValueError(f"Conv2DLaunch: packed weight has {self.weight.shape[0]} floats, "
                                 f"needs {need}")
        self.offs = np.zeros(max(k, 1), dtype=np.intp)
        cdef ImplicitGeom ig = rlx_implicit_geom_2d(&self.g)
        if self.packed in (LAYOUT_IMPLICIT, LAYOUT_IMPLICIT_DIRECT):
            need = rlx_implicit_slot_floats(&ig) * self.max_threads
            if self.scratch.shape[0] < need:
                raise ValueError(f"Conv2DLaunch: implicit im2col needs {need} floats of scratch, "
                                 f"got {self.scratch.shape[0]}")
            rlx_implicit_offsets(&ig, &self.offs[0])

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef ImplicitGeom ig
        if self.algorithm == CONV_WINOGRAD:     # bias fused in the output transform
            conv_winograd(self.x, self.weight, self.bias, self.has_bias,
                          &self.fused.e if rlx_epilogue_active(&self.fused.e) else NULL, self.y,
                          self.scratch, &self.g, self.block, t, self.packed != 0, self.staged)
        elif self.algorithm == CONV_WINOGRAD_F4:     # bias fused in the output transform
            conv_winograd4(self.x, self.weight, self.bias, self.has_bias,
                           &self.fused.e if rlx_epilogue_active(&self.fused.e) else NULL, self.y,
                           self.scratch, &self.g, self.block, t, self.packed != 0, self.staged)
        elif self.algorithm == CONV_IM2COL and self.packed in (LAYOUT_IMPLICIT, LAYOUT_IMPLICIT_DIRECT):
            ig = rlx_implicit_geom_2d(&self.g)
            implicit_conv_run(self.x, self.weight, self.y, self.scratch, self.offs, &ig, self.g.n, self.g.c_out,
                              <const ImplicitEpilogue*>&self.fused.e if self.fused.on else NULL, self.fused.bias,
                              self.packed == LAYOUT_IMPLICIT_DIRECT, self.max_threads, t)
        elif self.algorithm == CONV_IM2COL:
            conv_im2col(self.x, self.weight, self.packed, self.y, self.scratch, &self.g, &self.fused,
                        self.block, t)
        elif self.algorithm == CONV_GEMM_1X1 and self.packed == LAYOUT_CHANNELS:
            conv_gemm_1x1_channels(self.x, self.weight, &self.fused, self.y, &self.g, self.max_threads, t)
        elif self.algorithm == CONV_GEMM_1X1 and self.packed:
            conv_gemm_1x1_packed(self.x, self.weight, &self.fused, self.y, &self.g, self.max_threads, t)
        elif self.algorithm == CONV_GEMM_1X1:
            conv_gemm_1x1(self.x, self.weight, self.y, &self.g, &self.fused, self.block,
                          self.max_threads, t)
            if self.fused.on and self.block <= 0:
                # no column block chosen (a record made without one): the
                # epilogue runs per plane after the GEMMs
                _epilogue_planes(self.y, &self.fused, &self.g, t)
        elif self.algorithm == CONV_DIRECT and depthwise_stride(&self.g):
            conv_depthwise(self.x, self.weight, self.bias, self.has_bias,
                           &self.fused.e if rlx_epilogue_active(&self.fused.e) else NULL, self.y,
                           self.scratch, &self.g, self.max_threads, t)
        elif self.algorithm == CONV_DIRECT:
            conv_direct(self.x, self.weight, self.y, &self.g, &self.fused, t)
        else:
            conv_reference(self.x, self.weight, self.y, &self.g, &self.fused, t)
        return 0


cdef int _epilogue_planes(float[::1] y, const Fused* f, const ConvGeom* g, int nthreads) except -1 nogil:
    cdef Py_ssize_t plane = g.h_out * g.w_out
    cdef Py_ssize_t item
    for item in prange(g.n * g.c_out, num_threads=nthreads, schedule='static'):
        work_note(1)
        _epilogue_rows(y, f, item * plane, plane, item % g.c_out, 1, plane)
    return 0


def gemm_1x1_col_block(tuple dims, int nthreads):
    """Output columns per work item of a 1x1 conv with an epilogue: one
    item's output block (c_out/groups rows) holds at most ~1 Mi floats
    (4 MiB), and there are enough (image, group, block) items to give every
    thread one.  Narrow blocks would keep the epilogue's data in L2 but make
    the GEMMs slower by more than that saves: measured on a 2-core AVX2
    machine, a 64->256 1x1 conv at 56x56 with a residual add and relu took
    1.39 ms with one block per plane against 1.49-1.56 ms with blocks of
    1024-256 columns (1.65 ms unfused)."""
    cdef ConvGeom g = _geom_from(dims)
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t p = g.h * g.w
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t cb = (1024 * 1024) // max(cog, 1)
    cdef Py_ssize_t per_item = (nthreads + items - 1) // items
    cb = max(cb // 16 * 16, 64)
    if per_item > 1:
        cb = min(cb, ((p + per_item - 1) // per_item + 15) // 16 * 16)
    return int(max(min(cb, p), 1))


cdef class GemmPackLaunch(Launch):
    """Runtime weight packing for the microkernel, used only when the weight is
    not a constant (constant weights are packed at compile time)."""
    cdef const float[::1] weight
    cdef float[::1] packed
    cdef Py_ssize_t c_out, k, groups
    cdef int layout

    def __init__(self, weight, packed, Py_ssize_t c_out, Py_ssize_t k, Py_ssize_t groups,
                 int layout=GEMM_LAYOUT_ROWS):
        self.weight = weight
        self.packed = packed
        self.c_out = c_out
        self.k = k
        self.groups = groups
        self.layout = layout
        if packed.shape[0] < gemm_packed_floats(c_out, k, groups, layout) or weight.shape[0] < c_out * k:
            raise ValueError("GemmPackLaunch: weight or packed buffer too small")

    cdef int run(self, int nthreads) except -1 nogil:
        gemm_pack_weight_into(self.weight, self.packed, self.c_out, self.k, self.groups, self.layout)
        return 0


cdef class WinogradFilterLaunch(Launch):
    """Runtime filter transform, used only when the weight is not a constant;
    `tile` is the output tile size, 2 (U[16, ...]) or 4 (U[36, ...]).  With
    `staging` (U's floats) the transform goes there and each plane is then
    packed into `u` in the microkernel's row panels, as winograd_pack_u packs
    a constant weight's U at compile time (the same bits either way)."""
    cdef const float[::1] weight
    cdef float[::1] u
    cdef float[::1] staging
    cdef bint packed
    cdef Py_ssize_t c_out, c_in
    cdef int tile

    def __init__(self, weight, u, Py_ssize_t c_out, Py_ssize_t c_in, int tile=2, staging=None):
        if tile not in (2, 4):
            raise ValueError(f"WinogradFilterLaunch: tile must be 2 or 4, got {tile}")
        self.weight = weight
        self.u = u
        self.c_out = c_out
        self.c_in = c_in
        self.tile = tile
        self.packed = staging is not None
        self.staging = or_placeholder(staging, np.float32)
        planes = 36 if tile == 4 else 16
        if self.packed:
            if self.staging.shape[0] < planes * c_out * c_in:
                raise ValueError(f"WinogradFilterLaunch: staging holds {self.staging.shape[0]} floats, "
                                 f"needs {planes * c_out * c_in}")
            if self.u.shape[0] < planes * rlx_gemm_packed_floats(c_out, c_in):
                raise ValueError(f"WinogradFilterLaunch: packed U holds {self.u.shape[0]} floats, "
                                 f"needs {planes * rlx_gemm_packed_floats(c_out, c_in)}")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef float[::1] dst = self.staging if self.packed else self.u
        cdef Py_ssize_t p, planes = 36 if self.tile == 4 else 16
        cdef Py_ssize_t pf = rlx_gemm_packed_floats(self.c_out, self.c_in), plane = self.c_out * self.c_in
        if self.tile == 4:
            winograd4_filter_transform_into(self.weight, dst, self.c_out, self.c_in, t)
        else:
            winograd_filter_transform_into(self.weight, dst, self.c_out, self.c_in, t)
        if self.packed:
            for p in prange(planes, num_threads=t, schedule='static'):
                work_note(1)
                rlx_gemm_pack_w(&self.staging[p * plane], self.c_in, self.c_out, self.c_in, &self.u[p * pf])
        return 0
