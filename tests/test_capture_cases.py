"""The committed QEMU captures (fixtures/captured/<case>/): every case parses at every layer,
our block tables equal btt's (btt run here when installed, else its committed output), our
per-command counts equal the ftrace event counts, and the cross-layer view matches every
I/O across blktrace, ftrace, usbmon and the emulated bus.

The oracles are independent of our parsers: btt itself, and regex counts over the raw
ftrace lines (one `scsi_dispatch_cmd_start`/`scsi_dispatch_cmd_done`/`block_rq_issue` line
per command).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest

from scsitrace.reports import summary as summ
from scsitrace import core, parsers, scsi
from scsitrace.cli import main as cli_main
from scsitrace.commands import crosslayer as cmd
from scsitrace.reports import crosslayer

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"
CASES = sorted(p.name for p in CAPTURED.iterdir() if (p / "workload.json").exists())
# usb-storage limits requests to 240 sectors, so the buffered read's 256-sector readahead
# requests are split (blkparse shows X events). The block layer follows btt there (btt itself
# times only 2 of the 36 issued requests Q..C), so a count of completed block I/Os cannot equal
# the dispatches. strict: these start failing if the block layer ever times the split parts.
SPLIT_CASES = {"usb_bufread32k"}
BLOCK_CASES = CASES
COUNT_CASES = [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason="split requests: btt times 2 of 36"))
               if c in SPLIT_CASES else c for c in CASES]
HOST_OF_DISK = {"lsi": "sym53c8xx", "usb": "usb-storage", "uas": "uas"}
BTT_ROW = re.compile(r"^(Q2Q|Q2G|G2I|Q2M|I2D|M2D|D2C|Q2C)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")
OVERHEAD_ROW = re.compile(r"^\s*Overall \|\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%")
DISPATCH = re.compile(r"scsi_dispatch_cmd_(start|done): host_no=(\d+) .*?raw=([0-9a-f ]+)\)")
RQ_ISSUE = re.compile(r"block_rq_issue: (\d+),(\d+) ")


def workload(case: str) -> dict:
    return json.loads((CAPTURED / case / "workload.json").read_text())


def blktrace_file(case: str) -> Path:
    return next(p for p in sorted((CAPTURED / case).glob(f"{case}.blktrace.*")) if p.stat().st_size)


@lru_cache(maxsize=None)
def block_analysis(case: str):
    return core.analyze(parsers.parse(str(blktrace_file(case))))


@lru_cache(maxsize=None)
def btt_text(case: str) -> str:
    """btt's output on the case: run here when blkparse and btt exist, else the committed one."""
    d = CAPTURED / case
    if not (shutil.which("blkparse") and shutil.which("btt")):
        return (d / "ref.btt.txt").read_text()
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump.bin"
        subprocess.run(["blkparse", "-i", case, "-D", str(d), "-d", str(dump), "-O"],
                       check=True, capture_output=True)
        return subprocess.run(["btt", "-i", str(dump)], check=True, capture_output=True, text=True,
                              cwd=tmp).stdout           # btt writes its *_fp.dat files in the cwd


def btt_all_devices(text: str) -> dict[str, tuple]:
    section = text.split("==================== All Devices ====================")[1].split("=====")[0]
    rows = {}
    for line in section.splitlines():
        m = BTT_ROW.match(line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)), float(m.group(4)), int(m.group(5)))
    return rows


def ftrace_dispatches(case: str) -> list[tuple[str, bytes]]:
    out = []
    for line in (CAPTURED / case / "ftrace.txt").read_text().splitlines():
        m = DISPATCH.search(line)
        if m:
            out.append((m.group(1), bytes.fromhex(m.group(3))))
    return out


# ---------------------------------------------------------------- the cases themselves

def test_declared_cases_were_captured():
    import tomllib
    declared = tomllib.loads((REPO / "fixtures" / "capture" / "workloads.toml").read_text())["case"]
    assert sorted(c["name"] for c in declared) == CASES


@pytest.mark.parametrize("case", CASES)
def test_case_is_small_and_complete(case):
    d = CAPTURED / case
    size = sum(f.stat().st_size for f in d.iterdir())
    assert size < 512 * 1024, f"{case} is {size} bytes"
    for name in ("ftrace.txt", "dmesg.txt", "qemu-trace.txt", "ref.blkparse.txt", "ref.btt.txt",
                 "provenance.json", "workload.json"):
        assert (d / name).stat().st_size > 0, name
    if workload(case)["disk"] != "lsi":
        assert (d / "usbmon.txt").stat().st_size > 0
    assert "dropped 0" in (d / "blktrace-stdout.txt").read_text()


# ---------------------------------------------------------------- block layer vs btt

@pytest.mark.parametrize("case", BLOCK_CASES)
def test_block_stage_table_equals_btt(case):
    ours = {r["name"]: r for r in summ.summary(block_analysis(case))["stages"] if r["device"] == "all"}
    theirs = btt_all_devices(btt_text(case))
    assert theirs, "btt printed no All Devices table"
    for name, (mn, avg, mx, n) in theirs.items():
        r = ours[name]
        assert r["n"] == n, name
        assert round(r["min_ns"] / 1e9, 9) == mn and round(r["max_ns"] / 1e9, 9) == mx, name
        assert abs(r["total_ns"] / r["n"] / 1e9 - avg) <= 1e-9, name
    assert {k for k, r in ours.items() if r["n"]} == set(theirs)


