"""Integer keys in compiled passes (numba): open-addressing hash tables with linear probing,
and dense ids of keys.

Two layouts, one probing rule each:
- rows (`find_row`, `delete_row`, `doubled`): a (slots, 4) int64 array, one 32-byte row per
  slot holding a two-part key (KEY_A >= 0, KEY_B), a VALUE and a spare column; the block
  machine's live bios by (device, start sector) and by (device, sector bucket).
- pairs (`find`, `remove`, `grow`): uint64 keys and int64 values (< 0: empty); the USB
  pairing's URBs in flight, and `dense_ids`, which numbers devices, processes and (device,
  process) pairs for the usb and block layers; `distinct` lists the block layer's devices.
"""
from __future__ import annotations

import numpy as np

from ._jit import compiled, inlined, no_refcount

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

# ---------------------------------------------------------------- rows: two-part keys

KEY_A, KEY_B, VALUE = 0, 1, 2        # columns of a table row (a fourth pads it to 32 bytes)
EMPTY = -1                           # every column of a free slot (KEY_A is never negative)


@inlined
def row_home(a, b, mask):
    """Home slot of the key (a, b) in a table of mask + 1 slots (multiplicative hashing)."""
    h = (np.uint64(a) * _GOLDEN) ^ (np.uint64(b) * np.uint64(0xC2B2AE3D27D4EB4F))
    return np.int64((h >> np.uint64(32)) & np.uint64(mask))


@inlined
def find_row(table, a, b):
    """Slot of key (a, b), or the free slot where it would go."""
    mask = table.shape[0] - 1
    s = row_home(a, b, mask)
    while table[s, KEY_A] != EMPTY and (table[s, KEY_A] != a or table[s, KEY_B] != b):
        s = (s + 1) & mask
    return s


@no_refcount
def delete_row(table, s):
    """Free slot s, shifting back the entries after it that probed past it."""
    mask = table.shape[0] - 1
    j = (s + 1) & mask
    while table[j, KEY_A] != EMPTY:
        home_slot = row_home(table[j, KEY_A], table[j, KEY_B], mask)
        stays = (s < home_slot <= j) if s <= j else (home_slot > s or home_slot <= j)
        if not stays:
            for c in range(4):
                table[s, c] = table[j, c]
            s = j
        j = (j + 1) & mask
    for c in range(4):
        table[s, c] = EMPTY               # a free slot's VALUE reads EMPTY


@compiled
def doubled(table):
    """A copy of the table twice as large (callers keep tables at most half full)."""
    out = np.full((2 * table.shape[0], 4), EMPTY, np.int64)
    for s in range(table.shape[0]):
        if table[s, KEY_A] != EMPTY:
            out[find_row(out, table[s, KEY_A], table[s, KEY_B]), :] = table[s, :]
    return out


# ---------------------------------------------------------------- pairs: uint64 keys


@inlined
def home(key, mask):
    """Home slot of `key` in a table of mask + 1 slots (multiplicative hashing)."""
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(32)) & mask


@compiled
def grow(keys, vals):
    """The table at twice the capacity."""
    cap = keys.shape[0] * 2
    mask = cap - 1
    nk = np.zeros(cap, np.uint64)
    nv = np.full(cap, -1, np.int64)
    for j in range(keys.shape[0]):
        if vals[j] >= 0:
            h = home(keys[j], mask)
            while nv[h] >= 0:
                h = (h + 1) & mask
            nk[h] = keys[j]
            nv[h] = vals[j]
    return nk, nv


@inlined
def find(keys, vals, key):
    """Slot of `key` in the table, or the empty slot where it would go."""
    mask = keys.shape[0] - 1
    h = home(key, mask)
    while vals[h] >= 0 and keys[h] != key:
        h = (h + 1) & mask
    return h


@inlined
def remove(keys, vals, h):
    """Empty slot `h`, shifting later entries of its probe run back (linear probing)."""
    mask = keys.shape[0] - 1
    while True:
        vals[h] = -1
        k = h
        while True:
            k = (k + 1) & mask
            if vals[k] < 0:
                return
            at = home(keys[k], mask)
            # the entry at k may move to h unless its home lies cyclically in (h, k]
            if (h < k and h < at <= k) or (h > k and (at > h or at <= k)):
                continue
            break
        keys[h] = keys[k]
        vals[h] = vals[k]
        h = k


@compiled
def dense_ids(key):
    """(id of each key: 0, 1, ... in order of first appearance; the row where each id first
    appears). Runs of one key, the rule for devices and processes, cost one compare a row."""
    return _numbered(key, True)


@compiled
def distinct(key):
    """The distinct keys, sorted (dense_ids without the per-row ids)."""
    first = _numbered(key, False)[1]
    return np.sort(key[first])


@compiled
def _numbered(key, with_ids):
    """dense_ids; the per-row ids only `with_ids` (else an empty array)."""
    n = key.shape[0]
    keys = np.zeros(1 << 6, np.uint64)
    vals = np.full(1 << 6, -1, np.int64)
    first = np.empty(n, np.int64)
    used = 0
    out = np.empty(n if with_ids else 0, np.int64)
    last_key, last_id = np.uint64(0), np.int64(-1)
    for r in range(n):
        if last_id >= 0 and np.uint64(key[r]) == last_key:
            if with_ids:
                out[r] = last_id
            continue
        if 2 * (used + 1) > keys.shape[0]:
            keys, vals = grow(keys, vals)
        k = np.uint64(key[r])
        h = find(keys, vals, k)
        if vals[h] < 0:
            keys[h] = k
            vals[h] = used
            first[used] = r
            used += 1
        if with_ids:
            out[r] = vals[h]
        last_key, last_id = k, vals[h]
    return out, first[:used].copy()
