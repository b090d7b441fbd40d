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
from dataclasses import dataclass, fields
from typing import ClassVar, Optional, Tuple

from . import _train
from .algorithms import ConvAlgorithm


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


# ---------------------------------------------------------------------------
# --- pooling / resize / im2col ---
# ---------------------------------------------------------------------------

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


# ===========================================================================
# --- training: gradient kernels and the small ops of a training step ---
# ===========================================================================

def _view_or_none(view, s):
    return view(s) if s is not None else None


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
