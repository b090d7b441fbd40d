"""Graph passes run by :func:`rlx_cpu.compile` before the compile rules.

Each pass is a pure function ``Graph -> Graph``: it never changes the graph
it is given and returns a new one (node ids renumbered, node names and output
order kept), whose ``pass_log`` ends with ``(pass name, {what: count})``.

==========================  ======================================================
``fold_constants``          a node whose inputs are all constants is computed once,
                            now, by its own compile rule and kernel (a one-node
                            plan), and becomes a constant
``fold_batch_norm``         ``batch_norm(conv(x, W, b))`` with W (and b) constant
                            and the conv read only by the batch norm becomes
                            ``conv(x, W * k, b * k + shift)`` (float64 maths)
``fuse_silu``               ``mul(x, sigmoid(x))`` (either order, the sigmoid read
                            only by the mul, no broadcasting) becomes one
                            ``silu(x)``: SiLU/swish as exporters write it
``fuse_epilogue``           ``act(conv(x) [+ bias] [+ skip])``: the bias_add,
                            the residual add of a tensor of the output's shape and
                            the activation (relu, clip, leaky_relu, sigmoid,
                            hard_sigmoid, hard_swish, tanh, silu) after a conv1d/conv2d
                            become its epilogue (:class:`~rlx_cpu.ops.conv.ConvEpilogue`),
                            applied by the kernel to each output block as it is
                            computed; every intermediate must have that one reader
                            and not be a graph output
``fuse_inverted_residual``  after ``blocked_layout``: expand 1x1 -> depthwise
                            3x3 -> project 1x1 (MobileNetV2's block) on blocked
                            values becomes one ``inverted_residual_nchwc`` node
                            (the inner tensors stay in a per-thread band buffer)
``fuse_norm_relu``          after ``blocked_layout``: ``relu(batch_norm_nchwc(x))``,
                            the batch norm read only by the relu and not a graph
                            output, becomes one batch norm with the relu in its
                            pass over the tensor (DenseNet's norm-relu before
                            each conv, which no conv can absorb)
``fuse_norm_conv``          after ``fuse_norm_relu``: a 1x1 ``conv2d_nchwc`` (stride
                            1, no padding, one group) reading a
                            ``batch_norm_nchwc`` (relu fused or not) that only it
                            reads becomes one ``conv2d_nchwc_norm``: the kernel
                            normalises each chunk of the input as its tiles
                            read it (the same bits), so the normed tensor
                            never goes to memory (DenseNet's dense layers)
``dce``                     nodes no output depends on are removed (graph inputs
                            stay: they are the plan's contract)
``in_place``                an elementwise node (not a graph output) whose input
                            has no later reader (through reshape aliases too)
                            and is not a graph input, constant or output is
                            marked to write into
                            that input's buffer (``graph.in_place``, honoured by
                            the compiler)
==========================  ======================================================

Training graphs: the passes run on any graph, forward and backward alike.
:func:`rlx_cpu.autograd.grads` appends the backward nodes *before* compile,
so every value a gradient reads (a relu output for ``relu_backward``, a conv
input for the weight gradient) is a node with a reader and is kept; fusion
only removes values with a single reader, folding only replaces values by
equal constants, and the in-place rule never overwrites a value that is read
later.  The rewrites therefore preserve every value a training plan returns.
A fused conv has no gradient rule: call ``grads`` on the graph you built, not
on the output of these passes.

``compile(graph, passes=...)`` takes True (all, in the order of
:data:`DEFAULT_PASSES`), False/None (none) or a list of pass names.
"""
import dataclasses
import math

import numpy as np

from .ir import Graph

__all__ = ["DEFAULT_PASSES", "PASSES", "run_passes", "fold_constants", "fold_batch_norm", "fuse_silu",
           "fuse_epilogue", "blocked_layout", "fuse_inverted_residual", "fuse_norm_relu", "fuse_norm_conv", "dce",
           "in_place",
           "summary"]

CONV_OPS = ("conv1d", "conv2d", "conv3d")
EPILOGUE_CONV_OPS = ("conv1d", "conv2d")      # the ops whose kernels run an epilogue
ACTIVATIONS = ("relu", "clip", "leaky_relu", "sigmoid", "hard_sigmoid", "hard_swish", "tanh", "silu")
# op -> indices of the inputs the op may overwrite (same shape as its output);
# every one of these ops is one pointwise thunk y[i] = f(x[i], ...)
POINTWISE = dict({a: (0,) for a in ACTIVATIONS},
                 add=(0, 1), broadcast_add=(0, 1), sub=(0, 1), mul=(0, 1), div=(0, 1),
                 bias_add=(0,), batch_norm=(0,), relu_backward=(0, 1), channel_binary_nchwc=(0,),
                 batch_norm_nchwc=(0,))


# ---------------------------------------------------------------------------
# Rebuilding
# ---------------------------------------------------------------------------

