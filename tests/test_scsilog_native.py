"""The kernel-log reader's Rust scan (native/src/text/scsilog.rs) against the Python reader it
stands in for: on any set of lines (the kernel's ftrace events and dmesg SCSI logging lines
in every shape the patterns allow, those lines damaged byte by byte, ftrace's counters, other
text), the capture is the same as the regex reader's (events, records read and skipped, the
examples, notes, meta) or the same error, whatever the block size; and the Rust result is the
same whatever the cut of a block into parts (the threads)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.parsers import scsilog
from scsitrace import parsers
from scsitrace._native import text as native_text
from scsitrace.errors import BadInput

from gen_scsilog import RESULT, dmesg_lines
from damage import damaged

ALPHABET = " -:=()[]0a9Zé\t"   # what a damaged line may have in place of a byte


class _PythonOnly:
    """The Rust scan declining every block: the reader's Python path reads every line."""
    KINDS = native_text.KINDS

    calls = 0

    @staticmethod
    def ftrace_block(buf, parts=None):
        _PythonOnly.calls += 1
        return None


@st.composite
def ftrace_event(draw) -> str:
    """An ftrace event line in the shapes the kernel and trace-cmd print, and a few the pattern
    allows besides (tgid column, no flags, leading zeros, no driver_tag, big numbers)."""
    task = draw(st.sampled_from(["kworker/0:1H", "<idle>", "dd", "kworker/u8:2-events", "a b", "x-1"]))
    pid = draw(st.sampled_from(["44", "0", "12345"]))
    tgid = draw(st.sampled_from(["", "(   44) ", "(-------) "]))
    flags = draw(st.sampled_from(["..... ", "d.h2. ", "dNs. ", "", "toolong "]))
    whole = draw(st.sampled_from(["1", "000017", "9223372035", "9223372036", "99999999999999999999"]))
    frac = draw(st.sampled_from(["000009", "5", "1234567891", "0"]))
    kind = draw(st.sampled_from(["start", "done", "error", "timeout", "other"]))
    num = st.sampled_from(["0", "7", "007", "4294967295", "4294967296", "9223372036854775807",
                           "9223372036854775808", "99999999999999999999"])
    host, channel, id_, lun = (draw(num) for _ in range(4))
    tag = draw(st.sampled_from([" driver_tag=5", " driver_tag=-1", " driver_tag=2147483648",
                                " driver_tag=x", "", " driver_tag=12 driver_tag=3"]))
    raw = draw(st.sampled_from(["28 00 00 00 08 00 00 00 40 00", "12 00 00 00 24 00", "0", "", " ", "2A 00",
                                "00 00 00 00 00 00"]))
    name = draw(st.sampled_from(["READ_10", "TEST_UNIT_READY", "x", "UNKNOWN lba=5 txlen=8"]))
    tail = draw(st.sampled_from(["", f" result=({RESULT['GOOD']})", f" result=({RESULT['CHECK CONDITION']})",
                                 " rtn=4181", " rtn=-1", " rtn=99999999999999999999", " result=()",
                                 " result=(host=host=X status=SAM_STAT_TASK_SET_FULL)", " rtn=5 result=(x)",
                                 " result=(unclosed", "  ", " trailing"]))
    sp = draw(st.sampled_from([" ", "  ", "\t"]))
    return (f"  {task}-{pid}{sp}{tgid}[001]{sp}{flags} {whole}.{frac}:{sp}scsi_dispatch_cmd_{kind}:{sp}"
            f"host_no={host} channel={channel} id={id_} lun={lun} data_sgl=1 prot_op=SCSI_PROT_NORMAL{tag}"
            f" scheduler_tag=0 cmnd=({name} raw={raw}){tail}")


OTHER = ["# tracer: nop", "#", "# entries-in-buffer/entries-written: 10/12   #P:2", "CPU:1 [LOST 3 EVENTS]",
         "  dd-1 [000] ..... 1.000000: block_rq_issue: 8,0 R 4096 () 0 + 8 [dd]", "",
         "[    1.000000] scsi 0:0:0:0: scsi scan: INQUIRY pass 1 length 36", "plain text", "caf\u00e9 Send:",
         "sd 0:0:0:0: [sda] tag#1 Send: scmd 0x0", "[    2.000000] usb 1-1: new device", "\x00 NUL"]


