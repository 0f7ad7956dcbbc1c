"""The hash table (two-part integer keys) and dense ids shared by the usb and block layers (scsitrace/_keys.py)
against Python dicts, on random keys chosen to collide often."""
from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
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
def _apply(ops, table_in):
    """Insert (op value >= 0) or remove (< 0) each two-part key, doubling at half full;
    returns what `find_row` gives for every key afterwards (EMPTY when absent)."""
    table = table_in
    used = 0
    for j in range(ops.shape[0]):
        if 2 * (used + 1) > table.shape[0]:
            table = _keys.doubled(table)
        h = _keys.find_row(table, ops[j, 0], ops[j, 1])
        if ops[j, 2] >= 0:
            used += 1 if table[h, _keys.KEY_A] == _keys.EMPTY else 0
            table[h, _keys.KEY_A], table[h, _keys.KEY_B], table[h, _keys.VALUE] = ops[j, 0], ops[j, 1], ops[j, 2]
        elif table[h, _keys.KEY_A] != _keys.EMPTY:
            _keys.delete_row(table, h)
            used -= 1
    found = np.empty(ops.shape[0], np.int64)
    for j in range(ops.shape[0]):
        found[j] = table[_keys.find_row(table, ops[j, 0], ops[j, 1]), _keys.VALUE]
    return found


@settings(max_examples=300, deadline=None)
# (0, 0) and (0, 11) share a home slot at 8 slots: removing the first must shift the second back
@example(ops=[(0, 0, 1), (0, 11, 2), (0, 5, 3), (0, 0, -1)])
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.one_of(st.integers(-5, 40), st.integers(-2**63, 2**63 - 1)),
                              st.one_of(st.just(-1), st.integers(0, 1000))), max_size=200))
def test_table_inserts_and_removes_as_a_dict_does(ops):
    want = {}
    for a, b, value in ops:
        if value >= 0:
            want[a, b] = value
        else:
            want.pop((a, b), None)
    arr = np.array(ops, np.int64).reshape(-1, 3)
    found = _apply(arr, np.full((4, 4), _keys.EMPTY, np.int64))
    assert found.tolist() == [want.get((a, b), _keys.EMPTY) for a, b, _ in ops]


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(st.integers(0, 2**64 - 1), max_size=200))
def test_dense_ids_of_unsigned_keys(keys):
    """uint64 keys (URB ids, device numbers) are numbered as their values, not wrapped."""
    ids, first = _keys.dense_ids(np.array(keys, np.uint64))
    numbering = {}
    for k in keys:
        numbering.setdefault(k, len(numbering))
    assert ids.tolist() == [numbering[k] for k in keys]
    assert _keys.distinct(np.array(keys, np.uint64)).tolist() == sorted(numbering)
