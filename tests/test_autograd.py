"""Reverse-mode grads over a graph, a whole-network gradient check, and the
SGD trainer / training example."""
import tracemalloc

import numpy as np
import pytest

import reference as R
import rlx_cpu
from rlx_cpu.autograd import grads
from rlx_cpu.training import Trainer, build_cnn_training, synthetic_digits, train_cnn

# ---------------------------------------------------------------------------
# Whole-network gradient check
#   conv(2->4, 3x3, asymmetric pads) + bias, relu, add(h, h) (fan-out),
#   maxpool(3, s2, p1, ceil), conv(4->6, 2x2, groups 2, dilation (1, 2)),
#   bias_add, relu, avgpool(2, ceil, exclude pad), flatten, linear + bias,
#   softmax cross-entropy.  Gradients w.r.t. every parameter and the input.
# ---------------------------------------------------------------------------

N, CLASSES = 3, 5
X_SHAPE = (N, 2, 9, 10)
PADS1 = ((1, 0), (1, 1))
SHAPES = {"w1": (4, 2, 3, 3), "b1": (4,), "w2": (6, 2, 2, 2), "b2": (6,), "w3": (CLASSES, 6 * 2 * 2), "b3": (CLASSES,)}


def _net(g, x, p, labels):
    r1 = g.relu(g.conv2d(x, p["w1"], p["b1"], padding=PADS1))
    h1 = g.max_pool2d(g.add(r1, r1), 3, 2, 1, ceil_mode=True)
    z2 = g.bias_add(g.conv2d(h1, p["w2"], groups=2, dilation=(1, 2)), p["b2"])
    h2 = g.avg_pool2d(g.relu(z2), 2, ceil_mode=True, count_include_pad=False)
    return g.softmax_cross_entropy(g.linear(g.flatten(h2), p["w3"], p["b3"]), labels)


def _ref_forward(p, x, labels, keep=None):
    pb1, pe1 = (1, 1), (0, 1)
    z1 = R.conv_nd(x, p["w1"], p["b1"], 1, pb1, pe1)
    r1 = R.relu(z1)
    h = r1 + r1
    p1 = R.max_pool_nd(h, 3, 2, 1, 1, 1, True)[0]
    z2 = R.conv_nd(p1, p["w2"], None, 1, 0, 0, (1, 2), 2) + np.asarray(p["b2"], np.float64).reshape(1, -1, 1, 1)
    r2 = R.relu(z2)
    p2 = R.avg_pool_nd(r2, 2, None, 0, 0, 1, True, False)
    f = p2.reshape(len(p2), -1)
    logits = R.linear(f, p["w3"], p["b3"])
    if keep is not None:
        keep.update(locals())
    return R.softmax_cross_entropy(logits, labels)


def _ref_backward(p, x, labels):
    """Backprop composed from the float64 reference gradients."""
    s = {}
    _ref_forward(p, x, labels, s)
    d = {}
    dlog = R.softmax_cross_entropy_backward(s["logits"], labels)
    d["w3"], d["b3"] = dlog.T @ s["f"], dlog.sum(0)
    dr2 = R.avg_pool_nd_backward((dlog @ np.asarray(p["w3"], np.float64)).reshape(s["p2"].shape),
                                 s["r2"].shape, 2, None, 0, 0, 1, True, False)
    dz2 = dr2 * (s["z2"] > 0)
    d["b2"] = dz2.sum(axis=(0, 2, 3))
    d["w2"] = R.conv_nd_backward_weight(s["p1"], dz2, SHAPES["w2"], 1, 0, 0, (1, 2), 2)
    dp1 = R.conv_nd_backward_input(dz2, p["w2"], s["p1"].shape, 1, 0, 0, (1, 2), 2)
    dz1 = 2 * R.max_pool_nd_backward(s["h"], dp1, 3, 2, 1, 1, 1, True) * (s["z1"] > 0)
    d["b1"] = dz1.sum(axis=(0, 2, 3))
    d["w1"] = R.conv_nd_backward_weight(x, dz1, SHAPES["w1"], 1, (1, 1), (0, 1))
    d["x"] = R.conv_nd_backward_input(dz1, p["w1"], X_SHAPE, 1, (1, 1), (0, 1))
    return d


@pytest.fixture(scope="module")
def gradcheck_problem():
    rng = np.random.default_rng(0)
    params = {k: (rng.standard_normal(s) / np.sqrt(np.prod(s[1:]) if len(s) > 1 else 4)).astype(np.float32)
              for k, s in SHAPES.items()}
    x = rng.standard_normal(X_SHAPE).astype(np.float32)
    labels = rng.integers(0, CLASSES, N).astype(np.float32)
    return params, x, labels


