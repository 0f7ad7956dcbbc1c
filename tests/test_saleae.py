"""Saleae Logic 2 digital CSV exports (parsers/saleae.py), written by tests/gen_logic.py to
the layout of Saleae's export-format article: header `Time [s],NAME...`, one row per change,
times in seconds (negative before a trigger), states 0, 1 or X."""
from __future__ import annotations

import numpy as np
import pytest

import gen_logic
from scsitrace import cli, parsers, schema
from scsitrace.errors import BadInput
from test_sigrok import CONTROL, L3, analyse, assert_same_analysis

PROBES = [("/" + b.replace("/", ""), b) for b in CONTROL] + [(f"Channel {8 + i}", f"DB{i}") for i in range(8)]
MAP = {f"DB{i}": f"Channel {8 + i}" for i in range(8)}


def l3_csv(path, **kw):
    tr = parsers.parse(L3).transitions()
    idx, words = gen_logic.changes(tr, PROBES, 50, low=set(CONTROL))
    gen_logic.write_saleae_csv(path, idx * 50, words, [p[0] for p in PROBES], **kw)
    return str(path)


def test_csv_analyses_as_the_source_trace(tmp_path):
    path = l3_csv(tmp_path / "c.csv", t0_s=-0.0015)           # a trigger 1.5 ms into the capture
    assert parsers.detect(path) == "saleae"
    with open(path) as fh:
        head = [fh.readline() for _ in range(2)]
    assert head[0].startswith("Time [s],/BSY,/SEL,") and head[1].startswith("-0.001500000,")
    got = analyse(path, mapping=MAP)
    assert_same_analysis(got, analyse(L3))
    meta = got[3].capture.meta
    assert meta["origin_s"] == -0.0015
    assert meta["sample_period_ns"] == 50.0                      # estimated: the shortest interval
    s = got[3].source["sampling"]
    assert s["sample_period_known"] is False
    assert any("estimated as 50 ns" in n for n in got[3].notes)


def test_x_holds_the_previous_state(tmp_path):
    """An X (no data) on BSY in the row where SEL changes: BSY keeps its level, counted."""
    names = ["BSY", "SEL", "MSG", "C/D", "I/O"]
    t = np.array([0, 1000, 2000, 3000])
    words = np.array([0, 1, 3, 1], dtype=np.uint64)
    path = str(tmp_path / "x.csv")
    gen_logic.write_saleae_csv(path, t, words, names, x_at={2: 0})
    cap = parsers.parse(path)
    tr = cap.transitions()
    b = schema.SIGNAL_BIT
    assert tr["lines"].to_list() == [0, 1 << b["BSY"], 3 << b["BSY"], 1 << b["BSY"]]
    assert cap.meta["x_values"] == 1 and cap.records.read == 4


@pytest.mark.parametrize("bad,expect", [
    ("0.000001000,1,0,0,0\n", "expected a time in seconds and 5 states"),
    ("0.000001000,1,0,2,0,0\n", "expected a time in seconds and 5 states"),
    ("soon,1,0,0,0,0\n", "expected a time in seconds"),
    ("-0.5,1,0,0,0,0\n", "time goes backwards")])
def test_bad_rows_name_their_line(tmp_path, bad, expect, capsys):
    good = "Time [s],BSY,SEL,MSG,C/D,I/O\n0.000000000,0,0,0,0,0\n0.000000500,1,0,0,0,0\n"
    path = tmp_path / "b.csv"
    path.write_text(good + bad + "0.000002000,0,0,0,0,0\n")
    with pytest.raises(BadInput, match=expect) as err:
        parsers.parse(str(path)).transitions()
    assert err.value.line == 4
    assert cli.main(["analyze", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    cap = parsers.parse(str(path), strict=False)
    assert cap.transitions().height == 3
    assert cap.records.skipped == 1 and cap.records.examples[0].startswith(f"{path}:4: ")


def test_not_a_logic2_header(tmp_path):
    path = tmp_path / "h.csv"
    path.write_text("Time [s],BSY,BSY\n0,0,0\n")
    with pytest.raises(BadInput, match="same name"):
        parsers.parse(str(path), "saleae")
