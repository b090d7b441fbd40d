"""The compile-time graph passes (rlx_cpu/passes.py), each on its own, and the
fused conv epilogue on every conv2d algorithm.

Every pass is checked on the node list it returns and on numbers: the plan
compiled with the pass agrees with the plan compiled without passes and with
the float64 numpy reference (tests/reference.py) within TOL (1e-4 relative to
the output's magnitude).  ResNet- and MobileNetV2-style blocks exported from
PyTorch also run against ONNX Runtime.
"""
import io
import pickle

import numpy as np
import pytest

import reference as ref
import rlx_cpu
from rlx_cpu import _runtime
from conftest import ALGORITHMS, TOL, check_parity
from rlx_cpu import passes
from rlx_cpu.autograd import grads
from rlx_cpu.ops.conv import ConvEpilogue


def ops(graph):
    return [n.op for n in graph.nodes]


def log_of(summary):
    """{pass: {what: count}} from a plan's pass summary."""
    out = {}
    for part in summary.split("; "):
        name, what = part.split(": ")
        out[name] = {} if what == "nothing" else {k: int(v) for v, k in (w.split(" ", 1) for w in what.split(", "))}
    return out


def run(graph, feeds, **kw):
    return rlx_cpu.compile(graph, **kw).run(feeds)


def bn_stats(rng, c):
    return dict(scale=rng.uniform(0.5, 1.5, c), bias=rng.normal(size=c), mean=rng.normal(size=c) * 0.3,
                var=rng.uniform(0.5, 1.5, c))


def ref_bn(x, s):
    return ref.batch_norm(x, s["scale"], s["bias"], s["mean"], s["var"])


# ---------------------------------------------------------------------------
# fold_constants
# ---------------------------------------------------------------------------

def test_fold_constants_evaluates_constant_subgraphs(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 4, 4))
    c = rng.normal(size=(2, 3, 4, 4)).astype(np.float32)
    k = g.sigmoid(g.mul(g.constant(c), 2.0))                 # both inputs constant: folded
    w = rng.normal(size=(5, 3, 3, 3)).astype(np.float32)
    wk = g.leaky_relu(g.constant(w), alpha=0.1)              # a computed weight: folded too
    y = g.conv2d(g.broadcast_add(x, k), wk, padding=1)
    g.output(y)
    out = passes.fold_constants(g)
    assert ops(g) == ["input", "constant", "constant", "mul", "sigmoid", "constant", "leaky_relu",
                      "broadcast_add", "conv2d"]                       # the input graph is unchanged
    assert ops(out) == ["input", "constant", "constant", "constant", "constant", "constant", "constant",
                        "broadcast_add", "conv2d"]
    assert out.pass_log == (("fold_constants", {"folded": 3}),)
    folded = {n.name: n.value for n in out.nodes if n.op == "constant"}
    np.testing.assert_allclose(folded[g.nodes[4].name], ref.sigmoid(c.astype(np.float64) * 2), rtol=1e-6)
    xv = rng.normal(size=(2, 3, 4, 4))
    want = ref.conv_nd(xv + ref.sigmoid(c * 2.0), ref.leaky_relu(w.astype(np.float64), 0.1), pads_begin=1,
                       pads_end=1)
    check_parity(run(out, {"x": xv}, passes=False)[0], want, "passes fold_constants")
    check_parity(run(g, {"x": xv})[0], want, "passes fold_constants")


def test_fold_constants_leaves_a_pool_with_indices_paired(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 4, 4))
    c = g.constant(rng.normal(size=(1, 2, 4, 4)))
    y, idx = g.max_pool2d(c, 2, return_indices=True)
    g.output(g.broadcast_add(g.max_pool2d(x, 2), y))
    out = passes.fold_constants(g)
    # the pool of a constant is not folded: it writes its indices node too
    assert ops(out) == ops(g) and out.pass_log == (("fold_constants", {"folded": 0}),)
    assert ops(out)[ops(out).index("max_pool2d") + 1] == "max_pool_indices"
    xv = rng.normal(size=(1, 2, 4, 4))
    want = ref.max_pool_nd(xv, 2)[0] + ref.max_pool_nd(c.value.astype(np.float64), 2)[0]
    check_parity(run(out, {"x": xv}, passes=False)[0], want, "passes fold_constants")


