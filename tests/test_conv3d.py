"""conv3d: parity with the float64 reference, path and thread invariance,
algorithm selection and build-time errors."""
import numpy as np
import pytest

import rlx_cpu as rc
from rlx_cpu import _runtime
from rlx_cpu.algorithms import ConvAlgorithm, ConvFlags, select_convnd_algorithm
from rlx_cpu.ops.conv import ConvNDDims

import reference as R

TOL = 1e-4
# Thread-split assertions need a build with OpenMP (without it every plan has 1 thread).
needs_openmp = pytest.mark.skipif(not _runtime.openmp_enabled(), reason="built without OpenMP")


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _run(x, w, b, algo, nthreads, weights_as_inputs=False, **kw):
    """Compile one conv3d and run it; returns (output, plan)."""
    g = rc.Graph()
    xi = g.input("x", x.shape)
    feeds = {"x": x}
    if weights_as_inputs:
        wv = g.input("w", w.shape)
        feeds["w"] = w
        bv = None
        if b is not None:
            bv = g.input("b", b.shape)
            feeds["b"] = b
    else:
        wv, bv = w, b
    g.output(g.conv3d(xi, wv, bv, **kw))
    plan = rc.compile(g, conv_algorithm=algo, num_threads=nthreads)
    return plan.run(feeds)[0], plan


def _case(seed):
    """A seeded random conv3d: batch 1 or >1, groups incl. depthwise, stride
    1-3, dilation 1-2, asymmetric pads, odd sizes, bias or not."""
    rng = np.random.default_rng(seed)
    groups = int(rng.choice([1, 1, 2, 3]))
    depthwise = rng.random() < 0.25
    cpg = 1 if depthwise else int(rng.integers(1, 4))
    cog = int(rng.integers(1, 3)) if not depthwise else 1
    c_in, c_out = cpg * groups, cog * groups
    n = int(rng.choice([1, 2, 3]))
    k = tuple(int(v) for v in rng.integers(1, 4, 3))
    s = tuple(int(v) for v in rng.integers(1, 4, 3))
    d = tuple(int(v) for v in rng.integers(1, 3, 3))
    pb = tuple(int(v) for v in rng.integers(0, 3, 3))
    pe = tuple(int(v) for v in rng.integers(0, 3, 3))
    # input large enough for at least one output on every axis
    sp = tuple(max(int(rng.integers(3, 9)), d[i] * (k[i] - 1) + 1 - pb[i] - pe[i]) for i in range(3))
    x = _rand(rng, n, c_in, *sp)
    w = _rand(rng, c_out, cpg, *k)
    b = _rand(rng, c_out) if rng.random() < 0.6 else None
    return x, w, b, dict(stride=s, padding=pb + pe, dilation=d, groups=groups), (pb, pe)


@pytest.mark.parametrize("seed", range(16))
@pytest.mark.parametrize("algo", ["reference", "im2col"])
def test_conv3d_matches_reference(seed, algo):
    x, w, b, kw, (pb, pe) = _case(seed)
    want = R.conv_nd(x, w, b, stride=kw["stride"], pads_begin=pb, pads_end=pe, dilation=kw["dilation"],
                     groups=kw["groups"])
    for nthreads in (1, 2):
        got, plan = _run(x, w, b, algo, nthreads, weights_as_inputs=bool(seed % 2), **kw)
        assert plan.thunks[-1].kind == "conv3d"
        assert plan.thunks[-1].algorithm == ConvAlgorithm(ConvAlgorithm.REFERENCE if algo == "reference"
                                                          else ConvAlgorithm.IM2COL)
        assert got.shape == want.shape
        assert R.rel_error(got, want) <= TOL, (seed, algo, nthreads)


