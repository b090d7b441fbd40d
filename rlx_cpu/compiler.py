"""Compile a Graph into a Plan: node -> thunks, then arena planning.

Compilation happens once.  Rules (one per op kind, in ``RULES``) read the
node's static shapes and attributes and emit thunk records whose slice fields
are still symbolic :class:`Buf` handles; after every rule ran, the planner
gives each handle a byte range and the records are finalised with real
:class:`~rlx_cpu.thunks.Slice` values.
"""
import dataclasses
from dataclasses import dataclass

import numpy as np

from . import _backward, _conv2d, _convnd, _im2col, _pool
from .algorithms import (ConvAlgorithm, ConvFlags, select_conv_algorithm, select_conv_backward_algorithm,
                         select_convnd_algorithm)
from .arena import ALIGNMENT, BufferRequest, align_up, plan_arena
from .ir import Graph
from .registry import COMPILE_RULES, compile_rule
from .threads import limit_blas_threads, resolve_num_threads
from .thunks import (Col2ImThunk, Conv2D1x1Thunk, Conv2DDims, Conv2DThunk, ConvNDDims, ConvNDThunk,
                     ConvTransposeNDThunk, GlobalPoolThunk, Im2ColThunk, PoolThunk, ResizeNearest2xThunk,
                     ResizeNearestThunk, Slice, WindowDims, WinogradFilterThunk)
from .thunks import (AvgPool2DBackwardThunk, ConvBackwardInputThunk, ConvBackwardWeightThunk,
                     MaxPool2DBackwardThunk)


@dataclass(frozen=True, eq=False)
class Buf:
    """A symbolic buffer: a node value, a derived constant, a temp or scratch."""
    id: int
    nbytes: int
    role: str                 # 'input' | 'const' | 'temp' | 'scratch'
    name: str

    def __repr__(self):
        return f"Buf#{self.id}({self.role} {self.name} {self.nbytes}B)"


class CompileContext:
    """What a compile rule may ask for: buffers of nodes, new buffers, options."""

    def __init__(self, graph, conv_algorithm, num_threads, flags):
        self.graph = graph
        self.conv_algorithm = conv_algorithm
        self.num_threads = num_threads
        self.flags = flags
        self.thunks = []
        self.bufs = []
        self.node_buf = {}
        self.const_values = {}     # Buf -> float32 array
        self.live = None           # ids of the nodes the outputs need (set by compile)

    def _new(self, nbytes, role, name):
        b = Buf(len(self.bufs), int(nbytes), role, name)
        self.bufs.append(b)
        return b

    def buf(self, node_id):
        """The buffer holding a node's value (created on first request)."""
        b = self.node_buf.get(node_id)
        if b is None:
            node = self.graph.node(node_id)
            nbytes = int(np.prod(node.shape, dtype=np.int64)) * np.dtype(node.dtype).itemsize
            role = {"input": "input", "constant": "const"}.get(node.op, "temp")
            b = self._new(nbytes, role, node.name)
            if role == "const":
                self.const_values[b] = node.value
            self.node_buf[node_id] = b
        return b

    def constant(self, array, name):
        arr = np.ascontiguousarray(array, dtype=np.float32)
        b = self._new(arr.nbytes, "const", name)
        self.const_values[b] = arr
        return b

    def int32_constant(self, array, name):
        """An int32 constant (e.g. index tables), stored as its float32 bit
        pattern; the kernel views the slice as int32."""
        arr = np.ascontiguousarray(array, dtype=np.int32)
        return self.constant(arr.view(np.float32), name)

    def is_live(self, node_id):
        return self.live is None or node_id in self.live

    def is_constant(self, node_id):
        return self.graph.node(node_id).op == "constant"

    def temp(self, nbytes, name):
        return self._new(nbytes, "temp", name)

    def scratch(self, nbytes, name):
        return self._new(nbytes, "scratch", name) if nbytes > 0 else None

    def emit(self, thunk):
        self.thunks.append(thunk)

    def alias(self, node_id, src_node_id):
        """Let node_id's value share src_node_id's buffer (a zero-copy reshape).
        Sound because no thunk writes a buffer it also reads: the alias and its
        source are the same bytes and one lifetime."""
        self.node_buf[node_id] = self.buf(src_node_id)


