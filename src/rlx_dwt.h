/* Depthwise transposed conv (multiplier 1) in 2-D, straight from the input:
 * y[c, oy, ox] = b[c] + sum over taps (kh, kw) with oy = iy*sh - ph + kh,
 * ox = ix*sw - pw + kw of x[c, iy, ix] * w[c, kh, kw].
 *
 * Per output row oy the taps kh = (oy + ph) mod sh + sh*t read input rows
 * iy = (oy + ph - kh) / sh.  Along the row, the outputs of column phase r
 * (ox = sw*j + o_r) read, for taps kw = r' + sw*u, the input columns
 * j + d_u, consecutive in j: each phase is a short 1-D conv over contiguous
 * floats, 8 outputs per vector, and the phases are interleaved into y's
 * row in registers (stride 2: AVX2 unpacks).  Input rows are read from a
 * zero-padded copy of the plane so the loops have no bounds tests.  The
 * per-phase depthwise convs + scatters this replaces wrote every output
 * twice. */
#ifndef RLX_DWT_H
#define RLX_DWT_H

#include "rlx_simd.h"

/* outputs per column phase of one pass of the stride-2 kernel: 4 vectors */
#define RLX_DWT_CHUNK 32

typedef struct {
    ptrdiff_t h, w, oh, ow, kh, kw, sh, sw, ph, pw;
    ptrdiff_t pad_l, xw;           /* the padded input row: pad_l zeros, w floats, zeros to xw */
    ptrdiff_t jn;                  /* outputs per column phase (ceil(ow / sw)) */
} rlx_dwt_geom;

static inline rlx_dwt_geom rlx_dwt_geom_make(ptrdiff_t h, ptrdiff_t w, ptrdiff_t oh, ptrdiff_t ow, ptrdiff_t kh,
                                             ptrdiff_t kw, ptrdiff_t sh, ptrdiff_t sw, ptrdiff_t ph, ptrdiff_t pw) {
    rlx_dwt_geom g;
    g.h = h; g.w = w; g.oh = oh; g.ow = ow; g.kh = kh; g.kw = kw; g.sh = sh; g.sw = sw; g.ph = ph; g.pw = pw;
    g.jn = (ow + sw - 1) / sw;
    /* output ox = sw*j + r (j < jn, r < sw) reads ix = (ox + pw - kw) / sw for
     * kw = (ox + pw) mod sw + sw*u: ix = j + (r + pw - kw) / sw, from
     * j - (kw_max + sw) / sw to j + (sw + pw) / sw */
    g.pad_l = (kw + sw) / sw + 1;
    /* ... and the stride-2 kernel reads whole chunks of RLX_DWT_CHUNK
     * outputs per phase (the last one past jn, into zeros) */
    g.xw = g.pad_l + (g.jn + RLX_DWT_CHUNK - 1) / RLX_DWT_CHUNK * RLX_DWT_CHUNK + (sw + pw) / sw + 2 +
           (w > g.jn ? w - g.jn : 0);
    return g;
}

/* Floats of scratch per thread: the zero-padded input plane (h rows of xw). */
static inline ptrdiff_t rlx_dwt_scratch_floats(const rlx_dwt_geom* g) {
    return g->h * g->xw + 16;
}

/* Taps of one output row: per column phase r, up to RLX_DWT_MAX_TAPS of
 * (pointer into the padded plane at the tap's row and column shift, weight). */
#define RLX_DWT_MAX_TAPS 64
#define RLX_DWT_MAX_SW 8
typedef struct {
    int n[RLX_DWT_MAX_SW];
    const float* src[RLX_DWT_MAX_SW][RLX_DWT_MAX_TAPS];
    float w[RLX_DWT_MAX_SW][RLX_DWT_MAX_TAPS];
} rlx_dwt_taps;

/* Whether a geometry fits the fixed tap tables. */
static inline int rlx_dwt_supported(ptrdiff_t kh, ptrdiff_t kw, ptrdiff_t sh, ptrdiff_t sw) {
    return sw <= RLX_DWT_MAX_SW && ((kh + sh - 1) / sh) * ((kw + sw - 1) / sw) <= RLX_DWT_MAX_TAPS;
}

