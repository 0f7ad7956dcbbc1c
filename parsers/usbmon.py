"""usbmon captures: the text interface (`1u`, and the older `1t` without bus numbers) and
pcap/pcapng files of link type 189 (DLT_USB_LINUX, 48-byte header) or 220
(DLT_USB_LINUX_MMAPPED, 64-byte header), by two routes:

- native (default): the usbmon packet header is declared with construct below; its
  fields are read at positions derived from that declaration by compiled passes
  (parsers/_pcap_scan.py, parsers/_usbmon_scan.py) straight into the URB table
  (Arrow columns in the schema `scsitrace.usb.urbs.URBS`);
- pyshark (`route="pyshark"`): Wireshark's dissection, mapped to the same columns by
  `PYSHARK_FIELDS` (needs tshark).

Every route hands over one `urbs` frame (schema `scsitrace.usb.urbs.URBS`; a large capture
is read on first access, or as a stream by the analysis): one row per URB event (S submit, C complete, E error) with
the first `DATA_PREFIX` bytes of its data, which is all the mass-storage stage machine
reads (CBW, CSW, UAS IUs). Text captures show at most 32 data bytes, so text and pcap of
the same traffic give identical frames.
"""
from __future__ import annotations

import re
import shutil

import numpy as np
import polars as pl

from scsitrace import _lazy, schema
from scsitrace.errors import BadInput, TruncatedInput, UsageError
from scsitrace.model import Capture, LazyFrames, RecordCount
from scsitrace.streams import prefetched
from scsitrace.usb.urbs import DATA_PREFIX, URBS, from_start, no_urbs, with_column
from scsitrace._native import usb as _native_usb
from . import _lines, _pcap, _usbmon_scan

ID = "usbmon"
SUFFIXES = (".usbmon", ".usbmon.txt", ".usbmon.pcap", ".usbmon.pcapng", ".pcap", ".pcapng", ".mon")
LINKTYPE_USB_LINUX, LINKTYPE_USB_LINUX_MMAPPED = _usbmon_scan.LINKTYPE_USB_LINUX, _usbmon_scan.LINKTYPE_USB_LINUX_MMAPPED
LINKTYPES = (LINKTYPE_USB_LINUX, LINKTYPE_USB_LINUX_MMAPPED)
LINKTYPE_USBPCAP = 249          # Windows' USBPcap: parsers/_usbpcap.py, into the same URB table
EINPROGRESS = -115

# the packet header's construct declarations (HEADER: per link type) and the field offsets
# derived from them live in _usbmon_records, imported on first use (sniffing a file does not
# load construct); they read as attributes of this module too (usbmon.USBMON_PACKET...)
RECORD_NAMES = ["USBMON_PACKET", "USBMON_PACKET_MMAPPED", "HEADER", "FIELD_AT"]
__getattr__ = _lazy.from_module(__name__, f"{__package__}._usbmon_records", RECORD_NAMES)
ISO_DESCRIPTOR_BYTES = 16

# Wireshark field -> (our column, how to read tshark's JSON value): the pyshark route
def _int(v: str) -> int:
    return int(v, 0)


PYSHARK_FIELDS = {
    "usb.urb_id": ("urb_id", _int),
    "usb.urb_type": ("event", lambda v: v.strip("'")[:1]),   # 'S' / 'C' / 'E'
    "usb.transfer_type": ("xfer", _int),
    "usb.endpoint_address": ("ep", _int),
    "usb.device_address": ("dev", _int),
    "usb.bus_id": ("bus", _int),
    "usb.urb_status": ("status", _int),
    "usb.urb_len": ("length", _int),
    "usb.data_len": ("data_len", _int),
}
SETUP_PRESENT = "'\\0'"        # tshark shows the usbmon flag byte 0 (present) as '\0'
SETUP_OFFSET = 40               # the setup bytes inside the usbmon header (48 and 64 bytes)

