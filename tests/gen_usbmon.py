"""Generator of usbmon captures (pcap link type 220, pcapng, and `1u` text) of USB
Bulk-Only mass-storage traffic, built from the construct declarations of
parsers/_pcap.py and parsers/usbmon.py.

`traffic(seed)` makes the URB events of one session: the configuration descriptor
exchange (Wireshark needs it to know the interface is mass storage), then TEST UNIT READY,
INQUIRY, READ(10), WRITE(10), READ(16), WRITE(16), a failed READ(10) (CSW status 1)
followed by REQUEST SENSE, and a READ(10) whose data stage stalls (EPIPE, then
CLEAR_FEATURE(ENDPOINT_HALT), then the CSW). `write_pcap`, `write_pcapng` and
`write_text` write the same events.

Hostile captures (`hostile_pcaps(tmpdir)`), each with what the parser must do:
- "truncated_record": the last record is cut in the middle of its data
  -> strict: TruncatedInput at that record's byte offset; lenient: the complete records,
  a TRUNCATED anomaly.
- "truncated_header": the file ends 7 bytes into a record header -> same as above.
- "bad_type": one usbmon header has event type 'X' -> strict: BadInput at that record's
  offset ("not S, C or E"); lenient: that record skipped and counted.
- "bad_len_cap": one usbmon header claims more captured bytes than its record holds
  -> strict: BadInput at its offset; lenient: skipped and counted.
- "huge_length": a record header claims 2 GiB of data -> strict: BadInput at its
  offset; lenient: the records before it.
- "not_usbmon": an Ethernet (link type 1) pcap -> BadInput naming the link type.
Hostile text lines (`HOSTILE_TEXT`): garbage, a bad address, odd hex digits, a 17-digit
tag -> strict: BadInput naming the line; lenient: skipped and counted, the rest parsed.
"""
from __future__ import annotations

import random
import struct
from dataclasses import dataclass, field

from scsitrace.parsers import _pcap
from scsitrace.parsers.usbmon import USBMON_PACKET_MMAPPED, LINKTYPE_USB_LINUX_MMAPPED

BASE_SEC = 1_700_000_000
EPIPE = -32


@dataclass
class Event:
    t_us: int
    urb_id: int
    ev: str            # S C E
    xfer: int          # 0 iso 1 int 2 ctrl 3 bulk
    ep: int            # | 0x80 for IN
    status: int
    length: int
    data: bytes | None = None
    setup: bytes | None = None
    bus: int = 1
    dev: int = 2


@dataclass
class Session:
    events: list[Event] = field(default_factory=list)
    t_us: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(1))
    tag: int = 1
    next_urb: int = 0xFFFF888000001000

    def urb(self) -> int:
        self.next_urb += 0x40
        return self.next_urb

    def step(self, lo=5, hi=400) -> int:
        self.t_us += self.rng.randint(lo, hi)
        return self.t_us

    def xfer(self, xfer, ep, req_len, out_data=None, in_data=None, status=0, setup=None,
             lo=5, hi=400, actual=None):
        """One URB: submit then completion (`actual`: its length, else its data's)."""
        u = self.urb()
        self.events.append(Event(self.step(), u, "S", xfer, ep, -115, req_len, out_data, setup))
        if actual is None:
            actual = len(in_data) if in_data is not None else (len(out_data) if out_data is not None else 0)
        if status == EPIPE:
            actual = 0
        self.events.append(Event(self.step(lo, hi), u, "C", xfer, ep, status, actual,
                                 in_data if status == 0 else None))


def config_descriptor() -> bytes:
    conf = struct.pack("<BBHBBBBB", 9, 2, 32, 1, 1, 0, 0x80, 50)
    iface = struct.pack("<BBBBBBBBB", 9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0)
    ep_in = struct.pack("<BBBBHB", 7, 5, 0x81, 2, 512, 0)
    ep_out = struct.pack("<BBBBHB", 7, 5, 0x02, 2, 512, 0)
    return conf + iface + ep_in + ep_out


