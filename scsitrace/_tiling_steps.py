"""The tiling steps of scsitrace/tiling.py as numba helpers, for the usb layer's numba pass
that tiles pieces as it lists them (scsitrace/usb/stages.py). Only that pass imports them
(through scsitrace/tiling.py's names); this module goes when it is ported to Rust, whose
tiling (native/src/bus/tiling.rs) takes the same steps."""
from __future__ import annotations

from ._jit import inlined


@inlined
def place(start, end, covered, last_end):
    """Where a device's next piece [start, end) goes (pieces in start order): it starts no
    earlier than `covered`, the latest end before it (-1 for none); `last_end`: where
    the device's last segment ended (-1 for none). Returns (whether the piece keeps a
    segment (else it is left empty), the segment's start, where the IDLE before it
    starts (its start for no IDLE), covered after it, last_end after it)."""
    s = max(start, covered)
    if end <= s:
        return False, s, s, max(covered, end), last_end
    return True, s, min(max(last_end, 0), s), max(covered, end), max(covered, end)


@inlined
def add_piece(kept, s, idle_from, e, phase, idle, totals, counts):
    """Add a piece placed by `place` (segment [s, e) of `phase`, when kept) and the IDLE before
    it ([idle_from, s)) to the time and segment count per phase."""
    if kept:
        if idle_from < s:
            totals[idle] += s - idle_from
            counts[idle] += 1
        totals[phase] += e - s
        counts[phase] += 1


@inlined
def close_device(last_end, elapsed, idle, totals, counts):
    """The IDLE after a device's last segment up to `elapsed` (none when it has no segment:
    last_end < 0); returns 1 if the device had segments."""
    if last_end < 0:
        return 0
    if elapsed > last_end:
        totals[idle] += elapsed - last_end
        counts[idle] += 1
    return 1
