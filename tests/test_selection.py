"""Conv algorithm selection: select_conv_algorithm is a pure function of
(dims, requested, flags); compile reads the RLX_* flags from the environment
at compile time; forced algorithms override the flags; 1x1 convs become a
GEMM; im2col is never chosen (and cannot be forced) past its scratch cap."""
import itertools

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import ConvAlgorithm as A, ConvFlags, select_conv_algorithm
from rlx_cpu import _conv2d, passes
from rlx_cpu.ops.conv import Conv2DDims

from conftest import chosen_algorithm, conv_thunk, one_conv_graph

CAP = 512 * 1024 * 1024


@pytest.fixture(autouse=True)
def _no_conv_flags(clean_conv_env):
    """Every test here starts without RLX_* conv flags in the environment."""


def dims2d(n=1, c_in=4, c_out=4, h=10, w=10, k=3, s=1, p=1, d=1, g=1):
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (s, s) if isinstance(s, int) else s
    ph, pw = (p, p) if isinstance(p, int) else p
    dh, dw = (d, d) if isinstance(d, int) else d
    h_out = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    w_out = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return Conv2DDims(n, c_in, h, w, c_out, h_out, w_out, kh, kw, sh, sw, ph, pw, dh, dw, g)


def compiled_algo(x_shape, w_shape, conv_algorithm="auto", **attrs):
    """The NCHW algorithm a one-conv plan compiles to (without the
    blocked_layout pass, which may take the conv to its own kernels:
    tests/test_blocked*.py)."""
    g = one_conv_graph(x_shape, np.ones(w_shape, np.float32), **attrs)
    nchw = [p for p in passes.DEFAULT_PASSES if p != "blocked_layout"]
    return chosen_algorithm(rlx_cpu.compile(g, conv_algorithm=conv_algorithm, passes=nchw))


