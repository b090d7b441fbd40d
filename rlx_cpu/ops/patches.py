"""Patches: im2col gathers every kernel window of [N, C, *spatial] (1 to 3 axes)
into a matrix, col2im is its adjoint (sums the patch entries back).

With kernel k, stride s, dilation d and pads b/e per axis, block position o
reads the taps o*s - b + j*d, j < k (zero outside the image); L = the number
of block positions (the conv output size), K = prod(k):

    layout 'rows': cols[n*L + l, c*K + j] = x[n, c, tap(l, j)]   ([N*L, C*K])
    layout 'onnx': cols[n, c*K + j, l]    = x[n, c, tap(l, j)]   ([N, C*K, L],
                   torch unfold / fold, ONNX Col2Im)

col2im(cols)[n, c, p] = sum of the entries whose tap is p.  Node ops:
``im2col``, ``col2im`` (also built by ``col2im_onnx``).
"""
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .. import _im2col
from ..functional import run_unary
from ..ir import Shape, fmt_shape
from ..registry import compile_rule, functional, graph_method, onnx_op
from ..shapes import as_tuple, conv_out_size, resolve_padding
from ..thunks import Slice, Thunk, WindowDims


# ---------------------------------------------------------------------------
# Attributes
# ---------------------------------------------------------------------------

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


# ---------------------------------------------------------------------------
# Graph builders
# ---------------------------------------------------------------------------

def _patch_geometry(op, image, kernel_size, stride, padding, dilation):
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
                f"{image[i] + begin[i] + end[i]} on spatial axis {i} (image {fmt_shape(image)}, kernel {kernel}, "
                f"dilation {dilation}, pads {begin}/{end})")
        blocks.append(o)
    return kernel, stride, begin, end, dilation, tuple(blocks)


@graph_method()
def im2col(graph, x, kernel_size, stride=1, padding=0, dilation=1, *, layout="rows", name=None):
    """Patch matrix of [N, C, *spatial] (1 to 3 axes), zeros in the padding.

    layout 'rows': [N*L, C*K], row (n, block position), column (c, k taps...);
    layout 'onnx': [N, C*K, L] (torch.nn.functional.unfold).  K = prod(kernel),
    L = number of block positions (the conv output size)."""
    op = "im2col"
    x = graph._value(x, op, "input")
    xs = x.shape
    nsp = len(xs) - 2
    if nsp not in (1, 2, 3):
        raise ValueError(f"{op}: input must have rank 3, 4 or 5 (N, C, spatial...), got {fmt_shape(xs)}")
    if layout not in ("rows", "onnx"):
        raise ValueError(f"{op}: layout must be 'rows' or 'onnx', got {layout!r}")
    kernel, stride, begin, end, dilation, blocks = _patch_geometry(
        op, xs[2:], kernel_size, stride, padding, dilation)
    ck = xs[1] * math.prod(kernel)
    nl = math.prod(blocks)
    shape = (xs[0] * nl, ck) if layout == "rows" else (xs[0], ck, nl)
    attrs = PatchAttrs(kernel, stride, begin, end, dilation, tuple(xs[2:]), blocks, layout)
    return graph._add("im2col", [x], shape, name, attrs)


@graph_method()
def col2im(graph, cols, output_size, kernel_size, stride=1, padding=0, dilation=1, *, layout="rows",
           name=None, op="col2im"):
    """Adjoint of im2col: sum patch entries back into [N, C, *output_size].

    cols: [N*L, C*K] (layout 'rows') or [N, C*K, L] (layout 'onnx',
    torch.nn.functional.fold / ONNX Col2Im).  output_size: the image's
    spatial sizes (an int means a square 2-D image)."""
    cols = graph._value(cols, op, "input")
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
    kernel, stride, begin, end, dilation, blocks = _patch_geometry(
        op, image, kernel_size, stride, padding, dilation)
    k = math.prod(kernel)
    nl = math.prod(blocks)
    ctx = f"input {fmt_shape(cs)}, output_size {fmt_shape(image)}, kernel {kernel}, {nl} block positions"
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
    name = name if name is not None else f"{op}_{len(graph.nodes)}"
    return graph._add("col2im", [cols], (n, ck // k, *image), name, attrs)


@graph_method()
def col2im_onnx(graph, x, image_shape, block_shape, dilations=1, pads=0, strides=1, name=None):
    """ONNX Col2Im: [N, C*prod(block_shape), L] -> [N, C, *image_shape];
    pads in ONNX order (begins then ends)."""
    return col2im(graph, x, tuple(image_shape), block_shape, strides, pads, dilations, layout="onnx",
                  name=name, op="col2im_onnx")


# ---------------------------------------------------------------------------
# Thunk records
# ---------------------------------------------------------------------------

@dataclass(frozen=True, repr=False)
class Im2ColThunk(Thunk):
    """Patch matrix of x, layout _im2col.LAYOUT_ROWS ([N*L, C*K]) or LAYOUT_ONNX ([N, C*K, L])."""
    x: Slice
    col: Slice
    dims: WindowDims
    layout: int

    kind: ClassVar[str] = "im2col"
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

    kind: ClassVar[str] = "col2im"
    reads: ClassVar[tuple] = ("col",)
    writes: ClassVar[tuple] = ("x",)
    scratch_fields: ClassVar[tuple] = ("scratch",)

    def bind(self, view):
        return _im2col.Col2ImLaunch(view(self.col), view(self.x), view(self.scratch), self.dims.as_tuple(),
                                    self.layout, self.max_threads)


# ---------------------------------------------------------------------------
# Compile rules
# ---------------------------------------------------------------------------

def _layout_code(layout):
    return _im2col.LAYOUT_ROWS if layout == "rows" else _im2col.LAYOUT_ONNX


@compile_rule("im2col")
def compile_im2col(ctx, node):
    a = node.attrs
    xs = ctx.graph.node(node.inputs[0]).shape
    dims = WindowDims.from_attrs(xs[0], xs[1], a.image, a.blocks, a)
    ctx.emit(Im2ColThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), dims, _layout_code(a.layout)))


