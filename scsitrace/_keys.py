"""Dense ids of integer keys (Rust: native/src/bus/keys.rs, the one implementation):
`dense_ids` numbers the usb layer's devices; `distinct`."""
from __future__ import annotations

import numpy as np
import polars as pl

from ._native import bus as _bus

def _as_int64(key: np.ndarray) -> np.ndarray:
    """Any integer keys as int64 (64-bit unsigned keys by their bits: only equality matters)."""
    key = np.asarray(key)
    if key.dtype.itemsize == 8 and key.dtype.kind in "iu":
        return np.ascontiguousarray(key).view(np.int64)
    return np.ascontiguousarray(key, dtype=np.int64)


def dense_ids(key: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id of each key: 0, 1, ... in order of first appearance; the row where each id first
    appears). Runs of one key, the rule for devices and processes, cost one compare a row."""
    numbered = _bus.dense_ids(_as_int64(key), True)
    return pl.DataFrame(numbered.ids)["id"].to_numpy(), pl.DataFrame(numbered.first)["row"].to_numpy()


def distinct(key: np.ndarray) -> np.ndarray:
    """The distinct keys, sorted (dense_ids without the per-row ids)."""
    first = pl.DataFrame(_bus.dense_ids(_as_int64(key), False).first)["row"].to_numpy()
    return np.sort(key[first])
