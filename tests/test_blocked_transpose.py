"""The blocked transposed conv (src/_nchwc.pyx NchwcConvTransposeLaunch: one
dense conv per output phase, then the phases' outputs scattered): its
launch against the float64 reference on grids of 2-D and 3-D geometries at
1 and 2 threads (the same bits on both), its phase plan, its bind-time
errors, and the blocked_layout pass rewriting conv_transpose1d/2d/3d."""
import numpy as np
import pytest

import rlx_cpu
from conftest import check_parity
from reference import conv_transpose_nd
from rlx_cpu import _nchwc, passes
from test_blocked import TWO, blocked_on, check_pickled_plan_runs_from_two_threads, compile_both, ops  # noqa: F401

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# (n, c_in, h, w, c_out, kernel, stride, pads_begin, pads_end, output_padding)
GRID = [
    (1, 64, 28, 28, 32, (4, 4), (2, 2), (1, 1), (1, 1), (0, 0)),     # a U-Net / DCGAN up-sampling layer
    (2, 16, 5, 7, 8, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),        # odd kernel, output padding
    (1, 8, 6, 6, 16, (2, 2), (2, 2), (0, 0), (0, 0), (0, 0)),        # k == s: no overlap, no padding
    (1, 8, 4, 9, 8, (5, 3), (3, 2), (2, 0), (1, 2), (1, 0)),         # per-axis kernel, stride, pads
    (1, 16, 1, 20, 8, (1, 16), (1, 8), (0, 4), (0, 4), (0, 0)),      # a conv_transpose1d as 2-D
    (3, 8, 7, 7, 8, (3, 3), (1, 1), (1, 1), (1, 1), (0, 0)),         # stride 1: one phase
    (1, 24, 3, 3, 40, (4, 4), (4, 4), (0, 0), (0, 0), (3, 3)),       # 16 phases, 8-wide last panel
    (1, 8, 2, 2, 8, (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),         # taps past the input on both sides
]


def out_size(n_in, k, s, pb, pe, op):
    return (n_in - 1) * s - pb - pe + k + op


def case(rng, n, c, h, w, m, kernel, bias=True):
    return volume_case(rng, n, c, (h, w), m, kernel, bias)


def volume_case(rng, n, c, in_sp, m, kernel, bias=True):
    x = rng.standard_normal((n, c) + tuple(in_sp)).astype(np.float32)
    wt = (rng.standard_normal((c, m) + kernel) * 0.3).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    return x, wt, b


def run_launch(x, wt, b, out_sp, stride, pads_begin, threads):
    """The launch on NCHW / NCDHW arrays (reordered in and out), scratch and
    output filled with NaN so that a place no phase writes shows."""
    n, c, in_sp = x.shape[0], x.shape[1], tuple(x.shape[2:])
    m, kernel, out_sp = wt.shape[1], tuple(wt.shape[2:]), tuple(out_sp)
    y = np.full(n * m * int(np.prod(out_sp)), np.nan, np.float32)
    scratch = np.full(_nchwc.transposed_scratch_floats(n, c, in_sp, m, out_sp, kernel, stride, pads_begin), np.nan,
                      np.float32)
    launch = _nchwc.NchwcConvTransposeLaunch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.pack_transposed_weight(wt, in_sp, out_sp, stride, pads_begin), b,
        y, scratch, n, c, in_sp, m, out_sp, kernel, stride, pads_begin, threads)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape((n, m // 8) + out_sp + (8,)))


@pytest.mark.parametrize("geom", range(len(GRID)))
@pytest.mark.parametrize("bias", [True, False])
def test_launch_matches_reference(rng, geom, bias):
    n, c, h, w, m, kernel, stride, pb, pe, op = GRID[geom]
    x, wt, b = case(rng, n, c, h, w, m, kernel, bias)
    ho, wo = out_size(h, kernel[0], stride[0], pb[0], pe[0], op[0]), out_size(w, kernel[1], stride[1], pb[1], pe[1],
                                                                              op[1])
    want = conv_transpose_nd(x, wt, b, stride, pb, pe, output_padding=op)
    assert want.shape[2:] == (ho, wo)
    outs = [run_launch(x, wt, b, (ho, wo), stride, pb, t) for t in TWO]
    for t, got in zip(TWO, outs):
        assert np.isfinite(got).all(), (geom, t)
        check_parity(got, want, "blocked conv_transpose launch")
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


# 3-D: (n, c_in, in_sp, c_out, kernel, stride, pads_begin, pads_end, output_padding)
GRID3 = [
    (1, 32, (4, 8, 8), 16, (4, 4, 4), (2, 2, 2), (1, 1, 1), (1, 1, 1), (0, 0, 0)),   # a 3-D U-Net up-sampling
    (2, 8, (3, 4, 5), 24, (3, 4, 3), (2, 2, 1), (1, 1, 0), (0, 1, 2), (1, 0, 0)),    # per-axis geometry
    (1, 16, (2, 3, 3), 8, (2, 2, 2), (2, 2, 2), (0, 0, 0), (0, 0, 0), (0, 0, 0)),    # k == s: no overlap
    (1, 8, (5, 2, 3), 8, (3, 1, 1), (1, 1, 1), (1, 0, 0), (1, 0, 0), (0, 0, 0)),     # stride 1: one phase
    (1, 8, (2, 2, 2), 40, (5, 3, 3), (2, 2, 2), (2, 2, 0), (1, 0, 2), (1, 1, 0)),    # taps past the input
]


@pytest.mark.parametrize("geom", range(len(GRID3)))
@pytest.mark.parametrize("bias", [True, False])
def test_launch_3d_matches_reference(rng, geom, bias):
    n, c, in_sp, m, kernel, stride, pb, pe, op = GRID3[geom]
    x, wt, b = volume_case(rng, n, c, in_sp, m, kernel, bias)
    out_sp = tuple(out_size(*a) for a in zip(in_sp, kernel, stride, pb, pe, op))
    want = conv_transpose_nd(x, wt, b, stride, pb, pe, output_padding=op)
    assert want.shape[2:] == out_sp
    outs = [run_launch(x, wt, b, out_sp, stride, pb, t) for t in TWO]
    for t, got in zip(TWO, outs):
        assert np.isfinite(got).all(), (geom, t)
        check_parity(got, want, "blocked conv_transpose3d launch")
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


def test_random_3d_geometries_match_reference():
    rng = np.random.default_rng(12)
    ran = 0
    while ran < 25:
        n, c, m = int(rng.integers(1, 3)), 8 * int(rng.integers(1, 3)), 8 * int(rng.integers(1, 3))
        in_sp = tuple(int(v) for v in rng.integers(1, 5, 3))
        kernel = tuple(int(v) for v in rng.integers(1, 5, 3))
        stride = tuple(int(v) for v in rng.integers(1, 3, 3))
        pb = tuple(int(v) for v in rng.integers(0, 4, 3))
        pe = tuple(int(v) for v in rng.integers(0, 4, 3))
        op = tuple(int(rng.integers(0, s)) for s in stride)
        out_sp = tuple(out_size(*a) for a in zip(in_sp, kernel, stride, pb, pe, op))
        if min(out_sp) < 1 or _nchwc._transposed_axes(in_sp, out_sp, kernel, stride, pb) is None:
            continue
        x, wt, b = volume_case(rng, n, c, in_sp, m, kernel)
        got = run_launch(x, wt, b, out_sp, stride, pb, 2)
        assert np.isfinite(got).all(), (n, c, in_sp, m, kernel, stride, pb, pe, op)
        check_parity(got, conv_transpose_nd(x, wt, b, stride, pb, pe, output_padding=op),
                     "blocked conv_transpose3d launch, random geometry")
        ran += 1


def test_phase_plan():
    # k4 s2 p1 from 28 to 56: phase 0 reads rows i-1, i (kernel rows 3, 1),
    # phase 1 rows i, i+1 (kernel rows 2, 0): one row of padding each side
    pads, phases = _nchwc.transposed_phase_plan(28, 28, 56, 56, (4, 4), (2, 2), (1, 1))
    assert pads == (1, 1, 1, 1)
    assert [(a, b) for a, b, *_ in phases] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert phases[0] == (0, 0, 2, 2, 1, 1, 28, 28, -1, -1)
    assert phases[3] == (1, 1, 2, 2, 0, 0, 28, 28, 0, 0)
    # a kernel smaller than its stride leaves a phase without taps; an output
    # smaller than the stride a phase without pixels
    assert _nchwc.transposed_phase_plan(4, 4, 11, 11, (2, 2), (3, 3), (0, 0)) is None
    assert _nchwc.transposed_phase_plan(1, 1, 1, 1, (1, 1), (2, 2), (0, 0)) is None


def test_bind_errors_name_the_op_argument_and_values(rng):
    x, wt, b = case(rng, 1, 16, 5, 5, 8, (4, 4))
    xb = _nchwc.to_blocked(x).reshape(-1)
    wq = _nchwc.pack_transposed_weight(wt, (5, 5), (10, 10), (2, 2), (1, 1))
    need = _nchwc.transposed_scratch_floats(1, 16, (5, 5), 8, (10, 10), (4, 4), (2, 2), (1, 1))
    y = np.zeros(8 * 100, np.float32)

    def bind(**kw):
        a = dict(x=xb, wq=wq, bias=b, y=y, scratch=np.zeros(need, np.float32), n=1, c=16, h=5, w=5, m=8, ho=10,
                 wo=10, kernel=(4, 4), stride=(2, 2), pads=(1, 1))
        a.update(kw)
        return _nchwc.NchwcConvTransposeLaunch(a["x"], a["wq"], a["bias"], a["y"], a["scratch"], a["n"], a["c"],
                                               (a["h"], a["w"]), a["m"], (a["ho"], a["wo"]), a["kernel"], a["stride"],
                                               a["pads"], 2)

    bind()
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: input channels .*12"):
        bind(c=12)
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: scratch"):
        bind(scratch=np.zeros(need - 1, np.float32))
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: needs a scratch of"):
        bind(scratch=None)
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: y"):
        bind(y=np.zeros(8 * 99, np.float32))
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: bias"):
        bind(bias=np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: packed weight"):
        bind(wq=wq[:-1])
    with pytest.raises(ValueError, match=r"stride \(5, 4\) makes 20 output phases, at most 16"):
        bind(stride=(5, 4))
    with pytest.raises(ValueError, match=r"kernel \(3, 3\) at stride \(4, 2\) .* without taps"):
        bind(kernel=(3, 3), stride=(4, 2))
    with pytest.raises(ValueError, match="pack_transposed_weight: kernel"):
        _nchwc.pack_transposed_weight(wt, (5, 5), (25, 25), (5, 5), (0, 0))
    with pytest.raises(ValueError, match=r"pack_transposed_weight: weight must be .* for 3 spatial axes"):
        _nchwc.pack_transposed_weight(wt, (1, 5, 5), (1, 10, 10), (1, 2, 2), (0, 1, 1))
    with pytest.raises(ValueError, match="conv_transpose2d_nchwc: input and output sizes, kernel, stride and "
                                         r"pads_begin need two or three values each, got \(5, 5\), \(10, 10\), "
                                         r"\(4, 4, 1\)"):
        bind(kernel=(4, 4, 1))


def test_3d_bind_errors_name_the_op_argument_and_values(rng):
    x, wt, b = volume_case(rng, 1, 8, (2, 3, 3), 8, (4, 4, 4))
    args = dict(x=_nchwc.to_blocked(x).reshape(-1), wq=_nchwc.pack_transposed_weight(wt, (2, 3, 3), (4, 6, 6),
                                                                                      (2, 2, 2), (1, 1, 1)),
                bias=b, y=np.zeros(8 * 144, np.float32), out_sp=(4, 6, 6), stride=(2, 2, 2))
    need = _nchwc.transposed_scratch_floats(1, 8, (2, 3, 3), 8, (4, 6, 6), (4, 4, 4), (2, 2, 2), (1, 1, 1))

    def bind(**kw):
        a = dict(args, scratch=np.zeros(need, np.float32))
        a.update(kw)
        return _nchwc.NchwcConvTransposeLaunch(a["x"], a["wq"], a["bias"], a["y"], a["scratch"], 1, 8, (2, 3, 3), 8,
                                               a["out_sp"], (4, 4, 4), a["stride"], (1, 1, 1), 2)

    bind()
    with pytest.raises(ValueError, match="conv_transpose3d_nchwc: y"):
        bind(y=np.zeros(8 * 143, np.float32))
    with pytest.raises(ValueError, match="conv_transpose3d_nchwc: scratch"):
        bind(scratch=np.zeros(need - 8, np.float32))
    with pytest.raises(ValueError, match=r"conv_transpose3d_nchwc: stride \(4, 2, 4\) makes 32 output phases"):
        bind(stride=(4, 2, 4))
    with pytest.raises(ValueError, match=r"conv_transpose3d_nchwc: kernel \(4, 4, 4\) at stride \(2, 2, 2\) from "
                                         r"2x3x3 to 1x6x6 has an output phase without taps or pixels"):
        bind(out_sp=(1, 6, 6), y=np.zeros(8 * 36, np.float32))


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------

def test_lone_transposed_convs_run_blocked(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 9, 9))
    wt = rng.standard_normal((16, 8, 4, 4)) * 0.3
    g.output(g.conv_transpose2d(x, wt, rng.standard_normal(8), stride=2, padding=1))
    out = passes.blocked_layout(g)
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 0, "transposed convs": 1, "pools": 0, "concats": 0,
                                                   "pointwise": 0, "reorders": 2})
    assert ops(out) == ["input", "constant", "constant", "to_nchwc", "conv_transpose2d_nchwc", "from_nchwc"]
    for t in TWO:
        blocked, plain = compile_both(g, t)
        assert [k.kind for k in blocked.thunks] == ["reorder_nchwc", "conv_transpose_nchwc", "reorder_nchwc"]
        feeds = {"x": rng.standard_normal((2, 16, 9, 9)).astype(np.float32)}
        got = blocked.run(feeds)[0]
        check_parity(got, plain.run(feeds)[0], "blocked conv_transpose plan vs NCHW plan")
        want = conv_transpose_nd(feeds["x"], wt.astype(np.float32), plain_bias(g), 2, 1, 1)
        check_parity(got, want, "blocked conv_transpose plan vs reference")


