"""Conv backward (input and weight gradients) for 1-D, 2-D and 3-D convs.

Checked against the float64 adjoint in reference.py, against central finite
differences of the float64 forward reference (conv_nd), for thread-count
invariance and run-to-run determinism, against NaN guards around every
buffer, and for build-time errors."""
import numpy as np
import pytest

import reference as R
from conftest import run_script
from guarded import Guarded
import rlx_cpu
from rlx_cpu import _backward, algorithms, functional as F
from rlx_cpu.algorithms import ConvBackwardAlgorithm, ConvFlags, select_conv_backward_algorithm
from rlx_cpu.ops.conv_backward import ConvBackwardInputThunk, ConvBackwardWeightThunk, transposed_phases

# id, n, c_in, c_out, groups, spatial, kernel, stride, pads_begin, pads_end, dilation
CASES = [
    ("2d-basic", 2, 3, 4, 1, (7, 8), (3, 3), 1, 1, 1, 1),
    ("2d-stride-asym-pad-grouped", 3, 4, 6, 2, (9, 7), (3, 2), (2, 1), (1, 0), (0, 2), (1, 2)),
    ("2d-dilated-b1", 1, 4, 4, 1, (9, 10), (3, 3), (1, 2), (2, 1), (1, 2), (2, 2)),
    ("2d-depthwise", 2, 6, 6, 6, (6, 7), (3, 3), 2, 1, 1, 1),
    ("2d-depthwise-b1", 1, 4, 8, 4, (5, 6), (3, 3), 1, (1, 0), (0, 1), 1),
    ("2d-1x1", 3, 5, 4, 1, (5, 6), (1, 1), 1, 0, 0, 1),
    ("2d-1x1-b1", 1, 5, 4, 1, (5, 6), (1, 1), 1, 0, 0, 1),
    ("2d-1x1-grouped", 2, 4, 6, 2, (4, 5), (1, 1), 1, 0, 0, 1),
    ("2d-1x1-strided", 2, 3, 4, 1, (7, 7), (1, 1), 2, 0, 0, 1),
    ("2d-uncovered-tail", 2, 2, 3, 1, (8, 8), (3, 3), 3, 0, 0, 1),
    ("2d-batch5", 5, 3, 4, 1, (6, 6), (3, 3), 1, (0, 1), (1, 0), 1),
    ("2d-kernel-wider-than-stride", 2, 2, 2, 1, (6, 11), (2, 5), (1, 3), (1, 2), (0, 2), (1, 1)),
    ("1d", 3, 4, 6, 2, (17,), (5,), 2, 2, 3, 2),
    ("1d-b1", 1, 2, 3, 1, (12,), (3,), 1, 1, 1, 1),
    ("3d", 2, 2, 4, 2, (4, 5, 6), (2, 3, 2), (1, 2, 1), (1, 0, 1), (0, 1, 1), (2, 1, 1)),
    ("3d-b1", 1, 3, 2, 1, (5, 4, 4), (3, 2, 2), (2, 1, 1), 1, (1, 0, 0), 1),
]
IDS = [c[0] for c in CASES]


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


