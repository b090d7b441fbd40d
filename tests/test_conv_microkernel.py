"""The conv GEMM microkernel (src/rlx_gemm.h) that the gemm_1x1 and im2col
algorithms run on instead of sgemm where it measured faster.

Checked against the float64 reference (1e-4 relative to the magnitude of the
sum) on a grid of M, K, N with every register-tile remainder, through whole
conv plans (groups, batch, strides, non-constant weights, conv1d), in both
SIMD variants, and for bitwise independence of the thread count."""

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _conv2d, _runtime
from rlx_cpu.algorithms import ConvAlgorithm, ConvFlags, conv_microkernel_layout, prefers_conv_microkernel
from rlx_cpu.ops.conv import Conv2DDims
from rlx_cpu.shapes import resolve_padding

from conftest import conv_thunk, one_conv_graph, run_script, script_array
import reference
from reference import conv_nd, rel_error

TOL = 1e-4


def gemm_error(w, x, b, got):
    """max |got - W.X - b| relative to |W|.|X| + |b| (the sum's magnitude)."""
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    want = w64 @ x64 + (0.0 if b is None else b.astype(np.float64)[:, None])
    mag = np.abs(w64) @ np.abs(x64) + (0.0 if b is None else np.abs(b.astype(np.float64))[:, None])
    return float((np.abs(got - want) / np.maximum(mag, 1e-30)).max()) if got.size else 0.0


# M around the 6-row tile and past the 192-row M block, K around the
# 256-deep K block, N around the 8- and 16-column tiles (and the AVX-512
# level's 32- and 64-column ones).
GRID_M = (1, 5, 6, 7, 13, 64, 200)
GRID_K = (1, 2, 9, 147, 256, 257, 530)
GRID_N = (1, 7, 8, 9, 15, 16, 17, 33, 100, 150)


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


