"""The bus runs' data-bus pass (native/src/bus/runs.rs `run_bytes`, with `run_sums`' last
sampled data-bus value) and the polarity pass's
asserted times (native/src/bus/polarity.rs `asserted_ns`) against plain-Python statements
of their rules, on random transitions."""
from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace._native import bus as _bus
from scsitrace.bus import polarity, runs
from scsitrace.schema import SIGNAL_BIT

BIT = runs.BIT
INFO_CODES = (0b010, 0b011, 0b110, 0b111)       # COMMAND, STATUS, MESSAGE OUT, MESSAGE IN


def _info_run(key: int) -> bool:
    """BSY, no SEL nor RST, and MSG C/D I/O a COMMAND, STATUS or MESSAGE phase."""
    return bool(key & BIT["BSY"]) and not key & (BIT["SEL"] | BIT["RST"]) and runs.info_code(key) in INFO_CODES


def _expected(lines, db, has_db, prev_lines, first, keys, unresolved, has_req, has_ack):
    """Per run: the last sampled data-bus value (None: none) and its handshake bytes."""
    prev = [prev_lines, *lines[:-1]]
    last, got = [], []
    for r, (a, b) in enumerate(zip(first, [*first[1:], len(lines)])):
        sampled = [i for i in range(a, b) if has_db[i]]
        last.append(int(db[sampled[-1]]) if sampled else None)
        inbound = bool(keys[r] & BIT["I/O"])
        out = []
        for i in sampled if _info_run(int(keys[r])) else []:
            rising, falling = lines[i] & ~prev[i], prev[i] & ~lines[i]
            if has_req and has_ack:
                at = rising & (BIT["REQ"] if inbound and not unresolved[r] else BIT["ACK"])
            elif has_req:
                at = (rising if inbound else falling) & BIT["REQ"]
            else:
                at = rising & BIT["ACK"]
            if at:
                out.append(int(db[i]))
        got.append(out)
    return last, got


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, (1 << 9) - 1), min_size=1, max_size=200), st.integers(0, (1 << 9) - 1),
       st.booleans(), st.sampled_from([(True, True), (True, False), (False, True)]), st.data())
def test_run_bytes_reads_each_handshake_byte_and_the_last_sampled_value(lines, prev_lines, sampled, lines_seen,
                                                                       data):
    n = len(lines)
    lines = np.array(lines, np.uint16)
    db = np.array(data.draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)), np.uint8)
    has_db = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    first = np.array(sorted({0, *data.draw(st.lists(st.integers(1, n), max_size=12))} - {n}), np.int64)
    keys = np.array(data.draw(st.lists(st.integers(0, (1 << 9) - 1), min_size=len(first), max_size=len(first))),
                    np.uint16)
    if not sampled:
        db, has_db = np.zeros(0, np.uint8), np.zeros(0, bool)
    has_req, has_ack = lines_seen
    t = np.arange(n, dtype=np.int64)
    piece = runs._Piece(t, lines, db, has_db) if sampled else runs._Piece(t, lines)
    found = _bus.run_bytes(piece, {"first": first, "keys": keys, "prev_lines": prev_lines, "has_req": has_req,
                                   "has_ack": has_ack})
    sums = pl.DataFrame(_bus.run_sums(piece, first, prev_lines, runs.HANDSHAKE_BITS))
    unresolved = (sums["n_ack"] > sums["n_req"]).to_list()      # a REQ pulse lost between two samples
    last, values = _expected(lines.tolist(), db if sampled else np.zeros(n, np.uint8),
                             has_db if sampled else np.zeros(n, bool), prev_lines, first.tolist(), keys.tolist(),
                             unresolved, has_req, has_ack)
    assert sums["db_last"].to_list() == (last if sampled else [None] * len(first))
    assert found.n_bytes.tolist() == [len(v) for v in values]
    assert found.bytes.tolist() == [b for v in values for b in v]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, (1 << 9) - 1)), min_size=1, max_size=120),
       st.lists(st.integers(1, 119), max_size=6))
def test_asserted_times_add_up_each_line_until_the_next_transition(steps, cuts):
    t = np.cumsum([d for d, _ in steps]).astype(np.int64)
    lines = np.array([v for _, v in steps], np.uint16)
    times = polarity.LineTimes()
    for a, b in zip([0, *sorted(set(cuts))], [*sorted(set(cuts)), len(t)]):
        if a < b:
            times.add(pl.DataFrame({"t_ns": t[a:b], "lines": lines[a:b]}))
    for name in polarity.DECIDING:
        on = (lines[:-1] >> SIGNAL_BIT[name]) & 1 == 1
        assert times.asserted[name] == int(np.diff(t)[on].sum())
    assert times.elapsed_ns == int(t[-1] - t[0])
