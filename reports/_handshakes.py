"""Attribution's one pass over the bus transitions, compiled (Rust: native/src/bus/handshakes.rs).

Per transition: open a run where the phase key changes; per REQ/ACK edge: the wait before
it (since the previous edge), who made it (REQ: target, ACK: initiator), the REQ-ups so
far; summed per run, kept individually where the report needs them (see Collector). A
record where REQ and ACK both change holds two edges: REQ rising as ACK falls means ACK fell
first (the handshake order), otherwise REQ's edge comes first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scsitrace._native import bus as _bus

# columns of the per-run table (`Handshakes.runs`)
START, RUN_KEY, G, UP, TARGET_NS, INITIATOR_NS, EDGES, LAST = (
    "start", "key", "g", "up", "target_ns", "initiator_ns", "edges", "last")


@dataclass(frozen=True)
class Rules:
    """What the pass reads once (by name: native/src/bus/handshakes.rs): the phase key of each
    lines value, the REQ and ACK bits, the keys of DATA runs, the histogram's width (ordinary
    DATA waits below it are counted per ns) and the DATA wait kept individually above
    `min_long_ns`."""
    key_table: np.ndarray
    req_bit: int
    ack_bit: int
    data_keys: tuple[int, int]
    hist_ns: int
    min_long_ns: int


def handshakes(rules: Rules):
    """The compiled pass: `feed(transitions)` -> the edges kept individually (t_ns, code,
    dur_ns, g, run); `runs()` (columns START, RUN_KEY, ...), `hist()` (target, initiator),
    `n_runs`, `req_seen`."""
    return _bus.Handshakes(rules)
