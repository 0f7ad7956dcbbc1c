"""A USB command's stages (COMMAND, DATA, STATUS, GAP) and their pieces, which tile every
device's time with IDLE (scsitrace/tiling.py); compiled passes list the pieces or add up
their totals without listing them."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl

from .. import tiling
from .._native import usb as _usb


def _with_stages(cmds: pl.DataFrame) -> pl.DataFrame:
    """The stage times of commands (their URB times): the boundaries by the compiled rule
    (native/src/usb/machine.rs `stage_bounds_of`, which the streamed machine applies too) as
    `_c0` (COMMAND's end), `_d0` (DATA's start), `_s0` (STATUS's start), and the durations."""
    times = cmds.select(pl.col(c).cast(pl.Int64) for c in ("cmd_c", "data_s", "data_c", "sts_s"))
    cmds = cmds.hstack(pl.DataFrame(_usb.stage_bounds(times.rechunk())))
    return cmds.with_columns(
        (pl.col("_c0") - pl.col("cmd_s")).alias("command_ns"),
        pl.when(pl.col("data_c").is_not_null()).then(pl.col("data_c") - pl.col("_d0")).alias("data_ns"),
        (pl.col("sts_c") - pl.col("_s0")).alias("status_ns"),
        (pl.col("sts_c") - pl.col("cmd_s")).alias("response_ns"))


def late_command_notes(ios: pl.DataFrame) -> list[str]:
    """The commands whose data completed before their command IU's completion was seen."""
    n = ios.filter(pl.col("_c0") < pl.col("cmd_c")).height if ios.height else 0
    if not n:
        return []
    return [f"{n:,} commands: the host saw their data complete before their command's own completion (UAS "
            "writes queue the data before the command IU); their COMMAND stage ends at the data's completion "
            "and holds the data transfer, which the host's timestamps cannot separate from it (DATA 0)"]

# the phases of the pieces by phase code, as the compiled passes number them (read from Rust:
# native/src/usb/machine.rs PIECE_PHASES, the one table)
PIECE_PHASES = list(_usb.PIECE_PHASES)


_STAGE_COLUMNS = {"_dev": "dev", "io": "io", "cmd_s": "cmd_s", "_c0": "cmd_c", "_d0": "d0", "_s0": "s0",
                  "data_c": "data_c", "sts_c": "sts_c", "data_bytes": "data_bytes"}


def command_stages(ios: pl.DataFrame) -> pl.DataFrame:
    """Per command, the frame the compiled passes read by name (native/src/usb/machine.rs
    `Stages`): device code `dev`, `io`, the stage times the pieces are cut from (int64 ns,
    null where unknown: `cmd_s`, the command's end `cmd_c` (`_with_stages`' `_c0`), `d0`,
    `s0`, `data_c`, `sts_c`), `data_bytes` and `data_in` (1 IN, 0 OUT)."""
    data_in = pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True).cast(pl.Int64).alias("data_in")
    return ios.select(*(pl.col(c).cast(pl.Int64).alias(name) for c, name in _STAGE_COLUMNS.items()), data_in).rechunk()


def tile(ios: pl.DataFrame, elapsed_ns: int, segments: bool = True) -> dict:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns] (tiling.tile's columns).
    Pieces, in this order: every command's COMMAND, GAP to its data (or status), DATA, GAP
    after the data, STATUS; commands without a CBW/IU submit have none. (Listed command by
    command first: when that comes out in time order, as Bulk-Only traffic does, the
    tiling needs no sort, and its totals no piece table.)"""
    if not ios.height:
        return tiling.tile(tiling.pieces_frame(**{c: [] for c in tiling.PIECE_COLUMNS}), elapsed_ns, PIECE_PHASES,
                           segments)
    commands = command_stages(ios)
    if not segments:
        names = [*PIECE_PHASES, tiling.IDLE]
        t = stage_totals(commands, names.index(tiling.IDLE), len(names), elapsed_ns)
        if t.in_order:
            return tiling.tile_totals(names, np.array(t.totals, np.int64), np.array(t.counts, np.int64), t.devices)
    pieces, in_order = stage_pieces(commands, by_command=True)
    if not in_order:
        pieces, _ = stage_pieces(commands, by_command=False)
    return tiling.tile(pieces, elapsed_ns, PIECE_PHASES, segments)


def segments_frame(full: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """The segment frame (schema SEGMENTS + device) of the commands (`ios_frame`)."""
    names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"] if full.height else None
    t = tile(full, elapsed_ns)
    return tiling.segments_frame(t["segments"], t["phases"], names)


def stage_pieces(commands: pl.DataFrame, by_command: bool) -> tuple[pl.DataFrame, bool]:
    """Stage pieces of commands (`command_stages`; tiling.PIECE_COLUMNS: device, io, start,
    end, phase, bytes; and `block`, 0-4), in one compiled pass (scsitrace._native.usb.stage_pieces): a command's
    pieces are COMMAND, GAP before the data (or status), DATA, GAP after the data, STATUS
    (none without a command submit), listed block by block (every COMMAND, every GAP, ...) or,
    with `by_command`, command by command. Returns (pieces, whether they came out in (device,
    start, block) order: then they are also in the order a stable sort of the block-by-block
    pieces by (device, start) gives (ties: block, then command))."""
    found = _usb.stage_pieces(commands, bool(by_command))
    return pl.DataFrame(found.pieces), found.in_order


def stage_totals(commands: pl.DataFrame, idle: int, n_phases: int, elapsed: int):
    """The tiling totals (tiling.tile's `totals`, as time and segments per phase code) of the
    pieces stage_pieces lists command by command, tiled as they are listed, without a piece
    table (40 MB for 170 000 commands), provided they come in (device, start, block) order
    (scsitrace._native.usb.stage_totals: tiling.place's rule). Returns its `StageTotals`:
    `totals`, `counts`, `in_order` (whether they did; else the totals are incomplete: list
    and tile the pieces), `devices` (how many have segments)."""
    return _usb.stage_totals(commands, SimpleNamespace(idle=int(idle), n_phases=int(n_phases), elapsed=int(elapsed)))
