"""Conv parity: every algorithm against the float64 reference (tests/reference.py).

One seeded grid of named cases.  For each case and each forced algorithm the
test either checks parity (rel_error <= 1e-4) or, when the algorithm cannot
run the shape, checks that compile raises ValueError saying why.  The
expected padding of every case is written out by hand, so the grid also
checks padding resolution (ONNX pads order, pairs, 'same', 'valid').
"""
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import rlx_cpu
from rlx_cpu import ConvAlgorithm
from rlx_cpu import functional as F

from conftest import (ALGORITHMS, TOL, chosen_algorithm, check_parity, conv_case, conv_nd,
                      conv_thunk, feeds_for, one_conv_graph, rel_error, run_one_conv)


def _case(id, n, c_in, c_out, groups, spatial, kernel, stride=1, padding=0, pads=None, dilation=1,
          bias=True):
    """pads: the expected (begin, end) per axis for `padding` (hand-computed)."""
    if pads is None:                  # symmetric int padding
        pads = ((padding,) * len(spatial), (padding,) * len(spatial))
    return pytest.param(dict(id=id, n=n, c_in=c_in, c_out=c_out, groups=groups, spatial=spatial, kernel=kernel,
                             stride=stride, padding=padding, pads=pads, dilation=dilation, bias=bias),
                        id=id)


CASES_2D = [
    _case("basic", 1, 3, 4, 1, (8, 8), (3, 3), padding=1),
    _case("batch3", 3, 4, 6, 1, (9, 7), (3, 3)),
    _case("stride2", 2, 4, 5, 1, (11, 10), (3, 3), 2, 1),
    _case("stride3_odd_nobias", 1, 3, 4, 1, (13, 11), (3, 3), 3, 2, bias=False),
    _case("stride2x3_k3x5", 2, 3, 4, 1, (12, 14), (3, 5), (2, 3), (1, 2), ((1, 2), (1, 2))),
    _case("onnx_pads", 2, 3, 5, 1, (9, 8), (3, 3), 1, (0, 2, 1, 0), ((0, 2), (1, 0))),
    _case("pairs_stride2", 1, 4, 4, 1, (7, 9), (3, 3), 2, ((2, 0), (1, 3)), ((2, 1), (0, 3))),
    _case("same_dil2", 2, 3, 4, 1, (9, 10), (3, 3), 1, "same", ((2, 2), (2, 2)), 2),
    _case("same_even_kernel", 1, 3, 4, 1, (8, 7), (4, 2), 1, "same", ((1, 0), (2, 1))),
    _case("SAME_UPPER_s2", 1, 3, 4, 1, (10, 7), (3, 3), 2, "SAME_UPPER", ((0, 1), (1, 1))),
    _case("SAME_LOWER_s2", 2, 3, 4, 1, (10, 7), (3, 3), 2, "SAME_LOWER", ((1, 1), (0, 1))),
    _case("valid_nobias", 2, 3, 4, 1, (8, 9), (3, 3), 1, "valid", ((0, 0), (0, 0)), bias=False),
    _case("dil2", 1, 4, 4, 1, (12, 11), (3, 3), 1, 2, dilation=2),
    _case("dil3_stride2", 2, 3, 5, 1, (15, 13), (3, 3), 2, 1, dilation=3),
    _case("dil2x3_pairs", 1, 3, 4, 1, (11, 12), (3, 3), 1, ((1, 1), (0, 2)), ((1, 0), (1, 2)), (2, 3)),
    _case("groups2", 2, 4, 6, 2, (9, 9), (3, 3), 1, 1),
    _case("groups2_s2_d2", 1, 6, 4, 2, (13, 12), (3, 3), 2, 2, dilation=2),
    _case("depthwise", 2, 6, 6, 6, (10, 9), (3, 3), 1, 1),
    _case("depthwise_x2_k5_s2", 1, 4, 8, 4, (11, 11), (5, 5), 2, 2),
    _case("depthwise_k3_s2", 2, 5, 5, 5, (13, 20), (3, 3), 2, 1),
    _case("depthwise_k5_s2_asym", 1, 3, 3, 3, (22, 9), (5, 5), 2, ((2, 1), (0, 2)), ((2, 0), (1, 2))),
    _case("depthwise_k3_s2_valid", 3, 4, 4, 4, (9, 31), (3, 3), 2, 0),
    _case("1x1", 3, 8, 12, 1, (7, 5), (1, 1)),
    _case("1x1_stride2", 2, 8, 6, 1, (9, 7), (1, 1), 2),
    _case("1x1_grouped", 2, 8, 6, 2, (6, 7), (1, 1)),
    _case("1x1_asym_pads", 1, 4, 5, 1, (5, 6), (1, 1), 1, (0, 1, 1, 0), ((0, 1), (1, 0))),
    _case("k5_per_axis_pads", 2, 3, 4, 1, (13, 9), (5, 5), 1, (2, 1), ((2, 1), (2, 1))),
    _case("k7x1", 1, 3, 4, 1, (15, 6), (7, 1), 1, (3, 0), ((3, 0), (3, 0))),
    _case("k1x7_stride2", 1, 3, 4, 1, (6, 15), (1, 7), 2, (0, 3), ((0, 3), (0, 3))),
    _case("kernel_eq_input", 2, 3, 4, 1, (5, 5), (5, 5)),
    _case("taps_in_padding", 1, 2, 3, 1, (2, 3), (3, 3), 1, 4),
    _case("taps_in_padding_dil3", 2, 2, 3, 1, (2, 2), (3, 3), 1, 3, dilation=3),
    _case("c16", 2, 16, 16, 1, (10, 12), (3, 3), 1, 1),
    _case("c16_odd_out_asym", 1, 16, 24, 1, (7, 9), (3, 3), 1, ((0, 2), (1, 0)), ((0, 1), (2, 0))),
    _case("c16_many_tiles", 1, 16, 8, 1, (48, 50), (3, 3), 1, 1),
    _case("batch1_col_panels", 1, 8, 16, 1, (24, 24), (3, 3), 1, 1),
    _case("batch1_row_panels", 1, 4, 64, 1, (6, 5), (3, 3), 1, 1),
    _case("batch4_groups2", 4, 8, 8, 2, (10, 10), (3, 3), 1, 1),
]

