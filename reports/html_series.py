"""The report's plots over time and of latency, computed from the completed I/Os of any layer
(views.completed_ios): offset (LBA) vs time, latency over time with per-bin percentile
lines, queue depth over time, IOPS and MB/s over time (each on its own axis), the latency
histogram (the summary's power-of-two buckets) and CDF.

Every plot is binned or decimated: a fixed number of points whatever the trace's size,
never one point per I/O for millions of I/Os. Bins fit the trace: a round width (1, 2, 5 x
10^k ns) giving at most MAX_BINS bins and, when the trace has few I/Os, about MIN_PER_BIN
I/Os per bin (so a rate is not a square wave of 0 and 1 I/O per bin)."""
from __future__ import annotations

import math

import numpy as np
import polars as pl

from .html_page import PALETTE, _layout, label

MAX_BINS = 150
MIN_BINS = 8
MIN_PER_BIN = 10
OFFSET_CELLS = (300, 120)      # offset plot: at most one point per (op, time cell, LBA cell)
MAX_SCATTER = 3000             # individual I/Os drawn in the latency-over-time plot
MIB = float(1 << 20)
OP_COLORS = {"r": PALETTE[0], "w": PALETTE[2]}     # by the op's first letter (read, R, RS, write, WS)


def nice(x: float) -> int:
    """The smallest of 1, 2, 5 x 10^k (integer ns) at or above x."""
    x = max(float(x), 1.0)
    k = 10 ** math.floor(math.log10(x))
    for m in (1, 2, 5, 10):
        if m * k >= x:
            return int(m * k)
    return int(10 * k)


def nice_below(x: float) -> int:
    """The largest of 1, 2, 5 x 10^k (integer ns) at or below x (at least 1)."""
    x = max(float(x), 1.0)
    k = 10 ** math.floor(math.log10(x))
    for m in (5, 2, 1):
        if m * k <= x:
            return int(m * k)
    return int(k)


def bin_width(elapsed_ns: int, n: int) -> int:
    """A round bin width for `n` events over `elapsed_ns`: at most MAX_BINS bins, about
    MIN_PER_BIN events per bin, at least MIN_BINS bins."""
    elapsed_ns = max(int(elapsed_ns), 1)
    raw = max(elapsed_ns / MAX_BINS, elapsed_ns * MIN_PER_BIN / max(n, 1))
    return max(min(nice(raw), nice_below(elapsed_ns / MIN_BINS)), 1)


def time_unit(span_ns: float) -> tuple[float, str]:
    """(ns per unit, unit name) for a time axis spanning span_ns."""
    if span_ns < 2e6:
        return 1e3, "µs"
    if span_ns < 20e9:
        return 1e6, "ms"
    return 1e9, "s"


def fmt_width(ns: int) -> str:
    """A round width in its largest whole unit (1 s, 200 ms, 50 µs)."""
    for div, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if ns >= div:
            return f"{ns / div:g} {unit}"
    return f"{ns} ns"


def _r(a, digits=4) -> list:
    """Floats rounded to `digits` significant digits (smaller JSON, same picture)."""
    a = np.asarray(a, dtype=np.float64)
    out = np.zeros_like(a)
    nz = np.isfinite(a) & (a != 0)
    mag = np.floor(np.log10(np.abs(a[nz])))
    scale = 10.0 ** (digits - 1 - mag)
    out[nz] = np.round(a[nz] * scale) / scale
    return [None if not np.isfinite(v) else float(v) for v in out] if (~np.isfinite(a)).any() else out.tolist()


