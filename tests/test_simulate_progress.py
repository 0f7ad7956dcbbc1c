"""`simulate` reports its progress on long runs: the simulator calls back with the bus time
reached and the I/Os issued, increasing, within the run; the command shows a bar only on a
terminal."""
from __future__ import annotations

import io

from scsitrace.progress import progress_of
from scsitrace.sim import Workload, simulate
from scsitrace.sim import model


def test_progress_callbacks_follow_the_run(tmp_path, monkeypatch):
    monkeypatch.setattr(model, "PROGRESS_EVERY", 2)
    calls = []
    wl = Workload(disks=2, op="read", pattern="seq", size=32768, inflight=1, processes=1,
                  duration_ns=200_000_000, count=None, seed=1)
    res = simulate(wl, tmp_path / "t.ancot", progress=lambda t, n: calls.append((t, n)))
    assert len(calls) > 3
    times, issued = [t for t, _ in calls], [n for _, n in calls]
    assert times == sorted(times) and issued == sorted(issued)
    assert 0 < times[-1] <= res.end_ns and issued[-1] <= res.ios_completed + 2 * wl.disks


def test_no_bar_when_not_a_terminal():
    with progress_of("simulating", 10.0, "s", stream=io.StringIO()) as update:
        assert update is None
