"""Thunk records: what one step of a compiled plan does, as plain data.

A thunk holds the arena slices it reads and writes plus integer dims; it
never holds arrays.  ``bind(view)`` turns it into a *launch*, a Cython object
holding typed views over one run context's memory, whose ``execute(nthreads)``
runs the kernel with the GIL released.  Binding happens once per context, so
a run only loops over launches.

This module holds what every record shares: the :class:`Slice` they point
with, the :class:`Thunk` base (a ``kind``, the op name, and the field names of
the slices it ``reads``, ``writes`` and uses as ``scratch_fields``, from which
the arena planner derives liveness), and :class:`WindowDims`, the canonical
sliding-window geometry of pooling and im2col/col2im.  The records of each op
kind live with their op family in ``rlx_cpu/ops/<family>.py``.
"""
from dataclasses import dataclass, fields
from typing import ClassVar, Tuple

from .algorithms import ConvAlgorithm


@dataclass(frozen=True)
class Slice:
    """A byte range of one memory segment: 'arena' (per run context, mutable),
    'const' (shared by all contexts, written at compile time, read-only),
    'input:<i>' (graph input i, the caller's array, read-only) or 'output:<j>'
    (graph output j, the caller's array in run_into).  Input and output
    segments are bound per run (see rlx_cpu.plan)."""
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
    # True for records whose kernel computes each output element from the
    # same element of its full-shape inputs alone, so an input and the output
    # may be the same bytes (the in_place compile pass relies on it).
    pointwise: ClassVar[bool] = False

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

    @classmethod
    def from_attrs(cls, n, c, size, out, attrs):
        """From any attrs record with kernel/stride/pads_begin/pads_end/dilation."""
        return cls.from_nd(n, c, size, out, attrs.kernel, attrs.stride, attrs.pads_begin, attrs.pads_end,
                           attrs.dilation)

    def as_tuple(self):
        """Flat (n, c, size*3, out*3, kernel*3, stride*3, pb*3, pe*3, dil*3), the kernels' Win."""
        return (self.n, self.c, *self.size, *self.out, *self.kernel, *self.stride,
                *self.pads_begin, *self.pads_end, *self.dilation)

    def __repr__(self):
        def ax(v):
            return "x".join(str(i) for i in v)
        return (f"n={self.n} c={self.c} {ax(self.size)}->{ax(self.out)} k={ax(self.kernel)} "
                f"s={ax(self.stride)} p={ax(self.pads_begin)}/{ax(self.pads_end)} d={ax(self.dilation)}")


def view_or_none(view, s):
    """view(s) for an optional slice (a missing bias or scratch stays None)."""
    return view(s) if s is not None else None