DMESG_TEXT = ["Send: scmd 0x00000000c37893e6", "Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s",
              "FAILED Result: hostbyte=DID_ERROR driverbyte=DRIVER_OK cmd_age=0s",
              "Done: TIMEOUT Result: hostbyte=DID_TIME_OUT driverbyte=DRIVER_OK cmd_age=30s",
              "Done: ADD_TO_MLQUEUE Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s",
              "CDB: Read(10) 28 00 00 00 00 08 00 00 08 00", "CDB: Read(10): 28 00 00 00 00 08 00 00 08 00  ",
              "CDB: Test Unit Ready 00 00 00 00 00 00", "CDB: Read(10) 28 00 00", "CDB: Write(10) 2A 00 00 00 00 08 00 00 08 00",
              "CDB: Write(10) 2a 00 00 00 00 08 00 00 08 0", "CDB: Inquiry 12 01 00 00 24 00 x", "CDB:28 00 00 00 00 00",
              "timing out command, waited 30s", "Sense Key : Unit Attention [current] ", "Sense Key: Not Ready",
              "Sense Key  : Illegal Request [current] [descriptor] ", "Sense Key x", "Add. Sense: Power on, reset",
              "Done: SUCCESS Result: hostbyte=DID_OK FAILED"]


@st.composite
def dmesg_line(draw) -> str:
    """A line of the kernel's SCSI logging as dmesg (and syslog) prints it, in the shapes the
    pattern allows and a few it does not."""
    stamp = draw(st.sampled_from(["[    1.000000]", "[12345.5]", "[9223372036.0]", "[9223372035.999999999]", "[   1.]",
                                  "[ 1.000001 ]", "<6>[    2.000000]", "Nov 28 00:37:43 host kernel: [    3.000000]",
                                  "[    4.000000]", "[    5.000000]", "    [    6.000000]"]))
    driver = draw(st.sampled_from(["sd", "sd", "sr", "scsi", "osst", "ch", "sdx", "usb"]))
    small = st.sampled_from(["0", "1", "2"])
    num = st.one_of(small, small, st.sampled_from(["007", "4294967295", "4294967296", "1084113024",
                                                   "9223372036854775807", "9223372036854775808"]))
    dev = ":".join(draw(num) for _ in range(4))
    name = draw(st.sampled_from(["[sda] ", "[sda] ", "", "[sd_a] ", "[s-a] ", "[] "]))
    sp = draw(st.sampled_from(["", "", " ", "  "]))
    tag = draw(st.sampled_from(["tag#3 ", "tag#1 ", "", "tag#2147483647 ", "tag#2147483648 ", "tag# ", "tag#007 ",
                                "tag#1x "]))
    return f"{stamp} {driver} {dev}: {name}{sp}{tag}{draw(st.sampled_from(DMESG_TEXT))}"


@st.composite
def log_lines(draw) -> list[str]:
    out = []
    for _ in range(draw(st.integers(1, 30))):
        pick = draw(st.integers(0, 13))
        if pick < 5:
            out.append(draw(ftrace_event()))
        elif pick < 7:
            out.append(draw(damaged(draw(ftrace_event()), ALPHABET)))
        elif pick < 10:
            out.append(draw(dmesg_line()))
        elif pick < 11:
            out.append(draw(damaged(draw(dmesg_line()), ALPHABET)))
        elif pick < 12:
            t = draw(st.integers(1, 10**6)) * 1000
            out += dmesg_lines(t, draw(st.sampled_from(["start", "done", "timeout"])), (0, 0, 0, 0), 3,
                               bytes.fromhex("2800000000080000000800"[:20]))
        else:
            out.append(draw(st.sampled_from(OTHER)))
    return out


def read(path: str, strict: bool, chunk: int | None = None):
    """(events, records, notes, meta) of the log, or its error line."""
    opts = {"chunk_bytes": chunk} if chunk else {}
    try:
        cap = parsers.parse(path, "scsilog", strict=strict, **opts)
        ev = cap.frames["events"]
    except BadInput as exc:
        return str(exc)
    return ev, cap.records.as_json(), list(cap.notes), dict(cap.meta)


def same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a[0].equals(b[0], null_equal=True)
    assert a[1:] == b[1:]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=log_lines(), strict=st.booleans(), end=st.sampled_from(["\n", "\r\n"]), last=st.booleans(),
       chunk=st.one_of(st.none(), st.integers(40, 2000)))
def test_rust_scan_reads_as_the_python_reader(tmp_path, monkeypatch, lines, strict, end, last, chunk):
    """Whole, or in blocks of a few lines (what waits across a block edge is the reader's)."""
    path = tmp_path / "log.ftrace.txt"
    path.write_bytes((end.join(lines) + (end if last else "")).encode())
    fast = read(str(path), strict, chunk)
    with monkeypatch.context() as m:
        m.setattr(scsilog, "_native_text", lambda: _PythonOnly)
        calls = _PythonOnly.calls
        slow = read(str(path), strict, chunk)
        assert _PythonOnly.calls > calls or not path.stat().st_size   # an empty file has no block to scan
    same(fast, slow)


