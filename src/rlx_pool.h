/* Branch-free argmax update for max pooling with indices.
 *
 * For i in [0, n): v = x[i*s]; if (v > y[i] || v is NaN) { y[i] = v; ip[i] = i0 + i*s; }
 *
 * Written with bit masks instead of a conditional: on real data "v beats the
 * running max" is unpredictable, and compilers turn the plain `if` (or a
 * ternary) into conditional stores behind a mispredicting branch.  restrict:
 * y, ip and x never overlap (separate arena buffers). */
#ifndef RLX_POOL_H
#define RLX_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include "rlx_simd.h"

static inline void rlx_argmax_run(float *restrict y, int64_t *restrict ip, const float *restrict x,
                                  ptrdiff_t n, ptrdiff_t s, int64_t i0)
{
    for (ptrdiff_t i = 0; i < n; ++i) {
        float v = x[i * s], c = y[i];
        uint32_t vb, cb, rb;
        int take = (v > c) | (v != v);
        uint32_t m32 = (uint32_t)0 - (uint32_t)take;
        uint64_t m64 = (uint64_t)0 - (uint64_t)take;
        memcpy(&vb, &v, 4);
        memcpy(&cb, &c, 4);
        rb = (vb & m32) | (cb & ~m32);
        memcpy(&y[i], &rb, 4);
        ip[i] = (int64_t)(((uint64_t)ip[i] & ~m64) | ((uint64_t)(i0 + i * s) & m64));
    }
}

/* Sum of x[0..n) in a fixed order, float within blocks and double across
 * them (a two-level cascade, as torch's float sum: float adds run at twice
 * the rate of float -> double conversions, which bounded the all-double
 * loop at about 15 floats/ns, under what L2 and L3 deliver).
 *   - x is cut into blocks of RLX_GSUM_BLOCK floats from x[0] (the last may
 *     be short).  In a block, float lane j (of 32) sums the block's entries
 *     whose offset in the block is j modulo 32, in order, from +0.0f; then
 *     lane j += lane j + 16 (j < 16) and lane j += lane j + 8 (j < 8).
 *     A lane thus rounds at most 17 times (16 entries and two folds).
 *   - After each block, double lane j += (double)float lane j (j < 8).
 *   - A block whose 8 folded float lanes are not all finite (an overflow,
 *     or an inf or NaN in x) is summed again in double in the same lanes
 *     and order (rlx_gsum_block_f64), so sums beyond float's range stay
 *     finite, as the all-double loop kept them; an inf or NaN comes out the
 *     same.
 *   - At the end, double lane j += lane j + w for w = 4, 2, 1.
 * A lane never holds -0.0 (it starts at +0.0 and a rounded sum is never
 * -0.0), so adding +0.0 for a missing entry changes no bits: the AVX2 body
 * below adds the short tail with masked loads and gives the same bits as
 * this one, which the compiler vectorises over the lanes as it stands. */
#define RLX_GSUM_LANES 32
#define RLX_GSUM_BLOCK 512

/* lane[j] (j < 8) += the block's sum in double, in rlx_sum_f64_body's order */
static void rlx_gsum_block_f64(const float *restrict p, ptrdiff_t e, double *restrict lane)
{
    double g[RLX_GSUM_LANES];
    for (int j = 0; j < RLX_GSUM_LANES; ++j) g[j] = 0.0;
    for (ptrdiff_t i = 0; i < e; ++i) g[i % RLX_GSUM_LANES] += (double)p[i];
    for (int j = 0; j < 16; ++j) g[j] += g[j + 16];
    for (int j = 0; j < 8; ++j) lane[j] += g[j] + g[j + 8];
}

RLX_INLINE double rlx_sum_f64_body(const float *restrict x, ptrdiff_t n)
{
    double lane[8];
    for (int j = 0; j < 8; ++j) lane[j] = 0.0;
    for (ptrdiff_t b = 0; b < n; b += RLX_GSUM_BLOCK) {
        const float *restrict p = x + b;
        ptrdiff_t e = n - b < RLX_GSUM_BLOCK ? n - b : RLX_GSUM_BLOCK, i = 0;
        float f[RLX_GSUM_LANES];
        for (int j = 0; j < RLX_GSUM_LANES; ++j) f[j] = 0.0f;
        for (; i + RLX_GSUM_LANES <= e; i += RLX_GSUM_LANES)
            for (int j = 0; j < RLX_GSUM_LANES; ++j)
                f[j] += p[i + j];
        for (int j = 0; i + j < e; ++j)     /* the short tail, lane j takes p[i + j] */
            f[j] += p[i + j];
        for (int j = 0; j < 16; ++j) f[j] += f[j + 16];
        for (int j = 0; j < 8; ++j) f[j] += f[j + 8];
        int bad = 0;
        for (int j = 0; j < 8; ++j) bad |= !(f[j] - f[j] == 0.0f);
        if (bad) rlx_gsum_block_f64(p, e, lane);
        else for (int j = 0; j < 8; ++j) lane[j] += (double)f[j];
    }
    for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j)
            lane[j] += lane[j + w];
    return lane[0];
}

static inline double rlx_sum_f64(const float *restrict x, ptrdiff_t n) { return rlx_sum_f64_body(x, n); }

/* ------------------------------------------------------------------------- */
/* Row-separable window pool: one output line (plane, od, oh) at a time.     */
/*                                                                           */
/* Pass 1 reduces the window's in-bounds input rows (the (kd, kh) taps) into */
/* a padded row buffer, unit stride along w (vectorises); pass 2 reduces kw  */
/* consecutive buffer entries per output with stride sw.  The buffer holds    */
/* -inf (max) or 0 (sum) in the pw entries before the row and after it, so    */
/* pass 2 has no bounds tests.  Max keeps floats (exact); average sums in     */
/* double like the general kernel, then divides once per output.             */
/*                                                                           */
/* Used for max without indices and for average whenever the w dilation is 1  */
/* (every 1-, 2- and 3-D pool the compiler emits with such windows): max is   */
/* order-free except for the sign of a tied zero (+0 vs -0 may come from a     */
/* different tap than the window-order scan) and NaN propagates the same way:  */
/* v replaces the running max when v > max or v is NaN.                      */
/* ------------------------------------------------------------------------- */
typedef struct {
    ptrdiff_t D, H, W, OD, OH, OW;
    ptrdiff_t kd, kh, kw, sd, sh, sw, pd, ph, pw, ped, peh, pew, dd, dh;
    ptrdiff_t row_len;              /* buffer entries per thread (>= pw + W, the last window, +16) */
    int kind_max, include_pad;
    ptrdiff_t divisor_override;
} rlx_pool_geom;

/* Buffer entries a line needs: the last window's end or the row's, plus 16
 * entries of slack for the 16-float loads of the stride-2 pass. */
static inline ptrdiff_t rlx_pool_row_len(ptrdiff_t W, ptrdiff_t OW, ptrdiff_t kw, ptrdiff_t sw, ptrdiff_t pw) {
    ptrdiff_t a = (OW - 1) * sw + kw, b = pw + W;
    return (a > b ? a : b) + 16;
}

static inline void rlx_pool_taps(ptrdiff_t start, ptrdiff_t d, ptrdiff_t k, ptrdiff_t lo, ptrdiff_t hi,
                                 ptrdiff_t* j0, ptrdiff_t* j1) {
    /* taps j in [0, k) with lo <= start + j*d < hi (d >= 1) */
    ptrdiff_t a = lo - start, b = hi - start;
    if (d != 1) {                      /* no division on the common path */
        a = a > 0 ? (a + d - 1) / d : 0;
        b = b > 0 ? (b - 1) / d + 1 : 0;
    } else {
        a = a > 0 ? a : 0;
        b = b > 0 ? b : 0;
    }
    if (b > k) b = k;
    if (a > b) a = b;
    *j0 = a;
    *j1 = b;
}

#define RLX_TAKE(v, c) (((v) > (c)) | ((v) != (v)))

RLX_INLINE void rlx_hmax_generic(float* restrict yr, const float* restrict b, ptrdiff_t i0, ptrdiff_t n,
                                 ptrdiff_t kw, ptrdiff_t sw) {
    if (sw == 1) {
        for (ptrdiff_t i = i0; i < n; ++i) yr[i] = b[i];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) {
                float v = b[i + j], c = yr[i];
                yr[i] = RLX_TAKE(v, c) ? v : c;
            }
    } else if (sw == 2) {
        for (ptrdiff_t i = i0; i < n; ++i) yr[i] = b[2 * i];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) {
                float v = b[2 * i + j], c = yr[i];
                yr[i] = RLX_TAKE(v, c) ? v : c;
            }
    } else {
        for (ptrdiff_t i = i0; i < n; ++i) yr[i] = b[i * sw];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) {
                float v = b[i * sw + j], c = yr[i];
                yr[i] = RLX_TAKE(v, c) ? v : c;
            }
    }
}

RLX_INLINE void rlx_hsum_generic(double* restrict acc, const double* restrict b, ptrdiff_t i0, ptrdiff_t n,
                                 ptrdiff_t kw, ptrdiff_t sw) {
    if (sw == 1) {
        for (ptrdiff_t i = i0; i < n; ++i) acc[i] = b[i];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) acc[i] += b[i + j];
    } else if (sw == 2) {
        for (ptrdiff_t i = i0; i < n; ++i) acc[i] = b[2 * i];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) acc[i] += b[2 * i + j];
    } else {
        for (ptrdiff_t i = i0; i < n; ++i) acc[i] = b[i * sw];
        for (ptrdiff_t j = 1; j < kw; ++j)
            for (ptrdiff_t i = i0; i < n; ++i) acc[i] += b[i * sw + j];
    }
}

#if RLX_X86_DISPATCH
/* max(c, v) taking v when v > c or v is NaN, c when c is NaN */
RLX_TARGET_AVX2 static inline __m256 rlx_max8(__m256 c, __m256 v) {
    __m256 m = _mm256_max_ps(v, c);                     /* v > c ? v : c (c NaN -> c) */
    return _mm256_blendv_ps(m, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* rlx_max8 where the data is known to hold no NaN (clean, a constant where
 * it is inlined): then maxps alone takes v exactly when v > c, the same bits */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) __m256 rlx_max8c(__m256 c, __m256 v, const int clean) {
    return clean ? _mm256_max_ps(v, c) : rlx_max8(c, v);
}

/* 1 when x[0, n) holds no NaN */
RLX_TARGET_AVX2 static int rlx_nan_free_avx2(const float* x, ptrdiff_t n) {
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 u = _mm256_loadu_ps(x + i), v = _mm256_loadu_ps(x + i + 8);
        a = _mm256_or_ps(a, _mm256_cmp_ps(u, u, _CMP_UNORD_Q));
        b = _mm256_or_ps(b, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    }
    int bad = _mm256_movemask_ps(_mm256_or_ps(a, b));
    for (; i < n; ++i) bad |= x[i] != x[i];
    return !bad;
}

/* 1 when x[lo, hi) holds no NaN.  clean[0, 1) is a span of x already known
 * to hold none; the rows of successive lines of a plane overlap, so a run of
 * lines scans only what lies past it (and starts a new span on a jump). */
RLX_TARGET_AVX2 static inline int rlx_rows_nan_free(const float* x, ptrdiff_t lo, ptrdiff_t hi, ptrdiff_t* clean) {
    if (lo >= clean[0] && lo <= clean[1] && hi > clean[1]) {
        if (rlx_nan_free_avx2(x + clean[1], hi - clean[1])) clean[1] = hi;
    } else if (lo < clean[0] || lo > clean[1]) {
        clean[0] = lo;
        clean[1] = rlx_nan_free_avx2(x + lo, hi - lo) ? hi : lo;
    }
    return lo >= clean[0] && hi <= clean[1];
}

/* Lanes [0, left) of 8 set (a load mask for a partial block). */
RLX_TARGET_AVX2 static inline __m256i rlx_tail_mask8(ptrdiff_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left < 8 ? left : 8)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first `left` (< 8) floats of v to y, in pieces of 4, 2 and 1: AMD cores
 * run a masked store (vmaskmovps) as a slow microcoded sequence (about 15
 * cycles against under 1 for a plain store on a Zen 4 host), which a line's
 * tail paid on every line.  With these pieces and whole stores into the row
 * buffers, one thread, N8 (medians of 3 alternating processes): max 3x3 s1
 * on 14x14 1.56x, average 3x3 s1 on 14x14 1.12x, average and max 2x2 s2 on
 * 28x28 1.12x and 1.10x. */
RLX_TARGET_AVX2 static inline void rlx_store_part8(float* y, __m256 v, ptrdiff_t left) {
    __m128 q = _mm256_castps256_ps128(v);
    if (left & 4) {
        _mm_storeu_ps(y, q);
        y += 4;
        q = _mm256_extractf128_ps(v, 1);
    }
    if (left & 2) {
        _mm_storel_pi((__m64*)y, q);
        y += 2;
        q = _mm_movehl_ps(q, q);
    }
    if (left & 1) _mm_store_ss(y, q);
}

/* Outputs [0, n) in blocks of 8 for stride 2: tap j of 8 consecutive outputs
 * is the even (j even) or odd (j odd) lanes of the 16 floats at 2i + j - j%2.
 * The last partial block stores its first outputs only (rlx_store_part8); its
 * loads stay inside the row buffer (rlx_pool_row_len's 16 entries of slack). */
RLX_INLINE_AVX2 ptrdiff_t rlx_hmax_s2_avx2_body(float* yr, const float* b, ptrdiff_t n, ptrdiff_t kw,
                                                const int clean) {
    ptrdiff_t i = 0;
    for (; i < n; i += 8) {
        __m256 e, o, acc;
        rlx_deint8(b + 2 * i, &e, &o);
        acc = kw > 1 ? rlx_max8c(e, o, clean) : e;
        for (ptrdiff_t j = 2; j < kw; j += 2) {
            rlx_deint8(b + 2 * i + j, &e, &o);
            acc = rlx_max8c(acc, e, clean);
            if (j + 1 < kw) acc = rlx_max8c(acc, o, clean);
        }
        if (i + 8 <= n) _mm256_storeu_ps(yr + i, acc);
        else rlx_store_part8(yr + i, acc, n - i);
    }
    return n;
}
/* constant kw for the common windows: loops unrolled, rows / taps in registers */
RLX_INLINE_AVX2 ptrdiff_t rlx_hmax_s2_avx2_kw(float* yr, const float* b, ptrdiff_t n, ptrdiff_t kw, const int clean) {
    switch (kw) {
    case 2: return rlx_hmax_s2_avx2_body(yr, b, n, 2, clean);
    case 3: return rlx_hmax_s2_avx2_body(yr, b, n, 3, clean);
    default: return rlx_hmax_s2_avx2_body(yr, b, n, kw, clean);
    }
}
RLX_TARGET_AVX2 static ptrdiff_t rlx_hmax_s2_avx2(float* yr, const float* b, ptrdiff_t n, ptrdiff_t kw,
                                                  int clean) {
    return clean ? rlx_hmax_s2_avx2_kw(yr, b, n, kw, 1) : rlx_hmax_s2_avx2_kw(yr, b, n, kw, 0);
}

RLX_INLINE_AVX2 ptrdiff_t rlx_hmax_s1_avx2_body(float* yr, const float* b, ptrdiff_t n, ptrdiff_t kw,
                                                const int clean) {
    ptrdiff_t i = 0;
    for (; i < n; i += 8) {
        __m256 acc = _mm256_loadu_ps(b + i);
        for (ptrdiff_t j = 1; j < kw; ++j) acc = rlx_max8c(acc, _mm256_loadu_ps(b + i + j), clean);
        if (i + 8 <= n) _mm256_storeu_ps(yr + i, acc);
        else rlx_store_part8(yr + i, acc, n - i);
    }
    return n;
}
RLX_TARGET_AVX2 static ptrdiff_t rlx_hmax_s1_avx2(float* yr, const float* b, ptrdiff_t n, ptrdiff_t kw,
                                                  int clean) {
    return clean ? rlx_hmax_s1_avx2_body(yr, b, n, kw, 1) : rlx_hmax_s1_avx2_body(yr, b, n, kw, 0);
}

/* Window sums of doubles for stride 2, 4 outputs at a time: tap j of outputs
 * i..i+3 is the even (j even) or odd (j odd) lanes of the 8 doubles at 2i + j - j%2. */
RLX_TARGET_AVX2 static ptrdiff_t rlx_hsum_s2_avx2(double* acc, const double* b, ptrdiff_t n, ptrdiff_t kw) {
    ptrdiff_t i = 0;
    for (; i + 4 <= n; i += 4) {
        __m256d s = _mm256_setzero_pd();
        for (ptrdiff_t j = 0; j < kw; j += 2) {
            __m256d lo = _mm256_loadu_pd(b + 2 * i + j), hi = _mm256_loadu_pd(b + 2 * i + j + 4);
            s = _mm256_add_pd(s, _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0)));
            if (j + 1 < kw)
                s = _mm256_add_pd(s, _mm256_permute4x64_pd(_mm256_unpackhi_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0)));
        }
        _mm256_storeu_pd(acc + i, s);
    }
    return i;
}