def _our_grads(params, x, labels, threads):
    g = rlx_cpu.Graph()
    xi, li = g.input("x", X_SHAPE), g.input("labels", (N,))
    pi = {k: g.input(k, s) for k, s in SHAPES.items()}
    loss = _net(g, xi, pi, li)
    wrt = list(pi.values()) + [xi]
    g.output(loss, *grads(g, loss, wrt))
    out = rlx_cpu.compile(g, num_threads=threads).run({"x": x, "labels": labels, **params})
    return out[0], dict(zip(list(SHAPES) + ["x"], out[1:]))


@pytest.mark.parametrize("wide", ["", "0", "1"])
@pytest.mark.parametrize("threads", [1, 2])
def test_whole_network_matches_reference_backprop(gradcheck_problem, threads, wide, monkeypatch):
    # RLX_BWD_WIDE: unset (auto), weight gradients on im2col + sgemm, or on the wide kernel
    monkeypatch.setenv("RLX_BWD_WIDE", wide)
    params, x, labels = gradcheck_problem
    loss, ours = _our_grads(params, x, labels, threads)
    assert abs(float(loss) - _ref_forward(params, x, labels)) <= 1e-5
    ref = _ref_backward(params, x, labels)
    for k in ours:
        assert R.rel_error(ours[k], ref[k]) <= 1e-4, k


def test_whole_network_matches_central_differences(gradcheck_problem):
    """Central differences of the float64 forward.  eps = 1e-6, not 1e-3: in a
    whole network a 1e-3 step crosses ReLU and max-pool kinks (seen as ~1 %
    errors), while the float64 forward keeps 1e-6 steps accurate to ~1e-9."""
    params, x, labels = gradcheck_problem
    _, ours = _our_grads(params, x, labels, 2)
    rng = np.random.default_rng(1)
    for k, g in ours.items():
        idx = R.sample_indices(g.size, 12, rng)
        base = x if k == "x" else params[k]

        def f(v, k=k):
            if k == "x":
                return _ref_forward(params, v, labels)
            return _ref_forward({**params, k: v}, x, labels)

        fd = R.numeric_grad(f, base, idx, eps=1e-6)
        assert np.abs(g.reshape(-1)[idx] - fd).max() <= 1e-4 * np.abs(g).max(), k


# ---------------------------------------------------------------------------
# grads(): structure and errors
# ---------------------------------------------------------------------------

def _small():
    g = rlx_cpu.Graph()
    x, labels = g.input("x", (2, 1, 6, 6)), g.input("labels", (2,))
    w, b = g.input("w", (3, 1, 3, 3)), g.input("b", (3,))
    fc = g.input("fc", (4, 3 * 3 * 3))
    h = g.max_pool2d(g.relu(g.conv2d(x, w, b)), 2, 1)
    loss = g.softmax_cross_entropy(g.linear(g.flatten(h), fc), labels)
    return g, x, labels, w, b, fc, loss


def test_both_conv_weight_gradients_can_run_on_the_wide_kernel(monkeypatch):
    """Both convs of the network are stride 1, so RLX_BWD_WIDE=1 puts both
    weight gradients on the wide kernel (the parity test above runs it)."""
    monkeypatch.setenv("RLX_BWD_WIDE", "1")
    g = rlx_cpu.Graph()
    xi, li = g.input("x", X_SHAPE), g.input("labels", (N,))
    pi = {k: g.input(k, s) for k, s in SHAPES.items()}
    loss = _net(g, xi, pi, li)
    g.output(*grads(g, loss, [pi["w1"], pi["w2"]]))
    plan = rlx_cpu.compile(g, num_threads=2)
    labels = [t.algorithm.label for t in plan.thunks if t.kind == "conv_backward_weight"]
    assert labels == ["wide", "wide"]


def test_only_needed_gradients_are_built():
    g, x, labels, w, b, fc, loss = _small()
    grads(g, loss, [w])
    ops = [n.op for n in g.nodes]
    assert "conv2d_backward_input" not in ops          # the image needs no gradient
    assert "linear_backward_weight" not in ops       # fc is not asked for
    assert ops.count("conv2d_backward_weight") == 1
    assert "bias_grad" not in ops


