# Per-channel bias epilogues shared by the convolution kernel families.
from libc.string cimport memset


cdef inline int add_bias_planes(float[::1] y, Py_ssize_t y_off, const float[::1] bias,
                                Py_ssize_t c0, Py_ssize_t nch, Py_ssize_t plane) except -1 nogil:
    """y[c, :] += bias[c0 + c] for nch consecutive planes starting at y_off."""
    cdef Py_ssize_t c, i, base
    cdef float b
    for c in range(nch):
        b = bias[c0 + c]
        base = y_off + c * plane
        for i in range(plane):
            y[base + i] += b
    return 0


cdef inline int fill_bias_planes(float[::1] y, Py_ssize_t y_off, const float[::1] bias, bint has_bias,
                                 Py_ssize_t c0, Py_ssize_t nch, Py_ssize_t plane) except -1 nogil:
    """y[c, :] = bias[c0 + c] (or 0 without bias) for nch consecutive planes."""
    cdef Py_ssize_t c, i, base
    cdef float b
    for c in range(nch):
        base = y_off + c * plane
        if not has_bias:
            memset(&y[base], 0, plane * sizeof(float))
            continue
        b = bias[c0 + c]
        for i in range(plane):
            y[base + i] = b
    return 0