def device_descriptor() -> bytes:
    return struct.pack("<BBHBBBBHHHBBBB", 18, 1, 0x0200, 0, 0, 0, 64, 0x46F4, 0x0001, 0x0000, 1, 2, 3, 1)


def setup(bm, req, value, index, length) -> bytes:
    return struct.pack("<BBHHH", bm, req, value, index, length)


def cbw(tag: int, length: int, data_in: bool, lun: int, cdb: bytes) -> bytes:
    return struct.pack("<IIIBBB", 0x43425355, tag, length, 0x80 if data_in else 0, lun, len(cdb)) \
        + cdb.ljust(16, b"\0")


def csw(tag: int, residue: int, status: int) -> bytes:
    return struct.pack("<IIIB", 0x53425355, tag, residue, status)


def enumerate_device(s: Session) -> None:
    s.xfer(2, 0x80, 18, setup=setup(0x80, 6, 0x0100, 0, 18), in_data=device_descriptor())
    s.xfer(2, 0x80, 32, setup=setup(0x80, 6, 0x0200, 0, 32), in_data=config_descriptor())
    s.xfer(2, 0x00, 0, setup=setup(0x00, 9, 1, 0, 0))


def command(s: Session, cdb: bytes, data_len: int, data_in: bool, csw_status: int = 0,
            stall: bool = False, lun: int = 0, residue: int = 0, data_cap: int | None = None,
            whole_length: bool = False) -> None:
    """One Bulk-Only command: CBW, data (if any), CSW. `data_cap`: the data URB's bytes
    captured up to that many; its length is then the captured bytes' unless `whole_length`
    (usbmon's per-event limit: the URB's length is the transfer's)."""
    tag = s.tag
    s.tag += 1
    s.xfer(3, 0x02, 31, out_data=cbw(tag, data_len, data_in, lun, cdb))
    if data_len:
        payload = bytes((i * 7) & 0xFF for i in range(data_len if data_cap is None else min(data_len, data_cap)))
        if data_in:
            s.xfer(3, 0x81, data_len, in_data=None if stall else payload, status=EPIPE if stall else 0,
                   lo=50, hi=3000, actual=data_len if whole_length and not stall else None)
        else:
            s.xfer(3, 0x02, data_len, out_data=payload, lo=50, hi=3000, actual=data_len if whole_length else None)
        if stall:
            s.xfer(2, 0x00, 0, setup=setup(0x02, 1, 0, 0x81, 0))
    s.xfer(3, 0x81, 13, in_data=csw(tag, residue, csw_status))


def read10(lba, n):
    return struct.pack(">BBIBHB", 0x28, 0, lba, 0, n, 0)


def write10(lba, n):
    return struct.pack(">BBIBHB", 0x2A, 0, lba, 0, n, 0)


def read16(lba, n):
    return struct.pack(">BBQIBB", 0x88, 0, lba, n, 0, 0)


def write16(lba, n):
    return struct.pack(">BBQIBB", 0x8A, 0, lba, n, 0, 0)


def traffic(seed: int = 1, repeats: int = 3, data_cap: int | None = None) -> list[Event]:
    """The URB events of one session (see the module docstring)."""
    s = Session(rng=random.Random(seed))
    enumerate_device(s)
    command(s, bytes(6), 0, True)                                   # TEST UNIT READY
    command(s, bytes([0x12, 0, 0, 0, 36, 0]), 36, True)             # INQUIRY
    for r in range(repeats):
        lba = s.rng.randint(0, 100000)
        command(s, read10(lba, 8), 4096, True, data_cap=data_cap)
        command(s, write10(lba, 8), 4096, False, data_cap=data_cap)
        command(s, read16(lba + 8, 16), 8192, True, data_cap=data_cap)
        command(s, write16(lba + 8, 16), 8192, False, data_cap=data_cap)
    command(s, read10(999999, 8), 4096, True, csw_status=1, residue=4096, data_cap=data_cap)  # failed
    command(s, bytes([0x03, 0, 0, 0, 18, 0]), 18, True)             # REQUEST SENSE
    command(s, read10(1234, 8), 4096, True, stall=True)             # stall in the data stage
    command(s, bytes(6), 0, True)                                   # TEST UNIT READY
    return s.events


