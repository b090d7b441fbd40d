"""Pooling: window max / average pools over 1 to 3 spatial axes, global pools,
and the gradients of the 1-D and 2-D window pools.

A window pool slides a kernel (stride s, dilation d, pads b/e) over each
(n, c) plane of [N, C, *spatial]; output o on an axis reads the taps
o*s - b + j*d, j < k, that fall inside the input:

    max:  y = max of the taps (the first maximum in window order, or the
          last NaN; ``return_indices`` also gives its position)
    avg:  y = sum of the taps / divisor, the divisor being divisor_override,
          else (count_include_pad) the taps inside the padded input, else the
          in-bounds taps

Output size per axis: floor or ceil of (in + b + e - d*(k-1) - 1) / s, plus 1
(shapes.pool_out_size).  Gradients: a max pool sends each window's gradient
to its argmax tap, an average pool spreads it over the window's in-bounds
taps / divisor; overlapping windows accumulate.  Global pools reduce every
spatial axis to 1.

Node ops: ``max_pool{1,2,3}d``, ``avg_pool{1,2,3}d`` (the rank-generic
``max_pool`` / ``avg_pool`` build the same nodes), ``max_pool_indices`` (the
int64 argmax output of a max pool node), ``global_avg_pool``,
``global_max_pool``, ``max_pool{1,2}d_backward``, ``avg_pool{1,2}d_backward``,
``max_pool_backward_indices`` (the gradient of a max pool of any rank from its
indices node: a scatter-add of dy, no window re-scan; autograd asks the
forward pool for plane indices and uses it).
"""
import math
from dataclasses import dataclass
from typing import ClassVar, Optional

import numpy as np

from .. import _pool
from ..compiler import compile as _compile
from ..functional import as_real, cached_plan, freeze, shape_key, run_unary
from ..ir import Graph, Node, Shape, check_grad_shape, as_flag, fmt_shape, shape_arg
from ..onnx_import import spatial_rank, window_padding
from ..registry import compile_rule, functional, gradient, graph_method, onnx_op
from ..shapes import as_tuple, first_padding_only_window, pool_out_size, resolve_padding
from ..thunks import Slice, Thunk, WindowDims
from ..threads import threads_key

RANKS = (1, 2, 3)
BACKWARD_RANKS = (1, 2)          # the pool-gradient kernels take 1-D and 2-D windows
LAYOUTS = {1: "[N, C, L]", 2: "[N, C, H, W]", 3: "[N, C, D, H, W]"}


# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PoolAttrs:
    """Canonical window-pool attributes for n spatial axes (n = 1, 2, 3)."""
    kind: str                 # 'max' | 'avg'
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    ceil_mode: bool
    count_include_pad: bool   # avg: divide by the taps inside the padded input
    divisor_override: int     # avg: fixed divisor, 0 = none
    indices: str              # max: 'none' | 'plane' (PyTorch) | 'onnx' (flat over N, C, ...) | 'onnx_colmajor'

    @property
    def ndim(self):
        return len(self.kernel)


@dataclass(frozen=True)
class GlobalPoolAttrs:
    kind: str                 # 'max' | 'avg'


