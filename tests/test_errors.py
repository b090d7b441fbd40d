"""Every invalid use raises the stated exception with a message that names
the op, the argument and (where the IR has them) the shapes involved."""
import re

import numpy as np
import pytest

import rlx_cpu
from rlx_cpu.ops.conv import Conv2DDims

from conftest import one_conv_graph


def _graph_x(shape=(1, 4, 8, 8)):
    g = rlx_cpu.Graph()
    return g, g.input("x", shape)


def _w(*shape):
    return np.ones(shape, np.float32)


# ---------------------------------------------------------------------------
# Graph building: conv2d / conv1d attribute and shape errors
# ---------------------------------------------------------------------------

CONV2D_BAD = [
    pytest.param((1, 4, 8, 8), _w(6, 3, 3, 3), {}, ValueError,
                 r"conv2d: channel mismatch: input has 4 channels but weight expects 3 x groups=1 = 3 "
                 r"\(input \[1, 4, 8, 8\], weight \[6, 3, 3, 3\]\)", id="channel-mismatch"),
    pytest.param((1, 4, 8, 8), _w(6, 1, 3, 3), dict(groups=2), ValueError,
                 r"conv2d: channel mismatch: input has 4 channels but weight expects 1 x groups=2 = 2",
                 id="channel-mismatch-grouped"),
    pytest.param((1, 6, 8, 8), _w(8, 2, 3, 3), dict(groups=4), ValueError,
                 r"conv2d: groups=4 does not divide in_channels=6 \(input \[1, 6, 8, 8\], weight \[8, 2, 3, 3\]\)",
                 id="groups-in"),
    pytest.param((1, 4, 8, 8), _w(5, 2, 3, 3), dict(groups=2), ValueError,
                 r"conv2d: groups=2 does not divide out_channels=5 \(input \[1, 4, 8, 8\], weight \[5, 2, 3, 3\]\)",
                 id="groups-out"),
    pytest.param((1, 4, 8, 8), _w(4, 4, 3, 3), dict(groups=0), ValueError,
                 r"conv2d: groups must be a positive integer, got 0", id="groups-zero"),
    pytest.param((1, 4, 8, 8), _w(4, 4, 3, 3), dict(groups=1.0), ValueError,
                 r"conv2d: groups must be a positive integer, got 1\.0", id="groups-float"),
    pytest.param((1, 4, 8, 8), _w(4, 4, 3, 3), dict(groups=True), ValueError,
                 r"conv2d: groups must be a positive integer, got True", id="groups-bool"),
    pytest.param((1, 4, 4, 4), _w(2, 4, 7, 7), dict(padding=1), ValueError,
                 r"conv2d: kernel extent 7 \(kernel 7, dilation 1\) is larger than padded input 6 on spatial "
                 r"axis 0 \(input \[1, 4, 4, 4\], weight \[2, 4, 7, 7\]", id="kernel-too-large"),
    pytest.param((1, 4, 9, 5), _w(2, 4, 3, 3), dict(dilation=(1, 3)), ValueError,
                 r"conv2d: kernel extent 7 \(kernel 3, dilation 3\) is larger than padded input 5 on spatial axis 1",
                 id="dilated-kernel-too-large"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(stride=0), ValueError,
                 r"conv2d: stride must be >= 1, got 0", id="stride-zero"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(stride=(1, -2)), ValueError,
                 r"conv2d: stride must be >= 1, got \(1, -2\)", id="stride-negative"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(stride=(1, 2, 1)), ValueError,
                 r"conv2d: stride must be an int or a sequence of 2 ints, got \(1, 2, 1\)", id="stride-length"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(stride=1.5), TypeError,
                 r"conv2d: stride must be an int or a sequence of 2 ints, got 1\.5", id="stride-float"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(dilation=0), ValueError,
                 r"conv2d: dilation must be >= 1, got 0", id="dilation-zero"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(dilation=(-1, 1)), ValueError,
                 r"conv2d: dilation must be >= 1, got \(-1, 1\)", id="dilation-negative"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=-1), ValueError,
                 r"conv2d: padding must be >= 0, got -1", id="padding-negative"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=(1, -1)), ValueError,
                 r"conv2d: padding must be >= 0, got \(1, -1\)", id="padding-negative-axis"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=(0, 0, 0, -1)), ValueError,
                 r"conv2d: padding must be >= 0, got \(0, 0, 0, -1\)", id="padding-negative-onnx"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=((0, 1), (-2, 0))), ValueError,
                 r"conv2d: padding must be >= 0", id="padding-negative-pairs"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=(1, 2, 3)), ValueError,
                 r"conv2d: padding must have 2 values \(symmetric\), 4 values \(ONNX begins then ends\) or 2 "
                 r"\(begin, end\) pairs, got \(1, 2, 3\)", id="padding-length"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=((0, 1, 2), (0, 0))), ValueError,
                 r"conv2d: padding pairs must be \(begin, end\) ints", id="padding-bad-pair"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding="full"), ValueError,
                 r"conv2d: padding string must be 'same', 'valid', 'SAME_UPPER' or 'SAME_LOWER', got 'full'",
                 id="padding-string"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding=1.5), TypeError,
                 r"conv2d: padding must be an int, a sequence or a string, got 1\.5", id="padding-float"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(padding="same", stride=2), ValueError,
                 r"conv2d: padding='same' requires stride 1 \(as in PyTorch\), got stride=\(2, 2\)",
                 id="same-stride2"),
    pytest.param((1, 4, 8), _w(2, 4, 3, 3), {}, ValueError,
                 r"conv2d: input must have rank 4 .*got input \[1, 4, 8\], weight \[2, 4, 3, 3\]", id="input-rank"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3), {}, ValueError,
                 r"conv2d: weight must have rank 4 \[C_out, C_in/groups, k...\], got input \[1, 4, 8, 8\], "
                 r"weight \[2, 4, 3\]", id="weight-rank"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(bias=_w(3)), ValueError,
                 r"conv2d: bias must have shape \[2\], got \[3\] \(input \[1, 4, 8, 8\], weight \[2, 4, 3, 3\]\)",
                 id="bias-length"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(bias=_w(1, 2)), ValueError,
                 r"conv2d: bias must have shape \[2\], got \[1, 2\]", id="bias-rank"),
    pytest.param((1, 4, 8, 8), {"w": 1}, {}, TypeError,
                 r"conv2d: weight must be a graph node or a numpy array, got dict", id="weight-type"),
    pytest.param((1, 4, 8, 8), "weights.npy", {}, TypeError,
                 r"conv2d: weight must be a real numeric array, got dtype <U11", id="weight-string"),
    pytest.param((1, 4, 8, 8), np.ones((2, 4, 3, 3), np.complex64), {}, TypeError,
                 r"conv2d: weight must be a real numeric array, got dtype complex64", id="weight-complex"),
    pytest.param((1, 4, 8, 8), _w(2, 4, 3, 3), dict(bias=np.ones(2, complex)), TypeError,
                 r"conv2d: bias must be a real numeric array, got dtype complex128", id="bias-complex"),
]


