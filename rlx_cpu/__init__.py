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
import os as _os


def _default_passive_wait():
    """OpenMP threads that finish their share sleep instead of spinning
    (OMP_WAIT_POLICY=PASSIVE) unless the user chose a policy.  With spinning
    (libgomp's default), a busy competing process on a small machine turns
    every parallel region's barrier into a wait for a descheduled thread:
    2-thread plans ran 10-20x slower than at 1 thread.  libgomp reads the
    variable once, when it is loaded, so this only takes effect if no other
    module loaded it before rlx_cpu."""
    if any(v in _os.environ for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")):
        return
    try:
        with open("/proc/self/maps") as f:
            if "libgomp" in f.read():
                return
    except OSError:
        pass
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


_default_passive_wait()

from ._version import __version__  # noqa: E402  (after the OpenMP environment is set)
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
