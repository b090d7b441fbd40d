/* Pool backward for windows that never overlap: every dx element belongs to
 * at most one window, so each is written exactly once (no zero-fill pass,
 * no scatter-add) and a band of output rows owns a band of dx rows.  Work
 * items are (plane, band of output rows); the bands never share a dx row,
 * so any split gives the same bits.
 *
 * Band [oh0, oh1) of a plane owns the dx rows [start(oh0), start(oh1)) with
 * start(0) = 0, start(OH) = H and start(oh) = clip(oh*sh - ph, 0, H): the
 * window rows of its outputs, the rows between windows (stride > window)
 * and, for the last band, the rows below the last window (floor mode).
 *
 * Semantics as rlx_mpb_plane / rlx_apb_plane (rlx_pool.h): max sends dy to
 * the forward's index (the first maximum in window order, or the last NaN,
 * or the first in-bounds tap of an all -inf window); average spreads
 * dy / divisor.  Values are written as dy + 0.0f, the bits that zero-fill
 * then add give (a -0 gradient lands as +0). */
#ifndef RLX_POOL_BWD_H
#define RLX_POOL_BWD_H

#include "rlx_pool.h"

static inline ptrdiff_t rlx_nov_row_start(ptrdiff_t oh, ptrdiff_t OH, ptrdiff_t H, ptrdiff_t sh, ptrdiff_t ph) {
    if (oh <= 0) return 0;
    if (oh >= OH) return H;
    ptrdiff_t r = oh * sh - ph;
    return r < 0 ? 0 : (r > H ? H : r);
}

/* ------------------------------------------------------------------------- */
/* Max pool backward, window 2 along w (stride 2), 1 or 2 along h (stride =   */
/* window), no padding, no dilation: ceil mode (a last window cut by the     */
/* edge) and odd sizes (a last row / column no window covers) allowed.       */
/* Compare-and-select per window: the winner's tap gets dy, the others 0.    */
/* ------------------------------------------------------------------------- */

/* One window at columns c, c+1 (c+1 only when two_cols) of rows x0 (and x1
 * when not NULL): the taps in window order, the forward's rule. */
RLX_INLINE void rlx_mpb22_window(const float* restrict x0, const float* restrict x1, float* restrict d0,
                                 float* restrict d1, ptrdiff_t c, int two_cols, float g) {
    const float* xs[4];
    float* ds[4];
    int n = 0;
    xs[n] = x0 + c; ds[n++] = d0 + c;
    if (two_cols) { xs[n] = x0 + c + 1; ds[n++] = d0 + c + 1; }
    if (x1) {
        xs[n] = x1 + c; ds[n++] = d1 + c;
        if (two_cols) { xs[n] = x1 + c + 1; ds[n++] = d1 + c + 1; }
    }
    float best = -INFINITY;
    uint32_t win = 0;
    for (int t = 0; t < n; ++t) {
        /* bit-mask selects: a ternary here becomes a mispredicting branch */
        const float v = *xs[t];
        const uint32_t m = (uint32_t)0 - (uint32_t)RLX_TAKE(v, best);
        uint32_t vb, cb;
        memcpy(&vb, &v, 4);
        memcpy(&cb, &best, 4);
        cb = (vb & m) | (cb & ~m);
        memcpy(&best, &cb, 4);
        win = ((uint32_t)t & m) | (win & ~m);
    }
    const float gz = g + 0.0f;
    for (int t = 0; t < n; ++t) *ds[t] = (uint32_t)t == win ? gz : 0.0f;
}

#if RLX_X86_DISPATCH
/* Windows ow .. ow+7 of rows x0 (and x1 when two_rows): reads and writes
 * columns [2*ow, 2*ow + 16). */
