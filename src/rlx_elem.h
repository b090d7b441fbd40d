/* The training elementwise ops (relu, its backward, add) as explicit 8-lane
 * AVX2 loops, with the portable loop as the baseline variant: the same
 * arithmetic and bits (relu and its backward are selects, add one rounding).
 * The typed Cython loops they replace ran 1.1-1.6x slower on one thread
 * (6.4 MB operands).  Below them, the blocked layout's per-channel binary op
 * (rlx_chan_span), which inference graphs use. */
#ifndef RLX_ELEM_H
#define RLX_ELEM_H
#include "rlx_simd.h"

enum { RLX_ELEM_RELU = 0, RLX_ELEM_RELU_BACKWARD = 1, RLX_ELEM_ADD = 2 };

/* relu: a <= 0 ? 0 : a (NaN stays NaN); relu backward: b <= 0 ? 0 : a (a = dy, b = relu output); add: a + b */
static inline float rlx_elem_one(int op, float a, float b) {
    if (op == RLX_ELEM_RELU) return a <= 0.0f ? 0.0f : a;
    if (op == RLX_ELEM_RELU_BACKWARD) return b <= 0.0f ? 0.0f : a;
    return a + b;
}

#if RLX_X86_DISPATCH
RLX_INLINE_AVX2 __m256 rlx_elem_op8(const int op, __m256 a, __m256 b) {
    const __m256 z = _mm256_setzero_ps();
    /* the compare is false for NaN, so a NaN a passes through, as in the scalar select */
    if (op == RLX_ELEM_RELU) return _mm256_andnot_ps(_mm256_cmp_ps(a, z, _CMP_LE_OQ), a);
    if (op == RLX_ELEM_RELU_BACKWARD) return _mm256_andnot_ps(_mm256_cmp_ps(b, z, _CMP_LE_OQ), a);
    return _mm256_add_ps(a, b);
}

RLX_INLINE_AVX2 void rlx_elem_body(const int op, const float* a, const float* b, float* y, ptrdiff_t n) {
    ptrdiff_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(y + i, rlx_elem_op8(op, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
        _mm256_storeu_ps(y + i + 8, rlx_elem_op8(op, _mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8)));
    }
    for (; i < n; ++i) y[i] = rlx_elem_one(op, a[i], b[i]);
}

RLX_TARGET_AVX2 static void rlx_elem_span_avx2(int op, const float* a, const float* b, float* y, ptrdiff_t n) {
    switch (op) {
    case RLX_ELEM_RELU: rlx_elem_body(RLX_ELEM_RELU, a, b, y, n); return;
    case RLX_ELEM_RELU_BACKWARD: rlx_elem_body(RLX_ELEM_RELU_BACKWARD, a, b, y, n); return;
    default: rlx_elem_body(RLX_ELEM_ADD, a, b, y, n); return;
    }
}
#endif

/* y[0, n) = op(a, b) (b unread by relu, which may pass a) */
static void rlx_elem_span(int op, const float* a, const float* b, float* y, ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_elem_span_avx2(op, a, b, y, n);
        return;
    }
#endif
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = rlx_elem_one(op, a[i], b[i]);
}

/* y[0, n) = a[0, n) + s: the bias add's plane (one rounding per element, as
 * the scalar loop) */
#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_elem_add_scalar_avx2(const float* a, float s, float* y, ptrdiff_t n) {
    const __m256 v = _mm256_set1_ps(s);
    ptrdiff_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), v));
        _mm256_storeu_ps(y + i + 8, _mm256_add_ps(_mm256_loadu_ps(a + i + 8), v));
        _mm256_storeu_ps(y + i + 16, _mm256_add_ps(_mm256_loadu_ps(a + i + 16), v));
        _mm256_storeu_ps(y + i + 24, _mm256_add_ps(_mm256_loadu_ps(a + i + 24), v));
    }
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), v));
    for (; i < n; ++i) y[i] = a[i] + s;
}
#endif

static void rlx_elem_add_scalar(const float* a, float s, float* y, ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_elem_add_scalar_avx2(a, s, y, n);
        return;
    }
#endif
    for (ptrdiff_t i = 0; i < n; ++i) y[i] = a[i] + s;
}

/* The blocked layout's per-channel operand (squeeze-excitation's gate
 * [N, C, 1, 1] times a blocked [N, C/8, H, W, 8] map): over npix pixels of
 * one 8-channel block, y[p][c] = x[p][c] (op) g[c], or g[c] (op) x[p][c]
 * when x_first is 0.  The codes are _elementwise.pyx's binary ones.  Each
 * element is one IEEE operation, so every variant gives the same bits; add
 * and mul commute exactly, so only sub and div look at the order.  y may be x.
 * RLX_CHAN_AFFINE (inference batch norm): y = x * g[c] + h[c], a multiply
 * then an add, rounded each, as the NCHW kernel (_elementwise.pyx
 * ChannelAffineLaunch); h is read by it (and RLX_CHAN_AFFINE_RELU) alone.
 * RLX_CHAN_AFFINE_RELU: the same, then relu as the relu kernel's select
 * (v <= 0 ? 0 : v, a NaN passes), so a batch norm with its relu fused
 * (DenseNet's norm-relu before each conv) gives the unfused pair's bits. */
enum { RLX_CHAN_ADD = 0, RLX_CHAN_SUB = 1, RLX_CHAN_MUL = 2, RLX_CHAN_DIV = 3, RLX_CHAN_AFFINE = 4,
       RLX_CHAN_AFFINE_RELU = 5 };

