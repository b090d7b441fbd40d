"""Packaging facts: version single-sourcing, show_config() contents, and that
the package directory holds no build leftovers.

These run both in the source tree (in-place build) and against an installed
wheel (tools/check_dist.sh, cibuildwheel), so every check says which case it is
in rather than assuming one.
"""
import ast
import importlib.metadata
import io
import os
import pathlib
import re

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime
from rlx_cpu.config import config

PKG_DIR = pathlib.Path(rlx_cpu.__file__).resolve().parent
REPO = pathlib.Path(__file__).resolve().parents[1]


def _installed_distribution():
    """The rlx-cpu distribution that provides the imported package, or None
    when rlx_cpu is imported from a source tree."""
    try:
        dist = importlib.metadata.distribution("rlx-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None
    # Only an installed wheel has a RECORD; a source tree may hold a stale
    # rlx_cpu.egg-info left by `python -m build`, which must not count.
    if dist.read_text("RECORD") is None:
        return None
    init = pathlib.Path(dist.locate_file("rlx_cpu/__init__.py")).resolve()
    return dist if init == PKG_DIR / "__init__.py" else None


def _version_file_value():
    tree = ast.parse((PKG_DIR / "_version.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__version__"]:
            return ast.literal_eval(node.value)
    raise AssertionError("rlx_cpu/_version.py does not assign __version__")


# --- version ---------------------------------------------------------------

def test_version_is_pep440_release():
    assert re.fullmatch(r"\d+\.\d+\.\d+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?", rlx_cpu.__version__), \
        rlx_cpu.__version__


def test_version_matches_resolved_metadata():
    dist = _installed_distribution()
    if dist is not None:
        # Installed wheel: the metadata pip recorded is the resolved version.
        assert dist.version == rlx_cpu.__version__
        assert dist.metadata["Name"] == "rlx-cpu"
    else:
        # Source tree: pyproject must resolve the version from _version.py.
        assert _version_file_value() == rlx_cpu.__version__
        pyproject = REPO / "pyproject.toml"
        if pyproject.exists():
            text = pyproject.read_text()
            assert re.search(r'^dynamic\s*=\s*\[\s*"version"\s*\]', text, re.M), "version must be dynamic"
            assert re.search(r'version\s*=\s*\{\s*attr\s*=\s*"rlx_cpu\._version\.__version__"\s*\}', text), \
                "pyproject.toml must read the version from rlx_cpu._version.__version__"


def test_installed_metadata_declares_runtime_dependencies():
    dist = _installed_distribution()
    if dist is None:
        pytest.skip("rlx_cpu imported from a source tree; no installed metadata to check")
    reqs = {re.split(r"[ ;<>=!~\[]", r, maxsplit=1)[0].lower() for r in dist.requires or []
            if "extra ==" not in r}
    assert {"numpy", "scipy", "threadpoolctl"} <= reqs, reqs


# --- package contents ------------------------------------------------------

def test_package_dir_has_no_sources_or_build_leftovers():
    # An installed wheel (and an in-place build) holds only Python files,
    # compiled extensions and the C API's declarations (capi.pxd and
    # include/rlx_cpu.h); generated C and Cython sources live elsewhere.
    leftovers = [p.name for p in PKG_DIR.iterdir()
                 if p.suffix in (".c", ".cpp", ".pyx", ".pxd", ".h", ".html", ".o", ".obj")
                 and p.name != "capi.pxd"]
    assert leftovers == []
    assert sorted(p.name for p in (PKG_DIR / "include").iterdir()) == ["rlx_cpu.h"]


def test_every_kernel_module_is_built_and_importable():
    built = {p.name.split(".")[0] for p in PKG_DIR.iterdir() if p.suffix in (".so", ".pyd")}
    assert {"_runtime", "_conv2d"} <= built, built
    src = REPO / "src"
    if src.is_dir():  # source tree or sdist: every src/*.pyx must be built
        assert {p.stem for p in src.glob("*.pyx")} <= built
    for name in sorted(built):
        mod = __import__("rlx_cpu." + name, fromlist=["_"])
        assert pathlib.Path(mod.__file__).resolve().parent == PKG_DIR


# --- show_config -----------------------------------------------------------

REQUIRED_KEYS = ("openmp", "num_threads", "blas", "cpu_features", "build_isa", "openmp_runtime")


def test_show_config_prints_required_keys():
    buf = io.StringIO()
    assert rlx_cpu.show_config(file=buf) is None
    lines = buf.getvalue().splitlines()
    labels = {line.split(":", 1)[0].strip(): line.split(":", 1)[1].strip() for line in lines
              if ":" in line and line.split(":", 1)[0].strip()}
    for key in REQUIRED_KEYS:
        assert key in labels, f"show_config() printed no {key!r} line:\n{buf.getvalue()}"
    assert labels["openmp"] == str(_runtime.openmp_enabled())
    assert labels["num_threads"] == str(rlx_cpu.get_num_threads())
    assert labels["rlx_cpu"] == rlx_cpu.__version__


def test_show_config_dicts_mode_matches_config():
    d = rlx_cpu.show_config(mode="dicts")
    assert set(d) == set(config())
    with pytest.raises(ValueError, match="show_config: mode must be"):
        rlx_cpu.show_config(mode="json")


def test_config_types_and_consistency():
    c = config()
    assert isinstance(c["openmp"], bool) and c["openmp"] == _runtime.openmp_enabled()
    assert isinstance(c["num_threads"], int) and c["num_threads"] >= 1
    if not c["openmp"]:
        assert c["num_threads"] == 1 and c["omp_max_threads"] == 1
    assert isinstance(c["debug_checks"], bool)
    assert set(c["blas"]) == {"name", "version", "libraries"}
    assert all(isinstance(f, str) and f == f.upper() for f in c["cpu_features"])


def test_num_threads_follows_environment(monkeypatch):
    monkeypatch.setenv("RLX_NUM_THREADS", "3")
    expected = 3 if _runtime.openmp_enabled() else 1
    assert config()["num_threads"] == expected


def test_cpu_and_build_isa_baseline():
    # Every x86_64 CPU has SSE2 and every arm64 CPU has Advanced SIMD, and
    # compilers target them by default, so both lists must name them.
    c = config()
    machine = c["machine"].lower()
    if machine in ("x86_64", "amd64"):
        assert "SSE2" in c["cpu_features"]
        assert "SSE2" in c["build_isa"]
    elif machine in ("arm64", "aarch64"):
        assert "ASIMD" in c["cpu_features"] or "NEON" in c["cpu_features"]
        assert "NEON" in c["build_isa"]
    else:
        pytest.skip(f"no baseline known for {machine}")


def _compile_small_conv():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 3, 9, 9))
    w = g.constant(np.ones((4, 3, 3, 3), np.float32), "w")
    g.output(g.conv2d(x, w, padding=1))
    return rlx_cpu.compile(g, conv_algorithm="im2col")


