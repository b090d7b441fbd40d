/* Channel-blocked activations (NCHW8c) and the kernels that run on them.
 *
 * A tensor [N, C, H, W] with C a multiple of 8 is stored blocked as
 * [N, C/8, H, W, 8]: the 8 channels of one block sit next to each other at
 * every pixel.  A plan keeps activations blocked between consecutive blocked
 * ops (rlx_cpu/passes.py, blocked_layout) and reorders only where an op needs
 * NCHW.  On this layout
 *   - a 1x1 conv broadcasts one input value per (pixel, input channel) and
 *     multiplies it into a vector of 8 output channels: the register tile is
 *     6 pixels x 16 output channels, the weight packed at compile time in
 *     panels of 16 output channels, and every tile reads and writes whole
 *     vectors of consecutive floats (no N remainder on small planes, no
 *     transposed stores, and C/8 memory streams instead of C planes);
 *   - a depthwise conv is 8 channels per vector with no shuffles.
 * Both apply the conv epilogue (bias, residual in the same blocked layout,
 * relu or clip) in registers before the store.
 *
 * Variants: AVX2+FMA (target attribute, CPUID dispatch as everywhere) and a
 * portable loop nest over the same layouts, which gives the same bits: every
 * output is the same chain of fused multiply-adds (fmaf) in the same order. */
#ifndef RLX_NCHWC_H
#define RLX_NCHWC_H

#include <math.h>
#include <string.h>
#include "rlx_simd.h"
#include "rlx_epilogue.h"
#include "rlx_elem.h"

#define RLX_NCHWC_B 8          /* channels per block */
#define RLX_NCHWC_OC 16        /* output channels per register tile (two blocks) */
#define RLX_NCHWC_NP 6         /* pixels per register tile */
#define RLX_NCHWC_NPH 12       /* ... of a half panel (one vector of 8 output channels) */
#define RLX_NCHWC_KC 256       /* input channels per K block of the 1x1 kernel */
#define RLX_NCHWC_NP1W 12      /* pixels per wide tile of one AVX-512 panel, at most */
#define RLX_NCHWC_NP2W 14      /* ... of two panels */

/* The epilogue of the blocked kernels: y = act(acc + residual), the bias
 * being the accumulators' start; act is one of RLX_ACT_NONE, RELU, CLIP,
 * LEAKY_RELU, SIGMOID, SILU, HARD_SIGMOID, HARD_SWISH, TANH (rlx_epilogue.h; the
 * formulas are its, with alpha v + beta of the hard ones as one fused
 * multiply-add so the two variants round alike).  NaN stays NaN. */
typedef struct {
    int act;
    float alpha, beta;
} rlx_nchwc_act;

static inline float rlx_nchwc_act1(float v, const rlx_nchwc_act* a) {
    switch (a->act) {
    case RLX_ACT_RELU:
        return v <= 0.0f ? 0.0f : v;
    case RLX_ACT_CLIP:
        v = a->alpha > v ? a->alpha : v;       /* the operand order of max_ps / min_ps */
        return a->beta < v ? a->beta : v;
    case RLX_ACT_LEAKY_RELU:
        return v < 0.0f ? a->alpha * v : v;
    case RLX_ACT_SIGMOID:
        return rlx_sigmoidf(v);
    case RLX_ACT_SILU:
        return v * rlx_sigmoidf(v);
    case RLX_ACT_TANH:
        return rlx_tanhf(v);
    case RLX_ACT_HARD_SIGMOID:
    case RLX_ACT_HARD_SWISH: {
        float h = fmaf(a->alpha, v, a->beta);
        h = 0.0f > h ? 0.0f : h;
        h = 1.0f < h ? 1.0f : h;
        return a->act == RLX_ACT_HARD_SWISH ? v * h : h;
    }
    default:
        return v;
    }
}

#if RLX_X86_DISPATCH
/* pixels [0, pend) (a multiple of 8) of one block, 8x8 transposes */
RLX_TARGET_AVX2 static void rlx_nchwc_reorder8_avx2(
        const float* s, float* d, ptrdiff_t P, ptrdiff_t pend, int to_blocked) {
    __m256 r[8];
    for (ptrdiff_t p = 0; p < pend; p += 8) {
        if (to_blocked) {
            for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(s + j * P + p);
            rlx_transpose8(r);
            for (int i = 0; i < 8; ++i) _mm256_storeu_ps(d + (p + i) * RLX_NCHWC_B, r[i]);
        } else {
            for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(s + (p + i) * RLX_NCHWC_B);
            rlx_transpose8(r);
            for (int j = 0; j < 8; ++j) _mm256_storeu_ps(d + j * P + p, r[j]);
        }
    }
}
#endif

/* ---- reorders: item = n * (C/8) + cb, 8 planes of P pixels <-> P x 8 ---- */
/* Block item's input planes start at item * 8 * P in NCHW and its output at
 * the same offset in NCHW8c, so one offset serves both sides. */
static void rlx_nchwc_reorder(const float* src, ptrdiff_t src_len, float* dst, ptrdiff_t dst_len,
                              ptrdiff_t P, int to_blocked, ptrdiff_t i0, ptrdiff_t i1) {
    const int level = rlx_simd_level();
    (void)level;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t off = item * RLX_NCHWC_B * P;
        RLX_CHECK_RANGE(off, off + RLX_NCHWC_B * P, src_len, "nchwc reorder source");
        RLX_CHECK_RANGE(off, off + RLX_NCHWC_B * P, dst_len, "nchwc reorder destination");
        const float* s = src + off;
        float* d = dst + off;
        ptrdiff_t p = 0;
#if RLX_X86_DISPATCH
        if (level) {
            p = P / 8 * 8;
            rlx_nchwc_reorder8_avx2(s, d, P, p, to_blocked);
        }
#endif
        for (; p < P; ++p)
            for (int j = 0; j < RLX_NCHWC_B; ++j) {
                if (to_blocked) d[p * RLX_NCHWC_B + j] = s[j * P + p];
                else d[j * P + p] = s[p * RLX_NCHWC_B + j];
            }
    }
}


/* ---- 1x1 conv -------------------------------------------------------------
 * y[n, M, P] = W[M, K] . x[n, K, P] (+ bias) (+ residual), act; x, y and the
 * residual blocked.  Packed weight: wq[(q*K + k)*16 + j] = W[q*16 + j, k],
 * zero past M (M is a multiple of 8, so a last panel of 8 rows runs a
 * one-vector tile). */
static inline ptrdiff_t rlx_nchwc_1x1_packed_floats(ptrdiff_t m, ptrdiff_t k) {
    return (m + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC * RLX_NCHWC_OC * k;
}

static void rlx_nchwc_1x1_pack(const float* w, ptrdiff_t m, ptrdiff_t k, float* wq) {
    const ptrdiff_t panels = (m + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC;
    for (ptrdiff_t q = 0; q < panels; ++q)
        for (ptrdiff_t kk = 0; kk < k; ++kk)
            for (ptrdiff_t j = 0; j < RLX_NCHWC_OC; ++j) {
                const ptrdiff_t row = q * RLX_NCHWC_OC + j;
                wq[(q * k + kk) * RLX_NCHWC_OC + j] = row < m ? w[row * k + kk] : 0.0f;
            }
}

typedef struct {
    ptrdiff_t n, k, m, p;      /* images, input channels, output channels, pixels per plane */
    ptrdiff_t chunk;           /* pixels per work item */
    ptrdiff_t groups;          /* panel groups per (image, chunk): more items on small planes */
} rlx_nchwc_1x1_geom;

static inline ptrdiff_t rlx_nchwc_1x1_items(const rlx_nchwc_1x1_geom* g) {
    return g->n * ((g->p + g->chunk - 1) / g->chunk) * g->groups;
}

/* Pixel offsets of consecutive pixels of a blocked plane, and of every
 * other pixel (a stride-2 conv's tile within one output row). */
/* pixel offsets of consecutive pixels and of every other pixel, as far as
 * the widest tile (RLX_NCHWC_NP2W) */
static const ptrdiff_t rlx_nchwc_unit_poff[14] = {0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104};
static const ptrdiff_t rlx_nchwc_s2_poff[14] = {0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208};

/* The register tile of the blocked convs: np pixels x nv vectors of 8 output
 * channels over nkb blocks of 8 input channels.  Block kb of pixel r sits
 * at x + koff[kb] + poff[r] (8 consecutive floats): for a 1x1 conv koff[kb]
 * = kb * (plane floats) and poff[r] = 8r, for a dense conv koff also steps
 * through the taps and poff follows the tile's pixels across output rows.
 * Output pixel r is at y + 8r, its second vector p8 floats further (res
 * likewise).  first: start from the bias, else from
 * y; last: add the residual, apply the activation.  Portable version. */
static void rlx_nchwc_tile_base(int np, int nv, const float* w, const float* x, const ptrdiff_t* koff,
                                ptrdiff_t nkb, const ptrdiff_t* poff, ptrdiff_t p8, float* y, const float* bias,
                                const float* res, int first, int last, const rlx_nchwc_act* a) {
    float acc[RLX_NCHWC_NPH][RLX_NCHWC_OC];
    for (int r = 0; r < np; ++r)
        for (int j = 0; j < 8 * nv; ++j)
            acc[r][j] = first ? (bias ? bias[j] : 0.0f) : y[(j / 8) * p8 + r * 8 + j % 8];
    for (ptrdiff_t kb = 0; kb < nkb; ++kb)
        for (int kk = 0; kk < 8; ++kk) {
            const float* wk = w + (kb * 8 + kk) * RLX_NCHWC_OC;
            for (int r = 0; r < np; ++r) {
                const float xv = x[koff[kb] + poff[r] + kk];
                for (int j = 0; j < 8 * nv; ++j) acc[r][j] = fmaf(xv, wk[j], acc[r][j]);
            }
        }
    for (int r = 0; r < np; ++r)
        for (int j = 0; j < 8 * nv; ++j) {
            const ptrdiff_t o = (j / 8) * p8 + r * 8 + j % 8;
            float v = acc[r][j];
            if (last) {
                if (res) v = v + res[o];
                v = rlx_nchwc_act1(v, a);
            }
            y[o] = v;
        }
}

#if RLX_X86_DISPATCH
/* rows 6..11 exist for half panels only (nv 1): 12 accumulators, the
 * weight vector and the broadcast fill 14 of the 16 ymm registers */
#define RLX_NC_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define RLX_NC_DECL(r)                                                           \
    __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();         \
    const ptrdiff_t o##r = np > r ? poff[r] : 0;
#define RLX_NC_INIT(r)                                                           \
    if (np > r) {                                                                \
        if (first) {                                                             \
            a##r##0 = b0;                                                        \
            a##r##1 = b1;                                                        \
        } else {                                                                 \
            a##r##0 = _mm256_loadu_ps(y + (r) * 8);                              \
            if (nv > 1) a##r##1 = _mm256_loadu_ps(y + p8 + (r) * 8);             \
        }                                                                        \
    }
#define RLX_NC_FMA(r)                                                            \
    if (np > r) {                                                                \
        const __m256 xv = _mm256_broadcast_ss(xk + o##r);                        \
        a##r##0 = _mm256_fmadd_ps(xv, w0, a##r##0);                              \
        if (nv > 1) a##r##1 = _mm256_fmadd_ps(xv, w1, a##r##1);                  \
    }
#define RLX_NC_STORE(r)                                                          \
    if (np > r) {                                                                \
        if (last) {                                                              \
            if (res) {                                                           \
                a##r##0 = _mm256_add_ps(a##r##0, _mm256_loadu_ps(res + (r) * 8)); \
                if (nv > 1)                                                      \
                    a##r##1 = _mm256_add_ps(a##r##1, _mm256_loadu_ps(res + p8 + (r) * 8)); \
            }                                                                    \
            a##r##0 = rlx_nchwc_act8_light(a##r##0, a);                          \
            if (nv > 1) a##r##1 = rlx_nchwc_act8_light(a##r##1, a);              \
        }                                                                        \
        _mm256_storeu_ps(y + (r) * 8, a##r##0);                                  \
        if (nv > 1) _mm256_storeu_ps(y + p8 + (r) * 8, a##r##1);                 \
    }

/* The activations whose 8 lanes take tens of instructions (an exp and a
 * division, or tanh's two branches).  The tiles' stores apply the others in
 * registers; these they leave to rlx_act_blocks_*, a loop over the outputs
 * the tile has just stored (still in L1) after all its stores.  Inlined at
 * each of a tile's up to 48 stores, a SiLU made a 1x1 tile's epilogue so long
 * that it ran from outside the uop cache: EfficientNet-B0's 16->96 1x1 on
 * 112x112 took 1.42 ms with the SiLU against 0.39 without.  The values are
 * the same: act(acc + residual) is computed from the stored float either way. */
static inline int rlx_act_heavy(int act) {
    return act == RLX_ACT_SIGMOID || act == RLX_ACT_SILU || act == RLX_ACT_TANH;
}

/* rlx_nchwc_act1 on 8 lanes for the activations that are not heavy, operation
 * for operation (so bit for bit); a heavy one is left as it is */
RLX_INLINE_AVX2 __m256 rlx_nchwc_act8_light(__m256 v, const rlx_nchwc_act* a) {
    const __m256 zero = _mm256_setzero_ps();
    switch (a->act) {
    case RLX_ACT_RELU:
        return _mm256_andnot_ps(_mm256_cmp_ps(v, zero, _CMP_LE_OQ), v);
    case RLX_ACT_CLIP:
        v = _mm256_max_ps(_mm256_set1_ps(a->alpha), v);
        return _mm256_min_ps(_mm256_set1_ps(a->beta), v);
    case RLX_ACT_LEAKY_RELU:
        return _mm256_blendv_ps(v, _mm256_mul_ps(_mm256_set1_ps(a->alpha), v), _mm256_cmp_ps(v, zero, _CMP_LT_OQ));
    case RLX_ACT_HARD_SIGMOID:
    case RLX_ACT_HARD_SWISH: {
        __m256 h = _mm256_fmadd_ps(_mm256_set1_ps(a->alpha), v, _mm256_set1_ps(a->beta));
        h = _mm256_max_ps(zero, h);                         /* 0 > h ? 0 : h, NaN kept */
        h = _mm256_min_ps(_mm256_set1_ps(1.0f), h);
        return a->act == RLX_ACT_HARD_SWISH ? _mm256_mul_ps(v, h) : h;
    }
    default:
        return v;
    }
}

/* rlx_nchwc_act1 on 8 lanes, operation for operation (so bit for bit) */
RLX_INLINE_AVX2 __m256 rlx_nchwc_act8(__m256 v, const rlx_nchwc_act* a) {
    switch (a->act) {
    case RLX_ACT_SIGMOID:
        return rlx_sigmoid8(v);
    case RLX_ACT_SILU:
        return _mm256_mul_ps(v, rlx_sigmoid8(v));
    case RLX_ACT_TANH:
        return rlx_tanh8(v);
    default:
        return rlx_nchwc_act8_light(v, a);
    }
}

/* The heavy activation of `a` over nb runs of n floats (n a multiple of 8),
 * run b at y + b*stride, in place: the tiles' deferred epilogue. */
RLX_TARGET_AVX2 __attribute__((noinline)) static void rlx_act_blocks_avx2(float* y, ptrdiff_t stride, int nb,
                                                                         ptrdiff_t n, const rlx_nchwc_act* a) {
    for (int b = 0; b < nb; ++b)
        for (ptrdiff_t i = 0; i < n; i += 8)
            _mm256_storeu_ps(y + b * stride + i, rlx_nchwc_act8(_mm256_loadu_ps(y + b * stride + i), a));
}

/* ... on 16 lanes where AVX-512 is there: the sigmoid and SiLU by
 * rlx_sigmoid16, the same bits as 8 lanes at a time */
RLX_TARGET_AVX512 __attribute__((noinline)) static void rlx_act_blocks_avx512(float* y, ptrdiff_t stride, int nb,
                                                                             ptrdiff_t n, const rlx_nchwc_act* a) {
    const int act = a->act;
    if (act != RLX_ACT_SIGMOID && act != RLX_ACT_SILU) {
        rlx_act_blocks_avx2(y, stride, nb, n, a);
        return;
    }
    for (int b = 0; b < nb; ++b) {
        float* yb = y + b * stride;
        ptrdiff_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_loadu_ps(yb + i);
            const __m512 sg = rlx_sigmoid16(v);
            _mm512_storeu_ps(yb + i, act == RLX_ACT_SILU ? _mm512_mul_ps(v, sg) : sg);
        }
        if (i < n) _mm256_storeu_ps(yb + i, rlx_nchwc_act8(_mm256_loadu_ps(yb + i), a));
    }
}

/* y[i] = act(x[i]) for i < n, out of place or in place (y == x): the
 * standalone activations (src/_elementwise.pyx).  The formulas are the
 * blocked epilogue's, so an activation left unfused gives the bits of a fused
 * one; each activation gets its own loop (the switch is resolved once). */
#define RLX_ACT_KINDS(X)                                                                         \
    X(RLX_ACT_RELU) X(RLX_ACT_CLIP) X(RLX_ACT_LEAKY_RELU) X(RLX_ACT_SIGMOID) X(RLX_ACT_SILU)       \
    X(RLX_ACT_TANH) X(RLX_ACT_HARD_SIGMOID) X(RLX_ACT_HARD_SWISH)

RLX_TARGET_AVX2 static void rlx_act_span_avx2(const float* x, float* y, ptrdiff_t n, const rlx_nchwc_act* a) {
    rlx_nchwc_act c = *a;
#define RLX_ACT_SPAN_CASE(A_)                                                                    \
    case A_: {                                                                                   \
        c.act = A_;                                                                              \
        ptrdiff_t i = 0;                                                                         \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, rlx_nchwc_act8(_mm256_loadu_ps(x + i), &c)); \
        for (; i < n; ++i) y[i] = rlx_nchwc_act1(x[i], &c);                                      \
        return;                                                                                  \
    }
    switch (a->act) {
        RLX_ACT_KINDS(RLX_ACT_SPAN_CASE)
    default:
        if (x != y) memcpy(y, x, (size_t)n * sizeof(float));
    }
#undef RLX_ACT_SPAN_CASE
}

RLX_INLINE_AVX2 void rlx_nchwc_tile_body(const int np, const int nv, const float* restrict w,
                                         const float* restrict x, const ptrdiff_t* restrict koff, ptrdiff_t nkb,
                                         const ptrdiff_t* restrict poff, ptrdiff_t p8, float* restrict y,
                                         const float* restrict bias, const float* restrict res, int first,
                                         int last, const rlx_nchwc_act* a) {
    const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 b1 = bias && nv > 1 ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    RLX_NC_ROWS(RLX_NC_DECL)
    RLX_NC_ROWS(RLX_NC_INIT)
    for (ptrdiff_t kb = 0; kb < nkb; ++kb) {
        const float* xb = x + koff[kb];
        for (int kk = 0; kk < 8; ++kk) {
            const float* xk = xb + kk;
            const __m256 w0 = _mm256_loadu_ps(w);
            const __m256 w1 = nv > 1 ? _mm256_loadu_ps(w + 8) : w0;
            RLX_NC_ROWS(RLX_NC_FMA)
            w += RLX_NCHWC_OC;
        }
    }
    RLX_NC_ROWS(RLX_NC_STORE)
    if (last && rlx_act_heavy(a->act)) rlx_act_blocks_avx2(y, p8, nv, np * 8, a);
}
#undef RLX_NC_DECL
#undef RLX_NC_INIT
#undef RLX_NC_FMA
#undef RLX_NC_STORE
#undef RLX_NC_ROWS

typedef void (*rlx_nchwc_tile_fn)(const float*, const float*, const ptrdiff_t*, ptrdiff_t, const ptrdiff_t*,
                                  ptrdiff_t, float*, const float*, const float*, int, int, const rlx_nchwc_act*);
#define RLX_NC_TILE(NP_, NV_)                                                                          \
    RLX_TARGET_AVX2 static void rlx_nchwc_tile_##NP_##_##NV_(                                          \
            const float* w, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb, const ptrdiff_t* poff, \
            ptrdiff_t p8, float* y, const float* bias, const float* res, int first, int last,          \
            const rlx_nchwc_act* a) {                                                                  \
        rlx_nchwc_tile_body(NP_, NV_, w, x, koff, nkb, poff, p8, y, bias, res, first, last, a);         \
    }
/* the same with the pixel offsets of a row of stride 1 or 2 as constants,
 * which frees six registers and the loads of them */
#define RLX_NC_RTILE(NP_, NV_, S_, TAB_)                                                               \
    RLX_TARGET_AVX2 static void rlx_nchwc_rtile##S_##_##NP_##_##NV_(                                   \
            const float* w, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb, const ptrdiff_t* poff, \
            ptrdiff_t p8, float* y, const float* bias, const float* res, int first, int last,          \
            const rlx_nchwc_act* a) {                                                                  \
        (void)poff;                                                                                    \
        rlx_nchwc_tile_body(NP_, NV_, w, x, koff, nkb, TAB_, p8, y, bias, res, first, last, a);         \
    }
#define RLX_NC_TILES(M_, ...) M_(1, 1, ##__VA_ARGS__) M_(2, 1, ##__VA_ARGS__) M_(3, 1, ##__VA_ARGS__) \
    M_(4, 1, ##__VA_ARGS__) M_(5, 1, ##__VA_ARGS__) M_(6, 1, ##__VA_ARGS__) M_(1, 2, ##__VA_ARGS__)     \
    M_(2, 2, ##__VA_ARGS__) M_(3, 2, ##__VA_ARGS__) M_(4, 2, ##__VA_ARGS__) M_(5, 2, ##__VA_ARGS__)     \
    M_(6, 2, ##__VA_ARGS__) M_(7, 1, ##__VA_ARGS__) M_(8, 1, ##__VA_ARGS__) M_(9, 1, ##__VA_ARGS__)     \
    M_(10, 1, ##__VA_ARGS__) M_(11, 1, ##__VA_ARGS__) M_(12, 1, ##__VA_ARGS__)
RLX_NC_TILES(RLX_NC_TILE)
RLX_NC_TILES(RLX_NC_RTILE, 1, rlx_nchwc_unit_poff)
RLX_NC_TILES(RLX_NC_RTILE, 2, rlx_nchwc_s2_poff)
/* `count` consecutive tiles of NP_ pixels along a run of consecutive pixels
 * (a 1x1 conv's chunk), in one call: the call, the register saves and the
 * argument loads once per strip instead of once per tile */
/* one instance per activation (ACT_ a constant: its switch folds away),
 * chosen once per strip */
#define RLX_NC_STRIP_LOOP(NP_, NV_, ACT_)                                                              \
    {                                                                                                  \
        rlx_nchwc_act ac = *a;                                                                         \
        ac.act = ACT_;                                                                                 \
        for (ptrdiff_t i = 0; i < count; ++i)                                                          \
            rlx_nchwc_tile_body(NP_, NV_, w, x + i * (NP_ * 8), koff, nkb, rlx_nchwc_unit_poff, p8,   \
                                y + i * (NP_ * 8), bias, res ? res + i * (NP_ * 8) : NULL, first, last, &ac); \
        return;                                                                                        \
    }
#define RLX_NC_STRIP(NP_, NV_)                                                                         \
    RLX_TARGET_AVX2 static void rlx_nchwc_strip_##NP_##_##NV_(                                         \
            ptrdiff_t count, const float* w, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb,     \
            ptrdiff_t p8, float* y, const float* bias, const float* res, int first, int last,          \
            const rlx_nchwc_act* a) {                                                                  \
        switch (last ? a->act : RLX_ACT_NONE) {                                                        \
        case RLX_ACT_RELU: RLX_NC_STRIP_LOOP(NP_, NV_, RLX_ACT_RELU)                                   \
        case RLX_ACT_CLIP: RLX_NC_STRIP_LOOP(NP_, NV_, RLX_ACT_CLIP)                                   \
        case RLX_ACT_NONE: RLX_NC_STRIP_LOOP(NP_, NV_, RLX_ACT_NONE)                                   \
        default: RLX_NC_STRIP_LOOP(NP_, NV_, a->act)                                                   \
        }                                                                                              \
    }
RLX_NC_TILES(RLX_NC_STRIP)
#undef RLX_NC_STRIP
#undef RLX_NC_STRIP_LOOP
#undef RLX_NC_TILES
#undef RLX_NC_TILE
#undef RLX_NC_RTILE
#define RLX_NC_ROW(P_)                                                                                   \
    {{NULL, P_##1_1, P_##2_1, P_##3_1, P_##4_1, P_##5_1, P_##6_1, P_##7_1, P_##8_1, P_##9_1, P_##10_1,       \
      P_##11_1, P_##12_1},                                                                                 \
     {NULL, P_##1_2, P_##2_2, P_##3_2, P_##4_2, P_##5_2, P_##6_2}}
/* [offsets: any, consecutive, every other][vectors - 1][pixels]: up to
 * RLX_NCHWC_NPH pixels of one vector, RLX_NCHWC_NP of two */
static const rlx_nchwc_tile_fn rlx_nchwc_tiles[3][2][RLX_NCHWC_NPH + 1] = {
    RLX_NC_ROW(rlx_nchwc_tile_), RLX_NC_ROW(rlx_nchwc_rtile1_), RLX_NC_ROW(rlx_nchwc_rtile2_)};
typedef void (*rlx_nchwc_strip_fn)(ptrdiff_t, const float*, const float*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                                   float*, const float*, const float*, int, int, const rlx_nchwc_act*);
static const rlx_nchwc_strip_fn rlx_nchwc_strips[2][RLX_NCHWC_NPH + 1] = RLX_NC_ROW(rlx_nchwc_strip_);
#undef RLX_NC_ROW
#endif

static void rlx_act_span_base(const float* x, float* y, ptrdiff_t n, const rlx_nchwc_act* a) {
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = rlx_nchwc_act1(x[i], a);
}

/* rlx_act_span_*, dispatched on rlx_simd_level() */
static inline void rlx_act_span(const float* x, float* y, ptrdiff_t n, const rlx_nchwc_act* a) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) { rlx_act_span_avx2(x, y, n, a); return; }
#endif
    rlx_act_span_base(x, y, n, a);
}

#if RLX_X86_DISPATCH
/* ---- AVX-512 tiles: one, two or four panels (16 to 64 output channels) ----
 * np pixels x nq zmm of 16 output channels: at np = 6 and nq = 2, 12
 * accumulators (more than FMA latency x pipes), and per input channel two
 * weight loads and np broadcasts feed 2*np FMAs; nq = 1 (a conv group's
 * last full panel, or 16 output channels in all) has 6 chains, latency
 * bound at 3/4 of the pipes, still 1.5x the AVX2 tile's lanes.  nq = 4 (the
 * 1x1 kernel's strips and the stem) feeds 24 FMAs with 10 loads: on this host's
 * slow phases (see rlx_nchwc_1x1_run) the loads, not the FMAs, bound the
 * two-panel tile.  Panel q+1's packed weight starts wps floats
 * after panel q's (K*16: the next panel of the same packed weight), the
 * tile's output block b sits at y + b*p8 (res likewise).  Each lane runs
 * the AVX2 tile's FMAs in the same order and the same epilogue on each
 * 8-lane half, so the results are bit for bit the AVX2 tile's. */
RLX_INLINE_AVX512 __m512 rlx_nz_load2(const float* lo, ptrdiff_t p8) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(lo)), _mm256_loadu_ps(lo + p8), 1);
}

/* the two 8-channel halves of v to y and y + p8, on the last K block after
 * the residual and the activation */
RLX_INLINE_AVX512 void rlx_nz_store2(float* y, ptrdiff_t p8, __m512 v, const float* res, int last,
                                     const rlx_nchwc_act* a) {
    __m256 lo = _mm512_castps512_ps256(v), hi = _mm512_extractf32x8_ps(v, 1);
    if (last) {
        if (res) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(res));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(res + p8));
        }
        lo = rlx_nchwc_act8_light(lo, a);
        hi = rlx_nchwc_act8_light(hi, a);
    }
    _mm256_storeu_ps(y, lo);
    _mm256_storeu_ps(y + p8, hi);
}

