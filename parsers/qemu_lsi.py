"""QEMU's LSI 53C895A controller trace (`-trace 'lsi_*' -trace 'scsi_*' -msg timestamp=on`).

Each line is `PID@SECONDS.MICROSECONDS:EVENT TEXT`, written by QEMU's log trace backend:

    16602@1795334719.560198:lsi_execute_script_io_selected Selected target 0 ATN
    16602@1795334719.560257:lsi_do_command Send command len=10
    16602@1795334719.560268:scsi_req_parsed_lba target 0 lun 0 tag 65623 command 40 lba 0

The emulated chip's bus steps become a bus-level Capture (layer "bus"), so the bus state
machine rebuilds phases, connections and I/Os as it does for an analyzer capture:

* the phase of each moment comes from the events that reveal it: selection, reselection,
  "Wait Disconnect" (BUS FREE), the SCRIPTS phase compares (`Compare phase DIN ...`, whose
  first operand is the bus phase the chip sees), and the data-moving calls (do_msgout,
  do_command, do_msgin, do_status);
* the bytes of the information phases come from the trace: MESSAGE IN bytes exactly
  (`lsi_add_msg_byte`), status exactly (`lsi_do_status`), MESSAGE OUT and COMMAND bytes
  rebuilt from the decoded events (IDENTIFY from "Select LUN", the queue tag, the CDB from
  opcode, LBA and sector count); DATA bytes counted from the `lsi_do_dma` lengths;
* each byte is one synthesized REQ/ACK handshake, spread evenly over its phase, so byte
  counts, messages and CDBs reach the bus analysis. Their timing carries no information.

Timing is the emulator's (QEMU with TCG, microsecond stamps of the host clock), not a real
bus's; the Capture's notes say so. The decoded events are also handed over as
`frames["steps"]` (one row per bus-step event) for the cross-layer view.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.model import Capture, LazyFrames
from scsitrace.schema import SIGNAL_BIT
from . import _lines, _qemu_devices, _qemu_scan
from ._qemu_fields import decode_fields as _decode_fields
from ._qemu_steps import build_cdb, device_commands, runs_frame, steps_frame  # noqa: F401  (tests)
from ._qemu_stream import CompiledStream, NotCompiled, Stream, Stretching  # noqa: F401  (tests)

ID = "qemu_lsi"
SUFFIXES = ("qemu-trace.txt", ".qemu-trace.log")

SNIFF_RE = rb"(?m)^\d+@\d+\.\d+:(?:lsi|scsi)_[a-z0-9_]+ "
INITIATOR_ID = 7  # sym53c8xx's default SCSI ID ("sym0: No NVRAM, ID 7"); the trace does not carry it

# phase -> asserted lines, as in the bus layer (schema.SIGNALS); MSG C/D I/O per SCSI-2 table 5-6
_B = {name: 1 << bit for name, bit in SIGNAL_BIT.items()}
LINES_OF_PHASE = {
    "BUS FREE": 0,
    "SELECTION": _B["SEL"],
    "RESELECTION": _B["SEL"] | _B["I/O"],
    "DATA OUT": _B["BSY"],
    "DATA IN": _B["BSY"] | _B["I/O"],
    "COMMAND": _B["BSY"] | _B["C/D"],
    "STATUS": _B["BSY"] | _B["C/D"] | _B["I/O"],
    "MESSAGE OUT": _B["BSY"] | _B["MSG"] | _B["C/D"],
    "MESSAGE IN": _B["BSY"] | _B["MSG"] | _B["C/D"] | _B["I/O"],
    "RESERVED": _B["BSY"] | _B["MSG"],
}
HANDSHAKE = _B["REQ"] | _B["ACK"]
STRETCHING = Stretching(LINES_OF_PHASE, _B["ATN"], _B["BSY"], INITIATOR_ID)   # `stretches`, compiled
SIGNALS = ["BSY", "SEL", "ATN", "MSG", "C/D", "I/O", "REQ", "ACK", "DB"]
CHUNK_BYTES = 1 << 21  # data bytes of handshakes generated per transitions chunk
PART_BYTES = 4 << 20   # lines fed to the runs at a time


def sniff(head: bytes) -> bool:
    return re.search(SNIFF_RE, head) is not None


# ---------------------------------------------------------------- lines -> events

def _split_lines(block: pl.DataFrame) -> pl.DataFrame:
    """`PID@SEC.FRAC:EVENT DETAIL` -> columns, by splitting (a regex per line costs 5x more);
    `event` is null where a line does not have that shape."""
    df = block.with_columns(pl.col("text").str.strip_chars_end("\r\n")).filter(
        pl.col("text").str.strip_chars() != "")
    df = df.with_columns(pl.col("text").str.splitn(":", 2).struct.rename_fields(["stamp", "body"]).alias("s")).unnest("s")
    df = df.with_columns(
        pl.col("stamp").str.splitn("@", 2).struct.rename_fields(["pid", "secs"]).alias("a"),
        pl.col("body").str.splitn(" ", 2).struct.rename_fields(["event", "detail"]).alias("b"),
    ).unnest("a", "b")
    df = df.with_columns(pl.col("secs").str.splitn(".", 2).struct.rename_fields(["sec", "frac"]).alias("c")).unnest("c")
    ok = (~_lines.bad_bytes(pl.col("text")) & _lines.checked_int(pl.col("pid"), *_lines.U32).is_not_null()
          & _lines.seconds_ns(pl.col("secs")).is_not_null()
          & pl.col("sec").str.contains(r"^\d+$")
          & pl.col("frac").str.contains(r"^\d{1,9}$") & pl.col("event").str.contains(r"^[A-Za-z0-9_]+$")).fill_null(False)
    return df.select("line_no", "text", pl.col("sec").cast(pl.Int64, strict=False), "frac",
                     pl.when(ok).then(pl.col("event")).alias("event"), pl.col("detail").fill_null(""))


def _ends_inside_a_line(path: str) -> bool:
    with open(path, "rb") as fh:
        fh.seek(0, 2)
        if fh.tell() == 0:
            return False
        fh.seek(-1, 2)
        return fh.read(1) != b"\n"


NO_LINES = pl.DataFrame(schema={"line_no": pl.Int64, "text": pl.Utf8})


@dataclass
class _Read:
    """One pass over the trace, block by block: the compiled scanner's records (`_qemu_scan`)
    and the lines it leaves decoded here, fed in line order to `sink` (a `_qemu_stream.Stream`'s
    `add`). The
    bad lines wait for the end of the file, where they are named (strict) or counted
    (lenient) in the order a reader of the whole file met them: every line that is not a
    trace line, block by block, before any field out of range."""
    path: str
    strict: bool
    cap: Capture
    sink: Callable[[pl.DataFrame], None]
    block_bytes: int = PART_BYTES
    scan: Callable | None = None      # a compiled stream's `scan`: a part summed where it can be
    shape: list[tuple[pl.DataFrame, int | None]] = field(default_factory=list)   # per block: bad lines, last record
    fields: list[pl.DataFrame] = field(default_factory=list)

    def run(self, progress) -> None:
        line_no = 1
        for buf, _ in _lines.iter_byte_blocks(self.path, progress=progress, strict=self.strict, count_lines=False,
                                              views=True):
            bad, last = [], []
            for part in _parts(buf, self.block_bytes):
                part_bad, part_last, lines = self._part(part, line_no)
                bad.append(part_bad)
                last += part_last
                line_no += lines       # a part ends with its '\n' (but the file's last may not)
            self.shape.append((pl.concat(bad), max(last) if last else None))
        self._not_trace_lines()
        self._out_of_range()

    def _part(self, buf, line_no: int) -> tuple[pl.DataFrame, list[int], int]:
        """Reads the lines of `buf`; returns its lines that are no trace line, its last
        record's line number (none: blank) and how many lines it holds."""
        if self.scan is not None:
            out = self.scan(buf)
            if out.fed:                   # every line a record, summed by the stream
                self.cap.records.read += out.taken
                return NO_LINES, [] if out.last_line is None else [line_no + out.last_line], out.lines
            taken, other, lines = _qemu_scan.frames_of(out, np.frombuffer(buf, np.uint8), line_no)
        else:
            taken, other, lines = _qemu_scan.scan_block(buf, line_no)
        self.cap.records.read += taken.height
        if not other:
            self.sink(taken)
            return NO_LINES, [v for v in (taken["line_no"].max(),) if v is not None], lines
        # a line that is not UTF-8 is named at once (strict): the whole-file reader did so first
        m = _split_lines(_lines.fallback_frame(other, self.path, self.strict))
        bad = m.filter(pl.col("event").is_null())
        self.cap.records.read += m.height - bad.height     # a bad line is skipped, not read
        decoded = _decoded(m.filter(pl.col("event").is_not_null()).drop("text"))
        out_of_range = decoded.filter(pl.col("bad_field").is_not_null())
        if out_of_range.height:
            self.fields.append(out_of_range.select("line_no", "bad_field", "detail"))
            decoded = decoded.filter(pl.col("bad_field").is_null())
        self.sink(_qemu_scan.in_order([taken, decoded]))
        last = [v for v in (taken["line_no"].max(), m["line_no"].max()) if v is not None]
        return bad.select("line_no", "text"), last, lines

    def _not_trace_lines(self) -> None:
        """A bad last line the file ends inside is "short", not "wrong": strict mode raises
        TruncatedInput, lenient mode flags it as an anomaly (not a skip)."""
        path, cap = self.path, self.cap
        cut_short = _ends_inside_a_line(path)
        for i, (bad, last_record) in enumerate(self.shape):
            if cut_short and i == len(self.shape) - 1 and bad.height and bad["line_no"][-1] == last_record:
                last = bad.row(bad.height - 1, named=True)
                if self.strict and bad.height == 1:
                    raise TruncatedInput(path, "the file ends inside a trace line", line=last["line_no"],
                                         text=last["text"])
                cap.anomalies = pl.concat([cap.anomalies, schema.frame(
                    {"t_ns": [None], "kind": ["TRUNCATED RECORD"], "detail": ["the file ends inside a trace line"],
                     "position": [f"line {last['line_no']}"]}, schema.ANOMALIES)])
                cap.records.skip(1, [f"{path}:{last['line_no']}: the file ends inside a trace line"])
                bad = bad.head(bad.height - 1)
            if bad.height:
                first = bad.row(0, named=True)
                if self.strict:
                    raise BadInput(path, "not a QEMU trace line (PID@SECONDS.MICROSECONDS:EVENT ...; "
                                   "was QEMU run with -msg timestamp=on?)", line=first["line_no"], text=first["text"])
                cap.records.skip(bad.height, [f"{path}:{r['line_no']}: not a QEMU trace line"
                                              for r in bad.head(5).iter_rows(named=True)])

    def _out_of_range(self) -> None:
        """A field out of its range: the line is bad input."""
        if not self.fields:
            return
        bad = pl.concat(self.fields)
        first = bad.row(0, named=True)
        why = f"field {first['bad_field']!r} is not a number in range"
        if self.strict:
            raise BadInput(self.path, why, line=first["line_no"], text=first["detail"])
        self.cap.records.read -= bad.height
        self.cap.records.skip(bad.height, [f"{self.path}:{r['line_no']}: field {r['bad_field']!r} is not a number "
                                           "in range" for r in bad.head(5).iter_rows(named=True)])


