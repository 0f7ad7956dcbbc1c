"""Time of the command layers (usb, scsilog) per stage: pieces of each command's stages tile
every device's time, with IDLE where no command is in progress; and the percentage table of
the stage totals.

Per device, each instant goes to the earliest-starting piece covering it (later overlapping
pieces are clipped): the segments tile [0, elapsed] exactly. One compiled pass (`_tile`).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import schema
from ._jit import compiled, inlined
from .schema import NULL, nullable
from .tables import percent_table

IDLE = "IDLE"
PIECE_COLUMNS = ("dev", "io", "start", "end", "phase", "bytes")   # a stage piece, as a row of int64


def tile_pieces(pieces: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """Segments from stage pieces (device, io, start_ns, end_ns, phase, bytes): see `tile`."""
    p = pieces.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if not p.height:
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phases = p["phase"].unique().sort()
    rows = np.column_stack([
        (p["device"].rank("dense").to_numpy() - 1).astype(np.int64),
        p["io"].cast(pl.Int64).fill_null(NULL).to_numpy(),
        p["start_ns"].to_numpy(), p["end_ns"].to_numpy(),
        (p["phase"].rank("dense").to_numpy() - 1).astype(np.int64),
        p["bytes"].cast(pl.Int64).fill_null(NULL).to_numpy()]).astype(np.int64)
    return segments_frame(tile(rows, elapsed_ns, phases.to_list()), p["device"].unique().sort())


def tile(pieces: np.ndarray, elapsed_ns: int, phases: list[str], segments: bool = True,
         in_order: bool = False) -> dict:
    """Per device, each instant goes to the earliest-starting piece covering it (later
    overlapping pieces are clipped), and IDLE fills the rest of [0, elapsed_ns]: the result
    tiles exactly. `pieces`: one row per piece, PIECE_COLUMNS (`dev`: device codes in the
    devices' report order; `phase`: index into `phases`; io and bytes NULL where none;
    start and end known); a row per piece keeps each piece in one cache line while the
    pass visits them in time order. Returns "totals" (time per phase name, IDLE included),
    "devices" (how many devices have segments) and, with `segments`, the segment columns
    in (device, time) order. `in_order`: the caller knows the pieces are in (device,
    start) order already."""
    names = [*phases, IDLE] if IDLE not in phases else list(phases)
    if not len(pieces):
        empty = np.zeros(0, np.int64)
        return {**{c: empty for c in PIECE_COLUMNS}, "phases": names, "totals": {}, "devices": 0}
    if not in_order:
        key, in_order = _device_start_key(pieces, elapsed_ns)
    # by device, start, then piece order (pieces often come in that order already)
    order = np.arange(len(pieces)) if in_order else np.argsort(key, kind="stable")
    # upper bound; untouched pages cost nothing
    out = np.empty((6, 3 * len(order) + 1 if segments else 0), np.int64)
    totals, counts = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
    m, devices = _tile(order, pieces, names.index(IDLE), elapsed_ns, segments, out, totals, counts)
    found = tile_totals(names, totals, counts, devices)
    return {**dict(zip(PIECE_COLUMNS, out[:, :m])), **found} if segments else found


def tile_totals(names: list[str], totals: np.ndarray, counts: np.ndarray, devices: int) -> dict:
    """`tile`'s result without segments, from the time and segment count per phase code."""
    return {"phases": names, "devices": int(devices),
            "totals": {name: int(totals[k]) for k, name in enumerate(names) if counts[k]}}


@compiled
def _device_start_key(pieces, elapsed):
    """dev * span + start of each piece (rows of PIECE_COLUMNS), span past every time and
    `elapsed`: ascending keys sort by device, then start; and whether they ascend."""
    span = elapsed
    for p in range(pieces.shape[0]):
        span = max(span, pieces[p, 2], pieces[p, 3])
    span += 1
    key = np.empty(pieces.shape[0], np.int64)
    in_order = True
    for p in range(pieces.shape[0]):
        key[p] = pieces[p, 0] * span + pieces[p, 2]
        in_order = in_order and (p == 0 or key[p] >= key[p - 1])
    return key, in_order


