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


ITEM_COLUMNS = ("line", "start", "end", "kind", "ctx", "time", "code_start", "code_end", "code", "val_start",
                "val_end", "reason")


def scan_block(buf, first_line: int, context: int, tables):
    """(item columns, keyword context at the end) of one block of whole lines; `tables`:
    the reader (its `keywords`, read by name in Rust)."""
    items = _bus.vcd_scan({"text": np.frombuffer(buf, dtype=np.uint8), "first_line": int(first_line),
                           "context": int(context)}, tables)
    return {k: getattr(items, k) for k in ITEM_COLUMNS}, int(items.context)


def fast_block(buf, first_line: int, context: int, tables, last_time: int | None, origin: int | None, carry):
    """scan_block, parsers/vcd.py's checks and `rows` in one compiled call, for a block whose
    every item is good (`tables`: the reader, its declared codes, mapped signals and
    timescale read by name): a `FastRows` (the rows' `VcdRows`, the end context, counts:
    items, real, string and $dumpoff changes, first and last timestamp outside $dumpoff,
    None when none), or None (nothing changed) when an item is not."""
    return _bus.vcd_fast_block({"text": np.frombuffer(buf, dtype=np.uint8), "first_line": int(first_line),
                                "context": int(context), "last_time": last_time, "origin": origin}, tables, carry)


# ---------------------------------------------------------------- state per timestamp

DB_SLOT, DB_BIT_SLOT0, DBP_SLOT, N_SLOTS = 9, 10, 18, 19     # parsers/vcd.py's slots
Carry = _bus.VcdCarry     # each slot's value, the pending row (the last timestamp, which the
                          # next block may still change) and the last final row


def rows(buf, items, long_hits: np.ndarray, origin: int, tables, carry):
    """Apply the block's value changes in file order and close a row at each new timestamp.

    Item i changes feed f when its code is `tables.feed_keys[f]` (packed; 0 for codes too
    long to pack, whose hits come as bit f of `long_hits[i]`, an empty array when there are
    none). `tables.feed_flags[f]` bit 0: the DB vector, bit 1: its bits reversed ([0:7]), bit
    2: inverted. `carry` (a `Carry`) is updated. Returns a `VcdRows`: the rows that change
    something (transitions: DB, DBP null where not sampled) and the x/z values of control
    and data lines."""
    return _bus.vcd_rows({"text": np.frombuffer(buf, dtype=np.uint8), "kind": items.kind, "ctx": items.ctx,
                          "time": items.time, "val_start": items.val_start, "val_end": items.val_end,
                          "code": items.code, "long_hits": long_hits, "origin": int(origin)}, tables, carry)
