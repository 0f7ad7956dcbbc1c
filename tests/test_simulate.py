"""The simulator against the analyzer (HACKING.md "Bus layer rules") and against the report.

The property test plays generated workloads into traces and checks that
`core.analyze(parsers.parse(trace))` finds exactly the simulator's ground-truth segments,
I/O count and bytes. The mechanism tests check behaviour the RAID-I report states in words
(Table 1, Sec 2.1.3, 4.2, 4.6), not numbers copied from our own output.
"""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scsitrace import core, parsers
from scsitrace.sim import Params, Workload, simulate
from scsitrace.sim import encode

KIB = 1024


def analyse(path):
    return core.analyze(parsers.parse(str(path)))


def assert_matches_truth(res, analysis):
    got, want = analysis.segments, res.segments
    if not got.equals(want):
        diff = (got.with_row_index().join(want.with_row_index(), on="index", how="full", suffix="_truth"))
        bad = pl.lit(False)
        for c in want.columns:
            bad = bad | pl.col(c).ne_missing(pl.col(f"{c}_truth"))
        raise AssertionError(f"segments differ ({got.height} found, {want.height} in truth); first rows:\n"
                             f"{diff.filter(bad).head(4)}")
    assert analysis.ios_completed == res.ios_completed
    if res.level >= 2:
        assert analysis.data_bytes == res.data_bytes
    if res.level >= 3:
        ios = analysis.ios.sort("io")
        assert ios["io"].to_list() == res.ios["io"].to_list()
        assert ios["data_bytes"].to_list() == res.ios["data_bytes"].to_list()
        assert ios["complete"].to_list() == res.ios["complete"].to_list()


