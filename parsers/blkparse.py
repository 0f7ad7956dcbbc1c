"""blkparse's default text output: one line per event, optionally followed by its summary
(per-CPU and total counters, throughput, "Events (...): N entries").

    8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [dd]
  dev    cpu  sequence   seconds.ns     pid act rwbs  rest (by action)

Every line is decoded with polars regular expressions, a block of lines at a time. The
summary block is recognised and skipped; any other line that is not an event is a bad line
(BadInput naming the line in strict mode, skipped and counted in lenient mode).
"""
from __future__ import annotations

import os
import re

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.block import events as block
from scsitrace.errors import BadInput
from scsitrace.model import Capture, LazyFrames
from scsitrace.streams import concatenated
from . import _blkparse_layout as _layout, _blkparse_native as native, _blkparse_summary as _summary, _blktrace_gaps, \
    _counters, _lines
from ._time_order import InTimeOrder

ID = "blkparse"
SUFFIXES = (".blkparse", ".blkparse.txt")

EVENT = (r"^\s*(?P<major>\d+),(?P<minor>\d+)\s+(?P<cpu>\d+)\s+(?P<seq>\d+)\s+(?P<sec>\d+)\.(?P<nsec>\d{9})"
         r"\s+(?P<pid>\d+)\s+(?P<act>[A-Za-z]{1,2})\s+(?P<rwbs>[A-Z]+)(?:\s+(?P<rest>.*?))?\s*$")