/* Vertical reductions of a line's input rows in one pass, the running value
 * in registers: r[i] = max over rows (rows[0] first, then v replaces it when
 * v > r or v is NaN), or r[i] = ((rows[0][i] + rows[1][i]) + ...) in double:
 * the order of the row-by-row loops of rlx_pool_line_body. */
RLX_INLINE_AVX2 void rlx_vmax_rows_avx2_body(float* r, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                             const int clean) {
    ptrdiff_t i = 0;
    for (; i + 16 <= W; i += 16) {
        __m256 a = _mm256_loadu_ps(rows[0] + i), b = _mm256_loadu_ps(rows[0] + i + 8);
        for (ptrdiff_t k = 1; k < nr; ++k) {
            a = rlx_max8c(a, _mm256_loadu_ps(rows[k] + i), clean);
            b = rlx_max8c(b, _mm256_loadu_ps(rows[k] + i + 8), clean);
        }
        _mm256_storeu_ps(r + i, a);
        _mm256_storeu_ps(r + i + 8, b);
    }
    for (; i < W; i += 8) {                 /* the last < 16 entries, 8 at a time, masked loads at the end */
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(W - i < 8 ? W - i : 8)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 a = _mm256_maskload_ps(rows[0] + i, m);
        for (ptrdiff_t k = 1; k < nr; ++k) a = rlx_max8c(a, _mm256_maskload_ps(rows[k] + i, m), clean);
        /* a whole store (no vmaskmovps, see rlx_store_part8): the entries past W
         * are in the buffer's slack, and the caller writes its -inf there after */
        _mm256_storeu_ps(r + i, a);
    }
}
/* constant nr for the common windows: loops unrolled, rows / taps in registers */
RLX_INLINE_AVX2 void rlx_vmax_rows_avx2_nr(float* r, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                           const int clean) {
    switch (nr) {
    case 2: rlx_vmax_rows_avx2_body(r, rows, 2, W, clean); return;
    case 3: rlx_vmax_rows_avx2_body(r, rows, 3, W, clean); return;
    case 4: rlx_vmax_rows_avx2_body(r, rows, 4, W, clean); return;
    case 6: rlx_vmax_rows_avx2_body(r, rows, 6, W, clean); return;
    case 9: rlx_vmax_rows_avx2_body(r, rows, 9, W, clean); return;
    default: rlx_vmax_rows_avx2_body(r, rows, nr, W, clean); return;
    }
}
RLX_TARGET_AVX2 static void rlx_vmax_rows_avx2(float* r, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                               int clean) {
    if (clean) rlx_vmax_rows_avx2_nr(r, rows, nr, W, 1);
    else rlx_vmax_rows_avx2_nr(r, rows, nr, W, 0);
}

RLX_INLINE_AVX2 void rlx_vsum_rows_avx2_body(double* r, const float* const* rows, ptrdiff_t nr, ptrdiff_t W) {
    ptrdiff_t i = 0;
    for (; i + 8 <= W; i += 8) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(rows[0] + i)), b = _mm256_cvtps_pd(_mm_loadu_ps(rows[0] + i + 4));
        for (ptrdiff_t k = 1; k < nr; ++k) {
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_loadu_ps(rows[k] + i)));
            b = _mm256_add_pd(b, _mm256_cvtps_pd(_mm_loadu_ps(rows[k] + i + 4)));
        }
        _mm256_storeu_pd(r + i, a);
        _mm256_storeu_pd(r + i + 4, b);
    }
    for (; i < W; i += 4) {                 /* the last < 8 entries, 4 at a time, masked loads at the end */
        const __m128i m = _mm_cmpgt_epi32(_mm_set1_epi32((int)(W - i < 4 ? W - i : 4)), _mm_setr_epi32(0, 1, 2, 3));
        __m256d a = _mm256_cvtps_pd(_mm_maskload_ps(rows[0] + i, m));
        for (ptrdiff_t k = 1; k < nr; ++k) a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm_maskload_ps(rows[k] + i, m)));
        /* a whole store (no vmaskmovpd, see rlx_store_part8): the lanes past W
         * summed masked-out zeros to +0.0, what the caller's zero padding there
         * holds, and the buffer has slack past it */
        _mm256_storeu_pd(r + i, a);
    }
}
RLX_TARGET_AVX2 static void rlx_vsum_rows_avx2(double* r, const float* const* rows, ptrdiff_t nr, ptrdiff_t W) {
    /* constant nr for the common windows: loops unrolled, rows / taps in registers */
    switch (nr) {
    case 2: rlx_vsum_rows_avx2_body(r, rows, 2, W); return;
    case 3: rlx_vsum_rows_avx2_body(r, rows, 3, W); return;
    case 4: rlx_vsum_rows_avx2_body(r, rows, 4, W); return;
    case 6: rlx_vsum_rows_avx2_body(r, rows, 6, W); return;
    case 9: rlx_vsum_rows_avx2_body(r, rows, 9, W); return;
    default: rlx_vsum_rows_avx2_body(r, rows, nr, W); return;
    }
}

/* 4 floats to y, the first `left` of them when left < 4 */
RLX_TARGET_AVX2 static inline void rlx_store4(float* y, __m128 v, ptrdiff_t left) {
    if (left >= 4) {
        _mm_storeu_ps(y, v);
        return;
    }
    if (left & 2) {                         /* pieces, not vmaskmovps: see rlx_store_part8 */
        _mm_storel_pi((__m64*)y, v);
        y += 2;
        v = _mm_movehl_ps(v, v);
    }
    if (left & 1) _mm_store_ss(y, v);
}

/* Outputs [i0, i1) of full windows (stride 1 or 2), 4 at a time: the window
 * sums over the buffer b (taps in order, as rlx_hsum_generic), times inv, to
 * float; the last block stores through a mask (its loads stay inside the row
 * buffer's slack).  Returns i1 (i0 for other strides: nothing written). */
RLX_INLINE_AVX2 ptrdiff_t rlx_havg_avx2_body(float* yr, const double* b, ptrdiff_t i0, ptrdiff_t i1,
                                             ptrdiff_t kw, ptrdiff_t sw, double inv) {
    const __m256d vinv = _mm256_set1_pd(inv);
    ptrdiff_t i = i0;
    if (sw == 2) {
        for (; i < i1; i += 4) {
            __m256d lo = _mm256_loadu_pd(b + 2 * i), hi = _mm256_loadu_pd(b + 2 * i + 4);
            __m256d s = _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
            if (kw > 1)
                s = _mm256_add_pd(s, _mm256_permute4x64_pd(_mm256_unpackhi_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0)));
            for (ptrdiff_t j = 2; j < kw; j += 2) {
                lo = _mm256_loadu_pd(b + 2 * i + j);
                hi = _mm256_loadu_pd(b + 2 * i + j + 4);
                s = _mm256_add_pd(s, _mm256_permute4x64_pd(_mm256_unpacklo_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0)));
                if (j + 1 < kw)
                    s = _mm256_add_pd(s, _mm256_permute4x64_pd(_mm256_unpackhi_pd(lo, hi),
                                                               _MM_SHUFFLE(3, 1, 2, 0)));
            }
            rlx_store4(yr + i, _mm256_cvtpd_ps(_mm256_mul_pd(s, vinv)), i1 - i);
        }
    } else if (sw == 1) {
        for (; i < i1; i += 4) {
            __m256d s = _mm256_loadu_pd(b + i);
            for (ptrdiff_t j = 1; j < kw; ++j) s = _mm256_add_pd(s, _mm256_loadu_pd(b + i + j));
            rlx_store4(yr + i, _mm256_cvtpd_ps(_mm256_mul_pd(s, vinv)), i1 - i);
        }
    }
    return i < i1 ? i : i1;
}
RLX_TARGET_AVX2 static ptrdiff_t rlx_havg_avx2(float* yr, const double* b, ptrdiff_t i0, ptrdiff_t i1,
                                               ptrdiff_t kw, ptrdiff_t sw, double inv) {
    /* constant kw for the common windows: loops unrolled, rows / taps in registers */
    switch (kw) {
    case 2: return rlx_havg_avx2_body(yr, b, i0, i1, 2, sw, inv);
    case 3: return rlx_havg_avx2_body(yr, b, i0, i1, 3, sw, inv);
    default: return rlx_havg_avx2_body(yr, b, i0, i1, kw, sw, inv);
    }
}

RLX_TARGET_AVX2 static void rlx_vmax_avx2(float* r, const float* x, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(r + i, rlx_max8(_mm256_loadu_ps(r + i), _mm256_loadu_ps(x + i)));
    for (; i < n; ++i) {
        float v = x[i], c = r[i];
        r[i] = RLX_TAKE(v, c) ? v : c;
    }
}
#endif

/* ------------------------------------------------------------------------- */
/* Global pool partials: one fixed chunk of a plane per call, so the partials */
/* and their combination never depend on the thread count.                   */
/* ------------------------------------------------------------------------- */

/* Max of x[0..n) over 32 interleaved lanes (lane j takes x[i] with
 * i % 32 == j), combined in a fixed order; v replaces a lane's max when
 * v > max or v is NaN, so a NaN anywhere gives NaN.  Max is exact: only the
 * sign of a tied zero and which NaN comes out may differ from a sequential
 * scan. */
#define RLX_GMAX_LANES 32
RLX_INLINE float rlx_gmax_body(const float* restrict x, ptrdiff_t n) {
    float lane[RLX_GMAX_LANES];
    for (int j = 0; j < RLX_GMAX_LANES; ++j) lane[j] = -INFINITY;
    ptrdiff_t i = 0;
    for (; i + RLX_GMAX_LANES <= n; i += RLX_GMAX_LANES)
        for (int j = 0; j < RLX_GMAX_LANES; ++j) {
            const float v = x[i + j], c = lane[j];
            lane[j] = RLX_TAKE(v, c) ? v : c;
        }
    for (int j = 0; i < n; ++i, ++j) {
        const float v = x[i], c = lane[j];
        lane[j] = RLX_TAKE(v, c) ? v : c;
    }
    for (int w = RLX_GMAX_LANES / 2; w >= 1; w /= 2)      /* pairwise: lane j with lane j + w */
        for (int j = 0; j < w; ++j) {
            const float v = lane[j + w], c = lane[j];
            lane[j] = RLX_TAKE(v, c) ? v : c;
        }
    return lane[0];
}

#if RLX_X86_DISPATCH
/* The same lanes and combination order, explicitly: four 8-float
 * accumulators; the last partial block loads with a mask and puts -inf in
 * the lanes past the end (which then change nothing). */
RLX_TARGET_AVX2 static inline __m128 rlx_max4(__m128 c, __m128 v) {
    __m128 m = _mm_max_ps(v, c);
    return _mm_blendv_ps(m, v, _mm_cmp_ps(v, v, _CMP_UNORD_Q));
}

RLX_TARGET_AVX2 static float rlx_gmax_avx2(const float* x, ptrdiff_t n) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 a[4] = {ninf, ninf, ninf, ninf};
    ptrdiff_t i = 0;
    for (; i + RLX_GMAX_LANES <= n; i += RLX_GMAX_LANES) {
        a[0] = rlx_max8(a[0], _mm256_loadu_ps(x + i));
        a[1] = rlx_max8(a[1], _mm256_loadu_ps(x + i + 8));
        a[2] = rlx_max8(a[2], _mm256_loadu_ps(x + i + 16));
        a[3] = rlx_max8(a[3], _mm256_loadu_ps(x + i + 24));
    }
    if (i < n) {
        const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (int k = 0; k < 4 && i + 8 * k < n; ++k) {
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i - 8 * k)), iota);
            const __m256 v = _mm256_blendv_ps(ninf, _mm256_maskload_ps(x + i + 8 * k, m), _mm256_castsi256_ps(m));
            a[k] = rlx_max8(a[k], v);
        }
    }
    /* lane j takes lane j + w for w = 16, 8, 4, 2, 1 */
    __m256 b = rlx_max8(rlx_max8(a[0], a[2]), rlx_max8(a[1], a[3]));
    __m128 q = rlx_max4(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
    q = rlx_max4(q, _mm_movehl_ps(q, q));
    q = rlx_max4(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm_cvtss_f32(q);
}

/* rlx_sum_f64's blocks, lanes and order, explicitly: float lanes 0-7, 8-15,
 * 16-23, 24-31 in four accumulators, double lanes 0-3 in *d0, 4-7 in *d1. */
RLX_INLINE_AVX2 void rlx_gsum_block_avx2(const float* p, ptrdiff_t e, __m256d* d0, __m256d* d1) {
    __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
    ptrdiff_t i = 0;
    for (; i + RLX_GSUM_LANES <= e; i += RLX_GSUM_LANES) {
        f0 = _mm256_add_ps(f0, _mm256_loadu_ps(p + i));
        f1 = _mm256_add_ps(f1, _mm256_loadu_ps(p + i + 8));
        f2 = _mm256_add_ps(f2, _mm256_loadu_ps(p + i + 16));
        f3 = _mm256_add_ps(f3, _mm256_loadu_ps(p + i + 24));
    }
    if (i < e) {
        /* the tail's r < 32 entries, +0.0f where there is none */
        const __m256i r = _mm256_set1_epi32((int)(e - i)), eight = _mm256_set1_epi32(8);
        __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        f0 = _mm256_add_ps(f0, _mm256_maskload_ps(p + i, _mm256_cmpgt_epi32(r, k)));
        k = _mm256_add_epi32(k, eight);
        f1 = _mm256_add_ps(f1, _mm256_maskload_ps(p + i + 8, _mm256_cmpgt_epi32(r, k)));
        k = _mm256_add_epi32(k, eight);
        f2 = _mm256_add_ps(f2, _mm256_maskload_ps(p + i + 16, _mm256_cmpgt_epi32(r, k)));
        k = _mm256_add_epi32(k, eight);
        f3 = _mm256_add_ps(f3, _mm256_maskload_ps(p + i + 24, _mm256_cmpgt_epi32(r, k)));
    }
    f0 = _mm256_add_ps(_mm256_add_ps(f0, f2), _mm256_add_ps(f1, f3));     /* j += j + 16, then j + 8 */
    /* x - x is 0 for a finite x, NaN for an inf or NaN */
    __m256 ok = _mm256_cmp_ps(_mm256_sub_ps(f0, f0), _mm256_setzero_ps(), _CMP_EQ_OQ);
    if (__builtin_expect(_mm256_movemask_ps(ok) != 0xff, 0)) {
        double lane[8];
        _mm256_storeu_pd(lane, *d0);
        _mm256_storeu_pd(lane + 4, *d1);
        rlx_gsum_block_f64(p, e, lane);
        *d0 = _mm256_loadu_pd(lane);
        *d1 = _mm256_loadu_pd(lane + 4);
        return;
    }
    *d0 = _mm256_add_pd(*d0, _mm256_cvtps_pd(_mm256_castps256_ps128(f0)));
    *d1 = _mm256_add_pd(*d1, _mm256_cvtps_pd(_mm256_extractf128_ps(f0, 1)));
}

/* the double lanes' tree: w = 4, 2, 1 */
RLX_INLINE_AVX2 double rlx_gsum_tree_avx2(__m256d d0, __m256d d1) {
    __m256d a = _mm256_add_pd(d0, d1);
    __m128d q = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(q, _mm_unpackhi_pd(q, q)));
}

