"""convert: ancot-text -> Parquet -> the same analysis, streamed by row groups."""
from __future__ import annotations

import json

from busmodel import BusBuilder
from scsitrace import core, parsers
from scsitrace.cli import main
from scsitrace.parsers import ancot


def test_convert_round_trip_gives_identical_analysis(tmp_path, capsys):
    b = BusBuilder(level=3)
    b.bus_free()
    io, _ = b.command(1, bytes([0x28, 0, 0, 0, 0, 1, 0, 0, 2, 0]), disconnect_after_command=True)
    b.command(2, bytes([0x2A, 0, 0, 0, 0, 2, 0, 0, 1, 0]), data_out=bytes(512))
    b.reconnect(1, io, data_in=bytes(1024))
    b.finish()
    text = str(tmp_path / "t.ancot")
    ancot.write(text, b.transitions(), signals=b.signals()[:-1], data=["DB"], meta={"io_size": 512})
    out = str(tmp_path / "t.parquet")
    assert main(["convert", text, "-o", out]) == 0
    assert parsers.detect(out) == "transitions-parquet"
    a_text = core.analyze(parsers.parse(text))
    a_pq = core.analyze(parsers.parse(out))
    assert a_pq.segments.equals(a_text.segments) and a_pq.ios.equals(a_text.ios)
    assert a_pq.capture.meta["io_size"] == "512"
    capsys.readouterr()
    assert main(["analyze", out, "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["ios_completed"] == 2


def test_parquet_without_metadata_is_bad_input(tmp_path):
    import polars as pl
    p = tmp_path / "x.parquet"
    pl.DataFrame({"a": [1]}).write_parquet(p)
    assert main(["analyze", str(p)]) == 2
