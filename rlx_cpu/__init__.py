"""rlx_cpu: the convolution family of neural-network ops on the CPU.

A :class:`Graph` of ops with static shapes is compiled once by
:func:`compile` into a :class:`Plan` -- a flat list of thunks over one
preallocated arena -- and run many times with ``plan.run({...})``.
Functional forms (``conv1d``, ``conv2d``) compile and cache plans per shape.
Training: gradient ops (``conv2d_backward_input`` ...), reverse-mode
:func:`grads` over a graph, and an SGD :class:`Trainer`
(``python -m rlx_cpu train`` runs the example CNN).
"""
from ._version import __version__
from .algorithms import ConvAlgorithm, ConvFlags, select_conv_algorithm
from .compiler import compile
from .functional import conv1d, conv2d
from .functional import (avg_pool2d_backward, conv1d_backward_input, conv1d_backward_weight,
                         conv2d_backward_input, conv2d_backward_weight, conv3d_backward_input,
                         conv3d_backward_weight, max_pool2d_backward)
from .autograd import grads
from .training import Trainer
from .ir import Graph, Node
from .plan import Plan, RunContext
from .threads import get_num_threads, set_num_threads
from .config import show_config

__all__ = [
    "__version__", "Graph", "Node", "Plan", "RunContext", "compile",
    "ConvAlgorithm", "ConvFlags", "select_conv_algorithm",
    "conv1d", "conv2d", "get_num_threads", "set_num_threads", "show_config",
    # training (train branch)
    "conv1d_backward_input", "conv1d_backward_weight", "conv2d_backward_input", "conv2d_backward_weight",
    "conv3d_backward_input", "conv3d_backward_weight", "max_pool2d_backward", "avg_pool2d_backward",
    "grads", "Trainer",
]