# ---------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------

def conv_dims(node, graph):
    """Conv2DDims for a 1-D or 2-D conv node.

    A 1-D conv [N, C, L] is run as a 2-D conv on [N, C, 1, L] (same bytes):
    the k taps, stride, padding and dilation all run along L, which is the
    contiguous axis, so the kernels' inner loops stay unit-stride."""
    a = node.attrs
    xs = graph.node(node.inputs[0]).shape
    if a.ndim == 1:
        return Conv2DDims(xs[0], xs[1], 1, xs[2], node.shape[1], 1, node.shape[2],
                          1, a.kernel[0], 1, a.stride[0], 0, a.pads_begin[0], 1, a.dilation[0], a.groups)
    if a.ndim == 2:
        return Conv2DDims(xs[0], xs[1], xs[2], xs[3], node.shape[1], node.shape[2], node.shape[3],
                          a.kernel[0], a.kernel[1], a.stride[0], a.stride[1], a.pads_begin[0],
                          a.pads_begin[1], a.dilation[0], a.dilation[1], a.groups)
    raise NotImplementedError(f"conv with {a.ndim} spatial dims")


def compile_conv(ctx, node):
    if node.attrs.ndim == 3:
        return compile_conv_nd(ctx, node)
    dims = conv_dims(node, ctx.graph)
    op = f"conv{node.attrs.ndim}d {node.name!r}"
    algo = select_conv_algorithm(dims, ctx.conv_algorithm, ctx.flags, op=op)
    x, w = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1])
    bias = ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None
    y = ctx.buf(node.id)
    t = ctx.num_threads
    if algo == ConvAlgorithm.GEMM_1X1:
        ctx.emit(Conv2D1x1Thunk(node.name, x, w, bias, y, dims.n, dims.c_in, dims.c_out,
                                dims.h * dims.w, dims.groups, t))
        return
    block = 0
    if algo == ConvAlgorithm.IM2COL:
        block = _conv2d.im2col_col_block(dims.as_tuple(), t)
    if algo == ConvAlgorithm.WINOGRAD:
        block = _conv2d.winograd_tile_block(dims.as_tuple(), t)
        wnode = node.inputs[1]
        if ctx.is_constant(wnode):
            # Transform once, now; runs only read U.
            u = _conv2d.winograd_filter_transform(ctx.graph.node(wnode).value)
            w = ctx.constant(u, node.name + ".winograd_U")
        else:
            u = ctx.temp(16 * dims.c_out * dims.c_in * 4, node.name + ".winograd_U")
            ctx.emit(WinogradFilterThunk(node.name, w, u, dims.c_out, dims.c_in))
            w = u
    scratch_nbytes = 4 * _conv2d.scratch_floats(dims.as_tuple(), int(algo), t)
    scratch = ctx.scratch(scratch_nbytes, node.name + ".scratch")
    ctx.emit(Conv2DThunk(node.name, x, w, bias, y, scratch, dims, algo, t, block))


# --- conv3d and conv-transpose (N-d, src/_convnd.pyx) ---

def convnd_dims(node, graph):
    """ConvNDDims of a conv3d or conv-transpose node (padded to three axes)."""
    return ConvNDDims.from_attrs(graph.node(node.inputs[0]).shape, node.shape, node.attrs)


def _emit_conv_nd(ctx, node, thunk_cls, op):
    dims = convnd_dims(node, ctx.graph)
    transposed = thunk_cls.transposed
    t = ctx.num_threads
    algo = select_convnd_algorithm(dims, ctx.conv_algorithm, ctx.flags, op=op, transposed=transposed,
                                   nthreads=t)
    x, w = ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1])
    bias = ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None
    nfloats = _convnd.scratch_floats(dims.as_tuple(), transposed, algo == ConvAlgorithm.IM2COL, t)
    scratch = ctx.scratch(4 * nfloats, node.name + ".scratch")
    ctx.emit(thunk_cls(node.name, x, w, bias, ctx.buf(node.id), scratch, dims, algo, t))


