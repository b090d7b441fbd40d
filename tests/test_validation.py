"""Bad input of every class gets a clear exception at build or compile time.

One regression test per class of hostile-input probe: size overflow, BLAS
int range, thread counts, Winograd's finite range, attribute types, float
dims, zero-size weights, foreign run contexts, flag values and unclear
errors.  Each docstring names the probe it reproduces; every test failed
(or the probe crashed) before the validation it checks existed.  Nothing
here runs a kernel on an invalid plan, so a regression fails, not crashes.
"""
import os
import re

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu import algorithms, threads
from rlx_cpu.algorithms import FLT_MAX, WINOGRAD_GROWTH, WINOGRAD_MAX_ABS_INPUT

from reference import conv_nd, rel_error

INT_MAX = 2 ** 31 - 1


# ---------------------------------------------------------------------------
# Sizes
# ---------------------------------------------------------------------------

def test_conv_transpose_huge_stride_is_refused_at_build():
    """Probe: conv_transpose2d(stride=2**32) gave a [1,1,2^32+1,2^32+1]
    intermediate, a 128 B arena (int64 wrap) and a segfault in the next pool."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 2, 2))
    with pytest.raises(ValueError, match=r"conv_transpose2d: stride must be <= 2147483647 .*4294967296"):
        g.conv_transpose2d(x, np.ones((1, 1, 1, 1), np.float32), stride=2 ** 32)


def test_output_past_py_ssize_t_is_refused_at_build():
    """Probe: an intermediate [1,1,2^32,2^32]-class size from attribute values
    that each fit a C int; its byte size (2^66) must not wrap."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 2 ** 12, 2 ** 12))
    with pytest.raises(ValueError, match=r"conv_transpose2d.*needs \d+ bytes, more than the kernels' "
                                         r"Py_ssize_t"):
        g.conv_transpose2d(x, np.ones((1, 1, 1, 1), np.float32), stride=2 ** 30)


def test_input_of_2_64_elements_is_refused():
    """Probe: an input with 2^64 elements compiled with a 0 B arena."""
    g = rlx_cpu.Graph()
    with pytest.raises(ValueError, match=r"input 'x'.*\[4294967296, 4294967296\].*73786976294838206464 bytes"):
        g.input("x", (2 ** 32, 2 ** 32))


