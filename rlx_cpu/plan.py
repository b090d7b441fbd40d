"""The executor: an immutable compiled Plan and per-thread run contexts.

Thread contract (as ONNX Runtime's session): everything expensive happens in
:func:`rlx_cpu.compile`.  A Plan is immutable and may be run from many Python
threads at once; each thread gets its own :class:`RunContext` (its own arena
and bound launches), created on that thread's first run.  Constants live in
one read-only buffer shared by all contexts.  Kernels release the GIL.

Memory segments (the base-pointer-plus-offset model with several bases):
every thunk slice names a segment -- ``arena`` (the context's intermediates
and scratch), ``const`` (shared, read-only), ``input:<i>`` (graph input i) or
``output:<j>`` (graph output j) -- and a byte range of it.  Input and output
segments are bound per run to the caller's arrays: kernels read inputs in
place when they are C-contiguous, aligned float32 (any other input is
converted once into a context-owned staging buffer) and ``run_into`` kernels
write the caller's output arrays directly.  No thunk writes an input
segment (the compiler checks it).

A context remembers the objects of its last run.  A run with the same
objects (the usual serving loop: preallocated buffers) costs a few identity
checks; a new object is validated and re-binds only the launches that touch
its segment (a small segment whose caller keeps passing new arrays is
copied instead, which is cheaper: see ZERO_COPY_MIN_NBYTES).
A context keeps a reference to the arrays of its last run (as ONNX Runtime's
IOBinding does).
"""
import threading
import time
import weakref

import numpy as np

from . import _launch, _runtime
from ._version import __version__
from .arena import aligned_empty
from .debug import DebugSequence
from .shapes import nbytes_of

# Bumped whenever the pickled layout of a Plan changes (3: conv records carry
# a fused epilogue and residual; the state holds the pass summary).
_PICKLE_FORMAT = 3


class IncompatiblePlanError(ValueError):
    """A pickled Plan was written by another rlx_cpu version, pickle format or
    build (instruction sets the extension was compiled for, OpenMP on/off) and
    cannot be run here: recompile it from its graph in this environment."""


def _build_facts():
    """What a pickled plan must agree on with the process that loads it."""
    return {"rlx_cpu": __version__, "build_isa": list(_runtime.build_isa()),
            "openmp": bool(_runtime.openmp_enabled())}


_UNBOUND = object()     # an input segment bound to no caller object yet
_MISSING = object()     # a feed dict lacks the name

# Re-binding the launches that touch a segment costs a few microseconds per
# launch (measured), more than copying a small array.  So a segment below this
# size whose caller passes a new array again (not a serving loop that reuses
# its buffers) is copied from then on: an input into the context's staging
# buffer, an output out of the context's own buffer.  Larger arrays, and
# small ones passed again, are used in place.
ZERO_COPY_MIN_NBYTES = 64 * 1024

# Plan.run returns new arrays.  When a kernel writes an output of at least
# this many bytes, run allocates every output first and binds it as run_into
# does, so kernels write the returned arrays and nothing is copied (the
# re-bind of the launches that write it costs a few microseconds; copying
# 256 KiB out of the context costs about 10-20 and 6.4 MB 0.46 ms).  Smaller
# outputs are copied out of the context's own buffers.
RUN_IN_PLACE_MIN_NBYTES = 256 * 1024


def _direct(arr):
    """True when kernels can use arr's bytes in place: a C-contiguous,
    aligned float32 ndarray."""
    return arr.dtype == np.float32 and arr.flags.c_contiguous and arr.flags.aligned


