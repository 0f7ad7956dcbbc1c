"""Control-line polarity from the capture itself.

A logic analyzer probes the bus lines as voltages. SCSI's control lines are active-low; a
capture names them with a marker (`/BSY`, `BSY#`, `BSY_N`: the readers invert those) or
not, as the PC Engine CD-ROM captures do (`BSY SEL RST ...`, idle high). Read as captured,
such a bus is in RESET with SEL asserted for the whole capture. So the time RST and SEL read
asserted is added up over the transitions (`LineTimes`, the first pass). No working bus
asserts them for long: when every one captured reads asserted for most of the capture (more
than half: a capture that begins before the bus is powered reads released there), the whole
control group is read the other way (BSY SEL ATN RST MSG C/D I/O REQ ACK); when only one
reads asserted for nearly the whole capture (90 %), that line alone. The data lines are a group of their own,
decided by the ID bits of the selections (`analysis.detect_polarity`): a data bus idles at
all ones on an active-low bus and on an unterminated one alike, so its idle level says
nothing. `Inverted` applies the decision to the capture's transitions for every later
reader (the runs, attribution, annotate, convert).
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import polars as pl

from .._native import bus as _bus
from ..schema import SIGNAL_BIT

CONTROL = ("BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK")
DECIDING = ("RST", "SEL")        # lines a working bus asserts only briefly
MOST = 0.5                       # of the capture's time: every deciding line -> the control group
NEARLY_ALL = 0.9                 # one deciding line alone -> that line
KEEP_ROWS = 1 << 20              # transitions kept from the first pass for the second (else re-read)


class LineTimes:
    """The time each deciding line reads asserted, added up over transitions chunks in time
    order (a line's state holds until the next transition). Also keeps the first chunks
    (up to KEEP_ROWS transitions) so a second pass need not read the file again."""

    def __init__(self) -> None:
        self.asserted = dict.fromkeys(DECIDING, 0)
        self.first_ns: int | None = None
        self.last: tuple[int, int] | None = None       # time and lines of the last transition
        self.kept: list[pl.DataFrame] | None = []

    def counted(self, chunks: Iterator[pl.DataFrame]) -> Iterator[pl.DataFrame]:
        for chunk in chunks:
            self.add(chunk)
            yield chunk

    def add(self, chunk: pl.DataFrame) -> None:
        if not chunk.height:
            return
        t = chunk["t_ns"].to_numpy()
        lines = chunk["lines"].to_numpy()
        if self.last is None:
            self.first_ns = int(t[0])
        held = _bus.asserted_ns({"t_ns": np.ascontiguousarray(t, dtype=np.int64),
                                 "lines": np.ascontiguousarray(lines, dtype=np.uint16), "last": self.last,
                                 "bits": [SIGNAL_BIT[name] for name in DECIDING]})
        for name, ns in zip(DECIDING, held.tolist()):
            self.asserted[name] += ns
        self.last = (int(t[-1]), int(lines[-1]))
        if self.kept is not None:
            self.kept.append(chunk)
            if sum(c.height for c in self.kept) > KEEP_ROWS:
                self.kept = None

    @property
    def elapsed_ns(self) -> int:
        return 0 if self.last is None else self.last[0] - self.first_ns


def decide(times: LineTimes, signals) -> tuple[list[str], str | None]:
    """(the control lines to read the other way, why) from the asserted times."""
    elapsed = times.elapsed_ns
    captured = [name for name in DECIDING if name in signals]
    if elapsed <= 0 or not captured:
        return [], None
    share = {name: times.asserted[name] / elapsed for name in captured}
    group = all(share[name] > MOST for name in captured)
    stuck = [name for name in captured if share[name] >= NEARLY_ALL]
    if not group and not stuck:
        return [], None
    shares = " and ".join(f"{name} {100 * share[name]:.2f} %" for name in captured)
    if group:
        lines = [name for name in CONTROL if name in signals]
        why = (f"control lines {' '.join(lines)} read inverted (active-low, named without a marker): as captured, "
               f"{shares} of the capture asserted, which no working bus does")
    else:
        lines = stuck
        why = (f"{' '.join(lines)} read inverted: as captured, {shares} of the capture asserted; only "
               f"{' '.join(lines)} is stuck, so only it is taken as active-low")
    return lines, why


def mask_of(lines: list[str]) -> int:
    return sum(1 << SIGNAL_BIT[name] for name in lines)


class Inverted:
    """capture.chunks with the bus lines of `mask` read the other way."""

    def __init__(self, chunks: Callable[[], Iterator[pl.DataFrame]], mask: int):
        self.chunks, self.mask = chunks, mask

    def __call__(self) -> Iterator[pl.DataFrame]:
        for chunk in self.chunks():
            yield invert(chunk, self.mask)


def invert(chunk: pl.DataFrame, mask: int) -> pl.DataFrame:
    return chunk.with_columns(pl.col("lines").xor(pl.lit(mask, dtype=pl.UInt16)))