workloads = st.fixed_dictionaries({
    "disks": st.integers(1, 7),
    "op": st.sampled_from(["read", "write"]),
    "pattern": st.sampled_from(["seq", "random"]),
    "sectors": st.sampled_from([1, 2, 8, 17, 64, 128, 256]),
    "inflight": st.integers(1, 4),
    "processes": st.integers(1, 4),                     # extra ones wait in the Jaguar's work queue
    "level": st.integers(1, 3),
    "fmt": st.sampled_from(["ancot", "ancot", "vcd"]),
    "seed": st.integers(0, 2**16),
    "cut": st.booleans(),
    "bfr": st.sampled_from([512 / 32768, 0.5, 1.0]),
    "readahead": st.booleans(),
    "host": st.sampled_from(["no-copy", "user-level"]),
    "reset": st.sampled_from([False, False, True]),
    "byte_ns": st.sampled_from([250, 250, 100]),       # 4 MB/s (Sec 4.1.1) or the 10 MB/s what-if
})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w=workloads)
def test_analyzer_finds_the_ground_truth(w, tmp_path):
    size = w["sectors"] * 512
    # keep the handshake count small at levels 2-3 (four records per byte)
    budget = 6 * 128 * KIB if w["level"] == 1 else 16 * KIB
    count = max(1, min(3 * w["disks"], budget // size))
    wl = Workload(disks=w["disks"], op=w["op"], pattern=w["pattern"], size=size, inflight=w["inflight"],
                  processes=w["processes"], count=count, seed=w["seed"])
    p = Params()
    p.disk.bfr = p.disk.ber = w["bfr"]
    p.disk.readahead = w["readahead"]
    p.host.mode = w["host"]
    p.bus.byte_ns = w["byte_ns"]
    if w["cut"] or w["reset"]:
        probe = simulate(wl, tmp_path / "probe.ancot", level=1, params=p)
        if w["reset"]:   # RST in the first data transfer after a third of the run
            wl.reset_at_ns = int(probe.end_ns * 0.33) // 50 * 50
        if w["cut"]:     # end the trace at an arbitrary time, mostly inside a connection
            wl.count = None
            wl.duration_ns = max(50, int(probe.end_ns * 0.37) // 50 * 50)
    path = tmp_path / f"t.{w['fmt']}"
    res = simulate(wl, path, level=w["level"], fmt=w["fmt"], params=p)
    assert_matches_truth(res, analyse(path))


def test_table3_acceptance_bands(tmp_path):
    """Table 3: 4 disks, 32 KB sequential reads, 6.64 s, analysed with the raid1990 profile."""
    from scsitrace.reports.summary import summary
    res = simulate(Workload(duration_ns=6_640_000_000), tmp_path / "t3.ancot", level=1)
    s = summary(analyse(tmp_path / "t3.ancot"), "raid1990", None, 32 * KIB)
    cat = {c["name"]: c for c in s["categories"]}
    assert abs(cat["Data Transfer"]["percent"] - 93.15) <= 3
    assert cat["Bus Free"]["percent"] <= 3
    assert abs(cat["Command"]["percent"] - 4.02) <= 2
    assert abs(cat["Data Transfer"]["normalized_ns"] / 10_000_000 - 1) <= 0.15
    assert abs(s["ios_completed"] / 620 - 1) <= 0.10
    assert abs(s["bandwidth_mib_s"] / 2.92 - 1) <= 0.10
    assert res.ios_completed == s["ios_completed"]


def _ios_rate(tmp_path, **kw):
    res = simulate(Workload(**kw), tmp_path / "r.ancot", level=1)
    return res.ios_completed / (res.end_ns / 1e9), res


def test_single_disk_random_4k_reads_match_table1_io_rate(tmp_path):
    """Table 1: 33 I/Os/sec for 4 KByte random reads (Sec 5: 'about 30 per disk')."""
    rate, _ = _ios_rate(tmp_path, disks=1, pattern="random", size=4 * KIB, count=120, seed=3)
    assert 25 <= rate <= 40


def test_single_disk_sequential_reads_reach_the_media_rate(tmp_path):
    """Sec 4.1.1: one disk on the string achieves its 1.3 MBytes/sec."""
    rate, _ = _ios_rate(tmp_path, disks=1, count=120)
    assert abs(rate * 32 * KIB / (1 << 20) / 1.3 - 1) <= 0.1


def test_table11_sequence_one_disk_bfr_half(tmp_path):
    """Sec 4.6: with one disk, a 32 KB read disconnects after the command, transfers until the
    buffer empties, disconnects again and finishes: three connections per I/O."""
    res = simulate(Workload(disks=1, count=30), tmp_path / "t11.ancot", level=1)
    steady = res.ios.filter(pl.col("io") >= 5)
    assert steady["connections"].to_list() == [3] * steady.height
    assert steady["disconnects"].to_list() == [2] * steady.height


def test_readahead_off_costs_a_rotation_on_sequential_reads(tmp_path):
    on, _ = _ios_rate(tmp_path, disks=1, count=60)
    p = Params()
    p.disk.readahead = False
    res = simulate(Workload(disks=1, count=60), tmp_path / "off.ancot", level=1, params=p)
    off = res.ios_completed / (res.end_ns / 1e9)
    assert off < 0.8 * on          # Sec 4.2.1: "consistently large" gap for sequential reads


def test_small_bfr_means_more_reconnections(tmp_path):
    """Sec 4.2.2: a 512-byte BFR gives many more disconnects than 16 KB."""
    def reconnects(bfr):
        p = Params()
        p.disk.bfr = bfr
        res = simulate(Workload(disks=1, count=20), tmp_path / "b.ancot", level=1, params=p)
        return int(res.ios["connections"].sum())
    assert reconnects(512 / 32768) > 3 * reconnects(0.5)


def _initiator_pauses(path) -> np.ndarray:
    """REQ-to-ACK delays of every handshake in a level-2 trace (the initiator's share)."""
    tr = parsers.parse(str(path)).transitions()
    lines = tr["lines"].to_numpy().astype(np.int64)
    t = tr["t_ns"].to_numpy()
    prev = np.concatenate(([0], lines[:-1]))
    req_up = t[((lines & encode.REQ) != 0) & ((prev & encode.REQ) == 0)]
    ack_up = t[((lines & encode.ACK) != 0) & ((prev & encode.ACK) == 0)]
    return ack_up - req_up


def test_allocation_pauses_are_initiator_pauses_at_8k_boundaries(tmp_path):
    """Sec 4.6 / Table 11: the Jaguar pauses 300-1700 us when a transfer crosses an 8 KB
    boundary; --no-alloc-pauses removes exactly those (the 82 us FIFO pause stays)."""
    p = Params()
    simulate(Workload(disks=1, count=3), tmp_path / "on.ancot", level=2, params=p)
    p.hba.alloc_pauses = False
    simulate(Workload(disks=1, count=3), tmp_path / "off.ancot", level=2, params=p)
    lo, hi = Params().hba.alloc_range(32 * KIB)
    on = _initiator_pauses(tmp_path / "on.ancot")
    off = _initiator_pauses(tmp_path / "off.ancot")
    big_on = on[on >= 200_000]
    assert len(big_on) >= 3 and ((big_on >= lo) & (big_on <= hi)).all()   # >= one per I/O
    assert len(big_on) <= 3 * 3                                          # 8K, 16K, 24K at most
    fifo = 82_000 + Params().bus.handshake_offsets()[0]       # the pause plus the usual REQ-to-ACK
    assert off.max() < 200_000 and (off == fifo).sum() == (on == fifo).sum() > 0


def test_sequential_writes_miss_most_of_a_rotation(tmp_path):
    """DESIGN / Sec 4.7: a sequential write misses about 3/4 of a rotation between commands."""
    res = simulate(Workload(disks=1, op="write", count=30), tmp_path / "w.ancot", level=1)
    ios = res.ios.sort("io")
    gaps = (ios["start_ns"][1:].to_numpy() - ios["end_ns"][:-1].to_numpy())
    per_io = np.diff(ios["end_ns"].to_numpy())[5:]
    media = 32 * KIB / Params().disk.media_rate * 1e9
    rot = Params().disk.rotation_ns
    missed = per_io - media - gaps[5:].mean()
    assert 0.5 * rot < np.median(missed) < 1.2 * rot


def test_trace_invariants(tmp_path):
    """Times on the tick grid; no phase-line state shorter than the 400 ns settle delay."""
    res = simulate(Workload(disks=3, count=9, size=2048, op="write", pattern="random"),
                   tmp_path / "i.ancot", level=3)
    tr = parsers.parse(str(tmp_path / "i.ancot")).transitions()
    t = tr["t_ns"].to_numpy()
    assert (t % 50 == 0).all() and (np.diff(t) >= 0).all()
    lines = tr["lines"].to_numpy().astype(np.int64)
    phase_lines = sum(encode.BIT[n] for n in ("BSY", "SEL", "RST", "MSG", "C/D", "I/O"))
    key = lines & phase_lines
    change = np.flatnonzero(np.diff(key)) + 1
    starts = np.concatenate(([0], change))
    durations = np.diff(np.append(t[starts], t[-1]))[:-1]
    # BSY toggles inside a (re)selection (the phase key ignores it there): every other state
    sel = (key[starts[:-1]] & encode.BIT["SEL"]) != 0
    assert durations[~sel].min() >= 400
    assert res.segments["end_ns"][-1] == t[-1]


@pytest.mark.parametrize("fmt", ["ancot", "vcd"])
def test_blocks_stream_identically(tmp_path, monkeypatch, fmt):
    wl = Workload(disks=2, count=4, size=4 * KIB)
    simulate(wl, tmp_path / "one", level=3, fmt=fmt)
    monkeypatch.setattr(encode, "FLUSH_ROWS", 1000)
    simulate(wl, tmp_path / "many", level=3, fmt=fmt)
    assert (tmp_path / "one").read_bytes() == (tmp_path / "many").read_bytes()


def test_same_seed_same_trace(tmp_path):
    wl = dict(disks=3, count=6, pattern="random", size=4 * KIB)
    simulate(Workload(**wl, seed=5), tmp_path / "a.ancot", level=2)
    simulate(Workload(**wl, seed=5), tmp_path / "b.ancot", level=2)
    simulate(Workload(**wl, seed=6), tmp_path / "c.ancot", level=2)
    assert (tmp_path / "a.ancot").read_bytes() == (tmp_path / "b.ancot").read_bytes()
    assert (tmp_path / "a.ancot").read_bytes() != (tmp_path / "c.ancot").read_bytes()


def test_truth_parquet_has_the_canonical_schemas(tmp_path):
    from scsitrace import schema
    simulate(Workload(count=3), tmp_path / "t.ancot", truth_dir=tmp_path / "truth")
    schema.validate(pl.read_parquet(tmp_path / "truth" / "segments.parquet"), schema.SEGMENTS, "segments")
    schema.validate(pl.read_parquet(tmp_path / "truth" / "ios.parquet"), schema.IOS, "ios")


@pytest.mark.parametrize("argv, message", [
    (["--count", "2", "--disks", "8"], "--disks"),
    (["--count", "2", "--size", "1000"], "--size"),
    (["--count", "2", "--size", "256K"], "--size"),
    (["--count", "2", "--bfr", "1/100"], "less than a sector"),
    (["--count", "2", "--bfr", "2"], "less than a sector"),
    (["--count", "2", "--ber", "x"], "--ber"),
    (["--count", "2", "--inflight", "9"], "--inflight"),
    (["--duration", "0"], "--duration"),
    (["--count", "2", "--bus-rate", "40"], "--bus-rate"),
])
def test_cli_usage_errors_exit_2(tmp_path, capsys, argv, message):
    from scsitrace.cli import main
    assert main(["simulate", "-o", str(tmp_path / "x.ancot")] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_cli_what_if_bus_rate(tmp_path):
    from scsitrace.cli import main
    for rate, name in (("4", "slow"), ("10", "fast")):
        assert main(["simulate", "-o", str(tmp_path / f"{name}.ancot"), "--count", "8", "--level", "2",
                     "--disks", "1", "--bus-rate", rate, "--truth", str(tmp_path / name)]) == 0
    def data_ns(name):
        seg = pl.read_parquet(tmp_path / name / "segments.parquet").filter(pl.col("phase") == "DATA IN")
        return int((seg["end_ns"] - seg["start_ns"]).sum()), int(seg["bytes"].sum())
    (slow, n1), (fast, n2) = data_ns("slow"), data_ns("fast")
    assert n1 == n2 == 8 * 32 * KIB
    assert fast < slow


# Sec 4.7, Tables 24-31: "Time on Jaguar board" of one disk's I/Os issued by the no-copy call
# (submit to completion). Independent of Table 3: nothing in the model was tuned to these.
JAGUAR_BOARD_MS = [
    ("read", "seq", 32, 24.5), ("write", "seq", 32, 40.4), ("read", "random", 32, 57.0),
    ("write", "random", 32, 55.5), ("read", "seq", 4, 3.2), ("write", "seq", 4, 19.4),
    ("read", "random", 4, 33.2), ("write", "random", 4, 32.5), ("read", "seq", 128, 91.5),
]


@pytest.mark.parametrize("op, pattern, kib, paper_ms", JAGUAR_BOARD_MS)
def test_time_on_board_matches_the_no_copy_timelines(tmp_path, op, pattern, kib, paper_ms):
    res = simulate(Workload(disks=1, op=op, pattern=pattern, size=kib * KIB, count=40, seed=2),
                   tmp_path / "j.ancot", level=1)
    ios = res.ios.filter(pl.col("io") >= 5)                 # past the first seek
    board_ms = float((ios["end_ns"] - ios["start_ns"]).mean()) / 1e6
    assert abs(board_ms / paper_ms - 1) <= 0.20, board_ms


# Sec 4.7, Tables 12-21: "Total time per call" plus "time between calls" of one process
# issuing raw I/O from Sprite user level: the period between completions.
USER_LEVEL_PERIOD_MS = [
    ("read", "seq", 32, 31.0 + 0.19), ("write", "seq", 32, 44.5 + 2.0), ("read", "random", 32, 66.0 + 0.69),
    ("write", "random", 32, 64.3 + 0.44),
    # the host's own 1.8 ms of Table 18 leaves the model's board time at 2.5 ms against the
    # report's 4.1: readahead streams on while the host works, and nothing slows the board's DMA
    # while the host copies (memory-bus contention, Sec 4.1.1/4.4, is not modelled)
    pytest.param("read", "seq", 4, 5.8 + 0.09, marks=pytest.mark.xfail(
        strict=True, reason="board time while the host copies: memory-bus contention not modelled")),
    ("write", "seq", 4, 19.3 + 0.12),
    ("read", "random", 4, 35.4 + 0.37), ("write", "random", 4, 33.3 + 0.32), ("read", "seq", 128, 111.0 + 0.65),
    ("write", "seq", 128, 124.0 + 0.19),
]


@pytest.mark.parametrize("op, pattern, kib, paper_ms", USER_LEVEL_PERIOD_MS)
def test_user_level_period_matches_the_user_level_timelines(tmp_path, op, pattern, kib, paper_ms):
    p = Params()
    p.host.mode = "user-level"
    res = simulate(Workload(disks=1, op=op, pattern=pattern, size=kib * KIB, count=40, seed=2),
                   tmp_path / "u.ancot", level=1, params=p)
    ends = np.sort(res.ios["end_ns"].to_numpy())
    period_ms = float(np.diff(ends[5:]).mean()) / 1e6
    assert abs(period_ms / paper_ms - 1) <= 0.25, period_ms
