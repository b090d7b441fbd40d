"""conv_transpose1d/2d/3d: parity with the float64 scatter reference, PyTorch
output_size and ONNX auto_pad/output_shape semantics, path and thread
invariance, build-time errors and upstream regressions."""
import numpy as np
import pytest

import rlx_cpu as rc
from rlx_cpu import _runtime
from rlx_cpu.algorithms import ConvAlgorithm

import reference as R
from conftest import run_script

TOL = 1e-4
# Thread-split assertions need a build with OpenMP (without it every plan has 1 thread).
needs_openmp = pytest.mark.skipif(not _runtime.openmp_enabled(), reason="built without OpenMP")
OPS = {1: "conv_transpose1d", 2: "conv_transpose2d", 3: "conv_transpose3d"}


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def _graph(nsp, x_shape, w, b, weights_as_inputs=False, **kw):
    g = rc.Graph()
    xi = g.input("x", x_shape)
    extra = {}
    if weights_as_inputs:
        extra["w"] = w
        w = g.input("w", w.shape)
        if b is not None:
            extra["b"] = b
            b = g.input("b", b.shape)
    y = getattr(g, OPS[nsp])(xi, w, b, **kw)
    g.output(y)
    return g, y, extra


def _run(nsp, x, w, b, algo="auto", nthreads=1, weights_as_inputs=False, **kw):
    g, y, extra = _graph(nsp, x.shape, w, b, weights_as_inputs, **kw)
    plan = rc.compile(g, conv_algorithm=algo, num_threads=nthreads)
    return plan.run({"x": x, **extra})[0], plan, y


