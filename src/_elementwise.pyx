# Elementwise kernels of inference graphs, float32:
#   * UnaryLaunch: the activations (leaky ReLU, clip, sigmoid, hard sigmoid,
#     hard swish, tanh), y = f(x) with up to two parameters alpha, beta;
#   * BinaryLaunch: a (op) b with numpy broadcasting (add, sub, mul, div),
#     the operands addressed through per-axis element strides (0 along a
#     broadcast axis) over at most MAX_RANK output axes;
#   * ChannelAffineLaunch: y[n, c, s] = x[n, c, s] * scale[c] + shift[c]
#     (inference BatchNormalization with its statistics folded at compile);
#   * ChannelBinaryLaunch: a blocked [N, C/8, P, 8] map (op) a per-channel
#     operand [N or 1, C] (squeeze-excitation's gate on the blocked layout),
#     or x * scale[c] + shift[c] (inference batch norm on it).
#
# Work is cut into blocks of BLOCK elements spread over the threads; below
# PARALLEL_MIN elements one thread runs it (a fork/join costs more there).
# Every launch writes its whole output.
cimport cython
from cython.parallel cimport prange


cdef extern from "rlx_epilogue.h":
    enum:
        RLX_ACT_CLIP, RLX_ACT_LEAKY_RELU, RLX_ACT_SIGMOID, RLX_ACT_HARD_SIGMOID, RLX_ACT_HARD_SWISH,
        RLX_ACT_TANH, RLX_ACT_SILU


cdef extern from "rlx_nchwc.h":
    ctypedef struct NcAct "rlx_nchwc_act":
        int act
        float alpha, beta
    void rlx_act_span(const float* x, float* y, Py_ssize_t n, const NcAct* a) nogil


cdef extern from "rlx_elem.h":
    void rlx_chan_span(int op, int x_first, const float* x, const float* g, const float* h, float* y,
                       Py_ssize_t npix) nogil


cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil


rlx_simd_init()
from libc.stdint cimport int64_t

from rlx_cpu._launch cimport Launch, effective_threads, small_work_threads, work_note, work_meter_bind

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef Py_ssize_t PARALLEL_MIN = 32768
cdef Py_ssize_t BLOCK = 4096
cdef enum:
    MAXR = 8

MAX_RANK = MAXR


# ---------------------------------------------------------------------------
# unary activations
# ---------------------------------------------------------------------------

cdef enum:
    U_LEAKY_RELU = 0      # x < 0 ? alpha * x : x
    U_CLIP = 1            # min(max(x, alpha), beta); NaN stays NaN
    U_SIGMOID = 2         # 1 / (1 + exp(-x))
    U_HARD_SIGMOID = 3    # max(0, min(1, alpha * x + beta))
    U_HARD_SWISH = 4      # x * max(0, min(1, alpha * x + beta))   (alpha 1/6, beta 1/2)
    U_TANH = 5
    U_SILU = 6            # x / (1 + exp(-x))  (x * sigmoid(x): SiLU, swish)

UNARY_LEAKY_RELU = U_LEAKY_RELU
UNARY_CLIP = U_CLIP
UNARY_SIGMOID = U_SIGMOID
UNARY_HARD_SIGMOID = U_HARD_SIGMOID
UNARY_HARD_SWISH = U_HARD_SWISH
UNARY_TANH = U_TANH
UNARY_SILU = U_SILU


# the activation code of src/rlx_epilogue.h for each U_* (rlx_act_span
# applies it with the conv epilogue's formulas, explicit SIMD and a portable
# variant that gives the same bits)
cdef int[7] _ACT_OF_UNARY
_ACT_OF_UNARY[:] = [RLX_ACT_LEAKY_RELU, RLX_ACT_CLIP, RLX_ACT_SIGMOID, RLX_ACT_HARD_SIGMOID,
                    RLX_ACT_HARD_SWISH, RLX_ACT_TANH, RLX_ACT_SILU]


cdef int _unary_block(const NcAct* act, const float[::1] x, float[::1] y,
                      Py_ssize_t lo, Py_ssize_t hi) except -1 nogil:
    if hi > lo:
        # touch both ends so a debug build bounds-checks the span
        x[lo]
        x[hi - 1]
        y[lo]
        y[hi - 1]
        rlx_act_span(&x[lo], &y[lo], hi - lo, act)
    return 0


