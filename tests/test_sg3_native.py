"""sg3_utils verbose output read by the compiled line scanner (parsers/_sg3_verbose.py `scan`,
Rust: native/src/text/sg3.rs) against the reference: the same lines through the patterns
(`fields`, the previous reader). On random logs cut from the committed captures of sg3_utils
programs in the QEMU guest, with damaged lines (tests/damage.py), CDB lines of every form and
past their edges, sense data, bytes requested and got, tabs, CRs and stray bytes: the same
fields line by line; and the whole parse (commands, records, notes, meta, or the same one-line
error, strict and lenient) is what the patterns alone give, at any block size, and the same
at every block size (lenient: the skips' examples in another order)."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from damage import damaged
from scsitrace.errors import BadInput
from scsitrace.parsers import _lines, _sg3_verbose, sgio

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CASE = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "sg" / "lsi_sg_tools"
CAPTURED = [line for p in sorted(CASE.glob("*.out.txt")) for line in p.read_text().splitlines()]
ALPHABET = "0123456789abcdef []()=:x"
EDGES = [
    "    inquiry cdb: 12 00 00 00 24 00", "    inquiry cdb: [12 00 00 00 24 00", "    inquiry cdb: 12 00]  ",
    "    inquiry cdb: [12 00 00 00 24 00] ", "    inquiry cdb: [12 0g 00]", "    a cdb: b cdb: [12 00]",
    "inquiry cdb: [12 00]", "   cdb: [12 00]", "    inquiry cdb: [12 00 ]", "    inquiry cdb: [12 00 00 0]",
    "Read(10) [28 00 00 00 00 08 00 00 08 00]", "  Write(16) [8a 00 00 00 00 00 00 00 00 00 00 00 00 08 00 00]  ",
    "Read(10) [28 00 00 00 00 08 00 00 08 00", "Read(10) 28 00]", "Read (10) [28 00]", "read(10) [28 00]",
    "Read(10) [28 00] duration=5 ms", "Read(x) [28 00]",
    "      duration=4294967295 ms", "      duration=4294967296 ms", "      duration=00000000001 ms",
    "      duration=5 ms  ", "duration=5 ms", "      duration=5 msec",
    "    inquiry: pass-through requested 252 bytes (data-in) but got 36 bytes",
    "    inquiry: pass-through requested 4294967296 bytes (data-in) but got 36 bytes",
    "Fixed format, current; Sense key: Illegal Request", "Sense key: ", "Sense key:   ",
    " Raw sense data (in hex), sb_len=18, embedded_len=18", "        70 00 05 00 00 00 00 0a  00 00 00 00 24 00 00 00",
    "        00 00", "abcdef", "open /dev/sg0 with flags=0x800", "open /dev/sg1 with flags=0xG", "open  x with flags=0x1",
    "open /dev/sda with flags=0x802 duration=3 ms", "", "   ", "\t    inquiry cdb: [12 00 00 00 24 00]",
    "    inquiry cdb: [12 00 00 00 24 00]\r", "caf\u00e9 cdb: [12 00]",
]
BAD_BYTES = [b"\xff\xfe", b"    inquiry cdb: [12 00\x00 00 00 24 00]"]


@st.composite
def logs(draw) -> bytes:
    start = draw(st.integers(0, len(CAPTURED) - 1))
    lines = [line.encode() for line in CAPTURED[start:start + draw(st.integers(0, 80))]]
    for _ in range(draw(st.integers(0, 4)) if lines else 0):
        k = draw(st.integers(0, len(lines) - 1))
        lines[k] = draw(damaged(lines[k].decode(), ALPHABET)).encode()
    for extra in draw(st.lists(st.sampled_from(EDGES), max_size=5)):
        lines.insert(draw(st.integers(0, len(lines))), extra.encode())
    if draw(st.integers(0, 5)) == 0:
        lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from(BAD_BYTES)))
    lines.insert(0, b"    inquiry cdb: [12 00 00 00 24 00]")       # read as sg3_utils output
    return b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")


def _by_patterns(buf, path, line_no, strict, parts=None):
    """The block through the patterns alone (the previous reader)."""
    block = _lines._block_frame(bytes(buf), path, line_no, strict)
    return _sg3_verbose.fields(block.select("line_no", pl.col("text").str.strip_chars_end("\r\n").alias("t")))


@SETTINGS
@given(text=logs(), strict=st.booleans(), parts=st.sampled_from([1, 2, 5]))
def test_scanner_fields_are_the_patterns_fields(text, strict, parts):
    try:
        fast = _sg3_verbose.scan(text, "t.sg3.txt", 1, strict, parts=parts).sort("line_no")
    except BadInput as exc:
        with pytest.raises(BadInput) as ref:
            _by_patterns(text, "t.sg3.txt", 1, strict)
        assert (str(ref.value), ref.value.line) == (str(exc), exc.line)
        return
    ref = _by_patterns(text, "t.sg3.txt", 1, strict)
    assert fast.drop("t").equals(ref.drop("t"))
    taken = fast["t"].is_null()
    assert fast.filter(~taken)["t"].equals(ref.filter(~taken)["t"])


def _outcome(path, strict: bool, chunk_bytes: int):
    try:
        cap = sgio.parse(str(path), strict=strict, chunk_bytes=chunk_bytes)
        commands = cap.frames["commands"]
        return commands.to_dicts(), cap.records.as_json(), cap.notes, cap.meta
    except BadInput as exc:
        return str(exc), exc.line


@SETTINGS
@given(text=logs(), strict=st.booleans(), chunk=st.sampled_from([64, 500, 1 << 20]))
def test_parse_is_the_patterns_parse_at_any_block_size(tmp_path, monkeypatch, text, strict, chunk):
    path = tmp_path / "t.sg3.txt"
    path.write_bytes(text)
    fast = _outcome(path, strict, chunk)
    with monkeypatch.context() as m:
        m.setattr(_sg3_verbose, "scan", _by_patterns)
        assert _outcome(path, strict, chunk) == fast
    if not strict:      # the skips' examples come block by block (bad bytes, then bad CDB lines)
        assert _unordered(_outcome(path, strict, 1 << 20)) == _unordered(fast)


def _unordered(outcome):
    commands, records, notes, meta = outcome
    examples = sorted(records["skipped_examples"]) if records["skipped"] <= 5 else None
    return commands, records["read"], records["skipped"], examples, notes, meta


@pytest.mark.parametrize("path", sorted(CASE.glob("*.out.txt")), ids=lambda p: p.name)
def test_captured_outputs_read_alike(path, monkeypatch):
    fast = _outcome(path, True, 1 << 20)
    with monkeypatch.context() as m:
        m.setattr(_sg3_verbose, "scan", _by_patterns)
        assert _outcome(path, True, 1 << 20) == fast


def _outcome_by(path, strict: bool, chunk_bytes: int, native: bool, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(sgio, "NATIVE_SG3", native)
        return _outcome(path, strict, chunk_bytes)


@SETTINGS
@given(text=logs(), strict=st.booleans(), chunk=st.sampled_from([64, 500, 1 << 20]))
def test_compiled_reader_is_the_lines_reader_at_any_block_size(tmp_path, monkeypatch, text, strict, chunk):
    """The one-pass reader (`Sg3Reader`: fields and commands in Rust, the last command held
    across blocks) against the line reader it replaced (the patterns' fields folded by
    `_sg3_verbose.commands`, lines from the last CDB on carried to the next block): the same
    commands, records (skip examples in the same order), notes and meta, or the same error."""
    path = tmp_path / "t.sg3.txt"
    path.write_bytes(text)
    assert _outcome_by(path, strict, chunk, True, monkeypatch) == _outcome_by(path, strict, chunk, False, monkeypatch)


@SETTINGS
@given(text=logs(), parts=st.integers(1, 7), cut=st.integers(0, 10_000))
def test_compiled_reader_parts_and_blocks_change_nothing(text, parts, cut):
    """Any split of the log into blocks (a cut at a line end) and of a block into parts (its
    lines on several cores): the same commands and bad lines as the whole log in one part."""
    import numpy as np
    from scsitrace import scsi
    from scsitrace._native import text as native
    names = ([scsi.SENSE_KEY_NAMES[k] for k in range(16)], scsi.STATUS_NAMES[0x02])

    def read(blocks, n):
        reader = native.Sg3Reader(1, *names)
        got = [reader.block(np.frombuffer(b, np.uint8), n) for b in blocks] + [reader.finish()]
        if any(g is None for g in got):
            return None
        return (pl.concat([pl.DataFrame(g.commands) for g in got]).to_dicts(),
                pl.concat([pl.DataFrame(g.bad) for g in got]).to_dicts(), sum(g.other for g in got))
    whole = read([text], 1)
    ends = [k + 1 for k, b in enumerate(text) if b == 0x0A]
    at = ends[cut % len(ends)] if ends else len(text)
    split = read([text[:at], text[at:]] if 0 < at < len(text) else [text], parts)
    assert split == whole
