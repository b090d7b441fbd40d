"""Depthwise convs on the direct kernel: output planes above
RLX_DIRECT_L1_FLOATS (8192) run the row-outer loop order, smaller ones the
tap-outer order; both match the float64 reference, give the same bits for
1/2/3 threads, and the auto selection picks direct for them.  Depthwise 3x3
and 5x5 at stride 2 run their own plane kernel (rlx_dw_s2_planes), checked
the same way in both SIMD variants: rows shorter than 8 outputs, rows whose
8-output blocks overlap or reach into the padding, any padding."""
import numpy as np
import pytest

import rlx_cpu
import reference as ref
from conftest import chosen_algorithm


@pytest.mark.parametrize("hw,k,pad", [((96, 97), 3, 1), ((91, 100), 5, 2), ((40, 45), 3, 1), ((30, 33), 5, 0)])
def test_depthwise_direct_matches_reference_in_both_loop_orders(hw, k, pad):
    rng = np.random.default_rng(hw[0] + k)
    x = rng.standard_normal((2, 3) + hw).astype(np.float32)
    w = rng.standard_normal((3, 1, k, k)).astype(np.float32)
    g = rlx_cpu.Graph()
    xi = g.input("x", x.shape)
    g.output(g.conv2d(xi, w, padding=pad, groups=3))
    outs = []
    for t in (1, 2, 3):
        plan = rlx_cpu.compile(g, num_threads=t)
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
w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
g = rlx_cpu.Graph(); xi = g.input("x", x.shape); g.output(g.conv2d(xi, w, padding=1, groups=4))
y = rlx_cpu.compile(g, conv_algorithm="direct", num_threads=2).run({"x": x})[0]
print(ref.rel_error(y, ref.conv_nd(x, w, pads_begin=1, pads_end=1, groups=4)))
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
    want = ref.conv_nd(x, wt, b, 2, pads_begin=(pads[0][0], pads[1][0]), pads_end=(pads[0][1], pads[1][1]),
                       groups=c)
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
