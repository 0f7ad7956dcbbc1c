"""Two traces side by side (before/after studies: BFR 512 vs 16 KB, two kernels, two drives).

The compared figures are the regression gate's (`regress.figures`), so `compare A B` shows
exactly what `regress` would check, with A as the baseline: value in A, value in B, B - A
and B / A. The HTML page puts both summaries next to each other and overlays the plots.
"""
from __future__ import annotations

import os

import numpy as np

from scsitrace.model import Analysis
from scsitrace import outputs
from scsitrace.tables import percent_title
from . import html as H
from . import html_series as S
from . import regress


def figures_of(analysis: Analysis, data: dict) -> dict:
    return regress.figures(data["summary"], data.get("attribution"))


def rows(figs_a: dict, figs_b: dict) -> list[dict]:
    out = []
    for name in list(figs_a) + [n for n in figs_b if n not in figs_a]:
        a = figs_a.get(name, {}).get("value")
        b = figs_b.get(name, {}).get("value")
        kind = (figs_a.get(name) or figs_b.get(name))["kind"]
        out.append({"figure": name, "kind": kind, "a": a, "b": b,
                    "delta": None if a is None or b is None else b - a,
                    "ratio": None if a in (None, 0) or b is None else b / a})
    return out


def comparison(analysis_a: Analysis, data_a: dict, analysis_b: Analysis, data_b: dict) -> dict:
    return {"a": (data_a["summary"].get("source") or {}).get("path"),
            "b": (data_b["summary"].get("source") or {}).get("path"),
            "rows": rows(figures_of(analysis_a, data_a), figures_of(analysis_b, data_b))}


# ---------------------------------------------------------------- HTML

def figure_name(name: str) -> str:
    """A regression-gate figure name as a person reads it (percent.D2C -> D2C share)."""
    head, _, tail = name.partition(".")
    words = {"percent": "share", "normalized_ns": "per I/O", "bandwidth_mib_s": "Bandwidth (MB/s)",
             "iops": "IOPS", "response_ns": "response", "elapsed_ns": "Elapsed", "ios_completed": "I/Os"}
    if tail:
        return f"{tail} {words.get(head, head)}" if head in ("percent", "normalized_ns") else \
            f"{words.get(head, head)} {tail}"
    return words.get(head, head.replace("_", " "))


def _cell(v, row):
    return _fmt(row["kind"], v)


def _delta(v, row):
    if v is None:
        return ""
    text = _fmt(row["kind"], abs(v))
    return ("+" if v > 0 else "-" if v < 0 else "") + text


def _fmt(kind, v):
    if v is None:
        return ""
    if kind == "percent":
        return f"{v:.2f} %"
    if kind == "time":
        return H.fmt_ns(v)
    return f"{v:.3f}"


def fig_shares_ab(sa: dict, sb: dict, na: str, nb: str) -> dict:
    names = [c["name"] for c in sa.get("categories", [])]
    names += [c["name"] for c in sb.get("categories", []) if c["name"] not in names]
    pa = {c["name"]: c["percent"] for c in sa.get("categories", [])}
    pb = {c["name"]: c["percent"] for c in sb.get("categories", [])}
    return {"data": [{"type": "bar", "name": H.label(na), "x": [H.label(n) for n in names],
                      "y": [pa.get(n, 0.0) for n in names], "marker": {"color": H.PALETTE[0]}},
                     {"type": "bar", "name": H.label(nb), "x": [H.label(n) for n in names],
                      "y": [pb.get(n, 0.0) for n in names], "marker": {"color": H.PALETTE[1]}}],
            "layout": H._layout(_shares_title(sa, sb) + ", A vs B", barmode="group",
                                yaxis={"title": {"text": "percent"}})}


def _shares_title(sa: dict, sb: dict) -> str:
    ta, tb = percent_title(sa.get("categories") or []), percent_title(sb.get("categories") or [])
    return ta if ta == tb else f"{ta} (A), {tb} (B)"


def fig_cdf_ab(ca, cb, na: str, nb: str) -> dict | None:
    return S.fig_cdf([(na, ca), (nb, cb)], "Latency CDF, A vs B (one axis)")


def fig_histogram_ab(sa: dict, sb: dict, na: str, nb: str) -> dict | None:
    """Both traces' latency histograms on one axis: the first latency of each (bus, usb,
    kernel log: I/O response; block: Q2C), same buckets."""
    rows = []
    for s, n in ((sa, na), (sb, nb)):
        hist = s.get("latency_histogram") or []
        first = hist[0]["name"] if hist else None
        rows += [{**r, "name": n if first == "response" else f"{n} ({first})"} for r in hist if r["name"] == first]
    return S.fig_histogram(rows, ", A vs B")


def shared_axes(figs: list[dict | None], x: bool = True, y: bool = True):
    """Give the figures one x range and one y range (the union of theirs), so A and B side by
    side are read on the same scale."""
    figs = [f for f in figs if f]
    for axis, on in (("x", x), ("y", y)):
        if not on:
            continue
        vals = []
        for f in figs:
            for tr in f["data"]:
                if tr.get("orientation") == "h" and axis == "x":
                    vals += [b + w for b, w in zip(tr.get("base", []), tr.get("x", []))] + list(tr.get("base", []))
                elif not (tr.get("orientation") == "h" and axis == "y"):
                    vals += [v for v in S.untyped(tr.get(axis, [])) if isinstance(v, (int, float))]
        if not vals:
            continue
        lo, hi = min(vals), max(vals)
        for f in figs:
            ax = f["layout"].setdefault(f"{axis}axis", {})
            if ax.get("type") == "category" or ax.get("range"):
                continue
            if ax.get("type") == "log":
                pos = [v for v in vals if v > 0]
                if pos:
                    ax["range"] = [float(np.log10(min(pos))) - 0.05, float(np.log10(max(pos))) + 0.05]
            else:
                pad = (hi - lo) * 0.03 or 1
                ax["range"] = [min(lo, 0) if axis == "y" else lo, hi + pad]