def large_traffic(seed: int = 1, big_cap: int | None = None) -> list[Event]:
    """A session with 1 MiB READ(10)s and WRITE(10)s (2048 blocks) between small commands;
    `big_cap`: the big URBs' data captured up to that many bytes only (usbmon's per-event
    limit: 61,440 bytes with the default buffer), their length the whole transfer's."""
    s = Session(rng=random.Random(seed))
    enumerate_device(s)
    command(s, bytes(6), 0, True)
    for k in range(3):
        command(s, read10(4096 * k, 2048), 1 << 20, True, data_cap=big_cap, whole_length=True)
        command(s, write10(4096 * k, 2048), 1 << 20, False, data_cap=big_cap, whole_length=True)
        command(s, read10(8 * k, 8), 4096, True)
    return s.events


def bulk_traffic(n_commands: int, seed: int = 1, data_cap: int = 0) -> list[Event]:
    """Many READ(10)/WRITE(10) commands (benchmarks)."""
    s = Session(rng=random.Random(seed))
    enumerate_device(s)
    for i in range(n_commands):
        if i % 2:
            command(s, write10(i * 8, 8), 4096, False, data_cap=data_cap)
        else:
            command(s, read10(i * 8, 8), 4096, True, data_cap=data_cap)
    return s.events


# ---------------------------------------------------------------- writers

def usbmon_header(e: Event, len_cap: int) -> bytes:
    return USBMON_PACKET_MMAPPED.build(dict(
        id=e.urb_id, type=ord(e.ev), xfer_type=e.xfer, epnum=e.ep, devnum=e.dev, busnum=e.bus,
        flag_setup=0 if e.setup is not None and e.ev == "S" else ord("-"),
        flag_data=0 if len_cap else (ord("<") if e.ev == "S" else ord(">")),
        ts_sec=BASE_SEC + e.t_us // 1_000_000, ts_usec=e.t_us % 1_000_000, status=e.status,
        length=e.length, len_cap=len_cap,
        setup=e.setup if e.setup is not None and e.ev == "S" else bytes(8),
        interval=0, start_frame=0, xfer_flags=0, ndesc=0))


def packet(e: Event) -> bytes:
    data = e.data or b""
    return usbmon_header(e, len(data)) + data


def write_pcap(path, events: list[Event], linktype: int = LINKTYPE_USB_LINUX_MMAPPED,
               snaplen: int | None = None) -> None:
    """`snaplen`: records cut to that many bytes (incl_len), orig_len the whole packet's, as
    tcpdump -s / dumpcap -s write them."""
    gh = _pcap.pcap_global_header().build(dict(magic_number=_pcap.PCAP_MAGIC_US, version_major=2,
                                               version_minor=4, thiszone=0, sigfigs=0,
                                               snaplen=snaplen or max(262144, *(64 + len(e.data or b"") for e in events)),
                                               network=linktype))
    rec = _pcap.pcap_record_header()
    with open(path, "wb") as fh:
        fh.write(gh)
        chunk = []
        for e in events:
            p = packet(e)
            cut = p[:snaplen] if snaplen else p
            chunk.append(rec.build(dict(ts_sec=BASE_SEC + e.t_us // 1_000_000, ts_usec=e.t_us % 1_000_000,
                                        incl_len=len(cut), orig_len=len(p))) + cut)
            if len(chunk) >= 4096:
                fh.write(b"".join(chunk))
                chunk = []
        fh.write(b"".join(chunk))


def _block(btype: int, body: bytes) -> bytes:
    body = body + b"\0" * (-len(body) % 4)
    total = len(body) + 12
    return struct.pack("<II", btype, total) + body + struct.pack("<I", total)