CASES_1D = [
    _case("1d_basic", 2, 3, 4, 1, (17,), (5,), 1, 2),
    _case("1d_onnx_asym", 1, 3, 4, 1, (16,), (3,), 1, (0, 2), ((0,), (2,))),
    _case("1d_pairs_stride2", 2, 2, 3, 1, (11,), (4,), 2, ((3, 1),), ((3,), (1,))),
    _case("1d_stride3_dil2_g2", 2, 4, 4, 2, (23,), (3,), 3, 1, dilation=2),
    _case("1d_depthwise_same", 1, 5, 5, 5, (19,), (7,), 1, "same", ((3,), (3,))),
    _case("1d_same_even_dil3", 1, 3, 2, 1, (10,), (4,), 1, "same", ((4,), (5,)), 3),
    _case("1d_SAME_UPPER_k4", 2, 3, 4, 1, (12,), (4,), 1, "SAME_UPPER", ((1,), (2,))),
    _case("1d_SAME_LOWER_k4_s3", 1, 3, 4, 1, (13,), (4,), 3, "SAME_LOWER", ((2,), (1,))),
    _case("1d_1x1", 3, 6, 4, 1, (9,), (1,)),
    _case("1d_hop4_k16", 1, 1, 8, 1, (64,), (16,), 4, bias=False),
    _case("1d_valid_dil4", 2, 3, 3, 1, (20,), (3,), 1, "valid", ((0,), (0,)), 4),
]


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


def expected_eligible(c, algo):
    """Which forced algorithms may run this case (independent of algorithms.py)."""
    nsp = len(c["spatial"])
    kernel = tuple(c["kernel"]) if nsp == 2 else (1,) + tuple(c["kernel"])
    s1 = all(s == 1 for s in _tup(c["stride"], nsp))
    d1 = all(d == 1 for d in _tup(c["dilation"], nsp))
    if algo == "direct":
        # unit stride and dilation; or a depthwise 3x3/5x5 at stride 2
        depthwise_s2 = (nsp == 2 and c["groups"] == c["c_in"] == c["c_out"] and kernel in ((3, 3), (5, 5))
                        and _tup(c["stride"], nsp) == (2, 2) and d1)
        return (s1 and d1) or depthwise_s2
    if algo in ("winograd", "winograd_f4"):
        return kernel == (3, 3) and s1 and d1 and c["groups"] == 1
    return True


