"""Time of the command layers (usb, scsilog) per stage: pieces of each command's stages tile
every device's time, with IDLE where no command is in progress; and the percentage table of
the stage totals.

Per device, each instant goes to the earliest-starting piece covering it (later overlapping
pieces are clipped): the segments tile [0, elapsed] exactly. One compiled pass (Rust:
native/src/bus/tiling.rs).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import schema
from ._native import bus as _bus
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
    pieces = np.ascontiguousarray(pieces, dtype=np.int64)
    if not in_order:
        key, in_order = _bus.device_start_key(pieces, elapsed_ns)
    # by device, start, then piece order (pieces often come in that order already)
    order = np.arange(len(pieces)) if in_order else np.argsort(key, kind="stable")
    columns, totals, counts, devices = _bus.tile(order.astype(np.int64, copy=False), pieces, names.index(IDLE),
                                                 len(names), elapsed_ns, segments)
    found = tile_totals(names, totals, counts, devices)
    return {**dict(zip(PIECE_COLUMNS, columns)), **found} if segments else found


def tile_totals(names: list[str], totals: np.ndarray, counts: np.ndarray, devices: int) -> dict:
    """`tile`'s result without segments, from the time and segment count per phase code."""
    return {"phases": names, "devices": int(devices),
            "totals": {name: int(totals[k]) for k, name in enumerate(names) if counts[k]}}


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
    return percent_table(totals, stages, elapsed_ns * n_dev, completed, no_normalized=(IDLE,),
                         base="elapsed" if n_dev <= 1 else "devices_x_elapsed")