def _parts(buf, part_bytes: int) -> Iterator[memoryview]:
    """A block (bytes, or a view of the mapped file) cut into parts of about `part_bytes` of
    whole lines: the stream is fed a part at a time, while bad lines are named block by block."""
    view, data, start = memoryview(buf), np.frombuffer(buf, np.uint8), 0
    while start < len(data):
        end = len(data)
        if start + part_bytes < len(data):
            cut = _newline_before(data, start, start + part_bytes)
            if cut < 0:      # a line longer than a part: up to its end
                nl = _newline_after(data, start + part_bytes)
                end = len(data) if nl < 0 else nl + 1
            else:
                end = cut + 1
        yield view[start:end]
        start = end


NEWLINE_WINDOW = 1 << 12


def _newline_before(data: np.ndarray, start: int, end: int) -> int:
    """The last '\n' in data[start:end] (-1: none), looked for a window at a time from the end."""
    while end > start:
        lo = max(start, end - NEWLINE_WINDOW)
        at = np.flatnonzero(data[lo:end] == 10)
        if at.size:
            return lo + int(at[-1])
        end = lo
    return -1


def _newline_after(data: np.ndarray, start: int) -> int:
    """The first '\n' in data[start:] (-1: none), a window at a time."""
    while start < len(data):
        hi = min(len(data), start + NEWLINE_WINDOW)
        at = np.flatnonzero(data[start:hi] == 10)
        if at.size:
            return start + int(at[0])
        start = hi
    return -1


