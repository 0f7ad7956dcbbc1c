"""The compiled pcapng block walk (native/src/usb/pcapng.rs, driven by parsers/_pcap.py
`PcapngWalk`) against a small per-block Python walk kept here as the reference (the walk the
product used before): same reads handed on, same packet rows, same bad blocks, same
truncation, same errors with the same offsets, on generated block streams of both byte
orders, several sections and interfaces, damaged and cut, at any read size. And no input
crashes the compiled walk: random or mutated bytes return or raise BadInput."""
from __future__ import annotations

import struct

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.parsers import _pcap, _pcap_scan

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------- the reference walk
def _tsresol_ns(data, pos: int, end: int, e: str) -> int:
    tick = 1000
    while pos + 4 <= end:
        code, length = struct.unpack_from(e + "HH", data, pos)
        if code == 0:
            break
        if code == _pcap.OPT_IF_TSRESOL and length >= 1:
            v = data[pos + 4]
            if v & 0x80:
                tick = max(1, round(1e9 / (1 << (v & 0x7F))))
            else:
                tick = max(1, 10 ** (9 - v)) if v <= 9 else 1
        pos += 4 + ((length + 3) & ~3)
    return tick


class ReferenceWalk(_pcap.PcapngWalk):
    """The per-block Python walk (times wrapped to int64 as the compiled walk does)."""

    def __iter__(self):
        e = self.e
        interfaces, fault, buf = [], None, bytearray()
        base, pos = 0, 0
        with open(self.path, "rb") as fh:
            while fault is None:
                more = fh.read(self.read_bytes)
                eof = len(more) == 0
                buf += more
                data, end, rows = bytes(buf), base + len(buf), []
                while True:
                    rel = pos - base
                    if pos + 12 > end:
                        if eof:
                            if pos < end:
                                self.truncated = pos
                            fault = "end"
                        break
                    btype, blen = struct.unpack_from(e + "II", data, rel)
                    if btype == _pcap.PCAPNG_SHB:
                        bom = struct.unpack_from("<I", data, rel + 8)[0]
                        e = {_pcap.PCAPNG_BYTE_ORDER_MAGIC: "<", 0x4D3C2B1A: ">"}.get(bom, e)
                        btype, blen = struct.unpack_from(e + "II", data, rel)
                        interfaces = []
                    if blen < 12 or blen % 4:
                        fault = (pos, f"bad block length {blen} (block type 0x{btype:08x})")
                        break
                    if pos + max(blen, 28 if btype == _pcap.PCAPNG_EPB else 12) > end:
                        if eof:
                            self.truncated, fault = pos, "end"
                        break
                    if btype == _pcap.PCAPNG_IDB:
                        linktype = struct.unpack_from(e + "H", data, rel + 8)[0]
                        interfaces.append((linktype, _tsresol_ns(data, rel + 16, rel + blen - 4, e)))
                    elif btype == _pcap.PCAPNG_EPB:
                        iface, th, tl, caplen, origlen = struct.unpack_from(e + "IIIII", data, rel + 8)
                        if iface >= len(interfaces) or 28 + caplen > blen:
                            why = (f"enhanced packet block names interface {iface}, only {len(interfaces)} "
                                   "described" if iface >= len(interfaces) else
                                   f"captured length {caplen} does not fit its block of {blen} bytes")
                            if self.strict:
                                fault = (pos, why)
                                break
                            self.bad.append((pos, why))
                        else:
                            lt, tick = interfaces[iface]
                            t = (((th << 32) | tl) * tick + (1 << 63)) % (1 << 64) - (1 << 63)
                            rows.append((lt, t, pos, rel + 28, caplen, origlen))
                    pos += blen
                if rows:
                    yield np.frombuffer(data, np.uint8), pl.DataFrame(rows, schema=_pcap_scan.PACKET_COLUMNS,
                                                                      orient="row"), base
                buf = bytearray(buf[pos - base:])
                base = pos
        self.e = e
        self.little_endian = e == "<"
        if isinstance(fault, tuple):
            if self.strict:
                raise BadInput(self.path, fault[1], offset=fault[0])
            self.bad.append(fault)
        if self.truncated is not None and self.strict:
            raise TruncatedInput(self.path, "file ends inside a pcapng block", offset=self.truncated)


