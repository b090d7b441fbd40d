# Linear resize along one axis of an [outer, n_in, inner] view, float32:
#   y[o, j, i] = (1 - w[j]) * x[o, i0[j], i] + w[j] * x[o, i1[j], i]
# with per-output-index source pairs (i0, i1) and weights w fixed at compile
# time (ONNX Resize mode 'linear', every coordinate transformation mode).  An
# N-linear resize is one pass per resized axis.  Work items are (o, j) rows.
# i0[j] = -1 marks an output index outside the input (tf_crop_and_resize):
# its row is set to the fill value (a later pass keeps it: fill*(1-w)+fill*w).
from cython.parallel cimport prange
from libc.stdint cimport int64_t

from rlx_cpu._launch cimport Launch, effective_threads, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef Py_ssize_t PARALLEL_MIN = 32768
cdef Py_ssize_t ROWS_PER_BLOCK = 64


cdef class LinearAxisLaunch(Launch):
    cdef const float[::1] x
    cdef float[::1] y
    cdef const int64_t[::1] i0
    cdef const int64_t[::1] i1
    cdef const float[::1] w
    cdef const float[::1] wa
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
        # 1 - w, as _row computes it
        self.wa = (np.float64(1.0) - w.astype(np.float64)).astype(np.float32)
        self.outer, self.n_in, self.n_out, self.inner = outer, n_in, n_out, inner
        self.fill = fill
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t row, blk, nblk
        if self.outer * self.n_out * self.inner < PARALLEL_MIN:
            t = 1
        if self.inner == 1:
            # the last axis: items are blocks of whole output rows, each a
            # gather loop over the row (a work item per output element cost
            # 12-13 ns each, the call and the inner loop's setup: 16 -> 32 on
            # 96 rows took 40 us)
            nblk = (self.outer + ROWS_PER_BLOCK - 1) // ROWS_PER_BLOCK
            for blk in prange(nblk, num_threads=t, schedule='static'):
                work_note(1)
                self._last_axis(blk * ROWS_PER_BLOCK, min(self.outer, (blk + 1) * ROWS_PER_BLOCK))
            # end: prange
            return 0
        for row in prange(self.outer * self.n_out, num_threads=t, schedule='static'):
            work_note(1)
            self._row(row)
        # end: prange
        return 0

    cdef int _last_axis(self, Py_ssize_t o0, Py_ssize_t o1) except -1 nogil:
        # rows [o0, o1) of an [outer, n_in] -> [outer, n_out] resize
        cdef Py_ssize_t o, j, a
        cdef const float* xs
        cdef float* ys
        cdef float wb
        if self.n_out == 0:
            return 0
        for o in range(o0, o1):
            xs = &self.x[o * self.n_in]
            ys = &self.y[o * self.n_out]
            for j in range(self.n_out):
                a = self.i0[j]
                if a < 0:
                    ys[j] = self.fill
                else:
                    wb = self.w[j]
                    ys[j] = self.wa[j] * xs[a] + wb * xs[self.i1[j]]
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
