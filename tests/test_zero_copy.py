"""Zero-copy runs: kernels read graph inputs in the caller's arrays and
run_into kernels write the caller's output arrays (input/output segments
bound per run, see rlx_cpu/plan.py).  Checked here: results identical to the
copying path, inputs never written, the corner cases of outputs that are not
kernel results, overlap and layout errors, threads, and that an unchanged
run_into allocates nothing on the Python heap (tracemalloc)."""
import threading
import tracemalloc

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu.arena import ALIGNMENT, align_up
from rlx_cpu import plan as plan_mod

from conftest import check_parity, conv_nd


@pytest.fixture(params=["in_place", "copied"])
def policy(request, monkeypatch):
    """in_place: every array is bound in place (threshold 0); copied: every
    new array below an enormous threshold is staged after its first bind."""
    monkeypatch.setattr(plan_mod, "ZERO_COPY_MIN_NBYTES", 0 if request.param == "in_place" else 1 << 60)
    return request.param


def _net(rng, extra=False):
    """x -> conv -> relu -> max_pool -> conv, outputs (last conv, the pool);
    extra: also a small input 'extra' and outputs relu(extra), extra."""
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 3, 10, 10))
    w1 = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    h = g.max_pool2d(g.relu(g.conv2d(x, w1, padding=1)), 2)
    y = g.conv2d(h, w2, padding=1)
    if extra:
        e = g.input("extra", (3, 5))
        g.output(y, h, g.relu(e), e)
    else:
        g.output(y, h)

    def reference(xv):
        hv = conv_nd(xv.astype(np.float64), w1, None, 1, 1, 1)
        hv = np.maximum(hv, 0).reshape(2, 4, 5, 2, 5, 2).max(axis=(3, 5))
        return [conv_nd(hv, w2, None, 1, 1, 1), hv]
    return g, reference


def test_zero_copy_matches_the_copying_path_and_reference(rng, monkeypatch):
    g, reference = _net(rng)
    plan = rlx_cpu.compile(g)
    xs = [rng.standard_normal((2, 3, 10, 10)).astype(np.float32) for _ in range(3)]
    results = {}
    for name, threshold in (("in_place", 0), ("copied", 1 << 60)):
        monkeypatch.setattr(plan_mod, "ZERO_COPY_MIN_NBYTES", threshold)
        ctx = plan.new_context()
        outs = [np.empty(s, np.float32) for s in plan.output_shapes]
        got = []
        for x in xs + xs[:1]:                       # new objects, then one seen before
            plan.run_into({"x": x}, outs, context=ctx)
            got.append([o.copy() for o in outs])
        got.append(plan.run({"x": xs[1]}, context=ctx))
        results[name] = got
        if name == "in_place":
            # the kernels used the caller's arrays, not copies
            assert ctx._target["input:0"] is xs[1]
            run_into_ctx = plan.new_context()
            plan.run_into({"x": xs[0]}, outs, context=run_into_ctx)
            assert run_into_ctx._target["output:0"] is outs[0] and run_into_ctx._target["output:1"] is outs[1]
    for a, b in zip(results["in_place"], results["copied"]):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)
    for got, x in zip(results["in_place"], xs + xs[:1] + xs[1:2]):
        for u, want in zip(got, reference(x)):
            check_parity(u, want, "zero-copy net")


def test_arena_holds_only_intermediates_and_scratch(rng):
    g, _ = _net(rng)
    # debug=False: debug mode (RLX_DEBUG=1 runs) adds guard bytes around buffers;
    # passes=False: the graph as built (with the passes, conv1's relu is fused
    # into it and only one of the two values below remains, checked at the end)
    plan = rlx_cpu.compile(g, conv_algorithm="reference", reuse_arena=False, debug=False, passes=False)
    # the relu and conv1 outputs are the only non-I/O values; the only other
    # arena bytes are scratch (reference conv has none; the max pool keeps a
    # line buffer per thread)
    # (each buffer is laid out at a 64-byte boundary, so sizes count rounded up)
    scratch = sum(align_up(getattr(t, f).nbytes, ALIGNMENT) for t in plan.thunks for f in t.scratch_fields
                  if getattr(t, f) is not None)
    assert all(getattr(t, f).segment == "arena" for t in plan.thunks for f in t.scratch_fields
               if getattr(t, f) is not None)
    assert plan.arena_nbytes == 2 * (2 * 4 * 10 * 10 * 4) + scratch
    segs = {s.segment for t in plan.thunks for s in t.slices()}
    assert segs == {"arena", "const", "input:0", "output:0", "output:1"}
    fused = rlx_cpu.compile(g, conv_algorithm="reference", reuse_arena=False, debug=False)
    assert "fuse_epilogue: 1 relu" in fused.pass_summary
    assert fused.arena_nbytes == 2 * 4 * 10 * 10 * 4 + scratch
    g1 = rlx_cpu.Graph()
    g1.output(g1.conv2d(g1.input("x", (1, 2, 5, 5)), np.ones((3, 2, 3, 3), np.float32)))
    assert rlx_cpu.compile(g1, conv_algorithm="reference", debug=False).arena_nbytes == 0


