"""parsers/qemu_lsi.py: QEMU's LSI 53C895A trace -> bus-level Capture -> bus analysis.

The committed captures (fixtures/captured/lsi_*) are checked against an independent record
of the same commands: the guest kernel's ftrace `scsi_dispatch_cmd_start` lines, which carry
the raw CDB the driver sent. Synthetic traces (written by `qemu_trace_lines` below, in the
event shapes QEMU 7.2 prints) drive the property tests and the hostile inputs.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import core, parsers, scsi
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.parsers import qemu_lsi

REPO = Path(__file__).resolve().parents[1]
CAPTURED = REPO / "fixtures" / "captured"
LSI_CASES = sorted(p.name for p in CAPTURED.glob("lsi_*") if (p / "qemu-trace.txt").exists())
DISPATCH_RE = re.compile(r"scsi_dispatch_cmd_start: host_no=(\d+) .*?raw=([0-9a-f ]+)\)")


@lru_cache(maxsize=None)
def analyse_case(case: str) -> "core.Analysis":
    """Each committed case is analysed once per test session (a 2 MiB case takes about 1 s)."""
    return analyse(CAPTURED / case / "qemu-trace.txt")


def analyse(path) -> "core.Analysis":
    cap = parsers.parse(str(path))
    return core.analyze(cap, core.Options(settle_ns=cap.meta["settle_ns"]))


def ftrace_cdbs(case_dir: Path, host_no: int = 0) -> list[bytes]:
    """Raw CDBs the guest's SCSI midlayer dispatched to the LSI host, in order."""
    out = []
    for line in (case_dir / "ftrace.txt").read_text().splitlines():
        m = DISPATCH_RE.search(line)
        if m and int(m.group(1)) == host_no:
            out.append(bytes.fromhex(m.group(2)))
    return out


# ---------------------------------------------------------------- committed captures

def test_captured_lsi_cases_exist():
    assert len(LSI_CASES) >= 4, f"expected the four LSI cases, found {LSI_CASES}"


@pytest.mark.parametrize("case", LSI_CASES)
def test_sniffed_as_qemu_lsi(case):
    assert parsers.detect(str(CAPTURED / case / "qemu-trace.txt")) == "qemu_lsi"


@pytest.mark.parametrize("case", LSI_CASES)
def test_bus_ios_are_the_kernels_commands(case):
    """Every command the kernel dispatched appears on the emulated bus, in order, with the
    same opcode, LBA and length, completes GOOD, and moves length x 512 bytes."""
    a = analyse_case(case)
    cdbs = ftrace_cdbs(CAPTURED / case)
    assert cdbs, "no dispatches in the ftrace file"
    kernel = [scsi.decode_cdb(c) for c in cdbs]
    ios = a.ios.sort("start_ns")
    assert ios.height == len(kernel) == a.ios_completed
    assert ios["opcode"].to_list() == [k["opcode"] for k in kernel]
    assert ios["lba"].to_list() == [k["lba"] for k in kernel]
    assert ios["blocks"].to_list() == [k["blocks"] for k in kernel]
    assert ios["status"].to_list() == ["GOOD"] * ios.height
    assert ios["data_bytes"].to_list() == [k["blocks"] * 512 for k in kernel]
    assert a.anomalies.height == 0


@pytest.mark.parametrize("case", LSI_CASES)
def test_rebuilt_cdb_equals_raw_cdb(case):
    """The COMMAND bytes rebuilt from QEMU's decoded events equal the kernel's raw CDB."""
    cap = parsers.parse(str(CAPTURED / case / "qemu-trace.txt"))
    runs = cap.frames["phase_runs"].filter(pl.col("phase") == "COMMAND")
    rebuilt = [bytes(b) for b in runs["info_bytes"].to_list()]
    assert rebuilt == ftrace_cdbs(CAPTURED / case)


@pytest.mark.parametrize("case", LSI_CASES)
def test_segments_tile_and_timing_note(case):
    a = analyse_case(case)
    seg = a.segments.sort("start_ns")
    assert (seg["start_ns"].slice(1) == seg["end_ns"].slice(0, seg.height - 1)).all()
    assert int((seg["end_ns"] - seg["start_ns"]).sum()) == a.elapsed_ns
    assert any("not a real SCSI bus" in n for n in a.notes)


