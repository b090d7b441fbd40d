# Pooling kernels (float32, N-d as 3-d): windowed max / average and global
# max / average, with their bound launches.
#
#   kernel        work item (prange, static)             scratch (arena)
#   ------------  -------------------------------------  ----------------------------
#   window pool,  SEP_LINES (8) output lines (plane, od, oh) a padded row buffer and a
#   separable     (rlx_pool.h; max without indices, or   line of window sums per
#                 average; w dilation 1)                 thread (doubles)
#   window pool,  one output line chunk:                 avg: one double line of
#   chunked       (plane, od, oh, block of <= w_chunk    w_chunk per thread
#                 outputs along w)
#   global pool   (plane, chunk of GLOBAL_CHUNK inputs), one partial per item
#                 then one combine per plane             (doubles)
#   pool backward one (image, channel) plane (1-D and 2-D;   none (avg: two line
#                 rlx_pool.h: rlx_mpb_plane, rlx_apb_plane;  buffers on the stack)
#                 max, lines of >= 8 outputs with AVX2:
#                 rlx_pool_bwd.h rlx_mpb_plane_pad)
#   max pool      (plane, band of output rows): each dx row   rows on the stack
#   backward,     written once (rlx_pool_bwd.h rlx_mpb33_band,
#   window 3      AVX2); bands only when the planes give a
#   stride 2      bound thread fewer than 4 items
#   avg pool      one (image, channel) plane: each dx        lines of the output rows
#   backward,     element written once, summing the lines    covering one dx row, on
#   overlapping   of the output rows that cover its row      the stack (columns in
#   windows       (rlx_pool_bwd.h rlx_apg_plane; h dilation  chunks of RLX_APG_CH)
#                 1, any line length)
#   pool backward,  (plane, band of output rows): each dx    none
#   windows that  element written once (rlx_pool_bwd.h:
#   never overlap rlx_mpb22_band for max k2s2, rlx_apb_nov_band
#                 for average); bands only when the planes
#                 give a bound thread fewer than 4 items
#   max pool with one output line (chunk), or blocks of        rows on the stack
#   indices       whole lines (rlx_pool_bwd.h:
#                 rlx_pwi_lines_padded, AVX2, >= 8 outputs)
#   max pool      one (image, channel) plane, any rank: a     none
#   backward from scatter-add of dy through the forward's
#   indices       int64 indices (rlx_mpbi_plane)
#
# Work items never depend on the thread count, and each output is computed
# by one item in a fixed order, so results are identical for any thread
# count.  Lines (not planes) are the unit so that batch 1 with few channels
# still feeds every core.
#
# Semantics (PyTorch / ONNX):
#   * window taps are visited in (kd, kh, kw) order; padded taps are never read;
#   * max starts at -inf and takes v when v > max or v is NaN (NaN propagates);
#     ties keep the first maximum in window order; the index is that of the
#     first in-bounds tap when no value beats -inf;
#   * average sums in double and divides by: divisor_override if set, else
#     (count_include_pad) the taps inside the *padded* input [-pb, in + pe) --
#     ceil-mode overhang beyond the end padding is not counted -- else the
#     in-bounds taps.
# Every window has at least one in-bounds tap (checked when the graph is built).
cimport cython
from cython.parallel cimport prange, threadid
from libc.stdint cimport int64_t
from libc.math cimport INFINITY
from libc.string cimport memset

from _codes cimport (POOL_KIND_MAX, POOL_KIND_AVG, POOL_IND_NONE, POOL_IND_PLANE, POOL_IND_ONNX,
                     POOL_IND_ONNX_COL)
from _window cimport Win, win_from, out_range, tap_range
from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_omp.h":
    int RLX_DEBUG_CHECKS

cdef extern from "rlx_pool.h":
    # y[i], ip[i] := x[i*s], i0 + i*s where x[i*s] beats y[i] (or is NaN); no branches
    void rlx_argmax_run(float* y, int64_t* ip, const float* x, Py_ssize_t n, Py_ssize_t s,
                        int64_t i0) noexcept nogil
    # sum of x[0..n) in double, 16 lanes in a fixed order
    double rlx_sum_f64(const float* x, Py_ssize_t n) noexcept nogil
    # global pool chunk partials, AVX2 or portable (rlx_gsum: the same bits as rlx_sum_f64)
    float rlx_gmax(const float* x, Py_ssize_t n) noexcept nogil
    double rlx_gsum(const float* x, Py_ssize_t n) noexcept nogil
    # rlx_gsum of two runs of n floats, interleaved (the same bits as two calls)
    void rlx_gsum2(const float* x, const float* z, Py_ssize_t n, double* sx, double* sz) noexcept nogil
    ctypedef struct PoolGeom "rlx_pool_geom":
        Py_ssize_t D, H, W, OD, OH, OW
        Py_ssize_t kd, kh, kw, sd, sh, sw, pd, ph, pw, ped, peh, pew, dd, dh
        Py_ssize_t row_len
        int kind_max, include_pad
        Py_ssize_t divisor_override
    Py_ssize_t rlx_pool_row_len(Py_ssize_t W, Py_ssize_t OW, Py_ssize_t kw, Py_ssize_t sw,
                                Py_ssize_t pw) noexcept nogil
    # output lines [l0, l1) of the row-separable pool, on one thread's row buffer
    void rlx_pool_lines(const float* x, Py_ssize_t x_len, float* y, Py_ssize_t y_len, void* scratch,
                        Py_ssize_t scratch_doubles, const PoolGeom* g, Py_ssize_t l0,
                        Py_ssize_t l1) noexcept nogil

    ctypedef struct Row1Geom "rlx_row1_geom":
        Py_ssize_t W, kw, sw, pw, lo_w, hi_w, rcount, divisor_override
        int kind_max
    # outputs [w0, w1) of output line `line` from the one input row at x[row]
    void rlx_pool_row1(const float* x, Py_ssize_t x_len, Py_ssize_t row, float* y, Py_ssize_t y_len,
                       Py_ssize_t line, Py_ssize_t OW, const Row1Geom* g, Py_ssize_t w0,
                       Py_ssize_t w1) noexcept nogil

    ctypedef struct MpbGeom "rlx_mpb_geom":
        Py_ssize_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw
    # dx of one (image, channel) plane of a 1-D / 2-D max pool
    void rlx_mpb_plane(const float* x, Py_ssize_t x_len, const float* dy, Py_ssize_t dy_len, float* dx,
                       const MpbGeom* g, Py_ssize_t plane) noexcept nogil

    ctypedef struct ApbGeom "rlx_apb_geom":
        Py_ssize_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, peh, pew, dh, dw
        Py_ssize_t row_len
        int include_pad
        Py_ssize_t divisor_override
    enum: RLX_APB_MAX
    Py_ssize_t rlx_apb_row_len(Py_ssize_t W, Py_ssize_t OW, Py_ssize_t kw, Py_ssize_t sw, Py_ssize_t pw,
                               Py_ssize_t dw) noexcept nogil
    # dx of one (image, channel) plane of a 1-D / 2-D average pool
    void rlx_apb_plane(const float* dy, Py_ssize_t dy_len, float* dx, Py_ssize_t dx_len, const ApbGeom* g,
                       Py_ssize_t plane) noexcept nogil
    ctypedef struct PwiGeom "rlx_pwi_geom":
        Py_ssize_t D, H, W, OD, OH, OW
        Py_ssize_t kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw
        int flat
    enum: RLX_PWI_MAX_ROWS
    # outputs [w0, w1) of one output line of a max pool with indices
    void rlx_pwi_line(const float* x, Py_ssize_t x_len, float* y, int64_t* ind, Py_ssize_t y_len,
                      const PwiGeom* g, Py_ssize_t line, Py_ssize_t w0, Py_ssize_t w1) noexcept nogil
    # dx of one plane of a max pool of any rank from the forward's indices
    void rlx_mpbi_plane(const float* dy, const int64_t* ind, Py_ssize_t dy_len, float* dx, Py_ssize_t dx_len,
                        Py_ssize_t in_sz, Py_ssize_t out_sz, int flat, Py_ssize_t plane) noexcept nogil