# `1u` text line (1t: no bus number in the address); see usbmon.rst "Text data format".
# User-space usbmon tools write the same layout with the timestamp in decimal seconds
# (`1234.567890`) and `-` as a submission's status; both are read.
TEXT_RECORD = (
    r"^(?P<tag>[0-9a-fA-F]+) (?P<ts>\d+(?:\.\d+)?) (?P<ev>[SCE]) (?P<ty>[CZIB])(?P<dir>[io]):"
    r"(?:(?P<bus>\d+):)?(?P<dev>\d+):(?P<ep>\d+) "
    r"(?:s (?P<setup>[0-9a-fA-F]{2} [0-9a-fA-F]{2} [0-9a-fA-F]{4} [0-9a-fA-F]{4} [0-9a-fA-F]{4})"
    r"|(?P<status>-?\d+|-)(?::-?\d+)*(?: \d+(?: -?\d+:\d+:\d+)+)?) "
    r"(?P<len>\d+)(?: (?P<flag>\S)(?: (?P<words>[0-9a-fA-F]+(?: [0-9a-fA-F]+)*))?)?$"
)
XFER_OF_LETTER = {"Z": 0, "I": 1, "C": 2, "B": 3}
TEXT_STREAM_BLOCK = 8 << 20          # bytes of lines per batch of a text capture read as a stream
TEXT_TS_WRAP_US = 4096 * 1_000_000   # the text timestamp is (seconds % 4096) * 1e6 + us


def sniff(head: bytes) -> bool:
    kind = _pcap.sniff_container(head)
    if kind is not None:
        return kind[2] in LINKTYPES or kind[2] == LINKTYPE_USBPCAP
    # most of the first lines are records (one damaged line does not hide the format)
    lines = [ln.decode("ascii", "replace").rstrip("\r") for ln in head.split(b"\n")[:6] if ln.strip()][:5]
    if len(head) == 65536 or len(lines) > 1:    # the last line of a head may be cut
        lines = lines[:-1] or lines
    hits = sum(re.match(TEXT_RECORD, ln) is not None for ln in lines)
    return bool(lines) and hits * 2 > len(lines)


def parse(path, *, strict: bool = True, progress=None, route: str = "native", **_opts) -> Capture:
    path = str(path)
    with open(path, "rb") as fh:
        head = fh.read(4096)
    kind = _pcap.sniff_container(head)
    is_capture = kind is not None
    if route not in ("native", "pyshark"):
        raise UsageError(f"--route must be native or pyshark, got {route!r}")
    if route == "pyshark":
        if not is_capture:
            raise UsageError("--route pyshark reads pcap/pcapng captures only (this is usbmon text)")
        if kind[2] == LINKTYPE_USBPCAP:
            raise UsageError("--route pyshark reads usbmon captures only (this is a USBPcap capture: "
                             "use the default route)")
        return _parse_pyshark(path, strict)
    if is_capture and kind[2] == LINKTYPE_USBPCAP:
        return _parse_usbpcap(path, strict)
    if is_capture:
        return _parse_pcap(path, strict)
    return _parse_text(path, strict, progress)


# ---------------------------------------------------------------- common

def _capture(path: str, urbs: pl.DataFrame, records: RecordCount, anomalies: list[dict],
             meta: dict) -> Capture:
    origin = int(urbs["t_ns"].min()) if urbs.height else 0
    urbs = urbs.with_columns((pl.col("t_ns") - origin).alias("t_ns"))
    schema.validate(urbs, URBS, "urbs")
    return Capture(layer="usb", path=path, format=ID, meta={**meta, "origin_ns": origin},
                   records=records, frames={"urbs": urbs}, anomalies=_anomaly_frame(anomalies))


def _anomaly_frame(anomalies: list[dict]) -> pl.DataFrame:
    return schema.frame({k: [a[k] for a in anomalies] for k in schema.ANOMALIES}, schema.ANOMALIES) \
        if anomalies else schema.empty(schema.ANOMALIES)