static void rlx_dwt_row_taps(const rlx_dwt_geom* g, const float* xpad, const float* wt, ptrdiff_t oy,
                             rlx_dwt_taps* t) {
    const ptrdiff_t sh = g->sh, sw = g->sw;
    /* kh = kh0 + sh*u reads input row iy0 - u (one division per row) */
    const ptrdiff_t kh0 = (oy + g->ph) % sh, iy0 = (oy + g->ph - kh0) / sh;
    for (ptrdiff_t r = 0; r < sw; ++r) t->n[r] = 0;
    for (ptrdiff_t kh = kh0, iy = iy0; kh < g->kh; kh += sh, --iy) {
        if (iy < 0 || iy >= g->h) continue;
        /* column phase r: kw = (r + pw) mod sw + sw*v reads the input
         * column shift d = (r + pw - kw) / sw, one less per step of v */
        for (ptrdiff_t r = 0, kw0 = g->pw % sw, d0 = g->pw / sw; r < sw; ++r) {
            for (ptrdiff_t kw = kw0, d = d0; kw < g->kw; kw += sw, --d) {
                const int i = t->n[r]++;
                t->src[r][i] = xpad + iy * g->xw + g->pad_l + d;
                t->w[r][i] = wt[kh * g->kw + kw];
            }
            if (++kw0 == sw) kw0 = 0, ++d0;
        }
    }
}

static void rlx_dwt_pad_plane(const rlx_dwt_geom* g, const float* x, float* xpad) {
    for (ptrdiff_t iy = 0; iy < g->h; ++iy) {
        float* row = xpad + iy * g->xw;
        memset(row, 0, (size_t)g->pad_l * sizeof(float));
        memcpy(row + g->pad_l, x + iy * g->w, (size_t)g->w * sizeof(float));
        memset(row + g->pad_l + g->w, 0, (size_t)(g->xw - g->pad_l - g->w) * sizeof(float));
    }
}

static void rlx_dwt_plane_base(const rlx_dwt_geom* g, const float* x, const float* wt, float b, float* y,
                               float* scratch) {
    rlx_dwt_taps t;
    rlx_dwt_pad_plane(g, x, scratch);
    for (ptrdiff_t oy = 0; oy < g->oh; ++oy) {
        rlx_dwt_row_taps(g, scratch, wt, oy, &t);
        float* yr = y + oy * g->ow;
        for (ptrdiff_t ox = 0; ox < g->ow; ++ox) {
            const ptrdiff_t r = ox % g->sw, j = ox / g->sw;
            float acc = 0.0f;
            for (int i = 0; i < t.n[r]; ++i) acc += t.src[r][i][j] * t.w[r][i];
            yr[ox] = acc + b;
        }
    }
}

#if RLX_X86_DISPATCH
/* Outputs j0 .. j0+7 of column phase r. */
RLX_INLINE_AVX2 __m256 rlx_dwt_phase8(const rlx_dwt_taps* t, ptrdiff_t r, ptrdiff_t j0) {
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < t->n[r]; ++i)
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(t->src[r][i] + j0), _mm256_set1_ps(t->w[r][i]), acc);
    return acc;
}

/* y[4j + r] = p[r][j] for j < 8, r < 4 (32 floats) */
RLX_INLINE_AVX2 void rlx_dwt_interleave4(float* y, const __m256* p) {
    const __m256 l01 = _mm256_unpacklo_ps(p[0], p[1]), h01 = _mm256_unpackhi_ps(p[0], p[1]);
    const __m256 l23 = _mm256_unpacklo_ps(p[2], p[3]), h23 = _mm256_unpackhi_ps(p[2], p[3]);
    /* lanes j (low half) and j + 4 (high half) of all four phases */
    const __m256 j0 = _mm256_shuffle_ps(l01, l23, 0x44), j1 = _mm256_shuffle_ps(l01, l23, 0xEE);
    const __m256 j2 = _mm256_shuffle_ps(h01, h23, 0x44), j3 = _mm256_shuffle_ps(h01, h23, 0xEE);
    _mm256_storeu_ps(y, _mm256_permute2f128_ps(j0, j1, 0x20));
    _mm256_storeu_ps(y + 8, _mm256_permute2f128_ps(j2, j3, 0x20));
    _mm256_storeu_ps(y + 16, _mm256_permute2f128_ps(j0, j1, 0x31));
    _mm256_storeu_ps(y + 24, _mm256_permute2f128_ps(j2, j3, 0x31));
}

