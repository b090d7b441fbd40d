# GEMM-based ops of inference graphs, float32, through the single-threaded
# row-major sgemm of _blas.pxd (rlx_cpu owns the threading):
#   * GemmLaunch: y[m, n] = alpha * op(A) op(B) + beta * C, C read through
#     element strides (c_row, c_col) so a [n], [m, 1], [1, 1] or [m, n] C
#     broadcasts without being copied (ONNX Gemm);
#   * BatchedMatMulLaunch: y[b] = A[b] . B[b] for batches whose operand
#     offsets are precomputed (numpy matmul broadcasting; ONNX MatMul).
from cython.parallel cimport prange
from libc.stdint cimport int64_t

from _blas cimport sgemm_rm, sgemm_rm_split
from _gemm_nt cimport rlx_gemm_nt_parts, rlx_gemm_nt_part
from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil

cdef extern from "rlx_gemm_nt.h":
    void rlx_gemm_nt(const float* a, Py_ssize_t a_len, Py_ssize_t lda, const float* b, Py_ssize_t b_len,
                     Py_ssize_t ldb, float* y, Py_ssize_t y_len, Py_ssize_t ldy, Py_ssize_t m, Py_ssize_t k,
                     Py_ssize_t j0, Py_ssize_t j1, float alpha) nogil

rlx_simd_init()

# A GEMM with b transposed ([n, k], a dense layer's weight) and at most this
# many rows runs rlx_gemm_nt, which streams b once, instead of sgemm, which
# packs it: a CNN's classifier at batch 1 to 8.  Measured (Zen 4, the
# 1000-row weight evicted from the caches before each run, as in a model),
# ms sgemm (sgemv at one row) / rlx_gemm_nt at 1 thread (2 threads): k = 2048
# m = 1 0.42 / 0.37 (0.45 / 0.43), m = 4 1.98 / 0.62 (1.96 / 0.59), m = 8
# 2.13 / 0.88 (1.70 / 0.66), m = 16 2.51 / 1.35 (1.69 / 0.86), m = 32 3.10 /
# 2.37 (1.95 / 1.38); k = 512 m = 1 0.19 / 0.18 (0.22 / 0.23), m = 8 0.50 /
# 0.32 (0.34 / 0.25), m = 16 0.53 / 0.42 (0.38 / 0.32).  In ResNet-50 at
# batch 8 its classifier went from 2.02 to 0.85 ms (ONNX Runtime's: 0.62).
cdef Py_ssize_t GEMM_NT_MAX_M = 16
GEMM_NT_MAX_ROWS = GEMM_NT_MAX_M      # the same, for Python


cdef class GemmLaunch(Launch):
    cdef const float[::1] a
    cdef const float[::1] b
    cdef const float[::1] c
    cdef float[::1] y
    cdef int m, n, k
    cdef bint trans_a, trans_b, has_c
    cdef float alpha, beta
    cdef Py_ssize_t c_row, c_col

    def __init__(self, a, b, c, y, int m, int n, int k, bint trans_a, bint trans_b, float alpha, float beta,
                 Py_ssize_t c_row, Py_ssize_t c_col, int max_threads):
        if a.shape[0] < <Py_ssize_t>m * k or b.shape[0] < <Py_ssize_t>k * n or y.shape[0] < <Py_ssize_t>m * n:
            raise ValueError("GemmLaunch: buffers do not match m, n, k")
        self.has_c = c is not None
        if self.has_c and m > 0 and n > 0 and (m - 1) * c_row + (n - 1) * c_col >= c.shape[0]:
            raise ValueError("GemmLaunch: C strides run outside C")
        self.a, self.b, self.y = a, b, y
        self.c = or_placeholder(c, np.float32)
        self.m, self.n, self.k = m, n, k
        self.trans_a, self.trans_b = trans_a, trans_b
        self.alpha, self.beta = alpha, beta
        self.c_row, self.c_col = c_row, c_col
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef int lda = self.m if self.trans_a else self.k
        cdef int ldb = self.k if self.trans_b else self.n
        cdef Py_ssize_t i, j
        cdef Py_ssize_t p, parts
        if self.m <= 0 or self.n <= 0:
            return 0
        if self.trans_b and not self.trans_a and self.m <= GEMM_NT_MAX_M and self.k > 0:
            # whole blocks of 4 columns per thread: the same sums at any split
            parts = rlx_gemm_nt_parts(self.n, t)
            for p in prange(parts, num_threads=t, schedule='static'):
                work_note(1)
                rlx_gemm_nt_part(&self.a[0], self.a.shape[0], self.k, &self.b[0], self.b.shape[0], self.k,
                                 &self.y[0], self.y.shape[0], self.n, self.m, self.n, self.k, p, parts, self.alpha)
        else:
            sgemm_rm_split(self.trans_a, self.trans_b, self.m, self.n, self.k, self.alpha,
                           &self.a[0], lda, &self.b[0], ldb, 0.0, &self.y[0], self.n, self.max_threads, t)
        if self.has_c:
            for i in range(self.m):
                for j in range(self.n):
                    self.y[i * self.n + j] += self.beta * self.c[i * self.c_row + j * self.c_col]
        return 0


cdef class BatchedMatMulLaunch(Launch):
    """y[b] (m x n, contiguous) = A at a_offsets[b] (m x k) . B at b_offsets[b] (k x n)."""
    cdef const float[::1] a
    cdef const float[::1] b
    cdef float[::1] y
    cdef const int64_t[::1] a_off
    cdef const int64_t[::1] b_off
    cdef int m, n, k
    cdef Py_ssize_t batches

    def __init__(self, a, b, y, a_offsets, b_offsets, int m, int n, int k, int max_threads):
        a_offsets = np.ascontiguousarray(a_offsets, dtype=np.int64)
        b_offsets = np.ascontiguousarray(b_offsets, dtype=np.int64)
        if a_offsets.shape[0] != b_offsets.shape[0]:
            raise ValueError("BatchedMatMulLaunch: one A and one B offset per batch")
        self.batches = a_offsets.shape[0]
        if self.batches and (int(a_offsets.max()) + <Py_ssize_t>m * k > a.shape[0]
                             or int(b_offsets.max()) + <Py_ssize_t>k * n > b.shape[0]
                             or self.batches * m * n > y.shape[0] or int(a_offsets.min()) < 0
                             or int(b_offsets.min()) < 0):
            raise ValueError("BatchedMatMulLaunch: an operand runs outside its buffer")
        self.a, self.b, self.y = a, b, y
        self.a_off, self.b_off = a_offsets, b_offsets
        self.m, self.n, self.k = m, n, k
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t bi
        if self.batches == 0 or self.m <= 0 or self.n <= 0:
            return 0
        # the bound thread count decides the cut (one batch: GEMM panels), so
        # a run on fewer threads gives the same bits
        if self.batches == 1 or self.max_threads == 1:
            for bi in range(self.batches):
                sgemm_rm_split(False, False, self.m, self.n, self.k, 1.0, &self.a[0] + self.a_off[bi], self.k,
                               &self.b[0] + self.b_off[bi], self.n, 0.0, &self.y[0] + bi * self.m * self.n,
                               self.n, self.max_threads, t)
            return 0
        for bi in prange(self.batches, num_threads=t, schedule='static'):
            work_note(1)
            sgemm_rm(False, False, self.m, self.n, self.k, 1.0, &self.a[0] + self.a_off[bi], self.k,
                     &self.b[0] + self.b_off[bi], self.n, 0.0, &self.y[0] + bi * self.m * self.n, self.n)
        # end: prange
        return 0
