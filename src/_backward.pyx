# Backward (gradient) kernels of the convolution family, float32, NC[D]HW
# (pool backward lives with the forward pools in src/_pool.pyx).
#
# Convolution backward has one N-d path: 1-D and 2-D convs arrive with
# leading spatial dims of size 1 (L -> (1, 1, L), HxW -> (1, H, W)), so the
# same im2col / col2im serve conv1d, conv2d and conv3d.
#
#   kernel                  algorithm    parallel over
#   ----------------------  -----------  ------------------------------------------
#   conv backward input     gemm         (image, group) items, each: GEMM W^T.dy into
#     dx = col2im(W^T dy)                a per-thread column slab, then col2im; at
#                                        small batch: one GEMM split into panels,
#                                        then col2im over (channel, input row) units
#                           gemm_1x1     as gemm, but W^T.dy *is* dx (no col2im)
#                           reference    (image, channel) planes, double accumulation
#   conv backward weight    gemm         groups >= threads: groups, no reduction;
#     dW = sum_n dy . col^T              batch >= threads: contiguous image ranges,
#                                        one partial dW per range in arena scratch,
#                                        summed afterwards in range order; else
#                                        im2col rows in parallel + split GEMM
#                           gemm_1x1     as gemm with x itself as the patch matrix
#                           wide         (group, block of 4 output channels)
#                                        items in contiguous ranges, one per part;
#                                        no reduction between threads
#                           reference    (c_out, c_in/groups) weight pairs
#
# Every result is deterministic for a fixed thread count: partial sums are
# reduced in a fixed order, never under a lock, and col2im *gathers* each dx
# row from its taps in tap order instead of scattering into shared rows.
# Outputs are fully written (never accumulated into), so a plan may reuse
# their bytes freely.  Scratch is sized by the `*_scratch_floats` functions.
cimport cython
from cython.parallel cimport prange, threadid
from libc.string cimport memcpy, memset

from _blas cimport sgemm_rm, sgemm_rm_split
from _codes cimport CONV_BWD_REFERENCE, CONV_BWD_GEMM, CONV_BWD_GEMM_1X1, CONV_BWD_WIDE, CONV_BWD_WINOGRAD
from _window cimport Win, conv_win_from, out_range
from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_note, work_meter_bind

import numpy as np

# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_bwd_wide.h":
    void rlx_simd_init() nogil
    int rlx_simd_level() nogil
    void rlx_bwd_wide_block(const float* dyw, Py_ssize_t ldd, Py_ssize_t mr, const float* xb,
                            const Py_ssize_t* roff, Py_ssize_t nrows, Py_ssize_t L, Py_ssize_t nimg,
                            Py_ssize_t xstride, Py_ssize_t dstride, float* dw, Py_ssize_t ldw) nogil
    enum: RLX_BWD_WIDE_MR
    enum: RLX_BWD_WIDE_KC
    enum: RLX_BWD_WIDE_GROUP_FLOATS


cdef extern from "rlx_bwd_wino.h":
    ctypedef struct WinoGeom "rlx_bwd_wino_geom":
        Py_ssize_t n, c, m, groups, h, w, oh, ow, ph, pw, th, tw, rows, L, rw
    WinoGeom rlx_bwd_wino_geom_make(Py_ssize_t n, Py_ssize_t c, Py_ssize_t m, Py_ssize_t groups, Py_ssize_t h,
                                    Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t ph, Py_ssize_t pw) nogil
    Py_ssize_t rlx_bwd_wino_m_floats(const WinoGeom* g) nogil
    Py_ssize_t rlx_bwd_wino_part_floats(const WinoGeom* g) nogil
    void rlx_bwd_wino_part(const WinoGeom* g, const float* x, const float* dy, float* M, float* work,
                           const Py_ssize_t* roff, int i0, int i1) nogil
    void rlx_bwd_wino_output(const WinoGeom* g, const float* M, float* dw, Py_ssize_t co0, Py_ssize_t co1) nogil


rlx_simd_init()

# Algorithm codes (src/_codes.pxd); rlx_cpu.algorithms.ConvBackwardAlgorithm
# takes its values from here.  One column slab (K x P floats) above
# _conv2d.IM2COL_MAX_COL_FLOATS (the one 2 GB cap) is not eligible for the
# GEMM path; the reference kernels run instead.
BWD_REFERENCE = CONV_BWD_REFERENCE
BWD_GEMM = CONV_BWD_GEMM
BWD_GEMM_1X1 = CONV_BWD_GEMM_1X1
BWD_WIDE = CONV_BWD_WIDE
BWD_WINOGRAD = CONV_BWD_WINOGRAD


# ---------------------------------------------------------------------------
# Scratch sizing (the compiler sizes arena scratch with these; kernels rely on it)
# ---------------------------------------------------------------------------

cdef inline bint _bi_items_parallel(const Win* g, int t) noexcept nogil:
    return t > 1 and g.n * g.groups >= t


cdef int _bw_mode(const Win* g, int t) noexcept nogil:
    """0 serial, 1 over groups, 2 over image ranges (partials), 3 split GEMM."""
    if t <= 1:
        return 0
    if g.groups >= t:
        return 1
    if g.n >= t:
        return 2
    return 3


cdef Py_ssize_t _bi_need(const Win* g, int algorithm, int t) noexcept nogil:
    if algorithm != CONV_BWD_GEMM:
        return 0
    return g.kdim * g.out_vol * (t if _bi_items_parallel(g, t) else 1)


cdef Py_ssize_t _bw_need(const Win* g, int algorithm, int t) noexcept nogil:
    cdef Py_ssize_t col = g.kdim * g.out_vol if algorithm == CONV_BWD_GEMM else 0
    cdef Py_ssize_t parts
    cdef int mode
    if algorithm == CONV_BWD_WIDE:
        return _wide_parts(g, t) * _wide_part_floats(g)
    if algorithm == CONV_BWD_WINOGRAD:
        return _wino_floats(g, t)
    if algorithm == CONV_BWD_REFERENCE:
        return 0
    mode = _bw_mode(g, t)
    if mode == 2:
        parts = t if t < g.n else g.n
        return parts * (g.c_out * g.kdim + col)
    if mode == 1:
        return t * col
    return col


def conv_backward_input_scratch_floats(tuple dims, int algorithm, int nthreads):
    """Floats of scratch for any run with 1..nthreads threads."""
    cdef Win g = conv_win_from(dims)
    cdef Py_ssize_t best = 0
    cdef int t
    for t in range(1, max(nthreads, 1) + 1):
        best = max(best, _bi_need(&g, algorithm, t))
    return int(best)


def conv_backward_weight_scratch_floats(tuple dims, int algorithm, int nthreads):
    """Floats of scratch for any run with 1..nthreads threads."""
    cdef Win g = conv_win_from(dims)
    cdef Py_ssize_t best = 0
    cdef int t
    for t in range(1, max(nthreads, 1) + 1):
        best = max(best, _bw_need(&g, algorithm, t))
    return int(best)