#define RLX_NZ_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#define RLX_NZ_DECL(r)                                                           \
    __m512 a##r##0 = b0, a##r##1 = b1, a##r##2 = b2, a##r##3 = b3;               \
    const ptrdiff_t o##r = np > r ? poff[r] : 0;
#define RLX_NZ_INIT(r)                                                           \
    if (np > r && !first) {                                                      \
        a##r##0 = rlx_nz_load2(y + (r) * 8, p8);                                 \
        if (nq > 1) a##r##1 = rlx_nz_load2(y + 2 * p8 + (r) * 8, p8);            \
        if (nq > 2) a##r##2 = rlx_nz_load2(y + 4 * p8 + (r) * 8, p8);            \
        if (nq > 2) a##r##3 = rlx_nz_load2(y + 6 * p8 + (r) * 8, p8);            \
    }
#define RLX_NZ_FMA(r)                                                            \
    if (np > r) {                                                                \
        const __m512 xv = _mm512_set1_ps(xk[o##r]);                              \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);                              \
        if (nq > 1) a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);                  \
        if (nq > 2) a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);                  \
        if (nq > 2) a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);                  \
    }
#define RLX_NZ_STORE1(r, B_, ACC_)                                               \
    rlx_nz_store2(y + (B_) * p8 + (r) * 8, p8, ACC_, res ? res + (B_) * p8 + (r) * 8 : NULL, last, a);
#define RLX_NZ_STORE(r)                                                          \
    if (np > r) {                                                                \
        RLX_NZ_STORE1(r, 0, a##r##0)                                             \
        if (nq > 1) { RLX_NZ_STORE1(r, 2, a##r##1) }                             \
        if (nq > 2) { RLX_NZ_STORE1(r, 4, a##r##2) RLX_NZ_STORE1(r, 6, a##r##3) } \
    }
RLX_INLINE_AVX512 void rlx_nchwc_tile2_body(const int nq, const int np, const float* restrict w, ptrdiff_t wps,
                                            const float* restrict x, const ptrdiff_t* restrict koff, ptrdiff_t nkb,
                                            const ptrdiff_t* restrict poff, ptrdiff_t p8, float* restrict y,
                                            const float* restrict bias, const float* restrict res, int first,
                                            int last, const rlx_nchwc_act* a, const ptrdiff_t pfd,
                                            const float* restrict wpf, const int npf) {
    const __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 b1 = bias && nq > 1 ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    const __m512 b2 = bias && nq > 2 ? _mm512_loadu_ps(bias + 32) : _mm512_setzero_ps();
    const __m512 b3 = bias && nq > 2 ? _mm512_loadu_ps(bias + 48) : _mm512_setzero_ps();
    RLX_NZ_ROWS(RLX_NZ_DECL)
    RLX_NZ_ROWS(RLX_NZ_INIT)
    for (ptrdiff_t kb = 0; kb < nkb; ++kb) {
        const float* xb = x + koff[kb];
        /* a strip's tiles run along its pixels: prefetch block kb of the
         * tile pfd floats on (tile after tile, the lines of every block's
         * stream in turn).  The hardware prefetchers lose track of the
         * K/8 streams, one per input block, 8P floats apart: with a batch
         * whose activations spill from L3, ResNet-50's 256->64 1x1 on
         * 56x56 ran at half speed (batch 8: 15.3 ms against 8.3 with it;
         * batch 1: 1.01 against 0.92).  The last tile's prefetch may
         * point past x: a prefetch never faults.  0: none (the other
         * callers). */
        if (pfd)
            for (int l = 0; l < (np * 32 + 63) / 64; ++l)
                _mm_prefetch((const char*)(xb + pfd) + 64 * l, _MM_HINT_T0);
        for (int kk = 0; kk < 8; ++kk) {
            const float* xk = xb + kk;
            /* one line per input channel of each of the npf panels of the
             * weight block the next tiles read (wpf: see rlx_nchwc_1x1_span) */
            if (wpf)
                for (int j = 0; j < npf; ++j)
                    _mm_prefetch((const char*)(wpf + j * wps + (kb * 8 + kk) * RLX_NCHWC_OC), _MM_HINT_T1);
            const __m512 w0 = _mm512_loadu_ps(w), w1 = nq > 1 ? _mm512_loadu_ps(w + wps) : w0;
            const __m512 w2 = nq > 2 ? _mm512_loadu_ps(w + 2 * wps) : w0;
            const __m512 w3 = nq > 2 ? _mm512_loadu_ps(w + 3 * wps) : w0;
            RLX_NZ_ROWS(RLX_NZ_FMA)
            w += RLX_NCHWC_OC;
        }
    }
    RLX_NZ_ROWS(RLX_NZ_STORE)
    if (last && rlx_act_heavy(a->act)) rlx_act_blocks_avx512(y, p8, 2 * nq, np * 8, a);
}

/* the stem's: tap k of pixel r at base + koff[k] + r*ps, K taps, no
 * residual, the epilogue always */
#define RLX_NZS_FMA(r)                                                           \
    if (np > r) {                                                                \
        const __m512 xv = _mm512_set1_ps(xk[(r) * ps]);                          \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);                              \
        if (nq > 1) a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);                  \
        if (nq > 2) a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);                  \
        if (nq > 2) a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);                  \
    }
#define RLX_NZS_DECL(r) __m512 a##r##0 = b0, a##r##1 = b1, a##r##2 = b2, a##r##3 = b3;
RLX_INLINE_AVX512 void rlx_nchwc_stem_tile2_body(const int nq, const int np, const float* restrict w, ptrdiff_t wps,
                                                 const float* restrict base, const ptrdiff_t* restrict koff,
                                                 ptrdiff_t ps, ptrdiff_t K, float* restrict y, ptrdiff_t p8,
                                                 const float* restrict bias, const rlx_nchwc_act* a) {
    const __m512 b0 = bias ? _mm512_loadu_ps(bias) : _mm512_setzero_ps();
    const __m512 b1 = bias && nq > 1 ? _mm512_loadu_ps(bias + 16) : _mm512_setzero_ps();
    const __m512 b2 = bias && nq > 2 ? _mm512_loadu_ps(bias + 32) : _mm512_setzero_ps();
    const __m512 b3 = bias && nq > 2 ? _mm512_loadu_ps(bias + 48) : _mm512_setzero_ps();
    const float* res = NULL;
    const int last = 1;
    RLX_NZ_ROWS(RLX_NZS_DECL)
    for (ptrdiff_t k = 0; k < K; ++k) {
        const float* xk = base + koff[k];
        const __m512 w0 = _mm512_loadu_ps(w), w1 = nq > 1 ? _mm512_loadu_ps(w + wps) : w0;
        const __m512 w2 = nq > 2 ? _mm512_loadu_ps(w + 2 * wps) : w0;
        const __m512 w3 = nq > 2 ? _mm512_loadu_ps(w + 3 * wps) : w0;
        RLX_NZ_ROWS(RLX_NZS_FMA)
        w += RLX_NCHWC_OC;
    }
    RLX_NZ_ROWS(RLX_NZ_STORE)
    if (rlx_act_heavy(a->act)) rlx_act_blocks_avx512(y, p8, 2 * nq, np * 8, a);
}
#undef RLX_NZS_FMA
#undef RLX_NZS_DECL
#undef RLX_NZ_DECL
#undef RLX_NZ_INIT
#undef RLX_NZ_FMA
#undef RLX_NZ_STORE
#undef RLX_NZ_STORE1
#undef RLX_NZ_ROWS

/* Wide tiles along an output row: nq = 1 or 2 full panels over np = 7..12
 * (one panel) or 7..14 (two) pixels, pixel r's input corner x + r*S*8 (S =
 * 1 or 2: the conv's column stride).  One panel: np independent chains fill
 * both FMA pipes where the 6-pixel tile of one panel leaves a quarter of
 * them idle.  Two panels: up to 28 accumulators, 2 weight loads and np
 * broadcasts per 2*np FMAs (a row of 14 in one tile).  Each output is the
 * same chain as in the 6-pixel tiles (bias, then the taps in the packed
 * order, partial sums through y between K blocks, the same epilogue), so the
 * bits do not depend on which tile ran it. */
typedef void (*rlx_nchwc_tilew_fn)(const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t,
                                   float*, const float*, const float*, int, int, const rlx_nchwc_act*);
#define RLX_NW_TILE(NP_, NQ_, S_)                                                                      \
    RLX_TARGET_AVX512 static void rlx_nchwc_tilew##NQ_##s##S_##_##NP_(                                 \
            const float* w, ptrdiff_t wps, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb, ptrdiff_t p8, \
            float* y, const float* bias, const float* res, int first, int last, const rlx_nchwc_act* a) { \
        rlx_nchwc_tile2_body(NQ_, NP_, w, wps, x, koff, nkb, S_ == 1 ? rlx_nchwc_unit_poff : rlx_nchwc_s2_poff, \
                             p8, y, bias, res, first, last, a, 0, NULL, 0);                                  \
    }
#define RLX_NW_ALL(NQ_, S_) RLX_NW_TILE(7, NQ_, S_) RLX_NW_TILE(8, NQ_, S_) RLX_NW_TILE(9, NQ_, S_) \
    RLX_NW_TILE(10, NQ_, S_) RLX_NW_TILE(11, NQ_, S_) RLX_NW_TILE(12, NQ_, S_)
RLX_NW_ALL(1, 1)
RLX_NW_ALL(1, 2)
RLX_NW_ALL(2, 1)
RLX_NW_ALL(2, 2)
RLX_NW_TILE(13, 2, 1) RLX_NW_TILE(14, 2, 1) RLX_NW_TILE(13, 2, 2) RLX_NW_TILE(14, 2, 2)
#define RLX_NW_ROW(NQ_, S_)                                                                            \
    {rlx_nchwc_tilew##NQ_##s##S_##_7, rlx_nchwc_tilew##NQ_##s##S_##_8, rlx_nchwc_tilew##NQ_##s##S_##_9, \
     rlx_nchwc_tilew##NQ_##s##S_##_10, rlx_nchwc_tilew##NQ_##s##S_##_11, rlx_nchwc_tilew##NQ_##s##S_##_12, \
     RLX_NW_ROW_##NQ_(S_, 13), RLX_NW_ROW_##NQ_(S_, 14)}
#define RLX_NW_ROW_1(S_, NP_) NULL
#define RLX_NW_ROW_2(S_, NP_) rlx_nchwc_tilew2s##S_##_##NP_
/* [panels - 1][column stride - 1][pixels - 7]; one panel up to 12 pixels */
static const rlx_nchwc_tilew_fn rlx_nchwc_tilesw[2][2][8] = {{RLX_NW_ROW(1, 1), RLX_NW_ROW(1, 2)},
                                                             {RLX_NW_ROW(2, 1), RLX_NW_ROW(2, 2)}};
#undef RLX_NW_ROW
#undef RLX_NW_ROW_1
#undef RLX_NW_ROW_2
#undef RLX_NW_ALL
#undef RLX_NW_TILE

typedef void (*rlx_nchwc_tile2_fn)(const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t,
                                   const ptrdiff_t*, ptrdiff_t, float*, const float*, const float*, int, int,
                                   const rlx_nchwc_act*);
typedef void (*rlx_nchwc_strip2_fn)(ptrdiff_t, const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t,
                                    ptrdiff_t, float*, const float*, const float*, int, int, const rlx_nchwc_act*,
                                    const float*, ptrdiff_t);
typedef void (*rlx_nchwc_stem_tile2_fn)(const float*, ptrdiff_t, const float*, const ptrdiff_t*, ptrdiff_t,
                                        ptrdiff_t, float*, ptrdiff_t, const float*, const rlx_nchwc_act*);
#define RLX_NZ_TILE(NP_, NQ_)                                                                          \
    RLX_TARGET_AVX512 static void rlx_nchwc_tile##NQ_##z_##NP_(                                               \
            const float* w, ptrdiff_t wps, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb,        \
            const ptrdiff_t* poff, ptrdiff_t p8, float* y, const float* bias, const float* res, int first, \
            int last, const rlx_nchwc_act* a) {                                                        \
        rlx_nchwc_tile2_body(NQ_, NP_, w, wps, x, koff, nkb, poff, p8, y, bias, res, first, last, a, 0, NULL, 0); \
    }
#define RLX_NZ_RTILE(NP_, NQ_, S_, TAB_)                                                               \
    RLX_TARGET_AVX512 static void rlx_nchwc_rtile##NQ_##zs##S_##_##NP_(                                       \
            const float* w, ptrdiff_t wps, const float* x, const ptrdiff_t* koff, ptrdiff_t nkb,        \
            const ptrdiff_t* poff, ptrdiff_t p8, float* y, const float* bias, const float* res, int first, \
            int last, const rlx_nchwc_act* a) {                                                        \
        (void)poff;                                                                                    \
        rlx_nchwc_tile2_body(NQ_, NP_, w, wps, x, koff, nkb, TAB_, p8, y, bias, res, first, last, a, 0, NULL, 0); \
    }
#define RLX_NZ_STRIP_LOOP(NP_, NQ_, ACT_)                                                                   \
    {                                                                                                  \
        rlx_nchwc_act ac = *a;                                                                         \
        ac.act = ACT_;                                                                                 \
        for (ptrdiff_t i = 0; i < count; ++i)                                                          \
            rlx_nchwc_tile2_body(NQ_, NP_, w, wps, x + i * (NP_ * 8), koff, nkb, rlx_nchwc_unit_poff, p8, \
                                 y + i * (NP_ * 8), bias, res ? res + i * (NP_ * 8) : NULL, first, last, &ac, \
                                 NP_ * 8, i < wpf_n ? wpf + i * wps : NULL,                            \
                                 i + 1 == count && wpf_n > count ? (int)(wpf_n - i) : 1);              \
        return;                                                                                        \
    }
#define RLX_NZ_STRIP(NP_, NQ_)                                                                         \
    RLX_TARGET_AVX512 static void rlx_nchwc_strip##NQ_##z_##NP_(                                              \
            ptrdiff_t count, const float* w, ptrdiff_t wps, const float* x, const ptrdiff_t* koff,      \
            ptrdiff_t nkb, ptrdiff_t p8, float* y, const float* bias, const float* res, int first, int last, \
            const rlx_nchwc_act* a, const float* wpf, ptrdiff_t wpf_n) {                               \
        switch (last ? a->act : RLX_ACT_NONE) {                                                        \
        case RLX_ACT_RELU: RLX_NZ_STRIP_LOOP(NP_, NQ_, RLX_ACT_RELU)                                   \
        case RLX_ACT_CLIP: RLX_NZ_STRIP_LOOP(NP_, NQ_, RLX_ACT_CLIP)                                   \
        case RLX_ACT_NONE: RLX_NZ_STRIP_LOOP(NP_, NQ_, RLX_ACT_NONE)                                   \
        default: RLX_NZ_STRIP_LOOP(NP_, NQ_, a->act)                                                   \
        }                                                                                              \
    }
#define RLX_NZ_STEM(NP_, NQ_)                                                                          \
    RLX_TARGET_AVX512 static void rlx_nchwc_stem_tile##NQ_##z_##NP_(                                          \
            const float* w, ptrdiff_t wps, const float* base, const ptrdiff_t* koff, ptrdiff_t ps,     \
            ptrdiff_t K, float* y, ptrdiff_t p8, const float* bias, const rlx_nchwc_act* a) {          \
        rlx_nchwc_stem_tile2_body(NQ_, NP_, w, wps, base, koff, ps, K, y, p8, bias, a);                 \
    }
