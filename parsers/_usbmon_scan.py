"""The usbmon records of a capture decoded in one compiled pass (Rust, scsitrace._native.usb): each record's
usbmon header is checked and turned into the URB table (`scsitrace.usb.urbs.URBS`),
and the first bytes of its data copied to a compact buffer, while the record is in cache
(reading CBWs and CSWs back from the mapped file later costs a cache miss each). For pcap the same pass walks the record chain; pcapng
packets, located by parsers/_pcap.py, are decoded at their offsets. The rules are those
of parsers/usbmon.py's docstring; field positions come from its construct declaration
(`FIELDS`, in this order, handed over as the `at` array)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl

from scsitrace._native import usb as _usb
from scsitrace.usb.urbs import urb_table

SHORT, BAD_TYPE, BAD_XFER, BAD_LEN_CAP = 1, 2, 3, 4    # why a record is bad, in checking order
ISO = 0
LINKTYPE_USB_LINUX = 189            # pcap link types of the Linux usbmon header (48 / 64 bytes)
LINKTYPE_USB_LINUX_MMAPPED = 220
FIELDS = ("id", "type", "xfer_type", "epnum", "devnum", "busnum", "flag_setup", "flag_data", "ts_sec", "ts_usec",
          "status", "length", "len_cap", "setup", "ndesc")
ID, TYPE, XFER, EP, DEV, BUS, FLAG_SETUP, FLAG_DATA, TS_SEC, TS_USEC, STATUS, LENGTH, LEN_CAP, SETUP, NDESC = \
    range(len(FIELDS))
PCAP_RECORD_HEADER = 16        # ts_sec, ts_usec, incl_len, orig_len
INCL_LEN_AT = 8
END_OF_FILE, TOO_LONG, CUT = 0, 1, 2     # how a pcap walk stopped


def layout(at: np.ndarray, iso_descriptor_bytes: int, data_prefix: int) -> SimpleNamespace:
    """What the decoder reads of the usbmon header (native/src/usb/reader.rs `Layout`, by
    name): each field's position, in the order of FIELDS; the bytes of an isochronous
    descriptor; the data bytes kept per record."""
    return SimpleNamespace(at=[int(a) for a in at], iso_descriptor_bytes=int(iso_descriptor_bytes),
                           data_prefix=int(data_prefix))


def urbs_of(records, linktype: np.ndarray | None = None) -> SimpleNamespace:
    """A batch of the decoder's records (native/src/usb/reader.rs `take`: `pos` are file
    offsets, times absolute): `urbs` (the URB table), `bad` (each record's code), `short` (how
    many good records were captured short), `linktype` (each record's, None: the file's)."""
    table = urb_table(records.urbs)
    bad = table.drop_in_place("bad")
    return SimpleNamespace(urbs=table, bad=bad.to_numpy(), short=records.captured_short, linktype=linktype)


READ_BYTES = 1 << 23     # bytes read from a pcap file at a time
BATCH_RECORD_BYTES = 64  # room reserved for a record per this many bytes read (grown if more)


class PcapBatches:
    """A pcap file's usbmon records decoded batch by batch from bounded reads (`read_bytes`
    at a time; a record cut by a read's end is carried over to the next read). Iterating
    yields its batches (`urbs_of`: the URB table of every record, absolute times, `pos` file
    offsets; each record's `bad` code; how many were captured short). With `whole_records` (room for every record of the file), every
    read is decoded into the decoder's columns, one after the other, and the file is one batch
    (no copy). Afterwards `stop` says how the record chain ended (END_OF_FILE, TOO_LONG, CUT),
    `stop_at` where, and `too_long` the length read there."""

    def __init__(self, path: str, start: int, network: int, big_endian: bool, max_len: int, header_size: int, mmapped: bool,
                 at: np.ndarray, iso_descriptor_bytes: int, data_prefix: int, read_bytes: int = READ_BYTES,
                 whole_records: int | None = None):
        self.path, self.start, self.network, self.big_endian, self.max_len = path, start, network, big_endian, max_len
        self.header_size, self.mmapped = header_size, mmapped
        self.layout, self.read_bytes = layout(at, iso_descriptor_bytes, data_prefix), max(1, read_bytes)
        self.stop, self.stop_at, self.too_long = END_OF_FILE, start, 0
        self.whole_records = whole_records

    def __iter__(self):
        decoder = _usb.UsbmonDecoder(self.layout)
        reserve = self.whole_records
        buf = np.empty(self.read_bytes, np.uint8)
        have, base, eof = 0, self.start, False        # bytes in buf, file offset of buf[0]
        with open(self.path, "rb") as fh:
            fh.seek(self.start)
            while True:
                if have == len(buf):                  # one record longer than the buffer
                    buf = np.concatenate([buf, np.empty(len(buf), np.uint8)])
                got = fh.readinto(memoryview(buf)[have:]) if not eof else 0
                eof = eof or got == 0
                have += got
                if not eof and have < len(buf):
                    continue                          # a short read: fill the buffer first
                view = buf[:have]
                walked = decoder.walk_pcap(SimpleNamespace(
                    buf=view, base=base, start=0, big_endian=self.big_endian, max_len=self.max_len,
                    header_size=self.header_size, mmapped=self.mmapped,
                    records=reserve if reserve is not None else have // BATCH_RECORD_BYTES + 1))
                reserve = 0 if reserve is not None else None
                p = walked.stop_at - base
                if walked.records and self.whole_records is None:
                    yield urbs_of(decoder.take())
                stop = walked.stop
                if stop == TOO_LONG or (stop == CUT and eof):
                    self.stop, self.stop_at = stop, walked.stop_at
                    if stop == TOO_LONG:
                        tail = view[p + INCL_LEN_AT:p + INCL_LEN_AT + 4].view("<u4" if not self.big_endian else ">u4")
                        self.too_long = int(tail[0])
                    break
                if eof and p == have:
                    self.stop, self.stop_at = END_OF_FILE, walked.stop_at
                    break
                rest = have - p                       # a record cut by this read's end
                buf[:rest] = buf[p:have]
                have, base = rest, base + p
        if self.whole_records is not None:
            batch = urbs_of(decoder.take())
            if batch.urbs.height:
                yield batch


class PcapngBatches:
    """A pcapng file's usbmon records decoded batch by batch: its blocks walked in bounded
    reads (parsers/_pcap.py `PcapngWalk`, `read_bytes` at a time), the packets of each read
    decoded at their offsets. Iterating yields batches (`urbs_of`: the URB table, absolute
    times, `pos` block offsets; each record's `bad` code and link type). Afterwards `bad` lists the
    bad blocks (byte offset, why) and `truncated` is the offset of a block cut by the end of
    the file (None if none): what `_pcap.read_pcapng` lists for the whole file."""

    def __init__(self, path: str, little_endian: bool, strict: bool, header_sizes: dict[int, int], mmapped_type: int,
                 at: np.ndarray, iso_descriptor_bytes: int, data_prefix: int, read_bytes: int = READ_BYTES):
        self.path, self.le, self.strict, self.read_bytes = path, little_endian, strict, read_bytes
        self.header_sizes, self.mmapped_type = header_sizes, mmapped_type
        self.layout = layout(at, iso_descriptor_bytes, data_prefix)
        self.bad: list[tuple[int, str]] = []
        self.truncated: int | None = None

    def __iter__(self):
        from ._pcap import PcapngWalk
        walk = PcapngWalk(self.path, self.le, self.strict, self.read_bytes)
        decoder = _usb.UsbmonDecoder(self.layout)
        other = min(self.header_sizes.values())
        for buf, packets, _ in walk:
            linktype = packets["linktype"].to_numpy()
            mmapped = linktype == self.mmapped_type
            sizes = np.where(mmapped, self.header_sizes[self.mmapped_type], other)
            decoder.decode_packets(SimpleNamespace(
                buf=buf, data_at=packets["data_at"].to_numpy(), caplen=packets["caplen"].to_numpy(),
                origlen=packets["origlen"].to_numpy(), size=sizes, mmapped=mmapped, pos=packets["block"].to_numpy()))
            yield urbs_of(decoder.take(), linktype)
        self.bad, self.truncated = walk.bad, walk.truncated
