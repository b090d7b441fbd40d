/* Conv GEMM microkernel: C[M, n] = W[M, K] . X[K, n] (+ bias[M]), single
 * threaded, for the 1x1 and im2col conv paths.
 *
 *   W  constant weight, packed once (at compile time) into panels of
 *      RLX_GEMM_MR rows: panel p holds W[p*MR + r, k] at wp[(p*K + k)*MR + r],
 *      rows past M zero.  Per group the packed weight is
 *      rlx_gemm_packed_floats(M, K) floats.
 *   X  row-major with leading dimension ldx (the 1x1 conv's input planes, or
 *      an im2col patch block).  Blocks of RLX_GEMM_NC columns of X are
 *      copied, one K block at a time, into contiguous [kc][NR] panels on the
 *      stack (zero-padded past n); each panel then stays in L1 while every
 *      panel of W streams past it.
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
 * without AVX2).  On the AVX-512 level (RLX_SIMD unset on a CPU with
 * AVX-512 F/DQ/VL) four adjacent 16-column panels run as one mr x 64 tile
 * of zmm accumulators in rlx_gemm_conv_src, and two as an mr x 32 one
 * (four against two, 1x1 convs at 1 and 2 threads: 1.04-1.12x); a lone
 * full panel runs against two panels of W at once, (6 + 6) x 16 (against
 * the AVX2 tile: Winograd F(4x4) 256->256 at 14x14, whose GEMMs are 16
 * tiles wide, 1.35-1.38x; 128->128 at 28x28 1.13-1.17x); the channel-panel
 * variant for small planes (below) runs 4, 2 or 1 channel panels per zmm
 * tile (1x1 convs on 7x7 planes 1.64-1.87x at 1 and 2 threads); and the
 * in-place implicit tile (rlx_gemm_conv_implicit_direct) runs 16-lane FMAs
 * (NCHW im2col convs of at most 64 output channels, e.g. the 7x7 s2 stem
 * and 3x3 32->64 at 56x56, 1.27-1.38x at 1 and 2 threads). */
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
/* At most this many rows of W (output channels of a 1x1 conv), the tiles of
 * a plain X read it in place, rows ldx apart, instead of a packed copy: each
 * packed float would serve only m / 6 tiles, so packing costs about as much
 * as the FMAs it feeds. */
#ifndef RLX_GEMM_INPLACE_MAX_M
#define RLX_GEMM_INPLACE_MAX_M 32
#endif
/* At most this many rows of a plain, packed X (a 1x1 conv's input channels):
 * the GEMM is bound by writing C, not by its FMAs, and C is written in long
 * runs of 12 rows (rlx_gemm_conv_src) instead of 64-column pieces of every
 * row of the M block, which were more write streams than the prefetchers
 * and the store path follow.  Measured on a Zen 3 (AVX2), lone 1x1 convs
 * from NCHW, interleaved in one process, 1 (2) threads: 16 -> 96 at 112x112
 * 0.93 -> 0.63 ms (1.14 -> 0.64), 24 -> 144 at 56x56 0.40 -> 0.31, 32 -> 192
 * at 56x56 0.71 -> 0.53, the same at batch 8 5.61 -> 3.38 (2.87 -> 1.87);
 * 32 -> 192 at 28x28 0.12-0.13 -> 0.13-0.15 (0.19 -> 0.14).  From 48 input
 * channels up the two orders came out level (0.99-1.03x). */
#ifndef RLX_GEMM_ROWWISE_MAX_K
#define RLX_GEMM_ROWWISE_MAX_K 32
#endif
/* Column block: X is packed RLX_GEMM_NC columns (4 panels) at a time. */
#ifndef RLX_GEMM_NC
#define RLX_GEMM_NC 64
#endif

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

/* The conv epilogue of one full-width tile, applied in registers before the
 * store (last K block only): act in RLX_ACT_NONE/RELU/CLIP; res: the
 * residual at the tile's first element (rows ldc apart, y's layout) or NULL;
 * b[r]: row r's bias.  The arithmetic is rlx_epilogue_span_body's, in its
 * order: (y + b) + res, or y + b when there is no residual and b != 0, then
 * the activation with the same comparisons (NaN passes through, relu maps
 * -0 to +0). */
typedef struct {
    int act;
    float alpha, beta;
    const float* res;
    ptrdiff_t ldc;
    float b[RLX_GEMM_MR];
} rlx_gemm_tile_ep;

static inline int rlx_gemm_ep_in_tile(const rlx_epilogue* e) {
    return e->act == RLX_ACT_NONE || e->act == RLX_ACT_RELU || e->act == RLX_ACT_CLIP;
}

/* The in-register epilogue of the tile at ct in c (mr rows from row i0,
 * `cols` columns wide), its residual range checked in debug builds. */
static inline rlx_gemm_tile_ep rlx_gemm_tile_ep_at(const rlx_epilogue* ep, const float* ep_bias, ptrdiff_t i0,
                                                   ptrdiff_t mr, const float* c, const float* ct, ptrdiff_t ldc,
                                                   ptrdiff_t cols) {
    rlx_gemm_tile_ep te = {ep->act, ep->alpha, ep->beta, NULL, ldc, {0}};
    if (ep->res) {
        RLX_CHECK_RANGE(ct - c, (ct - c) + (mr - 1) * ldc + cols, ep->res_len, "gemm epilogue residual");
        te.res = ep->res + (ct - c);
    }
    for (ptrdiff_t r = 0; r < mr; ++r) te.b[r] = ep_bias ? ep_bias[i0 + r] : 0.0f;
    return te;
}

