"""Fixed-width unsigned integers read from a byte buffer in compiled passes (numba), at any
alignment and in either byte order, for the binary readers (blktrace, pcap, usbmon).

Each value is read little-endian and then swapped when big-endian: a byte-order branch
around the loads cost 5x. Offsets become unsigned before indexing, so there is no
negative-index check per byte and the compiler merges the byte loads into one load. The
helpers are compiled into their callers (`inlined`): they run once per field of every record.
"""
from __future__ import annotations

import numpy as np

from scsitrace._jit import inlined


@inlined
def u16(b, pos, big):
    """The unsigned 16-bit integer at `pos` (np.uint64)."""
    p = np.uint64(pos)
    v = np.uint64(b[p]) | (np.uint64(b[p + np.uint64(1)]) << np.uint64(8))
    return ((v >> np.uint64(8)) | ((v & np.uint64(0xFF)) << np.uint64(8))) if big else v


@inlined
def u32(b, pos, big):
    """The unsigned 32-bit integer at `pos` (np.uint64)."""
    p = np.uint64(pos)
    v = (np.uint32(b[p]) | (np.uint32(b[p + np.uint64(1)]) << np.uint32(8))
         | (np.uint32(b[p + np.uint64(2)]) << np.uint32(16)) | (np.uint32(b[p + np.uint64(3)]) << np.uint32(24)))
    return np.uint64(_bswap32(v) if big else v)


@inlined
def u64(b, pos, big):
    """The unsigned 64-bit integer at `pos` (np.uint64)."""
    lo, hi = u32(b, pos, False), u32(b, pos + 4, False)
    if big:
        lo, hi = np.uint64(_bswap32(np.uint32(hi))), np.uint64(_bswap32(np.uint32(lo)))
    return lo | (hi << np.uint64(32))


@inlined
def _bswap32(v):
    return (((v & np.uint32(0xFF)) << np.uint32(24)) | ((v & np.uint32(0xFF00)) << np.uint32(8))
            | ((v >> np.uint32(8)) & np.uint32(0xFF00)) | (v >> np.uint32(24)))
