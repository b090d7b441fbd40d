"""Import ONNX models into a :class:`~rlx_cpu.Graph` and compile them.

    plan = rlx_cpu.from_onnx("model.onnx")
    (y,) = plan.run({"input": x})          # keyed by the ONNX input names

Only ops of the convolution family are supported (see ``rlx_cpu.registry.ONNX_OPS``); every
node is converted into graph ops with the same semantics, never into an
approximation.  An op, attribute or attribute value we do not implement
raises ``NotImplementedError`` naming the node, the op (with the version the
model's opset resolves it to) and the attribute.

Values fall into two kinds while importing:

* *runtime* tensors: graph inputs and op results, float32, static shapes;
* *compile-time* arrays: initializers, ``Constant`` nodes and graph inputs
  fixed by ``from_onnx(..., constants={...})``.  Float ones used as data
  (weights, biases) become graph constants; shape parameters (Resize scales
  and sizes, Col2Im image_shape) must be compile-time arrays, because every
  shape in a plan is static.

An initializer also listed among the graph inputs (old exporters list them
all) is a default that ONNX allows to be overridden; we treat it as a
constant, so it is not a plan input.

The ``onnx`` package is imported lazily: rlx_cpu does not depend on it.
"""
import math
import os
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .ir import Graph, Node
from .registry import ONNX_OPS, onnx_op


def _onnx():
    try:
        import onnx
    except ImportError:
        raise ImportError("rlx_cpu.from_onnx needs the 'onnx' package (pip install onnx); "
                          "the rest of rlx_cpu does not") from None
    return onnx


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def from_onnx(model, *, constants=None, input_shapes=None, conv_algorithm="auto", num_threads=None,
              reuse_arena=True):
    """Compile an ONNX model into a :class:`~rlx_cpu.Plan`.

    model: a path, the serialized bytes, or an ``onnx.ModelProto``.
    constants: {graph input name: array} fixed at compile time (they stop
        being plan inputs).  Needed for inputs that determine shapes, e.g. a
        Resize ``scales`` fed as a graph input; allowed for any input.
    input_shapes: {graph input name: shape} for inputs declared with dynamic
        (symbolic or unknown) dims; plans have static shapes.
    conv_algorithm, num_threads, reuse_arena: as :func:`rlx_cpu.compile`.

    ``plan.run`` takes the ONNX input names and returns the outputs in the
    order of the model's graph outputs (float32; MaxPool ``Indices`` int64).
    :func:`import_onnx` gives the graph and the output names without compiling.
    """
    from .compiler import compile as _compile

    imported = import_onnx(model, constants=constants, input_shapes=input_shapes)
    return _compile(imported.graph, conv_algorithm=conv_algorithm, num_threads=num_threads,
                    reuse_arena=reuse_arena)


@dataclass
class ImportedModel:
    """A converted model before compilation."""
    graph: Graph
    input_names: list         # the plan's inputs (graph inputs that are neither initializers nor constants)
    output_names: list
    output_dtypes: list       # numpy dtype per output (float32, int64 for MaxPool Indices)
    opset: int                # the default-domain opset version


def import_onnx(model, *, constants=None, input_shapes=None):
    """Convert an ONNX model into an :class:`ImportedModel` (graph not compiled)."""
    proto = load_model(model)
    return _Importer(proto, constants or {}, input_shapes or {}).run()


def load_model(model):
    """A ModelProto from a path, bytes or a ModelProto."""
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"from_onnx: model must be a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


# ---------------------------------------------------------------------------
# The importer
# ---------------------------------------------------------------------------

# Attribute values in onnx.helper's decoded form; bytes strings become str.
def _attr_value(attr):
    onnx = _onnx()
    v = onnx.helper.get_attribute_value(attr)
    if isinstance(v, bytes):
        return v.decode("utf-8")
    if isinstance(v, list) and v and isinstance(v[0], bytes):
        return [s.decode("utf-8") for s in v]
    return v


class NodeContext:
    """What a converter sees of one ONNX node: its inputs, attributes and
    version, plus helpers that raise errors naming the node and op."""

    def __init__(self, importer, node, version):
        self.imp = importer
        self.node = node
        self.version = version
        self.op = node.op_type
        label = node.name or (node.output[0] if node.output else "?")
        self.where = f"node {label!r} ({node.op_type}-{version})"
        self.attrs = {a.name: a for a in node.attribute}

    @property
    def graph(self):
        return self.imp.graph

    def out_name(self, i=0):
        return self.node.output[i]

    # -- attributes ----------------------------------------------------------
    def check_attrs(self, allowed):
        """Every attribute of the node must be one the converter handles."""
        for name in self.attrs:
            if name not in allowed:
                raise NotImplementedError(
                    f"{self.where}: attribute {name!r} is not supported "
                    f"(supported for {self.op}-{self.version}: {sorted(allowed)})")

    def attr(self, name, default=None):
        a = self.attrs.get(name)
        return default if a is None else _attr_value(a)

    def ints(self, name, n, default):
        """An int-list attribute of length n (or the default)."""
        v = self.attr(name)
        if v is None:
            return default
        v = tuple(int(i) for i in v)
        if len(v) != n:
            raise ValueError(f"{self.where}: attribute {name!r} must have {n} values, got {list(v)}")
        return v

    def unsupported(self, attr, value, why=""):
        raise NotImplementedError(
            f"{self.where}: attribute {attr}={value!r} is not supported" + (f" ({why})" if why else ""))

    # -- inputs ----------------------------------------------------------------
    def n_inputs(self):
        return len(self.node.input)

    def has_input(self, i):
        return i < len(self.node.input) and self.node.input[i] != ""

    def tensor(self, i, arg):
        """Input i as a runtime graph node (compile-time arrays become constants)."""
        if not self.has_input(i):
            raise ValueError(f"{self.where}: input {i} ({arg}) is required")
        return self.imp.as_node(self.node.input[i], self.where, arg)

    def optional_tensor(self, i, arg):
        return self.tensor(i, arg) if self.has_input(i) else None

    def const(self, i, arg):
        """Input i as a compile-time numpy array (None when absent)."""
        if not self.has_input(i):
            return None
        name = self.node.input[i]
        v = self.imp.values[name]
        if isinstance(v, Node):
            raise NotImplementedError(
                f"{self.where}: input {i} ({arg}) {name!r} must be known when the model is compiled "
                f"(an initializer, a Constant, or from_onnx(constants={{{name!r}: ...}})) because it "
                f"determines a shape; it is a runtime value here")
        return v


