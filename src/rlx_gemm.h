/* Conv GEMM microkernel: C[M, n] = W[M, K] . X[K, n] (+ bias[M]), single
 * threaded, for the 1x1 and im2col conv paths.
 *
 *   W  constant weight, packed once (at compile time) into panels of
 *      RLX_GEMM_MR rows: panel p holds W[p*MR + r, k] at wp[(p*K + k)*MR + r],
 *      rows past M zero.  Per group the packed weight is
 *      rlx_gemm_packed_floats(M, K) floats.
 *   X  row-major with leading dimension ldx (the 1x1 conv's input planes, or
 *      an im2col patch block).  Each RLX_GEMM_NR-column panel of X is copied,
 *      one K block at a time, into a contiguous [kc][NR] buffer on the stack
 *      (zero-padded past n), which then stays in L1 while every panel of W
 *      streams past it.
 *   C  row-major with leading dimension ldc; written, not accumulated.  The
 *      first K block starts the accumulators from the bias, later K blocks
 *      from C.
 *
 * The register tile is MR x NR = 6 x 16 (12 ymm accumulators, 2 loads of X
 * and one broadcast of W per k).  Each output element is a chain of FMAs over
 * k = 0..K-1 in order, the same whatever panel or column block it falls in,
 * so the result does not depend on how callers cut the columns.
 *
 * Variants: AVX2+FMA (target attribute, no -march), and a portable C loop
 * nest over the same packed layout (chosen by RLX_SIMD=baseline or on CPUs
 * without AVX2).  There is no AVX-512 variant: it peaks like AVX2 on Zen 4
 * and could not be measured on the development machine (no AVX-512 exposed). */
#ifndef RLX_GEMM_H
#define RLX_GEMM_H

#include "rlx_simd.h"

#define RLX_GEMM_MR 6
#define RLX_GEMM_NR 16
/* K block: a packed X panel of KC x NR floats is 16 KiB, half of L1D. */
#define RLX_GEMM_KC 256

static inline ptrdiff_t rlx_gemm_packed_floats(ptrdiff_t m, ptrdiff_t k) {
    return (m + RLX_GEMM_MR - 1) / RLX_GEMM_MR * RLX_GEMM_MR * k;
}

/* wp = W (rows of length k at stride ldw) in MR-row panels. */
static void rlx_gemm_pack_w(const float* w, ptrdiff_t ldw, ptrdiff_t m, ptrdiff_t k, float* wp) {
    ptrdiff_t panels = (m + RLX_GEMM_MR - 1) / RLX_GEMM_MR;
    for (ptrdiff_t p = 0; p < panels; ++p)
        for (ptrdiff_t kk = 0; kk < k; ++kk)
            for (ptrdiff_t r = 0; r < RLX_GEMM_MR; ++r) {
                ptrdiff_t row = p * RLX_GEMM_MR + r;
                wp[(p * k + kk) * RLX_GEMM_MR + r] = row < m ? w[row * ldw + kk] : 0.0f;
            }
}

/* Panel of X: xp[kk*NR + j] = X[kk, j] for j < nr, 0 for nr <= j < NR. */
RLX_INLINE void rlx_gemm_pack_x(const float* restrict x, ptrdiff_t ldx, ptrdiff_t kc, ptrdiff_t nr,
                                float* restrict xp) {
    if (nr == RLX_GEMM_NR) {
        for (ptrdiff_t kk = 0; kk < kc; ++kk)
            memcpy(xp + kk * RLX_GEMM_NR, x + kk * ldx, RLX_GEMM_NR * sizeof(float));
    } else {
        for (ptrdiff_t kk = 0; kk < kc; ++kk) {
            memcpy(xp + kk * RLX_GEMM_NR, x + kk * ldx, (size_t)nr * sizeof(float));
            memset(xp + kk * RLX_GEMM_NR + nr, 0, (size_t)(RLX_GEMM_NR - nr) * sizeof(float));
        }
    }
}

