"""Max-pool gradient from the forward's indices (g.max_pool_backward_indices,
src/rlx_pool.h rlx_mpbi_plane) and the forward-with-indices kernel behind it
(rlx_pwi_line), against the float64 reference, the recomputing backward
(max_pool{1,2}d_backward: same additions in the same order, so equal bits) and
torch==2.13.0's max_pool backward.  Autograd asks the forward pool for plane
indices, so max_pool1d/2d/3d all differentiate through them."""
import os
import subprocess
import sys

import numpy as np
import pytest

import reference as R
from guarded import Guarded
import rlx_cpu
from rlx_cpu.autograd import grads

# id, shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode
CASES = [
    ("k2s2", (2, 3, 8, 8), 2, None, 0, 0, 1, False),
    ("k3s2-overlap-pad", (2, 3, 9, 10), 3, 2, 1, 1, 1, False),
    ("k3s2-ceil", (1, 2, 12, 13), 3, 2, 1, 1, 1, True),
    ("k3s1-pad", (1, 2, 7, 21), 3, 1, 1, 1, 1, False),
    ("asym-pad", (2, 2, 8, 7), (3, 2), (2, 1), (1, 0), (0, 1), 1, False),
    ("ceil-asym", (3, 2, 9, 6), (3, 2), (2, 3), (1, 0), (0, 1), 1, True),
    ("dilated", (2, 2, 9, 8), 3, 2, 2, 1, 2, False),
    ("dilated-ceil", (1, 2, 8, 9), (2, 3), (3, 2), (1, 1), (1, 0), (2, 1), True),
    ("dilated-sym", (1, 2, 11, 12), 3, 2, 1, 1, 2, True),
    ("pad-over-half", (1, 2, 7, 8), 3, 2, 2, 2, 1, True),
    ("wide-s1", (1, 2, 5, 70), 3, 1, 1, 1, 1, False),         # several 8-output blocks, s1
    ("wide-s2", (1, 2, 5, 141), 3, 2, 1, 1, 1, True),         # blocks of 32 and 8, s2, ceil tail
    ("wide-s2-k5", (2, 1, 6, 83), 5, 2, 2, 2, 1, False),
    ("wide-s3", (1, 1, 4, 60), 3, 3, 1, 1, 1, False),        # portable chunk in every variant
    ("1d", (2, 3, 11), 3, 2, 1, 0, 1, True),
    ("1d-long", (1, 2, 300), 4, 2, 1, 1, 1, False),
    ("1d-dilated", (1, 2, 13), 3, 2, 2, 1, 2, False),
    ("3d", (2, 2, 5, 6, 7), 2, 2, 0, 0, 1, False),
    ("3d-overlap-ceil", (1, 2, 6, 7, 19), 3, 2, 1, 1, 1, True),
    ("3d-dilated", (1, 1, 7, 6, 9), (2, 2, 3), (1, 2, 2), (0, 1, 1), (1, 0, 1), (2, 1, 2), False),
]
IDS = [c[0] for c in CASES]
BY_NAME = {c[0]: c for c in CASES}


def pick(*names):
    return pytest.mark.parametrize("spec", [BY_NAME[n] for n in names], ids=names)


def _tup(v, n):
    return (v,) * n if isinstance(v, int) else tuple(v)


class Case:
    def __init__(self, spec, data="normal", seed=0):
        (self.name, self.shape, self.kernel, self.stride, pb, pe, self.dilation, self.ceil) = spec
        self.nsp = len(self.shape) - 2
        self.pb, self.pe = _tup(pb, self.nsp), _tup(pe, self.nsp)
        self.padding = tuple(zip(self.pb, self.pe))
        rng = np.random.default_rng(seed)
        if data == "ties":                      # ~a third of every window ties
            self.x = rng.integers(0, 3, self.shape).astype(np.float32)
        else:
            self.x = rng.standard_normal(self.shape).astype(np.float32)
        self.ref_y, self.ref_idx = R.max_pool_nd(self.x, self.kernel, self.stride, self.pb, self.pe,
                                                 self.dilation, self.ceil)
        self.dy = rng.standard_normal(self.ref_y.shape).astype(np.float32)

    def pool(self, g, x, **kw):
        return getattr(g, f"max_pool{self.nsp}d")(x, self.kernel, self.stride, self.padding, self.dilation,
                                                  self.ceil, **kw)

    def ref_dx(self):
        return R.max_pool_nd_backward(self.x, self.dy, self.kernel, self.stride, self.pb, self.pe,
                                      self.dilation, self.ceil)

    def plan(self, threads, layout="plane", recompute=True):
        g = rlx_cpu.Graph()
        x, dy = g.input("x", self.shape), g.input("dy", self.dy.shape)
        y, idx = self.pool(g, x, return_indices=True, indices_layout=layout)
        outs = [g.max_pool_backward_indices(dy, idx), y, idx]
        if recompute and self.nsp < 3:
            outs.append(getattr(g, f"max_pool{self.nsp}d_backward")(x, dy, self.kernel, self.stride, self.padding,
                                                                  self.dilation, self.ceil))
        g.output(*outs)
        return rlx_cpu.compile(g, num_threads=threads)

    def feeds(self):
        return {"x": self.x, "dy": self.dy}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("data", ["normal", "ties"])
