"""Compiled plans pickle: the loaded plan runs bitwise like the original, in
this process and in a fresh one; pickles from another version or build are
refused at load time."""
import copy
import os
import pickle
import pickletools
import subprocess
import sys
import threading

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import plan as plan_mod
from rlx_cpu.__main__ import build_demo_graph


def _pool_plan():
    """A plan with an int64 output (max-pool indices) and a winograd conv."""
    rng = np.random.default_rng(3)
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 4, 12, 12))
    h = g.conv2d(x, rng.standard_normal((8, 4, 3, 3)).astype(np.float32), padding=1)
    y, idx = g.max_pool(h, 2, return_indices=True)
    g.output(y, idx)
    feeds = {"x": rng.standard_normal((2, 4, 12, 12))}
    return rlx_cpu.compile(g, num_threads=1, conv_algorithm="winograd"), feeds


@pytest.fixture(scope="module")
def demo():
    g, feeds, _ = build_demo_graph(batch=1)
    return rlx_cpu.compile(g, num_threads=2), feeds


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def test_plan_has_no_thread_local_in_its_pickle(demo):
    plan, feeds = demo
    plan.run(feeds)                       # a thread context exists now
    strings = {arg for _, arg, _ in pickletools.genops(pickle.dumps(plan)) if isinstance(arg, str)}
    assert not strings & {"_thread", "_local", "threading", "RunContext"}
    assert "_restore_plan" in strings


@pytest.mark.parametrize("which", ["demo", "pool"])
def test_roundtrip_in_process_is_bitwise(demo, which):
    plan, feeds = demo if which == "demo" else _pool_plan()
    want = plan.run(feeds)
    back = pickle.loads(pickle.dumps(plan))
    assert back is not plan and back.num_threads == plan.num_threads
    assert back.input_names == plan.input_names and back.output_shapes == plan.output_shapes
    assert back.arena_nbytes == plan.arena_nbytes and back.const_nbytes == plan.const_nbytes
    assert back._const.ctypes.data % 64 == 0 and not back._const.flags.writeable
    _same(back.run(feeds), want)
    outs = [np.empty(s, d) for s, d in zip(back.output_shapes, back.output_dtypes)]
    _same(back.run_into(feeds, outs), want)


def test_deepcopy_is_independent_and_bitwise(demo):
    plan, feeds = demo
    want = plan.run(feeds)
    dup = copy.deepcopy(plan)
    assert dup._const.ctypes.data != plan._const.ctypes.data
    _same(dup.run(feeds), want)
    _same(copy.copy(plan).run(feeds), want)


def test_unpickled_plan_runs_from_threads(demo):
    plan, feeds = demo
    want = plan.run(feeds)
    back = pickle.loads(pickle.dumps(plan))
    got = [None, None]

    def work(i):
        got[i] = back.run(feeds)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    _same(got[0], want)
    _same(got[1], want)


_CHILD = r"""
import pickle, sys
import numpy as np
import rlx_cpu
with open(sys.argv[1], "rb") as fh:
    plan, feeds = pickle.load(fh)
outs = plan.run(feeds)
np.savez(sys.argv[2], *outs)
print(rlx_cpu.__file__)
"""


@pytest.mark.parametrize("which", ["demo", "pool"])
def test_unpickled_in_another_process_is_bitwise(demo, which, tmp_path):
    plan, feeds = demo if which == "demo" else _pool_plan()
    want = plan.run(feeds)
    src = tmp_path / "plan.pkl"
    src.write_bytes(pickle.dumps((plan, feeds)))
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(rlx_cpu.__file__))
    env["PYTHONPATH"] = pkg_root + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", _CHILD, str(src), str(tmp_path / "out.npz")],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == rlx_cpu.__file__      # the same build ran it
    with np.load(tmp_path / "out.npz") as z:
        got = [z[f"arr_{i}"] for i in range(len(want))]
    _same(got, want)


class _Tampered:
    """Pickles as Plan's own loader called with a modified state."""

    def __init__(self, state):
        self.state = state

    def __reduce__(self):
        return (plan_mod._restore_plan, (self.state,))


def _state(plan):
    fn, (state,) = plan.__reduce__()
    assert fn is plan_mod._restore_plan
    return copy.deepcopy(state)


@pytest.mark.parametrize("field, value, match", [
    ("rlx_cpu", "0.0.0-other", r"rlx_cpu: pickled '0\.0\.0-other'"),
    ("build_isa", ["SSE2", "AVX512F"], r"build_isa: pickled \['SSE2', 'AVX512F'\]"),
    ("openmp", "maybe", r"openmp: pickled 'maybe'"),
])
def test_build_mismatch_is_refused_at_load(field, value, match):
    plan, _ = _pool_plan()
    state = _state(plan)
    state["build"][field] = value
    data = pickle.dumps(_Tampered(state))
    with pytest.raises(rlx_cpu.IncompatiblePlanError, match=match):
        pickle.loads(data)


def test_version_tampered_in_the_bytes_is_refused():
    plan, _ = _pool_plan()
    data = pickle.dumps(plan)
    ver = rlx_cpu.__version__.encode()
    other = bytes(ord("9") if chr(c).isdigit() else c for c in ver)
    if other == ver:
        other = b"0" * len(ver)
    assert data.count(ver) >= 1
    with pytest.raises(rlx_cpu.IncompatiblePlanError, match="another rlx_cpu build"):
        pickle.loads(data.replace(ver, other))


@pytest.mark.parametrize("damage", ["format", "missing", "const", "slice", "not_dict"])
def test_damaged_state_is_refused(damage):
    plan, _ = _pool_plan()
    state = _state(plan)
    if damage == "format":
        state["format"] = 999
        match = "format 999"
    elif damage == "missing":
        del state["thunks"]
        match = "incomplete or malformed"
    elif damage == "const":
        state["const"] = state["const"][:-64]
        match = "constants hold"
    elif damage == "slice":
        name, shape, s = state["inputs"][0]
        state["inputs"] = ((name, shape, type(s)("arena", plan.arena_nbytes, s.nbytes)),)
        match = "outside its segment"
    else:
        state = ["not", "a", "dict"]
        match = "expected a state dict"
    with pytest.raises(rlx_cpu.IncompatiblePlanError, match=match):
        pickle.loads(pickle.dumps(_Tampered(state)))
