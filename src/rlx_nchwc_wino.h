/* Winograd F(2x2, 3x3) and F(4x4, 3x3) on the channel-blocked layout.
 *
 * y[n, M/8, Ho, Wo, 8] = act(conv3x3(x[n, C/8, H, W, 8], W) + bias + residual),
 * stride 1, dilation 1, any zero padding, groups 1.  The output is cut into
 * tiles of mt x mt pixels (mt = 2 or 4, alpha = mt + 2 input pixels a side),
 * tiles numbered over the batch row by row, and the tiles into chunks.  Per
 * chunk of `len` tiles:
 *
 *   V[p][cb][t][8] = (B^T d B)[p]  for the alpha x alpha input patch d of
 *                                   tile t, 8 channels of block cb at once
 *   Mt[p][ob][t][8] = sum_c U[p][o][c] V[p][c][t]   (alpha^2 1x1 convs over
 *                                   the chunk's tiles: the blocked 1x1
 *                                   kernel's register tiles, U[p] packed as
 *                                   its weight)
 *   y tile = A^T Mt A (+ bias) (+ residual), act, clipped to the plane
 *
 * with U = G g G^T prepared at compile time (rlx_cpu/ops/blocked.py).  The
 * transforms multiply only by powers of two (5 d = 4 d + d), so whether a
 * compiler contracts a multiply and an add into an FMA cannot change a bit:
 * the portable and the AVX2 variants agree, as the 1x1 tiles do.
 *
 * Work item = (chunk, panel group): the item transforms its chunk's input
 * (unless the thread's previous item did: same chunk), runs the GEMMs of its
 * group's output panels and transforms their outputs.  Splitting a chunk's
 * panels over threads repeats only the input transform, a few percent of
 * the GEMMs' work. */
#ifndef RLX_NCHWC_WINO_H
#define RLX_NCHWC_WINO_H

#include "rlx_nchwc.h"

typedef struct {
    ptrdiff_t n, c, m, h, w, h_out, w_out, pt, pl;
    ptrdiff_t mt;              /* output tile side: 2 or 4 */
    ptrdiff_t th, tw;          /* tile rows and columns per image */
    ptrdiff_t chunk;           /* tiles per chunk */
    ptrdiff_t groups;          /* panel groups per chunk */
} rlx_nchwc_wino_geom;

static inline ptrdiff_t rlx_nchwc_wino_chunks(const rlx_nchwc_wino_geom* g) {
    return (g->n * g->th * g->tw + g->chunk - 1) / g->chunk;
}

static inline ptrdiff_t rlx_nchwc_wino_items(const rlx_nchwc_wino_geom* g) {
    return rlx_nchwc_wino_chunks(g) * g->groups;
}

/* output channels per pass over a chunk's GEMMs: four panels of 16 */
#define RLX_WINO_PASS 64

/* V's and Mt's positions lie this many floats (one cache line) further
 * apart than their data: with a chunk of a power-of-two number of tiles the
 * 36 stores of one transformed tile would otherwise hit one L1 set (b8
 * 16->16 at 32x32: 0.42 ms, 0.22 with the pad) */
#define RLX_WINO_PAD 16

/* floats of one thread's V and Mt */
static inline ptrdiff_t rlx_nchwc_wino_scratch_floats(const rlx_nchwc_wino_geom* g) {
    const ptrdiff_t a = g->mt + 2, mp = g->m < RLX_WINO_PASS ? g->m : RLX_WINO_PASS;
    return a * a * ((g->c + mp) * g->chunk + 2 * RLX_WINO_PAD);
}

/* floats of U packed: alpha^2 1x1 weights of M x C */
static inline ptrdiff_t rlx_nchwc_wino_packed_floats(ptrdiff_t mt, ptrdiff_t m, ptrdiff_t c) {
    return (mt + 2) * (mt + 2) * rlx_nchwc_1x1_packed_floats(m, c);
}

/* 8 lanes of float as a GCC vector: ymm in the AVX2 variant, two xmm in the
 * portable one, the same arithmetic in each */
typedef float rlx_wv8 __attribute__((vector_size(32), aligned(4), may_alias));
#define RLX_WV(p) (*(const rlx_wv8*)(p))

