"""Transposed convolution: conv_transpose1d, conv_transpose2d, conv_transpose3d.

The adjoint of a conv from y's space to x's, with weight [C_in, C_out/g, *k]:
every input point scatters its kernel-weighted values into the output::

    y[b, G(c) + o, i * s + t * d - pad_begin] += x[b, c, i] * W[c, o, t]

Per axis the output size is (in - 1) * s - pads_begin - pads_end
+ d * (k - 1) + output_padding + 1.  PyTorch picks output_padding from an
``output_size``; ONNX derives the pads from an ``output_shape`` or an
``auto_pad`` mode.  Every rank runs on the N-d kernel (src/_convnd.pyx) over
:class:`~rlx_cpu.ops.conv.ConvNDDims`: REFERENCE is the scatter loop, IM2COL
is col = W_g^T x_g then col2vol.
"""
from dataclasses import dataclass
from typing import ClassVar, Tuple

import numpy as np

from ..shapes import pad_pairs
from ..compiler import compile as _compile
from ..functional import as_real, cached_plan, freeze
from ..ir import Graph, fmt_shape
from ..onnx_import import graph_op, window_padding
from ..registry import compile_rule, functional, gradient, graph_method, onnx_op, per_rank
from ..shapes import as_tuple, conv_transpose_out_size, layout_hint, resolve_padding
from ..threads import threads_key
from ..algorithms import ConvAlgorithm, select_convnd_algorithm
from .conv import (CONV, RANKS, ConvNDDims, ConvNDKernelThunk, check_groups, emit_conv_nd, named, onnx_conv_geometry,
                   with_bias)
from .conv_backward import TransposedGeom, emit_transposed_phases, transposed_phases

Shape = Tuple[int, ...]

CONV_TRANSPOSE_OPS = per_rank("conv_transpose{}d")
_LAYOUT = {1: ("[N, C_in, L]", "k"), 2: ("[N, C_in, H, W]", "kH, kW"), 3: ("[N, C_in, D, H, W]", "kD, kH, kW")}
_AUTO_PADS = ("VALID", "SAME_UPPER", "SAME_LOWER")


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


# ---------------------------------------------------------------------------
# Graph builder: the shape rule, in steps
# ---------------------------------------------------------------------------

def _channels(op, nsp, xs, ws, groups, ctx):
    """Check ranks, groups and channels; return (groups, C_out)."""
    if len(xs) != nsp + 2:
        raise ValueError(f"{op}: input must have rank {nsp + 2} [N, C_in, {nsp} spatial], got {ctx}")
    if len(ws) != nsp + 2:
        raise ValueError(f"{op}: weight must have rank {nsp + 2} [C_in, C_out/groups, k...], got {ctx}")
    groups = check_groups(op, groups)
    c_in = xs[1]
    if ws[0] != c_in:
        raise ValueError(f"{op}: channel mismatch: input has {c_in} channels but weight dim 0 "
                         f"(C_in) is {ws[0]} ({ctx}){layout_hint(xs, ws[0])}")
    if c_in % groups:
        raise ValueError(f"{op}: groups={groups} does not divide in_channels={c_in} ({ctx})")
    return groups, ws[1] * groups


def _output_padding(op, nsp, output_padding, stride, dilation, ctx):
    out_pad = as_tuple(output_padding, nsp, op, "output_padding", minimum=0)
    for i in range(nsp):
        if out_pad[i] >= max(stride[i], dilation[i]):
            raise ValueError(
                f"{op}: output_padding must be smaller than stride or dilation on every axis, got "
                f"output_padding={out_pad}, stride={stride}, dilation={dilation} ({ctx})")
    return out_pad


def _auto_pad_mode(op, padding):
    """The ONNX auto_pad mode of a padding string, None for explicit pads."""
    if not isinstance(padding, str):
        return None
    mode = padding.upper()
    if mode not in _AUTO_PADS:
        raise ValueError(f"{op}: padding string must be 'valid', 'SAME_UPPER' or 'SAME_LOWER' "
                         f"(ONNX auto_pad), got {padding!r}")
    return mode


def spatial_target(op, arg, value, nsp, n, c_out, ctx):
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


