"""Pooling / resize / im2col throughput per thread count, side by side with PyTorch and ONNX Runtime.

    python benchmarks/bench_pool.py [--repeat 30] [--threads 1,2] [--shapes mp2d,ap2d]

For each shape and thread count it prints the median ms over `repeat` runs of
the kernel alone (launches run directly: no input copy, no output
allocation), the effective bandwidth
GB/s (input bytes read once + output bytes written, the memory-bound lower
bound on traffic) and Gtap/s (window taps visited per second: outputs x
kernel volume), and %memcpy: the time numpy takes to copy the same bytes
(input + output) over the kernel's time, the physical reference of a
memory-bound op.  The peers, when installed, run in the same process on the
same thread count: the matching torch.nn.functional call (inference mode) and
ONNX Runtime on the matching one-node model (no ORT op for im2col).  They are
timed round-robin with rlx_cpu's whole `plan.run_into` (input copy included,
`run ms`), and peer_ms / run_ms is printed (> 1: rlx_cpu faster); `best` is
the faster peer.  Timings on a shared machine are noisy: compare within one run.
"""
import argparse
import time

import numpy as np

import rlx_cpu
from _harness import (fmt_ms, fmt_ratio, interleaved_medians, median_ms, memcpy_ms, optional_ort, optional_torch,
                      ort_session, ort_single_node)
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

# name: (op_type, number of outputs, attributes, extra initializers) of the ONNX Runtime peer
ORT_NODES = {
    "mp2d": ("MaxPool", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), ()),
    "mp2d_idx": ("MaxPool", 2, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), ()),
    "mp2d_b8": ("MaxPool", 1, dict(kernel_shape=[2, 2], strides=[2, 2]), ()),
    "ap2d": ("AveragePool", 1, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                    count_include_pad=1), ()),
    "mp1d": ("MaxPool", 1, dict(kernel_shape=[4], strides=[2]), ()),
    "gap": ("GlobalAveragePool", 1, {}, ()),
    "up2x": ("Resize", 1, dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
             (("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 2, 2], np.float32)))),
    "interp": ("Resize", 1, dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
               (("roi", np.zeros(0, np.float32)), ("scales", np.array([1, 1, 1.5, 1.5], np.float32)))),
}


def bench_shape(name, spec, threads, repeat, torch, ort):
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
        copy_ms = memcpy_ms(x.nbytes + out_bytes, repeat)
        peers = {}
        if torch is not None:
            torch.set_num_threads(t)
            tx = torch.from_numpy(x)

            def torch_run():
                with torch.inference_mode():
                    torch_call(torch.nn.functional, tx)
            peers["torch"] = torch_run
        if ort is not None and name in ORT_NODES:
            op_type, n_out, attrs, inits = ORT_NODES[name]
            sess = ort_session(ort, ort_single_node(ort, op_type, shape, n_out, inits, **attrs), t)
            if sess is not None:
                peers["ort"] = lambda: sess.run(None, {"x": x})
        outs = [np.empty(s_, d) for s_, d in zip(plan.output_shapes, plan.output_dtypes)]
        timed = interleaved_medians({"rlx": lambda: plan.run_into({"x": x}, outs), **peers}, repeat)
        rows.append((name, desc, t, ms, gbs, gtaps, 100 * copy_ms / ms, timed.pop("rlx"), timed))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    torch = optional_torch(args.no_torch)
    ort = optional_ort(args.no_ort)
    print(f"{'shape':10} {'op':32} {'thr':>3} {'ms':>8} {'GB/s':>7} {'Gtap/s':>7} {'%memcpy':>7} {'run ms':>8} "
          f"{'torch ms':>9} {'ort ms':>9} {'torch/':>7} {'ort/':>7} {'best/':>7}")
    for name in args.shapes.split(","):
        for row in bench_shape(name, SHAPES[name], threads, args.repeat, torch, ort):
            name_, desc, t, ms, gbs, gtaps, pct_copy, run_ms, peers = row
            tms, oms = peers.get("torch"), peers.get("ort")
            best = min(peers.values()) if peers else None
            print(f"{name_:10} {desc:32} {t:3d} {ms:8.3f} {gbs:7.2f} {gtaps:7.2f} {pct_copy:6.0f}% {run_ms:8.3f} "
                  f"{fmt_ms(tms)} {fmt_ms(oms)} {fmt_ratio(tms, run_ms)} {fmt_ratio(oms, run_ms)} "
                  f"{fmt_ratio(best, run_ms)}")


if __name__ == "__main__":
    main()
