"""Thread contract.

* rlx_cpu parallelises with OpenMP inside its kernels; a plan's thread count is
  fixed when it is compiled (``num_threads=`` or, by default,
  :func:`get_num_threads` at that moment), because per-thread scratch is sized
  into the arena then.
* The BLAS that kernels call (scipy's, via ``cython_blas``) is always asked to
  run single-threaded (from ``import rlx_cpu`` on): when one GEMM must use every core, the kernel splits it
  into panels itself.  So OpenMP threads and BLAS threads never nest.  rlx_cpu
  limits only scipy's BLAS library, not numpy's.
* Default thread count: ``set_num_threads(n)`` if called, else the environment
  variable ``RLX_NUM_THREADS``, else ``OMP_NUM_THREADS``, else the CPUs this
  process may run on.
* Every thread count (``num_threads=``, ``set_num_threads``,
  ``RLX_NUM_THREADS``, ``OMP_NUM_THREADS``) must lie in
  ``1..max_num_threads()``, that is ``1..max(64, 8 * os.cpu_count())``;
  anything else raises ValueError naming the range.  (Per-thread scratch is
  sized into the arena and OpenMP starts that many threads, so an absurd
  count would exhaust memory or the OpenMP runtime.)
"""
import numbers
import os
import threading

from . import _runtime
from .shapes import switch_setting

_lock = threading.Lock()
_explicit = None
_blas_limited = False


def max_num_threads():
    """The largest thread count rlx_cpu accepts: max(64, 8 * os.cpu_count())."""
    return max(64, 8 * (os.cpu_count() or 1))


def check_num_threads(n, where, none_ok=False, shown=None):
    """n as an int in 1..max_num_threads(), else ValueError naming the range."""
    hi = max_num_threads()
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or not 1 <= n <= hi:
        what = "a positive integer or None" if none_ok else "a positive integer"
        got = shown if shown is not None else repr(n)
        raise ValueError(f"{where} must be {what}, got {got}; the accepted "
                         f"range is 1..{hi} (max(64, 8 x os.cpu_count()))")
    return int(n)


def _env_threads():
    raw = os.environ.get("RLX_NUM_THREADS", "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = None
    return check_num_threads(n, "RLX_NUM_THREADS", shown=repr(raw))


def _omp_env_threads():
    """OpenMP's reading of OMP_NUM_THREADS (its first level), bounded too."""
    raw = os.environ.get("OMP_NUM_THREADS", "").strip()
    try:
        n = int(raw.split(",")[0])
    except ValueError:
        return _runtime.omp_max_threads()       # OpenMP ignores a malformed value
    check_num_threads(n, "OMP_NUM_THREADS", shown=repr(raw))
    return _runtime.omp_max_threads()


def available_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def get_num_threads():
    """Threads a newly compiled plan will use (1 when built without OpenMP)."""
    env = _env_threads()          # validated even where it cannot take effect
    if not _runtime.openmp_enabled():
        return 1
    if _explicit is not None:
        return _explicit
    if env is not None:
        return env
    if os.environ.get("OMP_NUM_THREADS", "").strip():
        return _omp_env_threads()
    return available_cpus()


def threads_key():
    """A cheap hashable stand-in for get_num_threads() and the RLX_* conv
    switches in plan-cache keys: the explicit setting plus every RLX_* and
    OMP_* variable (about 0.2 us, where get_num_threads() asks the OS for the
    affinity mask, about 1 us).  A cached plan of the default count keeps the
    CPUs seen when it was built."""
    return _explicit, _runtime.env_snapshot()


def set_num_threads(n):
    """Set the default thread count for plans compiled from now on;
    ``None`` restores the default (RLX_NUM_THREADS, OMP_NUM_THREADS, CPUs)."""
    global _explicit
    if n is not None:
        n = check_num_threads(n, "set_num_threads: n", none_ok=True)
    with _lock:
        _explicit = n


def resolve_num_threads(num_threads, where="compile"):
    if num_threads is None:
        return get_num_threads()
    num_threads = check_num_threads(num_threads, f"{where}: num_threads", none_ok=True)
    return num_threads if _runtime.openmp_enabled() else 1


def _is_scipy_blas(user_api, filepath):
    """True for a BLAS library that lives in scipy's install tree (scipy.libs/,
    scipy/.dylibs, ...) -- the one cython_blas calls.  A BLAS shared by numpy
    and scipy from one system or conda directory matches neither name and is
    left alone (limiting it would also throttle the user's numpy)."""
    d = os.path.dirname(filepath or "")
    return user_api == "blas" and "scipy" in d and "numpy" not in d


def limit_blas_threads():
    """Make scipy's BLAS single-threaded (once per process)."""
    global _blas_limited
    if _blas_limited:
        return
    with _lock:
        if _blas_limited:
            return
        try:
            from threadpoolctl import ThreadpoolController

            ctl = ThreadpoolController()
            for lib in ctl.lib_controllers:
                if _is_scipy_blas(lib.user_api, lib.filepath):
                    lib.set_num_threads(1)
        except Exception:  # threadpoolctl missing or unknown BLAS: leave it
            pass
        _blas_limited = True


def blas_info():
    """threadpoolctl's description of the BLAS libraries loaded in this process."""
    try:
        from threadpoolctl import threadpool_info

        import scipy.linalg  # noqa: F401  (loads scipy's BLAS)
        return threadpool_info()
    except Exception as exc:
        return [{"error": repr(exc)}]


def scipy_blas_info():
    """The BLAS that scipy (and so every rlx_cpu GEMM) links.

    ``name``/``version`` come from scipy's build configuration; ``libraries``
    are the matching libraries threadpoolctl finds loaded, with the kernel
    architecture the BLAS selected for this CPU and its current thread count
    (1 once rlx_cpu is imported).  Empty ``libraries`` means threadpoolctl
    could not tell scipy's BLAS apart (e.g. one shared conda library, or
    Accelerate on macOS).
    """
    out = {"name": None, "version": None, "libraries": []}
    try:
        import scipy

        dep = scipy.show_config(mode="dicts")["Build Dependencies"]["blas"]
        out["name"], out["version"] = dep.get("name"), dep.get("version")
    except Exception:  # older scipy or a build without that record
        pass
    for lib in blas_info():
        if _is_scipy_blas(lib.get("user_api"), lib.get("filepath")):
            out["libraries"].append({k: lib.get(k) for k in
                                     ("internal_api", "version", "architecture", "num_threads", "filepath")})
    return out


def resolve_adaptive_threads(adaptive, where="compile"):
    """compile's adaptive_threads flag: True/False, or None for the
    RLX_ADAPTIVE_THREADS variable ('1' or unset: on, '0': off).

    On, a run of a multi-threaded plan uses one thread instead when its
    measured run times say one is faster -- which happens when another busy
    process shares the cores (see src/_adaptive.pxd).  Results are identical
    either way; off, every run uses exactly num_threads."""
    return switch_setting(adaptive, "RLX_ADAPTIVE_THREADS", True, where, "adaptive_threads")
