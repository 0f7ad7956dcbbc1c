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
# what the action codes mean to `run` (an array indexed by action code); K_OTHER: not seen
K_OTHER, K_Q, K_G, K_S, K_I, K_M, K_D, K_C, K_A, K_R = range(10)


@njit(cache=True, nogil=True)
def select_events(code, action, device, nbytes, sector, t, pid, devices, kind, pc_bit):
    """btt's pre-culling: the events the machine sees (kind != K_OTHER, not BLK_TC_PC, with
    bytes unless R or A, and not before their device's first Q or A). Returns their rows and
    columns (code, device index, sector, bytes, t, pid, action), and per device and action
    code the records of every kind (blkparse's counts)."""
    n = code.shape[0]
    counts = np.zeros((devices.shape[0], 256), np.int64)
    started = np.zeros(devices.shape[0], np.bool_)
    rows = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        d = np.searchsorted(devices, device[i])
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
    rows = rows[:m]
    out_code, out_dev = np.empty(m, code.dtype), np.empty(m, np.int64)
    out_sector, out_bytes, out_t, out_pid = np.empty(m, np.int64), np.empty(m, np.int64), np.empty(m, np.int64), \
        np.empty(m, np.int64)
    out_action = np.empty(m, action.dtype)
    for j in range(m):
        i = rows[j]
        out_code[j] = code[i]
        out_dev[j] = np.searchsorted(devices, device[i])
        out_sector[j], out_bytes[j], out_t[j], out_pid[j] = sector[i], nbytes[i], t[i], pid[i]
        out_action[j] = action[i]
    return rows, out_code, out_dev, out_sector, out_bytes, out_t, out_pid, out_action, counts


# ---------------------------------------------------------------- hash tables

KEY_A, KEY_B, VALUE = 0, 1, 2        # columns of a table row (a fourth pads it to 32 bytes)
EMPTY = NONE                         # every column of a free slot (keys are device indexes, >= 0)
MIN_SLOTS = 1024


@njit(cache=True, nogil=True)
def _slot(a, b, mask):
    """Home slot of the key (a, b) in a table of mask + 1 slots (multiplicative hashing)."""
    h = (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15)) ^ (np.uint64(b) * np.uint64(0xC2B2AE3D27D4EB4F))
    return np.int64((h >> np.uint64(32)) & np.uint64(mask))


@njit(cache=True, nogil=True)
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

@njit(cache=True, nogil=True)
def _tdelta(frm, to):
    return to - frm if frm < to else 1


@njit(cache=True, nogil=True)
def _fits(sector):
    return sector >= 0 and sector < KEY_SECTORS


@njit(cache=True, nogil=True)
def _put(stages, qs, vals, n, stage, q, val):
    """Store sample n; returns n + 1 (the caller made room)."""
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


# a bio's row (one cache line): where it is, times of its last Q, G, S, I, M/F and D
B_DEV, B_START, B_END, B_Q, B_G, B_S, B_I, B_M = range(8)
# a bio's flags: what it has seen, and whether it is still live
SEEN_G, SEEN_S, SEEN_I, SEEN_M, SEEN_D, CLOSED, DONE = 1, 2, 4, 8, 16, 32, 64
# a bio's links: its device's list of live bios, its bucket's, the device's previous Q
PREV, NEXT, BPREV, BNEXT, PREV_ON_DEV = range(5)
# what `_advance` keeps between calls: samples and Qs so far, keys and buckets in use, room needed
S_SAMPLES, S_QS, S_KEYS, S_BUCKETS, S_NEED = range(5)
LIVE_SCAN = 4                           # a D or C looks at every live bio when there are few


