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

import os

from scsitrace.model import Analysis
from . import views as views_mod
from .html_figures import (fig_anomalies, fig_attribution, fig_latency, fig_rates, fig_shares, fig_timeline,
                           timeline_bars)
from .html_page import (CDF_POINTS, PALETTE, Page, _has_points, _layout, esc, fmt_ns, fmt_num, label, plotly_js,
                        script_json, table)

__all__ = ["CDF_POINTS", "PALETTE", "Page", "_has_points", "_layout", "esc", "fmt_ns", "fmt_num", "label",
           "plotly_js", "script_json", "table", "timeline_bars", "fig_timeline", "fig_rates"]


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
