"""Build script for the rlx_cpu Cython kernels.

Environment switches read here:

* ``RLX_CYTHON_DEBUG=1`` compiles every kernel with ``boundscheck``,
  ``wraparound`` and ``initializedcheck`` on (and ``-O1 -g``) so the whole test
  suite can be run against checked kernels.
* ``RLX_DISABLE_OPENMP=1`` builds without OpenMP even when the compiler has it
  (kernels then run single-threaded; useful to test that configuration).

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
            try:
                objs = compiler.compile([src], output_dir=tmp, extra_postargs=cflags)
                compiler.link_executable(objs, "probe", output_dir=tmp, extra_postargs=lflags)
            except Exception:
                continue
            return cflags, lflags
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BuildExtWithOpenMP(build_ext):
    """Adds optimisation and (when the compiler supports it) OpenMP flags."""

    def build_extensions(self):
        omp = _probe_openmp(self.compiler)
        ctype = self.compiler.compiler_type
        if ctype == "msvc":
            opt = ["/Od", "/Zi"] if DEBUG else ["/O2"]
        else:
            opt = ["-O1", "-g"] if DEBUG else ["-O3"]
            opt += ["-Wno-unused-function", "-Wno-unreachable-code"]
        for ext in self.extensions:
            ext.extra_compile_args = list(opt)
            ext.extra_link_args = []
            if omp is not None:
                ext.extra_compile_args += omp[0]
                ext.extra_link_args += omp[1]
                ext.define_macros.append(("RLX_HAVE_OPENMP", "1"))
        self.announce("rlx_cpu: OpenMP %s" % ("ON " + " ".join(omp[0]) if omp else "OFF"), level=2)
        print("rlx_cpu build: OpenMP", "on" if omp else "off", "| debug checks", "on" if DEBUG else "off")
        super().build_extensions()


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
            include_dirs=[SRC_DIR, numpy.get_include()],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"), ("RLX_DEBUG_CHECKS", "1" if DEBUG else "0")],
        )
        for name in KERNEL_MODULES
    ]
    # Generated C files must never be reused across a debug/release switch
    # (in either direction): a stamp records the mode they were made in.
    stamp = os.path.join("build", "cython_mode")
    mode = "debug" if DEBUG else "release"
    try:
        with open(stamp) as fh:
            mode_changed = fh.read().strip() != mode
    except OSError:
        mode_changed = True
    out = cythonize(
        exts,
        compiler_directives=directives,
        include_path=[SRC_DIR],
        force=DEBUG or mode_changed or _env_on("RLX_FORCE_CYTHONIZE"),
    )
    os.makedirs("build", exist_ok=True)
    with open(stamp, "w") as fh:
        fh.write(mode)
    return out


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExtWithOpenMP})