class Case:
    def __init__(self, spec, seed=0):
        (self.name, n, c_in, c_out, self.groups, sp, self.kernel, stride, pb, pe, dil) = spec
        self.nsp = len(sp)
        self.stride, self.dilation = _tup(stride, self.nsp), _tup(dil, self.nsp)
        self.pb, self.pe = _tup(pb, self.nsp), _tup(pe, self.nsp)
        self.padding = tuple(zip(self.pb, self.pe))
        self.x_shape = (n, c_in) + sp
        self.w_shape = (c_out, c_in // self.groups) + self.kernel
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal(self.x_shape).astype(np.float32)
        self.w = rng.standard_normal(self.w_shape).astype(np.float32)
        y = self.forward(self.x, self.w)
        self.dy = rng.standard_normal(y.shape).astype(np.float32)

    def forward(self, x, w):
        return R.conv_nd(x, w, None, self.stride, self.pb, self.pe, self.dilation, self.groups)

    def ref_dx(self):
        return R.conv_nd_backward_input(self.dy, self.w, self.x_shape, self.stride, self.pb, self.pe,
                                        self.dilation, self.groups)

    def ref_dw(self):
        return R.conv_nd_backward_weight(self.x, self.dy, self.w_shape, self.stride, self.pb, self.pe,
                                         self.dilation, self.groups)

    def graph(self):
        g = rlx_cpu.Graph()
        dy, w, x = g.input("dy", self.dy.shape), g.input("w", self.w_shape), g.input("x", self.x_shape)
        geo = dict(stride=self.stride, padding=self.padding, dilation=self.dilation, groups=self.groups)
        dx = getattr(g, f"conv{self.nsp}d_backward_input")(dy, w, self.x_shape, **geo)
        dw = getattr(g, f"conv{self.nsp}d_backward_weight")(x, dy, self.w_shape, **geo)
        g.output(dx, dw)
        return g

    def feeds(self):
        return {"dy": self.dy, "w": self.w, "x": self.x}

    def plan(self, threads, algorithm="auto"):
        return rlx_cpu.compile(self.graph(), conv_algorithm=algorithm, num_threads=threads)


@pytest.fixture(params=CASES, ids=IDS)
def case(request):
    return Case(request.param)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("algorithm", ["auto", "reference"])
def test_matches_float64_reference(case, algorithm, threads):
    dx, dw = case.plan(threads, algorithm).run(case.feeds())
    tol = 1e-4 if algorithm == "auto" else 1e-5      # GEMM in float32; reference loops in double
    assert R.rel_error(dx, case.ref_dx()) <= tol
    assert R.rel_error(dw, case.ref_dw()) <= tol


def test_matches_central_differences_of_forward(case):
    """d/dx and d/dw of L = sum(conv_nd(x, w) * dy), by central differences of
    the float64 forward reference (eps 1e-3) at sampled entries."""
    rng = np.random.default_rng(1)
    dx, dw = case.plan(2).run(case.feeds())
    dy = case.dy.astype(np.float64)
    ix = R.sample_indices(dx.size, 20, rng)
    iw = R.sample_indices(dw.size, 20, rng)
    fd_x = R.numeric_grad(lambda x: float((case.forward(x, case.w) * dy).sum()), case.x, ix)
    fd_w = R.numeric_grad(lambda w: float((case.forward(case.x, w) * dy).sum()), case.w, iw)
    assert np.abs(dx.reshape(-1)[ix] - fd_x).max() <= 1e-4 * max(np.abs(dx).max(), 1e-30)
    assert np.abs(dw.reshape(-1)[iw] - fd_w).max() <= 1e-4 * max(np.abs(dw).max(), 1e-30)


def test_deterministic_and_thread_invariant(case):
    p2 = case.plan(2)
    first = p2.run(case.feeds())
    again = p2.run(case.feeds())
    for a, b in zip(first, again):
        assert np.array_equal(a, b)                  # fixed thread count: bitwise the same
    for a, b in zip(first, case.plan(1).run(case.feeds())):
        assert R.rel_error(a, b) <= 1e-6


def test_no_access_outside_buffers(case):
    """NaN guards around every slice stay untouched and never leak into results."""
    for threads in (1, 2):
        gp = Guarded(case.plan(threads))
        dx, dw = gp.run(case.feeds())
        assert gp.guards_intact()
        assert R.rel_error(dx, case.ref_dx()) <= 1e-4
        assert R.rel_error(dw, case.ref_dw()) <= 1e-4


def test_runs_with_fewer_threads_than_compiled_for(case):
    """Scratch is sized for every thread count up to the plan's."""
    plan = case.plan(2)
    ctx = plan.new_context()
    ctx.load(case.feeds())
    for launch in ctx.launches:
        launch.execute(1)
    assert R.rel_error(ctx.outputs[0], case.ref_dx()) <= 1e-4
    assert R.rel_error(ctx.outputs[1], case.ref_dw()) <= 1e-4


def test_output_buffers_are_overwritten_not_accumulated():
    """A second run with different data gives the new gradients (kernels write,
    never add to, their outputs)."""
    c1, c2 = Case(CASES[1], seed=3), Case(CASES[1], seed=4)
    plan = c1.plan(2)
    plan.run(c1.feeds())
    dx, dw = plan.run(c2.feeds())
    assert R.rel_error(dx, c2.ref_dx()) <= 1e-4
    assert R.rel_error(dw, c2.ref_dw()) <= 1e-4


# -- algorithm choice and scratch ------------------------------------------------

def _thunks(plan):
    return [t for t in plan.thunks if isinstance(t, (ConvBackwardInputThunk, ConvBackwardWeightThunk))]


def _weight_thunk(plan):
    (tw,) = [t for t in plan.thunks if isinstance(t, ConvBackwardWeightThunk)]
    return tw


@pytest.mark.parametrize("name", IDS)
def test_input_gradient_runs_as_forward_convs(name):
    """An input gradient lowers to forward convs of dy with the flipped
    weight, one per output phase of the stride
    (conv_backward.transposed_phases; its parity is the parity test above);
    1x1 ones at stride 1, a kernel smaller than its stride and dilation with
    stride keep the gradient kernels; a strided depthwise one runs as one
    conv_transpose_depthwise launch."""
    case = Case(CASES[IDS.index(name)])
    plan = case.plan(2)
    (tw,) = [t for t in plan.thunks if isinstance(t, ConvBackwardWeightThunk)]
    d = tw.dims
    phases = transposed_phases(d.n, d.c_out, d.c_in, d.out_sp, d.in_sp, d.kernel, d.stride, d.pad, d.dilation,
                               d.groups)
    kinds = [t.kind for t in plan.thunks]
    assert ("conv_backward_input" not in kinds) == (phases is not None), kinds
    depthwise = d.groups == d.c_in == d.c_out and d.groups > 1 and d.in_sp[0] == 1
    if phases is not None:
        assert sorted({p.step for p in phases}) == [tuple(d.stride)]
        if depthwise and len(phases) > 1:
            # one launch from dy, no phase convs or scatters (ops/conv_backward.py)
            assert "conv_transpose_depthwise" in kinds and "phase_scatter" not in kinds, kinds
        else:
            assert kinds.count("phase_scatter") == (0 if len(phases) == 1 and set(case.stride) == {1}
                                                    else len(phases))
    expected = {"2d-basic": True, "1d-b1": True, "2d-batch5": True, "3d-b1": True,
                "2d-1x1-b1": False, "2d-1x1-strided": False, "2d-uncovered-tail": True, "2d-depthwise": True}
    if name in expected:
        assert (phases is not None) == expected[name]


@pytest.mark.parametrize("name, want", [("2d-1x1", "gemm_1x1"), ("2d-1x1-strided", "gemm"),
                                        ("3d", "gemm"), ("1d", "gemm")])
def test_algorithm_choice(name, want):
    # the gradient kernels' own choice ('im2col': no lowering to forward
    # convs, which auto does where it can: test_input_gradient_runs_as_forward_convs)
    case = Case(CASES[IDS.index(name)])
    assert [t.algorithm.label for t in _thunks(case.plan(2, "im2col"))] == [want, want]
    assert [t.algorithm.label for t in _thunks(case.plan(2, "reference"))] == ["reference"] * 2


def test_fast_conv_off_selects_reference():
    dims = _thunks(Case(CASES[0]).plan(1))[0].dims
    assert select_conv_backward_algorithm(dims, "auto", ConvFlags(fast=False)) == ConvBackwardAlgorithm.REFERENCE
    assert select_conv_backward_algorithm(dims, "auto", ConvFlags(fast=True)) == ConvBackwardAlgorithm.WIDE
    assert select_conv_backward_algorithm(dims, "auto", ConvFlags(bwd_wide=False)) == ConvBackwardAlgorithm.GEMM
    assert select_conv_backward_algorithm(dims, "auto", ConvFlags(), kernel="input") == ConvBackwardAlgorithm.GEMM


def test_weight_scratch_holds_per_thread_partials(monkeypatch):
    """Batch >= threads and few groups: one partial dW plus one patch slab per
    thread, sized at compile time for the plan's thread count (the im2col
    GEMM path; at 1 thread auto would pick the wide kernel)."""
    monkeypatch.setenv("RLX_BWD_WIDE", "0")
    case = Case(CASES[IDS.index("2d-batch5")])
    plan = case.plan(2)
    tw = _weight_thunk(plan)
    d = tw.dims
    k = d.c_in // d.groups * int(np.prod(d.kernel))
    p = int(np.prod(d.out_sp))
    if plan.num_threads == 1:          # a build without OpenMP runs every plan on one thread
        assert tw.scratch.nbytes == 4 * k * p
        return
    assert tw.scratch.nbytes == 4 * 2 * (d.c_out * k + k * p)
    assert _weight_thunk(case.plan(1)).scratch.nbytes == 4 * k * p


def test_1x1_needs_no_scratch():
    case = Case(CASES[IDS.index("2d-1x1-b1")])
    ti, tw = _thunks(case.plan(2))
    assert ti.scratch is None and tw.scratch is None


def test_scratch_function_covers_every_thread_count():
    dims = _weight_thunk(Case(CASES[IDS.index("2d-batch5")]).plan(1)).dims.as_tuple()
    for algo in (_backward.BWD_GEMM, _backward.BWD_GEMM_1X1, _backward.BWD_WIDE):
        sizes = [_backward.conv_backward_weight_scratch_floats(dims, algo, t) for t in range(1, 9)]
        assert sizes == sorted(sizes)       # a plan for t threads covers any run with fewer


# -- the wide weight-gradient kernel (stride 1, rank <= 2) -----------------------

# id, n, c_in, c_out, groups, spatial, kernel, stride, pads_begin, pads_end, dilation
WIDE_CASES = [
    ("odd-width", 2, 3, 5, 1, (7, 9), (3, 3), 1, 1, 1, 1),
    ("pad0", 3, 4, 8, 1, (8, 11), (3, 3), 1, 0, 0, 1),
    ("pad2-5x5", 2, 3, 6, 1, (9, 7), (5, 5), 1, 2, 2, 1),
    ("pad2-3x3", 2, 2, 4, 1, (4, 5), (3, 3), 1, 2, 2, 1),        # output larger than the input
    ("asym-pad-rect-kernel", 2, 4, 7, 1, (6, 13), (3, 2), 1, (1, 0), (0, 1), 1),
    ("dilated", 1, 4, 9, 1, (10, 9), (3, 3), 1, 2, 2, 2),
    ("grouped", 2, 6, 10, 2, (7, 8), (3, 3), 1, 1, 1, 1),
    ("depthwise", 2, 6, 6, 6, (9, 6), (3, 3), 1, 1, 1, 1),
    ("b1", 1, 8, 16, 1, (5, 21), (3, 3), 1, 1, 1, 1),
    ("1x1-padded", 2, 5, 4, 1, (5, 6), (1, 1), 1, 1, 1, 1),
    ("narrow", 2, 3, 4, 1, (8, 3), (3, 3), 1, 0, 0, 1),           # wide grid 3x the real pixels
    ("1d", 3, 4, 6, 2, (37,), (5,), 1, 2, 1, 2),
    ("1d-b1-long", 1, 3, 13, 1, (301,), (7,), 1, 3, 3, 1),
    ("1d-chunks", 2, 3, 5, 1, (9000,), (3,), 1, 1, 1, 1),          # dots longer than one pixel chunk
    ("image-groups", 5, 3, 6, 1, (30, 40), (3, 3), 1, 1, 1, 1),     # images summed 3 + 2 per dot
]
WIDE_IDS = [c[0] for c in WIDE_CASES]


def _magnitude_error(dw, case):
    """max |dw - ref| relative to the same sum over |x| |dy| (the error a
    float32 sum of those terms can have, whatever cancels)."""
    mag = R.conv_nd_backward_weight(np.abs(case.x), np.abs(case.dy), case.w_shape, case.stride, case.pb, case.pe,
                                    case.dilation, case.groups)
    return float(np.max(np.abs(dw - case.ref_dw()) / np.maximum(mag, 1e-30)))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("wide", ["1", "0"])
@pytest.mark.parametrize("spec", WIDE_CASES, ids=WIDE_IDS)
def test_wide_matches_float64_reference(spec, wide, threads, monkeypatch):
    """RLX_BWD_WIDE forces the wide kernel on (or off: im2col + sgemm) on
    stride-1 conv1d/conv2d shapes; both within 1e-4 of the float64 adjoint
    (measured: ~5e-8 of the |x| |dy| sum on the wide path)."""
    monkeypatch.setenv("RLX_BWD_WIDE", wide)
    case = Case(spec)
    plan = case.plan(threads)
    assert _weight_thunk(plan).algorithm.label == ("wide" if wide == "1" else "gemm")
    dx, dw = plan.run(case.feeds())
    assert R.rel_error(dw, case.ref_dw()) <= 1e-4
    assert _magnitude_error(dw, case) <= 1e-6
    assert R.rel_error(dx, case.ref_dx()) <= 1e-4


@pytest.mark.parametrize("spec", WIDE_CASES, ids=WIDE_IDS)
def test_wide_is_bitwise_the_same_on_any_thread_count(spec, monkeypatch):
    """Each dW row belongs to one (group, channel block) item summed image by
    image: plans for 1 and 2 threads, and a 2-thread plan run on 1 thread,
    give the same bits; NaN guards around every buffer stay intact."""
    monkeypatch.setenv("RLX_BWD_WIDE", "1")
    case = Case(spec)
    p2 = case.plan(2)
    dw2 = p2.run(case.feeds())[1]
    assert np.array_equal(dw2, p2.run(case.feeds())[1])
    assert np.array_equal(dw2, case.plan(1).run(case.feeds())[1])
    ctx = p2.new_context()
    ctx.load(case.feeds())
    for launch in ctx.launches:
        launch.execute(1)
    assert np.array_equal(dw2, ctx.outputs[1])
    gp = Guarded(p2)
    assert np.array_equal(dw2, gp.run(case.feeds())[1])
    assert gp.guards_intact()


def test_wide_image_groups():
    """Small planes sum several images per dot (as many as fill a 4096-pixel
    chunk); a plane of 4096 wide pixels or more, one; a group's padded inputs
    stay under 1 MiB."""
    group = _backward.wide_image_group
    assert group(_weight_dims(WIDE_CASES[WIDE_IDS.index("image-groups")]).as_tuple()) == 3     # L 1258 -> 1264
    assert group(_weight_dims(BENCH_SPEC).as_tuple()) == 4                                       # L 838 -> 848
    assert group(_weight_dims(("b32-14", 32, 64, 64, 1, (14, 14), (3, 3), 1, 1, 1, 1)).as_tuple()) == 15   # 1 MiB
    assert group(_weight_dims(("1d", 2, 3, 5, 1, (9000,), (3,), 1, 1, 1, 1)).as_tuple()) == 1
    assert group(_weight_dims(("b2-7", 2, 8, 8, 1, (7, 7), (3, 3), 1, 1, 1, 1)).as_tuple()) == 2   # capped by N
    # 512 channels of 9 x 9 padded planes: 41.5k floats per image, so 6 per MiB, not 16
    assert group(_weight_dims(("b32-7-512", 32, 512, 8, 1, (7, 7), (3, 3), 1, 1, 1, 1)).as_tuple()) == 6


def test_wide_output_is_overwritten_not_accumulated(monkeypatch):
    monkeypatch.setenv("RLX_BWD_WIDE", "1")
    c1, c2 = Case(WIDE_CASES[6], seed=3), Case(WIDE_CASES[6], seed=4)
    plan = c1.plan(2)
    plan.run(c1.feeds())
    assert R.rel_error(plan.run(c2.feeds())[1], c2.ref_dw()) <= 1e-4


BENCH_SPEC = ("bench", 32, 32, 64, 1, (28, 28), (3, 3), 1, 1, 1, 1)


def _weight_dims(spec, threads=1):
    return _weight_thunk(Case(spec).plan(threads)).dims


def test_wide_choice():
    """auto picks the wide kernel for stride-1 conv2d with enough channel
    blocks per thread and little waste on the wide grid; never for strided or
    3-D convs, even when forced; RLX_BWD_WIDE=0 keeps im2col + sgemm."""
    wide, gemm = ConvBackwardAlgorithm.WIDE, ConvBackwardAlgorithm.GEMM
    d = _weight_dims(BENCH_SPEC)
    no_wino = ConvFlags(bwd_winograd=False)      # auto prefers it here (test_winograd_weight_gradient_choice)
    for t in (1, 2):
        assert select_conv_backward_algorithm(d, "auto", no_wino, nthreads=t) == wide
        assert select_conv_backward_algorithm(d, "im2col", no_wino, nthreads=t) == wide
        assert select_conv_backward_algorithm(d, "auto", ConvFlags(bwd_wide=False, bwd_winograd=False),
                                              nthreads=t) == gemm
        assert select_conv_backward_algorithm(d, "reference", ConvFlags(bwd_wide=True), nthreads=t) \
            == ConvBackwardAlgorithm.REFERENCE
    assert _backward.parallel_strategy("weight_wide", d.as_tuple(), 2) == "channel_blocks"
    assert _backward.parallel_strategy("weight_wide", d.as_tuple(), 1) == "serial"
    for name in ("2d-stride-asym-pad-grouped", "3d", "3d-b1", "2d-uncovered-tail"):
        dn = _weight_dims(CASES[IDS.index(name)])
        assert not algorithms.is_backward_wide(dn), name
        assert select_conv_backward_algorithm(dn, "auto", ConvFlags(bwd_wide=True)) != wide, name
    narrow = _weight_dims(WIDE_CASES[WIDE_IDS.index("narrow")])
    assert algorithms.is_backward_wide(narrow) and not algorithms.prefers_backward_wide(narrow)
    one_block = _weight_dims(CASES[IDS.index("2d-batch5")])      # 4 output channels: one item
    assert algorithms.prefers_backward_wide(one_block, 1) and not algorithms.prefers_backward_wide(one_block, 2)


def test_wide_kernel_refuses_ineligible_dims():
    d = _weight_dims(CASES[IDS.index("2d-stride-asym-pad-grouped")]).as_tuple()
    dw = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match=r"wide kernel needs stride 1"):
        _backward.ConvBackwardWeightLaunch(dw, dw, dw, dw, d, _backward.BWD_WIDE, 1)
    d = _weight_dims(BENCH_SPEC).as_tuple()
    with pytest.raises(ValueError, match=r"wide scratch of 10 floats, needs"):
        _backward.ConvBackwardWeightLaunch(dw, dw, dw, dw, d, _backward.BWD_WIDE, 2)


