"""Window and global pooling: parity with the float64 reference, indices,
thread-count invariance, build-time errors, upstream regressions and (when
installed) PyTorch / ONNX reference peers."""
import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import Graph, compile
import reference as ref


def _run(build, feeds, num_threads=None):
    g = Graph()
    inputs = {name: g.input(name, arr.shape) for name, arr in feeds.items()}
    out = build(g, **inputs)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    return compile(g, num_threads=num_threads).run(feeds)


def _data(rng, shape, kind="normal"):
    if kind == "ties":          # few distinct values: many equal maxima per window
        return rng.integers(-2, 3, size=shape).astype(np.float32)
    if kind == "ramp":          # strictly increasing in memory order
        return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    return rng.standard_normal(shape).astype(np.float32)


# (input shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode)
POOL_CASES = [
    ((1, 1, 7, 7), 3, 2, 0, 0, 1, False),
    ((2, 3, 9, 11), 3, 2, 1, 1, 1, True),                        # ceil overhang both axes
    ((3, 2, 10, 8), (2, 3), (2, 1), (0, 1), (1, 0), (1, 2), True),
    ((2, 4, 5, 5), 2, 2, 0, 0, 1, True),                          # last window half outside
    ((1, 3, 6, 9), (3, 2), (3, 2), (1, 0), (2, 1), (2, 1), True),
    ((2, 2, 13, 4), (4, 1), (3, 1), (2, 0), (1, 0), 1, True),
    ((2, 3, 8, 8), 2, 1, 0, 0, 2, False),
    ((1, 2, 6, 7), (1, 3), (2, 2), (0, 2), (0, 2), 1, False),
    # 1-D
    ((2, 3, 17), 3, 2, 1, 1, 1, True),
    ((3, 2, 11), 4, 3, 2, 0, 1, True),
    ((1, 4, 12), 3, 1, 0, 2, 2, False),
    # 3-D
    ((2, 2, 5, 6, 7), 2, 2, 0, 0, 1, True),
    ((1, 3, 4, 7, 5), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 2), True),
    ((2, 1, 6, 5, 4), 3, 2, 1, 1, 1, False),
]


def _pads(pb, pe, nsp):
    pb = (pb,) * nsp if np.isscalar(pb) else tuple(pb)
    pe = (pe,) * nsp if np.isscalar(pe) else tuple(pe)
    return pb + pe                      # ONNX order


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("data", ["normal", "ties"])
def test_max_pool_values_and_indices_match_reference(case, data):
    shape, k, s, pb, pe, d, ceil = case
    nsp = len(shape) - 2
    x = _data(np.random.default_rng(len(shape) * 100 + sum(shape)), shape, data)
    y, idx = _run(lambda g, x: g.max_pool(x, k, s, _pads(pb, pe, nsp), d, ceil, return_indices=True),
                  {"x": x})
    want, want_idx = ref.max_pool_nd(x, k, s, pb, pe, d, ceil)
    assert y.shape == want.shape and idx.dtype == np.int64
    np.testing.assert_array_equal(y, want.astype(np.float32))
    np.testing.assert_array_equal(idx, want_idx)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool_matches_reference(case, include_pad):
    shape, k, s, pb, pe, d, ceil = case
    nsp = len(shape) - 2
    x = _data(np.random.default_rng(7 + sum(shape)), shape)
    (y,) = _run(lambda g, x: g.avg_pool(x, k, s, _pads(pb, pe, nsp), ceil, include_pad, dilation=d), {"x": x})
    want = ref.avg_pool_nd(x, k, s, pb, pe, d, ceil, include_pad)
    assert y.shape == want.shape
    assert ref.rel_error(y, want) <= 1e-6


def test_avg_pool_divisor_override():
    x = _data(np.random.default_rng(3), (2, 3, 9, 8))
    (y,) = _run(lambda g, x: g.avg_pool2d(x, 3, 2, 1, True, True, divisor_override=5), {"x": x})
    assert ref.rel_error(y, ref.avg_pool_nd(x, 3, 2, 1, 1, 1, True, divisor_override=5)) <= 1e-6


def test_onnx_indices_are_flat_over_the_whole_tensor():
    x = _data(np.random.default_rng(4), (3, 4, 7, 9), "ties")
    y, idx = _run(lambda g, x: g.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True,
                                             indices_layout="onnx"), {"x": x})
    _, plane_idx = ref.max_pool_nd(x, 3, 2, 1, 1, 1, True)
    planes = np.arange(3 * 4).reshape(3, 4, 1, 1)
    np.testing.assert_array_equal(idx, plane_idx + planes * 7 * 9)
    np.testing.assert_array_equal(x.reshape(-1)[idx], y)


