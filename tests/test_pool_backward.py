"""max_pool2d / avg_pool2d backward (and the interim forward pools they assume).

Semantics (PyTorch's): the gradient of a max window goes to its first maximum
in window order; overlapping windows accumulate; padded taps and ceil-mode
overhang are never read; avg divides by in-bounds taps or, with
count_include_pad, by the window clipped to the padded input."""
import numpy as np
import pytest

import reference as R
from guarded import Guarded
import rlx_cpu
from rlx_cpu import functional as F

# id, shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode
CASES = [
    ("k2s2", (2, 3, 8, 8), 2, None, 0, 0, 1, False),
    ("overlap-k3s1", (2, 2, 7, 6), 3, 1, 0, 0, 1, False),
    ("overlap-pad", (1, 3, 7, 9), 3, 2, 1, 1, 1, False),
    ("asym-pad", (2, 2, 8, 7), (3, 2), (2, 1), (1, 0), (0, 1), 1, False),
    ("ceil-overhang", (2, 2, 7, 7), 2, 2, 0, 0, 1, True),
    ("ceil-pad-overlap", (1, 2, 6, 9), 3, 2, 1, 1, 1, True),
    ("ceil-drop-last", (1, 1, 5, 5), 2, 2, 1, 1, 1, True),
    ("ceil-asym", (3, 2, 9, 6), (3, 2), (2, 3), (1, 0), (0, 1), 1, True),
    ("dilated", (2, 2, 9, 8), 3, 2, 2, 1, 2, False),
    ("dilated-ceil", (1, 2, 8, 9), (2, 3), (3, 2), (1, 1), (1, 0), (2, 1), True),
    ("batch1-1ch", (1, 1, 6, 6), 2, 1, 0, 0, 1, False),
]
IDS = [c[0] for c in CASES]
AVG_CASES = [c for c in CASES if c[6] == 1]


