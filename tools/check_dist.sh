#!/usr/bin/env bash
# Local release check, no GitHub needed:
#   1. python -m build: sdist, then a wheel built from that sdist
#   2. the sdist holds sources, tests and docs; the wheel only rlx_cpu/*.py, rlx_cpu/ops/*.py,
#      compiled extensions, the C API's rlx_cpu/capi.pxd and rlx_cpu/include/rlx_cpu.h, and
#      metadata (no .c/.pyx/kernel .pxd/.h/build leftovers)
#   3. the wheel + its `test` extra install into a fresh venv and the test
#      suite passes there, run from a directory outside the source tree
#   4. `pip wheel` from the sdist also builds (pip's own isolated build)
# Usage: bash tools/check_dist.sh            (PYTHON=python3.x to choose)
# Needs the package index for the isolated build environments and the venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/rlx_check_dist.XXXXXX")"
KEEP="${RLX_KEEP_CHECK_DIR:-0}"
cleanup() { if [ "$KEEP" = "1" ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT

T0=$SECONDS
step() { echo; echo "== [$((SECONDS - T0))s] $*"; }
fail() { echo "check_dist: FAIL: $*" >&2; exit 1; }
# Run a command with its output in a log; show the log's tail if it fails.
logged() {
    local log="$WORK/$1.log"; shift
    if ! "$@" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        fail "$* (log: $log)"
    fi
}

cd "$ROOT"
step "python -m build (sdist, then wheel from the sdist)"
if ! "$PY" -m build --version >/dev/null 2>&1; then
    "$PY" -m pip install --quiet build
fi
logged build "$PY" -m build --outdir "$WORK/dist" "$ROOT"
SDIST="$(ls "$WORK"/dist/*.tar.gz)"
WHEEL="$(ls "$WORK"/dist/*.whl)"
grep -E "rlx_cpu build:" "$WORK/build.log" || true
echo "sdist: $(basename "$SDIST") $(du -k "$SDIST" | cut -f1) KiB"
echo "wheel: $(basename "$WHEEL") $(du -k "$WHEEL" | cut -f1) KiB"

step "sdist contents"
"$PY" - "$SDIST" "$ROOT" <<'EOF'
import os, sys, tarfile
sdist, root = sys.argv[1], sys.argv[2]
with tarfile.open(sdist) as tf:
    names = [n.split("/", 1)[1] for n in tf.getnames() if "/" in n]
files = sorted(n for n in names if n and not n.endswith("/"))
required = ["pyproject.toml", "setup.py", "MANIFEST.in", "LICENSE", "CHANGELOG.md",
            "CONTRIBUTING.md", "src/_blas.pxd", "src/rlx_omp.h", "tests/reference.py",
            "rlx_cpu/__init__.py", "rlx_cpu/_version.py", "rlx_cpu/ops/__init__.py",
            "rlx_cpu/capi.pxd", "rlx_cpu/include/rlx_cpu.h", "examples/capi_run.c",
            "tests/capi_user/capi_user.pyx", "tests/capi_user/setup.py"]
required += ["README.md"] if os.path.exists(os.path.join(root, "README.md")) else []
required += ["src/" + f for f in os.listdir(os.path.join(root, "src")) if f.endswith((".pyx", ".pxd", ".h"))]
required += ["tests/" + f for f in os.listdir(os.path.join(root, "tests")) if f.endswith(".py")]
if os.path.isdir(os.path.join(root, "benchmarks")):
    required += ["benchmarks/" + f for f in os.listdir(os.path.join(root, "benchmarks")) if f.endswith(".py")]
missing = sorted(set(required) - set(files))
bad = [f for f in files if (f.endswith(".c") and not f.startswith("examples/"))
       or f.endswith((".so", ".pyd", ".o", ".html", ".pyc"))
       or f.startswith("build/") or "__pycache__" in f]
print(f"{len(files)} files; " + " ".join(sorted({os.path.dirname(f) or "." for f in files})))
if missing or bad:
    sys.exit(f"sdist missing {missing}, unexpected {bad}")
EOF

step "wheel contents"
check_wheel() {
    "$PY" - "$1" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as zf:
    infos = zf.infolist()
for i in infos:
    print(f"{i.file_size:>10}  {i.filename}")
names = [i.filename for i in infos]
def allowed(n):
    top, _, rest = n.partition("/")
    if top.endswith(".dist-info") or top == "rlx_cpu.libs":  # metadata; auditwheel/delvewheel libs
        return True
    if top != "rlx_cpu":
        return False
    if rest.startswith(".dylibs/"):  # libraries delocate vendors on macOS
        return True
    if rest.startswith("ops/"):      # the op family modules: Python only
        return rest.count("/") == 1 and rest.endswith(".py")
    if rest in C_API:
        return True
    return "/" not in rest and rest.endswith((".py", ".so", ".pyd"))
C_API = ("capi.pxd", "include/rlx_cpu.h")  # the Cython/C API's declarations
bad = [n for n in names if not allowed(n)]
if "rlx_cpu/ops/__init__.py" not in names:
    sys.exit("wheel lacks the op families (rlx_cpu/ops)")
missing_api = [f for f in C_API if "rlx_cpu/" + f not in names]
if missing_api:
    sys.exit(f"wheel lacks the C API declarations {missing_api}")
exts = [n for n in names if n.endswith((".so", ".pyd"))]
if bad:
    sys.exit(f"wheel has unexpected files: {bad}")
if not any("_runtime" in n for n in exts) or not any("_conv2d" in n for n in exts):
    sys.exit(f"wheel lacks compiled kernels: {exts}")
print(f"{len(names)} files, {len(exts)} extension modules, "
      f"{sum(i.file_size for i in infos) // 1024} KiB uncompressed")
EOF
}
check_wheel "$WHEEL" || fail "wheel contents"

step "fresh venv: install the wheel with its test extra"
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
logged venv-install "$VPY" -m pip install "${WHEEL}[test]"
"$VPY" -m pip list 2>/dev/null | grep -iE "^(rlx-cpu|numpy|scipy|threadpoolctl|pytest) " || true

step "test suite against the installed wheel (outside the source tree)"
# A copy of tests/ and examples/ (plus pyproject.toml for pytest's settings) in a directory
# with no rlx_cpu/ in it, so `import rlx_cpu` can only find the installed one.
mkdir -p "$WORK/run"
cp -R "$ROOT/tests" "$WORK/run/tests"
cp -R "$ROOT/examples" "$WORK/run/examples"    # the C API example tests/test_capi.py compiles
cp -R "$ROOT/benchmarks" "$WORK/run/benchmarks"    # tests/test_bench_pool.py imports bench_pool
cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$WORK/run/"   # tests/test_readme.py runs README's snippets
cd "$WORK/run"
export OMP_NUM_THREADS=2 RLX_NUM_THREADS=2 PYTHONSAFEPATH=1
where="$("$VPY" -c 'import rlx_cpu, os; print(os.path.dirname(rlx_cpu.__file__))')"
case "$where" in
    "$WORK/venv/"*) echo "rlx_cpu imported from $where" ;;
    *) fail "rlx_cpu imported from $where, not the fresh venv" ;;
esac
"$VPY" -c "import rlx_cpu; rlx_cpu.show_config()"
set +e
"$VPY" -m pytest -q -p no:cacheprovider tests
rc=$?
set -e
# pytest exits 5 when nothing was collected: that checks nothing, so fail.
[ "$rc" -eq 0 ] || fail "test suite against the installed wheel (pytest exit $rc)"
cd "$ROOT"

step "pip wheel from the sdist"
logged pip-wheel "$VPY" -m pip wheel --no-deps --wheel-dir "$WORK/from_sdist" "$SDIST"
WHEEL2="$(ls "$WORK"/from_sdist/*.whl)"
check_wheel "$WHEEL2" >/dev/null || fail "wheel built from the sdist"
list() { "$PY" -c 'import sys, zipfile; print("\n".join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))' "$1" | grep -v "\.dist-info/RECORD$"; }
diff <(list "$WHEEL") <(list "$WHEEL2") || fail "pip wheel from the sdist gave different files"
echo "same file list as the first wheel: $(basename "$WHEEL2")"

echo
echo "check_dist: OK in $((SECONDS - T0))s (wheel $(du -k "$WHEEL" | cut -f1) KiB)"