cdef class UnaryLaunch(Launch):
    cdef const float[::1] x
    cdef float[::1] y
    cdef int op
    cdef float alpha, beta
    cdef Py_ssize_t size

    def __init__(self, int op, x, y, Py_ssize_t size, float alpha, float beta, int max_threads):
        if not 0 <= op <= U_SILU:
            raise ValueError(f"UnaryLaunch: unknown op code {op}")
        self.op, self.x, self.y, self.size = op, x, y, size
        self.alpha, self.beta = alpha, beta
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.size, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t nblk = (self.size + BLOCK - 1) // BLOCK
        cdef Py_ssize_t blk
        cdef NcAct act
        act.act = _ACT_OF_UNARY[self.op]
        act.alpha = self.alpha
        act.beta = self.beta
        for blk in prange(nblk, num_threads=t, schedule='static'):
            work_note(1)
            _unary_block(&act, self.x, self.y, blk * BLOCK, min((blk + 1) * BLOCK, self.size))
        # end: prange
        return 0


# ---------------------------------------------------------------------------
# binary with broadcasting
# ---------------------------------------------------------------------------

cdef enum:
    B_ADD = 0
    B_SUB = 1
    B_MUL = 2
    B_DIV = 3

BINARY_ADD = B_ADD
BINARY_SUB = B_SUB
BINARY_MUL = B_MUL
BINARY_DIV = B_DIV


cdef int _binary_span(int op, const float* a, Py_ssize_t sa, const float* b, Py_ssize_t sb,
                      float* y, Py_ssize_t n) noexcept nogil:
    # y[j] = a[j * sa] (op) b[j * sb]; the unit/zero-stride cases are written
    # out so the compiler vectorises them
    cdef Py_ssize_t j
    cdef float s
    if sa == 1 and sb == 1:
        if op == B_ADD:
            for j in range(n):
                y[j] = a[j] + b[j]
        elif op == B_SUB:
            for j in range(n):
                y[j] = a[j] - b[j]
        elif op == B_MUL:
            for j in range(n):
                y[j] = a[j] * b[j]
        else:
            for j in range(n):
                y[j] = a[j] / b[j]
    elif sa == 1 and sb == 0:
        s = b[0]
        if op == B_ADD:
            for j in range(n):
                y[j] = a[j] + s
        elif op == B_SUB:
            for j in range(n):
                y[j] = a[j] - s
        elif op == B_MUL:
            for j in range(n):
                y[j] = a[j] * s
        else:
            for j in range(n):
                y[j] = a[j] / s
    elif sa == 0 and sb == 1:
        s = a[0]
        if op == B_ADD:
            for j in range(n):
                y[j] = s + b[j]
        elif op == B_SUB:
            for j in range(n):
                y[j] = s - b[j]
        elif op == B_MUL:
            for j in range(n):
                y[j] = s * b[j]
        else:
            for j in range(n):
                y[j] = s / b[j]
    else:
        for j in range(n):
            if op == B_ADD:
                y[j] = a[j * sa] + b[j * sb]
            elif op == B_SUB:
                y[j] = a[j * sa] - b[j * sb]
            elif op == B_MUL:
                y[j] = a[j * sa] * b[j * sb]
            else:
                y[j] = a[j * sa] / b[j * sb]
    return 0