#define RLX_NZ_ALL(M_, ...) M_(1, ##__VA_ARGS__) M_(2, ##__VA_ARGS__) M_(3, ##__VA_ARGS__) \
    M_(4, ##__VA_ARGS__) M_(5, ##__VA_ARGS__) M_(6, ##__VA_ARGS__)
RLX_NZ_ALL(RLX_NZ_TILE, 1)
RLX_NZ_ALL(RLX_NZ_TILE, 2)
RLX_NZ_ALL(RLX_NZ_RTILE, 1, 1, rlx_nchwc_unit_poff)
RLX_NZ_ALL(RLX_NZ_RTILE, 2, 1, rlx_nchwc_unit_poff)
RLX_NZ_ALL(RLX_NZ_RTILE, 1, 2, rlx_nchwc_s2_poff)
RLX_NZ_ALL(RLX_NZ_RTILE, 2, 2, rlx_nchwc_s2_poff)
RLX_NZ_ALL(RLX_NZ_STRIP, 1)
RLX_NZ_ALL(RLX_NZ_STRIP, 2)
RLX_NZ_ALL(RLX_NZ_STRIP, 4)
RLX_NZ_ALL(RLX_NZ_STEM, 1)
RLX_NZ_ALL(RLX_NZ_STEM, 2)
RLX_NZ_ALL(RLX_NZ_STEM, 4)
RLX_NZ_STEM(7, 1) RLX_NZ_STEM(8, 1) RLX_NZ_STEM(9, 1) RLX_NZ_STEM(10, 1) RLX_NZ_STEM(11, 1) RLX_NZ_STEM(12, 1)
#define RLX_NZ_ROW(P_) {NULL, P_##1, P_##2, P_##3, P_##4, P_##5, P_##6}
#define RLX_NZ_ROW12(P_) {NULL, P_##1, P_##2, P_##3, P_##4, P_##5, P_##6, P_##7, P_##8, P_##9, P_##10, P_##11, P_##12}
/* [panels - 1][offsets: any, consecutive, every other][pixels] */
static const rlx_nchwc_tile2_fn rlx_nchwc_tiles2[2][3][RLX_NCHWC_NP + 1] = {
    {RLX_NZ_ROW(rlx_nchwc_tile1z_), RLX_NZ_ROW(rlx_nchwc_rtile1zs1_), RLX_NZ_ROW(rlx_nchwc_rtile1zs2_)},
    {RLX_NZ_ROW(rlx_nchwc_tile2z_), RLX_NZ_ROW(rlx_nchwc_rtile2zs1_), RLX_NZ_ROW(rlx_nchwc_rtile2zs2_)}};
/* [panels: 1, 2, 4][pixels] */
static const rlx_nchwc_strip2_fn rlx_nchwc_strips2[3][RLX_NCHWC_NP + 1] = {
    RLX_NZ_ROW(rlx_nchwc_strip1z_), RLX_NZ_ROW(rlx_nchwc_strip2z_), RLX_NZ_ROW(rlx_nchwc_strip4z_)};
/* [panels: 1, 2, 4][pixels]: one panel alone runs up to 12 pixels */
static const rlx_nchwc_stem_tile2_fn rlx_nchwc_stem_tiles2[3][RLX_NCHWC_NPH + 1] = {
    RLX_NZ_ROW12(rlx_nchwc_stem_tile1z_), RLX_NZ_ROW(rlx_nchwc_stem_tile2z_), RLX_NZ_ROW(rlx_nchwc_stem_tile4z_)};
#undef RLX_NZ_ROW
#undef RLX_NZ_ROW12
#undef RLX_NZ_ALL
#undef RLX_NZ_TILE
#undef RLX_NZ_RTILE
#undef RLX_NZ_STRIP
#undef RLX_NZ_STRIP_LOOP
#undef RLX_NZ_STEM
#endif

/* Which constant pixel-offset table a tile's offsets are (0: none, 1:
 * consecutive, 2: every other); for 1 and 2, *x moves to the first pixel. */
static inline int rlx_nchwc_poff_kind(int np, const ptrdiff_t* poff, const float** x) {
    int kind = poff == rlx_nchwc_unit_poff;
    if (!kind && np > 1) {
        /* a tile along one output row: its offsets from the first
         * pixel's are one of the constant tables */
        const ptrdiff_t d = poff[1] - poff[0];
        kind = d == 8 ? 1 : d == 16 ? 2 : 0;
        for (int r = 2; r < np && kind; ++r)
            if (poff[r] - poff[0] != r * d) kind = 0;
        if (kind) *x += poff[0];
    }
    return kind;
}

/* One tile of a blocked conv, dispatched. */
static inline void rlx_nchwc_tile(int level, int np, int nv, const float* w, const float* x, const ptrdiff_t* koff,
                                  ptrdiff_t nkb, const ptrdiff_t* poff, ptrdiff_t p8, float* y, const float* bias,
                                  const float* res, int first, int last, const rlx_nchwc_act* a) {
#if RLX_X86_DISPATCH
    if (level) {
        const int kind = rlx_nchwc_poff_kind(np, poff, &x);
        rlx_nchwc_tiles[kind][nv - 1][np](w, x, koff, nkb, poff, p8, y, bias, res, first, last, a);
        return;
    }
#endif
    (void)level;
    rlx_nchwc_tile_base(np, nv, w, x, koff, nkb, poff, p8, y, bias, res, first, last, a);
}

/* Whether panels q and q+1 (both 16 wide) run as one tile: on the AVX-512
 * level only. */
static inline int rlx_nchwc_pairs(int level) { return level > 1; }

/* Panels per panel group when `panels` split into `groups`: whole pairs of
 * panels where pairs run (panel_groups in _nchwc.pyx counts the groups in
 * the same units). */
static inline ptrdiff_t rlx_nchwc_per_group(ptrdiff_t panels, ptrdiff_t groups, int level) {
    const ptrdiff_t unit = rlx_nchwc_pairs(level) ? 2 : 1, units = (panels + unit - 1) / unit;
    return unit * ((units + groups - 1) / groups);
}

/* The tile of nq (1 or 2) full panels, the second's weight wps floats after
 * the first's (AVX-512; callers check rlx_nchwc_pairs first). */
static inline void rlx_nchwc_tile_z(int nq, int np, const float* w, ptrdiff_t wps, const float* x, const ptrdiff_t* koff,
                                       ptrdiff_t nkb, const ptrdiff_t* poff, ptrdiff_t p8, float* y,
                                       const float* bias, const float* res, int first, int last,
                                       const rlx_nchwc_act* a) {
#if RLX_X86_DISPATCH
    const int kind = rlx_nchwc_poff_kind(np, poff, &x);
    rlx_nchwc_tiles2[nq - 1][kind][np](w, wps, x, koff, nkb, poff, p8, y, bias, res, first, last, a);
#else
    (void)nq, (void)np, (void)w, (void)wps, (void)x, (void)koff, (void)nkb, (void)poff, (void)p8, (void)y, (void)bias;
    (void)res, (void)first, (void)last, (void)a;
    abort();
#endif
}

/* The wide tile of nq full panels (the second's weight wps floats after the
 * first's): np = 7..12 (one panel) or 7..14 (two) pixels at column stride
 * S = 1 or 2 from the corner x (AVX-512; callers check rlx_nchwc_pairs
 * first). */
static inline void rlx_nchwc_tile_w(int nq, int S, int np, const float* w, ptrdiff_t wps, const float* x,
                                    const ptrdiff_t* koff, ptrdiff_t nkb, ptrdiff_t p8, float* y, const float* bias,
                                    const float* res, int first, int last, const rlx_nchwc_act* a) {
#if RLX_X86_DISPATCH
    rlx_nchwc_tilesw[nq - 1][S - 1][np - 7](w, wps, x, koff, nkb, p8, y, bias, res, first, last, a);
#else
    (void)nq, (void)S, (void)np, (void)w, (void)wps, (void)x, (void)koff, (void)nkb, (void)p8, (void)y;
    (void)bias, (void)res, (void)first, (void)last, (void)a;
    abort();
#endif
}

/* `count` tiles of np consecutive pixels each, from x and y on (unit pixel
 * offsets), dispatched. */
static inline void rlx_nchwc_strip(int level, ptrdiff_t count, int np, int nv, const float* w, const float* x,
                                   const ptrdiff_t* koff, ptrdiff_t nkb, ptrdiff_t p8, float* y, const float* bias,
                                   const float* res, int first, int last, const rlx_nchwc_act* a) {
    if (count <= 0) return;
#if RLX_X86_DISPATCH
    if (level) {
        rlx_nchwc_strips[nv - 1][np](count, w, x, koff, nkb, p8, y, bias, res, first, last, a);
        return;
    }
#endif
    for (ptrdiff_t i = 0; i < count; ++i)
        rlx_nchwc_tile(level, np, nv, w, x + i * np * 8, koff, nkb, rlx_nchwc_unit_poff, p8, y + i * np * 8, bias,
                       res ? res + i * np * 8 : NULL, first, last, a);
}

/* `count` tiles of np consecutive pixels of nq (1, 2 or 4) full panels
 * (AVX-512). */
static inline void rlx_nchwc_strip_z(int nq, ptrdiff_t count, int np, const float* w, ptrdiff_t wps, const float* x,
                                        const ptrdiff_t* koff, ptrdiff_t nkb, ptrdiff_t p8, float* y,
                                        const float* bias, const float* res, int first, int last,
                                        const rlx_nchwc_act* a, const float* wpf, ptrdiff_t wpf_n) {
    if (count <= 0) return;
#if RLX_X86_DISPATCH
    rlx_nchwc_strips2[nq >> 1][np](count, w, wps, x, koff, nkb, p8, y, bias, res, first, last, a, wpf, wpf_n);
#else
    (void)nq, (void)np, (void)w, (void)wps, (void)x, (void)koff, (void)nkb, (void)p8, (void)y, (void)bias, (void)res;
    (void)first, (void)last, (void)a, (void)wpf, (void)wpf_n;
    abort();
#endif
}

/* Pixels [pc0, pc0 + len) of one blocked plane, output panels [q0, q1):
 * y = act(W . x + bias + residual) with x's input block kb at x + koff[kb]
 * + pixel * 8, y's (and res's) output block b at y + b * p8 + pixel * 8.
 * K blocks of kcb input channels outermost (a multiple of 8; K: all in one
 * pass per tile), then the panels, then the pixels in tiles of nearly equal
 * size (at most 6; 12 for a half panel).  Partial sums wait in y between K
 * blocks; the epilogue runs on the last.  quads: four full panels per tile
 * where the range has them (AVX-512). */
static void rlx_nchwc_1x1_span(int level, int quads, ptrdiff_t kcb, const float* x, const float* wq, ptrdiff_t K,
                               ptrdiff_t M, ptrdiff_t p8, ptrdiff_t pc0, ptrdiff_t len, ptrdiff_t q0, ptrdiff_t q1,
                               const ptrdiff_t* koff, float* y, const float* bias, const float* res,
                               const rlx_nchwc_act* a, const float* wnext) {
    const int pairs = rlx_nchwc_pairs(level);
    const ptrdiff_t ntiles = (len + RLX_NCHWC_NP - 1) / RLX_NCHWC_NP;
    const ptrdiff_t tbase = len / ntiles, textra = len % ntiles;
    for (ptrdiff_t k0 = 0; k0 < K; k0 += kcb) {
        const ptrdiff_t kc = K - k0 < kcb ? K - k0 : kcb;
        const int first = k0 == 0, last = k0 + kc == K;
        for (ptrdiff_t q = q0; q < q1; ++q) {
            const int nv = M - q * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 2 : 1;
            const float* wqb = wq + (q * K + k0) * RLX_NCHWC_OC;
            const float* bq = bias ? bias + q * RLX_NCHWC_OC : NULL;
            const ptrdiff_t yo = q * RLX_NCHWC_OC / 8 * p8;
            /* textra tiles of tbase + 1 pixels, then the rest of tbase */
            const ptrdiff_t pm = pc0 + textra * (tbase + 1);
            if (pairs && nv == 2) {
                /* four full panels, two, or one */
                const int nq = quads && q + 3 < q1 && M - (q + 3) * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 4
                               : q + 1 < q1 && M - (q + 1) * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 2 : 1;
                /* The weight block the next tiles read (the next panels, else
                 * the first panels of the next K block) is prefetched to L2
                 * by this block's first tiles, one panel each, a line per
                 * input channel: in a model each layer's weight arrives
                 * cold, and the hardware prefetchers, streaming the
                 * current block, fetch the next one only when its tiles
                 * start.  Measured one conv with a cold cache (32 MiB
                 * touched between runs), 1 thread, pair ratios of 31
                 * interleaved samples: 2048->512 and 512->2048 on 7x7
                 * 1.12 / 1.15, 160->960 and 320->1280 on 7x7 1.06 / 1.04,
                 * 1024->256 and 256->1024 on 14x14 1.06 / 1.04, the
                 * others 0.97-1.03; hot 0.98-1.05.  Whole plans, b1, pair
                 * ratios of 21-25: MobileNetV2 1.00-1.02 (1T) 1.02-1.05
                 * (2T), MNASNet 1.02-1.07 / 1.00-1.02, ResNet-50 1.02-1.03
                 * / 1.04, RegNetX-400MF 1.04 / 1.00, EfficientNet-B0 1.03
                 * / 0.99.  After the last block, the caller's wnext (the
                 * Winograd GEMMs: the next position's U block).  A strip
                 * of fewer tiles than panels to fetch has its last tile
                 * fetch the rest. */
                const float* wpf = NULL;
                ptrdiff_t wpf_n = 0;
                if (q + nq < q1) {
                    wpf = wq + ((q + nq) * K + k0) * RLX_NCHWC_OC;
                    wpf_n = q1 - q - nq;
                } else if (k0 + kc < K) {
                    wpf = wq + (q0 * K + k0 + kc) * RLX_NCHWC_OC;
                    wpf_n = q1 - q0;
                } else if (wnext) {
                    wpf = wnext;
                    wpf_n = q1 - q0;
                }
                wpf_n = wpf_n < 4 ? wpf_n : 4;
                rlx_nchwc_strip_z(nq, textra, (int)tbase + 1, wqb, K * RLX_NCHWC_OC, x + pc0 * 8, koff + k0 / 8,
                                  kc / 8, p8, y + yo + pc0 * 8, bq, res ? res + yo + pc0 * 8 : NULL, first, last, a,
                                  wpf, wpf_n < textra ? wpf_n : textra);
                rlx_nchwc_strip_z(nq, ntiles - textra, (int)tbase, wqb, K * RLX_NCHWC_OC, x + pm * 8, koff + k0 / 8,
                                  kc / 8, p8, y + yo + pm * 8, bq, res ? res + yo + pm * 8 : NULL, first, last, a,
                                  wpf ? wpf + textra * K * RLX_NCHWC_OC : NULL, wpf_n - textra);
                q += nq - 1;
                continue;
            }
            if (nv == 1) {
                /* a half panel (8 output channels): tiles of up to 12 */
                const ptrdiff_t nth = (len + RLX_NCHWC_NPH - 1) / RLX_NCHWC_NPH;
                const ptrdiff_t hb = len / nth, hx = len % nth, hm = pc0 + hx * (hb + 1);
                rlx_nchwc_strip(level, hx, (int)hb + 1, 1, wqb, x + pc0 * 8, koff + k0 / 8, kc / 8, p8,
                                y + yo + pc0 * 8, bq, res ? res + yo + pc0 * 8 : NULL, first, last, a);
                rlx_nchwc_strip(level, nth - hx, (int)hb, 1, wqb, x + hm * 8, koff + k0 / 8, kc / 8, p8,
                                y + yo + hm * 8, bq, res ? res + yo + hm * 8 : NULL, first, last, a);
                continue;
            }
            rlx_nchwc_strip(level, textra, (int)tbase + 1, nv, wqb, x + pc0 * 8, koff + k0 / 8, kc / 8, p8,
                            y + yo + pc0 * 8, bq, res ? res + yo + pc0 * 8 : NULL, first, last, a);
            rlx_nchwc_strip(level, ntiles - textra, (int)tbase, nv, wqb, x + pm * 8, koff + k0 / 8, kc / 8, p8,
                            y + yo + pm * 8, bq, res ? res + yo + pm * 8 : NULL, first, last, a);
        }
    }
}

/* Work items [i0, i1): item = (image, pixel chunk, panel group), each a
 * span (above): the block of x the chunk reads stays in L2, a panel's block
 * of W in L1 across the chunk's tiles.  koff[kb] = kb * P * 8: the offsets
 * of the input channel blocks.
 *
 * With nk (not NULL) the conv reads act(x * nk + nb) (an inference batch
 * norm, nk and nb [K], relu when relu is set): each chunk is normed into
 * `scratch` (K/8 blocks of g->chunk pixels, block kb at skoff[kb] = kb *
 * chunk * 8; scratch_len floats, at least K * chunk) by the blocked layout's
 * channel kernel (rlx_chan_span) just before its tiles read it, once per
 * run of items on the chunk (its panel groups are consecutive items): the
 * same values, and so the same bits, as the norm's own pass over x followed
 * by the 1x1, without writing the normed tensor out and reading it back
 * (DenseNet's norm-relu-conv1x1). */
static void rlx_nchwc_1x1_run_norm(const float* x, ptrdiff_t x_len, const float* wq, ptrdiff_t wq_len,
                                   const float* bias, const float* res, ptrdiff_t res_len, float* y,
                                   ptrdiff_t y_len, const ptrdiff_t* koff, const rlx_nchwc_1x1_geom* g,
                                   const rlx_nchwc_act* a, const float* nk, const float* nb, int relu,
                                   float* scratch, ptrdiff_t scratch_len, const ptrdiff_t* skoff, ptrdiff_t i0,
                                   ptrdiff_t i1) {
    const int level = rlx_simd_level(), pairs = rlx_nchwc_pairs(level);
    const ptrdiff_t K = g->k, M = g->m, P = g->p, p8 = P * 8;
    const ptrdiff_t nchunks = (P + g->chunk - 1) / g->chunk;
    const ptrdiff_t panels = (M + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC;
    const ptrdiff_t per_group = rlx_nchwc_per_group(panels, g->groups, level);
    /* four panels per tile where a group has them: the same FMA rate as two
     * panels when this host runs fast, 1.15-1.25x in its slow phases (1x1
     * 64->256 at 56x56 and 512->2048 at 7x7, interleaved A/B), from 10
     * loads per 24 FMAs instead of 8 per 12.  The dense kernel keeps pairs:
     * its four-panel tile measured 0.92-0.96x fast and 0.98-1.08x slow. */
    const int quads = pairs && per_group >= 4;
    const int op = relu ? RLX_CHAN_AFFINE_RELU : RLX_CHAN_AFFINE;
    (void)wq_len;
    (void)res_len;
    (void)scratch_len;
    RLX_CHECK_RANGE(0, rlx_nchwc_1x1_packed_floats(M, K), wq_len, "nchwc 1x1 packed weight");
    if (nk) RLX_CHECK_RANGE(0, K * g->chunk, scratch_len, "nchwc 1x1 norm scratch");
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t grp = item % g->groups, rest = item / g->groups;
        const ptrdiff_t c = rest % nchunks, n = rest / nchunks;
        const ptrdiff_t pc0 = c * g->chunk, pc1 = pc0 + g->chunk < P ? pc0 + g->chunk : P;
        const ptrdiff_t q0 = grp * per_group, q1 = q0 + per_group < panels ? q0 + per_group : panels;
        RLX_CHECK_RANGE(n * K * P, (n + 1) * K * P, x_len, "nchwc 1x1 x");
        RLX_CHECK_RANGE(n * M * P, (n + 1) * M * P, y_len, "nchwc 1x1 y");
        if (res) RLX_CHECK_RANGE(n * M * P, (n + 1) * M * P, res_len, "nchwc 1x1 residual");
        if (!nk) {
            rlx_nchwc_1x1_span(level, quads, RLX_NCHWC_KC, x + n * K * P, wq, K, M, p8, pc0, pc1 - pc0, q0, q1,
                               koff, y + n * M * P, bias, res ? res + n * M * P : NULL, a, NULL);
            continue;
        }
        if (item == i0 || grp == 0)
            for (ptrdiff_t kb = 0; kb < K / 8; ++kb)
                rlx_chan_span(op, 1, x + n * K * P + koff[kb] + pc0 * 8, nk + kb * 8, nb + kb * 8,
                              scratch + skoff[kb], pc1 - pc0);
        rlx_nchwc_1x1_span(level, quads, RLX_NCHWC_KC, scratch, wq, K, M, p8, 0, pc1 - pc0, q0, q1, skoff,
                           y + n * M * P + pc0 * 8, bias, res ? res + n * M * P + pc0 * 8 : NULL, a, NULL);
    }
}

/* rlx_nchwc_1x1_run_norm without a norm */
static void rlx_nchwc_1x1_run(const float* x, ptrdiff_t x_len, const float* wq, ptrdiff_t wq_len,
                              const float* bias, const float* res, ptrdiff_t res_len, float* y, ptrdiff_t y_len,
                              const ptrdiff_t* koff, const rlx_nchwc_1x1_geom* g, const rlx_nchwc_act* a,
                              ptrdiff_t i0, ptrdiff_t i1) {
    rlx_nchwc_1x1_run_norm(x, x_len, wq, wq_len, bias, res, res_len, y, y_len, koff, g, a, NULL, NULL, 0, NULL, 0,
                           NULL, i0, i1);
}

/* ---- dense and grouped conv on blocked input ------------------------------
 * y[n, M/8, Ho, Wo, 8] = conv(x[n, C/8, H, W, 8], W[M, C/G, kh, kw]) (+ bias)
 * (+ residual), act, all blocked, in G conv groups of C/G input and M/G
 * output channels (multiples of 8).  The input is first copied with its zero
 * padding into xp [n, C/8, Hp, Wp, 8] (or read in place when there is no
 * padding), so every tile reads inside it: tap block kb = (cb, i, j) of
 * output pixel (oh, ow) is at xp + koff[kb] + ((oh*sh)*Wp + ow*sw)*8 with
 * koff[kb] = cb*Hp*Wp*8 + (i*dh*Wp + j*dw)*8, and the packed weight's depth
 * runs k = ((cb*kh + i)*kw + j)*8 + channel in block, cb counted within the
 * group.  Each group's weight is packed on its own (panels of 16 of its
 * output channels, the last one 8 wide when M/G % 16 == 8), so a panel never
 * spans two groups; group g's tap blocks are koff[g*nkb .. (g+1)*nkb). */
/* Output pixels per work item of the dense kernel, at most (whole rows of
 * the wide tiles up to this many: _nchwc.dense_item_pixels). */
#define RLX_NCHWC_DENSE_ITEM 256

typedef struct {
    ptrdiff_t n, c, h, w, m, h_out, w_out, sh, sw, pt, pl, hp, wp;
    ptrdiff_t nkb;             /* tap blocks per conv group: C/G/8 * kh * kw */
    ptrdiff_t cgroups;         /* conv groups G */
    ptrdiff_t pixels;          /* output pixels per work item */
    ptrdiff_t groups;          /* panel groups per block of pixels (work split) */
    /* a 3-D conv: d_out output slices of h_out x w_out (0 or 1: 2-D), depth
     * stride sd, hs padded rows per input slice (hp is then all slices'
     * rows); output pixel (od, oh, ow) reads from its corner
     * ((od*sd*hs + oh*sh)*wp + ow*sw)*8, and the tap offsets koff carry the
     * kernel's depth too */
    ptrdiff_t d_out, sd, hs;
    /* tiles in output rows that reach into the top or bottom padding skip
     * the taps that read only padding (a 2-D conv with row padding, else
     * tap_rows = 0): tap_rows x tap_cols taps per input channel block at row
     * dilation dh; output rows [rt, rb) read no padding rows */
    ptrdiff_t tap_rows, tap_cols, dh, rt, rb;
} rlx_nchwc_dense_geom;

/* panels of one conv group's packed weight, and its floats */
static inline ptrdiff_t rlx_nchwc_dense_group_panels(const rlx_nchwc_dense_geom* g) {
    return (g->m / g->cgroups + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC;
}

/* blocks (n, cb) [i0, i1) of a 3-D x [.., D, H, W, 8] copied into xp [..,
 * Dp, Hp, Wp, 8] at (pf, pt, pl) with the padding zeroed */
static void rlx_nchwc_pad3d(const float* x, ptrdiff_t x_len, float* xp, ptrdiff_t xp_len, ptrdiff_t d, ptrdiff_t h,
                            ptrdiff_t w, ptrdiff_t dp, ptrdiff_t hp, ptrdiff_t wp, ptrdiff_t pf, ptrdiff_t pt,
                            ptrdiff_t pl, ptrdiff_t i0, ptrdiff_t i1) {
    const ptrdiff_t in_vol = d * h * w * 8, pad_vol = dp * hp * wp * 8, row = w * 8;
    (void)x_len;
    (void)xp_len;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const float* s = x + item * in_vol;
        float* o = xp + item * pad_vol;
        RLX_CHECK_RANGE(item * in_vol, (item + 1) * in_vol, x_len, "nchwc pad3d source");
        RLX_CHECK_RANGE(item * pad_vol, (item + 1) * pad_vol, xp_len, "nchwc pad3d copy");
        for (ptrdiff_t z = 0; z < dp; ++z) {
            float* dz = o + z * hp * wp * 8;
            const ptrdiff_t iz = z - pf;
            if (iz < 0 || iz >= d) {
                memset(dz, 0, sizeof(float) * (size_t)(hp * wp * 8));
                continue;
            }
            memset(dz, 0, sizeof(float) * (size_t)(pt * wp * 8));
            for (ptrdiff_t r = 0; r < h; ++r) {
                float* dr = dz + ((pt + r) * wp) * 8;
                memset(dr, 0, sizeof(float) * (size_t)(pl * 8));
                memcpy(dr + pl * 8, s + (iz * h + r) * row, sizeof(float) * (size_t)row);
                memset(dr + pl * 8 + row, 0, sizeof(float) * (size_t)((wp - pl - w) * 8));
            }
            memset(dz + (pt + h) * wp * 8, 0, sizeof(float) * (size_t)((hp - pt - h) * wp * 8));
        }
    }
}

/* blocks (n, cb) [i0, i1) of x copied into xp with the padding zeroed (the
 * 3-D copy of one slice) */
static void rlx_nchwc_pad(const float* x, ptrdiff_t x_len, float* xp, ptrdiff_t xp_len,
                          const rlx_nchwc_dense_geom* g, ptrdiff_t i0, ptrdiff_t i1) {
    rlx_nchwc_pad3d(x, x_len, xp, xp_len, 1, g->h, g->w, 1, g->hp, g->wp, 0, g->pt, g->pl, i0, i1);
}

/* blocks (n, cb) [i0, i1) of x [.., H, W, 8] copied into xp [.., Hp, 2*wq, 8]
 * with the padding zeroed and each padded row split by column parity:
 * padded column c goes to slot (c & 1) * wq + (c >> 1), wq = ceil(Wp / 2)
 * (the odd half's last slot zero when Wp is odd).  A conv at column stride
 * 2 then reads consecutive slots: output column ow, tap column j at
 * (j & 1) * wq + ow + (j >> 1). */
static void rlx_nchwc_pad_phase2(const float* x, ptrdiff_t x_len, float* xp, ptrdiff_t xp_len, ptrdiff_t h,
                                 ptrdiff_t w, ptrdiff_t hp, ptrdiff_t wq, ptrdiff_t pt, ptrdiff_t pl, ptrdiff_t i0,
                                 ptrdiff_t i1) {
    const ptrdiff_t in_plane = h * w * 8, row = 2 * wq * 8, out_plane = hp * row;
    (void)x_len;
    (void)xp_len;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const float* s = x + item * in_plane;
        float* o = xp + item * out_plane;
        RLX_CHECK_RANGE(item * in_plane, (item + 1) * in_plane, x_len, "nchwc phase copy source");
        RLX_CHECK_RANGE(item * out_plane, (item + 1) * out_plane, xp_len, "nchwc phase copy");
        for (ptrdiff_t r = 0; r < hp; ++r) {
            float* d = o + r * row;
            const ptrdiff_t ir = r - pt;
            if (ir < 0 || ir >= h) {
                memset(d, 0, sizeof(float) * (size_t)row);
                continue;
            }
            const float* sr = s + ir * w * 8;
            for (ptrdiff_t ph = 0; ph < 2; ++ph) {
                /* slot k holds padded column 2k + ph, pixel 2k + o of sr:
                 * one for k in [k0, k1), the rest padding.  No test per
                 * slot: RegNet's grouped 3x3 s2 convs (16->16 from 112x112,
                 * 24->24 from 56x56) 1.02-1.04x kernel time at batch 1 and
                 * 8, 1 and 2 threads, interleaved; ResNet's 0.99-1.01x */
                const ptrdiff_t o = ph - pl, k0 = o >= 0 ? 0 : (1 - o) / 2;
                ptrdiff_t k1 = w - o > 0 ? (w - o + 1) / 2 : 0;
                if (k1 > wq) k1 = wq;
                if (k1 < k0) k1 = k0;
                float* dp = d + ph * wq * 8;
                memset(dp, 0, sizeof(float) * (size_t)(k0 * 8));
                for (ptrdiff_t k = k0; k < k1; ++k) memcpy(dp + k * 8, sr + (2 * k + o) * 8, 8 * sizeof(float));
                memset(dp + k1 * 8, 0, sizeof(float) * (size_t)((wq - k1) * 8));
            }
        }
    }
}

/* Planes [i0, i1) (image * C/8 + block): the strided sub-grid of an H x W
 * plane of blocked pixels -- rows a + sh*r, columns b + sw*c for r < rows,
 * c < cols -- copied to (gather) or from (scatter) a dense rows x cols grid:
 * gather: dst[i][r][c] = src[i][a + sh*r][b + sw*c]; scatter: the reverse. */
static void rlx_nchwc_strided_copy(const float* src, ptrdiff_t src_len, float* dst, ptrdiff_t dst_len,
                                   ptrdiff_t rows, ptrdiff_t cols, ptrdiff_t H, ptrdiff_t W, ptrdiff_t a, ptrdiff_t b,
                                   ptrdiff_t sh, ptrdiff_t sw, int gather, ptrdiff_t i0, ptrdiff_t i1) {
    const ptrdiff_t grid = rows * cols * 8, plane = H * W * 8;
    (void)src_len;
    (void)dst_len;
    for (ptrdiff_t i = i0; i < i1; ++i) {
        RLX_CHECK_RANGE(i * (gather ? plane : grid), (i + 1) * (gather ? plane : grid), src_len,
                        "nchwc strided copy source");
        RLX_CHECK_RANGE(i * (gather ? grid : plane), (i + 1) * (gather ? grid : plane), dst_len,
                        "nchwc strided copy destination");
        const float* sp = src + i * (gather ? plane : grid);
        float* dp = dst + i * (gather ? grid : plane);
        for (ptrdiff_t r = 0; r < rows; ++r) {
            const ptrdiff_t strided = ((a + r * sh) * W + b) * 8, dense = r * cols * 8;
            if (gather)
                for (ptrdiff_t c = 0; c < cols; ++c)
                    memcpy(dp + dense + c * 8, sp + strided + c * sw * 8, 8 * sizeof(float));
            else
                for (ptrdiff_t c = 0; c < cols; ++c)
                    memcpy(dp + strided + c * sw * 8, sp + dense + c * 8, 8 * sizeof(float));
        }
    }
}

/* A strided 1x1 conv (no padding) reads every sh-th row and sw-th column:
 * plane i = image * C/8 + block of x [.., H, W, 8] copied subsampled into
 * xs [.., H_out, W_out, 8], on which the 1x1 kernel runs at full speed
 * (whole vectors of consecutive pixels, strips of tiles). */
static void rlx_nchwc_subsample(const float* x, ptrdiff_t x_len, float* xs, ptrdiff_t xs_len, ptrdiff_t h,
                                ptrdiff_t w, ptrdiff_t ho, ptrdiff_t wo, ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t i0,
                                ptrdiff_t i1) {
    rlx_nchwc_strided_copy(x, x_len, xs, xs_len, ho, wo, h, w, 0, 0, sh, sw, 1, i0, i1);
}

/* Lines [a*nl/len, b*nl/len) of the nl 64-byte lines of two weight panels
 * (at w and w + wps) prefetched towards L2: the share of tile pixels [a, b)
 * of an item of len pixels, so the item's tiles on one K block bring in the
 * next one (a prefetch past the weight's end does not fault). */
static inline void rlx_nchwc_prefetch_slice(const float* w, ptrdiff_t wps, ptrdiff_t nl, ptrdiff_t a, ptrdiff_t b,
                                            ptrdiff_t len) {
    if (!w) return;
    for (ptrdiff_t l = a * nl / len, l1 = b * nl / len; l < l1; ++l) {
        __builtin_prefetch(w + l * 16, 0, 2);
        __builtin_prefetch(w + wps + l * 16, 0, 2);
    }
}

/* The taps [*a0, *a1) of each input channel block (tap_rows x tap_cols of
 * them, row-major) that output row oh reads inside the input, when that
 * is not all of them; 0 when the row's tiles run every tap (no row
 * padding, a row clear of it, or a row that reads only padding, whose
 * padded taps give its zeros). */
static inline int rlx_nchwc_dense_row_taps(const rlx_nchwc_dense_geom* g, ptrdiff_t oh, ptrdiff_t* a0,
                                           ptrdiff_t* a1) {
    if (!g->tap_rows || (oh >= g->rt && oh < g->rb)) return 0;
    const ptrdiff_t lo = g->pt - oh * g->sh, hi = g->h + g->pt - oh * g->sh;
    const ptrdiff_t i0 = lo > 0 ? (lo + g->dh - 1) / g->dh : 0;
    ptrdiff_t i1 = hi > 0 ? (hi + g->dh - 1) / g->dh : 0;
    if (i1 > g->tap_rows) i1 = g->tap_rows;
    if (i0 >= i1) return 0;
    *a0 = i0 * g->tap_cols;
    *a1 = i1 * g->tap_cols;
    return 1;
}

/* The end of the run of output pixels from p (before p1) whose rows read
 * the same taps: the rows clear of the padding together, each other row
 * alone. */
static inline ptrdiff_t rlx_nchwc_dense_segment(const rlx_nchwc_dense_geom* g, ptrdiff_t p, ptrdiff_t p1,
                                                ptrdiff_t wo) {
    if (!g->tap_rows) return p1;
    const ptrdiff_t oh = p / wo, end = (oh >= g->rt && oh < g->rb ? g->rb : oh + 1) * wo;
    return end < p1 ? end : p1;
}

/* One tile of the dense kernel over the K block of nkb tap blocks from
 * kb0 (w and koff already at kb0): with rows (rlx_nchwc_dense_row_taps), only
 * the taps [a0, a1) of each input channel block, as one call per block
 * (the accumulators go through y between them; first and last then mark
 * the group's first and last tap read).  how: 0 rlx_nchwc_tile (nv
 * vectors), 1 rlx_nchwc_tile_z (nv = nq panels), 2 rlx_nchwc_tile_w (nv
 * panels at column stride S from the corner x). */
static inline void rlx_nchwc_dense_tile(int how, int level, int nv, int S, int np, const float* w, ptrdiff_t wps,
                                        const float* x, const ptrdiff_t* koff, ptrdiff_t kb0, ptrdiff_t nkb,
                                        ptrdiff_t gkb, int rows, ptrdiff_t taps, ptrdiff_t a0, ptrdiff_t a1,
                                        const ptrdiff_t* poff, ptrdiff_t p8, float* y, const float* bias,
                                        const float* res, int first, int last, const rlx_nchwc_act* a) {
    ptrdiff_t cb = kb0 / taps, cb1 = (kb0 + nkb - 1) / taps;
    if (!rows) {
        a0 = 0;
        a1 = taps;
        cb1 = cb;
    }
    for (; cb <= cb1; ++cb) {
        ptrdiff_t s = cb * taps + a0, e = cb * taps + a1;
        int f = first, l = last;
        if (rows) {
            if (s < kb0) s = kb0;
            if (e > kb0 + nkb) e = kb0 + nkb;
            if (s >= e) continue;
            f = s == a0;
            l = e == gkb - taps + a1;
        } else {
            s = kb0;
            e = kb0 + nkb;
        }
        const float* ws = w + (s - kb0) * 8 * RLX_NCHWC_OC;
        const ptrdiff_t* ks = koff + (s - kb0);
        if (how == 0)
            rlx_nchwc_tile(level, np, nv, ws, x, ks, e - s, poff, p8, y, bias, res, f, l, a);
        else if (how == 1)
            rlx_nchwc_tile_z(nv, np, ws, wps, x, ks, e - s, poff, p8, y, bias, res, f, l, a);
        else
            rlx_nchwc_tile_w(nv, S, np, ws, wps, x, ks, e - s, p8, y, bias, res, f, l, a);
    }
}