def independent_eligible(d, algo):
    """Eligibility written out again from the documented rules."""
    unit = (d.sh, d.sw, d.dh, d.dw) == (1, 1, 1, 1)
    if algo == A.DIRECT:
        depthwise_s2 = d.groups == d.c_in == d.c_out and (d.kh, d.kw) in ((3, 3), (5, 5)) \
            and (d.sh, d.sw, d.dh, d.dw) == (2, 2, 1, 1)
        return unit or depthwise_s2
    if algo == A.WINOGRAD:
        return unit and (d.kh, d.kw) == (3, 3) and d.groups == 1
    if algo == A.GEMM_1X1:
        return (d.kh, d.kw, d.sh, d.sw, d.ph, d.pw) == (1, 1, 1, 1, 0, 0) and (d.h_out, d.w_out) == (d.h, d.w)
    if algo == A.IM2COL:
        return (d.c_in // d.groups) * d.kh * d.kw * d.h_out * d.w_out <= CAP
    return True


# A spread of shapes: winograd-friendly, depthwise, strided, dilated, 1x1, 1-D.
SHAPES = [
    dims2d(c_in=16, c_out=16), dims2d(c_in=3, c_out=8), dims2d(c_in=64, c_out=64, s=2),
    dims2d(c_in=8, c_out=8, g=8), dims2d(c_in=32, c_out=32, d=2, p=2), dims2d(k=1, p=0, c_in=32, c_out=16),
    dims2d(k=1, p=0, s=2, c_in=32, c_out=16), dims2d(k=1, p=(1, 0)), dims2d(k=5, p=2, c_in=16, c_out=16),
    dims2d(k=(1, 7), p=(0, 3), h=1, w=40), dims2d(c_in=16, c_out=32, g=2),
    dims2d(c_in=8, c_out=8, g=8, s=2), dims2d(c_in=8, c_out=8, g=8, k=5, s=2, p=2),
    dims2d(c_in=8, c_out=8, g=8, k=7, s=2, p=3), dims2d(c_in=8, c_out=16, g=8, s=2),
]
FLAG_SETS = [ConvFlags(fast, wino, direct) for fast, wino, direct in
             itertools.product([True, False], [None, True, False], [None, True, False])]


@pytest.mark.parametrize("flags", FLAG_SETS, ids=repr)
def test_selection_is_pure_and_always_eligible(monkeypatch, flags):
    for d in SHAPES:
        a = select_conv_algorithm(d, "auto", flags)
        assert independent_eligible(d, a), (d, flags, a)
        # Pure: the same answer again, and the environment is not consulted
        # when flags are given.
        monkeypatch.setenv("RLX_FAST_CONV", "0")
        monkeypatch.setenv("RLX_WINOGRAD", "1")
        assert select_conv_algorithm(d, "auto", flags) == a
        monkeypatch.delenv("RLX_FAST_CONV")
        monkeypatch.delenv("RLX_WINOGRAD")
        if not flags.fast:
            assert a == A.REFERENCE
        if flags.fast and flags.winograd and independent_eligible(d, A.WINOGRAD):
            assert a == A.WINOGRAD
        elif flags.fast and flags.direct and independent_eligible(d, A.DIRECT):
            assert a == A.DIRECT
        if flags.winograd is False:
            assert a != A.WINOGRAD
        if flags.direct is False:
            assert a != A.DIRECT


def test_flags_from_env(monkeypatch):
    assert ConvFlags.from_env() == ConvFlags(True, None, None)
    for off in ("0", "off", "FALSE", " no "):
        monkeypatch.setenv("RLX_FAST_CONV", off)
        assert ConvFlags.from_env().fast is False
    for on in ("1", "", "yes", " ON "):
        monkeypatch.setenv("RLX_FAST_CONV", on)
        assert ConvFlags.from_env().fast is True
    for raw, want in (("1", True), ("On", True), ("true", True), ("0", False), ("off", False), ("", None)):
        monkeypatch.setenv("RLX_WINOGRAD", raw)
        monkeypatch.setenv("RLX_DIRECT_CONV", raw)
        f = ConvFlags.from_env()
        assert (f.winograd, f.direct) == (want, want), raw


def test_requested_may_be_an_enum():
    d = dims2d(c_in=16, c_out=16)
    for algo in (A.REFERENCE, A.IM2COL, A.DIRECT, A.WINOGRAD):
        assert select_conv_algorithm(d, algo, ConvFlags()) == algo


# ---------------------------------------------------------------------------
# compile reads the env flags (at compile time)
# ---------------------------------------------------------------------------

X16 = ((1, 16, 10, 10), (20, 16, 3, 3))          # auto default: winograd (20 outputs: never blocked)
DEPTHWISE = ((1, 8, 10, 10), (8, 1, 3, 3))        # auto default: direct
WIDE5 = ((1, 32, 10, 10), (32, 32, 5, 5))         # auto default: im2col
SMALL3 = ((1, 3, 10, 10), (8, 3, 3, 3))           # auto default: not winograd
ONE_BY_ONE = ((2, 16, 6, 6), (8, 16, 1, 1))       # auto default: GEMM


def test_defaults_without_flags():
    assert compiled_algo(*X16, padding=1) == A.WINOGRAD
    assert compiled_algo(*DEPTHWISE, padding=1, groups=8) == A.DIRECT
    assert compiled_algo(*WIDE5, padding=2) == A.IM2COL
    assert compiled_algo(*SMALL3, padding=1) != A.WINOGRAD
    assert compiled_algo(*ONE_BY_ONE) == A.GEMM_1X1


def test_fast_conv_off_means_reference_everywhere(monkeypatch):
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    assert compiled_algo(*X16, padding=1) == A.REFERENCE
    assert compiled_algo(*DEPTHWISE, padding=1, groups=8) == A.REFERENCE
    assert compiled_algo(*WIDE5, padding=2, stride=2) == A.REFERENCE
    assert compiled_algo(*ONE_BY_ONE) == A.REFERENCE
    assert compiled_algo((1, 4, 20), (4, 4, 3)) == A.REFERENCE


def test_winograd_flag(monkeypatch):
    monkeypatch.setenv("RLX_WINOGRAD", "1")
    assert compiled_algo(*SMALL3, padding=1) == A.WINOGRAD             # eligible: taken
    assert compiled_algo(*SMALL3, padding=(0, 2, 1, 0)) == A.WINOGRAD   # any padding
    assert compiled_algo(*SMALL3, padding=1, stride=2) == A.IM2COL      # ineligible: not
    assert compiled_algo(*WIDE5, padding=2) != A.WINOGRAD
    monkeypatch.setenv("RLX_WINOGRAD", "0")
    assert compiled_algo(*X16, padding=1) != A.WINOGRAD


def test_direct_flag(monkeypatch):
    monkeypatch.setenv("RLX_DIRECT_CONV", "1")
    assert compiled_algo(*WIDE5, padding=2) == A.DIRECT
    assert compiled_algo(*ONE_BY_ONE) == A.DIRECT           # direct wherever eligible, 1x1 too
    assert compiled_algo(*WIDE5, padding=2, stride=2) == A.IM2COL
    assert compiled_algo(*WIDE5, padding=4, dilation=2) == A.IM2COL
    assert compiled_algo(*X16, padding=1) == A.DIRECT        # direct on, winograd not forced
    monkeypatch.setenv("RLX_WINOGRAD", "1")
    assert compiled_algo(*X16, padding=1) == A.WINOGRAD      # winograd is tried first
    assert compiled_algo(*WIDE5, padding=2) == A.DIRECT
    monkeypatch.setenv("RLX_DIRECT_CONV", "0")
    assert compiled_algo(*DEPTHWISE, padding=1, groups=8) != A.DIRECT


@pytest.mark.parametrize("env,value,forced,shape,attrs", [
    ("RLX_FAST_CONV", "0", "im2col", X16, dict(padding=1)),
    ("RLX_FAST_CONV", "0", "winograd", X16, dict(padding=1)),
    ("RLX_FAST_CONV", "0", "direct", WIDE5, dict(padding=2)),
    ("RLX_WINOGRAD", "1", "direct", X16, dict(padding=1)),
    ("RLX_WINOGRAD", "1", "reference", X16, dict(padding=1)),
    ("RLX_WINOGRAD", "0", "winograd", X16, dict(padding=1)),
    ("RLX_DIRECT_CONV", "1", "im2col", WIDE5, dict(padding=2)),
    ("RLX_DIRECT_CONV", "0", "direct", DEPTHWISE, dict(padding=1, groups=8)),
])
def test_explicit_algorithm_overrides_env(monkeypatch, env, value, forced, shape, attrs):
    monkeypatch.setenv(env, value)
    assert compiled_algo(*shape, conv_algorithm=forced, **attrs).label == forced


def test_flags_are_read_at_compile_time_not_at_run(monkeypatch):
    g = one_conv_graph(X16[0], np.ones(X16[1], np.float32), padding=1)
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    plan = rlx_cpu.compile(g)
    monkeypatch.delenv("RLX_FAST_CONV")
    plan.run({"x": np.ones(X16[0], np.float32)})
    assert conv_thunk(plan).algorithm == A.REFERENCE            # fixed in the plan
    assert chosen_algorithm(rlx_cpu.compile(g)) == A.WINOGRAD   # a new compile sees the change


# ---------------------------------------------------------------------------
# 1x1 convs
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 16, 6, 6), (8, 16, 1, 1), {}),
    ((1, 16, 6, 6), (8, 4, 1, 1), dict(groups=4)),
    ((3, 6, 17), (4, 6, 1), {}),
    ((1, 16, 6, 6), (8, 16, 1, 1), dict(dilation=3)),            # dilation is moot for one tap
])
@pytest.mark.parametrize("algo", ["auto", "im2col"])
def test_1x1_runs_as_gemm(x_shape, w_shape, attrs, algo):
    g = one_conv_graph(x_shape, np.ones(w_shape, np.float32), **attrs)
    plan = rlx_cpu.compile(g, conv_algorithm=algo)
    assert [t.kind for t in plan.thunks] == ["conv_1x1"]
    assert not plan.thunks[0].slices(("scratch_fields",))       # no patch matrix