_DATA = {}


def case_data(c):
    """Inputs and float64 reference, seeded by the case id and cached: every
    algorithm of a case sees the same data."""
    case_id = c["id"]
    if case_id not in _DATA:
        rng = np.random.default_rng(zlib.crc32(case_id.encode()))
        x, w, b = conv_case(rng, c["n"], c["c_in"], c["c_out"], c["spatial"], c["kernel"], c["groups"], c["bias"])
        want = conv_nd(x, w, b, c["stride"], c["pads"][0], c["pads"][1], c["dilation"], c["groups"])
        _DATA[case_id] = (x, w, b, want)
    return _DATA[case_id]


def attrs_of(c):
    return dict(stride=c["stride"], padding=c["padding"], dilation=c["dilation"], groups=c["groups"])


def _label(nsp, requested, plan):
    # auto may run a stem on the blocked layout (its kernel is the thunk kind)
    blocked = [t.kind for t in plan.thunks if t.kind.startswith("conv_nchwc")]
    got = blocked[0] if blocked else chosen_algorithm(plan).label
    return f"conv{nsp}d {requested}->{got}" if requested == "auto" else f"conv{nsp}d {got}"


@pytest.mark.parametrize("algo", ALGORITHMS + ("auto",))
@pytest.mark.parametrize("case", CASES_2D + CASES_1D)
def test_parity_grid(case, algo):
    x, w, b, want = case_data(case)
    nsp = len(case["spatial"])
    g = one_conv_graph(x.shape, w, b, **attrs_of(case))
    if algo != "auto" and not expected_eligible(case, algo):
        with pytest.raises(ValueError, match=rf"conv{nsp}d 'conv': conv_algorithm='{algo}' needs"):
            rlx_cpu.compile(g, conv_algorithm=algo)
        return
    plan = rlx_cpu.compile(g, conv_algorithm=algo)
    if algo == "im2col" and chosen_algorithm(plan) == ConvAlgorithm.GEMM_1X1:
        # 1x1/stride 1/unpadded under im2col is documented to run as a GEMM.
        assert case["kernel"] in ((1, 1), (1,)) and conv_thunk(plan).kind == "conv_1x1"
    elif algo != "auto":
        assert chosen_algorithm(plan).label == algo
    got = plan.run({"x": x})[0]
    assert got.dtype == np.float32
    check_parity(got, want, _label(nsp, algo, plan))


# ---------------------------------------------------------------------------
# 1-D: the taps run along L (upstream ran the 1-D kernel over the wrong axis)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["reference", "im2col", "direct", "auto"])
@pytest.mark.parametrize("stride,dilation,pads", [(1, 1, (0, 0)), (2, 1, (1, 2)), (1, 2, (0, 3)), (3, 2, (2, 0))])
def test_conv1d_taps_run_along_length(algo, stride, dilation, pads):
    """A one-hot kernel at tap j shifts the signal: y[l] = x[l*s + j*d - pb]
    exactly.  Checked by indexing, not against conv_nd, so a kernel that ran
    its taps along any other axis (or dropped dilation) cannot pass."""
    length = 19
    x = np.arange(2 * 3 * length, dtype=np.float32).reshape(2, 3, length) + 1.0
    if algo == "direct" and (stride != 1 or dilation != 1):
        # direct needs unit stride and dilation: forcing it must say which one.
        why = "stride 1" if stride != 1 else "dilation 1"
        with pytest.raises(ValueError, match=rf"conv1d 'conv': conv_algorithm='direct' needs {why}"):
            run_one_conv(x, np.zeros((3, 3, 4), np.float32), conv_algorithm=algo, stride=stride,
                         padding=pads, dilation=dilation)
        return
    for tap in range(4):
        w = np.zeros((3, 3, 4), np.float32)
        for c in range(3):
            w[c, c, tap] = 1.0            # channel c -> channel c, one tap
        y, plan = run_one_conv(x, w, conv_algorithm=algo, stride=stride, padding=pads, dilation=dilation)
        out_len = (length + pads[0] + pads[1] - dilation * 3 - 1) // stride + 1
        assert y.shape == (2, 3, out_len)
        xp = np.pad(x, [(0, 0), (0, 0), pads])
        want = xp[:, :, tap * dilation: tap * dilation + stride * (out_len - 1) + 1: stride]
        np.testing.assert_array_equal(y, want, err_msg=f"tap {tap}, {chosen_algorithm(plan).label}")


