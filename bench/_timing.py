"""Shared by the bench scripts: the best of several timed runs of a function."""
from __future__ import annotations

import time


def best(fn, repeat: int):
    """(fastest wall time of `repeat` runs of fn(), fn's result of the last run)."""
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out
