"""The kernel-log engine (native/src/text/scsilog_engine.rs) fed a log's events split into
batches anywhere gives what the Python accumulators (command_stream.Tables, Tiler, Kept)
give for the whole log's commands paired in one pass: the command and latency tables, the
segments and stage totals, the kept rows (thinned alike); and the completions of a
completions-only log are the generator's counts, sense keys attached, whatever the split."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import core, model, parsers, tiling
from scsitrace.command_stream import Kept, Tables, Tiler
from scsitrace.scsilog.analysis import ios_frame, pair

from gen_scsilog import completions_log, dmesg_text, ftrace_text
from test_scsilog_completions import completions, expected, table
from test_scsilog_stream import events

TABLES = ("srt", "commands", "srt_histogram", "devices", "latency", "latency_histogram")


def split_analysis(path, cuts, **options):
    """The log's events (read whole) analysed in the batches that `cuts` (row indexes) make."""
    capture = parsers.parse(str(path), "scsilog")
    whole = pl.concat(list(capture.chunks()))
    bounds = sorted({c % (whole.height + 1) for c in cuts})
    slices = [whole[a:b] for a, b in zip([0, *bounds], [*bounds, whole.height])]
    capture.chunks = lambda: iter(slices)
    return core.analyze(capture, core.Options(**options)), whole


def reference(events: pl.DataFrame, elapsed: int):
    """The whole log's commands (paired in one pass) through the Python accumulators."""
    cmds = pair(events.filter(pl.col("kind") != "sense"), None, 0, final=True)[0]
    return accumulated(ios_frame(cmds), elapsed)


def accumulated(ios: pl.DataFrame, elapsed: int, driver: bool = False):
    """`ios` rows through the Python accumulators (`driver`: the SG_IO driver's SRT too)."""
    t, tiler, kept = Tables(driver=driver), Tiler(), Kept("io")
    t.add(ios)
    kept.add(ios)
    tiler.add(ios.filter(pl.col("paired")).select("device", "io", "start_ns", "end_ns",
                                                   pl.col("data_bytes").alias("bytes")), None)
    segments, totals, n_dev = tiler.finish(elapsed)
    return t, segments, totals, n_dev, kept.frame(ios.clear(), ["io"])


@settings(max_examples=60, deadline=None)
@given(events(), st.sampled_from(["ftrace", "dmesg"]), st.lists(st.integers(0, 200), max_size=8),
       st.sampled_from([None, 3]))
def test_any_split_gives_the_whole_logs_tables(tmp_path_factory, evs, fmt, cuts, keep):
    with pytest.MonkeyPatch.context() as mp:
        if keep is not None:        # the kept rows and segments thinned (every 2^k-th)
            mp.setattr(model, "KEEP_IOS", keep)
        same_as_reference(tmp_path_factory, evs, fmt, cuts, keep is None)


def same_as_accumulated(a, accumulated_whole, all_segments: bool):
    """The analysis `a` against the whole log's `accumulated` result: the command tables, the
    segments (all of them unless thinned), the kept rows, the categories; returns its Tables."""
    t, segments, totals, n_dev, kept = accumulated_whole
    expect = t.tables(a.elapsed_ns)
    for name in TABLES:
        assert a.table(name).equals(expect[name], null_equal=True), name
    if all_segments:     # (thinned, the kept ones are every 2^k-th in the order the batches tile them)
        assert a.segments.equals(segments, null_equal=True)
    assert a.ios.equals(kept, null_equal=True)
    assert a.ios_completed == t.paired
    categories = tiling.category_table(totals, n_dev, ("SERVICE", "IDLE"), a.elapsed_ns, t.paired)
    assert a.categories["scsilog"].equals(categories, null_equal=True)
    return t


def same_as_reference(tmp_path_factory, evs, fmt, cuts, all_segments: bool):
    p = tmp_path_factory.mktemp("log") / f"t.{fmt}.txt"
    kinds = [e for e in evs if fmt == "ftrace" or e[1] != "error"]
    p.write_text(ftrace_text(kinds) if fmt == "ftrace" else dmesg_text(kinds))
    a, whole = split_analysis(p, cuts)
    t = same_as_accumulated(a, reference(whole, a.elapsed_ns), all_segments)
    timeouts = a.anomalies.filter(pl.col("kind") == "TIMEOUT")
    assert timeouts.equals(pl.concat(t.timeout_anomalies()) if t.timeouts else timeouts.clear())


@settings(max_examples=40, deadline=None)
@given(completions(), st.lists(st.integers(0, 400), max_size=10))
def test_completions_of_any_split(tmp_path_factory, cmds, cuts):
    """A sense line whose end came in an earlier batch still finds it."""
    p = tmp_path_factory.mktemp("cl") / "messages.txt"
    p.write_text(completions_log(cmds))
    a, _ = split_analysis(p, cuts)
    assert table(a) == expected(cmds)
    assert not [n for n in a.notes if "Sense Key" in n]


@settings(max_examples=30, deadline=None)
@given(events(), st.lists(st.integers(0, 200), max_size=6), st.sampled_from(["0:0:1:0", None]),
       st.sampled_from([None, 0, 2]))
def test_selection_keeps_the_devices_tables(tmp_path_factory, evs, cuts, device, lun):
    """--device and --lun keep their devices' commands: the tables of those commands alone."""
    p = tmp_path_factory.mktemp("log") / "t.ftrace.txt"
    p.write_text(ftrace_text(evs))
    wanted = [e for e in evs if (device is None or ":".join(map(str, e[2])) == device)
              and (lun is None or e[2][3] == lun)]
    if not wanted or (device is None and lun is None):
        return
    a, _ = split_analysis(p, cuts, device=device, lun=lun)
    only = tmp_path_factory.mktemp("log") / "only.ftrace.txt"
    only.write_text(ftrace_text(wanted))
    b, _ = split_analysis(only, [])
    for name in ("srt", "commands", "latency"):
        assert a.table(name).equals(b.table(name), null_equal=True), name
