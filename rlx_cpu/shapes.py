"""Shape arithmetic shared by the IR and the compiler: attribute
normalisation (ints, tuples, PyTorch 'same'/'valid', ONNX pads and auto_pad)
and output sizes, and the on/off switches read from the environment."""
import math
import numbers
import os
import sys

# The kernels' index types.  Sizes and offsets are Py_ssize_t; the GEMM
# dimensions handed to BLAS (M, N, K and the leading dimensions) are C int.
# Attribute values (kernel, stride, padding, dilation ...) are kept within C
# int too, so no product of them can wrap a Py_ssize_t.
INDEX_MAX = sys.maxsize            # Py_ssize_t
BLAS_INT_MAX = 2 ** 31 - 1          # C int
ATTR_MAX = BLAS_INT_MAX


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def check_attr_range(values, op, arg, given=None):
    """Every attribute value must fit the kernels' C int."""
    if any(v > ATTR_MAX for v in values):
        raise ValueError(f"{op}: {arg} must be <= {ATTR_MAX} (the kernels' C int index type), "
                         f"got {given if given is not None else values!r}")


def check_blas_dims(op, dims):
    """`dims` is {description: value} for every GEMM dimension / leading
    dimension a kernel passes to BLAS (a C int): each must fit."""
    for what, v in dims.items():
        if int(v) > BLAS_INT_MAX:
            raise ValueError(f"{op}: the GEMM dimension {what} = {int(v)} exceeds the BLAS index type "
                             f"(C int, max {BLAS_INT_MAX}); split the op into smaller ones")


def nbytes_of(shape, itemsize=4):
    """Bytes of a dense array of this shape, as an exact Python int (no wrap)."""
    return math.prod(int(d) for d in shape) * itemsize


def int_dims(shape, what):
    """A shape as a tuple of Python ints; non-integral values (8.7, '8',
    True) raise TypeError instead of being truncated."""
    try:
        items = tuple(shape)
    except TypeError:
        raise TypeError(f"{what} must be a sequence of ints, got {shape!r}") from None
    out = []
    for d in items:
        if not _is_int(d):
            raise TypeError(f"{what} must be a sequence of ints, got {shape!r} ({d!r} is a "
                            f"{type(d).__name__})")
        out.append(int(d))
    return tuple(out)


def as_tuple(value, n, op, arg, minimum=1):
    """An int or a length-n sequence of ints, each >= minimum, as a tuple."""
    if _is_int(value):
        out = (int(value),) * n
    else:
        try:
            out = tuple(value)
        except TypeError:
            raise TypeError(f"{op}: {arg} must be an int or a sequence of {n} ints, got {value!r}") from None
        if len(out) != n or not all(_is_int(v) for v in out):
            raise ValueError(f"{op}: {arg} must be an int or a sequence of {n} ints, got {value!r}")
        out = tuple(int(v) for v in out)
    if any(v < minimum for v in out):
        raise ValueError(f"{op}: {arg} must be >= {minimum}, got {value!r}")
    check_attr_range(out, op, arg, value)
    return out


def conv_out_size(size, k, stride, pad_begin, pad_end, dilation):
    """floor((in + pads - d*(k-1) - 1) / s) + 1; may be <= 0 for invalid shapes."""
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    if span < 0:
        return 0
    return span // stride + 1


def conv_transpose_out_size(size, k, stride, pad_begin, pad_end, dilation, output_padding):
    """(in - 1)*s - pads + d*(k-1) + output_padding + 1; may be <= 0 for invalid shapes."""
    return (size - 1) * stride - pad_begin - pad_end + dilation * (k - 1) + output_padding + 1


