"""The series engine (scsitrace/series.py): the plots' tables from every I/O, equal for any
split of the I/Os into batches, and equal to a brute-force count over the I/Os."""
from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace import series as S


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 120))
    span = draw(st.sampled_from([10_000, 3_000_000, 2_000_000_000]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    start = rng.integers(0, span, n)
    dur = rng.integers(0, max(span // draw(st.sampled_from([1, 10, 1000])), 2), n)
    end = start + dur
    nbytes = rng.choice([512, 4096, 65536], n)
    lba = rng.integers(0, draw(st.sampled_from([8, 1 << 20, 1 << 40])), n)
    op = rng.choice(["read", "write", "flush"], n)
    elapsed = int(max(end.max(), 1) + draw(st.integers(0, span)))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=6))))
    return start, end, nbytes, lba, op, elapsed, cuts


def build(start, end, nbytes, lba, op, elapsed, cuts, order=None) -> dict:
    s = S.Series()
    idx = np.arange(len(start)) if order is None else order
    for part in np.split(idx, [c for c in cuts if c < len(idx)]):
        if len(part):
            s.add(start[part], end[part], nbytes[part], end[part] - start[part],
                  None if lba is None else lba[part], list(op[part]))
    return s.tables(elapsed)[0]


def _width(table: pl.DataFrame) -> int:
    return int(table["end_ns"][0] - table["start_ns"][0]) if table.height > 1 else int(table["end_ns"][0])


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_any_batching_gives_the_same_tables(w):
    start, end, nbytes, lba, op, elapsed, cuts = w
    whole = build(start, end, nbytes, lba, op, elapsed, [])
    split = build(start, end, nbytes, lba, op, elapsed, cuts,
                  order=np.random.default_rng(len(cuts)).permutation(len(start)))
    for name in ("series_rates", "series_queue", "series_latency"):
        assert whole[name].equals(split[name]), name
    assert whole["offsets"].sort(["start_ns", "lba", "op"]).equals(split["offsets"].sort(["start_ns", "lba", "op"]))


