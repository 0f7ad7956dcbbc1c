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
    """The terminal's latency histogram: per latency, bucket counts that add up to its n."""
    trace = ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
    assert main(["analyze", str(trace)]) == 0
    out = capsys.readouterr().out
    assert main(["analyze", str(trace), "--json", "-"]) == 0
    import json
    latency = {r["name"]: r["n"] for r in json.loads(capsys.readouterr().out)["latency"]}
    hist = out[out.index("Latency histogram"):]
    for name, n in latency.items():
        row = next(line for line in hist.splitlines() if line.startswith(f"│ {name} "))
        assert sum(int(c) for c in re.findall(r": (\d+)", row)) == n > 0


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
