/* rlx_cpu C API: run compiled rlx_cpu plans and kernels from C, C++ or Cython.
 *
 * The functions are reached through a table exported by the extension module
 * rlx_cpu._capi as the PyCapsule "rlx_cpu._capi._C_API" (as numpy's C API is):
 *
 *     const RlxApi *api = rlx_cpu_import();      // GIL held; NULL + Python error on failure
 *
 * Plans are compiled from Python (rlx_cpu.compile, rlx_cpu.import_onnx); a C
 * host running an embedded interpreter builds one there and passes the Plan
 * object to api->context_new.
 *
 * Contract
 * --------
 * Ownership.  A context (RlxContext) is created by context_new and owned by
 * the caller until context_free.  It holds a reference to its plan and its
 * own arena.  Input and output buffers are owned by the caller: rlx_cpu never
 * frees them, never writes an input, and writes an output only during run.
 * A context keeps using the last buffers it was given until the next run
 * with different pointers (they must stay valid, or be replaced, until then).
 * Inputs are float32, outputs float32 (int64 for index outputs: see
 * output_dtype), C-contiguous, with exactly the element counts of the plan's
 * shapes (input_shape / output_shape).  Outputs must not overlap an input or
 * each other (run fails with an error otherwise).
 * Alignment.  Every buffer must be aligned to its element size (4 bytes for
 * float32, 8 for int64); run fails on a misaligned pointer.  Kernels need no
 * more; 64-byte alignment is allowed but not required.
 * Threads.  A context is not thread-safe: use one per calling thread (a plan
 * may back any number of contexts at once).  run and kernel_run may be
 * called without the GIL: when the pointers equal those of the previous call
 * on this context they run without touching Python at all; new pointers make
 * them take the GIL once to re-bind.  context_new, context_free, kernel_new,
 * the kernel entries of ABI 2, kernel_free and rlx_cpu_import take the GIL
 * themselves (or need it held, for rlx_cpu_import).  nthreads is the OpenMP
 * thread count of the kernels (<= 0: the plan's own setting).
 * Errors.  Functions return 0 (or a valid pointer / count) on success and -1
 * (or NULL) on failure; the message of the calling thread's last failure is
 * copied by error_message.
 *
 * Kernels with the host calling convention (ABI 2)
 * ------------------------------------------------
 * conv2d_forward_f32 ... resize_nearest_2x_f32 create one kernel from byte
 * offsets into a caller arena and integer dims, in the argument order of the
 * conv-family interpreter's execute_*_f32 host functions (the arena base
 * pointer, their last argument, is passed to kernel_run instead):
 *
 *     RlxKernel *k = api->conv2d_forward_f32(src, weight, dst, n, c_in, h, w, c_out,
 *                                            h_out, w_out, kh, kw, sh, sw, ph, pw,
 *                                            dh, dw, groups);
 *     rc = api->kernel_run(k, base, nthreads);   // any number of times, no GIL
 *     api->kernel_free(k);
 *
 * Operands.  Every operand is float32, C-contiguous (NCHW / NCDHW), starting
 * at base + its byte offset.  Conv weights are [C_out, C_in/groups, k...];
 * conv-transpose weights [C_in, C_out/groups, k...].  maxpool2d_backward
 * reads x and dy and writes dx (= [n, c, h, w]; each window's dy goes to its
 * first maximum in window order, or its last NaN; overlapping windows add;
 * padded taps are never read); resize_nearest_2x writes
 * [n, c, 2h, 2w].  The kernel writes only the output operand's bytes (the
 * whole of them) and reads only its input operands' bytes; scratch lives in
 * the kernel object's own memory.  kernel_arena_nbytes is the end of the
 * last operand (max offset + size): the caller's arena must have at least
 * that many bytes, stay valid during kernel_run, and is never freed by
 * rlx_cpu.
 * Geometry.  One padding per axis, on both sides.  Forward conv: out =
 * (in + 2p - d(k-1) - 1) / s + 1 exactly.  Conv transpose: out = (in-1)s - 2p
 * + d(k-1) + 1 + output_padding, where the implied output_padding must lie in
 * [0, max(s, d)).  maxpool2d_backward: (h_out, w_out) follow the floor rule
 * (in + 2p - k) / s + 1, or the ceil rule on both axes (ceil mode; a last
 * window starting in the end padding is dropped).
 * Validation.  Creation takes the GIL itself and checks every argument:
 * offsets >= 0 and multiples of 4; dims >= 1 (paddings >= 0); groups dividing
 * both channel counts; output sizes as above; every operand's last byte
 * within the kernels' index type (Py_ssize_t); the output's bytes not
 * overlapping an input's (inputs may overlap each other).  A bad argument
 * returns NULL and error_message names the function, the argument and the
 * values.  kernel_run fails (-1) on a NULL or non-4-byte-aligned base.
 * Threads.  A kernel object, like a context, is used by one thread at a time
 * (one per calling thread; they may share nothing else).  It is compiled for
 * rlx_cpu.get_num_threads() threads at creation; kernel_run's nthreads <= 0
 * means that count, and a larger count is capped to it.  kernel_run with the
 * base of the previous call runs without touching Python; a new base takes
 * the GIL once to re-bind.
 */
