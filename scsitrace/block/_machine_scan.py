"""The btt stage machine's compiled passes (numba): serve scsitrace/block/machine.py.

The rules are those of scsitrace/block/machine.py (docs/blktrace.md, "The stage machine");
this module holds the two compiled passes and their small data structures:

- `select_events`: btt's pre-culling, and the device index of every event.
- `run`: the machine. Live bios are found three ways, with flat integer arrays: a hash
  table (device, start sector) -> live Q (scsitrace/_keys.py); per device, the chain of all
  its Qs newest first (the containment lookup of G, S, I, M/F and A looks `LOOKBACK` Qs back);
  and for the range queries of D and C, the device's list of live Qs, or when that list is
  long, the live Qs bucketed by (device, start sector >> `BUCKET_BITS`) in a second table.
  The tables hold live bios only (a bio leaves them when completed or replaced), so they stay
  as small as the queues: in cache.
- `request_times`: per request, completed, Q2C and D2C.

numba counts references to arrays, with atomic instructions, wherever a function's control
flow is more than straight-line code or single-level branches and loops; its pruning pass
does not remove them around `break`, nested branches or inlined calls. The functions the
per-event loop calls are therefore shaped so that they need none (loops exit through their
condition or a `return`, branches are not nested), and the state lives in few arrays.
"""
from __future__ import annotations

import numpy as np

from .._jit import compiled, inlined, no_refcount
from .._keys import EMPTY, KEY_A, KEY_B, VALUE, delete_row as _delete, doubled as _doubled, find_row as _find

NONE = -1
MIN_SLOTS = 1024               # initial slots of the live-bio tables
SECTOR = 512
LOOKBACK = 256                 # Qs a containment lookup looks back at, per device
BUCKET_BITS = 7                # 128 sectors (64 KiB) per bucket of live Qs
KEY_SECTORS = np.int64(1) << 47   # sectors from 2**47 on (64 PiB) never match by key: corrupt

# stages of the samples `run` emits (Q2Q is computed apart)
Q2G, S2G, G2I, Q2M, I2D, M2D, D2C, Q2C, Q2A = range(9)
STAGES = ("Q2G", "S2G", "G2I", "Q2M", "I2D", "M2D", "D2C", "Q2C", "Q2A")

# what the action codes mean to `run` (an array indexed by action code); K_OTHER: not seen
K_OTHER, K_Q, K_G, K_S, K_I, K_M, K_D, K_C, K_A, K_R = range(10)


@no_refcount
def _index(devices, value):
    """Index of value in the sorted array devices, or NONE."""
    lo, hi = 0, devices.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if devices[mid] < value:
            lo = mid + 1
        else:
            hi = mid
    return lo if lo < devices.shape[0] and devices[lo] == value else NONE


@compiled
def select_events(action, device, nbytes, devices, kinds, pc_bit):
    """btt's pre-culling, in one pass over every record: what each event is to the machine
    (kinds[action code], or K_OTHER when culled: BLK_TC_PC, no bytes unless R or A, before
    its device's first Q or A), its device index, per device and action code the records of
    every kind (blkparse's counts), and the event indexes of the kept Qs and Ds, in order."""
    n = action.shape[0]
    counts = np.zeros((devices.shape[0], 256), np.int64)
    kind, dev = np.empty(n, np.int8), np.empty(n, np.int32)
    listed = np.empty((2, n), np.int64)
    found = np.zeros(2, np.int64)
    _cull(action, device, nbytes, devices, kinds, pc_bit, counts, np.zeros(devices.shape[0], np.bool_),
          kind, dev, listed, found)
    return kind, dev, counts, listed[0, :found[0]].copy(), listed[1, :found[1]].copy()


@no_refcount
def _cull(action, device, nbytes, devices, kinds, pc_bit, counts, started, kind, dev, listed, found):
    """select_events' pass: listed[0, :found[0]] the Qs, listed[1, :found[1]] the Ds."""
    last_dev, d = -1, 0
    nq, nd = 0, 0
    for i in range(action.shape[0]):
        if device[i] != last_dev:
            d = _index(devices, device[i])
            last_dev = device[i]
        c = action[i] & 0xFF
        counts[d, c] += 1
        k = kinds[c]
        # & and | rather than and/or: no branches on the event's kind
        culled = (k == K_OTHER) | ((action[i] & pc_bit) != 0) | ((nbytes[i] <= 0) & (k != K_R) & (k != K_A))
        keep = (not culled) & (started[d] | (k == K_Q) | (k == K_A))
        started[d] = started[d] | keep
        k = k if keep else K_OTHER
        kind[i] = k
        dev[i] = d
        listed[0, nq] = i
        nq += k == K_Q
        listed[1, nd] = i
        nd += k == K_D
    found[0], found[1] = nq, nd


