# rlx_cpu's C API: the function table behind include/rlx_cpu.h, exported as
# the PyCapsule rlx_cpu._capi._C_API, plus the nogil benchmark loop built on it.
#
# A context (RlxContext) is a C struct owned by a _CContext object: the struct
# holds what a run needs without the GIL (the last bound pointers, the launch
# pointers, the post-run copies as memcpy triples); the object holds the
# Python side (the plan's RunContext, which does all validation and binding).
# A run whose pointers equal the previous ones loops over the launches
# without touching Python; new pointers take the GIL once to re-bind.
from cpython.pycapsule cimport PyCapsule_New
from cpython.exc cimport PyErr_Fetch, PyErr_NormalizeException
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF, Py_XDECREF
from libc.stdint cimport int64_t, uint32_t, uintptr_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy, strncpy

import threading
import time

import numpy as np

from rlx_cpu._launch cimport Launch, process_threads
from _adaptive cimport Chooser, chooser_begin, chooser_end, chooser_init
from rlx_cpu.capi cimport RlxApi, RlxContext, RlxKernel, RLX_CPU_ABI_VERSION

cdef enum:
    MAX_RANK = 8

ctypedef int (*raw_run_t)(void* st, int nthreads) noexcept nogil

_errors = threading.local()


cdef void _store_error(e) noexcept:
    _errors.message = f"{type(e).__name__}: {e}".encode("utf-8", "replace")


cdef void _store_pending_error() noexcept with gil:
    # The Python error a failed launch left set: store its message, clear it.
    cdef PyObject* t = NULL
    cdef PyObject* v = NULL
    cdef PyObject* tb = NULL
    PyErr_Fetch(&t, &v, &tb)
    PyErr_NormalizeException(&t, &v, &tb)
    _store_error(<object>v if v != NULL else RuntimeError("kernel failed"))
    Py_XDECREF(t)
    Py_XDECREF(v)
    Py_XDECREF(tb)


ctypedef struct Launches:
    Py_ssize_t n
    PyObject** ptrs        # borrowed: the owner object keeps the launches
    char* typed


cdef int _run_launches(Launches* ls, int nthreads) except -1 nogil:
    cdef Py_ssize_t i
    for i in range(ls.n):
        if ls.typed[i]:
            (<Launch>ls.ptrs[i]).run(nthreads)
        else:
            with gil:
                (<object>ls.ptrs[i]).execute(nthreads)
    return 0


cdef int _run_launches_raw(void* ls, int nthreads) noexcept nogil:
    # _run_launches seen as a plain C function: -1 leaves the Python error set
    # for the caller to store (a noexcept nogil caller cannot catch it).
    return (<raw_run_t>_run_launches)(ls, nthreads)


cdef int _fill_launches(Launches* ls, list launches) except -1:
    cdef Py_ssize_t i, n = len(launches)
    free(ls.ptrs)
    free(ls.typed)
    ls.ptrs = <PyObject**>calloc(max(n, 1), sizeof(PyObject*))
    ls.typed = <char*>calloc(max(n, 1), 1)
    if ls.ptrs == NULL or ls.typed == NULL:
        raise MemoryError()
    for i in range(n):
        ls.ptrs[i] = <PyObject*>launches[i]
        ls.typed[i] = isinstance(launches[i], Launch)
    ls.n = n
    return 0


ctypedef struct CtxState:
    PyObject* owner            # the _CContext (strong reference, dropped by context_free)
    int n_in, n_out, default_threads, bound
    bint adaptive              # the plan's adaptive_threads (src/_adaptive.pxd)
    Chooser chooser
    int64_t* in_dims           # [n_in * MAX_RANK]
    int64_t* out_dims
    int* in_rank
    int* out_rank
    int* out_dtype
    Py_ssize_t* in_nbytes
    Py_ssize_t* out_nbytes
    Py_ssize_t* out_itemsize
    const void** in_ptrs       # pointers of the last run
    void** out_ptrs
    Launches launches
    Py_ssize_t n_fix
    char** fix_dst
    char** fix_src
    Py_ssize_t* fix_nbytes


cdef uintptr_t _addr(a):
    return <uintptr_t>a.__array_interface__["data"][0]


