"""USBPcap captures (Windows; pcap and pcapng of link type 249, LINKTYPE_USBPCAP) read into
the usbmon URB table (schema `scsitrace.usb.URBS`), so the Bulk-Only and UAS decoding, the
pairing and every table are the usbmon layer's own. parsers/usbmon.py hands such files here.

The packet header (USBPcap's capture format, USBPcapBuffer.h: `USBPCAP_BUFFER_PACKET_HEADER`,
27 bytes, little-endian, packed; control transfers add a stage byte) is declared once with
construct below and bulk-decoded through a numpy dtype derived from it. One IRP is logged as
it goes down to the bus driver (`info` bit 0 clear: a submit, "S") and as it comes back (set:
a completion, "C"), matched by `irpId` as usbmon's URB id:

- bulk and interrupt: one packet each way; OUT data rides on the submit, IN data on the
  completion. USBPcap records no requested length for IN transfers and no actual length for
  OUT ones: an IN submit's length is taken from its completion, an OUT completion's from its
  submit (0 when it failed);
- control: the setup stage (stage 0) is the submit, with its 8 setup bytes; the first
  packet coming back (the IN data stage, else the status stage) is the completion; the
  other stages of the same IRP (an OUT data stage, the status stage after IN data) are read
  and skipped by design, counted;
- `USBPCAP_TRANSFER_IRP_INFO` and `USBPCAP_TRANSFER_UNKNOWN` packets (URB functions that
  move no data) are read and skipped by design, counted;
- status: USBD_STATUS as the errno usbmon would show: 0, STALL_PID and ENDPOINT_HALTED
  -EPIPE (-32), CANCELED -ENOENT (-2), DEVICE_GONE -ENODEV (-19), any other error -EPROTO
  (-71); a submit is -EINPROGRESS.

Isochronous packets are kept as URBs of transfer type 0 (their per-packet headers are not
decoded). A packet cut by the capture's snap length keeps the data it holds.
"""
from __future__ import annotations

import construct as cs
import numpy as np
import polars as pl

from scsitrace.errors import BadInput
from scsitrace.model import RecordCount
from scsitrace.usb.urbs import DATA_PREFIX, URBS, binary_column
from . import _pcap

LINKTYPE_USBPCAP = 249

# USBPcapBuffer.h, #pragma pack(1)
USBPCAP_PACKET = cs.Struct(
    "header_len" / cs.Int16ul,     # this header's length, transfer-specific fields included
    "irp_id" / cs.Int64ul,         # the IRP's address: pairs the request with its return
    "status" / cs.Int32ul,         # USBD_STATUS, valid on the return from the host controller
    "function" / cs.Int16ul,       # URB function
    "info" / cs.Int8ul,            # bit 0 USBPCAP_INFO_PDO_TO_FDO: 1 on the way back
    "bus" / cs.Int16ul,            # root hub number
    "device" / cs.Int16ul,         # device address
    "endpoint" / cs.Int8ul,        # endpoint number, 0x80 = IN
    "transfer" / cs.Int8ul,        # 0 isochronous, 1 interrupt, 2 control, 3 bulk; 0xFE, 0xFF
    "data_length" / cs.Int32ul,    # data bytes after the header
)
USBPCAP_CONTROL = cs.Struct(*USBPCAP_PACKET.subcons, "stage" / cs.Int8ul)   # 0 setup 1 data 2 status 3 complete
CONTROL_DTYPE = _pcap.dtype_of(USBPCAP_CONTROL)
BASE_BYTES = USBPCAP_PACKET.sizeof()
CONTROL, STAGE_SETUP, NOT_TRANSFERS = 2, 0, (0xFE, 0xFF)
EINPROGRESS = -115
USBD_ERRNO = {0x00000000: 0, 0xC0000004: -32, 0xC0000030: -32, 0xC0010000: -2, 0xC0007000: -19}
EPROTO = -71


def parse(path: str, strict: bool):
    """(urbs frame with absolute times, records, anomalies, meta) of a USBPcap capture."""
    pk = _pcap.read(path, strict=strict)
    records = RecordCount(read=0)
    anomalies = []
    for off, why in pk.bad:
        records.skip(1, [f"{path}: byte offset {off}: {why}"])
    if pk.truncated_at is not None:
        records.skip(1, [f"{path}: byte offset {pk.truncated_at}: capture ends inside a record"])
        anomalies.append({"t_ns": None, "kind": "TRUNCATED", "position": f"byte offset {pk.truncated_at}",
                          "detail": "capture ends inside a record"})
    t_ns = pk.times()
    other = np.flatnonzero(pk.linktype != LINKTYPE_USBPCAP)
    if len(other):
        raise BadInput(path, f"link type {int(pk.linktype[other[0]])} mixed with USBPcap (249) in one capture",
                       offset=int(pk.record_offset[other[0]]))
    h = _pcap.gather(pk.buf, pk.data_offset, CONTROL_DTYPE)
    caplen, origlen = pk.caplen.astype(np.int64), pk.origlen.astype(np.int64)
    why = _bad(h, caplen, origlen)
    bad = np.flatnonzero(why >= 0)
    if len(bad):
        reasons = [BAD_REASONS[int(why[i])] for i in bad[:5]]
        if strict:
            raise BadInput(path, reasons[0], offset=int(pk.record_offset[bad[0]]))
        records.skip(len(bad), [f"{path}: byte offset {int(pk.record_offset[i])}: {r}" for i, r in zip(bad[:5], reasons)])
    good = why < 0
    records.read = int(good.sum())
    urbs, by_design = _urbs(pk, h, good, t_ns, caplen)
    meta = {"container": pk.format, "linktypes": [LINKTYPE_USBPCAP], "route": "native", "position_unit": "byte offset",
            "capture": "USBPcap", "skipped_by_design": by_design}
    return urbs, records, anomalies, meta


