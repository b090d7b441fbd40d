# im2col / col2im (float32, N-d as 3-d) and their bound launches.
#
# The patch matrix holds, for every image n, block position l = (od, oh, ow)
# and column ck = (c, kd, kh, kw), the input value under that tap (0 in the
# padding).  Two layouts share one kernel through element strides:
#
#   layout   shape               stride of n    of l    of ck
#   rows     [N*L, C*K]          L*C*K          C*K     1       (spec's Im2Col)
#   onnx     [N, C*K, L]         C*K*L          1       L       (ONNX Col2Im,
#                                                               torch unfold/fold)
#
# col2im is the exact adjoint of im2col: x[n, c, i] = sum of every patch entry
# that im2col would read from x[n, c, i].  It is computed as a gather per input
# line (n, c, id, ih) -- the outputs whose window covers that line are found
# by division -- so items write disjoint memory, no thread races, and each
# element's sum has a fixed order (tap by tap, in float like ONNX Runtime's
# and PyTorch's) for any thread count.
#
# In the onnx layout a channel's tap rows are contiguous, so col2im there
# works per (n, c) plane instead.  With stride 1 along w each row of the plane
# is summed from the tap rows that reach it and written once; otherwise the
# plane is zeroed and each tap row added in (read once, in order).  Either
# way, per element the same additions in the same order as the gather.
#
# Work items (prange, static): im2col one output line (n, c, od, oh); col2im
# one input line (rows layout) or plane (onnx layout).
#
# These ops do not use the conv kernels' shared vol2col/col2vol
# (src/_vol2col.pxd): that pair writes contiguous [K, columns] rows for a
# GEMM, while these serve two layouts through element strides (the rows
# layout writes strided) and col2im gathers per input line so that items
# never share memory.
cimport cython
from cython.parallel cimport prange, threadid
from libc.string cimport memcpy, memset

from _codes cimport COL_LAYOUT_ROWS, COL_LAYOUT_ONNX
from _window cimport Win, win_from, out_range
from rlx_cpu._launch cimport Launch, effective_threads, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_omp.h":
    int RLX_DEBUG_CHECKS

cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil

