"""VCD reader (parsers/vcd.py): round trips against the ancot-text path, streaming,
timescales, x/z, polarity, name mapping, and bad input."""
from __future__ import annotations

import shutil
import subprocess

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_vcd
from scsitrace import parsers, schema
from scsitrace.errors import BadInput, MissingSignal, ScsitraceError, TruncatedInput, UsageError
from scsitrace.parsers import ancot, vcd

OPTIONAL = ("ATN", "RST", "REQ", "ACK")
SMALL_SCALES = ("1 ns", "100 ps", "10 ps", "1 ps", "100 fs", "10 fs", "1 fs")
BIG_SCALES = ("10 ns", "100 ns", "1 us", "10 us", "100 us", "1 ms", "10 ms", "100 ms", "1 s")
HEADER = """$timescale 1 ns $end
$scope module logic $end
$var wire 1 ! BSY $end
$var wire 1 " SEL $end
$var wire 1 # MSG $end
$var wire 1 $ C/D $end
$var wire 1 % I/O $end
$var wire 8 & DB [7:0] $end
$upscope $end
$enddefinitions $end
"""


def write_text(tmp_path, text: str, name: str = "t.vcd") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def frame(rows: list[tuple]) -> pl.DataFrame:
    cols = list(zip(*rows)) if rows else [[], [], [], []]
    return schema.frame({"t_ns": list(cols[0]), "lines": list(cols[1]), "db": list(cols[2]),
                         "dbp": list(cols[3])}, schema.TRANSITIONS)


def lines_of(*names: str) -> int:
    return sum(1 << schema.SIGNAL_BIT[n] for n in names)


# ---------------------------------------------------------------- round trip

@st.composite
def traces(draw, style: str):
    """(transitions, signals, data, timescale): consecutive rows differ, times increase."""
    if style == "scsimon":
        signals, data = list(schema.SIGNALS), ["DB"]
    else:
        extra = draw(st.sets(st.sampled_from(OPTIONAL)))
        signals = [s for s in schema.SIGNALS if s in schema.REQUIRED_SIGNALS or s in extra]
        data = draw(st.sampled_from([[], ["DB"], ["DB", "DBP"]]))
    mask = sum(1 << schema.SIGNAL_BIT[s] for s in signals)
    timescale = draw(st.sampled_from(SMALL_SCALES + BIG_SCALES))
    unit = max(1, int(gen_vcd.tick_of(timescale)))
    n = draw(st.integers(1, 25))
    rows, t = [], draw(st.integers(0, 10**6)) * unit
    for _ in range(n):
        row = (t, draw(st.integers(0, 0xFFFF)) & mask,
               draw(st.none() | st.integers(0, 255)) if data else None,
               draw(st.none() | st.booleans()) if len(data) == 2 else None)
        if not rows or row[1:] != rows[-1][1:]:
            rows.append(row)
        t += draw(st.integers(1, 10**5)) * unit
    return frame(rows), signals, data, timescale


def via_ancot(tmp_path, tr: pl.DataFrame, signals, data) -> pl.DataFrame:
    path = tmp_path / "same.ancot"
    ancot.write(str(path), tr, signals=signals, data=data, tick_ns=1)
    return ancot.parse(str(path)).transitions()


def check_round_trip(tmp_path, case, style: str, rev: bool = False, idle_every: int = 0):
    tr, signals, data, timescale = case
    path = tmp_path / f"{style}.vcd"
    gen_vcd.write(path, tr, signals=signals, data=data, style=style, timescale=timescale,
                  rev=rev, idle_every=idle_every)
    cap = vcd.parse(str(path))
    got = cap.transitions()
    assert got.equals(via_ancot(tmp_path, tr, signals, data))
    expected_signals = signals + data
    assert cap.meta["signals"] == expected_signals
    assert cap.meta["level"] == schema.level_of(expected_signals)
    assert cap.records.skipped == 0
    return cap


SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(case=traces("scsimon"), idle_every=st.integers(0, 3))
def test_round_trip_scsimon_names(tmp_path, case, idle_every):
    cap = check_round_trip(tmp_path, case, "scsimon", idle_every=idle_every)
    assert cap.meta["mapping"]["C/D"] == "logic.CD" and cap.meta["mapping"]["DB"] == "logic.data"
    assert cap.meta["inverted"] == []
    assert cap.meta["string_changes_ignored"] > 0      # the `phase` string var


@SETTINGS
@given(case=traces("la_bits"))
def test_round_trip_active_low_bits(tmp_path, case):
    cap = check_round_trip(tmp_path, case, "la_bits")
    _, signals, data, _ = case
    inverted = set(cap.meta["inverted"])
    assert set(signals) <= inverted
    if data:
        assert {f"DB{i}" for i in range(8)} <= inverted


@SETTINGS
@given(case=traces("vector"), rev=st.booleans())
def test_round_trip_vector(tmp_path, case, rev):
    cap = check_round_trip(tmp_path, case, "vector", rev=rev)
    tr, _, data, _ = case
    if len(tr) > 1:   # the mid-file $dumpoff block and the real var were skipped, not applied
        assert cap.meta["real_changes_ignored"] == 1
        assert cap.meta["dumpoff_changes_ignored"] > 0


def test_streaming_in_small_blocks_matches_one_block(tmp_path):
    rows, t = [], 0
    for i in range(400):
        rows.append((t, (i * 37) % 128, i % 256 if i % 7 else None, None))
        t += 1 + i % 13
    tr = frame(rows).filter(pl.col("lines").ne(pl.col("lines").shift(1)).fill_null(True)
                            | pl.col("db").ne_missing(pl.col("db").shift(1)).fill_null(True))
    signals = [s for s in schema.SIGNALS if s != "ACK" and s != "REQ"]
    path = tmp_path / "big.vcd"
    gen_vcd.write(path, tr, signals=signals, data=["DB"], style="vector", timescale="1 ns")
    whole = vcd.parse(str(path)).transitions()
    cap = vcd.parse(str(path), block_bytes=211)    # blocks end inside a timestamp's changes
    chunks = list(cap.chunks())
    assert len(chunks) > 50
    assert pl.concat(chunks).equals(whole)
    assert whole.equals(via_ancot(tmp_path, tr, signals, ["DB"]))


def test_records_count_every_timestamp_and_change(tmp_path):
    body = "#5\n1! 0\"\nb1 &\n#6\n#7 r1.5 !\n"
    cap = vcd.parse(write_text(tmp_path, HEADER + body))
    cap.transitions()
    assert cap.records.read == 7 and cap.records.skipped == 0


# ---------------------------------------------------------------- times

@pytest.mark.parametrize("scale", SMALL_SCALES + BIG_SCALES)
def test_timescale_to_nanoseconds(tmp_path, scale):
    mult, unit = scale.split()
    tick = gen_vcd.tick_of(scale)
    text = HEADER.replace("1 ns", f"{mult}{unit}") + "#1000\n0!\n#1500000\n1!\n#4000000\n0!\n"
    cap = vcd.parse(write_text(tmp_path, text))
    got = cap.transitions()["t_ns"].to_list()
    expected = [int((t - 1000) * tick) for t in (1000, 1500000, 4000000)]   # floor
    assert got == expected
    assert cap.meta["tick_ns"] == float(tick)
    assert cap.meta["origin"] == 1000


def test_sub_nanosecond_changes_merge_into_one_row(tmp_path):
    text = HEADER.replace("1 ns", "1 ps") + "#0\n0!\n#1200\n1!\n#1900\n1\"\n#3000\n0!\n"
    got = vcd.parse(write_text(tmp_path, text)).transitions()
    # 1200 ps and 1900 ps are both in nanosecond 1: one row, the state after both
    assert got.select("t_ns", "lines").rows() == [(0, 0), (1, lines_of("BSY", "SEL")), (3, lines_of("SEL"))]


def test_values_before_the_first_timestamp_are_its_initial_state(tmp_path):
    text = HEADER + "$dumpvars\n1!\nb101 &\n$end\n#40\n#50\n0!\n#60\n"
    got = vcd.parse(write_text(tmp_path, text)).transitions()
    assert got.rows() == [(0, 1, 5, None), (10, 0, 5, None), (20, 0, 5, None)]


