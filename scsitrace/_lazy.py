"""Names exported without importing what defines them: layer packages export their analysis
(parsers import only a layer's frames module, and sniffing a file must not load every
layer's analysis), and parsers their binary record declarations (construct)."""
from __future__ import annotations

from importlib import import_module


def from_analysis(package: str, names: list[str]):
    """A module `__getattr__` that imports `package.analysis` on the first use of one of `names`."""
    return from_module(package, f"{package}.analysis", names)


def from_module(exporter: str, module: str, names: list[str]):
    """The `__getattr__` of module `exporter`: imports `module` on the first use of one of `names`."""
    def __getattr__(name: str):
        if name in names:
            return getattr(import_module(module), name)
        raise AttributeError(f"module {exporter!r} has no attribute {name!r}")
    return __getattr__

