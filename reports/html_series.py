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
    if span_ns < 2e9:          # 1999 ms at most; past that seconds (never "18k ms")
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


def latency_ticks(ms_values) -> dict:
    """A log axis in milliseconds labelled 1-2-5 in engineering units ("50 µs", "2 ms",
    "1 s"), instead of plotly's bare digits ("3 4 5 0.1 2") between powers of ten."""
    v = np.asarray([x for x in ms_values if x is not None and np.isfinite(x) and x > 0], np.float64)
    if not len(v):
        return {"type": "log"}
    lo, hi = np.log10(v.min() * 1e6), np.log10(v.max() * 1e6)        # in ns
    vals = [m * 10.0 ** e for e in range(max(int(np.floor(lo)) - 2, 0), int(np.ceil(hi)) + 2) for m in (1, 2, 5)]
    return {"type": "log", "tickvals": [t / 1e6 for t in vals], "ticktext": [fmt_width(int(round(t))) for t in vals]}


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
        below = _legend_below(len(traces), 400)
        return {"data": data, "layout": _layout(
            f"IOPS over time ({bins} bins of completion time; no byte counts in this trace)", height=360 + 40 * bool(below),
            xaxis={"title": {"text": f"time ({unit})"}},
            yaxis={"title": {"text": "I/Os per second"}, "rangemode": "tozero", "tickformat": "~s"}, **below)}
    below = _legend_below(len(traces), 520)
    return {"data": data, "layout": _layout(
        f"IOPS and MB/s over time ({bins} bins of completion time; MB = 2^20 bytes)", height=480 + 40 * bool(below),
        xaxis={"title": {"text": f"time ({unit})"}, "anchor": "y2"},
        yaxis={"title": {"text": "I/Os per second"}, "domain": [0.56, 1], "anchor": "x", "rangemode": "tozero",
               "tickformat": "~s"},
        yaxis2={"title": {"text": "MB/s"}, "domain": [0, 0.44], "anchor": "x", "rangemode": "tozero",
                "tickformat": ",~r"}, **below)}


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
    below = _legend_below(len(traces), 400)
    return {"data": data, "layout": _layout(
        f"Queue depth over time (I/Os {what}, {_bin_text(traces[0][1])} bins)", height=360 + 40 * bool(below),
        xaxis={"title": {"text": f"time ({unit})"}},
        yaxis={"title": {"text": "I/Os in flight"}, "rangemode": "tozero"}, **below)}


def _legend_below(n_traces: int, height: int) -> dict:
    """Several traces (compare: A and B): their legend wraps to two rows, so it goes below the
    plot, clear of the title, 70 px down (under the x axis title)."""
    if n_traces < 2:
        return {}
    top, bottom = 60, 130
    return {"legend": {"orientation": "h", "yanchor": "top", "y": -70 / (height - top - bottom), "x": 0},
            "margin": {"l": 70, "r": 20, "t": top, "b": bottom}}


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
    for name, col, color in (("p50", "p50_ns", "#111111"), ("p90", "p90_ns", "#6a3d9a"),
                             ("p99", "p99_ns", "#b8860b"), ("slowest", "max_ns", "#8a97a4")):
        if frame[col].null_count() == frame.height or (col == "max_ns" and data):
            continue
        y = [None if v is None else round(v / 1e6, 6) for v in frame[col].to_list()]
        trace = {"type": "scattergl" if data else "scatter", "name": f"{name} per {_bin_text(frame)}", "x": x, "y": y,
                 "mode": "markers" if col == "max_ns" else _mode(len(x)), "connectgaps": False,
                 "marker": {"size": 5 if col == "max_ns" else 4, "color": color}}
        if col != "max_ns":
            trace["line"] = {"color": color, "width": 3 if data else 2, "dash": {"p50_ns": "solid", "p90_ns": "dash",
                                                                  "p99_ns": "dot"}[col]}
        data.append(trace)
    shown = [y for t in data for y in untyped(t["y"])]
    if data and data[0]["type"] == "scattergl" and points["cell_ns"].max():      # cells: their edges too
        shown += (points["response_ns"].clip(1) / 1e6).to_list() + (points["response_top_ns"] / 1e6).to_list()
    return {"data": data, "layout": _layout(
        f"Latency over time{title_extra}", f"{what}; lines: percentiles per bin of completion time",
        height=460, legend=GL_LEGEND, xaxis={"title": {"text": f"completion time ({unit})"}},
        yaxis={"title": {"text": "response time"}, **latency_ticks(shown)})}