cdef extern from *:
    """
    /* dst[i] += src[i], i < n: col2im's contiguous tap runs (plain adds, so
       both variants give the same bits). */
    #if RLX_X86_DISPATCH
    RLX_TARGET_AVX2 static void rlx_add_run_avx2(float* d, const float* s, Py_ssize_t n)
    {
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(d + i, _mm256_add_ps(_mm256_loadu_ps(d + i), _mm256_loadu_ps(s + i)));
        for (; i < n; i++)
            d[i] += s[i];
    }
    #endif
    static void rlx_add_run(float* d, const float* s, Py_ssize_t n)
    {
    #if RLX_X86_DISPATCH
        if (rlx_simd_level()) { rlx_add_run_avx2(d, s, n); return; }
    #endif
        for (Py_ssize_t i = 0; i < n; i++)
            d[i] += s[i];
    }

    /* One row of a col2im plane, stride 1 along w: dst[x] += src[j * tap][x - shift_j]
       for the taps j in order, shift_j = j * dil - pw, wherever x - shift_j is an
       output [0, ow) and x is in [0, w).  Each element gets the same adds in the
       same order as adding tap row by tap row (rlx_add_run), so the same bits; the
       row stays in registers across the taps, and the elements every tap reaches
       go 8 at a time. */
    static inline void rlx_col2im_taps_at(float* dst, const float* src, Py_ssize_t tap, Py_ssize_t kw,
                                          Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow,
                                          Py_ssize_t x)
    {
        float v = dst[x];
        for (Py_ssize_t j = 0; j < kw; j++) {
            const Py_ssize_t o = x - (j * dil - pw);
            if (o >= 0 && o < ow) v += src[j * tap + o];
        }
        dst[x] = v;
    }
    static inline void rlx_col2im_inner(Py_ssize_t kw, Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow,
                                        Py_ssize_t* x0, Py_ssize_t* x1)
    {
        /* [x0, x1): the elements every tap reaches */
        Py_ssize_t a = 0, b = w;
        for (Py_ssize_t j = 0; j < kw; j++) {
            const Py_ssize_t sh = j * dil - pw;
            if (sh > a) a = sh;
            if (ow + sh < b) b = ow + sh;
        }
        *x0 = a;
        *x1 = b > a ? b : a;
    }
    #if RLX_X86_DISPATCH
    RLX_TARGET_AVX2 static inline __m256 rlx_col2im_block8(const float* dst, const float* src, Py_ssize_t tap,
                                                           Py_ssize_t kw, Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t x)
    {
        __m256 v = _mm256_loadu_ps(dst + x);
        for (Py_ssize_t j = 0; j < kw; j++)
            v = _mm256_add_ps(v, _mm256_loadu_ps(src + j * tap + x - (j * dil - pw)));
        return v;
    }
    RLX_TARGET_AVX2 static void rlx_col2im_taps_avx2(float* dst, const float* src, Py_ssize_t tap, Py_ssize_t kw,
                                                     Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow)
    {
        Py_ssize_t x0, x1, x;
        rlx_col2im_inner(kw, dil, pw, w, ow, &x0, &x1);
        for (x = 0; x < x0 && x < w; x++) rlx_col2im_taps_at(dst, src, tap, kw, dil, pw, w, ow, x);
        if (x1 - x0 >= 8) {
            /* the last block first, from dst as it was, stored after the others: the
               blocks overlap without masks, and an element in both gets the same value */
            const __m256 last = rlx_col2im_block8(dst, src, tap, kw, dil, pw, x1 - 8);
            for (x = x0; x + 8 <= x1; x += 8)
                _mm256_storeu_ps(dst + x, rlx_col2im_block8(dst, src, tap, kw, dil, pw, x));
            _mm256_storeu_ps(dst + x1 - 8, last);
        } else {
            for (x = x0; x < x1; x++) rlx_col2im_taps_at(dst, src, tap, kw, dil, pw, w, ow, x);
        }
        for (x = x1 > x0 ? x1 : x0; x < w; x++) rlx_col2im_taps_at(dst, src, tap, kw, dil, pw, w, ow, x);
    }
    #endif

    /* One whole row of a col2im plane, stride 1 along w, from the nr source rows
       whose (kd, kh) taps reach it (srcs, in tap order): dst[x] = the sum from
       +0.0f, over those rows in order and over the taps j in order, of
       srcs[r][j * tap + x - shift_j] wherever x - shift_j is an output [0, ow),
       shift_j = j * dil - pw.  The same adds in the same order as zeroing the
       plane and adding a tap row at a time (rlx_col2im_taps per (kd, kh)), so the
       same bits; the row is written once, not read and written per (kd, kh). */
    static inline void rlx_col2im_gather_at(float* dst, const float* const* srcs, Py_ssize_t nr, Py_ssize_t tap,
                                            Py_ssize_t kw, Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t ow,
                                            Py_ssize_t x)
    {
        float v = 0.0f;
        for (Py_ssize_t r = 0; r < nr; r++)
            for (Py_ssize_t j = 0; j < kw; j++) {
                const Py_ssize_t o = x - (j * dil - pw);
                if (o >= 0 && o < ow) v += srcs[r][j * tap + o];
            }
        dst[x] = v;
    }
    #if RLX_X86_DISPATCH
    RLX_TARGET_AVX2 static void rlx_col2im_gather_avx2(float* dst, const float* const* srcs, Py_ssize_t nr,
                                                       Py_ssize_t tap, Py_ssize_t kw, Py_ssize_t dil,
                                                       Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow)
    {
        Py_ssize_t x0, x1, x;
        rlx_col2im_inner(kw, dil, pw, w, ow, &x0, &x1);
        for (x = 0; x < x0 && x < w; x++) rlx_col2im_gather_at(dst, srcs, nr, tap, kw, dil, pw, ow, x);
        if (x1 - x0 >= 8) {
            /* four blocks of 8 at a time (four independent add chains: one chain
               waits an add's latency per tap); a block past the end is moved back
               to end at x1 and may overlap another: both store the same values */
            for (x = x0; x < x1; x += 32) {
                const Py_ssize_t p0 = x, p1 = x + 8 < x1 - 8 ? x + 8 : x1 - 8;
                const Py_ssize_t p2 = x + 16 < x1 - 8 ? x + 16 : x1 - 8, p3 = x + 24 < x1 - 8 ? x + 24 : x1 - 8;
                const Py_ssize_t q0 = p0 < x1 - 8 ? p0 : x1 - 8;
                __m256 v0 = _mm256_setzero_ps(), v1 = v0, v2 = v0, v3 = v0;
                for (Py_ssize_t r = 0; r < nr; r++)
                    for (Py_ssize_t j = 0; j < kw; j++) {
                        const float* sj = srcs[r] + j * tap - (j * dil - pw);
                        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(sj + q0));
                        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(sj + p1));
                        v2 = _mm256_add_ps(v2, _mm256_loadu_ps(sj + p2));
                        v3 = _mm256_add_ps(v3, _mm256_loadu_ps(sj + p3));
                    }
                _mm256_storeu_ps(dst + q0, v0);
                _mm256_storeu_ps(dst + p1, v1);
                _mm256_storeu_ps(dst + p2, v2);
                _mm256_storeu_ps(dst + p3, v3);
            }
        } else {
            for (x = x0; x < x1; x++) rlx_col2im_gather_at(dst, srcs, nr, tap, kw, dil, pw, ow, x);
        }
        for (x = x1 > x0 ? x1 : x0; x < w; x++) rlx_col2im_gather_at(dst, srcs, nr, tap, kw, dil, pw, ow, x);
    }
    #endif
    static void rlx_col2im_gather(float* dst, const float* const* srcs, Py_ssize_t nr, Py_ssize_t tap,
                                  Py_ssize_t kw, Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow)
    {
        if (nr == 0) { memset(dst, 0, (size_t)w * sizeof(float)); return; }
    #if RLX_X86_DISPATCH
        if (rlx_simd_level()) { rlx_col2im_gather_avx2(dst, srcs, nr, tap, kw, dil, pw, w, ow); return; }
    #endif
        for (Py_ssize_t x = 0; x < w; x++) rlx_col2im_gather_at(dst, srcs, nr, tap, kw, dil, pw, ow, x);
    }

    static void rlx_col2im_taps(float* dst, const float* src, Py_ssize_t tap, Py_ssize_t kw, Py_ssize_t dil,
                                Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow)
    {
    #if RLX_X86_DISPATCH
        if (rlx_simd_level()) { rlx_col2im_taps_avx2(dst, src, tap, kw, dil, pw, w, ow); return; }
    #endif
        for (Py_ssize_t x = 0; x < w; x++) rlx_col2im_taps_at(dst, src, tap, kw, dil, pw, w, ow, x);
    }
    """
    void rlx_add_run(float* d, const float* s, Py_ssize_t n) noexcept nogil
    void rlx_col2im_taps(float* dst, const float* src, Py_ssize_t tap, Py_ssize_t kw, Py_ssize_t dil,
                         Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow) noexcept nogil
    void rlx_col2im_gather(float* dst, const float* const* srcs, Py_ssize_t nr, Py_ssize_t tap,
                           Py_ssize_t kw, Py_ssize_t dil, Py_ssize_t pw, Py_ssize_t w, Py_ssize_t ow) noexcept nogil

