# The small non-convolution kernels a CNN training step needs, float32:
# bias add and its reduction, ReLU and its mask, elementwise add (gradient
# accumulation), softmax cross-entropy and its gradient (the dense layer's
# GEMM is _matmul.GemmLaunch, shared with ONNX Gemm).  Flatten/reshape has
# no kernel: the compiler aliases the buffer.
#
# Each launch writes its whole output (nothing accumulates across runs), so
# the planner may reuse output bytes.  Work below PARALLEL_MIN elements runs
# on one thread: a fork/join costs more than it saves there.
cimport cython
from cython.parallel cimport prange
from libc.math cimport exp, log, NAN

from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, small_work_threads, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_omp.h":
    int RLX_DEBUG_CHECKS

cdef extern from "rlx_pool.h":
    # sum of x[0..n) in double over 16 lanes in a fixed order, AVX2 or portable (the same bits)
    double rlx_gsum(const float* x, Py_ssize_t n) noexcept nogil
    void rlx_gsum2(const float* x, const float* z, Py_ssize_t n, double* sx, double* sz) noexcept nogil

cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil

cdef extern from "rlx_elem.h":
    # op: E_RELU / E_RELU_BACKWARD / E_ADD below (the same codes)
    void rlx_elem_span(int op, const float* a, const float* b, float* y, Py_ssize_t n) noexcept nogil
    void rlx_elem_add_scalar(const float* a, float s, float* y, Py_ssize_t n) noexcept nogil

# The SIMD variant is chosen here, at import, before any kernel runs.
rlx_simd_init()

cdef Py_ssize_t PARALLEL_MIN = 32768
cdef Py_ssize_t BLOCK = 4096


# ---------------------------------------------------------------------------
# bias add / bias gradient over the channel axis (axis 1) of [N, C, S...]
# ---------------------------------------------------------------------------

cdef class BiasAddLaunch(Launch):
    """y[n, c, s] = x[n, c, s] + bias[c]."""
    cdef const float[::1] x
    cdef const float[::1] bias
    cdef float[::1] y
    cdef Py_ssize_t n, c, s

    def __init__(self, x, bias, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t s, int max_threads):
        if n < 0 or c < 0 or s < 0 or x.shape[0] < n * c * s or y.shape[0] < n * c * s or bias.shape[0] < c:
            raise ValueError(f"bias_add: buffers of {x.shape[0]} / {bias.shape[0]} / {y.shape[0]} entries for "
                             f"x [{n}, {c}, {s}]")
        self.x, self.bias, self.y = x, bias, y
        self.n, self.c, self.s = n, c, s
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.n * self.c * self.s, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t plane
        if self.s <= 0:
            return 0
        for plane in prange(self.n * self.c, num_threads=t, schedule='static'):
            work_note(1)
            rlx_elem_add_scalar(&self.x[plane * self.s], self.bias[plane % self.c], &self.y[plane * self.s],
                                self.s)
        # end: prange
        return 0


cdef class BiasGradLaunch(Launch):
    """db[c] = sum over n and s of dy[n, c, s] (double accumulation, fixed order)."""
    cdef const float[::1] dy
    cdef float[::1] db
    cdef Py_ssize_t n, c, s

    def __init__(self, dy, db, Py_ssize_t n, Py_ssize_t c, Py_ssize_t s, int max_threads):
        if dy.shape[0] < n * c * s or db.shape[0] < c:
            raise ValueError(f"bias_grad: buffers of {dy.shape[0]} / {db.shape[0]} entries for dy "
                             f"[{n}, {c}, {s}]")
        self.dy, self.db = dy, db
        self.n, self.c, self.s = n, c, s
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.n * self.c * self.s, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t ch
        # one channel per iteration: each db[c] is summed by one thread in
        # one order, so the result does not depend on the thread count
        for ch in prange(self.c, num_threads=t, schedule='static'):
            work_note(1)
            _bias_grad_channel(self.dy, self.db, self.n, self.c, self.s, ch)
        # end: prange
        return 0


cdef int _bias_grad_channel(const float[::1] dy, float[::1] db, Py_ssize_t n, Py_ssize_t c,
                            Py_ssize_t s, Py_ssize_t ch) except -1 nogil:
    # four independent double accumulators: a single chain is add-latency bound
    cdef double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0
    cdef Py_ssize_t ni, i, base
    if s >= 16 and not RLX_DEBUG_CHECKS:
        # planes long enough for the 16-lane sum: each plane's double sum
        # (rlx_gsum, sizes checked at bind), added in image order; two
        # images' planes at once (rlx_gsum2, the same bits), so that two
        # streams from memory are in flight
        ni = 0
        while ni + 2 <= n:
            rlx_gsum2(&dy[(ni * c + ch) * s], &dy[((ni + 1) * c + ch) * s], s, &a1, &a2)
            a0 += a1
            a0 += a2
            ni += 2
        if ni < n:
            a0 += rlx_gsum(&dy[(ni * c + ch) * s], s)
        db[ch] = <float>a0
        return 0
    for ni in range(n):
        base = (ni * c + ch) * s
        i = 0
        while i + 4 <= s:
            a0 += dy[base + i]
            a1 += dy[base + i + 1]
            a2 += dy[base + i + 2]
            a3 += dy[base + i + 3]
            i += 4
        while i < s:
            a0 += dy[base + i]
            i += 1
    db[ch] = <float>((a0 + a1) + (a2 + a3))
    return 0


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------