class _Importer:
    def __init__(self, model, constants, input_shapes):
        self.model = model
        self.constants = dict(constants)
        self.input_shapes = dict(input_shapes)
        self.graph = Graph()
        self.values = {}          # ONNX value name -> Node (runtime) or np.ndarray (compile time)
        self._const_nodes = {}    # value name -> graph constant made from a compile-time array
        self.opsets = {}

    # -- values -----------------------------------------------------------------
    def as_node(self, name, where, arg):
        v = self.values.get(name)
        if v is None:
            raise ValueError(f"{where}: input {arg} {name!r} is not defined by any earlier node, "
                             "initializer or graph input")
        if isinstance(v, Node):
            return v
        node = self._const_nodes.get(name)
        if node is None:
            if v.dtype.kind != "f":
                raise NotImplementedError(
                    f"{where}: input {arg} {name!r} is a {v.dtype} tensor; rlx_cpu computes in float32 only")
            if v.dtype != np.float32:
                raise NotImplementedError(
                    f"{where}: input {arg} {name!r} is {v.dtype}; only float32 tensors are supported "
                    "(a cast would change the results)")
            node = self._const_nodes[name] = self.graph.constant(v, name=self._fresh(name))
        return node

    def _fresh(self, name, suffixes=()):
        """`name`, or name.1, name.2 ... if the graph already has it (or
        name + any of the suffixes, for ops that add derived nodes)."""
        base, i = name, 0
        while any(n in self.graph._names for n in (name, *(name + sfx for sfx in suffixes))):
            i += 1
            name = f"{base}.{i}"
        return name

    def set_output(self, name, value):
        if not name:
            return
        if name in self.values:
            raise ValueError(f"from_onnx: value {name!r} is defined twice (ONNX graphs are SSA)")
        self.values[name] = value

    # -- driver ----------------------------------------------------------------
    def run(self):
        onnx = _onnx()
        m = self.model
        g = m.graph
        self._resolve_opsets()
        if self.opsets.get("", None) is None:
            raise ValueError("from_onnx: the model imports no default-domain (ai.onnx) opset")

        init_names = set()
        for t in g.initializer:
            self.values[t.name] = onnx.numpy_helper.to_array(t)
            init_names.add(t.name)
        for t in g.sparse_initializer:
            raise NotImplementedError(f"from_onnx: sparse initializer {t.values.name!r} is not supported")

        known = {i.name for i in g.input}
        for name in self.constants:
            if name not in known:
                raise ValueError(f"from_onnx: constants names {name!r}, which is not a graph input "
                                 f"(inputs: {sorted(known - init_names)})")
        for name in self.input_shapes:
            if name not in known or name in init_names or name in self.constants:
                raise ValueError(f"from_onnx: input_shapes names {name!r}, which is not a runtime graph input")

        input_names = []
        for vi in g.input:
            if vi.name in init_names:
                continue            # a default value: constant (see module docstring)
            if vi.name in self.constants:
                self.values[vi.name] = self._fixed_input(vi)
                continue
            shape = self._input_shape(vi)
            self.values[vi.name] = self.graph.input(vi.name, shape)
            input_names.append(vi.name)

        for node in g.node:
            self._convert(node)

        outs, names, dtypes = [], [], []
        for vi in g.output:
            v = self.values.get(vi.name)
            if v is None:
                raise ValueError(f"from_onnx: graph output {vi.name!r} is produced by no node")
            node = self.as_node(vi.name, "graph output", vi.name) if not isinstance(v, Node) else v
            self._check_declared_shape(vi, node.shape)
            outs.append(node)
            names.append(vi.name)
            dtypes.append(self._output_dtype(vi, node))
        if not outs:
            raise ValueError("from_onnx: the model has no outputs")
        self.graph.output(*outs)
        return ImportedModel(self.graph, input_names, names, dtypes, self.opsets[""])

    def _resolve_opsets(self):
        for op in self.model.opset_import:
            domain = "" if op.domain in ("", "ai.onnx") else op.domain
            self.opsets[domain] = int(op.version)

    def _fixed_input(self, vi):
        arr = np.asarray(self.constants[vi.name])
        declared = _elem_dtype(vi)
        if declared is not None and arr.dtype != declared:
            if arr.dtype.kind != np.dtype(declared).kind and not (arr.dtype.kind in "iu" and declared.kind in "iu"):
                raise TypeError(f"from_onnx: constants[{vi.name!r}] has dtype {arr.dtype}, the model "
                                f"declares {declared}")
            arr = arr.astype(declared)
        dims = _declared_dims(vi)
        if dims is not None and (len(dims) != arr.ndim or any(
                d is not None and d != s for d, s in zip(dims, arr.shape))):
            raise ValueError(f"from_onnx: constants[{vi.name!r}] has shape {list(arr.shape)}, the model "
                             f"declares {[d if d is not None else '?' for d in dims]}")
        return arr

    def _input_shape(self, vi):
        declared = _elem_dtype(vi)
        if declared is None or declared != np.float32:
            raise NotImplementedError(
                f"from_onnx: graph input {vi.name!r} has type {_type_name(vi)}; rlx_cpu computes in float32 "
                f"only (a non-float input that sets a shape can be fixed with constants={{{vi.name!r}: ...}})")
        dims = _declared_dims(vi)
        if vi.name in self.input_shapes:
            shape = tuple(int(d) for d in self.input_shapes[vi.name])
            if dims is not None and (len(dims) != len(shape) or any(
                    d is not None and d != s for d, s in zip(dims, shape))):
                raise ValueError(f"from_onnx: input_shapes[{vi.name!r}] = {list(shape)} contradicts the "
                                 f"declared shape {_dims_str(vi)}")
            return shape
        if dims is None or any(d is None for d in dims):
            raise ValueError(
                f"from_onnx: graph input {vi.name!r} has a dynamic shape {_dims_str(vi)}; plans have static "
                f"shapes: pass input_shapes={{{vi.name!r}: (...)}}")
        return tuple(dims)

    def _check_declared_shape(self, vi, shape):
        dims = _declared_dims(vi)
        if dims is None:
            return
        if len(dims) != len(shape) or any(d is not None and d != s for d, s in zip(dims, shape)):
            raise ValueError(f"from_onnx: graph output {vi.name!r} is declared as {_dims_str(vi)} but the "
                             f"imported graph computes {list(shape)}")

    def _output_dtype(self, vi, node):
        declared = _elem_dtype(vi)
        produced = np.dtype(node.dtype)
        if declared is not None and declared != produced:
            raise NotImplementedError(f"from_onnx: graph output {vi.name!r} is declared {declared}, the op "
                                      f"producing it gives {produced}")
        return produced

    def _convert(self, node):
        onnx = _onnx()
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        label = node.name or (node.output[0] if node.output else "?")
        if domain != "":
            raise NotImplementedError(f"node {label!r}: op {node.op_type!r} of domain {node.domain!r} is not "
                                      "supported (only the default ONNX domain)")
        opset = self.opsets[""]
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:
            raise NotImplementedError(f"node {label!r}: op {node.op_type!r} is not an ONNX op at opset {opset}") \
                from None
        version = schema.since_version
        entry = ONNX_OPS.get(node.op_type)
        if entry is None:
            raise NotImplementedError(
                f"node {label!r}: op {node.op_type}-{version} is not supported by rlx_cpu "
                f"(supported: {', '.join(sorted(ONNX_OPS))})")
        lo, hi = entry.versions
        if version < lo or (hi is not None and version > hi):
            raise NotImplementedError(f"node {label!r}: {node.op_type}-{version} (opset {opset}) is not "
                                      f"supported; versions {lo}..{hi or 'latest'} are")
        for i, name in enumerate(node.input):
            if name and name not in self.values:
                raise ValueError(f"node {label!r} ({node.op_type}): input {i} {name!r} is not defined by any "
                                 "earlier node, initializer or graph input")
        nc = NodeContext(self, node, version)
        try:
            entry.convert(nc)
        except (ValueError, TypeError) as e:
            # Graph-method errors name the graph op; say which ONNX node it was.
            if str(e).startswith(nc.where):
                raise
            raise type(e)(f"{nc.where}: {e}") from e


