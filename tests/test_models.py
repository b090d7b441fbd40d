"""Whole CNNs exported from PyTorch, run by rlx_cpu and checked against ONNX
Runtime on the same input (external truth).

The architectures (rlx_cpu/zoo_models.py, built through rlx_cpu.zoo) follow
torchvision's layer configurations at reduced width and resolution.  Each is
exported with a dynamic batch dim and run through rlx_cpu.InferenceSession:

* with the TorchScript exporter (dynamo=False) at opset 17 with constant
  folding (BatchNorm folded into the convs, as deployed models are): every
  model;
* with the same exporter without folding (BatchNormalization nodes and the
  Shape/Gather/Unsqueeze/Concat chains stay in the graph, so the importer
  must fold them): the models that differ most in what it keeps;
* with the dynamo exporter (onnxscript) at opset 18, which keeps ReduceMean /
  Reshape heads: a few models by default, the rest marked slow (its export
  takes seconds per model).

The outputs must agree with ONNX Runtime's within 1e-4 relative to the
output's magnitude, at 1 and 2 threads.
"""
import importlib.util

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the `test` extra pins torch==2.13.0)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (part of the `test` extra)")
onnx = pytest.importorskip("onnx", reason="onnx is not installed (the `test` extra pins onnx==1.22.0)")

import rlx_cpu  # noqa: E402
from rlx_cpu import zoo, zoo_models  # noqa: E402

pytestmark = pytest.mark.peer

RTOL = 1e-4          # max |rlx - ort| / max |ort|
_EXPORTS = {}
MODELS = zoo.names()


def export(name, fold=True, dynamo=False):
    """(onnx bytes, input array) of model `name`, exported once per session."""
    key = (name, fold, dynamo)
    if key not in _EXPORTS:
        model, x = zoo.build(name)
        _EXPORTS[key] = (zoo.export(model, x, dynamo=dynamo, fold=fold), x)
    return _EXPORTS[key]


