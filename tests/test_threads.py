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


def _mixed_plan(rng, num_threads=2, debug=None):
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
    # the NCHW algorithms (on 16 channels the blocked_layout pass would move
    # all three convs to the blocked kernels; test_blocked.py runs those from
    # two threads)
    plan = rlx_cpu.compile(g, num_threads=num_threads, debug=debug,
                           passes=[p for p in rlx_cpu.passes.DEFAULT_PASSES if p != "blocked_layout"])

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
    # (which Winograd tile size auto takes here is test_winograd_f4.py's matter)
    algos = sorted(t.algorithm.label for t in plan.thunks if t.kind == "conv")
    assert algos[0] == "im2col" and algos[1] in ("winograd", "winograd_f4") and len(algos) == 2
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


# ---------------------------------------------------------------------------
# adaptive thread count: the policy, and results that do not depend on it
# ---------------------------------------------------------------------------

def _drive(chooser, seconds_for, runs):
    """Feed `runs` runs to a ThreadChooser; seconds_for(threads, k) is the
    time of run k on that many threads.  Returns the thread count of each run."""
    used = []
    for k in range(runs):
        t = chooser.next_threads()
        used.append(t)
        chooser.record(seconds_for(t, k))
    return used


def test_adaptive_choice_keeps_all_threads_on_a_quiet_machine():
    ch = _runtime.ThreadChooser(2)
    used = _drive(ch, lambda t, k: 1.0 if t == 2 else 1.8, 5000)
    # only the probes run on one thread, and they thin out to one per 512 runs
    assert ch.stats["switches"] == 0
    assert used.count(1) / len(used) < 0.01, ch.stats
    assert used[-500:].count(2) >= 497


def test_adaptive_choice_falls_back_to_one_thread_under_contention():
    ch = _runtime.ThreadChooser(2)
    used = _drive(ch, lambda t, k: 3.0 if t == 2 else 2.0, 3000)
    assert used[:16] == [2] * 16                 # starts on the plan's count
    assert used[16:22] == [1] * 6                # the first probe (six runs), then the switch
    assert ch.stats["switches"] == 1
    assert used[22:].count(2) / len(used[22:]) < 0.01


def test_adaptive_choice_follows_a_competitor_that_comes_and_goes():
    ch = _runtime.ThreadChooser(2)
    busy = range(1000, 3000)

    def seconds(t, k):
        if k in busy:
            return 4.0 if t == 2 else 2.0
        return 1.0 if t == 2 else 2.0
    used = _drive(ch, seconds, 5000)
    # the competitor arrives at run 1000: the mean of the last five 2-thread
    # runs drifts past 1.5x its value at the last decision within a few runs,
    # the 1-thread probe wins and the runs move there; 2-thread probes then
    # stop at their first slow run and back off (16, 32, ... 512 runs apart),
    # so under 2% of the busy runs use 2 threads
    assert used[1000] == 2 and used[1012:1020] == [1] * 8
    assert used[1000:3000].count(2) < 0.02 * 2000
    # it leaves at run 3000: the next periodic probe (<= 512 runs) moves back
    back = used.index(2, 3000)
    assert back <= 3000 + 512 and used[back:back + 6] == [2] * 6
    assert used[back + 6:].count(1) < 0.02 * len(used[back + 6:])
    assert ch.stats["switches"] == 2


def test_adaptive_probe_that_is_plainly_losing_costs_one_run():
    # quiet: the 1-thread probe takes 1.8x the 2-thread runs, past the abort
    # ratio (1.25x), so each probe is one run, after 16, 32, 64 ... runs
    ch = _runtime.ThreadChooser(2)
    used = _drive(ch, lambda t, k: 1.0 if t == 2 else 1.8, 1000)
    probes = [k for k, t in enumerate(used) if t == 1]
    assert probes[:4] == [16, 16 + 1 + 32, 16 + 1 + 32 + 1 + 64, 16 + 1 + 32 + 1 + 64 + 1 + 128]
    # a probe whose runs are close (1.1x) runs all six before deciding
    ch = _runtime.ThreadChooser(2)
    used = _drive(ch, lambda t, k: 1.0 if t == 2 else 1.1, 40)
    assert used[16:22] == [1] * 6 and used[22] == 2 and ch.stats["switches"] == 0


def test_adaptive_choice_needs_a_clear_gain_to_switch():
    ch = _runtime.ThreadChooser(2)
    used = _drive(ch, lambda t, k: 1.0 if t == 2 else 0.95, 2000)    # 5%: within noise
    assert ch.stats["switches"] == 0
    assert used[-500:].count(1) <= 6                 # at most one (six-run) probe per 512 runs


