/* Conv backward weight on the "wide" grid (stride 1, rank <= 2), driven by
 * src/_backward.pyx (conv_backward_weight_wide).
 *
 * With the input zero-padded to Hp x Wp (Hp = out_h + (kh-1)*dh,
 * Wp = out_w + (kw-1)*dw) and dy laid out on rows of Wp floats (zero in the
 * columns out_w..Wp-1 and in the tail up to a multiple of 16), output pixel
 * p = yo*Wp + xo reads tap (a, c) of channel ci at
 *     xpad[ci*Hp*Wp + a*dh*Wp + c*dw + p]
 * so every (ci, tap) row of the patch matrix is a contiguous shifted run of
 * the padded input and
 *     dW[co, (ci, tap)] = dot(dyw[co, 0:L], xpad + roff[(ci, tap)], L)
 * needs no patch matrix: an A.B^T GEMM whose K (pixels) runs along both rows.
 *
 * Summation order of one dot (fixed per SIMD level, whatever the tile): per
 * chunk of RLX_BWD_WIDE_KC pixels (or per group of small images, one after the
 * other, see RlxBwdImages), eight lanes (portable, AVX2) or sixteen
 * (AVX-512) accumulate pixels k, k+W, k+2W, ... in order (one FMA each), then
 * the lanes are added in one fixed tree and the chunk's sum is added to dW.
 * The register tiles and the one-pair edge kernel give the same bits for the
 * same pair.
 *
 * A non-finite input value can reach a pair whose real taps never read it
 * (0 * inf in the wide columns): dW is then non-finite there too. */
#ifndef RLX_BWD_WIDE_H
#define RLX_BWD_WIDE_H

#include "rlx_simd.h"

#define RLX_BWD_WIDE_MR 4      /* output channels per tile (dy rows) */
#define RLX_BWD_WIDE_NR 3      /* (ci, tap) rows per tile */

/* The images one call sums over: image b's dy rows start at dyw + b*dstride
 * and its padded input at xb + b*xstride.  A pair's lanes run over image 0's
 * pixels, then image 1's, ... before one horizontal sum, so small planes do
 * not pay a lane reduction (and a call) per image. */
typedef struct {
    ptrdiff_t n, xstride, dstride;
} RlxBwdImages;

/* lanes summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) in both variants */
RLX_INLINE float rlx_bwd_hsum8_portable(const float* a) {
    float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
    return (s0 + s2) + (s1 + s3);
}

/* ---- portable ------------------------------------------------------------ */

static void rlx_bwd_wide_pair_portable(const float* restrict d, const float* restrict x, ptrdiff_t L,
                                       const RlxBwdImages* im, float* restrict out) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (ptrdiff_t b = 0; b < im->n; ++b, d += im->dstride, x += im->xstride)
        for (ptrdiff_t k = 0; k < L; k += 8)
            for (int l = 0; l < 8; ++l)
                acc[l] += d[k + l] * x[k + l];
    *out += rlx_bwd_hsum8_portable(acc);
}

/* ---- AVX2 + FMA ---------------------------------------------------------- */
#if RLX_X86_DISPATCH
RLX_INLINE_AVX2 float rlx_bwd_hsum8_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));   /* l0+l4 .. l3+l7 */
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                           /* (s0+s2), (s1+s3) */
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

RLX_TARGET_AVX2 static void rlx_bwd_wide_pair_avx2(const float* restrict d, const float* restrict x,
                                                   ptrdiff_t L, const RlxBwdImages* im, float* restrict out) {
    __m256 acc = _mm256_setzero_ps();
    for (ptrdiff_t b = 0; b < im->n; ++b, d += im->dstride, x += im->xstride)
        for (ptrdiff_t k = 0; k < L; k += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(d + k), _mm256_loadu_ps(x + k), acc);
    *out += rlx_bwd_hsum8_avx2(acc);
}

