"""Generator of the hostile corpus: damaged, extreme and odd inputs of every format, and file
system objects that are not files, each run by tests/test_hostile.py through the CLI in strict
and in lenient mode.

Every case is built from a small valid base (the committed fixtures, or the test generators
of tests/gen_*.py) by one mutation. What must happen, for every case:

- no traceback, no hang, exit status 0 or 2 only;
- exit 2: one line on stderr, `scsitrace: FILE...`, naming the line (`FILE:N: ...`) or the
  byte offset (`FILE: byte offset N: ...`) when the case says where the damage is;
- lenient exit 0: `records.read + records.skipped` equals the records in the file (counted
  here, independently of the parsers, when the case gives `records`);
- a case marked `bad=True` holds a value outside its field's range (or a structure the
  format forbids): strict must exit 2, lenient must skip at least one record or exit 2.

Mutations of text formats (each on a chosen record line of the base):
  empty, header only, one record, cut inside the header, cut inside the first and the last
  record, bit flips (seeded), huge numbers (10^20 and 10^30), negative numbers, NaN, a NUL
  byte, a whole page of NULs, Latin-1 bytes, the file in UTF-16, a UTF-8 BOM, CRLF line
  ends, a 10 MB line, binary garbage; plus per-format field attacks (FIELD_ATTACKS).
Logic-analyzer captures (sigrok .sr, DSView .dsl, Saleae CSV): cut, emptied, flipped, garbage.
Binary formats (blktrace, usbmon pcap, USBPcap pcap, transitions Parquet): truncation at every structural
boundary of the first and last record (inside the file header, the record header, the PDU
or data), bit flips, absurd lengths, wrong magic and version.
File system: a FIFO, /dev/null, /dev/zero (auto and with --format), a directory, a symlink
loop, a dangling symlink, a missing file, a blktrace base name whose per-CPU file is a
directory.
"""
from __future__ import annotations

import os
import random
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures"
CAPTURED = FIX / "captured"


@dataclass
class Case:
    path: str                       # the TRACE argument
    fmt: str = "auto"               # --format
    records: int | None = None      # records in the file (lenient: read + skipped)
    bad: bool = False               # strict must fail; lenient must skip or fail
    where: str | None = None        # "line" / "offset": what an exit-2 message must name
    extra: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- record counters

def _text_lines(data: bytes) -> list[bytes]:
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def count_nonblank(data: bytes) -> int:
    return sum(1 for ln in _text_lines(data) if ln.strip())


def count_lines(data: bytes) -> int:
    """Kernel logs, strace and sg3_utils output: every line is a record (read and ignored
    unless it is a SCSI event or command)."""
    return len(_text_lines(data))


def count_ancot(data: bytes) -> int:
    """Record lines: after the header (line 1 and the '#' lines), not blank, not comments."""
    lines = _text_lines(data)
    return sum(1 for ln in lines[1:] if ln.strip() and not ln.lstrip().startswith(b"#"))


def count_blkparse(data: bytes) -> int:
    """Event lines: not blank, before blkparse's summary block."""
    n = 0
    for ln in _text_lines(data):
        if re.match(rb"^(CPU\d+ \(|Total \(|Throughput \(|Events \(|Skips: |Input file )", ln.strip()):
            break
        n += bool(ln.strip())
    return n


def _count_chain(data: bytes, start: int, head: int, length_at: int, fmt: str) -> int:
    """Records of a chain of (header of `head` bytes holding the body length at `length_at`,
    body) from `start`; a tail too short for its header counts as one (it is reported as
    skipped)."""
    pos, n = start, 0
    while pos < len(data):
        n += 1
        if pos + head > len(data):
            break
        pos += head + struct.unpack_from(fmt, data, pos + length_at)[0]
    return n


def _blktrace_head(data: bytes, pos: int) -> tuple[int, int]:
    """(header length, offset of pdu_len) of the record at `pos`: by its version byte (v8,
    struct blk_io_trace2: 64 and 50; else v7's 48 and 46)."""
    return (64, 50) if pos < len(data) and data[pos] == 0x08 else (48, 46)