/* y[8j + r] = p[r][j] for j, r < 8 (64 floats): an 8 x 8 transpose */
RLX_INLINE_AVX2 void rlx_dwt_interleave8(float* y, const __m256* p) {
    const __m256 a0 = _mm256_unpacklo_ps(p[0], p[1]), a1 = _mm256_unpackhi_ps(p[0], p[1]);
    const __m256 a2 = _mm256_unpacklo_ps(p[2], p[3]), a3 = _mm256_unpackhi_ps(p[2], p[3]);
    const __m256 a4 = _mm256_unpacklo_ps(p[4], p[5]), a5 = _mm256_unpackhi_ps(p[4], p[5]);
    const __m256 a6 = _mm256_unpacklo_ps(p[6], p[7]), a7 = _mm256_unpackhi_ps(p[6], p[7]);
    /* b_k: phases 0-3 (k < 4) or 4-7 of lanes j and j + 4 */
    const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);
    const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
    const __m256 b4 = _mm256_shuffle_ps(a4, a6, 0x44), b5 = _mm256_shuffle_ps(a4, a6, 0xEE);
    const __m256 b6 = _mm256_shuffle_ps(a5, a7, 0x44), b7 = _mm256_shuffle_ps(a5, a7, 0xEE);
    _mm256_storeu_ps(y, _mm256_permute2f128_ps(b0, b4, 0x20));
    _mm256_storeu_ps(y + 8, _mm256_permute2f128_ps(b1, b5, 0x20));
    _mm256_storeu_ps(y + 16, _mm256_permute2f128_ps(b2, b6, 0x20));
    _mm256_storeu_ps(y + 24, _mm256_permute2f128_ps(b3, b7, 0x20));
    _mm256_storeu_ps(y + 32, _mm256_permute2f128_ps(b0, b4, 0x31));
    _mm256_storeu_ps(y + 40, _mm256_permute2f128_ps(b1, b5, 0x31));
    _mm256_storeu_ps(y + 48, _mm256_permute2f128_ps(b2, b6, 0x31));
    _mm256_storeu_ps(y + 56, _mm256_permute2f128_ps(b3, b7, 0x31));
}

RLX_TARGET_AVX2 static void rlx_dwt_plane_avx2(const rlx_dwt_geom* g, const float* x, const float* wt, float b,
                                               float* y, float* scratch) {
    rlx_dwt_taps t;
    const ptrdiff_t sw = g->sw, ow = g->ow;
    const __m256 bv = _mm256_set1_ps(b);
    float tmp[RLX_DWT_MAX_SW][8];
    rlx_dwt_pad_plane(g, x, scratch);
    for (ptrdiff_t oy = 0; oy < g->oh; ++oy) {
        rlx_dwt_row_taps(g, scratch, wt, oy, &t);
        float* yr = y + oy * ow;
        for (ptrdiff_t j0 = 0; j0 < g->jn; j0 += 8) {
            if (sw == 2 && 2 * j0 + 16 <= ow) {
                const __m256 a = _mm256_add_ps(rlx_dwt_phase8(&t, 0, j0), bv);
                const __m256 c = _mm256_add_ps(rlx_dwt_phase8(&t, 1, j0), bv);
                const __m256 lo = _mm256_unpacklo_ps(a, c), hi = _mm256_unpackhi_ps(a, c);
                _mm256_storeu_ps(yr + 2 * j0, _mm256_permute2f128_ps(lo, hi, 0x20));
                _mm256_storeu_ps(yr + 2 * j0 + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
                continue;
            }
            if (sw == 1 && j0 + 8 <= ow) {
                _mm256_storeu_ps(yr + j0, _mm256_add_ps(rlx_dwt_phase8(&t, 0, j0), bv));
                continue;
            }
            if (sw == 4 && 4 * j0 + 32 <= ow) {
                /* output 4j + r = phase r's lane j: a 4 x 8 transpose */
                __m256 p[4];
                for (int r = 0; r < 4; ++r) p[r] = _mm256_add_ps(rlx_dwt_phase8(&t, r, j0), bv);
                rlx_dwt_interleave4(yr + 4 * j0, p);
                continue;
            }
            if (sw == 8 && 8 * j0 + 64 <= ow) {
                /* output 8j + r = phase r's lane j: an 8 x 8 transpose */
                __m256 p[8];
                for (int r = 0; r < 8; ++r) p[r] = _mm256_add_ps(rlx_dwt_phase8(&t, r, j0), bv);
                rlx_dwt_interleave8(yr + 8 * j0, p);
                continue;
            }
            /* the row's last outputs: each phase's vector, then its lanes
             * that land inside the row (no divisions: this runs once per
             * row and plane) */
            for (ptrdiff_t r = 0; r < sw; ++r)
                _mm256_storeu_ps(tmp[r], _mm256_add_ps(rlx_dwt_phase8(&t, r, j0), bv));
            for (ptrdiff_t j = 0; j < 8; ++j)
                for (ptrdiff_t r = 0, ox = sw * (j0 + j); r < sw && ox < ow; ++r, ++ox) yr[ox] = tmp[r][j];
        }
    }
}

/* v's 8 floats to yr when n >= 8, else its first n (none when n <= 0). */
RLX_INLINE_AVX2 void rlx_dwt_store8(float* yr, ptrdiff_t n, __m256 v) {
    if (n >= 8) {
        _mm256_storeu_ps(yr, v);
    } else if (n > 0) {
        const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        _mm256_maskstore_ps(yr, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes), v);
    }
}

