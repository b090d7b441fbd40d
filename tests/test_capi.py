"""The Cython/C API (rlx_cpu/capi.pxd, rlx_cpu/include/rlx_cpu.h, the capsule
in rlx_cpu._capi): a Cython extension built against the importable rlx_cpu in
a temporary directory runs a plan and a kernel from nogil loops; the C example
(examples/capi_run.c) is compiled with the system compiler and run through
the embedded interpreter."""
import dataclasses
import os
import shutil
import subprocess
import sys
import sysconfig

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _capi
from rlx_cpu.thunks import Slice

from conftest import check_parity, conv_nd

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _env():
    # the subprocess must see the same rlx_cpu as this test (source tree or install)
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(rlx_cpu.__file__)))
    env["PYTHONPATH"] = pkg_parent + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def capi_user(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capi_user")
    for f in ("capi_user.pyx", "setup.py"):
        shutil.copy(os.path.join(HERE, "capi_user", f), tmp / f)
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp, env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sys.path.insert(0, str(tmp))
    try:
        import capi_user
    finally:
        sys.path.remove(str(tmp))
    return capi_user


def _plan(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 3, 8, 8))
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g.output(g.conv2d(x, w, padding=1))
    return rlx_cpu.compile(g, num_threads=1), w


def test_installed_headers():
    inc = rlx_cpu.get_include()
    assert os.path.isfile(os.path.join(inc, "rlx_cpu.h"))
    assert os.path.isfile(os.path.join(os.path.dirname(rlx_cpu.__file__), "capi.pxd"))


def test_cython_extension_runs_a_plan_in_a_nogil_loop(capi_user, rng):
    plan, w = _plan(rng)
    assert capi_user.shapes(plan) == ([(1, 3, 8, 8)], [((1, 4, 8, 8), 0)])
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    out = np.full((1, 4, 8, 8), np.nan, np.float32)
    keep = x.copy()
    assert capi_user.run_loop(plan, x, out, 5) == (0, "")
    np.testing.assert_array_equal(out, plan.run({"x": x})[0])
    check_parity(out, conv_nd(x, w, None, 1, 1, 1), "capi run")
    np.testing.assert_array_equal(x, keep)
    # errors come back as a status and a message, not a crash
    rc, msg = capi_user.run_loop(plan, x, x, 1)
    assert rc == -1 and "shares memory with input 'x'" in msg


def test_cython_extension_runs_a_kernel_over_a_caller_arena(capi_user, rng):
    plan, w = _plan(rng)
    (t,) = plan.thunks
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    # lay the operands out in one caller arena: x, weight, y, scratch
    fields = [f.name for f in dataclasses.fields(t) if isinstance(getattr(t, f.name), Slice)]
    off, repl, where = 0, {}, {}
    for name in fields:
        s = getattr(t, name)
        repl[name] = Slice("arena", off, s.nbytes)
        where[name] = off
        off += -(-s.nbytes // 64) * 64
    k = dataclasses.replace(t, **repl)
    arena = np.zeros(off, np.uint8)
    arena[where["x"]:where["x"] + x.nbytes] = x.view(np.uint8).reshape(-1)
    wbytes = plan._const[t.weight.offset:t.weight.offset + t.weight.nbytes]
    arena[where["weight"]:where["weight"] + wbytes.nbytes] = wbytes
    assert capi_user.kernel_loop(k, arena, 3) == (0, "")
    y = arena[where["y"]:where["y"] + t.y.nbytes].view(np.float32).reshape(1, 4, 8, 8)
    np.testing.assert_array_equal(y, plan.run({"x": x})[0])
    rc, msg = capi_user.kernel_loop(t, arena, 1)          # slices outside the caller arena
    assert rc == -1 and "must be in the caller's arena" in msg


def test_bench_nogil_reports_time_per_iteration(rng):
    plan, _ = _plan(rng)
    ns = _capi.bench_nogil(plan, {"x": np.ones((1, 3, 8, 8), np.float32)}, 20)
    assert ns > 0


def _cc():
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")


@pytest.mark.skipif(sys.platform == "win32", reason="the C example's build line is for POSIX compilers")
def test_c_example_compiles_and_runs(tmp_path):
    cc = _cc()
    assert cc, "no C compiler (cc) on PATH"
    src = os.path.join(ROOT, "examples", "capi_run.c")
    if not os.path.exists(src):                 # the wheel test runs from a copy of tests/ only
        pytest.skip("examples/ is not next to tests/ (installed-wheel run)")
    cfg = sysconfig.get_config_vars()
    inc = [sysconfig.get_paths()["include"], rlx_cpu.get_include()]
    libdir = cfg.get("LIBDIR") or ""
    ver = cfg.get("LDVERSION") or cfg.get("VERSION")
    exe = tmp_path / "capi_run"
    cmd = [cc, src, "-o", str(exe)] + [f"-I{i}" for i in inc] + [f"-L{libdir}", f"-lpython{ver}",
                                                                    f"-Wl,-rpath,{libdir}"]
    cmd += (cfg.get("LIBS") or "").split() + (cfg.get("SYSLIBS") or "").split()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, " ".join(cmd) + "\n" + r.stderr[-3000:]
    env = _env()
    env["PYTHONHOME"] = sys.base_prefix
    env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"]] + [p for p in sys.path if p])
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "max |C - Python| = 0" in r.stdout, r.stdout


def test_bench_cli_nogil(capsys):
    from rlx_cpu.__main__ import main
    assert main(["bench", "--nogil", "-k", "20", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("run_into (Python, same arrays)", "C API run, nogil loop"):
        line = next(l for l in out.splitlines() if l.startswith(row))
        assert float(line.split()[-1]) > 0
