"""The Saleae CSV reader's one-pass path for clean blocks (`_Reader._clean_block`, Rust)
against its general polars path: for any mix of clean and unclean rows (spaces, bad times,
X states, time going backwards, missing fields, bytes that are not UTF-8), any block
size, scanned in any number of parts (X holds a state across a part's edge), strict or lenient, both give the same transitions, counts and notes, or the same error."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace.errors import ScsitraceError
from scsitrace.parsers import saleae
NAMES = ["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "spare"]
TIMES = ["0.000000000", "0.000000100", "0.000000150", "0.000001", "1e-6", "2.5E-6", "-0.000000050", "0.0000001005",
         "0.0000002", "3", " 0.0000003", "abc", "", "1.", "nan", "inf", "0.0000000025", "4000000001",
         "1234.567890123", "0.1234567890123456789", "-0.0", "00.0000004", "7.000000000000001"]
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


def outcome(path: str, strict: bool, block: int, fast: bool, monkeypatch, parts: int | None = None):
    with monkeypatch.context() as m:
        m.setattr(saleae, "BLOCK_BYTES", block)
        m.setattr(saleae._Reader, "PARTS", parts)
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
@given(rows(), st.booleans(), st.sampled_from([1 << 20, 64]), st.booleans(), st.sampled_from([None, 1, 2, 3, 7]))
def test_clean_block_path_equals_the_polars_path(tmp_path, monkeypatch, lines, strict, block, sorted_times, parts):
    if sorted_times:          # mostly clean files: times in order, states 0/1/X
        lines = [ln for ln in lines if ln.split(",")[0].strip() not in ("abc", "", "nan", "inf")]
        lines.sort(key=lambda ln: float(ln.split(",")[0]))
    path = tmp_path / "s.csv"
    body = "\n".join(["Time [s]," + ",".join(NAMES)] + lines) + "\n"
    path.write_bytes(body.encode() + (b"0.5,1,1,1,1,1,1,1,\xff\n" if block == 64 and not sorted_times else b""))
    assert outcome(str(path), strict, block, True, monkeypatch, parts) == outcome(str(path), strict, block, False,
                                                                                   monkeypatch)


@st.composite
def clean_rows(draw):
    """Rows the clean path reads: times in order (now and then one going back), states 0, 1
    and long runs of X, so that a part of a block often starts inside a run of X."""
    n = draw(st.integers(1, 60))
    t, out = 0, []
    for _ in range(n):
        t += draw(st.integers(0 if draw(st.integers(0, 5)) else -3, 5))
        states = [draw(st.sampled_from(["0", "1", "X", "X", "X", "x"])) for _ in NAMES]
        out.append(f"{t / 1e8:.9f}," + ",".join(states))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(clean_rows(), st.booleans(), st.sampled_from([1 << 20, 200]), st.sampled_from([2, 3, 5, 9]))
def test_parts_of_a_clean_block_join_as_one(tmp_path, monkeypatch, lines, strict, block, parts):
    path = tmp_path / "s.csv"
    path.write_text("\n".join(["Time [s]," + ",".join(NAMES)] + lines) + "\n")
    taken = []
    clean = saleae._Reader._clean_block

    def counted(self, *a):
        got = clean(self, *a)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(saleae._Reader, "_clean_block", counted)
    fast = outcome(str(path), strict, block, True, monkeypatch, parts)
    assert fast == outcome(str(path), strict, block, False, monkeypatch)
    backwards = any(float(b.split(",")[0]) < float(a.split(",")[0]) for a, b in zip(lines, lines[1:]))
    assert any(taken) or backwards          # the clean path read the blocks (time going back: the general)


@settings(max_examples=300, deadline=None)
@given(clean_rows(), st.sampled_from([2, 3, 5, 9]), st.lists(st.sampled_from([0, 1]), min_size=len(NAMES),
                                                                max_size=len(NAMES)))
def test_a_block_scanned_in_parts_reads_as_in_one(lines, parts, held):
    """The compiled scan of a block cut into parts (each part's leading X rows given the
    state the part before it left; a time going back across a part's edge refused) equals
    the scan of the block in one part."""
    import numpy as np
    from scsitrace._native import bus

    text = np.frombuffer(("\n".join(lines) + "\n").encode(), dtype=np.uint8)

    def scan(k):
        got = bus.saleae_clean_block({"text": text, "ncol": len(NAMES) + 1, "col_bit": np.arange(len(NAMES)),
                                      "last_t": None, "held": np.array(held, np.uint8), "parts": k})
        return None if got is None else (got.t_ns.tolist(), got.words.tolist(), got.x_values, got.held.tolist(),
                                         got.lines)

    assert scan(parts) == scan(1)