_EVENT_RE = re.compile(EVENT)
# first lines of blkparse's trailing summary; everything from there on is counters
SUMMARY_START = r"^(CPU\d+ \(|Total \(|Throughput \(|Events \(|Skips: |Input file )"
MAX_SECTOR = (0, 2**63 - 1)             # u64 in the kernel; int64 here
MAX_NSECT = (0, (2**32 - 1) // 512)     # blk_io_trace.bytes is 32 bits
CPU_RANGE = (0, 2**31 - 1)              # RAW_EVENTS.cpu is Int32


def sniff(head: bytes) -> bool:
    """The first line that is not blank or a comment (`#`, as a header naming the columns) is
    an event line; or the first such lines (up to 10) share one custom layout (`-f`)."""
    raws = head.splitlines()[:40]
    if len(raws) > 1 and not head.endswith(b"\n"):
        raws = raws[:-1]                                 # the head may cut the last line
    texts = [raw.decode("utf-8", "replace").strip() for raw in raws]
    events = [t for t in texts if t and not t.startswith("#")]
    if not events:
        return False
    if _EVENT_RE.match(events[0]):
        return True
    header = next((t for t in texts if t.startswith("#")), None)
    return _layout.infer(events[:10], header) is not None


def layout_of(path: str) -> tuple[str, list[str]]:
    """The line pattern of a blkparse text (EVENT, or a custom layout found from its first
    event lines) and the fields that layout lacks."""
    with open(path, "rb") as fh:
        head = fh.read(1 << 16)
    texts = [raw.decode("utf-8", "replace").strip() for raw in head.splitlines()]
    if len(head) == 1 << 16 and texts:
        texts.pop()                                      # maybe cut
    events = []
    for t in texts:
        if re.match(SUMMARY_START, t):
            break
        if t and not t.startswith("#"):
            events.append(t)
    if not events or all(_EVENT_RE.match(t) for t in events[:50]):
        return EVENT, []
    header = next((t for t in texts if t.startswith("#")), None)
    return _layout.infer(events[:50], header) or (EVENT, [])


# The action-specific tail, one pattern for all: "S + N", "S / NEW" (split), "<- (maj,min) S"
# (remap), "[comm]" or "[error]", and the unplug count after the brackets.
REST = (r"^(?:(?P<sector>\d+)(?: \+ (?P<nsect>\d+)| / (?P<split_sector>\d+))?)?\s*"
        r"(?:<- \((?P<from_major>\d+),(?P<from_minor>\d+)\) (?P<from_sector>\d+))?\s*"
        r"(?:\[(?P<bracket>.*)\])?\s*(?P<unplugs>\d+)?\s*$")


def _decode(lines: pl.DataFrame, pattern: str = EVENT, missing: tuple = ()) -> pl.DataFrame:
    """Every line -> its fields, or `reason` why it is not an event (null for blank/summary).
    `pattern`: the line layout (EVENT or a custom one, `layout_of`), lacking the `missing`
    fields (their defaults filled in on the lines it matches)."""
    text = pl.col("text").str.strip_chars_end("\r\n")
    df = lines.with_columns(text.alias("t"))
    df = df.with_columns(pl.col("t").str.extract_groups(pattern).alias("g")).unnest("g")
    if pattern != EVENT:
        matched = pl.col("act").is_not_null()
        df = df.with_columns(*(pl.when(matched).then(pl.lit(_layout.DEFAULTS[f])).alias(f) for f in missing),
                             pl.col("rest").str.replace(r"^(\d+) (\d+)(\s|$)", "$1 + $2$3"))
    df = df.with_columns(pl.col("rest").fill_null("").str.extract_groups(REST).alias("r")).unnest("r")
    ranges = [(~_lines.bad_bytes(pl.col("t")), "NUL byte or bytes that are not UTF-8 in an event line"),
              (pl.col("rest").fill_null("").str.contains(REST), "unrecognised event details after the action"),
              (pl.all_horizontal(_lines.checked_int(pl.col(c), *_lines.U32).is_not_null()
                                 for c in ("cpu", "seq", "pid")), "CPU, sequence or PID outside 0..2^32-1"),
              (_lines.checked_int(pl.col("cpu"), *CPU_RANGE).is_not_null(),
               "CPU number beyond 2^31-1 (the events table holds CPUs as int32)"),
              (_lines.checked_int(pl.col("major"), 0, 4095).is_not_null()
               & _lines.checked_int(pl.col("minor"), 0, (1 << 20) - 1).is_not_null(),
               "device number out of range (major 0-4095, minor 0-1048575)"),
              (pl.all_horizontal(pl.col(c).is_null() | _lines.checked_int(pl.col(c), *_lines.U32).is_not_null()
                                 for c in ("from_major", "from_minor")), "remap source device number out of range"),
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
    comment = pl.col("t").str.strip_chars_start().str.starts_with("#")
    blank = (pl.col("t").str.strip_chars() == "") | comment
    known = pl.col("act").is_in(_layout.ACTIONS)
    reason = (pl.when(blank).then(None)
              .when(pl.col("major").is_null()).then(pl.lit("not a blkparse event line"))
              .when(~known).then(pl.lit("unknown action")))
    for i, (_, why) in enumerate(ranges):
        reason = reason.when(~pl.col(f"_ok{i}")).then(pl.lit(why))
    reason = reason.otherwise(None)
    return df.with_columns(reason.alias("reason"), blank.alias("blank"), comment.alias("comment")) \
        .drop([f"_ok{i}" for i in range(len(ranges))])


# default-layout blocks: each holds its events about 12x its bytes through the stages in flight
# (scan, time order, machine columns, the mapped file's window), so a small block keeps the
# peak memory small; per block the fixed cost is a few polars calls
BLOCK_BYTES = 8 << 20
PROBE = 1 << 20             # events read ahead before the first chunk: out of time order among them, the file is sorted
EAGER_BYTES = 64 << 20      # files up to this size are read whole by parse (errors raised there)


def parse(path: str, *, strict: bool = True, progress=None, block_bytes: int | None = None, probe: int = PROBE,
          eager: bool | None = None, **_opts) -> Capture:
    """A blkparse text as a streaming block-layer Capture: `chunks()` yields dicts of
    block.MACHINE_COLUMNS in processing order (time, then line), one block of lines each;
    counts, notes, process names and messages are filled in when the stream ends. A small
    file (EAGER_BYTES, or `eager`) is read whole here."""
    path = str(path)
    stream = _Stream(path, strict, progress, block_bytes, probe)
    if eager if eager is not None else _lines.file_size(path) <= EAGER_BYTES:
        stream.capture.columns["events"]
    return stream.capture


class _Stream:
    """One blkparse file's stream (see parse): each block of lines decoded, its events put in
    time order with those held back from earlier blocks (parsers/_time_order.py); a file whose order that
    cannot restore among its first `probe` events is read whole and sorted, later such blocks
    are handed on as read (and said so in a note)."""

    def __init__(self, path, strict, progress, block_bytes, probe):
        self.path, self.strict, self.progress, self.probe = path, strict, progress, probe
        self.block_bytes = block_bytes
        self.finished = False
        cap = self.capture = Capture(layer="block", path=path, format=ID)
        cap.chunks = self.chunks
        cap.columns = LazyFrames({"events": self._machine_columns})
        cap.frames = LazyFrames({"events": self._events_frame, "processes": self._processes})
        cap.meta.update({"files": [path], "origin_ns": 0})

    def _raw_blocks(self, state: dict):
        """RAW_EVENTS of each block of lines, in file order; `state` gathers the rest. The
        default layout's lines are scanned in Rust (parsers/_blkparse_native.py), a custom
        layout's decoded by its regex."""
        pattern, missing = layout_of(self.path)
        if pattern != EVENT:
            state["layout"] = missing
            yield from self._regex_blocks(state, pattern, missing)
        else:
            yield from self._native_blocks(state)

    def _regex_blocks(self, state: dict, pattern: str, missing: list[str]):
        in_summary = False
        kw = {} if self.block_bytes is None else {"block_bytes": self.block_bytes}
        for lines in _lines.iter_line_blocks(self.path, strict=self.strict, progress=self.progress, **kw):
            if in_summary:
                self._summary_lines(lines, state)
                continue
            df = _decode(lines, pattern, tuple(missing))
            summary_at = df.filter(pl.col("t").str.contains(SUMMARY_START))
            if summary_at.height:
                first = summary_at["line_no"][0]
                self._summary_lines(df.filter(pl.col("line_no") >= first), state)
                df = df.filter(pl.col("line_no") < first)
                in_summary = True
            yield from self._events(df, state)

    def _native_blocks(self, state: dict):
        """The blocks of a default-layout file: each line the scanner takes is a good event;
        the others (comments, the summary, messages, bad lines, rare forms) are decoded by
        `_decode`, and both merged in line order."""
        in_summary, line_no = False, 1
        for view, _ in _lines.iter_byte_blocks(self.path, block_bytes=self.block_bytes or BLOCK_BYTES,
                                               progress=self.progress, views=True, strict=self.strict):
            first_line = line_no
            if in_summary:
                raw = bytes(view)
                line_no += raw.count(b"\n")
                self._summary_lines(_lines._block_frame(raw, self.path, first_line, self.strict), state)
                continue
            scanned = native.scan_block(view, first_line)
            line_no += scanned.newlines
            if not scanned.other:
                yield from self._events(None, state, scanned)
                continue
            df = _decode(_lines.fallback_frame([(ln, raw) for ln, _, raw in scanned.other], self.path, self.strict))
            summary_at = df.filter(pl.col("t").str.contains(SUMMARY_START))
            if summary_at.height:
                first = summary_at["line_no"][0]
                start = next(s for ln, s, _ in scanned.other if ln == first)
                self._summary_lines(_lines._block_frame(bytes(view[start:]), self.path, first, self.strict), state)
                df = df.filter(pl.col("line_no") < first)
                scanned.before(first)
                in_summary = True
            yield from self._events(df, state, scanned)

    @staticmethod
    def _summary_lines(lines: pl.DataFrame, state: dict) -> None:
        """blkparse's trailing summary (lines `line_no`, `text` or `t`): its counters."""
        if "t" not in lines.columns:
            lines = lines.select(pl.col("text").str.strip_chars_end("\r\n").alias("t"))
        _counters.blkparse_counters(lines, state["counters"])
        _summary.read_counters(lines["t"].to_list(), state["summary"], state["summary_at"])

    def _events(self, df: pl.DataFrame | None, state: dict, scanned=None):
        """The events of a block (before any summary): those of the decoded lines `df` (None:
        none) and, with `scanned`, those the scanner took, as RAW_EVENTS in line order,
        counted the way blkparse counts them, their process names kept."""
        events, names = self._decoded(df, state) if df is not None else (None, None)
        if scanned is not None:
            events = scanned.events if events is None else native.merged(scanned.events, events)
            names = scanned.names if names is None else pl.concat([scanned.names, names]).sort("line")
        if events is None or not events.height:
            return
        state["tally"].feed(events)
        for pid, _, name in names.iter_rows():
            state["names"].setdefault(pid, name)
        yield events.select(list(block.RAW_EVENTS))

    def _decoded(self, df: pl.DataFrame, state: dict):
        """The decoded lines of a block: comments counted, bad lines raised or counted,
        messages kept; (events, names) of the event lines, or (None, None)."""
        comments = df.filter(pl.col("comment"))
        state["comments"] += comments.height
        if comments.height and state["header"] is None:
            state["header"] = comments["t"][0].strip()
        bad = df.filter(pl.col("reason").is_not_null())
        if bad.height:
            row = bad.row(0, named=True)
            if self.strict:
                raise BadInput(self.path, row["reason"], line=row["line_no"], text=row["t"])
            state["bad"] += bad.height
            state["examples"] += [f"{self.path}:{r['line_no']}: {r['reason']}"
                                  for r in bad.head(5).iter_rows(named=True)]
        ev = df.filter(pl.col("reason").is_null() & ~pl.col("blank"))
        messages = ev.filter(pl.col("act") == "m")
        state["messages"] += messages.height
        room = 1000 - len(state["message_rows"])
        if room > 0:
            state["message_rows"] += messages.head(room).select("sec", "nsec", "rest").rows()
        ev = ev.filter(pl.col("act") != "m")
        return native.decoded_events(ev) if ev.height else (None, None)

    def _raw_sorted(self, state: dict):
        """The raw blocks in processing order (see the class docstring)."""
        order = InTimeOrder(self.probe, "time_abs")
        yield from order(self._raw_blocks(state))
        state["disorder"] = order.disorder

    def chunks(self, raw: bool = False):
        """Dicts of MACHINE_COLUMNS (plus RAW_EVENTS' columns when `raw`) in processing order."""
        if not raw and dict.__contains__(self.capture.columns, "events"):     # already read whole
            yield self.capture.columns["events"]
            return
        state = {"counters": {}, "bad": 0, "examples": [], "messages": 0, "message_rows": [], "names": {},
                 "tally": native.Tally(), "disorder": 0, "events": 0, "comments": 0, "header": None,
                 "summary": {}, "summary_at": {}}
        origin = None
        for part in self._raw_sorted(state):
            if origin is None:
                origin = int(part["time_abs"][0])
            state["events"] += part.height
            cols = _machine(part, origin)
            if raw:
                cols.update({name: part[name].to_numpy() for name in block.RAW_EVENTS})
            yield cols
        self._finish(state)

    def _machine_columns(self) -> dict[str, np.ndarray]:
        return concatenated(self.chunks(), block.MACHINE_COLUMNS)

    def _events_frame(self) -> pl.DataFrame:
        parts = list(self.chunks(raw=True))
        raw = (pl.DataFrame({name: np.concatenate([p[name] for p in parts]) for name in block.RAW_EVENTS},
                            schema=block.RAW_EVENTS) if parts else schema.empty(block.RAW_EVENTS))
        return block.finish_events(raw).drop("time_abs")

    def _processes(self) -> pl.DataFrame:
        if not self.finished:
            self.capture.columns["events"]
        return self.capture.frames["processes"]

    def _finish(self, state: dict) -> None:
        if self.finished:
            return
        self.finished = True
        cap = self.capture
        if state["bad"]:
            cap.records.skip(state["bad"], state["examples"])
        cap.records.read = state["events"] + state["messages"]
        tally = state["tally"]
        gaps = dict(pl.DataFrame(tally.gaps()).iter_rows())
        cap.notes += _blktrace_gaps.gap_notes(gaps) + _counters.blkparse_notes(
            {k: v for k, v in state["counters"].items() if not (k == "skips" and gaps)},
            cap.records.read + state["bad"])
        counts = {(cpu, letter, write): n for cpu, letter, write, n in pl.DataFrame(tally.counts()).iter_rows()}
        cap.notes += _summary.notes(state["summary"], counts)
        if state.get("layout") is not None:
            lacks = {"major": "device (read as 0,0)", "cpu": "CPU (read as 0)", "seq": "sequence numbers (no "
                     "gap check)", "pid": "pid (read as 0)"}
            gone = [lacks[f] for f in state["layout"] if f in lacks]
            cap.notes.append("a custom blkparse format (-f/-F): the fields recognised from its lines" +
                             (f"; it has no {', no '.join(gone)}" if gone else ""))
        if state["comments"]:
            cap.notes.append(f"{state['comments']:,} comment lines (#) skipped, the first: {state['header'][:120]!r}")
        if state["disorder"]:
            cap.notes.append(f"{os.path.basename(self.path)}: {state['disorder']} blocks of event lines hold events "
                             f"earlier than events of blocks before them, after the first {self.probe} events: "
                             "those events are analysed where they were read, not in time order")
        names = state["names"]
        cap.frames["processes"] = pl.DataFrame({"pid": sorted(names), "name": [names[p] for p in sorted(names)]},
                                               schema=block.PROCESSES)
        cap.meta["messages"] = [{"t_ns": int(sec) * 10**9 + int(nsec), "text": rest}
                                for sec, nsec, rest in state["message_rows"]]


def _machine(raw: pl.DataFrame, origin: int) -> dict[str, np.ndarray]:
    """MACHINE_COLUMNS of raw events (as block.finish_events gives them: a remap's source
    device and sector, a split's new sector; else 0). The raw events hold a remap's device
    and sector and 0 for any other event (parsers/_blkparse_native.py)."""
    col = {name: raw[name].to_numpy() for name in ("time_abs", "action", "device", "sector", "bytes", "pid",
                                                   "pdu_dev", "pdu_sector", "pdu_int", "has_int", "has_remap",
                                                   "error")}
    split = ((col["action"] & 0xFF) == block.TA["X"]) & col["has_int"] & ~col["has_remap"]
    col.update(t_ns=col["time_abs"] - origin, pdu_sector=np.where(split, col["pdu_int"], col["pdu_sector"]))
    return {name: col[name].astype(dtype, copy=False) for name, dtype in block.MACHINE_COLUMNS.items()}