/* ---- portable tile: acc[MR][NR] over kc steps ---------------------------- */
RLX_INLINE void rlx_gemm_tile_base(const float* restrict wp, const float* restrict xp, ptrdiff_t kc,
                                   float* restrict c, ptrdiff_t ldc, const float* restrict init,
                                   int from_c) {
    float acc[RLX_GEMM_MR][RLX_GEMM_NR];
    for (int r = 0; r < RLX_GEMM_MR; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] = from_c ? c[r * ldc + j] : init[r];
    for (ptrdiff_t kk = 0; kk < kc; ++kk)
        for (int r = 0; r < RLX_GEMM_MR; ++r) {
            const float wv = wp[kk * RLX_GEMM_MR + r];
            for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] += wv * xp[kk * RLX_GEMM_NR + j];
        }
    for (int r = 0; r < RLX_GEMM_MR; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) c[r * ldc + j] = acc[r][j];
}

#if RLX_X86_DISPATCH
/* ---- AVX2+FMA tile: 6 x 16 in 12 ymm accumulators ------------------------ */
#define RLX_GEMM_ROW(r)                                                          \
    do {                                                                         \
        const __m256 wv = _mm256_broadcast_ss(wp + (r));                         \
        a##r##0 = _mm256_fmadd_ps(wv, x0, a##r##0);                              \
        a##r##1 = _mm256_fmadd_ps(wv, x1, a##r##1);                              \
    } while (0)
#define RLX_GEMM_INIT(r)                                                         \
    do {                                                                         \
        if (from_c) {                                                            \
            a##r##0 = _mm256_loadu_ps(c + (r) * ldc);                            \
            a##r##1 = _mm256_loadu_ps(c + (r) * ldc + 8);                        \
        } else {                                                                 \
            a##r##0 = a##r##1 = _mm256_set1_ps(init[r]);                         \
        }                                                                        \
    } while (0)