def _events(path: str, strict: bool, cap: Capture, progress) -> pl.DataFrame:
    """The decoded events of the whole trace, good lines only (`_Read` without its stream)."""
    parts: list[pl.DataFrame] = []
    _Read(path, strict, cap, parts.append).run(progress)
    return _qemu_scan.in_order(parts)


def _decoded(ev: pl.DataFrame) -> pl.DataFrame:
    """Good lines with their times and fields (`_qemu_fields.decode_fields`)."""
    if not ev.height:
        return pl.DataFrame(schema=_qemu_scan.EVENTS)
    scale = pl.lit(10, pl.Int64).pow(9 - pl.col("frac").str.len_chars().cast(pl.Int64))
    return _decode_fields(ev.select(
        "line_no",
        (pl.col("sec") * 1_000_000_000 + pl.col("frac").cast(pl.Int64) * scale).alias("t_abs_ns"),
        "event", "detail",
    ))


# ---------------------------------------------------------------- phase runs -> transitions

def transitions(runs: pl.DataFrame, initiator: int = INITIATOR_ID) -> Iterator[pl.DataFrame]:
    """Line transitions of the runs, in chunks of about CHUNK_BYTES handshakes.

    Per run: one transition into its phase (SEL runs put the initiator and target ID bits on
    DB), then per byte a REQ+ACK assertion carrying the byte and a deassertion, evenly spaced.
    """
    if not runs.height:
        return
    cum = np.cumsum(runs["handshakes"].to_numpy())
    bounds = np.searchsorted(cum, np.arange(CHUNK_BYTES, int(cum[-1]) + CHUNK_BYTES, CHUNK_BYTES), side="right")
    start = 0
    for stop in list(dict.fromkeys(int(b) for b in bounds)) + [runs.height]:
        stop = max(stop, start + 1) if start < runs.height else start
        if stop > start:
            yield _chunk_transitions(runs.slice(start, stop - start), initiator)
        start = stop


