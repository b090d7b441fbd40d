"""The blocked conv3d (src/_nchwc.pyx NchwcDense3dLaunch: the dense kernel
over the output volume of [N, C/8, D, H, W, 8] values): its launch against
the float64 reference on a grid of geometries at 1 and 2 threads (the same
bits on both), its bind-time errors, and the blocked_layout pass rewriting
conv3d."""
import numpy as np
import pytest

import rlx_cpu
from conftest import check_parity
from reference import conv_nd
from rlx_cpu import _nchwc, passes
from test_blocked import TWO, blocked_on, check_pickled_plan_runs_from_two_threads, compile_both, ops  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# (n, c_in, d, h, w, c_out, kernel, stride, pads_begin, pads_end, dilation, groups)
GRID = [
    (1, 16, 6, 8, 8, 32, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    (2, 8, 5, 7, 6, 16, (3, 2, 3), (2, 1, 2), (1, 0, 1), (0, 1, 1), (1, 1, 1), 1),   # per-axis everything
    (1, 16, 4, 6, 6, 16, (3, 3, 3), (1, 1, 1), (2, 2, 2), (2, 2, 2), (2, 2, 2), 2),  # dilated, two groups
    (1, 8, 3, 4, 5, 24, (1, 1, 1), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), 1),   # 1x1x1, 8-wide last panel
    (1, 8, 1, 1, 9, 8, (1, 1, 3), (1, 1, 1), (0, 0, 1), (0, 0, 1), (1, 1, 1), 1),    # a one-row volume
    (3, 24, 4, 5, 5, 8, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), (1, 1, 1), 1),   # strided, end padding only
    # one 16-channel panel on rows of 19 (AVX-512: wide tiles of 10 + 9
    # pixels) and of 7 at column stride 2
    (2, 16, 3, 5, 19, 16, (3, 3, 3), (1, 1, 1), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
    (1, 8, 3, 4, 14, 16, (3, 3, 3), (1, 1, 2), (1, 1, 1), (1, 1, 1), (1, 1, 1), 1),
]


