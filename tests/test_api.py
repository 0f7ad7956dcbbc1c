"""The Python API in a notebook (issue 28, point 7): `scsitrace.analyze` has a typed
signature (every option a keyword with its type, default and a line of help), the result's
repr is one short line, its `ios` frame is the table `analyze --ios` writes, errors name the
keyword, and docs/api.md's example runs as it is."""
from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
from pathlib import Path

import polars as pl
import pytest

import scsitrace
from scsitrace import api, cli, request
from scsitrace.errors import UsageError
from scsitrace.request import DEFAULTS

REPO = Path(__file__).resolve().parents[1]
BLOCK = REPO / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
BUS = REPO / "fixtures/bus/cut-l1/trace.ancot"
USB = REPO / "fixtures/captured/usb_randread4k"
TRACES = [BLOCK, BUS, USB / "usbmon.txt", USB / "ftrace.txt"]


def test_every_request_field_is_a_keyword_of_the_api():
    from dataclasses import fields
    names = set(inspect.signature(scsitrace.analyze).parameters) - {"path"}
    assert names == {f.name for f in fields(request.AnalysisRequest)} - {"trace"}


def test_the_package_attribute_is_the_typed_function():
    assert scsitrace.analyze is api.analyze
    assert "analyze" in dir(scsitrace)
    sig = inspect.signature(scsitrace.analyze)
    options = [p for p in sig.parameters.values() if p.name != "path"]
    assert options and all(p.kind is p.KEYWORD_ONLY for p in options)
    for p in options:
        assert p.annotation is not inspect.Parameter.empty, p.name
        assert p.default == (getattr(DEFAULTS, p.name) if p.name != "active_low" else None), p.name
        assert re.search(rf"^\s*{p.name}: ", scsitrace.analyze.__doc__, re.M), f"{p.name} has no help line"


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_repr_is_one_short_line_with_the_summary_figures(trace):
    r = scsitrace.analyze(trace)
    text = repr(r)
    assert "\n" not in text and len(text) < 480       # one line naming every table (about 20)
    assert f"{r.summary['ios_completed']} I/Os completed" in text
    assert r.layer in text and trace.name in text
    assert all(name in text for name in r.tables)
    profiles = request.PROFILES[r.layer]              # the profiles the request checks are the layer's
    assert set(r.analysis.category_order) <= set(profiles) and r.summary["profile"] == profiles[0]


@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_ios_frame_is_what_analyze_ios_writes(trace, tmp_path):
    out = tmp_path / "ios.parquet"
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["analyze", str(trace), "--ios", str(out)]) == 0
    written = pl.read_parquet(out)
    r = scsitrace.analyze(trace)
    assert "device_id" in r.ios.columns
    assert r.ios.columns == written.columns
    assert r.ios.schema == written.schema
    assert r.ios.height == written.height > 0
    assert r.ios.equals(written)


@pytest.mark.parametrize("keywords, named", [
    ({"io_size": -5}, "io_size"), ({"io_size": "abc"}, "io_size"), ({"io_size": 1e30}, "io_size"),
    ({"io_size": True}, "io_size"), ({"settle_ns": [1, 2]}, "settle_ns"), ({"settle_ns": -1}, "settle_ns"),
    ({"active_low": 1}, "active_low"), ({"data_polarity": "sideways"}, "data_polarity"),
    ({"route": "carrier-pigeon"}, "route"), ({"target": "1"}, "target"), ({"lun": -1}, "lun"),
    ({"window": "2:1"}, "window"), ({"window": 5}, "window"), ({"mapping": ["REQ"]}, "mapping"),
    ({"lenient": "yes"}, "lenient"), ({"format": "nope"}, "format"),
    ({"device": "9,9"}, "device"), ({"pid": "nobody"}, "pid"), ({"profile": "raid1990"}, "profile"), ({"profile": "nope"}, "profile"),
])
def test_bad_keyword_is_a_usage_error_naming_it(keywords, named):
    """Checked before the trace is read (type, range, choice) or by the layer (a device the
    trace does not have): a UsageError either way, naming the keyword, not the CLI flag."""
    with pytest.raises(UsageError) as info:
        scsitrace.analyze(BLOCK, **keywords)
    text = str(info.value)
    assert text.startswith(named) or f" {named} " in text or f"{named}=" in text, text
    assert "--" not in text, text


def test_docs_example_runs(monkeypatch, capsys):
    """docs/api.md, every python block in order, from the repository root."""
    monkeypatch.chdir(REPO)
    text = (REPO / "docs/api.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 4
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/api.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == repr(namespace["r"])
    assert "io_size must be positive, got -5" in out


def test_import_stays_cheap():
    """`import scsitrace` imports no analysis (the API module loads on first use)."""
    code = "import sys, scsitrace; print('scsitrace.api' in sys.modules, 'polars' in sys.modules)"
    import subprocess
    import sys
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout.split()
    assert got == ["False", "False"]
