"""`python -m rlx_cpu run`: run an ONNX model (or the model zoo), check it
against ONNX Runtime and time it against ONNX Runtime and PyTorch.

    python -m rlx_cpu run MODEL.onnx [--batch N] [--threads T] [--repeat R]
    python -m rlx_cpu run --zoo [--resolution R] [--models a,b] [--exporter dynamo]

For one model it loads the model into an :class:`~rlx_cpu.InferenceSession`,
feeds it seeded random input (a dynamic batch dim takes --batch, other
dynamic dims --resolution), and prints

* the largest difference from ONNX Runtime's outputs, relative to their
  magnitude (when onnxruntime is installed);
* a per-layer table: the median time of every thunk of the compiled plan
  over --repeat runs, then the same time summed per kind of thunk;
* ms per run, ms per image and images/s of rlx_cpu, of ONNX Runtime
  (ORT_ENABLE_ALL, intra_op_num_threads = --threads) and of PyTorch
  (inference_mode, torch.set_num_threads(--threads)), timed interleaved, the
  median of --repeat runs each.  PyTorch needs the torch module, so it is
  timed for zoo models only.

``--zoo`` exports each zoo model (rlx_cpu/zoo_models.py: torchvision's
architectures at reduced width; at full size, torchvision's own
configurations, when named in --models, or all of them with ``--models
full``) with torch.onnx.export and runs it as above, printing the per-kind
split per model and one summary table at the end (the per-thunk tables with
--layers).  A progress bar on stderr shows the warm-up when stderr is a
terminal.  Timings are wall-clock on whatever else the machine is doing.
"""
import statistics
import sys
import time

import numpy as np

from .timing import DEFAULT_SETTLE_S, interleaved_samples

TOL = 1e-4


def add_run_arguments(p):
    """The run job's options (python -m rlx_cpu run --help)."""
    p.add_argument("model", nargs="?", help="an .onnx file (omit with --zoo)")
    p.add_argument("--zoo", action="store_true", help="export and run the model zoo instead of a file")
    p.add_argument("--models", default=None,
                   help="comma-separated zoo models (default: every reduced model; 'full': every full-size "
                        "configuration, torchvision's own, e.g. resnet50, densenet121, regnet_x_400mf)")
    p.add_argument("--resolution", type=int, default=None,
                   help="input height = width (zoo: the vocoder's frame count; file: its dynamic spatial dims); "
                        "None: the zoo's own sizes, 32-64")
    p.add_argument("--batch", type=int, default=1, help="batch size (a file's dynamic first dim)")
    p.add_argument("--threads", type=int, default=None,
                   help="threads of rlx_cpu, ONNX Runtime and PyTorch (None: rlx_cpu.get_num_threads())")
    p.add_argument("--repeat", type=int, default=10, help="timed runs; tables show medians")
    p.add_argument("--seed", type=int, default=0, help="seed of the random input (file models)")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                   help="zoo: torch.onnx.export path (TorchScript at opset 17, or dynamo at opset 18)")
    p.add_argument("--layers", action="store_true", help="zoo: also print each model's per-thunk table")
    p.add_argument("--no-peers", action="store_true", help="do not check or time ONNX Runtime and PyTorch")


def run_cli(args, error, out=None):
    """Run the job with parsed options; `error(msg)` reports a bad one."""
    out = sys.stdout if out is None else out
    from .threads import resolve_num_threads
    if args.zoo == (args.model is not None):
        error("run: give either an .onnx file or --zoo")
    if args.models and not args.zoo:
        error("run: --models needs --zoo")
    for opt in ("batch", "repeat", "resolution"):
        v = getattr(args, opt)
        if v is not None and v < 1:
            error(f"run: --{opt} must be a positive integer, got {v}")
    threads = resolve_num_threads(args.threads, "run")
    peers = _peers(args.no_peers)
    if args.zoo:
        return _run_zoo(args, threads, peers, out)
    try:
        with open(args.model, "rb") as f:
            data = f.read()
    except OSError as e:
        error(f"run: cannot read {args.model!r}: {e}")
    row = run_model(args.model, data, None, threads, args.batch, args.resolution, args.repeat, args.seed,
                    peers, out, layers=True, no_peers=args.no_peers)
    return 0 if row["ok"] else 1


def _peers(disabled):
    found = {}
    if disabled:
        return found
    try:
        import onnxruntime
        found["ort"] = onnxruntime
    except ImportError:
        pass
    try:
        import torch
        found["torch"] = torch
    except ImportError:
        pass
    return found