def count_blktrace(data: bytes) -> int:
    """Records of a little-endian blktrace file (v7 or v8 records), following the chain by
    pdu_len; a tail too short for its header counts as one."""
    pos, n = 0, 0
    while pos < len(data):
        n += 1
        head, length_at = _blktrace_head(data, pos)
        if pos + head > len(data):
            break
        pos += head + struct.unpack_from("<H", data, pos + length_at)[0]
    return n


def count_pcap(data: bytes) -> int:
    """Records of a little-endian pcap file, following the chain by incl_len."""
    return _count_chain(data, 24, 16, 8, "<I")


# ---------------------------------------------------------------- bases

def _read(p: Path) -> bytes:
    return p.read_bytes()


def base_texts() -> dict[str, dict]:
    """format -> base bytes, record counter, index of the first record line, suffix."""
    c = CAPTURED
    return {
        "ancot": dict(data=_read(FIX / "bus/one-target-l1/trace.ancot"), count=count_ancot, suffix=".ancot"),
        "vcd": dict(data=_read(FIX / "bus/random4k-vcd-l1/trace.vcd"), count=None, suffix=".vcd"),
        "blkparse": dict(data=_read(c / "usb_randread4k/ref.blkparse.txt"), count=count_blkparse,
                         suffix=".blkparse.txt"),
        "usbmon": dict(data=_read(c / "usb_randread4k/usbmon.txt"), count=count_nonblank, suffix=".usbmon.txt"),
        "ftrace": dict(data=_read(c / "usb_randread4k/ftrace.txt"), count=count_lines, suffix=".ftrace.txt",
                       fmt="scsilog"),
        "dmesg": dict(data=_read(c / "lsi_seqread32k_logged/dmesg-scsi.txt"), count=count_lines,
                      suffix=".dmesg", fmt="scsilog"),
        "qemu_lsi": dict(data=_read(c / "lsi_randread4k/qemu-trace.txt"), count=count_nonblank,
                         suffix=".qemu-trace.log"),
        "sgio": dict(data=_read(c / "sg/lsi_sg_tools/dd_4k.strace.txt"), count=count_lines,
                     suffix=".strace.txt"),
        "sg3": dict(data=_read(c / "sg/lsi_sg_tools/dd_4k.out.txt"), count=count_lines,
                    suffix=".sg3.txt", fmt="sgio"),
        "zfcp": dict(data=_zfcp_log(), count=count_lines, suffix=".dmesg", fmt="scsilog"),
        "sgio_prog": dict(data=_strace_with_program_output(), count=count_lines, suffix=".strace.txt", fmt="sgio"),
    }


def _zfcp_log() -> bytes:
    """A completions-only kernel log (64-bit LUNs, Done: ADD_TO_MLQUEUE, sense lines, scsi scan)."""
    from gen_scsilog import completions_log
    cmds = [(1_000_000 * k, (0, 0, 0, [1084113024, 1084178560][k % 2]), 640 + k % 3, bytes([[0, 0x12][k % 2]]) + bytes(5),
             ["ADD_TO_MLQUEUE", "SUCCESS"][k % 2], [None, "Unit Attention"][k % 2]) for k in range(1, 13)]
    return completions_log(cmds, scan=2, other=True).encode()


def _strace_with_program_output() -> bytes:
    """strace of an sg program without -o, indented as pasted: the program's lines between."""
    from gen_sgio import PROGRAM_LINES, command, strace_text, with_program_output
    cmds = [command(bytes([[0, 0x12][k % 2], 0, 0, 0, 36 * (k % 2), 0]), start_us=900 * k,
                    direction=["none", "in"][k % 2], dxfer_len=36 * (k % 2)) for k in range(8)]
    text = with_program_output(strace_text(cmds), [(k, PROGRAM_LINES[k % len(PROGRAM_LINES)]) for k in range(8)],
                               "    ", split_write=True)
    return text.encode()


