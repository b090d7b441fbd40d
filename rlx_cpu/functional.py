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


def _max_pool(op, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices):
    args = (kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    return _unary(op, input, args, lambda g, x: getattr(g, op)(
        x, kernel_size, stride, padding, dilation, ceil_mode, return_indices))


def _avg_pool(op, input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return _unary(op, input, args, lambda g, x: getattr(g, op)(
        x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max pooling of [N, C, L]; with return_indices also int64 indices (as PyTorch)."""
    return _max_pool("max_pool1d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max pooling of [N, C, H, W]; with return_indices also int64 indices h*W + w (as PyTorch)."""
    return _max_pool("max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Max pooling of [N, C, D, H, W]; with return_indices also int64 indices (as PyTorch)."""
    return _max_pool("max_pool3d", input, kernel_size, stride, padding, dilation, ceil_mode, return_indices)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Average pooling of [N, C, L]."""
    return _avg_pool("avg_pool1d", input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average pooling of [N, C, H, W]."""
    return _avg_pool("avg_pool2d", input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Average pooling of [N, C, D, H, W]."""
    return _avg_pool("avg_pool3d", input, kernel_size, stride, padding, ceil_mode, count_include_pad,
                     divisor_override)


def global_avg_pool(input):
    """Mean over the spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."""
    return _unary("global_avg_pool", input, (), lambda g, x: g.global_avg_pool(x))


def global_max_pool(input):
    """Maximum over the spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."""
    return _unary("global_max_pool", input, (), lambda g, x: g.global_max_pool(x))


def upsample_nearest2x(input):
    """[N, C, H, W] -> [N, C, 2H, 2W], each pixel repeated 2x2."""
    return _unary("upsample_nearest2x", input, (), lambda g, x: g.upsample_nearest2x(x))


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch.nn.functional.interpolate for mode 'nearest' / 'nearest-exact'."""
    args = (size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    return _unary("interpolate", input, args, lambda g, x: g.interpolate(
        x, size, scale_factor, mode, align_corners, recompute_scale_factor, antialias))


def im2col(input, kernel_size, stride=1, padding=0, dilation=1):
    """Patch rows of [N, C, *spatial]: [N*L, C*K], columns ordered (c, kernel taps)."""
    args = (kernel_size, stride, padding, dilation)
    return _unary("im2col", input, args, lambda g, x: g.im2col(x, kernel_size, stride, padding, dilation))


def col2im(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    """Adjoint of im2col: [N*L, C*K] patch rows summed back into [N, C, *output_size]."""
    args = (output_size, kernel_size, stride, padding, dilation)
    return _unary("col2im", cols, args, lambda g, x: g.col2im(x, output_size, kernel_size, stride, padding,
                                                               dilation))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.unfold: [N, C, *spatial] -> [N, C*K, L]."""
    args = (kernel_size, dilation, padding, stride)
    return _unary("unfold", input, args, lambda g, x: g.im2col(x, kernel_size, stride, padding, dilation,
                                                                layout="onnx"))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.fold: [N, C*K, L] -> [N, C, *output_size] (sums overlaps)."""
    args = (output_size, kernel_size, dilation, padding, stride)
    return _unary("fold", input, args, lambda g, x: g.col2im(x, output_size, kernel_size, stride, padding,
                                                              dilation, layout="onnx"))


# ===========================================================================
# --- training: gradients of the convolution family (train branch) ---
# ===========================================================================

def _shape_key(shape):
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        return shape            # let the graph method raise its TypeError


def max_pool2d_backward(input, grad_output, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Gradient of max_pool2d w.r.t. its input: each window's gradient goes to its
    first maximum in window order; overlapping windows accumulate."""
    op = "max_pool2d_backward"
    x = _as_real("input", op, input)
    dy = _as_real("grad_output", op, grad_output)
    key = (op, x.shape, dy.shape, _freeze(kernel_size), _freeze(stride), _freeze(padding), _freeze(dilation),
           ceil_mode, get_num_threads())

    def build():
        g = Graph()
        dx = g.max_pool2d_backward(g.input("input", x.shape), g.input("grad_output", dy.shape), kernel_size,
                                   stride, padding, dilation, ceil_mode)
        g.output(dx)
        return _compile(g)

    return _cached_plan(key, build).run({"input": x, "grad_output": dy})[0]


def avg_pool2d_backward(grad_output, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
                        count_include_pad=True, divisor_override=None):
    """Gradient of avg_pool2d w.r.t. its input, shape input_shape."""
    op = "avg_pool2d_backward"
    dy = _as_real("grad_output", op, grad_output)
    xs = _shape_key(input_shape)
    key = (op, dy.shape, xs, _freeze(kernel_size), _freeze(stride), _freeze(padding), ceil_mode,
           count_include_pad, divisor_override, get_num_threads())

    def build():
        g = Graph()
        dx = g.avg_pool2d_backward(g.input("grad_output", dy.shape), xs, kernel_size, stride, padding,
                                   ceil_mode, count_include_pad, divisor_override)
        g.output(dx)
        return _compile(g)

    return _cached_plan(key, build).run({"grad_output": dy})[0]


# Wrappers not yet moved into their op family register here.
for _name in ("max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d",
              "global_avg_pool", "global_max_pool", "upsample_nearest2x", "interpolate",
              "im2col", "col2im", "unfold", "fold",
              "max_pool2d_backward", "avg_pool2d_backward"):
    functional(_name)(globals()[_name])
del _name


def __getattr__(name):
    """Functions registered by the op families (rlx_cpu.functional.<name>)."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise AttributeError(f"module 'rlx_cpu.functional' has no attribute {name!r}") from None
