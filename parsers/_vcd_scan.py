"""The VCD value-change scanner: one compiled pass (Rust: native/src/bus/vcd.rs) over a
block of whole lines -> the block's items (timestamps and value changes) in file order;
then the bus state at each timestamp (`rows`).

Tokens are runs of non-blank bytes. `$end`, `$comment`, `$dumpvars`, `$dumpall`, `$dumpon`
and `$dumpoff` set the keyword context of the tokens after them (tokens inside `$comment`
are dropped). A `b`/`r`/`s` value takes the next token on its line as its identifier code:
in a run of tokens starting with those letters values and codes alternate. The constants
are parsers/vcd.py's (kinds, reasons, keyword numbers).
"""
from __future__ import annotations

import numpy as np

from scsitrace._native import bus as _bus

KEYWORD_BYTES = (b"$end", b"$comment", b"$dumpvars", b"$dumpall", b"$dumpon", b"$dumpoff")
KW_NONE, KW_END, KW_COMMENT, KW_DUMPVARS, KW_DUMPALL, KW_DUMPON, KW_DUMPOFF = range(7)
BAD, TIME, SCALAR, VECTOR, REAL, STRING = range(6)          # item kinds
R_TOKEN, R_TIME, R_VECTOR, R_NO_CODE = range(1, 5)           # why an item is bad (0: good)
PACKED_BYTES = 7          # identifier codes up to this long are compared as integers
MAX_TIME_DIGITS = 18      # any 18-digit timestamp fits int64


def _keyword_table() -> tuple[np.ndarray, np.ndarray]:
    width = max(len(k) for k in KEYWORD_BYTES)
    table = np.zeros((len(KEYWORD_BYTES), width), np.uint8)
    lengths = np.array([len(k) for k in KEYWORD_BYTES], np.int64)
    for i, k in enumerate(KEYWORD_BYTES):
        table[i, :len(k)] = np.frombuffer(k, np.uint8)
    return table, lengths


KEYWORD_TABLE, KEYWORD_LENGTHS = _keyword_table()


def scan_block(buf, first_line: int, context: int):
    """(item columns, keyword context at the end) of one block of whole lines."""
    a = np.frombuffer(buf, dtype=np.uint8)
    cap = len(a) // 2 + 1     # a token and the blank after it take at least two bytes
    cols = dict(line=np.empty(cap, np.int64), start=np.empty(cap, np.int64), end=np.empty(cap, np.int64),
                kind=np.empty(cap, np.int8), ctx=np.empty(cap, np.int8), time=np.empty(cap, np.int64),
                code_start=np.empty(cap, np.int64), code_end=np.empty(cap, np.int64),
                code=np.empty(cap, np.uint64), val_start=np.empty(cap, np.int64),
                val_end=np.empty(cap, np.int64), reason=np.empty(cap, np.int8))
    m, end_ctx = _bus.vcd_scan(a, int(first_line), int(context), KEYWORD_TABLE, KEYWORD_LENGTHS, *cols.values())
    return {k: v[:m] for k, v in cols.items()}, int(end_ctx)


def fast_block(buf, first_line: int, context: int, declared, declared_width, feed_keys, feed_slot, feed_flags,
               present, last_time: int | None, origin: int | None, limit_span: int, num: int, den: int, carry):
    """scan_block, parsers/vcd.py's checks and `rows` in one compiled call, for a block whose
    every item is good: (row times, rows [t, 3], end context, counts) or None (nothing
    changed) when an item is not. Counts: items, real, string and $dumpoff changes, first
    and last timestamp outside $dumpoff (-1: none), x/z control and data changes."""
    return _bus.vcd_fast_block(np.frombuffer(buf, dtype=np.uint8), int(first_line), int(context), KEYWORD_TABLE,
                               KEYWORD_LENGTHS, declared, declared_width, feed_keys, feed_slot, feed_flags, present,
                               -1 if last_time is None else int(last_time), -1 if origin is None else int(origin),
                               int(limit_span), int(num), int(den), carry)


# ---------------------------------------------------------------- state per timestamp

DB_SLOT, DB_BIT_SLOT0, DBP_SLOT, N_SLOTS = 9, 10, 18, 19     # parsers/vcd.py's slots
# the state carried from block to block (int64 vector); slots' values come first
PENDING, PENDING_T, PENDING_LINES, PENDING_DB, PENDING_DBP = range(N_SLOTS, N_SLOTS + 5)
FINAL, FINAL_LINES, FINAL_DB, FINAL_DBP = range(N_SLOTS + 5, N_SLOTS + 9)
CARRY_SIZE = N_SLOTS + 9


def combine(state: np.ndarray, present: np.ndarray) -> tuple[int, int, int]:
    """Slot states -> (lines, db, dbp), db and dbp -1 where not sampled."""
    return _bus.vcd_combine(state, present)


def rows(a, kind, ctx, time, val_start, val_end, code, feed_keys, long_hits, feed_slot, feed_flags,
         present, origin, num, den, carry, xz, out_t, out_row) -> int:
    """Apply the block's value changes in file order and close a row at each new timestamp.

    Item i changes feed f when its code is `feed_keys[f]` (packed; 0 for codes too long to
    pack, whose hits come as bit f of `long_hits[i]`, an empty array when there are none).
    `feed_flags[f]` bit 0: the DB vector, bit 1: its bits reversed ([0:7]), bit 2: inverted.
    `carry` holds each slot's value, the pending row (the last timestamp so far, which the
    next block may still change) and the last final row; it is updated. `xz[0]`/`xz[1]`
    count x/z values of control/data lines. Returns how many rows were emitted (those that
    change something)."""
    return _bus.vcd_rows(a, kind, ctx, time, val_start, val_end, code, feed_keys, long_hits, feed_slot, feed_flags,
                         present, int(origin), int(num), int(den), carry, xz, out_t, out_row)
