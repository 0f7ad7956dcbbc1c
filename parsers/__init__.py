"""One module per input format; each exposes ID, SUFFIXES, sniff(head) and parse(path, *, strict).

The registry is an explicit dict (no import magic): add a format by adding its module here
(see HACKING.md).
"""
from __future__ import annotations

from importlib import import_module

from scsitrace.errors import UnknownFormat, UsageError

# format id -> module name, in sniffing order (most specific magic first)
_MODULES = {
    "blktrace": "blktrace",
    "ancot": "ancot",
    "transitions-parquet": "transitions_parquet",
    "vcd": "vcd",
    "sigrok": "sigrok",
    "dsview": "dsview",
    "saleae": "saleae",
    
    
    "qemu_lsi": "qemu_lsi",
    "blkparse": "blkparse",
    "usbmon": "usbmon",
    "scsilog": "scsilog",
    "sgio": "sgio",
}


def module(fmt: str):
    if fmt not in _MODULES:
        raise UsageError(f"unknown format {fmt!r} (known: {', '.join(_MODULES)})")
    return import_module(f"{__name__}.{_MODULES[fmt]}")


def formats() -> list[str]:
    return list(_MODULES)


def detect(path: str) -> str:
    """Pick the format by content (magic), then by file name suffix."""
    path = _sniffable(path)
    with open(path, "rb") as fh:
        head = fh.read(65536)
    for fmt in _MODULES:  # imported one by one: sniffing stops at the first match
        if module(fmt).sniff(head):
            return fmt
    for fmt in _MODULES:
        if str(path).endswith(tuple(module(fmt).SUFFIXES)):
            return fmt
    raise UnknownFormat(f"{path}: format not recognised (known: {', '.join(_MODULES)}); "
                        "name one with --format")


def _sniffable(path: str) -> str:
    """A capture named by a base name that is no file (blktrace's `sda` for sda.blktrace.N):
    a module's `resolve_path(path)` hook names the file to sniff."""
    import os
    if os.path.exists(path):
        return path
    for fmt in _MODULES:
        resolve = getattr(module(fmt), "resolve_path", None)
        found = resolve(path) if resolve else None
        if found:
            return found
    return path


def parse(path: str, fmt: str = "auto", *, strict: bool = True, **opts):
    fmt = detect(path) if fmt in (None, "auto") else fmt
    return module(fmt).parse(path, strict=strict, **opts)
