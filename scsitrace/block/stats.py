"""btt's statistics of the block layer: every stage's samples added up (count, min, max,
total) per device, per process and over all devices (by the streaming machine,
native/src/block/machine.rs); the stage tables (btt's avg_info), Device Overhead, and the
btt profile's percentage table."""
from __future__ import annotations

import numpy as np
import polars as pl

from .._native.block import Run
from ..stats import STAT, from_totals
from ..tables import percent_table
from .events import dev_name

# stage_totals(): what it adds up, per stage name (STAT_NAMES) and group: count, min, max, sum
T_COUNT, T_MIN, T_MAX, T_SUM = range(4)

# the stage names of the tables, in btt's order; Q2C and Q2A of md/dm devices are kept apart
# (native/src/block/machine.rs adds them up in this order)
STAT_NAMES = ("Q2Qdm", "Q2Adm", "Q2Cdm", "Q2Q", "Q2A", "Q2G", "S2G", "G2I", "Q2M", "I2D", "M2D", "D2C", "Q2C")
Q2Q_NAME, Q2QDM_NAME = STAT_NAMES.index("Q2Q"), STAT_NAMES.index("Q2Qdm")
STAGE_ORDER = STAT_NAMES
JSON_STAGES = ("Q2Q", "Q2G", "G2I", "Q2M", "I2D", "D2C", "Q2C")
OVERHEAD = ("Q2G", "G2I", "Q2M", "I2D", "D2C")
STATS = {"device": pl.Utf8, "name": pl.Utf8, **STAT}           # btt's avg_info per device and "all"
PROCESS_STATS = {"process": pl.Utf8, "pid": pl.Int64, "name": pl.Utf8, **STAT}


def stage_totals(run: Run) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """btt's avg_info of every stage name per device, per process and over all devices, as the
    machine added them up: three (len(STAT_NAMES), groups, 4) arrays (last axis T_COUNT,
    T_MIN, T_MAX, T_SUM)."""
    n_dev, n_pid = len(run.devices), len(run.pids)
    return (run.per_dev.reshape(len(STAT_NAMES), n_dev, 4), run.per_pid.reshape(len(STAT_NAMES), n_pid, 4),
            run.overall.reshape(len(STAT_NAMES), 1, 4))


def _stat_rows(totals: np.ndarray, group: int):
    """{name, STAT} of one group's stages with samples, in btt's order (no percentiles: the
    samples were added up, not kept)."""
    for k, name in enumerate(STAT_NAMES):
        n, lo, hi, total = (int(totals[k, group, field]) for field in (T_COUNT, T_MIN, T_MAX, T_SUM))
        if n:
            yield {"name": name, **from_totals(n, lo, hi, total)}


def stage_stats(run: Run, totals) -> pl.DataFrame:
    """btt's avg_info per (device, stage) and for device "all": n, min, avg, max, total."""
    per_dev, _, overall = totals
    rows = [{"device": dev_name(int(dev)), **row}
            for k, dev in sorted(enumerate(run.devices), key=lambda kd: _dev_sort(dev_name(int(kd[1]))))
            for row in _stat_rows(per_dev, k)]
    rows += [{"device": "all", **row} for row in _stat_rows(overall, 0)]
    return pl.DataFrame(rows, schema=STATS)


def stage_table(stats: pl.DataFrame) -> pl.DataFrame:
    """The `stages` table: stage_stats, plus the seven JSON_STAGES with n = 0 for every device
    (and "all") where they have no samples."""
    have = set(stats.select("device", "name").iter_rows())
    devices = sorted(set(stats["device"].to_list()) - {"all"}, key=_dev_sort) + ["all"]
    missing = [{"device": dev, "name": name, "n": 0, "total_ns": 0}
               for dev in devices for name in JSON_STAGES if (dev, name) not in have]
    return pl.concat([stats, pl.DataFrame(missing, schema=STATS)]) if missing else stats


def process_stats(run: Run, names: dict, totals) -> pl.DataFrame:
    """btt's per-process avg_info (btt -A "Per Process"): samples grouped by the pid that queued
    the bio, named by its command."""
    per_pid = totals[1]
    rows = [{"process": names.get(int(pid), str(int(pid))), "pid": int(pid), **row}
            for k, pid in enumerate(run.pids) for row in _stat_rows(per_pid, k)]
    order = {name: k for k, name in enumerate(STAGE_ORDER)}
    rows.sort(key=lambda r: (order[r["name"]], r["process"], r["pid"]))
    return pl.DataFrame(rows, schema=PROCESS_STATS)


def overhead(stats: pl.DataFrame) -> pl.DataFrame:
    """btt's Device Overhead: each stage's total as % of Q2C's, per device and Overall."""
    per = {(r["device"], r["name"]): r for r in stats.filter(pl.col("device") != "all").iter_rows(named=True)}
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
    """Profile "btt": each stage's total as a percentage of Q2C's, over the devices with Q2C
    time (the Overall Device Overhead row); normalized = stage total / I/Os completed."""
    counted = overhead(stats).filter(pl.col("device") != "Overall")["device"].to_list()
    per = stats.filter(pl.col("device").is_in(counted))
    totals = dict(per.group_by("name").agg(pl.col("total_ns").sum()).iter_rows())
    return percent_table(totals, OVERHEAD, int(totals.get("Q2C", 0)), n_done, base="q2c")
