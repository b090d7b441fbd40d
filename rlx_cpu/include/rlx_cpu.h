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
 * kernel_free and rlx_cpu_import take the GIL themselves (or need it held, for
 * rlx_cpu_import).  nthreads is the OpenMP thread count of the kernels
 * (<= 0: the plan's own setting).
 * Errors.  Functions return 0 (or a valid pointer / count) on success and -1
 * (or NULL) on failure; the message of the calling thread's last failure is
 * copied by error_message.
 */
#ifndef RLX_CPU_H
#define RLX_CPU_H

#include <Python.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLX_CPU_ABI_VERSION 1

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
    /* One kernel (a thunk record whose slices all lie in one caller arena,
     * see rlx_cpu.capi_kernel).  base: the arena's first byte; the record's
     * byte offsets and dims say where each operand is. */
    RlxKernel *(*kernel_new)(PyObject *thunk);
    void (*kernel_free)(RlxKernel *k);
    int64_t (*kernel_arena_nbytes)(const RlxKernel *k);
    int (*kernel_run)(RlxKernel *k, char *base, int nthreads);
    /* Copies the calling thread's last error message (NUL-terminated). */
    void (*error_message)(char *buf, size_t size);
} RlxApi;

/* Import the table (needs the GIL and an initialised interpreter). */
static inline const RlxApi *rlx_cpu_import(void)
{
    /* PyCapsule_Import walks attributes: import the submodule first. */
    PyObject *mod = PyImport_ImportModule("rlx_cpu._capi");
    if (mod == NULL) return NULL;
    Py_DECREF(mod);
    const RlxApi *api = (const RlxApi *)PyCapsule_Import("rlx_cpu._capi._C_API", 0);
    if (api != NULL && api->abi_version != RLX_CPU_ABI_VERSION) {
        PyErr_Format(PyExc_ImportError, "rlx_cpu C API version %d, this header expects %d",
                     api->abi_version, RLX_CPU_ABI_VERSION);
        return NULL;
    }
    return api;
}

#ifdef __cplusplus
}
#endif
#endif /* RLX_CPU_H */
