/* Conv backward weight of a 3x3, stride-1, undilated 2-D conv by Winograd
 * transforms, driven by src/_backward.pyx (conv_backward_weight_winograd).
 *
 * dW[co, ci, a, b] = sum over images and output pixels (oy, ox) of
 * dy[co, oy, ox] * x[ci, oy + a - ph, ox + b - pw].  Cut dy into 2x2 tiles
 * (tile (ty, tx) covers oy = 2ty + {0, 1}, ox = 2tx + {0, 1}; zero past the
 * plane); a tile reads the 4x4 patch d of x from (2ty - ph, 2tx - pw) (zero
 * outside x), and its share of dW is the 1-D correlation
 * out[a] = sum_j g[j] d[j + a] (3 outputs, 2 taps, 4 inputs) along both
 * axes.  That is Winograd's F(3, 2) with the points 0, 1, -1, inf:
 *     out = G^T [(A g) . (B^T d)]
 * with (the matrices of F(2, 3) with the roles of its filter and output
 * swapped)
 *     B^T d = (d0 - d2, d1 + d2, d2 - d1, d1 - d3)
 *     A g   = (g0, g0 + g1, g0 - g1, -g1)
 *     G^T m = (m0 + (m1 + m2)/2, (m1 - m2)/2, (m1 + m2)/2 + m3)
 * so that, in 2-D and summed over the tiles t,
 *     dW[co, ci] = G^T M[co, ci] G,   M_xi[co, ci] = sum_t U_xi[co, t] V_xi[ci, t]
 * for the 16 points xi = (i, j): U = A g A^T of dy's tiles, V = B^T d B of
 * x's.  Each M_xi is an A.B^T GEMM along the tiles: 16 of them with 16
 * products per tile and (co, ci) pair against 36 for the direct sum (2.25x
 * fewer multiply-adds), run on the wide kernel's dot tiles
 * (rlx_bwd_wide_block), which fixes their summation order.
 *
 * Tiles t = (image, tile row, tx) count row after row over the images; they
 * go in chunks of whole tile rows (about RLX_BWD_WINO_TILES tiles, padded
 * with zero tiles to a multiple of 16), transformed into per-chunk U and V
 * rows, then summed into M.  A part of the work owns a range of the 4 rows
 * i of the points: it transforms only those rows and alone writes their M,
 * so M (and dW) has the same bits for any number of threads.
 *
 * A non-finite x or dy value reaches every tap of its tiles' (co, ci) pairs
 * through the transforms (inf - inf, 0 * inf), where the direct sum would
 * reach only the taps that read it. */
#ifndef RLX_BWD_WINO_H
#define RLX_BWD_WINO_H

#include <stddef.h>
#include <string.h>
#include "rlx_bwd_wide.h"

/* tiles per chunk, before rounding up to whole tile rows */
#define RLX_BWD_WINO_TILES 1024

typedef struct {
    ptrdiff_t n, c, m, groups, h, w, oh, ow, ph, pw;
    ptrdiff_t th, tw;          /* tile rows and columns per image */
    ptrdiff_t rows;            /* tile rows per chunk */
    ptrdiff_t L;               /* row stride of U and V: a chunk's tiles rounded up to 16, plus 16 */
    ptrdiff_t rw;              /* floats of one padded x row: 2 * tw + 2 */
} rlx_bwd_wino_geom;

static inline rlx_bwd_wino_geom rlx_bwd_wino_geom_make(ptrdiff_t n, ptrdiff_t c, ptrdiff_t m, ptrdiff_t groups,
                                                       ptrdiff_t h, ptrdiff_t w, ptrdiff_t oh, ptrdiff_t ow,
                                                       ptrdiff_t ph, ptrdiff_t pw) {
    rlx_bwd_wino_geom g;
    g.n = n; g.c = c; g.m = m; g.groups = groups; g.h = h; g.w = w; g.oh = oh; g.ow = ow; g.ph = ph; g.pw = pw;
    g.th = (oh + 1) / 2;
    g.tw = (ow + 1) / 2;
    g.rows = RLX_BWD_WINO_TILES / g.tw;
    if (g.rows < 1) g.rows = 1;
    if (g.rows > n * g.th) g.rows = n * g.th;
    /* the vector transforms store whole blocks of 8 tiles: up to 7 past a
     * chunk's last tile, into the 16 spare floats */
    g.L = (g.rows * g.tw + 15) / 16 * 16 + 16;
    g.rw = 2 * g.tw + 2;
    return g;
}

