"""Kernel logs of the SCSI logging's completion and error-handling level only (an s390 machine's
zfcp LUNs: 64-bit LUNs, "Done: ADD_TO_MLQUEUE", "Sense Key :" lines, `scsi scan:` lines, no
"Send:"): detected, read, and reported for what they hold (the `completions` table), with a
note on what they cannot give. Logs written by tests/gen_scsilog.py:completions_log."""
from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import core, parsers
from scsitrace.cli import main
from scsitrace.reports import summary as summ

from gen_scsilog import DISPOSITIONS, SENSE, completions_log, dmesg_text

DEVICES = [(0, 0, 0, 1084113024), (0, 0, 0, 1084178560), (1, 0, 0, 1074151456), (2, 0, 1, 0)]
CDBS = [bytes(6), bytes([0x12, 0, 0, 0, 36, 0]), bytes([0x28, 0, 0, 0, 8, 0, 0, 0, 8, 0]),
        bytes([0xA0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0])]


@st.composite
def completions(draw):
    """Commands in time order: a few devices, tags reused, every disposition, sense or not."""
    n = draw(st.integers(1, 40))
    t, out = 1_000_000, []
    for _ in range(n):
        t += draw(st.integers(1_000, 5_000_000))
        out.append((t, draw(st.sampled_from(DEVICES)), draw(st.integers(0, 3)) * 320, draw(st.sampled_from(CDBS)),
                    draw(st.sampled_from(DISPOSITIONS)), draw(st.sampled_from([None, *SENSE]))))
    return out


def expected(cmds) -> Counter:
    """(device, opcode, result, sense key) -> completions, from the generator's own commands."""
    return Counter((":".join(map(str, dev)), cdb[0], "GOOD" if disp == "SUCCESS" else disp, key)
                   for _, dev, _, cdb, disp, key in cmds)


def table(analysis) -> Counter:
    return Counter({(r["device"], r["opcode"], r["result"], r["sense_key"]): r["count"]
                    for r in analysis.table("completions").iter_rows(named=True)})


@settings(max_examples=40, deadline=None)
@given(completions(), st.sampled_from([None, 200, 700, 4000]), st.booleans(), st.integers(0, 3))
def test_completions_only_log_counts_what_it_holds(tmp_path_factory, cmds, chunk, other, scan):
    """Every chunking gives the generator's counts by device, opcode, result and sense key;
    the commands are all unpaired (no dispatch), and the notes say what is missing."""
    p = tmp_path_factory.mktemp("cl") / "messages.txt"
    p.write_text(completions_log(cmds, other=other, scan=scan))
    assert parsers.detect(str(p)) == "scsilog"
    a = core.analyze(parsers.parse(str(p), **({"chunk_bytes": chunk} if chunk else {})))
    assert table(a) == expected(cmds)
    s = summ.summary(a)
    assert s["commands"]["total"] == len(cmds) and s["commands"]["paired"] == 0
    assert s["records"]["skipped"] == 0
    only = [n for n in a.notes if n.startswith("the log holds completions only")]
    assert len(only) == 1 and f"({len(cmds)} commands" in only[0] and "no response times" in only[0]
    assert any(f"{2 * scan} \"scsi scan:\" lines" in n for n in a.notes) == bool(scan)
    assert s["completions"] == [dict(r) for r in a.table("completions").to_dicts()]


def test_64_bit_luns_are_devices_and_select(tmp_path):
    cmds = [(1_000_000 * k, DEVICES[k % 2], 640, bytes(6), "ADD_TO_MLQUEUE", "Unit Attention") for k in range(1, 7)]
    p = tmp_path / "zfcp.dmesg"
    p.write_text(completions_log(cmds))
    a = core.load(str(p), lun=1084178560)
    assert table(a) == Counter({("0:0:0:1084178560", 0, "ADD_TO_MLQUEUE", "Unit Attention"): 3})
    assert set(a.ios["device"].to_list()) == {"0:0:0:1084178560"} and a.ios.height == 3
    assert main(["analyze", str(p), "--lun", "1084113024", "--json", str(tmp_path / "s.json")]) == 0


def test_old_kernels_without_tags(tmp_path):
    """No tag#: a command's lines are tied by device alone."""
    cmds = [(1_000_000 * k, DEVICES[k % 3], 0, CDBS[k % 4], "SUCCESS", [None, "Not Ready"][k % 2]) for k in range(1, 9)]
    p = tmp_path / "old.dmesg"
    p.write_text(completions_log(cmds, old=True))
    a = core.analyze(parsers.parse(str(p)))
    assert table(a) == expected(cmds)


