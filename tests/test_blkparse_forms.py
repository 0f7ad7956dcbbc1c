"""blkparse text as people keep it: a header comment naming the columns and a `#---` rule
(as a real NVMe/dm-crypt capture's text starts), custom `-f`/`-F` formats holding the
standard fields, and the per-CPU and total summary blocks checked against the events. The
texts are real blkparse outputs (the rig's, ../shared/realdata) rewritten into each form."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from scsitrace import core
from scsitrace import parsers
from scsitrace.parsers import blkparse

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "captured" / "blktrace"
OWN = Path(__file__).resolve().parents[1] / "fixtures" / "captured"
TEXTS = sorted(OWN.glob("*/ref.blkparse.txt")) + (sorted(REAL.glob("*.ref.blkparse.txt")) if REAL.is_dir() else [])
EVENT = re.compile(r"^\s*(\d+),(\d+)\s+(\d+)\s+(\d+)\s+(\d+\.\d{9})\s+(\d+)\s+(\S+)\s+(\S+)(?:\s+(.*))?$")
HEADER = "#Maj,Mn CPU SeqNo Seconds PID Evt Typ Sector +Len Description\n#" + "-" * 70 + "\n"

# custom formats: (blkparse -f format, how a line is written from the default line's fields)
FORMATS = {
    "%T.%t %p %a %d %S %n": lambda f: f"{f['t']} {f['pid']} {f['act']} {f['rwbs']} {_sn(f['rest'])}",
    "%D %T.%t %p %a %d <details>":
        lambda f: f"{f['dev']} {f['t']} {f['pid']:>5} {f['act']:>2} {f['rwbs']:>3} {f['rest']}",
    "%D %c %s %T.%t %p %a %d <details> (the default, one space)":
        lambda f: f"{f['dev']} {f['cpu']} {f['seq']} {f['t']} {f['pid']} {f['act']} {f['rwbs']} {f['rest']}",
    "%s %p %T.%t %a %d <details>": lambda f: f"{f['seq']} {f['pid']} {f['t']} {f['act']} {f['rwbs']} {f['rest']}",
}


def _sn(rest: str) -> str:
    m = re.match(r"^(\d+) \+ (\d+)", rest)
    return f"{m.group(1)} {m.group(2)}" if m else rest


def _rewrite(text: str, line_of) -> str:
    out = []
    for line in text.splitlines():
        m = EVENT.match(line)
        if m:
            maj, mnr, cpu, seq, t, pid, act, rwbs, rest = m.groups()
            out.append(line_of({"dev": f"{maj},{mnr}", "cpu": cpu, "seq": seq, "t": t, "pid": pid, "act": act,
                                "rwbs": rwbs, "rest": rest or ""}))
    return "\n".join(out) + "\n"


def _all_stages(path) -> dict:
    a = core.analyze(blkparse.parse(str(path)))
    st = a.table("stages").filter((pl.col("device") == "all") & (pl.col("n") > 0))
    return {r["name"]: (r["n"], r["min_ns"], r["max_ns"], r["total_ns"]) for r in st.iter_rows(named=True)}, a


@pytest.mark.skipif(not TEXTS, reason="no real blkparse text at hand")
@pytest.mark.parametrize("src", TEXTS, ids=[p.parent.name if p.name == "ref.blkparse.txt" else p.name for p in TEXTS])
def test_header_comment_and_rule_are_skipped_and_said(src, tmp_path):
    text = src.read_text()
    p = tmp_path / "nvme.txt"
    p.write_text(HEADER + text)
    assert parsers.detect(str(p)) == "blkparse"
    want, _ = _all_stages(src)
    got, a = _all_stages(p)
    assert got == want
    note = next(n for n in a.notes if "comment lines" in n)
    assert note.startswith("2 comment lines (#) skipped") and "#Maj,Mn CPU SeqNo" in note
    assert not any("summary disagrees" in n for n in a.notes), a.notes


@pytest.mark.skipif(not TEXTS, reason="no real blkparse text at hand")
@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("src", TEXTS[:4] + TEXTS[-2:], ids=lambda p: p.parent.name if p.name == "ref.blkparse.txt"
                         else p.name)
def test_custom_formats_give_the_default_texts_stages(src, fmt, tmp_path):
    p = tmp_path / "custom.txt"
    p.write_text(_rewrite(src.read_text(), FORMATS[fmt]))
    assert parsers.detect(str(p)) == "blkparse"
    want, base = _all_stages(src)
    got, a = _all_stages(p)
    assert got == want
    if "%p" in fmt:
        assert a.table("processes")["queued"].sum() == base.table("processes")["queued"].sum()
    note = [n for n in a.notes if "custom blkparse format" in n]
    assert bool(note) == ("default" not in fmt)
    if "%D" not in fmt and note:
        assert "no device (read as 0,0)" in note[0]


def test_a_header_names_the_order_of_the_integer_fields(tmp_path):
    """`%T.%t %p %c %a %d`: two integers, pid before CPU; the header comment says so."""
    lines = ["0.000001000 4242 1 Q R 100 + 8 [fio]", "0.000002000 4242 1 G R 100 + 8 [fio]",
             "0.000003000 4242 1 I R 100 + 8 [fio]", "0.000004000 77 0 D R 100 + 8 [kworker]",
             "0.000009000 0 0 C R 100 + 8 [0]"]
    p = tmp_path / "h.txt"
    p.write_text("# Seconds PID CPU Evt Typ Sector\n" + "\n".join(lines) + "\n")
    cap = blkparse.parse(str(p))
    ev = cap.frames["events"]
    assert ev["pid"].to_list() == [4242, 4242, 4242, 77, 0] and ev["cpu"].to_list() == [1, 1, 1, 0, 0]
    plain = tmp_path / "p.txt"
    plain.write_text("\n".join(lines) + "\n")            # no header: two integers are seq, pid
    assert blkparse.parse(str(plain)).frames["events"]["pid"].to_list() == [1, 1, 1, 0, 0]


@pytest.mark.skipif(not TEXTS, reason="no real blkparse text at hand")
def test_summary_blocks_checked_against_the_events(tmp_path):
    src = TEXTS[0].read_text()
    assert "Reads Queued:" in src and "Total (" in src
    _, a = _all_stages(TEXTS[0])
    assert not any("summary disagrees" in n for n in a.notes)
    cut = tmp_path / "cut.txt"                      # an event line deleted by hand: one Q fewer
    lines = src.splitlines()
    k = next(i for i, line in enumerate(lines) if EVENT.match(line) and EVENT.match(line).group(7) == "Q")
    cpu = EVENT.match(lines[k]).group(3)
    cut.write_text("\n".join(lines[:k] + lines[k + 1:]) + "\n")
    _, a = _all_stages(cut)
    notes = [n for n in a.notes if "summary disagrees" in n]
    assert len(notes) == 2, notes                   # that CPU's block and the total
    assert f"for CPU {cpu}:" in notes[0] and "for its total:" in notes[1]
    assert re.search(r"(Reads|Writes) Queued [\d,]+ \(events: [\d,]+\)", notes[1])


def test_comment_only_text_is_not_blkparse(tmp_path):
    p = tmp_path / "c.txt"
    p.write_text(HEADER)
    assert not blkparse.sniff(p.read_bytes())
