"""rlx_cpu.from_onnx: each supported op against onnx's reference implementation
(onnx.reference.ReferenceEvaluator) over opsets 6..22, the nearest-resize
index tables against the reference on random configurations, importer
behaviour (constants, initializers, shapes, names) and its errors.

Peer tests against onnxruntime are marked `peer` and skip without it.
"""
import os
import sys
import zlib
from fractions import Fraction

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install onnx==1.22.0)")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import rlx_cpu  # noqa: E402
from reference import avg_pool_nd, conv_nd, conv_transpose_nd, max_pool_nd, onnx_auto_pads  # noqa: E402
from rlx_cpu import onnx_import  # noqa: E402
from rlx_cpu.ops import resize as resize_ops  # noqa: E402
from rlx_cpu.ops.resize import COORDINATE_MODES, NEAREST_MODES, nearest_source_coords, resize_plan  # noqa: E402

F32 = TensorProto.FLOAT


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def make_model(nodes, inputs, outputs, initializers=(), opset=22, ir_version=None):
    """inputs/outputs: [(name, elem_type, shape or None)]; initializers: {name: array}."""
    inits = [onnx.numpy_helper.from_array(np.asarray(v), name=k) for k, v in dict(initializers).items()]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], inits)
    opsets = [helper.make_opsetid("", opset)]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = ir_version or max(helper.find_min_ir_version_for(opsets), 4)
    return m


def one_node_model(op, x_shape, attrs=None, *, opset=22, extra_inputs=(), initializers=(), outputs=("y",),
                   out_types=None):
    """Model with one node: input 'x' (float32, x_shape), then extra_inputs
    (names, '' for absent optional inputs) taken from initializers or declared as
    float32 graph inputs of the given shapes ({name: shape})."""
    inits = dict(initializers)
    node = helper.make_node(op, ["x", *[n for n, _ in extra_inputs]], list(outputs), **(attrs or {}))
    graph_inputs = [("x", F32, list(x_shape))]
    for name, shape in extra_inputs:
        if name and name not in inits:
            graph_inputs.append((name, F32, list(shape)))
    out_types = out_types or [F32] * len(outputs)
    return make_model([node], graph_inputs, [(o, t, None) for o, t in zip(outputs, out_types) if o],
                      inits, opset)


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


