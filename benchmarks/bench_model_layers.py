"""Per-layer times of a zoo model, rlx_cpu next to ONNX Runtime.

    PYTHONPATH=. python benchmarks/bench_model_layers.py [--model mobilenet_v2_full] [--threads 1] [--batch 1]
                                                        [--repeat 30] [--layers]

Exports the zoo model (rlx_cpu/zoo.py), times every thunk of rlx_cpu's plan
(plan.profile) and every node of ONNX Runtime's session
(SessionOptions.enable_profiling: each node's `kernel_time`), the two run
alternately, one whole run each, --repeat times; takes the median of each
thunk and node over those runs, and pairs the convs
of the two in graph order: ORT fuses Clip and Add into its convs as rlx_cpu's
fuse_epilogue pass does, so both run one conv node per ONNX Conv (rlx_cpu's
matched by the conv's output name, ORT's in graph order), except rlx_cpu's
fused inverted residual blocks, each paired with the sum of its 2-3 convs on
ORT's side.  Prints the
sum per layer kind and output plane (stem, depthwise and grouped by stride, pointwise
expand / project), with `--layers` every conv, and each side's other nodes.

ORT's per-node times at more than one thread are its kernels' own clocks and
do not add up to its wall time; compare those with one-node models
(bench_conv2d.py) instead.  Timings are wall-clock on whatever else the
machine is doing.
"""
import argparse
import json
import os
import statistics
import tempfile

import numpy as np

from rlx_cpu import zoo
from rlx_cpu.session import InferenceSession


def conv_layers(model):
    """[(label, Cin, Cout, h_out, w_out, MFLOP per image)] of each Conv node, in graph order."""
    import onnx
    from onnx import shape_inference
    m = shape_inference.infer_shapes(model)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in m.graph.value_info}
    inits = {t.name: tuple(t.dims) for t in m.graph.initializer}
    out = []
    for node in m.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        co, cpg, kh, kw = inits[node.input[1]]
        g = attrs.get("group", 1)
        s = attrs.get("strides", [1, 1])[0]
        h, w = shapes[node.output[0]][2:4]
        if not out:
            label = f"stem {kh}x{kw} s{s}"
        elif g > 1 and cpg == 1:
            label = f"depthwise {kh}x{kw} s{s}"
        elif g > 1:
            label = f"grouped {kh}x{kw} s{s}"
        elif kh * kw > 1:
            label = f"conv {kh}x{kw} s{s}"
        else:
            label = "pointwise expand" if cpg * g < co else "pointwise project"
        out.append((label, cpg * g, co, h, w, 2.0 * co * cpg * kh * kw * h * w / 1e6))
    return out


def ort_session(data, threads):
    """An ONNX Runtime session with per-node profiling on (its profile goes to a temporary directory)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.enable_profiling = True
    tmp = tempfile.mkdtemp()
    so.profile_file_prefix = os.path.join(tmp, "ort")
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def ort_node_ms(sess, repeat):
    """[(op_name, node name, median ms)] of the session's nodes in run order,
    over its last `repeat` runs; ends the session's profiling."""
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    times, order = {}, []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            key = (e["args"].get("op_name"), e["name"][:-len("_kernel_time")])
            if key not in times:
                order.append(key)
            times.setdefault(key, []).append(e["dur"] / 1e3)
    # the warm-up runs are in the profile too: take the last `repeat`
    return [(op, name, statistics.median(times[(op, name)][-repeat:])) for op, name in order]