#if RLX_X86_DISPATCH
RLX_INLINE_AVX2 __m256 rlx_gemm_ep_vec(__m256 v, const rlx_gemm_tile_ep* te, int r, int j) {
    const float b = te->b[r];
    if (te->res)
        v = _mm256_add_ps(_mm256_add_ps(v, _mm256_set1_ps(b)), _mm256_loadu_ps(te->res + r * te->ldc + j));
    else if (b != 0.0f)
        v = _mm256_add_ps(v, _mm256_set1_ps(b));
    if (te->act == RLX_ACT_RELU) {
        /* v <= 0 ? 0 : v */
        v = _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ), v);
    } else if (te->act == RLX_ACT_CLIP) {
        /* max_ps(a, v) = a > v ? a : v; min_ps(a, v) = a < v ? a : v */
        v = _mm256_max_ps(_mm256_set1_ps(te->alpha), v);
        v = _mm256_min_ps(_mm256_set1_ps(te->beta), v);
    }
    return v;
}

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
        if (te) {                                                                \
            a##r##0 = rlx_gemm_ep_vec(a##r##0, te, r, 0);                        \
            if (nv > 1) a##r##1 = rlx_gemm_ep_vec(a##r##1, te, r, 8);            \
        }                                                                        \
        _mm256_storeu_ps(c + (r) * ldc, a##r##0);                                \
        if (nv > 1) _mm256_storeu_ps(c + (r) * ldc + 8, a##r##1);                \
    }

RLX_TARGET_AVX2 RLX_INLINE void rlx_gemm_tile_avx2_body(const int mr, const int nv,
                                                        const float* restrict wp,
                                                        const float* restrict xp, ptrdiff_t ldxp,
                                                        ptrdiff_t kc, float* restrict c, ptrdiff_t ldc,
                                                        const float* restrict init, int from_c,
                                                        const rlx_gemm_tile_ep* te) {
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
        const float* init, int from_c, const rlx_gemm_tile_ep* te) {                              \
        rlx_gemm_tile_avx2_body(MR_, NV_, wp, xp, ldxp, kc, c, ldc, init, from_c, te);            \
    }
RLX_GEMM_TILE_AVX2(1, 1) RLX_GEMM_TILE_AVX2(2, 1) RLX_GEMM_TILE_AVX2(3, 1)
RLX_GEMM_TILE_AVX2(4, 1) RLX_GEMM_TILE_AVX2(5, 1) RLX_GEMM_TILE_AVX2(6, 1)
RLX_GEMM_TILE_AVX2(1, 2) RLX_GEMM_TILE_AVX2(2, 2) RLX_GEMM_TILE_AVX2(3, 2)
RLX_GEMM_TILE_AVX2(4, 2) RLX_GEMM_TILE_AVX2(5, 2) RLX_GEMM_TILE_AVX2(6, 2)
#undef RLX_GEMM_TILE_AVX2

typedef void (*rlx_gemm_tile_fn)(const float*, const float*, ptrdiff_t, ptrdiff_t, float*, ptrdiff_t,
                                 const float*, int, const rlx_gemm_tile_ep*);
static const rlx_gemm_tile_fn rlx_gemm_tiles_avx2[2][RLX_GEMM_MR + 1] = {
    {NULL, rlx_gemm_tile_avx2_1_1, rlx_gemm_tile_avx2_2_1, rlx_gemm_tile_avx2_3_1,
     rlx_gemm_tile_avx2_4_1, rlx_gemm_tile_avx2_5_1, rlx_gemm_tile_avx2_6_1},
    {NULL, rlx_gemm_tile_avx2_1_2, rlx_gemm_tile_avx2_2_2, rlx_gemm_tile_avx2_3_2,
     rlx_gemm_tile_avx2_4_2, rlx_gemm_tile_avx2_5_2, rlx_gemm_tile_avx2_6_2}};
#endif

#if RLX_X86_DISPATCH
/* ---- AVX-512 tiles: mr x 16*np, np = 2 or 4 16-column panels of X -------
 * np*mr zmm accumulators (12 or 24 at mr = 6); per k one broadcast of W per
 * row and np loads of X: columns 16q.. at xp + q*x2 (the next packed panel,
 * kc*16 floats on, or 16 floats on in a plain X).  Four panels take four
 * loads of X and six broadcasts per 24 FMAs, where two take eight per 12 (a
 * core whose load ports a neighbour shares runs the FMAs less starved).
 * Each element is the AVX2 tile's chain of FMAs, and the epilogue runs on
 * each 8-column quarter as there, so the bits are the AVX2 tiles'. */
#define RLX_GEMMZ_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_GEMMZ_DECL(r)                                                        \
    __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = _mm512_setzero_ps(),         \
           a##r##2 = _mm512_setzero_ps(), a##r##3 = _mm512_setzero_ps();
#define RLX_GEMMZ_INIT(r)                                                        \
    if (mr > r) {                                                                \
        if (from_c) {                                                            \
            a##r##0 = _mm512_loadu_ps(c + (r) * ldc);                            \
            a##r##1 = _mm512_loadu_ps(c + (r) * ldc + 16);                       \
            if (np > 2) a##r##2 = _mm512_loadu_ps(c + (r) * ldc + 32);           \
            if (np > 2) a##r##3 = _mm512_loadu_ps(c + (r) * ldc + 48);           \
        } else {                                                                 \
            a##r##0 = a##r##1 = a##r##2 = a##r##3 = _mm512_set1_ps(init[r]);     \
        }                                                                        \
    }
#define RLX_GEMMZ_FMA(r)                                                         \
    if (mr > r) {                                                                \
        const __m512 wv = _mm512_set1_ps(wp[r]);                                 \
        a##r##0 = _mm512_fmadd_ps(wv, x0, a##r##0);                              \
        a##r##1 = _mm512_fmadd_ps(wv, x1, a##r##1);                              \
        if (np > 2) a##r##2 = _mm512_fmadd_ps(wv, x2v, a##r##2);                 \
        if (np > 2) a##r##3 = _mm512_fmadd_ps(wv, x3, a##r##3);                  \
    }
#define RLX_GEMMZ_STORE(r)                                                       \
    if (mr > r) {                                                                \
        rlx_gemm2_store(c + (r) * ldc, a##r##0, te, r, 0);                       \
        rlx_gemm2_store(c + (r) * ldc + 16, a##r##1, te, r, 16);                 \
        if (np > 2) rlx_gemm2_store(c + (r) * ldc + 32, a##r##2, te, r, 32);     \
        if (np > 2) rlx_gemm2_store(c + (r) * ldc + 48, a##r##3, te, r, 48);     \
    }

/* 16 columns of row r (from column j of the tile) to c, after the epilogue
 * when te is set */
RLX_INLINE_AVX512 void rlx_gemm2_store(float* c, __m512 v, const rlx_gemm_tile_ep* te, int r, int j) {
    if (!te) {
        _mm512_storeu_ps(c, v);
        return;
    }
    _mm256_storeu_ps(c, rlx_gemm_ep_vec(_mm512_castps512_ps256(v), te, r, j));
    _mm256_storeu_ps(c + 8, rlx_gemm_ep_vec(_mm512_extractf32x8_ps(v, 1), te, r, j + 8));
}

RLX_INLINE_AVX512 void rlx_gemm_tilez_body(const int mr, const int np, const float* restrict wp,
                                           const float* restrict xp, ptrdiff_t x2, ptrdiff_t ldxp, ptrdiff_t kc,
                                           float* restrict c, ptrdiff_t ldc, const float* restrict init,
                                           int from_c, const rlx_gemm_tile_ep* te) {
    RLX_GEMMZ_ROWS(RLX_GEMMZ_DECL)
    RLX_GEMMZ_ROWS(RLX_GEMMZ_INIT)
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m512 x0 = _mm512_loadu_ps(xp), x1 = _mm512_loadu_ps(xp + x2);
        const __m512 x2v = np > 2 ? _mm512_loadu_ps(xp + 2 * x2) : x0;
        const __m512 x3 = np > 2 ? _mm512_loadu_ps(xp + 3 * x2) : x0;
        RLX_GEMMZ_ROWS(RLX_GEMMZ_FMA)
        xp += ldxp;
        wp += RLX_GEMM_MR;
    }
    RLX_GEMMZ_ROWS(RLX_GEMMZ_STORE)
}
#undef RLX_GEMMZ_DECL
#undef RLX_GEMMZ_INIT
#undef RLX_GEMMZ_FMA
#undef RLX_GEMMZ_STORE
#undef RLX_GEMMZ_ROWS

#define RLX_GEMM_TILEZ(MR_, NP_)                                                                   \
    RLX_TARGET_AVX512 static void rlx_gemm_tile##NP_##_##MR_(                                      \
        const float* wp, const float* xp, ptrdiff_t x2, ptrdiff_t ldxp, ptrdiff_t kc, float* c,    \
        ptrdiff_t ldc, const float* init, int from_c, const rlx_gemm_tile_ep* te) {                \
        rlx_gemm_tilez_body(MR_, NP_, wp, xp, x2, ldxp, kc, c, ldc, init, from_c, te);             \
    }
#define RLX_GEMM_TILESZ(NP_)                                                                       \
    RLX_GEMM_TILEZ(1, NP_) RLX_GEMM_TILEZ(2, NP_) RLX_GEMM_TILEZ(3, NP_)                           \
    RLX_GEMM_TILEZ(4, NP_) RLX_GEMM_TILEZ(5, NP_) RLX_GEMM_TILEZ(6, NP_)
RLX_GEMM_TILESZ(2) RLX_GEMM_TILESZ(4)
#undef RLX_GEMM_TILESZ
#undef RLX_GEMM_TILEZ
typedef void (*rlx_gemm_tile2_fn)(const float*, const float*, ptrdiff_t, ptrdiff_t, ptrdiff_t, float*, ptrdiff_t,
                                  const float*, int, const rlx_gemm_tile_ep*);
static const rlx_gemm_tile2_fn rlx_gemm_tiles2[RLX_GEMM_MR + 1] = {
    NULL, rlx_gemm_tile2_1, rlx_gemm_tile2_2, rlx_gemm_tile2_3, rlx_gemm_tile2_4, rlx_gemm_tile2_5, rlx_gemm_tile2_6};
static const rlx_gemm_tile2_fn rlx_gemm_tiles4[RLX_GEMM_MR + 1] = {
    NULL, rlx_gemm_tile4_1, rlx_gemm_tile4_2, rlx_gemm_tile4_3, rlx_gemm_tile4_4, rlx_gemm_tile4_5, rlx_gemm_tile4_6};
#endif

#if RLX_X86_DISPATCH
/* ---- AVX-512 one-panel tile over two panels of W: (6 + mb) x 16 ---------
 * A lone 16-column panel of X (a Winograd F(4x4) GEMM of 16 tiles, the last
 * panel of a column block) against panels p and p + 1 of W (6 and mb <= 6
 * rows, mb = 0: panel p alone): one zmm of X per k and a broadcast of W per
 * row, 12 accumulators.  The AVX2 tile it replaces ran 8-lane FMAs (half
 * this core's width), 12 of them per eight loads.  Each element keeps its
 * chain of FMAs, and the epilogue runs on 8-column halves as there, so the
 * bits are the AVX2 tile's. */
#define RLX_GEMM1_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_GEMM1_DECL(r) __m512 a##r = _mm512_setzero_ps(), b##r = _mm512_setzero_ps();
#define RLX_GEMM1_INIT(r)                                                        \
    if (from_c) {                                                                \
        a##r = _mm512_loadu_ps(ca + (r) * ldc);                                  \
        if (mb > r) b##r = _mm512_loadu_ps(cb + (r) * ldc);                      \
    } else {                                                                     \
        a##r = _mm512_set1_ps(init_a[r]);                                        \
        if (mb > r) b##r = _mm512_set1_ps(init_b[r]);                            \
    }
#define RLX_GEMM1_FMA(r)                                                         \
    a##r = _mm512_fmadd_ps(_mm512_set1_ps(wa[r]), xv, a##r);                     \
    if (mb > r) b##r = _mm512_fmadd_ps(_mm512_set1_ps(wb[r]), xv, b##r);
#define RLX_GEMM1_STORE(r)                                                       \
    rlx_gemm2_store(ca + (r) * ldc, a##r, te_a, r, 0);                           \
    if (mb > r) rlx_gemm2_store(cb + (r) * ldc, b##r, te_b, r, 0);

RLX_INLINE_AVX512 void rlx_gemm_tile1w_body(const int mb, const float* restrict wa, const float* restrict wb,
                                            const float* restrict xp, ptrdiff_t ldxp, ptrdiff_t kc,
                                            float* restrict ca, float* restrict cb, ptrdiff_t ldc,
                                            const float* restrict init_a, const float* restrict init_b,
                                            int from_c, const rlx_gemm_tile_ep* te_a,
                                            const rlx_gemm_tile_ep* te_b) {
    RLX_GEMM1_ROWS(RLX_GEMM1_DECL)
    RLX_GEMM1_ROWS(RLX_GEMM1_INIT)
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m512 xv = _mm512_loadu_ps(xp);
        RLX_GEMM1_ROWS(RLX_GEMM1_FMA)
        xp += ldxp;
        wa += RLX_GEMM_MR;
        wb += RLX_GEMM_MR;
    }
    RLX_GEMM1_ROWS(RLX_GEMM1_STORE)
}
#undef RLX_GEMM1_DECL
#undef RLX_GEMM1_INIT
#undef RLX_GEMM1_FMA
#undef RLX_GEMM1_STORE
#undef RLX_GEMM1_ROWS

#define RLX_GEMM_TILE1W(MB_)                                                                              \
    RLX_TARGET_AVX512 static void rlx_gemm_tile1w_##MB_(                                                  \
        const float* wa, const float* wb, const float* xp, ptrdiff_t ldxp, ptrdiff_t kc, float* ca,       \
        float* cb, ptrdiff_t ldc, const float* init_a, const float* init_b, int from_c,                   \
        const rlx_gemm_tile_ep* te_a, const rlx_gemm_tile_ep* te_b) {                                     \
        rlx_gemm_tile1w_body(MB_, wa, wb, xp, ldxp, kc, ca, cb, ldc, init_a, init_b, from_c, te_a, te_b); \
    }
RLX_GEMM_TILE1W(0) RLX_GEMM_TILE1W(1) RLX_GEMM_TILE1W(2) RLX_GEMM_TILE1W(3) RLX_GEMM_TILE1W(4)
RLX_GEMM_TILE1W(5) RLX_GEMM_TILE1W(6)
#undef RLX_GEMM_TILE1W
typedef void (*rlx_gemm_tile1w_fn)(const float*, const float*, const float*, ptrdiff_t, ptrdiff_t, float*, float*,
                                   ptrdiff_t, const float*, const float*, int, const rlx_gemm_tile_ep*,
                                   const rlx_gemm_tile_ep*);
static const rlx_gemm_tile1w_fn rlx_gemm_tiles1w[RLX_GEMM_MR + 1] = {
    rlx_gemm_tile1w_0, rlx_gemm_tile1w_1, rlx_gemm_tile1w_2, rlx_gemm_tile1w_3,
    rlx_gemm_tile1w_4, rlx_gemm_tile1w_5, rlx_gemm_tile1w_6};
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
    if (level) rlx_gemm_tiles_avx2[nr > 8][mr](wp, xp, ldxp, kc, dst, ld, init, from_c, NULL);
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

/* Pack a block of X: ncols (<= RLX_GEMM_NC) columns as consecutive NR-column
 * panels, xp[(q*kc + kk)*NR + j] = X[kk, q*NR + j], zero past ncols.  Each
 * row of X is read as one contiguous run of ncols floats: packing one
 * 16-column panel at a time read 64 bytes from each of kc rows (kc streams
 * the hardware prefetchers cannot follow). */
RLX_INLINE void rlx_gemm_pack_x_block(const float* restrict x, ptrdiff_t ldx, ptrdiff_t kc,
                                      ptrdiff_t ncols, float* restrict xp) {
    const ptrdiff_t full = ncols / RLX_GEMM_NR, rem = ncols - full * RLX_GEMM_NR;
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const float* src = x + kk * ldx;
        for (ptrdiff_t q = 0; q < full; ++q)
            memcpy(xp + (q * kc + kk) * RLX_GEMM_NR, src + q * RLX_GEMM_NR, RLX_GEMM_NR * sizeof(float));
        if (rem) {
            float* dst = xp + (full * kc + kk) * RLX_GEMM_NR;
            memcpy(dst, src + full * RLX_GEMM_NR, (size_t)rem * sizeof(float));
            memset(dst + rem, 0, (size_t)(RLX_GEMM_NR - rem) * sizeof(float));
        }
    }
}

/* Prefetch into L2 the kc rows of ncols floats, ldx apart, at x: the block
 * of a plain X packed next, fetched while the tiles run on this one.  Its
 * rows are short runs a whole row apart (a 1x1 conv's channels), more
 * streams than the hardware prefetchers follow, so a block read from memory
 * would otherwise wait on each line. */
RLX_INLINE void rlx_gemm_prefetch_x_block(const float* x, ptrdiff_t ldx, ptrdiff_t kc, ptrdiff_t ncols) {
    for (ptrdiff_t kk = 0; kk < kc; ++kk)
        for (ptrdiff_t j = 0; j < ncols; j += RLX_GEMM_NR) __builtin_prefetch(x + kk * ldx + j, 0, 2);
}

/* Where the GEMM's X comes from.  Plain: X[k, j] = x[x_off + k*ldx + j].
 * Implicit (offs != NULL): the conv's patch matrix without building it --
 * column j is output pixel p0 + j = (od, oh, ow) of an output of rows of
 * w_out pixels, h_out rows per depth slice, and
 * X[k, j] = x[offs[k] + (od*hq + oh)*wq + ow], x being the conv input laid
 * out so that every tap k reads a plane of rows wq apart, hq rows per slice
 * (src/rlx_implicit.h; a 2-D conv has one slice). */
typedef struct {
    const float* x;
    ptrdiff_t x_len;
    ptrdiff_t x_off, ldx;              /* plain */
    const ptrdiff_t* offs;             /* implicit: K row offsets, or NULL */
    ptrdiff_t p0, w_out, wq, h_out, hq; /* implicit */
} rlx_gemm_src;

/* One piece of an implicit column block: `len` columns from column j (never
 * crossing a 16-column panel or an output row) read from src + offs[k]. */
typedef struct {
    ptrdiff_t j, src, len;
} rlx_gemm_piece;

/* Pieces of the column block [jb, jb + ncols) of an implicit source; at most
 * ncols + ncols / NR + 1 of them (returned count). */
static ptrdiff_t rlx_gemm_implicit_pieces(const rlx_gemm_src* s, ptrdiff_t jb, ptrdiff_t ncols,
                                          rlx_gemm_piece* pieces) {
    ptrdiff_t n = 0, j = 0;
    ptrdiff_t pix = s->p0 + jb;
    ptrdiff_t oh = pix / s->w_out, ow = pix - oh * s->w_out;    /* oh counts rows over all slices */
    while (j < ncols) {
        ptrdiff_t len = ncols - j;
        const ptrdiff_t to_panel = RLX_GEMM_NR - (j % RLX_GEMM_NR), to_row = s->w_out - ow;
        if (len > to_panel) len = to_panel;
        if (len > to_row) len = to_row;
        pieces[n].j = j;
        pieces[n].src = ((oh / s->h_out) * s->hq + oh % s->h_out) * s->wq + ow;
        pieces[n].len = len;
        ++n;
        j += len;
        ow += len;
        if (ow == s->w_out) {
            ow = 0;
            ++oh;
        }
    }
    return n;
}

/* rlx_gemm_pack_x_block for an implicit source: rows k0 .. k0 + kc - 1. */
RLX_INLINE void rlx_gemm_pack_implicit(const rlx_gemm_src* s, const rlx_gemm_piece* pieces, ptrdiff_t npieces,
                                       ptrdiff_t k0, ptrdiff_t kc, ptrdiff_t ncols, float* restrict xp) {
    const ptrdiff_t full = ncols / RLX_GEMM_NR, rem = ncols - full * RLX_GEMM_NR;
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const ptrdiff_t base = s->offs[k0 + kk];
        for (ptrdiff_t i = 0; i < npieces; ++i) {
            const rlx_gemm_piece* pc = pieces + i;
            const ptrdiff_t q = pc->j / RLX_GEMM_NR, lane = pc->j - q * RLX_GEMM_NR;
            RLX_CHECK_RANGE(base + pc->src, base + pc->src + pc->len, s->x_len, "implicit gemm X");
            float* dst = xp + (q * kc + kk) * RLX_GEMM_NR + lane;
            if (pc->len == RLX_GEMM_NR)      /* a whole panel row: a fixed-size copy the compiler inlines */
                memcpy(dst, s->x + base + pc->src, RLX_GEMM_NR * sizeof(float));
            else
                memcpy(dst, s->x + base + pc->src, (size_t)pc->len * sizeof(float));
        }
        if (rem)
            memset(xp + (full * kc + kk) * RLX_GEMM_NR + rem, 0, (size_t)(RLX_GEMM_NR - rem) * sizeof(float));
    }
}

/* C[0:m, c_off + j] = sum_k W[0:m, k] X[k, j] (+ bias) for j in [0, n), X from `src`.
 * wp: this group's packed weight (rlx_gemm_packed_floats(m, k) floats);
 * bias: m floats or NULL, the accumulators' start.  ep: NULL, or the conv
 * epilogue y = act(y + ep_bias[i] + residual) (ep_bias: m floats or NULL),
 * the same arithmetic as a separate pass over the output: relu, clip or no
 * activation in registers on each full-width tile of the last K block
 * before its store (a 16->96 1x1 conv at 112x112 then writes its 4.8 MB
 * output once instead of writing, re-reading and writing it), on the stored
 * rows of narrower tiles, and other activations on each block of
 * RLX_GEMM_NC columns of an M block once its last K block is done.  Lengths
 * are for the debug-build range checks.
 *
 * Loops, outer to inner: M blocks of RLX_GEMM_MC_PANELS panels of W, column
 * blocks of RLX_GEMM_NC, K blocks of RLX_GEMM_KC (pack that block of X), the
 * block's 16-column panels (one stays in L1), the M block's panels of W (in
 * L2).  A plain X of at most RLX_GEMM_ROWWISE_MAX_K rows is one K block: its
 * column blocks are as wide as the packing buffer holds (1024 columns at
 * K = 16), and within one the panels of W go two at a time, outside the
 * 16-column panels.  Either way each element's sum is the same FMA chain. */
static void rlx_gemm_conv_src(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                              const rlx_gemm_src* src,
                              float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                              const float* bias, const rlx_epilogue* ep, const float* ep_bias) {
    float xp[RLX_GEMM_KC * RLX_GEMM_NC] __attribute__((aligned(64)));
    rlx_gemm_piece pieces[RLX_GEMM_NC + RLX_GEMM_NC / RLX_GEMM_NR + 1];
    ptrdiff_t npieces = 0;
    const int level = rlx_simd_level();
    const ptrdiff_t panels = (m + RLX_GEMM_MR - 1) / RLX_GEMM_MR;
    /* relu/clip/none (with bias and residual) run in the tile, in registers
     * (AVX2 only); other activations on each finished block of columns */
    const int in_tile = ep && level && rlx_gemm_ep_in_tile(ep);
    /* few rows of W (a plain X, AVX2): the tiles read X in place */
    const int in_place = level && !src->offs && m <= RLX_GEMM_INPLACE_MAX_M;
    if (m <= 0 || n <= 0) return;
    RLX_CHECK_RANGE(0, rlx_gemm_packed_floats(m, k), wp_len, "gemm packed weight");
    RLX_CHECK_RANGE(c_off, c_off + (m - 1) * ldc + n, c_len, "gemm C");
    if (k <= 0) {
        for (ptrdiff_t i = 0; i < m; ++i)
            for (ptrdiff_t j = 0; j < n; ++j) c[c_off + i * ldc + j] = bias ? bias[i] : 0.0f;
        if (ep)
            for (ptrdiff_t i = 0; i < m; ++i)
                rlx_epilogue_span(c, c_len, c_off + i * ldc, n, ep_bias ? ep_bias[i] : 0.0f, ep, level);
        return;
    }
    if (!src->offs) RLX_CHECK_RANGE(src->x_off, src->x_off + (k - 1) * src->ldx + n, src->x_len, "gemm X");
    /* A plain X of at most RLX_GEMM_ROWWISE_MAX_K rows, packed: column blocks
     * as wide as xp holds, each swept by two panels of W (12 rows of C) at a
     * time, so that C is written in long runs of few rows */
    const int rowwise = !src->offs && !in_place && k <= RLX_GEMM_ROWWISE_MAX_K;
    const ptrdiff_t ncb = rowwise ? RLX_GEMM_KC * RLX_GEMM_NC / k / RLX_GEMM_NR * RLX_GEMM_NR : RLX_GEMM_NC;
    const ptrdiff_t pstep = rowwise ? 2 : RLX_GEMM_MC_PANELS;
    for (ptrdiff_t pb = 0; pb < panels; pb += RLX_GEMM_MC_PANELS) {
        const ptrdiff_t pe = pb + RLX_GEMM_MC_PANELS < panels ? pb + RLX_GEMM_MC_PANELS : panels;
        for (ptrdiff_t jb = 0; jb < n; jb += ncb) {
            const ptrdiff_t ncols = n - jb < ncb ? n - jb : ncb;
            if (src->offs) npieces = rlx_gemm_implicit_pieces(src, jb, ncols, pieces);
            for (ptrdiff_t k0 = 0; k0 < k; k0 += RLX_GEMM_KC) {
                const ptrdiff_t kc = k - k0 < RLX_GEMM_KC ? k - k0 : RLX_GEMM_KC;
                const int unpacked = in_place && ncols % RLX_GEMM_NR == 0;
                const ptrdiff_t ldxp = unpacked ? src->ldx : RLX_GEMM_NR;
                if (src->offs)
                    rlx_gemm_pack_implicit(src, pieces, npieces, k0, kc, ncols, xp);
                else if (!unpacked) {
                    rlx_gemm_pack_x_block(src->x + src->x_off + k0 * src->ldx + jb, src->ldx, kc, ncols, xp);
                    /* the next block of this M block's pass over X */
                    if (k0 + RLX_GEMM_KC < k) {
                        const ptrdiff_t kn = k - k0 - RLX_GEMM_KC < RLX_GEMM_KC ? k - k0 - RLX_GEMM_KC : RLX_GEMM_KC;
                        rlx_gemm_prefetch_x_block(src->x + src->x_off + (k0 + RLX_GEMM_KC) * src->ldx + jb,
                                                  src->ldx, kn, ncols);
                    } else if (jb + ncb < n) {
                        const ptrdiff_t nn = n - jb - ncb < ncb ? n - jb - ncb : ncb;
                        rlx_gemm_prefetch_x_block(src->x + src->x_off + jb + ncb, src->ldx,
                                                  k < RLX_GEMM_KC ? k : RLX_GEMM_KC, nn);
                    }
                }
                /* panels of W qb..qe at a time over the whole column block (see
                 * RLX_GEMM_ROWWISE_MAX_K); otherwise the M block at once */
                for (ptrdiff_t qb = pb; qb < pe; qb += pstep) {
                    const ptrdiff_t qe = qb + pstep < pe ? qb + pstep : pe;
                    for (ptrdiff_t j0 = 0; j0 < ncols; j0 += RLX_GEMM_NR) {
                        const ptrdiff_t nr = ncols - j0 < RLX_GEMM_NR ? ncols - j0 : RLX_GEMM_NR;
                        const float* xq = unpacked ? src->x + src->x_off + k0 * src->ldx + jb + j0 : xp + j0 * kc;
#if RLX_X86_DISPATCH
                        if (level > 1 && ncols - j0 >= 2 * RLX_GEMM_NR) {
                            /* two full panels of X: the AVX-512 tile; four: its
                             * four-panel form */
                            const ptrdiff_t x2 = unpacked ? RLX_GEMM_NR : RLX_GEMM_NR * kc;
                            const int ep_here = in_tile && k0 + kc == k;
                            const int quad = ncols - j0 >= 4 * RLX_GEMM_NR;
                            const ptrdiff_t width = (quad ? 4 : 2) * RLX_GEMM_NR;
                            for (ptrdiff_t p = qb; p < qe; ++p) {
                                const ptrdiff_t i0 = p * RLX_GEMM_MR;
                                const ptrdiff_t mr = m - i0 < RLX_GEMM_MR ? m - i0 : RLX_GEMM_MR;
                                float init[RLX_GEMM_MR] = {0};
                                if (bias)
                                    for (ptrdiff_t r = 0; r < mr; ++r) init[r] = bias[i0 + r];
                                float* ct = c + c_off + i0 * ldc + jb + j0;
                                rlx_gemm_tile_ep te = {0, 0.0f, 0.0f, NULL, ldc, {0}};
                                if (ep_here) te = rlx_gemm_tile_ep_at(ep, ep_bias, i0, mr, c, ct, ldc, width);
                                (quad ? rlx_gemm_tiles4 : rlx_gemm_tiles2)[mr](wp + (p * k + k0) * RLX_GEMM_MR, xq, x2,
                                                                               ldxp, kc, ct, ldc, init, k0 > 0,
                                                                               ep_here ? &te : NULL);
                            }
                            j0 += width - RLX_GEMM_NR;      /* the tile's other panels */
                            continue;
                        }
#endif
                        ptrdiff_t pstart = qb;
#if RLX_X86_DISPATCH
                        if (level > 1 && nr == RLX_GEMM_NR) {
                            /* one full panel of X: panels of W two at a time */
                            const int ep_here = in_tile && k0 + kc == k;
                            ptrdiff_t p = qb;
                            for (; p < qe && m - p * RLX_GEMM_MR >= RLX_GEMM_MR; p += 2) {
                                const ptrdiff_t i0 = p * RLX_GEMM_MR;
                                const ptrdiff_t mb = p + 1 >= qe ? 0 : m - i0 - RLX_GEMM_MR < RLX_GEMM_MR
                                                                           ? m - i0 - RLX_GEMM_MR : RLX_GEMM_MR;
                                float init_a[RLX_GEMM_MR] = {0}, init_b[RLX_GEMM_MR] = {0};
                                if (bias)
                                    for (ptrdiff_t r = 0; r < RLX_GEMM_MR; ++r) {
                                        init_a[r] = bias[i0 + r];
                                        if (r < mb) init_b[r] = bias[i0 + RLX_GEMM_MR + r];
                                    }
                                float* ca = c + c_off + i0 * ldc + jb + j0;
                                float* cb = ca + RLX_GEMM_MR * ldc;
                                rlx_gemm_tile_ep te_a = {0, 0.0f, 0.0f, NULL, ldc, {0}}, te_b = te_a;
                                if (ep_here) {
                                    te_a = rlx_gemm_tile_ep_at(ep, ep_bias, i0, RLX_GEMM_MR, c, ca, ldc, RLX_GEMM_NR);
                                    if (mb)
                                        te_b = rlx_gemm_tile_ep_at(ep, ep_bias, i0 + RLX_GEMM_MR, mb, c, cb, ldc,
                                                                   RLX_GEMM_NR);
                                }
                                const float* wa = wp + (p * k + k0) * RLX_GEMM_MR;
                                rlx_gemm_tiles1w[mb](wa, mb ? wa + k * RLX_GEMM_MR : wa, xq, ldxp, kc, ca, cb, ldc,
                                                     init_a, init_b, k0 > 0, ep_here ? &te_a : NULL,
                                                     ep_here ? &te_b : NULL);
                            }
                            /* a last panel of fewer than 6 rows alone: the tiles below */
                            pstart = p;
                        } else if (level > 1) {
                            /* the last nr < 16 columns (X zero past them): the same
                             * tile on 16-column copies of C's rows, nr columns
                             * stored (the AVX2 remainder tile runs 8-lane FMAs;
                             * 1x1 convs at 13x13 and 14x14 1.02-1.09x, Winograd
                             * F(4x4) 128->128 at 28x28, 49 tiles, 1.02-1.03x) */
                            ptrdiff_t p = qb;
                            for (; p < qe && m - p * RLX_GEMM_MR >= RLX_GEMM_MR; p += 2) {
                                const ptrdiff_t i0 = p * RLX_GEMM_MR;
                                const ptrdiff_t mb = p + 1 >= qe ? 0 : m - i0 - RLX_GEMM_MR < RLX_GEMM_MR
                                                                           ? m - i0 - RLX_GEMM_MR : RLX_GEMM_MR;
                                float ta[RLX_GEMM_MR * RLX_GEMM_NR] __attribute__((aligned(64)));
                                float tb[RLX_GEMM_MR * RLX_GEMM_NR] __attribute__((aligned(64)));
                                float init_a[RLX_GEMM_MR] = {0}, init_b[RLX_GEMM_MR] = {0};
                                float* ca = c + c_off + i0 * ldc + jb + j0;
                                const ptrdiff_t rows = RLX_GEMM_MR + mb;
                                if (bias)
                                    for (ptrdiff_t r = 0; r < RLX_GEMM_MR; ++r) {
                                        init_a[r] = bias[i0 + r];
                                        if (r < mb) init_b[r] = bias[i0 + RLX_GEMM_MR + r];
                                    }
                                if (k0 > 0) {
                                    memset(ta, 0, sizeof(ta));
                                    memset(tb, 0, sizeof(tb));
                                    for (ptrdiff_t r = 0; r < rows; ++r)
                                        memcpy((r < RLX_GEMM_MR ? ta : tb) + (r % RLX_GEMM_MR) * RLX_GEMM_NR,
                                               ca + r * ldc, (size_t)nr * sizeof(float));
                                }
                                const float* wa = wp + (p * k + k0) * RLX_GEMM_MR;
                                rlx_gemm_tiles1w[mb](wa, mb ? wa + k * RLX_GEMM_MR : wa, xq, ldxp, kc, ta, tb,
                                                     RLX_GEMM_NR, init_a, init_b, k0 > 0, NULL, NULL);
                                for (ptrdiff_t r = 0; r < rows; ++r) {
                                    memcpy(ca + r * ldc, (r < RLX_GEMM_MR ? ta : tb) + (r % RLX_GEMM_MR) * RLX_GEMM_NR,
                                           (size_t)nr * sizeof(float));
                                    if (in_tile && k0 + kc == k)   /* a narrow tile: its rows as spans */
                                        rlx_epilogue_span(c, c_len, (ca - c) + r * ldc, nr,
                                                          ep_bias ? ep_bias[i0 + r] : 0.0f, ep, level);
                                }
                            }
                            pstart = p;
                        }
#endif
                        for (ptrdiff_t p = pstart; p < qe; ++p) {
                            const ptrdiff_t i0 = p * RLX_GEMM_MR;
                            const ptrdiff_t mr = m - i0 < RLX_GEMM_MR ? m - i0 : RLX_GEMM_MR;
                            float init[RLX_GEMM_MR] = {0};
                            if (bias)
                                for (ptrdiff_t r = 0; r < mr; ++r) init[r] = bias[i0 + r];
                            float* ct = c + c_off + i0 * ldc + jb + j0;
#if RLX_X86_DISPATCH
                            if (in_tile && k0 + kc == k && nr == RLX_GEMM_NR) {
                                /* full-width tile of the last K block: epilogue in registers */
                                rlx_gemm_tile_ep te = rlx_gemm_tile_ep_at(ep, ep_bias, i0, mr, c, ct, ldc, RLX_GEMM_NR);
                                rlx_gemm_tiles_avx2[1][mr](wp + (p * k + k0) * RLX_GEMM_MR, xq, ldxp, kc, ct,
                                                           ldc, init, k0 > 0, &te);
                                continue;
                            }
#endif
                            rlx_gemm_tile(level, wp + (p * k + k0) * RLX_GEMM_MR, xq, ldxp, kc,
                                          ct, ldc, mr, nr, init, k0 > 0);
                            if (in_tile && k0 + kc == k)   /* a narrow tile: its rows as spans */
                                for (ptrdiff_t r = 0; r < mr; ++r)
                                    rlx_epilogue_span(c, c_len, (ct - c) + r * ldc, nr,
                                                      ep_bias ? ep_bias[i0 + r] : 0.0f, ep, level);
                        }
                }
                }
            }
            if (ep && !in_tile) {
                const ptrdiff_t i0 = pb * RLX_GEMM_MR;
                const ptrdiff_t i1 = pe * RLX_GEMM_MR < m ? pe * RLX_GEMM_MR : m;
                rlx_epilogue_rows(c, c_len, c_off + i0 * ldc + jb, ldc, i1 - i0, ncols,
                                  ep_bias ? ep_bias + i0 : NULL, ep, level);
            }
        }
    }
}


/* rlx_gemm_conv_src over X[x_off + k*ldx + j]. */
static void rlx_gemm_conv_ep(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                             const float* x, ptrdiff_t x_len, ptrdiff_t x_off, ptrdiff_t ldx,
                             float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                             const float* bias, const rlx_epilogue* ep, const float* ep_bias) {
    const rlx_gemm_src src = {x, x_len, x_off, ldx, NULL, 0, 1, 1, 1, 1};
    rlx_gemm_conv_src(wp, wp_len, m, k, &src, c, c_len, c_off, ldc, n, bias, ep, ep_bias);
}

/* rlx_gemm_conv_src over the implicit patch matrix of output pixels
 * [p0, p0 + n) (see rlx_gemm_src). */
static void rlx_gemm_conv_implicit(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                                   const float* x, ptrdiff_t x_len, const ptrdiff_t* offs, ptrdiff_t p0,
                                   ptrdiff_t w_out, ptrdiff_t wq, ptrdiff_t h_out, ptrdiff_t hq,
                                   float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                                   const rlx_epilogue* ep, const float* ep_bias) {
    const rlx_gemm_src src = {x, x_len, 0, 0, offs, p0, w_out, wq, h_out, hq};
    rlx_gemm_conv_src(wp, wp_len, m, k, &src, c, c_len, c_off, ldc, n, NULL, ep, ep_bias);
}

/* ---- implicit source read in place (no X packing) ------------------------
 * For convs whose GEMM has few rows (M = C_out/groups up to a few dozen:
 * conv3d and conv-transpose phases with 16 or 32 channels, the stem), packing
 * X costs as much as the FMAs, since each packed float then serves only
 * M / 6 tiles.  This variant reads the 16 columns of each tile straight from
 * the phase-split input copy, X row k at x + offs[k] + base: within one
 * output row the 16 inputs of one tap are consecutive floats.  A tile may
 * run past the end of an output row: its columns then continue on the
 * copy's row grid (wq floats per row), and the columns that fall between
 * w_out and wq (or past the slice's rows, or past the chunk) are computed
 * and dropped.  So a tile reads at most 15 floats past the copy's last valid
 * input: the copy carries RLX_IMPLICIT_SLACK zero floats at its end.
 *
 * Each output element is bias (or 0) plus the FMAs of k = 0..K-1 in order
 * (no K blocking: the accumulators never leave the registers), the same
 * chain as rlx_gemm_conv_src's, so both variants give the same bits. */
#define RLX_IMPLICIT_SLACK 16

RLX_INLINE void rlx_gemm_dtile_base(int mr, const float* restrict wp, const float* restrict xb,
                                    const ptrdiff_t* restrict offs, ptrdiff_t k, float* restrict c,
                                    ptrdiff_t ldc, const float* restrict init, const float* restrict ain) {
    float acc[RLX_GEMM_MR][RLX_GEMM_NR];
    for (int r = 0; r < RLX_GEMM_MR; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] = ain && r < mr ? ain[r * RLX_GEMM_NR + j] : init[r];
    for (ptrdiff_t kk = 0; kk < k; ++kk) {
        const float* xk = xb + offs[kk];
        for (int r = 0; r < RLX_GEMM_MR; ++r) {
            const float wv = wp[kk * RLX_GEMM_MR + r];
            for (int j = 0; j < RLX_GEMM_NR; ++j) acc[r][j] += wv * xk[j];
        }
    }
    for (int r = 0; r < mr; ++r)
        for (int j = 0; j < RLX_GEMM_NR; ++j) c[r * ldc + j] = acc[r][j];
}

#if RLX_X86_DISPATCH
#define RLX_DTILE_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_DTILE_DECL(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
#define RLX_DTILE_INIT(r)                                                        \
    if (mr > r) {                                                                \
        if (ain) {                                                               \
            a##r##0 = _mm256_load_ps(ain + (r) * RLX_GEMM_NR);                   \
            a##r##1 = _mm256_load_ps(ain + (r) * RLX_GEMM_NR + 8);               \
        } else {                                                                 \
            a##r##0 = a##r##1 = _mm256_set1_ps(init[r]);                         \
        }                                                                        \
    }
#define RLX_DTILE_FMA(r)                                                         \
    if (mr > r) {                                                                \
        const __m256 wv = _mm256_broadcast_ss(wp + (r));                         \
        a##r##0 = _mm256_fmadd_ps(wv, x0, a##r##0);                              \
        a##r##1 = _mm256_fmadd_ps(wv, x1, a##r##1);                              \
    }
#define RLX_DTILE_STORE(r)                                                       \
    if (mr > r) {                                                                \
        if (te) {                                                                \
            a##r##0 = rlx_gemm_ep_vec(a##r##0, te, r, 0);                        \
            a##r##1 = rlx_gemm_ep_vec(a##r##1, te, r, 8);                        \
        }                                                                        \
        _mm256_storeu_ps(c + (r) * ldc, a##r##0);                                \
        _mm256_storeu_ps(c + (r) * ldc + 8, a##r##1);                            \
    }

RLX_TARGET_AVX2 RLX_INLINE void rlx_gemm_dtile_avx2_body(const int mr, const float* restrict wp,
                                                         const float* restrict xb,
                                                         const ptrdiff_t* restrict offs, ptrdiff_t k,
                                                         float* restrict c, ptrdiff_t ldc,
                                                         const float* restrict init,
                                                         const float* restrict ain,
                                                         const rlx_gemm_tile_ep* te) {
    RLX_DTILE_ROWS(RLX_DTILE_DECL)
    RLX_DTILE_ROWS(RLX_DTILE_INIT)
    for (ptrdiff_t kk = 0; kk < k; ++kk) {
        const float* xk = xb + offs[kk];
        const __m256 x0 = _mm256_loadu_ps(xk);
        const __m256 x1 = _mm256_loadu_ps(xk + 8);
        RLX_DTILE_ROWS(RLX_DTILE_FMA)
        wp += RLX_GEMM_MR;
    }
    RLX_DTILE_ROWS(RLX_DTILE_STORE)
}
#undef RLX_DTILE_DECL
#undef RLX_DTILE_INIT
#undef RLX_DTILE_FMA
#undef RLX_DTILE_STORE
#undef RLX_DTILE_ROWS

/* the tile of ISA (avx2, avx512) for a constant row count, under TARGET */
#define RLX_DTILE_INST(ISA, TARGET, MR_)                                                          \
    TARGET static void rlx_gemm_dtile_##ISA##_##MR_(const float* wp, const float* xb,             \
                                                    const ptrdiff_t* offs, ptrdiff_t k, float* c, \
                                                    ptrdiff_t ldc, const float* init,             \
                                                    const float* ain, const rlx_gemm_tile_ep* te) { \
        rlx_gemm_dtile_##ISA##_body(MR_, wp, xb, offs, k, c, ldc, init, ain, te);                 \
    }
#define RLX_DTILE_ALL(ISA, TARGET)                                                                \
    RLX_DTILE_INST(ISA, TARGET, 1) RLX_DTILE_INST(ISA, TARGET, 2) RLX_DTILE_INST(ISA, TARGET, 3)  \
    RLX_DTILE_INST(ISA, TARGET, 4) RLX_DTILE_INST(ISA, TARGET, 5) RLX_DTILE_INST(ISA, TARGET, 6)
RLX_DTILE_ALL(avx2, RLX_TARGET_AVX2)

typedef void (*rlx_gemm_dtile_fn)(const float*, const float*, const ptrdiff_t*, ptrdiff_t, float*, ptrdiff_t,
                                  const float*, const float*, const rlx_gemm_tile_ep*);
static const rlx_gemm_dtile_fn rlx_gemm_dtiles_avx2[RLX_GEMM_MR + 1] = {
    NULL, rlx_gemm_dtile_avx2_1, rlx_gemm_dtile_avx2_2, rlx_gemm_dtile_avx2_3,
    rlx_gemm_dtile_avx2_4, rlx_gemm_dtile_avx2_5, rlx_gemm_dtile_avx2_6};

/* The AVX-512 form of the tile: one zmm of 16 columns per row, so 16-lane
 * FMAs where the AVX2 tile runs two 8-lane ones (this core's FMAs are 16
 * lanes wide); the same chain of FMAs per element, and the epilogue on
 * 8-column halves as there, so the same bits. */
#define RLX_DTILEZ_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_DTILEZ_DECL(r) __m512 a##r = _mm512_setzero_ps();
#define RLX_DTILEZ_INIT(r)                                                       \
    if (mr > r) a##r = ain ? _mm512_loadu_ps(ain + (r) * RLX_GEMM_NR) : _mm512_set1_ps(init[r]);
#define RLX_DTILEZ_FMA(r)                                                        \
    if (mr > r) a##r = _mm512_fmadd_ps(_mm512_set1_ps(wp[r]), xv, a##r);
#define RLX_DTILEZ_STORE(r)                                                      \
    if (mr > r) rlx_gemm2_store(c + (r) * ldc, a##r, te, r, 0);
RLX_INLINE_AVX512 void rlx_gemm_dtile_avx512_body(const int mr, const float* restrict wp, const float* restrict xb,
                                                  const ptrdiff_t* restrict offs, ptrdiff_t k, float* restrict c,
                                                  ptrdiff_t ldc, const float* restrict init,
                                                  const float* restrict ain, const rlx_gemm_tile_ep* te) {
    RLX_DTILEZ_ROWS(RLX_DTILEZ_DECL)
    RLX_DTILEZ_ROWS(RLX_DTILEZ_INIT)
    for (ptrdiff_t kk = 0; kk < k; ++kk) {
        const __m512 xv = _mm512_loadu_ps(xb + offs[kk]);
        RLX_DTILEZ_ROWS(RLX_DTILEZ_FMA)
        wp += RLX_GEMM_MR;
    }
    RLX_DTILEZ_ROWS(RLX_DTILEZ_STORE)
}
#undef RLX_DTILEZ_DECL
#undef RLX_DTILEZ_INIT
#undef RLX_DTILEZ_FMA
#undef RLX_DTILEZ_STORE
#undef RLX_DTILEZ_ROWS
RLX_DTILE_ALL(avx512, RLX_TARGET_AVX512)
#undef RLX_DTILE_ALL
#undef RLX_DTILE_INST
static const rlx_gemm_dtile_fn rlx_gemm_dtiles_avx512[RLX_GEMM_MR + 1] = {
    NULL, rlx_gemm_dtile_avx512_1, rlx_gemm_dtile_avx512_2, rlx_gemm_dtile_avx512_3,
    rlx_gemm_dtile_avx512_4, rlx_gemm_dtile_avx512_5, rlx_gemm_dtile_avx512_6};

/* Store the segments of a tile computed into tmp[mr][16]: segment s writes
 * tile columns [seg[s][0], + seg[s][2]) of row r to C column seg[s][1] of
 * row r (c: the tile's first row at column 0, rows ldc apart), through
 * masked vector moves, with the conv epilogue te (or NULL) on the way: the
 * arithmetic of rlx_gemm_ep_vec, the residual read masked at the same
 * places as C. */
RLX_TARGET_AVX2 static void rlx_gemm_store_segments_avx2(const float* tmp, int mr, const ptrdiff_t (*seg)[3],
                                                         ptrdiff_t nseg, float* c, ptrdiff_t ldc,
                                                         const rlx_gemm_tile_ep* te) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (ptrdiff_t s = 0; s < nseg; ++s) {
        const ptrdiff_t t0 = seg[s][0], len = seg[s][2], shift = seg[s][1] - t0;
        for (int v = 0; v < 2; ++v) {
            const ptrdiff_t lo = t0 - 8 * v, hi = t0 + len - 8 * v;     /* live lanes [lo, hi) of vector v */
            if (hi <= 0 || lo >= 8) continue;
            const __m256i mask = _mm256_and_si256(_mm256_cmpgt_epi32(lane, _mm256_set1_epi32((int)lo - 1)),
                                                  _mm256_cmpgt_epi32(_mm256_set1_epi32((int)hi), lane));
            for (int r = 0; r < mr; ++r) {
                __m256 val = _mm256_load_ps(tmp + r * RLX_GEMM_NR + 8 * v);
                const ptrdiff_t at = r * ldc + shift + 8 * v;             /* C offset of lane 0 */
                if (te) {
                    const float b = te->b[r];
                    if (te->res)
                        val = _mm256_add_ps(_mm256_add_ps(val, _mm256_set1_ps(b)),
                                            _mm256_maskload_ps(te->res + at, mask));
                    else if (b != 0.0f)
                        val = _mm256_add_ps(val, _mm256_set1_ps(b));
                    if (te->act == RLX_ACT_RELU) {
                        val = _mm256_andnot_ps(_mm256_cmp_ps(val, _mm256_setzero_ps(), _CMP_LE_OQ), val);
                    } else if (te->act == RLX_ACT_CLIP) {
                        val = _mm256_max_ps(_mm256_set1_ps(te->alpha), val);
                        val = _mm256_min_ps(_mm256_set1_ps(te->beta), val);
                    }
                }
                _mm256_maskstore_ps(c + at, mask, val);
            }
        }
    }
}
#endif

/* The in-place variant walks K in blocks of RLX_GEMM_DIRECT_KC: one block of
 * a tile's X rows (KC x 64 bytes, 128 lines when unaligned) and of the M
 * block's W panels stay in L1 while every panel passes; the panels' partial
 * sums wait in a stack buffer between K blocks (stored and reloaded exactly,
 * so the chain of FMAs per element is unchanged). */
#ifndef RLX_GEMM_DIRECT_KC
#define RLX_GEMM_DIRECT_KC 256
#endif
#define RLX_GEMM_DIRECT_MAX_PANELS 16

/* Panels of W per M block of the in-place variant: the block's packed
 * weight (mc * MR * K floats) stays in L2 while the column tiles pass. */
static inline ptrdiff_t rlx_gemm_direct_mc_panels(ptrdiff_t k) {
    const ptrdiff_t mc = (48 * 1024) / (RLX_GEMM_MR * (k > 0 ? k : 1));
    return mc < 1 ? 1 : mc > RLX_GEMM_DIRECT_MAX_PANELS ? RLX_GEMM_DIRECT_MAX_PANELS : mc;
}

/* rlx_gemm_conv_implicit's result (same arguments, same bits) with X read in
 * place; x must hold RLX_IMPLICIT_SLACK readable floats past the copy.
 *
 * cst: NULL (C's columns are the output pixels in order), or the strides
 * (depth slice, row, column) at which output pixel (od, oh, ow) lands in a
 * row of C: C[i, od*cst[0] + oh*cst[1] + ow*cst[2]] (from c_off + i*ldc) --
 * one phase of a transposed conv written straight into its strided place in
 * the output.  With cst the epilogue may only add ep_bias (no activation,
 * no residual): the caller checks that. */
static void rlx_gemm_conv_implicit_direct(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                                          const float* x, ptrdiff_t x_len, const ptrdiff_t* offs, ptrdiff_t p0,
                                          ptrdiff_t w_out, ptrdiff_t wq, ptrdiff_t h_out, ptrdiff_t hq,
                                          float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                                          const rlx_epilogue* ep, const float* ep_bias, const ptrdiff_t* cst) {
    const int level = rlx_simd_level();
    const ptrdiff_t panels = (m + RLX_GEMM_MR - 1) / RLX_GEMM_MR;
    const ptrdiff_t mcp = rlx_gemm_direct_mc_panels(k);
#if RLX_X86_DISPATCH
    const rlx_gemm_dtile_fn* dtiles = level > 1 ? rlx_gemm_dtiles_avx512 : rlx_gemm_dtiles_avx2;
#endif
    const ptrdiff_t slice = h_out * w_out;
    const int in_tile = ep && level && rlx_gemm_ep_in_tile(ep);   /* else spans per M block */
    ptrdiff_t omin = 0, omax = 0;
    float tmp[RLX_GEMM_MR * RLX_GEMM_NR] __attribute__((aligned(32)));
    /* partial sums of the M block's panels between K blocks */
    float acc[RLX_GEMM_DIRECT_MAX_PANELS * RLX_GEMM_MR * RLX_GEMM_NR] __attribute__((aligned(32)));
    /* a tile's column segments: (first tile column, first C column, length) */
    ptrdiff_t seg[RLX_GEMM_NR][3];
    if (m <= 0 || n <= 0) return;
    RLX_CHECK_RANGE(0, rlx_gemm_packed_floats(m, k), wp_len, "gemm packed weight");
    if (!cst) RLX_CHECK_RANGE(c_off, c_off + (m - 1) * ldc + n, c_len, "gemm C");
    if (k <= 0) {                       /* not reached from a conv (K >= 1); as rlx_gemm_conv_src */
        if (cst) abort();
        for (ptrdiff_t i = 0; i < m; ++i) {
            for (ptrdiff_t j = 0; j < n; ++j) c[c_off + i * ldc + j] = 0.0f;
            if (ep) rlx_epilogue_span(c, c_len, c_off + i * ldc, n, ep_bias ? ep_bias[i] : 0.0f, ep, level);
        }
        return;
    }
    for (ptrdiff_t kk = 0; kk < k; ++kk) {
        if (offs[kk] < omin || kk == 0) omin = offs[kk];
        if (offs[kk] > omax || kk == 0) omax = offs[kk];
    }
    (void)omin;
    (void)omax;
    (void)x_len;
    for (ptrdiff_t pb = 0; pb < panels; pb += mcp) {
        const ptrdiff_t pe = pb + mcp < panels ? pb + mcp : panels;
        ptrdiff_t done = 0;                             /* columns of C finished */
        while (done < n) {
            /* the tile starts at output pixel p0 + done = (od, oh, ow) */
            const ptrdiff_t pix = p0 + done;
            const ptrdiff_t od = pix / slice, rem = pix - od * slice;
            const ptrdiff_t oh = rem / w_out, ow = rem - oh * w_out;
            const ptrdiff_t base = (od * hq + oh) * wq + ow;
            /* segments: runs of an output row, until 16 tile columns, the
             * slice's last row or the chunk's end */
            ptrdiff_t nseg = 0, tcol = 0, cols = 0, r = oh, col = ow;
            while (tcol < RLX_GEMM_NR && done + cols < n && r < h_out) {
                ptrdiff_t len = w_out - col;
                if (len > RLX_GEMM_NR - tcol) len = RLX_GEMM_NR - tcol;
                if (len > n - done - cols) len = n - done - cols;
                seg[nseg][0] = tcol;
                seg[nseg][1] = cst ? od * cst[0] + r * cst[1] + col * cst[2] : done + cols;
                seg[nseg][2] = len;
                if (cst)
                    RLX_CHECK_RANGE(c_off + seg[nseg][1], c_off + (m - 1) * ldc + seg[nseg][1] + (len - 1) * cst[2] + 1,
                                    c_len, "gemm C (strided)");
                ++nseg;
                cols += len;
                tcol += len + (wq - w_out);             /* the row's pad columns are skipped */
                col = 0;
                ++r;
            }
            RLX_CHECK_RANGE(omin + base, omax + base + RLX_GEMM_NR, x_len, "implicit direct X");
            const int whole = nseg == 1 && cols == RLX_GEMM_NR && (!cst || cst[2] == 1);
            const int scatter = cst && !whole;         /* strided columns: scalar stores */
            for (ptrdiff_t k0 = 0; k0 < k; k0 += RLX_GEMM_DIRECT_KC) {
                const ptrdiff_t kc = k - k0 < RLX_GEMM_DIRECT_KC ? k - k0 : RLX_GEMM_DIRECT_KC;
                const int last = k0 + kc == k;
                for (ptrdiff_t p = pb; p < pe; ++p) {
                    const ptrdiff_t i0 = p * RLX_GEMM_MR;
                    const int mr = (int)(m - i0 < RLX_GEMM_MR ? m - i0 : RLX_GEMM_MR);
                    float init[RLX_GEMM_MR] = {0};
                    const float* wpp = wp + (p * k + k0) * RLX_GEMM_MR;
                    const ptrdiff_t* ok = offs + k0;
                    float* ap = acc + (p - pb) * RLX_GEMM_MR * RLX_GEMM_NR;   /* this panel's partial sums */
                    const float* ain = k0 ? ap : NULL;
                    float* ct = c + c_off + i0 * ldc + seg[0][1];
                    if (last && scatter) {
#if RLX_X86_DISPATCH
                        if (level) dtiles[mr](wpp, x + base, ok, kc, tmp, RLX_GEMM_NR, init, ain, NULL);
                        else
#endif
                            rlx_gemm_dtile_base(mr, wpp, x + base, ok, kc, tmp, RLX_GEMM_NR, init, ain);
                        /* y + b when b != 0: the epilogue's arithmetic without activation or residual */
                        for (int rr = 0; rr < mr; ++rr) {
                            const float b = ep && ep_bias ? ep_bias[i0 + rr] : 0.0f;
                            for (ptrdiff_t s = 0; s < nseg; ++s) {
                                float* dst = c + c_off + (i0 + rr) * ldc + seg[s][1];
                                const float* src = tmp + rr * RLX_GEMM_NR + seg[s][0];
                                const ptrdiff_t st = cst[2];
                                if (b != 0.0f)
                                    for (ptrdiff_t l = 0; l < seg[s][2]; ++l) dst[l * st] = src[l] + b;
                                else
                                    for (ptrdiff_t l = 0; l < seg[s][2]; ++l) dst[l * st] = src[l];
                            }
                        }
                        continue;
                    }
#if RLX_X86_DISPATCH
                    if (level) {
                        if (!last) {
                            dtiles[mr](wpp, x + base, ok, kc, ap, RLX_GEMM_NR, init, ain, NULL);
                            continue;
                        }
                        rlx_gemm_tile_ep te = {0, 0.0f, 0.0f, NULL, ldc, {0}};
                        if (in_tile) {
                            te.act = ep->act;
                            te.alpha = ep->alpha;
                            te.beta = ep->beta;
                            for (int rr = 0; rr < mr; ++rr) te.b[rr] = ep_bias ? ep_bias[i0 + rr] : 0.0f;
                        }
                        if (whole) {
                            if (in_tile && ep->res) {
                                RLX_CHECK_RANGE(ct - c, (ct - c) + (mr - 1) * ldc + RLX_GEMM_NR, ep->res_len,
                                                "gemm epilogue residual");
                                te.res = ep->res + (ct - c);
                            }
                            dtiles[mr](wpp, x + base, ok, kc, ct, ldc, init, ain, in_tile ? &te : NULL);
                            continue;
                        }
                        dtiles[mr](wpp, x + base, ok, kc, tmp, RLX_GEMM_NR, init, ain, NULL);
                        if (in_tile && ep->res) {
                            RLX_CHECK_RANGE(c_off + i0 * ldc, c_off + (i0 + mr - 1) * ldc + n, ep->res_len,
                                            "gemm epilogue residual");
                            te.res = ep->res + c_off + i0 * ldc;
                        }
                        rlx_gemm_store_segments_avx2(tmp, mr, (const ptrdiff_t(*)[3])seg, nseg, c + c_off + i0 * ldc,
                                                     ldc, in_tile ? &te : NULL);
                        continue;
                    }
#endif
                    if (!last) {
                        rlx_gemm_dtile_base(mr, wpp, x + base, ok, kc, ap, RLX_GEMM_NR, init, ain);
                        continue;
                    }
                    rlx_gemm_dtile_base(mr, wpp, x + base, ok, kc, tmp, RLX_GEMM_NR, init, ain);
                    if (cst && ep) {          /* a whole contiguous tile of strided output: its bias */
                        for (int rr = 0; rr < mr; ++rr) {
                            const float b = ep_bias ? ep_bias[i0 + rr] : 0.0f;
                            if (b != 0.0f)
                                for (int j = 0; j < RLX_GEMM_NR; ++j) tmp[rr * RLX_GEMM_NR + j] += b;
                        }
                    }
                    for (int rr = 0; rr < mr; ++rr)
                        for (ptrdiff_t s = 0; s < nseg; ++s)
                            memcpy(c + c_off + (i0 + rr) * ldc + seg[s][1], tmp + rr * RLX_GEMM_NR + seg[s][0],
                                   (size_t)seg[s][2] * sizeof(float));
                }
            }
            done += cols;
        }
        if (ep && !in_tile && !cst) {
            const ptrdiff_t i1 = pe * RLX_GEMM_MR < m ? pe * RLX_GEMM_MR : m;
            for (ptrdiff_t i = pb * RLX_GEMM_MR; i < i1; ++i)
                rlx_epilogue_span(c, c_len, c_off + i * ldc, n, ep_bias ? ep_bias[i] : 0.0f, ep, level);
        }
    }
}

static void rlx_gemm_conv(const float* wp, ptrdiff_t wp_len, ptrdiff_t m, ptrdiff_t k,
                          const float* x, ptrdiff_t x_len, ptrdiff_t x_off, ptrdiff_t ldx,
                          float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                          const float* bias) {
    rlx_gemm_conv_ep(wp, wp_len, m, k, x, x_len, x_off, ldx, c, c_len, c_off, ldc, n, bias, NULL, NULL);
}

/* ---- small planes: output channels across the register tile -------------
 * On planes of few pixels (7x7 = 49) 16-pixel panels leave a large N
 * remainder (49 = 3 x 16 + 1 computes 56 columns).  This variant swaps the
 * roles: the tile is 6 pixels x 16 output channels, X is broadcast straight
 * from its rows (no packing) and the weight is packed at compile time into
 * panels of 16 output channels, wq[(q*K + k)*16 + j] = W[q*16 + j, k] (zero
 * past M), so only the pixel count has a remainder (49 = 8 x 6 + 1).  Each
 * output element is the same chain of FMAs over k = 0..K-1 from 0 as in the
 * row-panel kernel above, so both give the same bits. */
#define RLX_GEMM_CH 16
#ifndef RLX_GEMM_CH_L1_FLOATS
#define RLX_GEMM_CH_L1_FLOATS 2048
#endif

static inline ptrdiff_t rlx_gemm_ch_packed_floats(ptrdiff_t m, ptrdiff_t k) {
    return (m + RLX_GEMM_CH - 1) / RLX_GEMM_CH * RLX_GEMM_CH * k;
}

static void rlx_gemm_ch_pack_w(const float* w, ptrdiff_t ldw, ptrdiff_t m, ptrdiff_t k, float* wq) {
    ptrdiff_t panels = (m + RLX_GEMM_CH - 1) / RLX_GEMM_CH;
    for (ptrdiff_t q = 0; q < panels; ++q)
        for (ptrdiff_t kk = 0; kk < k; ++kk)
            for (ptrdiff_t j = 0; j < RLX_GEMM_CH; ++j) {
                ptrdiff_t row = q * RLX_GEMM_CH + j;
                wq[(q * k + kk) * RLX_GEMM_CH + j] = row < m ? w[row * ldw + kk] : 0.0f;
            }
}

/* acc[r][j] (pixels r < mr, channels j < 16, at t[r*16 + j]) over kc steps:
 * from 0, or from t when from_t. */
RLX_INLINE void rlx_gemm_ch_tile_base(int mr, const float* restrict wq, const float* restrict x,
                                      ptrdiff_t ldx, ptrdiff_t kc, float* restrict t, int from_t) {
    for (int r = 0; r < mr; ++r) {
        float acc[RLX_GEMM_CH];
        for (int j = 0; j < RLX_GEMM_CH; ++j) acc[j] = from_t ? t[r * RLX_GEMM_CH + j] : 0.0f;
        for (ptrdiff_t kk = 0; kk < kc; ++kk) {
            const float xv = x[kk * ldx + r];
            for (int j = 0; j < RLX_GEMM_CH; ++j) acc[j] += xv * wq[kk * RLX_GEMM_CH + j];
        }
        for (int j = 0; j < RLX_GEMM_CH; ++j) t[r * RLX_GEMM_CH + j] = acc[j];
    }
}

#if RLX_X86_DISPATCH
#define RLX_GEMM_CH_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_GEMM_CH_DECL(r) __m256 a##r##0 = _mm256_setzero_ps(), a##r##1 = _mm256_setzero_ps();
#define RLX_GEMM_CH_INIT(r)                                                      \
    if (mr > r && from_t) {                                                      \
        a##r##0 = _mm256_loadu_ps(t + (r) * RLX_GEMM_CH);                        \
        a##r##1 = _mm256_loadu_ps(t + (r) * RLX_GEMM_CH + 8);                    \
    }
#define RLX_GEMM_CH_FMA(r)                                                       \
    if (mr > r) {                                                                \
        const __m256 xv = _mm256_broadcast_ss(x + (r));                          \
        a##r##0 = _mm256_fmadd_ps(xv, w0, a##r##0);                              \
        a##r##1 = _mm256_fmadd_ps(xv, w1, a##r##1);                              \
    }
#define RLX_GEMM_CH_STORE(r)                                                     \
    if (mr > r) {                                                                \
        _mm256_storeu_ps(t + (r) * RLX_GEMM_CH, a##r##0);                        \
        _mm256_storeu_ps(t + (r) * RLX_GEMM_CH + 8, a##r##1);                    \
    }
RLX_TARGET_AVX2 RLX_INLINE void rlx_gemm_ch_tile_avx2_body(const int mr, const float* restrict wq,
                                                           const float* restrict x, ptrdiff_t ldx,
                                                           ptrdiff_t kc, float* restrict t, int from_t) {
    RLX_GEMM_CH_ROWS(RLX_GEMM_CH_DECL)
    RLX_GEMM_CH_ROWS(RLX_GEMM_CH_INIT)
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m256 w0 = _mm256_loadu_ps(wq);
        const __m256 w1 = _mm256_loadu_ps(wq + 8);
        RLX_GEMM_CH_ROWS(RLX_GEMM_CH_FMA)
        x += ldx;
        wq += RLX_GEMM_CH;
    }
    RLX_GEMM_CH_ROWS(RLX_GEMM_CH_STORE)
}
#undef RLX_GEMM_CH_DECL
#undef RLX_GEMM_CH_INIT
#undef RLX_GEMM_CH_FMA
#undef RLX_GEMM_CH_STORE
#undef RLX_GEMM_CH_ROWS

#define RLX_GEMM_CH_TILE_AVX2(MR_)                                                                 \
    RLX_TARGET_AVX2 static void rlx_gemm_ch_tile_avx2_##MR_(const float* wq, const float* x,        \
                                                           ptrdiff_t ldx, ptrdiff_t kc, float* t,   \
                                                           int from_t) {                            \
        rlx_gemm_ch_tile_avx2_body(MR_, wq, x, ldx, kc, t, from_t);                                 \
    }
RLX_GEMM_CH_TILE_AVX2(1) RLX_GEMM_CH_TILE_AVX2(2) RLX_GEMM_CH_TILE_AVX2(3)
RLX_GEMM_CH_TILE_AVX2(4) RLX_GEMM_CH_TILE_AVX2(5) RLX_GEMM_CH_TILE_AVX2(6)
#undef RLX_GEMM_CH_TILE_AVX2
typedef void (*rlx_gemm_ch_tile_fn)(const float*, const float*, ptrdiff_t, ptrdiff_t, float*, int);
static const rlx_gemm_ch_tile_fn rlx_gemm_ch_tiles_avx2[RLX_GEMM_MR + 1] = {
    NULL, rlx_gemm_ch_tile_avx2_1, rlx_gemm_ch_tile_avx2_2, rlx_gemm_ch_tile_avx2_3,
    rlx_gemm_ch_tile_avx2_4, rlx_gemm_ch_tile_avx2_5, rlx_gemm_ch_tile_avx2_6};
#endif

#if RLX_X86_DISPATCH
/* AVX-512: the same tile over nq (1, 2 or 4) adjacent channel panels, one
 * zmm of each panel's 16 channels per pixel (24 accumulators at 6 pixels x
 * 4 panels: four loads of W and six broadcasts of X per 24 FMAs, where the
 * AVX2 tile has eight 8-lane loads and broadcasts per 12 8-lane FMAs).
 * Panel i's weights are at wq + i*ws, its transposed block at t[i]. */
#define RLX_GEMM_CHZ_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define RLX_GEMM_CHZ_DECL(r)                                                     \
    __m512 a##r##0 = _mm512_setzero_ps(), a##r##1 = _mm512_setzero_ps(),         \
           a##r##2 = _mm512_setzero_ps(), a##r##3 = _mm512_setzero_ps();
#define RLX_GEMM_CHZ_INIT(r)                                                     \
    if (mr > r && from_t) {                                                      \
        a##r##0 = _mm512_loadu_ps(t0 + (r) * RLX_GEMM_CH);                       \
        if (nq > 1) a##r##1 = _mm512_loadu_ps(t1 + (r) * RLX_GEMM_CH);           \
        if (nq > 2) a##r##2 = _mm512_loadu_ps(t2 + (r) * RLX_GEMM_CH);           \
        if (nq > 3) a##r##3 = _mm512_loadu_ps(t3 + (r) * RLX_GEMM_CH);           \
    }
#define RLX_GEMM_CHZ_FMA(r)                                                      \
    if (mr > r) {                                                                \
        const __m512 xv = _mm512_set1_ps(x[r]);                                  \
        a##r##0 = _mm512_fmadd_ps(xv, w0, a##r##0);                              \
        if (nq > 1) a##r##1 = _mm512_fmadd_ps(xv, w1, a##r##1);                  \
        if (nq > 2) a##r##2 = _mm512_fmadd_ps(xv, w2, a##r##2);                  \
        if (nq > 3) a##r##3 = _mm512_fmadd_ps(xv, w3, a##r##3);                  \
    }
#define RLX_GEMM_CHZ_STORE(r)                                                    \
    if (mr > r) {                                                                \
        _mm512_storeu_ps(t0 + (r) * RLX_GEMM_CH, a##r##0);                       \
        if (nq > 1) _mm512_storeu_ps(t1 + (r) * RLX_GEMM_CH, a##r##1);           \
        if (nq > 2) _mm512_storeu_ps(t2 + (r) * RLX_GEMM_CH, a##r##2);           \
        if (nq > 3) _mm512_storeu_ps(t3 + (r) * RLX_GEMM_CH, a##r##3);           \
    }
RLX_INLINE_AVX512 void rlx_gemm_chz_tile_body(const int mr, const int nq, const float* restrict wq, ptrdiff_t ws,
                                              const float* restrict x, ptrdiff_t ldx, ptrdiff_t kc,
                                              float* restrict t0, float* restrict t1, float* restrict t2,
                                              float* restrict t3, int from_t) {
    RLX_GEMM_CHZ_ROWS(RLX_GEMM_CHZ_DECL)
    RLX_GEMM_CHZ_ROWS(RLX_GEMM_CHZ_INIT)
    for (ptrdiff_t kk = 0; kk < kc; ++kk) {
        const __m512 w0 = _mm512_loadu_ps(wq);
        const __m512 w1 = nq > 1 ? _mm512_loadu_ps(wq + ws) : w0;
        const __m512 w2 = nq > 2 ? _mm512_loadu_ps(wq + 2 * ws) : w0;
        const __m512 w3 = nq > 3 ? _mm512_loadu_ps(wq + 3 * ws) : w0;
        RLX_GEMM_CHZ_ROWS(RLX_GEMM_CHZ_FMA)
        x += ldx;
        wq += RLX_GEMM_CH;
    }
    RLX_GEMM_CHZ_ROWS(RLX_GEMM_CHZ_STORE)
}
#undef RLX_GEMM_CHZ_DECL
#undef RLX_GEMM_CHZ_INIT
#undef RLX_GEMM_CHZ_FMA
#undef RLX_GEMM_CHZ_STORE
#undef RLX_GEMM_CHZ_ROWS

#define RLX_GEMM_CHZ_TILE(MR_, NQ_)                                                                       \
    RLX_TARGET_AVX512 static void rlx_gemm_chz_tile_##MR_##_##NQ_(                                        \
        const float* wq, ptrdiff_t ws, const float* x, ptrdiff_t ldx, ptrdiff_t kc, float* t0, float* t1, \
        float* t2, float* t3, int from_t) {                                                               \
        rlx_gemm_chz_tile_body(MR_, NQ_, wq, ws, x, ldx, kc, t0, t1, t2, t3, from_t);                     \
    }
#define RLX_GEMM_CHZ_TILES(NQ_)                                                                           \
    RLX_GEMM_CHZ_TILE(1, NQ_) RLX_GEMM_CHZ_TILE(2, NQ_) RLX_GEMM_CHZ_TILE(3, NQ_)                         \
    RLX_GEMM_CHZ_TILE(4, NQ_) RLX_GEMM_CHZ_TILE(5, NQ_) RLX_GEMM_CHZ_TILE(6, NQ_)
RLX_GEMM_CHZ_TILES(1) RLX_GEMM_CHZ_TILES(2) RLX_GEMM_CHZ_TILES(4)
#undef RLX_GEMM_CHZ_TILES
#undef RLX_GEMM_CHZ_TILE
typedef void (*rlx_gemm_chz_tile_fn)(const float*, ptrdiff_t, const float*, ptrdiff_t, ptrdiff_t, float*, float*,
                                     float*, float*, int);
/* [nq == 1, 2, 4][mr] */
static const rlx_gemm_chz_tile_fn rlx_gemm_chz_tiles[3][RLX_GEMM_MR + 1] = {
    {NULL, rlx_gemm_chz_tile_1_1, rlx_gemm_chz_tile_2_1, rlx_gemm_chz_tile_3_1, rlx_gemm_chz_tile_4_1,
     rlx_gemm_chz_tile_5_1, rlx_gemm_chz_tile_6_1},
    {NULL, rlx_gemm_chz_tile_1_2, rlx_gemm_chz_tile_2_2, rlx_gemm_chz_tile_3_2, rlx_gemm_chz_tile_4_2,
     rlx_gemm_chz_tile_5_2, rlx_gemm_chz_tile_6_2},
    {NULL, rlx_gemm_chz_tile_1_4, rlx_gemm_chz_tile_2_4, rlx_gemm_chz_tile_3_4, rlx_gemm_chz_tile_4_4,
     rlx_gemm_chz_tile_5_4, rlx_gemm_chz_tile_6_4}};
#endif

/* K block of the channel-panel kernel for a plane of n pixels: the block of
 * X rows every 6-pixel tile of a panel reads (kc rows of n floats) stays in
 * half of L1D, at least 16 and at most 256 rows.  Any K block gives the same
 * bits: the accumulators only leave the registers for t and come back. */
static inline ptrdiff_t rlx_gemm_ch_kc(ptrdiff_t n) {
    ptrdiff_t kc = RLX_GEMM_CH_L1_FLOATS / (n > 0 ? n : 1) / 8 * 8;
    return kc < 16 ? 16 : kc > 256 ? 256 : kc;
}

/* Largest plane (pixels) the channel-panel variant takes: its transposed
 * accumulator block lives on the stack. */
#define RLX_GEMM_CH_MAX_N 256

/* C rows [q0*16, q1*16) (clipped to m) of C[0:m, c_off + j] = sum_k W[., k]
 * X[x_off + k*ldx + j], j < n <= RLX_GEMM_CH_MAX_N, from the channel-panel
 * packed weight wq (rlx_gemm_ch_packed_floats(m, k) floats), then the conv
 * epilogue ep (or NULL) with ep_bias (m floats, or NULL) on each finished
 * row.  Per channel panel: every K block of every 6-pixel tile into a
 * transposed block t[n][16] (stays in L1), then t is written out to the 16
 * rows of C. */
static void rlx_gemm_conv_ch(const float* wq, ptrdiff_t wq_len, ptrdiff_t m, ptrdiff_t k,
                             const float* x, ptrdiff_t x_len, ptrdiff_t x_off, ptrdiff_t ldx,
                             float* c, ptrdiff_t c_len, ptrdiff_t c_off, ptrdiff_t ldc, ptrdiff_t n,
                             ptrdiff_t q0, ptrdiff_t q1, const rlx_epilogue* ep, const float* ep_bias) {
    /* one transposed block per panel of a group of up to 4 (the AVX-512 tiles) */
    float t[4][(RLX_GEMM_CH_MAX_N + RLX_GEMM_MR) * RLX_GEMM_CH] __attribute__((aligned(64)));
    const int level = rlx_simd_level();
    const ptrdiff_t panels = (m + RLX_GEMM_CH - 1) / RLX_GEMM_CH;
    const ptrdiff_t kcb = rlx_gemm_ch_kc(n);
    /* The pixels in ceil(n / 6) tiles of nearly equal size (49 = 4 x 6 +
     * 5 x 5, not 8 x 6 + 1): a tile of one or two pixels has too few
     * accumulator chains to hide the FMA latency and costs nearly as much
     * as a full one.  A pixel's sum is the same in any tile. */
    const ptrdiff_t ntiles = (n + RLX_GEMM_MR - 1) / RLX_GEMM_MR;
    const ptrdiff_t tile_base = ntiles ? n / ntiles : 0, tile_extra = ntiles ? n % ntiles : 0;
    if (q1 > panels) q1 = panels;
    if (m <= 0 || n <= 0 || q0 >= q1) return;
    if (n > RLX_GEMM_CH_MAX_N) {
        fprintf(stderr, "rlx_cpu: rlx_gemm_conv_ch: plane of %td pixels > %d\n", (ptrdiff_t)n,
                RLX_GEMM_CH_MAX_N);
        abort();
    }
    RLX_CHECK_RANGE(0, rlx_gemm_ch_packed_floats(m, k), wq_len, "gemm channel-packed weight");
    RLX_CHECK_RANGE(c_off, c_off + (m - 1) * ldc + n, c_len, "gemm C");
    if (k > 0) RLX_CHECK_RANGE(x_off, x_off + (k - 1) * ldx + n, x_len, "gemm X");
    for (ptrdiff_t q = q0; q < q1;) {
        /* panels q .. q + nq - 1: four or two at a time on the AVX-512
         * level (rlx_gemm_chz_tiles, the same bits), else one */
        int nq = 1;
#if RLX_X86_DISPATCH
        if (level > 1) nq = q1 - q >= 4 ? 4 : q1 - q >= 2 ? 2 : 1;
#endif
        if (k <= 0)
            for (int i = 0; i < nq; ++i) memset(t[i], 0, sizeof(float) * (size_t)(n * RLX_GEMM_CH));
        for (ptrdiff_t k0 = 0; k0 < k; k0 += kcb) {
            const ptrdiff_t kc = k - k0 < kcb ? k - k0 : kcb;
            for (ptrdiff_t ti = 0, i0 = 0; ti < ntiles; i0 += tile_base + (ti < tile_extra), ++ti) {
                const int mr = (int)(tile_base + (ti < tile_extra));
                const float* wqb = wq + (q * k + k0) * RLX_GEMM_CH;
                const float* xb = x + x_off + k0 * ldx + i0;
                float* tb = t[0] + i0 * RLX_GEMM_CH;
#if RLX_X86_DISPATCH
                if (level > 1) {
                    rlx_gemm_chz_tiles[nq == 4 ? 2 : nq - 1][mr](wqb, k * RLX_GEMM_CH, xb, ldx, kc, tb,
                                                                 t[1] + i0 * RLX_GEMM_CH, t[2] + i0 * RLX_GEMM_CH,
                                                                 t[3] + i0 * RLX_GEMM_CH, k0 > 0);
                    continue;
                }
                if (level) {
                    rlx_gemm_ch_tiles_avx2[mr](wqb, xb, ldx, kc, tb, k0 > 0);
                    continue;
                }
#endif
                rlx_gemm_ch_tile_base(mr, wqb, xb, ldx, kc, tb, k0 > 0);
            }
        }
        for (int i = 0; i < nq; ++i, ++q) {
            const ptrdiff_t ch0 = q * RLX_GEMM_CH;
            const ptrdiff_t nch = m - ch0 < RLX_GEMM_CH ? m - ch0 : RLX_GEMM_CH;
            for (ptrdiff_t j = 0; j < nch; ++j) {
                float* row = c + c_off + (ch0 + j) * ldc;
                for (ptrdiff_t p = 0; p < n; ++p) row[p] = t[i][p * RLX_GEMM_CH + j];
            }
            /* the panel's rows of a small plane lie end to end when ldc == n:
             * a sigmoid or SiLU then runs in vectors over all of them */
            if (ep) rlx_epilogue_rows(c, c_len, c_off + ch0 * ldc, ldc, nch, n, ep_bias ? ep_bias + ch0 : NULL, ep,
                                      level);
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
