"""How scsitrace compiles its per-record passes (numba, cached beside the modules).

`compiled` is plain numba. `no_refcount` is for the hot loops and the helpers they call,
which only read and write arrays handed to them (they cannot create arrays): numba's
reference counting of arrays costs an atomic instruction per array at every call and branch
its pruning pass cannot see through (a `break`, nested branches, a loop inside a helper),
which measured 30-50 ns per call of a small helper, more than the work itself. Without it,
arrays passed in stay alive because their caller holds them. `inlined` is `no_refcount` for
the small helpers of a per-record loop, compiled into their caller: each array argument is
several machine words, and passing them on every call cost the block machine a third of its
time.
"""
from __future__ import annotations

from numba import njit


def compiled(fn):
    return njit(cache=True, nogil=True)(fn)


def no_refcount(fn):
    return njit(cache=True, nogil=True, _nrt=False)(fn)


def inlined(fn):
    return njit(cache=True, nogil=True, _nrt=False, inline="always")(fn)