/* chunks of whole tile rows */
static inline ptrdiff_t rlx_bwd_wino_chunks(const rlx_bwd_wino_geom* g) {
    return (g->n * g->th + g->rows - 1) / g->rows;
}

/* floats of M: 16 points x m x c/groups */
static inline ptrdiff_t rlx_bwd_wino_m_floats(const rlx_bwd_wino_geom* g) {
    return 16 * g->m * (g->c / g->groups);
}

/* floats of a part's row buffers: 4 padded x rows, the vertical step's row
 * and 16 spare floats each, a zero row of w floats and spare, 16 for a dy
 * tail */
static inline ptrdiff_t rlx_bwd_wino_buf_floats(const rlx_bwd_wino_geom* g) {
    return 5 * (g->rw + 32) + g->w + 32 + 16;
}

/* floats a part needs (whatever its point rows): the U and V rows of one
 * point row and chunk, and its row buffers */
static inline ptrdiff_t rlx_bwd_wino_part_floats(const rlx_bwd_wino_geom* g) {
    return 4 * (g->m + g->c) * g->L + rlx_bwd_wino_buf_floats(g);
}

/* Row i of B^T d for the 4 x rows r0..r3 (any of them the zero row), at
 * columns [pw, pw + n) of v; 0 + - only, so every variant gives the same
 * bits. */
static inline void rlx_bwd_wino_vx(int i, const float* restrict r0, const float* restrict r1,
                                   const float* restrict r2, const float* restrict r3, float* restrict v,
                                   ptrdiff_t n) {
    switch (i) {
    case 0: for (ptrdiff_t k = 0; k < n; ++k) v[k] = r0[k] - r2[k]; break;
    case 1: for (ptrdiff_t k = 0; k < n; ++k) v[k] = r1[k] + r2[k]; break;
    case 2: for (ptrdiff_t k = 0; k < n; ++k) v[k] = r2[k] - r1[k]; break;
    default: for (ptrdiff_t k = 0; k < n; ++k) v[k] = r1[k] - r3[k]; break;
    }
}

/* The x rows of tile row r (image r / th, rows 2ty - ph + k): pointers
 * into x, or to the zero row `zero` outside the image. */
static inline void rlx_bwd_wino_xrows(const rlx_bwd_wino_geom* g, const float* xc, ptrdiff_t ty, const float* zero,
                                      const float** rp) {
    for (int k = 0; k < 4; ++k) {
        const ptrdiff_t iy = 2 * ty - g->ph + k;
        rp[k] = iy >= 0 && iy < g->h ? xc + iy * g->w : zero;
    }
}

/* the first n = min(w, rw - pw) columns of x land in the padded row */
static inline ptrdiff_t rlx_bwd_wino_xcols(const rlx_bwd_wino_geom* g) {
    const ptrdiff_t n = g->rw - g->pw;
    return n < 0 ? 0 : (n < g->w ? n : g->w);
}

/* The tile rows [r0, r1) of a chunk */
static inline void rlx_bwd_wino_rows(const rlx_bwd_wino_geom* g, ptrdiff_t chunk, ptrdiff_t* r0, ptrdiff_t* r1) {
    *r0 = chunk * g->rows;
    *r1 = *r0 + g->rows < g->n * g->th ? *r0 + g->rows : g->n * g->th;
}

/* The x transform's buffers in buf: the vertical step's row v (its padding
 * columns zero, never written after) and the zero row. */
static inline float* rlx_bwd_wino_xbufs(const rlx_bwd_wino_geom* g, float* buf, const float** zero) {
    float* v = buf + 4 * (g->rw + 32);
    float* z = buf + 5 * (g->rw + 32);
    memset(z, 0, (size_t)g->w * sizeof(float));
    memset(v, 0, (size_t)(g->rw + 32) * sizeof(float));
    *zero = z;
    return v;
}

/* rows [0, nrows) of one channel (stride `every` rows of L floats) zeroed
 * from the chunk's nt tiles to L */
