"""conv3d and conv-transpose (1-D/2-D/3-D) throughput per algorithm and thread
count, side by side with PyTorch and ONNX Runtime.

    python benchmarks/bench_conv_nd.py [--repeat 20] [--threads 1,2] [--shapes c3d,ct2d] [--algos auto,im2col]

For each shape, algorithm and thread count it prints the median ms of the
plan's launches alone (no input binding) and GFLOP/s (2 * multiply-adds of
the dense maths; for conv-transpose every tap of every input, as for the
forward conv it is the adjoint of), and `run ms`, the whole `plan.run_into`
timed round-robin with the peers in the same process on the same thread
count: torch.nn.functional (inference mode) and ONNX Runtime on the one-node
Conv / ConvTranspose model (weight as an initializer).  `best/run` is the
faster peer's ms over rlx_cpu's (> 1: rlx_cpu faster).  `ran` is what the
plan runs: the N-d kernel's algorithm, `conv_phases(P)` for the P phases of
a transposed conv in one launch, or `phases(P)` for a 1-D/2-D
conv-transpose lowered to P forward convs (ops/conv_backward.py).  Each
runtime's timed call follows 100 ms of busy waiting (rlx_cpu/timing.py).
`%peak` is GFLOP/s over the FMA peak (--peak, by default measured at start
on one thread: rlx_cpu._conv2d.fma_peak_gflops) times the thread count.
"""
import argparse

import numpy as np

import rlx_cpu
from rlx_cpu._conv2d import fma_peak_gflops
from _harness import DEFAULT_SETTLE_S, interleaved_medians, median_ms, optional_ort, optional_torch, ort_session, \
    ort_single_node
from rlx_cpu import _runtime

# name: (op, N, C_in, spatial, C_out, kernel, stride, pad, output_padding, groups).
# The conv gradients are of the forward conv (op conv2d_backward_*): C_in,
# spatial and C_out are the forward conv's, x and dy random; only torch has
# them (torch.nn.grad).
SHAPES = {
    "c1d": ("conv1d", 1, 512, (8192,), 512, 7, 1, 3, 0, 1),
    "c3d": ("conv3d", 1, 32, (16, 32, 32), 32, 3, 1, 1, 0, 1),
    "c3d_16_32": ("conv3d", 1, 16, (16, 32, 32), 32, 3, 1, 1, 0, 1),
    "c3d_b4": ("conv3d", 4, 16, (8, 16, 16), 16, 3, 1, 1, 0, 1),
    "ct2d": ("conv_transpose2d", 1, 64, (28, 28), 32, 4, 2, 1, 0, 1),
    "ct2d_b8": ("conv_transpose2d", 8, 64, (28, 28), 32, 4, 2, 1, 0, 1),
    "ct2d_dw": ("conv_transpose2d", 1, 64, (28, 28), 64, 4, 2, 1, 0, 64),
    "ct1d": ("conv_transpose1d", 1, 256, (512,), 128, 16, 8, 4, 0, 1),
    "ct1d_512": ("conv_transpose1d", 1, 512, (1024,), 256, 16, 8, 4, 0, 1),
    "ct3d": ("conv_transpose3d", 1, 32, (8, 16, 16), 16, 4, 2, 1, 0, 1),
    "bwd_input": ("conv2d_backward_input", 32, 32, (28, 28), 64, 3, 1, 1, 0, 1),
    "bwd_weight": ("conv2d_backward_weight", 32, 32, (28, 28), 64, 3, 1, 1, 0, 1),
}
ALGOS = ["auto", "im2col", "reference"]


def _torch_fn(torch, op, x, w, s, p, op_pad, g, dy=None):
    if op == "conv2d_backward_input":
        tw, tdy = torch.from_numpy(w), torch.from_numpy(dy)
        return lambda: torch.nn.grad.conv2d_input(x.shape, tw, tdy, s, p, 1, g)
    if op == "conv2d_backward_weight":
        tx, tdy = torch.from_numpy(x), torch.from_numpy(dy)
        return lambda: torch.nn.grad.conv2d_weight(tx, w.shape, tdy, s, p, 1, g)
    f = getattr(torch.nn.functional, op)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    if op.startswith("conv_transpose"):
        return lambda: f(tx, tw, None, s, p, op_pad, g)
    return lambda: f(tx, tw, None, s, p, 1, g)


def _ran(plan, op):
    """What the plan runs: the last kernel's algorithm, and for a transposed
    conv lowered to forward convs the number of phases (a blocked one:
    conv_transpose_nchwc, its phases inside)."""
    kinds = [t.kind for t in plan.thunks]
    # the blocked layout's reorders around the conv are not what it runs
    last = [t for t in plan.thunks if t.kind != "reorder_nchwc"][-1]
    if "phase_scatter" in kinds:
        return f"phases({kinds.count('phase_scatter')})"
    if kinds == ["conv_phases"]:
        return f"conv_phases({len(last.phases)})"
    if not hasattr(last, "algorithm"):          # a kernel of its own (conv_transpose_depthwise)
        return last.kind
    algo = "gemm_1x1" if last.kind == "conv_1x1" else last.algorithm.label
    if last.kind in ("conv", "conv_1x1") and (op.startswith("conv_transpose") or op.endswith("backward_input")):
        return f"phases(1):{algo}"
    return algo


