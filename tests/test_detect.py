"""Format detection (parsers.sniffing_order): a head without a NUL byte is not offered to the
formats that read only binary files (their modules stay unimported), a head with one is
offered to the binary formats first. On every fixture, every real capture and every hostile
case that picks what sniffing every format in registry order picks; a capture whose payload
holds a line of a text log is that capture."""
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
import gen_usbmon  # noqa: E402

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


@pytest.mark.parametrize("line", [b"\n12@345.678:lsi_reg_read addr=0x0 val=0x0\n",      # qemu_lsi
                                  b"\nsd 2:0:0:0: scsi_dispatch_cmd_start: host_no=2\n",  # scsilog
                                  b"\nioctl(3, SG_IO, {interface_id='S'}) = 0\n"])        # sgio
def test_a_capture_holding_a_log_line_is_the_capture(tmp_path, line):
    """A USB capture of a write whose data is a text log's line: usbmon, not that log."""
    out = gen_usbmon.Event(t_us=10, urb_id=1, ev="S", xfer=3, ep=0x02, status=-115, length=len(line), data=line)
    done = gen_usbmon.Event(t_us=20, urb_id=1, ev="C", xfer=3, ep=0x02, status=0, length=len(line))
    path = tmp_path / "capture.pcap"
    gen_usbmon.write_pcap(path, [out, done])
    assert line in path.read_bytes()
    assert any(parsers.module(fmt).sniff(path.read_bytes()) for fmt in ("qemu_lsi", "scsilog", "sgio"))
    assert parsers.detect(str(path)) == "usbmon"


def small_pcap(directory: Path) -> str:
    path = directory / "small.pcap"
    gen_usbmon.write_pcap(path, gen_usbmon.traffic(seed=1, repeats=1))
    return str(path)


@pytest.mark.parametrize("trace, fmt", [("fixtures/captured/usb_seqwrite32k_logged/dmesg-scsi.txt", "scsilog"),
                                        ("fixtures/examples/table3-slice.ancot", "ancot"),
                                        ("fixtures/captured/usb_bufread32k/usbmon.txt", "usbmon"),
                                        (small_pcap, "usbmon")])
def test_sniffing_loads_no_record_declarations_or_binary_only_readers(tmp_path, trace, fmt):
    """Start-up: detect() imports no construct (record declarations load when a record is
    read) and no binary-only format's module: a text file is not offered to them, a usbmon
    capture meets usbmon first (a fresh process)."""
    import subprocess
    path = trace(tmp_path) if callable(trace) else str(ROOT / trace)
    probe = ("import sys\nfrom scsitrace import parsers\n"
             f"print(parsers.detect({path!r}))\n"
             "print(' '.join(m for m in sys.modules if m == 'construct' or m.startswith('scsitrace.parsers.')))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == fmt
    loaded = set(out[1].split())
    assert "construct" not in loaded
    assert not loaded & {f"scsitrace.parsers.{parsers._MODULES[b]}" for b in parsers.BINARY_ONLY}
