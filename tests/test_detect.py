"""Format detection: the text shortcut (a head without a NUL byte is not offered to the
binary formats, whose modules then stay unimported) picks what sniffing every format in
registry order picks, on every fixture, every real capture and every hostile case."""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from scsitrace import parsers
from scsitrace.errors import ScsitraceError

sys.path.insert(0, str(Path(__file__).parent))
import gen_hostile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
REALDATA = ROOT.parent / "shared" / "realdata"


def every_format_in_order(path: str) -> str | None:
    """The reference: every sniffer, binary or not, in registry order (then suffixes)."""
    with open(path, "rb") as fh:
        head = fh.read(65536)
    for fmt in parsers.formats():
        if parsers.module(fmt).sniff(head):
            return fmt
    return next((fmt for fmt in parsers.formats() if path.endswith(tuple(parsers.module(fmt).SUFFIXES))), None)


def detected(path: str) -> str | None:
    try:
        return parsers.detect(path)
    except ScsitraceError:
        return None


def files(top: Path) -> list[Path]:
    return [p for p in sorted(top.rglob("*")) if p.is_file() and p.stat().st_size and "__pycache__" not in p.parts]


@pytest.fixture(scope="module")
def hostile_dir():
    directory = Path(tempfile.mkdtemp(prefix="scsitrace-detect-"))
    yield directory
    shutil.rmtree(directory, True)


def test_fixtures_detect_as_every_sniffer_in_order():
    paths = files(ROOT / "fixtures")
    assert len(paths) > 100
    assert [detected(str(p)) for p in paths] == [every_format_in_order(str(p)) for p in paths]


@pytest.mark.skipif(not REALDATA.exists(), reason="../shared/realdata is absent")
def test_real_captures_detect_as_every_sniffer_in_order():
    paths = [p for p in files(REALDATA) if p.stat().st_size < 1 << 30]
    assert [detected(str(p)) for p in paths] == [every_format_in_order(str(p)) for p in paths]


def test_hostile_cases_detect_as_every_sniffer_in_order(hostile_dir):
    cases = gen_hostile.build(hostile_dir)
    paths = sorted({c.path for c in cases.values() if Path(c.path).is_file() and Path(c.path).stat().st_size})
    assert len(paths) > 50
    assert [detected(p) for p in paths] == [every_format_in_order(p) for p in paths]
