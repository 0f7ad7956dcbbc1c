"""The README starts with real output: each sample block equals what the command prints
today (regenerate with `python -m scsitrace.readme_samples --write README.md`), on a trace of
every layer; the benchmarks are one current table in docs/benchmarks.md."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scsitrace import readme_samples

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", readme_samples.SAMPLES)
def test_sample_is_what_the_command_prints(monkeypatch, name):
    monkeypatch.chdir(REPO)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert readme_samples.block(readme, name) == readme_samples.fenced(name), \
        f"README sample {name} drifted: python -m scsitrace.readme_samples --write README.md"


def test_samples_cover_every_layer_and_fit_their_width(monkeypatch):
    monkeypatch.chdir(REPO)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    layers = set()
    for name in readme_samples.SAMPLES:
        text = readme_samples.block(readme, name)
        assert max(len(line) for line in text.splitlines()[2:-1]) <= readme_samples.WIDTH
        if readme_samples.SAMPLES[name][0] == "analyze":
            layers.add(name)
    assert layers == {"bus", "block", "usb", "scsilog"}


def test_readme_opens_with_the_two_commands_then_what_it_is_for():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert lines[2:6] == ["```", "bash run.sh demo", "bash run.sh test", "```"]
    first_section = next(i for i, line in enumerate(lines) if line.startswith("## "))
    assert lines[first_section] == "## What it prints"
    assert "## Benchmarks" not in lines


def test_benchmarks_are_one_current_table():
    text = (REPO / "docs/benchmarks.md").read_text(encoding="utf-8")
    tables = re.findall(r"^\|.*\|$", text, re.M)
    assert tables[0] == "| figure (script) | scsitrace | reference tool, same input | ratio | peak RSS | measured |"
    rows = tables[2:]
    assert len(rows) >= 10 and all(re.search(r"\| \d{4}-\d\d-\d\d \|$", row) for row in rows)
    assert all(row.count(" | ") == 5 for row in rows)   # every row has the six cells (no | inside one)
    assert all(len(row) < 500 for row in rows)          # no cell of history
