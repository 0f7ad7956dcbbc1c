"""The Wren IV mechanism model (scsitrace/sim/disk.py) keeps its physical invariants whatever
the bus does: hypothesis drives it with arbitrary send/receive timings and checks them.

- a sector is read only while it passes under the head (its rotational slot), and written
  likewise;
- the buffer never holds more than its 32 KB: sector k is read only after sector
  k - capacity has left (reads), and received only after it has been written (writes);
- a sector is written only after it has been received;
- consecutive sectors are at least one sector time apart.
"""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace.sim.disk import Disk
from scsitrace.sim.params import DiskParams

EPS = 1e-3   # ns: float slack


def on_slot(disk: Disk, lba: int, start: float) -> bool:
    slot = (lba % disk.spt) * disk.sector_ns
    off = (start - disk.angle0 - slot) % disk.rot
    return min(off, disk.rot - off) < EPS


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), lba=st.integers(0, 600_000), n=st.integers(1, 300),
       delays=st.lists(st.floats(0, 3e6), min_size=1, max_size=40), t0=st.floats(0, 1e9),
       readahead=st.booleans())
def test_read_stream_invariants(seed, lba, n, delays, t0, readahead):
    p = DiskParams(readahead=readahead)
    disk = Disk(0, p, np.random.default_rng(seed))
    disk.begin_read(lba, n, t0)
    sent, ready = [], []
    t = t0
    for k in range(n):
        r = disk.ready_time(lba + k)
        assert r is not None
        t = max(t, r) + delays[k % len(delays)]      # the bus takes the sector some time later
        disk.mark_sent(lba + k, t)
        sent.append(t)
        ready.append(r)
    for k in range(n):
        start = ready[k] - disk.sector_ns
        assert start >= t0 - EPS
        assert on_slot(disk, lba + k, start)
        if k:
            assert ready[k] - ready[k - 1] >= disk.sector_ns - EPS
        if k >= disk.cap:
            assert start >= sent[k - disk.cap] - EPS          # room in the buffer
    if not readahead:
        assert disk.ready_time(lba + n) is None                 # no reading past the request


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**16), lba=st.integers(0, 600_000), n=st.integers(1, 300),
       delays=st.lists(st.floats(0, 3e6), min_size=1, max_size=40), t0=st.floats(0, 1e9))
def test_write_invariants(seed, lba, n, delays, t0):
    disk = Disk(0, DiskParams(), np.random.default_rng(seed))
    disk.begin_write(lba, t0)
    recv = []
    t = t0
    for k in range(n):
        t = max(t, disk.space_for(k)) + delays[k % len(delays)]
        disk.mark_received(t)
        recv.append(t)
    for k in range(n):
        end = disk.written_time(k)
        start = end - disk.sector_ns
        assert start >= recv[k] - EPS                           # written after it came in
        assert on_slot(disk, lba + k, start)
        if k:
            assert end - disk.written_time(k - 1) >= disk.sector_ns - EPS
        if k >= disk.cap:
            assert recv[k] >= disk.written_time(k - disk.cap) - EPS   # room in the buffer


def test_sequential_hit_continues_the_stream():
    """Readahead on: the next sequential request is served from the stream, no seek."""
    disk = Disk(0, DiskParams(), np.random.default_rng(1))
    disk.begin_read(1000, 64, 0.0)
    t = 0.0
    for k in range(64):
        t = max(t, disk.ready_time(1000 + k)) + 130_000.0
        disk.mark_sent(1000 + k, t)
    stream = disk.stream
    disk.begin_read(1064, 64, t + 5e6)
    assert disk.stream is stream                                 # same stream, no new seek
    assert disk.ready_time(1064) <= t + 5e6                      # read ahead meanwhile


def test_seek_curve_averages_table1():
    p = DiskParams()
    disk = Disk(0, p, np.random.default_rng(2))
    rng = np.random.default_rng(3)
    lbas = rng.integers(0, p.capacity_sectors, 20_000)
    seeks = [disk.seek_ns(int(x)) for x in lbas]
    assert math.isclose(np.mean(seeks), p.avg_seek_ns, rel_tol=0.05)
