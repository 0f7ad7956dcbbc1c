"""Filters on every layer (--window, --device, --target, --lun, --pid) and the Python API, on
the committed captures and simulated traces: what a filter keeps, that the cut tiles exactly,
that a filter selecting nothing is exit 2 naming what the trace has, and that every output
says what was filtered."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import scsitrace
from scsitrace.cli import main

ROOT = Path(__file__).resolve().parent.parent
BUS = ROOT / "fixtures/bus/table3-l1/trace.ancot"
BUS_L3 = ROOT / "fixtures/bus/table3-l3/trace.ancot"
CASE = ROOT / "fixtures/captured/usb_bufread32k"
BLOCK = ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
FTRACE = ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt"
USBMON = CASE / "usbmon.txt"


def run_json(capsys, *argv) -> tuple[int, dict | None, str]:
    status = main(["analyze", *map(str, argv), "--json", "-"])
    out, err = capsys.readouterr()
    return status, (json.loads(out) if status == 0 else None), err


def test_bus_window_cuts_the_trace_and_tiles_it_exactly():
    one_target = ROOT / "fixtures/bus/one-target-l1/trace.ancot"      # completions tied to their I/Os
    whole = scsitrace.analyze(one_target)
    cut = scsitrace.analyze(one_target, window="0.1:0.3")
    assert cut.summary["elapsed_ns"] == 200_000_000
    seg = cut.tables["segments"]
    assert seg["start_ns"].min() == 100_000_000 and seg["end_ns"].max() == 300_000_000
    assert (seg["start_ns"].shift(-1).drop_nulls() == seg["end_ns"].head(seg.height - 1)).all()
    assert sum(c["total_ns"] for c in cut.summary["categories"]) == 200_000_000
    # the completions in the cut are those of the whole trace inside it (an I/O begun before
    # the cut completes in it as a partial I/O)
    done = whole.tables["ios"].filter(pl.col("complete").fill_null(False))
    assert cut.summary["ios_completed"] == done.filter(pl.col("end_ns").is_between(100_000_000, 300_000_000)).height
    partial = cut.tables["ios"].filter(pl.col("partial"))
    assert partial.height == done.filter((pl.col("start_ns") < 100_000_000) & (pl.col("end_ns") > 100_000_000)).height
    assert cut.summary["filters"] == {"window": "0.1:0.3"}


@pytest.mark.parametrize("path,window", [(USBMON, "0.1:0.2"), (FTRACE, "0.1:0.3")])
def test_command_layer_window_keeps_commands_inside_it(path, window):
    whole, cut = scsitrace.analyze(path), scsitrace.analyze(path, window=window)
    lo, hi = (int(float(x) * 1e9) for x in window.split(":"))
    assert cut.summary["elapsed_ns"] == min(hi, whole.summary["elapsed_ns"]) - lo
    ios = whole.tables["ios"].filter(pl.col("complete") & (pl.col("start_ns") >= lo) & (pl.col("end_ns") <= hi))
    assert cut.summary["ios_completed"] == ios.height
    assert cut.summary["latency"][0]["n"] == ios.height


@pytest.mark.parametrize("path,argv,says", [
    (BUS_L3, ["--target", "9"], "--target 9: not in the trace (it has: 0, 1, 2, 3)"),
    (BUS_L3, ["--lun", "5"], "--lun 5: not in the trace (it has: 0)"),
    (BUS, ["--window", "5:6"], "lies outside the trace, which runs from 0 to 1 s"),
    (BLOCK, ["--device", "8,9"], "--device 8,9: not in the trace (it has: 8,0)"),
    (BLOCK, ["--pid", "4242"], "--pid 4242: not in the trace (it has: dd)"),
    (BLOCK, ["--target", "0"], "--target does not apply to block traces"),
    (USBMON, ["--device", "1:9"], "--device 1:9: not in the trace (it has: 1:2:0)"),
    (USBMON, ["--target", "0"], "--target does not apply to usb traces"),
    (FTRACE, ["--device", "9:0:0:0"], "--device 9:0:0:0: not in the trace (it has: 0:0:0:0)"),
    (FTRACE, ["--lun", "3"], "--lun 3: not in the trace (it has: 0)"),
    (BUS, ["--device", "8,0"], "--device does not apply to bus traces"),
])
def test_a_filter_that_selects_nothing_is_exit_2_naming_what_exists(capsys, path, argv, says):
    status, _, err = run_json(capsys, path, *argv)
    assert status == 2
    assert says in err and err.count("\n") == 1


def test_bus_target_and_lun_split_the_bus_time(capsys):
    status, s, _ = run_json(capsys, BUS_L3, "--target", "1")
    assert status == 0 and s["filters"] == {"target": 1}
    names = [c["name"] for c in s["categories"]]
    assert "Other targets" in names
    assert sum(c["percent"] for c in s["categories"]) == pytest.approx(100)
    status, s, _ = run_json(capsys, BUS_L3, "--lun", "0")
    assert status == 0 and "Other LUNs" in [c["name"] for c in s["categories"]]


def test_usb_device_and_lun_filters_keep_that_device(capsys):
    status, s, _ = run_json(capsys, USBMON, "--device", "1:2", "--lun", "0")
    whole = scsitrace.analyze(USBMON).summary
    assert status == 0 and s["ios_completed"] == whole["ios_completed"] > 0
    assert s["filters"] == {"device": "1:2", "lun": 0}


def test_api_gives_the_documented_tables_as_polars_frames():
    r = scsitrace.analyze(BLOCK, window="0.1:0.5")
    assert r.layer == "block"
    for name in ("categories", "segments", "ios", "anomalies", "latency", "stages", "devices"):
        assert isinstance(r.tables[name], pl.DataFrame), name
    q2c = r.tables["latency"].filter(pl.col("name") == "Q2C").row(0, named=True)
    stage = next(x for x in r.summary["stages"] if x["device"] == "all" and x["name"] == "Q2C")
    assert (q2c["n"], q2c["min_ns"], q2c["max_ns"], q2c["total_ns"]) == \
        (stage["n"], stage["min_ns"], stage["max_ns"], stage["total_ns"])
    assert q2c["min_ns"] <= q2c["p50_ns"] <= q2c["p90_ns"] <= q2c["p99_ns"] <= q2c["p999_ns"] <= q2c["max_ns"]


def test_terminal_states_the_filters(capsys):
    assert main(["analyze", str(FTRACE), "--window", "0.1:0.3", "--lun", "0"]) == 0
    out = capsys.readouterr().out
    assert "Filtered: --window 0.1:0.3, --lun 0" in out
