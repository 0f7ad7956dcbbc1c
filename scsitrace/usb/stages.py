"""A USB command's stages (COMMAND, DATA, STATUS, GAP) and their pieces, which tile every
device's time with IDLE (scsitrace/tiling.py); compiled passes list the pieces or add up
their totals without listing them."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .. import tiling
from .._native import usb as _usb
from ..schema import NULL, nullable


def _with_stages(cmds: pl.DataFrame) -> pl.DataFrame:
    """The stage times of commands (their URB times): the boundaries by the compiled rule
    (native/src/usb/machine.rs `stage_bounds_of`, which the streamed machine applies too) as
    `_c0` (COMMAND's end), `_d0` (DATA's start), `_s0` (STATUS's start), and the durations."""
    times = cmds.select(pl.col(c).cast(pl.Int64).fill_null(NULL) for c in ("cmd_c", "data_s", "data_c", "sts_s"))
    c0, d0, s0 = _usb.stage_bounds(*(np.ascontiguousarray(times[c].to_numpy()) for c in times.columns))
    cmds = cmds.with_columns(nullable(c0, name="_c0"), nullable(d0, name="_d0"), nullable(s0, name="_s0"))
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


@dataclass(frozen=True)
class CommandStages:
    """Per command: device code, io, the stage times the pieces are cut from (int64 ns,
    schema.NULL where unknown; `_with_stages` names the command's end, d0 and s0 `_c0`, `_d0`,
    `_s0`), data bytes and
    direction. The record the compiled passes read by name (native/src/usb/machine.rs)."""

    dev: np.ndarray
    io: np.ndarray
    cmd_s: np.ndarray
    cmd_c: np.ndarray
    d0: np.ndarray
    s0: np.ndarray
    data_c: np.ndarray
    sts_c: np.ndarray
    data_bytes: np.ndarray
    data_in: np.ndarray

    @classmethod
    def of(cls, ios: pl.DataFrame) -> "CommandStages":
        times = ios.select(pl.col(c).cast(pl.Int64).fill_null(NULL).alias(name) for c, name in _STAGE_COLUMNS.items())
        data_in = ios.select(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)).to_series()
        return cls(**{c: times[c].to_numpy() for c in times.columns}, data_in=data_in.to_numpy())

    @classmethod
    def from_arrays(cls, **columns) -> "CommandStages":
        """From arrays of any integer type (int64 and bool copies where needed)."""
        return cls(**{k: np.ascontiguousarray(v, np.bool_ if k == "data_in" else np.int64) for k, v in columns.items()})


_STAGE_COLUMNS = {"_dev": "dev", "io": "io", "cmd_s": "cmd_s", "_c0": "cmd_c", "_d0": "d0", "_s0": "s0",
                  "data_c": "data_c", "sts_c": "sts_c", "data_bytes": "data_bytes"}


def tile(ios: pl.DataFrame, elapsed_ns: int, segments: bool = True) -> dict:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns] (tiling.tile's columns).
    Pieces, in this order: every command's COMMAND, GAP to its data (or status), DATA, GAP
    after the data, STATUS; commands without a CBW/IU submit have none. (Listed command by
    command first: when that comes out in time order, as Bulk-Only traffic does, the
    tiling needs no sort, and its totals no piece table.)"""
    if not ios.height:
        return tiling.tile(tiling.pieces_frame(**{c: [] for c in tiling.PIECE_COLUMNS}), elapsed_ns, PIECE_PHASES,
                           segments)
    commands = CommandStages.of(ios)
    if not segments:
        names = [*PIECE_PHASES, tiling.IDLE]
        totals, counts, in_order, devices = stage_totals(commands, names.index(tiling.IDLE), len(names), elapsed_ns)
        if in_order:
            return tiling.tile_totals(names, totals, counts, devices)
    pieces, in_order = stage_pieces(commands, by_command=True)
    if not in_order:
        pieces, _ = stage_pieces(commands, by_command=False)
    return tiling.tile(pieces, elapsed_ns, PIECE_PHASES, segments)


def segments_frame(full: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """The segment frame (schema SEGMENTS + device) of the commands (`ios_frame`)."""
    names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"] if full.height else None
    t = tile(full, elapsed_ns)
    return tiling.segments_frame(t["segments"], t["phases"], names)


def stage_pieces(commands: CommandStages, by_command: bool) -> tuple[pl.DataFrame, bool]:
    """Stage pieces of commands (tiling.PIECE_COLUMNS: device, io, start, end, phase, bytes;
    and `block`, 0-4), in one compiled pass (scsitrace._native.usb.stage_pieces): a command's
    pieces are COMMAND, GAP before the data (or status), DATA, GAP after the data, STATUS
    (none without a command submit), listed block by block (every COMMAND, every GAP, ...) or,
    with `by_command`, command by command. Returns (pieces, whether they came out in (device,
    start, block) order: then they are also in the order a stable sort of the block-by-block
    pieces by (device, start) gives (ties: block, then command))."""
    found = _usb.stage_pieces(commands, bool(by_command))
    return pl.DataFrame(found.pieces), found.in_order


def stage_totals(commands: CommandStages, idle: int, n_phases: int, elapsed: int) -> tuple:
    """The tiling totals (tiling.tile's `totals`, as time and segments per phase code) of the
    pieces stage_pieces lists command by command, tiled as they are listed, without a piece
    table (40 MB for 170 000 commands), provided they come in (device, start, block) order
    (scsitrace._native.usb.stage_totals: tiling.place's rule). Returns (totals, counts,
    whether they did (else the totals are incomplete: list and tile the pieces), how many
    devices have segments)."""
    return _usb.stage_totals(commands, int(idle), int(n_phases), int(elapsed))
