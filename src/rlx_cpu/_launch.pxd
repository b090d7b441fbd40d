# The common base of every bound kernel launch (src/_launch.pyx defines it).
#
# This file sits in src/rlx_cpu/ so that `from rlx_cpu._launch cimport Launch`
# names the extension module rlx_cpu._launch: a cdef class shared between
# extension modules is imported at module init under its package name, which
# a flat src/_launch.pxd would lose (it would be looked up as `_launch`).

cdef class Launch:
    """A kernel bound to one arena's memory.  Subclasses override run(), which
    executes the whole kernel without the GIL; execute(nthreads) is the Python
    entry and _runtime.run_launches the typed loop over a plan's launches."""
    cdef int run(self, int nthreads) except -1 nogil
    # The thread count the launch's scratch was sized for (per-thread slabs):
    # a run never uses more.  0 = no per-thread scratch, any count is safe.
    cdef int max_threads


# The work meter (off unless switched on, see work_meter_start in _launch.pyx):
# a kernel's parallel loops note the work items each OpenMP thread took.  The
# note is inlined from src/rlx_work.h; every module that notes calls
# work_meter_bind() once at import so its notes reach this module's counters.
cdef extern from "rlx_work.h":
    void work_note "rlx_work_note"(long long items) noexcept nogil
    void rlx_work_bind(const int* flag, void (*sink)(long long) noexcept nogil) noexcept nogil

cdef const int* work_meter_flag() noexcept nogil
cdef void work_meter_add(long long items) noexcept nogil


cdef inline void work_meter_bind() noexcept nogil:
    rlx_work_bind(work_meter_flag(), work_meter_add)


# The thread count a run may ask OpenMP for in this process: `nthreads`, or 1
# in a child forked after this process ran OpenMP with more than one thread
# (libgomp's thread pool does not survive fork; its first multi-threaded
# region in the child would wait forever for threads that no longer exist).
# Every entry point that runs launches (Launch.execute, LaunchSequence.run)
# passes its count through this once.
cdef int process_threads(int nthreads) noexcept nogil


cdef inline int effective_threads(int requested, int max_threads) noexcept nogil:
    """The one thread-count rule of every launch: the requested count, capped
    at max_threads when that is set (> 0); a count <= 0 means "as many as
    allowed" (max_threads, or 1 when uncapped)."""
    if max_threads <= 0:
        return requested if requested > 0 else 1
    return requested if 0 < requested <= max_threads else max_threads


cdef inline int small_work_threads(Py_ssize_t work, int t, Py_ssize_t min_work) noexcept nogil:
    """The small-work rule of the elementwise, tensor and reduction kernels:
    below `min_work` elements one thread runs the op (a fork/join costs more)."""
    return t if work >= min_work else 1


# A typed memoryview attribute cannot be None in nogil code, so an absent
# optional view (bias, scratch, indices) is bound to a shared one-element
# placeholder of its dtype; kernels never touch it (has_bias is false, the
# algorithm needs no scratch, indices are off).
cdef object or_placeholder(object view, object dtype)