@pytest.mark.parametrize("case", BLOCK_CASES)
def test_block_overhead_equals_btt(case):
    m = next(OVERHEAD_ROW.match(line) for line in btt_text(case).splitlines() if OVERHEAD_ROW.match(line))
    overall = next(r for r in summ.summary(block_analysis(case))["overhead"] if r["device"] == "Overall")
    for name, theirs in zip(("Q2G", "G2I", "Q2M", "I2D", "D2C"), m.groups()):
        assert abs(overall[name] - float(theirs)) <= 0.00005 + 1e-9, name


# ---------------------------------------------------------------- counts vs ftrace events

@pytest.mark.parametrize("case", COUNT_CASES)
def test_io_counts_equal_ftrace_event_counts(case):
    """One block I/O per block_rq_issue, one SCSI command per dispatch start and per done,
    and the workload's count of read/write commands (direct I/O: one per dd block)."""
    text = (CAPTURED / case / "ftrace.txt").read_text()
    issues = len(RQ_ISSUE.findall(text))
    events = ftrace_dispatches(case)
    starts = [cdb for kind, cdb in events if kind == "start"]
    dones = [cdb for kind, cdb in events if kind == "done"]
    assert block_analysis(case).ios.filter(pl.col("end_ns").is_not_null()).height == issues
    assert len(starts) == len(dones) == issues
    w = workload(case)
    rw = [c for c in starts if c[0] in scsi.READ_OPS | scsi.WRITE_OPS]
    if w.get("direct", True):
        assert len(rw) == w["count"]
        assert sum(scsi.decode_cdb(c)["blocks"] for c in rw) * 512 == w["count"] * w["bs"]


@pytest.mark.parametrize("case", CASES)
def test_scsilog_counts_equal_ftrace(case):
    a = core.analyze(parsers.parse(str(CAPTURED / case / "ftrace.txt"), "scsilog"))
    events = ftrace_dispatches(case)
    assert a.ios.height == sum(1 for kind, _ in events if kind == "start")
    assert a.ios["opcode"].to_list() == [c[0] for kind, c in events if kind == "start"]


# ---------------------------------------------------------------- cross-layer view

@pytest.mark.parametrize("case", COUNT_CASES)
def test_crosslayer_matches_every_io(case):
    analyses, notes = cmd.load_case(CAPTURED / case)
    kind = workload(case)["disk"]
    expected = {"block", "scsilog"} | ({"bus"} if kind == "lsi" else {"usb", "device"})
    assert set(analyses) == expected
    table, counts = crosslayer.match(analyses)
    n_rw = sum(1 for k, c in ftrace_dispatches(case) if k == "start" and c[0] in scsi.READ_OPS | scsi.WRITE_OPS)
    assert table.height == n_rw
    assert all(c["unmatched"] == 0 for c in counts.values()), counts
    # blktrace and ftrace share the guest's monotonic clock: D comes before dispatch and
    # done before C (ftrace stamps have microsecond resolution)
    assert (table["d_to_dispatch_us"] >= -1).all()
    assert (table["block_dur_us"] >= table["scsilog_dur_us"] - 1).all()
    # each layer's span lies inside the one above it (durations on different clocks, all
    # running at real-time rate; 1 us for the microsecond stamps): dispatch..done holds
    # CBW..CSW, which holds the device model's command..status; dispatch..done holds the
    # emulated bus's selection..bus free
    inner = {"lsi": ["bus"], "usb": ["usb", "device"], "uas": ["usb", "device"]}[kind]
    outer = "scsilog"
    for layer in inner:
        assert (table[f"{layer}_dur_us"] <= table[f"{outer}_dur_us"] + 1).all(), (layer, outer)
        outer = layer
    if kind == "lsi":
        assert any("not a real SCSI bus" in n for n in notes)


def test_crosslayer_cli_json(tmp_path, capsys):
    out = tmp_path / "x.json"
    assert cli_main(["crosslayer", str(CAPTURED / "lsi_seqread32k"), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["block_size"] == 512 and len(doc["ios"]) == 64
    assert set(doc["layers"]) == {"block", "scsilog", "bus"}
    assert "QEMU bus" in capsys.readouterr().out


def test_crosslayer_cli_bad_folder_exits_2(tmp_path, capsys):
    assert cli_main(["crosslayer", str(tmp_path / "nope")]) == 2
    (tmp_path / "empty").mkdir()
    assert cli_main(["crosslayer", str(tmp_path / "empty")]) == 2
    assert "no trace files" in capsys.readouterr().err


# ---------------------------------------------------------------- regression gate

BASELINES = sorted(str(p.relative_to(CAPTURED)) for p in CAPTURED.glob("*/baseline*.json"))


def test_every_case_has_its_baselines():
    for case in CASES:
        for name in ("baseline.json", "baseline.block.json", "baseline.scsilog.json"):
            assert f"{case}/{name}" in BASELINES


@pytest.mark.parametrize("baseline", BASELINES)
def test_regress_passes_on_its_own_capture(baseline, capsys):
    assert cli_main(["regress", str(CAPTURED / baseline), "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows and all(r["verdict"] in ("ok",) for r in rows)


def test_regress_flags_another_workload():
    """The random-read baseline does not accept the sequential-read capture of the same disk."""
    other = blktrace_file("lsi_seqread32k")
    assert cli_main(["regress", str(CAPTURED / "lsi_randread4k" / "baseline.block.json"), str(other)]) == 1
