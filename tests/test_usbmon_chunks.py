"""The usbmon pcap reader reads in bounded blocks: any block size (down to a few bytes,
records split across reads, one record per batch) gives the URB table, records and tables
of one read of the whole file; `chunks()` yields the same records in file order."""
from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from scsitrace import core, model
from scsitrace.parsers import _usbmon_scan, usbmon
from scsitrace.usb.urbs import from_start


def _tables_equal(a: pl.DataFrame, b: pl.DataFrame) -> None:
    assert a.schema == b.schema
    assert a.equals(b)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 3), st.integers(1, 4096), st.booleans(), st.sampled_from([64, 1000, 1 << 20]))
def test_any_read_size_gives_the_tables_of_one_read(tmp_path, seed, read_bytes, damaged, record_bytes):
    path = tmp_path / f"s{seed}.pcap"
    gen.write_pcap(path, gen.traffic(seed))
    if damaged:                                  # a truncated last record
        raw = path.read_bytes()
        path.write_bytes(raw[:-7])
    whole = usbmon._parse_pcap(str(path), strict=False, read_bytes=1 << 24)
    small = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes)
    saved, _usbmon_scan.BATCH_RECORD_BYTES = _usbmon_scan.BATCH_RECORD_BYTES, record_bytes
    try:        # batches with room for few records: a block is decoded in several rounds
        parts = list(small.chunks())
    finally:
        _usbmon_scan.BATCH_RECORD_BYTES = saved
    _tables_equal(whole.frames["urbs"], small.frames["urbs"])
    assert whole.records.as_json() == small.records.as_json()
    assert whole.anomalies.equals(small.anomalies)
    assert whole.meta == small.meta
    a, b = core.analyze(whole), core.analyze(small)
    assert a.ios.equals(b.ios)
    for name in ("srt", "commands", "devices", "srt_histogram"):
        assert a.table(name).equals(b.table(name)), name
    # the chunks, in file order, are the records (times absolute)
    assert len(parts) >= min(whole.frames["urbs"].height, 1)
    _tables_equal(from_start(pl.concat(parts), whole.meta["origin_ns"]), whole.frames["urbs"])


def by_passes(capture, options=None):
    """The analysis of the whole-capture passes (scsitrace/usb/analysis.py), which the
    streaming machine's is checked against (core.analyze would give the machine's own for a
    Bulk-Only capture read whole)."""
    from scsitrace import completeness
    from scsitrace.usb.analysis import passes_analysis
    a = passes_analysis(capture, options or core.Options())
    a.notes = list(a.notes) + completeness.unusual_notes(a)
    return a


def _same_analysis(a, b) -> None:
    assert a.ios.equals(b.ios)
    assert a.elapsed_ns == b.elapsed_ns and a.ios_completed == b.ios_completed and a.data_bytes == b.data_bytes
    assert a.notes == b.notes
    assert a.anomalies.equals(b.anomalies)
    assert a.categories["usb"].equals(b.categories["usb"])
    assert set(a.tables) == set(b.tables)
    for name in a.tables:     # srt, commands, srt_histogram, devices, latency, latency_histogram
        assert a.table(name).equals(b.table(name)), name
    assert a.segments.equals(b.segments), (a.segments, b.segments)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 60), st.integers(1, 5), st.integers(64, 8192), st.sampled_from([0, 1, 2, 3]))
