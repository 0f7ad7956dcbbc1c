"""The named experiments against the report's own results, Table 3 at other seeds and
durations, the what-if sweeps, and the host timelines the model takes from Sec 4.7.

Every figure compared here is one the report gives in its text or tables (the phase tables of
the other experiments, Tables 4-10, are withheld from this copy as held-out validation); the
tolerance of each figure is stated beside it in scsitrace/sim/workloads.py. The model was
built from the mechanisms of Sec 2-4 (docs/simulator.md); none of these figures is a model input.
"""
from __future__ import annotations

import csv

import polars as pl
import pytest

from scsitrace.cli import main
from scsitrace.sim import Params, Workload, simulate, timelines
from scsitrace.sim.workloads import run_one
from scsitrace.sim.workloads import NAMED, evaluate, measure

KIB = 1024
_cache: dict[str, dict] = {}


def metrics(name: str) -> dict:
    if name not in _cache:
        _cache[name] = evaluate(NAMED[name], seed=1)
    return _cache[name]


CASES = [pytest.param(w.name, f, id=f"{w.name}:{f.metric}",
                      marks=[pytest.mark.xfail(strict=True, reason=f.known_gap)] if f.known_gap else [])
         for w in NAMED.values() for f in w.figures]


@pytest.mark.parametrize("name, figure", CASES)
def test_named_workload_matches_the_paper(name, figure):
    got = metrics(name)[figure.metric]
    band = f"+-{figure.tolerance} points" if figure.points else f"+-{figure.tolerance:.0%}"
    assert figure.holds(got), f"{name} {figure.metric}: {got:.3f}, paper {figure.value} {band} ({figure.source})"


def test_every_kind_of_experiment_is_named():
    kinds = {(w.op, w.pattern, w.host, w.processes > 1) for w in NAMED.values()}
    for op in ("read", "write"):
        for pattern in ("seq", "random"):
            assert any(k[:2] == (op, pattern) for k in kinds), (op, pattern)
    assert {k[2] for k in kinds} == {"no-copy", "user-level"}
    assert {k[3] for k in kinds} == {False, True}


# Table 3 at other seeds and durations: a sample of the 10 x 9 grid the bench covers
# (bench/bench_simulate_robust.py); each category the paper shows at >= 1 % within 10 %
# relative, Bus Free within 2 points.
PAPER_T3 = {"Command": 4.02, "Data Transfer": 93.15}


@pytest.mark.parametrize("seed, seconds", [(2, 2.0), (7, 3.0), (9, 5.0)])
def test_table3_holds_at_other_seeds_and_durations(seed, seconds):
    m = evaluate(NAMED["table3"], seed=seed, duration_s=seconds)
    for name, paper in PAPER_T3.items():
        assert abs(m[name] / paper - 1) <= 0.10, (name, m[name])
    assert abs(m["Bus Free"] - 1.05) <= 2.0, m["Bus Free"]


def test_processes_queue_in_the_jaguar_one_command_at_the_disk(tmp_path):
    """Sec 2.3.2: at most one outstanding operation per disk; Sec 2.2: the other processes'
    commands wait in the disk's work queue, so four processes per disk never overlap at it,
    carry no queue tag, and hide the host's time between commands."""
    def run(processes):
        p = Params()
        p.host.mode = "user-level"
        wl = Workload(disks=2, pattern="random", size=4 * KIB, processes=processes, duration_ns=2_000_000_000,
                      seed=4)
        return simulate(wl, tmp_path / f"p{processes}.ancot", level=1, params=p)
    one, four = run(1), run(4)
    for tgt in (0, 1):
        ios = four.ios.filter(pl.col("target") == tgt).sort("start_ns")
        starts, ends = ios["start_ns"].to_numpy(), ios["end_ns"].to_numpy()
        assert (starts[1:] >= ends[:-1]).all()
        assert ios["tag"].null_count() == ios.height
    assert four.ios_completed > one.ios_completed


