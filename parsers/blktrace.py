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


def resolve(path: str) -> str | None:
    """For a base name that is not itself a file (`sda`), the first per-CPU file to sniff."""
    files = per_cpu_files(path)
    first = files[0][0]
    return first if first != str(path) and os.path.exists(first) else None


# ---------------------------------------------------------------- record chain

def _candidates(b: np.ndarray, order: str, aligned: bool) -> np.ndarray:
    """Byte offsets where the three magic bytes of a record header appear."""
    magic = MAGIC.to_bytes(4, "little" if order == "<" else "big")
    m0 = 1 if order == "<" else 0            # the magic's first byte in the header
    pat = magic[m0:m0 + 3]
    n = len(b)
    if n < HEADER:
        return np.zeros(0, np.int64)
    if aligned:
        words = b[: n - n % 4].view(np.uint32).reshape(-1)
        # compare the three magic bytes inside each aligned word
        w = words.view(np.uint8).reshape(-1, 4)
        hit = (w[:, m0] == pat[0]) & (w[:, m0 + 1] == pat[1]) & (w[:, m0 + 2] == pat[2])
        offs = np.flatnonzero(hit).astype(np.int64) * 4
    else:
        hit = b[m0:n - 3 + m0] == pat[0]          # record start p: b[p + m0] is the first magic byte
        offs = np.flatnonzero(hit).astype(np.int64)
        offs = offs[(b[offs + m0 + 1] == pat[1]) & (b[offs + m0 + 2] == pat[2])]
    return offs


def _u16_at(b: np.ndarray, offs: np.ndarray, order: str) -> np.ndarray:
    lo, hi = (b[offs], b[offs + 1]) if order == "<" else (b[offs + 1], b[offs])
    return lo.astype(np.int64) | (hi.astype(np.int64) << 8)


class _Chain:
    """Record offsets of one file, plus what was wrong where (lenient mode)."""

    def __init__(self):
        self.offsets: list[np.ndarray] = []
        self.bad: list[tuple[int, str]] = []     # (byte offset, reason)
        self.skipped_bytes = 0
        self.truncated: tuple[int, str] | None = None


def _walk(b: np.ndarray, order: str, path: str, strict: bool) -> _Chain:
    """Follow the record chain from offset 0; vectorized between breaks."""
    n = len(b)
    pdu_off = DTYPE_LE.fields["pdu_len"][1]
    for aligned in (True, False):
        c = _candidates(b, order, aligned)
        c = c[c + HEADER <= n]
        nxt = c + HEADER + _u16_at(b, c + pdu_off, order)
        chain = _follow(b, c, nxt, order, path, strict, need_aligned=aligned)
        if chain is not None:
            return chain
    raise AssertionError("unreachable: the byte-level walk always completes")


def _follow(b, c, nxt, order, path, strict, need_aligned):
    n = len(b)
    out = _Chain()
    m = len(c)
    breaks = np.flatnonzero(nxt[:-1] != c[1:]) if m > 1 else np.zeros(0, np.int64)
    pos = 0                      # byte offset where the next record must start
    i = _index_of(c, pos)
    while pos < n:
        if i is None:
            if need_aligned and pos % 4:
                return None      # a record at an odd offset: redo the walk byte by byte
            if n - pos < HEADER or _looks_like_header(b, pos, order):
                reason = (f"truncated record: {n - pos} bytes left, a record needs at least {HEADER}"
                          if n - pos < HEADER else
                          f"truncated record: its {_pdu_len(b, pos, order)}-byte PDU runs past the end")
                if strict:
                    raise TruncatedInput(path, reason, offset=pos)
                out.truncated = (pos, reason)
                out.skipped_bytes += n - pos
                break
            reason = _why_bad(b, pos, order)
            if strict:
                raise BadInput(path, reason, offset=pos)
            out.bad.append((pos, reason))
            k = int(np.searchsorted(c, pos, side="right"))
            resume = int(c[k]) if k < m else n
            out.skipped_bytes += resume - pos
            pos, i = resume, (k if k < m else None)
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
            out.skipped_bytes += n - start
            break
        i = _index_of(c, pos)
    bad_version = _check_versions(b, out, order)
    if bad_version is not None:
        off, ver = bad_version
        reason = f"unsupported blktrace version {ver} (this reader knows version {VERSION})"
        if strict:
            raise BadInput(path, reason, offset=off)
    return out


def _index_of(c: np.ndarray, pos: int) -> int | None:
    k = int(np.searchsorted(c, pos))
    return k if k < len(c) and c[k] == pos else None


def _looks_like_header(b, pos, order) -> bool:
    return _byteorder(bytes(b[pos:pos + 4])) == order


def _pdu_len(b, pos, order) -> int:
    off = DTYPE_LE.fields["pdu_len"][1]
    if pos + off + 2 > len(b):
        return 0
    return int(_u16_at(b, np.array([pos + off]), order)[0])


