"""Thread contract: one plan run from many Python threads at once (a context
per thread), kernels release the GIL, the thread-count settings round-trip,
and scipy's BLAS is kept single-threaded under our OpenMP threads."""
import os
import threading
import time

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime

from conftest import check_parity, conv_case, conv_nd, one_conv_graph

N_PY_THREADS = 4


def _mixed_plan(rng, num_threads=2):
    """x -> winograd 3x3 -> im2col stride 2 -> 1x1 GEMM, outputs the last two."""
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 16, 12, 12))
    w1 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    w3 = rng.standard_normal((8, 16, 1, 1)).astype(np.float32)
    a = g.conv2d(x, w1, padding=1)
    b = g.conv2d(a, w2, stride=2, padding=1)
    c = g.conv2d(b, w3)
    g.output(c, b)
    plan = rlx_cpu.compile(g, num_threads=num_threads)

    def reference(xv):
        bv = conv_nd(conv_nd(xv, w1, None, 1, 1, 1), w2, None, 2, 1, 1)
        return conv_nd(bv, w3), bv
    return plan, reference


def _run_in_threads(fn, n=N_PY_THREADS):
    barrier = threading.Barrier(n)
    errors, results = [], [None] * n

    def body(i):
        try:
            barrier.wait(timeout=30)
            results[i] = fn(i)
        except BaseException as exc:   # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a run thread hung"
    if errors:
        raise errors[0]
    return results


def test_plan_run_from_many_python_threads(rng):
    plan, reference = _mixed_plan(rng)
    assert sorted(t.algorithm.label for t in plan.thunks if t.kind == "conv") == ["im2col", "winograd"]
    inputs = [rng.standard_normal((2, 16, 12, 12)).astype(np.float32) for _ in range(N_PY_THREADS)]
    # Sequential results first: a plan is deterministic for a fixed thread count,
    # so concurrent runs must reproduce them bit for bit.
    expected = [plan.run({"x": x}) for x in inputs]
    for x, (c, b) in zip(inputs, expected):
        rc, rb = reference(x)
        check_parity(c, rc, "threads mixed plan")
        check_parity(b, rb, "threads mixed plan")

    def work(i):
        ctxs = []
        for rep in range(6):
            j = (i + rep) % N_PY_THREADS          # threads run different inputs at once
            got = plan.run({"x": inputs[j]})
            for g_arr, e_arr in zip(got, expected[j]):
                np.testing.assert_array_equal(g_arr, e_arr)
            ctxs.append(plan._context())
        return ctxs

    per_thread = _run_in_threads(work)
    contexts = [c[0] for c in per_thread]
    assert all(c is cs[0] for cs in per_thread for c in cs)      # one context per thread, kept
    assert len({id(c) for c in contexts}) == N_PY_THREADS         # ... and not shared
    assert all(c.arena is not plan._context().arena for c in contexts)


def test_explicit_contexts_from_threads(rng):
    x, w, b = conv_case(rng, 1, 8, 8, (16, 16), (3, 3))
    plan = rlx_cpu.compile(one_conv_graph(x.shape, w, b, padding=1))
    want = conv_nd(x, w, b, 1, 1, 1)
    contexts = [plan.new_context() for _ in range(N_PY_THREADS)]

    def work(i):
        xi = x * (i + 1)
        for _ in range(5):
            y = plan.run({"x": xi}, context=contexts[i])[0]
        return y

    for i, y in enumerate(_run_in_threads(work)):
        check_parity(y, want * (i + 1) - b[None, :, None, None] * i, "explicit contexts")


def test_functional_api_from_many_threads(rng):
    cases = [conv_case(rng, 2, 4, 6, (10, 9), (3, 3)) for _ in range(N_PY_THREADS)]

    def work(i):
        x, w, b = cases[i]
        out = []
        for _ in range(4):
            out.append(rlx_cpu.conv2d(x, w, b, 1, 1))   # one cached plan, weights differ per thread
        return out

    for (x, w, b), ys in zip(cases, _run_in_threads(work)):
        for y in ys:
            check_parity(y, conv_nd(x, w, b, 1, 1, 1), "functional threads")


def _reference_launch(c):
    """A single-thread reference conv launch on [1, c, 64, 64]."""
    g = one_conv_graph((1, c, 64, 64), np.ones((c, c, 3, 3), np.float32), padding=1)
    return rlx_cpu.compile(g, conv_algorithm="reference", num_threads=1).new_context().launches[0]


