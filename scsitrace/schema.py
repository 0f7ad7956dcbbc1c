"""Canonical tables, declared once (DESIGN "Layers and canonical tables").

Every parser hands over frames with these columns; `validate` checks them at the boundary.
Times are int64 nanoseconds from the trace's start; the absolute origin lives in metadata.
"""
from __future__ import annotations

import numpy as np
import polars as pl

# Bus lines: bit n of `transitions.lines`. Spec spelling, 1 = asserted (logical level).
SIGNALS = ("BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK")
SIGNAL_BIT = {name: bit for bit, name in enumerate(SIGNALS)}
REQUIRED_SIGNALS = ("BSY", "SEL", "MSG", "C/D", "I/O")


def level_of(signals) -> int:
    """Level of detail of a bus capture by its signals: 3 with the data bus, 2 with REQ or
    ACK (handshakes), else 1 (phase lines only)."""
    if "DB" in signals:
        return 3
    if "REQ" in signals or "ACK" in signals:
        return 2
    return 1

TRANSITIONS = {
    "t_ns": pl.Int64,
    "lines": pl.UInt16,
    "db": pl.UInt8,      # null where the data bus was not sampled
    "dbp": pl.Boolean,   # null where parity was not sampled
}

SEGMENTS = {
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "phase": pl.Utf8,
    "category": pl.Utf8,
    "target": pl.Int8,
    "initiator": pl.Int8,
    "connection": pl.Int64,
    "io": pl.Int64,
    "bytes": pl.Int64,
    "msg": pl.UInt8,
}

# Bus-layer I/Os; other layers add their own stage columns after these.
IOS = {
    "io": pl.Int64,
    "device": pl.Utf8,
    "target": pl.Int8,
    "lun": pl.Int16,
    "tag": pl.Int16,
    "op": pl.Utf8,
    "opcode": pl.Int16,
    "command": pl.Utf8,
    "lba": pl.Int64,
    "blocks": pl.Int64,
    "bytes": pl.Int64,
    "data_bytes": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "status": pl.Utf8,
    "connections": pl.Int32,
    "disconnects": pl.Int32,
    "complete": pl.Boolean,
    "partial": pl.Boolean,
}

# One vocabulary across layers (docs/schemas/README.md). `op` is one of OPS on every layer
# (null when a trace does not say: a bus command without its CDB), the layer's own words
# in their own columns (block: `rwbs`, blkparse's letters); `status` is one of
# scsi.STATUSES or null (no completion seen); `bytes` is the data the I/O moved.
OPS = ("read", "write", "flush", "discard", "other")
LAYERS = ("bus", "block", "usb", "scsilog")
_SCSI = ("bus", "usb", "scsilog")
# the layers whose I/Os have each IOS column: a layer's I/O table has no column of another
# layer's (it would be null throughout)
IOS_LAYERS = {
    "io": LAYERS, "device": LAYERS, "target": ("bus", "scsilog"), "lun": _SCSI, "tag": ("bus",),
    "op": LAYERS, "opcode": _SCSI, "command": _SCSI, "lba": LAYERS, "blocks": LAYERS, "bytes": LAYERS,
    "data_bytes": LAYERS, "start_ns": LAYERS, "end_ns": LAYERS, "status": LAYERS,
    "connections": ("bus",), "disconnects": ("bus",), "complete": LAYERS, "partial": LAYERS,
}


SEGMENTS_LAYERS = {"start_ns": LAYERS, "end_ns": LAYERS, "phase": LAYERS, "category": LAYERS, "target": ("bus",),
                   "initiator": ("bus",), "connection": ("bus",), "io": _SCSI, "bytes": _SCSI, "msg": ("bus",)}


def segments_columns(layer: str) -> dict:
    """The SEGMENTS columns a layer's segments have (SEGMENTS_LAYERS), in SEGMENTS order."""
    return {c: t for c, t in SEGMENTS.items() if layer in SEGMENTS_LAYERS[c]}


def ios_columns(layer: str) -> dict:
    """The IOS columns a layer's I/Os have (IOS_LAYERS), in IOS order."""
    return {c: t for c, t in IOS.items() if layer in IOS_LAYERS[c]}


ANOMALIES = {
    "t_ns": pl.Int64,
    "kind": pl.Utf8,
    "detail": pl.Utf8,
    "position": pl.Utf8,  # source position (line, byte offset) where known
}


def empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def validate(df: pl.DataFrame, schema: dict, name: str) -> pl.DataFrame:
    """Check that `df` carries the declared columns with the declared dtypes.

    Extra columns are allowed (layers add stage columns). A mismatch is a bug in
    the producing code, not bad input, so it raises AssertionError.
    """
    problems = []
    for col, dtype in schema.items():
        if col not in df.columns:
            problems.append(f"missing column {col!r}")
        elif df.schema[col] != dtype:
            problems.append(f"column {col!r} is {df.schema[col]}, declared {dtype}")
    if problems:
        raise AssertionError(f"{name} frame does not match its schema: " + "; ".join(problems))
    return df


def frame(rows: dict, schema: dict) -> pl.DataFrame:
    """Build a frame from column lists with exactly the declared dtypes (missing -> null)."""
    n = max((len(v) for v in rows.values()), default=0)
    cols = {c: rows.get(c, [None] * n) for c in schema}
    extra = {c: v for c, v in rows.items() if c not in schema}
    df = pl.DataFrame({**cols}, schema=schema)
    if extra:
        df = df.with_columns(**{c: pl.Series(c, v) for c, v in extra.items()})
    return df


# Device ids, one form across layers (reports/typed_export.py tells it): LAYER:ADDRESS
DEVICE_PREFIX = {"bus": "bus", "usb": "usb", "scsilog": "scsi", "block": "block"}
DEVICE_FORM = {"bus": "bus:TARGET:LUN", "usb": "usb:BUS:DEVICE:LUN",
               "scsilog": "scsi:HOST:CHANNEL:ID:LUN (SG_IO: scsi:/dev/NODE)", "block": "block:MAJOR,MINOR"}


def device_id(layer: str, columns) -> pl.Expr:
    """The `LAYER:ADDRESS` expression over a frame with `columns`: bus TARGET:LUN (TARGET when
    the LUN is unknown), the other layers their `device` column; null where unknown."""
    prefix = DEVICE_PREFIX[layer] + ":"
    if layer == "bus":
        t, lun = pl.col("target").cast(pl.Utf8), pl.col("lun").cast(pl.Utf8) if "lun" in columns else None
        addr = t if lun is None else pl.when(pl.col("lun").is_null()).then(t).otherwise(pl.concat_str(t, pl.lit(":"), lun))
        return (pl.lit(prefix) + addr).alias("device_id")
    if "device" not in columns:
        return pl.lit(None, dtype=pl.Utf8).alias("device_id")
    dev = pl.when(pl.col("device") == "").then(None).otherwise(pl.col("device"))
    return (pl.lit(prefix) + dev).alias("device_id")



ARROW_FROM_ROWS = 1 << 12
"""Binary columns of this many rows or more go between numpy and polars through pyarrow's
buffers (fast); smaller ones as hex text in polars, which spares a small trace pyarrow's
import (0.1-0.3 s, more than the whole analysis of a small capture)."""
HEX_DIGITS = np.frombuffer(b"0123456789abcdef", np.uint8)


def nullable(values, null, name: str = "") -> pl.Series:
    """Series of the numpy array `values`, null where the mask `null` is true."""
    series = pl.Series(name, values)
    return series.set(pl.Series(null), None) if null.any() else series
