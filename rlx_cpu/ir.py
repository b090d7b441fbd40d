"""The graph IR: nodes with an op, attributes and a static shape.

A :class:`Graph` is built append-only, so node order is a topological order.
The container itself knows only inputs, constants and outputs; every op method
(``g.conv2d``, ``g.max_pool1d`` ...) is installed by its op family through
``rlx_cpu.registry.graph_method``.  An op method validates its inputs and
infers the output shape at once, raising ``ValueError`` that names the op and
the shapes involved; a graph that was built is therefore always compilable.
A node's ``op`` is the name of the method that built it.
"""
import functools
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .shapes import INDEX_MAX, int_dims, nbytes_of


Shape = Tuple[int, ...]


def as_flag(v, op, arg):
    if isinstance(v, (bool, np.bool_)) or (isinstance(v, (int, np.integer)) and v in (0, 1)):
        return bool(v)
    raise TypeError(f"{op}: {arg} must be a bool, got {v!r}")


@dataclass(frozen=True, eq=False)
class Node:
    """One value of the graph. `op` is 'input', 'constant' or an op kind."""
    graph: "Graph"
    id: int
    op: str
    inputs: Tuple[int, ...]
    shape: Shape
    name: str
    attrs: object = None
    value: Optional[np.ndarray] = None   # constants only
    dtype: str = "float32"               # 'int64' only for index outputs (max-pool indices)

    def __repr__(self):
        return f"Node(%{self.id} {self.op} {self.name!r} shape={list(self.shape)})"


def _check_nonempty(shape, op, arg):
    """No op computes on an empty tensor: a zero-size axis (e.g. a weight
    with a 0-tap kernel axis) would give an output of undefined values."""
    if any(d == 0 for d in shape):
        raise ValueError(f"{op}: {arg} must have every dim >= 1, got shape {fmt_shape(shape)}")


def fmt_shape(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


class Graph:
    """Builder for a static-shape float32 dataflow graph.

    >>> g = Graph()
    >>> x = g.input("x", (1, 3, 32, 32))
    >>> y = g.conv2d(x, np.zeros((8, 3, 3, 3), np.float32), padding=1)
    >>> g.output(y)
    """

    def __init__(self):
        self.nodes = []
        self.outputs = ()
        self._names = set()

    # -- values -----------------------------------------------------------
    def _unique_name(self, name, prefix):
        if name is None:
            name = f"{prefix}_{len(self.nodes)}"
        if not isinstance(name, str) or not name:
            raise TypeError(f"node name must be a non-empty string, got {name!r}")
        if name in self._names:
            raise ValueError(f"duplicate node name {name!r}")
        self._names.add(name)
        return name

    def _add(self, op, inputs, shape, name, attrs=None, value=None, dtype="float32"):
        shape = int_dims(shape, f"{op}: output shape")
        # Exact Python-int arithmetic: a size that cannot be indexed with a
        # Py_ssize_t is refused here, before any buffer is planned.
        nbytes = nbytes_of(shape, np.dtype(dtype).itemsize)
        if nbytes > INDEX_MAX:
            label = op if name is None else f"{op} {name!r}"
            raise ValueError(f"{label}: the output {fmt_shape(shape)} ({dtype}) needs {nbytes} bytes, more than "
                             f"the kernels' Py_ssize_t index type can address ({INDEX_MAX})")
        node = Node(self, len(self.nodes), op, tuple(n.id for n in inputs), shape,
                    self._unique_name(name, op), attrs, value, dtype)
        self.nodes.append(node)
        return node

    def input(self, name, shape):
        """A float32 graph input with a static shape."""
        shape = int_dims(shape, f"input {name!r}: shape")
        if any(d < 1 for d in shape):
            raise ValueError(f"input {name!r}: every dim must be >= 1, got {fmt_shape(shape)}")
        if not isinstance(name, str) or not name:
            raise TypeError(f"input name must be a non-empty string, got {name!r}")
        return self._add("input", (), shape, name)

    def constant(self, array, name=None):
        """A constant, stored as float32 and written into the plan once."""
        arr = np.asarray(array)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"constant {name!r}: expected a real numeric array, got dtype {arr.dtype}")
        arr = np.array(arr, dtype=np.float32, copy=True, order="C")
        arr.setflags(write=False)
        return self._add("constant", (), arr.shape, name, value=arr)

    def _value(self, v, op, arg):
        if isinstance(v, Node):
            if v.graph is not self:
                raise ValueError(f"{op}: {arg} belongs to another graph")
            if v.dtype != "float32":
                raise TypeError(f"{op}: {arg} must be a float32 value, got the {v.dtype} node {v.name!r}")
            _check_nonempty(v.shape, op, arg)
            return v
        if isinstance(v, np.ndarray) or np.isscalar(v) or isinstance(v, (list, tuple)):
            # Check here so the message names the op and argument, not an
            # anonymous constant.
            arr = np.asarray(v)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{op}: {arg} must be a real numeric array, got dtype {arr.dtype}")
            _check_nonempty(arr.shape, op, arg)
            return self.constant(arr)
        raise TypeError(f"{op}: {arg} must be a graph node or a numpy array, got {type(v).__name__}")

    def output(self, *nodes):
        """Declare the graph outputs, in the order plan.run returns them."""
        if not nodes:
            raise ValueError("output: at least one node is required")
        for n in nodes:
            if not isinstance(n, Node) or n.graph is not self:
                raise TypeError(f"output: expected nodes of this graph, got {n!r}")
        self.outputs = tuple(n.id for n in nodes)

    def node(self, node_id):
        return self.nodes[node_id]


# ---------------------------------------------------------------------------
# Build-time checks shared by the op families
# ---------------------------------------------------------------------------

def shape_arg(shape, op, arg):
    """A shape argument (e.g. a gradient's input_shape) as a tuple of ints >= 1."""
    out = int_dims(shape, f"{op}: {arg}")
    if any(d < 1 for d in out):
        raise ValueError(f"{op}: every dim of {arg} must be >= 1, got {fmt_shape(out)}")
    return out


def check_grad_shape(op, got, want, what):
    """A gradient op's grad_output must have the shape of the forward output."""
    if tuple(got) != tuple(want):
        raise ValueError(f"{op}: grad_output must have the shape of the {what}, {fmt_shape(want)}, got {fmt_shape(got)}")


# ---------------------------------------------------------------------------
# Error context: every op method names the shapes of its node inputs
# ---------------------------------------------------------------------------

def with_input_shapes(method):
    """Re-raise a ValueError/TypeError from an op method with the shapes of the
    node arguments appended, so every build-time error names the op (the
    message already starts with it), the argument and the shapes."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as exc:
            nodes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Node)]
            if not nodes or getattr(exc, "_rlx_shapes", False):
                raise
            shapes = ", ".join(f"{n.name} {fmt_shape(n.shape)}" for n in nodes)
            new = type(exc)(f"{exc} [node inputs: {shapes}]")
            new._rlx_shapes = True
            raise new from None
    return wrapper
