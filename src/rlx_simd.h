/* Hot loops of the conv2d kernels, compiled twice: once for the portable
 * baseline and once with AVX2+FMA, chosen at run time by CPUID.  The bodies
 * are plain C that the compiler auto-vectorises; the trick is that an
 * always-inline body inlined into a target("avx2,fma") wrapper is compiled for
 * that target, so wheels stay portable (no -march) and still use AVX2.
 *
 * Debug builds (RLX_DEBUG_CHECKS=1) check every index against the buffer
 * length and abort with a message: the Cython bounds checks cannot see into
 * these pointer loops. */
#ifndef RLX_SIMD_H
#define RLX_SIMD_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx_omp.h"
#include "rlx_epilogue.h"

#if RLX_DEBUG_CHECKS
#define RLX_CHECK_RANGE(lo, hi, len, what)                                          \
    do {                                                                            \
        if ((lo) < 0 || (hi) > (len)) {                                             \
            fprintf(stderr, "rlx_cpu: %s out of bounds [%td, %td) of %td\n", what,  \
                    (ptrdiff_t)(lo), (ptrdiff_t)(hi), (ptrdiff_t)(len));            \
            abort();                                                                \
        }                                                                           \
    } while (0)
#else
#define RLX_CHECK_RANGE(lo, hi, len, what) ((void)0)
#endif

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define RLX_X86_DISPATCH 1
#define RLX_INLINE static inline __attribute__((always_inline))
#define RLX_TARGET_AVX2 __attribute__((target("avx2,fma")))
/* a helper of an AVX2 variant, inlined into it */
#define RLX_INLINE_AVX2 static inline __attribute__((always_inline, target("avx2,fma")))
#include <immintrin.h>
static int rlx_cpu_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
/* The AVX-512 variants (the blocked convs' register tiles) use F, DQ (the
 * 256-bit halves of a zmm) and VL, on top of AVX2+FMA. */
#define RLX_TARGET_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma")))
#define RLX_INLINE_AVX512 static inline __attribute__((always_inline, target("avx512f,avx512dq,avx512vl,avx2,fma")))
static int rlx_cpu_has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vl");
}
#include <cpuid.h>
/* Whether the CPU is AMD family 19h (Zen 3 and Zen 4; of those only Zen 4
 * has AVX-512), whose cores split every 512-bit FMA into two 256-bit halves:
 * the same FMA peak as AVX2, where Intel's AVX-512 cores (two 512-bit FMA
 * pipes) double it.  The layout pass's choice between the blocked kernel and
 * Winograd keys on it (rlx_cpu/ops/blocked.py dense_max_plane). */
static int rlx_cpu_zmm_half_rate(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return 0;
    /* "AuthenticAMD" in ebx, edx, ecx */
    if (b != 0x68747541u || d != 0x69746e65u || c != 0x444d4163u) return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    unsigned family = (a >> 8) & 0xfu;
    if (family == 0xfu) family += (a >> 20) & 0xffu;
    return family == 0x19u;
}
#else
#define RLX_X86_DISPATCH 0
#define RLX_INLINE static inline
#define RLX_TARGET_AVX2
static int rlx_cpu_has_avx2_fma(void) { return 0; }
static int rlx_cpu_has_avx512(void) { return 0; }
static int rlx_cpu_zmm_half_rate(void) { return 0; }
#endif

/* Which variant runs: 0 = baseline, 1 = AVX2+FMA, 2 = AVX2+FMA and, where
 * one exists, the AVX-512 variant (on cores with two 512-bit FMA pipes,
 * Intel Xeon since Skylake-SP, it has twice AVX2's peak; on AMD Zen 4 the
 * same peak in half the instructions).  Every level >= 1 runs the AVX2 code
 * of the kernels without an AVX-512 variant.  Resolved once by
 * rlx_simd_init(), which the including extension module calls from its module
 * init, before any kernel (and so any OpenMP team) can run: the hot loops
 * only read a plain int, never a lazily written static.  RLX_SIMD=baseline
 * forces 0 and RLX_SIMD=avx2 at most 1, so every variant can be tested on one
 * machine.  Before init (never in practice) the level reads as the portable
 * baseline. */
static int rlx_simd_level_value = 0;

static void rlx_simd_init(void) {
    const char* env = getenv("RLX_SIMD");
    int level = rlx_cpu_has_avx2_fma();
    if (level && rlx_cpu_has_avx512()) level = 2;
    if (env && strcmp(env, "baseline") == 0) level = 0;
    if (env && strcmp(env, "avx2") == 0 && level > 1) level = 1;
    rlx_simd_level_value = level;
}

static inline int rlx_simd_level(void) { return rlx_simd_level_value; }

#if RLX_X86_DISPATCH
/* The 16 floats at p split into their even and odd lanes, in order (the
 * stride-2 pools' taps, a stride-2 stem's column phases). */
RLX_TARGET_AVX2 static inline void rlx_deint8(const float* p, __m256* even, __m256* odd) {
    __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}
#endif

typedef struct {
    ptrdiff_t n, c_in, h, w, c_out, h_out, w_out;
    ptrdiff_t kh, kw, sh, sw, ph, pw, dh, dw, groups;
} rlx_conv_geom;

/* ------------------------------------------------------------------------- */
/* direct conv: one (image, out-channel) plane, stride 1, dilation 1.        */
/* ------------------------------------------------------------------------- */
/* y row ho += tap (ki, kj) of one input channel, over the outputs whose
 * input column is inside [0, w) */
#define RLX_DIRECT_L1_FLOATS 8192
RLX_INLINE void rlx_direct_row(const float* restrict xp, const float* restrict wp, float* restrict yp,
                               const rlx_conv_geom* g, ptrdiff_t ho, ptrdiff_t ki, ptrdiff_t kj) {
    const float wv = wp[ki * g->kw + kj];
    ptrdiff_t wo_lo = g->pw > kj ? g->pw - kj : 0;
    ptrdiff_t wo_hi = g->w + g->pw - kj;
    if (wo_hi > g->w_out) wo_hi = g->w_out;
    if (wo_hi <= wo_lo) return;
    /* both pointers start at wo_lo, so neither ever points outside its
     * buffer (kj - pw may be negative) */
    float* restrict yr = yp + ho * g->w_out + wo_lo;
    const float* restrict xr = xp + (ho + ki - g->ph) * g->w + wo_lo + kj - g->pw;
    for (ptrdiff_t i = 0; i < wo_hi - wo_lo; ++i) yr[i] += wv * xr[i];
}

RLX_INLINE void rlx_direct_plane_taps(const float* restrict x, ptrdiff_t x_len,
                                      const float* restrict wt, float* restrict y,
                                      ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    const ptrdiff_t ni = item / g->c_out, co = item % g->c_out;
    const ptrdiff_t cpg = g->c_in / g->groups;
    const ptrdiff_t ci0 = (co / (g->c_out / g->groups)) * cpg;
    const ptrdiff_t w_out = g->w_out, h_out = g->h_out, W = g->w;
    float* restrict yp = y + item * h_out * w_out;
    RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, y_len, "direct y");
    memset(yp, 0, (size_t)(h_out * w_out) * sizeof(float));
    for (ptrdiff_t cil = 0; cil < cpg; ++cil) {
        const float* restrict xp = x + (ni * g->c_in + ci0 + cil) * g->h * W;
        const float* restrict wp = wt + (co * cpg + cil) * g->kh * g->kw;
        RLX_CHECK_RANGE((ni * g->c_in + ci0 + cil) * g->h * W, (ni * g->c_in + ci0 + cil + 1) * g->h * W,
                        x_len, "direct x");
        /* The column range and weight of a tap are worked out once for
         * all its rows here (rlx_direct_row redoes them per row, which
         * cost about 9% more instructions on a 28x28 plane). */
        for (ptrdiff_t ki = 0; ki < g->kh; ++ki) {
            /* output rows whose input row ho + ki - ph is inside [0, h) */
            ptrdiff_t ho_lo = g->ph > ki ? g->ph - ki : 0;
            ptrdiff_t ho_hi = g->h + g->ph - ki;
            if (ho_hi > h_out) ho_hi = h_out;
            for (ptrdiff_t kj = 0; kj < g->kw; ++kj) {
                const float wv = wp[ki * g->kw + kj];
                ptrdiff_t wo_lo = g->pw > kj ? g->pw - kj : 0;
                ptrdiff_t wo_hi = W + g->pw - kj;
                if (wo_hi > w_out) wo_hi = w_out;
                if (wo_hi <= wo_lo) continue;
                for (ptrdiff_t ho = ho_lo; ho < ho_hi; ++ho) {
                    /* both pointers start at wo_lo, so neither ever points
                     * outside its buffer (kj - pw may be negative) */
                    float* restrict yr = yp + ho * w_out + wo_lo;
                    const float* restrict xr = xp + (ho + ki - g->ph) * W + wo_lo + kj - g->pw;
                    for (ptrdiff_t i = 0; i < wo_hi - wo_lo; ++i) yr[i] += wv * xr[i];
                }
            }
        }
    }
}

RLX_INLINE void rlx_direct_plane_rows(const float* restrict x, ptrdiff_t x_len,
                                      const float* restrict wt, float* restrict y,
                                      ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    const ptrdiff_t ni = item / g->c_out, co = item % g->c_out;
    const ptrdiff_t cpg = g->c_in / g->groups;
    const ptrdiff_t ci0 = (co / (g->c_out / g->groups)) * cpg;
    const ptrdiff_t w_out = g->w_out, h_out = g->h_out, W = g->w;
    float* restrict yp = y + item * h_out * w_out;
    RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, y_len, "direct y");
    memset(yp, 0, (size_t)(h_out * w_out) * sizeof(float));
    for (ptrdiff_t cil = 0; cil < cpg; ++cil) {
        const float* restrict xp = x + (ni * g->c_in + ci0 + cil) * g->h * W;
        const float* restrict wp = wt + (co * cpg + cil) * g->kh * g->kw;
        RLX_CHECK_RANGE((ni * g->c_in + ci0 + cil) * g->h * W, (ni * g->c_in + ci0 + cil + 1) * g->h * W,
                        x_len, "direct x");
        for (ptrdiff_t ho = 0; ho < h_out; ++ho) {
            /* taps ki whose input row ho + ki - ph is inside [0, h) */
            ptrdiff_t ki_lo = g->ph > ho ? g->ph - ho : 0;
            ptrdiff_t ki_hi = g->h + g->ph - ho;
            if (ki_hi > g->kh) ki_hi = g->kh;
            for (ptrdiff_t ki = ki_lo; ki < ki_hi; ++ki)
                for (ptrdiff_t kj = 0; kj < g->kw; ++kj)
                    rlx_direct_row(xp, wp, yp, g, ho, ki, kj);
        }
    }
}

/* Large planes (depthwise layers at 112x112) run row-outer, all taps of one
 * output row while it sits in L1; planes that fit in L1 keep the tap-outer
 * order, which measured faster there (5x5 at 56x56).  Either way each output
 * sums its taps in (cil, ki, kj) order.  The two loop nests are separate
 * functions, chosen once per plane: as two branches of one loop nest the
 * tap-outer one compiled about 10% slower (resnet 3x3 64ch 56x56, 1 thread). */
RLX_INLINE void rlx_direct_plane_body(const float* restrict x, ptrdiff_t x_len,
                                      const float* restrict wt, float* restrict y,
                                      ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    if (g->h_out * g->w_out > RLX_DIRECT_L1_FLOATS)
        rlx_direct_plane_rows(x, x_len, wt, y, y_len, g, item);
    else
        rlx_direct_plane_taps(x, x_len, wt, y, y_len, g, item);
}

static void rlx_direct_plane_base(const float* x, ptrdiff_t x_len, const float* wt, float* y,
                                  ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    rlx_direct_plane_body(x, x_len, wt, y, y_len, g, item);
}
RLX_TARGET_AVX2 static void rlx_direct_plane_avx2(const float* x, ptrdiff_t x_len, const float* wt,
                                                  float* y, ptrdiff_t y_len, const rlx_conv_geom* g,
                                                  ptrdiff_t item) {
    rlx_direct_plane_body(x, x_len, wt, y, y_len, g, item);
}
static void rlx_direct_plane(const float* x, ptrdiff_t x_len, const float* wt, float* y,
                             ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    if (rlx_simd_level()) rlx_direct_plane_avx2(x, x_len, wt, y, y_len, g, item);
    else rlx_direct_plane_base(x, x_len, wt, y, y_len, g, item);
}

/* ------------------------------------------------------------------------- */
/* depthwise conv, stride 1 or 2, 3x3 or 5x5 kernel, dilation 1, any        */
/* padding: one (image, channel) plane (or a run of its rows), bias fused.   */
/* ------------------------------------------------------------------------- */
/* Each output sums its taps from 0 and adds the bias last.  Portable
 * variant (both strides): taps in (ki, kj) order, taps on padding rows
 * skipped, output columns [wa, wb) (every tap column inside the row) in a
 * plain loop, the padding edges in a checked scalar loop that skips taps on
 * padding columns.  AVX2 variants: blocks of 8 outputs that read taps on
 * padding as 0 from per-thread row copies (the same sum for finite weights);
 * stride 2 sums down each tap column kj, then over kj (below), stride 1 sums
 * the taps of even and of odd kernel rows ki in two chains, then adds them
 * (rlx_dw_s1_block).  Either way an output's sum order depends only on the
 * geometry, never on its thread or on which rows a work item holds.
 * S (stride) and K (kernel size) are compile-time constants of each caller. */
RLX_INLINE float rlx_dw_point(const float* restrict xp, const float* restrict wp, ptrdiff_t W,
                              ptrdiff_t h0, ptrdiff_t ki_lo, ptrdiff_t ki_hi, ptrdiff_t c0,
                              const int K) {
    float acc = 0.0f;
    for (ptrdiff_t ki = ki_lo; ki < ki_hi; ++ki) {
        const float* restrict r = xp + (h0 + ki) * W;
        for (int kj = 0; kj < K; ++kj) {
            const ptrdiff_t c = c0 + kj;
            if (c >= 0 && c < W) acc += wp[ki * K + kj] * r[c];
        }
    }
    return acc;
}

/* outputs [a, b) of one row, all K tap columns inside the row: columns
 * S*wo - pw + kj of rows h0 + ki, ki in [ki_lo, ki_hi) */
RLX_INLINE void rlx_dw_span(const float* restrict xp, const float* restrict wp, float* restrict yr,
                            ptrdiff_t W, ptrdiff_t pw, ptrdiff_t h0, ptrdiff_t ki_lo,
                            ptrdiff_t ki_hi, ptrdiff_t a, ptrdiff_t b, float bias, const int K,
                            const int S) {
    for (ptrdiff_t wo = a; wo < b; ++wo) {
        float acc = 0.0f;
        for (ptrdiff_t ki = ki_lo; ki < ki_hi; ++ki) {
            const float* restrict r = xp + (h0 + ki) * W + S * wo - pw;
            for (int kj = 0; kj < K; ++kj) acc += wp[ki * K + kj] * r[kj];
        }
        yr[wo] = acc + bias;
    }
}

/* The pointers and the first and last interior output column of a plane. */
typedef struct {
    const float* xp;
    const float* wp;
    float* yp;
    float bias;
    ptrdiff_t wa, wb;
} rlx_dw_plane_ptrs;

RLX_INLINE rlx_dw_plane_ptrs rlx_dw_plane_setup(const float* x, ptrdiff_t x_len, const float* wt,
                                                const float* bias, float* y, ptrdiff_t y_len,
                                                const rlx_conv_geom* g, ptrdiff_t item, const int K,
                                                const int S) {
    rlx_dw_plane_ptrs p;
    const ptrdiff_t c = item % g->c_out, H = g->h, W = g->w, h_out = g->h_out, w_out = g->w_out;
    (void)x_len;
    (void)y_len;
    RLX_CHECK_RANGE(item * H * W, (item + 1) * H * W, x_len, "depthwise x");
    RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, y_len, "depthwise y");
    p.xp = x + item * H * W;
    p.wp = wt + c * K * K;
    p.yp = y + item * h_out * w_out;
    p.bias = bias ? bias[c] : 0.0f;
    /* output columns whose K taps are all inside [0, W) */
    p.wa = (g->pw + S - 1) / S;
    p.wb = W - K + g->pw >= 0 ? (W - K + g->pw) / S + 1 : 0;
    if (p.wb > w_out) p.wb = w_out;
    if (p.wa > w_out) p.wa = w_out;
    if (p.wb < p.wa) p.wb = p.wa;
    return p;
}

/* taps ki in [*lo, *hi) of output row ho have their input row inside [0, H) */
RLX_INLINE ptrdiff_t rlx_dw_rows(const rlx_conv_geom* g, ptrdiff_t ho, const int K, const int S,
                                 ptrdiff_t* lo, ptrdiff_t* hi) {
    const ptrdiff_t h0 = S * ho - g->ph;     /* input row of tap ki is h0 + ki */
    *lo = h0 < 0 ? -h0 : 0;
    *hi = g->h - h0 < K ? g->h - h0 : K;
    if (*hi < *lo) *hi = *lo;
    return h0;
}

RLX_INLINE void rlx_dw_row_scalar(const rlx_dw_plane_ptrs* p, const rlx_conv_geom* g, ptrdiff_t ho,
                                  const int K, const int S) {
    ptrdiff_t ki_lo, ki_hi;
    const ptrdiff_t h0 = rlx_dw_rows(g, ho, K, S, &ki_lo, &ki_hi);
    const ptrdiff_t W = g->w, pw = g->pw, w_out = g->w_out;
    float* restrict yr = p->yp + ho * w_out;
    for (ptrdiff_t wo = 0; wo < p->wa; ++wo)
        yr[wo] = rlx_dw_point(p->xp, p->wp, W, h0, ki_lo, ki_hi, S * wo - pw, K) + p->bias;
    rlx_dw_span(p->xp, p->wp, yr, W, pw, h0, ki_lo, ki_hi, p->wa, p->wb, p->bias, K, S);
    for (ptrdiff_t wo = p->wb; wo < w_out; ++wo)
        yr[wo] = rlx_dw_point(p->xp, p->wp, W, h0, ki_lo, ki_hi, S * wo - pw, K) + p->bias;
}

RLX_INLINE void rlx_dw_s2_plane_scalar(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                       float* y, ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item,
                                       const int K) {
    const rlx_dw_plane_ptrs p = rlx_dw_plane_setup(x, x_len, wt, bias, y, y_len, g, item, K, 2);
    for (ptrdiff_t ho = 0; ho < g->h_out; ++ho) rlx_dw_row_scalar(&p, g, ho, K, 2);
}

