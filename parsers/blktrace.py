"""blktrace binary: `struct blk_io_trace` records, as blktrace writes them per CPU
(`<dev>.blktrace.<cpu>`), as one piped stream (`blktrace -o -`) or as a `blkparse -d` dump.

The record is declared once with construct (`BLK_IO_TRACE`); bulk decoding goes through a
numpy dtype derived from that declaration. Records are variable length (48-byte header plus
`pdu_len` bytes), so they are located by their magic and chained by length, vectorized;
only breaks in the chain (corruption, magic bytes inside a PDU) are walked one by one.

Given one per-CPU file or the base name blktrace used (`sda` for `sda.blktrace.0`...), all of
that capture's per-CPU files are read and merged in time order.
"""
from __future__ import annotations

import glob
import os
import re

import construct as cs
import numpy as np
import polars as pl

from scsitrace import block, schema
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.model import Capture

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

def _rows(b: np.ndarray, offs: np.ndarray, width: int) -> np.ndarray:
    """(len(offs), width) bytes starting at each offset: one fancy index over a sliding-window
    view of the buffer, no loop per record."""
    if len(b) < width:
        return np.zeros((0, width), np.uint8)
    windows = np.lib.stride_tricks.as_strided(b, shape=(len(b) - width + 1, width), strides=(1, 1),
                                              writeable=False)
    return windows[offs]


def _magic_word(order: str) -> tuple[int, int]:
    """(mask, value) that the first header word, read little-endian, has when its three magic
    bytes are present (the version byte is masked out)."""
    raw = (MAGIC | VERSION).to_bytes(4, "little" if order == "<" else "big")
    vpos = 0 if order == "<" else 3
    mask = int.from_bytes(bytes(0 if k == vpos else 0xFF for k in range(4)), "little")
    return mask, int.from_bytes(raw, "little") & mask


def _candidates(b: np.ndarray, order: str, aligned: bool) -> np.ndarray:
    """Byte offsets where the three magic bytes of a record header appear (4-aligned offsets only
    when `aligned`, the common case: every PDU blktrace writes but messages is 8 or 16 bytes)."""
    n = len(b) - HEADER + 1
    if n <= 0:
        return np.zeros(0, np.int64)
    mask, value = _magic_word(order)
    if aligned:
        words = b[: len(b) - len(b) % 4].view("<u4")
        offs = np.flatnonzero((words & mask) == value).astype(np.int64) * 4
    else:
        first = (value >> (8 if order == "<" else 0)) & 0xFF   # a magic byte, to prefilter
        at = 1 if order == "<" else 0
        offs = np.flatnonzero(b[at:n + at] == first).astype(np.int64)
        word = _rows(b, offs, 4).view("<u4").reshape(-1)
        offs = offs[(word & mask) == value]
    return offs[offs < n]


class _Chain:
    """Record offsets of one file, plus what was wrong where (lenient mode)."""

    def __init__(self):
        self.offsets: list[np.ndarray] = []
        self.bad: list[tuple[int, str]] = []     # (byte offset, reason)
        self.truncated: tuple[int, str] | None = None


def _walk(b: np.ndarray, order: str, path: str, strict: bool) -> _Chain:
    """Follow the record chain from offset 0 by header lengths; vectorized between breaks."""
    pdu_off = DTYPE_LE.fields["pdu_len"][1]
    for aligned in (True, False):
        c = _candidates(b, order, aligned)
        pdu_len = _rows(b, c + pdu_off, 2).view("<u2" if order == "<" else ">u2").reshape(-1)
        chain = _follow(b, c, c + HEADER + pdu_len, order, path, strict, need_aligned=aligned)
        if chain is not None:
            return chain
    raise AssertionError("unreachable: the byte-level walk always completes")


def _follow(b, c, nxt, order, path, strict, need_aligned):
    """Records c[i..j] chain when each one's end is the next one's start; at a break, the
    record ending there is looked up among the candidates (a magic inside a PDU is skipped
    that way), else the bytes there are bad (or a truncated tail)."""
    n = len(b)
    out = _Chain()
    m = len(c)
    breaks = np.flatnonzero(nxt[:-1] != c[1:]) if m > 1 else np.zeros(0, np.int64)
    pos = 0
    i = _index_of(c, pos)
    while pos < n:
        if i is None:
            if need_aligned and pos % 4:
                return None      # a record at an odd offset: redo the walk byte by byte
            if n - pos < HEADER or _byteorder(bytes(b[pos:pos + 4])) == order:
                reason = (f"truncated record: {n - pos} bytes left, a record needs {HEADER}"
                          if n - pos < HEADER else "truncated record: its PDU runs past the end")
                if strict:
                    raise TruncatedInput(path, reason, offset=pos)
                out.truncated = (pos, reason)
                break
            reason = _why_bad(b, pos, order)
            if strict:
                raise BadInput(path, reason, offset=pos)
            out.bad.append((pos, reason))
            k = int(np.searchsorted(c, pos, side="right"))
            pos, i = (int(c[k]), k) if k < m else (n, None)
            continue
        bi = int(np.searchsorted(breaks, i))
        j = int(breaks[bi]) if bi < len(breaks) else m - 1
        out.offsets.append(c[i:j + 1])
        pos = int(nxt[j])
        if pos > n:
            start = int(c[j])
            reason = f"truncated record: its {pos - start - HEADER}-byte PDU runs past the end"
            if strict:
                raise TruncatedInput(path, reason, offset=start)
            out.offsets[-1] = out.offsets[-1][:-1]
            out.truncated = (start, reason)
            break
        i = _index_of(c, pos)
    return out


