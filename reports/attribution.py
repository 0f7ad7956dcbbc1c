"""Overhead attribution (DESIGN "Overhead attribution", RAID-I section 4.6 / Table 11).

With REQ/ACK captured every byte is a four-edge handshake: REQ up (target), ACK up
(initiator), REQ down (target), ACK down (initiator). The time before each edge belongs to
the device that makes it: the target waits before raising or dropping REQ, the initiator
before raising or dropping ACK. Inside a connection these intervals tile the time from the
end of (RE)SELECTION to BUS FREE exactly (the stretch after the last ACK release is the
target releasing the bus); arbitration and (re)selection belong to neither. So

    target_ns + initiator_ns + neither_ns + transfer_ns == bus busy time

where `transfer_ns` is the ordinary handshake time of DATA phases (bytes moving at the
bus rate) and every long DATA wait counts for the component that made it.

The transitions are read once, chunk by chunk (numpy over whole chunks), by a Collector
that can tap the bus analysis' own read: it sums the waits per run of equal phase key (bus
segments are unions of those runs) and keeps individually only the handshakes of non-DATA
phases, the first byte of each DATA phase and the long DATA waits. Steps are then named by their place in the
I/O sequence (the rows of Table 11), and long DATA waits that recur at multiples of a
byte count are reported as periodic pauses with that period.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.bus.runs import PHASE_KEY
from scsitrace.model import Analysis
from . import _handshakes as _hs
from .attribution_steps import (ACK, ACK_DOWN, ACK_UP, DATA_KEYS, HIST_NS, INITIATOR, LONG_FACTOR, MIN_LONG_NS, REQ,
                                REQ_DOWN, REQ_UP, TARGET, _PerSegment, _phases_only, _report, _Segments)

__all__ = ["ACK_DOWN", "ACK_UP", "Collector", "INITIATOR", "REQ_DOWN", "REQ_UP", "TARGET", "attribute",
           "needs_req_ack"]


def needs_req_ack(analysis: Analysis) -> str | None:
    """None when attribution can run, else why not."""
    signals = analysis.capture.meta.get("signals") or []
    missing = [s for s in ("REQ", "ACK") if s not in signals]
    if missing:
        return (f"overhead attribution needs REQ and ACK (the trace lacks {' and '.join(missing)}): "
                "without them only phase durations are known, not who made each pause")
    if analysis.capture.chunks is None:
        return "overhead attribution needs the bus transitions (this trace has none)"
    if analysis.capture.meta.get("handshakes") == "synthesized":
        return ("overhead attribution needs recorded REQ/ACK timing; this trace's handshakes were "
                "synthesized by the parser (an emulator's log), so only phase durations are shown")
    return None


class Collector:
    """The one pass over the transitions that attribution needs, keyed by time only, so it can
    run while the bus analysis reads the trace (`tap`) or afterwards (`feed` from chunks).

    It cuts the transitions where the phase key (bus.runs.PHASE_KEY: the lines that decide the
    phase) changes; bus segments are unions of such runs (HACKING: runs of equal phase key,
    skew runs merged into the next), so per-run sums add up to per-segment sums exactly.
    Per run: REQ-ups before it, REQ-ups in it, the target's and the initiator's waits, the
    last edge. Kept individually: every edge of non-DATA runs, each run's edges up to its
    second REQ-up (first bytes), and DATA waits longer than MIN_LONG_NS. The pass itself is
    compiled (`_handshakes.collect`).
    """

    def __init__(self):
        self.complete = False                 # set once a tapped pass has read every chunk
        self.tapped = None                    # the capture's chunks it read
        self._pass = _hs.handshakes(_hs.Rules(PHASE_KEY, REQ, ACK, tuple(int(k) for k in DATA_KEYS), HIST_NS,
                                              MIN_LONG_NS))
        self._runs: pl.DataFrame | None = None
        self.kept: list[pl.DataFrame] = []

    @property
    def n_runs(self) -> int:
        return self._pass.n_runs

    def column(self, which: str) -> np.ndarray:
        """One column of the per-run table (`_handshakes.START`, `G`, `UP`, ...), run order."""
        if self._runs is None:
            self._runs = pl.DataFrame(self._pass.runs())
        return self._runs[which].to_numpy()

    @property
    def hist(self) -> np.ndarray:
        """DATA waits below HIST_NS, counted per ns (rows) and component (TARGET, INITIATOR)."""
        h = pl.DataFrame(self._pass.hist())
        return np.column_stack((h["target"].to_numpy(), h["initiator"].to_numpy()))

    def tap(self, capture) -> None:
        """For `load(args, tap=...)`: collect while the bus analysis reads the chunks."""
        source = capture.chunks
        signals = capture.meta.get("signals") or []
        if source is None or capture.layer != "bus" or "REQ" not in signals or "ACK" not in signals:
            return
        self.tapped = source

        def chunks():
            for chunk in source():
                self.feed(chunk)
                yield chunk
            capture.chunks = source       # a later pass reads the trace itself again
            self.complete = True
        capture.chunks = chunks

    def feed(self, chunk: pl.DataFrame) -> None:
        if not chunk.height:
            return
        kept = pl.DataFrame(self._pass.feed(chunk.select("t_ns", "lines")))
        self._runs = None                     # the per-run sums moved on
        if kept.height:
            self.kept.append(kept)

    def long_thresholds(self) -> dict[int, float]:
        """max(MIN_LONG_NS, LONG_FACTOR x the median DATA wait) per component: the exact median
        of the DATA waits shorter than HIST_NS (the rare longer ones are the pauses themselves),
        so it does not depend on how the transitions were chunked."""
        out = {}
        hist = self.hist
        for c in (TARGET, INITIATOR):
            n = int(hist[:, c].sum())
            med = int(np.searchsorted(np.cumsum(hist[:, c]), (n + 1) // 2)) if n else 0
            out[c] = max(MIN_LONG_NS, LONG_FACTOR * med)
        return out


def attribute(analysis: Analysis, collected: Collector | None = None) -> dict:
    """The `attribute --json` dict: steps, periodic, totals (+ phases, notes). `collected`:
    a Collector that saw every transition while the analysis read them (`Collector.tap`);
    without it, or when the analysis replaced the transitions after that read (control lines
    found inverted, bus/polarity.py), the transitions are read again."""
    why_not = needs_req_ack(analysis)
    if why_not:
        return _phases_only(analysis, why_not)
    if (collected is None or not getattr(collected, "complete", False)
            or analysis.capture.chunks is not getattr(collected, "tapped", None)):
        collected = Collector()
        for chunk in analysis.capture.chunks():
            collected.feed(chunk)
    segs = _Segments(analysis.segments)
    return _report(segs, _PerSegment(segs, collected))