def test_inputs_are_never_written(rng, policy):
    g, _ = _net(rng)
    plan = rlx_cpu.compile(g)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    keep = x.copy()
    x.setflags(write=False)                 # read-only inputs are read in place too
    outs = [np.empty(s, np.float32) for s in plan.output_shapes]
    for _ in range(3):
        plan.run_into({"x": x}, outs)
        plan.run({"x": x})
    np.testing.assert_array_equal(x, keep)


def test_compile_rejects_a_thunk_writing_an_input():
    from dataclasses import dataclass
    from typing import ClassVar

    from rlx_cpu import registry
    from rlx_cpu.thunks import Slice, Thunk

    @dataclass(frozen=True, repr=False)
    class InPlaceThunk(Thunk):
        x: Slice
        kind: ClassVar[str] = "in_place_toy"
        writes: ClassVar[tuple] = ("x",)

    def build(graph, x, name=None):
        return graph._add("in_place_toy", [graph._value(x, "in_place_toy", "input")], x.shape, name, None)

    def rule(ctx, node):               # a broken rule: writes its input, aliases the result to it
        ctx.emit(InPlaceThunk(node.name, ctx.buf(node.inputs[0])))
        ctx.alias(node.id, node.inputs[0])

    with registry.scoped():
        registry.graph_method("in_place_toy")(build)
        registry.compile_rule("in_place_toy")(rule)
        g = rlx_cpu.Graph()
        g.output(g.in_place_toy(g.input("x", (2, 2))))
        with pytest.raises(RuntimeError, match=r"would write input 'x'.*read-only"):
            rlx_cpu.compile(g)


