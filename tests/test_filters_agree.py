"""Filters live in the layer: each filter (--target, --lun, --window, --device) with each output
(--json, --ios, --segments, --csv, batch, the API) gives the same I/Os and the same times.

The JSON's I/O count is the exported table's completed rows; the exported segments tile the
elapsed time and add up to the JSON's categories row for row; the batch dataset and the API
hold the same figures as `analyze --json`."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import scsitrace
from scsitrace.cli import main

ROOT = Path(__file__).resolve().parent.parent
BUS = ROOT / "fixtures/bus/table3-l3/trace.ancot"
USB = ROOT / "fixtures/captured/usb_bufread32k/usbmon.txt"
FTRACE = ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt"
BLOCK = ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"

CASES = [
    (BUS, ["--target", "0"]),
    (BUS, ["--target", "3"]),
    (BUS, ["--lun", "0"]),
    (BUS, ["--target", "1", "--lun", "0"]),
    (BUS, ["--window", "0.005:0.02"]),
    (USB, ["--lun", "0"]),
    (USB, ["--window", "0.2:"]),
    (FTRACE, ["--target", "0"]),
    (FTRACE, ["--window", ":0.5"]),
    (BLOCK, ["--window", "0.1:0.6"]),
]


def _opts(argv: list[str]) -> dict:
    return {argv[i].lstrip("-"): argv[i + 1] for i in range(0, len(argv), 2)}


def _categories_of(segments: pl.DataFrame, profile_col: str) -> dict:
    dur = (pl.col("end_ns") - pl.col("start_ns")).sum()
    return {k: v for k, v in segments.group_by(profile_col).agg(dur).iter_rows() if v}


@pytest.mark.parametrize("trace,argv", CASES, ids=lambda v: v.name if isinstance(v, Path) else " ".join(v))
def test_every_output_shows_the_layers_selection(tmp_path, capsys, trace, argv):
    ios_out, seg_out, csv_out = tmp_path / "ios.parquet", tmp_path / "seg.parquet", tmp_path / "cats.csv"
    status = main(["analyze", str(trace), *argv, "--json", "-", "--ios", str(ios_out),
                   "--segments", str(seg_out), "--csv", str(csv_out)])
    out, err = capsys.readouterr()
    assert status == 0, err
    js = json.loads(out)
    ios = pl.read_parquet(ios_out)
    seg = pl.read_parquet(seg_out)
    opts = _opts(argv)

    # the I/Os exported are the selected ones, and the JSON counts the completed among them
    for key in ("target", "lun"):
        if key in opts and key in ios.columns:
            assert ios[key].drop_nulls().unique().to_list() in ([int(opts[key])], []), key
            assert ios[key].null_count() == 0
    assert js["ios_completed"] == int(ios["complete"].fill_null(False).sum())

    # the segments' time is the categories' time: row for row where the segments tile it
    cats = {c["name"]: c["total_ns"] for c in js["categories"] if c["total_ns"]}
    if js["layer"] == "bus":
        col = "category" if js["profile"] == "raid1990" else "phase"
        assert _categories_of(seg, col) == cats
        assert seg["end_ns"].max() - seg["start_ns"].min() == js["elapsed_ns"]
        assert int((seg["end_ns"] - seg["start_ns"]).sum()) == js["elapsed_ns"]
        if js["targets"]:
            picked = {int(opts["target"])} if "target" in opts else {t["target"] for t in js["targets"]}
            assert {t["target"] for t in js["targets"]} == picked

    # --csv is the same categories table
    csv = pl.read_csv(csv_out)
    assert dict(zip(csv["name"], csv["total_ns"])) == {c["name"]: c["total_ns"] for c in js["categories"]}

    # the API: same summary figures, same I/Os
    kw = {k: (int(v) if k in ("target", "lun") else v) for k, v in opts.items()}
    api = scsitrace.analyze(trace, **kw)
    for key in ("elapsed_ns", "ios_completed", "data_bytes", "categories", "targets", "latency"):
        assert api.summary.get(key) == js.get(key), key
    assert api.tables["ios"].height == ios.height

    # the batch dataset: same summary row, same I/O rows
    out_dir = tmp_path / "batch"
    status = main(["batch", str(trace), *argv, "--jobs", "0", "-o", str(out_dir)])
    capsys.readouterr()
    assert status == 0
    summary = pl.read_parquet(out_dir / "summary.parquet")
    assert summary["status"].to_list() == ["ok"]
    assert summary["ios_completed"].to_list() == [js["ios_completed"]]
    batch_ios = pl.read_parquet(out_dir / "ios")
    assert batch_ios.height == ios.height


def test_target_filter_keeps_the_others_time_as_one_bucket(capsys):
    """--target: the other targets' bus-busy time is "Other targets" in the JSON and in the
    segments, the percentages sum to 100, and the per-target table is the whole trace's row."""
    whole = scsitrace.analyze(BUS)
    one = scsitrace.analyze(BUS, target=0)
    row = next(t for t in whole.summary["targets"] if t["target"] == 0)
    assert one.summary["targets"] == [row]
    assert one.summary["ios_completed"] == row["ios_completed"]
    cats = {c["name"]: c["total_ns"] for c in one.summary["categories"]}
    busy_others = sum(t["busy_ns"] for t in whole.summary["targets"] if t["target"] != 0)
    assert cats["Other targets"] == busy_others
    assert abs(sum(c["percent"] for c in one.summary["categories"]) - 100) < 1e-9
    assert one.summary["data_bytes"] == row["data_bytes"]
    assert one.tables["latency"]["n"].to_list()[0] == row["ios_completed"]
