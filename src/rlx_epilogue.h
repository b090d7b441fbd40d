/* Conv epilogue: y = act(y + bias[c] + residual), applied by every conv2d
 * algorithm to a span of output it has just written, while the span is still
 * in cache, instead of separate elementwise passes over the whole output.
 *
 * The activation formulas are the ones of the standalone elementwise kernels
 * (src/_elementwise.pyx, src/_train.pyx), in the same order of operations
 * (bias first, then the residual, then the activation), so a fused conv gives
 * the values of the unfused chain.  NaN stays NaN as there.
 *
 * The body is always-inline: called from a target("avx2,fma") function it is
 * compiled (and auto-vectorised) for AVX2; rlx_epilogue_span dispatches for
 * callers in plain code. */
#ifndef RLX_EPILOGUE_H
#define RLX_EPILOGUE_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

enum {
    RLX_ACT_NONE = 0,
    RLX_ACT_RELU = 1,          /* v <= 0 ? 0 : v */
    RLX_ACT_CLIP = 2,          /* min(max(v, alpha), beta) */
    RLX_ACT_LEAKY_RELU = 3,    /* v < 0 ? alpha v : v */
    RLX_ACT_SIGMOID = 4,       /* 1 / (1 + exp(-v)): rlx_sigmoidf */
    RLX_ACT_HARD_SIGMOID = 5,  /* clamp(alpha v + beta, 0, 1) */
    RLX_ACT_HARD_SWISH = 6,    /* v clamp(alpha v + beta, 0, 1) */
    RLX_ACT_TANH = 7,          /* tanh(v): rlx_tanhf */
    RLX_ACT_SILU = 8           /* v * rlx_sigmoidf(v) (SiLU, swish) */
};

/* sigmoid(v) = 1 / (1 + exp(-v)) in float32 within a few ulp, in a form the
 * compiler vectorises (no libm call, no branch): exp is evaluated at -v
 * clamped to [-87, 87], so it neither overflows nor underflows, and for
 * v < -87 (a true value under 1.65e-38, near the subnormal range) the result
 * is 0, so no result is subnormal and sigmoid(-inf) = 0 (silu(-inf) is then
 * -inf * 0 = NaN, as Sigmoid + Mul gives in ONNX Runtime and PyTorch).
 * exp(x) = 2^n p(r) with n = round(x / ln 2), r = x - n ln 2 in two parts
 * (Cody-Waite) and p the degree-6 Taylor polynomial, whose relative error on
 * |r| <= ln2/2 is under 2e-8.  Every step is an explicit fmaf or a plain
 * operation, so the portable and AVX2 builds round alike.  NaN gives NaN
 * (the clamps keep it: a comparison with NaN is false). */