static void rlx_dw_s2_plane_base(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                 float* y, ptrdiff_t y_len, const rlx_conv_geom* g, ptrdiff_t item) {
    if (g->kh == 3) rlx_dw_s2_plane_scalar(x, x_len, wt, bias, y, y_len, g, item, 3);
    else rlx_dw_s2_plane_scalar(x, x_len, wt, bias, y, y_len, g, item, 5);
}

#if RLX_X86_DISPATCH
/* AVX2 variant.  Each input row a plane needs is split once into its even
 * and odd columns, E[j] = x[2j - pw] and O[j] = x[2j + 1 - pw] (0 where the
 * column is padding), in a per-thread ring of K + 2 row buffers; tap (ki, kj) of
 * output wo is then E[wo + kj/2] (kj even) or O[wo + kj/2] (kj odd) of row
 * h0 + ki, so 8 outputs take K*K plain loads and FMAs.  The sums run down
 * each tap column kj (K short FMA chains), then over kj, then + bias. */
/* the ring holds K + 2 rows: two output rows at a time read K + 2 (below) */
#define RLX_DW_S2_SLOTS 7

/* Floats of one half (E or O) of a split row: entries [0, n) are filled in
 * blocks of 8, n = max(w_out, 8) + 2 (block8 reads E/O up to the last output
 * + 2), so a half holds n rounded up to 8 plus slack. */
static inline ptrdiff_t rlx_dw_s2_half(ptrdiff_t w_out) {
    const ptrdiff_t w = w_out > 8 ? w_out : 8;
    return (w + 7) / 8 * 8 + 16;
}

RLX_INLINE_AVX2 void rlx_dw_s2_split_row(const float* xr, ptrdiff_t W, ptrdiff_t pw, float* e, float* o,
                                         ptrdiff_t n) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i wlim = _mm256_set1_epi32((int)W), neg = _mm256_set1_epi32(-1);
    for (ptrdiff_t j = 0; j < n; j += 8) {
        /* E/O entries [j, j+8) from columns c .. c+15 */
        const ptrdiff_t c = 2 * j - pw;
        __m256 lo, hi;
        if (c >= 0 && c + 15 < W) {
            lo = _mm256_loadu_ps(xr + c);
            hi = _mm256_loadu_ps(xr + c + 8);
        } else {            /* padding columns: masked off, read as 0 */
            const __m256i cl = _mm256_add_epi32(_mm256_set1_epi32((int)c), iota);
            const __m256i ch = _mm256_add_epi32(_mm256_set1_epi32((int)(c + 8)), iota);
            lo = _mm256_maskload_ps(xr + c, _mm256_and_si256(_mm256_cmpgt_epi32(cl, neg),
                                                             _mm256_cmpgt_epi32(wlim, cl)));
            hi = _mm256_maskload_ps(xr + c + 8, _mm256_and_si256(_mm256_cmpgt_epi32(ch, neg),
                                                                 _mm256_cmpgt_epi32(wlim, ch)));
        }
        __m256 ev = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        __m256 od = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(e + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev),
                                                                       _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(o + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(od),
                                                                       _MM_SHUFFLE(3, 1, 2, 0))));
    }
}

/* outputs wo..wo+7 of one row from the split rows rows[ki] (E at +0, O at +half) */
RLX_INLINE_AVX2 __m256 rlx_dw_s2_block8(const float* const* rows, const float* wp, ptrdiff_t half,
                                        ptrdiff_t ki_lo, ptrdiff_t ki_hi, ptrdiff_t wo, __m256 vb,
                                        const int K) {
    __m256 acc[5];
    for (int kj = 0; kj < K; ++kj) acc[kj] = _mm256_setzero_ps();
    for (ptrdiff_t ki = ki_lo; ki < ki_hi; ++ki) {
        const float* r = rows[ki] + wo;
        for (int kj = 0; kj < K; ++kj) {
            const float* src = (kj & 1) ? r + half + kj / 2 : r + kj / 2;
            acc[kj] = _mm256_fmadd_ps(_mm256_broadcast_ss(wp + ki * K + kj), _mm256_loadu_ps(src), acc[kj]);
        }
    }
    for (int kj = 1; kj < K; ++kj) acc[0] = _mm256_add_ps(acc[0], acc[kj]);
    return _mm256_add_ps(acc[0], vb);
}

/* Two output rows at a time (AVX-512; with the AVX2 tiles 3x3 only, in
 * blocks of 8 outputs): rows ho and ho + 1 read the K + 2 input rows
 * h0 .. h0 + K + 1 (rows[0 .. K + 2), split), row h0 + r being tap row r
 * of ho and r - 2 of ho + 1.  Per block of 16
 * outputs (two vectors of 8) each split vector is loaded once for both
 * output rows and each weight broadcast once for both halves: 4K
 * accumulators (20 of the 32 registers at 5x5) and about 1.2 loads per
 * FMA, where the one-row blocks load twice per FMA (a weight and the
 * data), which bounds them at half the FMA pipes.  Each output is the
 * chain of rlx_dw_s2_block8 -- acc[kj] over ki in order from +0, then
 * acc[0] + acc[1] + ... + acc[K-1], then + bias -- so the bits are the
 * same.  nh = 1: blocks of 8 (rows of 8 to 15 outputs). */
RLX_INLINE_AVX2 void rlx_dw_s2_pair_block(const float* const* rows, const float* wp, ptrdiff_t half,
                                          ptrdiff_t wo, __m256 vb, float* y0, float* y1, const int K,
                                          const int nh) {
    __m256 a[2][2][5];
#pragma GCC unroll 5
    for (int kj = 0; kj < K; ++kj)
        a[0][0][kj] = a[0][1][kj] = a[1][0][kj] = a[1][1][kj] = _mm256_setzero_ps();
#pragma GCC unroll 7
    for (int r = 0; r < K + 2; ++r) {
        const float* rr = rows[r] + wo;
#pragma GCC unroll 5
        for (int kj = 0; kj < K; ++kj) {
            const float* src = (kj & 1) ? rr + half + kj / 2 : rr + kj / 2;
            const __m256 x0 = _mm256_loadu_ps(src);
            const __m256 x1 = nh > 1 ? _mm256_loadu_ps(src + 8) : x0;
            if (r < K) {
                const __m256 w = _mm256_broadcast_ss(wp + r * K + kj);
                a[0][0][kj] = _mm256_fmadd_ps(w, x0, a[0][0][kj]);
                if (nh > 1) a[0][1][kj] = _mm256_fmadd_ps(w, x1, a[0][1][kj]);
            }
            if (r >= 2) {
                const __m256 w = _mm256_broadcast_ss(wp + (r - 2) * K + kj);
                a[1][0][kj] = _mm256_fmadd_ps(w, x0, a[1][0][kj]);
                if (nh > 1) a[1][1][kj] = _mm256_fmadd_ps(w, x1, a[1][1][kj]);
            }
        }
    }
#pragma GCC unroll 2
    for (int h = 0; h < nh; ++h) {
        __m256 s0 = a[0][h][0], s1 = a[1][h][0];
#pragma GCC unroll 4
        for (int kj = 1; kj < K; ++kj) {
            s0 = _mm256_add_ps(s0, a[0][h][kj]);
            s1 = _mm256_add_ps(s1, a[1][h][kj]);
        }
        _mm256_storeu_ps(y0 + wo + 8 * h, _mm256_add_ps(s0, vb));
        _mm256_storeu_ps(y1 + wo + 8 * h, _mm256_add_ps(s1, vb));
    }
}

/* both rows' outputs [0, w_out) (w_out >= 8): blocks of 16 (wide: the
 * AVX-512 level's 32 registers; rows of at least 16), else of 8; the last
 * block overlaps the one before it (the same bits again) */
RLX_INLINE_AVX2 void rlx_dw_s2_pair_rows_body(const float* const* rows, const float* wp, ptrdiff_t half,
                                              ptrdiff_t w_out, __m256 vb, float* y0, float* y1, const int K,
                                              const int wide) {
    ptrdiff_t wo = 0;
#define RLX_DW_S2_PAIR(NH)                                                                                 \
    if (K == 3) rlx_dw_s2_pair_block(rows, wp, half, wo, vb, y0, y1, 3, NH);                              \
    else rlx_dw_s2_pair_block(rows, wp, half, wo, vb, y0, y1, 5, NH);
    if (wide && w_out >= 16) {
        for (; wo + 16 <= w_out; wo += 16) { RLX_DW_S2_PAIR(2) }
        if (wo < w_out) {
            wo = w_out - 16;
            RLX_DW_S2_PAIR(2)
        }
        return;
    }
    for (; wo + 8 <= w_out; wo += 8) { RLX_DW_S2_PAIR(1) }
    if (wo < w_out) {
        wo = w_out - 8;
        RLX_DW_S2_PAIR(1)
    }
#undef RLX_DW_S2_PAIR
}
/* AVX2: 8-output blocks (2K accumulators of the 16 registers) */
RLX_TARGET_AVX2 static void rlx_dw_s2_pair_rows_avx2(const float* const* rows, const float* wp, ptrdiff_t half,
                                                     ptrdiff_t w_out, __m256 vb, float* y0, float* y1, const int K) {
    rlx_dw_s2_pair_rows_body(rows, wp, half, w_out, vb, y0, y1, K, 0);
}
RLX_TARGET_AVX512 static void rlx_dw_s2_pair_rows512(const float* const* rows, const float* wp, ptrdiff_t half,
                                                     ptrdiff_t w_out, __m256 vb, float* y0, float* y1, const int K) {
    rlx_dw_s2_pair_rows_body(rows, wp, half, w_out, vb, y0, y1, K, 1);
}

/* pairs: 0 one output row at a time; 1 two, in 8-output blocks (AVX2); 2
 * two, in 16-output blocks (AVX-512) */
RLX_INLINE_AVX2 void rlx_dw_s2_plane_wide(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                          float* y, ptrdiff_t y_len, float* ring, ptrdiff_t ring_len,
                                          const rlx_conv_geom* g, ptrdiff_t item, const int K, const int pairs) {
    const ptrdiff_t c = item % g->c_out, H = g->h, W = g->w, h_out = g->h_out, w_out = g->w_out;
    const ptrdiff_t half = rlx_dw_s2_half(w_out);
    const float* xp = x + item * H * W;
    const float* wp = wt + c * K * K;
    float* yp = y + item * h_out * w_out;
    const __m256 vb = _mm256_set1_ps(bias ? bias[c] : 0.0f);
    ptrdiff_t held[RLX_DW_S2_SLOTS];       /* input row in each ring slot, -1: none */
    (void)x_len;
    (void)y_len;
    (void)ring_len;
    RLX_CHECK_RANGE(item * H * W, (item + 1) * H * W, x_len, "depthwise s2 x");
    RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, y_len, "depthwise s2 y");
    RLX_CHECK_RANGE(0, (K + 2) * 2 * half, ring_len, "depthwise s2 ring");
    for (int i = 0; i < K + 2; ++i) held[i] = -1;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(w_out < 8 ? w_out : 8)), lanes);
    for (ptrdiff_t ho = 0; ho < h_out; ++ho) {
        ptrdiff_t ki_lo, ki_hi;
        const ptrdiff_t h0 = rlx_dw_rows(g, ho, K, 2, &ki_lo, &ki_hi);
        const float* rows[RLX_DW_S2_SLOTS];
        /* rows ho and ho + 1 with every tap row inside the input: both at once */
        const int pair = pairs && w_out >= 8 && ho + 1 < h_out && h0 >= 0 && h0 + K + 2 <= H;
        for (ptrdiff_t ki = ki_lo; ki < (pair ? K + 2 : ki_hi); ++ki) {
            const ptrdiff_t hi = h0 + ki, slot = hi % (K + 2);
            float* buf = ring + slot * 2 * half;
            if (held[slot] != hi) {
                rlx_dw_s2_split_row(xp + hi * W, W, g->pw, buf, buf + half, (w_out > 8 ? w_out : 8) + 2);
                held[slot] = hi;
            }
            rows[ki] = buf;
        }
        float* yr = yp + ho * w_out;
        if (pair) {
            if (pairs > 1) rlx_dw_s2_pair_rows512(rows, wp, half, w_out, vb, yr, yr + w_out, K);
            else rlx_dw_s2_pair_rows_avx2(rows, wp, half, w_out, vb, yr, yr + w_out, K);
            ++ho;
            continue;
        }
        if (w_out < 8) {
            _mm256_maskstore_ps(yr, tail, rlx_dw_s2_block8(rows, wp, half, ki_lo, ki_hi, 0, vb, K));
            continue;
        }
        /* the last block overlaps the one before it when w_out is not a
         * multiple of 8: its outputs get the same bits again */
        for (ptrdiff_t b0 = 0; b0 < w_out; b0 += 8) {
            const ptrdiff_t wo = b0 + 8 <= w_out ? b0 : w_out - 8;
            _mm256_storeu_ps(yr + wo, rlx_dw_s2_block8(rows, wp, half, ki_lo, ki_hi, wo, vb, K));
        }
    }
}
#endif

#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_dw_s2_plane_avx2(const float* x, ptrdiff_t x_len, const float* wt,
                                                 const float* bias, float* y, ptrdiff_t y_len, float* ring,
                                                 ptrdiff_t ring_len, const rlx_conv_geom* g, ptrdiff_t item) {
    /* two rows at a time: 16-output blocks on the AVX-512 level; with the
     * AVX2 tiles 8-output blocks at 3x3 only (C32 224x224, 1 thread: 3x3
     * 0.287 -> 0.250 ms; 5x5 0.573 -> 0.575-0.63, its 10 accumulators,
     * data and weights crowding the 16 registers) */
    const int z = rlx_simd_level() > 1;
    if (g->kh == 3) rlx_dw_s2_plane_wide(x, x_len, wt, bias, y, y_len, ring, ring_len, g, item, 3, z ? 2 : 1);
    else rlx_dw_s2_plane_wide(x, x_len, wt, bias, y, y_len, ring, ring_len, g, item, 5, z ? 2 : 0);
}
#endif

/* Floats of per-thread scratch the AVX2 variant needs (K + 2 split rows). */
static ptrdiff_t rlx_dw_s2_scratch(const rlx_conv_geom* g) {
    const ptrdiff_t w = g->w_out > 8 ? g->w_out : 8;
    return (g->kh + 2) * 2 * ((w + 7) / 8 * 8 + 16);
}

/* Planes [p0, p1) of a depthwise stride-2 conv (kh == kw, 3 or 5; the
 * compiler admits no other shape). */
/* e: NULL, or the residual/activation applied to each plane right after it
 * is computed, while it is still in cache (the bias is already in). */
static void rlx_dw_s2_planes(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                             float* y, ptrdiff_t y_len, float* ring, ptrdiff_t ring_len,
                             const rlx_conv_geom* g, const rlx_epilogue* e, ptrdiff_t p0, ptrdiff_t p1) {
    const int level = rlx_simd_level();
    const ptrdiff_t plane = g->h_out * g->w_out;
    (void)ring;
    (void)ring_len;
    for (ptrdiff_t item = p0; item < p1; ++item) {
#if RLX_X86_DISPATCH
        if (level)
            rlx_dw_s2_plane_avx2(x, x_len, wt, bias, y, y_len, ring, ring_len, g, item);
        else
#endif
            rlx_dw_s2_plane_base(x, x_len, wt, bias, y, y_len, g, item);
        if (e) {
            RLX_CHECK_RANGE(item * plane, (item + 1) * plane, e->res ? e->res_len : y_len, "depthwise residual");
            rlx_epilogue_span(y, y_len, item * plane, plane, 0.0f, e, level);
        }
    }
}

/* Stride 1.  Work items are runs of output rows, counted over all planes
 * (row r is row r % h_out of plane r / h_out), so a few large planes still
 * split evenly over the threads. */

/* Floats of one padded row copy: P[j] = x[j - pw] (0 on padding) for j in
 * [0, n); blocks of 8 outputs at wo <= max(w_out, 8) - 8 read P up to
 * max(w_out, 8) + K - 2. */
static inline ptrdiff_t rlx_dw_s1_row_floats(ptrdiff_t w_out, ptrdiff_t K) {
    const ptrdiff_t w = w_out > 8 ? w_out : 8;
    return (w + K - 1 + 7) / 8 * 8;
}

/* Floats of per-thread scratch the AVX2 variant needs: a ring of
 * RLX_DW_S1_SLOTS padded rows (two output rows at a time read K + 1 <= 6
 * input rows, four 3x3 rows 6; input row hi sits in slot hi & 7, no
 * division) and one zero
 * row that stands for the padding rows. */
#define RLX_DW_S1_SLOTS 8
static ptrdiff_t rlx_dw_s1_scratch(const rlx_conv_geom* g) {
    return (RLX_DW_S1_SLOTS + 1) * rlx_dw_s1_row_floats(g->w_out, g->kh);
}

RLX_INLINE void rlx_dw_s1_rows_scalar(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                      float* y, ptrdiff_t y_len, const rlx_conv_geom* g,
                                      const rlx_epilogue* e, ptrdiff_t r0, ptrdiff_t r1, const int K) {
    const ptrdiff_t h_out = g->h_out, w_out = g->w_out;
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const ptrdiff_t item = r / h_out, ho = r % h_out;
        const rlx_dw_plane_ptrs p = rlx_dw_plane_setup(x, x_len, wt, bias, y, y_len, g, item, K, 1);
        rlx_dw_row_scalar(&p, g, ho, K, 1);
        if (e) {
            RLX_CHECK_RANGE(r * w_out, (r + 1) * w_out, e->res ? e->res_len : y_len, "depthwise residual");
            rlx_epilogue_span_body(p.yp + ho * w_out, r * w_out, w_out, 0.0f, e);
        }
    }
}

static void rlx_dw_s1_rows_base(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                float* y, ptrdiff_t y_len, const rlx_conv_geom* g, const rlx_epilogue* e,
                                ptrdiff_t r0, ptrdiff_t r1) {
    if (g->kh == 3) rlx_dw_s1_rows_scalar(x, x_len, wt, bias, y, y_len, g, e, r0, r1, 3);
    else rlx_dw_s1_rows_scalar(x, x_len, wt, bias, y, y_len, g, e, r0, r1, 5);
}

