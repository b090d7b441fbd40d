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
    g.xw = g.pad_l + (g.jn + 7) / 8 * 8 + (sw + pw) / sw + 2 + (w > g.jn ? w - g.jn : 0);
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
#endif

/* One (image, channel) plane: x plane (h*w), w taps (kh*kw), y plane
 * (oh*ow), bias b; scratch: rlx_dwt_scratch_floats floats. */
static void rlx_dwt_plane(const rlx_dwt_geom* g, const float* x, const float* wt, float b, float* y,
                          float* scratch) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level()) {
        rlx_dwt_plane_avx2(g, x, wt, b, y, scratch);
        return;
    }
#endif
    rlx_dwt_plane_base(g, x, wt, b, y, scratch);
}

#endif
