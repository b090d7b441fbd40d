"""Pointwise activations of inference graphs, float32:

* ``leaky_relu``: y = x if x >= 0 else alpha x;
* ``clip``: y = min(max(x, lo), hi) (ReLU6 is clip(x, 0, 6)); NaN stays NaN;
* ``sigmoid``: y = 1 / (1 + exp(-x));
* ``silu``: y = x * sigmoid(x) (SiLU / swish; the ``fuse_silu`` pass makes
  it from ``mul(x, sigmoid(x))``, as exporters write it);
* ``hard_sigmoid``: y = max(0, min(1, alpha x + beta));
* ``hard_swish``: y = x * max(0, min(1, x / 6 + 1 / 2));
* ``tanh``.

ONNX ``Relu`` maps onto the dense family's ``relu``.  Kernels:
src/_elementwise.pyx (UnaryLaunch).
"""
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .. import _elementwise
from ..registry import compile_rule, graph_method, onnx_op
from ..thunks import Slice, Thunk
from ._common import all_const, emit, expect_inputs, folded, fresh, is_const, numel


@dataclass(frozen=True)
class UnaryAttrs:
    alpha: float
    beta: float


# op -> (kernel code, default alpha, default beta, doc)
_UNARY = {
    "leaky_relu": (_elementwise.UNARY_LEAKY_RELU, 0.01, 0.0, "x if x >= 0 else alpha * x"),
    "clip": (_elementwise.UNARY_CLIP, -np.inf, np.inf, "min(max(x, alpha), beta): alpha is the lower "
                                                      "bound, beta the upper; NaN stays NaN"),
    "sigmoid": (_elementwise.UNARY_SIGMOID, 0.0, 0.0, "1 / (1 + exp(-x))"),
    "hard_sigmoid": (_elementwise.UNARY_HARD_SIGMOID, 0.2, 0.5, "max(0, min(1, alpha * x + beta))"),
    "hard_swish": (_elementwise.UNARY_HARD_SWISH, 1.0 / 6.0, 0.5, "x * max(0, min(1, x / 6 + 1 / 2))"),
    "tanh": (_elementwise.UNARY_TANH, 0.0, 0.0, "tanh(x)"),
    "silu": (_elementwise.UNARY_SILU, 0.0, 0.0, "x * sigmoid(x)"),
}


def _unary_builder(op):
    code, d_alpha, d_beta, doc = _UNARY[op]

    def build(graph, x, alpha=d_alpha, beta=d_beta, name=None):
        x = graph._value(x, op, "input")
        try:
            a, b = float(alpha), float(beta)
        except (TypeError, ValueError):
            raise TypeError(f"{op}: alpha and beta must be numbers, got {alpha!r}, {beta!r}") from None
        if np.isnan(a) or np.isnan(b):
            raise ValueError(f"{op}: alpha and beta must not be NaN, got {a}, {b}")
        return graph._add(op, [x], x.shape, name, UnaryAttrs(a, b))

    build.__name__ = build.__qualname__ = op
    build.__doc__ = f"{op}(x, alpha={d_alpha:g}, beta={d_beta:g}): elementwise {doc}."
    return build


@dataclass(frozen=True, repr=False)
class UnaryThunk(Thunk):
    """y = f(x) elementwise, f one of the _elementwise.UNARY_* codes."""
    x: Slice
    y: Slice
    op: int
    size: int
    alpha: float
    beta: float
    max_threads: int

    kind: ClassVar[str] = "unary"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)
    pointwise: ClassVar[bool] = True

    def bind(self, view):
        return _elementwise.UnaryLaunch(self.op, view(self.x), view(self.y), self.size, self.alpha, self.beta,
                                        self.max_threads)


_THUNKS = {}
for _op in _UNARY:
    graph_method(_op)(_unary_builder(_op))
    # one record kind per op, so profiles name the activation
    _THUNKS[_op] = dataclass(frozen=True, repr=False)(
        type(f"{''.join(p.title() for p in _op.split('_'))}Thunk", (UnaryThunk,),
             {"__annotations__": {}, "kind": _op, "__module__": __name__}))