POOL_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _pool_attrs(op, kind, nsp, xs, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad=True,
                divisor_override=None, return_indices=False, auto_pad="NOTSET", indices_layout="plane"):
    """Validate window-pool arguments for input shape xs (nsp spatial axes, or
    None: from the rank); return (PoolAttrs, output shape).  Shared by the
    forward pools and their gradients."""
    if nsp is None:
        nsp = len(xs) - 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {fmt_shape(xs)}")
    elif len(xs) != nsp + 2:
        raise ValueError(f"{op}: input must have rank {nsp + 2} (N, C, {'spatial, ' * nsp}...), "
                         f"got {fmt_shape(xs)}")
    kernel = as_tuple(kernel_size, nsp, op, "kernel_size")
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel                       # PyTorch: stride defaults to the kernel
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    ceil_mode = as_flag(ceil_mode, op, "ceil_mode")
    count_include_pad = as_flag(count_include_pad, op, "count_include_pad")
    return_indices = as_flag(return_indices, op, "return_indices")
    if auto_pad not in POOL_AUTO_PADS:
        raise ValueError(f"{op}: auto_pad must be one of {', '.join(POOL_AUTO_PADS)}, got {auto_pad!r}")
    if auto_pad != "NOTSET":
        if not (isinstance(padding, (int, np.integer)) and padding == 0):
            raise ValueError(f"{op}: auto_pad={auto_pad!r} cannot be combined with padding={padding!r}")
        padding = auto_pad
    begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
    if divisor_override is not None:
        if kind != "avg":
            raise ValueError(f"{op}: divisor_override applies to average pooling only")
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, (int, np.integer)) \
                or divisor_override < 1:
            raise ValueError(f"{op}: divisor_override must be a positive integer or None, "
                             f"got {divisor_override!r}")
    if indices_layout not in ("plane", "onnx", "onnx_colmajor"):
        raise ValueError(f"{op}: indices_layout must be 'plane', 'onnx' or 'onnx_colmajor', "
                         f"got {indices_layout!r}")
    ctx = f"input {fmt_shape(xs)}, kernel {kernel}, stride {stride}, dilation {dilation}, pads {begin}/{end}"
    out_sp = []
    for i in range(nsp):
        o = pool_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i], ceil_mode)
        if o < 1:
            raise ValueError(
                f"{op}: window extent {dilation[i] * (kernel[i] - 1) + 1} is larger than padded input "
                f"{xs[2 + i] + begin[i] + end[i]} on spatial axis {i} ({ctx})")
        bad = first_padding_only_window(xs[2 + i], o, kernel[i], stride[i], begin[i], dilation[i])
        if bad is not None:
            raise ValueError(
                f"{op}: output {bad} on spatial axis {i} has a window that covers only padding ({ctx}); "
                f"reduce the padding or the dilation")
        out_sp.append(o)
    attrs = PoolAttrs(kind, kernel, stride, begin, end, dilation, ceil_mode, count_include_pad,
                      int(divisor_override or 0), indices_layout if return_indices else "none")
    return attrs, (xs[0], xs[1], *out_sp)


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

def _window_pool(graph, op, kind, nsp, x, kernel_size, stride, padding, dilation, ceil_mode,
                 count_include_pad=True, divisor_override=None, return_indices=False,
                 auto_pad="NOTSET", indices_layout="plane", name=None):
    """A window-pool node; `op` names the calling method in messages and the
    default node name, the node op is ``{kind}_pool{rank}d``."""
    x = graph._value(x, op, "input")
    attrs, shape = _pool_attrs(op, kind, nsp, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                               count_include_pad, divisor_override, return_indices, auto_pad, indices_layout)
    name = name if name is not None else f"{op}_{len(graph.nodes)}"
    y = graph._add(f"{kind}_pool{attrs.ndim}d", [x], shape, name, attrs)
    if attrs.indices == "none":
        return y
    # The pool thunk writes both values and indices: the indices node is
    # always the node right after its pool node (see compile_pool).  Its
    # attrs are the index layout.
    idx = graph._add("max_pool_indices", [y], shape, y.name + ".indices", attrs=attrs.indices, dtype="int64")
    return y, idx


def indices_node(graph, pool):
    """The max_pool_indices node reading max-pool node `pool`, or None: the
    node after it (return_indices=True) or one that autograd appended later
    (request_indices).  A pool node has at most one."""
    if pool.op not in MAX_POOL_OPS:
        return None
    if pool.attrs.indices != "none":
        return graph.node(pool.id + 1)
    for n in graph.nodes[pool.id + 1:]:
        if n.op == "max_pool_indices" and n.inputs == (pool.id,):
            return n
    return None


def request_indices(graph, pool):
    """The indices node of max-pool node `pool`, appending one with plane
    layout (PyTorch's) when the pool was built without: the pool's thunk then
    writes the argmax of every window beside its values, the way
    return_indices=True does."""
    idx = indices_node(graph, pool)
    if idx is not None:
        return idx
    name, k = pool.name + ".indices", 1
    while name in graph._names:
        name, k = f"{pool.name}.indices{k}", k + 1
    return graph._add("max_pool_indices", [pool], pool.shape, name, attrs="plane", dtype="int64")