class _Rebuild:
    """Copy a graph node by node into a new one, with replacements."""

    def __init__(self, src):
        self.src = src
        self.g = Graph()
        self.map = {}                    # old id -> new Node

    def new(self, op, inputs, shape, name, attrs=None, value=None, dtype="float32"):
        return self.g._add(op, inputs, shape, name, attrs, value, dtype)

    def copy(self, node):
        out = self.g._add(node.op, [self.map[i] for i in node.inputs], node.shape, node.name, node.attrs,
                          node.value, node.dtype)
        self.map[node.id] = out
        return out

    def constant(self, array, name):
        """A new constant named after `name` (made unique)."""
        base, k = name, 1
        while name in self.g._names or name in self.src._names:
            name = f"{base}.{k}"
            k += 1
        return self.g.constant(np.asarray(array, dtype=np.float32), name=name)

    def finish(self, pass_name, counts, in_place=None):
        self.g.outputs = tuple(self.map[i].id for i in self.src.outputs)
        self.g.pass_log = tuple(getattr(self.src, "pass_log", ())) + ((pass_name, dict(counts)),)
        if in_place is None:
            # ids changed: carry earlier in-place marks over by the new ids
            in_place = {self.map[a].id: self.map[b].id for a, b in getattr(self.src, "in_place", {}).items()
                        if a in self.map and b in self.map}
        self.g.in_place = in_place
        return self.g


def _consumers(graph):
    """{node id: [consumer ids, one per use]}."""
    users = {n.id: [] for n in graph.nodes}
    for n in graph.nodes:
        for i in n.inputs:
            users[i].append(n.id)
    return users


def _sole_reader(graph, users, node_id):
    """The one node that reads node_id (once), or None; graph outputs have
    the caller as a reader too."""
    if node_id in graph.outputs:
        return None
    u = users[node_id]
    return graph.node(u[0]) if len(u) == 1 else None


def _rewrite(graph, pass_name, counts, replace, drop):
    """New graph: nodes in `drop` left out, `replace[id](rb)` builds the
    node standing for id at its position, every other node copied."""
    rb = _Rebuild(graph)
    for node in graph.nodes:
        if node.id in drop:
            continue
        if node.id in replace:
            rb.map[node.id] = replace[node.id](rb)
        else:
            rb.copy(node)
    return rb.finish(pass_name, counts)


# ---------------------------------------------------------------------------
# Passes
# ---------------------------------------------------------------------------

def _evaluate(node, inputs):
    """The value of `node` on constant inputs, computed by its own compile
    rule and kernel: a one-node plan with no graph inputs."""
    from .compiler import compile as _compile
    g = Graph()
    ins = [g.constant(graph_input.value, name=graph_input.name) for graph_input in inputs]
    y = g._add(node.op, ins, node.shape, node.name, node.attrs, None, node.dtype)
    g.output(y)
    (out,) = _compile(g, num_threads=1, passes=False).run({})
    return out


def fold_constants(graph):
    """Nodes whose inputs are all constants become constants."""
    users = _consumers(graph)
    rb = _Rebuild(graph)
    folded = 0
    for node in graph.nodes:
        ins = [rb.map[i] for i in node.inputs]
        foldable = (node.op not in ("input", "constant") and ins and all(n.op == "constant" for n in ins)
                    and node.dtype == "float32"
                    # a max pool with indices writes two nodes: keep the pair
                    and not any(graph.node(u).op == "max_pool_indices" for u in users[node.id]))
        if foldable:
            value = _evaluate(node, ins)
            rb.map[node.id] = rb.new("constant", (), node.shape, node.name, value=_frozen(value))
            folded += 1
        else:
            rb.copy(node)
    return rb.finish("fold_constants", {"folded": folded})


def _frozen(value):
    arr = np.array(value, dtype=np.float32, copy=True, order="C")
    arr.setflags(write=False)
    return arr


def fold_batch_norm(graph):
    """batch_norm(conv(x, W, b)) -> conv(x, W * k, b * k + shift)."""
    from .ops.arithmetic import batch_norm_coefficients
    users = _consumers(graph)
    replace, drop = {}, set()
    for bn in graph.nodes:
        if bn.op != "batch_norm":
            continue
        conv = graph.node(bn.inputs[0])
        if conv.op not in CONV_OPS or conv.attrs.epilogue is not None:
            continue
        if _sole_reader(graph, users, conv.id) is not bn:
            continue
        w = graph.node(conv.inputs[1])
        b = graph.node(conv.inputs[2]) if len(conv.inputs) > 2 else None
        if w.op != "constant" or (b is not None and b.op != "constant"):
            continue
        scale, shift, mean, var = (graph.node(i).value for i in bn.inputs[1:])
        k, s = batch_norm_coefficients(scale, shift, mean, var, bn.attrs.epsilon)
        w_new = w.value.astype(np.float64) * k.reshape((-1,) + (1,) * (w.value.ndim - 1))
        b_new = (b.value.astype(np.float64) if b is not None else 0.0) * k + s

        def build(rb, conv=conv, w_new=w_new, b_new=b_new):
            wn = rb.constant(w_new, conv.name + ".weight_bn")
            bnode = rb.constant(b_new, conv.name + ".bias_bn")
            return rb.new(conv.op, [rb.map[conv.inputs[0]], wn, bnode], conv.shape, conv.name, conv.attrs)

        replace[bn.id] = build
        drop.add(conv.id)
    return _rewrite(graph, "fold_batch_norm", {"folded": len(replace)}, replace, drop)


