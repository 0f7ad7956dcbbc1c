"""Shared stage for line-oriented text formats: read a file in large blocks and hand
each block over as a polars frame of (line number, text), without a Python loop per line.

Lines keep their exact numbering (blank and comment lines included), so every parser can
name the file and line of a bad record. Invalid UTF-8 is reported at its line.
"""
from __future__ import annotations

import mmap
import os
from typing import BinaryIO, Iterator

import numpy as np
import polars as pl

from scsitrace.errors import BadInput

BLOCK_BYTES = 32 << 20
MAX_LINE_BYTES = 256 << 20
"""A longer line is no record of any text format (a file without newlines, a NUL tail): bad
input, found before it is held in memory whole."""


def _too_long(path: str, line: int | None = None, offset: int | None = None) -> BadInput:
    return BadInput(path, f"line longer than {MAX_LINE_BYTES} bytes (no text trace has one: a file "
                          "without newlines, or a damaged tail)", line=line, offset=offset)


SKIPPED_LINE = b"\x00(a-line-longer-than-the-bound-skipped)\n"
"""What a lenient read yields for a line past MAX_LINE_BYTES (its bytes are skipped, never
held): one line of one token that every text parser counts as a bad record (a NUL byte), so
the line numbers after it stay right and the skip is counted where the parser counts others."""

SKIP_BYTES = 16 << 20   # the window a skipped line is scanned in


def _line_at(path: str, start_offset: int, first_line: int, pos: int) -> int:
    """The line number of the line starting at byte `pos` (error path only: reads the file
    from `start_offset` to `pos` again, a block at a time)."""
    line = first_line
    with open(path, "rb") as fh:
        fh.seek(start_offset)
        left = pos - start_offset
        while left > 0:
            chunk = fh.read(min(SKIP_BYTES, left))
            if not chunk:
                break
            line += chunk.count(b"\n")
            left -= len(chunk)
    return line


def _overlong(fh: BinaryIO, path: str, pos: int, start_offset: int, first_line: int, strict: bool) -> bytes:
    """The line starting at `pos` is past the bound: strict, bad input naming its line;
    lenient, `fh` is moved past it (a window at a time) and SKIPPED_LINE stands for it."""
    if strict:
        raise _too_long(path, line=_line_at(path, start_offset, first_line, pos))
    fh.seek(pos)
    while True:
        chunk = fh.read(SKIP_BYTES)
        if not chunk:
            return SKIPPED_LINE
        nl = chunk.find(b"\n")
        if nl >= 0:
            fh.seek(nl + 1 - len(chunk), 1)
            return SKIPPED_LINE


def bounded_lines(fh: BinaryIO, path: str, first_line: int = 1) -> Iterator[bytes]:
    """The raw lines of `fh` from where it stands (a header), none held past MAX_LINE_BYTES:
    a longer one is bad input naming its line."""
    line = first_line
    while True:
        raw = fh.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            raise _too_long(path, line=line)
        yield raw
        line += 1


ARROW_SPLIT_BYTES = 4 << 20
"""Blocks from this size on are split into lines by pyarrow, zero-copy (about 2.5x faster
than polars' split); smaller ones by polars, which spares small files pyarrow's import (0.1 s)."""


def _lines_series(buf: bytes, decoded: str) -> pl.Series:
    """The lines of a block (`decoded`: `buf` as text), each with its trailing newline."""
    if len(buf) >= ARROW_SPLIT_BYTES or not buf:
        return pl.from_arrow(_lines_array(buf)).cast(pl.Utf8)
    return pl.Series([decoded]).str.split("\n", inclusive=True).explode()


def _lines_array(buf: bytes):
    """Zero-copy string array (pyarrow LargeStringArray) of the lines in `buf` (each keeps
    its trailing newline)."""
    import pyarrow as pa            # imported here: the formats that never split lines start faster
    data = np.frombuffer(buf, dtype=np.uint8)
    ends = np.flatnonzero(data == 10) + 1
    if len(ends) == 0 or ends[-1] != len(buf):
        ends = np.append(ends, len(buf))
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    return pa.LargeStringArray.from_buffers(
        len(offsets) - 1, pa.py_buffer(offsets), pa.py_buffer(buf))


