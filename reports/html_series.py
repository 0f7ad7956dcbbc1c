"""The report's plots over time and of latency. They render the layer's declared tables
(scsitrace/series.py, built from every I/O: series_rates, series_queue, series_latency,
latency_cdf, offsets, latency_points; and the summary's latency_histogram) and compute no figure: the
numbers on a plot are the table's, rounded for the page."""
from __future__ import annotations

import base64

import numpy as np
import polars as pl

from .html_page import PALETTE, _layout, label

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


def _x(frame: pl.DataFrame, div: float) -> list:
    """Bin centres of a series table, in the axis unit."""
    return _r(((frame["start_ns"] + frame["end_ns"]) / 2).to_numpy() / div)


def _mode(n: int) -> str:
    return "lines+markers" if n <= 60 else "lines"


def _bin_text(frame: pl.DataFrame) -> str:
    width = int(frame["end_ns"][0] - frame["start_ns"][0]) if frame.height > 1 else int(frame["end_ns"][0] - frame["start_ns"][0])
    return fmt_width(width)


def fig_rates(traces: list[tuple[str, pl.DataFrame, str | None]]) -> dict | None:
    """IOPS (top) and MB/s (bottom) from each trace's `series_rates` table, one shared time
    axis; `traces`: [(name, table, color)] (several: compare)."""
    traces = [(n, f, c) for n, f, c in traces if f is not None and f.height and f["completions"].sum()]
    if not traces:
        return None
    div, unit = time_unit(max(int(f["end_ns"].max()) for _, f, _ in traces))
    data = []
    for name, frame, color in traces:
        x, tag = _x(frame, div), f"{name}: " if name else ""
        data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}I/Os per second"), "x": x,
                     "y": _r(frame["iops"].to_numpy()), "line": {"color": color or PALETTE[0]},
                     "marker": {"size": 4}, "xaxis": "x", "yaxis": "y"})
        if frame["mib_s"].null_count() < frame.height:
            data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}MB/s"), "x": x,
                         "y": _r(frame["mib_s"].fill_null(0).to_numpy()),
                         "line": {"color": color or PALETTE[1], "dash": "dot" if color else "solid"},
                         "marker": {"size": 4}, "xaxis": "x", "yaxis": "y2"})
    bins = _bin_text(traces[0][1])
    if not any(t["yaxis"] == "y2" for t in data):      # no byte counts: IOPS alone, full height
        return {"data": data, "layout": _layout(
            f"IOPS over time ({bins} bins of completion time; no byte counts in this trace)", height=360,
            xaxis={"title": {"text": f"time ({unit})"}},
            yaxis={"title": {"text": "I/Os per second"}, "rangemode": "tozero", "tickformat": "~s"})}
    return {"data": data, "layout": _layout(
        f"IOPS and MB/s over time ({bins} bins of completion time; MB = 2^20 bytes)", height=480,
        xaxis={"title": {"text": f"time ({unit})"}, "anchor": "y2"},
        yaxis={"title": {"text": "I/Os per second"}, "domain": [0.56, 1], "anchor": "x", "rangemode": "tozero",
               "tickformat": "~s"},
        yaxis2={"title": {"text": "MB/s"}, "domain": [0, 0.44], "anchor": "x", "rangemode": "tozero",
                "tickformat": ".3~g"})}


def fig_queue_depth(traces: list[tuple[str, pl.DataFrame, str | None]], what: str = "issued, not completed") -> dict | None:
    """Mean and maximum in flight per bin, from each trace's `series_queue` table."""
    traces = [(n, f, c) for n, f, c in traces if f is not None and f.height and f["mean_in_flight"].sum() > 0]
    if not traces:
        return None
    div, unit = time_unit(max(int(f["end_ns"].max()) for _, f, _ in traces))
    data = []
    for name, frame, color in traces:
        x, tag = _x(frame, div), f"{name}: " if name else ""
        if frame["max_in_flight"].null_count() < frame.height:
            data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}max in flight"), "x": x,
                         "y": frame["max_in_flight"].to_list(), "line": {"color": color or PALETTE[2], "shape": "hvh"},
                         "marker": {"size": 4}})
        data.append({"type": "scatter", "mode": _mode(len(x)), "name": label(f"{tag}mean in flight"), "x": x,
                     "y": _r(frame["mean_in_flight"].to_numpy()),
                     "line": {"color": color or PALETTE[0], "dash": "dot" if color else "solid"}, "marker": {"size": 4}})
    return {"data": data, "layout": _layout(
        f"Queue depth over time (I/Os {what}, {_bin_text(traces[0][1])} bins)", height=360,
        xaxis={"title": {"text": f"time ({unit})"}},
        yaxis={"title": {"text": "I/Os in flight"}, "rangemode": "tozero"})}


