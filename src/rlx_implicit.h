/* Implicit-GEMM convolution: the im2col GEMM on the conv microkernel without
 * building the patch matrix.
 *
 * Per (image, group) the input is copied once into a "phase" layout: the
 * zero-padded input split by stride, so that for every tap the inputs of
 * consecutive output pixels of a row are consecutive floats.  In 2-D:
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
 * hq = h_out + ((KH-1)*dh)/sh, wq = w_out + ((KW-1)*dw)/sw.  A 3-D conv adds
 * the depth axis the same way (phases of the depth stride outermost after
 * the channel, planes dq x hq x wq); a 2-D conv is the 3-D one with depth 1.  The GEMM's X
 * panel packing then copies runs of a row (rlx_gemm_conv_implicit in
 * rlx_gemm.h): no K x P patch matrix is written or read.  The copy is about
 * the size of the input; the stem's 7x7 stride-2 patch matrix is 16x it. */
#ifndef RLX_IMPLICIT_H
#define RLX_IMPLICIT_H

#include "rlx_gemm.h"

/* The geometry the implicit copy needs, on three spatial axes (d, h, w); a
 * 2-D conv has d = out_d = k_d = s_d = dil_d = 1 and no padding on d. */
typedef struct {
    ptrdiff_t c_in, groups;
    ptrdiff_t size[3], out[3], k[3], s[3], p[3], dil[3];
    ptrdiff_t q[3];                    /* phase-plane extents: out + ((k - 1) * dil) / s */
} rlx_implicit_geom;

static inline rlx_implicit_geom rlx_implicit_geom_3d(ptrdiff_t c_in, ptrdiff_t groups, const ptrdiff_t* size,
                                                     const ptrdiff_t* out, const ptrdiff_t* k, const ptrdiff_t* s,
                                                     const ptrdiff_t* p, const ptrdiff_t* dil) {
    rlx_implicit_geom ig;
    ig.c_in = c_in;
    ig.groups = groups;
    for (int a = 0; a < 3; ++a) {
        ig.size[a] = size[a];
        ig.out[a] = out[a];
        ig.k[a] = k[a];
        ig.s[a] = s[a];
        ig.p[a] = p[a];
        ig.dil[a] = dil[a];
        ig.q[a] = out[a] + ((k[a] - 1) * dil[a]) / s[a];
    }
    return ig;
}

static inline rlx_implicit_geom rlx_implicit_geom_2d(const rlx_conv_geom* g) {
    const ptrdiff_t size[3] = {1, g->h, g->w}, out[3] = {1, g->h_out, g->w_out}, k[3] = {1, g->kh, g->kw};
    const ptrdiff_t s[3] = {1, g->sh, g->sw}, p[3] = {0, g->ph, g->pw}, dil[3] = {1, g->dh, g->dw};
    return rlx_implicit_geom_3d(g->c_in, g->groups, size, out, k, s, p, dil);
}

static inline ptrdiff_t rlx_implicit_plane(const rlx_implicit_geom* ig) {
    return ig->q[0] * ig->q[1] * ig->q[2];
}

/* Floats of one (image, group) copy. */
static inline ptrdiff_t rlx_implicit_floats(const rlx_implicit_geom* ig) {
    return (ig->c_in / ig->groups) * ig->s[0] * ig->s[1] * ig->s[2] * rlx_implicit_plane(ig);
}

/* Floats of one copy's slot in scratch: the copy, then RLX_IMPLICIT_SLACK
 * floats that rlx_gemm_conv_implicit_direct may read past it (zeroed). */
static inline ptrdiff_t rlx_implicit_slot_floats(const rlx_implicit_geom* ig) {
    return rlx_implicit_floats(ig) + RLX_IMPLICIT_SLACK;
}

/* Rows of one copy: (ci, a_d, a_h, a_w, i_d, i_h), each q[2] floats. */
static inline ptrdiff_t rlx_implicit_rows(const rlx_implicit_geom* ig) {
    return (ig->c_in / ig->groups) * ig->s[0] * ig->s[1] * ig->s[2] * ig->q[0] * ig->q[1];
}

/* offs[k] for the K = c_in/groups * k_d * k_h * k_w taps, in the weight's order. */
static void rlx_implicit_offsets(const rlx_implicit_geom* ig, ptrdiff_t* offs) {
    const ptrdiff_t cpg = ig->c_in / ig->groups, plane = rlx_implicit_plane(ig);
    ptrdiff_t n = 0;
    for (ptrdiff_t ci = 0; ci < cpg; ++ci)
        for (ptrdiff_t t0 = 0; t0 < ig->k[0]; ++t0)
            for (ptrdiff_t t1 = 0; t1 < ig->k[1]; ++t1)
                for (ptrdiff_t t2 = 0; t2 < ig->k[2]; ++t2) {
                    const ptrdiff_t r0 = t0 * ig->dil[0], r1 = t1 * ig->dil[1], r2 = t2 * ig->dil[2];
                    const ptrdiff_t phase = ((ci * ig->s[0] + r0 % ig->s[0]) * ig->s[1] + r1 % ig->s[1]) * ig->s[2]
                                            + r2 % ig->s[2];
                    offs[n++] = phase * plane + ((r0 / ig->s[0]) * ig->q[1] + r1 / ig->s[1]) * ig->q[2]
                                + r2 / ig->s[2];
                }
}