def test_arena_sizes_are_exact_python_ints():
    """Probe: node byte sizes came from an int64 np.prod (wraps).  A legal but
    large plan now reports its exact arena size (compile only, no run)."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 2 ** 16, 2 ** 16))
    g.output(g.max_pool2d(x, 2))
    plan = rlx_cpu.compile(g, num_threads=1)
    # The input and the output are bound per run (zero-copy segments); their
    # byte sizes, and the arena's, are exact Python ints.
    assert plan.input_slices["x"].nbytes == 4 * 2 ** 32
    assert plan.output_slices[0].nbytes == 4 * 2 ** 30
    assert all(isinstance(v, int) for v in (plan.arena_nbytes, plan.input_slices["x"].nbytes,
                                            plan.output_slices[0].nbytes))


def test_arena_past_py_ssize_t_is_a_memory_error(monkeypatch):
    """The compile driver checks the arena total against Py_ssize_t (here the
    limit is lowered so the check is reachable with a small graph)."""
    from rlx_cpu import compiler
    monkeypatch.setattr(compiler, "INDEX_MAX", 10_000)
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 50, 50))
    # an intermediate, so the arena (which holds no graph input or output) is large
    g.output(g.max_pool2d(g.relu(x, name="h"), 2))
    with pytest.raises(MemoryError, match=r"compile: the plan's arena would be \d+ bytes, more than a "
                                          r"Py_ssize_t can address \(10000\); largest buffers: 'h' 10000 B"):
        rlx_cpu.compile(g, num_threads=1)


def test_blas_int_dims_forced_im2col_raises_and_auto_falls_back():
    """Probe class: sizes reaching a kernel's BLAS call as C int.  A conv1d
    whose output has 2^31 points cannot be one GEMM: forced im2col names the
    dimension, auto picks a kernel without BLAS (compile only)."""
    d = rlx_cpu.ops.conv.Conv2DDims(1, 1, 1, 2 ** 31 + 2, 1, 1, 2 ** 31, 1, 3, 1, 1, 0, 0, 1, 1, 1)
    with pytest.raises(ValueError, match=r"conv_algorithm='im2col' needs GEMM dimensions within BLAS's C int "
                                         r"\(max 2147483647\); H_out\*W_out = 2147483648"):
        algorithms.select_conv_algorithm(d, "im2col", algorithms.ConvFlags())
    assert algorithms.select_conv_algorithm(d, "auto", algorithms.ConvFlags()) in (
        algorithms.ConvAlgorithm.DIRECT, algorithms.ConvAlgorithm.REFERENCE)
    one = rlx_cpu.ops.conv.Conv2DDims(1, 1, 1, 2 ** 31, 1, 1, 2 ** 31, 1, 1, 1, 1, 0, 0, 1, 1, 1)
    assert algorithms.select_conv_algorithm(one, "auto", algorithms.ConvFlags()) != algorithms.ConvAlgorithm.GEMM_1X1
    nd = rlx_cpu.ops.conv.ConvNDDims(1, 1, 1, 1, (1, 1, 2 ** 31), (1, 1, 2 ** 31), (1, 1, 1), (1, 1, 1),
                                     (0, 0, 0), (1, 1, 1))
    assert algorithms.select_convnd_algorithm(nd, "auto", algorithms.ConvFlags()) == algorithms.ConvAlgorithm.REFERENCE
    with pytest.raises(ValueError, match=r"input points = 2147483648"):
        algorithms.select_convnd_algorithm(nd, "im2col", algorithms.ConvFlags())
    assert algorithms.select_conv_backward_algorithm(nd) == algorithms.ConvBackwardAlgorithm.REFERENCE


def test_linear_blas_dims_checked():
    """Probe class: BLAS M/N/K as C int in the dense GEMM."""
    g = rlx_cpu.Graph()
    x = g.input("x", (2 ** 31, 1))
    g.output(g.linear(x, np.ones((1, 1), np.float32)))
    with pytest.raises(ValueError, match=r"linear .*GEMM dimension rows = 2147483648 exceeds the BLAS index type"):
        rlx_cpu.compile(g, num_threads=1)


def test_huge_stride_has_a_clear_message():
    """Probe: conv2d(stride=2**70) raised 'OverflowError: Python int too large
    to convert to C ssize_t'."""
    with pytest.raises(ValueError, match=r"conv2d: stride must be <= 2147483647"):
        rlx_cpu.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)), stride=2 ** 70)
    with pytest.raises(ValueError, match=r"max_pool2d: padding must be <= 2147483647|max_pool2d: .*padding"):
        rlx_cpu.max_pool2d(np.ones((1, 1, 5, 5)), 2, padding=2 ** 40)


# ---------------------------------------------------------------------------
# Threads
# ---------------------------------------------------------------------------

HI = threads.max_num_threads()


def test_thread_bound_is_documented_value():
    assert HI == max(64, 8 * (os.cpu_count() or 1))


@pytest.mark.parametrize("n", [HI + 1, 100000, 2 ** 31, 2 ** 70, 0, -1, 1.0, True])
def test_compile_num_threads_out_of_range(n):
    """Probe: compile(..., num_threads=100000) segfaulted in OpenMP."""
    g = rlx_cpu.Graph()
    g.output(g.max_pool2d(g.input("x", (1, 1, 4, 4)), 2))
    with pytest.raises(ValueError, match=rf"num_threads must be a positive integer or None, got .*; the "
                                         rf"accepted range is 1\.\.{HI}"):
        rlx_cpu.compile(g, num_threads=n)


def test_set_num_threads_out_of_range():
    """Probe: set_num_threads(2**31) was accepted (a bare OverflowError later)."""
    with pytest.raises(ValueError, match=rf"accepted range is 1\.\.{HI}"):
        rlx_cpu.set_num_threads(2 ** 31)
    rlx_cpu.set_num_threads(HI)
    assert rlx_cpu.get_num_threads() in (HI, 1)


