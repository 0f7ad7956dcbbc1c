"""SCSI commands sent through the SCSI generic paths (`SG_IO` on /dev/sg*, /dev/sd*,
/dev/bsg/*), as strace records them or as sg3_utils programs print them with -vv.

strace: `ioctl(FD, SG_IO, {...}) = RET` lines, with or without -t/-tt/-ttt timestamps,
-T syscall times, -y/-yy fd paths, -f pids (`[pid N] ` on stderr, `N ` with -o), `-v`
or abbreviated, `<unfinished ...>`/`<... ioctl resumed>` pairs, sg v3 headers
(`interface_id='S'`) and sg v4 headers (`guard='Q'`, bsg). One SG_IO call is one command:
its CDB, direction, bytes requested (`dxfer_len`) and transferred (`dxfer_len - resid`),
status, host status, sense key/ASC/ASCQ, the syscall's time (-T, or entry to return of an
unfinished/resumed pair) and the driver's `duration` (ms). Lines of other syscalls, signals,
exits and strace's own messages are read and skipped by design (counted in the capture's
meta, not as errors); an SG_IO line that does not decode, or a line that is no strace
output, is bad input (strict) or skipped and counted (lenient).

sg3_utils -vv output (`parsers/_sg3_verbose.py`): one command per "cdb: [..]" line.

Hands over a ready-made `commands` frame (the kernel-log layer's command table, plus the
columns of `scsitrace.scsilog.COMMAND_EXTRA`) and an empty `events` frame.
"""
from __future__ import annotations

import re

import polars as pl

from scsitrace import schema, scsi
from scsitrace.errors import BadInput
from scsitrace.model import Capture, RecordCount
from scsitrace.scsilog.events import EVENTS
from . import _lines, _sg3_verbose

ID = "sgio"
SUFFIXES = (".strace", ".strace.txt", ".sg3.txt")

PREFIX = (r"^\s*(?:\[pid\s+(?P<pid_b>\d+)\]\s+|(?P<pid_o>\d+)\s+)?"
          r"(?:(?P<ts>\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?$")
FD = r"ioctl\((?P<fd>\d+)(?:<(?P<path>[^<>]*)(?:<[^<>]*>)?>)?, SG_IO, "
# the end of an SG_IO line or of a resumed half: return value, errno, -T time
RET = (r"(?P<retpart>\)\s+= (?P<ret>-?\d+|\?)(?: (?P<errno>E[A-Z0-9]+) \([^)]*\))?"
       r"(?: <(?P<dur>\d+\.\d+)>)?)$")
# everything strace writes besides SG_IO calls
STRACE_OTHER = (r"^(?:[a-z_][a-z0-9_]*\(.*(?:\)\s+= .*|<unfinished \.\.\.>)|<\.\.\. [a-z_][a-z0-9_]* resumed>.*"
                r"|--- .* ---|\+\+\+ .* \+\+\+|strace: .*|\?\?\?.*|)$")
SNIFF = re.compile(r"(?m)^(?:\[pid\s+\d+\]\s+|\d+\s+)?(?:[\d:.]+\s+)?ioctl\(\d+(?:<[^\n]*?>)?, SG_IO, [{0N]")

DIRECTIONS = {"SG_DXFER_NONE": "none", "SG_DXFER_TO_DEV": "out", "SG_DXFER_FROM_DEV": "in",
              "SG_DXFER_TO_FROM_DEV": "bidi", "SG_DXFER_UNKNOWN": "unknown"}
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


