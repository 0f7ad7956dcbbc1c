"""Walk of a capture file's record chain in one compiled pass (scsitrace._native.usb).

The layout is not written here: callers pass the header size and where its length field
sits, from the construct declarations (parsers/_pcap.py `dtype_of`). (The usbmon reader
walks pcap records itself, decoding each one as it goes: parsers/_usbmon_scan.py.)
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl

from scsitrace._native import usb as _usb


def walk_chain(buf: np.ndarray, start: int, hdr_size: int, len_pos: int, big_endian: bool):
    """Offsets of consecutive records (a `hdr_size` header holding, at `len_pos`, the u32
    length of the data that follows) from `start` while a whole header fits, and the
    position after the last one (past the end of `buf` when its data is cut)."""
    chain = _usb.walk_chain(buf, SimpleNamespace(start=int(start), header_size=int(hdr_size), length_at=int(len_pos),
                                                 big_endian=bool(big_endian)))
    return chain.offsets, chain.end


# why a pcapng walk stopped (native/src/usb/pcapng.rs)
MORE, END, TRUNCATED, BAD = 0, 1, 2, 3
# a walk's packet columns (int64): link type, time in ns, block offset in the file, data
# offset in the read, captured length, original length
PACKET_COLUMNS = ("linktype", "t_ns", "block", "data_at", "caplen", "origlen")


def walk_pcapng(buf: np.ndarray, start: int, base: int, big_endian: bool, interfaces: list, eof: bool,
                strict: bool):
    """The pcapng blocks of one read `buf` (file offset `base`) walked from `start` (an index
    into `buf`) with the `interfaces` ((link type, ns per tick)) known so far. Returns the
    compiled walk's result (native/src/usb/pcapng.rs `PcapngWalked`) with its `packets` as a
    frame (PACKET_COLUMNS): `pos` where the walk stopped, an index into `buf`; the byte order
    (`big_endian`) and `interfaces` there; the bad blocks skipped (lenient) as (offset, why);
    why it stopped (`stop`: MORE, END, TRUNCATED or BAD); the offset of that block
    (`fault_at`); BAD's message (`fault`)."""
    walked = _usb.walk_pcapng(buf, SimpleNamespace(start=int(start), base=int(base), big_endian=bool(big_endian),
                                                   interfaces=interfaces, eof=bool(eof), strict=bool(strict)))
    return SimpleNamespace(packets=pl.DataFrame(walked.packets), pos=walked.pos, big_endian=walked.big_endian,
                           interfaces=walked.interfaces, bad=walked.bad, stop=walked.stop, fault_at=walked.fault_at,
                           fault=walked.fault)
