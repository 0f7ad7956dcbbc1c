"""The block layer's tables besides btt's statistics: per device (counts, bytes, busy time,
queue depth, seeks), per process, dispatched request sizes, record counts, the I/O table and
the busy/idle segments."""
from __future__ import annotations

import errno

import numpy as np
import polars as pl

from .._native.block import Run
from .. import schema, scsi
from .events import ACT_LETTERS, SECTOR, TA, TC, TC_SHIFT, dev_name, rwbs_expr
from ..tables import Table, mapping
from .stats import PROCESS_STATS, STATS


def busy_runs(run: Run) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per device: (device, starts, ends) of the runs when at least one request is between its D
    and its C (the machine's busy runs kept for the reports)."""
    dev, starts, ends = run.run_device, run.run_start, run.run_end
    cut = np.flatnonzero(np.diff(dev.astype(np.int64))) + 1
    return [(int(d[0]), s, e) for d, s, e in zip(np.split(dev, cut), np.split(starts, cut), np.split(ends, cut))
            if len(d)]


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


def device_counts(run: Run) -> pl.DataFrame:
    """Per device: records seen (Q, D, merges, requeues) and the mean and median |D sector -
    previous D end| (seek) in sectors."""
    counts = run.counts.reshape(len(run.devices), 256)
    rows = []
    for k, dev in enumerate(run.devices):
        rows.append({"device": int(dev), "queued": int(counts[k, TA["Q"]]), "dispatched": int(counts[k, TA["D"]]),
                     "merges": int(counts[k, TA["M"]] + counts[k, TA["F"]]), "requeues": int(counts[k, TA["R"]]),
                     "seek_mean_sectors": run.seek_mean[k], "seek_median_sectors": run.seek_median[k],
                     "seeks": int(run.seeks[k])})
    return pl.DataFrame(rows, schema={"device": pl.UInt32, "queued": pl.Int64, "dispatched": pl.Int64,
                                      "merges": pl.Int64, "requeues": pl.Int64, "seek_mean_sectors": pl.Float64,
                                      "seek_median_sectors": pl.Float64, "seeks": pl.Int64})


def device_table(base: pl.DataFrame, depth: pl.DataFrame, run: Run, elapsed_ns: int) -> pl.DataFrame:
    """device_counts plus completions, bytes, busy time, queue depth, rates."""
    seen = run.done > 0
    devices = run.devices
    per = pl.DataFrame({"device": devices[seen].astype(np.uint32), "ios_completed": run.done[seen],
                        "bytes": run.bytes[seen], "writes": run.writes[seen]})
    busy = pl.DataFrame({"device": [dev_name(int(d)) for d in devices], "busy_ns": run.busy_ns},
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


def queue_depth(run: Run) -> pl.DataFrame:
    """Requests in the driver per device: +1 at each D, -1 at each C or R (as blkparse's depth
    counts), in processing order. Per device with such events: the maximum and the
    time-weighted average from the first event of the trace up to its last."""
    seen = np.asarray(run.depth_seen, bool)
    span = max(run.end_ns - run.start_ns, 1)
    return pl.DataFrame({"device": run.devices[seen].astype(np.uint32), "max_depth": run.max_depth[seen],
                         "avg_depth": run.depth_held[seen] / span},
                        schema={"device": pl.UInt32, "max_depth": pl.Int64, "avg_depth": pl.Float64})


def process_table(run: Run, names: dict) -> pl.DataFrame:
    """Per process (the name of the Q's pid): I/Os queued and completed, bytes, Q2C and D2C."""
    seen = run.pid_queued > 0
    done = run.pid_done[seen]
    per = pl.DataFrame({
        "pid": run.pids[seen], "queued": run.pid_queued[seen], "ios_completed": done,
        "bytes": run.pid_bytes[seen], "q2c_total": run.pid_q2c_sum[seen],
        "q2c_max_ns": pl.Series(run.pid_q2c_max[seen]).set(pl.Series(done == 0), None),
        "d2c_total": run.pid_d2c_sum[seen], "d2c_n": run.pid_d2c_n[seen]})
    per = per.with_columns(_process_names(pl.col("pid"), names).alias("process"))
    out = per.group_by("process").agg(
        pl.col("queued", "ios_completed", "bytes").sum(),
        (pl.col("q2c_total").sum() / pl.col("ios_completed").sum()).alias("q2c_avg_ns"),
        pl.col("q2c_max_ns").max(),
        (pl.col("d2c_total").sum() / pl.col("d2c_n").sum()).alias("d2c_avg_ns"))
    return out.sort("queued", "process", descending=[True, False])


def _process_names(pid: pl.Expr, names: dict) -> pl.Expr:
    return pid.replace_strict(names, default=None, return_dtype=pl.Utf8).fill_null(pid.cast(pl.Utf8))


def size_histogram(run: Run) -> pl.DataFrame:
    """Sizes of the requests btt sees dispatched (D), in power-of-two buckets of bytes."""
    sizes = run.sizes.reshape(64, 2)
    counts, writes = sizes[:, 0], sizes[:, 1]
    k = np.flatnonzero(counts)
    return pl.DataFrame({"bytes_max": np.left_shift(1, k).astype(np.int64), "requests": counts[k],
                         "writes": writes[k], "reads_other": counts[k] - writes[k]})


def ios_frame(queues: pl.DataFrame, names: dict) -> pl.DataFrame:
    """schema.ios_columns("block") rows, one per Q (op in schema.OPS; status GOOD when completed,
    ERROR when its completion carried an error, whose errno name is in `status_detail`; null
    when not completed), blkparse's RWBS letters in `rwbs`, plus the block stage columns."""
    combos = queues.select((pl.col("action") & 0xFFFF0000).alias("a"), (pl.col("bytes") > 0).alias("b")) \
        .unique().rows()
    cols = {
        "io": pl.col("q").cast(pl.Int64), "device": _dev_names(pl.col("device")),
        "op": op_expr(pl.col("action"), pl.col("bytes")),
        "lba": pl.col("sector"), "blocks": pl.col("bytes") // SECTOR, "bytes": pl.col("bytes"),
        "data_bytes": pl.col("bytes"), "start_ns": pl.col("q_t"), "end_ns": pl.col("c_t"),
        "status": pl.when(pl.col("c_t").is_null()).then(None).when(pl.col("c_error") != 0).then(pl.lit(scsi.ERROR))
                  .otherwise(pl.lit("GOOD")),
        "complete": pl.col("c_t").is_not_null(), "partial": pl.lit(False),
    }
    declared = schema.ios_columns("block")
    exprs = [cols[c].cast(dtype).alias(c) for c, dtype in declared.items()]
    extra = [rwbs_expr(pl.col("action"), pl.col("bytes"), combos).alias("rwbs"),
             pl.col("pid"), _process_names(pl.col("pid"), names).alias("process"),
             *(pl.col(c) for c in ("q2g_ns", "g2i_ns", "q2m_ns", "i2d_ns", "d2c_ns", "q2c_ns")),
             pl.col("q2m_ns").is_not_null().alias("merged"), errno_names(pl.col("c_error")).alias("status_detail")]
    return schema.validate(queues.select(*exprs, *extra), declared, "block ios")


def errno_names(error: pl.Expr) -> pl.Expr:
    """A completion's error field (an errno, as the kernel stores it: negative) by its name
    (`EIO`), "errno N" for one this system does not name; null for 0 (no error)."""
    code = error.cast(pl.Int64).abs()
    return (pl.when(code != 0)
            .then(code.replace_strict(dict(errno.errorcode), default=pl.format("errno {}", code), return_dtype=pl.Utf8)))


def op_expr(action: pl.Expr, nbytes: pl.Expr) -> pl.Expr:
    """schema.OPS of a request from its category bits: discard; an empty flush (blkparse FN,
    FWS with no data) is flush; a write with a preflush or FUA (FWFS) is a write; R is read,
    anything else (N) other."""
    tc = action.cast(pl.Int64) // (1 << TC_SHIFT)
    has = lambda bit: (tc & TC[bit]) != 0  # noqa: E731
    return (pl.when(has("DISCARD")).then(pl.lit("discard"))
            .when(has("FLUSH") & (nbytes == 0)).then(pl.lit("flush"))
            .when(has("WRITE")).then(pl.lit("write"))
            .when(nbytes > 0).then(pl.lit("read"))
            .otherwise(pl.lit("other")))


def event_counts(run: Run) -> pl.DataFrame:
    """Records per blkparse action letter (T = timer unplug, blkparse's UT), as blkparse counts."""
    per_code = run.counts.reshape(len(run.devices), 256).sum(axis=0)
    return pl.DataFrame([(ACT_LETTERS[min(code, len(ACT_LETTERS) - 1)], int(n)) for code, n in enumerate(per_code)
                         if n], schema=EVENTS_TABLE.schema, orient="row")


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
