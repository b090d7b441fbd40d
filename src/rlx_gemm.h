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
 * and one broadcast of W per k); the M remainder runs a tile of its own row
 * count and an N remainder of at most 8 columns a 6 x 8 tile.  W is walked in
 * blocks of RLX_GEMM_MC_PANELS panels (kept in L2), K in blocks of
 * RLX_GEMM_KC.  Each output element is a chain of FMAs over k = 0..K-1 in
 * order, the same whatever tile, panel or column block it falls in, so the
 * result does not depend on how callers cut the columns.
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
/* M block: 32 panels (192 rows) of W over one K block, 192 KiB, stay in L2
 * while the X panels stream past them. */
#define RLX_GEMM_MC_PANELS 32

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
RLX_INLINE void rlx_gemm_tile_base(const float* restrict wp, const float* restrict xp, ptrdiff_t ldxp,
                                   ptrdiff_t kc, float* restrict c, ptrdiff_t ldc,
                                   const float* restrict init, int from_c) {
    float acc[RLX_GEMM_MR][RLX_GEMM_NR];
    for (int r = 0; r < RLX_GEMM_MR; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] = from_c ? c[r * ldc + j] : init[r];
    for (ptrdiff_t kk = 0; kk < kc; ++kk)
        for (int r = 0; r < RLX_GEMM_MR; ++r) {
            const float wv = wp[kk * RLX_GEMM_MR + r];
            for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] += wv * xp[kk * ldxp + j];
        }
    for (int r = 0; r < RLX_GEMM_MR; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) c[r * ldc + j] = acc[r][j];
}

#if RLX_X86_DISPATCH
/* ---- AVX2+FMA tile: mr x 16 in 2*mr ymm accumulators (mr <= 6) ----------
 * One body, instantiated for each row count with a constant mr, so a
 * partial panel of W (the M remainder) costs only its own rows. */
/* Named accumulators (not an array: GCC kept an array of them on the stack),
 * each row and second vector guarded by a test on the constants mr and nv
 * (vectors of 8 columns, 1 or 2) that the compiler folds. */
#define RLX_GEMM_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_GEMM_DECL(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
#define RLX_GEMM_INIT(r)                                                         \
    if (mr > r) {                                                                \
        if (from_c) {                                                            \
            a##r##0 = _mm256_loadu_ps(c + (r) * ldc);                            \
            if (nv > 1) a##r##1 = _mm256_loadu_ps(c + (r) * ldc + 8);            \
        } else {                                                                 \
            a##r##0 = a##r##1 = _mm256_set1_ps(init[r]);                         \
        }                                                                        \
    }
#define RLX_GEMM_FMA(r)                                                          \
    if (mr > r) {                                                                \
        const __m256 wv = _mm256_broadcast_ss(wp + (r));                         \
        a##r##0 = _mm256_fmadd_ps(wv, x0, a##r##0);                              \
        if (nv > 1) a##r##1 = _mm256_fmadd_ps(wv, x1, a##r##1);                  \
    }
#define RLX_GEMM_STORE(r)                                                        \
    if (mr > r) {                                                                \
        _mm256_storeu_ps(c + (r) * ldc, a##r##0);                                \
        if (nv > 1) _mm256_storeu_ps(c + (r) * ldc + 8, a##r##1);                \
    }

RLX_TARGET_AVX2 RLX_INLINE void rlx_gemm_tile_avx2_body(const int mr, const int nv,
                                                        const float* restrict wp,
                                                        const float* restrict xp, ptrdiff_t ldxp,
                                                        ptrdiff_t kc, float* restrict c, ptrdiff_t ldc,
                                                        const float* restrict init, int from_c) {
    RLX_GEMM_ROWS(RLX_GEMM_DECL)
    RLX_GEMM_ROWS(RLX_GEMM_INIT)
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m256 x0 = _mm256_loadu_ps(xp);
        const __m256 x1 = nv > 1 ? _mm256_loadu_ps(xp + 8) : x0;
        RLX_GEMM_ROWS(RLX_GEMM_FMA)
        xp += ldxp;
        wp += RLX_GEMM_MR;
    }
    RLX_GEMM_ROWS(RLX_GEMM_STORE)
}
#undef RLX_GEMM_DECL
#undef RLX_GEMM_INIT
#undef RLX_GEMM_FMA
#undef RLX_GEMM_STORE
#undef RLX_GEMM_ROWS

/* Tiles of mr rows (1..6) by 16 columns (suffix 2) or 8 columns (suffix 1,
 * for panels with at most 8 live columns: N remainders). */
#define RLX_GEMM_TILE_AVX2(MR_, NV_)                                                             \
    RLX_TARGET_AVX2 static void rlx_gemm_tile_avx2_##MR_##_##NV_(                                 \
        const float* wp, const float* xp, ptrdiff_t ldxp, ptrdiff_t kc, float* c, ptrdiff_t ldc,  \
        const float* init, int from_c) {                                                          \
        rlx_gemm_tile_avx2_body(MR_, NV_, wp, xp, ldxp, kc, c, ldc, init, from_c);                \
    }
