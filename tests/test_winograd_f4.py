"""Winograd F(4x4, 3x3): parity with the float64 reference on edge shapes
(sizes not multiples of 4, every padding, batches, 1x1 outputs), the runtime
filter transform, ResNet-like accuracy, the per-shape tile choice and the
documented finite range."""
import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime
from rlx_cpu import ConvAlgorithm as A, ConvFlags, select_conv_algorithm
from rlx_cpu.algorithms import (FLT_MAX, WINOGRAD_F4_GROWTH, WINOGRAD_F4_MAX_ABS_INPUT,
                                WINOGRAD_F4_MAX_C_IN, WINOGRAD_F4_MIN_TILES)
from rlx_cpu.ops.conv import Conv2DDims

from conftest import TOL, chosen_algorithm, conv_case, feeds_for, one_conv_graph
from reference import conv_nd, rel_error

# (n, c_in, c_out, (h, w), pads (top, left, bottom, right))
EDGE_SHAPES = [
    (1, 3, 5, (3, 3), (0, 0, 0, 0)),       # one 1x1 output
    (2, 4, 3, (1, 1), (1, 1, 1, 1)),       # 1x1 input, 1x1 output per image
    (1, 6, 4, (5, 7), (0, 0, 0, 0)),       # 3x5 output: one clipped tile
    (3, 5, 7, (9, 10), (1, 1, 1, 1)),      # 9x10: partial last tile row and column
    (2, 8, 6, (13, 6), (2, 2, 2, 2)),      # padding 2
    (1, 7, 9, (6, 70), (2, 1, 0, 2)),      # asymmetric padding, 8-tile SIMD runs + tail
    (2, 16, 16, (37, 45), (1, 2, 1, 0)),   # many tiles, runs across tile rows and images
    (4, 3, 2, (4, 4), (0, 1, 2, 0)),
]


@pytest.mark.parametrize("n,c_in,c_out,spatial,pads", EDGE_SHAPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_f4_parity_on_edge_shapes(rng, n, c_in, c_out, spatial, pads, threads):
    x, w, b = conv_case(rng, n, c_in, c_out, spatial, (3, 3))
    want = conv_nd(x, w, b, pads_begin=pads[:2], pads_end=pads[2:])
    plan = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=pads), conv_algorithm="winograd_f4",
                           num_threads=threads)
    assert chosen_algorithm(plan) == A.WINOGRAD_F4
    got = plan.run({"x": x})[0]
    assert got.shape == want.shape
    assert rel_error(got, want) <= TOL


def test_f4_baseline_and_simd_runs_agree_on_full_and_clipped_tiles(rng):
    """The 8-tile SIMD transforms cover interior runs; scalar tiles cover the
    rest: a width with 8-tile runs, a tail and clipped edges, both paddings."""
    for pads in ((0, 0, 0, 0), (1, 1, 1, 1)):
        x, w, b = conv_case(rng, 1, 4, 4, (18, 75), (3, 3))
        want = conv_nd(x, w, b, pads_begin=pads[:2], pads_end=pads[2:])
        got = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=pads),
                              conv_algorithm="winograd_f4").run({"x": x})[0]
        assert rel_error(got, want) <= TOL


@pytest.mark.parametrize("bias_as_input", [False, True])
def test_f4_weight_input_vs_constant(rng, bias_as_input):
    x, w, b = conv_case(rng, 2, 8, 12, (11, 10), (3, 3))
    p_const = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=1), conv_algorithm="winograd_f4")
    p_input = rlx_cpu.compile(one_conv_graph(x.shape, w, b, weight_as_input=True,
                                             bias_as_input=bias_as_input, padding=1),
                              conv_algorithm="winograd_f4")
    assert [t.kind for t in p_const.thunks] == ["conv"]
    assert [t.kind for t in p_input.thunks] == ["winograd_filter", "conv"]
    assert p_input.thunks[0].tile == 4
    y_const = p_const.run({"x": x})[0]
    assert rel_error(y_const, conv_nd(x, w, b, 1, 1, 1)) <= TOL
    # The runtime transform is the compile-time one: bitwise the same result.
    np.testing.assert_array_equal(p_input.run(feeds_for(x, w, b, True, bias_as_input))[0], y_const)
    for _ in range(2):
        _, w, b2 = conv_case(rng, 2, 8, 12, (11, 10), (3, 3))
        b = b2 if bias_as_input else b
        y = p_input.run(feeds_for(x, w, b, True, bias_as_input))[0]
        assert rel_error(y, conv_nd(x, w, b, 1, 1, 1)) <= TOL


@pytest.mark.parametrize("c_in", [64, 256, 512])
def test_f4_resnet_like_accuracy(c_in):
    """Normal inputs, He-scaled weights: the error relative to the result's
    magnitude stays well inside 1e-4 (measured ~1e-5 up to C_in 2048)."""
    rng = np.random.default_rng(c_in)
    x = rng.standard_normal((1, c_in, 8, 8)).astype(np.float32)
    w = (rng.standard_normal((16, c_in, 3, 3)) * np.sqrt(2 / (9 * c_in))).astype(np.float32)
    b = (0.1 * rng.standard_normal(16)).astype(np.float32)
    got = rlx_cpu.conv2d(x, w, b, padding=1, conv_algorithm="winograd_f4")
    assert rel_error(got, conv_nd(x.astype(np.float64), w.astype(np.float64), b, 1, 1, 1)) <= TOL


