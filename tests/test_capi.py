"""The Cython/C API (rlx_cpu/capi.pxd, rlx_cpu/include/rlx_cpu.h, the capsule
in rlx_cpu._capi): a Cython extension built against the importable rlx_cpu in
a temporary directory runs a plan and kernels from nogil loops (a thunk
record, and the six host-convention entries over a caller arena, checked
against the float64 references); the C example (examples/capi_run.c) is
compiled with the system compiler and run through the embedded interpreter."""
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

import reference as R
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


# -- host-convention kernel entries ---------------------------------------------

# Argument order of each entry (the interpreter's execute_*_f32 host
# functions without their trailing base), written out here independently of
# rlx_cpu.capi_kernels.
ORDER = {
    "conv2d_forward_f32": "src weight dst n c_in h w c_out h_out w_out kh kw sh sw ph pw dh dw groups",
    "conv3d_forward_f32": "src weight dst n c_in d h w c_out d_out h_out w_out kd kh kw sd sh sw pd ph pw "
                          "dd dh dw groups",
    "conv_transpose2d_nchw_f32": "src weight dst n c_in h w_in c_out h_out w_out kh kw sh sw ph pw dh dw groups",
    "conv_transpose3d_ncdhw_f32": "src weight dst n c_in d h w_in c_out d_out h_out w_out kd kh kw sd sh sw "
                                  "pd ph pw dd dh dw groups",
    "maxpool2d_backward_f32": "x dy dx n c h w h_out w_out kh kw sh sw ph pw",
    "resize_nearest_2x_f32": "src dst n c h w",
}


