# Nearest-neighbour resize kernels (float32) and their bound launches.
#
# General form: a per-axis index-table gather over up to 3 spatial axes,
#     y[p, od, oh, ow] = x[p, td[od], th[oh], tw[ow]]
# for every (n, c) plane p.  All coordinate conventions (PyTorch 'nearest' and
# 'nearest-exact', any ONNX coordinate_transformation_mode / nearest_mode)
# differ only in the tables, which are computed at compile time and stored as
# int32 constants; the kernel never does floating-point index maths.
#
# Integer 2x on NCHW has a dedicated kernel: each input row becomes two
# identical output rows of duplicated pixels.
#
# Work item (prange, static): one output line (plane, od, oh) for the gather,
# one input row (plane, h) for 2x.  Every plane offset is computed from the
# plane index, in elements, so batches advance by whole planes (upstream once
# advanced by a quarter plane per image).
cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t
from libc.string cimport memcpy
from rlx_cpu._launch cimport Launch, effective_threads

import numpy as np

cdef extern from "rlx_omp.h":
    int RLX_DEBUG_CHECKS


cdef int _gather_line(const float[::1] x, float[::1] y, const int32_t[::1] tab,
                      const Py_ssize_t* size, const Py_ssize_t* out,
                      Py_ssize_t line) except -1 nogil:
    """Output line `line` = (plane, od, oh); tab = [td | th | tw] concatenated."""
    cdef Py_ssize_t oh = line % out[1]
    cdef Py_ssize_t od = (line // out[1]) % out[0]
    cdef Py_ssize_t plane = line // (out[1] * out[0])
    cdef Py_ssize_t src = ((plane * size[0] + tab[od]) * size[1] + tab[out[0] + oh]) * size[2]
    cdef Py_ssize_t dst = line * out[2]
    cdef Py_ssize_t tw0 = out[0] + out[1]
    cdef Py_ssize_t ow
    for ow in range(out[2]):
        y[dst + ow] = x[src + tab[tw0 + ow]]
    return 0


cdef class ResizeNearestLaunch(Launch):
    """Index-table gather; sizes/outs are (d, h, w) with 1 for missing axes."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef const int32_t[::1] tab
    cdef Py_ssize_t planes
    cdef Py_ssize_t size[3]
    cdef Py_ssize_t out[3]

    def __init__(self, x, y, tables, Py_ssize_t planes, tuple sizes, tuple outs):
        cdef int a
        self.x = x
        self.y = y
        self.tab = tables.view(np.int32)
        self.planes = planes
        for a in range(3):
            self.size[a] = sizes[a]
            self.out[a] = outs[a]

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t lines = self.planes * self.out[0] * self.out[1]
        cdef Py_ssize_t line
        for line in prange(lines, num_threads=t, schedule='static'):
            _gather_line(self.x, self.y, self.tab, self.size, self.out, line)
        # end: prange
        return 0


cdef int _up2x_row(const float[::1] x, float[::1] y, Py_ssize_t row,
                   Py_ssize_t w) except -1 nogil:
    """Input row `row` (= plane * h + i) -> output rows 2*row and 2*row + 1
    (the output plane has 2h rows of 2w, so its row index is just 2*row)."""
    cdef Py_ssize_t src = row * w
    cdef Py_ssize_t dst = 2 * row * 2 * w
    cdef Py_ssize_t j
    cdef float v
    for j in range(w):
        v = x[src + j]
        y[dst + 2 * j] = v
        y[dst + 2 * j + 1] = v
    # The second row repeats the first (indexed copy in debug builds so the
    # bounds are checked).
    if RLX_DEBUG_CHECKS:
        for j in range(2 * w):
            y[dst + 2 * w + j] = y[dst + j]
    elif w > 0:
        memcpy(&y[dst + 2 * w], &y[dst], 2 * w * sizeof(float))
    return 0


cdef class ResizeNearest2xLaunch(Launch):
    """[N, C, H, W] -> [N, C, 2H, 2W], each pixel copied to a 2x2 block."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef Py_ssize_t rows, w

    def __init__(self, x, y, Py_ssize_t planes, Py_ssize_t h, Py_ssize_t w):
        self.x = x
        self.y = y
        self.rows = planes * h
        self.w = w

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t row
        for row in prange(self.rows, num_threads=t, schedule='static'):
            _up2x_row(self.x, self.y, row, self.w)
        # end: prange
        return 0
