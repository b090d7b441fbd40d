/* Branch-free argmax update for max pooling with indices.
 *
 * For i in [0, n): v = x[i*s]; if (v > y[i] || v is NaN) { y[i] = v; ip[i] = i0 + i*s; }
 *
 * Written with bit masks instead of a conditional: on real data "v beats the
 * running max" is unpredictable, and compilers turn the plain `if` (or a
 * ternary) into conditional stores behind a mispredicting branch.  restrict:
 * y, ip and x never overlap (separate arena buffers). */
#ifndef RLX_POOL_H
#define RLX_POOL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline void rlx_argmax_run(float *restrict y, int64_t *restrict ip, const float *restrict x,
                                  ptrdiff_t n, ptrdiff_t s, int64_t i0)
{
    for (ptrdiff_t i = 0; i < n; ++i) {
        float v = x[i * s], c = y[i];
        uint32_t vb, cb, rb;
        int take = (v > c) | (v != v);
        uint32_t m32 = (uint32_t)0 - (uint32_t)take;
        uint64_t m64 = (uint64_t)0 - (uint64_t)take;
        memcpy(&vb, &v, 4);
        memcpy(&cb, &c, 4);
        rb = (vb & m32) | (cb & ~m32);
        memcpy(&y[i], &rb, 4);
        ip[i] = (int64_t)(((uint64_t)ip[i] & ~m64) | ((uint64_t)(i0 + i * s) & m64));
    }
}

/* Sum of x[0..n) in double over eight interleaved lanes, combined pairwise:
 * a fixed order (so any thread count gives the same bits) that the compiler
 * can vectorise (float -> double conversions two or four at a time). */
static inline double rlx_sum_f64(const float *restrict x, ptrdiff_t n)
{
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    ptrdiff_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j)
            lane[j] += (double)x[i + j];
    for (; i < n; ++i)
        lane[0] += (double)x[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

#endif
