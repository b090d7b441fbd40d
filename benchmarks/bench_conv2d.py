"""Conv2D throughput per algorithm and thread count, side by side with PyTorch.

    python benchmarks/bench_conv2d.py [--repeat 30] [--threads 1,2] [--shapes resnet,1x1]

For each shape, algorithm and thread count it prints the median ms over
`repeat` runs of the kernels (plan.profile: the conv's thunk, and the
reorders around it when it runs on the blocked layout; no input copy) and
GFLOP/s.  The peers, when installed, run in the same process on the same
thread count: torch.nn.functional.conv2d (inference mode) and ONNX Runtime on a
one-node Conv model with the weight as an initializer.  They are timed
round-robin with rlx_cpu's whole `plan.run_into` (input copy included), and
the ratios peer_ms / run_ms are printed (> 1 means rlx_cpu is faster); `best`
is the faster peer.  `%peak` is GFLOP/s over the FMA peak given by --peak,
by default the one measured at start (rlx_cpu._conv2d.fma_peak_gflops: 12
independent AVX2 FMA chains on one thread), times the thread count.  Also reports the per-run overhead of a
one-thunk plan (plan.run on a tiny conv, end to end).
"""
import argparse
import statistics
import time

import numpy as np

import rlx_cpu
from rlx_cpu._conv2d import fma_peak_gflops
from _harness import (DEFAULT_SETTLE_S, busy_wait, fmt_ms, fmt_ratio, interleaved_medians, median_ms, optional_ort, optional_torch,
                      ort_session, ort_single_node, wake)

SHAPES = {
    # name: (N, C_in, H, W, C_out, k, stride, pad, groups)
    "resnet": (1, 64, 56, 56, 64, 3, 1, 1, 1),
    "1x1": (1, 256, 56, 56, 64, 1, 1, 0, 1),
    "resnet_b8": (8, 64, 56, 56, 64, 3, 1, 1, 1),
    "stem": (1, 3, 224, 224, 64, 7, 2, 3, 1),
    "deep": (1, 256, 14, 14, 256, 3, 1, 1, 1),
    "depthwise": (1, 128, 56, 56, 128, 3, 1, 1, 128),
    "mnist_b64": (64, 1, 28, 28, 32, 3, 1, 1, 1),
    # pointwise (1x1) convs of MobileNetV2 (mb_) and ResNet-50 (r50_) at batch 1
    "mb_32_16": (1, 32, 112, 112, 16, 1, 1, 0, 1),
    "mb_16_96": (1, 16, 112, 112, 96, 1, 1, 0, 1),
    "mb_24_144": (1, 24, 56, 56, 144, 1, 1, 0, 1),
    "mb_144_24": (1, 144, 56, 56, 24, 1, 1, 0, 1),
    "mb_32_192": (1, 32, 28, 28, 192, 1, 1, 0, 1),
    "mb_192_32": (1, 192, 28, 28, 32, 1, 1, 0, 1),
    "mb_64_384": (1, 64, 14, 14, 384, 1, 1, 0, 1),
    "mb_384_64": (1, 384, 14, 14, 64, 1, 1, 0, 1),
    "mb_96_576": (1, 96, 14, 14, 576, 1, 1, 0, 1),
    "mb_576_96": (1, 576, 14, 14, 96, 1, 1, 0, 1),
    "mb_160_960": (1, 160, 7, 7, 960, 1, 1, 0, 1),
    "mb_960_160": (1, 960, 7, 7, 160, 1, 1, 0, 1),
    "mb_320_1280": (1, 320, 7, 7, 1280, 1, 1, 0, 1),
    "r50_64_256": (1, 64, 56, 56, 256, 1, 1, 0, 1),
    "r50_256_64": (1, 256, 56, 56, 64, 1, 1, 0, 1),
    "r50_256_128": (1, 256, 56, 56, 128, 1, 1, 0, 1),
    "r50_512_128": (1, 512, 28, 28, 128, 1, 1, 0, 1),
    "r50_128_512": (1, 128, 28, 28, 512, 1, 1, 0, 1),
    "r50_1024_256": (1, 1024, 14, 14, 256, 1, 1, 0, 1),
    "r50_256_1024": (1, 256, 14, 14, 1024, 1, 1, 0, 1),
    "r50_2048_512": (1, 2048, 7, 7, 512, 1, 1, 0, 1),
    "r50_512_2048": (1, 512, 7, 7, 2048, 1, 1, 0, 1),
    "mb_16_96_b8": (8, 16, 112, 112, 96, 1, 1, 0, 1),
    "mb_960_160_b8": (8, 960, 7, 7, 160, 1, 1, 0, 1),
    "r50_1024_256_b8": (8, 1024, 14, 14, 256, 1, 1, 0, 1),
    "r50_512_2048_b8": (8, 512, 7, 7, 2048, 1, 1, 0, 1),
    # ResNet-18/34's other 3x3 convs: the stride-2 first conv of layers 2-4
    # and the 512-channel layer at 7x7; the 1x1 stride-2 downsample of layer 2
    "r18_s2_64_128": (1, 64, 56, 56, 128, 3, 2, 1, 1),
    "r18_s2_128_256": (1, 128, 28, 28, 256, 3, 2, 1, 1),
    "r18_s2_256_512": (1, 256, 14, 14, 512, 3, 2, 1, 1),
    "r18_128": (1, 128, 28, 28, 128, 3, 1, 1, 1),
    "c128_14": (1, 128, 14, 14, 128, 3, 1, 1, 1),
    "c64_14": (1, 64, 14, 14, 64, 3, 1, 1, 1),
    "c48_14": (1, 48, 14, 14, 48, 3, 1, 1, 1),
    "r18_512": (1, 512, 7, 7, 512, 3, 1, 1, 1),
    "r18_ds_64_128": (1, 64, 56, 56, 128, 1, 2, 0, 1),
    # the 3x3 stride-2 stem of MobileNetV2/V3, MNASNet and EfficientNet
    "mb_stem": (1, 3, 224, 224, 32, 3, 2, 1, 1),
}
# "tune" is auto with compile(tune=True): every eligible algorithm timed once, the fastest kept.
ALGOS = ["im2col", "direct", "winograd", "winograd_f4", "reference"]


