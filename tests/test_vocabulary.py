"""One vocabulary across layers (issue 26, point 4): the batch dataset built from one captured
trace of each layer (and SG_IO) is queried across layers: `op`, `status` from one list each,
`device_id` on every I/O, `bytes` the data moved, no layer's I/O table holding another layer's
columns, every column a name SQL takes unquoted, percentages that say their base (the README's
overhead query gives a block trace its share of Q2C, not 100 %), and the wall-clock start
where the capture has a clock."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from scsitrace import cli, schema, scsi
from scsitrace.reports import typed_export
from scsitrace.reports.dataset import SQL_NAME

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"
TRACES = {  # one real trace per layer, and SG_IO (a format with columns of its own)
    "bus": REPO / "fixtures" / "bus" / "random4k-l3" / "trace.ancot",
    "block": CAPTURED / "lsi_randread4k" / "lsi_randread4k.blktrace.0",
    "usb": CAPTURED / "usb_randread4k" / "usbmon.txt",
    "scsilog": CAPTURED / "lsi_seqread32k_logged" / "dmesg-scsi.txt",
    "sgio": CAPTURED / "sg" / "lsi_sg_tools" / "dd_4k.strace.txt",
}
LAYER = {"sgio": "scsilog"}
PREFIX = {"bus": "bus:", "block": "block:", "usb": "usb:", "scsilog": "scsi:"}
# the seven all-null bus columns of block I/Os
BUS_COLUMNS_OF_BLOCK = {"target", "lun", "tag", "opcode", "command", "connections", "disconnects"}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab") / "ds"
    assert cli.main(["batch", *map(str, TRACES.values()), "-o", str(out), "-j", "0"]) == 0
    traces = pl.read_parquet(out / "traces.parquet")
    name_of = {str(p): n for n, p in TRACES.items()}
    traces = traces.with_columns(pl.col("trace").replace_strict(name_of).alias("name"))
    ios = pl.scan_parquet(out / "ios").collect().join(traces.select("trace_id", "name", "layer"), on="trace_id")
    return out, traces, ios


def test_every_layer_is_in_the_dataset(dataset):
    _, traces, ios = dataset
    assert sorted(traces["name"]) == sorted(TRACES)
    assert set(traces["status"]) == {"ok"}
    assert set(ios["layer"]) == {"bus", "block", "usb", "scsilog"}
    for name in TRACES:
        assert ios.filter(pl.col("name") == name).height > 0, name


def test_op_and_status_come_from_one_list_on_every_layer(dataset):
    _, _, ios = dataset
    assert set(ios["op"].drop_nulls()) <= set(schema.OPS)
    statuses = set(ios["status"].drop_nulls())
    assert all(s in scsi.STATUSES or re.fullmatch(r"0x[0-9a-f]{2}", s) for s in statuses), statuses
    for name, part in ios.group_by("name"):
        assert part["op"].null_count() == 0, name      # every fixture's I/Os say what they are
        done = part.filter("complete")
        assert done.height and done["status"].null_count() == 0, name
    block = ios.filter(pl.col("layer") == "block")
    # btt's letters stay in their own column and agree with op (blkparse: W write, R read)
    letters = block.select(pl.col("rwbs").str.replace_all(r"[FSMA]", "").alias("rw"), "op").unique().rows()
    assert letters and all({"R": "read", "W": "write", "D": "discard"}.get(rw, "other") == op for rw, op in letters)
    assert set(ios.filter(pl.col("layer") != "block")["rwbs"].unique().to_list()) == {None}


def test_scsi_ops_by_opcode_and_block_ops_by_request_kind():
    cdbs = pl.DataFrame({"opcode": [0x28, 0x2A, 0x35, 0x91, 0x42, 0x12, None]}, schema={"opcode": pl.Int64})
    got = cdbs.select(scsi.op_kind_expr(pl.col("opcode")).alias("op"))["op"].to_list()
    assert got == ["read", "write", "flush", "flush", "discard", "other", None]
    from scsitrace.block.events import TC, TC_SHIFT
    from scsitrace.block.tables import op_expr
    tc = lambda *bits: sum(TC[b] for b in bits) << TC_SHIFT  # noqa: E731
    reqs = pl.DataFrame({"action": [tc("READ"), tc("WRITE"), tc("WRITE", "FLUSH", "SYNC"), tc("WRITE", "FLUSH", "SYNC"),
                                    tc("DISCARD", "WRITE"), 0],
                         "bytes": [4096, 4096, 4096, 0, 8192, 0]}, schema={"action": pl.UInt32, "bytes": pl.Int64})
    # blkparse: RS, W, FWS with data (a write with a preflush), FWS empty (a flush), DW, N
    assert reqs.select(op_expr(pl.col("action"), pl.col("bytes")).alias("op"))["op"].to_list() == [
        "read", "write", "write", "flush", "discard", "other"]


def test_device_id_and_bytes_on_every_io(dataset):
    out, traces, ios = dataset
    assert ios["device_id"].null_count() == 0
    for layer, part in ios.group_by("layer"):
        assert part["device_id"].str.starts_with(PREFIX[layer[0]]).all(), layer
    # one bytes column: the data each I/O moved (data_bytes is its deprecated twin)
    assert ios.filter(pl.col("bytes").ne_missing(pl.col("data_bytes"))).height == 0
    for row in traces.iter_rows(named=True):
        if row["data_bytes"] is not None and row["layer"] in ("block", "usb"):
            moved = ios.filter((pl.col("trace_id") == row["trace_id"]) & pl.col("complete"))["bytes"].sum()
            assert moved == row["data_bytes"], row["name"]
    # the per-device tables join the I/Os on device_id
    devices = pl.read_parquet(out / "devices.parquet")
    assert set(devices["trace_id"]) == set(traces.filter(pl.col("layer") != "bus")["trace_id"])
    for (tid,), part in devices.group_by("trace_id"):
        assert set(part["device_id"]) <= set(ios.filter(pl.col("trace_id") == tid)["device_id"]), tid
    targets = pl.read_parquet(out / "targets.parquet")
    bus_ids = set(ios.filter(pl.col("layer") == "bus")["device_id"].str.extract(r"^(bus:\d+)"))
    assert targets.height and bus_ids <= set(targets["device_id"])
    usb = ios.filter(pl.col("layer") == "usb")       # Bulk-Only: the CBW's length, apart
    assert usb["requested_bytes"].null_count() == 0
    assert (usb["requested_bytes"] - usb["bytes"] == usb["residue"].fill_null(0)).all()


@pytest.mark.parametrize("name", list(TRACES))
def test_no_layer_has_the_columns_of_another(tmp_path, name):
    layer = LAYER.get(name, name)
    ios_p, seg_p = tmp_path / "ios.parquet", tmp_path / "seg.parquet"
    assert cli.main(["analyze", str(TRACES[name]), "--ios", str(ios_p), "--segments", str(seg_p)]) == 0
    ios, seg = pl.read_parquet(ios_p), pl.read_parquet(seg_p)
    foreign = {c for c, layers in schema.IOS_LAYERS.items() if layer not in layers}
    assert not foreign & set(ios.columns), foreign & set(ios.columns)
    assert not {c for c, ls in schema.SEGMENTS_LAYERS.items() if layer not in ls} & set(seg.columns)
    if layer == "block":
        assert not BUS_COLUMNS_OF_BLOCK & set(ios.columns)
    # what is null throughout is the layer's own column, empty on this capture (never another's)
    own = set(typed_export.schema(layer, "ios", "sgio" if name == "sgio" else None))
    assert {c for c in ios.columns if ios[c].null_count() == ios.height} <= own


def test_each_layers_rows_in_the_dataset_are_its_ios_export(dataset, tmp_path):
    _, traces, ios = dataset
    for name in ("block", "usb"):
        dest = tmp_path / f"{name}.parquet"
        assert cli.main(["analyze", str(TRACES[name]), "--ios", str(dest)]) == 0
        alone = pl.read_parquet(dest)
        mine = ios.filter(pl.col("name") == name).select(alone.columns).sort("io")
        assert mine.equals(alone), name
        others = [c for c in ios.columns if c not in alone.columns and c not in ("trace_id", "name", "layer")]
        assert ios.filter(pl.col("name") == name).select(others).null_count().row(0) == tuple([mine.height] * len(others))


def test_every_dataset_column_is_a_name_sql_takes_unquoted(dataset):
    out, _, _ = dataset
    kept = {"summary.parquet"}                       # kept as it was for older scripts
    tables = {p.name: pl.read_parquet(p).columns for p in out.glob("*.parquet") if p.name not in kept}
    tables["targets.parquet"] = [c for c in tables["targets.parquet"] if not c.startswith("categories.")]
    tables["ios"] = pl.scan_parquet(out / "ios").collect_schema().names()
    assert {"traces.parquet", "categories.parquet", "counts.parquet", "labels.parquet",
            "target_categories.parquet"} <= set(tables)
    for table, columns in tables.items():
        bad = [c for c in columns if not SQL_NAME.fullmatch(c)]
        assert not bad, (table, bad)
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    reserved = {k for (k,) in con.sql("select keyword_name from duckdb_keywords() "
                                      "where keyword_category = 'reserved'").fetchall()}
    for table, columns in tables.items():
        assert not reserved & set(columns), (table, reserved & set(columns))
        source = (f"read_parquet('{out}/ios/*/*.parquet', hive_partitioning = true)" if table == "ios"
                  else f"'{out}/{table}'")
        con.sql(f"select {', '.join(columns)} from {source}").fetchall()   # no quotes needed


def readme_overhead_query() -> str:
    text = (REPO / "README.md").read_text()
    return re.search(r'duckdb\.sql\("""(.*?)"""\)\.show\(\)', text, re.S).group(1)


def test_readme_overhead_query_gives_each_trace_its_share_of_its_base(dataset, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "two"
    assert cli.main(["batch", str(TRACES["bus"]), str(TRACES["block"]), "-o", str(out), "-j", "0"]) == 0
    rows = duckdb.connect().sql(readme_overhead_query().replace('"ds/', f'"{out}/')).fetchall()
    got = {Path(trace).name: (base, pct) for trace, base, pct, _ in rows}
    assert set(got) == {TRACES["bus"].name, TRACES["block"].name}
    for name, doing in (("bus", ("Data Transfer", "Bus Free")), ("block", ("D2C",))):
        summary = json.loads(_analyze_json(tmp_path, name))
        cats = summary["categories"]
        assert {c["base"] for c in cats} == {"elapsed" if name == "bus" else "q2c"}
        base, pct = got[TRACES[name].name]
        assert base == cats[0]["base"]
        assert pct == pytest.approx(round(sum(c["percent"] for c in cats if c["name"] not in doing), 2))
    stages = {c["name"]: c for c in json.loads(_analyze_json(tmp_path, "block"))["categories"]}
    assert got[TRACES["block"].name][1] < 100                        # the old query said 100 %
    before_dispatch = sum(stages[s]["total_ns"] for s in ("Q2G", "G2I", "Q2M", "I2D"))
    q2c = sum(s["total_ns"] for s in stages.values())
    assert got[TRACES["block"].name][1] == pytest.approx(100 * before_dispatch / q2c, abs=0.5)


def _analyze_json(tmp_path, name) -> str:
    dest = tmp_path / f"{name}.json"
    assert cli.main(["analyze", str(TRACES[name]), "--json", str(dest)]) == 0
    return dest.read_text()


def test_start_epoch_where_the_capture_has_a_clock(dataset, tmp_path):
    _, traces, ios = dataset
    epoch = dict(zip(traces["name"], traces["start_epoch_ns"]))
    assert epoch["block"] is not None                   # blktrace's timestamp notify record
    assert epoch["bus"] is None and epoch["usb"] is None and epoch["scsilog"] is None
    assert epoch["sgio"] is None                         # strace -tt: a time of day, no date
    # the same reads seen by QEMU's trace log (the host's wall clock) and by blktrace in the
    # guest: their first I/Os are the same moment, give or take the guest's clock
    qemu = json.loads(_analyze_qemu(tmp_path))
    first_block = epoch["block"] + ios.filter(pl.col("name") == "block")["start_ns"].min()
    assert qemu["start_epoch_ns"] is not None
    assert abs(first_block - qemu["start_epoch_ns"]) < 2 * 10**9
    provenance = json.loads((TRACES["block"].parent / "provenance.json").read_text())
    from datetime import datetime
    captured = datetime.fromisoformat(provenance["captured_utc"].replace("Z", "+00:00")).timestamp()
    assert abs(epoch["block"] / 1e9 - captured) < 600


def _analyze_qemu(tmp_path) -> str:
    dest = tmp_path / "qemu.json"
    assert cli.main(["analyze", str(TRACES["block"].parent / "qemu-trace.txt"), "--json", str(dest)]) == 0
    return dest.read_text()


def test_window_moves_the_epoch_with_the_time_zero(tmp_path):
    """bus, usb and kernel logs count times from the window's start; block keeps btt's times."""
    from scsitrace.clock import window_start_ns
    assert window_start_ns("0.25:1") == 250_000_000 and window_start_ns(":1") == 0 and window_start_ns(None) == 0
    whole, cut = (json.loads(_json(tmp_path, TRACES["block"].parent / "qemu-trace.txt", *w))["start_epoch_ns"]
                  for w in ((), ("--window", "0.25:")))
    assert cut - whole == 250_000_000
    whole, cut = (json.loads(_json(tmp_path, TRACES["block"], *w))["start_epoch_ns"] for w in ((), ("--window", "0.25:")))
    assert cut == whole


def _json(tmp_path, path, *extra) -> str:
    dest = tmp_path / "w.json"
    assert cli.main(["analyze", str(path), "--json", str(dest), *extra]) == 0
    return dest.read_text()


from hypothesis import given, settings, strategies as st  # noqa: E402

from scsitrace.reports.dataset import sql_name  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=20))
def test_any_summary_key_becomes_an_sql_name(key):
    assert SQL_NAME.fullmatch(sql_name(key))


STATUS_TEXT = st.one_of(st.none(), st.sampled_from(list(scsi.STATUSES)), st.sampled_from(["PHASE ERROR", "DID_TIME_OUT", "0xzz", "0x1"]),
                        st.integers(0, 255).map(lambda v: f"0x{v:02x}"), st.text(max_size=8))


@settings(max_examples=100, deadline=None)
@given(st.lists(STATUS_TEXT, min_size=1, max_size=20), st.sampled_from(["bus", "usb", "scsilog"]))
def test_any_status_maps_onto_the_list_and_keeps_its_word(statuses, layer):
    frame = pl.DataFrame({"status": statuses, "data_bytes": [1] * len(statuses), "bytes": [2] * len(statuses)},
                         schema={"status": pl.Utf8, "data_bytes": pl.Int64, "bytes": pl.Int64})
    out = typed_export.vocabulary(frame, layer)
    for before, after, detail in zip(statuses, out["status"], out["status_detail"]):
        listed = before is None or before in scsi.STATUSES or re.fullmatch(r"0x[0-9a-f]{2}", before)
        assert (after, detail) == ((before, None) if listed else (scsi.ERROR, before))
    if layer != "bus":       # the command layers' `bytes` was the requested length
        assert out["bytes"].to_list() == [1] * len(statuses) and out["requested_bytes"].to_list() == [2] * len(statuses)


def test_a_bus_io_aborted_by_a_reset_is_an_error_that_says_so(tmp_path):
    dest = tmp_path / "ios.parquet"
    assert cli.main(["analyze", str(REPO / "fixtures" / "bus" / "reset-l1" / "trace.ancot"), "--ios", str(dest)]) == 0
    ios = pl.read_parquet(dest)
    aborted = ios.filter(pl.col("status_detail").is_not_null())
    assert aborted.height and set(aborted["status"]) == {scsi.ERROR}
    assert set(aborted["status_detail"]) <= {"ABORTED (reset)", "ABORTED (unexpected bus free)"}


def test_views_title_block_shares_as_shares_of_q2c(tmp_path):
    from scsitrace.reports import compare, terminal
    block = json.loads(_analyze_json(tmp_path, "block"))
    bus = json.loads(_analyze_json(tmp_path, "bus"))
    table = terminal.phase_table(block)
    assert "Q2C" in str(table.title) and "elapsed" not in str(table.title).replace("not of elapsed", "")
    assert table.columns[1].header == "% of Q2C"
    assert terminal.phase_table(bus).columns[1].header == "Percentage"
    title = lambda a, b: compare.fig_shares_ab(a, b, "A", "B")["layout"]["title"]  # noqa: E731
    assert "Q2C" in json.dumps(title(block, block)) and "elapsed" not in json.dumps(title(block, block)).replace(
        "not of elapsed", "")
    assert "Share of elapsed time (A)" in json.dumps(title(bus, block))


def test_the_kept_summary_table_says_its_percent_base(dataset):
    out, traces, _ = dataset
    kept = pl.read_parquet(out / "summary.parquet").join(traces.select("trace_id", "name"), on="trace_id")
    bases = dict(zip(kept["name"], kept["percent_base"]))
    assert bases["bus"] == "elapsed" and bases["block"] == "q2c"
    assert kept["percent.D2C"].drop_nulls().len() == 1 and kept["percent.Bus Free"].drop_nulls().len() == 1


def _requests_with_errors(path: Path, errors: list[int]) -> None:
    """A blktrace of one read request per entry (Q G I D C), its completion carrying that
    error field (an errno, negative, as the kernel stores it in the u16 field)."""
    import gen_blktrace
    from scsitrace.block import events as block
    read = (block.TC["READ"] | block.TC["SYNC"]) << block.TC_SHIFT
    out, seq = b"", 0
    for i, err in enumerate(errors):
        t0, sector = 1_000_000 * (i + 1), 4096 * (i + 1)
        for step, letter in enumerate("QGIDC"):
            seq += 1
            out += gen_blktrace.record(t0 + 10_000 * step, sector, 4096, block.TA[letter] | read, 100,
                                       gen_blktrace.DISK, seq=seq, error=(err & 0xFFFF) if letter == "C" else 0)
    path.write_bytes(out)


def test_a_block_completion_with_an_error_is_an_error_named_by_its_errno(tmp_path):
    """blktrace's C record carries the request's error: such a request is ERROR with the errno
    name in `status_detail` (it showed GOOD before), the others GOOD with no detail."""
    import errno
    trace = tmp_path / "t.blktrace.0"
    _requests_with_errors(trace, [0, -errno.EIO, 0, -errno.ETIMEDOUT, -4000])
    dest = tmp_path / "ios.parquet"
    assert cli.main(["analyze", str(trace), "--ios", str(dest)]) == 0
    ios = pl.read_parquet(dest).sort("io")
    assert ios["status"].to_list() == ["GOOD", scsi.ERROR, "GOOD", scsi.ERROR, scsi.ERROR]
    assert ios["status_detail"].to_list() == [None, "EIO", None, "ETIMEDOUT", "errno 4000"]
    assert ios["complete"].all()
    notes = json.loads(_json(tmp_path, trace))["notes"]
    assert any(n.startswith("3 requests completed with an error") and "EIO x1, ETIMEDOUT x1, errno 4000 x1" in n
               for n in notes), notes
    if shutil.which("blkparse"):      # blkparse's text prints the field unsigned: [65531]
        text = tmp_path / "t.txt"
        subprocess.run(["blkparse", "-i", str(trace), "-o", str(text)], check=True, capture_output=True, cwd=tmp_path)
        assert "[65531]" in text.read_text()
        assert cli.main(["analyze", str(text), "--ios", str(tmp_path / "text.parquet")]) == 0
        from_text = pl.read_parquet(tmp_path / "text.parquet").sort("io")
        assert from_text.select("status", "status_detail").equals(ios.select("status", "status_detail"))
