"""Pooling / resize / im2col throughput per thread count, side by side with PyTorch.

    python benchmarks/bench_pool.py [--repeat 30] [--threads 1,2] [--shapes mp2d,ap2d]

For each shape and thread count it prints the median ms over `repeat` runs of
the kernel alone (launches run directly: no input copy, no output
allocation), the effective bandwidth
GB/s (input bytes read once + output bytes written, the memory-bound lower
bound on traffic) and Gtap/s (window taps visited per second: outputs x
kernel volume).  With torch installed it times the matching
torch.nn.functional call (torch.set_num_threads to the same count, inference
mode) and prints torch_ms / rlx_ms (> 1: rlx_cpu faster).  Timings on a
shared machine are noisy: compare within one run.
"""
import argparse
import time

import numpy as np

import rlx_cpu
from _harness import median_ms, optional_torch
from rlx_cpu import _runtime

# name: (description, input shape, graph builder, torch call, taps per output)
SHAPES = {
    "mp2d": ("max_pool2d k3 s2 p1", (1, 64, 112, 112),
             lambda g, x: g.max_pool2d(x, 3, 2, 1),
             lambda F, x: F.max_pool2d(x, 3, 2, 1), 9),
    "mp2d_idx": ("max_pool2d k3 s2 p1 +indices", (1, 64, 112, 112),
                 lambda g, x: g.max_pool2d(x, 3, 2, 1, return_indices=True),
                 lambda F, x: F.max_pool2d(x, 3, 2, 1, return_indices=True), 9),
    "mp2d_b8": ("max_pool2d k2 s2", (8, 128, 56, 56),
                lambda g, x: g.max_pool2d(x, 2),
                lambda F, x: F.max_pool2d(x, 2), 4),
    "ap2d": ("avg_pool2d k3 s2 p1 ceil", (1, 64, 112, 112),
             lambda g, x: g.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
             lambda F, x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), 9),
    "mp1d": ("max_pool1d k4 s2 (long line)", (1, 2, 200000),
             lambda g, x: g.max_pool1d(x, 4, 2),
             lambda F, x: F.max_pool1d(x, 4, 2), 4),
    "gap": ("global_avg_pool", (8, 512, 14, 14),
            lambda g, x: g.global_avg_pool(x),
            lambda F, x: F.adaptive_avg_pool2d(x, 1), 196),
    "up2x": ("upsample_nearest2x", (1, 64, 56, 56),
             lambda g, x: g.upsample_nearest2x(x),
             lambda F, x: F.interpolate(x, scale_factor=2, mode="nearest"), 1),
    "interp": ("interpolate nearest x1.5", (1, 64, 56, 56),
               lambda g, x: g.interpolate(x, scale_factor=1.5),
               lambda F, x: F.interpolate(x, scale_factor=1.5, mode="nearest"), 1),
    "im2col": ("im2col k3 s1 p1 (onnx layout)", (1, 64, 56, 56),
               lambda g, x: g.im2col(x, 3, 1, 1, layout="onnx"),
               lambda F, x: F.unfold(x, 3, 1, 1, 1), 1),
}


def bench_shape(name, spec, threads, repeat, torch):
    desc, shape, build, torch_call, taps = spec
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    g = rlx_cpu.Graph()
    xi = g.input("x", shape)
    out = build(g, xi)
    g.output(*(out if isinstance(out, tuple) else (out,)))
    rows = []
    for t in threads:
        plan = rlx_cpu.compile(g, num_threads=t)
        ctx = plan.new_context()
        ctx.load({"x": x})
        ms = median_ms(lambda: _runtime.run_launches(ctx.launches, t), repeat)
        out_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize
                        for s, d in zip(plan.output_shapes, plan.output_dtypes))
        gbs = (x.nbytes + out_bytes) / (ms * 1e-3) / 1e9
        out_elems = int(np.prod(plan.output_shapes[0]))
        gtaps = out_elems * taps / (ms * 1e-3) / 1e9
        torch_ms = None
        if torch is not None:
            torch.set_num_threads(t)
            tx = torch.from_numpy(x)
            with torch.inference_mode():
                torch_ms = median_ms(lambda: torch_call(torch.nn.functional, tx), repeat)
        rows.append((name, desc, t, ms, gbs, gtaps, torch_ms))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    torch = optional_torch(args.no_torch)
    print(f"{'shape':10} {'op':32} {'thr':>3} {'ms':>8} {'GB/s':>7} {'Gtap/s':>7} {'torch ms':>9} {'torch/rlx':>9}")
    for name in args.shapes.split(","):
        for row in bench_shape(name, SHAPES[name], threads, args.repeat, torch):
            name_, desc, t, ms, gbs, gtaps, tms = row
            tcol = f"{tms:9.3f} {tms / ms:9.2f}" if tms is not None else f"{'-':>9} {'-':>9}"
            print(f"{name_:10} {desc:32} {t:3d} {ms:8.3f} {gbs:7.2f} {gtaps:7.2f} {tcol}")


if __name__ == "__main__":
    main()
