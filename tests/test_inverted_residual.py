"""The fused inverted residual block (src/rlx_nchwc.h, rlx_nchwc_ir_run): its
launch against the three blocked kernels it replaces (the same bits) and the
float64 reference, at every band height and at 1 and 2 threads; its bind-time
errors; and the fuse_inverted_residual pass on its own."""
import numpy as np
import pytest

import rlx_cpu
from conftest import check_parity
from reference import conv_nd
from rlx_cpu import _nchwc, passes
from test_blocked import TWO, check_pickled_plan_runs_from_two_threads, epilogue64, run_1x1, run_dw

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ACTS = {"expand": ("clip", 0.0, 6.0), "dw": ("clip", 0.0, 6.0), "project": (None, 0.0, 0.0)}


def block_case(rng, n, c, e, m, h, w, expand=True, bias=True, residual=False, k=3):
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    we = (rng.standard_normal((e, c, 1, 1)) * 0.4).astype(np.float32) if expand else None
    be = rng.standard_normal(e).astype(np.float32) if expand and bias else None
    wd = (rng.standard_normal((e, 1, k, k)) * 0.4).astype(np.float32)
    bd = rng.standard_normal(e).astype(np.float32) if bias else None
    wp = (rng.standard_normal((m, e, 1, 1)) * 0.3).astype(np.float32)
    bp = rng.standard_normal(m).astype(np.float32) if bias else None
    return x, we, be, wd, bd, wp, bp, (x if residual else None)


def run_ir(x, we, be, wd, bd, wp, bp, res, stride, threads, band=None, acts=ACTS):
    """The fused launch on NCHW arrays (reordered in and out); the
    depthwise kernel's side k from wd."""
    n, c, h, w = x.shape
    e, m, k = wd.shape[0], wp.shape[0], wd.shape[2]
    ho, wo = (h - 1) // stride + 1, (w - 1) // stride + 1
    expand = we is not None
    if band is None:
        band = _nchwc.ir_band_rows(e, w, wo, ho, stride, expand, threads, k)
    scratch = np.full(_nchwc.ir_scratch_floats(e, w, wo, stride, band, expand, threads, k), np.nan, np.float32)
    y = np.full(n * m * ho * wo, np.nan, np.float32)
    launch = _nchwc.NchwcInvertedResidualLaunch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.pack_1x1_weight(we) if expand else None, be,
        _nchwc.pack_depthwise_weight(wd), bd, _nchwc.pack_1x1_weight(wp), bp,
        None if res is None else _nchwc.to_blocked(res).reshape(-1), y, scratch, n, c, e, m, h, w, stride, band,
        acts["expand"], acts["dw"], acts["project"], threads, k)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, m // 8, ho, wo, 8))


def run_three(x, we, be, wd, bd, wp, bp, res, stride, threads, acts=ACTS):
    """The same block as the three single blocked launches."""
    h = x
    if we is not None:
        h = run_1x1(h, we, be, None, acts["expand"][0], threads, *acts["expand"][1:])
    h = run_dw(h, wd, bd, None, stride, wd.shape[2] // 2, acts["dw"][0], threads, *acts["dw"][1:])
    return run_1x1(h, wp, bp, res, acts["project"][0], threads, *acts["project"][1:])


def reference(x, we, be, wd, bd, wp, bp, res, stride, acts=ACTS):
    h = np.asarray(x, np.float64)
    if we is not None:
        h = epilogue64(conv_nd(h, we), be, None, *acts["expand"])
    e, p = wd.shape[0], wd.shape[2] // 2
    h = epilogue64(conv_nd(h, wd, stride=stride, pads_begin=p, pads_end=p, groups=e), bd, None, *acts["dw"])
    return epilogue64(conv_nd(h, wp), bp, res, *acts["project"])


# (n, C, E, M, h, w, stride, expand, residual): odd planes, a plane of one
# row or column, M % 16 == 8, E over the 1x1 kernel's K block (256), two
# images, no expand (MobileNetV2's first block)
CASES = [(1, 16, 96, 24, 13, 11, 2, True, False),
         (2, 24, 48, 24, 9, 10, 1, True, True),
         (1, 8, 40, 16, 7, 7, 1, True, False),
         (1, 16, 272, 16, 5, 6, 1, True, True),
         (1, 8, 16, 8, 1, 9, 1, True, True),
         (2, 8, 16, 24, 6, 1, 2, True, False),
         (1, 32, 32, 16, 11, 9, 1, False, False),
         (2, 16, 16, 16, 8, 7, 2, False, False)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[:7])) + ("e" if c[7] else "") +
                         ("r" if c[8] else ""))