def compile_conv_nd(ctx, node):
    _emit_conv_nd(ctx, node, ConvNDThunk, f"conv3d {node.name!r}")


def compile_conv_transpose(ctx, node):
    _emit_conv_nd(ctx, node, ConvTransposeNDThunk, f"conv_transpose{node.attrs.ndim}d {node.name!r}")


# --- pooling / resize / im2col ---

def _window_dims(n, c, image, out, a):
    return WindowDims.from_nd(n, c, image, out, a.kernel, a.stride, a.pads_begin, a.pads_end, a.dilation)


def compile_pool(ctx, node):
    a = node.attrs
    xs = ctx.graph.node(node.inputs[0]).shape
    dims = _window_dims(xs[0], xs[1], xs[2:], node.shape[2:], a)
    kind = _pool.POOL_MAX if a.kind == "max" else _pool.POOL_AVG
    w_chunk = min(_pool.W_CHUNK, dims.out[2])
    t = ctx.num_threads
    indices, mode = None, _pool.INDICES_NONE
    if a.indices != "none":
        # Graph.max_pool* appends the indices node right after its pool node.
        inode = ctx.graph.node(node.id + 1)
        assert inode.op == "pool_indices" and inode.inputs == (node.id,), inode
        if ctx.is_live(inode.id):
            indices = ctx.buf(inode.id)
            mode = {"onnx": _pool.INDICES_ONNX, "onnx_colmajor": _pool.INDICES_ONNX_COL}.get(
                a.indices, _pool.INDICES_PLANE)
    scratch = ctx.scratch(4 * _pool.scratch_floats(kind, w_chunk, t), node.name + ".scratch")
    ctx.emit(PoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), indices, scratch, dims, kind,
                       a.count_include_pad, a.divisor_override, mode, w_chunk, t))


def compile_pool_indices(ctx, node):
    """Nothing to emit: the producing PoolThunk writes this buffer."""


def compile_global_pool(ctx, node):
    xs = ctx.graph.node(node.inputs[0]).shape
    planes, spatial = xs[0] * xs[1], int(np.prod(xs[2:]))
    kind = _pool.POOL_MAX if node.attrs.kind == "max" else _pool.POOL_AVG
    scratch = ctx.scratch(4 * _pool.global_scratch_floats(planes, spatial), node.name + ".scratch")
    ctx.emit(GlobalPoolThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), scratch, planes, spatial,
                             kind))


def is_nearest_2x(in_sizes, tables):
    """True when a 2-D nearest resize is the exact 2x pixel duplication."""
    return len(in_sizes) == 2 and all(
        len(t) == 2 * s and np.array_equal(t, np.arange(2 * s) // 2) for s, t in zip(in_sizes, tables))


def compile_resize_nearest(ctx, node):
    xs = ctx.graph.node(node.inputs[0]).shape
    tables = node.attrs.tables
    x, y = ctx.buf(node.inputs[0]), ctx.buf(node.id)
    planes = xs[0] * xs[1]
    if is_nearest_2x(xs[2:], tables):
        ctx.emit(ResizeNearest2xThunk(node.name, x, y, planes, xs[2], xs[3]))
        return
    pad = 3 - len(tables)
    size = (1,) * pad + tuple(xs[2:])
    out = (1,) * pad + tuple(node.shape[2:])
    flat = np.concatenate([np.zeros(1, np.int32)] * pad + [np.asarray(t, np.int32) for t in tables])
    tab = ctx.int32_constant(flat, node.name + ".index_tables")
    ctx.emit(ResizeNearestThunk(node.name, x, y, tab, planes, size, out))


def _layout_code(layout):
    return _im2col.LAYOUT_ROWS if layout == "rows" else _im2col.LAYOUT_ONNX


def compile_im2col(ctx, node):
    a = node.attrs
    xs = ctx.graph.node(node.inputs[0]).shape
    dims = _window_dims(xs[0], xs[1], a.image, a.blocks, a)
    ctx.emit(Im2ColThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dims, _layout_code(a.layout)))


def compile_col2im(ctx, node):
    a = node.attrs
    dims = _window_dims(node.shape[0], node.shape[1], a.image, a.blocks, a)
    t = ctx.num_threads
    scratch = ctx.scratch(4 * _im2col.col2im_scratch_floats(dims.as_tuple(), t), node.name + ".scratch")
    ctx.emit(Col2ImThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), scratch, dims,
                         _layout_code(a.layout), t))