def fig_latency_time(frame: pl.DataFrame | None, title_extra: str = "", span_ns: int | None = None,
                     points: pl.DataFrame | None = None) -> dict | None:
    """Every I/O's response time against its completion time (`latency_points`: WebGL points,
    one colour per op, or exact counts per cell past MAX_POINTS I/Os) under the p50/p90/p99
    lines per bin of completion time (`series_latency`); `span_ns` picks the time unit
    (several plots on one axis)."""
    if frame is None or not frame.height or not frame["ios"].sum():
        return None
    div, unit = time_unit(span_ns or int(frame["end_ns"].max()))
    data, what = [], "every I/O counted"
    if points is not None and points.height:
        data, what = _latency_points(points, div, unit)
    x = _x(frame, div)
    for name, col, color in (("p50", "p50_ns", "#222222"), ("p90", "p90_ns", "#555555"),
                             ("p99", "p99_ns", "#8a8a8a"), ("slowest", "max_ns", "#8a97a4")):
        if frame[col].null_count() == frame.height or (col == "max_ns" and data):
            continue
        y = [None if v is None else round(v / 1e6, 6) for v in frame[col].to_list()]
        trace = {"type": "scatter", "name": f"{name} per {_bin_text(frame)}", "x": x, "y": y,
                 "mode": "markers" if col == "max_ns" else _mode(len(x)), "connectgaps": False,
                 "marker": {"size": 5 if col == "max_ns" else 4, "color": color}}
        if col != "max_ns":
            trace["line"] = {"color": color, "width": 2, "dash": {"p50_ns": "solid", "p90_ns": "dash",
                                                                  "p99_ns": "dot"}[col]}
        data.append(trace)
    return {"data": data, "layout": _layout(
        f"Latency over time{title_extra} ({what}; lines: percentiles per bin of completion time)",
        height=460, xaxis={"title": {"text": f"completion time ({unit})"}},
        yaxis={"title": {"text": "response time (ms)"}, "type": "log"})}


