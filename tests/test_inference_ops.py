"""The inference op families (activation, arithmetic, tensor, matmul, reduce)
against the float64 references of tests/reference.py, at 1 and 2 threads,
on sizes below and above the kernels' parallel thresholds."""
import numpy as np
import pytest

import reference as R
import rlx_cpu

THREADS = (1, 2)


def _rng(tag):
    return np.random.default_rng(sum(map(ord, tag)))


def run(build, feeds, threads):
    g = rlx_cpu.Graph()
    nodes = {k: g.input(k, v.shape) for k, v in feeds.items()}
    out = build(g, **nodes)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    res = rlx_cpu.compile(g, num_threads=threads).run({k: v.astype(np.float32) for k, v in feeds.items()})
    return res if isinstance(out, tuple) else res[0]


def assert_close(got, want, rel=1e-6):
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(float(np.abs(want).max(initial=0.0)), 1e-30)
    err = float(np.abs(got.astype(np.float64) - want).max(initial=0.0))
    assert err <= rel * scale, f"max abs err {err:.3e} > {rel:g} * {scale:.3e}"


# -- activations ---------------------------------------------------------------

ACTIVATIONS = [
    ("leaky_relu", dict(alpha=0.1), lambda x: R.leaky_relu(x, 0.1)),
    ("clip", dict(alpha=0.0, beta=6.0), lambda x: R.clip(x, 0, 6)),
    ("clip", dict(alpha=-0.5, beta=0.25), lambda x: R.clip(x, -0.5, 0.25)),
    ("sigmoid", {}, R.sigmoid),
    ("hard_sigmoid", dict(alpha=0.2, beta=0.5), R.hard_sigmoid),
    ("hard_swish", {}, R.hard_swish),
    ("tanh", {}, R.tanh),
    ("silu", {}, R.silu),
]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("size", [(3, 7), (2, 16, 40, 40)])
@pytest.mark.parametrize("op,kw,ref", ACTIVATIONS, ids=[f"{a[0]}{i}" for i, a in enumerate(ACTIVATIONS)])
def test_activation(op, kw, ref, size, threads):
    x = _rng(op).standard_normal(size) * 5
    got = run(lambda g, x: getattr(g, op)(x, **kw), {"x": x}, threads)
    assert_close(got, ref(x.astype(np.float32)), 2e-7)


@pytest.mark.parametrize("op,ref", [("sigmoid", R.sigmoid), ("silu", R.silu)])
def test_sigmoid_and_silu_elementwise_accuracy_and_range(op, ref):
    """rlx_sigmoidf (src/rlx_epilogue.h): each element within 4e-7 relative
    of the float64 value (a few ulp) over the whole float range, never
    subnormal: sigmoid(v) for v < -87 (under 1.65e-38) is 0, so sigmoid(-inf)
    is 0 and silu(-inf) NaN (-inf * 0, as ONNX Runtime's Sigmoid + Mul)."""
    x = np.concatenate([np.linspace(-100, 100, 20001), -np.logspace(-30, 2, 500), np.logspace(-30, 2, 500),
                        [0.0, -0.0, 86.9, 87.1, -86.9, -87.1, 88.7, -88.7, 1e30, -1e30]]).astype(np.float32)
    for threads in THREADS:
        got = run(lambda g, x: getattr(g, op)(x), {"x": x[None]}, threads)[0].astype(np.float64)
        want = ref(x.astype(np.float64))
        big = x >= -87
        rel = np.abs(got[big] - want[big]) / np.maximum(np.abs(want[big]), 1e-300)
        assert rel.max() <= 4e-7, (op, x[big][rel.argmax()], rel.max())
        assert np.all(got[~big] == 0) and np.all(np.abs(want[~big]) <= 2e-36)
        f32 = got.astype(np.float32)
        assert not np.any((f32 != 0) & (np.abs(f32) < np.finfo(np.float32).tiny)), "subnormal result"
    inf = run(lambda g, x: getattr(g, op)(x), {"x": np.array([[np.inf, -np.inf]], np.float32)}, 1)[0]
    if op == "sigmoid":
        assert inf[0] == 1.0 and inf[1] == 0.0
    else:
        assert inf[0] == np.inf and np.isnan(inf[1])