RLX_TARGET_AVX2 static inline void rlx_mpb22_block8(const float* x0, const float* x1, float* d0, float* d1, const float* dyr,
                                      ptrdiff_t ow, int two_rows) {
    const __m256 zero = _mm256_setzero_ps();
    __m256 e0, o0, e1, o1, t1, t2, t3;
    rlx_deint8(x0 + 2 * ow, &e0, &o0);
    /* tap 0 always "wins" first: the running max starts as its value */
    __m256 best = e0;
    t1 = _mm256_or_ps(_mm256_cmp_ps(o0, best, _CMP_GT_OQ), _mm256_cmp_ps(o0, o0, _CMP_UNORD_Q));
    const __m256 g = _mm256_add_ps(_mm256_loadu_ps(dyr + ow), zero);
    if (two_rows) {
        best = _mm256_blendv_ps(best, o0, t1);
        rlx_deint8(x1 + 2 * ow, &e1, &o1);
        t2 = _mm256_or_ps(_mm256_cmp_ps(e1, best, _CMP_GT_OQ), _mm256_cmp_ps(e1, e1, _CMP_UNORD_Q));
        best = _mm256_blendv_ps(best, e1, t2);
        t3 = _mm256_or_ps(_mm256_cmp_ps(o1, best, _CMP_GT_OQ), _mm256_cmp_ps(o1, o1, _CMP_UNORD_Q));
        /* the winner is the last tap taken */
        const __m256 w3 = t3, w2 = _mm256_andnot_ps(t3, t2);
        const __m256 w1 = _mm256_andnot_ps(_mm256_or_ps(t2, t3), t1);
        const __m256 w0 = _mm256_or_ps(_mm256_or_ps(t1, t2), t3);     /* complement: andnot below */
        const __m256 a = _mm256_andnot_ps(w0, g), b = _mm256_and_ps(w1, g);
        const __m256 c = _mm256_and_ps(w2, g), d = _mm256_and_ps(w3, g);
        __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(d0 + 2 * ow, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(d0 + 2 * ow + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        lo = _mm256_unpacklo_ps(c, d);
        hi = _mm256_unpackhi_ps(c, d);
        _mm256_storeu_ps(d1 + 2 * ow, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(d1 + 2 * ow + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    } else {
        const __m256 a = _mm256_andnot_ps(t1, g), b = _mm256_and_ps(t1, g);
        const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(d0 + 2 * ow, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(d0 + 2 * ow + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
}
#endif

RLX_INLINE void rlx_mpb22_band_body(const float* restrict x, ptrdiff_t x_len, const float* restrict dy,
                                    ptrdiff_t dy_len, float* restrict dx, const rlx_mpb_geom* g, ptrdiff_t plane,
                                    ptrdiff_t oh0, ptrdiff_t oh1, int avx2) {
    const ptrdiff_t H = g->H, W = g->W, OW = g->OW, sh = g->sh, in_sz = H * W;
    const float* restrict xp = x + plane * in_sz;
    const float* restrict dyp = dy + plane * g->OH * OW;
    float* restrict dxp = dx + plane * in_sz;
    const ptrdiff_t r_lo = rlx_nov_row_start(oh0, g->OH, H, sh, 0), r_hi = rlx_nov_row_start(oh1, g->OH, H, sh, 0);
    RLX_CHECK_RANGE(plane * in_sz + r_lo * W, plane * in_sz + r_hi * W, x_len, "max pool backward x/dx");
    RLX_CHECK_RANGE(plane * g->OH * OW + oh0 * OW, plane * g->OH * OW + oh1 * OW, dy_len, "max pool backward dy");
    (void)x_len;
    (void)dy_len;
    (void)avx2;
    (void)r_lo;
    (void)r_hi;
    /* windows [0, nfull) span two columns; a ceil-mode last window one */
    const ptrdiff_t nfull = OW < W / 2 ? OW : W / 2;
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        const ptrdiff_t r0 = oh * sh;
        const int two_rows = sh == 2 && r0 + 1 < H;
        const float* restrict x0 = xp + r0 * W;
        const float* restrict x1 = two_rows ? x0 + W : NULL;
        float* restrict d0 = dxp + r0 * W;
        float* d1 = two_rows ? d0 + W : d0;       /* unused for one row */
        const float* restrict dyr = dyp + oh * OW;
        ptrdiff_t ow = 0;
#if RLX_X86_DISPATCH
        /* blocks of 8 windows; the last block ends at nfull and rewrites a
         * few windows with the same values */
        if (avx2 && nfull >= 8) {
            if (two_rows) {
                for (; ow + 8 <= nfull; ow += 8) rlx_mpb22_block8(x0, x1, d0, d1, dyr, ow, 1);
                if (ow < nfull) rlx_mpb22_block8(x0, x1, d0, d1, dyr, nfull - 8, 1);
            } else {
                for (; ow + 8 <= nfull; ow += 8) rlx_mpb22_block8(x0, x1, d0, d1, dyr, ow, 0);
                if (ow < nfull) rlx_mpb22_block8(x0, x1, d0, d1, dyr, nfull - 8, 0);
            }
            ow = nfull;
        }
#endif
        for (; ow < nfull; ++ow) rlx_mpb22_window(x0, x1, d0, d1, 2 * ow, 1, dyr[ow]);
        if (ow < OW) rlx_mpb22_window(x0, x1, d0, d1, 2 * ow, 0, dyr[ow]);   /* ceil: column W-1 alone */
        for (ptrdiff_t c = 2 * OW < W ? 2 * OW : W; c < W; ++c) {          /* floor: columns no window covers */
            d0[c] = 0.0f;
            if (two_rows) d1[c] = 0.0f;
        }
    }
    /* floor mode: rows below the last window */
    const ptrdiff_t covered = g->OH * sh < H ? g->OH * sh : H;
    if (oh1 == g->OH && covered < H) memset(dxp + covered * W, 0, (size_t)((H - covered) * W) * sizeof(float));
}

static void rlx_mpb22_band_base(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                                const rlx_mpb_geom* g, ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    rlx_mpb22_band_body(x, x_len, dy, dy_len, dx, g, plane, oh0, oh1, 0);
}
RLX_TARGET_AVX2 static void rlx_mpb22_band_avx2(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len,
                                                float* dx, const rlx_mpb_geom* g, ptrdiff_t plane, ptrdiff_t oh0,
                                                ptrdiff_t oh1) {
    rlx_mpb22_band_body(x, x_len, dy, dy_len, dx, g, plane, oh0, oh1, 1);
}
/* dx rows of output rows [oh0, oh1) of one plane (see above) */
static void rlx_mpb22_band(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                           const rlx_mpb_geom* g, ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    if (rlx_simd_level()) rlx_mpb22_band_avx2(x, x_len, dy, dy_len, dx, g, plane, oh0, oh1);
    else rlx_mpb22_band_base(x, x_len, dy, dy_len, dx, g, plane, oh0, oh1);
}

/* ------------------------------------------------------------------------- */
/* Average pool backward, windows that never overlap along either axis       */
/* ((k-1)*d + 1 <= s), any padding / ceil mode / divisor rule: per output    */
/* row the window's gradient line (dy / divisor at each in-bounds tap, 0     */
/* between windows) is built in its first in-bounds dx row and copied to the */
/* others; dx rows between windows are zeroed.  Stride 2, window 2, no w     */
/* padding or dilation (the common k2s2): the line is a 2x upsample, 8       */
/* outputs at a time in the AVX2 variant.  OW <= RLX_APB_MAX (stack lines). */
/* ------------------------------------------------------------------------- */
#if RLX_X86_DISPATCH
/* l0[2i] = l0[2i + 1] = dy[i] / (rows * cols[i]) + 0 for 8 outputs from i
 * (and the same in l1 when not NULL) */
RLX_TARGET_AVX2 static inline void rlx_up2_block8(float* l0, float* l1, const float* dy, const int32_t* cols,
                                                  int32_t rows, ptrdiff_t i) {
    const __m256 div = _mm256_cvtepi32_ps(_mm256_mullo_epi32(_mm256_set1_epi32(rows),
                                                             _mm256_loadu_si256((const __m256i*)(cols + i))));
    const __m256 a = _mm256_add_ps(_mm256_div_ps(_mm256_loadu_ps(dy + i), div), _mm256_setzero_ps());
    const __m256 lo = _mm256_unpacklo_ps(a, a), hi = _mm256_unpackhi_ps(a, a);
    const __m256 p = _mm256_permute2f128_ps(lo, hi, 0x20), q = _mm256_permute2f128_ps(lo, hi, 0x31);
    _mm256_storeu_ps(l0 + 2 * i, p);
    _mm256_storeu_ps(l0 + 2 * i + 8, q);
    if (l1) {
        _mm256_storeu_ps(l1 + 2 * i, p);
        _mm256_storeu_ps(l1 + 2 * i + 8, q);
    }
}
/* rlx_up2_block8 over outputs [0, n) when n >= 8 (the last block ends at n,
 * rewriting a few); returns the count done (n or 0) */
RLX_TARGET_AVX2 static ptrdiff_t rlx_up2_avx2(float* l0, float* l1, const float* dy, const int32_t* cols,
                                              int32_t rows, ptrdiff_t n) {
    ptrdiff_t i = 0;
    if (n < 8) return 0;
    for (; i + 8 <= n; i += 8) rlx_up2_block8(l0, l1, dy, cols, rows, i);
    if (i < n) rlx_up2_block8(l0, l1, dy, cols, rows, n - 8);
    return n;
}
#endif

RLX_INLINE void rlx_apb_nov_band_body(const float* restrict dy, ptrdiff_t dy_len, float* restrict dx,
                                      ptrdiff_t dx_len, const rlx_apb_geom* g, ptrdiff_t plane, ptrdiff_t oh0,
                                      ptrdiff_t oh1, int avx2) {
    float gv[RLX_APB_MAX];
    int32_t cols[RLX_APB_MAX];
    const ptrdiff_t H = g->H, W = g->W, OW = g->OW, sw = g->sw, dw = g->dw, pw = g->pw, in_sz = H * W;
    const float* restrict dyp = dy + plane * g->OH * OW;
    float* restrict dxp = dx + plane * in_sz;
    const ptrdiff_t r_lo = rlx_nov_row_start(oh0, g->OH, H, g->sh, g->ph);
    const ptrdiff_t r_hi = rlx_nov_row_start(oh1, g->OH, H, g->sh, g->ph);
    RLX_CHECK_RANGE(plane * in_sz + r_lo * W, plane * in_sz + r_hi * W, dx_len, "avg pool backward dx");
    RLX_CHECK_RANGE(plane * g->OH * OW + oh0 * OW, plane * g->OH * OW + oh1 * OW, dy_len, "avg pool backward dy");
    (void)dx_len;
    (void)dy_len;
    (void)avx2;
    const int up2 = sw == 2 && g->kw == 2 && dw == 1 && pw == 0;
    const ptrdiff_t lo_w = g->include_pad ? -pw : 0, hi_w = g->include_pad ? W + g->pew : W;
    for (ptrdiff_t ow = 0; ow < OW; ++ow) {
        ptrdiff_t j0, j1;
        rlx_pool_taps(ow * sw - pw, dw, g->kw, lo_w, hi_w, &j0, &j1);
        cols[ow] = g->divisor_override > 0 ? 1 : (int32_t)(j1 - j0);
    }
    ptrdiff_t next = r_lo;                  /* first dx row of the band not yet written */
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        const ptrdiff_t hs = oh * g->sh - g->ph;
        ptrdiff_t a0, a1, pa0, pa1;
        rlx_pool_taps(hs, g->dh, g->kh, 0, H, &a0, &a1);
        if (a0 >= a1) continue;             /* rows zeroed as gaps below */
        if (g->include_pad) rlx_pool_taps(hs, g->dh, g->kh, -g->ph, H + g->peh, &pa0, &pa1);
        else { pa0 = a0; pa1 = a1; }
        const float* restrict dyr = dyp + oh * OW;
        const int32_t rows = g->divisor_override > 0 ? (int32_t)g->divisor_override : (int32_t)(pa1 - pa0);
        const ptrdiff_t first = hs + a0 * g->dh;
        float* restrict line = dxp + first * W;
        if (first > next) memset(dxp + next * W, 0, (size_t)((first - next) * W) * sizeof(float));
        /* with two adjacent window rows (k2s2), the 2x upsample writes both */
        float* restrict line2 = up2 && a1 - a0 == 2 && g->dh == 1 ? line + W : NULL;
        if (up2) {
            const ptrdiff_t nfull = OW < W / 2 ? OW : W / 2;
            ptrdiff_t i = 0, done2 = 0;         /* done2: columns [0, done2) of line2 written */
#if RLX_X86_DISPATCH
            if (avx2) i = rlx_up2_avx2(line, line2, dyr, cols, rows, nfull);
            done2 = 2 * i;
#endif
            for (; i < nfull; ++i) line[2 * i] = line[2 * i + 1] = dyr[i] / (float)(rows * cols[i]) + 0.0f;
            if (nfull < OW) line[2 * nfull] = dyr[nfull] / (float)(rows * cols[nfull]) + 0.0f;  /* ceil: W-1 alone */
            for (ptrdiff_t c = 2 * OW < W ? 2 * OW : W; c < W; ++c) line[c] = 0.0f;
            if (line2) {
                for (ptrdiff_t c = done2; c < W; ++c) line2[c] = line[c];
                next = first + 2;
                continue;
            }
        } else {
            for (ptrdiff_t ow = 0; ow < OW; ++ow) gv[ow] = dyr[ow] / (float)(rows * cols[ow]) + 0.0f;
            for (ptrdiff_t c = 0; c < W; ++c) line[c] = 0.0f;
            for (ptrdiff_t ow = 0; ow < OW; ++ow) {
                ptrdiff_t j0, j1;
                const ptrdiff_t ws = ow * sw - pw;
                rlx_pool_taps(ws, dw, g->kw, 0, W, &j0, &j1);
                for (ptrdiff_t j = j0; j < j1; ++j) line[ws + j * dw] = gv[ow];
            }
        }
        /* the window's other rows: a copy of the line, zeros between them (h dilation) */
        ptrdiff_t r = first + 1;
        for (ptrdiff_t a = a0 + 1; a < a1; ++a) {
            const ptrdiff_t h = hs + a * g->dh;
            if (h > r) memset(dxp + r * W, 0, (size_t)((h - r) * W) * sizeof(float));
            memcpy(dxp + h * W, line, (size_t)W * sizeof(float));
            r = h + 1;
        }
        next = r;
    }
    if (r_hi > next) memset(dxp + next * W, 0, (size_t)((r_hi - next) * W) * sizeof(float));
}

static void rlx_apb_nov_band_base(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                                  const rlx_apb_geom* g, ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    rlx_apb_nov_band_body(dy, dy_len, dx, dx_len, g, plane, oh0, oh1, 0);
}
RLX_TARGET_AVX2 static void rlx_apb_nov_band_avx2(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                                                  const rlx_apb_geom* g, ptrdiff_t plane, ptrdiff_t oh0,
                                                  ptrdiff_t oh1) {
    rlx_apb_nov_band_body(dy, dy_len, dx, dx_len, g, plane, oh0, oh1, 1);
}
/* dx rows of output rows [oh0, oh1) of one plane (see above) */
static void rlx_apb_nov_band(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len, const rlx_apb_geom* g,
                             ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    if (rlx_simd_level()) rlx_apb_nov_band_avx2(dy, dy_len, dx, dx_len, g, plane, oh0, oh1);
    else rlx_apb_nov_band_base(dy, dy_len, dx, dx_len, g, plane, oh0, oh1);
}

/* ------------------------------------------------------------------------- */
/* Max pool with indices, AVX2, w dilation 1, stride 1 or 2: outputs         */
/* [w0, w1) of one output line (w1 - w0 >= 8) as blocks of 8 only.  The      */
/* line's input rows are first copied into a stack buffer with -inf in the    */
/* padding (and past the row), so the border windows run the same blocks as   */
/* the interior: a -inf tap never beats the running max (which starts at     */
/* -inf), and each lane's starting index is its window's first in-bounds     */
/* tap, max(ws, 0) in its first row -- the forward's rule (rlx_pwi_line).    */
/* The last block ends at w1 and rewrites a few outputs with the same bits.  */
/* Indices are plane offsets of the real input (int32 inside, stored int64   */
/* + base).                                                                  */
/* ------------------------------------------------------------------------- */
#define RLX_PWI_PAD_FLOATS 8192

/* stack buffer floats a chunk of n outputs needs, per row */
static inline ptrdiff_t rlx_pwi_pad_row(ptrdiff_t n, ptrdiff_t kw, ptrdiff_t sw) {
    return (n - 1) * sw + kw + 16;
}

#if RLX_X86_DISPATCH
#define RLX_PWI_PAD_TAKE(k, v, tap)                                                                            \
    do {                                                                                                       \
        const __m256 t_ = _mm256_or_ps(_mm256_cmp_ps((v), best[k], _CMP_GT_OQ), _mm256_cmp_ps((v), (v), _CMP_UNORD_Q)); \
        best[k] = _mm256_blendv_ps(best[k], (v), t_);                                                          \
        bi[k] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi[k]),                               \
                                                     _mm256_castsi256_ps(_mm256_add_epi32(lane, (tap))), t_)); \
    } while (0)

/* nb blocks of 8 outputs starting at ow[k] (independent chains that overlap
 * in the pipeline): values from the buffer rows vb + r*L at buffer column
 * (ow[k] - w0)*sw, indices rows[r] + ws + j + lane*sw */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) void
rlx_pwi_pad_blocks_body(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr, const rlx_pwi_geom* g,
                        ptrdiff_t w0, const ptrdiff_t* ow, const int nb, float* yr, int64_t* ir, int64_t base,
                        int32_t* wi) {
    const ptrdiff_t sw = g->sw, kw = g->kw;
    const __m256i lane = sw == 2 ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14) : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 best[4];
    __m256i bi[4];
    for (int k = 0; k < nb; ++k) {
        const int32_t ws = (int32_t)(ow[k] * sw - g->pw);
        best[k] = _mm256_set1_ps(-INFINITY);
        bi[k] = _mm256_add_epi32(_mm256_set1_epi32(rows[0]), _mm256_max_epi32(
            _mm256_add_epi32(lane, _mm256_set1_epi32(ws)), _mm256_setzero_si256()));
    }
    for (ptrdiff_t r = 0; r < nr; ++r) {
        const float* xr = vb + r * L;
        if (sw == 2) {
            for (ptrdiff_t j = 0; j < kw; j += 2)
                for (int k = 0; k < nb; ++k) {
                    __m256 e, o;
                    const __m256i tap = _mm256_set1_epi32((int32_t)(rows[r] + ow[k] * 2 - g->pw + j));
                    rlx_deint8(xr + (ow[k] - w0) * 2 + j, &e, &o);
                    RLX_PWI_PAD_TAKE(k, e, tap);
                    if (j + 1 < kw) RLX_PWI_PAD_TAKE(k, o, _mm256_add_epi32(tap, _mm256_set1_epi32(1)));
                }
        } else {
            for (ptrdiff_t j = 0; j < kw; ++j)
                for (int k = 0; k < nb; ++k) {
                    const __m256 v = _mm256_loadu_ps(xr + (ow[k] - w0) + j);
                    RLX_PWI_PAD_TAKE(k, v, _mm256_set1_epi32((int32_t)(rows[r] + ow[k] - g->pw + j)));
                }
        }
    }
    const __m256i b64 = _mm256_set1_epi64x(base);
    for (int k = 0; k < nb; ++k) {
        if (wi) {
            _mm256_storeu_si256((__m256i*)(wi + ow[k]), bi[k]);
            continue;
        }
        _mm256_storeu_ps(yr + ow[k], best[k]);
        _mm256_storeu_si256((__m256i*)(ir + ow[k]),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bi[k]))));
        _mm256_storeu_si256((__m256i*)(ir + ow[k] + 4),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bi[k], 1))));
    }
}

