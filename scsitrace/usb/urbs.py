"""USB mass-storage URBs: the frame every usbmon route hands over (`URBS`), its numpy
columns (`UrbColumns`, what the analysis reads), and the protocol constants of Bulk-Only
Transport and UAS. Parsers import this module, never the analysis."""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import polars as pl

from .. import scsi
from .._native import usb as _usb
from ..schema import ARROW_FROM_ROWS, HEX_DIGITS, nullable

# The urbs frame every usbmon route hands over: one row per URB event.
URBS = {
    "t_ns": pl.Int64,      # from the capture's first event
    "urb_id": pl.UInt64,   # kernel URB address (tag in text): pairs S with C/E
    "event": pl.Utf8,      # S submit, C complete, E submission error
    "xfer": pl.UInt8,      # 0 isochronous, 1 interrupt, 2 control, 3 bulk
    "ep": pl.UInt8,        # endpoint number | 0x80 for IN
    "bus": pl.UInt16,      # 0 when unknown (1t text)
    "dev": pl.UInt8,
    "status": pl.Int32,    # -115 (EINPROGRESS) on submit
    "length": pl.Int64,    # submit: requested bytes; complete: actual bytes
    "setup": pl.Binary,    # control setup packet (submit), else null
    "data": pl.Binary,     # first bytes of the captured data, else null
    "data_len": pl.Int64,  # captured data bytes
    "pos": pl.Int64,       # source line (text) or record byte offset (pcap)
}
EVENT_LETTERS = {ord("S"): "S", ord("C"): "C", ord("E"): "E"}
EPIPE, EREMOTEIO, EINPROGRESS = -32, -121, -115
CBW_SIGNATURE, CSW_SIGNATURE = b"USBC", b"USBS"
UAS_COMMAND_IU, UAS_SENSE_IU, UAS_RESPONSE_IU = 0x01, 0x03, 0x04
UAS_READ_READY_IU, UAS_WRITE_READY_IU = 0x06, 0x07
CSW_STATUS = {0: "GOOD", 1: "CHECK CONDITION", 2: "PHASE ERROR"}
DATA_OUT_OPS = sorted(scsi.WRITE_OPS | {0x15, 0x55, 0x3B, 0x42, 0x04, 0x1D})
DATA_PREFIX = 32       # data bytes kept per URB: CBW (31), CSW (13), UAS IUs (32)


@dataclass
class UrbColumns:
    """The urbs table as numpy columns, what the analysis reads. The native pcap reader
    fills them directly; text and pyshark frames convert with `urb_columns`."""

    t_ns: np.ndarray         # int64
    urb_id: np.ndarray       # uint64
    event: np.ndarray        # uint8: ord("S"), ord("C"), ord("E"), 0 for anything else
    xfer: np.ndarray         # uint8
    ep: np.ndarray           # uint8
    bus: np.ndarray          # uint16
    dev: np.ndarray          # uint8
    status: np.ndarray       # int32
    status_null: np.ndarray  # bool
    length: np.ndarray       # int64 (0 where length_null)
    setup: np.ndarray        # (n, 8) uint8
    has_setup: np.ndarray    # bool
    data_buf: np.ndarray     # uint8: the first DATA_PREFIX bytes of each URB's data (or more)
    data_at: np.ndarray      # int64: where each URB's data starts in data_buf
    data_size: np.ndarray    # int64: data bytes kept (at most DATA_PREFIX), -1 for no data
    data_head: np.ndarray    # uint32: the first 4 data bytes, little-endian (valid where data_size >= 4)
    data_len: np.ndarray     # int64: captured data bytes
    pos: np.ndarray          # int64
    length_null: np.ndarray | None = None   # bool: length unknown (None: every length known)

    def __post_init__(self):
        if self.length_null is None:
            self.length_null = np.zeros(len(self.t_ns), np.bool_)

    def __len__(self) -> int:
        return len(self.t_ns)

    def take(self, keep: np.ndarray) -> "UrbColumns":
        """The URBs where `keep` (a boolean mask) is true."""
        return UrbColumns(**{f.name: (getattr(self, f.name) if f.name == "data_buf" else getattr(self, f.name)[keep])
                             for f in fields(self)})

    def data_rows(self, rows: np.ndarray, width: int = DATA_PREFIX) -> np.ndarray:
        """(len(rows), width) first data bytes of those URBs, zero-padded (row -1: none)."""
        counts = np.where(rows >= 0, np.clip(self.data_size[rows], 0, width), 0)
        return take_bytes(self.data_buf, self.data_at[rows], counts, width)


def concat_urbs(parts: list[UrbColumns]) -> UrbColumns:
    """The URB columns of consecutive batches as one (each batch's kept data bytes packed
    after the previous one's, unless they share one data buffer)."""
    if len(parts) == 1:
        return parts[0]
    cols = {f.name: np.concatenate([getattr(u, f.name) for u in parts])
            for f in fields(UrbColumns) if f.name not in ("data_buf", "data_at")}
    if all(u.data_buf is parts[0].data_buf for u in parts):
        return UrbColumns(**cols, data_buf=parts[0].data_buf, data_at=np.concatenate([u.data_at for u in parts]))
    bufs, shifted, used = [], [], 0
    for u in parts:
        end = int((u.data_at + np.maximum(u.data_size, 0)).max()) if len(u) else 0
        bufs.append(u.data_buf[:end])
        shifted.append(u.data_at + used)
        used += end
    return UrbColumns(**cols, data_buf=np.concatenate(bufs), data_at=np.concatenate(shifted))