BAD_REASONS = ["record shorter than the 27-byte USBPcap header", "USBPcap headerLen outside 27..the bytes captured",
               "USBPcap control packet without its stage byte", "USBPcap transfer type is not 0-3, 0xFE or 0xFF",
               "USBPcap dataLength runs past the packet", "USBPcap device address outside 0-127"]


def _bad(h: np.ndarray, caplen: np.ndarray, origlen: np.ndarray) -> np.ndarray:
    """Per packet, the first failed check (an index into BAD_REASONS), or -1."""
    hlen = h["header_len"].astype(np.int64)
    xfer = h["transfer"]
    checks = [caplen < BASE_BYTES, (hlen < BASE_BYTES) | (hlen > caplen),
              (xfer == CONTROL) & (hlen < BASE_BYTES + 1), (xfer > 3) & ~np.isin(xfer, NOT_TRANSFERS),
              hlen + h["data_length"].astype(np.int64) > np.maximum(origlen, caplen), h["device"] > 127]
    why = np.full(len(h), -1, np.int64)
    for k in reversed(range(len(checks))):
        why[checks[k]] = k
    return why


def _urbs(pk, h: np.ndarray, good: np.ndarray, t_ns: np.ndarray, caplen: np.ndarray):
    """The URB rows (file order) of the good packets; what was skipped by design."""
    back = (h["info"] & 1) == 1
    xfer = h["transfer"]
    control = xfer == CONTROL
    transfer = good & ~np.isin(xfer, NOT_TRANSFERS)
    # control: the setup stage is the submit; the first packet back is the completion (a
    # packet back right after another of its IRP is a later stage)
    irp = h["irp_id"]
    cp = np.flatnonzero(transfer & control)
    cp = cp[np.lexsort((cp, irp[cp]))]               # control packets by IRP, then file order
    later_stage = np.zeros(len(h), bool)
    if len(cp) > 1:
        later_stage[cp[1:]] = back[cp[1:]] & back[cp[:-1]] & (irp[cp[1:]] == irp[cp[:-1]])
    first_back = ~later_stage
    keep = transfer & np.where(control, np.where(back, first_back, h["stage"] == STAGE_SETUP), True)
    by_design = {"not transfers": int((good & np.isin(xfer, NOT_TRANSFERS)).sum()),
                 "control stages": int((transfer & ~keep).sum())}
    idx = np.flatnonzero(keep)
    hk = h[idx]
    hlen = hk["header_len"].astype(np.int64)
    dlen = hk["data_length"].astype(np.int64)
    captured = np.minimum(dlen, caplen[idx] - hlen)
    data_at = pk.data_offset[idx] + hlen
    is_back = back[idx]
    is_ctrl = control[idx]
    setup_row = is_ctrl & ~is_back
    has_data = ~setup_row & (captured > 0)
    raw = _pcap.gather_bytes(pk.buf, data_at, DATA_PREFIX)
    status = np.full(len(idx), EPROTO, np.int64)
    for code, errno in USBD_ERRNO.items():
        status[hk["status"] == code] = errno
    status[~is_back] = EINPROGRESS
    setup_len = raw[:, 6].astype(np.int64) | (raw[:, 7].astype(np.int64) << 8)
    frame = pl.DataFrame({
        "t_ns": t_ns[idx], "urb_id": hk["irp_id"], "event": np.where(is_back, "C", "S"),
        "xfer": xfer[idx], "ep": hk["endpoint"], "bus": hk["bus"].astype(np.int64), "dev": hk["device"].astype(np.int64),
        "status": status, "_len": np.where(setup_row, setup_len, dlen), "_in": (hk["endpoint"] & 0x80) != 0,
        "_ok": status == 0,
        "setup": binary_column(raw[:, :8], np.full(len(idx), 8), setup_row),
        "data": binary_column(raw, np.minimum(captured, DATA_PREFIX), has_data),
        "data_len": np.where(has_data, captured, 0), "pos": pk.record_offset[idx]})
    return _lengths(frame), by_design


def _lengths(frame: pl.DataFrame) -> pl.DataFrame:
    """usbmon's lengths: a submit's the requested (OUT: its data; IN: taken from its
    completion; control: the setup's wLength), a completion's the actual (IN: its data; OUT:
    its submit's when it succeeded, else 0)."""
    s = pl.col("event") == "S"
    after, before = pl.col("_len").shift(-1).over("urb_id"), pl.col("_len").shift(1).over("urb_id")
    f = frame.with_row_index("_i")
    length = (pl.when(s & pl.col("_in") & (pl.col("xfer") != CONTROL)).then(after)
              .when(s | pl.col("_in")).then(pl.col("_len"))
              .when(pl.col("_ok")).then(before)
              .otherwise(0))
    f = f.sort("urb_id", "_i").with_columns(length.alias("length")).sort("_i")
    return f.select([pl.col(c).cast(t) for c, t in URBS.items()])