@pytest.mark.parametrize("algo", ["reference", "im2col", "direct", "auto"])
@pytest.mark.parametrize("axis", [2, 3])
def test_conv2d_single_axis_kernel_runs_on_its_axis(algo, axis):
    """A [k,1] kernel on [N,C,L,1] runs along H, a [1,k] kernel on [N,C,1,L]
    along W (the layouts 1-D convs arrive in from ONNX exporters)."""
    length, k = 13, 3
    shape = [1, 2, 1, 1]
    shape[axis] = length
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 1.0
    kshape = [2, 2, 1, 1]
    kshape[axis] = k
    w = np.zeros(kshape, np.float32)
    idx = [0, 0, 0, 0]
    idx[axis] = k - 1
    for c in range(2):
        idx[0] = idx[1] = c
        w[tuple(idx)] = 1.0              # the last tap only
    y, _ = run_one_conv(x, w, conv_algorithm=algo)
    want = np.take(x, np.arange(k - 1, length), axis=axis)
    np.testing.assert_array_equal(y, want)


# ---------------------------------------------------------------------------
# Input dtypes and layouts
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.uint8, np.int64])
def test_inputs_of_other_dtypes_are_converted(rng, dtype):
    x64 = rng.standard_normal((2, 3, 9, 8)) * 4
    x = (np.abs(x64) if np.dtype(dtype).kind == "u" else x64).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3))           # float64 weight -> float32 constant
    b = np.arange(4)                                 # int bias
    for algo in ALGORITHMS:
        y, _ = run_one_conv(x, w, b, conv_algorithm=algo, padding=1)
        check_parity(y, conv_nd(x.astype(np.float32), w.astype(np.float32), b, 1, 1, 1), f"dtype {algo}")


def test_non_contiguous_input(rng):
    base = rng.standard_normal((2, 9, 8, 3)).astype(np.float32)
    x = base.transpose(0, 3, 1, 2)                  # NHWC memory seen as NCHW
    assert not x.flags.c_contiguous
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    y, _ = run_one_conv(x, w, padding=1)
    check_parity(y, conv_nd(x, w, None, 1, 1, 1), "non-contiguous input")


# ---------------------------------------------------------------------------
# Algorithms agree with each other; thread-count invariance
# ---------------------------------------------------------------------------

AGREE_CASES = [c for c in CASES_2D if expected_eligible(c.values[0], "winograd")]


@pytest.mark.parametrize("case", AGREE_CASES)
def test_algorithms_agree_where_all_eligible(case):
    x, w, b, _ = case_data(case)
    g = one_conv_graph(x.shape, w, b, **attrs_of(case))
    outs = {a: rlx_cpu.compile(g, conv_algorithm=a).run({"x": x})[0] for a in ALGORITHMS}
    for a in ALGORITHMS[1:]:
        err = rel_error(outs[a], outs["reference"])
        assert err <= TOL, f"{a} vs reference: {err:.3e}"


# Why exactness holds where it does: every output element is reduced by one
# thread in a fixed order in every algorithm (no cross-thread sums).  The
# reference and direct kernels compute each (image, channel) plane with the
# same loop whatever the thread count -> bit-identical.  im2col and the 1x1
# GEMM make the *same* single-threaded sgemm call per (image, group) when
# batch*groups >= threads -> bit-identical; at smaller batch the GEMM is split
# into panels whose widths depend on the thread count, and the BLAS rounds a
# panel differently -> equal within tolerance only.  Winograd's tile block (the
# GEMM width) is derived from the thread count -> within tolerance only.
THREAD_CASES = ["basic", "batch3", "stride2", "groups2", "depthwise", "depthwise_k3_s2", "1x1", "1x1_grouped",
                "c16", "c16_many_tiles", "batch1_col_panels", "batch1_row_panels", "batch4_groups2",
                "1d_basic", "1d_1x1"]