/* Outputs x0 .. x0 + 15 of a row of ow (those inside it): phase vectors e
 * and o plus the bias, interleaved e0 o0 e1 o1 ... */
RLX_INLINE_AVX2 void rlx_dwt_store_pair(float* yr, ptrdiff_t x0, ptrdiff_t ow, __m256 e, __m256 o, __m256 bv) {
    const __m256 a = _mm256_add_ps(e, bv), c = _mm256_add_ps(o, bv);
    const __m256 lo = _mm256_unpacklo_ps(a, c), hi = _mm256_unpackhi_ps(a, c);
    rlx_dwt_store8(yr + x0, ow - x0, _mm256_permute2f128_ps(lo, hi, 0x20));
    rlx_dwt_store8(yr + x0 + 8, ow - x0 - 8, _mm256_permute2f128_ps(lo, hi, 0x31));
}

/* One phase's taps [t0, t1) of a kernel row into its 4 vectors a0..a3:
 * tap t reads rp + doff[t] (+ 8, 16, 24) with weight wr[kwi[t]]. */
RLX_INLINE_AVX2 void rlx_dwt_taps4(const float* rp, const ptrdiff_t* doff, const int* kwi, const float* wr, int t0,
                                   int t1, __m256* a0, __m256* a1, __m256* a2, __m256* a3) {
    for (int t = t0; t < t1; ++t) {
        const float* p = rp + doff[t];
        const __m256 w = _mm256_broadcast_ss(wr + kwi[t]);
        *a0 = _mm256_fmadd_ps(_mm256_loadu_ps(p), w, *a0);
        *a1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 8), w, *a1);
        *a2 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 16), w, *a2);
        *a3 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 24), w, *a3);
    }
}

/* Stride 2 along w: the same sums as rlx_dwt_plane_avx2, in the same order
 * (per phase: kernel rows kh in increasing order, then kw), with the tap
 * set-up out of the row loop and 4 vectors per phase in registers.
 *   - A tap's column offset and kw depend only on its column phase (rlx_dwt_
 *     row_taps' enumeration), so they are tabled once per plane; per output
 *     row only the kernel-row phase kh0, the first input row iy0 and the
 *     range of valid kernel rows change.
 *   - Each pass takes RLX_DWT_CHUNK outputs of both phases, 64 of the row,
 *     one weight broadcast per tap for 4 FMAs.  The last pass reads zeros
 *     past the row (rlx_dwt_geom_make) and stores only the row's outputs. */
