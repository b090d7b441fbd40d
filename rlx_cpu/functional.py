"""Functional API with torch.nn.functional's names and argument order.

Each call compiles (once per distinct shapes/attributes, then cached) a plan
whose weight and bias are graph *inputs*, so new weights cost nothing extra.
Inputs may be any real array; computation is float32; results are new arrays.
"""
import threading
from collections import OrderedDict

import numpy as np

from .algorithms import ConvFlags
from .compiler import compile as _compile
from .ir import Graph
from .registry import FUNCTIONS, functional
from .threads import get_num_threads

_CACHE_SIZE = 128
_cache = OrderedDict()
_cache_lock = threading.Lock()


def _as_real(name, op, v):
    a = np.asarray(v)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{op}: {name} must be a real numeric array, got dtype {a.dtype}")
    return a


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(i) for i in v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def _cached_plan(key, build):
    with _cache_lock:
        plan = _cache.get(key)
        if plan is not None:
            _cache.move_to_end(key)
            return plan
    plan = build()
    with _cache_lock:
        _cache[key] = plan
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return plan


def clear_plan_cache():
    with _cache_lock:
        _cache.clear()


def _conv(op, x, weight, bias, stride, padding, dilation, groups, conv_algorithm):
    x = _as_real("input", op, x)
    weight = _as_real("weight", op, weight)
    feeds = {"x": x, "weight": weight}
    if bias is not None:
        bias = _as_real("bias", op, bias)
        feeds["bias"] = bias
    # Everything compile() reads goes into the key, including the env flags
    # (read at compile time), so a cached plan never hides a change of them.
    key = (op, x.shape, weight.shape, None if bias is None else bias.shape, _freeze(stride),
           _freeze(padding), _freeze(dilation), _freeze(groups), conv_algorithm, get_num_threads(),
           ConvFlags.from_env())

    def build():
        g = Graph()
        xi = g.input("x", x.shape)
        wi = g.input("weight", weight.shape)
        bi = g.input("bias", bias.shape) if bias is not None else None
        y = getattr(g, op)(xi, wi, bi, stride=stride, padding=padding, dilation=dilation, groups=groups)
        g.output(y)
        return _compile(g, conv_algorithm=conv_algorithm)

    return _cached_plan(key, build).run(feeds)[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, conv_algorithm="auto"):
    """1-D convolution of [N, C_in, L] by [C_out, C_in/groups, k]."""
    return _conv("conv1d", input, weight, bias, stride, padding, dilation, groups, conv_algorithm)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, conv_algorithm="auto"):
    """2-D convolution of [N, C_in, H, W] by [C_out, C_in/groups, kH, kW]."""
    return _conv("conv2d", input, weight, bias, stride, padding, dilation, groups, conv_algorithm)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, conv_algorithm="auto"):
    """3-D convolution of [N, C_in, D, H, W] by [C_out, C_in/groups, kD, kH, kW]."""
    return _conv("conv3d", input, weight, bias, stride, padding, dilation, groups, conv_algorithm)


# --- conv-transpose ---

