"""USB Attached SCSI: a command IU paired with the next sense or response IU of its tag;
data transfers given to the command whose status follows them."""
from __future__ import annotations

import polars as pl

from .. import scsi
from .bot import _cdb_fields
from .urbs import (DATA_OUT_OPS, EPIPE, EREMOTEIO, UAS_COMMAND_IU, UAS_READ_READY_IU, UAS_RESPONSE_IU,
                   UAS_SENSE_IU, UAS_WRITE_READY_IU, _anomalies, _be16, _u8)


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
