"""The usbmon records of a capture decoded in one compiled pass (Rust, scsitrace._native.usb): each record's
usbmon header is checked and turned into the URB columns (`scsitrace.usb.UrbColumns`),
and the first bytes of its data copied to a compact buffer, while the record is in cache
(reading CBWs and CSWs back from the mapped file later costs a cache miss each). For pcap the same pass walks the record chain; pcapng
packets, located by parsers/_pcap.py, are decoded at their offsets. The rules are those
of parsers/usbmon.py's docstring; field positions come from its construct declaration
(`FIELDS`, in this order, handed over as the `at` array)."""
from __future__ import annotations

import numpy as np

from scsitrace._native import usb as _usb
from scsitrace.usb.urbs import UrbColumns

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


class Columns:
    """Arrays receiving the URB columns of up to `capacity` records (big outputs come from
    numpy, sized for the worst case: pages never written cost nothing)."""

    def __init__(self, capacity: int, data_prefix: int):
        # one array per column: the compiled pass borrows each one apart
        self.t_ns, self.length, self.data_at, self.data_size, self.data_len = \
            (np.empty(capacity, np.int64) for _ in range(5))
        self.pos = np.empty(capacity, np.int64)
        self.urb_id = np.empty(capacity, np.uint64)
        self.event, self.xfer, self.ep, self.dev, self.bad = (np.empty(capacity, np.uint8) for _ in range(5))
        self.bus = np.empty(capacity, np.uint16)
        self.status = np.empty(capacity, np.int32)
        self.setup = np.empty((capacity, 8), np.uint8)
        self.has_setup = np.empty(capacity, np.bool_)
        self.data_head = np.empty(capacity, np.uint32)
        self.data = np.empty(capacity * data_prefix, np.uint8)   # data_at indexes it

    def outputs(self) -> tuple:
        """The arrays in the order `decode` takes them."""
        return (self.pos, self.bad, self.t_ns, self.urb_id, self.event, self.xfer, self.ep, self.bus, self.dev,
                self.status, self.length, self.setup, self.has_setup, self.data_at, self.data_size,
                self.data_head, self.data_len, self.data)

    def urbs(self, n: int) -> UrbColumns:
        """The first `n` records as URB columns."""
        return UrbColumns(
            t_ns=self.t_ns[:n], urb_id=self.urb_id[:n], event=self.event[:n], xfer=self.xfer[:n], ep=self.ep[:n],
            bus=self.bus[:n], dev=self.dev[:n], status=self.status[:n], status_null=np.zeros(n, np.bool_),
            length=self.length[:n], setup=self.setup[:n], has_setup=self.has_setup[:n], data_buf=self.data,
            data_at=self.data_at[:n], data_size=self.data_size[:n], data_head=self.data_head[:n],
            data_len=self.data_len[:n], pos=self.pos[:n])


def decode(buf, walk, start, big_endian, max_len, data_offset, caplens, sizes, mmapped, at, iso_descriptor_bytes,
           data_prefix, pos, bad, t_ns, urb_id, event, xfer, ep, bus, dev, status, length, setup, has_setup,
           data_at, data_size, data_head, data_len, data, origlens=None):
    """Decodes the usbmon records (scsitrace._native.usb.decode): walking the pcap record
    chain from `start` when `walk` (`sizes`, `mmapped`: one header size and link type 220
    flag for all, `pos` filled with the records' offsets), else the packets located
    beforehand (pcapng: data at `data_offset`, `caplens`, per-packet `sizes` and
    `mmapped`; `origlens`: their lengths on the wire, a walk reads them from the record
    headers; a record cut by the snap length keeps what was captured). Per record: `bad` (0 or the first failed check), the URB columns, and the
    first `data_prefix` data bytes packed into `data` (`data_at` says where). Returns
    (records, where a walk stopped, how): END_OF_FILE when the last record ends the
    buffer; TOO_LONG at a record longer than `max_len` (left out); CUT at a record or
    header that the end of the buffer cuts short, or when the outputs are full (left out)."""
    i64 = np.int64
    return _usb.decode(buf, bool(walk), int(start), bool(big_endian), int(max_len),
                       np.ascontiguousarray(data_offset, i64), np.ascontiguousarray(caplens, i64),
                       np.ascontiguousarray(caplens if origlens is None else origlens, i64), np.ascontiguousarray(sizes, i64),
                       np.ascontiguousarray(mmapped, np.bool_), np.ascontiguousarray(at, i64), int(iso_descriptor_bytes),
                       int(data_prefix), pos, bad, t_ns, urb_id, event, xfer, ep, bus, dev, status, length,
                       setup.reshape(-1), has_setup, data_at, data_size, data_head, data_len, data)


READ_BYTES = 1 << 23     # bytes read from a pcap file at a time
BATCH_RECORD_BYTES = 64  # a batch's columns have room for a record per this many bytes (more rounds if not)


