"""Shared stage for packet captures: pcap and pcapng containers, declared with construct.

The declarations below document the formats and build them (tests, generators); reading
goes through numpy and compiled loops (parsers/_pcap_scan.py): pcap records are located
by one walk of the length chain and decoded through dtypes derived from the same
declarations.

`read(path, strict=...)` -> `Packets`: per packet the byte offset of its record and of its
data, its captured length and link type (times on demand), over the file mapped into
memory. Bad or truncated records raise BadInput/TruncatedInput naming the byte offset,
or (lenient) are skipped and listed in `Packets.bad`.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from scsitrace.errors import BadInput, TruncatedInput
from . import _pcap_scan

if TYPE_CHECKING:
    import construct as cs

# ---------------------------------------------------------------- declarations

# Each declaration imports construct when it is first built: sniffing a file (usbmon.sniff
# calls sniff_container) does not load it. (A function-level import, not importlib's
# LazyLoader: on Python 3.11 that one is not safe for two threads at once.)

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_IDB = 0x00000001
PCAPNG_EPB = 0x00000006
PCAPNG_SPB = 0x00000003
PCAPNG_BYTE_ORDER_MAGIC = 0x1A2B3C4D


def pcap_global_header(le: bool = True) -> cs.Struct:
    import construct as cs
    u32, u16, i32 = (cs.Int32ul, cs.Int16ul, cs.Int32sl) if le else (cs.Int32ub, cs.Int16ub, cs.Int32sb)
    return cs.Struct("magic_number" / u32, "version_major" / u16, "version_minor" / u16,
                     "thiszone" / i32, "sigfigs" / u32, "snaplen" / u32, "network" / u32)


def pcap_record_header(le: bool = True) -> cs.Struct:
    import construct as cs
    u32 = cs.Int32ul if le else cs.Int32ub
    return cs.Struct("ts_sec" / u32, "ts_usec" / u32, "incl_len" / u32, "orig_len" / u32)


def pcapng_block_header(le: bool = True) -> cs.Struct:
    import construct as cs
    u32 = cs.Int32ul if le else cs.Int32ub
    return cs.Struct("block_type" / u32, "block_total_length" / u32)


def pcapng_shb_body(le: bool = True) -> cs.Struct:
    import construct as cs
    u32, u16, i64 = (cs.Int32ul, cs.Int16ul, cs.Int64sl) if le else (cs.Int32ub, cs.Int16ub, cs.Int64sb)
    return cs.Struct("byte_order_magic" / u32, "major_version" / u16, "minor_version" / u16,
                     "section_length" / i64)


def pcapng_idb_body(le: bool = True) -> cs.Struct:
    import construct as cs
    u32, u16 = (cs.Int32ul, cs.Int16ul) if le else (cs.Int32ub, cs.Int16ub)
    return cs.Struct("linktype" / u16, "reserved" / u16, "snaplen" / u32)


def pcapng_epb_body(le: bool = True) -> cs.Struct:
    import construct as cs
    u32 = cs.Int32ul if le else cs.Int32ub
    return cs.Struct("interface_id" / u32, "timestamp_high" / u32, "timestamp_low" / u32,
                     "captured_len" / u32, "original_len" / u32)


OPT_IF_TSRESOL = 9

def dtype_of(struct: cs.Struct) -> np.dtype:
    """A packed numpy dtype with the fields, sizes and byte order of a construct Struct of
    fixed-size integer fields (and Bytes), so bulk records decode through the declaration."""
    import construct as cs
    fields = []
    for sub in struct.subcons:
        field_ = sub.subcon
        while isinstance(field_, (cs.Renamed, cs.Const)):
            field_ = field_.subcon
        if isinstance(field_, cs.FormatField):
            order = {"<": "<", ">": ">", "=": "="}[field_.fmtstr[0]]
            code = field_.fmtstr[1]
            kind = {"B": "u1", "H": "u2", "L": "u4", "I": "u4", "Q": "u8",
                    "b": "i1", "h": "i2", "l": "i4", "i": "i4", "q": "i8"}[code]
            fields.append((sub.name, order + kind))
        elif isinstance(field_, cs.BytesInteger):
            raise TypeError("BytesInteger fields are not supported in dtype_of")
        elif isinstance(field_, cs.Bytes):
            fields.append((sub.name, f"V{field_.length}"))
        else:
            raise TypeError(f"field {sub.name!r}: no numpy equivalent for {type(field_).__name__}")
    dt = np.dtype(fields)
    assert dt.itemsize == struct.sizeof(), (dt.itemsize, struct.sizeof())
    return dt


def gather(buf: np.ndarray, offsets: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Structured array of `dtype` records read at each byte offset of `buf` (no Python loop)."""
    raw = np.ascontiguousarray(gather_bytes(buf, offsets, dtype.itemsize))
    return raw.view(dtype).reshape(-1)


