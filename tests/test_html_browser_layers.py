"""The reports of a block, a usb, a bus and a kernel-log trace and a compare page in Debian's
headless Chromium (skipped when absent; `run.sh test` installs it): no console errors, no
network request, every plot drawn with at least one trace, the WebGL ones on a WebGL canvas (the harness and its negative
control are in test_html_browser.py)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scsitrace import cli
from test_html_browser import CHROMIUM, console_messages, load_in_chromium, page_checks

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"
pytestmark = [pytest.mark.browser, pytest.mark.skipif(CHROMIUM is None, reason="headless chromium not installed")]
CASES = {"block": ["report", str(CAPTURED / "usb_randread4k" / "usb_randread4k.blktrace.0")],
         "usb": ["report", str(CAPTURED / "usb_randread4k" / "usbmon.txt")],
         "bus": ["report", str(REPO / "fixtures" / "bus" / "random4k-l3" / "trace.ancot")],
         "scsilog": ["report", str(CAPTURED / "lsi_randread4k" / "ftrace.txt")],
         "compare": ["compare", str(CAPTURED / "lsi_seqread32k" / "lsi_seqread32k.blktrace.0"),
                     str(CAPTURED / "lsi_randread4k" / "lsi_randread4k.blktrace.0")]}


@pytest.mark.parametrize("case", list(CASES))
def test_page_draws_every_plot_without_errors(case, tmp_path):
    args = CASES[case]
    if not all(Path(a).exists() for a in args[1:]):
        pytest.skip("fixture absent")
    out = tmp_path / "page.html"
    args = args + (["-o", str(out)] if args[0] == "report" else ["--html", str(out)])
    assert cli.main(args) == 0
    dom, log = load_in_chromium(out)
    c = page_checks(dom)
    assert c["errors"] == 0, c["error_text"]
    assert console_messages(log) == [] and c["urls"] == []
    figures = re.findall(r'id="fig-([^"]+)"', out.read_text())
    assert c["drawn"] == len(c["plots"]) == len(figures) >= 6
    for pid in c["plots"]:
        start = dom.index(f'id="{pid}"')
        block = dom[start:start + 200_000]
        assert "main-svg" in block, pid
        assert re.search(r'class="(?:trace|slice|point)', block), pid
    gl = [fid for fid, body in re.findall(r'id="fig-([^"]+)">(.*?)</script>', out.read_text(), re.S)
          if '"type":"scattergl"' in body]
    assert gl or case == "bus"           # the offset and latency plots draw their points with WebGL
    for fid in gl:                       # drawn: a WebGL canvas in the plot, no "WebGL not supported"
        start = dom.index(f'id="plot-{fid}"')
        assert 'class="gl-canvas' in dom[start:start + 200_000], fid
