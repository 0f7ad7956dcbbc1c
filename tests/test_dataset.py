"""reports/dataset.py: rows whose keys and value types differ from trace to trace become one
Parquet table whose cells read back as the values went in (ints and floats of one column as
floats, text, lists of text; a column of mixed kinds as text, JSON for non-text values)."""
from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.reports.dataset import flatten, frame, summary_row

KEYS = st.sampled_from(["a", "b.c", "percent.Bus Free", "label.host", "x"])
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-(1 << 63), (1 << 63) - 1),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=5),
                   st.lists(st.text(max_size=3), max_size=3))


def expected(values: list) -> list:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} and kinds and kinds != {int}:
        return [None if v is None else float(v) for v in values]
    if len(kinds) > 1 and not kinds <= {int, float}:
        return [None if v is None else v if isinstance(v, str) else json.dumps(v) for v in values]
    return values


@settings(max_examples=100, deadline=None)
@given(st.lists(st.dictionaries(KEYS, VALUES, max_size=5), min_size=1, max_size=6))
def test_rows_of_any_shape_round_trip_through_parquet(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("f") / "t.parquet"
    frame(rows).write_parquet(path)
    back = pl.read_parquet(path)
    names = list(dict.fromkeys(k for r in rows for k in r))
    assert back.columns == names and back.height == (len(rows) if names else 0)
    for name in names:
        assert back[name].to_list() == expected([r.get(name) for r in rows]), name


def test_flatten_and_summary_row():
    s = {"source": {"path": "t", "meta": {"x": 1}, "signals": ["BSY"]}, "anomalies": {"count": 0, "first": []},
         "categories": [{"name": "Status", "total_ns": 5, "percent": 50.0, "normalized_ns": None}],
         "targets": [{"target": 1}], "notes": ["n"], "srt_histogram": [{"buckets": [1]}]}
    assert flatten({"a": {"b": {"c": 1}}, "d": [{"e": 1}], "f": []}) == {"a.b.c": 1, "f": []}
    assert summary_row(s) == {"source.path": "t", "source.meta.x": 1, "source.signals": ["BSY"],
                              "anomalies.count": 0, "notes": ["n"], "percent.Status": 50.0,
                              "total_ns.Status": 5, "normalized_ns.Status": None}
