"""`python -m rlx_cpu`: subcommands, options before or after them, help text
and defaults on every option, progress bars only on a terminal."""
import argparse
import io
import re
import subprocess
import sys

import pytest

from rlx_cpu.__main__ import Progress, build_parser, main

TINY_TRAIN = ["--epochs", "1", "--train-size", "64", "--test-size", "32", "--target", "0", "--classes", "2"]


@pytest.mark.parametrize("argv", [["--threads", "1", "train", *TINY_TRAIN],
                                  ["train", "--threads", "1", *TINY_TRAIN]])
def test_threads_before_or_after_train_runs_training(argv, capfd):
    assert main(argv) == 0
    out = capfd.readouterr().out
    assert "final test accuracy" in out and "threads 1," in out
    assert "rlx_cpu demo" not in out


@pytest.mark.parametrize("job", ["train", "config", "demo"])
def test_demo_option_before_another_job_is_rejected_clearly(job, capfd):
    with pytest.raises(SystemExit) as e:
        main(["--batch", "2", job])
    err = capfd.readouterr().err
    if job == "demo":                       # the demo's own options may not come first either
        assert e.value.code == 2 and "--batch before 'demo'" in err
    else:
        assert e.value.code == 2
        assert f"--batch before '{job}' is a demo option" in err and f"{job} --help" in err


def test_job_help_after_global_option_shows_the_jobs_options(capfd):
    with pytest.raises(SystemExit) as e:
        main(["--batch", "2", "train", "--help"])
    assert e.value.code == 0
    out = capfd.readouterr().out
    for opt in ("--epochs", "--batch-size", "--lr", "--threads", "--profile"):
        assert opt in out
    assert "(default: 8)" in out            # --epochs


def _parsers():
    p = build_parser()
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)][0]
    return [("python -m rlx_cpu", p)] + sorted(subs.choices.items())


def test_every_option_has_help_and_shows_its_default():
    names = [n for n, _ in _parsers()]
    assert names == ["python -m rlx_cpu", "bench", "config", "demo", "run", "train"]
    for name, parser in _parsers():
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            assert action.help, (name, action.option_strings)
        assert text.count("(default:") >= sum(
            1 for a in parser._actions
            if a.option_strings and not isinstance(a, (argparse._HelpAction, argparse._StoreTrueAction))), name


def test_no_option_shows_two_defaults():
    for name, parser in _parsers():
        fmt = parser.formatter_class(prog=parser.prog)
        for action in parser._actions:
            if action.help and action.option_strings:
                shown = fmt._get_help_string(action)
                assert shown.count("(default:") <= 1, (name, action.option_strings, shown)
    bench = dict(_parsers())["bench"]
    text = " ".join(bench.format_help().split())
    assert "plan num_threads (default: 1, or --threads given before 'bench')" in text
    assert "(default: None)" not in text


@pytest.mark.parametrize("argv,threads", [(["bench"], None), (["bench", "--threads", "2"], 2),
                                          (["--threads", "2", "bench"], 2)])
def test_bench_threads_default(argv, threads, monkeypatch):
    import rlx_cpu.bench as bench

    seen = {}
    monkeypatch.setattr(bench, "run_bench", lambda args, error: seen.update(threads=args.threads) or 0)
    assert main(argv) == 0
    assert seen["threads"] == threads            # None: run_bench uses 1


def test_no_job_runs_the_demo_with_leading_options(capfd, monkeypatch):
    import rlx_cpu.__main__ as cli

    seen = {}
    monkeypatch.setattr(cli, "run_demo", lambda *a: seen.setdefault("args", a) and 0)
    assert main(["--batch", "3", "--threads", "1", "--repeat", "2", "--algorithm", "direct"]) == 0
    assert seen["args"] == (3, 1, 2, "direct")
    seen.clear()
    assert main(["demo", "--threads", "1"]) == 0
    assert seen["args"] == (1, 1, 20, "auto")
    seen.clear()
    assert main(["--threads", "1", "demo", "--repeat", "5"]) == 0
    assert seen["args"] == (1, 1, 5, "auto")


def test_config_threads(capfd):
    assert main(["--threads", "1", "config"]) == 0
    assert "num_threads: 1" in capfd.readouterr().out


def test_bad_thread_count_is_an_argument_error(capfd):
    with pytest.raises(SystemExit) as e:
        main(["--threads", "0", "train"])
    assert e.value.code == 2 and "--threads must be a positive integer" in capfd.readouterr().err


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_draws_only_on_a_terminal():
    log = io.StringIO()
    bar = Progress("step", 3, after=0.0, stream=log)
    for i in range(1, 4):
        bar.update(i)
    assert log.getvalue() == ""
    tty = _Tty()
    bar = Progress("step", 3, after=0.0, stream=tty)
    for i in range(1, 4):
        bar.update(i)
    assert tty.getvalue().count("\r") == 3 and tty.getvalue().endswith("\n")