USB_CASES = sorted(p.name for p in CAPTURED.glob("u*_*") if (p / "qemu-trace.txt").exists())


@pytest.mark.parametrize("case", USB_CASES)
def test_usb_device_commands_are_the_kernels(case):
    """QEMU's usb-storage/UAS model received the commands the kernel dispatched, in order
    (USB host numbers: the LSI is host 0, the USB disks come after)."""
    cap = parsers.parse(str(CAPTURED / case / "qemu-trace.txt"))
    dev = cap.frames["device_commands"]
    kernel = []
    for line in (CAPTURED / case / "ftrace.txt").read_text().splitlines():
        m = DISPATCH_RE.search(line)
        if m and int(m.group(1)) != 0:
            kernel.append(scsi.decode_cdb(bytes.fromhex(m.group(2))))
    assert dev.height == len(kernel) > 0
    assert dev["opcode"].to_list() == [k["opcode"] for k in kernel]
    rw = dev.filter(pl.col("lba").is_not_null())
    assert rw["lba"].to_list() == [k["lba"] for k in kernel if k["lba"] is not None]
    assert rw["blocks"].to_list() == [k["blocks"] for k in kernel if k["lba"] is not None]
    assert (dev["end_ns"] >= dev["start_ns"]).all()
    assert cap.frames["phase_runs"].height == 0


def test_disconnects_follow_the_workload():
    """Reads disconnect after the command (the disk model queues them) and reselect for
    data; the emulated writes take their data at once and never disconnect."""
    reads = analyse_case("lsi_seqread32k").ios
    writes = analyse_case("lsi_seqwrite32k").ios
    assert (reads["disconnects"] == 1).all() and (reads["connections"] == 2).all()
    assert (writes["disconnects"] == 0).all() and (writes["connections"] == 1).all()


# ---------------------------------------------------------------- synthetic traces

def qemu_trace_lines(commands, t0_us: int = 1_795_000_000_000_000, pid: int = 4242) -> list[str]:
    """QEMU 7.2 log-backend lines for a list of (opcode, lba, sectors, tag, disconnect).

    The event sequence is the one the committed captures show for sym53c8xx on QEMU's
    lsi53c895a: selection with ATN, 8-byte MESSAGE OUT (IDENTIFY, SIMPLE QUEUE TAG, SDTR),
    COMMAND, optionally SAVE DATA POINTER + DISCONNECT and a reselection with IDENTIFY +
    SIMPLE QUEUE TAG, DATA in 4 KiB DMA chunks, STATUS GOOD, COMMAND COMPLETE, disconnect.
    """
    t = t0_us
    out = []

    def ev(name, text, step=3):
        nonlocal t
        t += step
        out.append(f"{pid}@{t // 1_000_000}.{t % 1_000_000:06d}:{name} {text}")

    for opcode, lba, sectors, tag, disconnect in commands:
        read = opcode in scsi.READ_OPS
        nbytes = sectors * 512
        qtag = 0x10000 | tag
        ev("lsi_execute_script_io_selected", "Selected target 0 ATN", 50)
        ev("lsi_execute_script_tc_compp", "Compare phase MSGOUT != MSGOUT")
        ev("lsi_do_msgout", "MSG out len=8")
        ev("lsi_do_msgout_select", "Select LUN 0")
        ev("lsi_do_msgout_simplequeue", f"SIMPLE queue tag=0x{tag:x}")
        ev("lsi_do_msgout_extended", "Extended message 0x1 (len 3)")
        ev("lsi_do_msgout_ignored", "SDTR (ignored)")
        ev("lsi_execute_script_tc_compp", "Compare phase CMD != CMD")
        ev("lsi_do_command", "Send command len=10")
        ev("scsi_req_parsed", f"target 0 lun 0 tag {qtag} command {opcode} dir {1 if read else 2} length {nbytes}")
        ev("scsi_req_parsed_lba", f"target 0 lun 0 tag {qtag} command {opcode} lba {lba}")
        kind = "READ Read" if read else "WRITE Write"
        ev(f"scsi_disk_dma_command_{kind.split()[0]}", f"{kind.split()[1]} (sector {lba}, count {sectors})")
        if disconnect:
            ev("lsi_add_msg_byte", "MSG IN 0x02")
            ev("lsi_add_msg_byte", "MSG IN 0x04")
            ev("lsi_queue_command", f"Queueing tag=0x{qtag:x}")
            ev("lsi_execute_script_tc_compp", "Compare phase MSGIN == MSGIN")
            ev("lsi_do_msgin", "Message in len=1 2")
            ev("lsi_do_msgin", "Message in len=1 1")
            ev("lsi_execute_script_io_disconnect", "Wait Disconnect")
            ev("lsi_wait_reselect", "Wait Reselect")
            ev("lsi_reselect", "Reselected target 0", 200)
            for b in (0x80, 0x20, tag):
                ev("lsi_add_msg_byte", f"MSG IN 0x{b:02x}")
            ev("lsi_transfer_data", f"Data ready tag=0x{qtag:x} len={nbytes}")
            ev("lsi_execute_script_tc_compp", "Compare phase MSGIN != MSGIN")
            ev("lsi_do_msgin", "Message in len=1 3")
            ev("lsi_do_msgin", "Message in len=2 2")
        else:
            ev("lsi_transfer_data", f"Data ready tag=0x{qtag:x} len={nbytes}")
        phase = "DIN" if read else "DOUT"
        ev("lsi_execute_script_tc_compp", f"Compare phase {phase} == {phase}")
        left = nbytes
        while left:
            chunk = min(4096, left)
            ev("lsi_do_dma", f"DMA addr=0x2ac9000 len={chunk}", 4)
            left -= chunk
        ev("lsi_command_complete", "Command complete status=0")
        ev("lsi_execute_script_tc_compp", "Compare phase STATUS == STATUS")
        ev("lsi_do_status", "Get status len=1 status=0")
        ev("lsi_add_msg_byte", "MSG IN 0x00")
        ev("lsi_execute_script_tc_compp", "Compare phase MSGIN == MSGIN")
        ev("lsi_do_msgin", "Message in len=1 1")
        ev("lsi_execute_script_io_disconnect", "Wait Disconnect")
    return out


