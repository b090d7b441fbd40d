"""Build and runtime facts, for bug reports and benchmarks."""
import platform
import sys

import numpy as np

from . import _conv2d, _runtime
from ._version import __version__
from .threads import blas_info, get_num_threads


def _cpu_features():
    flags = set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith(("flags", "Features")):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ["sse4_2", "avx", "avx2", "fma", "avx512f", "asimd", "sve"]
    return [f for f in wanted if f in flags]


def config():
    import scipy
    blas = [{k: lib.get(k) for k in ("internal_api", "version", "num_threads", "architecture", "filepath")}
            for lib in blas_info()]
    return {
        "rlx_cpu": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "openmp": _runtime.openmp_enabled(),
        "debug_checks": _runtime.debug_checks_enabled(),
        "num_threads": get_num_threads(),
        "omp_max_threads": _runtime.omp_max_threads(),
        "cpu_features": _cpu_features(),
        "kernel_simd": "avx2+fma" if _conv2d.simd_level() else "baseline",
        "blas": blas,
    }


def show_config(file=None):
    """Print OpenMP state, thread count, the BLAS scipy links, and CPU features."""
    c = config()
    out = file or sys.stdout
    for k, v in c.items():
        if k == "blas":
            for lib in v:
                print(f"{'blas':>16}: {lib}", file=out)
        else:
            print(f"{k:>16}: {v}", file=out)
