"""blktrace protocol version 8 (`struct blk_io_trace2`, Linux 6.19): real v7 captures and
generated ones converted record by record to v8 (tests/blktrace_v8.py, its own struct layout,
not the reader's declaration) read into the same tables, per-CPU files, piped streams and
`blkparse -d` dumps, either byte order, and v7 and v8 files of one capture mixed; v8's new
actions (zone write plug ZP, unplug ZU) and operations (zone append, reset, ...) named."""
from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import blktrace_v8  # noqa: E402
import gen_blktrace as gen  # noqa: E402
from clirun import run_cli  # noqa: E402
from test_blktrace_stream import assert_same, streamed  # noqa: E402

from scsitrace import core  # noqa: E402
from scsitrace.block import events as block  # noqa: E402
from scsitrace.errors import BadInput, TruncatedInput  # noqa: E402
from scsitrace.parsers import blktrace as bt  # noqa: E402

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
OWN = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
TABLES = ("stages", "events", "overhead", "devices", "processes", "process_stages", "size_histogram", "latency")
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def _captures() -> list[list[Path]]:
    """The per-CPU files of every real capture at hand (the project's rig, ../shared/realdata)."""
    found = []
    for d in sorted(OWN.iterdir()) if OWN.is_dir() else []:
        files = sorted(d.glob("*.blktrace.*"))
        if files:
            found.append(files)
    shared = REAL / "captured" / "blktrace"
    for first in sorted(shared.glob("*.blktrace.0")) if shared.is_dir() else []:
        found.append(sorted(shared.glob(first.name[:-1] + "*")))
    return found


CAPTURES = _captures()
DUMPS = sorted((REAL / "blktrace").glob("*.bin")) if (REAL / "blktrace").is_dir() else []


def _tables(path) -> tuple:
    a = core.analyze(bt.parse(str(path)))
    return {name: a.table(name) for name in TABLES}, a.ios, a.elapsed_ns, a.capture.records.as_json()


def _convert(files: list[Path], d: Path, which=lambda k: True) -> Path:
    """The capture's files under d as t.blktrace.<cpu>, each converted to v8 when `which(k)`."""
    for k, f in enumerate(files):
        cpu = f.name.rsplit(".", 1)[1]
        data = f.read_bytes()
        (d / f"t.blktrace.{cpu}").write_bytes(blktrace_v8.to_v8(data) if which(k) else data)
    return d / "t"


def assert_same_tables(a: tuple, b: tuple) -> None:
    for name in TABLES:
        assert a[0][name].equals(b[0][name]), name
    assert a[1].equals(b[1])
    assert a[2:] == b[2:]


@pytest.mark.skipif(not CAPTURES, reason="no real blktrace capture at hand")
@pytest.mark.parametrize("files", CAPTURES, ids=[f[0].name.split(".")[0] for f in CAPTURES])
def test_a_real_capture_converted_to_v8_gives_the_same_tables(files, tmp_path):
    v7 = _tables(files[0])
    v8 = _convert(files, tmp_path)
    assert sum((tmp_path / f"t.blktrace.{f.name.rsplit('.', 1)[1]}").stat().st_size for f in files) \
        == sum(f.stat().st_size for f in files) + 16 * bt.parse(str(files[0])).records.read   # 16 more a record
    assert_same_tables(_tables(v8), v7)
    cap = bt.parse(str(v8))
    assert cap.meta["versions"] == {"8": cap.records.read}


@pytest.mark.skipif(not CAPTURES, reason="no real blktrace capture at hand")
def test_v7_and_v8_files_of_one_capture_mixed(tmp_path):
    files = next(f for f in CAPTURES if len(f) > 1)
    v7 = _tables(files[0])
    mixed = _convert(files, tmp_path, which=lambda k: k % 2 == 1)
    assert_same_tables(_tables(mixed), v7)
    cap = core.analyze(bt.parse(str(mixed)))
    assert set(cap.capture.meta["versions"]) == {"7", "8"}
    note = next(n for n in cap.notes if "mixes blktrace protocol versions" in n)
    assert "t.blktrace.0: " in note and " v7" in note and " v8" in note


@pytest.mark.skipif(not DUMPS, reason="../shared/realdata/blktrace absent")
@pytest.mark.parametrize("dump", DUMPS, ids=[d.name for d in DUMPS])
def test_a_real_blkparse_dump_converted_to_v8(dump, tmp_path):
    v8 = tmp_path / "t.bin"
    v8.write_bytes(blktrace_v8.to_v8(dump.read_bytes()))
    assert_same_tables(_tables(v8), _tables(dump))


@SLOW
@given(n_ios=st.integers(1, 80), seed=st.integers(0, 10**6), layout=st.sampled_from(["per-cpu", "pipe", "dump"]),
       order=st.sampled_from(["<", ">"]), chunk=st.integers(1, 40), read_size=st.integers(1, 400))
def test_generated_captures_in_v8_read_alike_at_any_size(tmp_path_factory, n_ios, seed, layout, order, chunk,
                                                         read_size):
    """Merges, remaps, requeues, splits (their PDUs), piped streams out of time order, dumps,
    big-endian: the v8 form streams into the v7 form's columns and tables."""
    d = tmp_path_factory.mktemp("v8")
    order = "<" if layout == "pipe" else order
    ev = gen.workload(n_ios, seed=seed)
    ev["cpu"] = np.random.default_rng(seed).integers(0, 3, len(ev["time"]))
    paths = gen.write(ev, str(d / "t"), layout=layout, order=order)
    whole = bt.parse(paths[0], eager=True)
    (d / "v8").mkdir()
    for p in paths:
        Path(p.replace(str(d / "t"), str(d / "v8" / "t"))).write_bytes(blktrace_v8.to_v8(Path(p).read_bytes()))
    v8 = paths[0].replace(str(d / "t"), str(d / "v8" / "t"))
    cap, cols = streamed(v8, chunk, read_size)
    assert_same(cols, whole.columns["events"])
    assert cap.records.as_json() == whole.records.as_json()
    assert cap.frames["processes"].equals(whole.frames["processes"])
    mine = bt.parse(v8, eager=True).frames["events"].drop("position")
    assert mine.equals(whole.frames["events"].drop("position"))


