"""The op families.  Importing this package registers every family's graph
methods, compile rules, gradient rules, ONNX converters and functional
wrappers (see rlx_cpu/registry.py).  A family is one module; adding one is a
new module plus its name here."""
import importlib

FAMILIES = ("dense",)

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
