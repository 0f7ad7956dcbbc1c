"""The btt stage machine (block layer): events in processing order -> per-Q stage samples and
request times, the way btt 1.2 computes them (docs/blktrace.md, "The stage machine"):

- A queued bio (Q) is tracked by (device, start sector); a later Q at the same start sector
  replaces it. G, S, I, M/F find their Q by that key, else the live Q containing their sector.
- Every D applies to the live Qs its range contains (a request carries its merged bios):
  I2D from the Q's last I, or M2D from its last merge.
- Every C completes the live Qs its range contains: Q2C, and D2C from the Q's last D.
- Every sample is `to - from`, or 1 ns when `to <= from` (btt's tdelta).
- Events of a device before its first Q or A are ignored (btt's pre-culling); Q G S I M D C
  records with zero bytes and BLK_TC_PC records are ignored; a requeue (R) is counted.

The machine itself is one compiled pass over the events (`_machine_scan.run`);
tests/test_blktrace_model.py checks it against a one-event-at-a-time Python reference.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .._keys import dense_ids, distinct
from ..model import Capture
from . import _machine_scan as _bm
from .events import MACHINE_COLUMNS, SECTOR, TA, TC_PC, REMAPPER_MAJORS

NONE = _bm.NONE


def _dense_ids(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values in order of first appearance, index of each value among them)."""
    ids, first = dense_ids(values)
    return values[first], ids

KIND = np.full(256, _bm.K_OTHER, np.int8)          # what each action code is to the machine

for _letter, _kind in (("Q", _bm.K_Q), ("G", _bm.K_G), ("S", _bm.K_S), ("I", _bm.K_I), ("M", _bm.K_M),
                       ("F", _bm.K_M), ("D", _bm.K_D), ("C", _bm.K_C), ("A", _bm.K_A), ("R", _bm.K_R)):
    KIND[TA[_letter]] = _kind


def event_columns(capture: Capture) -> dict[str, np.ndarray]:
    """MACHINE_COLUMNS of a block capture: handed over by the binary reader, else from the
    events frame."""
    if "events" in capture.columns:
        return capture.columns["events"]
    events = capture.frames["events"]
    return {name: events[name].fill_null(0).to_numpy().astype(dtype, copy=False)
            for name, dtype in MACHINE_COLUMNS.items()}


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
