"""rlx_cpu: the convolution family of neural-network ops on the CPU.

A :class:`Graph` of ops with static shapes is compiled once by
:func:`compile` into a :class:`Plan` -- a flat list of thunks over one
preallocated arena -- and run many times with ``plan.run({...})``.
Functional forms (``conv1d``, ``conv2d``, ``conv3d``, ``conv_transpose1d/2d/3d``,
pools, resize, im2col ...) compile and cache plans per shape.
Training: gradient ops (``conv2d_backward_input`` ...), reverse-mode
:func:`grads` over a graph, and an SGD :class:`Trainer`
(``python -m rlx_cpu train`` runs the example CNN).

The ops themselves live in ``rlx_cpu/ops/<family>.py`` and register their
graph methods and functions; the names below are the core plus whatever the
families registered.
"""
from ._version import __version__
from .algorithms import ConvAlgorithm, ConvFlags, select_conv_algorithm, select_convnd_algorithm
from .compiler import compile
from .ir import Graph, Node
from .plan import IncompatiblePlanError, Plan, RunContext
from .threads import get_num_threads, set_num_threads
from .config import show_config
from . import functional, ops
from .registry import FUNCTIONS as _FUNCTIONS
from .autograd import grads
from .training import Trainer
# --- ONNX import (onnx itself is imported lazily, inside from_onnx) ---
from .onnx_import import from_onnx, import_onnx
from .session import InferenceSession

globals().update(_FUNCTIONS)

# scipy's BLAS runs single-threaded from import on (kernels split GEMMs across
# OpenMP threads themselves), so show_config() and a plan unpickled before any
# compile see the same BLAS state a compiled plan runs with.
from .threads import limit_blas_threads as _limit_blas_threads
_limit_blas_threads()


def get_include():
    """Directory holding rlx_cpu.h, the C API header: pass it as include_dirs
    when building C code, or a Cython extension that cimports rlx_cpu.capi."""
    import os
    return os.path.join(os.path.dirname(__file__), "include")


__all__ = [
    "__version__", "Graph", "Node", "Plan", "RunContext", "IncompatiblePlanError", "get_include", "compile",
    "ConvAlgorithm", "ConvFlags", "select_conv_algorithm", "select_convnd_algorithm",
    "get_num_threads", "set_num_threads", "show_config",
    "from_onnx", "import_onnx", "InferenceSession", "grads", "Trainer",
    *sorted(_FUNCTIONS),
]
