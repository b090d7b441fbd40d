# Data-movement kernels of inference graphs, float32:
#   * GatherLaunch: y[i_0, ..., i_{R-1}] = x[sum_k table_k[i_k]] where each
#     per-axis table holds the input element offset an output index reads
#     along that axis, or -1 where it reads padding (then y = pad_value).
#     Transpose, Slice (any steps), Pad (constant, reflect, edge) and the
#     axis permutation before a reduction are all this one gather; the
#     tables are built at compile time, so the loop has no index maths;
#     trailing axes are merged at bind time (merge_trailing_axes).
#   * BlockCopyLaunch: rows of a 2-D view copied between two strided row
#     layouts (Concat's per-input copy, Split's per-output copy).
# Every launch writes its whole output region.
from cython.parallel cimport prange
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from rlx_cpu._launch cimport Launch, effective_threads, small_work_threads, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef Py_ssize_t PARALLEL_MIN = 32768

cdef enum:
    MAXR = 8

MAX_RANK = MAXR


# Trailing output axes are merged into one at bind time while the merged
# axis reads a contiguous run of the input (a transpose that keeps H, W in
# place, as ShuffleNet's channel shuffle does, then copies whole planes), or
# while a non-contiguous inner axis stays short (fewer rows of index maths).
# A row whose inner axis reads a contiguous run is one memcpy.
cdef Py_ssize_t MERGE_MAX_INNER = 1024


def _contiguous(t):
    return t.size == 0 or bool(np.array_equal(t, t[0] + np.arange(t.size, dtype=np.int64)))


def merge_trailing_axes(dims, tables):
    """(dims, per-axis tables) of the same gather with trailing axes merged
    (see above); an axis with a padding entry (-1) is never merged.  (This
    module compiles with wraparound off: no negative indices.)"""
    dims = [int(d) for d in dims]
    cdef Py_ssize_t L = len(dims)
    tabs, off = [], 0
    for d in dims:
        tabs.append(np.asarray(tables[off:off + d], np.int64))
        off += d
    while L >= 2 and dims[L - 2] > 1:
        a, b = tabs[L - 2], tabs[L - 1]
        if a.size == 0 or b.size == 0 or a.min() < 0 or b.min() < 0:
            break
        merged = (a[:, None] + b[None, :]).ravel()
        if not (_contiguous(merged) or (not _contiguous(b) and merged.size <= MERGE_MAX_INNER)):
            break
        dims = [1] + dims[:L - 2] + [dims[L - 2] * dims[L - 1]]
        tabs = [np.zeros(1, np.int64)] + tabs[:L - 2] + [merged]
    return dims, np.concatenate(tabs)


