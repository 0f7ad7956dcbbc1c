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
OTHER_TARGETS = "Other targets"
OTHER_LUNS = "Other LUNs"


def _others(target, lun) -> str:
    return OTHER_LUNS if target is None else OTHER_TARGETS if lun is None else "Other targets and LUNs"


def _picked(target: int | None, lun: int | None) -> pl.Expr:
    """Rows (segments with a `lun` column, or ios) of the selected target and LUN."""
    keep = pl.lit(True)
    if target is not None:
        keep &= pl.col("target").fill_null(-1) == target
    if lun is not None:
        keep &= pl.col("lun").fill_null(-1) == lun
    return keep


def _segments_with_lun(analysis: Analysis) -> pl.DataFrame:
    """The segments, each with the LUN of its I/O (null where it has none)."""
    seg = analysis.segments
    if "lun" in seg.columns:
        return seg
    return seg.join(analysis.ios.select("io", "lun"), on="io", how="left") if seg.height else \
        seg.with_columns(pl.lit(None, dtype=pl.Int16).alias("lun"))


def categories(analysis: Analysis, profile: str, target: int | None = None, lun: int | None = None) -> pl.DataFrame:
    """name, total_ns, percent, normalized_ns in the profile's order; sums to elapsed time.

    With `target` (and/or `lun`, bus), only that target's (LUN's) segments keep their
    category; bus-busy time of the others is shown as "Other targets" ("Other LUNs"), so the
    percentages still sum to 100. Layers that hand over ready-made tables applied their
    filters themselves.
    """
    if profile in analysis.categories:
        return analysis.categories[profile]
    order = list(analysis.category_order[profile])
    col = "phase" if profile == "scsi" else "category"
    seg = analysis.segments if lun is None else _segments_with_lun(analysis)
    seg = seg.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("dur"))
    others = _others(target, lun)
    if target is not None or lun is not None:
        is_free = pl.col(col) == order[-1]
        seg = seg.with_columns(pl.when(~_picked(target, lun) & ~is_free).then(pl.lit(others))
                               .otherwise(pl.col(col)).alias(col))
        order.append(others)
    totals = dict(seg.group_by(col).agg(pl.col("dur").sum()).iter_rows())
    extra = [name for name in totals if name not in order and totals[name]]  # e.g. RESET, UNKNOWN when present
    no_normalized = set(analysis.no_normalized) | {others}
    return percent_table(totals, order + sorted(extra), analysis.elapsed_ns,
                         _ios_completed(analysis, target, lun), no_normalized)


def _ios_completed(analysis: Analysis, target: int | None, lun: int | None = None) -> int:
    if target is None and lun is None:
        return analysis.ios_completed
    ios = analysis.ios
    return int(ios.filter(pl.col("complete").fill_null(False) & _picked(target, lun)).height)


def bandwidth(analysis: Analysis, io_size: int | None, target: int | None = None, lun: int | None = None):
    """(data_bytes, MiB/s, note). Bytes from REQ/ACK handshakes, else io_size x I/Os."""
    ios = _ios_completed(analysis, target, lun)
    secs = analysis.elapsed_ns / 1e9
    header_size = analysis.capture.meta.get("io_size")
    if io_size is None and header_size is not None and str(header_size).isdigit():
        io_size = int(header_size)
    if analysis.data_bytes is not None:
        data = analysis.data_bytes
        if (target is not None or lun is not None) and analysis.layer == "bus":
            picked = analysis.segments if lun is None else _segments_with_lun(analysis)
            data = int(picked.filter(_picked(target, lun) & pl.col("phase").str.starts_with("DATA"))
                       ["bytes"].sum() or 0)
        note = BYTES_SOURCE.get(analysis.layer, "bytes counted by the trace")
    elif io_size:
        data = io_size * ios
        note = f"bytes = --io-size {io_size} x {ios} I/Os completed (the trace has no byte counts)"
    else:
        return None, None, (f"bandwidth unknown: {NO_BYTES.get(analysis.layer, 'the trace gives no byte counts')}; "
                            "give --io-size BYTES")
    return data, (data / MIB / secs if secs > 0 else None), note


def targets(analysis: Analysis, profile: str) -> list[dict]:
    if analysis.segment_targets is False:
        return []
    seg = analysis.segments
    if "target" not in seg.columns or seg["target"].is_null().all():
        return []
    out = []
    for t in sorted(x for x in seg["target"].unique().to_list() if x is not None):
        cats = categories(analysis, profile, target=t)
        busy = int(cats.filter(~pl.col("name").is_in([analysis.category_order[profile][-1], OTHER_TARGETS]))
                   ["total_ns"].sum())
        data, bw, _ = bandwidth(analysis, None, target=t)
        ios = analysis.ios.filter(pl.col("target") == t)
        out.append({
            "target": int(t),
            "ios_completed": int(ios["complete"].fill_null(False).sum()),
            "ios_started": int(ios.height),
            "connections": int(seg.filter(pl.col("target") == t)["connection"].drop_nulls().n_unique()),
            "busy_ns": busy,
            "busy_percent": 100.0 * busy / analysis.elapsed_ns if analysis.elapsed_ns else 0.0,
            "data_bytes": data,
            "bandwidth_mib_s": bw,
            "categories": {r["name"]: r["total_ns"] for r in cats.iter_rows(named=True)
                           if r["name"] != OTHER_TARGETS},
        })
    return out


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
    cats = categories(analysis, profile, target, lun)
    data, bw, bw_note = bandwidth(analysis, io_size, target, lun)
    ios = _ios_completed(analysis, target, lun)
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
        "targets": targets(analysis, profile) if target is None else [
            t for t in targets(analysis, profile) if t["target"] == target],
        "anomalies": anomalies(analysis),
        "records": analysis.capture.records.as_json(),
        "notes": notes,
    }
    if analysis.filters:
        out["filters"] = dict(analysis.filters)
    for table in analysis.declared:
        out[table.name] = table.to_json(analysis.table(table.name))
    return out