def _input_feeds(sess, batch, resolution, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for arg in sess.get_inputs():
        shape = []
        for axis, d in enumerate(arg.shape or ()):
            if isinstance(d, int):
                shape.append(d)
            elif axis == 0:
                shape.append(batch)
            elif resolution is not None:
                shape.append(resolution)
            else:
                raise ValueError(f"run: input {arg.name!r} has dynamic dim {d!r} on axis {axis} "
                                 f"(shape {arg.shape}); pass --resolution to set it")
        feeds[arg.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _ort_session(ort, data, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])


def _rel_error(got, want):
    worst = 0.0
    for g, w in zip(got, want):
        w = np.asarray(w, np.float64)
        if g.shape != w.shape:
            return float("inf")
        scale = max(float(np.abs(w).max()), 1e-30)
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max()) / scale)
    return worst


def run_model(label, data, torch_module, threads, batch, resolution, repeat, seed, peers, out, layers=True,
              feeds=None, no_peers=False):
    """Check and time one model (ONNX bytes).  Returns a summary row dict."""
    from .__main__ import Progress
    from .session import InferenceSession

    ort, torch = peers.get("ort"), peers.get("torch") if torch_module is not None else None
    steps = 3 + bool(ort) + bool(torch)
    bar = Progress(f"warming up {label}"[:28], steps, after=0.5)
    done = 0
    t0 = time.perf_counter()
    sess = InferenceSession(data, num_threads=threads)
    feeds = feeds if feeds is not None else _input_feeds(sess, batch, resolution, seed)
    names = [a.name for a in sess.get_inputs()]
    plan = sess.plan_for([feeds[n].shape for n in names])
    compile_ms = 1e3 * (time.perf_counter() - t0)
    done += 1
    bar.update(done)
    got = sess.run(None, feeds)
    plan.run(feeds)
    done += 1
    bar.update(done)
    n_images = next(iter(feeds.values())).shape[0] if feeds else 1
    row = {"model": label, "batch": n_images, "threads": threads, "ok": True, "err": None}
    runners = [("rlx_cpu", lambda: plan.run(feeds))]
    if ort is not None:
        osess = _ort_session(ort, data, threads)
        want = osess.run(None, feeds)
        row["err"] = _rel_error(got, want)
        row["ok"] = row["err"] <= TOL
        runners.append(("onnxruntime", lambda: osess.run(None, feeds)))
        osess.run(None, feeds)
        done += 1
        bar.update(done)
    if torch is not None:
        torch.set_num_threads(threads)
        xt = [torch.from_numpy(feeds[n]) for n in names]

        def run_torch():
            with torch.inference_mode():
                return torch_module(*xt)
        run_torch()
        runners.append(("torch", run_torch))
        done += 1
        bar.update(done)
    prof = plan.profile(feeds, repeat=repeat)
    done += 1
    bar.update(done)

    # Interleaved, with the other runtimes' spinning workers parked before
    # each turn (rlx_cpu/timing.py), alike at every thread count.
    samples = interleaved_samples(dict(runners), repeat, warmup=0, settle=DEFAULT_SETTLE_S)
    ms = {name: 1e3 * statistics.median(v) for name, v in samples.items()}
    row.update(rlx=ms["rlx_cpu"], ort=ms.get("onnxruntime"), torch=ms.get("torch"), kinds=per_kind(prof))

    shapes = ", ".join(f"{n} {list(feeds[n].shape)}" for n in names)
    print(f"\n== {label}: input {shapes}, {threads} thread(s); compiled in {compile_ms:.0f} ms "
          f"({len(plan.thunks)} thunks, arena {plan.arena_nbytes / 2**20:.2f} MiB)", file=out)
    if plan.pass_summary:
        print(f"graph passes: {plan.pass_summary}", file=out)
    if ort is None:
        print("parity vs ONNX Runtime: n/a (onnxruntime is not installed)", file=out)
    else:
        print(f"parity vs ONNX Runtime: max rel err {row['err']:.2e} (tol {TOL:g}) "
              f"{'OK' if row['ok'] else 'FAILED'}", file=out)
    print_layers(prof, repeat, out, thunks=layers)
    print(f"{'runtime':<13} {'ms/run':>9} {'ms/image':>9} {'images/s':>9} {'time/rlx':>10}", file=out)
    for name in ("rlx_cpu", "onnxruntime", "torch"):
        if name in ms:
            v = ms[name]
            print(f"{name:<13} {v:9.3f} {v / n_images:9.3f} {1e3 * n_images / v:9.1f} "
                  f"{v / ms['rlx_cpu']:9.2f}x", file=out)
        else:
            if name == "onnxruntime":
                why = "--no-peers" if no_peers else "onnxruntime is not installed"
            elif torch_module is None:
                why = "a model file has no PyTorch module to compare with"
            else:
                why = "--no-peers" if no_peers else "torch is not installed"
            print(f"{name:<13} n/a ({why})", file=out)
    return row


