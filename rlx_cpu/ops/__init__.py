"""The op families.  Importing this package imports every module in it, and
each module registers its family's graph methods, compile rules, gradient
rules, ONNX converters and functional wrappers (see rlx_cpu/registry.py).
A new family is a new module here: nothing else lists it."""
import importlib
import pkgutil

FAMILIES = tuple(sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")))

for _family in FAMILIES:
    importlib.import_module(f"{__name__}.{_family}")