@njit(cache=True, nogil=True)
def run(kind, dev, sector, end, t, pdu_dev, pdu_sector, n_dev, nq, odd_c, odd_d):
    """The stage machine over the selected events (kind: K_* per event; pdu_dev: the device
    index an A was remapped from, or NONE). odd_c, odd_d: per Q, whether its start lies
    strictly inside some C (D) of its device: needed only for bios of zero length or with a
    start sector that matches no key, where containment alone does not decide (see
    `_contains`). Returns per Q (completed, completing event, last Q2G, G2I, Q2M, I2D sample,
    last D time) and the samples (stage, Q, ns).

    `_advance` does the work and stops when a hash table or the sample buffers need to grow;
    they are grown here (arrays replaced inside the per-event loop would cost reference
    counting on every event)."""
    n = kind.shape[0]
    bio = np.empty((nq, 8), np.int64)
    flags = np.zeros(nq, np.uint8)
    links = np.full((nq, 5), NONE, np.int64)
    c_ev = np.full(nq, NONE, np.int64)
    d_t = np.full(nq, NONE, np.int64)
    last = np.full((4, nq), NONE, np.int64)       # last Q2G, G2I, Q2M, I2D sample
    heads = np.full((n_dev, 3), NONE, np.int64)   # per device: live list head, live count, last Q
    heads[:, 1] = 0
    keys = np.full((MIN_SLOTS, 4), EMPTY, np.int64)       # (device, start sector) -> live Q
    buckets = np.full((MIN_SLOTS, 4), EMPTY, np.int64)    # (device, start >> BUCKET_BITS) -> first live Q
    hits = np.empty(nq + 1, np.int64)
    stages, qs, vals = np.empty(n + 16, np.int8), np.empty(n + 16, np.int64), np.empty(n + 16, np.int64)
    state = np.zeros(5, np.int64)
    i = 0
    while True:
        i = _advance(i, kind, dev, sector, end, t, pdu_dev, pdu_sector, odd_c, odd_d, bio, flags, links, c_ev,
                     d_t, last, heads, keys, buckets, hits, stages, qs, vals, state)
        if i == n:
            break
        if 2 * (state[S_KEYS] + 1) > keys.shape[0]:
            keys = _doubled(keys)
        if 2 * (state[S_BUCKETS] + 1) > buckets.shape[0]:
            buckets = _doubled(buckets)
        if state[S_SAMPLES] + state[S_NEED] > qs.shape[0]:
            stages, qs, vals = _grown(stages, qs, vals, state[S_SAMPLES], state[S_NEED])
    ns = state[S_SAMPLES]
    return (flags & DONE) != 0, c_ev, last, d_t, stages[:ns], qs[:ns], vals[:ns]