@settings(max_examples=60, deadline=None)
@given(workloads())
def test_tables_equal_a_brute_force_count(w):
    start, end, nbytes, lba, op, elapsed, _ = w
    t = build(start, end, nbytes, lba, op, elapsed, [])
    rates, queue = t["series_rates"], t["series_queue"]
    lo, hi = rates["start_ns"].to_numpy(), rates["end_ns"].to_numpy()
    assert lo[0] == 0 and hi[-1] == elapsed and (lo[1:] == hi[:-1]).all()   # the bins tile the trace
    last = len(lo) - 1
    b = np.minimum(end // _width(rates), last)
    assert rates["completions"].to_list() == np.bincount(b, minlength=last + 1).tolist()
    assert rates["bytes"].to_list() == np.bincount(b, weights=nbytes, minlength=last + 1).astype(int).tolist()
    assert rates["completions"].sum() == len(start)
    for k in range(len(lo)):
        overlap = np.clip(np.minimum(end, hi[k]) - np.maximum(start, lo[k]), 0, None)
        if k == last:       # anything after the elapsed time joins the last bin
            overlap = np.clip(end - np.maximum(start, lo[k]), 0, None)
        assert abs(queue["mean_in_flight"][k] * (hi[k] - lo[k]) - overlap.sum()) < 1e-6 * max(overlap.sum(), 1)
        top = np.inf if k == last else hi[k]      # edges after the elapsed time join the last bin
        times = np.r_[lo[k], start[(start >= lo[k]) & (start < top)], end[(end >= lo[k]) & (end < top)]]
        level = max(int(((start <= x) & (end > x)).sum()) for x in times)
        assert queue["max_in_flight"][k] == level


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_latency_percentiles_are_the_bucket_above_the_exact_one(w):
    start, end, nbytes, lba, op, elapsed, _ = w
    lat = build(start, end, nbytes, lba, op, elapsed, [])["series_latency"]
    width, last = _width(lat), lat.height - 1
    b = np.minimum(end // width, last)
    resp = end - start
    for k, row in enumerate(lat.iter_rows(named=True)):
        v = np.sort(resp[b == k])
        assert row["ios"] == len(v)
        if not len(v):
            assert row["p50_ns"] is None
            continue
        exact = v[int(np.ceil(0.5 * len(v))) - 1]
        assert max(exact, 1) <= row["p50_ns"] <= max(exact, 1) * 2 ** (1 / 32) + 1
        assert row["max_ns"] == v.max()
    cdf = build(start, end, nbytes, lba, op, elapsed, [])["latency_cdf"]
    assert cdf["ios"][-1] == len(resp) and cdf["fraction"][-1] == 1.0
    for le, ios in zip(cdf["le_ns"], cdf["ios"]):          # every bucket edge bounds its count exactly
        assert (np.maximum(resp, 1) <= le).sum() >= ios >= (resp * 2 ** (1 / 32) < le).sum()


def test_offsets_every_io_then_exact_cells(monkeypatch):
    rng = np.random.default_rng(3)
    n = 5000
    start = np.sort(rng.integers(0, 10**9, n))
    end = start + 1000
    lba = rng.integers(0, 1 << 30, n)
    op = rng.choice(["read", "write"], n)
    pts = build(start, end, np.full(n, 4096), lba, op, 10**9, [1000, 3000])["offsets"]
    assert pts.height == n and pts["ios"].sum() == n and (pts["cell_ns"] == 0).all()
    monkeypatch.setattr(S, "MAX_POINTS", 1500)
    cells = build(start, end, np.full(n, 4096), lba, op, 10**9, [1000, 3000])["offsets"]
    assert cells["ios"].sum() == n and (cells["cell_ns"] > 0).all()
    w, bl = int(cells["cell_ns"][0]), int(cells["cell_blocks"][0])
    want = pl.DataFrame({"op": op, "start_ns": start // w * w, "lba": lba // bl * bl}).group_by(
        "op", "start_ns", "lba").len("ios")
    got = cells.select("op", "start_ns", "lba", pl.col("ios").cast(pl.UInt32))
    assert got.sort(["op", "start_ns", "lba"]).equals(want.sort(["op", "start_ns", "lba"]))


@settings(max_examples=40, deadline=None)
@given(workloads())
def test_latency_points_and_depth_steps_hold_every_io(w):
    """Every I/O a latency point (its completion and response time, its op), equal for any
    batching; the depth steps are the brute-force level at each edge, and their maximum per
    bin is series_queue's."""
    start, end, nbytes, lba, op, elapsed, cuts = w
    t = build(start, end, nbytes, lba, op, elapsed, [])
    split = build(start, end, nbytes, lba, op, elapsed, cuts,
                  order=np.random.default_rng(len(cuts)).permutation(len(start)))
    pts = t["latency_points"]()
    want = pl.DataFrame({"op": op, "end_ns": end, "response_ns": end - start}).sort("end_ns", "response_ns", "op")
    assert pts.select("op", "end_ns", "response_ns").sort("end_ns", "response_ns", "op").equals(want)
    assert (pts["ios"] == 1).all() and pts["response_top_ns"].equals(pts["response_ns"])
    assert split["latency_points"]().sort("end_ns", "response_ns", "op").equals(pts.sort("end_ns", "response_ns", "op"))
    steps = t["depth_steps"]()
    assert steps.equals(split["depth_steps"]())
    for x, level in steps.iter_rows():
        assert level == int(((start <= x) & (end > x)).sum())
    levels = [0] + steps["in_flight"].to_list()
    assert all(a != b for a, b in zip(levels, levels[1:]))          # a row only where the level changes
    assert levels[-1] == int(((start <= elapsed) & (end > elapsed)).sum()) or steps["t_ns"].max() > elapsed
    queue = t["series_queue"]
    last = queue.height - 1
    b = np.minimum(steps["t_ns"].to_numpy() // _width(queue), last)
    for k in range(queue.height):
        if (b == k).any():
            assert steps["in_flight"].to_numpy()[b == k].max() <= queue["max_in_flight"][k]


@settings(max_examples=40, deadline=None)
@given(workloads(), st.integers(1, 4), st.data())
def test_device_depth_steps_are_each_devices_level(w, n_dev, data):
    """Per device (I/Os of an unknown device left out), the level at each of its steps is the
    brute-force count of its I/Os in flight, equal for any batching; summed over the devices
    (none unknown) it is depth_steps' level."""
    start, end, nbytes, lba, op, elapsed, cuts = w
    names = np.array([f"usb:1:{k}:0" for k in range(n_dev)] + [None], object)
    dev = names[np.array(data.draw(st.lists(st.integers(0, n_dev), min_size=len(start), max_size=len(start))))]

    def steps(order, cuts):
        s = S.Series()
        for part in np.split(order, [c for c in cuts if c < len(order)]):
            if len(part):
                s.add(start[part], end[part], nbytes[part], end[part] - start[part], lba[part], list(op[part]),
                      device=list(dev[part]))
        return s.tables(elapsed)[0]

    whole = steps(np.arange(len(start)), [])
    split = steps(np.random.default_rng(len(cuts)).permutation(len(start)), cuts)
    by_dev = whole["device_depth_steps"]()
    assert by_dev.sort("device_id", "t_ns").equals(split["device_depth_steps"]().sort("device_id", "t_ns"))
    for (d,), rows in by_dev.group_by("device_id"):
        mine = dev == d
        for x, level in rows.select("t_ns", "in_flight").iter_rows():
            assert level == int(((start <= x) & (end > x) & mine).sum())
    if all(d is not None for d in dev):
        level_at = lambda rows, x: next((v for t, v in reversed(rows) if t <= x), 0)  # noqa: E731
        per = [r.select("t_ns", "in_flight").rows() for _, r in by_dev.group_by("device_id")]
        for x, level in whole["depth_steps"]().iter_rows():
            assert level == sum(level_at(r, x) for r in per)


def test_latency_points_every_io_then_exact_cells(monkeypatch):
    rng = np.random.default_rng(4)
    n = 5000
    start = np.sort(rng.integers(0, 10**9, n))
    resp = rng.integers(1, 10**8, n)
    op = rng.choice(["read", "write", "flush"], n)
    monkeypatch.setattr(S, "MAX_POINTS", 1500)
    cells = build(start, start + resp, np.full(n, 4096), None, op, 2 * 10**9, [1000, 3000])["latency_points"]()
    assert cells["ios"].sum() == n and (cells["cell_ns"] > 0).all()
    w = int(cells["cell_ns"][0])
    for row in cells.sample(50, seed=1).iter_rows(named=True):      # each cell's count, exactly
        inside = ((op == row["op"]) & ((start + resp) // w * w == row["end_ns"])
                  & (resp > row["response_ns"]) & (resp <= row["response_top_ns"]))
        assert inside.sum() == row["ios"]
        assert row["response_top_ns"] / max(row["response_ns"], 1) <= 2 ** 0.25 + 1e-3 or row["response_ns"] < 8
