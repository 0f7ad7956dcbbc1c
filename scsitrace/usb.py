"""USB mass storage layer: URB events -> SCSI commands with their transport stages.

Bulk-Only Transport (BOT): CBW -> data -> CSW, one command at a time per device, so a
command is every bulk transfer of its device from its CBW up to the next CBW; its CSW
must carry the CBW's tag. UAS: a command IU, data on the data pipes, a sense or response
IU with the same tag, possibly several commands in flight.

Times per command (all from URB submit S and complete C events, as usbmon stamps them):
  COMMAND  CBW (command IU) submit -> its completion
  DATA     first data submit (not before the command completed) -> last data completion
  STATUS   CSW (status IU) submit, not before the data ended -> its completion
  GAP      host/device turnaround between those stages
  response CBW submit -> CSW completion: what `tshark -z scsi,srt` measures
Per device these pieces, plus IDLE, tile the trace (overlapping UAS commands: each
instant goes to the earliest command still in progress).

Everything per URB works on numpy columns (`UrbColumns`) with compiled passes
(scsitrace/usbscan.py); polars frames start at one row per command.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import polars as pl
import pyarrow as pa

from . import schema, scsi, srt, usbscan
from ._keys import dense_ids
from . import completeness
from .model import Analysis, Capture

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
STAGES = ("COMMAND", "DATA IN", "DATA OUT", "STATUS", "GAP", "IDLE")
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
    length: np.ndarray       # int64, srt.NULL where unknown
    setup: np.ndarray        # (n, 8) uint8
    has_setup: np.ndarray    # bool
    data_buf: np.ndarray     # uint8: the first DATA_PREFIX bytes of each URB's data (or more)
    data_at: np.ndarray      # int64: where each URB's data starts in data_buf
    data_size: np.ndarray    # int64: data bytes kept (at most DATA_PREFIX), -1 for no data
    data_head: np.ndarray    # uint32: the first 4 data bytes, little-endian (valid where data_size >= 4)
    data_len: np.ndarray     # int64: captured data bytes
    pos: np.ndarray          # int64

    def __len__(self) -> int:
        return len(self.t_ns)

    def take(self, keep: np.ndarray) -> "UrbColumns":
        """The URBs where `keep` (a boolean mask) is true."""
        return UrbColumns(**{f.name: (getattr(self, f.name) if f.name == "data_buf" else getattr(self, f.name)[keep])
                             for f in fields(self)})

    def data_rows(self, rows: np.ndarray, width: int = DATA_PREFIX) -> np.ndarray:
        """(len(rows), width) first data bytes of those URBs, zero-padded (row -1: none)."""
        counts = np.where(rows >= 0, np.clip(self.data_size[rows], 0, width), 0)
        return usbscan.take_bytes(self.data_buf, self.data_at[rows], counts, width)


def binary_column(matrix: np.ndarray, lengths: np.ndarray, present: np.ndarray) -> pl.Series:
    """Binary series of each row's first `lengths` bytes of `matrix` (null where not present)."""
    lengths = np.where(present, np.clip(lengths, 0, matrix.shape[1]), 0).astype(np.int64)
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    values = matrix[keep]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    validity = pa.array(present).buffers()[1] if not present.all() else None
    arr = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lengths),
                                           [validity, pa.py_buffer(offsets), pa.py_buffer(values.tobytes())],
                                           null_count=int((~present).sum()))
    return pl.from_arrow(arr).cast(pl.Binary)


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
        status_null=urbs["status"].is_null().to_numpy(), length=ints("length", np.int64, srt.NULL),
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
        "status": srt.nullable(u.status, u.status_null),
        "length": srt.nullable(u.length),
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


# ---------------------------------------------------------------- URBs -> transfers