/* Work items [i0, i1): item = (image, block of g->pixels output pixels
 * counted row after row, panel group); per item K blocks of RLX_NCHWC_KC
 * outermost (a panel's block of W stays in L1 across the block's tiles),
 * then the group's panels, then the pixels in tiles of nearly equal size,
 * which may run across output rows (on a 7x7 plane 49 = 4 x 6 + 5 x 5, not
 * rows of 4 + 3). */
static void rlx_nchwc_dense_run(const float* xp, ptrdiff_t xp_len, const float* wq, ptrdiff_t wq_len,
                                const float* bias, const float* res, ptrdiff_t res_len, float* y, ptrdiff_t y_len,
                                const ptrdiff_t* koff, const rlx_nchwc_dense_geom* g, const rlx_nchwc_act* a,
                                ptrdiff_t i0, ptrdiff_t i1) {
    const int level = rlx_simd_level(), pairs = rlx_nchwc_pairs(level);
    const ptrdiff_t M = g->m, K = g->nkb * 8, wo = g->w_out, hw = g->h_out * wo;
    const ptrdiff_t P = (g->d_out > 1 ? g->d_out : 1) * hw, p8 = P * 8;
    const ptrdiff_t mg = M / g->cgroups, gpanels = rlx_nchwc_dense_group_panels(g);
    const ptrdiff_t panels = gpanels * g->cgroups;
    const ptrdiff_t per_group = rlx_nchwc_per_group(panels, g->groups, level);
    const ptrdiff_t pblocks = (P + g->pixels - 1) / g->pixels;
    const ptrdiff_t kcb = RLX_NCHWC_KC / 8;
    const ptrdiff_t img = g->c * g->hp * g->wp;
    /* tap blocks per input channel block (rlx_nchwc_dense_tile) */
    const ptrdiff_t taps = g->tap_rows ? g->tap_rows * g->tap_cols : g->nkb;
    /* panels run the wide tiles along output rows wider than a 6-pixel tile:
     * one panel at column stride 1 or 2; two at stride 1 (256->256 at 14x14
     * and 512->512 at 7x7: 1.04-1.07x the 6-pixel tiles in most interleaved
     * A/B rounds; at stride 2, 128->128 from 56x56, 0.94-1.00x) */
    const int rows1 = pairs && wo > RLX_NCHWC_NP && (g->sw == 1 || g->sw == 2);
    /* items of whole rows at least two half-panel tiles wide (with the AVX2
     * tiles, _nchwc.pyx dense_item_pixels): tiles stay within a row, and so
     * read their pixels at constant offsets (rlx_nchwc_poff_kind) */
    const int per_row = g->pixels % wo == 0 && wo >= 2 * RLX_NCHWC_NPH;
    ptrdiff_t poff[RLX_NCHWC_DENSE_ITEM];
    (void)xp_len;
    (void)wq_len;
    (void)res_len;
    (void)y_len;
    if (g->pixels > RLX_NCHWC_DENSE_ITEM) {
        fprintf(stderr, "rlx_cpu: rlx_nchwc_dense_run: %td pixels per item > %d\n", (ptrdiff_t)g->pixels,
                RLX_NCHWC_DENSE_ITEM);
        abort();
    }
    RLX_CHECK_RANGE(0, g->cgroups * rlx_nchwc_1x1_packed_floats(mg, K), wq_len, "nchwc dense packed weight");
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t grp = item % g->groups, rest = item / g->groups;
        const ptrdiff_t pb = rest % pblocks, n = rest / pblocks;
        const ptrdiff_t p0 = pb * g->pixels, p1 = p0 + g->pixels < P ? p0 + g->pixels : P;
        const ptrdiff_t q0 = grp * per_group, q1 = q0 + per_group < panels ? q0 + per_group : panels;
        const ptrdiff_t len = p1 - p0;
        const float* ximg = xp + n * img;
        /* each pixel's input corner, once per item (not per tile and K block) */
        for (ptrdiff_t p = p0; p < p1; ++p) {
            const ptrdiff_t od = p / hw, r = p % hw;
            poff[p - p0] = ((od * g->sd * g->hs + (r / wo) * g->sh) * g->wp + (r % wo) * g->sw) * 8;
        }
        RLX_CHECK_RANGE(n * img, (n + 1) * img, xp_len, "nchwc dense x");
        RLX_CHECK_RANGE(n * M * P, (n + 1) * M * P, y_len, "nchwc dense y");
        if (res) RLX_CHECK_RANGE(n * M * P, (n + 1) * M * P, res_len, "nchwc dense residual");
        for (ptrdiff_t kb0 = 0; kb0 < g->nkb; kb0 += kcb) {
            const ptrdiff_t nkb = g->nkb - kb0 < kcb ? g->nkb - kb0 : kcb;
            const int first = kb0 == 0, last = kb0 + nkb == g->nkb;
            for (ptrdiff_t q = q0; q < q1; ++q) {
                const ptrdiff_t cg = q / gpanels, m0 = cg * mg + (q % gpanels) * RLX_NCHWC_OC;
                const int nv = cg * mg + mg - m0 >= RLX_NCHWC_OC ? 2 : 1;
                const float* wqb = wq + (q * K + kb0 * 8) * RLX_NCHWC_OC;
                const float* bq = bias ? bias + m0 : NULL;
                const ptrdiff_t yo = (n * M + m0) * P;
                /* panels q and q + 1 of one conv group, both full, or q alone
                 * when full: one AVX-512 tile (how 1), else rlx_nchwc_tile
                 * (how 0) */
                const int z = pairs && nv == 2;
                const int nq =
                    z && q + 1 < q1 && (q + 1) / gpanels == cg && cg * mg + mg - m0 >= 2 * RLX_NCHWC_OC ? 2 : 1;
                /* the weight K block the item's next AVX-512 tiles read (the
                 * next panels' or the next K block's first), brought in a
                 * slice per tile: in ResNet-18 and -50 at 1 and 2 threads the
                 * dense convs took 4-5% less time against the Winograd convs
                 * in the same runs (cold weights: each layer's are read once
                 * per run) */
                const float* nx = NULL;
                ptrdiff_t nl = 0;
                if (z && q + nq < q1) {
                    nx = wqb + nq * K * RLX_NCHWC_OC;
                    nl = nkb * 8;
                } else if (z && kb0 + kcb < g->nkb) {
                    nx = wq + (q0 * K + (kb0 + kcb) * 8) * RLX_NCHWC_OC;
                    nl = (g->nkb - kb0 - kcb < kcb ? g->nkb - kb0 - kcb : kcb) * 8;
                }
                if (z && rows1 && (nq == 1 || g->sw == 1)) {
                    /* wide tiles of up to 12 (one panel) or 14 (two) pixels
                     * along each output row of the block */
                    const ptrdiff_t most = nq == 1 ? RLX_NCHWC_NP1W : RLX_NCHWC_NP2W;
                    for (ptrdiff_t p = p0; p < p1;) {
                        const ptrdiff_t left = wo - p % wo, seg = left < p1 - p ? left : p1 - p;
                        const ptrdiff_t nt = (seg + most - 1) / most;
                        const ptrdiff_t sb = seg / nt, sx = seg % nt;
                        ptrdiff_t a0 = 0, a1 = taps;
                        const int rows = rlx_nchwc_dense_row_taps(g, p / wo, &a0, &a1);
                        for (ptrdiff_t t = 0; t < nt; p += sb + (t < sx), ++t) {
                            const int np = (int)(sb + (t < sx));
                            const int wide = np > RLX_NCHWC_NP;
                            rlx_nchwc_prefetch_slice(nx, K * RLX_NCHWC_OC, nl, p - p0, p + np - p0, len);
                            rlx_nchwc_dense_tile(wide ? 2 : 1, level, nq, (int)g->sw, np, wqb, K * RLX_NCHWC_OC,
                                                 wide ? ximg + poff[p - p0] : ximg, koff + cg * g->nkb + kb0, kb0,
                                                 nkb, g->nkb, rows, taps, a0, a1, poff + (p - p0), p8,
                                                 y + yo + p * 8, bq, res ? res + yo + p * 8 : NULL, first, last, a);
                        }
                    }
                    q += nq - 1;
                    continue;
                }
                /* runs of pixels whose rows read the same taps, each in
                 * tiles of nearly equal size, which may run across output
                 * rows (on a 7x7 plane 49 = 4 x 6 + 5 x 5, not rows of 4 + 3);
                 * a half panel (8 output channels) in tiles of up to 12 */
                const ptrdiff_t most = !z && nv == 1 ? RLX_NCHWC_NPH : RLX_NCHWC_NP;
                for (ptrdiff_t p = p0; p < p1;) {
                    ptrdiff_t end = rlx_nchwc_dense_segment(g, p, p1, wo);
                    if (per_row && (p / wo + 1) * wo < end) end = (p / wo + 1) * wo;
                    const ptrdiff_t seg = end - p;
                    const ptrdiff_t nt = (seg + most - 1) / most;
                    const ptrdiff_t sb = seg / nt, sx = seg % nt;
                    ptrdiff_t a0 = 0, a1 = taps;
                    const int rows = rlx_nchwc_dense_row_taps(g, p / wo, &a0, &a1);
                    for (ptrdiff_t t = 0; t < nt; p += sb + (t < sx), ++t) {
                        const int np = (int)(sb + (t < sx));
                        rlx_nchwc_prefetch_slice(nx, K * RLX_NCHWC_OC, nl, p - p0, p + np - p0, len);
                        rlx_nchwc_dense_tile(z, level, z ? nq : nv, 1, np, wqb, K * RLX_NCHWC_OC, ximg,
                                             koff + cg * g->nkb + kb0, kb0, nkb, g->nkb, rows, taps, a0, a1,
                                             poff + (p - p0), p8, y + yo + p * 8, bq, res ? res + yo + p * 8 : NULL,
                                             first, last, a);
                    }
                }
                q += nq - 1;
            }
        }
    }
}

/* ---- transposed conv by output phases -------------------------------------
 * A transposed conv of stride (sh, sw) splits into sh*sw stride-1 dense
 * convs, one per output phase (a, b): the outputs (a + sh*i, b + sw*j).
 * Each phase runs the dense kernel above into z [n, M/8, Ph, Pw, 8]; this
 * copies planes [i0, i1) (image * M/8 + block) of one phase into their
 * places in y [n, M/8, Ho, Wo, 8]. */
static void rlx_nchwc_phase_scatter(const float* z, ptrdiff_t z_len, float* y, ptrdiff_t y_len, ptrdiff_t ph,
                                    ptrdiff_t pw, ptrdiff_t ho, ptrdiff_t wo, ptrdiff_t a, ptrdiff_t b,
                                    ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t i0, ptrdiff_t i1) {
    rlx_nchwc_strided_copy(z, z_len, y, y_len, ph, pw, ho, wo, a, b, sh, sw, 0, i0, i1);
}

/* ---- dense conv from NCHW input (the network's stem) ----------------------
 * y[n, M/8, Ho, Wo, 8] (blocked) = conv(x[n, C, H, W] (NCHW, few channels),
 * W[M, C, kh, kw]) + bias, act.  The GEMM depth is K = C*kh*kw taps, packed
 * like the 1x1 weight (panels of 16 output channels, k in (c, kh, kw)
 * order).  A tile is 6 output pixels of one row x 16 output channels; tap k
 * of pixel r reads x at base + koff[k] + r*s, base being the tile's
 * top-left input corner, so interior tiles broadcast straight from x.  A
 * tile that touches the padding first gathers its K x np inputs (zeros on
 * the padding) into a small buffer read the same way with pixel stride 1;
 * each output is bias, then the taps in order, either way. */
typedef struct {
    ptrdiff_t c, h, w, m, h_out, w_out, kh, kw, sh, sw, ph, pw, dh, dw;
} rlx_nchwc_stem_geom;

#define RLX_NCHWC_STEM_MAX_K 512

/* koff[k] for k = (c, i, j): c*H*W + i*dh*W + j*dw */
static void rlx_nchwc_stem_offsets(const rlx_nchwc_stem_geom* g, ptrdiff_t* koff) {
    ptrdiff_t k = 0;
    for (ptrdiff_t c = 0; c < g->c; ++c)
        for (ptrdiff_t i = 0; i < g->kh; ++i)
            for (ptrdiff_t j = 0; j < g->kw; ++j) koff[k++] = c * g->h * g->w + i * g->dh * g->w + j * g->dw;
}

static void rlx_nchwc_stem_tile_base(int np, int nv, const float* w, const float* base, const ptrdiff_t* koff,
                                     ptrdiff_t ps, ptrdiff_t K, float* y, ptrdiff_t p8, const float* bias,
                                     const rlx_nchwc_act* a) {
    float acc[RLX_NCHWC_NPH][RLX_NCHWC_OC];
    for (int r = 0; r < np; ++r)
        for (int j = 0; j < 8 * nv; ++j) acc[r][j] = bias ? bias[j] : 0.0f;
    for (ptrdiff_t k = 0; k < K; ++k)
        for (int r = 0; r < np; ++r) {
            const float xv = base[koff[k] + r * ps];
            for (int j = 0; j < 8 * nv; ++j) acc[r][j] = fmaf(xv, w[k * RLX_NCHWC_OC + j], acc[r][j]);
        }
    for (int r = 0; r < np; ++r)
        for (int j = 0; j < 8 * nv; ++j) y[(j / 8) * p8 + r * 8 + j % 8] = rlx_nchwc_act1(acc[r][j], a);
}

#if RLX_X86_DISPATCH
/* rows 6..11 for half panels only (nv 1), as rlx_nchwc_tile_body's */
#define RLX_NS_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define RLX_NS_DECL(r) __m256 a##r##0 = b0, a##r##1 = b1;
#define RLX_NS_FMA(r)                                                            \
    if (np > r) {                                                                \
        const __m256 xv = _mm256_broadcast_ss(xk + (r) * ps);                    \
        a##r##0 = _mm256_fmadd_ps(xv, w0, a##r##0);                              \
        if (nv > 1) a##r##1 = _mm256_fmadd_ps(xv, w1, a##r##1);                  \
    }
#define RLX_NS_STORE(r)                                                          \
    if (np > r) {                                                                \
        _mm256_storeu_ps(y + (r) * 8, rlx_nchwc_act8_light(a##r##0, a));         \
        if (nv > 1) _mm256_storeu_ps(y + p8 + (r) * 8, rlx_nchwc_act8_light(a##r##1, a)); \
    }
RLX_INLINE_AVX2 void rlx_nchwc_stem_tile_body(const int np, const int nv, const float* restrict w,
                                              const float* restrict base, const ptrdiff_t* restrict koff,
                                              ptrdiff_t ps, ptrdiff_t K, float* restrict y, ptrdiff_t p8,
                                              const float* restrict bias, const rlx_nchwc_act* a) {
    const __m256 b0 = bias ? _mm256_loadu_ps(bias) : _mm256_setzero_ps();
    const __m256 b1 = bias && nv > 1 ? _mm256_loadu_ps(bias + 8) : _mm256_setzero_ps();
    RLX_NS_ROWS(RLX_NS_DECL)
    for (ptrdiff_t k = 0; k < K; ++k) {
        const float* xk = base + koff[k];
        const __m256 w0 = _mm256_loadu_ps(w);
        const __m256 w1 = nv > 1 ? _mm256_loadu_ps(w + 8) : w0;
        RLX_NS_ROWS(RLX_NS_FMA)
        w += RLX_NCHWC_OC;
    }
    RLX_NS_ROWS(RLX_NS_STORE)
    if (rlx_act_heavy(a->act)) rlx_act_blocks_avx2(y, p8, nv, np * 8, a);
}
#undef RLX_NS_DECL
#undef RLX_NS_FMA
#undef RLX_NS_STORE
#undef RLX_NS_ROWS
typedef void (*rlx_nchwc_stem_tile_fn)(const float*, const float*, const ptrdiff_t*, ptrdiff_t, ptrdiff_t, float*,
                                       ptrdiff_t, const float*, const rlx_nchwc_act*);
#define RLX_NS_TILE(NP_, NV_)                                                                           \
    RLX_TARGET_AVX2 static void rlx_nchwc_stem_tile_##NP_##_##NV_(                                      \
            const float* w, const float* base, const ptrdiff_t* koff, ptrdiff_t ps, ptrdiff_t K, float* y, \
            ptrdiff_t p8, const float* bias, const rlx_nchwc_act* a) {                                 \
        rlx_nchwc_stem_tile_body(NP_, NV_, w, base, koff, ps, K, y, p8, bias, a);                       \
    }
RLX_NS_TILE(1, 1) RLX_NS_TILE(2, 1) RLX_NS_TILE(3, 1) RLX_NS_TILE(4, 1) RLX_NS_TILE(5, 1) RLX_NS_TILE(6, 1)
RLX_NS_TILE(1, 2) RLX_NS_TILE(2, 2) RLX_NS_TILE(3, 2) RLX_NS_TILE(4, 2) RLX_NS_TILE(5, 2) RLX_NS_TILE(6, 2)
RLX_NS_TILE(7, 1) RLX_NS_TILE(8, 1) RLX_NS_TILE(9, 1) RLX_NS_TILE(10, 1) RLX_NS_TILE(11, 1) RLX_NS_TILE(12, 1)
#undef RLX_NS_TILE
/* [vectors - 1][pixels]: up to RLX_NCHWC_NPH pixels of one vector, RLX_NCHWC_NP of two */
static const rlx_nchwc_stem_tile_fn rlx_nchwc_stem_tiles[2][RLX_NCHWC_NPH + 1] = {
    {NULL, rlx_nchwc_stem_tile_1_1, rlx_nchwc_stem_tile_2_1, rlx_nchwc_stem_tile_3_1, rlx_nchwc_stem_tile_4_1,
     rlx_nchwc_stem_tile_5_1, rlx_nchwc_stem_tile_6_1, rlx_nchwc_stem_tile_7_1, rlx_nchwc_stem_tile_8_1,
     rlx_nchwc_stem_tile_9_1, rlx_nchwc_stem_tile_10_1, rlx_nchwc_stem_tile_11_1, rlx_nchwc_stem_tile_12_1},
    {NULL, rlx_nchwc_stem_tile_1_2, rlx_nchwc_stem_tile_2_2, rlx_nchwc_stem_tile_3_2, rlx_nchwc_stem_tile_4_2,
     rlx_nchwc_stem_tile_5_2, rlx_nchwc_stem_tile_6_2}};
#endif

/* Output rows [r0, r1), r = n * h_out + oh, every panel and pixel tile. */
/* NCHW planes [i0, i1) of x (h x w) copied into xp (hp x wp) at row pt,
 * column pl, the border zeroed: with this copy every stem tile reads inside
 * its input, so none gathers. */
static void rlx_nchwc_stem_pad(const float* x, ptrdiff_t x_len, float* xp, ptrdiff_t xp_len, ptrdiff_t h,
                               ptrdiff_t w, ptrdiff_t hp, ptrdiff_t wp, ptrdiff_t pt, ptrdiff_t pl, ptrdiff_t i0,
                               ptrdiff_t i1) {
    (void)x_len;
    (void)xp_len;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const float* s = x + item * h * w;
        float* d = xp + item * hp * wp;
        RLX_CHECK_RANGE(item * h * w, (item + 1) * h * w, x_len, "nchwc stem pad source");
        RLX_CHECK_RANGE(item * hp * wp, (item + 1) * hp * wp, xp_len, "nchwc stem pad copy");
        memset(d, 0, sizeof(float) * (size_t)(pt * wp));
        for (ptrdiff_t r = 0; r < h; ++r) {
            float* dr = d + (pt + r) * wp;
            memset(dr, 0, sizeof(float) * (size_t)pl);
            memcpy(dr + pl, s + r * w, sizeof(float) * (size_t)w);
            memset(dr + pl + w, 0, sizeof(float) * (size_t)(wp - pl - w));
        }
        memset(d + (pt + h) * wp, 0, sizeof(float) * (size_t)((hp - pt - h) * wp));
    }
}

static void rlx_nchwc_stem_rows(const float* x, ptrdiff_t x_len, const float* wq, ptrdiff_t wq_len,
                                const float* bias, float* y, ptrdiff_t y_len, const ptrdiff_t* koff,
                                const rlx_nchwc_stem_geom* g, const rlx_nchwc_act* a, ptrdiff_t r0, ptrdiff_t r1) {
    const int level = rlx_simd_level();
    const ptrdiff_t K = g->c * g->kh * g->kw, M = g->m, wo = g->w_out;
    const ptrdiff_t plane = g->h_out * wo, p8 = plane * 8;
    const ptrdiff_t panels = (M + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC;
    /* 8 output channels (one half panel), or 16 on the AVX-512 level (one
     * panel, 6 chains in a 6-pixel tile): tiles of up to 12 pixels (3 -> 8
     * 3x3 s2, 1 thread: to 8 x 32x32 0.055 -> 0.049 ms, to 112x112 0.083 ->
     * 0.073) */
    const ptrdiff_t most = M <= 8 || (M == RLX_NCHWC_OC && rlx_nchwc_pairs(level)) ? RLX_NCHWC_NPH : RLX_NCHWC_NP;
    const ptrdiff_t ntiles = (wo + most - 1) / most;
    const ptrdiff_t tbase = wo / ntiles, textra = wo % ntiles;
    const ptrdiff_t span_w = (g->kw - 1) * g->dw, span_h = (g->kh - 1) * g->dh;
    float xt[RLX_NCHWC_STEM_MAX_K * RLX_NCHWC_NPH];
    ptrdiff_t kpack[RLX_NCHWC_STEM_MAX_K];
    (void)level;
    (void)wq_len;
    (void)x_len;
    (void)y_len;
    if (K > RLX_NCHWC_STEM_MAX_K) {
        fprintf(stderr, "rlx_cpu: rlx_nchwc_stem_rows: %td taps > %d\n", (ptrdiff_t)K, RLX_NCHWC_STEM_MAX_K);
        abort();
    }
    RLX_CHECK_RANGE(0, rlx_nchwc_1x1_packed_floats(M, K), wq_len, "nchwc stem packed weight");
    for (ptrdiff_t k = 0; k < K; ++k) kpack[k] = k * most;
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const ptrdiff_t n = r / g->h_out, oh = r % g->h_out;
        const float* ximg = x + n * g->c * g->h * g->w;
        const ptrdiff_t ih0 = oh * g->sh - g->ph;
        const int rows_in = ih0 >= 0 && ih0 + span_h < g->h;
        RLX_CHECK_RANGE(n * g->c * g->h * g->w, (n + 1) * g->c * g->h * g->w, x_len, "nchwc stem x");
        RLX_CHECK_RANGE((n * M / 8) * p8, (n + 1) * M / 8 * p8, y_len, "nchwc stem y");
        for (ptrdiff_t t = 0, ow = 0; t < ntiles; ow += tbase + (t < textra), ++t) {
            const int np = (int)(tbase + (t < textra));
            const ptrdiff_t iw0 = ow * g->sw - g->pw;
            const int inside = rows_in && iw0 >= 0 && iw0 + (np - 1) * g->sw + span_w < g->w;
            const float* base;
            const ptrdiff_t* offs;
            ptrdiff_t ps;
            if (inside) {
                base = ximg + ih0 * g->w + iw0;
                offs = koff;
                ps = g->sw;
            } else {
                /* gather this tile's inputs, zero on the padding */
                ptrdiff_t k = 0;
                for (ptrdiff_t c = 0; c < g->c; ++c)
                    for (ptrdiff_t i = 0; i < g->kh; ++i)
                        for (ptrdiff_t j = 0; j < g->kw; ++j, ++k) {
                            const ptrdiff_t ih = ih0 + i * g->dh;
                            for (int q = 0; q < np; ++q) {
                                const ptrdiff_t iw = iw0 + q * g->sw + j * g->dw;
                                xt[k * most + q] = ih >= 0 && ih < g->h && iw >= 0 && iw < g->w
                                                               ? ximg[(c * g->h + ih) * g->w + iw] : 0.0f;
                            }
                        }
                base = xt;
                offs = kpack;
                ps = 1;
            }
            for (ptrdiff_t q = 0; q < panels; ++q) {
                const int nv = M - q * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 2 : 1;
                const float* wqb = wq + q * K * RLX_NCHWC_OC;
                const float* bq = bias ? bias + q * RLX_NCHWC_OC : NULL;
                float* yt = y + (n * M / 8 + 2 * q) * p8 + (oh * wo + ow) * 8;
#if RLX_X86_DISPATCH
                if (rlx_nchwc_pairs(level) && nv == 2) {
                    /* four panels where there are (a 64-channel stem: 1.15-1.45x
                     * the pairs' GFLOP/s, at 1 and 2 threads, interleaved) */
                    const int nq = q + 3 < panels && M - (q + 3) * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 4
                                   : q + 1 < panels && M - (q + 1) * RLX_NCHWC_OC >= RLX_NCHWC_OC ? 2 : 1;
                    rlx_nchwc_stem_tiles2[nq >> 1][np](wqb, K * RLX_NCHWC_OC, base, offs, ps, K, yt, p8, bq, a);
                    q += nq - 1;
                    continue;
                }
                if (level) {
                    rlx_nchwc_stem_tiles[nv - 1][np](wqb, base, offs, ps, K, yt, p8, bq, a);
                    continue;
                }
#endif
                rlx_nchwc_stem_tile_base(np, nv, wqb, base, offs, ps, K, yt, p8, bq, a);
            }
        }
    }
}

/* ---- the stem with NCHW output ----------------------------------------------
 * A stem whose output only NCHW ops read (a lone first conv) writes
 * y[n, M, Ho, Wo] itself instead of the blocked layout and a reorder.  It
 * reads a copy of the zero-padded input split into sw column phases,
 * xq[n, C, Hp, sw, Wq] with Wq = ceil(Wp / sw): padded column
 * ow*sw + j*dw is phase (j*dw) % sw at position ow + (j*dw) / sw, so tap
 * (c, i, j) of consecutive output pixels reads consecutive floats.  The tile
 * is 8 output channels x up to 3 vectors of 16 consecutive pixels of one
 * output row (24 accumulators); per tap it loads one vector per pixel vector
 * and broadcasts one weight per channel, from the stem's packed weight
 * (channel m at wq[((m/16)*K + k)*16 + m%16]).  Each output is bias, then
 * the taps in (c, i, j) order over the padded input, then the activation:
 * the chain of the blocked stem, so the bits are those of the blocked stem
 * followed by the reorder. */
#define RLX_STEM_NCHW_VEC 16
#define RLX_STEM_NCHW_CH 8
/* a work item is an output row, or a chunk of this many pixels of a row
 * longer than RLX_STEM_NCHW_ROW (a 1x1 conv runs its plane as one row) */
#define RLX_STEM_NCHW_ROW 384
#define RLX_STEM_NCHW_CHUNK 192

/* Wq of the copy (g: the padded geometry, g->w the padded width) */
static inline ptrdiff_t rlx_stem_nchw_wq(const rlx_nchwc_stem_geom* g) { return (g->w + g->sw - 1) / g->sw; }

/* koff[k] for k = (c, i, j) in the phase-split copy (g: the padded geometry,
 * h and w the padded extents) */
static void rlx_stem_nchw_offsets(const rlx_nchwc_stem_geom* g, ptrdiff_t* koff) {
    const ptrdiff_t wq = rlx_stem_nchw_wq(g), sw = g->sw;
    ptrdiff_t k = 0;
    for (ptrdiff_t c = 0; c < g->c; ++c)
        for (ptrdiff_t i = 0; i < g->kh; ++i)
            for (ptrdiff_t j = 0; j < g->kw; ++j)
                koff[k++] = ((c * g->h + i * g->dh) * sw + (j * g->dw) % sw) * wq + (j * g->dw) / sw;
}

/* One input row sr (w floats) into its two column phases at sw = 2: slot q
 * of d0 / d1 holds input column 2q - pl / 2q + 1 - pl, zero outside [0, w).
 * The middle of the row splits 16 floats at a time into their even and odd
 * lanes; the ends go one slot at a time.  (The slot loop took a quarter of a
 * 3->32 3x3 s2 stem on 224x224, NCHW out.) */
RLX_INLINE void rlx_stem_nchw_slots_s2(const float* sr, float* d0, float* d1, ptrdiff_t w, ptrdiff_t pl,
                                       ptrdiff_t q0, ptrdiff_t q1) {
    for (ptrdiff_t q = q0; q < q1; ++q) {
        const ptrdiff_t ic = 2 * q - pl;
        d0[q] = ic >= 0 && ic < w ? sr[ic] : 0.0f;
        d1[q] = ic + 1 >= 0 && ic + 1 < w ? sr[ic + 1] : 0.0f;
    }
}
#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_stem_nchw_row_s2_avx2(const float* sr, float* d0, float* d1, ptrdiff_t w,
                                                      ptrdiff_t wq, ptrdiff_t pl) {
    ptrdiff_t q = 0;
    while (q < wq && 2 * q - pl < 0) ++q;
    rlx_stem_nchw_slots_s2(sr, d0, d1, w, pl, 0, q);
    for (; q + 8 <= wq && 2 * q - pl + 16 <= w; q += 8) {
        __m256 e, o;
        rlx_deint8(sr + 2 * q - pl, &e, &o);
        _mm256_storeu_ps(d0 + q, e);
        _mm256_storeu_ps(d1 + q, o);
    }
    rlx_stem_nchw_slots_s2(sr, d0, d1, w, pl, q, wq);
}
#endif

/* items [i0, i1) = (plane, band): band b of `bands` of the padded rows of
 * plane (image * C + channel) of x [.., h, w] into the phase-split padded
 * copy xq [.., hp, sw, wq] (input at row pt, column pl; zeros elsewhere).
 * Bands let a batch-1 stem's three planes split over the threads. */
static void rlx_stem_nchw_copy(const float* x, ptrdiff_t x_len, float* xq, ptrdiff_t xq_len, ptrdiff_t h,
                               ptrdiff_t w, ptrdiff_t hp, ptrdiff_t sw, ptrdiff_t wq, ptrdiff_t pt, ptrdiff_t pl,
                               ptrdiff_t bands, ptrdiff_t i0, ptrdiff_t i1) {
    (void)x_len;
    (void)xq_len;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t plane = item / bands, band = item % bands;
        const float* s = x + plane * h * w;
        float* d = xq + plane * hp * sw * wq;
        RLX_CHECK_RANGE(plane * h * w, (plane + 1) * h * w, x_len, "stem nchw copy source");
        RLX_CHECK_RANGE(plane * hp * sw * wq, (plane + 1) * hp * sw * wq, xq_len, "stem nchw copy");
        for (ptrdiff_t r = hp * band / bands; r < hp * (band + 1) / bands; ++r) {
            const ptrdiff_t ir = r - pt;
            for (ptrdiff_t ph = 0; ph < sw; ++ph) {
                float* dr = d + (r * sw + ph) * wq;
                if (ir < 0 || ir >= h) {
                    memset(dr, 0, sizeof(float) * (size_t)wq);
                    continue;
                }
                const float* sr = s + ir * w;
#if RLX_X86_DISPATCH
                if (sw == 2 && ph == 0 && rlx_simd_level()) {
                    rlx_stem_nchw_row_s2_avx2(sr, dr, dr + wq, w, wq, pl);
                    ++ph;                   /* both phases written */
                    continue;
                }
#endif
                if (sw == 1 && pl + w <= wq) {
                    memset(dr, 0, sizeof(float) * (size_t)pl);
                    memcpy(dr + pl, sr, sizeof(float) * (size_t)w);
                    memset(dr + pl + w, 0, sizeof(float) * (size_t)(wq - pl - w));
                    continue;
                }
                for (ptrdiff_t q = 0; q < wq; ++q) {
                    const ptrdiff_t ic = q * sw + ph - pl;
                    dr[q] = ic >= 0 && ic < w ? sr[ic] : 0.0f;
                }
            }
        }
    }
}