/* out[i*ldw + j] += dot(d + i*ldd, x[j]) for the full 4 x 3 tile */
RLX_TARGET_AVX2 static void rlx_bwd_wide_tile_avx2(const float* restrict d, ptrdiff_t ldd,
                                                   const float* x0, const float* x1, const float* x2,
                                                   ptrdiff_t L, const RlxBwdImages* im, float* restrict out,
                                                   ptrdiff_t ldw) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c10 = c00, c11 = c00, c12 = c00;
    __m256 c20 = c00, c21 = c00, c22 = c00, c30 = c00, c31 = c00, c32 = c00;
    for (ptrdiff_t bi = 0; bi < im->n; ++bi, d += im->dstride, x0 += im->xstride, x1 += im->xstride,
                                          x2 += im->xstride) {
        const float* d0 = d;
        const float* d1 = d + ldd;
        const float* d2 = d + 2 * ldd;
        const float* d3 = d + 3 * ldd;
        for (ptrdiff_t k = 0; k < L; k += 8) {
            __m256 a0 = _mm256_loadu_ps(x0 + k), a1 = _mm256_loadu_ps(x1 + k), a2 = _mm256_loadu_ps(x2 + k);
            __m256 b = _mm256_loadu_ps(d0 + k);
            c00 = _mm256_fmadd_ps(b, a0, c00); c01 = _mm256_fmadd_ps(b, a1, c01); c02 = _mm256_fmadd_ps(b, a2, c02);
            b = _mm256_loadu_ps(d1 + k);
            c10 = _mm256_fmadd_ps(b, a0, c10); c11 = _mm256_fmadd_ps(b, a1, c11); c12 = _mm256_fmadd_ps(b, a2, c12);
            b = _mm256_loadu_ps(d2 + k);
            c20 = _mm256_fmadd_ps(b, a0, c20); c21 = _mm256_fmadd_ps(b, a1, c21); c22 = _mm256_fmadd_ps(b, a2, c22);
            b = _mm256_loadu_ps(d3 + k);
            c30 = _mm256_fmadd_ps(b, a0, c30); c31 = _mm256_fmadd_ps(b, a1, c31); c32 = _mm256_fmadd_ps(b, a2, c32);
        }
    }
    out[0] += rlx_bwd_hsum8_avx2(c00); out[1] += rlx_bwd_hsum8_avx2(c01); out[2] += rlx_bwd_hsum8_avx2(c02);
    out += ldw;
    out[0] += rlx_bwd_hsum8_avx2(c10); out[1] += rlx_bwd_hsum8_avx2(c11); out[2] += rlx_bwd_hsum8_avx2(c12);
    out += ldw;
    out[0] += rlx_bwd_hsum8_avx2(c20); out[1] += rlx_bwd_hsum8_avx2(c21); out[2] += rlx_bwd_hsum8_avx2(c22);
    out += ldw;
    out[0] += rlx_bwd_hsum8_avx2(c30); out[1] += rlx_bwd_hsum8_avx2(c31); out[2] += rlx_bwd_hsum8_avx2(c32);
}

/* ---- AVX-512 ------------------------------------------------------------- */
/* Sixteen lanes: lane l accumulates pixels k + l, k + l + 16, ... of a chunk in
 * order; rlx_bwd_hsum16_avx512 adds lane l + 8 to lane l, then the eight sums
 * in the AVX2 tree.  Tiles of 4 x 6 and 4 x 3 and the one-pair kernel give the
 * same bits for the same pair (a different order from the eight-lane
 * variants, so results differ from them in the last bits). */
