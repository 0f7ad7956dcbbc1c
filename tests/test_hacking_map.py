"""HACKING.md's "Every number, one hop from the CLI" table is true: every function it names
exists where it says, and every key of every layer's `analyze --json` (docs/schemas/) has a
row saying which function computes it."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROOTS = {"reports/": REPO / "reports", "parsers/": REPO / "parsers", "native/": REPO / "native"}


def _table_rows() -> list[tuple[str, str]]:
    text = (REPO / "HACKING.md").read_text(encoding="utf-8")
    section = text.split("## Every number, one hop from the CLI", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and not set(cells[0]) <= {"-"} and cells[0] != "JSON key / table":
            rows.append((cells[0], cells[1]))
    return rows


ROWS = _table_rows()
REFS = sorted({ref for _, cell in ROWS for ref in re.findall(r"`([\w/]+\.py):([\w.]+)`", cell)})


def _source(path: str) -> Path:
    for prefix, root in ROOTS.items():
        if path.startswith(prefix):
            return root / path[len(prefix):]
    return REPO / "scsitrace" / path


def _defined(tree: ast.Module, dotted: str) -> bool:
    scope = tree.body
    for part in dotted.split("."):
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                      and n.name == part), None)
        if found is None:
            return False
        scope = found.body
    return True


def test_the_table_names_functions():
    assert len(ROWS) >= 25 and len(REFS) >= 40


@pytest.mark.parametrize("path,name", REFS, ids=[f"{p}:{n}" for p, n in REFS])
def test_every_named_function_exists(path, name):
    src = _source(path)
    assert src.exists(), f"{path} (HACKING.md) does not exist"
    assert _defined(ast.parse(src.read_text(encoding="utf-8")), name), f"{path}:{name} is not defined"


def test_every_json_key_of_every_layer_has_a_row():
    schema = json.loads((REPO / "docs" / "schemas" / "analyze-json.schema.json").read_text())
    keys = {k for branch in schema["oneOf"] for k in branch["properties"]}
    named = {k for cell, _ in ROWS for k in re.findall(r"`([\w.-]+)`", cell)}
    assert keys - named == set(), "JSON keys without a row in HACKING.md's table"