@settings(max_examples=60, deadline=None)
@given(lines=log_lines(), parts=st.integers(2, 9))
def test_any_cut_into_parts_gives_the_same_scan(lines, parts):
    buf = np.frombuffer(("\n".join(lines) + "\n").encode(), dtype=np.uint8)
    whole, cut = native_text.ftrace_block(buf, 1), native_text.ftrace_block(buf, parts)
    fields = [k for k in dir(type(whole)) if not k.startswith("_")]
    assert "d_tag" in fields and "fb_idx" in fields and "fields" in fields
    for key in fields:
        a, b = getattr(whole, key), getattr(cut, key)
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b), key
        elif type(a).__name__ == "Columns":
            assert pl.DataFrame(a).equals(pl.DataFrame(b)), key
        else:
            assert a == b, key


def test_dmesg_logs_read_as_the_python_reader_in_blocks_of_any_size(tmp_path, monkeypatch):
    """A dmesg log of every kind of SCSI logging line (commands, failed commands logged twice,
    timeouts, completions with sense lines, scans, other kernel lines) cut in the scan and read
    by the Python reader alone give the same capture, whole or in blocks of a few lines."""
    from gen_scsilog import completions_log, dmesg_text
    cdb = bytes.fromhex("28000000000800000800")
    ev = [(1000 * i, ["start", "done", "timeout"][i % 3], (0, 0, i % 3, 0), i % 5, cdb, ["GOOD", "CHECK CONDITION"][i % 7 == 0])
          for i in range(60)]
    cmds = [(10**6 + 1000 * i, (0, 0, i % 2, 1084113024), i % 4, cdb, ["SUCCESS", "ADD_TO_MLQUEUE"][i % 5 == 0],
             [None, "Unit Attention", "Not Ready"][i % 3]) for i in range(40)]
    path = tmp_path / "k.dmesg"
    path.write_text(dmesg_text(ev) + completions_log(cmds, scan=2, other=True))
    for chunk in (None, 200, 1000):
        fast = read(str(path), True, chunk)
        assert not isinstance(fast, str) and fast[0].height > 100
        with monkeypatch.context() as m:
            m.setattr(scsilog, "_native_text", lambda: _PythonOnly)
            same(fast, read(str(path), True, chunk))


def test_the_kernels_lines_are_decoded_in_rust_and_the_rest_handed_back():
    """The common shapes never reach the Python reader; others always do (so nothing the
    reader counts or reports can be lost in the scan)."""
    from gen_scsilog import ftrace_line
    ev = [ftrace_line(10**9 + k, kind, (0, 0, k, 0), k, bytes.fromhex("28000000000800000800"))
          for k, kind in enumerate(["start", "done", "error", "timeout"])]
    dmesg = ["[    1.000000] sd 0:0:0:0: [sda] tag#1 Send: x", "[    1.000001] sd 0:0:0:0: [sda] tag#1 CDB: R 00 00 00 00 00 00",
             "[    1.000002] sd 0:0:0:0: [sda] tag#1 Add. Sense: Power on"]
    other = ["# entries-in-buffer/entries-written: 10/12   #P:2", "sd 0:0:0:0: [sda] tag#1 Send: x",
             "[    1.000001] sd 0:0:0:0: [sda] tag#1 CDB: R 00 00 00 00 00", ev[0].replace("raw=28", "raw=2"), ev[0] + " é"]
    found = native_text.ftrace_block(np.frombuffer("\n".join(ev + ["boring", *dmesg, *other]).encode(), dtype=np.uint8))
    assert found.lines == len(ev) + 1 + len(dmesg) + len(other)
    assert list(found.idx) == [0, 1, 2, 3]
    assert [native_text.KINDS[k] for k in found.kind] == ["start", "done", "error", "timeout"]
    assert list(found.d_idx) == [5, 6]
    assert [found.d_kinds[k] for k in found.d_kind] == ["Send:", "CDB:"]
    assert pl.DataFrame(found.d_cdb_hex)["value"][-1].endswith("000000000000")
    assert list(found.fb_idx) == [8, 9, 10, 11, 12]
    assert bytes(found.fb_text).decode().endswith(other[-1])


@pytest.mark.parametrize("bad", [b"\xff\xfe not text\n", b"ok\n\xc3\n"])
def test_a_block_that_is_not_utf8_goes_to_the_python_reader(bad):
    assert native_text.ftrace_block(np.frombuffer(bad, dtype=np.uint8)) is None


def test_decoded_events_have_the_declared_columns(tmp_path):
    from gen_scsilog import ftrace_text
    path = tmp_path / "x.ftrace.txt"
    path.write_text(ftrace_text([(10**9, "start", (0, 0, 0, 0), 1, bytes(6)),
                                 (2 * 10**9, "done", (0, 0, 0, 0), 1, bytes(6), "CHECK CONDITION")]))
    ev = parsers.parse(str(path), "scsilog").frames["events"]
    assert ev.schema == pl.Schema(scsilog.EVENTS)
    assert ev["status"].to_list() == [None, "CHECK CONDITION"] and ev["host_byte"].to_list() == [None, "DID_OK"]
    assert ev["t_ns"].to_list() == [0, 10**9] and ev["pos"].to_list() == [3, 4]
