# The implicit-GEMM conv driver (src/rlx_implicit.h), shared by conv2d's
# im2col on the microkernel (src/_conv2d.pyx) and conv3d's GEMM path
# (src/_convnd.pyx).
from cython.parallel cimport prange, threadid
from rlx_cpu._launch cimport work_note
from libc.string cimport memset


cdef extern from "rlx_implicit.h":
    # the same C struct as rlx_epilogue in the modules' own declarations
    ctypedef struct ImplicitEpilogue "rlx_epilogue":
        int act
        float alpha, beta
        const float* res
        Py_ssize_t res_len
    ctypedef struct ImplicitGeom "rlx_implicit_geom":
        Py_ssize_t c_in, groups
        Py_ssize_t out[3]
        Py_ssize_t k[3]
        Py_ssize_t q[3]
    ImplicitGeom rlx_implicit_geom_3d(Py_ssize_t c_in, Py_ssize_t groups, const Py_ssize_t* size,
                                      const Py_ssize_t* out, const Py_ssize_t* k, const Py_ssize_t* s,
                                      const Py_ssize_t* p, const Py_ssize_t* dil) nogil
    Py_ssize_t rlx_implicit_floats(const ImplicitGeom* ig) nogil
    Py_ssize_t rlx_implicit_slot_floats(const ImplicitGeom* ig) nogil
    int RLX_IMPLICIT_SLACK
    Py_ssize_t rlx_implicit_rows(const ImplicitGeom* ig) nogil
    void rlx_implicit_offsets(const ImplicitGeom* ig, Py_ssize_t* offs) nogil
    void rlx_implicit_fill_rows(const float* x, Py_ssize_t x_len, const ImplicitGeom* ig, Py_ssize_t ni,
                                Py_ssize_t gi, float* xs, Py_ssize_t xs_len, Py_ssize_t r0, Py_ssize_t r1) nogil
    Py_ssize_t rlx_gemm_packed_floats(Py_ssize_t m, Py_ssize_t k) nogil
    int RLX_GEMM_NR
    void rlx_gemm_conv_implicit(const float* wp, Py_ssize_t wp_len, Py_ssize_t m, Py_ssize_t k,
                                const float* x, Py_ssize_t x_len, const Py_ssize_t* offs, Py_ssize_t p0,
                                Py_ssize_t w_out, Py_ssize_t wq, Py_ssize_t h_out, Py_ssize_t hq,
                                float* c, Py_ssize_t c_len, Py_ssize_t c_off, Py_ssize_t ldc, Py_ssize_t n,
                                const ImplicitEpilogue* ep, const float* ep_bias) nogil
    void rlx_gemm_conv_implicit_direct(const float* wp, Py_ssize_t wp_len, Py_ssize_t m, Py_ssize_t k,
                                       const float* x, Py_ssize_t x_len, const Py_ssize_t* offs, Py_ssize_t p0,
                                       Py_ssize_t w_out, Py_ssize_t wq, Py_ssize_t h_out, Py_ssize_t hq,
                                       float* c, Py_ssize_t c_len, Py_ssize_t c_off, Py_ssize_t ldc, Py_ssize_t n,
                                       const ImplicitEpilogue* ep, const float* ep_bias, const Py_ssize_t* cst) nogil


cdef inline void _implicit_gemm(bint direct, const float* wp, Py_ssize_t wp_len, Py_ssize_t m, Py_ssize_t k,
                                const float* x, Py_ssize_t x_len, const Py_ssize_t* offs, Py_ssize_t p0,
                                const ImplicitGeom* ig, float* c, Py_ssize_t c_len, Py_ssize_t c_off,
                                Py_ssize_t ldc, Py_ssize_t n, const ImplicitEpilogue* ep,
                                const float* ep_bias) noexcept nogil:
    if direct:
        rlx_gemm_conv_implicit_direct(wp, wp_len, m, k, x, x_len, offs, p0, ig.out[2], ig.q[2], ig.out[1],
                                      ig.q[1], c, c_len, c_off, ldc, n, ep, ep_bias, NULL)
    else:
        rlx_gemm_conv_implicit(wp, wp_len, m, k, x, x_len, offs, p0, ig.out[2], ig.q[2], ig.out[1], ig.q[1],
                               c, c_len, c_off, ldc, n, ep, ep_bias)


cdef inline bint _items_mode(Py_ssize_t items, int split) noexcept nogil:
    """Whether (image, group) items go one per thread, each with its own copy
    (many items, or as many as split evenly), rather than one at a time
    with the copy and the columns shared by the threads."""
    return split <= 1 or items % split == 0 or items >= 4 * split