def _exact_across_threads(algo, n, groups, threads):
    if algo in (ConvAlgorithm.REFERENCE, ConvAlgorithm.DIRECT):
        return True
    if algo in (ConvAlgorithm.IM2COL, ConvAlgorithm.GEMM_1X1):
        return n * groups >= max(threads)
    return False


THREAD_PAIRS = [(1, 2), (1, 3)]


@pytest.mark.parametrize("algo", ALGORITHMS)
@pytest.mark.parametrize("case", [c for c in CASES_2D + CASES_1D if c.id in THREAD_CASES])
def test_thread_count_invariance(case, algo):
    x, w, b, want = case_data(case)
    g = one_conv_graph(x.shape, w, b, **attrs_of(case))
    if not expected_eligible(case, algo):
        # Eligibility is a property of the shape, never of the thread count.
        nsp = len(case["spatial"])
        for t in sorted({t for pair in THREAD_PAIRS for t in pair}):
            with pytest.raises(ValueError, match=rf"conv{nsp}d 'conv': conv_algorithm='{algo}' needs"):
                rlx_cpu.compile(g, conv_algorithm=algo, num_threads=t)
        return
    for threads in THREAD_PAIRS:
        plans = [rlx_cpu.compile(g, conv_algorithm=algo, num_threads=t) for t in threads]
        ys = [p.run({"x": x})[0] for p in plans]
        chosen = chosen_algorithm(plans[0])
        if _exact_across_threads(chosen, case["n"], case["groups"], threads):
            np.testing.assert_array_equal(ys[0], ys[1], err_msg=f"{chosen.label} threads {threads}")
        else:
            assert rel_error(ys[1], ys[0]) <= TOL
        for y, t in zip(ys, threads):
            check_parity(y, want, f"{chosen.label} threads={t}")


# ---------------------------------------------------------------------------
# Winograd filter transform: constant weight (compile time) vs graph input (runtime)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bias_as_input", [False, True])
def test_winograd_weight_input_vs_constant(rng, bias_as_input):
    x, w, b = conv_case(rng, 2, 8, 12, (11, 10), (3, 3))
    p_const = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=1), conv_algorithm="winograd")
    p_input = rlx_cpu.compile(one_conv_graph(x.shape, w, b, weight_as_input=True,
                                             bias_as_input=bias_as_input, padding=1),
                              conv_algorithm="winograd")
    # A constant weight is transformed once at compile time, never per run.
    assert [t.kind for t in p_const.thunks] == ["conv"]
    assert [t.kind for t in p_input.thunks] == ["winograd_filter", "conv"]
    y_const = p_const.run({"x": x})[0]
    check_parity(y_const, conv_nd(x, w, b, 1, 1, 1), "winograd const weight")
    # Same transform arithmetic and tile block: equal up to rounding.
    y_input = p_input.run(feeds_for(x, w, b, True, bias_as_input))[0]
    assert rel_error(y_input, y_const) <= 1e-6
    # New weights on every run: the runtime transform must follow them.
    for _ in range(2):
        _, w, b2 = conv_case(rng, 2, 8, 12, (11, 10), (3, 3))
        b = b2 if bias_as_input else b
        y_input = p_input.run(feeds_for(x, w, b, True, bias_as_input))[0]
        check_parity(y_input, conv_nd(x, w, b, 1, 1, 1), "winograd input weight")


# ---------------------------------------------------------------------------
# Functional API: cached plans with weights as inputs
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ALGORITHMS + ("auto",))
def test_functional_conv2d_repeated_calls(rng, algo):
    F.clear_plan_cache()
    x, w, b = conv_case(rng, 2, 4, 6, (9, 8), (3, 3))
    for i in range(3):
        y = rlx_cpu.conv2d(x, w, b if i != 1 else None, 1, 1, conv_algorithm=algo)
        check_parity(y, conv_nd(x, w, b if i != 1 else None, 1, 1, 1), f"functional conv2d {algo}")
        x, w, b = conv_case(rng, 2, 4, 6, (9, 8), (3, 3))
    assert len(F._cache) == 2           # one plan with bias, one without; reused


