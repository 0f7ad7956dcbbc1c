"""The Python API: `scsitrace.analyze(path, **options)` -> `Result`.

    import scsitrace
    r = scsitrace.analyze("trace.blktrace.0", window="0:10")
    r.summary["bandwidth_mib_s"]          # the JSON contract, as a dict
    r.tables["latency"]                   # every table as a polars DataFrame
    r.tables["ios"].filter(...)

Options are those of `scsitrace analyze` with underscores (format, lenient, profile, target,
lun, io_size, window, device, pid, settle_ns, data_polarity, mapping, active_low, route).
Nothing has to be imported or called first. (The command also tunes the C heap for speed,
`scsitrace.heap.keep_freed_memory()`; a script analysing very large traces may call it
itself, first thing, before importing numpy: it only changes speed, never results.)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from . import core
from .model import Analysis


@dataclass
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


def analyze(path: str, *, format: str = "auto", lenient: bool = False, profile: str | None = None,
            target: int | None = None, lun: int | None = None, io_size: int | None = None,
            window: str | tuple | None = None, device: str | None = None, pid: str | None = None,
            settle_ns: int | None = None, data_polarity: str = "auto", mapping: dict | None = None,
            active_low: list | None = None, route: str | None = None) -> Result:
    """Parse and analyse one trace; raises scsitrace.errors.ScsitraceError subclasses on bad
    input (BadInput names the file and line or byte offset) or bad options (UsageError)."""
    from .reports import summary as summ
    parser_options = {k: v for k, v in (("mapping", mapping), ("active_low", active_low), ("route", route))
                      if v is not None}
    analysis = core.load(str(path), format, strict=not lenient, settle_ns=settle_ns, data_polarity=data_polarity,
                         io_size=io_size, window=window, device=device, pid=pid, target=target, lun=lun,
                         **parser_options)
    s = summ.summary(analysis, profile, target, io_size, lun)
    from .reports.typed_export import ios_export, segments_export   # the one vocabulary, device_id
    tables = {"categories": summ.categories(analysis, s["profile"], target, lun), "segments": segments_export(analysis),
              "ios": ios_export(analysis), "anomalies": analysis.anomalies,
              **{t.name: analysis.table(t.name) for t in analysis.declared}}
    return Result(summary=s, analysis=analysis, tables=tables)