cdef class _CContext:
    cdef CtxState st
    cdef object plan, ctx, keep

    def __cinit__(self, plan):
        from rlx_cpu.plan import Plan
        if not isinstance(plan, Plan):
            raise TypeError(f"context_new: expected a rlx_cpu.Plan, got {type(plan).__name__}")
        self.plan = plan
        self.ctx = plan.new_context()
        self.ctx.copy_small_churn = False       # C callers' buffers are always bound in place
        cdef CtxState* st = &self.st
        st.n_in, st.n_out = len(plan.input_names), len(plan.output_shapes)
        st.default_threads = plan.num_threads
        st.adaptive = plan.adaptive_threads
        chooser_init(&st.chooser, 0)
        n_in, n_out = max(st.n_in, 1), max(st.n_out, 1)
        st.in_dims = <int64_t*>calloc(n_in * MAX_RANK, sizeof(int64_t))
        st.out_dims = <int64_t*>calloc(n_out * MAX_RANK, sizeof(int64_t))
        st.in_rank = <int*>calloc(n_in, sizeof(int))
        st.out_rank = <int*>calloc(n_out, sizeof(int))
        st.out_dtype = <int*>calloc(n_out, sizeof(int))
        st.in_nbytes = <Py_ssize_t*>calloc(n_in, sizeof(Py_ssize_t))
        st.out_nbytes = <Py_ssize_t*>calloc(n_out, sizeof(Py_ssize_t))
        st.out_itemsize = <Py_ssize_t*>calloc(n_out, sizeof(Py_ssize_t))
        st.in_ptrs = <const void**>calloc(n_in, sizeof(void*))
        st.out_ptrs = <void**>calloc(n_out, sizeof(void*))
        if (st.in_dims == NULL or st.out_dims == NULL or st.in_rank == NULL or st.out_rank == NULL
                or st.out_dtype == NULL or st.in_nbytes == NULL or st.out_nbytes == NULL
                or st.out_itemsize == NULL or st.in_ptrs == NULL or st.out_ptrs == NULL):
            raise MemoryError()
        for i, name in enumerate(plan.input_names):
            shape = plan.input_shapes[name]
            if len(shape) > MAX_RANK:
                raise ValueError(f"context_new: input {name!r} has rank {len(shape)} > {MAX_RANK}")
            st.in_rank[i] = len(shape)
            for k, d in enumerate(shape):
                st.in_dims[i * MAX_RANK + k] = d
            st.in_nbytes[i] = int(np.prod(shape, dtype=np.int64)) * 4
        for j, (shape, dtype) in enumerate(zip(plan.output_shapes, plan.output_dtypes)):
            if len(shape) > MAX_RANK:
                raise ValueError(f"context_new: output {j} has rank {len(shape)} > {MAX_RANK}")
            st.out_rank[j] = len(shape)
            for k, d in enumerate(shape):
                st.out_dims[j * MAX_RANK + k] = d
            st.out_itemsize[j] = np.dtype(dtype).itemsize
            st.out_dtype[j] = 1 if dtype == "int64" else 0
            st.out_nbytes[j] = int(np.prod(shape, dtype=np.int64)) * st.out_itemsize[j]
        st.bound = 0

    def __dealloc__(self):
        cdef CtxState* st = &self.st
        free(st.in_dims); free(st.out_dims); free(st.in_rank); free(st.out_rank); free(st.out_dtype)
        free(st.in_nbytes); free(st.out_nbytes); free(st.out_itemsize)
        free(st.in_ptrs); free(st.out_ptrs)
        free(st.launches.ptrs); free(st.launches.typed)
        free(st.fix_dst); free(st.fix_src); free(st.fix_nbytes)

    cdef int rebind(self, const float* const* inputs, void* const* outputs) except -1:
        """Bind the RunContext to arrays over the caller's pointers."""
        cdef CtxState* st = &self.st
        cdef Py_ssize_t i, j, k
        plan = self.plan
        st.bound = 0
        feeds = {}
        for i, name in enumerate(plan.input_names):
            if inputs[i] == NULL or (<uintptr_t>inputs[i]) % 4:
                raise ValueError(f"run: input {i} ({name!r}) pointer is NULL or not 4-byte aligned")
            mem = np.asarray(<char[:st.in_nbytes[i]]><char*>inputs[i])
            arr = mem.view(np.float32).reshape(plan.input_shapes[name])
            arr.setflags(write=False)
            feeds[name] = arr
        outs = []
        for j, (shape, dtype) in enumerate(zip(plan.output_shapes, plan.output_dtypes)):
            if outputs[j] == NULL or (<uintptr_t>outputs[j]) % st.out_itemsize[j]:
                raise ValueError(f"run: output {j} pointer is NULL or not {st.out_itemsize[j]}-byte aligned")
            mem = np.asarray(<char[:st.out_nbytes[j]]><char*>outputs[j])
            outs.append(mem.view(dtype).reshape(shape))
        ctx = self.ctx
        ctx._bind(feeds, outs, "run")
        if ctx._staged:
            raise RuntimeError("run: an input was staged; C callers' inputs must be bound in place")
        _fill_launches(&st.launches, ctx.launches)
        fix = ctx._fixups
        free(st.fix_dst); free(st.fix_src); free(st.fix_nbytes)
        st.fix_dst = <char**>calloc(max(len(fix), 1), sizeof(char*))
        st.fix_src = <char**>calloc(max(len(fix), 1), sizeof(char*))
        st.fix_nbytes = <Py_ssize_t*>calloc(max(len(fix), 1), sizeof(Py_ssize_t))
        if st.fix_dst == NULL or st.fix_src == NULL or st.fix_nbytes == NULL:
            raise MemoryError()
        for k, (d, s) in enumerate(fix):
            st.fix_dst[k] = <char*>_addr(d)
            st.fix_src[k] = <char*>_addr(s)
            st.fix_nbytes[k] = d.nbytes
        st.n_fix = len(fix)
        for i in range(st.n_in):
            st.in_ptrs[i] = inputs[i]
        for j in range(st.n_out):
            st.out_ptrs[j] = outputs[j]
        self.keep = (feeds, outs)
        st.bound = 1
        return 0