cdef class BinaryLaunch(Launch):
    """y = a (op) b over the output dims `dims` (MAX_RANK entries, leading ones
    as padding); strides_a / strides_b are element strides per output axis,
    0 along a broadcast axis."""
    cdef const float[::1] a
    cdef const float[::1] b
    cdef float[::1] y
    cdef int op
    cdef Py_ssize_t dims[MAXR]
    cdef Py_ssize_t sa[MAXR]
    cdef Py_ssize_t sb[MAXR]
    cdef Py_ssize_t rows, inner, chunks, size, group
    cdef int first              # the first axis of more than one element (the rest: index maths)

    def __init__(self, int op, a, b, y, dims, strides_a, strides_b, int max_threads):
        cdef int i
        if not B_ADD <= op <= B_DIV:
            raise ValueError(f"BinaryLaunch: unknown op code {op}")
        if not len(dims) == len(strides_a) == len(strides_b) == MAXR:
            raise ValueError(f"BinaryLaunch: dims and strides must have {MAXR} entries")
        self.op, self.a, self.b, self.y = op, a, b, y
        self.first = 0
        while self.first < MAXR - 1 and dims[self.first] == 1:
            self.first += 1
        self.rows = 1
        for i in range(MAXR):
            self.dims[i] = dims[i]
            self.sa[i] = strides_a[i]
            self.sb[i] = strides_b[i]
            if i < MAXR - 1:
                self.rows *= dims[i]
        self.inner = dims[MAXR - 1]
        self.size = self.rows * self.inner
        self.chunks = (self.inner + BLOCK - 1) // BLOCK
        # rows shorter than a block go to the threads in groups of about a block
        self.group = max(1, BLOCK // max(self.inner, 1)) if self.chunks == 1 else 1
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.size, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t item, row
        if self.group > 1:
            for item in prange((self.rows + self.group - 1) // self.group, num_threads=t, schedule='static'):
                work_note(1)
                for row in range(item * self.group, min((item + 1) * self.group, self.rows)):
                    self._item(row)
            # end: prange
            return 0
        for item in prange(self.rows * self.chunks, num_threads=t, schedule='static'):
            work_note(1)
            self._item(item)
        # end: prange
        return 0

    cdef int _item(self, Py_ssize_t item) except -1 nogil:
        cdef Py_ssize_t row = item // self.chunks
        cdef Py_ssize_t lo = (item % self.chunks) * BLOCK
        cdef Py_ssize_t hi = min(lo + BLOCK, self.inner)
        cdef Py_ssize_t oa = 0, ob = 0, r = row, idx
        cdef int ax
        for ax in range(MAXR - 2, self.first - 1, -1):
            idx = r % self.dims[ax]
            r = r // self.dims[ax]
            oa += idx * self.sa[ax]
            ob += idx * self.sb[ax]
        oa += lo * self.sa[MAXR - 1]
        ob += lo * self.sb[MAXR - 1]
        _binary_span(self.op, &self.a[0] + oa, self.sa[MAXR - 1], &self.b[0] + ob, self.sb[MAXR - 1],
                     &self.y[0] + row * self.inner + lo, hi - lo)
        return 0


# ---------------------------------------------------------------------------
# per-channel affine map (inference batch norm)
# ---------------------------------------------------------------------------

cdef class ChannelAffineLaunch(Launch):
    """y[n, c, s] = x[n, c, s] * scale[c] + shift[c]."""
    cdef const float[::1] x
    cdef const float[::1] scale
    cdef const float[::1] shift
    cdef float[::1] y
    cdef Py_ssize_t n, c, s

    def __init__(self, x, scale, shift, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t s, int max_threads):
        self.x, self.scale, self.shift, self.y = x, scale, shift, y
        self.n, self.c, self.s = n, c, s
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.n * self.c * self.s, effective_threads(nthreads, self.max_threads), PARALLEL_MIN)
        cdef Py_ssize_t plane, i, base
        cdef float k, b
        for plane in prange(self.n * self.c, num_threads=t, schedule='static'):
            work_note(1)
            k = self.scale[plane % self.c]
            b = self.shift[plane % self.c]
            base = plane * self.s
            for i in range(self.s):
                self.y[base + i] = self.x[base + i] * k + b
        # end: prange
        return 0


# ---------------------------------------------------------------------------
# per-channel operand on the blocked layout
# ---------------------------------------------------------------------------

cdef Py_ssize_t CHAN_BLOCK = 8
cdef enum:
    B_AFFINE = 4
    B_AFFINE_RELU = 5

BINARY_AFFINE = B_AFFINE
BINARY_AFFINE_RELU = B_AFFINE_RELU


cdef int _channel_piece(int op, int x_first, const float[::1] x, const float[::1] g, const float[::1] h,
                        float[::1] y, Py_ssize_t lo, Py_ssize_t npix, Py_ssize_t glo) except -1 nogil:
    # touch both ends so a debug build bounds-checks the piece
    x[lo]
    x[lo + npix * CHAN_BLOCK - 1]
    y[lo]
    y[lo + npix * CHAN_BLOCK - 1]
    g[glo]
    g[glo + CHAN_BLOCK - 1]
    cdef bint affine = op == B_AFFINE or op == B_AFFINE_RELU
    if affine:
        h[glo]
        h[glo + CHAN_BLOCK - 1]
    rlx_chan_span(op, x_first, &x[lo], &g[glo], &h[glo] if affine else NULL, &y[lo], npix)
    return 0


cdef class ChannelBinaryLaunch(Launch):
    """y = x (op) g, or g (op) x when x_first is False: x and y blocked
    [N, C/8, P, 8], g [G, C] with G = 1 (one operand for every image) or N;
    op BINARY_AFFINE: y = x * g + shift, both [C] (G = 1); BINARY_AFFINE_RELU:
    its relu.  y may be x.
    Work items are runs of at most BLOCK floats of one block."""
    cdef const float[::1] x
    cdef const float[::1] g
    cdef const float[::1] h
    cdef float[::1] y
    cdef int op, x_first
    cdef Py_ssize_t n, c, pixels, gate_n, run_pix, runs

    def __init__(self, int op, x, g, y, Py_ssize_t n, Py_ssize_t c, Py_ssize_t pixels, Py_ssize_t gate_n,
                 bint x_first, int max_threads, shift=None):
        if not B_ADD <= op <= B_AFFINE_RELU:
            raise ValueError(f"ChannelBinaryLaunch: unknown op code {op}")
        affine = op == B_AFFINE or op == B_AFFINE_RELU
        if affine != (shift is not None) or (affine and gate_n != 1):
            raise ValueError(f"ChannelBinaryLaunch: the affine op (and it alone) takes a shift, and one scale "
                             f"row; got op {op}, shift {'given' if shift is not None else 'None'}, {gate_n} rows")
        if n < 1 or pixels < 1 or c < CHAN_BLOCK or c % CHAN_BLOCK:
            raise ValueError(f"ChannelBinaryLaunch: need n >= 1, pixels >= 1 and channels a positive multiple of "
                             f"{CHAN_BLOCK}, got n={n}, c={c}, pixels={pixels}")
        if gate_n != 1 and gate_n != n:
            raise ValueError(f"ChannelBinaryLaunch: the per-channel operand must have 1 or n={n} rows, got {gate_n}")
        self.x, self.g, self.y = x, g, y
        if self.x.shape[0] != n * c * pixels or self.y.shape[0] != n * c * pixels:
            raise ValueError(f"ChannelBinaryLaunch: x and y must hold n*c*pixels = {n * c * pixels} floats, got "
                             f"{self.x.shape[0]} and {self.y.shape[0]}")
        if self.g.shape[0] != gate_n * c:
            raise ValueError(f"ChannelBinaryLaunch: the per-channel operand must hold {gate_n * c} floats, got "
                             f"{self.g.shape[0]}")
        self.h = shift if shift is not None else g
        if affine and self.h.shape[0] != c:
            raise ValueError(f"ChannelBinaryLaunch: the shift must hold {c} floats, got {self.h.shape[0]}")
        self.op, self.x_first = op, x_first
        self.n, self.c, self.pixels, self.gate_n = n, c, pixels, gate_n
        self.run_pix = BLOCK // CHAN_BLOCK
        self.runs = (pixels + self.run_pix - 1) // self.run_pix
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = small_work_threads(self.n * self.c * self.pixels, effective_threads(nthreads, self.max_threads),
                                        PARALLEL_MIN)
        cdef Py_ssize_t cb = self.c // CHAN_BLOCK
        cdef Py_ssize_t item, plane, p0, img
        for item in prange(self.n * cb * self.runs, num_threads=t, schedule='static'):
            work_note(1)
            plane = item // self.runs
            p0 = (item % self.runs) * self.run_pix
            img = plane // cb if self.gate_n > 1 else 0
            _channel_piece(self.op, self.x_first, self.x, self.g, self.h, self.y,
                           (plane * self.pixels + p0) * CHAN_BLOCK, min(self.run_pix, self.pixels - p0),
                           img * self.c + (plane % cb) * CHAN_BLOCK)
        # end: prange
        return 0