@dataclass
class Transfers:
    """One row per URB, in time order (submit time, else completion time; then row):
    submit and completion paired by URB id (ids are reused after completion, so a submit
    pairs with the next event of its id when that is a completion). Completions whose
    submit is not in the capture are transfers of their own, without submit time.
    Times, lengths: srt.NULL where unknown."""

    urbs: UrbColumns
    s_row: np.ndarray        # submit event row, -1 if none
    c_row: np.ndarray        # completion event row, -1 if none
    row: np.ndarray          # the row naming the transfer: submit, else completion
    data_row: np.ndarray     # the row whose data the transfer moved (IN: completion), -1 if none
    submit_ns: np.ndarray
    complete_ns: np.ndarray
    status: np.ndarray
    status_null: np.ndarray
    req_len: np.ndarray
    actual: np.ndarray
    dir_in: np.ndarray
    xfer: np.ndarray
    bus_dev: np.ndarray      # (bus << 8) | device address

    def frame(self, idx: np.ndarray) -> pl.DataFrame:
        """The transfers at positions `idx` as a frame (for the rare rows that need one)."""
        u, row = self.urbs, self.row[idx]
        c_row, data_row = self.c_row[idx], self.data_row[idx]
        submit, complete = self.submit_ns[idx], self.complete_ns[idx]
        present = (data_row >= 0) & (u.data_size[data_row] >= 0)
        return pl.DataFrame({
            "bus": u.bus[row], "dev": u.dev[row], "ep": u.ep[row], "xfer": u.xfer[row],
            "urb_id": u.urb_id[row],
            "setup": binary_column(u.setup[row], np.full(len(row), 8), u.has_setup[row]),
            "pos": u.pos[row], "i": row, "submit_ns": srt.nullable(submit), "complete_ns": srt.nullable(complete),
            "status": srt.nullable(self.status[idx], self.status_null[idx]), "req_len": srt.nullable(self.req_len[idx]),
            "actual": srt.nullable(self.actual[idx]),
            "submit_error": (c_row >= 0) & (u.event[c_row] == usbscan.EV_E),
            "data": binary_column(u.data_rows(data_row), u.data_size[data_row], present),
            "dir_in": self.dir_in[idx],
            "t0": np.where(submit != srt.NULL, submit, complete),
        })


def transfers(u: UrbColumns) -> Transfers:
    s_row, c_row = usbscan.pair_urbs(u.urb_id, u.event)
    columns = (u.t_ns, u.status, u.status_null, u.length, u.ep, u.xfer, u.bus, u.dev)
    cols, in_order = usbscan.transfer_columns(s_row, c_row, *columns)
    if not in_order:
        # transfers come in row order: sort by time (submit, else completion), then row
        row, submit, complete = cols[0], cols[2], cols[3]
        order = np.lexsort((row, np.where(submit != srt.NULL, submit, complete)))
        s_row, c_row = s_row[order], c_row[order]
        cols, _ = usbscan.transfer_columns(s_row, c_row, *columns)
    row, data_row, submit, complete, status, status_null, req_len, actual, dir_in, xfer, bus_dev = cols
    return Transfers(urbs=u, s_row=s_row, c_row=c_row, row=row, data_row=data_row, submit_ns=submit,
                     complete_ns=complete, status=status, status_null=status_null, req_len=req_len,
                     actual=actual, dir_in=dir_in, xfer=xfer, bus_dev=bus_dev)


def _cdb_fields(decoded: dict) -> list[pl.Series]:
    """The decoded CDB columns a command row carries (scsi.decode_cdbs)."""
    return [decoded[k] for k in ("opcode", "command", "lba", "blocks")]


# ---------------------------------------------------------------- BOT

