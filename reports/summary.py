"""The JSON contract of `analyze --json` (README "JSON contract"), built from an Analysis.

The one place where an analysis becomes figures: the percentage table (per target too),
bandwidth, I/O rate, anomalies and records from the canonical tables, and each of the
layer's declared tables (scsitrace/tables.py) as its JSON key. The terminal, CSV, HTML and
the regression gate render this summary, so they all show the same numbers.
"""
from __future__ import annotations

import polars as pl

from scsitrace.model import Analysis
from scsitrace.clock import start_epoch_ns
from scsitrace.tables import percent_table

MIB = float(1 << 20)
LAYER_ONLY = {"targets", "target_categories"}   # shown in the JSON as `targets` (see targets())
BYTES_SOURCE = {  # where each layer's byte counts come from, said next to every bandwidth
    "bus": "bytes counted from REQ/ACK handshakes in DATA phases",
    "usb": "bytes from the URB lengths of the data stages",
    "block": "bytes of the completed requests (C events)",
    "scsilog": "bytes the SG_IO calls transferred (dxfer_len - resid)",  # only sg logs count bytes
}
NO_BYTES = {  # why a layer's trace may carry no byte counts, in its own words
    "bus": "the trace has no REQ/ACK handshakes to count bytes",
    "scsilog": "kernel logs carry no transfer sizes",
    "usb": "the capture has no data-stage URB lengths",
    "block": "the trace has no completed requests with sizes",
}
def categories(analysis: Analysis, profile: str, target: int | None = None, lun: int | None = None) -> pl.DataFrame:
    """name, total_ns, percent, normalized_ns in the profile's order: the layer's table
    (the layer applied --target/--lun; `target`/`lun` are only checked against that)."""
    _check_filters(analysis, target, lun)
    if profile in analysis.categories:
        return analysis.categories[profile]
    return percent_table({}, list(analysis.category_order[profile]), analysis.elapsed_ns,
                         analysis.ios_completed, analysis.no_normalized)


def _check_filters(analysis: Analysis, target, lun) -> None:
    """A caller's target/lun must be the ones the layer applied (filters live in the layer)."""
    for name, value in (("target", target), ("lun", lun)):
        if value is not None and analysis.filters.get(name) not in (value, str(value)):
            raise ValueError(f"{name}={value} was not applied by the analysis (pass it to core.load)")


def bandwidth(analysis: Analysis, io_size: int | None):
    """(data_bytes, MiB/s, note). Bytes counted by the layer, else io_size x I/Os completed."""
    ios = analysis.ios_completed
    secs = analysis.elapsed_ns / 1e9
    header_size = analysis.capture.meta.get("io_size")
    if io_size is None and header_size is not None and str(header_size).isdigit():
        io_size = int(header_size)
    if analysis.data_bytes is not None:
        data = analysis.data_bytes
        note = BYTES_SOURCE.get(analysis.layer, "bytes counted by the trace")
    elif io_size:
        data = io_size * ios
        note = f"bytes = --io-size {io_size} x {ios} I/Os completed (the trace has no byte counts)"
    else:
        return None, None, (f"bandwidth unknown: {NO_BYTES.get(analysis.layer, 'the trace gives no byte counts')}; "
                            "give --io-size BYTES")
    return data, (data / MIB / secs if secs > 0 else None), note


def targets(analysis: Analysis, profile: str) -> list[dict]:
    """The layer's per-target tables as the JSON contract shows them (bus only)."""
    if "targets" not in analysis.tables:
        return []
    from scsitrace.bus.selection import targets_json
    return targets_json(analysis.table("targets"), analysis.table("target_categories"), profile)


def anomalies(analysis: Analysis) -> dict:
    an = analysis.anomalies
    by_kind = dict(sorted(an.group_by("kind").len().iter_rows())) if an.height else {}
    first = [{"t_ns": r["t_ns"], "kind": r["kind"], "detail": r["detail"], "position": r["position"]}
             for r in an.sort("t_ns").head(20).iter_rows(named=True)]
    return {"count": an.height, "by_kind": by_kind, "first": first}


def summary(analysis: Analysis, profile: str | None = None, target: int | None = None,
            io_size: int | None = None, lun: int | None = None) -> dict:
    profile = profile or analysis.default_profile
    if profile not in analysis.category_order and profile not in analysis.categories:
        from scsitrace.errors import UsageError
        raise UsageError(f"profile {profile!r} does not apply to {analysis.layer} traces "
                         f"(use {', '.join(analysis.category_order)})")
    _check_filters(analysis, target, lun)
    target = analysis.filters.get("target") if target is None else target
    cats = categories(analysis, profile)
    data, bw, bw_note = bandwidth(analysis, io_size)
    ios = analysis.ios_completed
    secs = analysis.elapsed_ns / 1e9
    notes = list(analysis.notes)
    notes.append(bw_note)
    out = {
        "source": analysis.source,
        "layer": analysis.layer,
        "profile": profile,
        "target": target,
        "elapsed_ns": int(analysis.elapsed_ns),
        "start_epoch_ns": start_epoch_ns(analysis),
        "ios_completed": int(ios),
        "data_bytes": data,
        "bandwidth_mib_s": bw,
        "iops": ios / secs if secs > 0 else None,
        "categories": cats.to_dicts(),
        "targets": targets(analysis, profile),
        "anomalies": anomalies(analysis),
        "records": analysis.capture.records.as_json(),
        "notes": notes,
    }
    if analysis.filters:
        out["filters"] = dict(analysis.filters)
    for table in analysis.declared:
        if table.name not in LAYER_ONLY and table.in_json:
            out[table.name] = table.to_json(analysis.table(table.name))
    return out
