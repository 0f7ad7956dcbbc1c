"""Bulk-Only Transport: a device's bulk transfers from a CBW to the next CBW are one
command; its CSW must carry the CBW's tag. One compiled pass (scsitrace._native.usb) groups the transfers into
commands and aggregates their times and counts (`bot_pass`), one decodes the CBW and
CSW fields (`bot_fields`)."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import scsi
from .._native import usb as _usb
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


def bot_commands(xf: Transfers, streamed=None) -> tuple[pl.DataFrame, list[pl.DataFrame], np.ndarray]:
    """Commands of Bulk-Only devices (devices that sent a CBW: the bulk transfers of other
    devices are returned, as positions, for UAS), and their anomalies. `streamed`: the
    commands found by scsitrace/usb/streamed.py's machine instead (its `BotCommands`, times
    from the capture's origin; then `xf` has no rows)."""
    if streamed is None:
        found, a = _whole_commands(xf)
    else:
        found = streamed
        a = pl.DataFrame(found.commands).with_columns(pl.col("bus").cast(pl.UInt16), pl.col("dev").cast(pl.UInt8))
    kind = found.kind
    not_bot = np.flatnonzero(kind == NOT_BOT)
    if not a.height:
        return pl.DataFrame(), [], not_bot
    cbw = found.cbw.reshape(-1, CBW_BYTES)
    f = bot_fields(a, found.cbw, found.csw)
    cmds = pl.DataFrame({
        **{k: a[k] for k in ("bus", "dev", "pos", "cmd_s", "cmd_c", "sts_s", "sts_c", "data_s", "data_c", "stalls",
                             "data_bytes")},
        "data_in": a["data_in"] == 1,
        "usb_tag": f["usb_tag"], "bytes": f["bytes"], "flag_in": f["flag_in"] == 1, "lun": f["lun"],
        "csw_tag": f["csw_tag"], "residue": f["residue"], "csw_status": f["csw_status"],
        "n_csw": a["n_csw"], "last": a["last"] == 1,
        "reason": pl.Series(BOT_REASONS, dtype=pl.Utf8).gather(f["reason"]),
        "status": _csw_status_names(f["csw_status"]),
    }).with_columns(pl.lit("BOT").alias("transport"),
                    *_cdb_fields(scsi.decode_cdb_matrix(cbw[:, 15:31], np.clip(f["cb_len"].to_numpy(), 0, 16))))
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


def _csw_status_names(status: pl.Series) -> pl.Series:
    """Each command's CSW status by name (CSW_STATUS, else "CSW status N"; null without one)."""
    names = [CSW_STATUS.get(v, f"CSW status {v}") for v in range(256)] + [None]
    return pl.Series("status", names, dtype=pl.Utf8).gather(status.fill_null(len(names) - 1))


BOT_AGGREGATES = ("first", "last", "csw", "n_csw", "sts_s", "sts_c", "data_s", "data_c", "data_bytes",
                  "stalls", "data_in")



def _whole_commands(xf: Transfers):
    """bot_pass over every transfer: (its result, its commands' rows with each one's bus,
    device, position and CBW submit and completion times)."""
    u = xf.urbs
    device, first_rows = dense_ids(xf.bus_dev)
    found = bot_pass(xf, device, len(first_rows))
    a = pl.DataFrame(found.commands)
    first = a["first"].to_numpy()
    row = xf.row[first]
    return found, a.with_columns(u["bus"].gather(row), u["dev"].gather(row),
                                 u["pos"].gather(row), xf.cols["submit_ns"].gather(first).alias("cmd_s"),
                                 xf.cols["complete_ns"].gather(first).alias("cmd_c"))


def bot_pass(xf: Transfers, device: np.ndarray, n_devices: int):
    """Bulk-Only commands from transfers in time order (`xf`; `device`: each transfer's
    device id, < n_devices), in one compiled pass (native/src/usb/machine.rs `bot_pass`,
    which reads `xf`'s columns by name). Returns its `BotCommands`: `commands`, a row per
    command of BOT_AGGREGATES (first transfer (the CBW), last-of-device flag, CSW transfer
    (null: none), CSW count, status-stage start, CSW completion, data start, data end (null
    unknown), data bytes, stalls, data direction (null unknown, 0 out, 1 in)) and
    `csw_size` (null: no CSW); `cbw`, the CBW bytes; `csw`, the first CSW's bytes; per
    transfer `kind`, its class (0 in a command or not bulk, BEFORE_CBW_DATA,
    BEFORE_CBW_CSW, NOT_BOT). Signatures come from the first 4 data bytes of the URB table's
    `data`; only CBWs and CSWs are read further.

    A command is the CBW and every bulk transfer of its device up to the next CBW. Status
    stage: the CSW, and failed reads of CSW size before it. Data: the other transfers;
    bytes only from those that completed (status 0 or -EREMOTEIO)."""
    return _usb.bot_pass(xf.cols.with_columns(pl.Series("device", device, dtype=pl.Int64)), xf.urbs, int(n_devices))


def bot_fields(commands: pl.DataFrame, cbw: np.ndarray, csw: np.ndarray) -> pl.DataFrame:
    """Per Bulk-Only command (bot_pass' `commands` and bytes): the CBW's tag, transfer length,
    LUN and CDB length, the CSW's tag, residue and status (null where its `csw_size` bytes
    hold none), the CBW's direction flag (`flag_in`), and why it is unpaired (`reason`: an
    index into BOT_REASONS, by the rule of machine.rs `bot_reason`)."""
    return pl.DataFrame(_usb.bot_fields(commands, np.ascontiguousarray(cbw).reshape(-1),
                                        np.ascontiguousarray(csw).reshape(-1)))
