"""The HTML report in Debian's headless Chromium (skipped when /usr/bin/chromium is absent;
`run.sh test` installs it): loaded from disk, no console errors, no network requests (the
page's CSP blocks them and the page records every violation; the rendered DOM has no
http(s) src/href), every plot drawn with data, tables equal to the JSON, and a process name
`<script>alert(1)</script>` shown as text. A negative control proves the harness sees an
error and a network request when there is one."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from scsitrace import cli
from scsitrace.parsers import ancot
from test_attribution_synth import SIGNALS, table11_analysis
from test_html import XSS, assert_tables_equal_json, parse_page

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="headless chromium not installed")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--enable-unsafe-swiftshader", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=8000"]


def load_in_chromium(path: Path) -> tuple[str, str]:
    """(rendered DOM, chromium's log) of the page loaded from disk."""
    with tempfile.TemporaryDirectory() as profile:
        proc = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", path.as_uri()],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr


def console_messages(log: str) -> list[str]:
    """Page console output as Chromium logs it ("CONSOLE(line)" / ":CONSOLE:" lines), less the
    software GL renderer's performance notes on the WebGL plots ("GL Driver Message ...
    Performance ...: GPU stall due to ReadPixels"), which are the headless renderer's, not the
    page's."""
    return [line for line in log.splitlines() if "CONSOLE" in line
            and not ("GL Driver Message" in line and "Performance" in line)]


def page_checks(dom: str) -> dict:
    plots = re.findall(r'<div class="plot[^"]*" id="(plot-[^"]+)"[^>]*data-figure="[^"]+"', dom)
    return {
        "errors": int(re.search(r'data-errors="(\d+)"', dom).group(1)),
        "error_text": re.search(r'<pre id="js-errors">(.*?)</pre>', dom, re.S).group(1),
        "drawn": int(re.search(r'data-plots="(\d+)"', dom).group(1)),
        "plots": plots,
        # attributes of real elements only (plotly.js's own source mentions URLs in strings)
        "urls": [u for u in parse_page(dom).urls if re.match(r"(?i)\s*(https?:)?//", u)],
    }


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("browser")
    synth, _ = table11_analysis(2)
    trace = d / "t11.ancot"
    ancot.write(str(trace), synth.capture.transitions(), signals=SIGNALS, tick_ns=1, meta={"process": XSS})
    out, js = d / "report.html", d / "report.json"
    assert cli.main(["report", str(trace), "-o", str(out), "--json", str(js)]) == 0
    dom, log = load_in_chromium(out)
    return out, json.loads(js.read_text()), dom, log


def test_no_console_errors_and_no_requests(report):
    _, _, dom, log = report
    c = page_checks(dom)
    assert c["errors"] == 0, c["error_text"]
    assert console_messages(log) == []
    assert c["urls"] == []


def test_every_plot_drawn_with_data(report):
    path, _, dom, _ = report
    c = page_checks(dom)
    figures = re.findall(r'id="fig-([^"]+)"', path.read_text())
    assert len(c["plots"]) == len(figures) == c["drawn"] >= 5
    for pid in c["plots"]:   # plotly drew an svg with at least one trace into each plot div
        start = dom.index(f'id="{pid}"')
        block = dom[start:start + 200_000]
        assert "main-svg" in block, pid
        assert re.search(r'class="(?:trace|slice|point)', block), pid


def test_tables_in_the_browser_equal_the_json(report):
    _, data, dom, _ = report
    assert_tables_equal_json(parse_page(dom), data)


def test_script_in_a_trace_is_text(report):
    _, _, dom, _ = report
    page = parse_page(dom)
    assert page.tables["source-table"]["rows"][-1] == {"key": "meta.process", "value": XSS}
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert XSS not in dom
    # trap, plotly.js, one JSON block per figure, the renderer: no injected script element
    assert len(page.scripts) == 2 + len(page.plots) + 1


def test_negative_control_harness_sees_errors_and_requests(report, tmp_path):
    path, _, _, _ = report
    text = path.read_text()
    bad = tmp_path / "bad.html"
    bad.write_text(text.replace('<pre id="js-errors">', '<img src="http://192.0.2.1/x.png">'
                                '<script>undefinedFunction();</script><pre id="js-errors">', 1))
    dom, log = load_in_chromium(bad)
    c = page_checks(dom)
    assert c["urls"] == ["http://192.0.2.1/x.png"]
    assert c["errors"] >= 2, c["error_text"]        # the CSP-blocked request and the ReferenceError
    assert "CSP" in c["error_text"] and "undefinedFunction" in c["error_text"]


def test_compare_page_in_chromium(report, tmp_path):
    path, _, _, _ = report
    trace = path.parent / "t11.ancot"
    worse = tmp_path / "worse.ancot"
    synth, _ = table11_analysis(2, buffer_scale=3.0)
    ancot.write(str(worse), synth.capture.transitions(), signals=SIGNALS, tick_ns=1)
    out = tmp_path / "compare.html"
    assert cli.main(["compare", str(trace), str(worse), "--html", str(out)]) == 0
    dom, log = load_in_chromium(out)
    c = page_checks(dom)
    assert c["errors"] == 0, c["error_text"]
    assert console_messages(log) == [] and c["urls"] == []
    assert c["drawn"] == len(c["plots"]) == len(re.findall(r'id="fig-([^"]+)"', out.read_text())) >= 5
