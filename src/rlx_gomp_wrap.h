/* One-thread OpenMP regions without a team (GCC + libgomp + GNU ld only).
 *
 * GCC lowers `#pragma omp parallel` (every Cython prange) to a call of
 * GOMP_parallel(fn, data, num_threads, flags).  With num_threads 1, libgomp
 * still builds a team of one and ends each region with a futex wake: about
 * 0.55 us per region here, measured on a bare loop, which is more than a
 * small kernel itself (a one-thread run of a tiny plan paid it twice).  The
 * build force-includes this header into every extension (-include, so each
 * .so gets its own hidden copy) and links it with -Wl,--wrap=GOMP_parallel
 * when the toolchain takes both (setup.py probes), so their calls come here:
 * a one-thread region
 * outside any other runs fn(data) directly.  That is what an orphaned region
 * is in OpenMP terms: omp_get_thread_num() is 0, omp_get_num_threads() 1,
 * worksharing loops give this thread every iteration, barriers return at
 * once.  Anything else goes to libgomp unchanged. */
#ifndef RLX_GOMP_WRAP_H
#define RLX_GOMP_WRAP_H
#include <omp.h>

void __real_GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);

__attribute__((visibility("hidden"), used))
void __wrap_GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags)
{
    if (num_threads == 1 && !omp_in_parallel()) {
        fn(data);
        return;
    }
    __real_GOMP_parallel(fn, data, num_threads, flags);
}
#endif