RLX_TARGET_AVX2 static double rlx_gsum_avx2(const float* x, ptrdiff_t n) {
    __m256d d0 = _mm256_setzero_pd(), d1 = d0;
    for (ptrdiff_t b = 0; b < n; b += RLX_GSUM_BLOCK)
        rlx_gsum_block_avx2(x + b, n - b < RLX_GSUM_BLOCK ? n - b : RLX_GSUM_BLOCK, &d0, &d1);
    return rlx_gsum_tree_avx2(d0, d1);
}
#endif

static float rlx_gmax_base(const float* x, ptrdiff_t n) { return rlx_gmax_body(x, n); }

#if RLX_X86_DISPATCH
/* rlx_gsum_avx2 of two planes, block by block (two streams in flight); the
 * same bits as two calls. */
RLX_TARGET_AVX2 static void rlx_gsum2_avx2(const float* x, const float* z, ptrdiff_t n, double* sx, double* sz) {
    __m256d d0 = _mm256_setzero_pd(), d1 = d0, c0 = d0, c1 = d0;
    for (ptrdiff_t b = 0; b < n; b += RLX_GSUM_BLOCK) {
        ptrdiff_t e = n - b < RLX_GSUM_BLOCK ? n - b : RLX_GSUM_BLOCK;
        rlx_gsum_block_avx2(x + b, e, &d0, &d1);
        rlx_gsum_block_avx2(z + b, e, &c0, &c1);
    }
    *sx = rlx_gsum_tree_avx2(d0, d1);
    *sz = rlx_gsum_tree_avx2(c0, c1);
}
#endif

/* Double sums of the n floats at x and at z: rlx_gsum(x, n), rlx_gsum(z, n). */
static void rlx_gsum2(const float* x, const float* z, ptrdiff_t n, double* sx, double* sz) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_gsum2_avx2(x, z, n, sx, sz);
        return;
    }
#endif
    *sx = rlx_sum_f64(x, n);
    *sz = rlx_sum_f64(z, n);
}



/* max / double sum of one chunk, in the variant rlx_simd_level() picks */
static float rlx_gmax(const float* x, ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) return rlx_gmax_avx2(x, n);
#endif
    return rlx_gmax_base(x, n);
}

static double rlx_gsum(const float* x, ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) return rlx_gsum_avx2(x, n);
#endif
    return rlx_sum_f64(x, n);
}

#define RLX_POOL_ROWS 64         /* input rows per line the AVX2 vertical pass takes in one go */

/* Divisor range of a line's windows along d, h, w: [0, size) or, with
 * count_include_pad, the padded input (ceil-mode overhang never counts). */
static inline void rlx_pool_count_range(const rlx_pool_geom* g, ptrdiff_t* lo_d, ptrdiff_t* hi_d, ptrdiff_t* lo_h,
                                        ptrdiff_t* hi_h, ptrdiff_t* lo_w, ptrdiff_t* hi_w) {
    *lo_d = 0; *hi_d = g->D; *lo_h = 0; *hi_h = g->H; *lo_w = 0; *hi_w = g->W;
    if (g->include_pad) {
        *lo_d = -g->pd; *hi_d = g->D + g->ped;
        *lo_h = -g->ph; *hi_h = g->H + g->peh;
        *lo_w = -g->pw; *hi_w = g->W + g->pew;
    }
}

/* 1 / d, recomputed only when d changes (c: the last d and its reciprocal; a division per line is a
 * visible share of short lines) */
static inline double rlx_inv_cached(double* c, ptrdiff_t d) {
    if (c[0] != (double)d) {
        c[0] = (double)d;
        c[1] = 1.0 / (double)d;
    }
    return c[1];
}

#if RLX_X86_DISPATCH
/* Window 2, stride 2, no padding along w, every window inside the row
 * (2 * OW <= W): straight from the input rows, no row buffer.  The same
 * order as the buffered passes: column sums over the rows in order, then the
 * two columns of each window (hadd), times inv / the max rule.  The last
 * block loads and stores through masks. */
RLX_INLINE_AVX2 void rlx_avg_k2s2_avx2_body(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t OW,
                                              double inv) {
    const __m256d vinv = _mm256_set1_pd(inv);
    for (ptrdiff_t i = 0; i < OW; i += 4) {
        __m256d lo, hi;
        if (i + 4 <= OW) {
            __m256 v = _mm256_loadu_ps(rows[0] + 2 * i);
            lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            for (ptrdiff_t k = 1; k < nr; ++k) {
                v = _mm256_loadu_ps(rows[k] + 2 * i);
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
            }
        } else {
            const __m256i m = rlx_tail_mask8(2 * (OW - i));
            __m256 v = _mm256_maskload_ps(rows[0] + 2 * i, m);
            lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
            hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            for (ptrdiff_t k = 1; k < nr; ++k) {
                v = _mm256_maskload_ps(rows[k] + 2 * i, m);
                lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
                hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
            }
        }
        const __m256d s = _mm256_permute4x64_pd(_mm256_hadd_pd(lo, hi), _MM_SHUFFLE(3, 1, 2, 0));
        rlx_store4(yr + i, _mm256_cvtpd_ps(_mm256_mul_pd(s, vinv)), OW - i);
    }
}
RLX_TARGET_AVX2 static void rlx_avg_k2s2_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t OW,
                                              double inv) {
    switch (nr) {      /* constant row counts of the common windows: the row loop unrolled */
    case 1: rlx_avg_k2s2_avx2_body(yr, rows, 1, OW, inv); return;
    case 2: rlx_avg_k2s2_avx2_body(yr, rows, 2, OW, inv); return;
    case 4: rlx_avg_k2s2_avx2_body(yr, rows, 4, OW, inv); return;
    default: rlx_avg_k2s2_avx2_body(yr, rows, nr, OW, inv); return;
    }
}

RLX_INLINE_AVX2 void rlx_max_k2s2_avx2_body(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t OW,
                                            const int clean) {
    for (ptrdiff_t i = 0; i < OW; i += 8) {
        __m256 a, b;
        if (i + 8 <= OW) {
            a = _mm256_loadu_ps(rows[0] + 2 * i);
            b = _mm256_loadu_ps(rows[0] + 2 * i + 8);
            for (ptrdiff_t k = 1; k < nr; ++k) {
                a = rlx_max8c(a, _mm256_loadu_ps(rows[k] + 2 * i), clean);
                b = rlx_max8c(b, _mm256_loadu_ps(rows[k] + 2 * i + 8), clean);
            }
        } else {
            const __m256i ma = rlx_tail_mask8(2 * (OW - i)), mb = rlx_tail_mask8(2 * (OW - i) - 8);
            a = _mm256_maskload_ps(rows[0] + 2 * i, ma);
            b = _mm256_maskload_ps(rows[0] + 2 * i + 8, mb);
            for (ptrdiff_t k = 1; k < nr; ++k) {
                a = rlx_max8c(a, _mm256_maskload_ps(rows[k] + 2 * i, ma), clean);
                b = rlx_max8c(b, _mm256_maskload_ps(rows[k] + 2 * i + 8, mb), clean);
            }
        }
        const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)), o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
        const __m256 r = rlx_max8c(_mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))),
                                  _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))), clean);
        if (i + 8 <= OW) _mm256_storeu_ps(yr + i, r);
        else rlx_store_part8(yr + i, r, OW - i);
    }
}
/* constant row counts of the common windows: the row loop unrolled */
RLX_INLINE_AVX2 void rlx_max_k2s2_avx2_nr(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t OW,
                                          const int clean) {
    switch (nr) {
    case 1: rlx_max_k2s2_avx2_body(yr, rows, 1, OW, clean); return;
    case 2: rlx_max_k2s2_avx2_body(yr, rows, 2, OW, clean); return;
    case 4: rlx_max_k2s2_avx2_body(yr, rows, 4, OW, clean); return;
    default: rlx_max_k2s2_avx2_body(yr, rows, nr, OW, clean); return;
    }
}
RLX_TARGET_AVX2 static void rlx_max_k2s2_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t OW,
                                              int clean) {
    if (clean) rlx_max_k2s2_avx2_nr(yr, rows, nr, OW, 1);
    else rlx_max_k2s2_avx2_nr(yr, rows, nr, OW, 0);
}

/* The maxima over the first min(nr, 3) rows of columns c .. c + 8 (-inf
 * from W on) by maxps alone, or-ing into *seen the lanes where a row holds a
 * NaN (compares of the loaded rows, which wait on no max). */
RLX_INLINE_AVX2 __m256 rlx_vmax3_cols8_seen(const float* const* rows, const ptrdiff_t nr, ptrdiff_t c, ptrdiff_t W,
                                            __m256* seen) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 v[3] = {ninf, ninf, ninf};                    /* callers pass 1 to 3 rows */
    const ptrdiff_t n = nr < 3 ? nr : 3;
    if (c + 8 <= W) {
        for (ptrdiff_t k = 0; k < n; ++k) v[k] = _mm256_loadu_ps(rows[k] + c);
    } else {
        const __m256i m = rlx_tail_mask8(W - c);
        for (ptrdiff_t k = 0; k < n; ++k)
            v[k] = _mm256_blendv_ps(ninf, _mm256_maskload_ps(rows[k] + c, m), _mm256_castsi256_ps(m));
    }
    __m256 a = v[0];
    if (n == 1) *seen = _mm256_or_ps(*seen, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    if (n >= 2) {
        *seen = _mm256_or_ps(*seen, _mm256_cmp_ps(v[0], v[1], _CMP_UNORD_Q));
        a = _mm256_max_ps(v[1], a);
    }
    if (n == 3) {
        *seen = _mm256_or_ps(*seen, _mm256_cmp_ps(v[2], v[2], _CMP_UNORD_Q));
        a = _mm256_max_ps(v[2], a);
    }
    return a;
}

/* The maxima over the nr rows of columns c .. c + 8 (-inf from W on); clean
 * 2: rlx_vmax3_cols8_seen (at most 3 rows). */
RLX_INLINE_AVX2 __m256 rlx_vmax_cols8(const float* const* rows, ptrdiff_t nr, ptrdiff_t c, ptrdiff_t W,
                                      const int clean, __m256* seen) {
    if (clean == 2) return rlx_vmax3_cols8_seen(rows, nr, c, W, seen);
    if (c + 8 <= W) {
        __m256 a = _mm256_loadu_ps(rows[0] + c);
        for (ptrdiff_t k = 1; k < nr; ++k) a = rlx_max8c(a, _mm256_loadu_ps(rows[k] + c), clean);
        return a;
    }
    const __m256i m = rlx_tail_mask8(W - c);
    __m256 a = _mm256_maskload_ps(rows[0] + c, m);
    for (ptrdiff_t k = 1; k < nr; ++k) a = rlx_max8c(a, _mm256_maskload_ps(rows[k] + c, m), clean);
    return _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), a, _mm256_castsi256_ps(m));
}

/* Outputs i .. i + 7 of a 3-wide stride-1 window (padding 1) from the
 * column maxima of columns i - 8 .. i + 15 (prev, cur, next): columns c - 1
 * and c + 1 by lane shifts across the blocks, then (c - 1, c), c + 1; the
 * first `left` outputs stored when fewer than 8 remain. */
RLX_INLINE_AVX2 void rlx_hmax3_s1_store(float* y, __m256 prev, __m256 cur, __m256 next, const int clean,
                                        ptrdiff_t left) {
    const __m256i pc = _mm256_castps_si256(_mm256_permute2f128_ps(prev, cur, 0x21));
    const __m256i cn = _mm256_castps_si256(_mm256_permute2f128_ps(cur, next, 0x21));
    const __m256i ci = _mm256_castps_si256(cur);
    const __m256 l = _mm256_castsi256_ps(_mm256_alignr_epi8(ci, pc, 12));        /* columns c - 1 */
    const __m256 r = _mm256_castsi256_ps(_mm256_alignr_epi8(cn, ci, 4));         /* columns c + 1 */
    const __m256 v = rlx_max8c(rlx_max8c(l, cur, clean), r, clean);
    if (left >= 8) _mm256_storeu_ps(y, v);
    else rlx_store_part8(y, v, left);
}

/* Columns c .. c + 8 (-inf from W on) of rows[0 .. 4): the maxima over rows
 * 0 to 2 into *top and over rows 1 to 3 into *bot (rows 1 and 2 once), by
 * maxps, or-ing into *seen the lanes where a row holds a NaN. */
RLX_INLINE_AVX2 void rlx_vmax4_pair_cols8(const float* const* rows, ptrdiff_t c, ptrdiff_t W, __m256* seen,
                                          __m256* top, __m256* bot) {
    __m256 v0, v1, v2, v3;          /* named, not an array: gcc kept an array on the stack */
    if (c + 8 <= W) {
        v0 = _mm256_loadu_ps(rows[0] + c);
        v1 = _mm256_loadu_ps(rows[1] + c);
        v2 = _mm256_loadu_ps(rows[2] + c);
        v3 = _mm256_loadu_ps(rows[3] + c);
    } else {
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        const __m256i m = rlx_tail_mask8(W - c);
        const __m256 mf = _mm256_castsi256_ps(m);
        v0 = _mm256_blendv_ps(ninf, _mm256_maskload_ps(rows[0] + c, m), mf);
        v1 = _mm256_blendv_ps(ninf, _mm256_maskload_ps(rows[1] + c, m), mf);
        v2 = _mm256_blendv_ps(ninf, _mm256_maskload_ps(rows[2] + c, m), mf);
        v3 = _mm256_blendv_ps(ninf, _mm256_maskload_ps(rows[3] + c, m), mf);
    }
    *seen = _mm256_or_ps(*seen, _mm256_or_ps(_mm256_cmp_ps(v0, v1, _CMP_UNORD_Q), _mm256_cmp_ps(v2, v3, _CMP_UNORD_Q)));
    const __m256 mid = _mm256_max_ps(v2, v1);
    *top = _mm256_max_ps(mid, v0);
    *bot = _mm256_max_ps(v3, mid);
}

/* Window 3, stride 1, padding 1 along w (OW <= W): the column maxima over the
 * rows of 8 columns in registers, their neighbours one column left and right
 * by lane shifts across the previous / next block (-inf outside the row), no
 * row buffer.  The order of the buffered passes: rows in order, then columns
 * i - 1, i, i + 1. */
RLX_INLINE_AVX2 int rlx_max_k3s1_avx2_body(float* yr, const float* const* rows, const ptrdiff_t nr, ptrdiff_t W,
                                           ptrdiff_t OW, const int clean) {
    __m256 seen_v = _mm256_setzero_ps(), *seen = &seen_v;    /* clean 2: lanes where a row held a NaN */
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 prev = ninf, cur = rlx_vmax_cols8(rows, nr, 0, W, clean, seen);
    for (ptrdiff_t i = 0; i < OW; i += 8) {
        const __m256 next = i + 8 < W ? rlx_vmax_cols8(rows, nr, i + 8, W, clean, seen) : ninf;
        rlx_hmax3_s1_store(yr + i, prev, cur, next, clean, OW - i);
        prev = cur;
        cur = next;
    }
    return clean == 2 && _mm256_movemask_ps(seen_v) != 0;
}

/* Two lines of 3 rows each, the second's rows one below the first's
 * (rows[0 .. 4)), by maxps alone: the column maxima over their shared rows
 * 1 and 2 once, then row 0 for the first line and row 3 for the second (the
 * values of the rows-in-order pass: max is exact, the order can only change
 * the sign of a tied zero).  Returns whether a row held a NaN (the caller
 * then runs each line NaN-aware).  N1 C64 56x56, 1 thread: 0.059 -> 0.041 ms. */