def parallel_strategy(str kernel, tuple dims, int nthreads):
    """How a conv backward kernel spreads its work over nthreads (for tests and
    reports): 'input' -> 'items' (one (image, group) per thread) or 'split'
    (GEMM panels + col2im rows); 'weight' -> 'serial', 'groups', 'batch'
    (image ranges with per-thread partial sums) or 'split' (im2col rows +
    GEMM panels); 'weight_wide' (the wide kernel) -> 'serial' or
    'channel_blocks' (ranges of (group, 4 output channels) items).  Every strategy but 'serial' keeps all threads busy."""
    cdef Win g = conv_win_from(dims)
    if kernel == "input":
        return "items" if _bi_items_parallel(&g, nthreads) else "split"
    if kernel == "weight":
        return ("serial", "groups", "batch", "split")[_bw_mode(&g, nthreads)]
    if kernel == "weight_wide":
        return "serial" if _wide_parts(&g, nthreads) <= 1 else "channel_blocks"
    raise ValueError(f"parallel_strategy: kernel must be 'input' or 'weight', got {kernel!r}")


def wide_items(tuple dims):
    """Work items of the wide weight-gradient kernel: groups x blocks of
    RLX_BWD_WIDE_MR output channels."""
    cdef Win g = conv_win_from(dims)
    return int(_wide_items(&g))


def wide_pixels(tuple dims):
    """(L, out pixels): the wide grid's dot length (before rounding to 16)
    and the real output pixels it covers, per image."""
    cdef Win g = conv_win_from(dims)
    cdef WideGeom w = _wide_geom(&g)
    return int(w.L), int(g.out_vol)


def wide_image_group(tuple dims):
    """Images one dot of the wide kernel runs over before its lane sum: as
    many as fit RLX_BWD_WIDE_KC pixels and the group's L2 budget, at least 1."""
    cdef Win g = conv_win_from(dims)
    return int(_wide_geom(&g).nb)


def wide_eligible(tuple dims):
    """True when the wide kernel computes this conv's weight gradient: unit
    stride on every axis and no depth axis (conv1d / conv2d), so every
    (channel, tap) row of the patch matrix is a shifted run of the padded
    input plane."""
    cdef Win g = conv_win_from(dims)
    return bool(g.s[0] == 1 and g.s[1] == 1 and g.s[2] == 1 and g.size[0] == 1 and g.out[0] == 1
                and g.k[0] == 1 and g.n >= 1 and g.out[1] >= 1 and g.out[2] >= 1)


def col_floats(tuple dims):
    """K x P: the floats of one patch-matrix slab."""
    cdef Win g = conv_win_from(dims)
    return int(g.kdim * g.out_vol)


# ---------------------------------------------------------------------------
# im2col, rows layout: col[pos, r] for r = ci * taps + (a * kh + b) * kw + c
#
# Not the shared vol2col (src/_vol2col.pxd), on purpose: dW = dy . col needs
# the patch matrix as the [P, K] GEMM operand; vol2col builds [K, P], which
# would need the transposed GEMM (dy . col^T) -- BLAS then runs another kernel
# with another summation order, so dW would change in the last bits.
# ---------------------------------------------------------------------------

cdef int _im2col_out_row(const float[::1] x, Py_ssize_t x_off, float[::1] col,
                        Py_ssize_t col_off, const Win* g, Py_ssize_t q) except -1 nogil:
    """Rows q*out_w .. q*out_w + out_w - 1 (output row q = (zo, yo)) of the
    [P, K] patch matrix of one (image, group), written at col_off + pos * K:
    the K input values each position reads, zeros in padding.  x_off is the
    start of the group's first input channel."""
    cdef Py_ssize_t yo = q % g.out[1]
    cdef Py_ssize_t zo = q // g.out[1]
    cdef Py_ssize_t base = col_off + q * g.out[2] * g.kdim
    cdef Py_ssize_t ci, a, b, c, zi, yi, r, src, shift, lo, hi, xo
    for ci in range(g.cpg):
        for a in range(g.k[0]):
            zi = zo * g.s[0] - g.pb[0] + a * g.dil[0]
            for b in range(g.k[1]):
                yi = yo * g.s[1] - g.pb[1] + b * g.dil[1]
                r = base + ci * g.taps + (a * g.k[1] + b) * g.k[2]
                if zi < 0 or zi >= g.size[0] or yi < 0 or yi >= g.size[1]:
                    for xo in range(g.out[2]):
                        for c in range(g.k[2]):
                            col[r + xo * g.kdim + c] = 0.0
                    continue
                src = x_off + ((ci * g.size[0] + zi) * g.size[1] + yi) * g.size[2]
                for c in range(g.k[2]):
                    shift = c * g.dil[2] - g.pb[2]          # xi = xo * sw + shift
                    # positions whose tap lands inside the row: [lo, hi)
                    out_range(shift, g.s[2], g.size[2], g.out[2], &lo, &hi)
                    for xo in range(lo):
                        col[r + xo * g.kdim + c] = 0.0
                    for xo in range(lo, hi):
                        col[r + xo * g.kdim + c] = x[src + xo * g.s[2] + shift]
                    for xo in range(hi, g.out[2]):
                        col[r + xo * g.kdim + c] = 0.0
    return 0


# ---------------------------------------------------------------------------
# col2im, gather form: one dx row (ci, zi, yi) from the [K, P] column gradient
#
# Not the shared col2vol (src/_vol2col.pxd), on purpose: col2vol scatters row
# by row, so threads can only split it by channel (each channel's rows write
# that channel alone); gathering per dx row gives cpg * in_d * in_h race-free
# units, which keeps every core busy at batch 1 with few input channels
# (the same sums in the same tap order, so the numbers would not differ).
# ---------------------------------------------------------------------------

cdef int _col2im_row(const float[::1] dcol, Py_ssize_t col_off, float[::1] dx,
                     Py_ssize_t dx_off, const Win* g, Py_ssize_t unit) except -1 nogil:
    """dx row `unit` = (ci, zi, yi) of one (image, group) := the sum, in tap
    order, of every column-gradient entry whose tap read an element of it.
    Rows are disjoint, so units can run on any thread without races."""
    cdef Py_ssize_t yi = unit % g.size[1]
    cdef Py_ssize_t q = unit // g.size[1]
    cdef Py_ssize_t zi = q % g.size[0]
    cdef Py_ssize_t ci = q // g.size[0]
    cdef Py_ssize_t row = dx_off + unit * g.size[2]
    cdef Py_ssize_t a, b, c, num, zo, yo, xo, xo_lo, xo_hi, shift, src
    memset(&dx[row], 0, g.size[2] * sizeof(float))
    for a in range(g.k[0]):
        num = zi + g.pb[0] - a * g.dil[0]          # = zo * sd when tap a of zo lands on zi
        if num < 0 or num % g.s[0] != 0:
            continue
        zo = num // g.s[0]
        if zo >= g.out[0]:
            continue
        for b in range(g.k[1]):
            num = yi + g.pb[1] - b * g.dil[1]
            if num < 0 or num % g.s[1] != 0:
                continue
            yo = num // g.s[1]
            if yo >= g.out[1]:
                continue
            for c in range(g.k[2]):
                shift = c * g.dil[2] - g.pb[2]      # xi = xo * sw + shift
                out_range(shift, g.s[2], g.size[2], g.out[2], &xo_lo, &xo_hi)
                src = col_off + (ci * g.taps + (a * g.k[1] + b) * g.k[2] + c) * g.out_vol \
                    + (zo * g.out[1] + yo) * g.out[2]
                for xo in range(xo_lo, xo_hi):
                    dx[row + xo * g.s[2] + shift] += dcol[src + xo]
    return 0