@pytest.mark.parametrize("shape,kernel", [((2, 3, 11), 3), ((3, 2, 7, 9), (3, 2)), ((1, 2, 5, 6, 7), (2, 3, 2))])
def test_onnx_colmajor_indices(shape, kernel):
    """ONNX MaxPool storage_order=1: plane offset plus the spatial index with
    the first spatial axis varying fastest."""
    x = _data(np.random.default_rng(14), shape, "ties")
    y, idx = _run(lambda g, x: g.max_pool(x, kernel, 2, 1, ceil_mode=True, return_indices=True,
                                          indices_layout="onnx_colmajor"), {"x": x})
    _, plane_idx = ref.max_pool_nd(x, kernel, 2, 1, 1, 1, True)
    sp = shape[2:]
    col = np.ravel_multi_index(np.unravel_index(plane_idx, sp), sp, order="F")
    planes = np.arange(shape[0] * shape[1]).reshape(shape[:2] + (1,) * len(sp))
    np.testing.assert_array_equal(idx, col + planes * int(np.prod(sp)))
    np.testing.assert_array_equal(x.transpose(0, 1, *range(len(shape) - 1, 1, -1)).reshape(-1)[idx], y)


def test_max_pool_nan_propagates_and_minus_inf_windows_point_at_first_tap():
    x = np.full((1, 2, 5, 6), -np.inf, np.float32)
    x[0, 0, 1, 1] = np.nan
    x[0, 0, 1, 3] = np.nan          # a later NaN in the same window takes the index, as in PyTorch
    x[0, 1, 2, 2] = 1.0
    y, idx = _run(lambda g, x: g.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True), {"x": x})
    want, want_idx = ref.max_pool_nd(x, 3, 2, 1, 1, 1, True)
    np.testing.assert_array_equal(y, want.astype(np.float32))       # equal_nan by default
    np.testing.assert_array_equal(idx, want_idx)
    assert np.isnan(y[0, 0, 0, 0]) and np.isneginf(y[0, 1, 0, 0])
    assert idx[0, 1, 0, 0] == 0                 # first in-bounds tap (0, 0) of a padded window


def test_unused_indices_output_is_not_computed():
    g = Graph()
    x = g.input("x", (1, 2, 8, 8))
    y, _ = g.max_pool2d(x, 2, return_indices=True)
    g.output(y)
    plan = compile(g)
    assert [t.indices for t in plan.thunks] == [None]
    xv = _data(np.random.default_rng(0), (1, 2, 8, 8))
    np.testing.assert_array_equal(plan.run({"x": xv})[0], ref.max_pool_nd(xv, 2)[0].astype(np.float32))


