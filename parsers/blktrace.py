"""blktrace binary: `struct blk_io_trace` records, as blktrace writes them per CPU
(`<dev>.blktrace.<cpu>`), as one piped stream (`blktrace -o -`) or as a `blkparse -d` dump.

The record is declared once with construct (`BLK_IO_TRACE`, in _blktrace_records); the native
reader (native/src/block/reader.rs, `BlktraceReader`) reads the same layout (checked there). Records
are variable length (48-byte header plus `pdu_len` bytes): the reader follows each file's
chain by length (a magic inside a PDU is never mistaken for a record), reading the files
incrementally, and merges the files by time (then file, then place in the file).

Given one per-CPU file or the base name blktrace used (`sda` for `sda.blktrace.0`...), all of
that capture's per-CPU files are read and merged in time order.

The capture streams: `Capture.chunks()` yields dicts of block.MACHINE_COLUMNS in processing
order, a bounded number of records each (a reader thread may run it ahead: streams.prefetched).
What the files held besides (record counts, skipped records, anomalies, notes, process names,
messages, the origin) is filled in when the stream ends. `columns["events"]` and
`frames["events"]` are the whole trace, built from the chunks on first access (tests, small
traces, `convert`). Errors (strict mode) are raised while the stream is read, naming the
file and byte offset the one-shot reader named.
"""
from __future__ import annotations

import glob
import itertools
import os
import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from scsitrace import _lazy, schema
from scsitrace.block import events as block
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace._native import block as _native
from scsitrace.model import Capture, LazyFrames
from scsitrace.parsers import check_regular
from scsitrace.streams import concatenated

from . import _blktrace_gaps as _gaps
from ._time_order import InTimeOrder

ID = "blktrace"
SUFFIXES = (".blktrace.0", ".blktrace.1", ".blktrace.2", ".blktrace.3", ".bin")

MAGIC = 0x65617400
VERSION = 0x07
VERSION2 = 0x08             # struct blk_io_trace2 (Linux 6.19): 64-byte header, 64-bit action
TN_CGROUP = 1 << 8          # notify/action carries an 8-byte cgroup id before the payload
CGROUP_ID_BYTES = 8
# the record's construct declaration and the dtypes and offsets derived from it live in
# _blktrace_records, imported on first use (sniffing a file of another format does not load
# construct); they read as attributes of this module too (bt.BLK_IO_TRACE, bt.DTYPE_LE...)
RECORD_NAMES = ["BLK_IO_TRACE", "BLK_IO_TRACE2", "BLK_IO_TRACE_REMAP", "HEADER", "HEADER2", "numpy_dtype",
                "DTYPE_LE", "DTYPE_BE", "DTYPE2_LE", "DTYPE2_BE", "REMAP_DTYPE", "LAYOUT", "LAYOUT2", "REMAP_LAYOUT"]
__getattr__ = _lazy.from_module(__name__, f"{__package__}._blktrace_records", RECORD_NAMES)


def sniff(head: bytes) -> bool:
    return _byteorder(head) is not None


def _byteorder(head: bytes) -> str | None:
    if len(head) < 4:
        return None
    for order in ("<", ">"):
        magic = int.from_bytes(head[:4], "little" if order == "<" else "big")
        if magic & 0xFFFFFF00 == MAGIC:
            return order
    return None


# ---------------------------------------------------------------- which files

_PER_CPU = re.compile(r"^(?P<base>.*)\.blktrace\.(?P<cpu>\d+)$")


def per_cpu_files(path: str) -> list[tuple[str, int | None]]:
    """(file, cpu from its name) for every file of the capture `path` names."""
    path = str(path)
    m = _PER_CPU.match(path)
    base = m.group("base") if m else (path if not os.path.exists(path) else None)
    if base is None:
        return [(path, None)]
    found = []
    for name in glob.glob(glob.escape(base) + ".blktrace.*"):
        mm = _PER_CPU.match(name)
        if mm and mm.group("base") == base:
            found.append((name, int(mm.group("cpu"))))
    if not found:
        return [(path, None)]
    return sorted(found, key=lambda fc: fc[1])


def resolve_path(path: str) -> str | None:
    """For a base name that is not itself a file (`sda`), the first per-CPU file to sniff."""
    files = per_cpu_files(path)
    first = files[0][0]
    return first if first != str(path) and os.path.exists(first) else None


# ---------------------------------------------------------------- the stream

MAGIC_MASK = 0xFFFFFF00                   # the first header word, version byte masked out


