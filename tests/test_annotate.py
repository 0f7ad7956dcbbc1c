"""`scsitrace annotate TRACE -o OUT.vcd` (reports/vcd_annotate.py): the captured lines plus
the decoding. Read back with the project's VCD reader (the lines analyse as the source did;
the phase, I/O, command and data-byte string variables say what the analysis said) and with
sigrok-cli's VCD input (PulseView's): the one-bit phase wires are high in each segment's
phase, and the lines analyse as the source did."""
from __future__ import annotations

import re
import subprocess
import zipfile

import numpy as np
import pytest

from scsitrace import cli
from test_sigrok import L3, SIGROK, analyse, assert_same_analysis, needs_sigrok


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    out = tmp_path_factory.mktemp("ann") / "out.vcd"
    assert cli.main(["annotate", L3, "-o", str(out)]) == 0
    return out, analyse(L3)


def string_changes(path, var: str) -> list[tuple[int, str]]:
    """(time in ns, value) of a string variable's changes, read from the file's text."""
    text = open(path).read()
    code = re.search(rf"\$var string 1 (\S+) {var} \$end", text).group(1)
    number, unit = re.search(r"\$timescale (\d+)(s|ms|us|ns) \$end", text).groups()
    scale = int(number) * {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[unit]
    out, t = [], 0
    for line in text.split("$enddefinitions $end", 1)[1].splitlines():
        if line.startswith("#"):
            t = int(line[1:]) * scale
        elif line.startswith("s") and line.endswith(" " + code):
            out.append((t, line[1:-len(code) - 1]))
    return out


def test_lines_read_back_with_our_vcd_reader(annotated):
    out, want = annotated
    got = analyse(out)
    assert_same_analysis(got, want)
    assert got[3].capture.meta["string_changes_ignored"] > 0     # the decoded strings are there


def test_phase_io_command_and_bytes_say_what_the_analysis_said(annotated):
    out, (_, segments, ios, a) = annotated
    phases = string_changes(out, "phase")
    seg = segments.select("start_ns", "phase").to_numpy().tolist()
    merged = [s for i, s in enumerate(seg) if i == 0 or s[1] != seg[i - 1][1]]
    assert phases == [(int(t), p.replace(" ", "_")) for t, p in merged]
    io_vals = dict(string_changes(out, "io"))
    names = dict(zip(ios["io"].to_list(), ios["command"].to_list()))
    commands = dict(string_changes(out, "command"))
    for row in segments.filter(segments["io"].is_not_null()).iter_rows(named=True):
        t = row["start_ns"]
        last_io = max(k for k in io_vals if k <= t)
        assert io_vals[last_io] == str(row["io"])
        last_cmd = max(k for k in commands if k <= t)
        assert commands[last_cmd] == "_".join(str(names[row["io"]]).split())
    # the bytes latched in each COMMAND phase are the CDB: its first byte is the opcode
    data = string_changes(out, "data_byte")
    t_data = np.array([t for t, _ in data])
    for row in segments.filter(segments["phase"] == "COMMAND").iter_rows(named=True):
        first = int(np.searchsorted(t_data, row["start_ns"]))
        opcode = ios.filter(ios["io"] == row["io"])["opcode"].item()
        assert int(data[first][1], 16) == opcode and t_data[first] < row["end_ns"]


@needs_sigrok
def test_sigrok_reads_it_with_the_phases_as_wires(annotated, tmp_path):
    out, (_, segments, _, _) = annotated
    sr = tmp_path / "ann.sr"
    run = subprocess.run([SIGROK, "-I", "vcd", "-i", str(out), "-o", str(sr)], capture_output=True, text=True)
    assert run.returncode == 0
    assert_same_analysis(analyse(sr), analyse(L3))
    with zipfile.ZipFile(sr) as zf:
        md = zf.read("metadata").decode()
        unitsize = int(re.search(r"unitsize=(\d+)", md).group(1))
        probes = {m.group(2): int(m.group(1)) - 1 for m in re.finditer(r"probe(\d+)=(\S+)", md)}
        raw = b"".join(zf.read(n) for n in sorted((n for n in zf.namelist() if n.startswith("logic-1-")),
                                                  key=lambda n: int(n.rsplit("-", 1)[1])))
    assert "$timescale 10ns $end" in out.read_text()   # the ancot's times are all multiples of 10 ns
    assert "samplerate=100 MHz" in md
    step = 10                               # ns per sample
    words = np.frombuffer(raw, dtype=np.uint8).reshape(-1, unitsize)
    wires = {p[len("phase_"):].replace("_", " "): b for p, b in probes.items() if p.startswith("phase_")}
    assert set(wires) == set(segments["phase"].unique())
    for row in segments.iter_rows(named=True):
        mid = (row["start_ns"] + row["end_ns"]) // 2 // step
        if mid >= len(words):
            continue
        high = {p for p, b in wires.items() if words[mid, b // 8] >> (b % 8) & 1}
        assert high == {row["phase"]}


# ---------------------------------------------------------------- timescale, window, PulseView

def sr_of(vcd, tmp_path):
    """sigrok-cli's reading of a VCD: (metadata, probe -> bit, samples as words, stderr)."""
    sr = tmp_path / (vcd.stem + ".sr")
    run = subprocess.run([SIGROK, "-I", "vcd", "-i", str(vcd), "-o", str(sr)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(sr) as zf:
        md = zf.read("metadata").decode()
        unitsize = int(re.search(r"unitsize=(\d+)", md).group(1))
        probes = {m.group(2): int(m.group(1)) - 1 for m in re.finditer(r"probe(\d+)=(\S+)", md)}
        raw = b"".join(zf.read(n) for n in sorted((n for n in zf.namelist() if n.startswith("logic-1-")),
                                                  key=lambda n: int(n.rsplit("-", 1)[1])))
    return md, probes, np.frombuffer(raw, dtype=np.uint8).reshape(-1, unitsize), run.stderr


@pytest.fixture(scope="module")
def sampled(tmp_path_factory):
    """The L3 trace as a 10 MHz logic-analyzer capture (sigrok .sr, 100 ns per sample)."""
    import gen_logic
    from scsitrace import parsers
    from test_sigrok import CONTROL
    tr = parsers.parse(L3).transitions()
    probes = [(b.replace("/", ""), b) for b in CONTROL] + [(f"D{i}", f"DB{i}") for i in range(8)]
    idx, words = gen_logic.changes(tr, probes, 100)
    sr = tmp_path_factory.mktemp("cap") / "capture.sr"
    samples = gen_logic.expand(idx, words, int(idx[-1]) + 1)
    gen_logic.write_sr(sr, samples, [p[0] for p in probes], 10_000_000, unitsize=3)
    return sr, len(samples)


@needs_sigrok
def test_timescale_is_the_sample_period_and_sigrok_makes_as_many_samples(sampled, tmp_path):
    """A 10 MHz capture annotates at 100 ns: sigrok-cli reads it at 10 MHz with the
    capture's own sample count (not one sample per ns: 100 times fewer)."""
    sr, n = sampled
    out = tmp_path / "ann.vcd"
    assert cli.main(["annotate", str(sr), "-o", str(out), "--for", "pulseview"]) == 0
    assert "$timescale 100ns $end" in out.read_text()
    md, probes, words, err = sr_of(out, tmp_path)
    assert "samplerate=10 MHz" in md
    assert abs(len(words) - n) <= 1
    assert "Skipping unknown token" not in err            # no text variable for PulseView to skip


@needs_sigrok
def test_window_cuts_the_lines_and_the_decoding(sampled, tmp_path):
    sr, _ = sampled
    whole = analyse(sr)
    busy = whole[1].filter(whole[1]["phase"] != "BUS FREE")["start_ns"]
    lo = busy[len(busy) // 3] - busy[len(busy) // 3] % 100_000       # seconds with 4 decimals
    hi = min(lo + 5_000_000, whole[3].elapsed_ns - whole[3].elapsed_ns % 100_000)
    out = tmp_path / "win.vcd"
    assert cli.main(["annotate", str(sr), "-o", str(out), "--window", f"{lo / 1e9}:{hi / 1e9}"]) == 0
    stamps = [int(line[1:]) for line in out.read_text().splitlines() if line.startswith("#")]
    assert stamps[0] == lo // 100 and stamps[-1] == hi // 100
    md, probes, words, _ = sr_of(out, tmp_path)
    assert abs(len(words) - (hi - lo) // 100) <= 1
    windowed = analyse(sr, window=f"{lo / 1e9}:{hi / 1e9}")
    phases = [p for t, p in string_changes(out, "phase")]
    assert phases and set(phases) == {p.replace(" ", "_") for p in windowed[1]["phase"].unique()}


@needs_sigrok
def test_pulseview_lanes_name_the_phases_and_commands(annotated, tmp_path):
    """--for pulseview: one-bit lanes only; cmd_NAME is high exactly in the segments of an
    I/O of that command, as the phase lanes in theirs."""
    _, (_, segments, ios, _) = annotated
    out = tmp_path / "pv.vcd"
    assert cli.main(["annotate", L3, "-o", str(out), "--for", "pulseview", "--timescale", "10ns"]) == 0
    assert "$var string" not in out.read_text()
    md, probes, words, err = sr_of(out, tmp_path)
    assert "Skipping unknown token" not in err
    names = dict(zip(ios["io"].to_list(), ios["command"].to_list()))
    lanes = {p[len("cmd_"):]: b for p, b in probes.items() if p.startswith("cmd_")}
    assert set(lanes) == {re.sub(r"\W+", "_", n).strip("_") for n in names.values()}
    for row in segments.iter_rows(named=True):
        mid = (row["start_ns"] + row["end_ns"]) // 2 // 10
        if mid >= len(words):
            continue
        high = {c for c, b in lanes.items() if words[mid, b // 8] >> (b % 8) & 1}
        want = set() if row["io"] is None else {re.sub(r"\W+", "_", names[row["io"]]).strip("_")}
        assert high == want


@pytest.mark.parametrize("bad", ["3ns", "1 ps", "fast", "0ns"])
def test_bad_timescale_is_one_line_usage_error(capsys, tmp_path, bad):
    assert cli.main(["annotate", L3, "-o", str(tmp_path / "x.vcd"), "--timescale", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--timescale" in err[0]
    assert not (tmp_path / "x.vcd").exists()