@pytest.mark.parametrize("k", [3, 5])
def test_fused_block_gives_the_three_kernels_bits_at_every_band(rng, case, k):
    # k: the depthwise 3x3 (MobileNetV2) or 5x5 (MNASNet, EfficientNet)
    n, c, e, m, h, w, s, expand, residual = case
    ops = block_case(rng, n, c, e, m, h, w, expand=expand, residual=residual, k=k)
    want = reference(*ops, s)
    ho = (h - 1) // s + 1
    for threads in TWO:
        three = run_three(*ops, s, threads)
        check_parity(three, want, "nchwc inverted residual")
        for band in range(1, ho + 1):
            got = run_ir(*ops, s, threads, band=band)
            np.testing.assert_array_equal(got, three, err_msg=f"band {band}, {threads} thread(s)")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("k", [3, 5])
def test_other_activations_and_no_bias(rng, bias, k):
    acts = {"expand": ("hard_swish", 1 / 6, 0.5), "dw": ("silu", 0.0, 0.0), "project": ("leaky_relu", 0.1, 0.0)}
    for stride in (1, 2):
        ops = block_case(rng, 1, 16, 32, 16, 9, 8, bias=bias, residual=stride == 1, k=k)
        for threads in TWO:
            got = run_ir(*ops, stride, threads, acts=acts)
            np.testing.assert_array_equal(got, run_three(*ops, stride, threads, acts=acts))
            check_parity(got, reference(*ops, stride, acts=acts), "nchwc inverted residual")


def test_band_rows_fit_the_buffer_and_split_over_the_threads():
    # 96 channels at 112x112, stride 2: one output row per band fits 48K floats
    assert _nchwc.ir_band_rows(96, 112, 56, 56, 2, True, 1) == 1
    for e, w, ho, s, expand, t, k in [(144, 56, 56, 1, True, 1, 3), (32, 112, 112, 1, False, 2, 3),
                                      (16, 8, 8, 1, True, 2, 3), (72, 56, 28, 2, True, 1, 5),
                                      (120, 28, 28, 1, True, 2, 5)]:
        band = _nchwc.ir_band_rows(e, w, (w - 1) // s + 1, ho, s, expand, t, k)
        need = (e * ((band - 1) * s + k) * w if expand else 0) + e * band * ((w - 1) // s + 1)
        assert _nchwc.ir_scratch_floats(e, w, (w - 1) // s + 1, s, band, expand, 1, k) == need
        assert 1 <= band <= -(-ho // t)
        assert band == 1 or need <= _nchwc.IR_BAND_FLOATS


def test_launch_refuses_bad_geometry():
    f = np.zeros(1 << 16, np.float32)
    L = _nchwc.NchwcInvertedResidualLaunch
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: expanded channels must be a positive multiple "
                                         r"of 8 for the blocked layout, got 12"):
        L(f, f, None, f, None, f, None, None, f, f, 1, 8, 12, 8, 4, 4, 1, 1)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: without an expand conv the depthwise conv has "
                                         r"the input's 8 channels, got 16"):
        L(f, None, None, f, None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 1, 1)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: the depthwise stride must be 1 or 2, got 3"):
        L(f, f, None, f, None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 3, 1)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: the depthwise kernel must be 3x3 or 5x5, got "
                                         r"7x7"):
        L(f, f, None, f, None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 1, 1, k=7)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: depthwise weight holds 144 floats, needs 400"):
        L(f, f, None, np.zeros(144, np.float32), None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 1, 1, k=5)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: band must be 1\.\.2 output rows, got 3"):
        L(f, f, None, f, None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 2, 3)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: scratch holds 10 floats, needs 384"):
        L(f, f, None, f, None, f, None, None, f, np.zeros(10, np.float32), 1, 8, 16, 8, 4, 4, 1, 2)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: residual holds 5 floats, needs 128"):
        L(f, f, None, f, None, f, None, np.zeros(5, np.float32), f, f, 1, 8, 16, 8, 4, 4, 1, 2)
    with pytest.raises(ValueError, match=r"inverted_residual_nchwc: activation must be one of"):
        L(f, f, None, f, None, f, None, None, f, f, 1, 8, 16, 8, 4, 4, 1, 2, ("tanh", 0.0, 0.0))


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------

@pytest.fixture
def fuse_small(monkeypatch):
    """The blocked layout on, and the fused block on planes of any size."""
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "1")
    monkeypatch.setattr(passes, "FUSE_IR_MIN_PLANE", 0)


