"""One engine per layer: the usb, kernel-log (and SG_IO), block and bus analyses are
streaming engines, and a whole capture is the same engine fed one batch. Whatever the
boundaries between the batches (drawn at random, uneven, one record per batch included),
every declared table, the segments, the stage percentages, the rows and the notes equal
those of one batch. The batches are cut from the records the parser read (its chunks put end
to end), so only the boundaries differ between the two runs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from gen_scsilog import dmesg_text, ftrace_text
from gen_sgio import strace_text
from scsitrace import bandwidth, core, parsers, series
from scsitrace.command_stream import Tables
from scsitrace.parsers import usbmon
from test_scsilog_stream import events, same
from test_sgio import calls
from test_usbmon_chunks import by_passes

SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _cuts(draw, n: int) -> list[int]:
    """Sorted distinct cut points inside [1, n-1] (none: one batch)."""
    if n < 2:
        return []
    return sorted(set(draw(st.lists(st.integers(1, n - 1), max_size=min(n - 1, 12)))))


def _ranges(n: int, cuts: list[int]) -> list[tuple[int, int]]:
    edges = [0, *cuts, n]
    return list(zip(edges[:-1], edges[1:]))


def _fed(capture, split) -> None:
    """`capture` read to its end now (its records complete), then handed to the analysis as
    the batches `split` makes of everything its chunks gave."""
    parts = list(capture.chunks())
    batches = split(parts)
    capture.chunks = lambda: iter(batches)


def _all_of(a) -> dict:
    out = {name: a.table(name) for name in a.tables}
    out.update(ios=a.ios, segments=a.segments, anomalies=a.anomalies,
               **{f"categories.{k}": v for k, v in a.categories.items()})
    return out


def _same_tables(a, b) -> None:
    ta, tb = _all_of(a), _all_of(b)
    assert ta.keys() == tb.keys()
    for name in ta:
        assert ta[name].equals(tb[name], null_equal=True), (name, ta[name], tb[name])
    assert (a.elapsed_ns, a.ios_completed, a.data_bytes, a.notes) == (b.elapsed_ns, b.ios_completed, b.data_bytes,
                                                                      b.notes)


# ---------------------------------------------------------------- usb


def _usb_split(cuts):
    def split(parts):
        whole = pl.concat(parts)
        n = whole.height
        return [whole[lo:hi] for lo, hi in _ranges(n, [c for c in cuts if c < n])]
    return split


@SLOW
@given(st.data(), st.integers(1, 40), st.integers(1, 5), st.booleans())
def test_usb_any_batch_boundaries_give_the_tables_of_one_batch(tmp_path, data, n_commands, seed, mixed):
    """A Bulk-Only capture (plain, or with enumeration, a stall, CLEAR HALT and a failed
    command) fed to the streaming machine in batches cut anywhere: the tables of one batch,
    and of the capture analysed whole."""
    path = tmp_path / f"u{seed}.pcap"
    gen.write_pcap(path, gen.traffic(seed, data_cap=64) if mixed else gen.bulk_traffic(n_commands, seed=seed,
                                                                                        data_cap=64))
    one = usbmon._parse_pcap(str(path), strict=False, stream_bytes=0)
    cut = usbmon._parse_pcap(str(path), strict=False, stream_bytes=0)
    n = pl.concat(list(usbmon._parse_pcap(str(path), strict=False, stream_bytes=0).chunks())).height
    cuts = data.draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=12).map(lambda c: sorted(set(c))))
    _fed(one, _usb_split([]))
    _fed(cut, _usb_split(cuts))
    a, b = core.analyze(one), core.analyze(cut)
    assert "urbs" not in dict.keys(cut.frames)             # the streaming machine took every batch
    _same_tables(a, b)
    _same_tables(by_passes(usbmon._parse_pcap(str(path), strict=False)), a)     # the whole-capture passes


def test_usb_read_whole_keeps_every_row_and_segment(tmp_path):
    """A Bulk-Only capture read whole goes to the streaming machine as one batch, which then
    keeps every command and segment (the passes' rows and segments), however small KEEP_IOS."""
    from scsitrace import model
    path = tmp_path / "w.pcap"
    gen.write_pcap(path, gen.bulk_traffic(30, seed=2, data_cap=64))
    passes = by_passes(usbmon._parse_pcap(str(path), strict=False))
    saved, model.KEEP_IOS = model.KEEP_IOS, 4
    try:
        capture = usbmon._parse_pcap(str(path), strict=False)
        a = core.analyze(capture)
    finally:
        model.KEEP_IOS = saved
    assert "urbs" in dict.keys(capture.frames)           # read whole, analysed by the machine:
    from scsitrace.usb import streamed
    assert streamed.streamed_analysis(usbmon._parse_pcap(str(path), strict=False), core.Options()) is not None
    assert a.ios.height == passes.ios.height == 30
    _same_tables(a, passes)


@SLOW
@given(st.data(), st.integers(1, 3))
def test_command_tables_of_any_batches_are_those_of_one(tmp_path, data, seed):
    """The command layers' table engine (`command_stream.Tables`, which the usb whole path
    feeds one batch) fed a usb capture's commands in batches cut anywhere."""
    path = tmp_path / f"t{seed}.pcap"
    gen.write_pcap(path, gen.traffic(seed, repeats=data.draw(st.integers(1, 6))))
    a = by_passes(usbmon._parse_pcap(str(path), strict=False))
    ios = a.ios
    cuts = _cuts(data.draw, ios.height)
    t = Tables()
    for lo, hi in _ranges(ios.height, cuts):
        t.add(ios.slice(lo, hi - lo))
    got = t.tables(a.elapsed_ns)
    others = {tb.name for tb in (*series.SERIES_TABLES, *bandwidth.TABLES)}   # the layer's, not Tables'
    assert set(got) == set(a.tables) - others
    for name, frame in got.items():
        assert frame.equals(a.table(name), null_equal=True), name


# ---------------------------------------------------------------- kernel log and SG_IO


def _frame_split(cuts):
    def split(parts):
        whole = pl.concat(parts) if parts else pl.DataFrame()
        return [whole.slice(lo, hi - lo) for lo, hi in _ranges(whole.height, [c for c in cuts if c < whole.height])]
    return split


def _log_pair(path, fmt, cuts, **options):
    one, cut = parsers.parse(str(path), fmt), parsers.parse(str(path), fmt)
    for capture, c in ((one, []), (cut, cuts)):
        if capture.chunks is not None:
            _fed(capture, _frame_split(c))
        else:       # whole commands in a frame: the analysis reads them as one batch
            frame = capture.frames["commands"]
            capture.chunks = (lambda f, c: lambda: iter(_frame_split(c)([f])))(frame, c)
    opts = core.Options(**options)
    return core.analyze(one, opts), core.analyze(cut, opts)


@settings(max_examples=40, deadline=None)
@given(events(), st.sampled_from(["ftrace", "dmesg"]), st.lists(st.integers(1, 80), max_size=12),
       st.sampled_from([{}, {"window": (2_000_000, 20_000_000)}, {"device": "0:0:1:0"}]))
def test_kernel_log_any_batch_boundaries(tmp_path_factory, evs, fmt, cuts, options):
    p = tmp_path_factory.mktemp("log") / f"t.{fmt}.txt"
    kinds = [e for e in evs if fmt == "ftrace" or e[1] != "error"]
    p.write_text(ftrace_text(kinds) if fmt == "ftrace" else dmesg_text(kinds))
    try:
        a, b = _log_pair(p, "scsilog", sorted(set(cuts)), **options)
    except core.UsageError:          # a filter the log has nothing for
        return
    same(a, b)
    _same_tables(a, b)


@settings(max_examples=30, deadline=None)
@given(calls(), st.lists(st.integers(1, 20), max_size=8))
def test_sgio_any_batch_boundaries(tmp_path_factory, cmds, cuts):
    p = tmp_path_factory.mktemp("sg") / "t.strace"
    p.write_text(strace_text(cmds, ts="tt", T=True, y=False, f="bracket", other=True))
    a, b = _log_pair(p, "sgio", sorted(set(cuts)))
    same(a, b)
    _same_tables(a, b)


# ---------------------------------------------------------------- block (btt machine)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(1, 80), st.integers(0, 10**6), st.data())
def test_block_any_batch_boundaries(tmp_path_factory, n_ios, seed, data):
    """The btt machine fed a blktrace's events in batches cut anywhere (down to one event):
    every declared table, the segments, rows and notes of the same events in one batch."""
    import gen_blktrace
    from scsitrace.parsers import blktrace as bt
    paths = gen_blktrace.write(gen_blktrace.workload(n_ios, seed=seed), str(tmp_path_factory.mktemp("bt") / "t"))
    one, cut = bt.parse(paths[0], eager=True), bt.parse(paths[0], eager=True)
    events = one.columns["events"]
    n = len(next(iter(events.values())))
    cuts = _cuts(data.draw, n)
    for capture, c in ((one, []), (cut, cuts)):
        cols = capture.columns["events"]
        capture.chunks = (lambda cols, c: lambda: iter(
            [{k: v[lo:hi] for k, v in cols.items()} for lo, hi in _ranges(n, c)]))(cols, c)
    _same_tables(core.analyze(one), core.analyze(cut))


# ---------------------------------------------------------------- bus (phase runs and Walker)

BUS_FIXTURES = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "fixtures" / "bus").glob("*/trace.*"))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(BUS_FIXTURES), st.data())
def test_bus_any_batch_boundaries(path, data):
    """A bus capture's transitions fed to the bus machine in batches cut anywhere: every
    declared table, the segments, rows and notes of the same transitions in one batch."""
    one, cut = parsers.parse(path), parsers.parse(path)
    whole = pl.concat(list(one.chunks()))
    list(cut.chunks())
    cuts = _cuts(data.draw, whole.height)
    one.chunks = lambda: iter([whole])
    cut.chunks = lambda: iter([whole.slice(lo, hi - lo) for lo, hi in _ranges(whole.height, cuts)])
    _same_tables(core.analyze(one), core.analyze(cut))