# ---------------------------------------------------------------------------
# conv backward input
# ---------------------------------------------------------------------------

cdef int _bi_item(const float[::1] dy, const float[::1] wt, float[::1] dx, float[::1] scratch,
                  const Win* g, Py_ssize_t item, Py_ssize_t col_off,
                  int algorithm) except -1 nogil:
    """One (image, group) on one thread: dcol = W_g^T dy_ng, then col2im."""
    cdef Py_ssize_t ni = item // g.groups
    cdef Py_ssize_t gi = item % g.groups
    cdef Py_ssize_t dy_off = (ni * g.c_out + gi * g.cog) * g.out_vol
    cdef Py_ssize_t dx_off = (ni * g.c + gi * g.cpg) * g.in_vol
    cdef Py_ssize_t u
    if algorithm == CONV_BWD_GEMM_1X1:
        # stride 1, no padding, 1 tap: the column gradient is dx itself
        sgemm_rm(True, False, <int>g.cpg, <int>g.out_vol, <int>g.cog, 1.0, &wt[gi * g.cog * g.kdim],
                 <int>g.kdim, &dy[dy_off], <int>g.out_vol, 0.0, &dx[dx_off], <int>g.out_vol)
        return 0
    sgemm_rm(True, False, <int>g.kdim, <int>g.out_vol, <int>g.cog, 1.0, &wt[gi * g.cog * g.kdim], <int>g.kdim,
             &dy[dy_off], <int>g.out_vol, 0.0, &scratch[col_off], <int>g.out_vol)
    for u in range(g.cpg * g.size[0] * g.size[1]):
        _col2im_row(scratch, col_off, dx, dx_off, g, u)
    return 0


cdef int conv_backward_input_gemm(const float[::1] dy, const float[::1] wt, float[::1] dx,
                                  float[::1] scratch, const Win* g, int algorithm,
                                  int split, int t) except -1 nogil:
    # split: the thread count the launch was bound for; it alone decides how
    # the work is cut, so a run on t < split threads gives the same bits
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t item, ni, gi, u, dy_off, dx_off
    cdef Py_ssize_t units = g.cpg * g.size[0] * g.size[1]
    if _bi_items_parallel(g, split):
        for item in prange(items, num_threads=t, schedule='static'):
            work_note(1)
            _bi_item(dy, wt, dx, scratch, g, item, threadid() * g.kdim * g.out_vol, algorithm)
        # end: prange
        return 0
    # Small batch: one GEMM split into panels over every thread, then col2im
    # over (channel, input row) units, so batch 1 still uses every core.
    for item in range(items):
        ni = item // g.groups
        gi = item % g.groups
        dy_off = (ni * g.c_out + gi * g.cog) * g.out_vol
        dx_off = (ni * g.c + gi * g.cpg) * g.in_vol
        if algorithm == CONV_BWD_GEMM_1X1:
            sgemm_rm_split(True, False, <int>g.cpg, <int>g.out_vol, <int>g.cog, 1.0,
                           &wt[gi * g.cog * g.kdim], <int>g.kdim, &dy[dy_off], <int>g.out_vol, 0.0,
                           &dx[dx_off], <int>g.out_vol, split, t)
            continue
        sgemm_rm_split(True, False, <int>g.kdim, <int>g.out_vol, <int>g.cog, 1.0,
                       &wt[gi * g.cog * g.kdim], <int>g.kdim, &dy[dy_off], <int>g.out_vol, 0.0,
                       &scratch[0], <int>g.out_vol, split, t)
        for u in prange(units, num_threads=t, schedule='static'):
            work_note(1)
            _col2im_row(scratch, 0, dx, dx_off, g, u)
        # end: prange
    return 0


cdef int _bi_reference_plane(const float[::1] dy, const float[::1] wt, float[::1] dx,
                             const Win* g, Py_ssize_t plane) except -1 nogil:
    """dx[ni, ci] by gathering every (output channel, tap) that read it."""
    cdef Py_ssize_t ni = plane // g.c
    cdef Py_ssize_t ci = plane % g.c
    cdef Py_ssize_t gi = ci // g.cpg
    cdef Py_ssize_t cil = ci % g.cpg
    cdef Py_ssize_t zi, yi, xi, a, b, c, co, num, zo, yo, xo
    cdef double acc
    for zi in range(g.size[0]):
        for yi in range(g.size[1]):
            for xi in range(g.size[2]):
                acc = 0.0
                for a in range(g.k[0]):
                    num = zi + g.pb[0] - a * g.dil[0]
                    if num < 0 or num % g.s[0] != 0 or num // g.s[0] >= g.out[0]:
                        continue
                    zo = num // g.s[0]
                    for b in range(g.k[1]):
                        num = yi + g.pb[1] - b * g.dil[1]
                        if num < 0 or num % g.s[1] != 0 or num // g.s[1] >= g.out[1]:
                            continue
                        yo = num // g.s[1]
                        for c in range(g.k[2]):
                            num = xi + g.pb[2] - c * g.dil[2]
                            if num < 0 or num % g.s[2] != 0 or num // g.s[2] >= g.out[2]:
                                continue
                            xo = num // g.s[2]
                            for co in range(gi * g.cog, (gi + 1) * g.cog):
                                acc += <double>wt[(co * g.cpg + cil) * g.taps + (a * g.k[1] + b) * g.k[2] + c] \
                                    * <double>dy[(ni * g.c_out + co) * g.out_vol + (zo * g.out[1] + yo) * g.out[2] + xo]
                dx[plane * g.in_vol + (zi * g.size[1] + yi) * g.size[2] + xi] = <float>acc
    return 0


cdef int conv_backward_input_reference(const float[::1] dy, const float[::1] wt, float[::1] dx,
                                       const Win* g, int t) except -1 nogil:
    cdef Py_ssize_t plane
    for plane in prange(g.n * g.c, num_threads=t, schedule='static'):
        work_note(1)
        _bi_reference_plane(dy, wt, dx, g, plane)
    # end: prange
    return 0


# ---------------------------------------------------------------------------
# conv backward weight
# ---------------------------------------------------------------------------

