# Launch: the base class of every bound kernel (declared in src/rlx_cpu/_launch.pxd),
# and the process-wide thread limit that makes a forked child safe.
import os

import numpy as np

cdef extern from "rlx_omp.h":
    int rlx_omp_thread_num() nogil

# The work meter's counters: one per OpenMP thread number, each on its own
# 64-byte line so the threads of a team never share one.  Teams of plans run
# concurrently from several Python threads add to the same numbers, so a
# note is an OpenMP atomic add (relaxed ordering is all a count needs).
cdef extern from *:
    """
    #define RLX_WORK_SLOTS 64
    typedef struct { long long items; char pad[56]; } rlx_work_slot;
    static rlx_work_slot rlx_work_slots[RLX_WORK_SLOTS];
    static int rlx_work_on = 0;
    /* called by rlx_work_note (src/rlx_work.h) once it has seen the meter on */
    static void rlx_work_add(long long items)
    {
        int t;
        long long *c;
        t = rlx_omp_thread_num();
        if (t < 0 || t >= RLX_WORK_SLOTS)
            return;
        c = &rlx_work_slots[t].items;
        #pragma omp atomic
        *c += items;
    }
    static void rlx_work_switch(int on)
    {
        int t;
        if (on)
            for (t = 0; t < RLX_WORK_SLOTS; t++)
                rlx_work_slots[t].items = 0;
        rlx_work_on = on;
    }
    static long long rlx_work_items(int t) { return rlx_work_slots[t].items; }
    """
    int RLX_WORK_SLOTS
    int rlx_work_on
    void rlx_work_add(long long items) nogil
    void rlx_work_switch(int on) nogil
    long long rlx_work_items(int t) nogil

# Set when a run asked for more than one thread (libgomp then has a pool of
# worker threads); copied to _forked_limit in a child forked after that.
cdef int _pool_started = 0
cdef int _forked_limit = 0


cdef int process_threads(int nthreads) noexcept nogil:
    global _pool_started
    if _forked_limit:
        return 1
    if nthreads > 1 and not _pool_started:
        _pool_started = 1
    return nthreads


def _after_fork_in_child():
    global _forked_limit
    if _pool_started:
        _forked_limit = 1


cdef const int* work_meter_flag() noexcept nogil:
    return &rlx_work_on


cdef void work_meter_add(long long items) noexcept nogil:
    rlx_work_add(items)


def work_meter_start():
    """Zero the work meter and switch it on.  From then on every metered
    kernel loop adds the work items each OpenMP thread ran (thread number i
    adds to counter i).  A diagnostic: it counts the runs of every thread of
    the process, so measure one thing at a time."""
    rlx_work_switch(1)


def work_meter_stop():
    """Switch the work meter off; the items each thread number ran since
    work_meter_start, as a tuple up to the last thread that ran any (at
    least one entry)."""
    rlx_work_switch(0)
    counts = [rlx_work_items(t) for t in range(RLX_WORK_SLOTS)]
    last = max((t for t, c in enumerate(counts) if c), default=0)
    return tuple(counts[:last + 1])


def forked_thread_limit():
    """1 in a child forked after the parent ran kernels on several OpenMP
    threads (its runs then use one thread), else 0 (no limit)."""
    return _forked_limit


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


cdef class Launch:

    cdef int run(self, int nthreads) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement run()")

    def execute(self, int nthreads):
        """Run the kernel with up to `nthreads` threads (the GIL is released)."""
        nthreads = process_threads(nthreads)
        with nogil:
            self.run(nthreads)
        return None


cdef dict _placeholders = {}


cdef object or_placeholder(object view, object dtype):
    if view is not None:
        return view
    key = np.dtype(dtype)
    arr = _placeholders.get(key)
    if arr is None:
        arr = _placeholders[key] = np.zeros(1, key)
    return arr
