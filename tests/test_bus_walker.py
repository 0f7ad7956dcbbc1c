"""The compiled bus walk (native/src/bus/walker.rs) against its Python original
(tests/bus_walker_reference.py), run for run: random sequences of phase runs (any key of
BSY SEL RST MSG C/D I/O ATN, bytes with IDENTIFY, queue tags, extended and two-byte
messages, MESSAGE REJECT, completions, CDBs), fed whole and in random batches, and every
bus fixture: the segments, ios and anomalies frames and the counters must be equal."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from polars.testing import assert_frame_equal

import bus_walker_reference as reference
from scsitrace import core, parsers
from scsitrace.bus import machine
from scsitrace.bus.runs import BIT, RUN_SCHEMA

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
BSY, SEL, RST, MSG, CD, IO, ATN = (BIT[s] for s in ("BSY", "SEL", "RST", "MSG", "C/D", "I/O", "ATN"))
PHASE_KEYS = {
    "free": 0, "arb": BSY, "sel": SEL, "sel-bsy": SEL | BSY, "resel": SEL | IO, "resel-bsy": SEL | IO | BSY,
    "data-out": BSY, "data-in": BSY | IO, "command": BSY | CD, "status": BSY | CD | IO,
    "msg-out": BSY | MSG | CD, "msg-in": BSY | MSG | CD | IO, "reserved": BSY | MSG, "reserved-in": BSY | MSG | IO,
    "reset": RST,
}
# a connection's information phases, most of them in a legal order
CONNECTION = ["msg-out", "command", "data-in", "data-out", "status", "msg-in", "msg-in"]
SCRIPTS = {   # whole connections as a driver makes them
    "direct": ["free", "arb", "sel", "msg-out", "command", "data-in", "status", "msg-in", "free"],
    "disconnect": ["free", "arb", "sel-bsy", "msg-out", "command", "msg-in", "free"],
    "reconnect": ["free", "arb", "resel", "msg-in", "data-in", "status", "msg-in", "free"],
    # SEL released before the target raises BSY, no ATN (PC Engine CD-ROM); the drive seeks holding BSY
    "late-bsy": ["free", "sel", "free", "data-out", "command", "data-out", "data-in", "status", "msg-in", "free"],
    # the initiator asserts SEL inside a connection to abort (PC Engine CD-ROM): drained, or a new command
    "sel-abort": ["free", "sel", "command", "data-in", "resel", "sel", "data-in", "free"],
    "abort-then-command": ["free", "sel", "command", "sel", "command", "status", "msg-in", "free"],
}

message = st.one_of(
    st.integers(0x80, 0xFF).map(lambda m: [m]),                                      # IDENTIFY
    st.tuples(st.sampled_from([0x20, 0x21, 0x22]), st.integers(0, 255)).map(list),   # queue tag
    st.sampled_from([[0x20], [0x23, 1], [0x23], [0x07], [0x00], [0x0A], [0x0B], [0x02], [0x04], [0x03]]),
    st.lists(st.integers(0, 8), max_size=4).map(lambda p: [0x01, len(p), *p]),       # extended
    st.lists(st.integers(0, 8), max_size=3).map(lambda p: [0x01, len(p) + 2, *p]),   # extended, cut short
    st.lists(st.integers(0, 255), min_size=1, max_size=3),
)
messages = st.lists(message, max_size=3).map(lambda ms: [b for m in ms for b in m])
nexus = st.tuples(st.integers(0x80, 0x81), st.one_of(st.just(None), st.sampled_from([0x20, 0x21, 0x22])),
                  st.integers(0, 2)).map(lambda n: [n[0]] if n[1] is None else [n[0], n[1], n[2]])
cdb = st.tuples(st.sampled_from([0x28, 0x2A, 0x08, 0x0A, 0x0B, 0xA8, 0x88, 0x9E, 0x12, 0x00, 0x03, 0x60, 0xC0]),
                st.lists(st.integers(0, 255), max_size=17)).map(lambda c: [c[0], *c[1]])
anything = st.one_of(st.none(), st.just([]), messages, cdb)
INFO = {   # the bytes of a run, by what it is
    "msg-out": st.one_of(nexus, nexus.flatmap(lambda n: messages.map(lambda m: n + m)), messages, st.none(),
                         st.just([0x07])),
    "msg-in": st.one_of(nexus, st.sampled_from([[0x00], [0x02, 0x04], [0x04], [0x03], [0x07], [0x0A], [0x0B]]),
                        nexus.map(lambda n: n + [0x03]), messages, st.none(), st.just([0x07])),
    "command": st.one_of(cdb, st.none()),
    "status": st.one_of(st.sampled_from([[0x00], [0x02], [0x08], [0x18], [0x3E]]), st.integers(0, 255).map(lambda s: [s]),
                        st.none(), st.just([])),
}
ids = st.one_of(st.none(), st.integers(0, 255),
                st.tuples(st.integers(0, 7), st.integers(0, 7)).map(lambda ab: 1 << ab[0] | 1 << ab[1]),
                st.integers(0, 7).map(lambda a: 1 << a))
IDS = {   # the data bus at the end of arbitration and (re)selection: mostly initiator 7 and targets 0-1
    "arb": st.one_of(st.sampled_from([0x80, 0x01, 0x02, 0x81]), ids),
    "sel": st.one_of(st.sampled_from([0x81, 0x82, 0x01, 0x02]), ids),
}


@st.composite
def run_specs(draw) -> list[tuple[int, int | None, list | None]]:
    """(key, data bus, bytes) of runs: connections (arbitration, (re)selection, information
    phases, bus free), with stray keys of any lines, resets and reserved codes now and then."""
    names = []
    if draw(st.booleans()):                     # the trace begins inside a connection
        names += draw(st.lists(st.sampled_from(CONNECTION), max_size=4))
    for _ in range(draw(st.integers(0, 8))):
        what = draw(st.sampled_from(["connection"] * 4 + list(SCRIPTS) * 2 + ["stray", "reset", "reserved"]))
        if what in SCRIPTS:
            names += SCRIPTS[what]
        elif what == "stray":
            names.append(draw(st.integers(0, 0x7F)) & (BSY | SEL | RST | MSG | CD | IO | ATN))
        elif what in ("reset", "reserved"):
            names.append(draw(st.sampled_from(["reset", "reserved", "reserved-in"])))
        else:
            names.append("free")
            if draw(st.booleans()):
                names.append("arb")
            names.append(draw(st.sampled_from(["sel", "sel-bsy", "resel", "resel-bsy", "free"])))
            phases = draw(st.lists(st.sampled_from(CONNECTION), max_size=6))
            names += sorted(phases, key=CONNECTION.index) if draw(st.booleans()) else phases
    if draw(st.booleans()):
        names.append("free")
    specs = []
    for name in names:
        key = name if isinstance(name, int) else PHASE_KEYS[name]
        if key & BSY and draw(st.booleans()):
            key |= ATN
        kind = "sel" if isinstance(name, str) and name.startswith(("sel", "resel")) else name
        specs.append((key, draw(IDS.get(kind, ids)), draw(INFO.get(name, anything))))
    return specs


@st.composite
def runs_frames(draw) -> pl.DataFrame:
    specs = draw(run_specs())
    keys, dbs, infos = (list(c) for c in zip(*specs)) if specs else ([], [], [])
    n = len(keys)
    times = np.cumsum([0] + draw(st.lists(st.sampled_from([0, 1, 7, 50, 400, 1000]), min_size=n, max_size=n)))
    return pl.DataFrame({
        "start_ns": times[:-1], "end_ns": times[1:], "key": keys, "atn": [bool(k & ATN) for k in keys],
        "n_req": draw(st.lists(st.one_of(st.just(0), st.integers(0, 40)), min_size=n, max_size=n)),
        "n_ack": draw(st.lists(st.one_of(st.just(0), st.integers(0, 40)), min_size=n, max_size=n)),
        "first_req_ns": [None] * n, "db_last": dbs, "info_bytes": infos,
    }, schema=RUN_SCHEMA)


def assert_same(walker: machine.Walker, ref) -> None:
    assert_frame_equal(walker.segments(), ref.segments())
    assert_frame_equal(walker.ios_frame(), ref.ios_frame())
    assert_frame_equal(walker.anomalies(), ref.anomalies())
    counters = ("completions", "unmatched_completions", "ambiguous_reselections", "recovering")
    assert [getattr(walker, c) for c in counters] == [getattr(ref, c) for c in counters]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=runs_frames(), invert=st.booleans(), has_db=st.booleans(), has_bytes=st.booleans(),
       ack=st.booleans(), initiator=st.sampled_from([7, 0, 3, 12]), cuts=st.lists(st.integers(0, 60), max_size=5))
def test_walk_equals_the_reference_in_any_batches(runs, invert, has_db, has_bytes, ack, initiator, cuts):
    meta = {"initiator": initiator, "signals": ["BSY", "SEL", "MSG", "C/D", "I/O", "REQ"] + (["ACK"] if ack else [])}
    ref = reference.walk(runs, meta, invert, has_bytes, has_db)
    assert_same(machine.Walker(meta, invert, has_bytes, has_db).walk(runs), ref)
    batched = machine.Walker(meta, invert, has_bytes, has_db)
    edges = [0, *sorted(min(c, runs.height) for c in cuts), runs.height]
    for a, b in zip(edges, edges[1:]):
        batched.feed(runs.slice(a, b - a))      # empty batches included
    batched.finish()
    assert_same(batched, ref)
    one_by_one = machine.Walker(meta, invert, has_bytes, has_db)
    for i in range(runs.height):
        one_by_one.feed(runs.slice(i, 1))
    one_by_one.finish()
    assert_same(one_by_one, ref)


def bus_traces() -> list[Path]:
    return sorted([*FIXTURES.glob("bus/*/trace.*"), *FIXTURES.glob("examples/*"),
                   *FIXTURES.glob("captured/lsi_*/qemu-trace.txt")])


@pytest.mark.parametrize("path", bus_traces(), ids=lambda p: str(p.relative_to(FIXTURES)))
@pytest.mark.parametrize("polarity", ["auto", "low"])
def test_walk_of_every_bus_fixture_equals_the_reference(path, polarity, monkeypatch):
    walked = []
    walk = machine.Walker.walk
    monkeypatch.setattr(machine.Walker, "walk", lambda self, runs: walked.append((self, runs)) or walk(self, runs))
    a = core.analyze(parsers.parse(str(path)), core.Options(data_polarity=polarity))
    (walker, runs), = walked
    invert, has_db = a.source["data_polarity"] == "low", a.source["data_polarity"] is not None
    assert_same(walker, reference.walk(runs, a.capture.meta, invert, walker.has_bytes, has_db))


def test_bad_batches_are_errors_not_crashes():
    """A runs frame without a column the walk reads, or with another type, is refused by
    name; so is a batch after finish."""
    runs = pl.DataFrame({"start_ns": [0, 10], "end_ns": [10, 20], "key": [0, BSY], "atn": [False, False],
                         "n_req": [0, 0], "n_ack": [0, 0], "first_req_ns": [None, None], "db_last": [None, 7],
                         "info_bytes": [None, [1, 2]]}, schema=RUN_SCHEMA)
    w = machine.Walker({}, False, True, True)._walk
    with pytest.raises(ValueError, match="info_bytes"):
        w.feed(runs.drop("info_bytes"))
    with pytest.raises(TypeError, match="key"):
        w.feed(runs.with_columns(pl.col("key").cast(pl.Int64)))
    w.feed(runs)
    w.finish()
    with pytest.raises(ValueError, match="after finish"):
        w.feed(runs)


def test_unknown_values_are_nulls_not_markers():
    """What the walk does not know crosses as a null: an I/O begun before the trace has no
    start, a capture without REQ/ACK no byte counts, an I/O the trace ends inside no status
    nor end."""
    runs = pl.DataFrame({"start_ns": [0], "end_ns": [100], "key": [BSY | IO], "atn": [False], "n_req": [0],
                         "n_ack": [0], "first_req_ns": [None], "db_last": [None], "info_bytes": [None]},
                        schema=RUN_SCHEMA)
    ios = machine.Walker({}, False, False, False).walk(runs).ios_frame()
    assert ios.height == 1
    row = ios.row(0, named=True)
    assert row["start_ns"] is None and row["bytes"] is None and row["data_bytes"] is None
    assert row["partial"] and row["target"] is None and row["opcode"] is None and row["status"] is None
    assert row["end_ns"] is None and row["op"] == "read"     # no CDB: the DATA IN phase says which way
    segs = machine.Walker({}, False, False, False).walk(runs).segments()
    assert segs["bytes"].null_count() == segs.height and segs["target"].null_count() == segs.height
