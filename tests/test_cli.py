"""`python -m rlx_cpu`: subcommands, options before or after them, help text
and defaults on every option, progress bars only on a terminal."""
import argparse
import io
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
    assert names == ["python -m rlx_cpu", "bench", "config", "demo", "train"]
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