cdef int _bw_image_group(const float[::1] x, const float[::1] dy, float[::1] dst,
                         Py_ssize_t dst_off, float[::1] col, Py_ssize_t col_off,
                         const Win* g, Py_ssize_t ni, Py_ssize_t gi, float beta,
                         int algorithm) except -1 nogil:
    """dst[cog, K] := dy_ng . col_ng + beta * dst, single-threaded."""
    cdef Py_ssize_t x_off = (ni * g.c + gi * g.cpg) * g.in_vol
    cdef Py_ssize_t dy_off = (ni * g.c_out + gi * g.cog) * g.out_vol
    cdef Py_ssize_t q
    if algorithm == CONV_BWD_GEMM_1X1:
        # the [P, cpg] patch matrix is x_ng^T: read x transposed in the GEMM
        sgemm_rm(False, True, <int>g.cog, <int>g.cpg, <int>g.out_vol, 1.0, &dy[dy_off], <int>g.out_vol,
                 &x[x_off], <int>g.out_vol, beta, &dst[dst_off], <int>g.cpg)
        return 0
    for q in range(g.out[0] * g.out[1]):
        _im2col_out_row(x, x_off, col, col_off, g, q)
    sgemm_rm(False, False, <int>g.cog, <int>g.kdim, <int>g.out_vol, 1.0, &dy[dy_off], <int>g.out_vol,
             &col[col_off], <int>g.kdim, beta, &dst[dst_off], <int>g.kdim)
    return 0


cdef int _bw_range(const float[::1] x, const float[::1] dy, float[::1] scratch,
                   const Win* g, Py_ssize_t part, Py_ssize_t nparts,
                   int algorithm) except -1 nogil:
    """Images [lo, hi) of part `part` into that part's partial dW slab."""
    cdef Py_ssize_t lo = part * g.n // nparts
    cdef Py_ssize_t hi = (part + 1) * g.n // nparts
    cdef Py_ssize_t wsize = g.c_out * g.kdim
    cdef Py_ssize_t dst = part * wsize
    cdef Py_ssize_t col_off = nparts * wsize + part * g.kdim * g.out_vol
    cdef Py_ssize_t ni, gi
    for ni in range(lo, hi):
        for gi in range(g.groups):
            _bw_image_group(x, dy, scratch, dst + gi * g.cog * g.kdim, scratch, col_off, g, ni, gi,
                            0.0 if ni == lo else 1.0, algorithm)
    return 0


cdef int conv_backward_weight_gemm(const float[::1] x, const float[::1] dy, float[::1] dw,
                                   float[::1] scratch, const Win* g, int algorithm,
                                   int split, int t) except -1 nogil:
    # split: as for conv_backward_input_gemm
    cdef int mode = _bw_mode(g, split)
    cdef Py_ssize_t wsize = g.c_out * g.kdim
    cdef Py_ssize_t ni, gi, part, nparts, e, q, x_off, dy_off
    cdef double acc
    if mode == 0:
        for ni in range(g.n):
            for gi in range(g.groups):
                _bw_image_group(x, dy, dw, gi * g.cog * g.kdim, scratch, 0, g, ni, gi,
                                0.0 if ni == 0 else 1.0, algorithm)
        return 0
    if mode == 1:
        # each group's dW block belongs to one thread: no reduction at all
        for gi in prange(g.groups, num_threads=t, schedule='static'):
            work_note(1)
            for ni in range(g.n):
                _bw_image_group(x, dy, dw, gi * g.cog * g.kdim, scratch, threadid() * g.kdim * g.out_vol,
                                g, ni, gi, 0.0 if ni == 0 else 1.0, algorithm)
        # end: prange
        return 0
    if mode == 2:
        # Contiguous image ranges, one per part, each summed into its own
        # partial dW; the partials are then added in part order (not in
        # completion order, and without a lock), so the result is the same
        # on every run of this launch, on any number of threads.
        nparts = split if split < g.n else g.n
        for part in prange(nparts, num_threads=t, schedule='static', chunksize=1):
            work_note(1)
            _bw_range(x, dy, scratch, g, part, nparts, algorithm)
        # end: prange
        for e in prange(wsize, num_threads=t, schedule='static'):
            acc = 0.0
            for part in range(nparts):
                acc = acc + scratch[part * wsize + e]
            dw[e] = <float>acc
        # end: prange
        return 0
    # Small batch and few groups: patch-matrix rows in parallel, then one GEMM
    # split into panels, accumulating image after image.
    for ni in range(g.n):
        for gi in range(g.groups):
            x_off = (ni * g.c + gi * g.cpg) * g.in_vol
            dy_off = (ni * g.c_out + gi * g.cog) * g.out_vol
            if algorithm == CONV_BWD_GEMM_1X1:
                sgemm_rm_split(False, True, <int>g.cog, <int>g.cpg, <int>g.out_vol, 1.0, &dy[dy_off],
                               <int>g.out_vol, &x[x_off], <int>g.out_vol, 0.0 if ni == 0 else 1.0,
                               &dw[gi * g.cog * g.kdim], <int>g.cpg, split, t)
                continue
            for q in prange(g.out[0] * g.out[1], num_threads=t, schedule='static'):
                work_note(1)
                _im2col_out_row(x, x_off, scratch, 0, g, q)
            # end: prange
            sgemm_rm_split(False, False, <int>g.cog, <int>g.kdim, <int>g.out_vol, 1.0, &dy[dy_off],
                           <int>g.out_vol, &scratch[0], <int>g.kdim, 0.0 if ni == 0 else 1.0,
                           &dw[gi * g.cog * g.kdim], <int>g.kdim, split, t)
    return 0


