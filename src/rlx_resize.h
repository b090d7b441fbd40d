/* Nearest 2x upsampling of NCHW planes: input row r (= plane * h + i) of w
 * pixels becomes output rows 2r and 2r + 1 of 2w pixels, each pixel twice.
 * Plain copies, so every variant gives the same bits.  The AVX2 variant
 * doubles 8 pixels in registers (unpack, then a lane swap) and stores them
 * to both output rows, where the Cython loop wrote the first row a float at
 * a time and memcpy'd it to the second. */
#ifndef RLX_RESIZE_H
#define RLX_RESIZE_H
#include "rlx_simd.h"

RLX_INLINE void rlx_up2x_tail(const float* restrict xr, float* restrict y0, float* restrict y1, ptrdiff_t j,
                              ptrdiff_t w) {
    for (; j < w; ++j) {
        const float v = xr[j];
        y0[2 * j] = v;
        y0[2 * j + 1] = v;
        y1[2 * j] = v;
        y1[2 * j + 1] = v;
    }
}

static void rlx_up2x_rows_base(const float* x, float* y, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t w) {
    for (ptrdiff_t r = r0; r < r1; ++r)
        rlx_up2x_tail(x + r * w, y + 4 * r * w, y + 4 * r * w + 2 * w, 0, w);
}

#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_up2x_rows_avx2(const float* x, float* y, ptrdiff_t r0, ptrdiff_t r1, ptrdiff_t w) {
    for (ptrdiff_t r = r0; r < r1; ++r) {
        const float* xr = x + r * w;
        float* y0 = y + 4 * r * w;
        float* y1 = y0 + 2 * w;
        ptrdiff_t j = 0;
        for (; j + 8 <= w; j += 8) {
            const __m256 v = _mm256_loadu_ps(xr + j);
            const __m256 lo = _mm256_unpacklo_ps(v, v), hi = _mm256_unpackhi_ps(v, v);
            const __m256 a = _mm256_permute2f128_ps(lo, hi, 0x20), b = _mm256_permute2f128_ps(lo, hi, 0x31);
            _mm256_storeu_ps(y0 + 2 * j, a);
            _mm256_storeu_ps(y0 + 2 * j + 8, b);
            _mm256_storeu_ps(y1 + 2 * j, a);
            _mm256_storeu_ps(y1 + 2 * j + 8, b);
        }
        if (j + 4 <= w) {
            const __m128 v = _mm_loadu_ps(xr + j);
            const __m128 a = _mm_unpacklo_ps(v, v), b = _mm_unpackhi_ps(v, v);
            _mm_storeu_ps(y0 + 2 * j, a);
            _mm_storeu_ps(y0 + 2 * j + 4, b);
            _mm_storeu_ps(y1 + 2 * j, a);
            _mm_storeu_ps(y1 + 2 * j + 4, b);
            j += 4;
        }
        rlx_up2x_tail(xr, y0, y1, j, w);
    }
}
#endif

/* Input rows [r0, r1) of x (x_len floats) into y (y_len floats). */
static void rlx_up2x_rows(const float* x, ptrdiff_t x_len, float* y, ptrdiff_t y_len, ptrdiff_t r0, ptrdiff_t r1,
                          ptrdiff_t w) {
    RLX_CHECK_RANGE(r0 * w, r1 * w, x_len, "upsample 2x x");
    RLX_CHECK_RANGE(4 * r0 * w, 4 * r1 * w, y_len, "upsample 2x y");
    (void)x_len;
    (void)y_len;
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_up2x_rows_avx2(x, y, r0, r1, w);
        return;
    }
#endif
    rlx_up2x_rows_base(x, y, r0, r1, w);
}

/* One output row of the nearest gather: yd[i] = xs[tw[i]] for i < n (xs: an
 * input row of w_in floats).  The first nb blocks of 8 outputs were checked
 * at bind time to read 8 consecutive inputs from tw[8b] on (0 <= tw[8b + k]
 * - tw[8b] < 8, tw[8b] + 8 <= w_in), as an upscale's are: the AVX2 variant
 * loads those 8 and permutes them into place; the rest, and the portable
 * variant, go one at a time.  Copies only, so the same bits. */
static void rlx_gather_row_base(const float* xs, float* yd, const int32_t* tw, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; ++i) yd[i] = xs[tw[i]];
}

#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_gather_row_avx2(const float* xs, ptrdiff_t w_in, float* yd, const int32_t* tw,
                                                ptrdiff_t nb, ptrdiff_t n) {
    (void)w_in;
    for (ptrdiff_t b = 0; b < nb; ++b) {
        const int32_t* t = tw + 8 * b;
        const __m256i idx = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i*)t), _mm256_set1_epi32(t[0]));
        RLX_CHECK_RANGE(t[0], t[0] + 8, w_in, "resize nearest row block");
        _mm256_storeu_ps(yd + 8 * b, _mm256_permutevar8x32_ps(_mm256_loadu_ps(xs + t[0]), idx));
    }
    rlx_gather_row_base(xs, yd + 8 * nb, tw + 8 * nb, n - 8 * nb);
}
#endif

static void rlx_gather_row(const float* xs, ptrdiff_t w_in, float* yd, const int32_t* tw, ptrdiff_t nb,
                           ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_gather_row_avx2(xs, w_in, yd, tw, nb, n);
        return;
    }
#endif
    (void)w_in;
    (void)nb;
    rlx_gather_row_base(xs, yd, tw, n);
}
#endif