def _case(seed):
    """A seeded random conv-transpose of rank 1-3: batch 1 or >1, channels > 1,
    groups incl. depthwise, stride 1-3, dilation 1-2, asymmetric pads,
    output_padding (< stride or dilation), bias or not."""
    rng = np.random.default_rng(seed)
    nsp = 1 + seed % 3
    groups = int(rng.choice([1, 1, 2, 3]))
    depthwise = rng.random() < 0.25
    cig = 1 if depthwise else int(rng.integers(1, 4))
    cog = 1 if depthwise else int(rng.integers(1, 4))
    n = int(rng.choice([1, 2, 3]))
    k = [int(v) for v in rng.integers(1, 5 if nsp < 3 else 4, nsp)]
    s = [int(v) for v in rng.integers(1, 4, nsp)]
    d = [int(v) for v in rng.integers(1, 3, nsp)]
    sp = [int(v) for v in rng.integers(2, 9 if nsp < 3 else 6, nsp)]
    op = [int(rng.integers(0, max(s[i], d[i]))) for i in range(nsp)]
    pb, pe = [], []
    for i in range(nsp):
        extent = (sp[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 + op[i]
        a = int(rng.integers(0, 3))
        e = int(rng.integers(0, 3))
        while a + e >= extent:            # keep the output non-empty
            a, e = max(a - 1, 0), max(e - 1, 0)
        pb.append(a)
        pe.append(e)
    x = _rand(rng, n, cig * groups, *sp)
    w = _rand(rng, cig * groups, cog, *k)
    b = _rand(rng, cog * groups) if rng.random() < 0.6 else None
    kw = dict(stride=tuple(s), padding=tuple(pb + pe), output_padding=tuple(op), groups=groups,
              dilation=tuple(d))
    ref = dict(stride=s, pads_begin=pb, pads_end=pe, dilation=d, groups=groups, output_padding=op)
    return nsp, x, w, b, kw, ref


# Stride-1 conv-transposes of rank 1 and 2: (x shape, weight shape, padding,
# dilation, groups, output_padding).  Under auto they run as a forward conv
# with the flipped weight, except where a pad exceeds dilation*(k-1).
STRIDE1 = [
    ((2, 8, 9, 9), (8, 6, 3, 3), 1, 1, 1, 0),                  # 3x3 'same': Winograd-eligible
    ((1, 12, 10, 11), (12, 2, 3, 3), (1, 2, 0, 1), (1, 2), 4, 0),
    ((2, 4, 20), (4, 6, 5), (2, 1), 1, 1, 0),
    ((1, 6, 7, 7), (6, 1, 3, 3), 0, 2, 6, (1, 0)),            # depthwise, dilated, output_padding
    ((1, 3, 6, 6), (3, 5, 4, 4), (1, 2, 2, 1), 1, 1, 0),
    ((1, 4, 7, 7), (4, 4, 3, 3), 3, 1, 1, 0),                  # pad 3 > k-1: N-d kernels
]


@pytest.mark.parametrize("case", range(len(STRIDE1)))
@pytest.mark.parametrize("weights_as_inputs", [False, True])
def test_stride_1_runs_as_a_forward_conv(case, weights_as_inputs):
    xs, ws, pad, dil, groups, op = STRIDE1[case]
    nsp = len(xs) - 2
    rng = np.random.default_rng(300 + case)
    x, w, b = _rand(rng, *xs), _rand(rng, *ws), _rand(rng, ws[1] * groups)
    pads = (pad,) * 2 * nsp if isinstance(pad, int) else pad
    kw = dict(stride=1, padding=pads, dilation=dil, groups=groups, output_padding=op)
    dl = (dil,) * nsp if isinstance(dil, int) else dil
    lowered = all(d * (k - 1) >= max(pads[i], pads[nsp + i]) for i, (d, k) in enumerate(zip(dl, ws[2:])))
    want = R.conv_transpose_nd(x, w, b, stride=1, pads_begin=pads[:nsp], pads_end=pads[nsp:], dilation=dil,
                               groups=groups, output_padding=op)
    outs = []
    for nthreads in (1, 2):
        got, plan, _ = _run(nsp, x, w, b, "auto", nthreads, weights_as_inputs, **kw)
        kinds = [t.kind for t in plan.thunks]
        assert ("conv_transpose" not in kinds) == lowered, kinds
        assert ("weight_phase" in kinds) == (lowered and weights_as_inputs), kinds
        assert R.rel_error(got, want) <= TOL, (case, nthreads)
        outs.append(got)
    _same_bits_on_1_and_2_threads(plan, {"x": x, "w": w, "b": b} if weights_as_inputs else {"x": x})


@pytest.mark.parametrize("seed", range(24))
def test_auto_lowers_to_phase_convs_and_matches_reference(seed):
    """Under auto a conv-transpose runs as one forward conv per output
    phase of the stride (conv_backward.transposed_phases) plus the scatters
    into y, wherever the phases exist; the float64 reference either way, and
    the same bits at 1 and 2 threads."""
    from rlx_cpu.ops.conv import ConvNDDims
    from rlx_cpu.ops.conv_backward import transposed_phases
    nsp, x, w, b, kw, ref = _case(seed)
    want = R.conv_transpose_nd(x, w, b, **ref)
    outs = []
    for nthreads in (1, 2):
        got, plan, y = _run(nsp, x, w, b, "auto", nthreads, weights_as_inputs=bool(seed % 2), **kw)
        assert R.rel_error(got, want) <= TOL, (seed, nthreads)
        outs.append(got)
    g, y, _ = _graph(nsp, x.shape, w, b, **kw)
    d = ConvNDDims.from_attrs(x.shape, y.shape, g.node(y.id).attrs)
    phases = transposed_phases(d.n, d.c_in, d.c_out, d.in_sp, d.out_sp, d.kernel, d.stride, d.pad, d.dilation,
                               d.groups)
    kinds = [t.kind for t in plan.thunks]
    assert ("conv_transpose" in kinds) == (phases is None), kinds
    if phases is not None and "phase_scatter" in kinds:
        assert kinds.count("phase_scatter") == len(phases)
    _same_bits_on_1_and_2_threads(plan, {"x": x, **({"w": w, "b": b} if seed % 2 and b is not None else
                                                   {"w": w} if seed % 2 else {})})


# Shapes that fuse (channels past the small-conv direct kernel): (rank, n,
# c_in, c_out, groups, spatial, kernel, stride, padding (begin + end),
# output_padding, dilation).  Padding below and above the kernel's reach,
# phases of different tap counts (k 3 s 2: 2 and 1 taps, so 1x1 phases),
# mixed strides with a dilated stride-1 axis, groups, batch items.
PHASED = [
    (2, 1, 24, 20, 1, (28, 28), (4, 4), (2, 2), (1, 1, 1, 1), (0, 0), (1, 1)),
    (2, 3, 24, 20, 1, (9, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1)),
    (2, 1, 32, 24, 2, (10, 11), (5, 3), (3, 2), (1, 0, 2, 1), (0, 1), (1, 1)),
    (2, 2, 20, 18, 1, (12, 9), (3, 3), (2, 1), (1, 1, 2, 2), (1, 0), (1, 2)),
    (3, 1, 24, 20, 1, (4, 6, 5), (4, 4, 4), (2, 2, 2), (1,) * 6, (0, 0, 0), (1, 1, 1)),
    (3, 2, 18, 16, 1, (3, 5, 4), (3, 2, 3), (2, 1, 2), (1, 0, 1, 0, 0, 1), (1, 0, 0), (1, 1, 1)),
    (1, 2, 24, 20, 1, (40,), (16,), (8,), (4, 4), (0,), (1,)),
    (1, 1, 64, 48, 2, (33,), (5,), (3,), (2, 1), (2,), (1,)),
]


@pytest.mark.parametrize("case", range(len(PHASED)))
@pytest.mark.parametrize("bias", [False, True])
def test_phased_launch_matches_per_phase_path(case, bias, monkeypatch):
    """A constant-weight conv-transpose whose phases all run on the
    microkernel's in-place GEMM (RLX_CONV_MICROKERNEL=1, so small shapes
    take it too) runs as one conv_phases launch: one zero-padded copy of x,
    each phase's GEMM writing y at its strided places.  It matches the
    float64 reference, gives the bits of the per-phase convs + scatters
    (RLX_IMPLICIT_DIRECT=0: the packed GEMM, same arithmetic), and the same
    bits at 1 and 2 threads."""
    nsp, n, ci, co, groups, sp, k, st, pad, op, dil = PHASED[case]
    rng = np.random.default_rng(case)
    x = _rand(rng, n, ci, *sp)
    w = _rand(rng, ci, co // groups, *k)
    b = _rand(rng, co) if bias else None
    kw = dict(stride=st, padding=pad, output_padding=op, groups=groups, dilation=dil)
    want = R.conv_transpose_nd(x, w, b, stride=st, pads_begin=pad[:nsp], pads_end=pad[nsp:], dilation=dil,
                               groups=groups, output_padding=op)
    monkeypatch.setenv("RLX_CONV_MICROKERNEL", "1")
    # the NCHW phase kernels (channels in multiples of 8 would otherwise run
    # the blocked transposed kernel: test_blocked_transpose.py)
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "0")
    outs = {}
    for direct in ("1", "0"):
        monkeypatch.setenv("RLX_IMPLICIT_DIRECT", direct)
        for nthreads in (1, 2):
            got, plan, _ = _run(nsp, x, w, b, "auto", nthreads, **kw)
            kinds = [t.kind for t in plan.thunks]
            if direct == "1":
                assert kinds == ["conv_phases"], kinds
                assert "conv_phases" in str(plan)
            else:
                assert "conv_phases" not in kinds and "phase_scatter" in kinds, kinds
            assert R.rel_error(got, want) <= TOL, (direct, nthreads)
            outs[direct, nthreads] = got
        _same_bits_on_1_and_2_threads(plan, {"x": x})
    for t in (1, 2):
        np.testing.assert_array_equal(outs["1", t], outs["0", t])


@pytest.mark.parametrize("nsp,n,xs,k,s,p", [(2, 1, (28, 28), 4, 2, 1), (3, 1, (4, 6, 5), 4, 2, 1),
                                            (1, 2, (400,), 16, 8, 4)])
def test_phased_launch_by_default(nsp, n, xs, k, s, p, monkeypatch):
    """Default flags but the NCHW layout: shapes past the in-place GEMM's
    thresholds (>= 32 deep, <= 64 output channels) fuse where the AVX2
    microkernel runs."""
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "0")
    rng = np.random.default_rng(n * 100 + k)
    x = _rand(rng, n, 32, *xs)
    w = _rand(rng, 32, 24, *(k,) * nsp)
    b = _rand(rng, 24)
    got, plan, _ = _run(nsp, x, w, b, "auto", 2, stride=s, padding=p)
    assert ([t.kind for t in plan.thunks] == ["conv_phases"]) == bool(rc._conv2d.simd_level())
    want = R.conv_transpose_nd(x, w, b, stride=s, pads_begin=[p] * nsp, pads_end=[p] * nsp)
    assert R.rel_error(got, want) <= TOL


def test_phased_launch_checks_its_geometry():
    from rlx_cpu import _convnd
    x = np.zeros(2 * 3 * 5 * 5, np.float32)
    y = np.zeros(2 * 4 * 10 * 10, np.float32)
    wp = np.zeros(4096, np.float32)
    scratch = np.zeros(4096, np.float32)
    ok = ((1, 2, 2), (1, 1, 1), (0, 0, 0), (1, 5, 5), (0, 0, 0), 0)
    args = (x, wp, None, y, scratch, 2, 3, 4, 1, (1, 5, 5), (1, 10, 10), (0, 1, 1), (1, 7, 7), (1, 2, 2))
    _convnd.PhasedConvLaunch(*args, (ok,), 1)
    with pytest.raises(ValueError, match="does not fit the copy"):
        _convnd.PhasedConvLaunch(*args, (((1, 2, 2), (1, 1, 1), (0, 2, 2), (1, 5, 5), (0, 0, 0), 0),), 1)
    with pytest.raises(ValueError, match="does not fit the copy"):
        _convnd.PhasedConvLaunch(*args, (((1, 2, 2), (1, 1, 1), (0, 0, 0), (1, 5, 5), (0, 2, 2), 0),), 1)
    with pytest.raises(ValueError, match="packed weight"):
        _convnd.PhasedConvLaunch(*args, (((1, 2, 2), (1, 1, 1), (0, 0, 0), (1, 5, 5), (0, 0, 0), 4090),), 1)
    with pytest.raises(ValueError, match="scratch"):
        _convnd.PhasedConvLaunch(x, wp, None, y, np.zeros(10, np.float32), *args[5:], (ok,), 1)


def _same_bits_on_1_and_2_threads(plan, feeds):
    ctx = plan.new_context()
    ctx.load(feeds)
    seq = _runtime.LaunchSequence(ctx.launches)
    seq.run(2)
    two = ctx.outputs[0].copy()
    seq.run(1)
    np.testing.assert_array_equal(two, ctx.outputs[0])


@pytest.mark.parametrize("seed", range(24))
@pytest.mark.parametrize("algo", ["reference", "im2col"])
def test_conv_transpose_matches_reference(seed, algo):
    nsp, x, w, b, kw, ref = _case(seed)
    want = R.conv_transpose_nd(x, w, b, **ref)
    for nthreads in (1, 2):
        got, plan, _ = _run(nsp, x, w, b, algo, nthreads, weights_as_inputs=bool(seed % 2), **kw)
        th = plan.thunks[-1]
        assert th.kind == "conv_transpose"
        assert th.algorithm == (ConvAlgorithm.REFERENCE if algo == "reference" else ConvAlgorithm.IM2COL)
        assert got.shape == want.shape
        assert R.rel_error(got, want) <= TOL, (seed, algo, nthreads)


@needs_openmp
@pytest.mark.parametrize("nsp,n,groups", [(1, 1, 1), (2, 1, 1), (2, 1, 2), (2, 4, 1), (3, 1, 1), (3, 2, 3)])
def test_conv_transpose_fast_vs_reference_and_threads(nsp, n, groups):
    rng = np.random.default_rng(200 + 10 * nsp + n + groups)
    sp = {1: (11,), 2: (6, 7), 3: (3, 4, 5)}[nsp]
    k = {1: (4,), 2: (3, 4), 3: (2, 3, 3)}[nsp]
    x = _rand(rng, n, 3 * groups, *sp)
    w = _rand(rng, 3 * groups, 4, *k)
    b = _rand(rng, 4 * groups)
    kw = dict(stride=2, padding=1, output_padding=1, groups=groups, dilation=1)
    ref, _, _ = _run(nsp, x, w, b, "reference", 1, **kw)
    # the N-d GEMM kernel (auto lowers to forward convs:
    # test_auto_lowers_to_phase_convs_and_matches_reference)
    fast1, _, _ = _run(nsp, x, w, b, "im2col", 1, **kw)
    fast2, plan2, _ = _run(nsp, x, w, b, "im2col", 2, **kw)
    assert plan2.thunks[0].algorithm == ConvAlgorithm.IM2COL
    assert plan2.new_context().launches[0].parallel_mode(2) == ("items" if n * groups >= 2 else "split")
    assert R.rel_error(fast1, ref) <= TOL
    assert R.rel_error(fast2, fast1) <= TOL
    want = R.conv_transpose_nd(x, w, b, stride=2, pads_begin=1, pads_end=1, groups=groups, output_padding=1)
    assert R.rel_error(fast2, want) <= TOL


def test_conv_transpose_column_blocks():
    """A huge patch matrix is made block by block (each block: one GEMM, then
    col2vol); the result does not change."""
    rng = np.random.default_rng(70)
    x = _rand(rng, 1, 4, 12, 28, 34)
    w = _rand(rng, 4, 32, 3, 3, 3)
    b = _rand(rng, 32)
    want = R.conv_transpose_nd(x, w, b, stride=(1, 2, 1), pads_begin=(1, 0, 2), pads_end=(0, 1, 1))
    for nthreads in (1, 2):
        got, plan, _ = _run(3, x, w, b, "im2col", nthreads, stride=(1, 2, 1), padding=(1, 0, 2, 0, 1, 1))
        launch = plan.new_context().launches[0]
        ncol = 12 * 28 * 34
        assert 0 < launch.block_cols < ncol and ncol % launch.block_cols != 0
        assert R.rel_error(got, want) <= TOL


@pytest.mark.parametrize("nsp,n", [(1, 1), (2, 1), (2, 3), (3, 1)])
def test_conv_transpose_pointwise_writes_output_directly(nsp, n):
    rng = np.random.default_rng(nsp + n)
    x = _rand(rng, n, 6, *((5,) * nsp))
    w = _rand(rng, 6, 2, *((1,) * nsp))
    b = _rand(rng, 6)
    got, plan, _ = _run(nsp, x, w, b, "im2col", 2, groups=3)
    assert plan.thunks[0].scratch is None
    assert R.rel_error(got, R.conv_transpose_nd(x, w, b, groups=3)) <= TOL


# -- PyTorch output_size -----------------------------------------------------------

def test_output_size_picks_output_padding():
    rng = np.random.default_rng(1)
    x = _rand(rng, 2, 4, 5, 6)
    w = _rand(rng, 4, 3, 3, 3)
    b = _rand(rng, 3)
    # minimum sizes: (5-1)*3 - 2 + 2 + 1 = 13 and (6-1)*2 - 2 + 2*2 + 1 = 13
    for size in [(13, 13), (15, 14), (14, 13), (2, 3, 15, 14)]:
        got = rc.conv_transpose2d(x, w, b, stride=(3, 2), padding=1, dilation=(1, 2), output_size=size)
        op = (size[-2] - 13, size[-1] - 13)
        want = R.conv_transpose_nd(x, w, b, stride=(3, 2), pads_begin=1, pads_end=1, dilation=(1, 2),
                                   output_padding=op)
        assert got.shape == (2, 3) + tuple(size[-2:])
        assert R.rel_error(got, want) <= TOL


@pytest.mark.parametrize("size,match", [
    ((16, 13), r"output_size \[16, 13\] is not reachable: spatial axis 0 must be in \[13, 15\]"),
    ((13, 12), r"spatial axis 1 must be in \[13, 14\]"),
    ((13,), r"output_size must have 2 spatial sizes"),
    ((2, 3, 13, 13), r"output_size \[2, 3, 13, 13\] must start with \[N, C_out\] = \[1, 3\]"),
])
def test_output_size_unreachable(size, match):
    g = rc.Graph()
    x = g.input("x", (1, 4, 5, 6))
    with pytest.raises(ValueError, match=match):
        g.conv_transpose2d(x, np.zeros((4, 3, 3, 3), np.float32), stride=(3, 2), padding=1, dilation=(1, 2),
                           output_size=size)


# -- ONNX auto_pad and output_shape ---------------------------------------------------

def _onnx_pads(in_sp, k, s, d, op, target, upper):
    """ONNX ConvTranspose: total = s*(in-1) + op + ((k-1)*d+1) - out; the odd
    extra goes to the end for SAME_UPPER, to the beginning otherwise."""
    pb, pe = [], []
    for i in range(len(in_sp)):
        total = s[i] * (in_sp[i] - 1) + op[i] + ((k[i] - 1) * d[i] + 1) - target[i]
        assert total >= 0
        small = total // 2
        pb.append(small if upper else total - small)
        pe.append(total - small if upper else small)
    return pb, pe


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_auto_pad_same(mode, nsp):
    rng = np.random.default_rng(nsp)
    in_sp = (4, 5, 3)[:nsp]
    k, s, d, op = (4, 3, 3)[:nsp], (2, 3, 1)[:nsp], (1, 2, 1)[:nsp], (1, 0, 0)[:nsp]
    x = _rand(rng, 2, 4, *in_sp)
    w = _rand(rng, 4, 3, *k)
    b = _rand(rng, 3)
    got, plan, node = _run(nsp, x, w, b, "auto", 2, stride=s, padding=mode, output_padding=op, dilation=d)
    target = tuple(i * st for i, st in zip(in_sp, s))
    assert node.shape == (2, 3) + target                     # output = input * stride
    pb, pe = _onnx_pads(in_sp, k, s, d, op, target, mode == "SAME_UPPER")
    assert node.attrs.pads_begin == tuple(pb) and node.attrs.pads_end == tuple(pe)
    # at least one axis has an odd total, so the split direction is exercised
    assert any(a != e for a, e in zip(pb, pe))
    want = R.conv_transpose_nd(x, w, b, stride=s, pads_begin=pb, pads_end=pe, dilation=d, output_padding=op)
    assert R.rel_error(got, want) <= TOL


def test_auto_pad_valid_and_output_shape():
    rng = np.random.default_rng(9)
    x = _rand(rng, 1, 2, 5, 4)
    w = _rand(rng, 2, 3, 3, 2)
    got, _, node = _run(2, x, w, None, padding="VALID", stride=2)
    assert node.shape == (1, 3, 11, 8)
    assert R.rel_error(got, R.conv_transpose_nd(x, w, stride=2)) <= TOL
    for mode, upper in [(0, False), ("SAME_LOWER", False), ("SAME_UPPER", True), ("valid", False)]:
        got, _, node = _run(2, x, w, None, padding=mode, stride=2, output_shape=(8, 7))
        pb, pe = _onnx_pads((5, 4), (3, 2), (2, 2), (1, 1), (0, 0), (8, 7), upper)
        assert node.shape == (1, 3, 8, 7)
        want = R.conv_transpose_nd(x, w, stride=2, pads_begin=pb, pads_end=pe)
        assert R.rel_error(got, want) <= TOL, mode


def test_output_shape_beyond_kernel_reach_pads_the_tail():
    # kernel 1, stride 2: taps reach 2*in - 1 positions; SAME asks for 2*in,
    # so the last position holds only the bias (as ONNX Runtime)
    rng = np.random.default_rng(4)
    x = _rand(rng, 1, 3, 5)
    w = _rand(rng, 3, 2, 1)
    b = _rand(rng, 2)
    for mode in ("SAME_UPPER", "SAME_LOWER"):
        got, _, node = _run(1, x, w, b, padding=mode, stride=2)
        assert node.shape == (1, 2, 10)
        want = R.conv_transpose_nd(x, w, b, stride=2, output_padding=1)
        assert R.rel_error(got, want) <= TOL
        np.testing.assert_allclose(got[0, :, -1], b, rtol=0, atol=0)


# -- build-time errors ---------------------------------------------------------------

@pytest.mark.parametrize("xshape,wshape,kw,match", [
    ((1, 2, 4), (2, 3, 2, 2), {}, r"conv_transpose2d: input must have rank 4"),
    ((1, 2, 4, 4), (2, 3, 2), {}, r"conv_transpose2d: weight must have rank 4"),
    ((1, 4, 4, 4), (3, 2, 2, 2), {}, r"conv_transpose2d: channel mismatch: input has 4 channels but weight "
                                     r"dim 0 \(C_in\) is 3 \(input \[1, 4, 4, 4\], weight \[3, 2, 2, 2\]\)"),
    ((1, 3, 4, 4), (3, 2, 2, 2), {"groups": 2}, r"conv_transpose2d: groups=2 does not divide in_channels=3"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"groups": 0}, r"conv_transpose2d: groups must be a positive integer"),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"stride": 2, "output_padding": 2},
     r"output_padding must be smaller than stride or dilation.*output_padding=\(2, 2\), stride=\(2, 2\)"),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"output_padding": 1}, r"output_padding must be smaller than stride"),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"output_padding": -1}, r"output_padding must be >= 0"),
    ((1, 2, 2, 2), (2, 2, 1, 1), {"padding": 1},
     r"conv_transpose2d: output size 0 on spatial axis 0 is empty"),
    ((1, 2, 2, 2), (2, 2, 2, 2), {"padding": (0, 0, 4, 0)}, r"output size -1 on spatial axis 0 is empty"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"padding": "same"}, r"padding string must be 'valid', 'SAME_UPPER'"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"padding": 1, "output_shape": (8, 8)}, r"output_shape derives the pads"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"output_size": (5, 5), "output_shape": (5, 5)},
     r"output_size \(PyTorch\) or output_shape \(ONNX\), not both"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"stride": 2, "output_padding": 1, "output_size": (9, 9)},
     r"pass output_padding or output_size, not both"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"padding": "SAME_UPPER", "output_size": (8, 8)},
     r"output_size cannot be combined with padding='SAME_UPPER'"),
    ((1, 2, 4, 4), (2, 2, 2, 2), {"output_shape": (0, 5)}, r"output_shape must be >= 1"),
])
def test_conv_transpose_build_errors(xshape, wshape, kw, match):
    g = rc.Graph()
    x = g.input("x", xshape)
    with pytest.raises(ValueError, match=match):
        g.conv_transpose2d(x, np.zeros(wshape, np.float32), **kw)


