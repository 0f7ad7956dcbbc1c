"""Tables of SCSI commands with a response time, shared by the usb and scsilog layers: the
service response time per opcode (the statistic `tshark -z scsi,srt,<set>` prints: calls,
min, max, avg of the time from the command to its response, plus the percentiles of the
shared statistic record and a histogram it lacks), how the commands paired, and per device.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import stats
from .tables import Table

from .stats import HIST_EDGES_NS


def _measured(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> pl.DataFrame:
    """opcode, command and time of the commands with a measured response time."""
    return ios.select("opcode", "command", time_col, ok_col).filter(
        pl.col(ok_col) & pl.col(time_col).is_not_null() & pl.col("opcode").is_not_null())


def srt_table(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> pl.DataFrame:
    """SRT: one STAT row per opcode (ascending) over the commands with a measured response time."""
    return stats.by_group(_measured(ios, time_col, ok_col).with_columns(pl.col("opcode").cast(pl.Int64)),
                          "opcode", time_col, first={"name": "command"})


def histogram_table(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> pl.DataFrame:
    """SRT_HISTOGRAM: per opcode, the response times counted in buckets (le_ns = the bucket's
    upper bound, null for the last): one bincount over (opcode, bucket) pairs."""
    done = _measured(ios, time_col, ok_col)
    if not done.height:
        return SRT_HISTOGRAM.empty()
    edges = np.asarray(HIST_EDGES_NS, dtype=np.int64)
    width = len(edges) + 1
    op = done["opcode"].to_numpy().astype(np.int64)
    bucket = np.searchsorted(edges, done[time_col].to_numpy(), side="left")
    counts = np.bincount(op * width + bucket, minlength=(int(op.max()) + 1) * width).reshape(-1, width)
    names = dict(done.group_by("opcode").agg(pl.col("command").first()).iter_rows())
    rows = [(opcode, names[opcode], int(edges[i]) if i < len(edges) else None, int(c))
            for opcode in sorted(names) for i, c in enumerate(counts[opcode]) if c]
    return pl.DataFrame(rows, schema=SRT_HISTOGRAM.schema, orient="row")


def pairing_table(ios: pl.DataFrame) -> pl.DataFrame:
    """COMMANDS: how many commands paired (reason null) or not, by reason."""
    if not ios.height:
        return COMMANDS.empty()
    return (ios.group_by("reason").agg(pl.len().cast(pl.Int64).alias("commands"))
            .sort("reason", nulls_last=False).select(list(COMMANDS.schema)))


def device_table(ios: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """DEVICES: per device (bus:addr:lun or host:channel:id:lun, in numeric order): commands,
    bytes, MiB/s, IOPS, average response. Bytes and MiB/s are null when the layer has no sizes."""
    if not ios.height:
        return DEVICES.empty()
    secs = elapsed_ns / 1e9 if elapsed_ns else 0.0
    agg = ios.group_by("device").agg(
        pl.len().alias("commands"), pl.col("paired").sum().alias("paired"),
        pl.col("data_bytes").sum().alias("data_bytes"), pl.col("data_bytes").is_not_null().any().alias("sized"),
        pl.col("response_ns").filter(pl.col("paired")).mean().alias("avg_response_ns"))
    rows = []
    for r in sorted(agg.iter_rows(named=True), key=lambda r: _device_key(r["device"])):
        data = int(r["data_bytes"]) if r["sized"] else None
        rows.append({"device": r["device"], "commands": int(r["commands"]), "paired": int(r["paired"]),
                     "data_bytes": data,
                     "bandwidth_mib_s": data / float(1 << 20) / secs if secs and data is not None else None,
                     "iops": r["paired"] / secs if secs else None,
                     "avg_response_ns": r["avg_response_ns"]})
    return pl.DataFrame(rows, schema=DEVICES.schema)


def _device_key(device: str) -> list:
    return [int(p) if p.isdigit() else p for p in str(device).split(":")]


def _pairing_json(frame: pl.DataFrame) -> dict:
    """The `"commands"` key: totals reconcile, total = paired + unpaired."""
    total = int(frame["commands"].sum()) if frame.height else 0
    paired = int(frame.filter(pl.col("reason").is_null())["commands"].sum()) if frame.height else 0
    return {"total": total, "paired": paired, "unpaired": total - paired,
            "by_reason": {r: n for r, n in frame.filter(pl.col("reason").is_not_null()).iter_rows()}}


def _histogram_json(frame: pl.DataFrame) -> list[dict]:
    out = []
    for (opcode, name), part in frame.group_by("opcode", "name", maintain_order=True):
        out.append({"opcode": opcode, "name": name,
                    "buckets": part.select("le_ns", "count").to_dicts()})
    return out


SRT = Table("srt", {"opcode": pl.Int64, "name": pl.Utf8, **stats.STAT},
            "service response time per opcode (tshark's scsi,srt: calls = n), commands paired only",
            json_columns=("opcode", "name", "n", "min_ns", "max_ns", "avg_ns", "p50_ns", "p99_ns"),
            json_names={"n": "calls"})
SRT_HISTOGRAM = Table("srt_histogram", {"opcode": pl.Int64, "name": pl.Utf8, "le_ns": pl.Int64, "count": pl.Int64},
                      "response times per opcode in power-of-two buckets of microseconds",
                      json=_histogram_json)
COMMANDS = Table("commands", {"reason": pl.Utf8, "commands": pl.Int64},
                 "commands paired (reason null) and unpaired, by reason", json=_pairing_json)
DEVICES = Table("devices", {"device": pl.Utf8, "commands": pl.Int64, "paired": pl.Int64, "data_bytes": pl.Int64,
                            "bandwidth_mib_s": pl.Float64, "iops": pl.Float64, "avg_response_ns": pl.Float64},
                "per device: commands, bytes, MiB/s, IOPS, average response")
TABLES = (SRT, COMMANDS, SRT_HISTOGRAM, DEVICES)


def command_tables(ios: pl.DataFrame, elapsed_ns: int) -> dict[str, pl.DataFrame]:
    """Every table of TABLES from a command layer's ios."""
    return {"srt": srt_table(ios), "commands": pairing_table(ios), "srt_histogram": histogram_table(ios),
            "devices": device_table(ios, elapsed_ns)}
