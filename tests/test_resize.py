"""Nearest resize: the 2x kernel, the index-table gather, PyTorch's
interpolate semantics, thread invariance, errors and the batch-offset
regression."""
import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import Graph, compile
import reference as ref


def _plan(build, shape, num_threads=None):
    g = Graph()
    g.output(build(g, g.input("x", shape)))
    return compile(g, num_threads=num_threads)


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# widths: whole 8-pixel blocks (56), blocks then a 4-pixel block and a
# scalar tail (15), a 4-pixel block only (4), scalars only (1, 3)
UP2X_SHAPES = [(1, 1, 1, 1), (3, 2, 5, 7), (2, 3, 8, 1), (1, 4, 33, 65), (2, 3, 4, 56), (1, 2, 3, 15),
               (1, 1, 2, 4), (2, 1, 3, 3)]


@pytest.mark.parametrize("shape", UP2X_SHAPES)
def test_upsample_nearest2x_matches_reference_on_the_fast_kernel(shape):
    plan = _plan(lambda g, x: g.upsample_nearest2x(x), shape)
    assert [t.kind for t in plan.thunks] == ["resize_nearest2x"]
    x = _x(shape)
    (y,) = plan.run({"x": x})
    np.testing.assert_array_equal(y, ref.upsample_nearest2x(x).astype(np.float32))


def _portable_matches(body, want):
    """Run `body` (script lines appending float32 arrays to `out`) in a
    subprocess on the portable variant (RLX_SIMD=baseline) and compare the
    arrays with `want`, bit for bit."""
    from conftest import script_array
    script = ("import io, sys\nimport numpy as np\nimport rlx_cpu\nfrom rlx_cpu import _resize\n"
              "out = [np.array([_resize.simd_level()], np.float32)]\n" + body +
              "buf = io.BytesIO()\nnp.save(buf, np.concatenate(out))\nsys.stdout.buffer.write(buf.getvalue())\n")
    got = script_array(script, RLX_SIMD="baseline")
    assert got[0] == 0                              # the portable loop ran
    np.testing.assert_array_equal(got[1:], np.concatenate([w.reshape(-1) for w in want]))


UP2X_BODY = """
for i, shape in enumerate(%r):
    x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.upsample_nearest2x(g.input("x", shape)))
    for t in (1, 2):
        out.append(rlx_cpu.compile(g, num_threads=t).run({"x": x})[0].reshape(-1))
""" % (UP2X_SHAPES,)


def test_upsample_nearest2x_portable_variant_matches_reference():
    want = []
    for i, shape in enumerate(UP2X_SHAPES):
        x = np.random.default_rng(i).standard_normal(shape).astype(np.float32)
        want += [ref.upsample_nearest2x(x).astype(np.float32)] * 2
    _portable_matches(UP2X_BODY, want)


def test_upsample_nearest2x_launch_checks_its_buffers():
    from rlx_cpu import _resize
    x, y = np.zeros(2 * 3 * 5, np.float32), np.zeros(4 * 2 * 3 * 5, np.float32)
    _resize.ResizeNearest2xLaunch(x, y, 2, 3, 5)
    with pytest.raises(ValueError, match=r"upsample_nearest2x: x of 30 / y of 119 floats for 2 planes of 3x5 "
                                         r"\(need 30 / 120\)"):
        _resize.ResizeNearest2xLaunch(x, y[:-1], 2, 3, 5)
    with pytest.raises(ValueError, match=r"x of 29 / y of 120 floats"):
        _resize.ResizeNearest2xLaunch(x[:-1], y, 2, 3, 5)


def test_regression_resize_batch_planes_advance_by_whole_planes():
    # Upstream advanced the batch pointer by elements on a byte pointer (a
    # quarter plane); only N = 1 was tested.  Every image must land in its own
    # plane: distinct constant images make any mixing visible.
    x = np.stack([np.full((2, 3, 4), float(i + 1), np.float32) for i in range(3)])
    x += _x(x.shape) * 0.01
    y = rlx_cpu.upsample_nearest2x(x)
    np.testing.assert_array_equal(y, ref.upsample_nearest2x(x).astype(np.float32))
    for i in range(3):
        np.testing.assert_array_equal(y[i], ref.upsample_nearest2x(x[i:i + 1])[0].astype(np.float32))


