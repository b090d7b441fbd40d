"""The op registry (rlx_cpu/registry.py): one module is enough to add an op.

A toy family, ``scale_shift(x, a, b) = a * x + b`` elementwise, is written
entirely in this file -- attrs record, graph builder (shape rule and
validation), thunk record whose launch is plain numpy, compile rule, gradient
rule and functional wrapper -- and registered inside ``registry.scoped()``.
It then runs between real ops (conv2d -> scale_shift -> relu -> linear ->
softmax cross-entropy), forward and backward, against numpy float64.  The
remaining tests check the registry's rules: a name is registered once, scoped()
restores every table, and the tables agree with each other.
"""
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import reference as R
import rlx_cpu
from rlx_cpu import registry
from rlx_cpu.autograd import grads
from rlx_cpu.compiler import compile as rlx_compile
from rlx_cpu.ir import Graph
from rlx_cpu.thunks import Slice, Thunk

TOL = 1e-4       # float32 plan against the float64 reference, rel_error (max |diff| / max |want|)


# ---------------------------------------------------------------------------
# The toy family: everything an op is, in one place
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ScaleShiftAttrs:
    a: float
    b: float


def scale_shift(graph, x, a, b, name=None):
    """a * x + b elementwise; a and b are finite Python numbers."""
    op = "scale_shift"
    x = graph._value(x, op, "input")
    for arg, v in (("a", a), ("b", b)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{op}: {arg} must be a finite real number, got {v!r}")
    return graph._add(op, [x], x.shape, name, ScaleShiftAttrs(float(a), float(b)))


class ScaleShiftLaunch:
    """A launch in Python: the plan's run loop only calls execute(nthreads)."""

    def __init__(self, x, y, a, b):
        self.x, self.y, self.a, self.b = x, y, np.float32(a), np.float32(b)

    def execute(self, nthreads):
        np.multiply(self.x, self.a, out=self.y)
        self.y += self.b


@dataclass(frozen=True, repr=False)
class ScaleShiftThunk(Thunk):
    x: Slice
    y: Slice
    a: float
    b: float

    kind: ClassVar[str] = "scale_shift"
    reads: ClassVar[tuple] = ("x",)
    writes: ClassVar[tuple] = ("y",)

    def bind(self, view):
        return ScaleShiftLaunch(view(self.x), view(self.y), self.a, self.b)


def compile_scale_shift(ctx, node):
    ctx.emit(ScaleShiftThunk(node.name, ctx.buf(node.inputs[0]), ctx.buf(node.id), node.attrs.a, node.attrs.b))


def vjp_scale_shift(g, node, dy, needs):
    return [g.scale_shift(dy, node.attrs.a, 0.0)]


def scale_shift_fn(input, a, b):
    """rlx_cpu.functional.scale_shift: one plan per call (a toy needs no cache)."""
    x = np.asarray(input, np.float32)
    g = Graph()
    g.output(g.scale_shift(g.input("x", x.shape), a, b))
    return rlx_compile(g).run({"x": x})[0]


def _register_toy_family():
    registry.graph_method("scale_shift")(scale_shift)
    registry.compile_rule("scale_shift")(compile_scale_shift)
    registry.gradient("scale_shift")(vjp_scale_shift)
    registry.functional("scale_shift")(scale_shift_fn)


@pytest.fixture
def toy():
    with registry.scoped():
        _register_toy_family()
        yield


# ---------------------------------------------------------------------------
# The toy op between real ops
# ---------------------------------------------------------------------------

A, B = 1.5, -0.25
N, C_IN, C_OUT, HW, CLASSES = 2, 3, 4, 6, 5


def _data():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((N, C_IN, HW, HW)).astype(np.float32)
    w = rng.standard_normal((C_OUT, C_IN, 3, 3)).astype(np.float32)
    fc = (0.1 * rng.standard_normal((CLASSES, C_OUT * HW * HW))).astype(np.float32)
    labels = np.array([1, 3], np.float32)
    return x, w, fc, labels


def test_toy_op_runs_between_real_ops_forward_and_backward(toy):
    x, w, fc, labels = _data()
    g = Graph()
    xi, wi, li = g.input("x", x.shape), g.input("w", w.shape), g.input("labels", labels.shape)
    h = g.scale_shift(g.conv2d(xi, wi, padding=1), A, B, name="toy")
    assert h.op == "scale_shift" and h.shape == (N, C_OUT, HW, HW)
    logits = g.linear(g.flatten(g.relu(h)), fc)
    loss = g.softmax_cross_entropy(logits, li)
    dx, dw = grads(g, loss, [xi, wi])
    g.output(h, loss, dx, dw)
    plan = rlx_compile(g)
    assert "scale_shift" in [t.kind for t in plan.thunks]
    got_h, got_loss, got_dx, got_dw = plan.run({"x": x, "w": w, "labels": labels})

    # float64 reference, forward then backward by hand
    want_h = A * R.conv_nd(x, w, None, 1, 1, 1) + B
    r = R.relu(want_h)
    z = R.linear(r.reshape(N, -1), fc)
    dz = R.softmax_cross_entropy_backward(z, labels)
    dh = (dz @ fc.astype(np.float64)).reshape(want_h.shape) * (want_h > 0)
    dconv = A * dh
    want_dw = R.conv_nd_backward_weight(x, dconv, w.shape, 1, 1, 1)
    want_dx = R.conv_nd_backward_input(dconv, w, x.shape, 1, 1, 1)

    assert R.rel_error(got_h, want_h) <= TOL
    assert abs(float(got_loss) - R.softmax_cross_entropy(z, labels)) <= TOL * abs(R.softmax_cross_entropy(z, labels))
    assert R.rel_error(got_dw, want_dw) <= TOL
    assert R.rel_error(got_dx, want_dx) <= TOL


def test_toy_op_validation_names_the_op_and_shapes(toy):
    g = Graph()
    x = g.input("x", (2, 3))
    with pytest.raises(ValueError, match=r"scale_shift: a must be a finite real number, got nan "
                                         r"\[node inputs: x \[2, 3\]\]"):
        g.scale_shift(x, float("nan"), 0.0)
    with pytest.raises(ValueError, match=r"scale_shift: b must be a finite real number, got 'one'"):
        g.scale_shift(x, 1.0, "one")


def test_toy_functional_wrapper(toy):
    x = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    assert registry.FUNCTIONS["scale_shift"] is scale_shift_fn
    np.testing.assert_array_equal(rlx_cpu.functional.scale_shift(x, 2.0, 1.0), 2 * x + 1)


# ---------------------------------------------------------------------------
# The registry's rules
# ---------------------------------------------------------------------------

def _tables():
    return [dict(t) for t in (registry.GRAPH_METHODS, registry.COMPILE_RULES, registry.GRADIENTS,
                              registry.ONNX_OPS, registry.FUNCTIONS)]


def test_scoped_restores_every_table_and_graph():
    before = _tables()
    relu = Graph.relu
    with registry.scoped():
        _register_toy_family()
        assert hasattr(Graph, "scale_shift") and "scale_shift" in registry.COMPILE_RULES
    assert not hasattr(Graph, "scale_shift")
    assert not hasattr(rlx_cpu.functional, "scale_shift")
    assert _tables() == before
    assert Graph.relu is relu


def test_registering_a_name_twice_raises():
    with registry.scoped():
        _register_toy_family()
        with pytest.raises(ValueError, match="graph method 'scale_shift' is registered twice"):
            registry.graph_method("scale_shift")(scale_shift)
        with pytest.raises(ValueError, match="compile rule for op 'scale_shift' is registered twice"):
            registry.compile_rule("scale_shift")(compile_scale_shift)
        with pytest.raises(ValueError, match="gradient rule for op 'scale_shift' is registered twice"):
            registry.gradient("scale_shift")(vjp_scale_shift)
        with pytest.raises(ValueError, match="function 'scale_shift' is registered twice"):
            registry.functional("scale_shift")(scale_shift_fn)
        # ... and a toy cannot shadow what the real families registered.
        with pytest.raises(ValueError, match="graph method 'relu' is registered twice"):
            registry.graph_method("relu")(scale_shift)
        with pytest.raises(ValueError, match="compile rule for op 'relu' is registered twice"):
            registry.compile_rule("relu")(compile_scale_shift)
        with pytest.raises(ValueError, match="ONNX converter for 'Identity' is registered twice"):
            registry.onnx_op("Identity", (1, None))(lambda nc: None)
        with pytest.raises(ValueError, match="shadows a method of Graph itself"):
            registry.graph_method("input")(scale_shift)
    assert not hasattr(Graph, "scale_shift")


# Graph methods whose node is another method's op (they only compute arguments
# for it), so they need no compile rule of their own: method -> node op.
# Graph methods that build a node of another op (a rank-generic front end, or
# an op expressed through a more general one), with the op they build for the
# inputs in COMPOSITE_CASES below.
COMPOSITES = {"flatten": "reshape", "col2im_onnx": "col2im", "interpolate": "resize_nearest",
              "upsample_nearest2x": "resize_nearest", "max_pool": "max_pool2d", "avg_pool": "avg_pool2d"}
COMPOSITE_CASES = {
    "flatten": ((2, 3, 4), lambda g, x: g.flatten(x)),
    "col2im_onnx": ((1, 4, 9), lambda g, x: g.col2im_onnx(x, (4, 4), (2, 2))),
    "interpolate": ((1, 2, 4, 4), lambda g, x: g.interpolate(x, scale_factor=1.5)),
    "upsample_nearest2x": ((1, 2, 4, 4), lambda g, x: g.upsample_nearest2x(x)),
    "max_pool": ((1, 2, 4, 4), lambda g, x: g.max_pool(x, (2, 2))),
    "avg_pool": ((1, 2, 4, 4), lambda g, x: g.avg_pool(x, (2, 2))),
}


@pytest.mark.parametrize("name", sorted(COMPOSITES))
def test_composite_graph_methods_build_the_op_they_claim(name):
    shape, build = COMPOSITE_CASES[name]
    g = Graph()
    y = build(g, g.input("x", shape))
    assert y.op == COMPOSITES[name]
    g.output(y)
    rlx_cpu.compile(g)


def test_every_registered_graph_method_has_a_compile_rule():
    for name in registry.GRAPH_METHODS:
        op = COMPOSITES.get(name, name)
        assert op in registry.COMPILE_RULES, f"graph method {name!r} builds op {op!r}, which has no compile rule"
        assert callable(getattr(Graph, name))


def test_every_gradient_rule_is_for_a_compilable_op():
    assert set(registry.GRADIENTS) <= set(registry.COMPILE_RULES), \
        sorted(set(registry.GRADIENTS) - set(registry.COMPILE_RULES))


def test_onnx_ops_are_well_formed():
    assert registry.ONNX_OPS
    for op_type, entry in registry.ONNX_OPS.items():
        assert entry.op_type == op_type and callable(entry.convert)
        lo, hi = entry.versions
        assert type(lo) is int and lo >= 1, (op_type, entry.versions)
        assert hi is None or (type(hi) is int and hi >= lo), (op_type, entry.versions)
        assert all(type(i) is int and i >= 0 for i in entry.parameter_inputs), (op_type, entry.parameter_inputs)


def test_every_function_is_exported():
    assert registry.FUNCTIONS
    for name, fn in registry.FUNCTIONS.items():
        assert name in rlx_cpu.__all__, name
        assert getattr(rlx_cpu, name) is fn, name
        assert getattr(rlx_cpu.functional, name) is fn, name
