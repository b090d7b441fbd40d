"""Serving throughput: Python threads in one process vs worker processes.

    python benchmarks/bench_serving.py [--batches 32] [--rounds 3] [--no-dask]

Runs the demo conv stack (``python -m rlx_cpu``'s model, batch 1 per request)
over the same requests in each setup and prints requests/s (median of
`rounds`) and the speed-up over one thread:

* in-process: 1 Python thread x plan num_threads=1, 2 Python threads sharing
  one num_threads=1 plan (each on its own run context), and 1 Python thread x
  num_threads=2 (OpenMP inside each run);
* Dask distributed (``dask[distributed]``, the `test` extra): a LocalCluster of
  1 and 2 single-threaded worker processes, the plan scattered once, requests
  mapped across the workers in chunks of ``--chunk`` per task.

Timings on a shared 2-core machine are noisy; compare the rows of one run.
"""
import argparse
import os
import statistics
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import rlx_cpu  # noqa: E402
from rlx_cpu.__main__ import build_demo_graph  # noqa: E402


def requests_for(plan, count, seed=0):
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(s).astype(np.float32) for n, s in plan.input_shapes.items()}
            for _ in range(count)]


def threads_rate(plan, reqs, n_threads):
    """Requests/s with `n_threads` Python threads sharing `plan`, each serving
    an equal share of `reqs` with run_into into its own output arrays."""
    shares = [reqs[i::n_threads] for i in range(n_threads)]
    outs = [[np.empty(s, d) for s, d in zip(plan.output_shapes, plan.output_dtypes)] for _ in shares]
    start = threading.Barrier(n_threads + 1)

    def work(i):
        start.wait()
        for r in shares[i]:
            plan.run_into(r, outs[i])

    ts = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    t0, c0 = time.perf_counter(), time.process_time()
    start.wait()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    return len(reqs) / wall, (time.process_time() - c0) / wall


def _timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run_chunk(plan, chunk):
    """One Dask task: several requests, so the per-task scheduling cost is
    shared (defined in __main__, so Dask ships it by value)."""
    return [plan.run(r) for r in chunk]


def dask_rate(n_workers, plan, reqs, rounds, chunk):
    from dask.distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=n_workers, processes=True, threads_per_worker=1,
                           dashboard_address=None, scheduler_port=0, host="127.0.0.1")
    client = Client(cluster)
    try:
        remote_plan = client.scatter(plan, broadcast=True, hash=False)
        client.gather(client.map(rlx_cpu.Plan.run, [remote_plan] * n_workers * 2, reqs[:n_workers * 2],
                                 pure=False))
        chunks = [reqs[i:i + chunk] for i in range(0, len(reqs), chunk)]
        remote_chunks = client.scatter(chunks, hash=False)   # inputs shipped once, outside the timing
        rates = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            client.gather(client.map(run_chunk, [remote_plan] * len(chunks), remote_chunks, pure=False))
            rates.append(len(reqs) / (time.perf_counter() - t0))
        return statistics.median(rates)
    finally:
        client.close()
        cluster.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--batches", type=int, default=32, help="requests per measurement")
    p.add_argument("--rounds", type=int, default=3, help="measurements per setup (median reported)")
    p.add_argument("--chunk", type=int, default=4, help="requests per Dask task")
    p.add_argument("--no-dask", action="store_true", help="skip the Dask rows")
    args = p.parse_args(argv)

    graph = build_demo_graph(batch=1)[0]
    plan1 = rlx_cpu.compile(graph, num_threads=1)
    plan2 = rlx_cpu.compile(graph, num_threads=2)
    reqs = requests_for(plan1, args.batches)

    rows = []
    for label, plan, nthr in (("1 thread x num_threads=1", plan1, 1),
                              ("2 threads x num_threads=1 (shared plan)", plan1, 2),
                              ("1 thread x num_threads=2", plan2, 1)):
        threads_rate(plan, reqs[:2 * nthr], nthr)      # warm-up (kernels, caches)
        runs = sorted(threads_rate(plan, reqs, nthr) for _ in range(args.rounds))
        rate, busy = runs[len(runs) // 2]
        rows.append((label, "1", rate, f"{busy:.2f}"))
    if not args.no_dask:
        for n in (1, 2):
            rows.append((f"dask: {n} worker process{'es' if n > 1 else ''} x num_threads=1", str(n),
                         dask_rate(n, plan1, reqs, args.rounds, args.chunk), "-"))

    # How much of one request holds the GIL (input copy-in, output copy-out,
    # the Python loop over launches): the part 2 threads cannot overlap.
    outs = [np.empty(s, d) for s, d in zip(plan1.output_shapes, plan1.output_dtypes)]
    total = statistics.median(_timed(lambda: plan1.run_into(reqs[0], outs)) for _ in range(20))
    kernels = sum(s for _, s in plan1.profile(reqs[0], repeat=20))
    held = max(total - kernels, 0.0) / total

    base = rows[0][2]
    print(f"demo conv stack, batch 1, {args.batches} requests, median of {args.rounds}; "
          f"{rlx_cpu.get_num_threads()} CPUs; rlx_cpu {rlx_cpu.__version__}")
    print(f"{'setup':<44} {'processes':>9} {'req/s':>8} {'vs 1 thread':>11} {'cores busy':>10}")
    for label, procs, rate, busy in rows:
        print(f"{label:<44} {procs:>9} {rate:8.1f} {rate / base:10.2f}x {busy:>10}")
    print(f"one request: {1e3 * total:.2f} ms, of which {1e3 * max(total - kernels, 0.0):.3f} ms "
          f"({100 * held:.1f}%) "
          f"outside the GIL-free kernels -> 2 threads can reach at most {2 / (1 + held):.2f}x")
    print("cores busy: CPU seconds of this process per wall second (2.0 = both cores); "
          f"Dask rows: {args.chunk} requests per task")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
