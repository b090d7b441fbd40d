"""Compile a Graph into a Plan: node -> thunks, then arena planning.

Compilation happens once.  Compile rules (one per node op, registered by the
op families in ``rlx_cpu.registry.COMPILE_RULES``) read the
node's static shapes and attributes and emit thunk records whose slice fields
are still symbolic :class:`Buf` handles; after every rule ran, the planner
gives each handle a byte range and the records are finalised with real
:class:`~rlx_cpu.thunks.Slice` values.
"""
import dataclasses
from dataclasses import dataclass

import numpy as np

from .algorithms import CONV_ALGORITHM_NAMES, ConvAlgorithm, ConvFlags
from .arena import ALIGNMENT, BufferRequest, align_up, plan_arena
from .debug import GUARD, resolve_debug
from .ir import Graph
from .passes import run_passes, summary as pass_summary
from .registry import COMPILE_RULES
from .shapes import INDEX_MAX, nbytes_of
from .threads import limit_blas_threads, resolve_adaptive_threads, resolve_num_threads
from .thunks import Slice


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
        self.tune = False          # time conv algorithms (compile(tune=True))
        self.tuning = {}           # node name -> (chosen label, {label: ms})
        self.view_of = {}          # Buf -> (parent Buf, byte offset): a value placed inside another

    def _new(self, nbytes, role, name):
        nbytes = int(nbytes)
        if not 0 <= nbytes <= INDEX_MAX:
            raise ValueError(f"compile: {role} buffer {name!r} needs {nbytes} bytes, outside what the "
                             f"kernels' Py_ssize_t index type can address (0..{INDEX_MAX})")
        b = Buf(len(self.bufs), nbytes, role, name)
        self.bufs.append(b)
        return b

    def buf(self, node_id):
        """The buffer holding a node's value (created on first request)."""
        b = self.node_buf.get(node_id)
        if b is None:
            node = self.graph.node(node_id)
            nbytes = nbytes_of(node.shape, np.dtype(node.dtype).itemsize)
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

    def maybe_in_place(self, node_id):
        """Let a pointwise node the in_place pass marked write into its
        input's buffer, if that buffer is an intermediate (never a graph
        input, constant or output) and holds no other value (it is not a
        view of a concat's buffer, nor has views: overwriting those bytes
        would change values other nodes may still read).  Each such op is one
        thunk computing y[i] from x[i] alone, so reading and writing the same
        bytes is sound."""
        src = getattr(self.graph, "in_place", {}).get(node_id)
        if src is None:
            return
        b = self.buf(src)
        if b in self.view_of or any(p is b for p, _ in self.view_of.values()):
            return
        if b.role == "temp" and not any(self.node_buf.get(o) is b for o in self.graph.outputs):
            self.node_buf[node_id] = b

    def can_place_in(self, node_id):
        """Whether node_id's value may live inside another buffer (a view):
        an intermediate (not a graph input, constant or output) whose buffer
        no other node shares (an in-place op or a zero-copy reshape) and that
        is not already placed elsewhere."""
        b = self.buf(node_id)
        return (b.role == "temp" and node_id not in self.graph.outputs and b not in self.view_of
                and sum(v is b for v in self.node_buf.values()) == 1)

    def can_hold_views(self, node_id):
        """Whether other values may be placed inside node_id's buffer: one
        no other node shares, in the arena or a graph output's array (never
        a graph input's or a constant)."""
        b = self.buf(node_id)
        return b.role == "temp" and sum(v is b for v in self.node_buf.values()) == 1

    def place_in(self, node_id, parent_node_id, offset):
        """Let node_id's value live at byte `offset` of parent_node_id's
        buffer (a Concat's input written straight into its part of the
        output): the planner gives the parent's buffer a lifetime covering
        every use of the view, and the view no bytes of its own."""
        self.view_of[self.buf(node_id)] = (self.buf(parent_node_id), int(offset))

    def root(self, b):
        """(buffer, byte offset) where a buffer's bytes are: itself at 0,
        or, for a view, its outermost parent."""
        off = 0
        while b in self.view_of:
            b, o = self.view_of[b]
            off += o
        return b, off

    def alias(self, node_id, src_node_id):
        """Let node_id's value share src_node_id's buffer (a zero-copy reshape).
        Sound because no thunk writes a buffer it also reads: the alias and its
        source are the same bytes and one lifetime."""
        self.node_buf[node_id] = self.buf(src_node_id)


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
    first, last = {}, {}
    for i, th in enumerate(ctx.thunks):
        # a view's uses are its outermost parent's
        for name in th.writes + th.scratch_fields:
            b = getattr(th, name)
            if isinstance(b, Buf):
                b = ctx.root(b)[0]
                first.setdefault(b, i)
                last[b] = max(last.get(b, i), i)
        for name in th.reads:
            b = getattr(th, name)
            if isinstance(b, Buf):
                b = ctx.root(b)[0]
                last[b] = max(last.get(b, i), i)
    reqs = []
    for b in ctx.bufs:
        if b in ctx.view_of:
            continue          # its bytes are its parent's
        # Inputs and outputs live in the caller's arrays (segments bound per
        # run), constants in the shared constant buffer: the arena holds only
        # intermediates and scratch.
        if b.role in ("const", "input") or b in output_bufs:
            continue
        if b not in first:
            continue          # never written: unused
        reqs.append(BufferRequest(b, b.nbytes, first[b], last[b]))
    return reqs