#if RLX_X86_DISPATCH
/* AVX2 variant.  Each input row is copied once into a padded row of a
 * per-thread ring, so the taps of 8 outputs at column wo are
 * plain loads P[wo + kj .. wo + kj + 7] with no edge cases; rows of padding
 * read a zero row.  Two output rows at a time (four for 3x3 on the AVX-512
 * level) share their K + 1 input rows (each loaded vector feeds both rows'
 * FMAs).  The kernel's K*K weights are
 * broadcast once per plane (3x3: they stay in registers).  For 5x5 this
 * measured faster than one output row in strips of 32 outputs with the 5
 * weights of one kernel row in registers. */
RLX_INLINE_AVX2 void rlx_dw_s1_pad_row(const float* xr, ptrdiff_t W, ptrdiff_t pw, float* p, ptrdiff_t n) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i wlim = _mm256_set1_epi32((int)W), neg = _mm256_set1_epi32(-1);
    for (ptrdiff_t j = 0; j < n; j += 8) {
        const ptrdiff_t c = j - pw;
        if (c >= 0 && c + 8 <= W) {
            _mm256_storeu_ps(p + j, _mm256_loadu_ps(xr + c));
        } else if (c >= W || c + 8 <= 0) {      /* all padding */
            _mm256_storeu_ps(p + j, _mm256_setzero_ps());
        } else {            /* padding columns: masked off, read as 0 */
            const __m256i cl = _mm256_add_epi32(_mm256_set1_epi32((int)c), iota);
            _mm256_storeu_ps(p + j, _mm256_maskload_ps(xr + c, _mm256_and_si256(_mm256_cmpgt_epi32(cl, neg),
                                                                                _mm256_cmpgt_epi32(wlim, cl))));
        }
    }
}

/* outputs wo..wo+7 of R consecutive output rows; rows[i] is the padded
 * input row of tap ki = i - r of output row r.  Per output: taps of even ki
 * in one chain, of odd ki in another, each in (ki, kj) order, then
 * even + odd + bias -- the same operations whichever R its row is done in. */