def test_scipy_blas_is_identified_and_single_threaded_after_compile():
    plan = _compile_small_conv()
    out = plan.run({"x": np.ones((1, 3, 9, 9), np.float32)})[0]
    assert out[0, 0, 4, 4] == pytest.approx(27.0)
    blas = config()["blas"]
    if not (blas["name"] or "").startswith("scipy-openblas"):
        pytest.skip(f"scipy links {blas['name']!r}; run-time identification only covers scipy's own OpenBLAS")
    # scipy's wheels ship OpenBLAS inside scipy's tree: it must be found, and a
    # compiled plan must have made it single-threaded (threads never nest).
    assert blas["libraries"], "scipy's OpenBLAS not found by threadpoolctl"
    assert all(lib["num_threads"] == 1 for lib in blas["libraries"]), blas["libraries"]


def test_openmp_runtime_reported_when_enabled():
    _compile_small_conv()
    runtimes = config()["openmp_runtime"]
    if not _runtime.openmp_enabled():
        pytest.skip("built without OpenMP")
    assert runtimes, "OpenMP build but no OpenMP runtime library found loaded"
    assert any("omp" in os.path.basename(p).lower() for p in runtimes), runtimes


def test_test_extra_pins_the_peers_and_the_serving_engine():
    """A plain `pip install -e ".[test]" && python -m pytest` runs the peer
    and distributed tests instead of skipping them: the extra pins them."""
    pyproject = REPO / "pyproject.toml"
    if not pyproject.exists():     # installed wheel: its metadata lists the extra
        dist = _installed_distribution()
        assert dist is not None, "neither pyproject.toml nor installed metadata"
        reqs = [r for r in dist.requires or [] if 'extra == "test"' in r]
    else:
        block = re.search(r"^test = \[(.*?)^\]", pyproject.read_text(), re.S | re.M).group(1)
        reqs = [ln.split("#")[0] for ln in block.splitlines()]
    text = " ".join(reqs).replace(" ", "")
    assert "torch==2.13.0" in text
    assert re.search(r"onnxruntime==\d", text)
    assert re.search(r"dask\[distributed\]==\d", text)
    assert "onnx==1.22.0" in text
