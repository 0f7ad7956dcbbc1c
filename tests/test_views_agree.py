"""Views agree: every fixture (and every file of ../shared/realdata, when present) through the
JSON, the terminal, the HTML report (its plot data read back out of the page) and the Python
API shows the numbers of the layer's declared tables, never numbers of its own.

- the headline cards are the summary's figures;
- the share bars are the percentage table's percent column, value for value;
- the rates, queue-depth, latency-over-time and CDF plots are the series tables (rounded to
  the 4-6 significant digits the page keeps);
- the offset and latency-over-time plots hold every I/O of the `offsets` and `latency_points`
  tables (WebGL points, each at its place, or each cell once with its exact count);
- the terminal's phase table prints each category's percent as the JSON has it.
"""
from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import polars as pl
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


def values(array) -> np.ndarray:
    """A plotly data array as numbers: a list, or a typed array {dtype, bdata (base64)}."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=f"<{array['dtype']}").astype(np.float64)
    return np.asarray(array, dtype=np.float64)


def plotted_points(fig: dict, x_of, y_of, frame: pl.DataFrame) -> None:
    """The WebGL traces of `fig` are `frame` (offsets or latency_points): with points (cell_ns
    0), each op's trace holds exactly that op's I/Os at their (x, y) (times float32 on the
    page, LBAs exact);
    with cells, each cell once, its hover count the cell's I/Os summed over its ops, its
    trace the op with the most of them; the legend counts every op's I/Os."""
    gl = [t for t in fig["data"] if t["type"] == "scattergl" and t["mode"] == "markers"]   # not the lines
    per_op = dict(frame.group_by("op").agg(pl.col("ios").sum()).iter_rows())
    legend = {re.match(r"(.*) \(([\d,]+) I/Os\)$", t["name"]).groups() for t in gl}
    assert {op: int(n.replace(",", "")) for op, n in legend} == per_op
    div = fig["div"]
    x = (frame[x_of[0]] + frame["cell_ns"] // 2).to_numpy() / div
    y = y_of(frame)
    if not frame["cell_ns"].max():
        for t in gl:
            op = t["name"].rsplit(" (", 1)[0]
            mask = (frame["op"] == op).to_numpy()
            got = np.c_[values(t["x"]), values(t["y"])]
            y_type = t["y"]["dtype"]          # LBAs exact (u4, f8), response times float32
            assert y_type in (("u4", "f8") if x_of == ("start_ns",) else ("f4",))
            want = np.c_[x[mask].astype(np.float32), y[mask].astype(f"<{y_type}")].astype(np.float64)
            assert np.array_equal(got[np.lexsort(got.T[::-1])], want[np.lexsort(want.T[::-1])]), op
        return
    cells = (pl.DataFrame({"x": x, "y": y, "op": frame["op"], "ios": frame["ios"]})
             .group_by("x", "y").agg(pl.col("ios").sum(), pl.col("op").sort_by("ios", descending=True).first()))
    assert sum(len(values(t["customdata"])) for t in gl) == cells.height
    assert sum(values(t["customdata"]).sum() for t in gl) == frame["ios"].sum()
    for t in gl:
        op = t["name"].rsplit(" (", 1)[0]
        mine = cells.filter(pl.col("op") == op)
        assert sorted(values(t["customdata"]).astype(int)) == sorted(mine["ios"].to_list()), op


@pytest.mark.parametrize("path", INPUTS[:6] + INPUTS[-6:], ids=lambda p: p.name)
def test_offsets_latency_points_and_cdf_hold_every_io(shown, path):
    got = shown(path)
    if got is None:
        pytest.skip("not a trace the tool reads (exit 2)")
    text, s = got
    figs = figures(text)
    api = scsitrace.analyze(path)
    offsets, cdf, points = api.tables["offsets"], api.tables["latency_cdf"], api.tables["latency_points"]
    rates = api.tables["series_rates"]
    assert int(rates["completions"].sum()) == int(cdf["ios"].max() or 0) if cdf.height else True
    assert int(points["ios"].sum()) == int(rates["completions"].sum())        # every completed I/O
    if offsets.height:
        fig = figs["offset"]
        fig["div"] = _div(fig["layout"]["xaxis"]["title"]["text"])
        plotted_points(fig, ("start_ns",), lambda f: (f["lba"] + f["cell_blocks"] // 2).to_numpy(), offsets)
    if points.height:
        fig = figs["latency-time"]
        fig["div"] = _div(fig["layout"]["xaxis"]["title"]["text"])

        def response_ms(f):
            lo, hi = f["response_ns"].to_numpy().astype(float), f["response_top_ns"].to_numpy().astype(float)
            return (np.sqrt(np.maximum(lo, 1) * hi) if f["cell_ns"].max() else hi) / 1e6
        plotted_points(fig, ("end_ns",), response_ms, points)
    if cdf.height:
        line = figs["latency-cdf"]["data"][0]
        assert len(line["x"]) == cdf.height and line["y"][-1] == 1.0


def test_past_max_points_the_plots_show_exact_cells(tmp_path, monkeypatch):
    """Past MAX_POINTS I/Os (300,000; here lowered to 20) the same checks hold for cells."""
    from scsitrace import series
    monkeypatch.setattr(series, "MAX_POINTS", 20)
    path = REPO / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
    assert main(["report", str(path), "-o", str(tmp_path / "r.html")]) == 0
    figs = figures((tmp_path / "r.html").read_text(encoding="utf-8"))
    api = scsitrace.analyze(path)
    offsets, points = api.tables["offsets"], api.tables["latency_points"]
    assert offsets["cell_ns"].min() > 0 and points["cell_ns"].min() > 0 and points["ios"].sum() > 20
    for fid, frame, x_of, y_of in (
            ("offset", offsets, ("start_ns",), lambda f: (f["lba"] + f["cell_blocks"] // 2).to_numpy()),
            ("latency-time", points, ("end_ns",),
             lambda f: np.sqrt(np.maximum(f["response_ns"].to_numpy(), 1) * f["response_top_ns"].to_numpy()) / 1e6)):
        fig = figs[fid]
        fig["div"] = _div(fig["layout"]["xaxis"]["title"]["text"])
        plotted_points(fig, x_of, y_of, frame)


def _div(axis_title: str) -> float:
    """ns per unit of a time axis titled "... (ms)"."""
    return {"µs": 1e3, "ms": 1e6, "s": 1e9}[re.search(r"\((µs|ms|s)\)", axis_title).group(1)]


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
