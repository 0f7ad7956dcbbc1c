"""The SG_IO struct decoding as it was in polars (parsers/_sgio_struct.py before the values
moved to Rust, native/src/text/sgio.rs `sgio_decode`): the oracle the compiled decoding is
tested against (tests/test_sgio_fields.py)."""
from __future__ import annotations

import polars as pl

from scsitrace import scsi
from scsitrace.parsers import _lines

DIRECTIONS = {"SG_DXFER_NONE": "none", "SG_DXFER_TO_DEV": "out", "SG_DXFER_FROM_DEV": "in",
              "SG_DXFER_TO_FROM_DEV": "bidi", "SG_DXFER_UNKNOWN": "unknown"}
from scsitrace.parsers._sgio_struct import COMMANDS, HOST_BYTES  # noqa: E402  (the tables; the rules are this file's own)


def _fields(c: pl.DataFrame) -> pl.DataFrame:
    """`c` with one string column per struct field that is read (sg v3 `interface_id='S'`,
    sg v4 `guard='Q'`: `native/src/text/sgio.rs:FIELDS`), its struct text (`arg`) split into
    its name=value pairs in one compiled pass (`sgio_fields`)."""
    from scsitrace._native import text
    arg = c.select("arg") if c.height else pl.DataFrame({"arg": [None]}, schema={"arg": pl.Utf8})
    fields = pl.DataFrame(text.sgio_fields(arg)).select(pl.all().cast(pl.Utf8))   # (no empty string view: see
    return c.hstack(fields.head(c.height))                                        # _strace_lines._timed)


NUMBERS = ("dxfer_len", "status", "host_status", "sb_len_wr", "resid", "duration", "din_xfer_len",
           "dout_xfer_len", "din_resid", "dout_resid", "device_status", "transport_status", "response_len")


def _number(name: str) -> pl.Expr:
    """A number strace printed (decimal or 0x hex), null unless it fits 32 bits (every field
    of sg_io_hdr and sg_io_v4 that is read here does)."""
    v = pl.col(name)
    return pl.when(v.str.starts_with("0x")).then(_lines.checked_int(v.str.slice(2), *_lines.U32, base=16)) \
        .otherwise(_lines.checked_int(v, -2**31, 2**32 - 1))


def _num(name: str) -> pl.Expr:
    """The NUMBERS field `name` as a number (`_number`, read once per batch by `decode`)."""
    return pl.col("#" + name)


def _why_bad() -> pl.Expr:
    """Why an SG_IO line's struct does not decode (null: it does): a CDB that is not \\xNN
    bytes, or a number outside its field's range (the error contract)."""
    why = pl.lit(None, pl.Utf8)
    for name in reversed(NUMBERS):
        why = pl.when(pl.col(name).is_not_null() & _num(name).is_null()) \
            .then(pl.lit(f"{name} is not a number in range")).otherwise(why)
    why = pl.when(pl.col("fd_text").is_not_null() & pl.col("fd").is_null()) \
        .then(pl.lit("fd is not a number in range")) \
        .when(pl.col("dur").is_not_null() & pl.col("syscall_ns").is_null()) \
        .then(pl.lit("-T time is not a number of seconds in range")) \
        .when(pl.col("duration").is_not_null() & (_num("duration") < 0)).then(pl.lit("duration is negative")) \
        .when(pl.col("dxfer_len").is_not_null() & (_num("dxfer_len") < 0)).then(pl.lit("dxfer_len is negative")) \
        .when(_num("resid") > _num("dxfer_len")).then(pl.lit("resid is larger than dxfer_len")) \
        .otherwise(why)
    hexed = pl.col("cdb_hex")
    return pl.when(hexed.is_not_null() & ~hexed.str.contains(r"^(?:[0-9a-fA-F]{2})*$")) \
        .then(pl.lit("CDB bytes are not \\xNN escapes")).otherwise(why)


def _hex(name: str) -> pl.Expr:
    """A buffer strace printed as "\\xNN..." -> hex digits (a truncated one, `"..."...`, keeps its
    prefix); NULL or an address -> null."""
    v = pl.col(name)
    return pl.when(v.str.starts_with('"')).then(v.str.replace_all(r'[\\x".]', ""))


