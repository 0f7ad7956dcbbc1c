"""One validation for every front end (issues 28.6 and 30.4, option values): the command
line, a batch manifest and the Python API build the same `AnalysisRequest`, whose checks
refuse a bad value with exit 2 and one line (CLI: naming the flag; manifest: naming the file,
the line and the entry) or a `UsageError` naming the keyword, before any trace is read and
before any output is written. Never exit 1 for a bad option value."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from clirun import run_cli
from scsitrace import api, request
from scsitrace.cli import build_parser
from scsitrace.commands.analyze import request_of
from scsitrace.request import DEFAULTS, AnalysisRequest, OptionError

REPO = Path(__file__).resolve().parents[1]
BLOCK = REPO / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
BUS = REPO / "fixtures/bus/cut-l1/trace.ancot"

CLI_CASES = [
    (["--io-size", "-5"], "--io-size"), (["--io-size", "0"], "--io-size"), (["--io-size", "abc"], "--io-size"),
    (["--settle-ns", "-100"], "--settle-ns"), (["--width", "0"], "--width"), (["--width", "-3"], "--width"),
    (["--window", "2:1"], "--window"), (["--window", "inf:"], "--window"), (["--window", "nan:1"], "--window"),
    (["--window", "1e300:"], "--window"), (["--map", "FOO"], "--map"), (["--data-polarity", "sideways"],
                                                                         "--data-polarity"),
    (["--route", "carrier-pigeon"], "--route"), (["--target", "-1"], "--target"), (["--lun", "-1"], "--lun"),
    (["--pid", ","], "--pid"), (["--format", "nope"], "--format"), (["--profile", "nope"], "--profile"),
    (["--device", "8,99999999"], "--device"), (["--pid", "99999999999999999999"], "--pid"),
]


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("scsitrace: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize("argv, flag", CLI_CASES, ids=lambda c: " ".join(c) if isinstance(c, list) else c)
def test_cli_refuses_a_bad_value_before_any_work(tmp_path, argv, flag):
    out = tmp_path / "s.json"
    ios = tmp_path / "ios.csv"
    status, stdout, err = run_cli(["analyze", str(BLOCK), *argv, "--json", str(out), "--ios", str(ios)])
    assert status == 2
    assert flag in _one_line(err)
    assert stdout == "" and not out.exists() and not ios.exists()


@pytest.mark.parametrize("argv, flag", [
    (["report", str(BUS), "-o", "{out}", "--stall-factor=-1"], "--stall-factor"),
    (["report", str(BUS), "-o", "{out}", "--stall-factor=nan"], "--stall-factor"),
    (["report", str(BUS), "-o", "{out}", "--stall-factor=0"], "--stall-factor"),
    (["crosslayer", str(REPO / "fixtures/captured/lsi_randread4k"), "--json", "{out}", "--block-size=-1"],
     "--block-size"),
    (["crosslayer", str(REPO / "fixtures/captured/lsi_randread4k"), "--json", "{out}", "--block-size=0"],
     "--block-size")])
def test_report_and_crosslayer_refuse_a_bad_value(tmp_path, argv, flag):
    out = tmp_path / "out"
    status, _, err = run_cli([a.replace("{out}", str(out)) for a in argv])
    assert status == 2 and flag in _one_line(err)
    assert not out.exists()


def test_regress_refuses_a_nan_tolerance():
    status, _, err = run_cli(["regress", str(REPO / "fixtures/bus/cut-l1/baseline.json"), "--tolerance", "percent=nan"])
    assert status == 2 and "--tolerance 'percent=nan'" in _one_line(err)


@pytest.mark.parametrize("command", [["regress", str(REPO / "fixtures/bus/cut-l1/baseline.json")], ["attribute", str(BUS)],
                                     ["compare", str(BUS), str(BUS)]])
def test_every_command_checks_width(command):
    status, stdout, err = run_cli([*command, "--width", "0"])
    assert status == 2 and "--width" in _one_line(err) and stdout == ""


@pytest.mark.parametrize("argv, flag", [(["--jobs", "-1"], "--jobs"), (["--timeout", "0"], "--timeout"),
                                        (["--timeout", "nan"], "--timeout"), (["--timeout", "inf"], "--timeout"),
                                        (["--io-size", "-1"], "--io-size"), (["--settle-ns", "-5"], "--settle-ns")])
def test_batch_refuses_a_bad_value_before_writing(tmp_path, argv, flag):
    out = tmp_path / "dataset"
    status, _, err = run_cli(["batch", str(BUS), "-o", str(out), *argv])
    assert status == 2 and flag in _one_line(err)
    assert not out.exists()


MANIFEST_CASES = [
    ("io_size = -1", "io_size"), ('io_size = "abc"', "io_size"), ("io_size = 1e30", "io_size"),
    ("io_size = true", "io_size"), ("settle_ns = -5", "settle_ns"), ("settle_ns = [1, 2]", "settle_ns"),
    ("active_low = 1", "active_low"), ('data_polarity = "sideways"', "data_polarity"),
    ('route = "carrier-pigeon"', "route"), ("lenient = 1", "lenient"), ('target = "x"', "target"),
    ('window = "1"', "window"), ('map = ["REQ"]', "map"), ('format = "nope"', "format"), ("lun = -2", "lun"),
    ("device = 8", "device"), ("pid = [1]", "pid"), ("profile = 3", "profile"),
]


@pytest.mark.parametrize("setting, key", MANIFEST_CASES, ids=[c[0] for c in MANIFEST_CASES])
@pytest.mark.parametrize("where", ["trace", "defaults"])
def test_manifest_refuses_a_bad_value_naming_file_line_and_entry(tmp_path, setting, key, where):
    trace = tmp_path / "t.ancot"
    trace.write_bytes(BUS.read_bytes())
    manifest = tmp_path / "m.toml"
    if where == "trace":
        text = f'[[trace]]\npath = "t.ancot"\n\n[[trace]]\npath = "t.ancot"\n{setting}\n'
        expected = f"{manifest}:4: [[trace]] #2 (t.ancot): {key} "
    else:
        text = f'[defaults]\n{setting}\n\n[[trace]]\npath = "t.ancot"\n'
        expected = f"{manifest}: [defaults]: {key} "
    manifest.write_text(text)
    out = tmp_path / "dataset"
    for command in (["batch", "--manifest", str(manifest), "-o", str(out)],
                    ["baseline", "--manifest", str(manifest), "-o", str(tmp_path / "b") + "/"]):
        status, _, err = run_cli(command)
        assert status == 2, err
        line = _one_line(err)
        assert expected in line, line
        assert "--" not in line.split(": ", 3)[-1]         # the manifest's key, not a flag
    assert not out.exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("keywords, named", [({"io_size": -1}, "io_size"), ({"settle_ns": "abc"}, "settle_ns"),
                                             ({"mapping": {"REQ": 3}}, "mapping"), ({"pid": True}, "pid")])
def test_api_refuses_before_reading(tmp_path, keywords, named):
    """A trace that does not exist: the option error comes first, so nothing was read."""
    with pytest.raises(OptionError) as info:
        api.analyze(tmp_path / "nothing-here", **keywords)
    assert str(info.value).startswith(f"{named} ")


def test_three_front_ends_make_one_request():
    argv = ["analyze", str(BUS), "--io-size", "4096", "--settle-ns", "300", "--data-polarity", "low",
            "--map", "REQ=D3", "--active-low", "all", "--window", "0:1", "--target", "2", "--lun", "0",
            "--profile", "scsi", "--lenient"]
    from_cli = request_of(build_parser("analyze").parse_args(argv))
    from_manifest = AnalysisRequest.from_options(str(BUS), {
        "io_size": 4096, "settle_ns": 300, "data_polarity": "low", "map": ["REQ=D3"], "active_low": ["all"],
        "window": "0:1", "target": 2, "lun": 0, "profile": "scsi", "lenient": True})
    from_api = api._request(str(BUS), mapping={"REQ": "D3"}, io_size=4096, settle_ns=300, data_polarity="low",
                            active_low="all", window="0:1", target=2, lun=0, profile="scsi", lenient=True,
                            format="auto", device=None, pid=None, route=None)
    assert from_cli == from_manifest == from_api
    assert AnalysisRequest.from_options(str(BUS), from_cli.options()) == from_cli     # options() round-trips


def test_defaults_live_in_one_place():
    """The CLI's flags default to the request's fields (settle_ns: None = the format's own, or
    DEFAULT_SETTLE_NS), and a command line without options makes the default request."""
    args = build_parser("analyze").parse_args(["analyze", "t"])
    assert request_of(args) == DEFAULTS.with_trace("t")
    assert args.format == DEFAULTS.format and args.data_polarity == DEFAULTS.data_polarity
    from scsitrace import core
    assert core.Options().settle_ns == request.DEFAULT_SETTLE_NS


def test_no_argparse_namespace_below_the_cli():
    """batch and the API analyse from requests: a job's request, not a namespace."""
    from scsitrace.batch import Job, job_request
    req = job_request(Job(0, str(BUS), "x", {"io_size": 4096}, detected="ancot"))
    assert isinstance(req, AnalysisRequest) and not isinstance(req, argparse.Namespace)
    assert (req.format, req.io_size) == ("ancot", 4096)