@pytest.mark.parametrize("attrs", [dict(stride=2), dict(padding=1), dict(padding=(0, 0, 1, 0))])
def test_1x1_with_stride_or_padding_is_not_plain_gemm(attrs):
    g = one_conv_graph((1, 16, 6, 6), np.ones((8, 16, 1, 1), np.float32), **attrs)
    assert conv_thunk(rlx_cpu.compile(g, conv_algorithm="im2col")).kind == "conv"


@pytest.mark.parametrize("algo", ["reference", "direct"])
def test_1x1_forced_other_algorithms(algo):
    g = one_conv_graph((1, 16, 6, 6), np.ones((8, 16, 1, 1), np.float32))
    t = conv_thunk(rlx_cpu.compile(g, conv_algorithm=algo))
    assert t.kind == "conv" and t.algorithm.label == algo


# ---------------------------------------------------------------------------
# im2col scratch cap (512 Mi floats): dims only, nothing is allocated
# ---------------------------------------------------------------------------

def test_im2col_cap_constant_matches():
    assert _conv2d.IM2COL_MAX_COL_FLOATS == CAP


def test_im2col_cap_boundary():
    # K = 2 taps, P = 2^14 x 2^14 outputs: exactly 2^29 floats -> allowed.
    at_cap = Conv2DDims(1, 1, 2**14, 2**14 + 1, 1, 2**14, 2**14, 1, 2, 1, 1, 0, 0, 1, 1, 1)
    assert select_conv_algorithm(at_cap, "im2col", ConvFlags()) == A.IM2COL
    over = Conv2DDims(1, 1, 2**14, 2**14 + 2, 1, 2**14, 2**14 + 1, 1, 2, 1, 1, 0, 0, 1, 1, 1)
    with pytest.raises(ValueError, match=rf"conv_algorithm='im2col' needs a patch matrix of at most {CAP} floats "
                                         rf"\(this conv needs {2 * 2**14 * (2**14 + 1)}\)"):
        select_conv_algorithm(over, "im2col", ConvFlags())
    # Per group: grouping divides the patch matrix.
    grouped = Conv2DDims(1, 4, 2**14, 2**14 + 1, 4, 2**14, 2**14, 1, 2, 1, 1, 0, 0, 1, 1, 4)
    assert select_conv_algorithm(grouped, "im2col", ConvFlags()) == A.IM2COL