@pytest.mark.parametrize("shape,sizes", [((3, 2, 5), (11,)), ((2, 3, 6, 7), (4, 15)),
                                         ((2, 2, 3, 4, 5), (5, 2, 9)), ((1, 1, 1, 1), (3, 2))])
def test_resize_nearest_with_explicit_tables(shape, sizes):
    rng = np.random.default_rng(sum(shape))
    tables = [rng.integers(0, shape[2 + i], size=s) for i, s in enumerate(sizes)]
    plan = _plan(lambda g, x: g.resize_nearest(x, sizes, tables), shape)
    assert [t.kind for t in plan.thunks] == ["resize_nearest"]
    x = _x(shape, 1)
    (y,) = plan.run({"x": x})
    np.testing.assert_array_equal(y, ref.nearest_gather(x, tables).astype(np.float32))


def test_explicit_2x_tables_use_the_fast_kernel():
    h, w = 5, 6
    plan = _plan(lambda g, x: g.resize_nearest(x, (2 * h, 2 * w), [np.arange(2 * h) // 2, np.arange(2 * w) // 2]),
                 (2, 3, h, w))
    assert [t.kind for t in plan.thunks] == ["resize_nearest2x"]


# Rows along w whose leading blocks of 8 outputs read 8 consecutive inputs
# (upscales) run the AVX2 load-and-permute (rlx_resize.h rlx_gather_row,
# the blocks counted at bind); the rest of the row, and the portable
# variant, one at a time: (input w, w table, the blocks counted)
GATHER_W_CASES = [
    (56, (np.arange(84) * 56) // 84, 10),                                     # x1.5: 10 blocks, a tail of 4
    (12, np.arange(24) // 2, 2),                                              # the third would read past the row
    (40, np.arange(43) % 40, 5),                                              # identity, then a wrap
    (64, np.concatenate([np.arange(16) // 2, np.arange(16) * 3, np.arange(16) // 2 + 40]), 2),  # a prefix only
    (30, (np.arange(24)[::-1] * 30) // 24, 0),                                # decreasing: none
    (20, np.array([5, 1, 2, 3, 4, 5, 6, 7, 8, 8]), 0),                        # indices before the first
    (20, np.array([0, 1, 2, 3, 4, 5, 6, 8] + [9] * 8), 0),                     # a span of 9 inputs
]
GATHER_H_TABLE = np.array([0, 0, 1, 3, 4, 4, 2])                              # repeats: lines copied


def _gather_w_plan(case, num_threads=None):
    w, tw, _ = GATHER_W_CASES[case]
    sizes = (len(GATHER_H_TABLE), len(tw))
    return _plan(lambda g, x: g.resize_nearest(x, sizes, [GATHER_H_TABLE, tw]), (2, 3, 5, w), num_threads)


@pytest.mark.parametrize("case", range(len(GATHER_W_CASES)))
def test_resize_nearest_row_blocks(case):
    w, tw, blocks = GATHER_W_CASES[case]
    x = _x((2, 3, 5, w), case)
    want = ref.nearest_gather(x, [GATHER_H_TABLE, tw]).astype(np.float32)
    for t in (1, 2):
        plan = _gather_w_plan(case, t)
        assert plan.new_context().launches[0].wblocks == blocks
        np.testing.assert_array_equal(plan.run({"x": x})[0], want)


GATHER_BODY = """
import test_resize as t
for i in range(len(t.GATHER_W_CASES)):
    out.append(t._gather_w_plan(i).run({"x": t._x((2, 3, 5, t.GATHER_W_CASES[i][0]), i)})[0].reshape(-1))
"""


def test_resize_nearest_row_blocks_portable_variant():
    _portable_matches(GATHER_BODY, [ref.nearest_gather(_x((2, 3, 5, w), i), [GATHER_H_TABLE, tw]).astype(np.float32)
                                    for i, (w, tw, _) in enumerate(GATHER_W_CASES)])


INTERP_CASES = [
    # (shape, size, scale_factor, recompute_scale_factor)
    ((2, 3, 5, 7), (10, 14), None, None),         # exact 2x
    ((2, 3, 5, 7), None, 2, None),
    ((2, 3, 5, 7), (8, 3), None, None),
    ((3, 2, 7, 9), None, 1.7, None),
    ((3, 2, 7, 9), None, (0.6, 2.3), None),
    ((3, 2, 7, 9), None, (0.6, 2.3), True),
    ((1, 2, 10, 10), None, 1 / 3, None),
    ((2, 2, 9), (20,), None, None),
    ((2, 2, 9), None, 2.5, None),
    ((1, 2, 3, 4, 5), None, (2, 1.5, 0.5), None),
    ((1, 2, 3, 4, 5), (6, 4, 11), None, None),
]


@pytest.mark.parametrize("case", INTERP_CASES)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_interpolate_matches_reference(case, mode):
    shape, size, scale, recompute = case
    nsp = len(shape) - 2
    x = _x(shape, 2)
    y = rlx_cpu.interpolate(x, size, scale, mode, recompute_scale_factor=recompute)
    if size is not None:
        out, factors = size, [None] * nsp
    else:
        factors = list(scale) if isinstance(scale, tuple) else [scale] * nsp
        out = [int(np.floor(shape[2 + i] * factors[i])) for i in range(nsp)]
        if recompute:
            factors = [None] * nsp
    tables = [ref.torch_nearest_source(shape[2 + i], out[i], factors[i], mode == "nearest-exact", nsp == 2)
              for i in range(nsp)]
    np.testing.assert_array_equal(y, ref.nearest_gather(x, tables).astype(np.float32))


@pytest.mark.parametrize("shape,tables", [((1, 1, 40, 300), None), ((1, 2, 7, 9, 11), None)])
def test_thread_count_invariance(shape, tables):
    x = _x(shape, 3)
    sizes = tuple(2 * s + 1 for s in shape[2:])
    rng = np.random.default_rng(4)
    tables = [rng.integers(0, shape[2 + i], size=s) for i, s in enumerate(sizes)]
    one = _plan(lambda g, x: g.resize_nearest(x, sizes, tables), shape, 1).run({"x": x})[0]
    two = _plan(lambda g, x: g.resize_nearest(x, sizes, tables), shape, 2).run({"x": x})[0]
    np.testing.assert_array_equal(one, two)
    if len(shape) == 4:
        one = _plan(lambda g, x: g.upsample_nearest2x(x), shape, 1).run({"x": x})[0]
        two = _plan(lambda g, x: g.upsample_nearest2x(x), shape, 2).run({"x": x})[0]
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("call,exc,match", [
    (lambda g, x: g.upsample_nearest2x(g.input("v", (2, 3, 4))), ValueError,
     r"upsample_nearest2x: input must have rank 4 \(N, C, H, W\), got \[2, 3, 4\]"),
    (lambda g, x: g.resize_nearest(x, (4, 4), [np.zeros(4, int)]), ValueError,
     r"resize_nearest: index_tables must have one table per spatial axis \(2\), got 1"),
    (lambda g, x: g.resize_nearest(x, (4, 4), [np.zeros(4, int), np.zeros(3, int)]), ValueError,
     r"resize_nearest: index_tables\[1\] must have shape \[4\]"),
    (lambda g, x: g.resize_nearest(x, (4, 4), [np.zeros(4, int), np.full(4, 6)]), ValueError,
     r"resize_nearest: index_tables\[1\] values must be in \[0, 6\)"),
    (lambda g, x: g.resize_nearest(x, (4, 4), [np.zeros(4), np.zeros(4)]), TypeError,
     r"resize_nearest: index_tables\[0\] must hold integers"),
    (lambda g, x: g.interpolate(x, (4, 4), 2.0), ValueError,
     r"interpolate: exactly one of size and scale_factor must be given"),
    (lambda g, x: g.interpolate(x), ValueError, r"interpolate: exactly one of size and scale_factor"),
    (lambda g, x: g.interpolate(x, scale_factor=2, mode="bilinear"), ValueError,
     r"interpolate: mode must be 'nearest' or 'nearest-exact'"),
    (lambda g, x: g.interpolate(x, scale_factor=2, align_corners=True), ValueError,
     r"interpolate: align_corners can only be set with the interpolating modes"),
    (lambda g, x: g.interpolate(x, scale_factor=(2, 2, 2)), ValueError,
     r"interpolate: scale_factor must have 2 values for input \[1, 2, 5, 6\]"),
    (lambda g, x: g.interpolate(x, scale_factor=0.1), ValueError,
     r"interpolate: output size must be >= 1 on every spatial axis, got \[0, 0\]"),
    (lambda g, x: g.interpolate(x, scale_factor=-1), ValueError, r"interpolate: scale_factor must be positive"),
    (lambda g, x: g.interpolate(x, size=(3,)), ValueError, r"interpolate: size must be an int or a sequence of 2"),
])
def test_build_errors(call, exc, match):
    g = Graph()
    x = g.input("x", (1, 2, 5, 6))
    with pytest.raises(exc, match=match):
        call(g, x)


@pytest.mark.peer
@pytest.mark.parametrize("case", INTERP_CASES)
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_peer_torch_interpolate(case, mode):
    torch = pytest.importorskip("torch")
    shape, size, scale, recompute = case
    x = _x(shape, 5)
    y = rlx_cpu.interpolate(x, size, scale, mode, recompute_scale_factor=recompute)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), size, scale, mode,
                                           recompute_scale_factor=recompute).numpy()
    np.testing.assert_array_equal(y, want)


@pytest.mark.peer
@pytest.mark.parametrize("n", [1, 3])
def test_peer_torch_upsample_nearest2x(n):
    torch = pytest.importorskip("torch")
    x = _x((n, 3, 6, 5), 6)
    want = torch.nn.functional.interpolate(torch.from_numpy(x), scale_factor=2, mode="nearest").numpy()
    np.testing.assert_array_equal(rlx_cpu.upsample_nearest2x(x), want)


@pytest.mark.peer
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_peer_torch_interpolate_size_and_scale_sweep(mode):
    # Many (in, out) pairs and factors: the float32 scale and product rounding
    # must agree with PyTorch everywhere, not only on friendly ratios.
    # (1-D, 2-D and 3-D differ: PyTorch's 2-D kernel short-cuts out == in.)
    # One graph per input shape holds every variant, so this compiles little.
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for n_in in range(1, 12):
        for shape in [(1, 1, n_in), (1, 2, 3, n_in), (1, 1, 2, 3, n_in)]:
            x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
            lead = tuple(shape[2:-1])
            calls = [dict(size=lead + (n_out,)) for n_out in range(1, 26)]
            for f in (0.3, 0.7, 1.1, 1.3, 1 / 3, 2.04, 2.9, 3.3, 5.01):
                if int(np.floor(n_in * f)) >= 1:
                    calls.append(dict(scale_factor=(1.0,) * len(lead) + (f,)))
            g = Graph()
            xi = g.input("x", shape)
            g.output(*[g.interpolate(xi, mode=mode, **kw) for kw in calls])
            outs = compile(g, num_threads=1).run({"x": x})
            for kw, y in zip(calls, outs):
                want = F.interpolate(torch.from_numpy(x), mode=mode, **kw).numpy()
                np.testing.assert_array_equal(y, want, err_msg=f"{shape} {kw}")
