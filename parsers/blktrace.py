"""blktrace binary: `struct blk_io_trace` records, as blktrace writes them per CPU
(`<dev>.blktrace.<cpu>`), as one piped stream (`blktrace -o -`) or as a `blkparse -d` dump.

The record is declared once with construct (`BLK_IO_TRACE`); the numpy dtype derived from
that declaration gives the field offsets the compiled passes (parsers/_blktrace_scan.py) read.
Files are memory-mapped. Records are variable length (48-byte header plus `pdu_len` bytes),
so one compiled pass follows the chain by length (a magic inside a PDU is never mistaken for
a record), and a second decodes each record straight into its row of the merged columns.

Given one per-CPU file or the base name blktrace used (`sda` for `sda.blktrace.0`...), all of
that capture's per-CPU files are read and merged in time order.
"""
from __future__ import annotations

import glob
import os
import re
from concurrent.futures import ThreadPoolExecutor

import construct as cs
import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.block import events as block
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.model import Capture, LazyFrames

from . import _blktrace_gaps as _gaps
from . import _blktrace_scan as _scan

ID = "blktrace"
SUFFIXES = (".blktrace.0", ".blktrace.1", ".blktrace.2", ".blktrace.3", ".bin")

# include/uapi/linux/blktrace_api.h, field names as spelled there
BLK_IO_TRACE = cs.Struct(
    "magic" / cs.Int32ul,       # BLK_IO_TRACE_MAGIC | version
    "sequence" / cs.Int32ul,
    "time" / cs.Int64ul,        # ns, the kernel's trace clock
    "sector" / cs.Int64ul,
    "bytes" / cs.Int32ul,
    "action" / cs.Int32ul,      # __BLK_TA_* | BLK_TC_ACT(category bits)
    "pid" / cs.Int32ul,
    "device" / cs.Int32ul,      # MAJOR << 20 | MINOR
    "cpu" / cs.Int32ul,
    "error" / cs.Int16ul,
    "pdu_len" / cs.Int16ul,
)
# PDU of a remap (A) record; the kernel writes it big-endian whatever the host order
BLK_IO_TRACE_REMAP = cs.Struct(
    "device_from" / cs.Int32ub,
    "device_to" / cs.Int32ub,
    "sector_from" / cs.Int64ub,
)
HEADER = BLK_IO_TRACE.sizeof()
MAGIC = 0x65617400
VERSION = 0x07
TN_CGROUP = 1 << 8          # notify/action carries an 8-byte cgroup id before the payload
CGROUP_ID_BYTES = 8


def numpy_dtype(struct: cs.Struct, byteorder: str = "<") -> np.dtype:
    """The numpy record dtype mirroring a construct Struct of fixed-size integer fields."""
    fields = []
    for sub in struct.subcons:
        letter = sub.subcon.fmtstr[-1]          # struct module letter: upper case = unsigned
        kind = "u" if letter.isupper() else "i"
        fields.append((sub.name, np.dtype(f"{byteorder}{kind}{sub.subcon.sizeof()}")))
    dt = np.dtype(fields)
    assert dt.itemsize == struct.sizeof()
    return dt


DTYPE_LE = numpy_dtype(BLK_IO_TRACE, "<")
DTYPE_BE = numpy_dtype(BLK_IO_TRACE, ">")
REMAP_DTYPE = numpy_dtype(BLK_IO_TRACE_REMAP, ">")


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


# ---------------------------------------------------------------- record chain

MAGIC_MASK = 0xFFFFFF00                   # the first header word, version byte masked out
LAYOUT = _scan.layout(DTYPE_LE)           # {field: (offset, size)}, from the declaration
REMAP_LAYOUT = _scan.layout(REMAP_DTYPE)
assert all(LAYOUT[name][1] == width for name, width in _scan.FILL_FIELDS.items())
assert all(LAYOUT[name][1] == width for name, width in _scan.WALK_FIELDS.items())
WALK_FIELDS = np.array([LAYOUT[name][0] for name in _scan.WALK_FIELDS], np.int64)
assert all(REMAP_LAYOUT[name][1] == width for name, width in _scan.REMAP_FIELDS.items())
FILL_FIELDS = np.array([LAYOUT[name][0] for name in _scan.FILL_FIELDS], np.int64)
FILL_PDU = np.array([block.TA["A"], block.TA["X"], block.TA["U"], block.TA["T"], block.TC_NOTIFY, TN_CGROUP,
                     CGROUP_ID_BYTES, BLK_IO_TRACE_REMAP.sizeof(), REMAP_LAYOUT["device_from"][0],
                     REMAP_LAYOUT["sector_from"][0]], np.int64)


class _Chain:
    """Record offsets of one file, plus what was wrong where (lenient mode)."""

    def __init__(self):
        self.bad: list[tuple[int, str]] = []     # (byte offset, reason)
        self.truncated: tuple[int, str] | None = None