def gather_bytes(buf: np.ndarray, offsets: np.ndarray, width: int) -> np.ndarray:
    """(N, width) bytes at each offset. Gathers 8-byte words through an unaligned uint64
    view with a one-byte stride (a word starts at every byte), eight times fewer element
    copies than a byte gather; reads past the end of the buffer come back as zeros."""
    n = len(offsets)
    words = (width + 7) // 8
    if n == 0:
        return np.zeros((0, width), dtype=np.uint8)
    span = words * 8
    inside = offsets + span <= len(buf)
    out = np.zeros((n, span), dtype=np.uint8)
    if len(buf) >= 8:
        view = np.ndarray(buffer=buf, dtype="<u8", shape=(len(buf) - 7,), strides=(1,))
        if inside.all():
            out = view[offsets[:, None] + np.arange(0, span, 8, dtype=np.int64)].view(np.uint8).reshape(n, span)
        else:
            ok = np.flatnonzero(inside)
            out[ok] = view[offsets[ok, None] + np.arange(0, span, 8, dtype=np.int64)].view(np.uint8).reshape(-1, span)
    for i in np.flatnonzero(~inside).tolist():   # the last bytes of the file
        chunk = buf[offsets[i]:offsets[i] + span]
        out[i, :len(chunk)] = chunk
    return out[:, :width]


# ---------------------------------------------------------------- reading

@dataclass
class Packets:
    """Packets of a capture, as numpy columns over `buf` (the file's bytes)."""

    path: str
    format: str                   # "pcap" | "pcapng"
    buf: np.ndarray
    linktype: np.ndarray          # per packet
    ts_ns: np.ndarray | None      # absolute, int64 ns since the epoch (pcap: see times())
    record_offset: np.ndarray     # byte offset of the packet's record (block)
    data_offset: np.ndarray       # byte offset of the packet's first data byte
    caplen: np.ndarray
    origlen: np.ndarray | None    # pcap: see times()
    bad: list[tuple[int, str]] = field(default_factory=list)  # (byte offset, why) skipped
    truncated_at: int | None = None
    little_endian: bool = True
    nano: bool = False

    def times(self) -> np.ndarray:
        """Packet times; pcap record headers are only gathered when someone asks (usbmon
        carries its own timestamps)."""
        if self.ts_ns is None:
            recs = gather(self.buf, self.record_offset, dtype_of(pcap_record_header(self.little_endian)))
            sub = recs["ts_usec"].astype(np.int64) * (1 if self.nano else 1000)
            self.ts_ns = recs["ts_sec"].astype(np.int64) * 1_000_000_000 + sub
            self.origlen = recs["orig_len"].astype(np.int64)
        return self.ts_ns


def sniff_container(head: bytes) -> tuple[str, bool, int | None] | None:
    """("pcap"|"pcapng", little_endian, linktype or None when unknown yet) or None."""
    if len(head) >= 24:
        for le, fmt in ((True, "<I"), (False, ">I")):
            magic = struct.unpack_from(fmt, head)[0]
            if magic in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
                return "pcap", le, struct.unpack_from(fmt, head, 20)[0]
    if len(head) >= 12 and struct.unpack_from("<I", head)[0] == PCAPNG_SHB:
        for le, fmt in ((True, "<I"), (False, ">I")):
            if struct.unpack_from(fmt, head, 8)[0] == PCAPNG_BYTE_ORDER_MAGIC:
                return "pcapng", le, _first_idb_linktype(head, le)
    return None


def _first_idb_linktype(head: bytes, le: bool) -> int | None:
    e = "<" if le else ">"
    off = 0
    while off + 12 <= len(head):
        btype, blen = struct.unpack_from(e + "II", head, off)
        if btype == PCAPNG_IDB:
            return struct.unpack_from(e + "H", head, off + 8)[0]
        if blen < 12:
            return None
        off += blen
    return None