def _check_total(what, nbytes, bufs):
    """The arena and the constant segment are indexed with Py_ssize_t."""
    if nbytes > INDEX_MAX:
        big = sorted(bufs, key=lambda b: -b.nbytes)[:3]
        raise MemoryError(f"compile: the plan's {what} would be {nbytes} bytes, more than a Py_ssize_t "
                          f"can address ({INDEX_MAX}); largest buffers: "
                          + ", ".join(f"{b.name!r} {b.nbytes} B" for b in big))


def _check_inputs_read_only(ctx):
    """Kernels read graph inputs in the caller's arrays: no thunk may write an
    input (or a constant).  A compile rule breaking this is a bug in rlx_cpu,
    reported here before anything runs."""
    for i, th in enumerate(ctx.thunks):
        for name in th.writes + th.scratch_fields:
            b = getattr(th, name)
            if isinstance(b, Buf) and b.role in ("input", "const"):
                raise RuntimeError(f"compile: thunk {i} ({th.kind} for {th.op_name!r}) would write "
                                   f"{b.role} {b.name!r} through its field {name!r}; graph inputs and "
                                   "constants are read-only")


def compile(graph, conv_algorithm="auto", num_threads=None, reuse_arena=True, debug=None, passes=True,
            adaptive_threads=None, tune=False):
    """Compile `graph` into an executable :class:`~rlx_cpu.plan.Plan`.

    conv_algorithm: 'auto' (choose per shape) or one of 'reference', 'im2col',
        'direct', 'winograd' (F(2x2,3x3)), 'winograd_f4' (F(4x4,3x3)) forced on
        every conv (ValueError where ineligible).
        conv3d and conv-transpose know 'reference' and 'im2col' (their GEMM
        path: vol2col + GEMM, or GEMM + col2vol).
    num_threads: OpenMP threads for this plan (default: get_num_threads()).
    reuse_arena: share bytes between buffers with disjoint lifetimes.
    debug: check every launch's slices and writes, with guard bytes around
        every arena buffer (slow; see rlx_cpu/debug.py).  None: the RLX_DEBUG
        environment variable ('1' on, '0' or unset off).
    passes: the graph passes run first (rlx_cpu/passes.py): True (all: constant
        folding, batch-norm folding, conv epilogue fusion, dead-node removal,
        in-place elementwise ops), False/None (none, the graph as built) or a
        list of pass names.  ``print(plan)`` says what each did.
    adaptive_threads: let each run of a multi-threaded plan fall back to one
        thread while that is measured to be faster (a busy competing process
        on the same cores); results are identical either way.  None: the
        RLX_ADAPTIVE_THREADS environment variable ('1' or unset on, '0' off).
        Debug plans always run on exactly num_threads.
    tune: with conv_algorithm='auto', time every eligible algorithm of each
        conv1d/conv2d shape now, at num_threads, and keep the fastest
        (rlx_cpu/tuning.py; choices are cached per process).  ``plan.tuning``
        and ``print(plan)`` list the timings.
    """
    return compile_with_flags(graph, ConvFlags.from_env(), conv_algorithm, num_threads, reuse_arena, debug,
                              passes, adaptive_threads, tune)