# ---------------------------------------------------------------------------
# fold_batch_norm
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("nd", (1, 2, 3))
@pytest.mark.parametrize("bias", (False, True))
def test_fold_batch_norm_into_conv(rng, nd, bias):
    sp = (6, 5, 4)[:nd]
    x_shape = (2, 4) + sp
    w = rng.normal(size=(6, 2) + (3,) * nd).astype(np.float32)
    b = rng.normal(size=6).astype(np.float32) if bias else None
    stats = bn_stats(rng, 6)
    g = rlx_cpu.Graph()
    x = g.input("x", x_shape)
    y = g.batch_norm(getattr(g, f"conv{nd}d")(x, w, b, padding=1, groups=2), **stats, epsilon=1e-3)
    g.output(y)
    out = passes.fold_batch_norm(g)
    convs = [n for n in out.nodes if n.op == f"conv{nd}d"]
    assert "batch_norm" not in ops(out) and len(convs) == 1
    assert out.pass_log == (("fold_batch_norm", {"folded": 1}),)
    assert [out.node(i).op for i in convs[0].inputs] == ["input", "constant", "constant"]
    xv = rng.normal(size=x_shape)
    conv = ref.conv_nd(xv, w, b, pads_begin=1, pads_end=1, groups=2)
    want = ref.batch_norm(conv, stats["scale"], stats["bias"], stats["mean"], stats["var"], eps=1e-3)
    check_parity(run(out, {"x": xv}, passes=False)[0], want, "passes fold_batch_norm")
    check_parity(run(g, {"x": xv}, passes=False)[0], want, "passes fold_batch_norm")


def test_fold_batch_norm_needs_constant_weights_and_a_sole_reader(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 3, 5, 5))
    w_in = g.input("w", (4, 3, 3, 3))
    stats = bn_stats(rng, 4)
    a = g.batch_norm(g.conv2d(x, w_in), **stats)                       # weight is a plan input
    conv = g.conv2d(x, rng.normal(size=(4, 3, 3, 3)))
    b = g.batch_norm(conv, **stats)                                    # conv read twice
    g.output(a, g.add(b, conv))
    out = passes.fold_batch_norm(g)
    assert ops(out).count("batch_norm") == 2
    assert out.pass_log[-1] == ("fold_batch_norm", {"folded": 0})


# ---------------------------------------------------------------------------
# fuse_epilogue
# ---------------------------------------------------------------------------

ACTS = {
    "relu": ({}, ref.relu),
    "clip": ({"alpha": 0.0, "beta": 6.0}, lambda v: ref.clip(v, 0.0, 6.0)),
    "leaky_relu": ({"alpha": 0.2}, lambda v: ref.leaky_relu(v, 0.2)),
    "sigmoid": ({}, ref.sigmoid),
    "hard_sigmoid": ({}, ref.hard_sigmoid),
    "hard_swish": ({}, ref.hard_swish),
    "tanh": ({}, ref.tanh),
    "silu": ({}, ref.silu),
}


def _block(rng, x_shape, w_shape, act, bias, residual, padding, bias_op=False, nd=2, stride=1, groups=1):
    """conv [-> bias_add] [-> + skip] [-> act]; returns (graph, feeds, float64 reference)."""
    w = rng.normal(size=w_shape).astype(np.float32) / np.sqrt(np.prod(w_shape[1:]))
    b = rng.normal(size=w_shape[0]).astype(np.float32)
    y_shape = None
    g = rlx_cpu.Graph()
    x = g.input("x", x_shape)
    conv = getattr(g, f"conv{nd}d")
    y = conv(x, w, b if bias and not bias_op else None, stride=stride, padding=padding, groups=groups)
    y_shape = y.shape
    if bias and bias_op:
        y = g.bias_add(y, b)
    feeds = {"x": rng.normal(size=x_shape)}
    want = ref.conv_nd(feeds["x"], w, b if bias else None, stride=stride, pads_begin=padding, pads_end=padding,
                       groups=groups)
    if residual:
        feeds["skip"] = rng.normal(size=y_shape)
        y = g.add(g.input("skip", y_shape), y) if residual == "left" else g.add(y, g.input("skip", y_shape))
        want = want + feeds["skip"]
    if act is not None:
        kw, f = ACTS[act]
        y = getattr(g, act)(y, **kw)
        want = f(want)
    g.output(y)
    return g, feeds, want