cdef extern from "rlx_pool_bwd.h":
    # dx rows of output rows [oh0, oh1) of one plane: max pool window 2 (h: 1 or 2), stride = window, no pad
    void rlx_mpb22_band(const float* x, Py_ssize_t x_len, const float* dy, Py_ssize_t dy_len, float* dx,
                        const MpbGeom* g, Py_ssize_t plane, Py_ssize_t oh0, Py_ssize_t oh1) noexcept nogil
    # dx rows of output rows [oh0, oh1) of one plane: max pool window 3, stride 2, padding 0 or 1 (AVX2)
    void rlx_mpb33_band(const float* x, Py_ssize_t x_len, const float* dy, Py_ssize_t dy_len, float* dx,
                        const MpbGeom* g, Py_ssize_t plane, Py_ssize_t oh0, Py_ssize_t oh1) noexcept nogil
    bint rlx_mpb33_fits(Py_ssize_t W, Py_ssize_t OW, Py_ssize_t pw) noexcept nogil
    # the same for an average pool whose windows never overlap
    void rlx_apb_nov_band(const float* dy, Py_ssize_t dy_len, float* dx, Py_ssize_t dx_len, const ApbGeom* g,
                          Py_ssize_t plane, Py_ssize_t oh0, Py_ssize_t oh1) noexcept nogil
    enum: RLX_APG_CH
    enum: RLX_APG_RING
    # dx of one plane of a 1-D / 2-D average pool (h dilation 1), each element written once by gather
    void rlx_apg_plane(const float* dy, Py_ssize_t dy_len, float* dx, Py_ssize_t dx_len, const ApbGeom* g,
                       Py_ssize_t plane) noexcept nogil

    enum: RLX_PWI_PAD_FLOATS
    Py_ssize_t rlx_pwi_pad_row(Py_ssize_t n, Py_ssize_t kw, Py_ssize_t sw) noexcept nogil
    # outputs [w0, w1) of one output line of a max pool with indices: rows padded with -inf in a stack
    # buffer, blocks of 8 (AVX2; else rlx_pwi_line)
    enum: RLX_MPB_PAD_MAX_OW
    # dx of one plane of a 1-D / 2-D max pool, winners by rlx_pwi_line_pad (AVX2 only)
    void rlx_mpb_plane_pad(const float* x, Py_ssize_t x_len, const float* dy, Py_ssize_t dy_len, float* dx,
                           const PwiGeom* g, Py_ssize_t plane) noexcept nogil
    void rlx_pwi_lines_padded(const float* x, Py_ssize_t x_len, float* y, int64_t* ind, Py_ssize_t y_len,
                              const PwiGeom* g, Py_ssize_t l0, Py_ssize_t l1) noexcept nogil
    void rlx_pwi_line_padded(const float* x, Py_ssize_t x_len, float* y, int64_t* ind, Py_ssize_t y_len,
                          const PwiGeom* g, Py_ssize_t line, Py_ssize_t w0, Py_ssize_t w1) noexcept nogil

cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil
    int rlx_simd_level() nogil

# The SIMD variant is chosen here, at import, before any kernel runs.
rlx_simd_init()


def simd_level():
    """The SIMD level (src/rlx_simd.h): 0 runs the baseline, 1 the AVX2+FMA
    variants of the pool loops, 2 also the AVX-512 ones where they exist."""
    return rlx_simd_level()

# Codes (src/_codes.pxd) the compiler stores in pool thunks.
POOL_MAX = POOL_KIND_MAX
POOL_AVG = POOL_KIND_AVG
INDICES_NONE = POOL_IND_NONE
INDICES_PLANE = POOL_IND_PLANE
INDICES_ONNX = POOL_IND_ONNX
INDICES_ONNX_COL = POOL_IND_ONNX_COL

# Outputs per work item along the last axis: long 1-D lines are split so that
# a few long planes still spread over the threads.
W_CHUNK = 512
cdef enum:
    G_CHUNK = 4096      # inputs per partial of a global pool

GLOBAL_CHUNK = G_CHUNK


# Row buffers longer than this (in entries) take the chunked kernel instead of
# the row-separable one, so scratch stays small for very long 1-D lines.
cdef enum:
    SEP_MAX_ROW = 16384
    SEP_LINES = 8       # output lines per work item of the row-separable kernel (8, not 4: more of the
                        # 3x3 stride-2 averages' lines go in pairs, N1 C64 112x112 0.166 -> 0.159 ms)


cdef Py_ssize_t _sep_row_len(const Win* g, int kind, bint with_ind) noexcept nogil:
    """Row-buffer entries per thread when the row-separable kernel applies, else 0:
    max without indices or average, w dilation 1, a bounded row."""
    cdef Py_ssize_t rl
    if g.dil[2] != 1 or (kind == POOL_KIND_MAX and with_ind):
        return 0
    rl = rlx_pool_row_len(g.size[2], g.out[2], g.k[2], g.s[2], g.pb[2])
    return rl if rl <= SEP_MAX_ROW else 0


def separable_row_len(int kind, tuple dims, bint with_indices):
    """Row-buffer entries per thread of the row-separable kernel, 0 when the
    chunked kernel runs instead."""
    cdef Win g = win_from(dims)
    return int(_sep_row_len(&g, kind, with_indices))


def scratch_floats(int kind, tuple dims, Py_ssize_t w_chunk, int nthreads, bint with_indices):
    """Floats of arena scratch a window pool needs per run: a row buffer and a
    window-sum line of doubles per thread (row-separable kernel), else a double
    line per thread (chunked average)."""
    cdef Win g = win_from(dims)
    cdef Py_ssize_t rl = _sep_row_len(&g, kind, with_indices)
    if rl > 0:
        return int(4 * rl * nthreads)
    if kind == POOL_KIND_AVG:
        return int(2 * w_chunk * nthreads)
    return 0