# -- the table's functions ------------------------------------------------------

cdef RlxContext* c_context_new(PyObject* plan) noexcept nogil:
    with gil:
        try:
            obj = _CContext(<object>plan)
        except BaseException as e:
            _store_error(e)
            return NULL
        Py_INCREF(obj)
        (<_CContext>obj).st.owner = <PyObject*>obj
        return <RlxContext*>&(<_CContext>obj).st


cdef void c_context_free(RlxContext* c) noexcept nogil:
    if c != NULL:
        with gil:
            Py_DECREF(<object>(<CtxState*>c).owner)


cdef int c_num_inputs(const RlxContext* c) noexcept nogil:
    return (<const CtxState*>c).n_in


cdef int c_num_outputs(const RlxContext* c) noexcept nogil:
    return (<const CtxState*>c).n_out


cdef int _shape(int n, const int* rank, const int64_t* dims, int i, int64_t* out, int max_dims) noexcept nogil:
    cdef int k
    if i < 0 or i >= n:
        return -1
    for k in range(min(rank[i], max_dims)):
        out[k] = dims[i * MAX_RANK + k]
    return rank[i]


cdef int c_input_shape(const RlxContext* c, int i, int64_t* dims, int max_dims) noexcept nogil:
    cdef const CtxState* st = <const CtxState*>c
    return _shape(st.n_in, st.in_rank, st.in_dims, i, dims, max_dims)


cdef int c_output_shape(const RlxContext* c, int j, int64_t* dims, int max_dims) noexcept nogil:
    cdef const CtxState* st = <const CtxState*>c
    return _shape(st.n_out, st.out_rank, st.out_dims, j, dims, max_dims)


cdef int c_output_dtype(const RlxContext* c, int j) noexcept nogil:
    cdef const CtxState* st = <const CtxState*>c
    return st.out_dtype[j] if 0 <= j < st.n_out else -1