# ---------------------------------------------------------------- the machine

@inlined
def _tdelta(frm, to):
    return to - frm if frm < to else 1


@inlined
def _fits(sector):
    return sector >= 0 and sector < KEY_SECTORS


@inlined
def _put(stages, qs, vals, n, stage, q, val):
    """Store sample n; returns n + 1 (the caller made room)."""
    stages[n] = stage
    qs[n] = q
    vals[n] = val
    return n + 1


@compiled
def _grown(stages, qs, vals, n, need):
    """The sample buffers, copied into larger ones with room for `need` more after n."""
    size = max(2 * qs.shape[0], n + need)
    s2, q2, v2 = np.empty(size, np.int8), np.empty(size, np.int32), np.empty(size, np.int64)
    s2[:n], q2[:n], v2[:n] = stages[:n], qs[:n], vals[:n]
    return s2, q2, v2

# a bio's row (what the machine reads back): where it is; times of its last Q, G, S, I, M/F;
# flags; the links of its device's list of live bios and of its bucket's, its device's
# previous Q (a 16th column pads the row to two cache lines)
(B_DEV, B_START, B_END, B_Q, B_G, B_S, B_I, B_M, B_FLAGS, B_PREV, B_NEXT, B_BPREV, B_BNEXT,
 B_PREV_ON_DEV) = range(14)

BIO_COLUMNS = 16

# per Q, what `run` hands back (rows of its `per_q` array, so that each is a contiguous column):
# the event that completed it, its last D time, its last Q2G, G2I, Q2M, I2D sample
O_C_EV, O_D, O_Q2G, O_G2I, O_Q2M, O_I2D = range(6)

# a bio's flags: what it has seen, whether it is still live, and whether its start lies strictly
# inside some C (ODD_C) or D (ODD_D) of its device (see `_contains`)
SEEN_G, SEEN_S, SEEN_I, SEEN_M, SEEN_D, CLOSED, DONE, ODD_C, ODD_D = 1, 2, 4, 8, 16, 32, 64, 128, 256

# per device (rows of `heads`): head of its live list, live count, last Q
H_LIVE, H_COUNT, H_LAST_Q = range(3)

# what `_advance` keeps between calls: samples and Qs so far, keys and buckets in use, room needed
S_SAMPLES, S_QS, S_KEYS, S_BUCKETS, S_NEED = range(5)
LIVE_SCAN = 4                           # a D or C looks at every live bio when there are few


@compiled
def run(kind, dev, sector, nbytes, t, pdu_dev, pdu_sector, devices, nq, odd_c, odd_d):
    """The stage machine over the selected events (kind: K_* per event; dev: the index of its
    device among `devices`; pdu_dev: the device an A was remapped from). odd_c, odd_d: per
    Q, whether its start lies strictly inside some C (D) of its device: needed only for bios
    of zero length or with a start sector that matches no key, where containment alone does
    not decide (see `_contains`). Returns per Q: the completing event (NONE if none), its last Q2G, G2I, Q2M,
    I2D sample (a (4, nq) array), its last D time; and the samples (stage, Q, ns).

    `_advance` does the work and stops when a hash table or the sample buffers need to grow;
    they are grown here (arrays replaced inside the per-event loop would cost reference
    counting on every event)."""
    n, n_dev = kind.shape[0], devices.shape[0]
    bio = np.empty((nq, BIO_COLUMNS), np.int64)        # each Q fills its row and its per_q column
    per_q = np.empty((6, nq), np.int64)
    heads = np.full((n_dev, 3), NONE, np.int64)
    heads[:, H_COUNT] = 0
    keys = np.full((MIN_SLOTS, 4), EMPTY, np.int64)       # (device, start sector) -> live Q
    buckets = np.full((MIN_SLOTS, 4), EMPTY, np.int64)    # (device, start >> BUCKET_BITS) -> first live Q
    hits = np.empty(nq + 1, np.int64)
    stages, qs, vals = np.empty(n + 16, np.int8), np.empty(n + 16, np.int32), np.empty(n + 16, np.int64)
    state = np.zeros(5, np.int64)
    i = _advance(0, kind, dev, sector, nbytes, t, pdu_dev, pdu_sector, devices, bio, heads, keys, buckets, hits, stages,
                 qs, vals, state, odd_c, odd_d, per_q)
    while i < n:
        if 2 * (state[S_KEYS] + 1) > keys.shape[0]:
            keys = _doubled(keys)
        if 2 * (state[S_BUCKETS] + 1) > buckets.shape[0]:
            buckets = _doubled(buckets)
        if state[S_SAMPLES] + state[S_NEED] > qs.shape[0]:
            stages, qs, vals = _grown(stages, qs, vals, state[S_SAMPLES], state[S_NEED])
        i = _advance(i, kind, dev, sector, nbytes, t, pdu_dev, pdu_sector, devices, bio, heads, keys, buckets, hits, stages,
                     qs, vals, state, odd_c, odd_d, per_q)
    ns = state[S_SAMPLES]
    return per_q[O_C_EV], per_q[O_Q2G:O_I2D + 1], per_q[O_D], stages[:ns], qs[:ns], vals[:ns]


