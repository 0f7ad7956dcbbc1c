"""Views from the bandwidth studies (seeds 000, 001, 003), on the I/O table of any layer,
computed by the layer (declared tables, `TABLES`; the report renders them):

- bandwidth by request size (diskperf's table: one row per size, per direction),
- bandwidth by the number of devices busy at once (M.A.X.'s "performance vs devices"),
- bandwidth by queue depth (I/Os of the same device in flight when one is issued),
- stalls: I/Os slower than k x the median, with their timestamps (xdd's lesson: an
  aggregate rate hides the few requests that stalled).

Every rate here is one definition: bytes of the group's completed I/Os divided by the time
at least one of them was in flight (the union of their [start, end) intervals). For one
device doing one request size at a time this is the rate the benchmark tools print.
Groups are shown only when the trace holds more than one of them. They need every I/O: a
streaming layer whose rows it keeps are a sample (past model.KEEP_IOS I/Os) hands every batch
of completed I/Os to a `Collected` (their view columns only), up to KEEP_VIEW_IOS of them;
past that the tables are empty and a note says why.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .model import Analysis
from .tables import Table

MIB = float(1 << 20)
STALL_FACTOR = 5.0
MAX_STALLS = 50
KEEP_VIEW_IOS = 1 << 23       # completed I/Os a Collected holds (about 48 bytes each)
VIEW_COLUMNS = ("io", "device", "op", "bytes", "start_ns", "end_ns", "response_ns")


def completed_ios(analysis: Analysis) -> pl.DataFrame:
    """Completed I/Os with device, op, bytes, start_ns, end_ns, response_ns (the layer's own when
    it has one, else end - start), lba (any layer)."""
    return completed_ios_of(analysis.ios)


def completed_ios_of(ios: pl.DataFrame) -> pl.DataFrame:
    """completed_ios of an `ios` frame."""
    if ios.height == 0 or "start_ns" not in ios.columns or "end_ns" not in ios.columns:
        return pl.DataFrame(schema={"io": pl.Int64, "device": pl.Utf8, "op": pl.Utf8, "bytes": pl.Int64,
                                    "start_ns": pl.Int64, "end_ns": pl.Int64, "response_ns": pl.Int64,
                                    "lba": pl.Int64})
    done = pl.col("complete") if "complete" in ios.columns else pl.lit(True)
    size = pl.coalesce([pl.col(c) for c in ("data_bytes", "bytes") if c in ios.columns] or [pl.lit(None)])
    device = _device_expr(ios)
    out = ios.filter(done.fill_null(False) & pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    return out.select(
        pl.col("io") if "io" in ios.columns else pl.int_range(pl.len()).alias("io"),
        device.alias("device"),
        (pl.col("op").cast(pl.Utf8) if "op" in ios.columns else pl.lit(None, dtype=pl.Utf8)).alias("op"),
        size.cast(pl.Int64).alias("bytes"),
        pl.col("start_ns"), pl.col("end_ns"),
        (pl.coalesce("response_ns", pl.col("end_ns") - pl.col("start_ns")) if "response_ns" in ios.columns
         else pl.col("end_ns") - pl.col("start_ns")).cast(pl.Int64).alias("response_ns"),
        (pl.col("lba") if "lba" in ios.columns else pl.lit(None)).cast(pl.Int64).alias("lba"),
    ).sort("start_ns")


def _device_expr(ios: pl.DataFrame) -> pl.Expr:
    """The device column if filled, else the target ID, else one device for the whole trace."""
    parts = []
    if "device" in ios.columns:
        parts.append(pl.when(pl.col("device").cast(pl.Utf8) != "").then(pl.col("device").cast(pl.Utf8)))
    if "target" in ios.columns:
        parts.append(pl.format("target {}", pl.col("target")))
    parts.append(pl.lit("all"))
    return pl.coalesce(parts)


def busy_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Length of the union of the intervals [start, end)."""
    if not len(start):
        return 0
    g_start, g_end = _union(start, end)
    return int((g_end - g_start).sum())


def _rate_rows(ios: pl.DataFrame, by: list[str]) -> list[dict]:
    rows = []
    for key, grp in ios.group_by(by, maintain_order=False):
        busy = busy_ns(grp["start_ns"].to_numpy(), grp["end_ns"].to_numpy())
        nbytes = int(grp["bytes"].fill_null(0).sum())
        rows.append({**dict(zip(by, key)), "ios": grp.height, "bytes": nbytes, "busy_ns": busy,
                     "mib_s": nbytes / MIB / (busy / 1e9) if busy else None,
                     "iops": grp.height / (busy / 1e9) if busy else None,
                     "mean_response_ns": float(grp["response_ns"].mean()),
                     "median_response_ns": float(grp["response_ns"].median())})
    return sorted(rows, key=lambda r: tuple((r[k] is None, r[k]) for k in by))


