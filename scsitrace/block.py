"""Block layer (blktrace, blkparse text): the btt stage machine.

Events (Q G S I M F D C R A ...) become per-I/O stage times the way btt 1.2 computes them
(see docs/blktrace.md for the rules and where this differs from btt):

- A queued bio (Q) is tracked by (device, start sector); a later Q at the same start sector
  replaces it. G, S, I, M/F find their Q by that key, else the live Q containing their sector.
- Every D applies to the live Qs its range contains (a request carries its merged bios):
  I2D from the Q's last I, or M2D from its last merge.
- Every C completes the live Qs its range contains: Q2C, and D2C from the Q's last D.
- Every sample is `to - from`, or 1 ns when `to <= from` (btt's tdelta).
- Events of a device before its first Q or A are ignored (btt's pre-culling); Q G S I M D C
  records with zero bytes and BLK_TC_PC records are ignored; a requeue (R) is counted.

The machine itself is one compiled pass over the events in processing order
(scsitrace/_block_machine.py, numba), with live bios in small hash tables and per-device lists;
tests/test_blktrace_model.py checks it against a one-event-at-a-time Python reference.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl

from . import _block_machine as _bm
from . import schema
from ._keys import dense_ids, distinct
from .errors import UsageError
from .model import Analysis, Capture

# __BLK_TA_* action codes (low 16 bits of `action`), by blkparse's letter; T is blkparse's "UT"
TA = {"Q": 1, "M": 2, "F": 3, "G": 4, "S": 5, "R": 6, "D": 7, "C": 8, "P": 9, "U": 10, "T": 11,
      "I": 12, "X": 13, "B": 14, "A": 15}
LETTER = {code: letter for letter, code in TA.items()}
TC_SHIFT = 16
TC = {"READ": 1 << 0, "WRITE": 1 << 1, "FLUSH": 1 << 2, "SYNC": 1 << 3, "QUEUE": 1 << 4,
      "REQUEUE": 1 << 5, "ISSUE": 1 << 6, "COMPLETE": 1 << 7, "FS": 1 << 8, "PC": 1 << 9,
      "NOTIFY": 1 << 10, "AHEAD": 1 << 11, "META": 1 << 12, "DISCARD": 1 << 13,
      "DRV_DATA": 1 << 14, "FUA": 1 << 15}
TC_NOTIFY = TC["NOTIFY"] << TC_SHIFT
TC_PC = TC["PC"] << TC_SHIFT
TN_PROCESS, TN_TIMESTAMP, TN_MESSAGE = 0, 1, 2
REMAPPER_MAJORS = (9, 253, 254)     # md, device-mapper: btt keeps their Q2Q/Q2A/Q2C apart ("dm")
SECTOR = 512

# What a block parser hands over before `finish_events` (binary layout, absolute times).
RAW_EVENTS = {
    "time_abs": pl.Int64, "seq": pl.Int64, "cpu": pl.Int32, "action": pl.UInt32,
    "device": pl.UInt32, "sector": pl.Int64, "bytes": pl.Int64, "pid": pl.Int64,
    "error": pl.Int16, "pdu_dev": pl.UInt32, "pdu_sector": pl.Int64, "pdu_int": pl.Int64,
    "has_remap": pl.Boolean, "has_int": pl.Boolean, "file": pl.Int16, "position": pl.Int64,
}
NUMPY_RAW = {"time_abs": np.int64, "seq": np.int64, "cpu": np.int32, "action": np.uint32,
             "device": np.uint32, "sector": np.int64, "bytes": np.int64, "pid": np.int64, "error": np.int16,
             "pdu_dev": np.uint32, "pdu_sector": np.int64, "pdu_int": np.int64, "has_remap": np.bool_,
             "has_int": np.bool_, "file": np.int16, "position": np.int64}
# Letters by action code (blkparse's, T = its "UT"; 16 abort, 17 driver data have none): the
# categories of the `act` column, so that it costs one byte per event.
ACT_LETTERS = ("N", "Q", "M", "F", "G", "S", "R", "D", "C", "P", "U", "T", "I", "X", "B", "A", "K", "Y", "?")
ACT_ENUM = pl.Enum(ACT_LETTERS)
# Capture.frames["events"] of a block capture: one row per trace record except notify records,
# in processing order (time, then file and position).
EVENTS = {
    "t_ns": pl.Int64,          # from the first record of the capture
    "seq": pl.Int64,
    "cpu": pl.Int32,
    "action": pl.UInt32,       # raw: __BLK_TA_* | category bits << 16 (RWBS: rwbs_expr)
    "act": ACT_ENUM,           # blkparse's letter (Q, G, I, D, C, M, F, ...; T is a timer unplug)
    "device": pl.UInt32,       # dev_t as blktrace records it: major << 20 | minor (dev_name())
    "sector": pl.Int64,
    "bytes": pl.Int64,
    "pid": pl.Int64,
    "error": pl.Int16,
    "pdu_dev": pl.UInt32,      # remap: the device the bio came from (null otherwise)
    "pdu_sector": pl.Int64,    # remap: its sector there; split: the new sector
    "pdu_int": pl.Int64,       # unplug: requests unplugged
    "file": pl.Int16,          # index into meta["files"]
    "position": pl.Int64,      # byte offset (binary) or line number (text) in that file
}
PROCESSES = {"pid": pl.Int64, "name": pl.Utf8}
# What the block analysis reads of the events (Capture.columns["events"] of a binary capture,
# else taken from the events frame): a remap's source device and sector, else 0.
MACHINE_COLUMNS = {"t_ns": np.int64, "action": np.uint32, "device": np.uint32, "sector": np.int64,
                   "bytes": np.int64, "pid": np.int64, "pdu_dev": np.uint32, "pdu_sector": np.int64}

STAGE_ORDER = _bm.STAT_NAMES
JSON_STAGES = ("Q2Q", "Q2G", "G2I", "Q2M", "I2D", "D2C", "Q2C")
OVERHEAD = ("Q2G", "G2I", "Q2M", "I2D", "D2C")


def dev_name(dev: int) -> str:
    return f"{dev >> 20},{dev & 0xFFFFF}"


def _rwbs(action: int, has_bytes: bool) -> str:
    """blkparse's fill_rwbs."""
    tc = action >> TC_SHIFT
    out = "F" if tc & TC["FLUSH"] else ""
    out += "D" if tc & TC["DISCARD"] else "W" if tc & TC["WRITE"] else "R" if has_bytes else "N"
    for bit, ch in (("FUA", "F"), ("AHEAD", "A"), ("SYNC", "S"), ("META", "M")):
        if tc & TC[bit]:
            out += ch
    return out