def _map(path: str) -> np.ndarray:
    """The file's bytes, memory-mapped (read-only, no copy)."""
    if os.path.getsize(path) == 0:
        return np.zeros(0, np.uint8)
    return np.asarray(np.memmap(path, np.uint8, mode="r"))


def _walk(b: np.ndarray, order: str, path: str, file_cpu: int | None, strict: bool) -> tuple[_Chain, dict]:
    """Follow the record chain from offset 0 by header lengths (compiled, one pass) -> what was
    wrong where, and the offsets and times of the data records, the offsets of the others
    (notify records, other versions), whether the data records are in time order, and how many
    records name another CPU than the file. The walk first assumes 4-aligned records (every
    PDU blktrace writes but messages is 8 or 16 bytes) and is redone byte by byte when a
    record sits at an odd offset: resynchronizing after a bad record looks at aligned offsets
    only in the first case."""
    big = order == ">"
    expect = np.array([block.TC_NOTIFY, VERSION, -1 if file_cpu is None else file_cpu], np.int64)
    for aligned in (True, False):
        outcome, where, offs, time, other, bad, at = _scan.walk(
            b, big, aligned, HEADER, MAGIC_MASK, MAGIC, WALK_FIELDS, expect)
        if outcome != _scan.REDO_UNALIGNED:
            break
    chain = _Chain()
    chain.bad = [(int(pos), _why_bad(b, int(pos), order)) for pos in bad]
    if outcome == _scan.TRUNCATED_SHORT:
        chain.truncated = (where, f"truncated record: {len(b) - where} bytes left, a record needs {HEADER}")
    elif outcome == _scan.TRUNCATED_PDU:
        pdu_off, pdu_size = LAYOUT["pdu_len"]
        pdu_len = int.from_bytes(bytes(b[where + pdu_off:where + pdu_off + pdu_size]),
                                 "little" if order == "<" else "big")
        chain.truncated = (where, f"truncated record: its {pdu_len}-byte PDU runs past the end")
    if strict and chain.bad:           # the walk only moves forward: the first bad comes first
        raise BadInput(path, chain.bad[0][1], offset=chain.bad[0][0])
    if strict and chain.truncated:
        raise TruncatedInput(path, chain.truncated[1], offset=chain.truncated[0])
    return chain, {"offs": offs, "time": time, "other": other, "in_order": not at[_scan.AT_UNSORTED],
                   "wrong_cpu": int(at[_scan.AT_WRONG_CPU]), "first_wrong": int(at[_scan.AT_FIRST_WRONG])}


def _drop_bad_times(b: np.ndarray, order: str, heads: dict, chain: _Chain, path: str, strict: bool) -> None:
    """A data record whose time or sector has bit 63 set (292 years of trace clock; 4 ZiB
    into a disk) is a damaged record, not a value that wraps negative in int64."""
    top = LAYOUT["sector"][0] + (7 if order == "<" else 0)       # the sector's most significant byte
    bad = (heads["time"] < 0) | (b[heads["offs"] + top] >= 0x80)
    if not bad.any():
        return
    where = heads["offs"][bad]
    why = "time or sector beyond int64 (a damaged record)"
    if strict:
        raise BadInput(path, why, offset=int(where[0]))
    chain.bad += [(int(pos), why) for pos in where]
    heads["offs"], heads["time"] = heads["offs"][~bad], heads["time"][~bad]


def _why_bad(b, pos, order) -> str:
    magic = int.from_bytes(bytes(b[pos:pos + 4]), "little" if order == "<" else "big")
    return f"bad magic 0x{magic:08x} (expected 0x{MAGIC | VERSION:08x}): not a blk_io_trace record"


# ---------------------------------------------------------------- bulk decode

def _decode_file(path: str, file_cpu: int | None, strict: bool, progress) -> dict:
    """One file -> its data records' offsets and times (the merge needs them; `_Merged`
    decodes the rest straight into merged order), notify payloads, notes."""
    b = _map(path)
    if progress is not None:
        progress(len(b))
    out = {"path": path, "bytes": b, "heads": None, "chain": _Chain(), "order": "<", "notes": [], "texts": []}
    order = _byteorder(bytes(b[:4]))
    if order is None:
        if not len(b):
            return out
        reason = (_why_bad(b, 0, "<") if len(b) >= 4 else
                  f"{len(b)} bytes: too short for a blk_io_trace record")
        if strict:
            raise BadInput(path, reason, offset=0)
        out["chain"].bad.append((0, reason))
        return out
    chain, heads = _walk(b, order, path, file_cpu, strict)
    _drop_bad_times(b, order, heads, chain, path, strict)
    out["gaps"] = _gaps.sequence_gaps(b, heads["offs"], order, LAYOUT["sequence"][0], LAYOUT["cpu"][0])
    notify = _other_records(b, heads["other"], order, path, chain, strict)
    out.update(heads=heads, chain=chain, order=order, texts=_notify_payloads(b, notify, order))
    heads["notify"] = len(notify)
    if heads["wrong_cpu"]:
        first = heads["first_wrong"]
        cpu = int.from_bytes(bytes(b[first + LAYOUT["cpu"][0]:first + LAYOUT["cpu"][0] + 4]),
                             "little" if order == "<" else "big")
        out["notes"].append((first, f"{heads['wrong_cpu']} records of {os.path.basename(path)} say "
                                    f"CPU {cpu}, the file name says CPU {file_cpu}"))
    return out