def mapped(path: str) -> tuple[np.ndarray, tuple[str, bool, int | None]]:
    """The file mapped into memory and its container (`sniff_container`); BadInput when it
    is empty or not a capture."""
    if os.path.getsize(path) == 0:
        raise BadInput(path, "empty file: not a pcap or pcapng capture", offset=0)
    buf = np.memmap(path, dtype=np.uint8, mode="r").view(np.ndarray)
    kind = sniff_container(bytes(buf[:4096]))
    if kind is None:
        raise BadInput(path, "not a pcap or pcapng capture (unknown magic number)", offset=0)
    return buf, kind


def read(path: str, *, strict: bool = True) -> Packets:
    """Packets of a pcap or pcapng file, over the file mapped into memory (records are
    walked in file order, so pages are read sequentially, once)."""
    buf, kind = mapped(path)
    if kind[0] == "pcap":
        return _read_pcap(path, buf, kind[1], strict)
    return read_pcapng(path, buf, kind[1], strict)


@dataclass
class PcapHeader:
    start: int          # where the first record starts
    network: int        # link type
    nano: bool          # nanosecond timestamps
    max_len: int        # longest record accepted (the snapshot length, at least 256 KiB)


def pcap_header(path: str, buf: np.ndarray, le: bool) -> PcapHeader:
    gh = pcap_global_header(le)
    if len(buf) < gh.sizeof():
        raise TruncatedInput(path, "file ends inside the pcap global header", offset=0)
    hdr = gh.parse(bytes(buf[:gh.sizeof()]))
    return PcapHeader(gh.sizeof(), hdr.network, hdr.magic_number == PCAP_MAGIC_NS, max(hdr.snaplen, 1 << 18))


def _read_pcap(path: str, buf: np.ndarray, le: bool, strict: bool) -> Packets:
    hdr = pcap_header(path, buf, le)
    rdt = dtype_of(pcap_record_header(le))
    offsets, bad, truncated = _chain(buf, hdr.start, rdt, "incl_len", rdt.itemsize, path, strict, hdr.max_len)
    n = len(offsets)
    # records are contiguous: each one's length is the distance to the next
    after_last = int(offsets[-1]) + rdt.itemsize + int(u32_at(buf, offsets[-1:] + 8, le)[0]) if n else 0
    caplen = np.diff(offsets, append=after_last) - rdt.itemsize
    return Packets(path, "pcap", buf, np.full(n, hdr.network, dtype=np.int64), None, offsets,
                   offsets + rdt.itemsize, caplen, None, bad, truncated, le, hdr.nano)


def u32_at(buf: np.ndarray, idx: np.ndarray, le: bool = True) -> np.ndarray:
    """Unsigned 32-bit integers at arbitrary byte offsets `idx` (any shape), gathered in bulk."""
    raw = buf[idx.reshape(-1)[:, None] + np.arange(4)]
    return raw.view("<u4" if le else ">u4").reshape(idx.shape).astype(np.int64)


def _chain(buf, start, rdt, len_field, hdr_size, path, strict, max_len):
    """(offsets, bad, truncated offset) of consecutive records (`hdr_size` + the length
    read at `len_field`) from `start` to the end of `buf`. Record lengths vary, so
    locating them is a walk: one compiled loop; lengths are validated afterwards in bulk."""
    end = len(buf)
    big_endian = rdt.fields[len_field][0].byteorder == ">"
    offs, pos = _pcap_scan.walk_chain(buf, start, hdr_size, rdt.fields[len_field][1], big_endian)
    pos = int(pos)
    if len(offs):
        lens = (np.diff(np.append(offs, pos)) - hdr_size)
        too_long = np.flatnonzero(lens > max_len)
        if len(too_long):
            i = int(too_long[0])
            # cannot resynchronise after a bad length: the rest of the file is one bad record
            bad, _ = chain_end(path, strict, "too long", int(offs[i]), int(lens[i]), max_len)
            return offs[:i], bad, None
    if pos == end:
        return offs, [], None
    # the last record runs past the end of the file, or a partial header remains
    tail = int(offs[-1]) if pos > end and len(offs) else pos
    if pos > end and len(offs):
        offs = offs[:-1]
    _, truncated = chain_end(path, strict, "cut", tail)
    return offs, [], truncated


