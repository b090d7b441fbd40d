/* Minimal C host for rlx_cpu's C API (see rlx_cpu/include/rlx_cpu.h).
 *
 * It embeds Python, compiles a one-conv plan there (plans are built from
 * Python: rlx_cpu.compile or rlx_cpu.import_onnx), then runs it through the
 * API's function table with the GIL released, and compares the result with
 * plan.run from Python.
 *
 * Build (POSIX; tests/test_capi.py runs the same line):
 *   cc examples/capi_run.c -o capi_run \
 *      -I"$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')" \
 *      -I"$(python -c 'import rlx_cpu; print(rlx_cpu.get_include())')" \
 *      $(python3-config --ldflags --embed)
 */
#include <stdio.h>
#include <stdlib.h>
#include <math.h>

#include "rlx_cpu.h"

static const char *BUILD_PLAN =
    "import numpy as np, rlx_cpu\n"
    "rng = np.random.default_rng(0)\n"
    "g = rlx_cpu.Graph()\n"
    "x = g.input('x', (1, 3, 8, 8))\n"
    "g.output(g.conv2d(x, rng.standard_normal((4, 3, 3, 3)).astype(np.float32), padding=1))\n"
    "plan = rlx_cpu.compile(g, num_threads=1)\n"
    "x_value = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)\n"
    "expected = plan.run({'x': x_value})[0]\n";

int main(void)
{
    Py_Initialize();
    if (PyRun_SimpleString(BUILD_PLAN) != 0) return 1;
    PyObject *main_mod = PyImport_AddModule("__main__");            /* borrowed */
    PyObject *plan = PyObject_GetAttrString(main_mod, "plan");
    PyObject *xv = PyObject_GetAttrString(main_mod, "x_value");
    PyObject *expected = PyObject_GetAttrString(main_mod, "expected");
    const RlxApi *api = rlx_cpu_import();
    if (!plan || !xv || !expected || !api) { PyErr_Print(); return 1; }

    RlxContext *ctx = api->context_new(plan);
    if (!ctx) { char m[256]; api->error_message(m, sizeof m); fprintf(stderr, "%s\n", m); return 1; }
    int64_t dims[8];
    int rank = api->output_shape(ctx, 0, dims, 8);
    size_t n_out = 1;
    for (int k = 0; k < rank; k++) n_out *= (size_t)dims[k];
    printf("inputs %d, outputs %d, output rank %d, %zu elements\n",
           api->num_inputs(ctx), api->num_outputs(ctx), rank, n_out);

    /* The caller owns the buffers: float32, C-contiguous, 4-byte aligned. */
    Py_buffer xb, eb;
    if (PyObject_GetBuffer(xv, &xb, PyBUF_C_CONTIGUOUS) || PyObject_GetBuffer(expected, &eb, PyBUF_C_CONTIGUOUS)) {
        PyErr_Print(); return 1;
    }
    float *y = malloc(n_out * sizeof(float));
    const float *inputs[1] = {(const float *)xb.buf};
    void *outputs[1] = {y};

    int rc = 0;
    Py_BEGIN_ALLOW_THREADS                   /* runs need no GIL */
    for (int it = 0; it < 10 && rc == 0; it++)
        rc = api->run(ctx, inputs, outputs, 1);
    Py_END_ALLOW_THREADS
    if (rc) { char m[256]; api->error_message(m, sizeof m); fprintf(stderr, "run failed: %s\n", m); return 1; }

    double maxdiff = 0;
    const float *e = (const float *)eb.buf;
    for (size_t i = 0; i < n_out; i++) maxdiff = fmax(maxdiff, fabs((double)y[i] - e[i]));
    printf("max |C - Python| = %g\n", maxdiff);

    api->context_free(ctx);
    free(y);
    PyBuffer_Release(&xb);
    PyBuffer_Release(&eb);
    Py_DECREF(plan); Py_DECREF(xv); Py_DECREF(expected);
    return Py_FinalizeEx() < 0 ? 1 : (maxdiff == 0 ? 0 : 2);
}