def test_functional_conv2d_torch_argument_order(rng):
    x, w, b = conv_case(rng, 1, 4, 4, (10, 9), (3, 3), groups=2)
    # input, weight, bias, stride, padding, dilation, groups (torch order)
    y = rlx_cpu.conv2d(x, w, b, 2, (1, 2), 2, 2)
    check_parity(y, conv_nd(x, w, b, 2, (1, 2), (1, 2), 2, 2), "functional conv2d")
    with pytest.raises(TypeError):
        rlx_cpu.conv2d(x, w, b, 2, (1, 2), 2, 2, "direct")   # conv_algorithm is keyword-only


@pytest.mark.parametrize("algo", ["reference", "im2col", "direct", "auto"])
def test_functional_conv1d_repeated_calls(rng, algo):
    for _ in range(3):
        x, w, b = conv_case(rng, 2, 3, 5, (21,), (4,))
        y = rlx_cpu.conv1d(x, w, b, 1, (2, 1), 1, conv_algorithm=algo)
        check_parity(y, conv_nd(x, w, b, 1, 2, 1), f"functional conv1d {algo}")


def test_functional_does_not_write_inputs(rng):
    x, w, b = conv_case(rng, 1, 3, 4, (6, 6), (3, 3))
    for a in (x, w, b):
        a.setflags(write=False)
    copies = [a.copy() for a in (x, w, b)]
    rlx_cpu.conv2d(x, w, b, padding=1)
    for a, c in zip((x, w, b), copies):
        np.testing.assert_array_equal(a, c)


def test_functional_plans_follow_env_flags(monkeypatch, rng):
    """The env flags are read when a plan is compiled; a cached functional
    plan must not hide a change of them."""
    for name in ("RLX_FAST_CONV", "RLX_WINOGRAD", "RLX_DIRECT_CONV"):
        monkeypatch.delenv(name, raising=False)
    F.clear_plan_cache()
    x, w, b = conv_case(rng, 1, 16, 16, (8, 8), (3, 3))
    rlx_cpu.conv2d(x, w, b, padding=1)
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    y = rlx_cpu.conv2d(x, w, b, padding=1)
    check_parity(y, conv_nd(x, w, b, 1, 1, 1), "functional conv2d")
    algos = {chosen_algorithm(p) for p in F._cache.values()}
    assert ConvAlgorithm.REFERENCE in algos, algos


# ---------------------------------------------------------------------------
# run_into and profile
# ---------------------------------------------------------------------------

def test_run_into_and_profile(rng):
    x, w, b = conv_case(rng, 2, 4, 4, (8, 8), (3, 3))
    plan = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=1))
    out = np.full((2, 4, 8, 8), np.nan, np.float32)
    ret = plan.run_into({"x": x}, [out])
    assert ret[0] is out
    check_parity(out, conv_nd(x, w, b, 1, 1, 1), "run_into")
    prof = plan.profile({"x": x}, repeat=3)
    assert [t for t, _ in prof] == list(plan.thunks)
    assert all(s >= 0 for _, s in prof)


# ---------------------------------------------------------------------------
# Property test: auto against the reference kernel and conv_nd on small shapes
# ---------------------------------------------------------------------------

