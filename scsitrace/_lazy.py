"""Layer packages export their analysis without importing it: parsers import only a
layer's frames module, and sniffing a file must not load every layer's analysis."""
from __future__ import annotations

from importlib import import_module


def from_analysis(package: str, names: list[str]):
    """A module `__getattr__` that imports `package.analysis` on the first use of one of `names`."""
    def __getattr__(name: str):
        if name in names:
            return getattr(import_module(f"{package}.analysis"), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    return __getattr__