def test_tanh_elementwise_accuracy_and_range():
    """rlx_tanhf (src/rlx_epilogue.h), standalone and as a conv epilogue:
    each element within 1.5e-7 relative of the float64 value (measured
    8.8e-8, 1.23 ulp) from subnormals to beyond the clamp at 10, odd (tanh(-0)
    is -0), +-inf to +-1."""
    x = np.concatenate([np.linspace(-12, 12, 48001), -np.logspace(-44, 1.5, 700), np.logspace(-44, 1.5, 700),
                        [0.0, 0.999999, 1.0, 1.000001, 8.99, 9.0, 9.011, 9.02, 10.0, 20.0, 1e30, -1e30]]).astype(np.float32)
    want = np.tanh(x.astype(np.float64))
    for threads in THREADS:
        got = run(lambda g, x: g.tanh(x), {"x": x[None]}, threads)[0].astype(np.float64)
        rel = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
        assert rel.max() <= 1.5e-7, (x[rel.argmax()], rel.max())
    # the conv epilogue (a 1x1 conv with weight 1 copies x, then tanh), and the sign of zero
    xs = np.array([[-0.0, 0.0, np.inf, -np.inf, 0.5, -3.0, 1e-42, -1e-42]], np.float32)
    for fused in (False, True):
        g = rlx_cpu.Graph()
        h = g.input("x", (1, 1, 1, xs.size))
        if fused:
            h = g.conv2d(h, np.ones((1, 1, 1, 1), np.float32))
        g.output(g.tanh(h))
        got = rlx_cpu.compile(g).run({"x": xs.reshape(1, 1, 1, -1)})[0].ravel()
        if not fused:                   # (the conv's sum 0 + 1 * -0 is +0)
            assert np.signbit(got[0]) and not np.signbit(got[1]), got[:2]
        assert list(got[:2]) == [0.0, 0.0]
        assert list(got[2:4]) == [1.0, -1.0]
        np.testing.assert_allclose(got[4:6], np.tanh(xs[0, 4:6].astype(np.float64)), rtol=1.5e-7)
        assert list(got[6:]) == list(xs[0, 6:])


ACT_BITS_SCRIPT = r"""
import io, sys, numpy as np, rlx_cpu
acts = [("leaky_relu", dict(alpha=0.1)), ("clip", dict(alpha=-0.5, beta=0.25)), ("sigmoid", {}),
        ("hard_sigmoid", dict(alpha=0.2, beta=0.5)), ("hard_swish", {}), ("tanh", {}), ("silu", {})]
x = (np.random.default_rng(5).standard_normal(2 * 16 * 41 * 41 + 5) * 4).astype(np.float32)
x[::97] = np.nan
outs = []
for op, kw in acts:
    for n in (13, x.size):                                  # a tail only, and blocks over two threads
        g = rlx_cpu.Graph()
        g.output(getattr(g, op)(g.input("x", (n,)), **kw))
        outs.append(rlx_cpu.compile(g, num_threads=2).run({"x": x[:n]})[0])
buf = io.BytesIO()
np.save(buf, np.concatenate(outs))
sys.stdout.buffer.write(buf.getvalue())
"""


def test_activations_give_the_same_bits_on_every_simd_level():
    """The standalone activations (rlx_act_span): the portable variant
    (RLX_SIMD=baseline) and the native one give the same bits, tails
    included, and NaN where the input is NaN (a NaN's sign and payload may
    differ between the two)."""
    from conftest import script_array
    base = script_array(ACT_BITS_SCRIPT, RLX_SIMD="baseline")
    here = script_array(ACT_BITS_SCRIPT)
    assert base.dtype == np.float32 and base.size == 7 * (13 + 2 * 16 * 41 * 41 + 5)
    nan = np.isnan(base)
    assert np.array_equal(nan, np.isnan(here)) and 7 * 555 <= nan.sum() <= 7 * 556
    assert np.array_equal(base[~nan].view(np.uint32), here[~nan].view(np.uint32))


def test_activations_keep_nan():
    x = np.array([[np.nan, 1.0, -1.0]])
    for op, kw, _ in ACTIVATIONS:
        got = run(lambda g, x: getattr(g, op)(x, **kw), {"x": x}, 1)
        assert np.isnan(got[0, 0]), op


# -- arithmetic ------------------------------------------------------------------