@njit(cache=True, nogil=True)
def _advance(i, kind, dev, sector, end, t, pdu_dev, pdu_sector, odd_c, odd_d, bio, flags, links, c_ev, d_t, last,
             heads, keys, buckets, hits, stages, qs, vals, state):
    """Run the events from i on; returns where it stopped: the end, or an event that needs a
    larger table (a Q) or more room for samples (state[S_NEED])."""
    n = kind.shape[0]
    ns = state[S_SAMPLES]
    while i < n:
        k = kind[i]
        d = dev[i]
        ti = t[i]
        if k == K_Q:
            if 2 * (state[S_KEYS] + 1) > keys.shape[0] or 2 * (state[S_BUCKETS] + 1) > buckets.shape[0]:
                break
            q = state[S_QS]
            state[S_QS] += 1
            bio[q, B_DEV], bio[q, B_START], bio[q, B_END], bio[q, B_Q] = d, sector[i], end[i], ti
            links[q, PREV_ON_DEV] = heads[d, 2]
            heads[d, 2] = q
            if _fits(sector[i]):                  # a Q at the same start sector replaces the older one
                old = keys[_find(keys, d, sector[i]), VALUE]
                if old != NONE:
                    _close(old, bio, flags, links, heads, keys, buckets, state)
                slot = _find(keys, d, sector[i])
                keys[slot, KEY_A], keys[slot, KEY_B], keys[slot, VALUE] = d, sector[i], q
                state[S_KEYS] += 1
            _open(q, d, sector[i] >> BUCKET_BITS, links, heads, buckets, state)
        elif k == K_G or k == K_S or k == K_I or k == K_M or k == K_A:
            if ns + 2 > qs.shape[0]:
                state[S_NEED] = 2
                break
            if k == K_A:
                if pdu_dev[i] == NONE:
                    i += 1
                    continue
                q = _lookup(pdu_dev[i], pdu_sector[i], keys, bio, flags, links, heads)
            else:
                q = _lookup(d, sector[i], keys, bio, flags, links, heads)
            if q == NONE:
                i += 1
                continue
            if k == K_G:
                v = _tdelta(bio[q, B_Q], ti)
                ns = _put(stages, qs, vals, ns, Q2G, q, v)
                last[0, q] = v
                if flags[q] & SEEN_S:
                    ns = _put(stages, qs, vals, ns, S2G, q, _tdelta(bio[q, B_S], ti))
                bio[q, B_G] = ti
                flags[q] |= SEEN_G
            elif k == K_S:
                bio[q, B_S] = ti
                flags[q] |= SEEN_S
            elif k == K_I:
                if flags[q] & SEEN_G:
                    v = _tdelta(bio[q, B_G], ti)
                    ns = _put(stages, qs, vals, ns, G2I, q, v)
                    last[1, q] = v
                bio[q, B_I] = ti
                flags[q] |= SEEN_I
            elif k == K_M:
                v = _tdelta(bio[q, B_Q], ti)
                ns = _put(stages, qs, vals, ns, Q2M, q, v)
                last[2, q] = v
                bio[q, B_M] = ti
                flags[q] |= SEEN_M
            else:
                ns = _put(stages, qs, vals, ns, Q2A, q, _tdelta(bio[q, B_Q], ti))
        elif k == K_D or k == K_C:
            nh = _contained(d, sector[i], end[i], hits, bio, links, heads, buckets, odd_c if k == K_C else odd_d)
            if ns + 2 * nh > qs.shape[0]:
                state[S_NEED] = 2 * nh
                break
            for h in range(nh):
                q = hits[h]
                if k == K_D:
                    if flags[q] & SEEN_I:
                        v = _tdelta(bio[q, B_I], ti)
                        ns = _put(stages, qs, vals, ns, I2D, q, v)
                        last[3, q] = v
                    elif flags[q] & SEEN_M:
                        ns = _put(stages, qs, vals, ns, M2D, q, _tdelta(bio[q, B_M], ti))
                    d_t[q] = ti
                    flags[q] |= SEEN_D
                else:
                    ns = _put(stages, qs, vals, ns, Q2C, q, _tdelta(bio[q, B_Q], ti))
                    if flags[q] & SEEN_D:
                        ns = _put(stages, qs, vals, ns, D2C, q, _tdelta(d_t[q], ti))
                    flags[q] |= DONE
                    c_ev[q] = i
                    _close(q, bio, flags, links, heads, keys, buckets, state)
        i += 1
    state[S_SAMPLES] = ns
    return i


@njit(cache=True, nogil=True)
def _open(q, d, bucket, links, heads, buckets, state):
    """A new bio: at the head of its device's live list and of its bucket's list."""
    links[q, NEXT] = heads[d, 0]
    if heads[d, 0] != NONE:
        links[heads[d, 0], PREV] = q
    heads[d, 0] = q
    heads[d, 1] += 1
    slot = _find(buckets, d, bucket)
    if buckets[slot, KEY_A] == EMPTY:
        buckets[slot, KEY_A], buckets[slot, KEY_B] = d, bucket
        state[S_BUCKETS] += 1
    else:
        links[q, BNEXT] = buckets[slot, VALUE]
        links[buckets[slot, VALUE], BPREV] = q
    buckets[slot, VALUE] = q