def test_repeated_timestamp_gives_one_row(tmp_path):
    text = HEADER + "#0\n0!\n#10\n1!\n#10\n1\"\n#20\n"
    got = vcd.parse(write_text(tmp_path, text)).transitions()
    assert got["t_ns"].to_list() == [0, 10, 20]
    assert got["lines"][1] == lines_of("BSY", "SEL")


def test_no_change_keeps_last_timestamp_as_end_of_capture(tmp_path):
    got = vcd.parse(write_text(tmp_path, HEADER + "#0\n1!\n#5\n#9\n")).transitions()
    assert got.select("t_ns", "lines").rows() == [(0, 1), (9, 1)]


# ---------------------------------------------------------------- x and z

def test_x_z_on_control_lines_are_released_and_counted(tmp_path):
    text = HEADER + "#0\n1!\n1\"\n#10\nx!\n#20\nZ\"\n#30\n"
    cap = vcd.parse(write_text(tmp_path, text))
    assert cap.transitions()["lines"].to_list() == [3, 2, 0, 0]
    assert cap.meta["xz_control_changes"] == 2


def test_x_z_on_db_makes_the_sample_null(tmp_path):
    text = HEADER + "#0\nb10101010 &\n#10\nb1010x010 &\n#20\nbz &\n#30\nb1 &\n#40\nbx1 &\n"
    cap = vcd.parse(write_text(tmp_path, text))
    got = cap.transitions()
    # x at 10 and z at 20 are both "not sampled": no change at 20, so no row
    assert got.select("t_ns", "db").rows() == [(0, 0xAA), (10, None), (30, 1), (40, None)]
    assert cap.meta["xz_data_changes"] == 3


def test_db_bits_any_x_bit_nulls_the_byte(tmp_path):
    decl = "".join(f"$var wire 1 d{i} SCSI_D{i} $end\n" for i in range(8))
    head = HEADER.replace("$var wire 8 & DB [7:0] $end\n", decl)
    body = "#0\n" + "".join(f"{(0xA5 >> i) & 1}d{i}\n" for i in range(8)) + "#5\nxd3\n#9\n1d3\n"
    cap = vcd.parse(write_text(tmp_path, head + body))
    assert cap.transitions()["db"].to_list() == [0xA5, None, 0xAD]
    assert cap.meta["mapping"]["DB3"] == "logic.SCSI_D3"


def test_scalar_change_on_the_vector_and_over_long_vector(tmp_path):
    text = HEADER + "#0\n1&\n#1\nb0011000011 &\n"     # 10 bits, the extra high ones 0: the value fits
    assert vcd.parse(write_text(tmp_path, text)).transitions()["db"].to_list() == [1, 0xC3]


def test_vector_that_does_not_fit_its_wire_is_bad_input(tmp_path):
    """A value outside its field's range is never accepted silently (issue 18): strict names the
    line, lenient skips and counts it."""
    path = write_text(tmp_path, HEADER + "#0\n1&\n#1\nb1111000011 &\n#2\nb1 &\n")
    with pytest.raises(BadInput, match="does not fit") as exc:
        vcd.parse(path).transitions()
    assert exc.value.line == HEADER.count("\n") + 4
    cap = vcd.parse(path, strict=False)
    assert 0xC3 not in cap.transitions()["db"].to_list()
    assert cap.records.skipped == 1


# ---------------------------------------------------------------- names, polarity, mapping

@pytest.mark.parametrize("name,bus,low", [
    ("BSY", "BSY", False), ("/SCSI_BSY", "BSY", True), ("BSY_N", "BSY", True), ("BSY_n", "BSY", True),
    ("nBSY", "BSY", True), ("BSY#", "BSY", True), ("SEL_L", "SEL", True), ("~ATN", "ATN", True),
    ("CD", "C/D", False), ("/C/D", "C/D", True), ("I/O#", "I/O", True), ("IO", "I/O", False),
    ("scsi_req", "REQ", False), ("ACK", "ACK", False), ("SCSI_D3", "DB3", False),
    ("DB7_N", "DB7", True), ("nDB0", "DB0", True), ("DBP", "DBP", False), ("DP#", "DBP", True),
    ("nothing", None, False), ("BUSY", "BSY", False), ("RESET", "RST", False),
])
def test_default_names_and_active_low_markers(name, bus, low):
    rest, marked = vcd.active_low_marked(name)
    assert (vcd.bus_name(rest), marked) == (bus, low)