del _op


@compile_rule(*_UNARY)
def compile_unary(ctx, node):
    record = _THUNKS[node.op]
    ctx.emit(record(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), _UNARY[node.op][0],
                    numel(node.shape), node.attrs.alpha, node.attrs.beta, ctx.num_threads))


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

def _float32(v):
    return np.asarray(v, dtype=np.float32)


def _onnx_unary(graph_op, fold, attrs=(), legacy=("consumed_inputs",)):
    """A converter for an activation whose attributes map onto alpha/beta:
    attrs is [(onnx name, default, graph kwarg)]."""
    def convert(nc):
        allowed = [a for a, _, _ in attrs] + (list(legacy) if nc.version < 6 else [])
        nc.check_attrs(allowed)
        expect_inputs(nc, 1, 1)
        kwargs = {kw: float(nc.attr(a, d)) for a, d, kw in attrs}
        if all_const(nc):
            x = nc.const(0, "X")
            if x.dtype != np.float32:
                raise NotImplementedError(f"{nc.where}: compile-time input of dtype {x.dtype}; only float32 "
                                          "is supported")
            folded(nc, _float32(fold(x.astype(np.float64), **kwargs)))
            return
        x = nc.tensor(0, "X")
        emit(nc, getattr(nc.graph, graph_op)(x, name=fresh(nc), **kwargs))
    return convert


def _np_hard_sigmoid(x, alpha, beta):
    return np.clip(alpha * x + beta, 0, 1)


onnx_op("Relu", versions=(1, 14))(_onnx_unary("relu", lambda x: np.maximum(x, 0)))
onnx_op("LeakyRelu", versions=(1, 16))(_onnx_unary(
    "leaky_relu", lambda x, alpha: np.where(x < 0, alpha * x, x), attrs=(("alpha", 0.01, "alpha"),)))
onnx_op("Sigmoid", versions=(1, 13))(_onnx_unary("sigmoid", lambda x: 1 / (1 + np.exp(-x))))
onnx_op("Tanh", versions=(1, 13))(_onnx_unary("tanh", np.tanh))
onnx_op("HardSigmoid", versions=(1, 22))(_onnx_unary(
    "hard_sigmoid", _np_hard_sigmoid, attrs=(("alpha", 0.2, "alpha"), ("beta", 0.5, "beta"))))
onnx_op("HardSwish", versions=(14, 22))(_onnx_unary(
    "hard_swish", lambda x: x * _np_hard_sigmoid(x, 1 / 6, 0.5)))


@onnx_op("Clip", versions=(1, 13), parameter_inputs=(1, 2))
def _onnx_clip(nc):
    if nc.version < 11:
        nc.check_attrs(("min", "max") + (("consumed_inputs",) if nc.version < 6 else ()))
        expect_inputs(nc, 1, 1)
        lo, hi = float(nc.attr("min", -np.inf)), float(nc.attr("max", np.inf))
    else:
        nc.check_attrs(())
        expect_inputs(nc, 1, 3)
        bounds = []
        for i, arg, default in ((1, "min", -np.inf), (2, "max", np.inf)):
            v = nc.const(i, arg)
            if v is None:
                bounds.append(default)
                continue
            if v.size != 1:
                raise ValueError(f"{nc.where}: input {arg} must be a scalar, got shape {list(v.shape)}")
            if v.dtype != np.float32:
                raise NotImplementedError(f"{nc.where}: input {arg} is {v.dtype}; only float32 is supported")
            bounds.append(float(v.reshape(())))
        lo, hi = bounds
    if is_const(nc, 0):
        x = nc.const(0, "input")
        if x.dtype != np.float32:
            raise NotImplementedError(f"{nc.where}: compile-time input of dtype {x.dtype}; only float32 "
                                      "is supported")
        folded(nc, np.minimum(np.maximum(x, np.float32(lo)), np.float32(hi)).astype(np.float32))
        return
    x = nc.tensor(0, "input")
    emit(nc, nc.graph.clip(x, alpha=lo, beta=hi, name=fresh(nc)))
