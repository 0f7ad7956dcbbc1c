"""`scsitrace ios`: the I/Os in order, one line each, the same rows as `analyze --ios`
exports (same filters, applied by the analysis), every line within the width."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from scsitrace.cli import main
from scsitrace.reports import typed_export

ROOT = Path(__file__).resolve().parent.parent
SG = ROOT / "fixtures/captured/sg/lsi_sg_tools"
TRACES = {"bus": ROOT / "fixtures/captured/lsi_randread4k/qemu-trace.txt",
          "bus-ancot": ROOT / "fixtures/bus/table3-l3/trace.ancot",
          "block": ROOT / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0",
          "usb": ROOT / "fixtures/captured/usb_bufread32k/usbmon.txt",
          "scsilog": ROOT / "fixtures/captured/lsi_randread4k/ftrace.txt",
          "sgio": SG / "parallel.strace.txt",
          "sgio-sense": SG / "inq_badpage.strace.txt"}
ROW = re.compile(r"^\s*(\d+)\s+(\d+\.\d{6})\s")


def listed(capsys, argv) -> tuple[list[str], list[str]]:
    """(the I/O lines of `ios`, the other lines) at width 200 (no cell wraps)."""
    assert main(["ios", *argv, "--width", "200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    return [line for line in lines if ROW.match(line)], [line for line in lines if not ROW.match(line)]


def exported(capsys, tmp_path, argv) -> pl.DataFrame:
    out = tmp_path / "ios.csv"
    assert main(["analyze", *argv, "--ios", str(out), "--json", str(tmp_path / "s.json")]) == 0
    capsys.readouterr()
    import json
    layer = json.loads((tmp_path / "s.json").read_text())["layer"]
    return pl.read_csv(out, schema_overrides=typed_export.ios_schema(layer), infer_schema_length=0)


@pytest.mark.parametrize("name", TRACES)
def test_every_io_listed_in_order_as_exported(capsys, tmp_path, name):
    """One line per I/O of the exported table, in its order: number, start time in seconds,
    device_id, command (block: op), LBA, blocks and bytes as the export has them."""
    rows, _ = listed(capsys, [str(TRACES[name])])
    ios = exported(capsys, tmp_path, [str(TRACES[name])])
    assert len(rows) == ios.height > 0
    for line, io in zip(rows, ios.iter_rows(named=True)):
        number, seconds = ROW.match(line).groups()
        assert int(number) == io["io"]
        assert seconds == f"{io['start_ns'] / 1e9:.6f}"
        fields = line.split()
        assert (io["device_id"] or io["device"]) in line
        assert (io.get("command") or io["op"]) in line
        if io["lba"] is not None:
            assert f"{io['lba']}+{io['blocks']}" in fields
        if io["bytes"] is not None:
            assert fields[-1] == str(io["bytes"])


def test_status_shows_the_sense(capsys):
    rows, _ = listed(capsys, [str(TRACES["sgio-sense"])])
    assert "CHECK CONDITION, Illegal Request 24/00" in rows[0]


@pytest.mark.parametrize("name", TRACES)
@pytest.mark.parametrize("width", [60, 80, 120, None])
def test_every_line_fits(capsys, monkeypatch, name, width):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["ios", str(TRACES[name])] + ([] if width is None else ["--width", str(width)])) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines and max(map(len, lines)) <= (width or 80)


def test_limit(capsys):
    rows, other = listed(capsys, [str(TRACES["sgio"]), "--limit", "7"])
    assert [int(ROW.match(r)[1]) for r in rows] == list(range(7))
    assert other[-1] == "first 7 of 201 I/Os (--limit)"


@pytest.mark.parametrize("name, filters", [("block", ["--window", "0.1:0.4"]), ("block", ["--pid", "235,236,237"]),
                                           ("scsilog", ["--window", "0.2:"]), ("usb", ["--window", ":0.1"]),
                                           ("bus", ["--window", "0.05:0.3"]), ("sgio", ["--pid", "262"])])
def test_filters_select_what_analyze_exports(capsys, tmp_path, name, filters):
    """The filters are analyze's, applied by the analysis: the same I/Os as `analyze --ios`
    with the same filters, fewer than without them."""
    argv = [str(TRACES[name]), *filters]
    rows, _ = listed(capsys, argv)
    ios = exported(capsys, tmp_path, argv)
    whole = exported(capsys, tmp_path, [str(TRACES[name])])
    assert [int(ROW.match(r)[1]) for r in rows] == ios["io"].to_list()
    assert 0 < ios.height < whole.height


def test_mmc_and_vendor_opcodes_are_named():
    """READ HEADER (MMC 0x44) and the rest of MMC decode by name through the compiled CDB pass
    every layer uses; the NEC drives' vendor opcodes only with their command set (a vendor
    opcode means something else on another device)."""
    from scsitrace import scsi
    cdbs = pl.Series([bytes([0x44, 0, 0, 0, 0, 16, 0, 0, 12, 0]), bytes([0xDD, 0, 0, 0, 0, 0, 0, 0, 0, 0]),
                      bytes([0x43, 2, 0, 0, 0, 0, 0, 0, 12, 0])], dtype=pl.Binary)
    names = list(scsi.decode_cdbs(cdbs)["command"])
    assert names == ["Read Header", "Unknown 0xdd", "Read TOC/PMA/ATIP"]
    assert not any(n.startswith("Unknown") for n in map(scsi.opcode_name, (0x44, 0x4B, 0xBB)))
    assert scsi.opcode_name(0xDD, command_set="pce") == "Read Subcode Q"


def test_later_batches_with_wider_numbers_stay_within_the_width():
    """A streaming layer's later batch with longer numbers (I/O 100000, LBA 9 digits) widens
    the number columns; the text columns give up the room, every line still fits."""
    import io as _io
    from scsitrace.reports.ios_list import Lister
    out = _io.StringIO()
    lister = Lister(out, 60)
    row = {"io": 1, "start_ns": 5_000, "device_id": "scsi:0:0:0:0", "command": "Read(10)", "lba": 8, "blocks": 8,
           "status": "GOOD", "response_ns": 1000, "bytes": 4096}
    lister.add(pl.DataFrame([row]))
    wide = {**row, "io": 100000, "start_ns": 123_000_000_000, "lba": 987654321, "blocks": 2048,
            "status": "CHECK CONDITION", "bytes": 1048576, "response_ns": 12_345_678_901}
    lister.add(pl.DataFrame([wide]))
    lines = out.getvalue().splitlines()
    assert max(map(len, lines)) <= 60
    assert any("987654321+2048" in line for line in lines) and any("100000" in line for line in lines)


def test_on_a_terminal_the_list_goes_through_the_pager(monkeypatch, tmp_path, capsys):
    """stdout a terminal: the lines go to $PAGER (here a script keeping what it reads);
    --no-pager and --limit print directly."""
    import sys
    got = tmp_path / "paged.txt"
    monkeypatch.setenv("PAGER", f"{sys.executable} -c \"import sys; open({str(got)!r}, 'w').write(sys.stdin.read())\"")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    assert main(["ios", str(TRACES["block"]), "--width", "100"]) == 0
    paged = got.read_text().splitlines()
    assert sum(1 for line in paged if ROW.match(line)) == 64 and capsys.readouterr().out == ""
    got.unlink()
    assert main(["ios", str(TRACES["block"]), "--width", "100", "--no-pager"]) == 0
    assert not got.exists() and sum(1 for line in capsys.readouterr().out.splitlines() if ROW.match(line)) == 64