#ifndef RLX_CPU_H
#define RLX_CPU_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Entries are only ever appended: a table of a newer version serves an older header. */
#define RLX_CPU_ABI_VERSION 2

typedef struct RlxContext RlxContext;   /* opaque: one plan run context */
typedef struct RlxKernel RlxKernel;     /* opaque: one kernel over a caller arena */

enum { RLX_FLOAT32 = 0, RLX_INT64 = 1 };

typedef struct RlxApi {
    int abi_version;                     /* RLX_CPU_ABI_VERSION */
    /* Plan run contexts.  plan: a rlx_cpu.Plan object (borrowed). */
    RlxContext *(*context_new)(PyObject *plan);
    void (*context_free)(RlxContext *ctx);
    int (*num_inputs)(const RlxContext *ctx);
    int (*num_outputs)(const RlxContext *ctx);
    /* Writes up to max_dims dims; returns the rank, or -1 for a bad index. */
    int (*input_shape)(const RlxContext *ctx, int i, int64_t *dims, int max_dims);
    int (*output_shape)(const RlxContext *ctx, int j, int64_t *dims, int max_dims);
    int (*output_dtype)(const RlxContext *ctx, int j);       /* RLX_FLOAT32 / RLX_INT64 */
    /* inputs[i]: num_inputs pointers in plan.input_names order; outputs[j]: num_outputs. */
    int (*run)(RlxContext *ctx, const float *const *inputs, void *const *outputs, int nthreads);
    /* One kernel from a thunk record (a Python object, e.g. one of
     * plan.thunks with every Slice re-pointed into segment "arena") whose
     * slices all lie in one caller arena; for C hosts, see the ABI 2 entries
     * below.  base: the arena's first byte; the record's byte offsets and
     * dims say where each operand is. */
    RlxKernel *(*kernel_new)(PyObject *thunk);
    void (*kernel_free)(RlxKernel *k);
    int64_t (*kernel_arena_nbytes)(const RlxKernel *k);
    int (*kernel_run)(RlxKernel *k, char *base, int nthreads);
    /* Copies the calling thread's last error message (NUL-terminated). */
    void (*error_message)(char *buf, size_t size);

    /* ABI 2: one kernel from byte offsets into a caller arena and dims (see
     * "Kernels with the host calling convention" above); run with kernel_run,
     * free with kernel_free.  NULL + error_message on a bad argument. */
    RlxKernel *(*conv2d_forward_f32)(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w,
        uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
        uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups);
    RlxKernel *(*conv3d_forward_f32)(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
        uint32_t w, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd, uint32_t kh,
        uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph, uint32_t pw,
        uint32_t dd, uint32_t dh, uint32_t dw, uint32_t groups);
    RlxKernel *(*conv_transpose2d_nchw_f32)(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t h, uint32_t w_in,
        uint32_t c_out, uint32_t h_out, uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw,
        uint32_t ph, uint32_t pw, uint32_t dh, uint32_t dw, uint32_t groups);
    RlxKernel *(*conv_transpose3d_ncdhw_f32)(
        int64_t src, int64_t weight, int64_t dst, uint32_t n, uint32_t c_in, uint32_t d, uint32_t h,
        uint32_t w_in, uint32_t c_out, uint32_t d_out, uint32_t h_out, uint32_t w_out, uint32_t kd,
        uint32_t kh, uint32_t kw, uint32_t sd, uint32_t sh, uint32_t sw, uint32_t pd, uint32_t ph,
        uint32_t pw, uint32_t dd, uint32_t dh, uint32_t dw, uint32_t groups);
    /* x, dy: inputs; dx: output [n, c, h, w]. */
    RlxKernel *(*maxpool2d_backward_f32)(
        int64_t x, int64_t dy, int64_t dx, uint32_t n, uint32_t c, uint32_t h, uint32_t w, uint32_t h_out,
        uint32_t w_out, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t ph, uint32_t pw);
    /* src [n, c, h, w] -> dst [n, c, 2h, 2w]. */
    RlxKernel *(*resize_nearest_2x_f32)(int64_t src, int64_t dst, uint32_t n, uint32_t c, uint32_t h,
                                        uint32_t w);
} RlxApi;

/* Import the table (needs the GIL and an initialised interpreter). */
static inline const RlxApi *rlx_cpu_import(void)
{
    /* PyCapsule_Import walks attributes: import the submodule first. */
    PyObject *mod = PyImport_ImportModule("rlx_cpu._capi");
    if (mod == NULL) return NULL;
    Py_DECREF(mod);
    const RlxApi *api = (const RlxApi *)PyCapsule_Import("rlx_cpu._capi._C_API", 0);
    if (api != NULL && api->abi_version < RLX_CPU_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError, "rlx_cpu C API version %d, this header needs %d or later",
                     api->abi_version, RLX_CPU_ABI_VERSION);
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif
#endif /* RLX_CPU_H */
