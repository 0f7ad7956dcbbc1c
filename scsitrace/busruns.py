"""Stage 1 of the bus state machine: reduce line transitions to phase runs, in bulk.

A run is a maximal stretch of equal phase key (BSY, SEL, RST, MSG, C/D, I/O). ATN, REQ,
ACK and the data bus never split a run: they are aggregated per run (handshake counts,
the bytes of message/command/status phases, the ID bits of (re)selection).

Line skew: a run shorter than the settle delay is a transitional state and belongs to the
run that follows it; afterwards equal neighbours are coalesced. Everything here is numpy or
polars over whole chunks; the Python walk in `bus.py` then sees thousands of runs, not
millions of transitions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np
import polars as pl

from .schema import SIGNAL_BIT

BIT = {name: 1 << b for name, b in SIGNAL_BIT.items()}

# information phase code MSG C/D I/O -> name (SCSI-2 table 5-6); 100 and 101 are reserved
INFO_PHASES = {
    0b000: "DATA OUT", 0b001: "DATA IN", 0b010: "COMMAND", 0b011: "STATUS",
    0b110: "MESSAGE OUT", 0b111: "MESSAGE IN",
}
NON_DATA_CODES = (0b010, 0b011, 0b110, 0b111)

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
class RunReducer:
    """Feed transitions chunks in time order; get finished runs back chunk by chunk."""

    settle_ns: int = 400
    has_req: bool = True
    has_ack: bool = True
    stats: RunStats = field(default_factory=RunStats)
    _carry: pl.DataFrame | None = None
    _prev_lines: int = 0

    def runs(self, chunks: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        for chunk in chunks:
            if not len(chunk):
                continue
            self.stats.transitions += len(chunk)
            if self.stats.first_ns is None:
                self.stats.first_ns = int(chunk["t_ns"][0])
            self.stats.last_ns = int(chunk["t_ns"][-1])
            data = chunk if self._carry is None else pl.concat([self._carry, chunk], how="vertical_relaxed")
            out = self._reduce(data, final=False)
            if out is not None and len(out):
                yield out
        if self._carry is not None and len(self._carry):
            out = self._reduce(self._carry, final=True)
            if out is not None and len(out):
                yield out

    # -- one chunk ---------------------------------------------------------------------
    def _reduce(self, tr: pl.DataFrame, final: bool) -> pl.DataFrame | None:
        t = tr["t_ns"].to_numpy()
        lines = tr["lines"].to_numpy().astype(np.int64)
        key = phase_key(lines)
        run_of, starts, keys = self._merged_runs(t, key, final)
        n_runs = len(starts)
        if not final:
            # the last run may go on in the next chunk: keep its transitions for later
            first_open = int(np.searchsorted(run_of, n_runs - 1))
            self._carry = tr.slice(first_open)
            prev_lines = self._prev_lines
            self._prev_lines = int(lines[first_open - 1]) if first_open > 0 else self._prev_lines
            if first_open == 0:
                return None
            tr, t, lines, run_of = tr.slice(0, first_open), t[:first_open], lines[:first_open], run_of[:first_open]
            ends = starts[1:]
            starts, keys = starts[:-1], keys[:-1]
        else:
            self._carry = None
            prev_lines = self._prev_lines
            ends = np.append(starts[1:], t[-1])
        return self._aggregate(tr, t, lines, run_of, starts, ends, keys, prev_lines)

    def _merged_runs(self, t: np.ndarray, key: np.ndarray, final: bool):
        """Run index per transition, and run starts/keys, after folding skew into the next run."""
        n = len(t)
        change = np.empty(n, dtype=bool)
        change[0] = True
        np.not_equal(key[1:], key[:-1], out=change[1:])
        raw_idx = np.flatnonzero(change)
        raw_start = t[raw_idx]
        raw_key = key[raw_idx]
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
        done = np.ones(len(raw_idx), dtype=bool) if final else group_of_raw < group_of_raw[-1]
        self.stats.raw_runs += int(np.count_nonzero(done))
        self.stats.skew_merged += int(np.count_nonzero(short & (dur > 0) & done))
        raw_of_transition = np.cumsum(change) - 1
        run_of = group_of_raw[raw_of_transition]
        return run_of, raw_start[group_first_raw], merged_key[group_first_raw]

    def _aggregate(self, tr, t, lines, run_of, starts, ends, keys, prev_lines) -> pl.DataFrame:
        prev = np.empty_like(lines)
        prev[0] = prev_lines
        prev[1:] = lines[:-1]
        req, ack = BIT["REQ"], BIT["ACK"]
        req_rise = ((lines & req) != 0) & ((prev & req) == 0)
        req_fall = ((lines & req) == 0) & ((prev & req) != 0)
        ack_rise = ((lines & ack) != 0) & ((prev & ack) == 0)
        code = _info_codes(keys)[run_of]
        inbound = (code & 1) == 1
        # the byte of a handshake: IN phases at REQ assertion, OUT phases at ACK assertion
        # (fallbacks when one of the two lines was not captured)
        if self.has_req and self.has_ack:
            sample = np.where(inbound, req_rise, ack_rise)
        elif self.has_req:
            sample = np.where(inbound, req_rise, req_fall)
        else:
            sample = ack_rise
        run_key = keys[run_of]
        in_info = ((run_key & BIT["BSY"]) != 0) & ((run_key & (BIT["SEL"] | BIT["RST"])) == 0)
        sample_bytes = sample & in_info & np.isin(code, NON_DATA_CODES)
        df = pl.DataFrame({
            "run": run_of, "t_ns": t, "db": tr["db"],
            "atn": (lines & BIT["ATN"]) != 0, "req_rise": req_rise, "ack_rise": ack_rise,
            "sample": sample_bytes,
        })
        agg = df.group_by("run", maintain_order=True).agg(
            pl.col("atn").any(),
            pl.col("req_rise").sum().alias("n_req"),
            pl.col("ack_rise").sum().alias("n_ack"),
            pl.col("t_ns").filter(pl.col("req_rise")).first().alias("first_req_ns"),
            pl.col("db").drop_nulls().last().alias("db_last"),
            pl.col("db").filter(pl.col("sample")).alias("info_bytes"),
        )
        base = pl.DataFrame({"run": np.arange(len(starts)), "start_ns": starts, "end_ns": ends,
                             "key": keys.astype(np.uint16)})
        out = base.join(agg, on="run", how="left").sort("run")
        return out.select([pl.col(c).cast(dt) for c, dt in RUN_SCHEMA.items()])


def phase_key(lines: np.ndarray) -> np.ndarray:
    """The lines that decide the phase, with don't-care lines cleared: RST alone; SEL with I/O
    (BSY toggles inside a selection); nothing in BUS FREE (MSG, C/D, I/O float there); BSY with
    MSG C/D I/O in information phases."""
    return np.where(
        lines & BIT["RST"], BIT["RST"],
        np.where(lines & BIT["SEL"], BIT["SEL"] | (lines & BIT["I/O"]),
                 np.where(lines & BIT["BSY"], lines & (BIT["BSY"] | BIT["MSG"] | BIT["C/D"] | BIT["I/O"]), 0)))


def _info_codes(keys: np.ndarray) -> np.ndarray:
    msg = (keys >> SIGNAL_BIT["MSG"]) & 1
    cd = (keys >> SIGNAL_BIT["C/D"]) & 1
    io = (keys >> SIGNAL_BIT["I/O"]) & 1
    return (msg << 2) | (cd << 1) | io
