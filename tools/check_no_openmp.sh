#!/usr/bin/env bash
# Build a copy of the source tree with RLX_DISABLE_OPENMP=1 and check the
# single-threaded build: OpenMP reported off, one thread whatever is asked,
# a conv still matches the float64 reference, and the test suite passes.
# The working tree's own in-place build is not touched.
# Usage: bash tools/check_no_openmp.sh        (PYTHON=python3.x to choose)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rlx_no_omp.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
T0=$SECONDS

mkdir -p "$WORK/tests"
cp "$ROOT"/setup.py "$ROOT"/pyproject.toml "$ROOT"/README.md "$WORK/"   # README: tests/test_readme.py
# The package's Python files (every subpackage) and the kernel sources, no build outputs.
(cd "$ROOT" && find rlx_cpu src -type f \( -name '*.py' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.h' \) \
    -print0 | xargs -0 cp --parents -t "$WORK")
cp -R "$ROOT"/tests/. "$WORK/tests/"
cp -R "$ROOT"/benchmarks "$WORK/"   # tests/test_bench_pool.py imports benchmarks/bench_pool.py
cd "$WORK"

echo "== [$((SECONDS - T0))s] RLX_DISABLE_OPENMP=1 build_ext --inplace"
if ! RLX_DISABLE_OPENMP=1 "$PY" setup.py build_ext --inplace >build.log 2>&1; then
    tail -n 60 build.log >&2
    echo "check_no_openmp: FAIL: build" >&2
    exit 1
fi
grep "rlx_cpu build:" build.log

echo "== [$((SECONDS - T0))s] single-threaded build checks"
PYTHONPATH="$WORK:$WORK/tests" "$PY" - <<'EOF'
import numpy as np
import rlx_cpu
from rlx_cpu import _runtime
import reference

assert rlx_cpu.__file__.startswith(__import__("os").getcwd()), rlx_cpu.__file__
assert _runtime.openmp_enabled() is False, "RLX_DISABLE_OPENMP=1 build reports OpenMP on"
assert _runtime.omp_max_threads() == 1
rlx_cpu.set_num_threads(2)
assert rlx_cpu.get_num_threads() == 1, rlx_cpu.get_num_threads()
assert rlx_cpu.show_config(mode="dicts")["num_threads"] == 1

rng = np.random.default_rng(0)
# (algorithm, stride, groups): each shape is eligible for its algorithm.
cases = [("reference", (1, 2), 2), ("im2col", (1, 2), 2), ("direct", (1, 1), 2), ("winograd", (1, 1), 1)]
for algo, stride, groups in cases:
    x = rng.standard_normal((2, 4, 11, 9)).astype(np.float32)
    w = rng.standard_normal((6, 4 // groups, 3, 3)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    want = reference.conv_nd(x, w, b, stride=stride, pads_begin=(1, 0), pads_end=(2, 1), groups=groups)
    g = rlx_cpu.Graph()
    xi, wi, bi = g.input("x", x.shape), g.input("w", w.shape), g.input("b", b.shape)
    g.output(g.conv2d(xi, wi, bi, stride=stride, padding=(1, 0, 2, 1), groups=groups))
    plan = rlx_cpu.compile(g, conv_algorithm=algo, num_threads=2)
    assert plan.num_threads == 1, plan.num_threads
    got = plan.run({"x": x, "w": w, "b": b})[0]
    err = reference.rel_error(got, want)
    assert err <= 1e-4, (algo, err)
    print(f"{algo}: rel_error {err:.2e} with {plan.num_threads} thread (asked for 2)")
rlx_cpu.show_config()
EOF

echo "== [$((SECONDS - T0))s] test suite against the single-threaded build"
set +e
PYTHONPATH="$WORK" "$PY" -m pytest -q -p no:cacheprovider tests
rc=$?
set -e
[ "$rc" -eq 0 ] || { echo "check_no_openmp: FAIL: tests (pytest exit $rc)" >&2; exit 1; }
echo "check_no_openmp: OK in $((SECONDS - T0))s"
