"""Thread contract.

* rlx_cpu parallelises with OpenMP inside its kernels; a plan's thread count is
  fixed when it is compiled (``num_threads=`` or, by default,
  :func:`get_num_threads` at that moment), because per-thread scratch is sized
  into the arena then.
* The BLAS that kernels call (scipy's, via ``cython_blas``) is always asked to
  run single-threaded: when one GEMM must use every core, the kernel splits it
  into panels itself.  So OpenMP threads and BLAS threads never nest.  rlx_cpu
  limits only scipy's BLAS library, not numpy's.
* Default thread count: ``set_num_threads(n)`` if called, else the environment
  variable ``RLX_NUM_THREADS``, else the CPUs this process may run on.
"""
import os
import threading

from . import _runtime

_lock = threading.Lock()
_explicit = None
_blas_limited = False


def _env_threads():
    raw = os.environ.get("RLX_NUM_THREADS", "").strip()
    if not raw:
        return None
    try:
        n = int(raw)
    except ValueError:
        raise ValueError(f"RLX_NUM_THREADS must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ValueError(f"RLX_NUM_THREADS must be a positive integer, got {raw!r}")
    return n


def available_cpus():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def get_num_threads():
    """Threads a newly compiled plan will use (1 when built without OpenMP)."""
    if not _runtime.openmp_enabled():
        return 1
    if _explicit is not None:
        return _explicit
    env = _env_threads()
    return env if env is not None else available_cpus()


def set_num_threads(n):
    """Set the default thread count for plans compiled from now on."""
    global _explicit
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads: n must be a positive integer, got {n!r}")
    with _lock:
        _explicit = n


def resolve_num_threads(num_threads, where="compile"):
    if num_threads is None:
        return get_num_threads()
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"{where}: num_threads must be a positive integer or None, got {num_threads!r}")
    return num_threads if _runtime.openmp_enabled() else 1


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
            scipy_blas = [lib for lib in ctl.lib_controllers
                          if lib.user_api == "blas" and "scipy" in os.path.dirname(lib.filepath)
                          and "numpy" not in os.path.dirname(lib.filepath)]
            for lib in scipy_blas:
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
