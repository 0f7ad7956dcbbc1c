"""QEMU trace lines read by the compiled line scanner (scsitrace._native.text.qemu_block, Rust:
memchr line splitting, the stamp and each event's fields read without regex, the block's lines
on every core with the GIL released) into the decoded events `parsers/qemu_lsi.py` works on
(`_split_lines` + `_qemu_fields.decode_fields`). The scanner takes only lines certain to be good
records decoded exactly as those give them; every other non-blank line comes back by line for
them, so their reasons and rare forms stay the reference."""
from __future__ import annotations

import os

import numpy as np
import polars as pl

from . import _lines

THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16
NUMBERS = ("target", "lun", "ext_code", "ext_len", "len", "status", "msg_byte", "opcode", "dir", "length", "lba",
           "sector", "sectors")
EVENTS = {"line_no": pl.Int64, "t_abs_ns": pl.Int64, "event": pl.Utf8, "detail": pl.Utf8,
          **{n: pl.Int64 for n in NUMBERS}, "compare": pl.Utf8, "atn": pl.Boolean, "bad_field": pl.Utf8,
          "tag": pl.Int64}
"""The decoded events, as `_qemu_fields.decode_fields` gives them."""


def scan_block(view, first_line: int, parts: int | None = None) -> tuple[pl.DataFrame, list[tuple[int, bytes]], int]:
    """(the records the scanner took, EVENTS; the other non-blank lines as (line, bytes); the
    lines of the block)."""
    from scsitrace._native import text
    buf = np.frombuffer(view, np.uint8)
    return frames_of(text.qemu_block(buf, parts_of(buf, parts)), buf, first_line)


def parts_of(buf: np.ndarray, parts: int | None = None) -> int:
    """How many parts the scanner cuts a block in (one a core; one for a small block)."""
    return parts if parts is not None else THREADS if len(buf) >= SMALL_BLOCK else 1


def frames_of(out, buf: np.ndarray, first_line: int) -> tuple[pl.DataFrame, list[tuple[int, bytes]], int]:
    """`scan_block`'s result of the scanner's (`QemuScan`) of `buf`."""
    ev = pl.DataFrame(out.events)
    taken = ev.select(
        (pl.col("line") + first_line).alias("line_no"), "t_abs_ns",
        pl.Series(out.names, dtype=pl.Utf8).gather(ev["event"]).alias("event"),
        _lines.strings(out.detail).alias("detail"), *NUMBERS,
        _lines.strings(out.compare).alias("compare"), "atn", pl.lit(None, pl.Utf8).alias("bad_field"), "tag",
    ).cast(EVENTS)
    other = pl.DataFrame(out.other)
    lines = [(first_line + k, bytes(buf[s:e])) for k, s, e in other.iter_rows()]
    return taken, lines, out.lines


def in_order(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """Decoded events of both readers, in line order."""
    parts = [p.select(list(EVENTS)).cast(EVENTS) for p in parts if p.height]
    if not parts:
        return pl.DataFrame(schema=EVENTS)
    return pl.concat(parts).sort("line_no") if len(parts) > 1 else parts[0]
