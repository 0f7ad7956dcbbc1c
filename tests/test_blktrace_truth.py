"""Ground truth at scale: ../shared/gen/gen_blktrace.py writes I/Os of exactly one Q, G, I, D
and C each (random sectors, sizes 4 KiB-512 KiB, about 5 in flight), with known bounds: Q2G
in [150, 600) ns, G2I in [200, 900), I2D in [1000, 8000), D2C at least 20,000 + bytes/500
(integer ns). Where requests in flight meet on the same sectors, btt pairs events with the
wrong request (a D or C applied to every bio its range holds; a Q replacing a live one at its
start sector): counts off by one and a D2C below the floor, as at 8 M and 10 M I/Os. Small
seeds reproduce each case (found by scanning the generator's draws for overlapping requests
in flight): the default analysis keeps every count and every bound, says how many pairings it
resolved, and --btt-compat gives btt's own figures (checked against btt when installed)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402
from clirun import run_cli  # noqa: E402

from scsitrace import core  # noqa: E402
from scsitrace.parsers import blktrace  # noqa: E402

GEN = Path(__file__).resolve().parents[2] / "shared" / "gen" / "gen_blktrace.py"
N = 100_000
# seed: what btt gets wrong on it (the kind of meeting the generator's draws hold)
CASES = {
    136: "a Q at the start sector of a live request: D2C and Q2C 99,999, D2C min 6.818 us",
    83: "a request inside a later, larger one still in flight: I2D 100,001",
    220: "two requests inside a larger one, 2 us apart: btt I2D 99,999 (its rb-tree walk finds the larger "
         "request for their G and I), --btt-compat 100,001 (exact start first, as btt's tree usually does)",
    23: "a request inside a larger one: D2C min 6.701 us, counts right",
}
needs_gen = pytest.mark.skipif(not GEN.is_file(), reason="../shared/gen/gen_blktrace.py absent")


@pytest.fixture(scope="module", params=sorted(CASES))
def capture(request, tmp_path_factory):
    spec = importlib.util.spec_from_file_location("shared_gen_blktrace", GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    base = tmp_path_factory.mktemp(f"truth{request.param}") / "sda"
    gen.generate(N, str(base), 2, request.param)
    return request.param, base


def _stages(base, *extra) -> tuple[dict, list[str], str]:
    status, out, err = run_cli(["analyze", str(base), "--json", "-", *extra])
    assert status == 0, err
    js = json.loads(out)
    return {s["name"]: s for s in js["stages"] if s["device"] == "all"}, js["notes"], out


@needs_gen
def test_every_count_and_bound_is_the_truth(capture, tmp_path):
    seed, base = capture
    st, notes, _ = _stages(base, "--ios", str(tmp_path / "ios.parquet"))
    assert {name: st[name]["n"] for name in ("Q2Q", "Q2G", "G2I", "I2D", "D2C", "Q2C")} == \
        {"Q2Q": N - 1, "Q2G": N, "G2I": N, "I2D": N, "D2C": N, "Q2C": N}
    ios = pl.read_parquet(tmp_path / "ios.parquet")
    assert ios.height == N and ios["end_ns"].null_count() == 0
    floor = 20_000 + ios["bytes"] // 500
    assert ios["q2g_ns"].is_between(150, 599).all() and ios["g2i_ns"].is_between(200, 899).all()
    assert ios["i2d_ns"].is_between(1000, 7999).all()
    assert (ios["d2c_ns"] >= floor).all(), ios.filter(ios["d2c_ns"] < floor)
    assert any("D/C events met bios of other requests" in n for n in notes), notes


@needs_gen
def test_btt_compat_shows_what_btt_shows(capture, tmp_path):
    seed, base = capture
    ours, notes, _ = _stages(base, "--btt-compat")
    assert any(n.startswith("--btt-compat") for n in notes)
    wrong = {name: ours[name]["n"] for name in ("I2D", "D2C", "Q2C") if ours[name]["n"] != N}
    assert wrong or ours["D2C"]["min_ns"] < 20_008, "no case: the seed no longer reproduces btt's pairing"
    if not (shutil.which("btt") and shutil.which("blkparse")) or seed == 220:
        return      # 220: see CASES, --btt-compat does not model btt's tree shape
    dump = tmp_path / "t.bin"
    subprocess.run(["blkparse", "-i", str(base), "-d", str(dump), "-O"], check=True, capture_output=True)
    text = subprocess.run(["btt", "-i", str(dump)], check=True, capture_output=True, text=True,
                          cwd=tmp_path).stdout          # btt writes its *_fp.dat files in the cwd
    body = text.split("==================== All Devices ====================")[1].split("\n=====")[0]
    for line in body.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] in ours:
            s = ours[parts[0]]
            assert int(parts[4]) == s["n"], line
            if parts[0] in ("D2C", "Q2C"):
                # (a G or I inside two bios in flight: btt's rb-tree walk returns whichever the
                # tree holds higher, we the one starting there: Q2G, G2I, I2D extremes may differ)
                assert (parts[1], parts[3]) == (f"{s['min_ns'] / 1e9:.9f}", f"{s['max_ns'] / 1e9:.9f}"), line


# ---------------------------------------------------------------- any overlap, small

PLAIN = st.lists(st.tuples(st.integers(0, 30_000), st.sampled_from([0, 8, 16, 24]), st.sampled_from([8, 16, 32]),
                           st.lists(st.integers(1, 2_000), min_size=4, max_size=4)), min_size=1, max_size=14)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ios=PLAIN)
def test_plain_requests_overlapping_anyhow_keep_every_count(tmp_path, ios):
    """I/Os of one Q, G, I, D and C each, on a few sectors and sizes so that they overlap in
    flight in every way (same start, inside one another, partly): every stage count is the
    number of I/Os, whatever btt would pair."""
    Q, G, I, D, C = (gen.ACT[x] for x in "QGIDC")
    events = []
    for start, sector, nsect, gaps in ios:
        t = start
        for code, gap in zip((Q, G, I, D, C), [0] + gaps):
            t += gap
            events.append((t, code, sector, nsect))
    events.sort(key=lambda e: e[0])
    path = tmp_path / "p.bin"
    path.write_bytes(b"".join(gen.record(t, s, n * 512, code | (gen.READ << 16), 7, gen.DISK, seq=k + 1)
                              for k, (t, code, s, n) in enumerate(events)))
    st_ = core.analyze(blktrace.parse(str(path))).table("stages")
    counts = {r["name"]: r["n"] for r in st_.filter(st_["device"] == "all").iter_rows(named=True)}
    n = len(ios)
    assert {k: counts[k] for k in ("Q2G", "G2I", "I2D", "D2C", "Q2C")} == dict.fromkeys(
        ("Q2G", "G2I", "I2D", "D2C", "Q2C"), n)
