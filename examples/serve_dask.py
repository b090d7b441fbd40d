"""Serve one compiled rlx_cpu plan on the worker processes of a Dask cluster.

    pip install "dask[distributed]"        # (the `test` extra pins a version)
    python examples/serve_dask.py --workers 2 --batches 16

The plan is compiled once, here, with ``num_threads=1``, pickled and scattered
to every worker once (``broadcast=True``); each task then only carries its
batch.  Each worker process unpickles the plan a single time and runs it on
its own arena; with ``threads_per_worker=1`` every process uses one core, and
rlx_cpu keeps scipy's BLAS single-threaded, so nothing oversubscribes.
Results are compared bit for bit with a local run.
"""
import argparse
import time

import numpy as np

import rlx_cpu
from rlx_cpu.__main__ import build_demo_graph


def make_batches(plan, count, seed=0):
    """`count` feed dicts of the plan's input shapes."""
    rng = np.random.default_rng(seed)
    return [{name: rng.standard_normal(shape).astype(np.float32)
             for name, shape in plan.input_shapes.items()} for _ in range(count)]


def ship(client, plan):
    """Send `plan` to every worker once; returns the future that tasks name
    instead of the plan (keep it alive while serving)."""
    return client.scatter(plan, broadcast=True, hash=False)


def serve(client, remote_plan, batches):
    """Run every batch on the cluster with the shipped plan; returns the
    outputs in batch order (a list of output lists, as Plan.run gives)."""
    futures = client.map(rlx_cpu.Plan.run, [remote_plan] * len(batches), batches, pure=False)
    return client.gather(futures)


def start_cluster(n_workers):
    """A local cluster of `n_workers` single-threaded worker processes."""
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                           dashboard_address=None, scheduler_port=0, host="127.0.0.1")
    return cluster, Client(cluster)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--workers", type=int, default=2, help="worker processes")
    p.add_argument("--batches", type=int, default=16, help="batches to serve")
    p.add_argument("--batch", type=int, default=1, help="images per batch")
    args = p.parse_args(argv)

    graph, _, _ = build_demo_graph(batch=args.batch)
    plan = rlx_cpu.compile(graph, num_threads=1)
    batches = make_batches(plan, args.batches)
    local = [plan.run(b) for b in batches]

    cluster, client = start_cluster(args.workers)
    try:
        remote_plan = ship(client, plan)
        serve(client, remote_plan, batches[:args.workers])    # warm-up: contexts built
        t0 = time.perf_counter()
        remote = serve(client, remote_plan, batches)
        secs = time.perf_counter() - t0
    finally:
        client.close()
        cluster.close()

    same = all(a.tobytes() == b.tobytes() for ra, rb in zip(remote, local) for a, b in zip(ra, rb))
    print(f"{args.batches} batches on {args.workers} worker processes in {secs:.2f} s "
          f"({args.batches * args.batch / secs:.1f} images/s); identical to the local run: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