#define RLX_GEMM_STORE(r)                                                        \
    do {                                                                         \
        _mm256_storeu_ps(c + (r) * ldc, a##r##0);                                \
        _mm256_storeu_ps(c + (r) * ldc + 8, a##r##1);                            \
    } while (0)

RLX_TARGET_AVX2 static void rlx_gemm_tile_avx2(const float* restrict wp, const float* restrict xp,
                                               ptrdiff_t kc, float* restrict c, ptrdiff_t ldc,
                                               const float* restrict init, int from_c) {
    __m256 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51;
    RLX_GEMM_INIT(0); RLX_GEMM_INIT(1); RLX_GEMM_INIT(2);
    RLX_GEMM_INIT(3); RLX_GEMM_INIT(4); RLX_GEMM_INIT(5);
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m256 x0 = _mm256_load_ps(xp);
        const __m256 x1 = _mm256_load_ps(xp + 8);
        RLX_GEMM_ROW(0); RLX_GEMM_ROW(1); RLX_GEMM_ROW(2);
        RLX_GEMM_ROW(3); RLX_GEMM_ROW(4); RLX_GEMM_ROW(5);
        xp += RLX_GEMM_NR;
        wp += RLX_GEMM_MR;
    }
    RLX_GEMM_STORE(0); RLX_GEMM_STORE(1); RLX_GEMM_STORE(2);
    RLX_GEMM_STORE(3); RLX_GEMM_STORE(4); RLX_GEMM_STORE(5);
}
#undef RLX_GEMM_ROW
#undef RLX_GEMM_INIT
#undef RLX_GEMM_STORE
#endif

/* One tile of C (mr <= MR rows, nr <= NR columns).  A partial tile runs the
 * full-size kernel on a local copy, so the arithmetic of every element is the
 * same as in a full tile. */
RLX_INLINE void rlx_gemm_tile(int level, const float* wp, const float* xp, ptrdiff_t kc, float* c,
                              ptrdiff_t ldc, ptrdiff_t mr, ptrdiff_t nr, const float* init, int from_c) {
    float tmp[RLX_GEMM_MR * RLX_GEMM_NR];
    float* dst = c;
    ptrdiff_t ld = ldc;
    const int partial = mr < RLX_GEMM_MR || nr < RLX_GEMM_NR;
    if (partial) {
        dst = tmp;
        ld = RLX_GEMM_NR;
        memset(tmp, 0, sizeof(tmp));
        if (from_c)
            for (ptrdiff_t r = 0; r < mr; ++r) memcpy(tmp + r * RLX_GEMM_NR, c + r * ldc, (size_t)nr * sizeof(float));
    }
#if RLX_X86_DISPATCH
    if (level) rlx_gemm_tile_avx2(wp, xp, kc, dst, ld, init, from_c);
    else
#endif
        rlx_gemm_tile_base(wp, xp, kc, dst, ld, init, from_c);
    (void)level;
    if (partial)
        for (ptrdiff_t r = 0; r < mr; ++r) memcpy(c + r * ldc, tmp + r * RLX_GEMM_NR, (size_t)nr * sizeof(float));
}

/* C[0:m, c_off + j] = sum_k W[0:m, k] X[x_off + k*ldx + j] (+ bias) for j in [0, n).
 * wp: this group's packed weight (rlx_gemm_packed_floats(m, k) floats);
 * bias: m floats or NULL.  Lengths are for the debug-build range checks. */
static void rlx_gemm_conv(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                          const float* x, ptrdiff_t x_len, ptrdiff_t x_off, ptrdiff_t ldx,
                          float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                          const float* bias) {
    float xp[RLX_GEMM_KC * RLX_GEMM_NR] __attribute__((aligned(64)));
    const int level = rlx_simd_level();
    const ptrdiff_t panels = (m + RLX_GEMM_MR - 1) / RLX_GEMM_MR;
    if (m <= 0 || n <= 0) return;
    RLX_CHECK_RANGE(0, rlx_gemm_packed_floats(m, k), wp_len, "gemm packed weight");
    RLX_CHECK_RANGE(c_off, c_off + (m - 1) * ldc + n, c_len, "gemm C");
    if (k <= 0) {
        for (ptrdiff_t i = 0; i < m; ++i)
            for (ptrdiff_t j = 0; j < n; ++j) c[c_off + i * ldc + j] = bias ? bias[i] : 0.0f;
        return;
    }
    RLX_CHECK_RANGE(x_off, x_off + (k - 1) * ldx + n, x_len, "gemm X");
    for (ptrdiff_t j0 = 0; j0 < n; j0 += RLX_GEMM_NR) {
        const ptrdiff_t nr = n - j0 < RLX_GEMM_NR ? n - j0 : RLX_GEMM_NR;
        for (ptrdiff_t k0 = 0; k0 < k; k0 += RLX_GEMM_KC) {
            const ptrdiff_t kc = k - k0 < RLX_GEMM_KC ? k - k0 : RLX_GEMM_KC;
            rlx_gemm_pack_x(x + x_off + k0 * ldx + j0, ldx, kc, nr, xp);
            for (ptrdiff_t p = 0; p < panels; ++p) {
                const ptrdiff_t i0 = p * RLX_GEMM_MR;
                const ptrdiff_t mr = m - i0 < RLX_GEMM_MR ? m - i0 : RLX_GEMM_MR;
                float init[RLX_GEMM_MR] = {0};
                if (bias)
                    for (ptrdiff_t r = 0; r < mr; ++r) init[r] = bias[i0 + r];
                rlx_gemm_tile(level, wp + (p * k + k0) * RLX_GEMM_MR, xp, kc,
                              c + c_off + i0 * ldc + j0, ldc, mr, nr, init, k0 > 0);
            }
        }
    }
}

#endif
