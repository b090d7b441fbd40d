# The common base of every bound kernel launch (src/_launch.pyx defines it).
#
# This file sits in src/rlx_cpu/ so that `from rlx_cpu._launch cimport Launch`
# names the extension module rlx_cpu._launch: a cdef class shared between
# extension modules is imported at module init under its package name, which
# a flat src/_launch.pxd would lose (it would be looked up as `_launch`).

cdef class Launch:
    """A kernel bound to one arena's memory.  Subclasses override run(), which
    executes the whole kernel without the GIL; execute(nthreads) is the Python
    entry and _runtime.run_launches the typed loop over a plan's launches."""
    cdef int run(self, int nthreads) except -1 nogil