RLX_TARGET_AVX2 static int rlx_max_k3s1_pair_avx2(float* y0, float* y1, const float* const* rows, ptrdiff_t W,
                                                  ptrdiff_t OW) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256 seen = _mm256_setzero_ps(), prev0 = ninf, prev1 = ninf, cur0, cur1;
    rlx_vmax4_pair_cols8(rows, 0, W, &seen, &cur0, &cur1);
    for (ptrdiff_t i = 0; i < OW; i += 8) {
        __m256 next0 = ninf, next1 = ninf;
        if (i + 8 < W) rlx_vmax4_pair_cols8(rows, i + 8, W, &seen, &next0, &next1);
        rlx_hmax3_s1_store(y0 + i, prev0, cur0, next0, 2, OW - i);
        rlx_hmax3_s1_store(y1 + i, prev1, cur1, next1, 2, OW - i);
        prev0 = cur0;
        prev1 = cur1;
        cur0 = next0;
        cur1 = next1;
    }
    return _mm256_movemask_ps(seen) != 0;
}

/* the row counts of a 3-row window (2 at the edges): the row loop unrolled
 * (1.02-1.10x on 56x56, 28x28 and 14x14 planes, interleaved) */
RLX_INLINE_AVX2 int rlx_max_k3s1_avx2_nr(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                         ptrdiff_t OW, const int clean) {
    switch (nr) {
    case 2: return rlx_max_k3s1_avx2_body(yr, rows, 2, W, OW, clean);
    case 3: return rlx_max_k3s1_avx2_body(yr, rows, 3, W, OW, clean);
    default: return rlx_max_k3s1_avx2_body(yr, rows, nr, W, OW, clean);
    }
}
RLX_TARGET_AVX2 static void rlx_max_k3s1_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                              ptrdiff_t OW, int clean) {
    if (clean) rlx_max_k3s1_avx2_nr(yr, rows, nr, W, OW, 1);
    else rlx_max_k3s1_avx2_nr(yr, rows, nr, W, OW, 0);
}
/* rlx_max_k3s1_avx2 on 1 to 3 rows not known to be NaN-free: the maxps-only
 * pass, which notes the lanes where a row holds a NaN as it loads them (no
 * scan before it), then, if it noted any, the NaN-aware pass over the same
 * outputs */
RLX_TARGET_AVX2 static void rlx_max_k3s1_any_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                                  ptrdiff_t OW) {
    if (rlx_max_k3s1_avx2_nr(yr, rows, nr, W, OW, 2)) rlx_max_k3s1_avx2_nr(yr, rows, nr, W, OW, 0);
}

/* Window 3, stride 2, padding 1 along w (the ResNet stem's pool; every
 * window starts at or after column -1): 8 outputs from the column maxima of
 * 16 columns (2i .. 2i + 15, -inf from W on), split into the even columns
 * (each window's middle tap) and the odd ones (its last); each window's
 * first tap is the odd column before it, the odd vector shifted up a lane
 * with the previous block's last odd column (-inf before the row) in lane
 * 0.  No row buffer; the order of the buffered passes: rows in order, then
 * columns 2i - 1, 2i, 2i + 1.  Against the buffered passes, 41 alternating
 * rounds on a Zen 4 host: N1 C64 112x112 1.26x at 1 and 2 threads; N8 1.21x
 * (1 thread) and 1.18x (2). */
RLX_INLINE_AVX2 int rlx_max_k3s2_avx2_body(float* yr, const float* const* rows, const ptrdiff_t nr, ptrdiff_t W,
                                           ptrdiff_t OW, const int clean) {
    __m256 seen_v = _mm256_setzero_ps(), *seen = &seen_v;    /* clean 2: lanes where a row held a NaN */
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256i up = _mm256_setr_epi32(7, 0, 1, 2, 3, 4, 5, 6);
    __m256 prev = ninf;                                  /* lane 7: the last odd column so far */
    for (ptrdiff_t i = 0; i < OW; i += 8) {
        const __m256 a = rlx_vmax_cols8(rows, nr, 2 * i, W, clean, seen);
        const __m256 b = 2 * i + 8 < W ? rlx_vmax_cols8(rows, nr, 2 * i + 8, W, clean, seen) : ninf;
        const __m256 e = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0))), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256 o = _mm256_castpd_ps(_mm256_permute4x64_pd(
            _mm256_castps_pd(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1))), _MM_SHUFFLE(3, 1, 2, 0)));
        const __m256 before = _mm256_blend_ps(_mm256_permutevar8x32_ps(o, up), _mm256_permutevar8x32_ps(prev, up),
                                              0x01);
        const __m256 r = rlx_max8c(rlx_max8c(before, e, clean), o, clean);
        prev = o;
        if (i + 8 <= OW) _mm256_storeu_ps(yr + i, r);
        else rlx_store_part8(yr + i, r, OW - i);
    }
    return clean == 2 && _mm256_movemask_ps(seen_v) != 0;
}
RLX_INLINE_AVX2 int rlx_max_k3s2_avx2_nr(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                         ptrdiff_t OW, const int clean) {
    switch (nr) {
    case 2: return rlx_max_k3s2_avx2_body(yr, rows, 2, W, OW, clean);
    case 3: return rlx_max_k3s2_avx2_body(yr, rows, 3, W, OW, clean);
    default: return rlx_max_k3s2_avx2_body(yr, rows, nr, W, OW, clean);
    }
}
RLX_TARGET_AVX2 static void rlx_max_k3s2_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                              ptrdiff_t OW, int clean) {
    if (clean) rlx_max_k3s2_avx2_nr(yr, rows, nr, W, OW, 1);
    else rlx_max_k3s2_avx2_nr(yr, rows, nr, W, OW, 0);
}
/* rlx_max_k3s2_avx2 on 1 to 3 rows not known to be NaN-free: the maxps-only
 * pass, which notes the lanes where a row holds a NaN as it loads them (no
 * scan before it), then, if it noted any, the NaN-aware pass over the same
 * outputs */
RLX_TARGET_AVX2 static void rlx_max_k3s2_any_avx2(float* yr, const float* const* rows, ptrdiff_t nr, ptrdiff_t W,
                                                  ptrdiff_t OW) {
    if (rlx_max_k3s2_avx2_nr(yr, rows, nr, W, OW, 2)) rlx_max_k3s2_avx2_nr(yr, rows, nr, W, OW, 0);
}

/* Average lines of 3-wide windows, stride 2, w padding 1, straight from the
 * input rows (no row buffer).  Each output is the portable loops' sum in
 * order: column sums in double over the rows in order, then the window's
 * three columns in order, a padding column adding +0.0 as the buffer's zero
 * does; times 1 / (rows counted * columns counted) or 1 / divisor_override.
 *
 * The weights depend on the line only through its counted rows, so they are
 * kept per row count: every block of 4 outputs takes 1 / (3 rows) but the
 * first and the last, whose windows may be clipped (the padding column
 * before the row without count_include_pad; ceil-mode overhang past the end
 * padding), which take a vector each. */
typedef struct {
    ptrdiff_t rcount;           /* the counted rows the weights are for (-1: not set) */
    ptrdiff_t n, tb;            /* outputs taken in blocks (window's first column < W), last block's first */
    double inv;                 /* full windows */
    double wh[4], wt[4];        /* the first and the last block, lanes in the kernel's order 0 2 1 3 */
} rlx_avg3_weights;

static inline double rlx_avg3_weight(ptrdiff_t i, ptrdiff_t rcount, ptrdiff_t lo_w, ptrdiff_t hi_w,
                                     ptrdiff_t divisor_override) {
    if (divisor_override > 0) return 1.0 / (double)divisor_override;
    const ptrdiff_t s0 = 2 * i - 1, lo = s0 > lo_w ? s0 : lo_w, hi = s0 + 3 < hi_w ? s0 + 3 : hi_w;
    return 1.0 / (double)(rcount * (hi - lo));
}

static void rlx_avg3_weights_set(rlx_avg3_weights* c, ptrdiff_t W, ptrdiff_t OW, ptrdiff_t rcount,
                                 ptrdiff_t lo_w, ptrdiff_t hi_w, ptrdiff_t divisor_override) {
    static const int lane[4] = {0, 2, 1, 3};
    c->rcount = rcount;
    c->n = W / 2 + 1 < OW ? W / 2 + 1 : OW;
    c->tb = c->n > 0 ? (c->n - 1) / 4 * 4 : 0;
    c->inv = 1.0 / (double)(divisor_override > 0 ? divisor_override : rcount * 3);
    for (int j = 0; j < 4; ++j) {
        c->wh[j] = rlx_avg3_weight(lane[j], rcount, lo_w, hi_w, divisor_override);
        c->wt[j] = rlx_avg3_weight(c->tb + lane[j], rcount, lo_w, hi_w, divisor_override);
    }
}

/* 4 floats at p (the first lanes of m alone unless full) as doubles */
RLX_INLINE_AVX2 __m256d rlx_cvt4_pd(const float* p, const int full, __m128i m) {
    return _mm256_cvtps_pd(full ? _mm_loadu_ps(p) : _mm_maskload_ps(p, m));
}

/* Outputs i .. i + 3 from the column sums s0, s1 of columns 2i .. 2i + 7:
 * even and odd columns out of unpacklo / unpackhi in the order 0 2 1 3, the
 * odd column before each window the odd vector rotated a lane with its first
 * lane carried from the block before (+0.0, the padding, for the first);
 * (before + even) + odd, times w, to float and back in order. */
RLX_INLINE_AVX2 void rlx_avg3_out4(float* y, __m256d s0, __m256d s1, __m256d* carry, __m256d w, ptrdiff_t left) {
    const __m256d e = _mm256_unpacklo_pd(s0, s1);             /* columns 0 4 2 6 */
    const __m256d o = _mm256_unpackhi_pd(s0, s1);             /* columns 1 5 3 7 */
    const __m256d rot = _mm256_permute4x64_pd(o, _MM_SHUFFLE(1, 0, 2, 3));   /* 7 3 1 5 */
    const __m256d before = _mm256_blend_pd(rot, *carry, 1);                  /* -1 3 1 5 */
    *carry = rot;
    const __m128 f = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_add_pd(_mm256_add_pd(before, e), o), w));
    rlx_store4(y, _mm_permute_ps(f, _MM_SHUFFLE(3, 1, 2, 0)), left);        /* 0 2 1 3 -> 0 1 2 3 */
}

/* One block of 4 outputs of one line (rows[0 .. nr)) or, with pair, of two
 * lines whose rows are rows[0 .. 3) and rows[2 .. 5): the shared row
 * converted once, each line's column sums over its rows in order. */
RLX_INLINE_AVX2 void rlx_avg_k3s2_block(float* y, float* y2, const float* const* rows, const ptrdiff_t nr,
                                        ptrdiff_t i, ptrdiff_t valid, const int full, const int pair,
                                        __m256d* carry, __m256d* carry2, __m256d w, ptrdiff_t left) {
    const __m128i m0 = _mm256_castsi256_si128(rlx_tail_mask8(valid));
    const __m128i m1 = _mm256_castsi256_si128(rlx_tail_mask8(valid - 4));
    const ptrdiff_t c = 2 * i;
    __m256d s0 = rlx_cvt4_pd(rows[0] + c, full, m0), s1 = rlx_cvt4_pd(rows[0] + c + 4, full, m1);
    for (ptrdiff_t k = 1; k < (pair ? 2 : nr); ++k) {
        s0 = _mm256_add_pd(s0, rlx_cvt4_pd(rows[k] + c, full, m0));
        s1 = _mm256_add_pd(s1, rlx_cvt4_pd(rows[k] + c + 4, full, m1));
    }
    if (pair) {
        const __m256d m0d = rlx_cvt4_pd(rows[2] + c, full, m0), m1d = rlx_cvt4_pd(rows[2] + c + 4, full, m1);
        __m256d t0 = _mm256_add_pd(m0d, rlx_cvt4_pd(rows[3] + c, full, m0));
        __m256d t1 = _mm256_add_pd(m1d, rlx_cvt4_pd(rows[3] + c + 4, full, m1));
        t0 = _mm256_add_pd(t0, rlx_cvt4_pd(rows[4] + c, full, m0));
        t1 = _mm256_add_pd(t1, rlx_cvt4_pd(rows[4] + c + 4, full, m1));
        s0 = _mm256_add_pd(s0, m0d);
        s1 = _mm256_add_pd(s1, m1d);
        rlx_avg3_out4(y2 + i, t0, t1, carry2, w, left);
    }
    rlx_avg3_out4(y + i, s0, s1, carry, w, left);
}

/* Outputs [0, c->n) of one line, or of two (pair, y2), in blocks of 4:
 * columns 2i .. 2i + 7 of each row, loads past W masked to +0.0 (the end
 * padding); the first and the last block take their weight vectors. */
RLX_INLINE_AVX2 void rlx_avg_k3s2_avx2_body(float* yr, float* y2, const float* const* rows, const ptrdiff_t nr,
                                            ptrdiff_t W, const rlx_avg3_weights* c, const int pair) {
    const ptrdiff_t n = c->n, tb = c->tb;
    const __m256d vinv = _mm256_set1_pd(c->inv);
    __m256d carry = _mm256_setzero_pd(), carry2 = _mm256_setzero_pd();
    for (ptrdiff_t i = 0; i < n; i += 4) {
        const ptrdiff_t valid = W - 2 * i;
        const __m256d w = i == tb ? _mm256_loadu_pd(c->wt) : i == 0 ? _mm256_loadu_pd(c->wh) : vinv;
        if (valid >= 8) rlx_avg_k3s2_block(yr, y2, rows, nr, i, valid, 1, pair, &carry, &carry2, w, n - i);
        else rlx_avg_k3s2_block(yr, y2, rows, nr, i, valid, 0, pair, &carry, &carry2, w, n - i);
    }
}

/* An average line (3-wide windows, stride 2, w padding 1) from its nr >= 1
 * input rows, rcount of them counted; with y2, two such lines of 3 rows
 * each and the same count, the second's rows rows[2 .. 5) (stride 2 along
 * h).  The blocks above, then any window that lies wholly past W (ceil-mode
 * overhang) one at a time. */
RLX_TARGET_AVX2 static void rlx_avg_k3s2_lines(float* yr, float* y2, const float* const* rows, ptrdiff_t nr,
                                               ptrdiff_t W, ptrdiff_t OW, ptrdiff_t rcount, ptrdiff_t lo_w,
                                               ptrdiff_t hi_w, ptrdiff_t divisor_override, rlx_avg3_weights* c) {
    if (c->rcount != rcount) rlx_avg3_weights_set(c, W, OW, rcount, lo_w, hi_w, divisor_override);
    if (y2) rlx_avg_k3s2_avx2_body(yr, y2, rows, 3, W, c, 1);
    else if (nr == 3) rlx_avg_k3s2_avx2_body(yr, NULL, rows, 3, W, c, 0);    /* the row loop unrolled */
    else if (nr == 2) rlx_avg_k3s2_avx2_body(yr, NULL, rows, 2, W, c, 0);
    else rlx_avg_k3s2_avx2_body(yr, NULL, rows, nr, W, c, 0);
    for (ptrdiff_t i = c->n; i < OW; ++i) {
        const double acc = 0.0;     /* every column of these windows is padding */
        yr[i] = (float)(acc * rlx_avg3_weight(i, rcount, lo_w, hi_w, divisor_override));
        if (y2) y2[i] = yr[i];
    }
}

/* Average line, strides 1 and 2 along w: the rows' double sums in one
 * register pass into buf (zeros in its pw entries before the row and after
 * it), then the full windows 4 at a time straight to float; the clipped
 * windows at the ends and the last few outputs one at a time.  Every output
 * is (sum over taps j in order of (sum over rows in order)) * (1 / divisor),
 * the order and rounding of the portable loops in rlx_pool_line_body. */
