"""SCSI kernel logs: ftrace `scsi:scsi_dispatch_cmd_{start,done,error,timeout}` events (the
`trace` file or `trace-cmd report`), and dmesg lines of the kernel's SCSI logging
(`scsi_logging_level`: "Send:", "Done:"/"FAILED", each followed by its "CDB:" line).

Hands over one `events` frame (schema `scsitrace.scsilog.EVENTS`): one row per event with
its device (host:channel:id:lun), tag, time, CDB bytes and outcome. Other lines (block
events, ordinary kernel messages, comments) are read and ignored; a line that looks like
a SCSI event but does not parse is bad input (strict) or skipped and counted (lenient).
"""
from __future__ import annotations

import re

import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput
from scsitrace.model import Capture, RecordCount
from scsitrace.scsilog.events import EVENTS
from . import _lines

ID = "scsilog"
SUFFIXES = (".ftrace.txt", ".ftrace", ".dmesg", "dmesg.txt", ".trace")

FTRACE = (r"^\s*(?P<task>.+?)-(?P<pid>\d+)\s+(?:\(\s*[-\d]+\)\s+)?\[(?P<cpu>\d+)\]\s+(?:\S{4,5}\s+)?"
          r"(?P<ts>\d+\.\d+):\s+scsi_dispatch_cmd_(?P<kind>start|done|error|timeout):\s+"
          r"host_no=(?P<host>\d+) channel=(?P<channel>\d+) id=(?P<id>\d+) lun=(?P<lun>\d+) "
          r"(?:.*? driver_tag=(?P<tag>-?\d+))?.*?cmnd=\((?P<cname>[A-Z0-9_]+).*?raw=(?P<raw>[0-9a-f ]+)\)"
          r"(?: rtn=(?P<rtn>-?\d+))?(?: result=\((?P<result>[^)]*)\))?\s*$")
FTRACE_HINT = "scsi_dispatch_cmd_"
DMESG = (r"^(?:<\d+>)?\[\s*(?P<ts>\d+\.\d+)\] (?:sd|sr|st|scsi|ses|sg) (?P<host>\d+):(?P<channel>\d+):"
         r"(?P<id>\d+):(?P<lun>\d+): (?:\[\w+\] )?(?:tag#(?P<tag>\d+) )?"
         r"(?P<kind>Send:|Done:|FAILED|CDB:|timing out command)(?P<rest>.*)$")
DMESG_HINT = r"(?:Send:|Done:|FAILED|CDB:|timing out command)"
DMESG_LINE = r"^(?:<\d+>)?\[\s*\d+\.\d+\] "


def sniff(head: bytes) -> bool:
    text = head.decode("utf-8", "replace")
    if "scsi_dispatch_cmd_" in text:
        return True
    if text.startswith("# tracer:"):
        return True
    lines = text.splitlines()[:50]
    return bool(lines) and all(re.match(DMESG_LINE, ln) for ln in lines[:-1] if ln) and any(
        re.search(r" (?:sd|scsi) \d+:\d+:\d+:\d+: ", ln) for ln in lines)


def parse(path, *, strict: bool = True, progress=None, **_opts) -> Capture:
    path = str(path)
    records = RecordCount()
    parts = []
    for block in _lines.iter_line_blocks(path, strict=strict, progress=progress):
        parts.append(_decode_block(block, path, strict, records))
    ev = pl.concat(parts) if parts else pl.DataFrame(schema=EVENTS)
    source = "ftrace" if ev.height and (ev["source"] == "ftrace").all() else (
        "dmesg" if ev.height else "none")
    origin = int(ev["t_ns"].min()) if ev.height else 0
    ev = ev.with_columns((pl.col("t_ns") - origin).alias("t_ns"))
    schema.validate(ev, EVENTS, "events")
    return Capture(layer="scsilog", path=path, format=ID,
                   meta={"origin_ns": origin, "log": source, "position_unit": "line"},
                   records=records, frames={"events": ev})


def _seconds_ns(col: str) -> pl.Expr:
    sec = pl.col(col).str.split(".")
    frac = sec.list.get(1).str.slice(0, 9).str.pad_end(9, "0")
    return sec.list.get(0).cast(pl.Int64) * 1_000_000_000 + frac.cast(pl.Int64)