cdef class GatherLaunch(Launch):
    """dims: MAX_RANK output dims (leading ones as padding); tables: the
    per-axis offset tables concatenated in axis order (sum(dims) entries)."""
    cdef const float[::1] x
    cdef float[::1] y
    cdef const int64_t[::1] tables
    cdef Py_ssize_t dims[MAXR]
    cdef Py_ssize_t start[MAXR]
    cdef Py_ssize_t rows, inner
    cdef float pad_value
    cdef bint run_inner          # the inner axis reads one contiguous run, no padding

    def __init__(self, x, y, dims, tables, float pad_value, int max_threads):
        cdef int i
        cdef Py_ssize_t off = 0
        if len(dims) != MAXR:
            raise ValueError(f"GatherLaunch: dims must have {MAXR} entries")
        tables = np.ascontiguousarray(tables, dtype=np.int64)
        if tables.shape[0] != sum(dims):
            raise ValueError("GatherLaunch: tables must hold sum(dims) entries")
        if tables.shape[0] and int(tables.max()) >= x.shape[0]:
            raise ValueError("GatherLaunch: a table offset is outside the input")
        dims, tables = merge_trailing_axes(dims, tables)
        self.x, self.y, self.tables = x, y, tables
        self.rows = 1
        for i in range(MAXR):
            self.dims[i] = dims[i]
            self.start[i] = off
            off += dims[i]
            if i < MAXR - 1:
                self.rows *= dims[i]
        self.inner = dims[MAXR - 1]
        last = tables[self.start[MAXR - 1]:]
        self.run_inner = last.size > 0 and last.min() >= 0 and _contiguous(last)
        if y.shape[0] < self.rows * self.inner:
            raise ValueError("GatherLaunch: output too small")
        self.pad_value = pad_value
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.rows * self.inner, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t row
        for row in prange(self.rows, num_threads=t, schedule='static'):
            work_note(1)
            self._row(row)
        # end: prange
        return 0

    cdef int _row(self, Py_ssize_t row) except -1 nogil:
        cdef Py_ssize_t base = 0, r = row, idx, j, o
        cdef int64_t e
        cdef int ax
        cdef bint pad = False
        cdef Py_ssize_t out = row * self.inner
        cdef Py_ssize_t last = self.start[MAXR - 1]
        for ax in range(MAXR - 2, -1, -1):
            idx = r % self.dims[ax]
            r = r // self.dims[ax]
            e = self.tables[self.start[ax] + idx]
            if e < 0:
                pad = True
            base += e
        if pad:
            for j in range(self.inner):
                self.y[out + j] = self.pad_value
            return 0
        if self.run_inner:
            base += self.tables[last]
            # touch both ends so a debug build bounds-checks the run
            self.x[base + self.inner - 1]
            self.y[out + self.inner - 1]
            memcpy(&self.y[out], &self.x[base], self.inner * sizeof(float))
            return 0
        for j in range(self.inner):
            e = self.tables[last + j]
            self.y[out + j] = self.pad_value if e < 0 else self.x[base + e]
        return 0


# With fewer rows than COPY_ITEMS_PER_THREAD per thread (a Concat over the
# channels of one image is one row per input), each row is cut into pieces
# of at least COPY_PIECE_MIN floats, so that every thread copies a share.
cdef Py_ssize_t COPY_ITEMS_PER_THREAD = 4
cdef Py_ssize_t COPY_PIECE_MIN = 4096


cdef inline Py_ssize_t copy_pieces(Py_ssize_t rows, Py_ssize_t width, int t) noexcept nogil:
    """Pieces per row of a block copy on t threads (1: whole rows)."""
    cdef Py_ssize_t want = COPY_ITEMS_PER_THREAD * t
    if t <= 1 or rows >= want:
        return 1
    return max(1, min((want + rows - 1) // rows, width // COPY_PIECE_MIN))


cdef class BlockCopyLaunch(Launch):
    """dst[r * dst_row + dst_off + j] = src[r * src_row + src_off + j] for
    r < rows, j < width."""
    cdef const float[::1] src
    cdef float[::1] dst
    cdef Py_ssize_t rows, width, src_row, src_off, dst_row, dst_off

    def __init__(self, src, dst, Py_ssize_t rows, Py_ssize_t width, Py_ssize_t src_row, Py_ssize_t src_off,
                 Py_ssize_t dst_row, Py_ssize_t dst_off, int max_threads):
        if rows > 0 and width > 0 and ((rows - 1) * src_row + src_off + width > src.shape[0]
                                       or (rows - 1) * dst_row + dst_off + width > dst.shape[0]):
            raise ValueError("BlockCopyLaunch: the copy runs outside its buffers")
        self.src, self.dst = src, dst
        self.rows, self.width = rows, width
        self.src_row, self.src_off, self.dst_row, self.dst_off = src_row, src_off, dst_row, dst_off
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.rows * self.width, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t item, r, j0, n
        cdef Py_ssize_t pieces = copy_pieces(self.rows, self.width, t)
        cdef Py_ssize_t piece = (self.width + pieces - 1) // pieces
        if self.width <= 0:
            return 0
        for item in prange(self.rows * pieces, num_threads=t, schedule='static'):
            work_note(1)
            r = item // pieces
            j0 = (item % pieces) * piece
            n = min(piece, self.width - j0)
            if n > 0:
                memcpy(&self.dst[r * self.dst_row + self.dst_off + j0],
                       &self.src[r * self.src_row + self.src_off + j0], n * sizeof(float))
        # end: prange
        return 0