RLX_TARGET_AVX2 static void rlx_avg_line_avx2(const float* x, ptrdiff_t x_len, float* yr, double* buf,
                                              const rlx_pool_geom* g, ptrdiff_t sd, ptrdiff_t sh, ptrdiff_t xb,
                                              ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t b0, ptrdiff_t b1, double* icache) {
    const ptrdiff_t W = g->W, OW = g->OW, pw = g->pw, kw = g->kw, sw = g->sw;
    const float* rows[RLX_POOL_ROWS];
    ptrdiff_t nr = 0;
    (void)x_len;
    for (ptrdiff_t a = a0; a < a1; ++a)
        for (ptrdiff_t b = b0; b < b1; ++b) {
            const ptrdiff_t off = xb + ((sd + a * g->dd) * g->H + sh + b * g->dh) * W;
            RLX_CHECK_RANGE(off, off + W, x_len, "pool x");
            rows[nr++] = x + off;
        }
    ptrdiff_t lo_d, hi_d, lo_h, hi_h, lo_w, hi_w, ilo = 0, ihi = OW;
    double inv;
    rlx_pool_count_range(g, &lo_d, &hi_d, &lo_h, &hi_h, &lo_w, &hi_w);
    rlx_pool_taps(sd, g->dd, g->kd, lo_d, hi_d, &a0, &a1);
    rlx_pool_taps(sh, g->dh, g->kh, lo_h, hi_h, &b0, &b1);
    const ptrdiff_t rcount = (a1 - a0) * (b1 - b0);
    if (kw == 2 && sw == 2 && pw == 0 && 2 * OW <= W) {
        rlx_avg_k2s2_avx2(yr, rows, nr, OW, rlx_inv_cached(icache, g->divisor_override > 0 ? g->divisor_override
                                                                                          : rcount * 2));
        return;
    }
    if (kw == 3 && sw == 2 && pw == 1 && nr >= 1 && nr <= 3) {
        /* (3-D windows' 9 rows stay on the row buffer: through the register sums, with the weights
         * set per line, N2 C32 15x55x55 k3 s2 took 1.21 ms against 1.15) */
        rlx_avg3_weights c;
        c.rcount = -1;
        rlx_avg_k3s2_lines(yr, NULL, rows, nr, W, OW, rcount, lo_w, hi_w, g->divisor_override, &c);
        return;
    }
    for (ptrdiff_t i = 0; i < pw; ++i) buf[i] = 0.0;
    for (ptrdiff_t i = pw + W; i < g->row_len; ++i) buf[i] = 0.0;
    rlx_vsum_rows_avx2(buf + pw, rows, nr, W);
    if (g->divisor_override > 0) {
        inv = rlx_inv_cached(icache, g->divisor_override);
    } else {
        while (ilo < OW && ilo * sw - pw < lo_w) ++ilo;
        while (ihi > ilo && (ihi - 1) * sw - pw + kw > hi_w) --ihi;
        inv = rlx_inv_cached(icache, rcount * kw);
    }
    const ptrdiff_t iv = rlx_havg_avx2(yr, buf, ilo, ihi, kw, sw, inv);
    for (ptrdiff_t i = 0; i < OW; ++i) {
        if (i == ilo) i = iv;               /* [ilo, iv) written above */
        if (i >= OW) break;
        const double* bi = buf + i * sw;
        double acc = bi[0];
        for (ptrdiff_t j = 1; j < kw; ++j) acc += bi[j];
        double wi = inv;
        if (g->divisor_override <= 0 && (i < ilo || i >= ihi)) {
            ptrdiff_t s0 = i * sw - pw, lo = s0 > lo_w ? s0 : lo_w, hi = s0 + kw < hi_w ? s0 + kw : hi_w;
            wi = 1.0 / (double)(rcount * (hi - lo));
        }
        yr[i] = (float)(acc * wi);
    }
}
#endif

/* ------------------------------------------------------------------------- */
/* One-row lines (1-D pools, or a line whose window has one in-bounds input   */
/* row): outputs [w0, w1) straight from the input row xr (W entries), no row  */
/* buffer.  Padded taps are never read; the results are those of the          */
/* buffered passes above: max starts at -inf and takes v when v > max or v is */
/* NaN, in tap order; average sums in double in tap order with 0.0 standing   */
/* for a padded first tap, then multiplies by 1 / divisor (rcount rows times  */
/* the w taps inside [lo_w, hi_w), or divisor_override).  The AVX2 variant    */
/* runs the blocks of 8 outputs whose loads stay inside the row (strides 1    */
/* and 2); the ends of the line and other strides go one output at a time.    */
/* ------------------------------------------------------------------------- */
typedef struct {
    ptrdiff_t W, kw, sw, pw, lo_w, hi_w, rcount, divisor_override;
    int kind_max;
} rlx_row1_geom;

RLX_INLINE void rlx_row1_scalar(const float* restrict xr, float* restrict yr, const rlx_row1_geom* g, ptrdiff_t i) {
    const ptrdiff_t s0 = i * g->sw - g->pw, W = g->W, kw = g->kw;
    if (g->kind_max) {
        float r = -INFINITY;
        for (ptrdiff_t j = 0; j < kw; ++j) {
            const ptrdiff_t c = s0 + j;
            if (c >= 0 && c < W) {
                const float v = xr[c];
                r = RLX_TAKE(v, r) ? v : r;
            }
        }
        yr[i] = r;
        return;
    }
    double acc = (s0 >= 0 && s0 < W) ? (double)xr[s0] : 0.0;
    for (ptrdiff_t j = 1; j < kw; ++j) {
        const ptrdiff_t c = s0 + j;
        if (c >= 0 && c < W) acc += (double)xr[c];
    }
    double inv;
    if (g->divisor_override > 0) {
        inv = 1.0 / (double)g->divisor_override;
    } else {
        const ptrdiff_t lo = s0 > g->lo_w ? s0 : g->lo_w, hi = s0 + kw < g->hi_w ? s0 + kw : g->hi_w;
        inv = 1.0 / (double)(g->rcount * (hi - lo));
    }
    yr[i] = (float)(acc * inv);
}

#if RLX_X86_DISPATCH
/* 8 outputs at i of a stride-2 line: tap j is the even (j even) or odd lanes of the 16 floats at 2i - pw + j - j%2 */
RLX_INLINE_AVX2 void rlx_row1_s2_block(const float* xr, float* yr, const rlx_row1_geom* g, ptrdiff_t i,
                                      __m256d vinv) {
    const float* p = xr + 2 * i - g->pw;
    const ptrdiff_t kw = g->kw;
    __m256 e, o;
    rlx_deint8(p, &e, &o);
    if (g->kind_max) {
        __m256 acc = kw > 1 ? rlx_max8(e, o) : e;
        for (ptrdiff_t j = 2; j < kw; j += 2) {
            rlx_deint8(p + j, &e, &o);
            acc = rlx_max8(acc, e);
            if (j + 1 < kw) acc = rlx_max8(acc, o);
        }
        _mm256_storeu_ps(yr + i, acc);
        return;
    }
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(e)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1));
    if (kw > 1) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(o)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(o, 1)));
    }
    for (ptrdiff_t j = 2; j < kw; j += 2) {
        rlx_deint8(p + j, &e, &o);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
        if (j + 1 < kw) {
            lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(o)));
            hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(o, 1)));
        }
    }
    _mm_storeu_ps(yr + i, _mm256_cvtpd_ps(_mm256_mul_pd(lo, vinv)));
    _mm_storeu_ps(yr + i + 4, _mm256_cvtpd_ps(_mm256_mul_pd(hi, vinv)));
}

RLX_INLINE_AVX2 void rlx_row1_s1_block(const float* xr, float* yr, const rlx_row1_geom* g, ptrdiff_t i,
                                      __m256d vinv) {
    const float* p = xr + i - g->pw;
    const ptrdiff_t kw = g->kw;
    if (g->kind_max) {
        __m256 acc = _mm256_loadu_ps(p);
        for (ptrdiff_t j = 1; j < kw; ++j) acc = rlx_max8(acc, _mm256_loadu_ps(p + j));
        _mm256_storeu_ps(yr + i, acc);
        return;
    }
    __m256d lo = _mm256_cvtps_pd(_mm_loadu_ps(p)), hi = _mm256_cvtps_pd(_mm_loadu_ps(p + 4));
    for (ptrdiff_t j = 1; j < kw; ++j) {
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm_loadu_ps(p + j)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm_loadu_ps(p + j + 4)));
    }
    _mm_storeu_ps(yr + i, _mm256_cvtpd_ps(_mm256_mul_pd(lo, vinv)));
    _mm_storeu_ps(yr + i + 4, _mm256_cvtpd_ps(_mm256_mul_pd(hi, vinv)));
}

RLX_TARGET_AVX2 static void rlx_row1_avx2(const float* xr, float* yr, const rlx_row1_geom* g, ptrdiff_t w0,
                                          ptrdiff_t w1) {
    const ptrdiff_t W = g->W, kw = g->kw, sw = g->sw, pw = g->pw;
    ptrdiff_t vlo = w1, vhi = w1;           /* blocks start in [vlo, vhi]: windows full, loads inside the row */
    if (sw == 2 || sw == 1) {
        /* loads of a block at i: [i*sw - pw, i*sw - pw + span) */
        const ptrdiff_t span = sw == 2 ? ((kw - 1) & ~(ptrdiff_t)1) + 16 : kw - 1 + 8;
        vlo = (pw + sw - 1) / sw;
        if (W - span + pw >= 0) vhi = (W - span + pw) / sw; else vhi = -1;
        /* windows inside the row are full ([0, W) lies inside [lo_w, hi_w)): one divisor */
    }
    const double inv = 1.0 / (double)(g->divisor_override > 0 ? g->divisor_override : g->rcount * kw);
    const __m256d vinv = _mm256_set1_pd(inv);
    ptrdiff_t i = w0;
    for (; i < w1 && i < vlo; ++i) rlx_row1_scalar(xr, yr, g, i);
    if (sw == 2)
        for (; i + 8 <= w1 && i <= vhi; i += 8) rlx_row1_s2_block(xr, yr, g, i, vinv);
    else if (sw == 1)
        for (; i + 8 <= w1 && i <= vhi; i += 8) rlx_row1_s1_block(xr, yr, g, i, vinv);
    for (; i < w1; ++i) rlx_row1_scalar(xr, yr, g, i);
}
#endif

static void rlx_row1_base(const float* xr, float* yr, const rlx_row1_geom* g, ptrdiff_t w0, ptrdiff_t w1) {
    for (ptrdiff_t i = w0; i < w1; ++i) rlx_row1_scalar(xr, yr, g, i);
}

/* outputs [w0, w1) of the line yr from the input row xr; the range checks cover the row and the outputs */
static void rlx_pool_row1(const float* x, ptrdiff_t x_len, ptrdiff_t row, float* y, ptrdiff_t y_len, ptrdiff_t line,
                          ptrdiff_t OW, const rlx_row1_geom* g, ptrdiff_t w0, ptrdiff_t w1) {
    RLX_CHECK_RANGE(row, row + g->W, x_len, "pool x row");
    RLX_CHECK_RANGE(line * OW + w0, line * OW + w1, y_len, "pool y");
    (void)x_len; (void)y_len;
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) { rlx_row1_avx2(x + row, y + line * OW, g, w0, w1); return; }
#endif
    rlx_row1_base(x + row, y + line * OW, g, w0, w1);
}

RLX_INLINE void rlx_pool_line_body(const float* restrict x, ptrdiff_t x_len, float* restrict y, ptrdiff_t y_len,
                                   void* restrict scratch, const rlx_pool_geom* g, ptrdiff_t line, ptrdiff_t oh,
                                   ptrdiff_t od, ptrdiff_t plane, int avx2, double* icache, ptrdiff_t* clean) {
    /* line = (plane * OD + od) * OH + oh */
    const ptrdiff_t W = g->W, OW = g->OW, pw = g->pw, rl = g->row_len;
    const ptrdiff_t sd = od * g->sd - g->pd, sh = oh * g->sh - g->ph;
    const ptrdiff_t xb = plane * g->D * g->H * W;
    ptrdiff_t a0, a1, b0, b1;
    (void)avx2;
    (void)icache;
    (void)clean;
    rlx_pool_taps(sd, g->dd, g->kd, 0, g->D, &a0, &a1);
    rlx_pool_taps(sh, g->dh, g->kh, 0, g->H, &b0, &b1);
    float* restrict yr = y + line * OW;
    RLX_CHECK_RANGE(line * OW, (line + 1) * OW, y_len, "pool y");
#if RLX_X86_DISPATCH
    if (avx2 && (g->sw == 1 || g->sw == 2) && (a1 - a0) * (b1 - b0) == 1) {
        /* one input row (1-D pools, or a window whose other rows are all padding): no row buffer */
        const ptrdiff_t off = xb + ((sd + a0 * g->dd) * g->H + sh + b0 * g->dh) * W;
        ptrdiff_t lo_d, hi_d, lo_h, hi_h, c0, c1, e0, e1;
        rlx_row1_geom r1;
        RLX_CHECK_RANGE(off, off + W, x_len, "pool x");
        rlx_pool_count_range(g, &lo_d, &hi_d, &lo_h, &hi_h, &r1.lo_w, &r1.hi_w);
        rlx_pool_taps(sd, g->dd, g->kd, lo_d, hi_d, &c0, &c1);
        rlx_pool_taps(sh, g->dh, g->kh, lo_h, hi_h, &e0, &e1);
        r1.W = W; r1.kw = g->kw; r1.sw = g->sw; r1.pw = pw;
        r1.rcount = (c1 - c0) * (e1 - e0);
        r1.divisor_override = g->divisor_override;
        r1.kind_max = g->kind_max;
        rlx_row1_avx2(x + off, yr, &r1, 0, OW);
        return;
    }
#endif
    if (g->kind_max) {
        float* restrict buf = (float*)scratch;
        float* restrict r = buf + pw;
        int first = 1;
        int nan_free = 0;           /* the line's rows hold no NaN (checked on the AVX2 path only) */
        (void)nan_free;
#if RLX_X86_DISPATCH
        if (avx2 && (a1 - a0) * (b1 - b0) <= RLX_POOL_ROWS) {
            const float* rows[RLX_POOL_ROWS];
            ptrdiff_t nr = 0;
            for (ptrdiff_t a = a0; a < a1; ++a)
                for (ptrdiff_t b = b0; b < b1; ++b) {
                    const ptrdiff_t off = xb + ((sd + a * g->dd) * g->H + sh + b * g->dh) * W;
                    RLX_CHECK_RANGE(off, off + W, x_len, "pool x");
                    rows[nr++] = x + off;
                }
            /* 3-wide windows over at most 3 rows: the maxps-only pass, noting NaNs as it loads (-1) */
            if (g->kw == 3 && pw == 1 && nr >= 1 && nr <= 3) {
                if (g->sw == 1 && OW <= W) {
                    rlx_max_k3s1_any_avx2(yr, rows, nr, W, OW);
                    return;
                }
                if (g->sw == 2) {
                    rlx_max_k3s2_any_avx2(yr, rows, nr, W, OW);
                    return;
                }
            }
            /* NaN-free rows take plain maxps (the same bits); 1-D and 2-D pools, whose line's rows
             * are contiguous */
            if (g->D == 1 && nr > 0) nan_free = rlx_rows_nan_free(x, rows[0] - x, rows[nr - 1] - x + W, clean);
            if (g->kw == 2 && g->sw == 2 && pw == 0 && 2 * OW <= W) {
                rlx_max_k2s2_avx2(yr, rows, nr, OW, nan_free);
                return;
            }
            if (g->kw == 3 && g->sw == 1 && pw == 1 && OW <= W) {
                rlx_max_k3s1_avx2(yr, rows, nr, W, OW, nan_free);
                return;
            }
            if (g->kw == 3 && g->sw == 2 && pw == 1) {
                rlx_max_k3s2_avx2(yr, rows, nr, W, OW, nan_free);
                return;
            }
            rlx_vmax_rows_avx2(r, rows, nr, W, nan_free);
            first = 0;
            a1 = a0;                        /* the row loop below has nothing left to do */
        }
#endif
        for (ptrdiff_t i = 0; i < pw; ++i) buf[i] = -INFINITY;
        for (ptrdiff_t i = pw + W; i < rl; ++i) buf[i] = -INFINITY;
        for (ptrdiff_t a = a0; a < a1; ++a)
            for (ptrdiff_t b = b0; b < b1; ++b) {
                const ptrdiff_t off = xb + ((sd + a * g->dd) * g->H + sh + b * g->dh) * W;
                const float* restrict xr = x + off;
                RLX_CHECK_RANGE(off, off + W, x_len, "pool x");
                if (first) {
                    memcpy(r, xr, (size_t)W * sizeof(float));
                    first = 0;
                    continue;
                }
#if RLX_X86_DISPATCH
                if (avx2) { rlx_vmax_avx2(r, xr, W); continue; }
#endif
                for (ptrdiff_t i = 0; i < W; ++i) {
                    float v = xr[i], c = r[i];
                    r[i] = RLX_TAKE(v, c) ? v : c;
                }
            }
        ptrdiff_t i0 = 0;
#if RLX_X86_DISPATCH
        /* (the row buffer's -inf padding holds no NaN: the rows' verdict holds for it) */
        if (avx2) i0 = g->sw == 2 ? rlx_hmax_s2_avx2(yr, buf, OW, g->kw, nan_free)
                     : g->sw == 1 ? rlx_hmax_s1_avx2(yr, buf, OW, g->kw, nan_free) : 0;
#endif
        rlx_hmax_generic(yr, buf, i0, OW, g->kw, g->sw);
    } else {
        /* row sums in doubles, then the window sums in the same doubles' tail */
        double* restrict buf = (double*)scratch;
        double* restrict r = buf + pw;
        double* restrict acc = buf + rl;
#if RLX_X86_DISPATCH
        if (avx2 && (g->sw == 1 || g->sw == 2) && (a1 - a0) * (b1 - b0) <= RLX_POOL_ROWS) {
            rlx_avg_line_avx2(x, x_len, yr, buf, g, sd, sh, xb, a0, a1, b0, b1, icache);
            return;
        }
#endif
        for (ptrdiff_t i = 0; i < pw; ++i) buf[i] = 0.0;
        for (ptrdiff_t i = pw + W; i < rl; ++i) buf[i] = 0.0;
        int first = 1;
        for (ptrdiff_t a = a0; a < a1; ++a)
            for (ptrdiff_t b = b0; b < b1; ++b) {
                const ptrdiff_t off = xb + ((sd + a * g->dd) * g->H + sh + b * g->dh) * W;
                const float* restrict xr = x + off;
                RLX_CHECK_RANGE(off, off + W, x_len, "pool x");
                if (first) {
                    for (ptrdiff_t i = 0; i < W; ++i) r[i] = (double)xr[i];
                    first = 0;
                } else {
                    for (ptrdiff_t i = 0; i < W; ++i) r[i] += (double)xr[i];
                }
            }
        ptrdiff_t i0 = 0;
#if RLX_X86_DISPATCH
        if (avx2 && g->sw == 2) i0 = rlx_hsum_s2_avx2(acc, buf, OW, g->kw);
#endif
        rlx_hsum_generic(acc, buf, i0, OW, g->kw, g->sw);
        /* y = sum / divisor, as sum * (1 / divisor) in double (the float
         * result differs from the division only by double rounding) */
        if (g->divisor_override > 0) {
            const double inv = 1.0 / (double)g->divisor_override;
            for (ptrdiff_t i = 0; i < OW; ++i) yr[i] = (float)(acc[i] * inv);
            return;
        }
        ptrdiff_t lo_d = 0, hi_d = g->D, lo_h = 0, hi_h = g->H, lo_w = 0, hi_w = W;
        if (g->include_pad) {
            lo_d = -g->pd; hi_d = g->D + g->ped;
            lo_h = -g->ph; hi_h = g->H + g->peh;
            lo_w = -pw; hi_w = W + g->pew;
        }
        rlx_pool_taps(sd, g->dd, g->kd, lo_d, hi_d, &a0, &a1);
        rlx_pool_taps(sh, g->dh, g->kh, lo_h, hi_h, &b0, &b1);
        const ptrdiff_t rows = (a1 - a0) * (b1 - b0), kw = g->kw, sw = g->sw;
        /* windows clipped by [lo_w, hi_w) form a prefix and a suffix of the
         * line; the full windows between them share one divisor */
        ptrdiff_t ilo = 0, ihi = OW;
        while (ilo < OW && ilo * sw - pw < lo_w) ++ilo;
        while (ihi > ilo && (ihi - 1) * sw - pw + kw > hi_w) --ihi;
        const double inv = 1.0 / (double)(rows * kw);
        for (ptrdiff_t i = ilo; i < ihi; ++i) yr[i] = (float)(acc[i] * inv);
        for (int side = 0; side < 2; ++side)
            for (ptrdiff_t i = side ? ihi : 0; i < (side ? OW : ilo); ++i) {
                ptrdiff_t s0 = i * sw - pw, lo = s0 > lo_w ? s0 : lo_w, hi = s0 + kw < hi_w ? s0 + kw : hi_w;
                yr[i] = (float)(acc[i] * (1.0 / (double)(rows * (hi - lo))));
            }
    }
}

