"""compile(..., tune=True): every eligible conv algorithm timed once per shape,
the fastest kept, the result still right."""
import pickle

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _conv2d, _runtime, tuning
from rlx_cpu.algorithms import ConvAlgorithm, ConvFlags
from rlx_cpu.ops.conv import Conv2DDims
from reference import conv_nd, rel_error

# float32 GEMM / Winograd paths against the float64 reference, relative to the
# magnitude of the result.
TOL = 1e-4

# (x shape, weight shape, stride, padding, dilation, groups)
CASES = {
    # 20 output channels: no whole blocks, so the conv stays NCHW (with 24
    # it would run the blocked stem kernel, which has no algorithms to tune)
    "3x3": ((1, 12, 12, 12), (20, 12, 3, 3), 1, 1, 1, 1),
    "1x1": ((2, 32, 7, 7), (16, 32, 1, 1), 1, 0, 1, 1),
    "5x5_s2": ((1, 8, 15, 13), (12, 8, 5, 5), 2, 2, 1, 1),
    "grouped_dilated": ((1, 12, 11, 11), (12, 3, 3, 3), 1, 2, 2, 4),
    # 12 input channels: an NCHW conv1d (with 8, a multiple of the block, it
    # runs blocked alone where the AVX-512 tiles run, and has no NCHW
    # algorithm to tune)
    "conv1d": ((2, 12, 40), (16, 12, 5), 1, 2, 1, 1),
}


@pytest.fixture(autouse=True)
def fresh_cache():
    tuning.clear_cache()
    yield
    tuning.clear_cache()


def _graph(case, weight_constant=True, bias=True):
    xs, ws, s, p, d, g_ = CASES[case]
    rng = np.random.default_rng(7)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32) if bias else None
    g = rlx_cpu.Graph()
    xi = g.input("x", xs)
    feeds = {"x": x}
    if weight_constant:
        wv = g.constant(w)
    else:
        wv = g.input("w", ws)
        feeds["w"] = w
    conv = g.conv1d if len(xs) == 3 else g.conv2d
    g.output(conv(xi, wv, g.constant(b) if bias else None, stride=s, padding=p, dilation=d, groups=g_))
    want = conv_nd(x.astype(np.float64), w.astype(np.float64), None if b is None else b.astype(np.float64),
                   stride=s, pads_begin=p, pads_end=p, dilation=d, groups=g_)
    return g, feeds, want


def _conv_thunks(plan):
    return [t for t in plan.thunks if t.kind in ("conv", "conv_1x1")]


def _algo_label(th):
    return "gemm_1x1" if th.kind == "conv_1x1" else th.algorithm.label


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("threads", [1, 2])
def test_tuned_plan_is_right_and_keeps_the_fastest(case, threads):
    g, feeds, want = _graph(case)
    plan = rlx_cpu.compile(g, tune=True, num_threads=threads)
    (name, (best, ms)), = plan.tuning.items()
    assert best == min(ms, key=ms.get)
    assert all(v > 0 for v in ms.values())
    (th,) = _conv_thunks(plan)
    assert best.split("+")[0] == _algo_label(th)
    if "+" in best:
        assert bool(th.packed) == (not best.endswith("+sgemm"))
        assert (th.packed == _conv2d.GEMM_LAYOUT_IMPLICIT) == best.endswith("+implicit")
        assert (th.packed == _conv2d.GEMM_LAYOUT_IMPLICIT_DIRECT) == best.endswith("+direct")
    assert rel_error(plan.run(feeds)[0], want) <= TOL


def test_every_eligible_algorithm_is_a_candidate():
    g, _, _ = _graph("3x3")
    plan = rlx_cpu.compile(g, tune=True, num_threads=1)
    (_, ms), = plan.tuning.values()
    assert {"winograd", "winograd_f4", "direct"} <= set(ms)
    assert any(k.startswith("im2col+") for k in ms)
    if _conv2d.simd_level():
        assert {"im2col+sgemm", "im2col+microkernel", "im2col+implicit", "im2col+direct"} <= set(ms)
    assert "reference" not in ms
    g, _, _ = _graph("5x5_s2")
    (_, ms), = rlx_cpu.compile(g, tune=True, num_threads=1).tuning.values()
    assert not any(k.startswith("winograd") for k in ms)     # stride 2, 5x5: no Winograd