@needs_openmp
@pytest.mark.parametrize("n,groups", [(1, 1), (1, 2), (4, 1), (3, 2)])
def test_conv3d_fast_vs_reference_and_threads(n, groups):
    rng = np.random.default_rng(100 + n * 10 + groups)
    x = _rand(rng, n, 4, 6, 7, 9)
    w = _rand(rng, 6, 4 // groups, 3, 3, 3)
    b = _rand(rng, 6)
    kw = dict(stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), groups=groups)
    ref, _ = _run(x, w, b, "reference", 1, **kw)
    fast1, _ = _run(x, w, b, "auto", 1, **kw)
    fast2, plan2 = _run(x, w, b, "auto", 2, **kw)
    assert plan2.thunks[0].algorithm == ConvAlgorithm.IM2COL
    launch = plan2.new_context().launches[0]
    # batch-parallel when there are enough (image, group) items, else split
    assert launch.parallel_mode(2) == ("items" if n * groups >= 2 else "split")
    assert R.rel_error(fast1, ref) <= TOL
    assert R.rel_error(fast2, fast1) <= TOL
    want = R.conv_nd(x, w, b, stride=(1, 2, 1), pads_begin=1, pads_end=1, dilation=(1, 1, 2), groups=groups)
    assert R.rel_error(fast2, want) <= TOL


@pytest.mark.parametrize("seed", range(16))
def test_conv3d_implicit_patch_matrix(seed, monkeypatch):
    """The GEMM path on the microkernel builds no patch matrix (one
    phase-split input copy per (image, group): src/rlx_implicit.h); it matches
    the float64 reference and the vol2col + sgemm path (RLX_IMPLICIT_GEMM=0),
    and a plan bound for 2 threads gives the same bits on 1."""
    if rc._conv2d.simd_level() < 1:
        monkeypatch.setenv("RLX_CONV_MICROKERNEL", "1")      # the portable microkernel
    x, w, b, kw, (pb, pe) = _case(seed)
    want = R.conv_nd(x, w, b, stride=kw["stride"], pads_begin=pb, pads_end=pe, dilation=kw["dilation"],
                     groups=kw["groups"])
    got, plan = _run(x, w, b, "auto", 2, weights_as_inputs=bool(seed % 2), **kw)
    (th,) = [t for t in plan.thunks if t.kind == "conv3d"]
    pointwise = w.shape[2:] == (1, 1, 1) and kw["stride"] == (1, 1, 1) and pb == pe == (0, 0, 0)
    assert bool(th.implicit) == (not pointwise)
    assert R.rel_error(got, want) <= TOL
    if not pointwise:
        # X packed from the input copy or read in place: the same bits
        for direct, mode in (("0", rc._convnd.IMPLICIT_PACKED), ("1", rc._convnd.IMPLICIT_DIRECT)):
            monkeypatch.setenv("RLX_IMPLICIT_DIRECT", direct)
            other, plan_d = _run(x, w, b, "auto", 2, weights_as_inputs=bool(seed % 2), **kw)
            assert plan_d.thunks[-1].implicit == mode
            np.testing.assert_array_equal(other, got)
        monkeypatch.delenv("RLX_IMPLICIT_DIRECT")
    monkeypatch.setenv("RLX_IMPLICIT_GEMM", "0")
    explicit, plan0 = _run(x, w, b, "auto", 2, **kw)
    assert not plan0.thunks[-1].implicit
    assert R.rel_error(explicit, got) <= TOL
    ctx = plan.new_context()
    ctx.load({"x": x, **({"w": w} if seed % 2 else {}), **({"b": b} if seed % 2 and b is not None else {})})
    seq = _runtime.LaunchSequence(ctx.launches)
    seq.run(2)
    two = ctx.outputs[0].copy()
    seq.run(1)
    np.testing.assert_array_equal(two, ctx.outputs[0])


@pytest.mark.parametrize("n", [1, 3])
def test_conv3d_column_blocks(n):
    """A patch matrix larger than one block is built block by block (blocks
    cut grid lines at arbitrary places); every block count gives the result."""
    rng = np.random.default_rng(60 + n)
    x = _rand(rng, n, 8, 12, 26, 34)
    w = _rand(rng, 5, 8, 3, 3, 3)
    b = _rand(rng, 5)
    want = R.conv_nd(x, w, b, pads_begin=(1, 0, 1), pads_end=(1, 2, 1))
    for nthreads in (1, 2):
        got, plan = _run(x, w, b, "im2col", nthreads, padding=(1, 0, 1, 1, 2, 1))
        launch = plan.new_context().launches[0]
        ncol = int(np.prod(got.shape[2:]))
        assert 0 < launch.block_cols < ncol and ncol % launch.block_cols != 0
        assert launch.block_cols % 34 != 0 and launch.block_cols % (28 * 34) != 0   # lines get cut
        assert plan.thunks[0].scratch.nbytes < 4 * 8 * 27 * ncol                    # never the whole matrix
        assert R.rel_error(got, want) <= TOL


