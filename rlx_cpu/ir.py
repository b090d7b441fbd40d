"""The graph IR: nodes with an op, attributes and a static shape.

A :class:`Graph` is built append-only, so node order is a topological order.
Every op method validates its inputs and infers the output shape at once,
raising ``ValueError`` that names the op and the shapes involved; a graph that
was built is therefore always compilable.
"""
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from .shapes import (as_tuple, conv_out_size, conv_transpose_out_size, first_padding_only_window, pool_out_size,
                     resolve_padding, torch_nearest_table)

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


# --- pooling / resize / im2col attributes ---

@dataclass(frozen=True)
class PoolAttrs:
    """Canonical window-pool attributes for n spatial axes (n = 1, 2, 3)."""
    kind: str                 # 'max' | 'avg'
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    ceil_mode: bool
    count_include_pad: bool   # avg: divide by the taps inside the padded input
    divisor_override: int     # avg: fixed divisor, 0 = none
    indices: str              # max: 'none' | 'plane' (PyTorch) | 'onnx' (flat over N, C, ...) | 'onnx_colmajor'

    @property
    def ndim(self):
        return len(self.kernel)


@dataclass(frozen=True)
class GlobalPoolAttrs:
    kind: str                 # 'max' | 'avg'


@dataclass(frozen=True, eq=False)
class ResizeNearestAttrs:
    """tables[i][o] = source index of output index o on spatial axis i."""
    tables: Tuple[np.ndarray, ...]


@dataclass(frozen=True)
class PatchAttrs:
    """im2col / col2im geometry: image sizes and block counts per spatial axis."""
    kernel: Shape
    stride: Shape
    pads_begin: Shape
    pads_end: Shape
    dilation: Shape
    image: Shape              # spatial sizes of the image [N, C, *image]
    blocks: Shape             # patch positions per axis (L = prod(blocks))
    layout: str               # 'rows' [N*L, C*K] | 'onnx' [N, C*K, L]

    @property
    def ndim(self):
        return len(self.kernel)


