# Runtime helpers shared by the executor: OpenMP facts of this build and the
# flat launch loop.  Kept tiny; kernels live in their own family modules.
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, malloc

from rlx_cpu._launch cimport Launch, process_threads
from _adaptive cimport (Chooser, chooser_begin, chooser_end, chooser_init, chooser_option, chooser_record,
                        chooser_threads)

from rlx_cpu._launch import forked_thread_limit  # noqa: F401  (re-exported)

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


cdef class LaunchSequence:
    """The bound launches of one run context as a C array, built once, so a
    run is a loop with no Python call and no allocation.

    Kernel launches (``Launch`` subclasses) run with the GIL released, one
    release per launch; between two launches the loop takes the GIL back and
    checks for pending signals, so Ctrl-C (SIGINT) raises KeyboardInterrupt
    after the launch in progress instead of after the whole run.  Any other
    object with an ``execute(nthreads)`` method -- a launch written in
    Python, such as the toy op family in tests/test_op_registry.py -- is
    called with the GIL held, so an op family needs no Cython to exist.

    adaptive: a run asked for several threads may use one instead, chosen
    from the measured times of earlier runs (src/_adaptive.pxd), so that a
    busy competing process cannot make a multi-threaded run slower than a
    single-threaded one.  Results are the same either way."""
    cdef list _keep            # owns the launches the borrowed pointers refer to
    cdef PyObject** _ptrs
    cdef char* _typed
    cdef readonly Py_ssize_t size
    cdef readonly bint adaptive
    cdef readonly int last_threads     # the thread count of the last run
    cdef Chooser _ch

    def __cinit__(self, launches, bint adaptive=False):
        cdef Py_ssize_t i
        self._keep = list(launches)
        self.size = len(self._keep)
        self.adaptive = adaptive
        self.last_threads = 0
        chooser_init(&self._ch, 0)
        self._ptrs = <PyObject**>malloc(max(self.size, 1) * sizeof(PyObject*))
        self._typed = <char*>malloc(max(self.size, 1))
        if self._ptrs == NULL or self._typed == NULL:
            raise MemoryError()
        for i in range(self.size):
            obj = self._keep[i]
            if not isinstance(obj, Launch) and not callable(getattr(obj, "execute", None)):
                raise TypeError(f"launch {i} ({type(obj).__name__}) is neither a kernel Launch nor has "
                                "an execute(nthreads) method")
            self._ptrs[i] = <PyObject*>obj
            self._typed[i] = isinstance(obj, Launch)

    def __dealloc__(self):
        free(self._ptrs)
        free(self._typed)

    def replace(self, Py_ssize_t i, launch):
        """Put `launch` at position i (a run context re-binding the launches
        that read or write a per-run input/output segment)."""
        if not 0 <= i < self.size:
            raise IndexError(f"launch index {i} out of range for {self.size} launches")
        if not isinstance(launch, Launch) and not callable(getattr(launch, "execute", None)):
            raise TypeError(f"launch {i} ({type(launch).__name__}) is neither a kernel Launch nor has "
                            "an execute(nthreads) method")
        self._keep[i] = launch
        self._ptrs[i] = <PyObject*>launch
        self._typed[i] = isinstance(launch, Launch)

    def run(self, int nthreads):
        """Run every launch in order on `nthreads` OpenMP threads (or on one,
        when adaptive and one has been measured to be faster)."""
        cdef Py_ssize_t i
        cdef int opt = 0
        cdef double t0 = 0
        nthreads = process_threads(nthreads)
        cdef bint choose = self.adaptive and nthreads > 1
        if choose:
            nthreads = chooser_begin(&self._ch, nthreads, &opt, &t0)
        for i in range(self.size):
            if i:
                PyErr_CheckSignals()      # raises KeyboardInterrupt & co. between launches
            if self._typed[i]:
                with nogil:
                    (<Launch>self._ptrs[i]).run(nthreads)
            else:
                (<object>self._ptrs[i]).execute(nthreads)
        if choose:
            chooser_end(&self._ch, opt, t0)
        self.last_threads = nthreads
        return None

    @property
    def adaptive_stats(self):
        """{'runs', 'single_thread_runs', 'switches', 'next_threads'} of the
        adaptive thread choice (zeros when not adaptive or single-threaded)."""
        return {"runs": self._ch.runs, "single_thread_runs": self._ch.single_runs,
                "switches": self._ch.switches,
                "next_threads": chooser_threads(&self._ch) if self._ch.full > 1 else self.last_threads}


cdef class ThreadChooser:
    """The adaptive thread choice of LaunchSequence on its own, driven with
    given run times (tests use it to check the policy without a clock)."""
    cdef Chooser _ch

    def __cinit__(self, int full):
        if full < 2:
            raise ValueError(f"ThreadChooser: full must be >= 2 threads, got {full}")
        chooser_init(&self._ch, full)

    def next_threads(self):
        """The thread count the next run would use."""
        return chooser_threads(&self._ch)

    def record(self, double seconds):
        """Account the next run (on next_threads()) as taking `seconds`."""
        chooser_record(&self._ch, chooser_option(&self._ch), seconds)

    @property
    def stats(self):
        return {"runs": self._ch.runs, "single_thread_runs": self._ch.single_runs,
                "switches": self._ch.switches, "interval": self._ch.interval}


def run_launches(list launches, int nthreads):
    """Execute bound launches in order (see LaunchSequence; a run context
    keeps its sequence, so plan runs do not rebuild it)."""
    LaunchSequence(launches).run(nthreads)


def run_launches_timed(list launches, int nthreads, timer):
    """As run_launches, returning the seconds each launch took."""
    cdef Launch launch
    out = []
    nthreads = process_threads(nthreads)
    for obj in launches:
        t0 = timer()
        if isinstance(obj, Launch):
            launch = <Launch>obj
            with nogil:
                launch.run(nthreads)
        else:
            obj.execute(nthreads)
        out.append(timer() - t0)
    return out


def address_of(arr):
    """Data address of a numpy array (used for alignment tests)."""
    return <uintptr_t>arr.__array_interface__["data"][0]
