"""`python -m rlx_cpu bench [--nogil]`: per-call cost of running a plan.

Times the one-thunk plan of the per-call overhead target (a 1x1x8x8 input,
3x3 conv with padding 1, unless --shape/--channels say otherwise) K times:

* from Python: ``plan.run_into`` with the same input and output arrays (a
  serving loop; kernels read and write those arrays in place),
  ``plan.run`` (returns new arrays), and the functional ``rlx_cpu.conv2d``
  on the same arrays (its cached plan takes the weight as an input);
* with --nogil: K iterations inside one nogil call through the C API
  (rlx_cpu/include/rlx_cpu.h), so Python is excluded.

Each figure is the median of --samples timed loops of K iterations, in
nanoseconds per iteration.
"""
import argparse
import statistics
import time

import numpy as np


def _median_ns(fn, iterations, samples):
    out = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        for _ in range(iterations):
            fn()
        out.append((time.perf_counter_ns() - t0) / iterations)
    return statistics.median(out)


def _functional_ns(shape, channels, threads, k, s):
    """rlx_cpu.conv2d on the same arrays: its plan (weight as an input) is
    compiled on the first call and found in the cache after."""
    from . import conv2d, set_num_threads
    from . import threads as threads_mod
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((channels, shape[1], 3, 3)).astype(np.float32)
    saved = threads_mod._explicit
    set_num_threads(threads)
    try:
        conv2d(x, w, padding=1)
        return _median_ns(lambda: conv2d(x, w, padding=1), k, s)
    finally:
        set_num_threads(saved)


def build_plan(shape, channels, threads):
    from . import Graph, compile
    rng = np.random.default_rng(0)
    g = Graph()
    x = g.input("x", shape)
    g.output(g.conv2d(x, rng.standard_normal((channels, shape[1], 3, 3)).astype(np.float32), padding=1))
    plan = compile(g, num_threads=threads)
    return plan, {"x": rng.standard_normal(shape).astype(np.float32)}


def add_bench_arguments(p):
    """The bench job's options (python -m rlx_cpu bench --help)."""
    p.add_argument("--nogil", action="store_true", help="also time K iterations inside one nogil C-API call")
    p.add_argument("--iterations", "-k", type=int, default=2000, help="iterations per timed loop")
    p.add_argument("--samples", type=int, default=7, help="timed loops; the median is reported")
    p.add_argument("--shape", default="1x1x8x8", help="input shape NxCxHxW")
    p.add_argument("--channels", type=int, default=1, help="conv output channels")
    # None: not given here; `python -m rlx_cpu --threads N bench` then sets it, else 1
    p.add_argument("--threads", type=int, default=None,
                   help="plan num_threads (default: 1, or --threads given before 'bench')")


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m rlx_cpu bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bench_arguments(p)
    return run_bench(p.parse_args(argv), p.error)


def run_bench(args, error):
    """Run the bench job with parsed options; `error(msg)` reports a bad one."""
    if args.threads is None:
        args.threads = 1
    if args.iterations < 1 or args.samples < 1:
        error("--iterations and --samples must be >= 1")
    try:
        shape = tuple(int(v) for v in args.shape.lower().split("x"))
    except ValueError:
        error(f"--shape must look like 1x1x8x8, got {args.shape!r}")
    if len(shape) != 4:
        error(f"--shape must have 4 dims (NxCxHxW), got {args.shape!r}")
    plan, feeds = build_plan(shape, args.channels, args.threads)
    outs = [np.empty(s, d) for s, d in zip(plan.output_shapes, plan.output_dtypes)]
    plan.run_into(feeds, outs)
    k, s = args.iterations, args.samples
    rows = [("run_into (Python, same arrays)", _median_ns(lambda: plan.run_into(feeds, outs), k, s)),
            ("run (Python, new outputs)", _median_ns(lambda: plan.run(feeds), k, s)),
            ("functional conv2d (cached plan)", _functional_ns(shape, args.channels, args.threads, k, s))]
    if args.nogil:
        from ._capi import bench_nogil
        bench_nogil(plan, feeds, min(k, 100), args.threads)          # warm-up
        rows.append(("C API run, nogil loop", statistics.median(
            bench_nogil(plan, feeds, k, args.threads) for _ in range(s))))
    print(f"plan: conv 3x3 p1, input {'x'.join(map(str, shape))} -> {args.channels} channels, "
          f"{args.threads} thread(s); median of {s} loops of {k} iterations")
    print(f"{'path':<34} {'ns/iter':>10}")
    for name, ns in rows:
        print(f"{name:<34} {ns:>10.0f}")
    return 0
