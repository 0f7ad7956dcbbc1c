"""`scsitrace batch`: a directory of committed fixture traces (plus a file that is no trace and
a broken trace) into one Parquet dataset, read back by polars and by duckdb as it is; every
figure equals what `scsitrace analyze` gives for the same trace alone. Manifests (options,
labels, bad manifests), globs, time limits and dead workers (the real worker pool, with a
work function that kills its process) and the exit statuses."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import polars as pl
import pytest

from scsitrace import batch, cli, pool

REPO = Path(__file__).resolve().parents[1]
BUS = REPO / "fixtures" / "bus"
CASES = ("cut-l1", "glitch-bsy-l1", "reset-l1", "one-target-l1", "random4k-vcd-l1")


def trace_of(case: str) -> Path:
    return next(p for p in (BUS / case).iterdir() if p.name.startswith("trace."))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """corpus/<case>/trace.*, corpus/<case>/notes.txt (no trace), corpus/broken/trace.ancot."""
    d = tmp_path_factory.mktemp("corpus")
    for case in CASES:
        (d / case).mkdir()
        shutil.copy(trace_of(case), d / case / trace_of(case).name)
    (d / CASES[0] / "notes.txt").write_text("captured on the bench, cable 2\n")
    (d / "broken").mkdir()
    lines = trace_of("cut-l1").read_text().splitlines(keepends=True)
    (d / "broken" / "trace.ancot").write_text("".join(lines[:40]) + "12 zz\n" + "".join(lines[40:]))
    return d


@pytest.fixture(scope="module")
def dataset(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ds") / "out"
    status = cli.main(["batch", str(corpus), "-o", str(out), "-j", "2"])
    return corpus, out, status


def analyze_json(trace: Path, tmp: Path, *extra) -> dict:
    dest = tmp / (trace.parent.name + ".json")
    assert cli.main(["analyze", str(trace), "--json", str(dest), *extra]) == 0
    return json.loads(dest.read_text())


def test_dataset_rows_match_single_analyses(dataset, tmp_path):
    corpus, out, status = dataset
    assert status == 2                                  # one input is bad
    summary = pl.read_parquet(out / "summary.parquet")
    assert summary["trace_id"].to_list() == list(range(len(CASES) + 1))
    by_trace = {Path(r["trace"]).parent.name: r for r in summary.iter_rows(named=True)}
    assert set(by_trace) == set(CASES) | {"broken"}
    broken = by_trace["broken"]
    assert broken["status"] == "bad" and broken["elapsed_ns"] is None
    assert f"{corpus / 'broken' / 'trace.ancot'}:41" in broken["error"]
    categories = pl.read_parquet(out / "categories.parquet")
    for case in CASES:
        alone = analyze_json(corpus / case / trace_of(case).name, tmp_path)
        row = by_trace[case]
        assert row["status"] == "ok" and row["error"] is None
        for key in ("elapsed_ns", "ios_completed", "iops", "layer", "profile"):
            assert row[key] == alone[key], (case, key)
        assert row["records.read"] == alone["records"]["read"]
        assert row["source.format"] == alone["source"]["format"]
        for c in alone["categories"]:
            assert row[f"percent.{c['name']}"] == pytest.approx(c["percent"], rel=1e-12)
            assert row[f"total_ns.{c['name']}"] == c["total_ns"]
        long = categories.filter(pl.col("trace_id") == row["trace_id"]).drop("trace_id", "trace")
        assert long.to_dicts() == alone["categories"]


def test_non_traces_are_listed_as_skipped(dataset, capsys):
    corpus, out, _ = dataset
    skipped = pl.read_parquet(out / "skipped.parquet")
    assert skipped["path"].to_list() == [str(corpus / CASES[0] / "notes.txt")]
    assert "not a trace" in skipped["reason"][0]


def test_polars_and_duckdb_read_the_dataset_as_it_is(dataset, tmp_path):
    duckdb = pytest.importorskip("duckdb")
    corpus, out, _ = dataset
    ios = pl.scan_parquet(out / "ios").collect()            # hive partitions: trace_id column
    summary = pl.read_parquet(out / "summary.parquet")
    con = duckdb.connect()
    per_trace = dict(con.sql(f"select trace_id, count(*) from read_parquet('{out}/ios/*/*.parquet', "
                             "hive_partitioning = true) group by trace_id").fetchall())
    assert per_trace == dict(ios.group_by("trace_id").len().iter_rows())
    for case in CASES[:2]:
        tid = summary.filter(pl.col("trace").str.contains(f"/{case}/"))["trace_id"][0]
        csv = tmp_path / f"{case}.csv"
        assert cli.main(["analyze", str(corpus / case / trace_of(case).name), "--ios", str(csv)]) == 0
        alone = pl.read_csv(csv)
        mine = ios.filter(pl.col("trace_id") == tid).sort("io")
        assert mine.height == alone.height > 0
        assert mine["start_ns"].to_list() == alone["start_ns"].to_list()
    # ranking traces by an overhead figure: the same order from SQL and from polars
    ranked = con.sql(f"""select trace, "percent.Arbitration" as arb from '{out}/summary.parquet'
                         where status = 'ok' order by arb desc, trace""").fetchall()
    expect = (summary.filter(pl.col("status") == "ok").sort(["percent.Arbitration", "trace"],
                                                            descending=[True, False])
              .select("trace", "percent.Arbitration").rows())
    assert ranked == expect
    for table in ("categories", "stages", "srt", "targets", "devices"):
        got = con.sql(f"select count(*) from '{out}/{table}.parquet'").fetchall()[0][0]
        assert got == pl.read_parquet(out / f"{table}.parquet").height


def test_manifest_options_and_labels(corpus, tmp_path):
    trace = corpus / "cut-l1" / "trace.ancot"
    manifest = tmp_path / "m.toml"
    manifest.write_text(f"""
