# Cython declarations of rlx_cpu's C API (see include/rlx_cpu.h for the
# pointer/size contract).  Build with include_dirs=[rlx_cpu.get_include()]:
#
#     from rlx_cpu.capi cimport RlxApi, RlxContext, rlx_cpu_import
#     cdef const RlxApi* api = rlx_cpu_import()          # with the GIL, once
#     cdef RlxContext* ctx = api.context_new(<PyObject*>plan)
#     with nogil:
#         for i in range(k):
#             if api.run(ctx, inputs, outputs, 1) != 0: ...
#     api.context_free(ctx)
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

cdef extern from "rlx_cpu.h":
    ctypedef struct RlxContext
    ctypedef struct RlxKernel
    enum:
        RLX_CPU_ABI_VERSION
        RLX_FLOAT32
        RLX_INT64

    ctypedef struct RlxApi:
        int abi_version
        RlxContext* (*context_new)(PyObject* plan) noexcept nogil
        void (*context_free)(RlxContext* ctx) noexcept nogil
        int (*num_inputs)(const RlxContext* ctx) noexcept nogil
        int (*num_outputs)(const RlxContext* ctx) noexcept nogil
        int (*input_shape)(const RlxContext* ctx, int i, int64_t* dims, int max_dims) noexcept nogil
        int (*output_shape)(const RlxContext* ctx, int j, int64_t* dims, int max_dims) noexcept nogil
        int (*output_dtype)(const RlxContext* ctx, int j) noexcept nogil
        int (*run)(RlxContext* ctx, const float* const* inputs, void* const* outputs, int nthreads) noexcept nogil
        RlxKernel* (*kernel_new)(PyObject* thunk) noexcept nogil
        void (*kernel_free)(RlxKernel* k) noexcept nogil
        int64_t (*kernel_arena_nbytes)(const RlxKernel* k) noexcept nogil
        int (*kernel_run)(RlxKernel* k, char* base, int nthreads) noexcept nogil
        void (*error_message)(char* buf, size_t size) noexcept nogil

    const RlxApi* rlx_cpu_import() except NULL
