"""The btt stage machine (block layer), streamed: events in processing order, read as chunks
(dicts of MACHINE_COLUMNS numpy arrays, any size), run through `scsitrace._native.block.Machine`,
which carries the machine's state across chunk edges (live Qs by (device, sector), per-device
and per-process accumulators, requests in flight for the queue depth and the busy runs), so
memory is bounded by what is in flight, not by the trace. The rules are btt 1.2's
(docs/blktrace.md, "The stage machine"):

- A queued bio (Q) is tracked by (device, start sector); a later Q at the same start sector
  replaces it. G, S, I, M/F find their Q by that key, else the live Q containing their sector.
- Every D applies to the live Qs its range contains (a request carries its merged bios):
  I2D from the Q's last I, or M2D from its last merge.
- Every C completes the live Qs its range contains: Q2C, and D2C from the Q's last D.
- Every sample is `to - from`, or 1 ns when `to <= from` (btt's tdelta).
- Events of a device before its first Q or A are ignored (btt's pre-culling); Q G S I M D C
  records with zero bytes and BLK_TC_PC records are ignored; a requeue (R) is counted.

tests/test_blktrace_model.py checks it against a one-event-at-a-time Python reference, over
any chunking.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np
import polars as pl

from .._native import block as _native
from ..model import KEEP_IOS, Capture
from ..streams import prefetched
from .events import MACHINE_COLUMNS

CHUNK = 1 << 20            # events per chunk when the capture hands over whole columns


@dataclass(frozen=True)
class MachineOptions:
    """What a `_native.block.Machine` keeps and hands out (read by name there): only `device`
    (a dev_t), events with lo <= t_ns <= hi, the Qs of `pids`; `emit_rows`: hand every
    finished per-I/O row out (take_rows); `keep_rows`: rows (and busy runs) kept for the
    reports, evenly thinned beyond (0: none, for a run whose reports read none); `pending_runs`, `ready_rows`: its buffer bounds (None: its
    own), for tests of what happens past them; `btt_compat`: btt's pairing."""
    device: int | None = None
    lo: int | None = None
    hi: int | None = None
    pids: list[int] | None = None
    emit_rows: bool = False
    keep_rows: int = KEEP_IOS
    pending_runs: int | None = None
    ready_rows: int | None = None
    btt_compat: bool = False


def event_columns(capture: Capture) -> dict[str, np.ndarray]:
    """MACHINE_COLUMNS of a block capture's whole event table: handed over by the binary
    reader, else from the events frame."""
    if "events" in capture.columns:
        return capture.columns["events"]
    events = capture.frames["events"]
    return {name: events[name].fill_null(0).to_numpy().astype(dtype, copy=False)
            for name, dtype in MACHINE_COLUMNS.items()}


def event_chunks(capture: Capture, size: int = CHUNK) -> Iterator[dict[str, np.ndarray]]:
    """The events as MACHINE_COLUMNS chunks in processing order: the capture's own `chunks()`
    when its reader streams, else its whole columns sliced."""
    if capture.chunks is not None:
        yield from capture.chunks()
        return
    yield from sliced(event_columns(capture), size)


def sliced(cols: dict[str, np.ndarray], size: int) -> Iterator[dict[str, np.ndarray]]:
    """Whole columns as chunks of `size` events (views, no copy)."""
    n = len(cols["t_ns"])
    for lo in range(0, n, max(size, 1)):
        yield {name: col[lo:lo + size] for name, col in cols.items()}


def run(chunks, *, device: int | None = None, window=None, pids: list[int] | None = None,
        rows_sink=None, keep_rows: int = KEEP_IOS, bounds: dict | None = None,
        btt_compat: bool = False) -> _native.Run:
    """The machine over a stream of chunks -> what the tables are built from (the Machine's
    `finish`, a `_native.block.Run`; its `rows`, the per-I/O rows kept for the reports, stay in
    the machine's `KeptRows` until `.columns()` reads them). rows_sink(frame), if given, gets
    each batch of finished per-I/O rows (a polars frame, null where a row has no value, in Q
    order) as they are produced. The chunks are read ahead in a worker thread while the
    machine (GIL released) runs the current one. `bounds`: the machine's buffer bounds
    (pending_runs, ready_rows), for tests of what happens past them. `btt_compat`: btt's
    pairing where requests in flight meet on the same sectors (else each D and C goes to its
    own request; `ambiguous` counts where that differs)."""
    lo, hi = window or (None, None)
    m = _native.Machine(MachineOptions(device=device, lo=lo, hi=hi, pids=pids, emit_rows=rows_sink is not None,
                                       keep_rows=keep_rows, btt_compat=btt_compat, **(bounds or {})))
    for chunk in prefetched(chunks):
        m.feed({name: np.ascontiguousarray(chunk[name], dtype) for name, dtype in MACHINE_COLUMNS.items()})
        if rows_sink is not None:
            _hand_rows(m, rows_sink)
    out = m.finish()
    if rows_sink is not None:
        _hand_rows(m, rows_sink)
    return out


def _hand_rows(m, rows_sink) -> None:
    rows = m.take_rows()
    if rows is not None:
        rows_sink(pl.DataFrame(rows))