def case(rng, n, c, d, h, w, m, kernel, groups=1, bias=True):
    x = rng.standard_normal((n, c, d, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c // groups) + kernel) * 0.3).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    return x, wt, b


def run_launch(x, wt, b, stride, pads_begin, pads_end, dilation, groups, threads):
    """The launch on NCDHW arrays (reordered in and out), scratch and output
    filled with NaN so that a place no tile writes shows."""
    n, c, d, h, w = x.shape
    m, kernel = wt.shape[0], wt.shape[2:]
    do, ho, wo = ((s + pb + pe - dl * (k - 1) - 1) // st + 1
                  for s, pb, pe, dl, k, st in zip((d, h, w), pads_begin, pads_end, dilation, kernel, stride))
    y = np.full(n * m * do * ho * wo, np.nan, np.float32)
    need = _nchwc.dense3d_scratch_floats(n, c, d, h, w, pads_begin, pads_end)
    scratch = np.full(need, np.nan, np.float32) if need else None
    wq = _nchwc.pack_dense_weight(wt.reshape(m, c // groups, kernel[0] * kernel[1], kernel[2]), groups)
    launch = _nchwc.NchwcDense3dLaunch(_nchwc.to_blocked(x).reshape(-1), wq, b, None, y, scratch, n, c, d, h, w, m,
                                       kernel, stride, pads_begin, pads_end, dilation, None, 0.0, 0.0, threads,
                                       groups)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, m // 8, do, ho, wo, 8))


@pytest.mark.parametrize("geom", range(len(GRID)))
@pytest.mark.parametrize("bias", [True, False])
def test_launch_matches_reference(rng, geom, bias):
    n, c, d, h, w, m, kernel, stride, pb, pe, dil, groups = GRID[geom]
    x, wt, b = case(rng, n, c, d, h, w, m, kernel, groups, bias)
    want = conv_nd(x, wt, b, stride, pb, pe, dil, groups)
    outs = [run_launch(x, wt, b, stride, pb, pe, dil, groups, t) for t in TWO]
    for t, got in zip(TWO, outs):
        assert got.shape == want.shape and np.isfinite(got).all(), (geom, t)
        check_parity(got, want, "blocked conv3d launch")
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


def test_bind_errors_name_the_op_argument_and_values(rng):
    x, wt, b = case(rng, 1, 16, 4, 5, 5, 8, (3, 3, 3))
    xb = _nchwc.to_blocked(x).reshape(-1)
    wq = _nchwc.pack_dense_weight(wt.reshape(8, 16, 9, 3))
    need = _nchwc.dense3d_scratch_floats(1, 16, 4, 5, 5, (1, 1, 1), (1, 1, 1))
    y = np.zeros(8 * 100, np.float32)

    def bind(**kw):
        a = dict(x=xb, wq=wq, bias=b, y=y, scratch=np.zeros(need, np.float32), c=16, m=8, kernel=(3, 3, 3),
                 stride=(1, 1, 1), pads=(1, 1, 1), groups=1)
        a.update(kw)
        return _nchwc.NchwcDense3dLaunch(a["x"], a["wq"], a["bias"], None, a["y"], a["scratch"], 1, a["c"], 4, 5, 5,
                                         a["m"], a["kernel"], a["stride"], a["pads"], a["pads"], (1, 1, 1), None,
                                         0.0, 0.0, 2, a["groups"])

    bind()
    with pytest.raises(ValueError, match="conv3d_nchwc dense: input channels per group .*12"):
        bind(c=12)
    with pytest.raises(ValueError, match=r"conv3d_nchwc dense: 16 input and 8 output channels do not split into 3"):
        bind(groups=3)
    with pytest.raises(ValueError, match="conv3d_nchwc dense: scratch holds"):
        bind(scratch=np.zeros(need - 1, np.float32))
    with pytest.raises(ValueError, match=f"conv3d_nchwc dense: needs a scratch of {need} floats"):
        bind(scratch=None)
    with pytest.raises(ValueError, match="conv3d_nchwc dense: y holds"):
        bind(y=np.zeros(8 * 99, np.float32))
    with pytest.raises(ValueError, match="conv3d_nchwc dense: packed weight"):
        bind(wq=wq[:-1])
    with pytest.raises(ValueError, match=r"need three values each, got \(3, 3\)"):
        bind(kernel=(3, 3))
    with pytest.raises(ValueError, match=r"conv3d_nchwc dense: empty output for input depth 4, kernel \(7, 3, 3\)"):
        bind(kernel=(7, 3, 3), pads=(0, 1, 1), scratch=np.zeros(
            _nchwc.dense3d_scratch_floats(1, 16, 4, 5, 5, (0, 1, 1), (0, 1, 1)), np.float32))


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------

def test_a_conv3d_chain_runs_blocked(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 6, 10, 10))
    w1 = rng.standard_normal((16, 16, 3, 3, 3)) * 0.2
    w2 = rng.standard_normal((32, 16, 3, 3, 3)) * 0.2
    w3 = rng.standard_normal((16, 32, 1, 1, 1)) * 0.2
    b1 = rng.standard_normal(16)
    h = g.relu(g.conv3d(x, w1, b1, padding=1))
    h = g.relu(g.conv3d(h, w2, None, padding=1, stride=2))
    g.output(g.conv3d(h, w3))
    out = passes.blocked_layout(g)
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 3, "transposed convs": 0, "pools": 0, "concats": 0,
                                                   "pointwise": 2, "reorders": 2})
    assert ops(out).count("conv3d_nchwc") == 3 and "conv3d" not in ops(out)
    xv = rng.standard_normal((1, 16, 6, 10, 10)).astype(np.float32)
    want = conv_nd(np.maximum(conv_nd(np.maximum(conv_nd(xv, w1, b1, 1, 1, 1), 0), w2, None, 2, 1, 1), 0), w3)
    for t in TWO:
        blocked, plain = compile_both(g, t)
        assert [k.kind for k in blocked.thunks].count("conv3d_nchwc") == 3
        got = blocked.run({"x": xv})[0]
        check_parity(got, plain.run({"x": xv})[0], "blocked conv3d chain vs NCHW plan")
        check_parity(got, want, "blocked conv3d chain vs reference")


def test_lone_conv3d_runs_blocked_but_not_a_1x1x1(rng, blocked_on):
    for kernel, blocked_expected in (((3, 3, 3), True), ((1, 1, 1), False)):
        g = rlx_cpu.Graph()
        x = g.input("x", (2, 8, 4, 6, 6))
        wt = rng.standard_normal((16, 8) + kernel) * 0.3
        b = rng.standard_normal(16)
        g.output(g.conv3d(x, wt, b, padding=kernel[0] // 2))
        out = passes.blocked_layout(g)
        assert ("conv3d_nchwc" in ops(out)) == blocked_expected, kernel
        blocked, _ = compile_both(g)
        xv = rng.standard_normal((2, 8, 4, 6, 6)).astype(np.float32)
        check_parity(blocked.run({"x": xv})[0], conv_nd(xv, wt, b, 1, kernel[0] // 2, kernel[0] // 2),
                     "blocked conv3d plan vs reference")


def test_conv3d_channels_not_in_blocks_stay_nchw(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 12, 4, 6, 6))
    g.output(g.conv3d(x, rng.standard_normal((8, 12, 3, 3, 3)), padding=1))
    assert "conv3d_nchwc" not in ops(passes.blocked_layout(g))
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 4, 6, 6))
    g.output(g.conv3d(x, rng.standard_normal((16, 4, 3, 3, 3)), padding=1, groups=4))   # 4 channels per group
    assert "conv3d_nchwc" not in ops(passes.blocked_layout(g))


def test_pickled_plan_runs_from_two_threads(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 4, 7, 7))
    g.output(g.conv3d(x, rng.standard_normal((16, 8, 3, 3, 3)) * 0.3, rng.standard_normal(16), padding=1))
    check_pickled_plan_runs_from_two_threads(rng, g, (1, 8, 4, 7, 7), "conv3d_nchwc")


