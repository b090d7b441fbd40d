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
from .arena import aligned_empty
from .debug import DebugSequence


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


class Plan:
    """A compiled graph: a flat list of thunks over one arena layout."""

    def __init__(self, thunks, inputs, outputs, arena, const_nbytes, const_items, num_threads, debug=False):
        self.thunks = thunks
        self.debug = debug        # runs check every launch's writes (rlx_cpu/debug.py)
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._arena_plan = arena
        self.num_threads = num_threads
        const = aligned_empty(max(const_nbytes, 64))
        for off, arr in const_items:
            const[off:off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        const.setflags(write=False)
        self._const = const
        self.const_nbytes = const_nbytes
        self._local = threading.local()

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
        return [n for n, _, _ in self._inputs]

    @property
    def input_shapes(self):
        return {n: s for n, s, _ in self._inputs}

    @property
    def output_shapes(self):
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
        """Run on a dict {input name: array}; returns new arrays in the graph's
        output order (float32, int64 for index outputs)."""
        ctx = self._own_context(context, "run")
        ctx.load(inputs)
        ctx.sequence.run(self.num_threads)
        return [o.copy() for o in ctx.outputs]

    def run_into(self, inputs, outputs, context=None):
        """Run and write the outputs into caller-owned arrays (no allocation)."""
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