def ort_run(model_bytes, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def op_types(model_bytes):
    return {n.op_type for n in onnx.load_from_string(model_bytes).graph.node}


def check_against_ort(name, model_bytes, x, label):
    want = ort_run(model_bytes, x)
    scale = float(np.abs(want).max())
    assert scale > 0
    for threads in (1, 2):
        sess = rlx_cpu.InferenceSession(model_bytes, num_threads=threads)
        assert sess.get_inputs()[0].shape[0] == "batch"      # exported with a dynamic batch
        (got,) = sess.run(None, {"x": x})
        assert got.shape == want.shape and got.dtype == np.float32
        rel = float(np.abs(got.astype(np.float64) - want).max()) / scale
        print(f"{name} ({label}), {threads} thread(s): max rel err {rel:.2e}")
        assert rel <= RTOL, f"{name} ({label}) at {threads} threads: max relative error {rel:.3e} > {RTOL}"


UNFOLDED = ("resnet_basic", "shufflenet_v2", "mobilenet_v3_small", "unet", "densenet")
DYNAMO_DEFAULT = ("resnet_basic", "densenet", "shufflenet_v2")
CASES = [(name, True) for name in MODELS] + [(name, False) for name in UNFOLDED]
HAVE_ONNXSCRIPT = importlib.util.find_spec("onnxscript") is not None
DYNAMO_CASES = [pytest.param(n, marks=() if n in DYNAMO_DEFAULT else pytest.mark.slow) for n in MODELS]


@pytest.mark.parametrize("name,fold", CASES, ids=[f"{n}-{'folded' if f else 'unfolded'}" for n, f in CASES])
def test_model_matches_onnxruntime(name, fold):
    model_bytes, x = export(name, fold)
    check_against_ort(name, model_bytes, x, "folded" if fold else "unfolded")


@pytest.mark.skipif(not HAVE_ONNXSCRIPT, reason="the dynamo exporter needs onnxscript (in the `test` extra)")
@pytest.mark.parametrize("name", DYNAMO_CASES)
def test_dynamo_export_matches_onnxruntime(name):
    model_bytes, x = export(name, dynamo=True)
    assert onnx.load_from_string(model_bytes).opset_import[0].version >= zoo.DYNAMO_OPSET
    check_against_ort(name, model_bytes, x, "dynamo")


def test_session_resolves_the_batch_per_signature():
    """One exported model served at several batch sizes: one plan per
    signature, each matching ONNX Runtime at that batch."""
    model_bytes, x = export("mobilenet_v3_small")
    sess = rlx_cpu.InferenceSession(model_bytes, num_threads=1)
    rng = np.random.default_rng(3)
    for batch in (1, 3, 1):
        xb = rng.standard_normal((batch, *x.shape[1:])).astype(np.float32)
        want = ort_run(model_bytes, xb)
        (got,) = sess.run(["y"], {"x": xb})
        assert got.shape == (batch, 10)
        assert np.abs(got - want).max() <= RTOL * np.abs(want).max()
    assert sess.cached_signatures() == [((3, *x.shape[1:]),), ((1, *x.shape[1:]),)]


def test_exports_keep_the_ops_the_importer_must_handle():
    """The exports really exercise BatchNormalization, the shape chains and
    the other ops (guards against an exporter change silently emptying the
    test)."""
    ops = set()
    for name in UNFOLDED:
        ops |= op_types(export(name, False)[0])
    assert {"BatchNormalization", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= ops, sorted(ops)
    folded = set()
    for name in MODELS:
        folded |= op_types(export(name, True)[0])
    assert {"Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Mul", "Add", "Div", "Gemm", "ReduceMean", "Slice",
            "Transpose", "ConvTranspose", "LeakyRelu", "Tanh", "Flatten", "GlobalAveragePool", "AveragePool",
            "Resize", "BatchNormalization", "MaxPool", "Concat"} <= folded, sorted(folded)
    # grouped convs (ResNeXt, RegNet), 1-D convs and conv-transposes (vocoder)
    rank = {}
    for name in ("regnet_y", "vocoder_1d"):
        for n in onnx.load_from_string(export(name, True)[0]).graph.node:
            if n.op_type in ("Conv", "ConvTranspose"):
                attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                rank.setdefault((name, n.op_type), set()).add((len(attrs["kernel_shape"]), attrs.get("group", 1)))
    assert any(g > 1 for _, g in rank[("regnet_y", "Conv")])
    assert {k for k, _ in rank[("vocoder_1d", "Conv")]} == {1} and ("vocoder_1d", "ConvTranspose") in rank
    if HAVE_ONNXSCRIPT:
        dyn = set()
        for name in DYNAMO_DEFAULT:
            dyn |= op_types(export(name, dynamo=True)[0])
        assert {"ReduceMean", "Reshape", "BatchNormalization", "Split", "Transpose"} <= dyn, sorted(dyn)


# torchvision's real configurations (rlx_cpu/zoo_models.py FULL_MODELS, what
# the speed comparison runs at 224x224), checked here at full width on 64x64
# inputs, except VGG-11: its classifier needs 7x7 features (a 224x224 input)
# and its 133 M parameters take about 50 s to export and load per variant,
# for the same ops as the reduced vgg11 / vgg11_bn above, so only its
# parameter count is checked.
FULL = sorted(n for n in zoo_models.FULL_MODELS if not n.startswith("vgg"))


def test_full_models_have_torchvision_parameter_counts():
    """Every full-size definition has exactly the parameter count torchvision
    publishes for that model (a check that the layer configuration is
    torchvision's: block counts, widths, expansions, SE widths)."""
    assert set(zoo_models.TORCHVISION_PARAMS) == set(zoo_models.FULL_MODELS)
    for name, (make, _) in zoo_models.FULL_MODELS.items():
        got = sum(p.numel() for p in make().parameters())
        assert got == zoo_models.TORCHVISION_PARAMS[name], (name, got)


@pytest.mark.parametrize("name", FULL)
def test_full_model_matches_onnxruntime(name):
    model, x = zoo.build(name, batch=1, resolution=64)
    check_against_ort(name, zoo.export(model, x), x, "full width")
