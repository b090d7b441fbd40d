"""Functional API with torch.nn.functional's names and argument order.

Each call compiles (once per distinct shapes/attributes, then cached) a plan
whose weight and bias are graph *inputs*, so new weights cost nothing extra.
Inputs may be any real array; computation is float32; results are new arrays.
"""
import threading
from collections import OrderedDict

import numpy as np

from .compiler import compile as _compile
from .ir import Graph
from .registry import FUNCTIONS
from .threads import threads_key

_CACHE_SIZE = 128
_cache = OrderedDict()
_cache_lock = threading.Lock()
_last = (None, None)    # (key, plan) of the latest lookup, read without the lock


def as_real(name, op, v):
    a = np.asarray(v)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{op}: {name} must be a real numeric array, got dtype {a.dtype}")
    return a


def freeze(v):
    """A hashable plan-cache key part for an attribute argument.  Sequences
    and numpy arrays of ints (accepted like torch accepts them) become tuples;
    anything else unhashable is keyed by its repr, and the graph method then
    judges the value itself."""
    t = type(v)
    if t is int or t is str or v is None:        # the common case, first
        return v
    if isinstance(v, np.ndarray):
        return ("ndarray", str(v.dtype), freeze(v.tolist()))
    if isinstance(v, (list, tuple)):
        return tuple(freeze(i) for i in v)
    if isinstance(v, np.integer):
        return int(v)
    try:
        hash(v)
    except TypeError:
        return ("unhashable", type(v).__name__, repr(v))
    return v


def cached_plan(key, build):
    global _last
    last = _last
    if key == last[0]:          # a loop over one shape: no hashing, no lock
        return last[1]
    with _cache_lock:
        plan = _cache.get(key)
        if plan is not None:
            _cache.move_to_end(key)
            _last = (key, plan)
            return plan
    plan = build()
    with _cache_lock:
        _cache[key] = plan
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
        _last = (key, plan)
    return plan


def clear_plan_cache():
    global _last
    with _cache_lock:
        _cache.clear()
        _last = (None, None)


# ---------------------------------------------------------------------------
# --- pooling / resize / im2col ---
# ---------------------------------------------------------------------------

def run_unary(op, x, args, make):
    """Run the one-input graph `make(graph, x_node) -> node or tuple of nodes`,
    compiled once per (op, shape, args, threads).  Returns one array or a tuple."""
    x = as_real("input", op, x)
    key = (op, x.shape, freeze(args), threads_key())

    def build():
        g = Graph()
        out = make(g, g.input("x", x.shape))
        g.output(*(out if isinstance(out, tuple) else (out,)))
        return _compile(g)

    res = cached_plan(key, build).run({"x": x})
    return tuple(res) if len(res) > 1 else res[0]


def shape_key(shape):
    try:
        return tuple(int(d) for d in shape)
    except TypeError:
        return shape            # let the graph method raise its TypeError


def __getattr__(name):
    """Functions registered by the op families (rlx_cpu.functional.<name>)."""
    try:
        return FUNCTIONS[name]
    except KeyError:
        raise AttributeError(f"module 'rlx_cpu.functional' has no attribute {name!r}") from None
