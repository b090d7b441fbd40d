# Launch: the base class of every bound kernel (declared in src/rlx_cpu/_launch.pxd),
# and the process-wide thread limit that makes a forked child safe.
import os

import numpy as np

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