@njit(cache=True, nogil=True)
def _close(q, bio, flags, links, heads, keys, buckets, state):
    """A bio is replaced or completed: out of its device's live list, its bucket and the keys."""
    flags[q] |= CLOSED
    d = bio[q, B_DEV]
    prv, nxt = links[q, PREV], links[q, NEXT]
    if prv != NONE:
        links[prv, NEXT] = nxt
    else:
        heads[d, 0] = nxt
    if nxt != NONE:
        links[nxt, PREV] = prv
    heads[d, 1] -= 1
    prv, nxt = links[q, BPREV], links[q, BNEXT]
    if prv != NONE:
        links[prv, BNEXT] = nxt
    else:
        slot = _find(buckets, d, bio[q, B_START] >> BUCKET_BITS)
        if nxt != NONE:
            buckets[slot, VALUE] = nxt
        else:
            _delete(buckets, slot)
            state[S_BUCKETS] -= 1
    if nxt != NONE:
        links[nxt, BPREV] = prv
    if _fits(bio[q, B_START]):
        slot = _find(keys, d, bio[q, B_START])
        if keys[slot, VALUE] == q:
            _delete(keys, slot)
            state[S_KEYS] -= 1


@njit(cache=True, nogil=True)
def _lookup(d, sector, keys, bio, flags, links, heads):
    """btt's dip_find_sec: the live Q starting at the sector, else the latest live Q of the
    device containing it (among its last LOOKBACK Qs), else NONE."""
    if _fits(sector):
        q = keys[_find(keys, d, sector), VALUE]
        if q != NONE:
            return q
    q = heads[d, 2]
    for _ in range(LOOKBACK):
        if q == NONE:
            break
        if not flags[q] & CLOSED and bio[q, B_START] <= sector < bio[q, B_END]:
            return q
        q = links[q, PREV_ON_DEV]
    return NONE


@njit(cache=True, nogil=True)
def _contains(start, stop, q, bio, odd):
    """A D or C over [start, stop] applies to the live bio q: the bio lies inside the range,
    and it starts at the range's start sector (by key) or strictly inside some D (C) of its
    device. For a bio of nonzero length starting inside the range, the range itself is such
    a D (C); `odd` says it for the others."""
    qs = bio[q, B_START]
    if qs < start or bio[q, B_END] > stop:
        return False
    return (qs == start and _fits(qs)) or (start < qs < stop) or odd[q]


@njit(cache=True, nogil=True)
def _contained(d, start, stop, hits, bio, links, heads, buckets, odd):
    """The live bios of device d a D or C over [start, stop] applies to: stored in hits (room
    for every bio), returns how many."""
    nh = 0
    if stop < start:
        return nh
    lo, hi = start >> BUCKET_BITS, stop >> BUCKET_BITS
    if heads[d, 1] <= LIVE_SCAN or hi - lo >= heads[d, 1]:
        return _chain_hits(heads[d, 0], NEXT, start, stop, hits, nh, bio, links, odd)
    for bucket in range(lo, hi + 1):
        nh = _chain_hits(buckets[_find(buckets, d, bucket), VALUE], BNEXT, start, stop, hits, nh,
                         bio, links, odd)
    return nh


@njit(cache=True, nogil=True)
def _chain_hits(q, link, start, stop, hits, nh, bio, links, odd):
    """Add to hits[nh:] the bios of the chain from q (next: links[q, link]) that a D or C over
    [start, stop] applies to; returns the new count."""
    while q != NONE:
        if _contains(start, stop, q, bio, odd):
            hits[nh] = q
            nh += 1
        q = links[q, link]
    return nh


@njit(cache=True, nogil=True)
def group_stats(groups, vals, n_groups):
    """Per group 0..n_groups-1: count, min, max and int64 sum of vals (one pass, no sort)."""
    count = np.zeros(n_groups, np.int64)
    lo = np.zeros(n_groups, np.int64)
    hi = np.zeros(n_groups, np.int64)
    total = np.zeros(n_groups, np.int64)
    for k in range(groups.shape[0]):
        g = groups[k]
        v = vals[k]
        if count[g] == 0 or v < lo[g]:
            lo[g] = v
        if count[g] == 0 or v > hi[g]:
            hi[g] = v
        count[g] += 1
        total[g] += v
    return count, lo, hi, total