RULES = {
    "conv": compile_conv,
    "conv_transpose": compile_conv_transpose,
    # --- pooling / resize / im2col ---
    "pool": compile_pool,
    "pool_indices": compile_pool_indices,
    "global_pool": compile_global_pool,
    "resize_nearest": compile_resize_nearest,
    "im2col": compile_im2col,
    "col2im": compile_col2im,
}


# ===========================================================================
# --- training: rules for gradient kernels and training-step ops ---
# ===========================================================================

def compile_conv_backward_input(ctx, node):
    dy_node = ctx.graph.node(node.inputs[0])
    dims = ConvNDDims.from_attrs(node.shape, dy_node.shape, node.attrs)
    algo = select_conv_backward_algorithm(dims, ctx.conv_algorithm, ctx.flags)
    t = ctx.num_threads
    nbytes = 4 * _backward.conv_backward_input_scratch_floats(dims.as_tuple(), int(algo), t)
    ctx.emit(ConvBackwardInputThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                    ctx.buf(node.id), ctx.scratch(nbytes, node.name + ".scratch"),
                                    dims, algo, t))


def compile_conv_backward_weight(ctx, node):
    x_node, dy_node = ctx.graph.node(node.inputs[0]), ctx.graph.node(node.inputs[1])
    dims = ConvNDDims.from_attrs(x_node.shape, dy_node.shape, node.attrs)
    algo = select_conv_backward_algorithm(dims, ctx.conv_algorithm, ctx.flags)
    t = ctx.num_threads
    nbytes = 4 * _backward.conv_backward_weight_scratch_floats(dims.as_tuple(), int(algo), t)
    ctx.emit(ConvBackwardWeightThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                     ctx.buf(node.id), ctx.scratch(nbytes, node.name + ".scratch"),
                                     dims, algo, t))


def _pool_backward_dims(node, x_shape, dy_shape):
    """WindowDims of a pool gradient; the kernels take 1-D and 2-D pools (the
    graph methods exist for those only), so the depth axis is trivial."""
    assert node.attrs.ndim in (1, 2), node
    return _window_dims(x_shape[0], x_shape[1], x_shape[2:], dy_shape[2:], node.attrs)


def compile_max_pool_backward(ctx, node):
    dims = _pool_backward_dims(node, node.shape, ctx.graph.node(node.inputs[1]).shape)
    ctx.emit(MaxPool2DBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                    ctx.buf(node.id), dims, ctx.num_threads))


def compile_avg_pool_backward(ctx, node):
    dims = _pool_backward_dims(node, node.shape, ctx.graph.node(node.inputs[0]).shape)
    ctx.emit(AvgPool2DBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dims,
                                    node.attrs.count_include_pad, node.attrs.divisor_override, ctx.num_threads))


RULES.update({
    "conv_backward_input": compile_conv_backward_input,
    "conv_backward_weight": compile_conv_backward_weight,
    "max_pool_backward": compile_max_pool_backward,
    "avg_pool_backward": compile_avg_pool_backward,
})


# Rules not yet moved into their op family register here.
for _op, _fn in RULES.items():
    compile_rule(_op)(_fn)
del _op, _fn


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def _live_nodes(graph):
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.id in live:
            live.update(node.inputs)
    return [n for n in graph.nodes if n.id in live]


