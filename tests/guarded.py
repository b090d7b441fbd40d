"""Run one thunk of a compiled plan on separately allocated, NaN-guarded
buffers: every slice gets its own array with GUARD floats of NaN (inputs) or
a sentinel (everything else) on both sides.  A kernel that reads outside its
slices then produces NaN, and one that writes outside them changes a guard,
in the normal (unchecked) build too."""
import numpy as np

GUARD = 256
SENTINEL = np.float32(-7.25e11)


class Guarded:
    def __init__(self, plan):
        self.plan = plan
        self.bufs = {}

    def _buf(self, s):
        key = (s.segment, s.offset, s.nbytes)
        if key not in self.bufs:
            n = s.nbytes // 4
            big = np.full(n + 2 * GUARD, SENTINEL, np.float32)
            big[:GUARD] = np.nan
            big[GUARD + n:] = np.nan
            if s.segment == "const":
                big[GUARD:GUARD + n] = self.plan._const[s.offset:s.offset + s.nbytes].view(np.float32)
            self.bufs[key] = big
        return self.bufs[key]

    def view(self, s):
        return self._buf(s)[GUARD:GUARD + s.nbytes // 4]

    def run(self, feeds, nthreads=None):
        """Run every thunk of the plan in order on guarded buffers; return outputs."""
        for name, s in self.plan.input_slices.items():
            self.view(s)[:] = np.asarray(feeds[name], np.float32).reshape(-1)
        launches = [t.bind(self.view) for t in self.plan.thunks]
        for launch in launches:
            launch.execute(nthreads or self.plan.num_threads)
        p = self.plan
        return [self.view(s).view(d).reshape(shape).copy()
                for shape, s, d in zip(p.output_shapes, p.output_slices, p.output_dtypes)]

    def guards_intact(self):
        for big in self.bufs.values():
            head, tail = big[:GUARD], big[-GUARD:]
            if not (np.isnan(head).all() and np.isnan(tail).all()):
                return False
        return True