def _other_records(b: np.ndarray, offs: np.ndarray, order: str, path: str, chain: _Chain, strict: bool) -> list:
    """The records that are not data (a handful): headers of the notify records; those of
    another version are bad (an error in strict mode)."""
    dtype = DTYPE_LE if order == "<" else DTYPE_BE
    notify = []
    for pos in offs.tolist():
        rec = np.frombuffer(bytes(b[pos:pos + HEADER]), dtype)[0]
        version = int(rec["magic"]) & 0xFF
        if version != VERSION:
            reason = f"unsupported blktrace version {version} (this reader knows {VERSION})"
            if strict:
                raise BadInput(path, reason, offset=pos)
            chain.bad.append((pos, reason))
        else:
            notify.append((pos, rec))
    return notify


def _notify_payloads(b: np.ndarray, notify: list, order: str) -> list[tuple[np.void, bytes]]:
    """(header, payload) of the notify records that carry a PDU (process names, messages)."""
    out = []
    for pos, rec in notify:
        if rec["pdu_len"] == 0:
            continue
        skip = CGROUP_ID_BYTES if int(rec["action"]) & TN_CGROUP else 0
        start = pos + HEADER + skip
        out.append((rec, bytes(b[start:start + max(int(rec["pdu_len"]) - skip, 0)])))
    return out


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    """Read a blktrace capture (all per-CPU files of it) into a block-layer Capture."""
    path = str(path)
    files = per_cpu_files(path)
    if len(files) == 1 and not os.path.exists(files[0][0]):
        raise FileNotFoundError(2, "no such file", path)
    sizes = [os.path.getsize(f) for f, _ in files]
    if not any(sizes):
        raise BadInput(path, "empty capture: no records" if len(files) == 1 else
                       f"empty capture: all {len(files)} per-CPU files are empty")
    decoded = _per_file_threads(lambda fc: _decode_file(fc[0], fc[1], strict, progress), files)
    cap = _capture(path, files, decoded, strict)
    gaps: dict[int, int] = {}
    for d in decoded:
        for cpu, n in d.get("gaps", {}).items():
            gaps[cpu] = gaps.get(cpu, 0) + n
    cap.meta["sequence_gaps"] = {str(c): n for c, n in sorted(gaps.items())}
    cap.notes += _gaps.file_notes(files, sizes) + _gaps.gap_notes(gaps) + _gaps.report_notes(files)
    return cap


def _capture(path, files, decoded, strict) -> Capture:
    cap = Capture(layer="block", path=path, format=ID)
    names, messages, clocks, anomalies = {}, [], [], []
    for d in decoded:
        anomalies += _file_anomalies(cap, d)
        _notify_texts(d, names, messages, clocks)
    merged = _Merged([(fi, d) for fi, d in enumerate(decoded) if d["heads"] is not None])
    cap.records.read = merged.records
    big = any(d["order"] == ">" for d in decoded)
    cap.columns["events"] = merged.machine_columns()
    # the whole events table is decoded only if someone asks for it (the analysis reads the
    # columns above); the files stay mapped until then
    cap.frames = LazyFrames({"events": lambda: block.finish_events(merged.raw_events()).drop("time_abs")})
    cap.frames["processes"] = pl.DataFrame({"pid": list(names), "name": list(names.values())},
                                           schema=block.PROCESSES)
    cap.meta.update({
        "files": [f for f, _ in files],
        "byte_order": "big-endian" if big else "little-endian",
        "origin_ns": merged.origin,
        "messages": messages,
        "wall_clock": clocks,              # BLK_TN_TIMESTAMP: trace time -> wall clock (ns)
    })
    if anomalies:
        cap.anomalies = pl.DataFrame([{"t_ns": None, "kind": k, "detail": det, "position": pos}
                                      for k, det, pos in anomalies], schema=schema.ANOMALIES)
    return cap