RLX_INLINE_AVX2 void rlx_dw_s1_block(const float* const* rows, const __m256* wv, ptrdiff_t wo, __m256 vb,
                                     __m256* out, const int K, const int R) {
    __m256 ev[4], od[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) ev[r] = od[r] = _mm256_setzero_ps();
#pragma GCC unroll 6
    for (int i = 0; i < R + K - 1; ++i) {
        const float* src = rows[i] + wo;
#pragma GCC unroll 5
        for (int kj = 0; kj < K; ++kj) {
            const __m256 xv = _mm256_loadu_ps(src + kj);
#pragma GCC unroll 4
            for (int r = 0; r < R; ++r) {
                const int ki = i - r;
                if (ki < 0 || ki >= K) continue;
                if (ki & 1) od[r] = _mm256_fmadd_ps(wv[ki * K + kj], xv, od[r]);
                else ev[r] = _mm256_fmadd_ps(wv[ki * K + kj], xv, ev[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) out[r] = _mm256_add_ps(_mm256_add_ps(ev[r], od[r]), vb);
}

/* R output rows ho.. of one plane (xp, yp at the plane), then their epilogue */
RLX_INLINE_AVX2 void rlx_dw_s1_row_group(const float* xp, float* yp, float* ring, const float* zero,
                                         ptrdiff_t* held, const __m256* wv, __m256 vb, const rlx_conv_geom* g,
                                         const rlx_epilogue* e, ptrdiff_t plane_off, ptrdiff_t ho,
                                         const int K, const int R) {
    const ptrdiff_t H = g->h, W = g->w, w_out = g->w_out;
    const ptrdiff_t L = rlx_dw_s1_row_floats(w_out, K);
    const float* rows[6];
#pragma GCC unroll 6
    for (int i = 0; i < R + K - 1; ++i) {
        const ptrdiff_t hi = ho - g->ph + i;
        if (hi < 0 || hi >= H) {
            rows[i] = zero;
            continue;
        }
        const ptrdiff_t slot = hi & (RLX_DW_S1_SLOTS - 1);
        float* buf = ring + slot * L;
        if (held[slot] != hi) {
            rlx_dw_s1_pad_row(xp + hi * W, W, g->pw, buf, L);
            held[slot] = hi;
        }
        rows[i] = buf;
    }
    float* yr = yp + ho * w_out;
    __m256 out[4];
    if (w_out < 8) {        /* a plain copy: measured faster than masked stores here */
        float tmp[32];
        rlx_dw_s1_block(rows, wv, 0, vb, out, K, R);
        for (int r = 0; r < R; ++r) _mm256_storeu_ps(tmp + 8 * r, out[r]);
        for (int r = 0; r < R; ++r)
            for (ptrdiff_t i = 0; i < w_out; ++i) yr[r * w_out + i] = tmp[8 * r + i];
    } else {
        /* the last block overlaps the one before it when w_out is not a
         * multiple of 8: its outputs get the same bits again */
        for (ptrdiff_t b0 = 0; b0 < w_out; b0 += 8) {
            const ptrdiff_t wo = b0 + 8 <= w_out ? b0 : w_out - 8;
            rlx_dw_s1_block(rows, wv, wo, vb, out, K, R);
            for (int r = 0; r < R; ++r) _mm256_storeu_ps(yr + r * w_out + wo, out[r]);
        }
    }
    if (e)
        for (int r = 0; r < R; ++r)
            rlx_epilogue_span_in(yr + r * w_out, plane_off + (ho + r) * w_out, w_out, 0.0f, e, 1);
}

RLX_INLINE_AVX2 void rlx_dw_s1_rows_wide(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                         float* y, ptrdiff_t y_len, float* ring, ptrdiff_t ring_len,
                                         const rlx_conv_geom* g, const rlx_epilogue* e, ptrdiff_t r0,
                                         ptrdiff_t r1, const int K, const int RG) {
    const ptrdiff_t H = g->h, W = g->w, h_out = g->h_out, w_out = g->w_out;
    const ptrdiff_t L = rlx_dw_s1_row_floats(w_out, K);
    float* zero = ring + RLX_DW_S1_SLOTS * L;
    (void)x_len;
    (void)y_len;
    (void)ring_len;
    RLX_CHECK_RANGE(0, (RLX_DW_S1_SLOTS + 1) * L, ring_len, "depthwise s1 ring");
    memset(zero, 0, (size_t)L * sizeof(float));
    ptrdiff_t r = r0;
    while (r < r1) {
        const ptrdiff_t item = r / h_out, c = item % g->c_out;
        const ptrdiff_t ho_end = (item + 1) * h_out <= r1 ? h_out : r1 - item * h_out;
        const float* xp = x + item * H * W;
        const float* wp = wt + c * K * K;
        float* yp = y + item * h_out * w_out;
        RLX_CHECK_RANGE(item * H * W, (item + 1) * H * W, x_len, "depthwise s1 x");
        RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, y_len, "depthwise s1 y");
        if (e && e->res)
            RLX_CHECK_RANGE(item * h_out * w_out, (item + 1) * h_out * w_out, e->res_len, "depthwise residual");
        __m256 wv[25];
        for (int i = 0; i < K * K; ++i) wv[i] = _mm256_broadcast_ss(wp + i);
        const __m256 vb = _mm256_set1_ps(bias ? bias[c] : 0.0f);
        ptrdiff_t held[RLX_DW_S1_SLOTS];
        for (int i = 0; i < RLX_DW_S1_SLOTS; ++i) held[i] = -1;
        ptrdiff_t ho = r - item * h_out;
        if (RG == 4)
            for (; ho + 4 <= ho_end; ho += 4)
                rlx_dw_s1_row_group(xp, yp, ring, zero, held, wv, vb, g, e, item * h_out * w_out, ho, K, 4);
        for (; ho + 2 <= ho_end; ho += 2)
            rlx_dw_s1_row_group(xp, yp, ring, zero, held, wv, vb, g, e, item * h_out * w_out, ho, K, 2);
        if (ho < ho_end)
            rlx_dw_s1_row_group(xp, yp, ring, zero, held, wv, vb, g, e, item * h_out * w_out, ho, K, 1);
        r = item * h_out + ho_end;
    }
}

/* 3x3 (output rows in groups of rg3) or 5x5 (groups of 2) */
RLX_INLINE_AVX2 void rlx_dw_s1_rows_k(const float* x, ptrdiff_t x_len, const float* wt, const float* bias, float* y,
                                      ptrdiff_t y_len, float* ring, ptrdiff_t ring_len, const rlx_conv_geom* g,
                                      const rlx_epilogue* e, ptrdiff_t r0, ptrdiff_t r1, const int rg3) {
    if (g->kh == 3) rlx_dw_s1_rows_wide(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1, 3, rg3);
    else rlx_dw_s1_rows_wide(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1, 5, 2);
}

RLX_TARGET_AVX2 static void rlx_dw_s1_rows_avx2(const float* x, ptrdiff_t x_len, const float* wt,
                                                const float* bias, float* y, ptrdiff_t y_len, float* ring,
                                                ptrdiff_t ring_len, const rlx_conv_geom* g,
                                                const rlx_epilogue* e, ptrdiff_t r0, ptrdiff_t r1) {
    rlx_dw_s1_rows_k(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1, 2);
}

/* The same with AVX-512's 32 vector registers (ymm16-31 through
 * AVX-512VL; still 8 lanes, so the same operations and bits): 3x3 runs
 * four output rows at a time on their 6 input rows (8 FMA chains per
 * block); 5x5 keeps its 25 weights in registers.  Zen 4, one thread, 3x3
 * N1 C32 112x112 0.139 -> 0.113 ms, C128 0.56 -> 0.45 (2 threads 0.29 ->
 * 0.23); 5x5 C32 112x112 0.425 -> 0.360.  Six rows at a time measured 4%
 * slower than four. */
RLX_TARGET_AVX512 static void rlx_dw_s1_rows_avx512(const float* x, ptrdiff_t x_len, const float* wt,
                                                const float* bias, float* y, ptrdiff_t y_len, float* ring,
                                                ptrdiff_t ring_len, const rlx_conv_geom* g,
                                                const rlx_epilogue* e, ptrdiff_t r0, ptrdiff_t r1) {
    rlx_dw_s1_rows_k(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1, 4);
}
#endif

/* Output rows [r0, r1) (over all planes) of a depthwise stride-1 conv
 * (kh == kw, 3 or 5; the compiler admits no other shape), bias fused, then
 * the epilogue e (NULL: none; called with bias 0, the bias being in y
 * already) on each row while it is in cache. */
static void rlx_dw_s1_rows(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                           float* y, ptrdiff_t y_len, float* ring, ptrdiff_t ring_len,
                           const rlx_conv_geom* g, const rlx_epilogue* e, ptrdiff_t r0, ptrdiff_t r1) {
    (void)ring;
    (void)ring_len;
    if (r0 >= r1) return;
#if RLX_X86_DISPATCH
    if (rlx_simd_level() >= 2) {
        rlx_dw_s1_rows_avx512(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1);
        return;
    }
    if (rlx_simd_level()) {
        rlx_dw_s1_rows_avx2(x, x_len, wt, bias, y, y_len, ring, ring_len, g, e, r0, r1);
        return;
    }
#endif
    rlx_dw_s1_rows_base(x, x_len, wt, bias, y, y_len, g, e, r0, r1);
}


/* ------------------------------------------------------------------------- */
/* depthwise 3x3/5x5, stride 1 or 2, on small planes: 8 channels at a time  */
/* ------------------------------------------------------------------------- */
/* A 7x7 or 14x14 plane is less than two 8-wide vector rows, so the per-plane
 * kernels above spend most of their time on row copies, edge blocks and
 * per-plane setup.  Here the work is vectorised over channels: a block of 8
 * channels of one image (the last block of a channel count that is not a
 * multiple of 8 repeats its last channel in the spare lanes and writes only
 * its own), a strip of R output rows at a time.  The input rows a strip
 * reads are transposed into an interleaved zero-padded buffer
 * in[Hs][Wb][8] (lane l = channel c0 + l); each output is one 8-lane vector
 * summing its K*K taps (padding taps read 0) in (ki, kj) order from 0, plus
 * the bias, into out[R][w_out][8]; the strip's 8 output runs are transposed
 * back and the epilogue runs on them while they are in cache.  An output's sum
 * order depends only on the geometry, never on the strip, item or thread
 * that computes it.  Work items are (image, channel block, strip), strip
 * fastest.
 *
 * Strips: as many rows as keep both buffers within RLX_DW_CB_STRIP_FLOATS
 * (256 KiB, half the L2: whole planes up to 56x56 at stride 1; 16K and 6K
 * floats measured up to 15% slower at 56x56), cut further so a layer has at
 * least RLX_DW_CB_MIN_ITEMS items (2 threads get balanced runs at few
 * channels) while strips keep >= 4 rows (the K - S halo rows are read per
 * strip).  See rlx_dw_cb_use for the planes it is chosen for. */
#define RLX_DW_CB_STRIP_FLOATS (64 * 1024)
#define RLX_DW_CB_MIN_ITEMS 16
/* output planes of at most this many outputs run the channel-block kernel */
#define RLX_DW_CB_MAX_PLANE (64 * 64)
/* ... and have at least this many channels */
#define RLX_DW_CB_MIN_CHANNELS 8

static inline ptrdiff_t rlx_dw_cb_wb(const rlx_conv_geom* g) { return g->sw * (g->w_out - 1) + g->kw; }
/* buffer rows of a strip of r output rows */
static inline ptrdiff_t rlx_dw_cb_hs(const rlx_conv_geom* g, ptrdiff_t r) { return g->sh * (r - 1) + g->kh; }

/* channels per block: 16 on the AVX-512 level (zmm tiles), else 8 */
static inline ptrdiff_t rlx_dw_cb_lanes(void) { return rlx_simd_level() >= 2 ? 16 : 8; }

/* output rows per strip */
static ptrdiff_t rlx_dw_cb_rows_per_strip(const rlx_conv_geom* g) {
    const ptrdiff_t Wb = rlx_dw_cb_wb(g), S = g->sh, K = g->kh, h_out = g->h_out, L = rlx_dw_cb_lanes();
    /* L ((S (R - 1) + K) Wb + R w_out) <= budget */
    ptrdiff_t r = (RLX_DW_CB_STRIP_FLOATS / L - (K - S) * Wb) / (S * Wb + g->w_out);
    const ptrdiff_t blocks = g->n * ((g->c_out + L - 1) / L);
    if (blocks < RLX_DW_CB_MIN_ITEMS) {
        const ptrdiff_t strips = (RLX_DW_CB_MIN_ITEMS + blocks - 1) / blocks;
        const ptrdiff_t rb = (h_out + strips - 1) / strips;
        if (rb < r) r = rb;
    }
    if (r < 4) r = 4;
    if (r > h_out) r = h_out;
    return r < 1 ? 1 : r;
}

static ptrdiff_t rlx_dw_cb_items(const rlx_conv_geom* g) {
    const ptrdiff_t r = rlx_dw_cb_rows_per_strip(g), L = rlx_dw_cb_lanes();
    return g->n * ((g->c_out + L - 1) / L) * ((g->h_out + r - 1) / r);
}

/* Floats of per-thread scratch: in, out, the K*K weight vectors, the bias
 * vector, and 16 to align them to 64 bytes (no vector load splits a line). */
static ptrdiff_t rlx_dw_cb_scratch(const rlx_conv_geom* g) {
    const ptrdiff_t r = rlx_dw_cb_rows_per_strip(g);
    return rlx_dw_cb_lanes() * (rlx_dw_cb_hs(g, r) * rlx_dw_cb_wb(g) + r * g->w_out + g->kh * g->kw + 1) + 16;
}

/* 1: this depthwise geometry (stride 1 or 2, 3x3 or 5x5) runs the
 * channel-block kernel (AVX2 only; the portable variant keeps the per-plane
 * kernels).  Measured against the per-plane AVX2 kernels, 1 thread, batch 1,
 * kernel ms on a loaded machine: 3x3 C960 7x7 0.089 -> 0.032, C576 14x14
 * 0.115 -> 0.070, C144 28x28 0.084 -> 0.064, C144 56x56 0.275 -> 0.256,
 * stride 2 C144 56x56 0.162 -> 0.104, C96 112x112 0.35 -> 0.29; 5x5 C960
 * 7x7 0.152 -> 0.052, C480 14x14 0.197 -> 0.095, C120 28x28 0.154 -> 0.092,
 * C128 56x56 0.57 -> 0.39.  3x3 C32 112x112 at stride 1 measured the same
 * (0.22) on both, and stays on the row kernel tuned for it: planes of more
 * than RLX_DW_CB_MAX_PLANE outputs. */
static int rlx_dw_cb_use(const rlx_conv_geom* g) {
    if (!rlx_simd_level() || g->h_out < 1 || g->w_out < 1) return 0;
    /* fewer channels than lanes: most of each vector would be padding (a
     * one-channel 8x8 conv took 0.50 us per call against 0.22 on the row
     * kernel) */
    if (g->c_out < RLX_DW_CB_MIN_CHANNELS) return 0;
    return g->h_out * g->w_out <= RLX_DW_CB_MAX_PLANE;
}

#if RLX_X86_DISPATCH
/* r[0..7] (row i = r[i]) transposed in place */
RLX_INLINE_AVX2 void rlx_transpose8(__m256* r) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* RH x RW outputs (rows ho.., columns wo..) of the interleaved buffers */
RLX_INLINE_AVX2 void rlx_dw_cb_tile(const float* in, ptrdiff_t Wb, const float* wv, __m256 vb, float* out,
                                    ptrdiff_t w_out, ptrdiff_t ho, ptrdiff_t wo, const int K, const int S,
                                    const int RH, const int RW) {
    __m256 acc[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < RH; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < RW; ++c) acc[r][c] = _mm256_setzero_ps();
    /* each buffer column pos = S c + kj of a tap row is loaded once and feeds every (c, kj) that reads
     * it; an output's FMAs still come in (ki, kj) order, so the bits are those of a tap-by-tap loop */
#pragma GCC unroll 5
    for (int ki = 0; ki < K; ++ki) {
#pragma GCC unroll 2
        for (int r = 0; r < RH; ++r) {
            const float* p = in + ((S * (ho + r) + ki) * Wb + S * wo) * 8;
#pragma GCC unroll 24
            for (int pos = 0; pos < S * (RW - 1) + K; ++pos) {
                const __m256 v = _mm256_load_ps(p + pos * 8);
#pragma GCC unroll 5
                for (int kj = 0; kj < K; ++kj) {
                    const int c = (pos - kj) / S;
                    if (pos < kj || (pos - kj) % S || c >= RW) continue;
                    acc[r][c] = _mm256_fmadd_ps(_mm256_loadu_ps(wv + (ki * K + kj) * 8), v, acc[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RH; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < RW; ++c)
            _mm256_store_ps(out + ((ho + r) * w_out + wo + c) * 8, _mm256_add_ps(acc[r][c], vb));
}

/* output rows ho .. ho + RH - 1 in tiles of RW columns: 7 (up to 14
 * accumulators) when w_out is a multiple of 7 (the 7/14/28/56 planes of
 * MobileNets and EfficientNets), else 8 one row at a time when w_out is a
 * multiple of 8, else 4 (the last tile overlapping the one before it, same
 * bits again), single columns when w_out < 4 */
RLX_INLINE_AVX2 void rlx_dw_cb_rows(const float* in, ptrdiff_t Wb, const float* wv, __m256 vb, float* out,
                                    ptrdiff_t w_out, ptrdiff_t ho, const int K, const int S, const int RH) {
    if (w_out % 7 == 0) {
        for (int r = 0; r < RH; ++r)
            for (ptrdiff_t wo = 0; wo < w_out; wo += 7)
                rlx_dw_cb_tile(in, Wb, wv, vb, out, w_out, ho + r, wo, K, S, 1, 7);
    } else if (w_out % 8 == 0) {
        for (int r = 0; r < RH; ++r)
            for (ptrdiff_t wo = 0; wo < w_out; wo += 8)
                rlx_dw_cb_tile(in, Wb, wv, vb, out, w_out, ho + r, wo, K, S, 1, 8);
    } else if (w_out < 4) {
        for (ptrdiff_t wo = 0; wo < w_out; ++wo) rlx_dw_cb_tile(in, Wb, wv, vb, out, w_out, ho, wo, K, S, RH, 1);
    } else {
        for (ptrdiff_t b0 = 0; b0 < w_out; b0 += 4)
            rlx_dw_cb_tile(in, Wb, wv, vb, out, w_out, ho, b0 + 4 <= w_out ? b0 : w_out - 4, K, S, RH, 4);
    }
}

/* A channel block's buffers in scratch (aligned to 64 bytes): in[Hs][Wb][L],
 * out[R][w_out][L], the K*K weight vectors wv[K*K][L] and the bias vector. */
typedef struct {
    float *in, *out, *wv, *bv;
    float* dst[16];                         /* the block's output planes, lane l = channel c0 + l */
    ptrdiff_t nr, off, Pn;                  /* the strip's output rows; its outputs [off, off + Pn) of a plane */
    ptrdiff_t n, c0;
    int cnt;                                /* the block's own channels (<= L) */
} rlx_dw_cb_strip;

/* Fills the strip's buffers: the weights and bias of the block's L channels
 * (the last block of a channel count that is not a multiple of L repeats its
 * last channel in the spare lanes), and the input rows the strip reads,
 * transposed 8 columns x 8 channels at a time into the interleaved buffer. */
RLX_INLINE_AVX2 void rlx_dw_cb_fill(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                    float* y, ptrdiff_t y_len, float* buf, const rlx_conv_geom* g,
                                    ptrdiff_t blk, ptrdiff_t R, ptrdiff_t ho0, const int K, const int S,
                                    const int L, rlx_dw_cb_strip* st, const int zmm_rows) {
    const ptrdiff_t C = g->c_out, nb = (C + L - 1) / L, n = blk / nb, c0 = (blk % nb) * L;
    const ptrdiff_t H = g->h, W = g->w, h_out = g->h_out, w_out = g->w_out, P = h_out * w_out;
    const ptrdiff_t Wb = rlx_dw_cb_wb(g), Hs_max = rlx_dw_cb_hs(g, R);
    const ptrdiff_t nr = h_out - ho0 < R ? h_out - ho0 : R, Hs = rlx_dw_cb_hs(g, nr);
    const int cnt = C - c0 < L ? (int)(C - c0) : L;
    float* in = buf;
    float* out = in + Hs_max * Wb * L;
    float* wv = out + R * w_out * L;
    float* bv = wv + K * K * L;
    const float* src[16];
    (void)x_len;
    (void)y_len;
    for (int l = 0; l < L; ++l) {
        const ptrdiff_t c = c0 + (l < cnt ? l : cnt - 1), plane = n * C + c;
        RLX_CHECK_RANGE(plane * H * W, (plane + 1) * H * W, x_len, "depthwise cb x");
        RLX_CHECK_RANGE(plane * P, (plane + 1) * P, y_len, "depthwise cb y");
        src[l] = x + plane * H * W;
        st->dst[l] = y + plane * P;
        bv[l] = bias ? bias[c] : 0.0f;
    }
    if (cnt == L) {         /* the L channels' K*K weights, transposed 8 taps x 8 channels at a time */
        __m256 t8[8];
        for (int hh = 0; hh < L; hh += 8) {
            const float* w0 = wt + (c0 + hh) * K * K;
            int t = 0;
            for (; t + 8 <= K * K; t += 8) {
                for (int l = 0; l < 8; ++l) t8[l] = _mm256_loadu_ps(w0 + l * K * K + t);
                rlx_transpose8(t8);
                for (int m = 0; m < 8; ++m) _mm256_store_ps(wv + (t + m) * L + hh, t8[m]);
            }
            for (; t < K * K; ++t)
                for (int l = 0; l < 8; ++l) wv[t * L + hh + l] = w0[l * K * K + t];
        }
    } else {
        for (int l = 0; l < L; ++l) {
            const ptrdiff_t c = c0 + (l < cnt ? l : cnt - 1);
            for (int t = 0; t < K * K; ++t) wv[t * L + l] = wt[c * K * K + t];
        }
    }
    /* buffer row i holds input row h = S ho0 - ph + i (zeros outside [0, H)),
     * columns w -> w + pw, those inside the buffer (the padding columns
     * stay 0 from the memset of the items loop) */
    const ptrdiff_t Wc = W < Wb - g->pw ? W : Wb - g->pw;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i cmask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(Wc < 8 ? Wc : 8)), lanes);
    for (ptrdiff_t i = 0; i < Hs; ++i) {
        const ptrdiff_t h = S * ho0 - g->ph + i;
        if (h < 0 || h >= H) {
            memset(in + i * Wb * L, 0, (size_t)(Wb * L) * sizeof(float));
            continue;
        }
        if (Wc <= 0) continue;
        /* a full block's rows of at least 8 columns: rlx_dw_cb_in16's zmm transposes (the caller's) */
        if (zmm_rows && cnt == L && Wc >= 8) continue;
        float* row = in + (i * Wb + g->pw) * L;
        __m256 v[8];
        for (int hh = 0; hh < L; hh += 8) {
            if (cnt == L) {     /* 8 consecutive planes: one base, stride H W */
                const float* sb = src[hh] + h * W;
                const ptrdiff_t HW = H * W;
                if (Wc < 8) {
                    for (int l = 0; l < 8; ++l) v[l] = _mm256_maskload_ps(sb + l * HW, cmask);
                    rlx_transpose8(v);
                    for (ptrdiff_t m = 0; m < Wc; ++m) _mm256_storeu_ps(row + m * L + hh, v[m]);
                    continue;
                }
                for (ptrdiff_t b0 = 0; b0 < Wc; b0 += 8) {
                    const ptrdiff_t j = b0 + 8 <= Wc ? b0 : Wc - 8;
                    for (int l = 0; l < 8; ++l) v[l] = _mm256_loadu_ps(sb + l * HW + j);
                    rlx_transpose8(v);
                    for (int m = 0; m < 8; ++m) _mm256_storeu_ps(row + (j + m) * L + hh, v[m]);
                }
                continue;
            }
            if (Wc < 8) {
                for (int l = 0; l < 8; ++l) v[l] = _mm256_maskload_ps(src[hh + l] + h * W, cmask);
                rlx_transpose8(v);
                for (ptrdiff_t m = 0; m < Wc; ++m) _mm256_storeu_ps(row + m * L + hh, v[m]);
                continue;
            }
            for (ptrdiff_t b0 = 0; b0 < Wc; b0 += 8) {
                const ptrdiff_t j = b0 + 8 <= Wc ? b0 : Wc - 8;
                for (int l = 0; l < 8; ++l) v[l] = _mm256_loadu_ps(src[hh + l] + h * W + j);
                rlx_transpose8(v);
                for (int m = 0; m < 8; ++m) _mm256_storeu_ps(row + (j + m) * L + hh, v[m]);
            }
        }
    }
    st->in = in; st->out = out; st->wv = wv; st->bv = bv;
    st->nr = nr; st->off = ho0 * w_out; st->Pn = nr * w_out;
    st->n = n; st->c0 = c0; st->cnt = cnt;
}

/* Back to planes: 8 outputs of 8 channels per transpose, then the epilogue
 * on each channel's run while it is in cache. */
RLX_INLINE_AVX2 void rlx_dw_cb_drain(const rlx_conv_geom* g, const rlx_epilogue* e, const rlx_dw_cb_strip* st,
                                     const int L) {
    const ptrdiff_t off = st->off, Pn = st->Pn, P = g->h_out * g->w_out;
    const float* out = st->out;
    const int cnt = st->cnt;
    __m256 v[8];
    for (int hh = 0; hh < cnt; hh += 8) {
        const int lc = cnt - hh < 8 ? cnt - hh : 8;
        if (Pn < 8) {
            float tmp[64];
            for (ptrdiff_t m = 0; m < 8; ++m) v[m] = _mm256_load_ps(out + (m < Pn ? m : Pn - 1) * L + hh);
            rlx_transpose8(v);
            for (int l = 0; l < lc; ++l) {
                _mm256_storeu_ps(tmp + 8 * l, v[l]);
                for (ptrdiff_t m = 0; m < Pn; ++m) st->dst[hh + l][off + m] = tmp[8 * l + m];
            }
        } else {
            if (lc == 8) {      /* 8 consecutive planes: one base, stride P */
                float* d = st->dst[hh] + off;
                for (ptrdiff_t b0 = 0; b0 < Pn; b0 += 8) {
                    const ptrdiff_t p = b0 + 8 <= Pn ? b0 : Pn - 8;
                    for (int m = 0; m < 8; ++m) v[m] = _mm256_load_ps(out + (p + m) * L + hh);
                    rlx_transpose8(v);
                    for (int l = 0; l < 8; ++l) _mm256_storeu_ps(d + l * P + p, v[l]);
                }
                continue;
            }
            for (ptrdiff_t b0 = 0; b0 < Pn; b0 += 8) {
                const ptrdiff_t p = b0 + 8 <= Pn ? b0 : Pn - 8;
                for (int m = 0; m < 8; ++m) v[m] = _mm256_load_ps(out + (p + m) * L + hh);
                rlx_transpose8(v);
                for (int l = 0; l < lc; ++l) _mm256_storeu_ps(st->dst[hh + l] + off + p, v[l]);
            }
        }
    }
    if (e)
        for (int l = 0; l < cnt; ++l) {
            const ptrdiff_t plane = st->n * g->c_out + st->c0 + l;
            if (e->res) RLX_CHECK_RANGE(plane * P + off, plane * P + off + Pn, e->res_len, "depthwise cb residual");
            rlx_epilogue_span_in(st->dst[l] + off, plane * P + off, Pn, 0.0f, e, 1);
        }
}

RLX_INLINE_AVX2 void rlx_dw_cb_block(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                     float* y, ptrdiff_t y_len, float* buf, const rlx_conv_geom* g,
                                     const rlx_epilogue* e, ptrdiff_t blk, ptrdiff_t R, ptrdiff_t ho0,
                                     const int K, const int S) {
    rlx_dw_cb_strip st;
    rlx_dw_cb_fill(x, x_len, wt, bias, y, y_len, buf, g, blk, R, ho0, K, S, 8, &st, 0);
    const __m256 vb = _mm256_loadu_ps(st.bv);
    ptrdiff_t ho = 0;
    for (; ho + 2 <= st.nr; ho += 2) rlx_dw_cb_rows(st.in, rlx_dw_cb_wb(g), st.wv, vb, st.out, g->w_out, ho, K, S, 2);
    if (ho < st.nr) rlx_dw_cb_rows(st.in, rlx_dw_cb_wb(g), st.wv, vb, st.out, g->w_out, ho, K, S, 1);
    rlx_dw_cb_drain(g, e, &st, 8);
}

RLX_TARGET_AVX2 static void rlx_dw_cb_items_avx2(const float* x, ptrdiff_t x_len, const float* wt,
                                                 const float* bias, float* y, ptrdiff_t y_len, float* buf,
                                                 ptrdiff_t buf_len, const rlx_conv_geom* g,
                                                 const rlx_epilogue* e, ptrdiff_t i0, ptrdiff_t i1) {
    const ptrdiff_t R = rlx_dw_cb_rows_per_strip(g), ns = (g->h_out + R - 1) / R;
    (void)buf_len;
    RLX_CHECK_RANGE(0, rlx_dw_cb_scratch(g), buf_len, "depthwise cb scratch");
    buf = (float*)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    /* the padding columns stay 0: strips write only the input columns */
    memset(buf, 0, (size_t)(rlx_dw_cb_hs(g, R) * rlx_dw_cb_wb(g) * 8) * sizeof(float));
    const int K = (int)g->kh, S = (int)g->sh;
    for (ptrdiff_t it = i0; it < i1; ++it) {
        const ptrdiff_t blk = it / ns, ho0 = (it % ns) * R;
        if (K == 3 && S == 1) rlx_dw_cb_block(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 3, 1);
        else if (K == 3) rlx_dw_cb_block(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 3, 2);
        else if (S == 1) rlx_dw_cb_block(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 5, 1);
        else rlx_dw_cb_block(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 5, 2);
    }
}

/* The AVX-512 level: blocks of 16 channels, RH x RW outputs of one zmm each,
 * the same taps in the same (ki, kj) order from 0 then the bias, so every
 * output has the bits of the 8-lane tiles. */
RLX_INLINE_AVX512 void rlx_dw_cb_tile16(const float* in, ptrdiff_t Wb, const float* wv, __m512 vb, float* out,
                                        ptrdiff_t w_out, ptrdiff_t ho, ptrdiff_t wo, const int K, const int S,
                                        const int RH, const int RW) {
    __m512 acc[2][8];
#pragma GCC unroll 2
    for (int r = 0; r < RH; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < RW; ++c) acc[r][c] = _mm512_setzero_ps();
    /* each buffer column pos = S c + kj of a tap row is loaded once and feeds every (c, kj) that reads
     * it; an output's FMAs still come in (ki, kj) order, so the bits are the same */
#pragma GCC unroll 5
    for (int ki = 0; ki < K; ++ki) {
#pragma GCC unroll 2
        for (int r = 0; r < RH; ++r) {
            const float* p = in + ((S * (ho + r) + ki) * Wb + S * wo) * 16;
#pragma GCC unroll 24
            for (int pos = 0; pos < S * (RW - 1) + K; ++pos) {
                const __m512 v = _mm512_load_ps(p + pos * 16);
#pragma GCC unroll 5
                for (int kj = 0; kj < K; ++kj) {
                    const int c = (pos - kj) / S;
                    if (pos < kj || (pos - kj) % S || c >= RW) continue;
                    acc[r][c] = _mm512_fmadd_ps(_mm512_load_ps(wv + (ki * K + kj) * 16), v, acc[r][c]);
                }
            }
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < RH; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < RW; ++c)
            _mm512_store_ps(out + ((ho + r) * w_out + wo + c) * 16, _mm512_add_ps(acc[r][c], vb));
}

/* rlx_dw_cb_rows' tiling on zmm tiles: with 32 registers two rows of 7 or 8
 * columns at a time */
RLX_INLINE_AVX512 void rlx_dw_cb_rows16(const float* in, ptrdiff_t Wb, const float* wv, __m512 vb, float* out,
                                        ptrdiff_t w_out, ptrdiff_t ho, const int K, const int S, const int RH) {
    if (w_out % 7 == 0) {
        for (ptrdiff_t wo = 0; wo < w_out; wo += 7) rlx_dw_cb_tile16(in, Wb, wv, vb, out, w_out, ho, wo, K, S, RH, 7);
    } else if (w_out % 8 == 0) {
        for (ptrdiff_t wo = 0; wo < w_out; wo += 8) rlx_dw_cb_tile16(in, Wb, wv, vb, out, w_out, ho, wo, K, S, RH, 8);
    } else if (w_out < 4) {
        for (ptrdiff_t wo = 0; wo < w_out; ++wo) rlx_dw_cb_tile16(in, Wb, wv, vb, out, w_out, ho, wo, K, S, RH, 1);
    } else {
        for (ptrdiff_t b0 = 0; b0 < w_out; b0 += 4)
            rlx_dw_cb_tile16(in, Wb, wv, vb, out, w_out, ho, b0 + 4 <= w_out ? b0 : w_out - 4, K, S, RH, 4);
    }
}

/* r[l] = [8 values of row l | 8 of row l + 8] -> r[m] = [column m of rows 0..7 | of rows 8..15]:
 * the 8x8 transpose on both 256-bit halves at once */
RLX_INLINE_AVX512 void rlx_transpose8x2(__m512* r) {
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    const __m512i hi = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
    const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
    const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
    const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
    const __m512 u0 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 u1 = _mm512_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 u2 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 u3 = _mm512_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 u4 = _mm512_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 u5 = _mm512_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
    const __m512 u6 = _mm512_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
    const __m512 u7 = _mm512_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
    r[0] = _mm512_permutex2var_ps(u0, lo, u4);
    r[1] = _mm512_permutex2var_ps(u1, lo, u5);
    r[2] = _mm512_permutex2var_ps(u2, lo, u6);
    r[3] = _mm512_permutex2var_ps(u3, lo, u7);
    r[4] = _mm512_permutex2var_ps(u0, hi, u4);
    r[5] = _mm512_permutex2var_ps(u1, hi, u5);
    r[6] = _mm512_permutex2var_ps(u2, hi, u6);
    r[7] = _mm512_permutex2var_ps(u3, hi, u7);
}

/* The input rows of a full 16-channel block (rows of at least 8 columns), 8
 * columns of all 16 channels per transpose, one zmm store per column: what
 * rlx_dw_cb_fill skips with zmm_rows. */
RLX_INLINE_AVX512 void rlx_dw_cb_in16(const float* x, const rlx_conv_geom* g, const rlx_dw_cb_strip* st,
                                      ptrdiff_t ho0, const int S) {
    const ptrdiff_t H = g->h, W = g->w, HW = H * W, Wb = rlx_dw_cb_wb(g), Hs = rlx_dw_cb_hs(g, st->nr);
    const ptrdiff_t Wc = W < Wb - g->pw ? W : Wb - g->pw;
    const float* sb0 = x + (st->n * g->c_out + st->c0) * HW;
    __m512 v[8];
    for (ptrdiff_t i = 0; i < Hs; ++i) {
        const ptrdiff_t h = S * ho0 - g->ph + i;
        if (h < 0 || h >= H) continue;
        const float* sb = sb0 + h * W;
        float* row = st->in + (i * Wb + g->pw) * 16;
        for (ptrdiff_t b0 = 0; b0 < Wc; b0 += 8) {
            const ptrdiff_t j = b0 + 8 <= Wc ? b0 : Wc - 8;
            for (int l = 0; l < 8; ++l)
                v[l] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(sb + l * HW + j)),
                                          _mm256_loadu_ps(sb + (l + 8) * HW + j), 1);
            rlx_transpose8x2(v);
            for (int m = 0; m < 8; ++m) _mm512_store_ps(row + (j + m) * 16, v[m]);
        }
    }
}

/* rlx_dw_cb_drain for a full 16-channel block of at least 8 outputs: 8
 * outputs of all 16 channels per transpose, then the epilogue */
RLX_INLINE_AVX512 void rlx_dw_cb_out16(const rlx_conv_geom* g, const rlx_epilogue* e, const rlx_dw_cb_strip* st) {
    const ptrdiff_t off = st->off, Pn = st->Pn, P = g->h_out * g->w_out;
    float* d = st->dst[0] + off;
    __m512 v[8];
    for (ptrdiff_t b0 = 0; b0 < Pn; b0 += 8) {
        const ptrdiff_t p = b0 + 8 <= Pn ? b0 : Pn - 8;
        for (int m = 0; m < 8; ++m) v[m] = _mm512_load_ps(st->out + (p + m) * 16);
        rlx_transpose8x2(v);
        for (int l = 0; l < 8; ++l) {
            _mm256_storeu_ps(d + l * P + p, _mm512_castps512_ps256(v[l]));
            _mm256_storeu_ps(d + (l + 8) * P + p, _mm512_extractf32x8_ps(v[l], 1));
        }
    }
    if (e)
        for (int l = 0; l < 16; ++l) {
            const ptrdiff_t plane = st->n * g->c_out + st->c0 + l;
            if (e->res) RLX_CHECK_RANGE(plane * P + off, plane * P + off + Pn, e->res_len, "depthwise cb residual");
            rlx_epilogue_span_in(st->dst[l] + off, plane * P + off, Pn, 0.0f, e, 1);
        }
}

RLX_INLINE_AVX512 void rlx_dw_cb_block16(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                                         float* y, ptrdiff_t y_len, float* buf, const rlx_conv_geom* g,
                                         const rlx_epilogue* e, ptrdiff_t blk, ptrdiff_t R, ptrdiff_t ho0,
                                         const int K, const int S) {
    rlx_dw_cb_strip st;
    rlx_dw_cb_fill(x, x_len, wt, bias, y, y_len, buf, g, blk, R, ho0, K, S, 16, &st, 1);
    const ptrdiff_t Wc = g->w < rlx_dw_cb_wb(g) - g->pw ? g->w : rlx_dw_cb_wb(g) - g->pw;
    const int full = st.cnt == 16;
    if (full && Wc >= 8) rlx_dw_cb_in16(x, g, &st, ho0, S);
    const __m512 vb = _mm512_load_ps(st.bv);
    ptrdiff_t ho = 0;
    for (; ho + 2 <= st.nr; ho += 2) rlx_dw_cb_rows16(st.in, rlx_dw_cb_wb(g), st.wv, vb, st.out, g->w_out, ho, K, S, 2);
    if (ho < st.nr) rlx_dw_cb_rows16(st.in, rlx_dw_cb_wb(g), st.wv, vb, st.out, g->w_out, ho, K, S, 1);
    if (full && st.Pn >= 8) rlx_dw_cb_out16(g, e, &st);
    else rlx_dw_cb_drain(g, e, &st, 16);
}

RLX_TARGET_AVX512 static void rlx_dw_cb_items_avx512(const float* x, ptrdiff_t x_len, const float* wt,
                                                     const float* bias, float* y, ptrdiff_t y_len, float* buf,
                                                     ptrdiff_t buf_len, const rlx_conv_geom* g,
                                                     const rlx_epilogue* e, ptrdiff_t i0, ptrdiff_t i1) {
    const ptrdiff_t R = rlx_dw_cb_rows_per_strip(g), ns = (g->h_out + R - 1) / R;
    (void)buf_len;
    RLX_CHECK_RANGE(0, rlx_dw_cb_scratch(g), buf_len, "depthwise cb scratch");
    buf = (float*)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    memset(buf, 0, (size_t)(rlx_dw_cb_hs(g, R) * rlx_dw_cb_wb(g) * 16) * sizeof(float));
    const int K = (int)g->kh, S = (int)g->sh;
    for (ptrdiff_t it = i0; it < i1; ++it) {
        const ptrdiff_t blk = it / ns, ho0 = (it % ns) * R;
        if (K == 3 && S == 1) rlx_dw_cb_block16(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 3, 1);
        else if (K == 3) rlx_dw_cb_block16(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 3, 2);
        else if (S == 1) rlx_dw_cb_block16(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 5, 1);
        else rlx_dw_cb_block16(x, x_len, wt, bias, y, y_len, buf, g, e, blk, R, ho0, 5, 2);
    }
}
/* ---- depthwise 3x3 along rows (AVX-512, stride 1) --------------------------
 * A stride-1 3x3 depthwise conv on a plane the channel-block kernel would
 * take, straight from and to NCHW, one (image, channel) plane per work item:
 * 16 output columns per zmm, 4 output rows per step.  Each input row the
 * step reads is two masked loads (32 columns from j0 - pw; the columns left
 * or right of the row, the zero padding, load 0, and masked lanes never
 * fault); tap kj's 16 columns are lanes kj.. of them (valignd), and the 9
 * weights stay in registers.  No transposes in or out, which the
 * channel-block kernel spends more time on than on its FMAs.  Every output
 * is the channel-block kernel's chain, so the bits are the same: from 0, the
 * taps in (ki, kj) order (padding taps add w * 0), then the bias, then the
 * epilogue over the plane.
 *
 * Measured against the channel-block kernel (16-channel zmm tiles), one
 * lone conv + ReLU, run_into, interleaved, 41 pairs, 1 thread (2 threads),
 * ratio of medians: 3x3 C384 14x14 1.21-1.29, C576 14x14 1.17-1.27, C192
 * 28x28 1.46-1.72 (1.39), C144 56x56 1.15-1.18 (1.22-1.58), C96 48x48 1.74
 * (1.76), C64 64x64 1.81 (2.09), C128 40x40 1.29 (1.25), C256 24x24 1.21
 * (1.16), C128 12x12 1.24 (1.13); level at 10 columns (C512 10x10 1.00) and
 * behind at 7 (C960 7x7 0.59-0.72), where 9 of 16 lanes idle; so from
 * RLX_DW_R512_MIN_W output columns.  5x5 stays on the channel-block kernel:
 * with 25 weights in registers, 4 rows' sums do not fit, and 2 rows per step
 * measured 0.82-0.93 on 14x14 and 28x28 (0.49 on 7x7).  Planes above 64x64
 * run here too, in the row kernel's order (RLX_R512_S1_EO: the
 * even and the odd kernel rows in two chains, then their sum, then the
 * bias), where it beats that kernel (rlx_dw_s1_rows, which copies each row
 * into a padded ring and runs 8-lane blocks). */
#define RLX_DW_R512_MIN_W 12

/* the lanes l < 16 whose column c0 + l lies in a row [0, W) */
static inline __mmask16 rlx_dw_r512_mask(ptrdiff_t c0, ptrdiff_t W) {
    ptrdiff_t a = -c0, b = W - c0;
    if (a < 0) a = 0;
    if (b > 16) b = 16;
    if (b <= a) return 0;
    return (__mmask16)(((1u << b) - 1u) & ~((1u << a) - 1u));
}

/* lanes kj.. (kj 0, 1 or 2, a constant once unrolled) of the 32 floats lo:hi */
RLX_INLINE_AVX512 __m512 rlx_dw_r512_shift(__m512 lo, __m512 hi, const int kj) {
    const __m512i a = _mm512_castps_si512(lo), b = _mm512_castps_si512(hi);
    if (kj == 1) return _mm512_castsi512_ps(_mm512_alignr_epi32(b, a, 1));
    if (kj == 2) return _mm512_castsi512_ps(_mm512_alignr_epi32(b, a, 2));
    return lo;
}

RLX_INLINE_AVX512 void rlx_dw_r512_step(const float* xp, const __m512* wv, __m512 vb, float* yp,
                                        const rlx_conv_geom* g, ptrdiff_t ho, ptrdiff_t j0,
                                        const __mmask16* mk, __mmask16 ms, const int K, const int RH,
                                        const int EO) {
    const ptrdiff_t H = g->h, W = g->w, Wo = g->w_out;
    __m512 acc[4], odd[4];
#pragma GCC unroll 4
    for (int r = 0; r < RH; ++r) acc[r] = odd[r] = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < RH + K - 1; ++i) {
        const ptrdiff_t hi = ho + i - g->ph;
        const int inside = hi >= 0 && hi < H;
        const float* row = xp + hi * W + j0 - g->pw;
        /* the row's 32 columns from j0 - pw (0 outside it), one masked load
         * per 16; tap kj's are lanes kj.. of them */
        const __m512 lo = inside ? _mm512_maskz_loadu_ps(mk[0], row) : _mm512_setzero_ps();
        const __m512 up = inside ? _mm512_maskz_loadu_ps(mk[1], row + 16) : _mm512_setzero_ps();
#pragma GCC unroll 5
        for (int kj = 0; kj < K; ++kj) {
            const __m512 v = rlx_dw_r512_shift(lo, up, kj);
#pragma GCC unroll 4
            for (int r = 0; r < RH; ++r) {
                const int ki = i - r;
                if (ki < 0 || ki >= K) continue;
                if (EO && (ki & 1)) odd[r] = _mm512_fmadd_ps(wv[ki * K + kj], v, odd[r]);
                else acc[r] = _mm512_fmadd_ps(wv[ki * K + kj], v, acc[r]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RH; ++r)
        _mm512_mask_storeu_ps(yp + (ho + r) * Wo + j0, ms,
                              _mm512_add_ps(EO ? _mm512_add_ps(acc[r], odd[r]) : acc[r], vb));
}

RLX_INLINE_AVX512 void rlx_dw_r512_plane(const float* xp, const float* w, float b, float* yp,
                                         const rlx_conv_geom* g, const int K, const int EO) {
    const ptrdiff_t Ho = g->h_out, Wo = g->w_out;
    const __m512 vb = _mm512_set1_ps(b);
    __m512 wv[9];
#pragma GCC unroll 9
    for (int t = 0; t < K * K; ++t) wv[t] = _mm512_set1_ps(w[t]);
    for (ptrdiff_t j0 = 0; j0 < Wo; j0 += 16) {
        const int nl = Wo - j0 < 16 ? (int)(Wo - j0) : 16;
        /* columns j0 - pw .. + 15 and + 16 .. + 31 that lie in the row */
        __mmask16 mk[2];
        mk[0] = rlx_dw_r512_mask(j0 - g->pw, g->w);
        mk[1] = rlx_dw_r512_mask(j0 + 16 - g->pw, g->w);
        const __mmask16 ms = (__mmask16)((1u << nl) - 1u);
        ptrdiff_t ho = 0;
        for (; ho + 4 <= Ho; ho += 4) rlx_dw_r512_step(xp, wv, vb, yp, g, ho, j0, mk, ms, K, 4, EO);
        for (; ho < Ho; ++ho) rlx_dw_r512_step(xp, wv, vb, yp, g, ho, j0, mk, ms, K, 1, EO);
    }
}

/* Stride 2 (3x3 or 5x5; S = 1 runs the 5x5s at stride 1; KJ: in the
 * per-plane stride-2 kernel's order, padding rows skipped), the same scheme
 * with the weights read from memory (25 of them would fill the registers):
 * 16 output columns per zmm, RH output rows per step, NB column blocks at a
 * time.  At stride 2 input row i of a step holds columns c0 = 2 j0 - pw ..
 * c0 + 47 in three masked loads A, B, C; tap kj's 16 columns c0 + kj + 2l
 * are the even lanes of A:B (kj 0), the odd ones (kj 1), and those shifted
 * up by kj / 2 lanes with the first even / odd lanes of C entering
 * (valignd; a 3x3 loads C's first column alone); at stride 1 lanes kj .. of
 * A:B.  Each output is the
 * channel-block kernel's chain: from 0, the taps in (ki, kj) order (padding
 * taps add w * 0), then the bias. */
RLX_INLINE_AVX512 void rlx_dw_r512s2_step(const float* xp, const float* w, __m512 vb, float* yp,
                                          const rlx_conv_geom* g, ptrdiff_t ho, const ptrdiff_t* j0,
                                          const __mmask16 (*mk)[3], const __mmask16* ms, const int K, const int RH,
                                          const int NB, const int S, const int KJ) {
    const ptrdiff_t H = g->h, W = g->w, Wo = g->w_out;
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __m512 acc[2][4], akj[2][4][5];
#pragma GCC unroll 2
    for (int q = 0; q < NB; ++q)
#pragma GCC unroll 4
        for (int r = 0; r < RH; ++r) acc[q][r] = _mm512_setzero_ps();
    if (KJ)
#pragma GCC unroll 2
        for (int q = 0; q < NB; ++q)
#pragma GCC unroll 4
            for (int r = 0; r < RH; ++r)
#pragma GCC unroll 5
                for (int kj = 0; kj < K; ++kj) akj[q][r][kj] = _mm512_setzero_ps();
#pragma GCC unroll 12
    for (int i = 0; i < S * (RH - 1) + K; ++i) {
        const ptrdiff_t hi = S * ho + i - g->ph;
        const int inside = hi >= 0 && hi < H;
        if (KJ && !inside) continue;        /* the per-plane kernel's order skips the padding rows */
#pragma GCC unroll 2
        for (int q = 0; q < NB; ++q) {
            const float* row = xp + hi * W + S * j0[q] - g->pw;
            const __m512 a = inside ? _mm512_maskz_loadu_ps(mk[q][0], row) : _mm512_setzero_ps();
            const __m512 b = inside ? _mm512_maskz_loadu_ps(mk[q][1], row + 16) : _mm512_setzero_ps();
            __m512 v[5];
            if (S == 1) {
                /* tap kj: lanes kj .. of a:b */
                const __m512i ai = _mm512_castps_si512(a), bi = _mm512_castps_si512(b);
                v[0] = a;
                v[1] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 1));
                v[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 2));
                if (K == 5) {
                    v[3] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 3));
                    v[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(bi, ai, 4));
                }
            } else if (K == 3) {
                /* column c0 + 32 alone in lane 0 (0 outside the row), shifted in behind tap 0's
                 * for tap 2 (3x3 C144 56x56 0.050 -> 0.046 ms against splitting C as the 5x5s do,
                 * where the two more loads this way took longer: 0.093 -> 0.095) */
                const __m512i c32 = _mm512_castps_si512(inside ? _mm512_maskz_loadu_ps(mk[q][2] & 1, row + 32)
                                                               : _mm512_setzero_ps());
                v[0] = _mm512_permutex2var_ps(a, even, b);
                v[1] = _mm512_permutex2var_ps(a, odd, b);
                v[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(c32, _mm512_castps_si512(v[0]), 1));
            } else {
                const __m512 c = inside ? _mm512_maskz_loadu_ps(mk[q][2], row + 32) : _mm512_setzero_ps();
                v[0] = _mm512_permutex2var_ps(a, even, b);
                v[1] = _mm512_permutex2var_ps(a, odd, b);
                const __m512i ce = _mm512_castps_si512(_mm512_permutexvar_ps(even, c));
                const __m512i co = _mm512_castps_si512(_mm512_permutexvar_ps(odd, c));
                v[2] = _mm512_castsi512_ps(_mm512_alignr_epi32(ce, _mm512_castps_si512(v[0]), 1));
                v[3] = _mm512_castsi512_ps(_mm512_alignr_epi32(co, _mm512_castps_si512(v[1]), 1));
                v[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(ce, _mm512_castps_si512(v[0]), 2));
            }
#pragma GCC unroll 5
            for (int kj = 0; kj < K; ++kj)
#pragma GCC unroll 4
                for (int r = 0; r < RH; ++r) {
                    const int ki = i - S * r;
                    if (ki < 0 || ki >= K) continue;
                    if (KJ) akj[q][r][kj] = _mm512_fmadd_ps(_mm512_set1_ps(w[ki * K + kj]), v[kj], akj[q][r][kj]);
                    else acc[q][r] = _mm512_fmadd_ps(_mm512_set1_ps(w[ki * K + kj]), v[kj], acc[q][r]);
                }
        }
    }
    if (KJ)
#pragma GCC unroll 2
        for (int q = 0; q < NB; ++q)
#pragma GCC unroll 4
            for (int r = 0; r < RH; ++r) {
                acc[q][r] = akj[q][r][0];
#pragma GCC unroll 4
                for (int kj = 1; kj < K; ++kj) acc[q][r] = _mm512_add_ps(acc[q][r], akj[q][r][kj]);
            }
#pragma GCC unroll 2
    for (int q = 0; q < NB; ++q)
#pragma GCC unroll 4
        for (int r = 0; r < RH; ++r)
            _mm512_mask_storeu_ps(yp + (ho + r) * Wo + j0[q], ms[q], _mm512_add_ps(acc[q][r], vb));
}

RLX_INLINE_AVX512 void rlx_dw_r512s2_plane(const float* xp, const float* w, float b, float* yp,
                                           const rlx_conv_geom* g, const int K, const int S, const int KJ) {
    const ptrdiff_t Ho = g->h_out, Wo = g->w_out;
    const __m512 vb = _mm512_set1_ps(b);
    for (ptrdiff_t jb = 0; jb < Wo; jb += KJ && K == 5 ? 16 : 32) {
        /* two blocks of 16 columns at a time (8 FMA chains), or the last one alone; one for a 5x5
         * with KJ (K chains per output) */
        const int nb = !(KJ && K == 5) && Wo - jb > 16 ? 2 : 1;
        ptrdiff_t j0[2];
        __mmask16 mk[2][3], ms[2];
        for (int q = 0; q < nb; ++q) {
            j0[q] = jb + 16 * q;
            const int nl = Wo - j0[q] < 16 ? (int)(Wo - j0[q]) : 16;
            /* columns 2 j0 - pw .. + 47 that lie in the row */
            for (int t = 0; t < 3; ++t) mk[q][t] = rlx_dw_r512_mask(S * j0[q] - g->pw + 16 * t, g->w);
            ms[q] = (__mmask16)((1u << nl) - 1u);
        }
        ptrdiff_t ho = 0;
        if (nb == 2 && KJ) {
            for (; ho + 4 <= Ho; ho += 4) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 4, 2, S, 1);
            for (; ho < Ho; ++ho) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 1, 2, S, 1);
        } else if (nb == 2) {
            for (; ho + 4 <= Ho; ho += 4) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 4, 2, S, 0);
            for (; ho < Ho; ++ho) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 1, 2, S, 0);
        } else if (KJ) {
            for (; ho + 4 <= Ho; ho += 4) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 4, 1, S, 1);
            for (; ho < Ho; ++ho) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 1, 1, S, 1);
        } else {
            for (; ho + 4 <= Ho; ho += 4) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 4, 1, S, 0);
            for (; ho < Ho; ++ho) rlx_dw_r512s2_step(xp, w, vb, yp, g, ho, j0, mk, ms, K, 1, 1, S, 0);
        }
    }
}

