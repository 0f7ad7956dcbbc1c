"""`scsitrace convert`: a trace's canonical tables (what its parser hands to the core) as
Parquet, for every layer.

- bus: the transitions (parsers/transitions_parquet.py writes them and reads them back,
  streamed, as format `transitions-parquet`);
- block: the blktrace events (`scsitrace.block.events.EVENTS`) and the processes;
- usb: the URB events (`scsitrace.usb.urbs.URBS`);
- scsilog: the commands (one row per command: start joined to its end; SG_IO lines carry
  their own columns, `scsitrace.scsilog.events.COMMAND_EXTRA`) and the kernel-log events
  (`scsitrace.scsilog.events.EVENTS`).

The first table of a layer goes to OUT.parquet, the others beside it as OUT.NAME.parquet.
Every schema is published in docs/schemas/ (reports/schemas.py).
"""
from __future__ import annotations

from pathlib import Path

import polars as pl

from .errors import ScsitraceError
from . import outputs
from .model import Capture

COMMANDS = {"device": pl.Utf8, "tag": pl.Int64, "cdb": pl.Binary, "pos": pl.Int64, "start_ns": pl.Int64,
            "end_ns": pl.Int64, "status": pl.Utf8, "host_byte": pl.Utf8, "reason": pl.Utf8}


def canonical_schemas(layer: str) -> dict[str, dict]:
    """table name -> declared columns, in write order (the first one is OUT.parquet)."""
    if layer == "bus":
        from .schema import TRANSITIONS
        return {"transitions": TRANSITIONS}
    if layer == "block":
        from .block.events import EVENTS, PROCESSES
        return {"events": EVENTS, "processes": PROCESSES}
    if layer == "usb":
        from .usb.urbs import URBS
        return {"urbs": URBS}
    from .scsilog.events import COMMAND_EXTRA, EVENTS
    return {"commands": {**COMMANDS, "response_ns": pl.Int64, **COMMAND_EXTRA}, "events": EVENTS}


def out_paths(out: str, names) -> dict[str, Path]:
    """table name -> file: the first one `out`, the others OUT.NAME.parquet beside it."""
    out = Path(out)
    stem = out.name[:-len(".parquet")] if out.name.lower().endswith(".parquet") else out.name
    names = list(names)
    return {n: out if i == 0 else out.with_name(f"{stem}.{n}.parquet") for i, n in enumerate(names)}


def _tables(capture: Capture) -> dict[str, pl.DataFrame]:
    declared = canonical_schemas(capture.layer)
    frames = {}
    for name, cols in declared.items():
        if name == "commands" and name not in capture.frames:   # kernel logs: paired here
            from .scsilog.analysis import commands
            frame = commands(capture.frames["events"])
        else:
            frame = capture.frames[name]
        # declared columns in order (null where a format does not fill one), nothing dropped
        sel = [pl.col(c).cast(t) if c in frame.columns else pl.lit(None, dtype=t).alias(c) for c, t in cols.items()]
        frames[name] = frame.select(sel + [pl.col(c) for c in frame.columns if c not in cols])
    return frames


def write(capture: Capture, out: str) -> list[tuple[Path, int]]:
    """Write the capture's canonical tables; (file, rows) per table. A capture without a
    record of its layer is bad input."""
    if capture.layer == "bus":
        from .parsers import transitions_parquet
        return [(Path(out), transitions_parquet.write(out, capture))]
    frames = _tables(capture)
    first = next(iter(frames))
    if frames[first].height == 0 and all(f.height == 0 for f in frames.values()):
        raise ScsitraceError(f"{capture.path}: no {capture.layer} records found ({capture.format} format, "
                             f"{capture.records.read} record(s) read): nothing to convert")
    paths = out_paths(out, frames)
    written = []
    for name, frame in frames.items():
        outputs.write_frame(paths[name], frame, parquet=True)
        written.append((paths[name], frame.height))
    return written
