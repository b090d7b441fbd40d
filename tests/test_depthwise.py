"""Depthwise convs on the direct kernel: output planes above
RLX_DIRECT_L1_FLOATS (8192) run the row-outer loop order, smaller ones the
tap-outer order; both match the float64 reference, give the same bits for
1/2/3 threads, and the auto selection picks direct for them."""
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