@graph_method()
def max_pool(graph, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
             return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
    """Max pooling over the spatial axes of [N, C, *spatial] (1 to 3 axes).

    padding: int, per-axis ints, ONNX pads (begins then ends) or
    (begin, end) pairs; auto_pad: ONNX 'SAME_UPPER' / 'SAME_LOWER' / 'VALID'.
    return_indices: also return an int64 indices node, flat within each
    (n, c) plane (PyTorch) or, with indices_layout='onnx', flat over the
    whole [N, C, *spatial] tensor (ONNX MaxPool, storage_order 0);
    'onnx_colmajor': plane offset plus the spatial index in column-major
    order, first spatial axis fastest (ONNX storage_order 1)."""
    return _window_pool(graph, "max_pool", "max", None, x, kernel_size, stride, padding, dilation, ceil_mode,
                 return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout, name=name)


@graph_method()
def avg_pool(graph, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
             divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
    """Average pooling over the spatial axes of [N, C, *spatial] (1 to 3 axes).

    The divisor is divisor_override if given, else with count_include_pad
    the taps inside the padded input (not the ceil-mode overhang), else the
    in-bounds taps.  dilation as in ONNX AveragePool-19."""
    return _window_pool(graph, "avg_pool", "avg", None, x, kernel_size, stride, padding, dilation, ceil_mode,
                 count_include_pad, divisor_override, auto_pad=auto_pad, name=name)


def _max_pool_method(nd):
    op = f"max_pool{nd}d"

    def method(graph, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
        return _window_pool(graph, op, "max", nd, x, kernel_size, stride, padding, dilation, ceil_mode,
                     return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout, name=name)
    return op, method, f"max_pool on {LAYOUTS[nd]}."


def _avg_pool_method(nd):
    op = f"avg_pool{nd}d"

    def method(graph, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        return _window_pool(graph, op, "avg", nd, x, kernel_size, stride, padding, dilation, ceil_mode,
                     count_include_pad, divisor_override, auto_pad=auto_pad, name=name)
    return op, method, f"avg_pool on {LAYOUTS[nd]}."


def _global_pool_method(kind, doc):
    op = f"global_{kind}_pool"

    def method(graph, x, name=None):
        x = graph._value(x, op, "input")
        if len(x.shape) < 3:
            raise ValueError(f"{op}: input must have rank >= 3 (N, C, spatial...), got {fmt_shape(x.shape)}")
        shape = (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2)
        return graph._add(op, [x], shape, name, GlobalPoolAttrs(kind))
    return op, method, doc


def _max_pool_backward_method(nd):
    op = f"max_pool{nd}d_backward"

    def method(graph, x, grad_output, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
               auto_pad="NOTSET", name=None):
        x = graph._value(x, op, "input")
        dy = graph._value(grad_output, op, "grad_output")
        attrs, out = _pool_attrs(op, "max", nd, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                                 auto_pad=auto_pad)
        check_grad_shape(op, dy.shape, out, f"max_pool{nd}d of input {fmt_shape(x.shape)}")
        return graph._add(op, [x, dy], x.shape, name, attrs)
    doc = (f"Gradient of max_pool{nd}d w.r.t. its input x {LAYOUTS[nd]}.  Each window's\n"
           f"gradient goes to the tap g.max_pool{nd}d's indices name: the first maximum\n"
           "in window order, or the last NaN; overlapping windows accumulate;\n"
           "padded taps and ceil-mode overhang are never read.")
    return op, method, doc


@graph_method()
def max_pool_backward_indices(graph, grad_output, indices, name=None):
    """Gradient of a max pool (1 to 3 spatial axes) w.r.t. its input, from the
    pool's indices node (``g.max_pool*d(..., return_indices=True)[1]``, layout
    'plane' or 'onnx'): each window's gradient is added at the input its index
    names, overlapping windows accumulate.  The same result as
    max_pool{1,2}d_backward (same additions, same order) without re-scanning
    the windows of x.  Shape: the pool's input shape."""
    op = "max_pool_backward_indices"
    dy = graph._value(grad_output, op, "grad_output")
    if not isinstance(indices, Node) or indices.graph is not graph or indices.op != "max_pool_indices":
        raise TypeError(f"{op}: indices must be the indices node of a max pool of this graph "
                        f"(g.max_pool*d(..., return_indices=True)[1]), got {indices!r}")
    if indices.attrs not in ("plane", "onnx"):
        raise ValueError(f"{op}: indices must have layout 'plane' or 'onnx', got {indices.attrs!r} "
                         f"(use max_pool{{1,2}}d_backward for storage_order=1 indices)")
    pool = graph.node(indices.inputs[0])
    xs = graph.node(pool.inputs[0]).shape
    check_grad_shape(op, dy.shape, pool.shape, f"{pool.op} of input {fmt_shape(xs)}")
    return graph._add(op, [dy, indices], xs, name)


def _avg_pool_backward_method(nd):
    op = f"avg_pool{nd}d_backward"

    def method(graph, grad_output, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        dy = graph._value(grad_output, op, "grad_output")
        xs = shape_arg(input_shape, op, "input_shape")
        attrs, out = _pool_attrs(op, "avg", nd, xs, kernel_size, stride, padding, dilation, ceil_mode,
                                 count_include_pad, divisor_override, auto_pad=auto_pad)
        check_grad_shape(op, dy.shape, out, f"avg_pool{nd}d of input {fmt_shape(xs)}")
        return graph._add(op, [dy], xs, name, attrs)
    doc = (f"Gradient of avg_pool{nd}d w.r.t. its input, of shape input_shape {LAYOUTS[nd]}:\n"
           "each in-bounds tap of a window gets the window's gradient over its divisor.")
    return op, method, doc


# The gradient builders by rank (the registered Graph methods), for the
# gradient rule and the functional wrappers.
MAX_POOL_OPS = frozenset(f"max_pool{nd}d" for nd in RANKS)
MAX_POOL_BACKWARD = {}
AVG_POOL_BACKWARD = {}

for _nd in RANKS:
    for _factory in (_max_pool_method, _avg_pool_method):
        _op, _fn, _doc = _factory(_nd)
        graph_method(_op, _doc)(_fn)
for _nd in BACKWARD_RANKS:
    for _factory, _table in ((_max_pool_backward_method, MAX_POOL_BACKWARD),
                             (_avg_pool_backward_method, AVG_POOL_BACKWARD)):
        _op, _fn, _doc = _factory(_nd)
        graph_method(_op, _doc)(_fn)
        _table[_nd] = getattr(Graph, _op)
for _kind, _doc in (("avg", "Mean over all spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."),
                    ("max", "Maximum over all spatial axes: [N, C, *spatial] -> [N, C, 1, ...].")):
    _op, _fn, _doc = _global_pool_method(_kind, _doc)
    graph_method(_op, _doc)(_fn)
del _nd, _factory, _table, _kind, _op, _fn, _doc


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

def _int64_view(view, s):
    return view(s).view(np.int64)


@dataclass(frozen=True, repr=False)
class PoolThunk(Thunk):
    """Window max/avg pool, 1 to 3 spatial axes.  `indices` (int64, optional)
    receives the argmax per output: within the (n, c) plane (indices_mode 1,
    PyTorch) or over the whole input (2, ONNX; 3, ONNX storage_order=1,
    column-major spatial index).  Scratch per thread: the row-separable kernel's
    row buffer and window sums (doubles), or the chunked average's double line
    (_pool.scratch_floats)."""
    x: Slice
    y: Slice
    indices: Optional[Slice]
    scratch: Optional[Slice]
    dims: WindowDims
    pool_kind: int            # _pool.POOL_MAX | POOL_AVG
    count_include_pad: bool
    divisor_override: int
    indices_mode: int
    w_chunk: int
    max_threads: int

    kind: ClassVar[str] = "pool"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y", "indices")
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _pool.PoolLaunch(
            view(self.x), view(self.y), _int64_view(view, self.indices) if self.indices else None,
            view(self.scratch) if self.scratch else None, self.dims.as_tuple(), self.pool_kind,
            self.count_include_pad, self.divisor_override, self.indices_mode, self.w_chunk, self.max_threads)


@dataclass(frozen=True, repr=False)
class GlobalPoolThunk(Thunk):
    """Global max/avg over `spatial` contiguous values of each of `planes`."""
    x: Slice
    y: Slice
    scratch: Slice
    planes: int
    spatial: int
    pool_kind: int            # _pool.POOL_MAX | POOL_AVG

    kind: ClassVar[str] = "global_pool"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _pool.GlobalPoolLaunch(view(self.x), view(self.y), view(self.scratch), self.planes,
                                      self.spatial, self.pool_kind)


@dataclass(frozen=True, repr=False)
class MaxPoolBackwardThunk(Thunk):
    """dx of a 1-D / 2-D max pool (WindowDims with a trivial depth axis)."""
    x: Slice
    dy: Slice
    dx: Slice
    dims: WindowDims
    max_threads: int

    kind: ClassVar[str] = "max_pool_backward"
    reads: ClassVar[tuple] = ("x", "dy")
    writes: ClassVar[tuple] = ("dx",)

    def bind(self, view):
        return _pool.MaxPoolBackwardLaunch(view(self.x), view(self.dy), view(self.dx),
                                                 self.dims.as_tuple(), self.max_threads)


@dataclass(frozen=True, repr=False)
class MaxPoolBackwardIndicesThunk(Thunk):
    """dx of a max pool of any rank from its int64 indices: per (n, c) plane,
    dx = 0 then dx[index] += dy; `flat`: indices over the whole input (ONNX)
    rather than within the plane."""
    dy: Slice
    indices: Slice
    dx: Slice
    planes: int
    in_size: int              # spatial volume of x
    out_size: int             # spatial volume of dy
    flat: bool
    max_threads: int

    kind: ClassVar[str] = "max_pool_backward_indices"
    reads: ClassVar[tuple] = ("dy", "indices")
    writes: ClassVar[tuple] = ("dx",)

    def bind(self, view):
        return _pool.MaxPoolBackwardIndicesLaunch(view(self.dy), _int64_view(view, self.indices), view(self.dx),
                                                  self.planes, self.in_size, self.out_size, self.flat,
                                                  self.max_threads)


@dataclass(frozen=True, repr=False)
class AvgPoolBackwardThunk(Thunk):
    """dx of a 1-D / 2-D average pool; divisor as PoolThunk's."""
    dy: Slice
    dx: Slice
    dims: WindowDims
    count_include_pad: bool
    divisor_override: int
    max_threads: int

    kind: ClassVar[str] = "avg_pool_backward"
    reads: ClassVar[tuple] = ("dy",)
    writes: ClassVar[tuple] = ("dx",)

    def bind(self, view):
        return _pool.AvgPoolBackwardLaunch(view(self.dy), view(self.dx), self.dims.as_tuple(),
                                                 self.count_include_pad, self.divisor_override, self.max_threads)


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

_POOL_KIND = {"max": _pool.POOL_MAX, "avg": _pool.POOL_AVG}
_INDICES_MODE = {"plane": _pool.INDICES_PLANE, "onnx": _pool.INDICES_ONNX, "onnx_colmajor": _pool.INDICES_ONNX_COL}


@compile_rule(*(f"{kind}_pool{nd}d" for kind in ("max", "avg") for nd in RANKS))
def compile_pool(ctx, node):
    a = node.attrs
    xs = ctx.graph.node(node.inputs[0]).shape
    dims = WindowDims.from_attrs(xs[0], xs[1], xs[2:], node.shape[2:], a)
    kind = _POOL_KIND[a.kind]
    w_chunk = min(_pool.W_CHUNK, dims.out[2])
    t = ctx.num_threads
    indices, mode = None, _pool.INDICES_NONE
    # return_indices=True puts the indices node right after its pool node;
    # autograd may append one later (request_indices).
    inode = indices_node(ctx.graph, node)
    if inode is not None:
        assert inode.op == "max_pool_indices" and inode.inputs == (node.id,), inode
        if ctx.is_live(inode.id):
            indices = ctx.buf(inode.id)
            mode = _INDICES_MODE[inode.attrs]
    scratch = ctx.scratch(4 * _pool.scratch_floats(kind, dims.as_tuple(), w_chunk, t, indices is not None),
                          node.name + ".scratch")
    ctx.emit(PoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), indices, scratch, dims, kind,
                       a.count_include_pad, a.divisor_override, mode, w_chunk, t))


@compile_rule("max_pool_indices")
def compile_pool_indices(ctx, node):
    """Nothing to emit: the producing PoolThunk writes this buffer."""


@compile_rule("global_avg_pool", "global_max_pool")
def compile_global_pool(ctx, node):
    xs = ctx.graph.node(node.inputs[0]).shape
    planes, spatial = xs[0] * xs[1], math.prod(xs[2:])
    kind = _POOL_KIND[node.attrs.kind]
    scratch = ctx.scratch(4 * _pool.global_scratch_floats(planes, spatial), node.name + ".scratch")
    ctx.emit(GlobalPoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), scratch, planes, spatial,
                             kind))


def _pool_backward_dims(node, x_shape, dy_shape):
    """WindowDims of a pool gradient; the kernels take 1-D and 2-D pools (the
    graph methods exist for those only), so the depth axis is trivial."""
    assert node.attrs.ndim in BACKWARD_RANKS, node
    return WindowDims.from_attrs(x_shape[0], x_shape[1], x_shape[2:], dy_shape[2:], node.attrs)


@compile_rule(*(f"max_pool{nd}d_backward" for nd in BACKWARD_RANKS))
def compile_max_pool_backward(ctx, node):
    dims = _pool_backward_dims(node, node.shape, ctx.graph.node(node.inputs[1]).shape)
    ctx.emit(MaxPoolBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                  ctx.buf(node.id), dims, ctx.num_threads))