def test_fan_out_gradients_are_summed():
    g = rlx_cpu.Graph()
    x, labels = g.input("x", (3, 4), ), g.input("labels", (3,))
    w = g.input("w", (2, 4))
    y = g.linear(x, w)
    loss = g.softmax_cross_entropy(g.add(y, g.add(y, y)), labels)   # 3 y
    (dw,) = grads(g, loss, [w])
    g.output(dw)
    rng = np.random.default_rng(2)
    xv, wv, lv = rng.standard_normal((3, 4)), rng.standard_normal((2, 4)), np.array([0, 1, 1.0])
    got = rlx_cpu.compile(g).run({"x": xv, "labels": lv, "w": wv})[0]
    want = 3 * R.softmax_cross_entropy_backward(3 * R.linear(xv, wv), lv).T @ xv
    assert R.rel_error(got, want) <= 1e-5


def test_grads_errors():
    g, x, labels, w, b, fc, loss = _small()
    with pytest.raises(ValueError, match=r"grads: loss must hold one value"):
        grads(g, g.node(loss.inputs[0]), [w])
    other = g.input("unused", (3,))
    with pytest.raises(ValueError, match=r"grads: loss 'softmax_cross_entropy_\d+' does not depend on .*'unused'"):
        grads(g, loss, [other])
    with pytest.raises(ValueError, match=r"grads: the labels of 'softmax_cross_entropy_\d+' are class indices"):
        grads(g, loss, [labels])
    with pytest.raises(TypeError, match=r"grads: wrt must hold nodes of this graph"):
        grads(g, loss, [rlx_cpu.Graph().input("z", (1,))])
    g2 = rlx_cpu.Graph()
    dy, wi = g2.input("dy", (1, 2, 4, 4)), g2.input("w", (2, 1, 3, 3))
    dx = g2.conv2d_backward_input(dy, wi, (1, 1, 6, 6))
    loss2 = g2.softmax_cross_entropy(g2.reshape(dx, (1, 36)), np.zeros(1))
    with pytest.raises(ValueError, match=r"grads: op 'conv2d_backward_input' .* has no gradient rule"):
        grads(g2, loss2, [wi])


# ---------------------------------------------------------------------------
# Per-op gradient checks through grads(): conv3d, conv-transpose, 1-D and
# dilated / divisor_override pools.  Each op feeds flatten -> linear ->
# softmax cross-entropy; grads w.r.t. every input of the op are compared
# with central differences of the float64 reference forward.
# ---------------------------------------------------------------------------

def _check_op_grads(x_shape, params, build, ref, seed, eps=1e-6):
    """build(g, x, p) -> node; ref(x, p) -> float64 array.  Checks d loss /
    d (x and every param) against central differences, threads 1 and 2."""
    rng = np.random.default_rng(seed)
    vals = {"x": rng.standard_normal(x_shape).astype(np.float32)}
    vals.update({k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in params.items()})
    g0 = rlx_cpu.Graph()
    feat = int(np.prod(build(g0, g0.input("x", x_shape), {k: g0.input(k, s) for k, s in params.items()}).shape[1:]))
    n, classes = x_shape[0], 3
    vals["fc"] = (rng.standard_normal((classes, feat)) / np.sqrt(feat)).astype(np.float32)
    labels = rng.integers(0, classes, n).astype(np.float32)

    def f64(v):
        y = ref(v["x"], v).reshape(n, -1)
        return R.softmax_cross_entropy(R.linear(y, v["fc"]), labels)

    results = []
    for threads in (1, 2):
        g = rlx_cpu.Graph()
        nodes = {"x": g.input("x", x_shape), **{k: g.input(k, s) for k, s in params.items()}}
        nodes["fc"] = g.input("fc", vals["fc"].shape)
        li = g.input("labels", (n,))
        loss = g.softmax_cross_entropy(g.linear(g.flatten(build(g, nodes["x"], nodes)), nodes["fc"]), li)
        names = ["x"] + list(params)
        g.output(*grads(g, loss, [nodes[k] for k in names]))
        out = rlx_cpu.compile(g, num_threads=threads).run({**vals, "labels": labels})
        results.append(out)
        for k, got in zip(names, out):
            idx = R.sample_indices(got.size, 16, rng)
            fd = R.numeric_grad(lambda v, k=k: f64({**vals, k: v}), vals[k], idx, eps=eps)
            assert np.abs(got.reshape(-1)[idx] - fd).max() <= 1e-4 * max(np.abs(got).max(), 1e-6), (k, threads)
    for a, b in zip(*results):
        assert R.rel_error(a, b) <= 1e-5