@dataclass(frozen=True)
class PduRules:
    """What the native reader takes from PDUs (read by name there): the actions whose PDU it
    reads (remap, split, unplug, timer unplug, v8's zone unplug, whose PDU is an unplug count
    as U's: blkparse's account_unplug), the notify bits, the cgroup flag and the cgroup id's
    length before a payload, and where a remap PDU keeps its device and sector."""
    remap: int
    split: int
    unplug: int
    timer_unplug: int
    zone_unplug: int
    notify: int
    cgroup: int
    cgroup_bytes: int
    remap_size: int
    dev_from: int
    sector_from: int


def fill_pdu() -> PduRules:
    """The PDU rules, from the declaration (the remap PDU's size and field offsets)."""
    from . import _blktrace_records as rec
    return PduRules(remap=block.TA["A"], split=block.TA["X"], unplug=block.TA["U"], timer_unplug=block.TA["T"],
                    zone_unplug=block.TA["ZU"], notify=block.TC_NOTIFY, cgroup=TN_CGROUP,
                    cgroup_bytes=CGROUP_ID_BYTES, remap_size=rec.BLK_IO_TRACE_REMAP.sizeof(),
                    dev_from=rec.REMAP_LAYOUT["device_from"], sector_from=rec.REMAP_LAYOUT["sector_from"])


@dataclass(frozen=True)
class ReaderOptions:
    """A native reader's files and sizes (read by name there; see `_Stream._reader`)."""
    paths: list[str]
    cpus: list[int]             # each file's CPU from its name, -1: none
    pdu: PduRules
    strict: bool
    raw: bool
    chunk: int                  # records per chunk after the first (the records merged ahead)
    read_size: int
    probe: int
    sort_disorder: bool


CHUNK = 1 << 18              # records per chunk (about 13 MB of columns: reused memory, in cache)
PROBE = 1 << 20              # records merged ahead before the first chunk (and a piped stream's window)
READ_SIZE = 4 << 20          # bytes per read of a file
EAGER_BYTES = 64 << 20       # captures up to this size are read whole by parse (errors raised there)


def parse(path: str, *, strict: bool = True, progress=None, chunk: int = CHUNK, read_size: int = READ_SIZE,
          eager: bool | None = None, probe: int = PROBE, window: int = PROBE, **_opts) -> Capture:
    """A blktrace capture (all per-CPU files of it) as a streaming block-layer Capture. A
    small capture (EAGER_BYTES, or `eager`) is read whole here; a larger one as it is streamed.
    chunk: records per chunk; read_size: bytes per read; probe: records merged ahead before the
    first chunk (files going back in time among them: several are read whole and sorted, one,
    a piped stream, is put in order as read, `window` records at a time)."""
    path = str(path)
    files = per_cpu_files(path)
    if len(files) == 1 and not os.path.exists(files[0][0]):
        raise FileNotFoundError(2, "no such file", path)
    for f, _ in files:          # a FIFO or a device among the per-CPU files would block the read
        check_regular(f)
    sizes = [os.path.getsize(f) for f, _ in files]
    if not any(sizes):
        raise BadInput(path, "empty capture: no records" if len(files) == 1 else
                       f"empty capture: all {len(files)} per-CPU files are empty")
    stream = _Stream(path, files, sizes, strict, progress, (chunk, read_size, probe, window))
    if eager if eager is not None else sum(sizes) <= EAGER_BYTES:
        stream.capture.columns["events"]
    return stream.capture