cdef int c_run(RlxContext* c, const float* const* inputs, void* const* outputs, int nthreads) noexcept nogil:
    cdef CtxState* st = <CtxState*>c
    cdef int i
    cdef bint same = st.bound
    if same:
        for i in range(st.n_in):
            if st.in_ptrs[i] != <const void*>inputs[i]:
                same = False
                break
    if same:
        for i in range(st.n_out):
            if st.out_ptrs[i] != outputs[i]:
                same = False
                break
    if not same:
        with gil:
            try:
                (<_CContext>st.owner).rebind(inputs, outputs)
            except BaseException as e:
                _store_error(e)
                return -1
    # as LaunchSequence.run: one thread in a forked child, and the adaptive
    # thread count when the plan has it
    nthreads = process_threads(nthreads if nthreads > 0 else st.default_threads)
    cdef bint choose = st.adaptive and nthreads > 1
    cdef int opt = 0
    cdef double t0 = 0
    if choose:
        nthreads = chooser_begin(&st.chooser, nthreads, &opt, &t0)
    if _run_launches_raw(&st.launches, nthreads) != 0:
        _store_pending_error()
        return -1
    if choose:
        chooser_end(&st.chooser, opt, t0)
    for i in range(st.n_fix):
        memcpy(st.fix_dst[i], st.fix_src[i], st.fix_nbytes[i])
    return 0


ctypedef struct KernelState:
    PyObject* owner
    int64_t arena_nbytes
    char* base
    int default_threads
    Launches launches
    # Entries with the host calling convention (_CSpecKernel): a one-op
    # plan's context whose inputs and output are bound at base + offset.
    # NULL for thunk-record kernels (_CKernel).
    CtxState* plan_ctx
    int n_in
    int64_t in_off[2]
    int64_t out_off
    const float* in_ptrs[2]
    void* out_ptrs[1]


cdef class _CKernel:
    cdef KernelState st
    cdef object thunk, launch

    def __cinit__(self, thunk):
        from rlx_cpu.thunks import Thunk
        if not isinstance(thunk, Thunk):
            raise TypeError(f"kernel_new: expected a thunk record, got {type(thunk).__name__}")
        end = 0
        for s in thunk.slices():
            if s.segment != "arena":
                raise ValueError(f"kernel_new: every slice of {thunk.kind} must be in the caller's arena "
                                 f"(segment 'arena'), got {s!r}")
            if s.offset % 4:
                raise ValueError(f"kernel_new: slice {s!r} is not 4-byte aligned")
            end = max(end, s.offset + s.nbytes)
        self.thunk = thunk
        self.st.arena_nbytes = end
        self.st.base = NULL
        self.st.default_threads = max(1, getattr(thunk, "max_threads", 1) or 1)

    def __dealloc__(self):
        free(self.st.launches.ptrs)
        free(self.st.launches.typed)

    cdef int rebind(self, char* base) except -1:
        if base == NULL or (<uintptr_t>base) % 4:
            raise ValueError("kernel_run: arena base is NULL or not 4-byte aligned")
        mem = np.asarray(<char[:self.st.arena_nbytes]>base) if self.st.arena_nbytes else np.zeros(0, np.uint8)

        def view(s):
            return mem[s.offset:s.offset + s.nbytes].view(np.float32)
        self.launch = self.thunk.bind(view)
        _fill_launches(&self.st.launches, [self.launch])
        self.st.base = base
        return 0


cdef RlxKernel* c_kernel_new(PyObject* thunk) noexcept nogil:
    with gil:
        try:
            obj = _CKernel(<object>thunk)
        except BaseException as e:
            _store_error(e)
            return NULL
        Py_INCREF(obj)
        (<_CKernel>obj).st.owner = <PyObject*>obj
        return <RlxKernel*>&(<_CKernel>obj).st


cdef void c_kernel_free(RlxKernel* k) noexcept nogil:
    if k != NULL:
        with gil:
            Py_DECREF(<object>(<KernelState*>k).owner)


cdef int64_t c_kernel_arena_nbytes(const RlxKernel* k) noexcept nogil:
    return (<const KernelState*>k).arena_nbytes


