"""strace's lines split into their parts (parsers/sgio.py): the -f pid, the -t/-tt/-ttt time
(midnights counted), the body; for SG_IO calls and ioctl resumed halves the fd, the -y path,
the struct text, the return value, errno and the -T time; `<unfinished ...>` halves joined to
their `<... ioctl resumed>` half; the fd paths of open() lines."""
from __future__ import annotations

import numpy as np
import polars as pl

from . import _lines

PREFIX = (r"^\s*(?:\[pid\s+(?P<pid_b>\d+)\]\s+|(?P<pid_o>\d+)\s+)?"
          r"(?:(?P<ts>\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?$")
FD = r"ioctl\((?P<fd>\d+)(?:<(?P<path>[^<>]*)(?:<[^<>]*>)?>)?, SG_IO, "
# the end of an SG_IO line or of a resumed half: return value, errno, -T time
RET = (r"(?P<retpart>\)\s+= (?P<ret>-?\d+|\?)(?: (?P<errno>E[A-Z0-9]+) \([^)]*\))?"
       r"(?: <(?P<dur>\d+\.\d+)>)?)$")


DAY = 86_400_000_000_000


def _wraps(raw: pl.Expr, clock: pl.Expr, before: tuple) -> pl.Expr:
    """Midnights passed at each line of -t/-tt (time of day; a step back of over 12 h is
    midnight; `clock`: the line's time is one), `raw`: the time as printed (ns; -ttt: epoch
    seconds, never wrapped); `before`: (the last time printed in earlier blocks, midnights
    passed by then)."""
    last, wraps = before
    filled = raw.forward_fill()
    step = filled.diff() if last is None else filled.fill_null(last) - filled.fill_null(last).shift(1, fill_value=last)
    return (pl.when(clock).then(step < -DAY // 2).otherwise(False)).fill_null(False).cum_sum() + wraps


def split(lines: pl.DataFrame, st=None) -> pl.DataFrame:
    """Each line's -f pid, timestamp and body; for SG_IO lines (and ioctl resumed halves) the
    fd, -y path, struct text, return value, errno and -T time. Patterns run on the short head
    and tail of a line only (a capture over a whole 600-byte line costs 30 times more). `st`:
    the stream, whose clock (-t/-tt midnights) goes on from block to block. The rows of the
    SG_IO lines and resumed halves come first."""
    t = pl.col("t")
    pre = t.str.slice(0, 64).str.extract(r"^(\s*(?:\[pid\s+\d+\]\s+|\d+\s+)?"
                                         r"(?:(?:\d\d:\d\d:\d\d(?:\.\d+)?|\d+\.\d+)\s+)?)", 1)
    g = lines.with_columns(pre.alias("pre"))
    g = g.with_columns(pl.col("pre").str.extract_groups(PREFIX).alias("p"),
                       t.str.slice(pl.col("pre").str.len_chars()).str.strip_chars_end().alias("body")).unnest("p")
    g = _timed(g, st)
    body = pl.col("body")
    resumed = body.str.starts_with("<... ioctl resumed>")
    part = g.filter(pl.col("sg") | resumed).with_columns(
        body.str.slice(0, 300).str.extract_groups("^" + FD).alias("f"),
        body.str.slice(-200).str.extract_groups(RET).alias("r")).unnest("f").unnest("r")
    begin = pl.when(pl.col("sg")).then(body.str.find(", SG_IO, ", literal=True) + 9).otherwise(19)
    finish = (body.str.len_chars() - pl.when(pl.col("retpart").is_not_null()).then(pl.col("retpart").str.len_chars())
              .when(body.str.ends_with(" <unfinished ...>")).then(17).otherwise(0))
    part = part.with_columns(body.str.slice(begin, finish - begin).alias("arg")).drop("retpart")
    return pl.concat([part, g.filter(~(pl.col("sg") | resumed))], how="diagonal_relaxed")


def _timed(g: pl.DataFrame, st) -> pl.DataFrame:
    """`g` (line_no, t, pre, pid_b, pid_o, ts, body) with each line's pid, time (the clock of
    `st` carried on) and whether it is an SG_IO call."""
    body = pl.col("body")
    if "_raw" not in g.columns:
        # the time as printed, in one compiled pass (native/src/text/sgio.rs `strace_clock`)
        from scsitrace._native import text
        # (an empty Arrow string view crosses with a dangling buffer the Rust side refuses)
        raw = pl.DataFrame(text.strace_clock(g.select("ts")))["ns"] if g.height else pl.Series([], dtype=pl.Int64)
        g = g.with_columns(raw.alias("_raw"))
    of_day = pl.col("_of_day") if "_of_day" in g.columns else pl.col("ts").str.contains(":", literal=True)
    wraps = _wraps(pl.col("_raw"), of_day, st.clock if st is not None else (None, 0))
    g = g.with_columns(wraps.cast(pl.Int64).alias("_wraps"))
    if st is not None and g.height:
        stamped = g.filter(pl.col("_raw").is_not_null())
        if stamped.height:
            st.clock = (int(stamped["_raw"][-1]), int(g["_wraps"][-1]))
    pid_text = pl.coalesce(pl.col("pid_b"), pl.col("pid_o"))
    pid = pl.col("_pid") if "_pid" in g.columns else _lines.checked_int(pid_text, 0, 2**63 - 1)
    return g.with_columns(
        pid.alias("pid"),
        (pl.col("_raw") + pl.col("_wraps") * DAY).alias("t_ns"),
        pl.col("_sg").alias("sg") if "_sg" in g.columns else
        (body.str.starts_with("ioctl(") & body.str.contains(", SG_IO, ", literal=True)).alias("sg"),
        # a prefix strace cannot have written: the line is bad input, not a call
        pl.when(pid_text.is_not_null() & pid.is_null()).then(pl.lit("pid is not a number in range"))
        .when(pl.col("ts").is_not_null() & pl.col("_raw").is_null())
        .then(pl.lit("timestamp is not a time of day or a number of seconds in range"))
        .alias("prefix_why")).drop("_raw", "_wraps", "_sg", "_of_day", "_pid", strict=False)


HEADS = ("t", "pre", "pid_b", "pid_o", "ts", "body")
PARTS = ("fd", "path", "ret", "errno", "dur", "arg")


def split_block(buf, line_no: int, st=None) -> tuple[int, pl.DataFrame] | None:
    """`split` of a block of whole lines (bytes) cut in Rust (`native/src/text/sgio.rs`, every
    core), rows in line order, with `_kind`: what each SG_IO call or ioctl resumed half is (null
    for other lines; `parsers/sgio.py:_classify`): (lines, the split lines), or None where the
    Rust cut declines the block (a byte that is not ASCII, a NUL, a field an int64 cannot
    hold: `split`'s)."""
    from scsitrace._native import text
    found = text.strace_block(np.frombuffer(buf, dtype=np.uint8))
    if found is None:
        return None
    n = found.lines
    g = pl.DataFrame({"line_no": pl.int_range(line_no, line_no + n, eager=True, dtype=pl.Int64),
                      **{k: _lines.strings(getattr(found, k)) for k in HEADS},
                      "_sg": pl.DataFrame(found.sg)["value"],      # (whether an SG_IO call: `_timed`)
                      "_kind": pl.DataFrame(found.kind)["value"],  # (SG_IO calls' kinds: `sgio._classify`)
                      # (each line's stamp in ns as printed, whether a time of day, its pid: `_timed`)
                      **{f"_{k}": pl.DataFrame(getattr(found, k))["value"] for k in ("raw_ns", "of_day", "pid")}})
    g = g.rename({"_raw_ns": "_raw"})
    g = _timed(g, st)
    return n, g.with_columns(_lines.strings(getattr(found, k)).alias(k) for k in PARTS)


def pairs(g: pl.DataFrame, final: bool = True):
    """SG_IO calls split by -f into `<unfinished ...>` and `<... ioctl resumed>`: each resumed
    half belongs to its pid's previous unfinished ioctl (joined in one compiled pass,
    `native/src/text/sgio.rs:strace_pairs`, with both halves' struct texts). Returns the
    joined SG_IO calls, how many resumed halves they used, and (unless `final`) the unfinished
    halves that are their pid's last line so far (rows of `g`: their resumed half may come in
    the next block)."""
    halves = g.filter(pl.col("opens") | pl.col("closes"))
    if not halves.height:       # (no empty frame crosses to Rust: see _timed)
        return pl.DataFrame(schema={"line_no": pl.Int64, "pid": pl.Int64, "t_ns": pl.Int64, "fd": pl.Utf8,
                                    "path": pl.Utf8, "arg": pl.Utf8, "ret": pl.Utf8, "errno": pl.Utf8,
                                    "dur": pl.Utf8, "end_t_ns": pl.Int64}), 0, halves.select(g.columns)
    from scsitrace._native import text
    got = text.strace_pairs(halves.select("line_no", "pid", "kind", pl.col("closes").cast(pl.Int64), "arg"), final)
    calls = pl.DataFrame(got.calls)
    start, end = calls["start"], calls["end"]
    begun = halves.select(pl.col("line_no", "pid", "t_ns", "fd", "path").gather(start))
    ended = halves.select(pl.col("ret", "errno", "dur").gather(end), pl.col("t_ns").gather(end).alias("end_t_ns"))
    joined = pl.concat([begun, calls.select("arg"), ended], how="horizontal").with_columns(
        pl.when(end.is_null()).then(pl.lit("?")).otherwise(pl.col("ret")).alias("ret"))
    held = halves[pl.DataFrame(got.held)["row"]].select(g.columns)
    return joined, got.used, held


def fd_paths(g: pl.DataFrame) -> pl.DataFrame:
    """(pid, fd) -> path of the last open/openat of it before each line (traces with opens)."""
    m = g.filter(pl.col("body").str.contains(r"^open(?:at)?\(")).select(
        "line_no", "pid", pl.col("body").str.extract_groups(
            r'^open(?:at)?\((?:(?:[A-Z_]+|\d+(?:<[^>]*>)?), )?"(?P<opath>[^"]*)".*\)\s+= (?P<ofd>\d+)').alias("o")
    ).unnest("o").filter(pl.col("ofd").is_not_null())
    return m.select("line_no", pl.col("pid").fill_null(-1), pl.col("ofd").cast(pl.Int64).alias("fd"), "opath")