def test_indices_only_output():
    g = Graph()
    x = g.input("x", (2, 2, 6, 6))
    _, idx = g.max_pool2d(x, 2, return_indices=True, name="mp")
    g.output(idx)
    plan = compile(g)
    assert plan.output_dtypes == ["int64"]
    xv = _data(np.random.default_rng(1), (2, 2, 6, 6))
    np.testing.assert_array_equal(plan.run({"x": xv})[0], ref.max_pool_nd(xv, 2)[1])
    out = np.empty((2, 2, 3, 3), np.int64)
    plan.run_into({"x": xv}, [out])
    np.testing.assert_array_equal(out, ref.max_pool_nd(xv, 2)[1])


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_auto_pad(mode, kind):
    shape, k, s = (2, 3, 10, 7), (3, 2), (2, 3)
    x = _data(np.random.default_rng(5), shape)
    if kind == "max":
        (y,) = _run(lambda g, x: g.max_pool2d(x, k, s, auto_pad=mode), {"x": x})
    else:
        (y,) = _run(lambda g, x: g.avg_pool2d(x, k, s, count_include_pad=False, auto_pad=mode), {"x": x})
    if mode == "VALID":
        pb = pe = (0, 0)
        assert y.shape[2:] == ((10 - 3) // 2 + 1, (7 - 2) // 3 + 1)
    else:
        out = (-(-10 // 2), -(-7 // 3))
        assert y.shape[2:] == out
        total = [max((o - 1) * st + kk - i, 0) for o, st, kk, i in zip(out, s, k, shape[2:])]
        small = [t // 2 for t in total]
        big = [t - sm for t, sm in zip(total, small)]
        pb, pe = (small, big) if mode == "SAME_UPPER" else (big, small)
    if kind == "max":
        want = ref.max_pool_nd(x, k, s, pb, pe)[0]
    else:
        want = ref.avg_pool_nd(x, k, s, pb, pe, count_include_pad=False)
    assert ref.rel_error(y, want) <= 1e-6


def test_long_lines_split_into_chunks_match_reference():
    # 1-D, 1 plane, 1500 outputs: three line chunks of W_CHUNK outputs.
    x = _data(np.random.default_rng(6), (1, 1, 3001), "ties")
    y, idx = _run(lambda g, x: g.max_pool1d(x, 3, 2, 1, return_indices=True), {"x": x})
    want, want_idx = ref.max_pool_nd(x, 3, 2, 1, 1)
    np.testing.assert_array_equal(y, want.astype(np.float32))
    np.testing.assert_array_equal(idx, want_idx)
    (a,) = _run(lambda g, x: g.avg_pool1d(x, 5, 2, 2, ceil_mode=True, count_include_pad=False), {"x": x})
    assert ref.rel_error(a, ref.avg_pool_nd(x, 5, 2, 2, 2, 1, True, False)) <= 1e-6


@pytest.mark.parametrize("shape,k,s,p", [((1, 3, 64, 1200), 3, 2, 1), ((1, 2, 3001), 4, 2, 1),
                                         ((2, 2, 6, 20, 30), (2, 3, 3), (1, 2, 2), 1)])
def test_thread_count_invariance(shape, k, s, p):
    x = _data(np.random.default_rng(8), shape, "ties")
    x[..., ::7] += 0.25

    def build(g, x):
        y, i = g.max_pool(x, k, s, p, ceil_mode=True, return_indices=True)
        a = g.avg_pool(x, k, s, p, ceil_mode=True, count_include_pad=False)
        return y, i, a, g.global_avg_pool(x), g.global_max_pool(x)

    one = _run(build, {"x": x}, num_threads=1)
    two = _run(build, {"x": x}, num_threads=2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


# --- global pooling -----------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 5, 7), (3, 5, 7, 9), (2, 3, 3, 5, 7), (1, 1, 1, 1), (2, 3, 91, 97)])
@pytest.mark.parametrize("kind", ["avg", "max"])
def test_global_pool_matches_reference(shape, kind):
    x = _data(np.random.default_rng(sum(shape)), shape)
    (y,) = _run(lambda g, x: getattr(g, f"global_{kind}_pool")(x), {"x": x})
    want = ref.global_pool(x, kind)
    assert y.shape == (shape[0], shape[1]) + (1,) * (len(shape) - 2)
    assert ref.rel_error(y, want) <= (1e-6 if kind == "avg" else 0.0)


def test_regression_global_pool_stays_inside_each_plane():
    # Upstream read past a plane.  With increasing data any read past a plane
    # (or past the tensor) raises the max / mean of that plane.
    x = _data(None, (3, 5, 13, 11), "ramp")
    (mx,) = _run(lambda g, x: g.global_max_pool(x), {"x": x})
    (av,) = _run(lambda g, x: g.global_avg_pool(x), {"x": x})
    np.testing.assert_array_equal(mx, ref.global_pool(x, "max").astype(np.float32))
    assert ref.rel_error(av, ref.global_pool(x, "avg")) <= 1e-7


@pytest.mark.parametrize("kernel,stride,pads", [
    ((2, 2, 2), (2, 2, 2), (0, 0, 0, 1, 0, 0)),       # the 2x2 stride-2 plane shortcut
    ((2, 2, 2), (1, 2, 2), (1, 0, 0, 0, 0, 0)),
    ((3, 3, 3), (2, 2, 2), (1, 0, 1, 1, 1, 0)),       # the 3x3 stride-2, w padding 1 shortcut
    ((3, 3, 3), (1, 2, 2), (1, 1, 1, 1, 1, 1)),
    ((1, 2, 2), (1, 2, 2), (0, 0, 0, 0, 0, 0)),       # one depth tap: the shortcuts' own case
    ((1, 3, 3), (1, 2, 2), (0, 1, 1, 0, 1, 1)),
])
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool3d_over_one_slice_counts_the_depth_padding(kernel, stride, pads, include_pad):
    # A 3-D pool over a single depth slice ran the 2-D plane shortcuts, which
    # count the window's rows in h alone: with count_include_pad the padded
    # depth taps were left out of the divisor (k2 s2: the sum over 4, not 8).
    # Found by tests/fuzz_targets.py cnn_graph.
    x = _data(np.random.default_rng(3), (2, 3, 1, 8, 9))
    for threads in (1, 2):
        (got,) = _run(lambda g, x: g.avg_pool(x, kernel, stride, pads, count_include_pad=include_pad), {"x": x},
                      num_threads=threads)
        want = ref.avg_pool_nd(x, kernel, stride, pads[:3], pads[3:], 1, False, include_pad)
        assert got.shape == want.shape
        assert ref.rel_error(got, want) <= 1e-7, (threads, ref.rel_error(got, want))


# --- regressions of upstream defects --------------------------------------------

def test_regression_ceil_overhang_neither_reads_out_of_bounds_nor_divides_by_full_window():
    # in = 5, k = 2, s = 2, ceil: the last window starts at 4 and has one
    # in-bounds tap (tap 5 is past the input and past the end padding).
    x = _data(None, (2, 3, 5, 5), "ramp")
    (avg,) = _run(lambda g, x: g.avg_pool2d(x, 2, 2, 0, ceil_mode=True, count_include_pad=True), {"x": x})
    (mx,) = _run(lambda g, x: g.max_pool2d(x, 2, 2, 0, ceil_mode=True), {"x": x})
    assert avg.shape == (2, 3, 3, 3)
    # the corner window holds exactly one pixel: its mean is that pixel
    np.testing.assert_array_equal(avg[:, :, 2, 2], x[:, :, 4, 4])
    np.testing.assert_array_equal(mx[:, :, 2, 2], x[:, :, 4, 4])   # nothing past the row / plane
    assert ref.rel_error(avg, ref.avg_pool_nd(x, 2, 2, 0, 0, 1, True, True)) <= 1e-7
    # with padding 1 the overhang past the end padding is still not counted
    (avg1,) = _run(lambda g, x: g.avg_pool2d(x, 2, 2, 1, ceil_mode=True, count_include_pad=True), {"x": x})
    assert ref.rel_error(avg1, ref.avg_pool_nd(x, 2, 2, 1, 1, 1, True, True)) <= 1e-7


# --- functional API -----------------------------------------------------------

def test_functional_pools_match_reference():
    rng = np.random.default_rng(9)
    x1, x2, x3 = (_data(rng, s) for s in [(2, 3, 15), (2, 3, 9, 10), (2, 2, 5, 6, 7)])
    y, i = rlx_cpu.max_pool1d(x1, 3, 2, 1, ceil_mode=True, return_indices=True)
    w, wi = ref.max_pool_nd(x1, 3, 2, 1, 1, 1, True)
    np.testing.assert_array_equal(y, w.astype(np.float32))
    np.testing.assert_array_equal(i, wi)
    np.testing.assert_array_equal(rlx_cpu.max_pool2d(x2, 3, dilation=2, padding=1),
                                  ref.max_pool_nd(x2, 3, 3, 1, 1, 2)[0].astype(np.float32))
    np.testing.assert_array_equal(rlx_cpu.max_pool3d(x3, 2), ref.max_pool_nd(x3, 2)[0].astype(np.float32))
    assert ref.rel_error(rlx_cpu.avg_pool1d(x1, 4, 3, 2, True, False), ref.avg_pool_nd(x1, 4, 3, 2, 2, 1, True, False)) <= 1e-6
    assert ref.rel_error(rlx_cpu.avg_pool2d(x2, (3, 2), (2, 1), (1, 0), divisor_override=4),
                         ref.avg_pool_nd(x2, (3, 2), (2, 1), (1, 0), (1, 0), divisor_override=4)) <= 1e-6
    assert ref.rel_error(rlx_cpu.avg_pool3d(x3, 3, 2, 1, True), ref.avg_pool_nd(x3, 3, 2, 1, 1, 1, True)) <= 1e-6
    assert ref.rel_error(rlx_cpu.global_avg_pool(x3), ref.global_pool(x3, "avg")) <= 1e-6
    np.testing.assert_array_equal(rlx_cpu.global_max_pool(x2), ref.global_pool(x2, "max").astype(np.float32))


# --- build-time errors ----------------------------------------------------------

def _x(shape=(1, 2, 6, 6)):
    g = Graph()
    return g, g.input("x", shape)


@pytest.mark.parametrize("call,exc,match", [
    (lambda g, x: g.max_pool2d(x, 3, 2), None, None),
    (lambda g, x: g.max_pool1d(x, 3), ValueError, r"max_pool1d: input must have rank 3 .*\[1, 2, 6, 6\]"),
    (lambda g, x: g.max_pool2d(x, 8), ValueError, r"max_pool2d: window extent 8 is larger than padded input 6"),
    (lambda g, x: g.avg_pool2d(x, 3, 1, 0, dilation=3), ValueError, r"avg_pool2d: window extent 7"),
    (lambda g, x: g.max_pool2d(x, 2, 2, 2), ValueError,
     r"max_pool2d: output 0 on spatial axis 0 has a window that covers only padding"),
    (lambda g, x: g.max_pool2d(x, (2, 3, 1)), ValueError, r"max_pool2d: kernel_size must be an int or a sequence of 2"),
    (lambda g, x: g.max_pool2d(x, 2, 0), ValueError, r"max_pool2d: stride must be >= 1"),
    (lambda g, x: g.max_pool2d(x, 2, padding=-1), ValueError, r"max_pool2d: padding must be >= 0"),
    (lambda g, x: g.max_pool2d(x, 2, auto_pad="SAME"), ValueError, r"max_pool2d: auto_pad must be one of"),
    (lambda g, x: g.max_pool2d(x, 2, padding=1, auto_pad="VALID"), ValueError,
     r"max_pool2d: auto_pad='VALID' cannot be combined with padding=1"),
    (lambda g, x: g.max_pool2d(x, 2, ceil_mode="yes"), TypeError, r"max_pool2d: ceil_mode must be a bool"),
    (lambda g, x: g.max_pool2d(x, 2, return_indices=True, indices_layout="hw"), ValueError,
     r"max_pool2d: indices_layout must be 'plane', 'onnx' or 'onnx_colmajor'"),
    (lambda g, x: g.avg_pool2d(x, 2, divisor_override=0), ValueError,
     r"avg_pool2d: divisor_override must be a positive integer"),
    (lambda g, x: g.global_avg_pool(g.input("v", (3, 4))), ValueError,
     r"global_avg_pool: input must have rank >= 3 .*\[3, 4\]"),
    (lambda g, x: g.max_pool2d(g.max_pool2d(x, 2, return_indices=True)[1], 2), TypeError,
     r"max_pool2d: input must be a float32 value, got the int64 node"),
])
def test_build_errors(call, exc, match):
    g, x = _x()
    if exc is None:
        call(g, x)
        return
    with pytest.raises(exc, match=match):
        call(g, x)


def test_functional_errors():
    x = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ValueError, match=r"max_pool3d: input must have rank 5"):
        rlx_cpu.max_pool3d(x, 2)
    with pytest.raises(TypeError, match=r"avg_pool2d: input must be a real numeric array"):
        rlx_cpu.avg_pool2d(np.array([["a"]]), 2)


# --- peers ----------------------------------------------------------------------

TORCH_CASES = [
    ((2, 3, 9, 11), 3, 2, 1, 1, True),
    ((3, 2, 10, 8), (2, 3), (2, 1), (0, 1), (1, 2), True),
    ((2, 4, 5, 5), 2, 2, 0, 1, True),
    ((1, 3, 7, 9), (3, 2), (3, 2), (1, 0), 1, False),
    ((2, 3, 17), 3, 2, 1, 1, True),
    ((3, 2, 11), 4, 3, 2, 1, True),
    ((2, 2, 5, 6, 7), 2, 2, 0, 1, True),
    ((1, 3, 4, 7, 5), (2, 3, 2), (1, 2, 2), (1, 1, 0), (1, 1, 2), True),
]


@pytest.mark.peer
@pytest.mark.parametrize("case", TORCH_CASES)
@pytest.mark.parametrize("data", ["normal", "ties"])
def test_peer_torch_max_pool(case, data):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    shape, k, s, p, d, ceil = case
    nsp = len(shape) - 2
    x = _data(np.random.default_rng(sum(shape)), shape, data)
    y, i = getattr(rlx_cpu, f"max_pool{nsp}d")(x, k, s, p, d, ceil, return_indices=True)
    ty, ti = getattr(F, f"max_pool{nsp}d")(torch.from_numpy(x), k, s, p, d, ceil, return_indices=True)
    np.testing.assert_array_equal(y, ty.numpy())
    np.testing.assert_array_equal(i, ti.numpy())


@pytest.mark.peer
@pytest.mark.parametrize("case", TORCH_CASES)
@pytest.mark.parametrize("include_pad", [True, False])
def test_peer_torch_avg_pool(case, include_pad):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    shape, k, s, p, _, ceil = case
    nsp = len(shape) - 2
    x = _data(np.random.default_rng(sum(shape) + 1), shape)
    y = getattr(rlx_cpu, f"avg_pool{nsp}d")(x, k, s, p, ceil, include_pad)
    ty = getattr(F, f"avg_pool{nsp}d")(torch.from_numpy(x), k, s, p, ceil, include_pad).numpy()
    assert ref.rel_error(y, ty) <= 1e-6
    if nsp > 1:
        y = getattr(rlx_cpu, f"avg_pool{nsp}d")(x, k, s, p, ceil, include_pad, divisor_override=3)
        ty = getattr(F, f"avg_pool{nsp}d")(torch.from_numpy(x), k, s, p, ceil, include_pad, 3).numpy()
        assert ref.rel_error(y, ty) <= 1e-6


@pytest.mark.peer
def test_peer_torch_max_pool_nan_and_minus_inf():
    torch = pytest.importorskip("torch")
    x = np.full((1, 2, 5, 6), -np.inf, np.float32)
    x[0, 0, 1, 1] = x[0, 0, 1, 3] = np.nan
    x[0, 1, 2, 2] = 1.0
    y, i = rlx_cpu.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)
    ty, ti = torch.nn.functional.max_pool2d(torch.from_numpy(x), 3, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(y, ty.numpy())
    np.testing.assert_array_equal(i, ti.numpy())


ONNX_CASES = [
    # (shape, kernel, strides, pads (ONNX order), dilations, ceil_mode); ceil
    # cases keep the reference's extra padding <= 1, where it is exact.
    ((2, 3, 9, 11), (3, 3), (2, 2), (1, 0, 0, 1), (1, 1), 1),
    ((1, 2, 10, 8), (2, 3), (2, 1), (0, 1, 1, 0), (1, 2), 0),
    ((2, 2, 7, 7), (3, 2), (2, 3), (1, 1, 1, 1), (2, 1), 1),
    ((2, 3, 12), (3,), (2,), (2, 1), (2,), 0),
]


@pytest.mark.peer
@pytest.mark.parametrize("case", ONNX_CASES)
@pytest.mark.parametrize("include_pad", [0, 1])
def test_peer_onnx_average_pool(case, include_pad):
    onnx = pytest.importorskip("onnx")
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    shape, k, s, pads, d, ceil = case
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=list(k), strides=list(s), pads=list(pads),
                            dilations=list(d), ceil_mode=ceil, count_include_pad=include_pad)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    x = _data(np.random.default_rng(sum(shape)), shape)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (y,) = _run(lambda g, x: g.avg_pool(x, k, s, pads, bool(ceil), bool(include_pad), dilation=d), {"x": x})
    assert y.shape == want.shape
    assert ref.rel_error(y, want) <= 1e-6


@pytest.mark.peer
@pytest.mark.parametrize("case", ONNX_CASES[:3])
def test_peer_onnx_max_pool_indices(case):
    pytest.importorskip("onnx")
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    shape, k, s, pads, d, ceil = case
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=list(k), strides=list(s), pads=list(pads),
                            dilations=list(d), ceil_mode=ceil)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    x = _data(np.random.default_rng(sum(shape) + 2), shape)      # distinct values: no tie convention needed
    want, want_i = ReferenceEvaluator(model).run(None, {"x": x})
    y, i = _run(lambda g, x: g.max_pool(x, k, s, pads, d, bool(ceil), return_indices=True,
                                         indices_layout="onnx"), {"x": x})
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(i, want_i)


# --- shape arithmetic -----------------------------------------------------------

def test_output_size_and_padding_only_windows_on_a_grid():
    import itertools
    from rlx_cpu.shapes import first_padding_only_window, pool_out_size
    for size, k, s, pb, pe, d, ceil in itertools.product(range(1, 8), range(1, 4), range(1, 4), range(4),
                                                          range(4), range(1, 3), (False, True)):
        out = pool_out_size(size, k, s, pb, pe, d, ceil)
        assert max(out, 0) == ref.pool_out_size(size, k, s, pb, pe, d, ceil), (size, k, s, pb, pe, d, ceil)
        if out < 1:
            continue
        empty = [o for o in range(out)
                 if not any(0 <= o * s - pb + j * d < size for j in range(k))]
        assert first_padding_only_window(size, out, k, s, pb, d) == (empty[0] if empty else None)