@pytest.mark.parametrize("m", (1, 5, 6, 16, 24, 31, 32))
def test_few_rows_read_x_in_place_with_the_packed_bits(rng, m):
    # At most 32 rows (RLX_GEMM_INPLACE_MAX_M), column blocks of a multiple
    # of 16 columns read X in place instead of packing it: the same chain of
    # FMAs per element as the packed path, which rows past 32 still take.
    extra = rng.standard_normal((40 - m, 1)).astype(np.float32)
    for k, n in ((1, 16), (17, 64), (257, 208), (530, 80), (300, 100)):
        w = rng.standard_normal((m, k)).astype(np.float32)
        x = rng.standard_normal((k, n)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        for bias in (None, b):
            got = _conv2d.gemm_microkernel(w, x, bias)
            assert gemm_error(w, x, bias, got) <= TOL, (m, k, n)
            w40 = np.vstack([w, np.repeat(extra, k, axis=1)])
            b40 = None if bias is None else np.concatenate([bias, np.ones(40 - m, np.float32)])
            np.testing.assert_array_equal(got, _conv2d.gemm_microkernel(w40, x, b40)[:m])


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


@pytest.mark.parametrize("k", (1, 3, 16, 32, 33))
def test_shallow_gemms_in_wide_column_blocks(rng, k):
    # At most 32 rows of X (RLX_GEMM_ROWWISE_MAX_K), more than 32 rows of W:
    # column blocks of 16384 / k columns, swept two W panels at a time.  At
    # K = 16 and 32, N is two whole blocks and a part ending inside a panel;
    # at K = 1 and 3 (blocks of 16384 and 5456 columns) N is one partial
    # block; K = 33 takes the usual order.  M ends in an odd panel and
    # passes the 192-row M block.  Against the reference, and the same bits
    # however the columns are cut.
    for m in (33, 97, 200):
        n = 2 * (16384 // k // 16 * 16) + 37 if k > 3 else 5000
        w = rng.standard_normal((m, k)).astype(np.float32)
        x = rng.standard_normal((k, n)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        got = _conv2d.gemm_microkernel(w, x, b)
        assert gemm_error(w, x, b, got) <= TOL, (m, k, n)
        cut = n // 3 + 5
        left = _conv2d.gemm_microkernel(w, np.ascontiguousarray(x[:, :cut]), b)
        right = _conv2d.gemm_microkernel(w, np.ascontiguousarray(x[:, cut:]), b)
        np.testing.assert_array_equal(np.concatenate([left, right], axis=1), got)


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


# im2col shapes for the implicit patch matrix: strides, padding past the
# kernel, asymmetric pads, dilation, groups, batch, conv1d, a tall kernel.
IMPLICIT_CASES = [c for c in CONV_CASES if c[1][2:] != (1, 1)] + [
    ((1, 4, 11, 11), (6, 2, 5, 3), {"stride": (2, 3), "padding": ((1, 2), (0, 2)), "dilation": (1, 2),
                                    "groups": 2}),
    ((3, 2, 6, 5), (5, 2, 3, 3), {"padding": 3}),
    ((4, 1, 12, 12), (32, 1, 3, 3), {"padding": 1}),
    ((1, 6, 40), (10, 6, 7), {"stride": 3, "padding": ((3, 1),), "dilation": 2}),
    ((1, 3, 20, 9), (8, 3, 7, 1), {"stride": 2, "padding": (3, 0)}),
    ((2, 8, 9, 10), (5, 8, 1, 1), {"stride": 2}),              # one phase of four is read
    ((1, 4, 13, 13), (6, 4, 3, 3), {"stride": 3, "dilation": 3}),   # taps on one phase per axis
]


@pytest.mark.parametrize("xs,ws,attrs", IMPLICIT_CASES)
@pytest.mark.parametrize("epilogue", [None, "relu", "residual", "residual_clip", "hard_swish"])
def test_implicit_patch_matrix_gives_the_explicit_bits(clean_conv_env, rng, xs, ws, attrs, epilogue):
    """An im2col conv on the microkernel packs its GEMM panels from the
    phase-split input copy (packed = GEMM_LAYOUT_IMPLICIT), reads them in
    place from that copy (GEMM_LAYOUT_IMPLICIT_DIRECT, RLX_IMPLICIT_DIRECT=1)
    or packs them from the patch matrix it built (RLX_IMPLICIT_GEMM=0): the
    same bits, at 1 and 2 threads, weight constant or an input, with the
    epilogue in the register tile (relu, clip, residual) or after it
    (hard_swish), and within the float64 reference's tolerance."""
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    pb, pe = resolve_padding(attrs.get("padding", 0), xs[2:], ws[2:], None, None, "test")
    want = conv_nd(x, w, b, stride=attrs.get("stride", 1), pads_begin=pb, pads_end=pe,
                   dilation=attrs.get("dilation", 1), groups=attrs.get("groups", 1))
    for weight_as_input in (False, True):
        g = rlx_cpu.Graph()
        xi = g.input("x", xs)
        wv = g.input("w", ws) if weight_as_input else w
        y = {3: g.conv1d, 4: g.conv2d}[len(xs)](xi, wv, b, **attrs)
        feeds = {"x": x, "w": w} if weight_as_input else {"x": x}
        if epilogue == "relu":
            y = g.relu(y)
            ref = np.maximum(want, 0)
        elif epilogue in ("residual", "residual_clip"):
            r = rng.standard_normal(y.shape).astype(np.float32)
            y = g.add(y, g.input("r", y.shape))
            feeds["r"] = r
            ref = want + r
            if epilogue == "residual_clip":
                y = g.clip(y, 0.0, 6.0)
                ref = reference.clip(ref, 0.0, 6.0)
        elif epilogue == "hard_swish":
            y = g.hard_swish(y)
            ref = reference.hard_swish(want)
        else:
            ref = want
        g.output(y)
        outs = {}
        layouts = {"packed": ({"RLX_IMPLICIT_DIRECT": "0"}, _conv2d.GEMM_LAYOUT_IMPLICIT),
                   "direct": ({"RLX_IMPLICIT_DIRECT": "1"}, _conv2d.GEMM_LAYOUT_IMPLICIT_DIRECT),
                   "explicit": ({"RLX_IMPLICIT_GEMM": "0"}, _conv2d.GEMM_LAYOUT_ROWS)}
        for name, (env, layout) in layouts.items():
            for var in ("RLX_IMPLICIT_GEMM", "RLX_IMPLICIT_DIRECT"):
                clean_conv_env.delenv(var, raising=False)
            for var, val in env.items():
                clean_conv_env.setenv(var, val)
            for t in (1, 2):
                plan = rlx_cpu.compile(g, conv_algorithm="im2col", num_threads=t)
                th = conv_thunk(plan)
                assert th.packed == layout
                assert th.epilogue is not None or epilogue is None
                outs[name, t] = plan.run(feeds)[0]
        assert rel_error(outs["packed", 1], ref) <= TOL
        for key, got in outs.items():
            np.testing.assert_array_equal(got, outs["packed", 1], err_msg=str(key))


def test_implicit_launch_checks_its_scratch(rng):
    xs, ws = (1, 3, 9, 9), (4, 3, 3, 3)
    dims = (1, 3, 9, 9, 4, 4, 4, 3, 3, 2, 2, 0, 0, 1, 1, 1)
    need = _conv2d.scratch_floats(dims, _conv2d.ALGO_IM2COL, 1, _conv2d.GEMM_LAYOUT_IMPLICIT)
    assert need == _conv2d.implicit_floats(dims) + 16      # the copy and the slack the in-place reads may touch
    wp = _conv2d.gemm_pack_weight(rng.standard_normal(ws).astype(np.float32), 1)
    x = np.zeros(int(np.prod(xs)), np.float32)
    y = np.zeros(4 * 16, np.float32)
    with pytest.raises(ValueError, match="implicit im2col needs"):
        _conv2d.Conv2DLaunch(x, wp, None, y, np.zeros(need - 1, np.float32), dims, _conv2d.ALGO_IM2COL, 1,
                             packed=_conv2d.GEMM_LAYOUT_IMPLICIT)
    with pytest.raises(ValueError, match="does not fit"):
        _conv2d.Conv2DLaunch(x, wp, None, y, np.zeros(need, np.float32), dims, _conv2d.ALGO_DIRECT, 1,
                             packed=_conv2d.GEMM_LAYOUT_IMPLICIT)
    launch = _conv2d.Conv2DLaunch(x + 1, wp, None, y, np.zeros(need, np.float32), dims, _conv2d.ALGO_IM2COL, 1,
                                  packed=_conv2d.GEMM_LAYOUT_IMPLICIT)
    launch.execute(1)
    assert np.isfinite(y).all() and np.abs(y).sum() > 0


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
    # small 1x1 planes: the channel-panel variant, except 1 pixel (sgemm) and
    # multiples of 16 pixels (row panels); im2col keeps sgemm there
    assert prefers_conv_microkernel(small, gemm, ConvFlags()) == (_conv2d.simd_level() >= 1)
    assert not prefers_conv_microkernel(_dims(64, 32, 3, 9, 9), im2col, ConvFlags())
    assert not prefers_conv_microkernel(_dims(64, 32, 1, 1, 1), gemm, ConvFlags())
    if _conv2d.simd_level() >= 1:
        assert conv_microkernel_layout(small, gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_CHANNELS
        assert conv_microkernel_layout(_dims(64, 32, 1, 4, 4), gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_ROWS
        assert conv_microkernel_layout(big, gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_ROWS
        # 64..127 pixels: channel panels with the AVX-512 tiles when there are
        # at least as many input as output channels
        wide = _conv2d.GEMM_LAYOUT_CHANNELS if _conv2d.simd_level() >= 2 else _conv2d.GEMM_LAYOUT_ROWS
        assert conv_microkernel_layout(_dims(512, 128, 1, 10, 10), gemm, ConvFlags()) == wide
        assert conv_microkernel_layout(_dims(128, 512, 1, 10, 10), gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_ROWS
        assert conv_microkernel_layout(_dims(512, 128, 1, 12, 12), gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_ROWS
        assert conv_microkernel_layout(_dims(512, 128, 1, 14, 14), gemm, ConvFlags()) == _conv2d.GEMM_LAYOUT_ROWS
    assert conv_microkernel_layout(big, gemm, ConvFlags(microkernel=False)) == 0


def test_flag_typo_raises(clean_conv_env):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "yess")
    with pytest.raises(ValueError, match="RLX_CONV_MICROKERNEL"):
        ConvFlags.from_env()


BASELINE_SCRIPT = r"""
import numpy as np, rlx_cpu, rlx_cpu._conv2d as c
import reference
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


@pytest.mark.parametrize("direct", ["0", "1"])
def test_baseline_variant_matches_reference(direct):
    """The portable microkernel (RLX_SIMD=baseline), with an implicit im2col
    GEMM packing X or reading it in place."""
    out = run_script(BASELINE_SCRIPT, RLX_SIMD="baseline", RLX_CONV_MICROKERNEL="1", RLX_IMPLICIT_DIRECT=direct)
    assert float(out.strip()) <= TOL


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


# The fused epilogue (bias, residual, activation) on the microkernel: relu,
# clip and none run in the register tile (full-width tiles of the last K
# block), narrow tiles and other activations on the stored rows.  Shapes
# cover M, K and N remainders (tile rows 1..5, K past the 256-deep block, N
# tails of 1..15 columns and 64-column blocks) and batch 2.
EPILOGUE_ACTS = {
    None: ({}, lambda v: v),
    "relu": ({}, reference.relu),
    "clip": ({"alpha": 0.0, "beta": 6.0}, lambda v: reference.clip(v, 0.0, 6.0)),
    "leaky_relu": ({"alpha": 0.2}, lambda v: reference.leaky_relu(v, 0.2)),
    "hard_swish": ({}, reference.hard_swish),
}
EPILOGUE_SHAPES = [   # (x shape, c_out)
    ((1, 3, 1, 7), 1),
    ((2, 17, 3, 11), 13),
    ((1, 300, 5, 13), 7),
    ((2, 24, 9, 9), 40),
    ((1, 16, 8, 17), 200),
    ((1, 31, 2, 31), 31),
]


def _epilogue_block(rng, xs, co, act, bias, residual):
    w = (rng.standard_normal((co, xs[1], 1, 1)) / np.sqrt(xs[1])).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    ys = (xs[0], co, xs[2], xs[3])
    g = rlx_cpu.Graph()
    y = g.conv2d(g.input("x", xs), w, b if bias else None)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
    want = conv_nd(feeds["x"], w, b if bias else None)
    if residual:
        feeds["skip"] = rng.standard_normal(ys).astype(np.float32)
        y = g.add(y, g.input("skip", ys))
        want = want + feeds["skip"]
    kw, f = EPILOGUE_ACTS[act]
    if act is not None:
        y = getattr(g, act)(y, **kw)
    g.output(y)
    return g, feeds, f(want)


@pytest.mark.parametrize("act", list(EPILOGUE_ACTS))
@pytest.mark.parametrize("bias,residual", [(True, False), (False, True), (True, True)])
def test_fused_epilogue_on_the_microkernel(clean_conv_env, rng, act, bias, residual):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    # the NCHW 1x1 thunk's epilogue: a lone 1x1 on a mid-sized plane would
    # run blocked with the AVX2 tiles (ops/blocked.py dense_alone), whose
    # epilogue tests/test_blocked.py covers
    clean_conv_env.setenv("RLX_BLOCKED_LAYOUT", "0")
    for xs, co in EPILOGUE_SHAPES:
        g, feeds, want = _epilogue_block(rng, xs, co, act, bias, residual)
        for t in (1, 2):
            plan = rlx_cpu.compile(g, num_threads=t)
            (th,) = plan.thunks
            assert th.kind == "conv_1x1" and th.packed
            got = plan.run(feeds)[0]
            assert rel_error(got, want) <= TOL, (xs, co, t)
            unfused = rlx_cpu.compile(g, num_threads=t, passes=False).run(feeds)[0]
            if act == "hard_swish":
                # the epilogue's alpha * v + beta may contract to an FMA
                assert rel_error(got, unfused) <= TOL
            else:
                # the same arithmetic as the unfused chain (conv, add, activation)
                np.testing.assert_array_equal(got, unfused)


@pytest.mark.parametrize("act", ["relu", "clip"])
def test_fused_epilogue_on_the_microkernel_passes_nan(clean_conv_env, rng, act):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    g, feeds, _ = _epilogue_block(rng, (1, 8, 4, 16), 12, act, True, True)
    feeds["x"][0, 3, 1, 5] = np.nan
    got = rlx_cpu.compile(g).run(feeds)[0]
    assert np.isnan(got[0, :, 1, 5]).all() and not np.isnan(np.delete(got.reshape(12, -1), 21, axis=1)).any()
    np.testing.assert_array_equal(got, rlx_cpu.compile(g, passes=False).run(feeds)[0])


# The channel-panel variant (small 1x1 planes): 6 pixels x 16 output channels
# per tile (on the AVX-512 level 4, 2 or 1 panels of 16 at a time: M up to 7
# panels covers each grouping), so remainders are in M (channels past a
# multiple of 16) and in
# the pixel count (ceil(n / 6) tiles of nearly equal size); K around its blocks (rlx_gemm_ch_kc:
# 16 rows at 128-256 pixels, 40 at 49, 256 at 8 or fewer).
CH_GRID_M = (1, 5, 15, 16, 17, 31, 40, 64, 80, 100)
CH_GRID_K = (1, 2, 15, 17, 39, 41, 63, 64, 65, 300)
CH_GRID_N = (1, 2, 5, 6, 7, 13, 31, 49, 63, 100, 256)


@pytest.mark.parametrize("m", CH_GRID_M)
def test_channel_layout_matches_reference_and_the_row_layout(rng, m):
    worst = 0.0
    for k in CH_GRID_K:
        for n in CH_GRID_N:
            w = rng.standard_normal((m, k)).astype(np.float32)
            x = rng.standard_normal((k, n)).astype(np.float32)
            got = _conv2d.gemm_microkernel(w, x, layout=_conv2d.GEMM_LAYOUT_CHANNELS)
            worst = max(worst, gemm_error(w, x, None, got))
            # the same chain of FMAs per element as the row-panel kernel
            np.testing.assert_array_equal(got, _conv2d.gemm_microkernel(w, x))
            b = rng.standard_normal(m).astype(np.float32)
            got = _conv2d.gemm_microkernel(w, x, b, layout=_conv2d.GEMM_LAYOUT_CHANNELS)
            worst = max(worst, gemm_error(w, x, b, got))
    assert worst <= TOL


def test_channel_layout_packing_and_limits(rng):
    w = rng.standard_normal((20, 3)).astype(np.float32)
    wq = _conv2d.gemm_pack_weight(w, 1, _conv2d.GEMM_LAYOUT_CHANNELS)
    assert wq.size == _conv2d.gemm_packed_floats(20, 3, 1, _conv2d.GEMM_LAYOUT_CHANNELS) == 2 * 16 * 3
    panels = wq.reshape(2, 3, 16)                               # [panel][k][channel]
    np.testing.assert_array_equal(panels[0], w[:16].T)
    np.testing.assert_array_equal(panels[1, :, :4], w[16:].T)
    np.testing.assert_array_equal(panels[1, :, 4:], 0)
    with pytest.raises(ValueError, match="layout"):
        _conv2d.gemm_packed_floats(20, 3, 1, 5)
    too_wide = _conv2d.GEMM_CHANNELS_MAX_PIXELS + 1
    with pytest.raises(ValueError, match="channel layout"):
        _conv2d.gemm_microkernel(w, np.zeros((3, too_wide), np.float32), layout=_conv2d.GEMM_LAYOUT_CHANNELS)


# (x shape, c_out): 7x7 and odd small planes, batch > 1, channel remainders
CH_CONV_CASES = [((1, 40, 7, 7), 52), ((3, 17, 5, 3), 33), ((2, 70, 1, 1), 9), ((1, 9, 3, 3), 16),
                 ((8, 24, 7, 7), 40)]


@pytest.mark.parametrize("act", [None, "relu", "clip", "hard_swish"])
@pytest.mark.parametrize("bias,residual", [(True, False), (False, True), (True, True)])
def test_conv_on_the_channel_layout(clean_conv_env, rng, act, bias, residual):
    for xs, co in CH_CONV_CASES:
        g, feeds, want = _epilogue_block(rng, xs, co, act, bias, residual)
        for t in (1, 2):
            plan = rlx_cpu.compile(g, num_threads=t, conv_algorithm="im2col")
            (th,) = plan.thunks
            assert th.kind == "conv_1x1"
            if _conv2d.simd_level() >= 1 and xs[2] * xs[3] > 1:
                assert th.packed == _conv2d.GEMM_LAYOUT_CHANNELS
            got = plan.run(feeds)[0]
            assert rel_error(got, want) <= TOL, (xs, co, t)


def test_channel_layout_with_a_computed_weight(clean_conv_env, rng):
    # a weight that is a graph input: packed into channel panels at run time
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    xs, ws = (2, 24, 7, 7), (37, 24, 1, 1)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    plan = rlx_cpu.compile(one_conv_graph(xs, w, b, weight_as_input=True), num_threads=2)
    assert [t.kind for t in plan.thunks] == ["gemm_pack", "conv_1x1"]
    assert plan.thunks[0].layout == plan.thunks[1].packed == _conv2d.GEMM_LAYOUT_CHANNELS
    assert rel_error(plan.run({"x": x, "w": w})[0], _ref(x, w, b, {})) <= TOL


def test_channel_layout_results_do_not_depend_on_the_run_thread_count(clean_conv_env, rng):
    clean_conv_env.setenv("RLX_CONV_MICROKERNEL", "1")
    for xs, co in CH_CONV_CASES:
        g = one_conv_graph(xs, rng.standard_normal((co, xs[1], 1, 1)).astype(np.float32),
                           rng.standard_normal(co).astype(np.float32))
        plan = rlx_cpu.compile(g, num_threads=2, adaptive_threads=False)
        assert plan.thunks[-1].packed == _conv2d.GEMM_LAYOUT_CHANNELS
        ctx = plan.new_context()
        ctx.load({"x": rng.standard_normal(xs).astype(np.float32)})
        seq = _runtime.LaunchSequence(ctx.launches)
        seq.run(2)
        two = [o.copy() for o in ctx.outputs]
        seq.run(1)
        for a, b in zip(two, ctx.outputs):
            np.testing.assert_array_equal(a, b)


AVX512_SCRIPT = r"""
import sys
import numpy as np, rlx_cpu, rlx_cpu._conv2d as c
from test_conv_microkernel import EPILOGUE_SHAPES, _epilogue_block
rng = np.random.default_rng(5)
outs = []
# N from one pair of 16-column panels to several quads and pairs, with a
# single panel left over (its W panels two at a time: an odd count, a
# partial last one, across the 192-row M block); M around the 6-row tile; K
# across the 256-deep K block
for m, k, n in [(13, 257, 33), (6, 9, 32), (64, 147, 100), (200, 530, 64), (5, 300, 48), (1, 16, 130),
                (7, 40, 200), (4, 260, 96), (20, 70, 16), (12, 300, 48), (200, 64, 80), (11, 9, 16)]:
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    outs.append(c.gemm_microkernel(w, x, rng.standard_normal(m).astype(np.float32)))
    outs.append(c.gemm_microkernel(w, x))
# the implicit patch matrix read in place (few output channels, K >= 32):
# its AVX-512 tile, from 0 and through K blocks, with bias
for xs, ws_, st in [((1, 8, 20, 20), (24, 8, 3, 3), 1), ((2, 40, 9, 11), (13, 40, 3, 3), 2)]:
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", xs), rng.standard_normal(ws_).astype(np.float32),
                      rng.standard_normal(ws_[0]).astype(np.float32), stride=st, padding=1))
    plan = rlx_cpu.compile(g, num_threads=1, conv_algorithm="im2col", passes=False)
    assert plan.thunks[-1].packed == c.GEMM_LAYOUT_IMPLICIT_DIRECT, plan
    outs.append(plan.run({"x": rng.standard_normal(xs).astype(np.float32)})[0])
# the channel-panel variant: 4, 2 and 1 panels of 16 channels per AVX-512 tile
for m, k, n in [(100, 70, 49), (48, 300, 13), (64, 9, 100), (16, 40, 7)]:
    w = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    outs.append(c.gemm_microkernel(w, x, rng.standard_normal(m).astype(np.float32), layout=c.GEMM_LAYOUT_CHANNELS))
# the epilogue in registers (bias, residual, relu / clip) on 1x1 convs
for act, bias, residual in [("relu", True, True), ("clip", False, True), (None, True, False)]:
    for xs, co in EPILOGUE_SHAPES:
        g, feeds, _ = _epilogue_block(rng, xs, co, act, bias, residual)
        outs.append(rlx_cpu.compile(g, num_threads=1).run(feeds)[0])
np.save(sys.stdout.buffer, np.concatenate([o.reshape(-1) for o in outs]))
"""


def test_avx512_tiles_give_the_avx2_bits():
    """On an AVX-512 CPU the microkernel runs four or two 16-column panels
    as one zmm tile: the same chain of FMAs per element, so the AVX2 tiles'
    bits."""
    if _conv2d.simd_level() < 2:
        pytest.skip("this CPU has no AVX-512 (F, DQ, VL): only the AVX2 tiles run")
    # the 1x1 convs of the epilogue part stay NCHW at both levels: alone,
    # one of them runs blocked with the AVX2 tiles (ops/blocked.py) but not
    # with the AVX-512 ones, and the blocked kernel sums in another order
    avx2 = script_array(AVX512_SCRIPT, RLX_CONV_MICROKERNEL="1", RLX_SIMD="avx2", RLX_BLOCKED_LAYOUT="0")
    avx512 = script_array(AVX512_SCRIPT, RLX_CONV_MICROKERNEL="1", RLX_BLOCKED_LAYOUT="0")
    assert avx2.size > 10000
    np.testing.assert_array_equal(avx512, avx2)