static inline __attribute__((always_inline)) float rlx_sigmoidf(float v) {
    const float x0 = -v;
    float x = x0 < -87.0f ? -87.0f : x0;
    x = x > 87.0f ? 87.0f : x;
    /* round to nearest by the 1.5 * 2^23 shifter; t's low bits hold n */
    const float shifter = 12582912.0f;
    const float t = fmaf(x, 1.44269504088896341f, shifter);
    const float n = t - shifter;
    float r = fmaf(n, -0.693145751953125f, x);          /* ln 2 high part (exact product) */
    r = fmaf(n, -1.428606765330187e-06f, r);            /* ln 2 low part */
    float p = 1.0f / 720.0f;
    p = fmaf(p, r, 1.0f / 120.0f);
    p = fmaf(p, r, 1.0f / 24.0f);
    p = fmaf(p, r, 1.0f / 6.0f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    union { float f; unsigned u; } tb, sb;
    tb.f = t;
    sb.u = (tb.u - 0x4B400000u + 127u) << 23;           /* 2^n: t's bits are 0x4B400000 + n */
    const float sig = 1.0f / fmaf(p, sb.f, 1.0f);
    return x0 > 87.0f ? 0.0f : sig;
}

/* tanh(v) in float32 within 1.3 ulp (relative error under 1e-7), branch
 * free, in the style of rlx_sigmoidf so the portable and AVX2 variants round
 * alike (every multiply-add an explicit fmaf, no other product feeds a sum):
 *   - |v| < 1: v + v^3 P(v^2), P of degree 7 fitted to (tanh(x) - x) / x^3
 *     for the least maximum relative error on [0, 1];
 *   - |v| >= 1: 1 - 2e / (1 + e) with e = exp(-2|v|), |v| clamped to 10
 *     (tanh(x) rounds to 1 from 9.011 on), exp by rlx_sigmoidf's reduction
 *     and polynomial;
 * then v's sign (so tanh(-0) = -0).  NaN gives NaN (it takes the first
 * branch: a comparison with NaN is false), +-inf gives +-1. */
static inline __attribute__((always_inline)) float rlx_tanhf(float v) {
    const float a0 = fabsf(v);
    const float x2 = a0 * a0;
    float p = 0.00012147067172918469f;
    p = fmaf(p, x2, -0.000841137021780014f);
    p = fmaf(p, x2, 0.0030785941053181887f);
    p = fmaf(p, x2, -0.008595114573836327f);
    p = fmaf(p, x2, 0.02178473025560379f);
    p = fmaf(p, x2, -0.05395309999585152f);
    p = fmaf(p, x2, 0.1333319991827011f);
    p = fmaf(p, x2, -0.333333283662796f);
    const float small = fmaf(p * x2, a0, a0);
    const float a = 10.0f < a0 ? 10.0f : a0;
    const float x = -2.0f * a;                              /* in [-20, 0]: no clamp needed */
    const float shifter = 12582912.0f;
    const float t = fmaf(x, 1.44269504088896341f, shifter);
    const float n = t - shifter;
    float r = fmaf(n, -0.693145751953125f, x);
    r = fmaf(n, -1.428606765330187e-06f, r);
    float q = 1.0f / 720.0f;
    q = fmaf(q, r, 1.0f / 120.0f);
    q = fmaf(q, r, 1.0f / 24.0f);
    q = fmaf(q, r, 1.0f / 6.0f);
    q = fmaf(q, r, 0.5f);
    q = fmaf(q, r, 1.0f);
    q = fmaf(q, r, 1.0f);
    union { float f; unsigned u; } tb, sb;
    tb.f = t;
    sb.u = (tb.u - 0x4B400000u + 127u) << 23;
    const float e2 = 2.0f * (q * sb.f);                     /* 2 exp(-2a) */
    const float big = 1.0f - e2 / fmaf(q, sb.f, 1.0f);
    return copysignf(a0 >= 1.0f ? big : small, v);
}

typedef struct {
    int act;
    float alpha, beta;
    const float* res;          /* residual with y's layout, or NULL */
    ptrdiff_t res_len;         /* its length in floats (debug range checks) */
} rlx_epilogue;

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
/* rlx_sigmoidf's steps on one vector width, operation for operation (so bit
 * for bit): P is the intrinsics' prefix (_mm256, _mm512), SI the integer
 * vector's name in the casts (si256, si512), VT and VTI the vector types.
 * Declares x0 (-v) and sig (the sigmoid before the v < -87 select) in the
 * caller.  The compiler does not vectorise the scalar form's selects.
 * max_ps(a, b) = a > b ? a : b and min_ps(a, b) = a < b ? a : b keep a NaN b. */
#define RLX_SIGMOID_STEPS(P, SI, VT, VTI, v)                                                       \
    const VT x0 = P##_sub_ps(P##_setzero_ps(), v);                                                 \
    VT x = P##_max_ps(P##_set1_ps(-87.0f), x0);                                                    \
    x = P##_min_ps(P##_set1_ps(87.0f), x);                                                         \
    const VT shifter = P##_set1_ps(12582912.0f);                                                   \
    const VT t = P##_fmadd_ps(x, P##_set1_ps(1.44269504088896341f), shifter);                      \
    const VT n = P##_sub_ps(t, shifter);                                                           \
    VT r = P##_fmadd_ps(n, P##_set1_ps(-0.693145751953125f), x);                                   \
    r = P##_fmadd_ps(n, P##_set1_ps(-1.428606765330187e-06f), r);                                  \
    VT p = P##_set1_ps(1.0f / 720.0f);                                                             \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.0f / 120.0f));                                            \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.0f / 24.0f));                                             \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.0f / 6.0f));                                              \
    p = P##_fmadd_ps(p, r, P##_set1_ps(0.5f));                                                     \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.0f));                                                     \
    p = P##_fmadd_ps(p, r, P##_set1_ps(1.0f));                                                     \
    const VTI e = P##_slli_epi32(                                                                  \
        P##_add_epi32(P##_castps_##SI(t), P##_set1_epi32((int)(127u - 0x4B400000u))), 23);        \
    const VT one = P##_set1_ps(1.0f);                                                              \
    const VT sig = P##_div_ps(one, P##_fmadd_ps(p, P##_cast##SI##_ps(e), one));

/* rlx_sigmoidf on 8 lanes */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 rlx_sigmoid8(__m256 v) {
    RLX_SIGMOID_STEPS(_mm256, si256, __m256, __m256i, v)
    return _mm256_blendv_ps(sig, _mm256_setzero_ps(), _mm256_cmp_ps(x0, _mm256_set1_ps(87.0f), _CMP_GT_OQ));
}

/* ... on 16 lanes: half the instructions per lane where AVX-512 is there
 * (the vdivps is the same per lane) */
__attribute__((target("avx512f,avx512dq,avx512vl,avx2,fma"), always_inline)) static inline __m512 rlx_sigmoid16(
        __m512 v) {
    RLX_SIGMOID_STEPS(_mm512, si512, __m512, __m512i, v)
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x0, _mm512_set1_ps(87.0f), _CMP_GT_OQ), sig,
                                _mm512_setzero_ps());
}
#endif

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
/* rlx_tanhf on 8 lanes, operation for operation (so bit for bit). */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256 rlx_tanh8(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a0 = _mm256_andnot_ps(sign, v);
    const __m256 x2 = _mm256_mul_ps(a0, a0);
    __m256 p = _mm256_set1_ps(0.00012147067172918469f);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.000841137021780014f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.0030785941053181887f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.008595114573836327f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.02178473025560379f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.05395309999585152f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(0.1333319991827011f));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-0.333333283662796f));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), a0, a0);
    const __m256 a = _mm256_min_ps(_mm256_set1_ps(10.0f), a0);    /* 10 < a0 ? 10 : a0 */
    const __m256 x = _mm256_mul_ps(_mm256_set1_ps(-2.0f), a);
    const __m256 shifter = _mm256_set1_ps(12582912.0f);
    const __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), shifter);
    const __m256 n = _mm256_sub_ps(t, shifter);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693145751953125f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(-1.428606765330187e-06f), r);
    __m256 q = _mm256_set1_ps(1.0f / 720.0f);
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 120.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 24.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f / 6.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(0.5f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
    q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.0f));
    const __m256 s = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_castps_si256(t), _mm256_set1_epi32((int)(127u - 0x4B400000u))), 23));
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e2 = _mm256_mul_ps(_mm256_set1_ps(2.0f), _mm256_mul_ps(q, s));
    const __m256 big = _mm256_sub_ps(one, _mm256_div_ps(e2, _mm256_fmadd_ps(q, s, one)));
    const __m256 m = _mm256_blendv_ps(small, big, _mm256_cmp_ps(a0, one, _CMP_GE_OQ));
    return _mm256_or_ps(_mm256_andnot_ps(sign, m), _mm256_and_ps(sign, v));
}
#endif

