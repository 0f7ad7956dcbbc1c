"""The block layer's tables besides btt's statistics: per device (counts, bytes, busy time,
queue depth, seeks), per process, dispatched request sizes, record counts, the I/O table and
the busy/idle segments."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import schema
from .._jit import compiled, inlined, no_refcount
from .._keys import distinct
from ._machine_scan import K_C, K_D, K_R, NONE
from .events import ACT_LETTERS, SECTOR, TA, TC, TC_SHIFT, dev_name, rwbs_expr
from .machine import _Events, _Requests
from ..tables import Table, mapping
from .stats import PROCESS_STATS, STATS, T_COUNT, T_MAX, T_SUM, group_totals


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
    d = ev.of(K_D)
    d_seek, d_has = seeks(d, ev.dev, ev.sector, ev.bytes, len(ev.devices))
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
    done = group_totals(req.dev, req.bytes, req.done, len(devices))
    writes = group_totals(req.dev, req.q, req.done & ((req.action & (TC["WRITE"] << TC_SHIFT)) != 0), len(devices))
    seen = done[:, T_COUNT] > 0
    per = pl.DataFrame({"device": devices[seen].astype(np.uint32), "ios_completed": done[seen, T_COUNT],
                        "bytes": done[seen, T_SUM], "writes": writes[seen, T_COUNT]})
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
    seen, peak, held = depth_totals(ev.kind, ev.dev, ev.t, len(ev.devices), end_ns)
    span = max(end_ns - start_ns, 1)
    return pl.DataFrame({"device": ev.devices[seen].astype(np.uint32), "max_depth": peak[seen],
                         "avg_depth": held[seen] / span},
                        schema={"device": pl.UInt32, "max_depth": pl.Int64, "avg_depth": pl.Float64})


def process_table(req: _Requests, n_pids: int, pids: np.ndarray, names: dict) -> pl.DataFrame:
    """Per process (the name of the Q's pid): I/Os queued and completed, bytes, Q2C and D2C."""
    queued = group_totals(req.pid_id, req.q, np.ones(len(req.q), bool), n_pids)
    done = group_totals(req.pid_id, req.bytes, req.done, n_pids)
    q2c = group_totals(req.pid_id, req.q2c, req.done, n_pids)
    d2c = group_totals(req.pid_id, req.d2c, req.d2c != NONE, n_pids)
    seen = queued[:, T_COUNT] > 0
    per = pl.DataFrame({
        "pid": pids[seen], "queued": queued[seen, T_COUNT], "ios_completed": done[seen, T_COUNT],
        "bytes": done[seen, T_SUM], "q2c_total": q2c[seen, T_SUM],
        "q2c_max_ns": pl.Series(q2c[seen, T_MAX]).set(pl.Series(q2c[seen, T_COUNT] == 0), None),
        "d2c_total": d2c[seen, T_SUM], "d2c_n": d2c[seen, T_COUNT]})
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
    counts, writes = size_buckets(ev.of(K_D), ev.bytes, ev.action, TC["WRITE"] << TC_SHIFT)
    k = np.flatnonzero(counts)
    return pl.DataFrame({"bytes_max": np.left_shift(1, k).astype(np.int64), "requests": counts[k],
                         "writes": writes[k], "reads_other": counts[k] - writes[k]})


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


def event_counts(ev: _Events) -> pl.DataFrame:
    """Records per blkparse action letter (T = timer unplug, blkparse's UT), as blkparse counts."""
    per_code = ev.all_counts.sum(axis=0)
    return pl.DataFrame([(ACT_LETTERS[min(code, len(ACT_LETTERS) - 1)], int(n)) for code, n in enumerate(per_code)
                         if n], schema=EVENTS_TABLE.schema, orient="row")


# ---------------------------------------------------------------- compiled passes

@compiled
def depth_totals(kind, dev, t, n_dev, end_ns):
    """Requests in the driver per device: +1 at each D, -1 at each C or R (as blkparse's depth
    counts), in processing order. Returns per device: whether it has such events, the maximum,
    and the sum of depth x time held (up to end_ns)."""
    seen = np.zeros(n_dev, np.bool_)
    depth = np.zeros(n_dev, np.int64)
    peak = np.full(n_dev, np.iinfo(np.int64).min, np.int64)
    held = np.zeros(n_dev, np.int64)
    last = np.zeros(n_dev, np.int64)
    _depths(kind, dev, t, seen, depth, peak, held, last)
    for d in range(n_dev):
        held[d] += depth[d] * (max(end_ns, last[d]) - last[d]) if seen[d] else 0
    return seen, peak, held


@no_refcount
def _depths(kind, dev, t, seen, depth, peak, held, last):
    for i in range(kind.shape[0]):
        k = kind[i]
        if k == K_D or k == K_C or k == K_R:
            d = dev[i]
            held[d] += depth[d] * (t[i] - last[d]) if seen[d] else 0
            depth[d] += 1 if k == K_D else -1
            peak[d] = max(peak[d], depth[d])
            last[d] = t[i]
            seen[d] = True


@compiled
def seeks(events, dev, sector, nbytes, n_dev):
    """Per event: |its start sector - the end sector of the previous event of its device|, and
    whether it has such a previous event."""
    seek, has = np.zeros(events.shape[0], np.int64), np.zeros(events.shape[0], np.bool_)
    _seeks(events, dev, sector, nbytes, np.zeros(n_dev, np.int64), np.zeros(n_dev, np.bool_), seek, has)
    return seek, has


@no_refcount
def _seeks(events, dev, sector, nbytes, end, seen, seek, has):
    for j in range(events.shape[0]):
        i = events[j]
        d = dev[i]
        seek[j] = abs(sector[i] - end[d])
        has[j] = seen[d]
        end[d] = sector[i] + nbytes[i] // SECTOR
        seen[d] = True


@compiled
def size_buckets(events, nbytes, action, write_bit):
    """Per power of two k (0..63): the events (indexes) whose byte count rounds up to 2**k,
    and how many of them are writes (action & write_bit)."""
    counts, writes = np.zeros(64, np.int64), np.zeros(64, np.int64)
    _size_buckets(events, nbytes, action, write_bit, counts, writes)
    return counts, writes


@no_refcount
def _size_buckets(events, nbytes, action, write_bit, counts, writes):
    last, k = np.int64(1), 0
    for j in range(events.shape[0]):
        i = events[j]
        n = max(nbytes[i], np.int64(1))
        k = _log2_up(n) if n != last else k
        last = n
        counts[k] += 1
        writes[k] += 1 if action[i] & write_bit else 0


@inlined
def _log2_up(n):
    """The smallest k with 2**k >= n (n >= 1)."""
    k = 0
    while (np.int64(1) << k) < n:
        k += 1
    return k


# ---------------------------------------------------------------- declared tables (JSON order)

_STAT_JSON = ("n", "min_ns", "avg_ns", "max_ns", "total_ns")
STAGES_TABLE = Table("stages", STATS, "btt's stage statistics per device and all devices (btt -A avg_info)",
               json_columns=("device", "name", *_STAT_JSON))
EVENTS_TABLE = Table("events", {"letter": pl.Utf8, "records": pl.Int64},
               "records per blkparse action letter (T = timer unplug)", json=mapping("letter", "records"))
OVERHEAD_TABLE = Table("overhead", {"device": pl.Utf8, **{n: pl.Float64 for n in ("Q2G", "G2I", "Q2M", "I2D", "D2C")}},
                 "btt's Device Overhead: each stage's total as % of Q2C, per device and Overall")
DEVICES_TABLE = Table("devices", {
    "device": pl.Utf8, "queued": pl.Int64, "dispatched": pl.Int64, "merges": pl.Int64, "requeues": pl.Int64,
    "seek_mean_sectors": pl.Float64, "seek_median_sectors": pl.Float64, "seeks": pl.Int64,
    "ios_completed": pl.Int64, "bytes": pl.Int64, "writes": pl.Int64, "max_depth": pl.Int64,
    "avg_depth": pl.Float64, "busy_ns": pl.Int64, "busy_percent": pl.Float64, "iops": pl.Float64,
    "mib_s": pl.Float64}, "per device: records, completions, bytes, busy time, queue depth, seeks, rates")
PROCESSES_TABLE = Table("processes", {
    "process": pl.Utf8, "queued": pl.Int64, "ios_completed": pl.Int64, "bytes": pl.Int64,
    "q2c_avg_ns": pl.Float64, "q2c_max_ns": pl.Int64, "d2c_avg_ns": pl.Float64},
    "per process that queued the I/O: queued, completed, bytes, Q2C and D2C")
PROCESS_STAGES_TABLE = Table("process_stages", PROCESS_STATS, "btt's stage statistics per process (btt -A Per Process)",
                       json_columns=("process", "pid", "name", *_STAT_JSON))
SIZE_HISTOGRAM_TABLE = Table("size_histogram", {"bytes_max": pl.Int64, "requests": pl.Int64, "writes": pl.Int64,
                                          "reads_other": pl.Int64},
                       "dispatched (D) request sizes in power-of-two buckets of bytes")
TABLES = (STAGES_TABLE, EVENTS_TABLE, OVERHEAD_TABLE, DEVICES_TABLE, PROCESSES_TABLE, PROCESS_STAGES_TABLE, SIZE_HISTOGRAM_TABLE)
