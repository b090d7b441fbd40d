/* Implicit-GEMM convolution: the im2col GEMM on the conv microkernel without
 * building the patch matrix.
 *
 * Per (image, group) the input is copied once into a "phase" layout: the
 * zero-padded input split by stride, so that for every tap the inputs of
 * consecutive output pixels of a row are consecutive floats:
 *
 *     xs[((ci*sh + a)*sw + b)*hq*wq + i*wq + j] = xpad[ci][i*sh + a][j*sw + b]
 *
 * with xpad the input padded by (ph, pw) at the start and zeros past its
 * end.  Output pixel (oh, ow), tap (kh, kw) of channel ci reads padded row
 * oh*sh + kh*dh and column ow*sw + kw*dw, i.e. xs at
 *
 *     offs[(ci*KH + kh)*KW + kw] + oh*wq + ow,
 *     offs[..] = ((ci*sh + (kh*dh)%sh)*sw + (kw*dw)%sw)*hq*wq + ((kh*dh)/sh)*wq + (kw*dw)/sw,
 *
 * hq = h_out + ((KH-1)*dh)/sh, wq = w_out + ((KW-1)*dw)/sw.  The GEMM's X
 * panel packing then copies runs of a row (rlx_gemm_conv_implicit in
 * rlx_gemm.h): no K x P patch matrix is written or read.  The copy is about
 * the size of the input; the stem's 7x7 stride-2 patch matrix is 16x it. */
#ifndef RLX_IMPLICIT_H
#define RLX_IMPLICIT_H

#include "rlx_gemm.h"

static inline ptrdiff_t rlx_implicit_hq(const rlx_conv_geom* g) {
    return g->h_out + ((g->kh - 1) * g->dh) / g->sh;
}

static inline ptrdiff_t rlx_implicit_wq(const rlx_conv_geom* g) {
    return g->w_out + ((g->kw - 1) * g->dw) / g->sw;
}

/* Floats of one (image, group) copy. */
static inline ptrdiff_t rlx_implicit_floats(const rlx_conv_geom* g) {
    return (g->c_in / g->groups) * g->sh * g->sw * rlx_implicit_hq(g) * rlx_implicit_wq(g);
}

/* Rows of one copy: (ci, a, b, i), each wq floats. */
static inline ptrdiff_t rlx_implicit_rows(const rlx_conv_geom* g) {
    return (g->c_in / g->groups) * g->sh * g->sw * rlx_implicit_hq(g);
}

/* offs[k] for the K = c_in/groups * kh * kw taps, in the weight's order. */
static void rlx_implicit_offsets(const rlx_conv_geom* g, ptrdiff_t* offs) {
    const ptrdiff_t hq = rlx_implicit_hq(g), wq = rlx_implicit_wq(g);
    const ptrdiff_t cpg = g->c_in / g->groups;
    for (ptrdiff_t ci = 0; ci < cpg; ++ci)
        for (ptrdiff_t kh = 0; kh < g->kh; ++kh)
            for (ptrdiff_t kw = 0; kw < g->kw; ++kw) {
                const ptrdiff_t rh = kh * g->dh, rw = kw * g->dw;
                offs[(ci * g->kh + kh) * g->kw + kw] =
                    ((ci * g->sh + rh % g->sh) * g->sw + rw % g->sw) * hq * wq + (rh / g->sh) * wq + rw / g->sw;
            }
}

/* Whether some tap t < k of dilation d lands on phase `a` of stride s. */
static inline int rlx_implicit_phase_used(ptrdiff_t k, ptrdiff_t d, ptrdiff_t s, ptrdiff_t a) {
    for (ptrdiff_t t = 0; t < k && t < s; ++t)
        if ((t * d) % s == a) return 1;
    return 0;
}

/* Row `row` = (ci, a, b, i) of the copy of image ni, group gi, into xs
 * (that copy's base): wq floats. */
static void rlx_implicit_fill_row(const float* x, ptrdiff_t x_len, const rlx_conv_geom* g, ptrdiff_t ni,
                                  ptrdiff_t gi, float* xs, ptrdiff_t xs_len, ptrdiff_t row) {
    const ptrdiff_t hq = rlx_implicit_hq(g), wq = rlx_implicit_wq(g);
    const ptrdiff_t cpg = g->c_in / g->groups;
    const ptrdiff_t i = row % hq;
    ptrdiff_t rest = row / hq;
    const ptrdiff_t b = rest % g->sw;
    rest /= g->sw;
    const ptrdiff_t a = rest % g->sh;
    const ptrdiff_t ci = rest / g->sh;
    float* dst = xs + row * wq;
    const ptrdiff_t r = i * g->sh + a - g->ph;           /* input row */
    RLX_CHECK_RANGE(row * wq, (row + 1) * wq, xs_len, "implicit input copy");
    if (!rlx_implicit_phase_used(g->kh, g->dh, g->sh, a) || !rlx_implicit_phase_used(g->kw, g->dw, g->sw, b))
        return;                                           /* no tap reads this phase (1x1 at stride 2) */
    if (r < 0 || r >= g->h) {
        memset(dst, 0, (size_t)wq * sizeof(float));
        return;
    }
    const float* src = x + ((ni * g->c_in + gi * cpg + ci) * g->h + r) * g->w;
    RLX_CHECK_RANGE(((ni * g->c_in + gi * cpg + ci) * g->h + r) * g->w,
                    ((ni * g->c_in + gi * cpg + ci) * g->h + r + 1) * g->w, x_len, "implicit input row");
    /* columns j with 0 <= j*sw + b - pw < w */
    ptrdiff_t j0 = 0, j1 = wq;
    if (b < g->pw) j0 = (g->pw - b + g->sw - 1) / g->sw;
    {
        const ptrdiff_t lim = (g->w - 1 + g->pw - b);      /* j*sw <= lim */
        const ptrdiff_t jl = lim < 0 ? 0 : lim / g->sw + 1;
        if (jl < j1) j1 = jl;
    }
    if (j0 > j1) j0 = j1;
    if (j0 > 0) memset(dst, 0, (size_t)j0 * sizeof(float));
    if (j1 > j0) {
        const float* s0 = src + j0 * g->sw + b - g->pw;
        if (g->sw == 1)
            memcpy(dst + j0, s0, (size_t)(j1 - j0) * sizeof(float));
        else
            rlx_gather_strided(s0, g->sw, dst + j0, j1 - j0);
    }
    if (j1 < wq) memset(dst + j1, 0, (size_t)(wq - j1) * sizeof(float));
}

#endif
