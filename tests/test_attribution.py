"""Overhead attribution: the waits put into a hand-built bus (test_attribution_synth) are
recovered step by step, with the right component and the period of the recurring pauses;
the result does not depend on how the transitions are chunked; totals tile the busy time."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scsitrace import cli, core
from scsitrace.parsers import ancot
from scsitrace.reports.attribution import attribute
from test_attribution_synth import SIGNALS, SynthBus, one_byte, regular, table11_analysis


def by_step(result):
    return {(s["step"], s["component"]): s for s in result["steps"]}


@pytest.fixture(scope="module")
def table11():
    synth, put = table11_analysis(3)
    analysis = core.analyze(synth.capture)   # the real bus state machine on the synthetic lines
    return analysis, put, attribute(analysis)


def test_bus_state_machine_sees_the_segments_we_built(table11):
    analysis, _, _ = table11
    synth, _ = table11_analysis(3)
    cols = ["start_ns", "end_ns", "phase", "category", "connection", "bytes"]
    assert analysis.segments.select(cols).equals(synth.segments.select(cols))


def test_table11_fixed_steps_recovered_with_their_component(table11):
    _, put, result = table11
    steps = by_step(result)
    expect = {
        ("arbitration", "neither"): 4_000, ("selection", "neither"): 3_000,
        ("rearbitration", "neither"): 3_000, ("reselection", "neither"): 3_000,
        ("pause before ID message", "target"): put.id_pause,
        ("ack of first command byte", "initiator"): put.first_cmd_ack,
        ("ack of remaining command bytes", "initiator"): 5 * put.rest_cmd_ack,
        ("pause before disconnect", "target"): put.disconnect_pause,
        ("ack of disconnect", "initiator"): put.disconnect_ack,
        (f"ack after first {put.fifo_byte} bytes", "initiator"): put.fifo_ack,
        ("ack of save pointer", "initiator"): put.save_ack,
        ("ack of disconnect after data", "initiator"): put.final_disconnect_ack,
        ("ack of status", "initiator"): put.status_ack,
        ("ack of command complete", "initiator"): put.complete_ack,
    }
    for key, value in expect.items():
        assert key in steps, key
        assert steps[key]["min_ns"] == steps[key]["max_ns"] == value, (key, steps[key])


@pytest.mark.parametrize("step,key", [("pause before first data byte", "first_data"),
                                      ("pause before save pointer", "save_pause"),
                                      ("pause before status", "status_pause")])
def test_table11_ranged_target_pauses(table11, step, key):
    _, put, result = table11
    s = by_step(result)[(step, "target")]
    drawn = put.drawn[key]
    assert (s["count"], s["min_ns"], s["max_ns"]) == (len(drawn), min(drawn), max(drawn))
    assert s["median_ns"] == int(round(float(np.median(drawn))))
    lo, hi = put.ranges[key]
    assert lo <= s["min_ns"] <= s["max_ns"] <= hi


def test_host_adapter_buffer_pauses_found_every_8192_bytes(table11):
    _, put, result = table11
    drawn = put.drawn["buffer"]
    assert result["periodic"] == [{"component": "initiator", "period_bytes": 8192, "count": len(drawn),
                                   "min_ns": min(drawn), "max_ns": max(drawn),
                                   "median_ns": int(round(float(np.median(drawn)))), "total_ns": sum(drawn)}]


def test_totals_tile_the_bus_busy_time(table11):
    analysis, _, result = table11
    busy = analysis.segments.filter(pl.col("phase") != "BUS FREE").select(
        (pl.col("end_ns") - pl.col("start_ns")).sum()).item()
    assert sum(result["totals"].values()) == busy
    assert result["totals"]["neither_ns"] == 3 * (4_000 + 3_000) + 6 * (3_000 + 3_000)
    # the regular bytes move at 250 ns each; the long waits are not transfer time
    data_bytes = 3 * 32768
    assert result["totals"]["transfer_ns"] == data_bytes * 250 - 6 * (100 + 125) - 6 * 100 - 6 * 100


def test_json_shape_is_the_contract(table11):
    _, _, result = table11
    for s in result["steps"]:
        assert {"step", "component", "count", "min_ns", "median_ns", "max_ns"} <= set(s)
        assert s["component"] in ("target", "initiator", "neither")
        assert all(isinstance(s[k], int) for k in ("count", "min_ns", "median_ns", "max_ns"))
    assert set(result["totals"]) == {"target_ns", "initiator_ns", "neither_ns", "transfer_ns"}
    for p in result["periodic"]:
        assert {"component", "period_bytes", "count", "min_ns", "max_ns"} <= set(p)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunk_rows=st.integers(min_value=1_000, max_value=40_000))
def test_chunking_does_not_change_the_result(chunk_rows):
    whole, _ = table11_analysis(1, seed=5)
    split, _ = table11_analysis(1, seed=5, chunk_rows=chunk_rows)
    assert attribute(split) == attribute(whole)


def write_pauses_analysis():
    """One 32 KB write: the disk pauses 150 us every 512 bytes after the first 8 KB, the host
    adapter 600 us at each 8 KB boundary (the two periodic pauses of DESIGN's simulator)."""
    bus = SynthBus()
    bus.start()
    bus.connect(0, 0, reselect=False, arb_ns=4_000, sel_ns=3_000, idle_ns=10_000)
    bus.phase("MESSAGE OUT", one_byte(20_000, 1_000))
    bus.phase("COMMAND", regular(10))
    w = regular(32768)
    w[0, 0] = 50_000
    b = np.arange(32768)
    w[(b >= 8192) & (b % 512 == 0), 0] = 150_000
    w[(b > 0) & (b % 8192 == 0), 1] = 600_000
    bus.phase("DATA OUT", w, change_ns=500)
    bus.phase("STATUS", one_byte(300_000, 40_000), change_ns=500)
    bus.phase("MESSAGE IN", one_byte(1_000, 20_000), change_ns=500)
    bus.release(2_000)
    return bus.analysis()


def test_two_periods_on_writes_disk_512_and_host_adapter_8192():
    result = attribute(write_pauses_analysis())
    periodic = {(p["component"], p["period_bytes"]): p for p in result["periodic"]}
    assert set(periodic) == {("target", 512), ("initiator", 8192)}
    assert periodic[("target", 512)]["count"] == (32768 - 8192) // 512
    assert periodic[("target", 512)]["min_ns"] == periodic[("target", 512)]["max_ns"] == 150_000
    assert periodic[("initiator", 8192)]["count"] == 3
    assert periodic[("initiator", 8192)]["min_ns"] == 600_000


def test_without_req_ack_says_why_and_shows_phases():
    synth, _ = table11_analysis(1, signals=[s for s in SIGNALS if s not in ("REQ", "ACK")])
    result = attribute(synth)
    assert result["available"] is False
    assert "REQ" in result["notes"][0]
    phases = {r["phase"]: r for r in result["phases_only"]}
    assert phases["DATA IN"]["count"] == 2
    assert result["totals"]["neither_ns"] == 4_000 + 3_000 + 2 * (3_000 + 3_000)


def test_cli_attribute_json_and_bad_input(tmp_path, capsys):
    synth, put = table11_analysis(1)
    trace = tmp_path / "t.ancot"
    ancot.write(str(trace), synth.capture.transitions(), signals=SIGNALS, tick_ns=1)
    out = tmp_path / "a.json"
    assert cli.main(["attribute", str(trace), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["periodic"][0]["period_bytes"] == put.period
    text = capsys.readouterr().out
    assert "pause before first data byte" in text and "8192" in text
    bad = tmp_path / "bad.ancot"
    head = trace.read_text().splitlines()[:40]
    bad.write_text("\n".join(head + ["999999999 1 0 0 0 0 0 zz 0 0"]) + "\n")
    assert cli.main(["attribute", str(bad)]) == 2
    assert "bad.ancot:" in capsys.readouterr().err


def test_tap_reads_the_trace_once_and_changes_nothing(tmp_path):
    from scsitrace.commands.analyze import load
    from scsitrace.commands.baseline import args_from
    from scsitrace.reports.attribution import Collector
    synth, _ = table11_analysis(1, seed=9)
    trace = tmp_path / "t.ancot"
    ancot.write(str(trace), synth.capture.transitions(), signals=SIGNALS, tick_ns=1)
    plain = attribute(load(args_from(str(trace), {})))
    passes = []

    def counting(capture):
        source = capture.chunks

        def chunks():
            passes.append(1)
            yield from source()
        capture.chunks = chunks

    collector = Collector()
    analysis = load(args_from(str(trace), {}), tap=lambda c: (counting(c), collector.tap(c)))
    assert collector.complete
    tapped = attribute(analysis, collector)
    assert passes == [1]                   # the text was parsed once
    assert tapped == plain


def test_stray_req_ack_outside_connections_are_counted_not_attributed():
    from test_attribution_synth import B
    bus = SynthBus()
    bus.start()
    bus._set(1_000, B["REQ"])            # a glitch on REQ while the bus is free
    bus._set(1_500, 0)
    bus.connect(0, 0, reselect=False, arb_ns=4_000, sel_ns=3_000, idle_ns=10_000)
    bus.phase("MESSAGE OUT", one_byte(20_000, 1_000))
    bus.phase("COMMAND", regular(6))
    bus.phase("STATUS", one_byte(300_000, 40_000), change_ns=500)
    bus.phase("MESSAGE IN", one_byte(1_000, 20_000), change_ns=500)
    bus.release(2_000)
    synth = bus.analysis()
    analysis = core.analyze(synth.capture)
    result = attribute(analysis)
    assert any(n.startswith("2 REQ/ACK edges outside any connection") for n in result["notes"])
    busy = analysis.segments.filter(pl.col("phase") != "BUS FREE").select(
        (pl.col("end_ns") - pl.col("start_ns")).sum()).item()
    assert sum(result["totals"].values()) == busy
    assert by_step(result)[("pause before ID message", "target")]["max_ns"] == 20_000


def test_edge_direction_from_its_own_line_when_another_line_changes_with_it():
    """REQ falling in the record where I/O rises (the target changing phase at once) is a
    REQ-down edge made by the target, not a REQ-up; the waits go to the right device."""
    from scsitrace import schema
    from scsitrace.reports import attribution
    bit = {name: 1 << b for name, b in schema.SIGNAL_BIT.items()}
    command = bit["BSY"] | bit["C/D"]
    lines = [command, command | bit["REQ"], command | bit["REQ"] | bit["ACK"],
             command | bit["ACK"] | bit["I/O"], command | bit["I/O"]]
    t = [0, 1000, 1100, 1250, 1300]
    col = attribution.Collector()
    col.feed(pl.DataFrame({"t_ns": t, "lines": lines}, schema={"t_ns": pl.Int64, "lines": pl.UInt16}))
    kept = pl.concat(col.kept)
    assert kept["code"].to_list() == [attribution.REQ_UP, attribution.ACK_UP, attribution.REQ_DOWN,
                                      attribution.ACK_DOWN]
    assert kept["dur_ns"].to_list()[1:] == [100, 150, 50]
    assert kept["g"].to_list() == [1, 1, 1, 1]          # one REQ-up: one byte
