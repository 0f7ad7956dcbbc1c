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
from scsitrace import bandwidth as views_mod
from scsitrace import outputs
from . import html_series as S
from . import html_tables as T
from .html_figures import fig_anomalies, fig_attribution, fig_shares, fig_timeline, timeline_bars
from .html_page import (CDF_POINTS, PALETTE, Page, _has_points, _layout, esc, fmt_ns, fmt_num, label, plotly_js,
                        script_json, table)

__all__ = ["CDF_POINTS", "PALETTE", "Page", "_has_points", "_layout", "esc", "fmt_ns", "fmt_num", "label",
           "plotly_js", "script_json", "table", "timeline_bars", "fig_timeline"]


SUMMARY_KEYS = {"source", "layer", "profile", "target", "elapsed_ns", "ios_completed", "data_bytes",
                "bandwidth_mib_s", "iops", "categories", "targets", "anomalies", "records", "notes",
                "latency", "latency_histogram", "filters"}


def _summary_rows(summary: dict) -> list[dict]:
    """The headline figures as (figure label, raw value) rows (compare's side tables)."""
    return [{"figure": h["label"], "value": h["value"], "shown": h["shown"]} for h in T.headline(summary)]


def section_summary(page: Page, summary: dict, per_device: list[dict] | None = None):
    """Headline figures first (human labels and units), then one row per device or target,
    the notes, and the source (folded)."""
    filters = summary.get("filters") or {}
    if filters:     # what was left out comes before any figure
        page.add("<p class=\"filtered\" id=\"filters\">Filtered: "
                 + esc("; ".join(f"{k} {v}" for k, v in filters.items())) + "</p>")
    page.add(T.headline_markup(summary))
    for note in summary.get("notes") or []:
        if note:
            page.note(note)
    layer = summary.get("layer")
    if per_device:          # the layer's own per-device (per-target) table, as the JSON has it
        page.h2("Per target" if layer == "bus" else "Per device", "devices")
        page.note("MB/s and IOPS over the whole elapsed time (MB = 2^20 bytes).")
        first = "target" if layer == "bus" else "device"
        page.add(T.readable("device-rows", "per_device",
                            [{k: v for k, v in r.items() if not isinstance(v, (dict, list))} for r in per_device],
                            first=[first]))
    src = summary.get("source") or {}
    src_rows = [{"key": k, "value": v} for k, v in src.items() if not isinstance(v, (dict, list))]
    src_rows += [{"key": f"meta.{k}", "value": v} for k, v in (src.get("meta") or {}).items()]
    page.add("<details><summary>Source of this trace</summary>"
             + T.wrap(table("source-table", "source", [("Source", "key", str), ("Value", "value", _plain)],
                            src_rows)) + "</details>")