/* Lines [l0, l1): the line's (plane, od, oh) stepped along, not divided out per line. */
RLX_INLINE void rlx_pool_lines_body(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len, void* scratch,
                                    const rlx_pool_geom* g, ptrdiff_t l0, ptrdiff_t l1, int avx2) {
    ptrdiff_t oh = l0 % g->OH, od = (l0 / g->OH) % g->OD, plane = l0 / (g->OH * g->OD);
    double icache[2] = {0.0, 0.0};          /* the last divisor and its reciprocal */
    ptrdiff_t clean[2] = {0, 0};            /* a span of x checked NaN-free (max pools, AVX2) */
#if RLX_X86_DISPATCH
    if (avx2 && g->kind_max && g->D == 1 && g->kd == 1 && g->kh == 3 && g->sh == 1 && g->dh == 1 && g->kw == 3
        && g->sw == 1 && g->pw == 1 && g->OW <= g->W) {
        /* 3x3 stride 1, w padding 1 (2-D): the line's input rows straight from (plane, oh), without
         * the general line's set-up; NaNs noted as the rows are loaded (a line that holds one
         * runs again NaN-aware) */
        const ptrdiff_t H = g->H, W = g->W, OW = g->OW, ph = g->ph;
        for (ptrdiff_t l = l0; l < l1; ++l) {
            const ptrdiff_t xb = plane * H * W, h0 = oh - ph;
            const float* rows[3];
            int nr = 0;
            for (ptrdiff_t h = h0 < 0 ? 0 : h0; h < h0 + 3 && h < H; ++h) {
                RLX_CHECK_RANGE(xb + h * W, xb + (h + 1) * W, x_len, "pool x");
                rows[nr++] = x + xb + h * W;
            }
            float* yr = y + l * OW;
            RLX_CHECK_RANGE(l * OW, (l + 1) * OW, y_len, "pool y");
            if (nr == 0) {
                for (ptrdiff_t i = 0; i < OW; ++i) yr[i] = -INFINITY;
            } else if (h0 >= 0 && h0 + 4 <= H && l + 1 < l1 && oh + 1 < g->OH) {
                /* this line and the next, 3 rows each: their shared rows read once */
                const float* rows4[4] = {rows[0], rows[1], rows[2], rows[2] + W};
                RLX_CHECK_RANGE(xb + (h0 + 3) * W, xb + (h0 + 4) * W, x_len, "pool x");
                RLX_CHECK_RANGE((l + 1) * OW, (l + 2) * OW, y_len, "pool y");
                if (rlx_max_k3s1_pair_avx2(yr, yr + OW, rows4, W, OW)) {
                    rlx_max_k3s1_avx2(yr, rows4, 3, W, OW, 0);
                    rlx_max_k3s1_avx2(yr + OW, rows4 + 1, 3, W, OW, 0);
                }
                ++l;
                ++oh;
            } else {
                rlx_max_k3s1_any_avx2(yr, rows, nr, W, OW);
            }
            if (++oh == g->OH) {
                oh = 0;
                ++plane;
            }
        }
        return;
    }
    /* (the 2-D shortcuts below: one plane, D = OD = 1, and a window of one
     * depth tap on it, kd = 1 without depth padding before it -- a 3-D pool
     * over one slice whose depth window reaches into the padding counts the
     * padded taps, or reads only padding, which these do not) */
    if (avx2 && g->D == 1 && g->OD == 1 && g->kd == 1 && g->pd == 0 && g->kh == 3 && g->dh == 1 && g->kw == 3
        && g->sw == 2 && g->pw == 1) {
        /* 3x3 windows, stride 2 along w, w padding 1 (2-D): the line's input rows straight from
         * (plane, oh) and the row count of the divisor from h alone; lines with fewer than two rows
         * in the plane take the general line.  The general line's set-up per line was a third of
         * the time of these lines: N1 C64 112x112 (ResNet's stem pool), 1 thread, max 0.135 ->
         * 0.096 ms; average (with the sums in registers above) 0.25 -> 0.16 */
        const ptrdiff_t H = g->H, W = g->W, OW = g->OW, ph = g->ph, sh = g->sh;
        const ptrdiff_t lo_h = g->include_pad ? -ph : 0, hi_h = g->include_pad ? H + g->peh : H;
        const ptrdiff_t lo_w = g->include_pad ? -1 : 0, hi_w = g->include_pad ? W + g->pew : W;
        rlx_avg3_weights wc;
        wc.rcount = -1;
        for (ptrdiff_t l = l0; l < l1; ++l) {
            const ptrdiff_t xb = plane * H * W, h0 = oh * sh - ph;
            const ptrdiff_t r0 = h0 < 0 ? 0 : h0, r1 = h0 + 3 < H ? h0 + 3 : H;
            const ptrdiff_t c0 = h0 > lo_h ? h0 : lo_h, c1 = h0 + 3 < hi_h ? h0 + 3 : hi_h;
            float* yr = y + l * OW;
            if (r1 - r0 < 2) {
                rlx_pool_line_body(x, x_len, y, y_len, scratch, g, l, oh, 0, plane, avx2, icache, clean);
            } else if (!g->kind_max && sh == 2 && r1 - r0 == 3 && l + 1 < l1 && oh + 1 < g->OH && h0 + 5 <= H) {
                /* this line and the next, 3 rows each (so 3 counted, with or without the padding): their
                 * shared row read once */
                const float* rows[5];
                for (ptrdiff_t k = 0; k < 5; ++k) rows[k] = x + xb + (h0 + k) * W;
                RLX_CHECK_RANGE(xb + h0 * W, xb + (h0 + 5) * W, x_len, "pool x");
                RLX_CHECK_RANGE(l * OW, (l + 2) * OW, y_len, "pool y");
                rlx_avg_k3s2_lines(yr, yr + OW, rows, 3, W, OW, c1 - c0, lo_w, hi_w, g->divisor_override, &wc);
                ++l;
                ++oh;
            } else {
                const float* rows[3];
                const ptrdiff_t nr = r1 - r0;
                for (ptrdiff_t k = 0; k < nr; ++k) rows[k] = x + xb + (r0 + k) * W;
                RLX_CHECK_RANGE(xb + r0 * W, xb + r1 * W, x_len, "pool x");
                RLX_CHECK_RANGE(l * OW, (l + 1) * OW, y_len, "pool y");
                if (g->kind_max)
                    rlx_max_k3s2_any_avx2(yr, rows, nr, W, OW);
                else
                    rlx_avg_k3s2_lines(yr, NULL, rows, nr, W, OW, c1 - c0, lo_w, hi_w, g->divisor_override, &wc);
            }
            if (++oh == g->OH) {
                oh = 0;
                ++plane;
            }
        }
        return;
    }
    if (avx2 && g->D == 1 && g->OD == 1 && g->kd == 1 && g->pd == 0 && g->kh == 2 && g->kw == 2 && g->sh == 2
        && g->sw == 2 && g->dh == 1 && g->ph == 0 && g->pw == 0 && 2 * g->OH <= g->H && 2 * g->OW <= g->W) {
        /* 2x2 stride 2 (2-D), every window inside the plane: rows 2 oh and 2 oh + 1 straight from
         * (plane, oh), and the divisor is 4 (or the override) on every line.  The general line's
         * set-up per line was most of the time of these short lines: N8 C64 56x56, 1 thread,
         * average 0.51 -> 0.30 ms, max 0.43 -> 0.24 */
        const ptrdiff_t H = g->H, W = g->W, OW = g->OW;
        const double inv = 1.0 / (double)(g->divisor_override > 0 ? g->divisor_override : 4);
        for (ptrdiff_t l = l0; l < l1; ++l) {
            const ptrdiff_t off = plane * H * W + 2 * oh * W;
            const float* rows[2] = {x + off, x + off + W};
            float* yr = y + l * OW;
            RLX_CHECK_RANGE(off, off + 2 * W, x_len, "pool x");
            RLX_CHECK_RANGE(l * OW, (l + 1) * OW, y_len, "pool y");
            if (g->kind_max)
                rlx_max_k2s2_avx2(yr, rows, 2, OW, rlx_rows_nan_free(x, off, off + 2 * W, clean));
            else
                rlx_avg_k2s2_avx2(yr, rows, 2, OW, inv);
            if (++oh == g->OH) {
                oh = 0;
                ++plane;
            }
        }
        return;
    }
#endif
    for (ptrdiff_t l = l0; l < l1; ++l) {
        rlx_pool_line_body(x, x_len, y, y_len, scratch, g, l, oh, od, plane, avx2, icache, clean);
        if (++oh == g->OH) {
            oh = 0;
            if (++od == g->OD) {
                od = 0;
                ++plane;
            }
        }
    }
}
static void rlx_pool_lines_base(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len, void* scratch,
                                const rlx_pool_geom* g, ptrdiff_t l0, ptrdiff_t l1) {
    rlx_pool_lines_body(x, x_len, y, y_len, scratch, g, l0, l1, 0);
}
RLX_TARGET_AVX2 static void rlx_pool_lines_avx2(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len,
                                                void* scratch, const rlx_pool_geom* g, ptrdiff_t l0, ptrdiff_t l1) {
    rlx_pool_lines_body(x, x_len, y, y_len, scratch, g, l0, l1, 1);
}
/* Lines [l0, l1) with this thread's buffer; scratch_len (bytes) is checked in debug builds. */
static void rlx_pool_lines(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len, void* scratch,
                           ptrdiff_t scratch_doubles, const rlx_pool_geom* g, ptrdiff_t l0, ptrdiff_t l1) {
    RLX_CHECK_RANGE(0, 2 * g->row_len, scratch_doubles, "pool row buffer");
    (void)scratch_doubles;
    if (rlx_simd_level())
        rlx_pool_lines_avx2(x, x_len, y, y_len, scratch, g, l0, l1);
    else
        rlx_pool_lines_base(x, x_len, y, y_len, scratch, g, l0, l1);
}

/* ------------------------------------------------------------------------- */
/* Max pool backward (1-D and 2-D), one (image, channel) plane per call.     */
/*                                                                           */
/* Each output's winner is found with the forward's rule in window order:    */
/* start at -inf on the first in-bounds tap, take v when v > best or v is     */
/* NaN (so the first maximum, or the last NaN, or the first in-bounds tap of  */
/* an all -inf window); padded taps are never read.  Then dy is added at the  */
/* winner.  Outputs whose window lies inside the row along w run 8 at a time  */
/* in the AVX2 variant (stride 1 or 2, w dilation 1; a blend on the values   */
/* and on the tap offsets); the rest run the scalar loop.  Offsets are int32  */
/* (planes below 2^31 elements, checked at bind).                            */
/* ------------------------------------------------------------------------- */
typedef struct {
    ptrdiff_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
} rlx_mpb_geom;