def test_polarity_inverts_wires_and_vector(tmp_path):
    head = HEADER.replace("! BSY", "! /BSY").replace("& DB [7:0]", "& DB# [7:0]")
    cap = vcd.parse(write_text(tmp_path, head + "#0\n0!\nb11111110 &\n#5\n1!\n"))
    assert cap.transitions().select("lines", "db").rows() == [(1, 1), (0, 1)]
    assert cap.meta["inverted"] == ["BSY", "DB"]


def test_active_low_option_by_bus_name_signal_name_and_all(tmp_path):
    path = write_text(tmp_path, HEADER + "#0\n0!\n0\"\n0#\n0$\n0%\nb0 &\n#1\n")
    assert vcd.parse(path, active_low=["BSY"]).transitions()["lines"][0] == 1
    assert vcd.parse(path, active_low=["SEL"]).meta["inverted"] == ["SEL"]
    cap = vcd.parse(path, active_low=["all"])
    assert cap.meta["inverted"] == ["BSY", "SEL", "MSG", "C/D", "I/O", "DB"]
    assert cap.transitions().select("lines", "db").row(0) == (lines_of(*schema.REQUIRED_SIGNALS), 0xFF)
    with pytest.raises(UsageError, match="NOPE"):
        vcd.parse(path, active_low=["NOPE"])


def test_map_overrides_and_generic_channel_names(tmp_path):
    text = ("$timescale 1 us $end\n" + "".join(f"$var wire 1 {c} ch{i} $end\n" for i, c in enumerate("abcde"))
            + "$enddefinitions $end\n#0\n1a\n0b\n1c\n0d\n0e\n#2\n0a\n")
    path = write_text(tmp_path, text)
    with pytest.raises(MissingSignal) as err:
        vcd.parse(path)
    msg = str(err.value)
    assert "BSY" in msg and "C/D" in msg and "ch0" in msg and "--map" in msg
    cap = vcd.parse(path, mapping={"BSY": "ch0", "SEL": "ch1", "MSG": "ch2", "CD": "ch3", "I/O": "ch4"},
                    active_low=["ch2"])
    assert cap.meta["mapping"]["C/D"] == "ch3" and cap.meta["inverted"] == ["MSG"]
    assert cap.transitions().rows() == [(0, lines_of("BSY"), None, None), (2000, 0, None, None)]


def test_map_unknown_signal_names_the_closest(tmp_path):
    path = write_text(tmp_path, HEADER)
    with pytest.raises(MissingSignal, match="closest available: BSY"):
        vcd.parse(path, mapping={"BSY": "BSYY"})
    with pytest.raises(UsageError, match="unknown bus line"):
        vcd.parse(path, mapping={"FOO": "BSY"})


def test_missing_required_line_names_closest(tmp_path):
    path = write_text(tmp_path, HEADER.replace("\" SEL", "\" SELX_IN"))
    with pytest.raises(MissingSignal, match=r"SEL \(closest: SELX_IN"):
        vcd.parse(path)


def test_incomplete_db_bits_are_ignored_with_a_note(tmp_path):
    head = HEADER.replace("$var wire 8 & DB [7:0] $end\n", "$var wire 1 d DB0 $end\n")
    cap = vcd.parse(write_text(tmp_path, head + "#0\n1d\n"))
    assert "DB" not in cap.meta["signals"] and cap.meta["level"] == 1
    assert any("DB1" in n for n in cap.notes)


