# N-d convolution kernels (up to 3 spatial axes, NC[D][H]W, float32):
# conv3d forward and conv-transpose of every rank, on the shared vol2col/col2vol
# pair (src/_vol2col.pxd).
#
# Geometry is always three spatial axes (D, H, W); a 1-D or 2-D op has
# leading axes of size 1 with kernel 1, stride 1, pad 0, dilation 1, so the
# innermost (contiguous) axis is always the real last axis.
#
# One "patch matrix" shape serves both directions.  Rows are (c, kd, kh, kw),
# columns are positions q of a grid; element = vol[c, q*s + k*d - p] or 0:
#
#   op               vol (padded side)   grid (GEMM columns)   GEMM
#   --------------   -----------------   -------------------   ----------------------
#   conv3d           x   [cpg, in...]    y positions (out)     y_g = W_g . col
#   conv-transpose   y   [cog, out...]   x positions (in)      col = W_g^T . x_g,
#                                                              then col2vol adds col
#                                                              into the zeroed y_g
#
#   algorithm   parallel over
#   ---------   -----------------------------------------------------------------
#   reference   (image, out channel) planes (gather for conv, scatter for transpose)
#   fast        (image, group) items with a per-thread col block when there are
#               enough; else col rows (fill) / GEMM panels / out channels (col2vol)
#
# conv3d never builds its patch matrix whole: it is filled and consumed one
# cache-sized block of columns at a time (see _block_cols).
# A patch matrix that is the volume itself (kernel 1, stride 1, no padding,
# same size) skips the scratch: the GEMM reads x or writes y directly.
from cython.parallel cimport prange, threadid

from _blas cimport sgemm_rm, sgemm_rm_split
from _epilogue cimport add_bias_planes, fill_bias_planes
from _vol2col cimport Patch, patch_of, patch_is_identity, vol2col_row, col2vol_row
from _window cimport Win, conv_win_from
from rlx_cpu._launch cimport Launch, effective_threads, or_placeholder, work_note, work_meter_bind
from _implicit cimport (ImplicitEpilogue, ImplicitGeom, implicit_conv_run, phased_conv_run, rlx_gemm_packed_floats,
                       rlx_implicit_floats, rlx_implicit_geom_3d, rlx_implicit_offsets,
                       rlx_implicit_slot_floats, PH_FIELDS, PH_K, PH_OFFS, PH_W, PH_WG, PH_M0, PH_M1, PH_M2, PH_Y)

import numpy as np


# this module's work-meter notes count in rlx_cpu._launch's meter
work_meter_bind()


cdef extern from "rlx_simd.h":
    void rlx_simd_init() nogil
    int rlx_simd_level() nogil


rlx_simd_init()


cdef inline ImplicitGeom _implicit_geom(const Win* g) noexcept nogil:
    return rlx_implicit_geom_3d(g.c, g.groups, g.size, g.out, g.k, g.s, g.pb, g.dil)


# ConvNDLaunch's `implicit`: the GEMM packs X panels from the input copy, or
# reads them in place (src/rlx_gemm.h, rlx_gemm_conv_implicit_direct).
cdef enum:
    IMPLICIT_PACKED_C = 1
    IMPLICIT_DIRECT_C = 2
IMPLICIT_PACKED = IMPLICIT_PACKED_C
IMPLICIT_DIRECT = IMPLICIT_DIRECT_C


def implicit_floats(tuple dims):
    """Floats of one (image, group) input copy of a conv3d whose patch matrix
    stays implicit (src/rlx_implicit.h)."""
    cdef Win g = conv_win_from(dims)
    cdef ImplicitGeom ig = _implicit_geom(&g)
    return int(rlx_implicit_floats(&ig))


def simd_level():
    """The SIMD level (src/rlx_simd.h): 0 runs the baseline, 1 the AVX2+FMA
    variants in this module, 2 also the AVX-512 ones where they exist."""
    return rlx_simd_level()

# ---------------------------------------------------------------------------
# Scratch sizing (one formula, used by the compiler and by the launch)
# ---------------------------------------------------------------------------

