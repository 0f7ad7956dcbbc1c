"""dmesg events (parsers/scsilog.py `_dmesg_events`: each event given the CDB line after it of
its device and tag, a failed command's second end dropped, what waits carried across block
edges) with the (device, tag) neighbours from Rust (`native/src/text/
scsilog_pair.rs:key_neighbours`), against the polars windows they replaced (tests/scsilog_dmesg_reference.py):
the same events, records and notes for any dmesg log, in blocks of any size."""
from __future__ import annotations

import polars as pl
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.parsers import scsilog
import scsilog_dmesg_reference as ref
from gen_scsilog import dmesg_lines
from test_scsilog_native import dmesg_line, read, same

TAIL = ["[    9.000000] sd 0:0:0:0: [sda] tag#1 Sense Key : Unit Attention [current] ",
        "[    9.000000] sd 0:0:0:0: [sda] Sense Key : Not Ready",
        "[    9.000000] sd 0:0:0:0: [sda] tag#1 FAILED Result: hostbyte=DID_ERROR driverbyte=DRIVER_OK cmd_age=0s",
        "[    9.000000] sd 0:0:1:0: [sdb] tag#2 Done: SUCCESS Result: hostbyte=DID_OK driverbyte=DRIVER_OK cmd_age=0s",
        "[    9.000000] sd 0:0:0:0: [sda] tag#1 CDB: Read(10) 28 00 00 00 00 08 00 00 08 00"]


@st.composite
def dmesg_log(draw) -> list[str]:
    """Commands' Send/CDB/Done/CDB lines on two devices and a few tags, interleaved with
    random SCSI logging lines, sense lines, FAILED ends and lines without a tag."""
    out = []
    for _ in range(draw(st.integers(1, 25))):
        pick = draw(st.integers(0, 9))
        if pick < 5:
            t = draw(st.integers(1, 10**6)) * 1000
            lines = dmesg_lines(t, draw(st.sampled_from(["start", "done", "done", "timeout"])),
                                draw(st.sampled_from([(0, 0, 0, 0), (0, 0, 1, 0)])), draw(st.sampled_from([1, 2, None])),
                                bytes.fromhex("28000000000800000800"))
            out += lines[:draw(st.integers(1, len(lines)))]
        elif pick < 7:
            out.append(draw(dmesg_line()))
        else:
            out.append(draw(st.sampled_from(TAIL)))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=dmesg_log(), strict=st.booleans(), chunk=st.one_of(st.none(), st.integers(40, 1500)))
def test_dmesg_events_equal_the_polars_windows_in_any_blocks(tmp_path, monkeypatch, lines, strict, chunk):
    path = tmp_path / "log.dmesg"
    path.write_text("\n".join(lines) + "\n")
    got = read(str(path), strict, chunk)
    with monkeypatch.context() as m:
        m.setattr(scsilog, "_dmesg_events", ref._dmesg_events)
        want = read(str(path), strict, chunk)
    same(got, want)
    whole = read(str(path), strict)
    # cut into blocks, the events read whole (where the log's lines are in time order: times count from
    # the first block's earliest event; an end held for the CDB line after it may come after a
    # later sense line of another device)
    if chunk is not None and not isinstance(got, str) and _stamps_in_order(lines):
        assert got[0].sort("pos").equals(whole[0].sort("pos"), null_equal=True)


def test_neighbours_are_the_lines_of_the_same_device_and_tag():
    from scsitrace._native import text
    rows = pl.DataFrame({"device": ["a", "b", "a", "a", "b"], "tag": ["1", None, "1", None, None],
                         "line_no": [1, 2, 3, 4, 5]})
    got = pl.DataFrame(text.key_neighbours(rows, ["device", "tag"]))
    assert got["prev"].to_list() == [None, None, 0, None, 1]
    assert got["next"].to_list() == [2, 4, None, None, None]


def _stamps_in_order(lines: list[str]) -> bool:
    """Whether the [seconds] stamps of the log's lines never go back (an end dropped as a failed
    command's second end still counts: its time may have set the origin)."""
    stamps = [float(ln[1:ln.index("]")]) for ln in lines if ln.startswith("[") and "]" in ln
              and ln[1:ln.index("]")].strip().replace(".", "", 1).isdigit()]
    return stamps == sorted(stamps)
