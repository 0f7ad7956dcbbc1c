"""compare A B: a trace against itself changes nothing; against the same I/Os with longer
host-adapter pauses, the initiator's time and the data phase grow and nothing else of the
command set-up moves; the HTML page's tables equal the JSON rows."""
from __future__ import annotations

import json

import pytest

from scsitrace import cli
from scsitrace.parsers import ancot
from test_attribution_synth import SIGNALS, table11_analysis
from test_html import parse_page


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("compare")
    paths = []
    for name, scale in (("before.ancot", 1.0), ("after.ancot", 3.0)):
        synth, _ = table11_analysis(1, seed=4, buffer_scale=scale)
        ancot.write(str(d / name), synth.capture.transitions(), signals=SIGNALS, tick_ns=1)
        paths.append(d / name)
    return d, paths[0], paths[1]


def run_compare(a, b, out_dir, html=False):
    js = out_dir / "c.json"
    args = ["compare", str(a), str(b), "--json", str(js)]
    if html:
        args += ["--html", str(out_dir / "c.html")]
    assert cli.main(args) == 0
    return json.loads(js.read_text())


def test_trace_against_itself(pair, tmp_path):
    _, before, _ = pair
    comp = run_compare(before, before, tmp_path)
    assert comp["rows"]
    assert all(r["delta"] == 0 and r["ratio"] in (1.0, None) for r in comp["rows"])


def test_longer_pauses_show_where_they_are(pair, tmp_path):
    _, before, after = pair
    rows = {r["figure"]: r for r in run_compare(before, after, tmp_path, html=True)["rows"]}
    assert rows["attribution.initiator_ns"]["ratio"] > 1.2
    assert rows["attribution.target_ns"]["delta"] == 0
    assert rows["normalized_ns.Data Transfer"]["delta"] > 0
    for cat in ("Command", "Message Out", "Selection", "Arbitration", "Status"):
        assert rows[f"normalized_ns.{cat}"]["delta"] == 0
    assert rows["bandwidth_mib_s"]["ratio"] < 1


def test_compare_html_tables_equal_json(pair, tmp_path):
    _, before, after = pair
    comp = run_compare(before, after, tmp_path, html=True)
    text = (tmp_path / "c.html").read_text()
    page = parse_page(text)
    table = page.tables["compare-table"]
    assert table["rows"] == [{k: r[k] for k in ("figure", "a", "b", "delta", "ratio")} for r in comp["rows"]]
    assert {"phase-table-a", "phase-table-b", "summary-table-a", "summary-table-b"} <= set(page.tables)
    assert page.urls == [] and len(page.plots) >= 5


def test_compare_bad_input_exit_2(pair, tmp_path):
    _, before, _ = pair
    missing = tmp_path / "nope.ancot"
    assert cli.main(["compare", str(before), str(missing)]) == 2
