"""Dense ids of integer keys (Rust: native/src/bus/keys.rs): `dense_ids` numbers devices,
processes and (device, process) pairs for the usb and block layers; `distinct`.

The hash table of the block and usb layers' passes not yet in Rust (`find_row`,
`delete_row`, `doubled`, `KEY_A`, `KEY_B`, `VALUE`, `EMPTY`) is still reached through this
module's names, loaded from scsitrace/_hash_rows.py only when one of them is asked for.
"""
from __future__ import annotations

import numpy as np

from ._native import bus as _bus

_TABLE_NAMES = ("KEY_A", "KEY_B", "VALUE", "EMPTY", "row_home", "find_row", "delete_row", "doubled")


def __getattr__(name: str):
    if name in _TABLE_NAMES:
        from . import _hash_rows
        return getattr(_hash_rows, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _as_int64(key: np.ndarray) -> np.ndarray:
    """Any integer keys as int64 (64-bit unsigned keys by their bits: only equality matters)."""
    key = np.asarray(key)
    if key.dtype.itemsize == 8 and key.dtype.kind in "iu":
        return np.ascontiguousarray(key).view(np.int64)
    return np.ascontiguousarray(key, dtype=np.int64)


def dense_ids(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id of each key: 0, 1, ... in order of first appearance; the row where each id first
    appears). Runs of one key, the rule for devices and processes, cost one compare a row."""
    return _bus.dense_ids(_as_int64(key), True)


def distinct(key: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (dense_ids without the per-row ids)."""
    return np.sort(key[_bus.dense_ids(_as_int64(key), False)[1]])
