"""InferenceSession: serve an ONNX model with ONNX Runtime's calling convention.

    sess = rlx_cpu.InferenceSession("model.onnx", num_threads=2)
    print(sess.get_inputs()[0].name, sess.get_inputs()[0].shape)   # 'x' ['batch', 3, 224, 224]
    (y,) = sess.run(None, {"x": images})                             # a list of arrays

A session holds the parsed model and compiles it into :class:`~rlx_cpu.Plan`
objects, whose shapes are static.  Inputs declared with dynamic dims (a
symbolic ``batch``, an unknown dim) are resolved on the first run of each
*input signature* (the tuple of the feeds' shapes): that run compiles a plan,
later runs with the same shapes reuse it.  The cache holds at most
``max_cached_plans`` plans (default 8), least recently used evicted first, so
a client that sends many batch sizes cannot grow memory without bound (each
plan owns its constants and one arena per thread that ran it).  A model whose
inputs are all static is compiled when the session is made.

Inputs that set shapes (Reshape's shape, Resize's scales, ...) are folded at
import when they are initializers or ``Constant`` nodes, as exporters emit
them; a shape-setting *graph input* must be fixed with ``constants=``.

Threads: a session may be run from several Python threads at once.  Each
plan gives every thread its own run context (arena and bound kernels) and
kernels release the GIL.  The plan cache is guarded by a lock; a new
signature compiles once (threads that meet it meanwhile wait for that
compile) while runs of cached signatures go on.
"""
import threading
from collections import OrderedDict

import numpy as np

from .onnx_import import _declared_dims, _elem_dtype, _Importer, _onnx, import_onnx, load_model
from .threads import resolve_num_threads

DEFAULT_MAX_CACHED_PLANS = 8


class NodeArg:
    """A model input or output as ONNX Runtime describes it: ``name``,
    ``shape`` (ints; a symbolic dim as its name, an unknown dim as None) and
    ``type`` (e.g. ``'tensor(float)'``)."""

    __slots__ = ("name", "shape", "type")

    def __init__(self, name, shape, type):
        self.name, self.shape, self.type = name, shape, type

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _node_arg(vi, generated=()):
    """NodeArg of a ValueInfoProto; dim params in `generated` (names shape
    inference made up for unknown dims) count as unknown (None)."""
    onnx = _onnx()
    t = vi.type
    if not t.HasField("tensor_type"):
        return NodeArg(vi.name, None, "unknown")
    tt = t.tensor_type
    type_name = f"tensor({onnx.TensorProto.DataType.Name(tt.elem_type).lower()})"
    if not tt.HasField("shape"):
        return NodeArg(vi.name, None, type_name)
    shape = []
    for d in tt.shape.dim:
        if d.HasField("dim_value"):
            shape.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param not in generated:
            shape.append(d.dim_param)
        else:
            shape.append(None)
    return NodeArg(vi.name, shape, type_name)


