"""rlx_cpu: the convolution family of neural-network ops on the CPU.

A :class:`Graph` of ops with static shapes is compiled once by
:func:`compile` into a :class:`Plan` -- a flat list of thunks over one
preallocated arena -- and run many times with ``plan.run({...})``.
Functional forms (``conv1d``, ``conv2d``, ``conv3d``, ``conv_transpose1d/2d/3d``)
compile and cache plans per shape.
Training: gradient ops (``conv2d_backward_input`` ...), reverse-mode
:func:`grads` over a graph, and an SGD :class:`Trainer`
(``python -m rlx_cpu train`` runs the example CNN).
"""
from ._version import __version__
from .algorithms import ConvAlgorithm, ConvFlags, select_conv_algorithm, select_convnd_algorithm
from .compiler import compile
from .functional import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, conv_transpose3d
# --- pooling / resize / im2col ---
from .functional import (avg_pool1d, avg_pool2d, avg_pool3d, col2im, fold, global_avg_pool, global_max_pool,
                         im2col, interpolate, max_pool1d, max_pool2d, max_pool3d, unfold, upsample_nearest2x)
# --- training ---
from .functional import (avg_pool2d_backward, conv1d_backward_input, conv1d_backward_weight,
                         conv2d_backward_input, conv2d_backward_weight, conv3d_backward_input,
                         conv3d_backward_weight, max_pool2d_backward)
from .autograd import grads
from .training import Trainer
from .ir import Graph, Node
from .plan import Plan, RunContext
from .threads import get_num_threads, set_num_threads
from .config import show_config
# --- ONNX import (onnx itself is imported lazily, inside from_onnx) ---
from .onnx_import import from_onnx, import_onnx

__all__ = [
    "__version__", "Graph", "Node", "Plan", "RunContext", "compile",
    "ConvAlgorithm", "ConvFlags", "select_conv_algorithm", "select_convnd_algorithm",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "get_num_threads", "set_num_threads", "show_config",
    # --- pooling / resize / im2col ---
    "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
    "global_avg_pool", "global_max_pool", "upsample_nearest2x", "interpolate",
    "im2col", "col2im", "unfold", "fold",
    # --- ONNX import ---
    "from_onnx", "import_onnx",
    # --- training ---
    "conv1d_backward_input", "conv1d_backward_weight", "conv2d_backward_input", "conv2d_backward_weight",
    "conv3d_backward_input", "conv3d_backward_weight", "max_pool2d_backward", "avg_pool2d_backward",
    "grads", "Trainer",
]