@compile_rule("max_pool_backward_indices")
def compile_max_pool_backward_indices(ctx, node):
    xs, ys = node.shape, ctx.graph.node(node.inputs[0]).shape
    inode = ctx.graph.node(node.inputs[1])
    ctx.emit(MaxPoolBackwardIndicesThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(inode.id), ctx.buf(node.id),
                                         xs[0] * xs[1], math.prod(xs[2:]), math.prod(ys[2:]),
                                         inode.attrs == "onnx", ctx.num_threads))


@compile_rule(*(f"avg_pool{nd}d_backward" for nd in BACKWARD_RANKS))
def compile_avg_pool_backward(ctx, node):
    dims = _pool_backward_dims(node, node.shape, ctx.graph.node(node.inputs[0]).shape)
    ctx.emit(AvgPoolBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dims,
                                  node.attrs.count_include_pad, node.attrs.divisor_override, ctx.num_threads))


# ---------------------------------------------------------------------------
# Gradient rule
# ---------------------------------------------------------------------------

@gradient(*(f"{kind}_pool{nd}d" for kind in ("max", "avg") for nd in RANKS))
def vjp_pool(g, node, dy, needs):
    """dx of a window pool.  Max: a scatter-add of dy through the pool's
    indices (requested from the forward when it was built without; ONNX
    storage_order=1 indices take the recomputing backward).  Average (and that
    case): the pool's own backward op, same geometry (the pads as (begin, end)
    pairs, which every padding argument accepts)."""
    a = node.attrs
    if a.kind == "max":
        idx = request_indices(g, node)
        if idx.attrs in ("plane", "onnx"):
            return [max_pool_backward_indices(g, dy, idx)]
    table = MAX_POOL_BACKWARD if a.kind == "max" else AVG_POOL_BACKWARD
    backward = table.get(a.ndim)
    if backward is None:
        raise NotImplementedError(f"grads: {node.op} (node {node.name!r}) is not differentiable: average "
                                  f"pooling gradients exist for 1-D and 2-D pools only, max pooling gradients "
                                  f"of 3-D pools need plane or onnx indices")
    x = g.node(node.inputs[0])
    geo = dict(stride=a.stride, padding=tuple(zip(a.pads_begin, a.pads_end)), ceil_mode=a.ceil_mode)
    if a.kind == "max":
        return [backward(g, x, dy, a.kernel, dilation=a.dilation, **geo)]
    return [backward(g, dy, x.shape, a.kernel, count_include_pad=a.count_include_pad,
                     divisor_override=a.divisor_override or None, dilation=a.dilation, **geo)]


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

