"""Compiled (numba) passes over a capture file's bytes: walking the record chain and
reading fixed-layout fields of each record, one loop, no per-record Python.

Layouts are not written here: callers pass field positions and numpy dtypes derived from
the construct declarations (parsers/_pcap.py `dtype_of`). Fields are little-endian
integers (or raw bytes) of 1, 2, 4 or 8 bytes; each width is read into one array (a row
per field), typed views of those rows are handed back. Big outputs are allocated by
numpy, sized for the worst case: pages never written cost nothing.
"""
from __future__ import annotations

import numpy as np
from numba import njit

WIDTHS = (1, 2, 4, 8)


class Fields:
    """Where the requested fields sit (`fields`: name -> (position, dtype)) and the arrays
    that receive them for up to `capacity` records."""

    def __init__(self, fields: dict[str, tuple[int, np.dtype]], capacity: int):
        self.fields = fields
        self.names = {w: [name for name, (_, dt) in fields.items() if dt.itemsize == w] for w in WIDTHS}
        if sum(map(len, self.names.values())) != len(fields):
            raise TypeError("fields must be 1, 2, 4 or 8 bytes wide")
        self.pos = [np.array([fields[name][0] for name in self.names[w]], np.int64) for w in WIDTHS]
        self.out = [np.empty((len(p), capacity), f"u{w}") for p, w in zip(self.pos, WIDTHS)]

    def values(self, n: int) -> dict[str, np.ndarray]:
        """The fields of the first `n` records, typed as declared (raw bytes: (n, width))."""
        out = {}
        for w, group in zip(WIDTHS, self.out):
            for j, name in enumerate(self.names[w]):
                declared = self.fields[name][1]
                row = group[j, :n]
                out[name] = row.view(np.uint8).reshape(-1, w) if declared.kind == "V" else \
                    row.view(declared.newbyteorder("="))
        return out


def _words(buf: np.ndarray) -> np.ndarray:
    return buf[:len(buf) // 8 * 8].view("<u8")


def walk_chain(buf: np.ndarray, start: int, hdr_size: int, len_pos: int, big_endian: bool,
               fields: dict[str, tuple[int, np.dtype]] | None = None):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, the position
    after the last one (past the end of `buf` when its data is cut), and the requested
    `fields` of every record (positions counted from the record's data), read in the same
    pass."""
    capacity = max(0, len(buf) - start) // hdr_size + 1
    offsets = np.empty(capacity, np.int64)
    f = Fields(fields or {}, capacity)
    n, pos = _scan(buf, _words(buf), True, offsets, start, hdr_size, len_pos, big_endian, *f.pos, *f.out)
    return offsets[:n], pos, f.values(n)


def read_fields(buf: np.ndarray, offsets: np.ndarray, fields: dict[str, tuple[int, np.dtype]]) -> dict[str, np.ndarray]:
    """The `fields` at `offsets[i] + position` for every record, typed as declared; bytes
    past the end of `buf` read as zero."""
    f = Fields(fields, len(offsets))
    _scan(buf, _words(buf), False, np.asarray(offsets, np.int64), 0, 0, 0, False, *f.pos, *f.out)
    return f.values(len(offsets))


@njit(cache=True, nogil=True)
def _scan(buf, words, walk, offsets, start, hdr_size, len_pos, big_endian, pos1, pos2, pos4, pos8,
          out1, out2, out4, out8):
    """Reads the fields of each record: walking the chain from `start` (and filling
    `offsets` with the records' starts) when `walk`, else at the given `offsets` (of the
    data). Returns (records, position after the last one when walking)."""
    end = buf.shape[0]
    span = 8
    for j in range(pos1.shape[0]):
        span = max(span, pos1[j] + 8)
    for j in range(pos2.shape[0]):
        span = max(span, pos2[j] + 8)
    for j in range(pos4.shape[0]):
        span = max(span, pos4[j] + 8)
    for j in range(pos8.shape[0]):
        span = max(span, pos8[j] + 8)
    fast_end = (words.shape[0] - 1) * 8 - span
    n = 0
    pos = np.int64(start)
    while (pos <= end - hdr_size) if walk else (n < offsets.shape[0]):
        if walk:
            offsets[n] = pos
            base = pos + hdr_size
        else:
            base = offsets[n]
        if base <= fast_end:
            for j in range(pos1.shape[0]):
                out1[j, n] = np.uint8(_u64_at(words, base + pos1[j]) & np.uint64(0xFF))
            for j in range(pos2.shape[0]):
                out2[j, n] = np.uint16(_u64_at(words, base + pos2[j]) & np.uint64(0xFFFF))
            for j in range(pos4.shape[0]):
                out4[j, n] = np.uint32(_u64_at(words, base + pos4[j]) & np.uint64(0xFFFFFFFF))
            for j in range(pos8.shape[0]):
                out8[j, n] = _u64_at(words, base + pos8[j])
        else:      # the end of the file: byte by byte
            for j in range(pos1.shape[0]):
                out1[j, n] = np.uint8(_slow_u64_at(buf, base + pos1[j], 1))
            for j in range(pos2.shape[0]):
                out2[j, n] = np.uint16(_slow_u64_at(buf, base + pos2[j], 2))
            for j in range(pos4.shape[0]):
                out4[j, n] = np.uint32(_slow_u64_at(buf, base + pos4[j], 4))
            for j in range(pos8.shape[0]):
                out8[j, n] = _slow_u64_at(buf, base + pos8[j], 8)
        n += 1
        if walk:
            p = pos + len_pos
            if big_endian:
                length = (np.int64(buf[p]) << 24) | (np.int64(buf[p + 1]) << 16) | (np.int64(buf[p + 2]) << 8) \
                    | np.int64(buf[p + 3])
            else:
                length = (np.int64(buf[p + 3]) << 24) | (np.int64(buf[p + 2]) << 16) | (np.int64(buf[p + 1]) << 8) \
                    | np.int64(buf[p])
            pos += hdr_size + length
    return n, pos


@njit(cache=True, nogil=True, inline="always")
def _u64_at(words, p):
    """The 8 bytes at byte `p` as a little-endian integer, from two aligned word loads."""
    i = p >> 3
    shift = np.uint64((p & 7) * 8)
    if shift == 0:
        return words[i]
    return (words[i] >> shift) | (words[i + 1] << (np.uint64(64) - shift))


@njit(cache=True, nogil=True, inline="always")
def _slow_u64_at(buf, p, width):
    """Like _u64_at, byte by byte: bytes past the end of `buf` (or before it) read as zero."""
    v = np.uint64(0)
    for b in range(width - 1, -1, -1):
        v = v << np.uint64(8)
        if 0 <= p + b < buf.shape[0]:
            v |= np.uint64(buf[p + b])
    return v