BROADCASTS = [((2, 3, 4), (2, 3, 4)), ((2, 8, 5, 5), (2, 8, 1, 1)), ((2, 8, 5, 5), (8, 1, 1)),
              ((4, 1, 3), (1, 5, 1)), ((3,), (2, 3)), ((2, 3, 1), ()), ((1,), (4, 64, 33, 33)),
              ((4, 64, 33, 33), (4, 64, 33, 33)),
              # squeeze-excitation's scale: short rows, run in groups of about 4096 floats
              ((8, 336, 2, 2), (8, 336, 1, 1)), ((8, 336, 4, 4), (8, 336, 1, 1)),
              ((3, 1, 5), (2, 7, 3, 1, 1))]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("sa,sb", BROADCASTS)
@pytest.mark.parametrize("op,sym", [("broadcast_add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/")])
def test_binary_broadcast(op, sym, sa, sb, threads):
    rng = _rng(op + str(sa) + str(sb))
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    if op == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    got = run(lambda g, a, b: getattr(g, op)(a, b), {"a": a, "b": b}, threads)
    assert_close(got, R.broadcast_binary(sym, a.astype(np.float32), b.astype(np.float32)), 2e-7)


def test_binary_rejects_shapes_that_do_not_broadcast():
    g = rlx_cpu.Graph()
    with pytest.raises(ValueError, match=r"mul: shapes \[2, 3\] and \[4\] do not broadcast"):
        g.mul(g.input("a", (2, 3)), g.input("b", (4,)))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 4), (2, 5), (4, 32, 20, 20)])
def test_batch_norm(shape, threads):
    rng = _rng("bn" + str(shape))
    x = rng.standard_normal(shape)
    c = shape[1]
    scale, bias, mean = rng.standard_normal(c), rng.standard_normal(c), rng.standard_normal(c)
    var = rng.random(c) + 0.5
    f32 = lambda v: v.astype(np.float32)  # noqa: E731
    got = run(lambda g, x: g.batch_norm(x, f32(scale), f32(bias), f32(mean), f32(var), 1e-3), {"x": x}, threads)
    assert_close(got, R.batch_norm(f32(x), f32(scale), f32(bias), f32(mean), f32(var), 1e-3), 1e-6)


def test_batch_norm_needs_constant_statistics():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 3, 3))
    with pytest.raises(ValueError, match="batch_norm: scale must be a constant"):
        g.batch_norm(x, g.input("s", (2,)), np.zeros(2), np.zeros(2), np.ones(2))


# -- tensor movement ----------------------------------------------------------------

@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape,perm", [((2, 3, 4), (2, 0, 1)), ((2, 2, 6, 5, 5), (0, 2, 1, 3, 4)),
                                        ((4, 64, 16, 16), (0, 2, 3, 1)), ((5, 7), None),
                                        ((8, 2, 24, 8, 8), (0, 2, 1, 3, 4)),      # ShuffleNet: plane copies
                                        ((3, 4, 40, 33), (0, 1, 3, 2)),           # gathered inner axis, too long to merge
                                        ((2, 3, 1, 4, 5), (1, 0, 2, 3, 4))])
def test_transpose(shape, perm, threads):
    x = _rng("t" + str(shape)).standard_normal(shape)
    got = run(lambda g, x: g.transpose(x, perm), {"x": x}, threads)
    assert_close(got, np.transpose(x.astype(np.float32), perm), 0)


def test_gather_merges_trailing_axes():
    """merge_trailing_axes (src/_tensor.pyx) merges trailing output axes while
    the merged one reads a contiguous run (or a gathered one stays at most
    1024 long), and never merges an axis with padding (-1)."""
    from rlx_cpu import _tensor

    def tables(*axes):
        return np.concatenate([np.zeros(1, np.int64)] * (8 - len(axes)) + [np.asarray(a, np.int64) for a in axes])

    def dims(*d):
        return [1] * (8 - len(d)) + list(d)

    # channel shuffle [N, g, c, H, W] -> [N, c, g, H, W] with g=2, c=3, H=W=4: H and W become one plane
    d, t = _tensor.merge_trailing_axes(dims(2, 3, 2, 4, 4), tables(np.arange(2) * 96, np.arange(3) * 16,
                                                                   np.arange(2) * 48, np.arange(4) * 4,
                                                                   np.arange(4)))
    assert d == dims(2, 3, 2, 16)
    assert np.array_equal(t[-16:], np.arange(16)) and np.array_equal(t[-18:-16], [0, 48])
    # a transpose of the last two axes reads no contiguous run: all three axes merge into one gathered
    # inner axis of 3 * 7 * 5 = 105 <= 1024 entries
    d, t = _tensor.merge_trailing_axes(dims(3, 7, 5), tables(np.arange(3) * 35, np.arange(7), np.arange(5) * 7))
    assert d == dims(105) and np.array_equal(t[-105:], (np.arange(3)[:, None, None] * 35 + np.arange(7)[:, None]
                                                          + np.arange(5) * 7).ravel())
    # a padded axis stays as it is
    d, t = _tensor.merge_trailing_axes(dims(2, 6), tables([0, 5], [-1, 0, 1, 2, 3, -1]))
    assert d == dims(2, 6)


