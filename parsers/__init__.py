"""One module per input format; each exposes ID, SUFFIXES, sniff(head) and parse(path, *, strict).

The registry is an explicit dict (no import magic): add a format by adding its module here
(see HACKING.md).
"""
from __future__ import annotations

from importlib import import_module

from scsitrace.errors import BadInput, UnknownFormat, UsageError

# format id -> module name, in sniffing order (most specific magic first; see sniffing_order)
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
# formats that read binary files: a head with a NUL byte is offered to them first (a capture
# whose payload holds a line of some text log is still that capture; their magics exclude
# each other, so among them the most common comes first), a head without one (text) is not
# offered to those that read only binary files, whose modules then stay unimported
READS_BINARY = ("usbmon", "blktrace", "transitions-parquet", "sigrok", "dsview")
BINARY_ONLY = READS_BINARY[1:]


def sniffing_order(head: bytes) -> list[str]:
    if b"\0" in head:
        return list(READS_BINARY) + [fmt for fmt in _MODULES if fmt not in READS_BINARY]
    return [fmt for fmt in _MODULES if fmt not in BINARY_ONLY]


def module(fmt: str):
    if fmt not in _MODULES:
        raise UsageError(f"unknown format {fmt!r} (known: {', '.join(_MODULES)})")
    return import_module(f"{__name__}.{_MODULES[fmt]}")


def formats() -> list[str]:
    return list(_MODULES)


def detect(path: str) -> str:
    """Pick the format by content (magic), then by file name suffix."""
    path = _sniffable(path)
    check_regular(path)
    with open(path, "rb") as fh:
        head = fh.read(65536)
    for fmt in sniffing_order(head):  # imported one by one: sniffing stops at the first match
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


def check_regular(path: str) -> None:
    """Refuse what is not a regular file before anything opens it: a FIFO or a terminal would
    block the read, /dev/zero never ends, a directory or a symlink loop cannot be read. An
    empty file is refused too (nothing to analyse; a per-CPU blktrace file may be empty,
    its reader says so when all of them are)."""
    import os
    import stat
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise BadInput(path, "no such file") from None
    except OSError as exc:
        raise BadInput(path, f"cannot be opened ({exc.strerror or exc})") from None
    if stat.S_ISDIR(mode):
        raise BadInput(path, "is a directory, not a trace file")
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)) \
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
        raise BadInput(path, f"is {kind}, not a regular file (save the capture to a file first)")


def parse(path: str, fmt: str = "auto", *, strict: bool = True, **opts):
    fmt = detect(path) if fmt in (None, "auto") else fmt
    mod = module(fmt)
    resolved = path
    resolve = getattr(mod, "resolve_path", None)
    if resolve is not None and not _exists(path):
        resolved = resolve(path) or path
    check_regular(resolved)
    if fmt != "blktrace" and _size(resolved) == 0:
        raise BadInput(path, "empty file: no records")
    command_set = opts.pop("command_set", None)      # names of vendor opcodes, for the bus walk
    capture = mod.parse(path, strict=strict, **opts)
    if command_set is not None:
        capture.meta["command_set"] = command_set
    return capture


def _exists(path: str) -> bool:
    import os
    return os.path.lexists(path)


def _size(path: str) -> int:
    import os
    return os.stat(path).st_size
