"""The small ops of a CNN training step: relu and its mask, add, bias add and
its reduction, zero-copy reshape/flatten, the dense layer and its gradients,
softmax cross-entropy and its gradient."""
import numpy as np
import pytest

import reference as R
from guarded import Guarded
import rlx_cpu


def _run(build, feeds, threads=2):
    g = rlx_cpu.Graph()
    inputs = {name: g.input(name, np.shape(v)) for name, v in feeds.items()}
    outs = build(g, **inputs)
    g.output(*(outs if isinstance(outs, (list, tuple)) else [outs]))
    plan = rlx_cpu.compile(g, num_threads=threads)
    return plan, plan.run(feeds)


@pytest.mark.parametrize("size", [(3, 5), (4, 8, 33, 37)], ids=["small", "parallel"])
def test_relu_and_mask(size):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(size).astype(np.float32)
    flat = x.reshape(-1)
    flat[:3] = [0.0, -0.0, np.nan]
    # the same in the middle of a vector block and in the scalar tail of the last 4096-float block
    flat[flat.size // 2 + 5: flat.size // 2 + 8] = [0.0, -0.0, np.nan]
    flat[-3:] = [0.0, -0.0, np.nan]
    dy = rng.standard_normal(size).astype(np.float32)
    _, (y, dx) = _run(lambda g, x, dy: (lambda y: (y, g.relu_backward(dy, y)))(g.relu(x)), {"x": x, "dy": dy})
    want = np.where(np.isnan(x), np.nan, R.relu(x)).astype(np.float32)   # NaN stays NaN, as torch.relu
    assert np.array_equal(y, want, equal_nan=True)
    want_dx = np.where(y <= 0, 0.0, dy).astype(np.float32)             # as torch's threshold_backward
    assert np.array_equal(dx, want_dx)
    assert np.isnan(y.reshape(-1)[2]) and dx.reshape(-1)[2] == dy.reshape(-1)[2]
    assert not np.signbit(y[x == 0]).any()                              # -0 gives +0, as torch.relu


def test_add():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 3, 4)).astype(np.float32)
    _, (c,) = _run(lambda g, a, b: g.add(a, b), {"a": a, "b": b})
    assert np.array_equal(c, a + b)


@pytest.mark.parametrize("shape", [(5, 7), (3, 6, 4, 5), (2, 40, 30, 31)], ids=["dense", "conv", "parallel"])
def test_bias_add_and_grad(shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    bshape = (1, shape[1]) + (1,) * (len(shape) - 2)
    plans = []
    for threads in (1, 2):
        plan, (y, db) = _run(lambda g, x, b: (g.bias_add(x, b), g.bias_grad(x)), {"x": x, "b": b}, threads)
        assert np.array_equal(y, x + b.reshape(bshape))
        axes = (0,) + tuple(range(2, len(shape)))
        assert R.rel_error(db, x.astype(np.float64).sum(axis=axes)) <= 1e-6
        plans.append(db)
    assert np.array_equal(plans[0], plans[1])           # one channel per thread: same bits


@pytest.mark.parametrize("s, at", [(700, (5, 37, 69)), (33, (0, 32, 1))])
def test_bias_grad_float_lane_overflow(s, at):
    # FLT_MAX twice in one 32-float lane of a plane, then -FLT_MAX: float
    # lanes overflow, the double sum (and so db) does not
    rng = np.random.default_rng(5)
    dy = rng.standard_normal((3, 2, s)).astype(np.float32)
    big = np.finfo(np.float32).max
    dy[1, 0, list(at)] = big, big, -big
    want = dy.astype(np.float64).sum(axis=(0, 2))
    scale = np.abs(dy.astype(np.float64)).sum(axis=(0, 2))
    for threads in (1, 2):
        _, (db,) = _run(lambda g, dy: (g.bias_grad(dy),), {"dy": dy}, threads)
        assert np.isfinite(db).all(), db
        assert np.all(np.abs(db - want) <= 1e-6 * scale), (db, want)


def test_reshape_is_a_zero_copy_alias():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    plan, (flat, back, r) = _run(lambda g, x: (lambda f: (f, g.reshape(g.relu(f), (2, 3, 4, 5)),
                                                          g.reshape(x, (-1, 10))))(g.flatten(x)), {"x": x})
    assert flat.shape == (2, 60) and np.array_equal(flat, x.reshape(2, 60))
    assert np.array_equal(back, np.maximum(x, 0))
    assert r.shape == (12, 10)
    assert [t.kind for t in plan.thunks] == ["relu"]        # reshapes emit no thunk
    # the flatten and reshape outputs are the input's own bytes
    x_slice = plan.input_slices["x"]
    assert plan.output_slices[0] == x_slice == plan.output_slices[2]


def test_flatten_dims_and_errors():
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 4, 5))
    assert g.flatten(x).shape == (2, 60)
    assert g.flatten(x, 0).shape == (120,)
    assert g.flatten(x, 1, 2).shape == (2, 12, 5)
    assert g.flatten(x, -2).shape == (2, 3, 20)
    with pytest.raises(ValueError, match=r"flatten: start_dim=3, end_dim=1 invalid for input \[2, 3, 4, 5\]"):
        g.flatten(x, 3, 1)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape input \[2, 3, 4, 5\] \(120 values\) to \[7, -1\]"):
        g.reshape(x, (7, -1))
    with pytest.raises(ValueError, match=r"reshape: shape must be positive ints with at most one -1"):
        g.reshape(x, (-1, -1))


