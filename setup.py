"""Build script for the rlx_cpu Cython kernels.

Environment switches read here:

* ``RLX_CYTHON_DEBUG=1`` compiles every kernel with ``boundscheck``,
  ``wraparound`` and ``initializedcheck`` on (and ``-O1 -g``) so the whole test
  suite can be run against checked kernels.
* ``RLX_DISABLE_OPENMP=1`` builds without OpenMP even when the compiler has it
  (kernels then run single-threaded; useful to test that configuration).
* ``RLX_FORCE_CYTHONIZE=1`` regenerates every C file.

Switching between these modes in one tree is safe: debug and release C files
are generated into separate directories (``build/cython-debug``,
``build/cython-release``), and a stamp in the build directory forces every
extension to be recompiled when the mode (debug, OpenMP and optimisation
flags) changed since the last build.  Without this, ``build_ext --inplace``
after a debug build would keep the debug kernels, because setuptools and
cythonize only compare file times.

OpenMP is detected by compiling a tiny probe with the flags each compiler
family uses (gcc/clang ``-fopenmp``, Apple clang ``-Xpreprocessor -fopenmp``
with libomp, MSVC ``/openmp``).  If no probe succeeds the extension is built
without OpenMP and ``prange`` loops run serially.
"""
import os
import sys
import shutil
import tempfile
import textwrap

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Every src/*.pyx is one extension module rlx_cpu.<name>.
KERNEL_MODULES = sorted(os.path.splitext(f)[0] for f in os.listdir("src") if f.endswith(".pyx"))
SRC_DIR = "src"


def _env_on(name):
    return os.environ.get(name, "").strip().lower() in ("1", "on", "true", "yes")


DEBUG = _env_on("RLX_CYTHON_DEBUG")
# Generated C depends on the Cython directives, so each mode keeps its own.
CYTHON_BUILD_DIR = os.path.join("build", "cython-debug" if DEBUG else "cython-release")

_OMP_PROBE = textwrap.dedent(
    """
    #include <omp.h>
    #include <stdio.h>
    int main(void) {
        int n = 0;
        #pragma omp parallel reduction(+:n)
        n += 1;
        printf("%d", n + omp_get_max_threads());
        return 0;
    }
    """
)


def _openmp_flag_candidates(compiler):
    ctype = getattr(compiler, "compiler_type", "")
    if ctype == "msvc":
        return [(["/openmp"], [])]
    cands = [(["-fopenmp"], ["-fopenmp"])]
    if sys.platform == "darwin":
        prefixes = [os.environ.get("LIBOMP_PREFIX", ""), "/opt/homebrew/opt/libomp", "/usr/local/opt/libomp"]
        for pre in prefixes:
            if pre and os.path.isdir(pre):
                cands.append(
                    (
                        ["-Xpreprocessor", "-fopenmp", "-I" + os.path.join(pre, "include")],
                        ["-L" + os.path.join(pre, "lib"), "-lomp"],
                    )
                )
        cands.append((["-Xpreprocessor", "-fopenmp"], ["-lomp"]))
    return cands


def _links(compiler, tmp, sources, cflags, lflags):
    """True when `sources` compile with cflags and link into a program with lflags."""
    try:
        objs = compiler.compile(sources, output_dir=tmp, extra_postargs=cflags)
        compiler.link_executable(objs, "probe", output_dir=tmp, extra_postargs=lflags)
    except Exception:
        return False
    return True


def _probe_openmp(compiler):
    """Return (compile_args, link_args) that build an OpenMP program, or None."""
    if _env_on("RLX_DISABLE_OPENMP"):
        return None
    tmp = tempfile.mkdtemp(prefix="rlx_omp_probe_")
    try:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as fh:
            fh.write(_OMP_PROBE)
        for cflags, lflags in _openmp_flag_candidates(compiler):
            if _links(compiler, tmp, [src], cflags, lflags):
                return cflags, lflags
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# src/rlx_gomp_wrap.h: one-thread parallel regions skip libgomp's team.
_GOMP_WRAP_CFLAGS = ["-include", os.path.join(SRC_DIR, "rlx_gomp_wrap.h")]
_GOMP_WRAP_LINK = ["-Wl,--wrap=GOMP_parallel"]


def _probe_gomp_wrap(compiler, omp):
    """True when an OpenMP program builds with its regions going through
    src/rlx_gomp_wrap.h (GCC's GOMP_parallel, -include and GNU ld's --wrap)."""
    if omp is None or sys.platform == "darwin" or compiler.compiler_type == "msvc":
        return False
    tmp = tempfile.mkdtemp(prefix="rlx_gomp_probe_")
    try:
        src = os.path.join(tmp, "probe.c")
        with open(src, "w") as fh:
            fh.write(_OMP_PROBE)
        return _links(compiler, tmp, [src], omp[0] + _GOMP_WRAP_CFLAGS, omp[1] + _GOMP_WRAP_LINK)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildExtWithOpenMP(build_ext):
    """Adds optimisation and (when the compiler supports it) OpenMP flags."""

    def finalize_options(self):
        """Compile the extensions in parallel, one job per CPU, unless
        `--parallel`/`-j` or RLX_BUILD_JOBS says otherwise: pip and
        `python -m build` pass no -j, and one build of every kernel took
        5-6 minutes on one core of a 2-core Zen 3 against 3 minutes on two."""
        super().finalize_options()
        if not self.parallel:
            jobs = os.environ.get("RLX_BUILD_JOBS", "").strip()
            self.parallel = int(jobs) if jobs else (os.cpu_count() or 1)
        if self.parallel == 1:
            self.parallel = None

    def build_extensions(self):
        omp = _probe_openmp(self.compiler)
        wrap = _probe_gomp_wrap(self.compiler, omp)
        ctype = self.compiler.compiler_type
        if ctype == "msvc":
            opt = ["/Od", "/Zi"] if DEBUG else ["/O2"]
        else:
            # -g0: Python's own CFLAGS often carry -g, which would make the
            # release extensions five times larger.
            opt = ["-O1", "-g"] if DEBUG else ["-O3", "-g0"]
            opt += ["-Wno-unused-function", "-Wno-unreachable-code"]
        for ext in self.extensions:
            ext.extra_compile_args = list(opt)
            ext.extra_link_args = []
            if omp is not None:
                ext.extra_compile_args += omp[0]
                ext.extra_link_args += omp[1]
                ext.define_macros.append(("RLX_HAVE_OPENMP", "1"))
            if wrap:
                ext.extra_compile_args += _GOMP_WRAP_CFLAGS
                ext.extra_link_args += _GOMP_WRAP_LINK
                ext.define_macros.append(("RLX_GOMP_WRAPPED", "1"))
        mode = "debug=%s openmp=%s gomp_wrap=%s flags=%s" % ("on" if DEBUG else "off",
                                                            " ".join(omp[0]) if omp else "off",
                                                            "on" if wrap else "off", " ".join(opt))
        print("rlx_cpu build:", mode)
        # setuptools only compares file times, so a mode change must force a
        # full recompile or the previous mode's objects would be reused.
        stamp = os.path.join(self.build_temp, "rlx_build_mode.txt")
        try:
            with open(stamp) as fh:
                previous = fh.read().strip()
        except OSError:
            previous = None
        if previous != mode:
            if previous is not None:
                print("rlx_cpu build: mode changed from %r, recompiling every extension" % previous)
            self.force = True
        self._rlx_mode = mode
        super().build_extensions()
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w") as fh:
            fh.write(mode + "\n")


    def build_extension(self, ext):
        """Compile `ext`, or copy it from build/ext-cache when it was compiled
        before from the very same inputs.  pip builds every install in a fresh
        temporary build directory, so without this a second
        ``pip install -e ".[test]"`` after ``pip install -e .`` recompiled
        every kernel.  The key hashes everything the object depends on: the
        generated C, every header in src/, the build mode and flags, the
        compiler, the Python ABI and the numpy headers' version.  The C that
        cythonize generates names the (temporary) paths of numpy's and scipy's
        .pxd files, so the key hashes what the C is generated from instead:
        every source in src/ plus the Cython, numpy and scipy versions.
        RLX_NO_BUILD_CACHE=1 turns it off."""
        if _env_on("RLX_NO_BUILD_CACHE"):
            return super().build_extension(ext)
        import hashlib
        import sysconfig

        import Cython
        import numpy
        import scipy

        h = hashlib.sha256()
        for part in (ext.name, getattr(self, "_rlx_mode", ""), sys.version,
                     sysconfig.get_config_var("EXT_SUFFIX") or "", sys.platform, Cython.__version__,
                     numpy.__version__, scipy.__version__, repr(getattr(self.compiler, "compiler_so", "")),
                     repr(ext.define_macros), repr(ext.extra_compile_args), repr(ext.extra_link_args)):
            h.update(part.encode() + b"\0")
        with open(os.path.abspath(__file__), "rb") as fh:      # directives and flags live here
            h.update(fh.read())
        for name in sorted(os.listdir(SRC_DIR)):
            if name.endswith((".pyx", ".pxd", ".pxi", ".h", ".c")):
                with open(os.path.join(SRC_DIR, name), "rb") as fh:
                    h.update(name.encode() + b"\0" + fh.read())
        target = self.get_ext_fullpath(ext.name)
        cache_dir = os.path.join("build", "ext-cache")
        stem = ext.name.replace(".", "_")
        cached = os.path.join(cache_dir, "%s-%s%s" % (stem, h.hexdigest()[:24], os.path.splitext(target)[1]))
        if os.path.exists(cached):
            os.makedirs(os.path.dirname(target) or ".", exist_ok=True)
            shutil.copyfile(cached, target)
            print("rlx_cpu build: %s unchanged, reused %s" % (ext.name, cached))
            return None
        super().build_extension(ext)
        if os.path.exists(target):
            os.makedirs(cache_dir, exist_ok=True)
            # Keep the 3 newest entries per extension (e.g. release, debug and
            # no-OpenMP builds of one source).
            mine = sorted((os.path.join(cache_dir, f) for f in os.listdir(cache_dir) if f.startswith(stem + "-")),
                          key=os.path.getmtime)
            for old in mine[:-2]:
                os.remove(old)
            shutil.copyfile(target, cached + ".tmp")
            os.replace(cached + ".tmp", cached)
        return None


def _extensions():
    import numpy
    from Cython.Build import cythonize

    directives = {
        "language_level": 3,
        "boundscheck": DEBUG,
        "wraparound": DEBUG,
        "initializedcheck": DEBUG,
        "cdivision": True,
        "nonecheck": DEBUG,
        "embedsignature": True,
    }
    exts = [
        Extension(
            "rlx_cpu." + name,
            [os.path.join(SRC_DIR, name + ".pyx")],
            include_dirs=[SRC_DIR, os.path.join("rlx_cpu", "include"), numpy.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("RLX_DEBUG_CHECKS", "1" if DEBUG else "0")],
        )
        for name in KERNEL_MODULES
    ]
    # src/_launch.pyx is declared by src/rlx_cpu/_launch.pxd (that path lets
    # the other modules cimport it as rlx_cpu._launch), which cythonize does
    # not count as a dependency of the .pyx: regenerate its C when the
    # declaration is newer, or the module would disagree with its users.
    launch_c = os.path.join(CYTHON_BUILD_DIR, SRC_DIR, "_launch.c")
    launch_pxd = os.path.join(SRC_DIR, "rlx_cpu", "_launch.pxd")
    if os.path.exists(launch_c) and os.path.getmtime(launch_c) < os.path.getmtime(launch_pxd):
        os.remove(launch_c)
    return cythonize(
        exts,
        compiler_directives=directives,
        # "." finds the installed declarations (rlx_cpu/capi.pxd) _capi implements.
        include_path=[SRC_DIR, "."],
        build_dir=CYTHON_BUILD_DIR,
        force=_env_on("RLX_FORCE_CYTHONIZE"),
        # one process per CPU where workers fork (with spawn they would
        # re-run this setup.py)
        nthreads=(os.cpu_count() or 1) if sys.platform.startswith("linux") else 0,
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExtWithOpenMP})
