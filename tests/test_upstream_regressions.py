"""One named test per upstream defect listed in shared/spec/NOTES.md.

Each test would fail on the behaviour upstream (rlx-cpu 0.2.13) had.  Several
overlap with the parity grids; here each defect has a test that says its name.
"""

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime
from rlx_cpu.ops.conv import ConvThunk, WinogradFilterThunk

from reference import (avg_pool_nd, conv_nd, conv_transpose_nd, global_pool, max_pool_nd, rel_error,
                       upsample_nearest2x)

TOL = 1e-4


def _run(build, feeds, **compile_kw):
    g = rlx_cpu.Graph()
    nodes = {name: g.input(name, a.shape) for name, a in feeds.items()}
    out = build(g, **nodes)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    plan = rlx_cpu.compile(g, **compile_kw)
    return plan, plan.run(feeds)


def test_resize_batch_offset_advances_whole_planes(rng):
    # upstream advanced batch planes by elements on a byte pointer: batch > 1 broke
    x = rng.standard_normal((3, 2, 5, 7)).astype(np.float32)
    _, (y,) = _run(lambda g, x: g.upsample_nearest2x(x), {"x": x})
    np.testing.assert_array_equal(y, upsample_nearest2x(x))


def test_conv1d_kernel_runs_along_the_length(rng):
    # upstream ran the k taps over the singleton H axis of [N, C, 1, L]
    x = rng.standard_normal((2, 1, 20)).astype(np.float32)
    w = np.zeros((1, 1, 5), np.float32)
    w[0, 0, 4] = 1.0                        # picks x[l + 4]
    _, (y,) = _run(lambda g, x: g.conv1d(x, w), {"x": x})
    np.testing.assert_array_equal(y[:, 0], x[:, 0, 4:])


def test_dilation_and_output_padding_are_not_dropped(rng):
    x = rng.standard_normal((2, 3, 11, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    _, (y,) = _run(lambda g, x: g.conv2d(x, w, dilation=(2, 3)), {"x": x})
    assert y.shape == (2, 4, 7, 3)
    assert rel_error(y, conv_nd(x, w, dilation=(2, 3))) <= TOL
    wt = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    _, (z,) = _run(lambda g, x: g.conv_transpose2d(x, wt, stride=2, padding=1, output_padding=1, dilation=2),
                   {"x": x})
    want = conv_transpose_nd(x, wt, stride=2, pads_begin=1, pads_end=1, dilation=2, output_padding=1)
    assert z.shape == want.shape == (2, 2, (11 - 1) * 2 - 2 + 2 * 2 + 1 + 1, (9 - 1) * 2 - 2 + 2 * 2 + 1 + 1)
    assert rel_error(z, want) <= TOL


def test_asymmetric_pads_give_the_right_length(rng):
    x = rng.standard_normal((1, 2, 10)).astype(np.float32)
    w = rng.standard_normal((3, 2, 4)).astype(np.float32)
    _, (y,) = _run(lambda g, x: g.conv1d(x, w, padding=(1, 3)), {"x": x})   # ONNX order: begin, end
    assert y.shape == (1, 3, 10 + 1 + 3 - 4 + 1)
    assert rel_error(y, conv_nd(x, w, pads_begin=1, pads_end=3)) <= TOL


@pytest.mark.parametrize("algorithm", ["reference", "im2col", "direct", "winograd"])
def test_bias_broadcast_with_batch_above_one(rng, algorithm):
    x = rng.standard_normal((3, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    b = (10.0 * np.arange(1, 6)).astype(np.float32)
    _, (y,) = _run(lambda g, x: g.conv2d(x, w, b, padding=1), {"x": x}, conv_algorithm=algorithm)
    assert rel_error(y, conv_nd(x, w, b, pads_begin=1, pads_end=1)) <= TOL


def test_pool_ceil_overhang_divisor_and_bounds(rng):
    # the last ceil-mode window overhangs the input: it must neither read past
    # the plane nor divide by the full window
    x = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)   # last window: 7, pad, beyond the pad
    _, (a, m) = _run(lambda g, x: (g.avg_pool2d(x, 3, 2, padding=1, ceil_mode=True, count_include_pad=False),
                                   g.max_pool2d(x, 3, 2, padding=1, ceil_mode=True)), {"x": x})
    np.testing.assert_allclose(a, avg_pool_nd(x, 3, 2, 1, 1, ceil_mode=True, count_include_pad=False),
                               rtol=1e-6, atol=1e-6)
    assert a.shape == (2, 3, 5, 5)
    np.testing.assert_array_equal(m, max_pool_nd(x, 3, 2, 1, 1, ceil_mode=True)[0].astype(np.float32))


def test_global_pool_stays_in_its_plane(rng):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    _, (a, m) = _run(lambda g, x: (g.global_avg_pool(x), g.global_max_pool(x)), {"x": x})
    np.testing.assert_allclose(a, global_pool(x, "avg"), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(m, global_pool(x, "max").astype(np.float32))


def test_istft_head_does_not_get_a_150gb_im2col():
    # kernel 1024 over a 36k-sample length with 1024 channels: c_in*k*L_out
    # ~ 3.8e10 floats of patch matrix.  Compile only (no arena is allocated
    # until the first run) and check im2col was not chosen.
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1024, 37000))
    g.output(g.conv1d(x, np.zeros((1, 1024, 1024), np.float32)))
    plan = rlx_cpu.compile(g, num_threads=2)
    (t,) = plan.thunks
    assert t.algorithm != rlx_cpu.ConvAlgorithm.IM2COL
    assert t.scratch is None
    assert plan.arena_nbytes < 2 * (1024 * 37000 + 35977) * 4


def test_arena_offsets_and_base_are_64_byte_aligned(rng):
    x = rng.standard_normal((1, 3, 15, 13)).astype(np.float32)
    plan, _ = _run(lambda g, x: g.conv2d(g.conv2d(x, np.ones((5, 3, 3, 3), np.float32)),
                                         np.ones((7, 5, 1, 1), np.float32)), {"x": x})
    for t in plan.thunks:
        for s in t.slices():
            assert s.offset % 64 == 0, (t, s)
    assert _runtime.address_of(plan._context().arena) % 64 == 0


def test_blas_threads_do_not_nest_under_openmp_threads():
    rlx_cpu.compile(_tiny_graph(), num_threads=2)
    from rlx_cpu.threads import scipy_blas_info
    info = scipy_blas_info()
    counts = [lib["num_threads"] for lib in info["libraries"]]
    assert counts and all(c == 1 for c in counts), info


def _tiny_graph():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 4, 4))
    g.output(g.conv2d(x, np.ones((1, 1, 1, 1), np.float32)))
    return g


