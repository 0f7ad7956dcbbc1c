"""Block-layer event codes and frames: what the block parsers (blktrace, blkparse text) hand
over, and the order in which the analysis processes the records.

blktrace's action codes (`TA`), categories (`TC`), notify kinds (`TN`), the raw and
processed event frames, device names (`dev_name`), RWBS text (`rwbs_expr`) and the
processing order of the records of several per-CPU files (`merge_rows`: a k-way merge in
Rust). Parsers import this module, never the analysis.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .._native import block as _native

# __BLK_TA_* action codes (low 16 bits of `action`), by blkparse's letter; T is blkparse's "UT"
TA = {"Q": 1, "M": 2, "F": 3, "G": 4, "S": 5, "R": 6, "D": 7, "C": 8, "P": 9, "U": 10, "T": 11,
      "I": 12, "X": 13, "B": 14, "A": 15, "ZP": 18, "ZU": 19}     # ZP, ZU: zone write plug, unplug (v8)

LETTER = {code: letter for letter, code in TA.items()}
TC_SHIFT = 16
TC = {"READ": 1 << 0, "WRITE": 1 << 1, "FLUSH": 1 << 2, "SYNC": 1 << 3, "QUEUE": 1 << 4,
      "REQUEUE": 1 << 5, "ISSUE": 1 << 6, "COMPLETE": 1 << 7, "FS": 1 << 8, "PC": 1 << 9,
      "NOTIFY": 1 << 10, "AHEAD": 1 << 11, "META": 1 << 12, "DISCARD": 1 << 13,
      "DRV_DATA": 1 << 14, "FUA": 1 << 15,
      # protocol version 8 only (struct blk_io_trace2): the action's bits 32-38
      "ZONE_APPEND": 1 << 16, "ZONE_RESET": 1 << 17, "ZONE_RESET_ALL": 1 << 18, "ZONE_FINISH": 1 << 19,
      "ZONE_OPEN": 1 << 20, "ZONE_CLOSE": 1 << 21, "WRITE_ZEROES": 1 << 22}
# blkparse's RWBS for the v8 operations (fill_rwbs, first match wins; write-zeroes has none there)
ZONE_RWBS = {"ZONE_APPEND": "ZA", "ZONE_RESET": "ZR", "ZONE_RESET_ALL": "ZRA", "ZONE_FINISH": "ZF",
             "ZONE_OPEN": "ZO", "ZONE_CLOSE": "ZC"}
V2_CATEGORIES = ("ZONE_APPEND", "ZONE_RESET", "ZONE_RESET_ALL", "ZONE_FINISH", "ZONE_OPEN", "ZONE_CLOSE",
                 "WRITE_ZEROES")        # by bit: action bit 32 + k (the reader's zone_ops counts)

TC_NOTIFY = TC["NOTIFY"] << TC_SHIFT
TC_PC = TC["PC"] << TC_SHIFT
TN_PROCESS, TN_TIMESTAMP, TN_MESSAGE = 0, 1, 2
REMAPPER_MAJORS = (9, 253, 254)     # md, device-mapper: btt keeps their Q2Q/Q2A/Q2C apart ("dm")
SECTOR = 512

# What a block parser hands over before `finish_events` (binary layout, absolute times).
RAW_EVENTS = {
    "time_abs": pl.Int64, "seq": pl.Int64, "cpu": pl.Int32, "action": pl.UInt32,
    "device": pl.UInt32, "sector": pl.Int64, "bytes": pl.Int64, "pid": pl.Int64,
    "error": pl.Int16, "pdu_dev": pl.UInt32, "pdu_sector": pl.Int64, "pdu_int": pl.Int64,
    "has_remap": pl.Boolean, "has_int": pl.Boolean, "file": pl.Int16, "position": pl.Int64,
    "action_hi": pl.UInt32,    # v8: the action's upper 32 bits (0 for v7)
}
NUMPY_RAW = {"time_abs": np.int64, "seq": np.int64, "cpu": np.int32, "action": np.uint32,
             "device": np.uint32, "sector": np.int64, "bytes": np.int64, "pid": np.int64, "error": np.int16,
             "pdu_dev": np.uint32, "pdu_sector": np.int64, "pdu_int": np.int64, "has_remap": np.bool_,
             "has_int": np.bool_, "file": np.int16, "position": np.int64, "action_hi": np.uint32}

# Letters by action code (blkparse's, T = its "UT"; 16 abort, 17 driver data have none): the
# categories of the `act` column, so that it costs one byte per event.
ACT_LETTERS = ("N", "Q", "M", "F", "G", "S", "R", "D", "C", "P", "U", "T", "I", "X", "B", "A", "K", "Y", "ZP", "ZU",
               "?")
ACT_ENUM = pl.Enum(ACT_LETTERS)

# Capture.frames["events"] of a block capture: one row per trace record except notify records,
# in processing order (time, then file and position).
EVENTS = {
    "t_ns": pl.Int64,          # from the first record of the capture
    "seq": pl.Int64,
    "cpu": pl.Int32,
    "action": pl.UInt64,       # raw: __BLK_TA_* | category bits << 16 (RWBS: rwbs_expr); 64 bits in v8
    "act": ACT_ENUM,           # blkparse's letter (Q, G, I, D, C, M, F, ...; T is a timer unplug)
    "device": pl.UInt32,       # dev_t as blktrace records it: major << 20 | minor (dev_name())
    "sector": pl.Int64,
    "bytes": pl.Int64,
    "pid": pl.Int64,
    "error": pl.Int16,
    "pdu_dev": pl.UInt32,      # remap: the device the bio came from (null otherwise)
    "pdu_sector": pl.Int64,    # remap: its sector there; split: the new sector
    "pdu_int": pl.Int64,       # unplug: requests unplugged
    "file": pl.Int16,          # index into meta["files"]
    "position": pl.Int64,      # byte offset (binary) or line number (text) in that file
}
PROCESSES = {"pid": pl.Int64, "name": pl.Utf8}

# What the block analysis reads of the events (Capture.columns["events"] of a binary capture,
# else taken from the events frame): a remap's source device and sector, else 0.
MACHINE_COLUMNS = {"t_ns": np.int64, "action": np.uint32, "device": np.uint32, "sector": np.int64,
                   "bytes": np.int64, "pid": np.int64, "pdu_dev": np.uint32, "pdu_sector": np.int64,
                   "error": np.int16}


def dev_name(dev: int) -> str:
    return f"{dev >> 20},{dev & 0xFFFFF}"


def _rwbs(action: int, has_bytes: bool) -> str:
    """blkparse's fill_rwbs (with v8's zone operations)."""
    tc = action >> TC_SHIFT
    out = "F" if tc & TC["FLUSH"] else ""
    zone = next((text for name, text in ZONE_RWBS.items() if tc & TC[name]), None)
    out += ("D" if tc & TC["DISCARD"] else zone if zone else "W" if tc & TC["WRITE"] else
            "R" if has_bytes else "N")
    for bit, ch in (("FUA", "F"), ("AHEAD", "A"), ("SYNC", "S"), ("META", "M")):
        if tc & TC[bit]:
            out += ch
    return out


def rwbs_expr(action: pl.Expr, nbytes: pl.Expr, combos: list[tuple[int, bool]]) -> pl.Expr:
    """blkparse's RWBS text for each (action, bytes > 0) pair present."""
    key = (action.cast(pl.UInt64) & ~0xFFFF & (2**63 - 1)).cast(pl.Int64) * 2 + (nbytes > 0).cast(pl.Int64)
    mapping = {a * 2 + int(b): _rwbs(a, b) for a, b in combos}
    if not mapping:
        return pl.lit(None, pl.Utf8)
    return key.replace_strict(mapping, return_dtype=pl.Utf8)


