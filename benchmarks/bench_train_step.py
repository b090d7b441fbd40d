"""Images/s of the example CNN training step and its time by thunk kind.

    PYTHONPATH=. python benchmarks/bench_train_step.py [--threads 1 2] [--batch 32] [--steps 50]

Indicative only on a shared machine: reports the median and the best step
time (the best is closest to an idle machine) and the median time per thunk
of a forward+backward run, summed by thunk kind.
"""
import argparse
import time

import numpy as np

from rlx_cpu.training import build_cnn_training, synthetic_digits, time_by_kind


def bench(threads, batch, steps):
    trainer = build_cnn_training(batch, num_threads=threads)
    x, y = synthetic_digits(batch * 4, seed=1)
    feeds = [{"x": x[i * batch:(i + 1) * batch], "labels": y[i * batch:(i + 1) * batch]} for i in range(4)]
    for i in range(3):
        trainer.step(feeds[i % 4])
    times = []
    for i in range(steps):
        t0 = time.perf_counter()
        trainer.step(feeds[i % 4])
        times.append(time.perf_counter() - t0)
    prof = trainer.profile(feeds[0], repeat=max(5, steps // 2))
    return float(np.median(times)), float(np.min(times)), prof


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=50)
    args = ap.parse_args()
    for t in args.threads:
        med, best, prof = bench(t, args.batch, args.steps)
        total = sum(s for _, s in prof)
        print(f"threads {t}: step median {med * 1e3:.3f} ms ({args.batch / med:.0f} images/s), "
              f"best {best * 1e3:.3f} ms ({args.batch / best:.0f} images/s); "
              f"thunks (median each) sum {total * 1e3:.3f} ms")
        for kind, sec in time_by_kind(prof).items():
            print(f"    {kind:28s} {sec * 1e3:8.3f} ms {100 * sec / total:5.1f}%")
        for th, sec in prof:
            print(f"        {th.kind:24s} {th.op_name:28s} {sec * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
