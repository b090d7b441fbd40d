/* FMA throughput probe: the machine's measured float32 FMA peak, the
 * reference the benchmarks state their GFLOP/s against.
 *
 * Twelve independent accumulator chains (more than FMA latency x pipes on
 * current x86 cores: 4 cycles x 2 pipes) of acc = acc * a + b, in vectors of
 * 16 floats on the AVX-512 level, of 8 floats (AVX2+FMA) or, in the portable
 * variant, in whatever the compiler makes of 12 x 8 scalar chains.  Each
 * chain starts from a different value so the compiler cannot merge them; the
 * result is returned so it cannot drop them.  Each iteration is 12 x 8 FMAs
 * = 192 flops (12 x 16 = 384 on the AVX-512 level: rlx_peak_flops_per_iter). */
#ifndef RLX_PEAK_H
#define RLX_PEAK_H

#include "rlx_simd.h"

#define RLX_PEAK_FLOPS_PER_ITER 192

static inline double rlx_peak_flops_per_iter(void) {
    return rlx_simd_level() > 1 ? 2.0 * RLX_PEAK_FLOPS_PER_ITER : RLX_PEAK_FLOPS_PER_ITER;
}

#if RLX_X86_DISPATCH
RLX_TARGET_AVX512 static float rlx_fma_probe_avx512(long iters, float seed) {
    const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
    __m512 c[12];
    for (int r = 0; r < 12; ++r) c[r] = _mm512_set1_ps(seed + (float)r);
    for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
        for (int r = 0; r < 12; ++r) c[r] = _mm512_fmadd_ps(c[r], a, b);
    }
    __m512 s = c[0];
    for (int r = 1; r < 12; ++r) s = _mm512_add_ps(s, c[r]);
    return _mm512_reduce_add_ps(s);
}

RLX_TARGET_AVX2 static float rlx_fma_probe_avx2(long iters, float seed) {
    const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
    __m256 c0 = _mm256_set1_ps(seed), c1 = _mm256_set1_ps(seed + 1), c2 = _mm256_set1_ps(seed + 2);
    __m256 c3 = _mm256_set1_ps(seed + 3), c4 = _mm256_set1_ps(seed + 4), c5 = _mm256_set1_ps(seed + 5);
    __m256 c6 = _mm256_set1_ps(seed + 6), c7 = _mm256_set1_ps(seed + 7), c8 = _mm256_set1_ps(seed + 8);
    __m256 c9 = _mm256_set1_ps(seed + 9), c10 = _mm256_set1_ps(seed + 10), c11 = _mm256_set1_ps(seed + 11);
    for (long i = 0; i < iters; ++i) {
        c0 = _mm256_fmadd_ps(c0, a, b);
        c1 = _mm256_fmadd_ps(c1, a, b);
        c2 = _mm256_fmadd_ps(c2, a, b);
        c3 = _mm256_fmadd_ps(c3, a, b);
        c4 = _mm256_fmadd_ps(c4, a, b);
        c5 = _mm256_fmadd_ps(c5, a, b);
        c6 = _mm256_fmadd_ps(c6, a, b);
        c7 = _mm256_fmadd_ps(c7, a, b);
        c8 = _mm256_fmadd_ps(c8, a, b);
        c9 = _mm256_fmadd_ps(c9, a, b);
        c10 = _mm256_fmadd_ps(c10, a, b);
        c11 = _mm256_fmadd_ps(c11, a, b);
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                             _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}
#endif

static float rlx_fma_probe_base(long iters, float seed) {
    float c[12][8];
    for (int r = 0; r < 12; ++r)
        for (int j = 0; j < 8; ++j) c[r][j] = seed + (float)r;
    for (long i = 0; i < iters; ++i)
        for (int r = 0; r < 12; ++r)
            for (int j = 0; j < 8; ++j) c[r][j] = c[r][j] * 0.999f + 0.001f;
    float s = 0.0f;
    for (int r = 0; r < 12; ++r) s += c[r][0] + c[r][7];
    return s;
}

/* `iters` iterations of the probe (RLX_PEAK_FLOPS_PER_ITER flops each) on
 * the widest variant this CPU runs. */
static float rlx_fma_probe(long iters, float seed) {
#if RLX_X86_DISPATCH
    if (rlx_simd_level() > 1) return rlx_fma_probe_avx512(iters, seed);
    if (rlx_simd_level()) return rlx_fma_probe_avx2(iters, seed);
#endif
    return rlx_fma_probe_base(iters, seed);
}

#endif
