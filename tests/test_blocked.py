"""The channel-blocked layout (NCHW8c): its kernels (src/rlx_nchwc.h) against
the float64 reference, in both SIMD variants and at 1 and 2 threads, and the
blocked_layout pass (rlx_cpu/passes.py) on its own: which convs it moves,
where it puts the reorders, and that a rewritten plan computes what the
NCHW plan does."""
import os

import numpy as np
import pytest

import rlx_cpu
from conftest import TOL, check_parity, script_array
from reference import (avg_pool_nd, batch_norm as ref_batch_norm, conv_nd, global_pool, max_pool_nd, pool_out_size,
                       relu as ref_relu)
from rlx_cpu import _elementwise, _nchwc, _runtime, passes
from rlx_cpu.ops.blocked import CHANNEL_BINARY_CODES

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

TWO = (1, 2) if _runtime.openmp_enabled() else (1,)


def epilogue64(y, bias, res, act, alpha=0.0, beta=6.0):
    """act(y + bias + res) in float64; alpha, beta as the kernels take them."""
    y = np.asarray(y, np.float64)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(1, -1, 1, 1)
    if res is not None:
        y = y + res
    if act == "relu":
        y = np.maximum(y, 0.0)
    elif act == "clip":
        y = np.clip(y, alpha, beta)
    elif act == "leaky_relu":
        y = np.where(y < 0, alpha * y, y)
    elif act == "sigmoid":
        y = 1.0 / (1.0 + np.exp(-y))
    elif act == "silu":
        y = y / (1.0 + np.exp(-y))
    elif act in ("hard_sigmoid", "hard_swish"):
        h = np.clip(alpha * y + beta, 0.0, 1.0)
        y = h if act == "hard_sigmoid" else y * h
    else:
        assert act is None, act
    return y


def run_1x1(x, w, bias, res, act, threads, alpha=0.0, beta=6.0):
    n, k, h, wd = x.shape
    m = w.shape[0]
    y = np.full(n * m * h * wd, np.nan, np.float32)
    launch = _nchwc.NchwcConv1x1Launch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.pack_1x1_weight(w), bias,
        None if res is None else _nchwc.to_blocked(res).reshape(-1), y, n, k, m, h * wd, act, alpha, beta, threads)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, m // 8, h, wd, 8))


def run_dw(x, w, bias, res, stride, pad, act, threads, alpha=0.0, beta=6.0):
    n, c, h, wd = x.shape
    k = w.shape[2]
    ho, wo = (h + 2 * pad - k) // stride + 1, (wd + 2 * pad - k) // stride + 1
    y = np.full(n * c * ho * wo, np.nan, np.float32)
    launch = _nchwc.NchwcDepthwiseLaunch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.pack_depthwise_weight(w), bias,
        None if res is None else _nchwc.to_blocked(res).reshape(-1), y, n, c, h, wd, stride, pad, pad, act, alpha,
        beta, threads, k)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, c // 8, ho, wo, 8))


# (n, K, M, h, w): M % 16 == 8 (a one-vector panel), K over the K block
# (256: partial sums wait in y), planes that are not multiples of 6 pixels,
# several chunks per plane, several images; with AVX-512, four-panel tiles
# (and a panel left over) across K blocks
SHAPES_1X1 = [(1, 32, 16, 112, 112), (2, 16, 24, 9, 7), (1, 520, 40, 5, 5), (3, 8, 8, 1, 1), (2, 24, 24, 16, 16),
              (1, 64, 136, 7, 7), (2, 272, 32, 3, 11), (1, 264, 80, 20, 26)]


