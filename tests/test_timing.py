"""rlx_cpu.timing: the interleaved sampler the benchmarks and `run` use."""
import rlx_cpu.timing as timing


def test_interleaved_round_robin_with_settle():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    ts = timing.interleaved_samples(fns, repeat=3, warmup=1, settle=0.001, wake_s=0.0)
    assert {k: len(v) for k, v in ts.items()} == {"a": 3, "b": 3}
    # warm-up once each, then per round: one untimed wake-up call (wake_s 0) and a timed one
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert all(t >= 0 for v in ts.values() for t in v)


def test_interleaved_without_settle_calls_once_per_round():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    med = timing.interleaved_medians(fns, repeat=2, warmup=0)
    assert calls == ["a", "b", "a", "b"] and set(med) == {"a", "b"}


def test_wake_calls_for_its_time_then_the_timed_call_follows():
    import time
    stamps = {"a": [], "b": []}
    fns = {name: (lambda name=name: stamps[name].append(time.perf_counter())) for name in stamps}
    timing.interleaved_samples(fns, repeat=2, warmup=0, settle=0.001, wake_s=0.003)
    for name, st in stamps.items():
        # per round: wake-up calls spanning at least 3 ms, then the timed call
        assert len(st) >= 2 * 3, (name, len(st))
    # the two runtimes' turns alternate (a's first turn ends before b's
    # starts), and a turn's calls span the wake time: its last (timed) call
    # starts at least 3 ms after the wake-up began, just before its first call
    a, b = stamps["a"], stamps["b"]
    assert a[0] < b[0] and max(t for t in a if t < b[0]) - a[0] >= 0.0025


def test_wake_calls_a_slow_function_once():
    calls = []
    timing.wake(lambda: (calls.append(1), timing.busy_wait(0.004)), seconds=0.002)
    assert len(calls) == 1
