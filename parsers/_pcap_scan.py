"""Compiled (numba) passes over a capture file's bytes: walking the record chain and
reading fixed-layout fields at record offsets, one loop each, no per-record Python.

Layouts are not written here: callers pass field offsets and widths derived from the
construct declarations (parsers/_pcap.py `dtype_of`).
"""
from __future__ import annotations

import numpy as np
from numba import njit


def walk_chain(buf: np.ndarray, start: int, hdr_size: int, len_pos: int, big_endian: bool):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, and the
    position after the last one (past the end of `buf` when its data is cut)."""
    out = np.empty(max(0, len(buf) - start) // hdr_size + 1, np.int64)   # untouched pages cost nothing
    n, pos = _walk_chain(buf, start, hdr_size, len_pos, big_endian, out)
    return out[:n], pos


@njit(cache=True, nogil=True)
def _walk_chain(buf, start, hdr_size, len_pos, big_endian, out):
    end = buf.shape[0]
    last = end - hdr_size
    n = 0
    pos = np.int64(start)
    while pos <= last:
        out[n] = pos
        n += 1
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
    """Like _u64_at, byte by byte: bytes past the end of `buf` read as zero."""
    v = np.uint64(0)
    for b in range(width - 1, -1, -1):
        v = v << np.uint64(8)
        if p + b < buf.shape[0]:
            v |= np.uint64(buf[p + b])
    return v


@njit(cache=True, nogil=True)
def _read_fields(buf, words, offsets, pos1, pos2, pos4, pos8, out1, out2, out4, out8):
    n = offsets.shape[0]
    span = 8
    for j in range(pos1.shape[0]):
        span = max(span, pos1[j] + 8)
    for j in range(pos2.shape[0]):
        span = max(span, pos2[j] + 8)
    for j in range(pos4.shape[0]):
        span = max(span, pos4[j] + 8)
    for j in range(pos8.shape[0]):
        span = max(span, pos8[j] + 8)
    fast_end = (words.shape[0] - 1) * 8
    for i in range(n):
        base = offsets[i]
        if base + span <= fast_end:
            for j in range(pos1.shape[0]):
                out1[j, i] = np.uint8(_u64_at(words, base + pos1[j]) & np.uint64(0xFF))
            for j in range(pos2.shape[0]):
                out2[j, i] = np.uint16(_u64_at(words, base + pos2[j]) & np.uint64(0xFFFF))
            for j in range(pos4.shape[0]):
                out4[j, i] = np.uint32(_u64_at(words, base + pos4[j]) & np.uint64(0xFFFFFFFF))
            for j in range(pos8.shape[0]):
                out8[j, i] = _u64_at(words, base + pos8[j])
        else:      # the end of the file
            for j in range(pos1.shape[0]):
                out1[j, i] = np.uint8(_slow_u64_at(buf, base + pos1[j], 1))
            for j in range(pos2.shape[0]):
                out2[j, i] = np.uint16(_slow_u64_at(buf, base + pos2[j], 2))
            for j in range(pos4.shape[0]):
                out4[j, i] = np.uint32(_slow_u64_at(buf, base + pos4[j], 4))
            for j in range(pos8.shape[0]):
                out8[j, i] = _slow_u64_at(buf, base + pos8[j], 8)


WIDTHS = (1, 2, 4, 8)


def read_fields(buf: np.ndarray, offsets: np.ndarray, fields: dict[str, tuple[int, np.dtype]]) -> dict[str, np.ndarray]:
    """Per field name, its value at `offsets[i] + position` for every record, typed as
    declared (`fields`: name -> (position, numpy dtype of 1, 2, 4 or 8 bytes: integer,
    little-endian, or raw bytes)); bytes past the end of `buf` read as zero. Raw fields
    come back as (records, width) byte matrices. Each width is one array (rows = fields):
    no single allocation grows with the number of fields."""
    names = {w: [name for name, (_, dt) in fields.items() if dt.itemsize == w] for w in WIDTHS}
    if sum(map(len, names.values())) != len(fields):
        raise TypeError("fields must be 1, 2, 4 or 8 bytes wide")
    pos = [np.array([fields[name][0] for name in names[w]], np.int64) for w in WIDTHS]
    words = buf[:len(buf) // 8 * 8].view("<u8")
    groups = [np.empty((len(p), len(offsets)), f"u{w}") for p, w in zip(pos, WIDTHS)]
    _read_fields(buf, words, np.asarray(offsets, np.int64), *pos, *groups)
    out = {}
    for w, group in zip(WIDTHS, groups):
        for j, name in enumerate(names[w]):
            declared = fields[name][1]
            row = group[j]
            out[name] = row.view(np.uint8).reshape(-1, w) if declared.kind == "V" else \
                row.view(declared.newbyteorder("="))
    return out
