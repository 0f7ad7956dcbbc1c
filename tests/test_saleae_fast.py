"""The Saleae CSV reader's one-pass path for clean blocks (`_Reader._clean_block`, Rust)
against its general polars path: for any mix of clean and unclean rows (spaces, bad times,
X states, time going backwards, missing fields, bytes that are not UTF-8), any block
size, strict or lenient, both give the same transitions, counts and notes, or the same error."""
from __future__ import annotations

import functools

from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.errors import ScsitraceError
from scsitrace.parsers import saleae
from parsers import _lines

ITER_BYTE_BLOCKS = _lines.iter_byte_blocks
NAMES = ["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "spare"]
TIMES = ["0.000000000", "0.000000100", "0.000000150", "0.000001", "1e-6", "2.5E-6", "-0.000000050", "0.0000001005",
         "0.0000002", "3", " 0.0000003", "abc", "", "1.", "nan", "inf", "0.0000000025", "4000000001"]
STATES = ["0", "1", "1", "0", "X", "x", " 1", "2", ""]


@st.composite
def rows(draw):
    n = draw(st.integers(0, 30))
    out = []
    for _ in range(n):
        fields = [draw(st.sampled_from(TIMES))] + [draw(st.sampled_from(STATES)) for _ in NAMES]
        if draw(st.integers(0, 9)) == 0:
            fields = fields[:draw(st.integers(1, len(fields)))]
        out.append(",".join(fields) + draw(st.sampled_from(["", "", "\r"])))
    return out


def outcome(path: str, strict: bool, block: int, fast: bool, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(_lines, "iter_byte_blocks", functools.partial(ITER_BYTE_BLOCKS, block_bytes=block))
        if not fast:
            m.setattr(saleae._Reader, "_clean_block", lambda *a: None)
        try:
            cap = saleae.parse(path, strict=strict)
            got = cap.transitions()
            return ("ok", got.rows(), dict(cap.meta), cap.records.read, cap.records.skipped,
                    list(cap.records.examples), cap.notes)
        except ScsitraceError as exc:
            return ("error", type(exc).__name__, str(exc))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows(), st.booleans(), st.sampled_from([1 << 20, 64]), st.booleans())
def test_clean_block_path_equals_the_polars_path(tmp_path, monkeypatch, lines, strict, block, sorted_times):
    if sorted_times:          # mostly clean files: times in order, states 0/1/X
        lines = [ln for ln in lines if ln.split(",")[0].strip() not in ("abc", "", "nan", "inf")]
        lines.sort(key=lambda ln: float(ln.split(",")[0]))
    path = tmp_path / "s.csv"
    body = "\n".join(["Time [s]," + ",".join(NAMES)] + lines) + "\n"
    path.write_bytes(body.encode() + (b"0.5,1,1,1,1,1,1,1,\xff\n" if block == 64 and not sorted_times else b""))
    assert outcome(str(path), strict, block, True, monkeypatch) == outcome(str(path), strict, block, False,
                                                                            monkeypatch)