rlx_simd_init()

# Layout codes (src/_codes.pxd) the compiler stores in im2col/col2im thunks.
LAYOUT_ROWS = COL_LAYOUT_ROWS
LAYOUT_ONNX = COL_LAYOUT_ONNX


cdef struct ColStrides:
    Py_ssize_t n, l, ck


cdef ColStrides _strides(const Win* g, int layout) noexcept nogil:
    cdef ColStrides st
    cdef Py_ssize_t nl = g.out[0] * g.out[1] * g.out[2]
    cdef Py_ssize_t nck = g.c * g.k[0] * g.k[1] * g.k[2]
    st.n = nl * nck
    if layout == COL_LAYOUT_ROWS:
        st.l = nck
        st.ck = 1
    else:
        st.l = 1
        st.ck = nl
    return st


def col2im_scratch_floats(tuple dims, int nthreads):
    """Floats of arena scratch col2im needs: one input row per thread."""
    cdef Win g = win_from(dims)
    return int(g.size[2] * nthreads)


cdef inline void _line_copy(float* dst, const float* src, Py_ssize_t shift, Py_ssize_t lo, Py_ssize_t hi,
                            Py_ssize_t n, Py_ssize_t sw) noexcept nogil:
    """dst[i] = src[i * sw + shift] for i in [lo, hi), 0 for the rest of [0, n)."""
    cdef Py_ssize_t i
    if hi <= lo:
        memset(dst, 0, n * sizeof(float))
        return
    if lo > 0:
        memset(dst, 0, lo * sizeof(float))
    if sw == 1:
        memcpy(dst + lo, src + lo + shift, (hi - lo) * sizeof(float))
    else:
        for i in range(lo, hi):
            dst[i] = src[i * sw + shift]
    if hi < n:
        memset(dst + hi, 0, (n - hi) * sizeof(float))


