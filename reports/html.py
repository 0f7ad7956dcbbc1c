"""The HTML report: one self-contained file (plotly.js inlined, no network), tables made from
the same summary dict as the JSON output, plots computed from the canonical tables.

Safety: every string from a trace is escaped (html.escape for markup; figure JSON has
<, > and & as \\u escapes so it cannot close its <script>, and plotly label text is
entity-escaped so plotly shows tags as text). A Content-Security-Policy of default-src
'none' forbids every network request the page could make.

Size: plots are decimated (timeline binned per row once it has more than
TIMELINE_MAX_BARS bars, each bin keeping each category's exact time, so totals do not
change; CDF and rate series sampled), so the file stays near plotly.js's own 4.6 MB.
"""
from __future__ import annotations

import html
import json
import os

import numpy as np
import polars as pl

from scsitrace.model import Analysis
from . import views as views_mod

TIMELINE_MAX_BARS = 6000
TIMELINE_BINS = 400
CDF_POINTS = 1000
RATE_BINS = 200
HIST_BINS = 60

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#8c564b", "#17becf", "#7f7f7f"]
COMPONENT_COLORS = {"target": "#e15759", "initiator": "#4e79a7", "neither": "#bab0ac"}

CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; "
       "img-src data: blob:; font-src data:; connect-src 'none'")

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em auto;max-width:1200px;
color:#222;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table.t{border-collapse:collapse;margin:.6em 0;font-size:.9em}
table.t th,table.t td{border:1px solid #ddd;padding:.25em .6em}
table.t td.n{text-align:right;font-variant-numeric:tabular-nums}
table.t th{background:#f5f5f5;text-align:left}
.plot{width:100%;height:420px}.note{color:#555;font-size:.9em}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:1em}
#js-errors{color:#b00;white-space:pre-wrap}
"""

# Recorded before anything else runs and mirrored into the DOM (body data-errors, #js-errors),
# so a headless browser's DOM dump shows every error and blocked request, even late ones.
ERROR_TRAP = """
window.__errors=[];
function __note(m){window.__errors.push(String(m));var b=document.body;if(!b)return;
b.dataset.errors=String(window.__errors.length);var p=document.getElementById('js-errors');
if(p)p.textContent=window.__errors.join('\\n');}
window.addEventListener('error',function(e){__note(e.message||e);},true);
document.addEventListener('securitypolicyviolation',function(e){
__note('CSP blocked '+e.violatedDirective+' '+e.blockedURI);},true);
(function(){var o=console.error;console.error=function(){
__note(Array.prototype.join.call(arguments,' '));o.apply(console,arguments);};})();
"""

RENDER = """
(function(){
var figs=document.querySelectorAll('div.plot[data-figure]');var drawn=0;
figs.forEach(function(el){try{var f=JSON.parse(document.getElementById(el.dataset.figure).textContent);
Plotly.newPlot(el,f.data,f.layout,{responsive:true,displaylogo:false});drawn++;}
catch(e){__note(el.id+': '+e);}});
document.body.dataset.plots=String(drawn);
document.body.dataset.errors=String(window.__errors.length);
document.getElementById('js-errors').textContent=window.__errors.join('\\n');
})();
"""


def plotly_js() -> str:
    """plotly.min.js from the installed plotly package (never a CDN)."""
    import plotly
    path = os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js")
    with open(path, encoding="utf-8") as fh:
        return fh.read()


# ---------------------------------------------------------------- markup helpers

def esc(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def script_json(obj) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' characters at all."""
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False, default=_json_default)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _json_default(v):
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    return str(v)


def label(text) -> str:
    """Text for plotly labels: entity-escaped, so plotly displays tags instead of parsing them."""
    return html.escape("" if text is None else str(text), quote=False)


def fmt_ns(ns) -> str:
    from .terminal import fmt_ns as f
    return f(ns)


def fmt_num(v, digits=2) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(tid: str, key: str, columns: list[tuple[str, str, callable]], rows: list[dict]) -> str:
    """columns: (header, dict key, formatter). Each cell keeps the raw JSON value in data-value,
    so a test (or a script) can check the table against the JSON output cell by cell."""
    head = "".join(f"<th data-key=\"{esc(k)}\">{esc(h)}</th>" for h, k, _ in columns)
    body = []
    for r in rows:
        cells = []
        for _, k, f in columns:
            v = r.get(k)
            raw = json.dumps(v, default=_json_default)
            cls = ' class="n"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            cells.append(f"<td{cls} data-value=\"{esc(raw)}\">{esc(f(v))}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<table class=\"t\" id=\"{esc(tid)}\" data-json=\"{esc(key)}\"><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


class Page:
    """Sections of markup plus the figures they reference."""

    def __init__(self, title: str):
        self.title = title
        self.parts: list[str] = []
        self.figures: dict[str, dict] = {}

    def h2(self, text: str, anchor: str):
        self.parts.append(f"<h2 id=\"{esc(anchor)}\">{esc(text)}</h2>")

    def add(self, markup: str):
        self.parts.append(markup)

    def note(self, text: str):
        self.parts.append(f"<p class=\"note\">{esc(text)}</p>")

    def figure(self, fid: str, fig: dict | None, empty_text: str):
        """A plot when the figure has data, else a sentence saying why there is none."""
        if fig is None or not any(_has_points(tr) for tr in fig["data"]):
            self.note(empty_text)
            return
        self.figures[fid] = fig
        self.parts.append(f"<div class=\"plot\" id=\"plot-{esc(fid)}\" data-figure=\"fig-{esc(fid)}\"></div>")

    def render(self) -> str:
        figs = "".join(f"<script type=\"application/json\" id=\"fig-{esc(k)}\">{script_json(v)}</script>"
                       for k, v in self.figures.items())
        return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">"
                f"<title>{esc(self.title)}</title><style>{CSS}</style>"
                f"<script>{ERROR_TRAP}</script>"
                f"<script>{plotly_js()}</script></head><body>"
                f"<h1>{esc(self.title)}</h1>{''.join(self.parts)}"
                f"<pre id=\"js-errors\"></pre>{figs}<script>{RENDER}</script></body></html>\n")


def _has_points(trace: dict) -> bool:
    for key in ("x", "y", "values"):
        if key in trace and len(trace[key]) > 0:
            return True
    return False


def _layout(title: str, **kw) -> dict:
    base = {"title": {"text": label(title)}, "margin": {"l": 70, "r": 20, "t": 50, "b": 50},
            "legend": {"orientation": "h"}}
    base.update(kw)
    return base


# ---------------------------------------------------------------- figures

def colors(order: list[str], names: list[str]) -> dict[str, str]:
    """One color per name, by its place in `order` (the summary's categories), so the pie and
    the timeline agree; names not in `order` follow."""
    ranked = list(order) + [n for n in names if n not in order]
    return {n: PALETTE[ranked.index(n) % len(PALETTE)] for n in names}


def fig_timeline(analysis: Analysis, profile: str, order: list[str] = ()) -> dict | None:
    """Phase (or I/O) timeline, one row per target/device; totals per category exact."""
    seg = analysis.segments
    if seg is not None and seg.height and "start_ns" in seg.columns:
        col = "phase" if profile == "scsi" else "category"
        if col not in seg.columns:
            col = "phase"
        rows = seg.select(
            pl.when(pl.col("target").is_not_null()).then(pl.format("target {}", pl.col("target")))
            .otherwise(pl.lit("bus")).alias("row") if "target" in seg.columns else pl.lit("bus").alias("row"),
            pl.col(col).cast(pl.Utf8).fill_null("?").alias("what"), "start_ns", "end_ns")
        return _timeline_figure(rows, "Phase timeline per target", analysis.elapsed_ns, order)
    ios = views_mod.completed_ios(analysis)
    if not ios.height:
        return None
    rows = ios.select(pl.col("device").alias("row"), pl.col("op").fill_null("I/O").alias("what"), "start_ns", "end_ns")
    return _timeline_figure(rows, "I/O timeline per device (start to completion)", analysis.elapsed_ns)


def timeline_bars(rows: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """row, what, start_ns, dur_ns bars to draw. Adjacent bars of one kind in a row merge;
    above TIMELINE_MAX_BARS each row is cut into TIMELINE_BINS bins and each bin shows each
    kind's exact time inside it, stacked from the bin's start (shape approximate, totals exact)."""
    bars = rows.filter(pl.col("end_ns") > pl.col("start_ns")).sort("row", "start_ns")
    brk = ((pl.col("what") != pl.col("what").shift(1)) | (pl.col("start_ns") != pl.col("end_ns").shift(1))
           | (pl.col("row") != pl.col("row").shift(1))).fill_null(True)
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


def _timeline_figure(rows: pl.DataFrame, title: str, elapsed_ns: int, order: list[str] = ()) -> dict:
    bars = timeline_bars(rows, elapsed_ns)
    found = bars["what"].unique(maintain_order=True).to_list()
    color = colors(list(order), found)
    kinds = sorted(found, key=lambda k: list(order).index(k) if k in order else len(order))
    data = []
    for kind in kinds:
        b = bars.filter(pl.col("what") == kind)
        data.append({"type": "bar", "orientation": "h", "name": label(kind),
                     "y": [label(r) for r in b["row"].to_list()],
                     "x": (b["dur_ns"] / 1e6).to_list(), "base": (b["start_ns"] / 1e6).to_list(),
                     "marker": {"color": color[kind]},
                     "hovertemplate": "%{base:.3f} ms + %{x:.4f} ms<extra>" + label(kind) + "</extra>"})
    return {"data": data, "layout": _layout(title, barmode="overlay", xaxis={"title": {"text": "time (ms)"}},
                                            bargap=0.3)}


def fig_shares(summary: dict) -> dict | None:
    order = [c["name"] for c in summary.get("categories", [])]
    cats = [c for c in summary.get("categories", []) if c.get("total_ns")]
    if not cats:
        return None
    color = colors(order, [c["name"] for c in cats])
    return {"data": [{"type": "pie", "labels": [label(c["name"]) for c in cats],
                      "values": [c["total_ns"] for c in cats], "sort": False, "hole": 0.35,
                      "textposition": "inside", "marker": {"colors": [color[c["name"]] for c in cats]}}],
            "layout": _layout(f"Share of elapsed time ({summary.get('profile')})")}


def response_times(analysis: Analysis) -> np.ndarray:
    ios = views_mod.completed_ios(analysis)
    return ios["response_ns"].drop_nulls().to_numpy()


def fig_latency(analysis: Analysis) -> dict | None:
    rt = response_times(analysis)
    if not len(rt):
        return None
    ms = rt / 1e6
    counts, edges = np.histogram(ms, bins=HIST_BINS)
    srt = np.sort(ms)
    pick = np.unique(np.linspace(0, len(srt) - 1, min(len(srt), CDF_POINTS)).astype(int))
    return {"data": [
        {"type": "bar", "name": "I/Os", "x": ((edges[:-1] + edges[1:]) / 2).tolist(), "y": counts.tolist(),
         "width": float(edges[1] - edges[0]) if len(edges) > 1 else None, "marker": {"color": PALETTE[0]}},
        {"type": "scatter", "mode": "lines", "name": "CDF", "x": srt[pick].tolist(),
         "y": ((pick + 1) / len(srt)).tolist(), "yaxis": "y2", "line": {"color": PALETTE[2]}}],
        "layout": _layout(f"Response time, {len(rt)} completed I/Os", xaxis={"title": {"text": "ms"}},
                          yaxis={"title": {"text": "I/Os"}},
                          yaxis2={"title": {"text": "fraction"}, "overlaying": "y", "side": "right",
                                  "range": [0, 1]})}


def rate_series(analysis: Analysis) -> dict | None:
    """Per time bin: I/Os completed per second and MiB/s of their bytes."""
    ios = views_mod.completed_ios(analysis)
    if not ios.height or analysis.elapsed_ns <= 0:
        return None
    width = max(-(-analysis.elapsed_ns // RATE_BINS), 1)
    b = (ios["end_ns"].to_numpy() // width).clip(0, RATE_BINS - 1)
    n = np.bincount(b, minlength=RATE_BINS)
    nbytes = np.bincount(b, weights=ios["bytes"].fill_null(0).to_numpy(), minlength=RATE_BINS)
    t = (np.arange(RATE_BINS) * width + width / 2) / 1e6
    return {"t_ms": t.tolist(), "iops": (n / (width / 1e9)).tolist(),
            "mib_s": (nbytes / float(1 << 20) / (width / 1e9)).tolist(), "bin_ns": int(width),
            "has_bytes": bool(ios["bytes"].drop_nulls().len())}


def fig_rates(analysis: Analysis) -> dict | None:
    r = rate_series(analysis)
    if r is None:
        return None
    data = [{"type": "scatter", "mode": "lines", "name": "I/Os per second", "x": r["t_ms"], "y": r["iops"],
             "line": {"shape": "hv", "color": PALETTE[0]}}]
    if r["has_bytes"]:
        data.append({"type": "scatter", "mode": "lines", "name": "MBytes/sec (2^20)", "x": r["t_ms"],
                     "y": r["mib_s"], "yaxis": "y2", "line": {"shape": "hv", "color": PALETTE[1]}})
    return {"data": data, "layout": _layout(f"Bandwidth and IOPS over time ({r['bin_ns'] / 1e6:.3f} ms bins)",
                                            xaxis={"title": {"text": "time (ms)"}},
                                            yaxis={"title": {"text": "I/Os per second"}},
                                            yaxis2={"title": {"text": "MBytes/sec"}, "overlaying": "y",
                                                    "side": "right"})}


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


# ---------------------------------------------------------------- sections

SUMMARY_KEYS = {"source", "layer", "profile", "target", "elapsed_ns", "ios_completed", "data_bytes",
                "bandwidth_mib_s", "iops", "categories", "targets", "anomalies", "records", "notes"}


def _summary_rows(summary: dict) -> list[dict]:
    items = [("layer", summary.get("layer"), str), ("profile", summary.get("profile"), str),
             ("elapsed_ns", summary.get("elapsed_ns"), fmt_ns), ("ios_completed", summary.get("ios_completed"), str),
             ("data_bytes", summary.get("data_bytes"), str),
             ("bandwidth_mib_s", summary.get("bandwidth_mib_s"), lambda v: "unknown" if v is None else f"{v:.2f}"),
             ("iops", summary.get("iops"), lambda v: "" if v is None else f"{v:.1f}")]
    return [{"figure": k, "value": v, "shown": f(v) if v is not None else ""} for k, v, f in items]


def section_summary(page: Page, summary: dict):
    src = summary.get("source") or {}
    page.h2("Summary", "summary")
    src_rows = [{"key": k, "value": v} for k, v in src.items() if not isinstance(v, (dict, list))]
    src_rows += [{"key": f"meta.{k}", "value": v} for k, v in (src.get("meta") or {}).items()]
    page.add(table("source-table", "source", [("Source", "key", str), ("Value", "value", _plain)], src_rows))
    rows = _summary_rows(summary)
    page.add(table("summary-table", "summary", [("Figure", "figure", str), ("Value", "value", _plain)],
                   [{"figure": r["figure"], "value": r["value"]} for r in rows]))
    for note in summary.get("notes") or []:
        if note:
            page.note(note)


def _plain(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def section_phases(page: Page, summary: dict, analysis: Analysis):
    page.h2("Time in each phase", "phases")
    page.add(table("phase-table", "categories",
                   [("Phase", "name", str), ("Percentage", "percent", lambda v: f"{v:.2f} %"),
                    ("Normalized", "normalized_ns", fmt_ns), ("Total", "total_ns", fmt_ns)],
                   summary.get("categories") or []))
    page.figure("shares", fig_shares(summary), "No phase time to show.")
    if summary.get("targets"):
        page.add(table("targets-table", "targets",
                       [("Target", "target", str), ("I/Os", "ios_completed", str),
                        ("Connections", "connections", str), ("Busy", "busy_ns", fmt_ns),
                        ("Busy %", "busy_percent", lambda v: f"{v:.2f}"), ("Bytes", "data_bytes", _plain),
                        ("MBytes/sec", "bandwidth_mib_s", lambda v: "" if v is None else f"{v:.2f}")],
                       summary["targets"]))
    page.figure("timeline", fig_timeline(analysis, summary.get("profile") or analysis.default_profile,
                                         [c["name"] for c in summary.get("categories") or []]),
                "No segments or I/Os to draw a timeline from.")


def section_latency(page: Page, analysis: Analysis):
    page.h2("Response time and rates", "latency")
    page.figure("latency", fig_latency(analysis), "No completed I/Os: no response times.")
    page.figure("rates", fig_rates(analysis), "No completed I/Os: no rates over time.")


def section_attribution(page: Page, attr: dict | None):
    page.h2("Overhead attribution", "attribution")
    if attr is None:
        page.note("Overhead attribution applies to bus traces with REQ/ACK.")
        return
    for note in attr.get("notes", []):
        page.note(note)
    page.add(table("attribution-steps", "attribution.steps",
                   [("Step", "step", str), ("Component", "component", str), ("Count", "count", str),
                    ("Min", "min_ns", fmt_ns), ("Median", "median_ns", fmt_ns), ("Max", "max_ns", fmt_ns),
                    ("Total", "total_ns", fmt_ns)], attr.get("steps", [])))
    if attr.get("periodic"):
        page.add(table("attribution-periodic", "attribution.periodic",
                       [("Component", "component", str), ("Every (bytes)", "period_bytes", str),
                        ("Count", "count", str), ("Min", "min_ns", fmt_ns), ("Max", "max_ns", fmt_ns)],
                       attr["periodic"]))
    if attr.get("phases"):
        page.add(table("attribution-phases", "attribution.phases",
                       [("Phase", "phase", str), ("Target", "target_ns", fmt_ns),
                        ("Initiator", "initiator_ns", fmt_ns), ("Transfer", "transfer_ns", fmt_ns)],
                       attr["phases"]))
    totals = [{"component": k[:-3], "total_ns": v} for k, v in attr.get("totals", {}).items()]
    page.add(table("attribution-totals", "attribution.totals",
                   [("Component", "component", str), ("Time", "total_ns", lambda v: "n/a" if v is None else fmt_ns(v))],
                   totals))
    if attr.get("phases_only"):
        page.add(table("attribution-phases-only", "attribution.phases_only",
                       [("Phase", "phase", str), ("Count", "count", str), ("Min", "min_ns", fmt_ns),
                        ("Median", "median_ns", fmt_ns), ("Max", "max_ns", fmt_ns), ("Total", "total_ns", fmt_ns)],
                       attr["phases_only"]))
    page.figure("attribution", fig_attribution(attr), "Nothing to attribute.")


VIEW_COLUMNS = [("I/Os", "ios", str), ("Bytes", "bytes", str), ("Busy", "busy_ns", fmt_ns),
                ("MBytes/sec", "mib_s", lambda v: fmt_num(v)), ("I/Os/sec", "iops", lambda v: fmt_num(v, 1)),
                ("Mean response", "mean_response_ns", fmt_ns), ("Median response", "median_response_ns", fmt_ns)]


def section_views(page: Page, v: dict):
    page.h2("Bandwidth views", "views")
    page.note("MBytes/sec = bytes of the group's I/Os / time at least one of them was in flight (MByte = 2^20).")
    shown = False
    for key, first, title in (("by_request_size", [("Request size", "request_bytes", str), ("Op", "op", str)],
                               "By request size"),
                              ("by_device_count", [("Devices busy", "devices_busy", str)], "By number of devices busy"),
                              ("by_queue_depth", [("Queue depth", "queue_depth", str)], "By queue depth at issue")):
        if v.get(key):
            shown = True
            page.add(f"<h3>{esc(title)}</h3>")
            page.add(table(f"view-{key}", f"views.{key}", first + VIEW_COLUMNS, v[key]))
    if not shown:
        page.note("One request size, one device and one queue depth: no breakdown to show.")
    st = v.get("stalls") or {}
    page.add(f"<h3>Stalls: I/Os slower than {esc(st.get('factor'))} x the median of their kind "
             f"({esc(st.get('count', 0))})</h3>")
    if st.get("ios"):
        page.add(table("view-stalls", "views.stalls.ios",
                       [("I/O", "io", str), ("Device", "device", str), ("Op", "op", str), ("Bytes", "bytes", _plain),
                        ("Start", "start_ns", fmt_ns), ("End", "end_ns", fmt_ns), ("Response", "response_ns", fmt_ns),
                        ("x median", "times_median", lambda x: f"{x:.1f}")], st["ios"]))


def section_anomalies(page: Page, summary: dict, analysis: Analysis):
    page.h2("Anomalies", "anomalies")
    an = summary.get("anomalies") or {"count": 0, "by_kind": {}, "first": []}
    page.add(table("anomaly-kinds", "anomalies.by_kind", [("Kind", "kind", str), ("Count", "count", str)],
                   [{"kind": k, "count": n} for k, n in an.get("by_kind", {}).items()]))
    if an.get("first"):
        page.add(table("anomaly-first", "anomalies.first",
                       [("Time", "t_ns", fmt_ns), ("Kind", "kind", str), ("Detail", "detail", str),
                        ("Position", "position", str)], an["first"]))
    page.figure("anomalies", fig_anomalies(analysis), "No anomalies in this trace.")
    rec = summary.get("records") or {}
    page.add(table("records-table", "records", [("Records", "key", str), ("Value", "value", _plain)],
                   [{"key": k, "value": rec.get(k)} for k in ("read", "skipped")]))
    for ex in rec.get("skipped_examples", []):
        page.note(f"skipped {ex}")


def section_layer(page: Page, summary: dict):
    """The layer's own JSON keys (stages, srt, processes, ...), as generic tables."""
    extra = {k: v for k, v in summary.items() if k not in SUMMARY_KEYS}
    if not extra:
        return
    page.h2(f"{summary.get('layer', '')} layer details", "layer")
    for key, value in extra.items():
        rows = _as_rows(value)
        if not rows:
            continue
        cols = []
        for r in rows:
            cols += [c for c in r if c not in cols]
        page.add(f"<h3>{esc(key)}</h3>")
        page.add(table(f"layer-{key}", key, [(c, c, _plain) for c in cols], rows))


def _as_rows(value) -> list[dict]:
    flat = (str, int, float, bool, type(None))
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        return [{k: v for k, v in r.items() if isinstance(v, flat)} for r in value]
    if isinstance(value, dict) and value and all(isinstance(v, flat) for v in value.values()):
        return [{"key": k, "value": v} for k, v in value.items()]
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        return [{"key": k, **{kk: vv for kk, vv in v.items() if isinstance(vv, flat)}} for k, v in value.items()]
    return []


# ---------------------------------------------------------------- entry points

def attribution_for(analysis: Analysis, collected=None) -> dict | None:
    """Attribution for bus traces (None for other layers); `collected`: an attribution.Collector
    that tapped the analysis' read, else the transitions are read again."""
    if analysis.layer != "bus":
        return None
    from .attribution import attribute
    return attribute(analysis, collected)


def report_data(analysis: Analysis, summary: dict, attribution: dict | None = "auto",
                views: dict | None = None) -> dict:
    """Everything the page shows, as one JSON-able dict (what `report --json` writes)."""
    attr = attribution_for(analysis) if attribution == "auto" else attribution
    return {"summary": summary, "attribution": attr,
            "views": views if views is not None else views_mod.views(analysis)}


def build_page(analysis: Analysis, data: dict) -> Page:
    summary = data["summary"]
    path = (summary.get("source") or {}).get("path") or analysis.capture.path
    page = Page(f"scsitrace report: {os.path.basename(str(path))}")
    section_summary(page, summary)
    section_phases(page, summary, analysis)
    section_latency(page, analysis)
    section_attribution(page, data["attribution"])
    section_views(page, data["views"])
    section_anomalies(page, summary, analysis)
    section_layer(page, summary)
    return page


def write_report(path: str, analysis: Analysis, summary: dict, attribution: dict | None = "auto",
                 views: dict | None = None) -> dict:
    """Write the report; returns the data dict it shows (same numbers as the JSON)."""
    data = report_data(analysis, summary, attribution, views)
    text = build_page(analysis, data).render()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return data