[defaults]
labels = {{build = "4.2"}}

[[trace]]
path = "{os.path.relpath(trace, tmp_path)}"
labels = {{host = "srv1", run = 1}}

[[trace]]
path = "{trace}"
profile = "scsi"
io-size = 4096
labels = {{host = "srv2", run = 2, device = "sdb"}}
""")
    out = tmp_path / "out"
    assert cli.main(["batch", "--manifest", str(manifest), "-o", str(out), "-j", "0", "--allow-outside"]) == 0
    s = pl.read_parquet(out / "summary.parquet")
    assert s["label.host"].to_list() == ["srv1", "srv2"]
    assert s["label.build"].to_list() == ["4.2", "4.2"]
    assert s["label.run"].to_list() == [1, 2] and s["label.device"].to_list() == [None, "sdb"]
    assert s["profile"].to_list() == ["raid1990", "scsi"]
    assert s["bandwidth_mib_s"][0] is None and s["bandwidth_mib_s"][1] > 0     # io_size applied to one
    assert s["data_bytes"][1] == 4096 * s["ios_completed"][1]
    cats = pl.read_parquet(out / "categories.parquet")
    assert "BUS FREE" in cats.filter(pl.col("trace_id") == 1)["name"].to_list()
    assert "Bus Free" in cats.filter(pl.col("trace_id") == 0)["name"].to_list()


@pytest.mark.parametrize("text,why,line", [
    ("[[trace]]\npath = 'a'\nbogus = 1\n", "unknown key 'bogus'", 1),
    ("[[trace]]\npath = 'a'\n[[trace]]\nio_size = 1\n", "needs path", 3),
    ("[[trace]]\npath = 'a'\nx y\n", "not a TOML manifest", 3),
    ("[defaults]\nio_size = 1\n", "no [[trace]] entries", None),
])
def test_bad_manifest_is_one_line_exit_2(tmp_path, capsys, text, why, line):
    m = tmp_path / "bad.toml"
    m.write_text(text)
    assert cli.main(["batch", "--manifest", str(m), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and why in err
    assert (f"{m}:{line}:" in err) if line else f"{m}:" in err


def test_glob_and_unmatched_glob(corpus, tmp_path, capsys):
    out = tmp_path / "g"
    assert cli.main(["batch", str(corpus / "*" / "trace.vcd"), "-o", str(out), "-j", "0"]) == 0
    assert pl.read_parquet(out / "summary.parquet")["source.format"].to_list() == ["vcd"]
    assert cli.main(["batch", str(corpus / "*.nothing"), "-o", str(out)]) == 2
    assert "no file matches" in capsys.readouterr().err


def test_a_fifo_is_refused_at_once_and_the_rest_completes(corpus, tmp_path):
    """A FIFO would block the read forever: it is refused before it is opened (issue 18: only
    regular files are read), so it is bad input, not a timeout. (Overdue workers are timed
    out by the pool: test_dead_and_overdue_workers_are_replaced.)"""
    fifo = tmp_path / "stuck.ancot"
    os.mkfifo(fifo)                       # opening it would block forever: nobody writes
    out = tmp_path / "t"
    good = corpus / "cut-l1" / "trace.ancot"
    status = cli.main(["batch", str(good), str(fifo), str(good), "-o", str(out), "-j", "2",
                       "--format", "ancot", "--timeout", "60"])
    assert status == 2
    s = pl.read_parquet(out / "summary.parquet")
    assert s["status"].to_list() == ["ok", "bad", "ok"]
    assert "FIFO" in s["error"][1] and "stuck.ancot" in s["error"][1]


def crash_hang_or_answer(job):
    """A work function for the real pool: kills its own process for 'crash', hangs for 'hang',
    else answers with the pid of the worker that ran it (no analysis: this test is about the
    pool, and a cold worker's first analysis would count against the short time limit)."""
    if job.path.endswith("crash"):
        os.abort()
    if job.path.endswith("hang"):
        time.sleep(600)
    return {**batch.failed_result(job, "ok", None), "pid": os.getpid()}


def test_dead_and_overdue_workers_are_replaced():
    paths = ["a", "x.crash", "y.hang", "b", "c"]
    jobs = [batch.Job(i, p, p) for i, p in enumerate(paths)]
    seen = []
    results = pool.run_local(jobs, 2, timeout=1.5, on_result=seen.append, work=crash_hang_or_answer, prepare=None)
    assert [r["status"] for r in results] == ["ok", "crashed", "timeout", "ok", "ok"]
    assert "SIGABRT" in results[1]["error"] and "--timeout 1.5 s" in results[2]["error"]
    assert sorted(r["trace_id"] for r in seen) == list(range(len(paths)))
    pids = {r["pid"] for r in results if r["status"] == "ok"}
    assert os.getpid() not in pids and len(pids) <= 4     # two workers and their two replacements


def test_exit_statuses():
    ok, bad, crash = ({"status": s} for s in ("ok", "bad", "crashed"))
    assert batch.exit_status([ok, ok]) == 0
    assert batch.exit_status([ok, bad]) == 2
    assert batch.exit_status([ok, {"status": "timeout"}]) == 2
    assert batch.exit_status([bad, crash]) == 1
    assert batch.exit_status([{"status": "error"}]) == 1


def test_urls_are_fetched_by_the_worker(corpus, tmp_path):
    """fsspec URLs (here file://) are copied by the worker and named as given."""
    pytest.importorskip("fsspec")
    trace = corpus / "reset-l1" / "trace.ancot"
    url = trace.as_uri()
    out = tmp_path / "u"
    assert cli.main(["batch", url, f"{url}.missing", "-o", str(out), "-j", "0"]) == 2
    s = pl.read_parquet(out / "summary.parquet")
    assert s["status"].to_list() == ["ok", "bad"]
    assert s["source.path"][0] == url and s["error"][1] == f"{url}.missing: no such file"
    alone = pl.read_parquet(out / "categories.parquet").filter(pl.col("trace_id") == 0)
    assert alone["total_ns"].to_list() == [c["total_ns"] for c in json.loads(
        (BUS / "reset-l1" / "summary.json").read_text())["categories"]]
