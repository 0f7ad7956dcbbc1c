"""Stage 1 of the bus state machine: reduce line transitions to phase runs, in bulk.

A run is a maximal stretch of equal phase key (BSY, SEL, RST, MSG, C/D, I/O). ATN, REQ,
ACK and the data bus never split a run: they are aggregated per run (handshake counts,
the bytes of message/command/status phases, the ID bits of (re)selection).

Line skew: a run shorter than the settle delay is a transitional state and belongs to the
run that follows it; afterwards equal neighbours are coalesced. The two passes over every
transition (cutting runs, summing handshakes per run) are compiled (Rust:
native/src/bus/runs.rs); the rest is numpy over the runs. The walk (`machine.py`) then
sees thousands of runs, not millions of transitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import polars as pl

from .._native import bus as _bus
from ..schema import SIGNAL_BIT

BIT = {name: 1 << b for name, b in SIGNAL_BIT.items()}
REQ_BIT, ACK_BIT, ATN_BIT = BIT["REQ"], BIT["ACK"], BIT["ATN"]

# information phase code MSG C/D I/O -> name (SCSI-2 table 5-6); 100 and 101 are reserved
INFO_PHASES = {
    0b000: "DATA OUT", 0b001: "DATA IN", 0b010: "COMMAND", 0b011: "STATUS",
    0b110: "MESSAGE OUT", 0b111: "MESSAGE IN",
}

RUN_SCHEMA = {
    "start_ns": pl.Int64, "end_ns": pl.Int64, "key": pl.UInt16, "atn": pl.Boolean,
    "n_req": pl.Int64, "n_ack": pl.Int64, "first_req_ns": pl.Int64, "db_last": pl.UInt8,
    "info_bytes": pl.List(pl.UInt8),
}


def info_code(key: int) -> int:
    return ((key >> SIGNAL_BIT["MSG"]) & 1) << 2 | ((key >> SIGNAL_BIT["C/D"]) & 1) << 1 | (
        (key >> SIGNAL_BIT["I/O"]) & 1)


@dataclass
class RunStats:
    transitions: int = 0
    raw_runs: int = 0
    skew_merged: int = 0     # runs shorter than the settle delay folded into the next run
    first_ns: int | None = None
    last_ns: int | None = None


@dataclass
class _Piece:
    """Transitions as numpy columns: time, lines, and the data bus (None when not sampled);
    the compiled passes read it by name (native/src/bus/runs.rs `Piece`)."""
    t: np.ndarray
    lines: np.ndarray
    db: np.ndarray | None = None       # byte values, 0 where not sampled
    has_db: np.ndarray | None = None

    def __post_init__(self):
        self.t = np.ascontiguousarray(self.t, np.int64)
        self.lines = np.ascontiguousarray(self.lines, np.uint16)

    def __len__(self) -> int:
        return len(self.t)

    def slice(self, start: int, stop: int | None = None) -> "_Piece":
        cut = slice(start, stop)
        return _Piece(self.t[cut], self.lines[cut], None if self.db is None else self.db[cut],
                      None if self.has_db is None else self.has_db[cut])

    def then(self, other: "_Piece") -> "_Piece":
        if self.db is None and other.db is None:
            return _Piece(np.concatenate((self.t, other.t)), np.concatenate((self.lines, other.lines)))
        a, b = self.with_db(), other.with_db()
        return _Piece(np.concatenate((a.t, b.t)), np.concatenate((a.lines, b.lines)),
                      np.concatenate((a.db, b.db)), np.concatenate((a.has_db, b.has_db)))

    def with_db(self) -> "_Piece":
        if self.db is not None:
            return self
        return _Piece(self.t, self.lines, np.zeros(len(self.t), np.uint8), np.zeros(len(self.t), bool))


def _piece_of(chunk: pl.DataFrame) -> _Piece:
    db = chunk["db"]
    nulls = db.null_count()
    if nulls == len(db):
        return _Piece(chunk["t_ns"].to_numpy(), chunk["lines"].to_numpy())
    if nulls == 0:      # (fill_null and is_not_null each go through polars' lazy engine)
        return _Piece(chunk["t_ns"].to_numpy(), chunk["lines"].to_numpy(), db.to_numpy(), np.ones(len(db), bool))
    return _Piece(chunk["t_ns"].to_numpy(), chunk["lines"].to_numpy(), db.fill_null(0).to_numpy(),
                  db.is_not_null().to_numpy())


@dataclass
class RunReducer:
    """Feed transitions chunks in time order; get finished runs back chunk by chunk."""

    settle_ns: int = 400
    has_req: bool = True
    has_ack: bool = True
    stats: RunStats = field(default_factory=RunStats)
    _carry: _Piece | None = None
    _prev_lines: int = 0

    def runs(self, chunks: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        """The runs of the chunks, as one frame once they end: each piece's runs are kept as
        the compiled passes return them and made one frame at the end (a polars frame per
        piece cost more than the piece's passes)."""
        parts = []
        for piece in _pieces(chunks):
            if not len(piece):
                continue
            self.stats.transitions += len(piece)
            if self.stats.first_ns is None:
                self.stats.first_ns = int(piece.t[0])
            self.stats.last_ns = int(piece.t[-1])
            data = piece if self._carry is None else self._carry.then(piece)
            out = self._reduce(data, final=False)
            if out is not None and len(out["start_ns"]):
                parts.append(out)
        if self._carry is not None and len(self._carry):
            out = self._reduce(self._carry, final=True)
            if out is not None and len(out["start_ns"]):
                parts.append(out)
        if parts:
            yield _runs_frame(parts)

    # -- one piece ---------------------------------------------------------------------
    def _reduce(self, tr: _Piece, final: bool) -> dict | None:
        first, starts, keys, n_open = self._merged_runs(tr, final)
        if not final:
            # the last runs may go on in the next piece: keep their transitions for later
            first_open = int(first[-n_open])
            self._carry = tr.slice(first_open)
            prev_lines = self._prev_lines
            self._prev_lines = int(tr.lines[first_open - 1]) if first_open > 0 else self._prev_lines
            if first_open == 0:
                return None
            tr = tr.slice(0, first_open)
            ends = starts[1:len(starts) - n_open + 1]
            first, starts, keys = first[:-n_open], starts[:-n_open], keys[:-n_open]
        else:
            self._carry = None
            prev_lines = self._prev_lines
            ends = np.append(starts[1:], tr.t[-1])
        return self._aggregate(tr, first, starts, ends, keys, prev_lines)

    def _merged_runs(self, tr: _Piece, final: bool):
        """Index of the first transition, start and key of each run, after folding skew into
        the next run; and how many of the last runs are still open (0 when `final`). The last
        run is open; while it is shorter than the settle delay, it may yet be folded into a
        run of the next piece with the key of the run before it, so that one stays open too."""
        t = tr.t
        raw_idx, raw_key = _raw_runs(tr)
        raw_start = t[raw_idx]
        raw_end = np.append(raw_start[1:], t[-1])
        dur = raw_end - raw_start
        short = dur < self.settle_ns
        short[-1] = False  # the last run is open (or ends with the trace): never folded
        kept = np.flatnonzero(~short)
        owner = kept[np.searchsorted(kept, np.arange(len(raw_idx)))]
        merged_key = raw_key[owner]
        group_change = np.empty(len(raw_idx), dtype=bool)
        group_change[0] = True
        np.not_equal(merged_key[1:], merged_key[:-1], out=group_change[1:])
        group_of_raw = np.cumsum(group_change) - 1
        group_first_raw = np.flatnonzero(group_change)
        n_open = 0 if final else 1 + int(dur[-1] < self.settle_ns and len(group_first_raw) > 1)
        done = group_of_raw < len(group_first_raw) - n_open
        self.stats.raw_runs += int(np.count_nonzero(done))
        self.stats.skew_merged += int(np.count_nonzero(short & (dur > 0) & done))
        return raw_idx[group_first_raw], raw_start[group_first_raw], merged_key[group_first_raw], n_open

    def _aggregate(self, tr: _Piece, first, starts, ends, keys, prev_lines) -> dict:
        """Per-run handshake counts, first REQ, last data-bus value (`sums`: Columns, read
        at the end) and the bytes of COMMAND/STATUS/MESSAGE runs."""
        found = _bus.run_bytes(tr, {"first": first, "keys": keys, "prev_lines": int(prev_lines),
                                    "has_req": self.has_req, "has_ack": self.has_ack})
        return {"start_ns": starts, "end_ns": ends, "key": keys.astype(np.uint16),
                "sums": _bus.run_sums(tr, first, prev_lines, HANDSHAKE_BITS), "n_bytes": found.n_bytes,
                "bytes": found.bytes}


def _runs_frame(parts: list[dict]) -> pl.DataFrame:
    """The runs frame (RUN_SCHEMA) of the pieces' columns."""
    col = {name: np.concatenate([p[name] for p in parts]) for name in ("start_ns", "end_ns", "key", "n_bytes",
                                                                        "bytes")}
    sums = pl.concat([pl.DataFrame(p["sums"]) for p in parts])
    return pl.DataFrame([
        pl.Series("start_ns", col["start_ns"]), pl.Series("end_ns", col["end_ns"]), pl.Series("key", col["key"]),
        *(sums[name] for name in ("atn", "n_req", "n_ack", "first_req_ns", "db_last")),
        _byte_lists(col["bytes"], col["n_bytes"]),
    ]).cast(RUN_SCHEMA)


def _byte_lists(values: np.ndarray, lengths: np.ndarray) -> pl.Series:
    """Run r's bytes, `lengths[r]` of `values` in order; a run without one is null. Grouped
    by run in one pass (not a Python list per run)."""
    runs = np.arange(len(lengths))
    lists = pl.DataFrame({"run": np.repeat(runs, lengths), "info_bytes": values.astype(np.uint8, copy=False)}).group_by(
        "run", maintain_order=True).agg("info_bytes")
    return pl.DataFrame({"run": runs}).join(lists, on="run", how="left", maintain_order="left")["info_bytes"]


PIECE_ROWS = 1 << 18  # transitions reduced at a time: the working arrays stay in cache


def _pieces(chunks: Iterable[pl.DataFrame]) -> Iterator[_Piece]:
    for chunk in chunks:
        whole = _piece_of(chunk)
        for start in range(0, chunk.height, PIECE_ROWS):
            yield whole.slice(start, start + PIECE_ROWS)


def _phase_key_table() -> np.ndarray:
    lines = np.arange(1 << 16, dtype=np.int64)
    key = np.where(
        lines & BIT["RST"], BIT["RST"],
        np.where(lines & BIT["SEL"], BIT["SEL"] | (lines & BIT["I/O"]),
                 np.where(lines & BIT["BSY"], lines & (BIT["BSY"] | BIT["MSG"] | BIT["C/D"] | BIT["I/O"]), 0)))
    return key.astype(np.uint16)


# The lines that decide the phase, with don't-care lines cleared: RST alone; SEL with I/O
# (BSY toggles inside a selection); nothing in BUS FREE (MSG, C/D, I/O float there); BSY with
# MSG C/D I/O in information phases.
PHASE_KEY = _phase_key_table()


def _raw_runs(piece: _Piece) -> tuple[np.ndarray, np.ndarray]:
    """First transition and phase key of each run of equal key (before skew folding)."""
    runs = pl.DataFrame(_bus.raw_runs(piece, PHASE_KEY))
    return runs["first"].to_numpy(), runs["key"].to_numpy()


@dataclass(frozen=True)
class HandshakeBits:
    """The line bits `run_sums` counts (read by name: native/src/bus/runs.rs)."""
    req: int = REQ_BIT
    ack: int = ACK_BIT
    atn: int = ATN_BIT


HANDSHAKE_BITS = HandshakeBits()


STRETCHES = ("start_ns", "lines", "transitions", "handshakes", "first_handshake_ns", "last_ns", "db_last",
             "info_bytes")


@dataclass
class Reduced:
    """What `RunReducer` makes of a capture's transitions (the runs and their stats) and
    what `polarity.LineTimes` adds up over them, computed from STRETCHES instead."""
    runs: pl.DataFrame
    stats: RunStats
    asserted: dict[int, int]        # line bit -> ns asserted


def reduce_stretches(stretches: pl.DataFrame, bits: Iterable[int]) -> Reduced:
    """The runs of transitions handed over as stretches, as `RunReducer(settle_ns=0)` makes
    them of the transitions themselves (`tests/test_qemu_native.py` holds the two equal).

    A parser that synthesizes its transitions from what it decoded (QEMU's trace: one REQ/ACK
    handshake per byte) knows their summary per stretch of constant phase lines without making
    them (STRETCHES: the stretch's first transition time, its lines outside REQ/ACK, how many
    transitions and REQ+ACK assertions it holds, the first assertion's and the last
    transition's times, the last data-bus byte, the message/command/status bytes the
    handshakes carry). With no settle delay nothing folds: stretches of one phase key are one
    run, a run ends where the next starts (the last at the last transition)."""
    if not stretches.height:
        return Reduced(pl.DataFrame(schema=RUN_SCHEMA), RunStats(), dict.fromkeys(bits, 0))
    lines = np.asarray(stretches["lines"].to_numpy(), np.int64)
    start = stretches["start_ns"].to_numpy()
    last_ns = int(stretches["last_ns"][-1])
    key = PHASE_KEY[lines]
    change = key[1:] != key[:-1]
    duration = np.diff(start, append=last_ns)      # a stretch lasts until the next starts
    asserted = {b: int(duration[(lines & (1 << b)) != 0].sum()) for b in bits}
    info = _info_keys(key)
    n_runs = int(np.count_nonzero(change)) + 1
    stats = RunStats(transitions=int(stretches["transitions"].sum()), raw_runs=n_runs,
                     first_ns=int(start[0]), last_ns=last_ns)
    if n_runs == len(key):          # no two stretches of one phase key in a row: each is a run
        return Reduced(_one_run_each(stretches, key, lines, info, last_ns), stats, asserted)
    run = np.cumsum(np.concatenate(([True], change))) - 1
    grouped = stretches.with_columns(
        pl.Series("run", run), pl.Series("key", key.astype(np.uint16)),
        pl.Series("atn", (lines & ATN_BIT) != 0),
        pl.when(pl.Series(info)).then(pl.col("info_bytes")).alias("info_bytes"),
    ).group_by("run", maintain_order=True).agg(
        pl.col("start_ns").first(), pl.col("key").first(), pl.col("atn").any(),
        pl.col("handshakes").sum().alias("n_req"), pl.col("handshakes").sum().alias("n_ack"),
        pl.col("first_handshake_ns").drop_nulls().first().alias("first_req_ns"),
        pl.col("db_last").drop_nulls().last(),
        pl.col("info_bytes").explode().drop_nulls().alias("info_bytes"),
    )
    runs = grouped.with_columns(
        pl.col("start_ns").shift(-1).fill_null(last_ns).alias("end_ns"),
        pl.when(pl.col("info_bytes").list.len() > 0).then(pl.col("info_bytes")).alias("info_bytes"),
    ).select(list(RUN_SCHEMA)).cast(RUN_SCHEMA)
    return Reduced(runs, stats, asserted)


def _one_run_each(stretches: pl.DataFrame, key: np.ndarray, lines: np.ndarray, info: np.ndarray,
                  last_ns: int) -> pl.DataFrame:
    """The runs of stretches that are one run each (`reduce_stretches` without grouping)."""
    n = stretches["handshakes"]
    return stretches.select(
        "start_ns", pl.col("start_ns").shift(-1).fill_null(last_ns).alias("end_ns"),
        pl.Series("key", key.astype(np.uint16)), pl.Series("atn", (lines & ATN_BIT) != 0),
        n.alias("n_req"), n.alias("n_ack"), pl.col("first_handshake_ns").alias("first_req_ns"), "db_last",
        pl.when(pl.Series(info) & (pl.col("info_bytes").list.len() > 0)).then(pl.col("info_bytes")).alias("info_bytes"),
    ).cast(RUN_SCHEMA)


def _info_keys(key: np.ndarray) -> np.ndarray:
    """Runs whose handshakes carry message, command or status bytes (the rule: runs.rs `info_run`)."""
    return _bus.info_runs(np.ascontiguousarray(key, np.uint16))