def bot_commands(xf: Transfers) -> tuple[pl.DataFrame, list[pl.DataFrame], np.ndarray]:
    """Commands of Bulk-Only devices (devices that sent a CBW: the bulk transfers of other
    devices are returned, as positions, for UAS), and their anomalies."""
    u = xf.urbs
    device, first_rows = dense_ids(xf.bus_dev)
    a, cbw, csw, csw_size, kind = usbscan.bot_pass(
        xf.xfer, xf.dir_in, device, xf.data_row, xf.submit_ns, xf.complete_ns, xf.status, xf.status_null,
        xf.req_len, xf.actual, u.data_buf, u.data_at, u.data_size, u.data_head, len(first_rows))
    not_bot = np.flatnonzero(kind == usbscan.NOT_BOT)
    if not len(a["first"]):
        return pl.DataFrame(), [], not_bot
    first = a["first"]
    row = xf.row[first]
    f = usbscan.bot_fields(cbw, csw, csw_size, a["n_csw"], a["last"], a["sts_c"])
    cmds = pl.DataFrame({
        "bus": u.bus[row], "dev": u.dev[row], "pos": u.pos[row],
        "cmd_s": srt.nullable(xf.submit_ns[first]), "cmd_c": srt.nullable(xf.complete_ns[first]),
        "sts_s": srt.nullable(a["sts_s"]), "sts_c": srt.nullable(a["sts_c"]),
        "data_s": srt.nullable(a["data_s"]), "data_c": srt.nullable(a["data_c"]),
        "stalls": a["stalls"], "data_bytes": a["data_bytes"],
        "data_in": srt.nullable(a["data_in"] == 1, a["data_in"] < 0),
        "usb_tag": f["usb_tag"], "bytes": f["bytes"], "flag_in": f["flag_in"], "lun": f["lun"],
        "csw_tag": srt.nullable(f["csw_tag"], csw_size < 8), "residue": srt.nullable(f["residue"], csw_size < 12),
        "csw_status": srt.nullable(f["csw_status"], csw_size <= 12),
        "n_csw": a["n_csw"], "last": a["last"],
        "reason": pl.Series(BOT_REASONS, dtype=pl.Utf8).gather(f["reason"]),
        "status": _csw_status_names(f["csw_status"], csw_size),
    }).with_columns(pl.lit("BOT").alias("transport"),
                    *_cdb_fields(scsi.decode_cdb_matrix(cbw[:, 15:31], np.clip(f["cb_len"], 0, 16))))
    orphan_csw = xf.frame(np.flatnonzero(kind == usbscan.BEFORE_CBW_CSW))
    if orphan_csw.height:
        orphans = orphan_csw.select(
            "bus", "dev", "pos", pl.lit(None, dtype=pl.Int64).alias("cmd_s"),
            pl.col("complete_ns").alias("sts_c"), pl.col("submit_ns").alias("sts_s"),
            _le32("data", 4).alias("usb_tag"), _le32("data", 8).alias("residue"),
            pl.lit("CSW without CBW (capture started mid-command)").alias("reason"),
            pl.lit("BOT").alias("transport"),
            _u8("data", 12).replace_strict(CSW_STATUS, default=None, return_dtype=pl.Utf8).alias("status"))
        cmds = pl.concat([cmds, orphans], how="diagonal_relaxed")
    before = xf.frame(np.flatnonzero(kind == usbscan.BEFORE_CBW_DATA))
    anomalies = [
        _anomalies(before, "t0", "DATA WITHOUT CBW",
                   pl.format("bulk transfer on {}:{} ep {} before any CBW", "bus", "dev", "ep")),
        _anomalies(cmds.filter(pl.col("stalls") > 0), "cmd_s", "STALL", pl.format(
            "{} endpoint stall(s) during the command with tag {} on {}:{}", "stalls", "usb_tag", "bus", "dev")),
        _anomalies(cmds.filter(pl.col("status") == "PHASE ERROR"), "sts_c", "PHASE ERROR",
                   pl.format("CSW phase error, tag {}", "usb_tag")),
    ]
    return cmds, anomalies, not_bot


# why a Bulk-Only command is unpaired, by usbscan.bot_fields' `reason` code (PAIRED: null)
BOT_REASONS = ["no CSW (capture ended)", "no CSW before the next CBW", "CSW tag does not match the CBW", None]