def write_pcapng(path, events: list[Event], snaplen: int | None = None) -> None:
    shb = _pcap.pcapng_shb_body().build(dict(byte_order_magic=_pcap.PCAPNG_BYTE_ORDER_MAGIC,
                                             major_version=1, minor_version=0, section_length=-1))
    idb = _pcap.pcapng_idb_body().build(dict(linktype=LINKTYPE_USB_LINUX_MMAPPED, reserved=0,
                                             snaplen=snaplen or max(262144, *(64 + len(e.data or b"") for e in events))))
    epb = _pcap.pcapng_epb_body()
    out = [_block(_pcap.PCAPNG_SHB, shb), _block(_pcap.PCAPNG_IDB, idb)]
    for e in events:
        p = packet(e)
        cut = p[:snaplen] if snaplen else p
        ts = (BASE_SEC * 1_000_000 + e.t_us)
        out.append(_block(_pcap.PCAPNG_EPB, epb.build(dict(interface_id=0, timestamp_high=ts >> 32,
                                                           timestamp_low=ts & 0xFFFFFFFF,
                                                           captured_len=len(cut), original_len=len(p))) + cut))
    with open(path, "wb") as fh:
        fh.write(b"".join(out))


def text_line(e: Event) -> str:
    kind = {0: "Z", 1: "I", 2: "C", 3: "B"}[e.xfer]
    d = "i" if e.ep & 0x80 else "o"
    ts = ((BASE_SEC + e.t_us // 1_000_000) % 4096) * 1_000_000 + e.t_us % 1_000_000
    head = f"{e.urb_id:016x} {ts} {e.ev} {kind}{d}:{e.bus}:{e.dev:03d}:{e.ep & 0x7F}"
    if e.setup is not None and e.ev == "S":
        bm, req, val, idx, ln = struct.unpack("<BBHHH", e.setup)
        head += f" s {bm:02x} {req:02x} {val:04x} {idx:04x} {ln:04x}"
    else:
        head += f" {e.status}"
    head += f" {e.length}"
    if e.data:
        shown = e.data[:32]
        words = " ".join(shown[i:i + 4].hex() for i in range(0, len(shown), 4))
        return f"{head} = {words}"
    return f"{head} {'<' if e.ev == 'S' else '>'}"


def write_text(path, events: list[Event]) -> None:
    with open(path, "w") as fh:
        fh.write("\n".join(text_line(e) for e in events) + "\n")


def user_space_text_line(e: Event) -> str:
    """The layout a user-space usbmon tool writes: the kernel's `1u` fields with the
    timestamp in decimal seconds (`1700000012.345678`) and `-` as a submission's status."""
    line = text_line(e)
    tag, ts, rest = line.split(" ", 2)
    sec = BASE_SEC + e.t_us // 1_000_000
    if e.ev == "S" and e.setup is None:
        ev, addr, _status, rest = rest.split(" ", 3)
        rest = f"{ev} {addr} - {rest}"
    return f"{tag} {sec}.{e.t_us % 1_000_000:06d} {rest}"


def write_user_space_text(path, events: list[Event], damaged: dict[int, bytes] | None = None) -> None:
    """`user_space_text_line` for every event; `damaged` {line index: bytes} appends bytes that
    are not UTF-8 to those lines (as a real capture with stray bytes in it had)."""
    lines = [user_space_text_line(e).encode() for e in events]
    for i, junk in (damaged or {}).items():
        lines[i] = lines[i][:20] + junk + lines[i][20:]
    with open(path, "wb") as fh:
        fh.write(b"\n".join(lines) + b"\n")


# ---------------------------------------------------------------- hostile inputs

HOSTILE_TEXT = [
    "this is not a usbmon line",
    "ffff888000001040 12345 S Xo:1:002:2 -115 31 <",
    "ffff888000001040 12345 C Bi:1:002:1 0 13 = 5553425",
    "1ffff888000001040 12345 S Bo:1:002:2 -115 31 <",
]


def hostile_pcaps(tmpdir) -> dict:
    """name -> (path, expected byte offset of the bad record)."""
    from pathlib import Path
    tmpdir = Path(tmpdir)
    events = traffic(3)
    good = tmpdir / "good.pcap"
    write_pcap(good, events)
    raw = good.read_bytes()
    offsets = _record_offsets(raw)
    out = {}
    last = offsets[-1]
    p = tmpdir / "truncated_record.pcap"
    p.write_bytes(raw[:last + 16 + 70])
    out["truncated_record"] = (p, last)
    p = tmpdir / "truncated_header.pcap"
    p.write_bytes(raw[:last + 7])
    out["truncated_header"] = (p, last)
    k = offsets[10]
    b = bytearray(raw)
    b[k + 16 + 8] = ord("X")
    p = tmpdir / "bad_type.pcap"
    p.write_bytes(bytes(b))
    out["bad_type"] = (p, k)
    b = bytearray(raw)
    struct.pack_into("<I", b, k + 16 + 36, 5000)
    p = tmpdir / "bad_len_cap.pcap"
    p.write_bytes(bytes(b))
    out["bad_len_cap"] = (p, k)
    b = bytearray(raw)
    struct.pack_into("<I", b, k + 8, 1 << 31)
    p = tmpdir / "huge_length.pcap"
    p.write_bytes(bytes(b))
    out["huge_length"] = (p, k)
    b = bytearray(raw)
    struct.pack_into("<I", b, 20, 1)
    p = tmpdir / "not_usbmon.pcap"
    p.write_bytes(bytes(b))
    out["not_usbmon"] = (p, 24)
    return out


def _record_offsets(raw: bytes) -> list[int]:
    pos, out = 24, []
    while pos + 16 <= len(raw):
        out.append(pos)
        pos += 16 + struct.unpack_from("<I", raw, pos + 8)[0]
    return out


if __name__ == "__main__":
    import sys
    ev = traffic(1)
    write_pcap(sys.argv[1] if len(sys.argv) > 1 else "gen_usbmon.pcap", ev)


def write_pcap_bulk(path, events: list[Event]) -> None:
    """Same bytes as write_pcap, built through numpy dtypes derived from the construct
    declarations (millions of packets for benchmarks)."""
    import numpy as np
    rdt = _pcap.dtype_of(_pcap.pcap_record_header())
    udt = _pcap.dtype_of(USBMON_PACKET_MMAPPED)
    n = len(events)
    data = [e.data or b"" for e in events]
    lens = np.fromiter((len(d) for d in data), dtype=np.int64, count=n)
    t_us = np.fromiter((e.t_us for e in events), dtype=np.int64, count=n)
    rec = np.zeros(n, dtype=rdt)
    rec["ts_sec"] = BASE_SEC + t_us // 1_000_000
    rec["ts_usec"] = t_us % 1_000_000
    rec["incl_len"] = rec["orig_len"] = udt.itemsize + lens
    u = np.zeros(n, dtype=udt)
    u["id"] = np.fromiter((e.urb_id for e in events), dtype=np.uint64, count=n)
    u["type"] = np.fromiter((ord(e.ev) for e in events), dtype=np.uint8, count=n)
    u["xfer_type"] = np.fromiter((e.xfer for e in events), dtype=np.uint8, count=n)
    u["epnum"] = np.fromiter((e.ep for e in events), dtype=np.uint8, count=n)
    u["devnum"] = np.fromiter((e.dev for e in events), dtype=np.uint8, count=n)
    u["busnum"] = np.fromiter((e.bus for e in events), dtype=np.uint16, count=n)
    has_setup = np.fromiter((e.setup is not None and e.ev == "S" for e in events), dtype=bool, count=n)
    u["flag_setup"] = np.where(has_setup, 0, ord("-"))
    is_s = u["type"] == ord("S")
    u["flag_data"] = np.where(lens > 0, 0, np.where(is_s, ord("<"), ord(">")))
    u["ts_sec"], u["ts_usec"] = rec["ts_sec"], rec["ts_usec"]
    u["status"] = np.fromiter((e.status for e in events), dtype=np.int32, count=n)
    u["length"] = np.fromiter((e.length for e in events), dtype=np.uint32, count=n)
    u["len_cap"] = lens
    setups = np.frombuffer(b"".join(e.setup if (e.setup is not None and e.ev == "S") else bytes(8)
                                    for e in events), dtype="V8")
    u["setup"] = setups
    head = np.concatenate([rec.view(np.uint8).reshape(n, -1), u.view(np.uint8).reshape(n, -1)], axis=1)
    gh = _pcap.pcap_global_header().build(dict(magic_number=_pcap.PCAP_MAGIC_US, version_major=2,
                                               version_minor=4, thiszone=0, sigfigs=0, snaplen=262144,
                                               network=LINKTYPE_USB_LINUX_MMAPPED))
    rows = head.tobytes()
    w = head.shape[1]
    with open(path, "wb") as fh:
        fh.write(gh)
        fh.write(b"".join(rows[i * w:(i + 1) * w] + data[i] for i in range(n)))


def pcap_to_pcapng(src, dst) -> None:
    """The packets of the pcap `src` as a pcapng file (one section, one interface of the same
    link type, microsecond times): for benchmarks at any size, written a batch at a time."""
    import numpy as np
    from scsitrace.parsers import _pcap_scan
    raw = np.memmap(src, np.uint8, mode="r")
    body = raw[24:]
    le = struct.unpack_from("<I", bytes(raw[:4]))[0] in (_pcap.PCAP_MAGIC_US, _pcap.PCAP_MAGIC_NS)
    network = struct.unpack_from("<I" if le else ">I", bytes(raw[20:24]))[0]
    offsets, _ = _pcap_scan.walk_chain(body, 0, 16, 8, not le)
    n = len(offsets)
    shb = _pcap.pcapng_shb_body().build(dict(byte_order_magic=_pcap.PCAPNG_BYTE_ORDER_MAGIC,
                                             major_version=1, minor_version=0, section_length=-1))
    idb = _pcap.pcapng_idb_body().build(dict(linktype=network, reserved=0, snaplen=262144))
    with open(dst, "wb") as fh:
        fh.write(_block(_pcap.PCAPNG_SHB, shb) + _block(_pcap.PCAPNG_IDB, idb))
        for lo in range(0, n, 1 << 16):
            part = []
            for off in offsets[lo:lo + (1 << 16)].tolist():
                sec, usec, incl, orig = struct.unpack_from("<IIII", body, off)
                ts = sec * 1_000_000 + usec
                pad = -incl % 4
                total = 32 + incl + pad
                part.append(struct.pack("<IIIIIII", _pcap.PCAPNG_EPB, total, 0, ts >> 32, ts & 0xFFFFFFFF, incl, orig)
                            + bytes(body[off + 16:off + 16 + incl]) + b"\0" * pad + struct.pack("<I", total))
            fh.write(b"".join(part))


def pcap_to_text(src, dst) -> None:
    """The URBs of the usbmon pcap `src` as `1u` text (`text_line`, 32 data bytes at most):
    for benchmarks at any size, read and written a batch at a time."""
    from scsitrace.parsers import usbmon
    cap = usbmon._parse_pcap(str(src), True, stream_bytes=0)
    with open(dst, "w") as fh:
        for u in cap.chunks():
            t_us = (u["t_ns"] // 1000 - BASE_SEC * 1_000_000).to_list()
            rows = zip(t_us, *(u[c].to_list() for c in ("urb_id", "event", "xfer", "ep", "status", "length", "bus",
                                                          "dev", "setup", "data")))
            lines = []
            for t, urb, ev, xfer, ep, status, length, bus, dev, setup, data in rows:
                lines.append(text_line(Event(t, urb, ev, xfer, ep, status, length, data or None, setup, bus, dev)))
            fh.write("\n".join(lines) + "\n")


# ---------------------------------------------------------------- USBPcap (Windows)

USBD_STATUS_OF = {0: 0, EPIPE: 0xC0000004}      # other errors: USBD_STATUS_DEV_NOT_RESPONDING
URB_FUNCTION = {2: 0x0008, 3: 0x0009, 1: 0x0009}  # CONTROL_TRANSFER, BULK_OR_INTERRUPT_TRANSFER


def usbpcap_packets(events: list[Event]) -> list[tuple[int, bytes, int]]:
    """(time in us, packet, its length on the wire) of each packet USBPcap logs for the same
    URBs: the usbmon header rewritten as USBPcap's (parsers/_usbpcap.py USBPCAP_PACKET, as its
    driver fills it: USBPcapURB.c). Bulk/interrupt: one packet down (OUT data), one back (IN
    data). Control: the setup stage down (8 bytes), an OUT data stage down, the IN data stage
    back, then the status stage back. A URB whose data usbmon captured short (text: 32 bytes)
    keeps its length in dataLength, the packet cut as a snap length cuts it."""
    from scsitrace.parsers._usbpcap import USBPCAP_CONTROL, USBPCAP_PACKET
    out = []
    for e in events:
        back = e.ev != "S"
        status = 0 if not back else USBD_STATUS_OF.get(e.status, 0xC0000005)

        def pkt(data: bytes, stage: int | None = None, whole: int | None = None) -> tuple[int, bytes, int]:
            n = len(data) if whole is None else max(whole, len(data))
            fields = dict(irp_id=e.urb_id, status=status, function=URB_FUNCTION.get(e.xfer, 0x0009), info=int(back),
                          bus=e.bus, device=e.dev, endpoint=e.ep, transfer=e.xfer, data_length=n)
            if stage is None:
                head = USBPCAP_PACKET.build(dict(header_len=USBPCAP_PACKET.sizeof(), **fields))
            else:
                head = USBPCAP_CONTROL.build(dict(header_len=USBPCAP_CONTROL.sizeof(), stage=stage, **fields))
            return e.t_us, head + data, len(head) + n

        data = e.data or b""
        if e.xfer != 2:
            out.append(pkt(data, whole=e.length if data else None))
        elif not back:
            out.append(pkt(e.setup or bytes(8), 0))
            if data:
                out.append(pkt(data, 1, whole=e.length))
        else:
            if data:
                out.append(pkt(data, 1, whole=e.length))
            out.append(pkt(b"", 2))
    return out


def events_from_urbs(urbs) -> list[Event]:
    """gen Events of a parsed capture's urbs frame (parsers: frames["urbs"]), e.g. a real
    usbmon text capture, to write it again as pcap or USBPcap."""
    return [Event(r["t_ns"] // 1000, r["urb_id"], r["event"], r["xfer"], r["ep"], r["status"], r["length"] or 0,
                  r["data"], r["setup"], r["bus"], r["dev"]) for r in urbs.iter_rows(named=True)]


def write_usbpcap(path, events: list[Event], pcapng: bool = False, snaplen: int | None = None) -> None:
    """The USBPcap capture (link type 249) of `events`, pcap or pcapng."""
    packets = usbpcap_packets(events)
    longest = max(262144, *(whole for _, _, whole in packets))
    if pcapng:
        shb = _pcap.pcapng_shb_body().build(dict(byte_order_magic=_pcap.PCAPNG_BYTE_ORDER_MAGIC,
                                                 major_version=1, minor_version=0, section_length=-1))
        idb = _pcap.pcapng_idb_body().build(dict(linktype=249, reserved=0, snaplen=snaplen or longest))
        epb = _pcap.pcapng_epb_body()
        out = [_block(_pcap.PCAPNG_SHB, shb), _block(_pcap.PCAPNG_IDB, idb)]
        for t_us, p, whole in packets:
            cut = p[:snaplen] if snaplen else p
            ts = BASE_SEC * 1_000_000 + t_us
            out.append(_block(_pcap.PCAPNG_EPB, epb.build(dict(interface_id=0, timestamp_high=ts >> 32,
                                                               timestamp_low=ts & 0xFFFFFFFF, captured_len=len(cut),
                                                               original_len=whole)) + cut))
        with open(path, "wb") as fh:
            fh.write(b"".join(out))
        return
    gh = _pcap.pcap_global_header().build(dict(magic_number=_pcap.PCAP_MAGIC_US, version_major=2, version_minor=4,
                                               thiszone=0, sigfigs=0, snaplen=snaplen or longest, network=249))
    rec = _pcap.pcap_record_header()
    with open(path, "wb") as fh:
        fh.write(gh + b"".join(
            rec.build(dict(ts_sec=BASE_SEC + t // 1_000_000, ts_usec=t % 1_000_000,
                           incl_len=len(p[:snaplen] if snaplen else p), orig_len=whole)) + (p[:snaplen] if snaplen else p)
            for t, p, whole in packets))