def fuse_silu(graph):
    """mul(x, sigmoid(x)) -> silu(x)."""
    users = _consumers(graph)
    replace, drop = {}, set()
    for mul in graph.nodes:
        if mul.op != "mul" or mul.dtype != "float32":
            continue
        for pos in (0, 1):
            sig = graph.node(mul.inputs[pos])
            x = mul.inputs[1 - pos]
            if (sig.op == "sigmoid" and sig.inputs[0] == x and sig.id not in drop
                    and _sole_reader(graph, users, sig.id) is mul
                    and graph.node(x).shape == sig.shape == mul.shape):

                def build(rb, mul=mul, x=x, attrs=sig.attrs):
                    return rb.new("silu", [rb.map[x]], mul.shape, mul.name, attrs)

                replace[mul.id] = build
                drop.add(sig.id)
                break
    return _rewrite(graph, "fuse_silu", {"fused": len(replace)}, replace, drop)


def fuse_epilogue(graph):
    """conv1d/conv2d [-> bias_add] [-> add(., skip)] [-> activation] -> one
    conv with a fused epilogue."""
    from .ops.conv import ConvEpilogue
    users = _consumers(graph)
    replace, drop, claimed = {}, set(), set()
    counts = {}
    for conv in graph.nodes:
        if conv.op not in EPILOGUE_CONV_OPS or conv.attrs.epilogue is not None:
            continue
        inputs = list(conv.inputs)
        cur, chain = conv, []

        def reader(node_id):
            n = _sole_reader(graph, users, node_id)
            return None if n is None or n.id in claimed else n

        nxt = reader(cur.id)
        if nxt is not None and nxt.op == "bias_add" and len(inputs) == 2 and nxt.inputs[0] == cur.id \
                and nxt.inputs[1] != cur.id:
            inputs.append(nxt.inputs[1])
            chain.append(("bias", nxt))
            cur = nxt
            nxt = reader(cur.id)
        residual = None
        if nxt is not None and nxt.op in ("add", "broadcast_add"):
            a, b = nxt.inputs
            other = b if a == cur.id else a
            if other != cur.id and graph.node(other).shape == cur.shape and nxt.shape == cur.shape \
                    and graph.node(other).dtype == "float32":
                residual = other
                chain.append(("add", nxt))
                cur = nxt
                nxt = reader(cur.id)
        act = None
        if nxt is not None and nxt.op in ACTIVATIONS:
            act = nxt
            chain.append((nxt.op, nxt))
            cur = nxt
        if not chain:
            continue
        alpha, beta = (act.attrs.alpha, act.attrs.beta) if act is not None and act.attrs is not None else (0.0, 0.0)
        epi = ConvEpilogue(act.op if act is not None else None, alpha, beta, residual is not None)
        attrs = dataclasses.replace(conv.attrs, epilogue=epi)
        if residual is not None:
            inputs.append(residual)

        def build(rb, conv=conv, inputs=inputs, attrs=attrs):
            return rb.new(conv.op, [rb.map[i] for i in inputs], conv.shape, conv.name, attrs)

        replace[cur.id] = build
        drop.add(conv.id)
        drop.update(n.id for _, n in chain[:-1])
        claimed.update(n.id for _, n in chain)
        for what, _ in chain:
            counts[what] = counts.get(what, 0) + 1
    return _rewrite(graph, "fuse_epilogue", counts, replace, drop)


# A chain of at least this many convs with blocked kernels moves to the
# blocked layout; a shorter one would pay its two reorders for little.
BLOCKED_MIN_CHAIN = 3
# A stem (input channels that are no whole blocks: ops/blocked.py
# nchwc_stem) of at most this many taps (input channels x kernel) moves
# to the blocked layout alone, with the AVX2 tiles; with the AVX-512 ones
# (simd level 2) every stem does: measured there (Xeon, family 6 model
# 207), run_into ms NCHW (im2col) / blocked with the reorder, 7x7 3->64 s2
# at 224x224: 5.82 / 3.24 at 1 thread, 2.97 / 1.73 at 2.
STEM_ALONE_MAX_TAPS = 27
# A stem alone of at most this many taps writes NCHW itself on the AVX-512
# level; a larger one writes the blocked layout and a reorder follows.
# Measured (Xeon, family 6 model 207), kernel ms blocked + reorder / NCHW
# output at 1 and 2 threads: 1->32 3x3 on 64 x 28x28 1.50 / 0.78 and
# 0.81 / 0.40; 3->32 3x3 s2 at 224x224 0.39 / 0.34 and 0.27 / 0.31; 3->64
# 5x5 s2 1.13 / 1.08 and 0.91 / 0.88; 3->64 7x7 s2 (147 taps, four-panel
# tiles) 2.82 / 3.14 and 1.50 / 1.57.
STEM_NCHW_OUT_MAX_TAPS = 27