#endif

/* What rlx_dw_r512_use picks (0: another kernel): the stride-1 3x3s in the
 * channel-block order or the row kernel's (EO); the stride-2 3x3s and 5x5s
 * in the channel-block order or the per-plane kernel's (KJ); the stride-1
 * 5x5s on planes 4 KiB apart in the channel-block order. */
enum {
    RLX_R512_S1_CB = 1, RLX_R512_S1_EO, RLX_R512_S2_CB3, RLX_R512_S2_CB5, RLX_R512_S1_CB5, RLX_R512_S2_KJ3,
    RLX_R512_S2_KJ5
};

#if RLX_X86_DISPATCH
RLX_TARGET_AVX512 static void rlx_dw_r512_items(const float* x, ptrdiff_t x_len, const float* wt,
                                                const float* bias, float* y, ptrdiff_t y_len,
                                                const rlx_conv_geom* g, const rlx_epilogue* e, ptrdiff_t i0,
                                                ptrdiff_t i1, int mode) {
    const ptrdiff_t HW = g->h * g->w, P = g->h_out * g->w_out;
    (void)x_len;
    (void)y_len;
    for (ptrdiff_t it = i0; it < i1; ++it) {
        const ptrdiff_t c = it % g->c_out;
        RLX_CHECK_RANGE(it * HW, (it + 1) * HW, x_len, "depthwise rows x");
        RLX_CHECK_RANGE(it * P, (it + 1) * P, y_len, "depthwise rows y");
        const float b = bias ? bias[c] : 0.0f;
        const float* xp = x + it * HW;
        float* yp = y + it * P;
        switch (mode) {
        case RLX_R512_S2_CB3: rlx_dw_r512s2_plane(xp, wt + c * 9, b, yp, g, 3, 2, 0); break;
        case RLX_R512_S2_CB5: rlx_dw_r512s2_plane(xp, wt + c * 25, b, yp, g, 5, 2, 0); break;
        case RLX_R512_S1_CB5: rlx_dw_r512s2_plane(xp, wt + c * 25, b, yp, g, 5, 1, 0); break;
        case RLX_R512_S2_KJ3: rlx_dw_r512s2_plane(xp, wt + c * 9, b, yp, g, 3, 2, 1); break;
        case RLX_R512_S2_KJ5: rlx_dw_r512s2_plane(xp, wt + c * 25, b, yp, g, 5, 2, 1); break;
        case RLX_R512_S1_EO: rlx_dw_r512_plane(xp, wt + c * 9, b, yp, g, 3, 1); break;
        default: rlx_dw_r512_plane(xp, wt + c * 9, b, yp, g, 3, 0); break;
        }
        if (e) {
            if (e->res) RLX_CHECK_RANGE(it * P, (it + 1) * P, e->res_len, "depthwise rows residual");
            rlx_epilogue_span_in(y + it * P, it * P, P, 0.0f, e, 1);
        }
    }
}
#endif

