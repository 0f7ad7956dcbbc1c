"""The btt stage machine, compiled (numba): one pass over the events in processing order.

The rules are those of scsitrace/block.py (docs/blktrace.md, "The stage machine"); this
module holds only the two compiled passes and their small data structures:

- `select_events`: btt's pre-culling, and the device index of every event.
- `run`: the machine. Live bios are found three ways, with flat integer arrays: an
  open-addressing hash table (device, start sector) -> live Q; per device, the chain of all
  its Qs newest first (the containment lookup of G, S, I, M/F and A looks `LOOKBACK` Qs back,
  as the vectorized machine did); and for the range queries of D and C, the device's list of
  live Qs, or when that list is long, the live Qs bucketed by (device, start sector >>
  `BUCKET_BITS`) in a second hash table. The tables hold live bios only (a bio leaves them
  when completed or replaced), so they stay as small as the queues: in cache.
"""
from __future__ import annotations

import numpy as np
from numba import njit

NONE = -1
LOOKBACK = 256                 # Qs a containment lookup looks back at, per device
BUCKET_BITS = 7                # 128 sectors (64 KiB) per bucket of live Qs
KEY_SECTORS = np.int64(1) << 47   # sectors from 2**47 on (64 PiB) never match by key: corrupt
# stages of the samples `run` emits (Q2Q is computed apart)
Q2G, S2G, G2I, Q2M, I2D, M2D, D2C, Q2C, Q2A = range(9)
STAGES = ("Q2G", "S2G", "G2I", "Q2M", "I2D", "M2D", "D2C", "Q2C", "Q2A")
# bits of a bio's `seen`
SEEN_G, SEEN_S, SEEN_I, SEEN_M, SEEN_D = 1, 2, 4, 8, 16
# what the action codes mean to `run` (an array indexed by action code); K_OTHER: not seen
K_OTHER, K_Q, K_G, K_S, K_I, K_M, K_D, K_C, K_A, K_R = range(10)


@njit(cache=True, nogil=True)
def select_events(code, action, device, nbytes, devices, kind, pc_bit):
    """btt's pre-culling: the events the machine sees (kind != K_OTHER, not BLK_TC_PC, with
    bytes unless R or A, and not before their device's first Q or A). Returns (rows seen,
    device index of every event, per device and action code: records of every kind)."""
    n = code.shape[0]
    dev = np.empty(n, np.int64)
    counts = np.zeros((devices.shape[0], 256), np.int64)
    started = np.zeros(devices.shape[0], np.bool_)
    rows = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        d = np.searchsorted(devices, device[i])
        dev[i] = d
        c = code[i]
        counts[d, c] += 1
        k = kind[c]
        if k == K_OTHER or action[i] & pc_bit or (nbytes[i] <= 0 and k != K_R and k != K_A):
            continue
        if not started[d]:
            if k != K_Q and k != K_A:
                continue
            started[d] = True
        rows[m] = i
        m += 1
    return rows[:m], dev, counts


# ---------------------------------------------------------------- hash tables

KEY_A, KEY_B, VALUE = 0, 1, 2        # columns of a table row (a fourth pads it to 32 bytes)
EMPTY = NONE                         # every column of a free slot (keys are device indexes, >= 0)
MIN_SLOTS = 1024


@njit(cache=True, nogil=True, inline="always")
def _slot(a, b, mask):
    """Home slot of the key (a, b) in a table of mask + 1 slots (multiplicative hashing)."""
    h = (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(b) * np.uint64(0xC2B2AE3D27D4EB4F))
    return np.int64((h >> np.uint64(32)) & np.uint64(mask))


@njit(cache=True, nogil=True, inline="always")
def _find(table, a, b):
    """Slot of key (a, b), or the free slot where it would go (linear probing)."""
    mask = table.shape[0] - 1
    s = _slot(a, b, mask)
    while table[s, KEY_A] != EMPTY and (table[s, KEY_A] != a or table[s, KEY_B] != b):
        s = (s + 1) & mask
    return s