@inlined
def place(start, end, covered, last_end):
    """Where a device's next piece [start, end) goes (pieces in start order): it starts no
    earlier than `covered`, the latest end before it (-1 for none); `last_end`: where
    the device's last segment ended (-1 for none). Returns (whether the piece keeps a
    segment (else it is left empty), the segment's start, where the IDLE before it
    starts (its start for no IDLE), covered after it, last_end after it)."""
    s = max(start, covered)
    if end <= s:
        return False, s, s, max(covered, end), last_end
    return True, s, min(max(last_end, 0), s), max(covered, end), max(covered, end)


@inlined
def add_piece(kept, s, idle_from, e, phase, idle, totals, counts):
    """Add a piece placed by `place` (segment [s, e) of `phase`, when kept) and the IDLE before
    it ([idle_from, s)) to the time and segment count per phase."""
    if kept:
        if idle_from < s:
            totals[idle] += s - idle_from
            counts[idle] += 1
        totals[phase] += e - s
        counts[phase] += 1


@inlined
def close_device(last_end, elapsed, idle, totals, counts):
    """The IDLE after a device's last segment up to `elapsed` (none when it has no segment:
    last_end < 0); returns 1 if the device had segments."""
    if last_end < 0:
        return 0
    if elapsed > last_end:
        totals[idle] += elapsed - last_end
        counts[idle] += 1
    return 1


@compiled
def _tile(order, pieces, idle, elapsed, emit, out, totals, counts):
    """Pieces taken in `order` (by device, then start) -> segments (`place`), written to
    `out` rows (PIECE_COLUMNS) when `emit`; adds time and segments per phase to `totals`
    and `counts`. Returns the number of segments and of devices with segments."""
    n = order.shape[0]
    devices = 0
    m = 0
    k = 0
    while k < n:
        d = pieces[order[k], 0]
        covered = np.int64(-1)
        last_end = np.int64(-1)
        while k < n and pieces[order[k], 0] == d:
            p = order[k]
            e = pieces[p, 3]
            kept, s, idle_from, covered, last_end = place(pieces[p, 2], e, covered, last_end)
            add_piece(kept, s, idle_from, e, pieces[p, 4], idle, totals, counts)
            if kept and emit:
                if idle_from < s:
                    out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = \
                        d, NULL, idle_from, s, idle, NULL
                    m += 1
                out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = \
                    d, pieces[p, 1], s, e, pieces[p, 4], pieces[p, 5]
                m += 1
            k += 1
        if emit and last_end >= 0 and elapsed > last_end:
            out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = d, NULL, last_end, elapsed, idle, NULL
            m += 1
        devices += close_device(last_end, elapsed, idle, totals, counts)
    return m, devices


def segments_frame(tiles: dict, devices: pl.Series) -> pl.DataFrame:
    """The segments frame (schema SEGMENTS + device) of `tile`'s columns; `devices` names
    the device codes."""
    if not len(tiles["start"]):
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phase = pl.Series("phase", tiles["phases"], dtype=pl.Utf8).gather(tiles["phase"])
    null = pl.lit(None)
    return pl.DataFrame({"start_ns": tiles["start"], "end_ns": tiles["end"], "phase": phase}).with_columns(
        pl.col("phase").alias("category"), null.cast(pl.Int8).alias("target"), null.cast(pl.Int8).alias("initiator"),
        null.cast(pl.Int64).alias("connection"), nullable(tiles["io"], name="io"), nullable(tiles["bytes"], name="bytes"),
        null.cast(pl.UInt8).alias("msg"), devices.cast(pl.Utf8).gather(tiles["dev"]).alias("device"))


def categories(segments: pl.DataFrame, stages, elapsed_ns: int, completed: int) -> pl.DataFrame:
    """Stage totals summed over devices; percent of (devices x elapsed), so they sum to 100."""
    n_dev = segments["device"].n_unique() if segments.height else 0
    totals = dict(segments.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"))
                  .group_by("phase").agg(pl.col("d").sum()).iter_rows()) if segments.height else {}
    return category_table(totals, n_dev, stages, elapsed_ns, completed)


def category_table(totals: dict, n_dev: int, stages, elapsed_ns: int, completed: int) -> pl.DataFrame:
    """Stage rows from time per phase name over `n_dev` devices: percentages of n_dev x the
    elapsed time, so they sum to 100; IDLE has no time per I/O."""
    return percent_table(totals, stages, elapsed_ns * n_dev, completed, no_normalized=(IDLE,))