def bench_shape(name, spec, threads, repeat, algos, torch, ort):
    op, n, c, sp, co, k, s, p, op_pad, g = spec
    nsp = len(sp)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, *sp)).astype(np.float32)
    transposed = op.startswith("conv_transpose")
    wshape = (c, co // g) + (k,) * nsp if transposed else (co, c // g) + (k,) * nsp
    wt = rng.standard_normal(wshape).astype(np.float32)
    graph = rlx_cpu.Graph()
    backward = op.startswith("conv2d_backward")
    dy = None
    if backward:
        fwd = rlx_cpu.Graph()
        y_shape = fwd.conv2d(fwd.input("x", x.shape), wt, stride=s, padding=p, groups=g).shape
        dy = rng.standard_normal(y_shape).astype(np.float32)
        if op == "conv2d_backward_input":
            feeds = {"dy": dy}
            y = graph.conv2d_backward_input(graph.input("dy", dy.shape), wt, x.shape, stride=s, padding=p, groups=g)
        else:
            feeds = {"x": x, "dy": dy}
            y = graph.conv2d_backward_weight(graph.input("x", x.shape), graph.input("dy", dy.shape), wt.shape,
                                             stride=s, padding=p, groups=g)
    else:
        feeds = {"x": x}
        xi = graph.input("x", x.shape)
    if backward:
        pass
    elif transposed:
        y = getattr(graph, op)(xi, wt, stride=s, padding=p, output_padding=op_pad, groups=g)
    else:
        y = getattr(graph, op)(xi, wt, stride=s, padding=p, groups=g)
    graph.output(y)
    # 2 * multiply-adds of the dense maths (a transposed conv: every tap of every input)
    taps = k ** nsp
    if transposed:
        flops = 2 * n * c * (co // g) * taps * int(np.prod(sp))
    else:
        out_sp = (dy.shape if backward else y.shape)[2:]
        flops = 2 * n * co * (c // g) * taps * int(np.prod(out_sp))
    rows = []
    for t in threads:
        peers = {}
        if torch is not None:
            torch.set_num_threads(t)
            tfn = _torch_fn(torch, op, x, wt, s, p, op_pad, g, dy)

            def torch_run(tfn=tfn):
                with torch.inference_mode():
                    tfn()
            peers["torch"] = torch_run
        if ort is not None and not backward:
            attrs = dict(kernel_shape=[k] * nsp, strides=[s] * nsp, pads=[p] * 2 * nsp, group=g)
            if transposed:
                attrs["output_padding"] = [op_pad] * nsp
            sess = ort_session(ort, ort_single_node(ort, "ConvTranspose" if transposed else "Conv", x.shape,
                                                    initializers=[("w", wt)], **attrs), t)
            if sess is not None:
                peers["ort"] = lambda sess=sess: sess.run(None, {"x": x})
        for algo in algos:
            if algo == "reference" and flops > 5e8:
                continue
            plan = rlx_cpu.compile(graph, conv_algorithm=algo, num_threads=t)
            ctx = plan.new_context()
            ctx.load(feeds)
            r = max(3, repeat // 5) if algo == "reference" else repeat
            ms = median_ms(lambda: _runtime.run_launches(ctx.launches, t), r)
            out = [np.empty(plan.output_shapes[0], np.float32)]
            timed = interleaved_medians({"rlx": lambda: plan.run_into(feeds, out), **peers}, r,
                                        settle=DEFAULT_SETTLE_S)
            run_ms = timed.pop("rlx")
            rows.append((name, list(y.shape), t, algo, _ran(plan, op), ms, flops / ms / 1e6, run_ms,
                         timed.get("torch"), timed.get("ort")))
    return rows


def _f(v, fmt):
    return "-" if v is None else format(v, fmt)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--shapes", default="c3d,ct2d")
    ap.add_argument("--algos", default=",".join(ALGOS))
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
    print("| shape | out | thr | requested | ran | kernel ms | GFLOP/s | %peak | run ms | torch ms | ort ms "
          "| best/run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        for row in bench_shape(name, SHAPES[name], threads, args.repeat, args.algos.split(","), torch, ort):
            name_, out, t, algo, ran, ms, gf, run_ms, tms, oms = row
            best = min(v for v in (tms, oms) if v is not None) if (tms or oms) else None
            print(f"| {name_} | {out} | {t} | {algo} | {ran} | {ms:.3f} | {gf:.1f} | {100 * gf / (args.peak * t):.0f}% "
                  f"| {run_ms:.3f} | {_f(tms, '.3f')} | {_f(oms, '.3f')} | {_f(best and best / run_ms, '.2f')} |")


if __name__ == "__main__":
    main()
