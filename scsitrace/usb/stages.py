"""A USB command's stages (COMMAND, DATA, STATUS, GAP) and their pieces, which tile every
device's time with IDLE (scsitrace/tiling.py); compiled passes list the pieces or add up
their totals without listing them."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import tiling
from .._jit import compiled, inlined
from ..schema import NULL
from ..tiling import add_piece, close_device, place


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

PIECE_PHASES = ["COMMAND", "DATA IN", "DATA OUT", "GAP", "STATUS"]


def tile(ios: pl.DataFrame, elapsed_ns: int, segments: bool = True) -> dict:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns] (tiling.tile's columns).
    Pieces, in this order: every command's COMMAND, GAP to its data (or status), DATA, GAP
    after the data, STATUS; commands without a CBW/IU submit have none. (Listed command by
    command first: when that comes out in time order, as Bulk-Only traffic does, the
    tiling needs no sort, and its totals no piece table.)"""
    pieces = np.empty((5 * ios.height if segments else 0, len(tiling.PIECE_COLUMNS)), np.int64)
    if not ios.height:
        return tiling.tile(pieces, elapsed_ns, PIECE_PHASES, segments)
    times = ios.select(pl.col(c).cast(pl.Int64).fill_null(NULL)
                       for c in ("_dev", "io", "cmd_s", "cmd_c", "_d0", "_s0", "data_c", "sts_c", "data_bytes"))
    dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes = (times[c].to_numpy() for c in times.columns)
    data_in = ios.select(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)).to_series().to_numpy()
    phase_code = np.array([PIECE_PHASES.index(p) for p in STAGE_ORDER], np.int64)
    if not segments:
        names = [*PIECE_PHASES, tiling.IDLE]
        totals, counts = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
        in_order, devices = stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in, phase_code,
                                                 names.index(tiling.IDLE), elapsed_ns, totals, counts)
        if in_order:
            return tiling.tile_totals(names, totals, counts, devices)
        pieces = np.empty((5 * ios.height, len(tiling.PIECE_COLUMNS)), np.int64)
    columns = (dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in, phase_code)
    n, in_order = stage_pieces(*columns, True, pieces)
    if not in_order:
        n, _ = stage_pieces(*columns, False, pieces)
    return tiling.tile(pieces[:n], elapsed_ns, PIECE_PHASES, segments, in_order)


def segments_frame(full: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """The segment frame (schema SEGMENTS + device) of the commands (`ios_frame`)."""
    names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"] if full.height else None
    return tiling.segments_frame(tile(full, elapsed_ns), names)


# ---------------------------------------------------------------- compiled passes

STAGE_ORDER = ("COMMAND", "GAP", "DATA IN", "DATA OUT", "STATUS")   # `phase_code` order below


@inlined
def _piece(block, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in):
    """A command's piece number `block` (0 COMMAND, 1 GAP to its data or status, 2 DATA,
    3 GAP after the data, 4 STATUS): (start, end, index in STAGE_ORDER); start or end
    NULL when the command has no such piece."""
    start, end, stage = NULL, NULL, 0
    if cmd_s == NULL:
        pass
    elif block == 0:
        start, end, stage = cmd_s, cmd_c, 0
    elif block == 1:
        start, end, stage = cmd_c, d0 if d0 != NULL else s0, 1
    elif block == 2:
        if data_c != NULL:
            start, end, stage = d0, data_c, 2 if data_in else 3
    elif block == 3:
        if data_c != NULL:
            start, end, stage = data_c, s0, 1
    else:
        start, end, stage = s0, sts_c, 4
    return start, end, stage


@inlined
def _after(dev, start, block, prev_dev, prev_start, prev_block):
    """Whether a piece comes at or after the previous one in (device, start, block) order."""
    return dev > prev_dev or (dev == prev_dev and (start > prev_start or (start == prev_start and block >= prev_block)))


@compiled
def stage_pieces(dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in, phase_code, by_command, out):
    """Stage pieces of commands (per command columns; NULL times unknown; `_piece`) as rows
    of `out` (tiling.PIECE_COLUMNS: device, io, start, end, phase, bytes), block by block:
    every COMMAND, every GAP before the data (or status), every DATA, every GAP after the
    data, every STATUS; or, with `by_command`, command by command (each one's pieces in
    that block order). Returns the count and whether the pieces came out in (device,
    start, block) order: then they are also in the order a stable sort of the
    block-by-block pieces by (device, start) gives (ties: block, then command)."""
    n = dev.shape[0]
    m = 0
    in_order = True
    prev_dev, prev_start, prev_block = np.int64(-1), NULL, -1
    for a in range(5 * n):
        block, i = (a % 5, a // 5) if by_command else (a // n, a % n)
        start, end, stage = _piece(block, cmd_s[i], cmd_c[i], d0[i], s0[i], data_c[i], sts_c[i], data_in[i])
        if start == NULL or end == NULL:
            continue
        out[m, 0], out[m, 1], out[m, 2], out[m, 3], out[m, 4] = dev[i], io[i], start, end, phase_code[stage]
        out[m, 5] = data_bytes[i] if block == 2 else NULL
        m += 1
        in_order = in_order and _after(dev[i], start, block, prev_dev, prev_start, prev_block)
        prev_dev, prev_start, prev_block = dev[i], start, block
    return m, in_order


@compiled
def stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in, phase_code, idle, elapsed, totals, counts):
    """The tiling totals (tiling.tile's `totals`, as time and segments per phase code) of the
    pieces stage_pieces lists command by command, tiled as they are listed by the tiling
    step (tiling.place, add_piece, close_device), without a piece table (40 MB for 170 000
    commands), provided they come in (device, start, block) order. Returns whether they
    did (else the totals are incomplete: list and tile the pieces) and how many devices
    have segments."""
    devices = 0
    prev_dev, prev_start, prev_block = np.int64(-1), NULL, -1
    covered, last_end = np.int64(-1), np.int64(-1)
    for i in range(dev.shape[0]):
        for block in range(5):
            start, end, stage = _piece(block, cmd_s[i], cmd_c[i], d0[i], s0[i], data_c[i], sts_c[i], data_in[i])
            if start == NULL or end == NULL:
                continue
            if not _after(dev[i], start, block, prev_dev, prev_start, prev_block):
                return False, 0
            if dev[i] != prev_dev:
                devices += close_device(last_end, elapsed, idle, totals, counts)
                covered, last_end = np.int64(-1), np.int64(-1)
            prev_dev, prev_start, prev_block = dev[i], start, block
            kept, s, idle_from, covered, last_end = place(start, end, covered, last_end)
            add_piece(kept, s, idle_from, end, phase_code[stage], idle, totals, counts)
    devices += close_device(last_end, elapsed, idle, totals, counts)
    return True, devices