@pytest.mark.parametrize("x_shape,w,kwargs,exc,msg", CONV2D_BAD)
def test_conv2d_build_errors(x_shape, w, kwargs, exc, msg):
    g, x = _graph_x(x_shape)
    with pytest.raises(exc, match=msg):
        g.conv2d(x, w, **kwargs)


CONV1D_BAD = [
    pytest.param((1, 4, 8, 8), _w(2, 4, 3), {}, r"conv1d: input must have rank 3", id="input-rank"),
    pytest.param((1, 4, 8), _w(2, 4, 3, 3), {}, r"conv1d: weight must have rank 3", id="weight-rank"),
    pytest.param((1, 4, 8), _w(2, 3, 3), {}, r"conv1d: channel mismatch: input has 4 channels", id="channels"),
    pytest.param((1, 4, 5), _w(2, 4, 4), dict(dilation=2), r"conv1d: kernel extent 7 \(kernel 4, dilation 2\) is "
                 r"larger than padded input 5 on spatial axis 0", id="kernel-too-large"),
    pytest.param((1, 4, 8), _w(2, 4, 3), dict(padding=(1, 2, 3)), r"conv1d: padding must have 1 values",
                 id="padding-length"),
    pytest.param((1, 4, 8), _w(2, 4, 3), dict(padding="same", stride=3), r"conv1d: padding='same' requires stride 1",
                 id="same-stride"),
    pytest.param((1, 4, 8), _w(2, 4, 3), dict(stride=(1, 1)), r"conv1d: stride must be an int or a sequence of 1 ints",
                 id="stride-length"),
]


@pytest.mark.parametrize("x_shape,w,kwargs,msg", CONV1D_BAD)
def test_conv1d_build_errors(x_shape, w, kwargs, msg):
    g, x = _graph_x(x_shape)
    with pytest.raises(ValueError, match=msg):
        g.conv1d(x, w, **kwargs)