/* np pixels (1..48) x 8 channels from xrow (the row's corner in the copy),
 * w the channels' packed weight (stride 16 per tap), y channel 0's first
 * output (channel c at y + c*plane), portable */
static void rlx_stem_nchw_tile_base(int np, const float* w, const float* xrow, const ptrdiff_t* koff, ptrdiff_t K,
                                    float* y, ptrdiff_t plane, const float* bias, const rlx_nchwc_act* a) {
    for (int c = 0; c < RLX_STEM_NCHW_CH; ++c)
        for (int p = 0; p < np; ++p) {
            float acc = bias ? bias[c] : 0.0f;
            for (ptrdiff_t k = 0; k < K; ++k) acc = fmaf(xrow[koff[k] + p], w[k * RLX_NCHWC_OC + c], acc);
            y[c * plane + p] = rlx_nchwc_act1(acc, a);
        }
}

#if RLX_X86_DISPATCH
RLX_INLINE_AVX512 __m512 rlx_act16(__m512 v, const rlx_nchwc_act* a) {
    const __m256 lo = rlx_nchwc_act8(_mm512_castps512_ps256(v), a);
    const __m256 hi = rlx_nchwc_act8(_mm512_extractf32x8_ps(v, 1), a);
    return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
}
#define RLX_SN_CH(X, V) X(0, V) X(1, V) X(2, V) X(3, V) X(4, V) X(5, V) X(6, V) X(7, V)
#define RLX_SN_DECL(c, V) __m512 a##V##c = bias ? _mm512_set1_ps(bias[c]) : _mm512_setzero_ps();
#define RLX_SN_FMA(c, V) a##V##c = _mm512_fmadd_ps(x##V, _mm512_set1_ps(wk[c]), a##V##c);
#define RLX_SN_STORE(c, V) _mm512_mask_storeu_ps(y + (c) * plane + (V) * 16, m##V, rlx_act16(a##V##c, a));
/* nv (1..3) vectors of pixels, the last one's lanes masked by `tail` */
RLX_INLINE_AVX512 void rlx_stem_nchw_tile_body(const int nv, const float* restrict w, const float* restrict xrow,
                                               const ptrdiff_t* restrict koff, ptrdiff_t K, float* restrict y,
                                               ptrdiff_t plane, const float* restrict bias, __mmask16 tail,
                                               const rlx_nchwc_act* a) {
    const __mmask16 m0 = nv > 1 ? (__mmask16)0xFFFF : tail, m1 = nv > 2 ? (__mmask16)0xFFFF : tail, m2 = tail;
    RLX_SN_CH(RLX_SN_DECL, 0)
    RLX_SN_CH(RLX_SN_DECL, 1)
    RLX_SN_CH(RLX_SN_DECL, 2)
    for (ptrdiff_t k = 0; k < K; ++k) {
        const float* xk = xrow + koff[k];
        const float* wk = w + k * RLX_NCHWC_OC;
        const __m512 x0 = _mm512_maskz_loadu_ps(m0, xk);
        RLX_SN_CH(RLX_SN_FMA, 0)
        if (nv > 1) {
            const __m512 x1 = _mm512_maskz_loadu_ps(m1, xk + 16);
            RLX_SN_CH(RLX_SN_FMA, 1)
        }
        if (nv > 2) {
            const __m512 x2 = _mm512_maskz_loadu_ps(m2, xk + 32);
            RLX_SN_CH(RLX_SN_FMA, 2)
        }
    }
    RLX_SN_CH(RLX_SN_STORE, 0)
    if (nv > 1) { RLX_SN_CH(RLX_SN_STORE, 1) }
    if (nv > 2) { RLX_SN_CH(RLX_SN_STORE, 2) }
}
#undef RLX_SN_CH
#undef RLX_SN_DECL
#undef RLX_SN_FMA
#undef RLX_SN_STORE
typedef void (*rlx_stem_nchw_tile_fn)(const float*, const float*, const ptrdiff_t*, ptrdiff_t, float*, ptrdiff_t,
                                      const float*, __mmask16, const rlx_nchwc_act*);
#define RLX_SN_TILE(NV_)                                                                                \
    RLX_TARGET_AVX512 static void rlx_stem_nchw_tile_##NV_(const float* w, const float* xrow,           \
                                                           const ptrdiff_t* koff, ptrdiff_t K, float* y, \
                                                           ptrdiff_t plane, const float* bias,          \
                                                           __mmask16 tail, const rlx_nchwc_act* a) {    \
        rlx_stem_nchw_tile_body(NV_, w, xrow, koff, K, y, plane, bias, tail, a);                        \
    }
RLX_SN_TILE(1) RLX_SN_TILE(2) RLX_SN_TILE(3)
#undef RLX_SN_TILE
static const rlx_stem_nchw_tile_fn rlx_stem_nchw_tiles[4] = {NULL, rlx_stem_nchw_tile_1, rlx_stem_nchw_tile_2,
                                                             rlx_stem_nchw_tile_3};
#endif

/* Work items [i0, i1) of every channel, item = (n * h_out + oh) * cpr +
 * the chunk of `chunk` pixels of that output row (cpr chunks per row): g is
 * the padded geometry (h, w the padded extents, no padding left), xq the
 * phase-split copy (or x itself at column stride 1 without padding), koff
 * from rlx_stem_nchw_offsets. */
static void rlx_stem_nchw_rows(const float* xq, ptrdiff_t xq_len, const float* wq, ptrdiff_t wq_len,
                               const float* bias, float* y, ptrdiff_t y_len, const ptrdiff_t* koff,
                               const rlx_nchwc_stem_geom* g, const rlx_nchwc_act* a, ptrdiff_t chunk, ptrdiff_t i0,
                               ptrdiff_t i1) {
    const int level = rlx_simd_level();
    const ptrdiff_t K = g->c * g->kh * g->kw, M = g->m, wo = g->w_out, plane = g->h_out * wo;
    const ptrdiff_t wqn = rlx_stem_nchw_wq(g), img = g->c * g->h * g->sw * wqn;
    const ptrdiff_t span = 3 * RLX_STEM_NCHW_VEC;
    (void)level;
    (void)xq_len;
    (void)wq_len;
    (void)y_len;
    RLX_CHECK_RANGE(0, rlx_nchwc_1x1_packed_floats(M, K), wq_len, "stem nchw packed weight");
    const ptrdiff_t cpr = (wo + chunk - 1) / chunk;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t r = item / cpr, c0 = item % cpr * chunk, c1 = c0 + chunk < wo ? c0 + chunk : wo;
        const ptrdiff_t n = r / g->h_out, oh = r % g->h_out;
        const float* xrow = xq + n * img + oh * g->sh * g->sw * wqn;
        RLX_CHECK_RANGE(n * img, (n + 1) * img, xq_len, "stem nchw x");
        RLX_CHECK_RANGE(n * M * plane, (n + 1) * M * plane, y_len, "stem nchw y");
        for (ptrdiff_t ow = c0; ow < c1; ow += span) {
            const int np = (int)(c1 - ow < span ? c1 - ow : span);
            for (ptrdiff_t c8 = 0; c8 < M / RLX_STEM_NCHW_CH; ++c8) {
                const float* wc = wq + (c8 / 2) * K * RLX_NCHWC_OC + (c8 % 2) * RLX_STEM_NCHW_CH;
                const float* bc = bias ? bias + c8 * RLX_STEM_NCHW_CH : NULL;
                float* yc = y + (n * M + c8 * RLX_STEM_NCHW_CH) * plane + oh * wo + ow;
#if RLX_X86_DISPATCH
                if (level >= 2) {
                    const int nv = (np + RLX_STEM_NCHW_VEC - 1) / RLX_STEM_NCHW_VEC;
                    const int last = np - (nv - 1) * RLX_STEM_NCHW_VEC;
                    const __mmask16 tail = (__mmask16)(last == 16 ? 0xFFFF : (1u << last) - 1u);
                    rlx_stem_nchw_tiles[nv](wc, xrow + ow, koff, K, yc, plane, bc, tail, a);
                    continue;
                }
#endif
                rlx_stem_nchw_tile_base(np, wc, xrow + ow, koff, K, yc, plane, bc, a);
            }
        }
    }
}

/* ---- depthwise 3x3 or 5x5 conv, stride 1 or 2 ----------------------------
 * Weight packed as wt[cb][K*K][8] (tap-major within a block, K = g->k, the
 * kernel side); bias: C floats
 * or NULL.  Work items: output rows of one block, r = (n * C/8 + cb) *
 * h_out + oh, so a thread's run of items is runs of rows of whole blocks,
 * each run one call with the block's weights loaded once.  (Ordering the
 * items row-major over all blocks of an image at several threads, so the
 * rows matched those of the 1x1 convs around it, measured 1.00-1.19x slower
 * at 2 threads once the rows of a block ran in one call: whole plans of
 * 1x1 + depthwise + 1x1 at 4x4 to 112x112, batch 1 and 8.) */
typedef struct {
    ptrdiff_t cb, h, w, h_out, w_out, s, ph, pw;   /* blocks per image, geometry */
    ptrdiff_t k;                                   /* kernel side: 3 or 5 */
    /* 1: work items are output rows of block pairs (rlx_nchwc_dw16_on, set
     * by the launch), r = (n * ceil(C/16) + block pair) * h_out + oh */
    ptrdiff_t pairs16;
} rlx_nchwc_dw_geom;

#define RLX_NCHWC_DW_MAX_K 5

/* [C, 1, K, K] -> [C/8, K*K, 8]; taps = K*K */
static void rlx_nchwc_dw_pack(const float* w, ptrdiff_t c, ptrdiff_t taps, float* wt) {
    for (ptrdiff_t ch = 0; ch < c; ++ch)
        for (ptrdiff_t t = 0; t < taps; ++t) wt[((ch / 8) * taps + t) * 8 + ch % 8] = w[ch * taps + t];
}

/* One output row of one block from its K input rows (rows[kh], the
 * input row oh*s - ph + kh of the block, valid[kh] when inside the plane;
 * W the input row's pixels), portable: each output vector is bias, then the
 * in-bounds taps in (kh, kw) order, then residual and activation. */
static void rlx_nchwc_dw_row_ptrs_base(const float* const* rows, const int* valid, const float* wt,
                                       const float* b, const float* res, float* yr, ptrdiff_t s, ptrdiff_t pw,
                                       ptrdiff_t W, ptrdiff_t wo, const rlx_nchwc_act* a, int K) {
    for (ptrdiff_t ow = 0; ow < wo; ++ow)
        for (int j = 0; j < 8; ++j) {
            float acc = b ? b[j] : 0.0f;
            for (int kh = 0; kh < K; ++kh) {
                if (!valid[kh]) continue;
                for (int kw = 0; kw < K; ++kw) {
                    const ptrdiff_t iw = ow * s - pw + kw;
                    if (iw < 0 || iw >= W) continue;
                    acc = fmaf(rows[kh][iw * 8 + j], wt[(kh * K + kw) * 8 + j], acc);
                }
            }
            if (res) acc = acc + res[ow * 8 + j];
            yr[ow * 8 + j] = rlx_nchwc_act1(acc, a);
        }
}

/* The input rows of output row oh of a block whose plane starts at xp. */
static inline void rlx_nchwc_dw_rows_of(const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh,
                                        const float** rows, int* valid, const int K) {
    for (int kh = 0; kh < K; ++kh) {
        const ptrdiff_t ih = oh * g->s - g->ph + kh;
        valid[kh] = ih >= 0 && ih < g->h;
        rows[kh] = valid[kh] ? xp + ih * g->w * 8 : xp;
    }
}

#if RLX_X86_DISPATCH
/* Output pixel ow of a 3x3 row whose taps may fall on the padding: the
 * in-bounds taps in (kh, kw) order (the 3x3 kernel's edges, one pixel at a
 * time; the 5x5 kernel's run in groups, rlx_nchwc_dw_group). */
RLX_INLINE_AVX2 void rlx_nchwc_dw_px(const float* const* rows, const int* valid, const __m256* wv, __m256 bv,
                                     const float* res, float* yr, ptrdiff_t ow, ptrdiff_t s, ptrdiff_t pw,
                                     ptrdiff_t W, const rlx_nchwc_act* a) {
    __m256 acc = bv;
    for (int kh = 0; kh < 3; ++kh) {
        if (!valid[kh]) continue;
        for (int kw = 0; kw < 3; ++kw) {
            const ptrdiff_t iw = ow * s - pw + kw;
            if (iw < 0 || iw >= W) continue;
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(rows[kh] + iw * 8), wv[kh * 3 + kw], acc);
        }
    }
    if (res) acc = _mm256_add_ps(acc, _mm256_loadu_ps(res + ow * 8));
    _mm256_storeu_ps(yr + ow * 8, rlx_nchwc_act8(acc, a));
}

/* Output pixels ow .. ow + n - 1 (n 1..4) of a row whose taps may fall on
 * the padding: each pixel is bias, then its in-bounds taps in (kh, kw)
 * order, then residual and activation, the n pixels' chains interleaved
 * (one pixel at a time, a 5x5 edge pixel waited on 25 dependent FMAs). */
RLX_TARGET_AVX2 __attribute__((noinline)) static void rlx_nchwc_dw_group(
        const float* const* rows, const int* valid, const __m256* wv, __m256 bv, const float* res, float* yr,
        ptrdiff_t ow, int n, ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, const rlx_nchwc_act* a, const int K) {
    __m256 a0 = bv, a1 = bv, a2 = bv, a3 = bv;
    /* each pixel's in-bounds kw range */
    int lo[4], hi[4];
    for (int p = 0; p < 4; ++p) {
        const ptrdiff_t b = (ow + p) * s - pw;
        lo[p] = p < n ? (int)(b < 0 ? -b : 0) : K;
        hi[p] = p < n ? (int)(W - b < K ? W - b : K) : 0;
    }
    for (int kh = 0; kh < K; ++kh) {
        if (!valid[kh]) continue;
        const float* r = rows[kh];
        for (int kw = 0; kw < K; ++kw) {
            const __m256 w = wv[kh * K + kw];
            if (kw >= lo[0] && kw < hi[0])
                a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r + ((ow + 0) * s - pw + kw) * 8), w, a0);
            if (kw >= lo[1] && kw < hi[1])
                a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r + ((ow + 1) * s - pw + kw) * 8), w, a1);
            if (kw >= lo[2] && kw < hi[2])
                a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r + ((ow + 2) * s - pw + kw) * 8), w, a2);
            if (kw >= lo[3] && kw < hi[3])
                a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r + ((ow + 3) * s - pw + kw) * 8), w, a3);
        }
    }
    const __m256 acc[4] = {a0, a1, a2, a3};
    for (int p = 0; p < n; ++p) {
        __m256 v = acc[p];
        if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + (ow + p) * 8));
        _mm256_storeu_ps(yr + (ow + p) * 8, rlx_nchwc_act8(v, a));
    }
}

/* Output pixels ow .. ow + 3 of a row, all taps inside it: the K x K
 * weight vectors wv and the bias vector bv, 4 chains. */
RLX_INLINE_AVX2 void rlx_nchwc_dw_step4(const float* const* rows, const int* valid, const __m256* wv, __m256 bv,
                                        const float* res, float* yr, ptrdiff_t ow, ptrdiff_t s, ptrdiff_t pw,
                                        const rlx_nchwc_act* a, const int K) {
    __m256 a0 = bv, a1 = bv, a2 = bv, a3 = bv;
    for (int kh = 0; kh < K; ++kh) {
        if (!valid[kh]) continue;
        const float* r0 = rows[kh] + (ow * s - pw) * 8;
        for (int kw = 0; kw < K; ++kw) {
            const __m256 w = wv[kh * K + kw];
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + (0 * s + kw) * 8), w, a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + (1 * s + kw) * 8), w, a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + (2 * s + kw) * 8), w, a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + (3 * s + kw) * 8), w, a3);
        }
    }
    if (res) {
        a0 = _mm256_add_ps(a0, _mm256_loadu_ps(res + (ow + 0) * 8));
        a1 = _mm256_add_ps(a1, _mm256_loadu_ps(res + (ow + 1) * 8));
        a2 = _mm256_add_ps(a2, _mm256_loadu_ps(res + (ow + 2) * 8));
        a3 = _mm256_add_ps(a3, _mm256_loadu_ps(res + (ow + 3) * 8));
    }
    _mm256_storeu_ps(yr + (ow + 0) * 8, rlx_nchwc_act8(a0, a));
    _mm256_storeu_ps(yr + (ow + 1) * 8, rlx_nchwc_act8(a1, a));
    _mm256_storeu_ps(yr + (ow + 2) * 8, rlx_nchwc_act8(a2, a));
    _mm256_storeu_ps(yr + (ow + 3) * 8, rlx_nchwc_act8(a3, a));
}

/* The interior columns of a row: ow with ow*s - pw >= 0 and
 * ow*s - pw + K - 1 <= W - 1 are [*lo, *hi). */
