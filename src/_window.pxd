# Sliding-window index arithmetic shared by every kernel family (conv,
# conv-transpose, backward, pooling, im2col/col2im).
#
# Along one axis, output o's window starts at input index  o*s - pad_begin
# and tap j reads  o*s - pad_begin + j*d.  Two questions come up everywhere:
#   * for a fixed tap (shift = j*d - pad_begin): which outputs o read inside
#     [0, size)?                                  -> out_range
#   * for a fixed output (start = o*s - pad_begin): which taps j land inside
#     [lo_bound, hi_bound)?                        -> tap_range
# Both return half-open ranges, empty as (x, x); kernels loop over them and
# never test bounds per element.

cdef struct Win:
    # The canonical N-d window geometry of every kernel family, padded to 3
    # spatial axes (d, h, w); a missing axis has size = out = k = s = dil = 1
    # and no padding, so w is always the contiguous axis.
    #   size  x's spatial sizes; out  y's (window positions for a pool or
    #   im2col, the conv output, the conv-transpose output)
    #   c     channels of x; c_out and groups describe convs (a pool or
    #         im2col is depthwise: c_out = groups = c)
    #   pe    end padding; convs leave it 0 (their end padding is implied
    #         by out and never read)
    # (C kernels in rlx_simd.h keep their own 2-D rlx_conv_geom.)
    Py_ssize_t n, c, c_out, groups
    Py_ssize_t size[3]
    Py_ssize_t out[3]
    Py_ssize_t k[3]
    Py_ssize_t s[3]
    Py_ssize_t pb[3]
    Py_ssize_t pe[3]
    Py_ssize_t dil[3]
    # derived once by the parsers below (the GEMM sizes of a conv):
    Py_ssize_t cpg, cog       # channels per group of x and of y
    Py_ssize_t taps           # k[0] * k[1] * k[2]
    Py_ssize_t kdim           # cpg * taps: rows of one group's patch matrix
    Py_ssize_t in_vol         # size[0] * size[1] * size[2]
    Py_ssize_t out_vol        # out[0] * out[1] * out[2]


cdef inline void _derive(Win* g) noexcept nogil:
    g.cpg = g.c // g.groups
    g.cog = g.c_out // g.groups
    g.taps = g.k[0] * g.k[1] * g.k[2]
    g.kdim = g.cpg * g.taps
    g.in_vol = g.size[0] * g.size[1] * g.size[2]
    g.out_vol = g.out[0] * g.out[1] * g.out[2]


cdef inline Win win_from(tuple dims) except *:
    """Win from WindowDims.as_tuple(): (n, c, then 3 values each of size, out,
    k, s, pb, pe, dil)."""
    cdef Win g
    cdef int a
    if len(dims) != 23:
        raise ValueError(f"window dims must have 23 entries, got {len(dims)}")
    g.n = dims[0]
    g.c = dims[1]
    g.c_out = g.c
    g.groups = g.c
    for a in range(3):
        g.size[a] = dims[2 + a]
        g.out[a] = dims[5 + a]
        g.k[a] = dims[8 + a]
        g.s[a] = dims[11 + a]
        g.pb[a] = dims[14 + a]
        g.pe[a] = dims[17 + a]
        g.dil[a] = dims[20 + a]
    _derive(&g)
    return g


cdef inline Win conv_win_from(tuple dims) except *:
    """Win from ConvNDDims.as_tuple(): (n, c_in, c_out, groups, then 3 values
    each of x size, y size, k, s, pb, dil)."""
    cdef Win g
    cdef int a
    if len(dims) != 22:
        raise ValueError(f"conv dims must have 22 entries, got {len(dims)}")
    g.n, g.c, g.c_out, g.groups = dims[0], dims[1], dims[2], dims[3]
    for a in range(3):
        g.size[a] = dims[4 + a]
        g.out[a] = dims[7 + a]
        g.k[a] = dims[10 + a]
        g.s[a] = dims[13 + a]
        g.pb[a] = dims[16 + a]
        g.pe[a] = 0
        g.dil[a] = dims[19 + a]
    _derive(&g)
    return g


cdef inline Py_ssize_t ceil_div_nonneg(Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    """ceil(a / b) for b > 0, clamped below at 0."""
    if a <= 0:
        return 0
    return (a + b - 1) // b


cdef inline void out_range(Py_ssize_t shift, Py_ssize_t s, Py_ssize_t size,
                           Py_ssize_t n_out, Py_ssize_t* lo, Py_ssize_t* hi) noexcept nogil:
    """[lo, hi): outputs o in [0, n_out) with 0 <= o*s + shift < size."""
    cdef Py_ssize_t a, b = 0
    if s == 1:                   # no division on the common path
        a = -shift if shift < 0 else 0
        if size - shift > 0:
            b = size - shift
    else:
        a = ceil_div_nonneg(-shift, s)
        if size - 1 - shift >= 0:
            b = (size - 1 - shift) // s + 1
    if b > n_out:
        b = n_out
    if a > b:
        a = b
    lo[0] = a
    hi[0] = b


cdef inline void tap_range(Py_ssize_t start, Py_ssize_t d, Py_ssize_t k,
                           Py_ssize_t lo_bound, Py_ssize_t hi_bound,
                           Py_ssize_t* j0, Py_ssize_t* j1) noexcept nogil:
    """[j0, j1): taps j in [0, k) with lo_bound <= start + j*d < hi_bound."""
    cdef Py_ssize_t a, b
    if d == 1:
        # no division on the common path (pool kernels call this per output)
        a = lo_bound - start if lo_bound > start else 0
        b = hi_bound - start if hi_bound > start else 0
    else:
        a = ceil_div_nonneg(lo_bound - start, d)
        b = 0
        if hi_bound - 1 - start >= 0:
            b = (hi_bound - 1 - start) // d + 1
    if b > k:
        b = k
    if a > b:
        a = b
    j0[0] = a
    j1[0] = b
