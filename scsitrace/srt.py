"""Service response time per SCSI opcode, shared by the usb and scsilog layers.

The statistic is the one `tshark -z scsi,srt,<set>` prints (calls, min, max, avg of the
time from the command to its response), plus the percentiles and histogram it lacks.
Percentiles are nearest-rank (the smallest observed time with at least p % of the calls
at or below it), so they are always times that occurred.
"""
from __future__ import annotations

import math

from . import schema

import numpy as np
import polars as pl

# histogram bucket upper bounds: powers of two of microseconds, from 1 us
HIST_EDGES_NS = [1000 << k for k in range(0, 24)]


def nearest_rank(sorted_ns: np.ndarray, p: float) -> int:
    """Nearest-rank percentile of an ascending array: value at rank ceil(p/100 * n)."""
    n = len(sorted_ns)
    rank = max(1, math.ceil(p / 100.0 * n))
    return int(sorted_ns[rank - 1])


def table(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> pl.DataFrame:
    """One row per opcode over commands with a measured response time:
    opcode, name, calls, min_ns, max_ns, avg_ns, sum_ns, p50_ns, p99_ns (by opcode)."""
    done = ios.filter(pl.col(ok_col) & pl.col(time_col).is_not_null() & pl.col("opcode").is_not_null())
    schema = {"opcode": pl.Int64, "name": pl.Utf8, "calls": pl.Int64, "min_ns": pl.Int64,
              "max_ns": pl.Int64, "avg_ns": pl.Float64, "sum_ns": pl.Int64, "p50_ns": pl.Int64,
              "p99_ns": pl.Int64}
    if not done.height:
        return pl.DataFrame(schema=schema)
    agg = (done.group_by("opcode")
           .agg(pl.col("command").first().alias("name"),
                pl.len().cast(pl.Int64).alias("calls"),
                pl.col(time_col).min().alias("min_ns"),
                pl.col(time_col).max().alias("max_ns"),
                pl.col(time_col).mean().alias("avg_ns"),
                pl.col(time_col).sum().alias("sum_ns"),
                pl.col(time_col).sort().alias("_sorted"))
           .sort("opcode"))
    p50 = [nearest_rank(np.asarray(v), 50) for v in agg["_sorted"].to_list()]
    p99 = [nearest_rank(np.asarray(v), 99) for v in agg["_sorted"].to_list()]
    return agg.drop("_sorted").with_columns(
        pl.Series("p50_ns", p50, dtype=pl.Int64), pl.Series("p99_ns", p99, dtype=pl.Int64),
        pl.col("opcode").cast(pl.Int64)).select(list(schema)).cast(schema)


def histogram(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> list[dict]:
    """Per opcode, counts of response times in buckets (le_ns = bucket's upper bound)."""
    done = ios.filter(pl.col(ok_col) & pl.col(time_col).is_not_null() & pl.col("opcode").is_not_null())
    out = []
    edges = np.asarray(HIST_EDGES_NS, dtype=np.int64)
    for (opcode,), grp in done.group_by(["opcode"], maintain_order=False):
        t = grp[time_col].to_numpy()
        idx = np.searchsorted(edges, t, side="left")
        counts = np.bincount(idx, minlength=len(edges) + 1)
        buckets = [{"le_ns": int(edges[i]) if i < len(edges) else None, "count": int(c)}
                   for i, c in enumerate(counts) if c]
        out.append({"opcode": int(opcode), "name": grp["command"][0], "buckets": buckets})
    return sorted(out, key=lambda r: r["opcode"])


def as_json(srt: pl.DataFrame) -> list[dict]:
    """The `"srt"` key of the JSON contract (exactly its fields)."""
    return [{"opcode": int(r["opcode"]), "name": r["name"], "calls": int(r["calls"]),
             "min_ns": int(r["min_ns"]), "max_ns": int(r["max_ns"]), "avg_ns": float(r["avg_ns"]),
             "p50_ns": int(r["p50_ns"]), "p99_ns": int(r["p99_ns"])}
            for r in srt.iter_rows(named=True)]


def commands_json(ios: pl.DataFrame) -> dict:
    """The `"commands"` key: totals reconcile, total = paired + unpaired."""
    total = ios.height
    paired = int(ios["paired"].sum()) if total else 0
    reasons = (ios.filter(~pl.col("paired")).group_by("reason").len().sort("reason")
               if total else pl.DataFrame({"reason": [], "len": []}))
    return {"total": total, "paired": paired, "unpaired": total - paired,
            "by_reason": {r: int(n) for r, n in reasons.iter_rows()}}


def devices_json(ios: pl.DataFrame, elapsed_ns: int) -> list[dict]:
    """Per device (bus:addr:lun or host:channel:id:lun, in numeric order): commands, bytes,
    MiB/s, IOPS, average response. Bytes and MiB/s are null when the layer has no sizes."""
    if not ios.height:
        return []
    secs = elapsed_ns / 1e9 if elapsed_ns else 0.0
    agg = ios.group_by("device").agg(
        pl.len().alias("commands"), pl.col("paired").sum().alias("paired"),
        pl.col("data_bytes").sum().alias("data_bytes"), pl.col("data_bytes").is_not_null().any().alias("sized"),
        pl.col("response_ns").filter(pl.col("paired")).mean().alias("avg_response_ns"))
    rows = sorted(agg.iter_rows(named=True), key=lambda r: _device_key(r["device"]))
    out = []
    for r in rows:
        data = int(r["data_bytes"]) if r["sized"] else None
        out.append({"device": r["device"], "commands": int(r["commands"]), "paired": int(r["paired"]),
                    "data_bytes": data,
                    "bandwidth_mib_s": data / float(1 << 20) / secs if secs and data is not None else None,
                    "iops": r["paired"] / secs if secs else None,
                    "avg_response_ns": r["avg_response_ns"]})
    return out


def _device_key(device: str) -> list:
    return [int(p) if p.isdigit() else p for p in str(device).split(":")]


def tile_pieces(pieces: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """Segments from stage pieces (device, io, start_ns, end_ns, phase, bytes): per device,
    each instant goes to the earliest-starting piece covering it (later overlapping pieces
    are clipped), and IDLE fills the rest of [0, elapsed_ns]. The result tiles exactly.
    Done in numpy: one lexsort, then per-device running maxima (offset by device)."""
    p = pieces.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if not p.height:
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    names = p["device"].unique().sort()
    dev = (p["device"].rank("dense").to_numpy() - 1).astype(np.int64)
    start, end = p["start_ns"].to_numpy(), p["end_ns"].to_numpy()
    order = np.lexsort((np.arange(len(start)), start, dev))
    dev, start, end = dev[order], start[order], end[order]
    span = max(int(end.max()), elapsed_ns, int(start.max())) + 1
    shifted = end + dev.astype(np.int64) * span          # running max restarts per device
    covered = np.maximum.accumulate(shifted) - dev.astype(np.int64) * span
    prev = np.concatenate(([-1], covered[:-1]))
    new_dev = np.concatenate(([True], dev[1:] != dev[:-1]))
    prev[new_dev] = -1
    start = np.maximum(start, prev)
    keep = end > start
    kept = order[keep]
    dev_k, start_k, end_k, cov_k = dev[keep], start[keep], end[keep], covered[keep]
    # IDLE: before each device's first piece, between pieces, after its last piece
    last = np.concatenate((dev_k[1:] != dev_k[:-1], [True]))
    nxt = np.concatenate((start_k[1:], [elapsed_ns]))
    nxt[last] = elapsed_ns
    gap = nxt > cov_k
    first = np.concatenate(([True], dev_k[1:] != dev_k[:-1])) & (start_k > 0)
    seg = p[kept].select("io", "phase", "bytes").with_columns(
        pl.Series("_dev", dev_k), pl.Series("start_ns", start_k), pl.Series("end_ns", end_k))
    idle = pl.DataFrame({
        "_dev": np.concatenate((dev_k[gap], dev_k[first])),
        "start_ns": np.concatenate((cov_k[gap], np.zeros(int(first.sum()), dtype=np.int64))),
        "end_ns": np.concatenate((nxt[gap], start_k[first])),
    }).with_columns(pl.lit(None, dtype=pl.Int64).alias("io"), pl.lit("IDLE").alias("phase"),
                    pl.lit(None, dtype=pl.Int64).alias("bytes"))
    out = pl.concat([seg.with_columns(pl.col("io").cast(pl.Int64), pl.col("bytes").cast(pl.Int64)),
                     idle.select(seg.columns)], rechunk=True)
    out = out[np.lexsort((out["start_ns"].to_numpy(), out["_dev"].to_numpy()))]
    out = out.with_columns(names.gather(out["_dev"]).alias("device")).drop("_dev")
    return out.with_columns(
        pl.col("phase").alias("category"),
        pl.lit(None, dtype=pl.Int8).alias("target"), pl.lit(None, dtype=pl.Int8).alias("initiator"),
        pl.lit(None, dtype=pl.Int64).alias("connection"), pl.lit(None, dtype=pl.UInt8).alias("msg"),
        pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64)).select(*schema.SEGMENTS, "device")


def categories(segments: pl.DataFrame, stages, elapsed_ns: int, completed: int) -> pl.DataFrame:
    """Stage totals summed over devices; percent of (devices x elapsed), so they sum to 100."""
    n_dev = segments["device"].n_unique() if segments.height else 0
    whole = elapsed_ns * n_dev
    totals = dict(segments.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"))
                  .group_by("phase").agg(pl.col("d").sum()).iter_rows()) if segments.height else {}
    rows = [{"name": s, "total_ns": int(totals.get(s, 0)),
             "percent": 100.0 * totals.get(s, 0) / whole if whole else 0.0,
             "normalized_ns": (totals.get(s, 0) / completed if completed and s != "IDLE" else None)}
            for s in stages]
    return pl.DataFrame(rows, schema={"name": pl.Utf8, "total_ns": pl.Int64, "percent": pl.Float64,
                                      "normalized_ns": pl.Float64})
