/* A dense layer of a few rows: y[i, j] = alpha * sum_k a[i, k] * b[j, k],
 * a [m, k] (row stride lda) and b [n, k] (row stride ldb) both read along k,
 * for the classifier of a CNN at batch 1..8 (ONNX Gemm with transB = 1, a
 * Linear layer).  BLAS packs b for such a GEMM (sgemm) or runs it at a
 * fraction of the bandwidth (sgemv), while each element of b is used m
 * times only: the kernel streams b once, four rows at a time, against two
 * rows of a held in L1.
 *
 * Every y[i, j] is 8 partial sums over k (lane l takes k = 8t + l, fused
 * multiply-adds in k order), added as ((l0 + l4) + (l2 + l6)) + ((l1 + l5)
 * + (l3 + l7)), then the k % 8 last products fused in, then times alpha.
 * The portable variant does exactly that, so both give the same bits, at
 * any split of the columns over threads. */
#ifndef RLX_GEMM_NT_H
#define RLX_GEMM_NT_H

#include <math.h>
#include "rlx_simd.h"

static inline float rlx_gemm_nt_tail(float s, const float* a, const float* b, ptrdiff_t k8, ptrdiff_t k) {
    for (ptrdiff_t kk = k8; kk < k; ++kk) s = fmaf(a[kk], b[kk], s);
    return s;
}

static void rlx_gemm_nt_base(const float* a, ptrdiff_t lda, const float* b, ptrdiff_t ldb, float* y,
                             ptrdiff_t ldy, ptrdiff_t m, ptrdiff_t k, ptrdiff_t j0, ptrdiff_t j1, float alpha) {
    const ptrdiff_t k8 = k / 8 * 8;
    for (ptrdiff_t i = 0; i < m; ++i)
        for (ptrdiff_t j = j0; j < j1; ++j) {
            const float* ai = a + i * lda;
            const float* bj = b + j * ldb;
            float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (ptrdiff_t kk = 0; kk < k8; kk += 8)
                for (int q = 0; q < 8; ++q) l[q] = fmaf(ai[kk + q], bj[kk + q], l[q]);
            const float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
            y[i * ldy + j] = alpha * rlx_gemm_nt_tail(s, ai, bj, k8, k);
        }
}

#if RLX_X86_DISPATCH
RLX_INLINE_AVX2 float rlx_gemm_nt_hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); /* l0+l4 .. l3+l7 */
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));                                     /* (l0+l4)+(l2+l6), (l1+l5)+(l3+l7) */
    x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
    return _mm_cvtss_f32(x);
}

/* NI rows of a (1 or 2) x NJ rows of b (1..4) */
RLX_INLINE_AVX2 void rlx_gemm_nt_block(const int ni, const int nj, const float* restrict a, ptrdiff_t lda,
                                       const float* restrict b, ptrdiff_t ldb, float* restrict y, ptrdiff_t ldy,
                                       ptrdiff_t k, float alpha) {
    const ptrdiff_t k8 = k / 8 * 8;
    __m256 s[2][4];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j) s[i][j] = _mm256_setzero_ps();
    for (ptrdiff_t kk = 0; kk < k8; kk += 8) {
        __m256 bv[4];
        for (int j = 0; j < nj; ++j) bv[j] = _mm256_loadu_ps(b + j * ldb + kk);
        for (int i = 0; i < ni; ++i) {
            const __m256 av = _mm256_loadu_ps(a + i * lda + kk);
            for (int j = 0; j < nj; ++j) s[i][j] = _mm256_fmadd_ps(av, bv[j], s[i][j]);
        }
    }
    for (int i = 0; i < ni; ++i)
        for (int j = 0; j < nj; ++j)
            y[i * ldy + j] = alpha * rlx_gemm_nt_tail(rlx_gemm_nt_hsum8(s[i][j]), a + i * lda, b + j * ldb, k8, k);
}

#define RLX_GEMM_NT_BLOCK(NI_, NJ_)                                                                   \
    RLX_TARGET_AVX2 static void rlx_gemm_nt_block_##NI_##_##NJ_(const float* a, ptrdiff_t lda,        \
            const float* b, ptrdiff_t ldb, float* y, ptrdiff_t ldy, ptrdiff_t k, float alpha) {       \
        rlx_gemm_nt_block(NI_, NJ_, a, lda, b, ldb, y, ldy, k, alpha);                                \
    }
