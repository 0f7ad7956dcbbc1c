"""Walk of a capture file's record chain in one compiled pass (scsitrace._native.usb).

The layout is not written here: callers pass the header size and where its length field
sits, from the construct declarations (parsers/_pcap.py `dtype_of`). (The usbmon reader
walks pcap records itself, decoding each one as it goes: parsers/_usbmon_scan.py.)
"""
from __future__ import annotations

import numpy as np

from scsitrace._native import usb as _usb


def walk_chain(buf: np.ndarray, start: int, hdr_size: int, len_pos: int, big_endian: bool):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, and the
    position after the last one (past the end of `buf` when its data is cut)."""
    capacity = max(0, len(buf) - start) // hdr_size + 1
    offsets = np.empty(capacity, np.int64)
    n, pos = _usb.walk_chain(buf, int(start), int(hdr_size), int(len_pos), bool(big_endian), offsets)
    return offsets[:n], pos


# why a pcapng walk stopped (native/src/usb/pcapng.rs)
MORE, END, TRUNCATED, BAD = 0, 1, 2, 3


def walk_pcapng(buf: np.ndarray, start: int, base: int, big_endian: bool, interfaces: list, eof: bool,
                strict: bool):
    """The pcapng blocks of one read `buf` (file offset `base`) walked from `start` (an index
    into `buf`) with the `interfaces` ((link type, ns per tick)) known so far. Returns (the
    (packets, 6) int64 rows: link type, time in ns, block offset in the file, data offset in
    `buf`, captured length, original length; where the walk stopped, an index into `buf`;
    the byte order and interfaces there; the bad blocks skipped (lenient) as (offset, why);
    why it stopped: MORE, END, TRUNCATED or BAD; the offset of that block; BAD's message)."""
    rows, pos, big, interfaces, bad, stop, at, why = _usb.walk_pcapng(
        buf, int(start), int(base), bool(big_endian), interfaces, bool(eof), bool(strict))
    return rows.reshape(-1, 6), pos, big, interfaces, bad, stop, at, why