def merge_rows(times: list[np.ndarray], in_order: bool | None = None) -> np.ndarray:
    """Row of each record (files concatenated) in processing order: by time, then file, then
    place in the file. A linear k-way merge when every file is in time order (as blktrace
    writes them; `in_order` when the caller knows), else a stable sort."""
    if in_order is None:
        in_order = all(np.all(t[1:] >= t[:-1]) for t in times)
    if in_order and len(times) <= MERGE_FILES:
        bounds = np.cumsum([0] + [len(t) for t in times]).astype(np.int64)
        return _native.merge_sorted_rows(np.concatenate(times) if times else np.zeros(0, np.int64), bounds)
    allt = np.concatenate(times)
    rows = np.empty(len(allt), np.int64)
    rows[np.argsort(allt, kind="stable")] = np.arange(len(allt), dtype=np.int64)
    return rows

MERGE_FILES = 16            # more files than this: a sort beats the k-way merge


def merge_order(times: list[np.ndarray]) -> np.ndarray | None:
    """The records (files concatenated) in processing order (see merge_rows), or None when
    they already are."""
    rows = merge_rows(times)
    if np.all(rows == np.arange(len(rows))):
        return None
    order = np.empty_like(rows)
    order[rows] = np.arange(len(rows), dtype=np.int64)
    return order


def finish_events(raw: pl.DataFrame) -> pl.DataFrame:
    """RAW_EVENTS in processing order (see merge_order), notify records already out -> EVENTS
    plus `time_abs`: times from the first record, action letters decoded."""
    origin = raw["time_abs"].min() if raw.height else 0
    code = (raw["action"].to_numpy() & 0xFF).astype(np.int64)
    act = pl.Series("act", ACT_LETTERS, dtype=ACT_ENUM).gather(np.minimum(code, len(ACT_LETTERS) - 1))
    is_x = pl.lit(pl.Series(code == TA["X"]))
    action = pl.col("action").cast(pl.UInt64) | (pl.col("action_hi").cast(pl.UInt64) * (1 << 32))
    return raw.select(
        (pl.col("time_abs") - origin).alias("t_ns"),
        "seq", "cpu", action.alias("action"), act.alias("act"), "device",
        "sector", "bytes", "pid", "error",
        pl.when("has_remap").then("pdu_dev").alias("pdu_dev"),
        pl.when("has_remap").then("pdu_sector")
        .when(is_x & pl.col("has_int")).then("pdu_int").alias("pdu_sector"),
        pl.when(pl.col("has_int") & ~is_x).then("pdu_int").alias("pdu_int"),
        "file", "position", "time_abs",
    )
