"""im2col / col2im: parity with the float64 reference, exact adjointness,
both layouts, ONNX Col2Im form, thread invariance, errors and peers."""
import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import Graph, compile
import reference as ref


def _run(build, x, num_threads=None):
    g = Graph()
    g.output(build(g, g.input("x", x.shape)))
    return compile(g, num_threads=num_threads).run({"x": x})[0]


# (input shape, kernel, stride, pads_begin, pads_end, dilation)
CASES = [
    ((1, 1, 5, 5), 3, 1, 1, 1, 1),
    ((2, 3, 7, 9), 3, 2, 1, 1, 1),
    ((3, 2, 8, 6), (2, 3), (1, 2), (0, 1), (2, 0), (2, 1)),
    ((2, 4, 6, 11), (3, 1), (3, 2), (1, 0), (1, 0), (1, 1)),
    ((1, 2, 4, 4), 5, 1, 2, 2, 1),                    # kernel larger than the image
    ((2, 3, 13), 4, 3, 2, 1, 2),
    ((2, 2, 4, 5, 6), (2, 3, 2), (1, 2, 2), (1, 1, 0), (0, 1, 1), (1, 1, 2)),
    # stride 1 along w (the onnx layout's col2im adds a row's taps together): blocks of 8 and a masked
    # tail, dilation and uneven padding, a 1-D line
    ((2, 3, 9, 37), 3, 1, 1, 1, 1),
    ((1, 2, 6, 29), (2, 5), 1, (1, 2), (0, 1), (1, 2)),
    ((2, 2, 70), 4, 1, 2, 1, 1),
    # stride 1 along w under a strided, dilated h (rows with 1 or 2 taps of kh, or none), and 3-D
    ((2, 3, 11, 19), 3, (2, 1), (1, 0), (0, 1), (2, 1)),
    ((1, 2, 5, 6, 21), (2, 3, 3), (2, 1, 1), (1, 1, 1), (0, 1, 1), (1, 2, 1)),
]


def _pads(pb, pe, nsp):
    pb = (pb,) * nsp if np.isscalar(pb) else tuple(pb)
    pe = (pe,) * nsp if np.isscalar(pe) else tuple(pe)
    return pb + pe


@pytest.mark.parametrize("case", CASES)
def test_im2col_rows_matches_reference(case):
    shape, k, s, pb, pe, d = case
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    cols = _run(lambda g, x: g.im2col(x, k, s, _pads(pb, pe, len(shape) - 2), d), x)
    np.testing.assert_array_equal(cols, ref.im2col_rows(x, k, s, pb, pe, d).astype(np.float32))


@pytest.mark.parametrize("case", CASES)
def test_col2im_rows_matches_reference_and_is_the_adjoint(case):
    shape, k, s, pb, pe, d = case
    nsp = len(shape) - 2
    rng = np.random.default_rng(sum(shape) + 1)
    x = rng.standard_normal(shape).astype(np.float32)
    pads = _pads(pb, pe, nsp)
    cols = _run(lambda g, x: g.im2col(x, k, s, pads, d), x)
    c = rng.standard_normal(cols.shape).astype(np.float32)
    back = _run(lambda g, x: g.col2im(x, shape[2:], k, s, pads, d), c)
    want = ref.col2im_rows(c, shape[2:], k, s, pb, pe, d)
    assert back.shape == shape
    assert ref.rel_error(back, want) <= 1e-6
    # <im2col(x), c> == <x, col2im(c)> in float64
    lhs = np.dot(cols.astype(np.float64).ravel(), c.astype(np.float64).ravel())
    rhs = np.dot(x.astype(np.float64).ravel(), back.astype(np.float64).ravel())
    assert abs(lhs - rhs) <= 1e-6 * (np.abs(cols).sum() * np.abs(c).max() + 1e-30)


def test_adjointness_is_exact_on_small_integers():
    # Integer data keeps every float32 sum exact, so the identity holds exactly.
    rng = np.random.default_rng(11)
    shape, k, s, p, d = (2, 3, 9, 8), (3, 2), (2, 1), (1, 0, 2, 1), (1, 2)
    x = rng.integers(-4, 5, size=shape).astype(np.float32)
    cols = _run(lambda g, x: g.im2col(x, k, s, p, d), x)
    c = rng.integers(-4, 5, size=cols.shape).astype(np.float32)
    back = _run(lambda g, x: g.col2im(x, shape[2:], k, s, p, d), c)
    lhs = np.dot(cols.astype(np.float64).ravel(), c.astype(np.float64).ravel())
    rhs = np.dot(x.astype(np.float64).ravel(), back.astype(np.float64).ravel())
    assert lhs == rhs