def test_conv_transpose_bias_shape_error():
    g = rc.Graph()
    x = g.input("x", (1, 4, 3, 3, 3))
    with pytest.raises(ValueError, match=r"conv_transpose3d: bias must have shape \[6\], got \[3\]"):
        g.conv_transpose3d(x, np.zeros((4, 3, 2, 2, 2), np.float32), np.zeros(3, np.float32), groups=2)


def test_conv_transpose_forced_direct_is_an_error():
    g = rc.Graph()
    x = g.input("x", (1, 2, 4))
    g.output(g.conv_transpose1d(x, np.zeros((2, 3, 3), np.float32)))
    with pytest.raises(ValueError, match=r"conv_transpose1d .*'direct' exists for conv1d/conv2d only"):
        rc.compile(g, conv_algorithm="direct")


# -- upstream regressions (NOTES.md) ---------------------------------------------------

@pytest.mark.parametrize("nsp", [2, 3])
def test_regression_dilation_and_output_padding_not_dropped(nsp):
    """Upstream dropped dilation and output_padding: both must change the
    output shape and values exactly as the reference says."""
    rng = np.random.default_rng(30 + nsp)
    x = _rand(rng, 1, 2, *((4,) * nsp))
    w = _rand(rng, 2, 3, *((3,) * nsp))
    plain, _, _ = _run(nsp, x, w, None, stride=2)
    for algo in ("reference", "im2col"):
        got, _, node = _run(nsp, x, w, None, algo, 2, stride=2, dilation=2, output_padding=1)
        # (4-1)*2 + 2*(3-1) + 1 + 1 = 12 per axis (9 without dilation and output_padding)
        assert node.shape == (1, 3) + (12,) * nsp
        assert plain.shape == (1, 3) + (9,) * nsp
        want = R.conv_transpose_nd(x, w, stride=2, dilation=2, output_padding=1)
        assert R.rel_error(got, want) <= TOL
        # the dilated taps land elsewhere than undilated ones would
        assert R.rel_error(got[(Ellipsis,) + (slice(0, 9),) * nsp], plain) > 0.1