@pytest.mark.parametrize("var", ["RLX_NUM_THREADS", "OMP_NUM_THREADS"])
def test_env_thread_count_out_of_range(monkeypatch, var):
    """Probe: RLX_NUM_THREADS=100000 segfaulted inside OpenMP."""
    monkeypatch.delenv("RLX_NUM_THREADS", raising=False)
    monkeypatch.setenv(var, "100000")
    monkeypatch.setattr(threads, "_explicit", None)
    if var == "OMP_NUM_THREADS" and not rlx_cpu._runtime.openmp_enabled():
        assert rlx_cpu.get_num_threads() == 1
        return
    with pytest.raises(ValueError, match=rf"{var} must be a positive integer, got '100000'; the accepted "
                                         rf"range is 1\.\.{HI}"):
        rlx_cpu.get_num_threads()


# ---------------------------------------------------------------------------
# Winograd's finite range (documented, tested on both sides)
# ---------------------------------------------------------------------------

def _checkerboard_case(amplitude, c=16, wv=1e-3, size=8):
    """The input that maximises Winograd's input transform (|V| = 4 max|x|)."""
    sign = np.where(np.add.outer(np.arange(size), np.arange(size)) % 2 == 0, 1.0, -1.0)
    x = np.broadcast_to(sign * amplitude, (1, c, size, size)).astype(np.float32)
    w = np.full((16, c, 3, 3), wv, np.float32)
    w[:, :, 1, 1] = -wv
    return x, w


README = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "README.md")


def test_winograd_range_is_stated_in_help():
    doc = rlx_cpu.conv2d.__doc__
    assert "8.5e37" in doc and "81 * C_in * max|input| * max|weight|" in doc
    assert "8.5e37" in rlx_cpu.conv1d.__doc__
    assert WINOGRAD_MAX_ABS_INPUT == FLT_MAX / 4 and WINOGRAD_GROWTH == 81


@pytest.mark.skipif(not os.path.exists(README), reason="README.md is not shipped with an installed copy of tests/")
def test_winograd_range_and_thread_bound_are_stated_in_readme():
    readme = open(README).read()
    assert "max|x| <= FLT_MAX/4" in readme and "81 * C_in * max|x| * max|w| <= FLT_MAX" in readme
    assert "1..max(64, 8 x os.cpu_count())" in readme


def test_winograd_inside_range_is_finite_and_exact(clean_conv_env):
    """Probe: |x| ~ 1e38 with small weights gave inf under auto's Winograd.
    Inside the documented range (just below FLT_MAX/4, worst-case sign
    pattern) Winograd, auto and direct agree with the float64 reference."""
    x, w = _checkerboard_case(0.99 * WINOGRAD_MAX_ABS_INPUT)
    want = conv_nd(x.astype(np.float64), w.astype(np.float64))
    for algo in ("winograd", "auto", "direct", "im2col"):
        got = rlx_cpu.conv2d(x, w, conv_algorithm=algo)
        assert np.isfinite(got).all(), algo
        assert rel_error(got, want) < 1e-4, algo


def test_winograd_product_bound_inside_range(clean_conv_env):
    """The second condition: 81 * C_in * max|x| * max|w| just under FLT_MAX."""
    c, xa = 16, 1e30
    wv = 0.99 * FLT_MAX / (WINOGRAD_GROWTH * c * xa)
    rng = np.random.default_rng(1)
    x = (np.sign(rng.standard_normal((1, c, 8, 8))) * xa).astype(np.float32)
    w = (np.sign(rng.standard_normal((16, c, 3, 3))) * wv).astype(np.float32)
    got = rlx_cpu.conv2d(x, w, conv_algorithm="winograd")
    want = conv_nd(x.astype(np.float64), w.astype(np.float64))
    assert np.isfinite(got).all()
    assert np.abs(got - want).max() <= 1e-4 * np.abs(x).max() * np.abs(w).max() * c * 9