def _csw_status_names(status: np.ndarray, csw_size: np.ndarray) -> pl.Series:
    """Each command's CSW status by name (CSW_STATUS, else "CSW status N"; null without one)."""
    names = [CSW_STATUS.get(v, f"CSW status {v}") for v in range(256)] + [None]
    code = np.where(csw_size <= 12, len(names) - 1, status)
    return pl.Series("status", names, dtype=pl.Utf8).gather(code)


# ---------------------------------------------------------------- UAS

def uas_commands(bulk: pl.DataFrame) -> tuple[pl.DataFrame, list[dict]]:
    """Commands of UAS devices: command IU paired with the next sense/response IU of its tag."""
    anomalies = []
    iu = _u8("data", 0)
    t = bulk.with_columns(
        (~pl.col("dir_in") & (iu == UAS_COMMAND_IU).fill_null(False)
         & (pl.col("data").bin.size() >= 16).fill_null(False)).alias("is_cmd"),
        (pl.col("dir_in") & iu.is_in([UAS_SENSE_IU, UAS_RESPONSE_IU]).fill_null(False)
         & (pl.col("actual") >= 8).fill_null(False)).alias("is_sts"),
        (pl.col("dir_in") & iu.is_in([UAS_READ_READY_IU, UAS_WRITE_READY_IU]).fill_null(False)
         & (pl.col("actual") == 4).fill_null(False)).alias("is_ready"),
    ).with_columns(_be16("data", 2).alias("usb_tag"))
    # status IUs are read by URBs submitted ahead of time: order them by their completion
    ends = t.filter(pl.col("is_cmd") | pl.col("is_sts")).with_columns(
        pl.when(pl.col("is_sts")).then(pl.col("complete_ns")).otherwise(pl.col("submit_ns")).alias("k_t")
    ).sort(["bus", "dev", "usb_tag", "k_t", "i"])
    key = ["bus", "dev", "usb_tag"]
    ends = ends.with_columns(
        pl.col("is_sts").shift(-1).over(key).fill_null(False).alias("next_sts"),
        pl.col("is_cmd").shift(1).over(key).fill_null(False).alias("prev_cmd"),
        pl.col("complete_ns").shift(-1).over(key).alias("n_c"),
        pl.col("submit_ns").shift(-1).over(key).alias("n_s"),
        pl.col("data").shift(-1).over(key).alias("n_data"),
        pl.col("is_cmd").shift(-1).over(key).is_null().alias("last"))
    cmds = ends.filter(pl.col("is_cmd")).select(
        "bus", "dev", "usb_tag", "pos", "i",
        pl.col("submit_ns").alias("cmd_s"), pl.col("complete_ns").alias("cmd_c"),
        pl.col("data").bin.slice(16, 16).alias("cdb"),
        _u8("data", 9).alias("lun"),
        pl.when(pl.col("next_sts")).then(pl.col("n_s")).alias("sts_s"),
        pl.when(pl.col("next_sts")).then(pl.col("n_c")).alias("sts_c"),
        pl.when(pl.col("next_sts")).then(pl.col("n_data")).alias("sts_iu"),
        pl.when(pl.col("next_sts")).then(None).when(pl.col("last")).then(pl.lit("no status IU (capture ended)"))
        .otherwise(pl.lit("command IU tag reused before its status IU")).alias("reason"))
    cmds = cmds.with_columns(
        pl.when(_u8("sts_iu", 0) == UAS_SENSE_IU).then(
            _u8("sts_iu", 6).replace_strict(scsi.STATUS_NAMES, default=None, return_dtype=pl.Utf8))
        .when(_u8("sts_iu", 0) == UAS_RESPONSE_IU).then(pl.lit("RESPONSE IU"))
        .alias("status"),
        pl.lit(None, dtype=pl.Int64).alias("residue"),
        pl.lit("UAS").alias("transport"),
        *_cdb_fields(scsi.decode_cdbs(cmds["cdb"])))
    cmds = cmds.with_columns(pl.col("opcode").is_in(DATA_OUT_OPS).not_().alias("flag_in"))
    orphan_sts = ends.filter(pl.col("is_sts") & ~pl.col("prev_cmd"))
    if orphan_sts.height:
        cmds = pl.concat([cmds, orphan_sts.select(
            "bus", "dev", "usb_tag", "pos", "i", pl.col("submit_ns").alias("sts_s"),
            pl.col("complete_ns").alias("sts_c"),
            pl.lit("status IU without command IU (capture started mid-command)").alias("reason"),
            pl.lit("UAS").alias("transport"))], how="diagonal_relaxed")
    data = t.filter(~pl.col("is_cmd") & ~pl.col("is_sts") & ~pl.col("is_ready")
                    & pl.col("complete_ns").is_not_null())
    cmds = _uas_attach_data(cmds, data)
    anomalies.append(_anomalies(cmds.filter(pl.col("stalls") > 0), "cmd_s", "STALL", pl.format(
        "{} endpoint stall(s) during the command with tag {} on {}:{}", "stalls", "usb_tag", "bus", "dev")))
    return cmds, anomalies