# ---------------------------------------------------------------- the one approximation


def test_past_2m_samples_only_percentiles_are_approximate_and_said():
    """A latency record past 2 M samples (`Samples`' exact cap): count, min, max, total and
    mean stay exact, the percentiles are at most 0.1 % below the nearest-rank ones, and the
    note names the records; the histograms and the other tables stay exact."""
    from scsitrace import stats
    from scsitrace.command_stream import inexact_note
    n = (1 << 21) + 1
    rng = np.random.default_rng(7)
    times = rng.integers(20_000, 90_000_000, n, dtype=np.int64)
    ios = pl.DataFrame({"io": np.arange(n, dtype=np.int64), "start_ns": np.arange(n, dtype=np.int64),
                        "device": "0:0:0:0", "reason": pl.Series([None] * n, dtype=pl.Utf8),
                        "paired": np.ones(n, bool), "data_bytes": np.full(n, 512, np.int64),
                        "response_ns": times, "opcode": np.full(n, 0x28, np.int64), "command": "Read(10)"})
    t = Tables()
    t.add(ios)
    got = t.tables(10**9)
    want = stats.of_samples(times)
    for name in ("latency", "srt"):
        row = got[name].row(0, named=True)
        assert {k: row[k] for k in ("n", "min_ns", "max_ns", "total_ns")} == \
            {k: want[k] for k in ("n", "min_ns", "max_ns", "total_ns")}
        assert row["avg_ns"] == pytest.approx(want["avg_ns"], rel=1e-12)
        for c in stats.PERCENTILE_COLUMNS:
            assert want[c] * (1 - 1e-3) <= row[c] <= want[c], (name, c)
    assert inexact_note(t) == ["percentiles of latency, srt opcode 0x28: over 2 M samples, read from a log-linear "
                               "histogram (at most 0.1 % low); count, min, max and mean exact"]
    assert got["latency_histogram"].equals(stats.histogram_table({"response": times}))     # counts: exact
    assert got["commands"]["commands"].to_list() == [n]
    assert got["devices"].select("commands", "paired", "data_bytes").row(0) == (n, n, 512 * n)


# ---------------------------------------------------------------- one null convention

CAPTURED = Path(__file__).resolve().parent.parent / "fixtures" / "captured"


def test_no_sentinel_reaches_the_frames_of_the_command_layers():
    """The compiled passes mark unknown values with i64::MIN inside; past the boundary every
    frame of every layer (declared tables, rows, segments) has nulls."""
    NULL = -(1 << 63)
    paths = (sorted(CAPTURED.glob("*/usbmon.txt")) + sorted(CAPTURED.glob("*/ftrace.txt"))[:3]
             + sorted(CAPTURED.glob("*/*.blktrace.0"))[:3] + sorted(CAPTURED.glob("*/qemu-trace.txt"))[:2]
             + [Path(p) for p in BUS_FIXTURES])
    assert paths
    for path in paths:
        a = core.analyze(parsers.parse(str(path), strict=False))
        for name, frame in _all_of(a).items():
            for col, dtype in frame.schema.items():
                if dtype in (pl.Int64, pl.Int32) and frame.height:
                    assert not (frame[col].cast(pl.Int64) == NULL).any(), (path.parent.name, name, col)