def merge_rows(times: list[np.ndarray], in_order: bool | None = None) -> np.ndarray:
    """Row of each record (files concatenated) in processing order: by time, then file, then
    place in the file. A linear k-way merge when every file is in time order (as blktrace
    writes them; `in_order` when the caller knows), else a stable sort."""
    if in_order is None:
        in_order = all(np.all(t[1:] >= t[:-1]) for t in times)
    if in_order and len(times) == 2:
        return _bm.merge_two(times[0], times[1])
    if in_order and len(times) <= MERGE_FILES:
        bounds = np.cumsum([0] + [len(t) for t in times]).astype(np.int64)
        return _bm.merge_sorted(np.concatenate(times) if times else np.zeros(0, np.int64), bounds)
    allt = np.concatenate(times)
    rows = np.empty(len(allt), np.int64)
    rows[np.argsort(allt, kind="stable")] = np.arange(len(allt), dtype=np.int64)
    return rows


MERGE_FILES = 16            # more files than this: a sort beats the k-way merge


def merge_order(times: list[np.ndarray]) -> np.ndarray | None:
    """The records (files concatenated) in processing order (see merge_rows), or None when
    they already are."""
    rows = merge_rows(times)
    if np.all(rows == np.arange(len(rows))):
        return None
    order = np.empty_like(rows)
    order[rows] = np.arange(len(rows), dtype=np.int64)
    return order


def finish_events(raw: pl.DataFrame) -> pl.DataFrame:
    """RAW_EVENTS in processing order (see merge_order), notify records already out -> EVENTS
    plus `time_abs`: times from the first record, action letters decoded."""
    origin = raw["time_abs"].min() if raw.height else 0
    code = (raw["action"].to_numpy() & 0xFF).astype(np.int64)
    act = pl.Series("act", ACT_LETTERS, dtype=ACT_ENUM).gather(np.minimum(code, len(ACT_LETTERS) - 1))
    is_x = pl.lit(pl.Series(code == TA["X"]))
    return raw.select(
        (pl.col("time_abs") - origin).alias("t_ns"),
        "seq", "cpu", "action", act.alias("act"), "device",
        "sector", "bytes", "pid", "error",
        pl.when("has_remap").then("pdu_dev").alias("pdu_dev"),
        pl.when("has_remap").then("pdu_sector")
        .when(is_x & pl.col("has_int")).then("pdu_int").alias("pdu_sector"),
        pl.when(pl.col("has_int") & ~is_x).then("pdu_int").alias("pdu_int"),
        "file", "position", "time_abs",
    )


# ---------------------------------------------------------------- filters

def _parse_window(window) -> tuple[int | None, int | None]:
    """'START:END' in seconds from the trace start (either side may be empty) -> ns."""
    if window is None:
        return None, None
    if isinstance(window, (tuple, list)):
        lo, hi = window
    else:
        lo, sep, hi = str(window).partition(":")
        if not sep:
            raise UsageError(f"--window expects START:END in seconds, got {window!r}")
    try:
        lo_ns = None if lo in ("", None) else int(round(float(lo) * 1e9))
        hi_ns = None if hi in ("", None) else int(round(float(hi) * 1e9))
    except ValueError:
        raise UsageError(f"--window expects START:END in seconds, got {window!r}") from None
    if lo_ns is not None and hi_ns is not None and hi_ns < lo_ns:
        raise UsageError(f"--window {window}: END is before START")
    return lo_ns, hi_ns


def _device_key(device) -> int:
    """'8,0' (or '8:0') -> dev_t as blktrace records it."""
    text = str(device).replace(":", ",").replace(" ", "")
    major, sep, minor = text.partition(",")
    if not sep or not major.isdigit() or not minor.isdigit():
        raise UsageError(f"--device expects MAJOR,MINOR (e.g. 8,0), got {device!r}")
    return (int(major) << 20) | int(minor)


