"""The integer-key hash table and dense ids shared by the usb and block layers (scsitrace/_keys.py)
against Python dicts, on random keys chosen to collide often."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace import _keys
from scsitrace._jit import compiled

KEYS = st.one_of(st.integers(0, 40), st.integers(0, 2**63 - 1))


@settings(max_examples=300, deadline=None)
@given(keys=st.lists(KEYS, max_size=300))
def test_dense_ids_number_keys_in_order_of_first_appearance(keys):
    ids, first = _keys.dense_ids(np.array(keys, np.int64))
    numbering = {}
    for k in keys:
        numbering.setdefault(k, len(numbering))
    assert ids.tolist() == [numbering[k] for k in keys]
    assert first.tolist() == [keys.index(k) for k in numbering]
    assert _keys.distinct(np.array(keys, np.int64)).tolist() == sorted(numbering)


@compiled
def _apply(ops, keys_in, vals_in):
    """Insert (op >= 0: value op) or remove (op < 0) each key, growing at half full; returns
    the table and what `find` gives for every key afterwards."""
    keys, vals = keys_in, vals_in
    used = 0
    for j in range(ops.shape[0]):
        if 2 * (used + 1) > keys.shape[0]:
            keys, vals = _keys.grow(keys, vals)
        h = _keys.find(keys, vals, np.uint64(ops[j, 0]))
        if ops[j, 1] >= 0:
            used += 1 if vals[h] < 0 else 0
            keys[h] = np.uint64(ops[j, 0])
            vals[h] = ops[j, 1]
        elif vals[h] >= 0:
            _keys.remove(keys, vals, h)
            used -= 1
    found = np.empty(ops.shape[0], np.int64)
    for j in range(ops.shape[0]):
        found[j] = vals[_keys.find(keys, vals, np.uint64(ops[j, 0]))]
    return found


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 60), st.integers(-1, 1000)), max_size=200))
def test_table_inserts_and_removes_as_a_dict_does(ops):
    want = {}
    for key, value in ops:
        if value >= 0:
            want[key] = value
        else:
            want.pop(key, None)
    arr = np.array(ops, np.int64).reshape(-1, 2)
    found = _apply(arr, np.zeros(4, np.uint64), np.full(4, -1, np.int64))
    assert found.tolist() == [want.get(key, -1) for key, _ in ops]
