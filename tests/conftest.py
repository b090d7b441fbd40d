"""Shared fixtures and helpers for the rlx_cpu test suite.

Helpers here are plain functions (tests import them with ``from conftest
import ...``; pytest puts tests/ on sys.path) plus a few fixtures.
"""
import os
import zlib

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import threads as _threads

from reference import conv_nd, rel_error

# ---------------------------------------------------------------------------
# Global state guards
# ---------------------------------------------------------------------------

CONV_ENV_FLAGS = ("RLX_FAST_CONV", "RLX_WINOGRAD", "RLX_DIRECT_CONV", "RLX_CONV_MICROKERNEL", "RLX_IMPLICIT_GEMM",
                  "RLX_IMPLICIT_DIRECT", "RLX_BWD_WIDE", "RLX_BLOCKED_LAYOUT")


@pytest.fixture(autouse=True)
def _restore_num_threads(monkeypatch):
    """set_num_threads has no 'reset to default'; put the module state back
    after every test so tests cannot leak a thread count into each other."""
    monkeypatch.setattr(_threads, "_explicit", _threads._explicit)


@pytest.fixture
def clean_conv_env(monkeypatch):
    """No RLX_* conv flags from the caller's shell: 'auto' means the defaults."""
    for name in CONV_ENV_FLAGS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def rng(request):
    """A generator seeded from the test id: reproducible, different per case."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


# ---------------------------------------------------------------------------
# --- conv helpers ---
# ---------------------------------------------------------------------------

ALGORITHMS = ("reference", "im2col", "direct", "winograd", "winograd_f4")
TOL = 1e-4


def conv_case(rng, n, c_in, c_out, spatial, kernel, groups=1, bias=True, scale=1.0):
    """Random float32 input, weight and (optional) bias for one conv."""
    x = (rng.standard_normal((n, c_in, *spatial)) * scale).astype(np.float32)
    w = rng.standard_normal((c_out, c_in // groups, *kernel)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32) if bias else None
    return x, w, b


def one_conv_graph(x_shape, w, b=None, *, weight_as_input=False, bias_as_input=False, name="conv",
                   **attrs):
    """A graph with one conv (1-D or 2-D from the rank of x_shape).

    The weight and bias are constants unless *_as_input, in which case they
    are graph inputs named 'w' and 'b'."""
    g = rlx_cpu.Graph()
    x = g.input("x", x_shape)
    wv = g.input("w", w.shape) if weight_as_input else w
    bv = None
    if b is not None:
        bv = g.input("b", b.shape) if bias_as_input else b
    op = {3: g.conv1d, 4: g.conv2d}[len(x_shape)]
    g.output(op(x, wv, bv, name=name, **attrs))
    return g


def feeds_for(x, w, b, weight_as_input=False, bias_as_input=False):
    f = {"x": x}
    if weight_as_input:
        f["w"] = w
    if bias_as_input and b is not None:
        f["b"] = b
    return f


def run_one_conv(x, w, b=None, *, conv_algorithm="auto", num_threads=None, weight_as_input=False, **attrs):
    """Compile and run one conv; returns (output, plan)."""
    g = one_conv_graph(x.shape, w, b, weight_as_input=weight_as_input, **attrs)
    plan = rlx_cpu.compile(g, conv_algorithm=conv_algorithm, num_threads=num_threads)
    return plan.run(feeds_for(x, w, b, weight_as_input))[0], plan


def conv_thunk(plan):
    """The (last) conv thunk of a plan."""
    convs = [t for t in plan.thunks if t.kind in ("conv", "conv_1x1")]
    assert convs, plan
    return convs[-1]


def chosen_algorithm(plan):
    """The ConvAlgorithm a plan's conv runs with (Conv2D1x1 -> GEMM_1X1)."""
    t = conv_thunk(plan)
    return rlx_cpu.ConvAlgorithm.GEMM_1X1 if t.kind == "conv_1x1" else t.algorithm


# ---------------------------------------------------------------------------
# Worst parity error per algorithm, printed at the end of the session
# ---------------------------------------------------------------------------

WORST_ERRORS = {}


def check_parity(got, want, label, tol=TOL):
    """Assert rel_error(got, want) <= tol and remember the worst per label."""
    err = rel_error(got, want)
    prev = WORST_ERRORS.get(label)
    if prev is None or err > prev:
        WORST_ERRORS[label] = err
    assert err <= tol, f"{label}: rel_error {err:.3e} > {tol:g}"
    return err


def pytest_terminal_summary(terminalreporter):
    if not WORST_ERRORS:
        return
    terminalreporter.section("worst conv parity errors (rel_error vs float64 reference)")
    for label in sorted(WORST_ERRORS):
        terminalreporter.write_line(f"{label:>28}: {WORST_ERRORS[label]:.3e}")


__all__ = ["ALGORITHMS", "TOL", "conv_case", "one_conv_graph", "feeds_for", "run_one_conv",
           "conv_thunk", "chosen_algorithm", "check_parity", "conv_nd", "rel_error"]


def _run_subprocess(script, env, text):
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    out = subprocess.run([sys.executable, "-c", script], env=full, cwd=here, capture_output=True, text=text,
                         timeout=300)
    assert out.returncode == 0, out.stderr if text else out.stderr.decode()
    return out.stdout


def run_script(script, **env):
    """Run `script` in a fresh interpreter with the tests folder importable
    and the given environment variables set; its stdout (asserting it exited
    0, with its stderr as the message)."""
    return _run_subprocess(script, env, True)


def script_array(script, **env):
    """run_script for a script that np.save()s one array to stdout: that array
    (how the SIMD-variant tests compare a level's results with another's)."""
    import io
    return np.load(io.BytesIO(_run_subprocess(script, env, False)))