SLICES = [((10, 12), [1, 2], [8, -1], [0, 1], [1, 3]), ((10, 12), [-1], [-11], [1], [-2]),
          ((4, 6, 8), [0, 2], [100, 5], [2, 1], [1, 1]), ((4, 64, 32, 32), [16], [48], [1], [1]),
          ((3, 9), [7], [0], [1], [-3])]


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape,starts,ends,axes,steps", SLICES)
def test_slice(shape, starts, ends, axes, steps, threads):
    x = _rng("s" + str(shape)).standard_normal(shape)
    got = run(lambda g, x: g.slice(x, starts, ends, axes, steps), {"x": x}, threads)
    idx = [slice(None)] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(s, e, st)
    assert_close(got, x.astype(np.float32)[tuple(idx)], 0)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("shape,pads", [((1, 2, 4, 5), ((0, 0), (0, 0), (1, 2), (3, 1))),
                                        ((3, 6), ((2, -1), (-2, 3))), ((2, 3, 5), ((0, 0), (1, 0), (0, 2)))])
def test_pad(shape, pads, mode, threads):
    x = _rng("p" + mode + str(shape)).standard_normal(shape)
    got = run(lambda g, x: g.pad(x, pads, mode, 1.5), {"x": x}, threads)
    assert_close(got, R.pad(x.astype(np.float32), pads, mode, 1.5), 0)


@pytest.mark.parametrize("threads", THREADS)
def test_concat_and_gather(threads):
    rng = _rng("cg")
    a, b, c = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((2, 1, 5, 5)), rng.standard_normal((2, 4, 5, 5))
    got = run(lambda g, a, b, c: g.concat([a, b, c], axis=1), {"a": a, "b": b, "c": c}, threads)
    assert_close(got, np.concatenate([a, b, c], 1).astype(np.float32), 0)
    idx = np.array([[4, 0], [-1, 2]])
    got = run(lambda g, a: g.gather(a, idx, axis=2), {"a": a}, threads)
    assert_close(got, np.take(a.astype(np.float32), idx % 5, axis=2), 0)


@pytest.mark.parametrize("threads", THREADS)
def test_concat_of_one_image_splits_its_rows(threads):
    # one image: each input is one row of the copy, cut into pieces so that
    # every thread copies a share; widths that leave a short last piece or
    # an empty one, and an input below the piece size
    rng = _rng("c1")
    a, b, c = (rng.standard_normal((1, ch, 37, 41)) for ch in (24, 7, 1))
    got = run(lambda g, a, b, c: g.concat([a, b, c], axis=1), {"a": a, "b": b, "c": c}, threads)
    assert_close(got, np.concatenate([a, b, c], 1).astype(np.float32), 0)


def _copies(plan):
    return [t.kind for t in plan.thunks].count("copy")


def _bits_equal(a, b):
    assert a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("debug", [False, True])
