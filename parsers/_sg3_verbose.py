"""sg3_utils programs' verbose output (-vv): one SCSI command per "<name> cdb: [..]" line
(sg_dd at verbose=3: "Read(10) [..]").

    open /dev/sg0 with flags=0x800
        inquiry cdb: [12 01 de 00 fc 00]
    Fixed format, current; Sense key: Illegal Request
     Raw sense data (in hex), sb_len=18, embedded_len=18
            70 00 05 00 00 00 00 0a  00 00 00 00 24 00 00 00
          duration=20 ms
        inquiry: pass-through requested 252 bytes (data-in) but got 36 bytes

What follows a cdb line up to the next one belongs to that command: the device from the
last "open DEV with flags" line, sense key/ASC/ASCQ from the raw sense bytes, the driver's
duration (-vvv), bytes requested and received. The programs print no times, so commands
have no place on a time line; the rest of their output is read and skipped by design. A
cdb line whose bytes do not decode is bad input.
"""
from __future__ import annotations

import os
import re

import numpy as np
import polars as pl

from scsitrace import schema, scsi

from . import _lines

# "    inquiry cdb: [12 00 ...]" (sg_cmds_*, most programs), "Read(10) [28 00 ...]" (sg_dd verbose=3)
CDB = (r"^(?:\s+(?P<name>\S.*?) cdb: \[?(?P<hex>[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2})*)\]?"
       r"|\s*(?P<name2>[A-Z][A-Za-z ]*\(\d+\)) \[(?P<hex2>[0-9a-fA-F]{2}(?: [0-9a-fA-F]{2})*)\])\s*$")
CDB_HINT = r"^(?:\s+\S.* cdb: |\s*[A-Z][A-Za-z ]*\(\d+\) \[)"
SNIFF = re.compile(r"(?m)^(?:\s+[^\n]{1,60} cdb: \[?|\s*[A-Z][A-Za-z ]*\(\d+\) \[)[0-9a-f]{2}(?: [0-9a-f]{2}){5,}\]?\s*$")
OPEN = r"^open (?P<dev>\S+) with flags=0x[0-9a-f]+"
RAW_SENSE = r"^\s+Raw sense data \(in hex\)"
HEX_LINE = r"^\s+((?:[0-9a-f]{2}\s+){3,}[0-9a-f]{2})\s*$"


def sniff(text: str) -> bool:
    return bool(SNIFF.search(text))


NUMBERS = (r"duration=(\d+) ms", r"requested (\d+) bytes", r"requested \d+ bytes .*?but got (\d+) bytes")
BROKEN = "a duration or byte count beyond 32 bits"
FIELDS = {"line_no": pl.Int64, "t": pl.Utf8, "why": pl.Utf8, "hint": pl.Boolean, "cdb": pl.Binary, "dev": pl.Utf8,
          "raw_header": pl.Boolean, "sense_hex": pl.Utf8, "sense_key": pl.Utf8, "duration_ms": pl.Int64,
          "requested": pl.Int64, "got": pl.Int64, "dir": pl.Utf8}
"""What each line holds for `commands` (`fields`, or the compiled scanner: `scan`): why it is
broken (bytes that are no text, a number past 32 bits), whether it looks like a CDB line and
its CDB where it is one, the device an open line names, whether it heads raw sense data, the
sense bytes of a line of hex bytes, and the fields of the programs' notes."""


def fields(lines: pl.DataFrame) -> pl.DataFrame:
    """FIELDS of lines (line_no, t) by the patterns."""
    t = pl.col("t")
    why = pl.when(_lines.bad_bytes(t)).then(pl.lit("NUL byte or bytes that are not UTF-8 in a line"))
    for rx in NUMBERS:
        value = t.str.extract(rx, 1)
        why = why.when(value.is_not_null() & _lines.checked_int(value, *_lines.U32).is_null()).then(pl.lit(BROKEN))
    cdb = t.str.extract_groups(CDB)
    return lines.select(
        "line_no", "t", why.otherwise(None).alias("why"), t.str.contains(CDB_HINT).alias("hint"),
        pl.coalesce(cdb.struct.field("hex"), cdb.struct.field("hex2")).str.replace_all(" ", "").str.to_lowercase()
        .str.decode("hex").alias("cdb"),
        t.str.extract(OPEN, 1).alias("dev"),
        t.str.contains(RAW_SENSE).alias("raw_header"),
        t.str.extract(HEX_LINE, 1).str.replace_all(r"\s+", "").alias("sense_hex"),
        t.str.extract(r"Sense key: ([A-Za-z ]+?)\s*$", 1).alias("sense_key"),
        t.str.extract(r"duration=(\d+) ms", 1).cast(pl.Int64, strict=False).alias("duration_ms"),
        t.str.extract(r"requested (\d+) bytes", 1).cast(pl.Int64, strict=False).alias("requested"),
        t.str.extract(r"requested \d+ bytes .*?but got (\d+) bytes", 1).cast(pl.Int64, strict=False).alias("got"),
        t.str.extract(r"\(data-(in|out)\)", 1).alias("dir"),
    ).cast(FIELDS)