def _decode_block(block: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    t = pl.col("text").str.strip_chars_end("\r\n")
    lines = block.with_columns(t.alias("t"))
    ft = lines.filter(pl.col("t").str.contains(FTRACE_HINT, literal=True))
    dm = lines.filter(~pl.col("t").str.contains(FTRACE_HINT, literal=True)
                      & pl.col("t").str.contains(DMESG_LINE) & pl.col("t").str.contains(DMESG_HINT)
                      & pl.col("t").str.contains(r" \d+:\d+:\d+:\d+: "))
    records.read += lines.height
    out = []
    if ft.height:
        out.append(_ftrace(ft, path, strict, records))
    if dm.height:
        out.append(_dmesg(dm, path, strict, records))
    return pl.concat(out) if out else pl.DataFrame(schema=EVENTS)


def _bad(bad: pl.DataFrame, reason: str, path: str, strict: bool, records: RecordCount) -> None:
    if not bad.height:
        return
    first = bad.row(0, named=True)
    if strict:
        raise BadInput(path, reason, line=first["line_no"], text=first["t"])
    records.read -= bad.height
    records.skip(bad.height, [f"{path}:{r['line_no']}: {reason}" for r in bad.head(5).iter_rows(named=True)])


def _ftrace(ft: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    g = ft.select("line_no", "t", pl.col("t").str.extract_groups(FTRACE).alias("g")).unnest("g")
    _bad(g.filter(pl.col("ts").is_null()), "malformed scsi_dispatch_cmd event", path, strict, records)
    g = g.filter(pl.col("ts").is_not_null())
    result = pl.col("result")
    return g.select(
        _seconds_ns("ts").alias("t_ns"),
        pl.col("kind"),
        pl.format("{}:{}:{}:{}", "host", "channel", "id", "lun").alias("device"),
        pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.col("raw").str.replace_all(" ", "").str.decode("hex").alias("cdb"),
        pl.when(result.is_not_null()).then(result.str.extract(r"host=(\w+)")).alias("host_byte"),
        pl.when(result.is_not_null()).then(result.str.extract(r"status=SAM_STAT_(\w+)")
                                           .str.replace_all("_", " ")).alias("status"),
        pl.col("rtn").cast(pl.Int64, strict=False).alias("rtn"),
        pl.lit("ftrace").alias("source"),
        pl.col("line_no").alias("pos"),
    ).cast(EVENTS)


def _dmesg(dm: pl.DataFrame, path: str, strict: bool, records: RecordCount) -> pl.DataFrame:
    """Send/Done/FAILED/timing-out lines, each given the CDB of the "CDB:" line after it."""
    g = dm.select("line_no", "t", pl.col("t").str.extract_groups(DMESG).alias("g")).unnest("g")
    _bad(g.filter(pl.col("ts").is_null()), "malformed SCSI logging line", path, strict, records)
    g = g.filter(pl.col("ts").is_not_null()).with_columns(
        pl.format("{}:{}:{}:{}", "host", "channel", "id", "lun").alias("device"))
    key = ["device", "tag"]
    is_cdb = pl.col("kind") == "CDB:"
    # "CDB: Read(10) 28 00 ..." (older kernels: "CDB: Read(10): 28 00 ...")
    cdb_hex = pl.col("rest").str.extract(r"((?:\s[0-9a-f]{2})+)\s*$").str.replace_all(" ", "")
    g = g.with_columns(cdb_hex.alias("cdb_hex"))
    nxt = g.sort("line_no").with_columns(
        pl.col("cdb_hex").shift(-1).over(key).alias("next_cdb"),
        is_cdb.shift(-1).over(key).alias("next_is_cdb"))
    ev = nxt.filter(~is_cdb).sort("line_no")
    # a failed command is logged twice ("FAILED Result:" from the midlayer, then "Done:" from
    # the logging hook): keep the first end of a command
    prev_kind = pl.col("kind").shift(1).over(key)
    ends = pl.col("kind").is_in(["Done:", "FAILED"])
    ev = ev.filter(~(ends & prev_kind.is_in(["Done:", "FAILED"]).fill_null(False)))
    kind = (pl.when(pl.col("kind") == "Send:").then(pl.lit("start"))
            .when(pl.col("kind") == "timing out command").then(pl.lit("timeout"))
            .when(pl.col("rest").str.contains("TIMEOUT")).then(pl.lit("timeout"))
            .otherwise(pl.lit("done")))
    result = pl.col("rest")
    return ev.select(
        _seconds_ns("ts").alias("t_ns"),
        kind.alias("kind"),
        "device",
        pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.when(pl.col("next_is_cdb").fill_null(False)).then(pl.col("next_cdb")).str.decode("hex").alias("cdb"),
        result.str.extract(r"hostbyte=(\w+)").alias("host_byte"),
        pl.when(pl.col("kind") == "FAILED").then(pl.lit("FAILED"))
        .otherwise(result.str.extract(r"^\s*([A-Z_]+)").replace({"SUCCESS": "GOOD"})).alias("status"),
        pl.lit(None, dtype=pl.Int64).alias("rtn"),
        pl.lit("dmesg").alias("source"),
        pl.col("line_no").alias("pos"),
    ).cast(EVENTS)
