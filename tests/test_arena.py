"""Arena planning: the planner on synthetic request lists, then the layout of
real plans (alignment, liveness, reuse) and the memory footguns of running
(inputs never written, outputs fresh, constants read-only)."""
import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import _runtime
from rlx_cpu.arena import ALIGNMENT, BufferRequest, plan_arena

from conftest import check_parity, conv_case, conv_nd, one_conv_graph


def _ranges_overlap(a0, a1, b0, b1):
    return a0 < b1 and b0 < a1


def assert_valid_layout(requests, arena):
    """Every offset aligned, inside the arena, and buffers whose lifetimes
    overlap never share a byte."""
    for r in requests:
        off = arena.offsets[r.key]
        assert off % ALIGNMENT == 0, (r, off)
        assert off + r.nbytes <= arena.nbytes
    for i, a in enumerate(requests):
        for b in requests[i + 1:]:
            if a.first <= b.last and b.first <= a.last:
                oa, ob = arena.offsets[a.key], arena.offsets[b.key]
                assert not _ranges_overlap(oa, oa + a.nbytes, ob, ob + b.nbytes), (a, b, oa, ob)


# ---------------------------------------------------------------------------
# The planner on synthetic requests
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(20))
def test_planner_random_requests(seed):
    rng = np.random.default_rng(seed)
    reqs = []
    for k in range(int(rng.integers(1, 40))):
        first = int(rng.integers(-1, 20))
        reqs.append(BufferRequest(f"b{k}", int(rng.integers(1, 5000)), first, first + int(rng.integers(0, 6))))
    arena = plan_arena(reqs)
    assert_valid_layout(reqs, arena)
    assert arena.unshared_nbytes == sum(-(-r.nbytes // ALIGNMENT) * ALIGNMENT for r in reqs)
    assert arena.nbytes <= arena.unshared_nbytes
    assert arena.saved_nbytes == arena.unshared_nbytes - arena.nbytes
    # No placement can beat the peak of simultaneously live bytes.
    peak = max(sum(-(-r.nbytes // ALIGNMENT) * ALIGNMENT for r in reqs if r.first <= t <= r.last)
               for t in range(-1, 26))
    assert arena.nbytes >= peak


def test_planner_reuses_disjoint_lifetimes():
    # A chain: each buffer lives for two steps, so only neighbours overlap.
    reqs = [BufferRequest(i, 1000, i, i + 1) for i in range(6)]
    arena = plan_arena(reqs)
    assert_valid_layout(reqs, arena)
    assert arena.nbytes == 2 * 1024               # two slots, ping-pong
    assert arena.saved_nbytes == 4 * 1024
    assert len({arena.offsets[r.key] for r in reqs}) == 2


def test_planner_no_reuse():
    reqs = [BufferRequest(i, 100 + i, i, i) for i in range(5)]   # all disjoint in time
    arena = plan_arena(reqs, reuse=False)
    assert arena.saved_nbytes == 0
    assert arena.nbytes == 5 * 128
    spans = sorted((arena.offsets[r.key], arena.offsets[r.key] + r.nbytes) for r in reqs)
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 <= b0                            # nothing shares, even in time
    assert all(o % ALIGNMENT == 0 for o in arena.offsets.values())
    assert plan_arena(reqs, reuse=True).nbytes == 128   # with reuse: one slot


def test_planner_touching_lifetimes_do_not_share():
    # [0, 2] and [2, 4] share thunk 2 (read as input, written as output there).
    reqs = [BufferRequest("a", 256, 0, 2), BufferRequest("b", 256, 2, 4)]
    arena = plan_arena(reqs)
    assert arena.offsets["a"] != arena.offsets["b"]


def test_planner_fills_a_gap():
    # A small late buffer fits in the hole a dead buffer left below a live one.
    reqs = [BufferRequest("big", 4096, 0, 1), BufferRequest("keep", 4096, 0, 5),
            BufferRequest("small", 100, 3, 4)]
    arena = plan_arena(reqs)
    assert_valid_layout(reqs, arena)
    assert arena.nbytes == 8192


# ---------------------------------------------------------------------------
# Real plans
# ---------------------------------------------------------------------------

def _segment_nbytes(plan, segment):
    if segment == "arena":
        return plan.arena_nbytes
    if segment == "const":
        return plan.const_nbytes
    kind, _, idx = segment.partition(":")
    if kind == "input":
        shape = plan.input_shapes[plan.input_names[int(idx)]]
        return int(np.prod(shape)) * 4
    assert kind == "output", segment
    return int(np.prod(plan.output_shapes[int(idx)])) * np.dtype(plan.output_dtypes[int(idx)]).itemsize


def _lifetimes_from_thunks(plan):
    """Recompute value lifetimes from the thunks alone.

    A written slice starts a new value; a read refers to the value last
    written to that exact slice (or a graph input); scratch lives during its
    thunk only; graph inputs start at -1, outputs stay live to the end.
    Writes go to the arena or an output segment only: never an input (read in
    place from the caller's array) nor the constants.
    Returns [(segment, offset, nbytes, first, last, label)] for all values."""
    end = len(plan.thunks)
    values = []
    current = {}
    for i, (name, s) in enumerate(plan.input_slices.items()):
        assert s.segment == f"input:{i}" and s.offset == 0, (name, s)
        current[(s.segment, s.offset, s.nbytes)] = len(values)
        values.append([s.segment, s.offset, s.nbytes, -1, -1, f"input {name}"])
    for i, t in enumerate(plan.thunks):
        for s in t.slices(("reads",)):
            if s.segment != "const":
                key = (s.segment, s.offset, s.nbytes)
                assert key in current, f"thunk {i} reads {s} that nothing wrote"
                values[current[key]][4] = i
        for s in t.slices(("scratch_fields",)):
            assert s.segment == "arena"
            values.append([s.segment, s.offset, s.nbytes, i, i, f"scratch of {i}"])
        for s in t.slices(("writes",)):
            assert s.segment == "arena" or s.segment.startswith("output:"), \
                f"thunk {i} writes {s}: inputs and constants are read-only"
            current[(s.segment, s.offset, s.nbytes)] = len(values)
            values.append([s.segment, s.offset, s.nbytes, i, i, f"output of {i}"])
    for s in plan.output_slices:
        if s.segment != "const":
            values[current[(s.segment, s.offset, s.nbytes)]][4] = end
    return values


def _same_segment_overlap(a, b):
    return a.segment == b.segment and _ranges_overlap(a.offset, a.offset + a.nbytes, b.offset, b.offset + b.nbytes)


def assert_plan_layout(plan):
    for i, t in enumerate(plan.thunks):
        for s in t.slices():
            assert s.offset % ALIGNMENT == 0, (i, t)
            assert s.offset + s.nbytes <= _segment_nbytes(plan, s.segment), (i, t)
        # An op's output and scratch never share bytes with what it reads.
        reads = [s for s in t.slices(("reads",)) if s.segment != "const"]
        own = t.slices(("writes", "scratch_fields"))
        for a in own:
            for b in reads + [o for o in own if o is not a]:
                assert not _same_segment_overlap(a, b), (i, t, a, b)
    values = _lifetimes_from_thunks(plan)
    for i, a in enumerate(values):
        for b in values[i + 1:]:
            if a[3] <= b[4] and b[3] <= a[4] and a[0] == b[0]:
                assert not _ranges_overlap(a[1], a[1] + a[2], b[1], b[1] + b[2]), (a, b)


def _chain(rng, depth=5, channels=8, size=12, n=2, weight_as_input_at=None):
    """x -> conv -> conv -> ... (mixed algorithms by shape) -> output."""
    g = rlx_cpu.Graph()
    x = g.input("x", (n, 3, size, size))
    v, c_prev, weights = x, 3, []
    specs = [dict(kernel=3, padding=1), dict(kernel=1), dict(kernel=3, padding=1, stride=2),
             dict(kernel=3, padding=1, groups=channels), dict(kernel=5, padding=2), dict(kernel=3, padding=1)]
    feeds = {}
    for i in range(depth):
        s = dict(specs[i % len(specs)])
        k = s.pop("kernel")
        groups = s.get("groups", 1)
        w = rng.standard_normal((channels, c_prev // groups, k, k)).astype(np.float32)
        b = rng.standard_normal(channels).astype(np.float32)
        weights.append((w, b, s))
        wv = w
        if weight_as_input_at == i:
            wv = g.input(f"w{i}", w.shape)
            feeds[f"w{i}"] = w
        v = g.conv2d(v, wv, b, name=f"c{i}", **s)
        c_prev = channels
    g.output(v)
    return g, weights, feeds


def _chain_reference(x, weights):
    v = x
    for w, b, s in weights:
        p = s.get("padding", 0)
        v = conv_nd(v, w, b, s.get("stride", 1), p, p, 1, s.get("groups", 1))
    return v


@pytest.mark.parametrize("algo", ["auto", "reference", "im2col"])
def test_chain_of_convs_reuses_arena(rng, algo):
    g, weights, _ = _chain(rng, depth=6)
    plan = rlx_cpu.compile(g, conv_algorithm=algo)
    # six conv thunks; under auto the blocked_layout pass may run the chain
    # on the blocked layout, with a reorder at each NCHW end (at most two);
    # a forced algorithm keeps every conv on it
    convs = [t for t in plan.thunks if t.kind != "reorder_nchwc"]
    assert len(convs) == 6 and len(plan.thunks) - len(convs) <= (2 if algo == "auto" else 0)
    assert plan.arena_saved_nbytes > 0
    assert_plan_layout(plan)
    # The recomputed attribution matches the graph: thunk i reads thunk i-1's output.
    for prev, t in zip(plan.thunks, plan.thunks[1:]):
        assert t.x == prev.y
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    check_parity(plan.run({"x": x})[0], _chain_reference(x, weights), f"chain {algo}")

    unshared = rlx_cpu.compile(g, conv_algorithm=algo, reuse_arena=False)
    assert unshared.arena_saved_nbytes == 0
    assert unshared.arena_nbytes == plan.arena_nbytes + plan.arena_saved_nbytes
    assert_plan_layout(unshared)
    np.testing.assert_array_equal(unshared.run({"x": x})[0], plan.run({"x": x})[0])


def test_layout_with_branches_winograd_and_scratch(rng):
    """Several outputs, a value read late, a runtime Winograd transform (its U
    temp) and im2col/Winograd scratch, all in one plan."""
    g = rlx_cpu.Graph()
    # 32x32: enough tiles that auto keeps Winograd with its per-run filter
    # transform (select_conv_algorithm, weight_constant=False)
    x = g.input("x", (1, 16, 32, 32))
    w_in = g.input("w", (16, 16, 3, 3))
    ws = [rng.standard_normal((16, 16, 3, 3)).astype(np.float32) for _ in range(3)]
    a = g.conv2d(x, w_in, padding=1, name="a")                       # runtime Winograd filter
    b = g.conv2d(a, ws[0], stride=2, padding=1, name="b")            # im2col scratch
    c = g.conv2d(b, ws[1], padding=1, name="c")
    d = g.conv2d(x, ws[2], padding=2, dilation=2, name="d")          # reads x late
    g.output(c, d, a)
    plan = rlx_cpu.compile(g)
    kinds = [t.kind for t in plan.thunks]
    assert "winograd_filter" in kinds
    assert any(t.slices(("scratch_fields",)) for t in plan.thunks)
    assert_plan_layout(plan)
    xv = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    wv = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    yc, yd, ya = plan.run({"x": xv, "w": wv})
    ra = conv_nd(xv, wv, None, 1, 1, 1)
    check_parity(ya, ra, "branches a")
    check_parity(yc, conv_nd(conv_nd(ra, ws[0], None, 2, 1, 1), ws[1], None, 1, 1, 1), "branches c")
    check_parity(yd, conv_nd(xv, ws[2], None, 1, 2, 2, 2), "branches d")


def test_arena_and_constants_base_addresses_aligned(rng):
    g, _, _ = _chain(rng, depth=4)
    plan = rlx_cpu.compile(g)
    for _ in range(3):                    # several contexts: alignment is not luck
        ctx = plan.new_context()
        assert _runtime.address_of(ctx.arena) % ALIGNMENT == 0
        assert ctx.arena.nbytes >= plan.arena_nbytes
    assert _runtime.address_of(plan._const) % ALIGNMENT == 0


# ---------------------------------------------------------------------------
# Footguns: what a run may and may not touch
# ---------------------------------------------------------------------------

def test_caller_inputs_are_not_written(rng):
    g, _, feeds = _chain(rng, depth=4, weight_as_input_at=0)
    plan = rlx_cpu.compile(g)
    feeds["x"] = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    copies = {k: v.copy() for k, v in feeds.items()}
    for v in feeds.values():
        v.setflags(write=False)           # any write attempt through numpy would raise
    plan.run(feeds)
    plan.run(feeds)
    for k in feeds:
        np.testing.assert_array_equal(feeds[k], copies[k])
    # Kernels read the inputs in place; the arena never holds them.
    ctx = plan._context()
    for v in feeds.values():
        assert not np.shares_memory(v, ctx.arena)


def test_outputs_are_fresh_and_survive_the_next_run(rng):
    """tinygrad-style footgun: a returned output must not be a view of the
    arena that the next run overwrites."""
    g, weights, _ = _chain(rng, depth=4)
    plan = rlx_cpu.compile(g)
    x1 = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    x2 = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    (y1,) = plan.run({"x": x1})
    y1_copy = y1.copy()
    (y2,) = plan.run({"x": x2})
    np.testing.assert_array_equal(y1, y1_copy)
    assert not np.shares_memory(y1, y2)
    assert not np.shares_memory(y1, plan._context().arena)
    assert y1.flags.owndata and y1.flags.writeable
    check_parity(y1, _chain_reference(x1, weights), "footgun run 1")
    check_parity(y2, _chain_reference(x2, weights), "footgun run 2")
    # Writing into a returned output does not disturb the plan.
    y2[...] = 0
    np.testing.assert_array_equal(plan.run({"x": x1})[0], y1_copy)


def test_run_into_writes_only_the_given_arrays(rng):
    g, weights, _ = _chain(rng, depth=4)
    plan = rlx_cpu.compile(g)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    out = np.zeros(plan.output_shapes[0], np.float32)
    plan.run_into({"x": x}, [out])
    check_parity(out, _chain_reference(x, weights), "run_into")
    kept = out.copy()
    plan.run({"x": np.zeros_like(x)})
    np.testing.assert_array_equal(out, kept)


def test_constants_are_read_only_and_copied(rng):
    x, w, b = conv_case(rng, 1, 3, 4, (6, 6), (3, 3))
    w_user = w.copy()
    g = one_conv_graph(x.shape, w_user, b, padding=1)
    w_user[...] = 0                        # later edits of the caller's array do not leak in
    plan = rlx_cpu.compile(g)
    assert not plan._const.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        plan._const[0] = 1
    const_node = next(n for n in g.nodes if n.op == "constant")
    assert not const_node.value.flags.writeable
    check_parity(plan.run({"x": x})[0], conv_nd(x, w, b, 1, 1, 1), "constants copied")
