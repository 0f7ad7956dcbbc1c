"""Time bins for the figures over time (scsitrace/series.py): widths on the chain 1, 2, 10,
20, 100 ... ns, so that merging bins by the chain's factor is exact; an axis of such bins that
merges as later times come; the widths shown, each bin's covered time, and the most I/Os in
flight per bin (a sweep of the starts and ends, no per-I/O loop)."""
from __future__ import annotations

import numpy as np

MAX_BINS = 150
MIN_BINS = 8


def chain_width(at_least: float) -> int:
    """The smallest width of 1, 2 x 10^k ns at or above `at_least`."""
    w = 1
    while w < at_least:
        w = w * 5 if str(w)[0] == "2" else w * 2
    return w


def merge(a: np.ndarray, factor: int, how: str = "sum") -> np.ndarray:
    """Merge each run of `factor` bins along axis 0 (padded with zeros)."""
    if factor == 1:
        return a
    nb = -(-a.shape[0] // factor)
    pad = np.zeros((nb * factor - a.shape[0],) + a.shape[1:], a.dtype)
    b = np.concatenate([a, pad]).reshape((nb, factor) + a.shape[1:])
    return b.max(axis=1) if how == "max" else b.sum(axis=1)


class Axis:
    """Bins of a chain width over [0, reach): arrays of max_bins + 1 rows allocated once, the
    bins merged by the chain's factor as later times come."""

    def __init__(self, max_bins: int):
        self.max_bins, self.width, self.nb = max_bins, 0, 0
        self.arrays: dict[str, tuple[np.ndarray, str]] = {}

    def reach(self, t_max: int) -> None:
        """Make room for times up to t_max, merging bins when needed."""
        need = chain_width((t_max + 1) / self.max_bins)
        if self.width == 0:
            self.width = need
        elif need > self.width:
            factor = need // self.width
            for name, (a, how) in self.arrays.items():
                merged = merge(a[:self.nb], factor, how)
                a[:] = 0
                a[:len(merged)] = merged
            self.nb = -(-self.nb // factor)
            self.width = need
        self.nb = max(self.nb, int(t_max // self.width) + 1)

    def add(self, name: str, index: np.ndarray, weights=None, inner: int = 0) -> None:
        """Count (or add weights) at bin `index` (with `inner`, a second axis of that size)."""
        a, how = self.arrays[name]
        size = self.nb * inner if inner else self.nb
        counts = np.bincount(index, weights=weights, minlength=size)
        a[:self.nb] += counts.reshape((self.nb, inner) if inner else (self.nb,)).astype(a.dtype)

    def declare(self, name: str, dtype, inner: int = 0, how: str = "sum") -> None:
        shape = (self.max_bins + 1, inner) if inner else (self.max_bins + 1,)
        self.arrays[name] = (np.zeros(shape, dtype), how)

    def get(self, name: str) -> np.ndarray:
        """The array's bins in use."""
        return self.arrays[name][0][:self.nb]


def flight(start, end, origin: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The in-flight intervals that have both ends (a negative time is a missing one), and
    which of the given ones they are (a mask)."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    both = (start >= 0) & (end >= 0)
    start = np.maximum(start[both] - origin, 0)
    return start, np.maximum(end[both] - origin, start), both


def shown_width(elapsed_ns: int, n: int, fine: int, per_bin: int) -> int:
    """The chain width the tables show: at most MAX_BINS bins, about `per_bin` I/Os per bin,
    at least MIN_BINS bins where the fine bins allow it."""
    want = chain_width(max(elapsed_ns / MAX_BINS, elapsed_ns * per_bin / max(n, 1)))
    while want > fine and elapsed_ns / want < MIN_BINS:
        smaller = want // 5 if str(want)[0] == "1" else want // 2
        if smaller < fine:
            break
        want = smaller
    return max(want, fine)


def bins(elapsed_ns: int, width: int) -> tuple[int, np.ndarray]:
    """(number of bins, each bin's covered ns): a remainder under half a bin joins the last."""
    nb = max(int(elapsed_ns // width), 1)
    if (elapsed_ns - nb * width) * 2 >= width:
        nb += 1
    cover = np.full(nb, float(width))
    cover[-1] = max(elapsed_ns - (nb - 1) * width, 1)
    return nb, cover


def max_in_flight(edges, width: int, nb: int) -> np.ndarray:
    """Per bin, the most I/Os in flight at once: the level entering the bin, or the level just
    after one of the starts inside it (the level only rises at a start). An I/O is in flight
    at t when start <= t < end; a sort of the starts and one of the ends, no per-I/O loop."""
    out = np.zeros(nb, np.int64)
    if not edges:
        return out
    starts = np.sort(np.concatenate([e[0] for e in edges]), kind="stable")
    ends = np.sort(np.concatenate([e[1] for e in edges]), kind="stable")
    if not len(starts):
        return out
    # after the i-th start: i + 1 started (fewer than the true count inside a group of equal
    # starts, but exact at the group's last, which holds the group's maximum), minus the ended
    level = np.arange(1, len(starts) + 1, dtype=np.int64) - np.searchsorted(ends, starts, side="right")
    b = np.minimum(starts // width, nb - 1)
    first = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
    out[b[first]] = np.maximum.reduceat(level, first)
    edge = np.arange(nb, dtype=np.int64) * width
    entering = np.searchsorted(starts, edge, side="right") - np.searchsorted(ends, edge, side="right")
    return np.maximum(out, entering)