def profile_interleaved(plan, sess, feeds, repeat, warmup=3):
    """Per-thunk medians of rlx_cpu's plan and per-node medians of ORT's
    session, the two run alternately (one rlx_cpu run, one ORT run) so that a
    slow phase of the host hits both sides alike."""
    plan.profile(feeds, repeat=warmup, warmup=1)
    for _ in range(warmup):
        sess.run(None, feeds)
    samples = []
    for _ in range(repeat):
        samples.append([s for _, s in plan.profile(feeds, repeat=1, warmup=0)])
        sess.run(None, feeds)
    med = np.median(np.array(samples), axis=0)
    return list(zip(plan.thunks, (float(v) for v in med))), ort_node_ms(sess, repeat)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="mobilenet_v2_full")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--layers", action="store_true", help="also print every conv")
    args = p.parse_args()
    import onnx

    model, x = zoo.build(args.model, batch=args.batch)
    data = zoo.export(model, x)
    feeds = {"x": np.asarray(x)}
    sess = InferenceSession(data, num_threads=args.threads)
    plan = sess.plan_for([feeds["x"].shape])
    prof, ort_nodes = profile_interleaved(plan, ort_session(data, args.threads), feeds, args.repeat)
    rlx_convs = [(th, 1e3 * s) for th, s in prof if th.kind.startswith("conv")]
    rlx_other = [(th, 1e3 * s) for th, s in prof if not th.kind.startswith("conv")]
    ort_convs = [(n, ms) for op, n, ms in ort_nodes if op in ("Conv", "FusedConv")]
    ort_other = [(f"{op} {n}", ms) for op, n, ms in ort_nodes if op not in ("Conv", "FusedConv")]
    layers = conv_layers(onnx.load_from_string(data))
    # ORT runs its convs in graph order, rlx_cpu's plan may not (a
    # downsample conv after its block's others), and a fused inverted
    # residual block is one thunk for its 2-3 convs: pair each thunk with the
    # ONNX convs up to the one whose output it is named after
    order = {n.output[0]: i for i, n in enumerate(n for n in onnx.load_from_string(data).graph.node
                                                  if n.op_type == "Conv")}
    # a conv whose blocked output a reorder then turns back to NCHW is named
    # after the NCHW tensor with ".nchwc" added
    def conv_name(th):
        return th.op_name[:-len(".nchwc")] if th.op_name.endswith(".nchwc") else th.op_name

    if not all(conv_name(th) in order for th, _ in rlx_convs) or len(layers) != len(ort_convs):
        raise SystemExit(f"cannot pair the convs: {len(layers)} Conv nodes, {len(rlx_convs)} rlx_cpu conv "
                         f"thunks, {len(ort_convs)} ORT conv nodes")
    rlx_convs.sort(key=lambda c: order[conv_name(c[0])])
    rows, start = [], 0
    for th, ms in rlx_convs:
        end = order[conv_name(th)] + 1
        idx = list(range(start, end)) if th.kind == "conv_nchwc_ir" else [end - 1]
        start = max(start, end)
        first = layers[idx[0]]
        label = "inverted residual" if len(idx) > 1 else first[0]
        mf = sum(layers[i][5] for i in idx)
        rows.append(((label, first[1], layers[idx[-1]][2], layers[idx[-1]][3], layers[idx[-1]][4], mf), (th, ms),
                     (None, sum(ort_convs[i][1] for i in idx))))
    print(f"{args.model}: batch {args.batch}, {args.threads} thread(s), median of {args.repeat} runs "
          f"(graph passes: {plan.pass_summary})")
    if args.layers:
        print(f"{'#':>3} {'layer':<20} {'Cin->Cout':>10} {'plane':>7} {'MFLOP':>7} {'rlx ms':>7} {'ORT ms':>7} "
              f"{'rlx/ORT':>7} {'rlx GF/s':>8} {'algorithm':>9}")
        for i, ((label, ci, co, h, w, mf), (th, r), (_, o)) in enumerate(rows):
            algo = getattr(getattr(th, "algorithm", None), "label", "-")
            print(f"{i:>3} {label:<20} {ci:>4}->{co:<5} {h:>3}x{w:<3} {mf * args.batch:7.1f} {r:7.3f} {o:7.3f} "
                  f"{r / o:7.2f} {mf * args.batch / r:8.0f} {algo:>9}")
    groups = {}
    for (label, ci, co, h, w, mf), (_, r), (_, o) in rows:
        g = groups.setdefault(f"{label} @{h}x{w}", [0, 0.0, 0.0, 0.0])
        g[0] += 1
        g[1] += r
        g[2] += o
        g[3] += mf * args.batch
    print(f"{'layer kind @ output plane':<32} {'n':>3} {'rlx ms':>8} {'ORT ms':>8} {'rlx/ORT':>8} {'gap ms':>8} "
          f"{'rlx GF/s':>8} {'ORT GF/s':>8}")
    for key, (n, r, o, mf) in groups.items():
        print(f"{key:<32} {n:>3} {r:8.3f} {o:8.3f} {r / o:8.2f} {r - o:8.3f} {mf / r:8.0f} {mf / o:8.0f}")
    tr, to = sum(r for _, r in rlx_convs), sum(o for _, o in ort_convs)
    print(f"{'all convs':<32} {len(rows):>3} {tr:8.3f} {to:8.3f} {tr / to:8.2f} {tr - to:8.3f}")
    print("other nodes, rlx_cpu: " + ", ".join(f"{th.kind} {ms:.3f}" for th, ms in rlx_other))
    print("other nodes, ORT: " + ", ".join(f"{name} {ms:.3f}" for name, ms in ort_other))


if __name__ == "__main__":
    main()
