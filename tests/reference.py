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
# ONNX window pooling (for the ONNX importer tests)
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


def onnx_pool(x, kind, kernel, stride, pads_begin, pads_end, dilation, ceil_mode=False, count_include_pad=False,
              storage_order=0):
    """ONNX MaxPool / AveragePool, float64; returns (y, indices or None).

    Output size floor (or ceil) of (in + pb + pe - d(k-1) - 1)/s, plus 1; in
    ceil mode a last window that starts at or beyond in + pb is dropped.
    Window taps are at o*s - pb + j*d.  max: the largest in-bounds tap, the
    first in window order on ties; its index is n*C*vol + c*vol + the spatial
    offset, row-major (storage_order 0) or first axis fastest (1).  avg: the
    in-bounds taps summed, divided by their count, or with count_include_pad
    by the count of taps inside [-pb, in + pe).
    """
    x = np.asarray(x, dtype=np.float64)
    nsp = x.ndim - 2
    in_sp = x.shape[2:]
    out_sp = []
    for i in range(nsp):
        span = in_sp[i] + pads_begin[i] + pads_end[i] - dilation[i] * (kernel[i] - 1) - 1
        o = (-(-span // stride[i]) if ceil_mode else span // stride[i]) + 1
        if ceil_mode and (o - 1) * stride[i] >= in_sp[i] + pads_begin[i]:
            o -= 1
        out_sp.append(o)
    n, c = x.shape[:2]
    vol = int(np.prod(in_sp))
    y = np.zeros((n, c, *out_sp))
    ind = np.zeros((n, c, *out_sp), dtype=np.int64)
    for b, ch in itertools.product(range(n), range(c)):
        for o in itertools.product(*[range(v) for v in out_sp]):
            best, best_at, total, inside, padded = None, None, 0.0, 0, 0
            for taps in itertools.product(*[range(k) for k in kernel]):
                pos = [o[i] * stride[i] - pads_begin[i] + taps[i] * dilation[i] for i in range(nsp)]
                if all(-pads_begin[i] <= pos[i] < in_sp[i] + pads_end[i] for i in range(nsp)):
                    padded += 1
                if not all(0 <= pos[i] < in_sp[i] for i in range(nsp)):
                    continue
                v = x[(b, ch, *pos)]
                total += v
                inside += 1
                if best is None or v > best:
                    best, best_at = v, pos
            if kind == "max":
                y[(b, ch, *o)] = best
                if storage_order == 0:
                    off = int(np.ravel_multi_index(best_at, in_sp))
                else:
                    off = int(np.ravel_multi_index(best_at, in_sp, order="F"))
                ind[(b, ch, *o)] = (b * c + ch) * vol + off
            else:
                y[(b, ch, *o)] = total / (padded if count_include_pad else inside)
    return y, (ind if kind == "max" else None)


def rel_error(got, want):
    """max |got - want| relative to the magnitude of the result (the sum's scale)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    scale = max(np.abs(want).max(initial=0.0), 1e-30)
    return float(np.abs(got - want).max(initial=0.0) / scale)
