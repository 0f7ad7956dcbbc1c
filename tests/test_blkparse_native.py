"""blkparse text read by the compiled line scanner (parsers/_blkparse_native.py, Rust)
against the reference: the same file read by the regex route (`_decode` on every line, the
previous reader). On random line sets mixing good event lines of every form blkparse prints
(queue, remap, split, plug/unplug, completion errors, flush/FUA/zone RWBS) with lines at and
past each field's edge, comments, blanks, messages, stray bytes and a trailing summary, for
any block size: the same events, records, notes and names, or the same one-line error in
strict mode; and the scanner's columns do not depend on how many threads split a block."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace._native import text as native_text
from scsitrace.errors import BadInput
from scsitrace.block import events as block
from scsitrace.parsers import _blkparse_native as native, blkparse

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

GOOD = {   # field -> (good values, values at or past its edge and rare forms)
    "dev": (["8,0", "259,1", "8,16"], ["4095,1048575", "4096,0", "8,1048576", "8.0", "08,00"]),
    "cpu": (["0", "3"], ["4294967295", "4294967296", "x"]),
    "seq": (["1", "77"], ["4294967295", "4294967296", "99999999999999999999"]),
    "t": (["0.000000000", "12.345678901"], ["9223372035.999999999", "9223372036.000000000", "1.12345678", "1.1234567890"]),
    "pid": (["218", "0"], ["4294967296", "-1"]),
    "act": (["Q", "G", "I", "D", "C", "M", "F", "S", "R", "P", "U", "UT", "T", "X", "A", "B", "ZP", "ZU"],
            ["m", "q", "Zz", "QQQ", "1"]),
    "rwbs": (["R", "W", "WS", "RA", "FWFS", "FWS", "N", "D", "RM", "ZA", "FZRA", "ZRA", "WFS"], ["r", "W1", ""]),
    "rest": (["90624 + 8 [dd]", "90624 + 8 [0]", "90624 + 8 [65531]", "90624 + 8 [-5]", "90624 + 8",
              "90624 / 90632 [kworker/0:1]", "1000 + 8 <- (8,1) 200", "[swapper/0]", "[kworker] 3", "",
              "90624 + 8 [a b]", "90624 + 8 [a]b]"],
             ["90624 + 8388608", "90624 + 8388607", "9223372036854775808 + 8", "90624  + 8", "90624 + 8 [x",
              "1000 + 8 <- (4096,1) 200", "1000 + 8 <- (8,1)  200", "1000 + 8 <- (4294967296,1) 200", "[kw] 4294967296", "[kw] 9 9", "+ 8",
              "90624 + 8 [\u00e9]", "90624 + 8 [\x00]", "90624 + 8 [99999999999999999999]", "m N text"]),
}
LINES = [b"", b"   ", b"\t", b"# a comment", b"  #Maj,Mn CPU", b"garbage", b"\xff\xfe", b"\x00",
         b"  8,0    0        0     0.000000100     0  m   N cfq218 insert_request",
         b"  8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [d\xc3\xa9]",
         b"  8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [d\xff]"]
SUMMARY = (b"CPU0 (sda):\n Reads Queued:           1,        4KiB\t Writes Queued:           0,        0KiB\n"
           b"Total (sda):\n Reads Queued:           1,        4KiB\n\nThroughput (R/W): 4KiB/s / 0KiB/s\n"
           b"Events (sda): 42 entries\nSkips: 0 forward (0 -   0.0%)\n")


def _line(draw, edge: bool) -> bytes:
    chosen = draw(st.lists(st.sampled_from(sorted(GOOD)), min_size=1, max_size=2)) if edge else []
    v = {k: draw(st.sampled_from(bad if k in chosen else good)) for k, (good, bad) in GOOD.items()}
    pad = draw(st.sampled_from([" ", "  ", "\t"]))
    tail = draw(st.sampled_from(["", "", " ", "\r", " \t"]))
    return (f"{v['dev']:>5} {v['cpu']:>3}{pad}{v['seq']:>8} {v['t']:>14} {v['pid']:>5}  {v['act']:<2} "
            f"{v['rwbs']:>3} {v['rest']}".rstrip() + tail).encode()


@st.composite
def texts(draw):
    lines = [_line(draw, edge=draw(st.integers(0, 9)) == 0) for _ in range(draw(st.integers(0, 60)))]
    for extra in draw(st.lists(st.sampled_from(LINES), max_size=4)):
        lines.insert(draw(st.integers(0, len(lines))), extra)
    text = b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")
    if draw(st.booleans()):
        text += b"\n" + SUMMARY + b"\n".join(lines[:draw(st.integers(0, 3))])
    return text


def _outcome(path, strict: bool, block_bytes):
    try:
        cap = blkparse.parse(str(path), strict=strict, eager=True, block_bytes=block_bytes)
        cols = cap.columns["events"]
        return ({k: v.tolist() for k, v in cols.items()}, cap.frames["events"].to_dicts(), cap.records.as_json(),
                cap.notes, cap.frames["processes"].to_dicts(), cap.meta["messages"])
    except BadInput as exc:
        return str(exc), exc.line


def _by_regex(monkeypatch):
    monkeypatch.setattr(blkparse._Stream, "_native_blocks",
                        lambda self, state: self._regex_blocks(state, blkparse.EVENT, []))


@SETTINGS
@given(text=texts(), block_bytes=st.sampled_from([None, 200, 700, 4000]))
def test_native_equals_the_regex_route(tmp_path, text, block_bytes):
    path = tmp_path / "t.blkparse.txt"
    path.write_bytes(text)
    if blkparse.layout_of(str(path))[0] != blkparse.EVENT:
        return                                  # a custom layout: the regex route either way
    native = [_outcome(path, strict, block_bytes) for strict in (True, False)]
    with pytest.MonkeyPatch.context() as mp:
        _by_regex(mp)
        regex = [_outcome(path, strict, block_bytes) for strict in (True, False)]
    assert native == regex


@SETTINGS
@given(text=texts(), threads=st.integers(1, 5), first_line=st.integers(1, 10**6))
def test_scan_does_not_depend_on_threads(text, threads, first_line):
    buf = np.frombuffer(text, np.uint8)
    one, many = native_text.scan_blkparse(buf, 1, 1), native_text.scan_blkparse(buf, threads, first_line)
    shift = first_line - 1
    assert pl.DataFrame(one.events).with_columns(pl.col("position") + shift).equals(pl.DataFrame(many.events))
    assert pl.DataFrame(one.names).with_columns(pl.col("line") + shift).equals(pl.DataFrame(many.names))
    assert pl.DataFrame(one.other).with_columns(pl.col("line") + shift).equals(pl.DataFrame(many.other))
    assert one.newlines == many.newlines == text.count(b"\n")


def test_the_scanner_takes_the_common_lines():
    lines = [b"  8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [dd]",
             b"  8,0    0        2     0.000001000   218  G  RS 90624 + 8 [dd]",
             b"  8,0    0        3     0.000002000   218  P   N [dd]",
             b"  8,0    0        4     0.000003000   218  U   N [dd] 1",
             b"  8,0    0        5     0.000004000   218  D  RS 90624 + 8 [dd]",
             b"  8,0    0        6     0.000005000     0  C  RS 90624 + 8 [0]",
             b"  8,0    0        7     0.000006000   218  A   W 1000 + 8 <- (8,1) 200",
             b"  8,0    0        8     0.000007000   218  X   W 1000 / 1004 [dd]"]
    out = native_text.scan_blkparse(np.frombuffer(b"\n".join(lines), np.uint8), 2, 1)
    assert len(pl.DataFrame(out.other)) == 0 and len(pl.DataFrame(out.events)) == len(lines)


@settings(SETTINGS, max_examples=30)
@given(text=texts(), block_bytes=st.integers(40, 3000))
def test_any_block_boundaries_give_the_one_block_result(tmp_path, text, block_bytes):
    """Events, names, counts against the summary and sequence gaps are carried across blocks:
    a file cut into blocks anywhere reads as when read in one block (strict mode: a bad line
    fails either way; which is named first may differ, as a block's bytes are checked as
    UTF-8 before its lines are read)."""
    path = tmp_path / "t.blkparse.txt"
    path.write_bytes(text)
    if blkparse.layout_of(str(path))[0] != blkparse.EVENT:
        return
    assert _outcome(path, False, block_bytes) == _outcome(path, False, 1 << 20)
    cut, whole = _outcome(path, True, block_bytes), _outcome(path, True, 1 << 20)
    assert cut == whole or (len(cut) == len(whole) == 2 and isinstance(cut[1], int) and isinstance(whole[1], int))


ZONE_BITS = [0] + [block.TC[name] for name in block.ZONE_RWBS]
CATEGORIES = ("READ", "WRITE", "FLUSH", "SYNC", "AHEAD", "META", "DISCARD", "FUA")


@settings(max_examples=200, deadline=None)
@given(bits=st.lists(st.sampled_from(CATEGORIES), unique=True), zone=st.sampled_from(ZONE_BITS),
       letter=st.sampled_from(sorted(set(block.TA) - {"T"}) + ["UT"]), has_bytes=st.booleans())
def test_rwbs_reads_back_to_the_bits_blkparse_printed(letter, bits, zone, has_bytes):
    """The RWBS blkparse prints for an action (block.events._rwbs, its fill_rwbs) reads back to
    an action printing the same RWBS (its zone operation among the upper bits), with the
    letter's code."""
    action = (block.TA["T" if letter == "UT" else letter] | sum(block.TC[b] for b in bits) << block.TC_SHIFT
              | zone << block.TC_SHIFT)
    rwbs = block._rwbs(action, has_bytes)
    row = {"line_no": 1, "major": 8, "minor": 0, "cpu": 0, "seq": 1, "sec": 0, "nsec": 0, "pid": 1, "act": letter,
           "rwbs": rwbs, **{c: None for c in native.OPTIONAL}, "bracket": None}
    events, _ = native.decoded_events(pl.DataFrame([row], schema=native.EVENT_COLUMNS))
    got = int(events["action"][0]) | int(events["action_hi"][0]) << 32
    assert got & 0xFFFF == action & 0xFFFF
    assert block._rwbs(got, has_bytes) == rwbs          # ZR then A prints as ZRA: the text is all there is
    assert bin(got >> 32).count("1") <= 1