def _plain(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


PHASE_TITLES = {"bus": ("Time in each bus phase", "Phase"),
                "block": ("Where the Q2C time goes (btt's device overhead)", "Stage"),
                "usb": ("Time in each command stage, per device", "Stage"),
                "scsilog": ("Time in each command stage, per device", "Stage")}


def section_phases(page: Page, summary: dict, analysis: Analysis):
    title, what = PHASE_TITLES.get(summary.get("layer"), ("Time in each phase", "Phase"))
    page.h2(title, "phases")
    page.add(T.wrap(table("phase-table", "categories",
                          [(what, "name", str), ("Share", "percent", lambda v: f"{v:.2f} %"),
                           ("Per I/O", "normalized_ns", fmt_ns), ("Total", "total_ns", fmt_ns)],
                          summary.get("categories") or [])))
    page.figure("shares", fig_shares(summary), "No phase time to show.")
    if summary.get("targets"):
        page.add(T.wrap(table("targets-table", "targets",
                       [("Target", "target", str), ("I/Os", "ios_completed", str),
                        ("Connections", "connections", str), ("Busy", "busy_ns", fmt_ns),
                        ("Busy %", "busy_percent", lambda v: f"{v:.2f}"), ("Data", "data_bytes", T.fmt_bytes),
                        ("MB/s", "bandwidth_mib_s", lambda v: "" if v is None else f"{v:.2f}")],
                       summary["targets"])))
    page.figure("timeline", fig_timeline(analysis, summary.get("profile") or analysis.default_profile,
                                         [c["name"] for c in summary.get("categories") or []]),
                "No segments or I/Os to draw a timeline from.")


def _table(analysis: Analysis, name: str):
    """A declared table of the analysis, or None when its layer does not declare it."""
    return analysis.table(name) if name in analysis.tables else None


IN_FLIGHT = {"block": "dispatched (D), not completed (C)", "bus": "selected, not completed",
             "usb": "submitted, not completed", "scsilog": "dispatched, not done"}


def section_latency(page: Page, summary: dict, analysis: Analysis):
    page.h2("Latency", "latency")
    lat = [r for r in summary.get("latency") or [] if r.get("n")]
    if lat:
        page.add(T.wrap(table("latency-table", "latency",
                              [("Latency", "name", str), ("I/Os", "n", T.fmt_plain)]
                              + [(T.header(c), c, fmt_ns) for c in ("min_ns", "avg_ns", "p50_ns", "p90_ns",
                                                                      "p99_ns", "p999_ns", "max_ns")],
                              summary["latency"])))
    page.figure("latency-time", S.fig_latency_time(_table(analysis, "series_latency"),
                                                   points=_table(analysis, "latency_points")),
                "No completed I/Os: no latency over time.")
    page.add("<div class=\"cols\">")
    page.figure("latency-hist", S.fig_histogram(summary.get("latency_histogram") or []),
                "No latencies to count.")
    page.figure("latency-cdf", S.fig_cdf([("I/O response" if summary.get("layer") != "block" else "Q2C",
                                           _table(analysis, "latency_cdf"))]), "No completed I/Os: no CDF.")
    page.add("</div>")


def section_rates(page: Page, analysis: Analysis):
    page.h2("Throughput, queue depth and offsets over time", "rates")
    page.figure("rates", S.fig_rates([("", _table(analysis, "series_rates"), None)]),
                "No completed I/Os: no rates over time.")
    page.figure("queue-depth", S.fig_queue_depth([("", _table(analysis, "series_queue"), None)],
                                                 IN_FLIGHT.get(analysis.layer, "issued, not completed")),
                "No completed I/Os: no queue depth.")
    page.figure("offset", S.fig_offset(_table(analysis, "offsets")),
                "The I/Os of this trace carry no LBA." if analysis.ios_completed else
                "No completed I/Os: no offsets (the plot draws completed I/Os).")


def section_attribution(page: Page, attr: dict | None):
    if attr is None:          # a layer other than the bus: nothing to attribute
        return
    page.h2("Overhead attribution", "attribution")
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
            page.add(_capped(f"view-{key}", f"views.{key}", first + VIEW_COLUMNS, v[key]))
    if not shown:
        page.note("One request size, one device and one queue depth: no breakdown to show.")
    st = v.get("stalls") or {}
    page.add(f"<h3>Stalls: I/Os slower than {esc(st.get('factor'))} x the median of their kind "
             f"({esc(st.get('count', 0))})</h3>")
    if st.get("ios"):
        page.add(_capped("view-stalls", "views.stalls.ios",
                       [("I/O", "io", str), ("Device", "device", str), ("Op", "op", str), ("Size", "bytes", T.fmt_bytes),
                        ("Start", "start_ns", fmt_ns), ("End", "end_ns", fmt_ns), ("Response", "response_ns", fmt_ns),
                        ("x median", "times_median", lambda x: f"{x:.1f}")], st["ios"]))


def _capped(tid: str, key: str, columns: list, rows: list[dict]) -> str:
    """A table of its first MAX_ROWS rows (a note says how many the JSON has), in a box that
    scrolls sideways rather than widening the page."""
    out = T.wrap(table(tid, key, columns, rows[:T.MAX_ROWS]))
    if len(rows) > T.MAX_ROWS:
        out += f"<p class=\"note\">First {T.MAX_ROWS} of {len(rows)} rows; the JSON output has them all.</p>"
    return out


def section_anomalies(page: Page, summary: dict, analysis: Analysis):
    page.h2("Anomalies", "anomalies")
    an = summary.get("anomalies") or {"count": 0, "by_kind": {}, "first": []}
    if an.get("by_kind"):
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
        page.add(f"<h3>{esc(LAYER_TITLES.get(key, key.replace('_', ' ')))}</h3>")
        page.add(T.readable(f"layer-{key}", key, rows, first=["device", "process", "pid", "name", "key"]))


LAYER_TITLES = {"stages": "Stage times per device (btt)", "events": "Events by action",
                "overhead": "Device overhead: share of Q2C time per stage (btt)", "devices": "Devices",
                "processes": "Processes", "process_stages": "Stage times per process",
                "size_histogram": "Request sizes", "srt": "Service response time per command (SRT)",
                "commands": "Command pairing", "srt_histogram": "SRT histogram"}


def _as_rows(value) -> list[dict]:
    """A JSON value as table rows: a list of records (a record with a list of records inside,
    such as srt_histogram's buckets, gives one row per inner record, its outer fields
    repeated), a flat dict as key/value rows (nested parts left out), a dict of records."""
    flat = (str, int, float, bool, type(None))
    if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
        rows = []
        for r in value:
            outer = {k: v for k, v in r.items() if isinstance(v, flat)}
            inner = [v for v in r.values() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)]
            if inner:
                rows += [{**outer, **{k: v for k, v in x.items() if isinstance(v, flat)}} for x in inner[0]]
            else:
                rows.append(outer)
        return rows
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        return [{"key": k, **{kk: vv for kk, vv in v.items() if isinstance(vv, flat)}} for k, v in value.items()]
    if isinstance(value, dict) and value:
        return [{"key": k, "value": v} for k, v in value.items() if isinstance(v, flat)]
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
            "views": views if views is not None else views_mod.views(analysis),
            "per_device": summary.get("targets") if analysis.layer == "bus" else summary.get("devices") or []}