static inline float rlx_chan_one(int op, float a, float b) {
    if (op == RLX_CHAN_ADD) return a + b;
    if (op == RLX_CHAN_SUB) return a - b;
    if (op == RLX_CHAN_MUL) return a * b;
    return a / b;
}

#if RLX_X86_DISPATCH
RLX_INLINE_AVX2 __m256 rlx_chan_op8(const int op, __m256 a, __m256 b) {
    if (op == RLX_CHAN_ADD) return _mm256_add_ps(a, b);
    if (op == RLX_CHAN_SUB) return _mm256_sub_ps(a, b);
    if (op == RLX_CHAN_MUL) return _mm256_mul_ps(a, b);
    return _mm256_div_ps(a, b);
}

RLX_INLINE_AVX2 void rlx_chan_affine_body(const float* x, const float* g, const float* h, float* y,
                                          ptrdiff_t npix, const int relu) {
    const __m256 gv = _mm256_loadu_ps(g), hv = _mm256_loadu_ps(h);
    for (ptrdiff_t p = 0; p < npix; ++p) {
        __m256 m = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * p), gv);
        /* the product stays rounded: without this the compiler may fuse
         * the multiply and the add into one FMA (one rounding) */
        __asm__("" : "+x"(m));
        __m256 v = _mm256_add_ps(m, hv);
        if (relu) v = rlx_elem_op8(RLX_ELEM_RELU, v, v);     /* the relu kernel's select */
        _mm256_storeu_ps(y + 8 * p, v);
    }
}

RLX_INLINE_AVX2 void rlx_chan_body(const int op, const int x_first, const float* x, const float* g, float* y,
                                   ptrdiff_t npix) {
    const __m256 gv = _mm256_loadu_ps(g);
    ptrdiff_t p = 0;
    for (; p + 2 <= npix; p += 2) {
        const __m256 a = _mm256_loadu_ps(x + 8 * p), b = _mm256_loadu_ps(x + 8 * p + 8);
        _mm256_storeu_ps(y + 8 * p, x_first ? rlx_chan_op8(op, a, gv) : rlx_chan_op8(op, gv, a));
        _mm256_storeu_ps(y + 8 * p + 8, x_first ? rlx_chan_op8(op, b, gv) : rlx_chan_op8(op, gv, b));
    }
    if (p < npix) {
        const __m256 a = _mm256_loadu_ps(x + 8 * p);
        _mm256_storeu_ps(y + 8 * p, x_first ? rlx_chan_op8(op, a, gv) : rlx_chan_op8(op, gv, a));
    }
}

RLX_TARGET_AVX2 static void rlx_chan_span_avx2(int op, int x_first, const float* x, const float* g, const float* h,
                                               float* y, ptrdiff_t npix) {
    switch (op) {
    case RLX_CHAN_AFFINE: rlx_chan_affine_body(x, g, h, y, npix, 0); return;
    case RLX_CHAN_AFFINE_RELU: rlx_chan_affine_body(x, g, h, y, npix, 1); return;
    case RLX_CHAN_ADD: rlx_chan_body(RLX_CHAN_ADD, 1, x, g, y, npix); return;
    case RLX_CHAN_MUL: rlx_chan_body(RLX_CHAN_MUL, 1, x, g, y, npix); return;
    case RLX_CHAN_SUB:
        if (x_first) rlx_chan_body(RLX_CHAN_SUB, 1, x, g, y, npix);
        else rlx_chan_body(RLX_CHAN_SUB, 0, x, g, y, npix);
        return;
    default:
        if (x_first) rlx_chan_body(RLX_CHAN_DIV, 1, x, g, y, npix);
        else rlx_chan_body(RLX_CHAN_DIV, 0, x, g, y, npix);
        return;
    }
}
#endif

/* y[p*8 + c] = x[p*8 + c] (op) g[c] (x_first) or g[c] (op) x[p*8 + c], p in [0, npix);
 * RLX_CHAN_AFFINE: x[p*8 + c] * g[c] + h[c]; RLX_CHAN_AFFINE_RELU: its relu */
static void rlx_chan_span(int op, int x_first, const float* x, const float* g, const float* h, float* y,
                          ptrdiff_t npix) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_chan_span_avx2(op, x_first, x, g, h, y, npix);
        return;
    }
#endif
    if (op == RLX_CHAN_AFFINE) {
        /* written as the NCHW kernel's loop, so the compiler treats both alike */
        for (ptrdiff_t p = 0; p < npix; ++p)
            for (int c = 0; c < 8; ++c) y[8 * p + c] = x[8 * p + c] * g[c] + h[c];
        return;
    }
    if (op == RLX_CHAN_AFFINE_RELU) {
        for (ptrdiff_t p = 0; p < npix; ++p)
            for (int c = 0; c < 8; ++c) {
                const float v = x[8 * p + c] * g[c] + h[c];
                y[8 * p + c] = rlx_elem_one(RLX_ELEM_RELU, v, 0.0f);
            }
        return;
    }
    for (ptrdiff_t p = 0; p < npix; ++p)
        for (int c = 0; c < 8; ++c)
            y[8 * p + c] = x_first ? rlx_chan_one(op, x[8 * p + c], g[c]) : rlx_chan_one(op, g[c], x[8 * p + c]);
}
#endif
