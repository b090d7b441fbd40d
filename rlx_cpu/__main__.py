"""python -m rlx_cpu [--threads N] [JOB] [JOB OPTIONS]

jobs:
  demo (default)  builds a small CNN-like conv stack with random weights,
                  compiles it, checks every layer against the reference kernels
                  and prints a per-layer table (shape, algorithm, ms, GFLOP/s).
  train           trains the example CNN on synthetic digits with SGD.
  config          prints show_config().
  bench           per-call cost of running a plan, from Python and (--nogil)
                  from a nogil C-API loop (python -m rlx_cpu bench --help).
  run             runs an ONNX model (run MODEL.onnx) or the model zoo
                  (run --zoo): parity vs ONNX Runtime, per-layer times, ms per
                  image vs ONNX Runtime and PyTorch (python -m rlx_cpu run --help).

--threads may come before or after the job; the demo's other options may
also come first when no job is named (python -m rlx_cpu --batch 2).
"""
import argparse
import sys
import time

import numpy as np

from . import Graph, compile, show_config
from .config import config
from .ops.conv import Conv1x1Thunk, ConvThunk


class Progress:
    """A one-line progress bar on stderr, shown only for steps that run longer
    than `after` seconds (short steps stay silent) and only when the stream is
    a terminal: redirected to a log or a pipe it writes nothing (no ``\r``
    frames in logs)."""

    def __init__(self, label, total, after=1.0, stream=None, width=30):
        self.label, self.total, self.after, self.width = label, max(total, 1), after, width
        self.stream = stream or sys.stderr
        self.start = time.perf_counter()
        self.shown = False
        try:
            self.enabled = bool(self.stream.isatty())
        except (AttributeError, ValueError):      # no isatty, or a closed stream
            self.enabled = False

    def update(self, done):
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        if elapsed < self.after and done < self.total:
            return
        if not self.shown and done >= self.total and elapsed < self.after:
            return
        self.shown = True
        frac = min(done / self.total, 1.0)
        bar = "#" * int(frac * self.width)
        self.stream.write(f"\r{self.label:<28} [{bar:<{self.width}}] {100 * frac:5.1f}% {elapsed:6.1f}s")
        if done >= self.total:
            self.stream.write("\n")
        self.stream.flush()


def build_demo_graph(batch=1, all_outputs=False, seed=0):
    """A MobileNet/ResNet-flavoured stack covering every conv2d algorithm, plus
    a 1-D branch.  Returns (graph, feeds, layer names)."""
    rng = np.random.default_rng(seed)

    def weight(c_out, c_in_g, kh, kw=None):
        shape = (c_out, c_in_g, kh) if kw is None else (c_out, c_in_g, kh, kw)
        fan_in = c_in_g * kh * (kw or 1)
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def bias(c):
        return (0.1 * rng.standard_normal(c)).astype(np.float32)

    g = Graph()
    x = g.input("image", (batch, 3, 112, 112))
    a = g.input("audio", (batch, 16, 4000))
    layers = []
    h = g.conv2d(x, weight(32, 3, 3, 3), bias(32), stride=2, padding=1, name="stem_3x3_s2")
    layers.append(h)
    h = g.conv2d(h, weight(32, 1, 3, 3), bias(32), padding=1, groups=32, name="depthwise_3x3")
    layers.append(h)
    h = g.conv2d(h, weight(64, 32, 1, 1), bias(64), name="pointwise_1x1")
    layers.append(h)
    h = g.conv2d(h, weight(64, 64, 3, 3), bias(64), padding=1, name="resnet_3x3")
    layers.append(h)
    h = g.conv2d(h, weight(128, 64, 3, 3), bias(128), stride=2, padding=1, name="down_3x3_s2")
    layers.append(h)
    h = g.conv2d(h, weight(128, 64, 3, 3), bias(128), padding=2, dilation=2, groups=2, name="dilated_grouped")
    layers.append(h)
    h = g.conv2d(h, weight(256, 128, 1, 1), None, name="expand_1x1")
    layers.append(h)
    s = g.conv1d(a, weight(32, 16, 7), bias(32), stride=2, padding=3, name="audio_k7_s2")
    layers.append(s)
    s = g.conv1d(s, weight(32, 32, 3), bias(32), padding="same", dilation=3, name="audio_dilated")
    layers.append(s)
    g.output(*(layers if all_outputs else [layers[-3], layers[-1]]))
    feeds = {
        "image": rng.standard_normal((batch, 3, 112, 112)).astype(np.float32),
        "audio": rng.standard_normal((batch, 16, 4000)).astype(np.float32),
    }
    return g, feeds, [n.name for n in layers]