def _bins(elapsed_ns: int, width: int) -> tuple[int, np.ndarray]:
    """(number of bins, each bin's covered width in ns). A remainder shorter than half a bin
    joins the last full bin (a rate over a sliver of time would be a spike), so the last
    bin covers between 0.5 and 1.5 widths; index a time with `_index`."""
    elapsed_ns = max(int(elapsed_ns), 1)
    nb = max(int(elapsed_ns // width), 1)
    rest = elapsed_ns - nb * width
    if rest * 2 >= width:
        nb += 1
    cover = np.full(nb, float(width))
    cover[-1] = max(elapsed_ns - (nb - 1) * width, 1)
    return nb, cover


def _index(t: np.ndarray, width: int, nb: int) -> np.ndarray:
    return np.clip(np.asarray(t) // width, 0, nb - 1)


def _centres(width: int, cover: np.ndarray) -> np.ndarray:
    return np.arange(len(cover)) * float(width) + cover / 2


def rate_series(ios: pl.DataFrame, elapsed_ns: int, width: int | None = None) -> dict | None:
    """Per bin of completion time: I/Os per second and MiB/s (divided by the time the bin
    covers, so a partial last bin does not drop)."""
    if not ios.height or elapsed_ns <= 0:
        return None
    width = width or bin_width(elapsed_ns, ios.height)
    nb, cover = _bins(elapsed_ns, width)
    b = _index(ios["end_ns"].to_numpy(), width, nb)
    n = np.bincount(b, minlength=nb)[:nb]
    nbytes = np.bincount(b, weights=ios["bytes"].fill_null(0).to_numpy(), minlength=nb)[:nb]
    return {"t_ns": _centres(width, cover), "iops": n / (cover / 1e9),
            "mib_s": nbytes / MIB / (cover / 1e9), "bin_ns": int(width),
            "has_bytes": bool(ios["bytes"].drop_nulls().len())}


def _mode(n: int) -> str:
    return "lines+markers" if n <= 60 else "lines"


def fig_rates(ios: pl.DataFrame, elapsed_ns: int, width: int | None = None, x_range=None,
              series: list | None = None) -> dict | None:
    """IOPS (top) and MB/s (bottom), each on its own y axis, one shared time axis.
    `series`: [(name, ios, elapsed_ns, color)] to overlay several traces (compare)."""
    series = series or [("", ios, elapsed_ns, None)]
    longest = max(e for _, _, e, _ in series)
    width = width or min(bin_width(e, i.height) for _, i, e, _ in series if i.height) if any(
        i.height for _, i, _, _ in series) else None
    if width is None:
        return None
    div, unit = time_unit(longest)
    data = []
    for k, (name, frame, elapsed, color) in enumerate(series):
        r = rate_series(frame, elapsed, width)
        if r is None:
            continue
        x = _r(r["t_ns"] / div)
        tag = f"{name}: " if name else ""
        c1 = color or PALETTE[0]
        c2 = color or PALETTE[1]
        data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}I/Os per second"), "x": x,
                     "y": _r(r["iops"]), "line": {"color": c1}, "marker": {"size": 4}, "xaxis": "x", "yaxis": "y"})
        if r["has_bytes"]:
            data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}MB/s"), "x": x,
                         "y": _r(r["mib_s"]), "line": {"color": c2, "dash": "dot" if color else "solid"},
                         "marker": {"size": 4}, "xaxis": "x", "yaxis": "y2"})
    if not data:
        return None
    if not any(t["yaxis"] == "y2" for t in data):      # no byte counts: IOPS alone, full height
        return {"data": data, "layout": _layout(
            f"IOPS over time ({fmt_width(width)} bins of completion time; no byte counts in this trace)",
            height=360, xaxis={"title": {"text": f"time ({unit})"}, **({"range": [x_range[0] / div, x_range[1] / div]}
                                                                     if x_range else {})},
            yaxis={"title": {"text": "I/Os per second"}, "rangemode": "tozero"})}
    xa = {"title": {"text": f"time ({unit})"}, "anchor": "y2"}
    if x_range:
        xa["range"] = [x_range[0] / div, x_range[1] / div]
    return {"data": data, "layout": _layout(
        f"IOPS and MB/s over time ({fmt_width(width)} bins of completion time; MB = 2^20 bytes)",
        height=480, xaxis=xa,
        yaxis={"title": {"text": "I/Os per second"}, "domain": [0.56, 1], "anchor": "x", "rangemode": "tozero"},
        yaxis2={"title": {"text": "MB/s"}, "domain": [0, 0.44], "anchor": "x", "rangemode": "tozero"})}


def fig_offset(ios: pl.DataFrame, elapsed_ns: int, span_ns: int | None = None) -> dict | None:
    """LBA of each I/O against its start time, colored by op; decimated to one point per
    (op, time cell, LBA cell) so a million I/Os draw as at most OFFSET_CELLS points per op."""
    if "lba" not in ios.columns:
        return None
    d = ios.filter(pl.col("lba").is_not_null())
    if not d.height:
        return None
    lo, hi = int(d["lba"].min()), int(d["lba"].max())
    tw = max(elapsed_ns / OFFSET_CELLS[0], 1)
    lw = max((hi - lo + 1) / OFFSET_CELLS[1], 1)
    cells = d.with_columns((pl.col("start_ns") / tw).floor().cast(pl.Int64).alias("tc"),
                           ((pl.col("lba") - lo) / lw).floor().cast(pl.Int64).alias("lc"),
                           pl.col("op").fill_null("other"))
    kept = cells.unique(["op", "tc", "lc"], keep="first", maintain_order=True)
    div, unit = time_unit(span_ns or elapsed_ns)
    data = []
    for k, op in enumerate(sorted(kept["op"].unique().to_list())):
        o = kept.filter(pl.col("op") == op)
        data.append({"type": "scatter", "mode": "markers", "name": label(op), "x": _r(o["start_ns"] / div, 6),
                     "y": o["lba"].to_list(), "marker": {"size": 4, "color": OP_COLORS.get(op[:1].lower(), PALETTE[3 + k])}})
    note = "" if kept.height == d.height else f", {kept.height} of {d.height} I/Os shown (one per cell)"
    return {"data": data, "layout": _layout(f"Offset (LBA) vs time{note}", height=380, showlegend=True,
                                            xaxis={"title": {"text": f"start time ({unit})"}},
                                            yaxis={"title": {"text": "LBA"}, "tickformat": "d"})}


