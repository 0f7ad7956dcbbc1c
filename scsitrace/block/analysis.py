"""The block layer's analysis: the streaming stage machine over the capture's event chunks
(filters applied as they stream), then its tables."""
from __future__ import annotations

import numpy as np
import polars as pl

from .._native.block import Run
from .. import bandwidth, series
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..model import KEEP_IOS, Analysis, Capture
from ..schema import DEVICE_PREFIX
from ..stats import HIST_EDGES_NS, LATENCY_TABLES, HISTOGRAM_SCHEMA, LATENCY_SCHEMA, stat_row
from .events import _rwbs, dev_name
from .machine import event_chunks, run as run_machine
from .stats import OVERHEAD, _btt_categories, overhead, process_stats, stage_stats, stage_table, stage_totals
from .tables import (busy_runs, errno_names, busy_segments, device_counts, device_table, event_counts, ios_frame,
                     process_table, queue_depth, size_histogram, TABLES)


def analyze(capture: Capture, options) -> Analysis:
    for flag, value in (("--target", options.target), ("--lun", options.lun)):
        if value is not None:
            refuse(flag, "block", "blktrace records devices (--device MAJOR,MINOR), not SCSI targets or LUNs")
    sink = options.ios_sink
    # process names come with the records (blktrace notify records): a streamed capture has them
    # all only at its end, so they are read first (one more pass, bounded) only when needed before
    names = _names(capture) if sink is not None or _pids_by_name(options.pids) else {}
    keep_pids = _pid_set(options.pids, names) if options.pids is not None else None
    origin = (options.window or (None, None))[0] or 0      # the series' bins count from the window's start
    over_time, collected = series.Series(origin), bandwidth.Collected()

    def rows_sink(rows: pl.DataFrame) -> None:
        if options.series:
            _add_series(over_time, rows)
            collected.add(ios_frame(rows, {}))
        if sink is not None:
            sink(ios_frame(rows, names), capture)

    run = run_machine(event_chunks(capture), device=options.device, window=options.window, pids=keep_pids,
                      rows_sink=rows_sink if options.series or sink is not None else None,
                      keep_rows=KEEP_IOS if options.rows else 0,
                      btt_compat=options.btt_compat)
    names = names or _names(capture)
    _check_filters(run, options, names)
    start_ns, end_ns = run.start_ns, run.end_ns
    elapsed = end_ns - start_ns
    totals = stage_totals(run)
    stats = stage_stats(run, totals)
    runs = busy_runs(run)
    n_q2c = int(stats.filter((pl.col("device") == "all") & (pl.col("name") == "Q2C"))["n"].sum())
    latency, latency_notes = _latency_tables(run)
    tables = {"stages": stage_table(stats), "events": event_counts(run), "overhead": overhead(stats),
              "devices": device_table(device_counts(run), queue_depth(run), run, elapsed),
              "processes": process_table(run, names), "process_stages": process_stats(run, names, totals),
              "size_histogram": size_histogram(run), **latency}
    series_tables, series_notes = over_time.tables(start_ns + elapsed - origin) if options.series else ({}, [])
    tables.update(series_tables)
    rows = run.rows          # the kept rows, held by the machine until a report reads them

    def kept(what: str) -> None:
        if not options.rows:
            raise RuntimeError(f"the {what} were not kept (core.Options.rows is False)")

    def ios() -> pl.DataFrame:
        kept("per-I/O rows")
        return ios_frame(pl.DataFrame(rows.columns()), names)

    def segments() -> pl.DataFrame:
        kept("busy runs")
        return busy_segments(runs, start_ns, _segments_end(run))
    series_notes += bandwidth.declare(tables, ios,
                                      thinned=run.rows_stride > 1, options=options,
                                      collected=collected if options.series else None)
    notes = ["block layer: stage times as btt computes them; Device Overhead percentages are of Q2C "
             "time (Q2G+G2I and Q2M are alternatives, so they need not sum to 100)"]
    if keep_pids is not None:
        notes.append("--pid: samples of I/Os queued by the given process(es) only")
    if options.window is not None:
        notes.append("--window: the events inside the window only (btt -t/-T); elapsed time is from the first "
                     "to the last of them")
    notes += latency_notes + _stream_notes(run) + series_notes + _pairing_notes(run, options.btt_compat)
    notes += _error_notes(run)
    done = int(run.done.sum())
    data_bytes = int(run.bytes.sum())
    completions = int(tables["events"].filter(pl.col("letter") == "C")["records"].sum())
    if completions and not run.kept_qs:   # e.g. a blkparse text of C events only
        data_bytes = None
        notes.append(f"{completions} completion (C) events and no queue (Q) events: the completions were "
                     "ignored (stages pair them with queued requests), so I/O counts, stage times and the "
                     "bandwidth are unknown")
    return Analysis(
        layer="block", capture=capture, elapsed_ns=elapsed, start_ns=start_ns,
        segments=segments, segment_targets=False,
        ios=ios, anomalies=capture.anomalies,
        ios_completed=done, data_bytes=data_bytes, ios_streamed=sink is not None,
        category_order={"btt": list(OVERHEAD)}, default_profile="btt",
        categories={"btt": _btt_categories(stats, n_q2c)}, notes=notes + list(capture.notes),
        source={"path": capture.path, "format": capture.format, "files": capture.meta.get("files")},
        declared=(*TABLES, *LATENCY_TABLES, *series.declared(options), *bandwidth.TABLES), tables=tables)