WIDE_BASELINE_SCRIPT = r"""
import numpy as np
import test_conv_backward as T
worst = 0.0
for spec in T.WIDE_CASES:
    case = T.Case(spec)
    plan = case.plan(2)
    assert T._weight_thunk(plan).algorithm.label == "wide"
    worst = max(worst, T._magnitude_error(plan.run(case.feeds())[1], case))
print(worst)
"""


def test_wide_portable_variant_matches_reference():
    """RLX_SIMD=baseline: the portable C loop of the wide kernel."""
    out = run_script(WIDE_BASELINE_SCRIPT, RLX_SIMD="baseline", RLX_BWD_WIDE="1")
    assert float(out.strip().splitlines()[-1]) <= 1e-6


WIDE_TILES_SCRIPT = r"""
import numpy as np
import test_conv_backward as T
rng = np.random.default_rng(5)


def dw_of(x, dy, c_in, c_out, kernel):
    case = T.Case(("tiles", 2, c_in, c_out, 1, (9, 11), kernel, 1, 1, 1, 1))
    case.x, case.dy = np.ascontiguousarray(x[:, :c_in]), np.ascontiguousarray(dy[:, :c_out])
    plan = case.plan(1)
    assert T._weight_thunk(plan).algorithm.label == "wide"
    dw = plan.run(case.feeds())[1]
    assert T._magnitude_error(dw, case) <= 1e-6
    return dw


for kernel in [(3, 3), (1, 5)]:
    dy_shape = T.Case(("s", 2, 1, 4, 1, (9, 11), kernel, 1, 1, 1, 1)).dy.shape
    x = rng.standard_normal((2, 2, 9, 11)).astype(np.float32)
    dy = rng.standard_normal(dy_shape).astype(np.float32)
    one = dw_of(x, dy, 1, 4, kernel)
    # 2 input channels: input channel 0's (ci, tap) rows fall in other tiles
    np.testing.assert_array_equal(dw_of(x, dy, 2, 4, kernel)[:, :1], one)
    # 3 output channels: a block narrower than the tile runs the one-pair kernel
    np.testing.assert_array_equal(dw_of(x, dy, 1, 3, kernel), one[:3])
print("ok")
"""