RLX_GEMM_TILE_AVX2(1, 1) RLX_GEMM_TILE_AVX2(2, 1) RLX_GEMM_TILE_AVX2(3, 1)
RLX_GEMM_TILE_AVX2(4, 1) RLX_GEMM_TILE_AVX2(5, 1) RLX_GEMM_TILE_AVX2(6, 1)
RLX_GEMM_TILE_AVX2(1, 2) RLX_GEMM_TILE_AVX2(2, 2) RLX_GEMM_TILE_AVX2(3, 2)
RLX_GEMM_TILE_AVX2(4, 2) RLX_GEMM_TILE_AVX2(5, 2) RLX_GEMM_TILE_AVX2(6, 2)
#undef RLX_GEMM_TILE_AVX2

typedef void (*rlx_gemm_tile_fn)(const float*, const float*, ptrdiff_t, ptrdiff_t, float*, ptrdiff_t,
                                 const float*, int);
static const rlx_gemm_tile_fn rlx_gemm_tiles_avx2[2][RLX_GEMM_MR + 1] = {
    {NULL, rlx_gemm_tile_avx2_1_1, rlx_gemm_tile_avx2_2_1, rlx_gemm_tile_avx2_3_1,
     rlx_gemm_tile_avx2_4_1, rlx_gemm_tile_avx2_5_1, rlx_gemm_tile_avx2_6_1},
    {NULL, rlx_gemm_tile_avx2_1_2, rlx_gemm_tile_avx2_2_2, rlx_gemm_tile_avx2_3_2,
     rlx_gemm_tile_avx2_4_2, rlx_gemm_tile_avx2_5_2, rlx_gemm_tile_avx2_6_2}};
#endif

/* One tile of C (mr <= MR rows, nr <= NR columns) from kc steps of the
 * packed W panel and of X (rows ldxp apart, NR columns readable).  A tile
 * narrower than NR runs on a local copy, so every element's arithmetic is
 * the same as in a full tile. */