def string_array(data: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None) -> pl.Series:
    """Strings from their bytes one after another (`data`, UTF-8) and where each ends; `valid`:
    which are there (the others null)."""
    return pl.from_arrow(_arrow_array("large_string", data, ends, valid)).cast(pl.Utf8)


def strings(column) -> pl.Series:
    """A string column of the compiled core (`native/src/text/mod.rs:StrCol::into_py`: Arrow
    strings, null where absent) as a polars one."""
    return pl.DataFrame(column).to_series().cast(pl.Utf8).alias("")


def binary_array(data: np.ndarray, ends: np.ndarray) -> pl.Series:
    """Byte strings from their bytes one after another and where each ends."""
    return pl.from_arrow(_arrow_array("large_binary", data, ends)).cast(pl.Binary)


def _arrow_array(kind: str, data: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None):
    import pyarrow as pa
    offsets = np.concatenate(([0], ends)).astype(np.int64)
    mask = None if valid is None or valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(getattr(pa, kind)(), len(ends), [mask, pa.py_buffer(offsets), pa.py_buffer(data)])


def _check_utf8(buf: bytes, path: str, first_line: int) -> None:
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = first_line + buf.count(b"\n", 0, exc.start)
        raise BadInput(path, "not UTF-8 text (byte %d of the line is invalid)"
                       % (exc.start - (buf.rfind(b"\n", 0, exc.start) + 1) + 1), line=line) from None


def _replace_invalid_utf8(buf: bytes) -> tuple[bytes, set[int]]:
    """Lenient path: lines that are not UTF-8 become U+FFFD markers; returns their indexes."""
    bad = set()
    lines = buf.split(b"\n")
    for i, raw in enumerate(lines):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            bad.add(i)
            lines[i] = "\ufffd".encode()
    return b"\n".join(lines), bad


def iter_byte_blocks(path: str, *, start_offset: int = 0, first_line: int = 1,
                     block_bytes: int = BLOCK_BYTES, progress=None,
                     count_lines: bool = True, views: bool = False,
                     strict: bool = True) -> Iterator[tuple[bytes, int]]:
    """Yield (block, line number of its first line): whole lines only, in file order.
    Without `count_lines` the numbers are not kept up (a caller that counts lines itself
    saves a pass over the bytes); with `views` blocks are memoryviews (no copy). A line past
    MAX_LINE_BYTES is bad input (strict) or skipped as one SKIPPED_LINE (lenient)."""
    if views:
        mapped = _mapped(path)
        if mapped is None:
            yield from _ring_blocks(path, start_offset, first_line, block_bytes, progress, strict)
        else:
            yield from _mapped_blocks(mapped, start_offset, first_line, block_bytes, progress, path, strict)
        return
    line_no = first_line
    with open(path, "rb") as fh:
        fh.seek(start_offset)
        while True:
            at = fh.tell()
            block = fh.read(block_bytes)
            if len(block) == block_bytes:
                cut = block.rfind(b"\n")
                while cut < 0:  # a line longer than the block: read on
                    if len(block) > MAX_LINE_BYTES:
                        block = _overlong(fh, path, at, start_offset, first_line, strict)
                        cut = len(block) - 1
                        break
                    more = fh.read(block_bytes)
                    block += more
                    cut = block.rfind(b"\n") if more else len(block) - 1
                if cut + 1 < len(block):  # give back the partial last line (one copy, no joins)
                    fh.seek(cut + 1 - len(block), 1)
                    block = memoryview(block)[:cut + 1] if views else block[:cut + 1]
            if progress is not None:
                progress(fh.tell() - at)
            if not block:
                return
            yield block, line_no
            if count_lines:
                line_no += block.count(b"\n")


def _mapped(path: str) -> mmap.mmap | None:
    """The file mapped read-only, or None where it cannot be (empty, a pipe)."""
    try:
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError):
        return None
    if hasattr(mm, "madvise"):
        mm.madvise(mmap.MADV_SEQUENTIAL)
    return mm


