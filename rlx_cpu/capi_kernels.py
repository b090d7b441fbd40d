"""The C API's per-kernel entries with the host calling convention of the
conv-family interpreter (rlx_cpu.h: ``conv2d_forward_f32`` and the others):
every operand is float32, C-contiguous, at a byte offset of one caller arena,
and the geometry is given as integer dims.

``spec_plan(fn, args)`` validates one entry's arguments (in the entry's order)
and compiles a one-op plan whose graph inputs and output are the operands;
src/_capi.pyx binds those to ``base + offset`` in place, so the kernels read
and write the caller's arena and the plan's own arena holds only scratch.

Geometry (NC[D]HW, one padding per axis applied on both sides):
  conv forward     out = (in + 2p - d(k-1) - 1) // s + 1, weight [C_out, C_in/groups, k...]
  conv transpose   out = (in-1)s - 2p + d(k-1) + 1 + output_padding, with the
                   implied output_padding in [0, max(s, d)); weight [C_in, C_out/groups, k...]
  max pool backward (no dilation) out = the floor rule, or the ceil rule on every axis
  nearest 2x       [N, C, H, W] -> [N, C, 2H, 2W]
"""
from .shapes import INDEX_MAX, conv_out_size, pool_out_size
from .threads import get_num_threads

_CONV_DIMS = ("n", "c_in", "h", "w", "c_out", "h_out", "w_out", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw",
              "groups")
_CONV3D_DIMS = ("n", "c_in", "d", "h", "w", "c_out", "d_out", "h_out", "w_out", "kd", "kh", "kw", "sd", "sh", "sw",
                "pd", "ph", "pw", "dd", "dh", "dw", "groups")

# entry -> (argument names in order, offsets of the inputs, offset of the output)
SIGNATURES = {
    "conv2d_forward_f32": (("src", "weight", "dst") + _CONV_DIMS, ("src", "weight"), "dst"),
    "conv3d_forward_f32": (("src", "weight", "dst") + _CONV3D_DIMS, ("src", "weight"), "dst"),
    "conv_transpose2d_nchw_f32": (("src", "weight", "dst") + _CONV_DIMS[:3] + ("w_in",) + _CONV_DIMS[4:],
                                  ("src", "weight"), "dst"),
    "conv_transpose3d_ncdhw_f32": (("src", "weight", "dst") + _CONV3D_DIMS[:4] + ("w_in",) + _CONV3D_DIMS[5:],
                                   ("src", "weight"), "dst"),
    "maxpool2d_backward_f32": (("x", "dy", "dx", "n", "c", "h", "w", "h_out", "w_out", "kh", "kw", "sh", "sw",
                                "ph", "pw"), ("x", "dy"), "dx"),
    "resize_nearest_2x_f32": (("src", "dst", "n", "c", "h", "w"), ("src",), "dst"),
}

# Dims that may be 0 (paddings); every other dim must be >= 1.
_MAY_BE_ZERO = {"ph", "pw", "pd"}


def _prod(shape):
    out = 1
    for d in shape:
        out *= d
    return out


def _check_args(fn, a, offsets):
    for name in offsets:
        v = a[name]
        if v < 0 or v % 4:
            raise ValueError(f"{fn}: {name} = {v}: byte offsets must be non-negative multiples of 4 "
                             f"(float32 alignment)")
    bad = [f"{k}={v}" for k, v in a.items() if k not in offsets and k not in _MAY_BE_ZERO and v < 1]
    if bad:
        raise ValueError(f"{fn}: every dim except the paddings must be >= 1, got {', '.join(bad)}")


def _check_groups(fn, a, c_in, c_out):
    g = a["groups"]
    for name, c in ((c_in, a[c_in]), (c_out, a[c_out])):
        if c % g:
            raise ValueError(f"{fn}: groups={g} does not divide {name}={c}")