def _progress_during(launch):
    """Run the launch in a thread while this thread records timestamps in a
    pure-Python loop; returns (kernel seconds, stamps inside, largest gap)."""
    window = []

    def worker():
        t0 = time.perf_counter()
        launch.execute(1)
        window.extend([t0, time.perf_counter()])

    stamps = []
    th = threading.Thread(target=worker)
    th.start()
    while th.is_alive():
        stamps.append(time.perf_counter())
    th.join()
    t0, t1 = window
    inside = [t0] + [s for s in stamps if t0 < s < t1] + [t1]
    return t1 - t0, len(inside) - 2, max(b - a for a, b in zip(inside, inside[1:]))


def test_kernels_release_the_gil():
    """While a long kernel runs in one thread, a pure-Python loop in another
    keeps running.  If the kernel held the GIL the loop could not record a
    single timestamp between the kernel's start and end (the largest gap
    would be the whole kernel); we require the loop to cover the kernel with
    no gap longer than half its duration.  Only progress is measured, not
    speed, and a few attempts are allowed so a load spike on a shared box
    (the loop thread descheduled) cannot fail it; a GIL-holding kernel fails
    every attempt."""
    c, seen = 32, []
    for _ in range(5):
        duration, count, gap = _progress_during(_reference_launch(c))
        seen.append(f"{1e3 * duration:.0f} ms kernel: {count} stamps, largest gap {1e3 * gap:.1f} ms")
        if duration < 0.03 and c < 128:
            c *= 2                       # too short to judge: a bigger conv
            continue
        if count > 10 and gap < 0.5 * duration:
            return
    pytest.fail("no progress while a kernel ran: " + "; ".join(seen))


def test_set_get_num_threads_round_trip(monkeypatch):
    monkeypatch.delenv("RLX_NUM_THREADS", raising=False)
    omp = _runtime.openmp_enabled()
    for n in (1, 3, 2):
        rlx_cpu.set_num_threads(n)
        assert rlx_cpu.get_num_threads() == (n if omp else 1)
        g = one_conv_graph((1, 2, 5, 5), np.ones((2, 2, 3, 3), np.float32))
        assert rlx_cpu.compile(g).num_threads == (n if omp else 1)     # the default for new plans
    # An explicit num_threads beats the default; the default beats the env.
    assert rlx_cpu.compile(g, num_threads=1).num_threads == 1
    monkeypatch.setenv("RLX_NUM_THREADS", "5")
    assert rlx_cpu.get_num_threads() == (2 if omp else 1)


def test_num_threads_from_env(monkeypatch):
    from rlx_cpu import threads
    monkeypatch.setattr(threads, "_explicit", None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)   # only RLX_NUM_THREADS / the CPUs decide here
    monkeypatch.setenv("RLX_NUM_THREADS", " 3 ")
    omp = _runtime.openmp_enabled()
    assert rlx_cpu.get_num_threads() == (3 if omp else 1)
    monkeypatch.delenv("RLX_NUM_THREADS")
    assert rlx_cpu.get_num_threads() == (threads.available_cpus() if omp else 1)


def test_scipy_blas_is_single_threaded_after_compile():
    """OpenMP threads call BLAS; BLAS threads must not nest under them."""
    from threadpoolctl import threadpool_info

    rlx_cpu.compile(one_conv_graph((1, 2, 5, 5), np.ones((2, 2, 3, 3), np.float32)))
    scipy_blas = [lib for lib in threadpool_info()
                  if lib["user_api"] == "blas" and "scipy" in os.path.dirname(lib["filepath"])
                  and "numpy" not in os.path.dirname(lib["filepath"])]
    assert scipy_blas, threadpool_info()
    assert all(lib["num_threads"] == 1 for lib in scipy_blas), scipy_blas


def test_show_config_reports_single_threaded_blas_before_any_compile():
    """A fresh process: show_config() right after import already shows the BLAS
    thread count every plan runs with (1), not OpenBLAS's start-up default."""
    import subprocess
    import sys

    code = ("import rlx_cpu, json; c = rlx_cpu.show_config(mode='dicts'); "
            "print(json.dumps([lib['num_threads'] for lib in c['blas']['libraries']]))")
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(rlx_cpu.__file__))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    counts = __import__("json").loads(res.stdout.strip().splitlines()[-1])
    assert counts, "scipy's BLAS was not identified"
    assert counts == [1] * len(counts), counts


def test_set_num_threads_none_restores_default(monkeypatch):
    monkeypatch.setenv("RLX_NUM_THREADS", "1")
    before = rlx_cpu.get_num_threads()
    rlx_cpu.set_num_threads(2)
    assert rlx_cpu.get_num_threads() == (2 if rlx_cpu._runtime.openmp_enabled() else 1)
    rlx_cpu.set_num_threads(None)
    assert rlx_cpu.get_num_threads() == before == 1