INTEGERS = {"io_size": 1, "settle_ns": 0, "target": 0, "lun": 0}
VALUES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(1 << 70), max_value=1 << 70),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(INTEGERS)), value=VALUES)
def test_integer_options_accept_exactly_the_integers_in_range(name, value):
    """Anything else is an OptionError naming the option, never a TypeError or ValueError."""
    ok = value is None or (isinstance(value, int) and not isinstance(value, bool)
                           and INTEGERS[name] <= value <= request.INT64_MAX)
    try:
        req = AnalysisRequest(trace="t", **{name: value})
    except OptionError as exc:
        assert not ok and exc.option == name and str(exc).startswith(request.flag(name))
    else:
        assert ok and getattr(req, name) == value


@settings(max_examples=300, deadline=None)
@given(lo=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)),
       hi=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6)))
def test_window_is_parsed_or_refused_never_crashes(lo, hi):
    for window in ((lo, hi), f"{'' if lo is None else lo}:{'' if hi is None else hi}"):
        try:
            got = request.parse_window(window)
        except OptionError as exc:
            assert exc.option == "window"
            continue
        start, end = got
        if isinstance(window, tuple):
            for side, ns in ((lo, start), (hi, end)):
                if ns is not None:
                    assert isinstance(ns, int) and math.isfinite(float(side))
        assert start is None or end is None or start <= end