@needs_openmp
@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_regression_batch1_conv_transpose_uses_every_thread(nsp):
    """Upstream ran conv-transpose on one core at batch 1.  At batch 1 with
    groups 1 the fast path must split its work over the threads (GEMM panels,
    then col2vol by output channel) and give the 1-thread result."""
    rng = np.random.default_rng(40 + nsp)
    sp = {1: (40,), 2: (9, 11), 3: (4, 5, 6)}[nsp]
    x = _rand(rng, 1, 8, *sp)
    w = _rand(rng, 8, 6, *((3,) * nsp))
    b = _rand(rng, 6)
    # the N-d GEMM kernel (auto lowers to forward convs, whose batch-1
    # splits test_threads.py covers)
    y1, p1, _ = _run(nsp, x, w, b, "im2col", 1, stride=2, padding=1, output_padding=1)
    y2, p2, _ = _run(nsp, x, w, b, "im2col", 2, stride=2, padding=1, output_padding=1)
    assert p2.thunks[0].algorithm == ConvAlgorithm.IM2COL
    assert p2.num_threads == 2
    assert p2.new_context().launches[0].parallel_mode(2) == "split"
    assert R.rel_error(y2, y1) <= 1e-6
    want = R.conv_transpose_nd(x, w, b, stride=2, pads_begin=1, pads_end=1, output_padding=1)
    assert R.rel_error(y2, want) <= TOL
    ya, pa, _ = _run(nsp, x, w, b, "auto", 2, stride=2, padding=1, output_padding=1)
    assert "conv_transpose" not in [t.kind for t in pa.thunks]
    assert [t.kind for t in pa.thunks].count("phase_scatter") == 2 ** nsp
    assert R.rel_error(ya, want) <= TOL