def _latency_points(points: pl.DataFrame, div: float, unit: str) -> tuple[list[dict], str]:
    """Each I/O at (completion, response), one WebGL trace per op, or each cell at its centre
    (geometric, on the log axis) with its exact counts."""
    cells = bool(points["cell_ns"].max())
    x = (points["end_ns"] + points["cell_ns"] // 2).to_numpy() / div
    lo, hi = points["response_ns"].to_numpy().astype(np.float64), points["response_top_ns"].to_numpy().astype(np.float64)
    y = (np.sqrt(np.maximum(lo, 1) * hi) if cells else hi) / 1e6
    data = op_traces(points, x, y, f"completion %{{x:.6~g}} {unit}<br>response %{{y:.4~g}} ms")
    total = int(points["ios"].sum())
    what = (f"{total:,} I/Os in cells of {fmt_width(int(points['cell_ns'][0]))} x a quarter octave, exact counts; "
            "a cell takes the colour of its most frequent op" if cells else f"every one of the {total:,} I/Os")
    return data, what


def op_traces(frame: pl.DataFrame, x: np.ndarray, y: np.ndarray, hover: str) -> list[dict]:
    """WebGL traces, one per op (legend: the op's I/Os in `frame`): every I/O a point; or,
    when the frame holds cells (cell_ns > 0), each cell one marker at (x, y), its area by its
    I/Os, in the colour of its most frequent op (ops overlaid would hide each other), its
    hover the exact count of each op."""
    colors = op_colors(frame["op"].unique().to_list())
    per_op = dict(frame.group_by("op").agg(pl.col("ios").sum()).iter_rows())
    if not frame["cell_ns"].max():
        return [_gl_points(f"{op} ({per_op[op]:,} I/Os)", x[mask], y[mask], colors[op], hover)
                for op in sorted(colors) for mask in [(frame["op"] == op).to_numpy()]]
    cells = (frame.select("op", "ios").with_columns(x=pl.Series(x), y=pl.Series(y))
             .sort("ios", "op", descending=[True, False])
             .group_by("x", "y", maintain_order=True)
             .agg(pl.col("op").first().alias("top"), pl.col("ios").sum().alias("total"),
                  pl.concat_str(pl.col("op"), pl.lit(" "), pl.col("ios").cast(pl.Utf8)).str.join(", ").alias("text"))
             .sort("x", "y"))
    biggest = max(int(cells["total"].max()), 1)
    data = []
    for op in sorted(colors):
        c = cells.filter(pl.col("top") == op)
        trace = _gl_points(f"{op} ({per_op[op]:,} I/Os)", c["x"].to_numpy(), c["y"].to_numpy(), colors[op],
                           hover + "<br>%{customdata} I/Os in the cell: %{text}")
        trace["marker"].update(size=typed(3 + 7 * np.sqrt(c["total"].to_numpy() / biggest), "f4"), opacity=0.8,
                               symbol="square")
        trace["customdata"] = typed(c["total"].to_numpy(), "u4")
        trace["text"] = [label(t) for t in c["text"].to_list()]
        data.append(trace)
    return data


# legend symbols of a readable size whatever the size of the plotted points
GL_LEGEND = {"orientation": "h", "yanchor": "bottom", "y": 1.01, "x": 0, "itemsizing": "constant"}


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


def _point_marker(n: int) -> dict:
    """Points big and solid while few (64 I/Os must be seen), small and see-through when they
    are many (overlaps show as density)."""
    for most, size, opacity in ((2_000, 6, 0.85), (20_000, 4, 0.7), (100_000, 3, 0.55)):
        if n <= most:
            return {"size": size, "opacity": opacity}
    return {"size": 2, "opacity": 0.5}


def _gl_points(name: str, x, y, color: str, hover: str) -> dict:
    """A scattergl trace of markers at (x, y): time as float32 (7 digits: 1 µs in 10 s); y
    (LBAs: whole numbers) as uint32, or float64 past 2^32 (exact to 2^53), else (response
    times in ms) float32."""
    whole = bool(len(y)) and np.all(np.mod(y, 1) == 0) and np.min(y) >= 0
    y_type = ("u4" if np.max(y) < 2 ** 32 else "f8") if whole else "f4"
    return {"type": "scattergl", "mode": "markers", "name": label(name), "x": typed(x, "f4"),
            "y": typed(y, y_type),
            "marker": {**_point_marker(len(x)), "color": color},
            "hovertemplate": hover + "<extra>%{fullData.name}</extra>"}


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
    WebGL point, or exact counts per cell past MAX_POINTS I/Os (`op_traces`)."""
    if frame is None or not frame.height:
        return None
    cells = bool(frame["cell_ns"].max())
    div, unit = time_unit(span_ns or int(frame["start_ns"].max() + frame["cell_ns"].max()) or 1)
    x = (frame["start_ns"] + frame["cell_ns"] // 2).to_numpy() / div
    y = (frame["lba"] + frame["cell_blocks"] // 2).to_numpy()
    data = op_traces(frame, x, y, f"start %{{x:.6~g}} {unit}<br>LBA %{{y:,d}}")
    total = int(frame["ios"].sum())
    what = (f"{total:,} I/Os in cells of {fmt_width(int(frame['cell_ns'][0]))} x {int(frame['cell_blocks'][0]):,} "
            "blocks, exact counts; a cell takes the colour of its most frequent op" if cells
            else f"every one of the {total:,} I/Os")
    return {"data": data, "layout": _layout("Offset (LBA) vs time", what, height=440, showlegend=True,
                                            legend=GL_LEGEND, margin={"l": 90, "r": 20, "t": 125, "b": 50},
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
    shown = [x for t in data for x in t["x"]]
    return {"data": data, "layout": _layout(title, height=360, xaxis={"title": {"text": "latency"},
                                                                      **latency_ticks(shown)},
                                            yaxis={"title": {"text": "fraction of I/Os at or below"},
                                                   "range": [0, 1.02]})}
