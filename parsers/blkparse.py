"""blkparse's default text output: one line per event, optionally followed by its summary
(per-CPU and total counters, throughput, "Events (...): N entries").

    8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [dd]
  dev    cpu  sequence   seconds.ns     pid act rwbs  rest (by action)

Every line is decoded with polars regular expressions, a block of lines at a time. The
summary block is recognised and skipped; any other line that is not an event is a bad line
(BadInput naming the line in strict mode, skipped and counted in lenient mode).
"""
from __future__ import annotations

import re

import polars as pl

from scsitrace import schema
from scsitrace.block import events as block
from scsitrace.errors import BadInput
from scsitrace.model import Capture
from . import _blktrace_gaps, _counters, _lines

ID = "blkparse"
SUFFIXES = (".blkparse", ".blkparse.txt")

EVENT = (r"^\s*(?P<major>\d+),(?P<minor>\d+)\s+(?P<cpu>\d+)\s+(?P<seq>\d+)\s+(?P<sec>\d+)\.(?P<nsec>\d{9})"
         r"\s+(?P<pid>\d+)\s+(?P<act>[A-Za-z]{1,2})\s+(?P<rwbs>[A-Z]+)(?:\s+(?P<rest>.*?))?\s*$")
_EVENT_RE = re.compile(EVENT)
# first lines of blkparse's trailing summary; everything from there on is counters
SUMMARY_START = r"^(CPU\d+ \(|Total \(|Throughput \(|Events \(|Skips: |Input file )"
LETTER_CODE = {**block.TA, "UT": block.TA["T"], "m": 0}
RWBS_BITS = {"R": "READ", "W": "WRITE", "D": "DISCARD", "A": "AHEAD", "S": "SYNC", "M": "META"}
ERROR_IN_BRACKETS = ("C", "R")
MAX_SECTOR = (0, 2**63 - 1)             # u64 in the kernel; int64 here
MAX_NSECT = (0, (2**32 - 1) // 512)     # blk_io_trace.bytes is 32 bits


def sniff(head: bytes) -> bool:
    for raw in head.splitlines()[:20]:
        text = raw.decode("utf-8", "replace").strip()
        if text:
            return bool(_EVENT_RE.match(text))
    return False


def _category_bits(rwbs: pl.Expr) -> pl.Expr:
    """blkparse's RWBS letters back to BLK_TC_* bits (<< 16): F first = flush, F later = FUA."""
    bits = pl.lit(0, dtype=pl.UInt32)
    bits = bits | pl.when(rwbs.str.starts_with("F")).then(pl.lit(block.TC["FLUSH"], pl.UInt32)).otherwise(0)
    body = pl.when(rwbs.str.starts_with("F")).then(rwbs.str.slice(1)).otherwise(rwbs)
    bits = bits | pl.when(body.str.slice(1).str.contains("F")).then(pl.lit(block.TC["FUA"], pl.UInt32)).otherwise(0)
    for letter, name in RWBS_BITS.items():
        bits = bits | pl.when(body.str.contains(letter, literal=True)).then(
            pl.lit(block.TC[name], pl.UInt32)).otherwise(0)
    return (bits.cast(pl.UInt32) * (1 << block.TC_SHIFT)).cast(pl.UInt32)


# The action-specific tail, one pattern for all: "S + N", "S / NEW" (split), "<- (maj,min) S"
# (remap), "[comm]" or "[error]", and the unplug count after the brackets.
REST = (r"^(?:(?P<sector>\d+)(?: \+ (?P<nsect>\d+)| / (?P<split_sector>\d+))?)?\s*"
        r"(?:<- \((?P<from_major>\d+),(?P<from_minor>\d+)\) (?P<from_sector>\d+))?\s*"
        r"(?:\[(?P<bracket>.*)\])?\s*(?P<unplugs>\d+)?\s*$")


def _decode(lines: pl.DataFrame) -> pl.DataFrame:
    """Every line -> its fields, or `reason` why it is not an event (null for blank/summary)."""
    text = pl.col("text").str.strip_chars_end("\r\n")
    df = lines.with_columns(text.alias("t"))
    df = df.with_columns(pl.col("t").str.extract_groups(EVENT).alias("g")).unnest("g")
    df = df.with_columns(pl.col("rest").fill_null("").str.extract_groups(REST).alias("r")).unnest("r")
    ranges = [(~_lines.bad_bytes(pl.col("t")), "NUL byte or bytes that are not UTF-8 in an event line"),
              (pl.col("rest").fill_null("").str.contains(REST), "unrecognised event details after the action"),
              (pl.all_horizontal(_lines.checked_int(pl.col(c), *_lines.U32).is_not_null()
                                 for c in ("cpu", "seq", "pid")), "CPU, sequence or PID outside 0..2^32-1"),
              (_lines.checked_int(pl.col("major"), 0, 4095).is_not_null()
               & _lines.checked_int(pl.col("minor"), 0, (1 << 20) - 1).is_not_null(),
               "device number out of range (major 0-4095, minor 0-1048575)"),
              (_lines.seconds_ns(pl.concat_str("sec", pl.lit("."), "nsec")).is_not_null(),
               "timestamp beyond int64 nanoseconds"),
              (pl.all_horizontal(pl.col(c).is_null() | _lines.checked_int(pl.col(c), *MAX_SECTOR).is_not_null()
                                 for c in ("sector", "split_sector", "from_sector")), "sector out of range"),
              (pl.col("nsect").is_null() | _lines.checked_int(pl.col("nsect"), *MAX_NSECT).is_not_null(),
               "sector count out of range (blktrace counts bytes in 32 bits)"),
              (pl.col("unplugs").is_null() | _lines.checked_int(pl.col("unplugs"), *_lines.U32).is_not_null(),
               "unplug count out of range")]
    df = df.with_columns([ok.alias(f"_ok{i}") for i, (ok, _) in enumerate(ranges)])
    df = df.with_columns(pl.col("sector", "nsect", "split_sector", "from_sector", "unplugs")
                         .cast(pl.Int64, strict=False))
    blank = pl.col("t").str.strip_chars() == ""
    known = pl.col("act").is_in(list(LETTER_CODE))
    reason = (pl.when(blank).then(None)
              .when(pl.col("major").is_null()).then(pl.lit("not a blkparse event line"))
              .when(~known).then(pl.lit("unknown action")))
    for i, (_, why) in enumerate(ranges):
        reason = reason.when(~pl.col(f"_ok{i}")).then(pl.lit(why))
    reason = reason.otherwise(None)
    return df.with_columns(reason.alias("reason"), blank.alias("blank")).drop([f"_ok{i}" for i in range(len(ranges))])


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    path = str(path)
    cap = Capture(layer="block", path=path, format=ID)
    frames, bad_total, examples, counters = [], 0, [], {}
    in_summary = False
    for lines in _lines.iter_line_blocks(path, strict=strict, progress=progress):
        if in_summary:
            _counters.blkparse_counters(lines.select(pl.col("text").str.strip_chars_end("\r\n").alias("t")), counters)
            continue
        df = _decode(lines)
        summary_at = df.filter(pl.col("t").str.contains(SUMMARY_START))
        if summary_at.height:
            first = summary_at["line_no"][0]
            _counters.blkparse_counters(df.filter(pl.col("line_no") >= first), counters)
            df = df.filter(pl.col("line_no") < first)
            in_summary = True
        bad = df.filter(pl.col("reason").is_not_null())
        if bad.height:
            row = bad.row(0, named=True)
            if strict:
                raise BadInput(path, row["reason"], line=row["line_no"], text=row["t"])
            bad_total += bad.height
            examples += [f"{path}:{r['line_no']}: {r['reason']}" for r in bad.head(5).iter_rows(named=True)]
        frames.append(df.filter(pl.col("reason").is_null() & ~pl.col("blank")))
    if bad_total:
        cap.records.skip(bad_total, examples)
    ev = pl.concat(frames) if frames else _decode(pl.DataFrame(schema={"line_no": pl.Int64, "text": pl.Utf8}))
    messages = ev.filter(pl.col("act") == "m")
    ev = ev.filter(pl.col("act") != "m")
    raw = _raw_events(ev)
    order = block.merge_order([raw["time_abs"].to_numpy()])
    events = block.finish_events(raw if order is None else raw[order])
    cap.records.read = raw.height + messages.height
    gaps = _sequence_gaps(raw)
    cap.notes += _blktrace_gaps.gap_notes(gaps) + _counters.blkparse_notes(
        {k: v for k, v in counters.items() if not (k == "skips" and gaps)}, cap.records.read + bad_total)
    cap.frames["events"] = events.drop("time_abs")
    names = ev.filter(~pl.col("act").is_in(ERROR_IN_BRACKETS) & pl.col("bracket").is_not_null()) \
        .group_by(pl.col("pid").cast(pl.Int64)).agg(pl.col("bracket").first()).sort("pid")
    cap.frames["processes"] = pl.DataFrame({"pid": names["pid"], "name": names["bracket"]},
                                           schema=block.PROCESSES)
    cap.meta.update({"files": [path], "origin_ns": 0,
                     "messages": [{"t_ns": int(r["sec"]) * 10**9 + int(r["nsec"]), "text": r["rest"]}
                                  for r in messages.head(1000).iter_rows(named=True)]})
    return cap


def _raw_events(ev: pl.DataFrame) -> pl.DataFrame:
    dev = lambda major, minor: (pl.col(major).cast(pl.UInt32) * (1 << 20) + pl.col(minor).cast(pl.UInt32))  # noqa: E731
    code = pl.col("act").replace_strict(LETTER_CODE, return_dtype=pl.UInt32)
    is_err = pl.col("act").is_in(ERROR_IN_BRACKETS)
    remap = pl.col("from_sector").is_not_null() & (pl.col("act") == "A")
    split = pl.col("split_sector").is_not_null()
    out = ev.select(
        (pl.col("sec").cast(pl.Int64) * 1_000_000_000 + pl.col("nsec").cast(pl.Int64)).alias("time_abs"),
        pl.col("seq").cast(pl.Int64), pl.col("cpu").cast(pl.Int32),
        (code | _category_bits(pl.col("rwbs"))).alias("action"),
        dev("major", "minor").alias("device"),
        pl.coalesce("sector", pl.lit(0, pl.Int64)).alias("sector"),
        (pl.coalesce("nsect", pl.lit(0, pl.Int64)) * block.SECTOR).alias("bytes"),
        pl.col("pid").cast(pl.Int64),
        pl.when(is_err).then(pl.col("bracket").cast(pl.Int16, strict=False)).otherwise(0)
        .fill_null(0).cast(pl.Int16).alias("error"),
        pl.when(remap).then(dev("from_major", "from_minor")).otherwise(0).cast(pl.UInt32).alias("pdu_dev"),
        pl.coalesce(pl.when(remap).then("from_sector"), pl.lit(0, pl.Int64)).alias("pdu_sector"),
        pl.coalesce("unplugs", "split_sector", pl.lit(0, pl.Int64)).alias("pdu_int"),
        remap.alias("has_remap"),
        (split | pl.col("unplugs").is_not_null()).alias("has_int"),
        pl.lit(0, pl.Int16).alias("file"),
        pl.col("line_no").alias("position"),
    )
    return schema.validate(out, block.RAW_EVENTS, "blkparse raw events")


def _sequence_gaps(raw: pl.DataFrame) -> dict[int, int]:
    """{cpu: events missing} from jumps in each CPU's sequence numbers, in file order."""
    if raw.height < 2:
        return {}
    step = raw.select("cpu", "position", "seq").sort("position").with_columns(
        pl.col("seq").diff().over("cpu").alias("step"))
    lost = step.filter(pl.col("step") > 1).group_by("cpu").agg((pl.col("step") - 1).sum().alias("n"))
    return {int(c): int(n) for c, n in lost.iter_rows()}