def _first_record(name: str, lines: list[bytes]) -> int:
    for i, ln in enumerate(lines):
        s = ln.strip()
        if not s:
            continue
        if name == "ancot" and (i == 0 or s.startswith(b"#")):
            continue
        if name == "vcd" and not s.startswith(b"#"):
            continue
        if name == "ftrace" and b"scsi_dispatch_cmd_" not in s:
            continue
        if name == "dmesg" and b"Send:" not in s:
            continue
        if name == "sg3" and b"cdb: [" not in s:
            continue
        if name == "zfcp" and b"Done:" not in s:
            continue
        if name == "sgio_prog" and b"SG_IO" not in s:
            continue
        return i
    raise AssertionError(name)


# (format, case, regex on the first record line, replacement, is the value out of range)
FIELD_ATTACKS = [
    ("ancot", "tick-huge", rb"^\s*\d+", b"100000000000000000000", True),
    ("ancot", "tick-negative", rb"^\s*\d+", b"-5", True),
    ("ancot", "tick-nan", rb"^\s*\d+", b"nan", True),
    ("ancot", "tick-overflow", rb"^\s*\d+", b"999999999999999999", True),   # fits int64, x 50 ns does not
    ("ancot", "signal-2", rb"[01]$", b"2", True),
    ("blkparse", "seconds-huge", rb"\d+\.\d{9}", b"100000000000.000000000", True),
    ("blkparse", "seconds-int64", rb"\d+\.\d{9}", b"100000000000000000000.000000000", True),
    ("blkparse", "sector-huge", rb"(?<=RS )\d+", b"100000000000000000000", True),
    ("blkparse", "nsect-huge", rb"(?<=\+ )\d+", b"100000000000000000000", True),
    ("blkparse", "cpu-huge", rb"(?<=,\d\d)\s+\d+", b" 99999999999", True),
    ("blkparse", "pid-huge", rb"(?<=\d{9})\s+\d+", b"  99999999999", True),
    ("usbmon", "length-huge", rb"(?<= -115 )\d+", b"100000000000000000000", True),
    ("usbmon", "status-huge", rb" -115 ", b" -99999999999 ", True),
    ("usbmon", "dev-huge", rb":002:", b":99999999999:", True),
    ("usbmon", "ts-nan", rb"(?<= )\d+(?= S )", b"nan", True),
    ("ftrace", "ts-huge", rb"\d+\.\d{6}(?=:)", b"100000000000.000000", True),
    ("ftrace", "ts-int64", rb"\d+\.\d{6}(?=:)", b"100000000000000000000.000000", True),
    ("ftrace", "raw-odd", rb"raw=28", b"raw=2", True),
    ("ftrace", "lun-huge", rb"lun=0", b"lun=100000000000000000000", True),
    ("ftrace", "tag-huge", rb"driver_tag=0", b"driver_tag=100000000000000000000", True),
    ("dmesg", "ts-huge", rb"\d+\.\d{6}(?=\])", b"100000000000.000000", True),
    ("dmesg", "host-huge", rb"sd 0:", b"sd 100000000000000000000:", True),
    ("sg3", "cdb-garbled", rb"\[12 00 00 00 24 00\]", b"[12 0g 00 00 24 0]", True),
    ("sgio", "dxfer-len-huge", rb"(?<=dxfer_len=)\d+", b"100000000000000000000", True),
    ("sgio", "resid-huge", rb"(?<=resid=)\d+", b"100000000000000000000", True),
    ("sgio", "duration-huge", rb"(?<=duration=)\d+", b"100000000000000000000", True),
    ("sgio", "cmdp-garbled", rb'cmdp="\\x12', b'cmdp="\\xzz', True),
    ("zfcp", "lun-huge", rb"1084\d+", b"100000000000000000000", True),
    ("zfcp", "ts-huge", rb"\d+\.\d{6}(?=\])", b"100000000000.000000", True),
    ("zfcp", "tag-huge", rb"(?<=tag#)\d+", b"100000000000000000000", True),
    ("sgio_prog", "dxfer-len-huge", rb"(?<=dxfer_len=)\d+", b"100000000000000000000", True),
    ("sgio_prog", "cut-call", rb"ioctl\(.*$", b'openat(AT_FDCWD, "/dev/sg0", O_RDWR', True),
    ("qemu_lsi", "ts-garbled", rb"(?<=@)\d+\.\d+", b"17x5345100.755681", True),
    ("qemu_lsi", "ts-huge", rb"(?<=@)\d+", b"100000000000000000000", True),
    ("qemu_lsi", "pid-huge", rb"^\d+", b"100000000000000000000", True),
]
# attacks on other lines than the first record
LINE_ATTACKS = [
    ("ancot", "tick-ns-huge", rb"^# tick_ns: \d+$", b"# tick_ns: 100000000000000000000", True),
    ("ancot", "tick-ns-int64", rb"^# tick_ns: \d+$", b"# tick_ns: 4611686018427387904", True),
    # (format, case, regex (first line that matches), replacement, bad)
    ("dmesg", "cdb-garbled", rb"CDB: Read\(10\) [0-9a-f ]+", b"CDB: Read(10) 28 0g zz 00 8", True),
    ("dmesg", "ts-bad-early", rb"^\[\s*\d+\.\d+\]", b"[   1x.2]", True),
    ("qemu_lsi", "len-huge", rb"(?<=lsi_do_dma DMA addr=0x)[0-9a-f]+ len=\d+", b"46b0000 len=100000000000000000000",
     True),
    ("qemu_lsi", "sector-huge", rb"(?<=lba )\d+", b"100000000000000000000", True),
    ("vcd", "wide-value", rb"^[01][!-~]+$", None, True),          # replaced by a 1000-bit vector
    ("vcd", "huge-vector", rb"^[01][!-~]+$", None, True),         # a 10 MB vector
    ("vcd", "time-huge", rb"^#\d+$", b"#1000000000000000000000000000000", True),
    ("vcd", "time-negative", rb"^#[1-9]\d*$", b"#-5", True),
    ("vcd", "no-enddefinitions", rb"^\$enddefinitions.*$", b"", True),
    ("sg3", "duration-huge", rb"(?<=duration=)\d+", b"100000000000000000000", True),
    ("usbmon", "tag-long", rb"^[0-9a-f]+", b"1ffff888000001040", True),
]