# conv3d builds and consumes its patch matrix one block of columns at a time,
# so scratch stays a few MB per thread whatever the volume (a whole matrix
# is 27x the input for a 3x3x3 kernel) and a block is still in cache when
# the GEMM reads it.  Conv-transpose blocks only huge matrices: every block's
# GEMM re-packs the weight W_g^T (cog*kk x cig, often the larger operand
# there); with 256 KB blocks that measured up to 2.5x slower than one
# whole-matrix GEMM whose output col2vol then reads from L3.
cdef enum:
    _COL_BLOCK = 1024 * 1024                # conv3d: floats per thread (4 MB)
    _COL_BLOCK_TRANSPOSED = 4 * 1024 * 1024 # conv-transpose: floats per thread (16 MB)
COL_BLOCK_FLOATS = _COL_BLOCK
COL_BLOCK_FLOATS_TRANSPOSED = _COL_BLOCK_TRANSPOSED


cdef bint _items_parallel(const Win* g, int nthreads) noexcept nogil:
    return nthreads > 1 and g.n * g.groups >= nthreads


cdef Py_ssize_t _block_cols(const Win* g, const Patch* pt, int nthreads) noexcept nogil:
    """Columns per block: the per-thread block size above (times the threads
    for the shared block at small batch) over the rows, at least 64, a
    multiple of 16."""
    cdef Py_ssize_t rows = pt.ch * pt.kk
    cdef Py_ssize_t target = _COL_BLOCK_TRANSPOSED if pt.transposed else _COL_BLOCK
    cdef Py_ssize_t nb
    if not _items_parallel(g, nthreads) and nthreads > 1:
        target *= nthreads
    nb = target // rows
    if nb < 64:
        nb = 64
    nb = (nb + 15) // 16 * 16
    if nb > pt.grid_size:
        nb = pt.grid_size
    return nb


def col_floats(tuple dims, bint transposed):
    """Floats of one whole (image, group) patch matrix: rows * columns."""
    cdef Win g = conv_win_from(dims)
    cdef Patch pt = patch_of(&g, transposed)
    return int(pt.ch * pt.kk * pt.grid_size)


def block_cols(tuple dims, bint transposed, int nthreads):
    """Columns of the patch matrix built per block (see COL_BLOCK_FLOATS)."""
    cdef Win g = conv_win_from(dims)
    cdef Patch pt = patch_of(&g, transposed)
    return int(_block_cols(&g, &pt, nthreads))


def scratch_floats(tuple dims, bint transposed, bint fast, int nthreads, int implicit=0):
    """Floats of arena scratch for these dims: 0 for the reference path and
    when the patch matrix is the volume itself, else one column block per
    thread when (image, group) items run in parallel, else one shared block;
    `implicit` (a conv3d on the microkernel, IMPLICIT_PACKED or
    IMPLICIT_DIRECT): one input copy per thread."""
    cdef Win g = conv_win_from(dims)
    cdef Patch pt = patch_of(&g, transposed)
    cdef ImplicitGeom ig = _implicit_geom(&g)
    if implicit:
        return int(rlx_implicit_slot_floats(&ig) * nthreads)
    if not fast or patch_is_identity(&pt):
        return 0
    return int(pt.ch * pt.kk * _block_cols(&g, &pt, nthreads)
               * (nthreads if _items_parallel(&g, nthreads) else 1))


# ---------------------------------------------------------------------------
# Reference kernels: plain loops, constant memory
# ---------------------------------------------------------------------------

