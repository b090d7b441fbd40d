"""Serving a pickled plan on a Dask cluster of 2 worker processes: the plan is
shipped once, batches are mapped across the workers, and every output equals
the local run bit for bit.  (Dask distributed is in the `test` extra.)"""
import os

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu.__main__ import build_demo_graph

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                           scheduler_port=0, host="127.0.0.1")
    c = Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def _batches(plan, count, seed):
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in plan.input_shapes.items()}
            for _ in range(count)]


def _pool_plan():
    rng = np.random.default_rng(5)
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 16, 16))
    h = g.conv2d(x, rng.standard_normal((8, 3, 3, 3)).astype(np.float32), padding=1)
    y, idx = g.max_pool(g.relu(h), 2, return_indices=True)
    g.output(y, idx)
    return rlx_cpu.compile(g, num_threads=1)


def test_workers_are_separate_processes(client):
    pids = client.run(os.getpid)
    assert len(pids) == 2 and len(set(pids.values())) == 2 and os.getpid() not in pids.values()


@pytest.mark.parametrize("which", ["demo", "pool"])
def test_plan_shipped_once_and_mapped_bitwise(client, which):
    if which == "demo":
        plan = rlx_cpu.compile(build_demo_graph(batch=1)[0], num_threads=1)
    else:
        plan = _pool_plan()
    batches = _batches(plan, 8, seed=len(which))
    local = [plan.run(b) for b in batches]

    # a broadcast goes to the workers the scheduler holds as running at that
    # moment; on a loaded host a worker can briefly be in another state (one
    # copy on one worker, seen once with two test suites on the two cores)
    client.wait_for_workers(2, timeout=60)
    remote_plan = client.scatter(plan, broadcast=True, hash=False)
    holders = client.who_has([remote_plan])[remote_plan.key]
    assert len(holders) == 2, holders                  # one copy on each worker
    futures = client.map(rlx_cpu.Plan.run, [remote_plan] * len(batches), batches, pure=False)
    remote = client.gather(futures)

    assert len(remote) == len(local)
    for got, want in zip(remote, local):
        assert [a.dtype for a in got] == [b.dtype for b in want]
        assert all(a.shape == b.shape and a.tobytes() == b.tobytes() for a, b in zip(got, want))


def test_incompatible_pickle_fails_on_the_worker_with_a_clear_error(client):
    from rlx_cpu import plan as plan_mod

    plan = _pool_plan()
    fn, (state,) = plan.__reduce__()
    state = dict(state, build=dict(state["build"], rlx_cpu="0.0.0-other"))

    with pytest.raises(rlx_cpu.IncompatiblePlanError, match="another rlx_cpu build"):
        client.submit(fn, state, pure=False).result(timeout=60)
    assert plan_mod._restore_plan is fn
