"""Independent float64 numpy references, written plainly for reading, not speed.

Nothing here imports rlx_cpu.  Each function documents its semantics; the
kernels under test must match them.  Add new ops in their own section.
"""
import itertools

import numpy as np


def _tuple(v, n):
    return (int(v),) * n if np.isscalar(v) else tuple(int(i) for i in v)


# ---------------------------------------------------------------------------
# Convolution (1-D, 2-D, 3-D)
# ---------------------------------------------------------------------------

def conv_nd(x, w, bias=None, stride=1, pads_begin=0, pads_end=0, dilation=1, groups=1):
    """Cross-correlation as in PyTorch/ONNX Conv, float64.

    x: [N, C_in, *spatial]; w: [C_out, C_in/groups, *kernel]; pads per axis at
    the beginning and end; output size floor((in + pb + pe - d(k-1) - 1)/s) + 1.
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    nsp = x.ndim - 2
    s, d = _tuple(stride, nsp), _tuple(dilation, nsp)
    pb, pe = _tuple(pads_begin, nsp), _tuple(pads_end, nsp)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(nsp)])
    n, c_in = x.shape[:2]
    c_out, cpg = w.shape[:2]
    kernel = w.shape[2:]
    out_sp = [(xp.shape[2 + i] - d[i] * (kernel[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    out = np.zeros((n, c_out, *out_sp))
    cog = c_out // groups
    for g in range(groups):
        xg = xp[:, g * cpg:(g + 1) * cpg]
        wg = w[g * cog:(g + 1) * cog]
        for taps in itertools.product(*[range(k) for k in kernel]):
            sl = tuple(slice(taps[i] * d[i], taps[i] * d[i] + s[i] * (out_sp[i] - 1) + 1, s[i])
                       for i in range(nsp))
            patch = xg[(slice(None), slice(None)) + sl]          # [N, cpg, *out]
            wt = wg[(slice(None), slice(None)) + tuple(taps)]    # [cog, cpg]
            out[:, g * cog:(g + 1) * cog] += np.einsum("nc...,oc->no...", patch, wt)
    if bias is not None:
        out += np.asarray(bias, dtype=np.float64).reshape((1, c_out) + (1,) * nsp)
    return out


# ---------------------------------------------------------------------------
# Transposed convolution (1-D, 2-D, 3-D)
# ---------------------------------------------------------------------------

def conv_transpose_nd(x, w, bias=None, stride=1, pads_begin=0, pads_end=0, dilation=1, groups=1,
                      output_padding=0):
    """Transposed convolution as in PyTorch ConvTranspose / ONNX ConvTranspose, float64.

    x: [N, C_in, *in]; w: [C_in, C_out/groups, *kernel].  Scatter form: input
    element i of channel ci (group g) adds x * w[ci, co_local, k] at output
    position o = i*s + k*d - pads_begin along every axis, kept when
    0 <= o < out, where out = (in-1)*s - pads_begin - pads_end + d*(k-1)
    + output_padding + 1.  Positions no tap reaches hold 0 (plus bias).
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    nsp = x.ndim - 2
    s, d = _tuple(stride, nsp), _tuple(dilation, nsp)
    pb, pe = _tuple(pads_begin, nsp), _tuple(pads_end, nsp)
    op = _tuple(output_padding, nsp)
    n, c_in = x.shape[:2]
    cog = w.shape[1]
    c_out = cog * groups
    cig = c_in // groups
    kernel = w.shape[2:]
    in_sp = x.shape[2:]
    out_sp = [(in_sp[i] - 1) * s[i] - pb[i] - pe[i] + d[i] * (kernel[i] - 1) + op[i] + 1 for i in range(nsp)]
    # Uncropped canvas: every tap lands at o + pads_begin >= 0; wide enough
    # for the cropped window [pb, pb + out) too.
    full = [max((in_sp[i] - 1) * s[i] + d[i] * (kernel[i] - 1) + 1, pb[i] + out_sp[i]) for i in range(nsp)]
    canvas = np.zeros((n, c_out, *full))
    for g in range(groups):
        xg = x[:, g * cig:(g + 1) * cig]
        wg = w[g * cig:(g + 1) * cig]                                # [cig, cog, *kernel]
        for taps in itertools.product(*[range(k) for k in kernel]):
            sl = tuple(slice(taps[i] * d[i], taps[i] * d[i] + s[i] * (in_sp[i] - 1) + 1, s[i])
                       for i in range(nsp))
            wt = wg[(slice(None), slice(None)) + tuple(taps)]        # [cig, cog]
            canvas[(slice(None), slice(g * cog, (g + 1) * cog)) + sl] += np.einsum("nc...,co->no...", xg, wt)
    out = canvas[(slice(None), slice(None)) + tuple(slice(pb[i], pb[i] + out_sp[i]) for i in range(nsp))]
    out = np.array(out)
    if bias is not None:
        out += np.asarray(bias, dtype=np.float64).reshape((1, c_out) + (1,) * nsp)
    return out