/* B^T of F(4x4): rows 4 0 -5 0 1 0 / 0 -4 -4 1 1 0 / 0 4 -4 -1 1 0 /
 * 0 -2 -1 2 1 0 / 0 2 -1 -2 1 0 / 0 4 0 -5 0 1 */
#define RLX_WV_BT4(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) do {          \
        const rlx_wv8 a_ = (d4) - 4.0f * (d2), b_ = (d3) - 4.0f * (d1);          \
        const rlx_wv8 c_ = (d4) - (d2), e_ = 2.0f * ((d3) - (d1));               \
        o0 = (4.0f * ((d0) - (d2)) - (d2)) + (d4);                               \
        o1 = a_ + b_; o2 = a_ - b_; o3 = c_ + e_; o4 = c_ - e_;                  \
        o5 = (4.0f * ((d1) - (d3)) - (d3)) + (d5);                               \
    } while (0)
/* A^T of F(4x4): 1 1 1 1 1 0 / 0 1 -1 2 -2 0 / 0 1 1 4 4 0 / 0 1 -1 8 -8 1 */
#define RLX_WV_AT4(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3) do {                   \
        const rlx_wv8 a_ = (m1) + (m2), b_ = (m1) - (m2);                        \
        const rlx_wv8 c_ = (m3) + (m4), e_ = (m3) - (m4);                        \
        o0 = (m0) + a_ + c_; o1 = b_ + 2.0f * e_;                                \
        o2 = a_ + 4.0f * c_; o3 = (b_ + 8.0f * e_) + (m5);                       \
    } while (0)
/* F(2x2): B^T 1 0 -1 0 / 0 1 1 0 / 0 -1 1 0 / 0 1 0 -1; A^T 1 1 1 0 / 0 1 -1 -1 */
#define RLX_WV_BT2(d0, d1, d2, d3, o0, o1, o2, o3) do {                           \
        o0 = (d0) - (d2); o1 = (d1) + (d2); o2 = (d2) - (d1); o3 = (d1) - (d3);  \
    } while (0)
#define RLX_WV_AT2(m0, m1, m2, m3, o0, o1) do {                                   \
        o0 = (m0) + (m1) + (m2); o1 = ((m1) - (m2)) - (m3);                      \
    } while (0)

/* The chunk's tiles [t0, t0 + len) transformed into V (tile stride `chunk`):
 * every input block of each tile's patch, zeros outside the plane. */
RLX_INLINE void rlx_nchwc_wino_in_body(const float* restrict x, float* restrict v, const rlx_nchwc_wino_geom* g,
                                       ptrdiff_t t0, ptrdiff_t len) {
    const int mt = (int)g->mt, A = mt + 2;
    const ptrdiff_t CB = g->c / 8, H = g->h, W = g->w, per_img = g->th * g->tw, cs = g->chunk * 8;
    const ptrdiff_t ps = CB * cs + RLX_WINO_PAD;   /* V's position stride */
    for (ptrdiff_t tl = 0; tl < len; ++tl) {
        const ptrdiff_t t = t0 + tl, img = t / per_img, r = t % per_img;
        const ptrdiff_t iy0 = (r / g->tw) * mt - g->pt, ix0 = (r % g->tw) * mt - g->pl;
        const int inside = iy0 >= 0 && ix0 >= 0 && iy0 + A <= H && ix0 + A <= W;
        for (ptrdiff_t cb = 0; cb < CB; ++cb) {
            const float* xb = x + (img * CB + cb) * H * W * 8;
            float* vb = v + cb * cs + tl * 8;
            rlx_wv8 d[36], t6[36];
            const rlx_wv8 zero = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int i = 0; i < A; ++i)
                for (int j = 0; j < A; ++j) {
                    const ptrdiff_t yy = iy0 + i, xx = ix0 + j;
                    d[A * i + j] = inside || (yy >= 0 && yy < H && xx >= 0 && xx < W)
                                   ? RLX_WV(xb + (yy * W + xx) * 8) : zero;
                }
            if (mt == 4) {
                for (int i = 0; i < 6; ++i)      /* t = d B, row by row */
                    RLX_WV_BT4(d[6 * i], d[6 * i + 1], d[6 * i + 2], d[6 * i + 3], d[6 * i + 4], d[6 * i + 5],
                               t6[6 * i], t6[6 * i + 1], t6[6 * i + 2], t6[6 * i + 3], t6[6 * i + 4], t6[6 * i + 5]);
                for (int j = 0; j < 6; ++j) {    /* V = B^T t, column by column */
                    rlx_wv8 o0, o1, o2, o3, o4, o5;
                    RLX_WV_BT4(t6[j], t6[6 + j], t6[12 + j], t6[18 + j], t6[24 + j], t6[30 + j], o0, o1, o2, o3, o4,
                               o5);
                    *(rlx_wv8*)(vb + (0 + j) * ps) = o0;
                    *(rlx_wv8*)(vb + (6 + j) * ps) = o1;
                    *(rlx_wv8*)(vb + (12 + j) * ps) = o2;
                    *(rlx_wv8*)(vb + (18 + j) * ps) = o3;
                    *(rlx_wv8*)(vb + (24 + j) * ps) = o4;
                    *(rlx_wv8*)(vb + (30 + j) * ps) = o5;
                }
            } else {
                for (int i = 0; i < 4; ++i)
                    RLX_WV_BT2(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3], t6[4 * i], t6[4 * i + 1],
                               t6[4 * i + 2], t6[4 * i + 3]);
                for (int j = 0; j < 4; ++j) {
                    rlx_wv8 o0, o1, o2, o3;
                    RLX_WV_BT2(t6[j], t6[4 + j], t6[8 + j], t6[12 + j], o0, o1, o2, o3);
                    *(rlx_wv8*)(vb + (0 + j) * ps) = o0;
                    *(rlx_wv8*)(vb + (4 + j) * ps) = o1;
                    *(rlx_wv8*)(vb + (8 + j) * ps) = o2;
                    *(rlx_wv8*)(vb + (12 + j) * ps) = o3;
                }
            }
        }
    }
}