def _pads_for_targets(mode, full, out_pad, targets):
    """ONNX ConvTranspose's pads for target output sizes: total = full extent
    + output_padding - target, the odd total's extra at the end for
    SAME_UPPER, at the beginning otherwise.  A negative total (target beyond
    what the kernel reaches) becomes zero-padding of the output's tail (as
    ONNX Runtime).  Returns (begin, end, output_padding)."""
    begin, end, eff_pad = [], [], []
    for full_i, pad_i, target in zip(full, out_pad, targets):
        total = full_i + pad_i - target
        if total < 0:
            begin.append(0)
            end.append(0)
            eff_pad.append(pad_i - total)
            continue
        half = total // 2
        if mode == "SAME_UPPER":
            begin.append(half)
            end.append(total - half)
        else:
            begin.append(total - half)
            end.append(half)
        eff_pad.append(pad_i)
    return tuple(begin), tuple(end), tuple(eff_pad)


def _output_padding_for_size(op, sizes, in_sp, kernel, stride, begin, end, dilation, ctx):
    """PyTorch's output_size: the output_padding that reaches it per axis."""
    picked = []
    for i in range(len(sizes)):
        lo = conv_transpose_out_size(in_sp[i], kernel[i], stride[i], begin[i], end[i], dilation[i], 0)
        hi = lo + max(stride[i], dilation[i]) - 1
        if not lo <= sizes[i] <= hi:
            raise ValueError(
                f"{op}: output_size {list(sizes)} is not reachable: spatial axis {i} must be in "
                f"[{lo}, {hi}] for {ctx}, stride {stride}, pads {begin}/{end}, dilation {dilation}")
        picked.append(sizes[i] - lo)
    return tuple(picked)


def _conv_transpose(graph, op, nsp, x, weight, bias, stride, padding, output_padding, groups, dilation,
                    output_size, output_shape, name):
    x = graph._value(x, op, "input")
    weight = graph._value(weight, op, "weight")
    xs, ws = x.shape, weight.shape
    ctx = f"input {fmt_shape(xs)}, weight {fmt_shape(ws)}"
    groups, c_out = _channels(op, nsp, xs, ws, groups, ctx)
    n, in_sp, kernel = xs[0], xs[2:], tuple(ws[2:])
    stride = as_tuple(stride, nsp, op, "stride")
    dilation = as_tuple(dilation, nsp, op, "dilation")
    out_pad = _output_padding(op, nsp, output_padding, stride, dilation, ctx)
    if output_size is not None and output_shape is not None:
        raise ValueError(f"{op}: pass output_size (PyTorch) or output_shape (ONNX), not both")
    # Output size with no padding and no output_padding, per axis.
    full = [(in_sp[i] - 1) * stride[i] + dilation[i] * (kernel[i] - 1) + 1 for i in range(nsp)]

    # Padding: derived from a target size (ONNX output_shape, SAME_*), none, or given.
    mode = _auto_pad_mode(op, padding)
    targets = None
    if output_shape is not None:
        if mode is None and any(sum(resolve_padding(padding, in_sp, kernel, stride, dilation, op), ())):
            raise ValueError(f"{op}: output_shape derives the pads (ONNX); pass padding=0 or an "
                             f"auto_pad string with it, got padding={padding!r}")
        targets = spatial_target(op, "output_shape", output_shape, nsp, n, c_out, ctx)
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        targets = tuple(in_sp[i] * stride[i] for i in range(nsp))
    if targets is not None:
        begin, end, out_pad = _pads_for_targets(mode, full, out_pad, targets)
    elif mode == "VALID":
        begin, end = (0,) * nsp, (0,) * nsp
    else:
        begin, end = resolve_padding(padding, in_sp, kernel, stride, dilation, op)

    # output_padding: given, or picked to reach a PyTorch output_size.
    if output_size is not None:
        if mode is not None and mode != "VALID":
            raise ValueError(f"{op}: output_size cannot be combined with padding={padding!r}")
        if any(out_pad):
            raise ValueError(f"{op}: pass output_padding or output_size, not both "
                             f"(got output_padding={out_pad})")
        sizes = spatial_target(op, "output_size", output_size, nsp, n, c_out, ctx)
        out_pad = _output_padding_for_size(op, sizes, in_sp, kernel, stride, begin, end, dilation, ctx)

    out_sp = []
    for i in range(nsp):
        o = conv_transpose_out_size(in_sp[i], kernel[i], stride[i], begin[i], end[i], dilation[i], out_pad[i])
        if o < 1:
            raise ValueError(
                f"{op}: output size {o} on spatial axis {i} is empty: the pads {begin[i]}+{end[i]} remove "
                f"the whole extent {full[i] + out_pad[i]} ({ctx}, stride {stride}, "
                f"dilation {dilation}, output_padding {out_pad})")
        out_sp.append(o)
    attrs = ConvTransposeAttrs(kernel, stride, begin, end, dilation, out_pad, groups)
    return graph._add(op, with_bias(graph, op, [x, weight], bias, c_out, ctx), (n, c_out, *out_sp), name, attrs)


