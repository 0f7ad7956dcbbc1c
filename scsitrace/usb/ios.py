"""The USB layer's I/O rows and anomalies, shared by the whole-capture passes
(scsitrace/usb/analysis.py) and the streaming machine (scsitrace/usb/streamed.py): the stage
names, the layer's extra I/O columns, one row per command in start order, and the control
transfers and URB errors listed as anomalies."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import schema, scsi
from .._keys import dense_ids
from .stages import _with_stages
from .transfers import Transfers
from .urbs import EPIPE, EREMOTEIO, _anomalies, _u8

STAGES = ("COMMAND", "DATA IN", "DATA OUT", "STATUS", "GAP", "IDLE")


def control_anomalies(transfers: Transfers, streamed=None) -> list[pl.DataFrame]:
    """Mass-storage resets and endpoint-halt clears (control transfers), URB errors
    (`streamed`: the stream machine's `Finished`, whose `control` lists the resets and clears;
    then `transfers` is empty)."""
    xfer = transfers.xfer
    has_setup = transfers.urbs["setup"].is_not_null().to_numpy()[transfers.row]
    errors = transfers.status_errors((0, EREMOTEIO, EPIPE))
    xf = transfers.frame(np.flatnonzero(((xfer == 2) & has_setup) | ((xfer == 3) & errors)))
    ctl = xf.filter((pl.col("xfer") == 2) & pl.col("setup").is_not_null()).with_columns(
        _u8("setup", 0).alias("bm"), _u8("setup", 1).alias("req"))
    if streamed is not None:
        ctl = pl.DataFrame(streamed.control).with_columns(pl.col("bus").cast(pl.UInt16), pl.col("dev").cast(pl.UInt8))
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



def ios_frame(cmds: pl.DataFrame, first_io: int = 0) -> pl.DataFrame:
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
        pl.int_range(first_io, first_io + pl.len(), dtype=pl.Int64).alias("io"),
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
                                                                      "sts_s", "sts_c", "_c0", "_d0", "_s0",
                                                                      "flag_in", "data_in", "_dev"])


def _in_start_order(cmds: pl.DataFrame) -> pl.DataFrame:
    """Commands sorted by start (command, else status submit, else status completion).
    Bulk-Only commands usually come in that order already: when the starts strictly
    increase, no sort could move a row, so the frame is returned as it is."""
    key = pl.coalesce("cmd_s", "sts_s", "sts_c")
    start = cmds.select(key).to_series()
    if start.null_count() == 0 and bool((start.diff().drop_nulls() > 0).all()):
        return cmds
    return cmds.sort(key, maintain_order=True)


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