def _run(cls, path: str, le: bool, strict: bool, read_bytes: int):
    """Everything a walk hands on and leaves behind: per read (file offset, bytes, rows),
    then bad, truncated, byte order, and the error raised (type, text, offset) if any."""
    walk = cls(path, le, strict, read_bytes)
    reads, err = [], None
    try:
        for data, packets, base in walk:
            assert packets.schema == dict.fromkeys(_pcap_scan.PACKET_COLUMNS, pl.Int64)
            reads.append((base, bytes(data), packets.rows()))
    except BadInput as exc:
        err = (type(exc).__name__, str(exc), exc.offset)
    return reads, walk.bad, walk.truncated, walk.little_endian, err


# ---------------------------------------------------------------- generated block streams
def _block(e: str, btype: int, body: bytes, blen: int | None = None) -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = 12 + len(body) if blen is None else blen
    return struct.pack(e + "II", btype, n) + body + struct.pack(e + "I", n)


_SHB = st.tuples(st.just("shb"), st.booleans())
_IDB = st.tuples(st.just("idb"), st.sampled_from([1, 189, 220]),
                 st.lists(st.tuples(st.sampled_from([0, 2, 9, 9, 14]),
                                   st.one_of(st.binary(max_size=6), st.sampled_from([b"\3", b"\6", b"\x8a", b"\x94"]))),
                         max_size=3))
_EPB = st.tuples(st.just("epb"), st.sampled_from([0, 0, 0, 1, 3]),
                 st.sampled_from([12345, 0, 1, 1 << 31, (1 << 32) + 7, (1 << 64) - 1]),
                 st.binary(max_size=20), st.sampled_from([0, 0, 0, -1, 1, 2]))
_OTHER = st.tuples(st.just("other"), st.sampled_from([2, 3, 5, 0x80000001]), st.binary(max_size=12))
_BADLEN = st.tuples(st.just("badlen"), st.sampled_from([0, 4, 8, 13, 30, 16, 20, 24]))
_STREAM = st.tuples(_IDB, st.lists(st.one_of(_SHB, _IDB, _IDB, _EPB, _EPB, _EPB, _EPB, _OTHER, _BADLEN),
                                    max_size=14)).map(lambda t: [t[0]] + t[1])


def _pcapng(items, first_le: bool) -> bytes:
    e = "<" if first_le else ">"
    out = [_block(e, _pcap.PCAPNG_SHB, struct.pack(e + "IHHq", _pcap.PCAPNG_BYTE_ORDER_MAGIC, 1, 0, -1))]
    for item in items:
        kind = item[0]
        if kind == "shb":
            e = "<" if item[1] else ">"
            out.append(_block(e, _pcap.PCAPNG_SHB, struct.pack(e + "IHHq", _pcap.PCAPNG_BYTE_ORDER_MAGIC, 1, 0, -1)))
        elif kind == "idb":
            opts = b"".join(struct.pack(e + "HH", code, len(v)) + v + b"\0" * (-len(v) % 4) for code, v in item[2])
            out.append(_block(e, _pcap.PCAPNG_IDB, struct.pack(e + "HHI", item[1], 0, 65535) + opts))
        elif kind == "epb":
            _, iface, ts, data, skew = item
            head = struct.pack(e + "IIIII", iface, ts >> 32, ts & 0xFFFFFFFF, max(0, len(data) + 4 * skew), len(data))
            out.append(_block(e, _pcap.PCAPNG_EPB, head + data))
        elif kind == "other":
            out.append(_block(e, item[1], item[2]))
        else:
            out.append(_block(e, 5, b"\0" * 8, blen=item[1]))
    return b"".join(out)


@FAST
@given(_STREAM, st.booleans(), st.integers(1, 300), st.one_of(st.none(), st.integers(0, 10_000)),
       st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3))
