"""rlx_cpu.InferenceSession: ONNX Runtime's calling convention over compiled
plans, one plan per input signature.

Models are built with onnx.helper; results are checked against a float64
numpy reference (and ONNX Runtime's metadata where it is installed)."""
import importlib.util
import threading

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (the `test` extra pins onnx==1.22.0)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import rlx_cpu  # noqa: E402

HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None


def _model(nodes, inputs, outputs, inits=(), opset=13):
    return helper.make_model(helper.make_graph(nodes, "m", inputs, outputs, initializer=list(inits)),
                             opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def conv_relu_model(w, dims=("N", 3, 8, 8), out_dims=("N", 4, 8, 8)):
    """Conv (pads 1) -> Relu -> Reshape to [N, -1] with the shape from an
    initializer; a second output: the Relu result."""
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "flat_shape")
    return _model(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("Reshape", ["r", "flat_shape"], ["flat"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info("flat", TensorProto.FLOAT, ("N", None)),
         helper.make_tensor_value_info("r", TensorProto.FLOAT, out_dims)],
        [numpy_helper.from_array(w, "w"), shape])


def reference(x, w):
    """float64 conv (pads 1, stride 1) + relu."""
    n, c, h, wd = x.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j].astype(np.float64))
    r = np.maximum(out, 0)
    return r.reshape(n, -1), r


@pytest.fixture
def model(rng):
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    return conv_relu_model(w), w


def test_metadata_like_onnxruntime(model):
    sess = rlx_cpu.InferenceSession(model[0], num_threads=1)
    (i,) = sess.get_inputs()
    assert (i.name, i.shape, i.type) == ("x", ["N", 3, 8, 8], "tensor(float)")
    assert [(o.name, o.shape, o.type) for o in sess.get_outputs()] == \
        [("flat", ["N", 256], "tensor(float)"), ("r", ["N", 4, 8, 8], "tensor(float)")]   # inferred dims
    unknown = _model([helper.make_node("Relu", ["x"], ["y"])],
                     [helper.make_tensor_value_info("x", TensorProto.FLOAT, (None, 4))],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    sess2 = rlx_cpu.InferenceSession(unknown, num_threads=1)
    assert sess2.get_inputs()[0].shape == [None, 4]
    assert np.array_equal(sess2.run(None, {"x": -np.ones((3, 4))})[0], np.zeros((3, 4), np.float32))
    if HAVE_ORT:
        import onnxruntime as ort
        for data, mine in ((model[0], sess), (unknown, sess2)):
            o = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
            for a, b in zip(mine.get_inputs() + mine.get_outputs(), o.get_inputs() + o.get_outputs()):
                assert (a.name, a.shape, a.type) == (b.name, b.shape, b.type)


def test_dynamic_batch_one_plan_per_signature_and_bounded_cache(model, rng):
    data, w = model
    sess = rlx_cpu.InferenceSession(data, num_threads=1, max_cached_plans=2)
    assert sess.cached_signatures() == []          # dynamic batch: nothing to compile yet
    plans = {}
    for batch in (1, 2, 1, 3):
        x = rng.standard_normal((batch, 3, 8, 8)).astype(np.float32)
        flat, r = sess.run(None, {"x": x})
        want_flat, want_r = reference(x, w)
        assert flat.shape == (batch, 4 * 64) and r.shape == (batch, 4, 8, 8)
        assert np.abs(flat - want_flat).max() <= 1e-4 * np.abs(want_flat).max()
        assert np.array_equal(flat.reshape(r.shape), r)
        plan = sess.plan_for([(batch, 3, 8, 8)])
        assert plans.setdefault(batch, plan) is plan         # reused, not recompiled
    # batch 2 was least recently used when batch 3 came: evicted
    assert sess.cached_signatures() == [((1, 3, 8, 8),), ((3, 3, 8, 8),)]


def test_static_model_compiles_at_construction(rng):
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    sess = rlx_cpu.InferenceSession(conv_relu_model(w, (2, 3, 8, 8), (2, 4, 8, 8)), num_threads=1)
    assert sess.cached_signatures() == [((2, 3, 8, 8),)]


def test_output_names_select_and_order(model, rng):
    sess = rlx_cpu.InferenceSession(model[0], num_threads=1)
    x = rng.standard_normal((2, 3, 8, 8))            # float64: converted to float32
    flat, r = sess.run(None, {"x": x})
    r2, flat2 = sess.run(["r", "flat"], {"x": x})
    assert np.array_equal(r, r2) and np.array_equal(flat, flat2) and r.dtype == np.float32
    (only,) = sess.run(["r"], {"x": x.astype(np.int32)})
    assert np.array_equal(only, sess.run(["r"], {"x": x.astype(np.int32).astype(np.float32)})[0])


@pytest.mark.parametrize("feeds,exc,words", [
    ({"y": np.zeros((1, 3, 8, 8))}, ValueError, ["unknown input name(s) ['y']", "missing input(s) ['x']", "['x']"]),
    ({}, ValueError, ["missing input(s) ['x']"]),
    ({"x": np.zeros((3, 8, 8))}, ValueError, ["'x'", "rank 4", "[3, 8, 8]"]),
    ({"x": np.zeros((1, 4, 8, 8))}, ValueError, ["'x'", "axis 1", "declares 3"]),
    ({"x": np.zeros((1, 3, 8, 8), complex)}, TypeError, ["'x'", "complex128", "tensor(float)"]),
    ({"x": np.array([["a"]])}, TypeError, ["'x'", "<U1"]),
    ({"x": np.zeros((0, 3, 8, 8))}, ValueError, ["'x'", "empty axis 0"]),
])
def test_bad_feeds_raise_clear_errors(model, feeds, exc, words):
    sess = rlx_cpu.InferenceSession(model[0], num_threads=1)
    with pytest.raises(exc) as e:
        sess.run(None, feeds)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_output_names_and_arguments(model):
    sess = rlx_cpu.InferenceSession(model[0], num_threads=1)
    x = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(ValueError, match=r"unknown output name 'z'.*\['flat', 'r'\]"):
        sess.run(["z"], {"x": x})
    with pytest.raises(TypeError, match="list of names or None"):
        sess.run("r", {"x": x})
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        sess.run(None, [x])
    with pytest.raises(ValueError, match="max_cached_plans"):
        rlx_cpu.InferenceSession(model[0], max_cached_plans=0)
    with pytest.raises(ValueError, match="CPU only.*CUDAExecutionProvider"):
        rlx_cpu.InferenceSession(model[0], providers=["CUDAExecutionProvider"])
    sess = rlx_cpu.InferenceSession(model[0], providers=["CPUExecutionProvider"], num_threads=1)
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_shape_setting_constant_and_initializer_are_folded(rng):
    """Resize scales from a Constant node and Reshape's shape from an
    initializer (through a Shape/Gather/Concat chain): no constants= needed."""
    nodes = [
        helper.make_node("Constant", [], ["scales"],
                         value=numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32))),
        helper.make_node("Resize", ["x", "", "scales"], ["up"], mode="nearest"),
        helper.make_node("Shape", ["up"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Concat", ["n", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["up", "shape"], ["y"]),
    ]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("B", 2, 3, 3))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                  [numpy_helper.from_array(np.array([0], np.int64), "zero"),
                   numpy_helper.from_array(np.array([-1], np.int64), "minus_one")])
    sess = rlx_cpu.InferenceSession(data, num_threads=1)
    assert [i.name for i in sess.get_inputs()] == ["x"]
    for batch in (1, 2):
        x = rng.standard_normal((batch, 2, 3, 3)).astype(np.float32)
        (y,) = sess.run(None, {"x": x})
        assert np.array_equal(y, x.repeat(2, axis=2).repeat(2, axis=3).reshape(batch, -1))


