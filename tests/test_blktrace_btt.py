"""Stage statistics and event counts against Debian's btt and blkparse.

The references are btt's and blkparse's own printed outputs: stored next to the real traces
in ../shared/realdata (skipped when absent), and produced live by the installed tools on
generated traces with merges, remaps, requeues and splits (skipped when not installed).
Numbers are compared at btt's printed precision (9 decimals of seconds, N exact; averages
formatted the way btt computes them: total seconds / N).
"""
from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402

from scsitrace.reports import summary as summ
from scsitrace import core  # noqa: E402
from scsitrace.parsers import blktrace  # noqa: E402

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
DUMPS = sorted((REAL / "blktrace").glob("*.bin")) if (REAL / "blktrace").is_dir() else []
CASES = sorted(p.name[:-len(".ref.btt.txt")] for p in (REAL / "captured" / "blktrace").glob("*.ref.btt.txt")) \
    if (REAL / "captured" / "blktrace").is_dir() else []
OWN = Path(__file__).resolve().parents[1] / "fixtures" / "captured"    # the project's own rig captures
OWN_CASES = sorted(p.name for p in OWN.iterdir() if (p / "ref.btt.txt").exists()) if OWN.is_dir() else []
HAVE_TOOLS = bool(shutil.which("btt") and shutil.which("blkparse"))
needs_tools = pytest.mark.skipif(not HAVE_TOOLS, reason="blkparse/btt not installed (bash run.sh test installs them)")
STAGE_LINE = re.compile(r"^(\S+(?: \S+)?|\(\s*\d+,\s*\d+\))\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def btt_section(text: str, title: str) -> dict:
    """{name: (min, avg, max, N)} of one "=== title ===" section of btt's output."""
    body = text.split(f"==================== {title} ====================")[1].split("\n==========")[0]
    rows = {}
    for line in body.splitlines():
        m = STAGE_LINE.match(line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4), int(m.group(5)))
    return rows


def btt_section_stages(text: str, title: str, row: re.Pattern, key) -> dict:
    """A btt -A section ("Per Device", "Per Process"): {(key(row match), stage): (min, avg, max, N)}."""
    body = text.split(f"==================== {title} ====================")[1].split("\n==========")[0]
    out, stage = {}, None
    for line in body.splitlines():
        head = re.match(r"^\s+(\S+)\s+MIN\s+AVG\s+MAX\s+N\s*$", line)
        if head:
            stage = head.group(1)
            continue
        m = row.match(line)
        if m and stage:
            out[(key(m), stage)] = tuple(m.groups()[-4:-1]) + (int(m.groups()[-1]),)
    return out


DEVICE_LINE = re.compile(r"^\(\s*(\d+),\s*(\d+)\)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$")


def btt_per_device(text: str) -> dict:
    return btt_section_stages(text, "Per Device", DEVICE_LINE, lambda m: f"{m.group(1)},{m.group(2)}")


def btt_overhead(text: str) -> dict:
    body = text.split("==================== Device Overhead ====================")[1].split("\n==========")[0]
    out = {}
    for line in body.splitlines():
        m = re.match(r"^\s*(\(\s*\d+,\s*\d+\)|Overall)\s+\|\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%\s+([\d.]+)%",
                     line)
        if m:
            dev = "Overall" if m.group(1) == "Overall" else ",".join(re.findall(r"\d+", m.group(1)))
            out[dev] = tuple(m.group(k) for k in range(2, 7))
    return out


def ours(path: str, btt_compat: bool = False) -> tuple[pl.DataFrame, dict]:
    analysis = core.analyze(blktrace.parse(path), core.Options(btt_compat=btt_compat))
    return analysis.table("stages").filter(pl.col("n") > 0), summ.summary(analysis)


def printed(stats: pl.DataFrame, device: str) -> dict:
    """Our stats at btt's printed precision."""
    return {r["name"]: (f"{r['min_ns'] / 1e9:.9f}", f"{(r['total_ns'] / 1e9) / r['n']:.9f}",
                         f"{r['max_ns'] / 1e9:.9f}", r["n"])
            for r in stats.filter(pl.col("device") == device).iter_rows(named=True)
            if r["name"] != "S2G" or r["n"]}


def blkparse_counts(text: str) -> tuple[collections.Counter, int | None]:
    """Event lines per action letter in blkparse's text, and its "Events (...): N entries" total."""
    counts = collections.Counter()
    for line in text.splitlines():
        m = re.match(r"^\s*\d+,\d+\s+\d+\s+\d+\s+\d+\.\d+\s+\d+\s+(\S+)\s", line)
        if m:
            counts["T" if m.group(1) == "UT" else m.group(1)] += 1
    total = re.search(r"^Events \(.*\): (\d+) entries", text, re.M)
    return counts, int(total.group(1)) if total else None


# ---------------------------------------------------------------- real traces, stored references