cdef inline void _fill_own_copy(const float[::1] x, const ImplicitGeom* ig, Py_ssize_t ni, Py_ssize_t gi,
                                float[::1] scratch, Py_ssize_t slot) noexcept nogil:
    """This thread's copy of image ni, group gi at scratch[slot], with its slack zeroed."""
    rlx_implicit_fill_rows(&x[0], x.shape[0], ig, ni, gi, &scratch[slot], scratch.shape[0] - slot, 0,
                           rlx_implicit_rows(ig))
    memset(&scratch[slot + rlx_implicit_floats(ig)], 0, RLX_IMPLICIT_SLACK * sizeof(float))


cdef inline void _fill_shared_copy(const float[::1] x, const ImplicitGeom* ig, Py_ssize_t ni, Py_ssize_t gi,
                                   float[::1] scratch, int split, int nthreads) noexcept nogil:
    """The copy of image ni, group gi into the start of scratch, its rows in
    blocks over the threads, and its slack zeroed."""
    cdef Py_ssize_t rows = rlx_implicit_rows(ig)
    cdef Py_ssize_t nblk = min(rows, 4 * split)
    cdef Py_ssize_t blk
    for blk in prange(nblk, num_threads=nthreads, schedule='static'):
        work_note(1)
        rlx_implicit_fill_rows(&x[0], x.shape[0], ig, ni, gi, &scratch[0], scratch.shape[0],
                               rows * blk // nblk, rows * (blk + 1) // nblk)
    memset(&scratch[rlx_implicit_floats(ig)], 0, RLX_IMPLICIT_SLACK * sizeof(float))


cdef inline int implicit_conv_run(const float[::1] x, const float[::1] wp, float[::1] y, float[::1] scratch,
                                  const Py_ssize_t[::1] offs, const ImplicitGeom* ig, Py_ssize_t n,
                                  Py_ssize_t c_out, const ImplicitEpilogue* ep, const float* bias, bint direct,
                                  int split, int nthreads) except -1 nogil:
    """The conv of geometry ig (n images, c_out output channels) as the
    implicit im2col GEMM on the conv microkernel: wp the weight packed in row
    panels, offs the taps' offsets (rlx_implicit_offsets), ep the epilogue or
    NULL with bias (c_out floats or NULL), direct: the GEMM reads X in place
    (rlx_gemm_conv_implicit_direct) instead of packing it; scratch holds one
    rlx_implicit_slot_floats slot per thread.  Many (image, group) items: each
    thread copies one item's input into its own slot of scratch and runs its
    whole GEMM.  Few: each item in turn, its copy filled by rows over the
    threads into slot 0, then its columns in `split` chunks over the threads.
    Every output element is the same chain of FMAs in any chunk, so the result
    depends on neither split nor nthreads (and equals the explicit patch
    matrix's)."""
    cdef Py_ssize_t groups = ig.groups
    cdef Py_ssize_t cog = c_out // groups
    cdef Py_ssize_t k = (ig.c_in // groups) * ig.k[0] * ig.k[1] * ig.k[2]
    cdef Py_ssize_t p = ig.out[0] * ig.out[1] * ig.out[2]
    cdef Py_ssize_t pf = rlx_gemm_packed_floats(cog, k)
    cdef Py_ssize_t per = rlx_implicit_slot_floats(ig)
    cdef Py_ssize_t items = n * groups
    cdef Py_ssize_t chunks, width, item, ni, gi, row, c, j0, j1, slot
    if _items_mode(items, split):
        for item in prange(items, num_threads=nthreads, schedule='static'):
            work_note(1)
            ni = item // groups
            gi = item % groups
            slot = threadid() * per
            _fill_own_copy(x, ig, ni, gi, scratch, slot)
            _implicit_gemm(direct, &wp[gi * pf], wp.shape[0] - gi * pf, cog, k, &scratch[slot], per, &offs[0], 0,
                           ig, &y[0], y.shape[0], (ni * c_out + gi * cog) * p, p, p,
                           ep, bias + gi * cog if bias != NULL else NULL)
        return 0
    chunks = split if p >= 32 * split else max(1, p // 32)
    width = ((p + chunks - 1) // chunks + RLX_GEMM_NR - 1) // RLX_GEMM_NR * RLX_GEMM_NR
    for item in range(items):
        ni = item // groups
        gi = item % groups
        _fill_shared_copy(x, ig, ni, gi, scratch, split, nthreads)
        for c in prange(chunks, num_threads=nthreads, schedule='static'):
            work_note(1)
            j0 = c * width
            j1 = j0 + width if j0 + width < p else p
            if j0 < j1:
                _implicit_gemm(direct, &wp[gi * pf], wp.shape[0] - gi * pf, cog, k, &scratch[0], per, &offs[0],
                               j0, ig, &y[0], y.shape[0], (ni * c_out + gi * cog) * p + j0, p, j1 - j0,
                               ep, bias + gi * cog if bias != NULL else NULL)
    return 0


# One phase of a transposed conv run by phased_conv_run: a row of `info`.
cdef enum:
    PH_K = 0            # GEMM depth K = C_in/groups x taps
    PH_OFFS = 1         # first of its K tap offsets in offs
    PH_W = 2            # first float of its packed weight (group 0; groups follow every PH_WG floats)
    PH_WG = 3           # packed floats per group
    PH_M0 = 4           # output extents (d, h, w) of the phase
    PH_M1 = 5
    PH_M2 = 6
    PH_Y = 7            # offset of its first output in a y plane
    PH_FIELDS = 8


cdef inline void _phase_gemm(const float[::1] wp, const float* xs, Py_ssize_t xs_len, const Py_ssize_t[::1] offs,
                             const Py_ssize_t[:, ::1] info, Py_ssize_t ph, const ImplicitGeom* ig, float[::1] y,
                             Py_ssize_t n, Py_ssize_t c_out, Py_ssize_t y_plane, const Py_ssize_t* cst,
                             Py_ssize_t ni, Py_ssize_t gi, Py_ssize_t cog, Py_ssize_t j0, Py_ssize_t j1,
                             const ImplicitEpilogue* ep, const float* bias) noexcept nogil:
    """Columns [j0, j1) of phase ph on image ni, group gi."""
    cdef Py_ssize_t w0 = info[ph, PH_W] + gi * info[ph, PH_WG]
    rlx_gemm_conv_implicit_direct(&wp[w0], wp.shape[0] - w0, cog, info[ph, PH_K], xs, xs_len,
                                  &offs[info[ph, PH_OFFS]], j0, info[ph, PH_M2], ig.q[2], info[ph, PH_M1], ig.q[1],
                                  &y[0], y.shape[0], (ni * c_out + gi * cog) * y_plane + info[ph, PH_Y], y_plane,
                                  j1 - j0, ep, bias + gi * cog if bias != NULL else NULL, cst)


cdef inline int phased_conv_run(const float[::1] x, const float[::1] wp, float[::1] y, float[::1] scratch,
                                const Py_ssize_t[::1] offs, const Py_ssize_t[:, ::1] info,
                                const ImplicitGeom* ig, Py_ssize_t n, Py_ssize_t c_out, Py_ssize_t y_plane,
                                const Py_ssize_t* cst, const ImplicitEpilogue* ep, const float* bias, int split,
                                int nthreads) except -1 nogil:
    """The phases (rows of info) of a transposed conv, each a stride-1 forward
    conv read in place from ONE input copy (geometry ig: the input padded
    for every phase; offs shifts each phase's taps to its own padding) by
    rlx_gemm_conv_implicit_direct, writing straight into y at the strides
    cst (no per-phase buffer, no scatter).  ep: bias only, or NULL.  Work:
    many (image, group) items -> each thread copies an item and runs every
    phase on it; few -> per item the copy by row blocks over the threads,
    then column chunks over the threads, each chunk through every phase (the
    phases of a chunk interleave in y, so one thread writes them).  Every
    output is one phase's chain of FMAs, so the result depends on neither
    split nor nthreads."""
    cdef Py_ssize_t groups = ig.groups
    cdef Py_ssize_t cog = c_out // groups
    cdef Py_ssize_t per = rlx_implicit_slot_floats(ig)
    cdef Py_ssize_t nph = info.shape[0]
    cdef Py_ssize_t items = n * groups
    cdef Py_ssize_t pmax = 0
    cdef Py_ssize_t chunks, item, ni, gi, c, ph, slot, npix, j0, j1, width
    for ph in range(nph):
        npix = info[ph, PH_M0] * info[ph, PH_M1] * info[ph, PH_M2]
        if npix > pmax:
            pmax = npix
    if _items_mode(items, split):
        for item in prange(items, num_threads=nthreads, schedule='static'):
            work_note(1)
            ni = item // groups
            gi = item % groups
            slot = threadid() * per
            _fill_own_copy(x, ig, ni, gi, scratch, slot)
            for ph in range(nph):
                _phase_gemm(wp, &scratch[slot], per, offs, info, ph, ig, y, n, c_out, y_plane, cst, ni, gi, cog,
                            0, info[ph, PH_M0] * info[ph, PH_M1] * info[ph, PH_M2], ep, bias)
        return 0
    chunks = split if pmax >= 32 * split else max(1, pmax // 32)
    for item in range(items):
        ni = item // groups
        gi = item % groups
        _fill_shared_copy(x, ig, ni, gi, scratch, split, nthreads)
        for c in prange(chunks, num_threads=nthreads, schedule='static'):
            work_note(1)
            for ph in range(nph):
                npix = info[ph, PH_M0] * info[ph, PH_M1] * info[ph, PH_M2]
                width = ((npix + chunks - 1) // chunks + RLX_GEMM_NR - 1) // RLX_GEMM_NR * RLX_GEMM_NR
                j0 = c * width
                j1 = j0 + width if j0 + width < npix else npix
                if j0 < j1:
                    _phase_gemm(wp, &scratch[0], per, offs, info, ph, ig, y, n, c_out, y_plane, cst, ni, gi, cog,
                                j0, j1, ep, bias)
    return 0
