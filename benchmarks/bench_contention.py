"""Speed under CPU contention: a conv-stack plan and a training step at 1 and
2 threads, on a quiet machine and with one competing busy process, beside
ONNX Runtime running the same conv stack.

    PYTHONPATH=. python benchmarks/bench_contention.py [--repeat 60] [--steps 30]

The competitor is a separate Python process spinning in a loop, started
before and stopped after each loaded measurement.  Every configuration runs in
a fresh subprocess (so each gets its own OpenMP runtime and environment);
figures are medians of per-run wall times.  On a shared machine the absolute
numbers move with whatever else runs; compare the columns of one invocation.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# The conv stack: four 3x3 convs with ReLU-free pooling between, batch 1,
# the shape of a small server model's request.
STACK = [(3, 32, 64), (32, 32, 64), (32, 64, 32), (64, 64, 32)]   # (c_in, c_out, size)

WORKER = r"""
import json, statistics, sys, time
import numpy as np
kind, threads, repeat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stack = json.loads(sys.argv[4])
rng = np.random.default_rng(0)
ws = [(rng.standard_normal((co, ci, 3, 3)) * 0.1).astype(np.float32) for ci, co, _ in stack]
x = rng.standard_normal((1, stack[0][0], stack[0][2], stack[0][2])).astype(np.float32)

def med(fn, n):
    for _ in range(3):
        fn()
    ts = []
    for _ in range(n):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts)

if kind == "rlx":
    import rlx_cpu
    g = rlx_cpu.Graph()
    h = g.input("x", x.shape)
    for i, w in enumerate(ws):
        h = g.conv2d(h, g.constant(w), padding=1)
        if i < len(ws) - 1 and stack[i + 1][2] < stack[i][2]:
            h = g.max_pool2d(h, 2)
    g.output(h)
    plan = rlx_cpu.compile(g, num_threads=threads)
    print(json.dumps({"ms": 1e3 * med(lambda: plan.run({"x": x}), repeat)}))
elif kind == "ort":
    import onnx, onnxruntime as ort
    from onnx import helper, TensorProto, numpy_helper
    nodes, inits, cur = [], [], "x"
    for i, w in enumerate(ws):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [cur, f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1]))
        cur = f"c{i}"
        if i < len(ws) - 1 and stack[i + 1][2] < stack[i][2]:
            nodes.append(helper.make_node("MaxPool", [cur], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
            cur = f"p{i}"
    graph = helper.make_graph(nodes, "stack", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info(cur, TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    print(json.dumps({"ms": 1e3 * med(lambda: sess.run(None, {"x": x}), repeat)}))
else:   # train: images/s of the example CNN's SGD step
    from rlx_cpu.training import build_cnn_training, synthetic_digits
    batch = 32
    trainer = build_cnn_training(batch, num_threads=threads)
    xs, ys = synthetic_digits(batch * 4, seed=1)
    feeds = [{"x": xs[i * batch:(i + 1) * batch], "labels": ys[i * batch:(i + 1) * batch]} for i in range(4)]
    it = iter(range(10 ** 9))
    s = med(lambda: trainer.step(feeds[next(it) % 4]), repeat)
    print(json.dumps({"ms": 1e3 * s, "images_per_s": batch / s}))
"""

SPIN = "import time\nt = time.time() + 600\nwhile time.time() < t:\n    pass\n"


def measure(kind, threads, repeat, env_extra):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra)
    out = subprocess.run([sys.executable, "-c", WORKER, kind, str(threads), str(repeat), json.dumps(STACK)],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=60, help="timed runs of the conv stack per figure")
    ap.add_argument("--steps", type=int, default=30, help="timed training steps per figure")
    ap.add_argument("--no-ort", action="store_true")
    ap.add_argument("--env", action="append", default=[], help="extra NAME=VALUE for the measured process")
    ap.add_argument("--compare-fixed", action="store_true",
                    help="also run the 2-thread rlx rows with RLX_ADAPTIVE_THREADS=0 ('fixed': every run on 2 threads)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="quiet+loaded rounds; each figure is the median over rounds (default 1)")
    args = ap.parse_args()
    env_extra = dict(e.split("=", 1) for e in args.env)
    # (label, kind, threads, runs, extra environment)
    configs = [("rlx", "rlx", 1, args.repeat, {}), ("rlx", "rlx", 2, args.repeat, {})]
    if args.compare_fixed:
        configs.append(("rlx fixed", "rlx", 2, args.repeat, {"RLX_ADAPTIVE_THREADS": "0"}))
    if not args.no_ort:
        configs += [("ort", "ort", 1, args.repeat, {}), ("ort", "ort", 2, args.repeat, {})]
    configs += [("train", "train", 1, args.steps, {}), ("train", "train", 2, args.steps, {})]
    if args.compare_fixed:
        configs.append(("train fixed", "train", 2, args.steps, {"RLX_ADAPTIVE_THREADS": "0"}))
    samples = {}
    for _ in range(max(1, args.rounds)):
        for load in ("quiet", "loaded"):
            competitor = subprocess.Popen([sys.executable, "-c", SPIN]) if load == "loaded" else None
            try:
                if competitor:
                    time.sleep(0.3)
                for label, kind, t, n, env in configs:
                    samples.setdefault((load, label, t), []).append(measure(kind, t, n, {**env_extra, **env}))
            finally:
                if competitor:
                    competitor.kill()
                    competitor.wait()
    results = {}
    for key, runs in samples.items():
        bad = [r for r in runs if "error" in r]
        results[key] = bad[0] if bad else {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"conv stack {STACK} batch 1 (median ms per run) and the example CNN's training step "
          f"(batch 32, median images/s); {os.cpu_count()} CPUs; median of {max(1, args.rounds)} round(s)"
          + (f"; env {env_extra}" if env_extra else ""))
    print(f"{'':14s} {'quiet':>12s} {'loaded':>12s} {'loaded/quiet':>13s}")
    for label, kind, t, _, _ in configs:
        q, lo = results[("quiet", label, t)], results[("loaded", label, t)]
        key = "images_per_s" if kind == "train" else "ms"
        if "error" in q or "error" in lo:
            print(f"{label} {t}T: {q.get('error') or lo.get('error')}")
            continue
        unit = "img/s" if kind == "train" else "ms"
        print(f"{label + ' ' + str(t) + 'T':14s} {q[key]:9.2f} {unit:>2s} {lo[key]:9.2f} {unit:>2s} "
              f"{lo[key] / q[key]:12.2f}x")


if __name__ == "__main__":
    main()
