"""ancot-text v1: SCSI bus line-transition traces (../shared/formats/ancot-text.md).

Reads all three levels of detail (control lines; +REQ/ACK; +DB[/DBP]) in large blocks,
decoding every record with polars expressions (no Python loop per record). Also writes the
format, in blocks, for the simulator and the round-trip tests.
"""
from __future__ import annotations

import functools
import io
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace import outputs
from scsitrace.errors import BadInput
from scsitrace.model import Capture, RecordCount
from . import _ancot_scan as _scan
from . import _lines

ID = "ancot"
SUFFIXES = (".ancot", ".ancot.txt", ".act")
MAGIC = "# ancot-text v1"
KNOWN_HEADER_KEYS = ("tick_ns", "signals", "data", "initiator")
MAX_TICK_NS = 10**9      # a tick of more than a second is no bus capture (and overflows int64 ns sooner)


def sniff(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf").startswith(MAGIC.encode())


# ---------------------------------------------------------------- header

def _parse_header(path: str) -> tuple[dict, int, int]:
    """Returns (header, byte offset of the first record line, its line number)."""
    header: dict = {"tick_ns": 50, "initiator": 7, "data": [], "extra": {}}
    offset = 0
    line_no = 0
    with open(path, "rb") as fh:
        for raw in _lines.bounded_lines(fh, path):
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
    if line_no <= 1 and offset == 0:
        raise BadInput(path, "empty file: no header, no records")
    if "signals" not in header:
        raise BadInput(path, "missing header: no '# signals:' line before the first record",
                       line=line_no)
    return header, offset, line_no


def _header_field(header: dict, key: str, value: str, path: str, line_no: int, text: str):
    def bad(why):
        raise BadInput(path, f"bad header {key!r}: {why}", line=line_no, text=text)

    if key == "tick_ns":
        if not value.isdigit() or not 0 < int(value) <= MAX_TICK_NS:
            bad(f"expected a positive integer up to {MAX_TICK_NS} (one second)")
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

class _Decoded:
    """One block's good records (a frame: tick, lines, then db and dbp when the file has
    them) and bad records (line index, reason)."""

    def __init__(self, good: pl.DataFrame, bad_lines: np.ndarray, bad_reasons: list[str]):
        self.good, self.bad_lines, self.bad_reasons = good, bad_lines, bad_reasons


def _reason_text(code: int, found: int, header: dict) -> str:
    n_fields = 1 + len(header["signals"]) + len(header["data"])
    if code == _scan.BAD_COUNT:
        return f"wrong column count: expected {n_fields} fields, found {found}"
    if code == _scan.BAD_TICK:
        return "tick is not a non-negative integer"
    if code == _scan.BAD_DB:
        return "bad hex in DB column (expected two hex digits or --)"
    if code == _scan.BAD_DBP:
        return "bad DBP value (expected 0, 1 or -)"
    if code == BAD_BACKWARDS:
        return "tick goes backwards"
    if code == BAD_OVERFLOW:
        return f"tick x tick_ns {header['tick_ns']} is beyond int64 nanoseconds"
    return f"non-binary value for signal {header['signals'][code - _scan.BAD_SIGNAL]}"


def _decode(scanned, header: dict, last_tick: int | None) -> _Decoded:
    """Checks the scanner leaves to bulk code (tick order), then the block's bad lines in
    line order with the reason each one breaks first."""
    good, bad = pl.DataFrame(scanned.good), pl.DataFrame(scanned.bad)
    line_idx = None                # read only when good records turn out bad
    tick = good["tick"].to_numpy()
    over = tick > np.iinfo(np.int64).max // header["tick_ns"]
    if over.any():                 # tick x tick_ns beyond int64 nanoseconds: bad lines
        line_idx = pl.DataFrame(scanned.line_idx)["line_idx"]
        good, bad, line_idx = _move_bad(good, bad, line_idx, over, BAD_OVERFLOW)
        tick = good["tick"].to_numpy()
    in_order = scanned.decreases == 0 and (last_tick is None or not len(tick) or tick[0] >= last_tick)
    if not in_order:
        # ticks never decrease: compare with the running maximum of the ticks before
        prev_max = np.maximum.accumulate(tick)
        prev_max = np.concatenate(([-1 if last_tick is None else last_tick], prev_max[:-1]))
        if last_tick is not None:
            prev_max = np.maximum(prev_max, last_tick)
        backwards = tick < prev_max  # (a backwards tick never raises the maximum, so no loop)
        if line_idx is None:
            line_idx = pl.DataFrame(scanned.line_idx)["line_idx"]
        good, bad, line_idx = _move_bad(good, bad, line_idx, backwards, BAD_BACKWARDS)
    if not bad.height:
        return _Decoded(good, np.zeros(0, np.int64), [])
    bad_line, bad_reason, bad_found = (bad[c].to_numpy() for c in ("line", "reason", "found"))
    order = np.argsort(bad_line, kind="stable")
    texts = [_reason_text(int(bad_reason[i]), int(bad_found[i]), header) for i in order[:MAX_REPORTED]]
    return _Decoded(good, bad_line[order], texts)


def _move_bad(good: pl.DataFrame, bad: pl.DataFrame, line_idx: pl.Series, which: np.ndarray, reason: int):
    """(good, bad, the good records' line indexes) after moving the records `which` selects
    from good to bad, for `reason`."""
    which = pl.Series(which)
    lines = line_idx.filter(which)
    moved = pl.DataFrame({"line": lines, "reason": pl.repeat(reason, len(lines), dtype=pl.Int16, eager=True),
                          "found": pl.repeat(0, len(lines), dtype=pl.Int32, eager=True)})
    return good.filter(~which), pl.concat([bad, moved]), line_idx.filter(~which)


MAX_REPORTED = 5
BAD_BACKWARDS = 5
BAD_OVERFLOW = 6
PARSE_BLOCK_BYTES = 4 << 20   # scanned two at a time (the scanner releases the GIL)
CHUNK_RECORDS = 1 << 20       # transitions per frame handed to the analysis


class _Reader:
    """Streams a file's records as `transitions` frames, counting what it reads and skips."""

    def __init__(self, path: str, header: dict, offset: int, first_line: int, strict: bool,
                 records: RecordCount, progress=None):
        self.path, self.header, self.offset, self.first_line = path, header, offset, first_line
        self.strict, self.records, self.progress = strict, records, progress
        self.layout = _scan.Layout(np.array([1 << schema.SIGNAL_BIT[s] for s in header["signals"]], dtype=np.uint16),
                                   len(header["data"]))

    def _scanned_blocks(self):
        """(buf, first line, scan result) in file order, scanning up to two blocks at once."""
        with ThreadPoolExecutor(max_workers=2) as pool:
            pending = deque()
            line_no = self.first_line
            blocks = _lines.iter_byte_blocks(self.path, start_offset=self.offset, block_bytes=PARSE_BLOCK_BYTES,
                                             progress=self.progress, count_lines=False, views=True,
                                             first_line=self.first_line, strict=self.strict)
            for buf, _ in blocks:
                pending.append((buf, pool.submit(_scan.scan_block, buf, self.layout)))
                while len(pending) > 2:
                    buf0, fut = pending.popleft()
                    scanned = fut.result()
                    yield buf0, line_no, scanned
                    line_no += scanned.lines
            while pending:
                buf0, fut = pending.popleft()
                scanned = fut.result()
                yield buf0, line_no, scanned
                line_no += scanned.lines

    def __call__(self) -> Iterator[pl.DataFrame]:
        self.records.read = self.records.skipped = 0
        self.records.examples.clear()
        last_tick = None
        ready: list[_Decoded] = []
        for buf, line_no, scanned in self._scanned_blocks():
            dec = _decode(scanned, self.header, last_tick)
            if len(dec.bad_lines):
                self._report_bad(buf, line_no, dec)
            if not dec.good.height:
                continue
            last_tick = dec.good["tick"][-1]
            self.records.read += dec.good.height
            ready.append(dec)
            if sum(d.good.height for d in ready) >= CHUNK_RECORDS:
                yield self._frame(ready)
                ready = []
        if ready:
            yield self._frame(ready)

    def _frame(self, decoded: list[_Decoded]) -> pl.DataFrame:
        """One `transitions` frame from several parsed blocks (t_ns from the first record)."""
        data = self.header["data"]
        tick = np.concatenate([d.good["tick"].to_numpy() for d in decoded])
        if "origin_tick" not in self.header:
            self.header["origin_tick"] = int(tick[0])
        out = {"t_ns": (tick - self.header["origin_tick"]) * self.header["tick_ns"],
               "lines": np.concatenate([d.good["lines"].to_numpy() for d in decoded])}
        for name, dtype, present in (("db", pl.UInt8, bool(data)), ("dbp", pl.Boolean, len(data) == 2)):
            out[name] = (pl.concat([d.good[name] for d in decoded], rechunk=True) if present
                         else pl.repeat(None, len(tick), dtype=dtype, eager=True))
        return pl.DataFrame(out, schema=schema.TRANSITIONS)

    def _report_bad(self, buf: bytes, line_no: int, dec: _Decoded) -> None:
        lines = bytes(buf).split(b"\n") if len(dec.bad_lines) else []
        where = [(line_no + int(i), why, lines[int(i)].decode("utf-8", errors="replace").strip())
                 for i, why in zip(dec.bad_lines[:MAX_REPORTED], dec.bad_reasons)]
        if self.strict:
            line, why, text = where[0]
            raise BadInput(self.path, why, line=line, text=text)
        self.records.skip(len(dec.bad_lines), [f"{self.path}:{line}: {why}" for line, why, _ in where])


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    """Read an ancot-text v1 file. Raises BadInput on the first bad line when strict."""
    path = str(path)
    header, offset, first_line = _parse_header(path)
    captured = list(header["signals"]) + list(header["data"])
    meta = {
        "tick_ns": header["tick_ns"],
        "initiator": header["initiator"],
        "signals": captured,
        "level": schema.level_of(captured),
        **header["extra"],
    }
    cap = Capture(layer="bus", path=path, format=ID, meta=meta)
    cap.chunks = _Reader(path, header, offset, first_line, strict, cap.records, progress)
    return cap


# ---------------------------------------------------------------- writer

class Writer:
    """Writes ancot-text v1 in blocks: `write(transitions_frame)` as often as needed."""

    def __init__(self, fh: io.TextIOBase, *, signals: list[str], data: list[str] = (),
                 tick_ns: int = 50, initiator: int = 7, meta: dict | None = None):
        self.fh, self.signals, self.data, self.tick_ns = fh, list(signals), list(data), tick_ns
        self._signal_lut = None
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
        ticks = (transitions["t_ns"] // self.tick_ns).to_numpy()
        if ticks.min() >= 0 and ticks.max() < 10**10:
            data = self._format_fixed(transitions, ticks)
            raw = getattr(self.fh, "buffer", None)
            if raw is not None:            # a text file: skip the decode/encode round (ASCII)
                self.fh.flush()
                raw.write(data)
            else:
                self.fh.write(data.decode("ascii"))
        else:
            self._write_polars(transitions)

    def _format_fixed(self, tr: pl.DataFrame, ticks: np.ndarray) -> bytes:
        """The same text as `_write_polars`, built as one fixed-width record array by table
        lookups (no per-line work): every tick fits the 10-column pad, so every line has the
        same width. Each field is a gather of whole byte strings (numpy void items)."""
        nsig = len(self.signals)
        fields = [("hi", "V5"), ("lo", "V5"), ("sig", f"V{2 * nsig}")]
        if "DB" in self.data:
            fields.append(("db", "V3"))
        if "DBP" in self.data:
            fields.append(("dbp", "V2"))
        fields.append(("nl", "V1"))
        out = np.empty(len(ticks), dtype=fields)
        hi, lo = np.divmod(ticks.astype(np.int64), 100_000)
        high, low = _digits5_views()
        out["hi"] = high[hi]
        out["lo"] = low[lo + (hi > 0) * 100_000]
        if self._signal_lut is None:
            codes = np.arange(1 << len(schema.SIGNALS))
            lut = np.full((len(codes), 2 * nsig), ord(" "), dtype=np.uint8)
            for i, name in enumerate(self.signals):
                lut[:, 2 * i + 1] = 48 + ((codes >> schema.SIGNAL_BIT[name]) & 1)
            self._signal_lut = np.ascontiguousarray(lut).view(f"V{2 * nsig}").ravel()
        out["sig"] = self._signal_lut[tr["lines"].to_numpy().astype(np.intp) & ((1 << len(schema.SIGNALS)) - 1)]
        if "DB" in self.data:
            db = tr["db"]
            out["db"] = _HEX3_V[db.fill_null(256).cast(pl.Int32).to_numpy()]
        if "DBP" in self.data:
            dbp = tr["dbp"]
            out["dbp"] = _DBP2_V[np.where(dbp.is_null().to_numpy(), 2, dbp.fill_null(False).to_numpy())]
        out["nl"] = np.void(b"\n")
        return out.tobytes()

    def _write_polars(self, transitions: pl.DataFrame) -> None:
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
@functools.cache
def _digits5_views() -> tuple[np.ndarray, np.ndarray]:
    """A tick as two five-digit groups of text (5-byte void items): [0] the high group (blank
    when zero); [1] the low group, space-padded at rows 0-99999 (high group zero) and
    zero-padded at rows 100000-199999. Built on first use: only writers need it."""
    n = np.arange(100_000)
    digits = (n[:, None] // 10 ** np.arange(4, -1, -1)) % 10 + ord("0")
    leading = np.cumsum(digits != ord("0"), axis=1) == 0
    leading[:, -1] = False                          # 0 is written "    0"
    spaced = np.where(leading, ord(" "), digits).astype(np.uint8)
    high = spaced.copy()
    high[0] = ord(" ")                              # a zero high group is blank
    low = np.concatenate([spaced, digits.astype(np.uint8)])
    return tuple(np.ascontiguousarray(d).view("V5").ravel() for d in (high, low))


# " xx" for a byte, " --" (row 256) for an unsampled bus; " 0", " 1", " -" for DBP
_HEX3_V = np.frombuffer("".join([f" {i:02x}" for i in range(256)] + [" --"]).encode(), dtype="V3")
_DBP2_V = np.frombuffer(b" 0 1 -", dtype="V2")
_HEX_BYTES = np.frombuffer("".join(f"{i:02x}" for i in range(256)).encode(), dtype=np.uint8).reshape(256, 2)


def _hex2(s: pl.Series) -> pl.Series:
    """Two lower-case hex digits per byte; null stays null."""
    return _HEX.gather(s).alias(s.name)


def write(path: str, transitions: pl.DataFrame, *, signals: list[str], data: list[str] = (),
          tick_ns: int = 50, initiator: int = 7, meta: dict | None = None) -> None:
    with outputs.writing(path) as fh:
        Writer(fh, signals=signals, data=data, tick_ns=tick_ns, initiator=initiator,
               meta=meta).write(transitions)