class _Stream:
    """One capture's stream: `chunks()` (a new native reader each call), the whole-trace
    columns and frames built from it, and what the files held, filled in at its end."""

    def __init__(self, path, files, sizes, strict, progress, sizing):
        self.files, self.sizes, self.strict, self.progress = files, sizes, strict, progress
        self.chunk, self.read_size, self.probe, self.window = sizing
        self.finished = False
        cap = self.capture = Capture(layer="block", path=path, format=ID)
        cap.chunks = self.chunks
        cap.columns = LazyFrames({"events": self._machine_columns})
        cap.frames = LazyFrames({"events": self._events_frame, "processes": self._processes})
        big = False
        for f, size in zip(files, sizes):
            with open(f[0], "rb") as fh:
                big |= _byteorder(fh.read(4)) == ">"
        cap.meta.update({"files": [f for f, _ in files], "byte_order": "big-endian" if big else "little-endian"})

    def _read_chunk(self) -> int:
        """Records per chunk read: a single file's reorder window (see `chunks`), else `chunk`."""
        return self.chunk if len(self.files) > 1 else max(self.chunk, self.window)

    def _reader(self, raw: bool):
        return _native.BlktraceReader(ReaderOptions(
            paths=[f for f, _ in self.files], cpus=[-1 if c is None else c for _, c in self.files], pdu=fill_pdu(),
            strict=self.strict, raw=raw, chunk=self._read_chunk(), read_size=self.read_size, probe=self.probe,
            sort_disorder=len(self.files) > 1))

    def chunks(self, raw: bool = False):
        """Dicts of block.MACHINE_COLUMNS (plus RAW_EVENTS' fields when `raw`) in processing
        order, at most `chunk` records each (views of the reader's parts, cut where the reader
        cut them before); at the end, the capture's counts, notes and names are filled in."""
        if not raw and dict.__contains__(self.capture.columns, "events"):     # already read whole
            yield from _views(self.capture.columns["events"], self.chunk)
            return
        for part in self._parts(raw):
            for piece in _views(part, self._read_chunk()):
                yield from _views(piece, self.chunk)

    def _parts(self, raw: bool):
        """The stream as the reader hands it over, in processing order: the records it merged
        ahead in one part, then a part per `_read_chunk()` records. A single file whose times
        go back among the first `probe` records (a piped stream) is put in order as it is read
        (parsers/_time_order.py, a window of `window` records); at the end, the capture's
        counts, notes and names are filled in."""
        reader = self._reader(raw)
        parts = self._read(reader)
        first = next(parts, None)
        if first is not None and reader.disorder():
            order = InTimeOrder(self.probe, "t_ns")
            blocks = (pl.DataFrame(piece) for part in itertools.chain([first], parts)
                      for piece in _views(part, self._read_chunk()))
            shift = yield from self._in_order(order(blocks))
            self._finish(reader, order, shift)
            return
        if first is not None:
            yield first
            yield from parts
        self._finish(reader)

    def _read(self, reader):
        """The reader's chunks, as read; a strict-mode error raised at their end."""
        seen = 0
        while True:
            part = reader.next_chunk()
            if self.progress is not None and not self.finished:
                now = reader.bytes_read()
                self.progress(now - seen)
                seen = now
            if part is None:
                break
            frame = pl.DataFrame(part)      # the record batch's buffers, as numpy views
            yield {name: frame[name].to_numpy() for name in frame.columns}
        fault = reader.fault()
        if fault is not None:
            raise (TruncatedInput if fault.kind == "truncated" else BadInput)(self.files[fault.file][0], fault.why,
                                                                             offset=fault.offset)

    def _in_order(self, frames):
        """Frames in processing order as chunks of at most `chunk` records, times from the
        first of them; returns how much earlier than the first record read that is."""
        shift = None
        for df in frames:
            if shift is None and df.height:
                shift = int(df["t_ns"][0])
            for lo in range(0, df.height, self.chunk):
                part = df[lo:lo + self.chunk]
                cols = {name: part[name].to_numpy() for name in part.columns}
                cols["t_ns"] = cols["t_ns"] - shift
                yield cols
        return shift or 0

    def _machine_columns(self) -> dict[str, np.ndarray]:
        parts = list(self._parts(raw=False))
        if len(parts) == 1:         # a capture the reader merged ahead whole: its columns as they are
            return {name: parts[0][name] for name in block.MACHINE_COLUMNS}
        return concatenated(parts, block.MACHINE_COLUMNS)

    def _events_frame(self) -> pl.DataFrame:
        parts = list(self._parts(raw=True))
        if not parts:
            return block.finish_events(schema.empty(block.RAW_EVENTS)).drop("time_abs")
        raw = pl.DataFrame({name: np.concatenate([p[name] for p in parts]) for name in block.RAW_EVENTS},
                           schema=block.RAW_EVENTS)
        return block.finish_events(raw).drop("time_abs")

    def _processes(self) -> pl.DataFrame:
        if not self.finished:      # the names are notify records anywhere in the files: read them all
            for _ in self.chunks():
                pass
        return self.capture.frames["processes"]

    def _finish(self, reader, order: InTimeOrder | None = None, shift: int = 0) -> None:
        """What the files held, into the capture (once); `order`: how a piped stream was put
        in order, its first record `shift` ns from the first one read."""
        if self.finished:
            return
        self.finished = True
        cap, files = self.capture, self.files
        names, messages, clocks, anomalies, gaps = {}, [], [], [], {}
        found = sorted(reader.files(), key=lambda d: d.file)
        versions = _versions(files, found)
        for d in found:
            anomalies += _file_anomalies(cap, files[d.file], d)
            _notify_texts(d, names, messages, clocks)
            for cpu, n in d.gaps:
                gaps[cpu] = gaps.get(cpu, 0) + n
        cap.records.read = sum(d.records for d in found)
        cap.frames["processes"] = pl.DataFrame({"pid": list(names), "name": list(names.values())},
                                               schema=block.PROCESSES)
        cap.meta.update({"origin_ns": (reader.origin() or 0) + shift, "messages": messages,
                         "wall_clock": clocks,             # BLK_TN_TIMESTAMP: trace time -> wall clock (ns)
                         "sequence_gaps": {str(c): n for c, n in sorted(gaps.items())},
                         "versions": versions})
        if anomalies:
            cap.anomalies = pl.DataFrame([{"t_ns": None, "kind": k, "detail": det, "position": pos}
                                          for k, det, pos in anomalies], schema=schema.ANOMALIES)
        cap.notes += _gaps.file_notes(files, self.sizes) + _gaps.gap_notes(gaps) + _gaps.report_notes(files)
        cap.notes += _version_notes(files, found, versions)
        if order is None:
            cap.notes += _gaps.disorder_notes([(files[d.file][0], d.disorder) for d in found])
        else:
            cap.notes += _gaps.window_notes(files[0][0], order, self.window)


