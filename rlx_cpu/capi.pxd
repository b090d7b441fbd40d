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
#
# One kernel over the caller's arena (operands at byte offsets, see rlx_cpu.h):
#
#     cdef RlxKernel* k = api.conv2d_forward_f32(src, weight, dst, n, c_in, ...)
#     with nogil:
#         rc = api.kernel_run(k, base, 1)
#     api.kernel_free(k)
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t, uint32_t

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
        # ABI 2: kernels with the host calling convention (byte offsets, dims)
        RlxKernel* (*conv2d_forward_f32)(
            int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w,
            uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
            uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil
        RlxKernel* (*conv3d_forward_f32)(
            int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
            uint32_t w, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd, uint32_t kh,
            uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph, uint32_t pw,
            uint32_t dd, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil
        RlxKernel* (*conv_transpose2d_nchw_f32)(
            int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w_in,
            uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
            uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil
        RlxKernel* (*conv_transpose3d_ncdhw_f32)(
            int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
            uint32_t w_in, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd,
            uint32_t kh, uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph,
            uint32_t pw, uint32_t dd, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil
        RlxKernel* (*maxpool2d_backward_f32)(
            int64_t x, int64_t dy, int64_t dx, uint32_t n, uint32_t c, uint32_t h, uint32_t w, uint32_t h_out,
            uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t ph,
            uint32_t pw) noexcept nogil
        RlxKernel* (*resize_nearest_2x_f32)(
            int64_t src, int64_t dst, uint32_t n, uint32_t c, uint32_t h, uint32_t w) noexcept nogil

    const RlxApi* rlx_cpu_import() except NULL
