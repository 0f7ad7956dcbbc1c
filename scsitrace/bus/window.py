"""--window on a bus trace: the transitions cut as if the capture had started at START and
stopped at END. The line state at START (the last transition before it) opens the cut,
stamped START; the state at END closes it, stamped END; so the cut's elapsed time is exactly
END - START (within the trace) and connections crossing an edge are partial I/Os, as in any
capture that starts or ends mid-connection."""
from __future__ import annotations

from typing import Callable, Iterator

import polars as pl

from ..filters import check_window


class WindowedChunks:
    """capture.chunks, cut to [lo, hi] (ns from the trace start; either may be None)."""

    def __init__(self, chunks: Callable[[], Iterator[pl.DataFrame]], window):
        self.chunks, (self.lo, self.hi) = chunks, window

    def __call__(self) -> Iterator[pl.DataFrame]:
        lo, hi = self.lo, self.hi
        state, first, last, inside = None, None, None, False
        for chunk in self.chunks():
            if not chunk.height:
                continue
            first = chunk["t_ns"][0] if first is None else first
            last = chunk["t_ns"][-1]
            if not inside and lo is not None:
                before = chunk.filter(pl.col("t_ns") < lo)
                state = before.tail(1) if before.height else state
                chunk = chunk.filter(pl.col("t_ns") >= lo)
                if not chunk.height:
                    continue
                if state is not None and chunk["t_ns"][0] > lo:
                    yield _stamped(state, lo)
            inside = True
            kept = chunk.filter(pl.col("t_ns") <= hi) if hi is not None else chunk
            if kept.height:
                yield kept
                state = kept.tail(1)
            if kept.height < chunk.height:          # past END: the state at END closes the cut
                if state["t_ns"][0] < hi:
                    yield _stamped(state, hi)
                return
        if not inside:
            check_window((lo, hi), first, last)
        if hi is not None and state is not None and inside and state["t_ns"][0] < hi <= last:
            yield _stamped(state, hi)


def _stamped(row: pl.DataFrame, t_ns: int) -> pl.DataFrame:
    return row.with_columns(pl.lit(t_ns, dtype=pl.Int64).alias("t_ns"))