@pytest.mark.parametrize("shape", SHAPES_1X1, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("act,bias,residual", [(None, False, False), ("clip", True, False),
                                               ("relu", True, True), (None, False, True)])
def test_1x1_matches_reference(rng, shape, act, bias, residual):
    n, k, m, h, w = shape
    x = rng.standard_normal((n, k, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, k, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    r = rng.standard_normal((n, m, h, w)).astype(np.float32) if residual else None
    want = epilogue64(conv_nd(x, wt), b, r, act)
    outs = [run_1x1(x, wt, b, r, act, t) for t in TWO]
    check_parity(outs[0], want, "nchwc 1x1", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])      # the thread count changes no bit


# every (shape, stride, padding) whose window fits the padded input: planes
# narrower than a 4-pixel step, a single row or column, odd sizes at stride 2
# 3x3 with padding 0 or 1, 5x5 with 0 to 2 (MNASNet's and EfficientNet's),
# on planes from one output pixel (every tap near an edge) to 112x112 (the
# 5x5 kernel copies rows with their padding in chunks of 4 output rows
# there), and rows of 230 pixels, too wide for that copy
# (RLX_NCHWC_DW_PAD_FLOATS: the 5x5 kernel runs its edge code); rows of 41 and 60
# (at stride 2: 19 to 30 output pixels, the AVX-512 stride-2 pair steps)
DW_CASES = [(shape, stride, pad, k)
            for k in (3, 5)
            for shape in [(1, 32, 112, 112), (2, 16, 9, 7), (1, 24, 12, 13), (1, 8, 3, 3), (1, 8, 1, 5),
                          (2, 16, 6, 11), (1, 8, 4, 2), (2, 16, 4, 4), (1, 8, 2, 2), (1, 16, 8, 5), (1, 8, 5, 5),
                          (1, 8, 6, 230), (2, 16, 7, 41), (1, 8, 6, 60)]
            for stride in (1, 2) for pad in range(k // 2 + 1)
            if shape[2] + 2 * pad >= k and shape[3] + 2 * pad >= k]


@pytest.mark.parametrize("shape,stride,pad,k", DW_CASES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("act,bias,residual", [(None, False, False), ("clip", True, False), ("relu", True, True)])
def test_depthwise_matches_reference(rng, shape, stride, pad, k, act, bias, residual):
    n, c, h, w = shape
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    r = rng.standard_normal((n, c, ho, wo)).astype(np.float32) if residual else None
    want = epilogue64(conv_nd(x, wt, stride=stride, pads_begin=pad, pads_end=pad, groups=c), b, r, act)
    outs = [run_dw(x, wt, b, r, stride, pad, act, t) for t in TWO]
    check_parity(outs[0], want, "nchwc depthwise", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def run_stem(x, w, bias, stride, pads_begin, pads_end, dilation, act, threads, alpha=0.0, beta=6.0, padded=True,
             nchw_out=False):
    """padded: with the scratch for the zero-padded input copy (as plans run
    it), else the tiles on the padding gather their inputs; nchw_out: the
    launch writes NCHW itself (from its phase-split copy)."""
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    ho = (h + pads_begin[0] + pads_end[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + pads_begin[1] + pads_end[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.full(n * m * ho * wo, np.nan, np.float32)
    nscratch = _nchwc.stem_scratch_floats(n, c, h, wd, pads_begin, pads_end, stride[1], nchw_out)
    scratch = np.full(nscratch, np.nan, np.float32) if padded and nscratch else None
    launch = _nchwc.NchwcStemLaunch(x.reshape(-1), _nchwc.pack_1x1_weight(w.reshape(m, -1)), bias, y, n, c, h, wd,
                                    m, (kh, kw), stride, pads_begin, pads_end, dilation, act, alpha, beta, threads,
                                    scratch, nchw_out)
    launch.execute(threads)
    if nchw_out:
        return y.reshape(n, m, ho, wo)
    return _nchwc.from_blocked(y.reshape(n, m // 8, ho, wo, 8))


# (n, C, H, W, M, kernel, stride, pads_begin, pads_end, dilation): MobileNet's
# stem, a 7x7 stride-2 one, asymmetric padding, dilation, one input channel,
# M % 16 == 8, rows shorter than a tile
STEMS = [(1, 3, 64, 64, 32, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
         (2, 3, 23, 29, 24, (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),
         (1, 1, 28, 28, 32, (5, 5), (1, 1), (2, 2), (2, 2), (1, 1)),
         (2, 4, 9, 10, 8, (3, 3), (1, 1), (0, 1), (2, 0), (2, 2)),
         # 8 output channels: tiles of up to 12 pixels (EfficientNetV2's stem)
         (2, 3, 64, 61, 8, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
         (1, 7, 5, 3, 40, (3, 2), (1, 2), (1, 1), (1, 1), (1, 1)),
         # rows of 112 and 59 output pixels (several tiles of 48, 16-pixel
         # vectors with a tail), column stride 3 and dilation, no padding;
         # rows of 419 (NCHW output: chunks of 192 pixels, x read in place)
         (1, 3, 30, 229, 16, (7, 7), (2, 2), (3, 3), (2, 3), (1, 1)),
         (2, 2, 11, 185, 8, (3, 4), (1, 3), (0, 0), (0, 0), (2, 2)),
         (1, 2, 5, 421, 16, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1)),
         # 72 output channels: the AVX-512 four-panel tile and an 8-wide panel
         (2, 3, 19, 23, 72, (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),
         # input channels that are no whole blocks but more than one:
         # SqueezeNet's fire-9 expand (12 -> 48 on 3x3 planes), a strided 20
         # -> 24, and 56 x 3x3 = 504 taps, close to STEM_MAX_TAPS
         (3, 12, 3, 3, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (2, 20, 15, 13, 24, (3, 3), (2, 2), (1, 1), (0, 1), (1, 1)),
         (1, 56, 9, 9, 16, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         # 16 output channels (one AVX-512 panel: tiles of up to 12 pixels),
         # SqueezeNet's 4 -> 16 3x3 expand on rows of 15
         (8, 4, 15, 15, 16, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))]


@pytest.mark.parametrize("case", STEMS, ids=lambda c: "x".join(map(str, c[:5])))
@pytest.mark.parametrize("act,bias", [(None, False), ("clip", True), ("relu", True)])
def test_stem_matches_reference(rng, case, act, bias):
    n, c, h, w, m, k, st, pb, pe, d = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, *k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    want = epilogue64(conv_nd(x, wt, stride=st, pads_begin=pb, pads_end=pe, dilation=d), b, None, act)
    # the padded copy and the gathering tiles give the same bits
    outs = [run_stem(x, wt, b, st, pb, pe, d, act, t) for t in TWO] + [run_stem(x, wt, b, st, pb, pe, d, act, 1,
                                                                                padded=False)]
    check_parity(outs[0], want, "nchwc stem", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    # NCHW output: the blocked stem's bits, reordered
    for t in TWO:
        np.testing.assert_array_equal(run_stem(x, wt, b, st, pb, pe, d, act, t, nchw_out=True), outs[0])


def run_dense(x, w, bias, res, stride, pads_begin, pads_end, dilation, act, threads, alpha=0.0, beta=6.0,
              groups=1):
    n, c, h, wd = x.shape
    m, _, kh, kw = w.shape
    ho = (h + pads_begin[0] + pads_end[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + pads_begin[1] + pads_end[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.full(n * m * ho * wo, np.nan, np.float32)
    nscratch = _nchwc.dense_scratch_floats(n, c, h, wd, pads_begin, pads_end, (kh, kw), stride, dilation, groups,
                                           threads)
    scratch = np.full(nscratch, np.nan, np.float32) if nscratch else None
    launch = _nchwc.NchwcDenseLaunch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.pack_dense_weight(w, groups), bias,
        None if res is None else _nchwc.to_blocked(res).reshape(-1), y, scratch, n, c, h, wd, m, (kh, kw), stride,
        pads_begin, pads_end, dilation, act, alpha, beta, threads, groups)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, m // 8, ho, wo, 8))


# (n, C, H, W, M, kernel, stride, pads_begin, pads_end, dilation): ResNet's
# 7x7-plane 3x3, its strided 3x3 and 1x1 (no padding: read in place), K over
# one K block, asymmetric padding, dilation, tiles across rows of 3 pixels
DENSE = [(1, 64, 7, 7, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         # a half panel (8 output channels, alone or after a full one):
         # tiles of up to 12 pixels, across output rows
         (2, 8, 32, 32, 8, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (1, 24, 16, 15, 24, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (2, 32, 14, 13, 24, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
         (1, 48, 9, 9, 32, (1, 1), (2, 2), (0, 0), (0, 0), (1, 1)),
         (1, 8, 6, 3, 8, (3, 3), (1, 1), (0, 2), (1, 0), (1, 1)),
         (2, 16, 9, 10, 40, (3, 3), (1, 2), (2, 2), (2, 2), (2, 2)),
         (1, 40, 5, 5, 16, (5, 5), (1, 1), (2, 2), (2, 2), (1, 1)),
         # one 16-channel panel alone (AVX-512: tiles of up to 12 pixels along
         # the rows, work items of whole rows), and a lone third panel at
         # column stride 2
         (1, 16, 9, 29, 16, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (2, 8, 11, 31, 48, (3, 3), (1, 2), (1, 1), (1, 1), (1, 1)),
         # two panels on rows of 30 (wide tiles of 10) and of 7, a lone panel
         # after them; rows of 20 in two items of 10 rows
         (1, 24, 8, 30, 32, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (2, 8, 11, 9, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (1, 16, 20, 20, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         # column stride 2 reads a copy split by column parity
         # (rlx_nchwc_pad_phase2): no left padding on odd and even widths,
         # left padding 2 and 3 (5x5, 7x7), asymmetric padding
         (1, 8, 9, 13, 16, (3, 3), (2, 2), (0, 0), (0, 0), (1, 1)),
         (2, 16, 8, 12, 8, (3, 3), (1, 2), (0, 0), (0, 0), (1, 1)),
         (1, 8, 11, 14, 24, (5, 5), (2, 2), (2, 2), (2, 2), (1, 1)),
         (1, 8, 13, 15, 16, (7, 7), (2, 2), (3, 3), (3, 3), (1, 1)),
         (1, 16, 7, 10, 16, (3, 3), (2, 2), (0, 2), (1, 0), (1, 1)),
         # rows longer than a work item (RLX_NCHWC_DENSE_ITEM): items that
         # end mid-row, two panels and one at stride 2
         (1, 16, 3, 270, 32, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (1, 8, 3, 541, 16, (3, 3), (1, 2), (1, 1), (1, 1), (1, 1)),
         # column stride 2: a copy split by column parity (no padding, a 1x1
         # with padding, asymmetric padding with an odd padded width, 5x5,
         # ResNet's 3x3 s2, rows of 15 in wide tiles of 8 and 7)
         (1, 16, 9, 12, 32, (3, 3), (2, 2), (0, 0), (0, 0), (1, 1)),
         (1, 16, 6, 7, 16, (1, 1), (2, 2), (1, 1), (1, 1), (1, 1)),
         (1, 24, 10, 10, 32, (3, 3), (2, 2), (0, 1), (1, 0), (1, 1)),
         (1, 8, 12, 15, 16, (5, 5), (2, 2), (2, 2), (2, 2), (1, 1)),
         (1, 64, 16, 16, 64, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
         (2, 16, 9, 30, 32, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
         # strided 1x1s run as a subsampled copy and the 1x1 kernel
         (2, 24, 11, 8, 40, (1, 1), (2, 1), (0, 0), (0, 0), (1, 1)),
         (1, 264, 7, 7, 24, (1, 1), (3, 2), (0, 0), (0, 0), (1, 1)),
         # tiles in rows that reach into the padding skip its taps: 4x4 (K
         # blocks of 32 tap blocks end inside an input block's 9), 2x6 (no
         # row reads every tap), 2x2 (rows too narrow to skip), rows that
         # read only padding (their taps all run), dilation, row stride 2
         # over K blocks of 272 channels, taps of one column, column stride
         # 2 on the parity-split copy
         (2, 64, 4, 4, 64, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (3, 64, 2, 6, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (3, 64, 2, 2, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
         (1, 16, 3, 5, 16, (3, 3), (1, 1), (3, 1), (4, 1), (1, 1)),
         (1, 16, 6, 6, 32, (3, 3), (1, 1), (2, 2), (2, 2), (2, 2)),
         (1, 272, 5, 5, 32, (3, 3), (2, 1), (1, 1), (1, 1), (1, 1)),
         (2, 24, 5, 6, 16, (3, 1), (1, 1), (1, 0), (1, 0), (1, 1)),
         (1, 32, 4, 8, 48, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1))]


@pytest.mark.parametrize("case", DENSE, ids=lambda c: "x".join(map(str, c[:5])) + f"k{c[5][0]}s{c[6][0]}")
@pytest.mark.parametrize("act,bias,residual", [(None, False, False), ("clip", True, False), ("relu", True, True)])
def test_dense_matches_reference(rng, case, act, bias, residual):
    n, c, h, w, m, k, st, pb, pe, d = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, *k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    ref = conv_nd(x, wt, stride=st, pads_begin=pb, pads_end=pe, dilation=d)
    r = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    want = epilogue64(ref, b, r, act)
    outs = [run_dense(x, wt, b, r, st, pb, pe, d, act, t) for t in TWO]
    check_parity(outs[0], want, "nchwc dense", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# (n, C, H, W, M, kernel, stride, pads_begin, pads_end, dilation) of convs
# that copy their input: padded, split by column parity, subsampled
DENSE_COPIES = [(3, 64, 2, 6, 48, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
                (3, 16, 9, 30, 32, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
                (3, 24, 11, 8, 40, (1, 1), (2, 1), (0, 0), (0, 0), (1, 1))]


def _dense_copy_case(rng, case, n):
    """n images of a DENSE_COPIES case: x, weight, bias, residual, the
    float64 reference with bias + residual + ReLU, and one image's copy
    floats."""
    _, c, h, w, m, k, st, pb, pe, d = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, *k)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref = conv_nd(x, wt, stride=st, pads_begin=pb, pads_end=pe, dilation=d)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    return x, wt, b, r, epilogue64(ref, b, r, "relu"), _nchwc.dense_scratch_floats(1, c, h, w, pb, pe, k, st, d)


@pytest.mark.parametrize("case", DENSE_COPIES, ids=["padded", "phases", "subsampled"])
@pytest.mark.parametrize("group", [1, 2])
def test_dense_copies_and_computes_image_groups(rng, monkeypatch, case, group):
    """With a copy budget of `group` images the scratch holds that many
    images' copies, and the conv (bias, residual, 1 and 2 threads) gives the
    whole-batch copy's bits."""
    n, c, h, w, m, k, st, pb, pe, d = case
    x, wt, b, r, want, per_image = _dense_copy_case(rng, case, n)
    whole = run_dense(x, wt, b, r, st, pb, pe, d, "relu", 1)
    assert _nchwc.dense_scratch_floats(n, c, h, w, pb, pe, k, st, d) == n * per_image
    monkeypatch.setattr(_nchwc, "DENSE_COPY_FLOATS", group * per_image)
    assert _nchwc.dense_copy_images(n, per_image) == group
    assert _nchwc.dense_scratch_floats(n, c, h, w, pb, pe, k, st, d) == group * per_image
    check_parity(whole, want, "nchwc dense", tol=TOL)
    for t in TWO:
        np.testing.assert_array_equal(run_dense(x, wt, b, r, st, pb, pe, d, "relu", t), whole)


@pytest.mark.parametrize("case", DENSE_COPIES, ids=["padded", "phases", "subsampled"])
@pytest.mark.parametrize("n", [2, 5])
def test_dense_gives_each_thread_whole_images(rng, case, n):
    """With at least one image per thread, each thread copies and computes
    whole images in its own slot of the scratch (the scratch holds one copy
    per thread); 5 images on 2 threads run 2 each alone, the fifth shared.
    The bits are the one-thread run's, with bias, residual and ReLU."""
    _, c, h, w, m, k, st, pb, pe, d = case
    x, wt, b, r, want, per_image = _dense_copy_case(rng, case, n)
    copies = _nchwc.dense_copy_images(n, per_image)
    assert not _nchwc.dense_images_per_thread(n, 1) and _nchwc.dense_images_per_thread(n, 2)
    assert not _nchwc.dense_images_per_thread(1, 2)
    assert _nchwc.dense_scratch_floats(n, c, h, w, pb, pe, k, st, d, 1, 1) == copies * per_image
    assert _nchwc.dense_scratch_floats(n, c, h, w, pb, pe, k, st, d, 1, 2) == max(copies, 2) * per_image
    one = run_dense(x, wt, b, r, st, pb, pe, d, "relu", 1)
    check_parity(one, want, "nchwc dense", tol=TOL)
    for t in (2, 3):
        np.testing.assert_array_equal(run_dense(x, wt, b, r, st, pb, pe, d, "relu", t), one)


def test_dense_scratch_too_small_for_a_copy_per_thread_is_refused(rng):
    """A launch bound for 2 threads over 2 images needs a copy per thread: a
    scratch of one image's copy (the copy budget holds one of these) is
    refused at bind time, naming it."""
    n, c, h, w, m = 2, 16, 96, 96, 32
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
    one = _nchwc.dense_scratch_floats(n, c, h, w, (1, 1), (1, 1), (3, 3), (2, 2), (1, 1), 1, 1)
    assert one == _nchwc.dense_scratch_floats(1, c, h, w, (1, 1), (1, 1), (3, 3), (2, 2), (1, 1))
    assert _nchwc.dense_scratch_floats(n, c, h, w, (1, 1), (1, 1), (3, 3), (2, 2), (1, 1), 1, 2) > one
    y = np.empty(n * m * 48 * 48, np.float32)
    with pytest.raises(ValueError, match="scratch"):
        _nchwc.NchwcDenseLaunch(_nchwc.to_blocked(x).reshape(-1), _nchwc.pack_dense_weight(wt, 1), None, None, y,
                                np.empty(one, np.float32), n, c, h, w, m, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1),
                                None, 0.0, 6.0, 2, 1)


def run_wino(x, w, bias, res, pads_begin, pads_end, act, threads, tile, alpha=0.0, beta=6.0):
    n, c, h, wd = x.shape
    m = w.shape[0]
    ho, wo = h + pads_begin[0] + pads_end[0] - 2, wd + pads_begin[1] + pads_end[1] - 2
    y = np.full(n * m * ho * wo, np.nan, np.float32)
    scratch = np.full(_nchwc.winograd_scratch_floats(n, c, h, wd, m, pads_begin, pads_end, tile, threads), np.nan,
                      np.float32)
    launch = _nchwc.NchwcWinogradLaunch(
        _nchwc.to_blocked(x).reshape(-1), _nchwc.winograd_pack_u(w, tile), bias,
        None if res is None else _nchwc.to_blocked(res).reshape(-1), y, scratch, n, c, h, wd, m, pads_begin, pads_end,
        tile, act, alpha, beta, threads)
    launch.execute(threads)
    return _nchwc.from_blocked(y.reshape(n, m // 8, ho, wo, 8))


# (n, C, H, W, M, pads_begin, pads_end) of blocked Winograd: planes that are
# no multiple of the tile (clipped edge tiles), a 2x2 plane, asymmetric and
# zero padding, a half panel (M = 24), one chunk split into panel groups on
# 2 threads (256 -> 256 at 14x14), several chunks (3 images at 30x30), more
# than one pass of 64 output channels (M = 136), K over 256 channels
WINO = [(1, 16, 14, 14, 32, (1, 1), (1, 1)), (2, 64, 7, 7, 48, (1, 1), (1, 1)), (1, 8, 9, 13, 24, (0, 2), (1, 0)),
        (3, 32, 30, 30, 64, (1, 1), (1, 1)), (1, 256, 14, 14, 256, (1, 1), (1, 1)), (2, 16, 2, 2, 16, (1, 1), (1, 1)),
        (1, 24, 11, 6, 136, (1, 1), (1, 1)), (1, 264, 5, 9, 40, (0, 0), (0, 0)), (5, 16, 3, 5, 16, (2, 1), (1, 2))]


@pytest.mark.parametrize("case", WINO, ids=lambda c: "x".join(map(str, c[:5])) + f"p{c[5][0]}{c[5][1]}{c[6][0]}{c[6][1]}")
@pytest.mark.parametrize("tile", (2, 4))
@pytest.mark.parametrize("act,bias,residual", [(None, False, False), ("clip", True, False), ("relu", True, True)])
def test_blocked_winograd_matches_reference(rng, case, tile, act, bias, residual):
    # F(4x4)'s float32 error grows with C (its transforms' coefficients
    # reach 5 and 8); measured up to 1.1e-5 of the result's magnitude at
    # C = 256, inside the bound of the GEMM paths
    n, c, h, w, m, pb, pe = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((m, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32) if bias else None
    ref = conv_nd(x, wt, pads_begin=pb, pads_end=pe)
    r = rng.standard_normal(ref.shape).astype(np.float32) if residual else None
    want = epilogue64(ref, b, r, act)
    outs = [run_wino(x, wt, b, r, pb, pe, act, t, tile) for t in TWO]
    check_parity(outs[0], want, f"nchwc winograd F({tile}x{tile})", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def test_blocked_winograd_keeps_the_documented_finite_range():
    # the worst-case sign pattern of test_winograd_f4 (|V_00| = 100 max|x|):
    # F(4x4) on the blocked layout is finite and exact just inside
    # max|x| <= FLT_MAX / 100 and overflows just outside, as the NCHW F(4x4)
    from rlx_cpu.algorithms import WINOGRAD_F4_MAX_ABS_INPUT
    row = np.array([1.0, 0.0, -1.0, 0.0, 1.0, 0.0])
    w = np.zeros((8, 8, 3, 3), np.float32)
    w[:, :, 1, 1] = 1e-3
    for amp, finite in ((0.99 * WINOGRAD_F4_MAX_ABS_INPUT, True), (1.01 * WINOGRAD_F4_MAX_ABS_INPUT, False)):
        x = np.broadcast_to(np.outer(row, row) * amp, (1, 8, 6, 6)).astype(np.float32)
        want = conv_nd(x.astype(np.float64), w.astype(np.float64))
        got = run_wino(x, w, None, None, (0, 0), (0, 0), None, 1, 4)
        assert np.isfinite(want).all() and np.isfinite(got).all() == finite
        if finite:
            check_parity(got, want, "nchwc winograd F(4x4) at the range's edge", tol=TOL)


def test_blocked_winograd_rule():
    # which tile the blocked Winograd kernel runs (0: another kernel)
    import dataclasses
    from rlx_cpu.ops.blocked import blocked_winograd_tile
    from rlx_cpu.ops.conv import ConvAttrs
    a = ConvAttrs((3, 3), (1, 1), (1, 1), (1, 1), (1, 1), 1)
    assert blocked_winograd_tile(64, 64, (1, 64, 56, 56), a, simd=2) == 4
    assert blocked_winograd_tile(256, 256, (1, 256, 14, 14), a, simd=2) == 2       # 16 tiles, U of 9.4 MB
    assert blocked_winograd_tile(256, 256, (2, 256, 14, 14), a, simd=1) == 4       # 32 tiles
    # on the AVX2 level from 16 tiles, whatever U's size; a 7x7 plane (4 tiles) stays F(2x2)
    assert blocked_winograd_tile(256, 256, (1, 256, 14, 14), a, simd=1) == 4
    assert blocked_winograd_tile(384, 384, (1, 384, 13, 13), a, simd=1) == 4
    assert blocked_winograd_tile(256, 256, (1, 256, 12, 12), a, simd=1) == 2       # 9 tiles, U of 9.4 MB
    assert blocked_winograd_tile(512, 512, (1, 512, 7, 7), a, simd=1) == 2
    assert blocked_winograd_tile(64, 64, (1, 64, 8, 8), a, simd=2) == 4            # U of 0.6 MB
    assert blocked_winograd_tile(512, 512, (1, 512, 4, 4), a, simd=2) == 2
    assert blocked_winograd_tile(256, 256, (1, 256, 2, 2), a, simd=2) == 0         # one 2x2 tile
    assert blocked_winograd_tile(64, 64, (8, 64, 2, 2), a, simd=2) == 2            # 4x4 tiles, 3/4 padding
    assert blocked_winograd_tile(64, 64, (8, 64, 4, 4), a, simd=2) == 4
    assert blocked_winograd_tile(8, 64, (1, 64, 56, 56), a, simd=2) == 0
    assert blocked_winograd_tile(64, 8, (1, 8, 56, 56), a, simd=2) == 0
    assert blocked_winograd_tile(64, 64, (1, 64, 56, 56), a, simd=0) == 0          # the portable level: direct
    for change in ({"kernel": (5, 5)}, {"stride": (2, 2)}, {"dilation": (2, 2)}, {"groups": 2}):
        assert blocked_winograd_tile(64, 64, (1, 64, 56, 56), dataclasses.replace(a, **change), simd=2) == 0, change


def test_full_tap_rows():
    # (h, h_out, kh, sh, dh, pt) -> the output rows whose taps all read the input
    assert _nchwc._full_tap_rows(4, 4, 3, 1, 1, 1) == (1, 3)
    assert _nchwc._full_tap_rows(2, 2, 3, 1, 1, 1) == (2, 2)
    assert _nchwc._full_tap_rows(7, 4, 3, 2, 1, 1) == (1, 3)
    assert _nchwc._full_tap_rows(6, 6, 3, 1, 2, 2) == (2, 4)
    assert _nchwc._full_tap_rows(3, 8, 3, 1, 1, 3) == (3, 4)


def test_rows_in_the_padding_skip_its_taps(rng):
    # an infinite weight in the kernel's top row: the output rows whose top
    # tap reads padding skip that tap and stay finite (0 * inf would be NaN),
    # the others read it from the input
    assert _nchwc.ROW_TAPS_MIN_WIDTH <= 4
    x = rng.standard_normal((1, 16, 4, 4)).astype(np.float32)
    wt = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    wt[:, :, 0, :] = np.inf
    y = run_dense(x, wt, None, None, (1, 1), (1, 1), (1, 1), (1, 1), None, 1)
    finite = wt.copy()
    finite[:, :, 0, :] = 0.0
    check_parity(y[:, :, :1], conv_nd(x, finite, pads_begin=(1, 1), pads_end=(1, 1))[:, :, :1], "top row", tol=TOL)
    assert not np.isfinite(y[:, :, 1:]).any()


# (n, C, H, W, M, groups, stride, dilation): RegNet's group width 8 (panels
# of 8 output channels per group), width 16, width 24 (a 16 + 8 panel pair
# per group), ResNeXt's 32 groups of 8 at stride 2, dilation
GROUPED = [(1, 16, 9, 9, 16, 2, (1, 1), (1, 1)), (2, 32, 7, 6, 32, 2, (1, 1), (1, 1)),
           (1, 48, 8, 8, 48, 2, (1, 1), (1, 1)), (1, 256, 8, 8, 256, 32, (2, 2), (1, 1)),
           (1, 32, 9, 9, 64, 4, (1, 1), (2, 2)),
           # RegNet's 8 channels per group at stride 2 on rows of 25 (AVX2:
           # work items of whole rows, tiles within them)
           (2, 16, 50, 49, 16, 2, (2, 2), (1, 1)),
           # RegNetX-400MF's 16 per group: one panel per conv group
           (1, 160, 14, 14, 160, 10, (1, 1), (1, 1))]


@pytest.mark.parametrize("case", GROUPED, ids=lambda c: f"C{c[1]}M{c[4]}g{c[5]}s{c[6][0]}d{c[7][0]}")
def test_grouped_dense_matches_reference(rng, case):
    n, c, h, w, m, groups, st, d = case
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, c // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    ref = conv_nd(x, wt, stride=st, pads_begin=d, pads_end=d, dilation=d, groups=groups)
    r = rng.standard_normal(ref.shape).astype(np.float32)
    want = epilogue64(ref, b, r, "relu")
    outs = [run_dense(x, wt, b, r, st, d, d, d, "relu", t, groups=groups) for t in TWO]
    check_parity(outs[0], want, "nchwc grouped dense", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# every activation the blocked kernels fuse (ACTS), with the alpha / beta the
# graph passes give them (leaky_relu's slope, hard_swish's 1/6 and 1/2)
ACT_CASES = [("leaky_relu", 0.1, 0.0), ("sigmoid", 0.0, 0.0), ("silu", 0.0, 0.0), ("hard_sigmoid", 0.2, 0.5),
             ("hard_swish", 1.0 / 6.0, 0.5)]


@pytest.mark.parametrize("act,alpha,beta", ACT_CASES, ids=[c[0] for c in ACT_CASES])
@pytest.mark.parametrize("kernel", ["1x1", "depthwise", "dense", "stem"])
def test_every_fused_activation_in_every_kernel(rng, kernel, act, alpha, beta):
    from rlx_cpu.ops import blocked
    assert act in blocked.ACTS
    n, c, h, w, m = 2, 16, 9, 7, 24
    # a bias of +-100 on some channels drives sigmoid into its clamped tails
    b = (rng.standard_normal(m) * np.where(np.arange(m) % 5 == 0, 100.0, 1.0)).astype(np.float32)
    if kernel == "1x1":
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c, 1, 1)).astype(np.float32)
        r = rng.standard_normal((n, m, h, w)).astype(np.float32)
        want = epilogue64(conv_nd(x, wt), b, r, act, alpha, beta)
        outs = [run_1x1(x, wt, b, r, act, t, alpha, beta) for t in TWO]
    elif kernel == "depthwise":
        x = rng.standard_normal((n, m, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, 1, 3, 3)).astype(np.float32)
        r = rng.standard_normal((n, m, 5, 4)).astype(np.float32)
        want = epilogue64(conv_nd(x, wt, stride=2, pads_begin=1, pads_end=1, groups=m), b, r, act, alpha, beta)
        outs = [run_dw(x, wt, b, r, 2, 1, act, t, alpha, beta) for t in TWO]
    elif kernel == "dense":
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        r = rng.standard_normal((n, m, h, w)).astype(np.float32)
        want = epilogue64(conv_nd(x, wt, pads_begin=1, pads_end=1), b, r, act, alpha, beta)
        outs = [run_dense(x, wt, b, r, (1, 1), (1, 1), (1, 1), (1, 1), act, t, alpha, beta) for t in TWO]
    else:
        x = rng.standard_normal((n, 3, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, 3, 3, 3)).astype(np.float32)
        want = epilogue64(conv_nd(x, wt, stride=2, pads_begin=1, pads_end=1), b, None, act, alpha, beta)
        outs = [run_stem(x, wt, b, (2, 2), (1, 1), (1, 1), (1, 1), act, t, alpha, beta) for t in TWO]
    check_parity(outs[0], want, f"nchwc {kernel} {act}", tol=TOL)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


def run_pool(x, kind, kernel, stride, pads_begin, pads_end, dilation, ceil_mode, threads, count_include_pad=True,
             divisor_override=0):
    n, c, h, w = x.shape
    ho, wo = (pool_out_size(size, k, s, pb, pe, d, ceil_mode)
              for size, k, s, pb, pe, d in zip((h, w), kernel, stride, pads_begin, pads_end, dilation))
    y = np.full(n * c * ho * wo, np.nan, np.float32)
    _nchwc.NchwcPoolLaunch(_nchwc.to_blocked(x).reshape(-1), y, n, c, h, w, ho, wo, kernel, stride, pads_begin,
                           pads_end, dilation, kind, count_include_pad, divisor_override, threads).execute(threads)
    return _nchwc.from_blocked(y.reshape(n, c // 8, ho, wo, 8))


# (shape, kernel, stride, pads_begin, pads_end, dilation, ceil_mode): ResNet's
# k3 s2 p1, VGG's k2 s2, k3 s1 p1, ceil-mode partial windows, asymmetric
# padding, dilation, a 1-pixel plane
POOLS = [((1, 16, 13, 11), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), False),
         ((2, 8, 8, 8), (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), False),
         ((1, 24, 7, 9), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
         ((1, 8, 10, 9), (3, 3), (2, 2), (0, 0), (0, 0), (1, 1), True),
         ((1, 8, 9, 9), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True),
         ((2, 16, 6, 7), (3, 2), (2, 1), (0, 1), (1, 0), (1, 1), False),
         ((1, 8, 7, 7), (2, 2), (1, 1), (0, 0), (0, 0), (2, 2), False),
         ((1, 8, 1, 1), (1, 1), (1, 1), (0, 0), (0, 0), (1, 1), False)]


@pytest.mark.parametrize("case", POOLS, ids=lambda c: "x".join(map(str, c[0])) + f"k{c[1][0]}{c[1][1]}s{c[2][0]}"
                         + ("ceil" if c[6] else ""))
def test_pools_match_reference(rng, case):
    shape, k, st, pb, pe, d, ceil = case
    x = rng.standard_normal(shape).astype(np.float32)
    xm = x.copy()
    if shape == (1, 24, 7, 9):
        xm.reshape(-1)[::7] = np.nan                                       # NaN wins a max window
    want, _ = max_pool_nd(xm, k, st, pb, pe, d, ceil)
    for t in TWO:
        np.testing.assert_array_equal(run_pool(xm, "max", k, st, pb, pe, d, ceil, t),
                                      want.astype(np.float32))            # a max is exact
    for include_pad, override in [(True, 0), (False, 0), (True, 5)]:
        want = avg_pool_nd(x, k, st, pb, pe, d, ceil, include_pad, override or None)
        outs = [run_pool(x, "avg", k, st, pb, pe, d, ceil, t, include_pad, override) for t in TWO]
        check_parity(outs[0], want, "nchwc avg pool", tol=1e-6)
        for o in outs[1:]:
            np.testing.assert_array_equal(o, outs[0])      # the thread count changes no bit


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="needs OpenMP threads")
@pytest.mark.parametrize("shape", [(1, 24, 90, 90), (2, 40, 61, 61)])
def test_pool_thread_ranges_that_end_inside_an_output_row(rng, shape):
    # a launch splits its items (output rows x blocks, counted row after row)
    # into one range per thread and runs each range block after block down
    # the block's rows: at 2 and 3 threads these shapes (outputs large enough
    # to use threads) split ranges in the middle of a row of blocks, and in
    # the middle of the second image; a NaN in every 11th input of a plane
    x = rng.standard_normal(shape).astype(np.float32)
    x[0, 8, ::11, ::11] = np.nan
    k, st, p = (3, 3), (2, 2), (1, 1)
    want, _ = max_pool_nd(x, k, st, p, p, (1, 1), False)
    want_avg = avg_pool_nd(x, k, st, p, p, (1, 1), False, False, None)
    for t in (1, 2, 3):
        np.testing.assert_array_equal(run_pool(x, "max", k, st, p, p, (1, 1), False, t), want.astype(np.float32))
        got = run_pool(x, "avg", k, st, p, p, (1, 1), False, t, False, 0)
        nan = np.isnan(want_avg)
        np.testing.assert_array_equal(np.isnan(got), nan)
        check_parity(np.where(nan, 0, got), np.where(nan, 0, want_avg), "nchwc avg pool", tol=1e-6)


@pytest.mark.parametrize("shape", [(2, 16, 5, 7), (1, 8, 1, 1), (1, 64, 56, 56)])
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_global_pools_match_reference(rng, shape, kind):
    x = rng.standard_normal(shape).astype(np.float32) + 3.0
    n, c = shape[:2]
    p = int(np.prod(shape[2:]))
    outs = []
    for t in TWO:
        y = np.full(n * c, np.nan, np.float32)
        _nchwc.NchwcGlobalPoolLaunch(_nchwc.to_blocked(x).reshape(-1), y, n, c, p, kind, t).execute(t)
        outs.append(y.reshape(n, c, 1, 1))
    want = global_pool(x, kind)
    if kind == "max":
        np.testing.assert_array_equal(outs[0], want.astype(np.float32))
    else:
        check_parity(outs[0], want, "nchwc global avg pool", tol=1e-6)
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])


# pixel counts around the blocked global average's float blocks (64 pixels,
# 4 accumulators, a tail of 1-3)
GSUM_PIXELS = [1, 2, 3, 4, 5, 49, 63, 64, 65, 130, 196, 3136]


def gsum_planes(rng, pixels):
    """[1, 16, 1, pixels]: plain channels; channel 1 offset and large; channel
    2 with FLT_MAX at pixels 0 and 4 of its last block (one float accumulator
    overflows where the double sum does not) and at pixel 1 (the fold
    overflows); channel 3 with +inf."""
    x = rng.standard_normal((1, 16, 1, pixels)).astype(np.float32)
    x[0, 1] = x[0, 1] * 1000 + 5
    start = (pixels - 1) // 64 * 64
    x[0, 2, 0, [i for i in (start, start + 1, start + 4) if i < pixels]] = np.finfo(np.float32).max
    x[0, 3, 0, pixels // 2] = np.inf
    return x


def run_global_avg(x, threads):
    n, c = x.shape[:2]
    y = np.full(n * c, np.nan, np.float32)
    _nchwc.NchwcGlobalPoolLaunch(_nchwc.to_blocked(x).reshape(-1), y, n, c, int(np.prod(x.shape[2:])), "avg",
                                 threads).execute(threads)
    return y


@pytest.mark.parametrize("pixels", GSUM_PIXELS)
def test_global_avg_blocks_tails_and_overflow(rng, pixels):
    # float sums: the error is bounded relative to the summed magnitudes
    # (mean |x|), not to the mean itself, which may cancel towards 0
    x = gsum_planes(rng, pixels)
    x64 = x.astype(np.float64).reshape(16, pixels)
    want, scale = x64.mean(axis=1), np.abs(x64).mean(axis=1)
    for t in TWO:
        y = run_global_avg(x, t)
        assert y[3] == np.inf
        fin = np.arange(16) != 3
        assert np.isfinite(y[fin]).all(), y             # channel 2 overflows float sums only
        assert np.all(np.abs(y[fin] - want[fin]) <= 1e-6 * scale[fin]), (y, want)


def run_channel(x, g, op, x_first, threads):
    """Blocked x (op) g with g [N or 1, C, 1, 1] through ChannelBinaryLaunch,
    back in NCHW."""
    n, c = x.shape[:2]
    p = int(np.prod(x.shape[2:]))
    y = np.full(x.size, np.nan, np.float32)
    _elementwise.ChannelBinaryLaunch(CHANNEL_BINARY_CODES[op], _nchwc.to_blocked(x).reshape(-1), g.reshape(-1), y, n,
                                     c, p, g.shape[0], x_first, threads).execute(threads)
    return _nchwc.from_blocked(y.reshape((n, c // 8) + x.shape[2:] + (8,)))


CHANNEL_NP = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}


@pytest.mark.parametrize("shape", [(2, 16, 5, 7), (1, 8, 1, 1), (3, 24, 29, 31), (1, 40, 2, 300)])
@pytest.mark.parametrize("op", sorted(CHANNEL_NP))
@pytest.mark.parametrize("x_first", [True, False])
@pytest.mark.parametrize("per_image", [True, False])
def test_channel_binary_matches_reference(rng, shape, op, x_first, per_image):
    # several 512-pixel runs per block with a partial last one (29x31, 2x300),
    # odd pixel counts (the two-pixel loop's tail), one block, several images
    n, c = shape[:2]
    x = rng.standard_normal(shape).astype(np.float32)
    g = (rng.standard_normal((n if per_image else 1, c, 1, 1)) + 0.1).astype(np.float32)
    # a float32 +, -, * or / is the float64 result rounded once, exactly
    a, b = (x.astype(np.float64), g.astype(np.float64)) if x_first else (g.astype(np.float64), x.astype(np.float64))
    want = CHANNEL_NP[op](a, b).astype(np.float32)
    for t in TWO:
        np.testing.assert_array_equal(run_channel(x, g, op, x_first, t), want)


@pytest.mark.parametrize("shape", [(2, 16, 5, 7), (1, 8, 1, 1), (3, 24, 29, 31)])
@pytest.mark.parametrize("relu", [False, True])
def test_channel_affine_matches_reference(rng, shape, relu):
    # inference batch norm on the blocked layout: x * k + b, the multiply
    # rounded before the add, as numpy's float32 and the NCHW kernel do;
    # with relu, then the relu kernel's select (v <= 0 ? +0 : v, NaN kept)
    n, c = shape[:2]
    p = int(np.prod(shape[2:]))
    x = rng.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::13] = np.nan
    k = rng.standard_normal(c).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    k[0], b[0] = 0.0, -0.0            # channel 0: -0 or +0 before the relu
    want = x * k.reshape(1, c, 1, 1) + b.reshape(1, c, 1, 1)
    if relu:
        want = np.where(want <= 0, np.float32(0), want)
    op = _elementwise.BINARY_AFFINE_RELU if relu else _elementwise.BINARY_AFFINE
    for t in TWO:
        y = np.full(x.size, 7.0, np.float32)
        _elementwise.ChannelBinaryLaunch(op, _nchwc.to_blocked(x).reshape(-1), k, y, n, c, p, 1, True, t,
                                         b).execute(t)
        got = _nchwc.from_blocked(y.reshape((n, c // 8) + shape[2:] + (8,)))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        # bit for bit: the signs of zeros too
        np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


AFFINE_BITS_SCRIPT = r"""
import io, sys, numpy as np
from rlx_cpu import _elementwise
rng = np.random.default_rng(3)
n, c, p = 2, 24, 29 * 31
x = (rng.standard_normal(n * c * p) * 3).astype(np.float32)
x[::13] = np.nan
k, b = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
k[0], b[0] = 0.0, -0.0
outs = []
for op in (_elementwise.BINARY_AFFINE, _elementwise.BINARY_AFFINE_RELU):
    y = np.full(x.size, 7.0, np.float32)
    _elementwise.ChannelBinaryLaunch(op, x, k, y, n, c, p, 1, True, 2, b).execute(2)
    outs.append(y)
buf = io.BytesIO()
np.save(buf, np.concatenate(outs))
sys.stdout.buffer.write(buf.getvalue())
"""


def test_channel_affine_gives_the_same_bits_on_every_simd_level():
    """The blocked batch norm with and without its fused relu: the portable
    variant (RLX_SIMD=baseline) and the native one agree bit for bit, signed
    zeros included, and on where the NaNs are."""
    from conftest import script_array
    base = script_array(AFFINE_BITS_SCRIPT, RLX_SIMD="baseline")
    here = script_array(AFFINE_BITS_SCRIPT)
    assert base.dtype == np.float32 and base.size == 2 * 2 * 24 * 29 * 31
    nan = np.isnan(base)
    assert np.array_equal(nan, np.isnan(here)) and nan.sum() >= 2 * (2 * 24 * 29 * 31 // 13)
    assert np.array_equal(base[~nan].view(np.uint32), here[~nan].view(np.uint32))


def test_channel_binary_writes_in_place(rng):
    x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
    g = rng.standard_normal((2, 16)).astype(np.float32)
    xb = _nchwc.to_blocked(x).reshape(-1)
    _elementwise.ChannelBinaryLaunch(CHANNEL_BINARY_CODES["mul"], xb, g.reshape(-1), xb, 2, 16, 81, 2, True,
                                     2).execute(2)
    np.testing.assert_array_equal(_nchwc.from_blocked(xb.reshape(2, 2, 9, 9, 8)), x * g.reshape(2, 16, 1, 1))


def test_channel_binary_launch_refuses_bad_geometry():
    f = np.zeros(64, np.float32)
    with pytest.raises(ValueError, match=r"ChannelBinaryLaunch: unknown op code 7"):
        _elementwise.ChannelBinaryLaunch(7, f, f[:8], f, 1, 8, 8, 1, True, 1)
    with pytest.raises(ValueError, match=r"channels a positive multiple of 8, got n=1, c=12, pixels=4"):
        _elementwise.ChannelBinaryLaunch(0, f[:48], f[:12], f[:48], 1, 12, 4, 1, True, 1)
    with pytest.raises(ValueError, match=r"must have 1 or n=2 rows, got 3"):
        _elementwise.ChannelBinaryLaunch(0, f, f[:24], f, 2, 8, 4, 3, True, 1)
    with pytest.raises(ValueError, match=r"x and y must hold n\*c\*pixels = 64 floats, got 64 and 63"):
        _elementwise.ChannelBinaryLaunch(0, f, f[:8], f[:63], 1, 8, 8, 1, True, 1)
    with pytest.raises(ValueError, match=r"the per-channel operand must hold 16 floats, got 8"):
        _elementwise.ChannelBinaryLaunch(0, f, f[:8], f, 2, 8, 4, 2, True, 1)
    affine = _elementwise.BINARY_AFFINE
    with pytest.raises(ValueError, match=r"the affine op \(and it alone\) takes a shift.*got op 4, shift None"):
        _elementwise.ChannelBinaryLaunch(affine, f, f[:8], f, 1, 8, 8, 1, True, 1)
    with pytest.raises(ValueError, match=r"the affine op \(and it alone\) takes a shift.*got op 5, shift None"):
        _elementwise.ChannelBinaryLaunch(_elementwise.BINARY_AFFINE_RELU, f, f[:8], f, 1, 8, 8, 1, True, 1)
    with pytest.raises(ValueError, match=r"the shift must hold 8 floats, got 4"):
        _elementwise.ChannelBinaryLaunch(_elementwise.BINARY_AFFINE_RELU, f, f[:8], f, 1, 8, 8, 1, True, 1, f[:4])
    with pytest.raises(ValueError, match=r"got op 2, shift given, 1 rows"):
        _elementwise.ChannelBinaryLaunch(2, f, f[:8], f, 1, 8, 8, 1, True, 1, f[:8])
    with pytest.raises(ValueError, match=r"got op 4, shift given, 2 rows"):
        _elementwise.ChannelBinaryLaunch(affine, f, f[:16], f, 2, 8, 4, 2, True, 1, f[:8])
    with pytest.raises(ValueError, match=r"the shift must hold 8 floats, got 7"):
        _elementwise.ChannelBinaryLaunch(affine, f, f[:8], f, 1, 8, 8, 1, True, 1, f[:7])


def test_pool_launches_refuse_bad_geometry():
    f = np.zeros(4096, np.float32)
    with pytest.raises(ValueError, match=r"max_pool2d_nchwc: output h 0 has no input pixel in its window "
                                         r"\(input 4, kernel 2, stride 2, padding 2, dilation 1\)"):
        _nchwc.NchwcPoolLaunch(f, f, 1, 8, 4, 4, 4, 3, (2, 2), (2, 2), (2, 0), (2, 0), (1, 1), "max")
    with pytest.raises(ValueError, match=r"avg_pool2d_nchwc: y holds 4096 floats, needs 8192"):
        _nchwc.NchwcPoolLaunch(np.zeros(8192, np.float32), f, 1, 8, 32, 32, 32, 32, (3, 3), (1, 1), (1, 1), (1, 1),
                               (1, 1), "avg")
    with pytest.raises(ValueError, match=r"max_pool2d_nchwc: channels must be a positive multiple of 8"):
        _nchwc.NchwcPoolLaunch(f, f, 1, 4, 4, 4, 2, 2, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), "max")
    with pytest.raises(ValueError, match=r"pool2d_nchwc: kind must be 'max' or 'avg', got 'lp'"):
        _nchwc.NchwcPoolLaunch(f, f, 1, 8, 4, 4, 2, 2, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), "lp")
    with pytest.raises(ValueError, match=r"global_avg_pool_nchwc: x holds 4096 floats, needs 8192"):
        _nchwc.NchwcGlobalPoolLaunch(f, f, 2, 64, 64, "avg")


@pytest.mark.parametrize("shape", [(1, 8, 1, 1), (2, 16, 5, 3), (1, 32, 17, 16), (3, 24, 8, 8)])
def test_reorders_are_exact_and_inverse(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    n, c = shape[:2]
    p = int(np.prod(shape[2:]))
    xb = np.empty(x.size, np.float32)
    _nchwc.NchwcReorderLaunch(x.reshape(-1), xb, n, c, p, True).execute(2)
    np.testing.assert_array_equal(xb, _nchwc.to_blocked(x).reshape(-1))
    back = np.empty(x.size, np.float32)
    _nchwc.NchwcReorderLaunch(xb, back, n, c, p, False).execute(2)
    np.testing.assert_array_equal(back.reshape(shape), x)


PORTABLE_SCRIPT = r"""
import sys
import numpy as np
from rlx_cpu import _elementwise, _nchwc
from test_blocked import run_1x1, run_channel, run_dense, run_dw, run_pool, run_stem
rng = np.random.default_rng(3)
outs = []
for (n, k, m, h, w) in [(1, 272, 24, 7, 9), (2, 16, 32, 5, 5)]:
    x = rng.standard_normal((n, k, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, k, 1, 1)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    r = rng.standard_normal((n, m, h, w)).astype(np.float32)
    outs.append(run_1x1(x, wt, b, r, "clip", 1))
    # the deferred epilogue of the sigmoid and SiLU (16 lanes where AVX-512 is
    # there), the clamped tails included
    for act in ("silu", "sigmoid"):
        outs.append(run_1x1(x, wt, b * 40, r, act, 1))
for (stride, pad, k) in [(1, 1, 3), (2, 1, 3), (2, 0, 3), (1, 2, 5), (2, 2, 5), (2, 1, 5)]:
    x = rng.standard_normal((2, 16, 13, 11)).astype(np.float32)
    wt = rng.standard_normal((16, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    outs.append(run_dw(x, wt, b, None, stride, pad, "relu", 1))
# small planes: rows of edge pixels only, run four at a time
for (h, w, stride) in [(4, 4, 1), (4, 4, 2), (2, 2, 1), (8, 5, 2)]:
    x = rng.standard_normal((2, 16, h, w)).astype(np.float32)
    wt = rng.standard_normal((16, 1, 3, 3)).astype(np.float32)
    r = rng.standard_normal((2, 16, (h - 1) // stride + 1, (w - 1) // stride + 1)).astype(np.float32)
    outs.append(run_dw(x, wt, rng.standard_normal(16).astype(np.float32), r, stride, 1, "silu", 1))
# rows of 16-pixel steps (5x5 at stride 1 on rows of 14 pixels and more:
# two pixels per zmm where AVX-512 is there), a last step of 8, 4 or 2 pairs
# (37: 5 pixels, 26: 10, 19: 3) and masked last pixels, with residual and SiLU
for (w, k, pad) in [(37, 3, 1), (37, 5, 2), (21, 3, 1), (12, 5, 2), (30, 3, 0), (26, 5, 2), (19, 5, 2), (14, 5, 2)]:
    x = rng.standard_normal((1, 16, 6, w)).astype(np.float32)
    wt = rng.standard_normal((16, 1, k, k)).astype(np.float32)
    wo = w + 2 * pad - k + 1
    r = rng.standard_normal((1, 16, 6 + 2 * pad - k + 1, wo)).astype(np.float32)
    outs.append(run_dw(x, wt, rng.standard_normal(16).astype(np.float32), r, 1, pad, "silu", 1))
    outs.append(run_dw(x, wt, None, None, 1, pad, "clip", 1))
# 5x5 at stride 2 on rows of 14 output pixels and more (two pixels per zmm
# from four column-parity copies where AVX-512 is there): whole 16-pixel
# steps (31 -> 16), a last step of 8 pairs (59 -> 30), 4 (41 -> 21) or 2
# (35 -> 18), paddings 0 to 2, odd and even rows
for (h, w, pad) in [(7, 31, 2), (8, 59, 2), (5, 41, 2), (6, 35, 2), (9, 34, 1), (6, 33, 0)]:
    x = rng.standard_normal((1, 16, h, w)).astype(np.float32)
    wt = rng.standard_normal((16, 1, 5, 5)).astype(np.float32)
    ho, wo = (h + 2 * pad - 5) // 2 + 1, (w + 2 * pad - 5) // 2 + 1
    r = rng.standard_normal((1, 16, ho, wo)).astype(np.float32)
    outs.append(run_dw(x, wt, rng.standard_normal(16).astype(np.float32), r, 2, pad, "silu", 1))
    outs.append(run_dw(x, wt, None, None, 2, pad, "clip", 1))
# two blocks at once on AVX-512 (5x5 on rows of up to 14 pixels, 3x3 at
# stride 1 on rows of up to 8; 24 channels: a pair and a block alone)
for (h, w, k, stride, pad) in [(13, 13, 5, 2, 2), (9, 28, 5, 2, 1), (4, 4, 5, 2, 2), (7, 7, 3, 1, 1), (8, 8, 3, 1, 0),
                               (5, 6, 3, 1, 1), (9, 14, 5, 1, 2)]:
    x = rng.standard_normal((2, 24, h, w)).astype(np.float32)
    wt = rng.standard_normal((24, 1, k, k)).astype(np.float32)
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    r = rng.standard_normal((2, 24, ho, wo)).astype(np.float32)
    outs.append(run_dw(x, wt, rng.standard_normal(24).astype(np.float32), r, stride, pad, "silu", 1))
    outs.append(run_dw(x, wt, None, None, stride, pad, "relu", 1))
# 5x5 at stride 1 on small planes (rows of 8 pixels and fewer), odd and
# even row counts
for (h, w) in [(7, 7), (7, 8), (6, 5), (3, 4), (1, 2)]:
    x = rng.standard_normal((2, 16, h, w)).astype(np.float32)
    wt = rng.standard_normal((16, 1, 5, 5)).astype(np.float32)
    r = rng.standard_normal((2, 16, h, w)).astype(np.float32)
    outs.append(run_dw(x, wt, rng.standard_normal(16).astype(np.float32), r, 1, 2, "silu", 1))
    outs.append(run_dw(x, wt, None, None, 1, 2, "relu", 1))
x = rng.standard_normal((2, 3, 19, 17)).astype(np.float32)
wt = rng.standard_normal((24, 3, 3, 3)).astype(np.float32)
b = rng.standard_normal(24).astype(np.float32)
outs.append(run_stem(x, wt, b, (2, 2), (1, 1), (1, 1), (1, 1), "clip", 1))
outs.append(run_stem(x, wt, b, (2, 2), (1, 1), (1, 1), (1, 1), "clip", 1, padded=False))
x = rng.standard_normal((1, 16, 9, 7)).astype(np.float32)
wt = rng.standard_normal((24, 16, 3, 3)).astype(np.float32)
outs.append(run_dense(x, wt, rng.standard_normal(24).astype(np.float32), rng.standard_normal((1, 24, 5, 4)).astype(
    np.float32), (2, 2), (1, 1), (1, 1), (1, 1), "relu", 1))
# the other activations (sigmoid's clamped tails included), a grouped conv
b = (rng.standard_normal(24) * 40).astype(np.float32)
for act, alpha, beta in [("silu", 0.0, 0.0), ("sigmoid", 0.0, 0.0), ("hard_swish", 1 / 6, 0.5),
                         ("leaky_relu", 0.1, 0.0)]:
    outs.append(run_dense(x, wt, b, None, (1, 1), (1, 1), (1, 1), (1, 1), act, 1, alpha, beta))
x = rng.standard_normal((1, 48, 6, 7)).astype(np.float32)
outs.append(run_dense(x, rng.standard_normal((48, 24, 3, 3)).astype(np.float32), None, None, (1, 1), (1, 1), (1, 1),
                      (1, 1), "silu", 1, groups=2))
# the per-channel binary op (squeeze-excitation's gate), both operand orders
x = rng.standard_normal((2, 16, 9, 11)).astype(np.float32)
for op, x_first in [("mul", True), ("sub", False), ("div", False), ("add", True)]:
    outs.append(run_channel(x, rng.standard_normal((2, 16, 1, 1)).astype(np.float32) + 0.1, op, x_first, 1))
y = np.empty(x.size, np.float32)
_elementwise.ChannelBinaryLaunch(_elementwise.BINARY_AFFINE, _nchwc.to_blocked(x).reshape(-1),
                                 rng.standard_normal(16).astype(np.float32), y, 2, 16, 99, 1, True, 1,
                                 rng.standard_normal(16).astype(np.float32)).execute(1)
outs.append(y)
# pools (a NaN in a max window) and global pools
x = rng.standard_normal((2, 16, 9, 11)).astype(np.float32)
x[0, 3, 4, 4] = np.nan
for kind in ("max", "avg"):
    outs.append(run_pool(x, kind, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), True, 1, False))
    y = np.empty(32, np.float32)
    _nchwc.NchwcGlobalPoolLaunch(_nchwc.to_blocked(x).reshape(-1), y, 2, 16, 99, kind, 1).execute(1)
    outs.append(y)
# the fused inverted residual block, with and without its expand conv
from test_inverted_residual import block_case, run_ir
for (c, e, m, h, w, s, expand, residual) in [(16, 48, 16, 11, 9, 1, True, True), (16, 16, 24, 9, 8, 2, False, False)]:
    ops = block_case(rng, 2, c, e, m, h, w, expand=expand, residual=residual)
    for band in (1, 3):
        outs.append(run_ir(*ops, s, 1, band=band))
# the transposed conv by output phases
from test_blocked_transpose import case, run_launch, volume_case
x, wt, b = case(rng, 2, 16, 5, 7, 24, (3, 3))
outs.append(run_launch(x, wt, b, (10, 14), (2, 2), (1, 1), 1))
x, wt, b = volume_case(rng, 1, 16, (3, 4, 5), 24, (4, 3, 3))
outs.append(run_launch(x, wt, b, (6, 8, 10), (2, 2, 2), (1, 1, 1), 1))
# the 3-D dense conv
import test_blocked_conv3d as c3
x, wt, b = c3.case(rng, 2, 16, 4, 5, 6, 32, (3, 3, 3), groups=2)
outs.append(c3.run_launch(x, wt, b, (1, 2, 1), (1, 1, 1), (1, 0, 1), (1, 1, 1), 2, 1))
# 32 output channels and more: the AVX-512 level's two-panel tiles (one
# panel left over at 40 and 48), the 1x1 conv's four-panel tiles (80: one
# left over), K blocks of the 1x1 conv carried through y
for (n, k, m, h, w) in [(1, 272, 40, 7, 9), (2, 16, 48, 5, 5), (1, 32, 32, 3, 13), (1, 264, 80, 20, 26),
                        (1, 264, 128, 16, 20)]:
    x = rng.standard_normal((n, k, h, w)).astype(np.float32)
    wt = rng.standard_normal((m, k, 1, 1)).astype(np.float32)
    r = rng.standard_normal((n, m, h, w)).astype(np.float32)
    outs.append(run_1x1(x, wt, rng.standard_normal(m).astype(np.float32), r, "relu", 1))
    outs.append(run_1x1(x, wt, None, None, None, 1))
x = rng.standard_normal((1, 16, 9, 7)).astype(np.float32)
for m, stride in [(40, (1, 1)), (32, (2, 2)), (48, (2, 1))]:
    wt = rng.standard_normal((m, 16, 3, 3)).astype(np.float32)
    ho, wo = (9 + 2 - 3) // stride[0] + 1, (7 + 2 - 3) // stride[1] + 1
    outs.append(run_dense(x, wt, rng.standard_normal(m).astype(np.float32),
                          rng.standard_normal((1, m, ho, wo)).astype(np.float32), stride, (1, 1), (1, 1), (1, 1),
                          "relu", 1))
# panels on rows of 7 and more pixels: the AVX-512 wide tiles (one panel at
# column stride 1 and 2, two at 1; items that end mid-row)
x = rng.standard_normal((1, 16, 9, 29)).astype(np.float32)
for m, stride in [(16, (1, 1)), (48, (1, 2)), (16, (2, 2)), (48, (1, 1))]:
    wt = rng.standard_normal((m, 16, 3, 3)).astype(np.float32)
    ho, wo = (9 + 2 - 3) // stride[0] + 1, (29 + 2 - 3) // stride[1] + 1
    outs.append(run_dense(x, wt, rng.standard_normal(m).astype(np.float32),
                          rng.standard_normal((1, m, ho, wo)).astype(np.float32), stride, (1, 1), (1, 1), (1, 1),
                          "clip", 1))
x = rng.standard_normal((2, 64, 4, 4)).astype(np.float32)
outs.append(run_dense(x, rng.standard_normal((48, 64, 3, 3)).astype(np.float32), None,
                      rng.standard_normal((2, 48, 4, 4)).astype(np.float32), (1, 1), (1, 1), (1, 1), (1, 1), "relu", 1))
x = rng.standard_normal((1, 64, 6, 7)).astype(np.float32)
outs.append(run_dense(x, rng.standard_normal((64, 32, 3, 3)).astype(np.float32), None, None, (1, 1), (1, 1), (1, 1),
                      (1, 1), "hard_swish", 1, 1 / 6, 0.5, groups=2))
x = rng.standard_normal((2, 3, 19, 17)).astype(np.float32)
wt = rng.standard_normal((40, 3, 3, 3)).astype(np.float32)
outs.append(run_stem(x, wt, rng.standard_normal(40).astype(np.float32), (2, 2), (1, 1), (1, 1), (1, 1), "silu", 1))
w8 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
outs.append(run_stem(x, w8, rng.standard_normal(8).astype(np.float32), (1, 1), (1, 1), (1, 1), (1, 1), "silu", 1))
w16 = rng.standard_normal((16, 3, 3, 3)).astype(np.float32)
outs.append(run_stem(x, w16, rng.standard_normal(16).astype(np.float32), (1, 1), (1, 1), (1, 1), (1, 1), "relu", 1))
w72 = rng.standard_normal((72, 3, 7, 7)).astype(np.float32)
outs.append(run_stem(x, w72, rng.standard_normal(72).astype(np.float32), (2, 2), (3, 3), (3, 3), (1, 1), "relu", 1))
# the stem writing NCHW (AVX-512 tiles of 1 to 3 vectors with a tail)
for wd in (17, 45, 100):
    x = rng.standard_normal((1, 3, 9, wd)).astype(np.float32)
    outs.append(run_stem(x, wt, rng.standard_normal(40).astype(np.float32), (1, 2), (1, 1), (1, 1), (1, 1),
                         "hard_swish", 1, 1 / 6, 0.5, nchw_out=True))
ops = block_case(rng, 1, 16, 48, 32, 9, 8, expand=True, residual=False)
outs.append(run_ir(*ops, 1, 1, band=2))
# blocked Winograd: a half panel (40), two passes with four-panel tiles
# (136), clipped edge tiles, the activations
from test_blocked import run_wino
for tile in (2, 4):
    for (n, c, h, w, m, act) in [(2, 16, 9, 7, 40, "relu"), (1, 24, 6, 11, 136, "silu"), (1, 8, 5, 5, 16, "clip")]:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        wt = rng.standard_normal((m, c, 3, 3)).astype(np.float32)
        r = rng.standard_normal((n, m, h, w)).astype(np.float32)
        outs.append(run_wino(x, wt, rng.standard_normal(m).astype(np.float32), r, (1, 1), (1, 1), act, 1, tile))
# blocked global averages: float blocks, tails, overflowing blocks
from test_blocked import GSUM_PIXELS, gsum_planes, run_global_avg
for pixels in GSUM_PIXELS:
    outs.append(run_global_avg(gsum_planes(rng, pixels), 2))
np.save(sys.stdout.buffer, np.concatenate([o.reshape(-1) for o in outs]))
"""


def test_portable_and_avx512_variants_give_the_avx2_bits():
    if _nchwc.simd_level() < 1:
        pytest.skip("this CPU runs the portable variant only: nothing to compare it with")
    avx2 = script_array(PORTABLE_SCRIPT, RLX_SIMD="avx2")
    np.testing.assert_array_equal(script_array(PORTABLE_SCRIPT, RLX_SIMD="baseline"), avx2)
    # on an AVX-512 CPU the default runs the two-panel AVX-512 tiles
    np.testing.assert_array_equal(script_array(PORTABLE_SCRIPT), avx2)


def test_launches_refuse_bad_geometry():
    f = np.zeros(4096, np.float32)
    with pytest.raises(ValueError, match=r"conv2d_nchwc 1x1: input channels must be a positive multiple of 8 for the blocked layout, got 12"):
        _nchwc.NchwcConv1x1Launch(f, f, None, None, f, 1, 12, 8, 4)
    with pytest.raises(ValueError, match=r"conv2d_nchwc 1x1: y holds 4096 floats, needs 8192"):
        _nchwc.NchwcConv1x1Launch(f, f, None, None, f, 1, 8, 16, 512)
    with pytest.raises(ValueError, match=r"conv2d_nchwc 1x1: activation must be one of"):
        _nchwc.NchwcConv1x1Launch(f, f, None, None, f, 1, 8, 8, 4, "tanh")
    with pytest.raises(ValueError, match=r"conv2d_nchwc depthwise: needs stride 1 or 2 and padding 0 to 1 for a 3x3 "
                                         r"kernel, got stride=3"):
        _nchwc.NchwcDepthwiseLaunch(f, f, None, None, f, 1, 8, 8, 8, 3, 1, 1)
    with pytest.raises(ValueError, match=r"conv2d_nchwc depthwise: needs stride 1 or 2 and padding 0 to 2 for a 5x5 "
                                         r"kernel, got stride=1, padding=\(3, 3\)"):
        _nchwc.NchwcDepthwiseLaunch(f, f, None, None, f, 1, 8, 8, 8, 1, 3, 3, kernel=5)
    with pytest.raises(ValueError, match=r"conv2d_nchwc depthwise: needs a 3x3 or 5x5 kernel, got 7x7"):
        _nchwc.NchwcDepthwiseLaunch(f, f, None, None, f, 1, 8, 8, 8, 1, 1, 1, kernel=7)
    with pytest.raises(ValueError, match=r"conv2d_nchwc depthwise: packed weight holds 72 floats, needs 200"):
        _nchwc.NchwcDepthwiseLaunch(f, np.zeros(72, np.float32), None, None, f, 1, 8, 8, 8, 1, 2, 2, kernel=5)
    with pytest.raises(ValueError, match=r"conv2d_nchwc depthwise: residual holds 1 floats"):
        _nchwc.NchwcDepthwiseLaunch(f, f, None, np.zeros(1, np.float32), f, 1, 8, 8, 8, 1, 1, 1)
    with pytest.raises(ValueError, match=r"nchwc_reorder: channels must be a positive multiple of 8 for the blocked layout, got 3"):
        _nchwc.NchwcReorderLaunch(f, f, 1, 3, 16, True)
    with pytest.raises(ValueError, match=r"conv2d_nchwc stem: needs 1..512 taps \(input channels x kernel\), "
                                         r"got 12 x 7x7"):
        _nchwc.NchwcStemLaunch(f, f, None, f, 1, 12, 8, 8, 8, (7, 7), (1, 1), (3, 3), (3, 3), (1, 1))
    with pytest.raises(ValueError, match=r"conv2d_nchwc dense: scratch holds 4096 floats, needs 4624"):
        _nchwc.NchwcDenseLaunch(f, f, None, None, f, f, 1, 16, 15, 15, 8, (3, 3), (1, 1), (1, 1), (1, 1), (1, 1))
    with pytest.raises(ValueError, match=r"conv2d_nchwc dense: input channels per group must be a positive multiple "
                                         r"of 8 for the blocked layout, got 4"):
        _nchwc.NchwcDenseLaunch(f, f, None, None, f, None, 1, 16, 4, 4, 16, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1),
                                groups=4)
    with pytest.raises(ValueError, match=r"conv2d_nchwc dense: 16 input and 24 output channels do not split into 5 "
                                         r"groups"):
        _nchwc.NchwcDenseLaunch(f, f, None, None, f, None, 1, 16, 4, 4, 24, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1),
                                groups=5)
    with pytest.raises(ValueError, match=r"pack_dense_weight: input channels must be a positive multiple of 8"):
        _nchwc.pack_dense_weight(np.zeros((8, 6, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"conv2d_nchwc stem: empty output"):
        _nchwc.NchwcStemLaunch(f, f, None, f, 1, 3, 2, 2, 8, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1))
    with pytest.raises(ValueError, match=r"pack_depthwise_weight: weight must be \[C, 1, 3, 3\] or \[C, 1, 5, 5\]"):
        _nchwc.pack_depthwise_weight(np.zeros((8, 1, 7, 7), np.float32))
    # blocked Winograd: channels, tile, an empty output, short buffers
    with pytest.raises(ValueError, match=r"conv2d_nchwc winograd: input channels must be a positive multiple of 8"):
        _nchwc.NchwcWinogradLaunch(f, f, None, None, f, f, 1, 12, 8, 8, 8, (1, 1), (1, 1), 4)
    with pytest.raises(ValueError, match=r"conv2d_nchwc winograd: the output tile must be 2 or 4, got 6"):
        _nchwc.NchwcWinogradLaunch(f, f, None, None, f, f, 1, 8, 8, 8, 8, (1, 1), (1, 1), 6)
    with pytest.raises(ValueError, match=r"conv2d_nchwc winograd: need at least one image and one output pixel"):
        _nchwc.NchwcWinogradLaunch(f, f, None, None, f, f, 1, 8, 1, 1, 8, (0, 0), (0, 0), 2)
    u = _nchwc.winograd_pack_u(np.zeros((8, 8, 3, 3), np.float32), 2)
    x8 = np.zeros(8 * 8 * 8, np.float32)
    with pytest.raises(ValueError, match=r"conv2d_nchwc winograd: scratch"):
        _nchwc.NchwcWinogradLaunch(x8, u, None, None, x8.copy(), np.zeros(4, np.float32), 1, 8, 8, 8, 8, (1, 1),
                                   (1, 1), 2)
    with pytest.raises(ValueError, match=r"conv2d_nchwc winograd: packed weight"):
        _nchwc.NchwcWinogradLaunch(x8, u[:-1], None, None, x8.copy(), np.zeros(1 << 16, np.float32), 1, 8, 8, 8, 8,
                                   (1, 1), (1, 1), 2)
    with pytest.raises(ValueError, match=r"winograd_pack_u: weight must be \[M, C, 3, 3\]"):
        _nchwc.winograd_pack_u(np.zeros((8, 8, 5, 5), np.float32), 4)


# ---------------------------------------------------------------------------
# The pass
# ---------------------------------------------------------------------------

@pytest.fixture
def blocked_on(monkeypatch):
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "1")


def ops(graph):
    return [n.op for n in graph.nodes]


def inverted_residual_chain(rng, g, x, c, blocks=2):
    """MobileNetV2-like blocks (expand 1x1 + clip, depthwise 3x3 + clip,
    project 1x1 + residual)."""
    h = x
    for _ in range(blocks):
        e = g.clip(g.conv2d(h, rng.standard_normal((4 * c, c, 1, 1)) * 0.3, rng.standard_normal(4 * c)), 0.0, 6.0)
        d = g.clip(g.conv2d(e, rng.standard_normal((4 * c, 1, 3, 3)) * 0.3, rng.standard_normal(4 * c),
                            padding=1, groups=4 * c), 0.0, 6.0)
        h = g.add(g.conv2d(d, rng.standard_normal((c, 4 * c, 1, 1)) * 0.3, rng.standard_normal(c)), h)
    return h


def compile_both(g, threads=1):
    blocked = rlx_cpu.compile(g, num_threads=threads)
    plain = rlx_cpu.compile(g, num_threads=threads, passes=[p for p in passes.DEFAULT_PASSES
                                                            if p != "blocked_layout"])
    return blocked, plain


@pytest.mark.parametrize("threads", TWO)
def test_a_chain_between_nchw_ops_has_exactly_two_reorders(rng, blocked_on, threads):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 8, 10, 9))
    stem = g.tanh(g.conv2d(x, rng.standard_normal((16, 8, 3, 3)) * 0.3, padding=1))   # NCHW conv (tanh)
    h = inverted_residual_chain(rng, g, stem, 16)
    g.output(g.upsample_nearest2x(h))                                                   # NCHW op
    blocked, plain = compile_both(g, threads)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("reorder_nchwc") == 2
    assert kinds[:2] == ["conv", "reorder_nchwc"] and kinds[-2] == "reorder_nchwc"
    assert kinds[2:-2] == ["conv_nchwc_1x1", "conv_nchwc_dw", "conv_nchwc_1x1"] * 2
    assert "blocked_layout: 6 convs, 2 reorders" in repr(blocked)
    feeds = {"x": rng.standard_normal((2, 8, 10, 9)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked chain vs NCHW plan")


@pytest.mark.parametrize("threads", TWO)
def test_a_stem_starts_a_chain_without_a_reorder(rng, blocked_on, threads):
    # MobileNetV2's head: a 3-channel image, a 3x3 stride-2 conv + ReLU6, blocks
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 19, 17))
    stem = g.clip(g.conv2d(x, rng.standard_normal((16, 3, 3, 3)) * 0.3, rng.standard_normal(16), stride=2,
                           padding=1), 0.0, 6.0)
    g.output(g.global_avg_pool(inverted_residual_chain(rng, g, stem, 16)))
    blocked, plain = compile_both(g, threads)
    kinds = [t.kind for t in blocked.thunks]
    # the stem starts the chain and the global pool ends it: no reorder at all
    assert kinds[0] == "conv_nchwc_stem" and kinds[-1] == "global_pool_nchwc" and "reorder_nchwc" not in kinds
    assert "blocked_layout: 7 convs, 1 pools" in repr(blocked)
    feeds = {"x": rng.standard_normal((2, 3, 19, 17)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked stem chain vs NCHW plan")


def test_resnet_bottlenecks_at_small_planes_run_blocked(rng, blocked_on):
    # ResNet-50's last stage in small: a strided 3x3 and 1x1 downsample, then
    # 3x3 convs on a 4x4 plane -- all blocked convs
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 32, 8, 8))
    h = x
    for stride, cin in ((2, 32), (1, 64)):
        a = g.relu(g.conv2d(h, rng.standard_normal((16, cin, 1, 1)) * 0.2, rng.standard_normal(16)))
        b = g.relu(g.conv2d(a, rng.standard_normal((16, 16, 3, 3)) * 0.2, rng.standard_normal(16), stride=stride,
                            padding=1))
        c = g.conv2d(b, rng.standard_normal((64, 16, 1, 1)) * 0.2, rng.standard_normal(64))
        skip = g.conv2d(h, rng.standard_normal((64, cin, 1, 1)) * 0.2, stride=stride) if stride > 1 else h
        h = g.relu(g.add(c, skip))
    g.output(g.global_avg_pool(h))
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    # the strided 3x3 and 1x1 on the direct kernel, the 3x3 on 4x4 by Winograd
    assert kinds.count("conv_nchwc_dense") == 2 and kinds.count("conv_nchwc_winograd") == 1
    assert kinds.count("conv_nchwc_1x1") == 4
    # one reorder in; the global pool reads the blocked layout and writes [N, C, 1, 1]
    assert kinds.count("reorder_nchwc") == 1 and "conv" not in kinds and kinds[-1] == "global_pool_nchwc"
    feeds = {"x": rng.standard_normal((1, 32, 8, 8)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked bottlenecks vs NCHW plan")


@pytest.mark.parametrize("threads", TWO)
@pytest.mark.parametrize("axes,keepdims", [((2, 3), False), ((-1, -2), True)])
def test_a_spatial_reduce_mean_ends_a_chain_as_its_global_pool(rng, blocked_on, threads, axes, keepdims):
    # MNASNet's head (x.mean([2, 3]), ONNX ReduceMean) reads the blocked
    # layout as GlobalAveragePool does: no reorder back, no NCHW reduction
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 9, 7))
    h = inverted_residual_chain(rng, g, x, 16)
    g.output(g.reduce_mean(h, axes=axes, keepdims=keepdims))
    blocked, plain = compile_both(g, threads)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("reorder_nchwc") == 1 and kinds[-1] == "global_pool_nchwc" and "reduce_mean" not in kinds
    assert tuple(blocked.output_shapes[0]) == ((2, 16, 1, 1) if keepdims else (2, 16))
    feeds = {"x": rng.standard_normal((2, 16, 9, 7)).astype(np.float32)}
    y = blocked.run(feeds)[0]
    check_parity(y, plain.run(feeds)[0], "blocked reduce_mean head vs NCHW plan")
    # with the chain's output a graph output too: the mean of exactly that
    # tensor, in float64
    g.output(g.node(g.outputs[0]), h)
    blocked = rlx_cpu.compile(g, num_threads=threads)
    kinds = [t.kind for t in blocked.thunks]
    assert "global_pool_nchwc" in kinds and "reduce_mean" not in kinds
    y, hv = blocked.run(feeds)
    want = hv.astype(np.float64).mean(axis=(2, 3), keepdims=keepdims)
    assert np.max(np.abs(y - want)) <= 1e-6 * np.max(np.abs(want))


@pytest.mark.parametrize("axes", [(1,), (2,), (1, 2, 3)])
def test_other_reduce_means_stay_nchw(rng, blocked_on, axes):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 6, 6))
    g.output(g.reduce_mean(inverted_residual_chain(rng, g, x, 16), axes=axes))
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("reorder_nchwc") == 2 and kinds[-1] == "reduce_mean"
    feeds = {"x": rng.standard_normal((1, 16, 6, 6)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "reduce_mean over other axes")


def test_pools_join_chains_and_pools_with_indices_split_them(rng, blocked_on):
    # a window pool runs blocked between two chains: one chain, two reorders
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 12, 12))
    h = inverted_residual_chain(rng, g, x, 16, blocks=1)
    h = g.avg_pool2d(g.max_pool2d(h, 3, stride=2, padding=1, ceil_mode=True), 2, count_include_pad=False)
    g.output(inverted_residual_chain(rng, g, h, 16, blocks=1))
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert ops(out).count("to_nchwc") == 1 and ops(out).count("from_nchwc") == 1
    assert ops(out).count("conv2d_nchwc") == 6 and ops(out).count("pool2d_nchwc") == 2
    assert "conv2d" not in ops(out) and "max_pool2d" not in ops(out)
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 6, "transposed convs": 0, "pools": 2, "concats": 0, "pointwise": 0,
                                                   "reorders": 2})
    blocked, plain = compile_both(g)
    feeds = {"x": rng.standard_normal((1, 16, 12, 12)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked chain through pools vs NCHW plan")
    # a max pool that also returns its indices has no blocked kernel: two chains
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 12, 12))
    h = inverted_residual_chain(rng, g, x, 16, blocks=1)
    h, idx = g.max_pool2d(h, 2, return_indices=True)
    g.output(inverted_residual_chain(rng, g, h, 16, blocks=1), idx)
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert ops(out).count("to_nchwc") == 2 and ops(out).count("from_nchwc") == 2
    assert "pool2d_nchwc" not in ops(out) and ops(out).count("max_pool2d") == 1
    blocked, plain = compile_both(g)
    for got, want in zip(blocked.run(feeds), plain.run(feeds)):
        np.testing.assert_array_equal(got, want) if got.dtype == np.int64 else \
            check_parity(got, want, "two blocked chains vs NCHW plan")


def test_grouped_convs_run_blocked(rng, blocked_on):
    # RegNet's X block: 1x1, grouped 3x3 (group width 8, then stride 2), 1x1 + residual
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 10, 10))
    h = x
    for stride in (1, 2):
        a = g.relu(g.conv2d(h, rng.standard_normal((32, 16, 1, 1)) * 0.3, rng.standard_normal(32)))
        b = g.relu(g.conv2d(a, rng.standard_normal((32, 8, 3, 3)) * 0.3, rng.standard_normal(32), stride=stride,
                            padding=1, groups=4))
        c = g.conv2d(b, rng.standard_normal((16, 32, 1, 1)) * 0.3, rng.standard_normal(16))
        h = g.relu(g.add(c, h)) if stride == 1 else g.relu(c)
    g.output(h)
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("conv_nchwc_dense") == 2 and kinds.count("conv_nchwc_1x1") == 4 and "conv" not in kinds
    assert [t.groups for t in blocked.thunks if t.kind == "conv_nchwc_dense"] == [4, 4]
    feeds = {"x": rng.standard_normal((1, 16, 10, 10)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked grouped convs vs NCHW plan")


def test_channel_concats_run_blocked(rng, blocked_on):
    # SqueezeNet's fire modules: squeeze 1x1, expand 1x1 and 3x3, concat; then
    # a U-Net skip: the concat with a (blocked) transposed conv's output
    def fire(g, h, cin, s, e):
        q = g.relu(g.conv2d(h, rng.standard_normal((s, cin, 1, 1)) * 0.3, rng.standard_normal(s)))
        a = g.relu(g.conv2d(q, rng.standard_normal((e, s, 1, 1)) * 0.3, rng.standard_normal(e)))
        b = g.relu(g.conv2d(q, rng.standard_normal((e, s, 3, 3)) * 0.3, rng.standard_normal(e), padding=1))
        return g.concat([a, b], axis=1)

    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 8, 8))
    h = fire(g, fire(g, x, 16, 8, 16), 32, 8, 16)
    up = g.conv_transpose2d(g.max_pool2d(h, 2), rng.standard_normal((32, 8, 2, 2)) * 0.3, stride=2)
    g.output(g.concat([h, up], axis=1))
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 6, "transposed convs": 1, "pools": 1, "concats": 3,
                                                   "pointwise": 0, "reorders": 2})
    # in: x; out: the graph output (the pool and the transposed conv run blocked)
    assert ops(out).count("to_nchwc") == 1 and ops(out).count("from_nchwc") == 1
    assert ops(out).count("conv_transpose2d_nchwc") == 1 and "conv_transpose2d" not in ops(out)
    blocked, plain = compile_both(g)
    feeds = {"x": rng.standard_normal((2, 16, 8, 8)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked concats vs NCHW plan")


def test_conv1d_chains_and_elementwise_ops_run_blocked(rng, blocked_on):
    # HiFi-GAN's residual stack in small: leaky_relu -> dilated conv1d ->
    # leaky_relu -> conv1d -> + x, twice, then / 2: the convs run as blocked
    # 2-D convs over [N, C/8, 1, L, 8], the activations, the adds and the
    # division by a scalar on the blocked values as they are
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 37))
    h = x
    for d in (1, 3):
        t = g.conv1d(g.leaky_relu(h, 0.1), rng.standard_normal((16, 16, 3)) * 0.3, rng.standard_normal(16),
                     dilation=d, padding=d)
        t = g.conv1d(g.leaky_relu(t, 0.1), rng.standard_normal((16, 16, 5)) * 0.3, rng.standard_normal(16), padding=2)
        h = g.add(h, t)
    g.output(g.div(h, g.constant(np.float32(2.0))))
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("conv_nchwc_dense") == 4 and "conv" not in kinds
    # one reorder in (x), one out (the output)
    assert kinds.count("reorder_nchwc") == 2 and kinds[0] == "reorder_nchwc" and kinds[-1] == "reorder_nchwc"
    assert "leaky_relu" in kinds and "div" in kinds
    feeds = {"x": rng.standard_normal((2, 16, 37)).astype(np.float32)}
    got = blocked.run(feeds)[0]
    assert got.shape == (2, 16, 37)
    check_parity(got, plain.run(feeds)[0], "blocked conv1d chain vs NCHW plan")


@pytest.mark.parametrize("threads", TWO)
def test_squeeze_excitation_gates_stay_in_the_chain(rng, blocked_on, threads):
    # squeeze-excitation's x * s with s [N, C, 1, 1] from a global pool and
    # two small NCHW convs: the global pool's output is both layouts, so the
    # mul reads the gate by block and the chain goes on through it (in
    # place); so do the other per-channel operands, on either side
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 6, 6))
    h = inverted_residual_chain(rng, g, x, 16, blocks=1)
    s = g.sigmoid(g.conv2d(g.relu(g.conv2d(g.global_avg_pool(h), rng.standard_normal((8, 16, 1, 1)) * 0.3)),
                           rng.standard_normal((16, 8, 1, 1)) * 0.3))
    h = g.mul(h, s)
    h = g.conv2d(h, rng.standard_normal((16, 16, 1, 1)) * 0.3)
    h = g.sub(s, h)                                                       # gate first
    h = g.div(h, g.broadcast_add(s, g.constant(np.float32(1.0))))         # a gate computed from the gate
    h = g.broadcast_add(h, g.constant(rng.standard_normal((16, 1, 1)).astype(np.float32)))   # [C, 1, 1]
    h = g.mul(g.constant((rng.standard_normal((1, 16, 1, 1)) + 2).astype(np.float32)), h)
    g.output(g.conv2d(h, rng.standard_normal((16, 16, 1, 1)) * 0.3))
    out = passes.blocked_layout(passes.fuse_epilogue(g), threads)
    chans = [n for n in out.nodes if n.op == "channel_binary_nchwc"]
    assert [(n.attrs.op, n.attrs.x_first) for n in chans] == [("mul", True), ("sub", False), ("div", True),
                                                               ("add", True), ("mul", False)]
    for n in chans:
        assert len(n.shape) == 5 and len(out.node(n.inputs[1]).shape) in (3, 4)
    # in from x, out to the output: the gates need no reorder
    assert ops(out).count("to_nchwc") == 1 and ops(out).count("from_nchwc") == 1
    blocked, plain = compile_both(g, threads)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds.count("channel_binary_nchwc") == 5 and kinds.count("reorder_nchwc") == 2
    # what stays NCHW is the gate's own s + 1
    assert not {"mul", "sub", "div"} & set(kinds) and kinds.count("broadcast_add") == 1
    # each channel op is its input's last reader: it writes over it
    assert all(t.y == t.x for t in blocked.thunks if t.kind == "channel_binary_nchwc")
    feeds = {"x": rng.standard_normal((2, 16, 6, 6)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked SE block vs NCHW plan")


@pytest.mark.parametrize("threads", TWO)
def test_densenet_batch_norms_stay_in_the_chain(rng, blocked_on, threads):
    # DenseNet's layer: concat -> batch norm -> relu -> 1x1 -> relu -> 3x3,
    # concatenated on; the batch norm after a concat has no conv to fold
    # into, and runs on the blocked values as they are
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 9, 9))
    h = g.relu(g.conv2d(x, rng.standard_normal((16, 16, 3, 3)) * 0.3, padding=1))
    feats = [h]
    for _ in range(3):
        cat = g.concat(feats, axis=1) if len(feats) > 1 else feats[0]
        c = sum(f.shape[1] for f in feats)
        stats = [rng.standard_normal(c).astype(np.float32) for _ in range(3)] + [
            (rng.random(c) + 0.5).astype(np.float32)]
        t = g.relu(g.batch_norm(cat, *(g.constant(s) for s in stats)))
        t = g.relu(g.conv2d(t, rng.standard_normal((32, c, 1, 1)) * 0.3))
        feats.append(g.conv2d(t, rng.standard_normal((8, 32, 3, 3)) * 0.3, padding=1))
    g.output(g.global_avg_pool(g.concat(feats, axis=1)))
    out = passes.blocked_layout(passes.fuse_epilogue(passes.fold_batch_norm(g)), threads)
    assert ops(out).count("batch_norm_nchwc") == 3 and "batch_norm" not in ops(out)
    blocked, plain = compile_both(g, threads)
    kinds = [t.kind for t in blocked.thunks]
    # each norm-relu runs inside the 1x1 conv that reads it (fuse_norm_conv)
    assert "batch_norm" not in kinds and "channel_binary_nchwc" not in kinds
    assert sum(t.kind == "conv_nchwc_1x1" and t.norm_scale is not None and t.norm_relu
               for t in blocked.thunks) == 3
    feeds = {"x": rng.standard_normal((2, 16, 9, 9)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked DenseNet block vs NCHW plan")


def test_other_broadcasting_elementwise_ops_stay_nchw(rng, blocked_on):
    # an operand that varies along the plane ([1, 1, 1, W]) is no
    # per-channel one: the chain ends before the mul
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 6, 6))
    h = inverted_residual_chain(rng, g, x, 16, blocks=1)
    g.output(g.mul(h, g.constant(rng.standard_normal((1, 1, 1, 6)).astype(np.float32))))
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    mul = [n for n in out.nodes if n.op == "mul"][0]
    assert mul.shape == (1, 16, 6, 6) and out.node(mul.inputs[0]).op == "from_nchwc"
    assert "channel_binary_nchwc" not in ops(out)
    blocked, plain = compile_both(g)
    feeds = {"x": rng.standard_normal((1, 16, 6, 6)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked chain, row broadcast vs NCHW plan")


def test_a_stem_and_its_pool_run_blocked_on_their_own(rng, blocked_on):
    # ResNet's head: 7x7 s2 stem + max pool, then NCHW convs (here tanh, no
    # blocked kernel): the two run blocked with one reorder, after the pool
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 3, 32, 32))
    h = g.max_pool2d(g.relu(g.conv2d(x, rng.standard_normal((16, 3, 7, 7)) * 0.2, stride=2, padding=3)), 3,
                     stride=2, padding=1)
    g.output(g.tanh(g.conv2d(h, rng.standard_normal((16, 16, 3, 3)) * 0.2, padding=1)))
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds[:3] == ["conv_nchwc_stem", "pool_nchwc", "reorder_nchwc"] and kinds.count("reorder_nchwc") == 1
    feeds = {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked stem + pool vs NCHW plan")


def test_a_stem_of_few_taps_runs_blocked_alone(rng, blocked_on):
    # MNIST's first conv (1 channel, 3x3: 9 taps) runs the stem kernel and one
    # reorder; a 7x7 stem of 3 channels (147 taps) alone stays NCHW with the
    # AVX2 tiles and runs blocked with the AVX-512 ones.  With those, a stem
    # alone of at most 27 taps writes NCHW itself: no reorder
    assert passes.stem_alone_max_taps(1) == passes.STEM_ALONE_MAX_TAPS == 27
    assert passes.stem_alone_max_taps(0) == 27
    assert passes.stem_alone_max_taps(2) == float("inf")
    avx512 = _nchwc.simd_level() >= 2
    for (c, k, alone) in [(1, 3, True), (3, 3, True), (3, 7, avx512)]:
        g = rlx_cpu.Graph()
        x = g.input("x", (2, c, 20, 20))
        wt = rng.standard_normal((16, c, k, k)) * 0.3
        b = rng.standard_normal(16)
        g.output(g.relu(g.conv2d(x, wt, b, padding=k // 2)))
        blocked, plain = compile_both(g)
        kinds = [t.kind for t in blocked.thunks]
        nchw_out = avx512 and c * k * k <= passes.STEM_NCHW_OUT_MAX_TAPS
        lone = ["conv_nchwc_stem"] if nchw_out else ["conv_nchwc_stem", "reorder_nchwc"]
        assert (kinds == lone) == alone, (c, k, kinds)
        assert [t.nchw_out for t in blocked.thunks if t.kind == "conv_nchwc_stem"] == ([nchw_out] if alone else [])
        assert alone == (c * k * k <= passes.stem_alone_max_taps())
        feeds = {"x": rng.standard_normal((2, c, 20, 20)).astype(np.float32)}
        got = blocked.run(feeds)[0]
        check_parity(got, plain.run(feeds)[0], "lone stem vs NCHW plan")
        check_parity(got, np.maximum(conv_nd(feeds["x"], wt, b, 1, k // 2, k // 2), 0), "lone stem vs reference")


@pytest.mark.parametrize("threads", TWO)
def test_a_conv_of_channels_that_are_no_whole_blocks_runs_the_stem_kernel(rng, blocked_on, threads):
    # SqueezeNet's fire module with a 12-channel squeeze: its 3x3 expand
    # (12 -> 16) reads NCHW and runs the stem kernel, where the NCHW path
    # would be im2col; the 1x1 expand stays one NCHW GEMM, and so do the
    # 3x3 convs of 16 input channels (whole blocks) on a plane too large for
    # the dense blocked kernel alone
    avx512 = _nchwc.simd_level() >= 2
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 32, 5, 5))
    ws = [rng.standard_normal(s) / np.sqrt(np.prod(s[1:])) for s in ((12, 32, 1, 1), (16, 12, 1, 1), (16, 12, 3, 3))]
    bs = [rng.standard_normal(w.shape[0]) for w in ws]
    sq = g.relu(g.conv2d(x, ws[0], bs[0]))
    g.output(g.concat([g.relu(g.conv2d(sq, ws[1], bs[1])), g.relu(g.conv2d(sq, ws[2], bs[2], padding=1))], axis=1))
    blocked, plain = compile_both(g, threads)
    stems = [t for t in blocked.thunks if t.kind == "conv_nchwc_stem"]
    assert len(stems) == (1 if avx512 else 0), [t.kind for t in blocked.thunks]
    assert "conv" not in [t.kind for t in blocked.thunks] or not avx512
    # (a stem of 108 taps runs alone only with the AVX-512 tiles:
    # passes.stem_alone_max_taps)
    assert ops(passes.blocked_layout(passes.fuse_epilogue(g))).count("conv2d") == (2 if avx512 else 3)
    feeds = {"x": rng.standard_normal((2, 32, 5, 5)).astype(np.float32)}
    got = blocked.run(feeds)[0]
    check_parity(got, plain.run(feeds)[0], "fire module, stem-kernel expand vs NCHW plan")
    x64 = feeds["x"].astype(np.float64)
    h = np.maximum(conv_nd(x64, ws[0], bs[0], 1, 0, 0), 0)
    want = np.concatenate([np.maximum(conv_nd(h, ws[1], bs[1], 1, 0, 0), 0),
                           np.maximum(conv_nd(h, ws[2], bs[2], 1, 1, 1), 0)], axis=1)
    check_parity(got, want, "fire module, stem-kernel expand vs reference")
    # 16 input channels (whole blocks) never run it; nor a 1x1 of 12, nor a
    # 1x1 of 6 on 1x1 planes (a squeeze-and-excitation block's second conv:
    # one small GEMM in NCHW)
    for ci, k, hw in ((16, 3, 20), (12, 1, 20), (6, 1, 1)):
        g2 = rlx_cpu.Graph()
        x2 = g2.input("x", (2, ci, hw, hw))
        g2.output(g2.sigmoid(g2.conv2d(x2, rng.standard_normal((16, ci, k, k)), padding=k // 2)))
        plan = rlx_cpu.compile(g2, num_threads=threads)
        assert "conv_nchwc_stem" not in [t.kind for t in plan.thunks], (ci, k)
        xv = rng.standard_normal((2, ci, hw, hw)).astype(np.float32)
        check_parity(plan.run({"x": xv})[0], 1 / (1 + np.exp(-conv_nd(xv.astype(np.float64),
                                                                      g2.nodes[1].value, None, 1, k // 2, k // 2))),
                     "conv that runs no stem kernel vs reference")


@pytest.mark.parametrize("threads", TWO)
def test_a_lone_conv_runs_blocked_with_the_simd_tiles_where_measured_faster(rng, blocked_on, threads):
    # with the AVX-512 or AVX2 tiles, a strided 3x3 (im2col as its NCHW
    # path) runs blocked alone (two reorders), and so does a stride-1 3x3
    # that the blocked Winograd kernel takes (16 channels and more in and
    # out, 4 tiles of 2x2 and more: any plane, any batch), or else of one
    # image on a small plane (7x7 at any width, 14x14 up to 128 input
    # channels); a conv1d only with the AVX-512 tiles; a 3x3 with 8 input
    # channels on a larger plane stays NCHW, and so does all of it with the
    # portable kernels.  A grouped 3x3 with whole blocks per group (RegNet's,
    # ResNeXt's) runs blocked alone, strided or not; a grouped 1x1, or one
    # with 4 channels per group, stays NCHW.  A stride-1 1x1 runs blocked
    # alone on a plane of 7x7 to 28x28 pixels (AVX2 tiles) or 7x7 to 14x14
    # (AVX-512 tiles) into 64 channels or more; on a larger or smaller
    # plane, or into fewer channels, it stays NCHW, and so does a strided 1x1
    from rlx_cpu.ops.blocked import dense_alone
    level = _nchwc.simd_level()
    D, W, P = "conv_nchwc_dense", "conv_nchwc_winograd", "conv_nchwc_1x1"
    cases = [((1, 16, 17, 15), (24, 16, 3, 3), 2, 1, D), ((2, 16, 45), (16, 16, 5), 1, 2, D),
             ((1, 64, 30, 30), (64, 64, 3, 3), 1, 1, W), ((1, 16, 9, 9), (32, 16, 1, 1), 1, 0, None),
             ((1, 256, 7, 7), (32, 256, 3, 3), 1, 1, W), ((1, 128, 14, 14), (16, 128, 3, 3), 1, 1, W),
             ((1, 48, 14, 14), (16, 48, 3, 3), 1, 1, W), ((1, 136, 14, 14), (16, 136, 3, 3), 1, 1, W),
             ((1, 8, 15, 14), (16, 8, 3, 3), 1, 1, None), ((2, 16, 7, 7), (16, 16, 3, 3), 1, 1, W),
             ((1, 64, 2, 2), (64, 64, 3, 3), 1, 1, D), ((1, 32, 7, 7), (32, 16, 3, 3), 1, 1, D, 2),
             ((2, 48, 9, 9), (48, 8, 3, 3), 2, 1, D, 6), ((1, 48, 7, 7), (48, 16, 1, 1), 1, 0, None, 3),
             ((1, 32, 7, 7), (32, 4, 3, 3), 1, 1, None, 8),
             ((1, 16, 7, 7), (64, 16, 1, 1), 1, 0, P), ((2, 96, 28, 28), (64, 96, 1, 1), 1, 0, P),
             ((1, 64, 10, 13), (200, 64, 1, 1), 1, 0, P), ((1, 64, 6, 8), (64, 64, 1, 1), 1, 0, None),
             ((1, 64, 29, 28), (64, 64, 1, 1), 1, 0, None), ((1, 64, 14, 14), (56, 64, 1, 1), 1, 0, None),
             ((1, 64, 14, 14), (64, 64, 1, 1), 2, 0, None)]
    for xs, ws, stride, pad, kind, *groups in cases:
        groups = groups[0] if groups else 1
        alone = kind is not None and (
            (level == 1 or (level >= 2 and xs[2] * xs[3] <= 14 * 14)) if kind == P
            else level >= (2 if len(xs) == 3 else 1))
        g = rlx_cpu.Graph()
        x = g.input("x", xs)
        wt = rng.standard_normal(ws) / np.sqrt(np.prod(ws[1:]))
        b = rng.standard_normal(ws[0])
        conv = g.conv1d if len(xs) == 3 else g.conv2d
        g.output(g.relu(conv(x, wt, b, stride=stride, padding=pad, groups=groups)))
        assert dense_alone(g, [n for n in g.nodes if n.op.startswith("conv")][0], threads) == alone, xs
        blocked, plain = compile_both(g, threads)
        kinds = [t.kind for t in blocked.thunks]
        assert (kinds == ["reorder_nchwc", kind, "reorder_nchwc"]) == alone, (xs, kinds)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        got = blocked.run(feeds)[0]
        check_parity(got, plain.run(feeds)[0], "lone conv vs NCHW plan")
        want = np.maximum(conv_nd(feeds["x"], wt, b, stride, pad, pad, groups=groups), 0)
        check_parity(got, want, "lone conv vs reference")


def test_pools_alone_do_not_make_a_chain(rng, blocked_on):
    # two convs and pools between: fewer than BLOCKED_MIN_CHAIN convs, all NCHW
    # (batch 2: a small-plane 3x3 of one image would run blocked alone; 8
    # output channels: too few for the blocked Winograd kernel)
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 8, 16, 16))
    h = g.max_pool2d(g.relu(g.conv2d(x, rng.standard_normal((16, 8, 3, 3)) * 0.3, padding=1)), 2)
    h = g.max_pool2d(g.relu(g.conv2d(h, rng.standard_normal((8, 16, 3, 3)) * 0.3, padding=1)), 2)
    g.output(g.global_avg_pool(h))
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 0, "transposed convs": 0, "pools": 0, "concats": 0,
                                                   "pointwise": 0, "reorders": 0})


def test_a_vgg_stack_runs_blocked_from_stem_to_global_pool(rng, blocked_on):
    # VGG in small: every conv, pool and the global pool blocked, no reorder
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 16, 16))
    h, cin = x, 3
    for cout, pool in ((16, True), (32, True), (32, False), (32, True)):
        h = g.relu(g.conv2d(h, rng.standard_normal((cout, cin, 3, 3)) * 0.3, rng.standard_normal(cout),
                            padding=1))
        h = g.max_pool2d(h, 2) if pool else h
        cin = cout
    g.output(g.flatten(g.global_max_pool(h)))
    blocked, plain = compile_both(g)
    kinds = [t.kind for t in blocked.thunks]
    assert kinds[0] == "conv_nchwc_stem" and "reorder_nchwc" not in kinds and "conv" not in kinds
    assert kinds.count("pool_nchwc") == 3 and "global_pool_nchwc" in kinds
    feeds = {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    check_parity(blocked.run(feeds)[0], plain.run(feeds)[0], "blocked VGG stack vs NCHW plan")


def test_short_chains_and_ineligible_convs_stay_nchw(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 8, 8))
    a = g.conv2d(x, rng.standard_normal((16, 16, 1, 1)))            # 1x1 ...
    b = g.conv2d(a, rng.standard_normal((16, 1, 3, 3)), padding=1, groups=16)   # ... + dw: only 2
    c = g.conv2d(b, rng.standard_normal((12, 16, 1, 1)))            # 12 channels: no blocked kernel
    d = g.conv2d(c, rng.standard_normal((12, 12, 3, 3)), padding=1)   # a dense 3x3 to 12: none either
    e = g.tanh(g.conv2d(d, rng.standard_normal((16, 12, 1, 1))))    # tanh: not in the kernel's epilogue
    g.output(e)
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert "conv2d_nchwc" not in ops(out) and "to_nchwc" not in ops(out)
    assert out.pass_log[-1] == ("blocked_layout", {"convs": 0, "transposed convs": 0, "pools": 0, "concats": 0,
                                                   "pointwise": 0, "reorders": 0})


def test_values_read_outside_the_chain_and_outputs_are_reordered_once(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 6, 6))
    skip = g.input("skip", (1, 8, 6, 6))
    a = g.conv2d(x, rng.standard_normal((8, 8, 1, 1)), name="a")
    b = g.relu(g.conv2d(a, rng.standard_normal((8, 1, 3, 3)), padding=1, groups=8, name="b"))
    c = g.add(g.conv2d(b, rng.standard_normal((8, 8, 1, 1)), name="c"), skip)      # residual from an input
    mid = g.sigmoid(a)                                                                # an NCHW reader of a
    g.output(c, b, mid)                                                               # b: output mid-chain
    out = passes.blocked_layout(passes.fuse_epilogue(g))
    assert ops(out).count("to_nchwc") == 2          # x and skip
    froms = [n for n in out.nodes if n.op == "from_nchwc"]
    # a (read by the sigmoid), b (an output) and the last conv (an output)
    assert len(froms) == 3
    names = {out.node(i).name for i in out.outputs}
    assert "b" in names                              # an output keeps its name
    feeds = {"x": rng.standard_normal((1, 8, 6, 6)).astype(np.float32),
             "skip": rng.standard_normal((1, 8, 6, 6)).astype(np.float32)}
    blocked, plain = compile_both(g)
    assert [t.kind for t in blocked.thunks].count("reorder_nchwc") == 5
    for got, want in zip(blocked.run(feeds), plain.run(feeds)):
        check_parity(got, want, "blocked outputs vs NCHW plan")


def test_switch(rng, monkeypatch):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 6, 6))
    g.output(inverted_residual_chain(rng, g, x, 8, blocks=1))
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "0")
    assert "conv_nchwc_1x1" not in [t.kind for t in rlx_cpu.compile(g).thunks]
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "1")
    assert "conv_nchwc_1x1" in [t.kind for t in rlx_cpu.compile(g).thunks]
    # a forced conv algorithm, or the reference kernels, keep every conv NCHW
    for kw in ({"conv_algorithm": "im2col"}, {"conv_algorithm": "reference"}):
        plan = rlx_cpu.compile(g, **kw)
        assert "conv_nchwc_1x1" not in [t.kind for t in plan.thunks] and "blocked_layout" not in repr(plan)
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    assert "conv_nchwc_1x1" not in [t.kind for t in rlx_cpu.compile(g).thunks]
    monkeypatch.delenv("RLX_FAST_CONV")
    monkeypatch.setenv("RLX_BLOCKED_LAYOUT", "maybe")
    with pytest.raises(ValueError, match="RLX_BLOCKED_LAYOUT='maybe' is not a recognised value"):
        rlx_cpu.compile(g)


def check_pickled_plan_runs_from_two_threads(rng, g, shape, kind):
    """A pickled plan of graph g (input "x" of `shape`) holds a `kind` thunk
    and gives, from two threads with their own contexts, what it gives alone."""
    import pickle
    import threading
    plan = pickle.loads(pickle.dumps(rlx_cpu.compile(g, num_threads=1)))
    assert kind in [t.kind for t in plan.thunks]
    xs = [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]
    want = [plan.run({"x": v})[0] for v in xs]
    got = [None, None]

    def work(i):
        ctx = plan.new_context()
        for _ in range(20):
            got[i] = plan.run({"x": xs[i]}, context=ctx)[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(2):
        np.testing.assert_array_equal(got[i], want[i])


def test_blocked_plan_pickles_and_runs_from_two_threads(rng, blocked_on):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 8, 9, 9))
    g.output(inverted_residual_chain(rng, g, x, 8))
    check_pickled_plan_runs_from_two_threads(rng, g, (1, 8, 9, 9), "conv_nchwc_dw")


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="reads the CPU's vendor from Linux's /proc/cpuinfo")
def test_zmm_half_rate_is_amd_family_19h():
    # CPUID's answer (src/rlx_simd.h) against the kernel's reading of the
    # same registers: AMD family 19h (Zen 4 among the AVX-512 ones) runs
    # 512-bit FMAs at half rate, every other CPU is taken at full rate
    with open("/proc/cpuinfo") as f:
        info = dict(line.split(":", 1) for line in f.read().split("\n\n")[0].splitlines() if ":" in line)
    info = {k.strip(): v.strip() for k, v in info.items()}
    want = info.get("vendor_id") == "AuthenticAMD" and int(info.get("cpu family", "0")) == 0x19
    assert _nchwc.zmm_half_rate() is want, info.get("model name")


def test_dense_plane_limit_depends_on_channels_threads_and_batch(rng):
    from rlx_cpu.ops.blocked import dense_max_plane, nchwc_kind
    # the AVX2 tiles' rule (and the portable kernels')
    for simd in (0, 1):
        assert dense_max_plane(8, simd=simd) == float("inf")
        assert dense_max_plane(16, 2, 8, simd=simd) == 32 * 32
        assert dense_max_plane(32, simd=simd) == 14 * 14
        assert dense_max_plane(64, 1, simd=simd) == 64
        # more than 64 channels: 7x7 runs blocked only at 2 threads and batch 1
        assert dense_max_plane(512, 1, 1, simd=simd) == 36
        assert dense_max_plane(512, 2, 1, simd=simd) == 64
        assert dense_max_plane(512, 2, 8, simd=simd) == 36
    # the AVX-512 tiles': every plane up to 32 channels, else up to 14x14;
    # where the 512-bit FMAs run at half rate (Zen 4), up to 7x7 from 64
    # channels (Winograd F(4x4) on 14x14)
    for half in (False, True):
        for c_in, threads, batch in [(8, 1, 1), (16, 2, 8), (32, 1, 1)]:
            assert dense_max_plane(c_in, threads, batch, simd=2, half_rate=half) == float("inf")
        for c_in, threads, batch in [(40, 1, 1), (48, 2, 8)]:
            assert dense_max_plane(c_in, threads, batch, simd=2, half_rate=half) == 14 * 14
        for c_in, threads, batch in [(64, 2, 1), (512, 1, 1), (512, 2, 8)]:
            assert dense_max_plane(c_in, threads, batch, simd=2, half_rate=half) == (7 * 7 if half else 14 * 14)
    # the AVX2 tiles' rule does not look at the FMA rate
    assert dense_max_plane(512, 1, 1, simd=1, half_rate=True) == 36
    assert dense_max_plane(16, 2, 8, simd=1, half_rate=True) == 32 * 32
    avx512 = _nchwc.simd_level() >= 2
    # the plane rule through nchwc_kind, on a 3x3 that the blocked Winograd
    # kernel does not take (dilation 2), so neither does the half-rate rule
    for batch, threads, want in [(1, 2, "dense"), (1, 1, "dense" if avx512 else None),
                                 (8, 2, "dense" if avx512 else None)]:
        g = rlx_cpu.Graph()
        x = g.input("x", (batch, 128, 7, 7))
        y = g.conv2d(x, rng.standard_normal((128, 128, 3, 3)).astype(np.float32), padding=2, dilation=2)
        g.output(y)
        assert nchwc_kind(g, g.nodes[-1], threads) == want, (batch, threads)
    # with dilation 1 the blocked Winograd kernel takes it ahead of the
    # plane rule, at every batch and thread count, on either SIMD level (the
    # portable kernels have no blocked Winograd: the plane rule as above)
    portable = _nchwc.simd_level() < 1
    for batch, threads, plane_rule in [(1, 2, "dense"), (1, 1, None), (8, 2, None)]:
        g = rlx_cpu.Graph()
        x = g.input("x", (batch, 128, 7, 7))
        g.output(g.conv2d(x, rng.standard_normal((128, 128, 3, 3)).astype(np.float32), padding=1))
        assert nchwc_kind(g, g.nodes[-1], threads) == (plane_rule if portable else "dense"), (batch, threads)


def test_narrow_output_3x3_runs_blocked_on_any_plane(rng):
    # the rule alone, for every CPU: a stride-1 3x3 to 8 channels (too few
    # for the blocked Winograd kernel) from 32 or more runs blocked on any
    # plane with the AVX2 tiles only
    import dataclasses
    from rlx_cpu.ops.blocked import narrow_out_blocked, nchwc_kind
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 32, 56, 56))
    g.output(g.conv2d(x, np.ones((8, 32, 3, 3), np.float32), padding=1))
    a = g.nodes[-1].attrs
    assert narrow_out_blocked(32, 8, a, simd=1)
    assert narrow_out_blocked(128, 8, a, simd=1)
    assert not narrow_out_blocked(16, 8, a, simd=1)        # lost at batch 1, 1 thread
    assert not narrow_out_blocked(32, 16, a, simd=1)       # the blocked Winograd kernel's
    for simd in (0, 2):
        assert not narrow_out_blocked(32, 8, a, simd=simd)
    for change in (dict(stride=(2, 2)), dict(dilation=(2, 2)), dict(kernel=(5, 5)), dict(groups=2)):
        assert not narrow_out_blocked(64, 8, dataclasses.replace(a, **change), simd=1), change

    # through the layout pass and the kernels on this CPU: a chain 1x1,
    # 3x3 to 8 channels on 56x56, 1x1, against the float64 reference
    level = _nchwc.simd_level()
    w1 = (rng.standard_normal((32, 32, 1, 1)) * 0.2).astype(np.float32)
    w3 = (rng.standard_normal((8, 32, 3, 3)) * 0.2).astype(np.float32)
    b3 = rng.standard_normal(8).astype(np.float32)
    w2 = (rng.standard_normal((16, 8, 1, 1)) * 0.2).astype(np.float32)
    xv = rng.standard_normal((2, 32, 56, 56)).astype(np.float32)
    g = rlx_cpu.Graph()
    x = g.input("x", xv.shape)
    h = g.relu(g.conv2d(x, g.constant(w1)))
    h3 = g.conv2d(h, g.constant(w3), g.constant(b3), padding=1)
    g.output(g.conv2d(g.relu(h3), g.constant(w2)))
    # no rule blocks this plane on the portable level; the AVX-512 tiles
    # take every plane of 32 input channels (dense_max_plane)
    want_kind = None if level < 1 else "dense"
    assert nchwc_kind(g, h3, 2) == want_kind
    plan = rlx_cpu.compile(g, num_threads=2)
    kinds = [type(t).__name__ for t in plan.thunks]
    if want_kind:
        assert "NchwcDenseThunk" in kinds and kinds.count("ReorderNchwcThunk") == 2, kinds
    ref = np.maximum(conv_nd(xv, w1), 0)
    ref = conv_nd(np.maximum(conv_nd(ref, w3, b3, pads_begin=1, pads_end=1), 0), w2)
    check_parity(plan.run({"x": xv})[0], ref, "narrow-output 3x3 chain")


def test_half_rate_batch_rule_counts_winograd_tiles():
    # the rule alone, for every CPU: a stride-1 3x3 from 64 input channels
    # leaves the blocked kernel for Winograd F(4x4) when the batch gives 16
    # or more 4x4 tiles, only with the AVX-512 tiles at half rate
    import dataclasses
    from rlx_cpu.ops.blocked import half_rate_batch_winograd
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 64, 7, 7))
    g.output(g.conv2d(x, np.ones((64, 64, 3, 3), np.float32), padding=1))
    a = g.nodes[-1].attrs
    for shape, want in [((4, 64, 7, 7), True), ((2, 64, 7, 7), False), ((1, 64, 14, 14), True),
                        ((1, 64, 13, 13), True), ((1, 64, 12, 12), False), ((16, 64, 4, 4), True),
                        ((15, 64, 4, 4), False)]:
        assert half_rate_batch_winograd(64, shape, a, simd=2, half_rate=True) is want, shape
        assert half_rate_batch_winograd(64, shape, a, simd=2, half_rate=False) is False
        assert half_rate_batch_winograd(64, shape, a, simd=1, half_rate=True) is False
    assert half_rate_batch_winograd(56, (8, 56, 7, 7), a, simd=2, half_rate=True) is False
    for change in ({"kernel": (5, 5)}, {"stride": (2, 2)}, {"dilation": (2, 2)}, {"groups": 2}):
        assert half_rate_batch_winograd(64, (8, 64, 7, 7), dataclasses.replace(a, **change), simd=2,
                                        half_rate=True) is False, change


@pytest.mark.parametrize("threads", TWO)
def test_a_batched_7x7_bottleneck_on_this_core(rng, blocked_on, threads):
    # a bottleneck at 7x7: 1x1 -> 3x3 -> 1x1 + residual, all blocked, its 3x3
    # by Winograd F(4x4) on the blocked layout (at batch 2 too: 8 4x4 tiles,
    # but a U of only 0.6 MB); the portable level runs the direct kernel
    for batch in (2, 4):
        g = rlx_cpu.Graph()
        x = g.input("x", (batch, 128, 7, 7))
        w1 = rng.standard_normal((64, 128, 1, 1)) / np.sqrt(128)
        w2 = rng.standard_normal((64, 64, 3, 3)) / np.sqrt(64 * 9)
        w3 = rng.standard_normal((128, 64, 1, 1)) / np.sqrt(64)
        b1, b2, b3 = (rng.standard_normal(c) for c in (64, 64, 128))
        h = g.relu(g.conv2d(x, w1, b1))
        h = g.relu(g.conv2d(h, w2, b2, padding=1))
        g.output(g.relu(g.add(g.conv2d(h, w3, b3), x)))
        blocked, plain = compile_both(g, threads)
        convs = [(t.kind, getattr(t, "tile", None)) for t in blocked.thunks if t.kind.startswith("conv")]
        mid = ("conv_nchwc_winograd", 4) if _nchwc.simd_level() >= 1 else ("conv_nchwc_dense", None)
        assert convs == [("conv_nchwc_1x1", None), mid, ("conv_nchwc_1x1", None)], (batch, convs)
        feeds = {"x": rng.standard_normal((batch, 128, 7, 7)).astype(np.float32)}
        got = blocked.run(feeds)[0]
        check_parity(got, plain.run(feeds)[0], "bottleneck vs NCHW plan")
        xd = feeds["x"].astype(np.float64)
        r = np.maximum(conv_nd(xd, w1, b1, 1, 0, 0), 0)
        r = np.maximum(conv_nd(r, w2, b2, 1, 1, 1), 0)
        check_parity(got, np.maximum(conv_nd(r, w3, b3, 1, 0, 0) + xd, 0), "bottleneck vs reference")


def dense_layer_graph(rng, extra=None):
    """DenseNet's pattern: two convs concatenated, a batch norm no conv can
    absorb, its relu, a 1x1 conv; extra: 'output' (the batch norm is also
    a graph output) or 'reader' (a second node reads it)."""
    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    g = rlx_cpu.Graph()
    x = g.input("x", (1, 16, 12, 12))
    a = g.relu(g.conv2d(x, w(16, 16, 1, 1)))
    b = g.relu(g.conv2d(x, w(8, 16, 3, 3), padding=1))
    stats = dict(scale=rng.uniform(0.5, 1.5, 24), bias=rng.normal(size=24), mean=rng.normal(size=24),
                 var=rng.uniform(0.5, 1.5, 24))
    bn = g.batch_norm(g.concat([a, b], axis=1), **stats)
    outs = [g.conv2d(g.relu(bn), w(16, 24, 1, 1))]
    if extra == "output":
        outs.append(bn)
    elif extra == "reader":
        outs.append(g.conv2d(bn, w(8, 24, 1, 1)))
    g.output(*outs)
    return g, stats


def test_fuse_norm_relu_pass(rng, blocked_on):
    # the pass on its own: relu(batch_norm_nchwc) -> one batch norm with the
    # relu, named as the relu; the graph it is given stays as it was
    g, _ = dense_layer_graph(rng)
    before = passes.blocked_layout(passes.fuse_epilogue(g))
    assert ops(before).count("batch_norm_nchwc") == 1 and ops(before).count("relu") == 1
    after = passes.fuse_norm_relu(before)
    assert ops(before).count("relu") == 1
    assert "relu" not in ops(after) and ops(after).count("batch_norm_nchwc") == 1
    bn = next(n for n in after.nodes if n.op == "batch_norm_nchwc")
    relu = next(n for n in before.nodes if n.op == "relu")
    assert bn.attrs.relu and bn.name == relu.name and bn.shape == relu.shape
    assert after.pass_log[-1] == ("fuse_norm_relu", {"fused": 1})
    # a batch norm that is also an output, or has a second reader, keeps its relu
    for extra in ("output", "reader"):
        g2, _ = dense_layer_graph(rng, extra)
        out = passes.fuse_norm_relu(passes.blocked_layout(passes.fuse_epilogue(g2)))
        assert ops(out).count("relu") == 1 and out.pass_log[-1] == ("fuse_norm_relu", {"fused": 0}), extra


def norm_conv_graph(rng, n=1, c_a=16, hw=(12, 12), m=16, relu=True, bias=False, residual=False, extra=None,
                    kernel=1, stride=1):
    """A batch norm on a blocked concat (c_a + 8 channels), its relu or none,
    then a conv of m outputs (kernel x kernel, stride), with a bias and a
    residual add + relu epilogue or not; extra as in dense_layer_graph.
    Returns (graph, x shape, the reference in float64 as a function of x)."""
    def w(*shape):
        return (rng.standard_normal(shape) * 0.3).astype(np.float32)

    c = c_a + 8
    g = rlx_cpu.Graph()
    xs = (n, 16) + tuple(hw)
    x = g.input("x", xs)
    wa, wb, wc, wr = w(c_a, 16, 1, 1), w(8, 16, 3, 3), w(m, c, kernel, kernel), w(m, 16, 1, 1)
    bc = rng.normal(size=m).astype(np.float32) if bias else None
    stats = dict(scale=rng.uniform(0.5, 1.5, c), bias=rng.normal(size=c), mean=rng.normal(size=c),
                 var=rng.uniform(0.5, 1.5, c))
    cat = g.concat([g.relu(g.conv2d(x, wa)), g.relu(g.conv2d(x, wb, padding=1))], axis=1)
    bn = g.batch_norm(cat, **stats)
    t = g.relu(bn) if relu else bn
    y = g.conv2d(t, wc, bc, stride=stride, padding=kernel // 2)
    if residual:
        y = g.relu(g.add(y, g.conv2d(x, wr)))
    outs = [y]
    if extra == "output":
        outs.append(bn)
    elif extra == "reader":
        outs.append(g.conv2d(bn, w(8, c, 1, 1)))
    g.output(*outs)

    def reference(xv):
        xd = xv.astype(np.float64)
        h = np.concatenate([ref_relu(conv_nd(xd, wa)), ref_relu(conv_nd(xd, wb, pads_begin=1, pads_end=1))], 1)
        h = ref_batch_norm(h, stats["scale"], stats["bias"], stats["mean"], stats["var"])
        h = ref_relu(h) if relu else h
        r = conv_nd(h, wc, bc, stride, kernel // 2, kernel // 2)
        return ref_relu(r + conv_nd(xd, wr)) if residual else r
    return g, xs, reference


def test_fuse_norm_conv_pass(rng, blocked_on):
    # the pass on its own: a 1x1 conv2d_nchwc reading a batch_norm_nchwc
    # only it reads -> one conv2d_nchwc_norm named and shaped as the conv;
    # the graph it is given stays as it was
    for relu in (True, False):
        g, _, _ = norm_conv_graph(rng, relu=relu)
        before = passes.fuse_norm_relu(passes.blocked_layout(passes.fuse_epilogue(g)))
        after = passes.fuse_norm_conv(before)
        assert ops(before).count("batch_norm_nchwc") == 1 and "conv2d_nchwc_norm" not in ops(before)
        assert "batch_norm_nchwc" not in ops(after) and ops(after).count("conv2d_nchwc_norm") == 1
        fused = next(n for n in after.nodes if n.op == "conv2d_nchwc_norm")
        conv = before.node(before.outputs[0])
        conv = before.node(conv.inputs[0]) if conv.op == "from_nchwc" else conv
        assert fused.name == conv.name and fused.shape == conv.shape and fused.attrs.relu == relu
        assert after.pass_log[-1] == ("fuse_norm_conv", {"fused": 1})
    # not fused: the norm is an output too or has a second reader, or its
    # reader is no 1x1 stride-1 conv
    for kw in (dict(extra="output"), dict(extra="reader"), dict(kernel=3), dict(stride=2)):
        g, _, _ = norm_conv_graph(rng, **kw)
        out = passes.fuse_norm_conv(passes.fuse_norm_relu(passes.blocked_layout(passes.fuse_epilogue(g))))
        assert "conv2d_nchwc_norm" not in ops(out) and out.pass_log[-1] == ("fuse_norm_conv", {"fused": 0}), kw


NORM_CONV_CASES = [
    dict(),
    dict(relu=False, bias=True),
    # two K blocks of the 1x1 kernel (264 input channels), a small plane
    # whose items split the output panels, batch 2, a residual epilogue
    dict(n=2, c_a=256, hw=(5, 7), m=48, bias=True, residual=True),
    # several pixel chunks, a half panel (40 outputs)
    dict(c_a=8, hw=(48, 40), m=40, residual=True),
]


@pytest.mark.parametrize("threads", (1, 2, 3) if _runtime.openmp_enabled() else (1,))
@pytest.mark.parametrize("case", range(len(NORM_CONV_CASES)))
def test_fused_norm_conv_gives_the_unfused_bits(rng, blocked_on, threads, case):
    g, xs, reference = norm_conv_graph(rng, **NORM_CONV_CASES[case])
    fused = rlx_cpu.compile(g, num_threads=threads)
    unfused = rlx_cpu.compile(g, num_threads=threads, passes=[p for p in passes.DEFAULT_PASSES
                                                              if p != "fuse_norm_conv"])
    assert "fuse_norm_conv: 1 fused" in fused.pass_summary
    assert "channel_binary_nchwc" not in [t.kind for t in fused.thunks]
    assert [t.kind for t in unfused.thunks].count("channel_binary_nchwc") == 1
    x = rng.standard_normal(xs).astype(np.float32)
    x[0, 3, 4, 5] = np.nan
    got, want = fused.run({"x": x})[0], unfused.run({"x": x})[0]
    assert np.isnan(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
    x[0, 3, 4, 5] = 0.5
    check_parity(fused.run({"x": x})[0], reference(x), "norm + 1x1 fused vs reference")


def test_conv1x1_norm_launch_checks_its_operands():
    n, k, m, p = 1, 16, 16, 20
    x, y = np.zeros(n * k * p, np.float32), np.zeros(n * m * p, np.float32)
    wq = _nchwc.pack_1x1_weight(np.zeros((m, k), np.float32))
    ok = np.zeros(k, np.float32)
    need = _nchwc.conv1x1_norm_scratch_floats(n, k, p, 2)
    with pytest.raises(ValueError, match=r"conv2d_nchwc 1x1: a norm prologue needs scratch \(\d+ floats\), got None"):
        _nchwc.NchwcConv1x1Launch(x, wq, None, None, y, n, k, m, p, max_threads=2, norm=(ok, ok, True))
    with pytest.raises(ValueError, match=r"conv2d_nchwc 1x1: norm scale holds 8 floats, needs 16"):
        _nchwc.NchwcConv1x1Launch(x, wq, None, None, y, n, k, m, p, max_threads=2,
                                  norm=(np.zeros(8, np.float32), ok, True), scratch=np.zeros(need, np.float32))
    with pytest.raises(ValueError, match=rf"conv2d_nchwc 1x1: scratch holds {need - 1} floats, needs {need}"):
        _nchwc.NchwcConv1x1Launch(x, wq, None, None, y, n, k, m, p, max_threads=2, norm=(ok, ok, True),
                                  scratch=np.zeros(need - 1, np.float32))
    with pytest.raises(TypeError, match=r"conv2d_nchwc 1x1: norm must be \(scale, shift, relu\)"):
        _nchwc.NchwcConv1x1Launch(x, wq, None, None, y, n, k, m, p, norm=[ok, ok, True],
                                  scratch=np.zeros(need, np.float32))


@pytest.mark.parametrize("threads", TWO)
@pytest.mark.parametrize("extra", [None, "output", "reader"])
def test_fused_norm_relu_gives_the_unfused_bits(rng, blocked_on, threads, extra):
    g, stats = dense_layer_graph(rng, extra)
    fused = rlx_cpu.compile(g, num_threads=threads)
    unfused = rlx_cpu.compile(g, num_threads=threads, passes=[p for p in passes.DEFAULT_PASSES
                                                              if p != "fuse_norm_relu"])
    kinds = [t.kind for t in fused.thunks]
    assert ("relu" in kinds) == (extra is not None)
    assert ("fuse_norm_relu: 1 fused" in fused.pass_summary) == (extra is None)
    x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    x[0, 3, 4, 5] = np.nan
    for got, want in zip(fused.run({"x": x}), unfused.run({"x": x})):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
    # and the float64 reference, away from the NaN
    x[0, 3, 4, 5] = 0.5
    ws = [g.node(n.inputs[1]).value for n in g.nodes if n.op == "conv2d"]
    a = ref_relu(conv_nd(x, ws[0]))
    b = ref_relu(conv_nd(x, ws[1], pads_begin=1, pads_end=1))
    h = ref_batch_norm(np.concatenate([a, b], 1), stats["scale"], stats["bias"], stats["mean"], stats["var"])
    check_parity(fused.run({"x": x})[0], conv_nd(ref_relu(h), ws[2]), "fused norm-relu vs reference", tol=TOL)
