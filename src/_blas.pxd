# Thin row-major BLAS layer over scipy's Fortran sgemm (cython_blas).
#
# Every kernel calls BLAS single-threaded: rlx_cpu owns all parallelism with
# OpenMP, and when one GEMM must use every core (batch 1) it is split into
# column or row panels here, each panel one single-threaded sgemm call.  BLAS
# threads therefore never nest under OpenMP threads.
from scipy.linalg.cython_blas cimport sgemm as _fortran_sgemm, sgemv as _fortran_sgemv
from cython.parallel cimport prange
from rlx_cpu._launch cimport work_note


cdef inline void sgemm_rm(bint trans_a, bint trans_b,
                          int m, int n, int k,
                          float alpha, const float* a, int lda,
                          const float* b, int ldb,
                          float beta, float* c, int ldc) noexcept nogil:
    """C[m,n] := alpha * op(A)[m,k] . op(B)[k,n] + beta * C  (row-major).

    Row-major C is column-major C^T = op(B)^T op(A)^T, so A and B swap places
    in the Fortran call.  K = 0 is handled here (C := beta * C) because some
    BLAS builds reject lda < 1 in that case.
    """
    cdef char ta, tb
    cdef int i, j
    if m <= 0 or n <= 0:
        return
    if k <= 0:
        for i in range(m):
            for j in range(n):
                c[i * ldc + j] = 0.0 if beta == 0.0 else beta * c[i * ldc + j]
        return
    if m == 1 or n == 1:
        # A matrix-vector product (a dense layer at batch 1): OpenBLAS's sgemm
        # packs for it and runs ~10x slower than its sgemv.
        _sgemv_rm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    ta = b'T' if trans_b else b'N'
    tb = b'T' if trans_a else b'N'
    _fortran_sgemm(&ta, &tb, &n, &m, &k, &alpha, <float*>b, &ldb,
                   <float*>a, &lda, &beta, c, &ldc)


cdef inline void _sgemv_rm(bint trans_a, bint trans_b,
                           int m, int n, int k,
                           float alpha, const float* a, int lda,
                           const float* b, int ldb,
                           float beta, float* c, int ldc) noexcept nogil:
    """sgemm_rm for m == 1 or n == 1 (k >= 1) through sgemv.  With beta == 0
    C is zeroed first, so stale NaNs in C never leak through BLAS's y *= 0."""
    cdef char tr
    cdef int rows, cols, incx, incy, i
    cdef float zero_beta = 0.0
    cdef const float* mat
    cdef const float* vec
    if m == 1:
        # c[0, :] (n, stride 1) = op(B)^T-as-column-major . a-row
        mat, vec, incy = b, a, 1
        incx = lda if trans_a else 1
        if trans_b:     # B stored [n, k]: column-major [k, n]
            tr, rows, cols = b'T', k, n
        else:           # B stored [k, n]: column-major [n, k]
            tr, rows, cols = b'N', n, k
        if beta == 0.0:
            for i in range(n):
                c[i] = 0.0
        _fortran_sgemv(&tr, &rows, &cols, &alpha, <float*>mat, &ldb, <float*>vec, &incx,
                       &beta if beta != 0.0 else &zero_beta, c, &incy)
        return
    # n == 1: c[:, 0] (m, stride ldc) = op(A) . b-column
    mat, vec, incy = a, b, ldc
    incx = 1 if trans_b else ldb
    if trans_a:         # A stored [k, m]: column-major [m, k]
        tr, rows, cols = b'N', m, k
    else:               # A stored [m, k]: column-major [k, m]
        tr, rows, cols = b'T', k, m
    if beta == 0.0:
        for i in range(m):
            c[i * ldc] = 0.0
    _fortran_sgemv(&tr, &rows, &cols, &alpha, <float*>mat, &lda, <float*>vec, &incx,
                   &beta if beta != 0.0 else &zero_beta, c, &incy)


cdef inline int _panel(int total, int parts, int align) noexcept nogil:
    """Width of one of `parts` panels covering `total`, rounded up to `align`."""
    cdef int w = (total + parts - 1) // parts
    w = ((w + align - 1) // align) * align
    return w if w > 0 else 1


cdef inline void sgemm_rm_split(bint trans_a, bint trans_b,
                                int m, int n, int k,
                                float alpha, const float* a, int lda,
                                const float* b, int ldb,
                                float beta, float* c, int ldc,
                                int split, int nthreads) noexcept nogil:
    """Same contract as sgemm_rm, with the output split into `split` panels
    (columns when n >= m, else rows) computed in parallel by `nthreads`
    threads.  Each panel is an independent single-threaded sgemm, so the
    result depends on `split` only: callers pass the thread count the launch
    was bound for as `split` and the run's team size as `nthreads`, and a run
    on fewer threads gives the same bits."""
    cdef int p, lo, hi, width, parts
    if split <= 1 or (m < 32 and n < 32):
        sgemm_rm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
        return
    if n >= m:
        width = _panel(n, split, 16)
        parts = (n + width - 1) // width
        for p in prange(parts, num_threads=nthreads, schedule='static'):
            work_note(1)
            lo = p * width
            hi = lo + width
            if hi > n:
                hi = n
            sgemm_rm(trans_a, trans_b, m, hi - lo, k, alpha, a, lda,
                     (b + lo * ldb) if trans_b else (b + lo), ldb,
                     beta, c + lo, ldc)
    else:
        width = _panel(m, split, 4)
        parts = (m + width - 1) // width
        for p in prange(parts, num_threads=nthreads, schedule='static'):
            work_note(1)
            lo = p * width
            hi = lo + width
            if hi > m:
                hi = m
            sgemm_rm(trans_a, trans_b, hi - lo, n, k, alpha,
                     (a + lo) if trans_a else (a + lo * lda), lda,
                     b, ldb, beta, c + lo * ldc, ldc)