class PcapBatches:
    """A pcap file's usbmon records decoded batch by batch from bounded reads (`read_bytes`
    at a time; a record cut by a read's end is carried over to the next read). Iterating
    yields (URB columns of every record of the batch, absolute times, `pos` file offsets;
    each record's `bad` code). With `into` (Columns for every record of the file), the
    batches are decoded into it, one after the other (their columns are views of it, the
    data buffer is `into.data` and `data_at` indexes it). Afterwards `stop` says how the record chain ended
    (END_OF_FILE, TOO_LONG, CUT), `stop_at` where, and `too_long` the length read there."""

    def __init__(self, path: str, start: int, network: int, big_endian: bool, max_len: int, header_size: int, mmapped: bool,
                 at: np.ndarray, iso_descriptor_bytes: int, data_prefix: int, read_bytes: int = READ_BYTES,
                 into: Columns | None = None):
        self.path, self.start, self.network, self.big_endian, self.max_len = path, start, network, big_endian, max_len
        self.sizes, self.mmapped = np.array([header_size], np.int64), np.array([mmapped], np.bool_)
        self.at, self.iso, self.prefix, self.read_bytes = at, iso_descriptor_bytes, data_prefix, max(1, read_bytes)
        self.stop, self.stop_at, self.too_long = END_OF_FILE, start, 0
        self.into = into        # decode every batch into these columns, one after the other

    def __iter__(self):
        none = np.zeros(0, np.int64)
        done, kept = 0, 0                             # records and data bytes in `into` so far
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
                p = 0
                while True:     # batches of the block (more than one when records are short)
                    cols = self.into or Columns((have - p) // BATCH_RECORD_BYTES + 1, self.prefix)
                    outputs = [o[kept:] if o is cols.data else o[done:] for o in cols.outputs()]
                    n, p, stop = decode(view, True, p, self.big_endian, self.max_len, none, none, self.sizes,
                                        self.mmapped, self.at, self.iso, self.prefix, *outputs)
                    n, p = int(n), int(p)
                    if n:
                        urbs = cols.urbs(done + n)
                        urbs = UrbColumns(**{f: (v if f == "data_buf" else v[done:]) for f, v in vars(urbs).items()})
                        urbs.pos += base
                        if self.into is not None:
                            urbs.data_at += kept
                            kept = int((urbs.data_at + np.maximum(urbs.data_size, 0)).max())
                            done += n
                        yield urbs, cols.bad[done - n:done] if self.into is not None else cols.bad[:n]
                    if not (stop == CUT and self.into is None and n == len(cols.pos)):
                        break   # else the batch was full: decode on from p
                if stop == TOO_LONG or (stop == CUT and eof):
                    self.stop, self.stop_at = stop, base + p
                    if stop == TOO_LONG:
                        tail = view[p + INCL_LEN_AT:p + INCL_LEN_AT + 4].view("<u4" if not self.big_endian else ">u4")
                        self.too_long = int(tail[0])
                    return
                if eof and p == have:
                    self.stop, self.stop_at = END_OF_FILE, base + p
                    return
                rest = have - p                       # a record cut by this read's end
                buf[:rest] = buf[p:have]
                have, base = rest, base + p


class PcapngBatches:
    """A pcapng file's usbmon records decoded batch by batch: its blocks walked in bounded
    reads (parsers/_pcap.py `PcapngWalk`, `read_bytes` at a time), the packets of each read
    decoded at their offsets. Iterating yields (URB columns, absolute times, `pos` block
    offsets; each record's `bad` code; each record's link type). Afterwards `bad` lists the
    bad blocks (byte offset, why) and `truncated` is the offset of a block cut by the end of
    the file (None if none): what `_pcap.read_pcapng` lists for the whole file."""

    def __init__(self, path: str, little_endian: bool, strict: bool, header_sizes: dict[int, int], mmapped_type: int,
                 at: np.ndarray, iso_descriptor_bytes: int, data_prefix: int, read_bytes: int = READ_BYTES):
        self.path, self.le, self.strict, self.read_bytes = path, little_endian, strict, read_bytes
        self.header_sizes, self.mmapped_type = header_sizes, mmapped_type
        self.at, self.iso, self.prefix = at, iso_descriptor_bytes, data_prefix
        self.bad: list[tuple[int, str]] = []
        self.truncated: int | None = None

    def __iter__(self):
        from ._pcap import PcapngWalk
        walk = PcapngWalk(self.path, self.le, self.strict, self.read_bytes)
        other = min(self.header_sizes.values())
        for buf, rows, _ in walk:
            linktype = rows[:, 0]
            mmapped = linktype == self.mmapped_type
            sizes = np.where(mmapped, self.header_sizes[self.mmapped_type], other)
            cols = Columns(len(rows), self.prefix)
            n, _, _ = decode(buf, False, 0, False, 0, rows[:, 3], rows[:, 4], sizes, mmapped, self.at, self.iso,
                             self.prefix, *cols.outputs(), origlens=rows[:, 5])
            n = int(n)
            cols.pos[:n] = rows[:n, 2]
            yield cols.urbs(n), cols.bad[:n], np.ascontiguousarray(linktype)
        self.bad, self.truncated = walk.bad, walk.truncated
