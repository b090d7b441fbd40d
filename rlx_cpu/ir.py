"""The graph IR: nodes with an op, attributes and a static shape.

A :class:`Graph` is built append-only, so node order is a topological order.
Every op method validates its inputs and infers the output shape at once,
raising ``ValueError`` that names the op and the shapes involved; a graph that
was built is therefore always compilable.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .shapes import as_tuple, conv_out_size, conv_transpose_out_size, resolve_padding

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


@dataclass(frozen=True)
class ConvTransposeAttrs:
    """Canonical conv-transpose attributes for n spatial axes (n = 1, 2, 3).

    Output size per axis: (in - 1) * stride - pads_begin - pads_end
    + dilation * (kernel - 1) + output_padding + 1."""
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    output_padding: Shape
    groups: int

    @property
    def ndim(self):
        return len(self.kernel)


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

    def conv3d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, name=None):
        """3-D convolution on NCDHW with weight [C_out, C_in/groups, kD, kH, kW]."""
        return self._conv("conv3d", 3, x, weight, bias, stride, padding, dilation, groups, name)

    # -- conv-transpose -------------------------------------------------------
    def _conv_transpose(self, op, nsp, x, weight, bias, stride, padding, output_padding, groups,
                        dilation, output_size, output_shape, name):
        x = self._value(x, op, "input")
        weight = self._value(weight, op, "weight")
        xs, ws = x.shape, weight.shape
        ctx = f"input {_fmt(xs)}, weight {_fmt(ws)}"
        if len(xs) != nsp + 2:
            raise ValueError(f"{op}: input must have rank {nsp + 2} [N, C_in, {nsp} spatial], got {ctx}")
        if len(ws) != nsp + 2:
            raise ValueError(f"{op}: weight must have rank {nsp + 2} [C_in, C_out/groups, k...], got {ctx}")
        if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
            raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
        groups = int(groups)
        n, c_in = xs[0], xs[1]
        if ws[0] != c_in:
            raise ValueError(f"{op}: channel mismatch: input has {c_in} channels but weight dim 0 "
                             f"(C_in) is {ws[0]} ({ctx})")
        if c_in % groups:
            raise ValueError(f"{op}: groups={groups} does not divide in_channels={c_in} ({ctx})")
        c_out = ws[1] * groups
        in_sp = xs[2:]
        kernel = tuple(ws[2:])
        stride = as_tuple(stride, nsp, op, "stride")
        dilation = as_tuple(dilation, nsp, op, "dilation")
        out_pad = as_tuple(output_padding, nsp, op, "output_padding", minimum=0)
        for i in range(nsp):
            if out_pad[i] >= max(stride[i], dilation[i]):
                raise ValueError(
                    f"{op}: output_padding must be smaller than stride or dilation on every axis, got "
                    f"output_padding={out_pad}, stride={stride}, dilation={dilation} ({ctx})")
        if output_size is not None and output_shape is not None:
            raise ValueError(f"{op}: pass output_size (PyTorch) or output_shape (ONNX), not both")

        def full_extent(i):   # output size with no padding and no output_padding
            return (in_sp[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1

        mode = None
        if isinstance(padding, str):
            mode = padding.upper()
            if mode not in ("VALID", "SAME_UPPER", "SAME_LOWER"):
                raise ValueError(f"{op}: padding string must be 'valid', 'SAME_UPPER' or 'SAME_LOWER' "
                                 f"(ONNX auto_pad), got {padding!r}")
        targets = None
        if output_shape is not None:
            if mode is None and any(sum(resolve_padding(padding, in_sp, kernel, stride, dilation, op), ())):
                raise ValueError(f"{op}: output_shape derives the pads (ONNX); pass padding=0 or an "
                                 f"auto_pad string with it, got padding={padding!r}")
            targets = self._spatial_target(op, "output_shape", output_shape, nsp, n, c_out, ctx)
        elif mode in ("SAME_UPPER", "SAME_LOWER"):
            targets = tuple(in_sp[i] * stride[i] for i in range(nsp))
        if targets is not None:
            # ONNX ConvTranspose: total = full extent + output_padding - target,
            # odd total's extra at the end for SAME_UPPER, at the beginning
            # otherwise.  A negative total (target beyond what the kernel
            # reaches) becomes zero-padding of the output's tail (as ONNX Runtime).
            begin, end, eff_pad = [], [], []
            for i in range(nsp):
                total = full_extent(i) + out_pad[i] - targets[i]
                if total < 0:
                    begin.append(0)
                    end.append(0)
                    eff_pad.append(out_pad[i] - total)
                    continue
                half = total // 2
                if mode == "SAME_UPPER":
                    begin.append(half)
                    end.append(total - half)
                else:
                    begin.append(total - half)
                    end.append(half)
                eff_pad.append(out_pad[i])
            begin, end, out_pad = tuple(begin), tuple(end), tuple(eff_pad)
        elif mode == "VALID":
            begin, end = (0,) * nsp, (0,) * nsp
        else:
            begin, end = resolve_padding(padding, in_sp, kernel, stride, dilation, op)
        if output_size is not None:
            if mode is not None and mode != "VALID":
                raise ValueError(f"{op}: output_size cannot be combined with padding={padding!r}")
            if any(out_pad):
                raise ValueError(f"{op}: pass output_padding or output_size, not both "
                                 f"(got output_padding={out_pad})")
            sizes = self._spatial_target(op, "output_size", output_size, nsp, n, c_out, ctx)
            picked = []
            for i in range(nsp):
                lo = conv_transpose_out_size(in_sp[i], kernel[i], stride[i], begin[i], end[i], dilation[i], 0)
                hi = lo + max(stride[i], dilation[i]) - 1
                if not lo <= sizes[i] <= hi:
                    raise ValueError(
                        f"{op}: output_size {list(sizes)} is not reachable: spatial axis {i} must be in "
                        f"[{lo}, {hi}] for {ctx}, stride {stride}, pads {begin}/{end}, dilation {dilation}")
                picked.append(sizes[i] - lo)
            out_pad = tuple(picked)
        out_sp = []
        for i in range(nsp):
            o = conv_transpose_out_size(in_sp[i], kernel[i], stride[i], begin[i], end[i], dilation[i],
                                        out_pad[i])
            if o < 1:
                raise ValueError(
                    f"{op}: output size {o} on spatial axis {i} is empty: the pads {begin[i]}+{end[i]} remove "
                    f"the whole extent {full_extent(i) + out_pad[i]} ({ctx}, stride {stride}, "
                    f"dilation {dilation}, output_padding {out_pad})")
            out_sp.append(o)
        inputs = [x, weight]
        if bias is not None:
            bias = self._value(bias, op, "bias")
            if bias.shape != (c_out,):
                raise ValueError(f"{op}: bias must have shape [{c_out}], got {_fmt(bias.shape)} ({ctx})")
            inputs.append(bias)
        attrs = ConvTransposeAttrs(kernel, stride, begin, end, dilation, out_pad, groups)
        return self._add("conv_transpose", inputs, (n, c_out, *out_sp), name, attrs)

    @staticmethod
    def _spatial_target(op, arg, value, nsp, n, c_out, ctx):
        """An output size given as nsp spatial ints or a full [N, C, ...] shape."""
        try:
            sizes = tuple(value)
        except TypeError:
            raise TypeError(f"{op}: {arg} must be a sequence of ints, got {value!r}") from None
        if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in sizes):
            raise TypeError(f"{op}: {arg} must be a sequence of ints, got {value!r}")
        sizes = tuple(int(v) for v in sizes)
        if len(sizes) == nsp + 2:
            if sizes[:2] != (n, c_out):
                raise ValueError(f"{op}: {arg} {list(sizes)} must start with [N, C_out] = [{n}, {c_out}] ({ctx})")
            sizes = sizes[2:]
        if len(sizes) != nsp:
            raise ValueError(f"{op}: {arg} must have {nsp} spatial sizes (or {nsp + 2} with N, C), "
                             f"got {value!r}")
        if any(v < 1 for v in sizes):
            raise ValueError(f"{op}: {arg} must be >= 1 on every axis, got {value!r}")
        return sizes

    def conv_transpose1d(self, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1, output_size=None, output_shape=None, name=None):
        """1-D transposed convolution on [N, C_in, L] with weight [C_in, C_out/groups, k].

        padding: as conv (int, per-axis, ONNX begins-then-ends, (begin, end)
        pairs) or an ONNX auto_pad string 'valid' / 'SAME_UPPER' / 'SAME_LOWER'
        (output = input * stride).  output_size (PyTorch) picks output_padding:
        each spatial size may be min .. min + max(stride, dilation) - 1, min
        being the size at output_padding 0 (the output_padding rule; PyTorch's
        own check stops at min + stride - 1).  output_shape (ONNX) derives the
        pads instead, as ONNX ConvTranspose does."""
        return self._conv_transpose("conv_transpose1d", 1, x, weight, bias, stride, padding, output_padding,
                                    groups, dilation, output_size, output_shape, name)

    def conv_transpose2d(self, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1, output_size=None, output_shape=None, name=None):
        """2-D transposed convolution on NCHW with weight [C_in, C_out/groups, kH, kW].
        Arguments as conv_transpose1d."""
        return self._conv_transpose("conv_transpose2d", 2, x, weight, bias, stride, padding, output_padding,
                                    groups, dilation, output_size, output_shape, name)

    def conv_transpose3d(self, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                         dilation=1, output_size=None, output_shape=None, name=None):
        """3-D transposed convolution on NCDHW with weight [C_in, C_out/groups, kD, kH, kW].
        Arguments as conv_transpose1d."""
        return self._conv_transpose("conv_transpose3d", 3, x, weight, bias, stride, padding, output_padding,
                                    groups, dilation, output_size, output_shape, name)
    # =======================================================================
    # --- training: gradients of the convolution family (train branch) ---
    # Argument order follows the issue (grad first for input gradients); the
    # functional module also offers torch.nn.grad's conv*_input/conv*_weight.
    # =======================================================================
    def conv1d_backward_input(self, grad_output, weight, input_shape, stride=1, padding=0, dilation=1,
                              groups=1, name=None):
        """Gradient of conv1d w.r.t. its input: [N, C_in, L] from dy [N, C_out, L_out]."""
        return self._conv_backward_input("conv1d_backward_input", 1, grad_output, weight, input_shape,
                                         stride, padding, dilation, groups, name)

    def conv2d_backward_input(self, grad_output, weight, input_shape, stride=1, padding=0, dilation=1,
                              groups=1, name=None):
        """Gradient of conv2d w.r.t. its input (torch.nn.grad.conv2d_input)."""
        return self._conv_backward_input("conv2d_backward_input", 2, grad_output, weight, input_shape,
                                         stride, padding, dilation, groups, name)

    def conv3d_backward_input(self, grad_output, weight, input_shape, stride=1, padding=0, dilation=1,
                              groups=1, name=None):
        """Gradient of conv3d w.r.t. its input: [N, C_in, D, H, W]."""
        return self._conv_backward_input("conv3d_backward_input", 3, grad_output, weight, input_shape,
                                         stride, padding, dilation, groups, name)

    def conv1d_backward_weight(self, x, grad_output, weight_shape, stride=1, padding=0, dilation=1,
                               groups=1, name=None):
        """Gradient of conv1d w.r.t. its weight [C_out, C_in/groups, k]."""
        return self._conv_backward_weight("conv1d_backward_weight", 1, x, grad_output, weight_shape,
                                          stride, padding, dilation, groups, name)

    def conv2d_backward_weight(self, x, grad_output, weight_shape, stride=1, padding=0, dilation=1,
                               groups=1, name=None):
        """Gradient of conv2d w.r.t. its weight (torch.nn.grad.conv2d_weight)."""
        return self._conv_backward_weight("conv2d_backward_weight", 2, x, grad_output, weight_shape,
                                          stride, padding, dilation, groups, name)

    def conv3d_backward_weight(self, x, grad_output, weight_shape, stride=1, padding=0, dilation=1,
                               groups=1, name=None):
        """Gradient of conv3d w.r.t. its weight [C_out, C_in/groups, kD, kH, kW]."""
        return self._conv_backward_weight("conv3d_backward_weight", 3, x, grad_output, weight_shape,
                                          stride, padding, dilation, groups, name)

    def _conv_backward_input(self, op, nsp, grad_output, weight, input_shape, stride, padding, dilation,
                             groups, name):
        dy = self._value(grad_output, op, "grad_output")
        w = self._value(weight, op, "weight")
        xs = _shape_arg(input_shape, op, "input_shape")
        attrs = _conv_backward_attrs(op, nsp, xs, w.shape, dy.shape, stride, padding, dilation, groups)
        return self._add("conv_backward_input", [dy, w], xs, name, attrs)

    def _conv_backward_weight(self, op, nsp, x, grad_output, weight_shape, stride, padding, dilation,
                              groups, name):
        x = self._value(x, op, "input")
        dy = self._value(grad_output, op, "grad_output")
        ws = _shape_arg(weight_shape, op, "weight_shape")
        attrs = _conv_backward_attrs(op, nsp, x.shape, ws, dy.shape, stride, padding, dilation, groups)
        return self._add("conv_backward_weight", [x, dy], ws, name, attrs)

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


def _conv_backward_attrs(op, nsp, xs, ws, dys, stride, padding, dilation, groups):
    """Validate the forward conv these gradients belong to; return its ConvAttrs."""
    ctx = f"input {_fmt(xs)}, weight {_fmt(ws)}, grad_output {_fmt(dys)}"
    for arg, shape in (("input", xs), ("weight", ws), ("grad_output", dys)):
        if len(shape) != nsp + 2:
            raise ValueError(f"{op}: {arg} must have rank {nsp + 2}, got {ctx}")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
    groups = int(groups)
    c_in, c_out, cpg = xs[1], ws[0], ws[1]
    if c_in % groups or c_out % groups:
        raise ValueError(f"{op}: groups={groups} must divide in_channels={c_in} and out_channels={c_out} ({ctx})")
    if cpg * groups != c_in:
        raise ValueError(f"{op}: channel mismatch: input has {c_in} channels but weight expects "
                         f"{cpg} x groups={groups} = {cpg * groups} ({ctx})")
    kernel = tuple(ws[2:])
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
    out = tuple(conv_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i]) for i in range(nsp))
    if any(o < 1 for o in out):
        raise ValueError(f"{op}: the kernel does not fit the padded input ({ctx}, pads {begin}/{end}, "
                         f"dilation {dilation})")
    want = (xs[0], c_out) + out
    if tuple(dys) != want:
        raise ValueError(f"{op}: grad_output must have the conv's output shape {_fmt(want)} "
                         f"(stride {stride}, pads {begin}/{end}, dilation {dilation}), got {ctx}")
    return ConvAttrs(kernel, stride, begin, end, dilation, groups)


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
