"""The op registry: the tables the core reads, filled in by the op families.

An op family (``rlx_cpu/ops/<family>.py``) holds everything one group of ops
is -- attrs records, graph builders with their shape rules, thunk records,
compile rules, gradient rules, ONNX converters and functional wrappers -- and
registers the pieces at its foot with the decorators below.  The core only
looks names up here:

=====================  ==========================  =========================
table                  filled by                   read by
=====================  ==========================  =========================
Graph methods          :func:`graph_method`        ``Graph.<name>`` (ir.py)
``COMPILE_RULES``      :func:`compile_rule`        ``compile`` (compiler.py)
``GRADIENTS``          :func:`gradient`            ``grads`` (autograd.py)
``ONNX_OPS``           :func:`onnx_op`             ``from_onnx`` (onnx_import)
``FUNCTIONS``          :func:`functional`          ``rlx_cpu.<name>``, ``__all__``
=====================  ==========================  =========================

A node's ``op`` is the name of the graph method that built it (``conv2d``,
``max_pool1d_backward``), so one op has one name in the graph, the compile
and gradient tables, the functional API and the docs.  Registering a name
twice is an error: two families cannot silently shadow each other.

:func:`scoped` snapshots every table and restores it on exit, so a test can
register a throw-away family.
"""
import contextlib
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

__all__ = ["graph_method", "compile_rule", "gradient", "onnx_op", "functional", "scoped",
           "COMPILE_RULES", "GRADIENTS", "ONNX_OPS", "FUNCTIONS", "GRAPH_METHODS", "OnnxOp"]

GRAPH_METHODS = {}    # method name -> the undecorated builder (graph, *args) -> Node
COMPILE_RULES = {}    # node op -> rule(ctx, node): emits thunks
GRADIENTS = {}        # node op -> vjp(graph, node, dy, needs) -> [grad or None per input]
ONNX_OPS = {}         # ONNX op_type -> OnnxOp
FUNCTIONS = {}        # public name -> function (rlx_cpu.<name>)


@dataclass(frozen=True)
class OnnxOp:
    """One ONNX converter.  ``versions`` is the (lowest, highest) since_version
    it implements (highest None: any later one); ``parameter_inputs`` are the
    input positions that set shapes or index tables, which must therefore be
    compile-time arrays (initializers, Constant outputs or from_onnx
    constants)."""
    op_type: str
    convert: Callable
    versions: Tuple[int, Optional[int]]
    parameter_inputs: Tuple[int, ...] = ()


def _claim(table, key, value, what):
    if key in table:
        raise ValueError(f"registry: {what} {key!r} is registered twice "
                         f"({_origin(table[key])} and {_origin(value)})")
    table[key] = value


def _origin(obj):
    fn = getattr(obj, "convert", obj)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _graph_cls():
    from .ir import Graph
    return Graph


def graph_method(name=None, doc=None):
    """Register ``fn(graph, ...)`` as the Graph method ``name`` (default: the
    function's name).  Build-time ValueError/TypeError get the shapes of the
    node arguments appended (see ir.with_input_shapes)."""
    from .ir import with_input_shapes

    def deco(fn):
        key = name or fn.__name__
        _claim(GRAPH_METHODS, key, fn, "graph method")
        if key in vars(_graph_cls()):
            raise ValueError(f"registry: graph method {key!r} shadows a method of Graph itself")
        method = with_input_shapes(fn)
        method.__name__ = method.__qualname__ = key
        if doc is not None:
            method.__doc__ = doc
        setattr(_graph_cls(), key, method)
        return fn
    return deco


def compile_rule(*ops):
    """Register ``rule(ctx, node)`` as the compile rule of the node ops ``ops``."""
    def deco(fn):
        for op in ops:
            _claim(COMPILE_RULES, op, fn, "compile rule for op")
        return fn
    return deco


def gradient(*ops):
    """Register ``vjp(graph, node, dy, needs)`` as the gradient of ``ops``."""
    def deco(fn):
        for op in ops:
            _claim(GRADIENTS, op, fn, "gradient rule for op")
        return fn
    return deco


def onnx_op(op_type, versions, parameter_inputs=()):
    """Register ``convert(nc)`` as the converter of ONNX ``op_type`` for the
    since_versions ``versions = (lo, hi)``."""
    def deco(fn):
        _claim(ONNX_OPS, op_type, OnnxOp(op_type, fn, tuple(versions), tuple(parameter_inputs)),
               "ONNX converter for")
        return fn
    return deco


def functional(name=None):
    """Register ``fn`` as the public function ``rlx_cpu.<name>``."""
    def deco(fn):
        key = name or fn.__name__
        _claim(FUNCTIONS, key, fn, "function")
        return fn
    return deco


def per_rank(template, ranks=(1, 2, 3)):
    """``{rank: name}`` for a rank-generated op, e.g. per_rank('conv{}d')."""
    return {r: template.format(r) for r in ranks}


@contextlib.contextmanager
def scoped():
    """Restore every registry table (and the Graph methods) on exit."""
    saved = [(t, dict(t)) for t in (GRAPH_METHODS, COMPILE_RULES, GRADIENTS, ONNX_OPS, FUNCTIONS)]
    graph = _graph_cls()
    methods = dict(vars(graph))
    try:
        yield
    finally:
        for table, copy in saved:
            table.clear()
            table.update(copy)
        for key in list(vars(graph)):
            if key not in methods:
                delattr(graph, key)
        for key, value in methods.items():
            if vars(graph).get(key) is not value:
                setattr(graph, key, value)