def test_thread_chooser_rejects_a_single_thread_plan():
    with pytest.raises(ValueError, match="full must be >= 2"):
        _runtime.ThreadChooser(1)


def _invariance_cases(rng):
    """One small graph per kernel family (and per conv algorithm), sized past
    the kernels' small-work thresholds so that 2 threads really split work."""
    f32 = np.float32

    def r(*s):
        return rng.standard_normal(s).astype(f32)
    x4 = (2, 16, 32, 32)
    cases = {
        # auto: F(4x4,3x3) at 128 4x4 tiles, F(2x2,3x3) at 25 (test_winograd_f4.py checks the choice)
        "conv2d-winograd-f4": (x4, lambda g, x: g.conv2d(x, r(16, 16, 3, 3), r(16), padding=1)),
        "conv2d-winograd-f2": ((1, 16, 20, 20), lambda g, x: g.conv2d(x, r(16, 16, 3, 3), r(16), padding=1)),
        # 16 tiles, one block for two bound threads: run staged (the tile
        # GEMMs split by transform position) when they are on the microkernel
        "conv2d-winograd-f2-staged-b1": ((1, 64, 7, 7), lambda g, x: g.relu(g.conv2d(x, r(64, 64, 3, 3), r(64),
                                                                                    padding=1))),
        "conv2d-im2col-s2": (x4, lambda g, x: g.conv2d(x, r(24, 16, 3, 3), stride=2, padding=1)),
        "conv2d-1x1": (x4, lambda g, x: g.conv2d(x, r(32, 16, 1, 1))),
        # batch 1: the implicit im2col copy is filled by rows, its columns split
        "conv2d-implicit-s2-b1": ((1, 3, 45, 45), lambda g, x: g.relu(g.conv2d(x, r(16, 3, 7, 7), r(16), stride=2,
                                                                                padding=3))),
        # stride 1: lowered to a forward conv with the flipped weight
        "conv_transpose2d-s1": (x4, lambda g, x: g.conv_transpose2d(x, r(16, 8, 3, 3), r(8), padding=1)),
        "conv2d-1x1-microkernel-b1": ((1, 64, 21, 23), lambda g, x: g.conv2d(x, r(40, 64, 1, 1), r(40))),
        "conv2d-1x1-microkernel-relu-b1": ((1, 64, 21, 23),
                                           lambda g, x: g.relu(g.conv2d(x, r(40, 64, 1, 1), r(40)))),
        "conv2d-1x1-channels-b1": ((1, 96, 7, 7), lambda g, x: g.clip(g.conv2d(x, r(84, 96, 1, 1), r(84)),
                                                                      alpha=0.0, beta=6.0)),
        # 24 output channels on a 16-column multiple: X read in place, clip epilogue in the tile
        "conv2d-1x1-inplace-b1": ((1, 48, 16, 20), lambda g, x: g.clip(g.conv2d(x, r(24, 48, 1, 1), r(24)),
                                                                       alpha=0.0, beta=6.0)),
        # 7x7 channel panels over 200 input channels: K blocks of 40 rows
        "conv2d-1x1-channels-k200-b1": ((1, 200, 7, 7), lambda g, x: g.conv2d(x, r(40, 200, 1, 1), r(40))),
        "conv2d-1x1-channels-b3": ((3, 40, 5, 5), lambda g, x: g.conv2d(x, r(50, 40, 1, 1))),
        "conv2d-depthwise": (x4, lambda g, x: g.conv2d(x, r(16, 1, 3, 3), padding=1, groups=16)),
        "conv2d-depthwise-s2": (x4, lambda g, x: g.conv2d(x, r(16, 1, 3, 3), r(16), stride=2, padding=1,
                                                          groups=16)),
        # stride 1, batch 1, 6 planes of 37 rows: the two runs split a plane
        "conv2d-depthwise5-s1-b1-epilogue": ((1, 6, 37, 30), lambda g, x: g.clip(
            g.conv2d(x, r(6, 1, 5, 5), r(6), padding=2, groups=6), 0.0, 6.0)),
        "conv2d-depthwise5-s2-b1": ((1, 24, 33, 40), lambda g, x: g.conv2d(x, r(24, 1, 5, 5), stride=2,
                                                                           padding=2, groups=24)),
        # channel-block kernel: 20 channels (a partial last block of 8), the
        # residual and activation fused; at stride 2 too; 3 channels of 40
        # rows in strips of rows
        "conv2d-depthwise-cb-b1-residual": ((1, 20, 14, 14), lambda g, x: g.relu(g.add(
            g.conv2d(x, r(20, 1, 3, 3), r(20), padding=1, groups=20), x))),
        "conv2d-depthwise5-cb-s2-b1-epilogue": ((1, 21, 15, 13), lambda g, x: g.hard_swish(
            g.conv2d(x, r(21, 1, 5, 5), r(21), stride=2, padding=2, groups=21))),
        "conv2d-depthwise-cb-strips-b1": ((1, 3, 40, 37), lambda g, x: g.conv2d(x, r(3, 1, 3, 3), padding=1,
                                                                               groups=3)),
        # planes of more than 64x64 outputs keep the per-plane kernels
        "conv2d-depthwise5-s1-large-b1-epilogue": ((1, 2, 70, 66), lambda g, x: g.clip(
            g.conv2d(x, r(2, 1, 5, 5), r(2), padding=2, groups=2), 0.0, 6.0)),
        "conv2d-depthwise-s2-large-b1-epilogue": ((1, 3, 140, 131), lambda g, x: g.relu(
            g.conv2d(x, r(3, 1, 3, 3), r(3), stride=2, padding=1, groups=3))),
        "conv2d-grouped-dilated": (x4, lambda g, x: g.conv2d(x, r(16, 4, 3, 3), padding=2, dilation=2,
                                                             groups=4)),
        "conv1d": ((2, 16, 600), lambda g, x: g.conv1d(x, r(16, 16, 5), padding=2)),
        "conv3d": ((1, 8, 8, 16, 16), lambda g, x: g.conv3d(x, r(8, 8, 3, 3, 3), padding=1)),
        "conv_transpose2d": (x4, lambda g, x: g.conv_transpose2d(x, r(16, 8, 4, 4), stride=2, padding=1)),
        "conv_transpose1d": ((2, 16, 300), lambda g, x: g.conv_transpose1d(x, r(16, 8, 8), stride=4)),
        "conv_transpose3d": ((1, 8, 6, 8, 8), lambda g, x: g.conv_transpose3d(x, r(8, 4, 4, 4, 4), stride=2,
                                                                               padding=1)),
        "conv2d_backward_input-b1": ((1, 16, 32, 32), lambda g, x: g.conv2d_backward_input(
            x, r(16, 8, 3, 3), (1, 8, 32, 32), padding=1)),
        "conv2d_backward_weight-b1": ((1, 16, 32, 32), lambda g, x: g.conv2d_backward_weight(
            x, r(1, 8, 32, 32), (8, 16, 3, 3), padding=1)),
        "conv2d_backward_weight-batch5": ((5, 16, 16, 16), lambda g, x: g.conv2d_backward_weight(
            x, r(5, 8, 16, 16), (8, 16, 3, 3), padding=1)),
        "conv2d_backward_weight-depthwise": (x4, lambda g, x: g.conv2d_backward_weight(
            x, r(2, 16, 32, 32), (16, 1, 3, 3), padding=1, groups=16)),
        # stride 1 conv2d/conv1d: the wide kernel (odd width, 6 = 4 + 2 output channels per item)
        "conv2d_backward_weight-wide": ((3, 8, 13, 15), lambda g, x: g.conv2d_backward_weight(
            x, r(3, 12, 13, 15), (12, 8, 3, 3), padding=1)),
        "conv2d_backward_weight-wide-grouped": ((2, 8, 9, 11), lambda g, x: g.conv2d_backward_weight(
            x, r(2, 12, 9, 11), (12, 4, 3, 3), padding=1, groups=2)),
        "conv1d_backward_weight-wide": ((2, 8, 1500), lambda g, x: g.conv1d_backward_weight(
            x, r(2, 16, 1500), (16, 8, 5), padding=2)),
        # strided: im2col + sgemm, image ranges with partial sums
        "conv2d_backward_weight-s2": ((4, 8, 16, 16), lambda g, x: g.conv2d_backward_weight(
            x, r(4, 16, 8, 8), (16, 8, 3, 3), stride=2, padding=1)),
        "conv3d_backward_weight": ((2, 4, 8, 12, 12), lambda g, x: g.conv3d_backward_weight(
            x, r(2, 8, 8, 12, 12), (8, 4, 3, 3, 3), padding=1)),
        "max_pool2d-indices": (x4, lambda g, x: g.max_pool2d(x, 3, 2, 1, return_indices=True)[0]),
        "max_pool2d-indices-k2s2": (x4, lambda g, x: g.max_pool2d(x, 2, return_indices=True)[1]),
        "avg_pool2d-ceil": (x4, lambda g, x: g.avg_pool2d(x, 3, 2, 1, ceil_mode=True,
                                                          count_include_pad=False)),
        "max_pool3d": ((1, 8, 8, 16, 16), lambda g, x: g.max_pool3d(x, 2)),
        "avg_pool2d-k2s2-b1": ((1, 16, 34, 38), lambda g, x: g.avg_pool2d(x, 2)),
        "max_pool2d-k2s2-b1": ((1, 16, 34, 38), lambda g, x: g.max_pool2d(x, 2)),
        "avg_pool3d-ceil": ((1, 8, 7, 15, 17), lambda g, x: g.avg_pool3d(x, 3, 2, 1, ceil_mode=True)),
        "avg_pool1d-ceil": ((2, 8, 501), lambda g, x: g.avg_pool1d(x, 3, 2, 1, ceil_mode=True)),
        "max_pool1d-long": ((1, 2, 40001), lambda g, x: g.max_pool1d(x, 4, 2)),
        "avg_pool1d-long-ceil": ((1, 2, 40001), lambda g, x: g.avg_pool1d(x, 3, 2, 1, ceil_mode=True)),
        "global_avg_pool": (x4, lambda g, x: g.global_avg_pool(x)),
        "global_avg_pool-odd-planes": ((1, 33, 15, 15), lambda g, x: g.global_avg_pool(x)),
        "max_pool2d_backward": (x4, lambda g, x: g.max_pool2d_backward(x, r(2, 16, 16, 16), 2)),
        "max_pool2d_backward-k2s2-b1": ((1, 2, 32, 33), lambda g, x: g.max_pool2d_backward(
            x, r(1, 2, 16, 17), 2, ceil_mode=True)),
        "max_pool2d_backward-k3s2-b1": ((1, 2, 33, 40), lambda g, x: g.max_pool2d_backward(
            x, r(1, 2, 17, 21), 3, 2, 1, ceil_mode=True)),
        "avg_pool2d_backward-k2s2-b1": ((1, 3, 16, 16), lambda g, x: g.avg_pool2d_backward(x, (1, 3, 32, 32), 2)),
        "max_pool_backward_indices": (x4, lambda g, x: g.max_pool_backward_indices(
            r(2, 16, 16, 16), g.max_pool2d(x, 3, 2, 1, return_indices=True)[1])),
        "avg_pool2d_backward": ((2, 16, 17, 17), lambda g, x: g.avg_pool2d_backward(x, x4, 3, 2, 1,
                                                                                     ceil_mode=True)),
        "avg_pool1d_backward-long-line": ((2, 4, 2050), lambda g, x: g.avg_pool1d_backward(x, (2, 4, 4100), 3, 2,
                                                                                             1)),
        "upsample_nearest2x": (x4, lambda g, x: g.upsample_nearest2x(x)),
        "interpolate-nearest": (x4, lambda g, x: g.interpolate(x, scale_factor=1.5)),
        "im2col": (x4, lambda g, x: g.im2col(x, 3, padding=1)),
        "im2col-onnx": (x4, lambda g, x: g.im2col(x, 3, 1, 1, layout="onnx")),
        "im2col-onnx-s2": (x4, lambda g, x: g.im2col(x, 3, 2, 1, layout="onnx")),
        "col2im-onnx": ((1, 16 * 9, 32 * 32), lambda g, x: g.col2im(x, (32, 32), 3, 1, 1, layout="onnx")),
        "linear": ((64, 512), lambda g, x: g.linear(x, r(256, 512), r(256))),
        "linear_backward_weight": ((64, 512), lambda g, x: g.linear_backward_weight(x, r(64, 256))),
        "softmax": ((64, 1024), lambda g, x: g.softmax(x, axis=1)),
        "softmax_cross_entropy": ((256, 128), lambda g, x: g.softmax_cross_entropy(
            x, g.constant(rng.integers(0, 128, 256).astype(f32)))),
        "reduce_mean": (x4, lambda g, x: g.reduce_mean(x, axes=(2, 3))),
        "batch_norm": (x4, lambda g, x: g.batch_norm(x, r(16), r(16), r(16), np.abs(r(16)) + 0.5)),
        "bias_grad": (x4, lambda g, x: g.bias_grad(x)),
        "bias_grad-short-planes": ((64, 16, 3, 3), lambda g, x: g.bias_grad(x)),
        "bias_add-relu_backward": (x4, lambda g, x: g.relu_backward(g.bias_add(x, r(16)), g.relu(x))),
        "elementwise": (x4, lambda g, x: g.hard_swish(g.leaky_relu(g.add(x, g.relu(x)), 0.1))),
        "tensor": (x4, lambda g, x: g.concat([g.transpose(x, (0, 2, 3, 1)),
                                              g.transpose(g.relu(x), (0, 2, 3, 1))], axis=3)),
        "pad-reflect": (x4, lambda g, x: g.pad(x, ((0, 0), (0, 0), (2, 1), (1, 2)), mode="reflect")),
    }
    return cases


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="single-threaded build (no OpenMP)")
def test_results_do_not_depend_on_the_thread_count_a_run_uses(rng):
    # The adaptive choice runs a plan's launches, bound for num_threads, on
    # one thread at times: every kernel must give bitwise the same result.
    for name, (shape, build) in _invariance_cases(rng).items():
        g = rlx_cpu.Graph()
        g.output(build(g, g.input("x", shape)))
        plan = rlx_cpu.compile(g, num_threads=2, adaptive_threads=False, debug=False)
        ctx = plan.new_context()
        ctx.load({"x": rng.standard_normal(shape).astype(np.float32)})
        seq = _runtime.LaunchSequence(ctx.launches)
        got = {}
        for t in (2, 1, 2):
            seq.run(t)
            got.setdefault(t, []).append([o.copy() for o in ctx.outputs])
        for a, b, c in zip(got[2][0], got[1][0], got[2][1]):
            np.testing.assert_array_equal(a, c, err_msg=f"{name}: two 2-thread runs differ")
            np.testing.assert_array_equal(a, b, err_msg=f"{name}: 1-thread run of the 2-thread plan differs")