def _run_zoo(args, threads, peers, out):
    from . import zoo
    if "torch" not in _peers(False):
        print("run --zoo: the zoo's models are torch modules; install torch (pip install torch==2.13.0)",
              file=sys.stderr)
        return 2
    if args.models:
        names = [m.strip() for m in args.models.split(",") if m.strip()]
        # "full": every full-size configuration (torchvision's, zoo.full_names())
        names = [n for m in names for n in (zoo.full_names() if m == "full" else [m])]
        known = zoo.names(full=True)
        bad = [m for m in names if m not in known]
        if bad:
            print(f"run --zoo: unknown model(s) {bad}; known: {', '.join(known)}", file=sys.stderr)
            return 2
    else:
        names = zoo.names()
    dynamo = args.exporter == "dynamo"
    rows = []
    print(f"rlx_cpu model zoo: {len(names)} models, batch {args.batch}, {threads} thread(s), "
          f"{args.exporter} export, median of {args.repeat} runs", file=out)
    for name in names:
        try:
            model, x = zoo.build(name, batch=args.batch, resolution=args.resolution)
            data = zoo.export(model, x, dynamo=dynamo)
            rows.append(run_model(name, data, model, threads, args.batch, None, args.repeat, 0, peers, out,
                                  layers=args.layers, feeds={"x": x}, no_peers=args.no_peers))
        except Exception as e:       # one model's failure is reported in the table, the others still run
            print(f"\n== {name}: FAILED: {type(e).__name__}: {e}", file=out)
            rows.append({"model": name, "batch": args.batch, "threads": threads, "ok": False,
                         "failed": f"{type(e).__name__}"})
    print_summary(rows, out)
    return 0 if all(r["ok"] for r in rows) else 1


def per_kind(prof):
    """{thunk kind: (count, seconds)} from Plan.profile's [(thunk, seconds)]."""
    kinds = {}
    for th, secs in prof:
        n, t = kinds.get(th.kind, (0, 0.0))
        kinds[th.kind] = (n + 1, t + secs)
    return kinds


def _algorithm(th):
    algo = getattr(th, "algorithm", None)
    return getattr(algo, "label", "-") if algo is not None else "-"


def print_layers(prof, repeat, out, thunks=True):
    """The per-thunk table (thunks=True) and the per-kind split."""
    total = sum(s for _, s in prof) or 1e-30
    if thunks:
        print(f"per layer (each thunk of the plan, median of {repeat} runs):", file=out)
        print(f"{'#':>4} {'layer':<36} {'kind':<22} {'algorithm':<9} {'ms':>8} {'%':>6}", file=out)
        for i, (th, secs) in enumerate(prof):
            name = th.op_name if len(th.op_name) <= 36 else "..." + th.op_name[-33:]
            print(f"{i:>4} {name:<36} {th.kind:<22} {_algorithm(th):<9} {1e3 * secs:8.3f} "
                  f"{100 * secs / total:6.1f}", file=out)
    print(f"by kind (sum of thunk medians {1e3 * total:.3f} ms):", file=out)
    for kind, (n, secs) in sorted(per_kind(prof).items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:<26} {n:>4} thunks {1e3 * secs:9.3f} ms {100 * secs / total:6.1f}%", file=out)


def print_summary(rows, out):
    """The zoo's model table: one line per model."""
    print("\nsummary (ms per run, median; ratio = ORT ms / rlx_cpu ms, > 1: rlx_cpu faster):", file=out)
    print(f"{'model':<34} {'batch':>5} {'thr':>3} {'rlx ms':>9} {'ORT ms':>9} {'torch ms':>9} {'ratio':>6} "
          f"{'max rel err':>11}", file=out)

    def f(v, fmt):
        return format(v, fmt) if v is not None else "n/a"
    ratios = []
    for r in rows:
        if r.get("failed"):
            print(f"{r['model']:<34} {r['batch']:>5} {r['threads']:>3} FAILED ({r['failed']})", file=out)
            continue
        ratio = r["ort"] / r["rlx"] if r.get("ort") else None
        if ratio:
            ratios.append(ratio)
        print(f"{r['model']:<34} {r['batch']:>5} {r['threads']:>3} {f(r['rlx'], '9.3f')} {f(r.get('ort'), '>9.3f')} "
              f"{f(r.get('torch'), '>9.3f')} {f(ratio, '>6.2f')} {f(r['err'], '>11.2e')}", file=out)
    if ratios:
        geo = float(np.exp(np.mean(np.log(ratios))))
        print(f"geometric mean of ORT ms / rlx_cpu ms over {len(ratios)} models: {geo:.2f}", file=out)