# ---------------------------------------------------------------- pcap / pcapng (native)

STREAM_BYTES = 1 << 26     # captures from this size on are read as a stream by the analysis


def _parse_pcap(path: str, strict: bool, read_bytes: int = _usbmon_scan.READ_BYTES,
                stream_bytes: int = STREAM_BYTES) -> Capture:
    """A pcap or pcapng capture: `chunks()` yields its URB table batch by batch (times
    absolute, in file order); `frames["urbs"]` holds all of it (times from the first event).
    A capture of `stream_bytes` or more is only read when someone consumes it: by the
    analysis, as a stream (scsitrace/usb/streamed.py; bad records are then raised by the
    analysis that meets them), or by the first access to `frames`."""
    from . import _usbmon_records as rec
    buf, (container, le, _) = _pcap.mapped(path)
    meta = {"container": container, "linktypes": [], "route": "native", "position_unit": "byte offset"}
    records = RecordCount(read=0)
    anomalies: list[dict] = []
    if container == "pcap":
        hdr = _pcap.pcap_header(path, buf, le)
        size = len(buf)
        del buf                             # read in bounded blocks from here on
        header = rec.HEADER.get(hdr.network, rec.USBMON_PACKET_MMAPPED)

        def batches(whole=False):
            # read whole: room for the worst case (pages never written cost nothing), one batch
            records = max(0, size - hdr.start) // _usbmon_scan.PCAP_RECORD_HEADER + 1 if whole else None
            return _usbmon_scan.PcapBatches(path, hdr.start, hdr.network, not le, hdr.max_len, header.sizeof(),
                                            hdr.network == LINKTYPE_USB_LINUX_MMAPPED, rec.FIELD_AT,
                                            ISO_DESCRIPTOR_BYTES, DATA_PREFIX, read_bytes, records)
    else:
        size = len(buf)
        del buf

        def batches(whole=False):
            return _usbmon_scan.PcapngBatches(path, le, strict, {lt: h.sizeof() for lt, h in rec.HEADER.items()},
                                              LINKTYPE_USB_LINUX_MMAPPED, rec.FIELD_AT, ISO_DESCRIPTOR_BYTES,
                                              DATA_PREFIX, read_bytes)
    capture = Capture(layer="usb", path=path, format=ID, meta=meta, records=records,
                      anomalies=_anomaly_frame(anomalies))
    capture.chunks = lambda: _good_batches(path, batches(), strict, capture)
    if size >= stream_bytes:
        meta["streamable"] = True
        capture.frames = LazyFrames({"urbs": lambda: _whole(path, batches, strict, capture)})
        return capture
    capture.frames = {"urbs": _whole(path, batches, strict, capture)}
    return capture


def _whole(path: str, batches, strict: bool, capture: Capture) -> pl.DataFrame:
    """Every good record of the capture as one URB table (times from the first event)."""
    return _from_first_event(list(prefetched(_good_batches(path, batches(whole=True), strict, capture))), capture)


def _from_first_event(parts: list[pl.DataFrame], capture: Capture) -> pl.DataFrame:
    """The URB tables of a capture's batches as one, times from its first event (the
    capture's `origin_ns`)."""
    urbs = pl.concat(parts) if parts else no_urbs()
    origin = int(urbs["t_ns"].min()) if urbs.height else 0
    capture.meta["origin_ns"] = origin
    urbs = from_start(urbs, origin)
    schema.validate(urbs, URBS, "urbs")
    return urbs


