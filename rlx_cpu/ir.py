"""The graph IR: nodes with an op, attributes and a static shape.

A :class:`Graph` is built append-only, so node order is a topological order.
Every op method validates its inputs and infers the output shape at once,
raising ``ValueError`` that names the op and the shapes involved; a graph that
was built is therefore always compilable.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np


Shape = Tuple[int, ...]


def _flag(v, op, arg):
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

    def _add(self, op, inputs, shape, name, attrs=None, value=None, dtype="float32"):
        node = Node(self, len(self.nodes), op, tuple(n.id for n in inputs), tuple(int(d) for d in shape),
                    self._unique_name(name, op), attrs, value, dtype)
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
            if v.dtype != "float32":
                raise TypeError(f"{op}: {arg} must be a float32 value, got the {v.dtype} node {v.name!r}")
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

    # -- the small pieces of a CNN training step -----------------------------
    def relu(self, x, name=None):
        """max(x, 0) elementwise (NaN stays NaN)."""
        x = self._value(x, "relu", "input")
        return self._add("relu", [x], x.shape, name)

    def relu_backward(self, grad_output, y, name=None):
        """grad_output where y > 0, else 0; y is the relu *output* (y > 0 iff x > 0),
        which the next layer keeps alive anyway."""
        op = "relu_backward"
        dy = self._value(grad_output, op, "grad_output")
        y = self._value(y, op, "y")
        if dy.shape != y.shape:
            raise ValueError(f"{op}: grad_output {_fmt(dy.shape)} and y {_fmt(y.shape)} must have the same shape")
        return self._add(op, [dy, y], y.shape, name)

    def add(self, a, b, name=None):
        """a + b elementwise, same shapes (no broadcasting)."""
        a = self._value(a, "add", "a")
        b = self._value(b, "add", "b")
        if a.shape != b.shape:
            raise ValueError(f"add: a {_fmt(a.shape)} and b {_fmt(b.shape)} must have the same shape")
        return self._add("add", [a, b], a.shape, name)

    def bias_add(self, x, bias, name=None):
        """x + bias broadcast over axis 1 (channels / features) of [N, C, ...]."""
        op = "bias_add"
        x = self._value(x, op, "input")
        bias = self._value(bias, op, "bias")
        if len(x.shape) < 2:
            raise ValueError(f"{op}: input must have rank >= 2 (N, C, ...), got {_fmt(x.shape)}")
        if bias.shape != (x.shape[1],):
            raise ValueError(f"{op}: bias must have shape [{x.shape[1]}] for input {_fmt(x.shape)}, "
                             f"got {_fmt(bias.shape)}")
        return self._add(op, [x, bias], x.shape, name)

    def bias_grad(self, grad_output, name=None):
        """Sum of grad_output over every axis but 1: the gradient of a bias added
        along axis 1 (conv channels, dense features)."""
        op = "bias_grad"
        dy = self._value(grad_output, op, "grad_output")
        if len(dy.shape) < 2:
            raise ValueError(f"{op}: grad_output must have rank >= 2 (N, C, ...), got {_fmt(dy.shape)}")
        return self._add(op, [dy], (dy.shape[1],), name)

    def reshape(self, x, shape, name=None):
        """Same values, new static shape (one dim may be -1); no copy is made:
        the compiled plan aliases the input's bytes."""
        op = "reshape"
        x = self._value(x, op, "input")
        try:
            dims = [int(d) for d in shape]
        except TypeError:
            raise TypeError(f"{op}: shape must be a sequence of ints, got {shape!r}") from None
        size = int(np.prod(x.shape, dtype=np.int64))
        if dims.count(-1) > 1 or any(d < 1 and d != -1 for d in dims):
            raise ValueError(f"{op}: shape must be positive ints with at most one -1, got {list(dims)}")
        if -1 in dims:
            known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
            if size % known:
                raise ValueError(f"{op}: cannot reshape input {_fmt(x.shape)} ({size} values) to {list(dims)}")
            dims[dims.index(-1)] = size // known
        if int(np.prod(dims, dtype=np.int64)) != size:
            raise ValueError(f"{op}: cannot reshape input {_fmt(x.shape)} ({size} values) to {list(dims)}")
        return self._add(op, [x], tuple(dims), name)

    def flatten(self, x, start_dim=1, end_dim=-1, name=None):
        """torch.flatten: merge dims start_dim..end_dim (a zero-copy reshape)."""
        x = self._value(x, "flatten", "input")
        r = len(x.shape)
        s = start_dim + r if start_dim < 0 else start_dim
        e = end_dim + r if end_dim < 0 else end_dim
        if not (0 <= s <= e < r):
            raise ValueError(f"flatten: start_dim={start_dim}, end_dim={end_dim} invalid for input {_fmt(x.shape)}")
        merged = int(np.prod(x.shape[s:e + 1], dtype=np.int64))
        return self.reshape(x, x.shape[:s] + (merged,) + x.shape[e + 1:], name=name)

    def linear(self, x, weight, bias=None, name=None):
        """Dense layer as torch.nn.functional.linear: x [N, in] . weight[out, in]^T + bias[out]."""
        op = "linear"
        x = self._value(x, op, "input")
        w = self._value(weight, op, "weight")
        if len(x.shape) != 2 or len(w.shape) != 2 or x.shape[1] != w.shape[1]:
            raise ValueError(f"{op}: expected input [N, in] and weight [out, in], got input {_fmt(x.shape)}, "
                             f"weight {_fmt(w.shape)}")
        inputs = [x, w]
        if bias is not None:
            bias = self._value(bias, op, "bias")
            if bias.shape != (w.shape[0],):
                raise ValueError(f"{op}: bias must have shape [{w.shape[0]}], got {_fmt(bias.shape)}")
            inputs.append(bias)
        return self._add(op, inputs, (x.shape[0], w.shape[0]), name)

    def linear_backward_input(self, grad_output, weight, name=None):
        """dx [N, in] = grad_output [N, out] . weight [out, in]."""
        op = "linear_backward_input"
        dy = self._value(grad_output, op, "grad_output")
        w = self._value(weight, op, "weight")
        if len(dy.shape) != 2 or len(w.shape) != 2 or dy.shape[1] != w.shape[0]:
            raise ValueError(f"{op}: expected grad_output [N, out] and weight [out, in], got grad_output "
                             f"{_fmt(dy.shape)}, weight {_fmt(w.shape)}")
        return self._add(op, [dy, w], (dy.shape[0], w.shape[1]), name)

    def linear_backward_weight(self, x, grad_output, name=None):
        """dW [out, in] = grad_output^T [out, N] . x [N, in]."""
        op = "linear_backward_weight"
        x = self._value(x, op, "input")
        dy = self._value(grad_output, op, "grad_output")
        if len(dy.shape) != 2 or len(x.shape) != 2 or dy.shape[0] != x.shape[0]:
            raise ValueError(f"{op}: expected input [N, in] and grad_output [N, out], got input "
                             f"{_fmt(x.shape)}, grad_output {_fmt(dy.shape)}")
        return self._add(op, [x, dy], (dy.shape[1], x.shape[1]), name)

    def softmax_cross_entropy(self, logits, labels, name=None):
        """Mean over the batch of -log softmax(logits)[label] (torch's cross_entropy
        with class-index targets); labels [N] hold class indices as floats.  A
        label outside [0, K) gives NaN.  The result has shape ()."""
        op = "softmax_cross_entropy"
        z = self._value(logits, op, "logits")
        lab = self._value(labels, op, "labels")
        _check_xent(op, z.shape, lab.shape)
        return self._add(op, [z, lab], (), name)

    def softmax_cross_entropy_backward(self, logits, labels, grad_loss, name=None):
        """d loss / d logits = grad_loss / N * (softmax(logits) - onehot(labels))."""
        op = "softmax_cross_entropy_backward"
        z = self._value(logits, op, "logits")
        lab = self._value(labels, op, "labels")
        gl = self._value(grad_loss, op, "grad_loss")
        _check_xent(op, z.shape, lab.shape)
        if int(np.prod(gl.shape, dtype=np.int64)) != 1:
            raise ValueError(f"{op}: grad_loss must hold one value, got shape {_fmt(gl.shape)}")
        return self._add(op, [z, lab, gl], z.shape, name)


