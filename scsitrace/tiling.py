"""Time of the command layers (usb, scsilog) per stage: pieces of each command's stages tile
every device's time, with IDLE where no command is in progress; and the percentage table of
the stage totals.

Per device, each instant goes to the earliest-starting piece covering it (later overlapping
pieces are clipped): the segments tile [0, elapsed] exactly. One compiled pass (Rust:
native/src/bus/tiling.rs).
"""
from __future__ import annotations

import polars as pl

from . import schema
from ._native import bus as _bus
from .tables import percent_table

IDLE = "IDLE"
PIECE_COLUMNS = ("dev", "io", "start", "end", "phase", "bytes")   # a stage piece (`pieces_frame`)


def tile_pieces(pieces: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """Segments from stage pieces (device, io, start_ns, end_ns, phase, bytes): see `tile`."""
    p = pieces.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if not p.height:
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phases = p["phase"].unique().sort()
    rows = pl.DataFrame({
        "dev": p["device"].rank("dense") - 1, "io": p["io"], "start": p["start_ns"], "end": p["end_ns"],
        "phase": p["phase"].rank("dense") - 1, "bytes": p["bytes"]})
    t = tile(rows, elapsed_ns, phases.to_list())
    return segments_frame(t["segments"], t["phases"], p["device"].unique().sort())


def pieces_frame(**columns) -> pl.DataFrame:
    """A table of stage pieces (PIECE_COLUMNS, int64; io and bytes null where none), the record
    `tile` reads."""
    return pl.DataFrame({c: columns[c] for c in PIECE_COLUMNS}).cast(pl.Int64)


def tile(pieces: pl.DataFrame, elapsed_ns: int, phases: list[str], segments: bool = True) -> dict:
    """Per device, each instant goes to the earliest-starting piece covering it (later
    overlapping pieces are clipped), and IDLE fills the rest of [0, elapsed_ns]: the result
    tiles exactly. `pieces`: PIECE_COLUMNS (`pieces_frame`; `dev`: device codes in the
    devices' report order; `phase`: index into `phases`; start and end known). Returns
    "totals" (time per phase name, IDLE included), "devices" (how many devices have segments)
    and, with `segments`, "segments": PIECE_COLUMNS in (device, time) order (IDLE's io and
    bytes null)."""
    names = [*phases, IDLE] if IDLE not in phases else list(phases)
    if not pieces.height:
        return {"segments": pieces_frame(**{c: [] for c in PIECE_COLUMNS}), "phases": names, "totals": {}, "devices": 0}
    t = _bus.tile(pieces.select(pl.col(c).cast(pl.Int64) for c in PIECE_COLUMNS), names.index(IDLE), len(names),
                  elapsed_ns, segments)
    by_phase = pl.DataFrame(t.by_phase)
    found = tile_totals(names, by_phase["time"].to_numpy(), by_phase["segments"].to_numpy(), t.devices)
    return {**found, "segments": pl.DataFrame(t.segments)} if segments else found


def tile_totals(names: list[str], totals, counts, devices: int) -> dict:
    """`tile`'s result without segments, from the time and segment count per phase code."""
    return {"phases": names, "devices": int(devices),
            "totals": {name: int(totals[k]) for k, name in enumerate(names) if counts[k]}}


def segments_frame(segments: pl.DataFrame, phases: list[str], devices: pl.Series) -> pl.DataFrame:
    """The segments frame (schema SEGMENTS + device) of `tile`'s segments (PIECE_COLUMNS);
    `phases` names the phase codes, `devices` the device codes."""
    if not segments.height:
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phase = pl.Series("phase", phases, dtype=pl.Utf8).gather(segments["phase"])
    null = pl.lit(None)
    return pl.DataFrame({"start_ns": segments["start"], "end_ns": segments["end"], "phase": phase}).with_columns(
        pl.col("phase").alias("category"), null.cast(pl.Int8).alias("target"), null.cast(pl.Int8).alias("initiator"),
        null.cast(pl.Int64).alias("connection"), segments["io"].cast(pl.Int64), segments["bytes"].cast(pl.Int64),
        null.cast(pl.UInt8).alias("msg"), devices.cast(pl.Utf8).gather(segments["dev"]).alias("device"))


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