def test_a_baseline_with_a_bad_stored_option_is_bad_input_of_the_baseline(tmp_path):
    """regress of one baseline and of a directory: exit 2, naming the baseline, never exit 1."""
    import json
    doc = json.loads((REPO / "fixtures/bus/cut-l1/baseline.json").read_text())
    doc["trace"] = str(REPO / "fixtures/bus/cut-l1" / doc["trace"])
    doc["options"]["io_size"] = -1
    path = tmp_path / "cut.baseline.json"
    path.write_text(json.dumps(doc))
    status, _, err = run_cli(["regress", str(path)])
    assert status == 2 and f"{path}: options: io_size must be positive, got -1" in _one_line(err)
    status, out, _ = run_cli(["regress", "--baselines", str(tmp_path), "-j", "0"])
    assert status == 2
    assert f"BAD         cut: {path}: options: io_size must be positive" in out


FIELDS = sorted(f for f in AnalysisRequest.__dataclass_fields__ if f != "trace")


@settings(max_examples=400, deadline=None)
@given(name=st.sampled_from(FIELDS), value=VALUES)
def test_any_value_of_any_option_is_accepted_or_an_option_error(name, value):
    """No TypeError, ValueError or OverflowError escapes the checks, whatever the type."""
    try:
        req = AnalysisRequest(trace="t", **{name: value})
    except OptionError as exc:
        assert exc.option == name
    else:
        assert AnalysisRequest.from_options("t", req.options()) == req      # what is accepted round-trips


@pytest.mark.parametrize("argv, flag", [
    (["--duration", "inf"], "--duration"), (["--duration", "nan"], "--duration"), (["--duration", "0"], "--duration"),
    (["--count", "0"], "--count"), (["--duration", "0.01", "--seed", "-1"], "--seed"),
    (["--duration", "0.01", "--glitch-at", "nan"], "--glitch-at"),
    (["--duration", "0.01", "--glitch-at", "-1"], "--glitch-at"),
    (["--duration", "0.01", "--reset-at", "1e300"], "--reset-at")])
def test_simulate_refuses_a_bad_value_before_writing(tmp_path, argv, flag):
    """(--duration inf, --seed -1 and --glitch-at nan were exit 1, --glitch-at -1 was accepted.)"""
    out = tmp_path / "s.ancot"
    status, _, err = run_cli(["simulate", "-o", str(out), *argv])
    assert status == 2 and flag in _one_line(err)
    assert not out.exists()
