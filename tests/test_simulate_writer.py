"""The ancot-text writer's fast path (fixed-width table lookups, used by the simulator) writes
exactly what the reference polars formatting writes, for any frame and column layout."""
from __future__ import annotations

import io

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace import schema
from scsitrace.parsers import ancot

rows = st.lists(st.tuples(st.integers(0, 10**10 // 50 * 50 - 50), st.integers(0, 511),
                          st.one_of(st.none(), st.integers(0, 255)), st.one_of(st.none(), st.booleans())),
                min_size=1, max_size=60)
layouts = st.tuples(st.permutations(schema.SIGNALS).flatmap(lambda s: st.integers(5, 9).map(lambda k: list(s[:k]))),
                    st.sampled_from([[], ["DB"], ["DB", "DBP"]]))


@settings(max_examples=100, deadline=None)
@given(rows=rows, layout=layouts, tick=st.sampled_from([1, 50, 25]))
def test_fast_path_equals_reference(rows, layout, tick):
    signals, data = layout
    rows = sorted(rows, key=lambda r: r[0])
    tr = pl.DataFrame({"t_ns": [r[0] for r in rows], "lines": [r[1] for r in rows],
                       "db": [r[2] for r in rows], "dbp": [r[3] for r in rows]},
                      schema={"t_ns": pl.Int64, "lines": pl.UInt16, "db": pl.UInt8, "dbp": pl.Boolean})
    fast, ref = io.StringIO(), io.StringIO()
    ancot.Writer(fast, signals=signals, data=data, tick_ns=tick).write(tr)
    ancot.Writer(ref, signals=signals, data=data, tick_ns=tick)._write_polars(tr)
    assert fast.getvalue() == ref.getvalue()