def test_compiled_walk_matches_the_reference(tmp_path, items, first_le, read_bytes, cut, flips):
    """Generated streams (several sections of either byte order, interfaces with if_tsresol,
    packets naming unknown interfaces or too long for their blocks, bad lengths), possibly cut
    and with a few bytes changed, at any read size, strict and lenient: the compiled walk hands
    on and leaves behind exactly what the reference walk does."""
    raw = bytearray(_pcapng(items, first_le))
    for at, v in flips:
        if raw:
            raw[at % len(raw)] = v
    if cut is not None:
        del raw[cut % (len(raw) + 1):]
    path = tmp_path / "w.pcapng"
    path.write_bytes(bytes(raw))
    for strict in (True, False):
        for le in (True, False):
            assert _run(_pcap.PcapngWalk, str(path), le, strict, read_bytes) == \
                _run(ReferenceWalk, str(path), le, strict, read_bytes)


def test_if_tsresol_ticks(tmp_path):
    """Timestamp resolutions: decimal and binary exponents (2^-10 s rounds half to even, as
    Python's round does), out-of-range ones, the default microsecond."""
    items = [("idb", 220, [(9, bytes([v]))]) for v in (0, 3, 6, 9, 10, 0x80, 0x8A, 0x94, 0xA0, 0xFF)]
    items += [("idb", 220, [])]
    items += [("epb", i, 1000, b"", 0) for i in range(len(items))]
    path = tmp_path / "t.pcapng"
    path.write_bytes(_pcapng(items, True))
    (_, _, rows), = _run(_pcap.PcapngWalk, str(path), True, True, 1 << 20)[0]
    assert [r[1] // 1000 for r in rows] == [10 ** 9, 10 ** 6, 1000, 1, 1, 10 ** 9, 976562, 954, 1, 1, 1000]
    assert _run(_pcap.PcapngWalk, str(path), True, True, 7) == _run(ReferenceWalk, str(path), True, True, 7)


# ---------------------------------------------------------------- no input crashes it
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 500), st.integers(0, 1 << 40), st.booleans(),
       st.lists(st.tuples(st.integers(0, 300), st.integers(1, 10 ** 9)), max_size=3), st.booleans(), st.booleans())
def test_compiled_walk_never_crashes(raw, start, base, big, interfaces, eof, strict):
    """Any bytes, any start (past the end too), any table: the walk returns a consistent
    answer (rows inside the buffer, a stop position not behind the start) and never panics."""
    buf = np.frombuffer(raw, np.uint8)
    w = _pcap_scan.walk_pcapng(buf, start, base, big, interfaces, eof, strict)
    p = w.packets
    assert p.columns == list(_pcap_scan.PACKET_COLUMNS)
    assert w.stop in (_pcap_scan.MORE, _pcap_scan.END, _pcap_scan.TRUNCATED, _pcap_scan.BAD)
    assert w.pos >= start and isinstance(w.big_endian, bool) and all(len(t) == 2 for t in w.interfaces)
    if p.height:
        assert (p["data_at"] + p["caplen"] <= len(raw)).all() and (p["block"] >= base + start).all()
    assert (w.stop == _pcap_scan.BAD) == bool(w.fault)
    assert all(isinstance(o, int) and isinstance(why, str) for o, why in w.bad)


def test_compiled_walk_rejects_a_negative_start():
    with pytest.raises(ValueError):
        _pcap_scan.walk_pcapng(np.zeros(16, np.uint8), -1, 0, False, [], True, True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=300), st.integers(1, 64), st.booleans())
def test_random_files_return_or_raise_bad_input(tmp_path, raw, read_bytes, strict):
    """A file of random bytes behind a section header: the walk ends or raises BadInput
    (TruncatedInput included), the same as the reference."""
    path = tmp_path / "r.pcapng"
    path.write_bytes(_pcapng([], True) + raw)
    got = _run(_pcap.PcapngWalk, str(path), True, strict, read_bytes)
    assert got == _run(ReferenceWalk, str(path), True, strict, read_bytes)