/* Nonzero (a RLX_R512_* mode): this depthwise geometry runs rlx_dw_r512_run
 * (AVX-512).  RLX_R512_S1_CB5 for a 5x5 at stride 1 on a channel-block plane (its bits) of at least 32 output
 * columns whose planes lie a multiple of 4 KiB apart: there the channel-block
 * transposes' 16 loads and stores, one per plane, share their L1 sets (C64
 * 32x32 0.064 ms against 0.047-0.053 here, C32 64x64 0.139 against 0.093;
 * elsewhere the channel blocks stay ahead, C48 48x48 0.072 against 0.077).
 * At stride 2, on a plane the channel-block kernel would take (its bits):
 * RLX_R512_S2_CB3 for a 3x3 of at least RLX_DW_R512S2_MIN_W3 output columns,
 * RLX_R512_S2_CB5 for a 5x5 of at least RLX_DW_R512S2_MIN_W5 whose 16-column
 * blocks are at least 85% outputs (measurements: the CHANGELOG);
 * RLX_R512_S2_KJ3 and RLX_R512_S2_KJ5 for the same on a larger
 * plane with rows of at most RLX_DW_R512S2_MAX_W inputs and at least
 * RLX_DW_R512_MIN_PLANES planes (the 3x3s an input of at most
 * RLX_DW_R512_MAX_FLOATS), in the per-plane stride-2 kernel's order
 * (KJ: a chain per kernel column over the kernel rows inside the input,
 * then their sum in kj order, then the bias: what AVX2 runs there).  At
 * stride 1, 3x3, at least
 * RLX_DW_R512_MIN_W output columns: RLX_R512_S1_CB on a plane the
 * channel-block kernel would take (its bits: one chain per output);
 * RLX_R512_S1_EO on a
 * larger plane whose rows are at most RLX_DW_R512_MAX_W inputs wide, an input
 * of at most RLX_DW_R512_MAX_FLOATS, with at
 * least RLX_DW_R512_MIN_PLANES (image, channel) planes to spread over the
 * threads (the stride-1 row kernel's bits: the even and the odd kernel rows
 * in two chains, as on the AVX2 level, where that kernel runs them).  Against
 * the row kernel there, 1 thread, A/B: see the CHANGELOG.  Wider rows stay on
 * the row kernel: a column strip walks rows 4 KiB apart at W 1024, which
 * share their L1 sets (C4 1024x1024 4.5 ms against 2.3); fewer planes too,
 * since whole planes are the work units here. */
#define RLX_DW_R512_MAX_W 384
/* ... and, for the 3x3s on those larger planes, inputs of at most 4 MiB: the
 * column strips read a plane's rows a few lines at a time, which the
 * hardware prefetch serves poorly from beyond the L2.  Inputs flushed from
 * the caches between runs, 1 thread: C128 112x112 stride 1 0.46-0.49 ms on
 * the row kernel against 0.62-0.83 here, C32 224x224 stride 2 0.48-0.64
 * against 0.54-0.76 (the 5x5s stay ahead: C32 224x224 0.70-1.24 against
 * 0.57-1.03), while C32 112x112 stride 1 ran 0.113 against 0.100. */
#define RLX_DW_R512_MAX_FLOATS (1 << 20)
#define RLX_DW_R512_MIN_PLANES 8
#define RLX_DW_R512S2_MIN_W3 10
#define RLX_DW_R512S2_MIN_W5 14
#define RLX_DW_R512S2_MAX_W 512
static int rlx_dw_r512_use(const rlx_conv_geom* g) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level() >= 2 && g->sh == 2 && g->sw == 2 && rlx_dw_cb_use(g)) {
        /* stride 2 on a channel-block plane: 3x3 from 10 output columns; 5x5 where at least 85% of the
         * blocks' lanes are outputs (a 16-block and a few columns ran behind the channel blocks) */
        const ptrdiff_t Wo = g->w_out, lanes = (Wo + 15) / 16 * 16;
        if (g->kh == 3 && Wo >= RLX_DW_R512S2_MIN_W3) return RLX_R512_S2_CB3;
        if (g->kh == 5 && Wo >= RLX_DW_R512S2_MIN_W5 && 100 * Wo >= 85 * lanes) return RLX_R512_S2_CB5;
        return 0;
    }
    if (rlx_simd_level() >= 2 && g->sh == 2 && g->sw == 2 && g->w <= RLX_DW_R512S2_MAX_W
        && g->n * g->c_out >= RLX_DW_R512_MIN_PLANES) {
        /* stride 2 on larger planes, in the per-plane stride-2 kernel's order */
        const ptrdiff_t Wo = g->w_out, lanes = (Wo + 15) / 16 * 16;
        if (g->kh == 3 && Wo >= RLX_DW_R512S2_MIN_W3 && g->n * g->c_out * g->h * g->w <= RLX_DW_R512_MAX_FLOATS)
            return RLX_R512_S2_KJ3;
        if (g->kh == 5 && Wo >= RLX_DW_R512S2_MIN_W5 && 100 * Wo >= 85 * lanes) return RLX_R512_S2_KJ5;
        return 0;
    }
    if (rlx_simd_level() >= 2 && g->sh == 1 && g->sw == 1 && g->kh == 5 && rlx_dw_cb_use(g)
        && (g->h * g->w) % 1024 == 0 && g->w_out >= 32)
        return RLX_R512_S1_CB5;
    if (rlx_simd_level() < 2 || g->sh != 1 || g->sw != 1 || g->kh != 3 || g->w_out < RLX_DW_R512_MIN_W) return 0;
    if (rlx_dw_cb_use(g)) return RLX_R512_S1_CB;
    return g->w <= RLX_DW_R512_MAX_W && g->n * g->c_out >= RLX_DW_R512_MIN_PLANES
           && g->n * g->c_out * g->h * g->w <= RLX_DW_R512_MAX_FLOATS ? RLX_R512_S1_EO : 0;
#else
    (void)g;
    return 0;
#endif
}

/* Planes [i0, i1) ((image, channel), image-major) of a depthwise conv that
 * rlx_dw_r512_use admits; bias fused, then the epilogue e (NULL: none) on
 * each plane. */
static void rlx_dw_r512_run(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                            float* y, ptrdiff_t y_len, const rlx_conv_geom* g, const rlx_epilogue* e,
                            ptrdiff_t i0, ptrdiff_t i1) {
#if RLX_X86_DISPATCH
    rlx_dw_r512_items(x, x_len, wt, bias, y, y_len, g, e, i0, i1, rlx_dw_r512_use(g));
#else
    (void)x; (void)x_len; (void)wt; (void)bias; (void)y; (void)y_len; (void)g; (void)e; (void)i0; (void)i1;
#endif
}

/* Items [i0, i1) (rlx_dw_cb_items: item i is strip i % ns of channel block
 * i / ns, block b being image b / ceil(C/8), channels 8 (b % ceil(C/8)) ..)
 * of a depthwise conv that rlx_dw_cb_use admits; bias fused, then the
 * epilogue e (NULL: none) on each strip's outputs. */
static void rlx_dw_cb_run(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                          float* y, ptrdiff_t y_len, float* buf, ptrdiff_t buf_len,
                          const rlx_conv_geom* g, const rlx_epilogue* e, ptrdiff_t i0, ptrdiff_t i1) {
    if (i0 >= i1) return;
#if RLX_X86_DISPATCH
    if (rlx_simd_level() >= 2)
        rlx_dw_cb_items_avx512(x, x_len, wt, bias, y, y_len, buf, buf_len, g, e, i0, i1);
    else
        rlx_dw_cb_items_avx2(x, x_len, wt, bias, y, y_len, buf, buf_len, g, e, i0, i1);
#else
    (void)x; (void)x_len; (void)wt; (void)bias; (void)y; (void)y_len; (void)buf; (void)buf_len;
    (void)g; (void)e;
#endif
}
/* ------------------------------------------------------------------------- */
/* Winograd F(2x2,3x3) transforms over one block of output tiles.            */
/*   V[p, ci, tl] (p = 0..15, stride c_in*tb between p) from 4x4 input tiles  */
/*   y tiles from M[p, co, tl]                                               */
/* Tiles are numbered image-major, then tile row, then tile column; a block   */
/* is processed in runs of tiles sharing a tile row, whose interior part is a */
/* unit-stride loop over tile columns the compiler vectorises.                */
/* ------------------------------------------------------------------------- */
RLX_INLINE void rlx_wino_in_tile(const float* restrict xp, const rlx_conv_geom* g, ptrdiff_t h0,
                                 ptrdiff_t w0, int inside, float d[16]) {
    if (inside) {
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) d[4 * i + j] = xp[(h0 + i) * g->w + w0 + j];
    } else {
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 4; ++j) {
                ptrdiff_t hh = h0 + i, ww = w0 + j;
                d[4 * i + j] = (hh >= 0 && hh < g->h && ww >= 0 && ww < g->w) ? xp[hh * g->w + ww] : 0.0f;
            }
    }
}

RLX_INLINE void rlx_wino_in_store(const float d[16], float* restrict vb, ptrdiff_t pstride) {
    float t[16];
    for (int j = 0; j < 4; ++j) {            /* t = B^T d */
        t[j] = d[j] - d[8 + j];
        t[4 + j] = d[4 + j] + d[8 + j];
        t[8 + j] = d[8 + j] - d[4 + j];
        t[12 + j] = d[4 + j] - d[12 + j];
    }
    for (int i = 0; i < 4; ++i) {            /* v = t B */
        vb[(4 * i + 0) * pstride] = t[4 * i] - t[4 * i + 2];
        vb[(4 * i + 1) * pstride] = t[4 * i + 1] + t[4 * i + 2];
        vb[(4 * i + 2) * pstride] = t[4 * i + 2] - t[4 * i + 1];
        vb[(4 * i + 3) * pstride] = t[4 * i + 1] - t[4 * i + 3];
    }
}

RLX_INLINE void rlx_wino_in_interior(const float* restrict r0, ptrdiff_t W, float* restrict o,
                                     ptrdiff_t pstride, ptrdiff_t a, ptrdiff_t b) {
    /* Tiles a..b-1 of one tile row, all fully inside: o[p*pstride + tx] = V_p. */
    const float* restrict r1 = r0 + W;
    const float* restrict r2 = r1 + W;
    const float* restrict r3 = r2 + W;
    for (ptrdiff_t tx = a; tx < b; ++tx) {
        const ptrdiff_t c = 2 * tx;
        float t00 = r0[c] - r2[c], t01 = r0[c + 1] - r2[c + 1], t02 = r0[c + 2] - r2[c + 2], t03 = r0[c + 3] - r2[c + 3];
        float t10 = r1[c] + r2[c], t11 = r1[c + 1] + r2[c + 1], t12 = r1[c + 2] + r2[c + 2], t13 = r1[c + 3] + r2[c + 3];
        float t20 = r2[c] - r1[c], t21 = r2[c + 1] - r1[c + 1], t22 = r2[c + 2] - r1[c + 2], t23 = r2[c + 3] - r1[c + 3];
        float t30 = r1[c] - r3[c], t31 = r1[c + 1] - r3[c + 1], t32 = r1[c + 2] - r3[c + 2], t33 = r1[c + 3] - r3[c + 3];
        o[0 * pstride + tx] = t00 - t02;  o[1 * pstride + tx] = t01 + t02;
        o[2 * pstride + tx] = t02 - t01;  o[3 * pstride + tx] = t01 - t03;
        o[4 * pstride + tx] = t10 - t12;  o[5 * pstride + tx] = t11 + t12;
        o[6 * pstride + tx] = t12 - t11;  o[7 * pstride + tx] = t11 - t13;
        o[8 * pstride + tx] = t20 - t22;  o[9 * pstride + tx] = t21 + t22;
        o[10 * pstride + tx] = t22 - t21; o[11 * pstride + tx] = t21 - t23;
        o[12 * pstride + tx] = t30 - t32; o[13 * pstride + tx] = t31 + t32;
        o[14 * pstride + tx] = t32 - t31; o[15 * pstride + tx] = t31 - t33;
    }
}

#if RLX_X86_DISPATCH
/* 8 tiles at a time: each row's columns 2tx+j (j = 0..3) for 8 consecutive
 * tiles are the even/odd lanes of two 16-float windows, one shifted by 2. */
RLX_TARGET_AVX2 static inline void rlx_deinterleave8(const float* p, __m256* even, __m256* odd) {
    __m256 lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
    __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
    __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    *even = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
    *odd = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0)));
}

RLX_TARGET_AVX2 static ptrdiff_t rlx_wino_in_wide_avx2(const float* r0, ptrdiff_t W, float* o,
                                                       ptrdiff_t pstride, ptrdiff_t a, ptrdiff_t b) {
    const float* r[4] = {r0, r0 + W, r0 + 2 * W, r0 + 3 * W};
    ptrdiff_t tx = a;
    for (; tx + 8 <= b; tx += 8) {
        __m256 d[4][4];
        for (int i = 0; i < 4; ++i) {
            rlx_deinterleave8(r[i] + 2 * tx, &d[i][0], &d[i][1]);
            rlx_deinterleave8(r[i] + 2 * tx + 2, &d[i][2], &d[i][3]);
        }
        __m256 t[4][4];
        for (int j = 0; j < 4; ++j) {
            t[0][j] = _mm256_sub_ps(d[0][j], d[2][j]);
            t[1][j] = _mm256_add_ps(d[1][j], d[2][j]);
            t[2][j] = _mm256_sub_ps(d[2][j], d[1][j]);
            t[3][j] = _mm256_sub_ps(d[1][j], d[3][j]);
        }
        for (int i = 0; i < 4; ++i) {
            float* q = o + (4 * i) * pstride + tx;
            _mm256_storeu_ps(q, _mm256_sub_ps(t[i][0], t[i][2]));
            _mm256_storeu_ps(q + pstride, _mm256_add_ps(t[i][1], t[i][2]));
            _mm256_storeu_ps(q + 2 * pstride, _mm256_sub_ps(t[i][2], t[i][1]));
            _mm256_storeu_ps(q + 3 * pstride, _mm256_sub_ps(t[i][1], t[i][3]));
        }
    }
    return tx;
}

