"""Blocks of events put back in time order, for readers whose input is in time order but for
local disorder: blkparse's text (small swaps of neighbouring lines) and a piped blktrace
stream (`blktrace -o -` forwards each CPU's buffer as it fills: times go back at each switch
of CPU, by up to what one buffer holds).

`InTimeOrder(probe, key)(blocks)` takes polars frames of events in file order and yields
them in processing order (by `key`, then place in the file: a stable sort), holding back
at most the events of one block that later blocks may precede (`Reorder`). The window is
therefore one block: an event may come up to a block's worth of events later in the file
than its place in time. Among the first `probe` events (read ahead before anything is
handed on), an event further out of place makes the reader sort the whole input instead
(correct, but its memory grows with the input: `sorted_whole`); after them, blocks that
break the rule are handed on as read (`disorder` counts them, for the reader's note).
"""
from __future__ import annotations

from typing import Iterable, Iterator

import polars as pl


class Reorder:
    """Events of blocks in processing order (`key`, then place in the file), as long as no
    block holds an event earlier than the first event of a block before it: each block's
    events are merged with those held back, and those up to the block's earliest time are
    handed on. `disorder`: blocks that broke the rule (their early events come later than
    the one-shot order puts them)."""

    def __init__(self, key: str):
        self.key = key
        self.held: pl.DataFrame | None = None
        self.last: int | None = None
        self.disorder = 0

    def feed(self, raw: pl.DataFrame) -> Iterator[pl.DataFrame]:
        if not raw.height:
            return
        t = raw[self.key]
        low = t.min()
        if self.last is not None and low < self.last:
            self.disorder += 1
        both = raw if self.held is None else pl.concat([self.held, raw])
        if not (t.is_sorted() and (self.held is None or self.held.height == 0 or self.held[self.key][-1] <= t[0])):
            both = both.sort(self.key, maintain_order=True)
        cut = both[self.key].search_sorted(low, side="right")
        out, self.held = both[:cut], both[cut:]
        if out.height:
            self.last = out[self.key][-1]
            yield out

    def rest(self) -> Iterator[pl.DataFrame]:
        if self.held is not None and self.held.height:
            yield self.held


class InTimeOrder:
    """The blocks in processing order (see the module docstring); afterwards `sorted_whole`
    says whether the input was sorted whole, `disorder` how many later blocks were handed on
    as read."""

    def __init__(self, probe: int, key: str):
        self.probe, self.key = probe, key
        self.sorted_whole = False
        self.disorder = 0

    def __call__(self, blocks: Iterable[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        blocks = iter(blocks)
        ahead, n = [], 0
        for raw in blocks:
            ahead.append(raw)
            n += raw.height
            if n >= self.probe:
                break
        order = Reorder(self.key)
        first = [part for raw in ahead for part in order.feed(raw)]
        if order.disorder:                         # out of order early: sort the whole input
            self.sorted_whole = True
            whole = pl.concat(ahead + list(blocks))
            yield whole.sort(self.key, maintain_order=True)      # stable: by time, then place
            return
        yield from first
        for raw in blocks:
            yield from order.feed(raw)
        yield from order.rest()
        self.disorder = order.disorder
