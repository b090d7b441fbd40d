"""Depthwise convs on the direct algorithm.  3x3 and 5x5 at stride 1 run
their own kernel (rlx_dw_s1_rows, work cut into runs of output rows), at
stride 2 theirs (rlx_dw_s2_planes); both are checked in both SIMD variants
against the float64 reference and for the same bits at 1/2/3 threads: rows
shorter than 8 outputs, rows whose 8-output blocks overlap or reach into the
padding, planes from 1x1 up, any padding incl. asymmetric, batch > 1.  With
AVX2, planes of up to 64x64 outputs run the channel-block kernel instead
(rlx_dw_cb_run: 8 channels a vector, 16 in zmm tiles on the AVX-512 level,
strips of output rows), checked below with its fused epilogue at both
strides, and for the same bits in both vector widths.  On the AVX-512
level the 3x3s at stride 1 of those planes with 12 output columns or more
run a row kernel instead (rlx_dw_r512_run: 16 columns a zmm), checked the
same ways and for the channel-block kernel's bits.  Other
kernel sizes (7x7 here) run the generic direct kernel: output planes above
RLX_DIRECT_L1_FLOATS (8192) its row-outer loop order, smaller ones its
tap-outer order."""
import numpy as np
import pytest

import rlx_cpu
import reference as ref
from conftest import chosen_algorithm, script_array


@pytest.mark.parametrize("hw,k,pad", [((96, 97), 3, 1), ((91, 100), 5, 2), ((40, 45), 3, 1), ((30, 33), 5, 0),
                                      ((96, 97), 7, 3), ((30, 33), 7, 2)])
def test_depthwise_direct_matches_reference_in_both_loop_orders(hw, k, pad):
    rng = np.random.default_rng(hw[0] + k)
    x = rng.standard_normal((2, 3) + hw).astype(np.float32)
    w = rng.standard_normal((3, 1, k, k)).astype(np.float32)
    g = rlx_cpu.Graph()
    xi = g.input("x", x.shape)
    g.output(g.conv2d(xi, w, padding=pad, groups=3))
    outs = []
    for t in (1, 2, 3):
        # auto picks direct for 3x3/5x5 depthwise; 7x7 is forced onto it
        plan = rlx_cpu.compile(g, num_threads=t, conv_algorithm="direct" if k == 7 else "auto")
        assert chosen_algorithm(plan) == rlx_cpu.ConvAlgorithm.DIRECT
        outs.append(plan.run({"x": x})[0])
    want = ref.conv_nd(x, w, pads_begin=(pad, pad), pads_end=(pad, pad), groups=3)
    assert ref.rel_error(outs[0], want) <= 1e-5
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


SCRIPT = r"""
import sys, numpy as np, rlx_cpu, rlx_cpu._conv2d as c
sys.path.insert(0, sys.argv[1])
import reference as ref
assert c.simd_level() == 0
rng = np.random.default_rng(3)
x = rng.standard_normal((1, 4, 95, 99)).astype(np.float32)
worst = 0.0
for k in (3, 5, 7):     # the stride-1 depthwise kernel, then the generic direct one
    w = rng.standard_normal((4, 1, k, k)).astype(np.float32)
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape); g.output(g.conv2d(xi, w, padding=1, groups=4))
    y = rlx_cpu.compile(g, conv_algorithm="direct", num_threads=2).run({"x": x})[0]
    worst = max(worst, ref.rel_error(y, ref.conv_nd(x, w, pads_begin=1, pads_end=1, groups=4)))
print(worst)
"""


def test_row_outer_order_in_the_baseline_variant():
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", SCRIPT, here], env=env, cwd=here, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) <= 1e-5


