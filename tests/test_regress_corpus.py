"""The regression gate over a corpus: `scsitrace baseline DIR -o BASELINES/` writes one
baseline per trace; `scsitrace regress --baselines BASELINES TRACE...` checks them all in one
call. The corpus holds the synthetic Table 11 trace of test_regress (once unchanged, once with
the host adapter's buffer pauses made three times as long) and two committed fixtures; the
worsened trace fails by name, in the printed lines and in the JUnit XML."""
from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scsitrace import cli
from test_regress import write_trace

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("gate")
    good, bad = d / "good", d / "bad"
    for root in (good, bad):
        for case in ("cut-l1", "reset-l1"):
            (root / case).mkdir(parents=True)
            shutil.copy(REPO / "fixtures" / "bus" / case / "trace.ancot", root / case / "trace.ancot")
    write_trace(good / "table11.ancot")
    write_trace(bad / "table11.ancot", buffer_scale=3.0)
    baselines = d / "baselines"
    assert cli.main(["baseline", str(good), "-o", f"{baselines}/", "-j", "1"]) == 0
    return d, good, bad, baselines


def test_baseline_writes_a_directory(corpus):
    d, good, _, baselines = corpus
    names = sorted(p.relative_to(baselines).as_posix() for p in baselines.rglob("*.json"))
    assert names == ["cut-l1/trace.ancot.baseline.json", "reset-l1/trace.ancot.baseline.json",
                     "table11.ancot.baseline.json"]
    # the same document the single-trace command writes, trace path relative to the baseline
    single = d / "single.json"
    assert cli.main(["baseline", str(good / "cut-l1" / "trace.ancot"), "-o", str(single)]) == 0
    mine = json.loads((baselines / names[0]).read_text())
    theirs = json.loads(single.read_text())
    assert mine["figures"] == theirs["figures"] and mine["options"] == theirs["options"]
    assert mine["trace"] == "../../good/cut-l1/trace.ancot"


def test_unchanged_corpus_passes_with_one_line_per_trace(corpus, capsys):
    _, good, _, baselines = corpus
    assert cli.main(["regress", "--baselines", str(baselines), str(good), "-j", "0"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[:2] for ln in lines[:-1]] == [["ok", "table11.ancot:"], ["ok", "cut-l1/trace.ancot:"],
                                                     ["ok", "reset-l1/trace.ancot:"]]
    assert lines[-1] == "total: 3 trace(s): 3 ok"
    # DIR alone: every baseline against the trace it names
    assert cli.main(["regress", "--baselines", str(baselines), "-j", "0"]) == 0


def test_worsened_bad_and_unknown_traces_fail_by_name_and_in_junit(corpus, tmp_path, capsys):
    """One call: the worsened corpus with one trace broken at line 95, and a trace that has
    no baseline."""
    _, good, bad, baselines = corpus
    stray = tmp_path / "stray.ancot"
    shutil.copy(good / "cut-l1" / "trace.ancot", stray)
    worse = tmp_path / "worse"
    shutil.copytree(bad, worse)
    broken = worse / "reset-l1" / "trace.ancot"
    lines = broken.read_text().splitlines(keepends=True)
    broken.write_text("".join(lines[:94]) + "12 zz\n" + "".join(lines[94:]))
    junit = tmp_path / "gate.xml"
    status = cli.main(["regress", "--baselines", str(baselines), str(worse), str(stray),
                       "--junit", str(junit), "-j", "0"])
    assert status == 1
    out = capsys.readouterr().out.strip().splitlines()
    regressed = [ln for ln in out if ln.startswith("REGRESSED")]
    assert len(regressed) == 1 and "table11.ancot:" in regressed[0]
    assert "attribution.initiator_ns" in regressed[0] and "attribution.target_ns" not in regressed[0]
    assert any(ln.startswith("NO BASELINE stray.ancot: no baseline") for ln in out)
    assert f"BAD         reset-l1/trace.ancot: {broken}:95: " in "\n".join(out)
    assert out[-1] == "total: 4 trace(s): 1 bad, 1 no baseline, 1 ok, 1 regressed"
    suite = ET.parse(junit).getroot().find("testsuite")
    cases = suite.findall("testcase")
    failed = {(c.get("classname"), c.get("name")) for c in cases if c.find("failure") is not None}
    assert ("table11.ancot", "attribution.initiator_ns") in failed
    assert ("table11.ancot", "bandwidth_mib_s") in failed
    assert {cls for cls, _ in failed} == {"table11.ancot"}
    errors = {(c.get("classname"), c.get("name")) for c in cases if c.find("error") is not None}
    assert errors == {("stray.ancot", "analysis"), ("reset-l1/trace.ancot", "analysis")}
    n_figures = sum(len(json.loads(p.read_text())["figures"]) for p in baselines.rglob("*.json")
                    if "reset-l1" not in str(p))
    assert len(cases) == n_figures + 2 == int(suite.get("tests"))
    assert int(suite.get("failures")) == len(failed) and int(suite.get("errors")) == 2


def test_single_trace_regress_is_unchanged(corpus, tmp_path):
    _, good, bad, baselines = corpus
    base = baselines / "table11.ancot.baseline.json"
    assert cli.main(["regress", str(base)]) == 0
    assert cli.main(["regress", str(base), str(bad / "table11.ancot")]) == 1
    assert cli.main(["regress", str(base), str(bad / "table11.ancot"), str(good / "table11.ancot")]) == 2


def test_manifest_names_the_baselines(corpus, tmp_path, capsys):
    """Baselines written from a manifest are found again through it (names as written there)."""
    _, good, bad, _ = corpus
    manifest = tmp_path / "m.toml"
    manifest.write_text(f'[[trace]]\npath = "{good / "table11.ancot"}"\nlabels = {{build = "1"}}\n'
                        f'[[trace]]\npath = "{good / "cut-l1" / "trace.ancot"}"\nio_size = 4096\n')
    out = tmp_path / "b"
    assert cli.main(["baseline", "--manifest", str(manifest), "-o", f"{out}/", "-j", "0", "--allow-outside"]) == 0
    made = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    assert made == sorted(f"{p.relative_to('/').as_posix()}.baseline.json"
                          for p in (good / "table11.ancot", good / "cut-l1" / "trace.ancot"))
    stored = json.loads(next(out.rglob("trace.ancot.baseline.json")).read_text())
    assert stored["options"]["io_size"] == 4096 and "bandwidth_mib_s" in stored["figures"]
    capsys.readouterr()
    assert cli.main(["regress", "--baselines", str(out), "--manifest", str(manifest), "-j", "0",
                     "--allow-outside"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "total: 2 trace(s): 2 ok"
