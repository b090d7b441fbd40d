"""The model zoo: CNNs written as torch modules, exported to ONNX.

``python -m rlx_cpu run --zoo`` and the model tests take their models from
here.  The architectures live in :mod:`rlx_cpu.zoo_models` (torch.nn.Module
definitions following torchvision's configurations, see there); this module
imports torch only when a model is built, so ``import rlx_cpu.zoo`` works
without torch.

    model, x = zoo.build("mobilenet_v2", batch=1, resolution=64)
    onnx_bytes = zoo.export(model, x)                  # TorchScript exporter, opset 17
    onnx_bytes = zoo.export(model, x, dynamo=True)     # dynamo exporter (needs onnxscript), opset 18

Weights are random, seeded per model name; nothing is downloaded.
"""
import io
import logging
import warnings

import numpy as np

TORCHSCRIPT_OPSET = 17
DYNAMO_OPSET = 18


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("the rlx_cpu model zoo builds its models with PyTorch: pip install torch==2.13.0 "
                          "(the CPU wheel is enough)") from None
    return torch


def _tables():
    _torch()
    from . import zoo_models
    return zoo_models.MODELS, zoo_models.FULL_MODELS


def names(full=False):
    """The zoo's model names: the reduced models (tests, default of ``run
    --zoo``), or with full=True also torchvision's full-size configurations
    (full_names())."""
    small, big = _tables()
    return list(small) + (list(big) if full else [])


def full_names():
    """torchvision's full-size configurations (1000 classes, 224x224 input,
    torchvision's parameter counts): resnet18, resnet50, mobilenet_v2_full,
    resnext50_32x4d, wide_resnet50_2, vgg11_full, vgg11_bn_full, densenet121,
    squeezenet1_1_full, shufflenet_v2_x1_0, mobilenet_v3_small_full,
    mnasnet1_0, efficientnet_b0, efficientnet_v2_s, regnet_x_400mf,
    regnet_y_400mf."""
    return list(_tables()[1])


def default_input_shape(name):
    small, big = _tables()
    table = small if name in small else big
    if name not in table:
        raise ValueError(f"zoo: unknown model {name!r}; known: {', '.join(list(small) + list(big))}")
    return table[name][1]


def seed_of(name):
    return sum(map(ord, name))


def build(name, batch=None, resolution=None):
    """(torch module in eval mode, float32 numpy input) of model `name`.

    batch: the input's first dim (default: the zoo's); resolution: the
    spatial size of an image model (height = width) or the frame count of
    the 1-D vocoder (default: the zoo's).  Weights and BatchNorm statistics
    are random, seeded by the name; the input too."""
    torch = _torch()
    from .zoo_models import FULL_MODELS, MODELS, randomize_batch_norms
    shape = list(default_input_shape(name))
    make = (MODELS.get(name) or FULL_MODELS[name])[0]
    if batch is not None:
        shape[0] = int(batch)
    if resolution is not None:
        shape[2:] = [int(resolution)] * (len(shape) - 2)
    gen = torch.Generator().manual_seed(seed_of(name))
    torch.manual_seed(seed_of(name))
    model = randomize_batch_norms(make(), gen).eval()
    x = torch.randn(*shape, generator=gen)
    return model, x.numpy()


def export(model, x, dynamo=False, fold=True, input_name="x", output_name="y"):
    """ONNX bytes of `model` traced on input `x` (numpy).  dynamo=False: the
    TorchScript exporter at opset 17 (``fold``: its constant folding, which
    folds BatchNorm into the convs); dynamo=True: the dynamo exporter at
    opset 18 (needs the ``onnxscript`` package).  The batch dim is exported
    as dynamic ("batch"), as a served model would be."""
    torch = _torch()
    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    with torch.no_grad():
        if dynamo:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                prev = logging.root.manager.disable
                logging.disable(logging.WARNING)
                try:
                    prog = torch.onnx.export(model, (xt,), dynamo=True, opset_version=DYNAMO_OPSET,
                                             input_names=[input_name], output_names=[output_name],
                                             dynamic_shapes=({0: torch.export.Dim("batch")},), verbose=False)
                finally:
                    logging.disable(prev)
            return prog.model_proto.SerializeToString()
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)     # "legacy TorchScript-based exporter"
            torch.onnx.export(model, (xt,), buf, dynamo=False, opset_version=TORCHSCRIPT_OPSET,
                              input_names=[input_name], output_names=[output_name], do_constant_folding=fold,
                              dynamic_axes={input_name: {0: "batch"}, output_name: {0: "batch"}})
        return buf.getvalue()
