"""The hostile corpus (tests/gen_hostile.py) through the CLI, strict and lenient: the error
contract of HACKING.md ("The error contract"), clause by clause.

Runs `scsitrace analyze --json -` in this process (`cli.main`, stdout and stderr captured,
SIGALRM as the hang detector), which keeps the whole corpus to seconds once the compiled
passes are cached.
"""
from __future__ import annotations

import atexit
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import gen_hostile  # noqa: E402
from clirun import run_cli  # noqa: E402

_DIR = Path(tempfile.mkdtemp(prefix="scsitrace-hostile-"))
atexit.register(shutil.rmtree, _DIR, True)
CASES = gen_hostile.build(_DIR)


def _analyze(case: gen_hostile.Case, lenient: bool):
    argv = ["analyze", case.path, "--format", case.fmt, "--json", "-"] + (["--lenient"] if lenient else [])
    return run_cli(argv + case.extra)


def check_message(case: gen_hostile.Case, err: str) -> None:
    """Exit 2: exactly one line, `scsitrace: FILE...`, with the line or offset when the case
    has one."""
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, f"not one line: {err!r}"
    msg = lines[0]
    assert msg.startswith("scsitrace: "), msg
    assert "Traceback" not in msg and "internal error" not in msg, msg
    name = Path(case.path).name
    assert name in msg or Path(case.path).parent.name in msg, f"the message names no file: {msg}"
    if case.where == "line":
        assert re.search(r":\d+: ", msg), f"no line number: {msg}"
    elif case.where == "offset":
        assert re.search(r"(: byte offset \d+: |:\d+: )", msg), f"no byte offset: {msg}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_case(name):
    case = CASES[name]
    status, out, err = _analyze(case, lenient=False)
    assert status in (0, 2), f"strict exit {status}: {err}"
    if status == 2:
        check_message(case, err)
    else:
        assert not err.strip(), err
    if case.bad:
        assert status == 2, f"strict accepted an out-of-range or forbidden input: {out[:300]}"
    status_l, out_l, err_l = _analyze(case, lenient=True)
    assert status_l in (0, 2), f"lenient exit {status_l}: {err_l}"
    if status_l == 2:
        check_message(case, err_l)
        return
    rec = json.loads(out_l)["records"]
    if case.records is not None:
        assert rec["read"] + rec["skipped"] == case.records, rec
    if case.bad:
        s = json.loads(out_l)
        flagged = rec["skipped"] or s["anomalies"]["count"]
        assert flagged, f"lenient accepted a bad input silently: {rec}"
    assert all(ex.count("\n") == 0 for ex in rec["skipped_examples"])


def test_corpus_covers_every_format_and_the_file_system():
    groups = {name.split("/")[0] for name in CASES}
    assert groups >= {"ancot", "vcd", "blkparse", "usbmon", "ftrace", "dmesg", "qemu_lsi", "blktrace",
                      "pcap", "parquet", "sgio", "sg3", "logic", "fs"}
    assert len(CASES) >= 240
