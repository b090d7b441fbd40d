/* OpenMP shims: the same names whether or not the build has OpenMP, so
 * kernels never need conditional compilation. Without OpenMP every query
 * answers "one thread" and prange loops run serially. */
#ifndef RLX_OMP_H
#define RLX_OMP_H

#ifdef _OPENMP
#include <omp.h>
#define RLX_HAVE_OMP 1
static inline int rlx_omp_max_threads(void) { return omp_get_max_threads(); }
static inline int rlx_omp_thread_num(void) { return omp_get_thread_num(); }
#else
#define RLX_HAVE_OMP 0
static inline int rlx_omp_max_threads(void) { return 1; }
static inline int rlx_omp_thread_num(void) { return 0; }
#endif

#ifndef RLX_DEBUG_CHECKS
#define RLX_DEBUG_CHECKS 0
#endif

#endif