@pytest.mark.parametrize("order", ["x_first", "sigmoid_first"])
def test_fuse_silu_then_into_the_conv(rng, order):
    """conv -> mul(y, sigmoid(y)) (SiLU as exporters write it) becomes silu,
    then the conv's epilogue: one thunk, the float64 value, and the same
    bits as the unfused graph."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 9, 9))
    y = g.conv2d(x, rng.normal(size=(12, 8, 3, 3)).astype(np.float32) / 6, rng.normal(size=12), padding=1)
    s = g.sigmoid(y)
    g.output(g.mul(y, s) if order == "x_first" else g.mul(s, y))
    out = passes.fuse_silu(g)
    assert ops(out)[-1] == "silu" and "sigmoid" not in ops(out) and "mul" not in ops(out)
    assert out.pass_log == (("fuse_silu", {"fused": 1}),)
    plan = rlx_cpu.compile(g)
    assert [t.kind for t in plan.thunks] == ["conv"] and plan.thunks[0].epilogue.act == "silu"
    assert "fuse_silu: 1 fused" in plan.pass_summary
    feeds = {"x": rng.normal(size=(1, 8, 9, 9)).astype(np.float32)}
    unfused = rlx_cpu.compile(g, passes=False).run(feeds)[0]
    fused = plan.run(feeds)[0]
    np.testing.assert_array_equal(fused, unfused)
    w64 = g.nodes[1].value.astype(np.float64)
    want = ref.silu(ref.conv_nd(feeds["x"].astype(np.float64), w64, g.nodes[2].value.astype(np.float64),
                                pads_begin=1, pads_end=1))
    check_parity(fused, want, "silu epilogue")


def test_fuse_silu_leaves_other_patterns(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 4, 5, 5))
    other = g.input("z", (2, 4, 5, 5))
    s = g.sigmoid(x)
    a = g.mul(x, s)                                   # the sigmoid has a second reader below
    b = g.mul(g.sigmoid(x), other)                    # sigmoid of another tensor
    c = g.mul(g.sigmoid(g.input("v", (4, 1, 1))), x)  # broadcast: not x * sigmoid(x)
    g.output(a, b, c, s)
    out = passes.fuse_silu(g)
    assert ops(out).count("mul") == 3 and "silu" not in ops(out)
    assert out.pass_log == (("fuse_silu", {"fused": 0}),)


@pytest.mark.parametrize("act", list(ACTS) + [None])
def test_fuse_epilogue_every_activation(rng, act):
    g, feeds, want = _block(rng, (2, 16, 9, 9), (16, 16, 3, 3), act, bias=True, residual="right", padding=1)
    out = passes.fuse_epilogue(g)
    assert ops(out) == ["input", "constant", "constant", "input", "conv2d"]
    conv = out.nodes[-1]
    params = g.nodes[-1].attrs
    alpha, beta = (params.alpha, params.beta) if act not in (None, "relu") else (0.0, 0.0)
    assert conv.attrs.epilogue == ConvEpilogue(act, alpha, beta, residual=True)
    assert [out.node(i).name for i in conv.inputs][-1] == "skip"
    counts = {"add": 1, **({act: 1} if act else {})}
    assert out.pass_log == (("fuse_epilogue", counts),)
    for algo in ALGORITHMS:
        unfused = run(g, feeds, conv_algorithm=algo, passes=False)[0]
        fused = run(out, feeds, conv_algorithm=algo, passes=False)[0]
        check_parity(fused, want, f"epilogue {act} {algo}")
        check_parity(fused, unfused, f"epilogue {act} {algo} vs unfused")


@pytest.mark.parametrize("algo", ALGORITHMS + ("gemm_1x1",))
@pytest.mark.parametrize("bias,bias_op,residual", [(False, False, None), (True, False, None),
                                                   (True, True, "left"), (False, False, "right"),
                                                   (True, True, None)])
@pytest.mark.parametrize("threads", (1, 2))
def test_fuse_epilogue_parts_on_every_algorithm(rng, algo, bias, bias_op, residual, threads):
    k = 1 if algo == "gemm_1x1" else 3
    # odd output size: clipped Winograd tiles and partial column blocks
    g, feeds, want = _block(rng, (2, 16, 11, 13), (24, 16, k, k), "relu", bias, residual, padding=k // 2,
                            bias_op=bias_op)
    out = passes.fuse_epilogue(g)
    assert ops(out)[-1] == "conv2d" and "relu" not in ops(out) and "add" not in ops(out)
    assert "bias_add" not in ops(out)
    algo_arg = "auto" if algo == "gemm_1x1" else algo
    plan = rlx_cpu.compile(out, conv_algorithm=algo_arg, passes=False, num_threads=threads)
    if algo == "gemm_1x1":
        assert plan.thunks[-1].kind == "conv_1x1" and plan.thunks[-1].block > 0
    else:
        assert plan.thunks[-1].algorithm.label == algo
    assert len(plan.thunks) == 1
    check_parity(plan.run(feeds)[0], want, f"epilogue parts {algo}")
    check_parity(plan.run(feeds)[0], run(g, feeds, conv_algorithm=algo_arg, passes=False, num_threads=threads)[0],
                 f"epilogue parts {algo} vs unfused")


@pytest.mark.parametrize("k", (3, 5))
@pytest.mark.parametrize("act,bias,residual", [("clip", True, None), ("relu", False, "right"), (None, True, None),
                                               ("hard_swish", True, "left"), ("sigmoid", False, None),
                                               ("leaky_relu", True, "right"), ("silu", True, "left")])
@pytest.mark.parametrize("threads", (1, 2))
# stride 2: small planes run the channel-block kernel, fewer than 8 channels
# or output planes over 64x64 (here 67x65) the per-plane kernel
@pytest.mark.parametrize("stride,x_shape", [(2, (2, 16, 15, 12)), (2, (1, 5, 15, 12)), (2, (1, 8, 134, 130)),
                                            (1, (2, 16, 15, 12)), (1, (1, 5, 15, 12))])
def test_fuse_epilogue_on_depthwise(rng, k, act, bias, residual, threads, stride, x_shape):
    # MobileNet's depthwise conv + BN + ReLU6 (and EfficientNet's 5x5 +
    # swish): the depthwise kernels run the epilogue (activation, residual,
    # bias) too.  At stride 1 five planes of 15 rows split mid-plane over 2
    # threads, so a run's residual and output offsets start inside a plane.
    c = x_shape[1]
    g, feeds, want = _block(rng, x_shape, (c, 1, k, k), act, bias, residual, padding=k // 2, stride=stride,
                            groups=c)
    plan = rlx_cpu.compile(g, num_threads=threads)
    assert [t.kind for t in plan.thunks] == ["conv"] and plan.thunks[0].algorithm.label == "direct"
    got = plan.run(feeds)[0]
    check_parity(got, want, f"depthwise s{stride} k{k} epilogue {act} {residual}")
    check_parity(got, rlx_cpu.compile(g, num_threads=threads, passes=False).run(feeds)[0],
                 f"depthwise s{stride} k{k} epilogue vs unfused")


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="single-threaded build (no OpenMP): no 2-thread plan")
def test_fuse_epilogue_1x1_column_blocks_cover_large_planes(rng):
    # one image, two threads: 41x39 = 1599 columns in two blocks (800 + 799)
    g, feeds, want = _block(rng, (1, 32, 41, 39), (96, 32, 1, 1), "hard_swish", True, "right", padding=0)
    plan = rlx_cpu.compile(g, num_threads=2)
    (th,) = plan.thunks
    assert th.kind == "conv_1x1" and th.block == 800
    check_parity(plan.run(feeds)[0], want, "epilogue 1x1 blocks")


@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("n", (1, 5))
# 10 input channels: one GEMM over the batch; 40: a matrix-vector product
# per image (src/_conv2d.pyx, PLANE1_ONE_GEMM_MAX_CIN)
@pytest.mark.parametrize("c_in,c_out", [(10, 40), (40, 10), (33, 70)])
@pytest.mark.parametrize("act,bias,residual", [("sigmoid", True, None), ("silu", True, "right"),
                                               ("relu", False, None), (None, True, "left"), (None, False, None),
                                               ("hard_sigmoid", True, None)])
def test_fuse_epilogue_1x1_on_1x1_planes(rng, threads, n, c_in, c_out, act, bias, residual):
    # a squeeze-and-excitation block's convs: the [N, C, 1, 1] input is an
    # [N, C] matrix, each image's output channels consecutive floats that
    # take the epilogue as one span
    g, feeds, want = _block(rng, (n, c_in, 1, 1), (c_out, c_in, 1, 1), act, bias, residual, padding=0)
    plan = rlx_cpu.compile(g, num_threads=threads)
    assert [t.kind for t in plan.thunks] == ["conv_1x1"]
    got = plan.run(feeds)[0]
    check_parity(got, want, f"1x1 on 1x1 planes, {c_in}->{c_out} epilogue {act} {residual}")
    check_parity(got, rlx_cpu.compile(g, num_threads=threads, passes=False).run(feeds)[0],
                 "1x1 on 1x1 planes vs unfused")


@pytest.mark.parametrize("n", (1, 16, 17))
@pytest.mark.parametrize("c_out", (1, 6, 70))
def test_1x1_on_1x1_planes_splits_output_channels_over_threads(rng, n, c_out):
    # up to 16 images with many input channels: the dense layer's kernel,
    # blocks of 4 output channels over the threads (PLANE1_GEMM_NT_MAX_N);
    # 17 images: a matrix-vector product per image.  Either way each output
    # is the same sum at any thread count.
    g, feeds, want = _block(rng, (n, 300, 1, 1), (c_out, 300, 1, 1), "sigmoid", True, None, padding=0)
    outs = []
    for threads in (1, 2, 3):
        plan = rlx_cpu.compile(g, num_threads=threads)
        assert [t.kind for t in plan.thunks] == ["conv_1x1"]
        outs.append(plan.run(feeds)[0])
        check_parity(outs[-1], want, f"1x1 on 1x1 planes, {n} images 300->{c_out}, {threads} threads")
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


@pytest.mark.parametrize("threads", (1, 2))
@pytest.mark.parametrize("x_shape,c_out", [((3, 40, 2, 2), 70), ((2, 24, 3, 3), 40), ((1, 32, 7, 7), 50),
                                           ((2, 16, 4, 4), 24)])
@pytest.mark.parametrize("act,bias,residual", [("silu", True, "right"), ("sigmoid", False, None),
                                               ("silu", False, "left"), ("tanh", True, None),
                                               ("sigmoid", True, "left"), ("relu", True, None)])
def test_fuse_epilogue_1x1_on_small_planes(rng, threads, x_shape, c_out, act, bias, residual):
    # small planes (the channel-panel and row-panel kernels): a channel's
    # few pixels are a row shorter than a vector, and the rows of a panel lie
    # end to end, so a sigmoid, SiLU or tanh runs over all of them at once
    from rlx_cpu import _conv2d
    g, feeds, want = _block(rng, x_shape, (c_out, x_shape[1], 1, 1), act, bias, residual, padding=0)
    plan = rlx_cpu.compile(g, num_threads=threads)
    (th,) = plan.thunks
    assert th.kind == "conv_1x1"
    if _conv2d.simd_level() and x_shape[2] * x_shape[3] < 16:
        assert th.packed == _conv2d.GEMM_LAYOUT_CHANNELS, th.packed
    got = plan.run(feeds)[0]
    check_parity(got, want, f"1x1 on {x_shape[2]}x{x_shape[3]} planes, epilogue {act} {residual}")
    check_parity(got, rlx_cpu.compile(g, num_threads=threads, passes=False).run(feeds)[0],
                 "1x1 on small planes vs unfused")


def test_fuse_epilogue_conv1d(rng):
    g, feeds, want = _block(rng, (2, 8, 30), (8, 8, 5), "leaky_relu", True, "right", padding=2, nd=1)
    out = passes.fuse_epilogue(g)
    assert ops(out)[-1] == "conv1d" and out.nodes[-1].attrs.epilogue.residual
    for algo in ("reference", "im2col", "direct"):
        check_parity(run(out, feeds, conv_algorithm=algo, passes=False)[0], want, f"epilogue conv1d {algo}")


def test_fuse_epilogue_stops_at_values_read_twice_or_returned(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 4, 6, 6))
    w = rng.normal(size=(4, 4, 3, 3))
    c1 = g.conv2d(x, w, padding=1)
    r1 = g.relu(c1)
    c2 = g.conv2d(r1, w, padding=1)
    s2 = g.add(c2, r1)
    t2 = g.tanh(s2)
    c3 = g.conv2d(t2, w, padding=1)
    r3 = g.relu(c3)
    g.output(s2, r3, c1)            # c1 is an output: not fused; s2 is an output: its tanh is not fused
    out = passes.fuse_epilogue(g)
    assert ops(out) == ["input", "constant", "conv2d", "relu", "constant", "conv2d", "tanh", "constant",
                        "conv2d"]
    assert out.node(5).attrs.epilogue == ConvEpilogue(None, residual=True)
    assert out.node(8).attrs.epilogue == ConvEpilogue("relu")
    assert out.pass_log[-1] == ("fuse_epilogue", {"add": 1, "relu": 1})
    xv = rng.normal(size=(1, 4, 6, 6))
    for a, b in zip(run(g, {"x": xv}, passes=False), run(out, {"x": xv}, passes=False)):
        check_parity(b, a, "epilogue partial")


def test_fuse_epilogue_two_convs_meeting_at_one_add(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 7, 7))
    a = g.conv2d(x, rng.normal(size=(8, 8, 3, 3)), padding=1)
    b = g.bias_add(g.conv2d(x, rng.normal(size=(8, 8, 1, 1))), rng.normal(size=8))
    g.output(g.relu(g.add(a, b)))
    out = passes.fuse_epilogue(g)
    # the first conv takes the add and the relu, the second keeps its bias
    fused = [n for n in out.nodes if n.op == "conv2d"]
    assert [n.attrs.epilogue for n in fused] == [ConvEpilogue(None), ConvEpilogue("relu", residual=True)]
    assert ops(out).count("add") == 0 and ops(out).count("bias_add") == 0
    xv = rng.normal(size=(1, 8, 7, 7))
    check_parity(run(out, {"x": xv}, passes=False)[0], run(g, {"x": xv}, passes=False)[0], "epilogue meet")


def test_fused_conv_has_no_gradient():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 4, 4))
    y = g.relu(g.conv2d(x, g.input("w", (2, 2, 3, 3)), padding=1))
    g.output(y)
    out = passes.fuse_epilogue(g)
    loss = out.softmax_cross_entropy(out.reshape(out.nodes[-1], (1, 32)), out.input("labels", (1,)))
    with pytest.raises(ValueError, match="fused epilogue"):
        grads(out, loss, [out.nodes[1]])


# ---------------------------------------------------------------------------
# dce
# ---------------------------------------------------------------------------

def test_dce_removes_dead_nodes_and_keeps_inputs(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 4, 4))
    g.input("unused", (3,))
    dead = g.sigmoid(g.relu(x))
    g.tanh(dead)
    y, idx = g.max_pool2d(x, 2, return_indices=True)           # indices unused: kept beside its pool
    g.output(g.relu(y))
    out = passes.dce(g)
    assert ops(out) == ["input", "input", "max_pool2d", "max_pool_indices", "relu"]
    assert out.pass_log == (("dce", {"removed": 3}),)
    plan = rlx_cpu.compile(out, passes=False)
    assert plan.input_names == ["x", "unused"]
    xv = rng.normal(size=(1, 2, 4, 4))
    check_parity(plan.run({"x": xv, "unused": np.zeros(3)})[0], ref.relu(ref.max_pool_nd(xv, 2)[0]), "passes dce")


# ---------------------------------------------------------------------------
# in_place
# ---------------------------------------------------------------------------

def _in_place_graph(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 4, 6, 6))
    h = g.conv2d(x, rng.normal(size=(4, 4, 3, 3)), padding=1)
    h = g.batch_norm(h, **bn_stats(rng, 4))          # reads h last: in place
    h = g.hard_swish(h)                              # in place (on the same buffer)
    s = g.mul(h, g.constant(rng.normal(size=(1, 4, 1, 1))))    # broadcast: writes into h's buffer
    t = g.sigmoid(x)                                 # x is a graph input: never written
    u = g.sub(t, s)                                  # either operand: t
    g.output(u)
    return g


def test_in_place_marks_and_buffers(rng):
    g = _in_place_graph(rng)
    out = passes.in_place(g)
    marked = {out.node(a).op: out.node(b).op for a, b in out.in_place.items()}
    assert marked == {"batch_norm": "conv2d", "hard_swish": "batch_norm", "mul": "hard_swish"}
    assert out.pass_log == (("in_place", {"in place": 3}),)
    plan = rlx_cpu.compile(out, passes=False)
    kinds = {t.kind: t for t in plan.thunks}
    conv_y = kinds["conv"].y
    assert kinds["batch_norm"].x == kinds["batch_norm"].y == conv_y
    assert kinds["hard_swish"].x == kinds["hard_swish"].y == conv_y
    assert kinds["mul"].a == kinds["mul"].y == conv_y
    assert kinds["sigmoid"].x.segment == "input:0" and kinds["sigmoid"].y.segment == "arena"
    assert kinds["sub"].y.segment == "output:0"        # a graph output is written by its own op
    xv = rng.normal(size=(2, 4, 6, 6)).astype(np.float32)
    keep = xv.copy()
    got = plan.run({"x": xv})[0]
    np.testing.assert_array_equal(xv, keep)
    check_parity(got, rlx_cpu.compile(g, passes=False).run({"x": xv})[0], "passes in_place")
    # the debug plan checks every launch's writes (in-place ones included)
    np.testing.assert_array_equal(rlx_cpu.compile(out, passes=False, debug=True).run({"x": xv})[0], got)


def test_in_place_respects_later_readers_through_aliases(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 3, 4))
    h = g.mul(x, 2.0)
    r = g.reshape(h, (1, 24))                        # an alias of h ...
    e = g.relu(h)                                    # ... read after the relu: no in place
    g.output(g.add(g.reshape(e, (1, 24)), r))
    out = passes.in_place(g)
    assert out.in_place == {} and out.pass_log == (("in_place", {"in place": 0}),)
    xv = rng.normal(size=(1, 2, 3, 4))
    check_parity(run(g, {"x": xv})[0], (ref.relu(2 * xv) + 2 * xv).reshape(1, 24), "passes in_place alias")


# ---------------------------------------------------------------------------
# compile(passes=...), the plan's summary, training graphs
# ---------------------------------------------------------------------------

def test_compile_runs_passes_and_reports_them(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 8, 8, 8))     # batch 2: a lone 3x3 stays NCHW (ops/blocked.py dense_alone)
    h = g.batch_norm(g.conv2d(x, rng.normal(size=(8, 8, 3, 3)), padding=1), **bn_stats(rng, 8))
    y = g.relu(g.add(h, x))
    g.sigmoid(y)                                               # dead
    g.output(g.clip(g.conv2d(y, rng.normal(size=(8, 8, 1, 1))), 0.0, 6.0))
    plan = rlx_cpu.compile(g)
    # dce: the sigmoid, the conv's original weight and the four statistics
    assert plan.pass_summary == ("fold_constants: nothing; fold_batch_norm: 1 folded; fuse_silu: nothing; "
                                 "fuse_epilogue: 1 add, 1 relu, 1 clip; blocked_layout: nothing; "
                                 "fuse_inverted_residual: nothing; fuse_norm_relu: nothing; fuse_norm_conv: nothing; dce: 6 removed; "
                                 "in_place: nothing")
    assert "passes: " + plan.pass_summary in repr(plan)
    assert [t.kind for t in plan.thunks] == ["conv", "conv_1x1"]
    assert pickle.loads(pickle.dumps(plan)).pass_summary == plan.pass_summary
    none = rlx_cpu.compile(g, passes=False)
    assert none.pass_summary == "" and "passes:" not in repr(none)
    assert [t.kind for t in none.thunks] == ["conv", "batch_norm", "add", "relu", "conv_1x1", "clip"]
    only = rlx_cpu.compile(g, passes=["dce"])
    assert only.pass_summary == "dce: 1 removed"
    xv = rng.normal(size=(2, 8, 8, 8))
    for p in (plan, only):
        check_parity(p.run({"x": xv})[0], none.run({"x": xv})[0], "passes compile")
    with pytest.raises(ValueError, match="unknown pass"):
        rlx_cpu.compile(g, passes=["fold_everything"])
    with pytest.raises(TypeError, match="passes must be"):
        rlx_cpu.compile(g, passes="dce")


def test_training_graph_gives_the_same_gradients_with_passes(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (4, 2, 8, 8))
    labels = g.input("labels", (4,))
    w1 = g.input("w1", (4, 2, 3, 3))
    b1 = g.input("b1", (4,))
    w2 = g.input("w2", (3, 4 * 8 * 8))
    h = g.relu(g.bias_add(g.conv2d(x, w1, padding=1), b1))
    h2 = g.relu(g.add(g.conv2d(h, g.constant(rng.normal(size=(4, 4, 3, 3)) * 0.2), padding=1), h))
    loss = g.softmax_cross_entropy(g.linear(g.flatten(h2), w2), labels)
    dw1, db1, dw2 = grads(g, loss, [w1, b1, w2])
    g.output(loss, dw1, db1, dw2)
    feeds = {"x": rng.normal(size=(4, 2, 8, 8)), "labels": np.array([0, 1, 2, 1.0]),
             "w1": rng.normal(size=(4, 2, 3, 3)) * 0.3, "b1": rng.normal(size=4), "w2": rng.normal(size=(3, 256)) * 0.1}
    with_passes = rlx_cpu.compile(g)
    log = log_of(with_passes.pass_summary)
    assert log["fuse_epilogue"] == {"bias": 1, "add": 1, "relu": 2}
    assert log["in_place"]["in place"] >= 1
    for a, b in zip(with_passes.run(feeds), rlx_cpu.compile(g, passes=False).run(feeds)):
        check_parity(a, b, "passes training")


# ---------------------------------------------------------------------------
# ResNet- and MobileNetV2-style blocks through ONNX, against ONNX Runtime
# ---------------------------------------------------------------------------

def _export(module, shape, fold, seed):
    torch = pytest.importorskip("torch", reason="torch is not installed (the `test` extra pins torch==2.13.0)")
    from rlx_cpu.zoo_models import randomize_batch_norms
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = randomize_batch_norms(module(), gen).eval()
    x = torch.randn(*shape, generator=gen)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"], do_constant_folding=fold)
    return buf.getvalue(), x.numpy()


def _blocks():
    pytest.importorskip("torch", reason="torch is not installed (the `test` extra pins torch==2.13.0)")
    from rlx_cpu.zoo_models import BasicBlock, Bottleneck, InvertedResidual
    return {
        # identity shortcut, and a strided one with a 1x1 projection
        "resnet_basic": (lambda: __import__("torch").nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, 2)),
                         (2, 16, 16, 16), {"relu": 4, "add": 2}),
        "resnet_bottleneck": (lambda: Bottleneck(32, 8), (1, 32, 14, 14), {"relu": 3, "add": 1}),
        "mobilenet_v2": (lambda: __import__("torch").nn.Sequential(InvertedResidual(16, 16, 1, 6),
                                                                   InvertedResidual(16, 24, 2, 6)),
                         (2, 16, 16, 16), {"clip": 4, "add": 1}),
    }


CONV_KINDS = ("conv", "conv_1x1", "conv_nchwc_1x1", "conv_nchwc_dw", "conv_nchwc_dense", "conv_nchwc_winograd",
              "conv_nchwc_stem")


@pytest.mark.peer
@pytest.mark.parametrize("fold", (True, False), ids=("bn-folded-export", "bn-kept-export"))
@pytest.mark.parametrize("name", ("resnet_basic", "resnet_bottleneck", "mobilenet_v2"))
def test_cnn_blocks_match_onnxruntime_with_and_without_passes(name, fold):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (part of the `test` extra)")
    module, shape, fused = _blocks()[name]
    model, x = _export(module, shape, fold, seed=sum(map(ord, name)))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    plain = rlx_cpu.from_onnx(model, passes=False)
    plan = rlx_cpu.from_onnx(model)
    n_convs = sum(t.kind in CONV_KINDS for t in plan.thunks)
    log = log_of(plan.pass_summary)
    # every elementwise op of the block is gone: only the convs run, plus
    # the two reorders around a chain the blocked_layout pass moved
    reorders = [t for t in plan.thunks if t.kind == "reorder_nchwc"]
    assert [t.kind for t in plan.thunks if t.kind not in CONV_KINDS + ("reorder_nchwc",)] == []
    assert len(reorders) == log["blocked_layout"].get("reorders", 0)
    if name == "mobilenet_v2" and passes._blocked_layout_enabled():
        assert log["blocked_layout"] == {"convs": 6, "reorders": 2}, plan.pass_summary
    assert n_convs == sum(t.kind in CONV_KINDS for t in plain.thunks)
    assert log["fuse_epilogue"] == fused, plan.pass_summary
    if not fold:
        assert log["fold_batch_norm"] == {"folded": n_convs}, plan.pass_summary
        assert "batch_norm" in [t.kind for t in plain.thunks]
    got, unfused = plan.run({"x": x})[0], plain.run({"x": x})[0]
    check_parity(got, want, f"{name} block vs ort", tol=TOL)
    check_parity(got, unfused, f"{name} block vs unfused", tol=TOL)
