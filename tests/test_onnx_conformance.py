"""ONNX backend node tests as our conformance suite (external truth).

Every case directory under onnx/backend/test/data/node whose name matches
CASE_PATTERNS is one test: the model goes through rlx_cpu.from_onnx, every
test_data_set_* is run, and each output must match ONNX's expected output
with ONNX's own tolerances (rtol 1e-3, atol 1e-7; integer outputs exactly).

A case is
  * out of scope when it runs an op rlx_cpu does not import, or its data is
    not float32 (skipped, the reason says which);
  * unsupported by design when it is listed in UNSUPPORTED with a reason: the
    test then checks that from_onnx refuses it with NotImplementedError and
    skips with that reason (it fails if the case starts working, so the list
    stays honest);
  * otherwise in scope, and it must pass.

A table of every case (status, max abs / rel error) is printed at the end of
the session.  onnx <= 1.22 ships the data (the `test` extra pins 1.22.0).
"""
import fnmatch
import os
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install onnx==1.22.0)")
from onnx import numpy_helper  # noqa: E402

import rlx_cpu  # noqa: E402
from rlx_cpu.registry import ONNX_OPS  # noqa: E402

CASE_PATTERNS = ("test_conv*", "test_basic_conv*", "test_convtranspose*", "test_maxpool*", "test_averagepool*",
                 "test_globalaveragepool*", "test_globalmaxpool*", "test_resize_*nearest*",
                 "test_resize_*linear*", "test_resize_tf_crop_and_resize*",
                 "test_upsample_nearest", "test_col2im*",
                 # the ops around the convolutions in whole CNNs
                 "test_relu*", "test_leakyrelu*", "test_clip*", "test_sigmoid*", "test_hardsigmoid*",
                 "test_hardswish*", "test_tanh*", "test_add*", "test_sub*", "test_mul*", "test_div*",
                 "test_batchnorm*", "test_concat*", "test_split*", "test_slice*", "test_transpose*",
                 "test_reshape*", "test_flatten*", "test_squeeze*", "test_unsqueeze*", "test_constant_pad*",
                 "test_edge_pad*", "test_reflect_pad*", "test_wrap_pad*", "test_gemm*", "test_matmul*",
                 "test_reduce_mean*", "test_softmax*", "test_dropout*", "test_identity*", "test_shape*",
                 "test_gather_*", "test_cast_*", "test_constantofshape*")
RTOL, ATOL = 1e-3, 1e-7

# Cases in scope that rlx_cpu refuses on purpose: case -> reason.
_COMPILE_TIME_OUTPUT = ("Shape of a static tensor is folded to a compile-time int64 array at import; "
                        "a plan computes float32 tensors, so it cannot return one as a graph output")
_EMPTY = "empty tensors (a zero-size dim) are not supported"
_TRAINING = "training-mode BatchNormalization (batch statistics, running-stat outputs); rlx_cpu imports inference graphs"
_ANTIALIAS = "antialiased linear resize is not implemented"
UNSUPPORTED = {
    "test_resize_downsample_scales_linear_antialias": _ANTIALIAS,
    "test_resize_downsample_sizes_linear_antialias": _ANTIALIAS,
    'test_shape': _COMPILE_TIME_OUTPUT,
    'test_shape_clip_end': _COMPILE_TIME_OUTPUT,
    'test_shape_clip_start': _COMPILE_TIME_OUTPUT,
    'test_shape_end_1': _COMPILE_TIME_OUTPUT,
    'test_shape_end_negative_1': _COMPILE_TIME_OUTPUT,
    'test_shape_example': _COMPILE_TIME_OUTPUT,
    'test_shape_start_1': _COMPILE_TIME_OUTPUT,
    'test_shape_start_1_end_2': _COMPILE_TIME_OUTPUT,
    'test_shape_start_1_end_negative_1': _COMPILE_TIME_OUTPUT,
    'test_shape_start_greater_than_end': _COMPILE_TIME_OUTPUT,
    'test_shape_start_negative_1': _COMPILE_TIME_OUTPUT,
    'test_split_zero_size_splits_opset13': _EMPTY,
    'test_split_zero_size_splits_opset18': _EMPTY,
    'test_reshape_allowzero_reordered': _EMPTY,
    'test_slice_start_out_of_bounds': _EMPTY,
    'test_batchnorm_epsilon_training_mode': _TRAINING,
    'test_batchnorm_example_training_mode': _TRAINING,
}

DATA_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def _case_names():
    if not DATA_DIR.is_dir():
        return []
    return sorted(n for n in os.listdir(DATA_DIR)
                  if any(fnmatch.fnmatch(n, p) for p in CASE_PATTERNS) and (DATA_DIR / n / "model.onnx").exists())


CASES = _case_names()


def _load_pb(path):
    t = onnx.TensorProto()
    t.ParseFromString(path.read_bytes())
    return t.name, numpy_helper.to_array(t)