def _conv_transpose_builder(nd):
    op = CONV_TRANSPOSE_OPS[nd]

    def conv_transpose(graph, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                       dilation=1, output_size=None, output_shape=None, name=None):
        return _conv_transpose(graph, op, nd, x, weight, bias, stride, padding, output_padding, groups,
                               dilation, output_size, output_shape, name)

    layout, taps = _LAYOUT[nd]
    doc = (f"{nd}-D transposed convolution on {layout} with weight [C_in, C_out/groups, {taps}].\n\n"
           """        padding: as conv (int, per-axis, ONNX begins-then-ends, (begin, end)
        pairs) or an ONNX auto_pad string 'valid' / 'SAME_UPPER' / 'SAME_LOWER'
        (output = input * stride).  output_size (PyTorch) picks output_padding:
        each spatial size may be min .. min + max(stride, dilation) - 1, min
        being the size at output_padding 0 (the output_padding rule; PyTorch's
        own check stops at min + stride - 1).  output_shape (ONNX) derives the
        pads instead, as ONNX ConvTranspose does.""")
    return op, conv_transpose, doc


# ---------------------------------------------------------------------------
# Thunk record and compile rule
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class ConvTransposeThunk(ConvNDKernelThunk):
    """conv_transpose (any rank) with fused bias; weight [C_in, C_out/g, k...].
    REFERENCE is the scatter loop; IM2COL is col = W_g^T x_g then col2vol."""
    kind: ClassVar[str] = "conv_transpose"
    transposed: ClassVar[bool] = True


@compile_rule(*CONV_TRANSPOSE_OPS.values())
def compile_conv_transpose(ctx, node):
    """Under auto, 1-D and 2-D ops run as forward convs, one per output phase
    of the stride (ops/conv_backward.py: transposed_phases); the rest, and a
    forced 'im2col' or 'reference', on the N-d kernels."""
    if getattr(node.attrs, "epilogue", None) is None:
        dims = ConvNDDims.from_attrs(ctx.graph.node(node.inputs[0]).shape, node.shape, node.attrs)
        algo = select_convnd_algorithm(dims, ctx.conv_algorithm, ctx.flags, op=f"{node.op} {node.name!r}",
                                       transposed=True, nthreads=ctx.num_threads)
        if ctx.conv_algorithm == "auto" and algo != ConvAlgorithm.REFERENCE:
            phases = transposed_phases(dims.n, dims.c_in, dims.c_out, dims.in_sp, dims.out_sp, dims.kernel,
                                       dims.stride, dims.pad, dims.dilation, dims.groups)
            if phases is not None:
                emit_transposed_phases(ctx, node, phases, node.inputs[0], node.inputs[1],
                                       node.inputs[2] if len(node.inputs) > 2 else None, dims.kernel,
                                       TransposedGeom(dims.c_in, dims.c_out, dims.groups, dims.in_sp, dims.out_sp,
                                                      dims.stride, dims.pad, dims.dilation))
                return
    emit_conv_nd(ctx, node, ConvTransposeThunk)


# ---------------------------------------------------------------------------
# Gradient
# ---------------------------------------------------------------------------

@gradient(*CONV_TRANSPOSE_OPS.values())
def _vjp_conv_transpose(g, node, dy, needs):
    """y = conv_transpose(x, W) is the adjoint of a conv from y's space to x's
    with the same weight, so dx = conv(dy, W) and dW is that conv's weight
    gradient with the roles of input and output swapped."""
    from .conv_backward import BACKWARD_WEIGHT
    a = node.attrs
    x, w = g.node(node.inputs[0]), g.node(node.inputs[1])
    geo = dict(stride=a.stride, padding=pad_pairs(a), dilation=a.dilation, groups=a.groups)
    # The conv of dy has floor((out_sp + pads - d(k-1) - 1) / s) + 1 outputs,
    # which is x's size only while output_padding < stride.
    if any(p >= s for p, s in zip(a.output_padding, a.stride)):
        raise NotImplementedError(f"grads: {node.op} (node {node.name!r}) with output_padding "
                                  f"{a.output_padding} >= stride {a.stride} is not differentiable")
    out = [None] * len(node.inputs)
    if needs[0]:
        out[0] = CONV[a.ndim](g, dy, w, **geo)
    if needs[1]:
        out[1] = BACKWARD_WEIGHT[a.ndim](g, dy, x, w.shape, **geo)
    if len(node.inputs) > 2 and needs[2]:
        out[2] = g.bias_grad(dy)
    return out