def test_winograd_outside_range_direct_and_flag_are_finite(clean_conv_env):
    """Just above the documented bound the bound is real (Winograd overflows
    on the worst-case input) and the documented remedies give the exact,
    finite result: direct, im2col, and auto with RLX_WINOGRAD=0."""
    x, w = _checkerboard_case(1.01 * WINOGRAD_MAX_ABS_INPUT)
    want = conv_nd(x.astype(np.float64), w.astype(np.float64))
    assert np.isfinite(want).all() and np.abs(want).max() < 1e37
    assert not np.isfinite(rlx_cpu.conv2d(x, w, conv_algorithm="winograd")).all()
    for algo in ("direct", "im2col", "reference"):
        got = rlx_cpu.conv2d(x, w, conv_algorithm=algo)
        assert np.isfinite(got).all() and rel_error(got, want) < 1e-4, algo
    clean_conv_env.setenv("RLX_WINOGRAD", "0")
    got = rlx_cpu.conv2d(x, w)
    assert np.isfinite(got).all() and rel_error(got, want) < 1e-4


# ---------------------------------------------------------------------------
# Invalid input accepted silently
# ---------------------------------------------------------------------------

def _onnx_conv_model(**attrs):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    node = helper.make_node("Conv", ["x", "w"], ["y"], **attrs)
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 3, 3], np.ones(9, np.float32))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("attrs, msg", [
    (dict(pads=[1.5, 1, 1, 1]), r"attribute 'pads' must be of type INTS \(a list of ints\), got FLOATS"),
    (dict(strides=[1.5, 1]), r"attribute 'strides' must be of type INTS \(a list of ints\), got FLOATS"),
    (dict(group="1"), r"attribute 'group' must be of type INT \(one int\), got STRING '1'"),
    (dict(kernel_shape=3), r"attribute 'kernel_shape' must be of type INTS \(a list of ints\), got INT 3"),
    (dict(dilations=[1.0, 1.0]), r"attribute 'dilations' must be of type INTS"),
], ids=["pads-float", "strides-float", "group-string", "kernel_shape-int", "dilations-float"])
def test_onnx_attribute_of_wrong_type(attrs, msg):
    """Probe: pads=[1.5,...] became 1, strides=[1.5] became 1, group='1'
    became 1; kernel_shape=3 raised "'int' object is not iterable"."""
    with pytest.raises(TypeError, match=r"node 'y' \(Conv-11\): " + msg):
        rlx_cpu.from_onnx(_onnx_conv_model(**attrs))


def test_onnx_attribute_of_right_type_still_imports():
    plan = rlx_cpu.from_onnx(_onnx_conv_model(pads=[1, 1, 1, 1], strides=[1, 1], group=1))
    assert plan.output_shapes == [(1, 1, 6, 6)]


def test_float_dims_raise_type_error():
    """Probe: a float input dim (8.7) was truncated to 8."""
    g = rlx_cpu.Graph()
    with pytest.raises(TypeError, match=r"input 'x': shape must be a sequence of ints, got \(1, 1, 8\.7, 8\) "
                                        r"\(8\.7 is a float\)"):
        g.input("x", (1, 1, 8.7, 8))
    x = g.input("x", (1, 1, 8, 8))
    dy = g.input("dy", (1, 1, 6, 6))
    with pytest.raises(TypeError, match=r"conv2d_backward_input: input_shape must be a sequence of ints"):
        g.conv2d_backward_input(dy, np.ones((1, 1, 3, 3), np.float32), (1, 1, 8.0, 8))
    del x