@pytest.mark.parametrize("n", [1, 2])
def test_conv3d_pointwise_skips_scratch(n):
    rng = np.random.default_rng(7)
    x = _rand(rng, n, 5, 3, 4, 6)
    w = _rand(rng, 7, 5, 1, 1, 1)
    b = _rand(rng, 7)
    got, plan = _run(x, w, b, "im2col", 2)
    assert plan.thunks[0].scratch is None        # the input already is the patch matrix
    assert R.rel_error(got, R.conv_nd(x, w, b)) <= TOL


def test_conv3d_functional_weights_are_inputs():
    rng = np.random.default_rng(3)
    x = _rand(rng, 2, 3, 5, 5, 5)
    w1, w2 = _rand(rng, 4, 3, 3, 3, 3), _rand(rng, 4, 3, 3, 3, 3)
    b = _rand(rng, 4)
    y1 = rc.conv3d(x, w1, b, padding=1)
    y2 = rc.conv3d(x, w2, b, padding=1)         # same cached plan, new weights
    assert R.rel_error(y1, R.conv_nd(x, w1, b, pads_begin=1, pads_end=1)) <= TOL
    assert R.rel_error(y2, R.conv_nd(x, w2, b, pads_begin=1, pads_end=1)) <= TOL


def test_conv1d_conv2d_stay_on_conv2d_path():
    g = rc.Graph()
    x1 = g.input("a", (1, 2, 9))
    x2 = g.input("b", (1, 2, 6, 6))
    y1 = g.conv1d(x1, np.ones((3, 2, 3), np.float32))
    y2 = g.conv2d(x2, np.ones((3, 2, 3, 3), np.float32))
    g.output(y1, y2)
    kinds = {t.kind for t in rc.compile(g, num_threads=1).thunks}
    assert "conv3d" not in kinds and kinds <= {"conv", "conv_1x1", "winograd_filter"}


# -- algorithm selection -----------------------------------------------------------

def _dims(c_in=4, c_out=4, sp=(4, 4, 4), k=(3, 3, 3), groups=1):
    out = tuple(s - kk + 1 for s, kk in zip(sp, k))
    return ConvNDDims(1, c_in, c_out, groups, sp, out, k, (1, 1, 1), (0, 0, 0), (1, 1, 1))


def test_select_convnd_algorithm_rules():
    d = _dims()
    assert select_convnd_algorithm(d, flags=ConvFlags()) == ConvAlgorithm.IM2COL
    assert select_convnd_algorithm(d, flags=ConvFlags(fast=False)) == ConvAlgorithm.REFERENCE
    assert select_convnd_algorithm(d, "reference", ConvFlags()) == ConvAlgorithm.REFERENCE
    assert select_convnd_algorithm(d, "im2col", ConvFlags(fast=False)) == ConvAlgorithm.IM2COL
    for forced in ("direct", "winograd"):
        with pytest.raises(ValueError, match="conv1d/conv2d only"):
            select_convnd_algorithm(d, forced, ConvFlags())


def test_huge_patch_matrix_falls_back_to_reference():
    # A 600^3 volume is fine: the patch matrix is built in column blocks.
    big_volume = _dims(c_in=64, sp=(602, 602, 602))
    for transposed in (False, True):
        assert select_convnd_algorithm(big_volume, flags=ConvFlags(), transposed=transposed) == \
            ConvAlgorithm.IM2COL
    # 2^20 channels x 27 taps = 28 M rows: even 64-column blocks exceed the
    # 512 Mi-float scratch cap (the ISTFT-head lesson), so the reference runs.
    many_rows = _dims(c_in=2 ** 20, c_out=2 ** 20, sp=(10, 10, 10))
    for transposed in (False, True):
        assert select_convnd_algorithm(many_rows, flags=ConvFlags(), transposed=transposed) == \
            ConvAlgorithm.REFERENCE
        with pytest.raises(ValueError, match="at most 536870912 floats of patch-matrix scratch"):
            select_convnd_algorithm(many_rows, "im2col", ConvFlags(), transposed=transposed)