def _good_batches(path: str, batches, strict: bool, capture: Capture):
    """The good records of each batch as an URB table (times absolute); the capture's
    records, anomalies and link types are filled in as they go (skips counted in the
    order the whole-file reader listed them: chain end, truncation, bad records)."""
    records, bad_count, bad_examples, linktypes = RecordCount(read=0), 0, [], set()
    short = 0
    for batch in batches:
        urbs, bad = batch.urbs, batch.bad
        linktype = batch.linktype if batch.linktype is not None else \
            np.broadcast_to(np.int64(batches.network), (urbs.height,))
        found = _linktypes(linktype)
        other = found - set(LINKTYPES)
        if other:
            raise BadInput(path, f"link type {sorted(other)[0]} is not usbmon (expected 189 or 220)",
                           offset=int(urbs["pos"][int(np.flatnonzero(~np.isin(linktype, LINKTYPES))[0])]))
        linktypes |= found
        skipped = RecordCount()
        good = _good_records(path, urbs, bad, linktype, sorted(found), strict, skipped)
        records.read += skipped.read
        bad_count += skipped.skipped
        bad_examples += skipped.examples[:5 - len(bad_examples)]
        short += batch.short        # the good records' (a bad one has no event), counted while decoding
        if good.height:
            yield good
    _note_captured_short(capture, short)
    chain_bad, truncated = _chain_end(path, batches, strict)
    for off, why in chain_bad:
        records.skip(1, [f"{path}: byte offset {off}: {why}"])
    if truncated is not None:           # a record, cut short: skipped (and counted) as well as flagged
        capture.anomalies = _anomaly_frame([{"t_ns": None, "kind": "TRUNCATED", "position": f"byte offset {truncated}",
                                             "detail": "capture ends inside a record"}])
        records.skip(1, [f"{path}: byte offset {truncated}: capture ends inside a record"])
    if bad_count:
        records.skip(bad_count, bad_examples)
    capture.meta["linktypes"] = sorted(linktypes)
    capture.records = records           # counted once the whole capture has been read


def _captured_short(urbs: pl.DataFrame) -> int:
    """URBs whose data was captured short (native/src/usb/urbs.rs `captured_short`)."""
    return _native_usb.captured_short(urbs) if urbs.height else 0


def _note_captured_short(capture: Capture, short: int) -> None:
    capture.meta["urbs_captured_short"] = short
    capture.notes[:] = [n for n in capture.notes if not n.endswith(SHORT_NOTE)]
    if short:
        capture.notes.append(f"{short} URBs {SHORT_NOTE}")


SHORT_NOTE = ("captured short (data bytes captured < the URB's length: the capture's snap length or usbmon's "
              "per-event limit): bytes and rates come from the URB lengths, not from the bytes captured")


def _chain_end(path: str, batches, strict: bool):
    if isinstance(batches, _usbmon_scan.PcapngBatches):
        return batches.bad, batches.truncated
    if batches.stop == _usbmon_scan.TOO_LONG:
        return _pcap.chain_end(path, strict, "too long", batches.stop_at, batches.too_long, batches.max_len)
    if batches.stop == _usbmon_scan.CUT:
        return _pcap.chain_end(path, strict, "cut", batches.stop_at)
    return [], None


def _linktypes(linktype: np.ndarray) -> set[int]:
    """The link types of the packets (each clipped to 0..65536); pcap files have one."""
    if not len(linktype):
        return set()
    if (linktype == linktype[0]).all():
        return {min(max(int(linktype[0]), 0), 1 << 16)}
    return set(np.flatnonzero(np.bincount(linktype.clip(0, 1 << 16))).tolist())


BAD_REASONS = {
    _usbmon_scan.SHORT: "record shorter than the {size}-byte usbmon header",
    _usbmon_scan.BAD_TYPE: "usbmon event type is not S, C or E",
    _usbmon_scan.BAD_XFER: "usbmon transfer type is not 0-3",
    _usbmon_scan.BAD_LEN_CAP: "usbmon len_cap runs past the captured record",
}