static inline void rlx_bwd_wino_zero_tails(float* first, ptrdiff_t nrows, ptrdiff_t every, ptrdiff_t L,
                                           ptrdiff_t nt) {
    for (ptrdiff_t q = 0; q < nrows; ++q) memset(first + q * every * L + nt, 0, (size_t)(L - nt) * sizeof(float));
}

/* ---- portable ------------------------------------------------------------ */

/* V rows of one chunk for point rows [i0, i1): V[(i - i0)*4 + j][ci][r*tw + tx]
 * = (B^T d B)[i][j] of channel ci's tile (chunk row r, tx), every row of L
 * floats; entries past the chunk's tiles are zero up to the dot length. */
static void rlx_bwd_wino_input_base(const rlx_bwd_wino_geom* g, const float* x, ptrdiff_t chunk, int i0, int i1,
                                    float* V, float* buf) {
    const ptrdiff_t L = g->L, rw = g->rw, tw = g->tw, np = i1 - i0;
    const ptrdiff_t nx = rlx_bwd_wino_xcols(g), pw = g->pw < rw ? g->pw : rw;
    ptrdiff_t r0, r1;
    const float* zero;
    float* v = rlx_bwd_wino_xbufs(g, buf, &zero);
    rlx_bwd_wino_rows(g, chunk, &r0, &r1);
    for (ptrdiff_t ci = 0; ci < g->c; ++ci) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            const ptrdiff_t img = r / g->th, ty = r % g->th, t0 = (r - r0) * tw;
            const float* rp[4];
            rlx_bwd_wino_xrows(g, x + (img * g->c + ci) * g->h * g->w, ty, zero, rp);
            for (int i = i0; i < i1; ++i) {
                rlx_bwd_wino_vx(i, rp[0], rp[1], rp[2], rp[3], v + pw, nx);
                float* d0 = V + ((4 * (i - i0) + 0) * g->c + ci) * L + t0;
                float* d1 = V + ((4 * (i - i0) + 1) * g->c + ci) * L + t0;
                float* d2 = V + ((4 * (i - i0) + 2) * g->c + ci) * L + t0;
                float* d3 = V + ((4 * (i - i0) + 3) * g->c + ci) * L + t0;
                for (ptrdiff_t tx = 0; tx < tw; ++tx) {
                    const float a = v[2 * tx], b = v[2 * tx + 1], c = v[2 * tx + 2], d = v[2 * tx + 3];
                    d0[tx] = a - c;
                    d1[tx] = b + c;
                    d2[tx] = c - b;
                    d3[tx] = b - d;
                }
            }
        }
        rlx_bwd_wino_zero_tails(V + ci * L, 4 * np, g->c, L, (r1 - r0) * tw);
    }
}

/* U rows of one chunk for point rows [i0, i1): U[(i - i0)*4 + j][co][r*tw + tx]
 * = (A g A^T)[i][j] of output channel co's dy tile; as above. */
static void rlx_bwd_wino_grad_base(const rlx_bwd_wino_geom* g, const float* dy, ptrdiff_t chunk, int i0, int i1,
                                   float* U, float* buf) {
    const ptrdiff_t L = g->L, tw = g->tw, np = i1 - i0;
    ptrdiff_t r0, r1;
    rlx_bwd_wino_rows(g, chunk, &r0, &r1);
    float* q0 = buf;
    float* q1 = buf + (g->rw + 32);
    for (ptrdiff_t co = 0; co < g->m; ++co) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            const ptrdiff_t img = r / g->th, ty = r % g->th, t0 = (r - r0) * tw;
            const float* dc = dy + (img * g->m + co) * g->oh * g->ow;
            /* dy rows 2ty and 2ty + 1, zero past the plane (2 * tw columns) */
            memset(q0, 0, (size_t)(2 * tw) * sizeof(float));
            memset(q1, 0, (size_t)(2 * tw) * sizeof(float));
            memcpy(q0, dc + 2 * ty * g->ow, (size_t)g->ow * sizeof(float));
            if (2 * ty + 1 < g->oh) memcpy(q1, dc + (2 * ty + 1) * g->ow, (size_t)g->ow * sizeof(float));
            for (int i = i0; i < i1; ++i) {
                float* d0 = U + ((4 * (i - i0) + 0) * g->m + co) * L + t0;
                float* d1 = U + ((4 * (i - i0) + 1) * g->m + co) * L + t0;
                float* d2 = U + ((4 * (i - i0) + 2) * g->m + co) * L + t0;
                float* d3 = U + ((4 * (i - i0) + 3) * g->m + co) * L + t0;
                for (ptrdiff_t tx = 0; tx < tw; ++tx) {
                    /* row i of A g, then its columns by A */
                    const float e0 = q0[2 * tx], o0 = q0[2 * tx + 1], e1 = q1[2 * tx], o1 = q1[2 * tx + 1];
                    const float a = i == 0 ? e0 : i == 1 ? e0 + e1 : i == 2 ? e0 - e1 : 0.0f - e1;
                    const float b = i == 0 ? o0 : i == 1 ? o0 + o1 : i == 2 ? o0 - o1 : 0.0f - o1;
                    d0[tx] = a;
                    d1[tx] = a + b;
                    d2[tx] = a - b;
                    d3[tx] = 0.0f - b;
                }
            }
        }
        rlx_bwd_wino_zero_tails(U + co * L, 4 * np, g->m, L, (r1 - r0) * tw);
    }
}

