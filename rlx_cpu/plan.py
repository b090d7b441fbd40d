"""The executor: an immutable compiled Plan and per-thread run contexts.

Thread contract (as ONNX Runtime's session): everything expensive happens in
:func:`rlx_cpu.compile`.  A Plan is immutable and may be run from many Python
threads at once; each thread gets its own :class:`RunContext` (its own arena
and bound launches), created on that thread's first run.  Constants live in
one read-only buffer shared by all contexts.  Kernels release the GIL.
"""
import threading
import time
import weakref

import numpy as np

from . import _runtime
from ._version import __version__
from .arena import aligned_empty
from .debug import DebugSequence

# Bumped whenever the pickled layout of a Plan changes.
_PICKLE_FORMAT = 1


class IncompatiblePlanError(ValueError):
    """A pickled Plan was written by another rlx_cpu version, pickle format or
    build (instruction sets the extension was compiled for, OpenMP on/off) and
    cannot be run here: recompile it from its graph in this environment."""


def _build_facts():
    """What a pickled plan must agree on with the process that loads it."""
    return {"rlx_cpu": __version__, "build_isa": list(_runtime.build_isa()),
            "openmp": bool(_runtime.openmp_enabled())}


class RunContext:
    """One arena plus the plan's thunks bound to it.  Not thread-safe: use one
    per thread (Plan.run does this for you)."""

    def __init__(self, plan):
        # A weak reference: the plan keeps each thread's context (plan._local),
        # and a strong one back would make a cycle that only the cycle
        # collector frees, holding the arena until it runs.
        self._plan = weakref.ref(plan)
        self.arena = aligned_empty(max(plan.arena_nbytes, 64))
        segments = {"arena": self.arena, "const": plan._const}

        def view(s):
            seg = segments[s.segment]
            return seg[s.offset:s.offset + s.nbytes].view(np.float32)

        self.launches = [t.bind(view) for t in plan.thunks]
        if plan.debug:
            self.sequence = DebugSequence(plan, self, _runtime.LaunchSequence)
        else:
            self.sequence = _runtime.LaunchSequence(self.launches)
        self.inputs = [(name, shape, view(s).reshape(shape)) for name, shape, s in plan._inputs]
        self.outputs = [view(s).view(dtype).reshape(shape) for shape, s, dtype in plan._outputs]

    @property
    def plan(self):
        """The plan this context was made for (None once that plan is freed)."""
        return self._plan()

    def load(self, feeds):
        if not isinstance(feeds, dict):
            raise TypeError(f"run: inputs must be a dict of name -> array, got {type(feeds).__name__}")
        if len(feeds) != len(self.inputs):
            self._check_names(feeds)
        for name, shape, dst in self.inputs:
            try:
                src = feeds[name]
            except KeyError:
                self._check_names(feeds)
                raise
            src = np.asarray(src)
            if src.shape != shape:
                raise ValueError(f"run: input {name!r} must have shape {list(shape)}, got {list(src.shape)}")
            if src.dtype.kind not in "fiu":
                raise TypeError(f"run: input {name!r} must be a real numeric array, got dtype {src.dtype}")
            np.copyto(dst, src, casting="unsafe")

    def _check_names(self, feeds):
        want = [n for n, _, _ in self.inputs]
        missing = [n for n in want if n not in feeds]
        extra = [n for n in feeds if n not in want]
        raise ValueError(f"run: inputs must be exactly {want}; missing {missing}, unexpected {extra}")


def _kernel_simd():
    from . import _conv2d
    return "avx2+fma" if _conv2d.simd_level() else "baseline"


def _restore_plan(state):
    """Unpickle a Plan (the callable Plan.__reduce__ names): check the build
    facts first, so a plan from another version or build fails here with
    IncompatiblePlanError instead of running kernels it was not made for."""
    if not isinstance(state, dict):
        raise IncompatiblePlanError(f"pickled Plan: expected a state dict, got {type(state).__name__}")
    fmt = state.get("format")
    if fmt != _PICKLE_FORMAT:
        raise IncompatiblePlanError(f"pickled Plan has format {fmt!r}; this rlx_cpu {__version__} reads "
                                    f"format {_PICKLE_FORMAT}: recompile the plan from its graph")
    here = _build_facts()
    theirs = state.get("build")
    if not isinstance(theirs, dict) or theirs != here:
        diff = {k: (theirs.get(k) if isinstance(theirs, dict) else None, v) for k, v in here.items()
                if not isinstance(theirs, dict) or theirs.get(k) != v}
        detail = ", ".join(f"{k}: pickled {a!r}, here {b!r}" for k, (a, b) in diff.items()) or repr(theirs)
        raise IncompatiblePlanError(f"pickled Plan was built by another rlx_cpu build ({detail}): "
                                    f"recompile the plan from its graph in this environment")
    try:
        plan = Plan.__new__(Plan)
        plan._setup(state["thunks"], state["inputs"], state["outputs"], state["arena_plan"],
                    state["const_nbytes"], state["num_threads"], state.get("debug", False))
        const = np.frombuffer(state["const"], dtype=np.uint8)
    except (KeyError, TypeError, AttributeError) as exc:
        raise IncompatiblePlanError(f"pickled Plan state is incomplete or malformed: {exc!r}") from None
    if const.nbytes != plan._const.nbytes:
        raise IncompatiblePlanError(f"pickled Plan: constants hold {const.nbytes} bytes, "
                                    f"its layout needs {plan._const.nbytes}")
    plan._const.setflags(write=True)
    plan._const[:] = const
    plan._const.setflags(write=False)
    plan._check_slices()
    return plan


