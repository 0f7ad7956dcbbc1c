"""The declared tables of SCSI commands with a response time, shared by the usb and scsilog
layers: the service response time per opcode (the statistic `tshark -z scsi,srt,<set>`
prints: calls, min, max, avg of the time from the command to its response, plus the
percentiles of the shared statistic record and a histogram it lacks), how the commands
paired, and per device. They are computed in one place, batch by batch (a whole capture is
one batch): `scsitrace/command_stream.py` `Tables`, or its compiled twin in the streamed
Bulk-Only path (`native/src/usb/commands.rs`).
"""
from __future__ import annotations

import polars as pl

from . import stats
from .tables import Table


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