def test_float_dims_in_onnx_input_shapes():
    """Probe: from_onnx(input_shapes={'x': (1, 1, 8.7, 6)}) truncated 8.7."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(TypeError, match=r"input_shapes\['x'\] must be a sequence of ints.*8\.7 is a float"):
        rlx_cpu.from_onnx(model, input_shapes={"x": (1, 1, 8.7, 6)})


@pytest.mark.parametrize("wshape", [(1, 1, 0, 3), (1, 1, 3, 0), (0, 1, 3, 3)])
def test_zero_size_weight_axis(wshape):
    """Probe: a constant weight with a zero-size kernel axis was accepted."""
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"conv2d: weight must have every dim >= 1, got shape"):
        g.conv2d(x, np.zeros(wshape, np.float32))
    with pytest.raises(ValueError, match=r"conv_transpose2d: weight must have every dim >= 1"):
        g.conv_transpose2d(x, np.zeros(wshape[1::-1] + wshape[2:], np.float32))


def test_foreign_context_is_refused():
    """Probe: p.run(feeds, context=q.new_context()) returned q's result."""
    g = rlx_cpu.Graph()
    g.output(g.max_pool2d(g.input("x", (1, 1, 4, 4)), 2))
    p = rlx_cpu.compile(g, num_threads=1)
    h = rlx_cpu.Graph()
    h.output(h.avg_pool2d(h.input("x", (1, 1, 4, 4)), 2))
    q = rlx_cpu.compile(h, num_threads=1)
    feeds = {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)}
    with pytest.raises(ValueError, match=r"run: context belongs to another plan"):
        p.run(feeds, context=q.new_context())
    with pytest.raises(ValueError, match=r"run_into: context belongs to another plan"):
        p.run_into(feeds, [np.empty((1, 1, 2, 2), np.float32)], context=q.new_context())
    with pytest.raises(TypeError, match=r"run: context must be a RunContext"):
        p.run(feeds, context=object())
    own = p.new_context()
    assert np.array_equal(p.run(feeds, context=own)[0], [[[[5, 7], [13, 15]]]])


@pytest.mark.parametrize("var", ["RLX_FAST_CONV", "RLX_WINOGRAD", "RLX_DIRECT_CONV"])
@pytest.mark.parametrize("raw", ["maybe", "disabled", "2"])
def test_unknown_flag_values_raise(clean_conv_env, var, raw):
    """Probe: RLX_FAST_CONV=maybe or disabled silently kept the fast kernels."""
    clean_conv_env.setenv(var, raw)
    with pytest.raises(ValueError, match=rf"{var}={raw!r} is not a recognised value; use one of "
                                         r"\('1', 'on', 'true', 'yes'\) to turn it on, \('0', 'off', 'false', "
                                         r"'no'\) to turn it off"):
        rlx_cpu.conv2d(np.ones((1, 1, 5, 5)), np.ones((1, 1, 3, 3)))


@pytest.mark.parametrize("raw", ["maybe", "avx512", "AVX2", "BASELINE"])
def test_unknown_simd_value_raises(clean_conv_env, raw):
    """Probe class: RLX_SIMD typos silently ran the detected variant."""
    clean_conv_env.setenv("RLX_SIMD", raw)
    with pytest.raises(ValueError, match=rf"RLX_SIMD={raw!r} is not a recognised value; use one of "
                                         r"\('auto', 'baseline', 'avx2'\)"):
        rlx_cpu.max_pool2d(np.ones((1, 1, 4, 4)), 2)


# ---------------------------------------------------------------------------
# Unclear errors
# ---------------------------------------------------------------------------

def test_functional_accepts_array_attributes():
    """Probe: conv2d(stride=np.array([1, 1])) raised "unhashable type:
    'numpy.ndarray'" from the plan cache; torch accepts sequences."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 7, 7)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    got = rlx_cpu.conv2d(x, w, stride=np.array([2, 1]), padding=np.array([1, 0]), dilation=np.array([1, 1]))
    want = conv_nd(x.astype(np.float64), w.astype(np.float64), stride=(2, 1), pads_begin=(1, 0), pads_end=(1, 0))
    assert rel_error(got, want) < 1e-4
    pooled = rlx_cpu.max_pool2d(x, np.array([2, 2]), stride=np.array([1, 1]))
    assert pooled.shape == (1, 2, 6, 6)
    with pytest.raises(ValueError, match=r"conv2d: stride must be an int or a sequence of 2 ints"):
        rlx_cpu.conv2d(x, w, stride=np.array([1.5, 1.0]))