cdef int c_kernel_run(RlxKernel* k, char* base, int nthreads) noexcept nogil:
    cdef KernelState* st = <KernelState*>k
    cdef int i
    if st.plan_ctx != NULL:
        if base == NULL or (<uintptr_t>base) % 4:
            with gil:
                addr = <uintptr_t>base
                _store_error(ValueError(f"kernel_run: arena base {addr:#x} is NULL or not 4-byte aligned"))
            return -1
        if base != st.base:
            for i in range(st.n_in):
                st.in_ptrs[i] = <const float*>(base + st.in_off[i])
            st.out_ptrs[0] = <void*>(base + st.out_off)
            st.base = base
        # c_run re-binds (with the GIL) only when these pointers changed.
        return c_run(<RlxContext*>st.plan_ctx, st.in_ptrs, st.out_ptrs, nthreads)
    if base != st.base:
        with gil:
            try:
                (<_CKernel>st.owner).rebind(base)
            except BaseException as e:
                _store_error(e)
                return -1
    if _run_launches_raw(&st.launches, process_threads(nthreads if nthreads > 0 else st.default_threads)) != 0:
        _store_pending_error()
        return -1
    return 0


cdef class _CSpecKernel:
    """A kernel called with the host convention (operands at byte offsets of
    the caller's arena, integer dims): a one-op plan compiled from those dims
    (rlx_cpu.capi_kernels), run through a _CContext bound at base + offset."""
    cdef KernelState st
    cdef object cctx

    def __cinit__(self, fn, args):
        from rlx_cpu.capi_kernels import spec_plan
        plan, in_off, out_off, nbytes = spec_plan(fn, args)
        cctx = _CContext(plan)
        # borrowed: this object keeps the context alive
        (<_CContext>cctx).st.owner = <PyObject*>cctx
        self.cctx = cctx
        self.st.plan_ctx = &(<_CContext>cctx).st
        names = plan.input_names
        if len(names) > 2 or len(plan.output_shapes) != 1:
            raise AssertionError(f"{fn}: plan has {len(names)} inputs, {len(plan.output_shapes)} outputs")
        self.st.n_in = len(names)
        for i, name in enumerate(names):
            self.st.in_off[i] = in_off[name]
        self.st.out_off = out_off
        self.st.arena_nbytes = nbytes
        self.st.base = NULL
        self.st.default_threads = plan.num_threads


cdef RlxKernel* _spec_new(str fn, tuple args) noexcept:
    try:
        obj = _CSpecKernel(fn, args)
    except BaseException as e:
        _store_error(e)
        return NULL
    Py_INCREF(obj)
    (<_CSpecKernel>obj).st.owner = <PyObject*>obj
    return <RlxKernel*>&(<_CSpecKernel>obj).st


