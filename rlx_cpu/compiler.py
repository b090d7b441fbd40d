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

from . import _im2col, _pool, _train
from .algorithms import ConvAlgorithm, ConvFlags
from .arena import ALIGNMENT, BufferRequest, align_up, plan_arena
from .ir import Graph
from .registry import COMPILE_RULES, compile_rule
from .threads import limit_blas_threads, resolve_num_threads
from .thunks import (Col2ImThunk, GlobalPoolThunk, Im2ColThunk, PoolThunk, ResizeNearest2xThunk,
                     ResizeNearestThunk, Slice, WindowDims)
from .thunks import (AddThunk, AvgPool2DBackwardThunk, BiasAddThunk, BiasGradThunk, GemmThunk,
                     MaxPool2DBackwardThunk, ReluBackwardThunk, ReluThunk, SoftmaxCrossEntropyBackwardThunk,
                     SoftmaxCrossEntropyThunk)


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


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64))


def compile_elementwise(ctx, node):
    record, op = {"relu": (ReluThunk, _train.ELEM_RELU),
                  "relu_backward": (ReluBackwardThunk, _train.ELEM_RELU_BACKWARD),
                  "add": (AddThunk, _train.ELEM_ADD)}[node.op]
    b = ctx.buf(node.inputs[1]) if len(node.inputs) > 1 else None
    ctx.emit(record(node.name, ctx.buf(node.inputs[0]), b, ctx.buf(node.id), op, _numel(node.shape),
                    ctx.num_threads))


def compile_bias_add(ctx, node):
    n, c = node.shape[:2]
    ctx.emit(BiasAddThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), ctx.buf(node.id),
                          n, c, _numel(node.shape[2:]), ctx.num_threads))


def compile_bias_grad(ctx, node):
    dy_shape = ctx.graph.node(node.inputs[0]).shape
    ctx.emit(BiasGradThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dy_shape[0], dy_shape[1],
                           _numel(dy_shape[2:]), ctx.num_threads))


def compile_reshape(ctx, node):
    ctx.alias(node.id, node.inputs[0])


def compile_linear(ctx, node):
    x_shape = ctx.graph.node(node.inputs[0]).shape
    bias = ctx.buf(node.inputs[2]) if len(node.inputs) > 2 else None
    n_rows, n_out = node.shape
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), bias, ctx.buf(node.id),
                       n_rows, n_out, x_shape[1], False, True, ctx.num_threads))


def compile_linear_backward_input(ctx, node):
    dy_shape = ctx.graph.node(node.inputs[0]).shape          # dx = dy [N, out] . W [out, in]
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), None, ctx.buf(node.id),
                       node.shape[0], node.shape[1], dy_shape[1], False, False, ctx.num_threads))


def compile_linear_backward_weight(ctx, node):
    x_shape = ctx.graph.node(node.inputs[0]).shape           # dW = dy^T [out, N] . x [N, in]
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[1]), ctx.buf(node.inputs[0]), None, ctx.buf(node.id),
                       node.shape[0], node.shape[1], x_shape[0], True, False, ctx.num_threads))


def compile_softmax_cross_entropy(ctx, node):
    n, k = ctx.graph.node(node.inputs[0]).shape
    ctx.emit(SoftmaxCrossEntropyThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                      ctx.buf(node.id), n, k))


def compile_softmax_cross_entropy_backward(ctx, node):
    n, k = node.shape
    ctx.emit(SoftmaxCrossEntropyBackwardThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]),
                                              ctx.buf(node.inputs[2]), ctx.buf(node.id), n, k))


RULES.update({
    "max_pool_backward": compile_max_pool_backward,
    "avg_pool_backward": compile_avg_pool_backward,
    "relu": compile_elementwise,
    "relu_backward": compile_elementwise,
    "add": compile_elementwise,
    "bias_add": compile_bias_add,
    "bias_grad": compile_bias_grad,
    "reshape": compile_reshape,
    "linear": compile_linear,
    "linear_backward_input": compile_linear_backward_input,
    "linear_backward_weight": compile_linear_backward_weight,
    "softmax_cross_entropy": compile_softmax_cross_entropy,
    "softmax_cross_entropy_backward": compile_softmax_cross_entropy_backward,
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
