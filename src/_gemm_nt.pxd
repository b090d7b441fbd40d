# The dense layer's few-row GEMM y = alpha a b^T (rlx_gemm_nt.h), split in
# parts of whole 4-column blocks over threads: part p of
# rlx_gemm_nt_parts(n, threads) covers its own run of columns, and every
# element is the same sum at any split.
cdef extern from "rlx_gemm_nt.h":
    Py_ssize_t rlx_gemm_nt_parts(Py_ssize_t n, Py_ssize_t t) nogil
    void rlx_gemm_nt_part(const float* a, Py_ssize_t a_len, Py_ssize_t lda, const float* b, Py_ssize_t b_len,
                          Py_ssize_t ldb, float* y, Py_ssize_t y_len, Py_ssize_t ldy, Py_ssize_t m, Py_ssize_t n,
                          Py_ssize_t k, Py_ssize_t part, Py_ssize_t parts, float alpha) nogil
