"""The logic-analyzer and VCD readers' compiled passes (native/src/bus/{samples,vcd,saleae,
polarity}.rs) cross the boundary by name, as the bus area's do (tests/test_bus_kernels.py):
named inputs, results as Columns or pyclasses, no array the caller fills, and no missing-value
marker in the readers that call them."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PASSES = [f"native/src/bus/{name}.rs" for name in ("samples", "vcd", "saleae", "polarity")]
READERS = [f"parsers/{name}.py" for name in ("_samples", "sigrok", "dsview", "saleae", "vcd", "_vcd_scan")]


@pytest.mark.parametrize("name", PASSES)
def test_capture_passes_take_named_inputs_and_fill_no_caller_array(name):
    text = (ROOT / name).read_text()
    for marker in ("too_many_arguments", "PyReadwriteArray", "PyDict"):
        assert marker not in text, f"{name} still uses {marker}"


@pytest.mark.parametrize("name", READERS)
def test_capture_readers_see_no_missing_value_marker(name):
    text = (ROOT / name).read_text()
    for marker in ("schema.NULL", "import NULL", "nullable("):
        assert marker not in text, f"{name} still uses {marker}"
