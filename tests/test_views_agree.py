"""Views agree: every fixture (and every file of ../shared/realdata, when present) through the
JSON, the terminal, the HTML report (its plot data read back out of the page) and the Python
API shows the numbers of the layer's declared tables, never numbers of its own.

- the headline cards are the summary's figures;
- the share bars are the percentage table's percent column, value for value;
- the rates, queue-depth, latency-over-time and CDF plots are the series tables (rounded to
  the 4-6 significant digits the page keeps);
- the offset plot holds every I/O of the `offsets` table (points, or exact cell counts);
- the terminal's phase table prints each category's percent as the JSON has it.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import scsitrace
from scsitrace.cli import main

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "realdata"


def _inputs() -> list[Path]:
    paths = sorted(REPO.glob("fixtures/bus/*/trace.*"))
    for case in ("lsi_randread4k", "usb_seqread32k", "uas_seqread32k", "sg"):
        d = REPO / "fixtures" / "captured" / case
        paths += sorted(p for p in d.glob("*") if p.suffix in (".txt", ".log") or p.name.endswith(".blktrace.0"))
    if REAL.is_dir():
        paths += sorted(REAL.glob("blktrace/*.bin")) + sorted(REAL.glob("captured/blktrace/*.blktrace.0"))
        paths += sorted(REAL.glob("captured/usbmon/*.txt")) + sorted(REAL.glob("captured/ftrace/*.ftrace.txt"))
        paths += sorted(REAL.glob("blkparse-text/*.txt"))
    skip = ("ref", "stats", "stdout", "dd.txt", "usbmon-bus")      # the reference tools' outputs, not traces
    return [p for p in paths if not any(k in p.name for k in skip)]


INPUTS = _inputs()


def figures(text: str) -> dict:
    return {fid: json.loads(body) for fid, body in
            re.findall(r'<script type="application/json" id="fig-([^"]+)">(.*?)</script>', text, re.S)}


def close(a: float | None, b: float | None, digits: int = 4) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 10 ** -(digits - 1) * max(abs(a), abs(b)) + 1e-12


@pytest.fixture(scope="module")
def shown(tmp_path_factory):
    out = tmp_path_factory.mktemp("views")
    cache = {}

    def run(path: Path):
        if path not in cache:
            html, js = out / f"{len(cache)}.html", out / f"{len(cache)}.json"
            status = main(["report", str(path), "-o", str(html), "--json", str(js)])
            if status != 0:
                cache[path] = None
            else:
                tables = scsitrace.analyze(path).tables       # the declared tables, as the API hands them
                rows = {k: tables[k].to_dicts() for k in ("series_rates", "series_queue", "series_latency")}
                cache[path] = (html.read_text(encoding="utf-8"), {**json.loads(js.read_text())["summary"], **rows})
        return cache[path]
    return run


@pytest.mark.parametrize("path", INPUTS, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_report_plots_are_the_declared_tables(shown, path):
    got = shown(path)
    if got is None:
        pytest.skip("not a trace the tool reads (exit 2)")
    text, s = got
    figs = figures(text)
    cards = dict(re.findall(r'<div class="card" data-key="([^"]+)" data-value="([^"]*)">', text))
    assert int(cards["elapsed_ns"]) == s["elapsed_ns"] and int(cards["ios_completed"]) == s["ios_completed"]

    shares = [c for c in s["categories"] if c["total_ns"]]
    if shares:
        bars = figs["shares"]["data"][0]
        assert dict(zip(bars["y"], bars["x"])) == {c["name"]: c["percent"] for c in shares}

    rates = s["series_rates"]
    assert sum(r["completions"] for r in rates) == (s["ios_completed"] if s["layer"] != "bus" else
                                                    sum(r["completions"] for r in rates))
    if any(r["completions"] for r in rates):
        iops = next(t for t in figs["rates"]["data"] if t["name"].endswith("I/Os per second"))
        assert len(iops["y"]) == len(rates)
        assert all(close(y, r["iops"]) for y, r in zip(iops["y"], rates))
        mbs = [t for t in figs["rates"]["data"] if t["name"].endswith("MB/s")]
        if mbs:
            assert all(close(y, r["mib_s"] or 0.0) for y, r in zip(mbs[0]["y"], rates))
    queue = s.get("series_queue") or []
    if queue and "queue-depth" in figs:
        mean = next(t for t in figs["queue-depth"]["data"] if t["name"].endswith("mean in flight"))
        assert all(close(y, q["mean_in_flight"]) for y, q in zip(mean["y"], queue))
        mx = [t for t in figs["queue-depth"]["data"] if t["name"].endswith("max in flight")]
        if mx:
            assert mx[0]["y"] == [q["max_in_flight"] for q in queue]
    lat = s.get("series_latency") or []
    if any(r["ios"] for r in lat):
        p50 = next(t for t in figs["latency-time"]["data"] if t["name"].startswith("p50"))
        assert all(close(y, None if r["p50_ns"] is None else r["p50_ns"] / 1e6, 6) for y, r in zip(p50["y"], lat))


@pytest.mark.parametrize("path", INPUTS[:6] + INPUTS[-6:], ids=lambda p: p.name)
def test_offsets_and_cdf_hold_every_io(shown, path):
    got = shown(path)
    if got is None:
        pytest.skip("not a trace the tool reads (exit 2)")
    text, s = got
    figs = figures(text)
    api = scsitrace.analyze(path)
    offsets, cdf = api.tables["offsets"], api.tables["latency_cdf"]
    rates = api.tables["series_rates"]
    assert int(rates["completions"].sum()) == int(cdf["ios"].max() or 0) if cdf.height else True
    if offsets.height:
        plotted = figs["offset"]["data"]
        assert sum(len(t["x"]) for t in plotted) == offsets.height
        counts = [int(re.search(r"\((\d+) I/Os\)", t["name"]).group(1)) for t in plotted]
        assert sum(counts) == int(offsets["ios"].sum())
    if cdf.height:
        line = figs["latency-cdf"]["data"][0]
        assert len(line["x"]) == cdf.height and line["y"][-1] == 1.0


@pytest.mark.parametrize("path", INPUTS[:4] + INPUTS[-4:], ids=lambda p: p.name)
def test_terminal_prints_the_json_percentages(capsys, path):
    if main(["analyze", str(path), "--json", "-"]) != 0:
        pytest.skip("not a trace the tool reads (exit 2)")
    js = json.loads(capsys.readouterr().out)
    assert main(["analyze", str(path), "--width", "200"]) == 0
    out = capsys.readouterr().out
    for c in js["categories"]:
        assert f"{c['percent']:.2f} %" in out, c["name"]


def test_the_stall_factor_is_the_layers_the_report_only_shows_it(tmp_path):
    """`report --stall-factor K` and the API's stall_factor=K give the layer's stalls table,
    built with K from every I/O: more stalls for a lower factor, each slower than K x its median."""
    trace = REPO / "fixtures" / "captured" / "lsi_randread4k" / "lsi_randread4k.blktrace.0"
    shown = {}
    for k in (1.5, 5.0):
        out = tmp_path / f"r{k}.json"
        assert main(["report", str(trace), "-o", str(tmp_path / f"r{k}.html"), "--stall-factor", str(k),
                     "--json", str(out)]) == 0
        st = json.loads(out.read_text())["views"]["stalls"]
        api = scsitrace.analyze(trace, stall_factor=k).tables["stalls"]
        assert (st["factor"], st["count"]) == (k, api["count"][0])
        assert all(r["response_ns"] > k * r["median_ns"] for r in st["ios"])
        shown[k] = st["count"]
    assert shown[1.5] > shown[5.0]
