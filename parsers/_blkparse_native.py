"""blkparse event lines of the default layout read by the compiled line scanner
(scsitrace._native.text.scan_blkparse, Rust: memchr line splitting, fields read without
regex, the block's lines on every core with the GIL released) into the decoded fields
parsers/blkparse.py's `_decode` gives. The scanner takes only lines certain to be good events
of exactly those fields; the others (comments, the summary, messages, bad lines, rare forms)
come back by line for `_decode`, so its reasons and rare forms stay the reference."""
from __future__ import annotations

import os

import numpy as np
import polars as pl

from scsitrace._native import text as _text

THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16
INTS = ("major", "minor", "cpu", "seq", "sec", "nsec", "pid")
OPTIONAL = ("sector", "nsect", "split_sector", "from_major", "from_minor", "from_sector", "unplugs")
EVENT_COLUMNS = {"line_no": pl.Int64, **{c: pl.Int64 for c in INTS}, "act": pl.Utf8, "rwbs": pl.Utf8,
                 "rest": pl.Utf8, **{c: pl.Int64 for c in OPTIONAL}, "bracket": pl.Utf8}


def scan_block(view, first_line: int) -> tuple[pl.DataFrame, list[tuple[int, int, bytes]], int]:
    """(the events the scanner took, EVENT_COLUMNS; the other non-blank lines as (line, byte
    offset in the block, bytes); newlines in the block)."""
    buf = np.frombuffer(view, np.uint8)
    out = _text.scan_blkparse(buf, THREADS if len(buf) >= SMALL_BLOCK else 1)
    n = len(out.line)
    cols = {"line_no": out.line + first_line, **{c: getattr(out, c) for c in INTS},
            "act": _strings(out, "act", None), "rwbs": _strings(out, "rwbs", None),
            "rest": pl.Series([None] * n, dtype=pl.Utf8)}
    optional = pl.DataFrame(out.optional)
    cols.update({c: optional[c] for c in OPTIONAL})
    cols["bracket"] = _strings(out, "bracket", out.has_bracket)
    taken = pl.DataFrame(cols).cast(EVENT_COLUMNS) if n else pl.DataFrame(schema=EVENT_COLUMNS)
    other = [(first_line + int(k), int(s), bytes(buf[s:e]))
             for k, s, e in zip(out.other_line, out.other_start, out.other_end)]
    return taken, other, int(out.newlines)


def _strings(out, name: str, present: np.ndarray | None) -> pl.Series:
    """The packed strings `name` (null where not `present`)."""
    import pyarrow as pa
    ends = getattr(out, f"{name}_ends")
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    validity, nulls = None, 0
    if present is not None and not present.all():
        validity, nulls = pa.array(present).buffers()[1], int((~present).sum())
    arr = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(getattr(out, f"{name}_bytes")),
                                           validity, null_count=nulls)
    return pl.from_arrow(arr).cast(pl.Utf8)


def merged(taken: pl.DataFrame, decoded: pl.DataFrame) -> pl.DataFrame:
    """The scanner's events and `_decode`'s good events of a block, in line order."""
    if not decoded.height:
        return taken
    decoded = decoded.select(list(EVENT_COLUMNS)).cast(EVENT_COLUMNS)
    if not taken.height:
        return decoded
    return pl.concat([taken, decoded]).sort("line_no")