def stem_alone_max_taps(simd=None):
    """The most taps of a stem that runs blocked alone, with the kernels of
    SIMD level `simd` (default: the level that runs)."""
    from . import _nchwc
    from .ops.blocked import AVX512_SIMD_LEVEL
    level = _nchwc.simd_level() if simd is None else simd
    return float("inf") if level >= AVX512_SIMD_LEVEL else STEM_ALONE_MAX_TAPS


def _blocked_layout_enabled():
    """RLX_BLOCKED_LAYOUT: off, on (also with the portable kernels), or
    unset: on where the AVX2+FMA kernels run (values as for the conv flags)."""
    from . import _nchwc
    from .algorithms import _tristate
    mode = _tristate("RLX_BLOCKED_LAYOUT")
    return mode if mode is not None else _nchwc.simd_level() >= 1


def blocked_layout(graph, nthreads=1):
    """Chains of convs that have channel-blocked kernels (rlx_cpu/ops/blocked.py:
    1x1, depthwise 3x3 / 5x5 and dense convs with constant weights and channels
    multiples of 8, conv3d, a conv of input channels that are no whole
    blocks, as a network's first conv (the stem: ops/blocked.py nchwc_stem),
    and conv_transpose1d/2d by output phases), with
    the 2-D window pools, channel concats, elementwise ops and global pools
    (and reduce_means over H and W) between and after them -> conv2d_nchwc / pool2d_nchwc / concat /
    elementwise / global_pool_nchwc nodes whose activations are
    [N, C/8, H, W, 8] (a conv1d's [N, C/8, 1, L, 8]).  Elementwise ops
    (activations, and add/sub/mul/div of same-shape operands or a scalar)
    do not see the layout; add/sub/mul/div of a chain value and a
    per-channel operand ([N or 1, C, 1, 1]: a squeeze-excitation gate)
    becomes channel_binary_nchwc, a batch_norm batch_norm_nchwc.  Members
    are chained through
    the inputs (not a stem's) and residual they read; a stem starts a chain
    and a global pool ends one (it writes [N, C, 1, 1], which is both
    layouts).  A chain of at least BLOCKED_MIN_CHAIN convs is rewritten, and
    so is a shorter one that pays its reorders anyway: with a stem and a pool
    (a ResNet's head), a transposed conv, a conv3d of more than one tap, or
    a stem of at most stem_alone_max_taps() taps.  It gets one to_nchwc per
    NCHW value it reads and one from_nchwc per value an NCHW op or a graph
    output reads, so a chain between two NCHW ops has exactly two
    reorders.  `nthreads`: the thread count of the plan it compiles for
    (which dense convs run blocked depends on it)."""
    from . import _nchwc
    from .ops.blocked import (AVX512_SIMD_LEVEL, BLOCK, ChannelBinaryAttrs, as_conv2d_attrs, as_transpose2d_attrs,
                              blocked_shape, channel_operand_rows, dense_alone, nchwc_global_pool, nchwc_kind,
                              nchwc_pool, nchwc_stem, nchwc_transpose)
    from .ops.conv import conv_operands
    from .ops.pool import GlobalPoolAttrs
    if not _blocked_layout_enabled():
        return _rewrite(graph, "blocked_layout", {}, {}, set())
    stems = {n.id for n in graph.nodes if nchwc_stem(graph, n)}
    transposes = {n.id for n in graph.nodes if nchwc_transpose(graph, n)}
    convs = {n.id for n in graph.nodes if nchwc_kind(graph, n, nthreads)} | stems | transposes
    pools = {n.id for n in graph.nodes if nchwc_pool(graph, n)}
    globals_ = {n.id for n in graph.nodes if nchwc_global_pool(graph, n)}
    # a channel concat of blocked values is the same block copies as in NCHW
    concats = {n.id for n in graph.nodes if n.op == "concat" and n.dtype == "float32" and len(n.shape) == 4
               and n.attrs.axis == 1 and all(graph.node(i).shape[1] % BLOCK == 0 for i in n.inputs)}
    # elementwise ops of same-shape operands (or a scalar) do not see the layout
    def blockable(n):
        return n.dtype == "float32" and len(n.shape) in (3, 4, 5) and not n.shape[1] % BLOCK and 0 not in n.shape

    def layout_free(n):
        if not blockable(n):
            return False
        if n.op in ACTIVATIONS:
            return True
        return n.op in ("add", "sub", "mul", "div") and all(
            graph.node(i).shape == n.shape or math.prod(graph.node(i).shape) == 1 for i in n.inputs) and any(
            graph.node(i).shape == n.shape for i in n.inputs)
    pointwise = {n.id for n in graph.nodes if layout_free(n)}

    # and a binary op of a full-shape value and a per-channel one (a
    # squeeze-excitation gate [N, C, 1, 1]) reads the gate by block
    def channel_op(n):
        if not blockable(n) or n.op not in ("broadcast_add", "add", "sub", "mul", "div") or n.id in pointwise:
            return False
        a, b = (graph.node(i) for i in n.inputs)
        return (a.shape == n.shape and channel_operand_rows(n.shape, b.shape) is not None) or (
            b.shape == n.shape and channel_operand_rows(n.shape, a.shape) is not None)
    channel_ops = {n.id for n in graph.nodes if channel_op(n)}
    # so does an inference batch norm (per-channel scale and shift)
    norms = {n.id for n in graph.nodes if n.op == "batch_norm" and blockable(n)}
    pointwise |= channel_ops | norms
    eligible = convs | pools | globals_ | concats | pointwise
    parent = {i: i for i in eligible}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def chained_inputs(node):
        """The inputs a chain member reads in the blocked layout."""
        if node.id in pools or node.id in globals_ or node.id in transposes:
            return [node.inputs[0]]
        if node.id in concats:
            return list(node.inputs)
        if node.id in pointwise:
            return [i for i in node.inputs if graph.node(i).shape == node.shape]
        x, _, _, r = conv_operands(node)
        return [s for s in (x if node.id not in stems else None, r) if s is not None]

    for i in eligible:
        for src in chained_inputs(graph.node(i)):
            if src in eligible and src not in globals_:
                parent[find(src)] = find(i)
    sizes = {}
    for i in convs:
        sizes[find(i)] = sizes.get(find(i), 0) + 1
    # a stem and the pool after it (ResNet's head) pay on their own: the
    # reorder comes after the pool, on a quarter of the stem's output
    heads = {find(i) for i in stems} & {find(i) for i in pools}
    # so does a transposed conv: its blocked kernel runs the output phases
    # as dense convs in place of the NCHW phase GEMMs' strided stores
    # (64->32 k4 s2 from 28x28, b1 1T: 1.12 ms NCHW, 0.75 blocked, 0.80
    # with both reorders)
    heads |= {find(i) for i in transposes}
    # and a conv3d of more than one tap, whose GEMM depth dwarfs the reorders
    # (32->32 k3 on 16x32x32, b1, run_into ms NCHW / blocked with both
    # reorders: 16.3 / 13.4 at 1 thread, 8.3 / 7.0 at 2; 16->16 on 4 x
    # 8x16x16: 1.76 / 1.40, 0.74 / 0.73)
    heads |= {find(i) for i in convs if graph.node(i).op == "conv3d" and math.prod(graph.node(i).attrs.kernel) > 1}
    # and a stem of few taps, where the NCHW paths run a GEMM of depth 9-27
    # (run_into ms NCHW / blocked with the reorder, 1 and 2 threads: 1->32
    # 3x3 on 64 x 28x28 0.82 / 0.74 and 0.76 / 0.63; 3->32 3x3 s2 at 224x224
    # 0.44 / 0.35 and 0.34 / 0.28; but a 7x7 3->64 s2 at 224x224, 147 taps:
    # 2.75 / 2.64 and 1.39 / 1.51)
    # and, with the AVX-512 tiles, a strided conv or a conv1d, whose NCHW path
    # is im2col, or a small-plane 3x3 of one image; with the AVX2 tiles a
    # stride-1 1x1 on a mid-sized plane (ops/blocked.py dense_alone)
    heads |= {find(i) for i in convs if dense_alone(graph, graph.node(i), nthreads)}
    alone_taps = stem_alone_max_taps()

    def stem_taps(node):
        return graph.node(node.inputs[0]).shape[1] * math.prod(node.attrs.kernel)
    heads |= {find(i) for i in stems if stem_taps(graph.node(i)) <= alone_taps}
    chosen = {i for i in eligible if sizes.get(find(i), 0) >= BLOCKED_MIN_CHAIN or find(i) in heads}
    users = _consumers(graph)
    # the stem's NCHW output mode has AVX-512 tiles only
    nchw_stem_out = _nchwc.simd_level() >= AVX512_SIMD_LEVEL
    rb = _Rebuild(graph)
    counts = {"convs": 0, "transposed convs": 0, "pools": 0, "concats": 0, "pointwise": 0, "reorders": 0}
    blocked, to_blocked = {}, {}

    def fresh(name):
        base, k = name, 1
        while name in rb.g._names or name in graph._names:
            name = f"{base}.{k}"
            k += 1
        return name

    def as_blocked(src):
        if src in blocked:
            return blocked[src]
        if src not in to_blocked:
            s = graph.node(src)
            to_blocked[src] = rb.new("to_nchwc", [rb.map[src]], blocked_shape(s.shape), fresh(s.name + ".nchwc"))
            counts["reorders"] += 1
        return to_blocked[src]

    for node in graph.nodes:
        if node.id not in chosen:
            rb.copy(node)
            continue
        if node.id in globals_:
            # [N, C, 1, 1] is the same memory in both layouts: no reorder after
            # (a reduce_mean over H and W is the average pool)
            attrs = GlobalPoolAttrs("avg") if node.op == "reduce_mean" else node.attrs
            rb.map[node.id] = rb.new("global_pool_nchwc", [as_blocked(node.inputs[0])], node.shape, node.name,
                                     attrs)
            counts["pools"] += 1
            continue
        if node.id in pools:
            ins, op = [as_blocked(node.inputs[0])], "pool2d_nchwc"
            counts["pools"] += 1
        elif node.id in concats:
            ins, op = [as_blocked(i) for i in node.inputs], "concat"
            counts["concats"] += 1
        elif node.id in channel_ops:
            x_first = graph.node(node.inputs[0]).shape == node.shape
            x, g = node.inputs if x_first else node.inputs[::-1]
            ins, op = [as_blocked(x), rb.map[g]], "channel_binary_nchwc"
            attrs = ChannelBinaryAttrs("add" if node.op == "broadcast_add" else node.op, x_first)
            counts["pointwise"] += 1
        elif node.id in norms:
            ins, op = [as_blocked(node.inputs[0])] + [rb.map[i] for i in node.inputs[1:]], "batch_norm_nchwc"
            counts["pointwise"] += 1
        elif node.id in pointwise:
            ins = [as_blocked(i) if graph.node(i).shape == node.shape else rb.map[i] for i in node.inputs]
            op = node.op
            counts["pointwise"] += 1
        elif node.id in transposes:
            ins = [as_blocked(node.inputs[0])] + [rb.map[i] for i in node.inputs[1:]]
            op = "conv_transpose3d_nchwc" if node.op == "conv_transpose3d" else "conv_transpose2d_nchwc"
            attrs = as_transpose2d_attrs(node.attrs)
            counts["transposed convs"] += 1
        else:
            x, w, b, r = conv_operands(node)
            ins = [rb.map[x] if node.id in stems else as_blocked(x), rb.map[w]] + \
                ([rb.map[b]] if b is not None else []) + ([as_blocked(r)] if r is not None else [])
            op = "conv3d_nchwc" if node.op == "conv3d" else "conv2d_nchwc"
            attrs = as_conv2d_attrs(node.attrs)
            counts["convs"] += 1
        nchw_readers = node.id in graph.outputs or any(
            u not in chosen or node.id not in chained_inputs(graph.node(u)) for u in users[node.id])
        if node.id in stems and nchw_stem_out and stem_taps(node) <= STEM_NCHW_OUT_MAX_TAPS and not any(
                u in chosen and node.id in chained_inputs(graph.node(u)) for u in users[node.id]):
            # a stem of few taps only NCHW ops read writes NCHW itself, with no
            # reorder (src/rlx_nchwc.h, the stem with NCHW output; the same bits)
            rb.map[node.id] = rb.new(op, ins, node.shape, node.name, attrs)
            continue
        # the NCHW value keeps the node's name (graph outputs are found by it)
        name = fresh(node.name + ".nchwc") if nchw_readers else node.name
        nb = rb.new(op, ins, blocked_shape(node.shape), name,
                    attrs if op in ("conv2d_nchwc", "conv3d_nchwc", "conv_transpose2d_nchwc", "conv_transpose3d_nchwc",
                                    "channel_binary_nchwc") else node.attrs)
        blocked[node.id] = nb
        if nchw_readers:
            rb.map[node.id] = rb.new("from_nchwc", [nb], node.shape, node.name)
            counts["reorders"] += 1
        else:
            rb.map[node.id] = nb
    return rb.finish("blocked_layout", counts)