def _pool_common(nc, nsp):
    kernel = nc.attr("kernel_shape")
    if kernel is None:
        raise ValueError(f"{nc.where}: attribute kernel_shape is required")
    kernel = nc.ints("kernel_shape", nsp, None)
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    ceil_mode = int(nc.attr("ceil_mode", 0))
    if ceil_mode not in (0, 1):
        raise ValueError(f"{nc.where}: attribute ceil_mode must be 0 or 1, got {ceil_mode}")
    padding = window_padding(nc, nsp)
    if isinstance(padding, str):
        auto_pad, padding = ("VALID" if padding == "valid" else padding), 0
    else:
        auto_pad = "NOTSET"
    return kernel, strides, dilations, bool(ceil_mode), padding, auto_pad


@onnx_op("MaxPool", versions=(1, 22))
def convert_max_pool(nc):
    allowed = ["auto_pad", "kernel_shape", "pads", "strides"]
    if nc.version >= 8:
        allowed.append("storage_order")
    if nc.version >= 10:
        allowed += ["ceil_mode", "dilations"]
    nc.check_attrs(allowed)
    x = nc.tensor(0, "X")
    nsp = spatial_rank(nc, x)
    kernel, strides, dilations, ceil_mode, padding, auto_pad = _pool_common(nc, nsp)
    want_indices = len(nc.node.output) > 1 and nc.node.output[1] != ""
    storage_order = int(nc.attr("storage_order", 0))
    if storage_order not in (0, 1):
        raise ValueError(f"{nc.where}: attribute storage_order must be 0 or 1, got {storage_order}")
    layout = "onnx" if storage_order == 0 else "onnx_colmajor"
    name = nc.imp._fresh(nc.out_name(), suffixes=(".indices",))
    res = nc.graph.max_pool(x, kernel, strides, padding, dilations, ceil_mode, return_indices=want_indices,
                            auto_pad=auto_pad, indices_layout=layout, name=name)
    if want_indices:
        y, idx = res
        nc.imp.set_output(nc.out_name(0), y)
        nc.imp.set_output(nc.out_name(1), idx)
    else:
        nc.imp.set_output(nc.out_name(0), res)