def _why_bad(b, pos, order) -> str:
    raw = bytes(b[pos:pos + 4])
    magic = int.from_bytes(raw, "little" if order == "<" else "big")
    return f"bad magic 0x{magic:08x} (expected 0x{MAGIC | VERSION:08x}): not a blk_io_trace record"


def _check_versions(b, chain: _Chain, order):
    """Records whose magic matches but whose version byte does not (first one)."""
    if not chain.offsets:
        return None
    offs = np.concatenate(chain.offsets)
    ver_at = offs + (0 if order == "<" else 3)
    bad = np.flatnonzero(b[ver_at] != VERSION)
    if len(bad) == 0:
        return None
    return int(offs[bad[0]]), int(b[ver_at[bad[0]]])


# ---------------------------------------------------------------- bulk decode

def _fields(buf: bytes, offs: np.ndarray, dtype: np.dtype) -> dict[str, np.ndarray]:
    """Every header field of the records at `offs`, gathered as whole words (no per-record loop)."""
    out = {name: np.empty(len(offs), dtype=dtype.fields[name][0].newbyteorder("="))
           for name in dtype.names}
    big = dtype.fields["magic"][0].byteorder == ">"
    for r in np.unique(offs % 4):
        sel = np.flatnonzero(offs % 4 == r)
        count = (len(buf) - r) // 4
        words = np.frombuffer(buf, dtype=">u4" if big else "<u4", count=count, offset=int(r))
        base = (offs[sel] - r) // 4
        for name in dtype.names:
            fdt, foff = dtype.fields[name]
            k = base + foff // 4
            if fdt.itemsize == 4:
                val = words[k]
            elif fdt.itemsize == 8:
                lo, hi = (words[k + 1], words[k]) if big else (words[k], words[k + 1])
                val = lo.astype(np.uint64) | (hi.astype(np.uint64) << np.uint64(32))
            else:  # 2 bytes inside a word
                w = words[k]
                first = (foff % 4) == 0
                val = ((w >> 16) if first == big else (w & 0xFFFF)) & 0xFFFF
            out[name][sel] = val
    return out


def _be_uint(b: np.ndarray, pos: np.ndarray, nbytes: int) -> np.ndarray:
    val = np.zeros(len(pos), dtype=np.uint64)
    for k in range(nbytes):
        val = (val << np.uint64(8)) | b[pos + k].astype(np.uint64)
    return val


def _decode_file(path: str, file_cpu: int | None, strict: bool, progress) -> dict:
    with open(path, "rb") as fh:
        buf = fh.read()
    if progress is not None:
        progress(len(buf))
    b = np.frombuffer(buf, dtype=np.uint8)
    order = _byteorder(buf[:4])
    if order is None:
        if not buf:
            return {"path": path, "cols": None, "chain": _Chain(), "order": "<", "notes": [], "texts": {}}
        if strict:
            raise BadInput(path, _why_bad(b, 0, "<") if len(b) >= 4 else
                           f"{len(b)} bytes: too short for a blk_io_trace record", offset=0)
        order = "<"
    chain = _walk(b, order, path, strict)
    offs = np.concatenate(chain.offsets) if chain.offsets else np.zeros(0, np.int64)
    # in lenient mode a wrong-version record is skipped like any bad record
    ver = b[offs + (0 if order == "<" else 3)] if len(offs) else np.zeros(0, np.uint8)
    if np.any(ver != VERSION):
        for off in offs[ver != VERSION][:5]:
            chain.bad.append((int(off), f"unsupported blktrace version {int(b[off + (0 if order == '<' else 3)])}"))
        chain.skipped_bytes += int(np.sum(ver != VERSION)) * HEADER
        offs = offs[ver == VERSION]
    cols = _fields(buf, offs, DTYPE_LE if order == "<" else DTYPE_BE)
    cols["offset"] = offs
    pdus = _pdus(b, buf, offs, cols)
    texts = pdus.pop("texts")
    cols.update(pdus)
    notes = []
    if file_cpu is not None:
        wrong = cols["cpu"] != file_cpu
        if np.any(wrong):
            notes.append((int(offs[np.argmax(wrong)]), int(np.sum(wrong)),
                          f"{int(np.sum(wrong))} records in {os.path.basename(path)} say CPU "
                          f"{int(cols['cpu'][np.argmax(wrong)])}, the file name says CPU {file_cpu}"))
    return {"path": path, "cols": cols, "chain": chain, "order": order, "texts": texts, "notes": notes}


