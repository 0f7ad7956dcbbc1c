"""Compiled (numba) passes over a capture file's bytes: walking the record chain and
reading fixed-layout fields at record offsets, one loop each, no per-record Python.

Layouts are not written here: callers pass field offsets and widths derived from the
construct declarations (parsers/_pcap.py `dtype_of`).
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def walk_chain(buf, start, hdr_size, len_pos, big_endian):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, and the
    position after the last one (past the end of `buf` when its data is cut)."""
    end = buf.shape[0]
    last = end - hdr_size
    out = np.empty(max(16, (end - start) // 64), np.int64)
    n = 0
    pos = np.int64(start)
    while pos <= last:
        if n == out.shape[0]:
            grown = np.empty(out.shape[0] * 2, np.int64)
            grown[:n] = out
            out = grown
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
    return out[:n], pos


@njit(cache=True, nogil=True)
def read_fields(buf, offsets, field_pos, field_width):
    """(fields, records) uint64: little-endian unsigned integers of `field_width[j]` bytes
    (at most 8) at `offsets[i] + field_pos[j]`; bytes past the end of `buf` read as zero."""
    end = buf.shape[0]
    out = np.zeros((field_pos.shape[0], offsets.shape[0]), np.uint64)
    for i in range(offsets.shape[0]):
        base = offsets[i]
        for j in range(field_pos.shape[0]):
            p = base + field_pos[j]
            v = np.uint64(0)
            for b in range(field_width[j] - 1, -1, -1):
                v = v << np.uint64(8)
                if p + b < end:
                    v |= np.uint64(buf[p + b])
            out[j, i] = v
    return out


@njit(cache=True, nogil=True)
def gather_bytes(buf, offsets, counts, width):
    """(records, width) bytes: the first `counts[i]` (at most `width`) bytes at each
    offset, zero after them and past the end of `buf`."""
    end = buf.shape[0]
    out = np.zeros((offsets.shape[0], width), np.uint8)
    for i in range(offsets.shape[0]):
        p = offsets[i]
        n = min(counts[i], width, end - p)
        for b in range(n):
            out[i, b] = buf[p + b]
    return out
