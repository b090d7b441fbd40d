"""Property-based fuzz targets, run one per process by tests/test_fuzz.py.

    PYTHONPATH=. python tests/fuzz_targets.py TARGET EXAMPLES SEED

runs one hypothesis loop of at most EXAMPLES examples and prints
``examples=<n>`` on success; a failing property exits non-zero with
hypothesis's falsifying example, and a crash kills only this process.

Valid draws must match tests/reference.py's float64 reference (tolerance
1e-4 relative to the result's magnitude for the GEMM/Winograd conv paths,
1e-6 for pooling sums, exact for gathers and max) -- onnx_graph's ONNX
models match ONNX Runtime instead, within 1e-4; invalid draws must raise
the documented exception types (ValueError, TypeError, and for sizes past
Py_ssize_t MemoryError).  Validity is decided here by an independent
predicate (output size >= 1 on every axis, algorithm eligibility as
documented in README), not by asking rlx_cpu.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # reference.py

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, given, settings, seed as hseed, strategies as st  # noqa: E402

import rlx_cpu  # noqa: E402
import reference as ref  # noqa: E402
from rlx_cpu import threads  # noqa: E402

DOCUMENTED = (ValueError, TypeError)
COUNT = [0]
CONV_TOL = 1e-4
SUM_TOL = 1e-6


def _rng(data):
    return np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="data seed"))


def _expect_error(fn, what):
    try:
        fn()
    except DOCUMENTED:
        return
    raise AssertionError(f"{what}: expected ValueError/TypeError, it ran")


def _pads(data, nsp, hi=2):
    pb = tuple(data.draw(st.integers(0, hi), label="pad begin") for _ in range(nsp))
    pe = tuple(data.draw(st.integers(0, hi), label="pad end") for _ in range(nsp))
    return pb, pe


def _axes(data, nsp, lo, hi, label):
    return tuple(data.draw(st.integers(lo, hi), label=label) for _ in range(nsp))


def _out(size, k, s, pb, pe, d):
    span = size + pb + pe - d * (k - 1) - 1
    return span // s + 1 if span >= 0 else 0


# ---------------------------------------------------------------------------
# conv1d / conv2d / conv3d, every algorithm
# ---------------------------------------------------------------------------

def conv(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    groups = data.draw(st.integers(1, 3), label="groups")
    cpg, cog = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 2), label="N")
    size = _axes(data, nsp, 1, 9 if nsp < 3 else 6, "size")
    k = _axes(data, nsp, 1, 4 if nsp < 3 else 3, "kernel")
    s = _axes(data, nsp, 1, 3, "stride")
    d = _axes(data, nsp, 1, 3, "dilation")
    pb, pe = _pads(data, nsp)
    pad_form = data.draw(st.sampled_from(["pairs", "same", "valid"]), label="padding form")
    if pad_form == "same":
        if any(v != 1 for v in s):
            s = (1,) * nsp
        tot = [di * (ki - 1) for ki, di in zip(k, d)]
        pb, pe = tuple(t // 2 for t in tot), tuple(t - t // 2 for t in tot)
        padding = "same"
    elif pad_form == "valid":
        pb = pe = (0,) * nsp
        padding = "valid"
    else:
        padding = tuple(zip(pb, pe))
    algos = ["auto", "reference", "im2col"] + (["direct", "winograd", "winograd_f4"] if nsp < 3 else [])
    algo = data.draw(st.sampled_from(algos), label="algorithm")
    bias = data.draw(st.booleans(), label="bias")
    rng = _rng(data)
    x = rng.standard_normal((n, cpg * groups, *size)).astype(np.float32)
    w = rng.standard_normal((cog * groups, cpg, *k)).astype(np.float32)
    b = rng.standard_normal(cog * groups).astype(np.float32) if bias else None
    fn = getattr(rlx_cpu, f"conv{nsp}d")
    call = lambda: fn(x, w, b, stride=s, padding=padding, dilation=d, groups=groups, conv_algorithm=algo)  # noqa
    outs = [_out(size[i], k[i], s[i], pb[i], pe[i], d[i]) for i in range(nsp)]
    k2 = (1,) * (2 - nsp) + k if nsp < 3 else k
    eligible = {
        "direct": (all(v == 1 for v in s) and all(v == 1 for v in d))
        or (nsp == 2 and cpg == cog == 1 and k2 in ((3, 3), (5, 5)) and s == (2, 2) and d == (1, 1)),
        "winograd": k2 == (3, 3) and all(v == 1 for v in s) and all(v == 1 for v in d) and groups == 1,
    }
    eligible["winograd_f4"] = eligible["winograd"]
    eligible = eligible.get(algo, True)
    if min(outs) < 1 or not eligible:
        _expect_error(call, f"conv{nsp}d outs={outs} algo={algo}")
        return
    got = call()
    want = ref.conv_nd(x.astype(np.float64), w.astype(np.float64), b, s, pb, pe, d, groups)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert ref.rel_error(got, want) < CONV_TOL, ref.rel_error(got, want)


# ---------------------------------------------------------------------------
# conv_transpose1d/2d/3d
# ---------------------------------------------------------------------------

def conv_transpose(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    groups = data.draw(st.integers(1, 3), label="groups")
    cig, cog = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 2), label="N")
    size = _axes(data, nsp, 1, 6 if nsp < 3 else 4, "size")
    k = _axes(data, nsp, 1, 4 if nsp < 3 else 3, "kernel")
    s = _axes(data, nsp, 1, 3, "stride")
    d = _axes(data, nsp, 1, 2, "dilation")
    pb, pe = _pads(data, nsp, 3)
    op = _axes(data, nsp, 0, 2, "output_padding")
    algo = data.draw(st.sampled_from(["auto", "reference", "im2col"]), label="algorithm")
    rng = _rng(data)
    x = rng.standard_normal((n, cig * groups, *size)).astype(np.float32)
    w = rng.standard_normal((cig * groups, cog, *k)).astype(np.float32)
    b = rng.standard_normal(cog * groups).astype(np.float32) if data.draw(st.booleans()) else None
    fn = getattr(rlx_cpu, f"conv_transpose{nsp}d")
    call = lambda: fn(x, w, b, stride=s, padding=tuple(zip(pb, pe)), output_padding=op, groups=groups,  # noqa
                      dilation=d, conv_algorithm=algo)
    outs = [(size[i] - 1) * s[i] - pb[i] - pe[i] + d[i] * (k[i] - 1) + op[i] + 1 for i in range(nsp)]
    if min(outs) < 1 or any(op[i] >= max(s[i], d[i]) for i in range(nsp)):
        _expect_error(call, f"conv_transpose{nsp}d outs={outs} output_padding={op}")
        return
    got = call()
    want = ref.conv_transpose_nd(x.astype(np.float64), w.astype(np.float64), b, s, pb, pe, d, groups, op)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert ref.rel_error(got, want) < CONV_TOL


# ---------------------------------------------------------------------------
# conv backward (input and weight gradients), every rank
# ---------------------------------------------------------------------------

def conv_backward(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    groups = data.draw(st.integers(1, 2), label="groups")
    cpg, cog = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    n = data.draw(st.integers(1, 2), label="N")
    size = _axes(data, nsp, 1, 8 if nsp < 3 else 5, "size")
    k = _axes(data, nsp, 1, 3, "kernel")
    s = _axes(data, nsp, 1, 3, "stride")
    d = _axes(data, nsp, 1, 2, "dilation")
    pb, pe = _pads(data, nsp)
    outs = [_out(size[i], k[i], s[i], pb[i], pe[i], d[i]) for i in range(nsp)]
    rng = _rng(data)
    xs = (n, cpg * groups, *size)
    ws = (cog * groups, cpg, *k)
    which = data.draw(st.sampled_from(["input", "weight"]), label="gradient")
    if min(outs) < 1:
        dy = rng.standard_normal((n, cog * groups, *[max(o, 1) for o in outs])).astype(np.float32)
        if which == "input":
            call = lambda: getattr(rlx_cpu, f"conv{nsp}d_backward_input")(  # noqa
                dy, rng.standard_normal(ws).astype(np.float32), xs, s, tuple(zip(pb, pe)), d, groups)
        else:
            call = lambda: getattr(rlx_cpu, f"conv{nsp}d_backward_weight")(  # noqa
                rng.standard_normal(xs).astype(np.float32), dy, ws, s, tuple(zip(pb, pe)), d, groups)
        _expect_error(call, f"conv{nsp}d_backward_{which} outs={outs}")
        return
    dy = rng.standard_normal((n, cog * groups, *outs)).astype(np.float32)
    if which == "input":
        w = rng.standard_normal(ws).astype(np.float32)
        got = getattr(rlx_cpu, f"conv{nsp}d_backward_input")(dy, w, xs, s, tuple(zip(pb, pe)), d, groups)
        want = ref.conv_nd_backward_input(dy.astype(np.float64), w.astype(np.float64), xs, s, pb, pe, d, groups)
    else:
        x = rng.standard_normal(xs).astype(np.float32)
        got = getattr(rlx_cpu, f"conv{nsp}d_backward_weight")(x, dy, ws, s, tuple(zip(pb, pe)), d, groups)
        want = ref.conv_nd_backward_weight(x.astype(np.float64), dy.astype(np.float64), ws, s, pb, pe, d, groups)
    assert got.shape == want.shape
    assert ref.rel_error(got, want) < CONV_TOL


# ---------------------------------------------------------------------------
# max / avg pooling: ceil_mode, padding, dilation
# ---------------------------------------------------------------------------

def _padding_only_window(size, out, k, s, pb, d):
    return any(not any(0 <= o * s - pb + j * d < size for j in range(k)) for o in range(out))


def pool(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    kind = data.draw(st.sampled_from(["max", "avg"]), label="kind")
    size = _axes(data, nsp, 1, 8 if nsp < 3 else 5, "size")
    k = _axes(data, nsp, 1, 4, "kernel")
    s = _axes(data, nsp, 1, 3, "stride")
    d = _axes(data, nsp, 1, 2, "dilation")
    pb, pe = _pads(data, nsp)
    ceil = data.draw(st.booleans(), label="ceil_mode")
    include_pad = data.draw(st.booleans(), label="count_include_pad")
    x = _rng(data).standard_normal((1, 2, *size)).astype(np.float32)
    outs = [ref.pool_out_size(size[i], k[i], s[i], pb[i], pe[i], d[i], ceil) for i in range(nsp)]
    g = rlx_cpu.Graph()
    xi = g.input("x", x.shape)
    pads = pb + pe

    def build():
        if kind == "max":
            return g.max_pool(xi, k, s, pads, d, ceil)
        return g.avg_pool(xi, k, s, pads, ceil, include_pad, dilation=d)

    padding_only = min(outs) >= 1 and any(
        _padding_only_window(size[i], outs[i], k[i], s[i], pb[i], d[i]) for i in range(nsp))
    if min(outs) < 1:
        _expect_error(build, f"{kind}_pool outs={outs}")
        return
    try:
        y = build()
    except DOCUMENTED as exc:
        # A window made only of padding has no maximum (and, without the
        # padding in the count, no divisor): documented as a ValueError.
        assert padding_only, f"valid {kind} pool raised {exc!r}"
        return
    g.output(y)
    got = rlx_cpu.compile(g).run({"x": x})[0]
    if kind == "max":
        want, _ = ref.max_pool_nd(x, k, s, pb, pe, d, ceil)
        np.testing.assert_array_equal(got, want.astype(np.float32))
    else:
        want = ref.avg_pool_nd(x, k, s, pb, pe, d, ceil, include_pad)
        assert got.shape == want.shape
        assert ref.rel_error(got, want) <= SUM_TOL


# ---------------------------------------------------------------------------
# im2col / col2im (rows layout)
# ---------------------------------------------------------------------------

def patches(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    size = _axes(data, nsp, 1, 7 if nsp < 3 else 4, "size")
    k = _axes(data, nsp, 1, 3, "kernel")
    s = _axes(data, nsp, 1, 3, "stride")
    d = _axes(data, nsp, 1, 2, "dilation")
    pb, pe = _pads(data, nsp)
    rng = _rng(data)
    x = rng.standard_normal((data.draw(st.integers(1, 2)), 2, *size)).astype(np.float32)
    outs = [_out(size[i], k[i], s[i], pb[i], pe[i], d[i]) for i in range(nsp)]
    g = rlx_cpu.Graph()
    xi = g.input("x", x.shape)
    if min(outs) < 1:
        _expect_error(lambda: g.im2col(xi, k, s, pb + pe, d), f"im2col outs={outs}")
        return
    g.output(g.im2col(xi, k, s, pb + pe, d))
    cols = rlx_cpu.compile(g).run({"x": x})[0]
    np.testing.assert_array_equal(cols, ref.im2col_rows(x, k, s, pb, pe, d).astype(np.float32))
    c = rng.standard_normal(cols.shape).astype(np.float32)
    h = rlx_cpu.Graph()
    ci = h.input("c", c.shape)
    h.output(h.col2im(ci, size, k, s, pb + pe, d))
    back = rlx_cpu.compile(h).run({"c": c})[0]
    assert ref.rel_error(back, ref.col2im_rows(c, size, k, s, pb, pe, d)) <= SUM_TOL


# ---------------------------------------------------------------------------
# resize: interpolate nearest / nearest-exact, by size or scale factor
# ---------------------------------------------------------------------------

def resize(data):
    nsp = data.draw(st.sampled_from([1, 2, 3]), label="rank")
    size = _axes(data, nsp, 1, 7, "size")
    mode = data.draw(st.sampled_from(["nearest", "nearest-exact"]), label="mode")
    x = _rng(data).standard_normal((1, 2, *size)).astype(np.float32)
    if data.draw(st.booleans(), label="by size"):
        out = _axes(data, nsp, 1, 12, "out size")
        y = rlx_cpu.interpolate(x, out, None, mode)
        factors = [None] * nsp
    else:
        factors = [data.draw(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0]), label="scale")
                   for _ in range(nsp)]
        out = [int(np.floor(size[i] * factors[i])) for i in range(nsp)]
        if min(out) < 1:
            _expect_error(lambda: rlx_cpu.interpolate(x, None, tuple(factors), mode), f"interpolate out={out}")
            return
        y = rlx_cpu.interpolate(x, None, tuple(factors), mode)
    tables = [ref.torch_nearest_source(size[i], out[i], factors[i], mode == "nearest-exact", nsp == 2)
              for i in range(nsp)]
    np.testing.assert_array_equal(y, ref.nearest_gather(x, tables).astype(np.float32))


# ---------------------------------------------------------------------------
# Invalid attribute values of every kind: documented exceptions only
# ---------------------------------------------------------------------------

# Either small (cheap if accepted) or far beyond any index type; mid-range
# values would be valid but allocate gigabytes.
HOSTILE_INT = st.one_of(st.integers(-3, 4), st.integers(2 ** 31 - 1, 2 ** 31 + 1),
                        st.sampled_from([2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64, 2 ** 70, -2 ** 63]))
HOSTILE = st.one_of(
    HOSTILE_INT,
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1", "same", "valid", "SAME_UPPER", "", None, True, False, b"2", object()]),
    st.lists(HOSTILE_INT, max_size=5).map(tuple),
    st.lists(HOSTILE_INT, max_size=4).map(lambda v: np.array(v, dtype=object if any(abs(i) >= 2 ** 63 for i in v)
                                                                 else np.int64)),
    st.lists(st.floats(-3, 3), min_size=1, max_size=3).map(np.array),
    st.lists(st.tuples(HOSTILE_INT, HOSTILE_INT), max_size=3).map(tuple),
)

INVALID_OPS = {
    "conv2d": (lambda x, a: rlx_cpu.conv2d(x, np.ones((2, 2, 2, 2), np.float32), None, *a),
               ("stride", "padding", "dilation", "groups")),
    "conv_transpose2d": (lambda x, a: rlx_cpu.conv_transpose2d(x, np.ones((2, 1, 2, 2), np.float32), None, *a),
                         ("stride", "padding", "output_padding", "groups", "dilation")),
    "conv3d": (lambda x, a: rlx_cpu.conv3d(x[..., None], np.ones((2, 2, 2, 2, 1), np.float32), None, *a),
               ("stride", "padding", "dilation", "groups")),
    "max_pool2d": (lambda x, a: rlx_cpu.max_pool2d(x, *a), ("kernel_size", "stride", "padding", "dilation",
                                                           "ceil_mode", "return_indices")),
    "avg_pool2d": (lambda x, a: rlx_cpu.avg_pool2d(x, *a), ("kernel_size", "stride", "padding", "ceil_mode",
                                                           "count_include_pad", "divisor_override")),
    "im2col": (lambda x, a: rlx_cpu.im2col(x, *a), ("kernel_size", "stride", "padding", "dilation")),
    "interpolate": (lambda x, a: rlx_cpu.interpolate(x, *a), ("size", "scale_factor", "mode")),
    "conv2d_backward_input": (lambda x, a: rlx_cpu.conv2d_backward_input(
        np.ones((1, 2, 3, 3), np.float32), np.ones((2, 2, 2, 2), np.float32), *a),
        ("input_shape", "stride", "padding", "dilation", "groups")),
}


def invalid_attrs(data):
    op = data.draw(st.sampled_from(sorted(INVALID_OPS)), label="op")
    fn, names = INVALID_OPS[op]
    n_args = data.draw(st.integers(1, len(names)), label="number of attributes")
    args = [data.draw(HOSTILE, label=names[i]) for i in range(n_args)]
    x = np.ones((1, 2, 4, 4), np.float32)
    try:
        y = fn(x, args)
    except (ValueError, TypeError, MemoryError, NotImplementedError):
        return
    for out in (y if isinstance(y, tuple) else (y,)):
        assert isinstance(out, np.ndarray) and out.size < 10 ** 7, (op, args)


# ---------------------------------------------------------------------------
# Size overflow (compile only, never run)
# ---------------------------------------------------------------------------

BIG = st.one_of(st.integers(1, 8), st.sampled_from([2 ** 15, 2 ** 16, 2 ** 20, 2 ** 31 - 1, 2 ** 31, 2 ** 32,
                                                    2 ** 40, 2 ** 62, 2 ** 63, 2 ** 64]))


def size_overflow(data):
    shape = tuple(data.draw(st.lists(BIG, min_size=3, max_size=5), label="input shape"))
    op = data.draw(st.sampled_from(["identity", "max_pool", "conv_transpose", "im2col", "interpolate"]), label="op")
    stride = data.draw(BIG, label="stride")
    g = rlx_cpu.Graph()
    try:
        x = g.input("x", shape)
        nsp = len(shape) - 2
        if op == "identity":
            y = x
        elif op == "max_pool":
            y = g.max_pool(x, 1, stride)
        elif op == "conv_transpose":
            w = np.ones((shape[1], 1) + (1,) * nsp, np.float32) if shape[1] <= 8 else None
            if w is None:
                return
            y = getattr(g, f"conv_transpose{nsp}d")(x, w, stride=stride)
        elif op == "im2col":
            y = g.im2col(x, 1, stride)
        else:
            y = g.interpolate(x, scale_factor=float(stride))
        g.output(y)
        plan = rlx_cpu.compile(g, num_threads=1)
    except (ValueError, MemoryError):
        return
    # It compiled: every size is exact and addressable (the run is not tried).
    # Inputs and outputs are bound per run (zero-copy segments), so their
    # exact sizes are on their slices; the arena holds the rest.
    need = 4 * int(np.prod([int(v) for v in shape], dtype=object))
    assert plan.input_slices["x"].nbytes == need, (plan.input_slices["x"], need)
    assert plan.arena_nbytes <= sys.maxsize
    for out_shape, dtype, sl in zip(plan.output_shapes, plan.output_dtypes, plan.output_slices):
        assert np.dtype(dtype).itemsize * int(np.prod([int(v) for v in out_shape], dtype=object)) == sl.nbytes


# ---------------------------------------------------------------------------
# Thread counts
# ---------------------------------------------------------------------------

THREADS = st.one_of(st.integers(-2, 80), st.sampled_from([threads.max_num_threads(), threads.max_num_threads() + 1,
                                                          100000, 2 ** 31, 2 ** 63, 2 ** 70]),
                    st.sampled_from([1.0, "2", None, True]))


def thread_counts(data):
    n = data.draw(THREADS, label="threads")
    where = data.draw(st.sampled_from(["compile", "set_num_threads", "RLX_NUM_THREADS"]), label="where")
    valid = n is None or (isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= threads.max_num_threads())
    if where == "RLX_NUM_THREADS" and n is None:
        return
    g = rlx_cpu.Graph()
    g.output(g.max_pool2d(g.input("x", (1, 2, 6, 6)), 2))
    saved = os.environ.get("RLX_NUM_THREADS")
    try:
        if where == "compile":
            make = lambda: rlx_cpu.compile(g, num_threads=n)  # noqa
        elif where == "set_num_threads":
            make = lambda: (rlx_cpu.set_num_threads(n), rlx_cpu.compile(g))[1]  # noqa
        else:
            os.environ["RLX_NUM_THREADS"] = str(n)
            valid = valid or (n == "2")
            make = lambda: rlx_cpu.compile(g)  # noqa
        if not valid:
            _expect_error(make, f"{where} threads={n!r}")
            return
        plan = make()
        x = np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)
        np.testing.assert_array_equal(plan.run({"x": x})[0], ref.max_pool_nd(x, 2)[0].astype(np.float32))
    finally:
        rlx_cpu.set_num_threads(None)
        if saved is None:
            os.environ.pop("RLX_NUM_THREADS", None)
        else:
            os.environ["RLX_NUM_THREADS"] = saved


# ---------------------------------------------------------------------------
# compiled CNN graphs: chains of 2-D convs (dense, grouped, depthwise, 1x1,
# strided, dilated, padded), pools, fused activations and residual adds, so
# that the compile passes put them on the blocked layout and its kernels
# (stem, 1x1, dense, depthwise, blocked pools, fused epilogues) at 1-3 threads
# ---------------------------------------------------------------------------

_ACTS = {None: lambda v: v, "relu": ref.relu, "clip6": lambda v: ref.clip(v, 0.0, 6.0),
         "hard_swish": ref.hard_swish}


def _act(g, kind, v):
    if kind == "relu":
        return g.relu(v)
    if kind == "clip6":
        return g.clip(v, 0.0, 6.0)
    if kind == "hard_swish":
        return g.hard_swish(v)
    return v


def cnn_graph(data):
    nsp = data.draw(st.sampled_from([1, 2, 2, 2, 3]), label="rank")
    n = data.draw(st.integers(1, 2), label="N")
    c = data.draw(st.sampled_from([3, 8, 16, 32]), label="input channels")
    size = list(_axes(data, nsp, 4, 24 if nsp < 3 else 9, "size"))
    if nsp == 1:
        size = [4 * size[0]]
    nthreads = data.draw(st.integers(1, 3), label="threads")
    rng = _rng(data)
    x = rng.standard_normal((n, c, *size)).astype(np.float32)
    g = rlx_cpu.Graph()
    cur = g.input("x", x.shape)
    want = x.astype(np.float64)
    conv_fn, convt_fn = getattr(g, f"conv{nsp}d"), getattr(g, f"conv_transpose{nsp}d")
    for li in range(data.draw(st.integers(2, 5), label="layers")):
        kind = data.draw(st.sampled_from(["conv", "conv", "depthwise", "pool", "transposed"]), label=f"layer {li}")
        if kind == "depthwise" and nsp != 2:
            kind = "conv"
        if kind == "pool":
            k = data.draw(st.integers(2, 3), label="pool kernel")
            s = data.draw(st.integers(1, 2), label="pool stride")
            pb = tuple(data.draw(st.integers(0, k // 2), label="pool pad") for _ in range(nsp))
            pe = tuple(data.draw(st.integers(0, k // 2), label="pool pad") for _ in range(nsp))
            outs = [ref.pool_out_size(sz, k, s, pb[i], pe[i], 1, False) for i, sz in enumerate(size)]
            if min(outs) < 1:
                continue
            if data.draw(st.booleans(), label="max pool"):
                cur = g.max_pool(cur, (k,) * nsp, (s,) * nsp, pb + pe)
                want = ref.max_pool_nd(want, (k,) * nsp, (s,) * nsp, pb, pe)[0]
            else:
                inc = data.draw(st.booleans(), label="count_include_pad")
                cur = g.avg_pool(cur, (k,) * nsp, (s,) * nsp, pb + pe, count_include_pad=inc)
                want = ref.avg_pool_nd(want, (k,) * nsp, (s,) * nsp, pb, pe, 1, False, inc)
            size = outs
            continue
        transposed = kind == "transposed"
        k = data.draw(st.sampled_from([1, 3, 5] if kind == "conv" else [2, 3, 4] if transposed else [3, 5]),
                      label="kernel")
        s = data.draw(st.integers(1, 2), label="stride")
        d = data.draw(st.sampled_from([1, 1, 2]), label="dilation") if kind != "depthwise" and k > 1 else 1
        if kind == "depthwise":
            co, groups = c, c
        else:
            co = data.draw(st.sampled_from([8, 16, 24, 32, 64]), label="output channels")
            groups = data.draw(st.sampled_from([q for q in (1, 2, 4, 8) if c % q == 0 and co % q == 0]),
                               label="groups")
        reach = d * (k - 1)
        if data.draw(st.booleans(), label="same padding"):
            pb = pe = (reach // 2,) * nsp
        else:
            pb = tuple(data.draw(st.integers(0, reach), label="pad begin") for _ in range(nsp))
            pe = tuple(data.draw(st.integers(0, reach), label="pad end") for _ in range(nsp))
        b = rng.standard_normal(co).astype(np.float32) if data.draw(st.booleans(), label="bias") else None
        act = data.draw(st.sampled_from(list(_ACTS)), label="activation")
        if transposed:
            op = data.draw(st.integers(0, max(s, d) - 1), label="output_padding")
            outs = [(sz - 1) * s - pb[i] - pe[i] + reach + op + 1 for i, sz in enumerate(size)]
            if min(outs) < 1 or max(outs) > 64:
                continue
            wt = (rng.standard_normal((c, co // groups, *(k,) * nsp)) / np.sqrt(c // groups * k ** nsp)).astype(
                np.float32)
            y = convt_fn(cur, wt, b, stride=s, padding=tuple(zip(pb, pe)), output_padding=op, groups=groups,
                         dilation=d)
            ywant = ref.conv_transpose_nd(want, wt.astype(np.float64), b, s, pb, pe, d, groups, op)
        else:
            outs = [_out(sz, k, s, pb[i], pe[i], d) for i, sz in enumerate(size)]
            if min(outs) < 1:
                continue
            wt = (rng.standard_normal((co, c // groups, *(k,) * nsp)) / np.sqrt(c // groups * k ** nsp)).astype(
                np.float32)
            y = conv_fn(cur, wt, b, stride=s, padding=tuple(zip(pb, pe)), dilation=d, groups=groups)
            ywant = ref.conv_nd(want, wt.astype(np.float64), b, s, pb, pe, d, groups)
        if co == c and outs == size and data.draw(st.booleans(), label="residual"):
            y, ywant = g.add(y, cur), ywant + want
        cur, want = _act(g, act, y), _ACTS[act](ywant)
        c, size = co, outs
    g.output(cur)
    got = rlx_cpu.compile(g, num_threads=nthreads).run({"x": x})[0]
    assert got.shape == want.shape, (got.shape, want.shape)
    assert ref.rel_error(got, want) < CONV_TOL, ref.rel_error(got, want)


# ---------------------------------------------------------------------------
# random ONNX CNN graphs through rlx_cpu.InferenceSession against ONNX Runtime:
# the importer's op mapping, the graph passes (constant folding, batch-norm
# folding, epilogue fusion with residual adds, squeeze-excitation gates, the
# blocked layout, in-place elementwise ops) and the kernels under them
# ---------------------------------------------------------------------------

def onnx_graph(data):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    rng = _rng(data)
    n = data.draw(st.integers(1, 2), label="N")
    c = data.draw(st.sampled_from([3, 8, 16]), label="input channels")
    h, w = data.draw(st.integers(5, 20), label="H"), data.draw(st.integers(5, 20), label="W")
    nthreads = data.draw(st.integers(1, 3), label="threads")
    nodes, inits, avail = [], [], [("x", (n, c, h, w))]
    names = iter(f"t{i}" for i in range(10 ** 6))

    def const(arr):
        name = next(names)
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, inputs, **attrs):
        out = next(names)
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def conv(src, c, h, w, co, k, s, d, g, pads):
        wt = (rng.standard_normal((co, c // g, k, k)) / np.sqrt(c // g * k * k)).astype(np.float32)
        ins = [src, const(wt)] + ([const(rng.standard_normal(co).astype(np.float32))]
                                  if data.draw(st.booleans(), label="conv bias") else [])
        return node("Conv", ins, kernel_shape=[k, k], strides=[s, s], dilations=[d, d], group=g, pads=pads)

    cur, shape = "x", (n, c, h, w)
    for li in range(data.draw(st.integers(2, 7), label="nodes")):
        n_, c, h, w = shape
        kind = data.draw(st.sampled_from(["conv", "conv", "depthwise", "bn", "act", "act", "add", "se", "pool",
                                          "concat", "resize", "convtranspose", "pad"]), label=f"node {li}")
        if kind in ("conv", "depthwise"):
            k = data.draw(st.sampled_from([1, 3, 5] if kind == "conv" else [3, 5]), label="kernel")
            s = data.draw(st.integers(1, 2), label="stride")
            d = data.draw(st.sampled_from([1, 1, 2]), label="dilation") if k > 1 else 1
            if kind == "depthwise":
                co, g = c, c
            else:
                co = data.draw(st.sampled_from([8, 16, 24, 32]), label="output channels")
                g = data.draw(st.sampled_from([q for q in (1, 2, 4, 8) if c % q == 0 and co % q == 0]), label="group")
            pads = [data.draw(st.integers(0, d * (k - 1) // 2 + 1), label="pad") for _ in range(4)]
            ho, wo = (_out(h, k, s, pads[0], pads[2], d), _out(w, k, s, pads[1], pads[3], d))
            if min(ho, wo) < 1:
                continue
            cur, shape = conv(cur, c, h, w, co, k, s, d, g, pads), (n_, co, ho, wo)
        elif kind == "bn":
            p = [rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32),
                 rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)]
            cur = node("BatchNormalization", [cur] + [const(v) for v in p], epsilon=1e-5)
        elif kind == "act":
            op = data.draw(st.sampled_from(["Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "LeakyRelu",
                                            "Tanh"]), label="activation")
            if op == "Clip":
                cur = node("Clip", [cur, const(np.float32(0.0)), const(np.float32(6.0))])
            elif op == "LeakyRelu":
                cur = node("LeakyRelu", [cur], alpha=0.1)
            else:
                cur = node(op, [cur])
        elif kind == "add":
            same = [a for a, sh in avail if sh == shape and a != cur]
            if same:
                other = data.draw(st.sampled_from(same), label="residual")
                cur = node(data.draw(st.sampled_from(["Add", "Mul"]), label="binary"), [cur, other])
            else:
                cur = node("Add", [cur, const(rng.standard_normal((1, c, 1, 1)).astype(np.float32))])
        elif kind == "se":
            mid = max(1, c // 4)
            gp = node("GlobalAveragePool", [cur])
            r = node("Relu", [conv(gp, c, 1, 1, mid, 1, 1, 1, 1, [0, 0, 0, 0])])
            gate = node(data.draw(st.sampled_from(["Sigmoid", "HardSigmoid"]), label="gate"),
                        [conv(r, mid, 1, 1, c, 1, 1, 1, 1, [0, 0, 0, 0])])
            cur = node("Mul", [cur, gate])
        elif kind == "pool":
            k = data.draw(st.integers(2, 3), label="pool kernel")
            s = data.draw(st.integers(1, 2), label="pool stride")
            pads = [data.draw(st.integers(0, k // 2), label="pool pad") for _ in range(4)]
            ho, wo = ref.pool_out_size(h, k, s, pads[0], pads[2], 1, False), ref.pool_out_size(
                w, k, s, pads[1], pads[3], 1, False)
            if min(ho, wo) < 1:
                continue
            if data.draw(st.booleans(), label="max"):
                cur = node("MaxPool", [cur], kernel_shape=[k, k], strides=[s, s], pads=pads)
            else:
                cur = node("AveragePool", [cur], kernel_shape=[k, k], strides=[s, s], pads=pads,
                           count_include_pad=int(data.draw(st.booleans(), label="count_include_pad")))
            shape = (n_, c, ho, wo)
        elif kind == "concat":
            same = [(a, sh) for a, sh in avail if sh[0] == n_ and sh[2:] == (h, w) and a != cur]
            if not same:
                continue
            other, osh = data.draw(st.sampled_from(same), label="concat with")
            cur, shape = node("Concat", [cur, other], axis=1), (n_, c + osh[1], h, w)
        elif kind == "resize":
            if h * w > 200:
                continue
            mode = data.draw(st.sampled_from(["nearest", "linear"]), label="resize mode")
            ctm = data.draw(st.sampled_from(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"]),
                            label="coordinate mode")
            if mode == "nearest":
                ctm = "asymmetric" if ctm == "align_corners" else ctm
            cur = node("Resize", [cur, "", const(np.array([1, 1, 2, 2], np.float32))], mode=mode,
                       coordinate_transformation_mode=ctm)
            shape = (n_, c, 2 * h, 2 * w)
        elif kind == "convtranspose":
            if h * w > 200:
                continue
            k = data.draw(st.integers(2, 4), label="transposed kernel")
            co = data.draw(st.sampled_from([8, 16]), label="transposed channels")
            p = data.draw(st.integers(0, (k - 1) // 2), label="transposed pad")
            wt = (rng.standard_normal((c, co, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
            cur = node("ConvTranspose", [cur, const(wt)], kernel_shape=[k, k], strides=[2, 2], pads=[p] * 4)
            shape = (n_, co, (h - 1) * 2 - 2 * p + k, (w - 1) * 2 - 2 * p + k)
        else:
            mode = data.draw(st.sampled_from(["constant", "reflect", "edge"]), label="pad mode")
            pv = [data.draw(st.integers(0, min(2, h - 1, w - 1)), label="pad") for _ in range(4)]
            cur = node("Pad", [cur, const(np.array([0, 0, pv[0], pv[1], 0, 0, pv[2], pv[3]], np.int64))], mode=mode)
            shape = (n_, c, h + pv[0] + pv[2], w + pv[1] + pv[3])
        avail.append((cur, shape))
    if data.draw(st.booleans(), label="classifier head"):
        flat = node("Flatten", [node("GlobalAveragePool", [cur])])
        wt = rng.standard_normal((10, shape[1])).astype(np.float32)
        cur = node("Gemm", [flat, const(wt), const(rng.standard_normal(10).astype(np.float32))], transB=1)
    graph = helper.make_graph(nodes, "fuzz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, avail[0][1])],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    blob = model.SerializeToString()
    x = rng.standard_normal(avail[0][1]).astype(np.float32)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = rlx_cpu.InferenceSession(blob, num_threads=nthreads).run(None, {"x": x})[0]
    assert got.shape == want.shape, (got.shape, want.shape)
    assert ref.rel_error(got, want) < CONV_TOL, ref.rel_error(got, want)


TARGETS = {f.__name__: f for f in (conv, conv_transpose, conv_backward, pool, patches, resize, invalid_attrs,
                                   size_overflow, thread_counts, cnn_graph, onnx_graph)}


def limit_memory():
    """Cap this process's address space (RLX_FUZZ_MEMORY_GB, default 6) so a
    valid but enormous draw (a 16 GB output is a legal request) fails with
    MemoryError instead of waking the kernel's OOM killer."""
    try:
        import resource
    except ImportError:          # not on this OS: draws stay small enough
        return
    cap = int(float(os.environ.get("RLX_FUZZ_MEMORY_GB", "6")) * 2 ** 30)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))


def main(target, examples, seed):
    limit_memory()
    prop = TARGETS[target]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck), print_blob=True)
    @given(st.data())
    def run(data):
        COUNT[0] += 1
        prop(data)

    run()
    print(f"examples={COUNT[0]}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
