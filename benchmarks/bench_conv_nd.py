"""conv3d and conv-transpose (1-D/2-D/3-D) throughput per algorithm and thread
count, side by side with PyTorch.

    python benchmarks/bench_conv_nd.py [--repeat 20] [--threads 1,2] [--shapes c3d,ct2d]

For each shape, algorithm and thread count it prints the median ms over
`repeat` runs of the kernel alone (plan.profile, no input copy) and GFLOP/s
(2 * multiply-adds of the dense maths; for conv-transpose every tap of every
input, as for the forward conv it is the adjoint of).  With torch installed it
times torch.nn.functional in the same process (torch.set_num_threads to the
same count, inference mode) and prints torch_ms / rlx_ms (> 1: rlx_cpu faster).
"""
import argparse
import statistics
import time

import numpy as np

import rlx_cpu
from _harness import median_ms, optional_torch

# name: (op, N, C_in, spatial, C_out, kernel, stride, pad, output_padding, groups)
SHAPES = {
    "c3d": ("conv3d", 1, 32, (16, 32, 32), 32, 3, 1, 1, 0, 1),
    "c3d_b4": ("conv3d", 4, 16, (8, 16, 16), 16, 3, 1, 1, 0, 1),
    "ct2d": ("conv_transpose2d", 1, 64, (28, 28), 32, 4, 2, 1, 0, 1),
    "ct2d_b8": ("conv_transpose2d", 8, 64, (28, 28), 32, 4, 2, 1, 0, 1),
    "ct2d_dw": ("conv_transpose2d", 1, 64, (28, 28), 64, 4, 2, 1, 0, 64),
    "ct1d": ("conv_transpose1d", 1, 256, (512,), 128, 16, 8, 4, 0, 1),
    "ct3d": ("conv_transpose3d", 1, 32, (8, 16, 16), 16, 4, 2, 1, 0, 1),
}
ALGOS = ["im2col", "reference"]


def _torch_fn(torch, op, x, w, s, p, op_pad, g):
    f = getattr(torch.nn.functional, op)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    if op.startswith("conv_transpose"):
        return lambda: f(tx, tw, None, s, p, op_pad, g)
    return lambda: f(tx, tw, None, s, p, 1, g)


def bench_shape(name, spec, threads, repeat, algos, torch):
    op, n, c, sp, co, k, s, p, op_pad, g = spec
    nsp = len(sp)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, *sp)).astype(np.float32)
    transposed = op.startswith("conv_transpose")
    wshape = (c, co // g) + (k,) * nsp if transposed else (co, c // g) + (k,) * nsp
    wt = rng.standard_normal(wshape).astype(np.float32)
    graph = rlx_cpu.Graph()
    xi = graph.input("x", x.shape)
    if transposed:
        y = getattr(graph, op)(xi, wt, stride=s, padding=p, output_padding=op_pad, groups=g)
    else:
        y = getattr(graph, op)(xi, wt, stride=s, padding=p, groups=g)
    graph.output(y)
    rows = []
    for t in threads:
        torch_ms = None
        if torch is not None:
            torch.set_num_threads(t)
            with torch.inference_mode():
                torch_ms = median_ms(_torch_fn(torch, op, x, wt, s, p, op_pad, g), repeat)
        for algo in algos:
            plan = rlx_cpu.compile(graph, conv_algorithm=algo, num_threads=t)
            th = plan.thunks[-1]
            flops = th.flops
            if algo == "reference" and flops > 5e8:
                continue
            r = max(3, repeat // 5) if algo == "reference" else repeat
            prof = [plan.profile({"x": x}, repeat=1, warmup=0)[-1][1] for _ in range(r + 2)][2:]
            ms = 1e3 * statistics.median(prof)
            mode = plan.new_context().launches[-1].parallel_mode(t)
            rows.append((name, list(y.shape), t, th.algorithm.label, mode, ms, flops / ms / 1e6, torch_ms))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default="c3d,ct2d")
    ap.add_argument("--algos", default=",".join(ALGOS))
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    torch = optional_torch(args.no_torch)
    threads = [int(t) for t in args.threads.split(",")]
    print(f"rlx_cpu {rlx_cpu.__version__}; torch {torch.__version__ if torch else 'not installed'}; "
          f"median of {args.repeat}")
    print(f"{'shape':<8} {'out':<20} {'thr':>3} {'algo':<10} {'mode':<6} {'ms':>9} {'GFLOP/s':>8} "
          f"{'torch ms':>9} {'torch/rlx':>9}")
    for name in args.shapes.split(","):
        for row in bench_shape(name, SHAPES[name], threads, args.repeat, args.algos.split(","), torch):
            name_, out, t, label, mode, ms, gf, tms = row
            ratio = f"{tms / ms:9.2f}" if tms else f"{'-':>9}"
            tcol = f"{tms:9.3f}" if tms else f"{'-':>9}"
            print(f"{name_:<8} {str(out):<20} {t:>3} {label:<10} {mode:<6} {ms:9.3f} {gf:8.1f} {tcol} {ratio}")


if __name__ == "__main__":
    main()
