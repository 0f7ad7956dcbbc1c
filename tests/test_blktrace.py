"""blktrace binary reader: the construct declaration against the bulk decode, record chains
with any PDU lengths, byte orders, per-CPU capture layouts, and hostile files
(tests/gen_blktrace.py lists each one and what must happen)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402

from scsitrace import cli, parsers
from scsitrace.block import events as block  # noqa: E402
from scsitrace.errors import BadInput, TruncatedInput  # noqa: E402
from scsitrace.parsers import blktrace as bt  # noqa: E402

U32 = st.integers(0, 2**32 - 1)
NOT_NOTIFY = st.integers(0, 2**32 - 1).filter(lambda a: not a & block.TC_NOTIFY)
FIELDS = st.fixed_dictionaries({
    "time": st.integers(0, 2**62), "sector": st.integers(0, 2**63 - 1), "bytes": U32, "action": NOT_NOTIFY,
    "pid": st.integers(0, 2**31 - 1), "device": U32, "cpu": st.integers(0, 2**31 - 1),
    "error": st.integers(0, 2**15 - 1), "pdu": st.binary(max_size=40)})


def _write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def _encode(records: list[dict], order: str) -> bytes:
    return b"".join(gen.record(r["time"], r["sector"], r["bytes"], r["action"], r["pid"], r["device"],
                               r["cpu"], seq=k, pdu=r["pdu"], order=order, error=r["error"])
                    for k, r in enumerate(records))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(FIELDS, min_size=1, max_size=30), order=st.sampled_from("<>"))
def test_bulk_decode_equals_the_construct_declaration(tmp_path, records, order):
    """Every field as construct would parse it, whatever the PDU lengths (odd ones force the
    byte-level walk) and the byte order."""
    path = _write(tmp_path, "r.bin", _encode(records, order))
    events = bt.parse(path).frames["events"].sort("seq")
    assert events.height == len(records)
    swap = (lambda raw: raw) if order == "<" else (
        lambda raw: np.frombuffer(raw, bt.DTYPE_BE).astype(bt.DTYPE_LE).tobytes())
    raw = Path(path).read_bytes()
    off = 0
    for k, row in enumerate(events.iter_rows(named=True)):
        parsed = bt.BLK_IO_TRACE.parse(swap(raw[off:off + bt.HEADER]))
        assert row["position"] == off
        assert (row["seq"], row["sector"], row["bytes"], row["action"], row["pid"], row["device"],
                row["cpu"], row["error"]) == (parsed.sequence, parsed.sector, parsed.bytes, parsed.action,
                                              parsed.pid, parsed.device, parsed.cpu, parsed.error)
        assert row["t_ns"] == parsed.time - min(r["time"] for r in records)
        off += bt.HEADER + parsed.pdu_len


def test_numpy_dtype_mirrors_the_declaration():
    assert bt.DTYPE_LE.itemsize == bt.BLK_IO_TRACE.sizeof() == 48
    assert list(bt.DTYPE_LE.names) == [sc.name for sc in bt.BLK_IO_TRACE.subcons]
    rec = gen.record(123, 456, 4096, 7 | (1 << 16), 99, (8 << 20) | 16, 1, seq=5)
    arr = np.frombuffer(rec, bt.DTYPE_LE)[0]
    built = bt.BLK_IO_TRACE.parse(rec)
    assert all(int(arr[name]) == built[name] for name in bt.DTYPE_LE.names)


def test_pdus_remap_split_unplug_and_process_names(tmp_path):
    ev = gen.workload(400, seed=3, merges=0.1, requeues=0.05, splits=0.1, remaps=0.2)
    path = _write(tmp_path, "w.bin", gen.encode(ev))
    cap = bt.parse(path)
    e = cap.frames["events"]
    a = e.filter(pl.col("act") == "A")
    assert a.height == int(np.sum(ev["pdu_kind"] == gen.PDU_REMAP))
    assert set(a["pdu_dev"].to_list()) == {gen.DM}
    # the remap's from-sector is the dm Q's sector: every A points at a Q on 253,0
    dm_q = set(e.filter((pl.col("act") == "Q") & (pl.col("device") == gen.DM))["sector"].to_list())
    assert set(a["pdu_sector"].to_list()) <= dm_q
    x = e.filter(pl.col("act") == "X")
    assert (x["pdu_sector"] == x["sector"] + 8).all()
    u = e.filter(pl.col("act") == "U")
    assert (u["pdu_int"] == 1).all()
    # btt keeps a command name up to its first "/" (kworker/0:1H -> kworker)
    assert dict(cap.frames["processes"].iter_rows()) == {p: n.split("/")[0] for p, n in gen.PIDS.items()}


def test_timestamp_and_message_notifies(tmp_path):
    import struct
    stamp = gen.record(5000, 0, 0, block.TC_NOTIFY | block.TN_TIMESTAMP, 0, gen.DISK,
                       pdu=struct.pack("<II", 1_700_000_000, 250))
    note = gen.record(6000, 0, 0, block.TC_NOTIFY | block.TN_MESSAGE, 0, gen.DISK, pdu=b"bfq start\0")
    cap = bt.parse(_write(tmp_path, "n.bin", stamp + note + gen.encode(gen.workload(5, seed=2))))
    assert cap.meta["wall_clock"] == [{"time_abs": 5000, "wall_clock_ns": 1_700_000_000 * 10**9 + 250}]
    assert [m["text"] for m in cap.meta["messages"]] == ["bfq start"]
    assert cap.records.read == cap.frames["events"].height + 2 + len(gen.PIDS)


def test_big_endian_reads_like_little_endian(tmp_path):
    ev = gen.workload(200, seed=4)
    le = bt.parse(_write(tmp_path, "le.bin", gen.encode(ev, order="<"))).frames["events"]
    be = bt.parse(_write(tmp_path, "be.bin", gen.encode(ev, order=">"))).frames["events"]
    assert le.equals(be)


def test_per_cpu_files_base_name_and_pipe_give_one_capture(tmp_path):
    ev = gen.workload(300, seed=5)
    base = str(tmp_path / "sda")
    paths = gen.write(ev, base)
    pipe = gen.write(ev, str(tmp_path / "pipe.bin"), layout="pipe")[0]
    cols = ["t_ns", "seq", "cpu", "act", "device", "sector", "bytes", "pid"]
    by_base = bt.parse(base).frames["events"].select(cols)
    by_file = bt.parse(paths[1]).frames["events"].select(cols)
    by_pipe = bt.parse(pipe).frames["events"].select(cols)
    assert by_base.equals(by_file)
    assert by_base.sort("t_ns", "cpu", "seq").equals(by_pipe.sort("t_ns", "cpu", "seq"))
    assert by_base.height == len(ev["time"])
    assert by_base["t_ns"].is_sorted()
    assert parsers.detect(base) == "blktrace"


def test_hostile_files(tmp_path):
    """Each hostile file of gen_blktrace: strict error at the named offset, or lenient good records."""
    paths = gen.hostile_cases(str(tmp_path))
    good = gen.workload(20, seed=7, merges=0, requeues=0, splits=0, remaps=0.2)
    n_good = len(good["time"])
    full = bt.parse(paths["magic-in-pdu"])           # the walk follows lengths, not magic
    assert full.frames["events"].height == n_good and full.anomalies.height == 0

    cases = {"truncated-header": TruncatedInput, "truncated-pdu": TruncatedInput,
             "garbage-middle": BadInput, "bad-version": BadInput}
    for name, error in cases.items():
        with pytest.raises(error) as exc:
            bt.parse(paths[name])
        assert exc.value.offset is not None and str(exc.value).startswith(paths[name])
        lenient = bt.parse(paths[name], strict=False)
        assert lenient.frames["events"].height == n_good, name
        assert lenient.records.skipped == 1 and lenient.anomalies.height == 1, name
    with pytest.raises(BadInput, match="unsupported blktrace version 6"):
        bt.parse(paths["bad-version"])
    with pytest.raises(BadInput, match="bad magic"):
        bt.parse(paths["garbage-middle"])
    size = os.path.getsize(paths["truncated-header"])
    with pytest.raises(TruncatedInput) as exc:
        bt.parse(paths["truncated-header"])
    assert exc.value.offset == size - 20


def test_cpu_field_disagreeing_with_the_file_name(tmp_path):
    cap = bt.parse(gen.hostile_cases(str(tmp_path))["cpu-mismatch"])
    assert cap.anomalies["kind"].to_list() == ["CPU MISMATCH"]
    assert cap.frames["events"].height > 0


def test_garbage_file_is_bad_input_and_cli_exit_2(tmp_path, capsys):
    path = _write(tmp_path, "junk.blktrace.0", b"\x07tae" + bytes(60) + b"junk" * 10)
    with pytest.raises(BadInput):
        bt.parse(path)
    assert cli.main(["analyze", path, "--format", "blktrace"]) == 2
    err = capsys.readouterr().err
    assert "byte offset" in err and "Traceback" not in err
    assert cli.main(["analyze", path, "--format", "blktrace", "--lenient", "--json", "-"]) == 0


def test_cli_filters_and_json_contract(tmp_path, capsys):
    import json
    ev = gen.workload(300, seed=6)
    base = str(tmp_path / "sdb")
    gen.write(ev, base)
    assert cli.main(["analyze", base, "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["layer"] == "block" and out["profile"] == "btt"
    assert [c["name"] for c in out["categories"]] == ["Q2G", "G2I", "Q2M", "I2D", "D2C"]
    names = {(s["device"], s["name"]) for s in out["stages"]}
    for stage in ("Q2Q", "Q2G", "G2I", "Q2M", "I2D", "D2C", "Q2C"):
        assert ("all", stage) in names and ("8,0", stage) in names
    counts = out["events"]
    assert counts["Q"] == int(np.sum((ev["action"] & 0xFF) == block.TA["Q"]))
    assert sum(counts.values()) == len(ev["time"])
    assert cli.main(["analyze", base, "--json", "-", "--device", "253,0"]) == 0
    dm = json.loads(capsys.readouterr().out)
    assert {s["device"] for s in dm["stages"]} == {"253,0", "all"}
    assert cli.main(["analyze", base, "--json", "-", "--window", "0:0.001"]) == 0
    early = json.loads(capsys.readouterr().out)
    assert early["elapsed_ns"] <= 1_000_000 and early["ios_completed"] < out["ios_completed"]
    assert cli.main(["analyze", base, "--json", "-", "--pid", "fio"]) == 0
    fio = json.loads(capsys.readouterr().out)
    assert [p["process"] for p in fio["processes"]] == ["fio"]
    assert cli.main(["analyze", base, "--window", "2:1"]) == 2
    assert cli.main(["analyze", base, "--device", "sda"]) == 2


def test_segments_tile_the_trace_per_device_and_ios_follow_the_schema(tmp_path):
    from scsitrace import core, schema
    path = _write(tmp_path, "t.bin", gen.encode(gen.workload(300, seed=9, remaps=0.2)))
    analysis = core.analyze(bt.parse(path), core.Options())
    schema.validate(analysis.ios, schema.ios_columns("block"), "ios")
    seg = analysis.segments
    assert set(seg["category"].unique().to_list()) == {"Busy", "Idle"}
    for dev, part in seg.group_by("device"):
        part = part.sort("start_ns")
        assert part["start_ns"][0] == analysis.start_ns and part["end_ns"][-1] == analysis.start_ns + analysis.elapsed_ns
        assert (part["start_ns"][1:] == part["end_ns"][:-1]).all()       # no gap, no overlap
    done = analysis.ios.filter("complete")
    assert done.height == analysis.ios_completed
    assert (done["q2c_ns"] >= done["d2c_ns"]).all()
    assert (done["end_ns"] - done["start_ns"] == done["q2c_ns"]).all()
