# Runtime helpers shared by the executor: OpenMP facts of this build and the
# flat launch loop.  Kept tiny; kernels live in their own family modules.
from cpython.dict cimport PyDict_GetItem
from cpython.exc cimport PyErr_CheckSignals
from cpython.ref cimport PyObject
from libc.stdint cimport uintptr_t
from libc.stdlib cimport free, getenv, malloc

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
        self._run(nthreads)

    cdef int _run(self, int nthreads) except -1:
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
        return 0

    @property
    def adaptive_stats(self):
        """{'runs', 'single_thread_runs', 'switches', 'next_threads'} of the
        adaptive thread choice (zeros when not adaptive or single-threaded)."""
        return {"runs": self._ch.runs, "single_thread_runs": self._ch.single_runs,
                "switches": self._ch.switches,
                "next_threads": chooser_threads(&self._ch) if self._ch.full > 1 else self.last_threads}


cdef class BoundRun:
    """A run context's last binding and its run, in one call: the hot path of
    plan.run / run_into when the caller passes the same objects again.

    names: the input names in order; in_src: the caller's object last bound
    to each input; out_dst: the caller's array last bound to each output
    (None: the context's own); staged: (staging array, source) pairs copied
    before the launches (inputs converted to float32); fixups: (destination,
    source) pairs copied after them.  The lists are the run context's own
    (it updates them in place); the tuples it replaces on every re-bind."""
    cdef public tuple names
    cdef public list in_src, out_dst
    cdef public tuple staged, fixups
    cdef public object sequence
    cdef object _copyto

    def __cinit__(self, tuple names, list in_src, list out_dst, sequence, copyto):
        self.names, self.in_src, self.out_dst = names, in_src, out_dst
        self.staged = self.fixups = ()
        self.sequence = sequence
        self._copyto = copyto

    def run(self, feeds, outputs, int nthreads):
        """Run and return True when `feeds` (a dict) holds the last bound
        object under every name and `outputs` is None or a list/tuple of the
        last bound arrays; else return False and run nothing (the caller
        re-binds).  Allocates nothing."""
        cdef Py_ssize_t i, n = len(self.names)
        cdef PyObject* v
        cdef tuple pair
        if type(feeds) is not dict or len(<dict>feeds) != n:
            return False
        for i in range(n):
            v = PyDict_GetItem(<dict>feeds, self.names[i])
            if v == NULL or <object>v is not self.in_src[i]:
                return False
        n = len(self.out_dst)
        if outputs is None:
            for i in range(n):
                if self.out_dst[i] is not None:
                    return False
        elif type(outputs) is list:
            if len(<list>outputs) != n:
                return False
            for i in range(n):
                if (<list>outputs)[i] is not self.out_dst[i]:
                    return False
        elif type(outputs) is tuple:
            if len(<tuple>outputs) != n:
                return False
            for i in range(n):
                if (<tuple>outputs)[i] is not self.out_dst[i]:
                    return False
        else:
            return False
        for pair in self.staged:
            self._copyto(pair[0], pair[1], casting="unsafe")
        if type(self.sequence) is LaunchSequence:
            (<LaunchSequence>self.sequence)._run(nthreads)
        else:
            self.sequence.run(nthreads)
        for pair in self.fixups:
            self._copyto(pair[0], pair[1])
        return True


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


def env_values(tuple names):
    """The values of the environment variables `names` (bytes) as getenv sees
    them: a tuple of bytes, None for an unset one.  Assignments to os.environ
    call putenv, so this sees them too, for about 50 ns a name (os.environ.get
    costs about 1 us): the per-call caches of the functional API compare it
    to notice a changed switch without re-parsing every one."""
    cdef Py_ssize_t i, n = len(names)
    cdef const char* v
    out = [None] * n
    for i in range(n):
        v = getenv(<bytes>names[i])
        if v != NULL:
            out[i] = <bytes>v
    return tuple(out)


cdef extern from *:
    """
    extern char **environ;
    """
    char** environ


def env_snapshot():
    """Every RLX_* and OMP_* variable of the environment as a tuple of
    b"NAME=value" entries (in environ's order): one pass over environ, about
    0.1 us, so plan caches can key on all the switches compile() reads."""
    cdef char** e = environ
    out = []
    if e != NULL:
        while e[0] != NULL:
            if (e[0][0] == b'R' and e[0][1] == b'L' and e[0][2] == b'X' and e[0][3] == b'_') or \
                    (e[0][0] == b'O' and e[0][1] == b'M' and e[0][2] == b'P' and e[0][3] == b'_'):
                out.append(<bytes>e[0])
            e += 1
    return tuple(out)


def address_of(arr):
    """Data address of a numpy array (used for alignment tests)."""
    return <uintptr_t>arr.__array_interface__["data"][0]
