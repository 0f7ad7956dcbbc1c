"""The vectorized stage machine against a one-event-at-a-time reference of the same rules
(docs/blktrace.md, "The stage machine"), on random event streams: few sectors and sizes so
that replacements, merges, containment, requeues and stray events happen often."""
from __future__ import annotations

import collections
import os
import sys

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402

from scsitrace import core
from scsitrace.block import events as block_events, machine, stats as block_stats  # noqa: E402
from scsitrace.parsers import blktrace  # noqa: E402

DEVS = (gen.DISK, (8 << 20) | 16)
LETTERS = "QGSIMFDCRP"


def reference(events: list[tuple]) -> dict:
    """btt's rules, one event at a time: {(device, stage): sorted sample list}."""
    samples = collections.defaultdict(list)
    live: list[dict] = []
    started, last_q = set(), {}
    tdelta = lambda a, b: b - a if a < b else 1  # noqa: E731

    def find(dev, sector, idx):
        for q in live:
            if q["dev"] == dev and q["start"] == sector:
                return q
        inside = [q for q in live if q["dev"] == dev and q["start"] <= sector < q["end"]]
        return max(inside, key=lambda q: q["idx"]) if inside else None

    for idx, (t, letter, dev, sector, nsect) in enumerate(events):
        if letter not in "QGSIMFDCR" or (nsect == 0 and letter != "R"):
            continue
        if dev not in started:
            if letter != "Q":
                continue
            started.add(dev)
        end = sector + nsect
        if letter == "Q":
            live[:] = [q for q in live if not (q["dev"] == dev and q["start"] == sector)]
            live.append({"dev": dev, "start": sector, "end": end, "t": t, "idx": idx,
                         "g": None, "s": None, "i": None, "m": None, "d": None})
            if dev in last_q:
                samples[(dev, "Q2Q")].append(tdelta(last_q[dev], t) if t > last_q[dev] else 1)
            last_q[dev] = t
        elif letter in "GSIMF":
            q = find(dev, sector, idx)
            if q is None:
                continue
            if letter == "G":
                samples[(dev, "Q2G")].append(tdelta(q["t"], t))
                if q["s"] is not None:
                    samples[(dev, "S2G")].append(tdelta(q["s"], t))
                q["g"] = t
            elif letter == "S":
                q["s"] = t
            elif letter == "I":
                if q["g"] is not None:
                    samples[(dev, "G2I")].append(tdelta(q["g"], t))
                q["i"] = t
            else:
                samples[(dev, "Q2M")].append(tdelta(q["t"], t))
                q["m"] = t
        elif letter in "DC":
            inside = [q for q in live if q["dev"] == dev and sector <= q["start"] and q["end"] <= end]
            for q in inside:
                if letter == "D":
                    if q["i"] is not None:
                        samples[(dev, "I2D")].append(tdelta(q["i"], t))
                    elif q["m"] is not None:
                        samples[(dev, "M2D")].append(tdelta(q["m"], t))
                    q["d"] = t
                else:
                    samples[(dev, "Q2C")].append(tdelta(q["t"], t))
                    if q["d"] is not None:
                        samples[(dev, "D2C")].append(tdelta(q["d"], t))
                    live.remove(q)
    return {k: sorted(v) for k, v in samples.items()}


EVENT = st.tuples(st.integers(0, 3000), st.sampled_from(LETTERS), st.sampled_from(DEVS),
                  st.sampled_from([0, 8, 16, 24, 32, 40]), st.sampled_from([0, 8, 8, 16, 24]))
IO = st.tuples(st.integers(0, 20_000), st.sampled_from(DEVS), st.sampled_from([0, 8, 16, 24, 32]),
               st.sampled_from([8, 8, 16]), st.sampled_from(["QGID", "QGSID", "QM", "QF", "QGIDRID", "QG", "QGI"]),
               st.sampled_from([0, 0, 8, 16]), st.booleans(), st.lists(st.integers(1, 900), min_size=8, max_size=8))


def lifecycles(ios, noise) -> list[tuple]:
    """Interleaved I/O lifecycles (a D/C may cover `grow` more sectors, as a merged request
    does), plus stray events; times never go backwards."""
    out = []
    for start, dev, sector, nsect, steps, grow, complete, gaps in ios:
        t = start
        for k, letter in enumerate(steps + ("C" if complete else "")):
            t += gaps[k % len(gaps)]
            size = nsect + grow if letter in "DC" else nsect
            out.append((t, letter, dev, sector, size))
    t = 0
    for dt, letter, dev, sector, nsect in noise:
        t += dt
        out.append((t, letter, dev, sector, nsect))
    return sorted(out, key=lambda e: e[0])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ios=st.lists(IO, min_size=1, max_size=12), noise=st.lists(EVENT, max_size=10))