cdef inline void _line_add(float* dst, const float* src, Py_ssize_t shift, Py_ssize_t lo, Py_ssize_t hi,
                           Py_ssize_t sw) noexcept nogil:
    """dst[i * sw + shift] += src[i] for i in [lo, hi) (the order of the indexed loop)."""
    cdef Py_ssize_t i
    if sw == 1:
        rlx_add_run(dst + lo + shift, src + lo, hi - lo)
    else:
        for i in range(lo, hi):
            dst[i * sw + shift] += src[i]


cdef int _im2col_line(const float[::1] x, float[::1] col, const Win* g, const ColStrides* st,
                      Py_ssize_t item) except -1 nogil:
    """Patch entries of output line item = (n, c, od, oh), all taps and ow."""
    cdef Py_ssize_t oh = item % g.out[1]
    cdef Py_ssize_t od = (item // g.out[1]) % g.out[0]
    cdef Py_ssize_t c = (item // (g.out[1] * g.out[0])) % g.c
    cdef Py_ssize_t n = item // (g.out[1] * g.out[0] * g.c)
    cdef Py_ssize_t xb = (n * g.c + c) * g.size[0] * g.size[1] * g.size[2]
    cdef Py_ssize_t lbase = (od * g.out[1] + oh) * g.out[2]
    cdef Py_ssize_t a, b, j, i_d, i_h, ck, base, shift, lo, hi, ow, row
    cdef Py_ssize_t ow_n = g.out[2]
    cdef Py_ssize_t sw = g.s[2]
    cdef bint inside
    for a in range(g.k[0]):
        i_d = od * g.s[0] - g.pb[0] + a * g.dil[0]
        for b in range(g.k[1]):
            i_h = oh * g.s[1] - g.pb[1] + b * g.dil[1]
            inside = 0 <= i_d < g.size[0] and 0 <= i_h < g.size[1]
            row = xb + (i_d * g.size[1] + i_h) * g.size[2]
            for j in range(g.k[2]):
                ck = ((c * g.k[0] + a) * g.k[1] + b) * g.k[2] + j
                base = n * st.n + ck * st.ck + lbase * st.l
                if not inside:
                    for ow in range(ow_n):
                        col[base + ow * st.l] = 0.0
                    continue
                shift = j * g.dil[2] - g.pb[2]
                out_range(shift, sw, g.size[2], ow_n, &lo, &hi)
                if st.l == 1 and not RLX_DEBUG_CHECKS:
                    # onnx layout: each tap's line is contiguous -- zero the
                    # padded ends, copy the rest (wide loads for stride 1)
                    _line_copy(&col[base], &x[0] + row, shift, lo, hi, ow_n, sw)
                    continue
                for ow in range(lo):
                    col[base + ow * st.l] = 0.0
                for ow in range(lo, hi):
                    col[base + ow * st.l] = x[row + ow * sw + shift]
                for ow in range(hi, ow_n):
                    col[base + ow * st.l] = 0.0
    return 0


cdef inline Py_ssize_t _tap_output(Py_ssize_t t, Py_ssize_t s, Py_ssize_t n_out) noexcept nogil:
    """The output o in [0, n_out) with o * s == t, or -1 (no division at stride 1)."""
    if t < 0:
        return -1
    if s != 1:
        if t % s != 0:
            return -1
        t = t // s
    return t if t < n_out else -1


cdef inline Py_ssize_t _row_tap(const Win* g, Py_ssize_t i_d, Py_ssize_t i_h, Py_ssize_t a,
                                Py_ssize_t b) noexcept nogil:
    """The output row od * out_h + oh whose (kd, kh) tap (a, b) reads the input
    row (i_d, i_h): od*s - pb + a*dil == i_d along d, likewise along h; or -1."""
    cdef Py_ssize_t od = _tap_output(i_d + g.pb[0] - a * g.dil[0], g.s[0], g.out[0])
    cdef Py_ssize_t oh
    if od < 0:
        return -1
    oh = _tap_output(i_h + g.pb[1] - b * g.dil[1], g.s[1], g.out[1])
    return -1 if oh < 0 else od * g.out[1] + oh


cdef int _col2im_line(const float[::1] col, float[::1] x, float[::1] acc, Py_ssize_t acc_off,
                      const Win* g, const ColStrides* st, Py_ssize_t item) except -1 nogil:
    """Input line item = (n, c, id, ih): sum every patch entry that reads it."""
    cdef Py_ssize_t i_h = item % g.size[1]
    cdef Py_ssize_t i_d = (item // g.size[1]) % g.size[0]
    cdef Py_ssize_t c = (item // (g.size[1] * g.size[0])) % g.c
    cdef Py_ssize_t n = item // (g.size[1] * g.size[0] * g.c)
    cdef Py_ssize_t w = g.size[2]
    cdef Py_ssize_t sw = g.s[2]
    cdef Py_ssize_t a, b, j, t, orow, ck, base, shift, lo, hi, ow, i
    for i in range(w):
        acc[acc_off + i] = 0.0
    for a in range(g.k[0]):
        for b in range(g.k[1]):
            orow = _row_tap(g, i_d, i_h, a, b)
            if orow < 0:
                continue
            for j in range(g.k[2]):
                ck = ((c * g.k[0] + a) * g.k[1] + b) * g.k[2] + j
                base = n * st.n + ck * st.ck + orow * g.out[2] * st.l
                shift = j * g.dil[2] - g.pb[2]
                out_range(shift, sw, w, g.out[2], &lo, &hi)
                if st.l == 1 and not RLX_DEBUG_CHECKS and hi > lo:
                    # onnx layout: the tap's entries are contiguous (raw pointers vectorise)
                    _line_add(&acc[acc_off], &col[base], shift, lo, hi, sw)
                    continue
                for ow in range(lo, hi):
                    acc[acc_off + ow * sw + shift] += col[base + ow * st.l]
    t = item * w
    for i in range(w):
        x[t + i] = acc[acc_off + i]
    return 0


cdef enum:
    GATHER_ROWS = 32        # (kd, kh) taps a row gathers at most (more: tap row by tap row)


cdef int _col2im_plane_rows(const float[::1] col, float[::1] x, const Win* g, Py_ssize_t item) except -1 nogil:
    """onnx layout, stride 1 along w, at most GATHER_ROWS (kd, kh) taps: each
    row of x's plane item = (n, c) written once from the tap rows that reach
    it (rlx_col2im_gather), in _col2im_plane's order, so the same bits."""
    cdef const float* srcs[GATHER_ROWS]
    cdef Py_ssize_t c = item % g.c
    cdef Py_ssize_t n = item // g.c
    cdef Py_ssize_t hw = g.size[1] * g.size[2], plane = g.size[0] * hw
    cdef Py_ssize_t nl = g.out[0] * g.out[1] * g.out[2]
    cdef Py_ssize_t kk = g.k[0] * g.k[1] * g.k[2]
    cdef Py_ssize_t a, b, i_d, i_h, orow, nr
    for i_d in range(g.size[0]):
        for i_h in range(g.size[1]):
            nr = 0
            for a in range(g.k[0]):
                for b in range(g.k[1]):
                    orow = _row_tap(g, i_d, i_h, a, b)
                    if orow < 0:
                        continue
                    srcs[nr] = &col[((n * g.c + c) * kk + (a * g.k[1] + b) * g.k[2]) * nl + orow * g.out[2]]
                    nr += 1
            rlx_col2im_gather(&x[item * plane + i_d * hw + i_h * g.size[2]], srcs, nr, nl, g.k[2], g.dil[2],
                              g.pb[2], g.size[2], g.out[2])
    return 0


cdef int _col2im_plane(const float[::1] col, float[::1] x, const Win* g, Py_ssize_t item) except -1 nogil:
    """onnx layout, plane item = (n, c): zero x's plane, then add each tap's
    row of the patch matrix (contiguous, read once in order) into it, tap by
    tap -- every element gets the same additions in the same order as
    _col2im_line's gather, so the bits are the same."""
    cdef Py_ssize_t c = item % g.c
    cdef Py_ssize_t n = item // g.c
    cdef Py_ssize_t hw = g.size[1] * g.size[2], plane = g.size[0] * hw
    cdef Py_ssize_t nl = g.out[0] * g.out[1] * g.out[2]
    cdef Py_ssize_t a, b, j, od, oh, i_d, i_h, ck, shift, lo, hi, ow
    cdef Py_ssize_t sw = g.s[2]
    cdef float* dst
    cdef const float* src
    memset(&x[item * plane], 0, plane * sizeof(float))
    for a in range(g.k[0]):
        for b in range(g.k[1]):
            ck = ((c * g.k[0] + a) * g.k[1] + b) * g.k[2]
            for od in range(g.out[0]):
                i_d = od * g.s[0] - g.pb[0] + a * g.dil[0]
                if i_d < 0 or i_d >= g.size[0]:
                    continue
                for oh in range(g.out[1]):
                    i_h = oh * g.s[1] - g.pb[1] + b * g.dil[1]
                    if i_h < 0 or i_h >= g.size[1]:
                        continue
                    # the row's tap j entries at src + j * nl
                    src = &col[(n * g.c * g.k[0] * g.k[1] * g.k[2] + ck) * nl + (od * g.out[1] + oh) * g.out[2]]
                    dst = &x[item * plane + i_d * hw + i_h * g.size[2]]
                    if sw == 1:
                        # a row's taps together in registers (rlx_col2im_taps).
                        # Against a tap row at a time, 31 alternating rounds
                        # (Zen 4): C64 56x56 k3 1.23x at 1 and 2 threads, C16
                        # 112x112 k3 1.32x / 1.36x, C32 28x28 k5 1.17x / 1.16x.
                        rlx_col2im_taps(dst, src, nl, g.k[2], g.dil[2], g.pb[2], g.size[2], g.out[2])
                        continue
                    for j in range(g.k[2]):
                        shift = j * g.dil[2] - g.pb[2]
                        out_range(shift, sw, g.size[2], g.out[2], &lo, &hi)
                        for ow in range(lo, hi):
                            dst[ow * sw + shift] += src[j * nl + ow]
    return 0


cdef class Im2ColLaunch(Launch):
    """x [N, C, *spatial] -> patch matrix in `layout`."""
    cdef const float[::1] x
    cdef float[::1] col
    cdef Win g
    cdef ColStrides st

    def __init__(self, x, col, tuple dims, int layout):
        self.x = x
        self.col = col
        self.g = win_from(dims)
        self.st = _strides(&self.g, layout)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t items = self.g.n * self.g.c * self.g.out[0] * self.g.out[1]
        cdef Py_ssize_t item
        for item in prange(items, num_threads=t, schedule='static'):
            work_note(1)
            _im2col_line(self.x, self.col, &self.g, &self.st, item)
        # end: prange
        return 0


cdef class Col2ImLaunch(Launch):
    """Patch matrix in `layout` -> x [N, C, *spatial] (adjoint of im2col)."""
    cdef const float[::1] col
    cdef float[::1] x
    cdef float[::1] acc
    cdef Win g
    cdef ColStrides st

    def __init__(self, col, x, scratch, tuple dims, int layout, int max_threads):
        self.col = col
        self.x = x
        self.acc = scratch
        self.g = win_from(dims)
        self.st = _strides(&self.g, layout)
        self.max_threads = max(1, max_threads)
        if self.acc.shape[0] < self.g.size[2] * self.max_threads:
            raise ValueError(f"col2im: scratch of {self.acc.shape[0]} floats, needs one input row of "
                             f"{self.g.size[2]} per thread ({self.max_threads})")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t items = self.g.n * self.g.c * self.g.size[0] * self.g.size[1]
        cdef Py_ssize_t item
        if self.st.l == 1 and self.g.s[2] == 1 and self.g.k[0] * self.g.k[1] <= GATHER_ROWS:
            # onnx layout, stride 1 along w: whole planes, each row written once
            for item in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                _col2im_plane_rows(self.col, self.x, &self.g, item)
            return 0
        if self.st.l == 1:
            # onnx layout: whole planes, each tap row read once in order
            for item in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                work_note(1)
                _col2im_plane(self.col, self.x, &self.g, item)
            return 0
        for item in prange(items, num_threads=t, schedule='static'):
            work_note(1)
            _col2im_line(self.col, self.x, self.acc, threadid() * self.g.size[2],
                         &self.g, &self.st, item)
        # end: prange
        return 0