# ---------------------------------------------------------------------------
# ONNX auto_pad (for the ONNX importer tests)
# ---------------------------------------------------------------------------

def onnx_auto_pads(in_sizes, kernel, stride, dilation, mode):
    """ONNX auto_pad SAME_UPPER / SAME_LOWER for conv and pools: output
    ceil(in / s), total pad (out-1)*s + d*(k-1) + 1 - in (>= 0), the odd one
    at the end (UPPER) or the beginning (LOWER).  Returns (begins, ends)."""
    begins, ends = [], []
    for n, k, s, d in zip(in_sizes, kernel, stride, dilation):
        out = -(-n // s)
        total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
        small, big = total // 2, total - total // 2
        begins.append(small if mode == "SAME_UPPER" else big)
        ends.append(big if mode == "SAME_UPPER" else small)
    return tuple(begins), tuple(ends)


def rel_error(got, want):
    """max |got - want| relative to the magnitude of the result (the sum's scale)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    return float(np.abs(got - want).max(initial=0.0) / scale)


# ---------------------------------------------------------------------------
# --- pooling / resize / im2col ---
# Plain loops over every output and every window tap; float64.
# ---------------------------------------------------------------------------

def pool_out_size(size, k, s, pb, pe, d, ceil_mode):
    """Count window positions o = 0, 1, ... (start o*s in padded coordinates):
    floor mode keeps windows whose last tap fits in the padded input; ceil mode
    also keeps one partial window past it (ceil((padded - extent) / s) + 1
    windows), then drops the last window if it starts in the end padding or
    beyond (once, as PyTorch and ONNX do)."""
    extent = d * (k - 1) + 1
    padded = size + pb + pe
    if padded < extent:
        return 0
    count = 0
    while count * s + extent <= padded:
        count += 1
    if ceil_mode:
        if (count - 1) * s + extent < padded:          # a partial window remains
            count += 1
        if (count - 1) * s >= size + pb:
            count -= 1
    return count


def _window_taps(out_index, kernel, stride, pads_begin, dilation):
    """Input coordinates of every tap of one window, in window order."""
    axes = [[out_index[i] * stride[i] - pads_begin[i] + j * dilation[i] for j in range(kernel[i])]
            for i in range(len(kernel))]
    return list(itertools.product(*axes))


def max_pool_nd(x, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1, ceil_mode=False):
    """Max pooling of x [N, C, *spatial]; returns (values, indices).

    values start at -inf and take v when v > max or v is NaN, visiting taps in
    window order and skipping taps outside the input (padding is never read);
    indices are flat within the (n, c) plane; a window whose values never beat
    -inf points at its first in-bounds tap."""
    x = np.asarray(x, dtype=np.float64)
    nsp = x.ndim - 2
    k = _tuple(kernel, nsp)
    s = k if stride is None else _tuple(stride, nsp)
    pb, pe, d = _tuple(pads_begin, nsp), _tuple(pads_end, nsp), _tuple(dilation, nsp)
    size = x.shape[2:]
    out_sp = [pool_out_size(size[i], k[i], s[i], pb[i], pe[i], d[i], ceil_mode) for i in range(nsp)]
    vals = np.zeros(x.shape[:2] + tuple(out_sp))
    idx = np.zeros(x.shape[:2] + tuple(out_sp), dtype=np.int64)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for o in itertools.product(*[range(v) for v in out_sp]):
                best, best_i = -np.inf, None
                for tap in _window_taps(o, k, s, pb, d):
                    if not all(0 <= tap[i] < size[i] for i in range(nsp)):
                        continue
                    flat = int(np.ravel_multi_index(tap, size))
                    if best_i is None:
                        best_i = flat
                    v = x[(n, c) + tap]
                    if v > best or np.isnan(v):
                        best, best_i = v, flat
                vals[(n, c) + o] = best
                idx[(n, c) + o] = best_i
    return vals, idx


def avg_pool_nd(x, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1, ceil_mode=False,
                count_include_pad=True, divisor_override=None):
    """Average pooling of x [N, C, *spatial].

    Sum of the in-bounds taps divided by: divisor_override if given; else with
    count_include_pad the number of taps inside the padded input
    [-pad_begin, in + pad_end) (a ceil-mode window's overhang past the end
    padding does not count); else the number of in-bounds taps."""
    x = np.asarray(x, dtype=np.float64)
    nsp = x.ndim - 2
    k = _tuple(kernel, nsp)
    s = k if stride is None else _tuple(stride, nsp)
    pb, pe, d = _tuple(pads_begin, nsp), _tuple(pads_end, nsp), _tuple(dilation, nsp)
    size = x.shape[2:]
    out_sp = [pool_out_size(size[i], k[i], s[i], pb[i], pe[i], d[i], ceil_mode) for i in range(nsp)]
    out = np.zeros(x.shape[:2] + tuple(out_sp))
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            for o in itertools.product(*[range(v) for v in out_sp]):
                total, inside, padded = 0.0, 0, 0
                for tap in _window_taps(o, k, s, pb, d):
                    if all(-pb[i] <= tap[i] < size[i] + pe[i] for i in range(nsp)):
                        padded += 1
                    if all(0 <= tap[i] < size[i] for i in range(nsp)):
                        inside += 1
                        total += x[(n, c) + tap]
                if divisor_override:
                    div = divisor_override
                else:
                    div = padded if count_include_pad else inside
                out[(n, c) + o] = total / div
    return out


def global_pool(x, kind):
    """Mean or max over every spatial axis, keeping them as size 1."""
    x = np.asarray(x, dtype=np.float64)
    axes = tuple(range(2, x.ndim))
    return x.mean(axis=axes, keepdims=True) if kind == "avg" else x.max(axis=axes, keepdims=True)


def nearest_gather(x, tables):
    """y[n, c, o1, ...] = x[n, c, t1[o1], ...] for per-spatial-axis source tables."""
    y = np.asarray(x, dtype=np.float64)
    for i, t in enumerate(tables):
        y = np.take(y, np.asarray(t, dtype=np.int64), axis=2 + i)
    return y


def upsample_nearest2x(x):
    """Each pixel of [N, C, H, W] repeated into a 2x2 block."""
    x = np.asarray(x, dtype=np.float64)
    return x.repeat(2, axis=2).repeat(2, axis=3)


def torch_nearest_source(in_size, out_size, scale_factor=None, exact=False, shortcuts=False):
    """PyTorch's nearest source indices, element by element: scale = 1/scale_factor
    (if given) else in/out, rounded to float32; legacy src = floor(f32(dst) * scale),
    exact src = floor(f32((dst + 0.5) * scale)); both clamped to in - 1.  With
    `shortcuts` (PyTorch's 2-D legacy kernel) out == in is the identity and
    out == 2 in is dst // 2, whatever the scale factor."""
    if shortcuts and not exact and out_size == in_size:
        return list(range(out_size))
    if shortcuts and not exact and out_size == 2 * in_size:
        return [dst // 2 for dst in range(out_size)]
    if scale_factor is not None:
        scale = np.float32(1.0 / scale_factor)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    src = []
    for dst in range(out_size):
        if exact:
            v = np.float32((dst + 0.5) * float(scale))
        else:
            v = np.float32(dst) * scale
        src.append(min(int(np.floor(v)), in_size - 1))
    return src


def im2col_rows(x, kernel, stride=1, pads_begin=0, pads_end=0, dilation=1):
    """Patch rows [N*L, C*K]: row (n, block position in C order), column
    (c, kernel taps in C order); zeros where a tap is in the padding."""
    x = np.asarray(x, dtype=np.float64)
    nsp = x.ndim - 2
    k, s, d = _tuple(kernel, nsp), _tuple(stride, nsp), _tuple(dilation, nsp)
    pb, pe = _tuple(pads_begin, nsp), _tuple(pads_end, nsp)
    size = x.shape[2:]
    blocks = [(size[i] + pb[i] + pe[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    n, c = x.shape[:2]
    nk = int(np.prod(k))
    out = np.zeros((n * int(np.prod(blocks)), c * nk))
    for b in range(n):
        for li, o in enumerate(itertools.product(*[range(v) for v in blocks])):
            row = b * int(np.prod(blocks)) + li
            for ch in range(c):
                for ti, tap in enumerate(_window_taps(o, k, s, pb, d)):
                    if all(0 <= tap[i] < size[i] for i in range(nsp)):
                        out[row, ch * nk + ti] = x[(b, ch) + tap]
    return out


def col2im_rows(cols, image, kernel, stride=1, pads_begin=0, pads_end=0, dilation=1):
    """Adjoint of im2col_rows: scatter-add every patch entry back to its pixel."""
    cols = np.asarray(cols, dtype=np.float64)
    nsp = len(image)
    k, s, d = _tuple(kernel, nsp), _tuple(stride, nsp), _tuple(dilation, nsp)
    pb, pe = _tuple(pads_begin, nsp), _tuple(pads_end, nsp)
    blocks = [(image[i] + pb[i] + pe[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    nl, nk = int(np.prod(blocks)), int(np.prod(k))
    n, c = cols.shape[0] // nl, cols.shape[1] // nk
    x = np.zeros((n, c) + tuple(image))
    for b in range(n):
        for li, o in enumerate(itertools.product(*[range(v) for v in blocks])):
            for ch in range(c):
                for ti, tap in enumerate(_window_taps(o, k, s, pb, d)):
                    if all(0 <= tap[i] < image[i] for i in range(nsp)):
                        x[(b, ch) + tap] += cols[b * nl + li, ch * nk + ti]
    return x


# Convolution gradients (1-D, 2-D, 3-D)  [training]
# ---------------------------------------------------------------------------

def _conv_geometry(nsp, stride, pads_begin, pads_end, dilation):
    return _tuple(stride, nsp), _tuple(pads_begin, nsp), _tuple(pads_end, nsp), _tuple(dilation, nsp)


def _tap_slices(taps, s, d, out_sp):
    """The strided window of the padded input that kernel tap `taps` reads."""
    return tuple(slice(taps[i] * d[i], taps[i] * d[i] + s[i] * (out_sp[i] - 1) + 1, s[i])
                 for i in range(len(taps)))


def conv_nd_backward_input(dy, w, input_shape, stride=1, pads_begin=0, pads_end=0, dilation=1, groups=1):
    """d/dx of sum(conv_nd(x, w) * dy), float64: the adjoint of conv_nd.

    Every kernel tap's strided window of the *padded* input receives
    W_tap^T . dy; the padding is cut away at the end (gradient flowing into
    padding is dropped; input positions no window reaches get 0)."""
    dy = np.asarray(dy, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    nsp = len(input_shape) - 2
    s, pb, pe, d = _conv_geometry(nsp, stride, pads_begin, pads_end, dilation)
    n, c_in = input_shape[:2]
    c_out, cpg = w.shape[:2]
    cog = c_out // groups
    out_sp = dy.shape[2:]
    dxp = np.zeros((n, c_in) + tuple(input_shape[2 + i] + pb[i] + pe[i] for i in range(nsp)))
    for g in range(groups):
        wg = w[g * cog:(g + 1) * cog]
        dyg = dy[:, g * cog:(g + 1) * cog]
        for taps in itertools.product(*[range(k) for k in w.shape[2:]]):
            wt = wg[(slice(None), slice(None)) + tuple(taps)]        # [cog, cpg]
            window = (slice(None), slice(g * cpg, (g + 1) * cpg)) + _tap_slices(taps, s, d, out_sp)
            dxp[window] += np.einsum("no...,oc->nc...", dyg, wt)
    crop = tuple(slice(pb[i], pb[i] + input_shape[2 + i]) for i in range(nsp))
    return dxp[(slice(None), slice(None)) + crop]


def conv_nd_backward_weight(x, dy, weight_shape, stride=1, pads_begin=0, pads_end=0, dilation=1, groups=1):
    """d/dw of sum(conv_nd(x, w) * dy), float64: for every tap, the window it
    reads correlated with dy over batch and positions."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    nsp = x.ndim - 2
    s, pb, pe, d = _conv_geometry(nsp, stride, pads_begin, pads_end, dilation)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pb[i], pe[i]) for i in range(nsp)])
    c_out, cpg = weight_shape[:2]
    cog = c_out // groups
    out_sp = dy.shape[2:]
    dw = np.zeros(tuple(weight_shape))
    for g in range(groups):
        xg = xp[:, g * cpg:(g + 1) * cpg]
        dyg = dy[:, g * cog:(g + 1) * cog]
        for taps in itertools.product(*[range(k) for k in weight_shape[2:]]):
            patch = xg[(slice(None), slice(None)) + _tap_slices(taps, s, d, out_sp)]   # [N, cpg, *out]
            sp = "xyz"[:nsp]
            dw[(slice(g * cog, (g + 1) * cog), slice(None)) + tuple(taps)] = \
                np.einsum(f"nc{sp},no{sp}->oc", patch, dyg)
    return dw


# ---------------------------------------------------------------------------
# Pooling gradients (N-d)  [training]
# The adjoints of max_pool_nd / avg_pool_nd above, same window rules.
# ---------------------------------------------------------------------------

def max_pool_nd_backward(x, dy, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1, ceil_mode=False):
    """dx of max_pool_nd: each output's gradient added at the input its index
    names (overlapping windows accumulate)."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    _, idx = max_pool_nd(x, kernel, stride, pads_begin, pads_end, dilation, ceil_mode)
    assert dy.shape == idx.shape, (dy.shape, idx.shape)
    dx = np.zeros(x.shape[:2] + (int(np.prod(x.shape[2:])),))
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            np.add.at(dx[n, c], idx[n, c].ravel(), dy[n, c].ravel())
    return dx.reshape(x.shape)


def avg_pool_nd_backward(dy, input_shape, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1,
                         ceil_mode=False, count_include_pad=True, divisor_override=None):
    """dx of avg_pool_nd: each in-bounds tap of a window gets the window's
    gradient over the divisor avg_pool_nd used."""
    dy = np.asarray(dy, dtype=np.float64)
    nsp = len(input_shape) - 2
    k = _tuple(kernel, nsp)
    s = k if stride is None else _tuple(stride, nsp)
    pb, pe, d = _tuple(pads_begin, nsp), _tuple(pads_end, nsp), _tuple(dilation, nsp)
    size = tuple(input_shape[2:])
    out_sp = [pool_out_size(size[i], k[i], s[i], pb[i], pe[i], d[i], ceil_mode) for i in range(nsp)]
    assert dy.shape == tuple(input_shape[:2]) + tuple(out_sp), (dy.shape, out_sp)
    dx = np.zeros(tuple(input_shape))
    for o in itertools.product(*[range(v) for v in out_sp]):
        taps = _window_taps(o, k, s, pb, d)
        inside = [t for t in taps if all(0 <= t[i] < size[i] for i in range(nsp))]
        padded = sum(all(-pb[i] <= t[i] < size[i] + pe[i] for i in range(nsp)) for t in taps)
        div = divisor_override or (padded if count_include_pad else len(inside))
        for t in inside:
            dx[(slice(None), slice(None)) + t] += dy[(slice(None), slice(None)) + o] / div
    return dx


# ---------------------------------------------------------------------------
# Dense layer, ReLU, softmax cross-entropy  [training]
# ---------------------------------------------------------------------------

def relu(x):
    x = np.asarray(x, dtype=np.float64)
    return np.where(x > 0, x, 0.0)


def linear(x, w, b=None):
    """x [N, in] . w[out, in]^T + b."""
    y = np.asarray(x, dtype=np.float64) @ np.asarray(w, dtype=np.float64).T
    return y if b is None else y + np.asarray(b, dtype=np.float64)


def softmax_cross_entropy(logits, labels):
    """mean_n(log sum_j exp z_nj - z_n,label_n)."""
    z = np.asarray(logits, dtype=np.float64)
    lab = np.asarray(labels).astype(np.int64)
    zmax = z.max(axis=1, keepdims=True)
    lse = zmax[:, 0] + np.log(np.exp(z - zmax).sum(axis=1))
    return float(np.mean(lse - z[np.arange(len(lab)), lab]))


def softmax_cross_entropy_backward(logits, labels, grad_loss=1.0):
    z = np.asarray(logits, dtype=np.float64)
    lab = np.asarray(labels).astype(np.int64)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(lab)), lab] -= 1.0
    return grad_loss * p / len(lab)


# ---------------------------------------------------------------------------
# Central finite differences  [training]
# ---------------------------------------------------------------------------

def numeric_grad(f, x, indices, eps=1e-3):
    """(f(x + eps e_i) - f(x - eps e_i)) / (2 eps) for each flat index i, in
    float64; f maps a float64 array shaped like x to a scalar."""
    x = np.array(x, dtype=np.float64)
    flat = x.reshape(-1)
    out = []
    for i in indices:
        old = flat[i]
        flat[i] = old + eps
        fp = f(x)
        flat[i] = old - eps
        fm = f(x)
        flat[i] = old
        out.append((fp - fm) / (2 * eps))
    return np.array(out)


def sample_indices(size, count, rng):
    """`count` distinct flat indices of an array of `size` values, always
    including the first and the last (border taps meet the padding)."""
    if size <= count:
        return np.arange(size)
    mid = rng.choice(np.arange(1, size - 1), size=count - 2, replace=False)
    return np.concatenate([[0], np.sort(mid), [size - 1]])


# ---------------------------------------------------------------------------
# Inference ops around the convolutions (activations, arithmetic, tensor
# movement, products, reductions)
# ---------------------------------------------------------------------------

def leaky_relu(x, alpha=0.01):
    x = np.asarray(x, np.float64)
    return np.where(x < 0, alpha * x, x)


def clip(x, lo=-np.inf, hi=np.inf):
    """min(max(x, lo), hi); NaN stays NaN."""
    x = np.asarray(x, np.float64)
    return np.minimum(np.maximum(x, lo), hi)


def sigmoid(x):
    x = np.asarray(x, np.float64)
    return 1.0 / (1.0 + np.exp(-x))


def silu(x):
    """x * sigmoid(x) (SiLU / swish), float64."""
    x = np.asarray(x, dtype=np.float64)
    return x * sigmoid(x)


def hard_sigmoid(x, alpha=0.2, beta=0.5):
    x = np.asarray(x, np.float64)
    return np.clip(alpha * x + beta, 0.0, 1.0)


def hard_swish(x):
    """x * relu6(x + 3) / 6 (torch.nn.Hardswish, ONNX HardSwish)."""
    x = np.asarray(x, np.float64)
    return x * np.minimum(np.maximum(x + 3.0, 0.0), 6.0) / 6.0


def tanh(x):
    return np.tanh(np.asarray(x, np.float64))


def broadcast_binary(op, a, b):
    """a (op) b with numpy broadcasting, op one of '+', '-', '*', '/'."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide}[op](a, b)


def batch_norm(x, scale, bias, mean, var, eps=1e-5):
    """Inference batch norm over axis 1 of [N, C, ...]."""
    x = np.asarray(x, np.float64)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    f = [np.asarray(v, np.float64).reshape(shape) for v in (scale, bias, mean, var)]
    return (x - f[2]) / np.sqrt(f[3] + eps) * f[0] + f[1]


def pad(x, pads, mode="constant", value=0.0):
    """ONNX Pad: pads = ((begin, end), ...); negative amounts crop; modes
    constant / reflect / edge, written per output index."""
    x = np.asarray(x, np.float64)
    out_shape = tuple(d + b + e for d, (b, e) in zip(x.shape, pads))
    out = np.empty(out_shape)
    for o in itertools.product(*[range(d) for d in out_shape]):
        src = []
        inside = True
        for i, (d, (b, _)) in zip(o, zip(x.shape, pads)):
            s = i - b
            if not 0 <= s < d:
                if mode == "constant":
                    inside = False
                elif mode == "edge":
                    s = 0 if s < 0 else d - 1
                else:
                    while not 0 <= s < d:          # reflect about the edges, edge not repeated
                        s = -s if s < 0 else 2 * (d - 1) - s
            src.append(s)
        out[o] = x[tuple(src)] if inside else value
    return out


def softmax(x, axis=-1):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def gemm(a, b, c=None, alpha=1.0, beta=1.0, trans_a=False, trans_b=False):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    y = alpha * ((a.T if trans_a else a) @ (b.T if trans_b else b))
    return y if c is None else y + beta * np.asarray(c, np.float64)


def resize_linear(x, out_spatial, mode="half_pixel"):
    """ONNX Resize mode 'linear' over the spatial axes of [N, C, ...] with
    scale = out / in per axis; coordinate modes half_pixel, pytorch_half_pixel,
    align_corners, asymmetric.  Every output is the multilinear blend of the
    2^k corners around its source point, indices clamped to the input."""
    x = np.asarray(x, np.float64)
    sp = x.shape[2:]

    def coord(o, n_in, n_out):
        s = n_out / n_in
        if mode == "align_corners":
            return 0.0 if n_out == 1 else o * (n_in - 1) / (n_out - 1)
        if mode == "asymmetric":
            return o / s
        if mode == "pytorch_half_pixel" and n_out == 1:
            return -0.5
        return (o + 0.5) / s - 0.5

    out = np.zeros(x.shape[:2] + tuple(out_spatial))
    for o in itertools.product(*[range(d) for d in out_spatial]):
        acc = 0.0
        cs = [coord(oi, n_in, n_out) for oi, n_in, n_out in zip(o, sp, out_spatial)]
        for corner in itertools.product((0, 1), repeat=len(sp)):
            wgt, idx = 1.0, []
            for c, k, n_in in zip(cs, corner, sp):
                lo = int(np.floor(c))
                frac = c - lo
                wgt *= frac if k else 1.0 - frac
                idx.append(min(max(lo + k, 0), n_in - 1))
            acc = acc + wgt * x[(slice(None), slice(None)) + tuple(idx)]
        out[(slice(None), slice(None)) + o] = acc
    return out