def _mapped_blocks(mm: mmap.mmap, start_offset: int, first_line: int, block_bytes: int, progress,
                   path: str = "input", strict: bool = True):
    """Whole-line blocks as views of the mapped file: nothing is copied here; pages are read
    where the blocks are scanned (the scanner's threads). The mapping lives while any view
    does. Pages of blocks RING blocks back leave this process's resident set (they stay in
    the page cache; a view still reading them only faults them in again), so the peak RSS
    does not grow with the file."""
    pos, size = start_offset, len(mm)
    whole = memoryview(mm)
    starts: list[int] = []
    released = 0
    while pos < size:
        end = min(pos + block_bytes, size)
        cut = mm.rfind(b"\n", pos, end) if end < size else size - 1
        if cut < 0:  # a line longer than the block
            cut = mm.find(b"\n", end, pos + MAX_LINE_BYTES + 1)
            if cut < 0 and size - pos > MAX_LINE_BYTES:
                if strict:
                    raise _too_long(path, line=_line_at(path, start_offset, first_line, pos))
                after = _skip_mapped(mm, pos)
                if progress is not None:
                    progress(after - pos)
                yield SKIPPED_LINE, first_line
                pos, released = after, after - after % mmap.PAGESIZE
                continue
            cut = size - 1 if cut < 0 else cut
        view = whole[pos:cut + 1]
        if progress is not None:
            progress(len(view))
        yield view, first_line
        starts.append(pos)
        if len(starts) > RING:
            released = _release(mm, released, starts.pop(0))
        pos = cut + 1


def _skip_mapped(mm: mmap.mmap, pos: int) -> int:
    """Where the line starting at `pos` ends (past its newline, or the end of the file),
    scanned a window at a time, each window dropped from the resident set once scanned."""
    size = len(mm)
    while pos < size:
        end = min(pos + SKIP_BYTES, size)
        nl = mm.find(b"\n", pos, end)
        if hasattr(mmap, "MADV_DONTNEED"):
            start = pos - pos % mmap.PAGESIZE
            mm.madvise(mmap.MADV_DONTNEED, start, end - start if end < size else size - start)
        if nl >= 0:
            return nl + 1
        pos = end
    return size


def _release(mm: mmap.mmap, start: int, end: int) -> int:
    """Drop [start, end) of the mapping from the resident set (whole pages); returns where the
    next release starts."""
    end -= end % mmap.PAGESIZE
    if end > start and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED, start, end - start)
        return end
    return start


RING = 6  # buffers in rotation: enough for the blocks a reader keeps in flight (at most 4)


def _ring_blocks(path: str, start_offset: int, first_line: int, block_bytes: int, progress,
                 strict: bool = True):
    """Whole-line blocks as views into a few reused buffers (no allocation or copy per block).
    A view stays valid until RING more blocks have been read."""
    ring = [bytearray(block_bytes) for _ in range(RING)]
    k = 0
    with open(path, "rb") as fh:
        fh.seek(start_offset)
        while True:
            buf = ring[k % RING]
            k += 1
            at = fh.tell()
            n = fh.readinto(buf)
            if not n:
                return
            cut = buf.rfind(b"\n", 0, n) if n == block_bytes else n - 1
            if cut < 0:  # a line longer than the block: read it whole, the slow way
                rest = fh.read(block_bytes)
                block = bytes(buf[:n]) + rest
                while rest and b"\n" not in rest:
                    if len(block) > MAX_LINE_BYTES:
                        block = rest = _overlong(fh, path, at, start_offset, first_line, strict)
                        break
                    rest = fh.read(block_bytes)
                    block += rest
                cut = block.rfind(b"\n") if rest else len(block) - 1
                fh.seek(cut + 1 - len(block), 1)
                view = memoryview(block)[:cut + 1]
            else:
                if cut + 1 < n:
                    fh.seek(cut + 1 - n, 1)
                view = memoryview(buf)[:cut + 1]
            if progress is not None:
                progress(fh.tell() - at)
            yield view, first_line


