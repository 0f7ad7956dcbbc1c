"""Two traces side by side (before/after studies: BFR 512 vs 16 KB, two kernels, two drives).

The compared figures are the regression gate's (`regress.figures`), so `compare A B` shows
exactly what `regress` would check, with A as the baseline: value in A, value in B, B - A
and B / A. The HTML page puts both summaries next to each other and overlays the plots.
"""
from __future__ import annotations

import os

import numpy as np

from scsitrace.model import Analysis
from . import html as H
from . import regress
from . import views as views_mod


def figures_of(analysis: Analysis, data: dict) -> dict:
    rt = views_mod.completed_ios(analysis)["response_ns"].to_numpy()
    return regress.figures(data["summary"], data.get("attribution"), rt)


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
            "layout": H._layout("Share of elapsed time, A vs B", barmode="group",
                                yaxis={"title": {"text": "percent"}})}


def fig_cdf_ab(ra: np.ndarray, rb: np.ndarray, na: str, nb: str) -> dict | None:
    data = []
    for rt, name, color in ((ra, na, H.PALETTE[0]), (rb, nb, H.PALETTE[1])):
        if len(rt):
            srt = np.sort(rt / 1e6)
            pick = np.unique(np.linspace(0, len(srt) - 1, min(len(srt), H.CDF_POINTS)).astype(int))
            data.append({"type": "scatter", "mode": "lines", "name": H.label(name), "x": srt[pick].tolist(),
                         "y": ((pick + 1) / len(srt)).tolist(), "line": {"color": color}})
    if not data:
        return None
    return {"data": data, "layout": H._layout("Response time CDF, A vs B", xaxis={"title": {"text": "ms"}},
                                              yaxis={"title": {"text": "fraction"}, "range": [0, 1]})}


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
    page.add(H.table("compare-table", "compare.rows",
                     [("Figure", "figure", str), ("A", "a", lambda v: "" if v is None else f"{v:.6g}"),
                      ("B", "b", lambda v: "" if v is None else f"{v:.6g}"),
                      ("B - A", "delta", lambda v: "" if v is None else f"{v:+.6g}"),
                      ("B / A", "ratio", lambda v: "" if v is None else f"{v:.3f}")], comp["rows"]))
    page.figure("shares-ab", fig_shares_ab(data_a["summary"], data_b["summary"], na, nb), "No phase time.")
    ra = views_mod.completed_ios(analysis_a)["response_ns"].to_numpy()
    rb = views_mod.completed_ios(analysis_b)["response_ns"].to_numpy()
    page.figure("cdf-ab", fig_cdf_ab(ra, rb, na, nb), "No completed I/Os in either trace.")
    page.figure("attribution-ab", fig_attribution_ab(data_a.get("attribution"), data_b.get("attribution"), na, nb),
                "Attribution needs REQ/ACK in both traces.")
    page.h2("Side by side", "sides")
    left, right = H.Page(na), H.Page(nb)
    for sub, analysis, data, tag in ((left, analysis_a, data_a, "a"), (right, analysis_b, data_b, "b")):
        sub.add(f"<h3>{H.esc(sub.title)}</h3>")
        s = data["summary"]
        sub.add(H.table(f"summary-table-{tag}", f"{tag}.summary",
                        [("Figure", "figure", str), ("Value", "value", H._plain)],
                        [{"figure": r["figure"], "value": r["value"]} for r in H._summary_rows(s)]))
        sub.add(H.table(f"phase-table-{tag}", f"{tag}.categories",
                        [("Phase", "name", str), ("Percentage", "percent", lambda v: f"{v:.2f} %"),
                         ("Normalized", "normalized_ns", H.fmt_ns), ("Total", "total_ns", H.fmt_ns)],
                        s.get("categories") or []))
        sub.figure(f"timeline-{tag}", H.fig_timeline(analysis, s.get("profile") or analysis.default_profile,
                                                     [c["name"] for c in s.get("categories") or []]),
                   "No timeline.")
        sub.figure(f"rates-{tag}", H.fig_rates(analysis), "No completed I/Os.")
    page.add("<div class=\"cols\"><div>" + "".join(left.parts) + "</div><div>" + "".join(right.parts) + "</div></div>")
    page.figures.update(left.figures)
    page.figures.update(right.figures)
    return page


def write_compare(path: str, analysis_a: Analysis, data_a: dict, analysis_b: Analysis, data_b: dict) -> dict:
    comp = comparison(analysis_a, data_a, analysis_b, data_b)
    text = build_page(analysis_a, data_a, analysis_b, data_b, comp).render()
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return comp
