"""The HTML report's plots over time (reports/html_series.py) render the layer's declared
tables (the engine's figures are tested in tests/test_series.py), and the reports
themselves on real inputs of every layer: at most 1.5 MB, headline figures with labels and
units (no raw JSON keys shown), timelines with one row per device, every figure with data and
a bounded number of points, compare on shared axes."""
from __future__ import annotations

import base64

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from scsitrace import cli
from scsitrace.reports.html_page import plotly_js

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"
PLOTLY_BYTES = len(plotly_js().encode())
MAX_BYTES = PLOTLY_BYTES + 400_000        # a small trace's page: plotly.js and 400 kB of report
INPUTS = {"bus": REPO / "fixtures" / "bus" / "table3-l1" / "trace.ancot",
          "block": CAPTURED / "lsi_seqread32k" / "lsi_seqread32k.blktrace.0",
          "usb": CAPTURED / "usb_seqread32k" / "usbmon.txt",
          "scsilog": CAPTURED / "lsi_seqread32k" / "ftrace.txt"}


class Visible(HTMLParser):
    """The text a reader sees (no script, no attributes)."""

    def __init__(self):
        super().__init__()
        self.text, self._skip = [], 0

    def handle_starttag(self, tag, attrs):
        self._skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._skip -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._skip:
            self.text.append(data)


def figures(text: str) -> dict:
    return {fid: json.loads(body) for fid, body in
            re.findall(r'<script type="application/json" id="fig-([^"]+)">(.*?)</script>', text, re.S)}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    d = tmp_path_factory.mktemp("reports")
    out = {}
    for layer, path in INPUTS.items():
        if not path.exists():
            continue
        html, js = d / f"{layer}.html", d / f"{layer}.json"
        assert cli.main(["report", str(path), "-o", str(html), "--json", str(js)]) == 0
        out[layer] = (html.read_text(encoding="utf-8"), json.loads(js.read_text()))
    return out


@pytest.mark.parametrize("layer", list(INPUTS))
def test_report_small_with_headline_in_words(reports, layer):
    if layer not in reports:
        pytest.skip("fixture absent")
    text, data = reports[layer]
    assert len(text.encode()) <= MAX_BYTES
    p = Visible()
    p.feed(text)
    visible = " ".join(p.text)
    for raw in ("elapsed_ns", "bandwidth_mib_s", "ios_completed", "data_bytes", "e+0"):
        assert raw not in visible, raw
    s = data["summary"]
    cards = dict(re.findall(r'<div class="card" data-key="([^"]+)" data-value="[^"]*"><div class="v">([^<]*)<', text))
    assert set(cards) >= {"elapsed_ns", "ios_completed", "bandwidth_mib_s", "iops"}
    if s["bandwidth_mib_s"] is not None:
        assert cards["bandwidth_mib_s"] == f"{s['bandwidth_mib_s']:.2f} MB/s"
    lat = [r for r in s["latency"] if r["n"]]
    if lat:
        assert f"latency.{lat[0]['name']}.p99_ns" in cards
    figs = figures(text)
    for fid, fig in figs.items():   # every figure has data, no figure draws one point per I/O
        assert any(len(t.get("x") or t.get("values") or []) for t in fig["data"]), fid
    for fid in ("latency-time", "latency-cdf", "rates", "queue-depth"):
        if s["ios_completed"] and lat:
            assert fid in figs, fid


@pytest.mark.parametrize("layer", ["block", "usb"])
def test_timeline_one_row_per_device(reports, layer):
    if layer not in reports:
        pytest.skip("fixture absent")
    text, data = reports[layer]
    rows = {y for t in figures(text)["timeline"]["data"] for y in t["y"]}
    devices = {r["device"] for r in data["summary"]["devices"]}
    assert rows == devices and "bus" not in rows


def test_block_pie_says_q2c(reports):
    if "block" not in reports:
        pytest.skip("fixture absent")
    title = figures(reports["block"][0])["shares"]["layout"]["title"]["text"]
    assert "Q2C" in title and "elapsed" not in title.replace("not of elapsed", "")


def test_big_trace_report_draws_every_io_compactly(tmp_path):
    """200,000 I/Os: the offset and latency plots draw each of them (WebGL, typed arrays:
    8 bytes of float32/uint32 a point, 10.7 in base64), and the page stays within plotly.js
    plus 11 bytes a point per plot and 400 kB of the rest."""
    from gen_blktrace import workload, write
    base = tmp_path / "big"
    n = 200_000
    write(workload(n_ios=n, seed=3), str(base))
    out = tmp_path / "big.html"
    assert cli.main(["report", str(base) + ".blktrace.0", "-o", str(out), "--json", str(tmp_path / "s.json")]) == 0
    done = json.loads((tmp_path / "s.json").read_text())["summary"]["ios_completed"]
    assert done >= n
    text = out.read_text(encoding="utf-8")
    figs = figures(text)
    for fid in ("offset", "latency-time"):
        gl = [t for t in figs[fid]["data"] if t["type"] == "scattergl" and t["mode"] == "markers"]
        assert sum(len(base64.b64decode(t["x"]["bdata"])) // 4 for t in gl) == done, fid
    assert len(text.encode()) <= PLOTLY_BYTES + 2 * 11 * done + 400_000


def test_compare_uses_shared_axes(tmp_path):
    a, b = INPUTS["block"], CAPTURED / "lsi_randread4k" / "lsi_randread4k.blktrace.0"
    if not (a.exists() and b.exists()):
        pytest.skip("fixtures absent")
    out = tmp_path / "c.html"
    assert cli.main(["compare", str(a), str(b), "--html", str(out), "--json", str(tmp_path / "c.json")]) == 0
    text = out.read_text(encoding="utf-8")
    assert len(text.encode()) <= MAX_BYTES
    figs = figures(text)
    for fid in ("timeline", "latency-time", "offset"):
        fa, fb = figs[f"{fid}-a"]["layout"], figs[f"{fid}-b"]["layout"]
        assert fa["xaxis"]["range"] == fb["xaxis"]["range"], fid
        assert fa["xaxis"]["title"] == fb["xaxis"]["title"], fid      # one time unit
        if fid != "timeline":
            assert fa["yaxis"]["range"] == fb["yaxis"]["range"], fid
    # the overlaid rates: both traces in one figure, one time axis
    rates = figs["rates-ab"]
    assert {t["yaxis"] for t in rates["data"]} == {"y", "y2"} and len(rates["data"]) == 4


def test_filtered_report_says_so_first(tmp_path):
    trace = INPUTS["block"]
    if not trace.exists():
        pytest.skip("fixture absent")
    out = tmp_path / "w.html"
    assert cli.main(["analyze", str(trace), "--window", "0:0.1", "--html", str(out), "--json",
                     str(tmp_path / "w.json")]) == 0
    text = out.read_text(encoding="utf-8")
    filters = json.loads((tmp_path / "w.json").read_text())["filters"]
    shown = re.search(r'<p class="filtered" id="filters">([^<]*)</p>', text)
    assert shown and all(str(v) in shown.group(1) for v in filters.values())
    assert text.index('id="filters"') < text.index('id="headline"')