@njit(cache=True, nogil=True)
def _delete(table, s):
    """Free slot s, shifting back the entries after it that probed past it."""
    mask = table.shape[0] - 1
    j = s
    while True:
        j = (j + 1) & mask
        if table[j, KEY_A] == EMPTY:
            break
        home = _slot(table[j, KEY_A], table[j, KEY_B], mask)
        stays = (s < home <= j) if s <= j else (home > s or home <= j)
        if not stays:
            table[s, :] = table[j, :]
            s = j
    table[s, :] = EMPTY                  # a free slot's VALUE reads NONE


@njit(cache=True, nogil=True)
def _doubled(table):
    """A copy of the table twice as large (the caller keeps tables at most half full)."""
    out = np.full((2 * table.shape[0], 4), EMPTY, np.int64)
    for s in range(table.shape[0]):
        if table[s, KEY_A] != EMPTY:
            out[_find(out, table[s, KEY_A], table[s, KEY_B]), :] = table[s, :]
    return out


# ---------------------------------------------------------------- the machine

@njit(cache=True, nogil=True, inline="always")
def _tdelta(frm, to):
    return to - frm if frm < to else 1


@njit(cache=True, nogil=True, inline="always")
def _fits(sector):
    return sector >= 0 and sector < KEY_SECTORS


@njit(cache=True, nogil=True, inline="always")
def _put(stages, qs, vals, n, stage, q, val):
    """Store sample n; returns n + 1 (the caller made room: `_grown`)."""
    stages[n] = stage
    qs[n] = q
    vals[n] = val
    return n + 1


@njit(cache=True, nogil=True)
def _grown(stages, qs, vals, n, need):
    """The sample buffers, copied into larger ones with room for `need` more after n."""
    size = max(2 * qs.shape[0], n + need)
    s2, q2, v2 = np.empty(size, np.int8), np.empty(size, np.int64), np.empty(size, np.int64)
    s2[:n], q2[:n], v2[:n] = stages[:n], qs[:n], vals[:n]
    return s2, q2, v2


PREV, NEXT, BPREV, BNEXT = 0, 1, 2, 3    # links of a live bio: device list, bucket list
LIVE_SCAN = 16                           # a D or C looks at every live bio when there are few