POOL_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


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
    # -- pooling ------------------------------------------------------------
    def _pool(self, op, kind, nsp, x, kernel_size, stride, padding, dilation, ceil_mode,
              count_include_pad=True, divisor_override=None, return_indices=False,
              auto_pad="NOTSET", indices_layout="plane", name=None):
        x = self._value(x, op, "input")
        attrs, shape = _pool_attrs(op, kind, nsp, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                                   count_include_pad, divisor_override, return_indices, auto_pad, indices_layout)
        y = self._add("pool", [x], shape, name if name is not None else f"{op}_{len(self.nodes)}", attrs)
        if attrs.indices == "none":
            return y
        # The pool thunk writes both values and indices: the indices node is
        # always the node right after its pool node (see compiler.compile_pool).
        idx = self._add("pool_indices", [y], shape, y.name + ".indices", dtype="int64")
        return y, idx

    def max_pool(self, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                 return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
        """Max pooling over the spatial axes of [N, C, *spatial] (1 to 3 axes).

        padding: int, per-axis ints, ONNX pads (begins then ends) or
        (begin, end) pairs; auto_pad: ONNX 'SAME_UPPER' / 'SAME_LOWER' / 'VALID'.
        return_indices: also return an int64 indices node, flat within each
        (n, c) plane (PyTorch) or, with indices_layout='onnx', flat over the
        whole [N, C, *spatial] tensor (ONNX MaxPool, storage_order 0);
        'onnx_colmajor': plane offset plus the spatial index in column-major
        order, first spatial axis fastest (ONNX storage_order 1)."""
        return self._pool("max_pool", "max", None, x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout,
                          name=name)

    def avg_pool(self, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                 divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        """Average pooling over the spatial axes of [N, C, *spatial] (1 to 3 axes).

        The divisor is divisor_override if given, else with count_include_pad
        the taps inside the padded input (not the ceil-mode overhang), else the
        in-bounds taps.  dilation as in ONNX AveragePool-19."""
        return self._pool("avg_pool", "avg", None, x, kernel_size, stride, padding, dilation, ceil_mode,
                          count_include_pad, divisor_override, auto_pad=auto_pad, name=name)

    def max_pool1d(self, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                   return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
        """max_pool on [N, C, L]."""
        return self._pool("max_pool1d", "max", 1, x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout,
                          name=name)

    def max_pool2d(self, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                   return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
        """max_pool on [N, C, H, W]."""
        return self._pool("max_pool2d", "max", 2, x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout,
                          name=name)

    def max_pool3d(self, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
                   return_indices=False, *, auto_pad="NOTSET", indices_layout="plane", name=None):
        """max_pool on [N, C, D, H, W]."""
        return self._pool("max_pool3d", "max", 3, x, kernel_size, stride, padding, dilation, ceil_mode,
                          return_indices=return_indices, auto_pad=auto_pad, indices_layout=indices_layout,
                          name=name)

    def avg_pool1d(self, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        """avg_pool on [N, C, L]."""
        return self._pool("avg_pool1d", "avg", 1, x, kernel_size, stride, padding, dilation, ceil_mode,
                          count_include_pad, divisor_override, auto_pad=auto_pad, name=name)

    def avg_pool2d(self, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        """avg_pool on [N, C, H, W]."""
        return self._pool("avg_pool2d", "avg", 2, x, kernel_size, stride, padding, dilation, ceil_mode,
                          count_include_pad, divisor_override, auto_pad=auto_pad, name=name)

    def avg_pool3d(self, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                   divisor_override=None, *, dilation=1, auto_pad="NOTSET", name=None):
        """avg_pool on [N, C, D, H, W]."""
        return self._pool("avg_pool3d", "avg", 3, x, kernel_size, stride, padding, dilation, ceil_mode,
                          count_include_pad, divisor_override, auto_pad=auto_pad, name=name)

    def _global_pool(self, op, kind, x, name):
        x = self._value(x, op, "input")
        if len(x.shape) < 3:
            raise ValueError(f"{op}: input must have rank >= 3 (N, C, spatial...), got {_fmt(x.shape)}")
        shape = (x.shape[0], x.shape[1]) + (1,) * (len(x.shape) - 2)
        name = name if name is not None else f"{op}_{len(self.nodes)}"
        return self._add("global_pool", [x], shape, name, GlobalPoolAttrs(kind))

    def global_avg_pool(self, x, name=None):
        """Mean over all spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."""
        return self._global_pool("global_avg_pool", "avg", x, name)

    def global_max_pool(self, x, name=None):
        """Maximum over all spatial axes: [N, C, *spatial] -> [N, C, 1, ...]."""
        return self._global_pool("global_max_pool", "max", x, name)

    # -- resize (nearest) ---------------------------------------------------
    def resize_nearest(self, x, sizes, index_tables, name=None, *, op="resize_nearest"):
        """Nearest resize of the spatial axes of [N, C, *spatial] (1 to 3 axes)
        by explicit source-index tables: y[..., o1, o2] = x[..., t1[o1], t2[o2]].

        sizes: output size per spatial axis; index_tables: one int sequence per
        spatial axis, of that length, with values in [0, input size).  Any
        coordinate convention (PyTorch, ONNX Resize modes) is a choice of tables."""
        x = self._value(x, op, "input")
        xs = x.shape
        nsp = len(xs) - 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {_fmt(xs)}")
        sizes = as_tuple(sizes, nsp, op, "sizes")
        try:
            tables = list(index_tables)
        except TypeError:
            raise TypeError(f"{op}: index_tables must be a sequence of {nsp} integer arrays") from None
        if len(tables) != nsp:
            raise ValueError(f"{op}: index_tables must have one table per spatial axis ({nsp}), got {len(tables)}")
        out_tables = []
        for i, t in enumerate(tables):
            arr = np.asarray(t)
            if arr.dtype.kind not in "iu":
                raise TypeError(f"{op}: index_tables[{i}] must hold integers, got dtype {arr.dtype}")
            if arr.shape != (sizes[i],):
                raise ValueError(f"{op}: index_tables[{i}] must have shape [{sizes[i]}] (the output size), "
                                 f"got {_fmt(arr.shape)}")
            if arr.size and (arr.min() < 0 or arr.max() >= xs[2 + i]):
                raise ValueError(f"{op}: index_tables[{i}] values must be in [0, {xs[2 + i]}) for input "
                                 f"{_fmt(xs)}, got range [{arr.min()}, {arr.max()}]")
            arr = np.array(arr, dtype=np.int32)
            arr.setflags(write=False)
            out_tables.append(arr)
        name = name if name is not None else f"{op}_{len(self.nodes)}"
        return self._add("resize_nearest", [x], (xs[0], xs[1], *sizes), name, ResizeNearestAttrs(tuple(out_tables)))

    def upsample_nearest2x(self, x, name=None):
        """[N, C, H, W] -> [N, C, 2H, 2W], each pixel repeated 2x2."""
        op = "upsample_nearest2x"
        x = self._value(x, op, "input")
        if len(x.shape) != 4:
            raise ValueError(f"{op}: input must have rank 4 (N, C, H, W), got {_fmt(x.shape)}")
        h, w = x.shape[2:]
        tables = [np.arange(2 * h) // 2, np.arange(2 * w) // 2]
        return self.resize_nearest(x, (2 * h, 2 * w), tables, name, op=op)

    def interpolate(self, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                    recompute_scale_factor=None, antialias=False, name=None):
        """torch.nn.functional.interpolate for mode 'nearest' (legacy) and
        'nearest-exact' on [N, C, *spatial] (1 to 3 axes)."""
        op = "interpolate"
        x = self._value(x, op, "input")
        xs = x.shape
        nsp = len(xs) - 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {_fmt(xs)}")
        if mode not in ("nearest", "nearest-exact"):
            raise ValueError(f"{op}: mode must be 'nearest' or 'nearest-exact' (others are not implemented), "
                             f"got {mode!r}")
        if align_corners is not None:
            raise ValueError(f"{op}: align_corners can only be set with the interpolating modes, not {mode!r}")
        if antialias:
            raise ValueError(f"{op}: antialias applies to bilinear/bicubic modes only, not {mode!r}")
        if (size is None) == (scale_factor is None):
            raise ValueError(f"{op}: exactly one of size and scale_factor must be given, got size={size!r}, "
                             f"scale_factor={scale_factor!r}")
        in_sp = xs[2:]
        scales = [None] * nsp
        if size is not None:
            sizes = as_tuple(size, nsp, op, "size")
        else:
            if isinstance(scale_factor, (list, tuple)):
                if len(scale_factor) != nsp:
                    raise ValueError(f"{op}: scale_factor must have {nsp} values for input {_fmt(xs)}, "
                                     f"got {scale_factor!r}")
                factors = [float(f) for f in scale_factor]
            else:
                try:
                    factors = [float(scale_factor)] * nsp
                except (TypeError, ValueError):
                    raise TypeError(f"{op}: scale_factor must be a number or a sequence of numbers, "
                                    f"got {scale_factor!r}") from None
            if any(not np.isfinite(f) or f <= 0 for f in factors):
                raise ValueError(f"{op}: scale_factor must be positive and finite, got {scale_factor!r}")
            # As PyTorch: out = floor(in * factor) in double; the factor itself
            # reaches the kernel unless recompute_scale_factor is set.
            sizes = tuple(int(np.floor(float(s) * f)) for s, f in zip(in_sp, factors))
            if not recompute_scale_factor:
                scales = factors
        if any(s < 1 for s in sizes):
            raise ValueError(f"{op}: output size must be >= 1 on every spatial axis, got {list(sizes)} "
                             f"for input {_fmt(xs)}")
        # PyTorch's 2-D nearest kernel (only) short-cuts out == in and out == 2 in.
        tables = [torch_nearest_table(in_sp[i], sizes[i], scales[i], mode, shortcuts=nsp == 2)
                  for i in range(nsp)]
        return self.resize_nearest(x, sizes, tables, name, op=op)

    # -- im2col / col2im ------------------------------------------------------
    def _patch_geometry(self, op, image, kernel_size, stride, padding, dilation):
        nsp = len(image)
        kernel = as_tuple(kernel_size, nsp, op, "kernel_size")
        stride = as_tuple(stride, nsp, op, "stride")
        dilation = as_tuple(dilation, nsp, op, "dilation")
        begin, end = resolve_padding(padding, image, kernel, stride, dilation, op)
        blocks = []
        for i in range(nsp):
            o = conv_out_size(image[i], kernel[i], stride[i], begin[i], end[i], dilation[i])
            if o < 1:
                raise ValueError(
                    f"{op}: kernel extent {dilation[i] * (kernel[i] - 1) + 1} is larger than padded image "
                    f"{image[i] + begin[i] + end[i]} on spatial axis {i} (image {_fmt(image)}, kernel {kernel}, "
                    f"dilation {dilation}, pads {begin}/{end})")
            blocks.append(o)
        return kernel, stride, begin, end, dilation, tuple(blocks)

    def im2col(self, x, kernel_size, stride=1, padding=0, dilation=1, *, layout="rows", name=None):
        """Patch matrix of [N, C, *spatial] (1 to 3 axes), zeros in the padding.

        layout 'rows': [N*L, C*K], row (n, block position), column (c, k taps...);
        layout 'onnx': [N, C*K, L] (torch.nn.functional.unfold).  K = prod(kernel),
        L = number of block positions (the conv output size)."""
        op = "im2col"
        x = self._value(x, op, "input")
        xs = x.shape
        nsp = len(xs) - 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {_fmt(xs)}")
        if layout not in ("rows", "onnx"):
            raise ValueError(f"{op}: layout must be 'rows' or 'onnx', got {layout!r}")
        kernel, stride, begin, end, dilation, blocks = self._patch_geometry(
            op, xs[2:], kernel_size, stride, padding, dilation)
        ck = xs[1] * int(np.prod(kernel))
        nl = int(np.prod(blocks))
        shape = (xs[0] * nl, ck) if layout == "rows" else (xs[0], ck, nl)
        attrs = PatchAttrs(kernel, stride, begin, end, dilation, tuple(xs[2:]), blocks, layout)
        return self._add("im2col", [x], shape, name, attrs)

    def col2im(self, cols, output_size, kernel_size, stride=1, padding=0, dilation=1, *, layout="rows",
               name=None, op="col2im"):
        """Adjoint of im2col: sum patch entries back into [N, C, *output_size].

        cols: [N*L, C*K] (layout 'rows') or [N, C*K, L] (layout 'onnx',
        torch.nn.functional.fold / ONNX Col2Im).  output_size: the image's
        spatial sizes (an int means a square 2-D image)."""
        cols = self._value(cols, op, "input")
        cs = cols.shape
        if isinstance(output_size, (int, np.integer)) and not isinstance(output_size, bool):
            output_size = (int(output_size),) * 2
        try:
            if isinstance(output_size, str):
                raise TypeError
            image = tuple(output_size)
        except TypeError:
            raise TypeError(f"{op}: output_size must be an int or a sequence of ints, got {output_size!r}") from None
        image = as_tuple(image, len(image), op, "output_size")
        nsp = len(image)
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: output_size must have 1 to 3 spatial sizes, got {output_size!r}")
        if layout not in ("rows", "onnx"):
            raise ValueError(f"{op}: layout must be 'rows' or 'onnx', got {layout!r}")
        kernel, stride, begin, end, dilation, blocks = self._patch_geometry(
            op, image, kernel_size, stride, padding, dilation)
        k = int(np.prod(kernel))
        nl = int(np.prod(blocks))
        ctx = f"input {_fmt(cs)}, output_size {_fmt(image)}, kernel {kernel}, {nl} block positions"
        if layout == "rows":
            if len(cs) != 2:
                raise ValueError(f"{op}: input must have rank 2 [N*L, C*K] (layout 'rows'), got {ctx}")
            rows, ck = cs
            if rows % nl:
                raise ValueError(f"{op}: input rows {rows} are not a multiple of the block positions L={nl} ({ctx})")
            n = rows // nl
        else:
            if len(cs) != 3:
                raise ValueError(f"{op}: input must have rank 3 [N, C*K, L] (layout 'onnx'), got {ctx}")
            n, ck, l_in = cs
            if l_in != nl:
                raise ValueError(f"{op}: input has {l_in} block positions but the geometry gives L={nl} ({ctx})")
        if ck % k:
            raise ValueError(f"{op}: input columns {ck} are not a multiple of the kernel size K={k} ({ctx})")
        attrs = PatchAttrs(kernel, stride, begin, end, dilation, image, blocks, layout)
        name = name if name is not None else f"{op}_{len(self.nodes)}"
        return self._add("col2im", [cols], (n, ck // k, *image), name, attrs)

    def col2im_onnx(self, x, image_shape, block_shape, dilations=1, pads=0, strides=1, name=None):
        """ONNX Col2Im: [N, C*prod(block_shape), L] -> [N, C, *image_shape];
        pads in ONNX order (begins then ends)."""
        return self.col2im(x, tuple(image_shape), block_shape, strides, pads, dilations, layout="onnx",
                           name=name, op="col2im_onnx")

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

    # -- pooling gradients: 1-D and 2-D, forward semantics as g.max_pool / g.avg_pool --
    def max_pool1d_backward(self, x, grad_output, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, *, auto_pad="NOTSET", name=None):
        """Gradient of max_pool1d w.r.t. its input x [N, C, L] (see max_pool2d_backward)."""
        return self._max_pool_backward("max_pool1d_backward", 1, x, grad_output, kernel_size, stride, padding,
                                       dilation, ceil_mode, auto_pad, name)

    def max_pool2d_backward(self, x, grad_output, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, *, auto_pad="NOTSET", name=None):
        """Gradient of max_pool2d w.r.t. its input x [N, C, H, W].  Each window's
        gradient goes to the tap g.max_pool2d's indices name: the first maximum
        in window order, or the last NaN; overlapping windows accumulate;
        padded taps and ceil-mode overhang are never read."""
        return self._max_pool_backward("max_pool2d_backward", 2, x, grad_output, kernel_size, stride, padding,
                                       dilation, ceil_mode, auto_pad, name)

    def avg_pool1d_backward(self, grad_output, input_shape, kernel_size, stride=None, padding=0,
                            ceil_mode=False, count_include_pad=True, divisor_override=None, *, dilation=1,
                            auto_pad="NOTSET", name=None):
        """Gradient of avg_pool1d w.r.t. its input, of shape input_shape [N, C, L]."""
        return self._avg_pool_backward("avg_pool1d_backward", 1, grad_output, input_shape, kernel_size, stride,
                                       padding, ceil_mode, count_include_pad, divisor_override, dilation,
                                       auto_pad, name)

    def avg_pool2d_backward(self, grad_output, input_shape, kernel_size, stride=None, padding=0,
                            ceil_mode=False, count_include_pad=True, divisor_override=None, *, dilation=1,
                            auto_pad="NOTSET", name=None):
        """Gradient of avg_pool2d w.r.t. its input, of shape input_shape: each
        in-bounds tap of a window gets the window's gradient over its divisor."""
        return self._avg_pool_backward("avg_pool2d_backward", 2, grad_output, input_shape, kernel_size, stride,
                                       padding, ceil_mode, count_include_pad, divisor_override, dilation,
                                       auto_pad, name)

    def _max_pool_backward(self, op, nsp, x, grad_output, kernel_size, stride, padding, dilation, ceil_mode,
                           auto_pad, name):
        x = self._value(x, op, "input")
        dy = self._value(grad_output, op, "grad_output")
        attrs, out = _pool_attrs(op, "max", nsp, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                                 auto_pad=auto_pad)
        _check_grad_shape(op, dy.shape, out, f"max_pool{nsp}d of input {_fmt(x.shape)}")
        return self._add("max_pool_backward", [x, dy], x.shape, name, attrs)

    def _avg_pool_backward(self, op, nsp, grad_output, input_shape, kernel_size, stride, padding, ceil_mode,
                           count_include_pad, divisor_override, dilation, auto_pad, name):
        dy = self._value(grad_output, op, "grad_output")
        xs = _shape_arg(input_shape, op, "input_shape")
        attrs, out = _pool_attrs(op, "avg", nsp, xs, kernel_size, stride, padding, dilation, ceil_mode,
                                 count_include_pad, divisor_override, auto_pad=auto_pad)
        _check_grad_shape(op, dy.shape, out, f"avg_pool{nsp}d of input {_fmt(xs)}")
        return self._add("avg_pool_backward", [dy], xs, name, attrs)


# ---------------------------------------------------------------------------
# --- pooling: argument validation (forward pools and their gradients) ---
# ---------------------------------------------------------------------------

def _pool_attrs(op, kind, nsp, xs, kernel_size, stride, padding, dilation, ceil_mode, count_include_pad=True,
                divisor_override=None, return_indices=False, auto_pad="NOTSET", indices_layout="plane"):
    """Validate window-pool arguments for input shape xs (nsp spatial axes, or
    None: from the rank); return (PoolAttrs, output shape).  Shared by the
    forward pools and their gradients."""
    if nsp is None:
        nsp = len(xs) - 2
        if nsp not in (1, 2, 3):
            raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {_fmt(xs)}")
    elif len(xs) != nsp + 2:
        raise ValueError(f"{op}: input must have rank {nsp + 2} (N, C, {'spatial, ' * nsp}...), "
                         f"got {_fmt(xs)}")
    kernel = as_tuple(kernel_size, nsp, op, "kernel_size")
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        stride = kernel                       # PyTorch: stride defaults to the kernel
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    ceil_mode = _flag(ceil_mode, op, "ceil_mode")
    count_include_pad = _flag(count_include_pad, op, "count_include_pad")
    return_indices = _flag(return_indices, op, "return_indices")
    if auto_pad not in POOL_AUTO_PADS:
        raise ValueError(f"{op}: auto_pad must be one of {', '.join(POOL_AUTO_PADS)}, got {auto_pad!r}")
    if auto_pad != "NOTSET":
        if not (isinstance(padding, (int, np.integer)) and padding == 0):
            raise ValueError(f"{op}: auto_pad={auto_pad!r} cannot be combined with padding={padding!r}")
        padding = auto_pad
    begin, end = resolve_padding(padding, xs[2:], kernel, stride, dilation, op)
    if divisor_override is not None:
        if kind != "avg":
            raise ValueError(f"{op}: divisor_override applies to average pooling only")
        if isinstance(divisor_override, bool) or not isinstance(divisor_override, (int, np.integer)) \
                or divisor_override < 1:
            raise ValueError(f"{op}: divisor_override must be a positive integer or None, "
                             f"got {divisor_override!r}")
    if indices_layout not in ("plane", "onnx", "onnx_colmajor"):
        raise ValueError(f"{op}: indices_layout must be 'plane', 'onnx' or 'onnx_colmajor', "
                         f"got {indices_layout!r}")
    ctx = f"input {_fmt(xs)}, kernel {kernel}, stride {stride}, dilation {dilation}, pads {begin}/{end}"
    out_sp = []
    for i in range(nsp):
        o = pool_out_size(xs[2 + i], kernel[i], stride[i], begin[i], end[i], dilation[i], ceil_mode)
        if o < 1:
            raise ValueError(
                f"{op}: window extent {dilation[i] * (kernel[i] - 1) + 1} is larger than padded input "
                f"{xs[2 + i] + begin[i] + end[i]} on spatial axis {i} ({ctx})")
        bad = first_padding_only_window(xs[2 + i], o, kernel[i], stride[i], begin[i], dilation[i])
        if bad is not None:
            raise ValueError(
                f"{op}: output {bad} on spatial axis {i} has a window that covers only padding ({ctx}); "
                f"reduce the padding or the dilation")
        out_sp.append(o)
    attrs = PoolAttrs(kind, kernel, stride, begin, end, dilation, ceil_mode, count_include_pad,
                      int(divisor_override or 0), indices_layout if return_indices else "none")
    return attrs, (xs[0], xs[1], *out_sp)


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