THREADS = max(1, min(os.cpu_count() or 1, 4))
SMALL_BLOCK = 1 << 16


def scan(buf, path: str, line_no: int, strict: bool, parts: int | None = None) -> pl.DataFrame:
    """FIELDS of a block of whole lines: the lines the compiled scanner is certain of
    (scsitrace._native.text.sg3_block, Rust: no regex, the block's lines on every core), the
    others by the patterns (`fields`), these after those. A line that is not UTF-8 raises (strict)
    or is a bad line (lenient), as the line layer has it."""
    from scsitrace._native import text
    data = np.frombuffer(buf, np.uint8)
    out = text.sg3_block(data, parts if parts is not None else THREADS if len(data) >= SMALL_BLOCK else 1)
    taken = pl.DataFrame(out.lines)
    other = pl.DataFrame(out.other)
    left = _lines.fallback_frame([(line_no + k, bytes(data[a:b])) for k, a, b in other.iter_rows()], path, strict)
    rest = fields(left.select("line_no", pl.col("text").str.strip_chars_end("\r\n").alias("t")))
    n = taken.height
    no = pl.lit(None)
    taken = taken.select(
        (pl.col("line") + line_no).alias("line_no"), no.alias("t"), no.alias("why"),
        pl.col("cdb").is_not_null().alias("hint"), "cdb", "dev", pl.lit(False).alias("raw_header"),
        *(no.alias(c) for c in ("sense_hex", "sense_key")), "duration_ms",
        *(no.alias(c) for c in ("requested", "got", "dir"))).cast(FIELDS)
    if not rest.height:
        return taken
    return rest if not n else pl.concat([taken, rest], rechunk=False)   # `commands` sorts what it needs


def commands(lines: pl.DataFrame, path: str, strict: bool, records, bad, dev: str | None = None) -> tuple:
    """(commands, meta, notes, the device last opened) of whole commands' lines (FIELDS, or
    line_no and t: read by `fields`); `dev`: the device opened before them."""
    if "why" not in lines.columns:
        lines = fields(lines)
    # a line with bytes that are not text, or a number beyond 32 bits, is bad input
    broken = lines.filter(pl.col("why").is_not_null())
    skipped_before = records.skipped
    bad(broken.select("line_no", "t", "why"), path, strict, records)
    lines = lines.filter(pl.col("why").is_null())
    bad(lines.filter(pl.col("hint") & pl.col("cdb").is_null()).select("line_no", "t").with_columns(
        pl.lit("malformed sg3_utils cdb line (expected NAME cdb: [hex bytes])").alias("why")), path, strict, records)
    cdbs = lines.filter(pl.col("cdb").is_not_null()).select("line_no", "cdb")
    opens = lines.filter(pl.col("dev").is_not_null()).select("line_no", "dev")
    raw_at = lines.filter(pl.col("raw_header")).select((pl.col("line_no") + 1).alias("line_no"))
    raw = lines.join(raw_at, on="line_no").select("line_no", pl.col("sense_hex").alias("sense"))
    notes = lines.select("line_no", "sense_key", "duration_ms", "requested", "got", "dir").join(
        raw, on="line_no", how="left")
    has = pl.any_horizontal(pl.exclude("line_no").is_not_null())
    notes = notes.filter(has)
    cdbs = cdbs.sort("line_no")
    if opens.height:
        cdbs = cdbs.join_asof(opens.sort("line_no"), on="line_no", strategy="backward")
        cdbs = cdbs.with_columns(pl.col("dev").fill_null(pl.lit(dev, dtype=pl.Utf8)))
        dev = opens.sort("line_no")["dev"][-1]
    else:
        cdbs = cdbs.with_columns(pl.lit(dev, dtype=pl.Utf8).alias("dev"))
    c = pl.concat([cdbs, _per_command(notes, cdbs["line_no"].to_numpy())], how="horizontal")
    out = finished(c)
    other = lines.height - cdbs.height - (records.skipped - skipped_before - broken.height)
    meta = {"log": "sg3_utils", "skipped_by_design": {"program output": other},
            "timestamps": False, "syscall_times": False}
    return out, meta, notes_of(other), dev


