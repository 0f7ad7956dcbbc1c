"""blkparse event lines of the default layout read by the compiled line scanner
(scsitrace._native.text.scan_blkparse, Rust: memchr line splitting, fields read without
regex, the block's lines on every core with the GIL released) straight into the block
layer's raw events (block.RAW_EVENTS, with each event's `letter` and `write` for blkparse's
own counts, `BlkparseTally`). The scanner takes only lines certain to be good events; the
others (comments, the summary, messages, bad lines, rare forms) come back by line for
parsers/blkparse.py's `_decode`, so its reasons and rare forms stay the reference, and the
events among them are made raw events by the same compiled rules (`decoded_events`)."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import polars as pl

from scsitrace._native import text as _text

THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16
INTS = ("major", "minor", "cpu", "seq", "sec", "nsec", "pid")
OPTIONAL = ("sector", "nsect", "split_sector", "from_major", "from_minor", "from_sector", "unplugs")
EVENT_COLUMNS = {"line_no": pl.Int64, **{c: pl.Int64 for c in INTS}, "act": pl.Utf8, "rwbs": pl.Utf8,
                 **{c: pl.Int64 for c in OPTIONAL}, "bracket": pl.Utf8}
Tally = _text.BlkparseTally


@dataclass
class Scanned:
    """A block scanned: the events taken (RAW_EVENTS + letter, write), the first name of each
    pid among them (pid, line, name), the other non-blank lines as (line, byte offset in the
    block, bytes), the block's newlines."""
    events: pl.DataFrame
    names: pl.DataFrame
    other: list[tuple[int, int, bytes]]
    newlines: int

    def before(self, line: int) -> None:
        """Keep only what comes before line `line` (where blkparse's summary starts)."""
        self.events = self.events.filter(pl.col("position") < line)
        self.names = self.names.filter(pl.col("line") < line)


def scan_block(view, first_line: int) -> Scanned:
    buf = np.frombuffer(view, np.uint8)
    out = _text.scan_blkparse(buf, THREADS if len(buf) >= SMALL_BLOCK else 1, first_line)
    other = pl.DataFrame(out.other)
    rows = [(ln, s, bytes(buf[s:e])) for ln, s, e in other.iter_rows()]
    return Scanned(pl.DataFrame(out.events), pl.DataFrame(out.names), rows, int(out.newlines))


def decoded_events(decoded: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(events, names) of event lines `_decode` read (its columns, fields as text)."""
    out = _text.blkparse_events(decoded.select(list(EVENT_COLUMNS)).cast(EVENT_COLUMNS))
    return pl.DataFrame(out.events), pl.DataFrame(out.names)


def merged(taken: pl.DataFrame, decoded: pl.DataFrame) -> pl.DataFrame:
    """The scanner's events and the decoded lines' events of a block, in line order."""
    if not decoded.height:
        return taken
    if not taken.height:
        return decoded
    return pl.concat([taken, decoded]).sort("position")