def by_request_size(ios: pl.DataFrame) -> list[dict]:
    if ios["bytes"].drop_nulls().n_unique() < 2:
        return []
    sized = ios.with_columns(pl.col("op").fill_null("?"), pl.col("bytes").alias("request_bytes"))
    return _rate_rows(sized, ["request_bytes", "op"])


def queue_depths(ios: pl.DataFrame) -> pl.DataFrame:
    """Per I/O: I/Os of the same device in flight when it was issued, itself included."""
    parts = []
    for _, grp in ios.group_by("device"):
        starts = np.sort(grp["start_ns"].to_numpy())
        ends = np.sort(grp["end_ns"].to_numpy())
        s = grp["start_ns"].to_numpy()
        qd = np.searchsorted(starts, s, side="right") - np.searchsorted(ends, s, side="right")
        parts.append(grp.with_columns(pl.Series("queue_depth", qd, dtype=pl.Int64)))
    return pl.concat(parts) if parts else ios.with_columns(pl.lit(0, dtype=pl.Int64).alias("queue_depth"))


def by_queue_depth(ios: pl.DataFrame) -> list[dict]:
    q = queue_depths(ios)
    if q["queue_depth"].n_unique() < 2:
        return []
    return _rate_rows(q, ["queue_depth"])


def by_device_count(ios: pl.DataFrame) -> list[dict]:
    """Time with exactly k devices busy, and the bytes of the I/Os completing then."""
    devices = ios["device"].unique().to_list()
    if len(devices) < 2:
        return []
    edges_t, edges_d = [], []
    for _, grp in ios.group_by("device"):     # per device: its busy intervals (union)
        s, e = _union(grp["start_ns"].to_numpy(), grp["end_ns"].to_numpy())
        s, e = s[e > s], e[e > s]                # an instant busies nobody (and would dip the level)
        edges_t += [s, e]
        edges_d += [np.ones(len(s), dtype=np.int64), -np.ones(len(e), dtype=np.int64)]
    t = np.concatenate(edges_t)
    d = np.concatenate(edges_d)
    if not len(t):
        return []
    order = np.lexsort((d, t))                 # at equal times an end (-1) before a start (+1)
    t, d = t[order], d[order]
    level = np.cumsum(d)
    span = np.diff(t)
    time_at = np.bincount(level[:-1], weights=span, minlength=len(devices) + 1)
    # devices busy just before each I/O completes (the level after the last edge before its end)
    at_end = level[np.maximum(np.searchsorted(t, ios["end_ns"].to_numpy(), side="left") - 1, 0)]
    per = ios.with_columns(pl.Series("devices_busy", np.maximum(at_end, 1), dtype=pl.Int64))
    rows = []
    for k, grp in sorted(per.group_by("devices_busy"), key=lambda kv: kv[0][0]):
        busy = int(time_at[k[0]])
        nbytes = int(grp["bytes"].fill_null(0).sum())
        rows.append({"devices_busy": int(k[0]), "ios": grp.height, "bytes": nbytes, "busy_ns": busy,
                     "mib_s": nbytes / MIB / (busy / 1e9) if busy else None,
                     "iops": grp.height / (busy / 1e9) if busy else None,
                     "mean_response_ns": float(grp["response_ns"].mean()),
                     "median_response_ns": float(grp["response_ns"].median())})
    return rows


