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


class _StepClock:
    """A perf_counter that advances one step per reading (a power of two, so
    the sums are exact): the wake-up's call count no longer depends on how
    busy the machine is."""
    STEP = 2.0 ** -10

    def __init__(self):
        self.t = 0.0

    def perf_counter(self):
        self.t += self.STEP
        return self.t


def test_wake_calls_for_its_time_then_the_timed_call_follows(monkeypatch):
    monkeypatch.setattr(timing, "time", _StepClock())
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    timing.interleaved_samples(fns, repeat=2, warmup=0, settle=_StepClock.STEP, wake_s=3.5 * _StepClock.STEP)
    # per turn: wake-up calls until 3.5 steps have passed (one clock reading
    # after each call: 4 calls), then the timed call; the runtimes alternate
    assert calls == (["a"] * 5 + ["b"] * 5) * 2


def test_wake_calls_a_slow_function_once():
    # the one call outlasts the wake-up time (busy_wait spins at least 4 ms)
    calls = []
    timing.wake(lambda: (calls.append(1), timing.busy_wait(0.004)), seconds=0.002)
    assert len(calls) == 1


def test_batched_samples_time_a_batch_and_report_its_mean(monkeypatch):
    clock = _StepClock()
    monkeypatch.setattr(timing, "time", clock)
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    # one call reads as one clock step (2 readings around it, 1 step apart),
    # so a batch of 4.5 steps holds 4 calls
    ts = timing.interleaved_samples(fns, repeat=2, warmup=1, batch_s=4.5 * _StepClock.STEP)
    # warm-up, the counting call, then per round a batch of 4 of each, round-robin
    assert calls == ["a", "a", "b", "b"] + (["a"] * 4 + ["b"] * 4) * 2
    # each sample: its two readings one step apart, over the batch's 4 calls
    assert ts == {"a": [_StepClock.STEP / 4] * 2, "b": [_StepClock.STEP / 4] * 2}


def test_batch_calls_bounds():
    assert timing.batch_calls(lambda: timing.busy_wait(0.004), 0.001) == 1
    assert timing.batch_calls(lambda: None, 10.0) == timing.MAX_BATCH_CALLS