def _chunk_transitions(runs: pl.DataFrame, initiator: int) -> pl.DataFrame:
    """Rows laid out in time order per run: [ARBITRATION], phase entry, n x (assert, deassert).

    A (re)selection is preceded by a zero-length ARBITRATION (the emulator does not
    arbitrate) carrying the ID bit of the device that selects; the (re)selection puts both
    IDs on DB.
    """
    phase = np.array(runs["phase"].to_list())
    lines = np.array([LINES_OF_PHASE[p] for p in phase], dtype=np.int64)
    lines |= np.where(runs["atn"].fill_null(False).to_numpy(), _B["ATN"], 0)
    start = runs["start_ns"].to_numpy().astype(np.int64)
    end = runs["end_ns"].to_numpy().astype(np.int64)
    target = runs["target"].fill_null(-1).to_numpy().astype(np.int64)
    sel = np.isin(phase, ["SELECTION", "RESELECTION"])
    has_target = target >= 0
    sel_db = np.where(sel & has_target, (1 << initiator) | (1 << np.maximum(target, 0)), -1)
    arb_db = np.where(phase == "RESELECTION", np.where(has_target, 1 << np.maximum(target, 0), -1),
                      1 << initiator)
    n = runs["handshakes"].to_numpy().astype(np.int64)
    arb = sel.astype(np.int64)
    size = arb + 1 + 2 * n
    first = np.cumsum(size) - size
    total = int(size.sum())
    t = np.repeat(start, size)
    ln = np.repeat(lines, size)
    db = np.full(total, -1, dtype=np.int64)
    arb_at = first[sel]
    ln[arb_at] = _B["BSY"]
    db[arb_at] = arb_db[sel]
    entry_at = first + arb
    db[entry_at] = sel_db
    # handshake j of run r: asserted at row entry+1+2j, a quarter into its slot; released half a slot later
    r = np.repeat(np.arange(len(n)), n)
    j = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    on_at = entry_at[r] + 1 + 2 * j
    width = ((end - start) / np.maximum(n, 1))[r]
    t[on_at] = start[r] + np.floor((j + 0.25) * width).astype(np.int64)
    t[on_at + 1] = start[r] + np.floor((j + 0.75) * width).astype(np.int64)
    ln[on_at] |= HANDSHAKE
    for i, b in enumerate(runs["info_bytes"].to_list()):  # per run (thousands), not per byte
        if b:
            db[entry_at[i] + 1 + 2 * np.arange(len(b))] = b
    return pl.DataFrame({
        "t_ns": t,
        "lines": ln.astype(np.uint16),
        "db": pl.Series(db).cast(pl.Int64),
        "dbp": pl.repeat(None, total, dtype=pl.Boolean, eager=True),
    }).with_columns(pl.when(pl.col("db") >= 0).then(pl.col("db")).cast(pl.UInt8).alias("db"))