def test_outputs_that_no_kernel_writes(rng, policy):
    """An output that is an input, a reshape of an input, a repeated output, a
    reshape of another output, or a constant."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 4, 4))
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    c = rng.standard_normal((2, 3)).astype(np.float32)
    y = g.conv2d(x, w, padding=1)
    g.output(y, x, g.reshape(x, (2, 16)), y, g.reshape(y, (3, 16)), g.constant(c))
    plan = rlx_cpu.compile(g)
    xv = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    want_y = plan.run({"x": xv})[0]
    check_parity(want_y, conv_nd(xv, w, None, 1, 1, 1), "conv output")
    want = [want_y, xv, xv.reshape(2, 16), want_y, want_y.reshape(3, 16), c]
    for _ in range(2):
        for got in (plan.run({"x": xv}),
                    plan.run_into({"x": xv}, [np.full(s, np.nan, np.float32) for s in plan.output_shapes])):
            for u, v in zip(got, want):
                np.testing.assert_array_equal(u, v)
    # run() outputs are fresh: they do not alias the input or each other
    out = plan.run({"x": xv})
    assert not np.shares_memory(out[1], xv) and not np.shares_memory(out[0], out[3])


@pytest.mark.parametrize("threshold", [0, 1 << 60])
def test_run_returns_arrays_the_kernels_wrote(rng, policy, monkeypatch, threshold):
    """Above RUN_IN_PLACE_MIN_NBYTES, run() binds fresh arrays as run_into
    does (no copy out of the context); either way each run's arrays are new,
    right, and later runs leave them alone -- also for the outputs no kernel
    writes and for an int64 indices output."""
    monkeypatch.setattr(plan_mod, "RUN_IN_PLACE_MIN_NBYTES", threshold)
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 6, 6))
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    y = g.conv2d(x, w, padding=1)
    pooled, idx = g.max_pool2d(y, 2, return_indices=True)
    g.output(y, x, pooled, idx, g.reshape(y, (3, 36)))
    plan = rlx_cpu.compile(g)
    assert plan._run_in_place == (threshold == 0)
    ctx = plan.new_context()
    runs = []
    for k in range(3):
        xv = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
        out = plan.run({"x": xv}, context=ctx)
        assert all(not np.shares_memory(o, p) for o in out for p in ctx.outputs)
        assert not np.shares_memory(out[1], xv)
        assert out[3].dtype == np.int64
        runs.append((xv, [o.copy() for o in out], out))
    for xv, saved, out in runs:
        for u, v in zip(out, saved):
            np.testing.assert_array_equal(u, v)
        check_parity(out[0], conv_nd(xv, w, None, 1, 1, 1), "conv output")
        np.testing.assert_array_equal(out[1], xv)
        np.testing.assert_array_equal(out[2], out[0].reshape(1, 3, 3, 2, 3, 2).max(axis=(3, 5)))
        np.testing.assert_array_equal(out[4], out[0].reshape(3, 36))


def test_the_same_array_as_two_inputs(rng, policy):
    g = rlx_cpu.Graph()
    a, b = g.input("a", (4, 6)), g.input("b", (4, 6))
    g.output(g.add(a, b))
    plan = rlx_cpu.compile(g)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    np.testing.assert_array_equal(plan.run({"a": x, "b": x})[0], x + x)
    out = np.empty((4, 6), np.float32)
    plan.run_into({"a": x, "b": x}, [out])
    np.testing.assert_array_equal(out, x + x)


def test_converted_inputs(rng, policy):
    """float64, int and non-contiguous inputs are converted once (staged)."""
    g, reference = _net(rng)
    plan = rlx_cpu.compile(g)
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    want = plan.run({"x": x})
    big = np.zeros((2, 3, 10, 20), np.float32)
    big[..., ::2] = x
    for feed in (x.astype(np.float64), big[..., ::2], np.asfortranarray(x)):
        for u, v in zip(plan.run({"x": feed}), want):
            np.testing.assert_array_equal(u, v)
    xi = np.arange(600, dtype=np.int64).reshape(2, 3, 10, 10) % 7
    for u, v in zip(plan.run({"x": xi}), plan.run({"x": xi.astype(np.float32)})):
        np.testing.assert_array_equal(u, v)


def test_same_objects_rerun_sees_their_new_contents(rng, policy):
    """A run with the very objects of the last run takes the fast path (no
    re-binding): a converted (float64) input is copied in again and an
    in-place one read again, so contents changed in between are seen, and
    an output array is written again."""
    g, reference = _net(rng)
    plan = rlx_cpu.compile(g)
    for dtype in (np.float64, np.float32):
        x = rng.standard_normal((2, 3, 10, 10)).astype(dtype)
        outs = [np.empty(s, np.float32) for s in plan.output_shapes]
        for _ in range(3):
            plan.run_into({"x": x}, outs)
            for u, want in zip(outs, reference(x.astype(np.float32))):
                check_parity(u, want, f"rerun {dtype.__name__}")
            for u, v in zip(plan.run({"x": x}), outs):
                np.testing.assert_array_equal(u, v)
            x[...] = rng.standard_normal(x.shape)


def test_switching_output_arrays_leaves_old_ones_alone(rng, policy):
    g, reference = _net(rng)
    plan = rlx_cpu.compile(g)
    x1 = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    x2 = rng.standard_normal((2, 3, 10, 10)).astype(np.float32)
    a = [np.empty(s, np.float32) for s in plan.output_shapes]
    b = [np.empty(s, np.float32) for s in plan.output_shapes]
    plan.run_into({"x": x1}, a)
    kept = [o.copy() for o in a]
    plan.run_into({"x": x2}, b)
    r = plan.run({"x": x2})
    plan.run({"x": x1})
    for u, v in zip(a, kept):
        np.testing.assert_array_equal(u, v)
    for u, v in zip(b, r):
        np.testing.assert_array_equal(u, v)
    for u, want in zip(a, reference(x1)):
        check_parity(u, want, "switch a")


def test_outputs_overlapping_inputs_or_each_other_raise(rng):
    g = rlx_cpu.Graph()
    x = g.input("x", (2, 8))
    g.output(g.relu(x), g.relu(x))
    plan = rlx_cpu.compile(g)
    xv = rng.standard_normal((2, 8)).astype(np.float32)
    o = np.empty((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"run_into: output 0 shares memory with input 'x'"):
        plan.run_into({"x": xv}, [xv, o])
    buf = np.empty((3, 8), np.float32)
    with pytest.raises(ValueError, match=r"run_into: output 1 shares memory with input 'x'"):
        plan.run_into({"x": buf[:2]}, [o, buf[1:]])
    with pytest.raises(ValueError, match=r"run_into: output arrays 0 and 1 share memory"):
        plan.run_into({"x": xv}, [o, o])
    # a failed bind leaves the context usable and correct
    o2 = np.empty((2, 8), np.float32)
    plan.run_into({"x": xv}, [o, o2])
    np.testing.assert_array_equal(o, np.maximum(xv, 0))
    np.testing.assert_array_equal(o2, np.maximum(xv, 0))


def test_run_into_rejects_bad_output_arrays():
    g = rlx_cpu.Graph()
    g.output(g.relu(g.input("x", (4, 6))))
    plan = rlx_cpu.compile(g)
    feeds = {"x": np.ones((4, 6), np.float32)}
    with pytest.raises(ValueError, match=r"run_into: output 0 must be a float32 array of shape \[4, 6\], "
                                         r"got a float64 array of shape \[4, 6\]"):
        plan.run_into(feeds, [np.empty((4, 6))])
    with pytest.raises(ValueError, match=r"output 0 must be a float32 array of shape \[4, 6\], "
                                         r"got a float32 array of shape \[6, 4\]"):
        plan.run_into(feeds, [np.empty((6, 4), np.float32)])
    with pytest.raises(ValueError, match=r"output 0 must be a writeable, aligned, C-contiguous array.*"
                                         r"c_contiguous=False"):
        plan.run_into(feeds, [np.empty((6, 4), np.float32).T])
    ro = np.empty((4, 6), np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"writeable=False"):
        plan.run_into(feeds, [ro])
    with pytest.raises(TypeError, match=r"outputs must be a list of .* got ndarray"):
        plan.run_into(feeds, np.empty((4, 6), np.float32))
    with pytest.raises(ValueError, match=r"got list"):
        plan.run_into(feeds, [[[0.0] * 6] * 4])


def test_threads_each_bind_their_own_arrays(rng, policy):
    g, reference = _net(rng)
    plan = rlx_cpu.compile(g, num_threads=1)
    xs = [rng.standard_normal((2, 3, 10, 10)).astype(np.float32) for _ in range(4)]
    want = [plan.run({"x": x}) for x in xs]
    errors = []

    def worker(k):
        try:
            outs = [np.empty(s, np.float32) for s in plan.output_shapes]
            for it in range(20):
                i = (k + it) % len(xs)
                plan.run_into({"x": xs[i]}, outs)
                for u, v in zip(outs, want[i]):
                    np.testing.assert_array_equal(u, v)
        except Exception as e:          # surfaced below with the thread's number
            errors.append((k, e))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _peak_bytes(fn, n):
    """Peak traced Python-heap bytes above the start while calling fn n times."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    for _ in range(n):
        fn()
    current, peak = tracemalloc.get_traced_memory()
    return peak - base, current - base


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("staged_input", [False, True])
def test_run_into_allocates_nothing(rng, policy, staged_input, threads):
    """A serving loop (same input and output arrays) allocates nothing: no
    numpy array, no Python object.  tracemalloc traces every Python-heap and
    numpy data allocation; the loop's own bookkeeping is measured with a no-op
    of the same call shape, and run_into's peak must not exceed it.

    With 2 threads the peak check is left out: a kernel's OpenMP worker that
    touches a memoryview slice in a prange body briefly takes the GIL, and
    CPython allocates (then frees) a thread state for that foreign thread.
    That is per parallel region inside the kernels, not the binding; nothing
    is retained and no array is made, which is still checked."""
    g, _ = _net(rng, extra=True)       # also a small input and an output that is an input
    plan = rlx_cpu.compile(g, num_threads=threads, debug=False)   # debug mode checks launches in Python
    x = rng.standard_normal((2, 3, 10, 10)).astype(np.float64 if staged_input else np.float32)
    feeds = {"x": x, "extra": np.ones((3, 5), np.float32)}
    outs = [np.empty(s, np.float32) for s in plan.output_shapes]
    ctx = plan.new_context()
    for _ in range(3):
        plan.run_into(feeds, outs, context=ctx)

    def noop(inputs, outputs, context=None):
        return outputs

    tracemalloc.start()
    try:
        base_peak, _ = _peak_bytes(lambda: noop(feeds, outs, context=ctx), 50)
        peak, retained = _peak_bytes(lambda: plan.run_into(feeds, outs, context=ctx), 50)
        numpy_domain = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    finally:
        tracemalloc.stop()
    assert retained <= 0, retained
    if threads == 1:
        assert peak <= base_peak, (peak, base_peak)
    assert not numpy_domain.traces, "numpy data allocated during run_into"
    # and the runs were real runs
    np.testing.assert_array_equal(outs[2], np.ones((3, 5), np.float32))
    np.testing.assert_array_equal(outs[3], np.ones((3, 5), np.float32))
