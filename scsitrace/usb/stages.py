"""A USB command's stages (COMMAND, DATA, STATUS, GAP) and their pieces, which tile every
device's time with IDLE (scsitrace/tiling.py); compiled passes list the pieces or add up
their totals without listing them."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import tiling
from .._native import usb as _usb
from ..schema import NULL


def _with_stages(cmds: pl.DataFrame) -> pl.DataFrame:
    data_start = pl.max_horizontal("data_s", "cmd_c")
    data_end = pl.col("data_c")
    sts_start = pl.max_horizontal("sts_s", pl.coalesce("data_c", "cmd_c"))
    return cmds.with_columns(
        (pl.col("cmd_c") - pl.col("cmd_s")).alias("command_ns"),
        pl.when(data_end.is_not_null()).then(data_end - data_start).alias("data_ns"),
        (pl.col("sts_c") - sts_start).alias("status_ns"),
        (pl.col("sts_c") - pl.col("cmd_s")).alias("response_ns"),
        data_start.alias("_d0"), sts_start.alias("_s0"))

# the phases of the pieces by phase code, as the compiled passes number them (read from Rust:
# native/src/usb/machine.rs PIECE_PHASES, the one table)
PIECE_PHASES = list(_usb.PIECE_PHASES)


def tile(ios: pl.DataFrame, elapsed_ns: int, segments: bool = True) -> dict:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns] (tiling.tile's columns).
    Pieces, in this order: every command's COMMAND, GAP to its data (or status), DATA, GAP
    after the data, STATUS; commands without a CBW/IU submit have none. (Listed command by
    command first: when that comes out in time order, as Bulk-Only traffic does, the
    tiling needs no sort, and its totals no piece table.)"""
    if not ios.height:
        return tiling.tile(np.empty((0, len(tiling.PIECE_COLUMNS)), np.int64), elapsed_ns, PIECE_PHASES, segments)
    times = ios.select(pl.col(c).cast(pl.Int64).fill_null(NULL)
                       for c in ("_dev", "io", "cmd_s", "cmd_c", "_d0", "_s0", "data_c", "sts_c", "data_bytes"))
    dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes = (times[c].to_numpy() for c in times.columns)
    data_in = ios.select(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)).to_series().to_numpy()
    if not segments:
        names = [*PIECE_PHASES, tiling.IDLE]
        totals, counts = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
        in_order, devices = stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in,
                                         names.index(tiling.IDLE), elapsed_ns, totals, counts)
        if in_order:
            return tiling.tile_totals(names, totals, counts, devices)
    pieces = np.empty((5 * ios.height, len(tiling.PIECE_COLUMNS)), np.int64)
    columns = (dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in)
    n, in_order = stage_pieces(*columns, True, pieces)
    if not in_order:
        n, _ = stage_pieces(*columns, False, pieces)
    return tiling.tile(pieces[:n], elapsed_ns, PIECE_PHASES, segments, in_order)


def segments_frame(full: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """The segment frame (schema SEGMENTS + device) of the commands (`ios_frame`)."""
    names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"] if full.height else None
    return tiling.segments_frame(tile(full, elapsed_ns), names)


def stage_pieces(dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in, by_command, out, blocks=None):
    """Stage pieces of commands (per command columns; NULL times unknown) as rows of `out`
    (tiling.PIECE_COLUMNS: device, io, start, end, phase, bytes), in one compiled pass
    (scsitrace._native.usb.stage_pieces): a command's pieces are COMMAND, GAP before the
    data (or status), DATA, GAP after the data, STATUS (none without a command submit),
    listed block by block (every COMMAND, every GAP, ...) or, with `by_command`, command
    by command. Returns the count and whether the pieces came out in (device, start,
    block) order: then they are also in the order a stable sort of the block-by-block
    pieces by (device, start) gives (ties: block, then command)."""
    i64 = np.int64
    n, in_order = _usb.stage_pieces(*(np.ascontiguousarray(c, i64) for c in (dev, io, cmd_s, cmd_c, d0, s0, data_c,
                                                                             sts_c, data_bytes)),
                                    np.ascontiguousarray(data_in, np.bool_), bool(by_command), out.reshape(-1),
                                    np.zeros(0, i64) if blocks is None else blocks)
    return n, in_order


def stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in, idle, elapsed, totals, counts):
    """The tiling totals (tiling.tile's `totals`, as time and segments per phase code, added
    to `totals` and `counts`) of the pieces stage_pieces lists command by command, tiled as
    they are listed, without a piece table (40 MB for 170 000 commands), provided they come
    in (device, start, block) order (scsitrace._native.usb.stage_totals: tiling.place's
    rule). Returns whether they did (else the totals are incomplete: list and tile the
    pieces) and how many devices have segments."""
    i64 = np.int64
    return _usb.stage_totals(*(np.ascontiguousarray(c, i64) for c in (dev, cmd_s, cmd_c, d0, s0, data_c, sts_c)),
                             np.ascontiguousarray(data_in, np.bool_), int(idle), int(elapsed), totals, counts)