# An ISTFT-as-conv head: 1-D, one channel, 2^20 samples, 2048 taps -> a
# 2048 x ~2^19..2^20 patch matrix (4-8 GB); upstream asked for ~150 GB on real heads.
ISTFT = dict(n=1, c_in=1, h=1, w=2**20, c_out=2, kh=1, kw=2048, ph=0, pw=0, dh=1, dw=1, groups=1)


def _istft(stride):
    d = dict(ISTFT, sh=1, sw=stride)
    d["h_out"] = 1
    d["w_out"] = (d["w"] - d["kw"]) // stride + 1
    return Conv2DDims(**d)


@pytest.mark.parametrize("stride,flags,want", [
    (1, ConvFlags(), A.DIRECT),                          # stride 1: direct can run it
    (1, ConvFlags(direct=False), A.REFERENCE),
    (2, ConvFlags(), A.REFERENCE),                       # constant-memory fallback
    (2, ConvFlags(winograd=True, direct=True), A.REFERENCE),
])
def test_im2col_cap_under_auto(stride, flags, want):
    d = _istft(stride)
    assert (d.c_in // d.groups) * d.kh * d.kw * d.h_out * d.w_out > CAP
    assert select_conv_algorithm(d, "auto", flags) == want
    with pytest.raises(ValueError, match=r"conv_algorithm='im2col' needs a patch matrix of at most"):
        select_conv_algorithm(d, "im2col", flags)


def test_im2col_cap_through_compile():
    """compile only (no run, so no arena is allocated): the plan neither picks
    im2col nor sizes a patch-matrix scratch for the head."""
    g = one_conv_graph((1, 1, 2**20), np.ones((2, 1, 2048), np.float32), stride=2, name="istft")
    plan = rlx_cpu.compile(g)
    t = conv_thunk(plan)
    assert t.algorithm == A.REFERENCE and t.scratch is None
    assert plan.arena_nbytes < 16 * 2**20                 # input + output only
    with pytest.raises(ValueError, match=r"conv1d 'istft': conv_algorithm='im2col' needs a patch matrix"):
        rlx_cpu.compile(g, conv_algorithm="im2col")


def _dims3x3(n, c, hw):
    return Conv2DDims(n, c, hw, hw, c, hw, hw, 3, 3, 1, 1, 1, 1, 1, 1, 1)


@pytest.mark.parametrize("n, c, hw, const_algo, input_algo", [
    (1, 64, 56, A.WINOGRAD_F4, A.WINOGRAD_F4),     # 196 tiles: F(4x4)'s transform pays even per run
    (1, 512, 4, A.WINOGRAD, A.IM2COL),             # 1 tile: a per-run transform of 262k filters does not
    (1, 256, 14, A.WINOGRAD, A.WINOGRAD),
])
def test_weight_input_counts_the_filter_transform(n, c, hw, const_algo, input_algo):
    """With the weight a plan input, Winograd's filter transform runs every
    run: auto takes the cheapest total (runtime_weight_cost_ns), which may be
    another algorithm; a constant weight keeps the plain choice."""
    from rlx_cpu.algorithms import runtime_weight_cost_ns
    d = _dims3x3(n, c, hw)
    # const_algo: the tile GEMMs on sgemm (on the microkernel 256->256 at
    # 14x14 takes F(4x4): test_winograd_f4.py)
    assert select_conv_algorithm(d, "auto", ConvFlags(microkernel=False)) == const_algo
    got = select_conv_algorithm(d, "auto", ConvFlags(), weight_constant=False)
    assert got == input_algo
    others = [A.WINOGRAD, A.WINOGRAD_F4, A.IM2COL]
    assert runtime_weight_cost_ns(d, got) == min(runtime_weight_cost_ns(d, a) for a in others)
    # the compiled plan agrees: weight as a graph input vs a constant
    rng = np.random.default_rng(0)
    w = rng.standard_normal((c, c, 3, 3)).astype(np.float32)
    g = rlx_cpu.Graph()
    x = g.input("x", (n, c, hw, hw))
    wi = g.input("w", w.shape)
    g.output(g.conv2d(x, wi, padding=1))
    assert chosen_algorithm(rlx_cpu.compile(g)) == input_algo