def _latency_points(points: pl.DataFrame, div: float, unit: str) -> tuple[list[dict], str]:
    """One WebGL trace per op: each I/O at (completion, response), or each cell at its centre
    (geometric, on the log axis) with its exact count."""
    cells = bool(points["cell_ns"].max())
    colors = op_colors(points["op"].unique().to_list())
    data = []
    for op in sorted(colors):
        o = points.filter(pl.col("op") == op)
        x = (o["end_ns"] + o["cell_ns"] // 2).to_numpy() / div
        lo, hi = o["response_ns"].to_numpy().astype(np.float64), o["response_top_ns"].to_numpy().astype(np.float64)
        y = (np.sqrt(np.maximum(lo, 1) * hi) if cells else hi) / 1e6
        data.append(_gl_points(f"{op} ({int(o['ios'].sum())} I/Os)", x, y, o["ios"].to_numpy(), colors[op], cells,
                               f"completion %{{x:.6~g}} {unit}<br>response %{{y:.4~g}} ms"))
    total = int(points["ios"].sum())
    what = (f"{total} I/Os in cells of {fmt_width(int(points['cell_ns'][0]))} x a quarter octave, exact counts"
            if cells else f"all {total} I/Os")
    return data, what


def typed(values, dtype: str) -> dict:
    """A plotly typed array ({dtype, bdata}: base64 of the little-endian values): 4-8 bytes a
    point in the page instead of 10-20 characters of JSON text."""
    return {"dtype": dtype, "bdata": base64.b64encode(np.ascontiguousarray(values, dtype=f"<{dtype}").tobytes())
            .decode("ascii")}


def untyped(values) -> list:
    """The values of a plotly data array, plain or typed (`typed`)."""
    if isinstance(values, dict) and "bdata" in values:
        return np.frombuffer(base64.b64decode(values["bdata"]), dtype=f"<{values['dtype']}").tolist()
    return list(values)


def _gl_points(name: str, x, y, ios, color: str, cells: bool, hover: str) -> dict:
    """A scattergl trace of points (every I/O) or of cells (marker area by count, hover count)."""
    y_type = "u4" if len(y) and np.all(np.mod(y, 1) == 0) and np.max(y) < 2 ** 32 and np.min(y) >= 0 else "f4"
    trace = {"type": "scattergl", "mode": "markers", "name": label(name), "x": typed(x, "f4"), "y": typed(y, y_type),
             "marker": {"size": 3, "color": color, "opacity": 0.6}, "hovertemplate": hover + "<extra>%{fullData.name}</extra>"}
    if cells:
        top = max(int(np.max(ios)), 1)
        trace["marker"] = {"size": typed(3 + 7 * np.sqrt(ios / top), "f4"), "color": color, "opacity": 0.75,
                           "symbol": "square"}
        trace["customdata"] = typed(ios, "u4")
        trace["hovertemplate"] = hover + "<br>%{customdata} I/Os in the cell<extra>%{fullData.name}</extra>"
    return trace


OP_FAMILY = {"R": ["#1f5f99", "#4e79a7", "#7aa6d1", "#a9c9e8"], "W": ["#c0392b", "#f28e2b", "#e15759", "#f5b97f"],
             "F": ["#6a3d9a", "#b07aa1"], "D": ["#5b5b5b", "#9d9d9d"], "N": ["#59a14f", "#8cd17d"]}
NAMED_OPS = {"read": "#4e79a7", "write": "#e15759", "flush": "#b07aa1", "discard": "#9d9d9d", "other": "#59a14f"}


def op_colors(ops: list[str]) -> dict[str, str]:
    """One colour per op: reads blue, writes red/orange, flushes purple, discards grey, each
    variant (RS, RA, WS, WSM...) its own shade of its family."""
    out, used = {}, {}
    for op in sorted(ops):
        if op in NAMED_OPS:
            out[op] = NAMED_OPS[op]
            continue
        family = next((c for c in op if c in OP_FAMILY), None)
        shades = OP_FAMILY.get(family) or PALETTE[5:]
        k = used.get(family, 0)
        used[family] = k + 1
        out[op] = shades[k % len(shades)]
    return out


def fig_offset(frame: pl.DataFrame | None, span_ns: int | None = None) -> dict | None:
    """LBA against start time, one colour per op, from the `offsets` table: every I/O as a
    WebGL point, or exact counts per cell (marker area and hover) past MAX_POINTS I/Os."""
    if frame is None or not frame.height:
        return None
    cells = bool(frame["cell_ns"].max())
    div, unit = time_unit(span_ns or int(frame["start_ns"].max() + frame["cell_ns"].max()) or 1)
    colors = op_colors(frame["op"].unique().to_list())
    data = []
    for op in sorted(colors):
        o = frame.filter(pl.col("op") == op)
        x = (o["start_ns"] + o["cell_ns"] // 2).to_numpy() / div
        y = (o["lba"] + o["cell_blocks"] // 2).to_numpy()
        data.append(_gl_points(f"{op} ({int(o['ios'].sum())} I/Os)", x, y, o["ios"].to_numpy(), colors[op], cells,
                               f"start %{{x:.6~g}} {unit}<br>LBA %{{y:,d}}"))
    total = int(frame["ios"].sum())
    what = (f"{total} I/Os in {frame.height} cells of {fmt_width(int(frame['cell_ns'][0]))} x "
            f"{int(frame['cell_blocks'][0])} blocks, exact counts" if cells else f"all {total} I/Os")
    return {"data": data, "layout": _layout(f"Offset (LBA) vs time ({what})", height=420, showlegend=True,
                                            margin={"l": 90, "r": 20, "t": 110, "b": 50},
                                            xaxis={"title": {"text": f"start time ({unit})"}},
                                            yaxis={"title": {"text": "LBA (blocks)"}, "tickformat": "~s"})}


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


def fig_cdf(traces: list[tuple[str, pl.DataFrame | None]], title: str = "Latency CDF") -> dict | None:
    """Each trace's `latency_cdf` table (every completed I/O, 1/32-octave steps)."""
    data = []
    for k, (name, frame) in enumerate(traces):
        if frame is not None and frame.height:
            data.append({"type": "scatter", "mode": "lines", "name": label(name),
                         "x": _r(frame["le_ns"].to_numpy() / 1e6), "y": _r(frame["fraction"].to_numpy(), 6),
                         "line": {"color": PALETTE[k % len(PALETTE)], "shape": "hv"}})
    if not data:
        return None
    return {"data": data, "layout": _layout(title, height=360, xaxis={"title": {"text": "latency (ms)"},
                                                                      "type": "log"},
                                            yaxis={"title": {"text": "fraction of I/Os at or below"},
                                                   "range": [0, 1.02]})}