/* ---- AVX2: the same operations, 8 tiles per vector ----------------------- */
#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_bwd_wino_input_avx2(const rlx_bwd_wino_geom* g, const float* x, ptrdiff_t chunk,
                                                    int i0, int i1, float* V, float* buf) {
    const ptrdiff_t L = g->L, rw = g->rw, tw = g->tw, np = i1 - i0;
    const ptrdiff_t nx = rlx_bwd_wino_xcols(g), pw = g->pw < rw ? g->pw : rw;
    ptrdiff_t r0, r1;
    const float* zero;
    float* v = rlx_bwd_wino_xbufs(g, buf, &zero);
    rlx_bwd_wino_rows(g, chunk, &r0, &r1);
    for (ptrdiff_t ci = 0; ci < g->c; ++ci) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            const ptrdiff_t img = r / g->th, ty = r % g->th, t0 = (r - r0) * tw;
            const float* rp[4];
            rlx_bwd_wino_xrows(g, x + (img * g->c + ci) * g->h * g->w, ty, zero, rp);
            for (int i = i0; i < i1; ++i) {
                /* vertical: columns [pw, pw + nx) of v, 8 at a time, then the tail */
                float* vp = v + pw;
                ptrdiff_t k = 0;
                for (; k + 8 <= nx; k += 8) {
                    const __m256 a0 = _mm256_loadu_ps(rp[0] + k), a1 = _mm256_loadu_ps(rp[1] + k);
                    const __m256 a2 = _mm256_loadu_ps(rp[2] + k), a3 = _mm256_loadu_ps(rp[3] + k);
                    __m256 t;
                    switch (i) {
                    case 0: t = _mm256_sub_ps(a0, a2); break;
                    case 1: t = _mm256_add_ps(a1, a2); break;
                    case 2: t = _mm256_sub_ps(a2, a1); break;
                    default: t = _mm256_sub_ps(a1, a3); break;
                    }
                    _mm256_storeu_ps(vp + k, t);
                }
                if (k < nx) rlx_bwd_wino_vx(i, rp[0] + k, rp[1] + k, rp[2] + k, rp[3] + k, vp + k, nx - k);
                /* horizontal: tiles tx .. tx + 7 read columns 2tx .. 2tx + 17
                 * (past rw: lanes of tiles past tw, stored into the spare) */
                float* d0 = V + ((4 * (i - i0) + 0) * g->c + ci) * L + t0;
                float* d1 = V + ((4 * (i - i0) + 1) * g->c + ci) * L + t0;
                float* d2 = V + ((4 * (i - i0) + 2) * g->c + ci) * L + t0;
                float* d3 = V + ((4 * (i - i0) + 3) * g->c + ci) * L + t0;
                for (ptrdiff_t tx = 0; tx < tw; tx += 8) {
                    __m256 e, o, e2, o2;
                    rlx_deint8(v + 2 * tx, &e, &o);
                    rlx_deint8(v + 2 * tx + 2, &e2, &o2);
                    _mm256_storeu_ps(d0 + tx, _mm256_sub_ps(e, e2));
                    _mm256_storeu_ps(d1 + tx, _mm256_add_ps(o, e2));
                    _mm256_storeu_ps(d2 + tx, _mm256_sub_ps(e2, o));
                    _mm256_storeu_ps(d3 + tx, _mm256_sub_ps(o, o2));
                }
            }
        }
        rlx_bwd_wino_zero_tails(V + ci * L, 4 * np, g->c, L, (r1 - r0) * tw);
    }
}