RLX_TARGET_AVX2 static ptrdiff_t rlx_wino_out_wide_avx2(const float* a, ptrdiff_t pstride, float* y0,
                                                        float* y1, float b, ptrdiff_t tx0, ptrdiff_t full) {
    const __m256 vb = _mm256_set1_ps(b);
    ptrdiff_t tx = tx0;
    for (; tx + 8 <= full; tx += 8) {
        __m256 m[16];
        for (int k = 0; k < 16; ++k) m[k] = _mm256_loadu_ps(a + k * pstride + tx);
        __m256 s[4], u[4];
        for (int p = 0; p < 4; ++p) {
            s[p] = _mm256_add_ps(_mm256_add_ps(m[p], m[4 + p]), m[8 + p]);
            u[p] = _mm256_sub_ps(_mm256_sub_ps(m[4 + p], m[8 + p]), m[12 + p]);
        }
        __m256 e0 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s[0], s[1]), s[2]), vb);
        __m256 o0 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(s[1], s[2]), s[3]), vb);
        __m256 e1 = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(u[0], u[1]), u[2]), vb);
        __m256 o1 = _mm256_add_ps(_mm256_sub_ps(_mm256_sub_ps(u[1], u[2]), u[3]), vb);
        __m256 lo = _mm256_unpacklo_ps(e0, o0), hi = _mm256_unpackhi_ps(e0, o0);
        _mm256_storeu_ps(y0 + 2 * tx, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(y0 + 2 * tx + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
        lo = _mm256_unpacklo_ps(e1, o1);
        hi = _mm256_unpackhi_ps(e1, o1);
        _mm256_storeu_ps(y1 + 2 * tx, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(y1 + 2 * tx + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    return tx;
}
#define RLX_WINO_IN_WIDE(r0, W, o, ps, a, b) (rlx_simd_level() ? rlx_wino_in_wide_avx2(r0, W, o, ps, a, b) : (a))
#define RLX_WINO_OUT_WIDE(a, ps, y0, y1, bias, tx0, full) \
    (rlx_simd_level() ? rlx_wino_out_wide_avx2(a, ps, y0, y1, bias, tx0, full) : (tx0))
#else
#define RLX_WINO_IN_WIDE(r0, W, o, ps, a, b) (a)
#define RLX_WINO_OUT_WIDE(a, ps, y0, y1, bias, tx0, full) (tx0)
#endif

RLX_INLINE void rlx_wino_input_body(const float* restrict x, ptrdiff_t x_len, float* restrict v,
                                    const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb,
                                    ptrdiff_t pstride) {
    const ptrdiff_t tw = (g->w_out + 1) / 2;
    const ptrdiff_t tiles_img = ((g->h_out + 1) / 2) * tw;
    const ptrdiff_t plane = g->h * g->w, W = g->w;
    (void)x_len;
    for (ptrdiff_t ci = 0; ci < g->c_in; ++ci) {
        float* restrict vc = v + ci * tb;
        ptrdiff_t tl = 0;
        while (tl < cnt) {
            const ptrdiff_t tile = t0 + tl, ni = tile / tiles_img, rem = tile % tiles_img;
            const ptrdiff_t ty = rem / tw, tx0 = rem % tw;
            ptrdiff_t run = tw - tx0;
            if (run > cnt - tl) run = cnt - tl;
            const float* restrict xp = x + (ni * g->c_in + ci) * plane;
            RLX_CHECK_RANGE((ni * g->c_in + ci) * plane, (ni * g->c_in + ci + 1) * plane, x_len, "winograd x");
            const ptrdiff_t h0 = 2 * ty - g->ph;
            /* tile columns [a, b) whose 4x4 patch is fully inside the image */
            ptrdiff_t a = tx0 + run, b = tx0 + run;
            if (h0 >= 0 && h0 + 4 <= g->h && W >= 4) {
                a = (g->pw + 1) / 2;
                b = (W - 4 + g->pw) / 2 + 1;
                if (a < tx0) a = tx0;
                if (b > tx0 + run) b = tx0 + run;
                if (b < a) b = a;
            }
            float d[16];
            for (ptrdiff_t tx = tx0; tx < a; ++tx) {
                rlx_wino_in_tile(xp, g, h0, 2 * tx - g->pw, 0, d);
                rlx_wino_in_store(d, vc + tl + tx - tx0, pstride);
            }
            {
                const float* r0 = xp + h0 * W - g->pw;
                ptrdiff_t tx = RLX_WINO_IN_WIDE(r0, W, vc + tl - tx0, pstride, a, b);
                rlx_wino_in_interior(r0, W, vc + tl - tx0, pstride, tx, b);
            }
            for (ptrdiff_t tx = b; tx < tx0 + run; ++tx) {
                rlx_wino_in_tile(xp, g, h0, 2 * tx - g->pw, 0, d);
                rlx_wino_in_store(d, vc + tl + tx - tx0, pstride);
            }
            tl += run;
        }
    }
}

RLX_INLINE void rlx_wino_output_body(const float* restrict m, float* restrict y, ptrdiff_t y_len,
                                     const float* restrict bias, const rlx_epilogue* epi,
                                     const rlx_conv_geom* g,
                                     ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t pstride, int avx2) {
    const ptrdiff_t tw = (g->w_out + 1) / 2;
    const ptrdiff_t tiles_img = ((g->h_out + 1) / 2) * tw;
    const ptrdiff_t Wo = g->w_out, Ho = g->h_out;
    (void)y_len;
    for (ptrdiff_t co = 0; co < g->c_out; ++co) {
        const float b = bias ? bias[co] : 0.0f;
        const float* restrict mc = m + co * tb;
        ptrdiff_t tl = 0;
        while (tl < cnt) {
            const ptrdiff_t tile = t0 + tl, ni = tile / tiles_img, rem = tile % tiles_img;
            const ptrdiff_t ty = rem / tw, tx0 = rem % tw;
            ptrdiff_t run = tw - tx0;
            if (run > cnt - tl) run = cnt - tl;
            const ptrdiff_t ho0 = 2 * ty;
            float* restrict y0 = y + ((ni * g->c_out + co) * Ho + ho0) * Wo;
            RLX_CHECK_RANGE(((ni * g->c_out + co) * Ho + ho0) * Wo, ((ni * g->c_out + co) * Ho + ho0 + (ho0 + 1 < Ho ? 2 : 1)) * Wo,
                            y_len, "winograd y");
            const float* restrict a = mc + tl - tx0;
            /* full 2x2 tiles: columns tx with 2*tx + 1 < Wo, and a second row */
            ptrdiff_t full = (ho0 + 1 < Ho) ? Wo / 2 : 0;
            if (full > tx0 + run) full = tx0 + run;
            if (full < tx0) full = tx0;
            float* restrict y1 = y0 + Wo;
            for (ptrdiff_t tx = RLX_WINO_OUT_WIDE(a, pstride, y0, y1, b, tx0, full); tx < full; ++tx) {
                float s0 = a[0 * pstride + tx] + a[4 * pstride + tx] + a[8 * pstride + tx];
                float s1 = a[1 * pstride + tx] + a[5 * pstride + tx] + a[9 * pstride + tx];
                float s2 = a[2 * pstride + tx] + a[6 * pstride + tx] + a[10 * pstride + tx];
                float s3 = a[3 * pstride + tx] + a[7 * pstride + tx] + a[11 * pstride + tx];
                float u0 = a[4 * pstride + tx] - a[8 * pstride + tx] - a[12 * pstride + tx];
                float u1 = a[5 * pstride + tx] - a[9 * pstride + tx] - a[13 * pstride + tx];
                float u2 = a[6 * pstride + tx] - a[10 * pstride + tx] - a[14 * pstride + tx];
                float u3 = a[7 * pstride + tx] - a[11 * pstride + tx] - a[15 * pstride + tx];
                y0[2 * tx] = s0 + s1 + s2 + b;
                y0[2 * tx + 1] = s1 - s2 - s3 + b;
                y1[2 * tx] = u0 + u1 + u2 + b;
                y1[2 * tx + 1] = u1 - u2 - u3 + b;
            }
            for (ptrdiff_t tx = full; tx < tx0 + run; ++tx) {   /* clipped edge tiles */
                float s[8];
                for (int p = 0; p < 4; ++p) {
                    s[p] = a[p * pstride + tx] + a[(4 + p) * pstride + tx] + a[(8 + p) * pstride + tx];
                    s[4 + p] = a[(4 + p) * pstride + tx] - a[(8 + p) * pstride + tx] - a[(12 + p) * pstride + tx];
                }
                const ptrdiff_t wo0 = 2 * tx;
                y0[wo0] = s[0] + s[1] + s[2] + b;
                if (wo0 + 1 < Wo) y0[wo0 + 1] = s[1] - s[2] - s[3] + b;
                if (ho0 + 1 < Ho) {
                    y1[wo0] = s[4] + s[5] + s[6] + b;
                    if (wo0 + 1 < Wo) y1[wo0 + 1] = s[5] - s[6] - s[7] + b;
                }
            }
            if (epi) {
                /* residual and activation on the rows of this run, just written
                 * (the bias is already in) */
                const ptrdiff_t c0 = 2 * tx0;
                const ptrdiff_t c1 = 2 * (tx0 + run) < Wo ? 2 * (tx0 + run) : Wo;
                const ptrdiff_t off0 = y0 - y;
                RLX_CHECK_RANGE(off0 + c0, off0 + c1, epi->res ? epi->res_len : y_len, "winograd residual");
                rlx_epilogue_span_in(y0 + c0, off0 + c0, c1 - c0, 0.0f, epi, avx2);
                if (ho0 + 1 < Ho) {
                    RLX_CHECK_RANGE(off0 + Wo + c0, off0 + Wo + c1, epi->res ? epi->res_len : y_len,
                                    "winograd residual");
                    rlx_epilogue_span_in(y1 + c0, off0 + Wo + c0, c1 - c0, 0.0f, epi, avx2);
                }
            }
            tl += run;
        }
    }
}

static void rlx_wino_input_base(const float* x, ptrdiff_t x_len, float* v, const rlx_conv_geom* g,
                                ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    rlx_wino_input_body(x, x_len, v, g, t0, cnt, tb, ps);
}
RLX_TARGET_AVX2 static void rlx_wino_input_avx2(const float* x, ptrdiff_t x_len, float* v,
                                                const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt,
                                                ptrdiff_t tb, ptrdiff_t ps) {
    rlx_wino_input_body(x, x_len, v, g, t0, cnt, tb, ps);
}
static void rlx_wino_input(const float* x, ptrdiff_t x_len, float* v, const rlx_conv_geom* g,
                           ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    if (rlx_simd_level()) rlx_wino_input_avx2(x, x_len, v, g, t0, cnt, tb, ps);
    else rlx_wino_input_base(x, x_len, v, g, t0, cnt, tb, ps);
}

static void rlx_wino_output_base(const float* m, float* y, ptrdiff_t y_len, const float* bias,
                                 const rlx_epilogue* epi, const rlx_conv_geom* g, ptrdiff_t t0,
                                 ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    rlx_wino_output_body(m, y, y_len, bias, epi, g, t0, cnt, tb, ps, 0);
}
RLX_TARGET_AVX2 static void rlx_wino_output_avx2(const float* m, float* y, ptrdiff_t y_len,
                                                 const float* bias, const rlx_epilogue* epi,
                                                 const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt,
                                                 ptrdiff_t tb, ptrdiff_t ps) {
    rlx_wino_output_body(m, y, y_len, bias, epi, g, t0, cnt, tb, ps, 1);
}
/* epi: NULL, or the residual/activation to apply to each run of tiles as it
 * is written. */
static void rlx_wino_output(const float* m, float* y, ptrdiff_t y_len, const float* bias,
                            const rlx_epilogue* epi, const rlx_conv_geom* g, ptrdiff_t t0,
                            ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    if (rlx_simd_level()) rlx_wino_output_avx2(m, y, y_len, bias, epi, g, t0, cnt, tb, ps);
    else rlx_wino_output_base(m, y, y_len, bias, epi, g, t0, cnt, tb, ps);
}

/* ------------------------------------------------------------------------- */
/* Winograd F(4x4,3x3) (Lavin & Gray, interpolation points 0, +-1, +-2, inf)  */
/* over one block of output tiles: 6x6 input tiles at stride 4 -> 4x4 outputs. */
/*   V[p, ci, tl] (p = 6*i + j, i the row index) = (B^T d B)[i][j]             */
/*   y tile = A^T M A, M[p, co, tl]                                           */
/*   B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0;         */
/*          0 2 -1 -2 1 0; 0 4 0 -5 0 1]                                      */
/*   A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]          */
/* Tiles are numbered as in F(2x2,3x3) above.  The AVX2 variant transforms   */
/* 8 tiles of a tile row at a time: inputs from a zero-padded copy of the six */
/* rows, full output tiles straight into y and clipped ones via a buffer.     */
/* ------------------------------------------------------------------------- */
#define RLX_W4_BT(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) do {        \
        const float a_ = (d4) - 4.0f * (d2), b_ = (d3) - 4.0f * (d1);          \
        const float c_ = (d4) - (d2), e_ = 2.0f * ((d3) - (d1));               \
        o0 = 4.0f * (d0) - 5.0f * (d2) + (d4);                                 \
        o1 = a_ + b_; o2 = a_ - b_; o3 = c_ + e_; o4 = c_ - e_;                \
        o5 = 4.0f * (d1) - 5.0f * (d3) + (d5);                                 \
    } while (0)

#define RLX_W4_AT(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3) do {                 \
        const float a_ = (m1) + (m2), b_ = (m1) - (m2);                        \
        const float c_ = (m3) + (m4), e_ = (m3) - (m4);                        \
        o0 = (m0) + a_ + c_; o1 = b_ + 2.0f * e_;                              \
        o2 = a_ + 4.0f * c_; o3 = b_ + 8.0f * e_ + (m5);                       \
    } while (0)

/* One 6x6 input tile whose top-left input pixel is (h0, w0), zeros outside
 * the image, transformed and stored at vb[p * pstride]. */
RLX_INLINE void rlx_w4_in_tile(const float* restrict xp, const rlx_conv_geom* g, ptrdiff_t h0,
                               ptrdiff_t w0, int inside, float* restrict vb, ptrdiff_t pstride) {
    float d[36], t[36];
    if (inside) {
        for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) d[6 * i + j] = xp[(h0 + i) * g->w + w0 + j];
    } else {
        for (int i = 0; i < 6; ++i)
            for (int j = 0; j < 6; ++j) {
                ptrdiff_t hh = h0 + i, ww = w0 + j;
                d[6 * i + j] = (hh >= 0 && hh < g->h && ww >= 0 && ww < g->w) ? xp[hh * g->w + ww] : 0.0f;
            }
    }
    for (int i = 0; i < 6; ++i)              /* t = d B (rows) */
        RLX_W4_BT(d[6 * i], d[6 * i + 1], d[6 * i + 2], d[6 * i + 3], d[6 * i + 4], d[6 * i + 5],
                  t[6 * i], t[6 * i + 1], t[6 * i + 2], t[6 * i + 3], t[6 * i + 4], t[6 * i + 5]);
    for (int j = 0; j < 6; ++j) {            /* v = B^T t (columns) */
        float v0, v1, v2, v3, v4, v5;
        RLX_W4_BT(t[j], t[6 + j], t[12 + j], t[18 + j], t[24 + j], t[30 + j], v0, v1, v2, v3, v4, v5);
        vb[(0 + j) * pstride] = v0;  vb[(6 + j) * pstride] = v1;  vb[(12 + j) * pstride] = v2;
        vb[(18 + j) * pstride] = v3; vb[(24 + j) * pstride] = v4; vb[(30 + j) * pstride] = v5;
    }
}

/* One output tile from a[p * pstride] (+ bias), clipped to rows < nr and
 * columns < nc of y0 (row stride Wo). */
RLX_INLINE void rlx_w4_out_tile(const float* restrict a, ptrdiff_t pstride, float* restrict y0,
                                ptrdiff_t Wo, float b, int nr, int nc) {
    float s[24];
    for (int j = 0; j < 6; ++j)              /* s = A^T m (columns) */
        RLX_W4_AT(a[j * pstride], a[(6 + j) * pstride], a[(12 + j) * pstride], a[(18 + j) * pstride],
                  a[(24 + j) * pstride], a[(30 + j) * pstride], s[j], s[6 + j], s[12 + j], s[18 + j]);
    for (int r = 0; r < nr; ++r) {           /* y = s A (rows) */
        float o[4];
        RLX_W4_AT(s[6 * r], s[6 * r + 1], s[6 * r + 2], s[6 * r + 3], s[6 * r + 4], s[6 * r + 5],
                  o[0], o[1], o[2], o[3]);
        for (int c = 0; c < nc; ++c) y0[r * Wo + c] = o[c] + b;
    }
}

#if RLX_X86_DISPATCH
/* Lane-wise 4x4 transpose of four vectors, each 128-bit half separately. */
#define RLX_TRANSPOSE4_HALVES(a0, a1, a2, a3, o0, o1, o2, o3) do {                         \
        const __m256 t0_ = _mm256_unpacklo_ps(a0, a1), t1_ = _mm256_unpackhi_ps(a0, a1);    \
        const __m256 t2_ = _mm256_unpacklo_ps(a2, a3), t3_ = _mm256_unpackhi_ps(a2, a3);    \
        o0 = _mm256_shuffle_ps(t0_, t2_, _MM_SHUFFLE(1, 0, 1, 0));                          \
        o1 = _mm256_shuffle_ps(t0_, t2_, _MM_SHUFFLE(3, 2, 3, 2));                          \
        o2 = _mm256_shuffle_ps(t1_, t3_, _MM_SHUFFLE(1, 0, 1, 0));                          \
        o3 = _mm256_shuffle_ps(t1_, t3_, _MM_SHUFFLE(3, 2, 3, 2));                          \
    } while (0)

RLX_TARGET_AVX2 static inline __m256 rlx_load2x4(const float* lo, const float* hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(lo)), _mm_loadu_ps(hi), 1);
}

RLX_TARGET_AVX2 static inline void rlx_w4_bt8(const __m256 d[6], __m256 o[6]) {
    const __m256 four = _mm256_set1_ps(4.0f), five = _mm256_set1_ps(5.0f), two = _mm256_set1_ps(2.0f);
    const __m256 a = _mm256_fnmadd_ps(four, d[2], d[4]), b = _mm256_fnmadd_ps(four, d[1], d[3]);
    const __m256 c = _mm256_sub_ps(d[4], d[2]), e = _mm256_mul_ps(two, _mm256_sub_ps(d[3], d[1]));
    o[0] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[2], _mm256_mul_ps(four, d[0])), d[4]);
    o[1] = _mm256_add_ps(a, b);
    o[2] = _mm256_sub_ps(a, b);
    o[3] = _mm256_add_ps(c, e);
    o[4] = _mm256_sub_ps(c, e);
    o[5] = _mm256_add_ps(_mm256_fnmadd_ps(five, d[3], _mm256_mul_ps(four, d[1])), d[5]);
}

