"""Generator of binary blktrace streams (`struct blk_io_trace`), for tests and benchmarks.

`workload()` makes a time-ordered event list of a block device under load, vectorized:
plain I/Os (Q G I D C, with plug/unplug), back and front merges (Q M / Q F glued to a
request), requeues (D R I D), splits (X then two Qs), and I/Os on a device-mapper device
remapped to the disk (Q on 253,0, A and Q on 8,0, then C on both). `write()` lays the
records out as blktrace does: one file per CPU (`<base>.blktrace.<cpu>`), a single piped
stream, or a `blkparse -d`-style time-ordered dump, in either byte order, with notify
records naming the processes.

Hostile files (`hostile_cases()`), each with what the reader must do:

- "truncated-header": the last record stops 20 bytes into its header.
  strict: TruncatedInput at that record's offset; lenient: all earlier records, one anomaly.
- "truncated-pdu": the last record (a remap) declares a 16-byte PDU, 6 bytes are present.
  strict: TruncatedInput at that record's offset; lenient: earlier records, one anomaly.
- "garbage-middle": 100 bytes of junk between two records.
  strict: BadInput naming the junk's offset ("bad magic"); lenient: every record, one skip.
- "bad-version": one record carries version 0x06.
  strict: BadInput "unsupported blktrace version 6" at its offset; lenient: that record skipped.
- "magic-in-pdu": a message notify whose text contains the magic bytes, odd PDU length.
  both modes: every record parsed, no anomaly (the walk follows lengths, not magic).
- "cpu-mismatch": file `x.blktrace.1` whose records say CPU 0.
  both modes: every record parsed, one "CPU MISMATCH" anomaly.
"""
from __future__ import annotations

import os

import numpy as np

from scsitrace.block import events as block
from scsitrace.parsers import blktrace as bt

DISK = (8 << 20) | 0
DM = (253 << 20) | 0
ACT = block.TA
READ, WRITE, SYNC = block.TC["READ"], block.TC["WRITE"], block.TC["SYNC"]
PIDS = {4242: "fio", 4243: "dd", 0: "kernel", 77: "kworker/0:1H"}

FIELDS = ("time", "sector", "bytes", "action", "pid", "device", "cpu", "pdu_kind", "pdu_a", "pdu_b")
PDU_NONE, PDU_REMAP, PDU_INT = 0, 1, 2


def _events(n, **cols):
    return {k: np.asarray(cols.get(k, 0), dtype=np.int64) * np.ones(n, np.int64) for k in FIELDS}