def _union(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals [start, end) as disjoint (starts, ends)."""
    order = np.argsort(start, kind="stable")
    s, e = start[order], end[order]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]   # an interval starting after everything before it ended
    return s[new], np.maximum.reduceat(e, np.flatnonzero(new))


def stalls(ios: pl.DataFrame, factor: float = STALL_FACTOR, limit: int = MAX_STALLS) -> dict:
    """I/Os whose response time exceeds factor x the median of their (device, op, size) group."""
    if ios.height == 0:
        return {"factor": factor, "count": 0, "ios": []}
    key = ["device", "op", "bytes"]
    med = pl.col("response_ns").median().over(key)
    slow = (ios.with_columns(med.alias("median_ns"))
            .filter(pl.col("response_ns") > factor * pl.col("median_ns"))
            .with_columns((pl.col("response_ns") / pl.col("median_ns")).alias("times_median")))
    rows = slow.sort("start_ns").head(limit).select(
        "io", "device", "op", "bytes", "start_ns", "end_ns", "response_ns", "median_ns", "times_median")
    return {"factor": factor, "count": slow.height,
            "ios": [{k: (float(v) if k in ("median_ns", "times_median") else v) for k, v in r.items()}
                    for r in rows.iter_rows(named=True)]}


def views(analysis: Analysis, stall_factor: float = STALL_FACTOR) -> dict:
    """The report's "views" (report --json): the analysis' declared tables as rows (the layer
    built the stalls with the request's stall factor; `stall_factor` is what an analysis
    without the tables shows)."""
    if "by_request_size" not in analysis.tables:
        return {"by_request_size": [], "by_device_count": [], "by_queue_depth": [],
                "stalls": {"factor": stall_factor, "count": 0, "ios": []}}
    st = analysis.table("stalls")
    shown = {"factor": float(st["factor"][0]) if st.height else stall_factor,
             "count": int(st["count"][0]) if st.height else 0, "ios": st["ios"].to_list()[0] if st.height else []}
    return {"by_request_size": analysis.table("by_request_size").to_dicts(),
            "by_device_count": analysis.table("by_device_count").to_dicts(),
            "by_queue_depth": analysis.table("by_queue_depth").to_dicts(),
            "stalls": shown}


class Collected:
    """Every completed I/O of a stream, batch by batch, in the columns the views read
    (VIEW_COLUMNS), up to `limit` I/Os: what the views are built from when the layer keeps
    only a sample of its rows. Past the limit it lets go of them (`over`)."""

    def __init__(self, limit: int | None = None):
        self.limit = KEEP_VIEW_IOS if limit is None else limit
        self.n, self.parts, self.over = 0, [], False

    def add(self, ios: pl.DataFrame) -> None:
        """A batch of `ios` rows (schema.IOS columns, any layer)."""
        if self.over or not ios.height:
            return
        done = completed_ios_of(ios).select(VIEW_COLUMNS)
        self.n += done.height
        if self.n > self.limit:
            self.over, self.parts = True, []
        elif done.height:
            self.parts.append(done)

    def frame(self) -> pl.DataFrame:
        return completed_ios_of(pl.DataFrame()).select(VIEW_COLUMNS) if not self.parts else \
            pl.concat(self.parts).sort("start_ns", maintain_order=True)


def declare(tables: dict, ios, thinned: bool, options=None, collected: Collected | None = None) -> list[str]:
    """Add the views' tables to a layer's `tables` (built when first read from `ios`, a frame or
    a function giving it, or from `collected` when the rows were `thinned`; the stalls by
    `options.stall_factor`); the notes to add. Thinned rows without every I/O collected give
    empty views and say so."""
    stall_factor = getattr(options, "stall_factor", STALL_FACTOR)
    if thinned and collected is not None and not collected.over:
        ios, thinned = collected.frame, False
    if thinned:
        for t in TABLES:
            tables[t.name] = t.empty()
        past = f" (past {collected.limit:,} I/Os)" if collected is not None else ""
        return [f"bandwidth views and stalls need every I/O; this trace's rows were thinned for the "
                f"reports{past}, so they are not shown (--ios FILE writes every row)"]
    cache = {}

    def build(name):
        def get():
            if not cache:
                done = completed_ios_of(ios() if callable(ios) else ios)
                st = stalls(done, stall_factor)
                cache.update(by_request_size=_frame(by_request_size(done), REQUEST_SIZE),
                             by_device_count=_frame(by_device_count(done), DEVICE_COUNT),
                             by_queue_depth=_frame(by_queue_depth(done), QUEUE_DEPTH),
                             stalls=pl.DataFrame({"factor": [st["factor"]], "count": [st["count"]],
                                                  "ios": [st["ios"]]}, schema=STALLS.schema, strict=False))
            return cache[name]
        return get
    for t in TABLES:
        tables[t.name] = build(t.name)
    return []


def _frame(rows: list[dict], table: Table) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=table.schema, orient="row") if rows else table.empty()


_RATE = {"ios": pl.Int64, "bytes": pl.Int64, "busy_ns": pl.Int64, "mib_s": pl.Float64, "iops": pl.Float64,
         "mean_response_ns": pl.Float64, "median_response_ns": pl.Float64}
_DOC = ("; MBytes/sec = bytes of the group's completed I/Os / time at least one of them was in flight "
        "(MByte = 2^20)")
REQUEST_SIZE = Table("by_request_size", {"request_bytes": pl.Int64, "op": pl.Utf8, **_RATE},
                     "bandwidth by request size and op" + _DOC, in_json=False)
DEVICE_COUNT = Table("by_device_count", {"devices_busy": pl.Int64, **_RATE},
                     "bandwidth by the number of devices busy at once" + _DOC, in_json=False)
QUEUE_DEPTH = Table("by_queue_depth", {"queue_depth": pl.Int64, **_RATE},
                    "bandwidth by the I/Os of the same device in flight (started, not completed) when an I/O "
                    "starts, itself included" + _DOC, in_json=False)
STALLS = Table("stalls", {"factor": pl.Float64, "count": pl.Int64,
                          "ios": pl.List(pl.Struct({"io": pl.Int64, "device": pl.Utf8, "op": pl.Utf8,
                                                    "bytes": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                                    "response_ns": pl.Int64, "median_ns": pl.Float64,
                                                    "times_median": pl.Float64}))},
               "I/Os slower than factor x the median of their (device, op, size), the first 50 in time",
               in_json=False)
TABLES = (REQUEST_SIZE, DEVICE_COUNT, QUEUE_DEPTH, STALLS)
