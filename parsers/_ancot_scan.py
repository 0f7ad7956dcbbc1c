"""The ancot-text record scanner: one compiled pass over a block of whole lines.

numpy needs a dozen passes over the bytes to split and check 80 M lines; this scanner
(Rust: native/src/bus/ancot.rs) reads each byte once. It applies
the format's record rules in the order the reader reports them: field count, tick, each
signal, DB, DBP. Tick order is checked afterwards, in bulk, by the caller.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scsitrace._native import bus as _bus

BAD_COUNT, BAD_TICK, BAD_DB, BAD_DBP = 1, 2, 3, 4
BAD_SIGNAL = 16  # + index of the signal
MAX_DIGITS = 18  # any 18-digit tick fits int64


@dataclass(frozen=True)
class Layout:
    """The record layout of a file, as the scanner reads it (by name: native/src/bus/ancot.rs):
    the line bit of each signal column in order, and the data columns after them (0; 1: DB;
    2: DB DBP)."""
    sig_bits: np.ndarray
    n_data: int


def scan_block(buf: bytes, layout: Layout):
    """Scan one block of whole lines -> `Scanned`: `good` (columns tick, lines, then db and
    dbp when the file has them, null for `--` and `-`), `line_idx` (column line_idx: the good
    records' line indexes in the block), `bad` (columns line, reason, found), `lines` (the
    lines in the block) and `decreases` (tick decreases among the good)."""
    return _bus.ancot_scan(np.frombuffer(buf, dtype=np.uint8), layout)
