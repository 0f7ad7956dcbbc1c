"""Binary columns between numpy and polars: the pyarrow route (many rows) and the hex-text
route (few rows, no pyarrow import) give the same series and matrices."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from scsitrace import schema, scsi
from scsitrace.usb import urbs


@st.composite
def rows(draw):
    n = draw(st.integers(0, 20))
    width = draw(st.integers(0, 12))
    matrix = draw(hnp.arrays(np.uint8, (n, width)))
    lengths = np.array(draw(st.lists(st.integers(-3, width + 3), min_size=n, max_size=n)), np.int64)
    present = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    return matrix, lengths, present


def both_routes(call):
    """(call() with every column through hex text, call() with every column through pyarrow)."""
    out = []
    for rows_from in (1 << 30, 0):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(schema, "ARROW_FROM_ROWS", rows_from)
            mp.setattr(urbs, "ARROW_FROM_ROWS", rows_from)
            out.append(call())
    return out


@settings(max_examples=150, deadline=None)
@given(rows())
def test_binary_column_routes_agree(case):
    matrix, lengths, present = case
    by_hex, by_arrow = both_routes(lambda: urbs.binary_column(matrix, lengths, present))
    expected = [bytes(m[:max(0, min(n, matrix.shape[1]))]) if p else None
                for m, n, p in zip(matrix, lengths, present)]
    assert by_hex.dtype == by_arrow.dtype == pl.Binary
    assert by_hex.to_list() == by_arrow.to_list() == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=20), st.integers(0, 16))
def test_binary_matrix_routes_agree(values, width):
    col = pl.Series(values, dtype=pl.Binary)
    (m_hex, s_hex), (m_arrow, s_arrow) = both_routes(lambda: scsi.binary_matrix(col, width))
    assert np.array_equal(m_hex, m_arrow) and np.array_equal(s_hex, s_arrow)
    for row, v in zip(m_hex, values):
        head = (v or b"")[:width]
        assert bytes(row[:len(head)]) == head and not row[len(head):].any()
