"""The simulated bus fixtures (fixtures/cases.toml): committed traces are what the manifest
makes, the analyzer finds the simulator's ground truth in them, and the golden outputs
(summary JSON, phase table text, regress baseline) are what the code produces today.

A golden mismatch after an intended change: run `python -m scsitrace.fixtures` from the
repository root and review the diff.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scsitrace import core, fixtures, parsers
from scsitrace.cli import build_parser, main
from scsitrace.commands import simulate as simulate_cmd
from scsitrace.sim import simulate

ROOT = Path(__file__).resolve().parents[1]
CASES = fixtures.load_cases(ROOT)
ISSUE_CASES = {"table3-l1", "table3-l3", "random4k-l3", "seqwrite32k-l1", "one-target-l1", "reset-l1",
               "glitch-bsy-l1", "cut-l1"}


def case_dir(case) -> Path:
    return ROOT / fixtures.OUT / case["name"]


def test_manifest_lists_the_issue_cases_with_all_outputs():
    assert ISSUE_CASES <= {c["name"] for c in CASES}
    for case in CASES:
        for name in (fixtures.trace_name(case), "summary.json", "phases.txt", "baseline.json"):
            assert (case_dir(case) / name).is_file(), f"{case['name']}/{name} missing: run python -m scsitrace.fixtures"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_trace_is_what_the_manifest_makes_and_holds_its_ground_truth(case, tmp_path):
    args = build_parser().parse_args(["simulate", "-o", str(tmp_path / "t")] + case["simulate"])
    wl, params = simulate_cmd.build(args)
    res = simulate(wl, tmp_path / fixtures.trace_name(case), level=args.level, fmt=args.format, params=params)
    committed = case_dir(case) / fixtures.trace_name(case)
    assert (tmp_path / fixtures.trace_name(case)).read_bytes() == committed.read_bytes()
    analysis = core.analyze(parsers.parse(str(committed)))
    assert analysis.segments.equals(res.segments)
    assert analysis.ios_completed == res.ios_completed


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden_outputs(case, monkeypatch):
    monkeypatch.chdir(ROOT)
    rel = fixtures.OUT / case["name"] / fixtures.trace_name(case)
    outputs = fixtures.golden_outputs(rel, rel, case["analyze"])
    for name, data in outputs.items():
        golden = (case_dir(case) / name).read_text(encoding="utf-8")
        assert data.decode() == golden, f"{case['name']}/{name} changed: review, then python -m scsitrace.fixtures"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_committed_trace_passes_its_baseline(case, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["regress", str(fixtures.OUT / case["name"] / "baseline.json")]) == 0


def test_fault_cases_show_their_fault():
    reset = json.loads((case_dir({"name": "reset-l1"}) / "summary.json").read_text())
    assert reset["anomalies"]["by_kind"].get("RESET") == 1
    glitch = json.loads((case_dir({"name": "glitch-bsy-l1"}) / "summary.json").read_text())
    assert glitch["source"]["skew_merged"] == 1
    assert glitch["anomalies"]["count"] == 0
    cut = json.loads((case_dir({"name": "cut-l1"}) / "summary.json").read_text())
    assert any("still in progress" in n for n in cut["notes"])


def test_readme_example_is_the_table3_default_run(tmp_path):
    """fixtures/examples/table3-slice.ancot = `scsitrace simulate -o F --duration 6.64`."""
    assert main(["simulate", "-o", str(tmp_path / "t3.ancot"), "--duration", "6.64"]) == 0
    assert (tmp_path / "t3.ancot").read_bytes() == (ROOT / "fixtures/examples/table3-slice.ancot").read_bytes()