@njit(cache=True, nogil=True)
def run(kind, dev, sector, end, t, pdu_dev, pdu_sector, n_dev, nq, odd_c, odd_d):
    """The stage machine over the selected events (kind: K_* per event; pdu_dev: the device
    index an A was remapped from, or NONE). odd_c, odd_d: per Q, whether its start lies
    strictly inside some C (D) of its device: needed only for bios of zero length or with a
    start sector that matches no key, where containment alone does not decide (see
    `_contains`). Returns per Q (completed, completing event, last Q2G, G2I, Q2M, I2D sample,
    last D time) and the samples (stage, Q, ns)."""
    n = kind.shape[0]
    q_dev = np.empty(nq, np.int64)
    q_start = np.empty(nq, np.int64)
    q_end = np.empty(nq, np.int64)
    q_t = np.empty(nq, np.int64)
    closed = np.zeros(nq, np.bool_)
    done = np.zeros(nq, np.bool_)
    c_ev = np.full(nq, NONE, np.int64)
    seen = np.zeros(nq, np.uint8)
    at = np.zeros((nq, 4), np.int64)              # time of the bio's last G, S, I, M/F
    d_t = np.full(nq, NONE, np.int64)
    last = np.full((4, nq), NONE, np.int64)       # last Q2G, G2I, Q2M, I2D sample
    prev_on_dev = np.empty(nq, np.int64)          # the device's previous Q
    dev_last = np.full(n_dev, NONE, np.int64)
    links = np.full((nq, 4), NONE, np.int64)      # PREV, NEXT, BPREV, BNEXT of the live bios
    live_head = np.full(n_dev, NONE, np.int64)
    live_count = np.zeros(n_dev, np.int64)
    keys = np.full((MIN_SLOTS, 4), EMPTY, np.int64)       # (device, start sector) -> live Q
    buckets = np.full((MIN_SLOTS, 4), EMPTY, np.int64)    # (device, start >> BUCKET_BITS) -> first live Q
    used = np.zeros(2, np.int64)                  # keys, buckets in use
    hits = np.empty(nq + 1, np.int64)
    stages, qs, vals = np.empty(n + 16, np.int8), np.empty(n + 16, np.int64), np.empty(n + 16, np.int64)
    ns = 0
    qn = 0
    for i in range(n):
        k = kind[i]
        d = dev[i]
        ti = t[i]
        if k == K_Q:
            q = qn
            qn += 1
            q_dev[q], q_start[q], q_end[q], q_t[q] = d, sector[i], end[i], ti
            prev_on_dev[q] = dev_last[d]
            dev_last[d] = q
            if _fits(sector[i]):                  # a Q at the same start sector replaces the older one
                old = keys[_find(keys, d, sector[i]), VALUE]
                if old != NONE:
                    _close(old, closed, links, live_head, live_count, keys, buckets, used, q_dev, q_start)
                if 2 * (used[0] + 1) > keys.shape[0]:
                    keys = _doubled(keys)
                slot = _find(keys, d, sector[i])
                keys[slot, KEY_A], keys[slot, KEY_B], keys[slot, VALUE] = d, sector[i], q
                used[0] += 1
            if 2 * (used[1] + 1) > buckets.shape[0]:
                buckets = _doubled(buckets)
            _open(q, d, sector[i] >> BUCKET_BITS, links, live_head, live_count, buckets, used)
        elif k == K_G or k == K_S or k == K_I or k == K_M or k == K_A:
            if k == K_A:
                if pdu_dev[i] == NONE:
                    continue
                q = _lookup(pdu_dev[i], pdu_sector[i], keys, closed, dev_last, prev_on_dev, q_start, q_end)
            else:
                q = _lookup(d, sector[i], keys, closed, dev_last, prev_on_dev, q_start, q_end)
            if q == NONE:
                continue
            if ns + 2 > qs.shape[0]:
                stages, qs, vals = _grown(stages, qs, vals, ns, 2)
            if k == K_G:
                v = _tdelta(q_t[q], ti)
                ns = _put(stages, qs, vals, ns, Q2G, q, v)
                last[0, q] = v
                if seen[q] & SEEN_S:
                    ns = _put(stages, qs, vals, ns, S2G, q, _tdelta(at[q, 1], ti))
                at[q, 0] = ti
                seen[q] |= SEEN_G
            elif k == K_S:
                at[q, 1] = ti
                seen[q] |= SEEN_S
            elif k == K_I:
                if seen[q] & SEEN_G:
                    v = _tdelta(at[q, 0], ti)
                    ns = _put(stages, qs, vals, ns, G2I, q, v)
                    last[1, q] = v
                at[q, 2] = ti
                seen[q] |= SEEN_I
            elif k == K_M:
                v = _tdelta(q_t[q], ti)
                ns = _put(stages, qs, vals, ns, Q2M, q, v)
                last[2, q] = v
                at[q, 3] = ti
                seen[q] |= SEEN_M
            else:
                ns = _put(stages, qs, vals, ns, Q2A, q, _tdelta(q_t[q], ti))
        elif k == K_D or k == K_C:
            nh = _contained(d, sector[i], end[i], hits, links, live_head, live_count, buckets, q_start, q_end,
                            odd_c if k == K_C else odd_d)
            if ns + 2 * nh > qs.shape[0]:
                stages, qs, vals = _grown(stages, qs, vals, ns, 2 * nh)
            for h in range(nh):
                q = hits[h]
                if k == K_D:
                    if seen[q] & SEEN_I:
                        v = _tdelta(at[q, 2], ti)
                        ns = _put(stages, qs, vals, ns, I2D, q, v)
                        last[3, q] = v
                    elif seen[q] & SEEN_M:
                        ns = _put(stages, qs, vals, ns, M2D, q, _tdelta(at[q, 3], ti))
                    d_t[q] = ti
                    seen[q] |= SEEN_D
                else:
                    ns = _put(stages, qs, vals, ns, Q2C, q, _tdelta(q_t[q], ti))
                    if seen[q] & SEEN_D:
                        ns = _put(stages, qs, vals, ns, D2C, q, _tdelta(d_t[q], ti))
                    done[q] = True
                    c_ev[q] = i
                    _close(q, closed, links, live_head, live_count, keys, buckets, used, q_dev, q_start)
    return done, c_ev, last, d_t, stages[:ns], qs[:ns], vals[:ns]