def sniff(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    return bool(SNIFF.search(text)) or _sg3_verbose.sniff(text)


def parse(path, *, strict: bool = True, progress=None, **_opts) -> Capture:
    path = str(path)
    records = RecordCount()
    parts = list(_lines.iter_line_blocks(path, strict=strict, progress=progress))
    lines = pl.concat(parts) if parts else pl.DataFrame(schema={"line_no": pl.Int64, "text": pl.Utf8})
    lines = lines.select("line_no", pl.col("text").str.strip_chars_end("\r\n").alias("t"))
    records.read = lines.height
    with open(path, "rb") as fh:
        head = fh.read(65536).decode("utf-8", "replace")
    if not SNIFF.search(head) and _sg3_verbose.sniff(head):
        cmds, meta, notes = _sg3_verbose.commands(lines, path, strict, records, _bad)
    else:
        cmds, meta, notes = _strace(lines, path, strict, records)
    origin = int(cmds["start_ns"].min()) if cmds.height and cmds["start_ns"].is_not_null().any() else 0
    cmds = cmds.with_columns(pl.col("start_ns") - origin, pl.col("end_ns") - origin).select(
        [pl.col(k).cast(v) for k, v in COMMANDS.items()])
    return Capture(layer="scsilog", path=path, format=ID, records=records, notes=notes,
                   meta={"origin_ns": origin, "position_unit": "line", **meta},
                   frames={"events": schema.empty(EVENTS), "commands": cmds})


def _bad(bad: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> None:
    """Lines that do not decode (line_no, t, why): the first is the error (strict), or all are
    skipped and counted (lenient)."""
    if not bad.height:
        return
    bad = bad.sort("line_no")
    first = bad.row(0, named=True)
    if strict:
        raise BadInput(path, first["why"], line=first["line_no"], text=first["t"])
    records.read -= bad.height
    records.skip(bad.height, [f"{path}:{r['line_no']}: {r['why']}" for r in bad.head(5).iter_rows(named=True)])


def _strace(lines: pl.DataFrame, path: str, strict: bool, records: RecordCount):
    g = _split(lines)
    body = pl.col("body")
    sg = g.filter(pl.col("sg") | body.str.starts_with("<... ioctl resumed>"))
    rest = g.filter(~(pl.col("sg") | body.str.starts_with("<... ioctl resumed>")))
    arg = pl.col("arg")
    sg = sg.with_columns(
        pl.when(pl.col("sg") & pl.col("fd").is_not_null() & pl.col("ret").is_not_null()
                & ((arg.str.starts_with("{") & arg.str.ends_with("}")) | arg.str.contains(r"^(?:0x[0-9a-f]+|NULL)$")))
        .then(pl.lit("whole"))
        .when(pl.col("sg") & pl.col("fd").is_not_null() & body.str.ends_with(" <unfinished ...>")
              & arg.str.starts_with("{")).then(pl.lit("unfinished"))
        .when(~pl.col("sg") & pl.col("ret").is_not_null()).then(pl.lit("resumed"))
        .when(~pl.col("sg")).then(pl.lit("other"))        # an ioctl resumed half without its result
        .otherwise(pl.lit("bad")).alias("kind"))
    rest = rest.with_columns(pl.when(body.str.contains(STRACE_OTHER)).then(pl.lit("other"))
                             .otherwise(pl.lit("alien")).alias("kind"))
    g = pl.concat([sg, rest], how="diagonal_relaxed").sort("line_no")
    _bad(g.filter(pl.col("kind").is_in(["bad", "alien"])).with_columns(
        pl.when(pl.col("kind") == "bad").then(pl.lit("malformed SG_IO ioctl line (expected "
                                                     "ioctl(FD, SG_IO, {...}) = RET)"))
        .otherwise(pl.lit("not an strace line")).alias("why")), path, strict, records)
    g = g.filter(~pl.col("kind").is_in(["bad", "alien"]))
    fd_paths = _fd_paths(g)
    other = g.filter(pl.col("kind") == "other").select("body")
    # from here on only the struct text is carried (sorting three copies of each line cost a third)
    g = g.select("line_no", "pid", "t_ns", "ts", "fd", "path", "arg", "ret", "errno", "dur", "kind",
                 (body.str.starts_with("ioctl(") & body.str.ends_with("<unfinished ...>")).alias("opens"),
                 body.str.starts_with("<... ioctl resumed>").alias("closes"))
    whole = g.filter(pl.col("kind") == "whole").select(
        "line_no", "pid", "t_ns", "fd", "path", "arg", "ret", "errno", "dur",
        pl.lit(None, dtype=pl.Int64).alias("end_t_ns"))
    calls, resumed_sg = _pairs(g)
    cmds = pl.concat([whole, calls], how="diagonal_relaxed").sort("line_no")
    # resumed halves not joined to an SG_IO start: other ioctls' (or the trace began mid-call)
    leftover = int((g["kind"] == "resumed").sum()) - resumed_sg
    by_design = {"other syscalls": int(other.filter(~pl.col("body").str.contains(r"^(?:---|\+\+\+|strace: )")
                                                   & (pl.col("body") != "")).height) + leftover,
                 "signals and exits": int(other["body"].str.contains(r"^(?:---|\+\+\+)").sum()),
                 "strace messages": int(other["body"].str.starts_with("strace: ").sum()),
                 "blank": int((other["body"] == "").sum())}
    stamped = bool(g["ts"].is_not_null().any())
    timed = bool(cmds.height and cmds["dur"].is_not_null().any())
    notes = [f"{sum(by_design.values())} strace lines are not SG_IO commands (other syscalls, signals, "
             "exits, strace's messages, second halves of interrupted calls): read, skipped by design"]
    if not stamped:
        notes.append("strace without -t/-tt/-ttt: no timestamps, so no time line (segments, elapsed, IOPS)")
    notes.append("response time = the SG_IO syscall's time (strace -T)" if timed else
                 "response time = the driver's duration (strace without -T; millisecond resolution)")
    out = _decode(cmds, fd_paths, g["pid"].n_unique() > 1)
    _bad(out.filter(pl.col("why").is_not_null()), path, strict, records)
    out = out.filter(pl.col("why").is_null()).drop("why", "line_no", "t")
    meta = {"log": "strace", "skipped_by_design": by_design, "timestamps": stamped, "syscall_times": timed}
    return out, meta, notes


def _ts_ns(ts: pl.Expr) -> pl.Expr:
    """-ttt (epoch seconds) or -t/-tt (time of day; a step back of over 12 h is midnight)."""
    clock = ts.str.contains(":")
    hms = ts.str.extract_groups(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")
    frac = lambda s: s.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64).fill_null(0)  # noqa: E731
    tod = ((hms.struct[0].cast(pl.Int64) * 3600 + hms.struct[1].cast(pl.Int64) * 60
            + hms.struct[2].cast(pl.Int64)) * 1_000_000_000 + frac(hms.struct[3]))
    epoch = ts.str.split(".")
    sec = epoch.list.get(0, null_on_oob=True).cast(pl.Int64) * 1_000_000_000 + frac(epoch.list.get(1, null_on_oob=True))
    raw = pl.when(clock).then(tod).otherwise(sec)
    day = 86_400_000_000_000
    wraps = (pl.when(clock).then(raw.forward_fill().diff() < -day // 2).otherwise(False)).fill_null(False).cum_sum()
    return raw + wraps.cast(pl.Int64) * day


def _split(lines: pl.DataFrame) -> pl.DataFrame:
    """Each line's -f pid, timestamp and body; for SG_IO lines (and ioctl resumed halves) the
    fd, -y path, struct text, return value, errno and -T time. Patterns run on the short head
    and tail of a line only (a capture over a whole 600-byte line costs 30 times more)."""
    t = pl.col("t")
    pre = t.str.slice(0, 64).str.extract(r"^(\s*(?:\[pid\s+\d+\]\s+|\d+\s+)?"
                                         r"(?:(?:\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?)", 1)
    g = lines.with_columns(pre.alias("pre"))
    g = g.with_columns(pl.col("pre").str.extract_groups(PREFIX).alias("p"),
                       t.str.slice(pl.col("pre").str.len_chars()).str.strip_chars_end().alias("body")).unnest("p")
    body = pl.col("body")
    resumed = body.str.starts_with("<... ioctl resumed>")
    g = g.with_columns(
        pl.coalesce(pl.col("pid_b"), pl.col("pid_o")).cast(pl.Int64).alias("pid"), _ts_ns(pl.col("ts")).alias("t_ns"),
        (body.str.starts_with("ioctl(") & body.str.contains(", SG_IO, ", literal=True)).alias("sg"))
    part = g.filter(pl.col("sg") | resumed).with_columns(
        body.str.slice(0, 300).str.extract_groups("^" + FD).alias("f"),
        body.str.slice(-200).str.extract_groups(RET).alias("r")).unnest("f").unnest("r")
    begin = pl.when(pl.col("sg")).then(body.str.find(", SG_IO, ", literal=True) + 9).otherwise(19)
    finish = (body.str.len_chars() - pl.when(pl.col("retpart").is_not_null()).then(pl.col("retpart").str.len_chars())
              .when(body.str.ends_with(" <unfinished ...>")).then(17).otherwise(0))
    part = part.with_columns(body.str.slice(begin, finish - begin).alias("arg")).drop("retpart")
    return pl.concat([part, g.filter(~(pl.col("sg") | resumed))], how="diagonal_relaxed")


def _pairs(g: pl.DataFrame):
    """SG_IO calls split by -f into `<unfinished ...>` and `<... ioctl resumed>`: each resumed
    half belongs to its pid's previous unfinished ioctl. Returns the joined SG_IO calls and
    how many resumed halves they used."""
    halves = g.filter(pl.col("opens") | pl.col("closes")).sort("pid", "line_no")
    cols = ("kind", "arg", "line_no", "t_ns", "fd", "path")
    halves = halves.with_columns([pl.col(c).shift(1).over("pid").alias(f"p_{c}") for c in cols])
    done = halves.filter((pl.col("kind") == "resumed") & (pl.col("p_kind") == "unfinished")).select(
        pl.col("p_line_no").alias("line_no"), "pid", pl.col("p_t_ns").alias("t_ns"), pl.col("p_fd").alias("fd"),
        pl.col("p_path").alias("path"), pl.concat_str("p_arg", "arg").alias("arg"), "ret", "errno", "dur",
        pl.col("t_ns").alias("end_t_ns"))
    # an unfinished SG_IO whose pid has no resumed half after it: the trace ended (or the process died)
    nxt_resumed = pl.col("closes").shift(-1).over("pid").fill_null(False)
    open_ = halves.filter((pl.col("kind") == "unfinished") & ~nxt_resumed).select(
        "line_no", "pid", "t_ns", "fd", "path", "arg", pl.lit("?").alias("ret"),
        pl.lit(None, dtype=pl.Int64).alias("end_t_ns"))
    return pl.concat([done, open_], how="diagonal_relaxed"), done.height


def _fd_paths(g: pl.DataFrame) -> pl.DataFrame:
    """(pid, fd) -> path of the last open/openat of it before each line (traces with opens)."""
    m = g.filter(pl.col("body").str.contains(r"^open(?:at)?\(")).select(
        "line_no", "pid", pl.col("body").str.extract_groups(
            r'^open(?:at)?\((?:(?:[A-Z_]+|\d+(?:<[^>]*>)?), )?"(?P<opath>[^"]*)".*\)\s+= (?P<ofd>\d+)').alias("o")
    ).unnest("o").filter(pl.col("ofd").is_not_null())
    return m.select("line_no", pl.col("pid").fill_null(-1), pl.col("ofd").cast(pl.Int64).alias("fd"), "opath")


# the struct fields read: sg v3 (interface_id='S'), then sg v4 (guard='Q')
FIELDS = ("dxfer_direction", "cmdp", "dxfer_len", "status", "host_status", "sb_len_wr", "sbp", "resid",
          "duration", "request", "din_xfer_len", "dout_xfer_len", "din_resid", "dout_resid", "device_status",
          "transport_status", "response_len", "response")


def _fields(c: pl.DataFrame) -> pl.DataFrame:
    """`c` with one string column per FIELDS entry: the struct split once at ", " into
    name=value pairs (strace prints buffers as \\xNN escapes, so no value holds ", ")."""
    kv = c.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_row"),
                  pl.col("arg").str.strip_prefix("{").str.strip_suffix("}").str.split(", ").alias("kv")) \
        .explode("kv").select("_row", pl.col("kv").str.splitn("=", 2).struct.rename_fields(["k", "v"]).alias("kv")) \
        .unnest("kv").filter(pl.col("k").is_in(FIELDS))
    wide = kv.pivot(on="k", index="_row", values="v", aggregate_function="first") if kv.height else \
        pl.DataFrame(schema={"_row": pl.Int64})
    c = c.with_row_index("_row").with_columns(pl.col("_row").cast(pl.Int64)).join(wide, on="_row", how="left")
    return c.with_columns([pl.lit(None, dtype=pl.Utf8).alias(f) for f in FIELDS if f not in c.columns])


NUMBERS = ("dxfer_len", "status", "host_status", "sb_len_wr", "resid", "duration", "din_xfer_len",
           "dout_xfer_len", "din_resid", "dout_resid", "device_status", "transport_status", "response_len")


def _num(name: str) -> pl.Expr:
    """A number strace printed (decimal or 0x hex), null unless it fits 32 bits (every field
    of sg_io_hdr and sg_io_v4 that is read here does)."""
    v = pl.col(name)
    return pl.when(v.str.starts_with("0x")).then(_lines.checked_int(v.str.slice(2), *_lines.U32, base=16)) \
        .otherwise(_lines.checked_int(v, -2**31, 2**32 - 1))


def _why_bad() -> pl.Expr:
    """Why an SG_IO line's struct does not decode (null: it does): a CDB that is not \\xNN
    bytes, or a number outside its field's range (the error contract)."""
    why = pl.lit(None, pl.Utf8)
    for name in reversed(NUMBERS):
        why = pl.when(pl.col(name).is_not_null() & _num(name).is_null()) \
            .then(pl.lit(f"{name} is not a number in range")).otherwise(why)
    hexed = pl.col("cdb_hex")
    return pl.when(hexed.is_not_null() & ~hexed.str.contains(r"^(?:[0-9a-fA-F]{2})*$")) \
        .then(pl.lit("CDB bytes are not \\xNN escapes")).otherwise(why)


def _hex(name: str) -> pl.Expr:
    """A buffer strace printed as "\\xNN..." -> hex digits (a truncated one, `"..."...`, keeps its
    prefix); NULL or an address -> null."""
    v = pl.col(name)
    return pl.when(v.str.starts_with('"')).then(v.str.replace_all(r'[\\x".]', ""))


def _decode(c: pl.DataFrame, fd_paths: pl.DataFrame, many_pids: bool) -> pl.DataFrame:
    if not c.height:
        return pl.DataFrame(schema={**COMMANDS, "why": pl.Utf8, "line_no": pl.Int64, "t": pl.Utf8})
    v4 = pl.col("arg").str.starts_with("{guard='Q'")
    c = _fields(c).with_columns(pl.col("fd").cast(pl.Int64), pl.col("pid").fill_null(-1).alias("_pid"))
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
        (pl.col("dur").str.split(".").list.get(0).cast(pl.Int64) * 1_000_000_000
         + pl.col("dur").str.split(".").list.get(1).str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64)).alias("syscall_ns"))
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