def _conv_geometry(fn, a, axes, transposed):
    """Check (for each axis letter) the output size against the window rule;
    return the output_padding per axis (conv transpose) or None."""
    out_pad = []
    for ax in axes:
        size = a["w_in" if transposed and ax == "w" else ax]
        k, s, p, d, o = a["k" + ax], a["s" + ax], a["p" + ax], a["d" + ax], a[ax + "_out"]
        if not transposed:
            want = conv_out_size(size, k, s, p, p, d)
            if want < 1:
                raise ValueError(f"{fn}: the kernel extent d{ax}*(k{ax}-1)+1 = {d * (k - 1) + 1} is larger than "
                                 f"the padded input {ax}+2*p{ax} = {size + 2 * p}")
            if o != want:
                raise ValueError(f"{fn}: {ax}_out = {o} does not match the window rule "
                                 f"({ax} + 2*p{ax} - d{ax}*(k{ax}-1) - 1) // s{ax} + 1 = "
                                 f"({size} + 2*{p} - {d}*{k - 1} - 1) // {s} + 1 = {want}")
            continue
        full = (size - 1) * s - 2 * p + d * (k - 1) + 1
        op = o - full
        hi = max(s, d)
        if not 0 <= op < hi:
            src = "w_in" if ax == "w" else ax
            raise ValueError(f"{fn}: {ax}_out = {o} implies output_padding = {ax}_out - (({src}-1)*s{ax} - 2*p{ax} "
                             f"+ d{ax}*(k{ax}-1) + 1) = {o} - {full} = {op}, which must be in "
                             f"[0, max(s{ax}, d{ax})) = [0, {hi})")
        out_pad.append(op)
    return tuple(out_pad) if transposed else None


def _pool_geometry(fn, a):
    """ceil_mode (False/True) for which both output sizes follow the rule."""
    floor, ceil = {}, {}
    for ax in ("h", "w"):
        size, k, s, p = a[ax], a["k" + ax], a["s" + ax], a["p" + ax]
        floor[ax] = pool_out_size(size, k, s, p, p, 1, False)
        ceil[ax] = pool_out_size(size, k, s, p, p, 1, True)
        if floor[ax] < 1:
            raise ValueError(f"{fn}: the window k{ax} = {k} is larger than the padded input "
                             f"{ax}+2*p{ax} = {size + 2 * p}")
    got = {"h": a["h_out"], "w": a["w_out"]}
    if got == floor:
        return False
    if got == ceil:
        return True
    raise ValueError(f"{fn}: (h_out, w_out) = ({got['h']}, {got['w']}) does not match the pooling rule "
                     f"(x + 2*p - k) // s + 1 = ({floor['h']}, {floor['w']}), nor its ceil mode "
                     f"= ({ceil['h']}, {ceil['w']})")


