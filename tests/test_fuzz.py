"""Property-based fuzzing of every op family, one subprocess per target.

Each target in tests/fuzz_targets.py (conv1d/2d/3d over every algorithm,
conv-transpose, conv gradients, max/avg pooling with ceil_mode, padding and
dilation, im2col/col2im, nearest interpolate, hostile attribute values, size
overflow, thread counts, compiled CNN graphs on the blocked layout, and random
ONNX CNN graphs against ONNX Runtime) runs a bounded hypothesis loop in its
own Python process, so a segfault or an abort is a failed test here, not a
dead runner.
Valid draws are compared with tests/reference.py (float64); invalid draws
must raise the documented exceptions.

RLX_FUZZ_EXAMPLES sets the examples per target (default 50, the whole file
runs in well under a minute); RLX_FUZZ_SEED picks another seed (default 0).
"""
import os
import signal
import subprocess
import sys

import pytest

import rlx_cpu

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = ["conv", "conv_transpose", "conv_backward", "pool", "patches", "resize", "invalid_attrs",
           "size_overflow", "thread_counts", "cnn_graph", "onnx_graph"]
# targets that compare with a peer: they run where it is installed (the
# `test` extra, which .ci/run installs)
PEERS = {"onnx_graph": "onnxruntime"}
EXAMPLES = int(os.environ.get("RLX_FUZZ_EXAMPLES", "50"))
SEED = int(os.environ.get("RLX_FUZZ_SEED", "0"))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz(target):
    if target in PEERS:
        pytest.importorskip(PEERS[target], reason=f"{PEERS[target]} is not installed (part of the `test` extra)")
    env = dict(os.environ)
    # The worker imports the rlx_cpu this test process imported (source tree
    # or installed wheel), whatever the working directory.
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(rlx_cpu.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent] + [p for p in [env.get("PYTHONPATH")] if p])
    for flag in ("RLX_FAST_CONV", "RLX_WINOGRAD", "RLX_DIRECT_CONV", "RLX_NUM_THREADS"):
        env.pop(flag, None)
    proc = subprocess.run([sys.executable, os.path.join(HERE, "fuzz_targets.py"), target, str(EXAMPLES), str(SEED)],
                          capture_output=True, text=True, env=env, timeout=120 + 2 * EXAMPLES)
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name
        pytest.fail(f"fuzz target {target!r} crashed with {sig}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    assert proc.returncode == 0, f"fuzz target {target!r} failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-8000:]}"
    tried = [line for line in proc.stdout.splitlines() if line.startswith("examples=")]
    assert tried and int(tried[-1].split("=")[1]) >= min(EXAMPLES, 10), proc.stdout