def _conv_transpose(op, x, weight, bias, stride, padding, output_padding, groups, dilation, output_size,
                    conv_algorithm):
    x = _as_real("input", op, x)
    weight = _as_real("weight", op, weight)
    feeds = {"x": x, "weight": weight}
    if bias is not None:
        bias = _as_real("bias", op, bias)
        feeds["bias"] = bias
    key = (op, x.shape, weight.shape, None if bias is None else bias.shape, _freeze(stride),
           _freeze(padding), _freeze(output_padding), _freeze(groups), _freeze(dilation),
           _freeze(output_size), conv_algorithm, get_num_threads())

    def build():
        g = Graph()
        xi = g.input("x", x.shape)
        wi = g.input("weight", weight.shape)
        bi = g.input("bias", bias.shape) if bias is not None else None
        y = getattr(g, op)(xi, wi, bi, stride=stride, padding=padding, output_padding=output_padding,
                           groups=groups, dilation=dilation, output_size=output_size)
        g.output(y)
        return _compile(g, conv_algorithm=conv_algorithm)

    return _cached_plan(key, build).run(feeds)[0]


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     *, output_size=None, conv_algorithm="auto"):
    """1-D transposed convolution of [N, C_in, L] by [C_in, C_out/groups, k].

    output_size (as nn.ConvTranspose1d's forward) picks output_padding so the
    output has that length; ValueError when it is out of reach."""
    return _conv_transpose("conv_transpose1d", input, weight, bias, stride, padding, output_padding, groups,
                           dilation, output_size, conv_algorithm)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     *, output_size=None, conv_algorithm="auto"):
    """2-D transposed convolution of [N, C_in, H, W] by [C_in, C_out/groups, kH, kW]
    (output_size as in conv_transpose1d)."""
    return _conv_transpose("conv_transpose2d", input, weight, bias, stride, padding, output_padding, groups,
                           dilation, output_size, conv_algorithm)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                     *, output_size=None, conv_algorithm="auto"):
    """3-D transposed convolution of [N, C_in, D, H, W] by [C_in, C_out/groups, kD, kH, kW]
    (output_size as in conv_transpose1d)."""
    return _conv_transpose("conv_transpose3d", input, weight, bias, stride, padding, output_padding, groups,
                           dilation, output_size, conv_algorithm)


# ---------------------------------------------------------------------------
# --- pooling / resize / im2col ---
# ---------------------------------------------------------------------------

def _unary(op, x, args, make):
    """Run the one-input graph `make(graph, x_node) -> node or tuple of nodes`,
    compiled once per (op, shape, args, threads).  Returns one array or a tuple."""
    x = _as_real("input", op, x)
    key = (op, x.shape, _freeze(args), get_num_threads())

    def build():
        g = Graph()
        out = make(g, g.input("x", x.shape))
        g.output(*(out if isinstance(out, tuple) else (out,)))
        return _compile(g)

    res = _cached_plan(key, build).run({"x": x})
    return tuple(res) if len(res) > 1 else res[0]


# ===========================================================================
# --- training: gradients of the convolution family (train branch) ---
# ===========================================================================

def _shape_key(shape):
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        return shape            # let the graph method raise its TypeError


def _conv_backward_input(nsp, grad_output, weight, input_shape, stride, padding, dilation, groups,
                         conv_algorithm):
    op = f"conv{nsp}d_backward_input"
    dy = _as_real("grad_output", op, grad_output)
    w = _as_real("weight", op, weight)
    xs = _shape_key(input_shape)
    key = (op, dy.shape, w.shape, xs, _freeze(stride), _freeze(padding), _freeze(dilation), _freeze(groups),
           conv_algorithm, get_num_threads())

    def build():
        g = Graph()
        dx = getattr(g, op)(g.input("grad_output", dy.shape), g.input("weight", w.shape), xs, stride=stride,
                            padding=padding, dilation=dilation, groups=groups)
        g.output(dx)
        return _compile(g, conv_algorithm=conv_algorithm)

    return _cached_plan(key, build).run({"grad_output": dy, "weight": w})[0]


def _conv_backward_weight(nsp, input, grad_output, weight_shape, stride, padding, dilation, groups,
                          conv_algorithm):
    op = f"conv{nsp}d_backward_weight"
    x = _as_real("input", op, input)
    dy = _as_real("grad_output", op, grad_output)
    ws = _shape_key(weight_shape)
    key = (op, x.shape, dy.shape, ws, _freeze(stride), _freeze(padding), _freeze(dilation), _freeze(groups),
           conv_algorithm, get_num_threads())

    def build():
        g = Graph()
        dw = getattr(g, op)(g.input("input", x.shape), g.input("grad_output", dy.shape), ws, stride=stride,
                            padding=padding, dilation=dilation, groups=groups)
        g.output(dw)
        return _compile(g, conv_algorithm=conv_algorithm)

    return _cached_plan(key, build).run({"input": x, "grad_output": dy})[0]


