"""command_stream.Kept given a maker (`add(frame, made)`: the Tiler makes a segment's string
columns for the kept rows only): it keeps the rows it keeps without one, made, whatever the
batches."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.command_stream import Kept


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 50))
def test_rows_made_are_the_rows_kept(sizes, limit):
    plain, making = Kept(limit=limit), Kept(limit=limit)
    seen = 0
    for n in sizes:
        frame = pl.DataFrame({"v": pl.int_range(seen, seen + n, eager=True, dtype=pl.Int64)})
        seen += n
        plain.add(frame)
        making.add(frame, lambda kept: kept.select((pl.col("v") * 10).alias("made")))
    empty = pl.DataFrame(schema={"v": pl.Int64})
    want = plain.frame(empty, ["v"]).select((pl.col("v") * 10).alias("made"))
    assert making.frame(pl.DataFrame(schema={"made": pl.Int64}), ["made"]).to_dicts() == want.to_dicts()
    assert (making.stride, making.rows, making.thinned) == (plain.stride, plain.rows, plain.thinned)
