"""ancot-text v1 reader/writer: round trips, every malformed-line rule, lenient mode, CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from busmodel import BusBuilder
from scsitrace import parsers
from scsitrace.cli import main
from scsitrace.errors import ScsitraceError, BadInput
from scsitrace.parsers import ancot
from scsitrace.schema import SIGNAL_BIT

HEADER = "# ancot-text v1\n# tick_ns: 50\n# signals: BSY SEL ATN RST MSG C/D I/O REQ ACK\n# data: DB\n"


def write(tmp_path, body: str, header: str = HEADER, name="t.ancot"):
    p = tmp_path / name
    p.write_text(header + body)
    return str(p)


def test_spec_example(tmp_path):
    p = write(tmp_path, "# initiator: 7\n#\n#      tick BSY SEL ATN RST MSG C/D I/O REQ ACK DB\n"
                        "          0   0   0   0   0   0   0   0   0   0 --\n"
                        "        120   1   0   0   0   0   0   0   0   0 80\n"
                        "        200   1   1   0   0   0   0   0   0   0 80\n"
                        "        260\t1   1   1   0   0   0   0   0   0 81\n")
    cap = ancot.parse(p)
    tr = cap.transitions()
    assert tr["t_ns"].to_list() == [0, 6000, 10000, 13000]
    bsy, sel, atn = (1 << SIGNAL_BIT[n] for n in ("BSY", "SEL", "ATN"))
    assert tr["lines"].to_list() == [0, bsy, bsy | sel, bsy | sel | atn]
    assert tr["db"].to_list() == [None, 0x80, 0x80, 0x81]
    assert cap.meta["level"] == 3 and cap.meta["initiator"] == 7
    assert cap.records.read == 4 and cap.records.skipped == 0


BAD_LINES = [
    ("0 0 0 0 0 0 0 0 0 --", "wrong column count"),
    ("0 0 0 0 0 0 0 0 0 0 -- 7", "wrong column count"),
    ("x 0 0 0 0 0 0 0 0 0 --", "tick is not"),
    ("-5 0 0 0 0 0 0 0 0 0 --", "tick is not"),
    ("0 0 2 0 0 0 0 0 0 0 --", "non-binary value for signal SEL"),
    ("0 0 0 0 0 0 0 0 0 0 g1", "bad hex"),
    ("0 0 0 0 0 0 0 0 0 0 123", "bad hex"),
]


@pytest.mark.parametrize("line,why", BAD_LINES)
def test_bad_line_named_with_file_and_line(tmp_path, line, why):
    p = write(tmp_path, "10 0 0 0 0 0 0 0 0 0 --\n\n# note\n" + line + "\n20 0 0 0 0 0 0 0 0 0 --\n")
    with pytest.raises(BadInput) as err:
        ancot.parse(p).transitions()
    assert err.value.line == 8 and why in err.value.reason
    assert f"{p}:8:" in str(err.value)


def test_tick_going_backwards(tmp_path):
    p = write(tmp_path, "10 0 0 0 0 0 0 0 0 0 --\n5 0 0 0 0 0 0 0 0 0 --\n")
    with pytest.raises(BadInput, match="backwards") as err:
        ancot.parse(p).transitions()
    assert err.value.line == 6


@pytest.mark.parametrize("header,why", [
    ("# ancot text v1\n# signals: BSY SEL MSG C/D I/O\n", "first line"),
    ("# ancot-text v1\n", "no '# signals:'"),
    ("# ancot-text v1\n# signals: BSY SEL MSG C/D\n", "required signal"),
    ("# ancot-text v1\n# signals: BSY SEL MSG C/D I/O FOO\n", "unknown signal"),
    ("# ancot-text v1\n# signals: BSY BSY SEL MSG C/D I/O\n", "listed twice"),
    ("# ancot-text v1\n# tick_ns: 0\n# signals: BSY SEL MSG C/D I/O\n", "positive integer"),
    ("# ancot-text v1\n# signals: BSY SEL MSG C/D I/O\n# data: DQ\n", "DB"),
])
def test_bad_headers(tmp_path, header, why):
    p = write(tmp_path, "0 0 0 0 0 0\n", header=header)
    with pytest.raises(BadInput, match=why):
        ancot.parse(p).transitions()


def test_lenient_skips_counts_and_keeps_examples(tmp_path):
    body = "".join(f"{i * 10} 0 0 0 0 0 0 0 0 0 --\n" if i % 3 else "garbage\n" for i in range(30))
    p = write(tmp_path, body)
    cap = ancot.parse(p, strict=False)
    tr = cap.transitions()
    assert cap.records.skipped == 10 and cap.records.read == 20 == tr.height
    assert len(cap.records.examples) == 5 and cap.records.examples[0].startswith(f"{p}:5:")


def test_invalid_utf8_is_bad_input(tmp_path):
    p = tmp_path / "u.ancot"
    p.write_bytes(HEADER.encode() + b"0 0 0 0 0 0 0 0 0 0 --\n\xff\xfe\n")
    with pytest.raises(BadInput) as err:
        ancot.parse(str(p)).transitions()
    assert err.value.line == 6
    cap = ancot.parse(str(p), strict=False)
    assert cap.transitions().height == 1 and cap.records.skipped == 1


def test_sniff_and_registry(tmp_path):
    p = write(tmp_path, "0 0 0 0 0 0 0 0 0 0 --\n", name="x.trace")
    assert parsers.detect(p) == "ancot"


transition_rows = st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 0x1FF),
                                     st.one_of(st.none(), st.integers(0, 255)), st.one_of(st.none(), st.booleans())),
                           min_size=1, max_size=200)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=transition_rows, level=st.sampled_from([1, 2, 3, 4]), tick=st.sampled_from([1, 50, 25]))
def test_write_parse_round_trip(tmp_path, rows, level, tick):
    signals = ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O"] + (["REQ", "ACK"] if level >= 2 else [])
    data = {3: ["DB"], 4: ["DB", "DBP"]}.get(level, [])
    mask = sum(1 << SIGNAL_BIT[s] for s in signals)
    t = 0
    out = []
    for i, (dt, lines, db, dbp) in enumerate(rows):
        t += dt * tick if i else 0  # times are from the trace's first record
        out.append((t, lines & mask, db if data else None, dbp if len(data) == 2 else None))
    df = pl.DataFrame(out, schema={"t_ns": pl.Int64, "lines": pl.UInt16, "db": pl.UInt8, "dbp": pl.Boolean},
                      orient="row")
    path = str(tmp_path / "rt.ancot")
    ancot.write(path, df, signals=signals, data=data, tick_ns=tick)
    got = ancot.parse(path).transitions()
    assert got.equals(df)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=400) | st.text(alphabet="01 \t\n#-abcdefx9", max_size=400))
def test_garbage_gives_only_project_errors(tmp_path, body):
    p = tmp_path / "g.ancot"
    p.write_bytes(HEADER.encode() + (body if isinstance(body, bytes) else body.encode()))
    for strict in (True, False):
        try:
            from scsitrace import core
            core.analyze(ancot.parse(str(p), strict=strict))
        except ScsitraceError:
            assert strict


def test_model_trace_through_text_equals_in_memory(tmp_path):
    b = BusBuilder(level=3)
    b.bus_free()
    io, _ = b.command(2, bytes([0x28, 0, 0, 0, 0, 9, 0, 0, 4, 0]), disconnect_after_command=True)
    b.reconnect(2, io, data_in=bytes(64))
    b.finish()
    path = str(tmp_path / "m.ancot")
    ancot.write(path, b.transitions(), signals=b.signals()[:-1], data=["DB"])
    from scsitrace import core
    a_text = core.analyze(ancot.parse(path))
    a_mem = core.analyze(b.capture())
    assert a_text.segments.equals(a_mem.segments)


# ------------------------------------------------------------------ CLI

def model_file(tmp_path, level=2):
    b = BusBuilder(level=level)
    b.bus_free()
    io0, _ = b.command(3, bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 8, 0]), disconnect_after_command=True)
    b.command(4, bytes([0x2A, 0, 0, 0, 0x10, 0, 0, 0, 1, 0]), data_out=bytes(512))
    b.reconnect(3, io0, data_in=bytes(4096))
    b.finish()
    sig = b.signals()
    path = str(tmp_path / f"l{level}.ancot")
    ancot.write(path, b.transitions(), signals=[s for s in sig if s != "DB"],
                data=["DB"] if "DB" in sig else [], meta={"workload": "<script>x</script>"})
    return path, b


def test_cli_json_contract(tmp_path, capsys):
    path, b = model_file(tmp_path, level=3)
    assert main(["analyze", path, "--json", "-"]) == 0
    s = json.loads(capsys.readouterr().out)
    for key in ("source", "profile", "elapsed_ns", "ios_completed", "data_bytes", "bandwidth_mib_s", "iops",
                "categories", "targets", "anomalies", "records"):
        assert key in s
    assert s["profile"] == "raid1990"
    assert [c["name"] for c in s["categories"]] == ["Arbitration", "Selection", "Command", "Message Out",
                                                    "Message In", "Data Transfer", "Disconnect/Reconnect",
                                                    "Reselection", "Status", "Bus Free"]
    assert s["ios_completed"] == 2 and s["data_bytes"] == 4096 + 512
    assert s["bandwidth_mib_s"] == pytest.approx((4096 + 512) / 2**20 / (s["elapsed_ns"] / 1e9))
    assert {t["target"] for t in s["targets"]} == {3, 4}
    assert s["records"]["read"] == len(b.rows)


def test_cli_level1_bandwidth_needs_io_size(tmp_path, capsys):
    path, _ = model_file(tmp_path, level=1)
    assert main(["analyze", path, "--json", "-"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["bandwidth_mib_s"] is None and any("--io-size" in n for n in s["notes"])
    assert main(["analyze", path, "--json", "-", "--io-size", "32768"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["data_bytes"] == 2 * 32768


def test_cli_outputs_and_profiles(tmp_path, capsys):
    path, _ = model_file(tmp_path, level=3)
    ios, csv = tmp_path / "ios.csv", tmp_path / "cat.csv"
    assert main(["analyze", path, "--profile", "scsi", "--csv", str(csv), "--ios", str(ios)]) == 0
    out = capsys.readouterr().out
    assert "DATA IN" in out and "BUS FREE" in out
    table = pl.read_csv(ios)
    assert table.columns[:14] == ["io", "target", "lun", "tag", "opcode", "command", "lba", "blocks", "status",
                                  "start_ns", "end_ns", "data_bytes", "connections", "complete"]
    assert table["command"].to_list() == ["Read(10)", "Write(10)"]
    cats = pl.read_csv(csv)
    assert cats["percent"].sum() == pytest.approx(100, abs=0.01)
    assert main(["analyze", path, "--target", "3", "--json", "-"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["ios_completed"] == 1
    assert sum(c["percent"] for c in s["categories"]) == pytest.approx(100, abs=0.01)
    assert any(c["name"] == "Other targets" and c["total_ns"] > 0 for c in s["categories"])


def test_cli_bad_input_exit_2_one_line(tmp_path):
    p = write(tmp_path, "0 0 0 0 0 0 0 0 0 0 --\n1 0 0 0 0 0 0 0 0 0 zz\n")
    r = subprocess.run([sys.executable, "-m", "scsitrace.cli", "analyze", p], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and f"{p}:6: bad hex" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "scsitrace.cli", "analyze", p, "--lenient"],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
    assert r.returncode == 0 and "1 skipped" in r.stdout and f"{p}:6: bad hex" in r.stdout
    r = subprocess.run([sys.executable, "-m", "scsitrace.cli", "analyze", str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no such file" in r.stderr
    r = subprocess.run([sys.executable, "-m", "scsitrace.cli", "analyze"], capture_output=True, text=True)
    assert r.returncode == 2


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.integers(0, 99999), st.lists(st.sampled_from("01"), min_size=9, max_size=9),
                               st.sampled_from(["--", "a7", "FF", "0g", "2"]), st.sampled_from("01-x")),
                     min_size=2, max_size=40),
       data=st.sampled_from([(), ("DB",), ("DB", "DBP")]),
       bad_signal_at=st.one_of(st.none(), st.integers(0, 39)))
def test_fixed_layout_fast_path_equals_general_path(tmp_path, rows, data, bad_signal_at):
    """Aligned files take a fast path; the same records with ragged spacing take the general
    tokenizer: both must give the same transitions, or the same first bad line, at every
    level (no data columns, DB, DB and DBP)."""
    header = HEADER.replace("# data: DB\n", f"# data: {' '.join(data)}\n" if data else "")
    aligned, ragged = [], []
    for i, (tick, sig, db, dbp) in enumerate(sorted(rows)):
        sig = list(sig)
        if bad_signal_at == i:
            sig[3] = "x"
        extra = [db, dbp][:len(data)]
        aligned.append(" ".join([f"{tick:>7}"] + sig + [f"{db:>2}", dbp][:len(data)]))
        ragged.append(f"{tick}{' ' * (1 + i % 3)}{' '.join(sig)}" + "".join(f"\t{e}" for e in extra) + " \r" * (i % 2))
    results = []
    for name, lines in (("a", aligned), ("r", ragged)):
        p = write(tmp_path, "\n".join(lines) + "\n", header=header, name=name + ".ancot")
        try:
            results.append(ancot.parse(p).transitions().to_dicts())
        except BadInput as err:
            results.append((err.line, err.reason))
    assert results[0] == results[1]


def test_io_size_from_header_gives_bandwidth(tmp_path, capsys):
    path, b = model_file(tmp_path, level=1)
    text = open(path).read().replace("# initiator: 7\n", "# initiator: 7\n# io_size: 4096\n")
    open(path, "w").write(text)
    assert main(["analyze", path, "--json", "-"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["data_bytes"] == 2 * 4096
    assert s["bandwidth_mib_s"] == pytest.approx(2 * 4096 / 2**20 / (s["elapsed_ns"] / 1e9))
    assert any("--io-size 4096" in n for n in s["notes"])


def test_line_numbers_across_many_blocks(tmp_path, monkeypatch):
    monkeypatch.setattr(ancot, "PARSE_BLOCK_BYTES", 64)
    body = "".join(f"{i} 0 0 0 0 0 0 0 0 0 --\n" + ("# note\n\n" if i % 7 == 0 else "") for i in range(200))
    body += "999 0 0 0 0 0 0 0 0 0 x\n"
    p = write(tmp_path, body)
    lines_before = HEADER.count("\n") + body.count("\n")
    with pytest.raises(BadInput) as err:
        ancot.parse(p).transitions()
    assert err.value.line == lines_before
    cap = ancot.parse(p, strict=False)
    assert cap.transitions().height == 200 and cap.records.skipped == 1


@pytest.mark.parametrize("where", [1, 5, 17, 40])
def test_backwards_tick_found_whatever_the_block_boundaries(tmp_path, monkeypatch, where):
    monkeypatch.setattr(ancot, "PARSE_BLOCK_BYTES", 48)
    ticks = list(range(100, 160))
    ticks[where] = 3  # below everything before it
    p = write(tmp_path, "".join(f"{t} 0 0 0 0 0 0 0 0 0 --\n" for t in ticks))
    with pytest.raises(BadInput, match="backwards") as err:
        ancot.parse(p).transitions()
    assert err.value.line == HEADER.count("\n") + where + 1
    cap = ancot.parse(p, strict=False)
    assert cap.transitions().height == len(ticks) - 1 and cap.records.skipped == 1


def test_blocks_with_many_bad_records(tmp_path):
    """A block with as many bad records as good ones (the scanner's bad columns grow): every
    bad line counted, the first one named."""
    good = [f"{i * 10} 0 0 0 0 0 0 0 1 0 {i % 256:02x}\n" for i in range(1500)]
    body = "".join(line + ("bad\n" if i % 2 else "1 2\n") for i, line in enumerate(good))
    p = write(tmp_path, body)
    cap = ancot.parse(p, strict=False)
    tr = cap.transitions()
    assert cap.records.skipped == 1500 and tr.height == 1500 == cap.records.read
    assert tr["db"].to_list() == [i % 256 for i in range(1500)]
    assert cap.records.examples[0].startswith(f"{p}:{HEADER.count(chr(10)) + 2}:")
    with pytest.raises(BadInput) as err:
        ancot.parse(p).transitions()
    assert err.value.line == HEADER.count("\n") + 2


def test_densest_good_records_fit_the_scanner_bound():
    """Good records as short as the format allows (one-digit ticks, one blank between fields,
    no final newline): the scanner's arrays, sized for exactly that, hold every one."""
    import numpy as np
    from scsitrace.parsers import _ancot_scan
    sig_bits = np.array([1 << SIGNAL_BIT[s] for s in ("BSY", "SEL", "REQ", "ACK")], np.uint16)
    for n in (1, 2, 7, 1000):
        buf = "\n".join(f"{i % 10} 1 0 {i % 2} 0" for i in range(n)).encode()
        scanned = _ancot_scan.scan_block(buf, _ancot_scan.Layout(sig_bits, 0))
        good, bad = pl.DataFrame(scanned.good), pl.DataFrame(scanned.bad)
        assert good.height == n == scanned.lines and not bad.height
        line_idx = pl.DataFrame(scanned.line_idx)["line_idx"]
        assert good["tick"].to_list() == [i % 10 for i in range(n)] and line_idx.to_list() == list(range(n))