# (batch, channels, H, W, kernel, pads as ((top, bottom), (left, right))):
# odd and even sizes; output rows < 8, = 8, > 8 and not a multiple of 8;
# padding 0, 1, 2, asymmetric, and wider than the kernel reaches.
S2_CASES = [
    (2, 3, 17, 18, 3, ((1, 1), (1, 1))),
    (3, 2, 16, 33, 3, ((0, 0), (0, 0))),
    (1, 4, 30, 47, 3, ((2, 2), (2, 2))),
    (2, 3, 9, 7, 3, ((1, 0), (0, 1))),
    (1, 2, 5, 16, 3, ((4, 4), (4, 3))),
    (2, 3, 23, 40, 5, ((2, 2), (2, 2))),
    (1, 3, 14, 14, 5, ((0, 0), (0, 0))),
    (3, 2, 11, 64, 5, ((1, 2), (2, 1))),
    (1, 5, 28, 29, 5, ((1, 1), (1, 1))),
    (1, 2, 140, 131, 3, ((1, 1), (1, 1))),       # > 64x64 outputs: the per-plane kernel with AVX2 too
    (1, 2, 137, 150, 5, ((2, 1), (1, 2))),
    # rows of exactly 8 and 16 outputs, an odd number of output rows, and 8
    # channels on a plane past 64x64 outputs (the per-plane kernel: on the
    # AVX-512 level two output rows at a time, blocks of 16 or 8 outputs)
    (2, 2, 16, 16, 3, ((1, 1), (1, 1))),
    (1, 3, 31, 15, 5, ((2, 2), (2, 2))),
    (1, 2, 33, 32, 5, ((2, 2), (2, 1))),
    (1, 8, 150, 141, 5, ((2, 2), (2, 2))),
]


def _s2_graph(x_shape, k, pads, rng):
    c = x_shape[1]
    w = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32)
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", x_shape), w, b, stride=2, padding=pads, groups=c))
    return g, w, b


@pytest.mark.parametrize("n,c,h,w,k,pads", S2_CASES)
def test_depthwise_stride2_matches_reference_and_thread_counts(n, c, h, w, k, pads):
    rng = np.random.default_rng(h * 100 + w + k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    g, wt, b = _s2_graph(x.shape, k, pads, rng)
    _check_direct_at_thread_counts(g, x, wt, b, 2, pads, c)


def _check_direct_at_thread_counts(g, x, wt, b, stride, pads, c):
    """g runs on the direct kernel at 1, 2 and 3 threads, matches the float64
    reference and gives the same bits at every count."""
    want = ref.conv_nd(x, wt, b, stride, pads_begin=(pads[0][0], pads[1][0]),
                       pads_end=(pads[0][1], pads[1][1]), groups=c)
    outs = []
    for t in (1, 2, 3):
        plan = rlx_cpu.compile(g, num_threads=t)
        assert chosen_algorithm(plan) == rlx_cpu.ConvAlgorithm.DIRECT
        outs.append(plan.run({"x": x})[0])
    assert outs[0].shape == want.shape
    # 25 float32 products per output: a few ulp of the largest term
    assert ref.rel_error(outs[0], want) <= 1e-5
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


def test_depthwise_stride2_forced_direct_eligibility():
    rng = np.random.default_rng(0)
    # 7x7 at stride 2 is not one of the specialised kernels: forcing direct says so
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", (1, 4, 16, 16)), rng.standard_normal((4, 1, 7, 7)).astype(np.float32),
                      stride=2, padding=3, groups=4, name="dw7"))
    with pytest.raises(ValueError, match=r"conv2d 'dw7': conv_algorithm='direct' needs stride 1, or stride 2 "
                                         r"with a 3x3/5x5 kernel for a depthwise conv \(got stride 2,2, "
                                         r"kernel 7x7\)"):
        rlx_cpu.compile(g, conv_algorithm="direct")
    # a depth multiplier of 2 is not depthwise in this sense (groups == C_in == C_out)
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", (1, 4, 16, 16)), rng.standard_normal((8, 1, 3, 3)).astype(np.float32),
                      stride=2, padding=1, groups=4, name="dwx2"))
    with pytest.raises(ValueError, match=r"conv2d 'dwx2': conv_algorithm='direct' needs stride 1 \(got 2,2\)"):
        rlx_cpu.compile(g, conv_algorithm="direct")
    assert chosen_algorithm(rlx_cpu.compile(g)) != rlx_cpu.ConvAlgorithm.DIRECT


S2_BASELINE_SCRIPT = r"""
import sys, numpy as np, rlx_cpu, rlx_cpu._conv2d as c
sys.path.insert(0, sys.argv[1])
import reference as ref
assert c.simd_level() == 0
worst = 0.0
rng = np.random.default_rng(5)
for (n, ch, h, w, k, p) in [(2, 3, 17, 18, 3, 1), (1, 2, 9, 7, 3, 0), (2, 3, 23, 40, 5, 2), (1, 2, 30, 47, 3, 2),
                            (1, 2, 11, 64, 5, 1)]:
    x = rng.standard_normal((n, ch, h, w)).astype(np.float32)
    wt = rng.standard_normal((ch, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(ch).astype(np.float32)
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape); g.output(g.conv2d(xi, wt, b, stride=2, padding=p, groups=ch))
    ys = [rlx_cpu.compile(g, num_threads=t).run({"x": x})[0] for t in (1, 2)]
    assert np.array_equal(ys[0], ys[1])
    worst = max(worst, ref.rel_error(ys[0], ref.conv_nd(x, wt, b, 2, p, p, groups=ch)))
print(worst)
"""