/* Output blocks [ob0, ob1) of the chunk's tiles from Mt (which holds those
 * blocks only): A^T Mt A, bias, residual, activation (act8: the AVX2 lanes,
 * else lane by lane), clipped to the plane. */
#define RLX_WINO_OUT_BODY(ACT_)                                                                        \
    const int mt = (int)g->mt, A = mt + 2;                                                             \
    const ptrdiff_t MB = g->m / 8, Ho = g->h_out, Wo = g->w_out, per_img = g->th * g->tw;               \
    const ptrdiff_t cs = g->chunk * 8, ps = (ob1 - ob0) * cs + RLX_WINO_PAD;                           \
    for (ptrdiff_t tl = 0; tl < len; ++tl) {                                                           \
        const ptrdiff_t t = t0 + tl, img = t / per_img, r = t % per_img;                               \
        const ptrdiff_t oy0 = (r / g->tw) * mt, ox0 = (r % g->tw) * mt;                                \
        const int nr = (int)(Ho - oy0 < mt ? Ho - oy0 : mt), nc = (int)(Wo - ox0 < mt ? Wo - ox0 : mt);  \
        for (ptrdiff_t ob = ob0; ob < ob1; ++ob) {                                                     \
            const float* mb = m + (ob - ob0) * cs + tl * 8;                                                    \
            const ptrdiff_t yo = ((img * MB + ob) * Ho + oy0) * Wo * 8 + ox0 * 8;                       \
            const rlx_wv8 bv = bias ? RLX_WV(bias + ob * 8) : (rlx_wv8){0, 0, 0, 0, 0, 0, 0, 0};         \
            rlx_wv8 s[24], o[16];                                                                      \
            if (mt == 4) {                                                                             \
                for (int j = 0; j < 6; ++j)      /* s = A^T Mt, column by column */                    \
                    RLX_WV_AT4(RLX_WV(mb + j * ps), RLX_WV(mb + (6 + j) * ps), RLX_WV(mb + (12 + j) * ps),     \
                               RLX_WV(mb + (18 + j) * ps), RLX_WV(mb + (24 + j) * ps),                  \
                               RLX_WV(mb + (30 + j) * ps), s[j], s[6 + j], s[12 + j], s[18 + j]);       \
                for (int i = 0; i < 4; ++i)      /* o = s A, row by row */                             \
                    RLX_WV_AT4(s[6 * i], s[6 * i + 1], s[6 * i + 2], s[6 * i + 3], s[6 * i + 4], s[6 * i + 5], \
                               o[4 * i], o[4 * i + 1], o[4 * i + 2], o[4 * i + 3]);                     \
            } else {                                                                                   \
                for (int j = 0; j < 4; ++j)                                                            \
                    RLX_WV_AT2(RLX_WV(mb + j * ps), RLX_WV(mb + (4 + j) * ps), RLX_WV(mb + (8 + j) * ps),      \
                               RLX_WV(mb + (12 + j) * ps), s[j], s[4 + j]);                             \
                for (int i = 0; i < 2; ++i)                                                            \
                    RLX_WV_AT2(s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3], o[4 * i], o[4 * i + 1]);  \
            }                                                                                          \
            (void)A;                                                                                   \
            for (int i = 0; i < nr; ++i)                                                               \
                for (int j = 0; j < nc; ++j) {                                                         \
                    const ptrdiff_t off = yo + (i * Wo + j) * 8;                                       \
                    rlx_wv8 val = o[4 * i + j] + bv;                                                   \
                    if (res) val += RLX_WV(res + off);                                                 \
                    ACT_                                                                               \
                }                                                                                      \
        }                                                                                              \
    }