def test_the_action_table_is_blktraces():
    table = dict(pl.DataFrame(native_text.blkparse_actions()).iter_rows())
    assert table == {**block.TA, "UT": block.TA["T"]}
    assert set(table) | {"m"} == set(blkparse._layout.ACTIONS)


@SETTINGS
@given(text=texts(), cut=st.integers(0, 60))
def test_the_tally_counts_as_blkparse_does(text, cut):
    """BlkparseTally fed the scanned events in two pieces, against blkparse's rules restated:
    per CPU, events by letter and by write (W in the RWBS, or a discard), and each jump of
    more than one in a CPU's sequence numbers."""
    scan = native_text.scan_blkparse(np.frombuffer(text, np.uint8), 2, 1)
    events = pl.DataFrame(scan.events)
    tally = native.Tally()
    tally.feed(events[:cut])
    tally.feed(events[cut:])
    lines = text.split(b"\n")
    counts, gaps, last = {}, {}, {}
    for pos in events["position"]:
        m = blkparse._EVENT_RE.match(lines[pos - 1].decode().rstrip("\r"))
        cpu, seq, rwbs = int(m["cpu"]), int(m["seq"]), m["rwbs"]
        key = (cpu, m["act"], "W" in rwbs or rwbs.lstrip("F")[:1] == "D" and not rwbs.startswith("FF"))
        counts[key] = counts.get(key, 0) + 1
        if cpu in last and seq - last[cpu] > 1:
            gaps[cpu] = gaps.get(cpu, 0) + seq - last[cpu] - 1
        last[cpu] = seq
    assert {(c, a, w): n for c, a, w, n in pl.DataFrame(tally.counts()).iter_rows()} == counts
    assert dict(pl.DataFrame(tally.gaps()).iter_rows()) == gaps


def test_a_remap_source_beyond_32_bits_is_a_bad_line(tmp_path):
    """It was an internal error (a failed cast) before: now the error contract's one line."""
    path = tmp_path / "t.blkparse.txt"
    path.write_text("  8,0    0        1     0.000000000   218  A   W 1000 + 8 <- (99999999999999999999,1) 200\n"
                    "  8,0    0        2     0.000000100   218  Q   W 1000 + 8 [dd]\n")
    with pytest.raises(BadInput) as exc:
        blkparse.parse(str(path))
    assert exc.value.line == 1 and "remap source device number out of range" in str(exc.value)
    cap = blkparse.parse(str(path), strict=False)
    assert cap.records.skipped == 1 and len(cap.columns["events"]["t_ns"]) == 1
