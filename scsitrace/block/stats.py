"""btt's statistics of the block layer: every stage's samples added up (count, min, max,
total) per device, per process and over all devices in one compiled pass; the stage
tables (btt's avg_info), Device Overhead, and the btt profile's percentage table."""
from __future__ import annotations

import numpy as np
import polars as pl

from .._jit import compiled, inlined, no_refcount
from ..stats import STAT, from_totals
from ..tables import percent_table
from ._machine_scan import NONE, STAGES, _tdelta
from .machine import _dense_ids
from .events import dev_name

# stage_totals(): what it adds up, per stage name (STAT_NAMES) and group: count, min, max, sum
T_COUNT, T_MIN, T_MAX, T_SUM = range(4)

# the stage names of the tables, in btt's order; Q2C and Q2A of md/dm devices are kept apart
STAT_NAMES = ("Q2Qdm", "Q2Adm", "Q2Cdm", "Q2Q", "Q2A", "Q2G", "S2G", "G2I", "Q2M", "I2D", "M2D", "D2C", "Q2C")
Q2Q_NAME, Q2QDM_NAME = STAT_NAMES.index("Q2Q"), STAT_NAMES.index("Q2Qdm")
STAGE_ORDER = STAT_NAMES
JSON_STAGES = ("Q2Q", "Q2G", "G2I", "Q2M", "I2D", "D2C", "Q2C")
OVERHEAD = ("Q2G", "G2I", "Q2M", "I2D", "D2C")
STATS = {"device": pl.Utf8, "name": pl.Utf8, **STAT}           # btt's avg_info per device and "all"
PROCESS_STATS = {"process": pl.Utf8, "pid": pl.Int64, "name": pl.Utf8, **STAT}
_NAME_OF = np.array([STAT_NAMES.index(name) for name in STAGES], np.int64)
_DM_NAME_OF = np.array([STAT_NAMES.index(name + "dm" if name in ("Q2C", "Q2A") else name)
                        for name in STAGES], np.int64)


