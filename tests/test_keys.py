"""Dense ids shared by the usb and block layers (scsitrace/_keys.py, Rust) and the hash table of
their numba passes (two-part integer keys, scsitrace/_hash_rows.py) against Python dicts, on
random keys chosen to collide often."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from scsitrace import _keys, _hash_rows    # _hash_rows: numba, until the block and usb passes are ported

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


@_hash_rows.compiled
def _apply(ops, table_in):
    """Insert (op value >= 0) or remove (< 0) each two-part key, doubling at half full;
    returns what `find_row` gives for every key afterwards (EMPTY when absent)."""
    table = table_in
    used = 0
    for j in range(ops.shape[0]):
        if 2 * (used + 1) > table.shape[0]:
            table = _hash_rows.doubled(table)
        h = _hash_rows.find_row(table, ops[j, 0], ops[j, 1])
        if ops[j, 2] >= 0:
            used += 1 if table[h, _hash_rows.KEY_A] == _hash_rows.EMPTY else 0
            table[h, _hash_rows.KEY_A], table[h, _hash_rows.KEY_B], table[h, _hash_rows.VALUE] = ops[j, 0], ops[j, 1], ops[j, 2]
        elif table[h, _hash_rows.KEY_A] != _hash_rows.EMPTY:
            _hash_rows.delete_row(table, h)
            used -= 1
    found = np.empty(ops.shape[0], np.int64)
    for j in range(ops.shape[0]):
        found[j] = table[_hash_rows.find_row(table, ops[j, 0], ops[j, 1]), _hash_rows.VALUE]
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
    found = _apply(arr, np.full((4, 4), _hash_rows.EMPTY, np.int64))
    assert found.tolist() == [want.get((a, b), _hash_rows.EMPTY) for a, b, _ in ops]


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


def test_dense_ids_of_other_integer_types_and_long_runs():
    keys = np.repeat(np.array([7, -3, 7, 2**31 - 1, -3], np.int32), [1000, 1, 3000, 2, 5])
    ids, first = _keys.dense_ids(keys)
    assert ids.tolist() == [0] * 1000 + [1] + [0] * 3000 + [2] * 2 + [1] * 5
    assert first.tolist() == [0, 1000, 4001]
    assert _keys.distinct(keys).tolist() == [-3, 7, 2**31 - 1]
    many = np.arange(100_000, dtype=np.int64)[::-1] * 2**40       # the table grows many times
    ids, first = _keys.dense_ids(many)
    assert (ids == np.arange(len(many))).all() and (first == np.arange(len(many))).all()


def test_dense_ids_import_no_numba():
    code = "import sys; from scsitrace import _keys; _keys.dense_ids(__import__('numpy').arange(3)); " \
           "print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
