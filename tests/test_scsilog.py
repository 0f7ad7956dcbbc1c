"""SCSI kernel logs: ftrace scsi_dispatch_cmd_* events and dmesg SCSI logging -> commands,
service times and unpaired reasons; the bulk CDB decoder against the per-CDB one."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

import cdb_reference
from scsitrace import core, parsers, scsi
from scsitrace.cli import main
from scsitrace.errors import BadInput
from scsitrace.reports import summary as summ

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "captured"
FTRACE_REAL = sorted((REAL / "ftrace").glob("*.ftrace.txt")) if REAL.exists() else []
DMESG_REAL = REAL / "guest" / "dmesg.txt"
FTRACE_EVENT = re.compile(r"\s(\d+)\.(\d+): scsi_dispatch_cmd_(\w+): host_no=(\d+) channel=(\d+) id=(\d+) "
                          r"lun=(\d+) .*?driver_tag=(-?\d+).*?raw=([0-9a-f ]+)\)")


def analyze(path, **kw):
    return core.analyze(parsers.parse(str(path), "scsilog", **kw))


def _independent(path: Path):
    """(service times in ns of start->done pairs, dispatch errors, starts) by a plain loop."""
    pending, times, errors, starts = {}, [], 0, 0
    for line in path.read_text().splitlines():
        m = FTRACE_EVENT.search(line)
        if not m:
            continue
        t = int(m[1]) * 10**9 + int(m[2].ljust(9, "0"))
        key = m.group(4, 5, 6, 7, 8)
        if m[3] == "start":
            starts += 1
            pending[key] = t
        elif m[3] == "done":
            times.append(t - pending.pop(key))
        elif m[3] == "error":
            errors += 1
            pending.pop(key)
    return times, errors, starts


@pytest.mark.skipif(not FTRACE_REAL, reason="../shared/realdata absent")
@pytest.mark.parametrize("path", FTRACE_REAL, ids=lambda p: p.name)
def test_real_ftrace(path):
    a = analyze(path)
    s = summ.summary(a)
    c = s["commands"]
    times, errors, starts = _independent(path)
    assert c["total"] == c["paired"] + c["unpaired"] == starts
    assert c["paired"] == len(times)
    assert sorted(a.ios.filter(pl.col("paired"))["response_ns"].to_list()) == sorted(times)
    assert sum(n for r, n in c["by_reason"].items() if r.startswith("dispatch error")) == errors
    assert s["records"]["read"] == len(path.read_text().splitlines())
    by_op = {r["opcode"]: r for r in s["srt"]}
    assert sum(r["calls"] for r in by_op.values()) == len(times)


@pytest.mark.skipif(not FTRACE_REAL, reason="../shared/realdata absent")
def test_probe_outcomes():
    path = REAL / "ftrace" / "probe.ftrace.txt"
    a = analyze(path)
    s = summ.summary(a)
    assert list(s["commands"]["by_reason"]) == ["dispatch error (rtn=4181 SCSI_MLQUEUE_HOST_BUSY)"]
    absent = sum("scsi_dispatch_cmd_done" in ln and "host=DID_NO_CONNECT" in ln
                 for ln in path.read_text().splitlines())
    assert absent > 0 and a.ios.filter(pl.col("status") == "DID_NO_CONNECT").height == absent
    assert [d["device"] for d in s["devices"]][:3] == ["0:0:0:0", "0:0:1:0", "0:0:2:0"]
    assert all(d["data_bytes"] is None for d in s["devices"])
    names = {r["name"] for r in s["srt"]}
    assert {"Inquiry", "Test Unit Ready", "Read Capacity(16)", "Mode Sense(6)"} <= names


@pytest.mark.skipif(not DMESG_REAL.exists(), reason="../shared/realdata absent")
def test_real_dmesg_has_no_scsi_logging():
    assert parsers.detect(str(DMESG_REAL)) == "scsilog"
    s = summ.summary(analyze(DMESG_REAL))
    assert s["commands"] == {"total": 0, "paired": 0, "unpaired": 0, "by_reason": {}}
    assert s["records"]["read"] == len(DMESG_REAL.read_text().splitlines())


CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
LOGGED = sorted(CAPTURED.glob("*/dmesg-scsi.txt"))


@pytest.mark.parametrize("path", LOGGED, ids=lambda p: p.parent.name)
def test_captured_dmesg_logging_equals_ftrace(path):
    """A real kernel's SCSI logging lines (the rig's scsi_logging cases) give the commands
    ftrace saw in the same run: same devices, tags, CDB fields and outcomes, in order, all
    paired; one command per "Send:" line."""
    assert parsers.detect(str(path)) == "scsilog"
    dmesg, ftrace = analyze(path), analyze(path.parent / "ftrace.txt")
    cols = ["device", "kernel_tag", "opcode", "command", "lba", "blocks", "status", "paired"]
    ours = dmesg.ios.sort("start_ns").select(cols)
    assert ours.equals(ftrace.ios.sort("start_ns").select(cols))
    sends = sum(" Send: " in ln for ln in path.read_text().splitlines())
    assert ours.height == sends > 0 and ours["paired"].all()
    assert (dmesg.ios["response_ns"] > 0).all()


DMESG_LOGGING = """\
[   10.000000] sd 2:0:0:0: [sdb] tag#3 Send: scmd 0x00000000a1b2c3d4
[   10.000000] sd 2:0:0:0: [sdb] tag#3 CDB: Read(10) 28 00 00 00 08 00 00 00 08 00
[   10.000100] usb 3-1: some unrelated line
[   10.000200] sd 2:0:0:0: [sdb] tag#4 Send: scmd 0x00000000a1b2c3e0
[   10.000200] sd 2:0:0:0: [sdb] tag#4 CDB: Write(10) 2a 00 00 00 10 00 00 00 10 00
[   10.002500] sd 2:0:0:0: [sdb] tag#3 Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s
[   10.002500] sd 2:0:0:0: [sdb] tag#3 CDB: Read(10) 28 00 00 00 08 00 00 00 08 00
[   10.004000] sd 2:0:0:0: [sdb] tag#4 FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s
[   10.004000] sd 2:0:0:0: [sdb] tag#4 Sense Key : Medium Error [current]
[   10.004000] sd 2:0:0:0: [sdb] tag#4 CDB: Write(10) 2a 00 00 00 10 00 00 00 10 00
[   10.004001] sd 2:0:0:0: [sdb] tag#4 Done: FAILED Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s
[   10.004001] sd 2:0:0:0: [sdb] tag#4 CDB: Write(10) 2a 00 00 00 10 00 00 00 10 00
[   10.005000] sd 2:0:0:0: [sdb] tag#5 Send: scmd 0x00000000a1b2c3f0
[   10.005000] sd 2:0:0:0: [sdb] tag#5 CDB: Test Unit Ready 00 00 00 00 00 00
"""


def test_dmesg_scsi_logging(tmp_path):
    p = tmp_path / "dmesg.txt"
    p.write_text(DMESG_LOGGING)
    assert parsers.detect(str(p)) == "scsilog"
    a = analyze(p)
    ios = a.ios.sort("io")
    assert ios["command"].to_list() == ["Read(10)", "Write(10)", "Test Unit Ready"]
    assert ios["device"].to_list() == ["2:0:0:0"] * 3
    assert ios["response_ns"].to_list() == [2_500_000, 3_800_000, None]
    assert ios["status"].to_list() == ["GOOD", "FAILED", None]
    assert ios["lba"].to_list()[:2] == [0x800, 0x1000] and ios["blocks"].to_list()[:2] == [8, 16]
    c = summ.summary(a)["commands"]
    assert c == {"total": 3, "paired": 2, "unpaired": 1, "by_reason": {"no done (trace ended)": 1}}


def test_segments_tile(tmp_path):
    a = analyze(REAL / "ftrace" / "probe.ftrace.txt") if FTRACE_REAL else None
    if a is None:
        pytest.skip("../shared/realdata absent")
    for _, g in a.segments.group_by("device"):
        g = g.sort("start_ns")
        assert g["start_ns"][0] == 0 and g["end_ns"][-1] == a.elapsed_ns
        assert (g["start_ns"][1:] == g["end_ns"][:-1]).all()
    assert abs(a.categories["scsilog"]["percent"].sum() - 100) < 1e-9


BAD_EVENT = ("    kworker/0:1H-56      [000] .....    41.686378: scsi_dispatch_cmd_start: host_no=1 "
             "channel=0 id=0 lun=0 data_sgl=8 cmnd=(READ_10 lba=0 txlen=64 protect=0 raw=28 zz 00)")


def test_bad_event_line(tmp_path):
    good = ("    kworker/0:1H-56      [000] .....    41.686378: scsi_dispatch_cmd_start: host_no=1 channel=0 id=0 "
            "lun=0 data_sgl=8 prot_sgl=0 prot_op=SCSI_PROT_NORMAL driver_tag=0 scheduler_tag=0 "
            "cmnd=(READ_10 lba=0 txlen=64 protect=0 raw=28 00 00 00 00 00 00 00 40 00)")
    p = tmp_path / "t.ftrace.txt"
    p.write_text("# tracer: nop\n" + good + "\n" + BAD_EVENT + "\n")
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "scsilog")
    assert exc.value.line == 3
    cap = parsers.parse(str(p), "scsilog", strict=False)
    assert cap.records.skipped == 1 and cap.records.read == 2
    assert main(["analyze", str(p)]) == 2
    c = summ.summary(core.analyze(cap))["commands"]
    assert c == {"total": 1, "paired": 0, "unpaired": 1, "by_reason": {"no done (trace ended)": 1}}


CDB = st.tuples(st.binary(min_size=0, max_size=16),
                st.sampled_from([None, 0x08, 0x0A, 0x28, 0x2A, 0x88, 0x8A, 0xA8, 0x9E, 0x12, 0x00])) \
    .map(lambda t: bytes([t[1]]) + t[0][1:] if t[1] is not None and t[0] else t[0])


@settings(max_examples=30, deadline=None)
@given(st.lists(CDB, min_size=1, max_size=60))
def test_bulk_cdb_decode_matches_decode_cdb(cdbs):
    """The compiled CDB decode (a column, and one CDB by scsi.decode_cdb) against the rules
    restated byte by byte (tests/cdb_reference.py)."""
    rows = pl.DataFrame({"cdb": cdbs}, schema={"cdb": pl.Binary}).select(
        **scsi.cdb_exprs(pl.col("cdb"))).iter_rows(named=True)
    for cdb, row in zip(cdbs, rows):
        want = cdb_reference.decode_cdb(cdb)
        if want["lba"] is not None and want["lba"] >= 1 << 63:
            want["lba"] = None   # the bulk decoder's Int64 column holds no LBA >= 2^63
        assert scsi.decode_cdb(cdb) == want, cdb.hex()
        assert (row["opcode"], row["command"], row["lba"], row["blocks"], row["cdb_lun"]) == \
            (want["opcode"], want["name"], want["lba"], want["blocks"], want["lun"]), cdb.hex()


def test_trace_cmd_report_lines(tmp_path):
    """`trace-cmd report` pads the event name and omits the flags column."""
    raw = "raw=28 00 00 00 00 00 00 00 40 00)"
    common = ("host_no=1 channel=0 id=0 lun=0 data_sgl=8 prot_sgl=0 prot_op=SCSI_PROT_NORMAL driver_tag=0 "
              f"scheduler_tag=0 cmnd=(READ_10 lba=0 txlen=64 protect=0 {raw}")
    p = tmp_path / "report.txt"
    p.write_text("cpus=2\n"
                 f"  kworker/0:1H-56    [000]    41.686378: scsi_dispatch_cmd_start:   {common}\n"
                 f"  usb-storage-127    [000]    41.701408: scsi_dispatch_cmd_done:    {common} "
                 "result=(driver=DRIVER_OK host=DID_OK message=COMMAND_COMPLETE status=SAM_STAT_GOOD)\n")
    assert parsers.detect(str(p)) == "scsilog"
    ios = analyze(p).ios
    assert ios["response_ns"].to_list() == [41_701_408_000 - 41_686_378_000]
    assert ios["status"].to_list() == ["GOOD"] and ios["command"].to_list() == ["Read(10)"]