def binary_column(matrix: np.ndarray, lengths: np.ndarray, present: np.ndarray) -> pl.Series:
    """Binary series of each row's first `lengths` bytes of `matrix` (null where not present)."""
    lengths = np.where(present, np.clip(lengths, 0, matrix.shape[1]), 0).astype(np.int64)
    if len(lengths) < ARROW_FROM_ROWS:
        return _binary_by_hex(matrix, lengths, present)
    import pyarrow as pa
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    values = matrix[keep]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    validity = pa.array(present).buffers()[1] if not present.all() else None
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lengths),
                                           [validity, pa.py_buffer(offsets), pa.py_buffer(values.tobytes())],
                                           null_count=int((~present).sum()))
    return pl.from_arrow(arr).cast(pl.Binary)


def _binary_by_hex(matrix: np.ndarray, lengths: np.ndarray, present: np.ndarray) -> pl.Series:
    """binary_column through hex text (no pyarrow; for few rows)."""
    n, width = matrix.shape
    if not n or not width:
        return pl.Series([b"" if p else None for p in present], dtype=pl.Binary)
    hexed = HEX_DIGITS[np.stack([matrix >> 4, matrix & 15], axis=-1)].reshape(n, 2 * width)
    text = pl.Series(hexed.view(f"S{2 * width}").ravel()).cast(pl.Utf8)
    return pl.select(pl.when(pl.lit(pl.Series(present))).then(
        pl.lit(text).str.slice(0, pl.lit(pl.Series(2 * lengths))).str.decode("hex"))).to_series()


def urb_columns(urbs: pl.DataFrame) -> UrbColumns:
    """Numpy columns of an urbs frame (schema URBS)."""
    event = np.zeros(urbs.height, np.uint8)
    for letter in "SCE":
        event[(urbs["event"] == letter).fill_null(False).to_numpy()] = ord(letter)
    setup, setup_size = scsi.binary_matrix(urbs["setup"], 8)
    data, data_size = scsi.binary_matrix(urbs["data"], DATA_PREFIX)

    def ints(name, dtype, null=0):
        return urbs[name].fill_null(null).to_numpy().astype(dtype)

    return UrbColumns(
        t_ns=ints("t_ns", np.int64), urb_id=ints("urb_id", np.uint64), event=event,
        xfer=ints("xfer", np.uint8), ep=ints("ep", np.uint8), bus=ints("bus", np.uint16),
        dev=ints("dev", np.uint8), status=ints("status", np.int32),
        status_null=urbs["status"].is_null().to_numpy(), length=ints("length", np.int64),
        length_null=urbs["length"].is_null().to_numpy(),
        setup=setup, has_setup=setup_size >= 0, data_buf=data.reshape(-1),
        data_at=np.arange(urbs.height, dtype=np.int64) * DATA_PREFIX, data_size=np.minimum(data_size, DATA_PREFIX),
        data_head=np.ascontiguousarray(data[:, :4]).view("<u4").reshape(-1),
        data_len=ints("data_len", np.int64), pos=ints("pos", np.int64))


def urbs_frame(u: UrbColumns) -> pl.DataFrame:
    """The urbs frame (schema URBS) of numpy columns."""
    frame = pl.DataFrame({
        "t_ns": u.t_ns,
        "urb_id": u.urb_id,
        "event": pl.Series(u.event).replace_strict(EVENT_LETTERS, default=None, return_dtype=pl.Utf8),
        "xfer": u.xfer,
        "ep": u.ep,
        "bus": u.bus,
        "dev": u.dev,
        "status": nullable(u.status, u.status_null),
        "length": nullable(u.length, u.length_null),
        "setup": binary_column(u.setup, np.full(len(u), 8), u.has_setup),
        "data": binary_column(u.data_rows(np.arange(len(u))), u.data_size, u.data_size >= 0),
        "data_len": u.data_len,
        "pos": u.pos,
    })
    return frame.with_columns(pl.col(c).cast(t) for c, t in URBS.items())


def _u8(col: str, i: int) -> pl.Expr:
    c = pl.col(col)
    return pl.when(c.bin.size() > i).then(c.bin.slice(i, 1).bin.reinterpret(dtype=pl.UInt8)).cast(pl.Int64)


def _le32(col: str, i: int) -> pl.Expr:
    c = pl.col(col)
    return pl.when(c.bin.size() >= i + 4).then(
        c.bin.slice(i, 4).bin.reinterpret(dtype=pl.UInt32, endianness="little")).cast(pl.Int64)


def _be16(col: str, i: int) -> pl.Expr:
    return _u8(col, i) * 256 + _u8(col, i + 1)


def _anomalies(rows: pl.DataFrame, t_col: str, kind: str, detail: pl.Expr) -> pl.DataFrame:
    """One anomaly row per row of `rows` (every one: nothing is dropped)."""
    return rows.select(pl.col(t_col).cast(pl.Int64).alias("t_ns"), pl.lit(kind).alias("kind"),
                       detail.alias("detail"), pl.col("pos").cast(pl.Utf8).alias("position"))


def take_bytes(buf, at, counts, width):
    """(len(at), width) bytes: the first `counts[i]` (at most `width`) bytes from each
    position, zero after them."""
    out = _usb.take_bytes(buf, np.ascontiguousarray(at, np.int64), np.ascontiguousarray(counts, np.int64), int(width))
    return out.reshape(len(at), width)
