# Launch: the base class of every bound kernel (declared in src/rlx_cpu/_launch.pxd).


cdef class Launch:

    cdef int run(self, int nthreads) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement run()")

    def execute(self, int nthreads):
        """Run the kernel with up to `nthreads` threads (the GIL is released)."""
        with nogil:
            self.run(nthreads)
        return None