def test_choice_is_the_measured_minimum(monkeypatch):
    """Whatever the timings say wins: fake them so each candidate in turn is fastest."""
    g, feeds, want = _graph("3x3")
    dims = Conv2DDims(1, 16, 12, 12, 24, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1)
    labels = [c[0] for c in tuning.conv_candidates(dims, ConvFlags())]
    for winner in labels:
        tuning.clear_cache()
        monkeypatch.setattr(tuning, "_time_candidates",
                            lambda runs, w=winner: {k: (0.5 if k == w else 2.0) for k in runs})
        plan = rlx_cpu.compile(g, tune=True, num_threads=1)
        (best, _), = plan.tuning.values()
        assert best == winner
        (th,) = _conv_thunks(plan)
        assert _algo_label(th) == winner.split("+")[0]
        assert rel_error(plan.run(feeds)[0], want) <= TOL, winner


def test_choice_is_cached_per_shape(monkeypatch):
    g, _, _ = _graph("1x1")
    first = rlx_cpu.compile(g, tune=True, num_threads=1).tuning

    def fail(runs):
        raise AssertionError("timed again")
    monkeypatch.setattr(tuning, "_time_candidates", fail)
    assert rlx_cpu.compile(g, tune=True, num_threads=1).tuning == first
    other, _, _ = _graph("3x3")
    with pytest.raises(AssertionError, match="timed again"):
        rlx_cpu.compile(other, tune=True, num_threads=1)   # another shape is another key
    if _runtime.openmp_enabled():                          # (a build without OpenMP runs 1 thread)
        with pytest.raises(AssertionError, match="timed again"):
            rlx_cpu.compile(g, tune=True, num_threads=2)   # another thread count is another key


def test_runtime_weight_is_tuned_with_its_transform():
    """A weight fed per run is timed as a plan input, so a per-run filter
    transform is part of every Winograd candidate's time."""
    g, feeds, want = _graph("3x3", weight_constant=False)
    plan = rlx_cpu.compile(g, tune=True, num_threads=1)
    (best, ms), = plan.tuning.values()
    assert "winograd" in ms
    assert rel_error(plan.run(feeds)[0], want) <= TOL
    kinds = [t.kind for t in plan.thunks]
    if best.startswith("winograd"):
        assert "winograd_filter" in kinds


def test_flags_limit_the_candidates(monkeypatch):
    monkeypatch.setenv("RLX_WINOGRAD", "0")
    monkeypatch.setenv("RLX_CONV_MICROKERNEL", "0")
    g, feeds, want = _graph("3x3")
    plan = rlx_cpu.compile(g, tune=True, num_threads=1)
    (best, ms), = plan.tuning.values()
    assert set(ms) == {"im2col+sgemm", "direct"}
    assert rel_error(plan.run(feeds)[0], want) <= TOL


def test_forced_algorithm_or_reference_flag_is_not_tuned(monkeypatch):
    g, _, _ = _graph("3x3")
    plan = rlx_cpu.compile(g, tune=True, conv_algorithm="im2col", num_threads=1)
    assert plan.tuning == {}
    assert _conv_thunks(plan)[0].algorithm == ConvAlgorithm.IM2COL
    monkeypatch.setenv("RLX_FAST_CONV", "0")
    plan = rlx_cpu.compile(g, tune=True, num_threads=1)
    assert plan.tuning == {}
    assert _conv_thunks(plan)[0].algorithm == ConvAlgorithm.REFERENCE


def test_pickled_plan_keeps_the_tuned_choice():
    g, feeds, want = _graph("3x3")
    plan = rlx_cpu.compile(g, tune=True, num_threads=1)
    back = pickle.loads(pickle.dumps(plan))
    assert back.tuning == plan.tuning
    assert [_algo_label(t) for t in _conv_thunks(back)] == [_algo_label(t) for t in _conv_thunks(plan)]
    assert "tuned" in repr(back)
    np.testing.assert_array_equal(back.run(feeds)[0], plan.run(feeds)[0])


def test_onnx_session_and_from_onnx_tune():
    from onnx import helper, numpy_helper, TensorProto
    # 12 input and output channels: an NCHW conv whatever the SIMD level
    # (input channels that are no whole blocks and outputs that are make a
    # stem, which runs blocked alone where the AVX-512 tiles run)
    w = np.random.default_rng(3).standard_normal((12, 12, 3, 3)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 12, 9, 9])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(4).standard_normal((2, 12, 9, 9)).astype(np.float32)
    want = conv_nd(x.astype(np.float64), w.astype(np.float64), pads_begin=1, pads_end=1)
    sess = rlx_cpu.InferenceSession(model.SerializeToString(), num_threads=1, tune=True)
    assert rel_error(sess.run(None, {"x": x})[0], want) <= TOL
    plan = rlx_cpu.from_onnx(model, input_shapes={"x": x.shape}, num_threads=1, tune=True)
    assert len(plan.tuning) == 1
    assert rel_error(plan.run({"x": x})[0], want) <= TOL