def stretches(runs: pl.DataFrame, initiator: int = INITIATOR_ID) -> pl.DataFrame:
    """What `transitions` would yield, summed per stretch of constant phase lines (the bus
    layer's `runs.reduce_stretches` reads it instead of millions of synthesized handshakes):
    per run its ARBITRATION, then the run itself with its handshakes counted, the first
    one's and the last transition's times as `_chunk_transitions` places them."""
    lines = (runs["phase"].replace_strict(LINES_OF_PHASE, return_dtype=pl.Int64).to_numpy()
             | np.where(runs["atn"].fill_null(False).to_numpy(), _B["ATN"], 0))
    start = runs["start_ns"].to_numpy().astype(np.int64)
    end = runs["end_ns"].to_numpy().astype(np.int64)
    target = runs["target"].fill_null(-1).to_numpy().astype(np.int64)
    sel = runs["phase"].is_in(["SELECTION", "RESELECTION"]).to_numpy()
    reselection = (runs["phase"] == "RESELECTION").to_numpy()
    has_target = target >= 0
    sel_db = np.where(sel & has_target, (1 << initiator) | (1 << np.maximum(target, 0)), -1)
    arb_db = np.where(reselection, np.where(has_target, 1 << np.maximum(target, 0), -1), 1 << initiator)
    n = runs["handshakes"].to_numpy().astype(np.int64)
    width = (end - start) / np.maximum(n, 1)
    hs = n > 0
    info = runs["info_bytes"]
    last_byte = info.list.last().cast(pl.Int64).fill_null(-1).to_numpy()
    # each (re)selection's ARBITRATION comes just before it: run r goes after the ones before
    own_at = np.arange(runs.height) + np.cumsum(sel)
    arb_at = own_at[sel] - 1
    size = runs.height + int(sel.sum())
    col = {name: np.zeros(size, np.int64) for name in ("start_ns", "lines", "transitions", "handshakes",
                                                        "first_handshake_ns", "last_ns", "db_last")}
    own = {"start_ns": start, "lines": lines, "transitions": 1 + 2 * n, "handshakes": n,
           "first_handshake_ns": np.where(hs, start + np.floor((0 + 0.25) * width).astype(np.int64), -1),
           "last_ns": np.where(hs, start + np.floor(((n - 1) + 0.75) * width).astype(np.int64), start),
           "db_last": np.where(last_byte >= 0, last_byte, sel_db)}
    arb = {"start_ns": start[sel], "lines": _B["BSY"], "transitions": 1, "handshakes": 0, "first_handshake_ns": -1,
           "last_ns": start[sel], "db_last": arb_db[sel]}
    for name, values in col.items():
        values[own_at] = own[name]
        values[arb_at] = arb[name]
    which = np.full(size, -1, np.int64)
    which[own_at] = np.arange(runs.height)
    return pl.DataFrame([
        *(pl.Series(name, col[name]) for name in ("start_ns", "lines", "transitions", "handshakes")),
        schema.nullable(col["first_handshake_ns"], col["first_handshake_ns"] < 0, "first_handshake_ns"),
        pl.Series("last_ns", col["last_ns"]),
        schema.nullable(col["db_last"], col["db_last"] < 0, "db_last"),
        info.cast(pl.List(pl.UInt8)).gather(schema.nullable(which, which < 0)).alias("info_bytes"),
    ])


# ---------------------------------------------------------------- parse