def test_errors_are_raised_at_build_time_and_leave_the_graph_usable():
    g, x = _graph_x()
    with pytest.raises(ValueError):
        g.conv2d(x, _w(2, 3, 3, 3))
    y = g.conv2d(x, _w(2, 4, 3, 3), padding=1)      # the graph is still consistent
    g.output(y)
    out = rlx_cpu.compile(g).run({"x": np.ones((1, 4, 8, 8), np.float32)})[0]
    assert out.shape == (1, 2, 8, 8)


def test_graph_value_errors():
    g, x = _graph_x()
    other = rlx_cpu.Graph()
    ox = other.input("x", (1, 4, 8, 8))
    with pytest.raises(ValueError, match=r"conv2d: input belongs to another graph"):
        g.conv2d(ox, _w(2, 4, 3, 3))
    with pytest.raises(ValueError, match=r"input 'y': every dim must be >= 1, got \[1, 0, 3\]"):
        g.input("y", (1, 0, 3))
    with pytest.raises(TypeError, match=r"input 'y': shape must be a sequence of ints, got 5"):
        g.input("y", 5)
    with pytest.raises(ValueError, match=r"duplicate node name 'x'"):
        g.input("x", (1,))
    with pytest.raises(TypeError, match=r"constant 'c': expected a real numeric array, got dtype <U3"):
        g.constant(np.array(["abc"]), name="c")
    with pytest.raises(ValueError, match=r"output: at least one node is required"):
        g.output()
    with pytest.raises(TypeError, match=r"output: expected nodes of this graph"):
        g.output(ox)


# ---------------------------------------------------------------------------
# compile
# ---------------------------------------------------------------------------

def _small_graph():
    return one_conv_graph((1, 4, 8, 8), _w(2, 4, 3, 3), padding=1)


def test_compile_errors():
    with pytest.raises(TypeError, match=r"compile: expected a rlx_cpu.Graph, got dict"):
        rlx_cpu.compile({})
    g, x = _graph_x()
    g.conv2d(x, _w(2, 4, 3, 3))
    with pytest.raises(ValueError, match=r"compile: the graph has no outputs; call graph.output"):
        rlx_cpu.compile(g)
    with pytest.raises(ValueError, match=r"compile: conv_algorithm must be one of 'auto', 'reference', 'im2col', "
                                         r"'direct', 'winograd', 'winograd_f4', got 'fft'"):
        rlx_cpu.compile(_small_graph(), conv_algorithm="fft")
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"compile: num_threads must be a positive integer or None, got "
                                             + re.escape(repr(bad))):
            rlx_cpu.compile(_small_graph(), num_threads=bad)


def test_bad_conv_algorithm_name_everywhere():
    x = np.ones((1, 4, 8, 8), np.float32)
    with pytest.raises(ValueError, match=r"conv_algorithm must be one of .*got 'Winograd'"):
        rlx_cpu.conv2d(x, _w(2, 4, 3, 3), conv_algorithm="Winograd")
    with pytest.raises(ValueError, match=r"conv_algorithm must be one of .*got 'gemm'"):
        rlx_cpu.conv1d(np.ones((1, 4, 8)), _w(2, 4, 3), conv_algorithm="gemm")
    dims = Conv2DDims(1, 4, 8, 8, 2, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError, match=r"conv2d: conv_algorithm must be one of \('auto', 'reference', 'im2col', "
                                         r"'direct', 'winograd', 'winograd_f4'\), got 'fast'"):
        rlx_cpu.select_conv_algorithm(dims, "fast", rlx_cpu.ConvFlags())


FORCED_BAD = [
    pytest.param("direct", dict(stride=2), r"conv_algorithm='direct' needs stride 1 \(got 2,2\)", id="direct-stride"),
    pytest.param("direct", dict(dilation=(1, 2)), r"conv_algorithm='direct' needs dilation 1 \(got 1,2\)",
                 id="direct-dilation"),
    pytest.param("winograd", dict(kernel=5), r"conv_algorithm='winograd' needs a 3x3 kernel \(got 5x5\)",
                 id="winograd-kernel"),
    pytest.param("winograd", dict(stride=(2, 1)), r"conv_algorithm='winograd' needs stride 1 \(got 2,1\)",
                 id="winograd-stride"),
    pytest.param("winograd", dict(dilation=2), r"conv_algorithm='winograd' needs dilation 1 \(got 2,2\)",
                 id="winograd-dilation"),
    pytest.param("winograd", dict(groups=2), r"conv_algorithm='winograd' needs groups 1 \(got 2\)",
                 id="winograd-groups"),
]


