# A user's Cython extension against the installed rlx_cpu (tests/test_capi.py
# builds it in a temporary directory): runs a plan and a kernel from nogil loops.
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