@pytest.mark.skipif(not DUMPS, reason="../shared/realdata/blktrace absent")
@pytest.mark.parametrize("dump", DUMPS, ids=lambda p: p.name)
def test_real_dumps_match_stored_btt_and_blkparse(dump):
    stats, js = ours(str(dump))
    ref = Path(str(dump) + ".ref.btt.txt").read_text()
    assert printed(stats, "all") == btt_section(ref, "All Devices")
    counts, total = blkparse_counts(Path(str(dump) + ".ref.blkparse.txt").read_text())
    assert js["events"] == dict(counts)
    assert sum(js["events"].values()) == total


@pytest.mark.skipif(not CASES, reason="../shared/realdata/captured/blktrace absent")
@pytest.mark.parametrize("case", CASES)
def test_real_per_cpu_captures_match_stored_btt_and_blkparse(case):
    base = REAL / "captured" / "blktrace" / case
    stats, js = ours(str(base))                   # the base name: every per-CPU file
    ref = Path(f"{base}.ref.btt.txt").read_text()
    assert printed(stats, "all") == btt_section(ref, "All Devices")
    ours_od = {r["device"]: tuple(f"{r[k]:.4f}" for k in ("Q2G", "G2I", "Q2M", "I2D", "D2C"))
               for r in js["overhead"]}
    assert ours_od == btt_overhead(ref)
    counts, total = blkparse_counts(Path(f"{base}.ref.blkparse.txt").read_text())
    assert js["events"] == dict(counts)
    assert sum(js["events"].values()) == total


def btt_live_percent(text: str) -> dict:
    """btt's "I/O Active Period Information": {device: "% Live"}."""
    body = text.split("==================== I/O Active Period Information ====================")[1]
    return {",".join(re.findall(r"\d+", m.group(1))): m.group(2)
            for m in re.finditer(r"^\s*(\(\s*\d+,\s*\d+\))\s+\|.*\s([\d.]+)\s*$", body.split("Total Sys")[0], re.M)}


@pytest.mark.skipif(not (DUMPS or CASES), reason="../shared/realdata absent")
@pytest.mark.parametrize("trace", [str(p) for p in DUMPS] + [str(REAL / "captured" / "blktrace" / c) for c in CASES],
                         ids=os.path.basename)
def test_real_busy_percent_and_depth_match_btt_live_and_blkparse_depth(trace):
    """Device busy % (a request between D and C) is btt's "% Live" on these traces (their I/Os do
    not overlap); the most requests in flight is blkparse's "Read depth" (they only read)."""
    _, js = ours(trace)
    live = btt_live_percent(Path(trace + ".ref.btt.txt").read_text())
    assert {d["device"]: f"{d['busy_percent']:.2f}" for d in js["devices"]} == live
    text = Path(trace + ".ref.blkparse.txt").read_text()
    depths = {int(m) for m in re.findall(r"Read depth:\s+(\d+)", text)}
    assert [d["max_depth"] for d in js["devices"]] == [max(depths)]


@pytest.mark.skipif(not OWN_CASES, reason="fixtures/captured absent")
@pytest.mark.parametrize("case", OWN_CASES)
def test_own_captures_match_their_btt_and_blkparse(case):
    """The rig's captures (fixtures/captured), with btt's and blkparse's outputs stored next to
    them; usb_bufread32k has split requests (X): usb-storage caps requests at 240 sectors."""
    stats, js = ours(str(OWN / case / case))
    ref = (OWN / case / "ref.btt.txt").read_text()
    assert printed(stats, "all") == btt_section(ref, "All Devices")
    ours_od = {r["device"]: tuple(f"{r[k]:.4f}" for k in ("Q2G", "G2I", "Q2M", "I2D", "D2C"))
               for r in js["overhead"]}
    assert ours_od == btt_overhead(ref)
    counts, total = blkparse_counts((OWN / case / "ref.blkparse.txt").read_text())
    assert js["events"] == dict(counts) and sum(js["events"].values()) == total


# ---------------------------------------------------------------- generated traces, live tools

@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Per-CPU capture with merges, requeues, splits and dm remaps, its blkparse -d dump, and the
    live tools' outputs."""
    d = tmp_path_factory.mktemp("blk")
    base = str(d / "gen")
    gen.write(gen.workload(2500, seed=11, merges=0.15, requeues=0.05, splits=0.05, remaps=0.1), base)
    if not HAVE_TOOLS:
        return base, None, None, None
    text = subprocess.run(["blkparse", "-i", base, "-d", base + ".dump"], capture_output=True, text=True,
                          check=True, cwd=d).stdout
    btt = subprocess.run(["btt", "-A", "-i", base + ".dump"], capture_output=True, text=True, check=True,
                         cwd=d).stdout
    return base, base + ".dump", text, btt


@needs_tools
def test_generated_all_devices_equal_live_btt(generated):
    base, dump, _, btt = generated
    for path in (base, dump):                     # per-CPU files and the dump read the same
        stats, _ = ours(path)
        mine = printed(stats, "all")
        assert mine == btt_section(btt, "All Devices")
        assert {"Q2Cdm", "Q2Adm", "Q2M", "M2D", "I2D", "D2C"} <= set(mine)