def _pdus(b: np.ndarray, buf: bytes, offs: np.ndarray, cols: dict) -> dict:
    """Remap (device, sector) and split/unplug integers decoded from the PDUs, plus the raw
    payload of notify records (process names, messages: a handful per trace)."""
    n = len(offs)
    action, pdu_len = cols["action"], cols["pdu_len"]
    notify = (action & block.TC_NOTIFY) != 0
    code = action & (0xFFFF & ~TN_CGROUP)
    skip = np.where((action & TN_CGROUP) != 0, CGROUP_ID_BYTES, 0)
    start = offs + HEADER + skip
    payload = pdu_len.astype(np.int64) - skip
    out = {"pdu_dev": np.zeros(n, np.uint32), "pdu_sector": np.zeros(n, np.uint64),
           "pdu_int": np.zeros(n, np.uint64)}
    remap = ~notify & (code == block.TA["A"]) & (payload >= BLK_IO_TRACE_REMAP.sizeof())
    if remap.any():
        p = start[remap]
        out["pdu_dev"][remap] = _be_uint(b, p, 4).astype(np.uint32)
        out["pdu_sector"][remap] = _be_uint(b, p + 8, 8)
    has_int = ~notify & np.isin(code, [block.TA["X"], block.TA["U"], block.TA["T"]]) & (payload >= 8)
    if has_int.any():
        out["pdu_int"][has_int] = _be_uint(b, start[has_int], 8)
    out["has_remap"], out["has_int"] = remap, has_int
    out["texts"] = {int(k): buf[int(start[k]):int(start[k]) + int(max(payload[k], 0))]
                    for k in np.flatnonzero(notify)}
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
    frames, names, messages, anomalies = [], {}, [], []
    for fi, d in enumerate(decoded):
        chain = d["chain"]
        for off, reason in chain.bad:
            anomalies.append((None, "BAD RECORD", reason, f"{d['path']}: byte offset {off}"))
        if chain.truncated:
            off, reason = chain.truncated
            anomalies.append((None, "TRUNCATED RECORD", reason, f"{d['path']}: byte offset {off}"))
        nbad = len(chain.bad) + (1 if chain.truncated else 0)
        if nbad:
            cap.records.skip(nbad, [f"{d['path']}: byte offset {o}: {r}" for o, r in
                                    chain.bad + ([chain.truncated] if chain.truncated else [])])
        for off, count, text in d["notes"]:
            anomalies.append((None, "CPU MISMATCH", text, f"{d['path']}: byte offset {off}"))
        if d["cols"] is None:
            continue
        frames.append(_frame(d, fi))
        _notify_texts(d, names, messages)
    events = pl.concat(frames) if frames else schema.empty(block.RAW_EVENTS)
    events = block.finish_events(events)
    cap.records.read = events.height
    cap.frames["events"] = events.drop("time_abs")
    cap.frames["processes"] = pl.DataFrame(
        {"pid": list(names), "name": list(names.values())}, schema={"pid": pl.Int64, "name": pl.Utf8})
    cap.meta.update({
        "files": [f for f, _ in files],
        "byte_order": "little-endian" if all(d["order"] == "<" for d in decoded) else "big-endian",
        "origin_ns": int(events["time_abs"].min()) if events.height else 0,
        "messages": messages,
    })
    if anomalies:
        cap.anomalies = pl.DataFrame(
            [{"t_ns": None, "kind": k, "detail": det, "position": pos} for _, k, det, pos in anomalies],
            schema=schema.ANOMALIES)
    return cap


def _frame(d, file_index: int) -> pl.DataFrame:
    c = d["cols"]
    return pl.DataFrame({
        "time_abs": c["time"].astype(np.int64),
        "seq": c["sequence"].astype(np.int64),
        "cpu": c["cpu"].astype(np.int32),
        "action": c["action"].astype(np.uint32),
        "device": c["device"].astype(np.uint32),
        "sector": c["sector"].astype(np.int64),
        "bytes": c["bytes"].astype(np.int64),
        "pid": c["pid"].astype(np.int64),
        "error": c["error"].astype(np.int16),
        "pdu_dev": np.where(c["has_remap"], c["pdu_dev"], 0).astype(np.uint32),
        "pdu_sector": c["pdu_sector"].astype(np.int64),
        "pdu_int": c["pdu_int"].astype(np.int64),
        "has_remap": c["has_remap"],
        "has_int": c["has_int"],
        "file": np.full(len(c["offset"]), file_index, np.int16),
        "position": c["offset"].astype(np.int64),
    })


def _notify_texts(d, names: dict, messages: list) -> None:
    """Process names (pid -> comm) and message notes from the notify records."""
    c = d["cols"]
    for k, raw in d["texts"].items():
        kind = int(c["action"][k] & 0xFF)
        text = raw.split(b"\0", 1)[0].decode("utf-8", "replace")
        if kind == block.TN_PROCESS:
            names[int(c["pid"][k])] = "kernel" if c["pid"][k] == 0 else text.split("/", 1)[0]
        elif kind == block.TN_MESSAGE:
            messages.append({"time_abs": int(c["time"][k]), "device": block.dev_name(int(c["device"][k])),
                             "text": text})