RLX_TARGET_AVX2 static void rlx_pwi_pad_blocks(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr,
                                               const rlx_pwi_geom* g, ptrdiff_t w0, const ptrdiff_t* ow, int nb,
                                               float* yr, int64_t* ir, int64_t base, int32_t* wi) {
    switch (nb) {
    case 4: rlx_pwi_pad_blocks_body(vb, L, rows, nr, g, w0, ow, 4, yr, ir, base, wi); break;
    case 3: rlx_pwi_pad_blocks_body(vb, L, rows, nr, g, w0, ow, 3, yr, ir, base, wi); break;
    case 2: rlx_pwi_pad_blocks_body(vb, L, rows, nr, g, w0, ow, 2, yr, ir, base, wi); break;
    default: rlx_pwi_pad_blocks_body(vb, L, rows, nr, g, w0, ow, 1, yr, ir, base, wi); break;
    }
}

/* The same without NaN in the buffered rows (checked per line): take v when
 * v > best, and the running index is the tap's offset at window start 0,
 * rows[r] + j (a broadcast constant shared by the blocks), plus ws +
 * lane*sw at the end; -1 (nothing beat -inf) gives the first in-bounds
 * tap.  Stride 2 compares in the lane order of the in-lane
 * even/odd shuffles and restores the output order once per block. */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) void
rlx_pwi_fast_body(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr, const rlx_pwi_geom* g, ptrdiff_t w0,
                  const ptrdiff_t* ow, const int nb, float* yr, int64_t* ir, int64_t base, int32_t row0,
                  int32_t* wi) {
    const ptrdiff_t sw = g->sw, kw = g->kw;
    const __m256i lane = sw == 2 ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14) : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 best[4], id[4];
    for (int k = 0; k < nb; ++k) {
        best[k] = _mm256_set1_ps(-INFINITY);
        id[k] = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    }
    for (ptrdiff_t r = 0; r < nr; ++r) {
        const float* xr = vb + r * L;
        if (sw == 2) {
            for (ptrdiff_t j = 0; j < kw; j += 2) {
                const __m256 t0 = _mm256_castsi256_ps(_mm256_set1_epi32(rows[r] + (int32_t)j));
                const __m256 t1 = _mm256_castsi256_ps(_mm256_set1_epi32(rows[r] + (int32_t)j + 1));
                for (int k = 0; k < nb; ++k) {
                    const float* p = xr + (ow[k] - w0) * 2 + j;
                    const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
                    const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
                    __m256 m = _mm256_cmp_ps(e, best[k], _CMP_GT_OQ);
                    best[k] = _mm256_blendv_ps(best[k], e, m);
                    id[k] = _mm256_blendv_ps(id[k], t0, m);
                    if (j + 1 < kw) {
                        const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
                        m = _mm256_cmp_ps(o, best[k], _CMP_GT_OQ);
                        best[k] = _mm256_blendv_ps(best[k], o, m);
                        id[k] = _mm256_blendv_ps(id[k], t1, m);
                    }
                }
            }
        } else {
            for (ptrdiff_t j = 0; j < kw; ++j) {
                const __m256 t0 = _mm256_castsi256_ps(_mm256_set1_epi32(rows[r] + (int32_t)j));
                for (int k = 0; k < nb; ++k) {
                    const __m256 v = _mm256_loadu_ps(xr + (ow[k] - w0) + j);
                    const __m256 m = _mm256_cmp_ps(v, best[k], _CMP_GT_OQ);
                    best[k] = _mm256_blendv_ps(best[k], v, m);
                    id[k] = _mm256_blendv_ps(id[k], t0, m);
                }
            }
        }
    }
    const __m256i b64 = _mm256_set1_epi64x(base);
    for (int k = 0; k < nb; ++k) {
        __m256 b = best[k];
        __m256i t = _mm256_castps_si256(id[k]);
        if (sw == 2) {
            b = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(b), _MM_SHUFFLE(3, 1, 2, 0)));
            t = _mm256_permute4x64_epi64(t, _MM_SHUFFLE(3, 1, 2, 0));
        }
        const __m256i wsl = _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)(ow[k] * sw - g->pw)));
        const __m256i none = _mm256_cmpgt_epi32(_mm256_setzero_si256(), t);
        const __m256i hit = _mm256_add_epi32(t, wsl);
        const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(row0), _mm256_max_epi32(wsl, _mm256_setzero_si256()));
        const __m256i bi = _mm256_blendv_epi8(hit, first, none);
        if (wi) {
            _mm256_storeu_si256((__m256i*)(wi + ow[k]), bi);
            continue;
        }
        _mm256_storeu_ps(yr + ow[k], b);
        _mm256_storeu_si256((__m256i*)(ir + ow[k]),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bi))));
        _mm256_storeu_si256((__m256i*)(ir + ow[k] + 4),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bi, 1))));
    }
}

RLX_TARGET_AVX2 static void rlx_pwi_fast_blocks(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr,
                                                const rlx_pwi_geom* g, ptrdiff_t w0, const ptrdiff_t* ow, int nb,
                                                float* yr, int64_t* ir, int64_t base, int32_t row0, int32_t* wi) {
    switch (nb) {
    case 4: rlx_pwi_fast_body(vb, L, rows, nr, g, w0, ow, 4, yr, ir, base, row0, wi); break;
    case 3: rlx_pwi_fast_body(vb, L, rows, nr, g, w0, ow, 3, yr, ir, base, row0, wi); break;
    case 2: rlx_pwi_fast_body(vb, L, rows, nr, g, w0, ow, 2, yr, ir, base, row0, wi); break;
    default: rlx_pwi_fast_body(vb, L, rows, nr, g, w0, ow, 1, yr, ir, base, row0, wi); break;
    }
}