def _data_sets(case_dir, model):
    """[(inputs {name: array}, outputs [array])] for every test_data_set_*."""
    in_names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    out_names = [o.name for o in model.graph.output]
    sets = []
    for d in sorted(case_dir.glob("test_data_set_*")):
        ins = [_load_pb(p) for p in sorted(d.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        outs = [_load_pb(p) for p in sorted(d.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        feeds = {(name or in_names[i]): arr for i, (name, arr) in enumerate(ins)}
        sets.append((feeds, [arr for _, arr in outs], out_names))
    return sets


def out_of_scope_reason(model):
    """Why a case is outside the conformance scope, or None."""
    ops = sorted({n.op_type for n in model.graph.node if n.op_type not in ("Identity", "Constant")})
    foreign = [op for op in ops if op not in ONNX_OPS]
    if foreign:
        return f"op {', '.join(foreign)} is not imported by rlx_cpu"
    f32 = onnx.TensorProto.FLOAT
    data_inputs = set()
    for n in model.graph.node:
        params = (ONNX_OPS[n.op_type].parameter_inputs if n.op_type in ONNX_OPS else ())
        data_inputs.update(name for i, name in enumerate(n.input) if name and i not in params)
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.name in data_inputs or vi in model.graph.output:
            et = vi.type.tensor_type.elem_type
            if et != f32 and not (vi in model.graph.output and et == onnx.TensorProto.INT64):
                return f"{onnx.TensorProto.DataType.Name(et).lower()} data ({vi.name!r})"
    return None


def parameter_graph_inputs(model):
    """Graph inputs that feed compile-time parameter slots (Resize scales and
    sizes, Col2Im image_shape...): from_onnx must get them as constants."""
    graph_inputs = {i.name for i in model.graph.input}
    names = set()
    for n in model.graph.node:
        for i in (ONNX_OPS[n.op_type].parameter_inputs if n.op_type in ONNX_OPS else ()):
            if i < len(n.input) and n.input[i] in graph_inputs:
                names.add(n.input[i])
    return names


# ---------------------------------------------------------------------------
# Session report
# ---------------------------------------------------------------------------

class _Report:
    """Collects one row per case; prints the table at the end of the session."""

    def __init__(self):
        self.rows = {}

    def add(self, case, status, detail="", abs_err=None, rel_err=None):
        self.rows[case] = (status, detail, abs_err, rel_err)

    def pytest_terminal_summary(self, terminalreporter):
        if not self.rows:
            return
        tr = terminalreporter
        tr.section("ONNX backend conformance (rlx_cpu.from_onnx vs onnx/backend/test/data/node)")
        groups = {}
        for case, (status, _, abs_err, rel_err) in self.rows.items():
            g = groups.setdefault(_op_group(case), {"passed": 0, "unsupported": 0, "out of scope": 0,
                                                     "failed": 0, "abs": 0.0, "rel": 0.0})
            g[status] += 1
            if abs_err is not None:
                g["abs"] = max(g["abs"], abs_err)
                g["rel"] = max(g["rel"], rel_err)
        tr.write_line(f"{'op':<20}{'passed':>8}{'unsupported':>13}{'failed':>8}{'out of scope':>14}"
                      f"{'max abs err':>14}{'max rel err':>14}")
        tr.write_line("(rel err = max |got - want| / max |want| per output; integer outputs compared exactly)")
        for op in sorted(groups):
            g = groups[op]
            tr.write_line(f"{op:<20}{g['passed']:>8}{g['unsupported']:>13}{g['failed']:>8}{g['out of scope']:>14}"
                          f"{g['abs']:>14.3e}{g['rel']:>14.3e}")
        for status in ("failed", "unsupported", "out of scope"):
            rows = [(c, d) for c, (s, d, _, _) in sorted(self.rows.items()) if s == status]
            if rows:
                tr.write_line(f"{status} cases:")
                for case, detail in rows:
                    tr.write_line(f"  {case}: {detail}")


def _op_group(case):
    for prefix, op in (("test_basic_conv", "Conv"), ("test_convtranspose", "ConvTranspose"),
                       ("test_convinteger", "ConvInteger"), ("test_conv", "Conv"), ("test_maxpool", "MaxPool"),
                       ("test_averagepool", "AveragePool"), ("test_globalaveragepool", "GlobalAveragePool"),
                       ("test_globalmaxpool", "GlobalMaxPool"), ("test_resize", "Resize"),
                       ("test_upsample", "Upsample"), ("test_col2im", "Col2Im"),
                       ("test_relu", "Relu"), ("test_leakyrelu", "LeakyRelu"), ("test_clip", "Clip"),
                       ("test_sigmoid", "Sigmoid"), ("test_hardsigmoid", "HardSigmoid"),
                       ("test_hardswish", "HardSwish"), ("test_tanh", "Tanh"), ("test_add", "Add"),
                       ("test_sub", "Sub"), ("test_mul", "Mul"), ("test_div", "Div"),
                       ("test_batchnorm", "BatchNormalization"), ("test_concat", "Concat"),
                       ("test_split", "Split"), ("test_slice", "Slice"), ("test_transpose", "Transpose"),
                       ("test_reshape", "Reshape"), ("test_flatten", "Flatten"), ("test_squeeze", "Squeeze"),
                       ("test_unsqueeze", "Unsqueeze"), ("test_constant_pad", "Pad"), ("test_edge_pad", "Pad"),
                       ("test_reflect_pad", "Pad"), ("test_wrap_pad", "Pad"), ("test_gemm", "Gemm"),
                       ("test_matmul", "MatMul"), ("test_reduce_mean", "ReduceMean"),
                       ("test_softmax", "Softmax"), ("test_dropout", "Dropout"), ("test_identity", "Identity"),
                       ("test_shape", "Shape"), ("test_gather", "Gather"), ("test_cast", "Cast"),
                       ("test_constantofshape", "ConstantOfShape")):
        if case.startswith(prefix):
            return op
    return "other"


REPORT = _Report()


@pytest.fixture(scope="module", autouse=True)
def _conformance_report(request):
    pm = request.config.pluginmanager
    if not pm.is_registered(REPORT):
        pm.register(REPORT, "rlx-onnx-conformance-report")
    yield


# ---------------------------------------------------------------------------
# The cases
# ---------------------------------------------------------------------------

def test_data_is_present():
    """The suite must not silently shrink to nothing (onnx >= 1.23 ships no data)."""
    assert DATA_DIR.is_dir(), f"{DATA_DIR} is missing: install onnx==1.22.0 (the `test` extra pins it)"
    assert len(CASES) >= 350, f"only {len(CASES)} conformance cases found under {DATA_DIR}"


def test_unsupported_list_names_real_cases():
    assert set(UNSUPPORTED) <= set(CASES), sorted(set(UNSUPPORTED) - set(CASES))


@pytest.mark.parametrize("case", CASES)
def test_backend_node_case(case):
    case_dir = DATA_DIR / case
    model = onnx.load(str(case_dir / "model.onnx"))
    reason = out_of_scope_reason(model)
    if reason is not None:
        REPORT.add(case, "out of scope", reason)
        pytest.skip(f"out of scope: {reason}")
    sets = _data_sets(case_dir, model)
    assert sets, f"{case}: no test_data_set_*"
    params = parameter_graph_inputs(model)
    if case in UNSUPPORTED:
        _expect_refused(model, sets, params)
        REPORT.add(case, "unsupported", UNSUPPORTED[case])
        pytest.skip(f"unsupported: {UNSUPPORTED[case]}")
    try:
        worst_abs, worst_rel = _run_case(case, model, sets, params)
    except BaseException as e:
        if not isinstance(e, pytest.skip.Exception):
            REPORT.add(case, "failed", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        raise
    REPORT.add(case, "passed", "", worst_abs, worst_rel)


def _expect_refused(model, sets, params):
    """The check of a case listed in UNSUPPORTED: from_onnx must refuse it
    with NotImplementedError (and fails once the case starts working)."""
    feeds = sets[0][0]
    with pytest.raises(NotImplementedError):
        rlx_cpu.from_onnx(model, constants={k: feeds[k] for k in params})


# These two tests run the UNSUPPORTED branch's check on a case we know either way.
_KNOWN_GOOD = "test_basic_conv_with_padding"


def _known_case():
    case_dir = DATA_DIR / _KNOWN_GOOD
    model = onnx.load(str(case_dir / "model.onnx"))
    return model, _data_sets(case_dir, model), parameter_graph_inputs(model)


def test_unsupported_check_fails_for_a_working_case():
    model, sets, params = _known_case()
    with pytest.raises(pytest.fail.Exception, match="DID NOT RAISE"):
        _expect_refused(model, sets, params)


def test_unsupported_check_passes_for_a_refused_case():
    model, sets, params = _known_case()
    (conv,) = [n for n in model.graph.node if n.op_type == "Conv"]
    pads = next(a for a in conv.attribute if a.name == "pads")
    pads.ints[0] = -1                   # negative pads: valid ONNX that from_onnx refuses by design
    with pytest.raises(NotImplementedError, match="negative pads"):
        rlx_cpu.from_onnx(model)
    _expect_refused(model, sets, params)


def _run_case(case, model, sets, params):
    worst_abs = worst_rel = 0.0
    plan = None
    for feeds, wants, out_names in sets:
        constants = {k: feeds[k] for k in params}
        if plan is None:
            plan = rlx_cpu.from_onnx(model, constants=constants)
        gots = plan.run({k: v for k, v in feeds.items() if k not in params})
        assert len(gots) == len(wants)
        for name, got, want in zip(out_names, gots, wants):
            assert got.shape == want.shape, f"{case} output {name!r}: shape {got.shape} != {want.shape}"
            assert got.dtype == want.dtype, f"{case} output {name!r}: dtype {got.dtype} != {want.dtype}"
            if want.dtype.kind in "iu":
                np.testing.assert_array_equal(got, want, err_msg=f"{case} output {name!r}")
                continue
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            abs_err = float(diff.max(initial=0.0))
            rel_err = abs_err / max(float(np.abs(want).max(initial=0.0)), 1e-30)
            worst_abs, worst_rel = max(worst_abs, abs_err), max(worst_rel, rel_err)
            np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL, err_msg=f"{case} output {name!r}")
    return worst_abs, worst_rel