def test_depthwise_stride2_baseline_variant():
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", S2_BASELINE_SCRIPT, here], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) <= 1e-5


# Stride 1: (batch, channels, H, W, kernel, pads as ((top, bottom), (left, right))):
# tiny planes (1x1 with padding, output rows < 8), odd widths, widths a
# multiple of 8 and not, padding 0 .. k-1, asymmetric, one channel.
S1_CASES = [
    (1, 3, 1, 1, 3, ((1, 1), (1, 1))),
    (2, 2, 2, 3, 3, ((1, 1), (1, 1))),
    (1, 4, 7, 7, 3, ((0, 0), (0, 0))),
    (3, 2, 9, 8, 3, ((2, 2), (2, 2))),
    (2, 3, 13, 17, 3, ((1, 0), (0, 1))),
    (1, 1, 30, 33, 3, ((1, 1), (1, 1))),
    (1, 5, 16, 16, 3, ((0, 2), (2, 0))),
    (1, 3, 3, 5, 5, ((2, 2), (2, 2))),
    (2, 2, 6, 7, 5, ((4, 4), (4, 4))),
    (1, 3, 14, 14, 5, ((2, 2), (2, 2))),
    (2, 3, 23, 40, 5, ((0, 0), (0, 0))),
    (1, 2, 11, 24, 5, ((1, 3), (3, 1))),
    (3, 4, 5, 9, 5, ((2, 1), (0, 2))),
]