# The fused inverted residual block pays where its inner tensors are large:
# a depthwise input plane of at least this many pixels.  MobileNetV2 b1 at 2
# threads, fused / unfused block ms: 112x112 0.49 / 0.56, 56x56 0.42 / 0.43
# and 0.24 / 0.26, 28x28 0.18 / 0.18, 14x14 0.17 / 0.15, 7x7 0.25 / 0.20
# (bands of a small plane split over the threads less evenly than the single
# kernels' output panels).
FUSE_IR_MIN_PLANE = 56 * 56


def fuse_inverted_residual(graph):
    """After blocked_layout: ``project(dw(expand(x)))``, MobileNetV2's
    inverted residual block on blocked values -- a 1x1 conv2d_nchwc (no
    residual) read only by a depthwise 3x3 or 5x5 conv2d_nchwc (stride 1 or
    2, padding 1 or 2, no residual) read only by a 1x1 conv2d_nchwc (with or
    without the block's residual) -- becomes one ``inverted_residual_nchwc``
    node whose kernel keeps the two inner tensors in a per-thread band
    buffer (src/rlx_nchwc.h, the same bits as the three kernels).  Without
    a fusable expand conv (MobileNetV2's first block) the depthwise and
    project convs fuse alone.  Neither inner value may be a graph output."""
    from .ops.blocked import InvertedResidualAttrs
    from .ops.conv import conv_operands
    users = _consumers(graph)

    def is_nchwc(node):
        return node.op == "conv2d_nchwc" and len(graph.node(node.inputs[0]).shape) == 5

    def is_1x1(node):
        a = node.attrs
        return is_nchwc(node) and a.groups == 1 and a.kernel == (1, 1) and a.stride == (1, 1) \
            and a.pads_begin == a.pads_end == (0, 0)

    def no_residual(node):
        return node.attrs.epilogue is None or not node.attrs.epilogue.residual

    replace, drop = {}, set()
    counts = {"blocks": 0, "without expand": 0}
    for p in graph.nodes:
        if not is_1x1(p):
            continue
        d = graph.node(conv_operands(p)[0])
        da = d.attrs
        if not (is_nchwc(d) and no_residual(d) and da.kernel in ((3, 3), (5, 5)) and da.groups > 1
                and da.groups == graph.node(d.inputs[1]).shape[0] == d.shape[1] * 8
                and da.stride[0] == da.stride[1] in (1, 2)
                and da.pads_begin == da.pads_end == (da.kernel[0] // 2,) * 2
                and da.dilation == (1, 1) and _sole_reader(graph, users, d.id) is p
                and graph.node(d.inputs[0]).shape[2] * graph.node(d.inputs[0]).shape[3] >= FUSE_IR_MIN_PLANE):
            continue
        e = graph.node(conv_operands(d)[0])
        # (an expand conv that is also an earlier block's project stays that)
        has_e = is_1x1(e) and no_residual(e) and _sole_reader(graph, users, e.id) is d and e.id not in replace
        px, pw, pb, pr = conv_operands(p)
        dx, dw, db, _ = conv_operands(d)
        ins = []
        if has_e:
            ex, ew, eb, _ = conv_operands(e)
            ins += [ex, ew] + ([eb] if eb is not None else [])
            drop.add(e.id)
        else:
            ins.append(dx)
        ins += [dw] + ([db] if db is not None else []) + [pw] + ([pb] if pb is not None else []) + \
            ([pr] if pr is not None else [])
        attrs = InvertedResidualAttrs(e.attrs if has_e else None, da, p.attrs,
                                      (has_e and conv_operands(e)[2] is not None, db is not None, pb is not None))
        drop.add(d.id)
        replace[p.id] = (lambda rb, ins=ins, p=p, attrs=attrs:
                         rb.new("inverted_residual_nchwc", [rb.map[i] for i in ins], p.shape, p.name, attrs))
        counts["blocks"] += 1
        counts["without expand"] += not has_e
    return _rewrite(graph, "fuse_inverted_residual", counts, replace, drop)


def fuse_norm_relu(graph):
    """After blocked_layout: relu(batch_norm_nchwc(x)) -> batch_norm_nchwc(x)
    with attrs.relu, named and shaped as the relu (its kernel applies the
    relu kernel's select to each result: the same bits)."""
    users = _consumers(graph)
    replace, drop = {}, set()
    for relu in graph.nodes:
        if relu.op != "relu":
            continue
        bn = graph.node(relu.inputs[0])
        if (bn.op != "batch_norm_nchwc" or getattr(bn.attrs, "relu", True)
                or _sole_reader(graph, users, bn.id) is not relu):
            continue

        def build(rb, relu=relu, bn=bn):
            return rb.new("batch_norm_nchwc", [rb.map[i] for i in bn.inputs], relu.shape, relu.name,
                          dataclasses.replace(bn.attrs, relu=True))

        replace[relu.id] = build
        drop.add(bn.id)
    return _rewrite(graph, "fuse_norm_relu", {"fused": len(replace)}, replace, drop)


def fuse_norm_conv(graph):
    """After fuse_norm_relu: a 1x1 conv2d_nchwc (stride 1, no padding, one
    group) whose input x is a batch_norm_nchwc (its relu fused or not) that
    it alone reads -> one conv2d_nchwc_norm node, named and shaped as the
    conv, whose kernel normalises each pixel chunk of x just before its
    tiles read it (src/rlx_nchwc.h rlx_nchwc_1x1_run_norm: the same bits as
    the pair), so the normed tensor is never written out (DenseNet's
    norm-relu-conv1x1 at the head of every dense layer)."""
    from .ops.blocked import NormConvAttrs
    from .ops.conv import conv_operands
    users = _consumers(graph)
    replace, drop = {}, set()
    one_by_one = ((1, 1), (1, 1), (0, 0), (0, 0), (1, 1))
    for conv in graph.nodes:
        if conv.op != "conv2d_nchwc" or len(conv.shape) != 5:
            continue
        a = conv.attrs
        if a.groups != 1 or (a.kernel, a.stride, a.pads_begin, a.pads_end, a.dilation) != one_by_one:
            continue
        bn = graph.node(conv_operands(conv)[0])
        if (bn.op != "batch_norm_nchwc" or _sole_reader(graph, users, bn.id) is not conv
                or any(graph.node(i).value is None for i in bn.inputs[1:])):
            continue

        def build(rb, conv=conv, bn=bn):
            attrs = NormConvAttrs(conv.attrs, float(bn.attrs.epsilon), bool(getattr(bn.attrs, "relu", False)))
            ins = [bn.inputs[0]] + list(bn.inputs[1:5]) + list(conv.inputs[1:])
            return rb.new("conv2d_nchwc_norm", [rb.map[i] for i in ins], conv.shape, conv.name, attrs)

        replace[conv.id] = build
        drop.add(bn.id)
    return _rewrite(graph, "fuse_norm_conv", {"fused": len(replace)}, replace, drop)


def dce(graph):
    """Remove the nodes no graph output depends on (inputs stay)."""
    live = set(graph.outputs)
    for node in reversed(graph.nodes):
        if node.id in live:
            live.update(node.inputs)
    keep = set(live)
    for node in graph.nodes:
        if node.op == "input":
            keep.add(node.id)
        # a pool with indices and its indices node are emitted as a pair
        elif node.op == "max_pool_indices" and node.inputs[0] in live:
            keep.add(node.id)
    drop = {n.id for n in graph.nodes if n.id not in keep}
    return _rewrite(graph, "dce", {"removed": len(drop)}, {}, drop)


def in_place(graph):
    """Mark pointwise nodes that may write into an input's buffer."""
    outputs = set(graph.outputs)
    users = _consumers(graph)
    parent = {n.id: n.inputs[0] for n in graph.nodes if n.op == "reshape"}    # zero-copy aliases

    def root(i):
        while i in parent:
            i = parent[i]
        return i

    members = {}
    for n in graph.nodes:
        members.setdefault(root(n.id), []).append(n.id)
    last_read = {r: max((u for m in ms for u in users[m]), default=-1) for r, ms in members.items()}
    marks = {}
    for node in graph.nodes:
        cand = POINTWISE.get(node.op)
        # a graph output is written into the caller's array by its own op
        if cand is None or node.dtype != "float32" or node.id in outputs:
            continue
        for pos in cand:
            src = graph.node(node.inputs[pos])
            r = root(src.id)
            if (src.shape != node.shape or src.dtype != "float32"
                    or graph.node(r).op in ("input", "constant")
                    or any(m in outputs for m in members[r])
                    or last_read[r] != node.id):
                continue
            marks[node.id] = src.id
            # node's value now lives in r's buffer, and so do its aliases
            parent[node.id] = src.id
            members[r].extend(members.pop(node.id, [node.id]))
            last_read[r] = last_read.pop(node.id, -1)
            break
    rb = _Rebuild(graph)
    for node in graph.nodes:
        rb.copy(node)
    return rb.finish("in_place", {"in place": len(marks)}, in_place={rb.map[a].id: rb.map[b].id
                                                                        for a, b in marks.items()})


PASSES = {"fold_constants": fold_constants, "fold_batch_norm": fold_batch_norm, "fuse_silu": fuse_silu,
          "fuse_epilogue": fuse_epilogue, "blocked_layout": blocked_layout,
          "fuse_inverted_residual": fuse_inverted_residual, "fuse_norm_relu": fuse_norm_relu,
          "fuse_norm_conv": fuse_norm_conv, "dce": dce, "in_place": in_place}
DEFAULT_PASSES = ("fold_constants", "fold_batch_norm", "fuse_silu", "fuse_epilogue", "blocked_layout",
                  "fuse_inverted_residual", "fuse_norm_relu", "fuse_norm_conv", "dce", "in_place")


def resolve(passes):
    """The pass names `passes` (True, False/None or a list of names) selects."""
    if passes is True:
        return DEFAULT_PASSES
    if passes is None or passes is False:
        return ()
    if isinstance(passes, str) or not all(isinstance(p, str) for p in passes):
        raise TypeError(f"compile: passes must be True, False or a list of pass names, got {passes!r}")
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise ValueError(f"compile: unknown pass(es) {unknown}; passes are {list(PASSES)}")
    return tuple(passes)


def run_passes(graph, passes=True, skip=(), nthreads=1):
    """Run the selected passes but those named in `skip`, in order; returns
    the final graph.  `nthreads`: the plan's thread count (blocked_layout's
    kernel choice depends on it)."""
    for name in resolve(passes):
        if name not in skip:
            graph = blocked_layout(graph, nthreads) if name == "blocked_layout" else PASSES[name](graph)
    return graph


def summary(graph):
    """One line: what each pass did, e.g. 'fold_batch_norm: 2 folded; dce: 1 removed'."""
    parts = []
    for name, counts in getattr(graph, "pass_log", ()):
        what = ", ".join(f"{v} {k}" for k, v in counts.items() if v) or "nothing"
        parts.append(f"{name}: {what}")
    return "; ".join(parts)