RLX_INLINE void rlx_gemm_tile(int level, const float* wp, const float* xp, ptrdiff_t ldxp, ptrdiff_t kc,
                              float* c, ptrdiff_t ldc, ptrdiff_t mr, ptrdiff_t nr, const float* init,
                              int from_c) {
    float tmp[RLX_GEMM_MR * RLX_GEMM_NR];
    float* dst = c;
    ptrdiff_t ld = ldc;
    if (nr < RLX_GEMM_NR) {
        dst = tmp;
        ld = RLX_GEMM_NR;
        memset(tmp, 0, sizeof(tmp));
        if (from_c)
            for (ptrdiff_t r = 0; r < mr; ++r) memcpy(tmp + r * RLX_GEMM_NR, c + r * ldc, (size_t)nr * sizeof(float));
    }
#if RLX_X86_DISPATCH
    if (level) rlx_gemm_tiles_avx2[nr > 8][mr](wp, xp, ldxp, kc, dst, ld, init, from_c);
    else
#endif
    {
        /* the portable tile always computes MR rows: pad C rows past mr */
        float full[RLX_GEMM_MR * RLX_GEMM_NR];
        float* fd = dst;
        ptrdiff_t fl = ld;
        if (mr < RLX_GEMM_MR) {
            fd = full;
            fl = RLX_GEMM_NR;
            memset(full, 0, sizeof(full));
            if (from_c)
                for (ptrdiff_t r = 0; r < mr; ++r) memcpy(full + r * RLX_GEMM_NR, dst + r * ld, RLX_GEMM_NR * sizeof(float));
        }
        rlx_gemm_tile_base(wp, xp, ldxp, kc, fd, fl, init, from_c);
        if (mr < RLX_GEMM_MR)
            for (ptrdiff_t r = 0; r < mr; ++r) memcpy(dst + r * ld, full + r * RLX_GEMM_NR, RLX_GEMM_NR * sizeof(float));
    }
    (void)level;
    if (nr < RLX_GEMM_NR)
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
    for (ptrdiff_t pb = 0; pb < panels; pb += RLX_GEMM_MC_PANELS) {
        const ptrdiff_t pe = pb + RLX_GEMM_MC_PANELS < panels ? pb + RLX_GEMM_MC_PANELS : panels;
        for (ptrdiff_t j0 = 0; j0 < n; j0 += RLX_GEMM_NR) {
            const ptrdiff_t nr = n - j0 < RLX_GEMM_NR ? n - j0 : RLX_GEMM_NR;
            for (ptrdiff_t k0 = 0; k0 < k; k0 += RLX_GEMM_KC) {
                const ptrdiff_t kc = k - k0 < RLX_GEMM_KC ? k - k0 : RLX_GEMM_KC;
                /* Reading full panels of X in place (rows ldx apart) measured
                 * no faster for 1x1 convs, and touches kc pages per panel. */
                rlx_gemm_pack_x(x + x_off + k0 * ldx + j0, ldx, kc, nr, xp);
                for (ptrdiff_t p = pb; p < pe; ++p) {
                    const ptrdiff_t i0 = p * RLX_GEMM_MR;
                    const ptrdiff_t mr = m - i0 < RLX_GEMM_MR ? m - i0 : RLX_GEMM_MR;
                    float init[RLX_GEMM_MR] = {0};
                    if (bias)
                        for (ptrdiff_t r = 0; r < mr; ++r) init[r] = bias[i0 + r];
                    rlx_gemm_tile(level, wp + (p * k + k0) * RLX_GEMM_MR, xp, RLX_GEMM_NR, kc,
                                  c + c_off + i0 * ldc + j0, ldc, mr, nr, init, k0 > 0);
                }
            }
        }
    }
}

/* ---- strided gather for im2col rows: dst[i] = src[i * stride], i < n ---- */
RLX_INLINE void rlx_gather_strided_body(const float* restrict src, ptrdiff_t stride,
                                        float* restrict dst, ptrdiff_t n) {
    for (ptrdiff_t i = 0; i < n; ++i) dst[i] = src[i * stride];
}

#if RLX_X86_DISPATCH
/* Stride 2 (the 7x7 stem): 8 outputs from two loads and two shuffles.  The
 * vector loop runs while its last load, src[2i + 15], is not past the last
 * element the row reads, src[2(n - 1)]. */
RLX_TARGET_AVX2 static void rlx_gather_strided_avx2(const float* restrict src, ptrdiff_t stride,
                                                    float* restrict dst, ptrdiff_t n) {
    ptrdiff_t i = 0;
    if (stride == 2) {
        for (; 2 * i + 15 <= 2 * (n - 1); i += 8) {
            const __m256 v0 = _mm256_loadu_ps(src + 2 * i);
            const __m256 v1 = _mm256_loadu_ps(src + 2 * i + 8);
            /* lanes: v0[0] v0[2] v1[0] v1[2] | v0[4] v0[6] v1[4] v1[6] */
            const __m256 ev = _mm256_shuffle_ps(v0, v1, 0x88);
            /* 64-bit pairs 0 2 1 3: v0[0 2 4 6] v1[0 2 4 6] */
            _mm256_storeu_ps(dst + i, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(ev), 0xd8)));
        }
    }
    rlx_gather_strided_body(src + i * stride, stride, dst + i, n - i);
}
#endif

static void rlx_gather_strided(const float* src, ptrdiff_t stride, float* dst, ptrdiff_t n) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_gather_strided_avx2(src, stride, dst, n);
        return;
    }
#endif
    rlx_gather_strided_body(src, stride, dst, n);
}

#endif