/* y[i] = act(y[i] + b + res[i]) for i in [0, n); `off` is y's offset in the
 * whole output, which is also the residual's offset. */
static inline __attribute__((always_inline)) void rlx_epilogue_span_body(
        float* __restrict y, ptrdiff_t off, ptrdiff_t n, float b, const rlx_epilogue* e) {
    const float* __restrict r = e->res ? e->res + off : NULL;
    const float alpha = e->alpha, beta = e->beta;
    ptrdiff_t i;
    if (r) {
        for (i = 0; i < n; ++i) y[i] = (y[i] + b) + r[i];
    } else if (b != 0.0f) {
        for (i = 0; i < n; ++i) y[i] = y[i] + b;
    }
    switch (e->act) {
    case RLX_ACT_RELU:
        for (i = 0; i < n; ++i) { float v = y[i]; y[i] = v <= 0.0f ? 0.0f : v; }
        break;
    case RLX_ACT_CLIP:
        for (i = 0; i < n; ++i) {
            float v = y[i];
            v = v < alpha ? alpha : v;
            y[i] = v > beta ? beta : v;
        }
        break;
    case RLX_ACT_LEAKY_RELU:
        for (i = 0; i < n; ++i) { float v = y[i]; y[i] = v < 0.0f ? alpha * v : v; }
        break;
    case RLX_ACT_SIGMOID:
        for (i = 0; i < n; ++i) y[i] = rlx_sigmoidf(y[i]);
        break;
    case RLX_ACT_SILU:
        for (i = 0; i < n; ++i) { float v = y[i]; y[i] = v * rlx_sigmoidf(v); }
        break;
    case RLX_ACT_HARD_SIGMOID:
    case RLX_ACT_HARD_SWISH: {
        const int swish = e->act == RLX_ACT_HARD_SWISH;
        for (i = 0; i < n; ++i) {
            float v = y[i], h = alpha * v + beta;
            h = h < 0.0f ? 0.0f : h;
            h = h > 1.0f ? 1.0f : h;
            y[i] = swish ? v * h : h;
        }
        break;
    }
    case RLX_ACT_TANH:
        for (i = 0; i < n; ++i) y[i] = rlx_tanhf(y[i]);
        break;
    default:
        break;
    }
}

