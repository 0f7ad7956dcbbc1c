"""The HTML report's plots, computed from the canonical tables: the phase timeline (binned per
row once it has more than TIMELINE_MAX_BARS bars, each bin keeping each category's exact
time, so totals do not change), shares, attribution,
anomalies (the plots over time and of latency: html_series.py)."""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.model import Analysis
from scsitrace import bandwidth as views_mod
from .html_page import COMPONENT_COLORS, PALETTE, TIMELINE_BINS, TIMELINE_MAX_BARS, _layout, colors, label


def fig_timeline(analysis: Analysis, profile: str, order: list[str] = (), span_ns: int | None = None) -> dict | None:
    """Phase (or I/O) timeline, one row per target/device; totals per category exact."""
    seg = analysis.segments
    if seg is not None and seg.height and "start_ns" in seg.columns:
        col = "phase" if profile == "scsi" else "category"
        if col not in seg.columns:
            col = "phase"
        rows = seg.select(_row_expr(seg, analysis.layer), pl.col(col).cast(pl.Utf8).fill_null("?").alias("what"),
                          "start_ns", "end_ns")
        title = TIMELINE_TITLES.get(analysis.layer, "Timeline per device")
        return _timeline_figure(rows, title, analysis.elapsed_ns, order, span_ns)
    ios = views_mod.completed_ios(analysis)
    if not ios.height:
        return None
    rows = ios.select(pl.col("device").alias("row"), pl.col("op").fill_null("I/O").alias("what"), "start_ns", "end_ns")
    return _timeline_figure(rows, "I/O timeline per device (start to completion)", analysis.elapsed_ns, (), span_ns)


TIMELINE_TITLES = {"bus": "Phase timeline per target (bus-wide phases on the row 'bus')",
                   "block": "Busy timeline per device (Busy: at least one request between Q and C)",
                   "usb": "Command-stage timeline per device", "scsilog": "Command-stage timeline per device"}


def _row_expr(seg: pl.DataFrame, layer: str) -> pl.Expr:
    """The timeline row of a segment: its target ('target N'), else its device, else the
    layer (bus-wide phases such as BUS FREE and ARBITRATION on the bus)."""
    parts = []
    if "target" in seg.columns:
        parts.append(pl.when(pl.col("target").is_not_null()).then(pl.format("target {}", pl.col("target"))))
    if "device" in seg.columns:
        parts.append(pl.when(pl.col("device").cast(pl.Utf8) != "").then(pl.col("device").cast(pl.Utf8)))
    parts.append(pl.lit("bus" if layer == "bus" else "all"))
    return pl.coalesce(parts).alias("row")


def timeline_bars(rows: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """row, what, start_ns, dur_ns bars to draw. Adjacent bars of one kind in a row merge;
    above TIMELINE_MAX_BARS each row is cut into TIMELINE_BINS bins and each bin shows each
    kind's exact time inside it, stacked from the bin's start (shape approximate, totals exact)."""
    bars = rows.filter(pl.col("end_ns") > pl.col("start_ns")).sort("row", "start_ns")
    brk = ((pl.col("what") != pl.col("what").shift(1)) | (pl.col("start_ns") != pl.col("end_ns").shift(1))
           | (pl.col("row") != pl.col("row").shift(1))).fill_null(True)
    if bars.select(brk.sum()).item() > TIMELINE_MAX_BARS:   # too many bars even merged: bin (no group_by)
        return _binned(rows, max(elapsed_ns, 1))
    bars = (bars.with_columns(brk.cum_sum().alias("run"))
            .group_by("run", maintain_order=True)
            .agg(pl.col("row").first(), pl.col("what").first(), pl.col("start_ns").min(), pl.col("end_ns").max())
            .select("row", "what", "start_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns")))
    if bars.height <= TIMELINE_MAX_BARS:
        return bars
    return _binned(rows, max(elapsed_ns, 1))


def _binned(rows: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    width = -(-elapsed_ns // TIMELINE_BINS)
    s = rows["start_ns"].to_numpy()
    e = rows["end_ns"].to_numpy()
    b0, b1 = s // width, np.maximum(e - 1, s) // width
    n = (b1 - b0 + 1).astype(np.int64)
    idx = np.repeat(np.arange(len(s)), n)
    bins = b0[idx] + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))
    lo = np.maximum(s[idx], bins * width)
    hi = np.minimum(e[idx], (bins + 1) * width)
    pieces = pl.DataFrame({"row": rows["row"].gather(idx), "what": rows["what"].gather(idx),
                           "bin": bins, "dur_ns": hi - lo}).filter(pl.col("dur_ns") > 0)
    agg = pieces.group_by("row", "bin", "what").agg(pl.col("dur_ns").sum()).sort("row", "bin", "what")
    offset = pl.col("dur_ns").cum_sum().over("row", "bin") - pl.col("dur_ns")
    return agg.select("row", "what", (pl.col("bin") * width + offset).alias("start_ns"), "dur_ns")