def test_host_work_runs_on_one_cpu(tmp_path):
    """Sec 2: one Sun4/280 runs every process's system calls. With one CPU, four user-level
    processes of 32 KB reads spread out; with a CPU each (one_cpu off) they may overlap."""
    def run(one_cpu):
        p = Params()
        p.host.mode, p.host.one_cpu = "user-level", one_cpu
        return run_one(Workload(disks=4, duration_ns=1_000_000_000, seed=3), p)
    (serial, s1), (parallel, s2) = run(True), run(False)
    assert measure(s1, serial.ios, serial.end_ns)["ios"] <= measure(s2, parallel.ios, parallel.end_ns)["ios"]


# Sec 4.7: each user-level table's rows add up to its "Total time per call" (the report rounds
# it): a check of the transcription in timelines.py, with the board times of the tables.
USER_TOTALS = {  # (op, pattern, KiB): (time on Jaguar board, total time per call), us
    ("read", "seq", 128): (77900, 111000), ("write", "seq", 128): (97000, 124000),
    ("read", "seq", 32): (22800, 31000), ("write", "seq", 32): (38200, 44500),
    ("read", "random", 32): (57600, 66000), ("write", "random", 32): (58000, 64300),
    ("read", "seq", 4): (4100, 5800), ("write", "seq", 4): (17800, 19300),
    ("read", "random", 4): (33600, 35400), ("write", "random", 4): (31700, 33300),
}


@pytest.mark.parametrize("key", list(USER_TOTALS), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}k")
def test_user_level_rows_add_up_to_the_tables_totals(key):
    board, total = USER_TOTALS[key]
    after, before = timelines.user_level_split(key[0], key[1], key[2] * KIB)
    between = timelines.USER_LEVEL[key]["between"]
    assert abs((after + before - between + board) / total - 1) <= 0.03


def test_sweep_writes_one_row_per_value_as_csv_and_parquet(tmp_path, capsys):
    """Issue 19: what the host adapter's 8 KB pause costs on the Table 3 workload."""
    out_csv, out_pq = tmp_path / "s.csv", tmp_path / "s.parquet"
    assert main(["simulate", "--workload", "table3", "--duration", "0.6", "--sweep", "alloc_pauses=on,off",
                 "--csv", str(out_csv), "--parquet", str(out_pq)]) == 0
    printed = capsys.readouterr().out
    rows = list(csv.DictReader(out_csv.open()))
    assert [r["value"] for r in rows] == ["on", "off"] and "bus_free_pct" in rows[0]
    assert printed.count("\n") >= 4
    df = pl.read_parquet(out_pq)
    assert df.height == 2 and df["param"].to_list() == ["alloc_pauses"] * 2
    pct = [c for c in df.columns if c.endswith("_pct")]
    assert len(pct) == 10
    for r in df.iter_rows(named=True):
        assert abs(sum(r[c] for c in pct) - 100) < 0.01
    on, off = df.row(0, named=True), df.row(1, named=True)
    assert off["bandwidth_mib_s"] > on["bandwidth_mib_s"]     # the pauses cost bandwidth
    assert float(rows[1]["bandwidth_mib_s"]) == off["bandwidth_mib_s"]


