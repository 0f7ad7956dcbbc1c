"""The usbmon pcap reader reads in bounded blocks: any block size (down to a few bytes,
records split across reads, one record per batch) gives the URB columns, records and tables
of one read of the whole file; `chunks()` yields the same records in file order."""
from __future__ import annotations

from dataclasses import fields

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from scsitrace import core
from scsitrace.parsers import usbmon
from scsitrace.usb.urbs import UrbColumns, concat_urbs


def _columns_equal(a: UrbColumns, b: UrbColumns) -> None:
    for f in fields(UrbColumns):
        if f.name not in ("data_buf", "data_at"):
            assert np.array_equal(getattr(a, f.name), getattr(b, f.name)), f.name
    rows = np.arange(len(a))
    assert np.array_equal(a.data_rows(rows), b.data_rows(rows))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 3), st.integers(1, 4096), st.booleans())
def test_any_read_size_gives_the_tables_of_one_read(tmp_path, seed, read_bytes, damaged):
    path = tmp_path / f"s{seed}.pcap"
    gen.write_pcap(path, gen.traffic(seed))
    if damaged:                                  # a truncated last record
        raw = path.read_bytes()
        path.write_bytes(raw[:-7])
    whole = usbmon._parse_pcap(str(path), strict=False, read_bytes=1 << 24)
    small = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes)
    _columns_equal(whole.columns["urbs"], small.columns["urbs"])
    assert whole.records.as_json() == small.records.as_json()
    assert whole.anomalies.equals(small.anomalies)
    assert whole.meta == small.meta
    a, b = core.analyze(whole), core.analyze(small)
    assert a.ios.equals(b.ios)
    for name in ("srt", "commands", "devices", "srt_histogram"):
        assert a.table(name).equals(b.table(name)), name
    # the chunks, in file order, are the records (times absolute)
    parts = list(small.chunks())
    assert len(parts) >= min(len(whole.columns["urbs"]), 1)
    joined = concat_urbs(parts)
    joined.t_ns = joined.t_ns - whole.meta["origin_ns"]
    _columns_equal(joined, whole.columns["urbs"])