@pytest.mark.parametrize("algo,attrs,msg", FORCED_BAD)
def test_forced_algorithm_on_ineligible_shape(algo, attrs, msg):
    attrs = dict(attrs)
    k = attrs.pop("kernel", 3)
    groups = attrs.get("groups", 1)
    g = one_conv_graph((2, 4, 12, 12), _w(6, 4 // groups, k, k), name="head", padding=1, **attrs)
    # The message names the op and node, the reason and the conv geometry.
    with pytest.raises(ValueError, match=r"conv2d 'head': " + msg + r"; conv is n=2 4->6 12x12->"):
        rlx_cpu.compile(g, conv_algorithm=algo)


def test_forced_winograd_on_conv1d():
    g = one_conv_graph((1, 4, 16), _w(4, 4, 3), name="c1")
    with pytest.raises(ValueError, match=r"conv1d 'c1': conv_algorithm='winograd' needs a 3x3 kernel \(got 1x3\)"):
        rlx_cpu.compile(g, conv_algorithm="winograd")


# ---------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_input_plan():
    g = one_conv_graph((1, 4, 8, 8), _w(2, 4, 3, 3), weight_as_input=True, padding=1)
    return rlx_cpu.compile(g)


def _feeds(**over):
    f = {"x": np.ones((1, 4, 8, 8), np.float32), "w": np.ones((2, 4, 3, 3), np.float32)}
    f.update(over)
    return {k: v for k, v in f.items() if v is not None}


def test_run_input_name_errors(two_input_plan):
    p = two_input_plan
    with pytest.raises(ValueError, match=re.escape("run: inputs must be exactly ['x', 'w']; missing ['w'], "
                                                   "unexpected []")):
        p.run(_feeds(w=None))
    with pytest.raises(ValueError, match=re.escape("missing [], unexpected ['bias']")):
        p.run(_feeds(bias=np.ones(2)))
    with pytest.raises(ValueError, match=re.escape("missing ['w'], unexpected ['W']")):
        p.run(_feeds(w=None, W=np.ones((2, 4, 3, 3))))
    with pytest.raises(TypeError, match=r"run: inputs must be a dict of name -> array, got list"):
        p.run([np.ones((1, 4, 8, 8))])


def test_run_shape_and_dtype_errors(two_input_plan):
    p = two_input_plan
    with pytest.raises(ValueError, match=re.escape("run: input 'x' must have shape [1, 4, 8, 8], got [1, 4, 8, 9]")):
        p.run(_feeds(x=np.ones((1, 4, 8, 9))))
    with pytest.raises(ValueError, match=re.escape("run: input 'w' must have shape [2, 4, 3, 3], got [72]")):
        p.run(_feeds(w=np.ones(72)))           # same size, wrong shape: no silent reshape
    with pytest.raises(TypeError, match=r"run: input 'x' must be a real numeric array, got dtype complex128"):
        p.run(_feeds(x=np.ones((1, 4, 8, 8), np.complex128)))
    with pytest.raises(TypeError, match=r"run: input 'w' must be a real numeric array, got dtype bool"):
        p.run(_feeds(w=np.ones((2, 4, 3, 3), bool)))
    with pytest.raises(TypeError, match=r"run: input 'x' must be a real numeric array, got dtype object"):
        p.run(_feeds(x=np.full((1, 4, 8, 8), None)))


def test_run_into_errors(two_input_plan):
    p = two_input_plan
    with pytest.raises(ValueError, match=r"run_into: expected 1 output arrays, got 2"):
        p.run_into(_feeds(), [np.empty((1, 2, 8, 8), np.float32)] * 2)
    with pytest.raises(ValueError, match=re.escape("run_into: output 0 must be a float32 array of shape [1, 2, 8, 8]")):
        p.run_into(_feeds(), [np.empty((1, 2, 8, 8), np.float64)])
    with pytest.raises(ValueError, match=re.escape("run_into: output 0 must be a float32 array of shape [1, 2, 8, 8]")):
        p.run_into(_feeds(), [np.empty((1, 2, 8, 7), np.float32)])


def test_functional_errors():
    with pytest.raises(TypeError, match=r"conv2d: input must be a real numeric array, got dtype complex64"):
        rlx_cpu.conv2d(np.ones((1, 4, 8, 8), np.complex64), _w(2, 4, 3, 3))
    with pytest.raises(TypeError, match=r"conv1d: bias must be a real numeric array, got dtype complex128"):
        rlx_cpu.conv1d(np.ones((1, 4, 8)), _w(2, 4, 3), np.ones(2, complex))
    with pytest.raises(ValueError, match=r"conv2d: channel mismatch: input has 4 channels"):
        rlx_cpu.conv2d(np.ones((1, 4, 8, 8)), _w(2, 3, 3, 3))
    with pytest.raises(ValueError, match=r"conv2d: input must have rank 4"):
        rlx_cpu.conv2d(np.ones((4, 8, 8)), _w(2, 4, 3, 3))


# ---------------------------------------------------------------------------
# Thread count settings
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_set_num_threads_rejects(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: n must be a positive integer or None, got " + re.escape(repr(bad))):
        rlx_cpu.set_num_threads(bad)


@pytest.mark.parametrize("raw", ["abc", "0", "-3", "2.5"])
def test_bad_RLX_NUM_THREADS(monkeypatch, raw):
    from rlx_cpu import threads
    monkeypatch.setattr(threads, "_explicit", None)    # the env var is the deciding source
    monkeypatch.setenv("RLX_NUM_THREADS", raw)
    msg = r"RLX_NUM_THREADS must be a positive integer, got " + re.escape(repr(raw))
    with pytest.raises(ValueError, match=msg):
        rlx_cpu.get_num_threads()
    with pytest.raises(ValueError, match=msg):
        rlx_cpu.compile(_small_graph())
    # An explicit thread count does not consult the environment.
    assert rlx_cpu.compile(_small_graph(), num_threads=1).num_threads == 1


@pytest.mark.parametrize("build", [
    lambda g, x: g.conv2d(x, np.zeros((4, 3, 3, 3), np.float32), stride=0),
    lambda g, x: g.conv2d(x, np.zeros((4, 3, 3, 3), np.float32), dilation=(1, -1)),
    lambda g, x: g.conv2d(x, np.zeros((4, 3, 3, 3), np.float32), padding=-1),
    lambda g, x: g.max_pool2d(x, 3, stride=(1, 2, 3)),
    lambda g, x: g.avg_pool2d(x, 0),
])
def test_attribute_errors_name_the_input_shapes(build):
    g = rlx_cpu.Graph()
    x = g.input("img", (1, 3, 8, 8))
    with pytest.raises(ValueError, match=r"^(conv2d|max_pool2d|avg_pool2d): .*\[node inputs: img \[1, 3, 8, 8\]\]$"):
        build(g, x)


# -- layout hint -------------------------------------------------------------------------------

@pytest.mark.parametrize("call, hint", [
    (lambda: rlx_cpu.conv2d(np.zeros((1, 8, 8, 3)), np.zeros((4, 3, 3, 3))),
     r"input looks NHWC .*expects NCHW .*x\.transpose\(0, 3, 1, 2\)"),
    (lambda: rlx_cpu.conv1d(np.zeros((2, 10, 5)), np.zeros((4, 5, 3))),
     r"input looks NWC .*expects NCW .*x\.transpose\(0, 2, 1\)"),
    (lambda: rlx_cpu.conv3d(np.zeros((1, 6, 6, 6, 2)), np.zeros((4, 2, 3, 3, 3))),
     r"input looks NDHWC .*expects NCDHW .*x\.transpose\(0, 4, 1, 2, 3\)"),
    (lambda: rlx_cpu.conv_transpose2d(np.zeros((1, 8, 8, 3)), np.zeros((3, 4, 3, 3))),
     r"input looks NHWC"),
    (lambda: rlx_cpu.conv2d(np.zeros((1, 8, 8, 4)), np.zeros((4, 1, 3, 3)), groups=4),
     r"input looks NHWC"),
])
def test_channels_last_input_gets_a_layout_hint(call, hint):
    with pytest.raises(ValueError, match="channel mismatch.*" + hint):
        call()


def test_no_layout_hint_for_a_plain_channel_mismatch():
    with pytest.raises(ValueError, match="channel mismatch") as e:
        rlx_cpu.conv2d(np.zeros((1, 5, 8, 8)), np.zeros((4, 3, 3, 3)))
    assert "NHWC" not in str(e.value)