/* Whether some tap t < k of dilation d lands on phase `a` of stride s. */
static inline int rlx_implicit_phase_used(ptrdiff_t k, ptrdiff_t d, ptrdiff_t s, ptrdiff_t a) {
    for (ptrdiff_t t = 0; t < k && t < s; ++t)
        if ((t * d) % s == a) return 1;
    return 0;
}

/* Columns [*j0, *j1) of a copy row of phase a2 that hold input (the rest
 * is padding): 0 <= j*s + a2 - p < w. */
static inline void rlx_implicit_cols(const rlx_implicit_geom* ig, ptrdiff_t a2, ptrdiff_t* j0, ptrdiff_t* j1) {
    const ptrdiff_t sw = ig->s[2], pw = ig->p[2], w = ig->size[2], wq = ig->q[2];
    ptrdiff_t lo = 0, hi = wq;
    if (a2 < pw) lo = (pw - a2 + sw - 1) / sw;
    {
        const ptrdiff_t lim = w - 1 + pw - a2;               /* j*sw <= lim */
        const ptrdiff_t jl = lim < 0 ? 0 : lim / sw + 1;
        if (jl < hi) hi = jl;
    }
    if (lo > hi) lo = hi;
    *j0 = lo;
    *j1 = hi;
}

/* Rows [r0, r1) of the copy of image ni, group gi, into xs (that copy's
 * base), each q[2] floats; row = (ci, a_d, a_h, a_w, i_d, i_h) in that
 * order, outermost first.  The row index is decoded once and then counted
 * up (per-row divisions cost more than copying a short row).  Rows of a
 * phase no tap reads (a 1x1 kernel at stride 2) are left as they are. */
static void rlx_implicit_fill_rows(const float* x, ptrdiff_t x_len, const rlx_implicit_geom* ig, ptrdiff_t ni,
                                   ptrdiff_t gi, float* xs, ptrdiff_t xs_len, ptrdiff_t r0, ptrdiff_t r1) {
    const ptrdiff_t wq = ig->q[2];
    const ptrdiff_t cpg = ig->c_in / ig->groups;
    const ptrdiff_t sw = ig->s[2], pw = ig->p[2];
    if (r0 >= r1) return;
    RLX_CHECK_RANGE(r0 * wq, r1 * wq, xs_len, "implicit input copy");
    ptrdiff_t rest = r0;
    ptrdiff_t i1 = rest % ig->q[1];
    rest /= ig->q[1];
    ptrdiff_t i0 = rest % ig->q[0];
    rest /= ig->q[0];
    ptrdiff_t a2 = rest % ig->s[2];
    rest /= ig->s[2];
    ptrdiff_t a1 = rest % ig->s[1];
    rest /= ig->s[1];
    ptrdiff_t a0 = rest % ig->s[0];
    ptrdiff_t ci = rest / ig->s[0];
    ptrdiff_t j0, j1;
    int used = 0;
    rlx_implicit_cols(ig, a2, &j0, &j1);
    used = rlx_implicit_phase_used(ig->k[0], ig->dil[0], ig->s[0], a0) &&
           rlx_implicit_phase_used(ig->k[1], ig->dil[1], ig->s[1], a1) &&
           rlx_implicit_phase_used(ig->k[2], ig->dil[2], ig->s[2], a2);
    for (ptrdiff_t row = r0; row < r1; ++row) {
        float* dst = xs + row * wq;
        if (used) {
            const ptrdiff_t z = i0 * ig->s[0] + a0 - ig->p[0];    /* input depth, row */
            const ptrdiff_t r = i1 * ig->s[1] + a1 - ig->p[1];
            if (z < 0 || z >= ig->size[0] || r < 0 || r >= ig->size[1]) {
                memset(dst, 0, (size_t)wq * sizeof(float));
            } else {
                const ptrdiff_t src_off =
                    (((ni * ig->c_in + gi * cpg + ci) * ig->size[0] + z) * ig->size[1] + r) * ig->size[2];
                RLX_CHECK_RANGE(src_off, src_off + ig->size[2], x_len, "implicit input row");
                const float* s0 = x + src_off + j0 * sw + a2 - pw;
                for (ptrdiff_t j = 0; j < j0; ++j) dst[j] = 0.0f;
                if (sw == 1)
                    for (ptrdiff_t j = j0; j < j1; ++j) dst[j] = s0[j - j0];
                else if (j1 > j0)
                    rlx_gather_strided(s0, sw, dst + j0, j1 - j0);
                for (ptrdiff_t j = j1; j < wq; ++j) dst[j] = 0.0f;
            }
        }
        /* next row: count up (i_h, i_d, a_w, a_h, a_d, ci) */
        if (++i1 < ig->q[1]) continue;
        i1 = 0;
        if (++i0 < ig->q[0]) continue;
        i0 = 0;
        if (++a2 < ig->s[2]) {
            rlx_implicit_cols(ig, a2, &j0, &j1);
        } else {
            a2 = 0;
            rlx_implicit_cols(ig, a2, &j0, &j1);
            if (++a1 >= ig->s[1]) {
                a1 = 0;
                if (++a0 >= ig->s[0]) {
                    a0 = 0;
                    ++ci;
                }
            }
        }
        used = rlx_implicit_phase_used(ig->k[0], ig->dil[0], ig->s[0], a0) &&
               rlx_implicit_phase_used(ig->k[1], ig->dil[1], ig->s[1], a1) &&
               rlx_implicit_phase_used(ig->k[2], ig->dil[2], ig->s[2], a2);
    }
}

#endif
