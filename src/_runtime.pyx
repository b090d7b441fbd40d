# Runtime helpers shared by the executor: OpenMP facts of this build and the
# flat launch loop.  Kept tiny; kernels live in their own family modules.
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

from rlx_cpu._launch cimport Launch

cdef extern from "rlx_omp.h":
    int RLX_HAVE_OMP
    int RLX_DEBUG_CHECKS
    int rlx_omp_max_threads() nogil

# Instruction-set extensions the C compiler was allowed to use for this build
# (its predefined macros).  Wheels target the baseline of each platform, so
# this is usually SSE2 or NEON: the speed-critical GEMMs run in scipy's BLAS,
# which picks its kernels for the running CPU itself.
cdef extern from *:
    """
    static const char rlx_build_isa_str[] = ""
    #if defined(__SSE2__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2)
        "SSE2 "
    #endif
    #if defined(__SSE4_2__)
        "SSE42 "
    #endif
    #if defined(__AVX__)
        "AVX "
    #endif
    #if defined(__FMA__)
        "FMA3 "
    #endif
    #if defined(__AVX2__)
        "AVX2 "
    #endif
    #if defined(__AVX512F__)
        "AVX512F "
    #endif
    #if defined(__ARM_NEON) || defined(_M_ARM64)
        "NEON "
    #endif
    #if defined(__ARM_FEATURE_SVE)
        "SVE "
    #endif
    ;
    """
    const char* rlx_build_isa_str


def openmp_enabled():
    """True when this build was compiled with OpenMP."""
    return bool(RLX_HAVE_OMP)


def debug_checks_enabled():
    """True when kernels were compiled with boundscheck/wraparound/initializedcheck."""
    return bool(RLX_DEBUG_CHECKS)


def build_isa():
    """Instruction-set extensions this build was compiled for, e.g. ['SSE2']."""
    return rlx_build_isa_str.decode("ascii").split()


def omp_max_threads():
    """OpenMP's default team size (1 without OpenMP)."""
    return rlx_omp_max_threads()


def run_launches(list launches, int nthreads):
    """Execute bound launches in order: the whole hot loop of a plan run.

    Every element must be a Launch (checked before anything runs).  The loop
    holds borrowed pointers (the list keeps the launches alive) and calls each
    launch's run() with the GIL released once around the whole loop."""
    cdef Py_ssize_t i, n = len(launches)
    cdef PyObject** ptrs
    if n == 0:
        return None
    ptrs = <PyObject**>malloc(n * sizeof(PyObject*))
    if ptrs == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            ptrs[i] = <PyObject*><Launch?>launches[i]
        with nogil:
            for i in range(n):
                (<Launch>ptrs[i]).run(nthreads)
    finally:
        free(ptrs)
    return None


def run_launches_timed(list launches, int nthreads, timer):
    """As run_launches, returning the seconds each launch took."""
    cdef Launch launch
    out = []
    for obj in launches:
        launch = <Launch?>obj
        t0 = timer()
        with nogil:
            launch.run(nthreads)
        out.append(timer() - t0)
    return out


def address_of(arr):
    """Data address of a numpy array (used for alignment tests)."""
    return <uintptr_t>arr.__array_interface__["data"][0]