/* rlx_pwi_fast_blocks on the AVX-512 level, for lines of at least 16 outputs:
 * blocks of 16 outputs, up to 4 at a time, the compare into a mask register
 * and two masked moves per tap (the AVX2 blocks: compare and two blends on 8
 * lanes); stride 2 splits even and odd columns with two permutes.  Taps in
 * the same order under the same rule, so the same values and indices. */
RLX_INLINE_AVX512 void rlx_pwi_fast16_body(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr,
                                           const rlx_pwi_geom* g, ptrdiff_t w0, const ptrdiff_t* ow, const int nb,
                                           float* yr, int64_t* ir, int64_t base, int32_t row0, int32_t* wi,
                                           const int sw) {
    const ptrdiff_t kw = g->kw;
    const __m512i lane = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(sw));
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 best[4];
    __m512i id[4];
    for (int k = 0; k < nb; ++k) {
        best[k] = _mm512_set1_ps(-INFINITY);
        id[k] = _mm512_set1_epi32(-1);
    }
    for (ptrdiff_t r = 0; r < nr; ++r) {
        const float* xr = vb + r * L;
        if (sw == 2) {
            for (ptrdiff_t j = 0; j < kw; j += 2) {
                const __m512i t0 = _mm512_set1_epi32(rows[r] + (int32_t)j);
                const __m512i t1 = _mm512_set1_epi32(rows[r] + (int32_t)j + 1);
                for (int k = 0; k < nb; ++k) {
                    const float* p = xr + (ow[k] - w0) * 2 + j;
                    const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
                    const __m512 e = _mm512_permutex2var_ps(lo, even, hi);
                    __mmask16 m = _mm512_cmp_ps_mask(e, best[k], _CMP_GT_OQ);
                    best[k] = _mm512_mask_mov_ps(best[k], m, e);
                    id[k] = _mm512_mask_mov_epi32(id[k], m, t0);
                    if (j + 1 < kw) {
                        const __m512 o = _mm512_permutex2var_ps(lo, odd, hi);
                        m = _mm512_cmp_ps_mask(o, best[k], _CMP_GT_OQ);
                        best[k] = _mm512_mask_mov_ps(best[k], m, o);
                        id[k] = _mm512_mask_mov_epi32(id[k], m, t1);
                    }
                }
            }
        } else {
            for (ptrdiff_t j = 0; j < kw; ++j) {
                const __m512i t0 = _mm512_set1_epi32(rows[r] + (int32_t)j);
                for (int k = 0; k < nb; ++k) {
                    const __m512 v = _mm512_loadu_ps(xr + (ow[k] - w0) + j);
                    const __mmask16 m = _mm512_cmp_ps_mask(v, best[k], _CMP_GT_OQ);
                    best[k] = _mm512_mask_mov_ps(best[k], m, v);
                    id[k] = _mm512_mask_mov_epi32(id[k], m, t0);
                }
            }
        }
    }
    const __m512i b64 = _mm512_set1_epi64(base);
    for (int k = 0; k < nb; ++k) {
        /* no tap taken (an all -inf window): its first in-bounds tap */
        const __m512i wsl = _mm512_add_epi32(lane, _mm512_set1_epi32((int32_t)(ow[k] * sw - g->pw)));
        const __mmask16 none = _mm512_cmplt_epi32_mask(id[k], _mm512_setzero_si512());
        const __m512i first = _mm512_add_epi32(_mm512_set1_epi32(row0), _mm512_max_epi32(wsl, _mm512_setzero_si512()));
        const __m512i bi = _mm512_mask_mov_epi32(_mm512_add_epi32(id[k], wsl), none, first);
        if (wi) {
            _mm512_storeu_si512((void*)(wi + ow[k]), bi);
            continue;
        }
        _mm512_storeu_ps(yr + ow[k], best[k]);
        _mm512_storeu_si512((void*)(ir + ow[k]),
                            _mm512_add_epi64(b64, _mm512_cvtepi32_epi64(_mm512_castsi512_si256(bi))));
        _mm512_storeu_si512((void*)(ir + ow[k] + 8),
                            _mm512_add_epi64(b64, _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(bi, 1))));
    }
}

/* outputs [w0, w1) (w1 - w0 >= 16) of a line, in groups of up to 4 blocks of 16; the last block ends at w1 */
RLX_TARGET_AVX512 static void rlx_pwi_fast_line16(const float* vb, ptrdiff_t L, const int32_t* rows, ptrdiff_t nr,
                                                  const rlx_pwi_geom* g, ptrdiff_t w0, ptrdiff_t w1, float* yr,
                                                  int64_t* ir, int64_t base, int32_t row0, int32_t* wi) {
    for (ptrdiff_t o = w0; o < w1;) {
        ptrdiff_t st[4];
        int nb = 0;
        for (; nb < 4 && o < w1; ++nb, o += 16) st[nb] = o + 16 <= w1 ? o : w1 - 16;
#define RLX_PWI16(NB)                                                                                   \
        if (g->sw == 2) rlx_pwi_fast16_body(vb, L, rows, nr, g, w0, st, NB, yr, ir, base, row0, wi, 2); \
        else rlx_pwi_fast16_body(vb, L, rows, nr, g, w0, st, NB, yr, ir, base, row0, wi, 1);
        switch (nb) {
        case 4: RLX_PWI16(4) break;
        case 3: RLX_PWI16(3) break;
        case 2: RLX_PWI16(2) break;
        default: RLX_PWI16(1) break;
        }
#undef RLX_PWI16
    }
}

/* Window 2 stride 2 along w, no w padding, 2*OW <= W: outputs o .. o+7 of
 * a line from its in-bounds rows of x directly (columns [2o, 2o + 16)),
 * taps in window order with the forward's rule; the index starts at the
 * window's first tap, rows[0] + 2*ow. */
RLX_TARGET_AVX2 static inline void rlx_pwi_k2s2_block8(const float* xp, const int32_t* rows, ptrdiff_t nr,
                                                       ptrdiff_t o, float* yr, int64_t* ir, int64_t base,
                                                       int32_t* wi) {
    const __m256i ws = _mm256_add_epi32(_mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14),
                                        _mm256_set1_epi32((int32_t)(2 * o)));
    const __m256i one = _mm256_set1_epi32(1);
    __m256 best = _mm256_set1_ps(-INFINITY);
    __m256i bi = _mm256_add_epi32(_mm256_set1_epi32(rows[0]), ws);
    for (ptrdiff_t r = 0; r < nr; ++r) {
        __m256 e, od;
        rlx_deint8(xp + rows[r] + 2 * o, &e, &od);
        const __m256i t0 = _mm256_add_epi32(_mm256_set1_epi32(rows[r]), ws);
        __m256 m = _mm256_or_ps(_mm256_cmp_ps(e, best, _CMP_GT_OQ), _mm256_cmp_ps(e, e, _CMP_UNORD_Q));
        best = _mm256_blendv_ps(best, e, m);
        bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(t0), m));
        m = _mm256_or_ps(_mm256_cmp_ps(od, best, _CMP_GT_OQ), _mm256_cmp_ps(od, od, _CMP_UNORD_Q));
        best = _mm256_blendv_ps(best, od, m);
        bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi),
                                                  _mm256_castsi256_ps(_mm256_add_epi32(t0, one)), m));
    }
    if (wi) {
        _mm256_storeu_si256((__m256i*)(wi + o), bi);
        return;
    }
    const __m256i b64 = _mm256_set1_epi64x(base);
    _mm256_storeu_ps(yr + o, best);
    _mm256_storeu_si256((__m256i*)(ir + o), _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bi))));
    _mm256_storeu_si256((__m256i*)(ir + o + 4),
                        _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bi, 1))));
}

/* line = (plane * OD + od) * OH + oh; wi not NULL: the winners' plane
 * offsets (int32) go to wi[w0..w1) instead of values and indices */
