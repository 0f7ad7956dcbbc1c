"""Bulk-Only Transport: a device's bulk transfers from a CBW to the next CBW are one
command; its CSW must carry the CBW's tag. One compiled pass (scsitrace._native.usb) groups the transfers into
commands and aggregates their times and counts (`bot_pass`), one decodes the CBW and
CSW fields (`bot_fields`)."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import scsi
from .._native import usb as _usb
from ..schema import nullable
from .transfers import Transfers
from .._keys import dense_ids
from .urbs import CSW_STATUS, _anomalies, _le32 as _le32_expr, _u8

CSW_BYTES = 13
CBW_BYTES = 31
CBW_SIGNATURE = np.uint32(0x43425355)   # "USBC", little-endian
CSW_SIGNATURE = np.uint32(0x53425355)   # "USBS"

# transfer classes (bot_pass): why a bulk transfer is not inside a BOT command
BEFORE_CBW_DATA, BEFORE_CBW_CSW, NOT_BOT = 1, 2, 3


def _cdb_fields(decoded: dict) -> list[pl.Series]:
    """The decoded CDB columns a command row carries (scsi.decode_cdbs)."""
    return [decoded[k] for k in ("opcode", "command", "lba", "blocks")]


def bot_commands(xf: Transfers, streamed: dict | None = None) -> tuple[pl.DataFrame, list[pl.DataFrame], np.ndarray]:
    """Commands of Bulk-Only devices (devices that sent a CBW: the bulk transfers of other
    devices are returned, as positions, for UAS), and their anomalies. `streamed`: the
    commands found by scsitrace/usb/streamed.py's machine instead (then `xf` has no rows)."""
    u = xf.urbs
    if streamed is None:
        device, first_rows = dense_ids(xf.bus_dev)
        a, cbw, csw, csw_size, kind = bot_pass(xf, device, len(first_rows))
        row = xf.row[a["first"]]
        at = {"bus": u.bus[row], "dev": u.dev[row], "pos": u.pos[row], "cmd_s": xf.submit_ns[a["first"]],
              "cmd_c": xf.complete_ns[a["first"]]}
    else:
        a = {k: streamed[k] for k in BOT_AGGREGATES}
        a["last"] = a["last"] == 1
        cbw, csw = streamed["cbw"].reshape(-1, CBW_BYTES), streamed["csw_bytes"].reshape(-1, CSW_BYTES)
        csw_size, kind = streamed["csw_size"], np.zeros(0, np.int8)
        at = {"bus": streamed["bus"].astype(np.uint16), "dev": streamed["dev"].astype(np.uint8),
              **{k: streamed[k] for k in ("pos", "cmd_s", "cmd_c")}}
    not_bot = np.flatnonzero(kind == NOT_BOT)
    if not len(a["first"]):
        return pl.DataFrame(), [], not_bot
    f = bot_fields(cbw, csw, csw_size, a["n_csw"], a["last"], a["sts_c"])
    cmds = pl.DataFrame({
        "bus": at["bus"], "dev": at["dev"], "pos": at["pos"],
        "cmd_s": nullable(at["cmd_s"]), "cmd_c": nullable(at["cmd_c"]),
        "sts_s": nullable(a["sts_s"]), "sts_c": nullable(a["sts_c"]),
        "data_s": nullable(a["data_s"]), "data_c": nullable(a["data_c"]),
        "stalls": a["stalls"], "data_bytes": a["data_bytes"],
        "data_in": nullable(a["data_in"] == 1, a["data_in"] < 0),
        "usb_tag": f["usb_tag"], "bytes": f["bytes"], "flag_in": f["flag_in"], "lun": f["lun"],
        "csw_tag": nullable(f["csw_tag"], csw_size < 8), "residue": nullable(f["residue"], csw_size < 12),
        "csw_status": nullable(f["csw_status"], csw_size <= 12),
        "n_csw": a["n_csw"], "last": a["last"],
        "reason": pl.Series(BOT_REASONS, dtype=pl.Utf8).gather(f["reason"]),
        "status": _csw_status_names(f["csw_status"], csw_size),
    }).with_columns(pl.lit("BOT").alias("transport"),
                    *_cdb_fields(scsi.decode_cdb_matrix(cbw[:, 15:31], np.clip(f["cb_len"], 0, 16))))
    orphan_csw = xf.frame(np.flatnonzero(kind == BEFORE_CBW_CSW))
    if orphan_csw.height:
        orphans = orphan_csw.select(
            "bus", "dev", "pos", pl.lit(None, dtype=pl.Int64).alias("cmd_s"),
            pl.col("complete_ns").alias("sts_c"), pl.col("submit_ns").alias("sts_s"),
            _le32_expr("data", 4).alias("usb_tag"), _le32_expr("data", 8).alias("residue"),
            pl.lit("CSW without CBW (capture started mid-command)").alias("reason"),
            pl.lit("BOT").alias("transport"),
            _u8("data", 12).replace_strict(CSW_STATUS, default=None, return_dtype=pl.Utf8).alias("status"))
        cmds = pl.concat([cmds, orphans], how="diagonal_relaxed")
    before = xf.frame(np.flatnonzero(kind == BEFORE_CBW_DATA))
    anomalies = [
        _anomalies(before, "t0", "DATA WITHOUT CBW",
                   pl.format("bulk transfer on {}:{} ep {} before any CBW", "bus", "dev", "ep")),
        _anomalies(cmds.filter(pl.col("stalls") > 0), "cmd_s", "STALL", pl.format(
            "{} endpoint stall(s) during the command with tag {} on {}:{}", "stalls", "usb_tag", "bus", "dev")),
        _anomalies(cmds.filter(pl.col("status") == "PHASE ERROR"), "sts_c", "PHASE ERROR",
                   pl.format("CSW phase error, tag {}", "usb_tag")),
    ]
    return cmds, anomalies, not_bot