def global_scratch_floats(Py_ssize_t planes, Py_ssize_t spatial):
    """Floats of arena scratch a global pool needs: one double per partial."""
    return int(2 * planes * ((spatial + GLOBAL_CHUNK - 1) // GLOBAL_CHUNK))


# ---------------------------------------------------------------------------
# Window pooling
# ---------------------------------------------------------------------------

# Runs of one tap over consecutive outputs, on raw pointers (release builds
# only; debug builds use the indexed loops in _max_line so bounds are
# checked).  The update is a select, not a branch: on real data "v beats the
# running max" is unpredictable.  Strides 1 and 2 get their own loops so the
# compiler sees a constant stride and can vectorise.  The argmax run lives in
# rlx_pool.h: written in Cython, gcc turned its selects back into branches.

cdef inline void _max_run(float* yp, const float* xp, Py_ssize_t n, Py_ssize_t s) noexcept nogil:
    cdef Py_ssize_t i
    cdef float v, cur
    if s == 1:
        for i in range(n):
            v = xp[i]
            cur = yp[i]
            yp[i] = v if ((v > cur) | (v != v)) else cur
    elif s == 2:
        for i in range(n):
            v = xp[2 * i]
            cur = yp[i]
            yp[i] = v if ((v > cur) | (v != v)) else cur
    else:
        for i in range(n):
            v = xp[i * s]
            cur = yp[i]
            yp[i] = v if ((v > cur) | (v != v)) else cur


cdef inline void _sum_run(double* ap, const float* xp, Py_ssize_t n, Py_ssize_t s) noexcept nogil:
    cdef Py_ssize_t i
    if s == 1:
        for i in range(n):
            ap[i] += xp[i]
    elif s == 2:
        for i in range(n):
            ap[i] += xp[2 * i]
    else:
        for i in range(n):
            ap[i] += xp[i * s]


cdef int _max_line(const float[::1] x, float[::1] y, int64_t[::1] ind, bint with_ind,
                   const Win* g, Py_ssize_t plane, Py_ssize_t od, Py_ssize_t oh,
                   Py_ssize_t w0, Py_ssize_t w1, int indices_mode) except -1 nogil:
    cdef Py_ssize_t in_vol = g.size[0] * g.size[1] * g.size[2]
    cdef Py_ssize_t xb = plane * in_vol
    cdef Py_ssize_t yb = ((plane * g.out[0] + od) * g.out[1] + oh) * g.out[2]
    cdef Py_ssize_t ib = (plane * in_vol if indices_mode == POOL_IND_ONNX
                          or indices_mode == POOL_IND_ONNX_COL else 0)
    cdef Py_ssize_t sd = od * g.s[0] - g.pb[0]
    cdef Py_ssize_t sh = oh * g.s[1] - g.pb[1]
    cdef Py_ssize_t a0, a1, b0, b1, lo, hi, a, b, j, ow, row, shift, iw, j0, j1
    cdef Py_ssize_t sw = g.s[2]
    cdef float v
    tap_range(sd, g.dil[0], g.k[0], 0, g.size[0], &a0, &a1)
    tap_range(sh, g.dil[1], g.k[1], 0, g.size[1], &b0, &b1)
    for ow in range(w0, w1):
        y[yb + ow] = -INFINITY
    if with_ind:
        for ow in range(w0, w1):
            ind[yb + ow] = -1
    # Tap-major: for each tap, a contiguous run of outputs.  Each output still
    # sees its taps in window order, so ties and NaNs resolve as in PyTorch.
    for a in range(a0, a1):
        for b in range(b0, b1):
            row = ((sd + a * g.dil[0]) * g.size[1] + sh + b * g.dil[1]) * g.size[2]
            for j in range(g.k[2]):
                shift = j * g.dil[2] - g.pb[2]
                out_range(shift, sw, g.size[2], g.out[2], &lo, &hi)
                if lo < w0:
                    lo = w0
                if hi > w1:
                    hi = w1
                if hi <= lo:
                    continue
                if not RLX_DEBUG_CHECKS:
                    if with_ind:
                        rlx_argmax_run(&y[yb + lo], &ind[yb + lo], &x[xb + row + lo * sw + shift], hi - lo,
                                       sw, ib + row + lo * sw + shift)
                    else:
                        _max_run(&y[yb + lo], &x[xb + row + lo * sw + shift], hi - lo, sw)
                elif with_ind:
                    for ow in range(lo, hi):
                        iw = ow * sw + shift
                        v = x[xb + row + iw]
                        if v > y[yb + ow] or v != v:
                            y[yb + ow] = v
                            ind[yb + ow] = ib + row + iw
                else:
                    for ow in range(lo, hi):
                        v = x[xb + row + ow * sw + shift]
                        if v > y[yb + ow] or v != v:
                            y[yb + ow] = v
    if with_ind and a0 < a1 and b0 < b1:
        # Windows whose values never beat -inf point at their first in-bounds tap.
        row = ((sd + a0 * g.dil[0]) * g.size[1] + sh + b0 * g.dil[1]) * g.size[2]
        for ow in range(w0, w1):
            if ind[yb + ow] < 0:
                tap_range(ow * sw - g.pb[2], g.dil[2], g.k[2], 0, g.size[2], &j0, &j1)
                if j0 < j1:
                    ind[yb + ow] = ib + row + ow * sw - g.pb[2] + j0 * g.dil[2]
    if with_ind and indices_mode == POOL_IND_ONNX_COL:
        # Row-major (i0, i1, i2) offset -> column-major i0 + S0 * (i1 + S1 * i2)
        # (ONNX storage_order=1: the first spatial axis varies fastest).
        for ow in range(w0, w1):
            row = ind[yb + ow] - ib
            iw = row % g.size[2]
            row = row // g.size[2]
            ind[yb + ow] = ib + row // g.size[1] + g.size[0] * (row % g.size[1] + g.size[1] * iw)
    return 0


cdef int _avg_line(const float[::1] x, float[::1] y, double[::1] acc, Py_ssize_t acc_off,
                   const Win* g, Py_ssize_t plane, Py_ssize_t od, Py_ssize_t oh,
                   Py_ssize_t w0, Py_ssize_t w1, bint include_pad,
                   Py_ssize_t divisor_override) except -1 nogil:
    cdef Py_ssize_t in_vol = g.size[0] * g.size[1] * g.size[2]
    cdef Py_ssize_t xb = plane * in_vol
    cdef Py_ssize_t yb = ((plane * g.out[0] + od) * g.out[1] + oh) * g.out[2]
    cdef Py_ssize_t sd = od * g.s[0] - g.pb[0]
    cdef Py_ssize_t sh = oh * g.s[1] - g.pb[1]
    cdef Py_ssize_t a0, a1, b0, b1, lo, hi, a, b, j, ow, row, shift, j0, j1, count_dh
    cdef Py_ssize_t sw = g.s[2]
    cdef double div
    tap_range(sd, g.dil[0], g.k[0], 0, g.size[0], &a0, &a1)
    tap_range(sh, g.dil[1], g.k[1], 0, g.size[1], &b0, &b1)
    for ow in range(w0, w1):
        acc[acc_off + ow - w0] = 0.0
    for a in range(a0, a1):
        for b in range(b0, b1):
            row = xb + ((sd + a * g.dil[0]) * g.size[1] + sh + b * g.dil[1]) * g.size[2]
            for j in range(g.k[2]):
                shift = j * g.dil[2] - g.pb[2]
                out_range(shift, sw, g.size[2], g.out[2], &lo, &hi)
                if lo < w0:
                    lo = w0
                if hi > w1:
                    hi = w1
                if hi <= lo:
                    continue
                if not RLX_DEBUG_CHECKS:
                    _sum_run(&acc[acc_off + lo - w0], &x[row + lo * sw + shift], hi - lo, sw)
                else:
                    for ow in range(lo, hi):
                        acc[acc_off + ow - w0] += x[row + ow * sw + shift]
    if divisor_override > 0:
        div = <double>divisor_override
        for ow in range(w0, w1):
            y[yb + ow] = <float>(acc[acc_off + ow - w0] / div)
        return 0
    if include_pad:
        tap_range(sd, g.dil[0], g.k[0], -g.pb[0], g.size[0] + g.pe[0], &a0, &a1)
        tap_range(sh, g.dil[1], g.k[1], -g.pb[1], g.size[1] + g.pe[1], &b0, &b1)
    count_dh = (a1 - a0) * (b1 - b0)
    for ow in range(w0, w1):
        if include_pad:
            tap_range(ow * sw - g.pb[2], g.dil[2], g.k[2], -g.pb[2], g.size[2] + g.pe[2], &j0, &j1)
        else:
            tap_range(ow * sw - g.pb[2], g.dil[2], g.k[2], 0, g.size[2], &j0, &j1)
        div = <double>(count_dh * (j1 - j0))
        y[yb + ow] = <float>(acc[acc_off + ow - w0] / div)
    return 0


cdef class PoolLaunch(Launch):
    """Window max/avg pool bound to arena views (indices optional)."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef int64_t[::1] ind
    cdef double[::1] acc
    cdef Win g
    cdef int kind, indices_mode
    cdef bint include_pad
    cdef Py_ssize_t divisor_override, w_chunk
    cdef PoolGeom sep       # row-separable kernel's geometry; sep.row_len == 0: chunked kernel
    cdef PwiGeom pwi        # max with plane / ONNX indices: rlx_pwi_line's geometry
    cdef bint use_pwi
    cdef bint pwi_pad       # rlx_pwi_line_padded: w dilation 1, stride 1 or 2, rows fit its buffer
    cdef Row1Geom row1      # chunked kernel, windows of one input row: rlx_pool_row1's geometry
    cdef bint use_row1

    def __init__(self, x, y, indices, scratch, tuple dims, int kind, bint include_pad,
                 Py_ssize_t divisor_override, int indices_mode, Py_ssize_t w_chunk, int max_threads):
        self.x = x
        self.y = y
        self.ind = or_placeholder(None if indices is None else indices.view(np.int64), np.int64)
        self.acc = or_placeholder(None if scratch is None else scratch.view(np.float64), np.float64)
        self.g = win_from(dims)
        self.kind = kind
        self.include_pad = include_pad
        self.divisor_override = divisor_override
        self.indices_mode = indices_mode if indices is not None else POOL_IND_NONE
        self.w_chunk = w_chunk
        self.max_threads = max(1, max_threads)
        self.sep.row_len = _sep_row_len(&self.g, kind, self.indices_mode != POOL_IND_NONE)
        if self.sep.row_len > 0:
            if self.acc.shape[0] < 2 * self.sep.row_len * self.max_threads:
                raise ValueError(f"pool: scratch of {self.acc.shape[0]} doubles, need "
                                 f"{2 * self.sep.row_len * self.max_threads}")
            self.sep.D, self.sep.H, self.sep.W = self.g.size[0], self.g.size[1], self.g.size[2]
            self.sep.OD, self.sep.OH, self.sep.OW = self.g.out[0], self.g.out[1], self.g.out[2]
            self.sep.kd, self.sep.kh, self.sep.kw = self.g.k[0], self.g.k[1], self.g.k[2]
            self.sep.sd, self.sep.sh, self.sep.sw = self.g.s[0], self.g.s[1], self.g.s[2]
            self.sep.pd, self.sep.ph, self.sep.pw = self.g.pb[0], self.g.pb[1], self.g.pb[2]
            self.sep.ped, self.sep.peh, self.sep.pew = self.g.pe[0], self.g.pe[1], self.g.pe[2]
            self.sep.dd, self.sep.dh = self.g.dil[0], self.g.dil[1]
            self.sep.kind_max = kind == POOL_KIND_MAX
            self.sep.include_pad = include_pad
            self.sep.divisor_override = divisor_override
        # Chunked lines whose windows span one input row (1-D pools): rlx_pool_row1, no indices.
        # The window has one (d, h) tap, always in bounds, so the row count of the divisor is 1.
        self.use_row1 = (self.g.k[0] == 1 and self.g.k[1] == 1 and self.g.dil[2] == 1
                         and self.indices_mode == POOL_IND_NONE)
        if self.use_row1:
            self.row1.W, self.row1.kw, self.row1.sw, self.row1.pw = (self.g.size[2], self.g.k[2], self.g.s[2],
                                                                      self.g.pb[2])
            self.row1.lo_w = -self.g.pb[2] if include_pad else 0
            self.row1.hi_w = self.g.size[2] + (self.g.pe[2] if include_pad else 0)
            self.row1.rcount = 1
            self.row1.divisor_override = divisor_override
            self.row1.kind_max = kind == POOL_KIND_MAX
        # rlx_pwi_line: int32 offsets within a plane, the line's input rows on the stack
        self.use_pwi = (kind == POOL_KIND_MAX and self.indices_mode in (POOL_IND_PLANE, POOL_IND_ONNX)
                        and self.g.in_vol < 2 ** 31 and self.g.k[0] * self.g.k[1] <= RLX_PWI_MAX_ROWS)
        if self.use_pwi:
            self.pwi.D, self.pwi.H, self.pwi.W = self.g.size[0], self.g.size[1], self.g.size[2]
            self.pwi.OD, self.pwi.OH, self.pwi.OW = self.g.out[0], self.g.out[1], self.g.out[2]
            self.pwi.kd, self.pwi.kh, self.pwi.kw = self.g.k[0], self.g.k[1], self.g.k[2]
            self.pwi.sd, self.pwi.sh, self.pwi.sw = self.g.s[0], self.g.s[1], self.g.s[2]
            self.pwi.pd, self.pwi.ph, self.pwi.pw = self.g.pb[0], self.g.pb[1], self.g.pb[2]
            self.pwi.dd, self.pwi.dh, self.pwi.dw = self.g.dil[0], self.g.dil[1], self.g.dil[2]
            self.pwi.flat = self.indices_mode == POOL_IND_ONNX
            self.pwi_pad = (self.g.dil[2] == 1 and self.g.s[2] in (1, 2) and self.g.out[2] >= 8
                            and self.g.k[0] * self.g.k[1]
                            * rlx_pwi_pad_row(min(self.w_chunk, self.g.out[2]), self.g.k[2], self.g.s[2])
                            <= RLX_PWI_PAD_FLOATS)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        if self.sep.row_len > 0:
            return self._run_sep(t)
        if self.use_pwi:
            return self._run_pwi(t)
        return self._run_chunked(t)

    cdef int _run_pwi(self, int t) except -1 nogil:
        # Items as the chunked kernel's: (line, block of <= w_chunk outputs).
        cdef Py_ssize_t nwc = (self.g.out[2] + self.w_chunk - 1) // self.w_chunk
        cdef Py_ssize_t items = self.g.n * self.g.c * self.g.out[0] * self.g.out[1] * nwc
        cdef Py_ssize_t item, w0, w1, nblk
        if self.pwi_pad and nwc == 1:
            # whole lines, in 16 blocks of lines per bound thread (each output is computed alone,
            # so the split never changes a bit)
            nblk = min(items, 16 * self.max_threads)
            for item in prange(nblk, num_threads=t, schedule='static'):
                work_note(1)
                rlx_pwi_lines_padded(&self.x[0], self.x.shape[0], &self.y[0], &self.ind[0], self.y.shape[0],
                                     &self.pwi, item * items // nblk, (item + 1) * items // nblk)
            # end: prange
            return 0
        for item in prange(items, num_threads=t, schedule='static'):
            work_note(1)
            w0 = (item % nwc) * self.w_chunk
            w1 = w0 + self.w_chunk
            if w1 > self.g.out[2]:
                w1 = self.g.out[2]
            if self.pwi_pad:
                rlx_pwi_line_padded(&self.x[0], self.x.shape[0], &self.y[0], &self.ind[0], self.y.shape[0],
                                    &self.pwi, item // nwc, w0, w1)
            else:
                rlx_pwi_line(&self.x[0], self.x.shape[0], &self.y[0], &self.ind[0], self.y.shape[0], &self.pwi,
                             item // nwc, w0, w1)
        # end: prange
        return 0

    cdef int _run_sep(self, int t) except -1 nogil:
        # SEP_LINES output lines per item (fixed, so each line's bits never
        # depend on the thread count); each thread reduces into its own row buffer.
        cdef Py_ssize_t lines = self.g.n * self.g.c * self.g.out[0] * self.g.out[1]
        cdef Py_ssize_t per = 2 * self.sep.row_len
        cdef Py_ssize_t item, l1
        for item in prange((lines + SEP_LINES - 1) // SEP_LINES, num_threads=t, schedule='static'):
            work_note(1)
            l1 = (item + 1) * SEP_LINES
            if l1 > lines:
                l1 = lines
            rlx_pool_lines(&self.x[0], self.x.shape[0], &self.y[0], self.y.shape[0],
                           &self.acc[threadid() * per], per, &self.sep, item * SEP_LINES, l1)
        # end: prange
        return 0

    cdef int _run_chunked(self, int t) except -1 nogil:
        cdef Py_ssize_t nwc = (self.g.out[2] + self.w_chunk - 1) // self.w_chunk
        cdef Py_ssize_t items = self.g.n * self.g.c * self.g.out[0] * self.g.out[1] * nwc
        cdef Py_ssize_t item, line, wc, w0, w1, oh, od, plane
        cdef bint with_ind = self.indices_mode != POOL_IND_NONE
        for item in prange(items, num_threads=t, schedule='static'):
            work_note(1)
            line = item // nwc
            wc = item % nwc
            w0 = wc * self.w_chunk
            w1 = w0 + self.w_chunk
            if w1 > self.g.out[2]:
                w1 = self.g.out[2]
            oh = line % self.g.out[1]
            od = (line // self.g.out[1]) % self.g.out[0]
            plane = line // (self.g.out[1] * self.g.out[0])
            if self.use_row1:
                rlx_pool_row1(&self.x[0], self.x.shape[0],
                              plane * self.g.in_vol + ((od * self.g.s[0] - self.g.pb[0]) * self.g.size[1]
                                                       + oh * self.g.s[1] - self.g.pb[1]) * self.g.size[2],
                              &self.y[0], self.y.shape[0], line, self.g.out[2], &self.row1, w0, w1)
            elif self.kind == POOL_KIND_MAX:
                _max_line(self.x, self.y, self.ind, with_ind, &self.g, plane, od, oh, w0, w1,
                          self.indices_mode)
            else:
                _avg_line(self.x, self.y, self.acc, threadid() * self.w_chunk, &self.g, plane,
                          od, oh, w0, w1, self.include_pad, self.divisor_override)
        # end: prange
        return 0


# ---------------------------------------------------------------------------
# Global pooling: [planes, spatial] -> [planes]
# ---------------------------------------------------------------------------

cdef double _sum_range(const float[::1] x, Py_ssize_t lo, Py_ssize_t hi) except? -1 nogil:
    """Sum in rlx_sum_f64's fixed order (float lanes per block, double across)."""
    cdef double lane[8]
    cdef double g[32]
    cdef float f[32]
    cdef Py_ssize_t b = lo, e, i, j, w
    cdef int bad
    if hi <= lo:
        return 0.0
    if not RLX_DEBUG_CHECKS:
        return rlx_gsum(&x[lo], hi - lo)
    # same blocks, lanes and order, indexed so a debug build checks the bounds
    for j in range(8):
        lane[j] = 0.0
    while b < hi:
        e = b + 512
        if e > hi:
            e = hi
        for j in range(32):
            f[j] = 0.0
        i = b
        while i < e:
            f[(i - b) % 32] += x[i]
            i += 1
        for j in range(16):
            f[j] += f[j + 16]
        bad = 0
        for j in range(8):
            f[j] += f[j + 8]
            if not (f[j] - f[j] == 0.0):
                bad = 1
        if bad:
            # a float lane overflowed or met an inf or NaN: the block again in double
            for j in range(32):
                g[j] = 0.0
            i = b
            while i < e:
                g[(i - b) % 32] += <double>x[i]
                i += 1
            for j in range(16):
                g[j] += g[j + 16]
            for j in range(8):
                lane[j] += g[j] + g[j + 8]
        else:
            for j in range(8):
                lane[j] += <double>f[j]
        b = e
    w = 4
    while w >= 1:
        for j in range(w):
            lane[j] += lane[j + w]
        w //= 2
    return lane[0]


cdef float _max_range(const float[::1] x, Py_ssize_t lo, Py_ssize_t hi) except? -2 nogil:
    """Max over rlx_gmax's 32 lanes (v taken when v > max or v is NaN)."""
    cdef float lane[32]
    cdef float v
    cdef Py_ssize_t i = lo, j, w
    if hi <= lo:
        return -INFINITY
    if not RLX_DEBUG_CHECKS:
        return rlx_gmax(&x[lo], hi - lo)
    # same lanes and order, indexed so a debug build checks the bounds
    for j in range(32):
        lane[j] = -INFINITY
    while i < hi:
        v = x[i]
        j = (i - lo) % 32
        if v > lane[j] or v != v:
            lane[j] = v
        i += 1
    w = 16
    while w >= 1:
        for j in range(w):
            v = lane[j + w]
            if v > lane[j] or v != v:
                lane[j] = v
        w //= 2
    return lane[0]


cdef inline void _gavg_pair(const float* x, float* y, Py_ssize_t spatial) noexcept nogil:
    """y[0], y[1] := means of the planes at x and x + spatial (one chunk each)."""
    cdef double s0, s1
    rlx_gsum2(x, x + spatial, spatial, &s0, &s1)
    y[0] = <float>((0.0 + s0) / <double>spatial)
    y[1] = <float>((0.0 + s1) / <double>spatial)


cdef class GlobalPoolLaunch(Launch):
    """Global max/avg over the spatial axes of each (n, c) plane."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef double[::1] part
    cdef Py_ssize_t planes, spatial
    cdef int kind

    def __init__(self, x, y, scratch, Py_ssize_t planes, Py_ssize_t spatial, int kind):
        self.x = x
        self.y = y
        self.part = scratch.view(np.float64)
        self.planes = planes
        self.spatial = spatial
        self.kind = kind

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t nch = (self.spatial + G_CHUNK - 1) // G_CHUNK
        cdef Py_ssize_t item, p, lo, hi, c
        cdef double acc
        cdef float m, v
        if self.kind == POOL_KIND_AVG and nch == 1 and not RLX_DEBUG_CHECKS and self.planes >= 2:
            # One chunk per plane: two planes per item, summed together and
            # divided straight away (the bits of the two-pass path below).
            for item in prange(self.planes // 2, num_threads=t, schedule='static'):
                work_note(1)
                _gavg_pair(&self.x[2 * item * self.spatial], &self.y[2 * item], self.spatial)
            # end: prange
            if self.planes % 2:
                p = self.planes - 1
                self.y[p] = <float>((0.0 + rlx_gsum(&self.x[p * self.spatial], self.spatial))
                                    / <double>self.spatial)
            return 0
        # Partials over fixed chunks (so any thread count sums identically).
        for item in prange(self.planes * nch, num_threads=t, schedule='static'):
            work_note(1)
            p = item // nch
            lo = p * self.spatial + (item % nch) * G_CHUNK
            hi = lo + G_CHUNK
            if hi > (p + 1) * self.spatial:
                hi = (p + 1) * self.spatial
            if self.kind == POOL_KIND_MAX:
                self.part[item] = _max_range(self.x, lo, hi)
            else:
                self.part[item] = _sum_range(self.x, lo, hi)
        # end: prange
        for p in prange(self.planes, num_threads=t, schedule='static'):
            work_note(1)
            if self.kind == POOL_KIND_MAX:
                m = -INFINITY
                for c in range(nch):
                    v = <float>self.part[p * nch + c]
                    if v > m or v != v:
                        m = v
                self.y[p] = m
            else:
                acc = 0.0
                for c in range(nch):
                    acc = acc + self.part[p * nch + c]
                self.y[p] = <float>(acc / <double>self.spatial)
        # end: prange
        return 0


# ---------------------------------------------------------------------------
# Pool backward, 1-D and 2-D
#
# Window of output (oh, ow): rows oh*sh - ph + a*dh (a < kh), columns
# ow*sw - pw + b*dw (b < kw); taps outside the input (padding, ceil-mode
# overhang) are never read.  Same choices as the forward kernels:
#   max: the gradient goes to the tap the forward's indices name: the first
#        maximum in window order over in-bounds taps, or, when the window
#        holds a NaN, its last NaN (the forward takes v when v > max or v is
#        NaN); all -inf -> the first in-bounds tap.
#   avg: each in-bounds tap gets dy / divisor, divisor = divisor_override if
#        set, else with count_include_pad the taps inside the padded input
#        [-ph, h + ph_end) x [-pw, w + pw_end) (ceil-mode overhang past the end
#        padding never counts), else the in-bounds taps.
# Overlapping windows accumulate.  Every window has an in-bounds tap (checked
# when the graph is built).
# ---------------------------------------------------------------------------

cdef Py_ssize_t _row_bands(Py_ssize_t planes, Py_ssize_t out_rows, int max_threads) noexcept:
    """Output-row bands per plane for the non-overlapping backward kernels:
    one while the planes give every bound thread four items, else enough
    bands for that (batch 1, few channels).  Bands own disjoint dx rows, so
    the split never changes a bit; it depends on max_threads only."""
    cdef Py_ssize_t want = 4 * max_threads, b
    if planes >= want or out_rows <= 1:
        return 1
    b = (want + planes - 1) // planes
    return b if b < out_rows else out_rows


cdef inline bint _no_overlap(const Win* g, int axis) noexcept:
    return (g.k[axis] - 1) * g.dil[axis] + 1 <= g.s[axis]


cdef Win _pool2d_win(tuple dims) except *:
    """win_from(dims) for a 1-D or 2-D pool: the depth axis must be trivial."""
    if dims[2] != 1 or dims[5] != 1 or dims[8] != 1:
        raise ValueError(f"pool backward: 1-D and 2-D pools only, got window dims {dims}")
    return win_from(dims)


cdef int _max_pool_backward_plane(const float[::1] x, const float[::1] dy, float[::1] dx,
                                  const Win* g, Py_ssize_t plane) except -1 nogil:
    cdef Py_ssize_t xb = plane * g.size[1] * g.size[2]
    cdef Py_ssize_t yb = plane * g.out[1] * g.out[2]
    cdef Py_ssize_t oh, ow, a, b, hs, ws, a_lo, a_hi, b_lo, b_hi, row, idx, best_i
    cdef float v, best
    cdef bint has_nan, hit
    memset(&dx[xb], 0, g.size[1] * g.size[2] * sizeof(float))
    for oh in range(g.out[1]):
        hs = oh * g.s[1] - g.pb[1]
        tap_range(hs, g.dil[1], g.k[1], 0, g.size[1], &a_lo, &a_hi)
        if a_lo >= a_hi:
            continue
        for ow in range(g.out[2]):
            ws = ow * g.s[2] - g.pb[2]
            tap_range(ws, g.dil[2], g.k[2], 0, g.size[2], &b_lo, &b_hi)
            if b_lo >= b_hi:
                continue                     # window entirely in padding: no gradient
            # Pass 1, branch-free: the maximum (maxss) and whether a NaN occurs.
            best = x[xb + (hs + a_lo * g.dil[1]) * g.size[2] + ws + b_lo * g.dil[2]]
            has_nan = False
            for a in range(a_lo, a_hi):
                row = xb + (hs + a * g.dil[1]) * g.size[2] + ws
                for b in range(b_lo, b_hi):
                    v = x[row + b * g.dil[2]]
                    best = v if v > best else best
                    has_nan = has_nan | (v != v)
            # Pass 2 with an integer select (the hit position is data-dependent,
            # so no early exit): without NaN the taps run in reverse and the last
            # hit is the first maximum; with NaN they run forward and the last
            # hit is the last NaN.
            best_i = 0
            if not has_nan:
                for a in range(a_hi - 1, a_lo - 1, -1):
                    row = (hs + a * g.dil[1]) * g.size[2] + ws
                    for b in range(b_hi - 1, b_lo - 1, -1):
                        idx = row + b * g.dil[2]
                        hit = x[xb + idx] == best
                        best_i = idx if hit else best_i
            else:
                for a in range(a_lo, a_hi):
                    row = (hs + a * g.dil[1]) * g.size[2] + ws
                    for b in range(b_lo, b_hi):
                        idx = row + b * g.dil[2]
                        v = x[xb + idx]
                        best_i = idx if v != v else best_i
            dx[xb + best_i] += dy[yb + oh * g.out[2] + ow]
    return 0


cdef int _avg_pool_backward_plane(const float[::1] dy, float[::1] dx, const Win* g,
                                  bint count_include_pad, Py_ssize_t divisor_override,
                                  Py_ssize_t plane) except -1 nogil:
    cdef Py_ssize_t xb = plane * g.size[1] * g.size[2]
    cdef Py_ssize_t yb = plane * g.out[1] * g.out[2]
    cdef Py_ssize_t oh, ow, hs, ws, a0, a1, b0, b1, pa0, pa1, pb0, pb1, a, b, row, div
    cdef float gv
    memset(&dx[xb], 0, g.size[1] * g.size[2] * sizeof(float))
    for oh in range(g.out[1]):
        hs = oh * g.s[1] - g.pb[1]
        # in-bounds rows, then rows inside the padded input
        tap_range(hs, g.dil[1], g.k[1], 0, g.size[1], &a0, &a1)
        tap_range(hs + g.pb[1], g.dil[1], g.k[1], 0, g.size[1] + g.pb[1] + g.pe[1], &pa0, &pa1)
        if a0 >= a1:
            continue
        for ow in range(g.out[2]):
            ws = ow * g.s[2] - g.pb[2]
            tap_range(ws, g.dil[2], g.k[2], 0, g.size[2], &b0, &b1)
            if b0 >= b1:
                continue
            if divisor_override > 0:
                div = divisor_override
            elif count_include_pad:
                tap_range(ws + g.pb[2], g.dil[2], g.k[2], 0, g.size[2] + g.pb[2] + g.pe[2], &pb0, &pb1)
                div = (pa1 - pa0) * (pb1 - pb0)
            else:
                div = (a1 - a0) * (b1 - b0)
            gv = dy[yb + oh * g.out[2] + ow] / <float>div
            for a in range(a0, a1):
                row = xb + (hs + a * g.dil[1]) * g.size[2] + ws
                for b in range(b0, b1):
                    dx[row + b * g.dil[2]] += gv
    return 0


cdef class MaxPoolBackwardLaunch(Launch):
    """dx of a 1-D or 2-D max pool: dy goes to the tap the forward's indices name."""
    cdef const float[::1] x
    cdef const float[::1] dy
    cdef float[::1] dx
    cdef Win g
    cdef MpbGeom mg
    cdef bint fast      # rlx_mpb_plane (int32 plane offsets) instead of _max_pool_backward_plane
    cdef Py_ssize_t bands   # > 0: rlx_mpb22_band (window 2, stride 2, no padding), bands per plane
    cdef Py_ssize_t bands33 # > 0: rlx_mpb33_band (window 3, stride 2, padding 0 / 1, AVX2), bands per plane
    cdef PwiGeom pg         # rlx_mpb_plane_pad's geometry, when use_pad
    cdef bint use_pad

    def __init__(self, x, dy, dx, tuple dims, int max_threads):
        self.x = x
        self.dy = dy
        self.dx = dx
        self.g = _pool2d_win(dims)
        self.max_threads = max(1, max_threads)
        self.fast = self.g.size[1] * self.g.size[2] < 2 ** 31
        g = &self.g
        self.bands = 0
        if (g.k[2] == 2 and g.s[2] == 2 and g.dil[2] == 1 and g.pb[2] == 0 and g.pb[1] == 0
                and g.dil[1] == 1 and g.k[1] == g.s[1] and g.k[1] <= 2):
            self.bands = _row_bands(g.n * g.c, g.out[1], self.max_threads)
        self.bands33 = 0
        if (self.bands == 0 and rlx_simd_level() and g.k[1] == 3 and g.k[2] == 3 and g.s[1] == 2 and g.s[2] == 2
                and g.dil[1] == 1 and g.dil[2] == 1 and g.pb[1] in (0, 1) and g.pb[2] in (0, 1)
                and rlx_mpb33_fits(g.size[2], g.out[2], g.pb[2])):
            self.bands33 = _row_bands(g.n * g.c, g.out[1], self.max_threads)
        self.use_pad = (self.bands == 0 and self.bands33 == 0 and rlx_simd_level() and self.fast and g.dil[2] == 1 and g.s[2] in (1, 2)
                        and 8 <= g.out[2] <= RLX_MPB_PAD_MAX_OW
                        and g.k[1] * rlx_pwi_pad_row(g.out[2], g.k[2], g.s[2]) <= RLX_PWI_PAD_FLOATS)
        self.pg.D, self.pg.H, self.pg.W = 1, g.size[1], g.size[2]
        self.pg.OD, self.pg.OH, self.pg.OW = 1, g.out[1], g.out[2]
        self.pg.kd, self.pg.kh, self.pg.kw = 1, g.k[1], g.k[2]
        self.pg.sd, self.pg.sh, self.pg.sw = 1, g.s[1], g.s[2]
        self.pg.pd, self.pg.ph, self.pg.pw = 0, g.pb[1], g.pb[2]
        self.pg.dd, self.pg.dh, self.pg.dw = 1, g.dil[1], g.dil[2]
        self.pg.flat = 0
        self.mg.H, self.mg.W = self.g.size[1], self.g.size[2]
        self.mg.OH, self.mg.OW = self.g.out[1], self.g.out[2]
        self.mg.kh, self.mg.kw = self.g.k[1], self.g.k[2]
        self.mg.sh, self.mg.sw = self.g.s[1], self.g.s[2]
        self.mg.ph, self.mg.pw = self.g.pb[1], self.g.pb[2]
        self.mg.dh, self.mg.dw = self.g.dil[1], self.g.dil[2]

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t plane, item, nb = self.bands
        if nb > 0:
            for item in prange(self.g.n * self.g.c * nb, num_threads=t, schedule='static'):
                work_note(1)
                rlx_mpb22_band(&self.x[0], self.x.shape[0], &self.dy[0], self.dy.shape[0], &self.dx[0], &self.mg,
                               item // nb, (item % nb) * self.g.out[1] // nb,
                               (item % nb + 1) * self.g.out[1] // nb)
            # end: prange
            return 0
        nb = self.bands33
        if nb > 0:
            for item in prange(self.g.n * self.g.c * nb, num_threads=t, schedule='static'):
                work_note(1)
                rlx_mpb33_band(&self.x[0], self.x.shape[0], &self.dy[0], self.dy.shape[0], &self.dx[0], &self.mg,
                               item // nb, (item % nb) * self.g.out[1] // nb,
                               (item % nb + 1) * self.g.out[1] // nb)
            # end: prange
            return 0
        if self.use_pad:
            for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                rlx_mpb_plane_pad(&self.x[0], self.x.shape[0], &self.dy[0], self.dy.shape[0], &self.dx[0],
                                  &self.pg, plane)
            # end: prange
            return 0
        if self.fast:
            for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                rlx_mpb_plane(&self.x[0], self.x.shape[0], &self.dy[0], self.dy.shape[0], &self.dx[0],
                              &self.mg, plane)
            # end: prange
            return 0
        for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
            work_note(1)
            _max_pool_backward_plane(self.x, self.dy, self.dx, &self.g, plane)
        # end: prange
        return 0


cdef class AvgPoolBackwardLaunch(Launch):
    """dx of a 1-D or 2-D average pool: dy / divisor to every in-bounds tap."""
    cdef const float[::1] dy
    cdef float[::1] dx
    cdef Win g
    cdef bint count_include_pad
    cdef Py_ssize_t divisor_override
    cdef ApbGeom ag     # rlx_apb_plane's geometry; ag.row_len == 0: _avg_pool_backward_plane
    cdef Py_ssize_t bands   # > 0: rlx_apb_nov_band (windows never overlap), bands per plane
    cdef bint gather        # rlx_apg_plane (h dilation 1, few output rows per dx row, any line length)

    def __init__(self, dy, dx, tuple dims, bint count_include_pad, Py_ssize_t divisor_override, int max_threads):
        self.dy = dy
        self.dx = dx
        self.g = _pool2d_win(dims)
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override
        self.max_threads = max(1, max_threads)
        g = &self.g
        self.ag.row_len = rlx_apb_row_len(g.size[2], g.out[2], g.k[2], g.s[2], g.pb[2], g.dil[2])
        if self.ag.row_len > RLX_APB_MAX or g.out[2] > RLX_APB_MAX:
            self.ag.row_len = 0          # longer lines than the stack buffers: the general loop
        self.ag.H, self.ag.W, self.ag.OH, self.ag.OW = g.size[1], g.size[2], g.out[1], g.out[2]
        self.ag.kh, self.ag.kw, self.ag.sh, self.ag.sw = g.k[1], g.k[2], g.s[1], g.s[2]
        self.ag.ph, self.ag.pw, self.ag.peh, self.ag.pew = g.pb[1], g.pb[2], g.pe[1], g.pe[2]
        self.ag.dh, self.ag.dw = g.dil[1], g.dil[2]
        self.ag.include_pad = count_include_pad
        self.ag.divisor_override = divisor_override
        self.bands = 0
        if _no_overlap(g, 1) and _no_overlap(g, 2) and g.out[2] <= RLX_APB_MAX:
            self.bands = _row_bands(g.n * g.c, g.out[1], self.max_threads)
        self.gather = (g.dil[1] == 1 and (g.k[1] + g.s[1] - 1) // g.s[1] <= RLX_APG_RING
                       and (g.k[2] - 1) * g.dil[2] <= RLX_APG_CH)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t plane, item, nb = self.bands
        if nb > 0:
            for item in prange(self.g.n * self.g.c * nb, num_threads=t, schedule='static'):
                work_note(1)
                rlx_apb_nov_band(&self.dy[0], self.dy.shape[0], &self.dx[0], self.dx.shape[0], &self.ag,
                                 item // nb, (item % nb) * self.g.out[1] // nb,
                                 (item % nb + 1) * self.g.out[1] // nb)
            # end: prange
            return 0
        if self.gather:
            for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                rlx_apg_plane(&self.dy[0], self.dy.shape[0], &self.dx[0], self.dx.shape[0], &self.ag, plane)
            # end: prange
            return 0
        if self.ag.row_len > 0:
            for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                rlx_apb_plane(&self.dy[0], self.dy.shape[0], &self.dx[0], self.dx.shape[0], &self.ag, plane)
            # end: prange
            return 0
        for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
            work_note(1)
            _avg_pool_backward_plane(self.dy, self.dx, &self.g, self.count_include_pad,
                                     self.divisor_override, plane)
        # end: prange
        return 0


cdef class MaxPoolBackwardIndicesLaunch(Launch):
    """dx of a max pool of any rank from the forward's int64 indices: zero each
    plane, then add every dy at the input its index names, in output order (the
    additions MaxPoolBackwardLaunch makes, without re-scanning the windows)."""
    cdef const float[::1] dy
    cdef const int64_t[::1] ind
    cdef float[::1] dx
    cdef Py_ssize_t planes, in_size, out_size
    cdef int flat

    def __init__(self, dy, ind, dx, Py_ssize_t planes, Py_ssize_t in_size, Py_ssize_t out_size, bint flat,
                 int max_threads):
        if dy.shape[0] != planes * out_size or ind.shape[0] != planes * out_size or dx.shape[0] != planes * in_size:
            raise ValueError(f"max pool backward (indices): buffers of {dy.shape[0]} / {ind.shape[0]} / "
                             f"{dx.shape[0]} entries for {planes} planes of {out_size} -> {in_size}")
        self.dy = dy
        self.ind = ind
        self.dx = dx
        self.planes = planes
        self.in_size = in_size
        self.out_size = out_size
        self.flat = flat
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t plane
        for plane in prange(self.planes, num_threads=t, schedule='static'):
            work_note(1)
            rlx_mpbi_plane(&self.dy[0], &self.ind[0], self.dy.shape[0], &self.dx[0], self.dx.shape[0],
                           self.in_size, self.out_size, self.flat, plane)
        # end: prange
        return 0
