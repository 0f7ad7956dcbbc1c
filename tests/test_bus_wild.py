"""SCSI-like buses that differ from the SCSI-2 textbook: the PC Engine CD-ROM² bus (issue 27).

The real capture of `../shared/realdata/busvcd/` (a DSLogic at 10 MHz; skipped when absent;
SCSITRACE_REALDATA names another folder) must decode to what the community pce-scsi sigrok
decoder printed for it (`.ref.pce_scsi.txt`): the same commands in the same order, their
CDBs, data-in byte counts, status and message bytes, and phase edges within one sample.
Captures of the same shape made by tests/gen_pce.py check the same rules without the real
file: control lines read inverted from the capture itself, SEL released before BSY taken as
the selection, no ATN and no arbitration, the drive holding BSY with no REQ shown as
CONNECTED, NO TRANSFER, a lost REQ's byte read at ACK, vendor opcodes named by
`--command-set pce`.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_pce
from scsitrace import cli, core, parsers, scsi
from scsitrace.bus import polarity
from scsitrace.bus.runs import BIT

REAL = Path(os.environ.get("SCSITRACE_REALDATA") or Path(__file__).resolve().parents[2] / "shared" / "realdata")
PCE = REAL / "busvcd" / "pce_test5_read_data.dsl"
PCE_REF = REAL / "busvcd" / "pce_test5_read_data.ref.pce_scsi.txt"
SAMPLE_NS = 100
_LINE = re.compile(r"^(\d+)-(\d+) pce_scsi-1: (.*)$")
_BYTE = re.compile(r"^0x([0-9A-F]{2})$")
_CDB = re.compile(r"^\[[0-9A-F]{2}\]: .*\[((?: 0x[0-9A-F]{2})+) \]$")
PHASES = {"Selection": "SELECTION", "Command": "COMMAND", "Data In": "DATA IN", "Status": "STATUS",
          "Message In": "MESSAGE IN"}


def reference_commands(path: Path) -> list[dict]:
    """The decoder's output as commands in order: their CDB, data-in byte count, status and
    message-in bytes, and where each phase begins and ends (ns)."""
    rows = [(int(m[1]), int(m[2]), m[3]) for m in map(_LINE.match, path.read_text().splitlines()) if m]
    values = [(s, e, int(m[1], 16)) for s, e, text in rows if (m := _BYTE.match(text))]

    def inside(s, e):
        return [v for vs, ve, v in values if s <= vs and ve <= e]
    commands: list[dict] = []
    selection = None
    for s, e, text in sorted(rows, key=lambda r: (r[0], _CDB.match(r[2]) is None)):   # a CDB opens its command
        if text == "Selection":
            selection = (s, e)
        elif (m := _CDB.match(text)) is not None:
            commands.append({"cdb": [int(x, 16) for x in m[1].split()], "data_in": 0, "status": [], "message_in": [],
                             "phases": {"SELECTION": [selection]}})
        elif text in PHASES and commands and text != "Selection":
            cmd = commands[-1]
            cmd["phases"].setdefault(PHASES[text], []).append((s, e))
            if text == "Data In":
                cmd["data_in"] += len(inside(s, e))
            elif text == "Status":
                cmd["status"] += inside(s, e)
            elif text == "Message In":
                cmd["message_in"] += inside(s, e)
    return commands


def decoded_commands(a) -> list[dict]:
    """The same facts from an analysis: each I/O's phases (segments), the bytes of its
    COMMAND, STATUS and MESSAGE IN runs, and its data-in bytes."""
    invert = 0xFF if a.source["data_polarity"] == "low" else 0
    starts, infos = a.runs["start_ns"].to_list(), a.runs["info_bytes"].to_list()
    run_bytes = {s: [b ^ invert for b in (v or [])] for s, v in zip(starts, infos)}
    out = []
    for io in a.ios.iter_rows(named=True):
        seg = a.segments.filter(pl.col("io") == io["io"])
        phases: dict = {}
        for s, e, phase in seg.select("start_ns", "end_ns", "phase").iter_rows():
            phases.setdefault(phase, []).append((s, e))
        first = {p: run_bytes[v[0][0]] for p, v in phases.items() if p in ("COMMAND", "STATUS", "MESSAGE IN")}
        out.append({"cdb": first.get("COMMAND", []), "data_in": io["data_bytes"], "status": first.get("STATUS", []),
                    "message_in": first.get("MESSAGE IN", []), "phases": phases})
    return out


def assert_edges_within_a_sample(got: dict, want: dict) -> None:
    for phase, spans in want.items():
        if phase == "DATA IN":       # the decoder splits DATA IN at a one-sample C/D glitch
            spans = [(spans[0][0], spans[-1][1])]
        assert len(got[phase]) == len(spans), phase
        for (gs, ge), (ws, we) in zip(got[phase], spans):
            assert abs(gs - ws) <= SAMPLE_NS and abs(ge - we) <= SAMPLE_NS, (phase, (gs, ge), (ws, we))


@pytest.mark.skipif(not (PCE.is_file() and PCE_REF.is_file()), reason="../shared/realdata/busvcd absent")
def test_real_pc_engine_capture_equals_the_community_decoder():
    a = core.analyze(parsers.parse(str(PCE), command_set="pce"))
    want, got = reference_commands(PCE_REF), decoded_commands(a)
    assert [c["cdb"] for c in got] == [c["cdb"] for c in want] == [[0x08, 0x00, 0x09, 0xDF, 0x02, 0x00]]
    for g, w in zip(got, want):
        assert (g["data_in"], g["status"], g["message_in"]) == (w["data_in"], w["status"], w["message_in"])
        assert_edges_within_a_sample(g["phases"], w["phases"])
    io = a.ios.row(0, named=True)
    assert (io["command"], io["lba"], io["blocks"], io["status"], io["complete"]) == ("Read(6)", 0x9DF, 2, "GOOD", True)
    # the drive seeks for 1.07 s holding BSY, phase lines idle, no REQ: between COMMAND and DATA IN
    seek = a.segments.filter(pl.col("phase") == "CONNECTED, NO TRANSFER").sort("start_ns")
    cmd_end, data_start = got[0]["phases"]["COMMAND"][0][1], got[0]["phases"]["DATA IN"][0][0]
    assert seek.filter((pl.col("start_ns") == cmd_end) & (pl.col("end_ns") == data_start)).height == 1
    assert 1.06e9 < data_start - cmd_end < 1.08e9
    assert "DATA OUT" not in a.segments["phase"].to_list()
    assert a.anomalies["kind"].to_list() == ["SEL RELEASED BEFORE BSY"]
    assert a.source["lines_inverted"] == ["BSY", "SEL", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]
    assert a.source["data_polarity"] == "high"


commands = st.builds(
    gen_pce.Command,
    cdb=st.one_of(
        st.tuples(st.integers(0, 0x1F), st.integers(0, 255), st.integers(0, 255), st.integers(0, 255))
        .map(lambda t: [0x08, *t, 0]),                                                      # READ(6)
        st.tuples(st.sampled_from([0xD8, 0xD9, 0xDA, 0xDD, 0xDE, 0x43, 0x44]), st.lists(st.integers(0, 255), min_size=9,
                                                                                        max_size=9))
        .map(lambda t: [t[0], *t[1]]),                                                      # 10-byte CDBs
        st.just([0x00] * 6)),                                                               # TEST UNIT READY
    data=st.lists(st.integers(0, 255), max_size=24),
    seek=st.sampled_from([0, 7, 5000, 31000]),
    status=st.sampled_from([0x00, 0x02, 0x08]),
    lost_req=st.booleans())


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(cmds=st.lists(commands, min_size=1, max_size=3))
def test_pc_engine_shaped_captures_decode_command_for_command(tmp_path, cmds):
    path = tmp_path / "pce.dsl"
    exp = gen_pce.write(path, cmds)
    a = core.analyze(parsers.parse(str(path), command_set="pce"))
    got = decoded_commands(a)
    assert [g["cdb"] for g in got] == [c.cdb for c in cmds]
    assert [g["status"] for g in got] == [[c.status] for c in cmds]      # a lost REQ's byte is read at ACK
    assert [g["message_in"] for g in got] == [[0x00]] * len(cmds)
    assert a.ios["data_bytes"].to_list() == [len(c.data) for c in cmds]
    assert a.ios["command"].to_list() == [scsi.opcode_name(c.cdb[0], command_set="pce") for c in cmds]
    assert a.ios["status"].to_list() == [scsi.status_name(c.status) for c in cmds]
    assert a.ios["complete"].to_list() == [True] * len(cmds) and a.ios_completed == len(cmds)
    assert a.anomalies["kind"].to_list() == ["SEL RELEASED BEFORE BSY"] * len(cmds)
    assert [g["phases"]["SELECTION"] for g in got] == [[s] for s in zip(exp.selections_ns, exp.selection_ends_ns)]
    idle = a.segments.filter(pl.col("phase") == "CONNECTED, NO TRANSFER")
    spans = set(idle.select("start_ns", "end_ns").iter_rows())
    assert {s for s in exp.seeks_ns if s[1] - s[0] >= 10_000} <= spans   # shorter: a target switching its lines
    # idle lines shorter than 10 us are a target switching its lines: DATA OUT by the SCSI-2 tables, no bytes
    out = a.segments.filter(pl.col("phase") == "DATA OUT")
    assert ((out["end_ns"] - out["start_ns"]) < 10_000).all() and out["bytes"].fill_null(0).sum() == 0
    assert "ARBITRATION" not in a.segments["phase"].to_list()
    assert a.source["lines_inverted"] == ["BSY", "SEL", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]


def test_the_report_says_which_lines_were_inverted_and_names_vendor_opcodes(tmp_path):
    path = tmp_path / "pce.dsl"
    gen_pce.write(path, [gen_pce.Command([0xDE, 0, 0, 0, 0, 0, 0, 0, 0, 0], data=[1, 2, 3, 4])])
    out = tmp_path / "s.json"
    ios = tmp_path / "ios.csv"
    assert cli.main(["analyze", str(path), "--command-set", "pce", "--json", str(out), "--ios", str(ios)]) == 0
    s = json.loads(out.read_text())
    assert "read inverted" in s["source"]["lines_polarity_reason"] and "SEL" in s["source"]["lines_polarity_reason"]
    assert any("read inverted" in n for n in s["notes"])
    assert s["ios_completed"] == 1
    assert "Read TOC (PC Engine)" in ios.read_text()
    assert cli.main(["analyze", str(path), "--ios", str(ios)]) == 0          # without the set: the standard name
    assert "Unknown 0xde" in ios.read_text()
    # attribution taps the analysis' first read: it must see the lines as the analysis used them
    attr = tmp_path / "attr.json"
    assert cli.main(["attribute", str(path), "--json", str(attr)]) == 0
    totals = json.loads(attr.read_text())["totals"]
    assert totals["target_ns"] > 0 and totals["initiator_ns"] > 0


def test_a_capture_begun_before_power_up_is_still_read_the_other_way(tmp_path):
    """A boot capture: every line low until the bus is powered (40 % of it here): RST and SEL
    read asserted for most, not nearly all, of the capture; the unpowered time is RESET."""
    cmds = [gen_pce.Command([0x08, 0, 0, 0x10, 1, 0], data=list(range(16)), seek=20000)]
    samples, _ = gen_pce.capture(cmds, unpowered=30000)
    path = tmp_path / "boot.dsl"
    gen_pce.gen_logic.write_dsl(path, samples, dict(enumerate(gen_pce.PROBES)), gen_pce.HZ)
    a = core.analyze(parsers.parse(str(path)))
    assert a.source["lines_inverted"] == ["BSY", "SEL", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]
    first = a.segments.row(0, named=True)
    assert (first["phase"], first["start_ns"], first["end_ns"]) == ("RESET", 0, 30000 * gen_pce.PERIOD_NS)
    assert a.ios["opcode"].to_list() == [0x08] and a.ios["data_bytes"].to_list() == [16] and a.ios_completed == 1


def test_sel_inside_a_connection_is_the_initiators_abort(tmp_path):
    """PC Engine scsitest 6-9 and 14: SEL asserted during DATA IN (the drive drains a few bytes,
    then drops BSY), and during a COMMAND phase the drive holds while playing (BSY drops and
    rises, the abort command 0xFF follows, closed with STATUS and MESSAGE IN)."""
    path = tmp_path / "pce.dsl"
    cmds = [gen_pce.Command([0x08, 0, 9, 0xDF, 2, 0], data=list(range(20)), abort="data", abort_after=5, drain=3),
            gen_pce.Command([0xD9, 3, 0, 0, 0x12, 0x34, 0, 0, 0, 0], abort="command", seek=30000),
            gen_pce.Command([0x08, 0, 9, 0xDF, 2, 0], data=[1, 2])]
    gen_pce.write(path, cmds)
    a = core.analyze(parsers.parse(str(path), command_set="pce"))
    ios = a.ios
    assert ios["opcode"].to_list() == [0x08, 0xD9, 0xFF, 0x08]
    assert ios["command"].to_list()[1:3] == ["Audio Play", "Abort (PC Engine)"]
    assert ios["status"].to_list() == ["ABORTED (SEL)", "ABORTED (SEL)", "GOOD", "GOOD"]
    assert ios["data_bytes"].to_list() == [5 + 3, 0, 0, 2]          # the drained bytes count
    assert ios["complete"].to_list() == [False, False, True, True] and a.ios_completed == 2
    kinds = a.anomalies["kind"].to_list()
    assert kinds.count("ABORT BY SEL") == 2 and kinds.count("SEL RELEASED BEFORE BSY") == 3 and len(kinds) == 5
    assert "RESELECTION" not in a.segments["phase"].to_list()
    aborts = a.segments.filter(pl.col("phase") == "ABORT (SEL)")
    assert set(aborts["category"]) == {"Abort"} and set(aborts["io"]) == {0, 1}


def _times(rows: list[tuple[int, int]]) -> polarity.LineTimes:
    times = polarity.LineTimes()
    times.add(pl.DataFrame({"t_ns": [t for t, _ in rows], "lines": [v for _, v in rows]},
                           schema={"t_ns": pl.Int64, "lines": pl.UInt16}))
    return times


def test_polarity_decides_by_group_or_by_the_one_stuck_line():
    signals = ["BSY", "SEL", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]
    both = _times([(0, BIT["RST"] | BIT["SEL"]), (950, BIT["RST"]), (1000, 0)])
    assert polarity.decide(both, signals)[0] == signals                 # 95 % and 100 %: the group
    rst_only = _times([(0, BIT["RST"] | BIT["BSY"]), (990, 0), (1000, 0)])
    lines, why = polarity.decide(rst_only, signals)
    assert lines == ["RST"] and "only RST" in why
    powered_late = _times([(0, 0), (300, BIT["RST"] | BIT["SEL"]), (1000, 0)])    # 30 % unpowered, all low
    assert polarity.decide(powered_late, signals)[0] == signals
    normal = _times([(0, 0), (10, BIT["SEL"]), (20, BIT["BSY"]), (1000, 0)])
    assert polarity.decide(normal, signals) == ([], None)
    assert polarity.decide(_times([(0, BIT["SEL"]), (5, 0)]), ["BSY", "SEL"])[0] == ["BSY", "SEL"]   # no RST captured


def test_a_capture_read_as_captured_says_nothing_about_line_polarity(tmp_path):
    """Control lines named active-low (`/BSY`...) are inverted by the reader: the capture then
    reads right, nothing is inverted again and the JSON source is as before."""
    samples, _ = gen_pce.capture([gen_pce.Command([0x08, 0, 0, 1, 1, 0], data=[7, 8])])
    names = {k: ("/" + p if p in gen_pce.CONTROL else p) for k, p in enumerate(gen_pce.PROBES)}
    path = tmp_path / "marked.dsl"
    gen_pce.gen_logic.write_dsl(path, samples, names, gen_pce.HZ)
    a = core.analyze(parsers.parse(str(path)))
    assert "lines_inverted" not in a.source and not any("read inverted" in n for n in a.notes)
    assert a.ios_completed == 1 and a.ios["data_bytes"].to_list() == [2]


def test_more_transitions_than_kept_are_read_again_from_the_file(tmp_path, monkeypatch):
    path = tmp_path / "pce.dsl"
    gen_pce.write(path, [gen_pce.Command([0x08, 0, 0, 1, 1, 0], data=list(range(30)), seek=9000)] * 2)
    kept = core.analyze(parsers.parse(str(path)))
    monkeypatch.setattr(polarity, "KEEP_ROWS", 10)
    again = core.analyze(parsers.parse(str(path)))
    assert again.segments.equals(kept.segments) and again.ios.equals(kept.ios)
    assert again.capture.meta["req_ack_same_sample"] == kept.capture.meta["req_ack_same_sample"]


def test_a_second_read_of_a_logic_capture_counts_the_same(tmp_path):
    """The analysis, attribution and annotate each read the capture: the sampling counts
    (same-sample REQ/ACK edges, glitches) must not add up across reads."""
    path = tmp_path / "pce.dsl"
    gen_pce.write(path, [gen_pce.Command([0x08, 0, 0, 1, 1, 0], data=list(range(10)))])
    cap = parsers.parse(str(path))
    first = pl.concat(list(cap.chunks()))
    same = cap.meta["req_ack_same_sample"]
    assert same > 0
    assert pl.concat(list(cap.chunks())).equals(first) and cap.meta["req_ack_same_sample"] == same
