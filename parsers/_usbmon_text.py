"""usbmon text blocks read by the compiled line scanner (scsitrace._native.text, Rust:
memchr line splitting, fields read without regex, the block's lines on every core with the
GIL released) into the URB table (`scsitrace.usb.urbs.URBS`, every data byte a line shows
kept). The scanner takes only lines that are certain to be good records of the fields
parsers/usbmon.py's TEXT_RECORD reads; the others (bad, non-ASCII, isochronous, values at a
range's edge) come back by line and are decoded by usbmon.py's regex reader, so its error
messages and rare forms stay the reference. Both kinds are merged back in line order."""
from __future__ import annotations

import os

import numpy as np
import polars as pl

from scsitrace._native import text as _text
from scsitrace.usb.urbs import URBS, urb_table, with_column

THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16      # a block this small is scanned on one thread (spawning costs more)


def scan_block(view, first_line: int) -> tuple[pl.DataFrame, int, bool, list[tuple[int, bytes]]]:
    """(the URB table of the lines the scanner took, times as written; newlines in the block;
    whether any of them had a bus number; the other non-blank lines as (line, bytes))."""
    buf = np.frombuffer(view, np.uint8)
    out = _text.scan_usbmon(buf, THREADS if len(buf) >= SMALL_BLOCK else 1)
    urbs = urb_table(out.urbs)
    urbs = with_column(urbs, urbs["pos"] + first_line)
    lines = pl.DataFrame(out.other)
    other = [(first_line + k, bytes(buf[s:e])) for k, s, e in
             zip(lines["line"].to_list(), lines["start"].to_list(), lines["end"].to_list())]
    return urbs, int(out.newlines), bool(out.any_bus), other


def merged(scanned: pl.DataFrame, decoded: pl.DataFrame) -> pl.DataFrame:
    """The URBs the scanner took and those the regex reader decoded, in line order."""
    if not decoded.height:
        return scanned
    decoded = decoded.select(pl.col(c).cast(t) for c, t in URBS.items())
    if not scanned.height:
        return decoded
    return pl.concat([scanned, decoded]).sort("pos", maintain_order=True)


def unwrapped(t: np.ndarray, last: int | None, wraps: int, wrap_ns: int) -> tuple[np.ndarray, int]:
    """The times plus the 4096 s wraps seen so far (a step back of more than half a wrap is
    one more wrap), and the wraps at the last one."""
    step = np.empty_like(t)
    step[0] = t[0] - last if last is not None else 0
    np.subtract(t[1:], t[:-1], out=step[1:])
    wrapped = np.cumsum(step < -(wrap_ns // 2)) + wraps
    return t + wrapped * wrap_ns, int(wrapped[-1])