RLX_TARGET_AVX2 static inline void rlx_w4_at8(const __m256 m[6], __m256 o[4]) {
    const __m256 a = _mm256_add_ps(m[1], m[2]), b = _mm256_sub_ps(m[1], m[2]);
    const __m256 c = _mm256_add_ps(m[3], m[4]), e = _mm256_sub_ps(m[3], m[4]);
    o[0] = _mm256_add_ps(_mm256_add_ps(m[0], a), c);
    o[1] = _mm256_fmadd_ps(_mm256_set1_ps(2.0f), e, b);
    o[2] = _mm256_fmadd_ps(_mm256_set1_ps(4.0f), c, a);
    o[3] = _mm256_add_ps(_mm256_fmadd_ps(_mm256_set1_ps(8.0f), e, b), m[5]);
}

/* Tiles a..b-1 of one tile row (all fully inside), 8 at a time; r0 points at
 * the input pixel of tile column 0's top-left corner (the band copy below).  Tile k of 8 reads
 * columns 4k..4k+5: halves [tile m | tile m+4] transpose into columns 0..3 of
 * all 8 tiles in order, and the same shifted by one tile gives columns 4, 5
 * (its last half loads only the two floats tile 7 needs). */
RLX_TARGET_AVX2 static ptrdiff_t rlx_w4_in_wide_avx2(const float* r0, ptrdiff_t W, float* o,
                                                     ptrdiff_t pstride, ptrdiff_t a, ptrdiff_t b) {
    ptrdiff_t tx = a;
    for (; tx + 8 <= b; tx += 8) {
        __m256 h[6][6];
        for (int i = 0; i < 6; ++i) {
            const float* p = r0 + i * W + 4 * tx;
            __m256 d[6];
            const __m256 a0 = rlx_load2x4(p, p + 16), a1 = rlx_load2x4(p + 4, p + 20);
            const __m256 a2 = rlx_load2x4(p + 8, p + 24), a3 = rlx_load2x4(p + 12, p + 28);
            const __m256 b3 = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + 16)),
                                                   _mm_castpd_ps(_mm_load_sd((const double*)(p + 32))), 1);
            RLX_TRANSPOSE4_HALVES(a0, a1, a2, a3, d[0], d[1], d[2], d[3]);
            const __m256 u0 = _mm256_unpacklo_ps(a1, a2), u2 = _mm256_unpacklo_ps(a3, b3);
            d[4] = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(1, 0, 1, 0));
            d[5] = _mm256_shuffle_ps(u0, u2, _MM_SHUFFLE(3, 2, 3, 2));
            rlx_w4_bt8(d, h[i]);                 /* row i of d B */
        }
        for (int j = 0; j < 6; ++j) {
            __m256 col[6], v[6];
            for (int i = 0; i < 6; ++i) col[i] = h[i][j];
            rlx_w4_bt8(col, v);                  /* column j of B^T (d B) */
            for (int i = 0; i < 6; ++i) _mm256_storeu_ps(o + (6 * i + j) * pstride + tx, v[i]);
        }
    }
    return tx;
}

/* Full 4x4 output tiles tx0..full-1 of one tile row, 8 at a time: y0 is the
 * tile row's first output row (row stride Wo). */
RLX_TARGET_AVX2 static ptrdiff_t rlx_w4_out_wide_avx2(const float* a, ptrdiff_t pstride, float* y0,
                                                      ptrdiff_t Wo, float bias, ptrdiff_t tx0,
                                                      ptrdiff_t full) {
    const __m256 vb = _mm256_set1_ps(bias);
    ptrdiff_t tx = tx0;
    for (; tx + 8 <= full; tx += 8) {
        __m256 s[4][6];
        for (int j = 0; j < 6; ++j) {
            __m256 m[6], o[4];
            for (int i = 0; i < 6; ++i) m[i] = _mm256_loadu_ps(a + (6 * i + j) * pstride + tx);
            rlx_w4_at8(m, o);                    /* column j of A^T M */
            for (int r = 0; r < 4; ++r) s[r][j] = o[r];
        }
        for (int r = 0; r < 4; ++r) {
            __m256 o[4], q0, q1, q2, q3;
            rlx_w4_at8(s[r], o);                 /* row r of (A^T M) A */
            for (int c = 0; c < 4; ++c) o[c] = _mm256_add_ps(o[c], vb);
            RLX_TRANSPOSE4_HALVES(o[0], o[1], o[2], o[3], q0, q1, q2, q3);
            float* yr = y0 + r * Wo + 4 * tx;
            _mm_storeu_ps(yr, _mm256_castps256_ps128(q0));
            _mm_storeu_ps(yr + 4, _mm256_castps256_ps128(q1));
            _mm_storeu_ps(yr + 8, _mm256_castps256_ps128(q2));
            _mm_storeu_ps(yr + 12, _mm256_castps256_ps128(q3));
            _mm_storeu_ps(yr + 16, _mm256_extractf128_ps(q0, 1));
            _mm_storeu_ps(yr + 20, _mm256_extractf128_ps(q1, 1));
            _mm_storeu_ps(yr + 24, _mm256_extractf128_ps(q2, 1));
            _mm_storeu_ps(yr + 28, _mm256_extractf128_ps(q3, 1));
        }
    }
    return tx;
}

/* Tiles t_lo..t_hi-1 of one tile row that are not all inside the image (or
 * the last < 8 inside ones): per group of 8, a zero-padded copy of the six
 * input rows (40 columns, 34 used) goes through the same 8-tile transform; a
 * partial group is transformed into a local V and only its tiles copied.
 * o is V at tile t_lo. */
#define RLX_W4_BAND 40
RLX_TARGET_AVX2 static void rlx_w4_in_band_avx2(const float* xp, const rlx_conv_geom* g, ptrdiff_t h0,
                                                ptrdiff_t t_lo, ptrdiff_t t_hi, float* o, ptrdiff_t pstride) {
    float buf[6 * RLX_W4_BAND];
    float tmp[36 * 8];
    for (ptrdiff_t t = t_lo; t < t_hi; t += 8) {
        const ptrdiff_t k = t_hi - t < 8 ? t_hi - t : 8;
        const ptrdiff_t c0 = 4 * t - g->pw;            /* input column of buf column 0 */
        ptrdiff_t j_lo = -c0, j_hi = g->w - c0;         /* buf columns inside the image */
        if (j_lo < 0) j_lo = 0;
        if (j_lo > RLX_W4_BAND) j_lo = RLX_W4_BAND;
        if (j_hi > RLX_W4_BAND) j_hi = RLX_W4_BAND;
        for (int i = 0; i < 6; ++i) {
            float* row = buf + RLX_W4_BAND * i;
            const ptrdiff_t hh = h0 + i;
            if (hh < 0 || hh >= g->h || j_hi <= j_lo) {
                memset(row, 0, sizeof(float) * RLX_W4_BAND);
                continue;
            }
            if (j_lo > 0) memset(row, 0, sizeof(float) * (size_t)j_lo);
            memcpy(row + j_lo, xp + hh * g->w + c0 + j_lo, sizeof(float) * (size_t)(j_hi - j_lo));
            if (j_hi < RLX_W4_BAND) memset(row + j_hi, 0, sizeof(float) * (size_t)(RLX_W4_BAND - j_hi));
        }
        if (k == 8) {
            rlx_w4_in_wide_avx2(buf, RLX_W4_BAND, o + (t - t_lo), pstride, 0, 8);
        } else {
            rlx_w4_in_wide_avx2(buf, RLX_W4_BAND, tmp, 8, 0, 8);
            for (int p = 0; p < 36; ++p)
                for (ptrdiff_t q = 0; q < k; ++q) o[p * pstride + (t - t_lo) + q] = tmp[p * 8 + q];
        }
    }
}

/* Output tiles t_lo..t_hi-1 of one tile row that are clipped (or the last
 * < 8 full ones), 8 at a time into a local 4x32 buffer, of which the nr rows
 * and the columns inside y are copied.  A partial group reads up to 7 tiles
 * past the block's run (the next tile slots of M, or its 16 floats of plane
 * padding); their lanes are computed and dropped. */
RLX_TARGET_AVX2 static void rlx_w4_out_band_avx2(const float* a, ptrdiff_t pstride, float* y0, ptrdiff_t Wo,
                                                 int nr, float bias, ptrdiff_t t_lo, ptrdiff_t t_hi) {
    float ybuf[4 * 32];
    for (ptrdiff_t t = t_lo; t < t_hi; t += 8) {
        const ptrdiff_t k = t_hi - t < 8 ? t_hi - t : 8;
        ptrdiff_t cols = Wo - 4 * t;
        if (cols > 4 * k) cols = 4 * k;
        rlx_w4_out_wide_avx2(a + t, pstride, ybuf, 32, bias, 0, 8);
        for (int r = 0; r < nr; ++r) memcpy(y0 + r * Wo + 4 * t, ybuf + 32 * r, sizeof(float) * (size_t)cols);
    }
}
#define RLX_W4_OUT_WIDE(a, ps, y0, Wo, bias, tx0, full) \
    (rlx_simd_level() ? rlx_w4_out_wide_avx2(a, ps, y0, Wo, bias, tx0, full) : (tx0))
#define RLX_W4_IN_BAND(xp, g, h0, lo, hi, o, ps) \
    (rlx_simd_level() ? (rlx_w4_in_band_avx2(xp, g, h0, lo, hi, o, ps), 1) : 0)
#define RLX_W4_OUT_BAND(a, ps, y0, Wo, nr, bias, lo, hi) \
    (rlx_simd_level() ? (rlx_w4_out_band_avx2(a, ps, y0, Wo, nr, bias, lo, hi), 1) : 0)
#else
#define RLX_W4_OUT_WIDE(a, ps, y0, Wo, bias, tx0, full) (tx0)
#define RLX_W4_IN_BAND(xp, g, h0, lo, hi, o, ps) 0
#define RLX_W4_OUT_BAND(a, ps, y0, Wo, nr, bias, lo, hi) 0
#endif

RLX_INLINE void rlx_w4_input_body(const float* restrict x, ptrdiff_t x_len, float* restrict v,
                                  const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb,
                                  ptrdiff_t pstride) {
    const ptrdiff_t tw = (g->w_out + 3) / 4;
    const ptrdiff_t tiles_img = ((g->h_out + 3) / 4) * tw;
    const ptrdiff_t plane = g->h * g->w, W = g->w;
    (void)x_len;
    for (ptrdiff_t ci = 0; ci < g->c_in; ++ci) {
        float* restrict vc = v + ci * tb;
        ptrdiff_t tl = 0;
        while (tl < cnt) {
            const ptrdiff_t tile = t0 + tl, ni = tile / tiles_img, rem = tile % tiles_img;
            const ptrdiff_t ty = rem / tw, tx0 = rem % tw;
            ptrdiff_t run = tw - tx0;
            if (run > cnt - tl) run = cnt - tl;
            const float* restrict xp = x + (ni * g->c_in + ci) * plane;
            RLX_CHECK_RANGE((ni * g->c_in + ci) * plane, (ni * g->c_in + ci + 1) * plane, x_len, "winograd4 x");
            const ptrdiff_t h0 = 4 * ty - g->ph;
            /* tile columns [a, b) whose 6x6 patch is fully inside the image */
            ptrdiff_t a = tx0 + run, b = tx0 + run;
            if (h0 >= 0 && h0 + 6 <= g->h && W >= 6) {
                a = (g->pw + 3) / 4;
                b = (W - 6 + g->pw) / 4 + 1;
                if (a < tx0) a = tx0;
                if (b > tx0 + run) b = tx0 + run;
                if (b < a) b = a;
            }
            /* AVX2: the whole run in groups of 8 tiles through zero-padded
             * row copies (fewer, fuller groups than splitting off the edge
             * tiles: 2 instead of 3 per 56-wide row); portable: tile by tile. */
            if (!RLX_W4_IN_BAND(xp, g, h0, tx0, tx0 + run, vc + tl, pstride)) {
                for (ptrdiff_t tx = tx0; tx < a; ++tx)
                    rlx_w4_in_tile(xp, g, h0, 4 * tx - g->pw, 0, vc + tl + tx - tx0, pstride);
                for (ptrdiff_t tx = a; tx < b; ++tx)
                    rlx_w4_in_tile(xp, g, h0, 4 * tx - g->pw, 1, vc + tl + tx - tx0, pstride);
                for (ptrdiff_t tx = b; tx < tx0 + run; ++tx)
                    rlx_w4_in_tile(xp, g, h0, 4 * tx - g->pw, 0, vc + tl + tx - tx0, pstride);
            }
            tl += run;
        }
    }
}

RLX_INLINE void rlx_w4_output_body(const float* restrict m, float* restrict y, ptrdiff_t y_len,
                                   const float* restrict bias, const rlx_epilogue* epi,
                                   const rlx_conv_geom* g,
                                   ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t pstride, int avx2) {
    const ptrdiff_t tw = (g->w_out + 3) / 4;
    const ptrdiff_t tiles_img = ((g->h_out + 3) / 4) * tw;
    const ptrdiff_t Wo = g->w_out, Ho = g->h_out;
    (void)y_len;
    for (ptrdiff_t co = 0; co < g->c_out; ++co) {
        const float b = bias ? bias[co] : 0.0f;
        const float* restrict mc = m + co * tb;
        ptrdiff_t tl = 0;
        while (tl < cnt) {
            const ptrdiff_t tile = t0 + tl, ni = tile / tiles_img, rem = tile % tiles_img;
            const ptrdiff_t ty = rem / tw, tx0 = rem % tw;
            ptrdiff_t run = tw - tx0;
            if (run > cnt - tl) run = cnt - tl;
            const ptrdiff_t ho0 = 4 * ty;
            const int nr = (int)(Ho - ho0 < 4 ? Ho - ho0 : 4);
            float* restrict y0 = y + ((ni * g->c_out + co) * Ho + ho0) * Wo;
            RLX_CHECK_RANGE(((ni * g->c_out + co) * Ho + ho0) * Wo, ((ni * g->c_out + co) * Ho + ho0 + nr) * Wo,
                            y_len, "winograd4 y");
            const float* restrict a = mc + tl - tx0;
            /* full 4x4 tiles: columns tx with 4*tx + 3 < Wo, and four rows */
            ptrdiff_t full = (nr == 4) ? Wo / 4 : 0;
            if (full > tx0 + run) full = tx0 + run;
            if (full < tx0) full = tx0;
            ptrdiff_t tx = RLX_W4_OUT_WIDE(a, pstride, y0, Wo, b, tx0, full);
            if (!RLX_W4_OUT_BAND(a, pstride, y0, Wo, nr, b, tx, tx0 + run)) {
                for (; tx < full; ++tx)
                    rlx_w4_out_tile(a + tx, pstride, y0 + 4 * tx, Wo, b, 4, 4);
                for (; tx < tx0 + run; ++tx) {   /* clipped edge tiles */
                    const ptrdiff_t nc = Wo - 4 * tx < 4 ? Wo - 4 * tx : 4;
                    rlx_w4_out_tile(a + tx, pstride, y0 + 4 * tx, Wo, b, nr, (int)nc);
                }
            }
            if (epi) {
                /* residual and activation on the nr rows of this run, just
                 * written (the bias is already in) */
                const ptrdiff_t c0 = 4 * tx0;
                const ptrdiff_t c1 = 4 * (tx0 + run) < Wo ? 4 * (tx0 + run) : Wo;
                const ptrdiff_t off0 = y0 - y;
                for (int r = 0; r < nr; ++r) {
                    RLX_CHECK_RANGE(off0 + r * Wo + c0, off0 + r * Wo + c1, epi->res ? epi->res_len : y_len,
                                    "winograd4 residual");
                    rlx_epilogue_span_in(y0 + r * Wo + c0, off0 + r * Wo + c0, c1 - c0, 0.0f, epi, avx2);
                }
            }
            tl += run;
        }
    }
}

static void rlx_w4_input_base(const float* x, ptrdiff_t x_len, float* v, const rlx_conv_geom* g,
                              ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    rlx_w4_input_body(x, x_len, v, g, t0, cnt, tb, ps);
}
RLX_TARGET_AVX2 static void rlx_w4_input_avx2(const float* x, ptrdiff_t x_len, float* v,
                                              const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt,
                                              ptrdiff_t tb, ptrdiff_t ps) {
    rlx_w4_input_body(x, x_len, v, g, t0, cnt, tb, ps);
}
static void rlx_wino4_input(const float* x, ptrdiff_t x_len, float* v, const rlx_conv_geom* g,
                            ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    if (rlx_simd_level()) rlx_w4_input_avx2(x, x_len, v, g, t0, cnt, tb, ps);
    else rlx_w4_input_base(x, x_len, v, g, t0, cnt, tb, ps);
}

static void rlx_w4_output_base(const float* m, float* y, ptrdiff_t y_len, const float* bias,
                               const rlx_epilogue* epi, const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt,
                               ptrdiff_t tb, ptrdiff_t ps) {
    rlx_w4_output_body(m, y, y_len, bias, epi, g, t0, cnt, tb, ps, 0);
}
RLX_TARGET_AVX2 static void rlx_w4_output_avx2(const float* m, float* y, ptrdiff_t y_len,
                                               const float* bias, const rlx_epilogue* epi,
                                               const rlx_conv_geom* g,
                                               ptrdiff_t t0, ptrdiff_t cnt, ptrdiff_t tb, ptrdiff_t ps) {
    rlx_w4_output_body(m, y, y_len, bias, epi, g, t0, cnt, tb, ps, 1);
}
/* epi: NULL, or the residual/activation to apply to each run of tiles as it
 * is written. */
static void rlx_wino4_output(const float* m, float* y, ptrdiff_t y_len, const float* bias,
                             const rlx_epilogue* epi, const rlx_conv_geom* g, ptrdiff_t t0, ptrdiff_t cnt,
                             ptrdiff_t tb, ptrdiff_t ps) {
    if (rlx_simd_level()) rlx_w4_output_avx2(m, y, y_len, bias, epi, g, t0, cnt, tb, ps);
    else rlx_w4_output_base(m, y, y_len, bias, epi, g, t0, cnt, tb, ps);
}

#endif
