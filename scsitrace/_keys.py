"""Integer keys in compiled passes (numba): an open-addressing hash table of uint64 keys with
int64 values (a value < 0 marks an empty slot), linear probing, and dense ids of keys.

The USB pairing keeps its URBs in flight in such a table; `dense_ids` numbers devices,
processes and (device, process) pairs for the usb and block layers; `distinct` lists the
block layer's devices.
"""
from __future__ import annotations

import numpy as np

from ._jit import compiled, inlined

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


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
