"""The conv GEMM microkernel (src/rlx_gemm.h) that the gemm_1x1 and im2col
algorithms run on instead of sgemm where it measured faster.

Checked against the float64 reference (1e-4 relative to the magnitude of the
sum) on a grid of M, K, N with every register-tile remainder, through whole
conv plans (groups, batch, strides, non-constant weights, conv1d), in both
SIMD variants, and for bitwise independence of the thread count."""
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _conv2d, _runtime
from rlx_cpu.algorithms import ConvAlgorithm, ConvFlags, prefers_conv_microkernel
from rlx_cpu.ops.conv import Conv2DDims

from conftest import conv_thunk, one_conv_graph
from reference import conv_nd, rel_error

TOL = 1e-4


def gemm_error(w, x, b, got):
    """max |got - W.X - b| relative to |W|.|X| + |b| (the sum's magnitude)."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    want = w64 @ x64 + (0.0 if b is None else b.astype(np.float64)[:, None])
    mag = np.abs(w64) @ np.abs(x64) + (0.0 if b is None else np.abs(b.astype(np.float64))[:, None])
    return float((np.abs(got - want) / np.maximum(mag, 1e-30)).max()) if got.size else 0.0


# M around the 6-row tile and past the 192-row M block, K around the
# 256-deep K block, N around the 8- and 16-column tiles.
GRID_M = (1, 5, 6, 7, 13, 64, 200)
GRID_K = (1, 2, 9, 147, 256, 257, 530)
GRID_N = (1, 7, 8, 9, 15, 16, 17, 33, 100)


@pytest.mark.parametrize("m", GRID_M)
def test_microkernel_matches_reference_on_the_grid(rng, m):
    worst = 0.0
    for k in GRID_K:
        for n in GRID_N:
            w = rng.standard_normal((m, k)).astype(np.float32)
            x = rng.standard_normal((k, n)).astype(np.float32)
            b = rng.standard_normal(m).astype(np.float32) if (k + n) % 2 else None
            got = _conv2d.gemm_microkernel(w, x, b)
            assert got.shape == (m, n)
            worst = max(worst, gemm_error(w, x, b, got))
    assert worst <= TOL


def test_microkernel_with_zero_depth_writes_the_bias():
    b = np.arange(7, dtype=np.float32)
    got = _conv2d.gemm_microkernel(np.zeros((7, 0), np.float32), np.zeros((0, 20), np.float32), b)
    np.testing.assert_array_equal(got, np.repeat(b[:, None], 20, axis=1))


def test_microkernel_cut_into_columns_gives_the_same_bits(rng):
    # Callers cut N by thread count; a column's sum must not depend on where
    # the cut falls (inside a 16-column panel or not).
    w = rng.standard_normal((13, 300)).astype(np.float32)
    x = rng.standard_normal((300, 97)).astype(np.float32)
    whole = _conv2d.gemm_microkernel(w, x)
    for cut in (1, 16, 40, 81):
        left = _conv2d.gemm_microkernel(w, np.ascontiguousarray(x[:, :cut]))
        right = _conv2d.gemm_microkernel(w, np.ascontiguousarray(x[:, cut:]))
        np.testing.assert_array_equal(np.concatenate([left, right], axis=1), whole)


def test_packed_weight_layout(rng):
    w = rng.standard_normal((8, 3, 2, 2)).astype(np.float32)   # 2 groups of 4 rows, k = 12
    wp = _conv2d.gemm_pack_weight(w, 2)
    assert wp.size == _conv2d.gemm_packed_floats(8, 12, 2) == 2 * 6 * 12
    panel = wp[:6 * 12].reshape(12, 6)                          # group 0: [k][row]
    np.testing.assert_array_equal(panel[:, :4], w[:4].reshape(4, 12).T)
    np.testing.assert_array_equal(panel[:, 4:], 0)
    with pytest.raises(ValueError, match="gemm_pack_weight"):
        _conv2d.gemm_pack_weight(w, 3)


# (x shape, weight shape, attrs): 1x1 with groups / batch / N tails, im2col
# with stride, padding, dilation, groups, the 7x7 stem shape class, conv1d.
CONV_CASES = [
    ((1, 64, 9, 11), (40, 64, 1, 1), {}),
    ((3, 48, 5, 7), (36, 16, 1, 1), {"groups": 3}),
    ((2, 33, 4, 4), (7, 33, 1, 1), {}),
    ((1, 3, 37, 41), (64, 3, 7, 7), {"stride": 2, "padding": 3}),
    ((2, 12, 13, 10), (21, 4, 3, 3), {"stride": 2, "padding": 1, "groups": 3}),
    ((1, 8, 15, 15), (11, 8, 3, 3), {"padding": 2, "dilation": 2}),
    ((2, 5, 9, 9), (13, 5, 2, 3), {"stride": (1, 2)}),
    ((2, 40, 70), (24, 40, 5), {"padding": 2}),
]


def _ref(x, w, b, attrs):
    nsp = x.ndim - 2
    s = attrs.get("stride", 1)
    p = attrs.get("padding", 0)
    d = attrs.get("dilation", 1)
    return conv_nd(x, w, b, stride=s, pads_begin=p, pads_end=p, dilation=d, groups=attrs.get("groups", 1))


@pytest.mark.parametrize("xs,ws,attrs", CONV_CASES)
@pytest.mark.parametrize("weight_as_input", [False, True])
def test_conv_on_the_microkernel_matches_reference(clean_conv_env, rng, xs, ws, attrs, weight_as_input):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    g = one_conv_graph(xs, w, b, weight_as_input=weight_as_input, **attrs)
    feeds = {"x": x, "w": w} if weight_as_input else {"x": x}
    for t in (1, 2):
        plan = rlx_cpu.compile(g, conv_algorithm="im2col", num_threads=t)
        assert conv_thunk(plan).packed
        assert rel_error(plan.run(feeds)[0], _ref(x, w, b, attrs)) <= TOL


def test_microkernel_results_do_not_depend_on_the_run_thread_count(clean_conv_env, rng):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    for xs, ws, attrs in CONV_CASES[:5]:
        g = one_conv_graph(xs, rng.standard_normal(ws).astype(np.float32),
                           rng.standard_normal(ws[0]).astype(np.float32), **attrs)
        plan = rlx_cpu.compile(g, conv_algorithm="im2col", num_threads=2, adaptive_threads=False)
        ctx = plan.new_context()
        ctx.load({"x": rng.standard_normal(xs).astype(np.float32)})
        seq = _runtime.LaunchSequence(ctx.launches)
        seq.run(2)
        two = [o.copy() for o in ctx.outputs]
        seq.run(1)
        for a, b in zip(two, ctx.outputs):
            np.testing.assert_array_equal(a, b)


def test_sgemm_and_microkernel_agree(clean_conv_env, rng):
    xs, ws = (1, 64, 14, 14), (32, 64, 1, 1)      # 196 pixels: auto may pick either
    x = rng.standard_normal(xs).astype(np.float32)
    g = one_conv_graph(xs, rng.standard_normal(ws).astype(np.float32),
                       rng.standard_normal(32).astype(np.float32))
    outs = []
    for flag in ("1", "0"):
        clean_conv_env.setenv("RLX_CONV_MICROKERNEL", flag)
        plan = rlx_cpu.compile(g)
        assert conv_thunk(plan).packed == (flag == "1")
        outs.append(plan.run({"x": x})[0])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4)


def _dims(c_in, c_out, k, h=8, w=8, groups=1):
    return Conv2DDims(1, c_in, h, w, c_out, h - k + 1, w - k + 1, k, k, 1, 1, 0, 0, 1, 1, groups)


def test_selection_rule():
    big, small = _dims(64, 32, 1, 28, 28), _dims(512, 2048, 1, 7, 7)   # 784 and 49 pixels
    gemm, im2col = ConvAlgorithm.GEMM_1X1, ConvAlgorithm.IM2COL
    assert prefers_conv_microkernel(small, im2col, ConvFlags(microkernel=True))
    assert not prefers_conv_microkernel(big, gemm, ConvFlags(microkernel=False))
    assert not prefers_conv_microkernel(big, ConvAlgorithm.WINOGRAD, ConvFlags(microkernel=True))
    # auto: only the AVX2+FMA variant, and only on planes where it measured faster
    assert prefers_conv_microkernel(big, gemm, ConvFlags()) == (_conv2d.simd_level() >= 1)
    assert prefers_conv_microkernel(_dims(1, 32, 3, 30, 30), im2col, ConvFlags()) == (_conv2d.simd_level() >= 1)
    assert not prefers_conv_microkernel(small, gemm, ConvFlags())


def test_flag_typo_raises(clean_conv_env):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "yess")
    with pytest.raises(ValueError, match="RLX_CONV_MICROKERNEL"):
        ConvFlags.from_env()


BASELINE_SCRIPT = r"""
import numpy as np, rlx_cpu, rlx_cpu._conv2d as c
from reference import conv_nd, rel_error
assert c.simd_level() == 0
rng = np.random.default_rng(11)
worst = 0.0
for m, k, n in [(13, 257, 33), (6, 9, 16), (64, 147, 50)]:
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    worst = max(worst, rel_error(c.gemm_microkernel(w, x), w.astype(np.float64) @ x))
for xs, ws, s, p in [((2, 40, 9, 7), (13, 40, 1, 1), 1, 0), ((1, 3, 30, 30), (17, 3, 7, 7), 2, 3)]:
    x = rng.standard_normal(xs).astype(np.float32)
    wt = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape)
    g.output(g.conv2d(xi, wt, b, stride=s, padding=p))
    plan = rlx_cpu.compile(g, conv_algorithm="im2col", num_threads=2)
    assert [t for t in plan.thunks if t.kind in ("conv", "conv_1x1")][0].packed
    y = plan.run({"x": x})[0]
    worst = max(worst, rel_error(y, conv_nd(x, wt, b, stride=s, pads_begin=p, pads_end=p)))
print(worst)
"""


def test_baseline_variant_matches_reference():
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline", RLX_CONV_MICROKERNEL="1")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", BASELINE_SCRIPT], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) <= TOL


def test_strided_im2col_rows_match_reference(rng):
    # The stride-2 row gather has a vector loop of 8 outputs that must stop
    # before reading past the row: widths around multiples of 8, with padding.
    w = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    for width in range(3, 41):
        for s, p in ((2, 0), (2, 1), (3, 1)):
            xs = (1, 2, 5, width)
            x = rng.standard_normal(xs).astype(np.float32)
            g = one_conv_graph(xs, w, stride=s, padding=p)
            y = rlx_cpu.compile(g, conv_algorithm="im2col").run({"x": x})[0]
            assert rel_error(y, _ref(x, w, None, {"stride": s, "padding": p})) <= TOL