def test_streamed_machine_gives_the_tables_of_the_whole_capture(tmp_path, n_commands, seed, read_bytes, cut):
    """A Bulk-Only capture analysed as a stream (any read size, records split across
    reads; the capture cut anywhere: commands and URBs left open) equals its analysis
    whole; a capture the machine does not cover (enumeration: control requests) falls
    back to the whole analysis."""
    from scsitrace.usb.streamed import streamed_analysis as streamed_commands
    path = tmp_path / f"b{seed}.pcap"
    gen.write_pcap(path, gen.bulk_traffic(n_commands, seed=seed, data_cap=64))
    if cut:
        raw = path.read_bytes()
        path.write_bytes(raw[:24 + (len(raw) - 24) * cut // 4])
    whole = usbmon._parse_pcap(str(path), strict=False)
    streamed = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes, stream_bytes=0)
    assert streamed.meta.get("streamable") and "urbs" not in dict.keys(streamed.columns)
    assert streamed_commands(usbmon._parse_pcap(str(path), strict=False, stream_bytes=0), None) is not None
    b = core.analyze(streamed)
    assert "urbs" not in dict.keys(streamed.columns)       # never built
    _same_analysis(by_passes(whole), b)
    assert whole.records.as_json() == streamed.records.as_json()
    assert whole.meta == {k: v for k, v in streamed.meta.items() if k != "streamable"}
    # enumeration, stalls, CLEAR HALT, a failed command: still streamed
    mixed = tmp_path / "mixed.pcap"
    gen.write_pcap(mixed, gen.traffic(seed))
    assert streamed_commands(usbmon._parse_pcap(str(mixed), strict=False, stream_bytes=0), None) is not None
    _same_analysis(by_passes(usbmon._parse_pcap(str(mixed), strict=False)),
                   core.analyze(usbmon._parse_pcap(str(mixed), strict=False, stream_bytes=0)))
    # started mid-command (bulk traffic before the first CBW): analysed whole
    late = tmp_path / "late.pcap"
    gen.write_pcap(late, gen.bulk_traffic(n_commands, seed=seed)[3 + 2 + 2:])
    _same_analysis(by_passes(usbmon._parse_pcap(str(late), strict=False)),
                   core.analyze(usbmon._parse_pcap(str(late), strict=False, stream_bytes=0)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 80), st.integers(1, 5), st.integers(64, 4096), st.sampled_from([1, 2, 5, 16]))
def test_streamed_rows_are_thinned_evenly_and_the_sink_gets_all(tmp_path, n_commands, seed, read_bytes, keep):
    """With at most `keep` per-command rows kept, the streamed analysis keeps every 2^k-th
    (by io, said in a note), the I/O sink gets every row in io order, and the tables, stage
    percentages and segment totals are still those of the whole capture."""
    path = tmp_path / f"k{seed}.pcap"
    gen.write_pcap(path, gen.bulk_traffic(n_commands, seed=seed, data_cap=64))
    whole = by_passes(usbmon._parse_pcap(str(path), strict=False))
    got = []
    saved, model.KEEP_IOS = model.KEEP_IOS, keep
    try:
        thin = core.analyze(usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes, stream_bytes=0),
                            core.Options(ios_sink=lambda frame, cap: got.append(frame)))
    finally:
        model.KEEP_IOS = saved
    assert thin.ios_streamed and not whole.ios_streamed
    sunk = pl.concat(got) if got else whole.ios.clear()
    assert sunk.equals(whole.ios)
    assert thin.ios.height <= keep
    stride = 1
    while whole.ios.filter(pl.col("io") % stride == 0).height > keep:
        stride *= 2
    assert thin.ios.equals(whole.ios.filter(pl.col("io") % stride == 0))
    thinned = [n for n in thin.notes if n.startswith("per-command rows:")]
    assert thinned == ([f"per-command rows: {thin.ios.height} of {whole.ios.height} kept for the reports (every "
                        f"{stride}th, evenly over the capture); all of them went to the I/O sink"] if stride > 1 else [])
    assert [n for n in thin.notes if n not in thinned and not n.startswith("segments:")] == whole.notes
    for name in whole.tables:          # the views too: built from every completed I/O (bandwidth.Collected)
        assert whole.table(name).equals(thin.table(name)), name
    assert whole.categories["usb"].equals(thin.categories["usb"])
    seg, all_seg = thin.segments, whole.segments
    assert seg.height <= keep and set(seg["phase"].unique()) <= set(all_seg["phase"].unique())