def _conv_case(rng, nd, transposed, n, c_in, c_out, sp, k, s, p, d, g, out_pad=None):
    axes = "hw" if nd == 2 else "dhw"
    if transposed:
        out = [(i - 1) * st - 2 * pa + di * (kk - 1) + 1 + op
               for i, kk, st, pa, di, op in zip(sp, k, s, p, d, out_pad)]
        w = rng.standard_normal((c_in, c_out // g) + tuple(k)).astype(np.float32)
    else:
        out = [(i + 2 * pa - di * (kk - 1) - 1) // st + 1 for i, kk, st, pa, di in zip(sp, k, s, p, d)]
        w = rng.standard_normal((c_out, c_in // g) + tuple(k)).astype(np.float32)
    x = rng.standard_normal((n, c_in) + tuple(sp)).astype(np.float32)
    dims = dict(n=n, c_in=c_in, c_out=c_out, groups=g)
    for i, ax in enumerate(axes):
        dims["w_in" if transposed and ax == "w" else ax] = sp[i]
        dims.update({ax + "_out": out[i], "k" + ax: k[i], "s" + ax: s[i], "p" + ax: p[i], "d" + ax: d[i]})
    if transposed:
        want = R.conv_transpose_nd(x, w, None, s, p, p, d, g, out_pad)
    else:
        want = conv_nd(x, w, None, s, p, p, d, g)
    assert want.shape == (n, c_out) + tuple(out)
    return dims, {"src": x, "weight": w}, ("dst", want)


def _spec_cases(rng):
    """(entry, label, dims, {input operand: array}, (output operand, float64 reference), tolerance)."""
    cases = []
    for label, geo in [("im2col s2x1 d1x2 g2", (2, 4, 6, (9, 7), (3, 3), (2, 1), (1, 1), (1, 2), 2)),
                       ("3x3 s1 p1", (1, 8, 8, (12, 12), (3, 3), (1, 1), (1, 1), (1, 1), 1)),
                       ("1x1", (2, 16, 8, (5, 6), (1, 1), (1, 1), (0, 0), (1, 1), 1)),
                       ("depthwise", (1, 6, 6, (8, 7), (3, 3), (1, 2), (1, 1), (1, 1), 6))]:
        cases.append(("conv2d_forward_f32", label) + _conv_case(rng, 2, False, *geo) + (rlx_cpu_tol(),))
    cases.append(("conv3d_forward_f32", "g2") + _conv_case(
        rng, 3, False, 1, 4, 4, (5, 6, 5), (3, 2, 3), (1, 2, 1), (1, 0, 1), (1, 1, 1), 2) + (rlx_cpu_tol(),))
    cases.append(("conv_transpose2d_nchw_f32", "s2 p1 g2 output_padding 1x0") + _conv_case(
        rng, 2, True, 2, 4, 6, (5, 4), (3, 3), (2, 2), (1, 1), (1, 1), 2, (1, 0)) + (rlx_cpu_tol(),))
    cases.append(("conv_transpose2d_nchw_f32", "dilation 2") + _conv_case(
        rng, 2, True, 1, 3, 2, (4, 5), (2, 3), (1, 2), (0, 1), (2, 1), 1, (1, 1)) + (rlx_cpu_tol(),))
    cases.append(("conv_transpose3d_ncdhw_f32", "s2 p1 g2") + _conv_case(
        rng, 3, True, 1, 4, 2, (3, 4, 3), (3, 3, 2), (2, 2, 1), (1, 1, 0), (1, 1, 1), 2, (1, 0, 0))
        + (rlx_cpu_tol(),))
    for label, (n, c, h, w, k, s, p, ceil) in [("k3 s2 p1", (2, 3, 9, 8, 3, 2, 1, False)),
                                                ("k2 s2 ceil", (1, 2, 7, 9, 2, 2, 0, True))]:
        x = rng.permutation(n * c * h * w).astype(np.float32).reshape(n, c, h, w)   # no ties
        h_out = R.pool_out_size(h, k, s, p, p, 1, ceil)
        w_out = R.pool_out_size(w, k, s, p, p, 1, ceil)
        dy = rng.standard_normal((n, c, h_out, w_out)).astype(np.float32)
        want = R.max_pool_nd_backward(x, dy, (k, k), (s, s), (p, p), (p, p), 1, ceil)
        dims = dict(n=n, c=c, h=h, w=w, h_out=h_out, w_out=w_out, kh=k, kw=k, sh=s, sw=s, ph=p, pw=p)
        # dx sums at most a few float32 dy values per element
        cases.append(("maxpool2d_backward_f32", label, dims, {"x": x, "dy": dy}, ("dx", want), 1e-6))
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    cases.append(("resize_nearest_2x_f32", "2x3x4x5", dict(n=2, c=3, h=4, w=5), {"src": x},
                  ("dst", R.upsample_nearest2x(x)), 0.0))
    return cases


def rlx_cpu_tol():
    return 1e-4      # float32 GEMM paths, relative to the magnitude of the sums (conftest.TOL)


def _arena(inputs, out_name, out_shape, rng, start=12, gap=20):
    """Lay the operands out at 4-byte (not 64-byte) aligned offsets with gaps,
    over random bytes; returns (arena, {operand: offset})."""
    off, where = start, {}
    for name, a in list(inputs.items()) + [(out_name, np.zeros(out_shape, np.float32))]:
        where[name] = off
        off += a.nbytes + gap
    arena = rng.integers(0, 256, off + 8, dtype=np.uint8)
    for name, a in inputs.items():
        arena[where[name]:where[name] + a.nbytes] = a.view(np.uint8).reshape(-1)
    return arena, where


@pytest.mark.parametrize("case", range(11))
def test_host_convention_kernels_over_a_caller_arena(capi_user, case):
    rng = np.random.default_rng(1000 + case)
    fn, label, dims, inputs, (out_name, want), tol = _spec_cases(rng)[case]
    arena, where = _arena(inputs, out_name, want.shape, rng)
    vals = dict(dims, **where)
    args = tuple(vals[a] for a in ORDER[fn].split())
    before = arena.copy()
    out_start = where[out_name]
    out_end = out_start + 4 * want.size
    # a second arena (another address, same layout): the kernel re-binds to it
    other = before.copy()
    rc, msg, need = capi_user.spec_kernel_loop(fn, args, [arena, other], 3, 1)
    assert (rc, msg) == (0, ""), f"{fn} {label}"
    assert need == out_end              # the output is the last operand of this layout
    for a in (arena, other):
        got = a[out_start:out_end].view(np.float32).reshape(want.shape)
        if tol == 0:
            np.testing.assert_array_equal(got, want.astype(np.float32))
        else:
            check_parity(got, want, f"capi {fn}", tol)
        # nothing outside the output's bytes changed (inputs, gaps, the tail)
        np.testing.assert_array_equal(a[:out_start], before[:out_start])
        np.testing.assert_array_equal(a[out_end:], before[out_end:])
    # nthreads <= 0: the kernel's own thread count; the result is the same
    again = before.copy()
    assert capi_user.spec_kernel_loop(fn, args, [again], 1, 0)[:2] == (0, "")
    np.testing.assert_array_equal(again, arena)


def _bad_args(fn, **change):
    base = {
        "conv2d_forward_f32": dict(src=0, weight=4096, dst=8192, n=2, c_in=4, h=9, w=7, c_out=6, h_out=5,
                                   w_out=5, kh=3, kw=3, sh=2, sw=1, ph=1, pw=1, dh=1, dw=2, groups=2),
        "conv3d_forward_f32": dict(src=0, weight=4096, dst=8192, n=1, c_in=4, d=5, h=6, w=5, c_out=4, d_out=5,
                                   h_out=3, w_out=5, kd=3, kh=2, kw=3, sd=1, sh=2, sw=1, pd=1, ph=0, pw=1,
                                   dd=1, dh=1, dw=1, groups=2),
        "conv_transpose2d_nchw_f32": dict(src=0, weight=4096, dst=8192, n=2, c_in=4, h=5, w_in=4, c_out=6,
                                          h_out=10, w_out=7, kh=3, kw=3, sh=2, sw=2, ph=1, pw=1, dh=1, dw=1,
                                          groups=2),
        "conv_transpose3d_ncdhw_f32": dict(src=0, weight=4096, dst=8192, n=1, c_in=4, d=3, h=4, w_in=3, c_out=2,
                                           d_out=6, h_out=7, w_out=5, kd=3, kh=3, kw=3, sd=2, sh=2, sw=2, pd=1,
                                           ph=1, pw=1, dd=1, dh=1, dw=1, groups=2),
        "maxpool2d_backward_f32": dict(x=0, dy=4096, dx=8192, n=2, c=3, h=9, w=8, h_out=5, w_out=4, kh=3, kw=3,
                                       sh=2, sw=2, ph=1, pw=1),
        "resize_nearest_2x_f32": dict(src=0, dst=4096, n=2, c=3, h=4, w=5),
    }[fn]
    base.update(change)
    return tuple(base[a] for a in ORDER[fn].split())


BAD = [
    ("conv2d_forward_f32", dict(src=2), ["src = 2", "multiples of 4"]),
    ("conv2d_forward_f32", dict(weight=-4), ["weight = -4", "non-negative"]),
    ("conv2d_forward_f32", dict(c_in=0), ["c_in=0", ">= 1"]),
    ("conv2d_forward_f32", dict(groups=3), ["groups=3", "c_in=4"]),
    ("conv2d_forward_f32", dict(c_out=5), ["groups=2", "c_out=5"]),
    ("conv2d_forward_f32", dict(h_out=6), ["h_out = 6", "= 5"]),
    ("conv2d_forward_f32", dict(kh=12, h_out=1), ["kernel extent", "12", "11"]),
    ("conv2d_forward_f32", dict(dst=2000), ["dst bytes [2000, 3200)", "src bytes [0, 2016)", "read what it writes"]),
    ("conv2d_forward_f32", dict(n=2 ** 32 - 1, c_in=2 ** 32 - 2), ["src [4294967295, 4294967294, 9, 7]",
                                                                  "Py_ssize_t"]),
    ("conv3d_forward_f32", dict(d_out=4), ["d_out = 4", "= 5"]),
    ("conv3d_forward_f32", dict(sd=0), ["sd=0"]),
    ("conv_transpose2d_nchw_f32", dict(h_out=11), ["h_out = 11", "output_padding", "= 2", "[0, 2)"]),
    ("conv_transpose2d_nchw_f32", dict(w_out=6), ["w_out = 6", "output_padding", "= -1"]),
    ("conv_transpose2d_nchw_f32", dict(c_out=5), ["groups=2", "c_out=5"]),
    ("conv_transpose3d_ncdhw_f32", dict(d_out=7), ["d_out = 7", "output_padding", "= 7 - 5 = 2", "[0, 2)"]),
    ("conv_transpose3d_ncdhw_f32", dict(dst=8), ["dst bytes [8,", "src bytes [0, 576)"]),
    ("maxpool2d_backward_f32", dict(h_out=6), ["(h_out, w_out) = (6, 4)", "(5, 4)"]),
    ("maxpool2d_backward_f32", dict(dx=100), ["dx bytes [100,", "x bytes [0,"]),
    ("maxpool2d_backward_f32", dict(kh=1, kw=1, h_out=6, w_out=5), ["max_pool2d_backward", "only padding"]),
    ("resize_nearest_2x_f32", dict(dst=1), ["dst = 1"]),
    ("resize_nearest_2x_f32", dict(n=2 ** 20, c=2 ** 20, h=2 ** 20), ["Py_ssize_t"]),
    ("resize_nearest_2x_f32", dict(dst=200), ["dst bytes [200,", "overlap"]),
]


@pytest.mark.parametrize("fn,change,words", BAD, ids=[f"{f}-{'-'.join(c)}" for f, c, _ in BAD])
def test_host_convention_bad_arguments_give_null_and_a_message(capi_user, fn, change, words):
    arena = np.zeros(1 << 16, np.uint8)
    rc, msg, need = capi_user.spec_kernel_loop(fn, _bad_args(fn, **change), [arena], 1)
    assert rc == -1 and need == -1, msg
    assert msg.startswith("ValueError: " + fn + ": "), msg
    for w in words:
        assert w in msg, (w, msg)


def test_host_convention_good_arguments_of_the_bad_argument_table(capi_user):
    # the unchanged arguments of BAD are valid: each failure above is the change's
    for fn in ORDER:
        arena = np.zeros(1 << 16, np.uint8)
        assert capi_user.spec_kernel_loop(fn, _bad_args(fn), [arena], 1)[:2] == (0, "")
    # inputs may overlap each other (both are only read); the arena must reach the output's end
    arena = np.zeros(1 << 16, np.uint8)
    args = _bad_args("conv_transpose3d_ncdhw_f32", weight=8, dst=20000)
    assert capi_user.spec_kernel_loop("conv_transpose3d_ncdhw_f32", args, [arena], 1) == (0, "", 20000 + 4 * 420)


def test_host_convention_kernel_run_rejects_a_misaligned_base(capi_user):
    arena = np.zeros(1 << 16, np.uint8)
    rc, msg, _ = capi_user.spec_kernel_loop("resize_nearest_2x_f32", _bad_args("resize_nearest_2x_f32"),
                                            [arena], 1, 1, 2)
    assert rc == -1 and "kernel_run: arena base" in msg and "not 4-byte aligned" in msg, msg


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
    line = next(l for l in r.stdout.splitlines() if l.startswith("kernel conv2d_forward_f32:"))
    assert float(line.split("=")[-1]) <= 1e-4, line


def test_bench_cli_nogil(capsys):
    from rlx_cpu.__main__ import main
    assert main(["bench", "--nogil", "-k", "20", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    for row in ("run_into (Python, same arrays)", "C API run, nogil loop"):
        line = next(l for l in out.splitlines() if l.startswith(row))
        assert float(line.split()[-1]) > 0