def _operands(fn, a):
    """[(argument, shape)] of the inputs, (argument, shape) of the output."""
    if fn in ("conv2d_forward_f32", "conv3d_forward_f32"):
        sp = ("h", "w") if fn.startswith("conv2d") else ("d", "h", "w")
        k = tuple(a["k" + ax] for ax in sp)
        return ([("src", (a["n"], a["c_in"]) + tuple(a[ax] for ax in sp)),
                 ("weight", (a["c_out"], a["c_in"] // a["groups"]) + k)],
                ("dst", (a["n"], a["c_out"]) + tuple(a[ax + "_out"] for ax in sp)))
    if fn.startswith("conv_transpose"):
        sp = ("h", "w") if fn.startswith("conv_transpose2d") else ("d", "h", "w")
        k = tuple(a["k" + ax] for ax in sp)
        return ([("src", (a["n"], a["c_in"]) + tuple(a["w_in" if ax == "w" else ax] for ax in sp)),
                 ("weight", (a["c_in"], a["c_out"] // a["groups"]) + k)],
                ("dst", (a["n"], a["c_out"]) + tuple(a[ax + "_out"] for ax in sp)))
    if fn == "maxpool2d_backward_f32":
        x = (a["n"], a["c"], a["h"], a["w"])
        return [("x", x), ("dy", (a["n"], a["c"], a["h_out"], a["w_out"]))], ("dx", x)
    return [("src", (a["n"], a["c"], a["h"], a["w"]))], ("dst", (a["n"], a["c"], 2 * a["h"], 2 * a["w"]))


def _check_ranges(fn, a, ins, out):
    ranges = {}
    for name, shape in ins + [out]:
        start = a[name]
        end = start + 4 * _prod(shape)
        if end > INDEX_MAX:
            raise ValueError(f"{fn}: {name} {list(shape)} at byte offset {start} ends at byte {end}, beyond "
                             f"what the kernels' Py_ssize_t index type can address ({INDEX_MAX})")
        ranges[name] = (start, end)
    o0, o1 = ranges[out[0]]
    for name, _ in ins:
        i0, i1 = ranges[name]
        if i0 < o1 and o0 < i1:
            raise ValueError(f"{fn}: {out[0]} bytes [{o0}, {o1}) overlap {name} bytes [{i0}, {i1}): the kernel "
                             f"would read what it writes; give the output its own bytes")
    return max(end for _, end in ranges.values())


def _build(fn, a, ins, out, extra):
    from .compiler import compile
    from .ir import Graph
    g = Graph()
    nodes = [g.input(name, shape) for name, shape in ins]
    if fn == "conv2d_forward_f32" or fn == "conv3d_forward_f32":
        sp = ("h", "w") if fn.startswith("conv2d") else ("d", "h", "w")
        conv = g.conv2d if len(sp) == 2 else g.conv3d
        y = conv(nodes[0], nodes[1], stride=tuple(a["s" + ax] for ax in sp),
                 padding=tuple(a["p" + ax] for ax in sp), dilation=tuple(a["d" + ax] for ax in sp),
                 groups=a["groups"])
    elif fn.startswith("conv_transpose"):
        sp = ("h", "w") if fn.startswith("conv_transpose2d") else ("d", "h", "w")
        conv = g.conv_transpose2d if len(sp) == 2 else g.conv_transpose3d
        y = conv(nodes[0], nodes[1], stride=tuple(a["s" + ax] for ax in sp),
                 padding=tuple(a["p" + ax] for ax in sp), output_padding=extra,
                 dilation=tuple(a["d" + ax] for ax in sp), groups=a["groups"])
    elif fn == "maxpool2d_backward_f32":
        y = g.max_pool2d_backward(nodes[0], nodes[1], (a["kh"], a["kw"]), (a["sh"], a["sw"]),
                                  (a["ph"], a["pw"]), ceil_mode=extra)
    else:
        y = g.upsample_nearest2x(nodes[0])
    if tuple(y.shape) != tuple(out[1]):          # the checks above derive the same shape
        raise AssertionError(f"{fn}: output shape {y.shape} != {out[1]}")
    g.output(y)
    return compile(g, num_threads=get_num_threads())


def spec_plan(fn, args):
    """Validate `args` (in the order of SIGNATURES[fn]) and compile the op.

    Returns (plan, {input name: byte offset}, output byte offset, bytes of
    the caller arena the kernel touches).  Raises ValueError naming `fn`, the
    argument and the values on any bad argument."""
    names, in_names, out_name = SIGNATURES[fn]
    if len(args) != len(names):
        raise TypeError(f"{fn}: expected {len(names)} arguments ({', '.join(names)}), got {len(args)}")
    a = {k: int(v) for k, v in zip(names, args)}
    _check_args(fn, a, in_names + (out_name,))
    extra = None
    if fn.startswith("conv"):
        _check_groups(fn, a, "c_in", "c_out")
        axes = ("h", "w") if "2d" in fn else ("d", "h", "w")
        extra = _conv_geometry(fn, a, axes, fn.startswith("conv_transpose"))
    elif fn == "maxpool2d_backward_f32":
        extra = _pool_geometry(fn, a)
    ins, out = _operands(fn, a)
    nbytes = _check_ranges(fn, a, ins, out)
    try:
        plan = _build(fn, a, ins, out, extra)
    except (ValueError, TypeError) as e:
        raise type(e)(f"{fn}: {e}") from e
    return plan, {name: a[name] for name, _ in ins}, a[out_name], nbytes
