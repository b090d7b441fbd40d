"""rlx_cpu.timing: the interleaved sampler the benchmarks and `run` use."""
import rlx_cpu.timing as timing


def test_interleaved_round_robin_with_settle():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    ts = timing.interleaved_samples(fns, repeat=3, warmup=1, settle=0.001)
    assert {k: len(v) for k, v in ts.items()} == {"a": 3, "b": 3}
    # warm-up once each, then per round: an untimed wake-up call and a timed one
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert all(t >= 0 for v in ts.values() for t in v)


def test_interleaved_without_settle_calls_once_per_round():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in ("a", "b")}
    med = timing.interleaved_medians(fns, repeat=2, warmup=0)
    assert calls == ["a", "b", "a", "b"] and set(med) == {"a", "b"}