def test_scoped_names_and_bit_selects(tmp_path):
    text = ("$timescale 1ns $end\n$scope module a $end\n$scope module b $end\n"
            "$var wire 1 ! BSY $end\n$var wire 1 \" SEL $end\n$var wire 1 # MSG $end\n"
            "$var wire 1 $ CD $end\n$var wire 1 % IO $end\n"
            + "".join(f"$var wire 1 d{i} DATA [{i}] $end\n" for i in range(8))
            + "$upscope $end\n$upscope $end\n$enddefinitions $end\n#0\n"
            + "".join(f"1d{i}\n" if i in (1, 6) else f"0d{i}\n" for i in range(8)))
    cap = vcd.parse(write_text(tmp_path, text))
    assert cap.meta["mapping"]["BSY"] == "a.b.BSY" and cap.meta["mapping"]["DB6"] == "a.b.DATA[6]"
    assert cap.transitions()["db"].to_list() == [0x42]
    swapped = vcd.parse(write_text(tmp_path, text, "u.vcd"), mapping={"BSY": "a.b.SEL", "SEL": "BSY"})
    assert (swapped.meta["mapping"]["BSY"], swapped.meta["mapping"]["SEL"]) == ("a.b.SEL", "a.b.BSY")


# ---------------------------------------------------------------- bad input

@pytest.mark.parametrize("body,line,why", [
    ("#0\n1!\n#x5\n", 13, "bad timestamp"),
    ("#0\n1!\n#10\n#5\n", 14, "time goes backwards"),
    ("#0\n1?\n", 12, "undeclared identifier code ?"),
    ("#0\nb10201 &\n", 12, "bad binary vector"),
    ("#0\nb1010\n&\n", 12, "without an identifier code"),
    ("#0\nhello\n", 12, "not a timestamp or a value change"),
    ("#0\n$enddefinitions\n", 12, "not a timestamp"),
])
def test_strict_names_file_and_line(tmp_path, body, line, why):
    path = write_text(tmp_path, HEADER + body)
    with pytest.raises(BadInput) as err:
        vcd.parse(path).transitions()
    assert err.value.line == line and why in err.value.reason and err.value.path == path


def test_lenient_skips_and_counts(tmp_path):
    body = "#0\n1!\n#x5\n1?\n#10\n1\"\n#5\n0!\n#20\n"
    cap = vcd.parse(write_text(tmp_path, HEADER + body), strict=False)
    got = cap.transitions()
    assert cap.records.skipped == 3
    assert cap.records.examples[0].endswith(":13: bad timestamp (expected '#' and a non-negative integer of at most 18 digits)")
    # the change after the skipped backwards "#5" belongs to time 10
    assert got.select("t_ns", "lines").rows() == [(0, 1), (10, lines_of("SEL")), (20, lines_of("SEL"))]


@pytest.mark.parametrize("text,kind,why", [
    ("$timescale 3 ns $end\n", BadInput, "bad $timescale"),
    ("$var wire x ! BSY $end\n", BadInput, "bad $var width"),
    ("$var wire 1 ! $end\n", BadInput, "bad $var"),
    ("$scope module a $end\n$var wire 1 ! BSY\n", TruncatedInput, "file ends inside $var"),
    ("hello world\n", BadInput, "expected a $keyword"),
    ("", BadInput, "no $var declaration"),
    ("$date today $end\n$enddefinitions $end\n#0\n", BadInput, "no $var declaration"),
])
def test_bad_header(tmp_path, text, kind, why):
    with pytest.raises(kind, match=why.replace("$", r"\$")):
        vcd.parse(write_text(tmp_path, text))


def test_file_ending_inside_a_data_block(tmp_path):
    path = write_text(tmp_path, HEADER + "#0\n$dumpvars\n1!\n")
    with pytest.raises(TruncatedInput, match="inside .dumpvars"):
        vcd.parse(path).transitions()
    cap = vcd.parse(path, strict=False)
    assert len(cap.transitions()) == 1
    assert cap.anomalies["kind"].to_list() == ["TRUNCATED INPUT"]


def test_huge_timestamp_is_bad_input_not_overflow(tmp_path):
    text = HEADER.replace("1 ns", "1 s") + "#0\n1!\n#9223372036854775\n0!\n#99999999999999999999\n"
    with pytest.raises(BadInput, match="too large"):
        vcd.parse(write_text(tmp_path, text)).transitions()