@njit(cache=True, nogil=True, inline="always")
def _open(q, d, bucket, links, live_head, live_count, buckets, used):
    """A new bio: at the head of its device's live list and of its bucket's list."""
    links[q, NEXT] = live_head[d]
    if live_head[d] != NONE:
        links[live_head[d], PREV] = q
    live_head[d] = q
    live_count[d] += 1
    slot = _find(buckets, d, bucket)
    if buckets[slot, KEY_A] == EMPTY:
        buckets[slot, KEY_A], buckets[slot, KEY_B] = d, bucket
        used[1] += 1
    else:
        links[q, BNEXT] = buckets[slot, VALUE]
        links[buckets[slot, VALUE], BPREV] = q
    buckets[slot, VALUE] = q


@njit(cache=True, nogil=True, inline="always")
def _close(q, closed, links, live_head, live_count, keys, buckets, used, q_dev, q_start):
    """A bio is replaced or completed: out of its device's live list, its bucket and the keys."""
    closed[q] = True
    d = q_dev[q]
    prv, nxt = links[q, PREV], links[q, NEXT]
    if prv != NONE:
        links[prv, NEXT] = nxt
    else:
        live_head[d] = nxt
    if nxt != NONE:
        links[nxt, PREV] = prv
    live_count[d] -= 1
    prv, nxt = links[q, BPREV], links[q, BNEXT]
    if prv != NONE:
        links[prv, BNEXT] = nxt
    else:
        slot = _find(buckets, d, q_start[q] >> BUCKET_BITS)
        if nxt != NONE:
            buckets[slot, VALUE] = nxt
        else:
            _delete(buckets, slot)
            used[1] -= 1
    if nxt != NONE:
        links[nxt, BPREV] = prv
    if _fits(q_start[q]):
        slot = _find(keys, d, q_start[q])
        if keys[slot, VALUE] == q:
            _delete(keys, slot)
            used[0] -= 1


@njit(cache=True, nogil=True, inline="always")
def _lookup(d, sector, keys, closed, dev_last, prev_on_dev, q_start, q_end):
    """btt's dip_find_sec: the live Q starting at the sector, else the latest live Q of the
    device containing it (among its last LOOKBACK Qs), else NONE."""
    if _fits(sector):
        q = keys[_find(keys, d, sector), VALUE]
        if q != NONE:
            return q
    q = dev_last[d]
    for _ in range(LOOKBACK):
        if q == NONE:
            break
        if not closed[q] and q_start[q] <= sector < q_end[q]:
            return q
        q = prev_on_dev[q]
    return NONE


@njit(cache=True, nogil=True, inline="always")
def _contains(start, stop, q, q_start, q_end, odd):
    """A D or C over [start, stop] applies to the live bio q: the bio lies inside the range,
    and it starts at the range's start sector (by key) or strictly inside some D (C) of its
    device. For a bio of nonzero length starting inside the range, the range itself is such
    a D (C); `odd` says it for the others."""
    qs = q_start[q]
    if qs < start or q_end[q] > stop:
        return False
    return (qs == start and _fits(qs)) or (start < qs < stop) or odd[q]


@njit(cache=True, nogil=True, inline="always")
def _contained(d, start, stop, hits, links, live_head, live_count, buckets, q_start, q_end, odd):
    """The live bios of device d a D or C over [start, stop] applies to: stored in hits (room
    for every bio), returns how many."""
    nh = 0
    if stop < start:
        return nh
    lo, hi = start >> BUCKET_BITS, stop >> BUCKET_BITS
    if live_count[d] <= LIVE_SCAN or hi - lo >= live_count[d]:
        q = live_head[d]
        while q != NONE:
            if _contains(start, stop, q, q_start, q_end, odd):
                hits[nh] = q
                nh += 1
            q = links[q, NEXT]
        return nh
    for bucket in range(lo, hi + 1):
        q = buckets[_find(buckets, d, bucket), VALUE]
        while q != NONE:
            if _contains(start, stop, q, q_start, q_end, odd):
                hits[nh] = q
                nh += 1
            q = links[q, BNEXT]
    return nh