RLX_GEMM_NT_BLOCK(1, 1) RLX_GEMM_NT_BLOCK(1, 2) RLX_GEMM_NT_BLOCK(1, 3) RLX_GEMM_NT_BLOCK(1, 4)
RLX_GEMM_NT_BLOCK(2, 1) RLX_GEMM_NT_BLOCK(2, 2) RLX_GEMM_NT_BLOCK(2, 3) RLX_GEMM_NT_BLOCK(2, 4)
#undef RLX_GEMM_NT_BLOCK
typedef void (*rlx_gemm_nt_block_fn)(const float*, ptrdiff_t, const float*, ptrdiff_t, float*, ptrdiff_t,
                                     ptrdiff_t, float);
static const rlx_gemm_nt_block_fn rlx_gemm_nt_blocks[2][4] = {
    {rlx_gemm_nt_block_1_1, rlx_gemm_nt_block_1_2, rlx_gemm_nt_block_1_3, rlx_gemm_nt_block_1_4},
    {rlx_gemm_nt_block_2_1, rlx_gemm_nt_block_2_2, rlx_gemm_nt_block_2_3, rlx_gemm_nt_block_2_4}};
#endif

/* Columns [j0, j1) of y (every row), in blocks of 4 columns: each block of b
 * (4 rows, at most 4k floats) stays in L1/L2 while the rows of a pass it in
 * pairs. */
static void rlx_gemm_nt(const float* a, ptrdiff_t a_len, ptrdiff_t lda, const float* b, ptrdiff_t b_len,
                        ptrdiff_t ldb, float* y, ptrdiff_t y_len, ptrdiff_t ldy, ptrdiff_t m, ptrdiff_t k,
                        ptrdiff_t j0, ptrdiff_t j1, float alpha) {
    (void)a_len;
    (void)b_len;
    (void)y_len;
    if (m <= 0 || j1 <= j0) return;
    RLX_CHECK_RANGE(0, (m - 1) * lda + k, a_len, "gemm_nt a");
    RLX_CHECK_RANGE(j0 * ldb, (j1 - 1) * ldb + k, b_len, "gemm_nt b");
    RLX_CHECK_RANGE(j0, (m - 1) * ldy + j1, y_len, "gemm_nt y");
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        for (ptrdiff_t j = j0; j < j1; j += 4) {
            const int nj = j1 - j < 4 ? (int)(j1 - j) : 4;
            for (ptrdiff_t i = 0; i < m; i += 2) {
                const int ni = m - i < 2 ? 1 : 2;
                rlx_gemm_nt_blocks[ni - 1][nj - 1](a + i * lda, lda, b + j * ldb, ldb, y + i * ldy + j, ldy, k,
                                                   alpha);
            }
        }
        return;
    }
#endif
    rlx_gemm_nt_base(a, lda, b, ldb, y, ldy, m, k, j0, j1, alpha);
}

/* How many parts a split of n columns over up to t threads has: runs of
 * whole blocks of 4 columns, so every element's sum is the same at any
 * split. */
static inline ptrdiff_t rlx_gemm_nt_parts(ptrdiff_t n, ptrdiff_t t) {
    const ptrdiff_t blocks = (n + 3) / 4;
    return t < blocks ? t : blocks;
}

/* Part `part` of `parts` (rlx_gemm_nt_parts) of the columns [0, n): one
 * thread's call. */
static void rlx_gemm_nt_part(const float* a, ptrdiff_t a_len, ptrdiff_t lda, const float* b, ptrdiff_t b_len,
                             ptrdiff_t ldb, float* y, ptrdiff_t y_len, ptrdiff_t ldy, ptrdiff_t m, ptrdiff_t n,
                             ptrdiff_t k, ptrdiff_t part, ptrdiff_t parts, float alpha) {
    const ptrdiff_t width = (n + 4 * parts - 1) / (4 * parts) * 4;
    const ptrdiff_t lo = part * width, hi = lo + width < n ? lo + width : n;
    rlx_gemm_nt(a, a_len, lda, b, b_len, ldb, y, y_len, ldy, m, k, lo, hi, alpha);
}

#endif