cdef RlxKernel* c_conv2d_forward_f32(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w,
        uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
        uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil:
    with gil:
        return _spec_new("conv2d_forward_f32", (src, weight, dst, n, c_in, h, w, c_out, h_out, w_out,
                                                kh, kw, sh, sw, ph, pw, dh, dw, groups))


cdef RlxKernel* c_conv3d_forward_f32(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
        uint32_t w, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd, uint32_t kh,
        uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph, uint32_t pw, uint32_t dd,
        uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil:
    with gil:
        return _spec_new("conv3d_forward_f32", (src, weight, dst, n, c_in, d, h, w, c_out, d_out, h_out, w_out,
                                                kd, kh, kw, sd, sh, sw, pd, ph, pw, dd, dh, dw, groups))


cdef RlxKernel* c_conv_transpose2d_nchw_f32(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w_in,
        uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
        uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil:
    with gil:
        return _spec_new("conv_transpose2d_nchw_f32", (src, weight, dst, n, c_in, h, w_in, c_out, h_out, w_out,
                                                       kh, kw, sh, sw, ph, pw, dh, dw, groups))


cdef RlxKernel* c_conv_transpose3d_ncdhw_f32(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
        uint32_t w_in, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd,
        uint32_t kh, uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph, uint32_t pw,
        uint32_t dd, uint32_t dh, uint32_t dw, uint32_t groups) noexcept nogil:
    with gil:
        return _spec_new("conv_transpose3d_ncdhw_f32", (src, weight, dst, n, c_in, d, h, w_in, c_out, d_out,
                                                        h_out, w_out, kd, kh, kw, sd, sh, sw, pd, ph, pw,
                                                        dd, dh, dw, groups))


cdef RlxKernel* c_maxpool2d_backward_f32(
        int64_t x, int64_t dy, int64_t dx, uint32_t n, uint32_t c, uint32_t h, uint32_t w, uint32_t h_out,
        uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t ph,
        uint32_t pw) noexcept nogil:
    with gil:
        return _spec_new("maxpool2d_backward_f32", (x, dy, dx, n, c, h, w, h_out, w_out, kh, kw, sh, sw, ph, pw))


cdef RlxKernel* c_resize_nearest_2x_f32(int64_t src, int64_t dst, uint32_t n, uint32_t c, uint32_t h,
                                        uint32_t w) noexcept nogil:
    with gil:
        return _spec_new("resize_nearest_2x_f32", (src, dst, n, c, h, w))


cdef void c_error_message(char* buf, size_t size) noexcept nogil:
    if buf == NULL or size == 0:
        return
    with gil:
        msg = getattr(_errors, "message", b"")
        strncpy(buf, <const char*>msg, size - 1)
        buf[size - 1] = 0


cdef RlxApi _api
_api.abi_version = RLX_CPU_ABI_VERSION
_api.context_new = c_context_new
_api.context_free = c_context_free
_api.num_inputs = c_num_inputs
_api.num_outputs = c_num_outputs
_api.input_shape = c_input_shape
_api.output_shape = c_output_shape
_api.output_dtype = c_output_dtype
_api.run = c_run
_api.kernel_new = c_kernel_new
_api.kernel_free = c_kernel_free
_api.kernel_arena_nbytes = c_kernel_arena_nbytes
_api.kernel_run = c_kernel_run
_api.error_message = c_error_message
_api.conv2d_forward_f32 = c_conv2d_forward_f32
_api.conv3d_forward_f32 = c_conv3d_forward_f32
_api.conv_transpose2d_nchw_f32 = c_conv_transpose2d_nchw_f32
_api.conv_transpose3d_ncdhw_f32 = c_conv_transpose3d_ncdhw_f32
_api.maxpool2d_backward_f32 = c_maxpool2d_backward_f32
_api.resize_nearest_2x_f32 = c_resize_nearest_2x_f32

_C_API = PyCapsule_New(<void*>&_api, "rlx_cpu._capi._C_API", NULL)


# -- Python helpers -------------------------------------------------------------

def bench_nogil(plan, feeds, int iterations, int nthreads=0):
    """Run `plan` `iterations` times through the C API inside one nogil call
    (same buffers every time, as a C host would) and return nanoseconds per
    iteration.  feeds: {name: array}; the inputs are converted to C-contiguous
    float32 first, outputs are fresh arrays."""
    if iterations < 1:
        raise ValueError(f"bench_nogil: iterations must be >= 1, got {iterations}")
    ins = [np.ascontiguousarray(feeds[n], dtype=np.float32) for n in plan.input_names]
    outs = [np.empty(s, d) for s, d in zip(plan.output_shapes, plan.output_dtypes)]
    cdef RlxContext* c = c_context_new(<PyObject*>plan)
    if c == NULL:
        raise RuntimeError(getattr(_errors, "message", b"").decode())
    cdef const float** ip = <const float**>calloc(max(len(ins), 1), sizeof(float*))
    cdef void** op = <void**>calloc(max(len(outs), 1), sizeof(void*))
    cdef int i, rc = 0
    try:
        for i in range(len(ins)):
            ip[i] = <const float*><uintptr_t>_addr(ins[i])
        for i in range(len(outs)):
            op[i] = <void*><uintptr_t>_addr(outs[i])
        rc = c_run(c, ip, op, nthreads)            # binds once (takes the GIL)
        if rc:
            raise RuntimeError(getattr(_errors, "message", b"").decode())
        t0 = time.perf_counter_ns()
        with nogil:
            for i in range(iterations):
                rc = c_run(c, ip, op, nthreads)
                if rc:
                    break
        t1 = time.perf_counter_ns()
        if rc:
            raise RuntimeError(getattr(_errors, "message", b"").decode())
        return (t1 - t0) / iterations
    finally:
        free(ip)
        free(op)
        c_context_free(c)