def test_training_step_is_the_same_at_either_thread_count():
    from rlx_cpu.training import build_cnn_training, synthetic_digits
    xs, ys = synthetic_digits(64, seed=3)
    params = []
    for forced in (1, 2):
        tr = build_cnn_training(32, num_threads=2)
        seq = _runtime.LaunchSequence(tr._ctx.launches)
        tr._ctx.sequence = seq
        for i in range(2):
            tr._load({"x": xs[i * 32:(i + 1) * 32], "labels": ys[i * 32:(i + 1) * 32]})
            seq.run(forced)
        params.append([np.array(g).copy() for g in tr.gradients()])
    for a, b in zip(*params):
        np.testing.assert_array_equal(a, b)


def test_adaptive_threads_setting(monkeypatch, rng):
    g = rlx_cpu.Graph()
    g.output(g.relu(g.input("x", (4, 4))))
    assert rlx_cpu.compile(g, num_threads=2).adaptive_threads is True
    assert rlx_cpu.compile(g, num_threads=2, adaptive_threads=False).adaptive_threads is False
    monkeypatch.setenv("RLX_ADAPTIVE_THREADS", "0")
    plan = rlx_cpu.compile(g, num_threads=2)
    assert plan.adaptive_threads is False
    import pickle
    assert pickle.loads(pickle.dumps(plan)).adaptive_threads is False
    monkeypatch.setenv("RLX_ADAPTIVE_THREADS", "maybe")
    with pytest.raises(ValueError, match="RLX_ADAPTIVE_THREADS must be '0' or '1'.*'maybe'"):
        rlx_cpu.compile(g)
    monkeypatch.delenv("RLX_ADAPTIVE_THREADS")
    with pytest.raises(TypeError, match="compile: adaptive_threads must be True, False or None, got 1"):
        rlx_cpu.compile(g, adaptive_threads=1)


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="single-threaded build (no OpenMP)")
def test_adaptive_plan_counts_its_runs(rng):
    # debug=False even under RLX_DEBUG=1: debug mode runs exactly num_threads
    plan, _ = _mixed_plan(rng, debug=False)
    x = rng.standard_normal((2, 16, 12, 12)).astype(np.float32)
    ctx = plan.new_context()
    first = plan.run({"x": x}, context=ctx)
    for _ in range(40):
        again = plan.run({"x": x}, context=ctx)
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
    stats = ctx.sequence.adaptive_stats
    assert stats["runs"] == 41 and stats["single_thread_runs"] >= 1       # at least the first probe
    assert stats["next_threads"] in (1, 2)
