"""Timing helpers shared by the benchmark scripts (medians, as we report)."""
import statistics
import time


def median_ms(fn, repeat, warmup=2):
    """Median wall milliseconds of fn() over `repeat` calls after `warmup`."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


def optional_torch(disabled=False):
    """torch if installed (and not disabled), else None."""
    if disabled:
        return None
    try:
        import torch
    except ImportError:
        return None
    return torch