def test_sense_of_a_full_log_and_repeated_done_lines(tmp_path):
    """A log with dispatches keeps its response times; its completions table is there too, and
    a failed command logged twice (FAILED, then the hook's Done:) counts once."""
    dev = (2, 0, 0, 0)
    events = [(1_000_000, "start", dev, 5, CDBS[2]), (3_000_000, "done", dev, 5, CDBS[2], "GOOD"),
              (4_000_000, "start", dev, 5, CDBS[2]), (9_000_000, "done", dev, 5, CDBS[2], "CHECK CONDITION")]
    p = tmp_path / "full.dmesg"
    p.write_text(dmesg_text(events))
    a = core.analyze(parsers.parse(str(p)))
    assert a.ios["response_ns"].to_list() == [2_000_000, 5_000_000]
    assert sum(table(a).values()) == 2
    assert not [n for n in a.notes if n.startswith("the log holds completions only")]


def test_a_lone_sense_line_is_said(tmp_path):
    head = "[   10.000000] sd 0:0:0:1084113024: [sda] tag#7 "
    p = tmp_path / "lone.dmesg"
    p.write_text(completions_log([(5_000_000, DEVICES[0], 3, bytes(6), "SUCCESS", None)])
                 + head + "Sense Key : Not Ready [current] \n")
    a = core.analyze(parsers.parse(str(p)))
    assert any(n.startswith("1 \"Sense Key\" lines follow no command's end") for n in a.notes)


@pytest.mark.parametrize("other", [False, True])
def test_detected_among_other_lines(tmp_path, other):
    cmds = [(1_000_000 * k, DEVICES[0], 640, bytes(6), "ADD_TO_MLQUEUE", "Unit Attention") for k in range(1, 4)]
    p = tmp_path / "pasted.txt"
    p.write_text(completions_log(cmds, other=other, scan=2))
    assert parsers.detect(str(p)) == "scsilog"


def test_completions_only_json_follows_the_published_schema(tmp_path):
    import json
    from pathlib import Path

    import jsonschema
    schema = json.loads((Path(__file__).resolve().parents[1] / "docs" / "schemas" / "analyze-json.schema.json")
                        .read_text())
    cmds = [(1_000_000 * k, DEVICES[k % 2], 640, CDBS[k % 4], DISPOSITIONS[k % 3], [None, "Not Ready"][k % 2])
            for k in range(1, 9)]
    p = tmp_path / "zfcp.dmesg"
    p.write_text(completions_log(cmds, scan=1))
    out = tmp_path / "s.json"
    assert main(["analyze", str(p), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert not [e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
    assert sum(r["count"] for r in doc["completions"]) == 8


@pytest.mark.parametrize("head", ["Nov 28 00:37:43 s390host kernel: ", "2026-11-28T00:37:43.123456+00:00 s390host kernel: "])
def test_syslog_and_journal_lines_keep_the_kernel_stamp(tmp_path, head):
    """/var/log/messages, kern.log, journalctl -k: the kernel's [seconds] stamp after the
    syslog head is the time; the same counts as the bare dmesg."""
    cmds = [(1_000_000 * k, DEVICES[k % 3], 640 + k % 2, CDBS[k % 4], DISPOSITIONS[k % 3], [None, "Not Ready"][k % 2])
            for k in range(1, 12)]
    p = tmp_path / "messages"
    p.write_text("".join(head + ln + "\n" for ln in completions_log(cmds, scan=1).splitlines()))
    assert parsers.detect(str(p)) == "scsilog"
    assert table(core.analyze(parsers.parse(str(p)))) == expected(cmds)


def test_unstamped_logging_says_why_it_cannot_be_read(tmp_path, capsys):
    """dmesg -t: SCSI logging lines without stamps are named as such, not "format not
    recognised"; among stamped ones they are counted in a note."""
    cmds = [(1_000_000 * k, DEVICES[0], 640, bytes(6), "ADD_TO_MLQUEUE", "Unit Attention") for k in range(1, 5)]
    stamped = completions_log(cmds).splitlines()
    bare = [ln.split("] ", 1)[1] for ln in stamped]
    p = tmp_path / "dmesg-t.txt"
    p.write_text("\n".join(bare) + "\n")
    assert parsers.detect(str(p)) == "scsilog"
    assert main(["analyze", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{p}:1: kernel SCSI logging without timestamps (16 lines" in err[0]
    mixed = tmp_path / "mixed.txt"
    mixed.write_text("\n".join(stamped + bare[:4]) + "\n")
    a = core.analyze(parsers.parse(str(mixed)))
    assert sum(table(a).values()) == 4
    assert "4 SCSI logging lines without a timestamp: not read" in a.notes