@pytest.mark.parametrize("argv, message", [
    (["--workload", "nope", "-o", "x"], "--workload"),
    (["--sweep", "nope=1"], "unknown parameter"),
    (["--sweep", "bfr=1/1000"], "bad value"),
    (["--sweep", "disks=1,9"], "--disks"),
    (["--sweep", "disks"], "PARAM="),
    (["--workload", "table3"], "-o/--output"),
    (["--count", "2", "-o", "x", "--processes", "5"], "--processes"),
])
def test_usage_errors_exit_2(argv, message, capsys):
    assert main(["simulate"] + argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_workload_options_override_the_named_defaults(tmp_path):
    from scsitrace.cli import build_parser
    from scsitrace.commands.simulate import build
    args = build_parser().parse_args(["simulate", "-o", "x", "--workload", "random-read", "--disks", "3"])
    wl, params = build(args)
    named = NAMED["random-read"]
    assert (wl.disks, wl.pattern, wl.size, params.host.mode) == (3, "random", named.size, named.host)
    assert wl.duration_ns == int(named.duration_s * 1e9)


def test_a_read_without_disconnect_sets_up_its_data_in_command(tmp_path):
    """Assumption A5 (docs/simulator.md): after decoding, a read whose data is buffered goes to
    DATA IN once the transfer is set up (Table 11's 185-285 us), so its COMMAND phase holds
    the command bytes, the 300 us decoding and that pause; a read that disconnects leaves
    COMMAND after decoding and spends the pause in DATA IN after its reselection."""
    p = Params()
    res = simulate(Workload(disks=4, duration_ns=300_000_000, seed=5), tmp_path / "a5.ancot", level=1, params=p)
    seg = res.segments.with_columns(nxt=pl.col("phase").shift(-1), dur=pl.col("end_ns") - pl.col("start_ns"))
    cmd = seg.filter(pl.col("phase") == "COMMAND")
    direct = cmd.filter(pl.col("nxt") == "DATA IN")["dur"].to_numpy()
    parted = cmd.filter(pl.col("nxt") == "MESSAGE IN")["dur"].to_numpy()
    lo, hi = p.disk.first_data_pause_ns
    decode = p.disk.command_decode_ns + p.hba.command_first_ack_ns + p.hba.command_rest_ack_ns
    assert len(direct) > 5 and len(parted) > 5
    assert (direct >= decode + lo).all() and (direct <= decode + hi + 10_000).all()
    assert (parted >= decode).all() and (parted < decode + lo).all()
    p.disk.setup_in_command = False
    res = simulate(Workload(disks=4, duration_ns=300_000_000, seed=5), tmp_path / "b.ancot", level=1, params=p)
    seg = res.segments.with_columns(nxt=pl.col("phase").shift(-1), dur=pl.col("end_ns") - pl.col("start_ns"))
    assert (seg.filter((pl.col("phase") == "COMMAND") & (pl.col("nxt") == "DATA IN"))["dur"] < decode + lo).all()


def _mib_s(disks, size, pattern="seq", seconds=1.5, bfr=0.5, readahead=True):
    p = Params()
    p.disk.bfr, p.disk.readahead = bfr, readahead
    wl = Workload(disks=disks, size=size, pattern=pattern, duration_ns=int(seconds * 1e9), seed=1)
    res, s = run_one(wl, p)
    return measure(s, res.ios, res.end_ns)["mib_s"]


@pytest.mark.parametrize("disks", [1, 3])
def test_bfr_of_the_whole_buffer_is_dismal(disks):
    """Sec 4.2.2, Figure 17: 'One BFR does result in dismal performance' (32 KB, one to three
    disks): no reading while the disk reselects, and long waits behind full-buffer transfers."""
    assert _mib_s(disks, 32 * KIB, bfr=1.0) < 0.9 * _mib_s(disks, 32 * KIB, bfr=0.5)


def test_small_bfr_loses_on_large_reads_and_not_on_small_random_ones():
    """Sec 4.2.2, Figures 15 and 16 (three disks): 'for larger operations, the 16KByte BFR is a
    clear winner'; for small random reads 'the advantage consistently goes to the smaller BFR'."""
    assert _mib_s(3, 128 * KIB, bfr=0.5) > 1.15 * _mib_s(3, 128 * KIB, bfr=512 / 32768)
    small, big = (_mib_s(3, 4 * KIB, "random", 3.0, bfr=b) for b in (512 / 32768, 0.5))
    assert small >= big


def test_readahead_gap_is_largest_for_small_sequential_reads_and_nil_for_random():
    """Sec 4.2.1, Figures 13 and 14 (three disks): the gap 'is most dramatic on small requests'
    and narrows as requests grow; for random reads 'the performance difference is very small'."""
    gap = {kib: _mib_s(3, kib * KIB) / _mib_s(3, kib * KIB, readahead=False) for kib in (4, 128)}
    assert gap[4] > 1.5 and 1.0 <= gap[128] < gap[4]
    rand = _mib_s(3, 4 * KIB, "random", 3.0) / _mib_s(3, 4 * KIB, "random", 3.0, readahead=False)
    assert abs(rand - 1) < 0.05