@pytest.mark.parametrize("simd", ["baseline", "avx2", "auto"])
def test_wide_tiles_and_edges_give_the_same_bits(simd):
    """Each SIMD level's wide kernel fixes one summation order per (output
    channel, (ci, tap)) pair: its register tiles (4 x 3 on AVX2; 4 x 6 and
    4 x 3 on AVX-512) and the one-pair edge kernel give the same bits.  The
    same pairs land in different kernels when the input or output channel
    count changes, which must not change them."""
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD=simd, RLX_BWD_WIDE="1")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", WIDE_TILES_SCRIPT], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "ok"


# -- Winograd weight gradient (3x3, stride 1, 2-D; src/rlx_bwd_wino.h) ----------

WINO_CASES = [
    ("odd-out", 2, 3, 5, 1, (7, 9), (3, 3), 1, 1, 1, 1),               # half tiles on both axes
    ("pad0", 3, 4, 8, 1, (8, 11), (3, 3), 1, 0, 0, 1),
    ("pad2", 2, 2, 4, 1, (4, 5), (3, 3), 1, 2, 2, 1),                  # tiles reading rows outside x
    ("asym-pad", 2, 4, 7, 1, (6, 13), (3, 3), 1, (1, 0), (0, 2), 1),
    ("grouped", 2, 6, 10, 2, (7, 8), (3, 3), 1, 1, 1, 1),
    ("depthwise", 2, 6, 6, 6, (9, 6), (3, 3), 1, 1, 1, 1),
    ("rows-40", 1, 3, 5, 1, (5, 40), (3, 3), 1, 1, 1, 1),              # 20 tiles a row: 8 + 8 + 4
    ("rows-32", 2, 2, 3, 1, (6, 32), (3, 3), 1, 1, 1, 1),              # dy rows of whole 16-blocks
    ("chunks", 3, 2, 3, 1, (40, 40), (3, 3), 1, 1, 1, 1),              # 2 chunks, the 2nd from mid-image
    ("one-column", 1, 5, 6, 1, (9, 3), (3, 3), 1, 0, 0, 1),            # one tile a row
    ("channels-7x6", 2, 7, 6, 1, (10, 10), (3, 3), 1, 1, 1, 1),        # 7 = 4 + 3 input rows, 6 + 0 output
]
WINO_IDS = [c[0] for c in WINO_CASES]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", WINO_CASES, ids=WINO_IDS)
def test_winograd_weight_gradient_matches_float64_reference(spec, threads, monkeypatch):
    """RLX_BWD_WINOGRAD=1 forces the Winograd weight gradient on every 3x3
    stride-1 conv2d: within 1e-4 of the float64 adjoint, relative to its
    magnitude, and within 1e-6 of the |x| |dy| sum per weight (measured:
    2.6e-7 and 2.5e-7 over these cases; the wide kernel 2.7e-7 and 1.5e-7)."""
    monkeypatch.setenv("RLX_BWD_WINOGRAD", "1")
    case = Case(spec)
    plan = case.plan(threads)
    assert _weight_thunk(plan).algorithm.label == "winograd"
    dx, dw = plan.run(case.feeds())
    assert R.rel_error(dw, case.ref_dw()) <= 1e-4
    assert _magnitude_error(dw, case) <= 1e-6
    assert R.rel_error(dx, case.ref_dx()) <= 1e-4