@pytest.mark.parametrize("spec", CASES, ids=IDS)
def test_scatter_backward_matches_reference_and_recompute(spec, data, threads):
    c = Case(spec, data)
    out = c.plan(threads).run(c.feeds())
    dx, y, idx = out[:3]
    assert np.array_equal(y, c.ref_y.astype(np.float32))
    assert np.array_equal(idx, c.ref_idx)              # first maximum in window order
    # dy values are float32; a few of them summed in float32 where windows overlap
    assert R.rel_error(dx, c.ref_dx()) <= 1e-6
    if len(out) == 4:
        assert np.array_equal(dx, out[3])               # same additions, same order as the recompute


@pick("k3s2-overlap-pad", "wide-s2", "3d-overlap-ceil")
def test_onnx_layout_indices(spec):
    c = Case(spec, "ties", seed=3)
    dx, _, idx = c.plan(2, layout="onnx", recompute=False).run(c.feeds())
    planes = c.shape[0] * c.shape[1]
    vol = int(np.prod(c.shape[2:]))
    want_idx = c.ref_idx + (np.arange(planes) * vol).reshape(c.shape[:2] + (1,) * c.nsp)
    assert np.array_equal(idx, want_idx)
    assert R.rel_error(dx, c.ref_dx()) <= 1e-6