def _dims(n, c_in, c_out, h, w, pad=1):
    return Conv2DDims(n, c_in, h, w, c_out, h + 2 * pad - 2, w + 2 * pad - 2, 3, 3, 1, 1, pad, pad, 1, 1, 1)


def test_tile_size_choice():
    # the tile GEMMs on sgemm (a weight fed per run, RLX_CONV_MICROKERNEL=0)
    f = ConvFlags(microkernel=False)
    assert select_conv_algorithm(_dims(1, 64, 64, 56, 56), "auto", f) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(8, 64, 64, 56, 56), "auto", f) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(1, 128, 128, 28, 28), "auto", f) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(1, 256, 256, 14, 14), "auto", f) == A.WINOGRAD
    assert select_conv_algorithm(_dims(8, 512, 512, 7, 7), "auto", f) == A.WINOGRAD
    assert select_conv_algorithm(_dims(1, 512, 512, 7, 7), "auto", f) == A.WINOGRAD
    # the invariance cases of test_threads.py exercise both
    assert select_conv_algorithm(_dims(2, 16, 16, 32, 32), "auto", f) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(1, 16, 16, 20, 20), "auto", f) == A.WINOGRAD
    # thresholds: tile count and input channels
    few = _dims(1, 64, 64, 4 * 5, 4 * 6)            # 30 tiles
    assert few.n * 5 * 6 < WINOGRAD_F4_MIN_TILES
    assert select_conv_algorithm(few, "auto", f) == A.WINOGRAD
    assert select_conv_algorithm(_dims(1, WINOGRAD_F4_MAX_C_IN + 1, 64, 56, 56), "auto", f) == A.WINOGRAD
    # RLX_WINOGRAD=1 uses the same tile choice; forced names are fixed
    assert select_conv_algorithm(_dims(1, 64, 64, 56, 56), "auto", ConvFlags(winograd=True)) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(1, 64, 64, 56, 56), "winograd", f) == A.WINOGRAD
    assert select_conv_algorithm(_dims(1, 512, 512, 7, 7), "winograd_f4", f) == A.WINOGRAD_F4
    assert select_conv_algorithm(_dims(1, 64, 64, 56, 56), "auto", ConvFlags(winograd=False)) \
        not in (A.WINOGRAD, A.WINOGRAD_F4)


def test_tile_size_choice_on_the_microkernel():
    # the tile GEMMs on the conv microkernel: F(4x4) from one 16-column
    # panel of tiles up (a block with fewer tiles than threads runs staged)
    f = ConvFlags(microkernel=True)
    assert select_conv_algorithm(_dims(1, 256, 256, 14, 14), "auto", f) == A.WINOGRAD_F4      # 16 tiles
    assert select_conv_algorithm(_dims(1, 512, 512, 14, 14), "auto", f) == A.WINOGRAD_F4      # no channel cap
    assert select_conv_algorithm(_dims(1, 512, 512, 7, 7), "auto", f) == A.WINOGRAD           # 4 tiles
    assert select_conv_algorithm(_dims(1, 64, 64, 4 * 3, 4 * 5), "auto", f) == A.WINOGRAD     # 15 tiles
    # a weight fed per run keeps the sgemm rule (its U is transformed each run, unpacked)
    assert select_conv_algorithm(_dims(1, 256, 256, 14, 14), "auto", f, weight_constant=False) in (
        A.WINOGRAD, A.IM2COL)


def test_forced_f4_on_ineligible_shape_names_the_reason():
    x = np.ones((1, 4, 8, 8), np.float32)
    with pytest.raises(ValueError, match=r"conv_algorithm='winograd_f4' needs stride 1 \(got 2,2\)"):
        rlx_cpu.conv2d(x, np.ones((2, 4, 3, 3), np.float32), stride=2, conv_algorithm="winograd_f4")


def test_f4_finite_range_both_sides():
    """Inside the documented range (max|x| just under FLT_MAX/100, worst-case
    sign pattern for the input transform) F(4x4) is finite and exact; just
    above it, it overflows where direct stays finite."""
    # signs (+, 0, -, 0, +, 0) along both axes meet B^T's row 0 (4, 0, -5, 0, 1, 0):
    # |V_00| = 10 * 10 * max|x|
    row = np.array([1.0, 0.0, -1.0, 0.0, 1.0, 0.0])
    sign = np.outer(row, row)
    c = 4
    w = np.zeros((2, c, 3, 3), np.float32)
    w[:, :, 1, 1] = 1e-3
    for amp, finite in ((0.99 * WINOGRAD_F4_MAX_ABS_INPUT, True), (1.01 * WINOGRAD_F4_MAX_ABS_INPUT, False)):
        x = np.broadcast_to(sign * amp, (1, c, 6, 6)).astype(np.float32)
        want = conv_nd(x.astype(np.float64), w.astype(np.float64))
        got = rlx_cpu.conv2d(x, w, conv_algorithm="winograd_f4")
        assert np.isfinite(want).all()
        assert np.isfinite(got).all() == finite
        if finite:
            assert rel_error(got, want) <= TOL
        assert np.isfinite(rlx_cpu.conv2d(x, w, conv_algorithm="direct")).all()
    assert WINOGRAD_F4_MAX_ABS_INPUT == FLT_MAX / 100 and WINOGRAD_F4_GROWTH == 2304