class RunContext:
    """One arena plus the plan's thunks bound to it and to the arrays of the
    current run.  Not thread-safe: use one per thread (Plan.run does this for
    you).

    ``inputs``: [(name, shape, staging array)] -- where converted inputs are
    written; ``outputs``: the context's own output arrays (what run() copies
    out).  ``load(feeds)`` binds a run's inputs (and the own outputs); after
    it, ``sequence.run(nthreads)`` or ``launches`` execute the plan."""

    def __init__(self, plan):
        # A weak reference: the plan keeps each thread's context (plan._local),
        # and a strong one back would make a cycle that only the cycle
        # collector frees, holding the arena until it runs.
        self._plan = weakref.ref(plan)
        self.arena = aligned_empty(max(plan.arena_nbytes, 64))
        n_in, n_out = len(plan._inputs), len(plan._outputs)
        self.inputs = [(name, shape, np.zeros(shape, np.float32)) for name, shape, _ in plan._inputs]
        self.outputs = [np.zeros(shape, dtype) for shape, _, dtype in plan._outputs]
        # segment -> the array it is bound to, and that array's bytes (uint8)
        self._target = {}
        self._bytes = {"arena": self.arena, "const": plan._const}
        for i, (_, _, stage) in enumerate(self.inputs):
            self._retarget(f"input:{i}", stage)
        for j, own in enumerate(self.outputs):
            self._retarget(f"output:{j}", own)
        # Identity cache of the last run: the caller's object for each input
        # (and its ndarray form, and whether it is copied into staging), the
        # caller's array for each output (None: the context's own).
        self._in_src = [_UNBOUND] * n_in
        self._in_arr = [None] * n_in
        self._staged = ()       # indices of the inputs copied into staging
        self._names = tuple(name for name, _, _ in self.inputs)
        self._out_dst = [None] * n_out
        self._churn = set()     # small segments whose caller passes new arrays each run
        self.copy_small_churn = True    # False: always bind in place (the C API's contexts)
        self._seg_thunks = {}
        for k, t in enumerate(plan.thunks):
            for s in t.slices():
                if s.segment not in ("arena", "const"):
                    self._seg_thunks.setdefault(s.segment, set()).add(k)
        self.launches = [t.bind(self._view) for t in plan.thunks]
        if plan.debug:
            self.sequence = DebugSequence(plan, self, _runtime.LaunchSequence)
        else:
            self.sequence = _runtime.LaunchSequence(self.launches, plan.adaptive_threads)
        # the identity check of the last binding and the run, in C (run())
        self._fast = _runtime.BoundRun(self._names, self._in_src, self._out_dst, self.sequence, np.copyto)
        self._fixups = ()
        self._set_fixups()

    @property
    def plan(self):
        """The plan this context was made for (None once that plan is freed)."""
        return self._plan()

    def _view(self, s):
        return self._bytes[s.segment][s.offset:s.offset + s.nbytes].view(np.float32)

    def _retarget(self, seg, arr):
        """Bind segment `seg` to arr's bytes; True when that changed it."""
        if self._target.get(seg) is arr:
            return False
        self._target[seg] = arr
        self._bytes[seg] = arr.reshape(-1).view(np.uint8)
        return True

    def _set_fixups(self):
        """(destination, source) pairs copied after the launches, viewed once
        per binding so a run allocates nothing: an output kernels wrote into
        the context's own buffer (a small new caller array), and outputs no
        kernel writes (an input, a constant, a repeated output, a reshape of
        either)."""
        fix = []
        for j, (shape, s, dtype) in enumerate(self.plan._outputs):
            dst = self.outputs[j] if self._out_dst[j] is None else self._out_dst[j]
            if s.segment == f"output:{j}":
                if self._target[s.segment] is not dst:
                    fix.append((dst, self.outputs[j]))
            else:
                src = self._bytes[s.segment][s.offset:s.offset + s.nbytes].view(dtype).reshape(shape)
                fix.append((dst, src))
        self._fixups = tuple(fix)
        self._fast.fixups = self._fixups

    # -- binding ---------------------------------------------------------------
    def _check_names(self, feeds, what):
        want = [n for n, _, _ in self.inputs]
        missing = [n for n in want if n not in feeds]
        extra = [n for n in feeds if n not in want]
        raise ValueError(f"{what}: inputs must be exactly {want}; missing {missing}, unexpected {extra}")

    def _bind(self, feeds, outputs, what):
        """Point the input segments at `feeds` and the output segments at
        `outputs` (None: the context's own arrays).  Objects seen in the last
        run cost an identity check (a staged input a copy); anything new is
        validated and only the launches touching its segment are re-bound.

        The check of an unchanged binding allocates nothing (no iterator, no
        temporary: while loops over small ints), which the allocation test of
        run_into holds it to."""
        if type(feeds) is dict and len(feeds) == len(self._names):
            names, srcs = self._names, self._in_src
            n, i = len(names), 0
            while i < n:
                if feeds.get(names[i], _MISSING) is not srcs[i]:
                    break
                i += 1
            if i == n:
                dsts = self._out_dst
                m, j = len(dsts), 0
                if outputs is None:
                    while j < m and dsts[j] is None:
                        j += 1
                elif type(outputs) in (list, tuple) and len(outputs) == m:
                    while j < m and outputs[j] is dsts[j]:
                        j += 1
                if j == m:
                    staged, arrs = self._staged, self._in_arr
                    k, ns = 0, len(staged)
                    while k < ns:
                        i = staged[k]
                        np.copyto(self.inputs[i][2], arrs[i], casting="unsafe")
                        k += 1
                    return
        self._rebind(feeds, outputs, what)

    def _rebind(self, feeds, outputs, what):
        if not isinstance(feeds, dict):
            raise TypeError(f"{what}: inputs must be a dict of name -> array, got {type(feeds).__name__}")
        if len(feeds) != len(self.inputs):
            self._check_names(feeds, what)
        changed = None
        for i, (name, shape, stage) in enumerate(self.inputs):
            try:
                src = feeds[name]
            except KeyError:
                self._check_names(feeds, what)
                raise
            if src is self._in_src[i]:
                if self._target[f"input:{i}"] is stage:
                    np.copyto(stage, self._in_arr[i], casting="unsafe")
                continue
            arr = np.asarray(src)
            if arr.shape != shape:
                raise ValueError(f"{what}: input {name!r} must have shape {list(shape)}, got {list(arr.shape)}")
            if arr.dtype.kind not in "fiu":
                raise TypeError(f"{what}: input {name!r} must be a real numeric array, got dtype {arr.dtype}")
            changed = {} if changed is None else changed
            changed[i] = (src, arr)
        if outputs is None:
            for j, dst in enumerate(self._out_dst):
                if dst is not None:
                    changed = {} if changed is None else changed
                    changed[("out", j)] = None
        else:
            if not isinstance(outputs, (list, tuple)):
                raise TypeError(f"{what}: outputs must be a list of arrays (one per graph output), "
                                f"got {type(outputs).__name__}")
            if len(outputs) != len(self.outputs):
                raise ValueError(f"{what}: expected {len(self.outputs)} output arrays, got {len(outputs)}")
            for j, dst in enumerate(outputs):
                if dst is self._out_dst[j]:
                    continue
                own = self.outputs[j]
                if not isinstance(dst, np.ndarray) or dst.shape != own.shape or dst.dtype != own.dtype:
                    got = (f"a {dst.dtype} array of shape {list(dst.shape)}" if isinstance(dst, np.ndarray)
                           else type(dst).__name__)
                    raise ValueError(f"{what}: output {j} must be a {own.dtype} array of shape "
                                     f"{list(own.shape)}, got {got}")
                if not (dst.flags.c_contiguous and dst.flags.aligned and dst.flags.writeable):
                    raise ValueError(f"{what}: output {j} must be a writeable, aligned, C-contiguous array "
                                     f"(kernels write it in place); got c_contiguous={dst.flags.c_contiguous}, "
                                     f"aligned={dst.flags.aligned}, writeable={dst.flags.writeable}")
                changed = {} if changed is None else changed
                changed[("out", j)] = dst
        if changed is not None:
            self._apply(changed, what)

    def _apply(self, changed, what):
        ins = [changed[i][1] if i in changed else self._in_arr[i] for i in range(len(self.inputs))]
        outs = [changed.get(("out", j), self._out_dst[j]) for j in range(len(self.outputs))]
        for j, a in enumerate(outs):
            if a is None:
                continue
            for k in range(j):
                if outs[k] is not None and np.may_share_memory(a, outs[k]):
                    raise ValueError(f"{what}: output arrays {k} and {j} share memory")
            for i, x in enumerate(ins):
                if x is not None and np.may_share_memory(a, x):
                    raise ValueError(f"{what}: output {j} shares memory with input "
                                     f"{self.inputs[i][0]!r}; pass separate arrays")
        # Forget the cache first: if re-binding failed half-way, the next run
        # would re-bind again instead of trusting a stale binding.
        stale = set()
        for key, val in changed.items():
            if isinstance(key, tuple):
                j = key[1]
                self._out_dst[j] = None
                seg, own = f"output:{j}", self.outputs[j]
                if val is not None:
                    self._note_churn(seg, val, own)
                target = val if val is not None and seg not in self._churn else own
            else:
                i, (src, arr) = key, val
                self._in_src[i] = _UNBOUND
                seg, stage = f"input:{i}", self.inputs[i][2]
                self._note_churn(seg, arr, stage)
                if _direct(arr) and seg not in self._churn:
                    target = arr
                else:
                    target = stage
                    np.copyto(stage, arr, casting="unsafe")
            if self._retarget(seg, target):
                stale |= self._seg_thunks.get(seg, set())
        for k in sorted(stale):
            launch = self.plan.thunks[k].bind(self._view)
            self.launches[k] = launch
            self.sequence.replace(k, launch)
        for key, val in changed.items():
            if isinstance(key, tuple):
                self._out_dst[key[1]] = val
            else:
                self._in_src[key], self._in_arr[key] = val
        self._staged = tuple(i for i in range(len(self.inputs))
                             if self._target[f"input:{i}"] is self.inputs[i][2] and self._in_arr[i] is not None)
        self._fast.staged = tuple((self.inputs[i][2], self._in_arr[i]) for i in self._staged)
        self._set_fixups()

    def _note_churn(self, seg, arr, own):
        """A small segment that gets a second new caller array is copied from
        then on: its caller does not reuse arrays, and copying that few bytes
        costs less than re-binding launches every run."""
        if self.copy_small_churn and arr.nbytes < ZERO_COPY_MIN_NBYTES and self._target[seg] is not own:
            self._churn.add(seg)

    def load(self, feeds):
        """Bind a run's inputs (dict name -> array) and the context's own
        outputs; the launches are then ready to execute."""
        self._bind(feeds, None, "run")

    def run(self, feeds, outputs, nthreads):
        """Bind, execute, complete the outputs no kernel writes."""
        if self._fast.run(feeds, outputs, nthreads):     # the same objects as last run
            return
        self._rebind(feeds, outputs, "run" if outputs is None else "run_into")
        self.sequence.run(nthreads)
        fix = self._fixups
        k, n = 0, len(fix)
        while k < n:
            np.copyto(fix[k][0], fix[k][1])
            k += 1