RLX_INLINE ptrdiff_t rlx_mpb_scalar_winner(const float* restrict xp, const rlx_mpb_geom* g, ptrdiff_t hs,
                                           ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t ow) {
    ptrdiff_t ws = ow * g->sw - g->pw, j0, j1;
    rlx_pool_taps(ws, g->dw, g->kw, 0, g->W, &j0, &j1);
    if (j0 >= j1) return -1;
    float best = -INFINITY;
    ptrdiff_t bi = (hs + a0 * g->dh) * g->W + ws + j0 * g->dw;
    for (ptrdiff_t a = a0; a < a1; ++a) {
        const ptrdiff_t row = (hs + a * g->dh) * g->W + ws;
        for (ptrdiff_t j = j0; j < j1; ++j) {
            const ptrdiff_t i = row + j * g->dw;
            /* bit-mask selects: the winner is data-dependent, and a branch
             * (what gcc makes of a ternary here) mispredicts */
            const float v = xp[i];
            const int take = RLX_TAKE(v, best);
            const uint32_t m32 = (uint32_t)0 - (uint32_t)take;
            uint32_t vb, cb;
            memcpy(&vb, &v, 4);
            memcpy(&cb, &best, 4);
            cb = (vb & m32) | (cb & ~m32);
            memcpy(&best, &cb, 4);
            bi = (ptrdiff_t)(((size_t)i & (size_t)(ptrdiff_t)(int32_t)m32) | ((size_t)bi & ~(size_t)(ptrdiff_t)(int32_t)m32));
        }
    }
    return bi;
}

/* Winners of the interior outputs [o0, o1) (windows inside the row along w),
 * at most RLX_MPB_CHUNK of them, tap-major so that the loop over outputs has
 * no control flow and vectorises (selects on values and int32 offsets). */
#define RLX_MPB_CHUNK 64
RLX_INLINE void rlx_mpb_chunk(const float* restrict xp, const rlx_mpb_geom* g, ptrdiff_t hs, ptrdiff_t a0,
                              ptrdiff_t a1, ptrdiff_t o0, ptrdiff_t o1, int32_t* restrict bi) {
    float best[RLX_MPB_CHUNK];
    const ptrdiff_t n = o1 - o0, sw = g->sw, ws0 = o0 * sw - g->pw;
    const int32_t first = (int32_t)((hs + a0 * g->dh) * g->W + ws0);
    for (ptrdiff_t i = 0; i < n; ++i) {
        best[i] = -INFINITY;
        bi[i] = first + (int32_t)(i * sw);
    }
    for (ptrdiff_t a = a0; a < a1; ++a)
        for (ptrdiff_t j = 0; j < g->kw; ++j) {
            const int32_t off = (int32_t)((hs + a * g->dh) * g->W + ws0 + j * g->dw);
            const float* restrict r = xp + off;
            if (sw == 2) {
                for (ptrdiff_t i = 0; i < n; ++i) {
                    const float v = r[2 * i], c = best[i];
                    const int take = RLX_TAKE(v, c);
                    best[i] = take ? v : c;
                    bi[i] = take ? off + (int32_t)(2 * i) : bi[i];
                }
            } else {
                for (ptrdiff_t i = 0; i < n; ++i) {
                    const float v = r[i * sw], c = best[i];
                    const int take = RLX_TAKE(v, c);
                    best[i] = take ? v : c;
                    bi[i] = take ? off + (int32_t)(i * sw) : bi[i];
                }
            }
        }
}

#if RLX_X86_DISPATCH
/* Winners of outputs ow..ow+7 whose windows are inside the row (w dilation 1,
 * stride 1 or 2), as plane offsets. */
RLX_TARGET_AVX2 static inline void rlx_mpb_block8_avx2(const float* xp, const rlx_mpb_geom* g, ptrdiff_t hs,
                                                       ptrdiff_t a0, ptrdiff_t a1, ptrdiff_t ow, int32_t* out) {
    const ptrdiff_t sw = g->sw, ws = ow * sw - g->pw;
    const __m256i lane = sw == 2 ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14) : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 best = _mm256_set1_ps(-INFINITY);
    __m256i bi = _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)((hs + a0 * g->dh) * g->W + ws)));
    for (ptrdiff_t a = a0; a < a1; ++a) {
        const ptrdiff_t row = (hs + a * g->dh) * g->W + ws;
        const float* r = xp + row;
        for (ptrdiff_t j = 0; j < g->kw; ++j) {
            __m256 v, e, o;
            if (sw == 2) {
                rlx_deint8(r + j - (j & 1), &e, &o);
                v = (j & 1) ? o : e;
            } else {
                v = _mm256_loadu_ps(r + j);
            }
            __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            best = _mm256_blendv_ps(best, v, take);
            __m256i ti = _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)(row + j)));
            bi = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi), _mm256_castsi256_ps(ti), take));
        }
    }
    _mm256_storeu_si256((__m256i*)out, bi);
}
#endif

RLX_INLINE void rlx_mpb_plane_body(const float* restrict x, ptrdiff_t x_len, const float* restrict dy,
                                   ptrdiff_t dy_len, float* restrict dx, const rlx_mpb_geom* g, ptrdiff_t plane,
                                   int avx2) {
    const ptrdiff_t in_sz = g->H * g->W, out_sz = g->OH * g->OW;
    const float* restrict xp = x + plane * in_sz;
    const float* restrict dyp = dy + plane * out_sz;
    float* restrict dxp = dx + plane * in_sz;
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, x_len, "max pool backward x/dx");
    RLX_CHECK_RANGE(plane * out_sz, (plane + 1) * out_sz, dy_len, "max pool backward dy");
    memset(dxp, 0, (size_t)in_sz * sizeof(float));
    /* outputs [ilo, ihi) have windows inside [0, W) along w */
    ptrdiff_t ilo = 0, ihi = g->OW;
    while (ilo < g->OW && ilo * g->sw - g->pw < 0) ++ilo;
    while (ihi > ilo && (ihi - 1) * g->sw - g->pw + (g->kw - 1) * g->dw >= g->W) --ihi;
    (void)avx2;
    for (ptrdiff_t oh = 0; oh < g->OH; ++oh) {
        const ptrdiff_t hs = oh * g->sh - g->ph;
        ptrdiff_t a0, a1;
        rlx_pool_taps(hs, g->dh, g->kh, 0, g->H, &a0, &a1);
        if (a0 >= a1) continue;                  /* window entirely in padding: no gradient */
        const float* restrict dyr = dyp + oh * g->OW;
        ptrdiff_t ow = 0;
        for (; ow < ilo; ++ow) {
            const ptrdiff_t i = rlx_mpb_scalar_winner(xp, g, hs, a0, a1, ow);
            if (i >= 0) dxp[i] += dyr[ow];
        }
#if RLX_X86_DISPATCH
        if (avx2 && g->dw == 1 && (g->sw == 1 || g->sw == 2)) {
            /* a block starting at ow loads up to x[ws + reach] of its rows
             * (stride 2: 16-float loads whose last odd lane may be unused);
             * blocks stay inside the row */
            const ptrdiff_t reach = g->sw == 2 ? (g->kw - 1) - ((g->kw - 1) & 1) + 15 : g->kw - 1 + 7;
            ptrdiff_t vhi = ihi;
            while (vhi - 8 >= ilo && (vhi - 8) * g->sw - g->pw + reach >= g->W) --vhi;
            int32_t win[8];
            RLX_CHECK_RANGE((hs + a0 * g->dh) * g->W + ilo * g->sw - g->pw,
                            vhi - 8 >= ilo ? (hs + (a1 - 1) * g->dh) * g->W + (vhi - 8) * g->sw - g->pw + reach + 1 : 0,
                            in_sz, "max pool backward block loads");
            for (; ow + 8 <= vhi; ow += 8) {
                rlx_mpb_block8_avx2(xp, g, hs, a0, a1, ow, win);
                for (int l = 0; l < 8; ++l) {
                    RLX_CHECK_RANGE(win[l], win[l] + 1, in_sz, "max pool backward winner");
                    dxp[win[l]] += dyr[ow + l];
                }
            }
            if (ow < vhi && vhi - ilo >= 8) {
                /* the last outputs before vhi: the block of 8 ending there,
                 * scattering only the lanes not done above */
                const ptrdiff_t o0 = vhi - 8;
                rlx_mpb_block8_avx2(xp, g, hs, a0, a1, o0, win);
                for (ptrdiff_t l = ow - o0; l < 8; ++l) {
                    RLX_CHECK_RANGE(win[l], win[l] + 1, in_sz, "max pool backward winner");
                    dxp[win[l]] += dyr[o0 + l];
                }
                ow = vhi;
            }
        }
#endif
        while (ow < ihi) {
            int32_t win[RLX_MPB_CHUNK];
            const ptrdiff_t o1 = ihi - ow > RLX_MPB_CHUNK ? ow + RLX_MPB_CHUNK : ihi;
            rlx_mpb_chunk(xp, g, hs, a0, a1, ow, o1, win);
            for (ptrdiff_t l = 0; l < o1 - ow; ++l) {
                RLX_CHECK_RANGE(win[l], win[l] + 1, in_sz, "max pool backward winner");
                dxp[win[l]] += dyr[ow + l];
            }
            ow = o1;
        }
        for (; ow < g->OW; ++ow) {
            const ptrdiff_t i = rlx_mpb_scalar_winner(xp, g, hs, a0, a1, ow);
            if (i >= 0) dxp[i] += dyr[ow];
        }
    }
}

static void rlx_mpb_plane_base(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                               const rlx_mpb_geom* g, ptrdiff_t plane) {
    rlx_mpb_plane_body(x, x_len, dy, dy_len, dx, g, plane, 0);
}
RLX_TARGET_AVX2 static void rlx_mpb_plane_avx2(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len,
                                               float* dx, const rlx_mpb_geom* g, ptrdiff_t plane) {
    rlx_mpb_plane_body(x, x_len, dy, dy_len, dx, g, plane, 1);
}
static void rlx_mpb_plane(const float* x, ptrdiff_t x_len, const float* dy, ptrdiff_t dy_len, float* dx,
                          const rlx_mpb_geom* g, ptrdiff_t plane) {
    if (rlx_simd_level()) rlx_mpb_plane_avx2(x, x_len, dy, dy_len, dx, g, plane);
    else rlx_mpb_plane_base(x, x_len, dy, dy_len, dx, g, plane);
}

/* ------------------------------------------------------------------------- */
/* Avg pool backward (1-D and 2-D), one (image, channel) plane per call.     */
/*                                                                           */
/* Per output row: g[ow] = dy / divisor; the row's windows spread g over a    */
/* padded line buffer (tap-major: buf[ow*sw + j*dw] += g[ow], unit or fixed   */
/* stride, vectorisable), then every in-bounds input row of the window adds   */
/* the buffer's in-row part (contiguous).  Padded taps land in the buffer's   */
/* margins and are dropped.  Divisors as in the forward: divisor_override,    */
/* else (count_include_pad) the taps inside [-pb, size + pe) per axis, else   */
/* the in-bounds taps.  The buffer lives on the stack: RLX_APB_MAX entries.   */
/* ------------------------------------------------------------------------- */
#define RLX_APB_MAX 4096
typedef struct {
    ptrdiff_t H, W, OH, OW, kh, kw, sh, sw, ph, pw, peh, pew, dh, dw;
    ptrdiff_t row_len;            /* (OW-1)*sw + (kw-1)*dw + 1, at least pw + W */
    int include_pad;
    ptrdiff_t divisor_override;
} rlx_apb_geom;

static inline ptrdiff_t rlx_apb_row_len(ptrdiff_t W, ptrdiff_t OW, ptrdiff_t kw, ptrdiff_t sw, ptrdiff_t pw,
                                        ptrdiff_t dw) {
    ptrdiff_t a = (OW - 1) * sw + (kw - 1) * dw + 1, b = pw + W;
    return a > b ? a : b;
}

RLX_INLINE void rlx_apb_plane_body(const float* restrict dy, ptrdiff_t dy_len, float* restrict dx,
                                   ptrdiff_t dx_len, const rlx_apb_geom* g, ptrdiff_t plane) {
    float buf[RLX_APB_MAX];
    float gv[RLX_APB_MAX];
    int32_t cols[RLX_APB_MAX];
    const ptrdiff_t W = g->W, OW = g->OW, sw = g->sw, dw = g->dw, pw = g->pw, in_sz = g->H * W;
    const float* restrict dyp = dy + plane * g->OH * OW;
    float* restrict dxp = dx + plane * in_sz;
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, dx_len, "avg pool backward dx");
    RLX_CHECK_RANGE(plane * g->OH * OW, (plane + 1) * g->OH * OW, dy_len, "avg pool backward dy");
    memset(dxp, 0, (size_t)in_sz * sizeof(float));
    const ptrdiff_t lo_w = g->include_pad ? -pw : 0, hi_w = g->include_pad ? W + g->pew : W;
    /* the divisor is rows(oh) * cols[ow] (or divisor_override * 1) */
    for (ptrdiff_t ow = 0; ow < OW; ++ow) {
        ptrdiff_t j0, j1;
        rlx_pool_taps(ow * sw - pw, dw, g->kw, lo_w, hi_w, &j0, &j1);
        cols[ow] = g->divisor_override > 0 ? 1 : (int32_t)(j1 - j0);
    }
    for (ptrdiff_t oh = 0; oh < g->OH; ++oh) {
        const ptrdiff_t hs = oh * g->sh - g->ph;
        ptrdiff_t a0, a1, pa0, pa1;
        rlx_pool_taps(hs, g->dh, g->kh, 0, g->H, &a0, &a1);
        if (a0 >= a1) continue;
        if (g->include_pad) rlx_pool_taps(hs, g->dh, g->kh, -g->ph, g->H + g->peh, &pa0, &pa1);
        else { pa0 = a0; pa1 = a1; }
        const float* restrict dyr = dyp + oh * OW;
        const int32_t rows = g->divisor_override > 0 ? (int32_t)g->divisor_override : (int32_t)(pa1 - pa0);
        for (ptrdiff_t ow = 0; ow < OW; ++ow) gv[ow] = dyr[ow] / (float)(rows * cols[ow]);
        for (ptrdiff_t i = 0; i < g->row_len; ++i) buf[i] = 0.0f;
        for (ptrdiff_t j = 0; j < g->kw; ++j) {
            float* restrict b = buf + j * dw;
            if (sw == 1)
                for (ptrdiff_t ow = 0; ow < OW; ++ow) b[ow] += gv[ow];
            else if (sw == 2)
                for (ptrdiff_t ow = 0; ow < OW; ++ow) b[2 * ow] += gv[ow];
            else
                for (ptrdiff_t ow = 0; ow < OW; ++ow) b[ow * sw] += gv[ow];
        }
        for (ptrdiff_t a = a0; a < a1; ++a) {
            float* restrict dr = dxp + (hs + a * g->dh) * W;
            const float* restrict br = buf + pw;
            for (ptrdiff_t i = 0; i < W; ++i) dr[i] += br[i];
        }
    }
}

static void rlx_apb_plane_base(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                               const rlx_apb_geom* g, ptrdiff_t plane) {
    rlx_apb_plane_body(dy, dy_len, dx, dx_len, g, plane);
}
RLX_TARGET_AVX2 static void rlx_apb_plane_avx2(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len,
                                               const rlx_apb_geom* g, ptrdiff_t plane) {
    rlx_apb_plane_body(dy, dy_len, dx, dx_len, g, plane);
}
static void rlx_apb_plane(const float* dy, ptrdiff_t dy_len, float* dx, ptrdiff_t dx_len, const rlx_apb_geom* g,
                          ptrdiff_t plane) {
    if (rlx_simd_level()) rlx_apb_plane_avx2(dy, dy_len, dx, dx_len, g, plane);
    else rlx_apb_plane_base(dy, dy_len, dx, dx_len, g, plane);
}

