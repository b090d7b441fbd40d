"""Import ONNX models into a :class:`~rlx_cpu.Graph` and compile them.

    plan = rlx_cpu.from_onnx("model.onnx")
    (y,) = plan.run({"input": x})          # keyed by the ONNX input names

The supported ops are those of ``rlx_cpu.registry.ONNX_OPS``; every
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
import os
from dataclasses import dataclass

import numpy as np

from .ir import Graph, Node
from .registry import ONNX_OPS, onnx_op
from .shapes import int_dims


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
              reuse_arena=True, passes=True, tune=False):
    """Compile an ONNX model into a :class:`~rlx_cpu.Plan`.

    model: a path, the serialized bytes, or an ``onnx.ModelProto``.
    constants: {graph input name: array} fixed at compile time (they stop
        being plan inputs).  Needed for inputs that determine shapes, e.g. a
        Resize ``scales`` fed as a graph input; allowed for any input.
    input_shapes: {graph input name: shape} for inputs declared with dynamic
        (symbolic or unknown) dims; plans have static shapes.
    conv_algorithm, num_threads, reuse_arena, passes, tune: as :func:`rlx_cpu.compile`.

    ``plan.run`` takes the ONNX input names and returns the outputs in the
    order of the model's graph outputs (float32; MaxPool ``Indices`` int64).
    :func:`import_onnx` gives the graph and the output names without compiling.
    """
    from .compiler import compile as _compile

    imported = import_onnx(model, constants=constants, input_shapes=input_shapes)
    return _compile(imported.graph, conv_algorithm=conv_algorithm, num_threads=num_threads,
                    reuse_arena=reuse_arena, passes=passes, tune=tune)


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


_ATTR_TYPE_WORDS = {"INT": "one int", "INTS": "a list of ints", "FLOAT": "one float",
                    "FLOATS": "a list of floats", "STRING": "a string", "STRINGS": "a list of strings",
                    "TENSOR": "a tensor"}


class NodeContext:
    """What a converter sees of one ONNX node: its inputs, attributes and
    version, plus helpers that raise errors naming the node and op."""

    def __init__(self, importer, node, version, schema=None):
        self.imp = importer
        self.node = node
        self.version = version
        self.op = node.op_type
        label = node.name or (node.output[0] if node.output else "?")
        self.where = f"node {label!r} ({node.op_type}-{version})"
        self.attrs = {a.name: a for a in node.attribute}
        if schema is not None:
            self._check_attr_types(schema)

    def _check_attr_types(self, schema):
        """Every attribute must have the type the op's schema declares (as
        onnx.checker demands): pads=[1.5] or group="1" is an error, never
        truncated to an int."""
        onnx = _onnx()
        for name, a in self.attrs.items():
            decl = schema.attributes.get(name)
            if decl is None:
                continue        # an unknown attribute: check_attrs names it
            want = decl.type.name
            got = onnx.AttributeProto.AttributeType.Name(a.type)
            if got != want:
                raise TypeError(f"{self.where}: attribute {name!r} must be of type {want} "
                                f"({_ATTR_TYPE_WORDS.get(want, want)}), got {got} "
                                f"{_attr_value(a)!r}")

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
        if not isinstance(v, (list, tuple)) or not all(isinstance(i, int) for i in v):
            raise TypeError(f"{self.where}: attribute {name!r} must be a list of ints, got {v!r}")
        v = tuple(v)
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

        self._check_supported(g.node)
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
        tt = vi.type.tensor_type
        if tt.HasField("shape") and any(d.HasField("dim_value") and d.dim_value == 0 for d in tt.shape.dim):
            raise NotImplementedError(f"from_onnx: graph input {vi.name!r} has shape {_dims_str(vi)}; empty "
                                      "tensors are not supported")
        declared = _elem_dtype(vi)
        if declared is None or declared != np.float32:
            raise NotImplementedError(
                f"from_onnx: graph input {vi.name!r} has type {_type_name(vi)}; rlx_cpu computes in float32 "
                f"only (a non-float input that sets a shape can be fixed with constants={{{vi.name!r}: ...}})")
        dims = _declared_dims(vi)
        if vi.name in self.input_shapes:
            shape = int_dims(self.input_shapes[vi.name], f"from_onnx: input_shapes[{vi.name!r}]")
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

    def _support(self, node):
        """(schema, None) when the node's op and version have a converter,
        else (None, message naming the node and the op)."""
        onnx = _onnx()
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        label = node.name or (node.output[0] if node.output else "?")
        if domain != "":
            return None, (f"node {label!r}: op {node.op_type!r} of domain {node.domain!r} is not "
                          "supported (only the default ONNX domain)")
        opset = self.opsets[""]
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:
            return None, f"node {label!r}: op {node.op_type!r} is not an ONNX op at opset {opset}"
        version = schema.since_version
        entry = ONNX_OPS.get(node.op_type)
        if entry is None:
            return None, f"node {label!r}: op {node.op_type}-{version} is not supported by rlx_cpu"
        lo, hi = entry.versions
        if version < lo or (hi is not None and version > hi):
            return None, (f"node {label!r}: {node.op_type}-{version} (opset {opset}) is not "
                          f"supported; versions {lo}..{hi or 'latest'} are")
        return schema, None

    def _check_supported(self, nodes):
        """Refuse a model naming every node whose op rlx_cpu cannot import, at once."""
        problems = [msg for msg in (self._support(n)[1] for n in nodes) if msg]
        if len(problems) == 1:
            raise NotImplementedError(f"{problems[0]} (supported: {', '.join(sorted(ONNX_OPS))})")
        if problems:
            raise NotImplementedError(
                f"from_onnx: {len(problems)} nodes use ops rlx_cpu does not support:\n  "
                + "\n  ".join(problems) + f"\n(supported: {', '.join(sorted(ONNX_OPS))})")

    def _convert(self, node):
        label = node.name or (node.output[0] if node.output else "?")
        schema, problem = self._support(node)
        if problem:
            raise NotImplementedError(problem)
        version = schema.since_version
        entry = ONNX_OPS[node.op_type]
        for i, name in enumerate(node.input):
            if name and name not in self.values:
                raise ValueError(f"node {label!r} ({node.op_type}): input {i} {name!r} is not defined by any "
                                 "earlier node, initializer or graph input")
        nc = NodeContext(self, node, version, schema)
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


def window_padding(nc, nsp, allow_negative=False):
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


def spatial_rank(nc, x, min_rank=3, max_rank=5):
    r = len(x.shape)
    if not min_rank <= r <= max_rank:
        raise NotImplementedError(f"{nc.where}: input of rank {r} ({list(x.shape)}) is not supported; "
                                  f"{min_rank - 2}..{max_rank - 2} spatial dims are")
    return r - 2


def graph_op(nc, name):
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