def plain_bias(g):
    """The bias constant of the graph's one transposed conv."""
    node = next(n for n in g.nodes if n.op == "conv_transpose2d")
    return g.node(node.inputs[2]).value


def test_conv_transpose1d_chain_runs_blocked(rng, blocked_on):
    # a vocoder's up-sampling stage: conv1d -> leaky_relu -> conv_transpose1d
    # k16 s8 -> leaky_relu -> conv1d: one chain, two reorders
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 32, 40))
    h = g.leaky_relu(g.conv1d(x, rng.standard_normal((32, 32, 7)) * 0.1, rng.standard_normal(32), padding=3), 0.1)
    h = g.leaky_relu(g.conv_transpose1d(h, rng.standard_normal((32, 16, 16)) * 0.1, rng.standard_normal(16),
                                        stride=8, padding=4), 0.1)
    g.output(g.conv1d(h, rng.standard_normal((16, 16, 7)) * 0.1, rng.standard_normal(16), padding=3))
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    log = out.pass_log[-1][1]
    assert log["transposed convs"] == 1 and log["convs"] == 2 and log["reorders"] == 2, log
    assert "conv_transpose1d" not in ops(out)
    blocked, plain = compile_both(g)
    feeds = {"x": rng.standard_normal((1, 32, 40)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked conv_transpose1d chain vs NCHW plan")


@pytest.mark.parametrize("kw", [dict(groups=2), dict(dilation=2), dict(stride=3)])
def test_transposed_convs_without_a_blocked_kernel_stay_nchw(rng, blocked_on, kw):
    # groups, dilation, or a kernel (2) smaller than its stride (3)
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 6, 6))
    groups = kw.get("groups", 1)
    g.output(g.conv_transpose2d(x, rng.standard_normal((16, 8 // groups, 2, 2)), **kw))
    out = passes.blocked_layout(g)
    assert "conv_transpose2d" in ops(out) and "conv_transpose2d_nchwc" not in ops(out)
    assert out.pass_log[-1][1]["reorders"] == 0


def test_channels_not_in_blocks_stay_nchw(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 12, 6, 6))
    g.output(g.conv_transpose2d(x, rng.standard_normal((12, 8, 4, 4)), stride=2, padding=1))
    assert "conv_transpose2d_nchwc" not in ops(passes.blocked_layout(g))


def test_lone_conv_transpose3d_runs_blocked(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 3, 5, 4))
    wt = rng.standard_normal((16, 8, 4, 4, 4)) * 0.3
    g.output(g.conv_transpose3d(x, wt, rng.standard_normal(8), stride=2, padding=1, output_padding=(1, 0, 1)))
    out = passes.blocked_layout(g)
    assert out.pass_log[-1][1]["transposed convs"] == 1 and out.pass_log[-1][1]["reorders"] == 2
    assert ops(out) == ["input", "constant", "constant", "to_nchwc", "conv_transpose3d_nchwc", "from_nchwc"]
    for t in TWO:
        blocked, plain = compile_both(g, t)
        assert [k.kind for k in blocked.thunks] == ["reorder_nchwc", "conv_transpose_nchwc", "reorder_nchwc"]
        feeds = {"x": rng.standard_normal((2, 16, 3, 5, 4)).astype(np.float32)}
        got = blocked.run(feeds)[0]
        want = conv_transpose_nd(feeds["x"], wt.astype(np.float32), g.node(next(
            n for n in g.nodes if n.op == "conv_transpose3d").inputs[2]).value, 2, 1, 1, output_padding=(1, 0, 1))
        assert got.shape == want.shape == (2, 8, 7, 10, 9)
        check_parity(got, want, "blocked conv_transpose3d plan vs reference")
        check_parity(got, plain.run(feeds)[0], "blocked conv_transpose3d plan vs NCHW plan")


def test_pickled_plan_runs_from_two_threads(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 7, 7))
    g.output(g.conv_transpose2d(x, rng.standard_normal((16, 16, 4, 4)) * 0.3, rng.standard_normal(16), stride=2,
                                padding=1))
    check_pickled_plan_runs_from_two_threads(rng, g, (1, 16, 7, 7), "conv_transpose_nchwc")


def test_random_geometries_match_reference():
    # padding past the kernel (cropped outputs), output padding, strides up
    # to 4 per axis: every geometry the phase plan takes
    rng = np.random.default_rng(11)
    ran = 0
    while ran < 40:
        n, c, m = int(rng.integers(1, 3)), 8 * int(rng.integers(1, 3)), 8 * int(rng.integers(1, 4))
        h, w = int(rng.integers(1, 7)), int(rng.integers(1, 7))
        kernel = (int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        stride = (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
        pb = (int(rng.integers(0, 6)), int(rng.integers(0, 6)))
        pe = (int(rng.integers(0, 6)), int(rng.integers(0, 6)))
        op = (int(rng.integers(0, stride[0])), int(rng.integers(0, stride[1])))
        ho = out_size(h, kernel[0], stride[0], pb[0], pe[0], op[0])
        wo = out_size(w, kernel[1], stride[1], pb[1], pe[1], op[1])
        if ho < 1 or wo < 1 or _nchwc.transposed_phase_plan(h, w, ho, wo, kernel, stride, pb) is None:
            continue
        x, wt, b = case(rng, n, c, h, w, m, kernel)
        got = run_launch(x, wt, b, (ho, wo), stride, pb, 2)
        assert np.isfinite(got).all(), (n, c, h, w, m, kernel, stride, pb, pe, op)
        check_parity(got, conv_transpose_nd(x, wt, b, stride, pb, pe, output_padding=op),
                     "blocked conv_transpose launch, random geometry")
        ran += 1