static void rlx_epilogue_span_base(float* y, ptrdiff_t off, ptrdiff_t n, float b, const rlx_epilogue* e) {
    rlx_epilogue_span_body(y, off, n, b, e);
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
__attribute__((target("avx2,fma")))
static void rlx_sigmoid_span_avx2(const float* x, float* y, ptrdiff_t n, int silu);

__attribute__((target("avx2,fma")))
static void rlx_epilogue_span_avx2(float* y, ptrdiff_t off, ptrdiff_t n, float b, const rlx_epilogue* e) {
    if (e->act == RLX_ACT_SIGMOID || e->act == RLX_ACT_SILU || e->act == RLX_ACT_TANH) {
        /* bias and residual as the body adds them, then the explicit 8-lane sigmoid or tanh */
        rlx_epilogue plain = *e;
        plain.act = RLX_ACT_NONE;
        rlx_epilogue_span_body(y, off, n, b, &plain);
        if (e->act == RLX_ACT_TANH) {
            ptrdiff_t i = 0;
            for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, rlx_tanh8(_mm256_loadu_ps(y + i)));
            for (; i < n; ++i) y[i] = rlx_tanhf(y[i]);
        } else {
            rlx_sigmoid_span_avx2(y, y, n, e->act == RLX_ACT_SILU);
        }
        return;
    }
    rlx_epilogue_span_body(y, off, n, b, e);
}
#define RLX_EPILOGUE_HAS_AVX2 1
#else
#define RLX_EPILOGUE_HAS_AVX2 0
#endif

/* rlx_epilogue_span_body for kernels inlined into both variants: avx2 (a
 * constant where the caller is instantiated) takes the explicit 8-lane
 * sigmoid, which the compiler does not derive from the scalar form. */
static inline __attribute__((always_inline)) void rlx_epilogue_span_in(float* y, ptrdiff_t off, ptrdiff_t n, float b,
                                                                       const rlx_epilogue* e, int avx2) {
#if RLX_EPILOGUE_HAS_AVX2
    if (avx2 && (e->act == RLX_ACT_SIGMOID || e->act == RLX_ACT_SILU || e->act == RLX_ACT_TANH)) {
        rlx_epilogue_span_avx2(y, off, n, b, e);
        return;
    }
#else
    (void)avx2;
#endif
    rlx_epilogue_span_body(y, off, n, b, e);
}

/* The span [off, off + n) of y (whose whole length is y_len), with the
 * per-channel bias b.  simd: 1 for the AVX2 variant (rlx_simd_level()). */
static inline void rlx_epilogue_span(float* y, ptrdiff_t y_len, ptrdiff_t off, ptrdiff_t n, float b,
                                     const rlx_epilogue* e, int simd) {
#if RLX_DEBUG_CHECKS
    if (off < 0 || off + n > y_len || (e->res && off + n > e->res_len)) {
        fprintf(stderr, "rlx_cpu: conv epilogue span [%td, %td) out of bounds (y %td, residual %td)\n",
                (ptrdiff_t)off, (ptrdiff_t)(off + n), (ptrdiff_t)y_len, (ptrdiff_t)e->res_len);
        abort();
    }
#else
    (void)y_len;
#endif
#if RLX_EPILOGUE_HAS_AVX2
    if (simd) { rlx_epilogue_span_avx2(y + off, off, n, b, e); return; }
#else
    (void)simd;
#endif
    rlx_epilogue_span_base(y + off, off, n, b, e);
}

