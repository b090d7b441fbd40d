# Runtime helpers shared by the executor: OpenMP facts of this build and the
# flat launch loop.  Kept tiny; kernels live in their own family modules.
from libc.stdint cimport uintptr_t

cdef extern from "rlx_omp.h":
    int RLX_HAVE_OMP
    int RLX_DEBUG_CHECKS
    int rlx_omp_max_threads() nogil


def openmp_enabled():
    """True when this build was compiled with OpenMP."""
    return bool(RLX_HAVE_OMP)


def debug_checks_enabled():
    """True when kernels were compiled with boundscheck/wraparound/initializedcheck."""
    return bool(RLX_DEBUG_CHECKS)


def omp_max_threads():
    """OpenMP's default team size (1 without OpenMP)."""
    return rlx_omp_max_threads()


def run_launches(list launches, int nthreads):
    """Execute bound launches in order: the whole hot loop of a plan run."""
    for launch in launches:
        launch.execute(nthreads)


def run_launches_timed(list launches, int nthreads, timer):
    """As run_launches, returning the seconds each launch took."""
    out = []
    for launch in launches:
        t0 = timer()
        launch.execute(nthreads)
        out.append(timer() - t0)
    return out


def address_of(arr):
    """Data address of a numpy array (used for alignment tests)."""
    return <uintptr_t>arr.__array_interface__["data"][0]
