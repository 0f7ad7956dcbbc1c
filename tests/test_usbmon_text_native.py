"""usbmon text read by the compiled line scanner (parsers/_usbmon_text.py, Rust) against the
reference: the regex reader (`usbmon._decode_text_block` on every line, as `_lines` hands
the lines over, the previous reader's whole path). On random line sets mixing good records of
every form (1u, 1t, setup, decimal seconds, `-` status, data words) with lines at and past
each field's edge (ranges, lengths, odd hex, isochronous descriptors, stray bytes, CRLF,
blanks), for any block size: the same urbs frame, records and text format, or the same
one-line error in strict mode; and the scanner's columns do not depend on how many threads
split a block."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from scsitrace import schema
from scsitrace._native import text as native_text
from scsitrace.errors import BadInput
from scsitrace.model import RecordCount
from scsitrace.parsers import _lines, usbmon

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def reference(path: str, strict: bool, block_bytes: int = _lines.BLOCK_BYTES):
    """(urbs frame, records, text format) as the regex reader gives them, or its error."""
    try:
        records, parts = RecordCount(), []
        last, wraps, any_bus = None, 0, False
        for block in _lines.iter_line_blocks(path, strict=strict, block_bytes=block_bytes):
            urbs = usbmon._decode_text_block(block, path, strict, records)
            if not urbs.height:
                continue
            t = urbs["t_ns"]
            step = t.diff().fill_null(t[0] - last if last is not None else 0)
            wrapped = (step < -(usbmon.TEXT_TS_WRAP_US * 1000 // 2)).cast(pl.Int64).cum_sum() + wraps
            last, wraps = t[-1], int(wrapped[-1])
            any_bus = any_bus or not urbs["bus"].is_null().all()
            parts.append(urbs.with_columns(pl.col("t_ns") + wrapped * usbmon.TEXT_TS_WRAP_US * 1000,
                                           pl.col("bus").fill_null(0)))
        urbs = pl.concat(parts) if parts else pl.DataFrame(schema=usbmon.URBS)
        origin = int(urbs["t_ns"].min()) if urbs.height else 0
        urbs = urbs.with_columns(pl.col("t_ns") - origin)
        return urbs, records.as_json(), "1t" if parts and not any_bus else "1u"
    except BadInput as exc:
        return str(exc), exc.line


def native(path: str, strict: bool, block_bytes: int = _lines.BLOCK_BYTES):
    try:
        cap = usbmon._parse_text(path, strict, None, block_bytes=block_bytes)
        return cap.frames["urbs"], cap.records.as_json(), cap.meta["text_format"]
    except BadInput as exc:
        return str(exc), exc.line


def assert_same(a, b) -> None:
    if isinstance(a[0], str) or isinstance(b[0], str):
        assert a == b
        return
    schema.validate(b[0], usbmon.URBS, "urbs")
    assert a[0].equals(b[0]), (a[0], b[0])
    assert a[1:] == b[1:]


# ---------------------------------------------------------------- generated lines

HEX = "0123456789abcdefABCDEF"


FIELDS = {   # field -> (a good value, values at or past its edge and rare forms)
    "tag": ("ffff8800", ["f" * 16, "F" * 17, "0", "g1"]),
    "ts": ("12345", ["0", "999999999999999", "999999999999999999", "9999999999999999999", "1700000000.123456",
                     "9223372035.999999999", "9223372036.0", "1.1234567891234", "12.", ".5", "1.2.3"]),
    "ev": ("S", ["C", "E", "X"]),
    "kind": ("Bo", ["Bi", "Ci", "Zi", "Ii", "Xo", "Bx"]),
    "addr": ("1:002:2", ["002:2", "65535:127:15", "65536:1:1", "1:128:1", "1:127:16", "1:1:1:1", "1:1",
                         "0000000000000000001:1:1", ":1:1", "1:0128:1"]),
    "mid": ("-115", ["0", "-", "-32", "2147483647", "2147483648", "-2147483648", "-2147483649", "-0", "-115:2048",
                     "-115:1:22", "0:8:-1", "-:1", "-115:", "s 80 06 0100 0000 0012", "s 80 06 100 0000 0012",
                     "s 80 06 0100 0000", "0 2 0:0:8 -18:8:8", "-115 1 -18:0:8", "0 x 0:0:8"]),
    "length": ("31", ["0", "4294967295", "4294967296", "99999999999999999999", "-1", "a"]),
    "tail": (" <", ["", " >", " =", " = 55534243", " = 5553424", " = abc d", " = 55 53 42",
                    " = " + " ".join(["00112233"] * 9), " < 0011", " =  00", " = 00 ", " = zz", " \u00e9",
                    " = 00\u00e9", " \x01", " \t", "\r", " \r", "  "]),
}


def _edge_line(draw) -> bytes:
    """A good line with one or two fields at or past their edge, or of a rare form."""
    chosen = draw(st.lists(st.sampled_from(sorted(FIELDS)), min_size=1, max_size=2))
    v = {name: draw(st.sampled_from(edge)) if name in chosen else good for name, (good, edge) in FIELDS.items()}
    return f"{v['tag']} {v['ts']} {v['ev']} {v['kind']}:{v['addr']} {v['mid']} {v['length']}{v['tail']}".encode()


@st.composite
def line_sets(draw):
    events = gen.traffic(draw(st.integers(1, 4)))
    good = [gen.text_line(e).encode() for e in events[:draw(st.integers(0, 40))]]
    good += [gen.user_space_text_line(e).encode() for e in events[:draw(st.integers(0, 10))]]
    if draw(st.booleans()):                    # 1t: no bus numbers
        good = [ln.replace(b":1:0", b":0", 1) for ln in good]
    lines = draw(st.permutations(good)) if len(good) < 12 else good
    extra = draw(st.lists(st.one_of(
        st.composite(_edge_line)(),
        st.sampled_from([b"", b"   ", b"\r", b"garbage", b"\xff\xfe", b"ffff 1 S Bo:1:1:1 0 1 \xc3", b"\x00",
                         b" ffff8800 12345 S Bo:1:002:2 -115 31 <"]),
    ), max_size=12))
    for ln in extra:
        at = draw(st.integers(0, len(lines)))
        lines = list(lines[:at]) + [ln] + list(lines[at:])
    crlf = draw(st.booleans())
    text = (b"\r\n" if crlf else b"\n").join(lines)
    if draw(st.booleans()):
        text += b"\n"
    return text


@SETTINGS
@given(line_sets(), st.sampled_from([_lines.BLOCK_BYTES, 300, 1000, 5000]))
def test_native_equals_the_regex_reader(tmp_path, text, block_bytes):
    path = tmp_path / "t.usbmon.txt"
    path.write_bytes(text)
    for strict in (True, False):
        assert_same(reference(str(path), strict, block_bytes), native(str(path), strict, block_bytes))




@SETTINGS
@given(line_sets(), st.integers(1, 5))
def test_scan_does_not_depend_on_threads(text, threads):
    """However many parts a block is cut into, the scanner gives the same columns (the
    block's line numbers, data offsets and left lines shifted into place)."""
    buf = np.frombuffer(text, np.uint8)
    one, many = native_text.scan_usbmon(buf, 1), native_text.scan_usbmon(buf, threads)
    assert pl.DataFrame(one.urbs).equals(pl.DataFrame(many.urbs))
    assert pl.DataFrame(one.other).equals(pl.DataFrame(many.other))
    assert (one.any_bus, one.newlines) == (many.any_bus, many.newlines)
    assert one.newlines == text.count(b"\n")


def test_the_scanner_takes_the_common_lines(tmp_path):
    """The kernel's lines (and user-space tools' decimal seconds and `-` status) are read in
    Rust: none is left to the regex reader."""
    lines = [gen.text_line(e) for e in gen.traffic(2)] + [gen.user_space_text_line(e) for e in gen.traffic(3)]
    out = native_text.scan_usbmon(np.frombuffer("\n".join(lines).encode(), np.uint8), 2)
    assert len(out.other) == 0 and len(out.urbs) == len(lines)


def test_isochronous_lines_come_through_the_regex_reader(tmp_path):
    """Rare forms left to the regex reader are merged back in line order, not dropped."""
    path = tmp_path / "iso.usbmon.txt"
    path.write_text("ffff88003a1c2c00 3575914555 S Bo:1:002:2 -115 31 <\n"
                    "ffff88003a1c2c01 3575914556 S Zi:1:002:1 -115:1:1234 1 -18:0:8 8 <\n"
                    "ffff88003a1c2c00 3575914557 C Bo:1:002:2 0 31 >\n")
    frame = native(str(path), True)[0]
    assert frame["pos"].to_list() == [1, 2, 3]
    assert frame["xfer"].to_list() == [3, 0, 3]


@pytest.mark.parametrize("name", ["usbmon.txt", "usbmon-bus.txt"])
def test_captured_fixtures_equal_the_regex_reader(name):
    from pathlib import Path
    for path in sorted(Path(__file__).parent.parent.glob(f"fixtures/captured/*/{name}")):
        for strict in (True, False):
            assert_same(reference(str(path), strict), native(str(path), strict))