def mbv2(rng, g, x, c, blocks, stride=1, first=False, k=3):
    """MobileNetV2 blocks: [expand 1x1 + clip6], depthwise k x k + clip6,
    project 1x1 (+ residual when the shapes allow)."""
    h = x
    for i in range(blocks):
        s = stride if i == 0 else 1
        cin = h.shape[1]
        e = h if first else g.clip(g.conv2d(h, rng.standard_normal((4 * c, cin, 1, 1)) * 0.3,
                                            rng.standard_normal(4 * c)), 0.0, 6.0)
        ec = e.shape[1]
        d = g.clip(g.conv2d(e, rng.standard_normal((ec, 1, k, k)) * 0.3, rng.standard_normal(ec), stride=s,
                            padding=k // 2, groups=ec), 0.0, 6.0)
        p = g.conv2d(d, rng.standard_normal((c, ec, 1, 1)) * 0.3, rng.standard_normal(c))
        h = g.add(p, h) if p.shape == h.shape else p
    return h


def kinds(plan):
    return [t.kind for t in plan.thunks]


def compile_pair(g, threads):
    fused = rlx_cpu.compile(g, num_threads=threads)
    plain = rlx_cpu.compile(g, num_threads=threads,
                            passes=[p for p in passes.DEFAULT_PASSES if p != "fuse_inverted_residual"])
    return fused, plain


@pytest.mark.parametrize("threads", TWO)
@pytest.mark.parametrize("k", [3, 5])
def test_pass_fuses_mobilenet_blocks_with_the_unfused_bits(rng, fuse_small, threads, k):
    # k: MobileNetV2's 3x3 depthwise, or MNASNet's and EfficientNet's 5x5
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 15, 13))
    h = mbv2(rng, g, x, 16, 1, first=True, k=k)               # no expand
    h = mbv2(rng, g, h, 24, 2, stride=2, k=k)                  # stride 2, then a residual block
    h = mbv2(rng, g, h, 24, 1, k=k)
    g.output(g.global_avg_pool(h))
    fused, plain = compile_pair(g, threads)
    assert kinds(fused).count("conv_nchwc_ir") == 4
    assert "conv_nchwc_dw" not in kinds(fused)
    assert "fuse_inverted_residual: 4 blocks, 1 without expand" in fused.pass_summary
    assert "fuse_inverted_residual: 4 blocks" in str(fused)
    xv = rng.standard_normal((2, 16, 15, 13)).astype(np.float32)
    got, want = fused.run({"x": xv})[0], plain.run({"x": xv})[0]
    np.testing.assert_array_equal(got, want)
    unblocked = rlx_cpu.compile(g, num_threads=threads, passes=False).run({"x": xv})[0]
    check_parity(got, unblocked, "fused inverted residual plan vs the unfused NCHW plan")


