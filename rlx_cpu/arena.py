"""Arena planning: byte offsets for every non-constant buffer of a plan.

Each buffer has a lifetime [first, last] in thunk indices (inclusive): graph
inputs start at -1 (written by the run before thunk 0), outputs end after the
last thunk, scratch lives only during its thunk.  Two buffers may share bytes
only when their lifetimes are disjoint; because an op's output starts at the
op's index and its inputs are read there, an output never shares bytes with
its op's inputs.

Placement is greedy by size (largest first, lowest offset that fits beside
every placed buffer whose lifetime overlaps), all offsets 64-byte aligned.
"""
from dataclasses import dataclass

import numpy as np

ALIGNMENT = 64


@dataclass
class BufferRequest:
    key: object
    nbytes: int
    first: int
    last: int

    def overlaps(self, other):
        return self.first <= other.last and other.first <= self.last


def align_up(n, alignment=ALIGNMENT):
    return (n + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class ArenaPlan:
    offsets: dict            # key -> byte offset
    nbytes: int              # arena size
    unshared_nbytes: int     # size without any reuse

    @property
    def saved_nbytes(self):
        return self.unshared_nbytes - self.nbytes


def plan_arena(requests, reuse=True, alignment=ALIGNMENT):
    """Assign aligned offsets; with reuse=False every buffer gets its own bytes."""
    unshared = sum(align_up(r.nbytes, alignment) for r in requests)
    offsets = {}
    if not reuse:
        off = 0
        for r in requests:
            offsets[r.key] = off
            off += align_up(r.nbytes, alignment)
        return ArenaPlan(offsets, off, unshared)
    placed = []   # (offset, end, request)
    order = sorted(range(len(requests)), key=lambda i: (-requests[i].nbytes, requests[i].first, i))
    total = 0
    for i in order:
        r = requests[i]
        size = align_up(r.nbytes, alignment)
        busy = sorted((o, e) for o, e, p in placed if p.overlaps(r))
        off = 0
        for o, e in busy:
            if off + size <= o:
                break
            off = max(off, align_up(e, alignment))
        offsets[r.key] = off
        placed.append((off, off + size, r))
        total = max(total, off + size)
    return ArenaPlan(offsets, total, unshared)


def aligned_empty(nbytes, alignment=ALIGNMENT):
    """A uint8 array of nbytes whose data address is a multiple of alignment."""
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    shift = (-raw.ctypes.data) % alignment
    return raw[shift:shift + nbytes]
