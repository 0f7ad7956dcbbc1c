"""Bus state machine on hand-built traces: every pattern of issue 2, exact to the tick."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from busmodel import BusBuilder
from scsitrace import core
from scsitrace.reports import summary as summ

READ10 = bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 8, 0])
WRITE10 = bytes([0x2A, 0, 0, 0, 0x20, 0, 0, 0, 4, 0])
READ6 = bytes([0x08, 0, 0x01, 0x00, 2, 0])


def analyze(b: BusBuilder, **opts):
    return core.analyze(b.capture(), core.Options(**opts))


def compare(b: BusBuilder, a, ids=True):
    exp = b.expected_segments()
    cols = ["start_ns", "end_ns", "phase", "category"]
    if b.level == 3 and ids:
        cols += ["target", "connection", "io"]
    else:
        cols += ["connection"]
    if b.level >= 2:
        cols += ["bytes"]
    got = a.segments.select(cols)
    want = exp.select(cols)
    assert got.to_dicts() == want.to_dicts()


def assert_tiles(a):
    seg = a.segments
    assert seg["start_ns"][0] == 0
    assert (seg["start_ns"][1:].to_numpy() == seg["end_ns"][:-1].to_numpy()).all()
    assert seg["end_ns"][-1] == a.elapsed_ns
    s = summ.summary(a)
    assert sum(c["total_ns"] for c in s["categories"]) == a.elapsed_ns
    assert abs(sum(c["percent"] for c in s["categories"]) - 100) < 0.01


def two_targets(level, invert=False):
    b = BusBuilder(level=level, invert_db=invert)
    b.bus_free()
    io0, _ = b.command(3, READ10, disconnect_after_command=True)
    io1, _ = b.command(4, READ10, disconnect_after_command=True)
    b.reconnect(3, io0, data_in=bytes(range(16)), disconnect_again=True)
    b.reconnect(4, io1, data_in=bytes(16))
    b.reconnect(3, io0, data_in=bytes(16))
    b.finish()
    return b


@pytest.mark.parametrize("level", [1, 2, 3])
def test_interleaved_targets_with_disconnects(level):
    b = two_targets(level)
    a = analyze(b)
    compare(b, a)
    assert_tiles(a)
    assert a.ios_completed == 2
    assert a.anomalies.height == 0
    assert a.data_bytes == (48 if level >= 2 else None)
    if level == 3:
        ios = a.ios.sort("io")
        assert ios["target"].to_list() == [3, 4]
        assert ios["connections"].to_list() == [3, 2]
        assert ios["disconnects"].to_list() == [2, 1]
        assert ios["command"].to_list() == ["Read(10)", "Read(10)"]
        assert ios["lba"].to_list() == [4096, 4096]
        assert ios["status"].to_list() == ["GOOD", "GOOD"]


def test_category_totals_exact():
    b = two_targets(2)
    a = analyze(b)
    exp = b.expected_segments().with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"))
    want = dict(exp.group_by("category").agg(pl.col("d").sum()).iter_rows())
    got = {c["name"]: c["total_ns"] for c in summ.summary(a)["categories"] if c["total_ns"]}
    assert got == want
    cats = {c["name"]: c for c in summ.summary(a)["categories"]}
    assert cats["Bus Free"]["normalized_ns"] is None
    assert cats["Data Transfer"]["normalized_ns"] == want["Data Transfer"] / 2


def test_level1_multi_target_completions_counted_but_not_matched():
    a = analyze(two_targets(1))
    assert a.ios_completed == 2
    assert any("could not be tied" in n for n in a.notes)


def test_write_data_out_is_not_arbitration():
    b = BusBuilder(level=1)
    b.bus_free()
    b.command(2, WRITE10, data_out=bytes(2048))
    b.finish()
    a = analyze(b)
    compare(b, a)
    phases = a.segments["phase"].to_list()
    assert phases.count("ARBITRATION") == 1 and phases.count("DATA OUT") == 1


def test_scsi1_selection_without_arbitration_or_atn():
    b = BusBuilder(level=3)
    b.bus_free()
    b.command(0, READ6, atn=False, arbitrate=False, data_in=bytes(1024))
    b.finish()
    a = analyze(b)
    compare(b, a)
    io = a.ios.row(0, named=True)
    assert io["target"] == 0 and io["command"] == "Read(6)" and io["blocks"] == 2 and io["complete"]
    assert "MESSAGE OUT" not in a.segments["phase"].to_list()


def test_tagged_queuing_out_of_order():
    b = BusBuilder(level=3)
    b.bus_free()
    ioa, _ = b.command(5, READ10, tag=1, disconnect_after_command=True)
    iob, _ = b.command(5, WRITE10, tag=2, disconnect_after_command=True)
    b.reconnect(5, iob, tag=2, data_out=bytes(64))
    b.reconnect(5, ioa, tag=1, data_in=bytes(32))
    b.finish()
    a = analyze(b)
    compare(b, a)
    ios = a.ios.sort("io")
    assert ios["tag"].to_list() == [1, 2]
    assert ios["data_bytes"].to_list() == [32, 64]
    assert ios["complete"].all()


def test_reset_aborts_outstanding():
    b = BusBuilder(level=3)
    b.bus_free()
    b.command(1, READ10, disconnect_after_command=True)
    b.command(2, READ10, disconnect_after_command=True)
    b.reset()
    b.command(1, READ10, data_in=bytes(8))
    b.finish()
    a = analyze(b)
    compare(b, a)
    ios = a.ios.sort("io")
    assert ios["status"].to_list() == ["ABORTED (reset)", "ABORTED (reset)", "GOOD"]
    assert a.ios_completed == 1
    assert a.anomalies["kind"].to_list() == ["RESET"]
    names = [c["name"] for c in summ.summary(a)["categories"]]
    assert names[-1] == "Reset"


def test_reserved_phase_is_an_anomaly_and_walk_resumes_at_bus_free():
    b = BusBuilder(level=2)
    b.bus_free()
    io, conn = b.open_io(1)
    b.info("RESERVED", b"", 1, conn, io)
    b.info("DATA IN", bytes(4), 1, conn, io)
    b.bus_free()
    b.command(1, READ10, data_in=bytes(8))
    b.finish()
    a = analyze(b)
    assert a.anomalies["kind"].to_list() == ["RESERVED PHASE"]
    assert a.ios_completed == 1
    assert "Unknown" in [c["name"] for c in summ.summary(a)["categories"]]
    assert_tiles(a)


def test_line_skew_merged_into_following_phase():
    b = BusBuilder(level=2)
    b.bus_free()
    io, conn = b.open_io(1)
    b.info("COMMAND", READ10, 1, conn, io)
    b.info("DATA IN", bytes(16), 1, conn, io, skew_ns=100)     # 010 -> 001 passes 011 for 100 ns
    b.info("STATUS", b"\x00", 1, conn, io, skew_ns=150)       # 001 -> 011: I/O first is no new state
    b.info("DATA OUT", b"\x00", 1, conn, io, skew_ns=350)     # 011 -> 000 passes 010 for 350 ns
    b.info("STATUS", b"\x00", 1, conn, io)
    b.info("MESSAGE IN", b"\x00", 1, conn, io)
    b.bus_free()
    b.finish()
    a = analyze(b)
    compare(b, a)
    assert a.source["skew_merged"] == 2
    assert any("merged" in n for n in a.notes)
    # with no settle delay the transitional states are phases of their own
    raw = analyze(b, settle_ns=0)
    assert raw.segments.height == a.segments.height + 2


def test_inverted_data_bus_is_detected():
    b = two_targets(3, invert=True)
    a = analyze(b)
    compare(b, a)
    assert a.source["data_polarity"] == "low"
    forced = analyze(b, data_polarity="high")
    assert forced.ios.height == 0 or forced.ios["target"].drop_nulls().to_list() != [3, 4]


def test_trace_starting_and_ending_inside_connections():
    b = BusBuilder(level=3)
    b.bus_free()
    io0, _ = b.command(3, READ10, disconnect_after_command=True)
    b.reconnect(3, io0, data_in=bytes(8))
    b.command(4, READ10, disconnect_after_command=True)
    b.finish()
    tr = b.transitions()
    # cut inside the first connection's COMMAND phase and before the last disconnect
    cmd_start = b.expected_segments().filter(pl.col("phase") == "COMMAND")["start_ns"][0]
    cut = tr.filter((pl.col("t_ns") >= cmd_start + 1000)).with_columns(pl.col("t_ns") - (cmd_start + 1000))
    cap = b.capture()
    cap.chunks = lambda: iter([cut])
    a = core.analyze(cap)
    assert a.anomalies.height == 0
    assert a.ios["partial"].to_list()[0] is True
    assert a.ios_completed == 1
    assert any("began before" in n for n in a.notes)
    assert any("still in progress" in n for n in a.notes)
    assert_tiles(a)


def test_bsy_glitch_shorter_than_settle_is_ignored():
    b = BusBuilder(level=1)
    b.bus_free()
    b.emit(BSY=1)
    b.wait(100)
    b.emit(BSY=0)
    b.wait(3000)
    b.command(1, READ10, data_in=bytes(4))
    b.finish()
    a = analyze(b)
    assert a.anomalies.height == 0
    assert a.segments["phase"][0] == "BUS FREE" and a.segments["end_ns"][0] > 3000
    long_glitch = analyze(b, settle_ns=50)
    assert "ARBITRATION WITHOUT SELECTION" in long_glitch.anomalies["kind"].to_list()


def test_chunked_reduction_equals_whole():
    b = two_targets(3)
    whole = analyze(b)
    tr = b.transitions()
    for size in (1, 2, 7, 50):
        cap = b.capture()
        cap.chunks = lambda size=size: (tr.slice(i, size) for i in range(0, tr.height, size))
        a = core.analyze(cap)
        assert a.segments.equals(whole.segments), size
        assert a.ios.equals(whole.ios)


# ------------------------------------------------------------------ property test

io_spec = st.fixed_dictionaries({
    "target": st.integers(0, 6),
    "write": st.booleans(),
    "nbytes": st.integers(1, 40),
    "mode": st.sampled_from(["direct", "disconnect", "twice"]),
})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(level=st.sampled_from([1, 2, 3]), specs=st.lists(io_spec, min_size=1, max_size=6),
       order=st.randoms(use_true_random=False), invert=st.booleans())
def test_random_legal_sequences_match_model(level, specs, order, invert):
    b = BusBuilder(level=level, invert_db=invert and level == 3)
    b.bus_free()
    pending = []
    used = set()
    for spec in specs:
        if spec["target"] in used:  # one untagged I/O per target at a time
            continue
        used.add(spec["target"])
        data = bytes(spec["nbytes"])
        kw = {"data_out": data} if spec["write"] else {"data_in": data}
        cdb = WRITE10 if spec["write"] else READ10
        if spec["mode"] == "direct":
            b.command(spec["target"], cdb, **kw)
        else:
            io, _ = b.command(spec["target"], cdb, disconnect_after_command=True)
            pending.append((spec, io, kw))
    order.shuffle(pending)
    for spec, io, kw in pending:
        if spec["mode"] == "twice":
            b.reconnect(spec["target"], io, disconnect_again=True, **kw)
        b.reconnect(spec["target"], io, **kw)
    b.finish()
    a = analyze(b)
    compare(b, a, ids=True)
    assert a.ios_completed == b.completed
    assert a.anomalies.height == 0
    if level >= 2:
        assert a.data_bytes == b.data_bytes
    if level == 3:
        assert a.ios.height == b.n_io and a.ios["complete"].all()
    assert_tiles(a)


def test_selection_timeout_unexpected_bus_free_and_message_reject():
    b = BusBuilder(level=3)
    b.bus_free()
    b.arbitrate(7, 0, 5)
    b.select(5, 0)              # nobody answers: the initiator gives up
    b.bus_free()
    b.n_conn += 1
    io, conn = b.open_io(2)
    b.info("COMMAND", READ10, 2, conn, io)
    b.info("MESSAGE IN", b"\x07", 2, conn, io)   # the target rejects something
    b.info("DATA IN", bytes(8), 2, conn, io)
    b.bus_free()                                # ... and drops off the bus mid-transfer
    b.finish()
    a = analyze(b)
    kinds = a.anomalies.sort("t_ns")["kind"].to_list()
    assert kinds == ["SELECTION TIMEOUT", "MESSAGE REJECT", "UNEXPECTED BUS FREE"]
    t_reject = a.anomalies.filter(pl.col("kind") == "MESSAGE REJECT")["t_ns"][0]
    assert t_reject == a.segments.filter(pl.col("phase") == "MESSAGE IN")["start_ns"][0]
    io_row = a.ios.row(0, named=True)
    assert io_row["status"] == "ABORTED (unexpected bus free)" and not io_row["complete"]
    assert a.ios_completed == 0
    assert_tiles(a)