/* ------------------------------------------------------------------------- */
/* Max pool backward from the forward's indices (any rank), one (image,      */
/* channel) plane per call: dx = 0, then dx[ind[o] - base] += dy[o] in output */
/* order -- the same additions in the same order as rlx_mpb_plane, without    */
/* reading x.  base is 0 for indices within the plane (PyTorch) and the       */
/* plane's offset in the tensor for indices over [N, C, *spatial] (ONNX).     */
/* The indices come from the pool thunk of the same plan, so each lies in the */
/* plane (checked in debug builds).  One variant: the scatter has no SIMD    */
/* form without conflict detection (windows may overlap), and the zeroing is */
/* libc's memset.                                                            */
/* ------------------------------------------------------------------------- */
static void rlx_mpbi_plane(const float* restrict dy, const int64_t* restrict ind, ptrdiff_t dy_len,
                                    float* restrict dx, ptrdiff_t dx_len, ptrdiff_t in_sz, ptrdiff_t out_sz,
                                    int flat, ptrdiff_t plane) {
    const float* restrict dyp = dy + plane * out_sz;
    const int64_t* restrict ip = ind + plane * out_sz;
    float* restrict dxp = dx + plane * in_sz;
    const int64_t base = flat ? (int64_t)(plane * in_sz) : 0;
    RLX_CHECK_RANGE(plane * in_sz, (plane + 1) * in_sz, dx_len, "max pool backward dx");
    RLX_CHECK_RANGE(plane * out_sz, (plane + 1) * out_sz, dy_len, "max pool backward dy/indices");
    (void)dx_len;
    (void)dy_len;
    memset(dxp, 0, (size_t)in_sz * sizeof(float));
    for (ptrdiff_t o = 0; o < out_sz; ++o) {
        const ptrdiff_t i = (ptrdiff_t)(ip[o] - base);
        RLX_CHECK_RANGE(i, i + 1, in_sz, "max pool backward index");
        dxp[i] += dyp[o];
    }
}

/* ------------------------------------------------------------------------- */
/* Max pool with indices (any rank), outputs [w0, w1) of one output line      */
/* (plane, od, oh).                                                          */
/*                                                                           */
/* The line's in-bounds (d, h) taps give up to RLX_PWI_MAX_ROWS input rows,   */
/* visited in window order, each with its kw taps along w: the forward's rule */
/* (start at -inf on the first in-bounds tap, take v when v > best or v is    */
/* NaN) gives the first maximum in window order, or the last NaN, or the      */
/* first in-bounds tap of an all -inf window -- PyTorch's choice.  Outputs    */
/* whose window lies inside the row along w run 8 at a time in the AVX2       */
/* variant (w dilation 1, stride 1 or 2: blends on the values and on int32    */
/* plane offsets), else tap-major in chunks the compiler vectorises; border   */
/* outputs run a scalar loop.  Offsets are int32 (planes below 2^31 elements, */
/* checked at bind); indices are stored as int64, plus the plane's offset in  */
/* the tensor when `flat` (ONNX layout).                                     */
/* ------------------------------------------------------------------------- */
#define RLX_PWI_MAX_ROWS 256
typedef struct {
    ptrdiff_t D, H, W, OD, OH, OW;
    ptrdiff_t kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw;
    int flat;
} rlx_pwi_geom;

RLX_INLINE void rlx_pwi_scalar(const float* restrict xp, const int32_t* restrict rows, ptrdiff_t nr,
                               const rlx_pwi_geom* g, ptrdiff_t ow, float* best_out, int32_t* bi_out) {
    const ptrdiff_t ws = ow * g->sw - g->pw;
    ptrdiff_t j0, j1;
    rlx_pool_taps(ws, g->dw, g->kw, 0, g->W, &j0, &j1);
    float best = -INFINITY;
    int32_t bi = (int32_t)(rows[0] + ws + j0 * g->dw);
    for (ptrdiff_t r = 0; r < nr; ++r)
        for (ptrdiff_t j = j0; j < j1; ++j) {
            /* bit-mask selects: a ternary here becomes a mispredicting branch */
            const int32_t i = (int32_t)(rows[r] + ws + j * g->dw);
            const float v = xp[i];
            const uint32_t m = (uint32_t)0 - (uint32_t)RLX_TAKE(v, best);
            uint32_t vb, cb;
            memcpy(&vb, &v, 4);
            memcpy(&cb, &best, 4);
            cb = (vb & m) | (cb & ~m);
            memcpy(&best, &cb, 4);
            bi = (int32_t)(((uint32_t)i & m) | ((uint32_t)bi & ~m));
        }
    *best_out = best;
    *bi_out = bi;
}

#define RLX_PWI_CHUNK 64
/* Interior outputs [o0, o1), at most RLX_PWI_CHUNK: tap-major, so the loop
 * over outputs has no control flow and vectorises. */
RLX_INLINE void rlx_pwi_chunk(const float* restrict xp, const int32_t* restrict rows, ptrdiff_t nr,
                              const rlx_pwi_geom* g, ptrdiff_t o0, ptrdiff_t o1, float* restrict best,
                              int32_t* restrict bi) {
    /* selects on the bits (values as uint32), which gcc keeps branch-free */
    uint32_t bb[RLX_PWI_CHUNK];
    const ptrdiff_t n = o1 - o0, sw = g->sw, ws0 = o0 * sw - g->pw;
    const float ninf = -INFINITY;
    uint32_t ninf_b;
    memcpy(&ninf_b, &ninf, 4);
    for (ptrdiff_t i = 0; i < n; ++i) {
        bb[i] = ninf_b;
        bi[i] = (int32_t)(rows[0] + ws0 + i * sw);
    }
    for (ptrdiff_t r = 0; r < nr; ++r)
        for (ptrdiff_t j = 0; j < g->kw; ++j) {
            const int32_t off = (int32_t)(rows[r] + ws0 + j * g->dw);
            const float* restrict xr = xp + off;
            for (ptrdiff_t i = 0; i < n; ++i) {
                const float v = xr[i * sw];
                float c;
                uint32_t vb;
                memcpy(&c, &bb[i], 4);
                memcpy(&vb, &v, 4);
                const uint32_t m = (uint32_t)0 - (uint32_t)RLX_TAKE(v, c);
                bb[i] = (vb & m) | (bb[i] & ~m);
                bi[i] = (int32_t)(((uint32_t)(off + (int32_t)(i * sw)) & m) | ((uint32_t)bi[i] & ~m));
            }
        }
    memcpy(best, bb, (size_t)n * sizeof(float));
}

#if RLX_X86_DISPATCH
/* One tap update of a block: take v where v > best or v is NaN. */
#define RLX_PWI_TAKE8(k, v, tap)                                                                           \
    do {                                                                                                   \
        __m256 take_ = _mm256_or_ps(_mm256_cmp_ps((v), best[k], _CMP_GT_OQ), _mm256_cmp_ps((v), (v), _CMP_UNORD_Q)); \
        best[k] = _mm256_blendv_ps(best[k], (v), take_);                                                   \
        bi[k] = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(bi[k]),                           \
                                                     _mm256_castsi256_ps(_mm256_add_epi32(lane, (tap))), take_)); \
    } while (0)

/* Outputs ow .. ow + 8*nb - 1 (windows inside the row, w dilation 1, stride 1
 * or 2), nb independent blocks of 8 so that the compare -> blend chains of
 * the blocks overlap: values to y, indices (int64, + base) to ind. */
RLX_TARGET_AVX2 static inline __attribute__((always_inline)) void
rlx_pwi_blocks_body(const float* xp, const int32_t* rows, ptrdiff_t nr, const rlx_pwi_geom* g, ptrdiff_t ow,
                    const int nb, float* y, int64_t* ind, int64_t base) {
    const ptrdiff_t sw = g->sw, ws = ow * sw - g->pw, kw = g->kw;
    const __m256i lane = sw == 2 ? _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)
                                 : _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 best[4];
    __m256i bi[4];
    for (int k = 0; k < nb; ++k) {
        best[k] = _mm256_set1_ps(-INFINITY);
        bi[k] = _mm256_add_epi32(lane, _mm256_set1_epi32((int32_t)(rows[0] + ws + 8 * sw * k)));
    }
    for (ptrdiff_t r = 0; r < nr; ++r) {
        const ptrdiff_t row = rows[r] + ws;
        const float* xr = xp + row;
        if (sw == 2) {
            for (ptrdiff_t j = 0; j < kw; j += 2) {
                for (int k = 0; k < nb; ++k) {
                    __m256 e, o;
                    const __m256i tap = _mm256_set1_epi32((int32_t)(row + j + 16 * k));
                    rlx_deint8(xr + j + 16 * k, &e, &o);
                    RLX_PWI_TAKE8(k, e, tap);
                    if (j + 1 < kw) RLX_PWI_TAKE8(k, o, _mm256_add_epi32(tap, _mm256_set1_epi32(1)));
                }
            }
        } else {
            for (ptrdiff_t j = 0; j < kw; ++j)
                for (int k = 0; k < nb; ++k) {
                    const __m256 v = _mm256_loadu_ps(xr + j + 8 * k);
                    RLX_PWI_TAKE8(k, v, _mm256_set1_epi32((int32_t)(row + j + 8 * k)));
                }
        }
    }
    const __m256i b64 = _mm256_set1_epi64x(base);
    for (int k = 0; k < nb; ++k) {
        _mm256_storeu_ps(y + 8 * k, best[k]);
        _mm256_storeu_si256((__m256i*)(ind + 8 * k),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(bi[k]))));
        _mm256_storeu_si256((__m256i*)(ind + 8 * k + 4),
                            _mm256_add_epi64(b64, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(bi[k], 1))));
    }
}
RLX_TARGET_AVX2 static void rlx_pwi_blocks_avx2(const float* xp, const int32_t* rows, ptrdiff_t nr,
                                                const rlx_pwi_geom* g, ptrdiff_t ow, int nb, float* y, int64_t* ind,
                                                int64_t base) {
    if (nb == 4) rlx_pwi_blocks_body(xp, rows, nr, g, ow, 4, y, ind, base);
    else rlx_pwi_blocks_body(xp, rows, nr, g, ow, 1, y, ind, base);
}
#endif

/* The plane offsets of the input rows a window line starting at (sd, sh)
 * reads, in (kd, kh) order, into rows[]; returns their count. */
RLX_INLINE ptrdiff_t rlx_pwi_window_rows(const rlx_pwi_geom* g, ptrdiff_t sd, ptrdiff_t sh, int32_t* rows) {
    ptrdiff_t a0, a1, b0, b1, nr = 0;
    rlx_pool_taps(sd, g->dd, g->kd, 0, g->D, &a0, &a1);
    rlx_pool_taps(sh, g->dh, g->kh, 0, g->H, &b0, &b1);
    for (ptrdiff_t a = a0; a < a1; ++a)
        for (ptrdiff_t b = b0; b < b1; ++b)
            rows[nr++] = (int32_t)(((sd + a * g->dd) * g->H + sh + b * g->dh) * g->W);
    return nr;
}

RLX_INLINE void rlx_pwi_line_body(const float* restrict x, ptrdiff_t x_len, float* restrict y,
                                  int64_t* restrict ind, ptrdiff_t y_len, const rlx_pwi_geom* g, ptrdiff_t line,
                                  ptrdiff_t w0, ptrdiff_t w1, int avx2) {
    const ptrdiff_t W = g->W, OW = g->OW, in_vol = g->D * g->H * W;
    const ptrdiff_t oh = line % g->OH, od = (line / g->OH) % g->OD, plane = line / (g->OH * g->OD);
    const ptrdiff_t sd = od * g->sd - g->pd, sh = oh * g->sh - g->ph;
    const float* restrict xp = x + plane * in_vol;
    float* restrict yr = y + line * OW;
    int64_t* restrict ir = ind + line * OW;
    const int64_t base = g->flat ? (int64_t)(plane * in_vol) : 0;
    int32_t rows[RLX_PWI_MAX_ROWS];
    ptrdiff_t nr;
    RLX_CHECK_RANGE(plane * in_vol, (plane + 1) * in_vol, x_len, "max pool x");
    RLX_CHECK_RANGE(line * OW + w0, line * OW + w1, y_len, "max pool y/indices");
    (void)x_len;
    (void)y_len;
    nr = rlx_pwi_window_rows(g, sd, sh, rows);
    /* outputs [ilo, ihi) have windows inside [0, W) along w */
    ptrdiff_t ilo = g->pw > 0 ? (g->pw + g->sw - 1) / g->sw : 0;
    const ptrdiff_t last = W - 1 - (g->kw - 1) * g->dw + g->pw;     /* ow * sw <= last */
    ptrdiff_t ihi = last >= 0 ? last / g->sw + 1 : 0;
    if (ihi > w1) ihi = w1;
    if (ilo < w0) ilo = w0;
    if (ilo > ihi) ilo = ihi;
    ptrdiff_t ow = w0;
    for (; ow < ilo; ++ow) {
        float v;
        int32_t i;
        rlx_pwi_scalar(xp, rows, nr, g, ow, &v, &i);
        yr[ow] = v;
        ir[ow] = base + i;
    }
#if RLX_X86_DISPATCH
    if (avx2 && g->dw == 1 && (g->sw == 1 || g->sw == 2) && ihi - ilo >= 8) {
        /* a block starting at ow loads x[ws .. ws + reach] of its rows
         * (stride 2: 16-float loads whose last odd lane may be unused);
         * blocks stay inside the row */
        const ptrdiff_t reach = g->sw == 2 ? (g->kw - 1) - ((g->kw - 1) & 1) + 15 : g->kw - 1 + 7;
        ptrdiff_t vhi = ihi;
        while (vhi - 8 >= ilo && (vhi - 8) * g->sw - g->pw + reach >= W) --vhi;
        if (vhi - ilo >= 8) {
            RLX_CHECK_RANGE(rows[0] + ilo * g->sw - g->pw, rows[nr - 1] + (vhi - 8) * g->sw - g->pw + reach + 1,
                            in_vol, "max pool block loads");
            for (; ow + 32 <= vhi; ow += 32)
                rlx_pwi_blocks_avx2(xp, rows, nr, g, ow, 4, yr + ow, ir + ow, base);
            for (; ow + 8 <= vhi; ow += 8) rlx_pwi_blocks_avx2(xp, rows, nr, g, ow, 1, yr + ow, ir + ow, base);
            if (ow < vhi) {         /* the block of 8 ending at vhi rewrites a few outputs */
                rlx_pwi_blocks_avx2(xp, rows, nr, g, vhi - 8, 1, yr + vhi - 8, ir + vhi - 8, base);
                ow = vhi;
            }
        }
    }
#endif
    while (ow < ihi && (!avx2 || ihi - ow >= 8)) {
        float best[RLX_PWI_CHUNK];
        int32_t bi[RLX_PWI_CHUNK];
        const ptrdiff_t o1 = ihi - ow > RLX_PWI_CHUNK ? ow + RLX_PWI_CHUNK : ihi;
        rlx_pwi_chunk(xp, rows, nr, g, ow, o1, best, bi);
        for (ptrdiff_t l = 0; l < o1 - ow; ++l) {
            yr[ow + l] = best[l];
            ir[ow + l] = base + bi[l];
        }
        ow = o1;
    }
    for (; ow < w1; ++ow) {
        float v;
        int32_t i;
        rlx_pwi_scalar(xp, rows, nr, g, ow, &v, &i);
        yr[ow] = v;
        ir[ow] = base + i;
    }
}

static void rlx_pwi_line_base(const float* x, ptrdiff_t x_len, float* y, int64_t* ind, ptrdiff_t y_len,
                              const rlx_pwi_geom* g, ptrdiff_t line, ptrdiff_t w0, ptrdiff_t w1) {
    rlx_pwi_line_body(x, x_len, y, ind, y_len, g, line, w0, w1, 0);
}
RLX_TARGET_AVX2 static void rlx_pwi_line_avx2(const float* x, ptrdiff_t x_len, float* y, int64_t* ind,
                                              ptrdiff_t y_len, const rlx_pwi_geom* g, ptrdiff_t line, ptrdiff_t w0,
                                              ptrdiff_t w1) {
    rlx_pwi_line_body(x, x_len, y, ind, y_len, g, line, w0, w1, 1);
}
static void rlx_pwi_line(const float* x, ptrdiff_t x_len, float* y, int64_t* ind, ptrdiff_t y_len,
                         const rlx_pwi_geom* g, ptrdiff_t line, ptrdiff_t w0, ptrdiff_t w1) {
    if (rlx_simd_level()) rlx_pwi_line_avx2(x, x_len, y, ind, y_len, g, line, w0, w1);
    else rlx_pwi_line_base(x, x_len, y, ind, y_len, g, line, w0, w1);
}

#endif