def _views(cols: dict[str, np.ndarray], size: int):
    """Columns as views of at most `size` rows each (the columns themselves when they fit)."""
    n = len(cols["t_ns"])
    if n <= size:
        if n:
            yield cols
        return
    for lo in range(0, n, size):
        yield {name: col[lo:lo + size] for name, col in cols.items()}


def _versions(files, found: list) -> dict[str, int]:
    """Records (notify records included) per protocol version over the capture ({"7": n, "8": m},
    the versions present)."""
    total = [sum(d.versions[k] for d in found) for k in (0, 1)]
    return {str(v): n for v, n in zip((VERSION, VERSION2), total) if n}


def _version_notes(files, found: list, versions: dict) -> list[str]:
    """Which files are in which protocol version when they differ, and v8's zone operations
    (the new actions ZP/ZU are counted with the events; these are categories of other actions)."""
    notes = []
    if len(versions) > 1:
        per_file = []
        for d in found:
            v7, v8 = d.versions
            name = os.path.basename(files[d.file][0])
            per_file.append(f"{name}: " + ", ".join(f"{n} v{v}" for v, n in ((7, v7), (8, v8)) if n))
        notes.append("the capture mixes blktrace protocol versions 7 (struct blk_io_trace) and 8 "
                     "(struct blk_io_trace2, 64-bit actions): " + "; ".join(per_file) + "; both are read")
    zone = [sum(d.zone_ops[k] for d in found)
            for k in range(len(block.V2_CATEGORIES))]
    if any(zone):
        named = ", ".join(f"{name.replace('_', ' ').lower()} ({block.ZONE_RWBS.get(name, 'no RWBS letter')}) {n}"
                          for name, n in zip(block.V2_CATEGORIES, zone) if n)
        notes.append(f"blktrace v8 operations among the data records: {named}; the stage tables treat them "
                     "as the I/Os they are (btt's rules do not depend on the operation)")
    return notes


def _file_anomalies(cap: Capture, file: tuple[str, int | None], d) -> list[tuple[str, str, str]]:
    """Bad, truncated and CPU-mismatched records of one file: anomaly rows and skip counts."""
    where = file[0]
    out = [("BAD RECORD", reason, f"{where}: byte offset {off}") for off, reason in d.bad]
    skipped = list(d.bad)
    if d.truncated:
        off, reason = d.truncated
        out.append(("TRUNCATED RECORD", reason, f"{where}: byte offset {off}"))
        skipped.append(d.truncated)
    if skipped:
        cap.records.skip(len(skipped), [f"{where}: byte offset {o}: {r}" for o, r in skipped])
    if d.wrong_cpu:
        count, first, cpu = d.wrong_cpu
        out.append(("CPU MISMATCH", f"{count} records of {os.path.basename(where)} say CPU {cpu}, "
                                    f"the file name says CPU {file[1]}", f"{where}: byte offset {first}"))
    return out


def _notify_texts(d, names: dict, messages: list, clocks: list) -> None:
    """Process names (pid -> comm), message notes and wall-clock stamps from the notify records
    of one file's report (`_native.block.FileReport`)."""
    order = ">" if d.big else "<"
    for action, pid, time, device, raw in d.notify:
        kind = action & 0xFF
        text = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        if kind == block.TN_TIMESTAMP and len(raw) >= 8:
            # two u32 in the tracing host's order: the wall clock when tracing started
            sec, nsec = np.frombuffer(raw[:8], order + "u4")
            clocks.append({"time_abs": int(time), "wall_clock_ns": int(sec) * 10**9 + int(nsec)})
        elif kind == block.TN_PROCESS:
            names[pid] = "kernel" if pid == 0 else text.split("/", 1)[0]
        elif kind == block.TN_MESSAGE:
            messages.append({"time_abs": int(time), "device": block.dev_name(int(device)), "text": text})