def _good_records(path: str, urbs: pl.DataFrame, bad: np.ndarray, linktype: np.ndarray, linktypes: list[int],
                  strict: bool, records: RecordCount) -> pl.DataFrame:
    """The records whose usbmon header passed the checks; bad ones raise BadInput
    (strict) or are skipped and counted, link type by link type."""
    if bad.any():
        from . import _usbmon_records as rec
        for lt in linktypes:
            first = np.flatnonzero((bad != 0) & (linktype == lt))
            if not len(first):
                continue
            offs = urbs["pos"].to_numpy()[first]
            why = [BAD_REASONS[bad[i]].format(size=rec.HEADER[lt].sizeof()) for i in first[:5]]
            if strict:
                raise BadInput(path, why[0], offset=int(offs[0]))
            records.skip(len(first), [f"{path}: byte offset {int(o)}: {w}" for o, w in zip(offs[:5], why)])
        urbs = urbs.filter(pl.Series(bad == 0))
    records.read += urbs.height
    return urbs


# ---------------------------------------------------------------- USBPcap (Windows)

def _parse_usbpcap(path: str, strict: bool) -> Capture:
    from . import _usbpcap
    urbs, records, anomalies, meta = _usbpcap.parse(path, strict)
    capture = _capture(path, urbs, records, anomalies, meta)
    skipped = meta["skipped_by_design"]
    capture.notes.append(
        f"USBPcap capture (Windows): URBs paired by IRP; {skipped['not transfers']} packets of URB functions that "
        f"move no data and {skipped['control stages']} later control-transfer stages read, skipped by design; "
        "USBPcap records no requested length for IN transfers (taken from their completions) and no actual "
        "length for OUT ones (taken from their submissions)")
    _note_captured_short(capture, _captured_short(capture.frames["urbs"]))
    return capture


# ---------------------------------------------------------------- text (1u / 1t)

def _parse_text(path: str, strict: bool, progress, block_bytes: int | None = None,
                stream_bytes: int = STREAM_BYTES) -> Capture:
    """A text capture: `chunks()` yields its URB table a block of lines at a time (times
    unwrapped, absolute, in file order); `frames["urbs"]` is all of them (times from the first
    event). A file of `stream_bytes` or more is only read when someone consumes it (the
    analysis, as a stream; bad lines are then raised by the analysis that meets them); the
    capture's records and `text_format` are filled in when the stream ends."""
    from . import _usbmon_text
    meta = {"container": "text", "text_format": "1u", "route": "native", "position_unit": "line"}
    capture = Capture(layer="usb", path=path, format=ID, meta=meta, records=RecordCount(),
                      anomalies=_anomaly_frame([]))

    def whole() -> pl.DataFrame:
        return _from_first_event(list(_text_blocks(path, strict, progress, block_bytes, capture)), capture)

    stream_block = block_bytes or TEXT_STREAM_BLOCK
    capture.chunks = lambda: _text_blocks(path, strict, progress, stream_block, capture)
    if _lines.file_size(path) >= stream_bytes:
        meta["streamable"] = True
        capture.frames = LazyFrames({"urbs": whole})
    else:
        capture.frames = {"urbs": whole()}
    return capture


def _text_blocks(path: str, strict: bool, progress, block_bytes: int | None, capture: Capture):
    """The URB tables of the blocks of lines (every data byte a line shows), times
    absolute: the text timestamp wraps every 4096 s, unwrapped across blocks. Lines are
    scanned in Rust (parsers/_usbmon_text.py); the lines it leaves are decoded by
    `_decode_text_block`. Once the last block is read, the capture's records and text format
    (1t: no line has a bus number; devices on bus 0) are filled in."""
    from . import _usbmon_text
    records = RecordCount()
    last, wraps, any_bus, any_urb = None, 0, False, False
    line_no = 1
    for view, _ in _lines.iter_byte_blocks(path, block_bytes=block_bytes or _lines.BLOCK_BYTES, progress=progress,
                                           views=True, strict=strict):
        urbs, newlines, block_bus, other = _usbmon_text.scan_block(view, line_no)
        line_no += newlines
        del view
        records.read += urbs.height
        if other:
            decoded = _decode_text_block(_lines.fallback_frame(other, path, strict), path, strict, records)
            block_bus = block_bus or not decoded["bus"].is_null().all()
            urbs = _usbmon_text.merged(urbs, decoded.with_columns(pl.col("bus").fill_null(0)))
        if not urbs.height:
            continue
        written = urbs["t_ns"].to_numpy()
        t_ns, wraps_now = _usbmon_text.unwrapped(written, last, wraps, TEXT_TS_WRAP_US * 1000)
        last, wraps = int(written[-1]), wraps_now
        any_bus, any_urb = any_bus or block_bus, True
        yield with_column(urbs, pl.Series("t_ns", t_ns))
    capture.records = records
    capture.meta["text_format"] = "1t" if any_urb and not any_bus else "1u"


