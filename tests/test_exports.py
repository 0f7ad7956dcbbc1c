"""Typed exports (issue 17, point 3): analyze --ios/--segments as Parquet and CSV, one device-id
form, convert for every layer, and the published schemas (docs/schemas/) against real outputs."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import polars as pl
import pytest

from scsitrace.canonical_export import canonical_schemas, out_paths
from scsitrace.cli import main
from scsitrace.reports import schemas, typed_export

REPO = Path(__file__).resolve().parents[1]
CASE = REPO / "fixtures" / "captured" / "uas_seqread32k"
TRACES = {  # one real trace per layer (and SG_IO, whose format adds columns)
    "bus": REPO / "fixtures" / "bus" / "random4k-l3" / "trace.ancot",
    "block": CASE / "uas_seqread32k.blktrace.0",
    "usb": CASE / "usbmon.txt",
    "scsilog": CASE / "ftrace.txt",
    "sgio": REPO / "fixtures" / "captured" / "sg" / "lsi_sg_tools" / "dd_4k.strace.txt",
}
LAYER = {"sgio": "scsilog"}
DEVICE_ID = {"bus": r"bus:\d+(:\d+)?", "block": r"block:\d+,\d+", "usb": r"usb:\d+:\d+:\d+",
             "scsilog": r"scsi:\d+:\d+:\d+:\d+", "sgio": r"scsi:/dev/\w+"}


def _export(tmp_path, name, suffix):
    ios, seg = tmp_path / f"{name}.ios.{suffix}", tmp_path / f"{name}.seg.{suffix}"
    assert main(["analyze", str(TRACES[name]), "--ios", str(ios), "--segments", str(seg), "--json", str(tmp_path / "s.json")]) == 0
    return ios, seg


@pytest.mark.parametrize("name", list(TRACES))
def test_parquet_exports_are_typed_with_one_device_id_form(tmp_path, name):
    layer = LAYER.get(name, name)
    ios_p, seg_p = _export(tmp_path, name, "parquet")
    ios, seg = pl.read_parquet(ios_p), pl.read_parquet(seg_p)
    fmt = "sgio" if name == "sgio" else None
    assert dict(ios.schema) == typed_export.schema(layer, "ios", fmt)      # declared, nothing undeclared
    assert dict(seg.schema) == typed_export.schema(layer, "segments")
    assert ios.height > 0 and seg.height > 0
    assert ios["start_ns"].dtype == pl.Int64
    assert ("opcode" in ios.columns) == (layer != "block")      # block requests carry no CDB column at all
    if layer != "block":
        assert ios["opcode"].dtype == pl.Int16
    for frame in (ios, seg):
        ids = frame["device_id"].drop_nulls().unique().to_list()
        assert ids and all(re.fullmatch(DEVICE_ID[name if name == "sgio" else layer], i) for i in ids), ids
    if layer != "block":   # block requests carry no CDB; every other layer's I/Os have opcode + name
        named = ios.filter(pl.col("opcode").is_not_null())
        assert named.height > 0 and named["command"].null_count() == 0
    if layer == "scsilog" and name == "scsilog":  # the kernel's own address, prefixed
        assert ios["device_id"].to_list() == ("scsi:" + ios["device"]).to_list()


@pytest.mark.parametrize("name", ["bus", "block", "usb", "sgio"])
def test_csv_reads_back_with_its_types(tmp_path, name):
    """CSV keeps numbers numeric; with the published schema a polars round trip is exact, even
    for columns that are empty on this layer (plain inference reads those as text)."""
    layer = LAYER.get(name, name)
    ios_p, seg_p = _export(tmp_path, name, "parquet")
    ios_c, seg_c = _export(tmp_path, name, "csv")
    fmt = "sgio" if name == "sgio" else None
    back = typed_export.read_csv(str(ios_c), layer, "ios", fmt)
    assert back.equals(pl.read_parquet(ios_p))
    assert typed_export.read_csv(str(seg_c), layer, "segments").equals(pl.read_parquet(seg_p))
    plain = pl.read_csv(ios_c)
    assert plain["start_ns"].dtype == pl.Int64 and plain["lba"].dtype in (pl.Int64, pl.String)
    empty = [c for c in back.columns if back[c].null_count() == back.height and back.schema[c].is_numeric()]
    if empty:  # what the schema is for
        assert plain.schema[empty[0]] == pl.String


@pytest.mark.parametrize("name", ["block", "usb", "scsilog", "sgio", "bus"])
def test_convert_writes_the_canonical_tables_of_every_layer(tmp_path, name, capsys):
    from scsitrace import parsers
    layer = LAYER.get(name, name)
    out = tmp_path / "t.parquet"
    assert main(["convert", str(TRACES[name]), "-o", str(out)]) == 0
    declared = canonical_schemas(layer)
    cap = parsers.parse(str(TRACES[name]))
    for table, path in out_paths(str(out), declared).items():
        frame = pl.read_parquet(path)
        assert dict(frame.schema) == {**declared[table], **{c: t for c, t in frame.schema.items() if c not in declared[table]}}
        assert list(frame.columns[:len(declared[table])]) == list(declared[table])
        if table in cap.frames and table != "transitions":
            assert frame.height == cap.frames[table].height
    if layer == "bus":   # read back by its reader: the same analysis
        capsys.readouterr()
        assert main(["analyze", str(out), "--json", "-"]) == 0
        back = json.loads(capsys.readouterr().out)
        assert main(["analyze", str(TRACES[name]), "--json", "-"]) == 0
        orig = json.loads(capsys.readouterr().out)
        assert back["categories"] == orig["categories"] and back["ios_completed"] == orig["ios_completed"]
    else:
        assert pl.read_parquet(out).height > 0


def test_convert_refuses_a_file_without_records(tmp_path, capsys):
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text("[    0.000000] Linux version 6.1.0\n[    0.100000] sd 2:0:0:0: [sda] 64 512-byte logical blocks\n")
    assert main(["convert", str(dmesg), "--format", "scsilog", "-o", str(tmp_path / "d.parquet")]) == 2
    assert "no scsilog records found" in capsys.readouterr().err
    assert not (tmp_path / "d.parquet").exists()


def test_published_schemas_are_generated_from_the_declarations():
    for name, text in schemas.render().items():
        assert (REPO / "docs" / "schemas" / name).read_text(encoding="utf-8") == text, (
            f"docs/schemas/{name} is stale: python -m scsitrace.reports.schemas docs/schemas")


@pytest.fixture(scope="module")
def validator():
    schema = json.loads((REPO / "docs" / "schemas" / "analyze-json.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


FILTERED = {"bus": ["--target", "1", "--window", "0:0.02"], "block": ["--device", "8,16", "--window", ":0.1"],
            "usb": ["--lun", "0"], "scsilog": ["--device", "2:0:0:0"], "sgio": []}


@pytest.mark.parametrize("filtered", [False, True], ids=["whole", "filtered"])
@pytest.mark.parametrize("name", list(TRACES))
def test_real_json_outputs_follow_the_published_schema(tmp_path, name, filtered, validator):
    out = tmp_path / "s.json"
    assert main(["analyze", str(TRACES[name]), "--json", str(out), *(FILTERED[name] if filtered else [])]) == 0
    doc = json.loads(out.read_text())
    errors = [f"{list(e.path)}: {e.message[:200]}" for e in validator.iter_errors(doc)]
    assert not errors, errors
    assert ("filters" in doc) == bool(filtered and FILTERED[name])
    # the schema does reject: a wrong type, a missing table, an undeclared key
    for mutate in (lambda d: d.__setitem__("elapsed_ns", "1 s"),
                   lambda d: d.pop("latency"),
                   lambda d: d.__setitem__("undeclared", 1)):
        bad = copy.deepcopy(doc)
        mutate(bad)
        assert not validator.is_valid(bad)


@pytest.mark.parametrize("suffix", ["csv", "parquet"])
def test_a_failing_command_leaves_no_streamed_ios_file(tmp_path, suffix, capsys):
    """The block layer writes --ios as it analyses; a command that then fails (exit 2: a
    profile the layer lacks) leaves no file behind, as the whole-table writers never did."""
    ios = tmp_path / f"x.ios.{suffix}"
    assert main(["analyze", str(TRACES["block"]), "--profile", "scsi", "--ios", str(ios)]) == 2
    assert "profile 'scsi' does not apply" in capsys.readouterr().err
    assert not ios.exists()
    assert main(["analyze", str(TRACES["block"]), "--ios", str(ios), "--json", str(tmp_path / "s.json")]) == 0
    assert ios.exists()