def _add_series(over_time: series.Series, rows: pl.DataFrame) -> None:
    """The machine's per-I/O rows (Q order) to the series: the completed ones, in flight from
    dispatch (D) to completion (C), as the devices table's queue depth counts them."""
    done = rows.filter(pl.col("c_t").is_not_null())
    if not done.height:
        return
    pick = {k: done[k].to_numpy() for k in ("q_t", "c_t", "bytes", "sector", "action", "device")}
    pick["d_t"] = done["d_t"].fill_null(-1).to_numpy()     # no D: no in-flight interval (a negative time)
    # blkparse's RWBS depends on the action's category bits and whether it moved bytes: a few pairs
    key = ((pick["action"].astype(np.int64) >> 16) & 0xFFFF) * 2 + (pick["bytes"] > 0)
    combos = np.flatnonzero(np.bincount(key, minlength=2))
    code_of = np.zeros(int(key.max()) + 1, np.int64)
    code_of[combos] = np.arange(len(combos))
    codes = code_of[key]
    names = [_rwbs(int(k // 2) << 16, bool(k % 2)) for k in combos]
    devices, device_codes = np.unique(pick["device"], return_inverse=True)
    device_ids = [f"{DEVICE_PREFIX['block']}:{dev_name(int(d))}" for d in devices]
    over_time.add(pick["q_t"], pick["c_t"], pick["bytes"], pick["c_t"] - pick["q_t"], pick["sector"],
                  (codes, names), flight=(pick["d_t"], pick["c_t"]), device=(device_codes, device_ids))


def _names(capture: Capture) -> dict:
    """pid -> process name, as the capture records them."""
    return dict(capture.frames["processes"].iter_rows()) if "processes" in capture.frames else {}


def _pids_by_name(pids) -> bool:
    return pids is not None and any(not p.isdigit() for p in pids)


def _check_filters(run: Run, options, names: dict) -> None:
    """A window outside the trace, a device or pids it lacks: a usage error saying what it has."""
    if run.all_t_min is not None:
        check_window(options.window, run.all_t_min, run.all_t_max)
    if options.device is not None and options.device not in run.all_devices:
        check_found("--device", dev_name(options.device), [dev_name(int(d)) for d in run.all_devices])
    if options.pids is not None and not run.kept_qs:
        check_found("--pid", ",".join(options.pids), [names.get(int(p), str(int(p))) for p in run.pids])


def _error_notes(run: Run) -> list[str]:
    """Requests whose completion (C) carried an error: how many, by errno."""
    if not len(run.errors):
        return []
    counts = pl.DataFrame(run.errors) \
        .with_columns(errno_names(pl.col("error")).alias("name")).sort("n", "name", descending=[True, False])
    listed = ", ".join(f"{name} x{n:,}" for name, n in counts.select("name", "n").iter_rows())
    return [f"{int(counts['n'].sum()):,} requests completed with an error (the C event's error field: {listed}): "
            "their status is ERROR; they count as completed I/Os in every figure, as in btt"]


def _pairing_notes(run: Run, btt_compat: bool) -> list[str]:
    """Events the trace alone cannot tie to one request in flight (requests meeting on the
    same sectors), and how they were paired."""
    ranges, same = run.ambiguous, run.ambiguous_same
    if btt_compat:
        return ["--btt-compat: every D and C applies to every live bio its range holds, and a Q at the start "
                "sector of a live one replaces it, as btt does (docs/blktrace.md)"]
    notes = []
    if ranges:
        notes.append(f"{ranges:,} D/C events met bios of other requests in flight inside their range (requests "
                     "meeting on the same sectors): each was applied to its own request only (the bios starting "
                     "where it starts, or merged into it; of several at that start, the oldest not yet issued "
                     "for a D, the oldest issued for a C); btt applies it to all of them (--btt-compat)")
    if same:
        notes.append(f"{same:,} G/S/I/M/A events found several bios in flight at their start sector: each went to "
                     "the oldest without that event yet; btt keeps only the newest Q there (--btt-compat)")
    return notes


def _segments_end(run: Run) -> int:
    """Where the segments end: the trace's end, or the last busy run kept when more were dropped."""
    if run.runs_dropped and len(run.run_end):
        return int(run.run_end.max())
    return run.end_ns


def _stream_notes(run: Run) -> list[str]:
    """What the bounded memory of the streamed analysis cost, when it cost anything."""
    notes = []
    if run.rows_stride > 1:
        notes.append(f"ios: {len(run.rows):,} of the per-I/O rows kept for the reports (every "
                     f"{run.rows_stride}th I/O; --ios FILE writes them all)")
    if run.runs_dropped:
        notes.append(f"segments: the first {len(run.run_start):,} busy runs only ({run.runs_dropped:,} more "
                     "counted in busy time but not listed)")
    if run.runs_forced:
        notes.append(f"busy time: {run.runs_forced:,} busy runs closed while older requests were still in "
                     "flight (more than 65,536 runs waiting on one device); a later completion overlapping "
                     "one of them counts its overlap twice")
    if run.rows_out_of_order:
        notes.append(f"ios: {run.rows_out_of_order:,} rows may be out of I/O order: written when they finished, "
                     "their place given up while more than 262,144 finished rows waited behind them")
    if not run.seek_median_exact:
        notes.append("devices: the median seek of a device with more than 2,097,152 seeks is read from a "
                     "histogram (at most 0.1 % low)")
    return notes


def _latency_tables(run: Run) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """The latency tables (Q2C and D2C of every completed request, btt's samples; md and
    device-mapper devices apart, as btt keeps them, when there are any) and notes on
    percentiles read from a histogram."""
    lat = {"Q2C": run.q2c, "D2C": run.d2c, "Q2Cdm": run.q2c_dm, "D2Cdm": run.d2c_dm}
    names = ["Q2C", "D2C"] + (["Q2Cdm", "D2Cdm"] if run.any_kept_dm else [])
    rows, hist, notes = [], [], []
    for name in names:
        stat = lat[name].record()
        record = stat_row(stat)
        if not stat.exact:
            notes.append(f"latency: {name} percentiles from a histogram of {record['n']:,} samples (at most 0.1 % "
                         "below the exact ones; exact up to 2,097,152 samples)")
        rows.append({"name": name, **record})
        hist += [(name, HIST_EDGES_NS[i] if i < len(HIST_EDGES_NS) else None, int(c))
                 for i, c in enumerate(lat[name].histogram()) if c]
    return ({"latency": pl.DataFrame(rows, schema=LATENCY_SCHEMA),
             "latency_histogram": pl.DataFrame(hist, schema=HISTOGRAM_SCHEMA, orient="row")}, notes)


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

