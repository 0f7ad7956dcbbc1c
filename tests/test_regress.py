"""Regression gate: an unchanged trace passes, a worsened one (the host adapter's 8 KB
buffer pauses made three times as long, nothing else changed) fails with exit 1 and names the
figures it moved; tolerances, --update and bad baselines behave as documented. The last
test walks fixtures/ and checks every committed baseline against its trace."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scsitrace import cli
from scsitrace.parsers import ancot
from scsitrace.reports import regress
from test_attribution_synth import SIGNALS, table11_analysis

REPO = Path(__file__).resolve().parents[1]


def write_trace(path: Path, buffer_scale: float = 1.0) -> Path:
    synth, _ = table11_analysis(1, seed=3, buffer_scale=buffer_scale)
    ancot.write(str(path), synth.capture.transitions(), signals=SIGNALS, tick_ns=1)
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("regress")
    same = write_trace(d / "base.ancot")
    worse = write_trace(d / "worse.ancot", buffer_scale=3.0)
    base = d / "base.json"
    assert cli.main(["baseline", str(same), "-o", str(base)]) == 0
    return d, same, worse, base


def rows_of(base, trace, tmp_path, *extra):
    out = tmp_path / "rows.json"
    status = cli.main(["regress", str(base), str(trace), "--json", str(out), *extra])
    return status, {r["figure"]: r for r in json.loads(out.read_text())["rows"]}


def test_unchanged_trace_passes(traces, tmp_path):
    _, same, _, base = traces
    status, rows = rows_of(base, same, tmp_path)
    assert status == 0
    assert all(r["verdict"] == "ok" and r["delta"] == 0 for r in rows.values())
    assert {"percent.Data Transfer", "bandwidth_mib_s", "iops", "response_ns.median",
            "attribution.initiator_ns"} <= set(rows)


def test_longer_host_adapter_pauses_regress(traces, tmp_path, capsys):
    _, _, worse, base = traces
    status, rows = rows_of(base, worse, tmp_path)
    assert status == 1
    # the host adapter's (initiator's) time grows, the disk's does not; the I/Os take longer
    assert rows["attribution.initiator_ns"]["verdict"] == "regressed"
    assert rows["attribution.target_ns"]["verdict"] == "ok"
    assert rows["response_ns.mean"]["delta"] > 0
    assert rows["normalized_ns.Data Transfer"]["verdict"] == "regressed"
    assert rows["bandwidth_mib_s"]["verdict"] == "regressed"
    assert "REGRESSED" in capsys.readouterr().out


def test_tolerance_overrides(traces, tmp_path):
    _, _, worse, base = traces
    wide = ["--tolerance", "time=1000%", "--tolerance", "rate=99%", "--tolerance", "percent.*=100"]
    status, rows = rows_of(base, worse, tmp_path, *wide)
    assert status == 0, [r for r in rows.values() if r["verdict"] != "ok"]
    # the last matching override wins: one figure tightened again fails alone
    status, rows = rows_of(base, worse, tmp_path, *wide, "--tolerance", "bandwidth_mib_s=1%")
    assert status == 1
    assert [f for f, r in rows.items() if r["verdict"] == "regressed"] == ["bandwidth_mib_s"]


def test_improvement_passes_but_is_flagged():
    rows = regress.compare({"iops": {"value": 100.0, "kind": "rate"}},
                           {"iops": {"value": 120.0, "kind": "rate"}}, [])
    assert rows[0]["verdict"] == "improved" and not regress.failed(rows)
    rows = regress.compare({"percent.Status": {"value": 10.0, "kind": "percent"}},
                           {"percent.Status": {"value": 8.5, "kind": "percent"}}, [])
    assert rows[0]["verdict"] == "regressed"      # a share has no good direction
    rows = regress.compare({"percent.Status": {"value": 10.0, "kind": "percent"}},
                           {"percent.Status": {"value": 10.9, "kind": "percent"}}, [])
    assert rows[0]["verdict"] == "ok"
    rows = regress.compare({"iops": {"value": 100.0, "kind": "rate"}}, {}, [])
    assert rows[0]["verdict"] == "missing" and regress.failed(rows)


def test_update_rewrites_the_baseline(traces, tmp_path):
    d, _, worse, base = traces
    copy = tmp_path / "b.json"
    doc = json.loads(base.read_text())
    doc["trace"] = str(Path(d / "base.ancot"))
    copy.write_text(json.dumps(doc))
    assert cli.main(["regress", str(copy), str(worse), "--update"]) == 0
    assert cli.main(["regress", str(copy), str(worse)]) == 0
    assert json.loads(copy.read_text())["options"] == doc["options"]


def test_default_trace_is_the_baselines_own(traces):
    _, _, _, base = traces
    assert json.loads(base.read_text())["trace"] == "base.ancot"
    assert cli.main(["regress", str(base)]) == 0


@pytest.mark.parametrize("content,why", [
    ("{not json", "not a JSON baseline"),
    ('{"format": "other"}', "not a scsitrace baseline"),
    ('{"format": "scsitrace-baseline", "version": 1, "figures": {"x": {"value": "a", "kind": "rate"}}}',
     "figures must map"),
    ('{"format": "scsitrace-baseline", "version": 9, "figures": {}}', "version 9"),
])
def test_bad_baselines_exit_2(traces, tmp_path, capsys, content, why):
    _, same, _, _ = traces
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert cli.main(["regress", str(bad), str(same)]) == 2
    err = capsys.readouterr().err
    assert "bad.json" in err and why in err


def test_bad_tolerance_and_bad_trace_exit_2(traces, tmp_path):
    _, same, _, base = traces
    assert cli.main(["regress", str(base), str(same), "--tolerance", "iops"]) == 2
    broken = tmp_path / "broken.ancot"
    broken.write_text(same.read_text()[:3000] + "\n12 zz\n")
    assert cli.main(["regress", str(base), str(broken)]) == 2


def committed_baselines() -> list[Path]:
    found = set()
    for pattern in ("baseline.json", "baseline.*.json", "*.baseline.json"):
        found |= set((REPO / "fixtures").rglob(pattern))
    return sorted(found)


@pytest.mark.parametrize("baseline", committed_baselines() or [None],
                         ids=lambda p: str(p.relative_to(REPO)) if p else "none")
def test_committed_fixture_baselines_hold(baseline):
    """Every fixtures/**/baseline[.*].json (or <trace>.baseline.json) against its own trace."""
    if baseline is None:
        pytest.skip("no committed baselines under fixtures/ yet")
    assert cli.main(["regress", str(baseline)]) == 0


def test_response_percentiles_are_the_latency_tables(traces, tmp_path):
    """The gate's response figures are the latency table's (nearest rank), not recomputed."""
    _, same, _, base = traces
    doc = json.loads(base.read_text())
    assert doc["percentiles"] == "nearest-rank"
    out = tmp_path / "a.json"
    assert cli.main(["analyze", str(same), "--json", str(out)]) == 0
    response = json.loads(out.read_text())["latency"][0]
    assert doc["figures"]["response_ns.median"]["value"] == response["p50_ns"]
    assert doc["figures"]["response_ns.p95"]["value"] == response["p95_ns"]
    assert doc["figures"]["response_ns.mean"]["value"] == response["avg_ns"]


def test_interpolated_percentiles_of_an_old_baseline_are_stale_not_failing(traces, tmp_path, capsys):
    """A baseline written before the percentiles were the latency table's: its median and p95
    are shown as stale (not compared), everything else still gates."""
    _, same, _, base = traces
    doc = json.loads(base.read_text())
    del doc["percentiles"]
    doc["figures"]["response_ns.median"]["value"] *= 1.5       # as numpy's interpolation might differ
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    (tmp_path / same.name).write_bytes(same.read_bytes())
    status, rows = rows_of(old, same, tmp_path)
    assert status == 0
    assert rows["response_ns.median"]["verdict"] == "stale"
    assert rows["response_ns.mean"]["verdict"] == "ok"
    assert "re-record with --update" in capsys.readouterr().out