def _decode_text_block(block: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    text = pl.col("text").str.strip_chars_end("\r\n ")
    lines = block.with_columns(text.alias("t")).filter(pl.col("t") != "")
    g = lines.select("line_no", "t", pl.col("t").str.extract_groups(TEXT_RECORD).alias("g")).unnest("g")
    words = pl.col("words").str.replace_all(" ", "")
    g = g.with_columns(
        pl.when(pl.col("tag").is_null()).then(pl.lit("not a usbmon text record"))
        .when((pl.col("flag") == "=") & (words.str.len_bytes() % 2 == 1))
        .then(pl.lit("odd number of hex digits in the data words"))
        .when(pl.col("ts").str.len_bytes() > 18).then(pl.lit("timestamp out of range"))
        .when(pl.col("ts").str.contains(".", literal=True) & _lines.seconds_ns(pl.col("ts")).is_null())
        .then(pl.lit("timestamp out of range"))
        .when(pl.col("tag").str.len_bytes() > 16).then(pl.lit("URB tag longer than 64 bits"))
        .when(_lines.checked_int(pl.col("bus").fill_null("0"), 0, 65535).is_null()).then(pl.lit("bus number out of range"))
        .when(_lines.checked_int(pl.col("dev"), 0, 127).is_null()).then(pl.lit("device address outside 0-127"))
        .when(_lines.checked_int(pl.col("ep"), 0, 15).is_null()).then(pl.lit("endpoint number outside 0-15"))
        .when((pl.col("status") == "-") & (pl.col("ev") != "S")).then(pl.lit("status '-' on a completion"))
        .when((pl.col("status") != "-") & _lines.checked_int(pl.col("status"), *_lines.I32).is_null())
        .then(pl.lit("status outside the 32-bit range"))
        .when(_lines.checked_int(pl.col("len"), *_lines.U32).is_null()).then(pl.lit("URB length outside 0..2^32-1"))
        .alias("reason"))
    bad = g.filter(pl.col("reason").is_not_null())
    if bad.height:
        first = bad.row(0, named=True)
        if strict:
            raise BadInput(path, first["reason"], line=first["line_no"], text=first["t"])
        records.skip(bad.height, [f"{path}:{r['line_no']}: {r['reason']}"
                                  for r in bad.head(5).iter_rows(named=True)])
    g = g.filter(pl.col("reason").is_null())
    records.read += g.height
    setup = pl.col("setup").str.split(" ")
    setup_hex = pl.concat_str(setup.list.get(0), setup.list.get(1),
                              *[pl.concat_str(setup.list.get(i).str.slice(2, 2), setup.list.get(i).str.slice(0, 2))
                                for i in (2, 3, 4)])
    data_hex = pl.when(pl.col("flag") == "=").then(words)
    out = g.select(
        pl.when(pl.col("ts").str.contains(".", literal=True)).then(_lines.seconds_ns(pl.col("ts")))
        .otherwise(pl.col("ts").cast(pl.Int64) * 1000).alias("t_ns"),
        _hex_u64(pl.col("tag")).alias("urb_id"),
        pl.col("ev").alias("event"),
        pl.col("ty").replace_strict(XFER_OF_LETTER, return_dtype=pl.UInt8).alias("xfer"),
        (pl.col("ep").cast(pl.Int64) | pl.when(pl.col("dir") == "i").then(0x80).otherwise(0)).alias("ep"),
        pl.col("bus").cast(pl.Int64).alias("bus"),
        pl.col("dev").cast(pl.Int64).alias("dev"),
        pl.when(pl.col("setup").is_not_null()).then(EINPROGRESS)
        .when(pl.col("status") == "-").then(EINPROGRESS)
        .otherwise(pl.col("status").cast(pl.Int64, strict=False)).alias("status"),
        pl.col("len").cast(pl.Int64, strict=False).alias("length"),
        setup_hex.str.decode("hex").alias("setup"),
        data_hex.str.decode("hex").alias("data"),
        (data_hex.str.len_bytes() // 2).fill_null(0).alias("data_len"),
        pl.col("line_no").alias("pos"),
    )
    return out.with_columns(pl.col(c).cast(t) for c, t in URBS.items())


def _hex_u64(tag: pl.Expr) -> pl.Expr:
    """Up to 16 hex digits as UInt64 (polars parses hex into Int64 only: do it in halves)."""
    padded = tag.str.zfill(16)
    half = [padded.str.slice(i, 8).str.to_integer(base=16, strict=False).cast(pl.UInt64) for i in (0, 8)]
    return half[0] * (1 << 32) + half[1]


# ---------------------------------------------------------------- pyshark route

def _parse_pyshark(path: str, strict: bool) -> Capture:
    if shutil.which("tshark") is None:
        raise UsageError("--route pyshark needs tshark (Wireshark) installed; it was not found on PATH")
    import pyshark
    rows = {col: [] for col in ("t_ns", *(c for c, _ in PYSHARK_FIELDS.values()), "setup", "data", "pos")}
    cap = pyshark.FileCapture(path, use_json=True, include_raw=True, keep_packets=False)
    try:
        for i, pkt in enumerate(cap):
            _pyshark_row(pkt, i + 1, rows)
    except Exception as exc:  # tshark reports damaged captures through pyshark as exceptions
        if strict:
            raise BadInput(path, f"tshark could not read the capture: {exc}") from None
    finally:
        cap.close()
    rows["data"] = [d[:DATA_PREFIX] if d is not None else None for d in rows["data"]]
    df = pl.DataFrame(rows, schema_overrides={"setup": pl.Binary, "data": pl.Binary}, strict=False) \
        .with_columns(pl.col(c).cast(t) for c, t in URBS.items()).select(list(URBS))
    return _capture(path, df, RecordCount(read=df.height), [],
                    {"container": "pcap", "route": "pyshark", "position_unit": "frame"})


def _pyshark_row(pkt, frame: int, rows: dict) -> None:
    """One packet's columns from Wireshark's usb layer; the data is the packet's last
    `usb.data_len` bytes (tshark's JSON shows dissected mass-storage data, not raw bytes)."""
    usb = pkt.usb
    raw = pkt.get_raw_packet()
    values = {}
    for name, (col, read) in PYSHARK_FIELDS.items():
        v = usb.get_field(name.split(".", 1)[1])
        values[col] = read(str(v)) if v is not None else None
        rows[col].append(values[col])
    if values["status"] is None:
        rows["status"][-1] = EINPROGRESS
    sec, _, frac = str(pkt.frame_info.time_epoch).partition(".")
    rows["t_ns"].append(int(sec) * 1_000_000_000 + int((frac + "000000000")[:9]))
    has_setup = str(usb.get_field("setup_flag")) == SETUP_PRESENT and values["event"] == "S"
    rows["setup"].append(raw[SETUP_OFFSET:SETUP_OFFSET + 8] if has_setup else None)
    n = values["data_len"] or 0
    rows["data"].append(raw[len(raw) - n:] if n > 0 else None)
    rows["pos"].append(frame)