COMMANDS = st.lists(st.tuples(
    st.sampled_from([0x28, 0x2A]), st.integers(0, 2**32 - 1), st.integers(1, 16),
    st.integers(0, 255), st.booleans()), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None)
@given(COMMANDS)
def test_synthetic_commands_round_trip(tmp_path_factory, commands):
    """Whatever commands the trace shows come back as bus I/Os with their fields."""
    commands = [(op, lba, n, tag, disc if op == 0x28 else False) for op, lba, n, tag, disc in commands]
    path = tmp_path_factory.mktemp("q") / "qemu-trace.txt"
    path.write_text("\n".join(qemu_trace_lines(commands)) + "\n")
    a = analyse(path)
    ios = a.ios.sort("start_ns")
    assert ios.height == len(commands) == a.ios_completed
    assert ios["opcode"].to_list() == [c[0] for c in commands]
    assert ios["lba"].to_list() == [c[1] for c in commands]
    assert ios["blocks"].to_list() == [c[2] for c in commands]
    assert ios["tag"].to_list() == [c[3] for c in commands]
    assert ios["data_bytes"].to_list() == [c[2] * 512 for c in commands]
    assert ios["disconnects"].to_list() == [int(c[4]) for c in commands]
    assert a.anomalies.height == 0


@given(st.sampled_from([0x08, 0x0A, 0x28, 0x2A, 0xA8, 0xAA, 0x88, 0x8A]),
       st.integers(0, 2**21 - 1), st.integers(1, 255))
def test_build_cdb_decodes_back(opcode, lba, blocks):
    cdb = bytes(qemu_lsi.build_cdb(None, opcode, lba, blocks, None))
    d = scsi.decode_cdb(cdb)
    assert (d["opcode"], d["lba"], d["blocks"]) == (opcode, lba, blocks)


# ---------------------------------------------------------------- hostile inputs

def _write(tmp_path, lines, name="qemu-trace.txt"):
    p = tmp_path / name
    p.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    return p


def test_line_without_timestamp_is_bad_input_with_line_number(tmp_path):
    """A trace written without -msg timestamp=on ("lsi_do_dma DMA ...") cannot be timed."""
    good = qemu_trace_lines([(0x28, 0, 8, 1, True)])
    p = _write(tmp_path, good[:5] + ["lsi_do_dma DMA addr=0x0 len=4096"] + good[5:])
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "qemu_lsi")
    assert exc.value.line == 6 and "timestamp" in str(exc.value)


