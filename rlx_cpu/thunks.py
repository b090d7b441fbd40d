"""Thunk records: what one step of a compiled plan does, as plain data.

A thunk holds the arena slices it reads and writes plus integer dims; it
never holds arrays.  ``bind(view)`` turns it into a *launch*, a Cython object
holding typed views over one run context's memory, whose ``execute(nthreads)``
runs the kernel with the GIL released.  Binding happens once per context, so
a run only loops over launches.

Adding an op kind = one record here (with its ``reads``/``writes``/``scratch``
field names, which the arena planner uses for liveness), one compile rule in
``compiler.py`` and one kernel module in ``src/``.
"""
from dataclasses import dataclass, fields, astuple
from typing import ClassVar, Optional, Tuple

import numpy as np

from . import _backward, _conv2d, _convnd, _im2col, _pool, _resize, _train
from .algorithms import ConvAlgorithm, ConvBackwardAlgorithm


@dataclass(frozen=True)
class Slice:
    """A byte range of one memory segment: 'arena' (per run context, mutable)
    or 'const' (shared by all contexts, written at compile time, read-only)."""
    segment: str
    offset: int
    nbytes: int

    def __repr__(self):
        return f"{self.segment}[{self.offset}:+{self.nbytes}]"


@dataclass(frozen=True)
class Thunk:
    """Base record. Subclasses list their slice fields by role."""
    op_name: str

    kind: ClassVar[str] = "Thunk"
    reads: ClassVar[tuple] = ()
    writes: ClassVar[tuple] = ()
    scratch_fields: ClassVar[tuple] = ()

    def slices(self, roles=("reads", "writes", "scratch_fields")):
        out = []
        for role in roles:
            for name in getattr(self, role):
                s = getattr(self, name)
                if s is not None:
                    out.append(s)
        return out

    def bind(self, view):  # pragma: no cover - every kind overrides it
        raise NotImplementedError(self.kind)

    def __repr__(self):
        parts = []
        for f in fields(self):
            if f.name == "op_name":
                continue
            v = getattr(self, f.name)
            if v is None:
                continue
            parts.append(f"{f.name}={v!r}" if not isinstance(v, ConvAlgorithm) else f"{f.name}={v.label}")
        return f"{self.kind}({self.op_name!r}, " + ", ".join(parts) + ")"


@dataclass(frozen=True)
class Conv2DDims:
    """Canonical conv2d geometry.  Padding is the *begin* padding; the end
    padding is implied by (h_out, w_out).  1-D convs use h = kh = 1."""
    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    h_out: int
    w_out: int
    kh: int
    kw: int
    sh: int
    sw: int
    ph: int
    pw: int
    dh: int
    dw: int
    groups: int

    def as_tuple(self):
        return astuple(self)

    @property
    def flops(self):
        return 2 * self.n * self.c_out * self.h_out * self.w_out * (self.c_in // self.groups) * self.kh * self.kw

    def __repr__(self):
        return (f"n={self.n} {self.c_in}->{self.c_out} {self.h}x{self.w}->{self.h_out}x{self.w_out} "
                f"k={self.kh}x{self.kw} s={self.sh},{self.sw} p={self.ph},{self.pw} "
                f"d={self.dh},{self.dw} g={self.groups}")


@dataclass(frozen=True, repr=False)
class Conv2DThunk(Thunk):
    """Conv2D with fused bias; `algorithm` was chosen at compile time.  For
    Winograd, `weight` is the transformed filter U[16, c_out, c_in]."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    dims: Conv2DDims
    algorithm: ConvAlgorithm
    max_threads: int
    block: int = 0

    kind: ClassVar[str] = "Conv2D"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _conv2d.Conv2DLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y),
            view(self.scratch) if self.scratch else None, self.dims.as_tuple(), int(self.algorithm),
            self.max_threads, self.block)


@dataclass(frozen=True, repr=False)
class Conv2D1x1Thunk(Thunk):
    """1x1, stride 1, unpadded conv: one GEMM per (image, group), fused bias."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    n: int
    c_in: int
    c_out: int
    hw: int
    groups: int
    max_threads: int

    kind: ClassVar[str] = "Conv2D1x1"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)

    @property
    def flops(self):
        return 2 * self.n * self.c_out * self.hw * (self.c_in // self.groups)

    def bind(self, view):
        dims = (self.n, self.c_in, 1, self.hw, self.c_out, 1, self.hw, 1, 1, 1, 1, 0, 0, 1, 1, self.groups)
        return _conv2d.Conv2DLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y), None,
            dims, int(ConvAlgorithm.GEMM_1X1), self.max_threads, 0)


