"""The direct and Winograd (F(2x2) and F(4x4)) hot loops exist in a portable and an AVX2+FMA
variant chosen at run time; RLX_SIMD=baseline forces the portable one.  The
rest of the suite runs whichever this CPU selects, so run the other here."""
import os
import subprocess
import sys

import rlx_cpu._conv2d as _conv2d

SCRIPT = r"""
import numpy as np, rlx_cpu, rlx_cpu._conv2d as c
from reference import conv_nd, rel_error
assert c.simd_level() == 0
rng = np.random.default_rng(7)
worst = 0.0
for (n, ci, co, h, w, pads, algo) in [(2, 5, 7, 23, 45, (1, 2, 0, 1), "direct"),
                                      (1, 8, 8, 30, 67, (1, 1, 1, 1), "winograd"),
                                      (3, 4, 6, 9, 40, (0, 2, 2, 0), "winograd"),
                                      (1, 8, 8, 30, 67, (1, 1, 1, 1), "winograd_f4"),
                                      (3, 4, 6, 9, 40, (0, 2, 2, 0), "winograd_f4")]:
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, ci, 3, 3)).astype(np.float32)
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape)
    g.output(g.conv2d(xi, wt, padding=pads))
    y = rlx_cpu.compile(g, conv_algorithm=algo, num_threads=2).run({"x": x})[0]
    worst = max(worst, rel_error(y, conv_nd(x, wt, pads_begin=pads[:2], pads_end=pads[2:])))
print(worst)
"""


def test_baseline_variant_matches_reference():
    here = os.path.dirname(__file__)
    env = dict(os.environ, RLX_SIMD="baseline")
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=here, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout.strip()) <= 1e-4


def test_simd_level_is_reported():
    assert _conv2d.simd_level() in (0, 1)