RLX_TARGET_AVX2 static void rlx_bwd_wino_grad_avx2(const rlx_bwd_wino_geom* g, const float* dy, ptrdiff_t chunk,
                                                   int i0, int i1, float* U, float* buf) {
    const ptrdiff_t L = g->L, tw = g->tw, ow = g->ow, np = i1 - i0;
    ptrdiff_t r0, r1;
    rlx_bwd_wino_rows(g, chunk, &r0, &r1);
    /* the last block of 16 columns of each dy row, zero past the row */
    const ptrdiff_t full = ow / 16, rest = ow - 16 * full;
    float* t0b = buf;
    float* t1b = buf + 16;
    const __m256 zero = _mm256_setzero_ps();
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest), lanes);
    const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)rest - 8), lanes);
    for (ptrdiff_t co = 0; co < g->m; ++co) {
        for (ptrdiff_t r = r0; r < r1; ++r) {
            const ptrdiff_t img = r / g->th, ty = r % g->th, t0 = (r - r0) * tw;
            const float* dc = dy + (img * g->m + co) * g->oh * g->ow;
            const float* q0 = dc + 2 * ty * ow;
            const float* q1 = 2 * ty + 1 < g->oh ? q0 + ow : NULL;
            if (rest) {
                /* masked loads: no read past the row (nor past dy) */
                _mm256_storeu_ps(t0b, _mm256_maskload_ps(q0 + 16 * full, lo));
                _mm256_storeu_ps(t0b + 8, _mm256_maskload_ps(q0 + 16 * full + 8, hi));
                if (q1) {
                    _mm256_storeu_ps(t1b, _mm256_maskload_ps(q1 + 16 * full, lo));
                    _mm256_storeu_ps(t1b + 8, _mm256_maskload_ps(q1 + 16 * full + 8, hi));
                }
            }
            for (ptrdiff_t b = 0; b * 8 < tw; ++b) {
                __m256 e0, o0, e1 = zero, o1 = zero;
                rlx_deint8(b < full ? q0 + 16 * b : t0b, &e0, &o0);
                if (q1) rlx_deint8(b < full ? q1 + 16 * b : t1b, &e1, &o1);
                for (int i = i0; i < i1; ++i) {
                    __m256 a, c;
                    switch (i) {
                    case 0: a = e0; c = o0; break;
                    case 1: a = _mm256_add_ps(e0, e1); c = _mm256_add_ps(o0, o1); break;
                    case 2: a = _mm256_sub_ps(e0, e1); c = _mm256_sub_ps(o0, o1); break;
                    default: a = _mm256_sub_ps(zero, e1); c = _mm256_sub_ps(zero, o1); break;
                    }
                    float* d = U + ((4 * (i - i0)) * g->m + co) * L + t0 + 8 * b;
                    _mm256_storeu_ps(d, a);
                    _mm256_storeu_ps(d + g->m * L, _mm256_add_ps(a, c));
                    _mm256_storeu_ps(d + 2 * g->m * L, _mm256_sub_ps(a, c));
                    _mm256_storeu_ps(d + 3 * g->m * L, _mm256_sub_ps(zero, c));
                }
            }
        }
        rlx_bwd_wino_zero_tails(U + co * L, 4 * np, g->m, L, (r1 - r0) * tw);
    }
}
#endif

/* Both transforms of one chunk and point rows [i0, i1): V from x, U from dy. */
static void rlx_bwd_wino_transforms(const rlx_bwd_wino_geom* g, const float* x, const float* dy, ptrdiff_t chunk,
                                    int i0, int i1, float* U, float* V, float* buf) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_bwd_wino_input_avx2(g, x, chunk, i0, i1, V, buf);
        rlx_bwd_wino_grad_avx2(g, dy, chunk, i0, i1, U, buf);
        return;
    }