static void rlx_nchwc_wino_out_base(const float* restrict m, const float* restrict bias, const float* restrict res,
                                    float* restrict y, const rlx_nchwc_wino_geom* g, const rlx_nchwc_act* a,
                                    ptrdiff_t t0, ptrdiff_t len, ptrdiff_t ob0, ptrdiff_t ob1) {
    RLX_WINO_OUT_BODY(for (int l = 0; l < 8; ++l) y[off + l] = rlx_nchwc_act1(val[l], a);)
}

static void rlx_nchwc_wino_in_base(const float* x, float* v, const rlx_nchwc_wino_geom* g, ptrdiff_t t0,
                                   ptrdiff_t len) {
    rlx_nchwc_wino_in_body(x, v, g, t0, len);
}

#if RLX_X86_DISPATCH
RLX_TARGET_AVX2 static void rlx_nchwc_wino_out_avx2(const float* restrict m, const float* restrict bias,
                                                    const float* restrict res, float* restrict y,
                                                    const rlx_nchwc_wino_geom* g, const rlx_nchwc_act* a,
                                                    ptrdiff_t t0, ptrdiff_t len, ptrdiff_t ob0, ptrdiff_t ob1) {
    RLX_WINO_OUT_BODY(_mm256_storeu_ps(y + off, rlx_nchwc_act8((__m256)val, a));)
}

RLX_TARGET_AVX2 static void rlx_nchwc_wino_in_avx2(const float* x, float* v, const rlx_nchwc_wino_geom* g,
                                                   ptrdiff_t t0, ptrdiff_t len) {
    rlx_nchwc_wino_in_body(x, v, g, t0, len);
}
#endif
#undef RLX_WINO_OUT_BODY

/* Work items [i0, i1) (see the top); scratch: this run's
 * rlx_nchwc_wino_scratch_floats floats; koff[kb] = kb * chunk * 8. */
