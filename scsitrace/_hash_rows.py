"""The hash table of the block and usb layers' numba passes (rows of a two-part key and a
value): `find_row`, `delete_row`, `doubled`. Only those numba kernels import this module
(through scsitrace/_keys.py's names); it goes when they are ported to Rust.

One table: a (slots, 4) int64 array, one 32-byte row per slot holding a two-part key
(KEY_A >= 0, KEY_B), a VALUE and a spare column, probed linearly (`find_row`), entries
removed by backward shift (`delete_row`), grown by its user between passes (`doubled`: a
pass that creates arrays cannot run without numba's reference counting). Its users: the
block machine's live bios by (device, start sector) and by (device, sector bucket); the USB
pairing's URBs in flight (key (0, URB id)).
"""
from __future__ import annotations

import numpy as np

from ._jit import compiled, inlined, no_refcount

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)

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
