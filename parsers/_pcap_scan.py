"""Compiled (numba) walk of a capture file's record chain: one loop, no per-record Python.

The layout is not written here: callers pass the header size and where its length field
sits, from the construct declarations (parsers/_pcap.py `dtype_of`). (The usbmon reader
walks pcap records itself, decoding each one as it goes: parsers/_usbmon_scan.py.)
"""
from __future__ import annotations

import numpy as np

from scsitrace._jit import compiled

from ._bytes import u32


def walk_chain(buf: np.ndarray, start: int, hdr_size: int, len_pos: int, big_endian: bool):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, and the
    position after the last one (past the end of `buf` when its data is cut)."""
    capacity = max(0, len(buf) - start) // hdr_size + 1
    offsets = np.empty(capacity, np.int64)
    n, pos = _walk(buf, offsets, start, hdr_size, len_pos, big_endian)
    return offsets[:n], pos


@compiled
def _walk(buf, offsets, start, hdr_size, len_pos, big_endian):
    end = buf.shape[0]
    n = 0
    pos = np.int64(start)
    while pos <= end - hdr_size:
        offsets[n] = pos
        n += 1
        pos += hdr_size + np.int64(u32(buf, pos + len_pos, big_endian))
    return n, pos