def test_random_geometries_match_reference():
    rng = np.random.default_rng(12)
    ran = 0
    while ran < 40:
        groups = int(rng.choice([1, 1, 2]))
        n, c, m = int(rng.integers(1, 3)), 8 * groups * int(rng.integers(1, 3)), 8 * groups * int(rng.integers(1, 3))
        d, h, w = (int(rng.integers(1, 6)) for _ in range(3))
        kernel = tuple(int(rng.integers(1, 4)) for _ in range(3))
        stride = tuple(int(rng.integers(1, 3)) for _ in range(3))
        dil = tuple(int(rng.integers(1, 3)) for _ in range(3))
        pb = tuple(int(rng.integers(0, 3)) for _ in range(3))
        pe = tuple(int(rng.integers(0, 3)) for _ in range(3))
        if min((s + p0 + p1 - dl * (k - 1) - 1) // st + 1
               for s, p0, p1, dl, k, st in zip((d, h, w), pb, pe, dil, kernel, stride)) < 1:
            continue
        x, wt, b = case(rng, n, c, d, h, w, m, kernel, groups)
        got = run_launch(x, wt, b, stride, pb, pe, dil, groups, 2)
        assert np.isfinite(got).all(), (n, c, d, h, w, m, kernel, stride, pb, pe, dil, groups)
        check_parity(got, conv_nd(x, wt, b, stride, pb, pe, dil, groups), "blocked conv3d launch, random geometry")
        ran += 1
