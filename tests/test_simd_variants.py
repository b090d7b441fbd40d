"""The direct and Winograd (F(2x2) and F(4x4)) hot loops exist in a portable and an AVX2+FMA
variant chosen at run time; RLX_SIMD=baseline forces the portable one.  The
rest of the suite runs whichever this CPU selects, so run the other here."""
import os
import subprocess
import sys

import numpy as np
import pytest

import rlx_cpu._conv2d as _conv2d
from conftest import run_script

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
    if algo.startswith("winograd"):
        # the tile GEMMs on the portable microkernel tile (U packed)
        import os
        os.environ["RLX_CONV_MICROKERNEL"] = "1"
        plan = rlx_cpu.compile(g, conv_algorithm=algo, num_threads=2)
        del os.environ["RLX_CONV_MICROKERNEL"]
        assert plan.thunks[0].packed
        y = plan.run({"x": x})[0]
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
    assert _conv2d.simd_level() in (0, 1, 2)


def test_simd_level_follows_the_cpu_and_rlx_simd():
    """Level 2 (the AVX-512 tiles) exactly when the CPU has AVX-512 F, DQ and
    VL besides AVX2+FMA; RLX_SIMD=avx2 stops at 1 and baseline at 0."""
    import platform
    if platform.machine() not in ("x86_64", "AMD64") or not os.path.exists("/proc/cpuinfo"):
        pytest.skip("the CPU flags are read from Linux's /proc/cpuinfo on x86-64")
    flags = set()
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    avx2 = {"avx2", "fma"} <= flags
    want = 2 if avx2 and {"avx512f", "avx512dq", "avx512vl"} <= flags else int(avx2)
    assert _conv2d.simd_level() == want
    level = "import rlx_cpu._conv2d as c; print(c.simd_level())"
    assert int(run_script(level, RLX_SIMD="avx2")) == min(want, 1)
    assert int(run_script(level, RLX_SIMD="baseline")) == 0


SIGMOID_SCRIPT = r"""
import sys
import numpy as np, rlx_cpu
x = np.concatenate([np.linspace(-100, 100, 4001), [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 86.99,
                                                   87.01, -86.99, -87.01]]).astype(np.float32)
outs = []
for op in ("sigmoid", "silu"):
    g = rlx_cpu.Graph(); xi = g.input("x", x.shape); g.output(getattr(g, op)(xi))
    outs.append(rlx_cpu.compile(g, num_threads=1).run({"x": x})[0])
    # the conv epilogue form: a 1x1 identity conv, then the activation
    g = rlx_cpu.Graph(); xi = g.input("x", (1, 1, 1, x.size))
    g.output(getattr(g, op)(g.conv2d(xi, np.ones((1, 1, 1, 1), np.float32))))
    plan = rlx_cpu.compile(g, num_threads=1)
    assert plan.thunks[-1].epilogue is not None
    outs.append(plan.run({"x": x.reshape(1, 1, 1, -1)})[0].ravel())
np.save(sys.argv[1], np.stack(outs))
"""


def test_sigmoid_and_silu_give_the_same_bits_in_both_variants(tmp_path):
    """rlx_sigmoidf (portable, fmaf) and rlx_sigmoid8 (AVX2) run the same
    operations: the same bits, standalone and as a conv epilogue, NaN, the
    infinities and the clamp edges included."""
    here = os.path.dirname(__file__)
    res = {}
    for simd in ("baseline", "auto"):
        env = dict(os.environ, RLX_SIMD=simd)
        env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
        path = str(tmp_path / f"{simd}.npy")
        out = subprocess.run([sys.executable, "-c", SIGMOID_SCRIPT, path], env=env, cwd=here,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        res[simd] = np.load(path)
    np.testing.assert_array_equal(res["baseline"], res["auto"])
    assert np.isnan(res["auto"][:, 4001]).all()


def test_fma_peak_probe_measures_and_validates():
    """The benchmarks' peak reference: a finite positive throughput (any
    CPU that runs the suite does well over 1 GFLOP/s of float32 FMAs on one
    thread), and bad arguments raise naming the function."""
    from rlx_cpu._conv2d import fma_peak_gflops
    peak = fma_peak_gflops(1, 0.02)
    assert 1.0 < peak < 1e5
    with pytest.raises(ValueError, match="fma_peak_gflops"):
        fma_peak_gflops(0)
    with pytest.raises(ValueError, match="fma_peak_gflops"):
        fma_peak_gflops(1, 0.0)
