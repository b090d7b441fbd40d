# vol2col / col2vol: the one patch-matrix fill and its adjoint, shared by
# conv2d's im2col (src/_conv2d.pyx), conv3d and conv-transpose of every rank
# (src/_convnd.pyx).
#
# A patch matrix has rows (c, kd, kh, kw) and columns q = positions of a grid;
# element = vol[c, q*s + k*d - p], or 0 where that lands in the padding:
#
#   op               vol (padded side)   grid (GEMM columns)
#   conv             x   [cpg, in...]    y positions
#   conv-transpose   y   [cog, out...]   x positions
#
# The conv backward kernels (src/_backward.pyx) and the standalone Im2Col /
# Col2Im ops (src/_im2col.pyx) keep their own loops; see the notes there.
from libc.string cimport memcpy, memset

from _window cimport Win, out_range

cdef extern from "rlx_omp.h":
    int RLX_DEBUG_CHECKS


cdef struct Patch:
    Py_ssize_t vol[3]        # spatial sizes of the padded volume
    Py_ssize_t grid[3]       # patch positions (GEMM columns)
    Py_ssize_t k[3]
    Py_ssize_t s[3]
    Py_ssize_t p[3]
    Py_ssize_t d[3]
    Py_ssize_t kk            # taps per channel
    Py_ssize_t vol_size      # floats per channel of the volume
    Py_ssize_t grid_size     # columns
    Py_ssize_t ch            # channels in the rows (per group)
    bint transposed


cdef inline Patch patch_of(const Win* g, bint transposed) noexcept nogil:
    """The patch matrix of conv (transposed=False: volume x, grid y) or
    conv-transpose (volume y, grid x) for one (image, group)."""
    cdef Patch pt
    cdef int a
    for a in range(3):
        pt.vol[a] = g.out[a] if transposed else g.size[a]
        pt.grid[a] = g.size[a] if transposed else g.out[a]
        pt.k[a] = g.k[a]
        pt.s[a] = g.s[a]
        pt.p[a] = g.pb[a]
        pt.d[a] = g.dil[a]
    pt.kk = g.k[0] * g.k[1] * g.k[2]
    pt.vol_size = pt.vol[0] * pt.vol[1] * pt.vol[2]
    pt.grid_size = pt.grid[0] * pt.grid[1] * pt.grid[2]
    pt.ch = g.c_out // g.groups if transposed else g.c // g.groups
    pt.transposed = transposed
    return pt


cdef inline bint patch_is_identity(const Patch* pt) noexcept nogil:
    """The patch matrix equals the volume: 1-tap kernel, stride 1, no padding."""
    cdef int a
    for a in range(3):
        if pt.k[a] != 1 or pt.s[a] != 1 or pt.p[a] != 0 or pt.vol[a] != pt.grid[a]:
            return False
    return True


# ---------------------------------------------------------------------------
# vol2col / col2vol: one row (c, kd, kh, kw) of one column block at a time.
# A block is grid columns [j0, j0 + nb) (flattened (q0, q1, q2) order); its
# rows are nb floats apart.  Grid lines (fixed q0, q1) may be cut at the ends.
# ---------------------------------------------------------------------------

