/* Minimal C host for rlx_cpu's C API (see rlx_cpu/include/rlx_cpu.h).
 *
 * It embeds Python, compiles a one-conv plan there (plans are built from
 * Python: rlx_cpu.compile or rlx_cpu.import_onnx), then runs it through the
 * API's function table with the GIL released, and compares the result with
 * plan.run from Python.  Then it calls one kernel with the host calling
 * convention (conv2d_forward_f32: operands at byte offsets of one arena the
 * caller owns, integer dims) and checks it against a plain C double loop.
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

/* Conv2d over a caller arena: src [1,3,9,8] at byte 0, weight [4,3,3,3]
 * after it, dst [1,4,5,4] after that; stride 2, padding 1.  Returns the
 * max |kernel - reference| over the max |reference|, or -1 on an error. */
static double run_conv2d_kernel(const RlxApi *api)
{
    enum { N = 1, CI = 3, H = 9, W = 8, CO = 4, KH = 3, KW = 3, S = 2, P = 1 };
    enum { HO = (H + 2 * P - KH) / S + 1, WO = (W + 2 * P - KW) / S + 1 };
    const int64_t n_src = N * CI * H * W, n_w = CO * CI * KH * KW, n_dst = N * CO * HO * WO;
    const int64_t off_src = 0, off_w = 4 * n_src, off_dst = off_w + 4 * n_w;

    RlxKernel *k = api->conv2d_forward_f32(off_src, off_w, off_dst, N, CI, H, W, CO, HO, WO,
                                           KH, KW, S, S, P, P, 1, 1, 1);   /* takes the GIL */
    if (!k) { char m[512]; api->error_message(m, sizeof m); fprintf(stderr, "%s\n", m); return -1; }
    int64_t nbytes = api->kernel_arena_nbytes(k);          /* the end of the last operand */
    if (nbytes != off_dst + 4 * n_dst) { fprintf(stderr, "arena bytes %lld\n", (long long)nbytes); return -1; }
    float *arena = malloc((size_t)nbytes);                 /* the caller owns the arena */
    float *src = arena, *wt = arena + n_src, *dst = arena + n_src + n_w;
    unsigned state = 12345;
    for (int64_t i = 0; i < n_src + n_w; i++) {
        state = state * 1103515245u + 12345u;
        arena[i] = (float)((state >> 8) % 2001) / 1000.0f - 1.0f;
    }

    int rc = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int it = 0; it < 10 && rc == 0; it++)
        rc = api->kernel_run(k, (char *)arena, 1);
    Py_END_ALLOW_THREADS
    if (rc) { char m[512]; api->error_message(m, sizeof m); fprintf(stderr, "kernel_run: %s\n", m); return -1; }

    double maxdiff = 0, maxref = 0;
    for (int co = 0; co < CO; co++)
        for (int ho = 0; ho < HO; ho++)
            for (int wo = 0; wo < WO; wo++) {
                double acc = 0;
                for (int ci = 0; ci < CI; ci++)
                    for (int i = 0; i < KH; i++)
                        for (int j = 0; j < KW; j++) {
                            int hi = ho * S - P + i, wi = wo * S - P + j;
                            if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                            acc += (double)src[(ci * H + hi) * W + wi] * wt[((co * CI + ci) * KH + i) * KW + j];
                        }
                maxref = fmax(maxref, fabs(acc));
                maxdiff = fmax(maxdiff, fabs(acc - dst[(co * HO + ho) * WO + wo]));
            }
    printf("kernel conv2d_forward_f32: arena %lld bytes, max rel err = %g\n", (long long)nbytes, maxdiff / maxref);
    api->kernel_free(k);
    free(arena);
    return maxdiff / maxref;
}

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

    double kerr = run_conv2d_kernel(api);
    int ok = maxdiff == 0 && kerr >= 0 && kerr <= 1e-4;
    return Py_FinalizeEx() < 0 ? 1 : (ok ? 0 : 2);
}
