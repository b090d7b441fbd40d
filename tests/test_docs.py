"""What help() shows a newcomer: padding forms, dtype conversion, return
values, the plan cache, and that run_into's outputs is a list."""
import pydoc

import numpy as np
import pytest

import rlx_cpu


def _help(obj):
    return pydoc.render_doc(obj, renderer=pydoc.plaintext)


@pytest.mark.parametrize("name", ["conv1d", "conv2d", "conv3d"])
def test_conv_function_help(name):
    text = _help(getattr(rlx_cpu, name))
    for needle in ("padding", "per-axis tuple", "ONNX pads", "((b, e), ...)", '"valid"', '"same"',
                   "SAME_UPPER", "SAME_LOWER", "any real dtype", "float32", "Returns a new float32 array",
                   "Plan cache", "clear_plan_cache", "groups", "conv_algorithm"):
        assert needle in text, (name, needle)


def test_plan_cache_named_in_help_exists():
    rlx_cpu.functional.clear_plan_cache()
    rlx_cpu.conv2d(np.ones((1, 1, 3, 3)), np.ones((1, 1, 3, 3)))
    assert len(rlx_cpu.functional._cache) == 1
    rlx_cpu.functional.clear_plan_cache()
    assert len(rlx_cpu.functional._cache) == 0


def test_plan_help():
    text = _help(rlx_cpu.Plan)
    for needle in ("input_names", "any real dtype", "float32", "int64", "thread", "RunContext",
                   "pickle", "IncompatiblePlanError", "run_into", "outputs"):
        assert needle in text, needle
    run_into = rlx_cpu.Plan.run_into.__doc__
    for needle in ("*list*", "[out]", "TypeError", "Returns `outputs`", "output_shapes", "output_dtypes"):
        assert needle in run_into, needle
    run = rlx_cpu.Plan.run.__doc__
    for needle in ("list of new arrays", "input_names", "input.1", "any real dtype", "float32"):
        assert needle in run, needle


def _one_output_plan():
    g = rlx_cpu.Graph()
    x = g.input("x", (1, 2, 4, 4))
    g.output(g.conv2d(x, np.ones((3, 2, 3, 3), np.float32)))
    return rlx_cpu.compile(g)


@pytest.mark.parametrize("outputs", [np.empty((1, 3, 2, 2), np.float32), np.empty((1,), np.float32),
                                     None, {"y": np.empty((1, 3, 2, 2), np.float32)}])
def test_run_into_bare_array_is_a_clear_type_error(outputs):
    plan = _one_output_plan()
    with pytest.raises(TypeError, match=r"run_into: outputs must be a list of 1 array\(s\).*\[\[1, 3, 2, 2\]\]"
                                        r".*for one output pass \[out\]"):
        plan.run_into({"x": np.zeros((1, 2, 4, 4))}, outputs)


def test_run_into_list_and_tuple_work():
    plan = _one_output_plan()
    x = np.arange(32, dtype=np.int64).reshape(1, 2, 4, 4)     # any real dtype
    want = plan.run({"x": x})[0]
    for box in (list, tuple):
        out = box([np.empty((1, 3, 2, 2), np.float32)])
        assert plan.run_into({"x": x}, out) is out
        assert np.array_equal(out[0], want)
