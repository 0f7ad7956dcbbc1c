"""sigrok session files (parsers/sigrok.py) and the sample reduction they share with DSView
(parsers/_samples.py): real .sr files written by Debian's sigrok-cli from the fixtures' VCDs
must analyse exactly as the VCDs do; sigrok-cli reads back the .sr files the tests write;
hypothesis checks the reduction against a plain reference; hostile archives (listed in
`gen_logic.hostile_sr`) give one-line errors, or are skipped and counted when lenient."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_logic
import gen_vcd
from scsitrace import cli, core, parsers
from scsitrace.errors import BadInput, MissingSignal, TruncatedInput
from scsitrace.reports import summary as summ

SIGROK = shutil.which("sigrok-cli")
needs_sigrok = pytest.mark.skipif(SIGROK is None, reason="sigrok-cli not installed (run.sh test installs it)")
CONTROL = ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]
L3 = "fixtures/bus/random4k-l3/trace.ancot"
L1_VCD = "fixtures/bus/random4k-vcd-l1/trace.vcd"


def analyse(path, **opts):
    """(summary without source and records, segments, ios) of a trace."""
    a = core.load(str(path), settle_ns=400, **opts)
    s = summ.summary(a, None, None, None)
    return {k: v for k, v in s.items() if k not in ("source", "records", "notes")}, a.segments, a.ios, a


def assert_same_analysis(a, b):
    assert a[0] == b[0]
    assert a[1].equals(b[1])
    assert a[2].equals(b[2])


def to_sr(vcd, out):
    subprocess.run([SIGROK, "-I", "vcd", "-i", str(vcd), "-o", str(out)], check=True, capture_output=True)
    return out


# ---------------------------------------------------------------- real files from sigrok-cli

@needs_sigrok
def test_sigrok_cli_sr_of_the_vcd_fixture_analyses_as_the_vcd(tmp_path):
    sr = to_sr(L1_VCD, tmp_path / "t.sr")
    assert parsers.detect(str(sr)) == "sigrok"
    got, want = analyse(sr), analyse(L1_VCD)
    assert_same_analysis(got, want)
    meta = got[3].capture.meta
    assert meta["samplerate"] == "1 GHz" and meta["sample_period_ns"] == 1.0
    assert meta["samples"] == want[3].elapsed_ns          # one sample per ns, to the VCD's last timestamp
    assert got[3].source["sampling"]["glitches"] == 0
    assert got[3].source["sampling"]["settle_resolved"] is True


@needs_sigrok
def test_sigrok_cli_sr_of_a_level3_vcd_with_active_low_probe_names(tmp_path):
    """Every line active-low (`/SCSI_BSY`, `nSEL`, `ATN#`, `DB0_N`, `/SCSI_D1`...), 17 probes in
    3-byte samples: the .sr analyses exactly as the trace the VCD was written from."""
    tr = parsers.parse(L3).transitions()
    vcd = tmp_path / "l3.vcd"
    gen_vcd.write(vcd, tr, signals=CONTROL, data=["DB"], style="la_bits", timescale="10 ns")
    sr = to_sr(vcd, tmp_path / "l3.sr")
    got = analyse(sr)
    assert_same_analysis(got, analyse(L3))
    meta = got[3].capture.meta
    assert meta["unitsize"] == 3 and meta["samplerate"] == "100 MHz"
    assert set(meta["inverted"]) == set(CONTROL) | {f"DB{i}" for i in range(8)}
    assert got[0]["data_bytes"] > 0


@needs_sigrok
def test_sigrok_cli_reads_back_the_sr_files_the_tests_write(tmp_path):
    """gen_logic.write_sr (used for the hostile files) writes what libsigrok reads: sigrok-cli
    turns it into VCD, and that VCD through our VCD reader equals our .sr reader."""
    tr = parsers.parse(L3).transitions()
    probes = [(b.replace("/", ""), b) for b in CONTROL] + [(f"D{i}", f"DB{i}") for i in range(8)]
    idx, words = gen_logic.changes(tr, probes, 50)
    sr = tmp_path / "ours.sr"
    gen_logic.write_sr(sr, gen_logic.expand(idx, words, int(idx[-1])), [p[0] for p in probes], 20_000_000,
                       unitsize=3, chunk_samples=100_000)
    vcd = tmp_path / "back.vcd"
    subprocess.run([SIGROK, "-i", str(sr), "-O", "vcd", "-o", str(vcd)], check=True, capture_output=True)
    assert_same_analysis(analyse(sr), analyse(vcd))
    assert_same_analysis(analyse(sr), analyse(L3))


# ---------------------------------------------------------------- the reduction, property-based

@st.composite
def captures(draw):
    unitsize = draw(st.sampled_from([1, 2, 3, 4]))
    n = draw(st.integers(1, 400))
    nbits = unitsize * 8
    runs = draw(st.lists(st.tuples(st.integers(0, (1 << nbits) - 1), st.integers(1, 6)), min_size=1, max_size=60))
    words = np.repeat(np.array([w for w, _ in runs], dtype=np.uint64), [r for _, r in runs])[:n]
    bits = draw(st.permutations(range(nbits)))[:9]
    chunk = draw(st.integers(1, 50))
    return unitsize, words, bits, chunk


@given(captures())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_rows_are_exactly_the_samples_where_a_mapped_probe_changes(tmp_path, cap):
    unitsize, words, bits, chunk = cap
    names = [f"X{i}" for i in range(unitsize * 8)]
    for bus, bit in zip(["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "ATN", "RST"], bits):
        names[bit] = bus
    path = tmp_path / "h.sr"
    gen_logic.write_sr(path, words, names, 10_000_000, unitsize=unitsize, chunk_samples=chunk)
    cap = parsers.parse(str(path))
    tr = cap.transitions()
    mask = np.uint64(sum(1 << b for b in bits))
    masked = words & mask
    keep = np.flatnonzero(np.concatenate(([True], masked[1:] != masked[:-1])))
    t = tr["t_ns"].to_numpy()
    assert list(t[:len(keep)]) == list(keep * 100)
    assert t[-1] == len(words) * 100 and len(t) == len(keep) + 1     # the end-of-capture row
    from scsitrace import schema
    lines = tr["lines"].to_numpy()[:len(keep)]
    for bus, bit in zip(["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "ATN", "RST"], bits):
        want = (words[keep] >> np.uint64(bit)) & np.uint64(1)
        assert list((lines >> schema.SIGNAL_BIT[bus]) & 1) == list(want)
    # one-sample pulses per line, and REQ/ACK edges in one sample, counted from every sample
    glitches, same = {}, 0
    flips = words[1:] ^ words[:-1]
    for bus, bit in zip(["BSY", "SEL", "MSG", "C/D", "I/O", "REQ", "ACK", "ATN", "RST"], bits):
        edges = np.flatnonzero((flips >> np.uint64(bit)) & np.uint64(1))
        if (n := int(np.count_nonzero(np.diff(edges) == 1))):
            glitches[bus] = n
    if len(bits) >= 7:
        both = np.uint64((1 << bits[5]) | (1 << bits[6]))
        same = int(np.count_nonzero((flips & both) == both))
    assert cap.meta["glitches"] == glitches
    assert cap.meta["req_ack_same_sample"] == same


def test_probe_names_map_with_map_and_active_low(tmp_path):
    """sigrok's default probe names (D0..D15) name no control line: MissingSignal names the
    closest probes; --map and --active-low make the same capture analyse as the source."""
    tr = parsers.parse(L3).transitions()
    order = CONTROL + [f"DB{i}" for i in range(7)]          # 16 probes: DB7 left out
    probes = [(f"D{k}", bus) for k, bus in enumerate(order)]
    idx, words = gen_logic.changes(tr, probes, 50, low={"BSY", "REQ"})
    sr = tmp_path / "d.sr"
    gen_logic.write_sr(sr, gen_logic.expand(idx, words, int(idx[-1])), [p[0] for p in probes], 20_000_000,
                       unitsize=2)
    with pytest.raises(MissingSignal, match="BSY"):
        parsers.parse(str(sr))
    mapping = {bus: name for name, bus in probes}
    got = analyse(sr, mapping=mapping, active_low=["D0", "REQ"])
    want = analyse(L3)
    assert got[0]["ios_completed"] == want[0]["ios_completed"]
    assert got[1].select("start_ns", "phase").equals(want[1].select("start_ns", "phase"))
    assert got[3].capture.meta["inverted"] == ["BSY", "REQ"]
    assert "DB" not in got[3].capture.meta["signals"]          # seven data bits: no data bus
    assert any("data bus ignored" in n and "DB7" in n for n in got[3].capture.notes)


# ---------------------------------------------------------------- hostile archives

@pytest.mark.parametrize("case", gen_logic.HOSTILE_SR, ids=lambda c: c[0])
def test_hostile_sr(tmp_path, case, capsys):
    name, expect, lenient_skipped = case
    path = gen_logic.hostile_sr(tmp_path, name)
    with pytest.raises(BadInput) as err:
        parsers.parse(path, "sigrok").transitions()
    assert expect in str(err.value) and str(err.value).startswith(path)
    if lenient_skipped is not None:
        cap = parsers.parse(path, "sigrok", strict=False)
        cap.transitions()
        assert cap.records.skipped == lenient_skipped
    else:
        assert cli.main(["analyze", path]) == 2
        out = capsys.readouterr().err.strip().splitlines()
        assert len(out) == 1 and out[0].startswith(f"scsitrace: {path}")


def test_truncated_sample_is_truncated_input(tmp_path):
    path = gen_logic.hostile_sr(tmp_path, "partial-sample")
    with pytest.raises(TruncatedInput):
        parsers.parse(path).transitions()