static inline void rlx_nchwc_dw_interior(ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, ptrdiff_t wo, ptrdiff_t K,
                                         ptrdiff_t* lo, ptrdiff_t* hi) {
    ptrdiff_t l = (pw + s - 1) / s;
    ptrdiff_t h = (W - K + pw) >= 0 ? (W - K + pw) / s + 1 : 0;
    if (h > wo) h = wo;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* The same row of the 5x5 kernel, 8 then 4 output pixels per step with
 * the 25 weight vectors wv (read from the stack) and the bias vector
 * bv; columns whose taps all fall inside the
 * row (the interior [lo, hi)) run without tests.  `a` has its act set to a
 * constant by the callers' instances, so the activation's switch folds
 * away instead of running once per output vector. */
RLX_INLINE_AVX2 void rlx_nchwc_dw_row_core(const float* const* rows, const int* valid, const __m256* wv,
                                           __m256 bv, const float* res, float* yr, ptrdiff_t s, ptrdiff_t pw,
                                           ptrdiff_t W, ptrdiff_t wo, ptrdiff_t lo, ptrdiff_t hi,
                                           const rlx_nchwc_act* a, const int K) {
    ptrdiff_t ow = 0;
    while (ow < lo) {
        const int n = lo - ow < 4 ? (int)(lo - ow) : 4;
        rlx_nchwc_dw_group(rows, valid, wv, bv, res, yr, ow, n, s, pw, W, a, K);
        ow += n;
    }
    /* 8 output pixels per step: 8 independent chains keep both FMA pipes
     * busy (4 chains wait on the FMA latency) */
    for (; ow + 8 <= hi; ow += 8) {
        __m256 c[8];
        for (int p = 0; p < 8; ++p) c[p] = bv;
        for (int kh = 0; kh < K; ++kh) {
            if (!valid[kh]) continue;
            const float* r0 = rows[kh] + (ow * s - pw) * 8;
            for (int kw = 0; kw < K; ++kw) {
                const __m256 w = wv[kh * K + kw];
                for (int p = 0; p < 8; ++p) c[p] = _mm256_fmadd_ps(_mm256_loadu_ps(r0 + (p * s + kw) * 8), w, c[p]);
            }
        }
        for (int p = 0; p < 8; ++p) {
            if (res) c[p] = _mm256_add_ps(c[p], _mm256_loadu_ps(res + (ow + p) * 8));
            _mm256_storeu_ps(yr + (ow + p) * 8, rlx_nchwc_act8(c[p], a));
        }
    }
    for (; ow + 4 <= hi; ow += 4) rlx_nchwc_dw_step4(rows, valid, wv, bv, res, yr, ow, s, pw, a, K);
    while (ow < wo) {
        const int n = wo - ow < 4 ? (int)(wo - ow) : 4;
        rlx_nchwc_dw_group(rows, valid, wv, bv, res, yr, ow, n, s, pw, W, a, K);
        ow += n;
    }
}

/* Output pixels 0 .. 7 of a row at stride S from K input rows that hold
 * every tap (rows[kh] + off: the row's copy with its zero padding, at the
 * step's first column), K and S constants in each instance, so every load
 * is at a constant offset: 8 chains, each bias, then its taps in (kh, kw)
 * order, as in the steps above.  Per tap row, the K weight vectors sit in
 * registers and each input vector is loaded once and applied to every
 * (pixel, kw) that reads it (8 chains + K weights + 1 input: 14 of the 16
 * registers at K = 5): 17 loads per 40 FMAs, not 45, since two 256-bit
 * loads per cycle match the two FMA pipes (1.0-1.17x against a load per
 * FMA; 7x7 and stride 2 gained most).  Only pixels 0 .. n - 1 are stored
 * (and their residual read): a row's last 1-7 pixels run a whole step.
 * The tap-row loop stays rolled: fully unrolled, GCC spilled chains to the
 * stack, and the kernel took 1.1-1.6x as long as the edge code it
 * replaces. */
RLX_INLINE_AVX2 void rlx_nchwc_dw_step8r(const float* const* rows, ptrdiff_t off, const __m256* wv, __m256 bv,
                                         const float* res, float* yr, const int n, const rlx_nchwc_act* a,
                                         const int K, const int S) {
    __m256 c[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) c[p] = bv;
#pragma GCC unroll 1
    for (int kh = 0; kh < K; ++kh) {
        const float* r = rows[kh] + off;
        __m256 w[RLX_NCHWC_DW_MAX_K];
#pragma GCC unroll 5
        for (int kw = 0; kw < K; ++kw) w[kw] = wv[kh * K + kw];
#pragma GCC unroll 20
        for (int col = 0; col < 7 * S + K; ++col) {
            const __m256 x = _mm256_loadu_ps(r + col * 8);
#pragma GCC unroll 5
            for (int kw = 0; kw < K; ++kw) {
                const int d = col - kw;
                if (d >= 0 && d % S == 0 && d / S < 8) c[d / S] = _mm256_fmadd_ps(x, w[kw], c[d / S]);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
        if (p >= n) break;
        if (res) c[p] = _mm256_add_ps(c[p], _mm256_loadu_ps(res + p * 8));
        _mm256_storeu_ps(yr + p * 8, rlx_nchwc_act8(c[p], a));
    }
}

/* Rows oh0 .. oh1 - 1 of one block (kernel side K, stride S, constants in
 * each instance), from a copy in buf of their input rows with the zero
 * padding (in chunks of output rows whose input rows fit
 * RLX_NCHWC_DW_PAD_FLOATS): every pixel then runs in the 8-pixel step,
 * none in the edge code, whose per-tap tests dominate small planes (a 5x5
 * window on 7x7: every pixel).  A row's last 1-7 pixels run one more step
 * that stores only them (the copy is zero up to column (w8 - 1) * S + K - 1
 * for that).  Each output is the same chain as without the copy: a padding tap
 * adds 0 * w, which leaves the sum unchanged (finite weights).  Only for
 * geometries where rlx_nchwc_dw_pad_fits. */
#define RLX_NCHWC_DW_PAD_FLOATS 8192

/* Columns of a row of the padded copy: -pw .. (w8-1)*s - pw + k - 1 of the
 * input, w8 the output row rounded up to whole 8-pixel steps. */
static inline ptrdiff_t rlx_nchwc_dw_pad_cols(const rlx_nchwc_dw_geom* g) {
    return (((g->w_out + 7) & ~(ptrdiff_t)7) - 1) * g->s + g->k;
}

/* Whether the k input rows of one output row fit the padded copy's buffer
 * (rows of 230 pixels do not: those run the edge code). */
static inline int rlx_nchwc_dw_pad_fits(const rlx_nchwc_dw_geom* g) {
    return RLX_NCHWC_DW_PAD_FLOATS / (rlx_nchwc_dw_pad_cols(g) * 8) >= g->k;
}

/* Whether the AVX-512 pair steps (rlx_nchwc_dw_pairs_avx512) take a block
 * of a 5x5 stride-1 conv: rows of 14 output pixels and more whose input
 * rows fit the copies.  Against the AVX2 padded steps, in one process,
 * 1 thread, medians of 25 interleaved samples (ReLU / SiLU):
 * 128@56 1.16 / 1.18, 240@28 1.15 / 1.18, 120@28 1.12 / 1.18,
 * 480@14 1.05 / 1.11, 672@14 1.02 / 1.10; on 7x7 planes (a step of 4 pairs,
 * 4 chains) 0.76-0.99, so those stay on AVX2.  The 3x3 kernels through the
 * pair steps took 1.1-1.6x as long as their edge code (96@112 to 960@7). */
#define RLX_DW_PAIRS_MIN_W 14
static inline int rlx_nchwc_dw_pairs_on(const rlx_nchwc_dw_geom* g) {
    return g->k == 5 && g->s == 1 && g->w_out >= RLX_DW_PAIRS_MIN_W && rlx_nchwc_dw_pad_fits(g);
}

/* Whether the AVX-512 stride-2 pair steps (rlx_nchwc_dw_pairs_s2_avx512)
 * take a block of a 5x5 stride-2 conv: rows of at least
 * RLX_DW_PAIRS_S2_MIN_W output pixels whose four ring copies fit their
 * buffer (5 rows of rlx_nchwc_dw_s2_slots pixels each).  Against the AVX2
 * padded steps, one conv, ReLU, pair ratios of 31 interleaved samples at 1
 * thread (2 threads): 240@28 -> 14 1.25-1.29 (1.25), 144@56 -> 28 1.37-1.38
 * (1.41), 72@56 -> 28 1.39-1.40 (1.47), 32@112 -> 56 1.14-1.15 (1.12); on
 * rows of 7 (576@14, 672@14, 96@14) 0.82-0.89, so those stay on AVX2 (one
 * row's 4 chains wait on the FMA latency; two rows at once, 8 chains sharing
 * their input rows' loads, still measured 0.94). */
#define RLX_DW_PAIRS_S2_MIN_W 14
#define RLX_NCHWC_DW_S2_FLOATS 16384
#define RLX_NCHWC_DW_S2_MAX_SLOTS (RLX_NCHWC_DW_S2_FLOATS / (4 * 5 * 8))
static inline ptrdiff_t rlx_nchwc_dw_s2_slots(const rlx_nchwc_dw_geom* g);
static inline int rlx_nchwc_dw_pairs_s2_on(const rlx_nchwc_dw_geom* g) {
    return g->k == 5 && g->s == 2 && g->w_out >= RLX_DW_PAIRS_S2_MIN_W &&
           rlx_nchwc_dw_s2_slots(g) <= RLX_NCHWC_DW_S2_MAX_SLOTS;
}

/* A depthwise row's heavy activation (rlx_act_heavy), after the row's
 * stores: its rows' instances store act NONE's values (bias, taps,
 * residual) and this runs `act` over the row's n floats, 16 lanes at a
 * time where AVX-512 is there.  Always inlined: GCC had left it out of
 * line in the heavy-act instances of the padded 5x5 rows, a call that takes
 * the address of the instance's act copy (whose act is meant to stay a
 * constant there).  5x5 on 960@7 with SiLU, 1 thread: 0.099 -> 0.080 ms
 * (ReLU 0.053 -> 0.046 in the same runs: not an A/B in one process). */
RLX_INLINE void rlx_nchwc_dw_row_post(float* y, ptrdiff_t n, const rlx_nchwc_act* a_in, int act) {
    rlx_nchwc_act t = *a_in;
    t.act = act;
    if (rlx_simd_level() > 1) rlx_act_blocks_avx512(y, 0, 1, n, &t);
    else rlx_act_blocks_avx2(y, 0, 1, n, &t);
}

/* n pixels (8 floats each) from s to d (d 32-byte aligned), and n zero
 * pixels at d: vector moves, kept as such (the empty asm hides the pattern
 * from GCC, which otherwise turns the loops into memcpy/memset calls, one
 * per row of 7 to 60 pixels: the AVX-512 pair steps' ring copies a row at a
 * time). */
RLX_INLINE_AVX2 void rlx_dw_copy_px(float* d, const float* s, ptrdiff_t n) {
    for (ptrdiff_t c = 0; c < n; ++c) {
        __m256 v = _mm256_loadu_ps(s + c * 8);
        __asm__("" : "+x"(v));
        _mm256_store_ps(d + c * 8, v);
    }
}

RLX_INLINE_AVX2 void rlx_dw_zero_px(float* d, ptrdiff_t n) {
    __m256 z = _mm256_setzero_ps();
    for (ptrdiff_t c = 0; c < n; ++c) {
        __asm__("" : "+x"(z));
        _mm256_store_ps(d + c * 8, z);
    }
}

RLX_INLINE_AVX2 void rlx_nchwc_dw_padded_body(float* buf, const float* xp, const rlx_nchwc_dw_geom* g,
                                             ptrdiff_t oh0, ptrdiff_t oh1, const __m256* wv, __m256 bv,
                                             const float* res, float* y, const rlx_nchwc_act* a, const int K,
                                             const int S, const int post_act) {
    const ptrdiff_t H = g->h, W = g->w, wo = g->w_out, ph = g->ph, pw = g->pw;
    const ptrdiff_t w8 = (wo + 7) & ~(ptrdiff_t)7, wf = wo & ~(ptrdiff_t)7;
    const __m256 zero = _mm256_setzero_ps();
    /* x's own columns at [pw, pw + ncopy) of a row of the copy */
    const ptrdiff_t wp = rlx_nchwc_dw_pad_cols(g), row = wp * 8;
    const ptrdiff_t ncopy = W < wp - pw ? W : wp - pw;
    const ptrdiff_t rows_fit = RLX_NCHWC_DW_PAD_FLOATS / row;
    const ptrdiff_t chunk = (rows_fit - K) / S + 1;
    for (ptrdiff_t o0 = oh0; o0 < oh1; o0 += chunk) {
        const ptrdiff_t o1 = o0 + chunk < oh1 ? o0 + chunk : oh1;
        const ptrdiff_t in0 = o0 * S - ph, in1 = (o1 - 1) * S - ph + K;
        /* vector moves, not memcpy/memset: a 7x7 plane's rows are 12 vectors
         * wide, and three library calls per row took longer than the copy */
        for (ptrdiff_t ih = in0; ih < in1; ++ih) {
            float* d = buf + (ih - in0) * row;
            ptrdiff_t c = 0;
            if (ih >= 0 && ih < H) {
                const float* sr = xp + ih * W * 8;
                for (; c < pw; ++c) _mm256_store_ps(d + c * 8, zero);
                for (; c < pw + ncopy; ++c) _mm256_store_ps(d + c * 8, _mm256_loadu_ps(sr + (c - pw) * 8));
            }
            for (; c < wp; ++c) _mm256_store_ps(d + c * 8, zero);
        }
        for (ptrdiff_t oh = o0; oh < o1; ++oh) {
            const float* rw[RLX_NCHWC_DW_MAX_K];
            for (int kh = 0; kh < K; ++kh) rw[kh] = buf + (oh * S - ph + kh - in0) * row;
            const ptrdiff_t o = (oh - oh0) * wo * 8;
            for (ptrdiff_t ow = 0; ow < wf; ow += 8)
                rlx_nchwc_dw_step8r(rw, ow * S * 8, wv, bv, res ? res + o + ow * 8 : NULL, y + o + ow * 8, 8, a, K,
                                    S);
            if (w8 > wo)
                rlx_nchwc_dw_step8r(rw, wf * S * 8, wv, bv, res ? res + o + wf * 8 : NULL, y + o + wf * 8,
                                    (int)(wo - wf), a, K, S);
            if (rlx_act_heavy(post_act)) rlx_nchwc_dw_row_post(y + o, wo * 8, a, post_act);
        }
    }
}

/* Output rows oh0 .. oh1 - 1 of one block whose input plane starts at xp
 * (rows == NULL), or the one row whose input rows are rows[0..K-1] (oh0 = 0,
 * oh1 = 1): the weights and bias loaded, the interior found and the act
 * fixed once for all of them.  With one call per row, a 4x4 plane's rows
 * took about 100 cycles each (8 x 96 channels, 4x4, 1 thread: 9.6 us). */
RLX_INLINE_AVX2 void rlx_nchwc_dw_rows_body(const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0,
                                            ptrdiff_t oh1, const float* const* rows, const int* valid,
                                            const float* wt, const float* b, const float* res, float* y,
                                            ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, ptrdiff_t wo,
                                            const rlx_nchwc_act* a_in, const int act, const int K,
                                            __m256* wv) {
    rlx_nchwc_act a_copy = *a_in;
    a_copy.act = rlx_act_heavy(act) ? RLX_ACT_NONE : act;
    for (int t = 0; t < K * K; ++t) wv[t] = _mm256_loadu_ps(wt + t * 8);
    const __m256 bv = b ? _mm256_loadu_ps(b) : _mm256_setzero_ps();
    ptrdiff_t lo, hi;
    rlx_nchwc_dw_interior(s, pw, W, wo, K, &lo, &hi);
    if (!xp) {
        rlx_nchwc_dw_row_core(rows, valid, wv, bv, res, y, s, pw, W, wo, lo, hi, &a_copy, K);
        if (rlx_act_heavy(act)) rlx_nchwc_dw_row_post(y, wo * 8, a_in, act);
        return;
    }
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        const float* rw[RLX_NCHWC_DW_MAX_K];
        int ok[RLX_NCHWC_DW_MAX_K];
        const ptrdiff_t o = (oh - oh0) * wo * 8;
        rlx_nchwc_dw_rows_of(xp, g, oh, rw, ok, K);
        rlx_nchwc_dw_row_core(rw, ok, wv, bv, res ? res + o : NULL, y + o, s, pw, W, wo, lo, hi, &a_copy, K);
        if (rlx_act_heavy(act)) rlx_nchwc_dw_row_post(y + o, wo * 8, a_in, act);
    }
}

/* The same row of the 3x3 kernel, 4 output pixels per step with the 9
 * weight vectors wv and the bias vector bv in registers; columns whose
 * taps all fall inside the row (the interior [lo, hi)) run without tests.  `a` has its act set to a
 * constant by the callers' instances, so the activation's switch folds
 * away instead of running once per output vector. */
RLX_INLINE_AVX2 void rlx_nchwc_dw3_row_core(const float* const* rows, const int* valid, const __m256* wv,
                                           __m256 bv, const float* res, float* yr, ptrdiff_t s, ptrdiff_t pw,
                                           ptrdiff_t W, ptrdiff_t wo, ptrdiff_t lo, ptrdiff_t hi,
                                           const rlx_nchwc_act* a) {
    ptrdiff_t ow = 0;
    for (; ow < lo; ++ow) rlx_nchwc_dw_px(rows, valid, wv, bv, res, yr, ow, s, pw, W, a);
    for (; ow + 4 <= hi; ow += 4) rlx_nchwc_dw_step4(rows, valid, wv, bv, res, yr, ow, s, pw, a, 3);
    for (; ow < wo; ++ow) rlx_nchwc_dw_px(rows, valid, wv, bv, res, yr, ow, s, pw, W, a);
}

/* Output rows oh0 .. oh1 - 1 of one block whose input plane starts at xp
 * (rows == NULL), or the one row whose input rows are rows[0..2] (oh0 = 0,
 * oh1 = 1): the weights and bias loaded, the interior found and the act
 * fixed once for all of them.  With one call per row, a 4x4 plane's rows
 * took about 100 cycles each (8 x 96 channels, 4x4, 1 thread: 9.6 us). */
RLX_INLINE_AVX2 void rlx_nchwc_dw3_rows_body(const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0,
                                            ptrdiff_t oh1, const float* const* rows, const int* valid,
                                            const float* wt, const float* b, const float* res, float* y,
                                            ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, ptrdiff_t wo,
                                            const rlx_nchwc_act* a_in, const int act) {
    rlx_nchwc_act a_copy = *a_in;
    a_copy.act = rlx_act_heavy(act) ? RLX_ACT_NONE : act;
    __m256 wv[9];
    for (int t = 0; t < 9; ++t) wv[t] = _mm256_loadu_ps(wt + t * 8);
    const __m256 bv = b ? _mm256_loadu_ps(b) : _mm256_setzero_ps();
    ptrdiff_t lo, hi;
    rlx_nchwc_dw_interior(s, pw, W, wo, 3, &lo, &hi);
    if (!xp) {
        rlx_nchwc_dw3_row_core(rows, valid, wv, bv, res, y, s, pw, W, wo, lo, hi, &a_copy);
        if (rlx_act_heavy(act)) rlx_nchwc_dw_row_post(y, wo * 8, a_in, act);
        return;
    }
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        const float* rw[3];
        int ok[3];
        const ptrdiff_t o = (oh - oh0) * wo * 8;
        rlx_nchwc_dw_rows_of(xp, g, oh, rw, ok, 3);
        rlx_nchwc_dw3_row_core(rw, ok, wv, bv, res ? res + o : NULL, y + o, s, pw, W, wo, lo, hi, &a_copy);
        if (rlx_act_heavy(act)) rlx_nchwc_dw_row_post(y + o, wo * 8, a_in, act);
    }
}

/* One case per activation code (the act a compile-time constant in each
 * instance of the rows' body), and a last one for any other code. */
#define RLX_DW_ACT_SWITCH(CALL_)                                                               \
    switch (a->act) {                                                                          \
    case RLX_ACT_NONE: CALL_(RLX_ACT_NONE); return;                                            \
    case RLX_ACT_RELU: CALL_(RLX_ACT_RELU); return;                                            \
    case RLX_ACT_CLIP: CALL_(RLX_ACT_CLIP); return;                                            \
    case RLX_ACT_LEAKY_RELU: CALL_(RLX_ACT_LEAKY_RELU); return;                                \
    case RLX_ACT_SIGMOID: CALL_(RLX_ACT_SIGMOID); return;                                      \
    case RLX_ACT_SILU: CALL_(RLX_ACT_SILU); return;                                            \
    case RLX_ACT_HARD_SIGMOID: CALL_(RLX_ACT_HARD_SIGMOID); return;                            \
    case RLX_ACT_HARD_SWISH: CALL_(RLX_ACT_HARD_SWISH); return;                                \
    default: CALL_(a->act);                                                                    \
    }

RLX_TARGET_AVX2 static void rlx_nchwc_dw_rows_avx2(const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0,
                                                   ptrdiff_t oh1, const float* const* rows, const int* valid,
                                                   const float* wt, const float* b, const float* res, float* y,
                                                   ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, ptrdiff_t wo,
                                                   const rlx_nchwc_act* a) {
    __m256 w5[RLX_NCHWC_DW_MAX_K * RLX_NCHWC_DW_MAX_K];
#define RLX_DW_CALL(A_) \
    rlx_nchwc_dw_rows_body(xp, g, oh0, oh1, rows, valid, wt, b, res, y, s, pw, W, wo, a, A_, 5, w5)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

/* The 3x3 kernel's rows: rlx_nchwc_dw_rows_avx2's work through the 3x3
 * functions above, with the row count a constant (through the 5x5 code,
 * its edge groups and a row count read from the geometry, MobileNetV2's
 * 3x3 depthwise convs took 1.2-1.5x as long) */
RLX_TARGET_AVX2 static void rlx_nchwc_dw3_rows_avx2(const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0,
                                                    ptrdiff_t oh1, const float* const* rows, const int* valid,
                                                    const float* wt, const float* b, const float* res, float* y,
                                                    ptrdiff_t s, ptrdiff_t pw, ptrdiff_t W, ptrdiff_t wo,
                                                    const rlx_nchwc_act* a) {
#define RLX_DW_CALL(A_) \
    rlx_nchwc_dw3_rows_body(xp, g, oh0, oh1, rows, valid, wt, b, res, y, s, pw, W, wo, a, A_)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

/* The 5x5 kernel's rows oh0 .. oh1 - 1 of one block through
 * rlx_nchwc_dw_padded_body, one instance per stride and activation (not
 * inlined: the buffer stays out of the frames of the row functions, which
 * the fused block calls once per row).
 * The 3x3 kernel keeps its edge code: through the copy and 8-pixel steps,
 * MobileNetV2's 3x3 shapes (7x7 to 112x112, stride 1 and 2) took 1.1-1.8x
 * as long at 1 thread. */
RLX_TARGET_AVX2 __attribute__((noinline)) static void rlx_nchwc_dw_padded_avx2(
        const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0, ptrdiff_t oh1, const float* wt, const float* b,
        const float* res, float* y, const rlx_nchwc_act* a) {
    float buf[RLX_NCHWC_DW_PAD_FLOATS] __attribute__((aligned(32)));
    __m256 wv[25];
    for (int t = 0; t < 25; ++t) wv[t] = _mm256_loadu_ps(wt + t * 8);
    const __m256 bv = b ? _mm256_loadu_ps(b) : _mm256_setzero_ps();
    rlx_nchwc_act a_copy = *a;
#define RLX_DW_CALL(A_)                                                                              \
    do {                                                                                              \
        a_copy.act = rlx_act_heavy(A_) ? RLX_ACT_NONE : (A_);                                         \
        if (g->s == 1)                                                                                \
            rlx_nchwc_dw_padded_body(buf, xp, g, oh0, oh1, wv, bv, res, y, &a_copy, 5, 1, (A_));      \
        else                                                                                          \
            rlx_nchwc_dw_padded_body(buf, xp, g, oh0, oh1, wv, bv, res, y, &a_copy, 5, 2, (A_));      \
    } while (0)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

/* The NP pair chains c of a row's step stored at yr: pixels 0 .. n - 1
 * (and their residual read). */
RLX_INLINE_AVX512 void rlx_nchwc_dw_pairs_store(const __m512* c, const float* res, float* yr, const int n,
                                                const rlx_nchwc_act* a, const int NP) {
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) {
        if (2 * q >= n) break;
        if (2 * q + 1 < n) {
            __m512 v = c[q];
            if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res + q * 16));
            _mm512_storeu_ps(yr + q * 16, rlx_act16(v, a));
        } else {
            __m256 v = _mm512_castps512_ps256(c[q]);
            if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + q * 16));
            _mm256_storeu_ps(yr + q * 16, rlx_nchwc_act8(v, a));
        }
    }
}

/* AVX-512, stride 1: output pixels 0 .. 2*NP - 1 of a row (NP pairs), two
 * pixels per zmm (in NCHW8c, pixels p and p + 1 of a block are 16 adjacent
 * floats), from the K input rows of two padded copies: ra[kh] + off, the
 * row with its zero padding (as rlx_nchwc_dw_padded_body's copy), and
 * rb[kh] + off, the same row one pixel to the left (rb's pixel c is ra's
 * c + 1).  Both copies start 64-byte
 * aligned and their rows are an even number of pixels, so the pair that
 * starts at an even pixel comes from ra and the one at an odd pixel from rb,
 * and every load is one whole cache line (zmm loads at 32-byte offsets split
 * a line every other time: the one-copy version of this step ran no faster
 * than the AVX2 step).  Chain q holds pixels 2q and 2q + 1: the bias, then
 * per tap row the loads run over the input offset d = 2q + kw, which meets
 * each chain's taps in kw order; so each lane's chain is the AVX2 step's,
 * and the bits are the same.  Only pixels 0 .. n - 1 are stored (and their
 * residual read). */
RLX_INLINE_AVX512 void rlx_nchwc_dw_pairs(const float* const* ra, const float* const* rb, ptrdiff_t off,
                                          const float* wt, __m512 bv, const float* res, float* yr, const int n,
                                          const rlx_nchwc_act* a, const int K, const int NP) {
    __m512 c[8];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) c[q] = bv;
#pragma GCC unroll 1
    for (int kh = 0; kh < K; ++kh) {
        const float* pa = ra[kh] + off;
        const float* pb = rb[kh] + off;
        __m512 w[RLX_NCHWC_DW_MAX_K];
#pragma GCC unroll 5
        for (int kw = 0; kw < K; ++kw) w[kw] = _mm512_broadcast_f32x8(_mm256_load_ps(wt + (kh * K + kw) * 8));
#pragma GCC unroll 20
        for (int d = 0; d < 2 * (NP - 1) + K; ++d) {
            __m512 x = d % 2 == 0 ? _mm512_load_ps(pa + d * 8) : _mm512_load_ps(pb + (d - 1) * 8);
            /* one load per input pair, in a register: GCC otherwise folds
             * the load into each of its K FMAs (40 loads a tap row, not 19) */
            __asm__("" : "+v"(x));
#pragma GCC unroll 5
            for (int kw = 0; kw < K; ++kw) {
                const int e = d - kw;
                if (e >= 0 && e % 2 == 0 && e / 2 < NP) c[e / 2] = _mm512_fmadd_ps(x, w[kw], c[e / 2]);
            }
        }
    }
    rlx_nchwc_dw_pairs_store(c, res, yr, n, a, NP);
}

/* Input row ih of a block (zero rows outside the plane) into its slot of
 * the two copies: d with the zero padding, e the same one pixel left. */
RLX_INLINE_AVX2 void rlx_nchwc_dw_pair_row(float* d, float* e, const float* xp, const rlx_nchwc_dw_geom* g,
                                           ptrdiff_t ih, ptrdiff_t wp) {
    const ptrdiff_t pw = g->pw, ncopy = g->w < wp - pw ? g->w : wp - pw;
    ptrdiff_t c = 0;
    if (ih >= 0 && ih < g->h) {
        rlx_dw_zero_px(d, pw);
        rlx_dw_copy_px(d + pw * 8, xp + ih * g->w * 8, ncopy);
        c = pw + ncopy;
    }
    rlx_dw_zero_px(d + c * 8, wp - c);
    rlx_dw_copy_px(e, d + 8, wp - 1);
    rlx_dw_zero_px(e + (wp - 1) * 8, 1);
}

/* Rows oh0 .. oh1 - 1 of one block at stride 1 with the AVX-512 pair steps.
 * The two copies hold a ring of K input rows (input row ih in slot ih % K):
 * each output row copies the one new row it reads, so every input row is
 * copied once and the ring (2 x K rows) stays in L1.  16-pixel steps, then
 * one step of 8, 4 or 2 pairs for the row's last 1 - 15 pixels (a 7-pixel
 * row runs 4 pairs, as the AVX2 step's 8). */
RLX_INLINE_AVX512 void rlx_nchwc_dw_pairs_body(float* bufa, float* bufb, const float* xp, const rlx_nchwc_dw_geom* g,
                                               ptrdiff_t oh0, ptrdiff_t oh1, const float* wt, __m512 bv,
                                               const float* res, float* y, const rlx_nchwc_act* a, const int K,
                                               const int post_act) {
    const ptrdiff_t wo = g->w_out, ph = g->ph;
    const ptrdiff_t wf = wo & ~(ptrdiff_t)15, rem = wo - wf;
    const ptrdiff_t wp = rlx_nchwc_dw_pad_cols(g), row = wp * 8;  /* wp even: see the caller */
    /* slot of input row ih: (ih + shift) % K, shift making it non-negative */
    const ptrdiff_t shift = (ph / K + 1) * K;
    for (ptrdiff_t ih = oh0 - ph; ih < oh0 - ph + K - 1; ++ih)
        rlx_nchwc_dw_pair_row(bufa + (ih + shift) % K * row, bufb + (ih + shift) % K * row, xp, g, ih, wp);
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        const ptrdiff_t inew = oh - ph + K - 1;
        rlx_nchwc_dw_pair_row(bufa + (inew + shift) % K * row, bufb + (inew + shift) % K * row, xp, g, inew, wp);
        const float* ra[RLX_NCHWC_DW_MAX_K];
        const float* rb[RLX_NCHWC_DW_MAX_K];
        for (int kh = 0; kh < K; ++kh) {
            ra[kh] = bufa + (oh - ph + kh + shift) % K * row;
            rb[kh] = bufb + (oh - ph + kh + shift) % K * row;
        }
        const ptrdiff_t o = (oh - oh0) * wo * 8;
        const float* ro = res ? res + o : NULL;
        for (ptrdiff_t ow = 0; ow < wf; ow += 16)
            rlx_nchwc_dw_pairs(ra, rb, ow * 8, wt, bv, ro ? ro + ow * 8 : NULL, y + o + ow * 8, 16, a, K, 8);
        if (rem > 8)
            rlx_nchwc_dw_pairs(ra, rb, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, K, 8);
        else if (rem > 4)
            rlx_nchwc_dw_pairs(ra, rb, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, K, 4);
        else if (rem > 0)
            rlx_nchwc_dw_pairs(ra, rb, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, K, 2);
        if (rlx_act_heavy(post_act)) rlx_nchwc_dw_row_post(y + o, wo * 8, a, post_act);
    }
}

/* The 5x5 stride-1 rows oh0 .. oh1 - 1 of one block through the pair
 * steps, one instance per activation (as rlx_nchwc_dw_padded_avx2): the
 * two ring copies (K rows each; rlx_nchwc_dw_pairs_on checked they fit). */