@pytest.mark.parametrize("case", CASES)
def test_onnx_layout_is_the_rows_layout_transposed_per_image(case):
    shape, k, s, pb, pe, d = case
    nsp = len(shape) - 2
    x = np.random.default_rng(sum(shape) + 2).standard_normal(shape).astype(np.float32)
    pads = _pads(pb, pe, nsp)
    rows = ref.im2col_rows(x, k, s, pb, pe, d)
    n = shape[0]
    per_image = rows.reshape(n, -1, rows.shape[1]).transpose(0, 2, 1)     # [N, C*K, L]
    cols = _run(lambda g, x: g.im2col(x, k, s, pads, d, layout="onnx"), x)
    np.testing.assert_array_equal(cols, per_image.astype(np.float32))
    c = np.random.default_rng(3).standard_normal(cols.shape).astype(np.float32)
    img = _run(lambda g, x: g.col2im_onnx(x, shape[2:], k if nsp > 1 or np.ndim(k) else (k,), d, pads, s), c)
    c_rows = np.ascontiguousarray(c.transpose(0, 2, 1).reshape(rows.shape))
    want = ref.col2im_rows(c_rows, shape[2:], k, s, pb, pe, d)
    assert ref.rel_error(img, want) <= 1e-6
    # the onnx layout's plane scatter adds tap by tap in the order of the rows
    # layout's line gather: the same bits
    img_rows = _run(lambda g, x: g.col2im(x, shape[2:], k, s, pads, d), c_rows)
    np.testing.assert_array_equal(img, img_rows)
    # every element is written, those no tap reaches too: into NaN-filled memory
    g = Graph()
    g.output(g.col2im_onnx(g.input("x", c.shape), shape[2:], k if nsp > 1 or np.ndim(k) else (k,), d, pads, s))
    out = np.full(shape, np.nan, np.float32)
    compile(g).run_into({"x": c}, [out])
    np.testing.assert_array_equal(out, img)


def test_functional_im2col_col2im():
    x = np.random.default_rng(5).standard_normal((2, 3, 7, 6)).astype(np.float32)
    cols = rlx_cpu.im2col(x, (3, 2), (2, 1), 1, (1, 2))
    np.testing.assert_array_equal(cols, ref.im2col_rows(x, (3, 2), (2, 1), 1, 1, (1, 2)).astype(np.float32))
    back = rlx_cpu.col2im(cols, (7, 6), (3, 2), (2, 1), 1, (1, 2))
    assert ref.rel_error(back, ref.col2im_rows(cols, (7, 6), (3, 2), (2, 1), 1, 1, (1, 2))) <= 1e-6


@pytest.mark.parametrize("shape", [(1, 1, 60, 300), (1, 2, 5, 40, 50)])
def test_thread_count_invariance(shape):
    nsp = len(shape) - 2
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    k, s, p = (3,) * nsp, (2,) * nsp, 1
    one = _run(lambda g, x: g.im2col(x, k, s, p), x, 1)
    two = _run(lambda g, x: g.im2col(x, k, s, p), x, 2)
    np.testing.assert_array_equal(one, two)
    b1 = _run(lambda g, x: g.col2im(x, shape[2:], k, s, p), one, 1)
    b2 = _run(lambda g, x: g.col2im(x, shape[2:], k, s, p), one, 2)
    np.testing.assert_array_equal(b1, b2)


