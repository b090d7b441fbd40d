"""The graph IR: nodes with an op, attributes and a static shape.

A :class:`Graph` is built append-only, so node order is a topological order.
Every op method validates its inputs and infers the output shape at once,
raising ``ValueError`` that names the op and the shapes involved; a graph that
was built is therefore always compilable.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .shapes import as_tuple, conv_out_size, resolve_padding

Shape = Tuple[int, ...]


@dataclass(frozen=True)
class ConvAttrs:
    """Canonical convolution attributes for n spatial axes (n = 1, 2, 3)."""
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    groups: int

    @property
    def ndim(self):
        return len(self.kernel)


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

    def __repr__(self):
        return f"Node(%{self.id} {self.op} {self.name!r} shape={list(self.shape)})"


def _fmt(shape):
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

    def _add(self, op, inputs, shape, name, attrs=None, value=None):
        node = Node(self, len(self.nodes), op, tuple(n.id for n in inputs), tuple(int(d) for d in shape),
                    self._unique_name(name, op), attrs, value)
        self.nodes.append(node)
        return node

    def input(self, name, shape):
        """A float32 graph input with a static shape."""
        try:
            shape = tuple(int(d) for d in shape)
        except TypeError:
            raise TypeError(f"input {name!r}: shape must be a sequence of ints, got {shape!r}") from None
        if any(d < 1 for d in shape):
            raise ValueError(f"input {name!r}: every dim must be >= 1, got {_fmt(shape)}")
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
            return v
        if isinstance(v, np.ndarray) or np.isscalar(v) or isinstance(v, (list, tuple)):
            # Check here so the message names the op and argument, not an
            # anonymous constant.
            arr = np.asarray(v)
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{op}: {arg} must be a real numeric array, got dtype {arr.dtype}")
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

    # -- convolution --------------------------------------------------------
    def _conv(self, op, nsp, x, weight, bias, stride, padding, dilation, groups, name):
        x = self._value(x, op, "input")
        weight = self._value(weight, op, "weight")
        xs, ws = x.shape, weight.shape
        ctx = f"input {_fmt(xs)}, weight {_fmt(ws)}"
        if len(xs) != nsp + 2:
            raise ValueError(f"{op}: input must have rank {nsp + 2} (N, C, {'spatial, ' * nsp}...), got {ctx}")
        if len(ws) != nsp + 2:
            raise ValueError(f"{op}: weight must have rank {nsp + 2} [C_out, C_in/groups, k...], got {ctx}")
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
        groups = int(groups)
        n, c_in = xs[0], xs[1]
        c_out, cpg = ws[0], ws[1]
        if c_in % groups:
            raise ValueError(f"{op}: groups={groups} does not divide in_channels={c_in} ({ctx})")
        if c_out % groups:
            raise ValueError(f"{op}: groups={groups} does not divide out_channels={c_out} ({ctx})")
        if cpg * groups != c_in:
            raise ValueError(
                f"{op}: channel mismatch: input has {c_in} channels but weight expects "
                f"{cpg} x groups={groups} = {cpg * groups} ({ctx})")
        kernel = tuple(ws[2:])
        stride = as_tuple(stride, nsp, op, "stride")
        dilation = as_tuple(dilation, nsp, op, "dilation")
        begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
        out_sp = []
        for i in range(nsp):
            o = conv_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i])
            if o < 1:
                raise ValueError(
                    f"{op}: kernel extent {dilation[i] * (kernel[i] - 1) + 1} (kernel {kernel[i]}, dilation "
                    f"{dilation[i]}) is larger than padded input {xs[2 + i] + begin[i] + end[i]} on spatial "
                    f"axis {i} ({ctx}, pads {begin}/{end})")
            out_sp.append(o)
        inputs = [x, weight]
        if bias is not None:
            bias = self._value(bias, op, "bias")
            if bias.shape != (c_out,):
                raise ValueError(f"{op}: bias must have shape [{c_out}], got {_fmt(bias.shape)} ({ctx})")
            inputs.append(bias)
        attrs = ConvAttrs(kernel, stride, begin, end, dilation, groups)
        return self._add("conv", inputs, (n, c_out, *out_sp), name, attrs)

    def conv1d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None):
        """1-D convolution on [N, C, L] with weight [C_out, C_in/groups, k]."""
        return self._conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups, name)

    def conv2d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None):
        """2-D convolution on NCHW with weight [C_out, C_in/groups, kH, kW]."""
        return self._conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups, name)