RLX_TARGET_AVX512 __attribute__((noinline)) static void rlx_nchwc_dw_pairs_avx512(
        const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0, ptrdiff_t oh1, const float* wt, const float* b,
        const float* res, float* y, const rlx_nchwc_act* a) {
    float bufa[RLX_NCHWC_DW_PAD_FLOATS] __attribute__((aligned(64)));
    float bufb[RLX_NCHWC_DW_PAD_FLOATS] __attribute__((aligned(64)));
    float wa[25 * 8] __attribute__((aligned(32)));  /* the block's weights, aligned for the loads */
    for (int t = 0; t < 25 * 8; ++t) wa[t] = wt[t];
    const __m512 bv = b ? _mm512_broadcast_f32x8(_mm256_loadu_ps(b)) : _mm512_setzero_ps();
    rlx_nchwc_act a_copy = *a;
#define RLX_DW_CALL(A_)                                                                              \
    do {                                                                                              \
        a_copy.act = rlx_act_heavy(A_) ? RLX_ACT_NONE : (A_);                                         \
        rlx_nchwc_dw_pairs_body(bufa, bufb, xp, g, oh0, oh1, wa, bv, res, y, &a_copy, 5, (A_));       \
    } while (0)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

/* AVX-512, 5x5 stride 2, two output pixels per zmm as in
 * rlx_nchwc_dw_pairs, from four copies of each input row: copy m holds the
 * padded row's columns m, m + 2, m + 4, ...  The pair of output pixels
 * (2q, 2q + 1) reads at tap kw the padded columns 4q + kw and 4q + kw + 2,
 * which are pixels 2j and 2j + 1 of copy e % 4 for e = 4q + kw, j = e / 4:
 * one 64-byte aligned load per e, each feeding the chains whose taps meet
 * it.  This is one input row's part (p[m] + off: its copies at the step's
 * first pixel, w: its tap row's 5 weight vectors).  e runs upwards, so each
 * chain meets its taps in kw order; the caller runs the tap rows in kh
 * order after the bias: the AVX2 step's chain (rlx_nchwc_dw_step8r at
 * S = 2), and the same bits. */
RLX_INLINE_AVX512 void rlx_nchwc_dw_s2_taps(const float* const* p, ptrdiff_t off, const float* w, __m512* c,
                                            const int NP) {
    __m512 wv[5];
#pragma GCC unroll 5
    for (int kw = 0; kw < 5; ++kw) wv[kw] = _mm512_broadcast_f32x8(_mm256_load_ps(w + kw * 8));
    const float* p0 = p[0] + off;
    const float* p1 = p[1] + off;
    const float* p2 = p[2] + off;
    const float* p3 = p[3] + off;
#pragma GCC unroll 40
    for (int e = 0; e <= 4 * NP; ++e) {
        const float* src = e % 4 == 0 ? p0 : e % 4 == 1 ? p1 : e % 4 == 2 ? p2 : p3;
        __m512 x = _mm512_load_ps(src + (e / 4) * 16);
        __asm__("" : "+v"(x));   /* one load per e (see rlx_nchwc_dw_pairs) */
#pragma GCC unroll 5
        for (int kw = 0; kw < 5; ++kw) {
            const int d = e - kw;
            if (d >= 0 && d % 4 == 0 && d / 4 < NP) c[d / 4] = _mm512_fmadd_ps(x, wv[kw], c[d / 4]);
        }
    }
}

/* One step of NP pairs of one output row whose input rows' copies are
 * rows[kh][m] (kh = 0..4). */
RLX_INLINE_AVX512 void rlx_nchwc_dw_s2_step(const float* (*rows)[4], ptrdiff_t off, const float* wt,
                                            __m512 bv, const float* res, float* yr, const int n,
                                            const rlx_nchwc_act* a, const int NP) {
    __m512 c[8];
#pragma GCC unroll 8
    for (int q = 0; q < NP; ++q) c[q] = bv;
#pragma GCC unroll 1
    for (int kh = 0; kh < 5; ++kh) rlx_nchwc_dw_s2_taps(rows[kh], off, wt + kh * 40, c, NP);
    rlx_nchwc_dw_pairs_store(c, res, yr, n, a, NP);
}

/* The output pixels the stride-2 pair steps of a row cover: whole steps of
 * 16, then one of 8, 4 or 2 pairs for the last 1 - 15 (as
 * rlx_nchwc_dw_pairs_body). */
static inline ptrdiff_t rlx_nchwc_dw_s2_cover(ptrdiff_t wo) {
    const ptrdiff_t wf = wo & ~(ptrdiff_t)15, rem = wo - wf;
    return wf + (rem > 8 ? 16 : rem > 4 ? 8 : rem > 0 ? 4 : 0);
}

/* Pixels per row of each of the four copies: the steps read copy m's
 * slots up to cover + 1 (padded column m + 2 * slot), an even count. */
static inline ptrdiff_t rlx_nchwc_dw_s2_slots(const rlx_nchwc_dw_geom* g) {
    return rlx_nchwc_dw_s2_cover(g->w_out) + 2;
}

/* Input row ih of a block (zero outside the plane) into its row of the
 * four copies d[0..3] (slots pixels each, an even count): copy m's slot t
 * is padded column m + 2t, i.e. input column m + 2t - pw.  Four padded
 * columns 4g .. 4g + 3 per step, loaded as two pixel pairs, masked by
 * pm[j], the mask of the pair at padded columns 2j, 2j + 1 (the padding
 * loads zeros, nothing outside the row is touched); the next step's first
 * pair kept: copy 0 takes the low pixels of pairs A = (4g, 4g+1) and B =
 * (4g+2, 4g+3), copy 1 their high pixels, and copies 2 and 3 the same of B
 * and the next pair C. */
RLX_INLINE_AVX512 void rlx_nchwc_dw_s2_row(float* const* d, const float* xp, const rlx_nchwc_dw_geom* g,
                                           ptrdiff_t ih, ptrdiff_t slots, const __mmask16* pm) {
    if (ih < 0 || ih >= g->h) {
        const __m512 z = _mm512_setzero_ps();
        for (ptrdiff_t t = 0; t < slots; t += 2)
            for (int m = 0; m < 4; ++m) _mm512_store_ps(d[m] + t * 8, z);
        return;
    }
    const float* sr = xp + (ih * g->w - g->pw) * 8;   /* padded column 0 (never read outside the row) */
    __m512 a = _mm512_maskz_loadu_ps(pm[0], sr);
    for (ptrdiff_t t = 0; t < slots; t += 2) {
        const __m512 b = _mm512_maskz_loadu_ps(pm[t + 1], sr + (2 * t + 2) * 8);
        const __m512 n = _mm512_maskz_loadu_ps(pm[t + 2], sr + (2 * t + 4) * 8);
        _mm512_store_ps(d[0] + t * 8, _mm512_shuffle_f32x4(a, b, 0x44));
        _mm512_store_ps(d[1] + t * 8, _mm512_shuffle_f32x4(a, b, 0xEE));
        _mm512_store_ps(d[2] + t * 8, _mm512_shuffle_f32x4(b, n, 0x44));
        _mm512_store_ps(d[3] + t * 8, _mm512_shuffle_f32x4(b, n, 0xEE));
        a = n;
    }
}

/* Rows oh0 .. oh1 - 1 of one block at stride 2 with the pair steps.  The
 * four copies hold a ring of 5 input rows (input row ih in slot ih % 5,
 * shifted non-negative): each output row copies the two new rows it reads,
 * so every input row is copied once per run of rows. */
RLX_INLINE_AVX512 void rlx_nchwc_dw_pairs_s2_body(float* buf, const float* xp, const rlx_nchwc_dw_geom* g,
                                                  ptrdiff_t oh0, ptrdiff_t oh1, const float* wt, __m512 bv,
                                                  const float* res, float* y, const rlx_nchwc_act* a,
                                                  const int post_act) {
    const ptrdiff_t wo = g->w_out, ph = g->ph, row_out = wo * 8;
    const ptrdiff_t wf = wo & ~(ptrdiff_t)15, rem = wo - wf;
    const ptrdiff_t slots = rlx_nchwc_dw_s2_slots(g), row = slots * 8, copy = 5 * row;
    const ptrdiff_t shift = 5;   /* ph <= 2: ih + shift >= 0 */
    /* the masks of the pixel pairs at padded columns 2j, 2j + 1 (slots + 2 of them) */
    __mmask16 pm2[RLX_NCHWC_DW_S2_MAX_SLOTS + 2];
    for (ptrdiff_t j = 0; j < slots + 2; ++j) {
        const ptrdiff_t iw = 2 * j - g->pw;
        pm2[j] = (__mmask16)((iw >= 0 && iw < g->w ? 0x00FF : 0) | (iw + 1 >= 0 && iw + 1 < g->w ? 0xFF00 : 0));
    }
    ptrdiff_t next = 2 * oh0 - ph;   /* the next input row to copy */
    for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
        for (; next <= 2 * oh - ph + 4; ++next) {
            float* d[4];
            for (int m = 0; m < 4; ++m) d[m] = buf + m * copy + (next + shift) % 5 * row;
            rlx_nchwc_dw_s2_row(d, xp, g, next, slots, pm2);
        }
        const float* rows[5][4];
        for (int kh = 0; kh < 5; ++kh)
            for (int m = 0; m < 4; ++m) rows[kh][m] = buf + m * copy + (2 * oh - ph + kh + shift) % 5 * row;
        const ptrdiff_t o = (oh - oh0) * row_out;
        const float* ro = res ? res + o : NULL;
        for (ptrdiff_t ow = 0; ow < wf; ow += 16)
            rlx_nchwc_dw_s2_step(rows, ow * 8, wt, bv, ro ? ro + ow * 8 : NULL, y + o + ow * 8, 16, a, 8);
        if (rem > 8)
            rlx_nchwc_dw_s2_step(rows, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, 8);
        else if (rem > 4)
            rlx_nchwc_dw_s2_step(rows, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, 4);
        else if (rem > 0)
            rlx_nchwc_dw_s2_step(rows, wf * 8, wt, bv, ro ? ro + wf * 8 : NULL, y + o + wf * 8, (int)rem, a, 2);
        if (rlx_act_heavy(post_act)) rlx_nchwc_dw_row_post(y + o, row_out, a, post_act);
    }
}

/* The 5x5 stride-2 rows oh0 .. oh1 - 1 of one block through the pair steps,
 * one instance per activation; the four ring copies in one buffer
 * (rlx_nchwc_dw_pairs_on checked they fit). */
RLX_TARGET_AVX512 __attribute__((noinline)) static void rlx_nchwc_dw_pairs_s2_avx512(
        const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0, ptrdiff_t oh1, const float* wt, const float* b,
        const float* res, float* y, const rlx_nchwc_act* a) {
    float buf[RLX_NCHWC_DW_S2_FLOATS] __attribute__((aligned(64)));
    float wa[25 * 8] __attribute__((aligned(32)));
    for (int t = 0; t < 25 * 8; ++t) wa[t] = wt[t];
    const __m512 bv = b ? _mm512_broadcast_f32x8(_mm256_loadu_ps(b)) : _mm512_setzero_ps();
    rlx_nchwc_act a_copy = *a;
#define RLX_DW_CALL(A_)                                                                              \
    do {                                                                                              \
        a_copy.act = rlx_act_heavy(A_) ? RLX_ACT_NONE : (A_);                                         \
        rlx_nchwc_dw_pairs_s2_body(buf, xp, g, oh0, oh1, wa, bv, res, y, &a_copy, (A_));              \
    } while (0)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

/* ---- depthwise on two blocks at once (AVX-512) -----------------------------
 * Blocks cb and cb + 1 of an image run as one block of 16 channels: their
 * input rows are copied with the zero padding into buf [row][wp][16] (block
 * cb's 8 channels in the low half of each pixel, cb + 1's in the high one),
 * in chunks of output rows whose input rows fit, as rlx_nchwc_dw_padded_body
 * does for one block; the step then holds 8 output pixels x 16 channels in
 * 8 zmm chains, every load one aligned line.  Each lane's chain is the AVX2
 * step's (rlx_nchwc_dw_step8r: the bias, then the taps in (kh, kw) order),
 * and the epilogue runs on each 8-lane half as there: the same bits.  (A
 * 3x3's AVX2 row code skips the taps on the padding, where this adds 0 * w:
 * the same sums for finite weights, as in the one-block padded steps.) */
RLX_INLINE_AVX512 void rlx_nchwc_dw_step16(const float* const* rows, ptrdiff_t off, const __m512* wv, __m512 bv,
                                           const float* res0, const float* res1, float* y0, float* y1, const int n,
                                           const rlx_nchwc_act* a, const int K, const int S) {
    __m512 c[8];
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) c[p] = bv;
#pragma GCC unroll 1
    for (int kh = 0; kh < K; ++kh) {
        const float* r = rows[kh] + off;
        __m512 w[5];
#pragma GCC unroll 5
        for (int kw = 0; kw < K; ++kw) w[kw] = wv[kh * K + kw];
#pragma GCC unroll 20
        for (int col = 0; col < 7 * S + K; ++col) {
            __m512 x = _mm512_load_ps(r + col * 16);
            __asm__("" : "+v"(x));   /* one load per column (see rlx_nchwc_dw_pairs) */
#pragma GCC unroll 5
            for (int kw = 0; kw < K; ++kw) {
                const int d = col - kw;
                if (d >= 0 && d % S == 0 && d / S < 8) c[d / S] = _mm512_fmadd_ps(x, w[kw], c[d / S]);
            }
        }
    }
#pragma GCC unroll 8
    for (int p = 0; p < 8; ++p) {
        if (p >= n) break;
        __m256 lo = _mm512_castps512_ps256(c[p]), hi = _mm512_extractf32x8_ps(c[p], 1);
        if (res0) {
            lo = _mm256_add_ps(lo, _mm256_loadu_ps(res0 + p * 8));
            hi = _mm256_add_ps(hi, _mm256_loadu_ps(res1 + p * 8));
        }
        _mm256_storeu_ps(y0 + p * 8, rlx_nchwc_act8(lo, a));
        _mm256_storeu_ps(y1 + p * 8, rlx_nchwc_act8(hi, a));
    }
}

#define RLX_NCHWC_DW16_FLOATS 16384

/* Rows oh0 .. oh1 - 1 of the block pair whose planes start at xp0 and xp1
 * (outputs y0, y1 and residuals res0, res1 at row oh0), stride S. */
RLX_INLINE_AVX512 void rlx_nchwc_dw16_body(float* buf, const float* xp0, const float* xp1,
                                           const rlx_nchwc_dw_geom* g, ptrdiff_t oh0, ptrdiff_t oh1,
                                           const __m512* wv, __m512 bv, const float* res0, const float* res1,
                                           float* y0, float* y1, const rlx_nchwc_act* a, const int K,
                                           const int S, const int post_act) {
    const ptrdiff_t H = g->h, W = g->w, wo = g->w_out, ph = g->ph, pw = g->pw;
    const ptrdiff_t w8 = (wo + 7) & ~(ptrdiff_t)7, wf = wo & ~(ptrdiff_t)7;
    const ptrdiff_t wp = rlx_nchwc_dw_pad_cols(g), row = wp * 16;
    const ptrdiff_t ncopy = W < wp - pw ? W : wp - pw;
    const ptrdiff_t rows_fit = RLX_NCHWC_DW16_FLOATS / row;
    const ptrdiff_t chunk = (rows_fit - K) / S + 1;
    const __m512 zero = _mm512_setzero_ps();
    for (ptrdiff_t o0 = oh0; o0 < oh1; o0 += chunk) {
        const ptrdiff_t o1 = o0 + chunk < oh1 ? o0 + chunk : oh1;
        const ptrdiff_t in0 = o0 * S - ph, in1 = (o1 - 1) * S - ph + K;
        for (ptrdiff_t ih = in0; ih < in1; ++ih) {
            float* d = buf + (ih - in0) * row;
            ptrdiff_t c = 0;
            if (ih >= 0 && ih < H) {
                const float* s0 = xp0 + ih * W * 8 - pw * 8;
                const float* s1 = xp1 + ih * W * 8 - pw * 8;
                for (; c < pw; ++c) _mm512_store_ps(d + c * 16, zero);
                for (; c < pw + ncopy; ++c)
                    _mm512_store_ps(d + c * 16, _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(s0 + c * 8)),
                                                                   _mm256_loadu_ps(s1 + c * 8), 1));
            }
            for (; c < wp; ++c) {
                __m512 z = zero;
                __asm__("" : "+v"(z));   /* vector stores, not a memset call per row */
                _mm512_store_ps(d + c * 16, z);
            }
        }
        for (ptrdiff_t oh = o0; oh < o1; ++oh) {
            const float* rw[5];
            for (int kh = 0; kh < K; ++kh) rw[kh] = buf + (oh * S - ph + kh - in0) * row;
            const ptrdiff_t o = (oh - oh0) * wo * 8;
            for (ptrdiff_t ow = 0; ow < wf; ow += 8)
                rlx_nchwc_dw_step16(rw, ow * S * 16, wv, bv, res0 ? res0 + o + ow * 8 : NULL,
                                    res1 ? res1 + o + ow * 8 : NULL, y0 + o + ow * 8, y1 + o + ow * 8, 8, a, K, S);
            if (w8 > wo)
                rlx_nchwc_dw_step16(rw, wf * S * 16, wv, bv, res0 ? res0 + o + wf * 8 : NULL,
                                    res1 ? res1 + o + wf * 8 : NULL, y0 + o + wf * 8, y1 + o + wf * 8,
                                    (int)(wo - wf), a, K, S);
            if (rlx_act_heavy(post_act)) {
                rlx_nchwc_dw_row_post(y0 + o, wo * 8, a, post_act);
                rlx_nchwc_dw_row_post(y1 + o, wo * 8, a, post_act);
            }
        }
    }
}

/* The rows oh0 .. oh1 - 1 of a block pair, one instance per kernel side,
 * stride and activation: the pair's weights and biases interleaved once per
 * call. */
RLX_TARGET_AVX512 __attribute__((noinline)) static void rlx_nchwc_dw16_avx512(
        const float* xp0, const float* xp1, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0, ptrdiff_t oh1,
        const float* wt0, const float* wt1, const float* b0, const float* b1, const float* res0, const float* res1,
        float* y0, float* y1, const rlx_nchwc_act* a) {
    float buf[RLX_NCHWC_DW16_FLOATS] __attribute__((aligned(64)));
    __m512 wv[25];
    for (int t = 0; t < g->k * g->k; ++t)
        wv[t] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(wt0 + t * 8)), _mm256_loadu_ps(wt1 + t * 8),
                                   1);
    const __m512 bv = b0 ? _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(b0)), _mm256_loadu_ps(b1), 1)
                         : _mm512_setzero_ps();
    rlx_nchwc_act a_copy = *a;
#define RLX_DW_CALL(A_)                                                                                     \
    do {                                                                                                     \
        a_copy.act = rlx_act_heavy(A_) ? RLX_ACT_NONE : (A_);                                                \
        if (g->k == 5 && g->s == 1)                                                                          \
            rlx_nchwc_dw16_body(buf, xp0, xp1, g, oh0, oh1, wv, bv, res0, res1, y0, y1, &a_copy, 5, 1, (A_)); \
        else if (g->k == 5)                                                                                  \
            rlx_nchwc_dw16_body(buf, xp0, xp1, g, oh0, oh1, wv, bv, res0, res1, y0, y1, &a_copy, 5, 2, (A_)); \
        else if (g->s == 1)                                                                                  \
            rlx_nchwc_dw16_body(buf, xp0, xp1, g, oh0, oh1, wv, bv, res0, res1, y0, y1, &a_copy, 3, 1, (A_)); \
        else                                                                                                 \
            rlx_nchwc_dw16_body(buf, xp0, xp1, g, oh0, oh1, wv, bv, res0, res1, y0, y1, &a_copy, 3, 2, (A_)); \
    } while (0)
    RLX_DW_ACT_SWITCH(RLX_DW_CALL)
#undef RLX_DW_CALL
}

#undef RLX_DW_ACT_SWITCH
#endif

/* One depthwise output row from its K input rows, dispatched. */
static inline void rlx_nchwc_dw_row(int level, const float* const* rows, const int* valid, const float* wt,
                                    const float* b, const float* res, float* yr, ptrdiff_t s, ptrdiff_t pw,
                                    ptrdiff_t W, ptrdiff_t wo, const rlx_nchwc_act* a, int K) {
#if RLX_X86_DISPATCH
    if (level) {
        if (K == 3)
            rlx_nchwc_dw3_rows_avx2(NULL, NULL, 0, 1, rows, valid, wt, b, res, yr, s, pw, W, wo, a);
        else
            rlx_nchwc_dw_rows_avx2(NULL, NULL, 0, 1, rows, valid, wt, b, res, yr, s, pw, W, wo, a);
        return;
    }
#endif
    (void)level;
    rlx_nchwc_dw_row_ptrs_base(rows, valid, wt, b, res, yr, s, pw, W, wo, a, K);
}

#if RLX_X86_DISPATCH
/* Rows oh0 .. oh1 - 1 of one block (plane xp, its weights wb and bias bb,
 * its residual and output at row oh0), by the SIMD kernels (level >= 1). */
static inline void rlx_nchwc_dw_block_rows(int level, const float* xp, const rlx_nchwc_dw_geom* g, ptrdiff_t oh0,
                                           ptrdiff_t oh1, const float* wb, const float* bb, const float* rr,
                                           float* yr, const rlx_nchwc_act* a) {
    if (level > 1 && rlx_nchwc_dw_pairs_on(g))
        rlx_nchwc_dw_pairs_avx512(xp, g, oh0, oh1, wb, bb, rr, yr, a);
    else if (level > 1 && rlx_nchwc_dw_pairs_s2_on(g))
        rlx_nchwc_dw_pairs_s2_avx512(xp, g, oh0, oh1, wb, bb, rr, yr, a);
    else if (g->k == 5 && rlx_nchwc_dw_pad_fits(g))
        rlx_nchwc_dw_padded_avx2(xp, g, oh0, oh1, wb, bb, rr, yr, a);
    else
        (g->k == 3 ? rlx_nchwc_dw3_rows_avx2 : rlx_nchwc_dw_rows_avx2)(xp, g, oh0, oh1, NULL, NULL, wb, bb, rr, yr,
                                                                     g->s, g->pw, g->w, g->w_out, a);
}
#endif

/* Whether a depthwise conv runs its blocks in pairs (rlx_nchwc_dw16_avx512)
 * on this CPU: at least two blocks, on the AVX-512 level, the k input rows
 * of a pair fitting the copy, and a 5x5 kernel on output rows of at most
 * RLX_DW16_MAX_W5 pixels or a 3x3 at stride 1 on rows of at most
 * RLX_DW16_MAX_W3.  Against the one-block kernels (5x5: the AVX-512 pair
 * steps from 14 pixels at stride 1 and from 14 at stride 2, the AVX2 steps
 * below; 3x3: the AVX2 row code), one conv, ReLU, pair ratios of 31
 * interleaved samples at 1 thread (2 threads): 5x5 1152@7 1.31 (1.28),
 * 960@7 1.29 (1.24), 576@14 s2 1.19 (1.21), 672@14 s2 1.18 (1.18), 480@14
 * 1.04 (1.05), 672@14 1.06 (1.03); but 120@28 0.96 (0.93), 240@28 0.98
 * (0.97), 240@28 s2 0.96 (0.95), 128@56 0.90 (0.95), 144@56 s2 0.80
 * (0.78); 3x3 960@7 1.24 (1.25), 1152@7 1.23 (1.26), but 384@14 1.01
 * (1.00), 576@14 s2 0.87 (0.88) and 0.49-0.93 on larger planes, where the
 * copy outweighs the 9 taps it serves.  (On this host's slow phases the
 * pairs also won on 5x5 planes up to 56x56, 1.08-1.25.) */
#define RLX_DW16_MAX_W5 14
#define RLX_DW16_MAX_W3 8
static inline int rlx_nchwc_dw16_on(const rlx_nchwc_dw_geom* g) {
#if RLX_X86_DISPATCH
    return rlx_simd_level() > 1 && g->cb >= 2 &&
           (g->k == 5 ? g->w_out <= RLX_DW16_MAX_W5 : g->s == 1 && g->w_out <= RLX_DW16_MAX_W3) &&
           RLX_NCHWC_DW16_FLOATS / (rlx_nchwc_dw_pad_cols(g) * 16) >= g->k;
#else
    (void)g;
    return 0;
#endif
}

/* The work items of a depthwise conv of n images: output rows of blocks, or
 * of block pairs when g->pairs16. */
static inline ptrdiff_t rlx_nchwc_dw_items(const rlx_nchwc_dw_geom* g, ptrdiff_t n) {
    return n * (g->pairs16 ? (g->cb + 1) / 2 : g->cb) * g->h_out;
}

static void rlx_nchwc_dw_rows(const float* x, ptrdiff_t x_len, const float* wt, const float* bias,
                              const float* res, ptrdiff_t res_len, float* y, ptrdiff_t y_len,
                              const rlx_nchwc_dw_geom* g, const rlx_nchwc_act* a, ptrdiff_t r0, ptrdiff_t r1) {
    const int level = rlx_simd_level();
    const ptrdiff_t plane_in = g->h * g->w * 8, row_out = g->w_out * 8, wblk = g->k * g->k * 8;
    (void)res_len;
#if RLX_X86_DISPATCH
    if (level > 1 && g->pairs16) {
        /* each run of rows of one block pair in one call; an odd last
         * block runs alone */
        const ptrdiff_t cps = (g->cb + 1) / 2;
        for (ptrdiff_t r = r0; r < r1;) {
            const ptrdiff_t pr = r / g->h_out, oh = r % g->h_out, cb = 2 * (pr % cps);
            const ptrdiff_t blk = pr / cps * g->cb + cb, nb = cb + 1 < g->cb ? 2 : 1;
            const ptrdiff_t oh1 = g->h_out - oh < r1 - r ? g->h_out : oh + (r1 - r);
            const ptrdiff_t yr = blk * g->h_out + oh;   /* output row oh of block blk */
            RLX_CHECK_RANGE(blk * plane_in, (blk + nb) * plane_in, x_len, "nchwc depthwise x");
            RLX_CHECK_RANGE(yr * row_out, ((blk + nb - 1) * g->h_out + oh1) * row_out, y_len, "nchwc depthwise y");
            if (res)
                RLX_CHECK_RANGE(yr * row_out, ((blk + nb - 1) * g->h_out + oh1) * row_out, res_len,
                                "nchwc depthwise residual");
            if (nb == 2) {
                const ptrdiff_t yr1 = yr + g->h_out;
                rlx_nchwc_dw16_avx512(x + blk * plane_in, x + (blk + 1) * plane_in, g, oh, oh1, wt + cb * wblk,
                                      wt + (cb + 1) * wblk, bias ? bias + cb * 8 : NULL,
                                      bias ? bias + cb * 8 + 8 : NULL, res ? res + yr * row_out : NULL,
                                      res ? res + yr1 * row_out : NULL, y + yr * row_out, y + yr1 * row_out, a);
            } else {
                rlx_nchwc_dw_block_rows(level, x + blk * plane_in, g, oh, oh1, wt + cb * wblk,
                                        bias ? bias + cb * 8 : NULL, res ? res + yr * row_out : NULL,
                                        y + yr * row_out, a);
            }
            r += oh1 - oh;
        }
        return;
    }
    if (level) {
        /* each run of rows of one block in one call */
        for (ptrdiff_t r = r0; r < r1;) {
            const ptrdiff_t blk = r / g->h_out, oh = r % g->h_out, cb = blk % g->cb;
            const ptrdiff_t oh1 = g->h_out - oh < r1 - r ? g->h_out : oh + (r1 - r);
            RLX_CHECK_RANGE(blk * plane_in, (blk + 1) * plane_in, x_len, "nchwc depthwise x");
            RLX_CHECK_RANGE(r * row_out, (r + oh1 - oh) * row_out, y_len, "nchwc depthwise y");
            if (res) RLX_CHECK_RANGE(r * row_out, (r + oh1 - oh) * row_out, res_len, "nchwc depthwise residual");
            rlx_nchwc_dw_block_rows(level, x + blk * plane_in, g, oh, oh1, wt + cb * wblk,
                                    bias ? bias + cb * 8 : NULL, res ? res + r * row_out : NULL, y + r * row_out, a);
            r += oh1 - oh;
        }
        return;
    }
#endif
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const ptrdiff_t blk = r / g->h_out, oh = r % g->h_out, cb = blk % g->cb;
        const float* xp = x + blk * plane_in;
        float* yr = y + r * row_out;
        const float* rr = res ? res + r * row_out : NULL;
        const float* bb = bias ? bias + cb * 8 : NULL;
        RLX_CHECK_RANGE(blk * plane_in, (blk + 1) * plane_in, x_len, "nchwc depthwise x");
        RLX_CHECK_RANGE(r * row_out, (r + 1) * row_out, y_len, "nchwc depthwise y");
        if (res) RLX_CHECK_RANGE(r * row_out, (r + 1) * row_out, res_len, "nchwc depthwise residual");
        const float* rows[RLX_NCHWC_DW_MAX_K];
        int valid[RLX_NCHWC_DW_MAX_K];
        rlx_nchwc_dw_rows_of(xp, g, oh, rows, valid, (int)g->k);
        rlx_nchwc_dw_row(level, rows, valid, wt + cb * wblk, bb, rr, yr, g->s, g->pw, g->w, g->w_out, a, (int)g->k);
    }
}