@compile_rule("col2im")
def compile_col2im(ctx, node):
    a = node.attrs
    dims = WindowDims.from_attrs(node.shape[0], node.shape[1], a.image, a.blocks, a)
    t = ctx.num_threads
    scratch = ctx.scratch(4 * _im2col.col2im_scratch_floats(dims.as_tuple(), t), node.name + ".scratch")
    ctx.emit(Col2ImThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), scratch, dims,
                         _layout_code(a.layout), t))


# ---------------------------------------------------------------------------
# ONNX converter
# ---------------------------------------------------------------------------

@onnx_op("Col2Im", versions=(18, 18), parameter_inputs=(1, 2))     # image_shape, block_shape
def convert_col2im(nc):
    nc.check_attrs(("dilations", "pads", "strides"))
    x = nc.tensor(0, "input")
    image = nc.const(1, "image_shape")
    block = nc.const(2, "block_shape")
    if image is None or block is None:
        raise ValueError(f"{nc.where}: inputs image_shape and block_shape are required")
    image = tuple(int(v) for v in np.asarray(image).reshape(-1))
    block = tuple(int(v) for v in np.asarray(block).reshape(-1))
    nsp = len(image)
    if len(block) != nsp:
        raise ValueError(f"{nc.where}: image_shape {list(image)} and block_shape {list(block)} must have the "
                         "same length")
    if not 1 <= nsp <= 3:
        raise NotImplementedError(f"{nc.where}: {nsp} spatial dims (image_shape {list(image)}) are not "
                                  "supported; 1..3 are")
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    pads = nc.ints("pads", 2 * nsp, (0,) * (2 * nsp))
    if any(p < 0 for p in pads):
        nc.unsupported("pads", list(pads), "negative pads")
    pairs = tuple((pads[i], pads[nsp + i]) for i in range(nsp))
    y = nc.graph.col2im_onnx(x, image, block, dilations=dilations, pads=pairs, strides=strides,
                             name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


# ---------------------------------------------------------------------------
# Functional wrappers
# ---------------------------------------------------------------------------

def _public(name):
    """Register fn as rlx_cpu.<name> (the graph builder of this module may have the same name)."""
    def deco(fn):
        fn.__name__ = fn.__qualname__ = name
        return functional(name)(fn)
    return deco


@_public("im2col")
def im2col_function(input, kernel_size, stride=1, padding=0, dilation=1):
    """Patch rows of [N, C, *spatial]: [N*L, C*K], columns ordered (c, kernel taps)."""
    args = (kernel_size, stride, padding, dilation)
    return run_unary("im2col", input, args, lambda g, x: g.im2col(x, kernel_size, stride, padding, dilation))


@_public("col2im")
def col2im_function(cols, output_size, kernel_size, stride=1, padding=0, dilation=1):
    """Adjoint of im2col: [N*L, C*K] patch rows summed back into [N, C, *output_size]."""
    args = (output_size, kernel_size, stride, padding, dilation)
    return run_unary("col2im", cols, args, lambda g, x: g.col2im(x, output_size, kernel_size, stride, padding,
                                                               dilation))


@_public("unfold")
def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.unfold: [N, C, *spatial] -> [N, C*K, L]."""
    args = (kernel_size, dilation, padding, stride)
    return run_unary("unfold", input, args, lambda g, x: g.im2col(x, kernel_size, stride, padding, dilation,
                                                                layout="onnx"))


@_public("fold")
def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """torch.nn.functional.fold: [N, C*K, L] -> [N, C, *output_size] (sums overlaps)."""
    args = (output_size, kernel_size, dilation, padding, stride)
    return run_unary("fold", input, args, lambda g, x: g.col2im(x, output_size, kernel_size, stride, padding,
                                                              dilation, layout="onnx"))
