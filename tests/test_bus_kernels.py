"""The bus area's compiled passes (native/src/bus/*.rs) against plain-Python references of
the rules they implement, on random inputs: the command layers' tiling (scsitrace/tiling.py),
the bus runs (scsitrace/bus/runs.py) and attribution's handshake pass (reports/_handshakes.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scsitrace import tiling
from scsitrace._native import bus as _bus
from scsitrace.bus import runs
from scsitrace.reports import _handshakes as hs

PHASES = ["A", "B", "C"]


@st.composite
def piece_sets(draw):
    n = draw(st.integers(0, 25))
    rows = []
    for i in range(n):
        start = draw(st.integers(0, 60))
        rows.append((draw(st.integers(0, 2)), i, start, start + draw(st.integers(-3, 25)),
                     draw(st.integers(0, len(PHASES) - 1)), draw(st.sampled_from([None, 512]))))
    return rows, draw(st.integers(0, 100))


def _tiles_by_instant(pieces, elapsed):
    """Each instant of each device goes to the earliest-starting piece covering it (first
    listed on a tie), IDLE elsewhere in [0, elapsed) once the device has a segment; a
    segment is a maximal run of instants of one owner."""
    idle = len(PHASES)
    segs, totals, counts = [], [0] * (idle + 1), [0] * (idle + 1)
    for d in sorted({p[0] for p in pieces}):
        mine = sorted((p for p in pieces if p[0] == d), key=lambda p: p[2])
        horizon = max([elapsed] + [p[3] for p in mine])
        owner = []
        for t in range(horizon):
            covering = [p for p in mine if p[2] <= t < p[3]]
            owner.append(tuple(covering[0]) if covering else None)
        if all(o is None for o in owner):
            continue
        last = max(t for t, o in enumerate(owner) if o is not None)
        owner = owner[:max(last + 1, elapsed)]
        t = 0
        while t < len(owner):
            e = t
            while e < len(owner) and owner[e] == owner[t]:
                e += 1
            o = owner[t]
            row = (d, None, t, e, idle, None) if o is None else (d, o[1], t, e, o[4], o[5])
            segs.append(row)
            totals[row[4]] += e - t
            counts[row[4]] += 1
            t = e
    return segs, totals, counts


@settings(max_examples=200, deadline=None)
@given(piece_sets())
def test_tiling_gives_each_instant_to_the_earliest_starting_piece(case):
    rows, elapsed = case
    pieces = tiling.pieces_frame(**dict(zip(tiling.PIECE_COLUMNS, zip(*rows) if rows else [[]] * 6)))
    got = tiling.tile(pieces, elapsed, PHASES)
    segs, totals, counts = _tiles_by_instant(rows, elapsed)
    assert got["segments"].rows() == segs
    names = [*PHASES, tiling.IDLE]
    assert got["totals"] == {names[k]: totals[k] for k in range(len(names)) if counts[k]}
    assert got["devices"] == len({s[0] for s in segs})
    assert tiling.tile(pieces, elapsed, PHASES, segments=False)["totals"] == got["totals"]


LINES = st.lists(st.integers(0, (1 << 9) - 1), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(LINES, st.integers(0, (1 << 9) - 1), st.data())
def test_runs_and_their_handshake_sums_follow_the_rules(lines, prev_lines, data):
    lines = np.array(lines, np.uint16)
    t = np.cumsum(np.array(data.draw(st.lists(st.integers(0, 50), min_size=len(lines), max_size=len(lines)))))
    sampled = data.draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
    db = np.array(data.draw(st.lists(st.integers(0, 255), min_size=len(lines), max_size=len(lines))), np.uint8)
    piece = runs._Piece(t, lines, db, np.array(sampled, bool))
    idx, keys = runs._raw_runs(piece)
    want = [i for i in range(len(lines)) if i == 0 or runs.PHASE_KEY[lines[i]] != runs.PHASE_KEY[lines[i - 1]]]
    assert idx.tolist() == want and keys.tolist() == [int(runs.PHASE_KEY[lines[i]]) for i in want]
    sums = pl.DataFrame(_bus.run_sums(piece, idx, prev_lines, runs.HANDSHAKE_BITS))
    without_db = pl.DataFrame(_bus.run_sums(runs._Piece(t, lines), idx, prev_lines, runs.HANDSHAKE_BITS))
    assert without_db.drop("db_last").equals(sums.drop("db_last"))
    assert without_db["db_last"].null_count() == len(want)
    prev = [prev_lines, *lines[:-1].tolist()]
    for r, (a, b) in enumerate(zip(want, [*want[1:], len(lines)])):
        rising = [int(lines[i]) & ~prev[i] for i in range(a, b)]
        reqs = [t[i] for i, x in zip(range(a, b), rising) if x & runs.REQ_BIT]
        row = sums.row(r, named=True)
        assert row["n_req"] == len(reqs) and row["first_req_ns"] == (reqs[0] if reqs else None)
        assert row["n_ack"] == sum(1 for x in rising if x & runs.ACK_BIT)
        assert row["atn"] == any(int(lines[i]) & runs.ATN_BIT for i in range(a, b))
        seen = [int(db[i]) for i in range(a, b) if sampled[i]]
        assert row["db_last"] == (seen[-1] if seen else None)


def _collect(t, lines, cuts, data_keys, hist_ns=64, min_long_ns=30):
    """Attribution's pass over the transitions fed in pieces cut at `cuts`."""
    p = hs.handshakes(hs.Rules(runs.PHASE_KEY, runs.REQ_BIT, runs.ACK_BIT, data_keys, hist_ns, min_long_ns))
    kept = []
    for a, b in zip([0, *cuts], [*cuts, len(t)]):
        kept += pl.DataFrame(p.feed(pl.DataFrame({"t_ns": t[a:b], "lines": lines[a:b]}))).rows()
    return pl.DataFrame(p.runs()).rows(named=True), pl.DataFrame(p.hist()).rows(), kept, p.req_seen


