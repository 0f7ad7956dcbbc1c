"""Converter of blktrace captures from protocol version 7 (`struct blk_io_trace`, 48-byte
header) to version 8 (`struct blk_io_trace2`, Linux 6.19: 64-byte header, pid before a 64-bit
action, 12 bytes of padding), record by record, PDUs copied unchanged: what a v8 kernel would
have written for the same events. Either byte order (the file's own). For tests.

    python tests/blktrace_v8.py IN OUT [--zone-bits HEX]
"""
from __future__ import annotations

import argparse
import struct
import sys

V7 = "IIQQIIIIIHH"              # magic sequence time sector bytes action pid device cpu error pdu_len
V8 = "IIQQIIQIIHH12x"           # magic sequence time sector bytes pid action device cpu error pdu_len pad
MAGIC, MAGIC_MASK, VERSION2 = 0x65617400, 0xFFFFFF00, 0x08


def byte_order(data: bytes) -> str:
    for order in "<>":
        if len(data) >= 4 and struct.unpack_from(order + "I", data)[0] & MAGIC_MASK == MAGIC:
            return order
    raise ValueError("not a blktrace capture")


def records(data: bytes):
    """(header fields, pdu bytes) of each v7 record, in file order."""
    order = byte_order(data)
    head = struct.Struct(order + V7)
    pos = 0
    while pos < len(data):
        fields = head.unpack_from(data, pos)
        pdu_len = fields[-1]
        yield fields, data[pos + head.size:pos + head.size + pdu_len]
        pos += head.size + pdu_len


def to_v8(data: bytes, action_hi=None) -> bytes:
    """The v8 form of a v7 capture; `action_hi(fields) -> int` gives a record's upper 32 action
    bits (v8's zone and write-zeroes categories), 0 without it. An empty file stays empty."""
    if not data:
        return data
    order = byte_order(data)
    head = struct.Struct(order + V8)
    out = bytearray()
    for (magic, seq, time, sector, nbytes, action, pid, device, cpu, error, pdu_len), pdu in records(data):
        hi = action_hi((magic, seq, time, sector, nbytes, action, pid, device, cpu, error, pdu_len)) \
            if action_hi else 0
        out += head.pack((magic & MAGIC_MASK) | VERSION2, seq, time, sector, nbytes, pid, action | hi << 32,
                         device, cpu, error, pdu_len) + pdu
    return bytes(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    a = ap.parse_args(argv)
    with open(a.src, "rb") as fh:
        data = fh.read()
    with open(a.dst, "wb") as fh:
        fh.write(to_v8(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
