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
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import schema, scsi, srt
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

STAGES = ("COMMAND", "DATA IN", "DATA OUT", "STATUS", "GAP", "IDLE")
EPIPE, EREMOTEIO, EINPROGRESS = -32, -121, -115
CBW_SIGNATURE, CSW_SIGNATURE = b"USBC", b"USBS"
UAS_COMMAND_IU, UAS_SENSE_IU, UAS_RESPONSE_IU = 0x01, 0x03, 0x04
UAS_READ_READY_IU, UAS_WRITE_READY_IU = 0x06, 0x07
CSW_STATUS = {0: "GOOD", 1: "CHECK CONDITION", 2: "PHASE ERROR"}
DATA_OUT_OPS = sorted(scsi.WRITE_OPS | {0x15, 0x55, 0x3B, 0x42, 0x04, 0x1D})


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

def _neighbours(urb_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row index of the next and previous event of the same URB id (-1: none)."""
    n = len(urb_id)
    order = np.lexsort((np.arange(n), urb_id))
    same = urb_id[order][1:] == urb_id[order][:-1]
    nxt = np.full(n, -1, dtype=np.int64)
    prv = np.full(n, -1, dtype=np.int64)
    nxt[order[:-1][same]] = order[1:][same]
    prv[order[1:][same]] = order[:-1][same]
    return nxt, prv


def transfers(urbs: pl.DataFrame) -> pl.DataFrame:
    """One row per URB: submit and completion paired by URB id (ids are reused after
    completion, so a submit pairs with the next event of its id when that is a completion).
    Completions whose submit is not in the capture keep submit_ns null."""
    is_s = (urbs["event"] == "S").to_numpy()
    is_end = urbs["event"].is_in(["C", "E"]).to_numpy()
    nxt, prv = _neighbours(urbs["urb_id"].to_numpy())
    s_idx = np.flatnonzero(is_s)
    c_idx = nxt[s_idx]
    done = c_idx >= 0
    done[done] = is_end[c_idx[done]]
    orphan_idx = np.flatnonzero(is_end & ((prv < 0) | ~is_s[np.maximum(prv, 0)]))
    keys = ["bus", "dev", "ep", "xfer", "urb_id", "setup", "pos"]
    sub = urbs[s_idx].select(*keys, pl.col("t_ns").alias("submit_ns"), pl.col("length").alias("req_len"),
                             pl.col("data").alias("s_data"))
    comp = urbs[np.where(done, c_idx, 0)].select(
        pl.col("t_ns").alias("c_t"), pl.col("status").alias("c_status"), pl.col("length").alias("c_length"),
        pl.col("data").alias("c_data"), pl.col("event").alias("c_event"))
    d = pl.Series("done", done)
    paired = pl.concat([sub, comp], how="horizontal").with_columns(d, pl.Series("i", s_idx)).select(
        *keys, "i", "submit_ns",
        pl.when("done").then(pl.col("c_t")).alias("complete_ns"),
        pl.when("done").then(pl.col("c_status")).alias("status"),
        "req_len",
        pl.when("done").then(pl.col("c_length")).alias("actual"),
        (pl.col("done") & (pl.col("c_event") == "E")).alias("submit_error"),
        pl.when((pl.col("ep") & 0x80) > 0).then(pl.when("done").then(pl.col("c_data")))
        .otherwise(pl.col("s_data")).alias("data"))
    out = paired
    if len(orphan_idx):
        orphans = urbs[orphan_idx].select(
            *keys, pl.Series("i", orphan_idx), pl.lit(None, dtype=pl.Int64).alias("submit_ns"),
            pl.col("t_ns").alias("complete_ns"), pl.col("status"), pl.lit(None, dtype=pl.Int64).alias("req_len"),
            pl.col("length").alias("actual"), (pl.col("event") == "E").alias("submit_error"), pl.col("data"))
        out = pl.concat([paired, orphans])
    out = out.with_columns(((pl.col("ep") & 0x80) > 0).alias("dir_in"),
                           pl.coalesce("submit_ns", "complete_ns").alias("t0"))
    t0, i = out["t0"].to_numpy(), out["i"].to_numpy()
    order = np.lexsort((i, t0))
    if (np.diff(order) == 1).all():
        return out
    return out[order]


# ---------------------------------------------------------------- BOT

def _bot_classify(bulk: pl.DataFrame) -> pl.DataFrame:
    sig = pl.col("data").bin.slice(0, 4)
    return bulk.with_columns(
        (~pl.col("dir_in") & (sig == CBW_SIGNATURE).fill_null(False)
         & (pl.col("data").bin.size() >= 31).fill_null(False)).alias("is_cbw"),
        (pl.col("dir_in") & (sig == CSW_SIGNATURE).fill_null(False)
         & (pl.col("actual") == 13).fill_null(False)).alias("is_csw"))


def bot_commands(bulk: pl.DataFrame) -> tuple[pl.DataFrame, list[dict]]:
    """Commands of Bulk-Only devices from their classified bulk transfers (time order)."""
    anomalies = []
    t = bulk.with_columns(pl.col("is_cbw").cast(pl.Int64).cum_sum().over(["bus", "dev"]).alias("cmd"))
    before = t.filter(pl.col("cmd") == 0)
    anomalies.append(_anomalies(before.filter(~pl.col("is_csw")), "t0", "DATA WITHOUT CBW",
                                pl.format("bulk transfer on {}:{} ep {} before any CBW", "bus", "dev", "ep")))
    # a CSW read that failed (stall, error) before the CSW was read again
    status_try = pl.col("dir_in") & (pl.col("req_len") == 13) & ~pl.col("is_csw") & (pl.col("status") != 0)
    is_data = ~pl.col("is_cbw") & ~pl.col("is_csw") & ~status_try
    ok = pl.col("status").is_in([0, EREMOTEIO])
    cmds = t.filter(pl.col("cmd") > 0).group_by(["bus", "dev", "cmd"], maintain_order=True).agg(
        pl.col("data").filter(pl.col("is_cbw")).first().alias("cbw"),
        pl.col("pos").first().alias("pos"),
        pl.col("submit_ns").first().alias("cmd_s"),
        pl.col("complete_ns").first().alias("cmd_c"),
        pl.col("data").filter(pl.col("is_csw")).first().alias("csw"),
        pl.col("is_csw").sum().alias("n_csw"),
        pl.col("submit_ns").filter(pl.col("is_csw") | status_try).min().alias("sts_s"),
        pl.col("complete_ns").filter(pl.col("is_csw")).first().alias("sts_c"),
        pl.col("submit_ns").filter(is_data).min().alias("data_s"),
        pl.col("complete_ns").filter(is_data).max().alias("data_c"),
        pl.col("actual").filter(is_data & ok).sum().alias("data_bytes"),
        (pl.col("status") == EPIPE).sum().alias("stalls"),
        (~ok & pl.col("status").is_not_null() & (pl.col("status") != EPIPE)).sum().alias("errors"),
        pl.col("dir_in").filter(is_data).first().alias("data_in"),
        pl.len().alias("n_xfers"),
    )
    cmds = cmds.with_columns(
        _le32("cbw", 4).alias("usb_tag"),
        _le32("cbw", 8).alias("bytes"),
        ((_u8("cbw", 12) & 0x80) > 0).alias("flag_in"),
        (_u8("cbw", 13) & 0x0F).alias("lun"),
        (_u8("cbw", 14) & 0x1F).alias("cb_len"),
        _le32("csw", 4).alias("csw_tag"),
        _le32("csw", 8).alias("residue"),
        _u8("csw", 12).alias("csw_status"),
        pl.col("cmd").shift(-1).over(["bus", "dev"]).is_null().alias("last"),
    ).with_columns(
        pl.col("cbw").bin.slice(15, 16).bin.head(pl.col("cb_len").fill_null(0).clip(0, 16).cast(pl.UInt32))
        .alias("cdb"))
    reason = (pl.when(pl.col("n_csw") == 0).then(
        pl.when(pl.col("last")).then(pl.lit("no CSW (capture ended)"))
        .otherwise(pl.lit("no CSW before the next CBW")))
        .when(pl.col("csw_tag") != pl.col("usb_tag")).then(pl.lit("CSW tag does not match the CBW"))
        .when(pl.col("sts_c").is_null()).then(pl.lit("no CSW (capture ended)")))
    cmds = cmds.with_columns(reason.alias("reason"), pl.lit("BOT").alias("transport"),
                             pl.col("csw_status").replace_strict(CSW_STATUS, default=None, return_dtype=pl.Utf8)
                             .fill_null(pl.when(pl.col("csw_status").is_not_null())
                                        .then(pl.format("CSW status {}", pl.col("csw_status"))))
                             .alias("status"))
    orphan_csw = before.filter(pl.col("is_csw"))
    if orphan_csw.height:
        orphans = orphan_csw.select(
            "bus", "dev", "pos", pl.lit(None, dtype=pl.Int64).alias("cmd_s"),
            pl.col("complete_ns").alias("sts_c"), pl.col("submit_ns").alias("sts_s"),
            _le32("data", 4).alias("usb_tag"), _le32("data", 8).alias("residue"),
            pl.lit("CSW without CBW (capture started mid-command)").alias("reason"),
            pl.lit("BOT").alias("transport"),
            _u8("data", 12).replace_strict(CSW_STATUS, default=None, return_dtype=pl.Utf8).alias("status"))
        cmds = pl.concat([cmds, orphans], how="diagonal_relaxed")
    anomalies.append(_anomalies(cmds.filter(pl.col("stalls") > 0), "cmd_s", "STALL", pl.format(
        "{} endpoint stall(s) during the command with tag {} on {}:{}", "stalls", "usb_tag", "bus", "dev")))
    anomalies.append(_anomalies(cmds.filter(pl.col("status") == "PHASE ERROR"), "sts_c", "PHASE ERROR",
                                pl.format("CSW phase error, tag {}", "usb_tag")))
    return cmds, anomalies


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
        scsi.cdb_exprs(pl.col("cdb"))["opcode"].is_in(DATA_OUT_OPS).not_().alias("flag_in"))
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


def tile(cmds: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """Per device, stage pieces plus IDLE tiling [0, elapsed_ns]."""
    data_phase = pl.when(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)) \
        .then(pl.lit("DATA IN")).otherwise(pl.lit("DATA OUT"))
    c = cmds.filter(pl.col("cmd_s").is_not_null())
    pieces = [
        c.select("device", "io", pl.col("cmd_s").alias("start_ns"), pl.col("cmd_c").alias("end_ns"),
                 pl.lit("COMMAND").alias("phase"), pl.lit(None, dtype=pl.Int64).alias("bytes")),
        c.select("device", "io", pl.col("cmd_c").alias("start_ns"), pl.coalesce("_d0", "_s0").alias("end_ns"),
                 pl.lit("GAP").alias("phase"), pl.lit(None, dtype=pl.Int64).alias("bytes")),
        c.filter(pl.col("data_c").is_not_null()).select(
            "device", "io", pl.col("_d0").alias("start_ns"), pl.col("data_c").alias("end_ns"),
            data_phase.alias("phase"), pl.col("data_bytes").alias("bytes")),
        c.filter(pl.col("data_c").is_not_null()).select(
            "device", "io", pl.col("data_c").alias("start_ns"), pl.col("_s0").alias("end_ns"),
            pl.lit("GAP").alias("phase"), pl.lit(None, dtype=pl.Int64).alias("bytes")),
        c.select("device", "io", pl.col("_s0").alias("start_ns"), pl.col("sts_c").alias("end_ns"),
                 pl.lit("STATUS").alias("phase"), pl.lit(None, dtype=pl.Int64).alias("bytes")),
    ]
    return srt.tile_pieces(pl.concat(pieces), elapsed_ns)


# ---------------------------------------------------------------- analysis

def _anomalies(rows: pl.DataFrame, t_col: str, kind: str, detail: pl.Expr) -> pl.DataFrame:
    """One anomaly row per row of `rows` (every one: nothing is dropped)."""
    return rows.select(pl.col(t_col).cast(pl.Int64).alias("t_ns"), pl.lit(kind).alias("kind"),
                       detail.alias("detail"), pl.col("pos").cast(pl.Utf8).alias("position"))


def _control_anomalies(xf: pl.DataFrame) -> list[pl.DataFrame]:
    """Mass-storage resets and endpoint-halt clears (control transfers), URB errors."""
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


def commands(urbs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, list[dict]]:
    """(transfers, commands with stage times, anomalies) from an urbs frame."""
    xf = transfers(urbs)
    bulk = _bot_classify(xf.filter(pl.col("xfer") == 3))
    bot_devs = bulk.filter(pl.col("is_cbw")).select("bus", "dev").unique()
    is_bot = pl.struct("bus", "dev").is_in(bot_devs.select(pl.struct("bus", "dev")).to_series().implode())
    bot, an1 = bot_commands(bulk.filter(is_bot)) if bot_devs.height else (pl.DataFrame(), [])
    rest = bulk.filter(~is_bot)
    uas, an2 = uas_commands(rest) if rest.height else (pl.DataFrame(), [])
    cmds = pl.concat([x for x in (bot, uas) if x.height], how="diagonal_relaxed") if (bot.height or uas.height) \
        else pl.DataFrame()
    return xf, cmds, [*an1, *an2, *_control_anomalies(xf)]


def ios_frame(cmds: pl.DataFrame) -> pl.DataFrame:
    if not cmds.height:
        return pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA})
    for col, dt in {"cdb": pl.Binary, "data_s": pl.Int64, "data_c": pl.Int64, "cmd_c": pl.Int64,
                    "data_bytes": pl.Int64, "stalls": pl.Int64, "flag_in": pl.Boolean, "data_in": pl.Boolean,
                    "lun": pl.Int64, "bytes": pl.Int64, "residue": pl.Int64, "usb_tag": pl.Int64,
                    "status": pl.Utf8, "cmd_s": pl.Int64, "sts_s": pl.Int64}.items():
        if col not in cmds.columns:
            cmds = cmds.with_columns(pl.lit(None, dtype=dt).alias(col))
    dec = scsi.cdb_exprs(pl.col("cdb"))
    c = cmds.sort(pl.coalesce("cmd_s", "sts_s", "sts_c")).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("io"),
        pl.format("{}:{}:{}", "bus", "dev", pl.col("lun").fill_null(0)).alias("device"),
        dec["opcode"].alias("opcode"), dec["command"].alias("command"), dec["lba"].alias("lba"),
        dec["blocks"].alias("blocks"))
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
                                                                      "flag_in", "data_in"])


def analyze(capture: Capture, options=None) -> Analysis:
    urbs = capture.frames["urbs"]
    elapsed = int(urbs["t_ns"].max()) if urbs.height else 0
    _, cmds, anomalies = commands(urbs)
    full = ios_frame(cmds)
    segments = tile(full, elapsed) if full.height else pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    ios = full.select(list({**schema.IOS, **IOS_EXTRA}))
    paired = int(ios["paired"].sum()) if ios.height else 0
    table = srt.table(ios)
    unit = capture.meta.get("position_unit", "record")
    found = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in anomalies]
    an = pl.concat([capture.anomalies, *found]).cast(schema.ANOMALIES)
    data_bytes = int(ios["data_bytes"].sum()) if ios.height else 0
    notes = []
    n_dev = segments["device"].n_unique() if segments.height else 0
    if n_dev > 1:
        notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
    if capture.meta.get("text_format") == "1t":
        notes.append("1t text has no bus numbers: devices are shown on bus 0")
    cats = srt.categories(segments, STAGES, elapsed, paired)
    return Analysis(
        layer="usb", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=segments, ios=ios,
        anomalies=an, ios_completed=paired, data_bytes=data_bytes,
        category_order={"usb": list(STAGES)}, default_profile="usb", categories={"usb": cats},
        notes=notes,
        source={"path": capture.path, "format": capture.format, **{k: v for k, v in capture.meta.items()
                                                                    if k in ("container", "route", "text_format")}},
        extra={"json": {"srt": srt.as_json(table), "commands": srt.commands_json(ios),
                        "srt_histogram": srt.histogram(ios), "devices": srt.devices_json(ios, elapsed)},
               "no_normalized": ["IDLE"]})
