"""The block layer's analysis: filters, the stage machine, then its tables, with the
independent passes overlapped in a worker thread."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import polars as pl

from .._keys import distinct
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES, latency_tables
from ._machine_scan import NONE
from .events import dev_name
from .machine import _Events, _Queued, _finish, _run_machine, event_columns
from .stats import OVERHEAD, _btt_categories, overhead, process_stats, stage_stats, stage_table, stage_totals
from .tables import (busy_runs, busy_segments, device_counts, device_table, event_counts, ios_frame,
                     process_table, queue_depth, size_histogram, TABLES)


def _filtered(cols: dict[str, np.ndarray], options) -> dict[str, np.ndarray]:
    """--device keeps that device's events; --window keeps events inside the window (btt -t/-T).
    A device the trace lacks, or a window outside it, is a usage error saying what it has."""
    for flag, value in (("--target", options.target), ("--lun", options.lun)):
        if value is not None:
            refuse(flag, "block", "blktrace records devices (--device MAJOR,MINOR), not SCSI targets or LUNs")
    if len(cols["t_ns"]):
        check_window(options.window, int(cols["t_ns"].min()), int(cols["t_ns"].max()))
    keep = None
    if options.device is not None:
        keep = cols["device"] == options.device
        if not keep.any():
            check_found("--device", dev_name(options.device), [dev_name(int(d)) for d in distinct(cols["device"])])
    lo, hi = options.window or (None, None)
    for bound, inside in ((lo, np.greater_equal), (hi, np.less_equal)):
        if bound is not None:
            mask = inside(cols["t_ns"], bound)
            keep = mask if keep is None else keep & mask
    return cols if keep is None else {name: col[keep] for name, col in cols.items()}


def analyze(capture: Capture, options) -> Analysis:
    cols = _filtered(event_columns(capture), options)
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
        if options.pids is not None:
            keep = np.isin(requests.pid, _pid_set(options.pids, names))
            if not keep.any():
                check_found("--pid", ",".join(options.pids), [names.get(int(p), str(int(p))) for p in distinct(requests.pid)])
            requests = requests.subset(keep)
        adding = pool.submit(stage_totals, run, keep)
        runs = busy_runs(requests)
        devices = device_table(counts, depth, requests, ev.devices, runs, end_ns - start_ns)
        processes = process_table(requests, len(run["pids"]), run["pids"], names)
        totals = adding.result()
    stats = stage_stats(run, totals)
    elapsed = end_ns - start_ns
    n_q2c = int(stats.filter((pl.col("device") == "all") & (pl.col("name") == "Q2C"))["n"].sum())
    tables = {"stages": stage_table(stats), "events": event_counts(ev), "overhead": overhead(stats),
              "devices": devices, "processes": processes, "process_stages": process_stats(run, names, totals),
              "size_histogram": sizes, **latency_tables(_latencies(requests, run["dm"]))}
    notes = ["block layer: stage times as btt computes them; Device Overhead percentages are of Q2C "
             "time (Q2G+G2I and Q2M are alternatives, so they need not sum to 100)"]
    if keep is not None:
        notes.append("--pid: samples of I/Os queued by the given process(es) only")
    if options.window is not None:
        notes.append("--window: the events inside the window only (btt -t/-T); elapsed time is from the first "
                     "to the last of them")
    data_bytes = int(requests.bytes[requests.done].sum())
    completions = int(tables["events"].filter(pl.col("letter") == "C")["records"].sum())
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
        declared=(*TABLES, *LATENCY_TABLES), tables=tables)


def _pid_set(items, names: dict) -> list[int]:
    """Pids of the given pids or process names (core.parse_pids)."""
    out = []
    for item in items:
        if item.isdigit():
            out.append(int(item))
            continue
        matches = [p for p, n in names.items() if n == item]
        if not matches:
            raise UsageError(f"--pid {item!r}: no such pid or process name in the trace")
        out.extend(matches)
    return out


def _latencies(requests, dm: np.ndarray) -> dict[str, np.ndarray]:
    """Q2C and D2C of every completed request (btt's samples: one per completed Q), md and
    device-mapper devices apart as btt keeps them (Q2Cdm, D2Cdm), when there are any."""
    on_dm = dm[requests.dev] if len(dm) else np.zeros(len(requests.q), bool)
    out = {}
    for suffix, which in (("", ~on_dm), ("dm", on_dm)):
        if suffix and not which.any():
            continue
        out["Q2C" + suffix] = requests.q2c[requests.done & which]
        out["D2C" + suffix] = requests.d2c[(requests.d2c != NONE) & which]
    return out