def chain_end(path: str, strict: bool, how: str, offset: int, length: int = 0,
              max_len: int = 0) -> tuple[list[tuple[int, str]], int | None]:
    """A record chain that ends early, at the record at `offset`: "too long" (its `length`
    exceeds `max_len`) or "cut" (the end of the file cuts it or its header short). Strict:
    raises BadInput / TruncatedInput; lenient: (bad records, truncated offset)."""
    if how == "too long":
        why = f"record length {length} exceeds the snapshot length {max_len}"
        if strict:
            raise BadInput(path, why, offset=offset)
        return [(offset, why)], None
    if strict:
        raise TruncatedInput(path, "file ends inside a record", offset=offset)
    return [], offset


def read_pcapng(path: str, buf: np.ndarray, le: bool, strict: bool) -> Packets:
    """Every packet of a pcapng file (the blocks walked by `PcapngWalk`, in one read), over `buf`."""
    walk = PcapngWalk(path, le, strict, read_bytes=max(len(buf), 1))
    parts = [packets.with_columns(pl.col("data_at") + base) for _, packets, base in walk]
    p = pl.concat(parts) if parts else pl.DataFrame(schema=dict.fromkeys(_pcap_scan.PACKET_COLUMNS, pl.Int64))
    c = {name: p[name].to_numpy() for name in _pcap_scan.PACKET_COLUMNS}
    return Packets(path, "pcapng", buf, c["linktype"], c["t_ns"], c["block"], c["data_at"], c["caplen"],
                   c["origlen"], walk.bad, walk.truncated, walk.little_endian, True)


class PcapngWalk:
    """The blocks of a pcapng file walked in bounded reads (`read_bytes` at a time; a block cut
    by a read's end is carried over to the next read, a block longer than the buffer grows it).
    Iterating yields, per read, (the bytes read, a frame of its packets (parsers/_pcap_scan.py
    PACKET_COLUMNS: link type, time in ns, block offset in the file, data offset in those bytes,
    captured length, original length), the file offset of those bytes). Interfaces (link type, timestamp resolution) carry across
    reads; a new section header block restarts them. Each read's blocks are walked in one
    compiled pass (parsers/_pcap_scan.py `walk_pcapng`); this drives the reads. A bad block
    (length not a multiple of 4, or below 12; an enhanced packet block naming an unknown
    interface or too short for its data) raises BadInput in strict mode, when the packets
    before it have been handed on; leniently it is listed in `bad` (a bad length ends the
    walk). A cut block ends the walk: `truncated` (its offset), TruncatedInput in strict mode
    once the packets before it have been handed on."""

    def __init__(self, path: str, le: bool, strict: bool, read_bytes: int = 1 << 23):
        self.path, self.strict, self.read_bytes = path, strict, max(1, read_bytes)
        self.e = "<" if le else ">"
        self.bad: list[tuple[int, str]] = []
        self.truncated: int | None = None
        self.little_endian = le

    def __iter__(self):
        big = self.e == ">"
        interfaces: list[tuple[int, int]] = []  # (linktype, ns per tick)
        fault = None
        buf = bytearray()
        base, pos = 0, 0                         # file offset of buf[0]; where the walk is (in the file)
        with open(self.path, "rb") as fh:
            while fault is None:
                more = fh.read(self.read_bytes)
                buf += more
                data = np.frombuffer(buf, np.uint8)
                w = _pcap_scan.walk_pcapng(data, pos - base, base, big, interfaces, len(more) == 0, self.strict)
                big, interfaces = w.big_endian, w.interfaces
                self.bad.extend(w.bad)
                pos = base + w.pos
                if w.stop == _pcap_scan.TRUNCATED:
                    self.truncated, fault = w.fault_at, "end"
                elif w.stop == _pcap_scan.END:
                    fault = "end"
                elif w.stop == _pcap_scan.BAD:
                    fault = (w.fault_at, w.fault)
                if w.packets.height:
                    yield data, w.packets, base
                del data, w                           # not kept alive across the next read
                buf = bytearray(buf[pos - base:])     # the block cut by this read's end (the bytes
                base = pos                            # yielded stay as they are)
        e = ">" if big else "<"
        self.e = e
        self.little_endian = e == "<"
        if isinstance(fault, tuple):
            if self.strict:
                raise BadInput(self.path, fault[1], offset=fault[0])
            self.bad.append(fault)
        if self.truncated is not None and self.strict:
            raise TruncatedInput(self.path, "file ends inside a pcapng block", offset=self.truncated)