def _lifetimes(ctx, output_bufs):
    """[first, last] thunk index per arena buffer (see arena.py)."""
    end = len(ctx.thunks)
    first, last = {}, {}
    for i, th in enumerate(ctx.thunks):
        for name in th.writes + th.scratch_fields:
            b = getattr(th, name)
            if isinstance(b, Buf):
                first.setdefault(b, i)
                last[b] = max(last.get(b, i), i)
        for name in th.reads:
            b = getattr(th, name)
            if isinstance(b, Buf):
                last[b] = max(last.get(b, i), i)
    reqs = []
    for b in ctx.bufs:
        if b.role == "const":
            continue
        if b.role == "input":
            f, l = -1, last.get(b, -1)
        else:
            if b not in first:
                continue          # never written: unused
            f, l = first[b], last[b]
        if b in output_bufs:
            l = end
        reqs.append(BufferRequest(b, b.nbytes, f, l))
    return reqs


def compile(graph, conv_algorithm="auto", num_threads=None, reuse_arena=True):
    """Compile `graph` into an executable :class:`~rlx_cpu.plan.Plan`.

    conv_algorithm: 'auto' (choose per shape) or one of 'reference', 'im2col',
        'direct', 'winograd' forced on every conv (ValueError where ineligible).
        conv3d and conv-transpose know 'reference' and 'im2col' (their GEMM
        path: vol2col + GEMM, or GEMM + col2vol).
    num_threads: OpenMP threads for this plan (default: get_num_threads()).
    reuse_arena: share bytes between buffers with disjoint lifetimes.
    """
    from .plan import Plan

    if not isinstance(graph, Graph):
        raise TypeError(f"compile: expected a rlx_cpu.Graph, got {type(graph).__name__}")
    if not graph.outputs:
        raise ValueError("compile: the graph has no outputs; call graph.output(...) first")
    if isinstance(conv_algorithm, ConvAlgorithm):
        conv_algorithm = conv_algorithm.label
    if conv_algorithm not in ("auto", "reference", "im2col", "direct", "winograd"):
        raise ValueError("compile: conv_algorithm must be one of 'auto', 'reference', 'im2col', "
                         f"'direct', 'winograd', got {conv_algorithm!r}")
    nthreads = resolve_num_threads(num_threads)
    limit_blas_threads()

    ctx = CompileContext(graph, conv_algorithm, nthreads, ConvFlags.from_env())
    live_nodes = _live_nodes(graph)
    ctx.live = {n.id for n in live_nodes}
    input_nodes = []
    for node in live_nodes:
        if node.op == "input":
            input_nodes.append(node)
            ctx.buf(node.id)
        elif node.op == "constant":
            continue
        else:
            COMPILE_RULES[node.op](ctx, node)
    # Every graph input is part of the contract, even one no output needs.
    for node in graph.nodes:
        if node.op == "input" and node not in input_nodes:
            input_nodes.append(node)
            ctx.buf(node.id)
    output_bufs = {ctx.buf(i) for i in graph.outputs}

    arena = plan_arena(_lifetimes(ctx, output_bufs), reuse=reuse_arena)
    # Lay out only the constants a thunk reads or an output returns: a weight
    # replaced by its compile-time transform (Winograd U) is not kept.
    used = {getattr(th, f.name) for th in ctx.thunks for f in dataclasses.fields(th)
            if isinstance(getattr(th, f.name), Buf)} | output_bufs
    const_offsets, const_nbytes = {}, 0
    for b in ctx.bufs:
        if b.role == "const" and b in ctx.const_values and b in used:
            const_offsets[b] = const_nbytes
            const_nbytes += align_up(b.nbytes, ALIGNMENT)

    def to_slice(b):
        if b.role == "const":
            return Slice("const", const_offsets[b], b.nbytes)
        return Slice("arena", arena.offsets[b], b.nbytes)

    thunks = []
    for th in ctx.thunks:
        repl = {f.name: to_slice(getattr(th, f.name)) for f in dataclasses.fields(th)
                if isinstance(getattr(th, f.name), Buf)}
        thunks.append(dataclasses.replace(th, **repl))

    const_items = [(const_offsets[b], ctx.const_values[b]) for b in const_offsets]
    inputs = [(n.name, n.shape, to_slice(ctx.buf(n.id))) for n in input_nodes]
    outputs = [(graph.node(i).shape, to_slice(ctx.buf(i)), graph.node(i).dtype) for i in graph.outputs]
    return Plan(tuple(thunks), inputs, outputs, arena, const_nbytes, const_items, nthreads)