@pytest.mark.parametrize("call,exc,match", [
    (lambda g: g.im2col(g.input("x", (2, 3)), 2), ValueError, r"im2col: input must have rank 3, 4 or 5"),
    (lambda g: g.im2col(g.input("x", (1, 2, 4, 4)), 5), ValueError,
     r"im2col: kernel extent 5 is larger than padded image 4 on spatial axis 0"),
    (lambda g: g.im2col(g.input("x", (1, 2, 4, 4)), 2, layout="cols"), ValueError,
     r"im2col: layout must be 'rows' or 'onnx'"),
    (lambda g: g.col2im(g.input("c", (10, 8)), (4, 4), 2), ValueError,
     r"col2im: input rows 10 are not a multiple of the block positions L=9"),
    (lambda g: g.col2im(g.input("c", (9, 6)), (4, 4), 2), ValueError,
     r"col2im: input columns 6 are not a multiple of the kernel size K=4"),
    (lambda g: g.col2im(g.input("c", (9, 8, 1)), (4, 4), 2), ValueError,
     r"col2im: input must have rank 2 \[N\*L, C\*K\]"),
    (lambda g: g.col2im_onnx(g.input("c", (1, 8, 10)), (4, 4), (2, 2)), ValueError,
     r"col2im_onnx: input has 10 block positions but the geometry gives L=9"),
    (lambda g: g.col2im(g.input("c", (9, 8)), "4x4", 2), TypeError, r"col2im: output_size must be"),
])
def test_build_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call(Graph())


@pytest.mark.peer
@pytest.mark.parametrize("case", [c for c in CASES if len(c[0]) == 4 and c[3] == c[4]])   # torch: symmetric pads
def test_peer_torch_unfold_fold(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    shape, k, s, pb, pe, d = case
    x = np.random.default_rng(sum(shape) + 3).standard_normal(shape).astype(np.float32)
    cols = rlx_cpu.unfold(x, k, d, pb, s)
    np.testing.assert_array_equal(cols, F.unfold(torch.from_numpy(x), k, d, pb, s).numpy())
    img = rlx_cpu.fold(cols, shape[2:], k, d, pb, s)
    assert ref.rel_error(img, F.fold(torch.from_numpy(cols), shape[2:], k, d, pb, s).numpy()) <= 1e-6


@pytest.mark.peer
def test_peer_onnx_col2im():
    pytest.importorskip("onnx")
    from onnx import helper, TensorProto
    from onnx.reference import ReferenceEvaluator
    image, block, dil, pads, strides = (7, 6), (3, 2), (1, 2), (1, 0, 2, 1), (2, 1)
    n, c = 2, 3
    blocks = [(image[i] + pads[i] + pads[2 + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(2)]
    x = np.random.default_rng(7).standard_normal((n, c * 6, blocks[0] * blocks[1])).astype(np.float32)
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], dilations=list(dil), pads=list(pads),
                            strides=list(strides))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("image", TensorProto.INT64, [2]),
         helper.make_tensor_value_info("block", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (want,) = ReferenceEvaluator(model).run(None, {"x": x, "image": np.array(image, np.int64),
                                                   "block": np.array(block, np.int64)})
    y = _run(lambda g, x: g.col2im_onnx(x, image, block, dil, pads, strides), x)
    assert y.shape == want.shape
    assert ref.rel_error(y, want) <= 1e-6


COL2IM_SIMD_SCRIPT = r"""
import os, sys, numpy as np
import test_im2col as t
from rlx_cpu import _pool
assert (_pool.simd_level() == 0) == (os.environ.get("RLX_SIMD") == "baseline")
outs = []
for shape, k, s, pb, pe, d in t.CASES:
    nsp = len(shape) - 2
    x = np.random.default_rng(sum(shape) + 2).standard_normal(shape).astype(np.float32)
    cols = t._run(lambda g, x: g.im2col(x, k, s, t._pads(pb, pe, nsp), d, layout="onnx"), x)
    c = np.random.default_rng(5).standard_normal(cols.shape).astype(np.float32)
    outs.append(t._run(lambda g, x: g.col2im_onnx(x, shape[2:], k if nsp > 1 or np.ndim(k) else (k,), d,
                                                  t._pads(pb, pe, nsp), s), c).ravel())
np.save(sys.stdout.buffer, np.concatenate(outs))
"""


def test_col2im_portable_variant_gives_the_same_bits():
    # the onnx layout's row-of-taps adds (AVX2 blocks, masked tail) and the
    # portable element loop: each element's adds in the same order
    from conftest import script_array
    from rlx_cpu import _pool
    base = script_array(COL2IM_SIMD_SCRIPT, RLX_SIMD="baseline")
    mine = script_array(COL2IM_SIMD_SCRIPT)
    assert _pool.simd_level() > 0
    np.testing.assert_array_equal(base.view(np.int32), mine.view(np.int32))