class Plan:
    """A compiled graph: a flat list of thunks over one arena layout.

    Made by :func:`rlx_cpu.compile` (or :func:`rlx_cpu.from_onnx`); run it
    with :meth:`run` (new output arrays) or :meth:`run_into` (caller-owned
    output arrays, no allocation).  Inputs are a dict ``{name: array}`` with
    exactly the names in :attr:`input_names` and the shapes in
    :attr:`input_shapes`; arrays of any real dtype (float64, int, ...) are
    converted to float32 when copied into the arena.  Outputs come in the
    order the graph declared them, float32 (int64 for pooling indices).

    A Plan is immutable and thread-safe: many Python threads may run one plan
    at once, each on its own :class:`RunContext` (arena + bound kernels),
    created on that thread's first run.  The thread count used *inside* each
    run (``num_threads``) is fixed at compile time.

    Plans pickle (and ``copy.deepcopy``): the pickle holds the thunk records,
    the constants and the settings (``num_threads``, rlx_cpu version, build
    ISA); arenas and bound kernels are rebuilt on first use after loading, and
    the loaded plan gives bitwise-identical results.  Loading a pickle written
    by another rlx_cpu version or build raises :class:`IncompatiblePlanError`.
    Like any pickle, load only plans you trust.
    """

    def __init__(self, thunks, inputs, outputs, arena, const_nbytes, const_items, num_threads, debug=False):
        self._setup(thunks, inputs, outputs, arena, const_nbytes, num_threads, debug)
        const = self._const
        for off, arr in const_items:
            const[off:off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        const.setflags(write=False)

    def _setup(self, thunks, inputs, outputs, arena, const_nbytes, num_threads, debug=False):
        self.thunks = tuple(thunks)
        self.debug = bool(debug)  # runs check every launch's writes (rlx_cpu/debug.py)
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._arena_plan = arena
        self.num_threads = int(num_threads)
        self._const = aligned_empty(max(int(const_nbytes), 64))
        self.const_nbytes = const_nbytes
        self._local = threading.local()

    # -- pickling ------------------------------------------------------------
    def __reduce__(self):
        state = {
            "format": _PICKLE_FORMAT,
            "build": _build_facts(),
            # Informational: the kernel variant is picked by CPUID where the
            # plan runs, so a CPU without AVX2 runs the portable one.
            "kernel_simd": _kernel_simd(),
            "thunks": self.thunks,
            "inputs": self._inputs,
            "outputs": self._outputs,
            "arena_plan": self._arena_plan,
            "const_nbytes": self.const_nbytes,
            "const": self._const.tobytes(),
            "num_threads": self.num_threads,
            "debug": self.debug,
        }
        return (_restore_plan, (state,))

    def _check_slices(self):
        """Every slice lies inside its segment (guards a damaged pickle)."""
        limits = {"arena": self.arena_nbytes, "const": self.const_nbytes}
        every = [s for t in self.thunks for s in t.slices()]
        every += [s for _, _, s in self._inputs] + [s for _, s, _ in self._outputs]
        for s in every:
            lim = limits.get(getattr(s, "segment", None))
            if lim is None or s.offset < 0 or s.nbytes < 0 or s.offset + s.nbytes > lim:
                raise IncompatiblePlanError(f"pickled Plan: slice {s!r} lies outside its segment "
                                            f"({limits})")

    # -- facts ---------------------------------------------------------------
    @property
    def arena_nbytes(self):
        """Bytes of one run context's arena."""
        return self._arena_plan.nbytes

    @property
    def arena_saved_nbytes(self):
        """Bytes saved by letting buffers with disjoint lifetimes share."""
        return self._arena_plan.saved_nbytes

    @property
    def input_names(self):
        """Names run() expects as the keys of its inputs dict, in graph order."""
        return [n for n, _, _ in self._inputs]

    @property
    def input_shapes(self):
        """{input name: shape}."""
        return {n: s for n, s, _ in self._inputs}

    @property
    def output_shapes(self):
        """Shapes of the outputs, in output order."""
        return [s for s, _, _ in self._outputs]

    @property
    def input_slices(self):
        """{input name: Slice} -- where run() copies each input."""
        return {n: s for n, _, s in self._inputs}

    @property
    def output_slices(self):
        """Slices run() copies the outputs from, in output order."""
        return [s for _, s, _ in self._outputs]

    @property
    def output_dtypes(self):
        """numpy dtype names of the outputs: 'float32', or 'int64' for index outputs."""
        return [d for _, _, d in self._outputs]

    def __repr__(self):
        lines = [f"Plan({len(self.thunks)} thunks, arena {self.arena_nbytes} B "
                 f"(saved {self.arena_saved_nbytes} B), const {self.const_nbytes} B, "
                 f"{self.num_threads} threads{', debug' if self.debug else ''})"]
        lines += [f"  {i}: {t!r}" for i, t in enumerate(self.thunks)]
        return "\n".join(lines)

    # -- running -------------------------------------------------------------
    def new_context(self):
        """A fresh RunContext (arena + bound launches) for explicit management."""
        return RunContext(self)

    def _context(self):
        ctx = getattr(self._local, "ctx", None)
        if ctx is None:
            ctx = self._local.ctx = RunContext(self)
        return ctx

    def _own_context(self, context, where):
        """context, when given, must be one of this plan's: another plan's
        arena has another layout and its launches run another graph."""
        if context is None:
            return self._context()
        if not isinstance(context, RunContext):
            raise TypeError(f"{where}: context must be a RunContext from this plan's new_context(), "
                            f"got {type(context).__name__}")
        if context.plan is not self:
            raise ValueError(f"{where}: context belongs to another plan; create one with this plan's "
                             f"new_context()")
        return context

    def run(self, inputs, context=None):
        """Run the plan once; returns a list of new arrays, one per graph
        output in the order the graph declared them (float32; int64 for
        pooling indices).

        inputs: a dict {input name: array} with exactly :attr:`input_names`
        (for an ONNX model, the model's input names, e.g. ``input.1``) and
        the shapes in :attr:`input_shapes`.  Arrays of any real dtype are
        converted to float32 while being copied into the arena; a wrong name,
        shape or a non-numeric dtype raises ValueError/TypeError.
        context: a :class:`RunContext` from :meth:`new_context`; by default
        the calling thread's own (made on its first run), so threads may
        share one plan.
        """
        ctx = self._own_context(context, "run")
        ctx.load(inputs)
        ctx.sequence.run(self.num_threads)
        return [o.copy() for o in ctx.outputs]

    def run_into(self, inputs, outputs, context=None):
        """Run and write the results into caller-owned arrays: no allocation.

        inputs: as for :meth:`run`.
        outputs: a *list* (or tuple) of arrays, one per graph output, each
        of exactly that output's shape and dtype (:attr:`output_shapes`,
        :attr:`output_dtypes`; any strides); for a one-output plan
        pass ``[out]``, not ``out`` (a bare array raises TypeError).
        Returns `outputs`.  The arrays are checked before anything runs.
        """
        if not isinstance(outputs, (list, tuple)):
            raise TypeError(f"run_into: outputs must be a list of {len(self._outputs)} array(s), one per "
                            f"graph output (shapes {[list(s) for s in self.output_shapes]}), got "
                            f"{type(outputs).__name__}; for one output pass [out]")
        ctx = self._own_context(context, "run_into")
        if len(outputs) != len(ctx.outputs):
            raise ValueError(f"run_into: expected {len(ctx.outputs)} output arrays, got {len(outputs)}")
        for i, (dst, src) in enumerate(zip(outputs, ctx.outputs)):
            if not isinstance(dst, np.ndarray) or dst.shape != src.shape or dst.dtype != src.dtype:
                raise ValueError(f"run_into: output {i} must be a {src.dtype} array of shape {list(src.shape)}")
        ctx.load(inputs)
        ctx.sequence.run(self.num_threads)
        for dst, src in zip(outputs, ctx.outputs):
            np.copyto(dst, src)
        return outputs

    def profile(self, inputs, repeat=10, warmup=1):
        """Median seconds per thunk over `repeat` runs: [(thunk, seconds)]."""
        ctx = self._context()
        ctx.load(inputs)
        for _ in range(warmup):
            ctx.sequence.run(self.num_threads)
        samples = [_runtime.run_launches_timed(ctx.launches, self.num_threads, time.perf_counter)
                   for _ in range(max(1, repeat))]
        med = np.median(np.array(samples), axis=0) if samples[0] else []
        return list(zip(self.thunks, (float(v) for v in med)))