@pytest.mark.parametrize("spec", WINO_CASES, ids=WINO_IDS)
def test_winograd_weight_gradient_same_bits_on_any_thread_count(spec, monkeypatch):
    """Each point's M is summed by one part (of at most 4), chunk after
    chunk: plans for 1 to 4 threads give the same bits, a 4-thread plan run
    on 1 thread too, and the guards around every buffer stay intact."""
    monkeypatch.setenv("RLX_BWD_WINOGRAD", "1")
    case = Case(spec)
    one = case.plan(1).run(case.feeds())[1]
    for t in (2, 3, 4):
        assert np.array_equal(one, case.plan(t).run(case.feeds())[1]), t
    p4 = case.plan(4)
    ctx = p4.new_context()
    ctx.load(case.feeds())
    for launch in ctx.launches:
        launch.execute(1)
    assert np.array_equal(one, ctx.outputs[1])
    gp = Guarded(p4)
    assert np.array_equal(one, gp.run(case.feeds())[1])
    assert gp.guards_intact()


def test_winograd_weight_gradient_chunks():
    """The "chunks" case runs 2 chunks of whole tile rows, the second
    starting inside the last image; "odd-out" one."""
    big = _weight_dims(WINO_CASES[WINO_IDS.index("chunks")])
    rows, length = _backward.winograd_chunk(big.as_tuple())
    assert rows == 1024 // 20 and rows < 3 * 20 < 2 * rows and length == 1024 + 16
    assert 2 * rows % 20 != 0 and rows // 20 == 2           # chunk 2 starts at image 2, tile row 11
    small = _weight_dims(WINO_CASES[0])
    assert _backward.winograd_chunk(small.as_tuple()) == (2 * 4, 48 + 16)      # 2 images x 4 tile rows of 5: 40