RLX_TARGET_AVX2 static void rlx_pwi_line_pad(const float* x, ptrdiff_t x_len, float* y, int64_t* ind, ptrdiff_t y_len,
                                             const rlx_pwi_geom* g, ptrdiff_t line, ptrdiff_t plane, ptrdiff_t od,
                                             ptrdiff_t oh, ptrdiff_t w0, ptrdiff_t w1, int32_t* wi) {
    float vb[RLX_PWI_PAD_FLOATS];
    int32_t rows[RLX_PWI_MAX_ROWS];
    const ptrdiff_t W = g->W, OW = g->OW, in_vol = g->D * g->H * W, sw = g->sw, kw = g->kw;
    const ptrdiff_t sd = od * g->sd - g->pd, sh = oh * g->sh - g->ph;
    const float* xp = x + plane * in_vol;
    const int64_t base = g->flat ? (int64_t)(plane * in_vol) : 0;
    const ptrdiff_t L = rlx_pwi_pad_row(w1 - w0, kw, sw), c0 = w0 * sw - g->pw;   /* buffer column 0: input c0 */
    ptrdiff_t nr;
    RLX_CHECK_RANGE(plane * in_vol, (plane + 1) * in_vol, x_len, "max pool x");
    RLX_CHECK_RANGE(line * OW + w0, line * OW + w1, y_len, "max pool y/indices");
    (void)x_len;
    (void)y_len;
    nr = rlx_pwi_window_rows(g, sd, sh, rows);
    if (kw == 2 && sw == 2 && g->pw == 0 && 2 * OW <= W) {
        /* every window inside its rows: the blocks read x in place, no buffer, NaN-aware */
        float* yr = y ? y + line * OW : NULL;
        int64_t* ir = ind ? ind + line * OW : NULL;
        for (ptrdiff_t o = w0; o < w1;) {
            const ptrdiff_t st = o + 8 <= w1 ? o : w1 - 8;
            RLX_CHECK_RANGE(2 * st, 2 * st + 16, W, "max pool k2s2 block");
            rlx_pwi_k2s2_block8(xp, rows, nr, st, yr, ir, base, wi);
            o += 8;
        }
        return;
    }
    RLX_CHECK_RANGE(0, nr * L, RLX_PWI_PAD_FLOATS, "max pool row buffer");
    /* buffer columns [lo, hi) hold input columns c0 + [lo, hi) inside [0, W) */
    const ptrdiff_t lo = c0 < 0 ? -c0 : 0, hi = W - c0 < L ? W - c0 : L;
    /* the copy also looks for NaN (which only the slower blocks handle) */
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 nan = _mm256_setzero_ps();
    int any_nan = 0;
    for (ptrdiff_t r = 0; r < nr; ++r) {
        float* br = vb + r * L;
        const float* xr = xp + rows[r] + c0;
        ptrdiff_t i = 0;
        for (; i < lo; ++i) br[i] = -INFINITY;
        for (; i + 8 <= hi; i += 8) {
            const __m256 v = _mm256_loadu_ps(xr + i);
            _mm256_storeu_ps(br + i, v);
            nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        }
        for (; i < hi; ++i) {
            br[i] = xr[i];
            any_nan |= xr[i] != xr[i];
        }
        for (; i + 8 <= L; i += 8) _mm256_storeu_ps(br + i, ninf);
        for (; i < L; ++i) br[i] = -INFINITY;
    }
    any_nan |= _mm256_movemask_ps(nan) != 0;
    float* yr = y ? y + line * OW : NULL;
    int64_t* ir = ind ? ind + line * OW : NULL;
    const int fast = !any_nan;
    if (fast && rlx_simd_level() >= 2 && w1 - w0 >= 16) {
        rlx_pwi_fast_line16(vb, L, rows, nr, g, w0, w1, yr, ir, base, rows[0], wi);
        return;
    }
    /* groups of up to 4 blocks; the last block ends at w1 */
    for (ptrdiff_t o = w0; o < w1;) {
        ptrdiff_t st[4];
        int nb = 0;
        for (; nb < 4 && o < w1; ++nb, o += 8) st[nb] = o + 8 <= w1 ? o : w1 - 8;
        if (fast) rlx_pwi_fast_blocks(vb, L, rows, nr, g, w0, st, nb, yr, ir, base, rows[0], wi);
        else rlx_pwi_pad_blocks(vb, L, rows, nr, g, w0, st, nb, yr, ir, base, wi);
    }
}
#endif

/* rlx_pwi_line_pad where it runs (AVX2, at least 8 outputs), else rlx_pwi_line;
 * the caller checks w dilation 1, stride 1 or 2 and the buffer size */
static void rlx_pwi_line_padded(const float* x, ptrdiff_t x_len, float* y, int64_t* ind, ptrdiff_t y_len,
                                const rlx_pwi_geom* g, ptrdiff_t line, ptrdiff_t w0, ptrdiff_t w1) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level() && w1 - w0 >= 8) {
        rlx_pwi_line_pad(x, x_len, y, ind, y_len, g, line, line / (g->OH * g->OD), (line / g->OH) % g->OD,
                         line % g->OH, w0, w1, NULL);
        return;
    }
#endif
    rlx_pwi_line(x, x_len, y, ind, y_len, g, line, w0, w1);
}

/* whole output lines [l0, l1) (OW >= 8): the line's coordinates advance
 * without divisions */
static void rlx_pwi_lines_padded(const float* x, ptrdiff_t x_len, float* y, int64_t* ind, ptrdiff_t y_len,
                                 const rlx_pwi_geom* g, ptrdiff_t l0, ptrdiff_t l1) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        ptrdiff_t oh = l0 % g->OH, od = (l0 / g->OH) % g->OD, plane = l0 / (g->OH * g->OD);
        for (ptrdiff_t l = l0; l < l1; ++l) {
            rlx_pwi_line_pad(x, x_len, y, ind, y_len, g, l, plane, od, oh, 0, g->OW, NULL);
            if (++oh == g->OH) {
                oh = 0;
                if (++od == g->OD) {
                    od = 0;
                    ++plane;
                }
            }
        }
        return;
    }
#endif
    for (ptrdiff_t l = l0; l < l1; ++l) rlx_pwi_line(x, x_len, y, ind, y_len, g, l, 0, g->OW);
}

/* ------------------------------------------------------------------------- */
/* Max pool backward (1-D / 2-D) by lines of >= 8 outputs: each output row's */
/* winners come from rlx_pwi_line_pad (the forward's rule, rows buffered     */
/* with -inf padding), then dy is added at them in output order -- the       */
/* additions rlx_mpb_plane makes, in the same order, on a zeroed plane.      */
/* AVX2 only (the caller checks the simd level, w dilation 1, stride 1 or 2, */
/* OW <= RLX_MPB_PAD_MAX_OW and the buffer size).                            */
/* ------------------------------------------------------------------------- */
#define RLX_MPB_PAD_MAX_OW 4096
/* ------------------------------------------------------------------------- */
/* Average pool backward, overlapping windows, h dilation 1 (1-D and 2-D),   */
/* gathered: each dx element is written once, as the sum over the output    */
/* rows covering its row (ascending) of their horizontal gradient lines,     */
/* each line the sum over taps j (ascending) of dy / divisor.  Those are the */
/* additions, in the same order from +0, that rlx_apb_plane makes through    */
/* its zero-fill and scatter, so the bits agree; no zero-fill pass and no    */
/* read-modify-write of dx.  The lines of the at most RLX_APG_RING output    */
/* rows that cover one dx row live in a ring; columns run in chunks of       */
/* RLX_APG_CH (long lines need no longer buffers).  Window 3 stride 2 along  */
/* w (dilation 1): the line is built by gather, 8 outputs at a time in the   */
/* AVX2 variant; other windows scatter tap-major into the chunk.  Bind-time  */
/* conditions: dh == 1, ceil(kh / sh) <= RLX_APG_RING, (kw-1)*dw <=          */
/* RLX_APG_CH.                                                               */
/* ------------------------------------------------------------------------- */
#define RLX_APG_CH 1024
#define RLX_APG_RING 8
#define RLX_APG_SPAN (2 * RLX_APG_CH + 4)