SIMD_NAMES = {0: "baseline", 1: "avx2+fma", 2: "avx512+avx2+fma"}


def _kernel_simd():
    """The kernel variant this process runs (src/rlx_simd.h: level 2 runs the
    AVX-512 tiles where they exist, AVX2+FMA elsewhere)."""
    from . import _conv2d
    return SIMD_NAMES[_conv2d.simd_level()]


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
                    state["const_nbytes"], state["num_threads"], state.get("debug", False),
                    state.get("adaptive_threads", True))
        plan.pass_summary = str(state.get("passes", ""))
        plan.tuning = {str(k): (str(b), {str(a): float(t) for a, t in ms.items()})
                       for k, (b, ms) in dict(state.get("tuning", {})).items()}
        const = np.frombuffer(state["const"], dtype=np.uint8)
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
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
    run (``num_threads``) is fixed at compile time; with ``adaptive_threads``
    (the default) a run falls back to one thread while that is measured to be
    faster, as when another busy process shares the cores.  The results are
    bitwise the same either way.

    Plans pickle (and ``copy.deepcopy``): the pickle holds the thunk records,
    the constants and the settings (``num_threads``, rlx_cpu version, build
    ISA); arenas and bound kernels are rebuilt on first use after loading, and
    the loaded plan gives bitwise-identical results.  Loading a pickle written
    by another rlx_cpu version or build raises :class:`IncompatiblePlanError`.
    Like any pickle, load only plans you trust.
    """

    def __init__(self, thunks, inputs, outputs, arena, const_nbytes, const_items, num_threads, debug=False,
                 adaptive_threads=True):
        self._setup(thunks, inputs, outputs, arena, const_nbytes, num_threads, debug, adaptive_threads)
        const = self._const
        for off, arr in const_items:
            const[off:off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        const.setflags(write=False)

    def _setup(self, thunks, inputs, outputs, arena, const_nbytes, num_threads, debug=False,
               adaptive_threads=True):
        self.thunks = tuple(thunks)
        self.debug = bool(debug)  # runs check every launch's writes (rlx_cpu/debug.py)
        self._inputs = tuple(inputs)
        self._outputs = tuple(outputs)
        self._arena_plan = arena
        self.num_threads = int(num_threads)
        # runs may use one thread while that is measured faster (src/_adaptive.pxd)
        self.adaptive_threads = bool(adaptive_threads)
        self._const = aligned_empty(max(int(const_nbytes), 64))
        self.const_nbytes = const_nbytes
        self.pass_summary = ""     # what the graph passes did (set by compile)
        self.tuning = {}           # compile(tune=True): conv name -> (chosen, {candidate: ms})
        self._local = threading.local()
        self._run_in_place = any(s.segment == f"output:{j}" and s.nbytes >= RUN_IN_PLACE_MIN_NBYTES
                                 for j, (_, s, _) in enumerate(self._outputs))
        # (bytes, dtype, shape) of each output, for the arrays run() allocates
        self._out_specs = tuple((nbytes_of(shape, np.dtype(dt).itemsize), np.dtype(dt), shape)
                                for shape, _, dt in self._outputs)

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
            "adaptive_threads": self.adaptive_threads,
            "passes": self.pass_summary,
            "tuning": {k: (str(b), {str(a): float(t) for a, t in ms.items()}) for k, (b, ms) in self.tuning.items()},
        }
        return (_restore_plan, (state,))

    def _check_slices(self):
        """Every slice lies inside its segment (guards a damaged pickle)."""
        limits = {"arena": self.arena_nbytes, "const": self.const_nbytes}
        for i, (_, shape, _) in enumerate(self._inputs):
            limits[f"input:{i}"] = 4 * int(np.prod(shape, dtype=object))
        for j, (shape, _, dtype) in enumerate(self._outputs):
            limits[f"output:{j}"] = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=object))
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
        if self.pass_summary:
            lines.append(f"  passes: {self.pass_summary}")
        if self.tuning:
            from .tuning import describe
            lines.append("  tuned (median ms of each candidate):")
            lines += describe(self.tuning)
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
        accepted: C-contiguous float32 inputs are read in place (never copied
        or written), any other is converted to float32 once per run; a wrong name,
        shape or a non-numeric dtype raises ValueError/TypeError.
        context: a :class:`RunContext` from :meth:`new_context`; by default
        the calling thread's own (made on its first run), so threads may
        share one plan.
        """
        ctx = self._own_context(context, "run")
        if self._run_in_place:
            outs = [aligned_empty(nbytes).view(dt).reshape(shape) for nbytes, dt, shape in self._out_specs]
            ctx.run(inputs, outs, self.num_threads)
            return outs
        ctx.run(inputs, None, self.num_threads)
        return [o.copy() for o in ctx.outputs]

    def run_into(self, inputs, outputs, context=None):
        """Run and write the results into caller-owned arrays: no allocation.

        inputs: as for :meth:`run`.
        outputs: a *list* (or tuple) of arrays, one per graph output, each
        of exactly that output's shape and dtype (:attr:`output_shapes`,
        :attr:`output_dtypes`), C-contiguous, aligned and writeable, sharing
        no memory with an input or another output; for a one-output plan
        pass ``[out]``, not ``out`` (a bare array raises TypeError).
        Kernels write these arrays directly and read C-contiguous float32
        inputs in place.  Returns `outputs`.  The arrays are checked before
        anything runs; passing the same arrays again (a serving loop) reuses
        the binding, and the run then allocates nothing.
        """
        if not isinstance(outputs, (list, tuple)):
            raise TypeError(f"run_into: outputs must be a list of {len(self._outputs)} array(s), one per "
                            f"graph output (shapes {[list(s) for s in self.output_shapes]}), got "
                            f"{type(outputs).__name__}; for one output pass [out]")
        ctx = self._own_context(context, "run_into")
        ctx.run(inputs, outputs, self.num_threads)
        return outputs

    def work_per_thread(self, inputs, context=None):
        """The work items each OpenMP thread ran in every thunk of one run on
        `inputs`: [(thunk, (items of thread 0, of thread 1, ...))].  A work
        item is one iteration of a kernel's parallel loop (a row, plane,
        block or panel; a contiguous run of items for the blocked kernels),
        so this shows exactly how a thunk's work was split, whatever the
        machine's load.  It runs the thunks one by one with the process-wide
        work meter on (rlx_cpu._launch.work_meter_start): do not measure two
        plans at once."""
        ctx = self._own_context(context, "work_per_thread")
        ctx.load(inputs)
        out = []
        for thunk, launch in zip(self.thunks, ctx.launches):
            _launch.work_meter_start()
            try:
                launch.execute(self.num_threads)
            finally:
                counts = _launch.work_meter_stop()
            out.append((thunk, counts))
        return out

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