def _sub_line(lines: list[bytes], idx: int, rx: bytes, new: bytes) -> list[bytes]:
    out = list(lines)
    new_line, n = re.subn(rx, lambda _: new, out[idx], count=1)
    assert n, (rx, out[idx])
    out[idx] = new_line
    return out


def _join(lines: list[bytes], eol: bytes = b"\n") -> bytes:
    return eol.join(lines) + eol


def text_cases(d: Path) -> dict[str, Case]:
    out: dict[str, Case] = {}
    rng = random.Random(18)
    for name, b in base_texts().items():
        data, counter, suffix = b["data"], b["count"], b["suffix"]
        fmt = b.get("fmt", name if name != "ftrace" else "scsilog")
        lines = _text_lines(data)
        first = _first_record(name, lines)
        mid = first + (len(lines) - first) // 2
        header = lines[:first]

        def put(case, payload: bytes, *, bad=False, where=None, force_fmt=False, count=True):
            p = d / f"{name}-{case}{suffix}"
            p.write_bytes(payload)
            rec = counter(payload) if (counter and count) else None
            out[f"{name}/{case}"] = Case(str(p), fmt if force_fmt else "auto", rec, bad, where)

        put("clean", data)
        put("empty", b"", force_fmt=True)
        if header:
            put("header-only", _join(header))
            cut_at = len(_join(header)) // 2 or 1
            put("cut-header", data[:cut_at], force_fmt=True)
        put("one-record", _join(header + [lines[first]]))
        first_off = len(_join(lines[:first])) if first else 0
        put("cut-first-record", data[:first_off + len(lines[first]) // 2])
        put("cut-last-record", data[:len(data) - 1 - len(lines[-1]) // 2])
        for k in range(3):
            flipped = bytearray(data)
            pos = rng.randrange(first_off, len(data))
            flipped[pos] ^= 1 << rng.randrange(8)
            put(f"bitflip-{k}", bytes(flipped), force_fmt=True)
        rec = lines[first]
        digit = max(i for i, c in enumerate(rec) if chr(c).isdigit())
        put("nul-in-record", _join(lines[:first] + [rec[:digit] + b"\0" + rec[digit + 1:]] + lines[first + 1:]),
            bad=True, where="line")
        put("nul-page", _join(header) + b"\0" * 4096, bad=True, force_fmt=True, count=False)
        put("latin1", _join(lines[:mid] + [lines[mid] + b" \xe9\xff"] + lines[mid + 1:]), bad=True, where="line")
        put("utf16", data.decode("utf-8").encode("utf-16"), bad=True, force_fmt=True, count=False)
        put("bom", b"\xef\xbb\xbf" + data)
        put("crlf", _join(lines, b"\r\n"))
        # kernel logs and sg3_utils output read and ignore lines that are not SCSI events or
        # commands: a long one is legal there
        # (strace's too: a line with no strace shape is the traced program's output)
        put("long-line", _join(lines[:mid] + [b"a" * (10 << 20)] + lines[mid:]),
            bad=name not in ("ftrace", "dmesg", "sg3", "zfcp", "sgio", "sgio_prog"),
            where="line")
        put("garbage", bytes(rng.randrange(256) for _ in range(65536)), bad=True, force_fmt=True, count=False)
        for fmt_name, case, rx, new, bad in FIELD_ATTACKS:
            if fmt_name == name:
                put(case, _join(_sub_line(lines, first, rx, new)), bad=bad, where="line")
        for fmt_name, case, rx, new, bad in LINE_ATTACKS:
            if fmt_name != name:
                continue
            at = next((i for i, ln in enumerate(lines) if re.search(rx, ln)), None)
            assert at is not None, (name, case)
            if case == "wide-value":
                code = lines[at][1:]
                new = b"b" + b"1" * 1000 + b" " + code
            elif case == "huge-vector":
                code = lines[at][1:]
                new = b"b" + b"1" * (10 << 20) + b" " + code
            put(case, _join(_sub_line(lines, at, rx, new)), bad=bad, where="line")
    return out


# ---------------------------------------------------------------- binary formats

def blktrace_cases(d: Path) -> dict[str, Case]:
    """The structural cases on a real capture, in protocol version 7 and (`v8-`) converted to
    version 8 (tests/blktrace_v8.py), and the two mixed."""
    import blktrace_v8
    src = CAPTURED / "lsi_randread4k"
    f0 = (src / "lsi_randread4k.blktrace.0").read_bytes()
    f1 = (src / "lsi_randread4k.blktrace.1").read_bytes()
    out = _blktrace_cases(d, "", f0, f1, 48)
    out.update(_blktrace_cases(d, "v8-", blktrace_v8.to_v8(f0), blktrace_v8.to_v8(f1), 64))
    sub = d / "blk-mixed-v7-v8"
    sub.mkdir()
    (sub / "t.blktrace.0").write_bytes(f0)
    v8 = blktrace_v8.to_v8(f1)
    (sub / "t.blktrace.1").write_bytes(v8)
    out["blktrace/mixed-v7-v8"] = Case(str(sub / "t.blktrace.0"), "auto", count_blktrace(f0) + count_blktrace(v8),
                                       False, None)
    return out


def _blktrace_cases(d: Path, prefix: str, f0: bytes, f1: bytes, head: int) -> dict[str, Case]:
    out: dict[str, Case] = {}
    pdu_at = head - 2 if head == 48 else 50

    def offsets(data):
        pos, offs = 0, []
        while pos + head <= len(data):
            offs.append(pos)
            pos += head + struct.unpack_from("<H", data, pos + pdu_at)[0]
        return offs

    def put(case, payload0: bytes, payload1: bytes | None = f1, *, bad=False, where=None, fmt="auto",
            count=True):
        case = prefix + case
        sub = d / f"blk-{case}"
        sub.mkdir()
        p0 = sub / "t.blktrace.0"
        p0.write_bytes(payload0)
        n = count_blktrace(payload0)
        if payload1 is not None:
            (sub / "t.blktrace.1").write_bytes(payload1)
            n += count_blktrace(payload1)
        out[f"blktrace/{case}"] = Case(str(p0), fmt, n if count else None, bad, where)

    put("clean", f0)
    offs = offsets(f0)
    with_pdu = next(o for o in offs if struct.unpack_from("<H", f0, o + pdu_at)[0])
    last = offs[-1]
    for at, case in ((20, "cut-first-header"), (head, "cut-after-first-header"),
                     (with_pdu + head + 2, "cut-inside-pdu"), (last, "cut-at-last-record"),
                     (last + 30, "cut-inside-last-header"), (len(f0) - 1, "cut-last-byte")):
        put(case, f0[:at], bad=at not in offs and at != len(f0), where="offset")
    b = bytearray(f0)
    b[offs[5]] ^= 0x10
    put("magic-flip", bytes(b), bad=True, where="offset")
    b = bytearray(f0)
    struct.pack_into("<H", b, offs[5] + pdu_at, 0xFFFF)
    put("pdu-len-huge", bytes(b), bad=True, where="offset", count=False)
    b = bytearray(f0)
    struct.pack_into("<Q", b, offs[10] + 8, (1 << 63) + 5)        # a time beyond int64 ns
    put("time-huge", bytes(b), bad=True, where="offset")
    b = bytearray(f0)
    struct.pack_into("<Q", b, offs[12] + 16, 2**64 - 1)           # sector -1 as u64
    put("sector-huge", bytes(b), bad=True, where="offset")
    b = bytearray(f0)
    b[offs[5]] = 0x09
    put("version-9", bytes(b), bad=True, where="offset")
    rng = random.Random(7)
    for k in range(3):
        b = bytearray(f0)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        put(f"bitflip-{k}", bytes(b), count=False)
    put("empty-cpu-file", f0, b"")
    if head == 48:
        put("nul-page", b"\0" * 4096, None, bad=True, fmt="blktrace", count=False)
    else:       # a v8 record whose 64-byte header the file cuts after v7's 48 bytes
        put("cut-v8-header-at-48", f0[:offs[3] + 48], bad=True, where="offset")
    return out


def pcap_cases(d: Path) -> dict[str, Case]:
    import gen_usbmon as gu
    good = d / "pcap-base.pcap"
    gu.write_pcap(good, gu.traffic(2))
    raw = good.read_bytes()
    offs = gu._record_offsets(raw)
    out: dict[str, Case] = {}

    def put(case, payload: bytes, *, bad=False, where=None, fmt="auto", count=True):
        p = d / f"pcap-{case}.pcap"
        p.write_bytes(payload)
        out[f"pcap/{case}"] = Case(str(p), fmt, count_pcap(payload) if count else None, bad, where)

    put("clean", raw)
    put("cut-global-header", raw[:10], bad=True, fmt="usbmon", count=False)
    put("global-header-only", raw[:24])
    first, last = offs[0], offs[-1]
    for at, case in ((first + 7, "cut-first-record-header"), (first + 16 + 20, "cut-first-usbmon-header"),
                     (first + 16 + 64 + 1, "cut-first-data"), (last, "cut-at-last-record"),
                     (last + 7, "cut-last-record-header"), (len(raw) - 1, "cut-last-byte")):
        put(case, raw[:at], bad=at not in offs, where="offset")
    b = bytearray(raw)
    struct.pack_into("<I", b, offs[4] + 8, 0x7FFFFFFF)
    put("incl-len-huge", bytes(b), bad=True, where="offset", count=False)
    b = bytearray(raw)
    struct.pack_into("<I", b, offs[4] + 16 + 32, 0xFFFFFFFF)       # URB length 2^32-1
    put("urb-length-huge", bytes(b))
    b = bytearray(raw)
    b[offs[4] + 16 + 8] = ord("X")
    put("bad-event-type", bytes(b), bad=True, where="offset")
    rng = random.Random(9)
    for k in range(3):
        b = bytearray(raw)
        b[rng.randrange(24, len(b))] ^= 1 << rng.randrange(8)
        put(f"bitflip-{k}", bytes(b), count=False)
    return out


def usbpcap_cases(d: Path) -> dict[str, Case]:
    """USBPcap (Windows, link type 249) captures of the same traffic (gen_usbmon.write_usbpcap),
    then damaged in their USBPcap headers (headerLen, transfer type, dataLength, device)."""
    import gen_usbmon as gu
    good = d / "usbpcap-base.pcap"
    gu.write_usbpcap(good, gu.traffic(2))
    raw = good.read_bytes()
    offs = gu._record_offsets(raw)
    out: dict[str, Case] = {}

    def put(case, payload: bytes, *, bad=False, where=None, count=True):
        p = d / f"usbpcap-{case}.pcap"
        p.write_bytes(payload)
        out[f"usbpcap/{case}"] = Case(str(p), "auto", count_pcap(payload) if count else None, bad, where)

    put("clean", raw)
    ng = d / "usbpcap-base.pcapng"
    gu.write_usbpcap(ng, gu.traffic(2), pcapng=True)
    out["usbpcap/pcapng-clean"] = Case(str(ng), "auto", None)
    put("cut-first-usbpcap-header", raw[:offs[0] + 16 + 10], where="offset")
    put("cut-last-byte", raw[:-1], where="offset")
    put("snap-200", (lambda p: p.read_bytes())(_written(d / "usbpcap-snap.pcap", gu, 200)))
    for case, field_at, fmt, value in (("header-len-small", 0, "<H", 5), ("transfer-bad", 22, "<B", 7),
                                       ("data-length-huge", 23, "<I", 0x7FFFFFFF), ("device-huge", 19, "<H", 300)):
        b = bytearray(raw)
        struct.pack_into(fmt, b, offs[6] + 16 + field_at, value)
        put(case, bytes(b), bad=True, where="offset")
    rng = random.Random(11)
    for k in range(3):
        b = bytearray(raw)
        b[rng.randrange(24, len(b))] ^= 1 << rng.randrange(8)
        put(f"bitflip-{k}", bytes(b), count=False)
    return out


def _written(path: Path, gu, snaplen: int) -> Path:
    gu.write_usbpcap(path, gu.traffic(2), snaplen=snaplen)
    return path


def parquet_cases(d: Path) -> dict[str, Case]:
    """Parquet written by `scsitrace convert` from the ancot base, then damaged."""
    from scsitrace.cli import main
    good = d / "pq-base.parquet"
    assert main(["convert", str(FIX / "bus/one-target-l1/trace.ancot"), "-o", str(good)]) == 0
    raw = good.read_bytes()
    out: dict[str, Case] = {}

    def put(case, payload: bytes, *, bad=True, fmt="auto"):
        p = d / f"pq-{case}.parquet"
        p.write_bytes(payload)
        out[f"parquet/{case}"] = Case(str(p), fmt, None, bad, "offset" if bad else None)

    put("clean", raw, bad=False)
    put("cut-magic", raw[:4], fmt="transitions-parquet")
    put("cut-half", raw[:len(raw) // 2])
    put("cut-footer", raw[:-8])
    b = bytearray(raw)
    footer_len = struct.unpack_from("<I", raw, len(raw) - 8)[0]
    b[len(raw) - 8 - footer_len // 2] ^= 0xFF
    put("footer-flip", bytes(b))
    b = bytearray(raw)
    for i in range(8, len(raw) // 2, 97):   # the column chunks: page headers and data
        b[i] ^= 0x5A
    put("data-flips", bytes(b))
    return out


# ---------------------------------------------------------------- file system

def fs_cases(d: Path) -> dict[str, Case]:
    out: dict[str, Case] = {}
    fifo = d / "fifo.ancot"
    os.mkfifo(fifo)
    out["fs/fifo"] = Case(str(fifo), bad=True)
    out["fs/fifo-format"] = Case(str(fifo), "usbmon", bad=True)
    out["fs/dev-null"] = Case("/dev/null", bad=True)
    out["fs/dev-zero"] = Case("/dev/zero", bad=True)
    out["fs/dev-zero-format"] = Case("/dev/zero", "blktrace", bad=True)
    out["fs/directory"] = Case(str(d), bad=True)
    out["fs/directory-format"] = Case(str(d), "ancot", bad=True)
    loop = d / "loop.ancot"
    os.symlink(loop, loop)
    out["fs/symlink-loop"] = Case(str(loop), bad=True)
    out["fs/symlink-loop-format"] = Case(str(loop), "scsilog", bad=True)
    dangling = d / "dangling.vcd"
    os.symlink(d / "nowhere", dangling)
    out["fs/dangling-symlink"] = Case(str(dangling), bad=True)
    out["fs/missing"] = Case(str(d / "missing.usbmon.txt"), bad=True)
    blkdir = d / "dirbase"
    blkdir.mkdir()
    (blkdir / "t.blktrace.0").mkdir()
    out["fs/blktrace-cpu-file-is-directory"] = Case(str(blkdir / "t"), bad=True)
    return out


def build(d: Path) -> dict[str, Case]:
    d = Path(d)
    out = {}
    for make in (text_cases, blktrace_cases, pcap_cases, usbpcap_cases, parquet_cases, logic_cases, fs_cases):
        sub = d / make.__name__
        sub.mkdir()
        out.update(make(sub))
    return out


# ---------------------------------------------------------------- logic-analyzer captures

def logic_cases(d: Path) -> dict[str, Case]:
    """sigrok .sr, DSView .dsl (zip containers) and Saleae CSV, written by tests/gen_logic.py
    from the ancot base's transitions at 10 MHz, then cut, flipped and emptied."""
    import gen_logic as gl
    from scsitrace.parsers import ancot
    tr = ancot.parse(str(FIX / "bus/one-target-l1/trace.ancot")).transitions()
    probes = [(n, n) for n in ("BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O")]
    names = [n for n, _ in probes]
    idx, words = gl.changes(tr, probes, 100)
    samples = gl.expand(idx, words, int(idx[-1]) + 1)
    out: dict[str, Case] = {}
    bases = {"sr": d / "base.sr", "dsl": d / "base.dsl", "csv": d / "base.csv"}
    gl.write_sr(bases["sr"], samples, names, 10_000_000)
    gl.write_dsl(bases["dsl"], samples, dict(enumerate(names)), 10_000_000)
    gl.write_saleae_csv(bases["csv"], idx * 100, words, names)
    fmts = {"sr": "sigrok", "dsl": "dsview", "csv": "saleae"}
    rng = random.Random(11)
    for kind, path in bases.items():
        raw = path.read_bytes()

        def put(case, payload, *, bad=True, fmt="auto"):
            p = d / f"{kind}-{case}.{kind}"
            p.write_bytes(payload)
            out[f"logic/{kind}-{case}"] = Case(str(p), fmt, None, bad, None)

        put("clean", raw, bad=False)
        put("cut-half", raw[:len(raw) // 2], fmt=fmts[kind])
        put("cut-end", raw[:-10], fmt=fmts[kind], bad=kind != "csv")
        put("empty", b"", fmt=fmts[kind])
        put("garbage", bytes(rng.randrange(256) for _ in range(4096)), fmt=fmts[kind])
        for k in range(2):
            b = bytearray(raw)
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            put(f"bitflip-{k}", bytes(b), bad=False, fmt=fmts[kind])
    return out
