"""Sample-rate honesty (scsitrace/sampling.py): the report states the sample period, names
the figures a too-coarse period affects, and counts and shows one-sample glitches. The same
trace sampled at 20 MHz (fine) and at 4 MHz (too coarse for the 400 ns settle delay and for
its REQ/ACK handshakes)."""
from __future__ import annotations

import json

import numpy as np

import gen_logic
from scsitrace import cli, parsers
from test_dsview import PROBES
from test_sigrok import CONTROL, L3, analyse


def dsl(tmp_path, period_ns: int):
    tr = parsers.parse(L3).transitions()
    idx, words = gen_logic.changes(tr, PROBES, period_ns, low=set(CONTROL))
    samples = gen_logic.expand(idx, words, int(idx[-1]))
    path = str(tmp_path / f"p{period_ns}.dsl")
    gen_logic.write_dsl(path, samples, {k: p[0] for k, p in enumerate(PROBES)}, 10**9 // period_ns)
    return path, samples


def one_sample_pulses(samples: np.ndarray, bit: int) -> np.ndarray:
    """Start samples of the pulses one sample long on probe `bit`, from every sample."""
    b = ((samples >> np.uint64(bit)) & np.uint64(1)).astype(np.int8)
    edges = np.flatnonzero(b[1:] != b[:-1]) + 1
    return edges[:-1][np.diff(edges) == 1]


def test_a_fine_period_is_stated_and_nothing_is_flagged(tmp_path):
    path, _ = dsl(tmp_path, 50)
    a = analyse(path)[3]
    s = a.source["sampling"]
    assert s["sample_period_ns"] == 50.0 and s["samplerate"] == "20 MHz"
    assert s["settle_resolved"] and s["handshakes_resolved"] and s["affected"] == [] and s["glitches"] == 0
    assert "sample period 50 ns (20 MHz): every edge time is known to within one period" in a.notes
    assert not [n for n in a.notes if "too coarse" in n or "glitch" in n]


def test_a_coarse_period_names_the_figures_it_affects(tmp_path, capsys):
    path, samples = dsl(tmp_path, 250)
    a = analyse(path)[3]
    s = a.source["sampling"]
    assert s["settle_resolved"] is False and s["handshakes_resolved"] is False
    for figure in ("Arbitration", "Selection", "skew_merged", "data_bytes", "bandwidth_mib_s"):
        assert figure in s["affected"]
    settle = [n for n in a.notes if "too coarse to resolve the settle delay (400 ns" in n]
    hs = [n for n in a.notes if "too coarse to resolve REQ/ACK handshakes" in n]
    assert len(settle) == 1 and "Arbitration" in settle[0] and "+-250 ns" in settle[0]
    assert len(hs) == 1 and "data_bytes" in hs[0]
    # glitches: counted per line as the samples themselves show them
    want = {bus: len(one_sample_pulses(samples, k)) for k, (_, bus) in enumerate(PROBES)}
    assert s["glitches_by_line"] == {b: n for b, n in want.items() if n}
    assert s["glitches"] == sum(want.values()) > 0
    firsts = sorted((int(p), bus) for k, (_, bus) in enumerate(PROBES) for p in one_sample_pulses(samples, k))
    assert [(e["sample"], e["line"]) for e in s["glitch_examples"]] == firsts[:5]
    assert s["glitch_examples"][0]["t_ns"] == firsts[0][0] * 250
    # and the report shows it all
    assert cli.main(["analyze", path, "--json", "-"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"]["sampling"]["glitches"] == s["glitches"]
    assert any(n.startswith(f"{s['glitches']} one-sample glitch(es)") for n in out["notes"])