def test_lenient_skips_and_counts_bad_lines(tmp_path):
    good = qemu_trace_lines([(0x28, 0, 8, 1, True), (0x2A, 64, 8, 2, False)])
    p = _write(tmp_path, good[:3] + ["garbage", "12@x:lsi_do_dma"] + good[3:])
    cap = parsers.parse(str(p), "qemu_lsi", strict=False)
    assert cap.records.skipped == 2 and cap.records.read == len(good)   # a bad line is skipped, not read
    assert any(":4:" in e for e in cap.records.examples)
    a = core.analyze(cap, core.Options(settle_ns=0))
    assert a.ios_completed == 2


def test_file_ending_inside_a_line_is_truncated(tmp_path):
    """The last line cut short (no newline, not a whole trace line) is "short", not "wrong"."""
    good = qemu_trace_lines([(0x28, 0, 8, 1, True), (0x2A, 64, 8, 2, False)])
    p = tmp_path / "qemu-trace.txt"
    p.write_text("\n".join(good) + "\n" + good[0][:9])
    with pytest.raises(TruncatedInput) as exc:
        parsers.parse(str(p), "qemu_lsi")
    assert exc.value.line == len(good) + 1
    cap = parsers.parse(str(p), "qemu_lsi", strict=False)
    assert cap.records.skipped == 1 and cap.records.read == len(good)   # the cut line: skipped and flagged
    assert cap.anomalies["kind"].to_list() == ["TRUNCATED RECORD"]
    assert core.analyze(cap, core.Options(settle_ns=0)).ios_completed == 2


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(qemu_trace_lines([(0x28, 5, 8, 3, True), (0x2A, 9, 1, 4, False)])),
                          st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40)),
                max_size=30))
def test_any_text_gives_bad_input_or_a_capture(tmp_path_factory, lines):
    """Strict: a Capture or a BadInput naming a line, nothing else. Lenient: always a
    Capture, and every line is read or skipped."""
    p = tmp_path_factory.mktemp("g") / "qemu-trace.txt"
    p.write_text("\n".join(x.replace("\r", " ") for x in lines) + "\n", encoding="utf-8")
    try:
        parsers.parse(str(p), "qemu_lsi")
    except BadInput as exc:
        assert exc.line is not None
    cap = parsers.parse(str(p), "qemu_lsi", strict=False)
    # blank = Unicode White_Space only (Python's isspace also takes the separators 0x1c-0x1f)
    lines_in_file = sum(1 for ln in p.read_text(encoding="utf-8").split("\n")
                        if any(not c.isspace() or c in "\x1c\x1d\x1e\x1f" for c in ln))
    assert cap.records.read + cap.records.skipped == lines_in_file
    tr = cap.transitions()
    assert (tr["t_ns"].diff().drop_nulls() >= 0).all()
    if tr.height:
        core.analyze(cap, core.Options(settle_ns=0))


def test_not_utf8_is_bad_input(tmp_path):
    good = qemu_trace_lines([(0x28, 0, 8, 1, True)])
    p = _write(tmp_path, good[:2] + [b"1@1.000001:lsi_do_dma \xff\xfe"] + good[2:])
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "qemu_lsi")
    assert exc.value.line == 3


def test_trace_without_lsi_events_says_so(tmp_path):
    p = _write(tmp_path, ["9@1795000000.000001:usb_msd_cmd_submit lun 0, tag 0xf, flags 0x00000080, len 10, data-len 32768"])
    cap = parsers.parse(str(p), "qemu_lsi")
    assert cap.frames["phase_runs"].height == 0
    assert any("no LSI bus activity" in n for n in cap.notes)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    from scsitrace.cli import main
    p = _write(tmp_path, ["12@1795000000.000001:lsi_do_dma DMA addr=0x0 len=4096", "not a trace line"])
    assert main(["analyze", str(p), "--format", "qemu_lsi"]) == 2
    assert ":2:" in capsys.readouterr().err


def test_sniff_rejects_other_text():
    assert not qemu_lsi.sniff(b"# ancot-text v1\n")
    assert not qemu_lsi.sniff(b"  dd-187 [001] .....  17.467851: block_bio_queue: 8,0 RS 0 + 64 [dd]\n")
    assert qemu_lsi.sniff(b"16602@1795334719.560232:lsi_do_msgout MSG out len=8\n")