def iter_line_blocks(path: str, *, strict: bool, start_offset: int = 0, first_line: int = 1,
                     block_bytes: int = BLOCK_BYTES, progress=None) -> Iterator[pl.DataFrame]:
    """Yield frames `line_no:i64, text:str` covering the file from `start_offset` on.

    In lenient mode, undecodable lines come through as the single character U+FFFD so the
    caller can count them as bad; in strict mode the first one raises BadInput.
    """
    for buf, line_no in iter_byte_blocks(path, start_offset=start_offset, first_line=first_line,
                                         block_bytes=block_bytes, progress=progress, strict=strict):
        yield _block_frame(buf, path, line_no, strict)


def _block_frame(buf: bytes, path: str, line_no: int, strict: bool) -> pl.DataFrame:
    try:
        decoded = buf.decode("utf-8")
    except UnicodeDecodeError:
        if strict:
            _check_utf8(buf, path, line_no)
        buf, _ = _replace_invalid_utf8(buf)
        decoded = buf.decode("utf-8")
    text = _lines_series(buf, decoded)
    n = len(text)
    return pl.DataFrame({
        "line_no": pl.int_range(line_no, line_no + n, eager=True, dtype=pl.Int64),
        "text": text,
    })


def file_size(path: str) -> int:
    return os.stat(path).st_size


def read_head(fh: BinaryIO, n: int = 4096) -> bytes:
    pos = fh.tell()
    head = fh.read(n)
    fh.seek(pos)
    return head


# ---------------------------------------------------------------- checked fields
# Text fields become numbers here, never by a non-strict cast alone: a field that does not
# parse or lies outside its range is null, and the parser names the line (the error contract:
# no value outside its field's range is accepted silently).

MAX_SECONDS = (2**63 - 1) // 10**9 - 1     # the last whole second an int64 of ns can hold
U32 = (0, 2**32 - 1)
I32 = (-2**31, 2**31 - 1)
I64 = (-2**63, 2**63 - 1)


def checked_int(text: pl.Expr, lo: int, hi: int, *, base: int = 10) -> pl.Expr:
    """A decimal (or `base`) integer field as Int64; null when it is not one or lies outside
    [lo, hi]."""
    if base == 10:
        value = text.str.strip_chars().cast(pl.Int64, strict=False)
    else:
        value = text.str.strip_chars().str.to_integer(base=base, strict=False)
    return pl.when(value.is_between(lo, hi)).then(value).otherwise(None)


def seconds_ns(text: pl.Expr) -> pl.Expr:
    """`SECONDS[.FRACTION]` as int64 nanoseconds; null when it is not that or would overflow
    int64 (more than about 292 years of seconds)."""
    parts = text.str.strip_chars().str.split(".")
    whole = parts.list.get(0)
    frac = parts.list.get(1, null_on_oob=True).fill_null("")
    sec = checked_int(whole, 0, MAX_SECONDS)
    ok = whole.str.contains(r"^\d+$") & frac.str.contains(r"^\d*$") & (parts.list.len() <= 2)
    ns = frac.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64, strict=False)
    return pl.when(ok).then(sec * 1_000_000_000 + ns).otherwise(None)


def bad_bytes(text: pl.Expr) -> pl.Expr:
    """Lines no text format allows: a NUL byte, or bytes that were not UTF-8 (the lenient
    reader turned them into U+FFFD)."""
    return text.str.contains("\x00", literal=True) | text.str.contains("\ufffd", literal=True)


def fallback_frame(other: list[tuple[int, bytes]], path: str, strict: bool) -> pl.DataFrame:
    """The lines a compiled scanner left to a reader's Python patterns, as the frame the line
    layer hands over (line_no, text). A line that is not UTF-8 raises (strict: the first such
    line of the block, before any other bad line, as the line layer does) or becomes U+FFFD
    (lenient: a bad line)."""
    texts = []
    for line_no, raw in other:
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            if strict:
                raise BadInput(path, "not UTF-8 text (byte %d of the line is invalid)" % (exc.start + 1),
                               line=line_no) from None
            texts.append("\ufffd")
    return pl.DataFrame({"line_no": pl.Series([ln for ln, _ in other], dtype=pl.Int64),
                         "text": pl.Series(texts, dtype=pl.Utf8)})
