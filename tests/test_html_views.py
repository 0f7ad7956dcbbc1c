"""Bandwidth views and stalls (scsitrace/bandwidth.py) against brute-force definitions."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace import bandwidth as views

MIB = float(1 << 20)


def ios_frame(rows):
    """rows: (device, op, bytes, start_ns, end_ns)"""
    return pl.DataFrame({"io": list(range(len(rows))), "device": [r[0] for r in rows], "op": [r[1] for r in rows],
                         "bytes": [r[2] for r in rows], "data_bytes": [r[2] for r in rows],
                         "start_ns": [r[3] for r in rows], "end_ns": [r[4] for r in rows],
                         "complete": [True] * len(rows)},
                        schema={"io": pl.Int64, "device": pl.Utf8, "op": pl.Utf8, "bytes": pl.Int64,
                                "data_bytes": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "complete": pl.Boolean})


def brute_union(intervals):
    covered = set()
    for s, e in intervals:
        covered.update(range(s, e))
    return len(covered)


intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(1, 60)).map(lambda t: (t[0], t[0] + t[1])),
                     min_size=1, max_size=30)


@settings(max_examples=150, deadline=None)
@given(intervals)
def test_busy_ns_is_the_union_length(iv):
    s = np.array([a for a, _ in iv])
    e = np.array([b for _, b in iv])
    assert views.busy_ns(s, e) == brute_union(iv)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ab"), st.integers(0, 100), st.integers(1, 50)), min_size=1, max_size=25))
def test_queue_depth_counts_same_device_ios_in_flight(rows):
    df = ios_frame([(d, "R", 512, s, s + n) for d, s, n in rows])
    q = views.queue_depths(views.completed_ios(SimpleNamespace(ios=df))).sort("io")
    for r in q.iter_rows(named=True):
        same = [x for x in rows if x[0] == r["device"]]
        want = sum(1 for d, s, n in same if s <= r["start_ns"] < s + n)
        assert r["queue_depth"] == want


def test_device_count_time_and_bytes():
    # A busy [0,10) and [30,40); B busy [5,20): one device busy 25 ns, two 5 ns
    df = ios_frame([("A", "R", 1000, 0, 10), ("B", "R", 2000, 5, 20), ("A", "R", 4000, 30, 40)])
    rows = {r["devices_busy"]: r for r in views.by_device_count(views.completed_ios(SimpleNamespace(ios=df)))}
    assert rows[1]["busy_ns"] == 25 and rows[2]["busy_ns"] == 5
    # A's first I/O ends at 10 while B is busy -> counted at 2; the others end with one busy
    assert rows[2]["bytes"] == 1000 and rows[1]["bytes"] == 6000
    assert rows[1]["mib_s"] == 6000 / MIB / (25 / 1e9)


def test_request_size_table_and_single_size_has_none():
    one = ios_frame([("A", "R", 4096, i * 100, i * 100 + 50) for i in range(4)])
    assert views.by_request_size(views.completed_ios(SimpleNamespace(ios=one))) == []
    two = ios_frame([("A", "R", 4096, 0, 50), ("A", "R", 4096, 100, 150), ("A", "W", 65536, 200, 400)])
    rows = views.by_request_size(views.completed_ios(SimpleNamespace(ios=two)))
    assert [(r["request_bytes"], r["op"], r["ios"], r["bytes"], r["busy_ns"]) for r in rows] == [
        (4096, "R", 2, 8192, 100), (65536, "W", 1, 65536, 200)]
    assert rows[0]["mib_s"] == 8192 / MIB / (100 / 1e9)
    assert rows[1]["iops"] == 1 / (200 / 1e9)


def test_stalls_listed_with_timestamps():
    rows = [("A", "R", 4096, i * 2_000_000, i * 2_000_000 + 1_000_000) for i in range(10)]
    rows.append(("A", "R", 4096, 30_000_000, 42_000_000))    # 12 x the others
    st_ = views.stalls(views.completed_ios(SimpleNamespace(ios=ios_frame(rows))), factor=5)
    assert st_["count"] == 1
    (slow,) = st_["ios"]
    assert (slow["io"], slow["start_ns"], slow["end_ns"], slow["response_ns"]) == (10, 30_000_000, 42_000_000,
                                                                                   12_000_000)
    assert slow["times_median"] == 12.0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 60), st.integers(1, 20)), min_size=2, max_size=15))
def test_device_count_against_a_time_walk(rows):
    df = ios_frame([(d, "R", 100, s, s + n) for d, s, n in rows])
    ios = views.completed_ios(SimpleNamespace(ios=df))
    got = {r["devices_busy"]: r for r in views.by_device_count(ios)}
    if len({d for d, _, _ in rows}) < 2:
        assert got == {}
        return

    def busy_at(x):
        return len({d for d, s, n in rows if s <= x < s + n})
    time_at = {}
    for x in range(0, 100):
        k = busy_at(x)
        if k:
            time_at[k] = time_at.get(k, 0) + 1
    ios_at = {}
    for d, s, n in rows:
        k = max(busy_at(s + n - 1), 1)
        ios_at[k] = ios_at.get(k, 0) + 1
    assert {k: r["ios"] for k, r in got.items()} == ios_at
    for k, r in got.items():
        assert r["busy_ns"] == time_at.get(k, 0)