@dataclass(frozen=True, repr=False)
class WinogradFilterThunk(Thunk):
    """U = G g G^T for a weight that is not a constant (e.g. a graph input);
    constant weights are transformed at compile time instead."""
    weight: Slice
    u: Slice
    c_out: int
    c_in: int

    kind: ClassVar[str] = "WinogradFilter"
    reads: ClassVar[tuple] = ("weight",)
    writes: ClassVar[tuple] = ("u",)

    def bind(self, view):
        return _conv2d.WinogradFilterLaunch(view(self.weight), view(self.u), self.c_out, self.c_in)


# ---------------------------------------------------------------------------
# N-d conv (conv3d) and conv-transpose (1-D, 2-D, 3-D)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ConvNDDims:
    """Canonical geometry on three spatial axes (D, H, W) for conv3d and for
    conv-transpose of every rank.  A 1-D or 2-D op has leading axes of size 1
    (kernel 1, stride 1, pad 0, dilation 1), so W stays the contiguous axis.
    `in_sp` is x's spatial size and `out_sp` y's (for conv-transpose too);
    `pad` is the begin padding, the end padding being implied by `out_sp`."""
    n: int
    c_in: int
    c_out: int
    groups: int
    in_sp: tuple
    out_sp: tuple
    kernel: tuple
    stride: tuple
    pad: tuple
    dilation: tuple

    def as_tuple(self):
        return (self.n, self.c_in, self.c_out, self.groups, *self.in_sp, *self.out_sp,
                *self.kernel, *self.stride, *self.pad, *self.dilation)

    @classmethod
    def from_attrs(cls, x_shape, y_shape, attrs):
        """From NC+spatial shapes and ConvAttrs/ConvTransposeAttrs, padded to 3 axes."""
        lead = 3 - attrs.ndim

        def pad3(t, fill):
            return (fill,) * lead + tuple(int(v) for v in t)

        return cls(int(x_shape[0]), int(x_shape[1]), int(y_shape[1]), int(attrs.groups),
                   pad3(x_shape[2:], 1), pad3(y_shape[2:], 1), pad3(attrs.kernel, 1),
                   pad3(attrs.stride, 1), pad3(attrs.pads_begin, 0), pad3(attrs.dilation, 1))

    def flops(self, transposed):
        """2 * multiply-adds of the dense maths (every tap of every input for a
        transposed conv, including taps that land in the cropped padding)."""
        kk = self.kernel[0] * self.kernel[1] * self.kernel[2]
        if transposed:
            pts = self.in_sp[0] * self.in_sp[1] * self.in_sp[2]
            return 2 * self.n * self.c_in * pts * (self.c_out // self.groups) * kk
        pts = self.out_sp[0] * self.out_sp[1] * self.out_sp[2]
        return 2 * self.n * self.c_out * pts * (self.c_in // self.groups) * kk

    def __repr__(self):
        def f(t):
            return "x".join(str(v) for v in t)
        return (f"n={self.n} {self.c_in}->{self.c_out} {f(self.in_sp)}->{f(self.out_sp)} "
                f"k={f(self.kernel)} s={f(self.stride)} p={f(self.pad)} d={f(self.dilation)} "
                f"g={self.groups}")


@dataclass(frozen=True, repr=False)
class ConvNDThunk(Thunk):
    """conv3d with fused bias: `algorithm` is REFERENCE (gather loops) or
    IM2COL (vol2col + GEMM)."""
    x: Slice
    weight: Slice
    bias: Optional[Slice]
    y: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvAlgorithm
    max_threads: int

    kind: ClassVar[str] = "ConvND"
    reads: ClassVar[tuple] = ("x", "weight", "bias")
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)
    transposed: ClassVar[bool] = False

    @property
    def flops(self):
        return self.dims.flops(self.transposed)

    def bind(self, view):
        return _convnd.ConvNDLaunch(
            view(self.x), view(self.weight), view(self.bias) if self.bias else None, view(self.y),
            view(self.scratch) if self.scratch else None, self.dims.as_tuple(), self.transposed,
            self.algorithm == ConvAlgorithm.IM2COL, self.max_threads)


@dataclass(frozen=True, repr=False)
class ConvTransposeNDThunk(ConvNDThunk):
    """conv-transpose (any rank) with fused bias; weight [C_in, C_out/g, k...].
    REFERENCE is the scatter loop; IM2COL is col = W_g^T x_g then col2vol."""
    kind: ClassVar[str] = "ConvTransposeND"
    transposed: ClassVar[bool] = True


# ---------------------------------------------------------------------------
# --- pooling / resize / im2col ---
# ---------------------------------------------------------------------------

def _int64_view(view, s):
    return view(s).view(np.int64)


@dataclass(frozen=True)
class WindowDims:
    """Canonical sliding-window geometry shared by pooling, im2col and col2im:
    N-d padded to 3 spatial axes (d, h, w); a missing leading axis has size,
    out, kernel, stride and dilation 1 and no padding.  `out` is the number of
    window positions per axis (pool output / im2col blocks)."""
    n: int
    c: int
    size: Tuple[int, int, int]
    out: Tuple[int, int, int]
    kernel: Tuple[int, int, int]
    stride: Tuple[int, int, int]
    pads_begin: Tuple[int, int, int]
    pads_end: Tuple[int, int, int]
    dilation: Tuple[int, int, int]

    @classmethod
    def from_nd(cls, n, c, size, out, kernel, stride, pads_begin, pads_end, dilation):
        def pad3(v, fill):
            v = tuple(int(i) for i in v)
            return (fill,) * (3 - len(v)) + v
        return cls(int(n), int(c), pad3(size, 1), pad3(out, 1), pad3(kernel, 1), pad3(stride, 1),
                   pad3(pads_begin, 0), pad3(pads_end, 0), pad3(dilation, 1))

    def as_tuple(self):
        """Flat (n, c, size*3, out*3, kernel*3, stride*3, pb*3, pe*3, dil*3), the kernels' Win."""
        return (self.n, self.c, *self.size, *self.out, *self.kernel, *self.stride,
                *self.pads_begin, *self.pads_end, *self.dilation)

    def __repr__(self):
        def ax(v):
            return "x".join(str(i) for i in v)
        return (f"n={self.n} c={self.c} {ax(self.size)}->{ax(self.out)} k={ax(self.kernel)} "
                f"s={ax(self.stride)} p={ax(self.pads_begin)}/{ax(self.pads_end)} d={ax(self.dilation)}")


@dataclass(frozen=True, repr=False)
class PoolThunk(Thunk):
    """Window max/avg pool.  `indices` (int64, optional) receives the argmax
    per output: within the (n, c) plane (indices_mode 1, PyTorch) or over the
    whole input (2, ONNX; 3, ONNX storage_order=1, column-major spatial index).
    Avg scratch: one double line per thread."""
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

    kind: ClassVar[str] = "Pool"
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

    kind: ClassVar[str] = "GlobalPool"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _pool.GlobalPoolLaunch(view(self.x), view(self.y), view(self.scratch), self.planes,
                                      self.spatial, self.pool_kind)


@dataclass(frozen=True, repr=False)
class ResizeNearestThunk(Thunk):
    """Nearest resize as a per-axis gather; `tables` is a constant of int32
    source indices [td | th | tw] (axes padded to 3, missing ones [0])."""
    x: Slice
    y: Slice
    tables: Slice
    planes: int
    size: Tuple[int, int, int]
    out: Tuple[int, int, int]

    kind: ClassVar[str] = "ResizeNearest"
    reads: ClassVar[tuple] = ("x", "tables")
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _resize.ResizeNearestLaunch(view(self.x), view(self.y), view(self.tables), self.planes,
                                           self.size, self.out)


@dataclass(frozen=True, repr=False)
class ResizeNearest2xThunk(Thunk):
    """[planes, h, w] -> [planes, 2h, 2w], each pixel repeated 2x2."""
    x: Slice
    y: Slice
    planes: int
    h: int
    w: int

    kind: ClassVar[str] = "ResizeNearest2x"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _resize.ResizeNearest2xLaunch(view(self.x), view(self.y), self.planes, self.h, self.w)


@dataclass(frozen=True, repr=False)
class Im2ColThunk(Thunk):
    """Patch matrix of x, layout _im2col.LAYOUT_ROWS ([N*L, C*K]) or LAYOUT_ONNX ([N, C*K, L])."""
    x: Slice
    col: Slice
    dims: WindowDims
    layout: int

    kind: ClassVar[str] = "Im2Col"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("col",)

    def bind(self, view):
        return _im2col.Im2ColLaunch(view(self.x), view(self.col), self.dims.as_tuple(), self.layout)


@dataclass(frozen=True, repr=False)
class Col2ImThunk(Thunk):
    """Adjoint of Im2Col: x[n, c, ...] = sum of the patch entries that read it."""
    col: Slice
    x: Slice
    scratch: Slice
    dims: WindowDims
    layout: int
    max_threads: int

    kind: ClassVar[str] = "Col2Im"
    reads: ClassVar[tuple] = ("col",)
    writes: ClassVar[tuple] = ("x",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _im2col.Col2ImLaunch(view(self.col), view(self.x), view(self.scratch), self.dims.as_tuple(),
                                    self.layout, self.max_threads)


# ===========================================================================
# --- training: gradient kernels and the small ops of a training step ---
# ===========================================================================

def _view_or_none(view, s):
    return view(s) if s is not None else None


@dataclass(frozen=True, repr=False)
class ConvBackwardInputThunk(Thunk):
    """dx of a conv (any rank) from dy and the weight."""
    dy: Slice
    weight: Slice
    dx: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvBackwardAlgorithm
    max_threads: int

    kind: ClassVar[str] = "ConvBackwardInput"
    reads: ClassVar[tuple] = ("dy", "weight")
    writes: ClassVar[tuple] = ("dx",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return self.dims.flops(False)      # the same multiply-adds as the forward conv

    def bind(self, view):
        return _backward.ConvBackwardInputLaunch(view(self.dy), view(self.weight), view(self.dx),
                                                 _view_or_none(view, self.scratch), self.dims.as_tuple(),
                                                 int(self.algorithm), self.max_threads)


@dataclass(frozen=True, repr=False)
class ConvBackwardWeightThunk(Thunk):
    """dW of a conv (any rank) from x and dy; per-thread partial sums live in
    `scratch` and are reduced in a fixed order."""
    x: Slice
    dy: Slice
    dw: Slice
    scratch: Optional[Slice]
    dims: ConvNDDims
    algorithm: ConvBackwardAlgorithm
    max_threads: int

    kind: ClassVar[str] = "ConvBackwardWeight"
    reads: ClassVar[tuple] = ("x", "dy")
    writes: ClassVar[tuple] = ("dw",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    @property
    def flops(self):
        return self.dims.flops(False)      # the same multiply-adds as the forward conv

    def bind(self, view):
        return _backward.ConvBackwardWeightLaunch(view(self.x), view(self.dy), view(self.dw),
                                                  _view_or_none(view, self.scratch), self.dims.as_tuple(),
                                                  int(self.algorithm), self.max_threads)


@dataclass(frozen=True, repr=False)
class MaxPool2DBackwardThunk(Thunk):
    """dx of a 1-D / 2-D max pool (WindowDims with a trivial depth axis)."""
    x: Slice
    dy: Slice
    dx: Slice
    dims: WindowDims
    max_threads: int

    kind: ClassVar[str] = "MaxPool2DBackward"
    reads: ClassVar[tuple] = ("x", "dy")
    writes: ClassVar[tuple] = ("dx",)

    def bind(self, view):
        return _pool.MaxPoolBackwardLaunch(view(self.x), view(self.dy), view(self.dx),
                                                 self.dims.as_tuple(), self.max_threads)


@dataclass(frozen=True, repr=False)
class AvgPool2DBackwardThunk(Thunk):
    """dx of a 1-D / 2-D average pool; divisor as PoolThunk's."""
    dy: Slice
    dx: Slice
    dims: WindowDims
    count_include_pad: bool
    divisor_override: int
    max_threads: int

    kind: ClassVar[str] = "AvgPool2DBackward"
    reads: ClassVar[tuple] = ("dy",)
    writes: ClassVar[tuple] = ("dx",)

    def bind(self, view):
        return _pool.AvgPoolBackwardLaunch(view(self.dy), view(self.dx), self.dims.as_tuple(),
                                                 self.count_include_pad, self.divisor_override, self.max_threads)


@dataclass(frozen=True, repr=False)
class BiasAddThunk(Thunk):
    """y[n, c, s] = x[n, c, s] + bias[c]."""
    x: Slice
    bias: Slice
    y: Slice
    n: int
    c: int
    s: int
    max_threads: int

    kind: ClassVar[str] = "BiasAdd"
    reads: ClassVar[tuple] = ("x", "bias")
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return _train.BiasAddLaunch(view(self.x), view(self.bias), view(self.y), self.n, self.c, self.s,
                                    self.max_threads)


@dataclass(frozen=True, repr=False)
class BiasGradThunk(Thunk):
    """db[c] = sum over n, s of dy[n, c, s]."""
    dy: Slice
    db: Slice
    n: int
    c: int
    s: int
    max_threads: int

    kind: ClassVar[str] = "BiasGrad"
    reads: ClassVar[tuple] = ("dy",)
    writes: ClassVar[tuple] = ("db",)

    def bind(self, view):
        return _train.BiasGradLaunch(view(self.dy), view(self.db), self.n, self.c, self.s, self.max_threads)


@dataclass(frozen=True, repr=False)
class ElementwiseThunk(Thunk):
    """out = f(a[, b]) elementwise; `op` is one of the _train.ELEM_* codes
    (relu, relu backward mask, add).  The kind names the op for profiles."""
    a: Slice
    b: Optional[Slice]
    out: Slice
    op: int
    size: int
    max_threads: int

    kind: ClassVar[str] = "Elementwise"
    reads: ClassVar[tuple] = ("a", "b")
    writes: ClassVar[tuple] = ("out",)

    def bind(self, view):
        return _train.ElementwiseLaunch(self.op, view(self.a), _view_or_none(view, self.b), view(self.out),
                                        self.size, self.max_threads)


@dataclass(frozen=True, repr=False)
class ReluThunk(ElementwiseThunk):
    kind: ClassVar[str] = "Relu"


@dataclass(frozen=True, repr=False)
class ReluBackwardThunk(ElementwiseThunk):
    kind: ClassVar[str] = "ReluBackward"


@dataclass(frozen=True, repr=False)
class AddThunk(ElementwiseThunk):
    kind: ClassVar[str] = "Add"


@dataclass(frozen=True, repr=False)
class GemmThunk(Thunk):
    """c[m, n] = op(a) . op(b) (+ bias[n] per row): the dense layer and its two
    gradients, one GEMM split into panels over the threads."""
    a: Slice
    b: Slice
    bias: Optional[Slice]
    c: Slice
    m: int
    n: int
    k: int
    trans_a: bool
    trans_b: bool
    max_threads: int

    kind: ClassVar[str] = "Gemm"
    reads: ClassVar[tuple] = ("a", "b", "bias")
    writes: ClassVar[tuple] = ("c",)

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def bind(self, view):
        return _train.GemmLaunch(view(self.a), view(self.b), _view_or_none(view, self.bias), view(self.c),
                                 self.m, self.n, self.k, self.trans_a, self.trans_b, self.max_threads)


@dataclass(frozen=True, repr=False)
class SoftmaxCrossEntropyThunk(Thunk):
    logits: Slice
    labels: Slice
    loss: Slice
    n: int
    k: int

    kind: ClassVar[str] = "SoftmaxCrossEntropy"
    reads: ClassVar[tuple] = ("logits", "labels")
    writes: ClassVar[tuple] = ("loss",)

    def bind(self, view):
        return _train.SoftmaxCrossEntropyLaunch(view(self.logits), view(self.labels), view(self.loss),
                                                self.n, self.k)


@dataclass(frozen=True, repr=False)
class SoftmaxCrossEntropyBackwardThunk(Thunk):
    logits: Slice
    labels: Slice
    grad_loss: Slice
    dlogits: Slice
    n: int
    k: int

    kind: ClassVar[str] = "SoftmaxCrossEntropyBackward"
    reads: ClassVar[tuple] = ("logits", "labels", "grad_loss")
    writes: ClassVar[tuple] = ("dlogits",)

    def bind(self, view):
        return _train.SoftmaxCrossEntropyBackwardLaunch(view(self.logits), view(self.labels),
                                                        view(self.grad_loss), view(self.dlogits),
                                                        self.n, self.k)
