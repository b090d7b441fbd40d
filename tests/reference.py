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


def rel_error(got, want):
    """max |got - want| relative to the magnitude of the result (the sum's scale)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    return float(np.abs(got - want).max(initial=0.0) / scale)


# ---------------------------------------------------------------------------
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
# Pooling 2-D forward and backward  [training]
#
# PyTorch semantics: window of output (oh, ow) covers rows oh*sh - pb_h + a*dh,
# columns ow*sw - pb_w + b*dw; taps outside the input are skipped.  With
# ceil_mode the size rounds up but the last window must start inside the
# input or its begin padding.
# ---------------------------------------------------------------------------

def pool_out_size(size, k, stride, pad_begin, pad_end, dilation, ceil_mode):
    span = size + pad_begin + pad_end - dilation * (k - 1) - 1
    if ceil_mode:
        out = -(-span // stride) + 1
        if (out - 1) * stride >= size + pad_begin:
            out -= 1
    else:
        out = span // stride + 1
    return out


def _pool_args(x_shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode):
    k = _tuple(kernel, 2)
    s = k if stride is None else _tuple(stride, 2)
    pb, pe, d = _tuple(pads_begin, 2), _tuple(pads_end, 2), _tuple(dilation, 2)
    out = [pool_out_size(x_shape[2 + i], k[i], s[i], pb[i], pe[i], d[i], ceil_mode) for i in range(2)]
    return k, s, pb, pe, d, out


def _max_window(plane, oh, ow, k, s, pb, d):
    """(value, (row, col)) of the first maximum in window order; NaN wins."""
    best, where = None, None
    for a in range(k[0]):
        for b in range(k[1]):
            r, c = oh * s[0] - pb[0] + a * d[0], ow * s[1] - pb[1] + b * d[1]
            if 0 <= r < plane.shape[0] and 0 <= c < plane.shape[1]:
                v = plane[r, c]
                if best is None or v > best or (np.isnan(v) and not np.isnan(best)):
                    best, where = v, (r, c)
    return best, where


def max_pool2d(x, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1, ceil_mode=False):
    x = np.asarray(x, dtype=np.float64)
    k, s, pb, pe, d, out = _pool_args(x.shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode)
    y = np.zeros(x.shape[:2] + tuple(out))
    for n, c, oh, ow in itertools.product(range(x.shape[0]), range(x.shape[1]), range(out[0]), range(out[1])):
        y[n, c, oh, ow] = _max_window(x[n, c], oh, ow, k, s, pb, d)[0]
    return y


def max_pool2d_backward(x, dy, kernel, stride=None, pads_begin=0, pads_end=0, dilation=1, ceil_mode=False):
    """dx: each output's gradient added at its window's first maximum."""
    x = np.asarray(x, dtype=np.float64)
    dy = np.asarray(dy, dtype=np.float64)
    k, s, pb, pe, d, out = _pool_args(x.shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode)
    assert dy.shape == x.shape[:2] + tuple(out), (dy.shape, out)
    dx = np.zeros_like(x)
    for n, c, oh, ow in itertools.product(range(x.shape[0]), range(x.shape[1]), range(out[0]), range(out[1])):
        r, col = _max_window(x[n, c], oh, ow, k, s, pb, d)[1]
        dx[n, c, r, col] += dy[n, c, oh, ow]
    return dx


def _avg_window(shape_hw, oh, ow, k, s, pb, pe, count_include_pad):
    """(rows, cols, divisor): in-bounds taps, and the divisor (the window
    clipped to the padded input when count_include_pad, else in-bounds taps)."""
    h, w = shape_hw
    r0, c0 = oh * s[0] - pb[0], ow * s[1] - pb[1]
    r1, c1 = min(r0 + k[0], h + pe[0]), min(c0 + k[1], w + pe[1])
    rows = [r for r in range(r0, r1) if 0 <= r < h]
    cols = [c for c in range(c0, c1) if 0 <= c < w]
    div = (r1 - r0) * (c1 - c0) if count_include_pad else len(rows) * len(cols)
    return rows, cols, div


def avg_pool2d(x, kernel, stride=None, pads_begin=0, pads_end=0, ceil_mode=False, count_include_pad=True):
    x = np.asarray(x, dtype=np.float64)
    k, s, pb, pe, d, out = _pool_args(x.shape, kernel, stride, pads_begin, pads_end, 1, ceil_mode)
    y = np.zeros(x.shape[:2] + tuple(out))
    for oh, ow in itertools.product(range(out[0]), range(out[1])):
        rows, cols, div = _avg_window(x.shape[2:], oh, ow, k, s, pb, pe, count_include_pad)
        if rows and cols:
            y[:, :, oh, ow] = x[:, :, rows][:, :, :, cols].sum(axis=(2, 3)) / div
    return y


def avg_pool2d_backward(dy, input_shape, kernel, stride=None, pads_begin=0, pads_end=0, ceil_mode=False,
                        count_include_pad=True):
    dy = np.asarray(dy, dtype=np.float64)
    k, s, pb, pe, d, out = _pool_args(input_shape, kernel, stride, pads_begin, pads_end, 1, ceil_mode)
    assert dy.shape == tuple(input_shape[:2]) + tuple(out), (dy.shape, out)
    dx = np.zeros(tuple(input_shape))
    for oh, ow in itertools.product(range(out[0]), range(out[1])):
        rows, cols, div = _avg_window(input_shape[2:], oh, ow, k, s, pb, pe, count_include_pad)
        for r in rows:
            for c in cols:
                dx[:, :, r, c] += dy[:, :, oh, ow] / div
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
