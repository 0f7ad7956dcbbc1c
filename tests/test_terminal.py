"""Terminal tables are never cut: piped (as in CI logs) or narrow, no value is replaced by an
ellipsis and no number is split from its unit, on a trace of every layer."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scsitrace.cli import main

ROOT = Path(__file__).resolve().parent.parent
TRACES = [ROOT / "fixtures/bus/table3-l3/trace.ancot",
          ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0",
          ROOT / "fixtures/captured/usb_bufread32k/usbmon.txt",
          ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt"]
UNIT_ALONE = re.compile(r"│\s*(ms|us|ns|s|%|MBytes/sec|I/Os/sec)\s*│")


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.parent.name + "/" + p.name)
@pytest.mark.parametrize("width", [None, 40])
def test_tables_keep_every_value_whole(capsys, trace, width):
    argv = ["analyze", str(trace)] + ([] if width is None else ["--width", str(width)])
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    assert not UNIT_ALONE.search(out)
    assert re.search(r"\d+(\.\d+)? (ms|us|ns|s)\b", out)       # numbers shown with their units


def test_crosslayer_piped_is_not_cut(capsys):
    assert main(["crosslayer", str(ROOT / "fixtures/captured/lsi_randread4k")]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and not UNIT_ALONE.search(out)


def test_latency_histogram_counts_every_latency(capsys):
    """The terminal's latency histogram, one bucket a row: per latency, the bucket counts add
    up to its n, and the bars are longest on the largest count."""
    trace = ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
    assert main(["analyze", str(trace), "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert main(["analyze", str(trace), "--json", "-"]) == 0
    import json
    latency = {r["name"]: r["n"] for r in json.loads(capsys.readouterr().out)["latency"]}
    hist = out[out.index("Latency histogram"):].splitlines()
    rows, name = {}, None
    for line in hist:
        m = re.match(r"│ (\S*)\s*│\s*<= ([^│]+?) │\s*(\d+) │ (█*)", line)
        if m:
            name = m[1] or name
            rows.setdefault(name, []).append((int(m[3]), len(m[4])))
    assert rows.keys() == latency.keys()
    for name, n in latency.items():
        assert sum(count for count, _ in rows[name]) == n > 0
        widest = max(rows[name])
        assert all(bar <= widest[1] and (bar > 0) == (count > 0) for count, bar in rows[name])


LAYERS = {"bus": ROOT / "fixtures/bus/table3-l3/trace.ancot",
          "bus-qemu": ROOT / "fixtures/captured/lsi_randread4k/qemu-trace.txt",
          "block": ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0",
          "usb": ROOT / "fixtures/captured/usb_bufread32k/usbmon.txt",
          "scsilog": ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt",
          "scsilog-dmesg": ROOT / "fixtures/captured/lsi_seqread32k_logged/dmesg-scsi.txt"}


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("width", [60, 80, 120, None])
def test_every_line_fits_the_width(capsys, monkeypatch, layer, width):
    """At --width 60, 80, 120 and piped ($COLUMNS unset: 80), no line of `analyze` is wider
    than the width, and every table is still there with its values whole."""
    monkeypatch.delenv("COLUMNS", raising=False)
    argv = ["analyze", str(LAYERS[layer])] + ([] if width is None else ["--width", str(width)])
    assert main(argv) == 0
    out = capsys.readouterr().out
    limit = width or 80
    assert max(len(line) for line in out.splitlines()) <= limit
    assert "…" not in out and not UNIT_ALONE.search(out)
    assert re.search(r"(Time|Share of Q2C time) .*in each (phase|stage)", out.replace("\n", " ")) and "Records:" in out
    assert not re.search(r"\de[+-]\d", out)                 # times in engineering units


def test_a_wide_table_is_split_into_parts_repeating_its_first_column(capsys):
    """btt's per-device table has 11 columns: at 60 columns it comes in parts, each with DEV
    first, and every column header appears once."""
    trace = ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
    assert main(["analyze", str(trace), "--width", "60"]) == 0
    out = capsys.readouterr().out
    part = out[out.index("Per device"):out.index("Per process")]
    assert part.count("┃ DEV ") == 2 and "(continued)" in part
    for header in ("Q", "D", "Done", "M+F", "R", "MiB/s", "IOPS", "Busy%", "Depth max/avg", "Seek"):
        assert len(re.findall(rf"┃ +{re.escape(header)} +┃", part)) == 1, header


def test_piped_width_follows_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["analyze", str(LAYERS["usb"])]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100 and any(len(line) > 80 for line in lines)


REAL_BUS = ROOT.parent.parent / "shared/realdata/busvcd/pce_test5_read_data.dsl"


@pytest.mark.skipif(not REAL_BUS.exists(), reason="real captures absent")
def test_glitch_times_in_engineering_units(capsys):
    """The PC-FX capture's one-sample glitches: times as `2.06157 s`, never `2.06157e+09 ns`."""
    assert main(["analyze", str(REAL_BUS), "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert "glitch" in out and not re.search(r"\de[+-]\d", out)
    assert re.search(r"DB\d at \d+\.\d+ s\b", out)
    assert max(len(line) for line in out.splitlines()) <= 80


@pytest.mark.parametrize("name", ["[bold]dd", "[kthreadd]", "[italic", ":thumbs_up:"])
def test_trace_text_is_printed_as_it_is(capsys, tmp_path, name):
    """Text from a trace (here a process name from blktrace's notify records) is not rich
    markup or an emoji code: printed literally, never a traceback."""
    import gen_blktrace as gb
    ev = gb.workload(40, seed=3)
    path = tmp_path / "names.bin"
    path.write_bytes(gb.encode(ev, names={4242: name, 4243: "dd"}))
    assert main(["analyze", str(path), "--format", "blktrace"]) == 0
    out = capsys.readouterr().out
    process_rows = out[out.index("Per process"):]
    assert f"│ {name} " in process_rows
