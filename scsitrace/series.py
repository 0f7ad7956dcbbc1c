"""Figures over time, built by the layer from every I/O as its batches come: the declared
tables that the report's plots draw (rates, queue depth, latency over time, offsets).

A whole capture is a stream of one batch; any split of the I/Os into batches gives the same
tables (tests/test_series.py). Nothing here depends on the thinned rows the reports keep.

Time bins. The elapsed time is known only at the end of a stream, so the I/Os are counted in
fine bins whose width is a step of `CHAIN` (1, 2, 10, 20, 100, 200 ... ns: each width divides
the next), at most `MAX_FINE` of them; when a batch reaches past them the bins merge by the
chain's factor, exactly (counts, bytes and in-flight time add up). At the end they merge to
the shown width: the smallest chain width giving at most `MAX_BINS` bins and, when the trace
has few I/Os, about `MIN_PER_BIN` I/Os per bin. A remainder shorter than half a bin joins the
last full bin (a rate over a sliver of time would be a spike); rates divide by the time each
bin covers.

What each table holds (its `doc` says it again):
- rates: completions and their bytes per bin of completion time, per second of the bin;
- queue depth: I/Os in flight (started, not completed) per bin, the time-weighted mean (exact:
  each I/O adds its overlap with the bin) and the maximum (exact: a sweep over every I/O's
  start and end, kept up to `KEEP_EDGES` I/Os; past that the maximum is unknown and a note
  says so);
- latency: per bin of completion time, the number of I/Os and p50/p90/p99 of their response
  time, each the upper edge of a 1/32-octave bucket (at most 2.2 % above the exact value), and
  only where the bin has enough I/Os for it (10 for p90, 100 for p99);
- offsets: every I/O as a point (start time, LBA, op) up to `MAX_POINTS` I/Os; past that,
  exact counts per cell of (op, start time, LBA);
- latency points: every I/O as a point (completion time, response time, op) up to
  `MAX_POINTS` I/Os; past that, exact counts per cell of (op, completion time, quarter octave
  of response time);
- depth steps: every change of the I/Os in flight (the intervals the queue depth counts),
  exact, while the maximum is (up to `KEEP_EDGES` I/Os).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import schema
from .tables import Table
from . import time_bins as tb

MAX_FINE = 600
MIN_PER_BIN = 10
LAT_PER_BIN = 30          # latency bins: about 30 I/Os each (p90 from 10 per bin on average)
KEEP_EDGES = 1 << 22
MAX_POINTS = 300_000          # a WebGL scatter draws this many (and the page stays < 10 MB); past it, cells
OFFSET_CELLS = (300, 120)
LAT_CELLS = 4                 # latency cells per octave of response time
SUB_OCTAVE = 32
LAT_BUCKETS = 48 * SUB_OCTAVE + 1      # 1 ns .. 2^48 ns (3.3 days), then one overflow bucket
MAX_OPS = 15                          # distinct op names; more share "other"
MIB = float(1 << 20)


def _lat_bucket(ns: np.ndarray) -> np.ndarray:
    """1/32-octave bucket of each response time (bucket k covers (2^((k-1)/32), 2^(k/32)])."""
    v = np.maximum(ns.astype(np.float64), 1.0)
    k = np.ceil(np.log2(v) * SUB_OCTAVE - 1e-9).astype(np.int64)
    return np.clip(k, 0, LAT_BUCKETS - 1)


def _bucket_upper(k: np.ndarray) -> np.ndarray:
    return np.floor(np.exp2(k / SUB_OCTAVE)).astype(np.int64)


class Series:
    """The accumulator a layer feeds: `add(...)` per batch of completed I/Os, `tables(elapsed)`
    at the end (see the module's docstring)."""

    def __init__(self, origin_ns: int = 0):
        self.origin = int(origin_ns or 0)     # the trace's start: bins count from it
        self.axis = tb.Axis(MAX_FINE)
        for name, dtype in (("count", np.int64), ("bytes", np.int64), ("area", np.float64)):
            self.axis.declare(name, dtype)
        self.axis.declare("lat", np.int64, LAT_BUCKETS)
        self.axis.declare("lat_max", np.int64, how="max")
        self.n, self.has_bytes, self.has_lba = 0, False, False
        self.edges: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []   # start, end, device code
        self.devices: list[str] = []          # device_id by device code
        self.edges_kept = 0
        self.edges_dropped = False
        self.ops: list[str] = []
        self.points: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n_points = 0
        self.cells: _Cells | None = None
        self.latency_points = _LatencyPoints()

    def add(self, start_ns, end_ns, nbytes=None, response_ns=None, lba=None, op=None,
            flight=None, device=None) -> None:
        """A batch of completed I/Os: int64 arrays (nbytes and lba: null as a masked or
        negative value), `op` a polars/numpy array of names; `flight`: the (start, end) of the
        in-flight interval when it is not [start_ns, end_ns) (block: dispatch to completion);
        `device`: each I/O's device_id (schema.device_id; null: unknown), or a pair (codes,
        device_ids) of a layer that has its devices as small integers."""
        start = np.maximum(np.asarray(start_ns, np.int64) - self.origin, 0)
        end = np.maximum(np.asarray(end_ns, np.int64) - self.origin, start)
        if not len(start):
            return
        self.n += len(start)
        axis = self.axis
        axis.reach(int(end.max()))
        b_end = end // axis.width
        axis.add("count", b_end)
        if nbytes is not None:
            size = np.asarray(nbytes, np.int64)
            known = size >= 0
            self.has_bytes |= bool(known.any())
            axis.add("bytes", b_end, np.where(known, size, 0).astype(np.float64))
        resp = end - start if response_ns is None else np.asarray(response_ns, np.int64)
        axis.add("lat", b_end * LAT_BUCKETS + _lat_bucket(resp), inner=LAT_BUCKETS)
        np.maximum.at(axis.get("lat_max"), b_end, resp)
        f_start, f_end = (start, end) if flight is None else tb.flight(*flight, self.origin)
        if len(f_end):
            axis.reach(int(f_end.max()))
        self._add_flight(f_start, f_end, self._device_codes(device, len(start)))
        codes = self._op_codes(op, len(start))
        self.latency_points.add(end, resp, codes)
        if lba is not None:
            self._add_offsets(start, np.asarray(lba, np.int64), codes)

    def _add_flight(self, start: np.ndarray, end: np.ndarray, device: np.ndarray) -> None:
        w, nb = self.axis.width, self.axis.nb
        bs, be = start // w, end // w
        same = bs == be
        area = np.zeros(nb, np.float64)
        area += np.bincount(bs[same], weights=(end - start)[same].astype(np.float64), minlength=nb)
        s, e, b0, b1 = start[~same], end[~same], bs[~same], be[~same]
        area += np.bincount(b0, weights=((b0 + 1) * w - s).astype(np.float64), minlength=nb)
        area += np.bincount(b1, weights=(e - b1 * w).astype(np.float64), minlength=nb)
        full = np.bincount(b0 + 1, minlength=nb + 1)[:nb + 1] - np.bincount(b1, minlength=nb + 1)[:nb + 1]
        area += np.cumsum(full)[:nb] * float(w)
        self.axis.get("area")[:] += area[:nb]
        if self.edges_dropped:
            return
        if self.edges_kept + len(start) > KEEP_EDGES:
            self.edges, self.edges_dropped = [], True
            return
        self.edges.append((start.copy(), end.copy(), device))
        self.edges_kept += len(start)

    def _device_codes(self, device, n: int) -> np.ndarray:
        """Each I/O's device as an index into self.devices (-1: unknown)."""
        if device is None:
            return np.full(n, -1, np.int64)
        if isinstance(device, tuple):
            codes, names = device
            local = np.array([self._device_code(d) for d in names] + [-1], np.int64)
            codes = np.asarray(codes, np.int64)
            return local[np.where(codes < 0, len(names), codes)]
        ids = pl.Series(device, dtype=pl.Utf8)
        names = ids.drop_nulls().unique(maintain_order=True).to_list()
        local = pl.Series([self._device_code(d) for d in names], dtype=pl.Int64)
        return ids.replace_strict(names, local, default=-1, return_dtype=pl.Int64).to_numpy()

    def _device_code(self, device_id: str) -> int:
        if device_id not in self.devices:
            self.devices.append(device_id)
        return self.devices.index(device_id)

    def _op_codes(self, op, n: int) -> np.ndarray:
        """Each I/O's op as an index into self.ops; `op`: names (None: unknown), or a pair
        (codes, names) of a layer that has its ops as small integers."""
        if op is None:
            codes, names = np.zeros(n, np.int64), ["other"]
        elif isinstance(op, tuple):
            codes, names = np.asarray(op[0], np.int64), list(op[1])
        else:
            text = pl.Series(op).cast(pl.Utf8).fill_null("other")
            names = text.unique(maintain_order=True).to_list()
            codes = text.replace_strict(names, list(range(len(names))), return_dtype=pl.Int64).to_numpy()
        lookup = np.array([self._op_index(name) for name in names] or [self._op_index("other")], np.int64)
        return lookup[codes]

    def _op_index(self, name: str) -> int:
        if name not in self.ops and len(self.ops) < MAX_OPS - 1:
            self.ops.append(name)
        if name in self.ops:
            return self.ops.index(name)
        if "other" not in self.ops:
            self.ops.append("other")
        return self.ops.index("other")

    def _add_offsets(self, start: np.ndarray, lba: np.ndarray, codes: np.ndarray) -> None:
        known = lba >= 0
        if not known.any():
            return
        self.has_lba = True
        start, lba, codes = start[known], lba[known], codes[known]
        if self.cells is None and self.n_points + len(start) <= MAX_POINTS:
            self.points.append((start, lba, codes))
            self.n_points += len(start)
            return
        if self.cells is None:
            self.cells = _Cells()
            for part in self.points:
                self.cells.add(*part)
            self.points = []
        self.cells.add(start, lba, codes)

    # ------------------------------------------------------------------ the tables

    def tables(self, elapsed_ns: int) -> tuple[dict[str, pl.DataFrame], list[str]]:
        """The declared tables (SERIES_TABLES) and the notes on what they could not hold."""
        notes = []
        if self.edges_dropped:
            notes.append(f"queue depth over time: the maximum per bin needs every I/O's start and end, kept "
                         f"up to {KEEP_EDGES:,} I/Os; this trace has {self.n:,}, so only the mean is shown (and "
                         "depth_steps, Perfetto's queue-depth counter, is empty)")
        if not self.n or elapsed_ns <= 0:
            return {t.name: t.empty() for t in SERIES_TABLES}, notes
        width = tb.shown_width(elapsed_ns, self.n, self.axis.width, MIN_PER_BIN)
        rates, queue = self._rates(elapsed_ns, width), self._queue(elapsed_ns, width)
        lat_width = tb.shown_width(elapsed_ns, self.n, self.axis.width, LAT_PER_BIN)
        return {"series_rates": rates, "series_queue": queue,
                "series_latency": self._latency(elapsed_ns, lat_width), "latency_cdf": self._cdf(),
                "offsets": self._offsets(), "latency_points": self._latency_points,
                "depth_steps": self._depth_steps, "device_depth_steps": self._device_depth_steps}, notes

    def _binned(self, name: str, elapsed_ns: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """(the array merged to `width` and to the shown bins, each bin's covered ns)."""
        a, how = self.axis.arrays[name]
        a = tb.merge(a[:self.axis.nb], width // self.axis.width, how)
        nb, cover = tb.bins(elapsed_ns, width)
        if a.shape[0] < nb:
            a = np.concatenate([a, np.zeros((nb - a.shape[0],) + a.shape[1:], a.dtype)])
        if a.shape[0] > nb:          # the remainder (and anything past the end) joins the last bin
            rest = a[nb - 1:]
            a = np.concatenate([a[:nb - 1], (rest.max if how == "max" else rest.sum)(axis=0, keepdims=True)])
        return a, cover

    def _frame(self, width: int, cover: np.ndarray, **cols) -> pl.DataFrame:
        start = np.arange(len(cover), dtype=np.int64) * width + self.origin
        return pl.DataFrame({"bin": np.arange(len(cover), dtype=np.int64), "start_ns": start,
                             "end_ns": start + cover.astype(np.int64), **cols})

    def _rates(self, elapsed_ns: int, width: int) -> pl.DataFrame:
        count, cover = self._binned("count", elapsed_ns, width)
        nbytes, _ = self._binned("bytes", elapsed_ns, width)
        secs = cover / 1e9
        if not self.has_bytes:
            return self._frame(width, cover, completions=count, bytes=pl.Series([None] * len(count), dtype=pl.Int64),
                               iops=count / secs, mib_s=pl.Series([None] * len(count), dtype=pl.Float64))
        return self._frame(width, cover, completions=count, bytes=nbytes, iops=count / secs,
                           mib_s=nbytes / MIB / secs)

    def _queue(self, elapsed_ns: int, width: int) -> pl.DataFrame:
        area, cover = self._binned("area", elapsed_ns, width)
        mx = None if self.edges_dropped else tb.max_in_flight(self.edges, width, len(cover))
        return self._frame(width, cover, mean_in_flight=area / cover,
                           max_in_flight=pl.Series(mx, dtype=pl.Int64) if mx is not None
                           else pl.Series([None] * len(cover), dtype=pl.Int64))

    def _latency(self, elapsed_ns: int, width: int) -> pl.DataFrame:
        hist, cover = self._binned("lat", elapsed_ns, width)
        n = hist.sum(axis=1)
        cum = np.cumsum(hist, axis=1)
        cols = {"ios": n}
        for name, q, need in (("p50_ns", .5, 1), ("p90_ns", .9, 10), ("p99_ns", .99, 100)):
            rank = np.ceil(q * n).astype(np.int64)      # nearest rank, as scsitrace/stats.py
            k = np.array([np.searchsorted(cum[i], max(rank[i], 1)) for i in range(len(n))], np.int64) \
                if len(n) else np.zeros(0, np.int64)
            value = _bucket_upper(k)
            cols[name] = pl.Series(value).set(pl.Series(n < need), None)
        top, _ = self._binned("lat_max", elapsed_ns, width)
        cols["max_ns"] = pl.Series(top).set(pl.Series(n == 0), None)
        return self._frame(width, cover, **cols)

    def _cdf(self) -> pl.DataFrame:
        hist = self.axis.get("lat").sum(axis=0)
        k = np.flatnonzero(hist)
        cum = np.cumsum(hist)[k]
        return pl.DataFrame({"le_ns": _bucket_upper(k), "ios": cum, "fraction": cum / max(int(hist.sum()), 1)},
                            schema=CDF.schema)

    def _offsets(self) -> pl.DataFrame:
        if self.cells is not None:
            return self.cells.frame(self.ops).with_columns(pl.col("start_ns") + self.origin)
        if not self.points:
            return OFFSETS.empty()
        start = np.concatenate([p[0] for p in self.points])
        lba = np.concatenate([p[1] for p in self.points])
        codes = np.concatenate([p[2] for p in self.points])
        order = np.lexsort((lba, start))
        return pl.DataFrame({"op": pl.Series(self.ops).gather(codes[order]), "start_ns": start[order] + self.origin,
                             "lba": lba[order], "ios": np.ones(len(order), np.int64),
                             "cell_ns": np.zeros(len(order), np.int64),
                             "cell_blocks": np.zeros(len(order), np.int64)})


    def _latency_points(self) -> pl.DataFrame:
        frame = self.latency_points.frame(self.ops)
        return frame.with_columns(pl.col("end_ns") + self.origin) if frame.height else LAT_POINTS.empty()

    def _depth_steps(self) -> pl.DataFrame:
        """Every change of the I/Os in flight: the level once every start and end at t_ns is
        applied (an I/O is in flight at t when start <= t < end; ends and starts at the same
        time cancel), from the same intervals as series_queue."""
        if self.edges_dropped or not self.edges:
            return DEPTH_STEPS.empty()
        steps = self._steps(by_device=False)
        return steps.select("t_ns", "in_flight").cast(DEPTH_STEPS.schema)

    def _device_depth_steps(self) -> pl.DataFrame:
        """depth_steps per device (the I/Os of a known device), each device's steps in time order."""
        if self.edges_dropped or not self.edges or not self.devices:
            return DEVICE_DEPTH_STEPS.empty()
        steps = self._steps(by_device=True).filter(pl.col("dev") >= 0)
        return steps.select(pl.Series(self.devices, dtype=pl.Utf8).gather(steps["dev"]).alias("device_id"),
                            "t_ns", "in_flight").cast(DEVICE_DEPTH_STEPS.schema)

    def _steps(self, by_device: bool) -> pl.DataFrame:
        """Every change of the I/Os in flight (of all devices, or of each: `dev`): +1 at each
        start, -1 at each end, summed per instant, the running level where it moved."""
        starts = np.concatenate([e[0] for e in self.edges])
        ends = np.concatenate([e[1] for e in self.edges])
        dev = np.concatenate([e[2] for e in self.edges]) if by_device else np.zeros(len(starts), np.int64)
        n = len(starts)
        events = pl.DataFrame({"dev": np.r_[dev, dev], "t_ns": np.r_[starts, ends] + self.origin,
                               "delta": np.r_[np.ones(n, np.int64), -np.ones(n, np.int64)]})
        steps = events.group_by("dev", "t_ns").agg(pl.col("delta").sum()).sort("dev", "t_ns")
        return steps.with_columns(pl.col("delta").cum_sum().over("dev").alias("in_flight")).filter(pl.col("delta") != 0)


class _LatencyPoints:
    """Every I/O's (completion time, response time, op code) up to MAX_POINTS; past that,
    exact counts per (op, completion-time cell, quarter octave of response time)."""

    def __init__(self):
        self.points: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.n = 0
        self.cells: tb.Axis | None = None

    def add(self, end: np.ndarray, resp: np.ndarray, codes: np.ndarray) -> None:
        resp = np.maximum(resp, 0)
        if self.cells is None and self.n + len(end) <= MAX_POINTS:
            self.points.append((end, resp, codes))
            self.n += len(end)
            return
        if self.cells is None:
            self.cells = tb.Axis(OFFSET_CELLS[0])
            self.cells.declare("n", np.int64, MAX_OPS * LAT_ROWS)
            for part in self.points:
                self._count(*part)
            self.points = []
        self._count(end, resp, codes)

    def _count(self, end, resp, codes) -> None:
        self.cells.reach(int(end.max()))
        cell = codes * LAT_ROWS + _quarter_octave(resp)
        self.cells.add("n", (end // self.cells.width) * (MAX_OPS * LAT_ROWS) + cell, inner=MAX_OPS * LAT_ROWS)

    def frame(self, ops: list[str]) -> pl.DataFrame:
        names = pl.Series(ops + ["other"] * (MAX_OPS - len(ops)))
        if self.cells is not None:
            n = self.cells.get("n").reshape(self.cells.nb, MAX_OPS, LAT_ROWS)
            t, op, c = np.nonzero(n)
            return pl.DataFrame({"op": names.gather(op), "end_ns": t.astype(np.int64) * self.cells.width,
                                 "response_ns": _octave_edge(c - 1), "ios": n[t, op, c],
                                 "cell_ns": np.full(len(t), self.cells.width, np.int64),
                                 "response_top_ns": _octave_edge(c)}, schema=LAT_POINTS.schema)
        if not self.points:
            return LAT_POINTS.empty()
        end, resp, codes = (np.concatenate([p[k] for p in self.points]) for k in range(3))
        order = np.lexsort((resp, end))
        return pl.DataFrame({"op": names.gather(codes[order]), "end_ns": end[order], "response_ns": resp[order],
                             "ios": np.ones(len(order), np.int64), "cell_ns": np.zeros(len(order), np.int64),
                             "response_top_ns": resp[order]}, schema=LAT_POINTS.schema)


LAT_ROWS = 48 * LAT_CELLS + 1        # 1 ns .. 2^48 ns in quarter octaves


def _quarter_octave(ns: np.ndarray) -> np.ndarray:
    """Cell c of each response time: (2^((c-1)/4), 2^(c/4)] ns (c = 0: at most 1 ns)."""
    v = np.maximum(ns.astype(np.float64), 1.0)
    return np.clip(np.ceil(np.log2(v) * LAT_CELLS - 1e-9).astype(np.int64), 0, LAT_ROWS - 1)


def _octave_edge(c: np.ndarray) -> np.ndarray:
    return np.where(c < 0, 0, np.floor(np.exp2(np.maximum(c, 0) / LAT_CELLS))).astype(np.int64)


class _Cells:
    """Exact counts per (op, start-time cell, LBA cell): chain-width time cells, power-of-two
    LBA cells, both merged as later times and higher LBAs come."""

    def __init__(self):
        self.axis = tb.Axis(OFFSET_CELLS[0])
        self.lba_shift = 0
        self.axis.declare("n", np.int64, MAX_OPS * OFFSET_CELLS[1])

    def add(self, start: np.ndarray, lba: np.ndarray, codes: np.ndarray) -> None:
        self.axis.reach(int(start.max()))
        top = int(lba.max())
        while (top >> self.lba_shift) >= OFFSET_CELLS[1]:     # LBA cells twice as large
            n = self.axis.arrays["n"][0].reshape(-1, MAX_OPS, OFFSET_CELLS[1])
            pairs = n.reshape(n.shape[0], MAX_OPS, OFFSET_CELLS[1] // 2, 2).sum(axis=3)
            n[:] = 0
            n[:, :, :OFFSET_CELLS[1] // 2] = pairs
            self.lba_shift += 1
        cell = (codes * OFFSET_CELLS[1] + (lba >> self.lba_shift)).astype(np.int64)
        self.axis.add("n", (start // self.axis.width) * (MAX_OPS * OFFSET_CELLS[1]) + cell,
                      inner=MAX_OPS * OFFSET_CELLS[1])

    def frame(self, ops: list[str]) -> pl.DataFrame:
        n = self.axis.get("n").reshape(self.axis.nb, MAX_OPS, OFFSET_CELLS[1])
        t, op, lc = np.nonzero(n)
        return pl.DataFrame({"op": pl.Series(ops + ["other"] * (MAX_OPS - len(ops))).gather(op),
                             "start_ns": t.astype(np.int64) * self.axis.width,
                             "lba": lc.astype(np.int64) << self.lba_shift, "ios": n[t, op, lc],
                             "cell_ns": np.full(len(t), self.axis.width, np.int64),
                             "cell_blocks": np.full(len(t), 1 << self.lba_shift, np.int64)})


_BIN = {"bin": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
RATES = Table("series_rates", {**_BIN, "completions": pl.Int64, "bytes": pl.Int64, "iops": pl.Float64,
                               "mib_s": pl.Float64},
              "per bin of completion time (start_ns..end_ns): I/Os completed, their bytes, and both per "
              "second of the bin (MB = 2^20 bytes)", in_json=False)
QUEUE = Table("series_queue", {**_BIN, "mean_in_flight": pl.Float64, "max_in_flight": pl.Int64},
              "per bin: I/Os in flight (issued, not completed), time-weighted mean and maximum", in_json=False)
LATENCY = Table("series_latency", {**_BIN, "ios": pl.Int64, "p50_ns": pl.Int64, "p90_ns": pl.Int64,
                                   "p99_ns": pl.Int64, "max_ns": pl.Int64},
                "per bin of completion time: I/Os, their response-time percentiles (upper edge of a "
                "1/32-octave bucket, at most 2.2 % high; p90 from 10 I/Os in the bin, p99 from 100) and the "
                "slowest (exact)", in_json=False)
CDF = Table("latency_cdf", {"le_ns": pl.Int64, "ios": pl.Int64, "fraction": pl.Float64},
            "the response times of every completed I/O as a cumulative distribution: I/Os at or below le_ns "
            "(1/32-octave bucket edges: at most 2.2 % above the exact value)", in_json=False)
OFFSETS = Table("offsets", {"op": pl.Utf8, "start_ns": pl.Int64, "lba": pl.Int64, "ios": pl.Int64,
                            "cell_ns": pl.Int64, "cell_blocks": pl.Int64},
                f"every I/O's start time and LBA by op (cell sizes 0), or past {MAX_POINTS:,} I/Os exact counts "
                "per cell of cell_ns x cell_blocks", in_json=False)
LAT_POINTS = Table("latency_points", {"op": pl.Utf8, "end_ns": pl.Int64, "response_ns": pl.Int64, "ios": pl.Int64,
                                      "cell_ns": pl.Int64, "response_top_ns": pl.Int64},
                   f"every completed I/O's completion time and response time by op (cell_ns 0, response_top_ns = "
                   f"response_ns), or past {MAX_POINTS:,} I/Os exact counts per cell: completion time end_ns.."
                   "end_ns+cell_ns, response time above response_ns up to response_top_ns (a quarter octave)",
                   in_json=False)
DEPTH_STEPS = Table("depth_steps", {"t_ns": pl.Int64, "in_flight": pl.Int64},
                    "every change of the number of I/Os in flight (the intervals series_queue counts): the level "
                    f"once every start and end at t_ns is applied; empty past {KEEP_EDGES:,} I/Os", in_json=False)
DEVICE_DEPTH_STEPS = Table("device_depth_steps", {"device_id": pl.Utf8, "t_ns": pl.Int64, "in_flight": pl.Int64},
                           "depth_steps per device (device_id, schema.device_id's form): every change of the "
                           "number of that device's I/Os in flight, in time order; I/Os of an unknown device "
                           f"count in depth_steps only; empty past {KEEP_EDGES:,} I/Os", in_json=False)
SERIES_TABLES = (RATES, QUEUE, LATENCY, CDF, OFFSETS, LAT_POINTS, DEPTH_STEPS, DEVICE_DEPTH_STEPS)


def declared(options) -> tuple:
    """The series tables a layer declares: all when a view asked for them (Options.series)."""
    return SERIES_TABLES if getattr(options, "series", True) else ()


def add_ios(series: Series, ios: pl.DataFrame, layer: str) -> None:
    """A batch of `ios` rows (schema.IOS columns) of `layer`: its completed I/Os with both times."""
    if not ios.height:
        return
    done = ios.filter(pl.col("complete").fill_null(False) & pl.col("start_ns").is_not_null()
                      & pl.col("end_ns").is_not_null())
    if not done.height:
        return
    size = pl.coalesce([pl.col(c) for c in ("data_bytes", "bytes") if c in done.columns] or [pl.lit(None)])
    resp = (pl.coalesce("response_ns", pl.col("end_ns") - pl.col("start_ns")) if "response_ns" in done.columns
            else pl.col("end_ns") - pl.col("start_ns"))
    cols = done.select(pl.col("start_ns").cast(pl.Int64), pl.col("end_ns").cast(pl.Int64),
                       size.cast(pl.Int64).fill_null(-1).alias("bytes"), resp.cast(pl.Int64).alias("resp"),
                       (pl.col("lba").cast(pl.Int64).fill_null(-1) if "lba" in done.columns
                        else pl.lit(-1, pl.Int64)).alias("lba"),
                       (pl.col("op").cast(pl.Utf8) if "op" in done.columns else pl.lit(None, pl.Utf8)).alias("op"),
                       schema.device_id(layer, done.columns))
    series.add(cols["start_ns"].to_numpy(), cols["end_ns"].to_numpy(), cols["bytes"].to_numpy(),
               cols["resp"].to_numpy(), cols["lba"].to_numpy(), cols["op"], device=cols["device_id"])