def test_vectorized_machine_equals_the_reference(tmp_path, ios, noise):
    events = lifecycles(ios, noise)
    data = b"".join(gen.record(t, s, n * 512, block_events.TA[x] | (gen.READ << 16), 1, d, seq=k + 1)
                    for k, (t, x, d, s, n) in enumerate(events))
    path = tmp_path / "r.bin"
    path.write_bytes(data)
    analysis = core.analyze(blktrace.parse(str(path)), core.Options())
    run = machine.machine(machine._Events(machine.event_columns(analysis.capture)))
    ev, qi = run["ev"], run["qi"]
    want = reference(events)
    mine = collections.defaultdict(list)
    for name, (q, ns) in machine.samples(run).items():
        for dev, value in zip(ev.devices[ev.dev[qi[q]]], ns):
            mine[(int(dev), name)].append(int(value))
    mine = {k: sorted(v) for k, v in mine.items() if v}
    assert mine == {k: v for k, v in want.items() if k[1] != "Q2Q"}
    # the tables' per-device figures (Q2Q included) add up the same samples
    stats = analysis.table("stages").filter(pl.col("n") > 0)
    tables = {(r["device"], r["name"]): (r["n"], r["min_ns"], r["max_ns"], r["total_ns"])
              for r in stats.filter(pl.col("device") != "all").iter_rows(named=True)}
    assert tables == {(block_events.dev_name(d), name): (len(v), min(v), max(v), sum(v)) for (d, name), v in want.items()}
    assert (np.asarray(stats["min_ns"]) >= 1).all()
    # the (device, process) pairs indexed directly or listed as found add up the same
    direct, saved = block_stats.stage_totals(run), block_stats.PAIRS_DIRECT
    try:
        block_stats.PAIRS_DIRECT = 0
        listed = block_stats.stage_totals(run)
    finally:
        block_stats.PAIRS_DIRECT = saved
    assert all((a == b).all() for a, b in zip(direct, listed))


def cull_reference(action, device, nbytes):
    """btt's pre-culling one event at a time: the kind of each event to the machine."""
    from scsitrace.block import _machine_scan as bm
    started, kinds = set(), []
    for a, d, b in zip(action, device, nbytes):
        k = int(machine.KIND[a & 0xFF])
        culled = k == bm.K_OTHER or a & block_events.TC_PC or (b <= 0 and k not in (bm.K_R, bm.K_A))
        keep = not culled and (d in started or k in (bm.K_Q, bm.K_A))
        if keep:
            started.add(d)
        kinds.append(k if keep else bm.K_OTHER)
    return kinds


@settings(max_examples=300, deadline=None)
@given(events=st.lists(st.tuples(st.integers(0, 20), st.booleans(), st.sampled_from([8 << 20, 253 << 20, 9 << 20 | 1]),
                                 st.sampled_from([0, 512, 4096, -1])), max_size=60))
def test_culling_keeps_what_btt_keeps_and_lists_the_qs_and_ds_in_order(events):
    from scsitrace.block import _machine_scan as bm
    action = np.array([c | (block_events.TC_PC if pc else 0) for c, pc, _, _ in events], np.uint32)
    device = np.array([d for _, _, d, _ in events], np.uint32)
    nbytes = np.array([b for *_, b in events], np.int64)
    ev = machine._Events({"action": action, "device": device, "bytes": nbytes, "sector": np.zeros(len(events), np.int64),
                        "t_ns": np.arange(len(events), dtype=np.int64), "pid": np.zeros(len(events), np.int64),
                        "pdu_dev": device.copy(), "pdu_sector": np.zeros(len(events), np.int64)})
    want = cull_reference(action.tolist(), device.tolist(), nbytes.tolist())
    assert ev.kind.tolist() == want
    for k in (bm.K_Q, bm.K_D, bm.K_C):
        assert ev.of(k).tolist() == [i for i, kind in enumerate(want) if kind == k]
    assert [int(ev.devices[d]) for d in ev.dev] == device.tolist()
    counted = collections.Counter(zip(device.tolist(), (action & 0xFF).tolist()))
    assert {(int(ev.devices[d]), c): int(n) for d, c in zip(*np.nonzero(ev.all_counts))
            for n in [ev.all_counts[d, c]]} == counted


@settings(max_examples=300, deadline=None)
@given(files=st.lists(st.lists(st.integers(0, 12), max_size=30), min_size=1, max_size=5), shuffle=st.booleans())
def test_merged_rows_are_the_stable_time_order_of_the_files(files, shuffle):
    """Processing order: by time, then file, then place in the file (the k-way merge for files
    in time order, the two-file merge, and the sort for files out of order agree)."""
    times = [np.array(f if shuffle else sorted(f), np.int64) for f in files]
    flat = [(t, fi, k) for fi, f in enumerate(times) for k, t in enumerate(f.tolist())]
    want = sorted(range(len(flat)), key=lambda r: flat[r])       # records in processing order
    rows = block_events.merge_rows(times)
    assert sorted(rows.tolist()) == list(range(len(flat)))
    assert [r for _, r in sorted(zip(rows.tolist(), range(len(flat))))] == want