def section_timeline_link(page: Page, perfetto: str | None, trace: str) -> None:
    """Where to zoom: the Perfetto timeline written beside the page (a link relative to it), or
    the command that writes one."""
    page.h2("Timeline to zoom (Perfetto)", "perfetto")
    if perfetto:
        page.add(f'<p>Every I/O, phase and stage as slices on one timeline per device: <a href="{esc(perfetto)}">'
                 f'{esc(os.path.basename(perfetto))}</a>. Open it in ui.perfetto.dev ("Open trace file") to zoom '
                 'from the whole capture to one command; the file stays on your machine.</p>')
    else:
        page.note(f"For a timeline to zoom from the whole capture to one command: scsitrace report "
                  f"{trace} -o PAGE.html --perfetto TIMELINE.pftrace (or scsitrace export {trace} --perfetto "
                  "TIMELINE.pftrace), then open the file in ui.perfetto.dev.")


def build_page(analysis: Analysis, data: dict, perfetto: str | None = None) -> Page:
    summary = data["summary"]
    path = (summary.get("source") or {}).get("path") or analysis.capture.path
    page = Page(f"scsitrace report: {os.path.basename(str(path))}")
    section_summary(page, summary, data.get("per_device"))
    section_timeline_link(page, perfetto, str(path))
    section_latency(page, summary, analysis)
    section_rates(page, analysis)
    section_phases(page, summary, analysis)
    section_attribution(page, data["attribution"])
    section_views(page, data["views"])
    section_anomalies(page, summary, analysis)
    section_layer(page, summary)
    return page


def write_report(path: str, analysis: Analysis, summary: dict, attribution: dict | None = "auto",
                 views: dict | None = None, perfetto: str | None = None) -> dict:
    """Write the report; returns the data dict it shows (same numbers as the JSON). `perfetto`:
    a Perfetto timeline written beside it, linked from the page (relative to it)."""
    data = report_data(analysis, summary, attribution, views)
    link = None
    if perfetto and not outputs.is_stdout(path):
        link = os.path.relpath(os.path.abspath(perfetto), os.path.dirname(os.path.abspath(path)))
    text = build_page(analysis, data, link).render()
    with outputs.writing(path) as fh:
        fh.write(text)
    return data