def workload(n_ios: int, *, seed: int = 1, merges: float = 0.1, requeues: float = 0.02,
             splits: float = 0.02, remaps: float = 0.05, period_ns: int = 20_000) -> dict:
    """Column arrays of a trace with about n_ios I/Os, sorted by time."""
    rng = np.random.default_rng(seed)
    kind = rng.choice(5, size=n_ios, p=[1 - merges - requeues - splits - remaps, merges, requeues, splits, remaps])
    # from 1 ms on: a split's X comes 100 ns before its I/O's start, times stay positive
    start = 1_000_000 + np.arange(n_ios, dtype=np.int64) * period_ns + rng.integers(0, period_ns // 2, n_ios)
    sector = np.arange(n_ios, dtype=np.int64) * 256 + 2048          # never reused: no stale Qs
    nsect = rng.choice([8, 16, 64], size=n_ios)
    write = rng.random(n_ios) < 0.3
    pid = np.where(rng.random(n_ios) < 0.5, 4242, 4243)
    cpu = rng.integers(0, 2, n_ios)
    d2c = rng.integers(50_000, 400_000, n_ios)                     # requests overlap: depth > 1
    parts = [_plain(k, start, sector, nsect, write, pid, cpu, d2c, rng) for k in
             (np.flatnonzero(kind == 0),)]
    parts.append(_merged(np.flatnonzero(kind == 1), start, sector, nsect, write, pid, cpu, d2c, rng))
    parts.append(_requeued(np.flatnonzero(kind == 2), start, sector, nsect, write, pid, cpu, d2c))
    parts.append(_split(np.flatnonzero(kind == 3), start, sector, nsect, write, pid, cpu, d2c))
    parts.append(_remapped(np.flatnonzero(kind == 4), start, sector, nsect, write, pid, cpu, d2c))
    ev = {k: np.concatenate([p[k] for p in parts if len(p["time"])]) for k in FIELDS}
    order = np.argsort(ev["time"], kind="stable")
    return {k: v[order] for k, v in ev.items()}


def _cat(write_mask):
    return np.where(write_mask, WRITE | SYNC, READ | SYNC) << block.TC_SHIFT


def _seq(*parts):
    return {k: np.concatenate([p[k] for p in parts]) for k in FIELDS}


def _stage(idx, code, t, sector, nsect, write, pid, cpu, device=DISK, pdu_kind=PDU_NONE, pdu_a=0, pdu_b=0):
    n = len(idx)
    return _events(n, time=t, sector=sector, bytes=nsect * 512, action=code | _cat(write[idx]),
                   pid=pid, device=device, cpu=cpu, pdu_kind=pdu_kind, pdu_a=pdu_a, pdu_b=pdu_b)


def _plain(i, start, sector, nsect, write, pid, cpu, d2c, rng, device=DISK, t0=None):
    """Q G P U I D C for each I/O in i (unplug PDU: 1 request)."""
    t = start[i] if t0 is None else t0
    s, n, p, c = sector[i], nsect[i], pid[i], cpu[i]
    st = lambda code, dt, **kw: _stage(i, code, t + dt, s, n, write, p, c, device=device, **kw)  # noqa: E731
    plug = _stage(i, ACT["P"], t + 900, 0, 0, write, p, c, device=device)
    unplug = _stage(i, ACT["U"], t + 1000, 0, 0, write, p, c, device=device, pdu_kind=PDU_INT, pdu_a=1)
    return _seq(st(ACT["Q"], 0), st(ACT["G"], 400), plug, unplug, st(ACT["I"], 1500),
                _stage(i, ACT["D"], t + 3000, s, n, write, 77, c, device=device),
                _stage(i, ACT["C"], t + 3000 + d2c[i], s, n, write, 0, c, device=device))


def _merged(i, start, sector, nsect, write, pid, cpu, d2c, rng):
    """Half back merges (second bio at s+n, M), half front merges (bio before s, F)."""
    back = rng.random(len(i)) < 0.5
    out = []
    for sel, code in ((back, ACT["M"]), (~back, ACT["F"])):
        k = i[sel]
        t, s, n, p, c = start[k], sector[k], nsect[k], pid[k], cpu[k]
        s2 = s + n if code == ACT["M"] else s - 8
        lo = np.minimum(s, s2)
        total = n + 8
        out.append(_seq(
            _stage(k, ACT["Q"], t, s, n, write, p, c), _stage(k, ACT["G"], t + 300, s, n, write, p, c),
            _stage(k, ACT["I"], t + 700, s, n, write, p, c),
            _stage(k, ACT["Q"], t + 1200, s2, 8, write, p, c), _stage(k, code, t + 1500, s2, 8, write, p, c),
            _stage(k, ACT["D"], t + 4000, lo, total, write, 77, c),
            _stage(k, ACT["C"], t + 4000 + d2c[k], lo, total, write, 0, c)))
    return _seq(*out)


def _requeued(i, start, sector, nsect, write, pid, cpu, d2c):
    t, s, n, p, c = start[i], sector[i], nsect[i], pid[i], cpu[i]
    return _seq(
        _stage(i, ACT["Q"], t, s, n, write, p, c), _stage(i, ACT["G"], t + 500, s, n, write, p, c),
        _stage(i, ACT["I"], t + 900, s, n, write, p, c), _stage(i, ACT["D"], t + 2000, s, n, write, 77, c),
        _stage(i, ACT["R"], t + 2500, s, n, write, 77, c), _stage(i, ACT["I"], t + 2600, s, n, write, 77, c),
        _stage(i, ACT["D"], t + 6000, s, n, write, 77, c),
        _stage(i, ACT["C"], t + 6000 + d2c[i], s, n, write, 0, c))


def _split(i, start, sector, nsect, write, pid, cpu, d2c):
    """A bio split at s+8 (X, PDU = new sector): two requests, each Q G I D C."""
    t, s, n, p, c = start[i], sector[i], nsect[i], pid[i], cpu[i]
    n1 = np.full(len(i), 8)
    n2 = n + 8
    out = [_stage(i, ACT["X"], t - 100, s, n + 16, write, p, c, pdu_kind=PDU_INT, pdu_a=s + 8)]
    for ss, nn, dt in ((s, n1, 0), (s + 8, n2, 2000)):
        out += [_stage(i, ACT["Q"], t + dt, ss, nn, write, p, c), _stage(i, ACT["G"], t + dt + 300, ss, nn, write, p, c),
                _stage(i, ACT["I"], t + dt + 600, ss, nn, write, p, c),
                _stage(i, ACT["D"], t + dt + 5000, ss, nn, write, 77, c),
                _stage(i, ACT["C"], t + dt + 5000 + d2c[i], ss, nn, write, 0, c)]
    return _seq(*out)


def _remapped(i, start, sector, nsect, write, pid, cpu, d2c):
    """Q on the dm device, A (from dm, dm sector) + Q G I D C on the disk, C on the dm device."""
    t, s, n, p, c = start[i], sector[i], nsect[i], pid[i], cpu[i]
    disk_s = s + 1_000_000_000
    return _seq(
        _stage(i, ACT["Q"], t, s, n, write, p, c, device=DM),
        _stage(i, ACT["A"], t + 200, disk_s, n, write, p, c, pdu_kind=PDU_REMAP, pdu_a=DM, pdu_b=s),
        _stage(i, ACT["Q"], t + 300, disk_s, n, write, p, c), _stage(i, ACT["G"], t + 600, disk_s, n, write, p, c),
        _stage(i, ACT["I"], t + 900, disk_s, n, write, p, c), _stage(i, ACT["D"], t + 3000, disk_s, n, write, 77, c),
        _stage(i, ACT["C"], t + 3000 + d2c[i], disk_s, n, write, 0, c),
        _stage(i, ACT["C"], t + 3200 + d2c[i], s, n, write, 0, c, device=DM))


# ---------------------------------------------------------------- encoding

def encode(ev: dict, *, order: str = "<", seq_start: int = 1, names: dict | None = PIDS,
           notify_device: int = DISK) -> bytes:
    """Records in the given order (rows of `ev`) -> bytes, preceded by process-name notifies."""
    n = len(ev["time"])
    pdu_len = np.select([ev["pdu_kind"] == PDU_REMAP, ev["pdu_kind"] == PDU_INT], [16, 8], 0)
    dt = bt.DTYPE_LE if order == "<" else bt.DTYPE_BE
    hdr = np.zeros(n, dtype=dt)
    hdr["magic"] = bt.MAGIC | bt.VERSION
    hdr["sequence"] = np.arange(seq_start, seq_start + n)
    for k in ("time", "sector", "bytes", "action", "pid", "device", "cpu"):
        hdr[k] = ev[k]
    hdr["pdu_len"] = pdu_len
    pdu = np.zeros((n, 16), np.uint8)
    be = lambda v, nbytes: np.stack([(v >> (8 * (nbytes - 1 - j))) & 0xFF for j in range(nbytes)], 1)  # noqa: E731
    remap = ev["pdu_kind"] == PDU_REMAP
    pdu[remap, 0:4] = be(ev["pdu_a"][remap], 4)
    pdu[remap, 4:8] = be(ev["device"][remap], 4)
    pdu[remap, 8:16] = be(ev["pdu_b"][remap], 8)
    ints = ev["pdu_kind"] == PDU_INT
    pdu[ints, 0:8] = be(ev["pdu_a"][ints], 8)
    size = bt.HEADER + pdu_len
    offs = np.concatenate(([0], np.cumsum(size)[:-1])).astype(np.int64)
    out = np.zeros(int(size.sum()), np.uint8)
    raw = hdr.view(np.uint8).reshape(n, bt.HEADER)
    for lo in range(0, n, 250_000):          # bounded index arrays
        hi = min(n, lo + 250_000)
        o = offs[lo:hi]
        out[(o[:, None] + np.arange(bt.HEADER)).ravel()] = raw[lo:hi].ravel()
        for width in (8, 16):
            k = np.flatnonzero(pdu_len[lo:hi] == width)
            if len(k):
                out[(o[k, None] + bt.HEADER + np.arange(width)).ravel()] = pdu[lo + k, :width].ravel()
    first_t = int(ev["time"][0]) if n else 0
    return notify_records(names or {}, first_t, order, notify_device) + out.tobytes()


def notify_records(names: dict, t: int, order: str = "<", device: int = DISK, cpu: int = 0) -> bytes:
    """BLK_TN_PROCESS records (pid -> 16-byte comm), built with the construct declaration."""
    out = b""
    for pid, name in names.items():
        out += record(t, 0, 0, block.TC_NOTIFY | block.TN_PROCESS, pid, device, cpu,
                      pdu=name.encode()[:15].ljust(16, b"\0"), order=order)
    return out


def record(t, sector, nbytes, action, pid, device, cpu=0, *, seq=0, pdu=b"", order="<", version=bt.VERSION,
           error=0) -> bytes:
    """One record through the construct declaration (either byte order)."""
    data = dict(magic=bt.MAGIC | version, sequence=seq, time=t, sector=sector, bytes=nbytes, action=action,
                pid=pid, device=device, cpu=cpu, error=error, pdu_len=len(pdu))
    raw = bt.BLK_IO_TRACE.build(data)
    if order == ">":   # same declaration, every field swapped
        raw = np.frombuffer(raw, bt.DTYPE_LE).astype(bt.DTYPE_BE).tobytes()
    return raw + pdu


def write(ev: dict, base: str, *, layout: str = "per-cpu", order: str = "<") -> list[str]:
    """Write `ev` as blktrace would: per-cpu files, one piped stream, or a time-ordered dump."""
    if layout == "dump":
        path = base
        with open(path, "wb") as fh:
            fh.write(encode(ev, order=order))
        return [path]
    cpus = np.unique(ev["cpu"])
    if layout == "per-cpu":
        paths = []
        for cpu in cpus:
            sel = ev["cpu"] == cpu
            path = f"{base}.blktrace.{int(cpu)}"
            with open(path, "wb") as fh:
                fh.write(encode({k: v[sel] for k, v in ev.items()}, order=order,
                                names=PIDS if cpu == cpus[0] else {}))
            paths.append(path)
        return paths
    if layout == "pipe":   # CPU buffers interleaved in chunks, as `blktrace -o -` forwards them
        chunks = []
        for cpu in cpus:
            idx = np.flatnonzero(ev["cpu"] == cpu)
            chunks += [(cpu, idx[j:j + 64]) for j in range(0, len(idx), 64)]
        chunks.sort(key=lambda c: (c[1][0] // 200, c[0]))
        seq = {int(cpu): 1 for cpu in cpus}         # blktrace numbers records per CPU
        with open(base, "wb") as fh:
            fh.write(notify_records(PIDS, int(ev["time"][0])))
            for cpu, idx in chunks:
                fh.write(encode({k: v[idx] for k, v in ev.items()}, order=order, names={},
                                seq_start=seq[int(cpu)]))
                seq[int(cpu)] += len(idx)
        return [base]
    raise ValueError(layout)


# ---------------------------------------------------------------- hostile files

def hostile_cases(directory: str) -> dict[str, str]:
    """Write each hostile file of the module docstring; returns name -> path."""
    os.makedirs(directory, exist_ok=True)
    ev = workload(20, seed=7, merges=0, requeues=0, splits=0, remaps=0.2)
    ev["cpu"][:] = 0
    good = encode(ev)
    paths = {}

    def put(name, data):
        paths[name] = os.path.join(directory, name + ".bin")
        with open(paths[name], "wb") as fh:
            fh.write(data)

    q = record(10**9, 8, 4096, ACT["Q"] | (READ << block.TC_SHIFT), 1, DISK)
    put("truncated-header", good + q[:20])
    remap = record(10**9, 8, 4096, ACT["A"] | (READ << block.TC_SHIFT), 1, DISK, pdu=bytes(16))
    put("truncated-pdu", good + remap[:bt.HEADER + 6])
    cut = len(encode({k: v[:50] for k, v in ev.items()}))
    put("garbage-middle", good[:cut] + bytes(range(100)) + good[cut:])
    put("bad-version", good[:cut] + record(10**9, 8, 4096, ACT["Q"] | (READ << block.TC_SHIFT), 1, DISK,
                                            version=6) + good[cut:])
    msg = b"sched \x07tae" + b"x" * 6 + b"\0"     # 17 bytes: the next record is not 4-aligned
    note = record(int(ev["time"][10]), 0, 0, block.TC_NOTIFY | block.TN_MESSAGE, 0, DISK, pdu=msg)
    put("magic-in-pdu", good[:cut] + note + good[cut:])
    path = os.path.join(directory, "x.blktrace.1")
    with open(path, "wb") as fh:
        fh.write(good)        # every record says CPU 0 or 1, the name says CPU 1
    paths["cpu-mismatch"] = path
    return paths


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base")
    ap.add_argument("--ios", type=int, default=1000)
    ap.add_argument("--layout", choices=("per-cpu", "pipe", "dump"), default="per-cpu")
    ap.add_argument("--big-endian", action="store_true")
    a = ap.parse_args()
    print("\n".join(write(workload(a.ios), a.base, layout=a.layout, order=">" if a.big_endian else "<")))