def test_demo_output_to_a_pipe_has_no_carriage_returns():
    res = subprocess.run([sys.executable, "-c",
                          "import sys, rlx_cpu.__main__ as m; m.Progress('x', 2, after=0.0).update(2)"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "\r" not in res.stderr and "\r" not in res.stdout


# ---------------------------------------------------------------------------
# python -m rlx_cpu run
# ---------------------------------------------------------------------------

def _small_onnx(path):
    """Conv -> Relu -> GlobalAveragePool with a dynamic batch, built with onnx.helper."""
    onnx = pytest.importorskip("onnx", reason="onnx is not installed (the `test` extra pins onnx==1.22.0)")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["img", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("GlobalAveragePool", ["r"], ["y"], name="gap")], "small",
        [helper.make_tensor_value_info("img", TensorProto.FLOAT, ("N", 3, 16, 16))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ("N", 8, 1, 1))],
        initializer=[numpy_helper.from_array(w, "w")]), opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def test_run_a_model_file_through_a_pipe(tmp_path):
    """Parity line, graph passes, per-layer table, per-kind split, images/s; torch is n/a
    for a file; no carriage return in either stream (not a terminal)."""
    import importlib.util
    path = _small_onnx(str(tmp_path / "m.onnx"))
    res = subprocess.run([sys.executable, "-m", "rlx_cpu", "run", path, "--batch", "3", "--threads", "1",
                          "--repeat", "2"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr + res.stdout
    out = res.stdout
    assert "\r" not in out and "\r" not in res.stderr
    assert "input img [3, 3, 16, 16], 1 thread(s)" in out
    # the Relu is fused into the conv's epilogue by the graph passes
    for row in ("graph passes:", "fuse_epilogue: 1 relu", "per layer", "global_pool", "by kind",
                "ms/image", "images/s"):
        assert row in out, (row, out)
    # the conv's own row in the per-layer table (its kind: conv, or the
    # blocked stem kernel)
    assert re.search(r"^\s+0 c\s+conv\S*\s", out, re.M), out
    assert "torch         n/a (a model file has no PyTorch module" in out
    if importlib.util.find_spec("onnxruntime"):
        assert "parity vs ONNX Runtime: max rel err" in out and "OK" in out
        assert "\nonnxruntime " in out
    else:
        assert "parity vs ONNX Runtime: n/a" in out


def test_run_needs_a_file_or_the_zoo(capfd, tmp_path):
    for argv in (["run"], ["run", "m.onnx", "--zoo"], ["run", "m.onnx", "--models", "vgg11"],
                 ["run", "--zoo", "--batch", "0"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    err = capfd.readouterr().err
    assert "either an .onnx file or --zoo" in err and "--models needs --zoo" in err and "--batch must be" in err
    with pytest.raises(SystemExit):
        main(["run", str(tmp_path / "missing.onnx")])
    assert "cannot read" in capfd.readouterr().err


@pytest.mark.peer
def test_run_zoo_exports_runs_and_summarises(capfd):
    pytest.importorskip("torch", reason="torch is not installed (the `test` extra pins torch==2.13.0)")
    pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (part of the `test` extra)")
    assert main(["run", "--zoo", "--models", "resnet_basic,vocoder_1d", "--resolution", "32", "--threads", "1",
                 "--repeat", "2", "--batch", "2"]) == 0
    out = capfd.readouterr().out
    assert "== resnet_basic: input x [2, 3, 32, 32], 1 thread(s)" in out
    assert "== vocoder_1d: input x [2, 16, 32]" in out
    assert out.count("parity vs ONNX Runtime: max rel err") == 2 and "FAILED" not in out
    summary = out[out.index("summary"):]
    for name in ("resnet_basic", "vocoder_1d"):
        line = next(s for s in summary.splitlines() if s.startswith(name))
        assert "n/a" not in line, line           # rlx, ORT and torch figures all present
    assert "geometric mean" in summary
    assert main(["run", "--zoo", "--models", "nope"]) == 2
    assert "unknown model(s) ['nope']" in capfd.readouterr().err
    # "full" stands for every full-size configuration (checked before anything runs)
    assert main(["run", "--zoo", "--models", "full,nope"]) == 2
    err = capfd.readouterr().err
    assert "unknown model(s) ['nope']" in err and "'full'" not in err and "densenet121" in err


def test_import_and_zoo_module_do_not_import_torch():
    """torch is an optional peer: neither `import rlx_cpu` nor the zoo
    module (nor the run job's module) imports it until a model is built."""
    res = subprocess.run([sys.executable, "-c",
                          "import sys, rlx_cpu, rlx_cpu.zoo, rlx_cpu.modelrun, rlx_cpu.session; "
                          "print('torch' in sys.modules, 'onnx' in sys.modules)"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False"]
