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


def scan_block(buf: bytes, sig_bits: np.ndarray, n_data: int):
    """Scan one block of whole lines -> (good, bad, number of lines in the block, tick
    decreases), where good = (line_idx, tick, lines, db, db_null, dbp) and bad = (line_idx,
    reason, found)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    cap = len(buf) // 2 + 1  # a record line takes at least two bytes
    good = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint16),
            np.zeros(cap if n_data else 0, np.uint8), np.ones(cap if n_data else 0, np.bool_),
            np.full(cap if n_data == 2 else 0, -1, np.int8))
    bad = (np.empty(cap, np.int64), np.empty(cap, np.int16), np.empty(cap, np.int32))
    n_good, n_bad, n_lines, decreases = _bus.ancot_scan(a, np.ascontiguousarray(sig_bits, dtype=np.uint16), n_data,
                                                        *good, *bad)
    return tuple(x[:n_good] for x in good), tuple(x[:n_bad] for x in bad), n_lines, decreases