@onnx_op("AveragePool", versions=(1, 22))
def convert_average_pool(nc):
    allowed = ["auto_pad", "kernel_shape", "pads", "strides"]
    if nc.version >= 7:
        allowed.append("count_include_pad")
    if nc.version >= 10:
        allowed.append("ceil_mode")
    if nc.version >= 19:
        allowed.append("dilations")
    nc.check_attrs(allowed)
    x = nc.tensor(0, "X")
    nsp = spatial_rank(nc, x)
    kernel, strides, dilations, ceil_mode, padding, auto_pad = _pool_common(nc, nsp)
    include_pad = int(nc.attr("count_include_pad", 0))
    if include_pad not in (0, 1):
        raise ValueError(f"{nc.where}: attribute count_include_pad must be 0 or 1, got {include_pad}")
    y = nc.graph.avg_pool(x, kernel, strides, padding, ceil_mode, bool(include_pad), dilation=dilations,
                          auto_pad=auto_pad, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _global_pool_converter(method):
    def convert(nc):
        nc.check_attrs(())
        x = nc.tensor(0, "X")
        spatial_rank(nc, x)
        y = getattr(nc.graph, method)(x, name=nc.imp._fresh(nc.out_name()))
        nc.imp.set_output(nc.out_name(), y)
    return convert


onnx_op("GlobalAveragePool", versions=(1, 22))(_global_pool_converter("global_avg_pool"))
onnx_op("GlobalMaxPool", versions=(1, 22))(_global_pool_converter("global_max_pool"))


# ---------------------------------------------------------------------------
# Functional wrappers (torch.nn.functional's names and argument order)
# ---------------------------------------------------------------------------

def _max_pool_function(nd):
    op = f"max_pool{nd}d"

    def fn(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
        args = (kernel_size, stride, padding, dilation, ceil_mode, return_indices)
        return run_unary(op, input, args, lambda g, x: getattr(g, op)(
            x, kernel_size, stride, padding, dilation, ceil_mode, return_indices))
    index = {1: "", 2: " h*W + w", 3: ""}[nd]
    fn.__doc__ = f"Max pooling of {LAYOUTS[nd]}; with return_indices also int64 indices{index} (as PyTorch)."
    return op, fn


def _avg_pool_function(nd):
    op = f"avg_pool{nd}d"

    def run(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
        args = (kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
        return run_unary(op, input, args, lambda g, x: getattr(g, op)(
            x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override))

    if nd == 1:       # torch.nn.functional.avg_pool1d has no divisor_override
        def fn(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
            return run(input, kernel_size, stride, padding, ceil_mode, count_include_pad, None)
    else:
        def fn(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
            return run(input, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
    fn.__doc__ = f"Average pooling of {LAYOUTS[nd]}."
    return op, fn


def _global_pool_function(op, doc):
    def fn(input):
        return run_unary(op, input, (), lambda g, x: getattr(g, op)(x))
    fn.__doc__ = doc
    return op, fn


def _max_pool_backward_function(nd):
    op = f"max_pool{nd}d_backward"

    def fn(input, grad_output, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        x = as_real("input", op, input)
        dy = as_real("grad_output", op, grad_output)
        key = (op, x.shape, dy.shape, freeze(kernel_size), freeze(stride), freeze(padding),
               freeze(dilation), ceil_mode, threads_key())

        def build():
            g = Graph()
            dx = MAX_POOL_BACKWARD[nd](g, g.input("input", x.shape), g.input("grad_output", dy.shape),
                                       kernel_size, stride, padding, dilation, ceil_mode)
            g.output(dx)
            return _compile(g)

        return cached_plan(key, build).run({"input": x, "grad_output": dy})[0]
    fn.__doc__ = (f"Gradient of max_pool{nd}d w.r.t. its input: each window's gradient goes to its\n"
                  "first maximum in window order; overlapping windows accumulate.")
    return op, fn


def _avg_pool_backward_function(nd):
    op = f"avg_pool{nd}d_backward"

    def fn(grad_output, input_shape, kernel_size, stride=None, padding=0, ceil_mode=False,
           count_include_pad=True, divisor_override=None):
        dy = as_real("grad_output", op, grad_output)
        xs = shape_key(input_shape)
        key = (op, dy.shape, xs, freeze(kernel_size), freeze(stride), freeze(padding), ceil_mode,
               count_include_pad, divisor_override, threads_key())

        def build():
            g = Graph()
            dx = AVG_POOL_BACKWARD[nd](g, g.input("grad_output", dy.shape), xs, kernel_size, stride, padding,
                                       ceil_mode, count_include_pad, divisor_override)
            g.output(dx)
            return _compile(g)

        return cached_plan(key, build).run({"grad_output": dy})[0]
    fn.__doc__ = f"Gradient of avg_pool{nd}d w.r.t. its input, shape input_shape."
    return op, fn


def _public(name, fn):
    fn.__name__ = fn.__qualname__ = name
    functional(name)(fn)


for _nd in RANKS:
    for _factory in (_max_pool_function, _avg_pool_function):
        _public(*_factory(_nd))
for _name, _doc in (("global_avg_pool", "Mean over the spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."),
                    ("global_max_pool", "Maximum over the spatial axes: [N, C, *spatial] -> [N, C, 1, ...].")):
    _public(*_global_pool_function(_name, _doc))
# The public gradient functions are the 2-D ones (the graph also has 1-D).
for _factory in (_max_pool_backward_function, _avg_pool_backward_function):
    _public(*_factory(2))
del _nd, _factory, _name, _doc