@pytest.mark.parametrize("n, k, m", [(4, 6, 3), (64, 300, 40)], ids=["small", "split"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
def test_linear_and_gradients(n, k, m, bias):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, k)).astype(np.float32)
    w = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    dy = rng.standard_normal((n, m)).astype(np.float32)
    feeds = {"x": x, "w": w, "dy": dy}
    if bias:
        feeds["b"] = b

    def build(g, x, w, dy, b=None):
        return g.linear(x, w, b), g.linear_backward_input(dy, w), g.linear_backward_weight(x, dy)

    for threads in (1, 2):
        _, (y, dx, dw) = _run(build, feeds, threads)
        assert R.rel_error(y, R.linear(x, w, b if bias else None)) <= 1e-5
        assert R.rel_error(dx, dy.astype(np.float64) @ w) <= 1e-5
        assert R.rel_error(dw, dy.astype(np.float64).T @ x) <= 1e-5
    # central differences of L = sum(linear(x, w) * dy)
    idx = R.sample_indices(x.size, 10, rng)
    fd = R.numeric_grad(lambda v: float((R.linear(v, w) * dy).sum()), x, idx)
    assert np.abs(dx.reshape(-1)[idx] - fd).max() <= 1e-4 * np.abs(dx).max()
    idx = R.sample_indices(w.size, 10, rng)
    fd = R.numeric_grad(lambda v: float((R.linear(x, v) * dy).sum()), w, idx)
    assert np.abs(dw.reshape(-1)[idx] - fd).max() <= 1e-4 * np.abs(dw).max()


def test_softmax_cross_entropy_and_gradient():
    rng = np.random.default_rng(5)
    z = (3 * rng.standard_normal((7, 5))).astype(np.float32)
    labels = rng.integers(0, 5, 7).astype(np.float32)
    gl = np.float32(0.75)
    _, (loss, dz) = _run(lambda g, z, labels, gl: (lambda l: (l, g.softmax_cross_entropy_backward(z, labels, gl)))(
        g.softmax_cross_entropy(z, labels)), {"z": z, "labels": labels, "gl": np.array([gl])})
    assert loss.shape == ()
    assert abs(float(loss) - R.softmax_cross_entropy(z, labels)) <= 1e-6 * abs(R.softmax_cross_entropy(z, labels))
    assert R.rel_error(dz, R.softmax_cross_entropy_backward(z, labels, float(gl))) <= 1e-6
    fd = R.numeric_grad(lambda v: R.softmax_cross_entropy(v, labels), z, np.arange(z.size))
    assert np.abs(dz.reshape(-1) / gl - fd).max() <= 1e-4 * np.abs(fd).max()


def test_cross_entropy_is_stable_for_large_logits():
    z = np.array([[1000.0, 0.0, -1000.0], [-500.0, 500.0, 499.0]], np.float32)
    labels = np.array([0.0, 2.0], np.float32)
    _, (loss, dz) = _run(lambda g, z, labels: (lambda l: (l, g.softmax_cross_entropy_backward(
        z, labels, g.constant(np.float32(1)))))(g.softmax_cross_entropy(z, labels)), {"z": z, "labels": labels})
    assert np.isfinite(loss) and np.isfinite(dz).all()
    assert abs(float(loss) - R.softmax_cross_entropy(z, labels)) <= 1e-6


@pytest.mark.parametrize("bad", [-1.0, 3.0, 1.5, np.nan], ids=["negative", "too-big", "fraction", "nan"])
def test_invalid_label_gives_nan_not_a_wild_read(bad):
    z = np.zeros((2, 3), np.float32)
    labels = np.array([1.0, bad], np.float32)
    g = rlx_cpu.Graph()
    zi, li = g.input("z", z.shape), g.input("labels", (2,))
    loss = g.softmax_cross_entropy(zi, li)
    g.output(loss, g.softmax_cross_entropy_backward(zi, li, g.constant(np.float32(1))))
    gp = Guarded(rlx_cpu.compile(g))
    loss, dz = gp.run({"z": z, "labels": labels})
    assert gp.guards_intact()
    assert np.isnan(loss) and np.isnan(dz[1]).all() and np.isfinite(dz[0]).all()


def test_errors():
    g = rlx_cpu.Graph()
    x, w = g.input("x", (4, 6)), g.input("w", (3, 5))
    with pytest.raises(ValueError, match=r"linear: expected input \[N, in\] and weight \[out, in\], "
                                         r"got input \[4, 6\], weight \[3, 5\]"):
        g.linear(x, w)
    with pytest.raises(ValueError, match=r"linear: bias must have shape \[3\], got \[4\]"):
        g.linear(x, g.input("w2", (3, 6)), np.zeros(4))
    with pytest.raises(ValueError, match=r"softmax_cross_entropy: labels must have shape \[4\]"):
        g.softmax_cross_entropy(x, g.input("lab", (4, 1)))
    with pytest.raises(ValueError, match=r"softmax_cross_entropy: logits must have shape \[N, classes\]"):
        g.softmax_cross_entropy(g.input("z3", (2, 3, 4)), g.input("l2", (2,)))
    with pytest.raises(ValueError, match=r"bias_add: bias must have shape \[6\] for input \[4, 6\], got \[5\]"):
        g.bias_add(x, np.zeros(5))
    with pytest.raises(ValueError, match=r"relu_backward: grad_output \[4, 6\] and y \[3, 5\] must have the same shape"):
        g.relu_backward(x, w)
    with pytest.raises(ValueError, match=r"add: a \[4, 6\] and b \[3, 5\] must have the same shape"):
        g.add(x, w)
    with pytest.raises(ValueError, match=r"bias_grad: grad_output must have rank >= 2"):
        g.bias_grad(g.input("v", (5,)))
