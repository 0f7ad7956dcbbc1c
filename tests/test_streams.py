"""The shared streaming pieces: the statistic record of scsitrace._native.stat.Samples
against the exact one (scsitrace/stats.py), and prefetched chunk streams."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace._native.stat import Samples
from scsitrace.stats import HIST_EDGES_NS, of_samples, stat_row
from scsitrace.streams import prefetched

values = st.lists(st.integers(min_value=0, max_value=1 << 40), min_size=1, max_size=300)


def _as_dict(record) -> dict:
    """A compiled Stat read by name: the STAT figures and `exact`."""
    return {**stat_row(record), "exact": record.exact}


def _record(vals, cap=None) -> dict:
    s = Samples() if cap is None else Samples(cap)
    s.add(np.asarray(vals, np.int64))
    return _as_dict(s.record())


@given(values)
def test_exact_record_is_the_nearest_rank_record(vals):
    got = _record(vals)
    assert got.pop("exact") is True
    want = of_samples(np.asarray(vals, np.int64))
    assert got.keys() == want.keys()
    assert {k: v for k, v in got.items() if k != "avg_ns"} == {k: v for k, v in want.items() if k != "avg_ns"}
    assert got["avg_ns"] == pytest.approx(want["avg_ns"])


@given(st.lists(st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=200), min_size=1, max_size=4))
def test_exact_record_read_between_batches_is_the_record_of_all_values_so_far(batches):
    """The exact percentiles are found by selection, which leaves the values partly ordered:
    a record read between batches (many ties, ranks that coincide) is still the nearest-rank
    record of every value added so far."""
    s, seen = Samples(), []
    for batch in batches:
        s.add(np.asarray(batch, np.int64))
        seen += batch
        got, want = _as_dict(s.record()), of_samples(np.asarray(seen, np.int64))
        assert got.pop("exact") is True
        assert {k: v for k, v in got.items() if k != "avg_ns"} == {k: v for k, v in want.items() if k != "avg_ns"}


@given(values, st.integers(min_value=0, max_value=20))
def test_histogram_percentiles_at_most_a_thousandth_low(vals, cap):
    got, want = _record(vals, cap), of_samples(np.asarray(vals, np.int64))
    assert got["exact"] is (len(vals) <= cap)
    for k in ("n", "min_ns", "max_ns", "total_ns"):
        assert got[k] == want[k]
    for k in ("p50_ns", "p90_ns", "p99_ns", "p999_ns"):
        assert got[k] <= want[k]
        assert want[k] - got[k] <= want[k] / 1024


@given(st.lists(values, min_size=1, max_size=5), st.integers(min_value=0, max_value=400))
def test_merged_parts_equal_the_whole(parts, cap):
    whole, merged = Samples(cap), Samples(cap)
    for part in parts:
        whole.add(np.asarray(part, np.int64))
        one = Samples(cap)
        one.add(np.asarray(part, np.int64))
        merged.merge(one)
    a, b = _as_dict(whole.record()), _as_dict(merged.record())
    if a["exact"] and b["exact"]:
        assert a == b
    for k in ("n", "min_ns", "max_ns", "total_ns"):
        assert a[k] == b[k]
    assert whole.histogram() == merged.histogram()


@settings(max_examples=50)
@given(values)
def test_histogram_counts_as_the_latency_histogram(vals):
    s = Samples()
    s.add(np.asarray(vals, np.int64))
    edges = np.asarray(HIST_EDGES_NS, np.int64)
    want = np.bincount(np.searchsorted(edges, np.asarray(vals, np.int64), side="left"), minlength=len(edges) + 1)
    assert s.histogram() == want.tolist()


def test_empty_record_has_no_figures():
    r = Samples().record()
    assert r.n == 0 and r.min_ns is None and r.avg_ns is None and r.p50_ns is None and r.exact


@given(st.lists(st.integers(), max_size=50), st.integers(min_value=1, max_value=4))
def test_prefetched_yields_every_chunk_in_order(chunks, depth):
    assert list(prefetched(iter(chunks), depth)) == chunks


def test_prefetched_raises_where_the_producer_failed():
    def chunks():
        yield 1
        yield 2
        raise ValueError("bad record")

    got = []
    with pytest.raises(ValueError, match="bad record"):
        for c in prefetched(chunks()):
            got.append(c)
    assert got == [1, 2]


def test_prefetched_reads_ahead_in_another_thread_and_stops_when_closed():
    threads, produced = set(), []

    def chunks():
        for i in range(1000):
            threads.add(threading.get_ident())
            produced.append(i)
            yield i

    stream = prefetched(chunks(), depth=2)
    assert next(stream) == 0
    stream.close()
    assert threading.get_ident() not in threads
    assert len(produced) < 10          # it stopped reading: no more than the slots ahead