#endif
    rlx_bwd_wino_input_base(g, x, chunk, i0, i1, V, buf);
    rlx_bwd_wino_grad_base(g, dy, chunk, i0, i1, U, buf);
}

/* One part of the work: point rows [i0, i1) over every chunk.  Its rows of
 * M are zeroed, then per chunk the part's U and V rows are made and, per
 * point and conv group, M_xi[ci][co] += dot(V_xi[ci], U_xi[co]) over the
 * chunk's tiles by the wide kernel's tiles: 4 rows of V (input channels)
 * against runs of 6 rows of U (output channels, at roff[j] = j * L of the
 * group's first).  M_xi is [groups][c/groups][m/groups].  work:
 * rlx_bwd_wino_part_floats(g) floats. */
static void rlx_bwd_wino_part(const rlx_bwd_wino_geom* g, const float* x, const float* dy, float* M,
                              float* work, const ptrdiff_t* roff, int i0, int i1) {
    const ptrdiff_t np = i1 - i0, L = g->L, cpg = g->c / g->groups, cog = g->m / g->groups;
    const ptrdiff_t plane = g->m * cpg, chunks = rlx_bwd_wino_chunks(g);
    float* U = work;
    float* V = U + 4 * g->m * L;
    float* buf = V + 4 * g->c * L;
    memset(M + 4 * i0 * plane, 0, (size_t)(4 * np * plane) * sizeof(float));
    /* one point row at a time, so that its U and V rows are still in L2
     * when the dots read them */
    for (ptrdiff_t ch = 0; ch < chunks; ++ch)
        for (int i = i0; i < i1; ++i) {
        rlx_bwd_wino_transforms(g, x, dy, ch, i, i + 1, U, V, buf);
        for (ptrdiff_t q = 0; q < 4; ++q)
            for (ptrdiff_t grp = 0; grp < g->groups; ++grp)
                for (ptrdiff_t ci0 = 0; ci0 < cpg; ci0 += RLX_BWD_WIDE_MR) {
                    const ptrdiff_t mr = cpg - ci0 < RLX_BWD_WIDE_MR ? cpg - ci0 : RLX_BWD_WIDE_MR;
                    /* the dot length: the chunk's tiles rounded up to 16
                     * (zero past them), not the 16 spare floats */
                    rlx_bwd_wide_block(V + (q * g->c + grp * cpg + ci0) * L, L, mr, U + (q * g->m + grp * cog) * L,
                                       roff, cog, L - 16, 1, 0, 0, M + (4 * i + q) * plane + (grp * cpg + ci0) * cog,
                                       cog);
                }
        }
}

/* dW[co][ci][3][3] = G^T M[co][ci] G for co in [co0, co1) (M laid out as in
 * rlx_bwd_wino_part). */
static void rlx_bwd_wino_output(const rlx_bwd_wino_geom* g, const float* M, float* dw, ptrdiff_t co0,
                                ptrdiff_t co1) {
    const ptrdiff_t cpg = g->c / g->groups, cog = g->m / g->groups, plane = g->m * cpg;
    for (ptrdiff_t co = co0; co < co1; ++co)
        for (ptrdiff_t ci = 0; ci < cpg; ++ci) {
            const ptrdiff_t grp = co / cog, at = (grp * cpg + ci) * cog + co - grp * cog;
            float m[4][4], t[3][4];
            for (int i = 0; i < 4; ++i)
                for (int j = 0; j < 4; ++j) m[i][j] = M[(4 * i + j) * plane + at];
            for (int j = 0; j < 4; ++j) {
                const float s = m[1][j] + m[2][j];
                t[0][j] = m[0][j] + 0.5f * s;
                t[1][j] = 0.5f * (m[1][j] - m[2][j]);
                t[2][j] = 0.5f * s + m[3][j];
            }
            float* o = dw + (co * cpg + ci) * 9;
            for (int a = 0; a < 3; ++a) {
                const float s = t[a][1] + t[a][2];
                o[3 * a + 0] = t[a][0] + 0.5f * s;
                o[3 * a + 1] = 0.5f * (t[a][1] - t[a][2]);
                o[3 * a + 2] = 0.5f * s + t[a][3];
            }
        }
}

#endif