def test_concat_places_its_inputs_in_its_output(threads, debug, monkeypatch):
    # DenseNet's chain on one image: each concat appends a new value to the
    # previous one.  Every input is an intermediate at a 64-byte aligned
    # offset (16 x 6 x 10 floats = 3840 bytes), so no copy runs: the first
    # concat lives inside the second, and the relu reads it there.  The same
    # bits as the plan that copies; debug plans check every launch's writes.
    rng = _rng("place")
    feeds = {f"x{i}": rng.standard_normal((1, 16, 6, 10)).astype(np.float32) for i in range(3)}

    def build():
        g = rlx_cpu.Graph()
        x0, x1, x2 = (g.input(k, v.shape) for k, v in feeds.items())
        c1 = g.concat([g.tanh(x0), g.sigmoid(x1)], axis=1)
        e = g.relu(g.add(c1, c1))
        g.output(e, g.concat([c1, g.tanh(x2)], axis=1))
        return g

    placed = rlx_cpu.compile(build(), num_threads=threads, debug=debug)
    assert _copies(placed) == 0
    monkeypatch.setattr(rlx_cpu.compiler.CompileContext, "can_place_in", lambda self, node_id: False)
    copied = rlx_cpu.compile(build(), num_threads=threads, debug=debug)
    assert _copies(copied) == 4
    for got, want in zip(placed.run(feeds), copied.run(feeds)):
        _bits_equal(got, want)
    t0, s1, t2 = np.tanh(feeds["x0"]), 1 / (1 + np.exp(-feeds["x1"])), np.tanh(feeds["x2"])
    assert_close(placed.run(feeds)[1], np.concatenate([t0, s1, t2], 1), 1e-6)


@pytest.mark.parametrize("case,copies", [("graph input", 1), ("two images", 2), ("unaligned", 1),
                                         ("twice", 2), ("graph output", 1)])
def test_concat_copies_what_it_cannot_place(case, copies):
    # an input of the graph, two images (each input is two runs of the
    # output), an input at a byte offset that is not a multiple of 64, an
    # input given twice, an input that is also an output: copied (the
    # others placed), and the values right
    rng = _rng(case)
    shape = (2 if case == "two images" else 1, 3 if case == "unaligned" else 16, 5, 4)
    feeds = {"x0": rng.standard_normal(shape).astype(np.float32), "x1": rng.standard_normal(shape).astype(np.float32)}
    g = rlx_cpu.Graph()
    x0, x1 = g.input("x0", shape), g.input("x1", shape)
    a, b = g.tanh(x0), g.tanh(x1)
    ins = {"graph input": [x0, b], "twice": [a, a]}.get(case, [a, b])
    outs = [g.concat(ins, axis=1)] + ([a] if case == "graph output" else [])
    g.output(*outs)
    plan = rlx_cpu.compile(g, num_threads=2)
    assert _copies(plan) == copies
    t0, t1 = np.tanh(feeds["x0"]), np.tanh(feeds["x1"])
    want = {"graph input": [feeds["x0"], t1], "twice": [t0, t0]}.get(case, [t0, t1])
    got = plan.run(feeds)
    assert_close(got[0], np.concatenate(want, 1), 1e-6)
    if case == "graph output":
        assert_close(got[1], t0, 1e-6)


def test_in_place_op_never_overwrites_a_placed_input():
    # a is placed inside the concat's output; the relu after the concat is
    # its last reader, so the in_place pass marks it to write into a's
    # buffer.  That would overwrite part of the concat: the compiler gives
    # the relu a buffer of its own instead
    rng = _rng("inplace")
    feeds = {"x0": rng.standard_normal((1, 16, 5, 4)).astype(np.float32),
             "x1": rng.standard_normal((1, 16, 5, 4)).astype(np.float32)}
    g = rlx_cpu.Graph()
    x0, x1 = g.input("x0", (1, 16, 5, 4)), g.input("x1", (1, 16, 5, 4))
    a = g.tanh(x0)
    c = g.concat([a, g.tanh(x1)], axis=1)
    g.output(c, g.add(g.relu(a), x1))
    plan = rlx_cpu.compile(g, num_threads=1)
    assert "in_place: 1 in place" in plan.pass_summary and _copies(plan) == 0
    relu = next(t for t in plan.thunks if t.kind == "relu")
    assert relu.out != relu.a                   # not in place after all
    t0, t1 = np.tanh(feeds["x0"]), np.tanh(feeds["x1"])
    got = plan.run(feeds)
    assert (t0 < 0).any()
    assert_close(got[0], np.concatenate([t0, t1], 1), 1e-6)
    assert_close(got[1], np.maximum(t0, 0) + feeds["x1"], 1e-6)


@pytest.mark.parametrize("rows,width,threads", [(1, 4096 * 9 + 5, 2), (1, 4096 * 3 - 1, 2), (3, 40000, 2),
                                                (9, 40000, 2), (1, 50000, 1), (2, 4095, 2)])
