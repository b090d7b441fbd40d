# Linear resize along one axis of an [outer, n_in, inner] view, float32:
#   y[o, j, i] = (1 - w[j]) * x[o, i0[j], i] + w[j] * x[o, i1[j], i]
# with per-output-index source pairs (i0, i1) and weights w fixed at compile
# time (ONNX Resize mode 'linear', every coordinate transformation mode).  An
# N-linear resize is one pass per resized axis.  Work items are (o, j) rows.
# i0[j] = -1 marks an output index outside the input (tf_crop_and_resize):
# its row is set to the fill value (a later pass keeps it: fill*(1-w)+fill*w).
from cython.parallel cimport prange
from libc.stdint cimport int64_t

from rlx_cpu._launch cimport Launch, effective_threads

import numpy as np

cdef Py_ssize_t PARALLEL_MIN = 32768


cdef class LinearAxisLaunch(Launch):
    cdef const float[::1] x
    cdef float[::1] y
    cdef const int64_t[::1] i0
    cdef const int64_t[::1] i1
    cdef const float[::1] w
    cdef Py_ssize_t outer, n_in, n_out, inner
    cdef float fill

    def __init__(self, x, y, Py_ssize_t outer, Py_ssize_t n_in, Py_ssize_t n_out, Py_ssize_t inner, i0, i1, w,
                 float fill, int max_threads):
        i0 = np.ascontiguousarray(i0, dtype=np.int64)
        i1 = np.ascontiguousarray(i1, dtype=np.int64)
        w = np.ascontiguousarray(w, dtype=np.float32)
        if not (i0.shape[0] == i1.shape[0] == w.shape[0] == n_out):
            raise ValueError("LinearAxisLaunch: one (i0, i1, w) per output index")
        if n_out and (i0.min() < -1 or i1.min() < 0 or i0.max() >= n_in or i1.max() >= n_in):
            raise ValueError("LinearAxisLaunch: a source index is outside the input axis")
        if x.shape[0] < outer * n_in * inner or y.shape[0] < outer * n_out * inner:
            raise ValueError("LinearAxisLaunch: buffers do not match [outer, n, inner]")
        self.x, self.y, self.i0, self.i1, self.w = x, y, i0, i1, w
        self.outer, self.n_in, self.n_out, self.inner = outer, n_in, n_out, inner
        self.fill = fill
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t row
        if self.outer * self.n_out * self.inner < PARALLEL_MIN:
            t = 1
        for row in prange(self.outer * self.n_out, num_threads=t, schedule='static'):
            self._row(row)
        # end: prange
        return 0

    cdef int _row(self, Py_ssize_t row) except -1 nogil:
        cdef Py_ssize_t o = row // self.n_out, j = row % self.n_out, i
        cdef Py_ssize_t d = row * self.inner
        cdef Py_ssize_t a, b
        cdef float wb = self.w[j]
        cdef float wa = 1.0 - wb
        if self.i0[j] < 0:
            for i in range(self.inner):
                self.y[d + i] = self.fill
            return 0
        a = (o * self.n_in + self.i0[j]) * self.inner
        b = (o * self.n_in + self.i1[j]) * self.inner
        for i in range(self.inner):
            self.y[d + i] = wa * self.x[a + i] + wb * self.x[b + i]
        return 0
