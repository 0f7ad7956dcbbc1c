"""The kernel-log pairing (native/src/text/scsilog_pair.rs through scsitrace/scsilog/analysis.py
`pair`) against the polars pairing it replaced (tests/scsilog_pair_reference.py): the same
commands, reasons, io numbers and waiting starts for any events, whole or cut into blocks at
random edges, in time order or not."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.scsilog.analysis import commands, pair
from scsitrace.scsilog.events import EVENTS
import scsilog_pair_reference as ref

KINDS = ("start", "done", "error", "timeout", "sense")
COLUMNS = ["device", "tag", "cdb", "pos", "start_ns", "end_ns", "status", "host_byte", "reason", "io"]


@st.composite
def events(draw):
    n = draw(st.integers(0, 60))
    rows = []
    t = 0
    for pos in range(1, n + 1):
        t += draw(st.sampled_from([0, 1, 5, -3]))   # equal times, and a step back now and then
        kind = draw(st.sampled_from(KINDS))
        rows.append({
            "t_ns": t, "kind": kind, "device": draw(st.sampled_from(["0:0:0:0", "0:0:1:0", "1:0:0:7"])),
            "tag": draw(st.one_of(st.none(), st.integers(0, 3))),
            "cdb": draw(st.sampled_from([b"\x28\x00\x00\x00\x00\x10\x00\x00\x08\x00", b"\x00" * 6, None])),
            "host_byte": draw(st.sampled_from([None, "DID_OK", "DID_NO_CONNECT"])),
            "status": draw(st.sampled_from([None, "GOOD", "CHECK CONDITION"])),
            "rtn": draw(st.sampled_from([None, 0, 4181, 4182, 7])) if kind == "error" else None,
            "source": "ftrace", "pos": pos})
    return pl.DataFrame(rows, schema=EVENTS)


def _blocks(ev: pl.DataFrame, cuts: list[int], run):
    """Every block through `run` (pair or the reference), the carry handed on: (commands,
    final io)."""
    edges = sorted({0, ev.height, *(c % (ev.height + 1) for c in cuts)})
    carry, next_io, out = None, 0, []
    for a, b in zip(edges, edges[1:]):
        cmds, carry, next_io = run(ev.slice(a, b - a), carry, next_io)
        out.append(cmds)
    cmds, carry, next_io = run(ev.clear(), carry, next_io, final=True)
    out.append(cmds)
    assert carry.height == 0
    return pl.concat([c.select(COLUMNS) for c in out], how="vertical_relaxed").sort("io"), next_io


@settings(max_examples=300, deadline=None)
@given(events(), st.lists(st.integers(0, 80), max_size=5))
def test_pairing_equals_the_polars_pairing_whatever_the_blocks(ev, cuts):
    got, n_got = _blocks(ev, cuts, pair)
    want, n_want = _blocks(ev, cuts, ref.pair)
    assert n_got == n_want
    assert got.to_dicts() == want.to_dicts()
    # and cut anywhere, the same commands as the log whole
    whole, _ = _blocks(ev, [], pair)
    assert got.drop("io").sort("pos").to_dicts() == whole.drop("io").sort("pos").to_dicts() or \
        not ev["t_ns"].is_sorted()


@settings(max_examples=100, deadline=None)
@given(events())
def test_commands_keep_the_order_of_the_polars_pairing(ev):
    want = ref.pair(ev, None, 0, final=True)[0].drop("io")
    assert commands(ev).to_dicts() == want.select(commands(ev).columns).to_dicts()


@settings(max_examples=100, deadline=None)
@given(events(), st.integers(1, 60))
def test_waiting_starts_equal_the_polars_carry(ev, cut):
    a = pair(ev.head(cut), None, 0)
    b = ref.pair(ev.head(cut), None, 0)
    assert a[2] == b[2]
    assert a[1].sort("pos").to_dicts() == b[1].select(a[1].columns).sort("pos").to_dicts()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["0:0:1:0", "0:0:300:70000", "/dev/sg0", "1:2:3", "2:0:127:32767"]),
                          st.text(":0123456789-x", max_size=12)), max_size=20))
def test_target_and_lun_read_once_per_device_as_each_row_would(devices):
    from scsitrace.scsilog.analysis import _device_part
    d = pl.Series(devices, dtype=pl.Utf8)
    for k, dtype in ((2, pl.Int8), (3, pl.Int16)):
        want = d.to_frame("d").select(pl.col("d").str.split(":").list.get(k, null_on_oob=True).cast(dtype, strict=False))
        assert _device_part(d, k, dtype).to_list() == want["d"].to_list()