def test_pass_leaves_blocks_it_cannot_fuse(rng, fuse_small):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 9, 9))
    h = mbv2(rng, g, x, 16, 3)
    # a block whose expanded value is also a graph output: depthwise and
    # project still fuse, reading the expand conv's value from the arena
    e = g.clip(g.conv2d(h, rng.standard_normal((64, 16, 1, 1)) * 0.3), 0.0, 6.0)
    d = g.clip(g.conv2d(e, rng.standard_normal((64, 1, 3, 3)) * 0.3, padding=1, groups=64), 0.0, 6.0)
    p = g.conv2d(d, rng.standard_normal((16, 64, 1, 1)) * 0.3)
    # a depthwise conv with dilation 2 does not fuse
    d2 = g.conv2d(p, rng.standard_normal((16, 1, 3, 3)) * 0.3, padding=2, dilation=2, groups=16)
    q = g.conv2d(d2, rng.standard_normal((16, 16, 1, 1)) * 0.3)
    g.output(q, e)
    fused, plain = compile_pair(g, 1)
    assert kinds(fused).count("conv_nchwc_ir") == 4
    ir = [t for t in fused.thunks if t.kind == "conv_nchwc_ir"]
    assert [t.w_expand is None for t in ir] == [False, False, False, True]
    assert "fuse_inverted_residual: 4 blocks, 1 without expand" in fused.pass_summary
    xv = rng.standard_normal((1, 16, 9, 9)).astype(np.float32)
    for a, b in zip(fused.run({"x": xv}), plain.run({"x": xv})):
        np.testing.assert_array_equal(a, b)


def test_mobilenet_v1_chain_fuses_each_pointwise_conv_once(rng, fuse_small):
    # depthwise -> pointwise -> depthwise -> pointwise: the middle pointwise
    # conv is the first block's project, so the second block has no expand
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 10, 10))
    h = g.relu(g.conv2d(x, rng.standard_normal((16, 16, 1, 1)) * 0.3))
    for _ in range(2):
        h = g.relu(g.conv2d(h, rng.standard_normal((16, 1, 3, 3)) * 0.3, padding=1, groups=16))
        h = g.relu(g.conv2d(h, rng.standard_normal((16, 16, 1, 1)) * 0.3))
    g.output(h)
    fused, plain = compile_pair(g, 1)
    ir = [t for t in fused.thunks if t.kind == "conv_nchwc_ir"]
    assert [t.w_expand is None for t in ir] == [False, True]
    xv = rng.standard_normal((1, 16, 10, 10)).astype(np.float32)
    np.testing.assert_array_equal(fused.run({"x": xv})[0], plain.run({"x": xv})[0])


def test_small_planes_stay_unfused_by_default(rng, monkeypatch):
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "1")
    g = rlx_cpu.Graph()
    small = g.input("small", (1, 16, 28, 28))
    big = g.input("big", (1, 16, 56, 56))
    g.output(mbv2(rng, g, small, 16, 1), mbv2(rng, g, big, 16, 1))
    plan = rlx_cpu.compile(g, num_threads=1)
    ir = [t for t in plan.thunks if t.kind == "conv_nchwc_ir"]
    assert [t.h for t in ir] == [56]
    assert passes.FUSE_IR_MIN_PLANE == 56 * 56


def test_fused_plan_pickles_and_runs_from_two_threads(rng, fuse_small):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 12, 12))
    g.output(mbv2(rng, g, x, 16, 2))
    check_pickled_plan_runs_from_two_threads(rng, g, (1, 16, 12, 12), "conv_nchwc_ir")