def test_fast_conv_env_off_selects_reference(monkeypatch):
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    rng = np.random.default_rng(5)
    x, w = _rand(rng, 1, 2, 4, 4, 4), _rand(rng, 3, 2, 2, 2, 2)
    got, plan = _run(x, w, None, "auto", 2)
    assert plan.thunks[0].algorithm == ConvAlgorithm.REFERENCE
    assert plan.thunks[0].scratch is None
    assert R.rel_error(got, R.conv_nd(x, w)) <= TOL


# -- build-time errors ------------------------------------------------------------------

@pytest.mark.parametrize("xshape,wshape,kw,match", [
    ((1, 2, 4, 4), (3, 2, 2, 2, 2), {}, r"conv3d: input must have rank 5"),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2), {}, r"conv3d: weight must have rank 5"),
    ((1, 4, 4, 4, 4), (3, 3, 2, 2, 2), {}, r"conv3d: channel mismatch.*input \[1, 4, 4, 4, 4\]"),
    ((1, 4, 4, 4, 4), (3, 2, 2, 2, 2), {"groups": 2}, r"conv3d: groups=2 does not divide out_channels=3"),
    ((1, 3, 4, 4, 4), (4, 1, 2, 2, 2), {"groups": 2}, r"conv3d: groups=2 does not divide in_channels=3"),
    ((1, 2, 4, 4, 4), (3, 2, 5, 2, 2), {}, r"conv3d: kernel extent 5 .* larger than padded input 4"),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), {"dilation": 4}, r"conv3d: kernel extent 5"),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), {"stride": (1, 0, 1)}, r"conv3d: stride must be >= 1"),
    ((1, 2, 4, 4, 4), (3, 2, 2, 2, 2), {"padding": (1, 2)}, r"conv3d: padding must have 3 values"),
])
def test_conv3d_build_errors(xshape, wshape, kw, match):
    g = rc.Graph()
    x = g.input("x", xshape)
    with pytest.raises(ValueError, match=match):
        g.conv3d(x, np.zeros(wshape, np.float32), **kw)


def test_conv3d_bias_shape_error():
    g = rc.Graph()
    x = g.input("x", (1, 2, 4, 4, 4))
    with pytest.raises(ValueError, match=r"conv3d: bias must have shape \[3\], got \[2\]"):
        g.conv3d(x, np.zeros((3, 2, 2, 2, 2), np.float32), np.zeros(2, np.float32))


def test_conv3d_forced_winograd_is_an_error():
    g = rc.Graph()
    x = g.input("x", (1, 2, 4, 4, 4))
    g.output(g.conv3d(x, np.zeros((3, 2, 3, 3, 3), np.float32)))
    with pytest.raises(ValueError, match="conv3d .*'winograd' exists for conv1d/conv2d only"):
        rc.compile(g, conv_algorithm="winograd")


# -- peer ---------------------------------------------------------------------------------

@pytest.mark.peer
@pytest.mark.parametrize("n,c_in,c_out,groups,sp,k,kw", [
    (1, 4, 6, 1, (6, 7, 8), (3, 3, 3), dict(stride=1, padding=1, dilation=1)),
    (2, 4, 4, 4, (5, 9, 6), (3, 1, 2), dict(stride=(2, 1, 3), padding=(1, 0, 1), dilation=(1, 2, 1))),
    (3, 6, 4, 2, (7, 5, 5), (2, 3, 3), dict(stride=2, padding=0, dilation=(2, 1, 1))),
])
def test_conv3d_matches_torch(n, c_in, c_out, groups, sp, k, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    x = _rand(rng, n, c_in, *sp)
    w = _rand(rng, c_out, c_in // groups, *k)
    b = _rand(rng, c_out)
    want = torch.nn.functional.conv3d(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b),
                                      groups=groups, **kw).numpy()
    got = rc.conv3d(x, w, b, groups=groups, **kw)
    assert R.rel_error(got, want) <= TOL