@no_refcount
def _advance(i, kind, dev, sector, nbytes, t, pdu_dev, pdu_sector, devices, bio, heads, keys, buckets, hits, stages, qs,
             vals, state, odd_c, odd_d, per_q):
    """Run the events from i on; returns where it stopped: the end, or an event that needs a
    larger table (a Q) or more room for samples (state[S_NEED])."""
    n = kind.shape[0]
    ns = state[S_SAMPLES]
    room = True
    while i < n and room:
        k = kind[i]
        d = dev[i]
        if k == K_Q:
            room = 2 * (state[S_KEYS] + 1) <= keys.shape[0] and 2 * (state[S_BUCKETS] + 1) <= buckets.shape[0]
            if room:
                q = state[S_QS]
                flags = (ODD_C if odd_c[q] else 0) | (ODD_D if odd_d[q] else 0)
                _queue(q, d, sector[i], sector[i] + nbytes[i] // SECTOR, t[i], flags, bio, heads, keys, buckets, state,
                       per_q)
                state[S_QS] += 1
        elif k == K_G or k == K_S or k == K_I or k == K_M or k == K_A:
            room = ns + 2 <= qs.shape[0]
            state[S_NEED] = 2
            q = NONE
            src = _index(devices, pdu_dev[i]) if k == K_A else NONE     # the device an A comes from
            if k != K_A:
                q = _lookup(d, sector[i], keys, bio, heads)
            elif src != NONE:
                q = _lookup(src, pdu_sector[i], keys, bio, heads)
            if room and q != NONE:
                ns = _bio_event(k, q, t[i], bio, stages, qs, vals, ns, per_q)
        elif k == K_D or k == K_C:
            nh = _contained(d, sector[i], sector[i] + nbytes[i] // SECTOR, k == K_C, hits, bio, heads, buckets)
            room = ns + 2 * nh <= qs.shape[0]
            state[S_NEED] = 2 * nh
            if room:
                ns = _range_event(k, i, t[i], hits, nh, bio, heads, keys, buckets, stages, qs, vals, ns, state, per_q)
        i += 1 if room else 0
    state[S_SAMPLES] = ns
    return i


@inlined
def _queue(q, d, start, stop, tq, flags, bio, heads, keys, buckets, state, per_q):
    """A new bio: it replaces a live Q at the same start sector, and joins its device's live
    list and its bucket's list."""
    bio[q, B_DEV], bio[q, B_START], bio[q, B_END], bio[q, B_Q] = d, start, stop, tq
    bio[q, B_G], bio[q, B_S], bio[q, B_I], bio[q, B_M] = NONE, NONE, NONE, NONE
    bio[q, B_FLAGS], bio[q, B_PREV], bio[q, B_BPREV] = flags, NONE, NONE
    for c in range(6):
        per_q[c, q] = NONE
    bio[q, B_PREV_ON_DEV] = heads[d, H_LAST_Q]
    heads[d, H_LAST_Q] = q
    slot = _find(keys, d, start) if _fits(start) else -1
    old = keys[slot, VALUE] if slot >= 0 else NONE
    if old != NONE:
        _close(old, bio, heads, keys, buckets, state)
        slot = _find(keys, d, start)             # closing it may have moved the keys
    if slot >= 0:
        _store(keys, slot, d, start, q)
        state[S_KEYS] += 1
    _push(bio, q, heads[d, H_LIVE], B_PREV, B_NEXT)
    heads[d, H_LIVE] = q
    heads[d, H_COUNT] += 1
    bucket = start >> BUCKET_BITS
    slot = _find(buckets, d, bucket)
    state[S_BUCKETS] += 1 if buckets[slot, KEY_A] == EMPTY else 0
    _push(bio, q, buckets[slot, VALUE], B_BPREV, B_BNEXT)
    _store(buckets, slot, d, bucket, q)


@inlined
def _store(table, s, a, b, value):
    """table[(a, b)] = value at slot s, the key's slot (the caller made room)."""
    table[s, KEY_A] = a
    table[s, KEY_B] = b
    table[s, VALUE] = value


@inlined
def _push(bio, q, head, prev, nxt):
    """Put bio q before `head` in a doubly linked list (links in columns prev, nxt)."""
    bio[q, nxt] = head
    if head != NONE:
        bio[head, prev] = q


@inlined
def _unlink(bio, q, prev, nxt):
    """Take bio q out of a doubly linked list; returns its successor when q was the head, else q."""
    p, s = bio[q, prev], bio[q, nxt]
    if s != NONE:
        bio[s, prev] = p
    if p != NONE:
        bio[p, nxt] = s
    return s if p == NONE else q


@inlined
def _close(q, bio, heads, keys, buckets, state):
    """A bio is replaced or completed: out of its device's live list, its bucket and the keys."""
    bio[q, B_FLAGS] |= CLOSED
    d, start = bio[q, B_DEV], bio[q, B_START]
    new_head = _unlink(bio, q, B_PREV, B_NEXT)
    if new_head != q:
        heads[d, H_LIVE] = new_head
    heads[d, H_COUNT] -= 1
    new_head = _unlink(bio, q, B_BPREV, B_BNEXT)
    if new_head != q:
        _set_bucket(buckets, d, start >> BUCKET_BITS, new_head, state)
    slot = _find(keys, d, start) if _fits(start) else -1
    if slot >= 0 and keys[slot, VALUE] == q:
        _delete(keys, slot)
        state[S_KEYS] -= 1


@inlined
def _set_bucket(buckets, d, bucket, head, state):
    """The bucket's list now starts at `head`; an empty bucket leaves the table."""
    slot = _find(buckets, d, bucket)
    buckets[slot, VALUE] = head
    if head == NONE:
        _delete(buckets, slot)
        state[S_BUCKETS] -= 1


@inlined
def _lookup(d, sector, keys, bio, heads):
    """btt's dip_find_sec: the live Q starting at the sector, else the latest live Q of the
    device containing it (among its last LOOKBACK Qs), else NONE."""
    q = keys[_find(keys, d, sector), VALUE] if _fits(sector) else NONE
    if q != NONE:
        return q
    return _lookback(heads[d, H_LAST_Q], sector, bio)


@inlined
def _lookback(q, sector, bio):
    """The first live bio containing the sector among q and the LOOKBACK - 1 Qs of its device
    before it, else NONE."""
    looked = 0
    while q != NONE and looked < LOOKBACK:
        if (bio[q, B_FLAGS] & CLOSED) == 0 and bio[q, B_START] <= sector and sector < bio[q, B_END]:
            return q
        q = bio[q, B_PREV_ON_DEV]
        looked += 1
    return NONE


@inlined
def _bio_event(k, q, ti, bio, stages, qs, vals, ns, per_q):
    """G, S, I, M/F or A of live bio q at time ti: its samples and times; returns the sample count."""
    seen = bio[q, B_FLAGS]
    if k == K_G:
        v = _tdelta(bio[q, B_Q], ti)
        ns = _put(stages, qs, vals, ns, Q2G, q, v)
        per_q[O_Q2G, q] = v
        ns = _put(stages, qs, vals, ns, S2G, q, _tdelta(bio[q, B_S], ti)) if seen & SEEN_S else ns
        bio[q, B_G] = ti
        bio[q, B_FLAGS] = seen | SEEN_G
    elif k == K_S:
        bio[q, B_S] = ti
        bio[q, B_FLAGS] = seen | SEEN_S
    elif k == K_I:
        v = _tdelta(bio[q, B_G], ti)
        ns = _put(stages, qs, vals, ns, G2I, q, v) if seen & SEEN_G else ns
        per_q[O_G2I, q] = v if seen & SEEN_G else per_q[O_G2I, q]
        bio[q, B_I] = ti
        bio[q, B_FLAGS] = seen | SEEN_I
    elif k == K_M:
        v = _tdelta(bio[q, B_Q], ti)
        ns = _put(stages, qs, vals, ns, Q2M, q, v)
        per_q[O_Q2M, q] = v
        bio[q, B_M] = ti
        bio[q, B_FLAGS] = seen | SEEN_M
    else:
        ns = _put(stages, qs, vals, ns, Q2A, q, _tdelta(bio[q, B_Q], ti))
    return ns


@inlined
def _range_event(k, i, ti, hits, nh, bio, heads, keys, buckets, stages, qs, vals, ns, state, per_q):
    """D or C (event i at time ti) applied to the nh bios in hits; returns the sample count."""
    for h in range(nh):
        q = hits[h]
        if k == K_D:
            ns = _dispatch(q, ti, bio, stages, qs, vals, ns, per_q)
        else:
            ns = _put(stages, qs, vals, ns, Q2C, q, _tdelta(bio[q, B_Q], ti))
            seen = bio[q, B_FLAGS]
            ns = _put(stages, qs, vals, ns, D2C, q, _tdelta(per_q[O_D, q], ti)) if seen & SEEN_D else ns
            bio[q, B_FLAGS] = seen | DONE
            per_q[O_C_EV, q] = i
            _close(q, bio, heads, keys, buckets, state)
    return ns


@inlined
def _dispatch(q, ti, bio, stages, qs, vals, ns, per_q):
    """A D of live bio q: I2D from its last I, else M2D from its last merge; returns the sample count."""
    seen = bio[q, B_FLAGS]
    if seen & SEEN_I:
        v = _tdelta(bio[q, B_I], ti)
        ns = _put(stages, qs, vals, ns, I2D, q, v)
        per_q[O_I2D, q] = v
    elif seen & SEEN_M:
        ns = _put(stages, qs, vals, ns, M2D, q, _tdelta(bio[q, B_M], ti))
    per_q[O_D, q] = ti
    bio[q, B_FLAGS] = seen | SEEN_D
    return ns


@inlined
def _contains(start, stop, odd, q, bio):
    """A D or C over [start, stop] applies to the live bio q: the bio lies inside the range,
    and it starts at the range's start sector (by key) or strictly inside some D (C) of its
    device. For a bio of nonzero length starting inside the range, the range itself is such
    a D (C); the flag `odd` (ODD_D, ODD_C) says it for the others. Written without
    short-circuits: see the note on reference counting."""
    qs = bio[q, B_START]
    inside = (qs >= start) & (bio[q, B_END] <= stop)
    keyed = (qs == start) & (qs >= 0) & (qs < KEY_SECTORS)
    return inside & (keyed | ((start < qs) & (qs < stop)) | ((bio[q, B_FLAGS] & odd) != 0))


@inlined
def _contained(d, start, stop, is_c, hits, bio, heads, buckets):
    """The live bios of device d a D or C over [start, stop] applies to: stored in hits (room
    for every bio), returns how many."""
    odd = ODD_C if is_c else ODD_D
    lo, hi = start >> BUCKET_BITS, stop >> BUCKET_BITS
    few = heads[d, H_COUNT] <= LIVE_SCAN or hi - lo >= heads[d, H_COUNT]
    nh = _chain_hits(heads[d, H_LIVE] if few and stop >= start else NONE, B_NEXT, start, stop, odd, hits, 0, bio)
    bucket = lo if (not few) and stop >= start else hi + 1
    while bucket <= hi:
        nh = _chain_hits(buckets[_find(buckets, d, bucket), VALUE], B_BNEXT, start, stop, odd, hits, nh, bio)
        bucket += 1
    return nh


@inlined
def _chain_hits(q, link, start, stop, odd, hits, nh, bio):
    """Add to hits[nh:] the bios of the chain from q (next: bio[q, link]) that a D or C over
    [start, stop] applies to; returns the new count."""
    while q != NONE:
        hits[nh] = q
        nh += 1 if _contains(start, stop, odd, q, bio) else 0
        q = bio[q, link]
    return nh


@compiled
def request_times(q_t, d_t, c_t):
    """Per request: completed, Q2C and D2C (btt's tdelta; NONE when it has none)."""
    n = q_t.shape[0]
    done, q2c, d2c = np.empty(n, np.bool_), np.empty(n, np.int64), np.empty(n, np.int64)
    _request_times(q_t, d_t, c_t, done, q2c, d2c)
    return done, q2c, d2c


@no_refcount
def _request_times(q_t, d_t, c_t, done, q2c, d2c):
    for i in range(q_t.shape[0]):
        done[i] = c_t[i] != NONE
        q2c[i] = _tdelta(q_t[i], c_t[i]) if done[i] else NONE
        d2c[i] = _tdelta(d_t[i], c_t[i]) if done[i] and d_t[i] != NONE else NONE