#if RLX_X86_DISPATCH
/* t[2i] = (0 + z[i+1]) + z[i], t[2i+1] = 0 + z[i+1] for i in [0, 8) */
RLX_TARGET_AVX2 static inline void rlx_apg_k3s2_block8(float* t, const float* z) {
    const __m256 zero = _mm256_setzero_ps();
    const __m256 a = _mm256_add_ps(zero, _mm256_loadu_ps(z + 1));
    const __m256 e = _mm256_add_ps(a, _mm256_loadu_ps(z));
    const __m256 lo = _mm256_unpacklo_ps(e, a), hi = _mm256_unpackhi_ps(e, a);
    _mm256_storeu_ps(t, _mm256_permute2f128_ps(lo, hi, 0x20));
    _mm256_storeu_ps(t + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}
#endif

RLX_INLINE void rlx_apg_plane_body(const float* restrict dy, ptrdiff_t dy_len, float* restrict dx,
                                   ptrdiff_t dx_len, const rlx_apb_geom* g, ptrdiff_t plane, int avx2) {
    float ring[RLX_APG_RING][RLX_APG_CH + 24];
    float gz[RLX_APG_SPAN];                 /* gz[1 + ow - ow_lo]: dy / divisor, 0 outside [0, OW) */
    int32_t cols[RLX_APG_SPAN];
    const ptrdiff_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, kh = g->kh, kw = g->kw, sh = g->sh;
    const ptrdiff_t sw = g->sw, dw = g->dw, ph = g->ph, pw = g->pw, in_sz = H * W;
    const ptrdiff_t R = (kh + sh - 1) / sh;
    const float* restrict dyp = dy + plane * OH * OW;
    float* restrict dxp = dx + plane * in_sz;
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, dx_len, "avg pool backward dx");
    RLX_CHECK_RANGE(plane * OH * OW, (plane + 1) * OH * OW, dy_len, "avg pool backward dy");
    (void)dx_len;
    (void)dy_len;
    (void)avx2;
    const int k3s2 = kw == 3 && sw == 2 && dw == 1;
    const ptrdiff_t lo_w = g->include_pad ? -pw : 0, hi_w = g->include_pad ? W + g->pew : W;
    for (ptrdiff_t c0 = 0; c0 < W; c0 += RLX_APG_CH) {
        const ptrdiff_t c1 = W - c0 > RLX_APG_CH ? c0 + RLX_APG_CH : W, n = c1 - c0;
        const ptrdiff_t q0 = c0 + pw, q1 = c1 + pw;      /* the chunk in padded coordinates */
        /* outputs with a tap in [q0, q1): [ow_lo, ow_end) before clipping to OW */
        ptrdiff_t ow_lo = q0 - (kw - 1) * dw;
        ow_lo = ow_lo > 0 ? (ow_lo + sw - 1) / sw : 0;
        const ptrdiff_t ow_end = (q1 - 1) / sw + 1;
        const ptrdiff_t ow_hi = ow_end < OW ? ow_end : OW;
        RLX_CHECK_RANGE(0, ow_end - ow_lo + 2, RLX_APG_SPAN, "avg pool backward chunk span");
        {
            /* all kw taps for the windows inside [lo_w, hi_w): outputs [i0, i1) */
            ptrdiff_t i0 = lo_w + pw, i1 = hi_w + pw - (kw - 1) * dw;
            i0 = i0 > 0 ? (i0 + sw - 1) / sw : 0;
            i1 = i1 > 0 ? (i1 - 1) / sw + 1 : 0;
            if (i0 < ow_lo) i0 = ow_lo;
            if (i1 > ow_hi) i1 = ow_hi;
            if (i1 < i0) i1 = i0;
            const int32_t full = g->divisor_override > 0 ? 1 : (int32_t)kw;
            for (ptrdiff_t ow = i0; ow < i1; ++ow) cols[ow - ow_lo] = full;
            for (ptrdiff_t ow = ow_lo; ow < ow_hi; ++ow) {
                if (ow == i0) ow = i1;
                if (ow >= ow_hi) break;
                ptrdiff_t j0, j1;
                rlx_pool_taps(ow * sw - pw, dw, kw, lo_w, hi_w, &j0, &j1);
                cols[ow - ow_lo] = g->divisor_override > 0 ? 1 : (int32_t)(j1 - j0);
            }
        }
        ptrdiff_t next = 0;                 /* first output row whose line is not built */
        for (ptrdiff_t r = 0; r < H; ++r) {
            float* restrict dr = dxp + r * W + c0;
            /* output rows covering r: oh*sh - ph <= r < oh*sh - ph + kh */
            ptrdiff_t lo = r + ph - kh + 1;
            lo = lo > 0 ? (lo + sh - 1) / sh : 0;
            ptrdiff_t hi = (r + ph) / sh + 1;
            if (hi > OH) hi = OH;
            if (lo >= hi) {
                memset(dr, 0, (size_t)n * sizeof(float));
                continue;
            }
            if (next < lo) next = lo;
            for (; next < hi; ++next) {
                const ptrdiff_t hs = next * sh - ph;
                ptrdiff_t a0, a1, pa0, pa1;
                rlx_pool_taps(hs, 1, kh, 0, H, &a0, &a1);
                if (g->include_pad) rlx_pool_taps(hs, 1, kh, -ph, H + g->peh, &pa0, &pa1);
                else { pa0 = a0; pa1 = a1; }
                const int32_t rows = g->divisor_override > 0 ? (int32_t)g->divisor_override : (int32_t)(pa1 - pa0);
                const float* restrict dyr = dyp + next * OW;
                float* restrict b = ring[next % R];
                gz[0] = 0.0f;
                for (ptrdiff_t ow = ow_lo; ow < ow_hi; ++ow)
                    gz[1 + ow - ow_lo] = dyr[ow] / (float)(rows * cols[ow - ow_lo]);
                for (ptrdiff_t k = 1 + (ow_hi > ow_lo ? ow_hi : ow_lo) - ow_lo; k < ow_end - ow_lo + 2; ++k)
                    gz[k] = 0.0f;
                if (k3s2) {
                    /* padded column q: tap 0 of output q/2 then tap 2 of q/2 - 1 (even q), tap 1 of
                     * (q-1)/2 (odd q); absent outputs add +0, which leaves a sum started at +0 as is.
                     * Built from the even column qe <= q0 into t = b or b - 1. */
                    const ptrdiff_t qe = q0 & ~(ptrdiff_t)1, m0 = qe / 2;
                    float* restrict t = b + 16 - (q0 - qe);   /* b[16 + i]: column c0 + i */
                    const float* restrict z = gz + (m0 - ow_lo);  /* z[i]: output m0 + i - 1 */
                    const ptrdiff_t np = (q1 - qe + 1) / 2;   /* pairs */
                    ptrdiff_t i = 0;
#if RLX_X86_DISPATCH
                    if (avx2)
                        for (; i + 8 <= np; i += 8) rlx_apg_k3s2_block8(t + 2 * i, z + i);
#endif
                    for (; i < np; ++i) {
                        const float a = 0.0f + z[i + 1];
                        t[2 * i] = a + z[i];
                        t[2 * i + 1] = a;
                    }
                } else {
                    float* restrict bb = b + 16;
                    for (ptrdiff_t i = 0; i < n; ++i) bb[i] = 0.0f;
                    for (ptrdiff_t j = 0; j < kw; ++j) {
                        ptrdiff_t o0 = q0 - j * dw, o1 = q1 - j * dw;
                        o0 = o0 > 0 ? (o0 + sw - 1) / sw : 0;
                        o1 = o1 > 0 ? (o1 - 1) / sw + 1 : 0;
                        if (o1 > ow_hi) o1 = ow_hi;
                        float* restrict bj = bb + j * dw - q0;
                        for (ptrdiff_t ow = o0; ow < o1; ++ow) bj[ow * sw] += gz[1 + ow - ow_lo];
                    }
                }
            }
            const float* restrict b = ring[lo % R] + 16;
            if (hi - lo == 2) {
                /* two lines (every other row of a 3-wide stride-2 window): one pass over dr */
                const float* restrict b1 = ring[(lo + 1) % R] + 16;
                for (ptrdiff_t i = 0; i < n; ++i) dr[i] = (0.0f + b[i]) + b1[i];
                continue;
            }
            for (ptrdiff_t i = 0; i < n; ++i) dr[i] = 0.0f + b[i];
            for (ptrdiff_t oh = lo + 1; oh < hi; ++oh) {
                b = ring[oh % R] + 16;
                for (ptrdiff_t i = 0; i < n; ++i) dr[i] += b[i];
            }
        }
    }
}

static void rlx_apg_plane_base(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                               const rlx_apb_geom* g, ptrdiff_t plane) {
    rlx_apg_plane_body(dy, dy_len, dx, dx_len, g, plane, 0);
}
RLX_TARGET_AVX2 static void rlx_apg_plane_avx2(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                                               const rlx_apb_geom* g, ptrdiff_t plane) {
    rlx_apg_plane_body(dy, dy_len, dx, dx_len, g, plane, 1);
}
static void rlx_apg_plane(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len, const rlx_apb_geom* g,
                          ptrdiff_t plane) {
    if (rlx_simd_level()) rlx_apg_plane_avx2(dy, dy_len, dx, dx_len, g, plane);
    else rlx_apg_plane_base(dy, dy_len, dx, dx_len, g, plane);
}

#if RLX_X86_DISPATCH
static void rlx_mpb_plane_pad(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                              const rlx_pwi_geom* g, ptrdiff_t plane) {
    int32_t win[RLX_MPB_PAD_MAX_OW];
    const ptrdiff_t in_sz = g->H * g->W, OW = g->OW;
    float* dxp = dx + plane * in_sz;
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, x_len, "max pool backward x/dx");
    RLX_CHECK_RANGE(plane * g->OH * OW, (plane + 1) * g->OH * OW, dy_len, "max pool backward dy");
    memset(dxp, 0, (size_t)in_sz * sizeof(float));
    for (ptrdiff_t oh = 0; oh < g->OH; ++oh) {
        ptrdiff_t a0, a1;
        rlx_pool_taps(oh * g->sh - g->ph, g->dh, g->kh, 0, g->H, &a0, &a1);
        if (a0 >= a1) continue;                  /* window entirely in padding: no gradient */
        const ptrdiff_t line = plane * g->OH + oh;
        rlx_pwi_line_pad(x, x_len, NULL, NULL, dy_len, g, line, plane, 0, oh, 0, OW, win);
        const float* dyr = dy + line * OW;
        for (ptrdiff_t ow = 0; ow < OW; ++ow) {
            RLX_CHECK_RANGE(win[ow], win[ow] + 1, in_sz, "max pool backward winner");
            dxp[win[ow]] += dyr[ow];
        }
    }
}
#else
static void rlx_mpb_plane_pad(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                              const rlx_pwi_geom* g, ptrdiff_t plane) {
    (void)x; (void)x_len; (void)dy; (void)dy_len; (void)dx; (void)g; (void)plane;
}
#endif

/* ------------------------------------------------------------------------- */
/* Max pool backward, window 3 stride 2 on both axes, dilation 1, padding 0  */
/* or 1 per axis, ceil mode allowed (the ResNet stem pool): one pass per     */
/* band of output rows, each dx row written once.                            */
/*                                                                           */
/* In padded coordinates (p = row + ph, q = column + pw) output (oh, ow)     */
/* covers rows 2oh .. 2oh+2 and columns 2ow .. 2ow+2.  Per output row:       */
/*  A. its three padded input rows (a ring of -inf padded copies, each input */
/*     row copied once, NaN noted) give the winner tap 3a + b of 8 windows   */
/*     at a time -- the forward's rule: the first maximum in window order,   */
/*     the last NaN, the first in-bounds tap of an all -inf window -- into   */
/*     C[1 + ow], with dy into D[1 + ow] (C = -1 and D = 0 at 0 and past OW); */
/*  B. padded row 2oh (tap row 0) = carry + its taps, row 2oh+1 (tap row 1)  */
/*     = 0 + its taps, and the next carry = 0 + the tap row 2 taps (row      */
/*     2oh+2, finished by the next output row).  Along a row, even q gets    */
/*     tap b=2 of window q/2 - 1 then tap b=0 of window q/2, odd q tap b=1   */
/*     of window (q-1)/2; a tap adds dy where it won and +0 elsewhere.       */
/* Those are rlx_mpb_plane's additions (output order, from +0) plus +0 for   */
/* the taps that did not win, which leaves the sums' bits as they are.  The  */
/* carry runs in pair space (p[j]: column 2j, q[j]: column 2j+1), two        */
/* buffers taking turns.  A band [oh0, oh1) writes the dx rows of padded     */
/* rows [2oh0, 2oh1) (the last band also the rows below); it recomputes the  */
/* tap row 2 sums of output row oh0 - 1 for its first row, so any split      */
/* gives the same bits.  AVX2 only; the caller checks rlx_mpb33_fits.        */
/* ------------------------------------------------------------------------- */
#define RLX_MPB33_ROW 1056       /* ring row floats: 2 * max(OW, 8) + 2 and W + pw, rounded to 8 */
#define RLX_MPB33_G 544          /* line entries: max(OW, 8) + 1 and W/2 + 3, plus 8 of slack */