# why a Bulk-Only command is unpaired, by bot_fields' `reason` code (paired: None); the
# codes and their rule live in Rust (native/src/usb/machine.rs `bot_reason`)
BOT_REASONS = list(_usb.BOT_REASONS)


def _csw_status_names(status: np.ndarray, csw_size: np.ndarray) -> pl.Series:
    """Each command's CSW status by name (CSW_STATUS, else "CSW status N"; null without one)."""
    names = [CSW_STATUS.get(v, f"CSW status {v}") for v in range(256)] + [None]
    code = np.where(csw_size <= 12, len(names) - 1, status)
    return pl.Series("status", names, dtype=pl.Utf8).gather(code)


BOT_AGGREGATES = ("first", "last", "csw", "n_csw", "sts_s", "sts_c", "data_s", "data_c", "data_bytes",
                  "stalls", "data_in")



def bot_pass(xf: Transfers, device: np.ndarray, n_devices: int):
    """Bulk-Only commands from transfers in time order (`xf`; `device`: each transfer's
    device id, < n_devices).

    Returns (per command: a dict of BOT_AGGREGATES: first transfer (the CBW), last-of-
    device flag, CSW transfer or -1, CSW count, status-stage start, CSW completion, data
    start, data end, data bytes, stalls, data direction (-1 unknown, 0 out, 1 in); the
    CBW bytes; the CSW bytes (the first CSW's) and their count, -1 for none), then per
    transfer its class (0 in a command or not bulk, BEFORE_CBW_DATA, BEFORE_CBW_CSW,
    NOT_BOT). Signatures come from `data_head`; only CBWs and CSWs are read in `data_buf`.

    A command is the CBW and every bulk transfer of its device up to the next CBW. Status
    stage: the CSW, and failed reads of CSW size before it. Data: the other transfers;
    bytes only from those that completed (status 0 or -EREMOTEIO). One compiled pass
    (native/src/usb/machine.rs), which reads `xf`'s columns by name."""
    out = _usb.bot_pass(xf, np.ascontiguousarray(device, np.int64), int(n_devices))
    agg = {k: out[k] for k in BOT_AGGREGATES}
    agg["last"] = agg["last"] == 1
    return agg, out["cbw"].reshape(-1, CBW_BYTES), out["csw"].reshape(-1, CSW_BYTES), out["csw_size"], out["kind"]


def bot_fields(cbw, csw, csw_size, n_csw, last, sts_c) -> dict:
    """Per Bulk-Only command (bot_pass' outputs): the CBW's tag, transfer length, LUN and
    CDB length, the CSW's tag, residue and status (values where its `csw_size` bytes
    hold none are not to be read), the CBW's direction flag (`flag_in`), and why it is
    unpaired (`reason`: an index into BOT_REASONS, by the rule of machine.rs `bot_reason`)."""
    c = np.ascontiguousarray
    return _usb.bot_fields(c(cbw).reshape(-1), c(csw).reshape(-1), c(csw_size, np.int64), c(n_csw, np.int64),
                           c(last, np.bool_), c(sts_c, np.int64))