def fig_latency_time(ios: pl.DataFrame, elapsed_ns: int, span_ns: int | None = None) -> dict | None:
    """Response time of the I/Os against their completion time: a sample of the I/Os (the
    slowest always kept) and, per bin, the p50, p90 and p99 lines."""
    if not ios.height:
        return None
    # a percentile line needs samples: about 30 I/Os per bin (p90 drawn from 10 per bin on
    # average, p99 from 100), so few I/Os give few bins rather than lines through noise
    width = max(nice(max(elapsed_ns / MAX_BINS, elapsed_ns * 30 / ios.height)), 1)
    nb, cover = _bins(elapsed_ns, width)
    per_bin = ios.height / nb
    per = (ios.select((pl.col("end_ns") // width).clip(0, nb - 1).alias("bin"), "response_ns")
           .group_by("bin").agg(*(pl.col("response_ns").quantile(q, "nearest").alias(n)
                                  for n, q in (("p50", .5), ("p90", .9), ("p99", .99))),
                                pl.len().alias("n"))
           .sort("bin"))
    div, unit = time_unit(span_ns or elapsed_ns)
    t = _r(_centres(width, cover)[per["bin"].to_numpy()] / div)
    data = []
    pts = ios
    if ios.height > MAX_SCATTER:
        slow = ios.top_k(MAX_SCATTER // 10, by="response_ns")
        step = ios.height // (MAX_SCATTER - slow.height) + 1
        pts = pl.concat([ios.gather_every(step), slow]).unique("io", maintain_order=True)
    data.append({"type": "scatter", "mode": "markers", "name": label(
        "I/Os" if pts.height == ios.height else f"I/Os (sample of {pts.height} of {ios.height})"),
        "x": _r(pts["end_ns"] / div, 6), "y": _r(pts["response_ns"] / 1e6),
        "marker": {"size": 3 if pts.height > 500 else 6, "color": "#8a97a4", "opacity": 0.6 if pts.height > 500 else 0.9}})
    if per.height >= 4:       # fewer bins: the latency table's percentiles say it better
        lines = [("p50", PALETTE[4])] + [(n, c) for n, c, need in (("p90", PALETTE[1], 10), ("p99", PALETTE[2], 100))
                                         if per_bin >= need]
        for name, color in lines:
            data.append({"type": "scatter", "mode": _mode(per.height), "name": f"{name} per {fmt_width(width)}",
                         "x": t, "y": _r(per[name].to_numpy() / 1e6), "line": {"color": color, "width": 2},
                         "marker": {"size": 4}})
    return {"data": data, "layout": _layout("Latency over time (response of each I/O at its completion)",
                                            height=420, xaxis={"title": {"text": f"completion time ({unit})"}},
                                            yaxis={"title": {"text": "response (ms)"}, "type": "log"})}


def queue_depth_series(ios: pl.DataFrame, elapsed_ns: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per bin: (time-weighted mean, max) of the number of I/Os in flight (started, not
    completed), exact, from the sorted start/end edges (no per-I/O loop)."""
    nb, cover = _bins(elapsed_ns, width)
    t = np.concatenate([ios["start_ns"].to_numpy(), ios["end_ns"].to_numpy()])
    d = np.concatenate([np.ones(ios.height, np.int64), -np.ones(ios.height, np.int64)])
    order = np.lexsort((d, t))                    # at equal times an end before a start
    t, d = t[order], d[order]
    level = np.cumsum(d)                          # in flight after each edge
    area = np.concatenate([[0.0], np.cumsum(level[:-1] * np.diff(t).astype(np.float64))])
    edges = np.arange(nb + 1, dtype=np.int64) * width
    edges[-1] = edges[-2] + int(cover[-1])
    i = np.searchsorted(t, edges, side="right") - 1
    lvl = np.where(i >= 0, level[np.maximum(i, 0)], 0)
    cum = np.where(i >= 0, area[np.maximum(i, 0)] + lvl * (edges - t[np.maximum(i, 0)]), 0.0)
    mean = np.diff(cum) / cover
    # max: the level entering each bin and every level reached inside it
    entering = lvl[:-1]
    inside = np.zeros(nb, np.int64)
    settled = np.r_[t[1:] != t[:-1], True]        # the level once every edge at that time is applied
    np.maximum.at(inside, _index(t[settled], width, nb), level[settled])
    return _centres(width, cover), mean, np.maximum(entering, inside)


def fig_queue_depth(ios: pl.DataFrame, elapsed_ns: int) -> dict | None:
    if not ios.height:
        return None
    width = bin_width(elapsed_ns, ios.height)
    t, mean, mx = queue_depth_series(ios, elapsed_ns, width)
    div, unit = time_unit(elapsed_ns)
    x = _r(t / div)
    return {"data": [
        {"type": "scatter", "mode": _mode(len(x)), "name": "max in flight", "x": x, "y": mx.tolist(),
         "line": {"color": PALETTE[2], "shape": "hvh"}, "marker": {"size": 4}},
        {"type": "scatter", "mode": _mode(len(x)), "name": "mean in flight", "x": x, "y": _r(mean),
         "line": {"color": PALETTE[0]}, "marker": {"size": 4}}],
        "layout": _layout(f"Queue depth over time (I/Os issued and not completed, {fmt_width(width)} bins)",
                          height=360, xaxis={"title": {"text": f"time ({unit})"}},
                          yaxis={"title": {"text": "I/Os in flight"}, "rangemode": "tozero"})}


def bucket_label(le_ns) -> str:
    if le_ns is None:
        return "more"
    return "≤ " + fmt_width(int(le_ns)).replace(" ", "\u00a0")


def fig_histogram(hist_rows: list[dict], title_extra: str = "") -> dict | None:
    """The summary's latency_histogram (power-of-two µs buckets), one bar group per latency
    name; buckets between the first and last used are all shown (zeros too)."""
    if not hist_rows:
        return None
    from scsitrace.stats import HIST_EDGES_NS
    edges = list(HIST_EDGES_NS) + [None]
    used = [edges.index(r["le_ns"]) for r in hist_rows]
    span = edges[min(used):max(used) + 1]
    names = list(dict.fromkeys(r["name"] for r in hist_rows))
    data = []
    for k, name in enumerate(names):
        counts = {r["le_ns"]: r["count"] for r in hist_rows if r["name"] == name}
        data.append({"type": "bar", "name": label(name), "x": [bucket_label(e) for e in span],
                     "y": [counts.get(e, 0) for e in span], "marker": {"color": PALETTE[k % len(PALETTE)]}})
    return {"data": data, "layout": _layout(f"Latency histogram{title_extra} (power-of-two buckets)",
                                            height=360, barmode="group",
                                            xaxis={"title": {"text": "latency at most"}, "type": "category"},
                                            yaxis={"title": {"text": "I/Os"}})}


def cdf_points(values_ns: np.ndarray) -> tuple[list, list]:
    """(latency ms, fraction) at fixed quantiles, dense in the tail (to p99.99)."""
    v = np.sort(np.asarray(values_ns))
    n = len(v)
    q = np.unique(np.concatenate([np.linspace(0, 1, 400), 1 - np.logspace(-1, -4, 120)]))
    idx = np.unique(np.clip(np.ceil(q * n).astype(np.int64) - 1, 0, n - 1))
    return _r(v[idx] / 1e6), _r((idx + 1) / n, 6)


def fig_cdf(series: list[tuple[str, np.ndarray]], title: str = "Latency CDF") -> dict | None:
    data = []
    for k, (name, v) in enumerate(series):
        if len(v):
            x, y = cdf_points(v)
            data.append({"type": "scatter", "mode": "lines", "name": label(name), "x": x, "y": y,
                         "line": {"color": PALETTE[k % len(PALETTE)], "shape": "hv"}})
    if not data:
        return None
    return {"data": data, "layout": _layout(title, height=360, xaxis={"title": {"text": "latency (ms)"},
                                                                      "type": "log"},
                                            yaxis={"title": {"text": "fraction of I/Os at or below"},
                                                   "range": [0, 1.02]})}
