import numpy
import rlx_cpu
from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize([Extension("capi_user", ["capi_user.pyx"], include_dirs=[rlx_cpu.get_include()])],
                            compiler_directives={"language_level": 3}, quiet=True))
