"""The SG_IO commands through the kernel-log engine (`ScsilogEngine.feed_commands`): an strace
log's (or sg3_utils output's) commands split into batches anywhere (in io order, as the parser's blocks come) give
what the Python accumulators (command_stream.Tables with the driver's SRT, Tiler, Kept) give
for the whole log's commands in one frame: the command, latency and driver SRT tables, the
segments and stage totals, the kept rows (thinned alike), the completed count."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import core, model, parsers
from scsitrace.command_stream import Tables
from scsitrace.scsilog.analysis import ios_frame

from gen_sgio import strace_text
from test_sg3_native import CAPTURED
from test_sgio import calls
from test_scsilog_engine import accumulated, same_as_accumulated

TABLES = ("srt", "srt_driver", "commands", "srt_histogram", "devices", "latency", "latency_histogram")


def split_analysis(path, cuts, strict: bool = True):
    """The log's commands (read whole, in io order) analysed in the batches `cuts` make."""
    capture = parsers.parse(str(path), "sgio", strict=strict)
    whole = capture.frames["commands"].sort(pl.coalesce("start_ns", "end_ns"), "pos")
    bounds = sorted({c % (whole.height + 1) for c in cuts})
    slices = [whole[a:b] for a, b in zip([0, *bounds], [*bounds, whole.height])]
    capture.chunks = lambda: iter(slices)
    return core.analyze(capture, core.Options()), whole


def reference(cmds: pl.DataFrame, elapsed: int):
    """The whole log's commands in one frame through the Python accumulators."""
    return accumulated(ios_frame(cmds), elapsed, driver=True)


@settings(max_examples=50, deadline=None)
@given(calls(), st.lists(st.integers(0, 40), max_size=6), st.sampled_from([None, 3]), st.booleans())
def test_any_split_gives_the_whole_logs_tables(tmp_path_factory, cmds, cuts, keep, y):
    p = tmp_path_factory.mktemp("sg") / "t.strace"
    p.write_text(strace_text(cmds, ts="tt", T=True, y=y, f="bracket"))
    with pytest.MonkeyPatch.context() as mp:
        if keep is not None:        # the kept rows and segments thinned (every 2^k-th)
            mp.setattr(model, "KEEP_IOS", keep)
        a, whole = split_analysis(p, cuts)
        t, segments, totals, n_dev, kept = reference(whole, a.elapsed_ns)
    same_as_reference(a, t, segments, totals, n_dev, kept, keep is None)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, len(CAPTURED) - 1), st.integers(1, 150), st.lists(st.integers(0, 60), max_size=6),
       st.sampled_from([None, 2]))
def test_any_split_of_sg3_output_gives_the_whole_tables(tmp_path_factory, start, n, cuts, keep):
    """sg3_utils output: commands without times (no SERVICE), the driver's duration only."""
    p = tmp_path_factory.mktemp("sg3") / "t.sg3.txt"
    p.write_text("\n".join(["    inquiry cdb: [12 00 00 00 24 00]", *CAPTURED[start:start + n]]) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        if keep is not None:
            mp.setattr(model, "KEEP_IOS", keep)
        a, whole = split_analysis(p, cuts, strict=False)
        t, segments, totals, n_dev, kept = reference(whole, a.elapsed_ns)
    same_as_reference(a, t, segments, totals, n_dev, kept, True)


def same_as_reference(a, t, segments, totals, n_dev, kept, all_segments: bool):
    same_as_accumulated(a, (t, segments, totals, n_dev, kept), all_segments)
    assert a.data_bytes == (t.data_bytes if t.sized else None)


def test_timed_out_commands_are_timeout_anomalies_as_tables_says():
    """A whole command whose reason says it timed out is a TIMEOUT anomaly (Tables.add's rule);
    the sgio parsers word none so today, the engine keeps the rule for any that will."""
    from scsitrace import bandwidth, scsi
    from scsitrace.scsilog.analysis import _given_columns, _OP_KIND, _sgio_tables, _text
    cmds = pl.DataFrame({
        "device": ["/dev/sg1", "/dev/sg2", "/dev/sg1"], "cdb": [bytes([0x28] + [0] * 9), bytes(6), bytes([0x2a] + [0] * 9)],
        "tag": [None, None, None], "pos": [1, 2, 3], "start_ns": [0, 10, 20], "end_ns": [5, None, 30],
        "status": ["GOOD", None, None], "host_byte": [None, None, None],
        "reason": [None, "timed out (no reply)", "timed out"], "driver_ns": [4, None, None]},
        schema_overrides={"tag": pl.Int64, "host_byte": pl.Utf8})
    engine = _text().ScsilogEngine(dict(decoder=scsi._decoder()[1], op_kind=_OP_KIND, device=None, target=None,
                                        lun=None, series=True, rows=False, keep=model.KEEP_IOS,
                                        collect=bandwidth.KEEP_VIEW_IOS))
    engine.feed_commands(cmds.select(_given_columns(cmds.columns)), None)
    engine.finish(30)
    got = _sgio_tables(engine.results(), engine)
    want = Tables(driver=True)
    want.add(ios_frame(cmds))
    assert got.timeout_anomalies()[0].equals(want.timeout_anomalies()[0])
    assert got.timeout_anomalies()[0]["detail"].to_list() == ["Test Unit Ready on /dev/sg2", "Write(10) on /dev/sg1"]
    for name, table in want.tables(30).items():
        assert got.tables(30)[name].equals(table, null_equal=True), name