# -- functional ----------------------------------------------------------------------------

def test_functional_weights_are_inputs_and_cached():
    rng = np.random.default_rng(12)
    x = _rand(rng, 2, 4, 3, 4, 5)
    w1, w2 = _rand(rng, 4, 2, 2, 2, 2), _rand(rng, 4, 2, 2, 2, 2)
    y1 = rc.conv_transpose3d(x, w1, None, 2, 0, 1, 2)
    y2 = rc.conv_transpose3d(x, w2, None, 2, 0, 1, 2)
    assert R.rel_error(y1, R.conv_transpose_nd(x, w1, stride=2, output_padding=1, groups=2)) <= TOL
    assert R.rel_error(y2, R.conv_transpose_nd(x, w2, stride=2, output_padding=1, groups=2)) <= TOL
    y3 = rc.conv_transpose1d(x[:, :, 0, 0], w1[:, :, 0, 0], stride=3, output_size=(16,), groups=2)
    assert y3.shape == (2, 4, 16)
    want = R.conv_transpose_nd(x[:, :, 0, 0], w1[:, :, 0, 0], stride=3, output_padding=2, groups=2)
    assert R.rel_error(y3, want) <= TOL


# -- peer -------------------------------------------------------------------------------------

@pytest.mark.peer
@pytest.mark.parametrize("nsp,n,c_in,c_out,groups,sp,k,kw", [
    (1, 2, 4, 6, 2, (9,), (5,), dict(stride=3, padding=2, output_padding=1, dilation=1)),
    (2, 1, 8, 4, 1, (7, 6), (4, 4), dict(stride=2, padding=1, output_padding=0, dilation=1)),
    (2, 3, 6, 6, 6, (5, 8), (3, 3), dict(stride=(2, 1), padding=(1, 2), output_padding=(1, 0),
                                         dilation=(1, 2))),
    (3, 2, 4, 4, 2, (3, 4, 5), (3, 2, 3), dict(stride=(1, 2, 2), padding=(1, 0, 1), output_padding=(0, 1, 1),
                                               dilation=(2, 1, 1))),
])
def test_conv_transpose_matches_torch(nsp, n, c_in, c_out, groups, sp, k, kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    x = _rand(rng, n, c_in, *sp)
    w = _rand(rng, c_in, c_out // groups, *k)
    b = _rand(rng, c_out)
    fn = getattr(torch.nn.functional, OPS[nsp])
    want = fn(torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(b), groups=groups, **kw).numpy()
    got = getattr(rc, OPS[nsp])(x, w, b, groups=groups, **kw)
    assert R.rel_error(got, want) <= TOL


@pytest.mark.peer
def test_output_size_matches_torch_module():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(22)
    m = torch.nn.ConvTranspose2d(3, 5, (3, 4), stride=(2, 3), padding=1)
    x = _rand(rng, 2, 3, 6, 5)
    with torch.no_grad():
        want = m(torch.from_numpy(x), output_size=(12, 14)).numpy()
    got = rc.conv_transpose2d(x, m.weight.detach().numpy(), m.bias.detach().numpy(), stride=(2, 3), padding=1,
                              output_size=(12, 14))
    assert got.shape == want.shape == (2, 5, 12, 14)
    assert R.rel_error(got, want) <= TOL


PHASED_BASELINE_SCRIPT = """
import sys, numpy as np, rlx_cpu, os
import reference as R
from test_conv_transpose import PHASED, _rand, _run
worst, fused = 0.0, 0
for case in (0, 1, 3, 4, 5):
    nsp, n, ci, co, groups, sp, k, st, pad, op, dil = PHASED[case]
    rng = np.random.default_rng(case)
    x = _rand(rng, n, ci, *sp)
    w = _rand(rng, ci, co // groups, *k)
    b = _rand(rng, co)
    kw = dict(stride=st, padding=pad, output_padding=op, groups=groups, dilation=dil)
    want = R.conv_transpose_nd(x, w, b, stride=st, pads_begin=pad[:nsp], pads_end=pad[nsp:], dilation=dil,
                               groups=groups, output_padding=op)
    got, plan, _ = _run(nsp, x, w, b, "auto", 2, **kw)
    fused += [t.kind for t in plan.thunks] == ["conv_phases"]
    worst = max(worst, R.rel_error(got, want))
print(fused, worst)
"""


@pytest.mark.parametrize("direct", ["0", "1"])
def test_phased_launch_portable_variant(direct):
    """The portable kernels (RLX_SIMD=baseline): the fused launch's scalar
    tiles and strided stores (RLX_IMPLICIT_DIRECT=1), or the per-phase
    packed path (=0), within the float64 reference's tolerance."""
    fused, worst = run_script(PHASED_BASELINE_SCRIPT, RLX_SIMD="baseline", RLX_CONV_MICROKERNEL="1",
                              RLX_IMPLICIT_DIRECT=direct).split()
    assert int(fused) == (5 if direct == "1" else 0)
    assert float(worst) <= TOL


# Depthwise (one output channel per input channel) conv-transposes of rank
# 1 and 2 under auto: (x shape, kernel, stride, padding (begin + end),
# output_padding).  Strides 1-3, kernels from the stride to 5, padding
# within and at the kernel's reach, odd widths (the 8-wide vector tails).
DEPTHWISE_T = [
    ((1, 64, 28, 28), (4, 4), (2, 2), (1, 1, 1, 1), (0, 0)),
    ((2, 8, 9, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 5, 6, 11), (5, 3), (3, 2), (1, 0, 2, 1), (0, 1)),
    ((1, 4, 13), (4,), (2,), (1, 1), (0,)),
    ((3, 3, 17), (5,), (3,), (2, 0), (2,)),
    ((1, 6, 5, 19), (2, 2), (2, 2), (0, 0, 0, 0), (0, 0)),
    ((1, 7, 4, 9), (3, 3), (1, 2), (2, 1, 0, 2), (0, 1)),
    # stride 2 along w in passes of 64 outputs (rlx_dwt_plane_s2_avx2): two
    # passes, the second cut short (81 and 75 wide); exactly one pass (64),
    # with 3 kernel rows per output row and bottom rows past the input
    ((1, 3, 4, 40), (4, 4), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((2, 2, 3, 37), (3, 3), (2, 2), (1, 1, 0, 0), (0, 1)),
    ((1, 2, 5, 32), (6, 4), (2, 2), (2, 1, 2, 1), (0, 0)),
    # strides 4 and 8 along w: whole blocks of 8 outputs per phase
    # interleaved in registers, then a cut block (80 and 109 wide; 31 and
    # 124, a few outputs short of a whole block)
    ((1, 2, 5, 20), (8, 8), (4, 4), (2, 2, 2, 2), (0, 0)),
    ((1, 2, 3, 13), (16, 16), (8, 8), (4, 4, 4, 4), (3, 5)),
    ((1, 2, 4, 7), (8, 8), (4, 4), (2, 2, 2, 2), (0, 3)),
    ((1, 2, 3, 15), (16, 16), (8, 8), (4, 4, 4, 4), (0, 4)),
]


@pytest.mark.parametrize("case", range(len(DEPTHWISE_T)))
@pytest.mark.parametrize("weights_as_inputs", [False, True])
def test_depthwise_conv_transpose_runs_from_the_input(case, weights_as_inputs):
    """A depthwise conv-transpose (stride above 1 on some axis) runs as one
    conv_transpose_depthwise launch reading x and the weight directly: the
    float64 reference with and without bias, weight constant or fed, and
    the same bits at 1 and 2 threads."""
    xs, k, s, pad, op = DEPTHWISE_T[case]
    nsp = len(xs) - 2
    c = xs[1]
    rng = np.random.default_rng(case)
    x = _rand(rng, *xs)
    w = _rand(rng, c, 1, *k)
    for b in (None, _rand(rng, c)):
        kw = dict(stride=s, padding=pad, output_padding=op, groups=c)
        want = R.conv_transpose_nd(x, w, b, stride=s, pads_begin=pad[:nsp], pads_end=pad[nsp:], groups=c,
                                   output_padding=op)
        for nthreads in (1, 2):
            got, plan, _ = _run(nsp, x, w, b, "auto", nthreads, weights_as_inputs, **kw)
            kinds = [t.kind for t in plan.thunks]
            assert kinds == (["conv_transpose_depthwise"] if max(s) > 1 else kinds), kinds
            assert R.rel_error(got, want) <= TOL
        feeds = {"x": x, "w": w, **({"b": b} if b is not None else {})} if weights_as_inputs else {"x": x}
        _same_bits_on_1_and_2_threads(plan, feeds)


def test_depthwise_conv_backward_input_runs_from_dy():
    """The input gradient of a strided depthwise conv is the same transposed
    conv: grads() through it matches the float64 reference."""
    rng = np.random.default_rng(5)
    x = _rand(rng, 2, 12, 15, 14)
    w = _rand(rng, 12, 1, 3, 3)
    dy = _rand(rng, 2, 12, 8, 7)
    g = rc.Graph()
    dyi = g.input("dy", dy.shape)
    dx = g.conv2d_backward_input(dyi, w, x.shape, stride=2, padding=1, groups=12)
    g.output(dx)
    plan = rc.compile(g, num_threads=2)
    assert [t.kind for t in plan.thunks] == ["conv_transpose_depthwise"]
    got = plan.run({"dy": dy})[0]
    want = R.conv_nd_backward_input(dy, w, x.shape, stride=2, pads_begin=1, pads_end=1, groups=12)
    assert R.rel_error(got, want) <= TOL


def test_depthwise_transposed_launch_checks_its_geometry():
    from rlx_cpu import _backward
    x = np.zeros(2 * 5 * 5, np.float32)
    y = np.zeros(2 * 10 * 10, np.float32)
    w = np.zeros(2 * 16, np.float32)
    s = np.zeros(4096, np.float32)
    _backward.DepthwiseTransposedLaunch(x, w, None, y, s, 1, 2, (5, 5, 10, 10, 4, 4, 2, 2, 1, 1), 1)
    with pytest.raises(ValueError, match="kernel at least the stride"):
        _backward.DepthwiseTransposedLaunch(x, w, None, y, s, 1, 2, (5, 5, 10, 10, 1, 4, 2, 2, 0, 1), 1)
    with pytest.raises(ValueError, match="stride <= 8"):
        _backward.DepthwiseTransposedLaunch(x, w, None, y, s, 1, 2, (5, 5, 10, 10, 9, 9, 9, 9, 1, 1), 1)
    with pytest.raises(ValueError, match="scratch"):
        _backward.DepthwiseTransposedLaunch(x, w, None, y, np.zeros(3, np.float32), 1, 2,
                                            (5, 5, 10, 10, 4, 4, 2, 2, 1, 1), 1)


DEPTHWISE_BASELINE_SCRIPT = """
import numpy as np
import reference as R
from test_conv_transpose import DEPTHWISE_T, _rand, _run
worst, ran = 0.0, 0
for case, (xs, k, s, pad, op) in enumerate(DEPTHWISE_T):
    nsp, c = len(xs) - 2, xs[1]
    rng = np.random.default_rng(case)
    x, w, b = _rand(rng, *xs), _rand(rng, c, 1, *k), _rand(rng, c)
    got, plan, _ = _run(nsp, x, w, b, "auto", 2, stride=s, padding=pad, output_padding=op, groups=c)
    ran += [t.kind for t in plan.thunks] == ["conv_transpose_depthwise"]
    want = R.conv_transpose_nd(x, w, b, stride=s, pads_begin=pad[:nsp], pads_end=pad[nsp:], groups=c,
                               output_padding=op)
    worst = max(worst, R.rel_error(got, want))
print(ran, worst)
"""


def test_depthwise_conv_transpose_portable_variant():
    """The portable depthwise conv-transpose loop (RLX_SIMD=baseline)."""
    ran, worst = run_script(DEPTHWISE_BASELINE_SCRIPT, RLX_SIMD="baseline").split()
    assert int(ran) == len(DEPTHWISE_T)
    assert float(worst) <= TOL