def test_not_utf8_is_named_by_line(tmp_path):
    p = tmp_path / "b.vcd"
    p.write_bytes(HEADER.encode() + b"#0\n1!\n\xff\xfe\n")
    with pytest.raises(BadInput) as err:
        vcd.parse(str(p)).transitions()
    assert err.value.line == 13


_TOKENS = ["#0", "#5", "#3", "1!", "0\"", "x#", "b1010", "&", "b1 &", "bx &", "r1.5 !", "$end",
           "$comment", "$dumpvars", "$dumpoff", "$dumpon", "sfoo", "#", "z%", "1?", "\t", "  ", "ü"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(st.sampled_from(_TOKENS) | st.text(max_size=6), max_size=5), max_size=25),
       st.booleans(), st.sampled_from([1 << 20, 64]))
def test_garbage_only_raises_project_errors(tmp_path, lines, strict, block):
    path = tmp_path / "g.vcd"
    path.write_text(HEADER + "\n".join(" ".join(t) for t in lines) + "\n", encoding="utf-8")
    try:
        cap = vcd.parse(str(path), strict=strict, block_bytes=block)
        got = cap.transitions()
    except ScsitraceError:
        return
    schema.validate(got, schema.TRANSITIONS, "transitions")
    assert got["t_ns"].is_sorted() and (len(got) == 0 or got["t_ns"][0] == 0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes_only_raise_project_errors(tmp_path, data):
    path = tmp_path / "r.vcd"
    path.write_bytes(b"$var wire 1 ! BSY $end\n" + data)
    for strict in (True, False):
        try:
            vcd.parse(str(path), strict=strict).transitions()
        except ScsitraceError:
            pass


# ---------------------------------------------------------------- registry, CLI

def test_sniff_and_registry():
    assert vcd.sniff(b"$date\n today\n$end\n") and vcd.sniff(b"\n  $timescale 1ns $end")
    assert not vcd.sniff(b"# ancot-text v1\n")
    assert "vcd" in parsers.formats() and parsers.module("vcd") is vcd


def test_cli_missing_signal_exits_2_with_one_line(tmp_path, capsys):
    from scsitrace.cli import main
    path = write_text(tmp_path, HEADER.replace("! BSY", "! XYZ"))
    assert main(["analyze", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "BSY" in err and "Traceback" not in err


def test_cli_bad_line_exits_2(tmp_path, capsys):
    from scsitrace.cli import main
    path = write_text(tmp_path, HEADER + "#0\n1!\n#x\n")
    assert main(["analyze", path]) == 2
    assert f"{path}:13: bad timestamp" in capsys.readouterr().err


# ---------------------------------------------------------------- against a real VCD reader

def wellen_transitions(path: str, meta: dict) -> list[tuple]:
    """The same file read by pywellen (wellen, the Rust reader behind the Surfer viewer),
    combined into bus rows here: one row per time at which a mapped signal changed."""
    pywellen = pytest.importorskip("pywellen")
    wave = pywellen.Waveform(path)
    by_path = {v.full_name: v for v in wave.all_vars()}
    changes = []
    for bus, signal in meta["mapping"].items():
        var = by_path.get(signal) or by_path[signal.rsplit("[", 1)[0]]   # wellen drops [7:0]
        wave.stream_changes(lambda t, _s, value, bus=bus: changes.append((t, bus, value)), [var])
    inverted, state, rows = set(meta["inverted"]), {}, []
    for t, bus, value in sorted(changes, key=lambda c: c[0]):
        state[bus] = value
        row = (t,) + _combine_bus(state, inverted, meta["mapping"])
        if rows and rows[-1][0] == t:
            rows[-1] = row
        elif not rows or rows[-1][1:] != row[1:]:
            rows.append(row)
    tick = gen_vcd.tick_of(meta["timescale"])
    return [(int((r[0] - rows[0][0]) * tick),) + r[1:] for r in rows]


def _combine_bus(state: dict, inverted: set, mapping: dict) -> tuple:
    def bit(bus):
        v = state.get(bus)
        if not isinstance(v, int):
            return None                       # x, z or never set
        return (v & 1) ^ (bus in inverted)
    lines = sum(1 << schema.SIGNAL_BIT[s] for s in schema.SIGNALS if bit(s))
    if "DB" in mapping:
        v = state.get("DB")
        db = None if not isinstance(v, int) else v & 0xFF
        if db is not None and mapping["DB"].endswith("[0:7]"):
            db = int(f"{db:08b}"[::-1], 2)
        if db is not None and "DB" in inverted:
            db ^= 0xFF
    elif "DB0" in mapping:
        bits = [bit(f"DB{i}") for i in range(8)]
        db = None if None in bits else sum(b << i for i, b in enumerate(bits))
    else:
        db = None
    dbp = bit("DBP") if "DBP" in mapping else None
    return lines, db, None if dbp is None else bool(dbp)


@SETTINGS
@given(case=traces("la_bits"), style=st.sampled_from(["scsimon", "la_bits", "vector"]), rev=st.booleans())
def test_same_rows_as_pywellen(tmp_path, case, style, rev):
    tr, signals, data, timescale = case
    if style == "scsimon":
        signals, data = list(schema.SIGNALS), ["DB"]
    tr = tr.with_columns(pl.col("t_ns") - tr["t_ns"][0])   # wellen puts initial values at 0
    path = str(tmp_path / "w.vcd")
    gen_vcd.write(path, tr, signals=signals, data=data, style=style, timescale=timescale,
                  rev=rev, extras=False)
    cap = vcd.parse(path)
    ours = [r for r in cap.transitions().rows()]
    theirs = wellen_transitions(path, cap.meta)
    if len(ours) > 1 and ours[-1][1:] == ours[-2][1:]:
        ours.pop()                            # our end-of-capture row: wellen has no such row
    assert ours == theirs


def test_hand_mapped_signal_leaves_its_default_line(tmp_path):
    """sigrok names unnamed probes D0..D15: D0..D7 look like data bits until mapped by hand."""
    decl = "".join(f"$var wire 1 {chr(33 + i)} D{i} $end\n" for i in range(16))
    text = "$timescale 1 ns $end\n" + decl + "$enddefinitions $end\n#0\n" + \
        "".join(f"0{chr(33 + i)}\n" for i in range(16)) + "#10\n1!\n"
    path = write_text(tmp_path, text)
    with pytest.raises(MissingSignal, match="BSY"):
        vcd.parse(path)
    cap = vcd.parse(path, mapping={"BSY": "D0", "SEL": "D8", "MSG": "D9", "C/D": "D10", "I/O": "D11"})
    assert cap.meta["mapping"]["BSY"] == "D0" and "DB0" not in cap.meta["mapping"]
    assert "DB" not in cap.meta["signals"] and any("DB0" in n for n in cap.notes)
    assert cap.transitions().select("t_ns", "lines").rows() == [(0, 0), (10, lines_of("BSY"))]


# ---------------------------------------------------------------- through the bus analysis

def test_same_phase_table_and_ios_as_the_ancot_path(tmp_path):
    from busmodel import BusBuilder
    from scsitrace import core
    from scsitrace.reports import summary
    b = BusBuilder(level=3)
    b.bus_free()
    read10 = bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 1, 0])
    ios = [b.command(t, read10, disconnect_after_command=True)[0] for t in (0, 3)]
    for t, io in zip((0, 3), ios):
        b.reconnect(t, io, data_in=bytes(range(256)) * 2)
    b.bus_free()
    tr = b.transitions()
    signals = [s for s in b.signals() if s in schema.SIGNALS]
    ancot.write(str(tmp_path / "a.ancot"), tr, signals=signals, data=["DB"], tick_ns=1)
    expected = core.analyze(ancot.parse(str(tmp_path / "a.ancot")))
    for style, scale in (("scsimon", "1 ns"), ("la_bits", "10 ps")):
        path = tmp_path / f"{style}.vcd"
        gen_vcd.write(path, tr, signals=signals, data=["DB"], style=style, timescale=scale)
        got = core.analyze(vcd.parse(str(path)))
        assert summary.categories(got, "raid1990").equals(summary.categories(expected, "raid1990"))
        assert got.ios.drop("device").equals(expected.ios.drop("device"))
        assert got.ios_completed == 2


# ---------------------------------------------------------------- a real VCD writer (Icarus Verilog)

def verilog_testbench(tr: pl.DataFrame, signals: list[str]) -> str:
    """A testbench that drives the rows of `tr` onto active-low wires (as a bus probe sees
    them) and an active-low DB vector; x where DB was not sampled."""
    names = {s: s.replace("/", "") + "_N" for s in signals}
    decl = "".join(f"  reg {names[s]} = 1'b1;\n" for s in signals) + "  reg [7:0] DB_N = 8'bx;\n"
    steps, prev = [], int(tr["t_ns"][0])
    for t, lines, db, _ in tr.iter_rows():
        sets = "".join(f" {names[s]} = 1'b{0 if lines >> schema.SIGNAL_BIT[s] & 1 else 1};" for s in signals)
        sets += " DB_N = 8'bx;" if db is None else f" DB_N = 8'd{db ^ 0xFF};"
        steps.append(f"    #{t - prev};{sets}\n")
        prev = t
    return ("`timescale 1ns/1ps\nmodule tb;\n" + decl + "  initial begin\n"
            "    $dumpfile(\"out.vcd\");\n    $dumpvars(0, tb);\n" + "".join(steps)
            + "    #5 $finish;\n  end\nendmodule\n")


@pytest.mark.skipif(not (shutil.which("iverilog") and shutil.which("vvp")), reason="Icarus Verilog not installed")
def test_icarus_verilog_dump_reads_back(tmp_path):
    from busmodel import BusBuilder
    b = BusBuilder(level=3)
    b.bus_free()
    b.command(2, bytes([0x12, 0, 0, 0, 36, 0]), data_in=bytes(range(36)))
    b.bus_free()
    tr = b.transitions().with_columns(pl.lit(None, dtype=pl.Boolean).alias("dbp"))
    keep = pl.col("lines").ne(pl.col("lines").shift(1)) | pl.col("db").ne_missing(pl.col("db").shift(1))
    tr = tr.filter(keep.fill_null(True) & pl.col("t_ns").ne(pl.col("t_ns").shift(-1)).fill_null(True))
    signals = [s for s in b.signals() if s in schema.SIGNALS]
    (tmp_path / "tb.v").write_text(verilog_testbench(tr, signals))
    subprocess.run(["iverilog", "-o", "tb.vvp", "tb.v"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run(["vvp", "-n", "tb.vvp"], cwd=tmp_path, check=True, capture_output=True)
    cap = vcd.parse(str(tmp_path / "out.vcd"))
    assert cap.meta["timescale"] == "1 ps" and cap.meta["tick_ns"] == 0.001
    assert set(cap.meta["inverted"]) == set(signals) | {"DB"}
    got = cap.transitions()
    expected = tr.with_columns(pl.col("t_ns") - tr["t_ns"][0])
    assert got.head(len(expected)).equals(expected)
    assert len(got) == len(expected) + 1 and got["t_ns"][-1] == expected["t_ns"][-1] + 5


def test_hostile_file_from_the_generator(tmp_path):
    rows = [(1000 + 10 * i, (i * 5) % 512, i % 256, None) for i in range(40)]
    tr = frame(rows)
    clean, hostile = tmp_path / "clean.vcd", tmp_path / "hostile.vcd"
    gen_vcd.write(clean, tr, signals=list(schema.SIGNALS), data=["DB"], style="scsimon")
    bad_lines = gen_vcd.write_hostile(hostile, tr)
    assert len(bad_lines) == len(gen_vcd.HOSTILE)
    with pytest.raises(BadInput) as err:
        vcd.parse(str(hostile)).transitions()
    assert err.value.line == bad_lines[0] and gen_vcd.HOSTILE[0][1] in err.value.reason
    cap = vcd.parse(str(hostile), strict=False)
    assert cap.transitions().equals(vcd.parse(str(clean)).transitions())
    assert cap.records.skipped == len(gen_vcd.HOSTILE)
    for example, line, (_, why) in zip(cap.records.examples, bad_lines, gen_vcd.HOSTILE):
        assert f":{line}: {why}" in example
