"""The Python API: `scsitrace.analyze(path, ...)` -> `Result`.

    import scsitrace
    r = scsitrace.analyze("trace.blktrace.0", window="0:10")
    r                                     # Result(block trace.blktrace.0: 185 I/Os ...)
    r.summary["bandwidth_mib_s"]          # the JSON contract, as a dict
    r.tables["latency"]                   # every table as a polars DataFrame
    r.ios                                 # the per-I/O table, as `analyze --ios` writes it

Every option of `scsitrace analyze` is a keyword with its type and default (`help(
scsitrace.analyze)`). Nothing has to be imported or called first. (The command also tunes the
C heap for speed, `scsitrace.heap.keep_freed_memory()`; a script analysing very large traces
may call it itself, first thing, before importing numpy: it only changes speed, never results.)
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields

import polars as pl

from . import core
from .errors import UsageError
from .model import Analysis
from .request import DEFAULTS, AnalysisRequest, OptionError, split_maps


@dataclass(repr=False)
class Result:
    """One analysed trace: `summary` (the JSON contract), `tables` (name -> polars frame:
    categories, segments, ios (both as --segments/--ios write them: device_id, the one
    vocabulary of docs/schemas/README.md), anomalies and the layer's declared tables, e.g.
    latency, srt, stages), and the `analysis` they come from."""

    summary: dict
    analysis: Analysis
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)

    @property
    def layer(self) -> str:
        return self.analysis.layer

    @property
    def ios(self) -> pl.DataFrame:
        return self.tables["ios"]

    def __repr__(self) -> str:
        s = self.summary
        name = os.path.basename(str(s.get("trace") or self.analysis.capture.path))
        parts = [f"{self.layer} {name}", f"format {self.analysis.capture.format}",
                 f"{s.get('ios_completed', self.analysis.ios_completed)} I/Os completed",
                 f"elapsed {s.get('elapsed_ns', self.analysis.elapsed_ns) / 1e9:.6g} s"]
        if s.get("bandwidth_mib_s") is not None:
            parts.append(f"{s['bandwidth_mib_s']:.4g} MiB/s")
        return f"Result({', '.join(parts)}; tables: {', '.join(self.tables)})"

    def _repr_pretty_(self, printer, cycle) -> None:      # IPython / Jupyter use this
        printer.text(repr(self))


def analyze(path: str | os.PathLike, *,
            format: str = DEFAULTS.format,
            lenient: bool = DEFAULTS.lenient,
            profile: str | None = DEFAULTS.profile,
            target: int | None = DEFAULTS.target,
            lun: int | None = DEFAULTS.lun,
            io_size: int | None = DEFAULTS.io_size,
            window: str | tuple[float | None, float | None] | None = DEFAULTS.window,
            device: str | None = DEFAULTS.device,
            pid: str | int | None = DEFAULTS.pid,
            settle_ns: int | None = DEFAULTS.settle_ns,
            data_polarity: str = DEFAULTS.data_polarity,
            mapping: dict[str, str] | list[str] | None = DEFAULTS.mapping,
            active_low: list[str] | str | None = None,
            route: str | None = DEFAULTS.route,
            command_set: str | None = DEFAULTS.command_set,
            btt_compat: bool = DEFAULTS.btt_compat,
            stall_factor: float = DEFAULTS.stall_factor) -> Result:
    """Parse and analyse one trace, as `scsitrace analyze TRACE` does.

    path: the trace file (a blktrace capture by its first per-CPU file).
    format: "auto" (detect) or a parser name (scsitrace.parsers.formats()).
    lenient: skip bad records and count them instead of raising BadInput.
    profile: category profile (None: the layer's; bus: raid1990 or scsi).
    target: bus, kernel logs: only this SCSI target ID's time and I/Os.
    lun: bus, usb, kernel logs: only this logical unit's I/Os.
    io_size: bytes per I/O, for bandwidth where the trace has no byte counts (> 0).
    window: "START:END" or (START, END), seconds from the trace start; either may be empty/None.
    device: block "MAJOR,MINOR"; usb "BUS:ADDR[:LUN]"; kernel logs "HOST:CHANNEL:ID:LUN" or a name.
    pid: block, sg logs: "42,dd" (pids or process names) or one pid.
    settle_ns: bus: shorter line states are skew (>= 0; None: 400, or the format's own).
    data_polarity: bus: "auto", "high" (DB lines as captured) or "low" (inverted).
    mapping: logic captures: {bus line: capture signal}, e.g. {"REQ": "D3"} (or ["REQ=D3"]).
    active_low: logic captures: signals (or "all") that are active-low.
    route: usbmon pcap: "native" (default) or "pyshark".
    command_set: bus: the vendor opcode names of a device family ("pce": NEC PC Engine CD-ROM).
    btt_compat: block: pair D and C events as btt does where requests in flight share sectors.
    stall_factor: the stalls table lists I/Os slower than this x the median of their kind (> 0).

    Raises scsitrace.errors.UsageError naming the keyword for a bad option value (type or
    range), and other ScsitraceError subclasses for bad input (BadInput names the file and
    the line or byte offset)."""
    from .reports import summary as summ, typed_export
    req = _request(path, format=format, lenient=lenient, profile=profile, target=target, lun=lun,
                   io_size=io_size, window=window, device=device, pid=pid, settle_ns=settle_ns,
                   data_polarity=data_polarity, mapping=mapping, active_low=active_low, route=route,
                   command_set=command_set, btt_compat=btt_compat, stall_factor=stall_factor)
    try:
        analysis = core.run(req, series=True)
        s = summ.summary(analysis, req.profile, req.target, req.io_size, req.lun)
    except UsageError as exc:           # checks that need the trace (a block device, a pid)
        raise _keyword_named(exc) from None
    tables = {"categories": summ.categories(analysis, s["profile"], req.target, req.lun),
              "segments": typed_export.segments_export(analysis), "ios": typed_export.ios_export(analysis),
              "anomalies": analysis.anomalies, **{t.name: analysis.table(t.name) for t in analysis.declared}}
    return Result(summary=s, analysis=analysis, tables=tables)


def _keyword_named(exc: UsageError) -> UsageError:
    """The error of a check made below the request (by a layer, a parser), which names the
    option as the command line spells it, naming the keyword instead."""
    if isinstance(exc, OptionError):
        return exc.renamed(exc.option)
    text = str(exc)
    m = re.match(r"--([a-z][a-z-]*)", text)
    name = m and ("mapping" if m.group(1) == "map" else m.group(1).replace("-", "_"))
    if not m or name not in _KEYWORDS:
        return exc
    return UsageError(name + text[m.end():])


_KEYWORDS = {f.name for f in fields(AnalysisRequest)} - {"trace"}


def _request(path, *, mapping, **options) -> AnalysisRequest:
    """The request of analyze's keywords; a bad value is a UsageError naming its keyword."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"path must be a file name, got {type(path).__name__}")
    try:
        if isinstance(mapping, (list, tuple, str)):
            mapping = split_maps(mapping)
        return AnalysisRequest(trace=os.fspath(path), mapping=mapping, **options)
    except OptionError as exc:
        raise exc.renamed(exc.option) from None