@needs_tools
def test_generated_per_device_equal_live_btt(generated):
    base, _, _, btt = generated
    stats, js = ours(base)
    ref = btt_per_device(btt)
    mine = {(dev, stage): v for dev in ("8,0", "253,0") for stage, v in printed(stats, dev).items()}
    assert {stage for _, stage in set(mine) - set(ref)} == {"M2D"}    # btt -A has no per-device M2D
    assert {k: mine[k] for k in ref} == ref
    ours_od = {r["device"]: tuple(f"{r[k]:.4f}" for k in ("Q2G", "G2I", "Q2M", "I2D", "D2C"))
               for r in js["overhead"]}
    assert ours_od == btt_overhead(btt)


def btt_per_process(text: str) -> dict:
    return btt_section_stages(text, "Per Process", STAGE_LINE, lambda m: m.group(1))


@needs_tools
def test_generated_per_process_equal_live_btt(generated):
    base, _, _, btt = generated
    _, js = ours(base)
    mine = {(r["process"], r["name"]): (f"{r['min_ns'] / 1e9:.9f}", f"{(r['total_ns'] / 1e9) / r['n']:.9f}",
                                       f"{r['max_ns'] / 1e9:.9f}", r["n"]) for r in js["process_stages"]}
    ref = btt_per_process(btt)
    assert {stage for _, stage in set(mine) - set(ref)} <= {"M2D"}       # btt -A lists no M2D
    assert {k: mine[k] for k in ref} == ref


@needs_tools
def test_generated_event_counts_equal_live_blkparse(generated):
    base, _, text, _ = generated
    _, js = ours(base)
    counts, total = blkparse_counts(text)
    assert js["events"] == dict(counts)
    assert sum(js["events"].values()) == total
    assert {"M", "F", "R", "X", "A", "P", "U"} <= set(counts)


@needs_tools
@pytest.mark.parametrize("name", ["backmerge", "frontmerge", "requeue", "replaced", "contained"])
def test_small_btt_rules(tmp_path, name):
    """One rule each, checked against btt itself: contained Qs complete with the request; a
    requeued request's second I and D count again; a Q at the same start sector replaces the
    older one; a G/I inside a queued bio's range (not at its start) finds that bio. Without
    --btt-compat the same, except the replaced Q: two requests in flight on one sector, both
    completed (the D and C paired oldest first)."""
    Q, G, I, M, F, D, C, R = (gen.ACT[x] for x in "QGIMFDCR")
    script = {
        "backmerge": [(1000, Q, 100, 8), (1100, G, 100, 8), (1200, I, 100, 8), (2000, Q, 108, 8),
                      (2100, M, 108, 8), (3000, D, 100, 16), (9000, C, 100, 16)],
        "frontmerge": [(1000, Q, 108, 8), (1100, G, 108, 8), (1200, I, 108, 8), (2000, Q, 100, 8),
                       (2100, F, 100, 8), (3000, D, 100, 16), (9000, C, 100, 16)],
        "requeue": [(1000, Q, 100, 8), (1100, G, 100, 8), (1200, I, 100, 8), (3000, D, 100, 8),
                    (3500, R, 100, 8), (4000, I, 100, 8), (5000, D, 100, 8), (9000, C, 100, 8)],
        "replaced": [(1000, Q, 100, 8), (1100, G, 100, 8), (1200, I, 100, 8), (1500, Q, 100, 8),
                     (1600, G, 100, 8), (1700, I, 100, 8), (3000, D, 100, 8), (8000, C, 100, 8),
                     (8500, D, 100, 8), (8900, C, 100, 8)],
        "contained": [(1000, Q, 100, 8), (1100, G, 104, 8), (1200, I, 104, 8), (3000, D, 100, 8),
                      (9000, C, 100, 8)],
    }[name]
    data = b"".join(gen.record(t, s, n * 512, code | (gen.READ << 16), 100, gen.DISK, seq=k + 1)
                    for k, (t, code, s, n) in enumerate(script))
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    ref = subprocess.run(["btt", "-i", str(path)], capture_output=True, text=True, cwd=tmp_path).stdout
    stats, _ = ours(str(path), btt_compat=True)
    assert printed(stats, "all") == btt_section(ref, "All Devices")
    default = printed(ours(str(path))[0], "all")
    if name != "replaced":
        assert default == btt_section(ref, "All Devices")
    else:       # Q1 G I, Q2 G I at 1500, D 3000, C 8000, D 8500, C 8900: Q1 takes the first D and C
        assert default["Q2C"] == ("0.000007000", "0.000007200", "0.000007400", 2)
        assert default["D2C"] == ("0.000000400", "0.000002700", "0.000005000", 2)
        assert default["I2D"] == ("0.000001800", "0.000004300", "0.000006800", 2)
