"""The record boundary between Python and the compiled core (HACKING.md, "The record boundary
is Arrow"): no pass takes a long positional argument list or fills arrays its caller made, and
Python has no missing-value marker: a missing value is a null on both sides of the boundary."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUST = sorted((ROOT / "native/src").rglob("*.rs"))
PYTHON = sorted(p for d in ("scsitrace", "parsers", "reports") for p in (ROOT / d).rglob("*.py"))


@pytest.mark.parametrize("path", RUST, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pass_takes_positional_arrays_or_fills_the_callers(path):
    """No long positional list, no array filled for the caller, no result as a dict of arrays
    (a result of several parts is a `#[pyclass(get_all)]` of named fields)."""
    text = path.read_text()
    for marker in ("too_many_arguments", "PyReadwriteArray", "PyDict"):
        assert marker not in text, f"{path.relative_to(ROOT)} uses {marker}"


def test_python_has_no_missing_value_marker():
    """No module defines, imports or reads a NULL marker (schema.NULL was i64::MIN)."""
    found = []
    for path in PYTHON:
        for node in ast.walk(ast.parse(path.read_text())):
            named = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                     else None)
            imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if named in ("NULL", "NONE") or {"NULL", "NONE"} & set(imported):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
