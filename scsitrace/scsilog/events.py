"""Kernel-log events (ftrace scsi_dispatch_cmd_*, kernel SCSI logging in dmesg): the frame the
scsilog parser hands over, and the codes it carries."""
from __future__ import annotations

import polars as pl

EVENTS = {
    "t_ns": pl.Int64,       # from the log's first SCSI event
    "kind": pl.Utf8,        # start | done | error | timeout | sense (a "Sense Key" line: the key in status)
    "device": pl.Utf8,      # host:channel:id:lun
    "tag": pl.Int64,        # driver tag (ftrace) or tag# (dmesg); null when not logged
    "cdb": pl.Binary,
    "host_byte": pl.Utf8,   # DID_OK, DID_NO_CONNECT, ...
    "status": pl.Utf8,      # SAM status of a done event (GOOD, CHECK CONDITION, ...)
    "rtn": pl.Int64,        # dispatch error return code
    "source": pl.Utf8,      # ftrace | dmesg
    "pos": pl.Int64,        # line number
}
# columns a parser's ready-made command table may add to `commands()`'s (the sgio parser's:
# strace SG_IO lines and sg3_utils -vv output); kept in the ios frame when present
COMMAND_EXTRA = {"bytes": pl.Int64, "data_bytes": pl.Int64, "direction": pl.Utf8, "sense_key": pl.Utf8,
                 "asc": pl.Int64, "ascq": pl.Int64, "syscall_ns": pl.Int64, "driver_ns": pl.Int64,
                 "pid": pl.Int64, "program": pl.Utf8}
MLQUEUE = {0x1055: "SCSI_MLQUEUE_HOST_BUSY", 0x1056: "SCSI_MLQUEUE_DEVICE_BUSY",
           0x1057: "SCSI_MLQUEUE_EH_RETRY", 0x1058: "SCSI_MLQUEUE_TARGET_BUSY"}