/* ---- fused inverted residual block ---------------------------------------
 * MobileNetV2's block as one kernel: y = project(dw(expand(x))) (+ residual),
 *   expand:  1x1 conv C -> E with bias and activation (optional: without it
 *            E = C and the depthwise conv reads x),
 *   dw:      depthwise k x k (k = 3 or 5), stride 1 or 2, padding k / 2,
 *            bias and activation,
 *   project: 1x1 conv E -> M with bias, residual and activation,
 * all blocked.  Run as three ops, the two E-channel tensors go to memory and
 * back (at 112x112, 96 channels, 4.8 MB each); here they live in a per-run
 * band buffer that stays in L2.  Work items: (image, band of `band` output
 * rows), in order.  Per band:
 *   1. expand the input rows the band's depthwise rows read,
 *      (o0*s - k/2 .. (o1-1)*s - k/2 + k - 1) clipped to the plane, into
 *      the ring xe [E/8][br][W][8]: input row ih in slot ih % br.  The rows
 *      the previous band of the same image expanded (k - s of them) are
 *      still there;
 *   2. the depthwise rows into xd [E/8][band][W_out][8];
 *   3. project xd's band of pixels into y.
 * Each output is the same chain of fused multiply-adds as in the three
 * separate kernels (1x1 tiles over all K blocks, the depthwise row
 * function), so the fused block gives the unfused plan's bits. */
typedef struct {
    ptrdiff_t n, c, e, m;          /* images; input, expanded, output channels */
    ptrdiff_t h, w, h_out, w_out, s;
    ptrdiff_t band, br;            /* output rows per band; buffer rows (band-1)*s + k */
    int expand;
    int k;                         /* the depthwise kernel's side, 3 or 5 (padding k / 2) */
} rlx_nchwc_ir_geom;

typedef struct {
    const float *we, *be, *wd, *bd, *wp, *bp;   /* packed weights, biases (NULL: none) */
    rlx_nchwc_act ae, ad, ap;
} rlx_nchwc_ir_ops;

/* floats of one run's band buffers */
static inline ptrdiff_t rlx_nchwc_ir_scratch_floats(const rlx_nchwc_ir_geom* g) {
    return (g->expand ? g->e * g->br * g->w : 0) + g->e * g->band * g->w_out;
}

/* koff_e[kb] = kb*H*W*8 (x's blocks), koff_p[kb] = kb*band*W_out*8 (xd's);
 * scratch: rlx_nchwc_ir_scratch_floats floats for this run. */
static void rlx_nchwc_ir_run(const float* x, ptrdiff_t x_len, const float* res, ptrdiff_t res_len, float* y,
                             ptrdiff_t y_len, float* scratch, ptrdiff_t scratch_len, const ptrdiff_t* koff_e,
                             const ptrdiff_t* koff_p, const rlx_nchwc_ir_ops* o, const rlx_nchwc_ir_geom* g,
                             ptrdiff_t i0, ptrdiff_t i1) {
    const int level = rlx_simd_level();
    const ptrdiff_t H = g->h, W = g->w, s = g->s, wo = g->w_out, ho = g->h_out, B = g->band, br = g->br;
    const ptrdiff_t eb = g->e / 8, nbands = (ho + B - 1) / B;
    const int K = g->k;
    const ptrdiff_t pad = K / 2;
    const ptrdiff_t xe_floats = g->expand ? g->e * br * W : 0;
    float* xe = scratch;
    float* xd = scratch + xe_floats;
    ptrdiff_t prev_img = -1, prev_band = -1, prev_hi = -1;
    (void)x_len;
    (void)y_len;
    (void)res_len;
    (void)scratch_len;
    RLX_CHECK_RANGE(0, rlx_nchwc_ir_scratch_floats(g), scratch_len, "nchwc inverted residual scratch");
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t img = item / nbands, bi = item % nbands;
        const ptrdiff_t o0 = bi * B, o1 = o0 + B < ho ? o0 + B : ho;
        const ptrdiff_t lo = o0 * s - pad > 0 ? o0 * s - pad : 0;
        const ptrdiff_t hi = (o1 - 1) * s - pad + K - 1 < H - 1 ? (o1 - 1) * s - pad + K - 1 : H - 1;
        const float* xi = x + img * g->c * H * W;
        RLX_CHECK_RANGE(img * g->c * H * W, (img + 1) * g->c * H * W, x_len, "nchwc inverted residual x");
        RLX_CHECK_RANGE(img * g->m * ho * wo, (img + 1) * g->m * ho * wo, y_len, "nchwc inverted residual y");
        if (res)
            RLX_CHECK_RANGE(img * g->m * ho * wo, (img + 1) * g->m * ho * wo, res_len,
                            "nchwc inverted residual residual");
        if (g->expand) {
            /* rows lo..prev_hi are still in the ring from the previous band */
            ptrdiff_t start = img == prev_img && bi == prev_band + 1 ? prev_hi + 1 : lo;
            while (start <= hi) {
                /* the ring's slots run on from start % br to its end at most */
                const ptrdiff_t slot = start % br;
                const ptrdiff_t cnt = hi - start + 1 < br - slot ? hi - start + 1 : br - slot;
                rlx_nchwc_1x1_span(level, 0, g->c, xi + start * W * 8, o->we, g->c, g->e, br * W * 8, 0, cnt * W, 0,
                                   (g->e + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC, koff_e, xe + slot * W * 8, o->be, NULL,
                                   &o->ae, NULL);
                start += cnt;
            }
            prev_img = img;
            prev_band = bi;
            prev_hi = hi;
        }
        for (ptrdiff_t cb = 0; cb < eb; ++cb)
            for (ptrdiff_t oh = o0; oh < o1; ++oh) {
                const float* rows[RLX_NCHWC_DW_MAX_K];
                int valid[RLX_NCHWC_DW_MAX_K];
                for (int kh = 0; kh < K; ++kh) {
                    const ptrdiff_t ih = oh * s - pad + kh;
                    valid[kh] = ih >= 0 && ih < H;
                    rows[kh] = valid[kh] ? (g->expand ? xe + (cb * br + ih % br) * W * 8
                                                      : xi + (cb * H + ih) * W * 8)
                                         : xi;
                }
                rlx_nchwc_dw_row(level, rows, valid, o->wd + cb * K * K * 8, o->bd ? o->bd + cb * 8 : NULL, NULL,
                                 xd + (cb * B + oh - o0) * wo * 8, s, pad, W, wo, &o->ad, K);
            }
        {
            const ptrdiff_t yo = img * g->m * ho * wo + o0 * wo * 8;
            rlx_nchwc_1x1_span(level, 0, g->e, xd, o->wp, g->e, g->m, ho * wo * 8, 0, (o1 - o0) * wo, 0,
                               (g->m + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC, koff_p, y + yo, o->bp, res ? res + yo : NULL,
                               &o->ap, NULL);
        }
    }
}

/* ---- window pools (2-D max / avg) --------------------------------------
 * On the blocked layout a window pool is 8 channels per vector: every tap is
 * one load of 8 consecutive floats, with no deinterleaving of strided
 * windows.  Work items: output rows of one block, r = (n * h_out + oh) *
 * C/8 + cb ("bands": a run of items is a band of rows of every block).  Each
 * output takes its window's in-bounds taps in (kh, kw) order:
 *   max: m = v when v > m or v is NaN (a NaN anywhere gives NaN), from -inf;
 *   avg: the float sum in tap order, divided by divisor_override, or by the
 *        taps inside [lo, hi) per axis (the input, or with count_include_pad
 *        the padded input; ceil-mode overhang never counts). */
typedef struct {
    ptrdiff_t cb, h, w, h_out, w_out, kh, kw, sh, sw, ph, pw, dh, dw;   /* cb: blocks per image */
    ptrdiff_t lo_h, hi_h, lo_w, hi_w;      /* the divisor's range per axis */
    ptrdiff_t divisor_override;            /* > 0: the divisor */
    int is_max;
} rlx_nchwc_pool_geom;

/* taps t in [0, k) with lo <= start + t*d < hi, as [*t0, *t1) */
static inline void rlx_nchwc_pool_taps(ptrdiff_t start, ptrdiff_t d, ptrdiff_t k, ptrdiff_t lo, ptrdiff_t hi,
                                       ptrdiff_t* t0, ptrdiff_t* t1) {
    ptrdiff_t a = lo - start, b = hi - start;
    a = a > 0 ? (a + d - 1) / d : 0;
    b = b > 0 ? (b - 1) / d + 1 : 0;
    if (b > k) b = k;
    if (a > b) a = b;
    *t0 = a;
    *t1 = b;
}

static inline float rlx_nchwc_pool_divisor(const rlx_nchwc_pool_geom* g, ptrdiff_t oh, ptrdiff_t ow) {
    if (g->divisor_override > 0) return (float)g->divisor_override;
    ptrdiff_t i0, i1, j0, j1;
    rlx_nchwc_pool_taps(oh * g->sh - g->ph, g->dh, g->kh, g->lo_h, g->hi_h, &i0, &i1);
    rlx_nchwc_pool_taps(ow * g->sw - g->pw, g->dw, g->kw, g->lo_w, g->hi_w, &j0, &j1);
    return (float)((i1 - i0) * (j1 - j0));
}

static void rlx_nchwc_pool_row_base(const float* xp, float* yr, const rlx_nchwc_pool_geom* g, ptrdiff_t oh) {
    ptrdiff_t i0, i1, j0, j1;
    const ptrdiff_t sh0 = oh * g->sh - g->ph;
    rlx_nchwc_pool_taps(sh0, g->dh, g->kh, 0, g->h, &i0, &i1);
    for (ptrdiff_t ow = 0; ow < g->w_out; ++ow) {
        const ptrdiff_t sw0 = ow * g->sw - g->pw;
        rlx_nchwc_pool_taps(sw0, g->dw, g->kw, 0, g->w, &j0, &j1);
        const float div = g->is_max ? 1.0f : rlx_nchwc_pool_divisor(g, oh, ow);
        for (int c = 0; c < 8; ++c) {
            float m = g->is_max ? -INFINITY : 0.0f;
            for (ptrdiff_t i = i0; i < i1; ++i)
                for (ptrdiff_t j = j0; j < j1; ++j) {
                    const float v = xp[((sh0 + i * g->dh) * g->w + sw0 + j * g->dw) * 8 + c];
                    if (g->is_max) m = (v > m || v != v) ? v : m;
                    else m = m + v;
                }
            yr[ow * 8 + c] = g->is_max ? m : m / div;
        }
    }
}

#if RLX_X86_DISPATCH
/* the max rule on 8 lanes: v when v > m or v is NaN (m when m is NaN) */
RLX_INLINE_AVX2 __m256 rlx_nchwc_max8(__m256 m, __m256 v) {
    return _mm256_blendv_ps(_mm256_max_ps(v, m), v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

/* Four outputs of a row at once, ow .. ow + 3, whose column windows are all
 * inside the input: four independent chains of max (or add) where one
 * output's chain is latency bound (a max and a blend per tap).  Each output
 * takes its taps in the single-output loop's order, so the bits are its. */
#define RLX_POOL4_TAPS(OP_)                                                      \
    for (ptrdiff_t i = i0; i < i1; ++i, x0 += rstep) {                           \
        const float* xr = x0;                                                    \
        for (ptrdiff_t j = 0; j < g->kw; ++j, xr += cstep) {                     \
            m0 = OP_(m0, _mm256_loadu_ps(xr));                                   \
            m1 = OP_(m1, _mm256_loadu_ps(xr + ostep));                           \
            m2 = OP_(m2, _mm256_loadu_ps(xr + 2 * ostep));                       \
            m3 = OP_(m3, _mm256_loadu_ps(xr + 3 * ostep));                       \
        }                                                                        \
    }

RLX_TARGET_AVX2 static void rlx_nchwc_pool_row_avx2(const float* xp, float* yr, const rlx_nchwc_pool_geom* g,
                                                    ptrdiff_t oh) {
    ptrdiff_t i0, i1, j0, j1;
    const ptrdiff_t sh0 = oh * g->sh - g->ph;
    rlx_nchwc_pool_taps(sh0, g->dh, g->kh, 0, g->h, &i0, &i1);
    const ptrdiff_t rstep = g->dh * g->w * 8, cstep = g->dw * 8, ostep = g->sw * 8;
    const ptrdiff_t span = (g->kw - 1) * g->dw;
    /* the input rows the next output row reads and this one does not, at
     * most 4: prefetched a few lines per group of outputs, one output row
     * ahead of their use */
    ptrdiff_t pf0 = sh0 + (g->kh - 1) * g->dh + 1, pf1 = sh0 + g->sh + (g->kh - 1) * g->dh + 1;
    if (pf0 < sh0 + g->sh) pf0 = sh0 + g->sh;
    if (pf0 < 0) pf0 = 0;
    if (pf1 > g->h) pf1 = g->h;
    if (pf1 > pf0 + 4) pf1 = pf0 + 4;
    for (ptrdiff_t ow = 0; ow < g->w_out;) {
        const ptrdiff_t sw0 = ow * g->sw - g->pw;
        if (ow + 4 <= g->w_out && sw0 >= 0 && sw0 + 3 * g->sw + span < g->w) {
            const float* x0 = xp + ((sh0 + i0 * g->dh) * g->w + sw0) * 8;
            for (ptrdiff_t r = pf0; r < pf1; ++r)
                for (ptrdiff_t o = 0; o < 4 * ostep; o += 16) __builtin_prefetch(xp + (r * g->w + sw0) * 8 + o, 0, 3);
            if (g->is_max) {
                __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
                RLX_POOL4_TAPS(rlx_nchwc_max8)
                _mm256_storeu_ps(yr + ow * 8, m0);
                _mm256_storeu_ps(yr + ow * 8 + 8, m1);
                _mm256_storeu_ps(yr + ow * 8 + 16, m2);
                _mm256_storeu_ps(yr + ow * 8 + 24, m3);
            } else {
                __m256 m0 = _mm256_setzero_ps(), m1 = m0, m2 = m0, m3 = m0;
                RLX_POOL4_TAPS(_mm256_add_ps)
                _mm256_storeu_ps(yr + ow * 8, _mm256_div_ps(m0, _mm256_set1_ps(rlx_nchwc_pool_divisor(g, oh, ow))));
                _mm256_storeu_ps(yr + ow * 8 + 8,
                                 _mm256_div_ps(m1, _mm256_set1_ps(rlx_nchwc_pool_divisor(g, oh, ow + 1))));
                _mm256_storeu_ps(yr + ow * 8 + 16,
                                 _mm256_div_ps(m2, _mm256_set1_ps(rlx_nchwc_pool_divisor(g, oh, ow + 2))));
                _mm256_storeu_ps(yr + ow * 8 + 24,
                                 _mm256_div_ps(m3, _mm256_set1_ps(rlx_nchwc_pool_divisor(g, oh, ow + 3))));
            }
            ow += 4;
            continue;
        }
        rlx_nchwc_pool_taps(sw0, g->dw, g->kw, 0, g->w, &j0, &j1);
        const float* x0 = xp + ((sh0 + i0 * g->dh) * g->w + sw0 + j0 * g->dw) * 8;
        if (g->is_max) {
            __m256 m = _mm256_set1_ps(-INFINITY);
            for (ptrdiff_t i = i0; i < i1; ++i, x0 += rstep) {
                const float* xr = x0;
                for (ptrdiff_t j = j0; j < j1; ++j, xr += cstep) m = rlx_nchwc_max8(m, _mm256_loadu_ps(xr));
            }
            _mm256_storeu_ps(yr + ow * 8, m);
        } else {
            __m256 m = _mm256_setzero_ps();
            for (ptrdiff_t i = i0; i < i1; ++i, x0 += rstep) {
                const float* xr = x0;
                for (ptrdiff_t j = j0; j < j1; ++j, xr += cstep) m = _mm256_add_ps(m, _mm256_loadu_ps(xr));
            }
            _mm256_storeu_ps(yr + ow * 8, _mm256_div_ps(m, _mm256_set1_ps(rlx_nchwc_pool_divisor(g, oh, ow))));
        }
        ++ow;
    }
}
#undef RLX_POOL4_TAPS
#endif

static void rlx_nchwc_pool_rows(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len,
                                const rlx_nchwc_pool_geom* g, ptrdiff_t r0, ptrdiff_t r1) {
    const int level = rlx_simd_level();
    const ptrdiff_t plane_in = g->h * g->w * 8, row_out = g->w_out * 8, per_img = g->h_out * g->cb;
    (void)level;
    if (r0 >= r1) return;
    /* The items [r0, r1) are counted row after row, the blocks within a row
     * (see above); they run block after block, down the block's rows, so
     * that the input is read plane by plane, top to bottom, in one long
     * stream the hardware prefetchers follow (row after row they hop to
     * another plane every few KiB: latency bound on the input's loads).
     * Each output is computed as before, so the order changes no bits. */
    for (ptrdiff_t img = r0 / per_img; img * per_img < r1; ++img) {
        const ptrdiff_t a = r0 > img * per_img ? r0 - img * per_img : 0;
        const ptrdiff_t b = r1 < (img + 1) * per_img ? r1 - img * per_img : per_img;
        for (ptrdiff_t c = 0; c < g->cb; ++c) {
            /* rows oh of block c whose item oh * cb + c lies in [a, b) */
            const ptrdiff_t oh0 = a > c ? (a - c + g->cb - 1) / g->cb : 0;
            const ptrdiff_t oh1 = b > c ? (b - c + g->cb - 1) / g->cb : 0;
            const ptrdiff_t blk = img * g->cb + c;
            RLX_CHECK_RANGE(blk * plane_in, (blk + 1) * plane_in, x_len, "nchwc pool x");
            for (ptrdiff_t oh = oh0; oh < oh1; ++oh) {
                const ptrdiff_t ro = blk * g->h_out + oh;
                RLX_CHECK_RANGE(ro * row_out, (ro + 1) * row_out, y_len, "nchwc pool y");
#if RLX_X86_DISPATCH
                if (level) {
                    rlx_nchwc_pool_row_avx2(x + blk * plane_in, y + ro * row_out, g, oh);
                    continue;
                }
#endif
                rlx_nchwc_pool_row_base(x + blk * plane_in, y + ro * row_out, g, oh);
            }
        }
    }
}

/* ---- global pools --------------------------------------------------------
 * Block items [i0, i1) (item = n * C/8 + cb) of x [N, C/8, P, 8] -> y[item *
 * 8 + j], which is y [N, C, 1, 1] in either layout.  max: the rule of the
 * window pools.  avg: channel j's sum, as rlx_sum_f64 sums a plane (float
 * within blocks, double across): blocks of RLX_NCHWC_GSUM_BLOCK pixels; in a
 * block, float accumulator a (of 4) sums the pixels whose offset in the
 * block is a modulo 4, in order, from +0.0f; they fold as (f0 + f2) + (f1 +
 * f3); the double sum of channel j += that; a block whose folded sums are
 * not all finite is summed again in double in the same order
 * (rlx_nchwc_gsum_block_f64).  Then y = sum / P in double. */
#define RLX_NCHWC_GSUM_BLOCK 64

/* s[j] += the block's sums of channel j in double, in the order above */
static void rlx_nchwc_gsum_block_f64(const float* xb, ptrdiff_t e, double* s) {
    double g[4][8];
    for (int a = 0; a < 4; ++a)
        for (int j = 0; j < 8; ++j) g[a][j] = 0.0;
    for (ptrdiff_t p = 0; p < e; ++p)
        for (int j = 0; j < 8; ++j) g[p % 4][j] += (double)xb[p * 8 + j];
    for (int j = 0; j < 8; ++j) s[j] += (g[0][j] + g[2][j]) + (g[1][j] + g[3][j]);
}

static void rlx_nchwc_gsum_base(const float* xb, ptrdiff_t P, double* s) {
    for (int j = 0; j < 8; ++j) s[j] = 0.0;
    for (ptrdiff_t b = 0; b < P; b += RLX_NCHWC_GSUM_BLOCK) {
        const ptrdiff_t e = P - b < RLX_NCHWC_GSUM_BLOCK ? P - b : RLX_NCHWC_GSUM_BLOCK;
        const float* xp = xb + b * 8;
        float f[4][8], t[8];
        int bad = 0;
        for (int a = 0; a < 4; ++a)
            for (int j = 0; j < 8; ++j) f[a][j] = 0.0f;
        for (ptrdiff_t p = 0; p < e; ++p)
            for (int j = 0; j < 8; ++j) f[p % 4][j] += xp[p * 8 + j];
        for (int j = 0; j < 8; ++j) {
            t[j] = (f[0][j] + f[2][j]) + (f[1][j] + f[3][j]);
            bad |= !(t[j] - t[j] == 0.0f);
        }
        if (bad) rlx_nchwc_gsum_block_f64(xp, e, s);
        else for (int j = 0; j < 8; ++j) s[j] += (double)t[j];
    }
}

#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_nchwc_global_avx2(const float* xb, float* yb, ptrdiff_t P, int is_max) {
    if (is_max) {
        __m256 m = _mm256_set1_ps(-INFINITY);
        for (ptrdiff_t p = 0; p < P; ++p) m = rlx_nchwc_max8(m, _mm256_loadu_ps(xb + p * 8));
        _mm256_storeu_ps(yb, m);
        return;
    }
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (ptrdiff_t b = 0; b < P; b += RLX_NCHWC_GSUM_BLOCK) {
        const ptrdiff_t e = P - b < RLX_NCHWC_GSUM_BLOCK ? P - b : RLX_NCHWC_GSUM_BLOCK;
        const float* xp = xb + b * 8;
        __m256 f0 = _mm256_setzero_ps(), f1 = f0, f2 = f0, f3 = f0;
        ptrdiff_t p = 0;
        for (; p + 4 <= e; p += 4) {
            f0 = _mm256_add_ps(f0, _mm256_loadu_ps(xp + p * 8));
            f1 = _mm256_add_ps(f1, _mm256_loadu_ps(xp + p * 8 + 8));
            f2 = _mm256_add_ps(f2, _mm256_loadu_ps(xp + p * 8 + 16));
            f3 = _mm256_add_ps(f3, _mm256_loadu_ps(xp + p * 8 + 24));
        }
        if (p < e) f0 = _mm256_add_ps(f0, _mm256_loadu_ps(xp + p * 8));
        if (p + 1 < e) f1 = _mm256_add_ps(f1, _mm256_loadu_ps(xp + p * 8 + 8));
        if (p + 2 < e) f2 = _mm256_add_ps(f2, _mm256_loadu_ps(xp + p * 8 + 16));
        const __m256 t = _mm256_add_ps(_mm256_add_ps(f0, f2), _mm256_add_ps(f1, f3));
        const __m256 ok = _mm256_cmp_ps(_mm256_sub_ps(t, t), _mm256_setzero_ps(), _CMP_EQ_OQ);
        if (__builtin_expect(_mm256_movemask_ps(ok) != 0xff, 0)) {
            double s[8];
            _mm256_storeu_pd(s, lo);
            _mm256_storeu_pd(s + 4, hi);
            rlx_nchwc_gsum_block_f64(xp, e, s);
            lo = _mm256_loadu_pd(s);
            hi = _mm256_loadu_pd(s + 4);
            continue;
        }
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(t, 1)));
    }
    const __m256d dp = _mm256_set1_pd((double)P);
    const __m128 l = _mm256_cvtpd_ps(_mm256_div_pd(lo, dp)), h = _mm256_cvtpd_ps(_mm256_div_pd(hi, dp));
    _mm256_storeu_ps(yb, _mm256_insertf128_ps(_mm256_castps128_ps256(l), h, 1));
}
#endif

static void rlx_nchwc_global(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len, ptrdiff_t P, int is_max,
                             ptrdiff_t i0, ptrdiff_t i1) {
    const int level = rlx_simd_level();
    (void)level;
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const float* xb = x + item * P * 8;
        float* yb = y + item * 8;
        RLX_CHECK_RANGE(item * P * 8, (item + 1) * P * 8, x_len, "nchwc global pool x");
        RLX_CHECK_RANGE(item * 8, item * 8 + 8, y_len, "nchwc global pool y");
#if RLX_X86_DISPATCH
        if (level) {
            rlx_nchwc_global_avx2(xb, yb, P, is_max);
            continue;
        }
#endif
        if (is_max) {
            for (int j = 0; j < 8; ++j) {
                float m = -INFINITY;
                for (ptrdiff_t p = 0; p < P; ++p) {
                    const float v = xb[p * 8 + j];
                    m = (v > m || v != v) ? v : m;
                }
                yb[j] = m;
            }
        } else {
            double s[8];
            rlx_nchwc_gsum_base(xb, P, s);
            for (int j = 0; j < 8; ++j) yb[j] = (float)(s[j] / (double)P);
        }
    }
}

#endif