RLX_TARGET_AVX2 static void rlx_dwt_plane_s2_avx2(const rlx_dwt_geom* g, const float* x, const float* wt, float b,
                                                  float* y, float* scratch) {
    const ptrdiff_t KW = g->kw, KH = g->kh, sh = g->sh, ow = g->ow, xw = g->xw;
    const __m256 bv = _mm256_set1_ps(b);
    int nv[2];
    ptrdiff_t doff[2][RLX_DWT_MAX_TAPS];
    int kwi[2][RLX_DWT_MAX_TAPS];
    for (ptrdiff_t r = 0, kw0 = g->pw % 2, d0 = g->pw / 2; r < 2; ++r) {
        nv[r] = 0;
        for (ptrdiff_t kw = kw0, d = d0; kw < KW; kw += 2, --d) {
            doff[r][nv[r]] = g->pad_l + d;
            kwi[r][nv[r]++] = (int)kw;
        }
        if (++kw0 == 2) kw0 = 0, ++d0;
    }
    const int nj = nv[0] < nv[1] ? nv[0] : nv[1];
    rlx_dwt_pad_plane(g, x, scratch);
    /* kernel row kh0 + sh*u reads input row iy0 - u; kh0 = (oy + ph) mod sh,
     * stepped along with oy (no divisions per row) */
    ptrdiff_t kh0 = g->ph % sh, iy0 = g->ph / sh;
    for (ptrdiff_t oy = 0; oy < g->oh; ++oy) {
        const ptrdiff_t ua = iy0 - (g->h - 1) > 0 ? iy0 - (g->h - 1) : 0;
        float* yr = y + oy * ow;
        for (ptrdiff_t c0 = 0; c0 < g->jn; c0 += RLX_DWT_CHUNK) {
            __m256 e0 = _mm256_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;
            __m256 o0 = e0, o1 = e0, o2 = e0, o3 = e0;
            for (ptrdiff_t u = ua, kh = kh0 + sh * ua; u <= iy0 && kh < KH; ++u, kh += sh) {
                const float* rp = scratch + (iy0 - u) * xw + c0;
                const float* wr = wt + kh * KW;
                int v = 0;
                /* both phases' taps side by side (8 FMA chains), then
                 * the longer phase's remaining taps */
                for (; v < nj; ++v) {
                    const float* p = rp + doff[0][v];
                    const float* q = rp + doff[1][v];
                    const __m256 w = _mm256_broadcast_ss(wr + kwi[0][v]);
                    const __m256 w1 = _mm256_broadcast_ss(wr + kwi[1][v]);
                    e0 = _mm256_fmadd_ps(_mm256_loadu_ps(p), w, e0);
                    o0 = _mm256_fmadd_ps(_mm256_loadu_ps(q), w1, o0);
                    e1 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 8), w, e1);
                    o1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 8), w1, o1);
                    e2 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 16), w, e2);
                    o2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 16), w1, o2);
                    e3 = _mm256_fmadd_ps(_mm256_loadu_ps(p + 24), w, e3);
                    o3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + 24), w1, o3);
                }
                rlx_dwt_taps4(rp, doff[0], kwi[0], wr, v, nv[0], &e0, &e1, &e2, &e3);
                rlx_dwt_taps4(rp, doff[1], kwi[1], wr, v, nv[1], &o0, &o1, &o2, &o3);
            }
            rlx_dwt_store_pair(yr, 2 * c0, ow, e0, o0, bv);
            rlx_dwt_store_pair(yr, 2 * c0 + 16, ow, e1, o1, bv);
            rlx_dwt_store_pair(yr, 2 * c0 + 32, ow, e2, o2, bv);
            rlx_dwt_store_pair(yr, 2 * c0 + 48, ow, e3, o3, bv);
        }
        if (++kh0 == sh) kh0 = 0, ++iy0;
    }
}
#endif

/* One (image, channel) plane: x plane (h*w), w taps (kh*kw), y plane
 * (oh*ow), bias b; scratch: rlx_dwt_scratch_floats floats. */
static void rlx_dwt_plane(const rlx_dwt_geom* g, const float* x, const float* wt, float b, float* y,
                          float* scratch) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level() && g->sw == 2) {
        rlx_dwt_plane_s2_avx2(g, x, wt, b, y, scratch);
        return;
    }
    if (rlx_simd_level()) {
        rlx_dwt_plane_avx2(g, x, wt, b, y, scratch);
        return;
    }
#endif
    rlx_dwt_plane_base(g, x, wt, b, y, scratch);
}

#endif