def _timeline_figure(rows: pl.DataFrame, title: str, elapsed_ns: int, order: list[str] = (),
                     span_ns: int | None = None) -> dict:
    from .html_series import time_unit
    div, unit = time_unit(span_ns or elapsed_ns)
    bars = timeline_bars(rows, elapsed_ns)
    found = bars["what"].unique(maintain_order=True).to_list()
    color = colors(list(order), found)
    kinds = sorted(found, key=lambda k: list(order).index(k) if k in order else len(order))
    data = []
    for kind in kinds:
        b = bars.filter(pl.col("what") == kind)
        data.append({"type": "bar", "orientation": "h", "name": label(kind),
                     "y": [label(r) for r in b["row"].to_list()],
                     "x": (b["dur_ns"] / div).to_list(), "base": (b["start_ns"] / div).to_list(),
                     "marker": {"color": color[kind]},
                     "hovertemplate": f"%{{base:.4g}} {unit} + %{{x:.4g}} {unit}<extra>" + label(kind) + "</extra>"})
    nrows = bars["row"].n_unique()
    return {"data": data, "layout": _layout(title, barmode="overlay", xaxis={"title": {"text": f"time ({unit})"}},
                                            yaxis={"automargin": True, "type": "category"},
                                            height=max(260, 60 * nrows + 160), bargap=0.3)}


def fig_shares(summary: dict) -> dict | None:
    """The percentage table as bars sorted by share, each labelled with the table's value:
    the bars are the table's percent column, not a pie's own normalisation (btt's device
    overhead shares need not sum to 100)."""
    order = [c["name"] for c in summary.get("categories", [])]
    cats = sorted((c for c in summary.get("categories", []) if c.get("total_ns")), key=lambda c: c["percent"])
    if not cats:
        return None
    color = colors(order, [c["name"] for c in cats])
    return {"data": [{"type": "bar", "orientation": "h", "y": [label(c["name"]) for c in cats],
                      "x": [c["percent"] for c in cats], "text": [f"{c['percent']:.2f} %" for c in cats],
                      "textposition": "outside", "cliponaxis": False, "hoverinfo": "y+text",
                      "marker": {"color": [color[c["name"]] for c in cats]}}],
            "layout": _layout(SHARE_TITLES.get(summary.get("layer"), "Share of elapsed time")
                              + f" ({summary.get('profile')})", height=max(240, 34 * len(cats) + 120),
                              showlegend=False, margin={"l": 160, "r": 70, "t": 80, "b": 50},
                              xaxis={"title": {"text": "percent"}, "rangemode": "tozero"},
                              yaxis={"automargin": True, "type": "category"})}


SHARE_TITLES = {"bus": "Share of elapsed time per phase", "block": "Share of Q2C time per stage (not of elapsed time)",
                "usb": "Share of device time per command stage", "scsilog": "Share of device time per command stage"}


def fig_attribution(attr: dict) -> dict | None:
    steps = [s for s in attr.get("steps", []) if s.get("total_ns")]
    if not steps or not attr.get("available"):
        return None
    data = []
    for comp, color in COMPONENT_COLORS.items():
        mine = [s for s in steps if s["component"] == comp]
        if mine:
            data.append({"type": "bar", "orientation": "h", "name": comp, "marker": {"color": color},
                         "y": [label(s["step"]) for s in mine], "x": [s["total_ns"] / 1e6 for s in mine]})
    return {"data": data, "layout": _layout("Overhead per step, total over the trace (ms)", barmode="stack",
                                            height=max(420, 18 * len(steps) + 120),
                                            yaxis={"autorange": "reversed", "automargin": True},
                                            xaxis={"title": {"text": "ms"}})}


def fig_anomalies(analysis: Analysis) -> dict | None:
    an = analysis.anomalies
    if an is None or not an.height:
        return None
    an = an.sort("t_ns").head(20000)
    return {"data": [{"type": "scatter", "mode": "markers", "name": "anomalies",
                      "x": (an["t_ns"].fill_null(0) / 1e6).to_list(),
                      "y": [label(k) for k in an["kind"].to_list()],
                      "text": [label(d) for d in an["detail"].fill_null("").to_list()],
                      "marker": {"color": PALETTE[2], "size": 8}}],
            "layout": _layout("Anomalies over time", xaxis={"title": {"text": "time (ms)"}},
                              yaxis={"automargin": True})}
