"""The runtime contracts README.md states, one test each:

* fork: a child process started by multiprocessing with the fork, spawn or
  forkserver method can run a plan (the parent's own plan under fork) and a
  new functional call, after the parent ran plans at 1 or 2 threads.  A child
  forked from a process that ran OpenMP with more than one thread runs its
  kernels on one thread (libgomp's pool cannot be used after fork).
* signals: Ctrl-C (SIGINT) during a run raises KeyboardInterrupt between two
  launches, before the run finishes.
* memory release: a plan is freed as soon as its last reference goes, with
  the cycle collector disabled.
* debug mode (compile(..., debug=True) or RLX_DEBUG=1): a launch that writes
  outside its declared slices raises RuntimeError naming the thunk and the
  buffer it hit.
"""
import ctypes
import gc
import multiprocessing as mp
import os
import signal
import threading
import weakref
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime, _train, registry
from rlx_cpu.thunks import Slice, Thunk

FORK_TIMEOUT = 60      # seconds a child may take; a hang fails the test instead of stalling it

# ---------------------------------------------------------------------------
# fork / spawn / forkserver
# ---------------------------------------------------------------------------

_PARENT_PLAN = None    # the plan a forked child inherits


def _conv_case():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 16, 24, 24)).astype(np.float32)
    w = (0.2 * rng.standard_normal((32, 16, 3, 3))).astype(np.float32)
    return x, w


def _build_plan(threads):
    x, w = _conv_case()
    g = rlx_cpu.Graph()
    g.output(g.conv2d(g.input("x", x.shape), g.constant(w), padding=1))
    return rlx_cpu.compile(g, num_threads=threads)


def _child(threads, want_plan, want_fn):
    """Runs in the child: the inherited plan (or, without one, a plan built
    here) from Python and through the C API's nogil loop, then a new
    functional call; returns their max abs errors."""
    from rlx_cpu import _capi
    x, w = _conv_case()
    plan = _PARENT_PLAN if _PARENT_PLAN is not None else _build_plan(threads)
    got_plan = plan.run({"x": x})[0]
    assert _capi.bench_nogil(plan, {"x": x}, 3) > 0      # C API runs pass the fork limit too
    got_fn = rlx_cpu.conv2d(x, w, stride=1, padding=0)
    return (_PARENT_PLAN is not None, float(np.abs(got_plan - want_plan).max()),
            float(np.abs(got_fn - want_fn).max()))


@pytest.mark.skipif(os.name != "posix", reason="fork start method is POSIX-only")
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_child_process_runs_plans_after_parent_used_threads(method, threads):
    global _PARENT_PLAN
    if method not in mp.get_all_start_methods():
        pytest.skip(f"start method {method} unavailable")
    x, w = _conv_case()
    plan = _build_plan(threads)
    want_plan = plan.run({"x": x})[0]               # the parent starts its OpenMP pool here
    want_fn = rlx_cpu.conv2d(x, w, stride=1, padding=0)
    _PARENT_PLAN = plan
    try:
        with mp.get_context(method).Pool(1) as pool:
            inherited, err_plan, err_fn = pool.apply_async(_child, (threads, want_plan, want_fn)).get(
                timeout=FORK_TIMEOUT)
    finally:
        _PARENT_PLAN = None
    assert inherited == (method == "fork")
    assert err_plan < 1e-4 * np.abs(want_plan).max()
    assert err_fn < 1e-4 * np.abs(want_fn).max()


def _child_thread_limit():
    return _runtime.forked_thread_limit()


@pytest.mark.skipif(not _runtime.openmp_enabled(), reason="single-threaded build (no OpenMP)")
def test_fork_after_threaded_run_limits_child_to_one_thread():
    x, _ = _conv_case()
    _build_plan(2).run({"x": x})
    assert _runtime.forked_thread_limit() == 0        # no limit in the parent itself
    with mp.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_child_thread_limit).get(timeout=FORK_TIMEOUT) == 1
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply_async(_child_thread_limit).get(timeout=FORK_TIMEOUT) == 0


# ---------------------------------------------------------------------------
# signals
# ---------------------------------------------------------------------------

@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals need the main thread")
def test_sigint_interrupts_a_run_between_launches():
    # One kernel launch repeated: acc += one, in place, so acc counts the
    # launches that completed.  A helper thread sends SIGINT once 10 have
    # run; the run must stop with KeyboardInterrupt long before the last.
    n, launches = 1 << 18, 2000
    acc = np.zeros(n, np.float32)
    one = np.ones(n, np.float32)
    add = _train.ElementwiseLaunch(_train.ELEM_ADD, acc, one, acc, n, 1)
    seq = _runtime.LaunchSequence([add] * launches)

    def interrupt():
        while acc[0] < 10:
            pass
        os.kill(os.getpid(), signal.SIGINT)

    helper = threading.Thread(target=interrupt, daemon=True)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        helper.start()
        with pytest.raises(KeyboardInterrupt):
            seq.run(1)
    finally:
        helper.join(FORK_TIMEOUT)
        signal.signal(signal.SIGINT, old)
    done = int(acc[0])
    assert 10 <= done < launches // 2, f"{done} of {launches} launches ran before the interrupt was raised"
    assert (acc == done).all()        # every launch either ran completely or not at all
    seq.run(1)                        # the sequence is still usable
    assert (acc == done + launches).all()


# ---------------------------------------------------------------------------
# memory release
# ---------------------------------------------------------------------------

def test_plan_is_freed_when_last_reference_goes_without_gc():
    x, _ = _conv_case()
    gc.collect()
    gc.disable()
    try:
        plan = _build_plan(1)
        plan.run({"x": x})
        ctx = plan.new_context()
        plan.run({"x": x}, context=ctx)
        arena = weakref.ref(plan._context().arena.base)
        ref = weakref.ref(plan)
        del plan
        assert ref() is None, "the plan outlived its last reference"
        assert arena() is None, "the thread's run context outlived its plan"
        ctx.sequence.run(1)              # an explicit context stays usable on its own
    finally:
        gc.enable()


# ---------------------------------------------------------------------------
# debug mode
# ---------------------------------------------------------------------------
# contention: the OpenMP environment is the user's
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("env, want", [({}, None), ({"OMP_WAIT_POLICY": "active"}, "active"),
                                       ({"OMP_WAIT_POLICY": "PASSIVE"}, "PASSIVE")])
def test_import_leaves_the_openmp_wait_policy_alone(env, want):
    # Contention is handled per run (adaptive_threads), not by a process-wide
    # wait policy that would slow every quiet run down.
    import subprocess
    import sys
    base = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    root = os.path.dirname(os.path.dirname(os.path.abspath(rlx_cpu.__file__)))
    base["PYTHONPATH"] = root + os.pathsep + base.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", "import os, rlx_cpu; print(os.environ.get('OMP_WAIT_POLICY'))"],
                         env={**base, **env}, capture_output=True, text=True, timeout=FORK_TIMEOUT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-1] == str(want)
