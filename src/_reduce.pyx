# Reductions of inference graphs over the middle axis of an [outer, k, inner]
# view, float32 in and out, double accumulation:
#   * ReduceMeanLaunch: y[o, i] = mean_j x[o, j, i];
#   * SoftmaxLaunch:    y[o, j, i] = exp(x[o, j, i] - m) / sum_j exp(x[o, j, i] - m),
#     m the max over j (the usual overflow guard).
# One (o, i) line per work item: each output is computed by one thread in one
# order, so results do not depend on the thread count.
from cython.parallel cimport prange
from libc.math cimport exp

from rlx_cpu._launch cimport Launch, effective_threads, small_work_threads, work_note, work_meter_bind

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef Py_ssize_t PARALLEL_MIN = 16384


cdef class ReduceMeanLaunch(Launch):
    cdef const float[::1] x
    cdef float[::1] y
    cdef Py_ssize_t outer, k, inner

    def __init__(self, x, y, Py_ssize_t outer, Py_ssize_t k, Py_ssize_t inner, int max_threads):
        if k < 1 or x.shape[0] < outer * k * inner or y.shape[0] < outer * inner:
            raise ValueError("ReduceMeanLaunch: buffers do not match [outer, k, inner]")
        self.x, self.y = x, y
        self.outer, self.k, self.inner = outer, k, inner
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.outer * self.k * self.inner, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t line
        for line in prange(self.outer * self.inner, num_threads=t, schedule='static'):
            work_note(1)
            self._line(line)
        # end: prange
        return 0

    cdef int _line(self, Py_ssize_t line) except -1 nogil:
        cdef Py_ssize_t o = line // self.inner, i = line % self.inner, j
        cdef Py_ssize_t base = o * self.k * self.inner + i
        cdef double a0 = 0.0, a1 = 0.0
        j = 0
        while j + 2 <= self.k:
            a0 += self.x[base + j * self.inner]
            a1 += self.x[base + (j + 1) * self.inner]
            j += 2
        if j < self.k:
            a0 += self.x[base + j * self.inner]
        self.y[line] = <float>((a0 + a1) / self.k)
        return 0


cdef class SoftmaxLaunch(Launch):
    cdef const float[::1] x
    cdef float[::1] y
    cdef Py_ssize_t outer, k, inner

    def __init__(self, x, y, Py_ssize_t outer, Py_ssize_t k, Py_ssize_t inner, int max_threads):
        if k < 1 or x.shape[0] < outer * k * inner or y.shape[0] < outer * k * inner:
            raise ValueError("SoftmaxLaunch: buffers do not match [outer, k, inner]")
        self.x, self.y = x, y
        self.outer, self.k, self.inner = outer, k, inner
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.outer * self.k * self.inner, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t line
        for line in prange(self.outer * self.inner, num_threads=t, schedule='static'):
            work_note(1)
            self._line(line)
        # end: prange
        return 0

    cdef int _line(self, Py_ssize_t line) except -1 nogil:
        cdef Py_ssize_t o = line // self.inner, i = line % self.inner, j, p
        cdef Py_ssize_t base = o * self.k * self.inner + i
        cdef double m = self.x[base], acc = 0.0, e
        for j in range(1, self.k):
            if self.x[base + j * self.inner] > m:
                m = self.x[base + j * self.inner]
        for j in range(self.k):
            acc += exp(<double>self.x[base + j * self.inner] - m)
        for j in range(self.k):
            p = base + j * self.inner
            self.y[p] = <float>(exp(<double>self.x[p] - m) / acc)
        return 0