def rel_err(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    return float(np.abs(got - want).max(initial=0.0) / max(np.abs(want).max(initial=0.0), 1e-30))


def check_against_reference(model, feeds, tol=1e-5, exact=False, **kw):
    plan = rlx_cpu.from_onnx(model, **kw)
    runtime = {k: v for k, v in feeds.items() if k not in kw.get("constants", {})}
    gots = plan.run(runtime)
    wants = reference(model, feeds)
    assert len(gots) == len(wants)
    for got, want in zip(gots, wants):
        want = np.asarray(want)
        assert got.shape == want.shape, (got.shape, want.shape)
        if exact or want.dtype.kind in "iu":
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
        else:
            assert rel_err(got, want) <= tol, rel_err(got, want)
    return plan, gots


# ---------------------------------------------------------------------------
# Nearest-resize index tables vs onnx.reference
# ---------------------------------------------------------------------------

def _random_resize_config(rng):
    r = int(rng.integers(3, 6))
    shape = tuple(int(s) for s in rng.integers(1, 9, r))
    ctm = str(rng.choice(COORDINATE_MODES))
    nm = str(rng.choice(NEAREST_MODES))
    axes = None
    if rng.random() < 0.5:
        axes = [int(a) for a in rng.choice(r, size=int(rng.integers(1, r + 1)), replace=False)]
    k = len(axes) if axes is not None else r
    cfg = dict(shape=shape, ctm=ctm, nm=nm, axes=axes, scales=None, sizes=None, roi=None, policy="stretch")
    if rng.random() < 0.5:
        cfg["sizes"] = rng.integers(1, 13, k).astype(np.int64)
        if rng.random() < 0.3:
            cfg["policy"] = str(rng.choice(["not_larger", "not_smaller"]))
    elif rng.random() < 0.6:
        cfg["scales"] = rng.choice([0.25, 0.5, 0.6, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0, 1 / 3], k).astype(np.float32)
    else:
        cfg["scales"] = rng.uniform(0.3, 3.5, k).astype(np.float32)
    if ctm == "tf_crop_and_resize":
        cfg["roi"] = np.concatenate([rng.uniform(-0.3, 0.6, k), rng.uniform(0.4, 1.3, k)]).astype(np.float32)
    return cfg


def _resize_model(cfg, opset=19):
    attrs = dict(mode="nearest", coordinate_transformation_mode=cfg["ctm"], nearest_mode=cfg["nm"],
                 extrapolation_value=-7.0)
    if cfg["axes"] is not None:
        attrs["axes"] = cfg["axes"]
    if cfg["policy"] != "stretch":
        attrs["keep_aspect_ratio_policy"] = cfg["policy"]
    inits = {}
    names = ["", "", ""]
    for i, key in enumerate(("roi", "scales", "sizes")):
        if cfg[key] is not None:
            inits[key] = cfg[key]
            names[i] = key
    while names and names[-1] == "":
        names.pop()
    return one_node_model("Resize", cfg["shape"], attrs, opset=opset, extra_inputs=[(n, None) for n in names],
                          initializers=inits)


def _is_tie(x, nearest_mode):
    """x (exact) lies within float32 rounding of a point where the pick flips:
    an integer (floor / ceil of x +- 1ulp differ) or, for the rounding modes, a
    half.  The reference computes in float64, and in float32 where its inputs
    are float32 scalars (tf_crop_and_resize's roi)."""
    tol = Fraction(1, 10**6) * max(1, abs(x))
    frac = x - (x.numerator // x.denominator)
    points = (Fraction(0), Fraction(1)) + ((Fraction(1, 2),) if nearest_mode.startswith("round") else ())
    return any(abs(frac - p) <= tol for p in points)


def _full_axes(cfg):
    return list(range(len(cfg["shape"]))) if cfg["axes"] is None else [a % len(cfg["shape"]) for a in cfg["axes"]]


def _axis_scale(cfg, a):
    """The exact scale resize_plan uses on axis a."""
    axes, shape = _full_axes(cfg), cfg["shape"]
    if cfg["scales"] is not None:
        return Fraction(float(cfg["scales"][axes.index(a)]))
    if cfg["policy"] == "stretch":
        return Fraction(int(cfg["sizes"][axes.index(a)]), shape[a])
    pick = min if cfg["policy"] == "not_larger" else max
    return pick(Fraction(int(cfg["sizes"][i]), shape[b]) for i, b in enumerate(axes))


def _axis_roi(cfg, a):
    if cfg["roi"] is None:
        return None
    axes = _full_axes(cfg)
    return (float(cfg["roi"][axes.index(a)]), float(cfg["roi"][len(axes) + axes.index(a)]))


def test_resize_tables_match_reference_on_random_configs():
    """Our exact-arithmetic tables equal onnx.reference's output on random
    shapes, modes, axes, scales/sizes and aspect policies, except where the
    exact source coordinate is (within float32 rounding) a tie that the
    reference's float arithmetic resolves the other way (see
    test_resize_tie_follows_exact_arithmetic)."""
    rng = _rng("resize-tables")
    checked = ties = 0
    for _ in range(int(os.environ.get("RLX_RESIZE_CONFIGS", "150"))):
        cfg = _random_resize_config(rng)
        shape = cfg["shape"]
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        want = reference(_resize_model(cfg), {"x": x})[0]
        if 0 in want.shape:
            with pytest.raises(ValueError, match="empty"):
                resize_plan(shape, scales=cfg["scales"], sizes=cfg["sizes"], axes=cfg["axes"],
                            keep_aspect_ratio_policy=cfg["policy"], coordinate_mode=cfg["ctm"],
                            nearest_mode=cfg["nm"], roi=cfg["roi"])
            continue
        out, tables = resize_plan(shape, scales=cfg["scales"], sizes=cfg["sizes"], axes=cfg["axes"],
                                  keep_aspect_ratio_policy=cfg["policy"], coordinate_mode=cfg["ctm"],
                                  nearest_mode=cfg["nm"], roi=cfg["roi"])
        assert out == want.shape, cfg
        checked += 1
        # Our output as a gather (-7 where tf_crop_and_resize extrapolates).
        full = [np.arange(n) if t is None else t for n, t in zip(shape, tables)]
        got = x[np.ix_(*[np.maximum(t, 0) for t in full])]
        outside = np.zeros(out, bool)
        for a, t in enumerate(full):
            outside |= (t < 0).reshape([-1 if i == a else 1 for i in range(len(shape))])
        got = np.where(outside, np.float32(-7.0), got)
        bad = np.argwhere(got != want)
        if not len(bad):
            continue
        # Every disagreement must sit on an exact rounding tie of some axis.
        tie = [np.zeros(n, bool) for n in out]
        for a, t in enumerate(tables):
            if t is not None:
                tie[a] = np.array([_is_tie(v, cfg["nm"]) for v in
                                   nearest_source_coords(cfg["ctm"], out[a], _axis_scale(cfg, a), shape[a],
                                                         _axis_roi(cfg, a))])
        for pos in bad:
            assert any(tie[a][pos[a]] for a in range(len(shape))), (cfg, pos.tolist(), got[tuple(pos)],
                                                                   want[tuple(pos)])
        ties += 1
    print(f"{checked} configurations, {ties} with a float-rounding tie resolved differently")
    assert checked >= 0.8 * int(os.environ.get("RLX_RESIZE_CONFIGS", "150"))
    assert ties <= checked // 10


def test_resize_tie_follows_exact_arithmetic():
    """half_pixel_symmetric, 7 -> 5 (scale 0.75): output 2 maps to exactly 3.0;
    float64 gives 3 + 1ulp and the reference picks 2; we pick 3 (so does ONNX
    Runtime)."""
    xs = nearest_source_coords("half_pixel_symmetric", 5, np.float32(0.75), 7)
    assert xs[2] == 3
    out, tables = resize_plan((1, 1, 7), scales=[1, 1, 0.75], coordinate_mode="half_pixel_symmetric",
                              nearest_mode="round_prefer_ceil")
    assert out == (1, 1, 5)
    assert tables[2].tolist() == [0, 2, 3, 4, 6]


@pytest.mark.parametrize("ctm", COORDINATE_MODES)
@pytest.mark.parametrize("nm", NEAREST_MODES)
def test_resize_every_mode_end_to_end(ctm, nm):
    """Each coordinate mode x nearest mode through from_onnx, against the reference."""
    rng = _rng("resize-e2e", ctm, nm)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    for scales, sizes in (([1, 1, 1.5, 0.6], None), ([1, 1, 2, 2], None), (None, [2, 3, 8, 4])):
        inits = {"scales": np.array(scales, np.float32)} if scales else {"sizes": np.array(sizes, np.int64)}
        names = ["roi", "scales", ""] if scales else ["roi", "", "sizes"]
        inits["roi"] = np.array([0, 0, 0.1, 0.2, 1, 1, 0.9, 0.7], np.float32) if ctm == "tf_crop_and_resize" \
            else np.zeros(0, np.float32)
        while names[-1] == "":
            names.pop()
        m = one_node_model("Resize", x.shape, dict(mode="nearest", coordinate_transformation_mode=ctm,
                                                  nearest_mode=nm), opset=19,
                           extra_inputs=[(n, None) for n in names], initializers=inits)
        check_against_reference(m, {"x": x}, exact=True)


def test_resize_2x_uses_fast_kernel():
    """The default Resize by 2 (half_pixel, round_prefer_floor) and the asymmetric
    one give the duplication tables, which run on the 2x kernel."""
    x = _rng("2x").standard_normal((1, 4, 6, 5)).astype(np.float32)
    for attrs in ({}, {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}):
        m = one_node_model("Resize", x.shape, dict(mode="nearest", **attrs), opset=13,
                           extra_inputs=[("", None), ("scales", None)],
                           initializers={"scales": np.array([1, 1, 2, 2], np.float32)})
        plan, _ = check_against_reference(m, {"x": x}, exact=True)
        assert [t.kind for t in plan.thunks] == ["resize_nearest2x"]


def test_resize_axes_sizes_keep_aspect_and_scales_as_constant_node():
    x = _rng("axes").standard_normal((1, 2, 4, 6)).astype(np.float32)
    for policy in ("stretch", "not_larger", "not_smaller"):
        for axes in ([2, 3], [3, 2]):
            m = one_node_model("Resize", x.shape, dict(mode="nearest", axes=axes, keep_aspect_ratio_policy=policy),
                               opset=18, extra_inputs=[("", None), ("", None), ("sizes", None)],
                               initializers={"sizes": np.array([7, 3], np.int64)})
            _, (want,) = check_against_reference(m, {"x": x}, exact=True)
            # negative axes (which onnx.reference does not take) mean the same
            m.graph.node[0].attribute[0].CopyFrom(helper.make_attribute("axes", [a - 4 for a in axes]))
            np.testing.assert_array_equal(rlx_cpu.from_onnx(m).run({"x": x})[0], want)
    # scales produced by a Constant node, through an Identity
    nodes = [helper.make_node("Constant", [], ["c"], value=onnx.numpy_helper.from_array(
                 np.array([1, 1, 3, 0.5], np.float32))),
             helper.make_node("Identity", ["c"], ["s"]),
             helper.make_node("Resize", ["x", "", "s"], ["y"], mode="nearest", nearest_mode="floor")]
    m = make_model(nodes, [("x", F32, list(x.shape))], [("y", F32, None)], opset=13)
    check_against_reference(m, {"x": x}, exact=True)


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
def test_resize_versions_with_empty_scales_and_sizes(opset):
    """Resize-11/13 exporters pass roi and an empty scales with sizes."""
    x = _rng("rv", opset).standard_normal((2, 3, 4, 5)).astype(np.float32)
    m = one_node_model("Resize", x.shape, dict(mode="nearest", coordinate_transformation_mode="asymmetric"),
                       opset=opset, extra_inputs=[("roi", None), ("scales", None), ("sizes", None)],
                       initializers={"roi": np.zeros(0, np.float32), "scales": np.zeros(0, np.float32),
                                     "sizes": np.array([2, 3, 9, 3], np.int64)})
    check_against_reference(m, {"x": x}, exact=True)


@pytest.mark.parametrize("op,opset", [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
def test_legacy_upsample_integer_scales_against_reference(op, opset):
    x = _rng("legacy", op, opset).standard_normal((1, 2, 3, 4)).astype(np.float32)
    scales = np.array([1, 1, 2, 3], np.float32)
    if opset == 7:
        m = one_node_model(op, x.shape, dict(mode="nearest", scales=scales.tolist()), opset=opset)
    else:
        m = one_node_model(op, x.shape, dict(mode="nearest"), opset=opset, extra_inputs=[("scales", None)],
                           initializers={"scales": scales})
    want = np.repeat(np.repeat(x, 2, axis=2), 3, axis=3)      # nearest integer upsampling
    np.testing.assert_array_equal(rlx_cpu.from_onnx(m).run({"x": x})[0], want)
    if opset == 9:   # the reference runs Upsample-9 only (not -7, nor Resize-10 nearest)
        check_against_reference(m, {"x": x}, exact=True)


def test_upsample_1_height_width_scale():
    x = _rng("up1").standard_normal((1, 2, 3, 4)).astype(np.float32)
    m = one_node_model("Upsample", x.shape, dict(mode="nearest", height_scale=2.0, width_scale=3.0), opset=6)
    np.testing.assert_array_equal(rlx_cpu.from_onnx(m).run({"x": x})[0],
                                  np.repeat(np.repeat(x, 2, axis=2), 3, axis=3))


def test_legacy_tables_floor_up_ceil_down():
    """Upsample / Resize-10 (as ONNX Runtime): x = y / scale in float32,
    floor when the axis grows, ceil when it shrinks."""
    t = resize_ops.legacy_nearest_index_table
    assert t(7, 10, 1.5).tolist() == [0, 0, 1, 2, 2, 3, 4, 4, 5, 6]
    assert t(7, 4, 0.6).tolist() == [0, 2, 4, 5]
    assert t(7, 2, 0.3).tolist() == [0, 4]


# ---------------------------------------------------------------------------
# Conv / ConvTranspose
# ---------------------------------------------------------------------------

CONV_CASES = [
    # x shape, W shape, attrs
    ((2, 4, 11), (6, 2, 3), dict(group=2, strides=[2], pads=[2, 1], dilations=[2])),
    ((1, 3, 9, 8), (4, 3, 3, 3), dict(pads=[1, 0, 2, 1])),
    ((2, 4, 9, 8), (4, 1, 3, 2), dict(group=4, strides=[2, 1], dilations=[1, 2], auto_pad="SAME_UPPER")),
    ((1, 3, 9, 8), (5, 3, 2, 3), dict(strides=[2, 3], auto_pad="SAME_LOWER")),
    ((1, 3, 9, 8), (5, 3, 2, 3), dict(auto_pad="VALID", kernel_shape=[2, 3])),
    ((1, 2, 5, 6, 7), (4, 2, 3, 2, 3), dict(pads=[1, 0, 1, 0, 1, 2], strides=[1, 2, 2])),
]


def _onnx_pads(attrs, in_sp, kernel, dilation):
    """(begins, ends) of an ONNX conv/pool node's auto_pad / pads."""
    nsp = len(in_sp)
    stride = attrs.get("strides", [1] * nsp)
    mode = attrs.get("auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        return onnx_auto_pads(in_sp, kernel, stride, dilation, mode)
    pads = attrs.get("pads", [0] * 2 * nsp) if mode == "NOTSET" else [0] * 2 * nsp
    return tuple(pads[:nsp]), tuple(pads[nsp:])


@pytest.mark.parametrize("case", range(len(CONV_CASES)))
@pytest.mark.parametrize("w_as", ["initializer", "input"])
def test_conv(case, w_as):
    """Against the float64 reference (onnx.reference's Conv mis-sizes some
    auto_pad cases with unequal axes; ONNX Runtime agrees with us there)."""
    xs, ws, attrs = CONV_CASES[case]
    rng = _rng("conv", case, w_as)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    if w_as == "initializer":
        m = one_node_model("Conv", xs, attrs, extra_inputs=[("W", ws), ("B", (ws[0],))],
                           initializers={"W": w, "B": b})
        feeds = {"x": x}
    else:
        m = one_node_model("Conv", xs, attrs, extra_inputs=[("W", ws), ("B", (ws[0],))])
        feeds = {"x": x, "W": w, "B": b}
    plan = rlx_cpu.from_onnx(m)
    assert plan.input_names == list(feeds)
    nsp = len(xs) - 2
    dil = attrs.get("dilations", [1] * nsp)
    pb, pe = _onnx_pads(attrs, xs[2:], ws[2:], dil)
    want = conv_nd(x, w, b, attrs.get("strides", 1), pb, pe, dil, attrs.get("group", 1))
    assert rel_err(plan.run(feeds)[0], want) <= 1e-4


CONV_T_CASES = [
    ((1, 2, 5), (2, 3, 3), dict(strides=[2], output_padding=[1], pads=[1, 0])),
    ((2, 4, 4, 5), (4, 2, 3, 3), dict(group=2, strides=[2, 3], dilations=[1, 2], pads=[0, 1, 2, 0])),
    ((1, 2, 4, 5), (2, 3, 3, 2), dict(strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 4, 5), (2, 3, 3, 2), dict(strides=[2, 2], auto_pad="SAME_LOWER")),
    ((1, 2, 4, 5), (2, 3, 3, 3), dict(strides=[3, 2], output_shape=[12, 11])),
    ((1, 2, 3, 4, 3), (2, 2, 2, 3, 2), dict(strides=[2, 1, 2], output_padding=[1, 0, 1])),
]


@pytest.mark.parametrize("case", range(len(CONV_T_CASES)))
def test_conv_transpose(case):
    """Against the float64 reference, pads derived by the ONNX rules
    (onnx.reference's ConvTranspose breaks with groups of several channels)."""
    xs, ws, attrs = CONV_T_CASES[case]
    rng = _rng("convT", case)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    group = attrs.get("group", 1)
    c_out = ws[1] * group
    b = rng.standard_normal(c_out).astype(np.float32)
    m = one_node_model("ConvTranspose", xs, attrs, extra_inputs=[("W", ws), ("B", (c_out,))],
                       initializers={"W": w, "B": b})
    nsp = len(xs) - 2
    s_, d = attrs.get("strides", [1] * nsp), attrs.get("dilations", [1] * nsp)
    op = attrs.get("output_padding", [0] * nsp)
    mode = attrs.get("auto_pad", "NOTSET")
    if "output_shape" in attrs or mode in ("SAME_UPPER", "SAME_LOWER"):
        target = attrs.get("output_shape") or [xs[2 + i] * s_[i] for i in range(nsp)]
        total = [s_[i] * (xs[2 + i] - 1) + op[i] + (ws[2 + i] - 1) * d[i] + 1 - target[i] for i in range(nsp)]
        assert min(total) >= 0
        small = [t // 2 for t in total]
        pb = small if mode == "SAME_UPPER" else [t - h for t, h in zip(total, small)]
        pe = [t - p for t, p in zip(total, pb)]
    else:
        pads = attrs.get("pads", [0] * 2 * nsp)
        pb, pe = pads[:nsp], pads[nsp:]
    want = conv_transpose_nd(x, w, b, s_, pb, pe, d, group, op)
    assert rel_err(rlx_cpu.from_onnx(m).run({"x": x})[0], want) <= 1e-4


# ---------------------------------------------------------------------------
# Pools
# ---------------------------------------------------------------------------

POOL_CASES = [
    ((2, 3, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1])),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1)),
    ((1, 2, 9, 8), dict(kernel_shape=[2, 3], dilations=[2, 1], strides=[1, 2])),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER")),
    ((1, 2, 7, 8), dict(kernel_shape=[2, 3], strides=[2, 3], auto_pad="SAME_LOWER")),
    ((1, 2, 5, 6, 7), dict(kernel_shape=[2, 3, 2], strides=[2, 1, 2], pads=[0, 1, 1, 1, 1, 0], ceil_mode=1)),
]


def onnx_max_pool(x, kernel, stride, pads_begin, pads_end, dilation, ceil_mode, storage_order=0):
    """ONNX MaxPool from the float64 reference: indices flat over the whole
    tensor, the spatial part row-major (storage_order 0) or first axis fastest (1)."""
    y, plane_idx = max_pool_nd(x, kernel, stride, pads_begin, pads_end, dilation, bool(ceil_mode))
    sp = x.shape[2:]
    if storage_order:
        plane_idx = np.ravel_multi_index(np.unravel_index(plane_idx, sp), sp, order="F")
    base = np.arange(x.shape[0] * x.shape[1]).reshape(x.shape[:2] + (1,) * len(sp)) * int(np.prod(sp))
    return y, plane_idx + base


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("storage_order", [0, 1])
def test_max_pool_with_indices(case, storage_order):
    xs, attrs = POOL_CASES[case]
    x = _rng("maxpool", case).standard_normal(xs).astype(np.float32)
    m = one_node_model("MaxPool", xs, dict(attrs, storage_order=storage_order), outputs=("y", "i"),
                       out_types=[F32, TensorProto.INT64])
    y, i = rlx_cpu.from_onnx(m).run({"x": x})
    assert i.dtype == np.int64
    nsp = len(xs) - 2
    dil = attrs.get("dilations", [1] * nsp)
    pb, pe = _onnx_pads(attrs, xs[2:], attrs["kernel_shape"], dil)
    want_y, want_i = onnx_max_pool(x, attrs["kernel_shape"], attrs.get("strides", [1] * nsp), pb, pe, dil,
                                   attrs.get("ceil_mode", 0), storage_order)
    np.testing.assert_array_equal(y, want_y.astype(np.float32))
    np.testing.assert_array_equal(i, want_i)
    # the indices address the maxima (column-major within each plane for storage_order 1)
    planes = x.reshape(xs[0] * xs[1], -1) if storage_order == 0 else \
        x.reshape(xs[0] * xs[1], *xs[2:]).transpose(0, *range(len(xs) - 2, 0, -1)).reshape(xs[0] * xs[1], -1)
    np.testing.assert_array_equal(planes.reshape(-1)[i], y)


@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool(case, count_include_pad):
    xs, attrs = POOL_CASES[case]
    x = _rng("avgpool", case).standard_normal(xs).astype(np.float32)
    m = one_node_model("AveragePool", xs, dict(attrs, count_include_pad=count_include_pad))
    nsp = len(xs) - 2
    dil = attrs.get("dilations", [1] * nsp)
    pb, pe = _onnx_pads(attrs, xs[2:], attrs["kernel_shape"], dil)
    if "dilations" in attrs:
        m.opset_import[0].version = 19       # AveragePool-19 added dilations
    want = avg_pool_nd(x, attrs["kernel_shape"], attrs.get("strides", [1] * nsp), pb, pe, dil,
                       bool(attrs.get("ceil_mode", 0)), bool(count_include_pad))
    assert rel_err(rlx_cpu.from_onnx(m).run({"x": x})[0], want) <= 1e-6


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("xs", [(2, 3, 7), (1, 4, 5, 6), (2, 2, 3, 4, 5)])
def test_global_pools(op, xs):
    x = _rng(op, xs).standard_normal(xs).astype(np.float32)
    axes = tuple(range(2, len(xs)))
    want = x.astype(np.float64).mean(axis=axes, keepdims=True) if op == "GlobalAveragePool" else \
        x.max(axis=axes, keepdims=True)
    assert rel_err(rlx_cpu.from_onnx(one_node_model(op, xs)).run({"x": x})[0], want) <= 1e-6


@pytest.mark.parametrize("opset,attrs", [
    (6, dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])),                     # AveragePool-1
    (7, dict(kernel_shape=[3, 2], pads=[1, 1, 1, 1], count_include_pad=1)),                 # AveragePool-7
    (10, dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)),                           # AveragePool-10
    (11, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1)),        # AveragePool-11
    (19, dict(kernel_shape=[2, 2], dilations=[2, 2], count_include_pad=1, pads=[1, 1, 1, 1])),  # -19
])
def test_average_pool_versions(opset, attrs):
    """AveragePool-1 reads as -7 with count_include_pad 0 (ONNX Runtime has no
    AveragePool-1 and onnx.reference misreads it; the float64 pool decides)."""
    x = _rng("avgv", opset).standard_normal((1, 2, 7, 8)).astype(np.float32)
    got = rlx_cpu.from_onnx(one_node_model("AveragePool", x.shape, attrs, opset=opset)).run({"x": x})[0]
    pb, pe = _onnx_pads(attrs, x.shape[2:], attrs["kernel_shape"], attrs.get("dilations", [1, 1]))
    want = avg_pool_nd(x, attrs["kernel_shape"], attrs.get("strides", [1, 1]), pb, pe,
                       attrs.get("dilations", [1, 1]), bool(attrs.get("ceil_mode", 0)),
                       bool(attrs.get("count_include_pad", 0)))
    assert rel_err(got, want) <= 1e-6
    if opset >= 7:
        assert rel_err(got, reference(one_node_model("AveragePool", x.shape, attrs, opset=opset), {"x": x})[0]) <= 1e-6