def finished(c: pl.DataFrame) -> pl.DataFrame:
    """The `commands` of commands with their fields (line_no, cdb, dev, and each note field's
    first value: `_per_command`, or the compiled reader's `Sg3Block.commands`)."""
    sb = lambda k: pl.col("sense").str.slice(2 * k, 2).str.to_integer(base=16, strict=False)  # noqa: E731
    fixed = pl.col("sense").str.slice(0, 2).is_in(["70", "71", "f0", "f1"])
    null_i = pl.lit(None, dtype=pl.Int64)
    return c.select(
        pl.col("dev").fill_null("?").alias("device"), null_i.alias("tag"),
        "cdb",
        pl.col("line_no").alias("pos"), null_i.alias("start_ns"), null_i.alias("end_ns"),
        pl.when(pl.col("sense_key").is_not_null() | pl.col("sense").is_not_null())
        .then(pl.lit(scsi.STATUS_NAMES[0x02])).alias("status"),
        pl.lit(None, dtype=pl.Utf8).alias("host_byte"), pl.lit(None, dtype=pl.Utf8).alias("reason"),
        (pl.col("duration_ms") * 1_000_000).alias("response_ns"),
        pl.col("requested").alias("bytes"), pl.col("got").alias("data_bytes"),
        pl.col("dir").replace_strict({"in": "in", "out": "out"}, default=None).alias("direction"),
        pl.coalesce(pl.when(fixed).then(sb(2) & 0x0F).otherwise(sb(1) & 0x0F)
                    .replace_strict(scsi.SENSE_KEY_NAMES, default=None, return_dtype=pl.Utf8),
                    pl.col("sense_key")).alias("sense_key"),
        pl.when(fixed).then(sb(12)).otherwise(sb(2)).alias("asc"),
        pl.when(fixed).then(sb(13)).otherwise(sb(3)).alias("ascq"),
        null_i.alias("syscall_ns"), (pl.col("duration_ms") * 1_000_000).alias("driver_ns"), null_i.alias("pid"))


def read_block(got, path: str, strict: bool, records, bad) -> tuple[pl.DataFrame, int]:
    """(commands, lines of the programs' own output) of what the compiled reader
    (`scsitrace._native.text.Sg3Reader`: the commands as `finished` makes them) gave for a
    block: its bad lines reported as
    `commands` reports them (the lines with a number past 32 bits, then the malformed CDB
    lines)."""
    records.read += got.lines
    wrong = pl.DataFrame(got.bad)
    if wrong.height:
        bad(wrong.filter(pl.col("broken")).drop("broken"), path, strict, records)
        bad(wrong.filter(~pl.col("broken")).drop("broken"), path, strict, records)
    return pl.DataFrame(got.commands), got.other


NOTE_FIELDS = ("sense_key", "duration_ms", "requested", "got", "dir", "sense")


def _per_command(notes: pl.DataFrame, commands: np.ndarray) -> pl.DataFrame:
    """Per command (the line numbers of its cdb line, in order), each note field's first value
    at or after its line and before the next command's (the notes before the first command
    belong to none)."""
    if not notes["line_no"].is_sorted():
        notes = notes.sort("line_no")
    owner = np.searchsorted(commands, notes["line_no"].to_numpy(), side="right") - 1
    out = {}
    for name in NOTE_FIELDS:
        column = notes[name]
        rows = np.flatnonzero(column.is_not_null().to_numpy() & (owner >= 0))
        owners, first = np.unique(owner[rows], return_index=True)     # owners ascend with the lines
        at = np.full(len(commands), -1, np.int64)
        at[owners] = rows[first]
        out[name] = column.gather(schema.nullable(at, at < 0))
    return pl.DataFrame(out)


def notes_of(other: int) -> list[str]:
    return [f"{other} lines of the programs' own output are not commands: read, skipped by design",
            "sg3_utils output has no timestamps: no time line; response time = the driver's duration "
            "where the output gives it (-vvv)"]
