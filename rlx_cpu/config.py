"""Build and runtime facts, for bug reports and benchmarks.

``show_config()`` prints them; ``show_config(mode="dicts")`` (or
:func:`config`) returns them as a dict with these keys:

=================  ==========================================================
rlx_cpu            package version
python, platform,  interpreter and machine
machine
numpy, scipy       versions of the runtime dependencies
openmp             True when the kernels were compiled with OpenMP
openmp_runtime     the OpenMP libraries loaded in this process (libgomp,
                   libomp, vcomp); more than one usually means two packages
                   brought their own
debug_checks       True for a ``RLX_CYTHON_DEBUG=1`` build (bounds checks on)
num_threads        threads a plan compiled now would use (1 without OpenMP)
omp_max_threads    OpenMP's own default team size
build_isa          instruction sets the C compiler targeted for this build
cpu_features       SIMD features of the running CPU (numpy's detection)
blas               the BLAS scipy links: name/version from scipy's build,
                   plus the loaded library, its selected kernel architecture
                   and thread count (threadpoolctl)
=================  ==========================================================
"""
import platform
import sys

import numpy as np

from . import _conv2d, _runtime
from ._version import __version__
from .threads import blas_info, get_num_threads, scipy_blas_info

# The features that matter for float32 convolution kernels, in numpy's names.
_RELEVANT_FEATURES = (
    "SSE2", "SSE42", "AVX", "F16C", "FMA3", "AVX2", "AVX512F", "AVX512_SKX", "AVX512_SPR",
    "NEON", "ASIMD", "ASIMDHP", "ASIMDDP", "SVE", "VSX", "VSX2", "VSX3", "VX",
)
# /proc/cpuinfo flag -> numpy name, for when numpy's table is unavailable.
_PROC_FLAGS = {"sse2": "SSE2", "sse4_2": "SSE42", "avx": "AVX", "f16c": "F16C", "fma": "FMA3",
               "avx2": "AVX2", "avx512f": "AVX512F", "asimd": "ASIMD", "sve": "SVE"}



def _simd_name():
    from .plan import _kernel_simd      # plan imports much; config stays light
    return _kernel_simd()

def _numpy_cpu_features():
    for mod in ("numpy._core._multiarray_umath", "numpy.core._multiarray_umath"):
        try:
            table = __import__(mod, fromlist=["__cpu_features__"]).__cpu_features__
        except (ImportError, AttributeError):
            continue
        return {k for k, on in table.items() if on}
    return None


def _proc_cpu_features():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    return {name for flag, name in _PROC_FLAGS.items() if flag in flags}
    except OSError:
        pass
    return set()


def _cpu_features():
    """SIMD features of this CPU, detected at run time (works on every OS)."""
    found = _numpy_cpu_features()
    if found is None:
        found = _proc_cpu_features()
    return [f for f in _RELEVANT_FEATURES if f in found]


def _openmp_runtimes(libs):
    return [lib.get("filepath") for lib in libs if lib.get("user_api") == "openmp"]


def config():
    """The facts listed in the module docstring, as a dict."""
    import scipy

    return {
        "rlx_cpu": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "openmp": _runtime.openmp_enabled(),
        "openmp_runtime": _openmp_runtimes(blas_info()),
        "debug_checks": _runtime.debug_checks_enabled(),
        "num_threads": get_num_threads(),
        "omp_max_threads": _runtime.omp_max_threads(),
        "build_isa": _runtime.build_isa(),
        "cpu_features": _cpu_features(),
        "kernel_simd": _simd_name(),
        "blas": scipy_blas_info(),
    }


def show_config(file=None, mode="stdout"):
    """Print OpenMP state, thread count, the BLAS scipy links and CPU features.

    ``mode="dicts"`` returns the same facts as a dict instead of printing them
    (as ``numpy.show_config`` and ``scipy.show_config`` do).
    """
    if mode not in ("stdout", "dicts"):
        raise ValueError(f"show_config: mode must be 'stdout' or 'dicts', got {mode!r}")
    c = config()
    if mode == "dicts":
        return c
    out = file or sys.stdout
    for k, v in c.items():
        if k == "blas":
            print(f"{'blas':>16}: {v['name']} {v['version']}", file=out)
            for lib in v["libraries"]:
                print(f"{'':>16}  {lib['internal_api']} {lib['version']} kernel={lib['architecture']}"
                      f" threads={lib['num_threads']} {lib['filepath']}", file=out)
            if not v["libraries"]:
                print(f"{'':>16}  (scipy's BLAS library not identified at run time)", file=out)
        elif isinstance(v, list):
            print(f"{k:>16}: {' '.join(map(str, v)) if v else '-'}", file=out)
        else:
            print(f"{k:>16}: {v}", file=out)
    return None
