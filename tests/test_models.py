"""Whole CNNs exported from PyTorch, run by rlx_cpu.from_onnx and checked
against ONNX Runtime on the same input (external truth).

The architectures (tests/models/cnn.py) follow torchvision's layer
configurations at reduced width and resolution.  Each is exported with the
TorchScript exporter (dynamo=False) at opset 17 twice: with constant folding
(BatchNorm folded into the convs, as deployed models are) and without it
(BatchNormalization nodes and the Shape/Gather/Unsqueeze/Concat chains stay
in the graph, so the importer must fold them); the unfolded export runs for
the models that differ most in what it keeps, to bound the test time.  The outputs must agree with
ONNX Runtime's within 1e-4 relative to the output's magnitude, at 1 and 2
threads.
"""
import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the `test` extra pins torch==2.13.0)")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (part of the `test` extra)")
onnx = pytest.importorskip("onnx", reason="onnx is not installed (the `test` extra pins onnx==1.22.0)")

import rlx_cpu  # noqa: E402
from models.cnn import MODELS, randomize_batch_norms  # noqa: E402

pytestmark = pytest.mark.peer

RTOL = 1e-4          # max |rlx - ort| / max |ort|
_EXPORTS = {}


def export(name, fold):
    """(onnx bytes, input array) of model `name`, exported once per session."""
    key = (name, fold)
    if key not in _EXPORTS:
        make, shape = MODELS[name]
        gen = torch.Generator().manual_seed(sum(map(ord, name)))
        torch.manual_seed(sum(map(ord, name)))
        model = randomize_batch_norms(make(), gen).eval()
        x = torch.randn(*shape, generator=gen)
        buf = io.BytesIO()
        with torch.no_grad():
            torch.onnx.export(model, (x,), buf, dynamo=False, opset_version=17, input_names=["x"],
                              output_names=["y"], do_constant_folding=fold)
        _EXPORTS[key] = (buf.getvalue(), x.numpy())
    return _EXPORTS[key]


def ort_run(model_bytes, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def op_types(model_bytes):
    return {n.op_type for n in onnx.load_from_string(model_bytes).graph.node}


UNFOLDED = ("resnet_basic", "shufflenet_v2", "mobilenet_v3_small", "unet")
CASES = [(name, True) for name in sorted(MODELS)] + [(name, False) for name in UNFOLDED]


@pytest.mark.parametrize("name,fold", CASES, ids=[f"{n}-{'folded' if f else 'unfolded'}" for n, f in CASES])
def test_model_matches_onnxruntime(name, fold):
    model_bytes, x = export(name, fold)
    want = ort_run(model_bytes, x)
    scale = float(np.abs(want).max())
    assert scale > 0
    for threads in (1, 2):
        plan = rlx_cpu.from_onnx(model_bytes, num_threads=threads)
        (got,) = plan.run({"x": x})
        assert got.shape == want.shape and got.dtype == np.float32
        rel = float(np.abs(got.astype(np.float64) - want).max()) / scale
        print(f"{name} ({'folded' if fold else 'unfolded'}), {threads} thread(s): max rel err {rel:.2e}")
        assert rel <= RTOL, f"{name} at {threads} threads: max relative error {rel:.3e} > {RTOL}"


def test_unfolded_exports_keep_the_ops_the_importer_must_handle():
    """The unfolded exports really exercise BatchNormalization and the shape
    chains (guards against an exporter change silently emptying the test)."""
    ops = set()
    for name in UNFOLDED:
        ops |= op_types(export(name, False)[0])
    assert {"BatchNormalization", "Shape", "Gather", "Unsqueeze", "Concat", "Reshape"} <= ops, sorted(ops)
    folded = set()
    for name in MODELS:
        folded |= op_types(export(name, True)[0])
    assert {"Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Mul", "Add", "Gemm", "ReduceMean", "Slice",
            "Transpose", "ConvTranspose", "LeakyRelu", "Tanh", "Flatten", "GlobalAveragePool", "Resize"} <= folded, \
        sorted(folded)