def test_block_copy_pieces(rows, width, threads):
    from rlx_cpu import _tensor
    src_row, src_off, dst_row, dst_off = width + 3, 2, width + 11, 5
    src = np.arange(rows * src_row, dtype=np.float32)
    dst = np.full(rows * dst_row, -1.0, np.float32)
    _tensor.BlockCopyLaunch(src, dst, rows, width, src_row, src_off, dst_row, dst_off, threads).execute(threads)
    want = np.full_like(dst, -1.0)
    for r in range(rows):
        want[r * dst_row + dst_off:r * dst_row + dst_off + width] = src[r * src_row + src_off:
                                                                        r * src_row + src_off + width]
    np.testing.assert_array_equal(dst, want)


# -- products and reductions -----------------------------------------------------------

@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("ta,tb,c_shape", [(False, False, (7,)), (True, False, (5, 1)), (False, True, (5, 7)),
                                           (True, True, ()), (False, True, None)])
def test_gemm(ta, tb, c_shape, threads):
    rng = _rng(f"gemm{ta}{tb}{c_shape}")
    m, n, k = 5, 7, 33
    a = rng.standard_normal((k, m) if ta else (m, k))
    b = rng.standard_normal((n, k) if tb else (k, n))
    c = None if c_shape is None else rng.standard_normal(c_shape)
    feeds = {"a": a, "b": b} if c is None else {"a": a, "b": b, "c": c}
    got = run(lambda g, a, b, c=None: g.gemm(a, b, c, 0.5, 2.0, ta, tb), feeds, threads)
    f = lambda v: None if v is None else v.astype(np.float32)  # noqa: E731
    want = R.gemm(f(a), f(b), f(c), 0.5, 2.0, ta, tb)
    mag = R.gemm(np.abs(f(a)), np.abs(f(b)), None if c is None else np.abs(f(c)), 0.5, 2.0, ta, tb)
    assert np.abs(got - want).max() <= 1e-5 * mag.max()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("sa,sb", [((5, 8), (8, 3)), ((2, 3, 5, 8), (8, 4)), ((3, 5, 8), (3, 8, 4)),
                                   ((2, 1, 5, 8), (3, 8, 4)), ((8,), (8, 4)), ((5, 8), (8,)), ((64, 96), (96, 80))])
def test_matmul(sa, sb, threads):
    rng = _rng(f"mm{sa}{sb}")
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    got = run(lambda g, a, b: g.matmul(a, b), {"a": a, "b": b}, threads)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    mag = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * mag.max()


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape,axes,keep", [((2, 8, 5, 5), (2, 3), True), ((2, 8, 5, 5), (1,), False),
                                             ((2, 3, 4, 5), (0, 2), True), ((3, 4), None, False),
                                             ((4, 64, 20, 20), (1, 3), False)])
def test_reduce_mean(shape, axes, keep, threads):
    x = _rng("rm" + str(shape) + str(axes)).standard_normal(shape).astype(np.float32)
    got = run(lambda g, x: g.reduce_mean(x, axes, keep), {"x": x}, threads)
    assert_close(got, np.mean(x.astype(np.float64), axis=None if axes is None else tuple(axes), keepdims=keep), 1e-6)


@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("shape,axis", [((3, 10), -1), ((2, 5, 3, 3), 1), ((4, 1000), 1), ((2, 3, 4), 0)])
def test_softmax(shape, axis, threads):
    x = (_rng("sm" + str(shape)).standard_normal(shape) * 20).astype(np.float32)
    got = run(lambda g, x: g.softmax(x, axis), {"x": x}, threads)
    assert_close(got, R.softmax(x, axis), 1e-6)


# -- linear resize ------------------------------------------------------------------

@pytest.mark.parametrize("threads", THREADS)
@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
@pytest.mark.parametrize("shape,out", [((1, 2, 4, 5), (8, 10)), ((2, 3, 9, 7), (4, 3)), ((1, 1, 6), (13,)),
                                       ((2, 16, 24, 24), (48, 48))])
def test_resize_linear_onnx(shape, out, mode, threads):
    from rlx_cpu.ops.resize import resize_plan
    x = _rng("rl" + mode + str(shape)).standard_normal(shape).astype(np.float32)
    sizes = shape[:2] + out
    _, tables = resize_plan(shape, sizes=np.array(sizes), coordinate_mode=mode, linear=True)
    got = run(lambda g, x: g.resize_linear(x, [None if t is None else t[:3] for t in tables]), {"x": x}, threads)
    assert_close(got, R.resize_linear(x, out, mode), 1e-6)
