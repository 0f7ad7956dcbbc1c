"""The HTML report's page: a self-contained document (plotly.js inlined, a
Content-Security-Policy that forbids every network request), escaping of every string from
a trace (html.escape for markup; figure JSON with <, > and & as \\u escapes so it cannot
close its <script>; plotly label text entity-escaped), number formats and plain tables."""
from __future__ import annotations

import functools
import html
import json
import os

import numpy as np

from . import units


TIMELINE_MAX_BARS = 2500
TIMELINE_BINS = 200
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
table.t{border-collapse:collapse;margin:.6em 0;font-size:.88em}
table.t th,table.t td{border:1px solid #ddd;padding:.25em .6em;white-space:nowrap}
.tw{max-width:100%;overflow-x:auto}
.cards{display:flex;flex-wrap:wrap;gap:.6em;margin:1em 0}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em .9em;min-width:8.5em;background:#fafbfc}
.card .v{font-size:1.35em;font-weight:600;font-variant-numeric:tabular-nums;white-space:nowrap}
.card .l{color:#555;font-size:.85em}
.filtered{background:#fff4d6;border:1px solid #e8c860;border-radius:4px;padding:.35em .7em}
details{margin:.6em 0}summary{cursor:pointer;color:#444}
table.t td.n{text-align:right;font-variant-numeric:tabular-nums}
table.t th{background:#f5f5f5;text-align:left}
.plot{width:100%;height:420px}.note{color:#555;font-size:.9em}
.cols{display:grid;grid-template-columns:minmax(0,1fr) minmax(0,1fr);gap:1em}
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


PLOTLY_ASSET = os.path.join(os.path.dirname(os.path.abspath(__file__)), "assets", "plotly-scsitrace.min.js")
PLOTLY_VERSION = "4.1.1"   # npm plotly.js, built by assets/build/ (MIT, assets/plotly.LICENSE)


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """plotly.js with the trace types the report draws (bar, pie, scatter and WebGL's
    scattergl: 1.6 MB instead of the full bundle's 4.7 MB), shipped in reports/assets/ and
    inlined (never a CDN)."""
    with open(PLOTLY_ASSET, encoding="utf-8") as fh:
        return fh.read()


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
    """A time with its unit (s, ms, µs, ns)."""
    return units.fmt_ns(ns, micro="µs")


def fmt_num(v, digits=2) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def table(tid: str, key: str, columns: list[tuple[str, str, callable]], rows: list[dict],
          formats: dict | None = None) -> str:
    """columns: (header, dict key, formatter). Each cell keeps the raw JSON value in data-value,
    so a test (or a script) can check the table against the JSON output cell by cell.
    formats: {dict key: f(value, row)} for cells whose format depends on their row."""
    formats = formats or {}
    head = "".join(f"<th data-key=\"{esc(k)}\">{esc(h)}</th>" for h, k, _ in columns)
    body = []
    for r in rows:
        cells = []
        for _, k, f in columns:
            v = r.get(k)
            raw = json.dumps(v, default=_json_default)
            cls = ' class="n"' if isinstance(v, (int, float)) and not isinstance(v, bool) else ""
            shown = formats[k](v, r) if k in formats else f(v)
            cells.append(f"<td{cls} data-value=\"{esc(raw)}\">{esc(shown)}</td>")
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
        height = int(fig.get("layout", {}).get("height") or 420)
        self.parts.append(f"<div class=\"plot\" id=\"plot-{esc(fid)}\" data-figure=\"fig-{esc(fid)}\" "
                          f"style=\"height:{height}px\"></div>")

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
        value = trace.get(key)
        if isinstance(value, dict):          # a typed array: {dtype, bdata (base64)}
            value = value.get("bdata")
        if value is not None and len(value) > 0:
            return True
    return False


def _layout(title: str, subtitle: str | None = None, **kw) -> dict:
    """A figure's layout: its title (short: plotly does not wrap it), the detail in a smaller
    subtitle line below it, the legend in a row between them and the plot."""
    head = {"text": label(title), "font": {"size": 15}}
    if subtitle:
        head["subtitle"] = {"text": label(subtitle), "font": {"size": 12, "color": "#555"}}
    base = {"title": head, "margin": {"l": 70, "r": 20, "t": 115 if subtitle else 80, "b": 50},
            "legend": {"orientation": "h", "yanchor": "bottom", "y": 1.0, "x": 0}, "font": {"size": 12}}
    base.update(kw)
    return base


def colors(order: list[str], names: list[str]) -> dict[str, str]:
    """One color per name, by its place in `order` (the summary's categories), so the pie and
    the timeline agree; names not in `order` follow."""
    ranked = [n for n in list(order) + [n for n in names if n not in order] if n not in QUIET]
    return {n: QUIET.get(n) or PALETTE[ranked.index(n) % len(PALETTE)] for n in names}


# time in which nothing happens: light grey, so the busy time stands out
QUIET = {"Idle": "#dcdcdc", "IDLE": "#dcdcdc", "GAP": "#c9c9c9", "Bus Free": "#dcdcdc", "BUS FREE": "#dcdcdc"}
