"""usbmon text blocks read by the compiled line scanner (scsitrace._native.text, Rust:
memchr line splitting, fields read without regex, the block's lines on every core with the
GIL released) into URB columns (`scsitrace.usb.UrbColumns`, every data byte a line shows
kept). The scanner takes only lines that are certain to be good records of the fields
parsers/usbmon.py's TEXT_RECORD reads; the others (bad, non-ASCII, isochronous, values at a
range's edge) come back by line and are decoded by usbmon.py's regex reader, so its error
messages and rare forms stay the reference. Both kinds are merged back in line order."""
from __future__ import annotations

import os

import numpy as np
import polars as pl

from scsitrace._native import text as _text
from scsitrace.usb.urbs import DATA_PREFIX, UrbColumns, concat_urbs, take_bytes

THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16      # a block this small is scanned on one thread (spawning costs more)


def scan_block(view, first_line: int) -> tuple[UrbColumns, int, bool, list[tuple[int, bytes]]]:
    """(columns of the lines the scanner took, times as written; newlines in the block;
    whether any of them had a bus number; the other non-blank lines as (line, bytes))."""
    buf = np.frombuffer(view, np.uint8)
    out = _text.scan_usbmon(buf, THREADS if len(buf) >= SMALL_BLOCK else 1)
    n = len(out.t_ns)
    size = out.data_size
    cols = UrbColumns(
        t_ns=out.t_ns, urb_id=out.urb_id, event=out.event, xfer=out.xfer, ep=out.ep,
        bus=out.bus, dev=out.dev, status=out.status, status_null=np.zeros(n, np.bool_),
        length=out.length, setup=out.setup.reshape(n, 8), has_setup=out.has_setup,
        data_buf=out.data, data_at=out.data_at, data_size=size, data_head=_heads(out.data, out.data_at, size),
        data_len=np.maximum(size, 0), pos=out.pos + first_line)
    other = [(first_line + int(k), bytes(buf[s:e])) for k, s, e in
             zip(out.other_line, out.other_start, out.other_end)]
    return cols, int(out.newlines), bool(out.any_bus), other


def _heads(buf: np.ndarray, at: np.ndarray, size: np.ndarray) -> np.ndarray:
    """The first 4 data bytes of each URB, little-endian, zero-padded."""
    return take_bytes(buf, at, np.clip(size, 0, 4), 4).view("<u4").reshape(-1)


def frame_columns(urbs: pl.DataFrame) -> UrbColumns:
    """URB columns of the regex reader's frame (few rows: the lines the scanner left),
    every data byte kept."""
    n = urbs.height
    setup = np.zeros((n, 8), np.uint8)
    has_setup = np.zeros(n, np.bool_)
    for i, s in enumerate(urbs["setup"].to_list()):
        if s is not None:
            setup[i, :len(s)], has_setup[i] = np.frombuffer(s, np.uint8)[:8], True
    data = urbs["data"].to_list()
    size = np.array([-1 if d is None else len(d) for d in data], np.int64)
    buf = np.frombuffer(b"".join(d for d in data if d is not None), np.uint8).copy()
    at = np.concatenate(([0], np.cumsum(np.maximum(size, 0))[:-1])).astype(np.int64) if n else np.zeros(0, np.int64)
    event = np.array([ord(e) for e in urbs["event"].to_list()], np.uint8)

    def ints(name, dtype):
        return urbs[name].fill_null(0).to_numpy().astype(dtype)

    return UrbColumns(
        t_ns=ints("t_ns", np.int64), urb_id=ints("urb_id", np.uint64), event=event, xfer=ints("xfer", np.uint8),
        ep=ints("ep", np.uint8), bus=ints("bus", np.uint16), dev=ints("dev", np.uint8),
        status=ints("status", np.int32), status_null=np.zeros(n, np.bool_), length=ints("length", np.int64),
        setup=setup, has_setup=has_setup, data_buf=buf, data_at=at, data_size=size,
        data_head=_heads(buf, at, size), data_len=ints("data_len", np.int64), pos=ints("pos", np.int64))


def merged(a: UrbColumns, b: UrbColumns) -> UrbColumns:
    """Both sets of URBs in line order."""
    if not len(b):
        return a
    if not len(a):
        return b
    both = concat_urbs([a, b])
    return both.take(np.argsort(both.pos, kind="stable"))


def unwrapped(t: np.ndarray, last: int | None, wraps: int, wrap_ns: int) -> tuple[np.ndarray, int]:
    """The times plus the 4096 s wraps seen so far (a step back of more than half a wrap is
    one more wrap), and the wraps at the last one."""
    step = np.empty_like(t)
    step[0] = t[0] - last if last is not None else 0
    np.subtract(t[1:], t[:-1], out=step[1:])
    wrapped = np.cumsum(step < -(wrap_ns // 2)) + wraps
    return t + wrapped * wrap_ns, int(wrapped[-1])


def chunk(u: UrbColumns) -> UrbColumns:
    """A block's columns as a stream's chunk: the first DATA_PREFIX data bytes kept (what
    the analysis reads, as `urb_columns` of a frame keeps)."""
    return UrbColumns(**{**vars(u), "data_size": np.minimum(u.data_size, DATA_PREFIX)})


def frame(u: UrbColumns, urbs_schema: dict) -> pl.DataFrame:
    """The urbs frame of the columns, every data byte kept."""
    n = len(u)
    frame = pl.DataFrame({
        "t_ns": u.t_ns, "urb_id": u.urb_id,
        "event": pl.Series(u.event).replace_strict({83: "S", 67: "C", 69: "E"}, default=None, return_dtype=pl.Utf8),
        "xfer": u.xfer, "ep": u.ep, "bus": u.bus, "dev": u.dev, "status": u.status, "length": u.length,
        "setup": _binary(u.setup.reshape(-1), np.arange(n, dtype=np.int64) * 8, np.where(u.has_setup, 8, -1)),
        "data": _binary(u.data_buf, u.data_at, u.data_size),
        "data_len": u.data_len, "pos": u.pos,
    })
    return frame.with_columns(pl.col(c).cast(t) for c, t in urbs_schema.items())


def _binary(buf: np.ndarray, at: np.ndarray, size: np.ndarray) -> pl.Series:
    """Binary series of buf[at:at+size] per row (null where size < 0)."""
    counts = np.maximum(size, 0)
    offsets = np.zeros(len(at) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    if np.array_equal(at[counts > 0], offsets[:-1][counts > 0]):
        values = buf[:offsets[-1]]                  # packed in row order already (no merge)
    else:
        values = buf[np.repeat(at - offsets[:-1], counts) + np.arange(offsets[-1], dtype=np.int64)]
    import pyarrow as pa
    present = size >= 0
    validity = None if present.all() else pa.array(present).buffers()[1]
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(at),
                                           [validity, pa.py_buffer(offsets), pa.py_buffer(values.tobytes())],
                                           null_count=int((~present).sum()))
    return pl.from_arrow(arr).cast(pl.Binary)
