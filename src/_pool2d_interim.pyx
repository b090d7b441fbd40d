# INTERIM forward max/avg pool 2-D, written on the training branch only so the
# example CNN has its pooling layers.  The pooling branch owns forward pooling;
# at merge its kernels replace this module (and the InterimPool2D thunk, rule
# and graph methods marked "interim").  The backward kernels in _backward.pyx
# do not use anything from here; they assume exactly these forward semantics
# (PyTorch's):
#
#   window of output (oh, ow): rows oh*sh - ph + a*dh (a < kh), columns
#   ow*sw - pw + b*dw (b < kw); taps outside the input are skipped.
#   max: first maximum in window order; NaN propagates (first NaN wins).
#   avg: sum of in-bounds taps / divisor, divisor = in-bounds taps, or with
#        count_include_pad the window clipped to [-ph, h + ph_end) x
#        [-pw, w + pw_end) (ceil-mode overhang never counts); no dilation.
#   ceil_mode output size: ceil((in + pb + pe - d(k-1) - 1) / s) + 1, minus
#   one when the last window would start at or past in + pb (the window must
#   start inside the input or its begin padding).
cimport cython
from cython.parallel cimport prange
from libc.math cimport INFINITY, NAN

POOL_MAX = 0
POOL_AVG = 1

cdef enum:
    P_MAX = 0
    P_AVG = 1


cdef struct PoolGeom:
    Py_ssize_t n, c, h, w, h_out, w_out
    Py_ssize_t kh, kw, sh, sw, ph, pw, ph_end, pw_end, dh, dw


cdef PoolGeom _pgeom(tuple dims) except *:
    cdef PoolGeom g
    (g.n, g.c, g.h, g.w, g.h_out, g.w_out, g.kh, g.kw, g.sh, g.sw,
     g.ph, g.pw, g.ph_end, g.pw_end, g.dh, g.dw) = dims
    return g


cdef inline Py_ssize_t _ceil_div_pos(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    if a <= 0:
        return 0
    return (a + b - 1) // b


cdef inline void _tap_range(Py_ssize_t start, Py_ssize_t k, Py_ssize_t d, Py_ssize_t size,
                            Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """Taps j in [lo, hi) with 0 <= start + j * d < size (empty when lo >= hi)."""
    if d == 1:                       # no division on the common path (it runs per output)
        lo[0] = -start if start < 0 else 0
        hi[0] = size - start
    else:
        lo[0] = _ceil_div_pos(-start, d)
        hi[0] = 0
        if size - 1 - start >= 0:
            hi[0] = (size - 1 - start) // d + 1
    if hi[0] > k:
        hi[0] = k


cdef int _max_plane(const float[::1] x, float[::1] y, const PoolGeom* g,
                    Py_ssize_t plane) except -1 nogil:
    cdef Py_ssize_t xb = plane * g.h * g.w
    cdef Py_ssize_t yb = plane * g.h_out * g.w_out
    cdef Py_ssize_t oh, ow, a, b, hs, ws, a_lo, a_hi, b_lo, b_hi, row
    cdef float v, best
    cdef bint has_nan
    for oh in range(g.h_out):
        hs = oh * g.sh - g.ph
        _tap_range(hs, g.kh, g.dh, g.h, &a_lo, &a_hi)
        for ow in range(g.w_out):
            ws = ow * g.sw - g.pw
            _tap_range(ws, g.kw, g.dw, g.w, &b_lo, &b_hi)
            if a_lo >= a_hi or b_lo >= b_hi:
                y[yb + oh * g.w_out + ow] = -INFINITY     # no tap inside the input
                continue
            # branch-free: maxss for the maximum, a flag for NaN (which propagates)
            best = x[xb + (hs + a_lo * g.dh) * g.w + ws + b_lo * g.dw]
            has_nan = False
            for a in range(a_lo, a_hi):
                row = xb + (hs + a * g.dh) * g.w + ws
                for b in range(b_lo, b_hi):
                    v = x[row + b * g.dw]
                    best = v if v > best else best
                    has_nan = has_nan | (v != v)
            y[yb + oh * g.w_out + ow] = NAN if has_nan else best
    return 0


cdef int _avg_plane(const float[::1] x, float[::1] y, const PoolGeom* g,
                    bint count_include_pad, Py_ssize_t plane) except -1 nogil:
    cdef Py_ssize_t xb = plane * g.h * g.w
    cdef Py_ssize_t yb = plane * g.h_out * g.w_out
    cdef Py_ssize_t oh, ow, hs, he, ws, we, h0, h1, w0, w1, hi, wi, pool
    cdef float acc
    for oh in range(g.h_out):
        hs = oh * g.sh - g.ph
        he = min(hs + g.kh, g.h + g.ph_end)
        h0 = max(hs, 0)
        h1 = min(he, g.h)
        for ow in range(g.w_out):
            ws = ow * g.sw - g.pw
            we = min(ws + g.kw, g.w + g.pw_end)
            w0 = max(ws, 0)
            w1 = min(we, g.w)
            acc = 0.0
            for hi in range(h0, h1):
                for wi in range(w0, w1):
                    acc += x[xb + hi * g.w + wi]
            if h0 >= h1 or w0 >= w1:
                y[yb + oh * g.w_out + ow] = 0.0
                continue
            if count_include_pad:
                pool = (he - hs) * (we - ws)
            else:
                pool = (h1 - h0) * (w1 - w0)
            y[yb + oh * g.w_out + ow] = acc / <float>pool
    return 0


cdef class Pool2DLaunch:
    cdef const float[::1] x
    cdef float[::1] y
    cdef PoolGeom g
    cdef int mode
    cdef bint count_include_pad
    cdef int max_threads

    def __init__(self, x, y, tuple dims, int mode, bint count_include_pad, int max_threads):
        self.x = x
        self.y = y
        self.g = _pgeom(dims)
        self.mode = mode
        self.count_include_pad = count_include_pad
        self.max_threads = max(1, max_threads)

    cpdef execute(self, int nthreads):
        cdef int t = nthreads if 0 < nthreads <= self.max_threads else self.max_threads
        cdef Py_ssize_t plane
        with nogil:
            if self.mode == P_MAX:
                for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                    _max_plane(self.x, self.y, &self.g, plane)
            else:
                for plane in prange(self.g.n * self.g.c, num_threads=t, schedule='static'):
                    _avg_plane(self.x, self.y, &self.g, self.count_include_pad, plane)
        return None