# ---------------------------------------------------------------------------
# --- training: attributes and build-time checks (train branch) ---
# ---------------------------------------------------------------------------

def _shape_arg(shape, op, arg):
    try:
        out = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {arg} must be a sequence of ints, got {shape!r}") from None
    if any(d < 1 for d in out):
        raise ValueError(f"{op}: every dim of {arg} must be >= 1, got {_fmt(out)}")
    return out


def _check_grad_shape(op, got, want, what):
    if tuple(got) != tuple(want):
        raise ValueError(f"{op}: grad_output must have the shape of the {what}, {_fmt(want)}, got {_fmt(got)}")


def _check_xent(op, zs, ls):
    if len(zs) != 2:
        raise ValueError(f"{op}: logits must have shape [N, classes], got {_fmt(zs)}")
    if tuple(ls) != (zs[0],):
        raise ValueError(f"{op}: labels must have shape [{zs[0]}] (one class index per row of logits "
                         f"{_fmt(zs)}), got {_fmt(ls)}")


# ---------------------------------------------------------------------------
# Error context: every op method names the shapes of its node inputs
# ---------------------------------------------------------------------------

_NOT_OPS = {"input", "constant", "output", "node"}


def with_input_shapes(method):
    """Re-raise a ValueError/TypeError from an op method with the shapes of the
    node arguments appended, so every build-time error names the op (the
    message already starts with it), the argument and the shapes."""
    import functools

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError) as exc:
            nodes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, Node)]
            if not nodes or getattr(exc, "_rlx_shapes", False):
                raise
            shapes = ", ".join(f"{n.name} {_fmt(n.shape)}" for n in nodes)
            new = type(exc)(f"{exc} [node inputs: {shapes}]")
            new._rlx_shapes = True
            raise new from None
    return wrapper


for _name, _fn in list(vars(Graph).items()):
    if callable(_fn) and not _name.startswith("_") and _name not in _NOT_OPS:
        setattr(Graph, _name, with_input_shapes(_fn))
del _name, _fn