def _index_of(c: np.ndarray, pos: int) -> int | None:
    k = int(np.searchsorted(c, pos))
    return k if k < len(c) and c[k] == pos else None


def _why_bad(b, pos, order) -> str:
    magic = int.from_bytes(bytes(b[pos:pos + 4]), "little" if order == "<" else "big")
    return f"bad magic 0x{magic:08x} (expected 0x{MAGIC | VERSION:08x}): not a blk_io_trace record"


# ---------------------------------------------------------------- bulk decode

def _decode_file(path: str, file_cpu: int | None, strict: bool, progress) -> dict:
    """One file -> header records (numpy, via the declaration's dtype), PDU fields, notes."""
    with open(path, "rb") as fh:
        buf = fh.read()
    if progress is not None:
        progress(len(buf))
    b = np.frombuffer(buf, dtype=np.uint8)
    out = {"path": path, "rec": None, "chain": _Chain(), "order": "<", "notes": [], "texts": {}}
    order = _byteorder(buf[:4])
    if order is None:
        if not buf:
            return out
        reason = (_why_bad(b, 0, "<") if len(b) >= 4 else
                  f"{len(b)} bytes: too short for a blk_io_trace record")
        if strict:
            raise BadInput(path, reason, offset=0)
        out["chain"].bad.append((0, reason))
        return out
    chain = _walk(b, order, path, strict)
    offs = np.concatenate(chain.offsets) if chain.offsets else np.zeros(0, np.int64)
    rec = _rows(b, offs, HEADER).view(DTYPE_LE if order == "<" else DTYPE_BE).reshape(-1)
    version = rec["magic"] & 0xFF
    if np.any(version != VERSION):
        bad = np.flatnonzero(version != VERSION)
        reason = f"unsupported blktrace version {int(version[bad[0]])} (this reader knows {VERSION})"
        if strict:
            raise BadInput(path, reason, offset=int(offs[bad[0]]))
        chain.bad += [(int(offs[k]), reason) for k in bad]
        keep = version == VERSION
        offs, rec = offs[keep], rec[keep]
    out.update(rec=rec, offs=offs, chain=chain, order=order)
    out.update(_pdus(b, buf, offs, rec))
    if file_cpu is not None:
        wrong = np.flatnonzero(rec["cpu"] != file_cpu)
        if len(wrong):
            out["notes"].append((int(offs[wrong[0]]), f"{len(wrong)} records of {os.path.basename(path)} say "
                                 f"CPU {int(rec['cpu'][wrong[0]])}, the file name says CPU {file_cpu}"))
    return out


def _pdus(b: np.ndarray, buf: bytes, offs: np.ndarray, rec: np.ndarray) -> dict:
    """Remap (device, sector) and split/unplug integers from the PDUs (big-endian, as the kernel
    writes them), plus the payload of notify records (process names, messages: a handful).
    Only records that carry a PDU are looked at."""
    n = len(offs)
    out = {"pdu_dev": np.zeros(n, np.uint32), "pdu_sector": np.zeros(n, np.int64),
           "pdu_int": np.zeros(n, np.int64), "has_remap": np.zeros(n, bool), "has_int": np.zeros(n, bool),
           "texts": {}}
    k = np.flatnonzero(rec["pdu_len"] > 0)
    if len(k) == 0:
        return out
    action = rec["action"][k].astype(np.int64)
    notify = (action & block.TC_NOTIFY) != 0
    code = action & (0xFFFF & ~TN_CGROUP)
    skip = np.where((action & TN_CGROUP) != 0, CGROUP_ID_BYTES, 0)
    start = offs[k] + HEADER + skip
    payload = rec["pdu_len"][k].astype(np.int64) - skip
    remap = ~notify & (code == block.TA["A"]) & (payload >= BLK_IO_TRACE_REMAP.sizeof())
    if remap.any():
        r = _rows(b, start[remap], BLK_IO_TRACE_REMAP.sizeof()).view(REMAP_DTYPE).reshape(-1)
        out["pdu_dev"][k[remap]] = r["device_from"]
        out["pdu_sector"][k[remap]] = r["sector_from"].astype(np.int64)
        out["has_remap"][k[remap]] = True
    with_int = np.zeros(0x10000, bool)          # actions whose PDU is one be64
    with_int[[block.TA["X"], block.TA["U"], block.TA["T"]]] = True
    has_int = ~notify & with_int[code] & (payload >= 8)
    if has_int.any():
        out["pdu_int"][k[has_int]] = _rows(b, start[has_int], 8).view(">u8").reshape(-1).astype(np.int64)
        out["has_int"][k[has_int]] = True
    out["texts"] = {int(k[j]): buf[int(start[j]):int(start[j]) + int(max(payload[j], 0))]
                    for j in np.flatnonzero(notify)}
    return out


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    """Read a blktrace capture (all per-CPU files of it) into a block-layer Capture."""
    path = str(path)
    files = per_cpu_files(path)
    if len(files) == 1 and not os.path.exists(files[0][0]):
        raise FileNotFoundError(2, "no such file", path)
    decoded = [_decode_file(f, cpu, strict, progress) for f, cpu in files]
    return _capture(path, files, decoded, strict)