@pytest.mark.parametrize("groups,stride,pads,dilation", [
    (1, 1, ((1, 0), (0, 1), (1, 1)), 1),
    (2, (2, 1, 2), ((0, 1), (1, 0), (0, 0)), (1, 2, 1)),
], ids=["asym-pads", "groups-stride-dilation"])
def test_conv3d_gradcheck(groups, stride, pads, dilation):
    cin, cout, k = 2, 4, (2, 3, 2)
    pb, pe = tuple(p[0] for p in pads), tuple(p[1] for p in pads)
    params = {"w": (cout, cin // groups) + k, "b": (cout,)}
    _check_op_grads(
        (2, cin, 4, 5, 5), params,
        lambda g, x, p: g.conv3d(x, p["w"], p["b"], stride=stride, padding=pads, dilation=dilation, groups=groups),
        lambda x, p: R.conv_nd(x, p["w"], p["b"], stride, pb, pe, dilation, groups), seed=11)


@pytest.mark.parametrize("nsp,groups,stride,pads,dilation,out_pad", [
    (1, 1, 2, ((1, 0),), 1, (1,)),
    (2, 2, (2, 1), ((1, 0), (0, 1)), (1, 2), (1, 0)),
    (3, 1, (1, 2, 1), ((0, 0), (1, 1), (0, 1)), 1, (0, 1, 0)),
], ids=["1d", "2d-groups-dilation", "3d"])
def test_conv_transpose_gradcheck(nsp, groups, stride, pads, dilation, out_pad):
    cin, cout = 2, 4
    k = (3, 2, 2)[:nsp]
    pb, pe = tuple(p[0] for p in pads), tuple(p[1] for p in pads)
    params = {"w": (cin, cout // groups) + k, "b": (cout,)}
    x_shape = (2, cin) + (4, 3, 3)[:nsp]
    _check_op_grads(
        x_shape, params,
        lambda g, x, p: getattr(g, f"conv_transpose{nsp}d")(x, p["w"], p["b"], stride=stride, padding=pads,
                                                            output_padding=out_pad, groups=groups,
                                                            dilation=dilation),
        lambda x, p: R.conv_transpose_nd(x, p["w"], p["b"], stride, pb, pe, dilation, groups, out_pad), seed=12)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool1d_gradcheck(kind):
    """1-D pools differentiate through the 2-D kernels (height 1)."""
    if kind == "max":
        build = lambda g, x, p: g.max_pool1d(x, 3, 2, ((1, 0),), dilation=2, ceil_mode=True)   # noqa: E731
        ref = lambda x, p: R.max_pool_nd(x, 3, 2, 1, 0, 2, True)[0]                               # noqa: E731
    else:
        build = lambda g, x, p: g.avg_pool1d(x, 3, 2, ((1, 1),), ceil_mode=True,                  # noqa: E731
                                             count_include_pad=True)
        ref = lambda x, p: R.avg_pool_nd(x, 3, 2, 1, 1, 1, True, True)                            # noqa: E731
    _check_op_grads((2, 3, 11), {}, build, ref, seed=13)


@pytest.mark.parametrize("divisor,cip", [(None, True), (None, False), (5, True)],
                         ids=["include-pad", "exclude-pad", "divisor-override"])
def test_avg_pool2d_dilated_gradcheck(divisor, cip):
    _check_op_grads(
        (2, 2, 7, 8), {},
        lambda g, x, p: g.avg_pool2d(x, (2, 3), (2, 1), ((1, 0), (1, 1)), ceil_mode=True, count_include_pad=cip,
                                     divisor_override=divisor, dilation=(2, 1)),
        lambda x, p: R.avg_pool_nd(x, (2, 3), (2, 1), (1, 1), (0, 1), (2, 1), True, cip, divisor), seed=14)


def test_not_differentiable_ops_raise_naming_the_op():
    g = rlx_cpu.Graph()
    x, labels = g.input("x", (1, 2, 4, 4, 4)), g.input("labels", (1,))
    y = g.avg_pool3d(x, 2)          # max_pool3d differentiates through its indices
    loss = g.softmax_cross_entropy(g.flatten(y), labels)
    with pytest.raises(NotImplementedError, match=r"grads: avg_pool3d .* is not differentiable"):
        grads(g, loss, [x])
    g = rlx_cpu.Graph()
    x, w, labels = g.input("x", (1, 2, 4)), g.input("w", (2, 1, 3)), g.input("labels", (1,))
    y = g.conv_transpose1d(x, w, stride=1, output_padding=1, dilation=2)     # output_padding >= stride
    loss = g.softmax_cross_entropy(g.flatten(y), labels)
    with pytest.raises(NotImplementedError, match=r"grads: conv_transpose1d .* output_padding \(1,\) >= stride"):
        grads(g, loss, [w])


# ---------------------------------------------------------------------------
# Trainer
# ---------------------------------------------------------------------------

def _batch(n=16, seed=3):
    x, y = synthetic_digits(n, seed=seed)
    return {"x": x, "labels": y}


def test_parameters_persist_between_runs():
    """Parameters are arena-resident; no intermediate may overwrite them."""
    tr = build_cnn_training(16, num_threads=2, momentum=0.0)
    before = tr.parameters()
    b = _batch()
    l1, g1 = tr.forward_backward(b), tr.gradients()
    l2, g2 = tr.forward_backward(b), tr.gradients()
    assert l1 == l2
    for k in g1:
        assert np.array_equal(g1[k], g2[k])
        assert np.array_equal(before[k], tr.parameters()[k])


def test_sgd_step_updates_in_place():
    tr = build_cnn_training(16, num_threads=2, lr=0.1, momentum=0.0)
    b = _batch()
    tr.forward_backward(b)
    p0, g0 = tr.parameters(), tr.gradients()
    tr.step(b)
    for k, p in tr.parameters().items():
        assert np.array_equal(p, p0[k] + np.float32(-0.1) * g0[k])


def test_momentum_step():
    tr = build_cnn_training(16, num_threads=1, lr=0.05, momentum=0.9)
    b1, b2 = _batch(seed=4), _batch(seed=5)
    p0 = tr.parameters()
    tr.forward_backward(b1)
    g1 = tr.gradients()
    tr.step(b1)
    tr.forward_backward(b2)
    g2 = tr.gradients()
    tr.step(b2)
    for k, p in tr.parameters().items():
        v1 = g1[k]
        p1 = p0[k] + np.float32(-0.05) * v1
        v2 = np.float32(0.9) * v1 + g2[k]
        assert np.allclose(p, p1 + np.float32(-0.05) * v2, rtol=0, atol=1e-6), k


def test_training_is_deterministic_for_a_thread_count():
    for threads in (1, 2):
        runs = []
        for _ in range(2):
            tr = build_cnn_training(16, num_threads=threads, seed=7)
            runs.append([tr.step(_batch(seed=s)) for s in range(4)])
        assert runs[0] == runs[1]


def test_step_allocates_nothing_large():
    tr = build_cnn_training(32, num_threads=2)
    b = _batch(32)
    tr.step(b)
    tracemalloc.start()
    try:
        for _ in range(5):
            tr.step(b)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # smaller than any activation, gradient or batch buffer (the batch is 100 KB)
    assert peak < 4096


def test_trainer_errors():
    g, x, labels, w, b, fc, loss = _small()
    with pytest.raises(ValueError, match=r"Trainer: parameters must be graph inputs"):
        Trainer(g, loss, [g.node(loss.inputs[0])])
    g, x, labels, w, b, fc, loss = _small()
    with pytest.raises(ValueError, match=r"Trainer: momentum must be in \[0, 1\)"):
        Trainer(g, loss, [w], momentum=1.0)
    g, x, labels, w, b, fc, loss = _small()
    tr = Trainer(g, loss, [w, b, fc])
    with pytest.raises(ValueError, match=r"step: 'x' must have shape \[2, 1, 6, 6\], got \[2, 6, 6\]"):
        tr.step({"x": np.zeros((2, 6, 6)), "labels": np.zeros(2)})
    with pytest.raises(ValueError, match=r"step: batch must provide \['x', 'labels'\], missing 'labels'"):
        tr.step({"x": np.zeros((2, 1, 6, 6))})


def test_training_example_loss_falls():
    """Seeded short run of the example (4 classes, 64 steps): the loss really falls."""
    out = train_cnn(epochs=2, train_size=1024, test_size=256, lr=0.1, num_threads=1, seed=0, classes=4,
                    noise=0.2, log=lambda s: None)
    hist = out["history"]
    first, last = hist[0]["loss"], hist[-1]["loss"]
    assert last < 0.8 * first, (first, last)
    assert hist[-1]["train_acc"] > 0.45           # chance is 0.25


def test_cli_runs():
    from rlx_cpu.__main__ import main
    assert main(["train", "--epochs", "1", "--train-size", "128", "--test-size", "64", "--target", "0"]) == 0
    with pytest.raises(SystemExit) as e:
        main(["nonsense"])
    assert e.value.code == 2
