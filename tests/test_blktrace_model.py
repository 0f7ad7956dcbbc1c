"""The streamed stage machine against a one-event-at-a-time reference of the same rules
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
from scsitrace.block import events as block_events, machine  # noqa: E402
from scsitrace.parsers import blktrace  # noqa: E402
from scsitrace.stats import stat_row  # noqa: E402

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


def _tables(analysis) -> dict:
    """Every table of a block analysis, the per-I/O rows and the segments, as text (NaN == NaN)."""
    out = {name: repr(analysis.table(name).to_dicts()) for name in analysis.tables}
    out["ios"] = repr(analysis.ios.to_dicts())
    out["segments"] = repr(analysis.segments.to_dicts())
    out["figures"] = (analysis.elapsed_ns, analysis.start_ns, analysis.ios_completed, analysis.data_bytes)
    return out


def _capture(tmp_path, events):
    data = b"".join(gen.record(t, s, n * 512, block_events.TA[x] | (gen.READ << 16), 1 + k % 3, d, seq=k + 1)
                    for k, (t, x, d, s, n) in enumerate(events))
    path = tmp_path / "r.bin"
    path.write_bytes(data)
    return blktrace.parse(str(path))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ios=st.lists(IO, min_size=1, max_size=12), noise=st.lists(EVENT, max_size=10), size=st.integers(1, 40))
def test_streamed_machine_equals_the_reference_over_any_chunking(tmp_path, ios, noise, size):
    events = lifecycles(ios, noise)
    capture = _capture(tmp_path, events)
    whole = core.analyze(capture, core.Options(btt_compat=True))
    want = reference(events)
    stats = whole.table("stages").filter(pl.col("n") > 0)
    tables = {(r["device"], r["name"]): (r["n"], r["min_ns"], r["max_ns"], r["total_ns"])
              for r in stats.filter(pl.col("device") != "all").iter_rows(named=True)}
    assert tables == {(block_events.dev_name(d), name): (len(v), min(v), max(v), sum(v)) for (d, name), v in want.items()}
    assert (np.asarray(stats["min_ns"]) >= 1).all()
    # the same analysis, the events handed over in chunks of `size` (down to one event); with
    # the filters too (they apply as the events stream)
    # (btt's rules, and the default pairing of requests meeting on the same sectors alike)
    filtered = [core.Options(pids=("2", "3"), btt_compat=True),
                core.Options(window=(2_000, 15_000), device=gen.DISK, btt_compat=True),
                core.Options(), core.Options(pids=("2", "3"))]
    wants = [_tables(whole)] + [_filtered(capture, options) for options in filtered]
    cols = machine.event_columns(capture)
    capture.chunks = lambda: machine.sliced(cols, size)
    assert _tables(core.analyze(capture, core.Options(btt_compat=True))) == wants[0]
    assert [_filtered(capture, options) for options in filtered] == wants[1:]


def _filtered(capture, options):
    """_tables of the analysis with these filters, or the usage error they give."""
    try:
        return _tables(core.analyze(capture, options))
    except core.UsageError as exc:
        return str(exc)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ios=st.lists(IO, min_size=1, max_size=12), size=st.integers(1, 30), keep=st.integers(1, 6))
def test_rows_streamed_to_the_sink_are_every_row_and_the_kept_ones_evenly_thinned(tmp_path, ios, size, keep):
    events = lifecycles(ios, [])
    capture = _capture(tmp_path, events)
    whole = core.analyze(capture, core.Options()).ios
    cols = machine.event_columns(capture)
    batches = []
    run = machine.run(machine.sliced(cols, size), rows_sink=batches.append, keep_rows=keep)
    streamed = pl.concat(batches) if batches else None
    assert streamed is not None and streamed["q"].to_list() == whole["io"].to_list()
    assert streamed["c_t"].to_list() == whole["end_ns"].to_list()
    kept = pl.DataFrame(run.rows.columns())["q"].to_list()
    stride = run.rows_stride
    assert len(kept) <= keep and kept == [q for q in whole["io"].to_list() if q % stride == 0]


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


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ios=st.lists(IO, min_size=1, max_size=12), size=st.integers(1, 30), pending=st.integers(0, 3),
       ready=st.integers(0, 3))
def test_past_its_buffer_bounds_the_machine_keeps_every_row_and_every_statistic(tmp_path, ios, size, pending,
                                                                                  ready):
    """Past the bound of finished rows waiting behind an older request still in flight, the
    rows may go out of Q order (counted, for a note: those whose place was given up), none
    lost or repeated; past the bound of
    busy runs waiting, runs are closed early (counted): busy time can then only count an
    overlap twice, never lose time. Every statistic is unchanged."""
    capture = _capture(tmp_path, lifecycles(ios, []))
    cols = machine.event_columns(capture)

    def streamed(bounds):
        batches = []
        out = machine.run(machine.sliced(cols, size), rows_sink=batches.append, bounds=bounds)
        rows = pl.concat(batches) if batches else None
        return out, rows

    exact, exact_rows = streamed(None)
    bounded, rows = streamed({"pending_runs": pending, "ready_rows": ready})
    assert exact.rows_out_of_order == exact.runs_forced == 0
    assert rows.sort("q").equals(exact_rows)
    if rows["q"].to_list() != sorted(rows["q"].to_list()):
        assert bounded.rows_out_of_order > 0         # never out of order without the note
    differ = {"rows", "rows_out_of_order", "runs_forced", "busy_ns", "run_device", "run_start", "run_end", "errors"}
    for key in set(_fields(exact)) - differ:
        assert _plain(getattr(bounded, key)) == _plain(getattr(exact, key)), key
    assert pl.DataFrame(bounded.errors).equals(pl.DataFrame(exact.errors))
    busy, exact_busy = np.asarray(bounded.busy_ns), np.asarray(exact.busy_ns)
    assert (busy >= exact_busy).all()
    if not bounded.runs_forced:
        assert (busy == exact_busy).all()


def _fields(run) -> list[str]:
    """The names of what a machine's run holds."""
    return [name for name in dir(run) if not name.startswith("_")]


def _plain(value):
    """A machine output as plain comparable values (statistic records read out)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "record"):
        return {**stat_row(value.record()), "exact": value.record().exact}
    return value


def test_thinned_block_rows_still_give_the_views_of_every_io(tmp_path, monkeypatch):
    """Past KEEP_IOS the block layer keeps every k-th row, but the bandwidth views and stalls
    are built from every completed I/O (bandwidth.Collected): equal to the unthinned ones."""
    from pathlib import Path

    from scsitrace import bandwidth, parsers
    from scsitrace.block import analysis as block_analysis
    trace = Path(__file__).resolve().parents[1] / "fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0"
    whole = core.analyze(parsers.parse(str(trace)), core.Options(series=True))
    monkeypatch.setattr(block_analysis, "KEEP_IOS", 8)
    thin = core.analyze(parsers.parse(str(trace)), core.Options(series=True))
    assert thin.ios.height <= 8 < whole.ios.height
    for t in bandwidth.TABLES:
        assert thin.table(t.name).equals(whole.table(t.name)), t.name
    assert whole.table("stalls").height == 1 and not any("bandwidth views" in n for n in thin.notes)
