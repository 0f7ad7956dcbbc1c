"""Wrong or empty input: a trace that holds no records of its layer is bad input (exit 2),
said in the layer's own words, instead of a table of zeros.

`require_records(analysis)` is called by `core.load` (so every command, `batch` and the
Python API) after the analysis; the parsers and `core.analyze` keep accepting such captures
(tests build captures piece by piece).
"""
from __future__ import annotations

from .errors import ScsitraceError
from .model import Analysis


class NoRecords(ScsitraceError):
    """The input parsed, but holds nothing the layer analyses."""


# layer -> (what its records are called, what the file would need to hold)
WHAT = {
    "bus": ("bus transitions", "line changes of the SCSI bus signals"),
    "block": ("block trace events", "blktrace queue/issue/complete events of a device"),
    "usb": ("USB mass-storage commands",
            "Bulk-Only (CBW/CSW) or UAS transfers of a storage device; other devices' URBs are not analysed"),
    "scsilog": ("SCSI command records",
                "ftrace scsi_dispatch_cmd_* events, kernel SCSI logging lines (scsi_logging_level: "
                "'Send:', 'Done:', 'CDB:'), or SG_IO ioctl lines"),
}


def records_of_layer(analysis: Analysis) -> int:
    """How many records of its own layer the analysis saw: bus transitions, block trace
    events, or the commands the usb and kernel-log layers rebuilt."""
    if analysis.layer == "bus":
        n = analysis.source.get("transitions")
        return int(n) if n is not None else analysis.segments.height
    if analysis.layer == "block":   # any trace event counts (a completion-only trace is analysed, with its note)
        return int(analysis.table("events")["records"].sum())
    if "commands" in analysis.tables:   # usb, kernel logs: the pairing table counts every command (the
        return int(analysis.table("commands")["commands"].sum())   # ios rows may be built on demand)
    return analysis.ios.height


def require_records(analysis: Analysis, lenient: bool = False) -> Analysis:
    """The analysis, or NoRecords (exit 2) when it holds no records of its layer. Under
    --lenient, a file whose records were all skipped as bad is analysed with a warning (the
    skipped records are what the user asked to see)."""
    refused = analysis.capture.meta.get("not_this_format")  # e.g. a QEMU USB trace read as qemu_lsi
    if refused:
        raise NoRecords(refused)
    if records_of_layer(analysis):
        return analysis
    what, needs = WHAT.get(analysis.layer, (f"{analysis.layer} records", "records of its layer"))
    read, skipped = analysis.capture.records.read, analysis.capture.records.skipped
    if lenient and skipped:
        analysis.notes.append(f"warning: no {what} found; {skipped} record(s) skipped as bad (--lenient)")
        return analysis
    raise NoRecords(f"{analysis.capture.path}: no {what} found ({analysis.capture.format} format, "
                    f"{read} record(s) read; the file needs {needs})")


# What a reader of a small input file takes at most: a manifest or a baseline larger than this
# is not one (/dev/zero, a capture named by mistake), refused instead of read until memory ends.
MANIFEST_BYTES = 16 << 20
BASELINE_BYTES = 64 << 20


def read_regular(path: str, limit: int, what: str) -> bytes:
    """The bytes of a small input file (a manifest, a baseline): a regular file only (a FIFO,
    a device or a socket is refused before it is opened: parsers.check_regular), at most
    `limit` bytes (a larger file is bad input, read no further)."""
    import os
    from scsitrace.errors import BadInput
    from scsitrace.parsers import check_regular
    if not os.path.lexists(path):
        raise FileNotFoundError(2, "no such file", path)
    check_regular(path)
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise BadInput(path, f"larger than {limit >> 20} MiB: not a {what}")
    return data


def inside(path: str, root: str) -> bool:
    """Whether `path` (followed through symbolic links) lies in the directory tree `root`."""
    import os
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)