static void rlx_nchwc_wino_run(const float* x, ptrdiff_t x_len, const float* u, ptrdiff_t u_len, const float* bias,
                               const float* res, ptrdiff_t res_len, float* y, ptrdiff_t y_len, float* scratch,
                               ptrdiff_t scratch_len, const ptrdiff_t* koff, const rlx_nchwc_wino_geom* g,
                               const rlx_nchwc_act* a, ptrdiff_t i0, ptrdiff_t i1) {
    const int level = rlx_simd_level(), pairs = rlx_nchwc_pairs(level);
    const ptrdiff_t A2 = (g->mt + 2) * (g->mt + 2), C = g->c, M = g->m, chunk = g->chunk;
    const ptrdiff_t tiles = g->n * g->th * g->tw, nchunks = rlx_nchwc_wino_chunks(g);
    const ptrdiff_t panels = (M + RLX_NCHWC_OC - 1) / RLX_NCHWC_OC;
    const ptrdiff_t per_group = rlx_nchwc_per_group(panels, g->groups, level);
    const ptrdiff_t upf = rlx_nchwc_1x1_packed_floats(M, C);
    const int quads = pairs;
    const rlx_nchwc_act none = {RLX_ACT_NONE, 0.0f, 0.0f};
    float* v = scratch;
    float* mm = scratch + A2 * (C * chunk + RLX_WINO_PAD);
    ptrdiff_t have = -1;                        /* the chunk whose V this run holds */
    (void)x_len, (void)u_len, (void)res_len, (void)y_len, (void)scratch_len, (void)nchunks;
    RLX_CHECK_RANGE(0, rlx_nchwc_wino_scratch_floats(g), scratch_len, "nchwc winograd scratch");
    RLX_CHECK_RANGE(0, A2 * upf, u_len, "nchwc winograd packed U");
    RLX_CHECK_RANGE(0, g->n * C * g->h * g->w, x_len, "nchwc winograd x");
    RLX_CHECK_RANGE(0, g->n * M * g->h_out * g->w_out, y_len, "nchwc winograd y");
    if (res) RLX_CHECK_RANGE(0, g->n * M * g->h_out * g->w_out, res_len, "nchwc winograd residual");
    for (ptrdiff_t item = i0; item < i1; ++item) {
        const ptrdiff_t c = item / g->groups, grp = item % g->groups;
        const ptrdiff_t t0 = c * chunk, len = tiles - t0 < chunk ? tiles - t0 : chunk;
        const ptrdiff_t q0 = grp * per_group, q1 = q0 + per_group < panels ? q0 + per_group : panels;
        if (q0 >= q1) continue;
        if (c != have) {
#if RLX_X86_DISPATCH
            if (level) rlx_nchwc_wino_in_avx2(x, v, g, t0, len);
            else
#endif
                rlx_nchwc_wino_in_base(x, v, g, t0, len);
            have = c;
        }
        /* a pass per RLX_WINO_PASS output channels: its Mt stays in L2 */
        for (ptrdiff_t qs = q0; qs < q1; qs += RLX_WINO_PASS / RLX_NCHWC_OC) {
            const ptrdiff_t qe = qs + RLX_WINO_PASS / RLX_NCHWC_OC < q1 ? qs + RLX_WINO_PASS / RLX_NCHWC_OC : q1;
            const ptrdiff_t ob0 = qs * (RLX_NCHWC_OC / 8);
            const ptrdiff_t ob1 = qe * (RLX_NCHWC_OC / 8) < M / 8 ? qe * (RLX_NCHWC_OC / 8) : M / 8;
            const ptrdiff_t ml = (ob1 - ob0) * 8;
            for (ptrdiff_t p = 0; p < A2; ++p) {
                /* the U block the item reads next, prefetched to L2 by this
                 * block's tiles (rlx_nchwc_1x1_span's wnext): position p + 1
                 * of this pass, else the next pass's first, else the next
                 * item's first.  In a model U arrives cold, and without
                 * this each position's first tiles waited on it.  Whole
                 * plans, b1, pair ratios of 31 alternating runs against
                 * none: ResNet-18 1.11 (1 thread) / 1.10 (2 threads),
                 * ResNet-50 1.045 / 1.024; ResNet-50's Winograd thunks
                 * 10-16% faster (plan.profile). */
                const float* wn = NULL;
                if (p + 1 < A2) wn = u + (p + 1) * upf + qs * C * RLX_NCHWC_OC;
                else if (qe < q1) wn = u + qe * C * RLX_NCHWC_OC;
                else if (item + 1 < i1 && (item + 1) % g->groups * per_group < panels)
                    wn = u + (item + 1) % g->groups * per_group * C * RLX_NCHWC_OC;
                rlx_nchwc_1x1_span(level, quads, C, v + p * (C * chunk + RLX_WINO_PAD),
                                   u + p * upf + qs * C * RLX_NCHWC_OC, C, ml, chunk * 8, 0, len, 0, qe - qs, koff,
                                   mm + p * (ml * chunk + RLX_WINO_PAD), NULL, NULL, &none, wn);
            }
#if RLX_X86_DISPATCH
            if (level) rlx_nchwc_wino_out_avx2(mm, bias, res, y, g, a, t0, len, ob0, ob1);
            else
#endif
                rlx_nchwc_wino_out_base(mm, bias, res, y, g, a, t0, len, ob0, ob1);
        }
    }
}

#endif
