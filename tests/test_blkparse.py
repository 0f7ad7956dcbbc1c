"""blkparse text reader: real outputs of Debian's blkparse (../shared/realdata, skipped when
absent), its trailing summary, hostile lines, and a hypothesis round trip through a renderer
of blkparse's default line format."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402

from scsitrace.reports import summary as summ
from scsitrace import cli, core, parsers
from scsitrace.block import events as block  # noqa: E402
from scsitrace.errors import BadInput  # noqa: E402
from scsitrace.parsers import blkparse, blktrace  # noqa: E402

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata"
CAPTURED = REAL / "captured" / "blktrace"
TEXT_ONLY = REAL / "blkparse-text" / "blk_data.txt.txt"
COLS = ["t_ns", "seq", "cpu", "act", "device", "sector", "pid", "pdu_dev", "pdu_sector", "pdu_int"]


@pytest.mark.skipif(not CAPTURED.is_dir(), reason="../shared/realdata/captured absent")
@pytest.mark.parametrize("case", ["lsi_randread4k", "uas_seqread32k"])
def test_blkparse_text_reads_like_the_binary_it_came_from(case):
    text = blkparse.parse(str(CAPTURED / f"{case}.ref.blkparse.txt"))
    binary = blktrace.parse(str(CAPTURED / case))
    t, b = text.frames["events"], binary.frames["events"]
    assert t.select(COLS).equals(b.select(COLS))
    assert (t["bytes"] == b["bytes"]).all()
    assert parsers.detect(str(CAPTURED / f"{case}.ref.blkparse.txt")) == "blkparse"
    ta = core.analyze(text, core.Options()).table("stages")
    ba = core.analyze(binary, core.Options()).table("stages")
    assert ta.equals(ba)


@pytest.mark.skipif(not TEXT_ONLY.is_file(), reason="../shared/realdata/blkparse-text absent")
def test_completion_only_text_without_summary():
    cap = blkparse.parse(str(TEXT_ONLY))
    lines = [ln for ln in TEXT_ONLY.read_text().splitlines() if ln.strip()]
    ev = cap.frames["events"]
    assert ev.height == len(lines) == cap.records.read
    assert set(ev["act"].cast(pl.Utf8).to_list()) == {"C"}
    assert set(ev["device"].to_list()) == {(1 << 20) | 0}
    assert sorted(set(ev["cpu"].to_list())) == [1, 13, 15]
    analysis = core.analyze(cap, core.Options())   # btt would see no Q: no stage samples
    assert summ.summary(analysis)["events"] == {"C": len(lines)}
    assert all(s["n"] == 0 for s in summ.summary(analysis)["stages"])


def render(ev: pl.DataFrame, names: dict) -> str:
    """blkparse's default line for Q G I D C M F R A X P U (the subset the reader must know)."""
    out = []
    for r in ev.iter_rows(named=True):
        act = "UT" if r["act"] == "T" else r["act"]
        rwbs = block._rwbs(r["action"], r["bytes"] > 0)
        head = (f"{r['device'] >> 20:3d},{r['device'] & 0xFFFFF:<3d} {r['cpu']:2d} {r['seq']:8d} "
                f"{r['t_ns'] // 10**9:5d}.{r['t_ns'] % 10**9:09d} {r['pid']:5d} {act:>2s} {rwbs:>3s} ")
        comm = names.get(r["pid"], "")
        if act in ("P",):
            tail = f"[{comm}]"
        elif act in ("U", "UT"):
            tail = f"[{comm}] {r['pdu_int']}"
        elif act == "X":
            tail = f"{r['sector']} / {r['pdu_sector']} [{comm}]"
        elif act == "A":
            d = r["pdu_dev"]
            tail = f"{r['sector']} + {r['bytes'] // 512} <- ({d >> 20},{d & 0xFFFFF}) {r['pdu_sector']}"
        elif act in ("C", "R"):
            tail = f"{r['sector']} + {r['bytes'] // 512} [{r['error']}]"
        else:
            tail = f"{r['sector']} + {r['bytes'] // 512} [{comm}]"
        out.append(head + tail)
    return "\n".join(out) + "\n"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), n=st.integers(1, 60), summary=st.booleans())
def test_round_trip_through_blkparse_lines(tmp_path, seed, n, summary):
    binary = tmp_path / f"w{seed}.bin"
    binary.write_bytes(gen.encode(gen.workload(n, seed=seed, merges=0.2, requeues=0.1, splits=0.1, remaps=0.2)))
    cap = blktrace.parse(str(binary))
    names = dict(cap.frames["processes"].iter_rows())
    text = render(cap.frames["events"], names)
    if summary:
        text += "CPU0 (8,0):\n Reads Queued:  3,  12KiB\n\nEvents (8,0): 9 entries\nSkips: 0 forward (0 -   0.0%)\n"
    path = tmp_path / f"w{seed}.txt"
    path.write_text(text)
    back = blkparse.parse(str(path)).frames["events"]
    keep = ~cap.frames["events"]["act"].is_in(["X", "P", "U", "T"])   # no size in their lines
    assert back.select(COLS).equals(cap.frames["events"].select(COLS))
    assert back.filter(keep)["bytes"].equals(cap.frames["events"].filter(keep)["bytes"])


def test_bad_lines_strict_and_lenient(tmp_path, capsys):
    good = "  8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [dd]\n"
    path = tmp_path / "bad.txt"
    path.write_text(good + "this is not an event\n" + good.replace(" 1 ", " 2 ")
                    + "  8,0    0        3     0.000000100   218  Z  RS 90624 + 8 [dd]\n")
    with pytest.raises(BadInput) as exc:
        blkparse.parse(str(path))
    assert exc.value.line == 2 and "not a blkparse event line" in str(exc.value)
    cap = blkparse.parse(str(path), strict=False)
    assert cap.frames["events"].height == 2
    assert cap.records.skipped == 2 and cap.records.examples[0].endswith(":2: not a blkparse event line")
    assert cli.main(["analyze", str(path), "--format", "blkparse"]) == 2
    assert f"{path}:2" in capsys.readouterr().err
    assert cli.main(["analyze", str(path), "--format", "blkparse", "--lenient", "--json", "-"]) == 0


def test_sniff():
    assert blkparse.sniff(b"\n  8,0    0        1     0.000000000   218  Q  RS 90624 + 8 [dd]\n")
    assert not blkparse.sniff(b"# ancot-text v1\n")
    assert not blkparse.sniff(b"\x07tae" + bytes(44))