def test_winograd_weight_gradient_overwrites_its_output(monkeypatch):
    """A second run with other data gives that data's gradient: M and the
    transformed tiles are scratch, rewritten every run."""
    monkeypatch.setenv("RLX_BWD_WINOGRAD", "1")
    c1, c2 = Case(WINO_CASES[8], seed=3), Case(WINO_CASES[8], seed=4)
    plan = c1.plan(2)
    plan.run(c1.feeds())
    assert R.rel_error(plan.run(c2.feeds())[1], c2.ref_dw()) <= 1e-4


def test_winograd_weight_gradient_choice():
    """auto picks the Winograd weight gradient for 3x3 stride-1 conv2d with
    at least 32 channels per group on each side and 256 tiles; RLX_BWD_WIDE=1
    keeps the wide kernel, RLX_BWD_WINOGRAD=0 never runs it, =1 runs it on
    every eligible shape and on no other."""
    wino, wide = ConvBackwardAlgorithm.WINOGRAD, ConvBackwardAlgorithm.WIDE
    d = _weight_dims(BENCH_SPEC)
    assert algorithms.prefers_backward_winograd(d)
    for t in (1, 2):
        assert select_conv_backward_algorithm(d, "auto", ConvFlags(), nthreads=t) == wino
        assert select_conv_backward_algorithm(d, "auto", ConvFlags(bwd_wide=True), nthreads=t) == wide
        assert select_conv_backward_algorithm(d, "auto", ConvFlags(bwd_winograd=False), nthreads=t) == wide
        assert select_conv_backward_algorithm(d, "reference", ConvFlags(bwd_winograd=True), nthreads=t) \
            == ConvBackwardAlgorithm.REFERENCE
    # too few channels, too few tiles (512 channels on 7x7, batch 2: 32 tiles)
    few = _weight_dims(("few", 32, 16, 64, 1, (28, 28), (3, 3), 1, 1, 1, 1))
    small = _weight_dims(("small", 2, 32, 32, 1, (7, 7), (3, 3), 1, 1, 1, 1))
    for dn in (few, small):
        assert algorithms.is_backward_winograd(dn) and not algorithms.prefers_backward_winograd(dn)
        assert select_conv_backward_algorithm(dn, "auto", ConvFlags()) != wino
        assert select_conv_backward_algorithm(dn, "auto", ConvFlags(bwd_winograd=True)) == wino
    for name in ("2d-stride-asym-pad-grouped", "2d-dilated-b1", "2d-1x1", "1d", "3d"):
        dn = _weight_dims(CASES[IDS.index(name)])
        assert not algorithms.is_backward_winograd(dn), name
        assert select_conv_backward_algorithm(dn, "auto", ConvFlags(bwd_winograd=True)) != wino, name
    five = _weight_dims(WIDE_CASES[WIDE_IDS.index("pad2-5x5")])
    assert not algorithms.is_backward_winograd(five)


