"""Interleaved timing of several runtimes in one process (the benchmarks and
``python -m rlx_cpu run`` share it).

One call of each runtime per round, so that a burst of load from another
process hits them alike.  With several threads, every runtime's thread pool
(rlx_cpu's and PyTorch's OpenMP, ONNX Runtime's own) keeps its workers
spinning for a while after a call: timed back to back, the next runtime then
shares its cores with the previous one's spinners.  ``settle`` seconds of
busy waiting before each runtime's turn lets those workers park (busy, not
asleep, so that this core does not drop its clock in an idle state); untimed
calls for at least ``wake`` seconds (one at the least) then wake the
runtime's own pool and bring the machine back to speed, and the timed call
measures it hot, as a serving loop would see it.  Use the same settle at every
thread count, so that 1- and 2-thread figures are measured alike.
"""
import statistics
import time

# Long enough for libgomp's default spin (GOMP_SPINCOUNT 300k pause loops,
# a few ms here) and ONNX Runtime's to end: with 20 ms, a 2-thread run_into
# of a conv interleaved with both peers still took up to 1.8x its kernel time
# alone (the adaptive choice then fell back to one thread); with 100 ms they
# agree within a few percent.
DEFAULT_SETTLE_S = 0.1

# One untimed call after the settle was not enough to time a call hot: on a
# 2-core Xeon (AVX-512) a lone 1x1 conv 64->256 on 56x56 ran its calls after
# 100 ms of busy waiting in 2.1, 1.6, 1.1, 1.05, 1.0 ms (medians of 15), and
# ONNX Runtime's and PyTorch's first calls were slow alike (ORT at 2 threads
# 1.52 ms after one wake-up call, 0.83 after three).  A busy loop of AVX-512
# FMAs as the settle did not help, touching 32 MB did not hurt; our reading
# is the clocks of the shared cache and memory path ramping up again.  So the
# wake-up runs for this long, whatever the call's length.
DEFAULT_WAKE_S = 0.005


def busy_wait(seconds):
    """Spin this thread for `seconds` (other runtimes' pools park meanwhile)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def wake(fn, seconds=DEFAULT_WAKE_S):
    """Call fn() untimed until `seconds` have passed, at least once."""
    end = time.perf_counter() + seconds
    fn()
    while time.perf_counter() < end:
        fn()


# The most calls one batched sample times (interleaved_samples' batch_s).
MAX_BATCH_CALLS = 1000


def batch_calls(fn, batch_s):
    """How many calls of fn one sample of about batch_s seconds holds (at
    least 1, at most MAX_BATCH_CALLS), from the length of one call."""
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    return max(1, min(MAX_BATCH_CALLS, int(batch_s / one) if one > 0 else MAX_BATCH_CALLS))


def interleaved_samples(fns, repeat, warmup=2, settle=0.0, wake_s=DEFAULT_WAKE_S, batch_s=0.0):
    """{name: [seconds]} of `repeat` timed samples of each callable in
    fns (a dict name -> zero-argument callable), round-robin; with a
    settle, each timed sample follows the settle and `wake_s` seconds of
    untimed calls (at least one).  A sample is one call, or with batch_s >
    0 the mean of a batch of calls timed together, as many as last about
    batch_s (batch_calls, counted once per callable after its warm-up): a
    single call of a few microseconds reads the clock's and the machine's
    jitter as much as the call."""
    counts = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        counts[name] = batch_calls(fn, batch_s) if batch_s > 0 else 1
    ts = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            if settle > 0:
                busy_wait(settle)
                wake(fn, wake_s)
            n = counts[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            ts[name].append((time.perf_counter() - t0) / n)
    return ts


def interleaved_medians(fns, repeat, warmup=2, settle=0.0, wake_s=DEFAULT_WAKE_S, batch_s=0.0):
    """{name: median ms} of interleaved_samples."""
    return {name: 1e3 * statistics.median(v)
            for name, v in interleaved_samples(fns, repeat, warmup, settle, wake_s, batch_s).items()}
