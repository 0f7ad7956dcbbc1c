"""Wrong or empty input (issue 17, point 7): a trace of a device kind a format does not read
is not taken for it; a file with no records of its layer is exit 2, said in the layer's
words; compare of two layers says so."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from scsitrace.cli import main

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"


@pytest.mark.parametrize("case, kind", [("uas_seqread32k", "USB Attached SCSI (UAS) device"),
                                        ("usb_seqwrite32k", "USB mass-storage (BOT) device")])
def test_a_qemu_usb_trace_is_not_taken_for_the_lsi_controller(tmp_path, case, kind, capsys):
    trace = CAPTURED / case / "qemu-trace.txt"   # real: QEMU -trace 'usb_*' 'scsi_*' of a USB disk
    assert main(["analyze", str(trace)]) == 2
    err = capsys.readouterr().err
    assert kind in err and "not of the LSI 53C895A controller" in err and err.count("\n") == 1
    assert main(["convert", str(trace), "-o", str(tmp_path / "t.parquet")]) == 2
    assert kind in capsys.readouterr().err


def test_crosslayer_still_reads_the_usb_device_model(capsys):
    assert main(["crosslayer", str(CAPTURED / "uas_seqread32k"), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "device" in doc["layers"]


def test_the_lsi_trace_of_the_same_rig_still_analyses(capsys):
    lsi = next(p for p in sorted(CAPTURED.glob("lsi_*/qemu-trace.txt")))
    assert main(["analyze", str(lsi), "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["ios_completed"] > 0


@pytest.mark.parametrize("name, text, fmt, says", [
    # a dmesg of a boot without SCSI logging: kernel lines, a disk attached, no command
    ("dmesg.txt", "[    0.000000] Linux version 6.1.0\n[    1.200000] sd 2:0:0:0: [sda] 131072 512-byte "
     "logical blocks: (67.1 MB/64.0 MiB)\n[    1.300000] sd 2:0:0:0: [sda] Attached SCSI disk\n",
     "auto", "no SCSI command records found"),
    ("header-only.ancot", "# ancot-text v1\n# tick_ns: 50\n# signals: BSY SEL ATN RST MSG C/D I/O\n",
     "ancot", "no bus transitions found"),
    # blkparse's closing report without the event lines before it
    ("report-only.blkparse", "CPU0 (sda):\n Reads Queued:           0,        0KiB\n"
     "Total (sda):\n Reads Queued:           0,        0KiB\n", "blkparse", "no block trace events found"),
    ("keyboard.usbmon", "ffff8881 3575914555 S Ii:1:002:1 -115:8 8 <\n"
     "ffff8881 3575922675 C Ii:1:002:1 0:8 8 = 00000400 00000000\n", "usbmon", "no USB mass-storage commands found"),
])
def test_no_records_of_the_layer_is_exit_2(tmp_path, capsys, name, text, fmt, says):
    p = tmp_path / name
    p.write_text(text)
    assert main(["analyze", str(p), "--format", fmt]) == 2
    err = capsys.readouterr().err
    assert says in err and str(p) in err and err.count("\n") == 1
    assert "Traceback" not in err


def test_compare_of_two_layers_says_so(capsys):
    a, b = CAPTURED / "uas_seqread32k" / "ftrace.txt", CAPTURED / "uas_seqread32k" / "usbmon.txt"
    assert main(["compare", str(a), str(b)]) == 2
    err = capsys.readouterr().err
    assert "scsilog trace" in err and "usb trace" in err and "one layer" in err


def test_notes_use_the_layers_own_words(capsys):
    """A kernel log has no REQ/ACK handshakes to speak of: its bandwidth note says what it lacks."""
    assert main(["analyze", str(CAPTURED / "uas_seqread32k" / "ftrace.txt"), "--json", "-"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("bandwidth unknown" in n for n in notes)
    assert not any("REQ/ACK" in n or "target" in n.lower() for n in notes), notes


def test_sg_log_bandwidth_note_names_its_source(capsys):
    sg = CAPTURED / "sg" / "lsi_sg_tools" / "dd_4k.strace.txt"
    assert main(["analyze", str(sg), "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["data_bytes"] > 0 and "SG_IO" in doc["notes"][-1]


def test_lenient_keeps_a_file_of_bad_records_with_a_warning(tmp_path, capsys):
    p = tmp_path / "junk.blkparse"
    p.write_text("8,0 0 1 x 1 Q R 0 + 8 [dd]\n")   # a blkparse line whose time is not a number
    assert main(["analyze", str(p), "--format", "blkparse"]) == 2
    capsys.readouterr()
    assert main(["analyze", str(p), "--format", "blkparse", "--lenient", "--json", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["records"]["skipped"] == 1
    assert any(n.startswith("warning: no block trace events found") for n in doc["notes"])