def compile_with_flags(graph, flags, conv_algorithm="auto", num_threads=None, reuse_arena=True, debug=None,
                       passes=True, adaptive_threads=None, tune=False):
    """compile() under the given ConvFlags instead of the environment's."""
    from .plan import Plan

    if not isinstance(graph, Graph):
        raise TypeError(f"compile: expected a rlx_cpu.Graph, got {type(graph).__name__}")
    if not graph.outputs:
        raise ValueError("compile: the graph has no outputs; call graph.output(...) first")
    if isinstance(conv_algorithm, ConvAlgorithm):
        conv_algorithm = conv_algorithm.label
    if conv_algorithm not in CONV_ALGORITHM_NAMES:
        raise ValueError("compile: conv_algorithm must be one of 'auto', 'reference', 'im2col', "
                         f"'direct', 'winograd', 'winograd_f4', got {conv_algorithm!r}")
    # A forced conv algorithm (or RLX_FAST_CONV off) is the user's choice for
    # every conv: the blocked_layout pass, which picks the blocked kernels,
    # runs only under auto.
    nthreads = resolve_num_threads(num_threads)
    graph = run_passes(graph, passes, skip=() if conv_algorithm == "auto" and flags.fast else ("blocked_layout",),
                       nthreads=nthreads)
    debug = resolve_debug(debug)
    adaptive_threads = resolve_adaptive_threads(adaptive_threads)
    guard = GUARD if debug else 0
    limit_blas_threads()

    ctx = CompileContext(graph, conv_algorithm, nthreads, flags)
    ctx.tune = bool(tune) and conv_algorithm == "auto" and flags.fast
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
            ctx.maybe_in_place(node.id)
            COMPILE_RULES[node.op](ctx, node)
    # Every graph input is part of the contract, even one no output needs.
    for node in graph.nodes:
        if node.op == "input" and node not in input_nodes:
            input_nodes.append(node)
            ctx.buf(node.id)
    output_bufs = {ctx.buf(i) for i in graph.outputs}
    _check_inputs_read_only(ctx)

    arena = plan_arena([BufferRequest(r.key, r.nbytes + 2 * guard, r.first, r.last)
                        for r in _lifetimes(ctx, output_bufs)], reuse=reuse_arena)
    _check_total("arena", arena.nbytes, [b for b in arena.offsets])
    # Lay out only the constants a thunk reads or an output returns: a weight
    # replaced by its compile-time transform (Winograd U) is not kept.
    used = {getattr(th, f.name) for th in ctx.thunks for f in dataclasses.fields(th)
            if isinstance(getattr(th, f.name), Buf)} | output_bufs
    const_offsets, const_nbytes = {}, 0
    for b in ctx.bufs:
        if b.role == "const" and b in ctx.const_values and b in used:
            const_offsets[b] = const_nbytes
            const_nbytes += align_up(b.nbytes, ALIGNMENT)

    _check_total("constant segment", const_nbytes, list(const_offsets))
    # Segments bound per run: input i is read where the caller's array i is;
    # an output a kernel writes goes to the caller's array of its first
    # position in the output list (later repeats are copied from there).
    segment_of = {ctx.buf(n.id): f"input:{i}" for i, n in enumerate(input_nodes)}
    for j, node_id in enumerate(graph.outputs):
        b = ctx.buf(node_id)
        if b.role != "const":
            segment_of.setdefault(b, f"output:{j}")

    def to_slice(b):
        if b in ctx.view_of:
            root, off = ctx.root(b)
            s = to_slice(root)
            return Slice(s.segment, s.offset + off, b.nbytes)
        if b.role == "const":
            return Slice("const", const_offsets[b], b.nbytes)
        if b in segment_of:
            return Slice(segment_of[b], 0, b.nbytes)
        return Slice("arena", arena.offsets[b] + guard, b.nbytes)

    thunks = []
    for th in ctx.thunks:
        repl = {f.name: to_slice(getattr(th, f.name)) for f in dataclasses.fields(th)
                if isinstance(getattr(th, f.name), Buf)}
        thunks.append(dataclasses.replace(th, **repl))

    const_items = [(const_offsets[b], ctx.const_values[b]) for b in const_offsets]
    inputs = [(n.name, n.shape, to_slice(ctx.buf(n.id))) for n in input_nodes]
    outputs = [(graph.node(i).shape, to_slice(ctx.buf(i)), graph.node(i).dtype) for i in graph.outputs]
    plan = Plan(tuple(thunks), inputs, outputs, arena, const_nbytes, const_items, nthreads, debug,
                adaptive_threads)
    plan.pass_summary = pass_summary(graph)
    plan.tuning = dict(ctx.tuning)
    return plan