def _uas_attach_data(cmds: pl.DataFrame, data: pl.DataFrame) -> pl.DataFrame:
    """Give each data transfer to the command of its device and direction whose status IU
    arrives first after the transfer completed (a UAS device sends a command's data, then
    its status; usbmon does not show stream ids), provided the command was issued before."""
    c = cmds.filter(pl.col("cmd_s").is_not_null() & pl.col("sts_c").is_not_null()).with_row_index("cid") \
        .with_columns(pl.col("flag_in").fill_null(True).alias("dir_in")).sort("sts_c")
    d = data.sort("complete_ns")
    empty = [pl.lit(None, dtype=pl.Int64).alias("data_s"), pl.lit(None, dtype=pl.Int64).alias("data_c"),
             pl.lit(0, dtype=pl.Int64).alias("data_bytes"), pl.lit(0, dtype=pl.Int64).alias("stalls"),
             pl.lit(None, dtype=pl.Boolean).alias("data_in")]
    if not d.height or not c.height:
        return cmds.with_columns(empty)
    j = d.join_asof(c.select("bus", "dev", "dir_in", "sts_c", "cmd_s", "cid"), left_on="complete_ns",
                    right_on="sts_c", by=["bus", "dev", "dir_in"], strategy="forward", check_sortedness=False)
    j = j.filter(pl.col("cid").is_not_null() & (pl.col("cmd_s") <= pl.col("complete_ns")))
    ok = pl.col("status").is_in([0, EREMOTEIO])
    per = j.group_by("cid").agg(
        pl.col("submit_ns").min().alias("data_s"), pl.col("complete_ns").max().alias("data_c"),
        pl.col("actual").filter(ok).sum().alias("data_bytes"),
        (pl.col("status") == EPIPE).sum().alias("stalls"), pl.col("dir_in").first().alias("data_in"))
    c = c.join(per, on="cid", how="left").drop("cid", "dir_in")
    rest = cmds.filter(pl.col("cmd_s").is_null() | pl.col("sts_c").is_null()).with_columns(empty)
    return pl.concat([c, rest], how="diagonal_relaxed")


# ---------------------------------------------------------------- stages and tiling

def _with_stages(cmds: pl.DataFrame) -> pl.DataFrame:
    data_start = pl.max_horizontal("data_s", "cmd_c")
    data_end = pl.col("data_c")
    sts_start = pl.max_horizontal("sts_s", pl.coalesce("data_c", "cmd_c"))
    return cmds.with_columns(
        (pl.col("cmd_c") - pl.col("cmd_s")).alias("command_ns"),
        pl.when(data_end.is_not_null()).then(data_end - data_start).alias("data_ns"),
        (pl.col("sts_c") - sts_start).alias("status_ns"),
        (pl.col("sts_c") - pl.col("cmd_s")).alias("response_ns"),
        data_start.alias("_d0"), sts_start.alias("_s0"))