@pytest.mark.parametrize("opset", [6, 8, 10, 11, 12, 22])
def test_max_pool_versions(opset):
    x = _rng("maxv", opset).standard_normal((1, 2, 7, 8)).astype(np.float32)
    attrs = dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 0, 1])
    outputs = ("y", "i") if opset >= 8 else ("y",)
    m = one_node_model("MaxPool", x.shape, attrs, opset=opset, outputs=outputs,
                       out_types=[F32, TensorProto.INT64])
    got = rlx_cpu.from_onnx(m).run({"x": x})
    want = onnx_max_pool(x, attrs["kernel_shape"], attrs["strides"], [1, 0], [0, 1], [1, 1], False)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(g.dtype))
    check_against_reference(m, {"x": x})


def test_version_specific_attributes_are_refused():
    """dilations on AveragePool-11, ceil_mode on MaxPool-8: not part of those versions."""
    m = one_node_model("AveragePool", (1, 1, 5, 5), dict(kernel_shape=[2, 2], dilations=[2, 2]), opset=11)
    with pytest.raises(NotImplementedError, match=r"AveragePool-11.*attribute 'dilations'"):
        rlx_cpu.from_onnx(m)
    m = one_node_model("MaxPool", (1, 1, 5, 5), dict(kernel_shape=[2, 2], ceil_mode=1), opset=8)
    with pytest.raises(NotImplementedError, match=r"MaxPool-8.*attribute 'ceil_mode'"):
        rlx_cpu.from_onnx(m)