def resolve_padding(padding, in_sizes, kernel, stride, dilation, op):
    """Return (pads_begin, pads_end) tuples.

    Accepted forms, for n spatial axes:
      * int p                            -> p on both sides of every axis
      * (p1, ..., pn)                    -> symmetric per axis (PyTorch)
      * (b1, ..., bn, e1, ..., en)       -> ONNX ``pads`` order
      * ((b1, e1), ..., (bn, en))        -> explicit pairs
      * "valid"                          -> no padding
      * "same"                           -> PyTorch: stride 1 only, output size =
                                            input size, odd total goes to the end
      * "SAME_UPPER" / "SAME_LOWER"      -> ONNX auto_pad: output = ceil(in / s),
                                            odd total at the end / beginning
    """
    n = len(in_sizes)
    if isinstance(padding, str):
        mode = padding
        if mode.lower() == "valid":
            return (0,) * n, (0,) * n
        if mode.lower() == "same" and mode != "SAME_LOWER" and mode != "SAME_UPPER":
            if any(s != 1 for s in stride):
                raise ValueError(f"{op}: padding='same' requires stride 1 (as in PyTorch), got stride={stride}")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            begin = tuple(t // 2 for t in totals)
            return begin, tuple(t - b for t, b in zip(totals, begin))
        if mode in ("SAME_UPPER", "SAME_LOWER"):
            begin, end = [], []
            for size, k, s, d in zip(in_sizes, kernel, stride, dilation):
                out = -(-size // s)
                total = max((out - 1) * s + d * (k - 1) + 1 - size, 0)
                small = total // 2
                if mode == "SAME_UPPER":
                    begin.append(small)
                    end.append(total - small)
                else:
                    begin.append(total - small)
                    end.append(small)
            return tuple(begin), tuple(end)
        raise ValueError(f"{op}: padding string must be 'same', 'valid', 'SAME_UPPER' or 'SAME_LOWER', got {padding!r}")
    if _is_int(padding):
        p = int(padding)
        if p < 0:
            raise ValueError(f"{op}: padding must be >= 0, got {padding!r}")
        check_attr_range((p,), op, "padding", padding)
        return (p,) * n, (p,) * n
    try:
        items = tuple(padding)
    except TypeError:
        raise TypeError(f"{op}: padding must be an int, a sequence or a string, got {padding!r}") from None
    if len(items) == n and all(not _is_int(v) for v in items):
        pairs = []
        for v in items:
            pair = tuple(v)
            if len(pair) != 2 or not all(_is_int(p) for p in pair):
                raise ValueError(f"{op}: padding pairs must be (begin, end) ints, got {padding!r}")
            pairs.append(pair)
        begin = tuple(int(p[0]) for p in pairs)
        end = tuple(int(p[1]) for p in pairs)
    elif len(items) == n and all(_is_int(v) for v in items):
        begin = end = tuple(int(v) for v in items)
    elif len(items) == 2 * n and all(_is_int(v) for v in items):
        begin = tuple(int(v) for v in items[:n])
        end = tuple(int(v) for v in items[n:])
    else:
        raise ValueError(
            f"{op}: padding must have {n} values (symmetric), {2 * n} values (ONNX begins then ends) "
            f"or {n} (begin, end) pairs, got {padding!r}")
    if any(v < 0 for v in begin + end):
        raise ValueError(f"{op}: padding must be >= 0, got {padding!r}")
    check_attr_range(begin + end, op, "padding", padding)
    return begin, end


# ---------------------------------------------------------------------------
# --- pooling ---
# ---------------------------------------------------------------------------

def pool_out_size(size, k, stride, pad_begin, pad_end, dilation, ceil_mode):
    """Pooling output size (PyTorch / ONNX rule); may be <= 0 for invalid shapes.

    floor or ceil of (in + pb + pe - d*(k-1) - 1)/s, plus 1.  In ceil mode a
    last window that would *start* in the end padding or beyond the input
    (start = (out-1)*s - pb >= in) is dropped."""
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


def first_padding_only_window(size, out, k, stride, pad_begin, dilation):
    """Index of the first output whose window has no tap inside [0, size), or
    None.  (Such a window would have no maximum and a zero divisor.)"""
    last = dilation * (k - 1)
    # Only windows that start before the input or end past it can miss it:
    # a prefix and a suffix of the outputs, so long inputs stay cheap.
    head = min(out, -(-pad_begin // stride))                    # start < 0
    tail = max(head, min(out, -(-(size - last + pad_begin) // stride)))   # start + last >= size
    for o in list(range(head)) + list(range(tail, out)):
        start = o * stride - pad_begin
        if not any(0 <= start + j * dilation < size for j in range(k)):
            return o
    return None


def pad_pairs(attrs):
    """((begin, end), ...) per spatial axis of an attrs record: the padding
    form every op's padding argument accepts."""
    return tuple(zip(attrs.pads_begin, attrs.pads_end))


def layout_hint(x_shape, c_in):
    """A hint for a channel error when the input looks channels-last: its last
    dim is the C_in the weight expects (and its dim 1 is not).  '' otherwise."""
    x_shape = tuple(x_shape)
    if len(x_shape) < 3 or x_shape[-1] != c_in or x_shape[1] == c_in:
        return ""
    nsp = len(x_shape) - 2
    names = {1: ("NWC", "NCW"), 2: ("NHWC", "NCHW"), 3: ("NDHWC", "NCDHW")}
    last, first = names.get(nsp, ("channels-last", "channels-first"))
    perm = ", ".join(["0", str(nsp + 1)] + [str(i) for i in range(1, nsp + 1)])
    return (f"; the input looks {last} (its last dim {x_shape[-1]} is the weight's C_in): rlx_cpu expects "
            f"{first} (channels first), e.g. x.transpose({perm})")


def switch_setting(value, env, default, where, arg):
    """A compile switch: True/False as given, or None for environment
    variable `env` ('1' on, '0' off, unset: `default`); anything else raises
    (ValueError for the variable, TypeError for the argument)."""
    if value is None:
        raw = os.environ.get(env, "").strip()
        if raw == "":
            return default
        if raw in ("0", "1"):
            return raw == "1"
        raise ValueError(f"{env} must be '0' or '1' (or unset), got {raw!r}")
    if not isinstance(value, bool):
        raise TypeError(f"{where}: {arg} must be True, False or None, got {value!r}")
    return value