def test_winograd_filters_are_transformed_once_at_compile_time(rng):
    x = rng.standard_normal((1, 8, 12, 12)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    plan, (y,) = _run(lambda g, x: g.conv2d(x, w, padding=1), {"x": x}, conv_algorithm="winograd")
    assert not any(isinstance(t, WinogradFilterThunk) for t in plan.thunks)
    (t,) = plan.thunks
    assert isinstance(t, ConvThunk) and t.weight.segment == "const"
    # U, not the raw 3x3 weight: 16 planes of 8x8, in the microkernel's 6-row
    # panels (8 rows padded to 12) when the tile GEMMs run on it
    from rlx_cpu import _conv2d
    u_floats = 16 * (_conv2d.gemm_packed_floats(8, 8, 1) if t.packed else 8 * 8)
    assert t.weight.nbytes == u_floats * 4
    assert plan.const_nbytes == u_floats * 4          # and the raw weight is not kept
    assert rel_error(y, conv_nd(x, w, pads_begin=1, pads_end=1)) <= TOL


def _batch_one_build(rng, build):
    """(graph builder, input) of one batch-1 kernel of the thread-split check."""
    x = rng.standard_normal((1, 128, 56, 56)).astype(np.float32)
    if build == "conv1x1":
        w = rng.standard_normal((256, 128, 1, 1)).astype(np.float32)
        return (lambda g, x: g.conv2d(x, w)), x
    if build == "conv1x1_relu":                # the NCHW 1x1 GEMM with its epilogue in column blocks
        w = rng.standard_normal((256, 128, 1, 1)).astype(np.float32)
        b = rng.standard_normal(256).astype(np.float32)
        return (lambda g, x: g.relu(g.conv2d(x, w, b))), x
    if build == "conv_transpose2d":
        w = rng.standard_normal((128, 32, 4, 4)).astype(np.float32)
        return (lambda g, x: g.conv_transpose2d(x, w, stride=2, padding=1)), x
    if build == "im2col_conv":
        w = rng.standard_normal((64, 128, 3, 3)).astype(np.float32)
        return (lambda g, x: g.conv2d(x, w, stride=2, padding=1)), x
    if build in ("winograd", "winograd_nchw"):    # blocked (auto), or forced in NCHW
        w = rng.standard_normal((128, 128, 3, 3)).astype(np.float32)
        return (lambda g, x: g.conv2d(x, w, padding=1)), x
    if build == "depthwise":
        w = rng.standard_normal((128, 1, 3, 3)).astype(np.float32)
        return (lambda g, x: g.conv2d(x, w, padding=1, groups=128)), x
    if build == "stem":
        x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
        w = rng.standard_normal((64, 3, 7, 7)).astype(np.float32)
        return (lambda g, x: g.conv2d(x, w, stride=2, padding=3)), x
    if build == "max_pool":
        return (lambda g, x: g.max_pool2d(x, 3, stride=2, padding=1)), x
    if build == "avg_pool":
        return (lambda g, x: g.avg_pool2d(x, 2, stride=2)), x
    if build == "upsample":
        return (lambda g, x: g.upsample_nearest2x(x)), x
    if build == "backward_input":              # x plays dy [1, 128, 56, 56]; dx is [1, 64, 56, 56]
        w = rng.standard_normal((128, 64, 3, 3)).astype(np.float32)
        return (lambda g, x: g.conv2d_backward_input(x, w, (1, 64, 56, 56), padding=1)), x
    assert build == "backward_weight"          # dW of a 3x3 128->64 conv from x and dy
    dy = rng.standard_normal((1, 64, 56, 56)).astype(np.float32)
    return (lambda g, x: g.conv2d_backward_weight(x, dy, (64, 128, 3, 3), padding=1)), x


BATCH_ONE_BUILDS = ["conv1x1", "conv1x1_relu", "conv_transpose2d", "im2col_conv", "winograd", "winograd_nchw",
                    "depthwise", "stem", "max_pool", "avg_pool", "upsample", "backward_input", "backward_weight"]


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="single-threaded build (no OpenMP)")
@pytest.mark.parametrize("build", BATCH_ONE_BUILDS)
def test_batch_one_kernels_use_every_core(rng, build):
    # upstream ran Conv2D1x1, conv-transpose and the backward kernels on one
    # core at batch 1.  With 2 threads every thunk must split its work over
    # both: the work meter counts the items (rows, planes, blocks, panels)
    # each OpenMP thread ran, which does not depend on the machine's load,
    # and neither thread may get less than a quarter of the other's share.
    fn, x = _batch_one_build(rng, build)
    g = rlx_cpu.Graph()
    g.output(fn(g, g.input("x", x.shape)))
    algo = "winograd_f4" if build == "winograd_nchw" else "auto"
    plan = rlx_cpu.compile(g, num_threads=2, adaptive_threads=False, conv_algorithm=algo)
    work = plan.work_per_thread({"x": x})
    assert work
    for thunk, items in work:
        assert len(items) == 2 and min(items) >= 0.25 * max(items), \
            f"batch-1 {build}: thunk {thunk.op_name} ({thunk.kind}) ran work items {items} on the 2 threads: " \
            f"it did not split its work over 2 cores"
    # and the run itself still gives the 1-thread plan's result
    one = rlx_cpu.compile(g, num_threads=1, adaptive_threads=False, conv_algorithm=algo).run({"x": x})[0]
    two = plan.run({"x": x})[0]
    assert rel_error(two, one) <= TOL


def test_work_meter_counts_each_threads_items(rng):
    # A blocked reorder of 16 channel blocks is 16 items, one per block: on 2
    # threads 8 each, on 1 thread all 16; between runs the meter is off and
    # counts nothing.
    x = rng.standard_normal((1, 128, 56, 56)).astype(np.float32)
    from rlx_cpu import _launch
    from rlx_cpu.ops.blocked import ReorderNchwcThunk
    for threads, want in ((1, (16,)), (2, (8, 8) if _runtime.openmp_enabled() else (16,))):
        g = rlx_cpu.Graph()
        w = rng.standard_normal((128, 32, 4, 4)).astype(np.float32)
        g.output(g.conv_transpose2d(g.input("x", x.shape), w, stride=2, padding=1))
        plan = rlx_cpu.compile(g, num_threads=threads, adaptive_threads=False)
        work = plan.work_per_thread({"x": x})
        first, items = work[0]
        assert isinstance(first, ReorderNchwcThunk) and first.c == 128
        assert items == want
    _launch.work_meter_start()
    _launch.work_meter_stop()
    plan.run({"x": x})
    assert _launch.work_meter_stop() == (0,)