def _file_anomalies(cap: Capture, d: dict) -> list[tuple[str, str, str]]:
    """Bad, truncated and CPU-mismatched records of one file: anomaly rows and skip counts."""
    chain, where = d["chain"], d["path"]
    out = [("BAD RECORD", reason, f"{where}: byte offset {off}") for off, reason in chain.bad]
    skipped = list(chain.bad)
    if chain.truncated:
        off, reason = chain.truncated
        out.append(("TRUNCATED RECORD", reason, f"{where}: byte offset {off}"))
        skipped.append(chain.truncated)
    if skipped:
        cap.records.skip(len(skipped), [f"{where}: byte offset {o}: {r}" for o, r in skipped])
    out += [("CPU MISMATCH", text, f"{where}: byte offset {off}") for off, text in d["notes"]]
    return out


class _Merged:
    """The records of every file without their notify records, in processing order (time,
    then file, then place in the file): where each one goes, and its decoding from the files'
    bytes straight into that row, one thread per file."""

    def __init__(self, parts: list[tuple[int, dict]]):
        self.parts = parts
        self.records = sum(len(d["heads"]["offs"]) + d["heads"]["notify"] for _, d in parts)
        times = [d["heads"]["time"] for _, d in parts]
        self.n = sum(len(t) for t in times)
        self.origin = int(min(t.min() for t in times if len(t))) if self.n else 0
        self.dest = block.merge_rows(times, in_order=all(d["heads"]["in_order"] for _, d in parts))
        for _, d in parts:              # the columns' decode reads the times again: free them for it
            del d["heads"]["time"]

    def _per_file(self, decode) -> None:
        """decode(file index, its data, its data records' offsets, their rows), for every file."""
        jobs, first = [], 0
        for fi, d in self.parts:
            offs = d["heads"]["offs"]
            jobs.append((fi, d, offs, self.dest[first:first + len(offs)]))
            first += len(offs)
        _per_file_threads(lambda job: decode(*job), jobs)

    def machine_columns(self) -> dict[str, np.ndarray]:
        """block.MACHINE_COLUMNS: what the block analysis reads."""
        cols = {name: np.empty(self.n, dtype) for name, dtype in block.MACHINE_COLUMNS.items()}
        self._per_file(lambda fi, d, src, dest: _scan.fill_machine(
            d["bytes"], d["order"] == ">", HEADER, src, dest, FILL_FIELDS, FILL_PDU, self.origin, *cols.values()))
        return cols

    def raw_events(self) -> pl.DataFrame:
        """block.RAW_EVENTS: every field of every record."""
        if not self.parts:
            return schema.empty(block.RAW_EVENTS)
        n = self.n
        cols = {"i64": np.empty((len(_scan.I64_COLUMNS), n), np.int64),
                "u32": np.empty((len(_scan.U32_COLUMNS), n), np.uint32), "cpu": np.empty(n, np.int32),
                "i16": np.empty((len(_scan.I16_COLUMNS), n), np.int16),
                "flags": np.empty((len(_scan.BOOL_COLUMNS), n), np.bool_)}
        self._per_file(lambda fi, d, src, dest: _scan.fill(
            d["bytes"], d["order"] == ">", HEADER, src, dest, FILL_FIELDS, FILL_PDU, fi, *cols.values()))
        named = {"cpu": cols["cpu"]}
        for group, names in (("i64", _scan.I64_COLUMNS), ("u32", _scan.U32_COLUMNS), ("i16", _scan.I16_COLUMNS),
                             ("flags", _scan.BOOL_COLUMNS)):
            named.update(zip(names, cols[group]))
        return pl.DataFrame({name: named[name] for name in block.RAW_EVENTS}, schema=block.RAW_EVENTS)


def _per_file_threads(work, items: list) -> list:
    """[work(item) for item in items], one thread per item up to the CPUs (the compiled passes
    release the GIL); in order, and the first exception is raised."""
    if len(items) < 2:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(len(items), os.cpu_count() or 1)) as pool:
        return list(pool.map(work, items))


def _notify_texts(d, names: dict, messages: list, clocks: list) -> None:
    """Process names (pid -> comm), message notes and wall-clock stamps from the notify records."""
    for rec, raw in d["texts"]:
        kind = int(rec["action"] & 0xFF)
        text = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        pid = int(rec["pid"])
        if kind == block.TN_TIMESTAMP and len(raw) >= 8:
            # two u32 in the tracing host's order: the wall clock when tracing started
            sec, nsec = np.frombuffer(raw[:8], "<u4" if d["order"] == "<" else ">u4")
            clocks.append({"time_abs": int(rec["time"]), "wall_clock_ns": int(sec) * 10**9 + int(nsec)})
        elif kind == block.TN_PROCESS:
            names[pid] = "kernel" if pid == 0 else text.split("/", 1)[0]
        elif kind == block.TN_MESSAGE:
            messages.append({"time_abs": int(rec["time"]), "device": block.dev_name(int(rec["device"])),
                             "text": text})