def test_nan_and_minus_inf_windows():
    """A NaN window sends its gradient to its last NaN, an all -inf window to
    its first in-bounds tap (the forward's indices, PyTorch's choice)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 9, 40)).astype(np.float32)
    x[0, 0, 2:4, 0:3] = -np.inf
    x[0, 0, 1, 10] = x[0, 0, 2, 11] = np.nan
    x[0, 1, :, 20:26] = -np.inf
    c = Case(("nan", x.shape, 3, 2, 1, 1, 1, True))
    c.x = x
    c.ref_y, c.ref_idx = R.max_pool_nd(x, 3, 2, 1, 1, 1, True)
    dx, y, idx, dx_re = c.plan(2).run(c.feeds())
    assert np.array_equal(np.isnan(y), np.isnan(c.ref_y))
    assert np.array_equal(y[~np.isnan(y)], c.ref_y[~np.isnan(c.ref_y)].astype(np.float32))
    assert np.array_equal(idx, c.ref_idx)
    assert np.array_equal(dx, dx_re)
    assert R.rel_error(dx, c.ref_dx()) <= 1e-6


@pick("k3s2-ceil", "wide-s2", "1d-long", "3d-overlap-ceil")
def test_no_access_outside_buffers(spec):
    c = Case(spec)
    gp = Guarded(c.plan(2))
    dx = gp.run(c.feeds())[0]
    assert gp.guards_intact() and not np.isnan(dx).any()


def test_thread_counts_give_identical_bits():
    c = Case(BY_NAME["3d-dilated"], "ties")
    a = c.plan(1).run(c.feeds())
    b = c.plan(2).run(c.feeds())
    for u, v in zip(a, b):
        assert np.array_equal(u, v)


# -- autograd -----------------------------------------------------------------

def _loss(g, c, y):
    """loss = sum(y * dy) as a [1, 1] linear layer whose weight is the input
    "w" (= dy flattened): d loss / d y = dy."""
    flat = int(np.prod(c.dy.shape))
    return g.linear(g.reshape(y, (1, flat)), g.input("w", (1, flat)))


@pytest.mark.parametrize("with_indices", [False, True], ids=["pool-without-indices", "pool-with-indices"])
@pick("k3s2-overlap-pad", "dilated-ceil", "1d", "3d-overlap-ceil")
def test_autograd_uses_the_forward_indices(spec, with_indices):
    """grads() of a max pool emits max_pool_backward_indices fed by the pool's
    own indices (requested when the pool was built without), never the
    recomputing backward; 3-D max pools are differentiable this way."""
    c = Case(spec, "ties", seed=5)
    g = rlx_cpu.Graph()
    x = g.input("x", c.shape)
    y = c.pool(g, x, return_indices=with_indices)
    y = y[0] if with_indices else y
    (dx,) = grads(g, _loss(g, c, y), [x])
    g.output(dx)
    ops = [n.op for n in g.nodes]
    assert "max_pool_backward_indices" in ops
    assert not any(op.endswith("d_backward") for op in ops)
    assert ops.count("max_pool_indices") == 1
    got = rlx_cpu.compile(g, num_threads=2).run({"x": c.x, "w": c.dy.reshape(1, -1)})[0]
    assert R.rel_error(got, c.ref_dx()) <= 1e-6


def test_autograd_keeps_storage_order_1_indices_and_recomputes():
    c = Case(BY_NAME["k3s2-overlap-pad"], seed=6)
    g = rlx_cpu.Graph()
    x = g.input("x", c.shape)
    y, _ = c.pool(g, x, return_indices=True, indices_layout="onnx_colmajor")
    (dx,) = grads(g, _loss(g, c, y), [x])
    g.output(dx)
    ops = [n.op for n in g.nodes]
    assert "max_pool2d_backward" in ops and "max_pool_backward_indices" not in ops
    assert R.rel_error(rlx_cpu.compile(g).run({"x": c.x, "w": c.dy.reshape(1, -1)})[0], c.ref_dx()) <= 1e-6


def test_forward_only_plan_of_a_differentiated_graph_computes_no_indices():
    """The requested indices node is live only when the gradient is an output."""
    c = Case(BY_NAME["k3s2-overlap-pad"])
    g = rlx_cpu.Graph()
    x = g.input("x", c.shape)
    y = c.pool(g, x)
    grads(g, _loss(g, c, y), [x])
    g.output(y)
    plan = rlx_cpu.compile(g)
    (pool,) = [t for t in plan.thunks if t.kind == "pool"]
    assert pool.indices is None
    assert np.array_equal(plan.run({"x": c.x, "w": c.dy.reshape(1, -1)})[0], c.ref_y.astype(np.float32))


# -- torch 2.13 -----------------------------------------------------------------

def _torch_accepts(spec):
    """torch pads both ends alike, by at most half the effective kernel."""
    _, shape, k, s, pb, pe, d, _ = spec
    n = len(shape) - 2
    k, d, pb, pe = _tup(k, n), _tup(d, n), _tup(pb, n), _tup(pe, n)
    return pb == pe and all(2 * pb[i] <= d[i] * (k[i] - 1) + 1 for i in range(n))


TORCH_CASES = [c for c in CASES if _torch_accepts(c)]


@pytest.mark.parametrize("data", ["normal", "ties"])
@pytest.mark.parametrize("spec", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_peer_torch_max_pool_backward(spec, data):
    torch = pytest.importorskip("torch")
    c = Case(spec, data, seed=8)
    xt = torch.from_numpy(c.x.copy()).requires_grad_(True)
    yt = getattr(torch.nn.functional, f"max_pool{c.nsp}d")(xt, c.kernel, c.stride or c.kernel, c.pb,
                                                             c.dilation, c.ceil)
    yt.backward(torch.from_numpy(c.dy))
    dx = c.plan(2, recompute=False).run(c.feeds())[0]
    assert R.rel_error(dx, xt.grad.numpy()) <= 1e-6
    if not _overlapping(c):                 # one dy value per input: exact
        assert np.array_equal(dx, xt.grad.numpy())


def _overlapping(c):
    k, s, d = _tup(c.kernel, c.nsp), _tup(c.stride or c.kernel, c.nsp), _tup(c.dilation, c.nsp)
    return any(d[i] * (k[i] - 1) + 1 > s[i] for i in range(c.nsp))


# -- errors -----------------------------------------------------------------------

def test_errors():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 8, 8))
    y, idx = g.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(TypeError, match=r"max_pool_backward_indices: indices must be the indices node of a max "
                                        r"pool"):
        g.max_pool_backward_indices(y, y)
    with pytest.raises(ValueError, match=r"max_pool_backward_indices: grad_output must have the shape of the "
                                         r"max_pool2d of input \[1, 2, 8, 8\], \[1, 2, 4, 4\], got \[1, 2, 8, 8\]"):
        g.max_pool_backward_indices(x, idx)
    _, cm = g.max_pool2d(x, 2, return_indices=True, indices_layout="onnx_colmajor", name="cm")
    with pytest.raises(ValueError, match=r"max_pool_backward_indices: indices must have layout 'plane' or 'onnx', "
                                         r"got 'onnx_colmajor'"):
        g.max_pool_backward_indices(y, cm)
    other = rlx_cpu.Graph()
    with pytest.raises(TypeError, match=r"max_pool_backward_indices: indices must be the indices node"):
        other.max_pool_backward_indices(other.input("dy", (1, 2, 4, 4)), idx)


# -- the portable variant -----------------------------------------------------------

SCRIPT = r"""
import numpy as np, rlx_cpu, rlx_cpu._pool as p
import reference as R
from test_pool_indices_backward import CASES, Case
assert p.simd_level() == 0
for spec in CASES:
    for data in ("normal", "ties"):
        c = Case(spec, data)
        out = c.plan(2).run(c.feeds())
        assert np.array_equal(out[1], c.ref_y.astype(np.float32)), spec
        assert np.array_equal(out[2], c.ref_idx), spec
        assert R.rel_error(out[0], c.ref_dx()) <= 1e-6, spec
print("ok")
"""


def test_baseline_variant_matches_reference():
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=here, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
