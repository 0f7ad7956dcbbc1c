"""The SG_IO struct strace prints (sg v3 `interface_id='S'`, sg v4 `guard='Q'`) decoded into
the command table's columns (parsers/sgio.py): CDB, direction, bytes, status, host status,
sense key/ASC/ASCQ, the driver's and the syscall's time, and why a line does not decode."""
from __future__ import annotations

import polars as pl

from scsitrace import scsi
from . import _lines

HOST_BYTES = {0x00: "DID_OK", 0x01: "DID_NO_CONNECT", 0x02: "DID_BUS_BUSY", 0x03: "DID_TIME_OUT",
              0x04: "DID_BAD_TARGET", 0x05: "DID_ABORT", 0x06: "DID_PARITY", 0x07: "DID_ERROR",
              0x08: "DID_RESET", 0x09: "DID_BAD_INTR", 0x0A: "DID_PASSTHROUGH", 0x0B: "DID_SOFT_ERROR",
              0x0C: "DID_IMM_RETRY", 0x0D: "DID_REQUEUE", 0x0E: "DID_TRANSPORT_DISRUPTED",
              0x0F: "DID_TRANSPORT_FAILFAST", 0x11: "DID_TRANSPORT_MARGINAL"}
COMMANDS = {"device": pl.Utf8, "tag": pl.Int64, "cdb": pl.Binary, "pos": pl.Int64, "start_ns": pl.Int64,
            "end_ns": pl.Int64, "status": pl.Utf8, "host_byte": pl.Utf8, "reason": pl.Utf8,
            "response_ns": pl.Int64, "bytes": pl.Int64, "data_bytes": pl.Int64, "direction": pl.Utf8,
            "sense_key": pl.Utf8, "asc": pl.Int64, "ascq": pl.Int64, "syscall_ns": pl.Int64,
            "driver_ns": pl.Int64, "pid": pl.Int64}


def _decoded(c: pl.DataFrame) -> pl.DataFrame:
    """`c` with what each struct text (`arg`) decodes to, in one compiled pass
    (`native/src/text/sgio.rs:sgio_decode`: its fields split, their numbers read): `cdb`,
    `scsi_status`, `host`, `bytes`, `data_bytes`, `direction`, `driver_ns`, the sense
    `sense_key` bits, `asc`, `ascq`, and why it does not decode (`cdb_why`, `field_why`)."""
    from scsitrace._native import text
    return c.hstack(pl.DataFrame(text.sgio_decode(c.select("arg"))))


def _why_bad() -> pl.Expr:
    """Why an SG_IO line does not decode (null: it does): its struct's CDB (`cdb_why`), its fd
    or -T time, then its struct's numbers (`field_why`): the error contract."""
    return pl.when(pl.col("cdb_why").is_not_null()).then(pl.col("cdb_why")) \
        .when(pl.col("fd_text").is_not_null() & pl.col("fd").is_null()) \
        .then(pl.lit("fd is not a number in range")) \
        .when(pl.col("dur").is_not_null() & pl.col("syscall_ns").is_null()) \
        .then(pl.lit("-T time is not a number of seconds in range")) \
        .otherwise(pl.col("field_why"))


def decode(c: pl.DataFrame, fd_paths: pl.DataFrame, many_pids: bool) -> pl.DataFrame:
    if not c.height:    # (no empty frame crosses to Rust: see _strace_lines._timed)
        return pl.DataFrame(schema={**COMMANDS, "why": pl.Utf8, "line_no": pl.Int64, "t": pl.Utf8})
    c = _decoded(c).with_columns(pl.col("fd").alias("fd_text"), _lines.checked_int(pl.col("fd"), 0, 2**31 - 1)
                                 .alias("fd"), pl.col("pid").fill_null(-1).alias("_pid"),
                                 _lines.seconds_ns(pl.col("dur")).alias("syscall_ns"))
    if fd_paths.height:
        c = c.sort("line_no").join_asof(fd_paths.sort("line_no"), on="line_no", by_left=["_pid", "fd"],
                                        by_right=["pid", "fd"], strategy="backward", check_sortedness=False)
        c = c.with_columns(pl.coalesce("path", "opath").alias("path"))
    ok = pl.col("ret") == "0"
    returned = pl.col("ret") != "?"
    syscall = pl.coalesce("syscall_ns", pl.col("end_t_ns") - pl.col("t_ns"))
    who = (pl.format("pid {} fd {}", "_pid", "fd") if many_pids else pl.format("fd {}", "fd"))
    return c.select(
        pl.coalesce(pl.col("path"), who).alias("device"),
        pl.lit(None, dtype=pl.Int64).alias("tag"),
        "cdb",
        pl.col("line_no").alias("pos"),
        pl.col("t_ns").alias("start_ns"),
        pl.when(ok).then(pl.col("t_ns") + syscall).alias("end_ns"),
        pl.when(ok).then(pl.when(pl.col("host").fill_null(0) != 0).then(
            pl.col("host").replace_strict(HOST_BYTES, default=None, return_dtype=pl.Utf8)
            .fill_null(pl.format("host 0x{}", pl.col("host"))))
            .otherwise(pl.col("scsi_status").replace_strict(scsi.STATUS_NAMES, default=None, return_dtype=pl.Utf8)))
        .alias("status"),
        pl.when(ok).then(pl.col("host").replace_strict(HOST_BYTES, default=None, return_dtype=pl.Utf8)).alias("host_byte"),
        pl.when(ok).then(None).when(~returned).then(pl.lit("no return (trace ended)"))
        .otherwise(pl.format("ioctl failed ({})", pl.coalesce("errno", "ret"))).alias("reason"),
        pl.when(ok).then(pl.coalesce(syscall, "driver_ns")).alias("response_ns"),
        "bytes", pl.when(ok).then(pl.col("data_bytes")).alias("data_bytes"), "direction",
        pl.col("sense_key").replace_strict(scsi.SENSE_KEY_NAMES, default=None, return_dtype=pl.Utf8),
        "asc", "ascq", pl.when(ok).then(syscall).alias("syscall_ns"), "driver_ns", pl.col("pid"),
        _why_bad().alias("why"), pl.col("line_no"), pl.col("arg").alias("t"))