RLX_INLINE_AVX512 float rlx_bwd_hsum16_avx512(__m512 v) {
    return rlx_bwd_hsum8_avx2(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

RLX_TARGET_AVX512 static void rlx_bwd_wide_pair_avx512(const float* restrict d, const float* restrict x,
                                                       ptrdiff_t L, const RlxBwdImages* im, float* restrict out) {
    __m512 acc = _mm512_setzero_ps();
    for (ptrdiff_t b = 0; b < im->n; ++b, d += im->dstride, x += im->xstride)
        for (ptrdiff_t k = 0; k < L; k += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(d + k), _mm512_loadu_ps(x + k), acc);
    *out += rlx_bwd_hsum16_avx512(acc);
}

/* out[i*ldw + j] += dot(d + i*ldd, xs[j]) for a full 4 x NR tile (NR <= 6):
 * 4 dy rows held in registers, one x load per 4 FMAs, 4 * NR accumulators. */
RLX_INLINE_AVX512 void rlx_bwd_wide_tile_avx512(const float* restrict d, ptrdiff_t ldd,
                                                const float* const* xs, const int nr, ptrdiff_t L,
                                                const RlxBwdImages* im, float* restrict out, ptrdiff_t ldw) {
    __m512 c[4][6];
#pragma GCC unroll 6
    for (int j = 0; j < nr; ++j) {
        c[0][j] = _mm512_setzero_ps(); c[1][j] = c[0][j]; c[2][j] = c[0][j]; c[3][j] = c[0][j];
    }
    for (ptrdiff_t bi = 0, xo = 0; bi < im->n; ++bi, d += im->dstride, xo += im->xstride) {
        const float* d0 = d;
        const float* d1 = d + ldd;
        const float* d2 = d + 2 * ldd;
        const float* d3 = d + 3 * ldd;
        for (ptrdiff_t k = 0; k < L; k += 16) {
            const __m512 b0 = _mm512_loadu_ps(d0 + k), b1 = _mm512_loadu_ps(d1 + k);
            const __m512 b2 = _mm512_loadu_ps(d2 + k), b3 = _mm512_loadu_ps(d3 + k);
#pragma GCC unroll 6
            for (int j = 0; j < nr; ++j) {
                const __m512 a = _mm512_loadu_ps(xs[j] + xo + k);
                c[0][j] = _mm512_fmadd_ps(b0, a, c[0][j]);
                c[1][j] = _mm512_fmadd_ps(b1, a, c[1][j]);
                c[2][j] = _mm512_fmadd_ps(b2, a, c[2][j]);
                c[3][j] = _mm512_fmadd_ps(b3, a, c[3][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
#pragma GCC unroll 6
        for (int j = 0; j < nr; ++j)
            out[i * ldw + j] += rlx_bwd_hsum16_avx512(c[i][j]);
}

RLX_TARGET_AVX512 static void rlx_bwd_wide_tile6_avx512(const float* restrict d, ptrdiff_t ldd, const float* x,
                                                        const ptrdiff_t* roff, ptrdiff_t L, const RlxBwdImages* im,
                                                        float* restrict out, ptrdiff_t ldw) {
    const float* xs[6] = {x + roff[0], x + roff[1], x + roff[2], x + roff[3], x + roff[4], x + roff[5]};
    rlx_bwd_wide_tile_avx512(d, ldd, xs, 6, L, im, out, ldw);
}

RLX_TARGET_AVX512 static void rlx_bwd_wide_tile3_avx512(const float* restrict d, ptrdiff_t ldd, const float* x,
                                                        const ptrdiff_t* roff, ptrdiff_t L, const RlxBwdImages* im,
                                                        float* restrict out, ptrdiff_t ldw) {
    const float* xs[3] = {x + roff[0], x + roff[1], x + roff[2]};
    rlx_bwd_wide_tile_avx512(d, ldd, xs, 3, L, im, out, ldw);
}
#endif

/* Pixels per chunk: each chunk's dot is added to dW on its own.  Images are
 * grouped (src/_backward.pyx) only while a group's rows fit one chunk, so a
 * group is summed in a single pass.  4096, where it was 1024 (the 4 dy rows
 * of a chunk in L1): fewer lane sums and tile starts per FMA, with the rows
 * streamed from L2.  Zen 4, interleaved processes: 32 images 32->64 on 28x28
 * 10.2 -> 9.7 ms at 1 thread, 5.6 -> 5.0 at 2 (4 images per dot, was 1);
 * 8 images 64->64 on 56x56 1.09-1.14x; 112x112 and 14x14 1.0-1.03x; 8192
 * measured the same as 4096. */
#define RLX_BWD_WIDE_KC 4096

/* Floats of padded input an image group may hold: 1 MiB, half of a 2 MiB L2,
 * so every item of a part re-reads the group from L2. */
#define RLX_BWD_WIDE_GROUP_FLOATS 262144

/* dw[i*ldw + j] += sum over the images b of dot(dyw + b*dstride + i*ldd,
 * xb + b*xstride + roff[j], L) for i < mr, j < nrows, chunk by chunk of
 * RLX_BWD_WIDE_KC pixels.  L is a multiple of 16; dyw rows hold L floats and
 * xb + roff[j] L floats, in every image. */
static void rlx_bwd_wide_block(const float* dyw, ptrdiff_t ldd, ptrdiff_t mr, const float* xb,
                               const ptrdiff_t* roff, ptrdiff_t nrows, ptrdiff_t L, ptrdiff_t nimg,
                               ptrdiff_t xstride, ptrdiff_t dstride, float* dw, ptrdiff_t ldw) {
    const RlxBwdImages im = {nimg, xstride, dstride};
    for (ptrdiff_t k0 = 0; k0 < L; k0 += RLX_BWD_WIDE_KC) {
        const ptrdiff_t len = L - k0 < RLX_BWD_WIDE_KC ? L - k0 : RLX_BWD_WIDE_KC;
        const float* d = dyw + k0;
        const float* x = xb + k0;
        ptrdiff_t i, j = 0;
#if RLX_X86_DISPATCH
        if (rlx_simd_level() >= 2) {
            if (mr == RLX_BWD_WIDE_MR) {
                for (; j + 6 <= nrows; j += 6)
                    rlx_bwd_wide_tile6_avx512(d, ldd, x, roff + j, len, &im, dw + j, ldw);
                for (; j + 3 <= nrows; j += 3)
                    rlx_bwd_wide_tile3_avx512(d, ldd, x, roff + j, len, &im, dw + j, ldw);
            }
            for (; j < nrows; ++j)
                for (i = 0; i < mr; ++i)
                    rlx_bwd_wide_pair_avx512(d + i * ldd, x + roff[j], len, &im, dw + i * ldw + j);
            continue;
        }
        if (rlx_simd_level()) {
            if (mr == RLX_BWD_WIDE_MR)
                for (; j + RLX_BWD_WIDE_NR <= nrows; j += RLX_BWD_WIDE_NR)
                    rlx_bwd_wide_tile_avx2(d, ldd, x + roff[j], x + roff[j + 1], x + roff[j + 2], len, &im,
                                           dw + j, ldw);
            for (; j < nrows; ++j)
                for (i = 0; i < mr; ++i)
                    rlx_bwd_wide_pair_avx2(d + i * ldd, x + roff[j], len, &im, dw + i * ldw + j);
            continue;
        }
#endif
        for (; j < nrows; ++j)
            for (i = 0; i < mr; ++i)
                rlx_bwd_wide_pair_portable(d + i * ldd, x + roff[j], len, &im, dw + i * ldw + j);
    }
}

#endif
