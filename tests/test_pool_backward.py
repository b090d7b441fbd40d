"""max_pool1d/2d and avg_pool1d/2d backward, against the forward pools of
src/_pool.pyx (g.max_pool2d etc.) and the float64 references.

Semantics (the forward's): the gradient of a max window goes to the tap its
index names -- the first maximum in window order, or the last NaN;
overlapping windows accumulate; padded taps and ceil-mode overhang are never
read; avg divides by divisor_override, else by the taps inside the padded
input (count_include_pad), else by the in-bounds taps; dilation as ONNX."""
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
    ("pad-over-half", (1, 2, 7, 8), 3, 2, 2, 2, 1, True),      # ONNX allows pads > k/2
    ("batch1-1ch", (1, 1, 6, 6), 2, 1, 0, 0, 1, False),
    ("1d", (2, 3, 11), 3, 2, 1, 0, 1, True),
    ("1d-dilated", (1, 2, 13), 3, 2, 2, 1, 2, False),
]
IDS = [c[0] for c in CASES]
AVG_CASES = CASES


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


class PoolCase:
    def __init__(self, spec, x=None, seed=0, divisor=None):
        (self.name, self.shape, self.kernel, self.stride, pb, pe, self.dilation, self.ceil) = spec
        self.nsp = len(self.shape) - 2
        self.pb, self.pe = _tup(pb, self.nsp), _tup(pe, self.nsp)
        self.padding = tuple(zip(self.pb, self.pe))
        self.divisor = divisor
        rng = np.random.default_rng(seed)
        self.x = rng.standard_normal(self.shape).astype(np.float32) if x is None else x.astype(np.float32)
        out = self.ref_max(self.x).shape
        self.dy = rng.standard_normal(out).astype(np.float32)

    def ref_max(self, x):
        return R.max_pool_nd(x, self.kernel, self.stride, self.pb, self.pe, self.dilation, self.ceil)[0]

    def ref_max_backward(self):
        return R.max_pool_nd_backward(self.x, self.dy, self.kernel, self.stride, self.pb, self.pe,
                                      self.dilation, self.ceil)

    def ref_avg(self, x, cip):
        return R.avg_pool_nd(x, self.kernel, self.stride, self.pb, self.pe, self.dilation, self.ceil, cip,
                             self.divisor)

    def ref_avg_backward(self, cip):
        return R.avg_pool_nd_backward(self.dy, self.shape, self.kernel, self.stride, self.pb, self.pe,
                                      self.dilation, self.ceil, cip, self.divisor)

    def max_plan(self, threads, with_indices=False):
        g = rlx_cpu.Graph()
        x, dy = g.input("x", self.shape), g.input("dy", self.dy.shape)
        nd = self.nsp
        outs = [getattr(g, f"max_pool{nd}d_backward")(x, dy, self.kernel, self.stride, self.padding,
                                                      self.dilation, self.ceil)]
        y = getattr(g, f"max_pool{nd}d")(x, self.kernel, self.stride, self.padding, self.dilation, self.ceil,
                                         return_indices=with_indices)
        outs += list(y) if with_indices else [y]
        g.output(*outs)
        return rlx_cpu.compile(g, num_threads=threads)

    def avg_plan(self, threads, cip):
        g = rlx_cpu.Graph()
        x, dy = g.input("x", self.shape), g.input("dy", self.dy.shape)
        nd = self.nsp
        g.output(getattr(g, f"avg_pool{nd}d_backward")(dy, self.shape, self.kernel, self.stride, self.padding,
                                                       self.ceil, cip, self.divisor, dilation=self.dilation),
                 getattr(g, f"avg_pool{nd}d")(x, self.kernel, self.stride, self.padding, self.ceil, cip,
                                              self.divisor, dilation=self.dilation))
        return rlx_cpu.compile(g, num_threads=threads)

    def feeds(self):
        return {"x": self.x, "dy": self.dy}

    @property
    def overlapping(self):
        n = self.nsp
        k, s, d = _tup(self.kernel, n), _tup(self.stride or self.kernel, n), _tup(self.dilation, n)
        return any(d[i] * (k[i] - 1) + 1 > s[i] for i in range(n))


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


