"""The ancot-text record scanner: one compiled pass over a block of whole lines.

numpy needs a dozen passes over the bytes to split and check 80 M lines; this scanner
(Rust: native/src/bus/ancot.rs) reads each byte once. It applies
the format's record rules in the order the reader reports them: field count, tick, each
signal, DB, DBP. Tick order is checked afterwards, in bulk, by the caller.
"""
from __future__ import annotations

import numpy as np

from scsitrace._native import bus as _bus

BAD_COUNT, BAD_TICK, BAD_DB, BAD_DBP = 1, 2, 3, 4
BAD_SIGNAL = 16  # + index of the signal
MAX_DIGITS = 18  # any 18-digit tick fits int64
BAD_ROOM = 1024  # bad records a first scan of a block keeps


def scan_block(buf: bytes, sig_bits: np.ndarray, n_data: int):
    """Scan one block of whole lines -> (good, bad, number of lines in the block, tick
    decreases), where good = (line_idx, tick, lines, db, db_null, dbp) and bad = (line_idx,
    reason, found)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    # a good record is every field (at least a byte each), a blank between each and the line's
    # end: arrays of that bound, not of a record per two bytes (10x less fresh memory a block)
    cap = len(buf) // (2 * (1 + len(sig_bits) + n_data)) + 1
    good = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint16),
            np.zeros(cap if n_data else 0, np.uint8), np.ones(cap if n_data else 0, np.bool_),
            np.full(cap if n_data == 2 else 0, -1, np.int8))
    sig_bits = np.ascontiguousarray(sig_bits, dtype=np.uint16)
    room = BAD_ROOM
    while True:             # bad records are few: room for BAD_ROOM, a second scan with room for all
        bad = (np.empty(room, np.int64), np.empty(room, np.int16), np.empty(room, np.int32))
        n_good, n_bad, n_lines, decreases = _bus.ancot_scan(a, sig_bits, n_data, *good, *bad)
        if n_bad <= room:
            break
        room = n_bad
    return tuple(x[:n_good] for x in good), tuple(x[:n_bad] for x in bad), n_lines, decreases