@pytest.mark.parametrize("microkernel", ["1", "0"])
@pytest.mark.parametrize("algo,planes", [("winograd", 16), ("winograd_f4", 36)])
@pytest.mark.parametrize("threads", [1, 2])
def test_tile_gemms_on_the_microkernel_or_sgemm(rng, monkeypatch, microkernel, algo, planes, threads):
    """RLX_CONV_MICROKERNEL picks the tile GEMMs' engine: U packed in the
    microkernel's row panels (13 output channels: a partial panel; tile
    counts that are not multiples of 16) or plain for sgemm.  Both match the
    float64 reference, with a residual and relu fused, and a weight fed per
    run (transformed, then packed, each run) gives the constant weight's bits."""
    monkeypatch.setenv("RLX_CONV_MICROKERNEL", microkernel)
    x, w, b = conv_case(rng, 2, 24, 13, (23, 19), (3, 3))
    r = rng.standard_normal((2, 13, 23, 19)).astype(np.float32)
    want = np.maximum(conv_nd(x, w, b, 1, 1, 1) + r, 0)
    outs = []
    for weight_as_input in (False, True):
        g = rlx_cpu.Graph()
        xi = g.input("x", x.shape)
        ri = g.input("r", r.shape)
        wi = g.input("w", w.shape) if weight_as_input else w
        g.output(g.relu(g.add(g.conv2d(xi, wi, b, padding=1), ri)))
        plan = rlx_cpu.compile(g, conv_algorithm=algo, num_threads=threads)
        conv = [t for t in plan.thunks if t.kind == "conv"][0]
        assert conv.algorithm.label == algo and bool(conv.packed) == (microkernel == "1")
        feeds = {"x": x, "r": r, **({"w": w} if weight_as_input else {})}
        outs.append(plan.run(feeds)[0])
        assert rel_error(outs[-1], want) <= TOL
    np.testing.assert_array_equal(outs[1], outs[0])


@pytest.mark.parametrize("algo,shape", [("winograd_f4", (1, 24, 14, 13)), ("winograd", (1, 40, 7, 7)),
                                        ("winograd_f4", (1, 16, 7, 9))])
def test_staged_blocks_when_fewer_than_the_threads(rng, monkeypatch, algo, shape):
    """A Winograd conv whose tiles make fewer blocks than the bound threads
    runs each block on every thread (input transform by 8-tile chunks, tile
    GEMMs by transform position, output transform by chunks): the float64
    value with a residual and relu fused, and the same bits at 1 and 2 run
    threads and for a weight fed per run."""
    if not _runtime.openmp_enabled():
        pytest.skip("single-threaded build (no OpenMP): no 2-thread plan")
    monkeypatch.setenv("RLX_CONV_MICROKERNEL", "1")
    n, c, h, w = shape
    x, wt, b = conv_case(rng, n, c, c, (h, w), (3, 3))
    r = rng.standard_normal(x.shape).astype(np.float32)
    want = np.maximum(conv_nd(x, wt, b, 1, 1, 1) + r, 0)
    outs = []
    for weight_as_input in (False, True):
        g = rlx_cpu.Graph()
        xi, ri = g.input("x", x.shape), g.input("r", r.shape)
        wi = g.input("w", wt.shape) if weight_as_input else wt
        g.output(g.relu(g.add(g.conv2d(xi, wi, b, padding=1), ri)))
        plan = rlx_cpu.compile(g, conv_algorithm=algo, num_threads=2, adaptive_threads=False)
        ctx = plan.new_context()
        conv = [t for t in plan.thunks if t.kind == "conv"][0]
        tiles = n * ((h + 3) // 4) * ((w + 3) // 4) if algo == "winograd_f4" else n * ((h + 1) // 2) * ((w + 1) // 2)
        assert conv.packed and (tiles + conv.block - 1) // conv.block < 2      # one block: staged
        feeds = {"x": x, "r": r, **({"w": wt} if weight_as_input else {})}
        ctx.load(feeds)
        seq = _runtime.LaunchSequence(ctx.launches)
        got = []
        for t in (2, 1):
            seq.run(t)
            got.append(ctx.outputs[0].copy())
        np.testing.assert_array_equal(got[0], got[1])
        assert rel_error(got[0], want) <= TOL
        outs.append(got[0])
    np.testing.assert_array_equal(outs[1], outs[0])