def test_shape_setting_graph_input_needs_constants(rng):
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 1, 2, 2)),
              helper.make_tensor_value_info("scales", TensorProto.FLOAT, (4,))]
    data = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(NotImplementedError, match=r"scales.*constants="):
        rlx_cpu.InferenceSession(data, num_threads=1)
    sess = rlx_cpu.InferenceSession(data, num_threads=1, constants={"scales": np.array([1, 1, 3, 3], np.float32)})
    assert [i.name for i in sess.get_inputs()] == ["x"]
    x = rng.standard_normal((1, 1, 2, 2)).astype(np.float32)
    assert np.array_equal(sess.run(None, {"x": x})[0], x.repeat(3, axis=2).repeat(3, axis=3))
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 2)),
              helper.make_tensor_value_info("shape", TensorProto.INT64, (1,))]
    with pytest.raises(NotImplementedError, match=r"'shape'.*tensor\(int64\).*constants="):
        rlx_cpu.InferenceSession(_model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]))


def test_every_unsupported_node_listed_at_construction():
    nodes = [helper.make_node("Erf", ["x"], ["a"], name="e1"), helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("Sin", ["b"], ["y"], name="s1")]
    data = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("N", 4))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    with pytest.raises(NotImplementedError, match=r"(?s)2 nodes.*'e1'.*Erf.*'s1'.*Sin"):
        rlx_cpu.InferenceSession(data)


def test_threads_share_one_session(model):
    """Several Python threads run one session at once, with different batch
    sizes (so they also race on compiling new signatures); every result
    equals the single-threaded one."""
    data, w = model
    sess = rlx_cpu.InferenceSession(data, num_threads=1)
    rng = np.random.default_rng(11)
    cases = [rng.standard_normal((1 + k % 3, 3, 8, 8)).astype(np.float32) for k in range(12)]
    want = [reference(x, w)[1] for x in cases]
    errors, start = [], threading.Barrier(4)

    def worker(t):
        try:
            start.wait()
            for rep in range(5):
                for k in range(t, len(cases), 4):
                    (r,) = sess.run(["r"], {"x": cases[k]})
                    if np.abs(r - want[k]).max() > 1e-4 * np.abs(want[k]).max():
                        errors.append((t, rep, k))
        except Exception as e:          # reported below, with the thread that saw it
            errors.append((t, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert sorted(sess.cached_signatures()) == [((b, 3, 8, 8),) for b in (1, 2, 3)]
