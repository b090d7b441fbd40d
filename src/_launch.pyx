# Launch: the base class of every bound kernel (declared in src/rlx_cpu/_launch.pxd).
import numpy as np


cdef class Launch:

    cdef int run(self, int nthreads) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement run()")

    def execute(self, int nthreads):
        """Run the kernel with up to `nthreads` threads (the GIL is released)."""
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