# ---------------------------------------------------------------- v8's new actions

ZONE_RECORDS = [
    # (action code, upper action bits: v8 category << 16 >> 32, expected RWBS)
    (block.TA["Q"], block.TC["ZONE_APPEND"] >> 16, "ZA"),
    (block.TA["Q"], block.TC["ZONE_RESET"] >> 16, "ZR"),
    (block.TA["Q"], block.TC["ZONE_RESET_ALL"] >> 16, "ZRA"),
    (block.TA["Q"], block.TC["ZONE_FINISH"] >> 16, "ZF"),
    (block.TA["Q"], block.TC["ZONE_OPEN"] >> 16, "ZO"),
    (block.TA["Q"], block.TC["ZONE_CLOSE"] >> 16, "ZC"),
    (block.TA["ZP"], 0, None),
    (block.TA["ZU"], 0, None),
]


def _v8_record(t, sector, nbytes, action, pid=7, device=gen.DISK, cpu=0, pdu=b"", order="<") -> bytes:
    return struct.pack(order + blktrace_v8.V8, bt.MAGIC | bt.VERSION2, 1, t, sector, nbytes, pid, action,
                       device, cpu, 0, len(pdu)) + pdu


def test_zone_actions_and_operations_are_named(tmp_path):
    recs = b""
    queue = block.TC["QUEUE"] << block.TC_SHIFT
    for k, (code, hi, _) in enumerate(ZONE_RECORDS):
        action = code | queue | (block.TC["WRITE"] << block.TC_SHIFT) | hi << 32
        pdu = (3).to_bytes(8, "big") if code == block.TA["ZU"] else b""
        recs += _v8_record(1000 * (k + 1), 8 * k, 4096, action, pdu=pdu)
    path = tmp_path / "z.blktrace.0"
    path.write_bytes(recs)
    cap = bt.parse(str(path))
    ev = cap.frames["events"]
    assert ev["act"].to_list() == ["Q"] * 6 + ["ZP", "ZU"]
    assert ev["action"].dtype.is_integer() and int(ev["action"][0]) >> 32 == block.TC["ZONE_APPEND"] >> 16
    assert ev["pdu_int"][7] == 3
    combos = [(int(a) & ~0xFFFF, True) for a in ev["action"]]
    rwbs = ev.select(block.rwbs_expr(pl.col("action"), pl.col("bytes"), combos))
    assert rwbs.to_series().to_list()[:6] == [r for _, _, r in ZONE_RECORDS[:6]]
    note = next(n for n in cap.notes if "v8 operations" in n)
    for name in ("zone append (ZA) 1", "zone reset (ZR) 1", "zone reset all (ZRA) 1", "zone finish (ZF) 1",
                 "zone open (ZO) 1", "zone close (ZC) 1"):
        assert name in note
    status, out, err = run_cli(["analyze", str(path), "--json", "-"])
    assert status == 0, err
    assert json.loads(out)["events"] == {"Q": 6, "ZP": 1, "ZU": 1}


def test_blkparse_text_of_zone_operations_reads_back(tmp_path):
    text = ("  8,0    0        1     0.000001000     7  Q ZA 0 + 8 [fio]\n"
            "  8,0    0        2     0.000002000     7  Q ZRA 8 + 8 [fio]\n"
            "  8,0    0        3     0.000003000     7  ZP  N [fio]\n"
            "  8,0    0        4     0.000004000     7  Q FZRS 16 + 8 [fio]\n")
    p = tmp_path / "z.blkparse.txt"
    p.write_text(text)
    from scsitrace.parsers import blkparse
    ev = blkparse.parse(str(p)).frames["events"]
    assert ev["act"].to_list() == ["Q", "Q", "ZP", "Q"]
    hi = [int(a) >> 32 for a in ev["action"]]
    assert hi == [block.TC["ZONE_APPEND"] >> 16, block.TC["ZONE_RESET_ALL"] >> 16, 0, block.TC["ZONE_RESET"] >> 16]
    low = int(ev["action"][3]) >> block.TC_SHIFT & 0xFFFF
    assert low & block.TC["FLUSH"] and low & block.TC["SYNC"] and not low & block.TC["READ"]
    assert not int(ev["action"][0]) >> block.TC_SHIFT & block.TC["AHEAD"]       # the A of ZA is not read-ahead


# ---------------------------------------------------------------- errors

def test_v8_errors_name_the_record(tmp_path):
    rec = _v8_record(1000, 8, 4096, block.TA["Q"] | block.TC["QUEUE"] << block.TC_SHIFT)
    cut = tmp_path / "cut.blktrace.0"
    cut.write_bytes(rec + rec[:48])                 # v7's header length, short of v8's
    with pytest.raises(TruncatedInput, match="16|48 bytes left, a record needs 64") as e:
        bt.parse(str(cut))
    assert e.value.offset == 64
    lenient = bt.parse(str(cut), strict=False)
    assert lenient.records.read == 1 and lenient.records.skipped == 1
    v9 = tmp_path / "v9.blktrace.0"
    v9.write_bytes(rec + bytes([0x09]) + rec[1:])
    with pytest.raises(BadInput, match="unsupported blktrace version 9") as e:
        bt.parse(str(v9))
    assert e.value.offset == 64
