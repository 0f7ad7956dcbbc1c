"""Attribution's one pass over the bus transitions, compiled (Rust: native/src/bus/handshakes.rs).

Per transition: open a run where the phase key changes; per REQ/ACK edge: the wait before
it (since the previous edge), who made it (REQ: target, ACK: initiator), the REQ-ups so
far; summed per run, kept individually where the report needs them (see Collector). A
record where REQ and ACK both change holds two edges: REQ rising as ACK falls means ACK fell
first (the handshake order), otherwise REQ's edge comes first.
"""
from __future__ import annotations

import numpy as np

from scsitrace._native import bus as _bus

# slots of the state vector carried from chunk to chunk
PREV_T, LINES, KEY, REQ_SEEN, N_RUNS = range(5)
# columns of the per-run table
START, RUN_KEY, G, UP, TARGET_NS, INITIATOR_NS, EDGES, LAST = range(8)
RUN_COLUMNS = 8


def new_runs(lines: np.ndarray, key_table: np.ndarray, key_before: int) -> int:
    """How many runs of equal phase key start in this chunk."""
    return _bus.new_runs(np.ascontiguousarray(lines, dtype=np.uint16), key_table, int(key_before))


def collect(t, lines, key_table, req_bit, ack_bit, state, runs, hist, kept, data_keys, hist_ns, min_long_ns) -> int:
    """One chunk. `runs` is the per-run table (rows x RUN_COLUMNS, room for this chunk's new
    runs); `hist[dur, component]` counts ordinary DATA waits; `kept` (5 x 2*len(t)) receives
    (t, code, dur, g, run) of the edges kept individually. Returns how many were kept."""
    return _bus.collect(np.ascontiguousarray(t, dtype=np.int64), np.ascontiguousarray(lines, dtype=np.uint16),
                        key_table, int(req_bit), int(ack_bit), state, runs, hist, kept,
                        np.asarray(data_keys, dtype=np.int64), int(hist_ns), int(min_long_ns))
