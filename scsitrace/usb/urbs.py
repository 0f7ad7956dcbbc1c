"""USB mass-storage URBs: the URB table every usbmon route hands over and the analysis reads
(`URBS`, declared once: the compiled readers build it and the compiled machines read it in
this schema, native/src/usb/urbs.rs), and the protocol constants of Bulk-Only Transport and
UAS. Parsers import this module, never the analysis."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import scsi
from ..schema import ARROW_FROM_ROWS, HEX_DIGITS

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
    "data": pl.Binary,     # the captured data's first bytes (at least DATA_PREFIX when captured), else null
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
DATA_PREFIX = 32       # data bytes the analysis reads per URB (CBW 31, CSW 13, UAS IUs 32): native/src/usb/urbs.rs


def urb_table(columns) -> pl.DataFrame:
    """The URB table a compiled reader hands over (`Columns` in the schema URBS, see
    native/src/usb/urbs.rs), as a frame (no copy)."""
    return pl.DataFrame(columns)


def no_urbs() -> pl.DataFrame:
    """An URB table without rows."""
    return pl.DataFrame(schema=URBS)


def from_start(urbs: pl.DataFrame, origin: int) -> pl.DataFrame:
    """The URBs with times from `origin`."""
    return with_column(urbs, urbs["t_ns"] - origin)


def with_column(urbs: pl.DataFrame, column: pl.Series) -> pl.DataFrame:
    """The URB table with `column` in place of its namesake (eager: no query per batch)."""
    urbs = urbs.clone()
    urbs.replace_column(urbs.get_column_index(column.name), column)
    return urbs


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