# -- small helpers about ValueInfoProto ----------------------------------------

def _elem_dtype(vi):
    onnx = _onnx()
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or tt.elem_type == 0:
        return None
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    except Exception:
        return None


def _type_name(vi):
    onnx = _onnx()
    if not vi.type.HasField("tensor_type"):
        return "non-tensor"
    return onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type)


def _declared_dims(vi):
    """Declared dims (None for a symbolic/unknown dim), or None if no shape."""
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]


def _dims_str(vi):
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return "(no shape)"
    parts = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            parts.append(str(d.dim_value))
        elif d.HasField("dim_param"):
            parts.append(repr(d.dim_param))
        else:
            parts.append("?")
    return "[" + ", ".join(parts) + "]"


# ---------------------------------------------------------------------------
# Shared attribute helpers for windowed ops (conv, conv-transpose, pools)
# ---------------------------------------------------------------------------

_AUTO_PAD = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


def _window_padding(nc, nsp, allow_negative=False):
    """ONNX auto_pad / pads -> the padding argument of the graph methods:
    'valid', 'SAME_UPPER', 'SAME_LOWER' or ((b, e), ...) pairs."""
    auto_pad = nc.attr("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PAD:
        raise ValueError(f"{nc.where}: attribute auto_pad must be one of {list(_AUTO_PAD)}, got {auto_pad!r}")
    pads = nc.attr("pads")
    if pads is not None:
        pads = tuple(int(p) for p in pads)
        if len(pads) != 2 * nsp:
            raise ValueError(f"{nc.where}: attribute pads must have {2 * nsp} values (begins then ends), "
                             f"got {list(pads)}")
        if any(p < 0 for p in pads) and not allow_negative:
            nc.unsupported("pads", list(pads), "negative pads")
    if auto_pad != "NOTSET":
        if pads is not None and any(pads):
            raise ValueError(f"{nc.where}: auto_pad={auto_pad} and explicit pads {list(pads)} cannot be used together")
        return "valid" if auto_pad == "VALID" else auto_pad
    if pads is None:
        pads = (0,) * (2 * nsp)
    return tuple((pads[i], pads[nsp + i]) for i in range(nsp))


def _spatial_rank(nc, x, min_rank=3, max_rank=5):
    r = len(x.shape)
    if not min_rank <= r <= max_rank:
        raise NotImplementedError(f"{nc.where}: input of rank {r} ({list(x.shape)}) is not supported; "
                                  f"{min_rank - 2}..{max_rank - 2} spatial dims are")
    return r - 2


def _graph_method(nc, name):
    fn = getattr(nc.graph, name, None)
    if fn is None:
        raise NotImplementedError(f"{nc.where}: this build of rlx_cpu has no graph op {name!r}")
    return fn


# ---------------------------------------------------------------------------
# Converters: op_type -> function(NodeContext); version-dependent attributes
# ---------------------------------------------------------------------------

# Identity and Constant are plumbing of the importer itself (an alias, a
# compile-time array), not an op family: they register here.

@onnx_op("Identity", versions=(1, None))
def _identity(nc):
    nc.check_attrs(())
    if nc.n_inputs() != 1:
        raise ValueError(f"{nc.where}: expects 1 input, got {nc.n_inputs()}")
    # An alias: runtime node or compile-time array alike.
    nc.imp.set_output(nc.out_name(), nc.imp.values[nc.node.input[0]])


@onnx_op("Constant", versions=(1, None))
def _constant(nc):
    onnx = _onnx()
    if len(nc.attrs) != 1:
        raise ValueError(f"{nc.where}: exactly one value attribute is required, got {sorted(nc.attrs)}")
    (name, a), = nc.attrs.items()
    if name == "value":
        arr = onnx.numpy_helper.to_array(a.t)
    elif name == "value_float":
        arr = np.array(a.f, np.float32)
    elif name == "value_floats":
        arr = np.array(list(a.floats), np.float32)
    elif name == "value_int":
        arr = np.array(a.i, np.int64)
    elif name == "value_ints":
        arr = np.array(list(a.ints), np.int64)
    else:
        raise NotImplementedError(f"{nc.where}: attribute {name!r} is not supported "
                                  "(value, value_float(s), value_int(s) are)")
    nc.imp.set_output(nc.out_name(), arr)


def _conv(nc):
    nc.check_attrs(("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"))
    x = nc.tensor(0, "X")
    w = nc.tensor(1, "W")
    b = nc.optional_tensor(2, "B")
    nsp = _spatial_rank(nc, x)
    if len(w.shape) != nsp + 2:
        raise ValueError(f"{nc.where}: W must have rank {nsp + 2}, got {list(w.shape)} for X {list(x.shape)}")
    kernel = nc.ints("kernel_shape", nsp, tuple(w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ValueError(f"{nc.where}: kernel_shape {list(kernel)} does not match W {list(w.shape)}")
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    group = int(nc.attr("group", 1))
    padding = _window_padding(nc, nsp)
    method = _graph_method(nc, f"conv{nsp}d")
    y = method(x, w, b, stride=strides, padding=padding, dilation=dilations, groups=group,
               name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _conv_transpose(nc):
    nc.check_attrs(("auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads",
                    "strides"))
    x = nc.tensor(0, "X")
    w = nc.tensor(1, "W")
    b = nc.optional_tensor(2, "B")
    nsp = _spatial_rank(nc, x)
    if len(w.shape) != nsp + 2:
        raise ValueError(f"{nc.where}: W must have rank {nsp + 2}, got {list(w.shape)} for X {list(x.shape)}")
    kernel = nc.ints("kernel_shape", nsp, tuple(w.shape[2:]))
    if kernel != tuple(w.shape[2:]):
        raise ValueError(f"{nc.where}: kernel_shape {list(kernel)} does not match W {list(w.shape)}")
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    output_padding = nc.ints("output_padding", nsp, (0,) * nsp)
    group = int(nc.attr("group", 1))
    padding = _window_padding(nc, nsp)
    output_shape = nc.attr("output_shape")
    if output_shape is not None:
        output_shape = tuple(int(v) for v in output_shape)
        if not isinstance(padding, str) and any(p for pair in padding for p in pair):
            # The spec derives the pads from output_shape (ignoring pads); the
            # reference implementation crops with the given pads instead.
            nc.unsupported("output_shape", list(output_shape),
                           "together with non-zero pads: ONNX's spec and reference implementation disagree")
        if not isinstance(padding, str):
            padding = 0
    method = _graph_method(nc, f"conv_transpose{nsp}d")
    y = method(x, w, b, stride=strides, padding=padding, output_padding=output_padding, groups=group,
               dilation=dilations, output_shape=output_shape, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _pool_common(nc, nsp):
    kernel = nc.attr("kernel_shape")
    if kernel is None:
        raise ValueError(f"{nc.where}: attribute kernel_shape is required")
    kernel = nc.ints("kernel_shape", nsp, None)
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    ceil_mode = int(nc.attr("ceil_mode", 0))
    if ceil_mode not in (0, 1):
        raise ValueError(f"{nc.where}: attribute ceil_mode must be 0 or 1, got {ceil_mode}")
    padding = _window_padding(nc, nsp)
    if isinstance(padding, str):
        auto_pad, padding = ("VALID" if padding == "valid" else padding), 0
    else:
        auto_pad = "NOTSET"
    return kernel, strides, dilations, bool(ceil_mode), padding, auto_pad


def _max_pool(nc):
    allowed = ["auto_pad", "kernel_shape", "pads", "strides"]
    if nc.version >= 8:
        allowed.append("storage_order")
    if nc.version >= 10:
        allowed += ["ceil_mode", "dilations"]
    nc.check_attrs(allowed)
    x = nc.tensor(0, "X")
    nsp = _spatial_rank(nc, x)
    kernel, strides, dilations, ceil_mode, padding, auto_pad = _pool_common(nc, nsp)
    want_indices = len(nc.node.output) > 1 and nc.node.output[1] != ""
    storage_order = int(nc.attr("storage_order", 0))
    if storage_order not in (0, 1):
        raise ValueError(f"{nc.where}: attribute storage_order must be 0 or 1, got {storage_order}")
    layout = "onnx" if storage_order == 0 else "onnx_colmajor"
    name = nc.imp._fresh(nc.out_name(), suffixes=(".indices",))
    res = nc.graph.max_pool(x, kernel, strides, padding, dilations, ceil_mode, return_indices=want_indices,
                            auto_pad=auto_pad, indices_layout=layout, name=name)
    if want_indices:
        y, idx = res
        nc.imp.set_output(nc.out_name(0), y)
        nc.imp.set_output(nc.out_name(1), idx)
    else:
        nc.imp.set_output(nc.out_name(0), res)


def _average_pool(nc):
    allowed = ["auto_pad", "kernel_shape", "pads", "strides"]
    if nc.version >= 7:
        allowed.append("count_include_pad")
    if nc.version >= 10:
        allowed.append("ceil_mode")
    if nc.version >= 19:
        allowed.append("dilations")
    nc.check_attrs(allowed)
    x = nc.tensor(0, "X")
    nsp = _spatial_rank(nc, x)
    kernel, strides, dilations, ceil_mode, padding, auto_pad = _pool_common(nc, nsp)
    include_pad = int(nc.attr("count_include_pad", 0))
    if include_pad not in (0, 1):
        raise ValueError(f"{nc.where}: attribute count_include_pad must be 0 or 1, got {include_pad}")
    y = nc.graph.avg_pool(x, kernel, strides, padding, ceil_mode, bool(include_pad), dilation=dilations,
                          auto_pad=auto_pad, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _global_pool(method):
    def convert(nc):
        nc.check_attrs(())
        x = nc.tensor(0, "X")
        _spatial_rank(nc, x)
        y = getattr(nc.graph, method)(x, name=nc.imp._fresh(nc.out_name()))
        nc.imp.set_output(nc.out_name(), y)
    return convert


def _col2im(nc):
    nc.check_attrs(("dilations", "pads", "strides"))
    x = nc.tensor(0, "input")
    image = nc.const(1, "image_shape")
    block = nc.const(2, "block_shape")
    if image is None or block is None:
        raise ValueError(f"{nc.where}: inputs image_shape and block_shape are required")
    image = tuple(int(v) for v in np.asarray(image).reshape(-1))
    block = tuple(int(v) for v in np.asarray(block).reshape(-1))
    nsp = len(image)
    if len(block) != nsp:
        raise ValueError(f"{nc.where}: image_shape {list(image)} and block_shape {list(block)} must have the "
                         "same length")
    if not 1 <= nsp <= 3:
        raise NotImplementedError(f"{nc.where}: {nsp} spatial dims (image_shape {list(image)}) are not "
                                  "supported; 1..3 are")
    strides = nc.ints("strides", nsp, (1,) * nsp)
    dilations = nc.ints("dilations", nsp, (1,) * nsp)
    pads = nc.ints("pads", 2 * nsp, (0,) * (2 * nsp))
    if any(p < 0 for p in pads):
        nc.unsupported("pads", list(pads), "negative pads")
    pairs = tuple((pads[i], pads[nsp + i]) for i in range(nsp))
    y = nc.graph.col2im_onnx(x, image, block, dilations=dilations, pads=pairs, strides=strides,
                             name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


# ---------------------------------------------------------------------------
# Resize / Upsample (nearest): index tables computed at compile time
# ---------------------------------------------------------------------------

COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                    "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def nearest_source_coords(mode, out_size, scale, in_size, roi=None):
    """Source coordinate of every output index along one axis, as exact
    fractions, by the formulas of ONNX Resize-11+ (as its reference
    implementation applies them).  `scale` is the axis' scale factor (a given
    float32 scale, or a Fraction such as output/input for sizes); roi =
    (start, end) for tf_crop_and_resize.

    Exact arithmetic decides rounding ties as the formulas mean them; float64
    can land an ulp off an integer (the reference then rounds the other way
    in rare half_pixel_symmetric cases, where ONNX Runtime agrees with us)."""
    scale = scale if isinstance(scale, Fraction) else Fraction(float(scale))
    half = Fraction(1, 2)
    out_width = scale * in_size              # not always an integer
    ys = range(out_size)
    if mode == "align_corners":
        if out_width == 1:
            return [Fraction(0)] * out_size
        return [y * (in_size - 1) / (out_width - 1) for y in ys]
    if mode == "asymmetric":
        return [y / scale for y in ys]
    if mode == "tf_crop_and_resize":
        start, end = (v if isinstance(v, Fraction) else Fraction(float(v)) for v in roi)
        if out_width == 1:
            return [(end - start) * (in_size - 1) / 2 + start * (in_size - 1)] * out_size
        return [y * (end - start) * (in_size - 1) / (out_width - 1) + start * (in_size - 1) for y in ys]
    if mode == "pytorch_half_pixel":
        if out_width == 1:
            return [-half] * out_size
        return [(y + half) / scale - half for y in ys]
    if mode == "half_pixel":
        return [(y + half) / scale - half for y in ys]
    if mode == "half_pixel_symmetric":
        offset = Fraction(in_size, 2) * (1 - out_size / out_width)
        return [offset + (y + half) / scale - half for y in ys]
    raise ValueError(f"coordinate_transformation_mode must be one of {COORDINATE_MODES}, got {mode!r}")


def nearest_index_table(in_size, out_size, scale, coordinate_mode="half_pixel",
                        nearest_mode="round_prefer_floor", roi=None, clamp=True):
    """Input index read by every output index along one axis (int64 array).

    -1 marks an output position outside the input, which tf_crop_and_resize
    fills with extrapolation_value; every other mode clamps to [0, in - 1].
    An integer coordinate is used as is; otherwise nearest_mode picks
    floor(x) or floor(x) + 1 (at exactly .5 by the *_prefer_* rule).
    clamp=False returns the raw neighbour index (may lie outside the input)."""
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"nearest_mode must be one of {NEAREST_MODES}, got {nearest_mode!r}")
    half = Fraction(1, 2)
    idx = np.empty(out_size, np.int64)
    for i, x in enumerate(nearest_source_coords(coordinate_mode, out_size, scale, in_size, roi)):
        lo = math.floor(x)
        frac = x - lo
        if frac == 0 or nearest_mode == "floor":
            j = lo
        elif nearest_mode == "ceil":
            j = lo + 1
        elif nearest_mode == "round_prefer_floor":
            j = lo + (frac > half)
        else:
            j = lo + (frac >= half)
        if not clamp:
            pass
        elif coordinate_mode == "tf_crop_and_resize" and (x < 0 or x > in_size - 1):
            j = -1
        else:
            j = min(max(j, 0), in_size - 1)
        idx[i] = j
    return idx


def legacy_nearest_index_table(in_size, out_size, scale):
    """Upsample-7/9 and Resize-10 nearest (no rounding attributes; as ONNX
    Runtime defines them): x = y / scale in float32, floor when the axis is
    upsampled, ceil when it is downsampled, clamped."""
    s = np.float32(scale)
    x = np.arange(out_size, dtype=np.float32) / s
    idx = np.ceil(x) if s < 1 else np.floor(x)
    return np.clip(idx.astype(np.int64), 0, in_size - 1)


def resize_plan(in_shape, *, scales=None, sizes=None, axes=None, keep_aspect_ratio_policy="stretch",
                coordinate_mode="half_pixel", nearest_mode="round_prefer_floor", roi=None, clamp=True):
    """Output shape and per-axis index tables of ONNX Resize-11+ nearest.

    Returns (out_shape, tables): tables[d] is None where axis d is unchanged
    (scale 1 and same size), else the int64 table from nearest_index_table."""
    r = len(in_shape)
    if axes is None:
        axes = list(range(r))
    axes = [int(a) + r if int(a) < 0 else int(a) for a in axes]
    if any(not 0 <= a < r for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axes must be distinct axes of a rank-{r} input, got {axes}")
    if (scales is None) == (sizes is None):
        raise ValueError("exactly one of scales and sizes must be given")
    if roi is not None:
        roi = [Fraction(float(v)) for v in np.asarray(roi).astype(np.float64).reshape(-1)]
        if len(roi) == 2 * r and len(axes) != r:
            full = roi
        elif len(roi) == 2 * len(axes):
            full = [Fraction(0)] * r + [Fraction(1)] * r
            for i, a in enumerate(axes):
                full[a] = roi[i]
                full[r + a] = roi[len(axes) + i]
        else:
            raise ValueError(f"roi must have {2 * len(axes)} values, got {len(roi)}")
        roi = full
    scale_f = [Fraction(1)] * r
    out = list(in_shape)
    if scales is not None:
        scales = [Fraction(float(s)) for s in np.asarray(scales, dtype=np.float32).reshape(-1)]
        if len(scales) != len(axes):
            raise ValueError(f"scales must have {len(axes)} values (one per axis), got {len(scales)}")
        if any(s <= 0 for s in scales):
            raise ValueError(f"scales must be > 0, got {scales}")
        for a, s in zip(axes, scales):
            scale_f[a] = s
            out[a] = math.floor(s * in_shape[a])
    else:
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes):
            raise ValueError(f"sizes must have {len(axes)} values (one per axis), got {len(sizes)}")
        if any(s < 1 for s in sizes):
            raise ValueError(f"sizes must be >= 1, got {sizes}")
        for a, s in zip(axes, sizes):
            scale_f[a] = Fraction(s, in_shape[a])
            out[a] = s
        if keep_aspect_ratio_policy != "stretch":
            picks = [scale_f[a] for a in axes]
            if keep_aspect_ratio_policy == "not_larger":
                common = min(picks)
            elif keep_aspect_ratio_policy == "not_smaller":
                common = max(picks)
            else:
                raise ValueError("keep_aspect_ratio_policy must be 'stretch', 'not_larger' or 'not_smaller', "
                                 f"got {keep_aspect_ratio_policy!r}")
            for a in axes:
                scale_f[a] = common
                out[a] = math.floor(common * in_shape[a] + Fraction(1, 2))   # round half up
    if any(o < 1 for o in out):
        raise ValueError(f"output shape {out} is empty (input {list(in_shape)}, scales {scale_f})")
    tables = [None] * r
    for a in axes:
        axis_roi = None if roi is None else (roi[a], roi[r + a])
        unchanged = scale_f[a] == 1 and out[a] == in_shape[a]
        if unchanged and (coordinate_mode != "tf_crop_and_resize" or (
                axis_roi is not None and axis_roi == (0, 1))):
            continue
        if coordinate_mode == "tf_crop_and_resize" and axis_roi is None:
            raise ValueError("coordinate_transformation_mode 'tf_crop_and_resize' needs roi")
        tables[a] = nearest_index_table(in_shape[a], out[a], scale_f[a], coordinate_mode, nearest_mode, axis_roi,
                                        clamp)
    return tuple(out), tables


def _emit_resize(nc, x, out_shape, tables):
    """Emit a nearest resize from full-rank tables (None = axis unchanged)."""
    tables = [None if t is not None and len(t) == d and np.array_equal(t, np.arange(d)) else t
              for t, d in zip(tables, x.shape)]
    if tables[0] is not None or tables[1] is not None:
        raise NotImplementedError(
            f"{nc.where}: resizing the batch or channel axis (input {list(x.shape)} -> {list(out_shape)}) is not "
            "supported; only spatial axes are")
    if all(t is None for t in tables):
        nc.imp.set_output(nc.out_name(), x)      # identity resize
        return
    sp = [np.arange(s) if t is None else t for s, t in zip(x.shape[2:], tables[2:])]
    y = nc.graph.resize_nearest(x, out_shape[2:], sp, name=nc.imp._fresh(nc.out_name()))
    nc.imp.set_output(nc.out_name(), y)


def _nearest_mode_attr(nc):
    mode = nc.attr("mode", "nearest")
    if mode != "nearest":
        nc.unsupported("mode", mode, "only 'nearest' is implemented")


def _legacy_resize(nc, x, scales):
    """Upsample-7/9 and Resize-10: output floor(in * scale) and tables as
    legacy_nearest_index_table (float32 arithmetic, as ONNX Runtime)."""
    scales = np.asarray(scales, dtype=np.float32).reshape(-1)
    r = len(x.shape)
    if scales.size != r:
        raise ValueError(f"{nc.where}: scales must have one value per input axis ({r}), got {scales.tolist()}")
    if np.any(~np.isfinite(scales)) or np.any(scales <= 0):
        raise ValueError(f"{nc.where}: scales must be positive, got {scales.tolist()}")
    out = tuple(int(np.float32(s) * np.float32(d)) for s, d in zip(scales, x.shape))
    if any(o < 1 for o in out):
        raise ValueError(f"{nc.where}: output shape {list(out)} is empty (input {list(x.shape)}, "
                         f"scales {scales.tolist()})")
    tables = [None if (s == 1 and o == d) else legacy_nearest_index_table(d, o, s)
              for s, o, d in zip(scales, out, x.shape)]
    _emit_resize(nc, x, out, tables)


def _upsample(nc):
    if nc.version == 1:
        nc.check_attrs(("height_scale", "mode", "width_scale"))
    elif nc.version == 7:
        nc.check_attrs(("mode", "scales"))
    else:
        nc.check_attrs(("mode",))
    _nearest_mode_attr(nc)
    x = nc.tensor(0, "X")
    if nc.version == 1:
        if len(x.shape) != 4:
            raise ValueError(f"{nc.where}: Upsample-1 takes a rank-4 input, got {list(x.shape)}")
        scales = [1.0, 1.0, float(nc.attr("height_scale", 1.0)), float(nc.attr("width_scale", 1.0))]
    elif nc.version == 7:
        scales = nc.attr("scales")
        if scales is None:
            raise ValueError(f"{nc.where}: attribute scales is required")
    else:
        scales = nc.const(1, "scales")
        if scales is None:
            raise ValueError(f"{nc.where}: input scales is required")
    if np.any(np.asarray(scales, dtype=np.float32) < 1):
        raise ValueError(f"{nc.where}: Upsample scales must be >= 1, got {np.asarray(scales).tolist()}")
    _legacy_resize(nc, x, scales)


def _resize(nc):
    if nc.version == 10:
        nc.check_attrs(("mode",))
        _nearest_mode_attr(nc)
        x = nc.tensor(0, "X")
        scales = nc.const(1, "scales")
        if scales is None:
            raise ValueError(f"{nc.where}: input scales is required")
        _legacy_resize(nc, x, scales)
        return
    allowed = ["coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside", "extrapolation_value",
               "mode", "nearest_mode"]
    if nc.version >= 18:
        allowed += ["antialias", "axes", "keep_aspect_ratio_policy"]
    nc.check_attrs(allowed)
    _nearest_mode_attr(nc)
    x = nc.tensor(0, "X")
    r = len(x.shape)
    ctm = nc.attr("coordinate_transformation_mode", "half_pixel")
    modes = COORDINATE_MODES if nc.version >= 19 else tuple(m for m in COORDINATE_MODES
                                                              if m != "half_pixel_symmetric")
    if ctm not in modes:
        raise ValueError(f"{nc.where}: coordinate_transformation_mode must be one of {list(modes)}, got {ctm!r}")
    nearest_mode = nc.attr("nearest_mode", "round_prefer_floor")
    if nearest_mode not in NEAREST_MODES:
        raise ValueError(f"{nc.where}: nearest_mode must be one of {list(NEAREST_MODES)}, got {nearest_mode!r}")
    if int(nc.attr("antialias", 0)):
        nc.unsupported("antialias", 1, "antialiasing applies to linear and cubic modes only")
    policy = nc.attr("keep_aspect_ratio_policy", "stretch")
    axes = nc.attr("axes")
    exclude_outside = int(nc.attr("exclude_outside", 0))
    extrapolation_value = float(nc.attr("extrapolation_value", 0.0))
    roi = nc.const(1, "roi")
    scales = nc.const(2, "scales")
    sizes = nc.const(3, "sizes")
    if scales is not None and scales.size == 0:
        scales = None                # Resize-11/13 exporters pass an empty scales with sizes
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ValueError(f"{nc.where}: exactly one of the inputs scales and sizes must be given")
    if ctm != "tf_crop_and_resize" or (roi is not None and roi.size == 0):
        roi = None
    try:
        out, tables = resize_plan(x.shape, scales=scales, sizes=sizes, axes=axes,
                                  keep_aspect_ratio_policy=policy if sizes is not None else "stretch",
                                  coordinate_mode=ctm, nearest_mode=nearest_mode, roi=roi)
    except ValueError as e:
        raise ValueError(f"{nc.where}: {e}") from None
    if any(t is not None and (t < 0).any() for t in tables):
        nc.unsupported("coordinate_transformation_mode", ctm,
                       f"output positions outside the roi {np.asarray(roi).tolist()} would need "
                       f"extrapolation_value={extrapolation_value} filled in, which the resize kernel does not do")
    if exclude_outside:
        unclamped = resize_plan(x.shape, scales=scales, sizes=sizes, axes=axes,
                                keep_aspect_ratio_policy=policy if sizes is not None else "stretch",
                                coordinate_mode=ctm, nearest_mode=nearest_mode, roi=roi, clamp=False)[1]
        if any(t is not None and ((t < 0) | (t >= d)).any() for t, d in zip(unclamped, x.shape)):
            nc.unsupported("exclude_outside", exclude_outside,
                           "some nearest neighbours fall outside the input, which ONNX then sets to 0")
    _emit_resize(nc, x, out, tables)


CONVERTERS = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _global_pool("global_avg_pool"),
    "GlobalMaxPool": _global_pool("global_max_pool"),
    "Resize": _resize,
    "Upsample": _upsample,
    "Col2Im": _col2im,
}

# (lowest, highest) since_version each converter implements; None = any later
# version (ops whose later versions only add data types we do not run anyway).
SUPPORTED_VERSIONS = {
    "Conv": (1, 22),
    "ConvTranspose": (1, 22),
    "MaxPool": (1, 22),
    "AveragePool": (1, 22),
    "GlobalAveragePool": (1, 22),
    "GlobalMaxPool": (1, 22),
    "Resize": (10, 19),
    "Upsample": (1, 10),
    "Col2Im": (18, 18),
}

# Input positions whose values set shapes or index tables: they must be
# compile-time arrays (initializers, Constant outputs or from_onnx constants).
PARAMETER_INPUTS = {
    "Resize": (1, 2, 3),        # Resize-10: scales; 11+: roi, scales, sizes
    "Upsample": (1,),           # scales
    "Col2Im": (1, 2),           # image_shape, block_shape
}


# Converters not yet moved into their op family register here.
for _op, _fn in CONVERTERS.items():
    onnx_op(_op, SUPPORTED_VERSIONS[_op], PARAMETER_INPUTS.get(_op, ()))(_fn)
del _op, _fn
