"""Functional API with torch.nn.functional's names and argument order.

Each call compiles (once per distinct shapes/attributes, then cached) a plan
whose weight and bias are graph *inputs*, so new weights cost nothing extra.
Inputs may be any real array; computation is float32; results are new arrays.
"""
import threading
from collections import OrderedDict

import numpy as np

from .compiler import compile as _compile
from .ir import Graph
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
    key = (op, x.shape, weight.shape, None if bias is None else bias.shape, _freeze(stride),
           _freeze(padding), _freeze(dilation), _freeze(groups), conv_algorithm, get_num_threads())

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