def test_winograd_weight_gradient_refuses_ineligible_dims():
    d = _weight_dims(CASES[IDS.index("2d-stride-asym-pad-grouped")]).as_tuple()
    dw = np.zeros(10, np.float32)
    with pytest.raises(ValueError, match="Winograd kernel needs a 3x3 kernel"):
        _backward.ConvBackwardWeightLaunch(dw, dw, dw, dw, d, _backward.BWD_WINOGRAD, 2)
    ok = _weight_dims(WINO_CASES[0]).as_tuple()
    with pytest.raises(ValueError, match="Winograd scratch"):
        _backward.ConvBackwardWeightLaunch(dw, dw, dw, dw, ok, _backward.BWD_WINOGRAD, 2)


WINO_BASELINE_SCRIPT = r"""
import numpy as np
import reference as R
import test_conv_backward as T
worst = 0.0
for spec in T.WINO_CASES:
    case = T.Case(spec)
    plan = case.plan(2)
    assert T._weight_thunk(plan).algorithm.label == "winograd"
    dw = plan.run(case.feeds())[1]
    assert R.rel_error(dw, case.ref_dw()) <= 1e-4
    worst = max(worst, T._magnitude_error(dw, case))
print(worst)
"""


def test_winograd_weight_gradient_portable_variant():
    """RLX_SIMD=baseline: the portable transforms (and the wide kernel's
    portable dots)."""
    out = run_script(WINO_BASELINE_SCRIPT, RLX_SIMD="baseline", RLX_BWD_WINOGRAD="1")
    assert float(out.strip().splitlines()[-1]) <= 1e-6


# -- functional API -------------------------------------------------------------

def test_functional_matches_torch_nn_grad_signature():
    case = Case(CASES[1])
    geo = (case.stride, case.padding, case.dilation, case.groups)
    dx = F.conv2d_input(case.x_shape, case.w, case.dy, *geo)
    dw = F.conv2d_weight(case.x, case.w_shape, case.dy, *geo)
    assert R.rel_error(dx, case.ref_dx()) <= 1e-4
    assert R.rel_error(dw, case.ref_dw()) <= 1e-4
    assert np.array_equal(dx, rlx_cpu.conv2d_backward_input(case.dy, case.w, case.x_shape, *geo))
    assert np.array_equal(dw, rlx_cpu.conv2d_backward_weight(case.x, case.dy, case.w_shape, *geo))