cdef int _bw_reference_pair(const float[::1] x, const float[::1] dy, float[::1] dw,
                            const Win* g, Py_ssize_t pair) except -1 nogil:
    """dW[co, cil, :] for pair = co * cpg + cil, summing over batch and positions."""
    cdef Py_ssize_t co = pair // g.cpg
    cdef Py_ssize_t cil = pair % g.cpg
    cdef Py_ssize_t ci = (co // g.cog) * g.cpg + cil
    cdef Py_ssize_t a, b, c, ni, zo, yo, xo, zi, yi, xi, xb, yb
    cdef double acc
    for a in range(g.k[0]):
        for b in range(g.k[1]):
            for c in range(g.k[2]):
                acc = 0.0
                for ni in range(g.n):
                    xb = (ni * g.c + ci) * g.in_vol
                    yb = (ni * g.c_out + co) * g.out_vol
                    for zo in range(g.out[0]):
                        zi = zo * g.s[0] - g.pb[0] + a * g.dil[0]
                        if zi < 0 or zi >= g.size[0]:
                            continue
                        for yo in range(g.out[1]):
                            yi = yo * g.s[1] - g.pb[1] + b * g.dil[1]
                            if yi < 0 or yi >= g.size[1]:
                                continue
                            for xo in range(g.out[2]):
                                xi = xo * g.s[2] - g.pb[2] + c * g.dil[2]
                                if xi < 0 or xi >= g.size[2]:
                                    continue
                                acc += <double>x[xb + (zi * g.size[1] + yi) * g.size[2] + xi] \
                                    * <double>dy[yb + (zo * g.out[1] + yo) * g.out[2] + xo]
                dw[pair * g.taps + (a * g.k[1] + b) * g.k[2] + c] = <float>acc
    return 0


cdef int conv_backward_weight_reference(const float[::1] x, const float[::1] dy, float[::1] dw,
                                        const Win* g, int t) except -1 nogil:
    cdef Py_ssize_t pair
    for pair in prange(g.c_out * g.cpg, num_threads=t, schedule='static'):
        work_note(1)
        _bw_reference_pair(x, dy, dw, g, pair)
    # end: prange
    return 0


# ---------------------------------------------------------------------------
# conv backward weight, wide grid (stride 1, rank <= 2; src/rlx_bwd_wide.h)
#
# Work items are (group, block of RLX_BWD_WIDE_MR output channels); a part is
# a contiguous range of items.  Each item's dW rows belong to one part, which
# sums image after image into them, so no partial dW is ever reduced across
# threads and the bits do not depend on the thread count (nor on the split).
# Scratch per part: for each image of a group, the zero-padded input of
# every channel (Hp x Wp planes, plus a zero tail the last taps read into) and
# the wide dy rows of one item.  Images go in groups of `nb` (fixed by the
# dims, never by the threads) so that a small plane's dots run over several
# images before their lane sums; a group's padded inputs stay in L2.
# ---------------------------------------------------------------------------

cdef struct WideGeom:
    Py_ssize_t hp, wp, plane     # padded input rows, row width, plane floats
    Py_ssize_t L, Lp             # dot length (last real pixel + 1), rounded up to 16
    Py_ssize_t xfloats           # padded-input floats of one image
    Py_ssize_t nb                # images per group


cdef inline WideGeom _wide_geom(const Win* g) noexcept nogil:
    cdef WideGeom w
    cdef Py_ssize_t maxtap
    w.hp = g.out[1] + (g.k[1] - 1) * g.dil[1]
    w.wp = g.out[2] + (g.k[2] - 1) * g.dil[2]
    w.plane = w.hp * w.wp
    w.L = (g.out[1] - 1) * w.wp + g.out[2]
    w.Lp = (w.L + 15) // 16 * 16        # the AVX-512 loop's step; 64-byte rows
    maxtap = (g.k[1] - 1) * g.dil[1] * w.wp + (g.k[2] - 1) * g.dil[2]
    w.xfloats = ((g.c - 1) * w.plane + maxtap + w.Lp + 15) // 16 * 16     # >= c * plane; dy rows stay aligned
    w.nb = RLX_BWD_WIDE_KC // w.Lp
    if w.nb > RLX_BWD_WIDE_GROUP_FLOATS // w.xfloats:
        w.nb = RLX_BWD_WIDE_GROUP_FLOATS // w.xfloats
    if w.nb > g.n:
        w.nb = g.n
    if w.nb < 1:
        w.nb = 1
    return w


cdef inline Py_ssize_t _wide_items(const Win* g) noexcept nogil:
    return g.groups * ((g.cog + RLX_BWD_WIDE_MR - 1) // RLX_BWD_WIDE_MR)


cdef inline Py_ssize_t _wide_parts(const Win* g, int t) noexcept nogil:
    cdef Py_ssize_t items = _wide_items(g)
    return t if t < items else items


cdef inline Py_ssize_t _wide_part_floats(const Win* g) noexcept nogil:
    cdef WideGeom w = _wide_geom(g)
    return w.nb * (w.xfloats + RLX_BWD_WIDE_MR * w.Lp)


cdef int _bw_wide_part(const float[::1] x, const float[::1] dy, float[::1] dw, float[::1] scratch,
                       const Py_ssize_t[::1] roff, const Win* g, Py_ssize_t part,
                       Py_ssize_t nparts) except -1 nogil:
    """dW rows of items [lo, hi) of part `part`, over every image."""
    cdef WideGeom w = _wide_geom(g)
    cdef Py_ssize_t nblk = (g.cog + RLX_BWD_WIDE_MR - 1) // RLX_BWD_WIDE_MR
    cdef Py_ssize_t items = g.groups * nblk
    cdef Py_ssize_t lo = part * items // nparts
    cdef Py_ssize_t hi = (part + 1) * items // nparts
    cdef Py_ssize_t base = part * _wide_part_floats(g)
    cdef Py_ssize_t dstride = RLX_BWD_WIDE_MR * w.Lp
    cdef Py_ssize_t dyw = base + w.nb * w.xfloats
    cdef Py_ssize_t ci_lo, ci_hi, ci, r, yi, cc_lo, cc_hi, n0, nb, b, ni, item, gi, co0, mr, i, yo, src
    if lo >= hi:
        return 0
    # zero padding and zero wide columns / tails: written once, never overwritten
    memset(&scratch[base], 0, _wide_part_floats(g) * sizeof(float))
    ci_lo = (lo // nblk) * g.cpg
    ci_hi = ((hi - 1) // nblk + 1) * g.cpg
    cc_lo = g.pb[2] if g.pb[2] > 0 else 0                     # padded columns holding x
    cc_hi = g.pb[2] + g.size[2] if g.pb[2] + g.size[2] < w.wp else w.wp
    for item in range(lo, hi):
        co0 = (item // nblk) * g.cog + (item % nblk) * RLX_BWD_WIDE_MR
        mr = min(RLX_BWD_WIDE_MR, (item // nblk + 1) * g.cog - co0)
        memset(&dw[co0 * g.kdim], 0, mr * g.kdim * sizeof(float))
    n0 = 0
    while n0 < g.n:
        nb = min(w.nb, g.n - n0)
        for b in range(nb):
            ni = n0 + b
            if cc_lo < cc_hi:
                for ci in range(ci_lo, ci_hi):
                    for r in range(w.hp):
                        yi = r - g.pb[1]
                        if yi < 0 or yi >= g.size[1]:
                            continue
                        src = ((ni * g.c + ci) * g.size[1] + yi) * g.size[2] + cc_lo - g.pb[2]
                        memcpy(&scratch[base + b * w.xfloats + ci * w.plane + r * w.wp + cc_lo], &x[src],
                               (cc_hi - cc_lo) * sizeof(float))
        for item in range(lo, hi):
            gi = item // nblk
            co0 = gi * g.cog + (item % nblk) * RLX_BWD_WIDE_MR
            mr = min(RLX_BWD_WIDE_MR, (gi + 1) * g.cog - co0)
            for b in range(nb):
                ni = n0 + b
                for i in range(mr):
                    for yo in range(g.out[1]):
                        memcpy(&scratch[dyw + b * dstride + i * w.Lp + yo * w.wp],
                               &dy[((ni * g.c_out + co0 + i) * g.out[1] + yo) * g.out[2]],
                               g.out[2] * sizeof(float))
            rlx_bwd_wide_block(&scratch[dyw], w.Lp, mr, &scratch[base + gi * g.cpg * w.plane], &roff[0],
                               g.kdim, w.Lp, nb, w.xfloats, dstride, &dw[co0 * g.kdim], g.kdim)
        n0 += nb
    return 0


cdef int conv_backward_weight_wide(const float[::1] x, const float[::1] dy, float[::1] dw,
                                   float[::1] scratch, const Py_ssize_t[::1] roff, const Win* g,
                                   int split, int t) except -1 nogil:
    cdef Py_ssize_t nparts = _wide_parts(g, split)
    cdef Py_ssize_t part
    for part in prange(nparts, num_threads=t, schedule='static', chunksize=1):
        work_note(1)
        _bw_wide_part(x, dy, dw, scratch, roff, g, part, nparts)
    # end: prange
    return 0


def wide_row_offsets(tuple dims):
    """roff[ci * taps + a * kw + c] = ci * plane + a * dh * Wp + c * dw: where
    (ci, tap)'s run starts in one group's padded input."""
    cdef Win g = conv_win_from(dims)
    cdef WideGeom w = _wide_geom(&g)
    ci, a, c = np.meshgrid(np.arange(g.cpg), np.arange(g.k[1]), np.arange(g.k[2]), indexing="ij")
    return np.ascontiguousarray((ci * w.plane + a * g.dil[1] * w.wp + c * g.dil[2]).ravel(), dtype=np.intp)


# ---------------------------------------------------------------------------
# conv backward weight by Winograd transforms (3x3, stride 1, undilated 2-D;
# src/rlx_bwd_wino.h).  Parts own ranges of the 4 point rows (at most 4
# parts); scratch: M (16 points x c_out x c_in/groups), then each part's work
# area.  Every M entry is summed by one part in a fixed order, so the bits do
# not depend on the number of parts or threads.
# ---------------------------------------------------------------------------

cdef inline WinoGeom _wino_geom(const Win* g) noexcept nogil:
    return rlx_bwd_wino_geom_make(g.n, g.c, g.c_out, g.groups, g.size[1], g.size[2], g.out[1], g.out[2],
                                  g.pb[1], g.pb[2])


cdef inline Py_ssize_t _wino_parts(int t) noexcept nogil:
    return 4 if t > 4 else (t if t > 1 else 1)


cdef inline Py_ssize_t _wino_part_offset(const WinoGeom* w, Py_ssize_t part) noexcept nogil:
    """First float of part `part`'s work area (after M; every part's is the same size)."""
    return rlx_bwd_wino_m_floats(w) + part * rlx_bwd_wino_part_floats(w)


cdef Py_ssize_t _wino_floats(const Win* g, int t) noexcept nogil:
    cdef WinoGeom w = _wino_geom(g)
    cdef Py_ssize_t nparts = _wino_parts(t)
    return _wino_part_offset(&w, nparts)


def winograd_eligible(tuple dims):
    """True when the Winograd weight gradient computes this conv's: a conv2d
    (no depth axis; a conv1d's kernel is 1 x k) with a 3x3 kernel, stride 1
    and dilation 1."""
    cdef Win g = conv_win_from(dims)
    return bool(g.size[0] == 1 and g.out[0] == 1 and g.k[0] == 1 and g.k[1] == 3 and g.k[2] == 3
                and g.s[0] == 1 and g.s[1] == 1 and g.s[2] == 1 and g.dil[1] == 1 and g.dil[2] == 1
                and g.n >= 1 and g.out[1] >= 1 and g.out[2] >= 1)


def winograd_chunk(tuple dims):
    """(tile rows per chunk, floats per U/V row of a chunk) of the Winograd
    weight gradient."""
    cdef Win g = conv_win_from(dims)
    cdef WinoGeom w = _wino_geom(&g)
    return int(w.rows), int(w.L)


cdef int conv_backward_weight_winograd(const float[::1] x, const float[::1] dy, float[::1] dw,
                                       float[::1] scratch, const Py_ssize_t[::1] roff, const Win* g,
                                       int split, int t) except -1 nogil:
    cdef WinoGeom w = _wino_geom(g)
    cdef Py_ssize_t nparts = _wino_parts(split)
    cdef Py_ssize_t part, off
    # touch both ends so a debug build bounds-checks x, dy and dw
    x[g.n * g.c * g.size[1] * g.size[2] - 1]
    dy[g.n * g.c_out * g.out[1] * g.out[2] - 1]
    dw[g.c_out * g.cpg * 9 - 1]
    scratch[_wino_part_offset(&w, nparts) - 1]
    for part in prange(nparts, num_threads=t, schedule='static', chunksize=1):
        work_note(1)
        off = _wino_part_offset(&w, part)
        rlx_bwd_wino_part(&w, &x[0], &dy[0], &scratch[0], &scratch[off], &roff[0],
                          <int>(part * 4 // nparts), <int>((part + 1) * 4 // nparts))
    # end: prange
    rlx_bwd_wino_output(&w, &scratch[0], &dw[0], 0, g.c_out)
    return 0


def winograd_row_offsets(tuple dims):
    """roff[j] = j * L: where U row j (output channel j of a conv group)
    starts after the group's first (L: winograd_chunk)."""
    cdef Win g = conv_win_from(dims)
    cdef WinoGeom w = _wino_geom(&g)
    return np.ascontiguousarray(np.arange(g.cog) * w.L, dtype=np.intp)


cdef class ConvBackwardInputLaunch(Launch):
    """dx = d(conv)/dx applied to dy, bound to arena views."""
    cdef const float[::1] dy
    cdef const float[::1] weight
    cdef float[::1] dx
    cdef float[::1] scratch
    cdef Win g
    cdef int algorithm

    def __init__(self, dy, weight, dx, scratch, tuple dims, int algorithm, int max_threads):
        self.dy = dy
        self.weight = weight
        self.dx = dx
        self.scratch = or_placeholder(scratch, np.float32)
        self.g = conv_win_from(dims)
        self.algorithm = algorithm
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        if self.algorithm == CONV_BWD_REFERENCE:
            conv_backward_input_reference(self.dy, self.weight, self.dx, &self.g, t)
        else:
            conv_backward_input_gemm(self.dy, self.weight, self.dx, self.scratch, &self.g,
                                     self.algorithm, self.max_threads, t)
        return 0


cdef class ConvBackwardWeightLaunch(Launch):
    """dW = d(conv)/dW applied to dy, bound to arena views."""
    cdef const float[::1] x
    cdef const float[::1] dy
    cdef float[::1] dw
    cdef float[::1] scratch
    cdef Py_ssize_t[::1] roff
    cdef Win g
    cdef int algorithm

    def __init__(self, x, dy, dw, scratch, tuple dims, int algorithm, int max_threads):
        cdef WideGeom w
        self.x = x
        self.dy = dy
        self.dw = dw
        self.scratch = or_placeholder(scratch, np.float32)
        self.g = conv_win_from(dims)
        self.algorithm = algorithm
        self.max_threads = max(1, max_threads)
        self.roff = np.zeros(1, dtype=np.intp)
        if algorithm == CONV_BWD_WIDE:
            if not wide_eligible(dims):
                raise ValueError(f"conv backward weight: the wide kernel needs stride 1 and rank <= 2, "
                                 f"got dims {dims}")
            self._check_scratch("wide")
            self.roff = wide_row_offsets(dims)
            w = _wide_geom(&self.g)
            # the last group's last (channel, tap) run must end inside one part's padded input
            if (self.g.c - self.g.cpg) * w.plane + int(np.max(self.roff)) + w.Lp > w.xfloats:
                raise AssertionError(f"conv backward weight: wide runs overrun the padded input, dims {dims}")
        elif algorithm == CONV_BWD_WINOGRAD:
            if not winograd_eligible(dims):
                raise ValueError(f"conv backward weight: the Winograd kernel needs a 3x3 kernel, stride 1, "
                                 f"dilation 1 and rank 2, got dims {dims}")
            self._check_scratch("Winograd")
            self.roff = winograd_row_offsets(dims)

    def _check_scratch(self, str what):
        need = _bw_need(&self.g, self.algorithm, self.max_threads)
        if self.scratch.shape[0] < need:
            raise ValueError(f"conv backward weight: {what} scratch of {self.scratch.shape[0]} floats, "
                             f"needs {need}")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        if self.algorithm == CONV_BWD_REFERENCE:
            conv_backward_weight_reference(self.x, self.dy, self.dw, &self.g, t)
        elif self.algorithm == CONV_BWD_WIDE:
            conv_backward_weight_wide(self.x, self.dy, self.dw, self.scratch, self.roff, &self.g,
                                      self.max_threads, t)
        elif self.algorithm == CONV_BWD_WINOGRAD:
            conv_backward_weight_winograd(self.x, self.dy, self.dw, self.scratch, self.roff, &self.g,
                                          self.max_threads, t)
        else:
            conv_backward_weight_gemm(self.x, self.dy, self.dw, self.scratch, &self.g,
                                      self.algorithm, self.max_threads, t)
        return 0


# ---------------------------------------------------------------------------
# Lowering a transposed conv (conv backward input, conv-transpose) to forward
# convs (rlx_cpu/ops/conv_backward.py: transposed_phases).  Each phase's
# forward weight has the channels swapped within each group and a selection
# of the taps, in the forward conv's order:
#     dst[g*cdg + j, i, u] = src[g*csg + i, j, tapmap[u]]
# for src [c_src, cdg, taps_src] and dst [c_dst, csg, len(tapmap)],
# cdg = c_dst/groups, csg = c_src/groups (at stride 1, tapmap reverses the
# taps).  Each phase's output is then scattered into its positions of y.
# ---------------------------------------------------------------------------

cdef int _phase_rows(const float[::1] src, float[::1] dst, const Py_ssize_t[::1] tapmap, Py_ssize_t csg,
                     Py_ssize_t cdg, Py_ssize_t taps_src, Py_ssize_t row) except -1 nogil:
    """dst row `row` = dst[row, :, :] (csg * len(tapmap) floats)."""
    cdef Py_ssize_t g = row // cdg
    cdef Py_ssize_t j = row - g * cdg
    cdef Py_ssize_t nt = tapmap.shape[0]
    cdef Py_ssize_t i, u, s0
    cdef Py_ssize_t d0 = row * csg * nt
    for i in range(csg):
        s0 = ((g * csg + i) * cdg + j) * taps_src
        for u in range(nt):
            dst[d0 + i * nt + u] = src[s0 + tapmap[u]]
    return 0


def phase_weight(src, Py_ssize_t c_dst, Py_ssize_t groups, tapmap, tuple kernel):
    """numpy form of WeightPhaseLaunch, for a constant weight at compile time:
    src [c_src, c_dst/groups, *k] -> [c_dst, c_src/groups, *kernel] with the
    forward conv's taps src[..., tapmap[u]] (flattened taps)."""
    a = np.asarray(src, dtype=np.float32)
    c_src, cdg = a.shape[0], a.shape[1]
    csg = c_src // groups
    out = a.reshape(groups, csg, cdg, -1)[..., np.asarray(tapmap, dtype=np.intp)].transpose(0, 2, 1, 3)
    return np.ascontiguousarray(out.reshape((c_dst, csg) + tuple(kernel)))


cdef class WeightPhaseLaunch(Launch):
    """A phase's forward weight, written each run (the weight is a plan
    input)."""
    cdef const float[::1] src
    cdef float[::1] dst
    cdef Py_ssize_t[::1] tapmap
    cdef Py_ssize_t csg, cdg, taps_src, c_dst

    def __init__(self, src, dst, Py_ssize_t c_src, Py_ssize_t c_dst, Py_ssize_t groups, Py_ssize_t taps_src,
                 tapmap, int max_threads):
        tm = np.ascontiguousarray(tapmap, dtype=np.intp)
        if groups < 1 or c_src % groups or c_dst % groups or taps_src < 1 or tm.ndim != 1 or tm.size < 1:
            raise ValueError(f"weight phase: bad dims c_src={c_src} c_dst={c_dst} groups={groups} "
                             f"taps={taps_src} tapmap={tm.tolist()}")
        if tm.min() < 0 or tm.max() >= taps_src:
            raise ValueError(f"weight phase: tapmap {tm.tolist()} outside the weight's {taps_src} taps")
        if src.shape[0] < c_src * (c_dst // groups) * taps_src or dst.shape[0] < c_dst * (c_src // groups) * tm.size:
            raise ValueError(f"weight phase: buffers of {src.shape[0]} / {dst.shape[0]} floats are too small "
                             f"for c_src={c_src} c_dst={c_dst} groups={groups} taps={taps_src}/{tm.size}")
        self.src = src
        self.dst = dst
        self.tapmap = tm
        self.csg = c_src // groups
        self.cdg = c_dst // groups
        self.taps_src = taps_src
        self.c_dst = c_dst
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t row
        for row in prange(self.c_dst, num_threads=t, schedule='static'):
            work_note(1)
            _phase_rows(self.src, self.dst, self.tapmap, self.csg, self.cdg, self.taps_src, row)
        return 0


cdef class PhaseScatterLaunch(Launch):
    """y[plane, o0 + s0*i, o1 + s1*j, o2 + s2*l] = z[plane, i, j, l] for one
    phase of a transposed conv (z [planes, *m], y [planes, *out], three
    spatial axes); the phases together write every element of y once."""
    cdef const float[::1] z
    cdef float[::1] y
    cdef Py_ssize_t planes
    cdef Py_ssize_t m[3]
    cdef Py_ssize_t o[3]
    cdef Py_ssize_t s[3]
    cdef Py_ssize_t out[3]

    def __init__(self, z, y, Py_ssize_t planes, tuple m, tuple origin, tuple step, tuple out, int max_threads):
        cdef int a
        if len(m) != 3 or len(origin) != 3 or len(step) != 3 or len(out) != 3:
            raise ValueError(f"phase scatter: m, origin, step and out need 3 axes, got {m} {origin} {step} {out}")
        for a in range(3):
            self.m[a], self.o[a], self.s[a], self.out[a] = m[a], origin[a], step[a], out[a]
            if min(self.m[a], self.s[a], self.out[a]) < 1 or self.o[a] < 0 \
                    or self.o[a] + self.s[a] * (self.m[a] - 1) >= self.out[a]:
                raise ValueError(f"phase scatter: a {m} phase from {origin} step {step} does not fit a {out} output")
        if planes < 1 or z.shape[0] < planes * m[0] * m[1] * m[2] or y.shape[0] < planes * out[0] * out[1] * out[2]:
            raise ValueError(f"phase scatter: buffers of {z.shape[0]} / {y.shape[0]} floats are too small")
        self.z = z
        self.y = y
        self.planes = planes
        self.max_threads = max(1, max_threads)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t row, plane, i, j, l, yo, zo, rest
        cdef Py_ssize_t mw = self.m[2], sw = self.s[2]
        for row in prange(self.planes * self.m[0] * self.m[1], num_threads=t, schedule='static'):
            work_note(1)
            j = row % self.m[1]
            rest = row // self.m[1]
            i = rest % self.m[0]
            plane = rest // self.m[0]
            yo = ((plane * self.out[0] + self.o[0] + self.s[0] * i) * self.out[1] + self.o[1] + self.s[1] * j) \
                * self.out[2] + self.o[2]
            zo = row * mw
            if sw == 1:
                memcpy(&self.y[yo], &self.z[zo], mw * sizeof(float))
            else:
                for l in range(mw):
                    self.y[yo + sw * l] = self.z[zo + l]
        return 0


# ---------------------------------------------------------------------------
# Depthwise transposed conv, 2-D, straight from the input (src/rlx_dwt.h)
# ---------------------------------------------------------------------------

cdef extern from "rlx_dwt.h":
    ctypedef struct DwtGeom "rlx_dwt_geom":
        Py_ssize_t h, w, oh, ow
    DwtGeom rlx_dwt_geom_make(Py_ssize_t h, Py_ssize_t w, Py_ssize_t oh, Py_ssize_t ow, Py_ssize_t kh,
                              Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t ph, Py_ssize_t pw) nogil
    Py_ssize_t rlx_dwt_scratch_floats(const DwtGeom* g) nogil
    int rlx_dwt_supported(Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw) nogil
    void rlx_dwt_plane(const DwtGeom* g, const float* x, const float* wt, float b, float* y,
                       float* scratch) nogil


def depthwise_transposed_supported(Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw):
    """Whether DepthwiseTransposedLaunch takes this kernel and stride."""
    return bool(rlx_dwt_supported(kh, kw, sh, sw))


def depthwise_transposed_scratch_floats(tuple dims, int nthreads):
    """Scratch floats of DepthwiseTransposedLaunch: one padded row and the
    phase rows per thread.  dims = (h, w, oh, ow, kh, kw, sh, sw, ph, pw)."""
    h, w, oh, ow, kh, kw, sh, sw, ph, pw = dims
    cdef DwtGeom g = rlx_dwt_geom_make(h, w, oh, ow, kh, kw, sh, sw, ph, pw)
    return int(rlx_dwt_scratch_floats(&g) * nthreads)


cdef class DepthwiseTransposedLaunch(Launch):
    """y [n, c, oh, ow] = the 2-D transposed conv of x [n, c, h, w] with a
    depthwise weight [c, 1, kh, kw] (one output channel per input channel),
    stride (sh, sw), begin padding (ph, pw) (the end padding is implied by
    (oh, ow); outputs past the kernel's reach get the bias alone), plus bias;
    planes over the threads."""
    cdef const float[::1] x
    cdef const float[::1] w
    cdef const float[::1] bias
    cdef float[::1] y
    cdef float[::1] scratch
    cdef bint has_bias
    cdef Py_ssize_t planes, c, per, kk
    cdef DwtGeom g

    def __init__(self, x, w, bias, y, scratch, Py_ssize_t n, Py_ssize_t c, tuple dims, int max_threads):
        if len(dims) != 10 or n < 1 or c < 1:
            raise ValueError(f"depthwise conv-transpose: n={n} c={c} dims={dims}")
        h, wd, oh, ow, kh, kw, sh, sw, ph, pw = dims
        if min(h, wd, oh, ow, kh, kw, sh, sw) < 1 or ph < 0 or pw < 0 or kh < sh or kw < sw \
                or not rlx_dwt_supported(kh, kw, sh, sw):
            raise ValueError(f"depthwise conv-transpose: geometry {dims} (kernel at least the stride, "
                             f"padding >= 0, stride <= 8, at most 64 taps per output)")
        self.g = rlx_dwt_geom_make(h, wd, oh, ow, kh, kw, sh, sw, ph, pw)
        self.planes = n * c
        self.c = c
        self.kk = kh * kw
        self.max_threads = max(1, max_threads)
        self.per = rlx_dwt_scratch_floats(&self.g)
        self.x, self.w, self.y = x, w, y
        self.has_bias = bias is not None
        self.bias = or_placeholder(bias, np.float32)
        self.scratch = or_placeholder(scratch, np.float32)
        if x.shape[0] < self.planes * h * wd or y.shape[0] < self.planes * oh * ow or w.shape[0] < c * self.kk:
            raise ValueError(f"depthwise conv-transpose: buffers of {x.shape[0]}/{w.shape[0]}/{y.shape[0]} "
                             f"floats are too small")
        if self.has_bias and self.bias.shape[0] < c:
            raise ValueError(f"depthwise conv-transpose: bias holds {self.bias.shape[0]} values, need {c}")
        if self.scratch.shape[0] < self.per * self.max_threads:
            raise ValueError(f"depthwise conv-transpose: scratch of {self.scratch.shape[0]} floats, need "
                             f"{self.per * self.max_threads}")

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef Py_ssize_t p, ci
        cdef Py_ssize_t hw = self.g.h * self.g.w
        cdef Py_ssize_t ohw = self.g.oh * self.g.ow
        for p in prange(self.planes, num_threads=t, schedule='static'):
            work_note(1)
            ci = p % self.c
            # touch both ends so a debug build bounds-checks the plane
            self.x[(p + 1) * hw - 1]
            self.y[(p + 1) * ohw - 1]
            rlx_dwt_plane(&self.g, &self.x[p * hw], &self.w[ci * self.kk],
                          self.bias[ci] if self.has_bias else 0.0, &self.y[p * ohw],
                          &self.scratch[threadid() * self.per])
        return 0