@pytest.mark.parametrize("n,c,h,w,k,pads", S1_CASES)
@pytest.mark.parametrize("bias", (True, False))
def test_depthwise_stride1_matches_reference_and_thread_counts(n, c, h, w, k, pads, bias):
    rng = np.random.default_rng(h * 100 + w + k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", x.shape), wt, b, padding=pads, groups=c))
    _check_direct_at_thread_counts(g, x, wt, b, 1, pads, c)


def test_depthwise_stride1_is_the_direct_choice():
    from rlx_cpu.algorithms import is_depthwise_3x3_5x5, select_conv_algorithm
    from rlx_cpu.ops.conv import Conv2DDims
    for k, s, dil, groups, c_out, want in [(3, 1, 1, 8, 8, True), (5, 1, 1, 8, 8, True), (5, 2, 1, 8, 8, True),
                                           (7, 1, 1, 8, 8, False), (3, 1, 2, 8, 8, False), (3, 1, 1, 8, 16, False),
                                           (3, 1, 1, 4, 8, False)]:
        p = k // 2
        h_out = (20 + 2 * p - dil * (k - 1) - 1) // s + 1
        d = Conv2DDims(1, 8, 20, 20, c_out, h_out, h_out, k, k, s, s, p, p, dil, dil, groups)
        assert is_depthwise_3x3_5x5(d) == want, (k, s, dil, groups, c_out)
        if want:
            assert select_conv_algorithm(d) == rlx_cpu.ConvAlgorithm.DIRECT


S1_BASELINE_SCRIPT = r"""
import sys, numpy as np, rlx_cpu, rlx_cpu._conv2d as c
sys.path.insert(0, sys.argv[1])
import reference as ref
assert c.simd_level() == 0
worst = 0.0
rng = np.random.default_rng(7)
for (n, ch, h, w, k, p) in [(2, 3, 17, 18, 3, 1), (1, 2, 3, 2, 3, 2), (2, 3, 23, 40, 5, 2), (1, 2, 30, 47, 3, 0),
                            (1, 2, 11, 64, 5, 4), (3, 1, 1, 1, 5, 2)]:
    x = rng.standard_normal((n, ch, h, w)).astype(np.float32)
    wt = rng.standard_normal((ch, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(ch).astype(np.float32)
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape); g.output(g.relu(g.conv2d(xi, wt, b, padding=p, groups=ch)))
    ys = [rlx_cpu.compile(g, num_threads=t).run({"x": x})[0] for t in (1, 2)]
    assert np.array_equal(ys[0], ys[1])
    worst = max(worst, ref.rel_error(ys[0], ref.relu(ref.conv_nd(x, wt, b, 1, p, p, groups=ch))))
print(worst)
"""


def test_depthwise_stride1_baseline_variant():
    import os
    import subprocess
    import sys
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", S1_BASELINE_SCRIPT, here], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) <= 1e-5


# The channel-block kernel: (batch, channels, H, W, kernel, stride, pads as
# ((top, bottom), (left, right))): channel counts not a multiple of 8 (a
# partial last block) and below 8, odd planes, planes of fewer than 8
# outputs, outputs rows a multiple of 7, of 8, and neither, one block of
# few channels split into strips of rows, padding wider than the kernel
# reaches, asymmetric padding (also on one side per axis).
CB_CASES = [
    (1, 13, 7, 7, 3, 1, ((1, 1), (1, 1))),
    (2, 5, 9, 11, 5, 1, ((2, 2), (2, 2))),
    (1, 19, 14, 14, 5, 1, ((2, 2), (2, 2))),
    (1, 8, 2, 3, 3, 1, ((1, 1), (1, 1))),
    (1, 3, 40, 37, 3, 1, ((1, 0), (2, 1))),
    (1, 16, 5, 5, 5, 1, ((4, 4), (4, 4))),
    (1, 10, 16, 16, 3, 1, ((1, 1), (1, 1))),
    (1, 21, 15, 13, 3, 2, ((1, 1), (1, 1))),
    (2, 11, 14, 14, 5, 2, ((2, 2), (2, 2))),
    (1, 9, 29, 31, 5, 2, ((2, 1), (0, 2))),
    (1, 2, 56, 50, 5, 2, ((2, 2), (2, 2))),
    (1, 10, 34, 34, 3, 1, ((1, 1), (1, 1))),
    (2, 10, 12, 12, 5, 1, ((2, 2), (2, 2))),
    (1, 12, 9, 10, 3, 1, ((2, 0), (0, 2))),
]
# (activation, bias, residual): MobileNet's ReLU6, a residual + ReLU,
# EfficientNet-style hard swish on a residual, plain bias
CB_EPILOGUES = [("clip", True, None), ("relu", False, "right"), ("hard_swish", True, "left"), (None, True, None)]
CB_ACTS = {"clip": ({"alpha": 0.0, "beta": 6.0}, lambda v: ref.clip(v, 0.0, 6.0)),
           "relu": ({}, ref.relu), "hard_swish": ({}, ref.hard_swish)}


def _check_fused_epilogue(x, wt, b, s, pads, act, residual, rng):
    """The depthwise conv of x by wt (+ b) at stride s, then the residual add
    (None, "left" or "right" operand) and the activation of CB_ACTS (or
    None), all fused into one conv thunk, on the direct kernel at 1, 2 and 3
    threads: the float64 reference and the same bits at every count."""
    c = x.shape[1]
    want = ref.conv_nd(x, wt, b, s, pads_begin=(pads[0][0], pads[1][0]), pads_end=(pads[0][1], pads[1][1]),
                       groups=c)
    feeds = {"x": x}
    g = rlx_cpu.Graph()
    y = g.conv2d(g.input("x", x.shape), wt, b, stride=s, padding=pads, groups=c)
    if residual:
        feeds["skip"] = rng.standard_normal(want.shape).astype(np.float32)
        skip = g.input("skip", want.shape)
        y = g.add(skip, y) if residual == "left" else g.add(y, skip)
        want = want + feeds["skip"]
    if act:
        kw, f = CB_ACTS[act]
        y = getattr(g, act)(y, **kw)
        want = f(want)
    g.output(y)
    outs = []
    for t in (1, 2, 3):
        plan = rlx_cpu.compile(g, num_threads=t)
        assert [th.kind for th in plan.thunks] == ["conv"]      # the epilogue is fused
        assert chosen_algorithm(plan) == rlx_cpu.ConvAlgorithm.DIRECT
        outs.append(plan.run(feeds)[0])
    assert outs[0].shape == want.shape
    # up to 25 float32 products per output: a few ulp of the largest term
    assert ref.rel_error(outs[0], want) <= 1e-5
    for y in outs[1:]:
        np.testing.assert_array_equal(y, outs[0])


@pytest.mark.parametrize("i", range(len(CB_CASES)))
def test_depthwise_channel_blocks_match_reference_and_thread_counts(i):
    n, c, h, w, k, s, pads = CB_CASES[i]
    act, bias, residual = CB_EPILOGUES[i % len(CB_EPILOGUES)]
    rng = np.random.default_rng(i)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    h_out = (h + sum(pads[0]) - k) // s + 1
    w_out = (w + sum(pads[1]) - k) // s + 1
    dims = (n, c, h, w, c, h_out, w_out, k, k, s, s, pads[0][0], pads[1][0], 1, 1, c)
    cb = rlx_cpu._conv2d.depthwise_channel_blocks(dims)
    if rlx_cpu._conv2d.depthwise_rows512(dims):
        # AVX-512: the row kernel runs it instead (test_depthwise_rows512_*), with the same bits: 3x3
        # at stride 1 from 12 output columns; at stride 2 3x3 from 10, 5x5 from 14 when at least 85%
        # of its 16-column blocks are outputs; 5x5 at stride 1 from 32 on planes 4 KiB apart
        lanes = -(-w_out // 16) * 16
        assert cb is None and rlx_cpu._conv2d.simd_level() == 2
        assert (k == 3 and s == 1 and w_out >= 12) or (k == 3 and s == 2 and w_out >= 10) or (
            k == 5 and s == 2 and w_out >= 14 and w_out >= 0.85 * lanes) or (
            k == 5 and s == 1 and w_out >= 32 and h * w % 1024 == 0), (k, s, w_out)
    elif rlx_cpu._conv2d.simd_level() > 0 and c >= 8:
        assert cb is not None
        lanes = 16 if rlx_cpu._conv2d.simd_level() == 2 else 8
        if c == 10:
            # one block of 16 channels (AVX-512) or two of 8: too few items, so strips of rows
            # (at least 4 rows each) make more
            blocks = n * -(-c // lanes)
            assert 4 <= cb[1] < h_out and cb[0] == blocks * -(-h_out // cb[1])
    else:
        # the portable build, and fewer channels than a vector's lanes: the per-plane kernels
        assert cb is None
    _check_fused_epilogue(x, wt, b, s, pads, act, residual, rng)


# The AVX-512 row kernel for 3x3 at stride 1 (rlx_dw_r512_run), on the planes
# of at least 12 output columns that the channel-block kernel would take:
# (batch, channels, H, W, pads as ((top, bottom), (left, right))).  Output
# rows of 12 (the least), 16 (one zmm), 17, 29, 33 (a last chunk of one
# column) and 64; output row counts that are multiples of 4 and not (steps
# of 4 rows, then single rows); padding 0, 1, asymmetric, and wider than the
# kernel reaches (rows and columns of zeros only); batch 2; channel counts
# that are not multiples of 8 or 16.
ROWS512_CASES = [
    (1, 8, 12, 12, ((1, 1), (1, 1))),
    (2, 24, 16, 16, ((1, 1), (1, 1))),
    (1, 16, 9, 17, ((1, 1), (1, 1))),
    (1, 9, 20, 31, ((0, 0), (0, 0))),
    (1, 12, 13, 33, ((2, 0), (0, 2))),
    (1, 8, 5, 64, ((1, 1), (1, 1))),
    (1, 8, 6, 12, ((3, 3), (4, 4))),
    (2, 32, 14, 14, ((1, 1), (1, 1))),
    (1, 8, 40, 20, ((1, 2), (2, 1))),
]
# ... and on planes past 64x64 outputs, in the row kernel's order (even and
# odd kernel rows in two chains): at least 8 (image, channel) planes, input
# rows of at most 384: 8 planes from batch 2, rows of exactly 384, output
# row counts not multiples of 4, padding that covers whole rows and columns,
# a tall plane
ROWS512_WIDE_CASES = [
    (1, 8, 70, 69, ((1, 1), (1, 1))),
    (2, 4, 66, 80, ((1, 1), (1, 1))),
    (1, 8, 67, 384, ((1, 1), (1, 1))),
    (1, 9, 65, 100, ((0, 2), (2, 0))),
    (1, 8, 66, 70, ((3, 3), (4, 4))),
    (1, 8, 130, 45, ((1, 1), (1, 1))),
]
# ... and at stride 2 on the channel-block planes (in their order: one chain
# from 0 over the taps, padding taps included): 3x3 and 5x5, (batch,
# channels, H, W, kernel, pads); two blocks of 16 columns with 12 outputs in
# the second (28), 10 output columns (3x3), 15 (5x5), odd output row counts
# (steps of 4 rows, then single rows), no padding, asymmetric padding,
# padding wider than the kernel reaches, batch 2, 9 and 10 channels
ROWS512_S2_CASES = [
    (1, 16, 56, 56, 5, ((2, 2), (2, 2))),
    (2, 8, 64, 64, 3, ((1, 1), (1, 1))),
    (1, 8, 21, 20, 3, ((1, 1), (1, 1))),
    (2, 9, 30, 29, 5, ((2, 2), (2, 2))),
    (1, 24, 64, 64, 3, ((0, 0), (0, 0))),
    (1, 8, 33, 64, 3, ((1, 0), (0, 1))),
    (1, 10, 19, 26, 5, ((4, 4), (4, 4))),
    (1, 12, 57, 57, 3, ((1, 1), (1, 1))),
    # past 64x64 outputs (the per-plane kernel's order): 3x3 and 5x5, batch 2,
    # asymmetric padding, padding wider than the kernel reaches
    (1, 8, 150, 141, 3, ((1, 1), (1, 1))),
    (2, 4, 140, 160, 5, ((2, 2), (2, 2))),
    (1, 9, 131, 200, 3, ((0, 1), (1, 0))),
    (1, 8, 133, 140, 5, ((4, 4), (4, 4))),
]
# ... and 5x5s at stride 1 on planes a multiple of 4 KiB apart, from 32
# output columns (the channel-block order): 32x32 and 64x64 planes, padding
# that widens the output to 36 columns, batch 2, 9 channels
ROWS512_K5_CASES = [
    (1, 16, 32, 32, ((2, 2), (2, 2))),
    (2, 9, 64, 64, ((2, 2), (2, 2))),
    (1, 12, 32, 32, ((4, 4), (4, 4))),
    (1, 8, 16, 64, ((1, 3), (2, 2))),
]
# ... and what it leaves to the other kernels: 11 output columns, a 5x5
# at stride 1 elsewhere, fewer than 8 channels; past 64x64 outputs, fewer than 8
# planes, rows wider than 384 or a 3x3 input of more than 2^20 floats; at
# stride 2 a 3x3 of 9 output columns, 5x5s of 12 and of 20 (16 + 4: 62% of
# the lanes), and past 64x64 outputs 7 planes, rows of 600, or a 3x3 input of
# more than 2^20 floats (a 5x5's still runs there)
NOT_ROWS512 = [((1, 8, 11, 11), 3, 1, 1), ((1, 16, 14, 14), 5, 1, 2), ((1, 16, 48, 48), 5, 1, 2),
               ((1, 16, 16, 16), 5, 1, 2), ((1, 16, 18, 18), 3, 2, 1),
               ((1, 16, 24, 24), 5, 2, 2), ((1, 16, 40, 40), 5, 2, 2), ((1, 7, 150, 150), 3, 2, 1),
               ((1, 8, 150, 600), 3, 2, 1), ((1, 64, 130, 130), 3, 1, 1), ((1, 64, 130, 130), 3, 2, 1),
               ((1, 7, 14, 14), 3, 1, 1), ((1, 7, 70, 70), 3, 1, 1), ((1, 8, 70, 385), 3, 1, 1),
               ((1, 8, 70, 70), 5, 1, 2)]


def _rows512_dims(n, c, h, w, k, s, pads):
    h_out = (h + sum(pads[0]) - k) // s + 1
    w_out = (w + sum(pads[1]) - k) // s + 1
    return (n, c, h, w, c, h_out, w_out, k, k, s, s, pads[0][0], pads[1][0], 1, 1, c)


def test_depthwise_rows512_runs_where_it_should():
    for n, c, h, w, pads in ROWS512_CASES + ROWS512_WIDE_CASES:
        assert rlx_cpu._conv2d.depthwise_rows512(_rows512_dims(n, c, h, w, 3, 1, pads)) == (
            rlx_cpu._conv2d.simd_level() == 2), (n, c, h, w, pads)
    for (n, c, h, w), k, s, p in NOT_ROWS512:
        assert not rlx_cpu._conv2d.depthwise_rows512(_rows512_dims(n, c, h, w, k, s, ((p, p), (p, p)))), (c, h, k, s)
    for n, c, h, w, k, s, pads in _rows512_more() + [(1, 64, 130, 159, 5, 2, ((2, 2), (2, 2)))]:
        assert rlx_cpu._conv2d.depthwise_rows512(_rows512_dims(n, c, h, w, k, s, pads)) == (
            rlx_cpu._conv2d.simd_level() == 2), (n, c, h, w, k, s, pads)


def _rows512_more():
    return [(n, c, h, w, k, 2, pads) for n, c, h, w, k, pads in ROWS512_S2_CASES] + [
        (n, c, h, w, 5, 1, pads) for n, c, h, w, pads in ROWS512_K5_CASES]


def _rows512_all():
    """(batch, channels, H, W, kernel, stride, pads) of every case the AVX-512 row kernel runs."""
    return [(n, c, h, w, 3, 1, pads) for n, c, h, w, pads in ROWS512_CASES + ROWS512_WIDE_CASES] + _rows512_more()


@pytest.mark.parametrize("i", range(len(_rows512_all())))
def test_depthwise_rows512_match_reference_and_thread_counts(i):
    """With its fused epilogues (ReLU6, residual + ReLU, residual + hard
    swish, bias alone), at 1, 2 and 3 threads; on other SIMD levels the same
    graphs run the channel-block or row kernels."""
    n, c, h, w, k, s, pads = _rows512_all()[i]
    act, bias, residual = CB_EPILOGUES[i % len(CB_EPILOGUES)]
    rng = np.random.default_rng(50 + i)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c).astype(np.float32) if bias else None
    _check_fused_epilogue(x, wt, b, s, pads, act, residual, rng)


# The channel-block cases above, the row kernel's, and MobileNet / EfficientNet
# layer planes, each with a bias and without, run in a subprocess per SIMD
# level.
CB_BITS_SCRIPT = """
import sys
import numpy as np
import rlx_cpu
from test_depthwise import CB_CASES, S1_CASES, S2_CASES, _rows512_all
cases = list(CB_CASES) + [(1, 120, 28, 28, 5, 1, ((2, 2), (2, 2))), (1, 960, 7, 7, 3, 1, ((1, 1), (1, 1))),
                          (1, 40, 56, 56, 3, 2, ((1, 1), (1, 1))), (2, 24, 14, 14, 5, 2, ((2, 2), (2, 2))),
                          (1, 384, 14, 14, 3, 1, ((1, 1), (1, 1))), (1, 144, 56, 56, 3, 1, ((1, 1), (1, 1)))]
cases += _rows512_all()
# the row kernel (under 8 channels, or planes past 64x64): 3x3 in groups of
# four output rows on the AVX-512 level, of two on AVX2
cases += [(n, c, h, w, k, 1, pads) for n, c, h, w, k, pads in S1_CASES]
cases += [(1, 8, 70, 69, 3, 1, ((1, 1), (1, 1))), (1, 8, 67, 70, 5, 1, ((2, 2), (2, 2)))]
# the per-plane kernel at stride 2: two output rows at a time on the AVX-512 level
cases += [(n, c, h, w, k, 2, pads) for n, c, h, w, k, pads in S2_CASES]
outs = []
for i, (n, c, h, w, k, s, pads) in enumerate(cases):
    rng = np.random.default_rng(100 + i)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((c, 1, k, k)).astype(np.float32)
    for b in (None, rng.standard_normal(c).astype(np.float32)):
        g = rlx_cpu.Graph()
        g.output(g.relu(g.conv2d(g.input("x", x.shape), wt, b, stride=s, padding=pads, groups=c)))
        outs.append(rlx_cpu.compile(g, num_threads=2).run({"x": x})[0].reshape(-1))
np.save(sys.stdout.buffer, np.concatenate(outs))
"""


def test_channel_blocks_give_the_same_bits_in_zmm_tiles():
    """On the AVX-512 level the channel-block kernel runs 16 channels per
    block in zmm tiles, the rows512 kernel the 3x3s at stride 1 of 12
    output columns or more, the stride-1 row kernel four 3x3 output rows at
    a time and the stride-2 plane kernel two: each output's taps in the same order, so the 8-lane
    tiles' bits."""
    if rlx_cpu._conv2d.simd_level() < 2:
        pytest.skip("this CPU has no AVX-512 (F, DQ, VL): only the 8-lane tiles run")
    avx2, avx512 = script_array(CB_BITS_SCRIPT, RLX_SIMD="avx2"), script_array(CB_BITS_SCRIPT)
    assert avx2.size > 100000 and np.isfinite(avx2).all()
    np.testing.assert_array_equal(avx512, avx2)
