"""The VCD reader's one-call path (`_Reader._fast`: scan, checks and rows of a block in one
compiled call, taken when every item of the block is good) against its general path (scan,
numpy checks, rows): for any mix of good and bad lines, any block size, strict or lenient,
both give the same rows, the same counts and notes, or the same error."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.errors import ScsitraceError
from scsitrace.parsers import vcd

HEADER = """$timescale 10 ns $end
$scope module logic $end
$var wire 1 ! BSY $end
$var wire 1 " SEL $end
$var wire 1 # MSG $end
$var wire 1 $ C/D $end
$var wire 1 % I/O $end
$var wire 1 ' REQ $end
$var wire 8 & DB [7:0] $end
$var real 1 ( speed $end
$upscope $end
$enddefinitions $end
"""
GOOD = ["#0", "#5", "#6", "#40", "#41", "#100", "1!", "0!", "1\"", "0\"", "1#", "0#", "1$", "0%", "x'", "z!",
        "b1010 &", "b11111111 &", "bx &", "b0001 &", "b000000001 &", "r1.5 (", "sfoo (", "$dumpvars",
        "$end", "$dumpoff", "$dumpon", "$dumpall", "$comment", "1'"]
BAD = ["#3", "#", "#x", "1?", "b2 &", "b1 ", "b111111111 &", "q", "#99999999999999999999", "b1 *",
       "#9223372036854775807"]


def outcome(path: str, strict: bool, block: int, fast: bool):
    try:
        cap = vcd.parse(path, strict=strict, block_bytes=block)
        cap.chunks.fast = cap.chunks.fast and fast
        got = cap.transitions()
        meta = {k: v for k, v in cap.meta.items()}
        return ("ok", got.rows(), meta, cap.records.read, cap.records.skipped, list(cap.records.examples),
                cap.anomalies.rows(), cap.notes)
    except ScsitraceError as exc:
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(GOOD), min_size=1, max_size=4), max_size=40)
       | st.lists(st.lists(st.sampled_from(GOOD) | st.sampled_from(BAD), min_size=1, max_size=4), max_size=40),
       st.booleans(), st.sampled_from([1 << 20, 97, 40]))
def test_one_call_path_equals_the_general_path(tmp_path, lines, strict, block):
    path = tmp_path / "f.vcd"
    path.write_text(HEADER + "\n".join(" ".join(t) for t in lines) + "\n", encoding="utf-8")
    assert outcome(str(path), strict, block, True) == outcome(str(path), strict, block, False)


def test_good_blocks_take_the_one_call_path(tmp_path, monkeypatch):
    """A clean file never reaches the general path's scanner; a bad line sends its block there."""
    path = tmp_path / "g.vcd"
    path.write_text(HEADER + "#0\n1!\n#10\n1\"\nb101 &\n#20\n0!\n", encoding="utf-8")
    calls = []
    real = vcd._scan.scan_block
    monkeypatch.setattr(vcd._scan, "scan_block", lambda *a: calls.append(1) or real(*a))
    assert len(vcd.parse(str(path)).transitions()) == 3 and not calls
    path.write_text(HEADER + "#0\n1!\n#10\n1?\n", encoding="utf-8")
    assert len(vcd.parse(str(path), strict=False).transitions()) == 2 and calls