def conv1d_backward_input(grad_output, weight, input_shape, stride=1, padding=0, dilation=1, groups=1, *,
                          conv_algorithm="auto"):
    """Gradient of conv1d w.r.t. its input, shape input_shape [N, C_in, L]."""
    return _conv_backward_input(1, grad_output, weight, input_shape, stride, padding, dilation, groups,
                                conv_algorithm)


def conv2d_backward_input(grad_output, weight, input_shape, stride=1, padding=0, dilation=1, groups=1, *,
                          conv_algorithm="auto"):
    """Gradient of conv2d w.r.t. its input, shape input_shape [N, C_in, H, W]."""
    return _conv_backward_input(2, grad_output, weight, input_shape, stride, padding, dilation, groups,
                                conv_algorithm)


def conv3d_backward_input(grad_output, weight, input_shape, stride=1, padding=0, dilation=1, groups=1, *,
                          conv_algorithm="auto"):
    """Gradient of conv3d w.r.t. its input, shape input_shape [N, C_in, D, H, W]."""
    return _conv_backward_input(3, grad_output, weight, input_shape, stride, padding, dilation, groups,
                                conv_algorithm)


def conv1d_backward_weight(input, grad_output, weight_shape, stride=1, padding=0, dilation=1, groups=1, *,
                           conv_algorithm="auto"):
    """Gradient of conv1d w.r.t. its weight, shape weight_shape [C_out, C_in/groups, k]."""
    return _conv_backward_weight(1, input, grad_output, weight_shape, stride, padding, dilation, groups,
                                 conv_algorithm)


def conv2d_backward_weight(input, grad_output, weight_shape, stride=1, padding=0, dilation=1, groups=1, *,
                           conv_algorithm="auto"):
    """Gradient of conv2d w.r.t. its weight, shape weight_shape [C_out, C_in/groups, kH, kW]."""
    return _conv_backward_weight(2, input, grad_output, weight_shape, stride, padding, dilation, groups,
                                 conv_algorithm)


def conv3d_backward_weight(input, grad_output, weight_shape, stride=1, padding=0, dilation=1, groups=1, *,
                           conv_algorithm="auto"):
    """Gradient of conv3d w.r.t. its weight, shape weight_shape [C_out, C_in/groups, kD, kH, kW]."""
    return _conv_backward_weight(3, input, grad_output, weight_shape, stride, padding, dilation, groups,
                                 conv_algorithm)


# torch.nn.grad's names and argument order (input_size / weight_size first).
def conv1d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv1d_input."""
    return conv1d_backward_input(grad_output, weight, input_size, stride, padding, dilation, groups)


def conv2d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv2d_input."""
    return conv2d_backward_input(grad_output, weight, input_size, stride, padding, dilation, groups)


def conv3d_input(input_size, weight, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv3d_input."""
    return conv3d_backward_input(grad_output, weight, input_size, stride, padding, dilation, groups)


def conv1d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv1d_weight."""
    return conv1d_backward_weight(input, grad_output, weight_size, stride, padding, dilation, groups)


def conv2d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv2d_weight."""
    return conv2d_backward_weight(input, grad_output, weight_size, stride, padding, dilation, groups)


def conv3d_weight(input, weight_size, grad_output, stride=1, padding=0, dilation=1, groups=1):
    """As torch.nn.grad.conv3d_weight."""
    return conv3d_backward_weight(input, grad_output, weight_size, stride, padding, dilation, groups)


# Wrappers not yet moved into their op family register here.
for _name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "conv1d_backward_input", "conv2d_backward_input", "conv3d_backward_input",
              "conv1d_backward_weight", "conv2d_backward_weight", "conv3d_backward_weight",
              "conv1d_input", "conv2d_input", "conv3d_input", "conv1d_weight", "conv2d_weight", "conv3d_weight"):
    functional(_name)(globals()[_name])
del _name


def __getattr__(name):
    """Functions registered by the op families (rlx_cpu.functional.<name>)."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise AttributeError(f"module 'rlx_cpu.functional' has no attribute {name!r}") from None