def parse(path: str, *, strict: bool = True, progress=None, chunk_bytes: int = PART_BYTES,
          **_opts) -> Capture:
    """The trace read block by block (`chunk_bytes` of lines at a time: the tests go down to a
    few lines), its runs built as the blocks come (`_qemu_stream.Stream`)."""
    cap, st, (_, devices) = _read(str(path), strict, progress, chunk_bytes, summed=stretches)
    cap.meta = {
        "signals": SIGNALS, "initiator": INITIATOR_ID, "tick_ns": 1000, "settle_ns": 0,
        "handshakes": "synthesized",  # REQ/ACK edges carry no timing: attribution should not use them
        "origin_ns": int(st.t_min) if st.events else None, "clock": "host wall clock (QEMU trace log)",
        "events": st.events, "lsi_events": st.lsi_events, "phase_runs": st.run_count,
        "clamped_stamps": st.clamped,
        "source": "QEMU lsi53c895a emulation trace",
    }
    # the steps of every line and the phase runs: read again when asked for (memory follows
    # the runs' sums per stretch, not the lines nor the runs)
    cap.frames = LazyFrames({"steps": lambda: _steps(str(path)),
                             "phase_runs": lambda: _phase_runs(str(path), strict, chunk_bytes)})
    cap.frames["device_commands"] = devices
    cap.notes.append("Timing is QEMU's emulation of an LSI 53C895A (TCG, host-clock microsecond stamps), "
                     "not a real SCSI bus: phase durations measure the emulator, not a disk or a cable.")
    cap.notes.append("REQ/ACK edges are synthesized, one per byte the trace shows, spread evenly over each "
                     "phase; MESSAGE OUT and COMMAND bytes are rebuilt from the decoded events; "
                     f"initiator ID {INITIATOR_ID} is assumed (the driver's default). The emulator does not arbitrate: "
                     "each (re)selection is preceded by a zero-length ARBITRATION; the format asks for a settle delay of 0 "
                     "(a larger --settle-ns folds it away and the bus machine then flags BUS FREE -> RESELECTION).")
    stray = st.stray_dma_bytes
    if stray:
        cap.notes.append(f"{stray} DMA bytes were traced outside a data phase and are not counted")
    if cap.meta["clamped_stamps"]:
        cap.notes.append(f"{cap.meta['clamped_stamps']} trace lines carried a stamp earlier than the line "
                         "above (QEMU threads stamp independently); taken at the later time")
    if not st.lsi_events:  # another device's trace: commands refuse it (inputcheck.py), crosslayer reads it
        cap.meta["not_this_format"] = _qemu_devices.not_lsi(str(path), pl.Series(sorted(st.names), dtype=pl.Utf8))
        cap.notes.append("the trace holds no lsi_* events: no LSI bus activity in it")
    cap.chunks = lambda: transitions(cap.frames["phase_runs"])
    cap.columns["stretches"] = st.summed_runs()      # = stretches(runs), made part by part
    return cap


def _read(path: str, strict: bool, progress, chunk_bytes: int, summed=None) -> tuple[Capture, Stream, tuple]:
    """The capture read, its Stream and what the stream made (runs: kept unless `summed`;
    device commands): compiled (`CompiledStream`), or the Python way where that gives up."""
    def read(st: Stream, progress):
        cap = Capture(layer="bus", path=path, format=ID)
        _Read(path, strict, cap, st.add, chunk_bytes, scan=getattr(st, "scan", None)).run(progress)
        return cap, st, st.finish()
    times = ("start_ns", "first_handshake_ns", "last_ns")
    try:
        return read(CompiledStream(summed=summed, summed_times=times, keep_runs=summed is None,
                                   stretching=STRETCHING if summed is stretches else None), progress)
    except NotCompiled:
        return read(Stream(summed=summed, summed_times=times, keep_runs=summed is None), None)


def _phase_runs(path: str, strict: bool, chunk_bytes: int) -> pl.DataFrame:
    """The trace's phase runs (read again: `parse` keeps their sums per stretch only)."""
    _, _, (runs, _) = _read(path, strict, None, chunk_bytes)
    return runs.drop("dma_bytes")


STEP_COLUMNS = ("line_no", "t_ns", "event", "detail", "phase", "run", "target", "lun", "tag", "opcode", "lba",
                "sectors", "length", "len", "status")


def _steps(path: str) -> pl.DataFrame:
    """One row per event of the whole trace (`_qemu_steps.steps_frame`), its bad lines skipped."""
    cap = Capture(layer="bus", path=path, format=ID)
    return steps_frame(_events(path, False, cap, None)).select(STEP_COLUMNS)