@pytest.mark.parametrize("name", ["1d", "3d"])
def test_functional_other_ranks(name):
    case = Case(CASES[IDS.index(name)])
    nd = case.nsp
    geo = dict(stride=case.stride, padding=case.padding, dilation=case.dilation, groups=case.groups)
    dx = getattr(F, f"conv{nd}d_input")(case.x_shape, case.w, case.dy, **geo)
    dw = getattr(F, f"conv{nd}d_weight")(case.x, case.w_shape, case.dy, **geo)
    assert R.rel_error(dx, case.ref_dx()) <= 1e-4
    assert R.rel_error(dw, case.ref_dw()) <= 1e-4


def test_symmetric_int_padding_as_torch():
    """padding=p means p on both sides of every axis, as torch.nn.grad."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    dy = rng.standard_normal(R.conv_nd(x, w, None, 2, 1, 1).shape).astype(np.float32)
    assert R.rel_error(F.conv2d_input(x.shape, w, dy, stride=2, padding=1),
                       R.conv_nd_backward_input(dy, w, x.shape, 2, 1, 1)) <= 1e-4
    assert R.rel_error(F.conv2d_weight(x, w.shape, dy, stride=2, padding=1),
                       R.conv_nd_backward_weight(x, dy, w.shape, 2, 1, 1)) <= 1e-4


# -- build-time errors ------------------------------------------------------------

def _g():
    g = rlx_cpu.Graph()
    return g, g.input("dy", (1, 4, 6, 6)), g.input("w", (4, 3, 3, 3)), g.input("x", (1, 3, 8, 8))


def test_error_grad_output_shape():
    g, dy, w, x = _g()
    with pytest.raises(ValueError, match=r"conv2d_backward_input: grad_output must have the conv's output "
                                         r"shape \[1, 4, 3, 3\].*grad_output \[1, 4, 6, 6\]"):
        g.conv2d_backward_input(dy, w, (1, 3, 8, 8), stride=2)
    with pytest.raises(ValueError, match=r"conv2d_backward_weight: grad_output must have .*\[1, 4, 7, 7\]"):
        g.conv2d_backward_weight(x, dy, (4, 3, 2, 2))


def test_error_channels_and_groups():
    g, dy, w, x = _g()
    with pytest.raises(ValueError, match=r"conv2d_backward_input: channel mismatch: input has 6 channels "
                                         r"but weight expects 3"):
        g.conv2d_backward_input(dy, w, (1, 6, 8, 8))
    with pytest.raises(ValueError, match=r"conv2d_backward_weight: groups=2 must divide in_channels=3"):
        g.conv2d_backward_weight(x, dy, (4, 3, 3, 3), groups=2)
    with pytest.raises(ValueError, match=r"groups must be a positive integer"):
        g.conv2d_backward_input(dy, w, (1, 3, 8, 8), groups=0)


def test_error_ranks_and_shape_arguments():
    g, dy, w, x = _g()
    with pytest.raises(ValueError, match=r"conv2d_backward_input: input must have rank 4, got input \[1, 3, 8\]"):
        g.conv2d_backward_input(dy, w, (1, 3, 8))
    with pytest.raises(ValueError, match=r"conv3d_backward_weight: input must have rank 5"):
        g.conv3d_backward_weight(x, dy, (4, 3, 3, 3, 3))
    with pytest.raises(TypeError, match=r"conv2d_backward_input: input_shape must be a sequence of ints"):
        g.conv2d_backward_input(dy, w, 8)
    with pytest.raises(ValueError, match=r"conv2d_backward_weight: every dim of weight_shape must be >= 1"):
        g.conv2d_backward_weight(x, dy, (4, 3, 0, 3))


def test_error_kernel_larger_than_input():
    g = rlx_cpu.Graph()
    dy = g.input("dy", (1, 2, 1, 1))
    with pytest.raises(ValueError, match=r"conv2d_backward_input: the kernel does not fit the padded input"):
        g.conv2d_backward_input(dy, np.zeros((2, 1, 5, 5), np.float32), (1, 1, 3, 3))


@pytest.mark.parametrize("name, input_way, weight_way", [
    ("2d-dilated-b1", "split", "split"),          # batch 1: GEMM panels and rows over both threads
    ("3d-b1", "split", "split"),
    ("2d-1x1-b1", "split", "split"),
    ("2d-batch5", "items", "batch"),              # batch >= threads: per-thread partial dW
    ("2d-depthwise-b1", "items", "groups"),       # groups >= threads: one group per thread
])
def test_every_core_is_used_even_at_batch_1(name, input_way, weight_way):
    dims = _thunks(Case(CASES[IDS.index(name)]).plan(2))[0].dims.as_tuple()
    assert _backward.parallel_strategy("input", dims, 2) == input_way
    assert _backward.parallel_strategy("weight", dims, 2) == weight_way
    assert _backward.parallel_strategy("weight", dims, 1) == "serial"
