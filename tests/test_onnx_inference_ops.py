"""Importer details of the inference ops that the ONNX backend node tests do
not reach: legacy (opset < 7) broadcasting, Softmax's opset < 13 coercion,
Pad modes on float data, compile-time folding of shape chains, runtime
Gather with constant indices, and the refusals."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install onnx==1.22.0)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import reference as R  # noqa: E402
import rlx_cpu  # noqa: E402

F32 = TensorProto.FLOAT


def model(nodes, inputs, outputs, inits=None, opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, F32, s) for n, s in outputs],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in (inits or {}).items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def rng(tag):
    return np.random.default_rng(sum(map(ord, tag)))


def test_legacy_broadcast_add_aligns_b_at_axis():
    x = rng("legacy").standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng("b").standard_normal((3,)).astype(np.float32)
    m = model([helper.make_node("Add", ["x", "b"], ["y"], broadcast=1, axis=1)], [("x", x.shape)],
              [("y", x.shape)], {"b": b}, opset=6)
    (y,) = rlx_cpu.from_onnx(m).run({"x": x})
    np.testing.assert_allclose(y, x + b.reshape(1, 3, 1, 1), rtol=1e-6)


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1)])
def test_softmax_axis_semantics(opset, axis):
    x = rng("sm").standard_normal((2, 3, 4)).astype(np.float32)
    m = model([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", x.shape)], [("y", x.shape)],
              opset=opset)
    (y,) = rlx_cpu.from_onnx(m).run({"x": x})
    if opset < 13:
        want = R.softmax(x.reshape(int(np.prod(x.shape[:axis])), -1), 1).reshape(x.shape)
    else:
        want = R.softmax(x, axis)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_modes_on_float_data(mode):
    x = rng("pad" + mode).standard_normal((1, 2, 4, 5)).astype(np.float32)
    pads = np.array([0, 0, 1, 2, 0, 0, 2, -1], np.int64)
    out_shape = (1, 2, 7, 6)
    m = model([helper.make_node("Pad", ["x", "pads", "cv"], ["y"], mode=mode)], [("x", x.shape)],
              [("y", out_shape)], {"pads": pads, "cv": np.array(0.5, np.float32)})
    (y,) = rlx_cpu.from_onnx(m).run({"x": x})
    want = R.pad(x, ((0, 0), (0, 0), (1, 2), (2, -1)), mode, 0.5)
    np.testing.assert_array_equal(y, want.astype(np.float32))


def test_shape_chain_folds_to_a_reshape():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters emit
    for x.view(x.size(0), -1): no shape op reaches the plan."""
    x = rng("chain").standard_normal((2, 3, 4)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["i0"], value=numpy_helper.from_array(np.array(0, np.int64))),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Constant", [], ["ax"], value=numpy_helper.from_array(np.array([0], np.int64))),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
             helper.make_node("Constant", [], ["m1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
             helper.make_node("Cast", ["shape"], ["shape64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "shape64"], ["y"])]
    m = model(nodes, [("x", x.shape)], [("y", (2, 12))])
    plan = rlx_cpu.from_onnx(m)
    (y,) = plan.run({"x": x})
    np.testing.assert_array_equal(y, x.reshape(2, 12))
    assert not plan.thunks           # the reshape aliases the input: nothing runs


def test_runtime_gather_with_constant_indices():
    x = rng("gather").standard_normal((2, 5, 3)).astype(np.float32)
    m = model([helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)], [("x", x.shape)], [("y", (2, 3))],
              {"idx": np.array(-2, np.int64)})
    (y,) = rlx_cpu.from_onnx(m).run({"x": x})
    np.testing.assert_array_equal(y, x[:, 3])


def test_batch_norm_with_runtime_statistics_is_refused():
    c = 3
    m = model([helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"])],
              [("x", (1, c, 2, 2)), ("s", (c,))], [("y", (1, c, 2, 2))],
              {"b": np.zeros(c, np.float32), "mean": np.zeros(c, np.float32), "var": np.ones(c, np.float32)})
    with pytest.raises(NotImplementedError, match=r"BatchNormalization-15\).*input 1 \(scale\) 's' must be known"):
        rlx_cpu.from_onnx(m)


def test_runtime_cast_to_non_float_is_refused():
    m = model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32)], [("x", (2,))], [("y", (2,))])
    with pytest.raises(NotImplementedError, match=r"Cast-13\): attribute to='INT32' is not supported"):
        rlx_cpu.from_onnx(m)


def test_pad_wrap_mode_is_refused():
    m = model([helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")], [("x", (2, 3))], [("y", (2, 5))],
              {"pads": np.array([0, 1, 0, 1], np.int64)}, opset=19)
    with pytest.raises(NotImplementedError, match=r"Pad-19\): attribute mode='wrap' is not supported"):
        rlx_cpu.from_onnx(m)