@pytest.mark.parametrize("cip,divisor", [(True, None), (False, None), (True, 4)],
                         ids=["count_include_pad", "exclude_pad", "divisor_override"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("spec", AVG_CASES, ids=[c[0] for c in AVG_CASES])
def test_avg_backward_matches_reference(spec, threads, cip, divisor):
    case = PoolCase(spec, divisor=divisor)
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


@pytest.mark.parametrize("threads", [1, 2])
def test_max_backward_scatters_at_the_forward_indices(case, threads):
    """The gradient lands exactly where g.max_pool*d(return_indices=True) points."""
    rng = np.random.default_rng(10)
    ties = rng.integers(0, 3, case.shape).astype(np.float32)     # ties everywhere
    c = PoolCase((case.name, case.shape, case.kernel, case.stride, case.pb, case.pe, case.dilation, case.ceil),
                 x=ties, seed=11)
    dx, _, idx = c.max_plan(threads, with_indices=True).run(c.feeds())
    want = np.zeros((idx.shape[0], idx.shape[1], int(np.prod(c.shape[2:]))))
    for n in range(idx.shape[0]):
        for ch in range(idx.shape[1]):
            np.add.at(want[n, ch], idx[n, ch].ravel(), c.dy[n, ch].ravel().astype(np.float64))
    assert R.rel_error(dx, want.reshape(c.shape)) <= 1e-6


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
    """As the forward (v > max or v is NaN): the window's last NaN is its index."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    x[0, 0, 1, 1] = x[0, 0, 0, 1] = np.nan        # two NaNs in window (0, 0): the last wins
    x[0, 1, 4, 5] = np.nan
    c = PoolCase(("nan", x.shape, 2, 2, 0, 0, 1, False), x=x, seed=9)
    dx, y = c.max_plan(2).run(c.feeds())
    assert np.isnan(y[0, 0, 0, 0]) and np.isnan(y[0, 1, 2, 2])
    assert np.array_equal(np.isnan(y), np.isnan(c.ref_max(x)))
    assert np.array_equal(dx, c.ref_max_backward().astype(np.float32))
    assert dx[0, 0, 1, 1] == c.dy[0, 0, 0, 0] and dx[0, 0, 0, 1] == 0


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
    case.divisor = 3
    assert _guarded_clean(case.avg_plan(2, True), case)


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


def test_error_window_only_in_padding():
    """As the forward pools: pads may exceed half the kernel (ONNX), but no
    window may lie entirely in the padding."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 8, 8))
    with pytest.raises(ValueError, match=r"max_pool2d_backward: output 0 on spatial axis 0 has a window that "
                                         r"covers only padding"):
        g.max_pool2d_backward(x, x, 3, padding=3)
    with pytest.raises(ValueError, match=r"avg_pool2d_backward: output 0 on spatial axis 1 has a window that "
                                         r"covers only padding"):
        g.avg_pool2d_backward(g.input("dy", (1, 1, 2, 3)), (1, 1, 8, 8), 3, padding=((0, 0), (3, 0)))


def test_error_arguments():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 4, 4))
    with pytest.raises(TypeError, match=r"max_pool2d_backward: ceil_mode must be a bool"):
        g.max_pool2d_backward(x, x, 2, ceil_mode="yes")
    with pytest.raises(ValueError, match=r"max_pool2d_backward: input must have rank 4 .*got \[4, 4\]"):
        g.max_pool2d_backward(g.input("flat", (4, 4)), x, 2)
    with pytest.raises(ValueError, match=r"max_pool1d_backward: input must have rank 3"):
        g.max_pool1d_backward(x, x, 2)
    with pytest.raises(ValueError, match=r"max_pool2d_backward: window extent 5 is larger than padded input 4"):
        g.max_pool2d_backward(x, x, 5)
    with pytest.raises(ValueError, match=r"avg_pool2d_backward: stride must be >= 1"):
        g.avg_pool2d_backward(x, (1, 1, 4, 4), 2, stride=0)
    with pytest.raises(ValueError, match=r"avg_pool2d_backward: divisor_override must be a positive integer"):
        g.avg_pool2d_backward(x, (1, 1, 8, 8), 2, divisor_override=0)
