"""Attribution's one pass over the bus transitions, compiled (numba, cached beside this file).

Per transition: open a run where the phase key changes; per REQ/ACK edge: the wait before
it (since the previous edge), who made it (REQ: target, ACK: initiator), the REQ-ups so
far; summed per run, kept individually where the report needs them (see Collector). A
record where REQ and ACK both change holds two edges: REQ rising as ACK falls means ACK fell
first (the handshake order), otherwise REQ's edge comes first.
"""
from __future__ import annotations

import numpy as np

from scsitrace._jit import compiled

# slots of the state vector carried from chunk to chunk
PREV_T, LINES, KEY, REQ_SEEN, N_RUNS = range(5)
# columns of the per-run table
START, RUN_KEY, G, UP, TARGET_NS, INITIATOR_NS, EDGES, LAST = range(8)
RUN_COLUMNS = 8


@compiled
def new_runs(lines, key_table, key_before):
    """How many runs of equal phase key start in this chunk."""
    n = 0
    prev = key_before
    for i in range(lines.shape[0]):
        k = np.int64(key_table[lines[i]])
        if k != prev:
            n += 1
            prev = k
    return n


@compiled
def collect(t, lines, key_table, req_bit, ack_bit, state, runs, hist, kept, data_keys,
            hist_ns, min_long_ns):
    """One chunk. `runs` is the per-run table (rows x RUN_COLUMNS, room for this chunk's new
    runs); `hist[dur, component]` counts ordinary DATA waits; `kept` (5 x 2*len(t)) receives
    (t, code, dur, g, run) of the edges kept individually. Returns how many were kept."""
    prev_t = state[PREV_T]
    prev_lines = state[LINES]
    key_prev = state[KEY]
    req_seen = state[REQ_SEEN]
    n_runs = state[N_RUNS]
    n_kept = 0
    for i in range(t.shape[0]):
        ln = np.int64(lines[i])
        k = np.int64(key_table[ln])
        if k != key_prev:
            runs[n_runs, START] = t[i]
            runs[n_runs, RUN_KEY] = k
            runs[n_runs, G] = req_seen
            runs[n_runs, LAST] = -1
            n_runs += 1
            key_prev = k
        changed = ln ^ prev_lines
        prev_lines = ln
        req_changed = (changed & req_bit) != 0
        ack_changed = (changed & ack_bit) != 0
        if not (req_changed or ack_changed):
            continue
        req_up = (ln & req_bit) != 0
        ack_up = (ln & ack_bit) != 0
        ack_first = req_changed and ack_changed and req_up and not ack_up
        run = n_runs - 1
        data = runs[run, RUN_KEY] == data_keys[0] or runs[run, RUN_KEY] == data_keys[1]
        for e in range(2):
            is_ack = (e == 0) == ack_first
            if (is_ack and not ack_changed) or (not is_ack and not req_changed):
                continue
            up = ack_up if is_ack else req_up
            code = np.int64(is_ack) + (0 if up else 2)
            tt = t[i]
            dur = tt - prev_t
            prev_t = tt
            if code == 0:
                req_seen += 1
                runs[run, UP] += 1
            if is_ack:
                runs[run, INITIATOR_NS] += dur
            else:
                runs[run, TARGET_NS] += dur
            runs[run, EDGES] += 1
            runs[run, LAST] = tt
            first_bytes = req_seen <= runs[run, G] + 1   # up to the run's first REQ-up's handshake
            if data and not first_bytes and dur < hist_ns:
                hist[dur, code & 1] += 1
            if not data or first_bytes or dur > min_long_ns:
                kept[0, n_kept] = tt
                kept[1, n_kept] = code
                kept[2, n_kept] = dur
                kept[3, n_kept] = req_seen
                kept[4, n_kept] = run
                n_kept += 1
    state[PREV_T] = prev_t
    state[LINES] = prev_lines
    state[KEY] = key_prev
    state[REQ_SEEN] = req_seen
    state[N_RUNS] = n_runs
    return n_kept