def fig_attribution_ab(aa: dict | None, ab: dict | None, na: str, nb: str) -> dict | None:
    if not (aa and ab and aa.get("available") and ab.get("available")):
        return None
    keys = ["target_ns", "initiator_ns", "neither_ns", "transfer_ns"]
    return {"data": [{"type": "bar", "name": H.label(n), "x": [k[:-3] for k in keys],
                      "y": [(a["totals"][k] or 0) / 1e6 for k in keys], "marker": {"color": c}}
                     for a, n, c in ((aa, na, H.PALETTE[0]), (ab, nb, H.PALETTE[1]))],
            "layout": H._layout("Attributed time per component (ms), A vs B", barmode="group")}


def build_page(analysis_a: Analysis, data_a: dict, analysis_b: Analysis, data_b: dict, comp: dict) -> H.Page:
    na = "A: " + os.path.basename(str(comp["a"] or analysis_a.capture.path))
    nb = "B: " + os.path.basename(str(comp["b"] or analysis_b.capture.path))
    page = H.Page(f"scsitrace compare: {na[3:]} vs {nb[3:]}")
    page.h2("Figures", "figures")
    page.add(H.T.wrap(H.table("compare-table", "compare.rows",
                              [("Figure", "figure", figure_name),
                               ("A", "a", None), ("B", "b", None), ("B - A", "delta", None),
                               ("B / A", "ratio", lambda v: "" if v is None else f"{v:.3f}")], comp["rows"],
                              formats={"a": _cell, "b": _cell, "delta": _delta})))
    sa, sb = data_a["summary"], data_b["summary"]
    page.figure("shares-ab", fig_shares_ab(sa, sb, na, nb), "No phase time.")
    ea = int(sa.get("elapsed_ns") or analysis_a.elapsed_ns or 0)
    eb = int(sb.get("elapsed_ns") or analysis_b.elapsed_ns or 0)
    pair = ((na, analysis_a, H.PALETTE[0]), (nb, analysis_b, H.PALETTE[1]))
    page.h2("A and B on the same axes", "overlaid")
    page.figure("cdf-ab", fig_cdf_ab(H._table(analysis_a, "latency_cdf"), H._table(analysis_b, "latency_cdf"), na, nb),
                "No completed I/Os in either trace.")
    page.figure("hist-ab", fig_histogram_ab(sa, sb, na, nb), "No latencies in either trace.")
    page.figure("rates-ab", S.fig_rates([(n, H._table(a, "series_rates"), c) for n, a, c in pair]),
                "No completed I/Os.")
    page.figure("queue-ab", S.fig_queue_depth([(n, H._table(a, "series_queue"), c) for n, a, c in pair]),
                "No completed I/Os.")
    page.figure("attribution-ab", fig_attribution_ab(data_a.get("attribution"), data_b.get("attribution"), na, nb),
                "Attribution needs REQ/ACK in both traces.")
    page.h2("Side by side (same axes)", "sides")
    left, right = H.Page(na), H.Page(nb)
    span = max(ea, eb)              # one time unit for both sides
    timelines = [H.fig_timeline(a, d["summary"].get("profile") or a.default_profile,
                                [c["name"] for c in d["summary"].get("categories") or []], span)
                 for a, d in ((analysis_a, data_a), (analysis_b, data_b))]
    shared_axes(timelines, y=False)
    lat = [S.fig_latency_time(H._table(a, "series_latency"), span_ns=span, points=H._table(a, "latency_points"))
           for _, a, _ in pair]
    shared_axes(lat)
    offsets = [S.fig_offset(H._table(a, "offsets"), span) for _, a, _ in pair]
    shared_axes(offsets)
    for k, (sub, data, tag) in enumerate(((left, data_a, "a"), (right, data_b, "b"))):
        sub.add(f"<h3>{H.esc(sub.title)}</h3>")
        s = data["summary"]
        sub.add(H.T.wrap(H.table(f"summary-table-{tag}", f"{tag}.summary",
                                 [("Figure", "figure", str), ("Value", "shown", str)],
                                 H._summary_rows(s))))
        sub.add(H.T.wrap(H.table(f"phase-table-{tag}", f"{tag}.categories",
                                 [("Phase", "name", str), ("Share", "percent", lambda v: f"{v:.2f} %"),
                                  ("Per I/O", "normalized_ns", H.fmt_ns), ("Total", "total_ns", H.fmt_ns)],
                                 s.get("categories") or [])))
        sub.figure(f"timeline-{tag}", timelines[k], "No timeline.")
        sub.figure(f"latency-time-{tag}", lat[k], "No completed I/Os.")
        sub.figure(f"offset-{tag}", offsets[k], "No LBAs.")
    page.add("<div class=\"cols\"><div>" + "".join(left.parts) + "</div><div>" + "".join(right.parts) + "</div></div>")
    page.figures.update(left.figures)
    page.figures.update(right.figures)
    return page


def write_compare(path: str, analysis_a: Analysis, data_a: dict, analysis_b: Analysis, data_b: dict) -> dict:
    comp = comparison(analysis_a, data_a, analysis_b, data_b)
    text = build_page(analysis_a, data_a, analysis_b, data_b, comp).render()
    with outputs.writing(path) as fh:
        fh.write(text)
    return comp