def _rel_error(got, want):
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got.astype(np.float64) - want).max() / scale)


def run_demo(batch=1, threads=None, repeat=20, algorithm="auto", out=sys.stdout):
    g_all, feeds, names = build_demo_graph(batch, all_outputs=True)
    print(f"rlx_cpu demo: conv stack, batch {batch}, conv_algorithm={algorithm!r}", file=out)
    t0 = time.perf_counter()
    fast = compile(g_all, conv_algorithm=algorithm, num_threads=threads)
    ref = compile(g_all, conv_algorithm="reference", num_threads=threads)
    print(f"compiled in {1e3 * (time.perf_counter() - t0):.1f} ms: {len(fast.thunks)} thunks, "
          f"{fast.num_threads} threads", file=out)

    # Correctness: every layer against the plain reference kernels.
    bar = Progress("checking vs reference", 2)
    got = fast.run(feeds)
    bar.update(1)
    want = ref.run(feeds)
    bar.update(2)
    errors = [_rel_error(a, b) for a, b in zip(got, want)]

    # Timing: the deployable plan (only the two final outputs, arena reuse on).
    g, feeds, _ = build_demo_graph(batch)
    plan = compile(g, conv_algorithm=algorithm, num_threads=threads)
    plan.run(feeds)
    bar = Progress(f"timing {repeat} runs", repeat)
    samples = []
    from . import _runtime
    ctx = plan._context()
    ctx.load(feeds)
    for i in range(repeat):
        samples.append(_runtime.run_launches_timed(ctx.launches, plan.num_threads, time.perf_counter))
        bar.update(i + 1)
    med = np.median(np.array(samples), axis=0)

    err_by_name = dict(zip(names, errors))
    header = f"{'layer':<18} {'in -> out':<34} {'kind':<10} {'algorithm':<10} {'ms':>8} {'GFLOP/s':>8} {'rel err':>9}"
    print(header, file=out)
    print("-" * len(header), file=out)
    total_ms, total_flops = 0.0, 0
    for th, secs in zip(plan.thunks, med):
        if isinstance(th, ConvThunk):
            d = th.dims
            flops, algo = d.flops, th.algorithm.label
            shape = f"{d.n}x{d.c_in}x{d.h}x{d.w} -> {d.c_out}x{d.h_out}x{d.w_out}"
        elif isinstance(th, Conv1x1Thunk):
            flops, algo = th.flops, "gemm_1x1"
            shape = f"{th.n}x{th.c_in}x{th.hw} -> {th.c_out}x{th.hw}"
        else:
            flops, algo, shape = 0, "-", "-"
        ms = 1e3 * secs
        total_ms += ms
        total_flops += flops
        gf = flops / secs / 1e9 if secs > 0 and flops else float("nan")
        err = err_by_name.get(th.op_name, float("nan"))
        print(f"{th.op_name:<18} {shape:<34} {th.kind:<10} {algo:<10} {ms:8.3f} {gf:8.2f} {err:9.2e}", file=out)
    print("-" * len(header), file=out)
    print(f"{'total':<18} {'':<34} {'':<10} {'':<10} {total_ms:8.3f} "
          f"{total_flops / (total_ms / 1e3) / 1e9:8.2f} {max(errors):9.2e}", file=out)
    print(f"arena {plan.arena_nbytes / 2**20:.2f} MiB (saved {plan.arena_saved_nbytes / 2**20:.2f} MiB by reuse), "
          f"constants {plan.const_nbytes / 2**20:.2f} MiB", file=out)
    ok = max(errors) <= 1e-4
    print("parity vs reference kernels:", "OK" if ok else "FAILED", f"(max rel err {max(errors):.2e}, tol 1e-4)",
          file=out)
    return 0 if ok else 1


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the docstring's layout and shows every option's default, unless
    its help states the default itself (an option whose None default means
    "given before the subcommand, or else ..." says what that is)."""

    def _get_help_string(self, action):
        if "(default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


# Options of the demo; also accepted before any subcommand, where they mean
# the (default) demo.  (option, argparse keyword arguments)
_DEMO_OPTIONS = (
    ("--batch", dict(type=int, default=1, help="images (and audio clips) per run")),
    ("--threads", dict(type=int, default=None,
                       help="OpenMP threads of the compiled plans (None: rlx_cpu.get_num_threads())")),
    ("--repeat", dict(type=int, default=20, help="timed runs; the table shows the median per layer")),
    ("--algorithm", dict(default="auto",
                         choices=["auto", "reference", "im2col", "direct", "winograd", "winograd_f4"],
                         help="conv2d algorithm for every layer ('auto' chooses per shape)")),
)


def build_parser():
    """The ``python -m rlx_cpu`` parser: demo (default), train, config.

    Options given before the subcommand are stored under ``global_<name>``;
    ``--threads`` there applies to every subcommand, the other demo options
    only to the demo (main() rejects them before another subcommand).  A new
    job (bench, run, ...) is one more ``sub.add_parser``."""
    from .training import TRAIN_DESCRIPTION, add_train_arguments

    p = argparse.ArgumentParser(prog="python -m rlx_cpu", description=__doc__, formatter_class=_HelpFormatter)
    for flag, kw in _DEMO_OPTIONS:
        # SUPPRESS: only options actually given appear in the namespace.
        kw = dict(kw, default=argparse.SUPPRESS, help=f"{kw['help']} (default: {kw['default']})")
        if "choices" not in kw:
            kw["metavar"] = flag[2:].upper()
        p.add_argument(flag, dest="global_" + flag[2:], **kw)
    sub = p.add_subparsers(dest="cmd", metavar="{demo,train,config,bench,run}",
                           help="job to run (default: demo; '<job> --help' lists its options)")
    d = sub.add_parser("demo", help="conv-stack demo: parity vs reference kernels and a per-layer timing table",
                       description="Build a small CNN-like conv stack with random weights, check every layer "
                                   "against the reference kernels and time it.", formatter_class=_HelpFormatter)
    for flag, kw in _DEMO_OPTIONS:
        d.add_argument(flag, **kw)
    t = sub.add_parser("train", help="train the example CNN on synthetic digits",
                       description=TRAIN_DESCRIPTION, formatter_class=_HelpFormatter)
    add_train_arguments(t)
    c = sub.add_parser("config", help="print build and runtime configuration (show_config())",
                       description="Print OpenMP state, thread count, BLAS and CPU features.",
                       formatter_class=_HelpFormatter)
    c.add_argument("--threads", type=int, default=None,
                   help="report the thread count as if rlx_cpu.set_num_threads(THREADS) had been called")
    from .bench import add_bench_arguments
    b = sub.add_parser("bench", help="per-call cost of a plan run, from Python and (--nogil) a nogil C-API loop",
                       description="Time a one-thunk plan per call: plan.run_into and plan.run from Python, "
                                   "and with --nogil K iterations inside one nogil C-API call.",
                       formatter_class=_HelpFormatter)
    add_bench_arguments(b)
    from .modelrun import __doc__ as run_doc, add_run_arguments
    r = sub.add_parser("run", help="run an ONNX model or the model zoo: parity vs ONNX Runtime, per-layer "
                                   "times, speed vs ONNX Runtime and PyTorch",
                       description=run_doc, formatter_class=_HelpFormatter)
    add_run_arguments(r)
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = build_parser()
    args = p.parse_args(argv)
    cmd = args.cmd or "demo"
    given = {flag[2:]: getattr(args, "global_" + flag[2:]) for flag, _ in _DEMO_OPTIONS
             if hasattr(args, "global_" + flag[2:])}
    if args.cmd is None:                      # no subcommand: the demo, with the options given
        for name, value in given.items():
            setattr(args, name, value)
        for flag, kw in _DEMO_OPTIONS:
            if not hasattr(args, flag[2:]):
                setattr(args, flag[2:], kw["default"])
    else:
        misplaced = sorted(set(given) - {"threads"})
        if misplaced:
            p.error(f"{', '.join('--' + m for m in misplaced)} before '{cmd}' "
                    f"{'is a demo option' if len(misplaced) == 1 else 'are demo options'}; "
                    f"see 'python -m rlx_cpu {cmd} --help' for the options of {cmd}")
        if "threads" in given and args.threads is None:
            args.threads = given["threads"]     # --threads before the subcommand
    if getattr(args, "threads", None) is not None and args.threads < 1:
        p.error(f"--threads must be a positive integer, got {args.threads}")
    if cmd == "config":
        if args.threads is not None:
            from .threads import set_num_threads
            set_num_threads(args.threads)
        show_config()
        return 0
    if cmd == "train":
        from .training import run_train
        return run_train(args)
    if cmd == "bench":
        from .bench import run_bench
        return run_bench(args, p.error)
    if cmd == "run":
        from .modelrun import run_cli
        return run_cli(args, p.error)
    return run_demo(args.batch, args.threads, args.repeat, args.algorithm)


if __name__ == "__main__":
    sys.exit(main())
