"""strace's lines cut in Rust (native/src/text/sgio.rs) against the patterns it stands in for
(parsers/_strace_lines.py `split`): on any set of lines (strace's SG_IO calls in every form the
generator writes, -f halves, other syscalls, signals, the program's own output, the hostile
lines, and all of them damaged byte by byte) the split is the same, row for row; the whole
capture (commands, records, examples, notes, meta) or the error is the same as the regex
reader's at any block size; and the cut is the same for any cut of a block into parts."""
from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace import parsers
from scsitrace._native import text as native_text
from scsitrace.errors import BadInput
from scsitrace.parsers import _strace_lines, sgio
from scsitrace.parsers._strace_lines import HEADS, PARTS

from gen_sgio import HOSTILE, OTHER, PROGRAM_LINES, strace_text
from test_sgio import calls
from damage import damaged

ALPHABET = " -:=()<>[]{}?0.9EZ\t"   # what a damaged line may have in place of a byte


EXTRA = ["[pid  7] 10:00:00.5 ioctl(3</dev/sg0<char 21:0>>, SG_IO, {}) = -1 EINVAL (Invalid argument) <0.000001>",
         "  77 1700000000.000001 ioctl(3<>, SG_IO, 0x7ffd) = ?", "ioctl(3, SG_IO, NULL) = -1 EFAULT (Bad address)",
         "<... ioctl resumed>) = 0", "<... ioctl resumed>, x=1) = 0 <1.5>",
         "ioctl(3, SG_IO, {a=1) = 0) = 0", "10:00:00 ioctl(4, SG_IO, {x} <unfinished ...>", "ioctl(3, SG_IO, )",
         ") = 5", "   ", "write(1, \"ab\", 2) = 2"]


@st.composite
def strace_lines(draw) -> list[str]:
    base = strace_text(draw(calls()), ts=draw(st.sampled_from([None, "tt", "ttt"])), T=draw(st.booleans()),
                       y=draw(st.booleans()), f=draw(st.sampled_from([None, "bracket", "plain"])),
                       other=draw(st.booleans())).splitlines()
    out = []
    for line in base:
        pick = draw(st.integers(0, 9))
        if pick == 0:
            out.append(draw(damaged(line, ALPHABET)))
        elif pick == 1:
            out.append(draw(st.sampled_from(OTHER + PROGRAM_LINES + list(HOSTILE.values()) + EXTRA)))
            out.append(line)
        else:
            out.append(line)
    return out


def read(path: str, strict: bool, chunk: int | None = None):
    opts = {"chunk_bytes": chunk} if chunk else {}
    try:
        cap = parsers.parse(path, "sgio", strict=strict, **opts)
        cmds = cap.frames["commands"]
    except BadInput as exc:
        return str(exc)
    return cmds, cap.records.as_json(), list(cap.notes), dict(cap.meta)


@settings(max_examples=100, deadline=None)
@given(lines=strace_lines())
def test_rust_cut_equals_the_patterns(lines):
    buf = ("\n".join(lines) + "\n").encode()
    cut = _strace_lines.split_block(buf, 1)
    assert cut is not None
    n, fast = cut
    frame = pl.DataFrame({"line_no": pl.int_range(1, len(lines) + 1, eager=True, dtype=pl.Int64),
                          "t": pl.Series(lines, dtype=pl.Utf8)})
    slow = _strace_lines.split(frame).sort("line_no")
    assert n == len(lines)
    kinds = fast["_kind"]
    fast = fast.drop("_kind")
    assert fast.columns == slow.columns
    assert fast.equals(slow, null_equal=True)
    # the SG_IO calls and resumed halves classified in the cut, as the polars rules do
    called = slow.select(pl.col("sg") | pl.col("body").str.starts_with("<... ioctl resumed>")).to_series()
    assert kinds.is_not_null().to_list() == called.to_list()
    assert kinds.filter(called).to_list() == sgio._call_kinds(slow.filter(called)).to_list()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=strace_lines(), strict=st.booleans(), chunk=st.one_of(st.none(), st.integers(80, 3000)))
def test_capture_equals_the_regex_readers(tmp_path, monkeypatch, lines, strict, chunk):
    path = tmp_path / "t.strace"
    path.write_text("\n".join(lines) + "\n")
    fast = read(str(path), strict, chunk)
    with monkeypatch.context() as m:
        m.setattr(_strace_lines, "split_block", lambda *a, **k: None)
        slow = read(str(path), strict, chunk)
    if isinstance(fast, str) or isinstance(slow, str):
        assert fast == slow
        return
    assert fast[0].equals(slow[0], null_equal=True)
    assert fast[1:] == slow[1:]


@settings(max_examples=40, deadline=None)
@given(lines=strace_lines(), parts=st.integers(2, 7))
def test_any_cut_into_parts_gives_the_same_columns(lines, parts):
    buf = np.frombuffer(("\n".join(lines) + "\n").encode(), dtype=np.uint8)
    whole, cut = native_text.strace_block(buf, 1), native_text.strace_block(buf, parts)
    assert whole.lines == cut.lines
    for key in HEADS + PARTS:
        a, b = getattr(whole, key), getattr(cut, key)
        assert pl.DataFrame(a).equals(pl.DataFrame(b)), key


def test_text_the_rust_cut_leaves_to_the_patterns():
    """Bytes that are not ASCII, a NUL, a pid an int64 cannot hold: the block is declined."""
    for text in ("caf\u00e9 ioctl(3, SG_IO, {}) = 0\n", "a\x00b\n", "[pid 99999999999999999999] x\n"):
        assert native_text.strace_block(np.frombuffer(text.encode(), dtype=np.uint8)) is None