PIECE_PHASES = ["COMMAND", "DATA IN", "DATA OUT", "GAP", "STATUS"]


def tile(ios: pl.DataFrame, elapsed_ns: int, segments: bool = True) -> dict:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns] (srt.tile's columns).
    Pieces, in this order: every command's COMMAND, GAP to its data (or status), DATA, GAP
    after the data, STATUS; commands without a CBW/IU submit have none. (Listed command by
    command first: when that comes out in time order, as Bulk-Only traffic does, the
    tiling needs no sort, and its totals no piece table.)"""
    pieces = np.empty((5 * ios.height if segments else 0, len(srt.PIECE_COLUMNS)), np.int64)
    if not ios.height:
        return srt.tile(pieces, elapsed_ns, PIECE_PHASES, segments)
    times = ios.select(pl.col(c).cast(pl.Int64).fill_null(srt.NULL)
                       for c in ("_dev", "io", "cmd_s", "cmd_c", "_d0", "_s0", "data_c", "sts_c", "data_bytes"))
    dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes = (times[c].to_numpy() for c in times.columns)
    data_in = ios.select(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)).to_series().to_numpy()
    phase_code = np.array([PIECE_PHASES.index(p) for p in usbscan.STAGE_ORDER], np.int64)
    if not segments:
        names = [*PIECE_PHASES, srt.IDLE]
        totals, counts = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
        in_order, devices = usbscan.stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in, phase_code,
                                                 names.index(srt.IDLE), elapsed_ns, totals, counts)
        if in_order:
            return srt.tile_totals(names, totals, counts, devices)
        pieces = np.empty((5 * ios.height, len(srt.PIECE_COLUMNS)), np.int64)
    columns = (dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in, phase_code)
    n, in_order = usbscan.stage_pieces(*columns, True, pieces)
    if not in_order:
        n, _ = usbscan.stage_pieces(*columns, False, pieces)
    return srt.tile(pieces[:n], elapsed_ns, PIECE_PHASES, segments, in_order)


# ---------------------------------------------------------------- analysis

def _anomalies(rows: pl.DataFrame, t_col: str, kind: str, detail: pl.Expr) -> pl.DataFrame:
    """One anomaly row per row of `rows` (every one: nothing is dropped)."""
    return rows.select(pl.col(t_col).cast(pl.Int64).alias("t_ns"), pl.lit(kind).alias("kind"),
                       detail.alias("detail"), pl.col("pos").cast(pl.Utf8).alias("position"))


def _control_anomalies(transfers: Transfers) -> list[pl.DataFrame]:
    """Mass-storage resets and endpoint-halt clears (control transfers), URB errors."""
    u, xfer = transfers.urbs, transfers.xfer
    st = transfers.status
    errors = ~transfers.status_null & (st != 0) & (st != EREMOTEIO) & (st != EPIPE)
    xf = transfers.frame(np.flatnonzero(((xfer == 2) & u.has_setup[transfers.row]) | ((xfer == 3) & errors)))
    ctl = xf.filter((pl.col("xfer") == 2) & pl.col("setup").is_not_null()).with_columns(
        _u8("setup", 0).alias("bm"), _u8("setup", 1).alias("req"))
    err = xf.filter((pl.col("xfer") == 3) & pl.col("status").is_not_null()
                    & ~pl.col("status").is_in([0, EREMOTEIO, EPIPE]))
    where = pl.format("{}:{} ep {}", "bus", "dev", "ep")
    return [
        _anomalies(ctl.filter((pl.col("bm") == 0x21) & (pl.col("req") == 0xFF)), "t0", "RESET",
                   pl.format("Bulk-Only Mass Storage Reset to {}:{}", "bus", "dev")),
        _anomalies(ctl.filter((pl.col("bm") == 0x02) & (pl.col("req") == 0x01)), "t0", "CLEAR HALT",
                   pl.format("CLEAR_FEATURE(ENDPOINT_HALT) on {}:{}", "bus", "dev")),
        _anomalies(err.filter(pl.col("submit_error")), "t0", "SUBMIT ERROR",
                   pl.format("URB submission failed with {} on {}", "status", where)),
        _anomalies(err.filter(~pl.col("submit_error")), "t0", "URB ERROR",
                   pl.format("URB status {} on {}", "status", where)),
    ]


IOS_EXTRA = {
    "usb_tag": pl.Int64, "transport": pl.Utf8, "residue": pl.Int64, "stalls": pl.Int64,
    "command_ns": pl.Int64, "data_ns": pl.Int64, "status_ns": pl.Int64, "gap_ns": pl.Int64,
    "response_ns": pl.Int64, "paired": pl.Boolean, "reason": pl.Utf8, "bus": pl.Int64, "dev": pl.Int64,
}


def commands(urbs: UrbColumns) -> tuple[Transfers, pl.DataFrame, list[pl.DataFrame]]:
    """(transfers, commands with stage times, anomalies) from URB columns."""
    xf = transfers(urbs)
    bot, an1, not_bot = bot_commands(xf)
    rest = xf.frame(not_bot)
    uas, an2 = uas_commands(rest) if rest.height else (pl.DataFrame(), [])
    cmds = pl.concat([x for x in (bot, uas) if x.height], how="diagonal_relaxed") if (bot.height or uas.height) \
        else pl.DataFrame()
    return xf, cmds, [*an1, *an2, *_control_anomalies(xf)]


def ios_frame(cmds: pl.DataFrame) -> pl.DataFrame:
    if not cmds.height:
        return pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA})
    for col, dt in {"opcode": pl.Int64, "command": pl.Utf8, "lba": pl.Int64, "blocks": pl.Int64,
                    "data_s": pl.Int64, "data_c": pl.Int64, "cmd_c": pl.Int64,
                    "data_bytes": pl.Int64, "stalls": pl.Int64, "flag_in": pl.Boolean, "data_in": pl.Boolean,
                    "lun": pl.Int64, "bytes": pl.Int64, "residue": pl.Int64, "usb_tag": pl.Int64,
                    "status": pl.Utf8, "cmd_s": pl.Int64, "sts_s": pl.Int64}.items():
        if col not in cmds.columns:
            cmds = cmds.with_columns(pl.lit(None, dtype=dt).alias(col))
    c = _in_start_order(cmds)
    names, code = _devices(c)
    c = c.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("io"),
        names.gather(code).alias("device"), pl.Series("_dev", code),
        pl.col("command").fill_null(""))   # commands without a CDB (status without command)
    c = _with_stages(c).with_columns(
        pl.col("reason").is_null().alias("paired"),
        (pl.col("response_ns") - pl.col("command_ns").fill_null(0) - pl.col("data_ns").fill_null(0)
         - pl.col("status_ns").fill_null(0)).alias("gap_ns"))
    c = c.with_columns(
        pl.when(pl.col("paired")).then(pl.col("response_ns")).alias("response_ns"),
        pl.when(pl.col("paired")).then(pl.col("gap_ns")).alias("gap_ns"))
    out = c.with_columns(
        pl.lit(None, dtype=pl.Int8).alias("target"),
        pl.lit(None, dtype=pl.Int16).alias("tag"),
        scsi.op_kind_expr(pl.col("opcode")).alias("op"),
        pl.col("data_bytes").fill_null(0).alias("data_bytes"),
        pl.coalesce("cmd_s", "sts_s", "sts_c").alias("start_ns"),
        pl.when(pl.col("paired")).then(pl.col("sts_c")).alias("end_ns"),
        pl.lit(None, dtype=pl.Int32).alias("connections"),
        pl.lit(None, dtype=pl.Int32).alias("disconnects"),
        pl.col("paired").alias("complete"),
        (pl.col("residue").fill_null(0) > 0).alias("partial"),
        pl.col("stalls").fill_null(0),
    )
    cols = {**schema.IOS, **IOS_EXTRA}
    return out.select([pl.col(k).cast(v) for k, v in cols.items()] + ["data_s", "data_c", "cmd_s", "cmd_c",
                                                                      "sts_s", "sts_c", "_d0", "_s0",
                                                                      "flag_in", "data_in", "_dev"])


def _in_start_order(cmds: pl.DataFrame) -> pl.DataFrame:
    """Commands sorted by start (command, else status submit, else status completion).
    Bulk-Only commands usually come in that order already: when the starts strictly
    increase, no sort could move a row, so the frame is returned as it is."""
    key = pl.coalesce("cmd_s", "sts_s", "sts_c")
    start = cmds.select(key).to_series()
    if start.null_count() == 0 and bool((start.diff().drop_nulls() > 0).all()):
        return cmds
    return cmds.sort(key)


def _devices(cmds: pl.DataFrame) -> tuple[pl.Series, np.ndarray]:
    """(device names "bus:address:lun" in text order, each command's index into them):
    names are formatted once per device, not per command."""
    bus, dev = cmds["bus"].cast(pl.Int64).to_numpy(), cmds["dev"].cast(pl.Int64).to_numpy()
    lun = cmds["lun"].cast(pl.Int64).fill_null(0).to_numpy()
    first_seen, where = dense_ids((bus << 32) | (dev << 16) | lun)
    n = len(where)
    names = [f"{bus[i]}:{dev[i]}:{lun[i]}" for i in where]
    rank = np.empty(n, np.int64)
    rank[sorted(range(n), key=names.__getitem__)] = np.arange(n)
    return pl.Series("device", sorted(names), dtype=pl.Utf8), rank[first_seen]


def segments_frame(full: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """The segment frame (schema SEGMENTS + device) of the commands (`ios_frame`)."""
    names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"] if full.height else None
    return srt.segments_frame(tile(full, elapsed_ns), names)


def analyze(capture: Capture, options=None) -> Analysis:
    urbs = capture.columns["urbs"] if "urbs" in capture.columns else urb_columns(capture.frames["urbs"])
    elapsed = int(urbs.t_ns.max()) if len(urbs) else 0
    xf, cmds, anomalies = commands(urbs)
    full = ios_frame(cmds)
    tiles = tile(full, elapsed, segments=False)
    ios = full.select(list({**schema.IOS, **IOS_EXTRA}))
    paired = int(ios["paired"].sum()) if ios.height else 0
    table = srt.table(ios)
    unit = capture.meta.get("position_unit", "record")
    found = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in anomalies]
    an = pl.concat([capture.anomalies, *found]).cast(schema.ANOMALIES)
    data_bytes = int(ios["data_bytes"].sum()) if ios.height else 0
    notes = []
    n_dev = tiles["devices"]
    if n_dev > 1:
        notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
    if capture.meta.get("text_format") == "1t":
        notes.append("1t text has no bus numbers: devices are shown on bus 0")
    notes += completeness.usb_notes(xf.s_row, xf.c_row, ios) + list(capture.notes)
    cats = srt.category_table(tiles["totals"], n_dev, STAGES, elapsed, paired)
    return Analysis(
        layer="usb", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=lambda: segments_frame(full, elapsed),
        segment_targets=False, ios=ios,
        anomalies=an, ios_completed=paired, data_bytes=data_bytes,
        category_order={"usb": list(STAGES)}, default_profile="usb", categories={"usb": cats},
        notes=notes,
        source={"path": capture.path, "format": capture.format, **{k: v for k, v in capture.meta.items()
                                                                    if k in ("container", "route", "text_format")}},
        extra={"json": {"srt": srt.as_json(table), "commands": srt.commands_json(ios),
                        "srt_histogram": srt.histogram(ios), "devices": srt.devices_json(ios, elapsed)},
               "no_normalized": ["IDLE"]})
