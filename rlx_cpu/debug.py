"""Debug mode: ``compile(..., debug=True)`` or ``RLX_DEBUG=1``.

A debug plan lays out its arena with GUARD bytes before and after every
buffer, and its run contexts fill the whole arena with a NaN pattern once.
Then:

* when a context is made (before any launch runs), every thunk's slices are
  checked against the arena and the const segment (inside their bounds) and
  against the thunk's declared roles: every slice field is declared as read,
  written or scratch, written slices lie in the arena, and no written or
  scratch slice overlaps another slice of the same thunk (a pointwise thunk
  may read exactly the slice it writes: an in-place elementwise op);
* on every run, each launch runs on its own, and afterwards every arena byte
  outside the launch's written and scratch slices (guards included) and the
  whole const segment must be unchanged.  A launch that wrote elsewhere
  raises RuntimeError naming the thunk and the buffer or guard it hit.

The checks cost a copy and a compare of the arena per launch: for finding
kernel bugs, not for production.  Results are the same as without debug
mode (only the arena layout differs).
"""
import dataclasses
import os

import numpy as np

from .shapes import switch_setting
from .thunks import Slice

GUARD = 64                               # bytes each side of every arena buffer (keeps 64 B alignment)
PATTERN = np.uint32(0x7FC5A5A5)          # a quiet NaN: a kernel reading a guard gets NaN


def resolve_debug(debug, where="compile"):
    """compile's debug flag: True/False, or None for the RLX_DEBUG variable."""
    return switch_setting(debug, "RLX_DEBUG", False, where, "debug")


def _label(i, th):
    return f"thunk {i} {th.kind}({th.op_name!r})"


def _overlap(a, b):
    return a.segment == b.segment and a.offset < b.offset + b.nbytes and b.offset < a.offset + a.nbytes


def _slice_fields(th):
    return [(f.name, getattr(th, f.name)) for f in dataclasses.fields(th)
            if isinstance(getattr(th, f.name), Slice)]


def check_thunk_slices(plan, arena_nbytes, const_nbytes):
    """Raise RuntimeError for the first thunk whose slices break the rules above."""
    sizes = {"arena": arena_nbytes, "const": const_nbytes}
    for k, (_, shape, _) in enumerate(plan._inputs):
        sizes[f"input:{k}"] = 4 * int(np.prod(shape, dtype=object))
    for k, (shape, _, dtype) in enumerate(plan._outputs):
        sizes[f"output:{k}"] = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=object))
    for i, th in enumerate(plan.thunks):
        declared = {}
        for role in ("reads", "writes", "scratch_fields"):
            for name in getattr(th, role):
                declared[name] = role
        fields = _slice_fields(th)
        for name, s in fields:
            if name not in declared:
                raise RuntimeError(f"debug: {_label(i, th)} has slice {name}={s!r} that is not declared "
                                   "in reads, writes or scratch_fields")
            if s.segment not in sizes:
                raise RuntimeError(f"debug: {_label(i, th)}: {name}={s!r} names an unknown segment")
            if s.offset < 0 or s.nbytes < 0 or s.offset + s.nbytes > sizes[s.segment]:
                what = "the arena" if s.segment == "arena" else f"segment {s.segment!r}"
                raise RuntimeError(f"debug: {_label(i, th)}: {name}={s!r} lies outside {what} "
                                   f"({sizes[s.segment]} B)")
            if declared[name] != "reads" and not (s.segment == "arena" or s.segment.startswith("output:")):
                raise RuntimeError(f"debug: {_label(i, th)} writes {name}={s!r}, which is neither in the "
                                   "arena nor a graph output")
        for name, s in fields:
            if declared[name] == "reads":
                continue
            for other, o in fields:
                # a pointwise thunk may compute in place: a read field exactly
                # equal to the written one (see Thunk.pointwise)
                if th.pointwise and declared[other] == "reads" and o == s:
                    continue
                if other != name and _overlap(s, o):
                    role = {"reads": "reads", "writes": "writes", "scratch_fields": "scratch"}[declared[other]]
                    raise RuntimeError(f"debug: {_label(i, th)} writes {name}={s!r}, which overlaps "
                                       f"{role} {other}={o!r}")


class DebugSequence:
    """Runs a context's launches one by one, checking the arena after each
    (the same run(nthreads) entry as _runtime.LaunchSequence)."""

    def __init__(self, plan, ctx, sequence_type):
        self.thunks = plan.thunks
        self.arena = ctx.arena
        check_thunk_slices(plan, ctx.arena.nbytes, plan.const_nbytes)
        ctx.arena.view(np.uint32)[:] = PATTERN
        self.const = plan._const
        self.const_copy = plan._const.copy()
        # preallocated, so a checked run allocates nothing large either
        self.snapshot = np.empty_like(ctx.arena)
        self.changed = np.empty(ctx.arena.shape, bool)
        self.const_changed = np.empty(plan._const.shape, bool)
        self.steps = [sequence_type([launch]) for launch in ctx.launches]
        self.allowed = [[getattr(th, n) for n in (*th.writes, *th.scratch_fields)
                         if isinstance(getattr(th, n), Slice) and getattr(th, n).segment == "arena"]
                        for th in self.thunks]
        self.size = len(self.steps)
        # every arena slice any thunk or the plan's I/O names, for the report
        named = [(f"input {n!r}", s) for n, s in plan.input_slices.items()]
        named += [(f"output {k}", s) for k, s in enumerate(plan.output_slices)]
        for i, th in enumerate(self.thunks):
            named += [(f"{n} of {_label(i, th)}", s) for n, s in _slice_fields(th)]
        self.named = [(what, s) for what, s in named if s.segment == "arena"]

    def replace(self, k, launch):
        """Launch k was re-bound (a run's caller arrays changed)."""
        self.steps[k] = type(self.steps[k])([launch])

    def _where(self, off, own):
        for s in own:
            if s.offset - GUARD <= off < s.offset:
                return f"the guard before arena[{s.offset}:+{s.nbytes}] ({own[s]})"
            if s.offset + s.nbytes <= off < s.offset + s.nbytes + GUARD:
                return f"the guard after arena[{s.offset}:+{s.nbytes}] ({own[s]})"
        for what, s in self.named:
            if s.offset <= off < s.offset + s.nbytes:
                return f"arena[{s.offset}:+{s.nbytes}] ({what})"
        for what, s in self.named:
            if s.offset - GUARD <= off < s.offset:
                return f"the guard before arena[{s.offset}:+{s.nbytes}] ({what})"
            if s.offset + s.nbytes <= off < s.offset + s.nbytes + GUARD:
                return f"the guard after arena[{s.offset}:+{s.nbytes}] ({what})"
        return "arena padding between buffers"

    def run(self, nthreads):
        arena, snap, changed = self.arena, self.snapshot, self.changed
        for i, step in enumerate(self.steps):
            np.copyto(snap, arena)
            step.run(nthreads)
            np.not_equal(arena, snap, out=changed)
            for s in self.allowed[i]:
                changed[s.offset:s.offset + s.nbytes] = False
            th = self.thunks[i]
            if changed.any():
                off = int(np.argmax(changed))
                own = {s: n for n, s in _slice_fields(th) if s.segment == "arena"}
                raise RuntimeError(f"debug: {_label(i, th)} wrote outside its slices: byte {off} of the "
                                   f"arena, in {self._where(off, own)}")
            if np.not_equal(self.const, self.const_copy, out=self.const_changed).any():
                off = int(np.argmax(self.const_changed))
                raise RuntimeError(f"debug: {_label(i, th)} wrote to the read-only const segment (byte {off})")
        return None