cdef enum:
    E_RELU = 0            # out = a > 0 ? a : 0   (NaN stays NaN, as torch.relu)
    E_RELU_BACKWARD = 1   # out = b <= 0 ? 0 : a  (a = dy, b = relu output; torch's threshold_backward)
    E_ADD = 2             # out = a + b

ELEM_RELU = E_RELU
ELEM_RELU_BACKWARD = E_RELU_BACKWARD
ELEM_ADD = E_ADD


cdef class ElementwiseLaunch(Launch):
    cdef const float[::1] a
    cdef const float[::1] b
    cdef float[::1] out
    cdef int op
    cdef Py_ssize_t size

    def __init__(self, int op, a, b, out, Py_ssize_t size, int max_threads):
        if not E_RELU <= op <= E_ADD:
            raise ValueError(f"ElementwiseLaunch: unknown op code {op}")
        self.op = op
        self.a = a
        self.b = b if b is not None else a
        self.out = out
        self.size = size
        for what, buf in (("a", self.a), ("b", self.b), ("out", self.out)):
            if buf.shape[0] < size:
                raise ValueError(f"ElementwiseLaunch: {what} has {buf.shape[0]} floats, the op needs {size}")
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.size, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t nblk = (self.size + BLOCK - 1) // BLOCK
        cdef Py_ssize_t blk
        for blk in prange(nblk, num_threads=t, schedule='static'):
            work_note(1)
            rlx_elem_span(self.op, &self.a[blk * BLOCK], &self.b[blk * BLOCK], &self.out[blk * BLOCK],
                          min(BLOCK, self.size - blk * BLOCK))
        # end: prange
        return 0


# ---------------------------------------------------------------------------
# softmax cross-entropy over the last axis of [N, K] logits, class-index labels
#   loss = mean_n (logsumexp(z_n) - z_n[label_n])
#   dz   = g / N * (softmax(z_n) - onehot(label_n))
# A label that is not an integer in [0, K) makes that sample's loss and
# gradient NaN (never an out-of-bounds read).
# ---------------------------------------------------------------------------

cdef inline Py_ssize_t _label(float v, Py_ssize_t k) noexcept nogil:
    cdef Py_ssize_t i
    if not (v >= 0.0 and v < <float>k):
        return -1
    i = <Py_ssize_t>v
    return i if <float>i == v else -1


cdef double _logsumexp_row(const float[::1] z, Py_ssize_t base, Py_ssize_t k) noexcept nogil:
    cdef double m = z[base]
    cdef double acc = 0.0
    cdef Py_ssize_t j
    for j in range(1, k):
        if z[base + j] > m:
            m = z[base + j]
    for j in range(k):
        acc += exp(<double>z[base + j] - m)
    return m + log(acc)


cdef class SoftmaxCrossEntropyLaunch(Launch):
    cdef const float[::1] logits
    cdef const float[::1] labels
    cdef float[::1] loss
    cdef Py_ssize_t n, k

    def __init__(self, logits, labels, loss, Py_ssize_t n, Py_ssize_t k):
        self.logits, self.labels, self.loss = logits, labels, loss
        self.n, self.k = n, k

    cdef int run(self, int nthreads) except -1 nogil:
        cdef Py_ssize_t i, lab
        cdef double total = 0.0
        for i in range(self.n):
            lab = _label(self.labels[i], self.k)
            if lab < 0:
                total = NAN
                break
            total += _logsumexp_row(self.logits, i * self.k, self.k) - self.logits[i * self.k + lab]
        self.loss[0] = <float>(total / self.n)
        return 0


cdef class SoftmaxCrossEntropyBackwardLaunch(Launch):
    cdef const float[::1] logits
    cdef const float[::1] labels
    cdef const float[::1] grad_loss
    cdef float[::1] dlogits
    cdef Py_ssize_t n, k

    def __init__(self, logits, labels, grad_loss, dlogits, Py_ssize_t n, Py_ssize_t k):
        self.logits, self.labels, self.grad_loss, self.dlogits = logits, labels, grad_loss, dlogits
        self.n, self.k = n, k

    cdef int run(self, int nthreads) except -1 nogil:
        cdef Py_ssize_t i, j, lab, base
        cdef double lse, scale
        scale = <double>self.grad_loss[0] / self.n
        for i in range(self.n):
            base = i * self.k
            lab = _label(self.labels[i], self.k)
            if lab < 0:
                for j in range(self.k):
                    self.dlogits[base + j] = NAN
                continue
            lse = _logsumexp_row(self.logits, base, self.k)
            for j in range(self.k):
                self.dlogits[base + j] = <float>(scale * (exp(<double>self.logits[base + j] - lse)
                                                          - (1.0 if j == lab else 0.0)))
        return 0
