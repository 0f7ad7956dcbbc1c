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

from scsitrace import block, core  # noqa: E402
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
    data = b"".join(gen.record(t, s, n * 512, block.TA[x] | (gen.READ << 16), 1, d, seq=k + 1)
                    for k, (t, x, d, s, n) in enumerate(events))
    path = tmp_path / "r.bin"
    path.write_bytes(data)
    analysis = core.analyze(blktrace.parse(str(path)), core.Options())
    run = block.machine(block._Events(block.event_columns(analysis.capture)))
    ev, qi = run["ev"], run["qi"]
    want = reference(events)
    mine = collections.defaultdict(list)
    for name, (q, ns) in block.samples(run).items():
        for dev, value in zip(ev.devices[ev.dev[qi[q]]], ns):
            mine[(int(dev), name)].append(int(value))
    mine = {k: sorted(v) for k, v in mine.items() if v}
    assert mine == {k: v for k, v in want.items() if k[1] != "Q2Q"}
    # the tables' per-device figures (Q2Q included) add up the same samples
    stats = analysis.extra["stats"]
    tables = {(r["device"], r["stage"]): (r["n"], r["min_ns"], r["max_ns"], r["total_ns"])
              for r in stats.filter(pl.col("device") != "all").iter_rows(named=True)}
    assert tables == {(block.dev_name(d), name): (len(v), min(v), max(v), sum(v)) for (d, name), v in want.items()}
    assert (np.asarray(stats["min_ns"]) >= 1).all()


@settings(max_examples=200, deadline=None)
@given(codes=st.lists(st.integers(0, 20), max_size=60), keep=st.lists(st.booleans(), min_size=60, max_size=60))
def test_events_grouped_by_code_are_the_kept_ones_in_order(codes, keep):
    from scsitrace import _block_machine as bm
    codes = np.array(codes, np.int16)
    kept = np.array(keep[:len(codes)], bool)
    bounds, order = np.zeros(22, np.int64), np.empty(len(codes), np.int64)
    m = bm._counting_sort(codes, kept, bounds, order)
    assert m == kept.sum()
    for c in range(21):
        want = [j for j in range(len(codes)) if codes[j] == c and kept[j]]
        assert order[bounds[c]:bounds[c + 1]].tolist() == want