def _capture(path, files, decoded, strict) -> Capture:
    cap = Capture(layer="block", path=path, format=ID)
    names, messages, clocks, anomalies = {}, [], [], []
    for d in decoded:
        anomalies += _file_anomalies(cap, d)
        if d["rec"] is not None:
            _notify_texts(d, names, messages, clocks)
    parts = [(fi, d) for fi, d in enumerate(decoded) if d["rec"] is not None]
    cap.records.read = sum(len(d["rec"]) for _, d in parts)
    big = any(d["order"] == ">" for d in decoded)
    decoded.clear()                            # let the per-file arrays go once merged
    events = block.finish_events(_columns(parts))
    cap.frames["events"] = events.drop("time_abs")
    cap.frames["processes"] = pl.DataFrame({"pid": list(names), "name": list(names.values())},
                                           schema=block.PROCESSES)
    cap.meta.update({
        "files": [f for f, _ in files],
        "byte_order": "big-endian" if big else "little-endian",
        "origin_ns": int(events["time_abs"].min()) if events.height else 0,
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


def _columns(parts: list[tuple[int, dict]]) -> pl.DataFrame:
    """RAW_EVENTS of every file without its notify records, merged in time order: the header
    records are copied whole, straight from each file's rows into merged order, then one copy
    per field."""
    if not parts:
        return schema.empty(block.RAW_EVENTS)
    recs = [d["rec"] if d["order"] == "<" else d["rec"].astype(DTYPE_LE) for _, d in parts]
    keeps = [np.flatnonzero((r["action"] & block.TC_NOTIFY) == 0) for r in recs]
    order = block.merge_order([r["time"][k].astype(np.int64) for r, k in zip(recs, keeps)])
    base = np.cumsum([0] + [len(r) for r in recs])[:-1]
    src = np.concatenate([b + k for b, k in zip(base, keeps)])      # row in the files, concatenated
    src_file = np.concatenate([np.full(len(k), f, np.int16) for f, k in enumerate(keeps)])
    if order is not None:
        src, src_file = src[order], src_file[order]
    whole = np.empty(len(src), f"V{HEADER}")
    for f, r in enumerate(recs):
        at = np.flatnonzero(src_file == f)
        whole[at] = r.view(f"V{HEADER}").reshape(-1)[src[at] - base[f]]
    extra = {name: np.concatenate([d[name] for _, d in parts])[src]
             for name in ("pdu_dev", "pdu_sector", "pdu_int", "has_remap", "has_int", "offs")}
    for _, d in parts:                        # the per-file copies are no longer needed
        d["rec"] = None
    del recs
    rec = whole.view(DTYPE_LE)
    cols = {"time_abs": rec["time"], "seq": rec["sequence"], "cpu": rec["cpu"], "action": rec["action"],
            "device": rec["device"], "sector": rec["sector"], "bytes": rec["bytes"], "pid": rec["pid"],
            "error": rec["error"], "pdu_dev": extra["pdu_dev"], "pdu_sector": extra["pdu_sector"],
            "pdu_int": extra["pdu_int"], "has_remap": extra["has_remap"], "has_int": extra["has_int"],
            "file": np.asarray([fi for fi, _ in parts], np.int16)[src_file], "position": extra["offs"]}
    return pl.DataFrame({name: np.ascontiguousarray(v).astype(block.NUMPY_RAW[name], copy=False)
                         for name, v in cols.items()}, schema=block.RAW_EVENTS)


def _notify_texts(d, names: dict, messages: list, clocks: list) -> None:
    """Process names (pid -> comm), message notes and wall-clock stamps from the notify records."""
    rec = d["rec"]
    for k, raw in d["texts"].items():
        kind = int(rec["action"][k] & 0xFF)
        text = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        pid = int(rec["pid"][k])
        if kind == block.TN_TIMESTAMP and len(raw) >= 8:
            # two u32 in the tracing host's order: the wall clock when tracing started
            sec, nsec = np.frombuffer(raw[:8], "<u4" if d["order"] == "<" else ">u4")
            clocks.append({"time_abs": int(rec["time"][k]), "wall_clock_ns": int(sec) * 10**9 + int(nsec)})
        elif kind == block.TN_PROCESS:
            names[pid] = "kernel" if pid == 0 else text.split("/", 1)[0]
        elif kind == block.TN_MESSAGE:
            messages.append({"time_abs": int(rec["time"][k]), "device": block.dev_name(int(rec["device"][k])),
                             "text": text})