cdef inline void _row_taps(const Patch* pt, Py_ssize_t r, Py_ssize_t* c, Py_ssize_t* t0,
                           Py_ssize_t* t1, Py_ssize_t* t2) noexcept nogil:
    cdef Py_ssize_t t = r % pt.kk
    c[0] = r // pt.kk
    t0[0] = t // (pt.k[1] * pt.k[2])
    t1[0] = (t // pt.k[2]) % pt.k[1]
    t2[0] = t % pt.k[2]


cdef inline void _inner_range(const Patch* pt, Py_ssize_t t2, Py_ssize_t* shift,
                              Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Grid columns q2 whose tap v2 = q2*s2 + shift lands inside [0, vol2)."""
    shift[0] = t2 * pt.d[2] - pt.p[2]
    out_range(shift[0], pt.s[2], pt.vol[2], pt.grid[2], lo, hi)


cdef inline int vol2col_row(const float[::1] v, Py_ssize_t v_off, float[::1] col, Py_ssize_t col_off,
                             const Patch* pt, Py_ssize_t r, Py_ssize_t j0, Py_ssize_t nb) except -1 nogil:
    """col[r, 0:nb] = taps of row r at grid columns j0.. read from the volume
    at v_off (zeros in padding)."""
    cdef Py_ssize_t c, t0, t1, t2, shift, lo, hi, line, q0, q1, q2, qa, qb, l, h, a0, a1, dst, src
    cdef Py_ssize_t g2 = pt.grid[2]
    cdef Py_ssize_t s2 = pt.s[2]
    _row_taps(pt, r, &c, &t0, &t1, &t2)
    _inner_range(pt, t2, &shift, &lo, &hi)
    # (q0, q1) of the first line, then stepped: no divisions per line
    q0 = (j0 // g2) // pt.grid[1]
    q1 = (j0 // g2) % pt.grid[1] - 1
    for line in range(j0 // g2, (j0 + nb - 1) // g2 + 1):
        q1 += 1
        if q1 == pt.grid[1]:
            q1 = 0
            q0 += 1
        dst = col_off + r * nb + line * g2 - j0          # col[dst + q2] is column (line, q2)
        qa = j0 - line * g2 if j0 > line * g2 else 0      # the part of the line in the block
        qb = j0 + nb - line * g2 if j0 + nb < (line + 1) * g2 else g2
        l = lo if lo > qa else qa
        h = hi if hi < qb else qb
        a0 = q0 * pt.s[0] + t0 * pt.d[0] - pt.p[0]
        a1 = q1 * pt.s[1] + t1 * pt.d[1] - pt.p[1]
        if a0 < 0 or a0 >= pt.vol[0] or a1 < 0 or a1 >= pt.vol[1] or l >= h:
            memset(&col[dst + qa], 0, (qb - qa) * sizeof(float))
            continue
        src = v_off + c * pt.vol_size + (a0 * pt.vol[1] + a1) * pt.vol[2] + shift
        if l > qa:
            memset(&col[dst + qa], 0, (l - qa) * sizeof(float))
        if s2 == 1:
            memcpy(&col[dst + l], &v[src + l], (h - l) * sizeof(float))
        else:
            for q2 in range(l, h):
                col[dst + q2] = v[src + q2 * s2]
        if h < qb:
            memset(&col[dst + h], 0, (qb - h) * sizeof(float))
    return 0


cdef inline int col2vol_row(const float[::1] col, Py_ssize_t col_off, float[::1] v, Py_ssize_t v_off,
                             const Patch* pt, Py_ssize_t r, Py_ssize_t j0, Py_ssize_t nb) except -1 nogil:
    """vol[taps of row r] += col[r, 0:nb] for grid columns j0..: the adjoint
    of vol2col_row (taps in the padding are dropped)."""
    cdef Py_ssize_t c, t0, t1, t2, shift, lo, hi, line, q0, q1, q2, qa, qb, l, h, a0, a1, srow, dst
    cdef Py_ssize_t g2 = pt.grid[2]
    cdef Py_ssize_t s2 = pt.s[2]
    cdef float* vp
    cdef const float* cp
    _row_taps(pt, r, &c, &t0, &t1, &t2)
    _inner_range(pt, t2, &shift, &lo, &hi)
    if lo == hi:
        return 0
    # (q0, q1) of the first line, then stepped: no divisions per line
    q0 = (j0 // g2) // pt.grid[1]
    q1 = (j0 // g2) % pt.grid[1] - 1
    for line in range(j0 // g2, (j0 + nb - 1) // g2 + 1):
        q1 += 1
        if q1 == pt.grid[1]:
            q1 = 0
            q0 += 1
        a0 = q0 * pt.s[0] + t0 * pt.d[0] - pt.p[0]
        a1 = q1 * pt.s[1] + t1 * pt.d[1] - pt.p[1]
        if a0 < 0 or a0 >= pt.vol[0] or a1 < 0 or a1 >= pt.vol[1]:
            continue
        qa = j0 - line * g2 if j0 > line * g2 else 0
        qb = j0 + nb - line * g2 if j0 + nb < (line + 1) * g2 else g2
        l = lo if lo > qa else qa
        h = hi if hi < qb else qb
        if l >= h:
            continue
        srow = col_off + r * nb + line * g2 - j0
        dst = v_off + c * pt.vol_size + (a0 * pt.vol[1] + a1) * pt.vol[2] + shift
        if RLX_DEBUG_CHECKS:
            for q2 in range(l, h):
                v[dst + q2 * s2] += col[srow + q2]
        else:
            # raw pointers: the compiler vectorises the unit-stride case
            vp = &v[dst + l * s2]
            cp = &col[srow + l]
            if s2 == 1:
                for q2 in range(h - l):
                    vp[q2] += cp[q2]
            else:
                for q2 in range(h - l):
                    vp[q2 * s2] += cp[q2]
    return 0
