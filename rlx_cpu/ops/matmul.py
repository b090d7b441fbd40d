"""Matrix products of inference graphs, float32 with float32 accumulation in
BLAS (sgemm, single-threaded per panel; rlx_cpu owns the threads):

* ``gemm``: y = alpha * op(a) op(b) + beta * c, a and b 2-D, op a transpose
  or not, c broadcast to [M, N] (ONNX Gemm);
* ``matmul``: numpy.matmul, batch dims broadcast, 1-D operands promoted and
  their axis dropped from the result (ONNX MatMul).

Kernels: src/_matmul.pyx.
"""
from dataclasses import dataclass
from typing import ClassVar, Optional, Tuple

import numpy as np

from .. import _matmul
from ..ir import fmt_shape
from ..registry import compile_rule, graph_method, onnx_op
from ..thunks import Slice, Thunk, view_or_none
from ._common import all_const, broadcast_shape, contiguous_strides, emit, expect_inputs, folded, fresh, numel


@dataclass(frozen=True)
class GemmAttrs:
    alpha: float
    beta: float
    trans_a: bool
    trans_b: bool


@graph_method()
def gemm(graph, a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False, name=None):
    """alpha * op(a) . op(b) + beta * c with a [M, K] (or [K, M] when trans_a),
    b [K, N] (or [N, K] when trans_b) and c broadcastable to [M, N]."""
    op = "gemm"
    a = graph._value(a, op, "a")
    b = graph._value(b, op, "b")
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ValueError(f"{op}: a and b must be 2-D, got {fmt_shape(a.shape)} and {fmt_shape(b.shape)}")
    m, k = a.shape[::-1] if trans_a else a.shape
    k2, n = b.shape[::-1] if trans_b else b.shape
    if k != k2:
        raise ValueError(f"{op}: inner dims differ: op(a) is [{m}, {k}], op(b) is [{k2}, {n}]")
    inputs = [a, b]
    if c is not None:
        c = graph._value(c, op, "c")
        if len(c.shape) > 2 or broadcast_shape(c.shape, (m, n), op) != (m, n):
            raise ValueError(f"{op}: c {fmt_shape(c.shape)} does not broadcast to [{m}, {n}]")
        inputs.append(c)
    return graph._add(op, inputs, (m, n), name, GemmAttrs(float(alpha), float(beta), bool(trans_a), bool(trans_b)))


def _matmul_shapes(a, b, op):
    """(batch shape, m, k, n, result shape) of numpy.matmul."""
    if not a or not b:
        raise ValueError(f"{op}: operands must have rank >= 1, got {fmt_shape(a)} and {fmt_shape(b)}")
    pa = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    pb = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    if pa[-1] != pb[-2]:
        raise ValueError(f"{op}: inner dims differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    batch = broadcast_shape(pa[:-2], pb[:-2], op)
    out = batch + ((pa[-2],) if len(a) > 1 else ()) + ((pb[-1],) if len(b) > 1 else ())
    return batch, pa, pb, out


@graph_method()
def matmul(graph, a, b, name=None):
    """numpy.matmul(a, b)."""
    op = "matmul"
    a = graph._value(a, op, "a")
    b = graph._value(b, op, "b")
    *_, out = _matmul_shapes(a.shape, b.shape, op)
    if any(d < 1 for d in out):
        raise ValueError(f"{op}: empty result {fmt_shape(out)}")
    return graph._add(op, [a, b], out, name)


@dataclass(frozen=True, repr=False)
class GemmThunk(Thunk):
    a: Slice
    b: Slice
    c: Optional[Slice]
    y: Slice
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    alpha: float
    beta: float
    c_row: int
    c_col: int
    max_threads: int

    kind: ClassVar[str] = "gemm"
    reads: ClassVar[tuple] = ("a", "b", "c")
    writes: ClassVar[tuple] = ("y",)

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def bind(self, view):
        return _matmul.GemmLaunch(view(self.a), view(self.b), view_or_none(view, self.c), view(self.y), self.m,
                                  self.n, self.k, self.trans_a, self.trans_b, self.alpha, self.beta, self.c_row,
                                  self.c_col, self.max_threads)


@dataclass(frozen=True, repr=False)
class MatMulThunk(Thunk):
    a: Slice
    b: Slice
    y: Slice
    a_offsets: Tuple[int, ...]
    b_offsets: Tuple[int, ...]
    m: int
    n: int
    k: int
    max_threads: int

    kind: ClassVar[str] = "matmul"
    reads: ClassVar[tuple] = ("a", "b")
    writes: ClassVar[tuple] = ("y",)

    @property
    def flops(self):
        return 2 * len(self.a_offsets) * self.m * self.n * self.k

    def __repr__(self):
        return (f"{self.kind}({self.op_name!r}, a={self.a!r}, b={self.b!r}, y={self.y!r}, "
                f"batches={len(self.a_offsets)}, m={self.m}, n={self.n}, k={self.k})")

    def bind(self, view):
        return _matmul.BatchedMatMulLaunch(view(self.a), view(self.b), view(self.y),
                                           np.asarray(self.a_offsets, np.int64), np.asarray(self.b_offsets, np.int64),
                                           self.m, self.n, self.k, self.max_threads)


@compile_rule("gemm")
def compile_gemm(ctx, node):
    at = node.attrs
    m, n = node.shape
    a_shape = ctx.graph.node(node.inputs[0]).shape
    k = a_shape[0] if at.trans_a else a_shape[1]
    c = None
    c_row = c_col = 0
    if len(node.inputs) > 2 and at.beta != 0.0:
        c_node = ctx.graph.node(node.inputs[2])
        cs = (1,) * (2 - len(c_node.shape)) + tuple(c_node.shape)
        c = ctx.buf(c_node.id)
        c_row = cs[1] if cs[0] != 1 else 0
        c_col = 1 if cs[1] != 1 else 0
    ctx.emit(GemmThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.inputs[1]), c, ctx.buf(node.id), m, n, k,
                       at.trans_a, at.trans_b, at.alpha, at.beta, c_row, c_col, ctx.num_threads))