def decode(c: pl.DataFrame, fd_paths: pl.DataFrame, many_pids: bool) -> pl.DataFrame:
    if not c.height:
        return pl.DataFrame(schema={**COMMANDS, "why": pl.Utf8, "line_no": pl.Int64, "t": pl.Utf8})
    v4 = pl.col("arg").str.starts_with("{guard='Q'")
    c = _fields(c).with_columns(pl.col("fd").alias("fd_text"), _lines.checked_int(pl.col("fd"), 0, 2**31 - 1)
                                .alias("fd"), pl.col("pid").fill_null(-1).alias("_pid"),
                                *[_number(name).alias("#" + name) for name in NUMBERS])
    if fd_paths.height:
        c = c.sort("line_no").join_asof(fd_paths.sort("line_no"), on="line_no", by_left=["_pid", "fd"],
                                        by_right=["pid", "fd"], strategy="backward", check_sortedness=False)
        c = c.with_columns(pl.coalesce("path", "opath").alias("path"))
    din, dout = _num("din_xfer_len"), _num("dout_xfer_len")
    resid = pl.when(v4).then(din - _num("din_resid").clip(0, None) + dout - _num("dout_resid").clip(0, None)) \
        .otherwise(_num("dxfer_len") - _num("resid").clip(0, None))
    sense_len = pl.when(v4).then(_num("response_len")).otherwise(_num("sb_len_wr"))
    c = c.with_columns(
        pl.when(v4).then(_hex("request")).otherwise(_hex("cmdp")).alias("cdb_hex"),
        pl.when(v4).then(_num("device_status")).otherwise(_num("status")).alias("scsi_status"),
        pl.when(v4).then(_num("transport_status")).otherwise(_num("host_status")).alias("host"),
        pl.when(sense_len > 0).then(pl.when(v4).then(_hex("response")).otherwise(_hex("sbp"))).alias("sense"),
        pl.when(v4).then(din + dout).otherwise(_num("dxfer_len")).alias("bytes"),
        resid.clip(0, None).alias("data_bytes"),
        pl.when(v4).then(pl.when((din > 0) & (dout > 0)).then(pl.lit("bidi")).when(din > 0).then(pl.lit("in"))
                         .when(dout > 0).then(pl.lit("out")).otherwise(pl.lit("none")))
        .otherwise(pl.col("dxfer_direction").replace_strict(DIRECTIONS, default="unknown")).alias("direction"),
        (_num("duration") * 1_000_000).alias("driver_ns"),
        _lines.seconds_ns(pl.col("dur")).alias("syscall_ns"))
    ok = pl.col("ret") == "0"
    returned = pl.col("ret") != "?"
    fixed = pl.col("sense").str.slice(0, 2).is_in(["70", "71", "f0", "f1"])
    sbyte = lambda k: pl.col("sense").str.slice(2 * k, 2).str.to_integer(base=16, strict=False)  # noqa: E731
    key = pl.when(fixed).then(sbyte(2) & 0x0F).otherwise(sbyte(1) & 0x0F)
    syscall = pl.coalesce("syscall_ns", pl.col("end_t_ns") - pl.col("t_ns"))
    who = (pl.format("pid {} fd {}", "_pid", "fd") if many_pids else pl.format("fd {}", "fd"))
    return c.select(
        pl.coalesce(pl.col("path"), who).alias("device"),
        pl.lit(None, dtype=pl.Int64).alias("tag"),
        pl.col("cdb_hex").str.decode("hex", strict=False).alias("cdb"),   # bad ones: `why`, below
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
        key.replace_strict(scsi.SENSE_KEY_NAMES, default=None, return_dtype=pl.Utf8).alias("sense_key"),
        pl.when(fixed).then(sbyte(12)).otherwise(sbyte(2)).alias("asc"),
        pl.when(fixed).then(sbyte(13)).otherwise(sbyte(3)).alias("ascq"),
        pl.when(ok).then(syscall).alias("syscall_ns"), "driver_ns", pl.col("pid"),
        _why_bad().alias("why"), pl.col("line_no"), pl.col("arg").alias("t"))
