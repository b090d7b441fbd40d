"""Helpers shared by the inference op families (not a family: the package
skips modules starting with an underscore).

* compile-time folding: an ONNX node whose inputs are all compile-time
  arrays (initializers, Constants, shapes of static tensors) is evaluated
  with numpy at import and its outputs stay compile-time arrays, so the
  Shape -> Gather -> Unsqueeze -> Concat -> Reshape chains exporters emit
  never reach the plan;
* axis and broadcasting rules used by several families.
"""
import numpy as np

from ..ir import Node, fmt_shape


def is_const(nc, i):
    """Input i is present and a compile-time array."""
    return nc.has_input(i) and not isinstance(nc.imp.values[nc.node.input[i]], Node)


def all_const(nc):
    """Every present input is a compile-time array (and there is at least one)."""
    present = [i for i in range(nc.n_inputs()) if nc.has_input(i)]
    return bool(present) and all(is_const(nc, i) for i in present)


def folded(nc, *arrays):
    """Bind the node's outputs to compile-time arrays."""
    for i, arr in enumerate(arrays):
        if i < len(nc.node.output):
            nc.imp.set_output(nc.node.output[i], np.asarray(arr))


def emit(nc, node, i=0):
    nc.imp.set_output(nc.node.output[i], node)


def fresh(nc, i=0, suffixes=()):
    return nc.imp._fresh(nc.node.output[i], suffixes)


def expect_inputs(nc, lo, hi):
    n = nc.n_inputs()
    if not lo <= n <= hi:
        want = str(lo) if lo == hi else f"{lo}..{hi}"
        raise ValueError(f"{nc.where}: expects {want} inputs, got {n}")


def norm_axis(axis, rank, op, arg="axis"):
    a = int(axis)
    if not -rank <= a < rank:
        raise ValueError(f"{op}: {arg}={axis} is out of range for rank {rank}")
    return a + rank if a < 0 else a


def norm_axes(axes, rank, op, arg="axes"):
    out = [norm_axis(a, rank, op, arg) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: {arg} {list(axes)} repeats an axis")
    return out


def broadcast_shape(a, b, op):
    """numpy broadcasting of two shapes (ValueError naming op and shapes)."""
    r = max(len(a), len(b))
    pa = (1,) * (r - len(a)) + tuple(a)
    pb = (1,) * (r - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{op}: shapes {fmt_shape(a)} and {fmt_shape(b)} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def contiguous_strides(shape):
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= d
    return tuple(reversed(strides))


def numel(shape):
    return int(np.prod(shape, dtype=np.int64))