# ---------------------------------------------------------------------------
# ONNX
# ---------------------------------------------------------------------------

@onnx_op("ConvTranspose", versions=(1, 22))
def _onnx_conv_transpose(nc):
    nc.check_attrs(("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                    "strides"))
    x = nc.tensor(0, "X")
    w = nc.tensor(1, "W")
    b = nc.optional_tensor(2, "B")
    nsp, strides, dilations = onnx_conv_geometry(nc, x, w)
    output_padding = nc.ints("output_padding", nsp, (0,) * nsp)
    group = int(nc.attr("group", 1))
    padding = window_padding(nc, nsp)
    output_shape = nc.attr("output_shape")
    if output_shape is not None:
        output_shape = tuple(int(v) for v in output_shape)
        if not isinstance(padding, str) and any(p for pair in padding for p in pair):
            # The ONNX operator description derives the pads from output_shape
            # (ignoring pads); its reference implementation crops with the
            # given pads instead.  Refuse rather than pick one.
            nc.unsupported("output_shape", list(output_shape),
                           "together with non-zero pads: ONNX's spec and reference implementation disagree")
        if not isinstance(padding, str):
            padding = 0
    method = graph_op(nc, CONV_TRANSPOSE_OPS[nsp])
    y = method(x, w, b, stride=strides, padding=padding, output_padding=output_padding, groups=group,
               dilation=dilations, output_shape=output_shape, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


# ---------------------------------------------------------------------------
# Functional
# ---------------------------------------------------------------------------

def _run_conv_transpose(op, x, weight, bias, stride, padding, output_padding, groups, dilation, output_size,
                        conv_algorithm):
    x = as_real("input", op, x)
    weight = as_real("weight", op, weight)
    feeds = {"x": x, "weight": weight}
    if bias is not None:
        bias = as_real("bias", op, bias)
        feeds["bias"] = bias
    key = (op, x.shape, weight.shape, None if bias is None else bias.shape, freeze(stride),
           freeze(padding), freeze(output_padding), freeze(groups), freeze(dilation),
           freeze(output_size), conv_algorithm, threads_key())

    def build():
        g = Graph()
        xi = g.input("x", x.shape)
        wi = g.input("weight", weight.shape)
        bi = g.input("bias", bias.shape) if bias is not None else None
        y = getattr(g, op)(xi, wi, bi, stride=stride, padding=padding, output_padding=output_padding,
                           groups=groups, dilation=dilation, output_size=output_size)
        g.output(y)
        return _compile(g, conv_algorithm=conv_algorithm)

    return cached_plan(key, build).run(feeds)[0]


def _conv_transpose_function(nd):
    op = CONV_TRANSPOSE_OPS[nd]

    def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1,
                       *, output_size=None, conv_algorithm="auto"):
        return _run_conv_transpose(op, input, weight, bias, stride, padding, output_padding, groups, dilation,
                                   output_size, conv_algorithm)

    layout, taps = _LAYOUT[nd]
    conv_transpose.__doc__ = (
        f"{nd}-D transposed convolution of {layout} by [C_in, C_out/groups, {taps}].\n\n"
        "    output_size (as nn.ConvTranspose{nd}d's forward) picks output_padding so the\n"
        "    output has that size; ValueError when it is out of reach.").replace("{nd}", str(nd))
    return conv_transpose


# ---------------------------------------------------------------------------
# Registration: one definition, three ranks
# ---------------------------------------------------------------------------

for _nd in RANKS:
    _op, _builder, _doc = _conv_transpose_builder(_nd)
    graph_method(_op, doc=_doc)(named(_builder, _op))
    functional(_op)(named(_conv_transpose_function(_nd), _op))
del _nd, _op, _builder, _doc