def event_columns(capture: Capture) -> dict[str, np.ndarray]:
    """MACHINE_COLUMNS of a block capture: handed over by the binary reader, else from the
    events frame."""
    if "events" in capture.columns:
        return capture.columns["events"]
    events = capture.frames["events"]
    return {name: events[name].fill_null(0).to_numpy().astype(dtype, copy=False)
            for name, dtype in MACHINE_COLUMNS.items()}


def _filtered(cols: dict[str, np.ndarray], opts: dict) -> dict[str, np.ndarray]:
    """--device keeps that device's events; --window keeps events inside the window (btt -t/-T)."""
    keep = None
    if opts.get("device") is not None:
        keep = cols["device"] == _device_key(opts["device"])
    lo, hi = _parse_window(opts.get("window"))
    for bound, inside in ((lo, np.greater_equal), (hi, np.less_equal)):
        if bound is not None:
            mask = inside(cols["t_ns"], bound)
            keep = mask if keep is None else keep & mask
    return cols if keep is None else {name: col[keep] for name, col in cols.items()}


# ---------------------------------------------------------------- the stage machine

NONE = _bm.NONE


def _dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in order of first appearance, index of each value among them)."""
    ids, first = dense_ids(values)
    return values[first], ids


KIND = np.full(256, _bm.K_OTHER, np.int8)          # what each action code is to the machine
for _letter, _kind in (("Q", _bm.K_Q), ("G", _bm.K_G), ("S", _bm.K_S), ("I", _bm.K_I), ("M", _bm.K_M),
                       ("F", _bm.K_M), ("D", _bm.K_D), ("C", _bm.K_C), ("A", _bm.K_A), ("R", _bm.K_R)):
    KIND[TA[_letter]] = _kind


class _Events:
    """The events as btt's machine sees them: numpy columns in processing order, with what each
    one is to the machine (`kind`: K_OTHER for the events btt's pre-culling drops)."""

    def __init__(self, cols: dict[str, np.ndarray]):
        self.action, self.sector, self.bytes, self.t, self.pid = (
            cols[name] for name in ("action", "sector", "bytes", "t_ns", "pid"))
        self.devices = distinct(cols["device"]).astype(np.int64)
        # all_counts: every record, for the per-device counters (before culling: blkparse's counts)
        self.kind, self.dev, self.all_counts, self.queued, self.dispatched = _bm.select_events(
            self.action, cols["device"], self.bytes, self.devices, KIND, TC_PC)
        self.pdu_dev, self.pdu_sector = cols["pdu_dev"], cols["pdu_sector"]

    def end(self, idx: np.ndarray) -> np.ndarray:
        """The sector after the range of events idx."""
        return self.sector[idx] + self.bytes[idx] // SECTOR

    def of(self, kind: int) -> np.ndarray:
        """Event indexes (in processing order) of this kind (_bm.K_*)."""
        if kind == _bm.K_Q:
            return self.queued
        if kind == _bm.K_D:
            return self.dispatched
        return np.flatnonzero(self.kind == kind)


def _strictly_inside(q_dev, q_start, ev: _Events, kinds: np.ndarray) -> np.ndarray:
    """Bios whose start sector lies strictly inside the range of some event of `kinds` on their
    device, at any time."""
    mask = np.zeros(len(q_start), bool)
    for k in range(len(ev.devices)):
        e = kinds[ev.dev[kinds] == k]
        sel = np.flatnonzero(q_dev == k)
        if len(e) == 0 or len(sel) == 0:
            continue
        o = np.argsort(ev.sector[e], kind="stable")
        starts, reach = ev.sector[e][o], np.maximum.accumulate(ev.end(e)[o])
        j = np.searchsorted(starts, q_start[sel], side="left") - 1      # last start below the bio's
        ok = j >= 0
        mask[sel[ok]] = reach[j[ok]] > q_start[sel[ok]]
    return mask


def _odd_bios(ev: _Events, qi: np.ndarray) -> np.ndarray:
    """The Qs (indexes into qi) for which containment alone does not decide whether a D or C
    applies (zero length, or a start sector no key can hold: see _bm._contains)."""
    q_start = ev.sector[qi]
    return np.flatnonzero((ev.bytes[qi] < SECTOR) | (q_start < 0) | (q_start >= _bm.KEY_SECTORS))


def _odd_inside(ev: _Events, qi: np.ndarray, odd: np.ndarray, kind: int) -> np.ndarray:
    """Per Q, _strictly_inside the events of `kind` (_bm.K_C, K_D), computed for the odd bios only."""
    mask = np.zeros(len(qi), bool)
    if len(odd):
        mask[odd] = _strictly_inside(ev.dev[qi][odd], ev.sector[qi][odd], ev, ev.of(kind))
    return mask


def machine(ev: "_Events") -> dict:
    """Run the btt stage machine over the events -> per-Q frame and the stage samples."""
    return _finish(_Queued(ev), _run_machine(ev))


def _run_machine(ev: "_Events") -> tuple:
    """The compiled machine over the events (_bm.run's results)."""
    qi = ev.of(_bm.K_Q)
    odd = _odd_bios(ev, qi)
    return _bm.run(ev.kind, ev.dev, ev.sector, ev.bytes, ev.t, ev.pdu_dev, ev.pdu_sector, ev.devices, len(qi),
                   _odd_inside(ev, qi, odd, _bm.K_C), _odd_inside(ev, qi, odd, _bm.K_D))


class _Queued:
    """What is known of each Q before the machine runs: its event, device, process."""

    def __init__(self, ev: "_Events"):
        self.ev, self.qi = ev, ev.of(_bm.K_Q)
        self.pids, self.pid_of_q = _dense_ids(ev.pid[self.qi])
        self.dm = np.isin(ev.devices >> 20, REMAPPER_MAJORS)
        self.requests = _Requests(ev, self.qi, self.pid_of_q)


def _finish(queued: _Queued, ran: tuple) -> dict:
    """The run: the Qs (what _Queued knows plus the machine's results) and the samples."""
    c_ev, last, d_t, stage, q, ns = ran
    ev = queued.ev
    c_t = np.where(c_ev != NONE, ev.t[np.maximum(c_ev, 0)], NONE) if len(ev.t) else c_ev
    queued.requests.complete(c_t, d_t, last)
    return {"ev": ev, "qi": queued.qi, "raw_samples": (stage, q, ns), "pids": queued.pids,
            "pid_of_q": queued.pid_of_q, "dm": queued.dm, "requests": queued.requests}


def samples(run: dict) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The machine's samples as (Q, ns) arrays per stage name (Q2Q is not a machine sample).
    The tables add them up in one compiled pass instead (stage_totals); this spells them out
    for checks."""
    ev, qi, dm = run["ev"], run["qi"], run["dm"]
    stage, q, ns = run["raw_samples"]
    q_dev = ev.dev[qi]
    out = {}
    for k, name in enumerate(_bm.STAGES):
        sel = stage == k
        sq, sv = q[sel], ns[sel]
        is_dm = dm[q_dev[sq]] if name in ("Q2C", "Q2A") else np.zeros(len(sq), bool)
        out[name] = (sq[~is_dm], sv[~is_dm])
        if name in ("Q2C", "Q2A"):                      # md and device-mapper devices kept apart
            out[name + "dm"] = (sq[is_dm], sv[is_dm])
    return out


class _Requests:
    """One row per Q (numpy columns): where and what, its Q, last D and C times, and its last
    sample of each stage (btt keeps the last time it saw); NONE where it has none."""

    def __init__(self, ev, qi, pid_of_q):
        """What is known before the machine runs (`complete` adds the rest)."""
        self.q, self.q_idx = np.arange(len(qi)), qi
        self.dev, self.pid_id = ev.dev[qi], pid_of_q
        self.device = ev.devices[self.dev].astype(np.uint32)
        self.sector, self.bytes, self.pid, self.action, self.q_t = (
            ev.sector[qi], ev.bytes[qi], ev.pid[qi], ev.action[qi], ev.t[qi])

    def complete(self, c_t, d_t, last) -> None:
        """The machine's results: C and last D times, last Q2G, G2I, Q2M, I2D samples."""
        self.d_t, self.c_t = d_t, c_t
        self.q2g, self.g2i, self.q2m, self.i2d = last
        self.done, self.q2c, self.d2c = _bm.request_times(self.q_t, d_t, c_t)

    def subset(self, keep: np.ndarray) -> "_Requests":
        out = object.__new__(_Requests)
        out.__dict__ = {name: col[keep] for name, col in self.__dict__.items()}
        return out

    def frame(self) -> pl.DataFrame:
        """The table as polars, missing values null."""
        cols = {"q": self.q, "q_idx": self.q_idx, "device": self.device, "sector": self.sector,
                "bytes": self.bytes, "pid": self.pid, "action": self.action, "q_t": self.q_t,
                "q2g_ns": self.q2g, "g2i_ns": self.g2i, "q2m_ns": self.q2m, "i2d_ns": self.i2d,
                "d_t": self.d_t, "c_t": self.c_t, "d2c_ns": self.d2c, "q2c_ns": self.q2c}
        optional = ("q2g_ns", "g2i_ns", "q2m_ns", "i2d_ns", "d_t", "c_t", "d2c_ns", "q2c_ns")
        return pl.DataFrame({name: pl.Series(name, col).set(pl.Series(col == NONE), None) if name in optional
                             else col for name, col in cols.items()})


# ---------------------------------------------------------------- statistics

STATS = {"device": pl.Utf8, "stage": pl.Utf8, "n": pl.Int64, "min_ns": pl.Int64, "avg_ns": pl.Float64,
         "max_ns": pl.Int64, "total_ns": pl.Int64}


_NAME_OF = np.array([_bm.STAT_NAMES.index(name) for name in _bm.STAGES], np.int64)
_DM_NAME_OF = np.array([_bm.STAT_NAMES.index(name + "dm" if name in ("Q2C", "Q2A") else name)
                        for name in _bm.STAGES], np.int64)


def stage_totals(run: dict, keep_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, min, max and sum of every stage's samples per device, per process and over all
    (_bm.stage_totals), of the Qs keep_q selects (all by default)."""
    ev, qi = run["ev"], run["qi"]
    stage, q, ns = run["raw_samples"]
    keep = np.ones(len(qi), bool) if keep_q is None else keep_q
    q_dev, q_pid, n_pid = ev.dev[qi], run["pid_of_q"], max(len(run["pids"]), 1)
    pair = q_dev.astype(np.int64) * n_pid + q_pid                 # (device, process) of each Q
    if len(ev.devices) * n_pid <= PAIRS_DIRECT:
        pairs, q_pair = np.arange(len(ev.devices) * n_pid), pair
    else:
        pairs, q_pair = _dense_ids(pair)
    return _bm.stage_totals(stage, q, ns, _NAME_OF, _DM_NAME_OF, ev.t[qi], q_dev, q_pid, q_pair, pairs // n_pid,
                            pairs % n_pid, run["dm"], keep, len(_bm.STAT_NAMES), len(ev.devices), len(run["pids"]))


PAIRS_DIRECT = 4096          # (device, process) pairs indexed directly up to this many, else only those present


def _stat_rows(totals: np.ndarray, group: int):
    """(stage name, n, min, avg, max, total) of one group, for the stages with samples, in btt's order."""
    for k, name in enumerate(_bm.STAT_NAMES):
        n, lo, hi, total = (int(totals[k, group, field]) for field in (_bm.T_COUNT, _bm.T_MIN, _bm.T_MAX, _bm.T_SUM))
        if n:
            yield name, n, lo, total / n, hi, total


def stage_stats(run: dict, totals) -> pl.DataFrame:
    """btt's avg_info per (device, stage) and for device "all": n, min, avg, max, total."""
    per_dev, _, overall = totals
    rows = [(dev_name(int(dev)), name, n, lo, avg, hi, total)
            for k, dev in sorted(enumerate(run["ev"].devices), key=lambda kd: _dev_sort(dev_name(int(kd[1]))))
            for name, n, lo, avg, hi, total in _stat_rows(per_dev, k)]
    rows += [("all", *row) for row in _stat_rows(overall, 0)]
    return pl.DataFrame(rows, schema=STATS, orient="row")


def process_stats(run: dict, names: dict, totals) -> pl.DataFrame:
    """btt's per-process avg_info (btt -A "Per Process"): samples grouped by the pid that queued
    the bio, named by its command."""
    per_pid = totals[1]
    rows = [(names.get(int(pid), str(int(pid))), int(pid), name, n, lo, avg, hi, total)
            for k, pid in enumerate(run["pids"]) for name, n, lo, avg, hi, total in _stat_rows(per_pid, k)]
    order = {name: k for k, name in enumerate(STAGE_ORDER)}
    rows.sort(key=lambda r: (order[r[2]], r[0], r[1]))
    return pl.DataFrame(rows, schema={"process": pl.Utf8, "pid": pl.Int64, **{k: v for k, v in STATS.items()
                                                                            if k != "device"}}, orient="row")


def overhead(stats: pl.DataFrame) -> pl.DataFrame:
    """btt's Device Overhead: each stage's total as % of Q2C's, per device and Overall."""
    per = {(r["device"], r["stage"]): r for r in stats.filter(pl.col("device") != "all").iter_rows(named=True)}
    devices = sorted({d for d, _ in per}, key=_dev_sort)
    rows, sums, ns = [], {name: 0 for name in OVERHEAD + ("Q2C",)}, {name: 0 for name in OVERHEAD}
    for dev in devices:
        q2c = per.get((dev, "Q2C"))
        if not q2c or q2c["total_ns"] == 0:
            continue
        row = {"device": dev}
        for name in OVERHEAD:
            st = per.get((dev, name))
            row[name] = 100.0 * (st["total_ns"] if st else 0) / q2c["total_ns"]
            sums[name] += st["total_ns"] if st else 0
            ns[name] += st["n"] if st else 0
        sums["Q2C"] += q2c["total_ns"]
        rows.append(row)
    if rows:
        rows.append({"device": "Overall", **{name: (100.0 * sums[name] / sums["Q2C"] if ns[name] else 0.0)
                                             for name in OVERHEAD}})
    return pl.DataFrame(rows, schema={"device": pl.Utf8, **{n: pl.Float64 for n in OVERHEAD}})


def _dev_sort(dev: str):
    major, _, minor = dev.partition(",")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (1 << 30, 0)


def _btt_categories(stats: pl.DataFrame, n_done: int) -> pl.DataFrame:
    """Profile "btt": the Overall Device Overhead row; normalized = stage total / I/Os completed."""
    od = overhead(stats)
    overall = od.filter(pl.col("device") == "Overall")
    counted = od.filter(pl.col("device") != "Overall")["device"].to_list()
    per = stats.filter(pl.col("device").is_in(counted))
    rows = []
    for name in OVERHEAD:
        total = int(per.filter(pl.col("stage") == name)["total_ns"].sum())
        rows.append({"name": name, "total_ns": total,
                     "percent": float(overall[name][0]) if overall.height else 0.0,
                     "normalized_ns": total / n_done if n_done else None})
    return pl.DataFrame(rows, schema={"name": pl.Utf8, "total_ns": pl.Int64, "percent": pl.Float64,
                                      "normalized_ns": pl.Float64})


# ---------------------------------------------------------------- per device, per process, sizes

def busy_runs(req: _Requests) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per device: (device, starts, ends) of the runs when at least one request is between its D
    and its C."""
    iv = req.done & (req.d_t != NONE)
    dev, d_t, c_t = req.device[iv], req.d_t[iv], req.c_t[iv]
    out = []
    for device in distinct(dev):
        sel = dev == device
        order = np.argsort(d_t[sel], kind="stable")
        s, e = d_t[sel][order], np.maximum(c_t[sel][order], d_t[sel][order])
        reach = np.maximum.accumulate(e)
        first = np.flatnonzero(np.concatenate(([True], s[1:] > reach[:-1])))   # a new busy run
        out.append((int(device), s[first], reach[np.concatenate((first[1:] - 1, [len(s) - 1]))]))
    return out


def busy_segments(runs: list, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Per device, "Busy" (busy_runs) and "Idle" segments, tiling the trace once per device."""
    parts = []
    for device, b_s, b_e in runs:
        gaps_s = np.concatenate(([start_ns], b_e))
        gaps_e = np.concatenate((b_s, [end_ns]))
        idle = gaps_e > gaps_s
        for lo, hi, phase in ((b_s, b_e, "BUSY"), (gaps_s[idle], gaps_e[idle], "IDLE")):
            parts.append(pl.DataFrame({"device": np.full(len(lo), device, np.uint32), "start_ns": lo,
                                       "end_ns": hi, "phase": [phase] * len(lo)}))
    seg = pl.concat(parts).sort("device", "start_ns") if parts else pl.DataFrame(
        schema={"device": pl.UInt32, "start_ns": pl.Int64, "end_ns": pl.Int64, "phase": pl.Utf8})
    out = seg.select(
        pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64), "phase",
        pl.when(pl.col("phase") == "BUSY").then(pl.lit("Busy")).otherwise(pl.lit("Idle")).alias("category"),
        *(pl.lit(None, dtype).alias(c) for c, dtype in schema.SEGMENTS.items()
          if c not in ("start_ns", "end_ns", "phase", "category")),
        _dev_names(pl.col("device")).alias("device"))
    return schema.validate(out, schema.SEGMENTS, "block segments")


def _dev_names(col: pl.Expr) -> pl.Expr:
    return pl.format("{},{}", (col.cast(pl.Int64) // (1 << 20)), (col.cast(pl.Int64) % (1 << 20)))


def device_counts(ev: _Events) -> pl.DataFrame:
    """Per device: records seen (Q, D, merges, requeues) and the mean and median |D sector -
    previous D end| (seek) in sectors."""
    counts = ev.all_counts
    d = ev.of(_bm.K_D)
    d_seek, d_has = _bm.seeks(d, ev.dev, ev.sector, ev.bytes, len(ev.devices))
    d_dev = ev.dev[d]
    rows = []
    for k, dev in enumerate(ev.devices):
        seek = d_seek[d_has & (d_dev == k)]
        rows.append({"device": int(dev), "queued": int(counts[k, TA["Q"]]), "dispatched": int(counts[k, TA["D"]]),
                     "merges": int(counts[k, TA["M"]] + counts[k, TA["F"]]), "requeues": int(counts[k, TA["R"]]),
                     "seek_mean_sectors": float(seek.mean()) if len(seek) else None,
                     "seek_median_sectors": float(np.median(seek)) if len(seek) else None,
                     "seeks": int(np.count_nonzero(seek))})
    return pl.DataFrame(rows, schema={"device": pl.UInt32, "queued": pl.Int64, "dispatched": pl.Int64,
                                      "merges": pl.Int64, "requeues": pl.Int64, "seek_mean_sectors": pl.Float64,
                                      "seek_median_sectors": pl.Float64, "seeks": pl.Int64})


def device_table(base: pl.DataFrame, depth: pl.DataFrame, req: _Requests, devices: np.ndarray, runs: list,
                 elapsed_ns: int) -> pl.DataFrame:
    """device_counts plus completions, bytes, busy time, queue depth, rates."""
    done = _bm.group_totals(req.dev, req.bytes, req.done, len(devices))
    writes = _bm.group_totals(req.dev, req.q, req.done & ((req.action & (TC["WRITE"] << TC_SHIFT)) != 0), len(devices))
    seen = done[:, _bm.T_COUNT] > 0
    per = pl.DataFrame({"device": devices[seen].astype(np.uint32), "ios_completed": done[seen, _bm.T_COUNT],
                        "bytes": done[seen, _bm.T_SUM], "writes": writes[seen, _bm.T_COUNT]})
    busy = pl.DataFrame({"device": [dev_name(device) for device, _, _ in runs],
                         "busy_ns": [int((ends - starts).sum()) for _, starts, ends in runs]},
                        schema={"device": pl.Utf8, "busy_ns": pl.Int64})
    secs = elapsed_ns / 1e9
    out = base.join(per, on="device", how="left").join(depth, on="device", how="left").sort("device")
    out = out.with_columns(_dev_names(pl.col("device")).alias("device")).join(busy, on="device", how="left")
    out = out.with_columns(pl.col("ios_completed", "bytes", "busy_ns", "writes").fill_null(0))
    known = pl.col("queued") > 0 if secs else pl.lit(False)   # no Q: completions unpaired, rates unknown
    return out.with_columns(
        (100.0 * pl.col("busy_ns") / max(elapsed_ns, 1)).alias("busy_percent"),
        pl.when(known).then(pl.col("ios_completed") / max(secs, 1e-9)).alias("iops"),
        pl.when(known).then(pl.col("bytes") / float(1 << 20) / max(secs, 1e-9)).alias("mib_s"))


def queue_depth(ev: _Events, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Requests in the driver per device: +1 at each D, -1 at each C or R (as blkparse's depth
    counts), in processing order. Per device with such events: the maximum and the
    time-weighted average from the first event of the trace up to `end_ns`."""
    seen, peak, held = _bm.depth_totals(ev.kind, ev.dev, ev.t, len(ev.devices), end_ns)
    span = max(end_ns - start_ns, 1)
    return pl.DataFrame({"device": ev.devices[seen].astype(np.uint32), "max_depth": peak[seen],
                         "avg_depth": held[seen] / span},
                        schema={"device": pl.UInt32, "max_depth": pl.Int64, "avg_depth": pl.Float64})


def process_table(req: _Requests, n_pids: int, pids: np.ndarray, names: dict) -> pl.DataFrame:
    """Per process (the name of the Q's pid): I/Os queued and completed, bytes, Q2C and D2C."""
    queued = _bm.group_totals(req.pid_id, req.q, np.ones(len(req.q), bool), n_pids)
    done = _bm.group_totals(req.pid_id, req.bytes, req.done, n_pids)
    q2c = _bm.group_totals(req.pid_id, req.q2c, req.done, n_pids)
    d2c = _bm.group_totals(req.pid_id, req.d2c, req.d2c != NONE, n_pids)
    seen = queued[:, _bm.T_COUNT] > 0
    per = pl.DataFrame({
        "pid": pids[seen], "queued": queued[seen, _bm.T_COUNT], "ios_completed": done[seen, _bm.T_COUNT],
        "bytes": done[seen, _bm.T_SUM], "q2c_total": q2c[seen, _bm.T_SUM],
        "q2c_max_ns": pl.Series(q2c[seen, _bm.T_MAX]).set(pl.Series(q2c[seen, _bm.T_COUNT] == 0), None),
        "d2c_total": d2c[seen, _bm.T_SUM], "d2c_n": d2c[seen, _bm.T_COUNT]})
    per = per.with_columns(_process_names(pl.col("pid"), names).alias("process"))
    out = per.group_by("process").agg(
        pl.col("queued", "ios_completed", "bytes").sum(),
        (pl.col("q2c_total").sum() / pl.col("ios_completed").sum()).alias("q2c_avg_ns"),
        pl.col("q2c_max_ns").max(),
        (pl.col("d2c_total").sum() / pl.col("d2c_n").sum()).alias("d2c_avg_ns"))
    return out.sort("queued", "process", descending=[True, False])


def _process_names(pid: pl.Expr, names: dict) -> pl.Expr:
    return pid.replace_strict(names, default=None, return_dtype=pl.Utf8).fill_null(pid.cast(pl.Utf8))


def size_histogram(ev: _Events) -> pl.DataFrame:
    """Sizes of the requests btt sees dispatched (D), in power-of-two buckets of bytes."""
    counts, writes = _bm.size_buckets(ev.of(_bm.K_D), ev.bytes, ev.action, TC["WRITE"] << TC_SHIFT)
    k = np.flatnonzero(counts)
    return pl.DataFrame({"bytes_max": np.left_shift(1, k).astype(np.int64), "requests": counts[k],
                         "writes": writes[k], "reads_other": counts[k] - writes[k]})


# ---------------------------------------------------------------- analysis

def rwbs_expr(action: pl.Expr, nbytes: pl.Expr, combos: list[tuple[int, bool]]) -> pl.Expr:
    """blkparse's RWBS text for each (action, bytes > 0) pair present."""
    key = (action & 0xFFFF0000).cast(pl.Int64) * 2 + (nbytes > 0).cast(pl.Int64)
    mapping = {a * 2 + int(b): _rwbs(a, b) for a, b in combos}
    if not mapping:
        return pl.lit(None, pl.Utf8)
    return key.replace_strict(mapping, return_dtype=pl.Utf8)


def ios_frame(queues: pl.DataFrame, names: dict) -> pl.DataFrame:
    """schema.IOS rows, one per Q, plus the block stage columns; bus-only columns are null."""
    combos = queues.select((pl.col("action") & 0xFFFF0000).alias("a"), (pl.col("bytes") > 0).alias("b")) \
        .unique().rows()
    cols = {
        "io": pl.col("q").cast(pl.Int64), "device": _dev_names(pl.col("device")),
        "op": rwbs_expr(pl.col("action"), pl.col("bytes"), combos),
        "lba": pl.col("sector"), "blocks": pl.col("bytes") // SECTOR, "bytes": pl.col("bytes"),
        "data_bytes": pl.col("bytes"), "start_ns": pl.col("q_t"), "end_ns": pl.col("c_t"),
        "status": pl.when(pl.col("c_t").is_not_null()).then(pl.lit("OK")).otherwise(pl.lit("INCOMPLETE")),
        "complete": pl.col("c_t").is_not_null(), "partial": pl.lit(False),
    }
    exprs = [(cols[c] if c in cols else pl.lit(None)).cast(dtype).alias(c) for c, dtype in schema.IOS.items()]
    extra = [pl.col("pid"), _process_names(pl.col("pid"), names).alias("process"),
             *(pl.col(c) for c in ("q2g_ns", "g2i_ns", "q2m_ns", "i2d_ns", "d2c_ns", "q2c_ns")),
             pl.col("q2m_ns").is_not_null().alias("merged")]
    return schema.validate(queues.select(*exprs, *extra), schema.IOS, "block ios")


def analyze(capture: Capture, options) -> Analysis:
    opts = dict(getattr(options, "layer_options", {}) or {})
    cols = _filtered(event_columns(capture), opts)
    names = dict(capture.frames["processes"].iter_rows()) if "processes" in capture.frames else {}
    start_ns = int(cols["t_ns"].min()) if len(cols["t_ns"]) else 0
    end_ns = int(cols["t_ns"].max()) if len(cols["t_ns"]) else 0
    ev = _Events(cols)
    # the compiled passes release the GIL: the machine, then the stage totals, run in a worker
    # thread while this one does what needs only the events, then only the requests
    with ThreadPoolExecutor(max_workers=1) as pool:
        running = pool.submit(_run_machine, ev)
        queued = _Queued(ev)
        depth, sizes, counts = queue_depth(ev, start_ns, end_ns), size_histogram(ev), device_counts(ev)
        run = _finish(queued, running.result())
        requests = run["requests"]
        keep = None
        if opts.get("pid") is not None:
            keep = np.isin(requests.pid, _pid_set(opts["pid"], names))
            requests = requests.subset(keep)
        adding = pool.submit(stage_totals, run, keep)
        runs = busy_runs(requests)
        devices = device_table(counts, depth, requests, ev.devices, runs, end_ns - start_ns)
        processes = process_table(requests, len(run["pids"]), run["pids"], names)
        totals = adding.result()
    stats = stage_stats(run, totals)
    elapsed = end_ns - start_ns
    n_q2c = int(stats.filter((pl.col("device") == "all") & (pl.col("stage") == "Q2C"))["n"].sum())
    json_extra = {
        "stages": _stages_json(stats),
        "events": event_counts(ev),
        "overhead": overhead(stats).to_dicts(),
        "devices": devices.to_dicts(),
        "processes": processes.to_dicts(),
        "process_stages": [{"process": r["process"], "pid": r["pid"], "name": r["stage"], "n": r["n"],
                            "min_ns": r["min_ns"], "avg_ns": r["avg_ns"], "max_ns": r["max_ns"],
                            "total_ns": r["total_ns"]} for r in process_stats(run, names, totals).iter_rows(named=True)],
        "size_histogram": sizes.to_dicts(),
    }
    notes = ["block layer: stage times as btt computes them; Device Overhead percentages are of Q2C "
             "time (Q2G+G2I and Q2M are alternatives, so they need not sum to 100)"]
    if keep is not None:
        notes.append("--pid: samples of I/Os queued by the given process(es) only")
    data_bytes = int(requests.bytes[requests.done].sum())
    completions = json_extra["events"].get("C", 0)
    if completions and not len(requests.done):   # e.g. a blkparse text of C events only
        data_bytes = None
        notes.append(f"{completions} completion (C) events and no queue (Q) events: the completions were "
                     "ignored (stages pair them with queued requests), so I/O counts, stage times and the "
                     "bandwidth are unknown")
    return Analysis(
        layer="block", capture=capture, elapsed_ns=elapsed, start_ns=start_ns,
        segments=lambda: busy_segments(runs, start_ns, end_ns), segment_targets=False,
        ios=lambda: ios_frame(requests.frame(), names), anomalies=capture.anomalies,
        ios_completed=int(requests.done.sum()), data_bytes=data_bytes,
        category_order={"btt": list(OVERHEAD)}, default_profile="btt",
        categories={"btt": _btt_categories(stats, n_q2c)}, notes=notes + list(capture.notes),
        source={"path": capture.path, "format": capture.format, "files": capture.meta.get("files")},
        extra={"json": json_extra, "stats": stats},
    )


def _pid_set(pid, names: dict) -> list[int]:
    out = []
    for item in str(pid).split(","):
        item = item.strip()
        if item.isdigit():
            out.append(int(item))
            continue
        matches = [p for p, n in names.items() if n == item]
        if not matches:
            raise UsageError(f"--pid {item!r}: no such pid or process name in the trace")
        out.extend(matches)
    return out


def _stages_json(stats: pl.DataFrame) -> list[dict]:
    """The issue's `stages` list: every stage with samples per device and "all", plus the seven
    named stages with n = 0 where they have none."""
    rows = [{"device": r["device"], "name": r["stage"], "n": r["n"], "min_ns": r["min_ns"],
             "avg_ns": r["avg_ns"], "max_ns": r["max_ns"], "total_ns": r["total_ns"]}
            for r in stats.iter_rows(named=True)]
    have = {(r["device"], r["name"]) for r in rows}
    for dev in sorted({r["device"] for r in rows} - {"all"}, key=_dev_sort) + ["all"]:
        for name in JSON_STAGES:
            if (dev, name) not in have:
                rows.append({"device": dev, "name": name, "n": 0, "min_ns": None, "avg_ns": None,
                             "max_ns": None, "total_ns": 0})
    return rows


def event_counts(ev: _Events) -> dict:
    """Records per blkparse action letter (T = timer unplug, blkparse's UT), as blkparse counts."""
    per_code = ev.all_counts.sum(axis=0)
    return {ACT_LETTERS[min(code, len(ACT_LETTERS) - 1)]: int(n) for code, n in enumerate(per_code) if n}
