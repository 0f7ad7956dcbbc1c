"""Dense ids shared by the usb and block layers (scsitrace/_keys.py, Rust) against Python
dicts, on random keys chosen to collide often."""
from __future__ import annotations


import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace import _keys

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


