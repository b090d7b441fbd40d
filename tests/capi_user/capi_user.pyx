# A user's Cython extension against the installed rlx_cpu (tests/test_capi.py
# builds it in a temporary directory): runs a plan and kernels (from a thunk record
# and through the host-convention entries) from nogil loops.
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uintptr_t

from rlx_cpu.capi cimport RlxApi, RlxContext, RlxKernel, rlx_cpu_import


cdef const RlxApi* api = rlx_cpu_import()


def shapes(plan):
    cdef RlxContext* c = api.context_new(<PyObject*>plan)
    cdef int64_t dims[8]
    cdef int i, r
    if c == NULL:
        return None
    ins = []
    for i in range(api.num_inputs(c)):
        r = api.input_shape(c, i, dims, 8)
        ins.append(tuple(dims[k] for k in range(r)))
    outs = []
    for i in range(api.num_outputs(c)):
        r = api.output_shape(c, i, dims, 8)
        outs.append((tuple(dims[k] for k in range(r)), api.output_dtype(c, i)))
    api.context_free(c)
    return ins, outs


def run_loop(plan, x, out, int iterations):
    """Run plan(x) -> out `iterations` times in one nogil loop; returns the
    status and the error message."""
    cdef RlxContext* c = api.context_new(<PyObject*>plan)
    cdef const float* ins[1]
    cdef void* outs[1]
    cdef char msg[256]
    cdef int i, rc = 0
    ins[0] = <const float*><uintptr_t>x.__array_interface__["data"][0]
    outs[0] = <void*><uintptr_t>out.__array_interface__["data"][0]
    with nogil:
        for i in range(iterations):
            rc = api.run(c, ins, outs, 1)
            if rc != 0:
                break
    msg[0] = 0
    if rc != 0:
        api.error_message(msg, sizeof(msg))
    api.context_free(c)
    return rc, msg.decode()


def kernel_loop(thunk, arena, int iterations):
    """Run one kernel over the caller's arena `iterations` times without the GIL."""
    cdef RlxKernel* k = api.kernel_new(<PyObject*>thunk)
    cdef char msg[256]
    cdef char* base
    cdef int i, rc = 0
    msg[0] = 0
    if k == NULL:
        api.error_message(msg, sizeof(msg))
        return -1, msg.decode()
    if arena.nbytes < api.kernel_arena_nbytes(k):
        api.kernel_free(k)
        return -1, "arena too small"
    base = <char*><uintptr_t>arena.__array_interface__["data"][0]
    with nogil:
        for i in range(iterations):
            rc = api.kernel_run(k, base, 1)
            if rc != 0:
                break
    if rc != 0:
        api.error_message(msg, sizeof(msg))
    api.kernel_free(k)
    return rc, msg.decode()


cdef RlxKernel* _spec_kernel(str fn, tuple a) except? NULL:
    """Create a kernel through the table entry `fn`, dims in the entry's order."""
    if fn == "conv2d_forward_f32":
        return api.conv2d_forward_f32(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                                      a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18])
    if fn == "conv3d_forward_f32":
        return api.conv3d_forward_f32(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                                      a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20],
                                      a[21], a[22], a[23], a[24])
    if fn == "conv_transpose2d_nchw_f32":
        return api.conv_transpose2d_nchw_f32(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                                             a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18])
    if fn == "conv_transpose3d_ncdhw_f32":
        return api.conv_transpose3d_ncdhw_f32(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9],
                                              a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                                              a[19], a[20], a[21], a[22], a[23], a[24])
    if fn == "maxpool2d_backward_f32":
        return api.maxpool2d_backward_f32(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                                          a[11], a[12], a[13], a[14])
    if fn == "resize_nearest_2x_f32":
        return api.resize_nearest_2x_f32(a[0], a[1], a[2], a[3], a[4], a[5])
    raise ValueError(f"unknown entry {fn!r}")


def spec_kernel_loop(str fn, tuple args, arenas, int iterations, int nthreads=0, Py_ssize_t base_shift=0):
    """Create one kernel through the table entry `fn` (args: offsets then
    dims), then run it `iterations` times over each arena of `arenas` (uint8
    arrays) inside one nogil loop per arena.  Returns (status, message,
    kernel_arena_nbytes)."""
    cdef RlxKernel* k = _spec_kernel(fn, args)
    cdef char msg[512]
    cdef char* base
    cdef int i, rc = 0
    cdef int64_t need
    msg[0] = 0
    if k == NULL:
        api.error_message(msg, sizeof(msg))
        return -1, msg.decode(), -1
    need = api.kernel_arena_nbytes(k)
    for arena in arenas:
        if arena.nbytes < need + base_shift:
            api.kernel_free(k)
            return -1, "arena too small", need
        base = <char*><uintptr_t>arena.__array_interface__["data"][0] + base_shift
        with nogil:
            for i in range(iterations):
                rc = api.kernel_run(k, base, nthreads)
                if rc != 0:
                    break
        if rc != 0:
            api.error_message(msg, sizeof(msg))
            break
    api.kernel_free(k)
    return rc, msg.decode(), need
