# Nearest-neighbour resize kernels (float32) and their bound launches.
#
# General form: a per-axis index-table gather over up to 3 spatial axes,
#     y[p, od, oh, ow] = x[p, td[od], th[oh], tw[ow]]
# for every (n, c) plane p.  All coordinate conventions (PyTorch 'nearest' and
# 'nearest-exact', any ONNX coordinate_transformation_mode / nearest_mode)
# differ only in the tables, which are computed at compile time and stored as
# int32 constants; the kernel never does floating-point index maths.
#
# Integer 2x on NCHW has a dedicated kernel (src/rlx_resize.h): each input
# row becomes two identical output rows of duplicated pixels.
#
# Work item (prange, static): the output lines of one (plane, od) for the
# gather (a line with the previous line's source row is copied from it); for
# 2x, one run of consecutive input rows (plane, h) per thread.  Every plane
# offset is computed from the plane index, in elements, so batches advance by
# whole planes (upstream once advanced by a quarter plane per image).
cimport cython
from cython.parallel cimport prange
from libc.stdint cimport int32_t
from libc.string cimport memcpy
from rlx_cpu._launch cimport Launch, effective_threads, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_resize.h":
    void rlx_simd_init() nogil
    int rlx_simd_level() nogil
    void rlx_up2x_rows(const float* x, Py_ssize_t x_len, float* y, Py_ssize_t y_len, Py_ssize_t r0,
                       Py_ssize_t r1, Py_ssize_t w) nogil
    void rlx_gather_row(const float* xs, Py_ssize_t w_in, float* yd, const int32_t* tw, Py_ssize_t nb,
                        Py_ssize_t n) nogil


rlx_simd_init()


def simd_level():
    """The variant the 2x kernel runs here (0 portable, >= 1 AVX2)."""
    return rlx_simd_level()


cdef int _gather_lines(const float[::1] x, float[::1] y, const int32_t[::1] tab,
                       const Py_ssize_t* size, const Py_ssize_t* out, Py_ssize_t wblocks,
                       Py_ssize_t item) except -1 nogil:
    """Every output line (plane, od, oh) of item = (plane, od); tab = [td | th
    | tw] concatenated.  A line whose source row is the previous line's (an
    upscale along h) is a copy of that line, not a second gather; a line's
    first wblocks blocks of 8 read 8 consecutive inputs each (rlx_gather_row)."""
    cdef Py_ssize_t od = item % out[0]
    cdef Py_ssize_t plane = item // out[0]
    cdef Py_ssize_t row0 = (plane * size[0] + tab[od]) * size[1]
    cdef Py_ssize_t tw0 = out[0] + out[1]
    cdef Py_ssize_t oh, src, prev = -1
    cdef Py_ssize_t dst = item * out[1] * out[2]
    cdef const int32_t* tw = &tab[tw0]
    cdef const float* xs
    cdef float* yd
    if out[1] * out[2] == 0:
        return 0
    for oh in range(out[1]):
        yd = &y[dst + oh * out[2]]
        if tab[out[0] + oh] == prev:
            memcpy(yd, yd - out[2], out[2] * sizeof(float))
            continue
        prev = tab[out[0] + oh]
        src = (row0 + prev) * size[2]
        xs = &x[src]
        rlx_gather_row(xs, size[2], yd, tw, wblocks, out[2])
    return 0


cdef class ResizeNearestLaunch(Launch):
    """Index-table gather; sizes/outs are (d, h, w) with 1 for missing axes."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef const int32_t[::1] tab
    cdef Py_ssize_t planes
    cdef Py_ssize_t size[3]
    cdef Py_ssize_t out[3]
    cdef readonly Py_ssize_t wblocks    # leading blocks of 8 along w that read 8 consecutive inputs

    def __init__(self, x, y, tables, Py_ssize_t planes, tuple sizes, tuple outs):
        cdef int a
        self.x = x
        self.y = y
        self.tab = tables.view(np.int32)
        self.planes = planes
        for a in range(3):
            self.size[a] = sizes[a]
            self.out[a] = outs[a]
        # The kernel reads x through these tables with raw pointers: check
        # them and both buffers once, here.
        t = np.asarray(self.tab)
        if t.shape[0] != outs[0] + outs[1] + outs[2]:
            raise ValueError(f"resize nearest: {t.shape[0]} table entries for output axes {outs}")
        for a, (lo, hi) in enumerate(((0, outs[0]), (outs[0], outs[0] + outs[1]),
                                      (outs[0] + outs[1], t.shape[0]))):
            if hi > lo and (t[lo:hi].min() < 0 or t[lo:hi].max() >= sizes[a]):
                raise ValueError(f"resize nearest: axis {a} table indexes outside [0, {sizes[a]})")
        # the leading blocks of 8 outputs along w that read 8 consecutive inputs of the row
        nbk = outs[2] // 8
        blk = t[outs[0] + outs[1]:].astype(np.int64)[:8 * nbk].reshape(nbk, 8)
        span = blk - blk[:, :1]
        ok = (span.min(axis=1) >= 0) & (span.max(axis=1) < 8) & (blk[:, 0] + 8 <= sizes[2])
        self.wblocks = nbk if ok.all() else int(np.argmin(ok))
        if self.x.shape[0] < planes * sizes[0] * sizes[1] * sizes[2] or \
                self.y.shape[0] < planes * outs[0] * outs[1] * outs[2]:
            raise ValueError(f"resize nearest: x of {self.x.shape[0]} / y of {self.y.shape[0]} floats for "
                             f"{planes} planes {sizes} -> {outs}")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t item
        for item in prange(self.planes * self.out[0], num_threads=t, schedule='static'):
            work_note(1)
            _gather_lines(self.x, self.y, self.tab, self.size, self.out, self.wblocks, item)
        # end: prange
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
        if planes < 0 or h < 0 or w < 0 or self.x.shape[0] < self.rows * w or self.y.shape[0] < 4 * self.rows * w:
            raise ValueError(f"upsample_nearest2x: x of {self.x.shape[0]} / y of {self.y.shape[0]} floats for "
                             f"{planes} planes of {h}x{w} (need {self.rows * w} / {4 * self.rows * w})")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t i
        if self.rows == 0 or self.w == 0:
            return 0
        # one run of consecutive input rows per thread (rlx_up2x_rows)
        for i in prange(t, num_threads=t, schedule='static'):
            work_note(1)
            rlx_up2x_rows(&self.x[0], self.x.shape[0], &self.y[0], self.y.shape[0], self.rows * i // t,
                          self.rows * (i + 1) // t, self.w)
        # end: prange
        return 0