def stage_totals(run: dict, keep_q: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Count, min, max and sum of every stage's samples per device, per process and over all
    (stage_totals), of the Qs keep_q selects (all by default)."""
    ev, qi = run["ev"], run["qi"]
    stage, q, ns = run["raw_samples"]
    keep = np.ones(len(qi), bool) if keep_q is None else keep_q
    q_dev, q_pid, n_pid = ev.dev[qi], run["pid_of_q"], max(len(run["pids"]), 1)
    pair = q_dev.astype(np.int64) * n_pid + q_pid                 # (device, process) of each Q
    if len(ev.devices) * n_pid <= PAIRS_DIRECT:
        pairs, q_pair = np.arange(len(ev.devices) * n_pid), pair
    else:
        pairs, q_pair = _dense_ids(pair)
    return _stage_totals(stage, q, ns, _NAME_OF, _DM_NAME_OF, ev.t[qi], q_dev, q_pid, q_pair, pairs // n_pid,
                            pairs % n_pid, run["dm"], keep, len(STAT_NAMES), len(ev.devices), len(run["pids"]))

PAIRS_DIRECT = 4096          # (device, process) pairs indexed directly up to this many, else only those present


@compiled
def _stage_totals(stage, qs, vals, name_of, dm_name_of, q_t, q_dev, q_pid, q_pair, pair_dev, pair_pid, dm, keep, n_names,
                 n_dev, n_pid):
    """btt's avg_info, per stage name and device, process, and over all devices, from the
    machine's samples (stage, Q, ns; the stage's name index is name_of[stage], or
    dm_name_of[stage] for a Q of an md/dm device) and the Q2Q gaps between consecutive Qs (of
    any device for "all", of the device, of the process). Only the samples of Qs with keep[q].
    The samples are added up once, per (device, process) pair of their Q (q_pair; the pair's
    device and process: pair_dev, pair_pid), and the pairs' totals combined per device, per
    process and over all. Returns three (n_names, groups, 4) arrays: per device, per process,
    all (one group); the last axis holds T_COUNT, T_MIN, T_MAX, T_SUM."""
    per_pair = _new_totals(n_names, pair_dev.shape[0])
    _add_samples(stage, qs, vals, name_of, dm_name_of, q_dev, q_pair, dm, keep, per_pair)
    per_dev = _new_totals(n_names, n_dev)
    per_pid = _new_totals(n_names, n_pid)
    overall = _new_totals(n_names, 1)
    _combine(per_pair, pair_dev, per_dev)
    _combine(per_pair, pair_pid, per_pid)
    _combine(per_pair, np.zeros(pair_dev.shape[0], np.int64), overall)
    _add_q2q(q_t, q_dev, q_pid, dm, keep, np.full(n_dev, NONE, np.int64), np.full(n_pid, NONE, np.int64),
             per_dev, per_pid, overall)
    return per_dev, per_pid, overall


@compiled
def _new_totals(n_names, n_groups):
    out = np.zeros((n_names, n_groups, 4), np.int64)
    out[:, :, T_MIN] = np.iinfo(np.int64).max
    out[:, :, T_MAX] = np.iinfo(np.int64).min
    return out


@inlined
def _add(totals, name, group, v):
    totals[name, group, T_COUNT] += 1
    totals[name, group, T_MIN] = min(totals[name, group, T_MIN], v)
    totals[name, group, T_MAX] = max(totals[name, group, T_MAX], v)
    totals[name, group, T_SUM] += v


@no_refcount
def _add_samples(stage, qs, vals, name_of, dm_name_of, q_dev, q_group, dm, keep, totals):
    for j in range(stage.shape[0]):
        q = qs[j]
        name = dm_name_of[stage[j]] if dm[q_dev[q]] else name_of[stage[j]]
        if keep[q]:
            _add(totals, name, q_group[q], vals[j])


@no_refcount
def _combine(parts, group_of, totals):
    """Add the totals of each part (axis 1 of parts) to those of its group (group_of[part])."""
    for name in range(parts.shape[0]):
        for part in range(parts.shape[1]):
            g = group_of[part]
            totals[name, g, T_COUNT] += parts[name, part, T_COUNT]
            totals[name, g, T_MIN] = min(totals[name, g, T_MIN], parts[name, part, T_MIN])
            totals[name, g, T_MAX] = max(totals[name, g, T_MAX], parts[name, part, T_MAX])
            totals[name, g, T_SUM] += parts[name, part, T_SUM]


@no_refcount
def _add_q2q(q_t, q_dev, q_pid, dm, keep, last_dev, last_pid, per_dev, per_pid, overall):
    """Q2Q samples: each Q against the Q before it (overall), the last Q of its device, of its
    process; the name index is Q2Q_NAME, or Q2QDM_NAME for md/dm devices."""
    for q in range(q_t.shape[0]):
        d, p = q_dev[q], q_pid[q]
        name = Q2QDM_NAME if dm[d] else Q2Q_NAME
        if keep[q] and q > 0:
            _add(overall, name, 0, _tdelta(q_t[q - 1], q_t[q]))
        if keep[q] and last_dev[d] != NONE:
            _add(per_dev, name, d, _tdelta(q_t[last_dev[d]], q_t[q]))
        if keep[q] and last_pid[p] != NONE:
            _add(per_pid, name, p, _tdelta(q_t[last_pid[p]], q_t[q]))
        last_dev[d] = q
        last_pid[p] = q


@compiled
def group_totals(ids, vals, mask, n_groups):
    """Per group 0..n_groups-1 (ids), of the vals where mask: count, min, max, sum (last axis:
    T_COUNT, T_MIN, T_MAX, T_SUM)."""
    out = _new_totals(1, n_groups)
    _group_totals(ids, vals, mask, out)
    return out[0]


@no_refcount
def _group_totals(ids, vals, mask, out):
    for i in range(ids.shape[0]):
        if mask[i]:
            _add(out, 0, ids[i], vals[i])


def _stat_rows(totals: np.ndarray, group: int):
    """{name, STAT} of one group's stages with samples, in btt's order (no percentiles: the
    samples were added up, not kept)."""
    for k, name in enumerate(STAT_NAMES):
        n, lo, hi, total = (int(totals[k, group, field]) for field in (T_COUNT, T_MIN, T_MAX, T_SUM))
        if n:
            yield {"name": name, **from_totals(n, lo, hi, total)}


def stage_stats(run: dict, totals) -> pl.DataFrame:
    """btt's avg_info per (device, stage) and for device "all": n, min, avg, max, total."""
    per_dev, _, overall = totals
    rows = [{"device": dev_name(int(dev)), **row}
            for k, dev in sorted(enumerate(run["ev"].devices), key=lambda kd: _dev_sort(dev_name(int(kd[1]))))
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


def process_stats(run: dict, names: dict, totals) -> pl.DataFrame:
    """btt's per-process avg_info (btt -A "Per Process"): samples grouped by the pid that queued
    the bio, named by its command."""
    per_pid = totals[1]
    rows = [{"process": names.get(int(pid), str(int(pid))), "pid": int(pid), **row}
            for k, pid in enumerate(run["pids"]) for row in _stat_rows(per_pid, k)]
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
    return percent_table(totals, OVERHEAD, int(totals.get("Q2C", 0)), n_done)
