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
    """(time, value) of a string variable's changes, read from the file's text."""
    text = open(path).read()
    code = re.search(rf"\$var string 1 (\S+) {var} \$end", text).group(1)
    out, t = [], 0
    for line in text.split("$enddefinitions $end", 1)[1].splitlines():
        if line.startswith("#"):
            t = int(line[1:])
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
    rate = 10**9                            # the annotated file's timescale is 1 ns
    assert f"samplerate={rate // 10**9} GHz" in md
    words = np.frombuffer(raw, dtype=np.uint8).reshape(-1, unitsize)
    wires = {p[len("phase_"):].replace("_", " "): b for p, b in probes.items() if p.startswith("phase_")}
    assert set(wires) == set(segments["phase"].unique())
    for row in segments.iter_rows(named=True):
        mid = (row["start_ns"] + row["end_ns"]) // 2
        if mid >= len(words):
            continue
        high = {p for p, b in wires.items() if words[mid, b // 8] >> (b % 8) & 1}
        assert high == {row["phase"]}