@st.composite
def conv_shapes(draw):
    nsp = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 3))
    cpg, cog = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(nsp))
    stride = tuple(draw(st.integers(1, 3)) for _ in range(nsp))
    dilation = tuple(draw(st.integers(1, 2)) for _ in range(nsp))
    pb = tuple(draw(st.integers(0, 2)) for _ in range(nsp))
    pe = tuple(draw(st.integers(0, 2)) for _ in range(nsp))
    if draw(st.integers(0, 3)) == 0:          # a quarter of the cases Winograd-eligible
        nsp, groups, cpg, cog = 2, 1, cpg * groups, cog * groups
        kernel, stride, dilation = (3, 3), (1, 1), (1, 1)
        pb, pe = (pb + pb)[:2], (pe + pe)[:2]
    spatial = tuple(max(1, d * (k - 1) + 1 - b - e) + draw(st.integers(0, 6))
                    for k, d, b, e in zip(kernel, dilation, pb, pe))
    return dict(n=draw(st.integers(1, 2)), groups=groups, c_in=cpg * groups, c_out=cog * groups,
                kernel=kernel, stride=stride, dilation=dilation, pb=pb, pe=pe, spatial=spatial,
                bias=draw(st.booleans()), seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(conv_shapes())
def test_property_auto_matches_reference(c):
    rng = np.random.default_rng(c["seed"])
    x, w, b = conv_case(rng, c["n"], c["c_in"], c["c_out"], c["spatial"], c["kernel"], c["groups"], c["bias"])
    attrs = dict(stride=c["stride"], padding=tuple(zip(c["pb"], c["pe"])), dilation=c["dilation"],
                 groups=c["groups"])
    want = conv_nd(x, w, b, c["stride"], c["pb"], c["pe"], c["dilation"], c["groups"])
    y_auto, plan = run_one_conv(x, w, b, **attrs)
    y_ref, _ = run_one_conv(x, w, b, conv_algorithm="reference", **attrs)
    check_parity(y_ref, want, "property reference")
    check_parity(y_auto, want, f"property auto->{chosen_algorithm(plan).label}")
    assert rel_error(y_auto, y_ref) <= TOL
    # Every other algorithm that may run the shape agrees too.
    for algo in ("im2col", "direct", "winograd"):
        if expected_eligible(c, algo):
            y, plan = run_one_conv(x, w, b, conv_algorithm=algo, **attrs)
            check_parity(y, want, f"property {chosen_algorithm(plan).label}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c_in, spatial, stride, pads, dilation", [
    (1200, (23, 19), 1, (1, 0, 2, 1), 1),     # K = 10800 -> 96-column blocks cutting output rows
    (1500, (31, 19), 2, (2, 1, 0, 2), 2),     # K = 13500 -> 64-column blocks, strided + dilated
])
def test_im2col_column_blocks_cut_output_rows(rng, threads, c_in, spatial, stride, pads, dilation):
    from rlx_cpu import _conv2d
    x = rng.standard_normal((2, c_in) + spatial).astype(np.float32)
    w = (rng.standard_normal((5, c_in, 3, 3)) / np.sqrt(c_in * 9)).astype(np.float32)
    g = rlx_cpu.Graph()
    xi = g.input("x", x.shape)
    g.output(g.conv2d(xi, w, stride=stride, padding=pads, dilation=dilation))
    plan = rlx_cpu.compile(g, conv_algorithm="im2col", num_threads=threads)
    (t,) = plan.thunks
    p = t.dims.h_out * t.dims.w_out
    assert t.block == _conv2d.im2col_col_block(t.dims.as_tuple(), threads, t.packed) and p > t.block
    assert t.block % t.dims.w_out != 0
    y = plan.run({"x": x})[0]
    want = conv_nd(x, w, stride=stride, pads_begin=pads[:2], pads_end=pads[2:], dilation=dilation)
    check_parity(y, want, "im2col column blocks")


def test_functional_plans_follow_thread_setting(rng):
    """A call after set_num_threads gets a plan of the new count, also when
    the previous call had the very same shapes (the last-lookup memo)."""
    F.clear_plan_cache()
    x, w, b = conv_case(rng, 1, 4, 4, (8, 8), (3, 3))
    try:
        seen = []
        for n in (1, 2, 1):
            rlx_cpu.set_num_threads(n)
            y = rlx_cpu.conv2d(x, w, b, padding=1)
            check_parity(y, conv_nd(x, w, b, 1, 1, 1), f"functional conv2d {n} threads")
            seen.append(F._last[1].num_threads)
    finally:
        rlx_cpu.set_num_threads(None)
    want = [1, 2, 1] if rlx_cpu._runtime.openmp_enabled() else [1, 1, 1]
    assert seen == want
    assert len(F._cache) == 2          # one plan per setting, reused on the way back to 1