# ---------------------------------------------------------------------------
# Col2Im, Identity, whole models
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("image,block,attrs", [
    ((6, 7), (2, 3), dict(strides=[2, 1], pads=[1, 0, 1, 2], dilations=[1, 2])),
    ((5, 6, 4), (2, 2, 3), dict(strides=[1, 2, 1], pads=[0, 1, 1, 0, 1, 0])),
    ((9,), (3,), dict(dilations=[2])),
])
def test_col2im(image, block, attrs):
    nsp = len(image)
    s, p, d = attrs.get("strides", [1] * nsp), attrs.get("pads", [0] * 2 * nsp), attrs.get("dilations", [1] * nsp)
    blocks = [(image[i] + p[i] + p[nsp + i] - d[i] * (block[i] - 1) - 1) // s[i] + 1 for i in range(nsp)]
    xs = (2, 3 * int(np.prod(block)), int(np.prod(blocks)))
    x = _rng("col2im", image).standard_normal(xs).astype(np.float32)
    m = one_node_model("Col2Im", xs, attrs, opset=18,
                       extra_inputs=[("image_shape", None), ("block_shape", None)],
                       initializers={"image_shape": np.array(image, np.int64),
                                     "block_shape": np.array(block, np.int64)})
    check_against_reference(m, {"x": x})


def _small_cnn(opset):
    """Conv -> MaxPool -> AveragePool -> (Upsample | Resize) -> ConvTranspose ->
    GlobalAveragePool, with ops in the form of the given opset."""
    rng = _rng("cnn")
    inits = {"W1": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
             "B1": rng.standard_normal(4).astype(np.float32),
             "W2": rng.standard_normal((4, 2, 2, 2)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    scales = np.array([1, 1, 2, 2], np.float32)
    if opset < 7:
        nodes.append(helper.make_node("Upsample", ["p2"], ["u"], mode="nearest", height_scale=2.0,
                                      width_scale=2.0))
    elif opset < 9:
        nodes.append(helper.make_node("Upsample", ["p2"], ["u"], mode="nearest", scales=scales.tolist()))
    elif opset < 10:
        inits["scales"] = scales
        nodes.append(helper.make_node("Upsample", ["p2", "scales"], ["u"], mode="nearest"))
    elif opset < 11:
        inits["scales"] = scales
        nodes.append(helper.make_node("Resize", ["p2", "scales"], ["u"], mode="nearest"))
    else:
        inits["scales"] = scales
        inits["roi"] = np.zeros(0, np.float32)     # a required input of Resize-11
        nodes.append(helper.make_node("Resize", ["p2", "roi", "scales"], ["u"], mode="nearest",
                                      coordinate_transformation_mode="asymmetric", nearest_mode="floor"))
    nodes += [helper.make_node("ConvTranspose", ["u", "W2"], ["t"], strides=[2, 2]),
              helper.make_node("Identity", ["t"], ["t2"]),
              helper.make_node("GlobalAveragePool", ["t2"], ["g"])]
    return make_model(nodes, [("x", F32, [2, 3, 8, 10])], [("g", F32, [2, 2, 1, 1]), ("t", F32, None)],
                      inits, opset)


@pytest.mark.parametrize("opset", range(6, 23))
def test_model_loads_and_matches_at_every_opset(opset):
    m = _small_cnn(opset)
    x = _rng("cnn-x", opset).standard_normal((2, 3, 8, 10)).astype(np.float32)
    if opset < 9 or opset == 10:
        # onnx.reference runs neither Upsample-1/7 nor Resize-10 nearest: the
        # same network in its opset-9 / opset-11 form is the expectation
        want = reference(_small_cnn(9 if opset < 9 else 11), {"x": x})
        got = rlx_cpu.from_onnx(m).run({"x": x})
        for a, b in zip(got, want):
            assert rel_err(a, b) <= 1e-4
        return
    check_against_reference(m, {"x": x}, tol=1e-4)


def test_thread_count_invariance():
    m = _small_cnn(22)
    x = _rng("threads").standard_normal((2, 3, 8, 10)).astype(np.float32)
    a = rlx_cpu.from_onnx(m, num_threads=1).run({"x": x})
    b = rlx_cpu.from_onnx(m, num_threads=2).run({"x": x})
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)


def test_model_from_path_bytes_and_proto(tmp_path):
    m = _small_cnn(13)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    x = _rng("load").standard_normal((2, 3, 8, 10)).astype(np.float32)
    outs = [rlx_cpu.from_onnx(src).run({"x": x}) for src in (m, str(path), path, m.SerializeToString())]
    for o in outs[1:]:
        for a, b in zip(outs[0], o):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="path, bytes or an onnx.ModelProto"):
        rlx_cpu.from_onnx(42)


def test_import_onnx_names_and_dtypes():
    m = one_node_model("MaxPool", (1, 1, 4, 4), dict(kernel_shape=[2, 2]), outputs=("y", "idx"),
                       out_types=[F32, TensorProto.INT64])
    imp = rlx_cpu.import_onnx(m)
    assert imp.input_names == ["x"]
    assert imp.output_names == ["y", "idx"]
    assert [str(d) for d in imp.output_dtypes] == ["float32", "int64"]
    assert imp.opset == 22


def test_identity_of_input_and_initializer_listed_as_input():
    """IR-3 models list initializers among the inputs: they stay constants."""
    w = _rng("ir3").standard_normal((2, 1, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Identity", ["x"], ["x2"]), helper.make_node("Conv", ["x2", "W"], ["y"])]
    m = make_model(nodes, [("x", F32, [1, 1, 5, 5]), ("W", F32, [2, 1, 3, 3])], [("y", F32, None)],
                   {"W": w}, opset=6, ir_version=3)
    x = _rng("ir3x").standard_normal((1, 1, 5, 5)).astype(np.float32)
    plan, _ = check_against_reference(m, {"x": x}, tol=1e-4)
    assert plan.input_names == ["x"]


def test_constants_fix_a_graph_input():
    x = _rng("const").standard_normal((1, 2, 3, 3)).astype(np.float32)
    m = one_node_model("Resize", x.shape, dict(mode="nearest"), opset=13,
                       extra_inputs=[("", None), ("scales", (4,))])
    with pytest.raises(NotImplementedError, match=r"input 2 \(scales\) 'scales' must be known.*constants"):
        rlx_cpu.from_onnx(m)
    scales = np.array([1, 1, 2, 3], np.float32)
    plan = rlx_cpu.from_onnx(m, constants={"scales": scales})
    assert plan.input_names == ["x"]
    np.testing.assert_array_equal(plan.run({"x": x})[0], reference(m, {"x": x, "scales": scales})[0])
    with pytest.raises(ValueError, match="'nope', which is not a graph input"):
        rlx_cpu.from_onnx(m, constants={"nope": scales})


def test_dynamic_shapes_need_input_shapes():
    m = one_node_model("GlobalMaxPool", ("N", 3, 4, 4))
    with pytest.raises(ValueError, match=r"input 'x' has a dynamic shape \['N', 3, 4, 4\].*input_shapes"):
        rlx_cpu.from_onnx(m)
    plan = rlx_cpu.from_onnx(m, input_shapes={"x": (2, 3, 4, 4)})
    assert plan.input_shapes == {"x": (2, 3, 4, 4)}
    with pytest.raises(ValueError, match="contradicts the declared shape"):
        rlx_cpu.from_onnx(m, input_shapes={"x": (2, 5, 4, 4)})


def test_declared_output_shape_is_checked():
    node = helper.make_node("GlobalMaxPool", ["x"], ["y"])
    m = make_model([node], [("x", F32, [1, 3, 4, 4])], [("y", F32, [1, 3, 2, 2])])
    with pytest.raises(ValueError, match=r"output 'y' is declared as \[1, 3, 2, 2\].*computes \[1, 3, 1, 1\]"):
        rlx_cpu.from_onnx(m)


# ---------------------------------------------------------------------------
# Refusals: NotImplementedError naming node, op and attribute
# ---------------------------------------------------------------------------

def test_unsupported_op_names_node_and_op():
    node = helper.make_node("Erf", ["x"], ["y"], name="act1")
    m = make_model([node], [("x", F32, [1, 2])], [("y", F32, None)])
    with pytest.raises(NotImplementedError, match=r"node 'act1': op Erf-13 is not supported"):
        rlx_cpu.from_onnx(m)


def test_every_unsupported_node_is_listed_at_once():
    nodes = [helper.make_node("Erf", ["x"], ["a"], name="first"),
             helper.make_node("Relu", ["a"], ["b"], name="fine"),
             helper.make_node("Elu", ["b"], ["c"], name="second"),
             helper.make_node("Erf", ["c"], ["y"], name="third")]
    m = make_model(nodes, [("x", F32, [1, 2])], [("y", F32, None)])
    with pytest.raises(NotImplementedError, match=r"3 nodes use ops") as info:
        rlx_cpu.from_onnx(m)
    msg = str(info.value)
    for part in ("node 'first': op Erf-13", "node 'second': op Elu-22", "node 'third': op Erf-13"):
        assert part in msg, msg
    assert "'fine'" not in msg


def test_unknown_attribute_names_node_op_and_attribute():
    node = helper.make_node("Conv", ["x", "W"], ["y"], name="c", foo=3)
    m = make_model([node], [("x", F32, [1, 1, 4, 4])], [("y", F32, None)],
                   {"W": np.ones((1, 1, 2, 2), np.float32)})
    with pytest.raises(NotImplementedError, match=r"node 'c' \(Conv-22\): attribute 'foo' is not supported"):
        rlx_cpu.from_onnx(m)


@pytest.mark.parametrize("attrs,match", [
    (dict(mode="cubic"), r"attribute mode='cubic' is not supported"),
    (dict(mode="nearest", antialias=1), r"attribute antialias=1"),
    (dict(mode="nearest", coordinate_transformation_mode="tf_crop_and_resize"), r"extrapolation_value"),
    (dict(mode="nearest", exclude_outside=1, coordinate_transformation_mode="pytorch_half_pixel",
          nearest_mode="floor"), r"exclude_outside=1"),
])
def test_resize_refusals(attrs, match):
    x_shape = (1, 1, 4, 4)
    m = one_node_model("Resize", x_shape, attrs, opset=19, extra_inputs=[("roi", None), ("scales", None)],
                       initializers={"roi": np.array([0, 0, -0.5, -0.5, 1, 1, 1.5, 1.5], np.float32),
                                     "scales": np.array([1, 1, 1.7, 1.7], np.float32)})
    with pytest.raises(NotImplementedError, match=match):
        rlx_cpu.from_onnx(m)


def test_resize_options_supported_when_no_fill_is_needed():
    """tf_crop_and_resize inside the input and exclude_outside where every
    neighbour is inside give plain gathers, matching the reference."""
    x = _rng("fill").standard_normal((1, 2, 6, 6)).astype(np.float32)
    m = one_node_model("Resize", x.shape, dict(mode="nearest", coordinate_transformation_mode="tf_crop_and_resize",
                                               extrapolation_value=5.0), opset=19,
                       extra_inputs=[("roi", None), ("scales", None)],
                       initializers={"roi": np.array([0, 0, 0.25, 0.125, 1, 1, 0.75, 0.875], np.float32),
                                     "scales": np.array([1, 1, 1.5, 0.5], np.float32)})
    check_against_reference(m, {"x": x}, exact=True)
    m = one_node_model("Resize", x.shape, dict(mode="nearest", exclude_outside=1), opset=19,
                       extra_inputs=[("", None), ("scales", None)],
                       initializers={"scales": np.array([1, 1, 2, 2], np.float32)})
    check_against_reference(m, {"x": x}, exact=True)


def test_resize_of_channel_axis_is_refused():
    m = one_node_model("Resize", (1, 2, 4, 4), dict(mode="nearest"), opset=13,
                       extra_inputs=[("", None), ("scales", None)],
                       initializers={"scales": np.array([1, 2, 1, 1], np.float32)})
    with pytest.raises(NotImplementedError, match="batch or channel axis"):
        rlx_cpu.from_onnx(m)


def test_conv_transpose_output_shape_with_pads_is_refused():
    m = one_node_model("ConvTranspose", (1, 1, 3, 3), dict(output_shape=[8, 8], pads=[1, 1, 1, 1], strides=[2, 2]),
                       extra_inputs=[("W", None)], initializers={"W": np.ones((1, 1, 3, 3), np.float32)})
    with pytest.raises(NotImplementedError, match=r"output_shape=\[8, 8\].*non-zero pads"):
        rlx_cpu.from_onnx(m)


def test_non_float_input_and_foreign_domain_are_refused():
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2])
    m = make_model([node], [("x", TensorProto.UINT8, [1, 1, 4, 4])], [("y", TensorProto.UINT8, None)])
    with pytest.raises(NotImplementedError, match="graph input 'x' has type UINT8; rlx_cpu computes in float32"):
        rlx_cpu.from_onnx(m)
    node = helper.make_node("Conv", ["x", "W"], ["y"], domain="com.example", name="cx")
    m = make_model([node], [("x", F32, [1, 1, 4, 4]), ("W", F32, [1, 1, 2, 2])], [("y", F32, None)])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(NotImplementedError, match=r"node 'cx': op 'Conv' of domain 'com.example'"):
        rlx_cpu.from_onnx(m)


def test_invalid_models_raise_value_errors():
    m = one_node_model("Conv", (1, 1, 5, 5), dict(kernel_shape=[2, 2]), extra_inputs=[("W", None)],
                       initializers={"W": np.ones((1, 1, 3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"kernel_shape \[2, 2\] does not match W \[1, 1, 3, 3\]"):
        rlx_cpu.from_onnx(m)
    m = one_node_model("Conv", (1, 1, 5, 5), dict(pads=[1, 1], auto_pad="NOTSET"), extra_inputs=[("W", None)],
                       initializers={"W": np.ones((1, 1, 3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"pads must have 4 values"):
        rlx_cpu.from_onnx(m)
    m = one_node_model("MaxPool", (1, 1, 5, 5), dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER", pads=[1, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"auto_pad=SAME_UPPER and explicit pads"):
        rlx_cpu.from_onnx(m)
    node = helper.make_node("Identity", ["nowhere"], ["y"], name="idn")
    m = make_model([node], [("x", F32, [1])], [("y", F32, None)])
    with pytest.raises(ValueError, match=r"node 'idn' \(Identity\): input 0 'nowhere' is not defined"):
        rlx_cpu.from_onnx(m)


def test_graph_errors_name_the_onnx_node():
    m = one_node_model("Conv", (1, 3, 5, 5), {}, extra_inputs=[("W", None)],
                       initializers={"W": np.ones((2, 2, 3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"node 'y' \(Conv-22\): conv2d: channel mismatch"):
        rlx_cpu.from_onnx(m)


def test_outputs_may_alias_inputs_and_each_other():
    nodes = [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("GlobalMaxPool", ["x"], ["z"]),
             helper.make_node("Resize", ["x", "", "s"], ["r"], mode="nearest")]
    m = make_model(nodes, [("x", F32, [1, 2, 3, 3])], [("y", F32, None), ("z", F32, None), ("x", F32, None),
                                                       ("r", F32, None)],
                   {"s": np.ones(4, np.float32)}, opset=13)
    x = _rng("alias").standard_normal((1, 2, 3, 3)).astype(np.float32)
    y, z, x2, r = rlx_cpu.from_onnx(m).run({"x": x})
    np.testing.assert_array_equal(y, x)
    np.testing.assert_array_equal(x2, x)
    np.testing.assert_array_equal(r, x)          # an identity Resize is an alias
    np.testing.assert_array_equal(z, x.max(axis=(2, 3), keepdims=True))


def test_missing_onnx_gives_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(ImportError, match=r"from_onnx needs the 'onnx' package"):
        rlx_cpu.from_onnx(b"")


# ---------------------------------------------------------------------------
# Peers: onnxruntime
# ---------------------------------------------------------------------------

def _ort_run(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.mark.peer
@pytest.mark.parametrize("opset", [9, 11, 13, 17, 22])
def test_peer_small_cnn_against_onnxruntime(opset):
    m = _small_cnn(opset)
    x = _rng("peer-cnn", opset).standard_normal((2, 3, 8, 10)).astype(np.float32)
    want = _ort_run(m, {"x": x})
    got = rlx_cpu.from_onnx(m).run({"x": x})
    for a, b in zip(got, want):
        assert rel_err(a, b) <= 1e-4


@pytest.mark.peer
@pytest.mark.parametrize("op,opset", [("Upsample", 9), ("Resize", 10)])
def test_peer_legacy_non_integer_scales_against_onnxruntime(op, opset):
    """Upsample-9 / Resize-10 have no rounding attributes; ONNX Runtime's
    behaviour is the de-facto definition (the reference only does integers)."""
    rng = _rng("peer-legacy", op)
    x = rng.standard_normal((1, 2, 7, 9)).astype(np.float32)
    choices = [1.5, 2.5, 1.25, 3.0] + ([0.6, 0.5, 0.3] if op == "Resize" else [])
    for _ in range(6):
        scales = np.array([1, 1, *rng.choice(choices, 2)], np.float32)
        m = one_node_model(op, x.shape, dict(mode="nearest"), opset=opset, extra_inputs=[("scales", None)],
                           initializers={"scales": scales})
        np.testing.assert_array_equal(rlx_cpu.from_onnx(m).run({"x": x})[0], _ort_run(m, {"x": x})[0])


@pytest.mark.peer
def test_peer_resize_modes_against_onnxruntime():
    """Scales whose output sizes are whole numbers (so ONNX Runtime's float32
    arithmetic and the reference agree) across every mode."""
    x = _rng("peer-resize").standard_normal((1, 2, 6, 8)).astype(np.float32)
    for ctm in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"):
        for nm in NEAREST_MODES:
            for scales in ([1, 1, 2, 0.5], [1, 1, 1.5, 0.75], [1, 1, 3, 1.25]):
                m = one_node_model("Resize", x.shape, dict(mode="nearest", coordinate_transformation_mode=ctm,
                                                          nearest_mode=nm), opset=19,
                                   extra_inputs=[("", None), ("scales", None)],
                                   initializers={"scales": np.array(scales, np.float32)})
                np.testing.assert_array_equal(rlx_cpu.from_onnx(m).run({"x": x})[0], _ort_run(m, {"x": x})[0],
                                              err_msg=f"{ctm} {nm} {scales}")


@pytest.mark.peer
def test_peer_max_pool_indices_against_onnxruntime():
    x = _rng("peer-mp").standard_normal((2, 3, 9, 8)).astype(np.float32)
    for storage_order in (0, 1):
        m = one_node_model("MaxPool", x.shape, dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
                                                    storage_order=storage_order),
                           outputs=("y", "i"), out_types=[F32, TensorProto.INT64], opset=12)
        got = rlx_cpu.from_onnx(m).run({"x": x})
        want = _ort_run(m, {"x": x})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