cdef int _conv_reference_plane(const float[::1] x, const float[::1] w, const float[::1] bias,
                               bint has_bias, float[::1] y, const Win* g,
                               Py_ssize_t item) except -1 nogil:
    """Gather form, double accumulation: one (image, out channel) plane."""
    cdef Py_ssize_t ni = item // g.c_out
    cdef Py_ssize_t co = item % g.c_out
    cdef Py_ssize_t cpg = g.c // g.groups
    cdef Py_ssize_t ci0 = (co // (g.c_out // g.groups)) * cpg
    cdef Py_ssize_t kk = g.k[0] * g.k[1] * g.k[2]
    cdef Py_ssize_t isz = g.size[0] * g.size[1] * g.size[2]
    cdef Py_ssize_t o0, o1, o2, cil, k0, k1, k2, a0, a1, a2, xb, wb, yb
    cdef double acc
    yb = item * g.out[0] * g.out[1] * g.out[2]
    for o0 in range(g.out[0]):
        for o1 in range(g.out[1]):
            for o2 in range(g.out[2]):
                acc = bias[co] if has_bias else 0.0
                for cil in range(cpg):
                    xb = (ni * g.c + ci0 + cil) * isz
                    wb = (co * cpg + cil) * kk
                    for k0 in range(g.k[0]):
                        a0 = o0 * g.s[0] + k0 * g.dil[0] - g.pb[0]
                        if a0 < 0 or a0 >= g.size[0]:
                            continue
                        for k1 in range(g.k[1]):
                            a1 = o1 * g.s[1] + k1 * g.dil[1] - g.pb[1]
                            if a1 < 0 or a1 >= g.size[1]:
                                continue
                            for k2 in range(g.k[2]):
                                a2 = o2 * g.s[2] + k2 * g.dil[2] - g.pb[2]
                                if a2 < 0 or a2 >= g.size[2]:
                                    continue
                                acc += <double>x[xb + (a0 * g.size[1] + a1) * g.size[2] + a2] * \
                                    <double>w[wb + (k0 * g.k[1] + k1) * g.k[2] + k2]
                y[yb + (o0 * g.out[1] + o1) * g.out[2] + o2] = <float>acc
    return 0


cdef int _transpose_reference_plane(const float[::1] x, const float[::1] w, const float[::1] bias,
                                    bint has_bias, float[::1] y, const Win* g,
                                    Py_ssize_t item) except -1 nogil:
    """Scatter form: every input of the group adds x * w at o = i*s + k*d - p.
    One thread owns the (image, out channel) plane, so there are no races."""
    cdef Py_ssize_t ni = item // g.c_out
    cdef Py_ssize_t co = item % g.c_out
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t cig = g.c // g.groups
    cdef Py_ssize_t gi = co // cog
    cdef Py_ssize_t cl = co % cog
    cdef Py_ssize_t kk = g.k[0] * g.k[1] * g.k[2]
    cdef Py_ssize_t isz = g.size[0] * g.size[1] * g.size[2]
    cdef Py_ssize_t osz = g.out[0] * g.out[1] * g.out[2]
    cdef Py_ssize_t yb = item * osz
    cdef Py_ssize_t cil, ci, i0, i1, i2, k0, k1, k2, a0, a1, a2, xb, wb
    cdef float xv
    fill_bias_planes(y, yb, bias, has_bias, co, 1, osz)
    for cil in range(cig):
        ci = gi * cig + cil
        xb = (ni * g.c + ci) * isz
        wb = (ci * cog + cl) * kk
        for i0 in range(g.size[0]):
            for i1 in range(g.size[1]):
                for i2 in range(g.size[2]):
                    xv = x[xb + (i0 * g.size[1] + i1) * g.size[2] + i2]
                    for k0 in range(g.k[0]):
                        a0 = i0 * g.s[0] + k0 * g.dil[0] - g.pb[0]
                        if a0 < 0 or a0 >= g.out[0]:
                            continue
                        for k1 in range(g.k[1]):
                            a1 = i1 * g.s[1] + k1 * g.dil[1] - g.pb[1]
                            if a1 < 0 or a1 >= g.out[1]:
                                continue
                            for k2 in range(g.k[2]):
                                a2 = i2 * g.s[2] + k2 * g.dil[2] - g.pb[2]
                                if a2 < 0 or a2 >= g.out[2]:
                                    continue
                                y[yb + (a0 * g.out[1] + a1) * g.out[2] + a2] += \
                                    xv * w[wb + (k0 * g.k[1] + k1) * g.k[2] + k2]
    return 0


# ---------------------------------------------------------------------------
# Fast conv3d: vol2col + GEMM per (image, group), block of columns by block
# ---------------------------------------------------------------------------

cdef int _conv_item(const float[::1] x, const float[::1] w, const float[::1] bias, bint has_bias,
                    float[::1] y, float[::1] scratch, const Win* g, const Patch* pt,
                    bint identity, Py_ssize_t nb, Py_ssize_t item, Py_ssize_t col_off) except -1 nogil:
    """One (image, group), single-threaded: per column block fill the patch
    rows and run one GEMM into y's columns; then the bias."""
    cdef Py_ssize_t cpg = pt.ch
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t kdim = cpg * pt.kk
    cdef Py_ssize_t ncol = pt.grid_size
    cdef Py_ssize_t ni = item // g.groups
    cdef Py_ssize_t gi = item % g.groups
    cdef Py_ssize_t x_off = (ni * g.c + gi * cpg) * pt.vol_size
    cdef Py_ssize_t y_off = (ni * g.c_out + gi * cog) * ncol
    cdef Py_ssize_t r, blk, j0, cnt
    if identity:
        sgemm_rm(False, False, <int>cog, <int>ncol, <int>kdim, 1.0, &w[gi * cog * kdim], <int>kdim,
                 &x[x_off], <int>ncol, 0.0, &y[y_off], <int>ncol)
    else:
        for blk in range((ncol + nb - 1) // nb):
            j0 = blk * nb
            cnt = nb if j0 + nb <= ncol else ncol - j0
            for r in range(kdim):
                vol2col_row(x, x_off, scratch, col_off, pt, r, j0, cnt)
            sgemm_rm(False, False, <int>cog, <int>cnt, <int>kdim, 1.0, &w[gi * cog * kdim], <int>kdim,
                     &scratch[col_off], <int>cnt, 0.0, &y[y_off + j0], <int>ncol)
    if has_bias:
        add_bias_planes(y, y_off, bias, gi * cog, cog, ncol)
    return 0


cdef int conv_nd_fast(const float[::1] x, const float[::1] w, const float[::1] bias, bint has_bias,
                      float[::1] y, float[::1] scratch, const Win* g, const Patch* pt,
                      bint identity, Py_ssize_t nb, bint items_parallel, int split,
                      int nthreads) except -1 nogil:
    cdef Py_ssize_t cpg = pt.ch
    cdef Py_ssize_t cog = g.c_out // g.groups
    cdef Py_ssize_t kdim = cpg * pt.kk
    cdef Py_ssize_t ncol = pt.grid_size
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t item, r, c, ni, gi, x_off, y_off, blk, j0, cnt
    if items_parallel:
        # Enough independent (image, group) items: one per thread at a time,
        # each with its own block of scratch.
        for item in prange(items, num_threads=nthreads, schedule='static'):
            work_note(1)
            _conv_item(x, w, bias, has_bias, y, scratch, g, pt, identity, nb, item,
                       threadid() * kdim * nb)
        # end: prange
        return 0
    # Small batch: per column block the threads fill rows of one shared block,
    # then split the GEMM into panels; they share the bias planes at the end.
    for item in range(items):
        ni = item // g.groups
        gi = item % g.groups
        x_off = (ni * g.c + gi * cpg) * pt.vol_size
        y_off = (ni * g.c_out + gi * cog) * ncol
        if identity:
            sgemm_rm_split(False, False, <int>cog, <int>ncol, <int>kdim, 1.0, &w[gi * cog * kdim],
                           <int>kdim, &x[x_off], <int>ncol, 0.0, &y[y_off], <int>ncol, split, nthreads)
        else:
            for blk in range((ncol + nb - 1) // nb):
                j0 = blk * nb
                cnt = nb if j0 + nb <= ncol else ncol - j0
                for r in prange(kdim, num_threads=nthreads, schedule='static'):
                    work_note(1)
                    vol2col_row(x, x_off, scratch, 0, pt, r, j0, cnt)
                # end: prange
                sgemm_rm_split(False, False, <int>cog, <int>cnt, <int>kdim, 1.0, &w[gi * cog * kdim],
                               <int>kdim, &scratch[0], <int>cnt, 0.0, &y[y_off + j0], <int>ncol,
                               split, nthreads)
        if has_bias:
            for c in prange(cog, num_threads=nthreads, schedule='static'):
                work_note(1)
                add_bias_planes(y, y_off + c * ncol, bias, gi * cog + c, 1, ncol)
            # end: prange
    return 0


# ---------------------------------------------------------------------------
# Fast conv-transpose: per (image, group) and column block,
# col = W_g^T . x_g[:, block] (one GEMM), then col2vol adds it into y_g
# ---------------------------------------------------------------------------

cdef int _transpose_item(const float[::1] x, const float[::1] w, const float[::1] bias,
                         bint has_bias, float[::1] y, float[::1] scratch, const Win* g,
                         const Patch* pt, bint identity, Py_ssize_t nb, Py_ssize_t item,
                         Py_ssize_t col_off) except -1 nogil:
    """One (image, group), single-threaded: y_g = bias, then per column block
    col = W_g^T x_g[:, block] and y_g += col2vol(col)."""
    cdef Py_ssize_t cog = pt.ch
    cdef Py_ssize_t cig = g.c // g.groups
    cdef Py_ssize_t mdim = cog * pt.kk
    cdef Py_ssize_t ncol = pt.grid_size
    cdef Py_ssize_t ni = item // g.groups
    cdef Py_ssize_t gi = item % g.groups
    cdef Py_ssize_t x_off = (ni * g.c + gi * cig) * ncol
    cdef Py_ssize_t y_off = (ni * g.c_out + gi * cog) * pt.vol_size
    cdef Py_ssize_t r, blk, j0, cnt
    fill_bias_planes(y, y_off, bias, has_bias, gi * cog, cog, pt.vol_size)
    if identity:
        # y_g += W_g^T x_g straight into the output (beta 1 keeps the bias)
        sgemm_rm(True, False, <int>mdim, <int>ncol, <int>cig, 1.0, &w[gi * cig * mdim], <int>mdim,
                 &x[x_off], <int>ncol, 1.0, &y[y_off], <int>ncol)
        return 0
    for blk in range((ncol + nb - 1) // nb):
        j0 = blk * nb
        cnt = nb if j0 + nb <= ncol else ncol - j0
        sgemm_rm(True, False, <int>mdim, <int>cnt, <int>cig, 1.0, &w[gi * cig * mdim], <int>mdim,
                 &x[x_off + j0], <int>ncol, 0.0, &scratch[col_off], <int>cnt)
        for r in range(mdim):
            col2vol_row(scratch, col_off, y, y_off, pt, r, j0, cnt)
    return 0


cdef int _col2vol_channel(const float[::1] col, float[::1] y, Py_ssize_t y_off, const Patch* pt,
                          Py_ssize_t c, Py_ssize_t j0, Py_ssize_t cnt) except -1 nogil:
    """All kk rows of output channel c: they write only channel c's volume."""
    cdef Py_ssize_t r
    for r in range(c * pt.kk, (c + 1) * pt.kk):
        col2vol_row(col, 0, y, y_off, pt, r, j0, cnt)
    return 0


cdef int conv_transpose_nd_fast(const float[::1] x, const float[::1] w, const float[::1] bias,
                                bint has_bias, float[::1] y, float[::1] scratch, const Win* g,
                                const Patch* pt, bint identity, Py_ssize_t nb, bint items_parallel,
                                int split, int nthreads) except -1 nogil:
    cdef Py_ssize_t cog = pt.ch
    cdef Py_ssize_t cig = g.c // g.groups
    cdef Py_ssize_t mdim = cog * pt.kk
    cdef Py_ssize_t ncol = pt.grid_size
    cdef Py_ssize_t items = g.n * g.groups
    cdef Py_ssize_t item, c, ni, gi, x_off, y_off, blk, j0, cnt
    if items_parallel:
        for item in prange(items, num_threads=nthreads, schedule='static'):
            work_note(1)
            _transpose_item(x, w, bias, has_bias, y, scratch, g, pt, identity, nb, item,
                            threadid() * mdim * nb)
        # end: prange
        return 0
    # Small batch: split each block's GEMM into panels, then scatter by output
    # channel (a channel's volume is written by one thread only: no races).
    for item in range(items):
        ni = item // g.groups
        gi = item % g.groups
        x_off = (ni * g.c + gi * cig) * ncol
        y_off = (ni * g.c_out + gi * cog) * pt.vol_size
        for c in prange(cog, num_threads=nthreads, schedule='static'):
            work_note(1)
            fill_bias_planes(y, y_off + c * pt.vol_size, bias, has_bias, gi * cog + c, 1, pt.vol_size)
        # end: prange
        if identity:
            sgemm_rm_split(True, False, <int>mdim, <int>ncol, <int>cig, 1.0, &w[gi * cig * mdim],
                           <int>mdim, &x[x_off], <int>ncol, 1.0, &y[y_off], <int>ncol, split, nthreads)
            continue
        for blk in range((ncol + nb - 1) // nb):
            j0 = blk * nb
            cnt = nb if j0 + nb <= ncol else ncol - j0
            sgemm_rm_split(True, False, <int>mdim, <int>cnt, <int>cig, 1.0, &w[gi * cig * mdim],
                           <int>mdim, &x[x_off + j0], <int>ncol, 0.0, &scratch[0], <int>cnt, split,
                           nthreads)
            for c in prange(cog, num_threads=nthreads, schedule='static'):
                work_note(1)
                _col2vol_channel(scratch, y, y_off, pt, c, j0, cnt)
            # end: prange
    return 0


# ---------------------------------------------------------------------------
# Launch: a ConvND / ConvTransposeND thunk bound to one arena's memory
# ---------------------------------------------------------------------------

cdef class ConvNDLaunch(Launch):
    """conv3d (transposed=False) or conv-transpose 1/2/3-D (transposed=True)
    with fused bias, bound to arena views.  `max_threads` is the thread count
    the scratch was sized for."""
    cdef const float[::1] x
    cdef const float[::1] weight
    cdef const float[::1] bias
    cdef float[::1] y
    cdef float[::1] scratch
    cdef Win g
    cdef Patch pt
    cdef bint transposed, fast, has_bias, identity, items_parallel_ok
    cdef int implicit               # 0, IMPLICIT_PACKED or IMPLICIT_DIRECT
    cdef Py_ssize_t nb
    cdef Py_ssize_t[::1] offs       # implicit: the taps' offsets into the input copy

    def __init__(self, x, weight, bias, y, scratch, tuple dims, bint transposed, bint fast,
                 int max_threads, int implicit=0):
        self.x = x
        self.weight = weight
        self.has_bias = bias is not None
        self.bias = or_placeholder(bias, np.float32)
        self.y = y
        self.scratch = or_placeholder(scratch, np.float32)
        self.g = conv_win_from(dims)
        self.pt = patch_of(&self.g, transposed)
        self.transposed = transposed
        self.fast = fast
        self.identity = patch_is_identity(&self.pt)
        self.max_threads = max(1, max_threads)
        # Per-thread slabs exist only if the compiler sized them (same rule).
        self.items_parallel_ok = self.identity or _items_parallel(&self.g, self.max_threads)
        self.nb = _block_cols(&self.g, &self.pt, self.max_threads)
        if implicit not in (0, IMPLICIT_PACKED, IMPLICIT_DIRECT):
            raise ValueError(f"ConvNDLaunch: implicit must be 0, {IMPLICIT_PACKED} or {IMPLICIT_DIRECT}, "
                             f"got {implicit}")
        if implicit and (transposed or not fast):
            raise ValueError("ConvNDLaunch: the implicit patch matrix is for the forward GEMM path only")
        self.implicit = implicit
        if fast and self.scratch.shape[0] < scratch_floats(dims, transposed, fast, self.max_threads, implicit):
            raise ValueError("ConvNDLaunch: scratch smaller than scratch_floats()")
        cdef Py_ssize_t k = self.g.cpg * self.g.k[0] * self.g.k[1] * self.g.k[2]
        cdef ImplicitGeom ig = _implicit_geom(&self.g)
        self.offs = np.zeros(max(k, 1), dtype=np.intp)
        if implicit:
            need = (self.g.groups * rlx_gemm_packed_floats(self.g.c_out // self.g.groups, k))
            if self.weight.shape[0] < need:
                raise ValueError(f"ConvNDLaunch: packed weight has {self.weight.shape[0]} floats, needs {need}")
            rlx_implicit_offsets(&ig, &self.offs[0])

    @property
    def block_cols(self):
        """Patch-matrix columns built per block (0 when no patch matrix is built)."""
        return 0 if (self.identity or not self.fast) else int(self.nb)

    def parallel_mode(self, int nthreads):
        """How a run splits the work: 'planes' (reference: (image, out
        channel) planes), 'items' ((image, group) per thread) or 'split'
        (each item's fill/GEMM/scatter shared by all threads).  The bound
        thread count decides it; a run's `nthreads` only sizes the team."""
        if not self.fast:
            return "planes"
        if self.implicit:
            n = self.g.n * self.g.groups
            return "items" if self.max_threads <= 1 or n % self.max_threads == 0 or n >= 4 * self.max_threads \
                else "split"
        if self.items_parallel_ok and _items_parallel(&self.g, self.max_threads):
            return "items"
        return "split"

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        # how the work is cut depends on the bound thread count only, so a run
        # on fewer threads (adaptive_threads) gives the same bits
        cdef bint items_par = self.items_parallel_ok and _items_parallel(&self.g, self.max_threads)
        cdef Py_ssize_t item
        cdef ImplicitGeom ig
        cdef ImplicitEpilogue e     # bias only: no activation, no residual
        if self.fast and self.transposed:
            conv_transpose_nd_fast(self.x, self.weight, self.bias, self.has_bias, self.y,
                                   self.scratch, &self.g, &self.pt, self.identity, self.nb, items_par,
                                   self.max_threads, t)
        elif self.implicit:
            ig = _implicit_geom(&self.g)
            e.act = 0
            e.alpha = 0.0
            e.beta = 0.0
            e.res = NULL
            e.res_len = 0
            implicit_conv_run(self.x, self.weight, self.y, self.scratch, self.offs, &ig, self.g.n, self.g.c_out,
                              &e if self.has_bias else NULL, &self.bias[0] if self.has_bias else NULL,
                              self.implicit == IMPLICIT_DIRECT_C, self.max_threads, t)
        elif self.fast:
            conv_nd_fast(self.x, self.weight, self.bias, self.has_bias, self.y, self.scratch,
                         &self.g, &self.pt, self.identity, self.nb, items_par, self.max_threads, t)
        elif self.transposed:
            for item in prange(self.g.n * self.g.c_out, num_threads=t, schedule='static'):
                work_note(1)
                _transpose_reference_plane(self.x, self.weight, self.bias, self.has_bias,
                                           self.y, &self.g, item)
            # end: prange
        else:
            for item in prange(self.g.n * self.g.c_out, num_threads=t, schedule='static'):
                work_note(1)
                _conv_reference_plane(self.x, self.weight, self.bias, self.has_bias, self.y,
                                      &self.g, item)
            # end: prange
        return 0


# ---------------------------------------------------------------------------
# A transposed conv's phases from one input copy, into y in place
# ---------------------------------------------------------------------------

cdef class PhasedConvLaunch(Launch):
    """Every phase of a lowered transposed conv (rlx_cpu/ops/conv_backward.py)
    as forward convs on the in-place GEMM, sharing one zero-padded copy of the
    input and writing y at each phase's strided places (phased_conv_run in
    src/_implicit.pxd).

    x [n, c_in, *size] and y [n, c_out, *out] (three spatial axes), wp every
    phase's packed weight one after another, bias c_out floats or None.
    `pad`: the copy's begin padding per axis, `q` its extents; `step`: the
    stride of the transposed conv.  phases: per phase (taps (3), dilation
    (3), shift (3): where its taps start in the copy, extents m (3), origin
    (3) in y, first float of its packed weight)."""
    cdef const float[::1] x
    cdef const float[::1] wp
    cdef const float[::1] bias
    cdef float[::1] y
    cdef float[::1] scratch
    cdef Py_ssize_t[::1] offs
    cdef Py_ssize_t[:, ::1] info
    cdef bint has_bias
    cdef Py_ssize_t n, c_in, c_out, groups, y_plane
    cdef Py_ssize_t size[3]
    cdef Py_ssize_t out[3]
    cdef Py_ssize_t pad[3]
    cdef Py_ssize_t q[3]
    cdef Py_ssize_t cst[3]

    def __init__(self, x, wp, bias, y, scratch, Py_ssize_t n, Py_ssize_t c_in, Py_ssize_t c_out,
                 Py_ssize_t groups, tuple size, tuple out, tuple pad, tuple q, tuple step, tuple phases,
                 int max_threads):
        cdef int a
        cdef Py_ssize_t ph, cpg, cog, k, t0, t1, t2, ci, kk, woff, pf
        if min(n, c_in, c_out, groups) < 1 or c_in % groups or c_out % groups:
            raise ValueError(f"PhasedConvLaunch: n={n} c_in={c_in} c_out={c_out} groups={groups}")
        for a in range(3):
            self.size[a], self.out[a], self.pad[a], self.q[a] = size[a], out[a], pad[a], q[a]
            if min(size[a], out[a], q[a], step[a]) < 1 or pad[a] < 0:
                raise ValueError(f"PhasedConvLaunch: size {size}, out {out}, pad {pad}, copy {q}, step {step}")
        self.n, self.c_in, self.c_out, self.groups = n, c_in, c_out, groups
        self.y_plane = out[0] * out[1] * out[2]
        self.cst[0] = step[0] * out[1] * out[2]
        self.cst[1] = step[1] * out[2]
        self.cst[2] = step[2]
        self.max_threads = max(1, max_threads)
        self.x, self.wp, self.y = x, wp, y
        self.has_bias = bias is not None
        self.bias = or_placeholder(bias, np.float32)
        self.scratch = or_placeholder(scratch, np.float32)
        if x.shape[0] < n * c_in * size[0] * size[1] * size[2] or y.shape[0] < n * c_out * self.y_plane:
            raise ValueError(f"PhasedConvLaunch: x holds {x.shape[0]} floats, y {y.shape[0]}: too few")
        if self.has_bias and self.bias.shape[0] < c_out:
            raise ValueError(f"PhasedConvLaunch: bias holds {self.bias.shape[0]} values, need {c_out}")
        cdef ImplicitGeom ig = self._geom()
        if self.scratch.shape[0] < rlx_implicit_slot_floats(&ig) * self.max_threads:
            raise ValueError(f"PhasedConvLaunch: scratch of {self.scratch.shape[0]} floats, need "
                             f"{rlx_implicit_slot_floats(&ig) * self.max_threads}")
        cpg, cog = c_in // groups, c_out // groups
        plane = q[0] * q[1] * q[2]
        info = np.zeros((len(phases), PH_FIELDS), dtype=np.intp)
        offs = []
        for ph, (taps, dil, shift, m, origin, woff) in enumerate(phases):
            for a in range(3):
                # the phase reads copy positions shift + t*dil + i (i < m) along each axis
                if taps[a] < 1 or dil[a] < 1 or m[a] < 1 or shift[a] < 0 or \
                        shift[a] + (taps[a] - 1) * dil[a] + m[a] > q[a] or \
                        origin[a] < 0 or origin[a] + step[a] * (m[a] - 1) >= out[a]:
                    raise ValueError(f"PhasedConvLaunch: phase {ph} (taps {taps}, dilation {dil}, shift {shift}, "
                                     f"extents {m}, origin {origin}) does not fit the copy {q} / output {out}")
            k = cpg * taps[0] * taps[1] * taps[2]
            pf = rlx_gemm_packed_floats(cog, k)
            if woff < 0 or woff + groups * pf > wp.shape[0]:
                raise ValueError(f"PhasedConvLaunch: phase {ph}'s packed weight [{woff}, {woff + groups * pf}) "
                                 f"passes the {wp.shape[0]} floats given")
            info[ph, PH_K] = k
            info[ph, PH_OFFS] = len(offs)
            info[ph, PH_W] = woff
            info[ph, PH_WG] = pf
            info[ph, PH_M0], info[ph, PH_M1], info[ph, PH_M2] = m
            info[ph, PH_Y] = (origin[0] * out[1] + origin[1]) * out[2] + origin[2]
            for ci in range(cpg):
                for t0 in range(taps[0]):
                    for t1 in range(taps[1]):
                        for t2 in range(taps[2]):
                            offs.append(ci * plane + ((shift[0] + t0 * dil[0]) * q[1] + shift[1] + t1 * dil[1]) * q[2]
                                        + shift[2] + t2 * dil[2])
        self.info = info
        self.offs = np.array(offs, dtype=np.intp)

    cdef ImplicitGeom _geom(self) noexcept nogil:
        # the copy: the input padded by `pad` at the start, extents q (a
        # stride-1, 1x1x1 "conv" whose output extents are q)
        cdef Py_ssize_t one[3]
        one[0] = one[1] = one[2] = 1
        return rlx_implicit_geom_3d(self.c_in, self.groups, self.size, self.q, one, one, self.pad, one)

    cdef int run(self, int nthreads) except -1 nogil:
        cdef int t = effective_threads(nthreads, self.max_threads)
        cdef ImplicitGeom ig = self._geom()
        cdef ImplicitEpilogue e     # bias only
        e.act = 0
        e.alpha = 0.0
        e.beta = 0.0
        e.res = NULL
        e.res_len = 0
        phased_conv_run(self.x, self.wp, self.y, self.scratch, self.offs, self.info, &ig, self.n, self.c_out,
                        self.y_plane, self.cst, &e if self.has_bias else NULL,
                        &self.bias[0] if self.has_bias else NULL, self.max_threads, t)
        return 0


def phased_scratch_floats(Py_ssize_t c_in, Py_ssize_t groups, tuple size, tuple pad, tuple q, int nthreads):
    """Floats of scratch a PhasedConvLaunch needs: one input copy (and its
    slack) per thread."""
    cdef Py_ssize_t sz[3]
    cdef Py_ssize_t qq[3]
    cdef Py_ssize_t pp[3]
    cdef Py_ssize_t one[3]
    cdef int a
    for a in range(3):
        sz[a], qq[a], pp[a], one[a] = size[a], q[a], pad[a], 1
    cdef ImplicitGeom ig = rlx_implicit_geom_3d(c_in, groups, sz, qq, one, one, pp, one)
    return int(rlx_implicit_slot_floats(&ig) * nthreads)