/* y[i] = sigmoid(x[i]) (silu: x[i] * sigmoid(x[i])) for i < n, out of place
 * or in place (y == x): the standalone activations, the same arithmetic as
 * the conv epilogue's. */
static inline __attribute__((always_inline)) void rlx_sigmoid_span_body(const float* x, float* y, ptrdiff_t n,
                                                                        int silu) {
    if (silu)
        for (ptrdiff_t i = 0; i < n; ++i) { float v = x[i]; y[i] = v * rlx_sigmoidf(v); }
    else
        for (ptrdiff_t i = 0; i < n; ++i) y[i] = rlx_sigmoidf(x[i]);
}

static void rlx_sigmoid_span_base(const float* x, float* y, ptrdiff_t n, int silu) {
    rlx_sigmoid_span_body(x, y, n, silu);
}

#if RLX_EPILOGUE_HAS_AVX2
__attribute__((target("avx2,fma")))
static void rlx_sigmoid_span_avx2(const float* x, float* y, ptrdiff_t n, int silu) {
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 s = rlx_sigmoid8(v);
        _mm256_storeu_ps(y + i, silu ? _mm256_mul_ps(v, s) : s);
    }
    rlx_sigmoid_span_body(x + i, y + i, n - i, silu);
}
#endif

static inline void rlx_sigmoid_span(const float* x, float* y, ptrdiff_t n, int silu, int simd) {
#if RLX_EPILOGUE_HAS_AVX2
    if (simd) { rlx_sigmoid_span_avx2(x, y, n, silu); return; }
#else
    (void)simd;
#endif
    rlx_sigmoid_span_base(x, y, n, silu);
}

/* Rows shorter than this that lie end to end take a vector-form activation
 * (sigmoid, SiLU, tanh) as one span over all of them (rlx_epilogue_rows). */
#define RLX_EPILOGUE_JOIN_MAX_ROW 64

/* The epilogue on `rows` rows of n floats of y, row r at off + r * ld with
 * the bias ep_bias[r] (ep_bias NULL: none).  Short rows that lie end to end
 * (ld == n) with a sigmoid, SiLU or tanh take the bias and residual row by
 * row and then the activation as one span over all of them: the same
 * arithmetic as a span per row, but in 8-lane vectors rather than in the
 * scalar tail a row of fewer than 8 floats would leave (a 1x1 conv on 2x2
 * planes: 4 floats per output channel). */
static inline void rlx_epilogue_rows(float* y, ptrdiff_t y_len, ptrdiff_t off, ptrdiff_t ld, ptrdiff_t rows,
                                     ptrdiff_t n, const float* ep_bias, const rlx_epilogue* e, int simd) {
    ptrdiff_t r;
    if (simd && rows > 1 && ld == n && n < RLX_EPILOGUE_JOIN_MAX_ROW &&
            (e->act == RLX_ACT_SIGMOID || e->act == RLX_ACT_SILU || e->act == RLX_ACT_TANH)) {
        rlx_epilogue parts = *e, act = *e;
        parts.act = RLX_ACT_NONE;
        act.res = NULL;
        act.res_len = 0;
        if (ep_bias || e->res)
            for (r = 0; r < rows; ++r)
                rlx_epilogue_span(y, y_len, off + r * ld, n, ep_bias ? ep_bias[r] : 0.0f, &parts, simd);
        rlx_epilogue_span(y, y_len, off, rows * n, 0.0f, &act, simd);
        return;
    }
    for (r = 0; r < rows; ++r)
        rlx_epilogue_span(y, y_len, off + r * ld, n, ep_bias ? ep_bias[r] : 0.0f, e, simd);
}

/* Whether there is anything to do besides a bias (which some kernels add
 * themselves). */
static inline int rlx_epilogue_active(const rlx_epilogue* e) {
    return e->act != RLX_ACT_NONE || e->res != NULL;
}

#endif