static inline ptrdiff_t rlx_mpb33_row_len(ptrdiff_t W, ptrdiff_t OW, ptrdiff_t pw) {
    const ptrdiff_t owp = OW < 8 ? 8 : OW;
    ptrdiff_t L = 2 * owp + 2 > W + pw ? 2 * owp + 2 : W + pw;
    return (L + 7) & ~(ptrdiff_t)7;
}
static inline ptrdiff_t rlx_mpb33_g_len(ptrdiff_t W, ptrdiff_t OW) {
    const ptrdiff_t owp = OW < 8 ? 8 : OW;
    const ptrdiff_t a = owp + 1, b = W / 2 + 3;
    return (a > b ? a : b) + 8;
}
static inline int rlx_mpb33_fits(ptrdiff_t W, ptrdiff_t OW, ptrdiff_t pw) {
    return rlx_mpb33_row_len(W, OW, pw) <= RLX_MPB33_ROW && rlx_mpb33_g_len(W, OW) <= RLX_MPB33_G;
}

#if RLX_X86_DISPATCH
typedef struct {
    float row[3][RLX_MPB33_ROW];
    ptrdiff_t tag[3];            /* padded row held by each ring slot (-1: none) */
    int nan[3];
    int32_t C[RLX_MPB33_G];
    float D[RLX_MPB33_G];
    float cp[2][RLX_MPB33_G], cq[2][RLX_MPB33_G];
    float dyb[16];
} rlx_mpb33_ws;

/* ring slot of padded row p, filled from x when not already there */
RLX_TARGET_AVX2 static const float* rlx_mpb33_row(rlx_mpb33_ws* w, const float* xp, ptrdiff_t H, ptrdiff_t W,
                                                  ptrdiff_t ph, ptrdiff_t pw, ptrdiff_t L, ptrdiff_t p, int* nan) {
    const int s = (int)(p % 3);
    float* b = w->row[s];
    if (w->tag[s] != p) {
        const ptrdiff_t r = p - ph;
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        int any = 0;
        if (r < 0 || r >= H) {
            for (ptrdiff_t i = 0; i < L; i += 8) _mm256_storeu_ps(b + i, ninf);
        } else {
            const float* xr = xp + r * W;
            __m256 un = _mm256_setzero_ps();
            ptrdiff_t i = 0;
            b[0] = -INFINITY;            /* q = 0 when pw = 1; overwritten by x when pw = 0 */
            for (; i + 8 <= W; i += 8) {
                const __m256 v = _mm256_loadu_ps(xr + i);
                _mm256_storeu_ps(b + pw + i, v);
                un = _mm256_or_ps(un, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            }
            for (; i < W; ++i) {
                b[pw + i] = xr[i];
                any |= xr[i] != xr[i];
            }
            for (i = pw + W; i < L; ++i) b[i] = -INFINITY;
            any |= _mm256_movemask_ps(un) != 0;
        }
        w->tag[s] = p;
        w->nan[s] = any;
    }
    *nan = w->nan[s];
    return b;
}

/* phase A for 8 windows from ow = o (stride 2 deinterleave in the in-lane
 * order (0,1,4,5,2,3,6,7), restored once at the end).  Without NaN: the
 * maximum by a tree, then the first tap equal to it (reverse blend chain);
 * a maximum of -inf means every in-bounds tap is -inf (padding is -inf
 * too): the first in-bounds tap.  With NaN: the forward's running rule. */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) void
rlx_mpb33_block(rlx_mpb33_ws* w, const float* r0, const float* r1, const float* r2, const float* dyr, ptrdiff_t o,
                int32_t a_first, ptrdiff_t pw, const int with_nan) {
    /* first in-bounds tap: row a_first, column 1 for window 0 with pw = 1 */
    const __m256i first = _mm256_add_epi32(_mm256_set1_epi32(3 * a_first),
                                           o == 0 && pw ? _mm256_setr_epi32(1, 0, 0, 0, 0, 0, 0, 0)
                                                        : _mm256_setzero_si256());
    const float* rp[3] = {r0 + 2 * o, r1 + 2 * o, r2 + 2 * o};
    __m256 v[9];
    for (int a = 0; a < 3; ++a) {
        const float* p = rp[a];
        const __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
        const __m256 lo2 = _mm256_loadu_ps(p + 2), hi2 = _mm256_loadu_ps(p + 10);
        v[3 * a] = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        v[3 * a + 1] = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        v[3 * a + 2] = _mm256_shuffle_ps(lo2, hi2, _MM_SHUFFLE(2, 0, 2, 0));
    }
    __m256i t;
    if (with_nan) {
        __m256 best = _mm256_set1_ps(-INFINITY);
        __m256 id = _mm256_castsi256_ps(first);       /* same in both lane orders */
        for (int k = 0; k < 9; ++k) {
            const __m256 m = _mm256_or_ps(_mm256_cmp_ps(v[k], best, _CMP_GT_OQ), _mm256_cmp_ps(v[k], v[k], _CMP_UNORD_Q));
            best = _mm256_blendv_ps(best, v[k], m);
            id = _mm256_blendv_ps(id, _mm256_castsi256_ps(_mm256_set1_epi32(k)), m);
        }
        t = _mm256_permute4x64_epi64(_mm256_castps_si256(id), _MM_SHUFFLE(3, 1, 2, 0));
    } else {
        const __m256 m01 = _mm256_max_ps(v[0], v[1]), m23 = _mm256_max_ps(v[2], v[3]);
        const __m256 m45 = _mm256_max_ps(v[4], v[5]), m67 = _mm256_max_ps(v[6], v[7]);
        const __m256 best = _mm256_max_ps(_mm256_max_ps(_mm256_max_ps(m01, m23), _mm256_max_ps(m45, m67)), v[8]);
        __m256 id = _mm256_castsi256_ps(_mm256_set1_epi32(8));
        for (int k = 7; k >= 0; --k)
            id = _mm256_blendv_ps(id, _mm256_castsi256_ps(_mm256_set1_epi32(k)), _mm256_cmp_ps(v[k], best, _CMP_EQ_OQ));
        id = _mm256_blendv_ps(id, _mm256_castsi256_ps(first),
                              _mm256_cmp_ps(best, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ));
        t = _mm256_permute4x64_epi64(_mm256_castps_si256(id), _MM_SHUFFLE(3, 1, 2, 0));
    }
    _mm256_storeu_si256((__m256i*)(w->C + 1 + o), t);
    _mm256_storeu_ps(w->D + 1 + o, _mm256_loadu_ps(dyr + o));
}

/* phase A for output row oh: C and D of the windows of the row */
RLX_TARGET_AVX512 static int rlx_mpb33_winners16(rlx_mpb33_ws* w, const float* xp, const float* dyp,
                                                 const rlx_mpb_geom* g, ptrdiff_t L, ptrdiff_t oh);
RLX_TARGET_AVX2 static void rlx_mpb33_winners(rlx_mpb33_ws* w, const float* xp, const float* dyp,
                                              const rlx_mpb_geom* g, ptrdiff_t L, ptrdiff_t oh) {
    const ptrdiff_t H = g->H, W = g->W, OW = g->OW, ph = g->ph, pw = g->pw;
    int n0, n1, n2;
    if (rlx_simd_level() >= 2 && rlx_mpb33_winners16(w, xp, dyp, g, L, oh)) return;
    const float* r0 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh, &n0);
    const float* r1 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh + 1, &n1);
    const float* r2 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh + 2, &n2);
    const int32_t a_first = (int32_t)(ph - 2 * oh > 0 ? ph - 2 * oh : 0);
    const float* dyr = dyp + oh * OW;
    if (OW < 8) {
        for (ptrdiff_t i = 0; i < 8; ++i) w->dyb[i] = i < OW ? dyr[i] : 0.0f;
        dyr = w->dyb;
    }
    const ptrdiff_t n8 = OW < 8 ? 8 : OW;
    if (n0 | n1 | n2) {
        for (ptrdiff_t o = 0; o < n8; o += 8)
            rlx_mpb33_block(w, r0, r1, r2, dyr, o + 8 <= n8 ? o : n8 - 8, a_first, pw, 1);
    } else {
        for (ptrdiff_t o = 0; o < n8; o += 8)
            rlx_mpb33_block(w, r0, r1, r2, dyr, o + 8 <= n8 ? o : n8 - 8, a_first, pw, 0);
    }
    if (OW < 8)                      /* windows past OW: no tap */
        for (ptrdiff_t i = OW; i < 8; ++i) w->C[1 + i] = -1;
}

/* rlx_mpb33_winners on the AVX-512 level for NaN-free rows of at least 16
 * windows: 16 windows a block, the stride-2 taps split by permutes (in
 * order: no lane restore), the maximum by the same tree, the first tap equal
 * to it by compares into masks and masked moves.  The same C and D. */
RLX_TARGET_AVX512 static int rlx_mpb33_winners16(rlx_mpb33_ws* w, const float* xp, const float* dyp,
                                                 const rlx_mpb_geom* g, ptrdiff_t L, ptrdiff_t oh) {
    const ptrdiff_t H = g->H, W = g->W, OW = g->OW, ph = g->ph, pw = g->pw;
    int n0, n1, n2;
    if (OW < 16) return 0;
    const float* r0 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh, &n0);
    const float* r1 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh + 1, &n1);
    const float* r2 = rlx_mpb33_row(w, xp, H, W, ph, pw, L, 2 * oh + 2, &n2);
    if (n0 | n1 | n2) return 0;
    const int32_t a_first = (int32_t)(ph - 2 * oh > 0 ? ph - 2 * oh : 0);
    const float* dyr = dyp + oh * OW;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const float* rows[3] = {r0, r1, r2};
    for (ptrdiff_t b = 0; b < OW; b += 16) {
        const ptrdiff_t o = b + 16 <= OW ? b : OW - 16;
        __m512 v[9];
        for (int a = 0; a < 3; ++a) {
            const float* p = rows[a] + 2 * o;
            const __m512 lo = _mm512_loadu_ps(p), hi = _mm512_loadu_ps(p + 16);
            v[3 * a] = _mm512_permutex2var_ps(lo, even, hi);
            v[3 * a + 1] = _mm512_permutex2var_ps(lo, odd, hi);
            v[3 * a + 2] = _mm512_permutex2var_ps(_mm512_loadu_ps(p + 2), even, _mm512_loadu_ps(p + 18));
        }
        const __m512 m01 = _mm512_max_ps(v[0], v[1]), m23 = _mm512_max_ps(v[2], v[3]);
        const __m512 m45 = _mm512_max_ps(v[4], v[5]), m67 = _mm512_max_ps(v[6], v[7]);
        const __m512 best = _mm512_max_ps(_mm512_max_ps(_mm512_max_ps(m01, m23), _mm512_max_ps(m45, m67)), v[8]);
        __m512i id = _mm512_set1_epi32(8);
        for (int k = 7; k >= 0; --k)
            id = _mm512_mask_mov_epi32(id, _mm512_cmp_ps_mask(v[k], best, _CMP_EQ_OQ), _mm512_set1_epi32(k));
        /* all in-bounds taps -inf: the first in-bounds tap (column 1 of window 0 when pw = 1) */
        __m512i first = _mm512_set1_epi32(3 * a_first);
        if (o == 0 && pw) first = _mm512_mask_mov_epi32(first, (__mmask16)1, _mm512_set1_epi32(3 * a_first + 1));
        id = _mm512_mask_mov_epi32(id, _mm512_cmp_ps_mask(best, ninf, _CMP_EQ_OQ), first);
        _mm512_storeu_si512((void*)(w->C + 1 + o), id);
        _mm512_storeu_ps(w->D + 1 + o, _mm512_loadu_ps(dyr + o));
    }
    return 1;
}