class InferenceSession:
    """Run an ONNX model like ``onnxruntime.InferenceSession``.

    path_or_bytes: a path, the serialized model, or an ``onnx.ModelProto``.
    num_threads: OpenMP threads inside each run (default: rlx_cpu's thread
        count when the session is made), like ORT's ``intra_op_num_threads``.
    constants: {graph input name: array} fixed at compile time (for graph
        inputs that set shapes); they are not inputs of :meth:`run`.
    conv_algorithm, tune: as :func:`rlx_cpu.compile` (tune=True times each
        conv's candidate algorithms when a signature's plan is compiled).
    max_cached_plans: how many input signatures keep a compiled plan.
    providers: accepted for code written for ONNX Runtime; only
        ``["CPUExecutionProvider"]`` (or None).

    Unsupported ops raise ``NotImplementedError`` here, listing every
    unsupported node.  See the module docstring for dynamic dims and threads.
    """

    def __init__(self, path_or_bytes, *, num_threads=None, constants=None, conv_algorithm="auto",
                 max_cached_plans=DEFAULT_MAX_CACHED_PLANS, providers=None, tune=False):
        if providers is not None:
            names = [p[0] if isinstance(p, tuple) else p for p in providers]
            if any(n != "CPUExecutionProvider" for n in names):
                raise ValueError(f"InferenceSession: rlx_cpu runs on the CPU only; providers must be "
                                 f"['CPUExecutionProvider'] or None, got {list(providers)!r}")
        if not isinstance(max_cached_plans, int) or isinstance(max_cached_plans, bool) or max_cached_plans < 1:
            raise ValueError(f"InferenceSession: max_cached_plans must be an int >= 1, got {max_cached_plans!r}")
        self._model = load_model(path_or_bytes)
        self._constants = dict(constants or {})
        self._num_threads = resolve_num_threads(num_threads, "InferenceSession")
        self._conv_algorithm = conv_algorithm
        self._tune = bool(tune)
        self._max_plans = max_cached_plans
        self._plans = OrderedDict()          # input signature -> Plan, least recently used first
        self._lock = threading.Lock()        # guards _plans and _compiling
        self._compiling = {}                 # signature -> lock held while it compiles

        g = self._model.graph
        fixed = {t.name for t in g.initializer} | set(self._constants)
        known = {vi.name for vi in g.input}
        for name in self._constants:
            if name not in known:
                raise ValueError(f"InferenceSession: constants names {name!r}, which is not a graph input "
                                 f"(inputs: {sorted(known - {t.name for t in g.initializer})})")
        runtime = [vi for vi in g.input if vi.name not in fixed]
        for vi in runtime:
            dt = _elem_dtype(vi)
            if dt != np.float32:
                raise NotImplementedError(
                    f"InferenceSession: graph input {vi.name!r} has type {_node_arg(vi).type}; rlx_cpu computes "
                    f"in float32 only (a non-float input that sets a shape can be fixed with "
                    f"constants={{{vi.name!r}: ...}})")
        self._inputs = [_node_arg(vi) for vi in runtime]
        self._input_dims = [_declared_dims(vi) for vi in runtime]
        declared_params = {d.dim_param for vi in list(g.input) + list(g.output) + list(g.value_info)
                           for d in vi.type.tensor_type.shape.dim if d.HasField("dim_param")}
        inferred = self._inferred_outputs()
        generated = {d.dim_param for vi in inferred for d in vi.type.tensor_type.shape.dim
                     if d.HasField("dim_param") and d.dim_param.startswith("unk__")} - declared_params
        self._outputs = [_node_arg(vi, generated) for vi in inferred]
        self._output_index = {o.name: j for j, o in enumerate(self._outputs)}

        # Refuse unsupported ops now (all of them at once), not on the first run.
        imp = _Importer(self._model, {}, {})
        imp._resolve_opsets()
        if imp.opsets.get("") is None:
            raise ValueError("InferenceSession: the model imports no default-domain (ai.onnx) opset")
        imp._check_supported(g.node)
        # A model without dynamic dims compiles now.
        if all(d is not None and None not in d for d in self._input_dims):
            sig = tuple(tuple(d) for d in self._input_dims)
            self._plans[sig] = self._compile(sig)

    # -- ONNX Runtime's accessors ---------------------------------------------
    def get_inputs(self):
        """The inputs :meth:`run` takes, as :class:`NodeArg` (initializers
        and ``constants=`` are not among them)."""
        return list(self._inputs)

    def get_outputs(self):
        """The model's outputs, as :class:`NodeArg`, in the order run() returns them."""
        return list(self._outputs)

    def get_providers(self):
        return ["CPUExecutionProvider"]

    @property
    def num_threads(self):
        return self._num_threads

    @property
    def max_cached_plans(self):
        return self._max_plans

    def cached_signatures(self):
        """The input signatures (tuples of input shapes, in get_inputs()
        order) that have a compiled plan, least recently used first."""
        with self._lock:
            return list(self._plans)

    def plan_for(self, shapes):
        """The compiled :class:`~rlx_cpu.Plan` for inputs of these shapes
        (one shape per input, in get_inputs() order), compiling it if needed."""
        sig = tuple(tuple(int(d) for d in s) for s in shapes)
        if len(sig) != len(self._inputs):
            raise ValueError(f"plan_for: expected {len(self._inputs)} shapes (inputs "
                             f"{[i.name for i in self._inputs]}), got {len(sig)}")
        for arg, dims, shape in zip(self._inputs, self._input_dims, sig):
            self._check_shape(arg, dims, shape)
        return self._plan(sig)

    # -- running ----------------------------------------------------------------
    def run(self, output_names, input_feed, run_options=None):
        """Run the model: a list of numpy arrays, one per name in
        `output_names` (None: every output, in get_outputs() order).

        input_feed: {input name: array} with exactly the names of
        get_inputs(); arrays of any real dtype are converted to float32.
        Unknown or missing names, a wrong rank or a dim that contradicts the
        model raise ValueError; a non-numeric dtype raises TypeError."""
        if run_options is not None:
            raise NotImplementedError("InferenceSession.run: run_options are not supported (pass None)")
        if not isinstance(input_feed, dict):
            raise TypeError(f"InferenceSession.run: input_feed must be a dict of input name -> array, "
                            f"got {type(input_feed).__name__}")
        names = [a.name for a in self._inputs]
        unknown = [k for k in input_feed if k not in names]
        missing = [n for n in names if n not in input_feed]
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"unknown input name(s) {unknown}")
            if missing:
                parts.append(f"missing input(s) {missing}")
            raise ValueError(f"InferenceSession.run: {', '.join(parts)}; the model's inputs are {names}")
        if output_names is None:
            picks = None
        else:
            if isinstance(output_names, str):
                raise TypeError("InferenceSession.run: output_names must be a list of names or None, "
                                f"got the string {output_names!r}")
            picks = []
            for n in output_names:
                j = self._output_index.get(n)
                if j is None:
                    raise ValueError(f"InferenceSession.run: unknown output name {n!r}; the model's outputs "
                                     f"are {list(self._output_index)}")
                picks.append(j)
        feeds, sig = {}, []
        for arg, dims in zip(self._inputs, self._input_dims):
            arr = np.asarray(input_feed[arg.name])
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"InferenceSession.run: input {arg.name!r} must be a real numeric array "
                                f"(the model declares {arg.type}; it is converted to float32), got dtype "
                                f"{arr.dtype}")
            self._check_shape(arg, dims, arr.shape)
            feeds[arg.name] = arr
            sig.append(arr.shape)
        outs = self._plan(tuple(sig)).run(feeds)
        return outs if picks is None else [outs[j] for j in picks]

    # -- internals ---------------------------------------------------------------
    def _inferred_outputs(self):
        """The graph outputs with the dims ONNX shape inference can tell
        (ONNX Runtime reports those too); the declared ones if it fails."""
        onnx = _onnx()
        try:
            inferred = onnx.shape_inference.infer_shapes(self._model, strict_mode=False).graph.output
        except Exception:       # inference is only for the metadata: fall back to the declarations
            return list(self._model.graph.output)
        if [vi.name for vi in inferred] != [vi.name for vi in self._model.graph.output]:
            return list(self._model.graph.output)
        return list(inferred)

    @staticmethod
    def _check_shape(arg, dims, shape):
        if dims is None:
            return
        if len(shape) != len(dims):
            raise ValueError(f"InferenceSession.run: input {arg.name!r} must have rank {len(dims)} "
                             f"(declared shape {arg.shape}), got shape {list(shape)}")
        for axis, (d, s) in enumerate(zip(dims, shape)):
            if d is not None and d != s:
                raise ValueError(f"InferenceSession.run: input {arg.name!r} has dim {s} on axis {axis}; the "
                                 f"model declares {d} (declared shape {arg.shape}, got {list(shape)})")
            if s < 1:
                raise ValueError(f"InferenceSession.run: input {arg.name!r} has an empty axis {axis} "
                                 f"(shape {list(shape)}); every dim must be >= 1")

    def _plan(self, sig):
        with self._lock:
            plan = self._plans.get(sig)
            if plan is not None:
                self._plans.move_to_end(sig)
                return plan
            gate = self._compiling.setdefault(sig, threading.Lock())
        # One compile per new signature: threads meeting it together wait for
        # the first; runs of cached signatures are not held up meanwhile.
        with gate:
            with self._lock:
                plan = self._plans.get(sig)
            if plan is None:
                plan = self._compile(sig)
            with self._lock:
                self._plans[sig] = plan
                self._plans.move_to_end(sig)
                while len(self._plans) > self._max_plans:
                    self._plans.popitem(last=False)
                self._compiling.pop(sig, None)
            return plan

    def _compile(self, sig):
        from .compiler import compile as _compile
        shapes = {a.name: s for a, s in zip(self._inputs, sig)}
        imported = import_onnx(self._model, constants=self._constants, input_shapes=shapes)
        return _compile(imported.graph, conv_algorithm=self._conv_algorithm, num_threads=self._num_threads,
                        tune=self._tune)

    def __repr__(self):
        return (f"InferenceSession(inputs={self._inputs}, outputs={self._outputs}, "
                f"num_threads={self._num_threads}, cached plans={len(self._plans)}/{self._max_plans})")