def bench_shape(name, spec, threads, repeat, algos, torch, ort):
    n, c, h, w, co, k, s, p, g = spec
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = rng.standard_normal((co, c // g, k, k)).astype(np.float32)
    graph = rlx_cpu.Graph()
    xi = graph.input("x", x.shape)
    graph.output(graph.conv2d(xi, wt, stride=s, padding=p, groups=g))
    ho = (h + 2 * p - k) // s + 1
    wo = (w + 2 * p - k) // s + 1
    flops = 2 * n * co * ho * wo * (c // g) * k * k
    rows = []
    for t in threads:
        peers = {}
        if torch is not None:
            torch.set_num_threads(t)
            tx, tw = torch.from_numpy(x), torch.from_numpy(wt)

            def torch_call():
                with torch.inference_mode():
                    torch.nn.functional.conv2d(tx, tw, None, s, p, 1, g)
            peers["torch"] = torch_call
        if ort is not None:
            model = ort_single_node(ort, "Conv", x.shape, initializers=[("w", wt)], kernel_shape=[k, k],
                                    strides=[s, s], pads=[p] * 4, group=g)
            sess = ort_session(ort, model, t)
            if sess is not None:
                peers["ort"] = lambda: sess.run(None, {"x": x})
        for algo in algos:
            try:
                if algo == "tune":
                    plan = rlx_cpu.compile(graph, num_threads=t, tune=True)
                else:
                    plan = rlx_cpu.compile(graph, conv_algorithm=algo, num_threads=t)
            except ValueError:
                continue
            if algo == "reference" and flops > 5e8:
                continue
            # the conv's thunk (a blocked plan has reorders around it); the
            # kernel time is every thunk's, the reorders' included
            th = [t_ for t_ in plan.thunks if t_.kind != "reorder_nchwc"][-1]
            label = getattr(th, "algorithm", None)
            label = label.label if label is not None else ("gemm_1x1" if th.kind == "conv_1x1" else th.kind)
            r = max(3, repeat // 5) if algo == "reference" else repeat
            busy_wait(DEFAULT_SETTLE_S)          # the peers' spinning workers park first
            wake(lambda: plan.profile({"x": x}, repeat=1, warmup=0))
            prof = [sum(s_ for _, s_ in plan.profile({"x": x}, repeat=1, warmup=0)) for _ in range(r + 2)][2:]
            ms = 1e3 * statistics.median(prof)
            out = [np.empty(plan.output_shapes[0], np.float32)]
            timed = interleaved_medians({"rlx": lambda: plan.run_into({"x": x}, out), **peers}, r,
                                        settle=DEFAULT_SETTLE_S)
            rows.append((name, t, algo, label, ms, flops / ms / 1e6, timed.pop("rlx"), timed))
    return rows


def per_run_overhead(repeat):
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 4, 4))
    g.output(g.conv2d(x, np.ones((1, 1, 1, 1), np.float32)))
    plan = rlx_cpu.compile(g, num_threads=1)
    feeds = {"x": np.ones((1, 1, 4, 4), np.float32)}
    out = [np.empty((1, 1, 4, 4), np.float32)]
    run_us = 1e3 * median_ms(lambda: plan.run(feeds), repeat * 50)
    into_us = 1e3 * median_ms(lambda: plan.run_into(feeds, out), repeat * 50)
    kernel_us = 1e6 * statistics.median(plan.profile(feeds, repeat=repeat * 50)[i][1] for i in [0])
    return run_us, into_us, kernel_us


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default="resnet,1x1",
                    help="comma-separated SHAPES names; 'pointwise' = every mb_/r50_ row")
    ap.add_argument("--algos", default=",".join(ALGOS),
                    help="comma-separated: auto, tune (compile(tune=True)) and the forced algorithms")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--peak", type=float, default=None,
                    help="FMA peak GFLOP/s of one core (default: measured, rlx_cpu._conv2d.fma_peak_gflops)")
    args = ap.parse_args()
    if args.peak is None:
        args.peak = fma_peak_gflops(1)
    print(f"FMA peak: {args.peak:.1f} GFLOP/s per core (measured on 1 thread); %peak at t threads is over t x that")
    torch = optional_torch(args.no_torch)
    ort = optional_ort(args.no_ort)
    threads = [int(t) for t in args.threads.split(",")]
    print(f"rlx_cpu {rlx_cpu.__version__}; torch {torch.__version__ if torch else 'not installed'}; "
          f"onnxruntime {ort[1].__version__ if ort else 'not installed'}; median of {args.repeat}")
    print(f"{'shape':<10} {'thr':>3} {'requested':<10} {'ran':<10} {'kernel ms':>9} {'GFLOP/s':>8} {'%peak':>6} "
          f"{'run ms':>9} {'torch ms':>9} {'ort ms':>9} {'torch/':>7} {'ort/':>7} {'best/':>7}")
    names = []
    for name in args.shapes.split(","):
        names += [s for s in SHAPES if s.startswith(("mb_", "r50_"))] if name == "pointwise" else [name]
    for name in names:
        for row in bench_shape(name, SHAPES[name], threads, args.repeat, args.algos.split(","), torch, ort):
            name_, t, algo, label, ms, gf, run_ms, peers = row
            tms, oms = peers.get("torch"), peers.get("ort")
            best = min(peers.values()) if peers else None
            print(f"{name_:<10} {t:>3} {algo:<10} {label:<10} {ms:9.3f} {gf:8.1f} {100 * gf / (args.peak * t):5.0f}% "
                  f"{run_ms:9.3f} {fmt_ms(tms)} {fmt_ms(oms)} {fmt_ratio(tms, run_ms)} {fmt_ratio(oms, run_ms)} "
                  f"{fmt_ratio(best, run_ms)}")
    run_us, into_us, kernel_us = per_run_overhead(args.repeat)
    print(f"one-thunk plan (1x1x4x4 conv): run {run_us:.1f} us, run_into {into_us:.1f} us, "
          f"kernel alone {kernel_us:.1f} us")


if __name__ == "__main__":
    main()