/* phase B for pairs [j, j+8): dx rows d0 (tap row 0, base cin) and d1 (tap
 * row 1), carry cout (tap row 2); d0 / d1 NULL: not written.  Pair j:
 *   pw = 0: P = (base + tap2(j - 1)) + tap0(j),  Q = base + tap1(j)
 *   pw = 1: P = base + tap1(j),                  Q = (base + tap2(j)) + tap0(j + 1)
 * with tapB(i) of a row: D[1 + i] where C[1 + i] = 3a + B, else +0 */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) void
rlx_mpb33_pairs8(const int32_t* C, const float* D, const float* cinp, const float* cinq, float* coutp,
                 float* coutq, float* d0, float* d1, ptrdiff_t j, const int pw) {
    const __m256i c1 = _mm256_loadu_si256((const __m256i*)(C + j + 1));
    const __m256i cs = _mm256_loadu_si256((const __m256i*)(C + j + (pw ? 2 : 0)));
    const __m256 g1 = _mm256_loadu_ps(D + j + 1), gs = _mm256_loadu_ps(D + j + (pw ? 2 : 0));
    const __m256 zero = _mm256_setzero_ps();
#define RLX_MPB33_SEL(c, gv, t) _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32((c), _mm256_set1_epi32(t))), (gv))
#define RLX_MPB33_PQ(a, bp, bq, P, Q)                                                                      \
    do {                                                                                                  \
        if (pw) {                                                                                         \
            P = _mm256_add_ps((bp), RLX_MPB33_SEL(c1, g1, 3 * (a) + 1));                                  \
            Q = _mm256_add_ps(_mm256_add_ps((bq), RLX_MPB33_SEL(c1, g1, 3 * (a) + 2)),                    \
                              RLX_MPB33_SEL(cs, gs, 3 * (a)));                                            \
        } else {                                                                                          \
            P = _mm256_add_ps(_mm256_add_ps((bp), RLX_MPB33_SEL(cs, gs, 3 * (a) + 2)),                    \
                              RLX_MPB33_SEL(c1, g1, 3 * (a)));                                            \
            Q = _mm256_add_ps((bq), RLX_MPB33_SEL(c1, g1, 3 * (a) + 1));                                  \
        }                                                                                                 \
    } while (0)
    __m256 P, Q;
    if (d0) {
        RLX_MPB33_PQ(0, _mm256_loadu_ps(cinp + j), _mm256_loadu_ps(cinq + j), P, Q);
        const __m256 lo = _mm256_unpacklo_ps(P, Q), hi = _mm256_unpackhi_ps(P, Q);
        _mm256_storeu_ps(d0 + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(d0 + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    if (d1) {
        RLX_MPB33_PQ(1, zero, zero, P, Q);
        const __m256 lo = _mm256_unpacklo_ps(P, Q), hi = _mm256_unpackhi_ps(P, Q);
        _mm256_storeu_ps(d1 + 2 * j, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(d1 + 2 * j + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    RLX_MPB33_PQ(2, zero, zero, P, Q);
    _mm256_storeu_ps(coutp + j, P);
    _mm256_storeu_ps(coutq + j, Q);
#undef RLX_MPB33_PQ
#undef RLX_MPB33_SEL
}

/* phase B over the W columns (see rlx_mpb33_pairs8) */
RLX_TARGET_AVX2 static void rlx_mpb33_rows(const int32_t* C, const float* D, const float* cinp, const float* cinq,
                                           float* coutp, float* coutq, float* d0, float* d1, ptrdiff_t W,
                                           ptrdiff_t pw) {
    ptrdiff_t done = 0;                   /* columns [0, done) written */
    if (W >= 16) {
        const ptrdiff_t np = W / 2;       /* whole pairs; the last block ends at np */
        if (pw) {
            for (ptrdiff_t j = 0; j < np; j += 8)
                rlx_mpb33_pairs8(C, D, cinp, cinq, coutp, coutq, d0, d1, j + 8 <= np ? j : np - 8, 1);
        } else {
            for (ptrdiff_t j = 0; j < np; j += 8)
                rlx_mpb33_pairs8(C, D, cinp, cinq, coutp, coutq, d0, d1, j + 8 <= np ? j : np - 8, 0);
        }
        done = 2 * np;
    }
    for (ptrdiff_t c = done; c < W; ++c) {
        const ptrdiff_t q = c + pw, jj = c >> 1;
        for (int a = 0; a < 3; ++a) {
            float* d = a == 0 ? d0 : a == 1 ? d1 : NULL;
            if (a < 2 && !d) continue;
            const float base = a == 0 ? ((c & 1) ? cinq[jj] : cinp[jj]) : 0.0f;
            float v;
            if (q & 1) {
                const ptrdiff_t i = (q - 1) / 2 + 1;
                v = base + (C[i] == 3 * a + 1 ? D[i] : 0.0f);
            } else {
                const ptrdiff_t i = q / 2;
                v = (base + (C[i] == 3 * a + 2 ? D[i] : 0.0f)) + (C[i + 1] == 3 * a ? D[i + 1] : 0.0f);
            }
            if (d) d[c] = v;
            else if (c & 1) coutq[jj] = v;
            else coutp[jj] = v;
        }
    }
}

/* dx rows of output rows [oh0, oh1) of one plane (see above) */
static void rlx_mpb33_band(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                           const rlx_mpb_geom* g, ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    rlx_mpb33_ws w;
    const ptrdiff_t H = g->H, W = g->W, OH = g->OH, OW = g->OW, ph = g->ph, pw = g->pw, in_sz = H * W;
    const ptrdiff_t L = rlx_mpb33_row_len(W, OW, pw), GL = rlx_mpb33_g_len(W, OW);
    const float* xp = x + plane * in_sz;
    const float* dyp = dy + plane * OH * OW;
    float* dxp = dx + plane * in_sz;
    int cur = 0;                           /* carry buffer holding the current carry */
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, x_len, "max pool backward x/dx");
    RLX_CHECK_RANGE(plane * OH * OW, (plane + 1) * OH * OW, dy_len, "max pool backward dy");
    RLX_CHECK_RANGE(0, L, RLX_MPB33_ROW, "max pool backward k3s2 row");
    RLX_CHECK_RANGE(0, GL, RLX_MPB33_G, "max pool backward k3s2 line");
    (void)x_len;
    (void)dy_len;
    for (int s = 0; s < 3; ++s) w.tag[s] = -1;
    for (ptrdiff_t i = 0; i < GL; ++i) {
        w.C[i] = -1;
        w.D[i] = 0.0f;
        w.cp[0][i] = w.cq[0][i] = 0.0f;
    }
    if (oh0 > 0) {
        rlx_mpb33_winners(&w, xp, dyp, g, L, oh0 - 1);
        rlx_mpb33_rows(w.C, w.D, NULL, NULL, w.cp[0], w.cq[0], NULL, NULL, W, pw);
    }
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        rlx_mpb33_winners(&w, xp, dyp, g, L, oh);
        const ptrdiff_t r0 = 2 * oh - ph;          /* dx rows r0 (tap row 0), r0 + 1 (tap row 1) */
        float* d0 = r0 >= 0 && r0 < H ? dxp + r0 * W : NULL;
        float* d1 = r0 + 1 >= 0 && r0 + 1 < H ? dxp + (r0 + 1) * W : NULL;
        rlx_mpb33_rows(w.C, w.D, w.cp[cur], w.cq[cur], w.cp[1 - cur], w.cq[1 - cur], d0, d1, W, pw);
        cur = 1 - cur;
    }
    if (oh1 == OH) {
        /* the last carry, then rows no window covers (floor mode) */
        ptrdiff_t r = 2 * OH - ph;
        if (r >= 0 && r < H) {
            float* d = dxp + r * W;
            for (ptrdiff_t c = 0; c < W; ++c) d[c] = (c & 1) ? w.cq[cur][c >> 1] : w.cp[cur][c >> 1];
            ++r;
        }
        if (r < 0) r = 0;
        if (r < H) memset(dxp + r * W, 0, (size_t)((H - r) * W) * sizeof(float));
    }
}
#else
static void rlx_mpb33_band(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                           const rlx_mpb_geom* g, ptrdiff_t plane, ptrdiff_t oh0, ptrdiff_t oh1) {
    (void)x; (void)x_len; (void)dy; (void)dy_len; (void)dx; (void)g; (void)plane; (void)oh0; (void)oh1;
}
#endif

#endif
