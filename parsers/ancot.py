"""ancot-text v1: SCSI bus line-transition traces (../shared/formats/ancot-text.md).

Reads all three levels of detail (control lines; +REQ/ACK; +DB[/DBP]) in large blocks,
decoding every record with polars expressions (no Python loop per record). Also writes the
format, in blocks, for the simulator and the round-trip tests.
"""
from __future__ import annotations

import io
from typing import Iterator

import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput
from scsitrace.model import Capture, RecordCount
from . import _lines

ID = "ancot"
SUFFIXES = (".ancot", ".ancot.txt", ".act")
MAGIC = "# ancot-text v1"
KNOWN_HEADER_KEYS = ("tick_ns", "signals", "data", "initiator")


def sniff(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf").startswith(MAGIC.encode())


# ---------------------------------------------------------------- header

def _parse_header(path: str) -> tuple[dict, int, int]:
    """Returns (header, byte offset of the first record line, its line number)."""
    header: dict = {"tick_ns": 50, "initiator": 7, "data": [], "extra": {}}
    offset = 0
    line_no = 0
    with open(path, "rb") as fh:
        for raw in fh:
            line_no += 1
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                if line_no == 1:
                    raise BadInput(path, "not an ancot-text file (the first line is not UTF-8 text)",
                                   line=1) from None
                break  # not a header line: the record reader reports (or skips) it
            if line_no == 1:
                if text.lstrip("\ufeff") != MAGIC:
                    raise BadInput(path, f"missing header: the first line must be exactly {MAGIC!r}",
                                   line=1, text=text)
            elif text and not text.startswith("#"):
                break
            elif ":" in text and text.startswith("#"):
                key, _, value = text[1:].partition(":")
                key, value = key.strip(), value.strip()
                if key and " " not in key:
                    _header_field(header, key, value, path, line_no, text)
            offset += len(raw)
        else:
            line_no += 1
    if "signals" not in header:
        raise BadInput(path, "missing header: no '# signals:' line before the first record",
                       line=line_no)
    return header, offset, line_no


def _header_field(header: dict, key: str, value: str, path: str, line_no: int, text: str):
    def bad(why):
        raise BadInput(path, f"bad header {key!r}: {why}", line=line_no, text=text)

    if key == "tick_ns":
        if not value.isdigit() or int(value) <= 0:
            bad("expected a positive integer")
        header["tick_ns"] = int(value)
    elif key == "initiator":
        if not value.isdigit() or int(value) > 15:
            bad("expected a SCSI ID 0-15")
        header["initiator"] = int(value)
    elif key == "signals":
        names = value.split()
        unknown = [n for n in names if n not in schema.SIGNAL_BIT]
        if unknown:
            bad(f"unknown signal {unknown[0]!r} (known: {' '.join(schema.SIGNALS)})")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            bad(f"signal {sorted(dup)[0]!r} listed twice")
        missing = [n for n in schema.REQUIRED_SIGNALS if n not in names]
        if missing:
            bad(f"required signal(s) missing: {' '.join(missing)}")
        header["signals"] = names
    elif key == "data":
        cols = value.split()
        if cols not in (["DB"], ["DB", "DBP"], []):
            bad("expected 'DB' or 'DB DBP'")
        header["data"] = cols
    else:
        header["extra"][key] = value


# ---------------------------------------------------------------- records

def _decode_block(block: pl.DataFrame, header: dict) -> pl.DataFrame:
    """Decode one block of lines: every record line gets its fields or a reason it is bad."""
    signals, data = header["signals"], header["data"]
    n_fields = 1 + len(signals) + len(data)
    text = pl.col("text").str.strip_chars()
    recs = block.with_columns(text.alias("t")).filter(
        (pl.col("t") != "") & ~pl.col("t").str.starts_with("#"))
    toks = pl.col("t").str.replace_all(r"\s+", " ").str.split(" ")
    recs = recs.with_columns(toks.alias("tok"))
    tok = pl.col("tok").list
    fields = [tok.get(0, null_on_oob=True).str.to_integer(base=10, strict=False).alias("tick")]
    for i, name in enumerate(signals):
        fields.append(tok.get(1 + i, null_on_oob=True).alias(f"s{i}"))
    if data:
        fields.append(tok.get(1 + len(signals), null_on_oob=True).alias("db_s"))
    if len(data) == 2:
        fields.append(tok.get(2 + len(signals), null_on_oob=True).alias("dbp_s"))
    recs = recs.with_columns(tok.len().alias("n_tok"), *fields)

    reason = pl.when(pl.col("n_tok") != n_fields).then(
        pl.format("wrong column count: expected {} fields, found {}", pl.lit(n_fields), pl.col("n_tok")))
    reason = reason.when(pl.col("tick").is_null() | ~pl.col("tok").list.get(0, null_on_oob=True)
                         .str.contains(r"^\d+$")).then(pl.lit("tick is not a non-negative integer"))
    for i, name in enumerate(signals):
        reason = reason.when(~pl.col(f"s{i}").is_in(["0", "1"])).then(
            pl.lit(f"non-binary value for signal {name}"))
    if data:
        db_ok = pl.col("db_s").str.contains(r"^([0-9A-Fa-f]{2}|--)$")
        reason = reason.when(~db_ok).then(pl.lit("bad hex in DB column (expected two hex digits or --)"))
    if len(data) == 2:
        reason = reason.when(~pl.col("dbp_s").is_in(["0", "1", "-"])).then(
            pl.lit("bad DBP value (expected 0, 1 or -)"))
    recs = recs.with_columns(reason.otherwise(None).alias("reason"))

    lines = pl.lit(0, dtype=pl.UInt16)
    for i, name in enumerate(signals):
        lines = lines + pl.when(pl.col(f"s{i}") == "1").then(
            pl.lit(1 << schema.SIGNAL_BIT[name], dtype=pl.UInt16)).otherwise(pl.lit(0, dtype=pl.UInt16))
    out = [pl.col("line_no"), pl.col("t"), pl.col("reason"), pl.col("tick"), lines.alias("lines")]
    if data:
        out.append(pl.when(pl.col("db_s") == "--").then(None)
                   .otherwise(pl.col("db_s").str.to_integer(base=16, strict=False))
                   .cast(pl.UInt8, strict=False).alias("db"))
    else:
        out.append(pl.lit(None, dtype=pl.UInt8).alias("db"))
    if len(data) == 2:
        out.append(pl.when(pl.col("dbp_s") == "-").then(None)
                   .otherwise(pl.col("dbp_s") == "1").alias("dbp"))
    else:
        out.append(pl.lit(None, dtype=pl.Boolean).alias("dbp"))
    return recs.select(out)


class _Reader:
    """Streams a file's records as `transitions` frames, counting what it reads and skips."""

    def __init__(self, path: str, header: dict, offset: int, first_line: int, strict: bool,
                 records: RecordCount, progress=None):
        self.path, self.header, self.offset, self.first_line = path, header, offset, first_line
        self.strict, self.records, self.progress = strict, records, progress

    def __call__(self) -> Iterator[pl.DataFrame]:
        self.records.read = self.records.skipped = 0
        self.records.examples.clear()
        tick_ns = self.header["tick_ns"]
        origin = self.header.get("origin_tick")
        last_tick = None
        for block in _lines.iter_line_blocks(self.path, strict=self.strict, start_offset=self.offset,
                                             first_line=self.first_line, progress=self.progress):
            recs = _decode_block(block, self.header)
            recs = self._mark_backwards(recs, last_tick)
            bad = recs.filter(pl.col("reason").is_not_null())
            if len(bad):
                self._report_bad(bad)
                recs = recs.filter(pl.col("reason").is_null())
            if not len(recs):
                continue
            if origin is None:
                origin = int(recs["tick"][0])
                self.header["origin_tick"] = origin
            last_tick = int(recs["tick"][-1])
            self.records.read += len(recs)
            yield recs.select(
                ((pl.col("tick") - origin) * tick_ns).cast(pl.Int64).alias("t_ns"),
                "lines", "db", "dbp")

    @staticmethod
    def _mark_backwards(recs: pl.DataFrame, last_tick: int | None) -> pl.DataFrame:
        good_tick = pl.when(pl.col("reason").is_null()).then(pl.col("tick"))
        prev_max = good_tick.cum_max().shift(1)
        if last_tick is not None:
            prev_max = prev_max.fill_null(last_tick)
            prev_max = pl.max_horizontal(prev_max, pl.lit(last_tick))
        backwards = pl.col("reason").is_null() & (pl.col("tick") < prev_max)
        return recs.with_columns(
            pl.when(backwards).then(pl.lit("tick goes backwards")).otherwise(pl.col("reason"))
            .alias("reason"))

    def _report_bad(self, bad: pl.DataFrame) -> None:
        first = bad.row(0, named=True)
        if self.strict:
            raise BadInput(self.path, first["reason"], line=first["line_no"], text=first["t"])
        examples = [f"{self.path}:{r['line_no']}: {r['reason']}" for r in bad.head(5).iter_rows(named=True)]
        self.records.skip(len(bad), examples)


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    """Read an ancot-text v1 file. Raises BadInput on the first bad line when strict."""
    path = str(path)
    header, offset, first_line = _parse_header(path)
    captured = list(header["signals"]) + list(header["data"])
    meta = {
        "tick_ns": header["tick_ns"],
        "initiator": header["initiator"],
        "signals": captured,
        "level": level_of(captured),
        **header["extra"],
    }
    cap = Capture(layer="bus", path=path, format=ID, meta=meta)
    cap.chunks = _Reader(path, header, offset, first_line, strict, cap.records, progress)
    return cap


def level_of(signals: list[str]) -> int:
    if "DB" in signals:
        return 3
    if "REQ" in signals or "ACK" in signals:
        return 2
    return 1


# ---------------------------------------------------------------- writer

class Writer:
    """Writes ancot-text v1 in blocks: `write(transitions_frame)` as often as needed."""

    def __init__(self, fh: io.TextIOBase, *, signals: list[str], data: list[str] = (),
                 tick_ns: int = 50, initiator: int = 7, meta: dict | None = None):
        self.fh, self.signals, self.data, self.tick_ns = fh, list(signals), list(data), tick_ns
        fh.write(f"{MAGIC}\n# tick_ns: {tick_ns}\n# signals: {' '.join(self.signals)}\n")
        if self.data:
            fh.write(f"# data: {' '.join(self.data)}\n")
        fh.write(f"# initiator: {initiator}\n")
        for key, value in (meta or {}).items():
            fh.write(f"# {key}: {value}\n")
        fh.write("#\n#" + " ".join(["tick"] + self.signals + self.data) + "\n")

    def write(self, transitions: pl.DataFrame) -> None:
        if not len(transitions):
            return
        parts = [(pl.col("t_ns") // self.tick_ns).cast(pl.Utf8).str.pad_start(10)]
        for name in self.signals:
            bit = 1 << schema.SIGNAL_BIT[name]
            parts.append(pl.when((pl.col("lines").cast(pl.Int32) & bit) != 0)
                         .then(pl.lit("1")).otherwise(pl.lit("0")))
        if self.data:
            hexdb = pl.col("db").cast(pl.Int32).map_batches(_hex2, return_dtype=pl.Utf8)
            parts.append(hexdb.fill_null("--"))
        if len(self.data) == 2:
            parts.append(pl.when(pl.col("dbp").is_null()).then(pl.lit("-"))
                         .when(pl.col("dbp")).then(pl.lit("1")).otherwise(pl.lit("0")))
        lines = transitions.select(pl.concat_str(parts, separator=" ").alias("l"))["l"]
        self.fh.write("\n".join(lines.to_list()) + "\n")


_HEX = pl.Series([f"{i:02x}" for i in range(256)])


def _hex2(s: pl.Series) -> pl.Series:
    """Two lower-case hex digits per byte; null stays null."""
    return _HEX.gather(s).alias(s.name)


def write(path: str, transitions: pl.DataFrame, *, signals: list[str], data: list[str] = (),
          tick_ns: int = 50, initiator: int = 7, meta: dict | None = None) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        Writer(fh, signals=signals, data=data, tick_ns=tick_ns, initiator=initiator,
               meta=meta).write(transitions)