@settings(max_examples=150, deadline=None)
@given(LINES, st.data())
def test_handshake_pass_is_the_same_in_any_pieces_and_sums_every_edge(lines, data):
    lines = np.array(lines, np.uint16)
    t = np.cumsum(np.array(data.draw(st.lists(st.integers(0, 80), min_size=len(lines), max_size=len(lines)))))
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, len(lines) - 1)), max_size=5))) - {len(lines)})
    data_keys = (int(runs.PHASE_KEY[lines[0]]), -1)
    whole = _collect(t, lines, [], data_keys)
    assert _collect(t, lines, cuts, data_keys) == whole
    table, hist, kept, req_seen = whole
    changed = np.bitwise_xor(lines, np.concatenate(([0], lines[:-1])).astype(np.uint16))
    edges = int(np.count_nonzero(changed & runs.REQ_BIT)) + int(np.count_nonzero(changed & runs.ACK_BIT))
    assert sum(r[hs.EDGES] for r in table) == edges
    assert sum(r[hs.UP] for r in table) == req_seen == \
        int(np.count_nonzero(lines & ~np.concatenate(([0], lines[:-1])).astype(np.uint16) & runs.REQ_BIT))
    assert [r[hs.START] for r in table] == [int(t[i]) for i in runs._raw_runs(runs._Piece(t, lines))[0]]
    # kept: every edge of a run that is not DATA (the first run's key is the DATA key here)
    assert sum(1 for k in kept if table[k[4]][hs.RUN_KEY] != data_keys[0]) == \
        sum(r[hs.EDGES] for r in table if r[hs.RUN_KEY] != data_keys[0])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 65, 64, 97, 113, 66, 67]), st.sampled_from([1, 100, 399, 400, 2000])),
                min_size=2, max_size=60), st.data())
def test_run_reducer_gives_the_runs_of_one_chunk_for_any_chunking(steps, data):
    """Phase runs (skew shorter than the settle delay folded into the next run, equal
    neighbours coalesced) are the same whatever the chunks the transitions come in, also when
    a chunk ends on a glitch that is later folded into a run of the key before it (BSY
    dropping for 100 ns inside a DATA IN phase, as fixtures/bus/glitch-bsy-l1)."""
    t = np.cumsum([d for _, d in steps])
    frame = pl.DataFrame({"t_ns": t, "lines": pl.Series([k for k, _ in steps], dtype=pl.UInt16),
                          "db": pl.Series([None] * len(t), dtype=pl.UInt8), "dbp": pl.Series([None] * len(t), dtype=pl.Boolean)})
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(t) - 1), max_size=8))))
    edges = [0, *cuts, len(t)]

    def reduced(chunks):
        reducer = runs.RunReducer(settle_ns=400)
        out = list(reducer.runs(chunks))
        return (out[0] if out else None), reducer.stats

    whole, whole_stats = reduced([frame])
    cut, cut_stats = reduced([frame.slice(a, b - a) for a, b in zip(edges, edges[1:])])
    assert (whole is None and cut is None) or whole.equals(cut)
    assert (whole_stats.raw_runs, whole_stats.skew_merged) == (cut_stats.raw_runs, cut_stats.skew_merged)


def test_no_cdbs_decode_to_empty_columns():
    """Zero CDBs (a capture whose commands are all of another kind) decode to empty columns
    (numpy's zero strides of an empty (5, 0) output made the compiled pass panic)."""
    import numpy as np
    from scsitrace import scsi
    out = scsi.decode_cdb_matrix(np.zeros((0, 16), np.uint8), np.zeros(0, np.int64))
    assert set(out) == {"opcode", "command", "lba", "blocks", "cdb_lun"}
    assert all(len(col) == 0 for col in out.values())


NATIVE = Path(__file__).resolve().parent.parent / "native" / "src"
BUS_BOUNDARY = ["bus.rs", *(f"bus/{name}.rs" for name in ("walker", "ancot", "runs", "handshakes", "keys", "cdb",
                                                          "tiling"))]


@pytest.mark.parametrize("name", BUS_BOUNDARY)
def test_bus_passes_cross_the_boundary_by_name(name):
    """The bus passes take named inputs (a Table or a struct read by name: nothing allowed
    past clippy's argument limit) and return Columns or a pyclass of named parts: no array
    the caller fills, no dict of columns."""
    text = (NATIVE / name).read_text()
    for marker in ("too_many_arguments", "PyReadwriteArray", "PyDict"):
        assert marker not in text, f"{name} still uses {marker}"