@compile_rule("matmul")
def compile_matmul(ctx, node):
    a, b = (ctx.graph.node(i) for i in node.inputs)
    batch, pa, pb, _ = _matmul_shapes(a.shape, b.shape, "matmul")
    m, k, n = pa[-2], pa[-1], pb[-1]
    if len(pb) == 2 and numel(pa[:-2]) == numel(batch):
        # b is one matrix: every batch of a stacks into one taller GEMM
        m, a_off, b_off = m * numel(batch), (0,), (0,)
    else:
        ra = (1,) * (len(batch) - len(pa[:-2])) + tuple(pa[:-2])
        rb = (1,) * (len(batch) - len(pb[:-2])) + tuple(pb[:-2])
        sa = [s * m * k if d != 1 else 0 for d, s in zip(ra, contiguous_strides(ra))]
        sb = [s * k * n if d != 1 else 0 for d, s in zip(rb, contiguous_strides(rb))]
        a_off, b_off = [], []
        for idx in np.ndindex(*batch):
            a_off.append(int(sum(i * s for i, s in zip(idx, sa))))
            b_off.append(int(sum(i * s for i, s in zip(idx, sb))))
    ctx.emit(MatMulThunk(node.name, ctx.buf(a.id), ctx.buf(b.id), ctx.buf(node.id), tuple(a_off), tuple(b_off),
                         m, n, k, ctx.num_threads))


# ---------------------------------------------------------------------------
# ONNX converters
# ---------------------------------------------------------------------------

@onnx_op("Gemm", versions=(1, 13))
def _onnx_gemm(nc):
    allowed = ["alpha", "beta", "transA", "transB"] + (["broadcast"] if nc.version < 7 else [])
    nc.check_attrs(allowed)
    expect_inputs(nc, 2 if nc.version >= 11 else 3, 3)
    alpha, beta = float(nc.attr("alpha", 1.0)), float(nc.attr("beta", 1.0))
    ta, tb = bool(nc.attr("transA", 0)), bool(nc.attr("transB", 0))
    if all_const(nc):
        a, b = nc.const(0, "A"), nc.const(1, "B")
        y = alpha * ((a.T if ta else a).astype(np.float64) @ (b.T if tb else b))
        if nc.has_input(2):
            y = y + beta * nc.const(2, "C")
        folded(nc, y.astype(a.dtype))
        return
    c = nc.optional_tensor(2, "C")
    emit(nc, nc.graph.gemm(nc.tensor(0, "A"), nc.tensor(1, "B"), c, alpha, beta, ta, tb, name=fresh(nc)))


@onnx_op("MatMul", versions=(1, 13))
def _onnx_matmul(nc):
    nc.check_attrs(())
    expect_inputs(nc, 2, 2)
    if all_const(nc):
        a, b = nc.const(0, "A"), nc.const(1, "B")
        folded(nc, np.matmul(a, b))
        return
    emit(nc, nc.graph.matmul(nc.tensor(0, "A"), nc.tensor(1, "B"), name=fresh(nc)))
