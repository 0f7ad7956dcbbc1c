"""Integer keys in compiled passes (numba): open-addressing hash tables with linear probing,
and dense ids of keys.

One table: a (slots, 4) int64 array, one 32-byte row per slot holding a two-part key
(KEY_A >= 0, KEY_B), a VALUE and a spare column, probed linearly (`find_row`), entries
removed by backward shift (`delete_row`), grown by its user between passes (`doubled`: a
pass that creates arrays cannot run without numba's reference counting). Its users: the
block machine's live bios by (device, start sector) and by (device, sector bucket); the USB
pairing's URBs in flight (key (0, URB id)); `dense_ids`, which numbers devices, processes
and (device, process) pairs for the usb and block layers; `distinct`.
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


# ---------------------------------------------------------------- dense ids

def dense_ids(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id of each key: 0, 1, ... in order of first appearance; the row where each id first
    appears). Runs of one key, the rule for devices and processes, cost one compare a row."""
    return _numbered(key, True)


def distinct(key: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (dense_ids without the per-row ids)."""
    return np.sort(key[_numbered(key, False)[1]])


@compiled
def _numbered(key, with_ids):
    """dense_ids; the per-row ids only `with_ids` (else an empty array). The table (key (0, k)
    -> id) is grown here, between calls of `_number_from` (state: next row, ids so far)."""
    n = key.shape[0]
    table = np.full((1 << 6, 4), EMPTY, np.int64)
    first = np.empty(n, np.int64)
    out = np.empty(n if with_ids else 0, np.int64)
    state = np.zeros(2, np.int64)
    while state[0] < n:
        if 2 * (state[1] + 1) > table.shape[0]:
            table = doubled(table)
        _number_from(key, with_ids, table, first, out, state)
    return out, first[:state[1]].copy()


@no_refcount
def _number_from(key, with_ids, table, first, out, state):
    """Number the keys from state[0] on, until the end or a new key the table has no room for."""
    r, used = state[0], state[1]
    last_key, last_id = np.int64(0), np.int64(-1)
    room = True
    while r < key.shape[0] and room:
        k = np.int64(key[r])        # any integer keys; uint64 wraps (only equality matters)
        if last_id >= 0 and k == last_key:
            if with_ids:
                out[r] = last_id
            r += 1
            continue
        h = find_row(table, 0, k)
        new = table[h, KEY_A] == EMPTY
        room = (not new) or 2 * (used + 1) <= table.shape[0]
        if room:
            if new:
                table[h, KEY_A], table[h, KEY_B], table[h, VALUE] = 0, k, used
                first[used] = r
                used += 1
            if with_ids:
                out[r] = table[h, VALUE]
            last_key, last_id = k, table[h, VALUE]
            r += 1
    state[0], state[1] = r, used