def _tup(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class PoolCase:
    def __init__(self, spec, x=None, seed=0):
        (self.name, self.shape, self.kernel, self.stride, pb, pe, self.dilation, self.ceil) = spec
        self.pb, self.pe = _tup(pb), _tup(pe)
        self.padding = tuple(zip(self.pb, self.pe))
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal(self.shape).astype(np.float32) if x is None else x.astype(np.float32)
        out = self.ref_max(self.x).shape
        self.dy = rng.standard_normal(out).astype(np.float32)

    def ref_max(self, x):
        return R.max_pool2d(x, self.kernel, self.stride, self.pb, self.pe, self.dilation, self.ceil)

    def ref_max_backward(self):
        return R.max_pool2d_backward(self.x, self.dy, self.kernel, self.stride, self.pb, self.pe,
                                     self.dilation, self.ceil)

    def ref_avg(self, x, cip):
        return R.avg_pool2d(x, self.kernel, self.stride, self.pb, self.pe, self.ceil, cip)

    def ref_avg_backward(self, cip):
        return R.avg_pool2d_backward(self.dy, self.shape, self.kernel, self.stride, self.pb, self.pe,
                                     self.ceil, cip)

    def max_plan(self, threads):
        g = rlx_cpu.Graph()
        x, dy = g.input("x", self.shape), g.input("dy", self.dy.shape)
        g.output(g.max_pool2d_backward(x, dy, self.kernel, self.stride, self.padding, self.dilation, self.ceil),
                 g.max_pool2d(x, self.kernel, self.stride, self.padding, self.dilation, self.ceil))
        return rlx_cpu.compile(g, num_threads=threads)

    def avg_plan(self, threads, cip):
        g = rlx_cpu.Graph()
        x, dy = g.input("x", self.shape), g.input("dy", self.dy.shape)
        g.output(g.avg_pool2d_backward(dy, self.shape, self.kernel, self.stride, self.padding, self.ceil, cip),
                 g.avg_pool2d(x, self.kernel, self.stride, self.padding, self.ceil, cip))
        return rlx_cpu.compile(g, num_threads=threads)

    def feeds(self):
        return {"x": self.x, "dy": self.dy}

    @property
    def overlapping(self):
        k, s, d = _tup(self.kernel), _tup(self.stride or self.kernel), _tup(self.dilation)
        return any(d[i] * (k[i] - 1) + 1 > s[i] for i in range(2))


@pytest.fixture(params=CASES, ids=IDS)
def case(request):
    return PoolCase(request.param)


@pytest.mark.parametrize("threads", [1, 2])
def test_max_backward_matches_reference(case, threads):
    dx, y = case.max_plan(threads).run(case.feeds())
    assert np.array_equal(y, case.ref_max(case.x).astype(np.float32))      # forward: exact
    want = case.ref_max_backward()
    if case.overlapping:
        assert R.rel_error(dx, want) <= 1e-6          # float32 sums of a few dy values
    else:
        assert np.array_equal(dx, want.astype(np.float32))


@pytest.mark.parametrize("cip", [True, False], ids=["count_include_pad", "exclude_pad"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", AVG_CASES, ids=[c[0] for c in AVG_CASES])
def test_avg_backward_matches_reference(spec, threads, cip):
    case = PoolCase(spec)
    dx, y = case.avg_plan(threads, cip).run(case.feeds())
    assert R.rel_error(y, case.ref_avg(case.x, cip)) <= 1e-6
    assert R.rel_error(dx, case.ref_avg_backward(cip)) <= 1e-6


def test_max_backward_central_differences(case):
    """Distinct values spaced 0.01 apart, so eps = 1e-3 never changes a window's argmax."""
    rng = np.random.default_rng(2)
    x = (rng.permutation(int(np.prod(case.shape))).reshape(case.shape) * 0.01).astype(np.float32)
    c = PoolCase((case.name, case.shape, case.kernel, case.stride, case.pb, case.pe, case.dilation, case.ceil),
                 x=x, seed=3)
    dx = c.max_plan(2).run(c.feeds())[0]
    idx = R.sample_indices(dx.size, 40, rng)
    # include entries that receive gradient, not only zeros
    idx = np.union1d(idx, np.flatnonzero(dx)[:20])
    fd = R.numeric_grad(lambda v: float((c.ref_max(v) * c.dy).sum()), c.x, idx)
    assert np.abs(dx.reshape(-1)[idx] - fd).max() <= 1e-4 * np.abs(dx).max()


@pytest.mark.parametrize("cip", [True, False], ids=["count_include_pad", "exclude_pad"])
@pytest.mark.parametrize("spec", AVG_CASES, ids=[c[0] for c in AVG_CASES])
def test_avg_backward_central_differences(spec, cip):
    c = PoolCase(spec, seed=4)
    dx = c.avg_plan(2, cip).run(c.feeds())[0]
    idx = R.sample_indices(dx.size, 40, np.random.default_rng(5))
    fd = R.numeric_grad(lambda v: float((c.ref_avg(v, cip) * c.dy).sum()), c.x, idx)
    assert np.abs(dx.reshape(-1)[idx] - fd).max() <= 1e-4 * np.abs(dx).max()


def test_ties_go_to_first_maximum_in_window_order(case):
    rng = np.random.default_rng(6)
    ties = rng.integers(0, 2, case.shape).astype(np.float32)      # ~half of every window ties
    c = PoolCase((case.name, case.shape, case.kernel, case.stride, case.pb, case.pe, case.dilation, case.ceil),
                 x=ties, seed=7)
    dx = c.max_plan(2).run(c.feeds())[0]
    assert R.rel_error(dx, c.ref_max_backward()) <= 1e-6


def test_constant_input_sends_each_window_to_its_first_in_bounds_tap():
    shape = (1, 1, 5, 5)
    c = PoolCase(("const", shape, 3, 2, 1, 1, 1, True), x=np.zeros(shape))
    c.dy = np.ones_like(c.dy)
    dx = c.max_plan(1).run(c.feeds())[0][0, 0]
    # windows start at rows/cols -1, 1, 3: first in-bounds taps 0, 1, 3
    hit = np.zeros((5, 5), np.float32)
    for r in (0, 1, 3):
        for col in (0, 1, 3):
            hit[r, col] = 1.0
    assert np.array_equal(dx, hit)


def test_nan_takes_the_gradient_and_propagates_forward():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 0, 0, 1] = np.nan        # two NaNs in window (0, 0): the first wins
    x[0, 1, 4, 5] = np.nan
    c = PoolCase(("nan", x.shape, 2, 2, 0, 0, 1, False), x=x, seed=9)
    dx, y = c.max_plan(2).run(c.feeds())
    assert np.isnan(y[0, 0, 0, 0]) and np.isnan(y[0, 1, 2, 2])
    assert np.array_equal(np.isnan(y), np.isnan(c.ref_max(x)))
    assert np.array_equal(dx, c.ref_max_backward().astype(np.float32))
    assert dx[0, 0, 0, 1] == c.dy[0, 0, 0, 0] and dx[0, 0, 1, 1] == 0


def _guarded_clean(plan, case):
    gp = Guarded(plan)
    dx, y = gp.run(case.feeds())
    return gp.guards_intact() and not np.isnan(dx).any() and not np.isnan(y).any()


def test_max_no_access_outside_buffers(case):
    """Ceil overhang and padding: NaN guards around every slice stay intact."""
    assert _guarded_clean(case.max_plan(2), case)


@pytest.mark.parametrize("spec", AVG_CASES, ids=[c[0] for c in AVG_CASES])
def test_avg_no_access_outside_buffers(spec):
    case = PoolCase(spec)
    assert _guarded_clean(case.avg_plan(2, True), case)
    assert _guarded_clean(case.avg_plan(1, False), case)


def test_thread_counts_give_identical_bits(case):
    a = case.max_plan(1).run(case.feeds())
    b = case.max_plan(2).run(case.feeds())
    for u, v in zip(a, b):
        assert np.array_equal(u, v)


def test_ceil_mode_output_size_rule():
    """The last window must start inside the input or its begin padding."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 5, 5))
    assert g.max_pool2d(x, 2, 2, 1, ceil_mode=True).shape == (1, 1, 3, 3)    # 4th window would start at 5
    assert g.max_pool2d(x, 2, 2, 0, ceil_mode=True).shape == (1, 1, 3, 3)
    assert g.max_pool2d(x, 2, 2, 0, ceil_mode=False).shape == (1, 1, 2, 2)
    assert g.avg_pool2d(x, 3, 2, ceil_mode=True).shape == (1, 1, 2, 2)
    for size, k, s, p, ceil in [(5, 2, 2, 1, True), (7, 3, 2, 1, True), (6, 3, 3, 0, True), (9, 2, 2, 1, False)]:
        want = R.pool_out_size(size, k, s, p, p, 1, ceil)
        assert g.max_pool2d(g.input(f"x{size}{k}{s}{p}{ceil}", (1, 1, size, size)), k, s, p,
                            ceil_mode=ceil).shape[2] == want


def test_functional():
    c = PoolCase(CASES[3])
    dx = F.max_pool2d_backward(c.x, c.dy, c.kernel, c.stride, c.padding, c.dilation, c.ceil)
    assert R.rel_error(dx, c.ref_max_backward()) <= 1e-6
    dx = F.avg_pool2d_backward(c.dy, c.shape, c.kernel, c.stride, c.padding, c.ceil, False)
    assert R.rel_error(dx, c.ref_avg_backward(False)) <= 1e-6
    assert np.array_equal(dx, rlx_cpu.avg_pool2d_backward(c.dy, c.shape, c.kernel, c.stride, c.padding,
                                                          c.ceil, False))


# -- build-time errors --------------------------------------------------------

def test_error_grad_shape():
    g = rlx_cpu.Graph()
    x, dy = g.input("x", (2, 3, 8, 8)), g.input("dy", (2, 3, 3, 3))
    with pytest.raises(ValueError, match=r"max_pool2d_backward: grad_output must have the shape of the "
                                         r"max_pool2d of input \[2, 3, 8, 8\], \[2, 3, 4, 4\], got \[2, 3, 3, 3\]"):
        g.max_pool2d_backward(x, dy, 2)
    with pytest.raises(ValueError, match=r"avg_pool2d_backward: grad_output must have the shape of the "
                                         r"avg_pool2d of input \[2, 3, 7, 7\], \[2, 3, 4, 4\]"):
        g.avg_pool2d_backward(dy, (2, 3, 7, 7), 2, ceil_mode=True)


def test_error_padding_more_than_half_kernel():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 8, 8))
    with pytest.raises(ValueError, match=r"max_pool2d: padding 2/2 on spatial axis 0 must be at most half "
                                         r"the effective kernel size 3"):
        g.max_pool2d(x, 3, padding=2)
    with pytest.raises(ValueError, match=r"avg_pool2d_backward: padding 0/2 on spatial axis 1"):
        g.avg_pool2d_backward(g.input("dy", (1, 1, 3, 4)), (1, 1, 8, 8), 3, padding=((0, 0), (0, 2)))


def test_error_arguments():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 4, 4))
    with pytest.raises(TypeError, match=r"max_pool2d: ceil_mode must be a bool"):
        g.max_pool2d(x, 2, ceil_mode=1)
    with pytest.raises(ValueError, match=r"max_pool2d: input must have rank 4 \(N, C, H, W\), got \[4, 4\]"):
        g.max_pool2d(g.input("flat", (4, 4)), 2)
    with pytest.raises(ValueError, match=r"max_pool2d_backward: kernel \(5, 5\) .* is larger than the padded input"):
        g.max_pool2d_backward(x, x, 5)
    with pytest.raises(ValueError, match=r"avg_pool2d: stride must be >= 1"):
        g.avg_pool2d(x, 2, stride=0)
