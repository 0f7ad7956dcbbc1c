"""SG_IO commands from strace and sg3_utils -vv (parsers/sgio.py) in the kernel-log layer:
real captures of sg3_utils programs in the QEMU guest (fixtures/captured/sg/), synthetic
round trips (hypothesis), hostile lines."""
from __future__ import annotations

import json
import math
import shlex
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import core, parsers
from scsitrace.cli import main
from scsitrace.errors import BadInput, UsageError
from scsitrace.reports import summary as summ

from gen_sgio import HOSTILE, OTHER, PROGRAM_LINES, command, strace_text, with_program_output

CASE = Path(__file__).resolve().parents[1] / "fixtures" / "captured" / "sg" / "lsi_sg_tools"
RUNS = json.loads((CASE / "workload.json").read_text())["runs"]
BY_LABEL = {r["label"]: r for r in RUNS}
READ10, WRITE10 = 0x28, 0x2A


def analyze(path, **kw):
    """core.load with the filters as a user types them (pid="42", device=..., window="0:1")."""
    return core.load(str(path), **kw)


def commands(path) -> pl.DataFrame:
    """The parser's command table (CDB bytes included), in log order."""
    return parsers.parse(str(path)).frames["commands"].sort("pos")


def asked(cmd: str) -> list[Counter]:
    """What each program of a run's command line was asked to do: one Counter of opcodes per
    program (sg_dd: its reads or writes only), from the arguments alone."""
    words = shlex.split(cmd)
    if words[0] == "sh":
        body = words[-1].replace("exec 2>&1;", "")
        return [c for part in body.split("&") if part.strip() and part.strip() != "wait" for c in asked(part)]
    prog, args = words[0], words[1:]
    if prog == "sg_inq" and "--only" in args:
        return [Counter({0x12: 1})]
    if prog == "sg_readcap":
        return [Counter({0x9E if "--16" in args else 0x25: 1})]
    if prog == "sg_turs":
        return [Counter({0x00: int(args[args.index("-n") + 1])})]
    if prog == "sg_dd":
        kv = dict(a.split("=", 1) for a in args if "=" in a)
        op = WRITE10 if kv["if"] == "/dev/zero" else READ10
        return [Counter({op: math.ceil(int(kv["count"]) / int(kv["bpt"]))})]
    return []   # no fixed count (sg_inq reading VPD pages): checked against its -vv output


def test_every_run_was_captured_and_detected():
    assert len(RUNS) >= 10
    for r in RUNS:
        trace = CASE / f"{r['label']}.strace.txt"
        assert parsers.detect(str(trace)) == "sgio", r["label"]
    statuses = dict(line.split() for line in (CASE / "exit-status.txt").read_text().splitlines())
    assert statuses.pop("inq_badpage") == "5"          # the page the disk lacks: sg_inq exits 5
    assert set(statuses.values()) == {"0"}


@pytest.mark.parametrize("label", [r["label"] for r in RUNS if asked(r["cmd"])])
def test_command_counts_equal_what_the_programs_were_asked(label):
    """Per process, the SG_IO commands are what its arguments asked for; sg_dd also sends
    its one INQUIRY (listed in its -vv output); reads and writes move bpt x 512 bytes each,
    at consecutive LBAs."""
    run = BY_LABEL[label]
    ios = analyze(CASE / f"{label}.strace.txt").ios
    want = asked(run["cmd"])
    got = [Counter(g["opcode"].to_list()) for _, g in ios.group_by("pid", maintain_order=True)]
    for c in got:
        if c.keys() & {READ10, WRITE10}:     # sg_dd identifies the device first
            assert c.pop(0x12) == 1
    items = lambda cs: sorted(sorted(c.items()) for c in cs)  # noqa: E731
    assert items(got) == items(want)
    assert ios["paired"].all() and (ios["status"] == "GOOD").all()
    for _, g in ios.filter(pl.col("opcode").is_in([READ10, WRITE10])).group_by("pid"):
        g = g.sort("io")
        assert (g["data_bytes"] == g["bytes"]).all()
        assert (g["bytes"] == g["blocks"] * 512).all()
        assert (g["lba"].diff().drop_nulls() == g["blocks"][:-1]).all()


@pytest.mark.parametrize("label", [r["label"] for r in RUNS if "-vv" in r["cmd"] or "verbose=" in r["cmd"]])
def test_strace_equals_the_programs_own_verbose_output(label):
    """The CDBs strace saw are the ones the program printed with -vv (sg_dd at verbose=2 prints
    only its INQUIRY), in order; the sense data of the failed command agree, and so do the
    driver's durations where the program prints them (-vvv)."""
    trace = commands(CASE / f"{label}.strace.txt")
    out = CASE / f"{label}.out.txt"
    assert parsers.detect(str(out)) == "sgio"
    verbose = commands(out)
    if "verbose=2" in BY_LABEL[label]["cmd"]:     # sg_dd lists its reads and writes from verbose=3 on
        trace = trace.filter(pl.Series([c[0] not in (READ10, WRITE10) for c in trace["cdb"].to_list()]))
    strace_cdbs = trace["cdb"].to_list()
    assert verbose["cdb"].to_list() == strace_cdbs and strace_cdbs
    timed = verbose["driver_ns"].is_not_null()       # -vvv, sg_dd verbose=3: the driver's duration
    if "-vvv" in BY_LABEL[label]["cmd"] or "verbose=3" in BY_LABEL[label]["cmd"]:
        assert timed.sum() >= 1
    assert verbose.filter(timed)["driver_ns"].to_list() == trace.filter(timed)["driver_ns"].to_list()
    cols = ["sense_key", "asc", "ascq"]
    bad = trace.filter(pl.col("status") != "GOOD")
    assert bad.select(cols).rows() == verbose.filter(pl.col("sense_key").is_not_null()).select(cols).rows()


def test_check_condition_sense():
    ios = analyze(CASE / "inq_badpage.strace.txt").ios
    row = ios.row(0, named=True)
    assert (row["command"], row["status"], row["sense_key"], row["asc"], row["ascq"]) == \
        ("Inquiry", "CHECK CONDITION", "Illegal Request", 0x24, 0x00)
    assert row["bytes"] == 252 and row["data_bytes"] == 0 and row["paired"]


def test_all_runs_equal_the_kernels_ftrace_of_the_same_case():
    """Every SG_IO command of the case's runs was dispatched to the disk once: the multiset
    of CDBs of all the strace logs equals the scsi_dispatch_cmd_start CDBs of ftrace."""
    events = parsers.parse(str(CASE / "ftrace.txt"), "scsilog").frames["events"]
    ftrace = events.filter(pl.col("kind") == "start")
    strace = pl.concat([commands(CASE / f"{r['label']}.strace.txt").select("cdb") for r in RUNS])
    assert strace.height == ftrace.height > 400
    assert Counter(strace["cdb"].to_list()) == Counter(ftrace["cdb"].to_list())
    assert ftrace["device"].unique().to_list() == ["0:0:0:0"]
    assert analyze(CASE / "ftrace.txt", fmt="scsilog").ios["paired"].all()


def test_unfinished_and_resumed_halves_are_one_command():
    text = (CASE / "parallel.strace.txt").read_text()
    unfinished = sum("SG_IO" in ln and ln.endswith("<unfinished ...>") for ln in text.splitlines())
    a = analyze(CASE / "parallel.strace.txt")
    assert unfinished > 20
    assert a.ios.height == sum(sum(c.values()) for c in asked(BY_LABEL["parallel"]["cmd"])) + 1
    assert a.ios["syscall_ns"].is_not_null().all() and a.ios["paired"].all()
    assert a.ios["pid"].n_unique() == 2
    s = summ.summary(a)
    assert s["source"]["skipped_by_design"]["strace messages"] == 2
    assert s["records"] == {"read": len(text.splitlines()), "skipped": 0, "skipped_examples": []}


def test_forms_without_timestamps_or_T():
    plain = analyze(CASE / "turs_plain.strace.txt")
    assert plain.ios.height == 3 and plain.ios["start_ns"].is_null().all()
    assert (plain.ios["response_ns"] == plain.ios["driver_ns"]).all()
    assert plain.elapsed_ns == 0 and any("no timestamps" in n for n in plain.notes)
    everything = analyze(CASE / "turs.strace.txt")      # -T, every syscall
    s = summ.summary(everything)
    assert s["commands"]["total"] == 5 and s["source"]["skipped_by_design"]["other syscalls"] > 50
    assert everything.ios["device"].unique().to_list() == ["/dev/sg0"]   # from its openat line


def test_sg_v4_bsg():
    ios = analyze(CASE / "bsg_inq.strace.txt").ios
    assert ios["command"].to_list() == ["Inquiry"] and ios["direction"].to_list() == ["in"]
    assert ios["data_bytes"].to_list() == [36]
    turs = analyze(CASE / "bsg_turs.strace.txt").ios
    assert turs["command"].to_list() == ["Test Unit Ready"] * 4
    assert turs["device"].unique().to_list() == ["/dev/bsg/0:0:0:0"]


def test_pid_filter_and_regress(capsys):
    path = CASE / "parallel.strace.txt"
    pids = analyze(path).ios["pid"].unique().sort().to_list()
    one = analyze(path, pid=str(pids[0]))
    assert one.ios["pid"].unique().to_list() == [pids[0]]
    assert one.ios.height == analyze(path).ios.filter(pl.col("pid") == pids[0]).height > 0
    dd = commands(CASE / "dd_4k.strace.txt")
    early = analyze(CASE / "dd_4k.strace.txt", window=":0.1").ios
    assert early.height == dd.filter(pl.col("start_ns") < 100_000_000).height
    assert 0 < early.height < dd.height
    with pytest.raises(UsageError, match="--device /dev/sg9: not in the trace"):
        analyze(CASE / "dd_4k.strace.txt", device="/dev/sg9")
    assert main(["regress", str(CASE / "baseline.sgio.json")]) == 0
    assert main(["regress", str(CASE / "baseline.sgio.json"), str(CASE / "dd_4k.strace.txt")]) == 1


CDBS = st.sampled_from([bytes(6), bytes([0x12, 0, 0, 0, 36, 0]), bytes([0x28, 0, 0, 0, 8, 0, 0, 0, 8, 0]),
                        bytes([0x2A, 0, 0, 1, 0, 0, 0, 0, 16, 0]), bytes([0x9E, 0x10] + [0] * 11 + [32, 0, 0])])


@st.composite
def calls(draw):
    """Commands of 1-3 processes, each process's calls back to back, processes overlapping."""
    pids = draw(st.lists(st.integers(100, 999), min_size=1, max_size=3, unique=True))
    out = []
    for pid in pids:
        t = draw(st.integers(0, 5000))
        for _ in range(draw(st.integers(1, 6))):
            direction = draw(st.sampled_from(["none", "in", "out"]))
            n = 0 if direction == "none" else draw(st.integers(1, 70000))
            check = draw(st.booleans())
            took = draw(st.integers(1, 20000))
            out.append(command(draw(CDBS), pid=pid, path=f"/dev/sg{pid % 3}", direction=direction, dxfer_len=n,
                               resid=draw(st.integers(0, n)) if direction == "in" else 0,
                               status=2 if check else 0,
                               sense=bytes([0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0, 0, 0]) if check else b"",
                               duration_ms=draw(st.integers(0, 50)), start_us=t, syscall_us=took,
                               v4=draw(st.booleans()), ret=draw(st.sampled_from(["0", "0", "0", "-1"]))))
            t += took + draw(st.integers(1, 3000))
    return out


@settings(max_examples=40, deadline=None)
@given(calls(), st.sampled_from([None, "tt", "ttt"]), st.booleans(), st.booleans(), st.sampled_from(["bracket", "plain"]),
       st.booleans())
def test_round_trip(tmp_path_factory, cmds, ts, T, y, f, other):
    p = tmp_path_factory.mktemp("sg") / "t.strace"
    p.write_text(strace_text(cmds, ts=ts, T=T, y=y, f=f, other=other))
    cap = parsers.parse(str(p))
    got = cap.frames["commands"].sort("pid", "pos")
    want = sorted(cmds, key=lambda c: (c["pid"], c["start_us"]))
    assert got.height == len(want)
    ok = [c["ret"] == "0" for c in want]
    assert got["cdb"].to_list() == [c["cdb"] for c in want]
    assert got["pid"].to_list() == [c["pid"] for c in want]
    assert got["reason"].to_list() == [None if k else "ioctl failed (EIO)" for k in ok]
    assert got["bytes"].to_list() == [c["dxfer_len"] for c in want]
    assert got["data_bytes"].to_list() == [c["dxfer_len"] - c["resid"] if k else None for c, k in zip(want, ok)]
    assert got["status"].to_list() == [("CHECK CONDITION" if c["status"] else "GOOD") if k else None
                                       for c, k in zip(want, ok)]
    assert got["asc"].to_list() == [0x24 if c["sense"] and k else None for c, k in zip(want, ok)]
    assert got["driver_ns"].to_list() == [c["duration_ms"] * 1_000_000 if k else None for c, k in zip(want, ok)]
    if T:
        assert got["syscall_ns"].to_list() == [c["syscall_us"] * 1000 if k else None for c, k in zip(want, ok)]
    if ts is not None:
        t0 = min(c["start_us"] for c in cmds)
        assert got["start_ns"].to_list() == [(c["start_us"] - t0) * 1000 for c in want]
    if y:
        assert got["device"].to_list() == [c["path"] for c in want]
    assert cap.records.skipped == 0


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_line(tmp_path, kind, capsys):
    good = strace_text([command(bytes(6), start_us=0), command(bytes(6), start_us=500)], ts="tt")
    lines = good.splitlines()
    p = tmp_path / "bad.strace"
    p.write_text("\n".join([lines[0], *OTHER, HOSTILE[kind], lines[1]]) + "\n")
    bad_line = 2 + len(OTHER)
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "sgio")
    assert exc.value.line == bad_line
    assert main(["analyze", str(p), "--format", "sgio"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{p}:{bad_line}: " in err[0]
    cap = parsers.parse(str(p), "sgio", strict=False)
    assert cap.records.skipped == 1 and cap.records.read == len(OTHER) + 2
    assert cap.frames["commands"].height == 2
    assert cap.meta["skipped_by_design"]["other syscalls"] == 3


def test_other_syscalls_are_not_errors(tmp_path):
    p = tmp_path / "t.strace"
    p.write_text("\n".join(OTHER) + "\n" + strace_text([command(bytes(6))], ts="ttt"))
    s = summ.summary(core.analyze(parsers.parse(str(p))))
    assert s["commands"]["total"] == 1 and s["records"]["skipped"] == 0
    assert s["source"]["skipped_by_design"] == {"other syscalls": 3, "signals and exits": 2,
                                                "strace messages": 1, "blank": 0, "program output": 0}


@settings(max_examples=30, deadline=None)
@given(calls(), st.sampled_from([None, "tt"]), st.sampled_from(["", "    ", "\t"]),
       st.lists(st.tuples(st.integers(-1, 40), st.sampled_from(PROGRAM_LINES)), max_size=12), st.booleans())
def test_program_output_between_strace_lines_is_counted_and_skipped(tmp_path_factory, cmds, ts, indent, inserts,
                                                                     split_write):
    """strace without -o: the traced program's lines among strace's (the excerpt indented as
    pasted) are read and skipped by design, counted; the commands are those of the same log
    without them."""
    d = tmp_path_factory.mktemp("sgp")
    clean = strace_text(cmds, ts=ts, f="bracket")
    mixed = d / "mixed.strace"
    mixed.write_text(with_program_output(clean, inserts, indent, split_write))
    want = parsers.parse(str(_write(d / "clean.strace", clean))).frames["commands"]
    cap = parsers.parse(str(mixed))
    got = cap.frames["commands"]
    assert got.drop("pos").equals(want.drop("pos"))
    # a split write(2) is two strace lines (the program's text rides on the first)
    program = sum(1 for at, line in inserts if line and at < len(clean.splitlines()))
    an = core.analyze(cap)
    assert cap.records.skipped == 0
    assert an.capture.meta["skipped_by_design"]["program output"] == program
    assert an.capture.meta["skipped_by_design"]["other syscalls"] == 2 * split_write
    said = [n for n in an.notes if "traced program's own output" in n]
    assert said == ([f"{program} lines are the traced program's own output (strace without -o shares its "
                     "terminal): read, skipped by design"] if program else [])


def _write(p, text):
    p.write_text(text)
    return p


def test_indented_strace_with_program_output_is_detected(tmp_path):
    """An excerpt pasted indented, the program's lines first: still detected as an SG_IO log."""
    clean = strace_text([command(bytes(6), start_us=0), command(bytes([0x12, 0, 0, 0, 36, 0]), start_us=900)])
    p = _write(tmp_path / "pasted.txt", with_program_output(clean, [(-1, PROGRAM_LINES[2]), (0, PROGRAM_LINES[0])],
                                                            "    "))
    assert parsers.detect(str(p)) == "sgio"
    s = summ.summary(core.analyze(parsers.parse(str(p))))
    assert s["commands"]["total"] == 2 and s["source"]["skipped_by_design"]["program output"] == 2


def test_bad_sg3_verbose_cdb_line(tmp_path, capsys):
    p = tmp_path / "inq.sg3.txt"
    p.write_text("open /dev/sg0 with flags=0x800\n    inquiry cdb: [12 00 00 00 24 00]\n"
                 "    test unit ready cdb: [00 zz 00 00 00 00]\n")
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "sgio")
    assert exc.value.line == 3
    cap = parsers.parse(str(p), "sgio", strict=False)
    assert cap.records.skipped == 1 and cap.frames["commands"].height == 1


def _rig():
    import importlib.util
    spec = importlib.util.spec_from_file_location("capture_rig_sg", CASE.parents[2] / "capture" / "rig.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_sg_case_matches_its_declaration(tmp_path):
    """The guest ran the lines the declaration gives now; a bad declaration is refused."""
    rig = _rig()
    doc = rig.load_workloads(rig.HERE / "workloads.toml")
    case = next(c for c in doc["sg_case"] if c["name"] == CASE.name)
    committed = json.loads((CASE / "workload.json").read_text())
    assert committed["guest_commands"] == rig.workload_commands(case, doc["seed"], doc["disk_mib"] << 20)
    assert [r["label"] for r in committed["runs"]] == [r["label"] for r in case["runs"]]
    bad = tmp_path / "w.toml"
    bad.write_text('[[sg_case]]\nname = "x"\ndisk = "lsi"\nruns = [{ label = "a", cmd = "rm -rf /" }]\n')
    with pytest.raises(rig.RigError, match="not in the guest"):
        rig.load_workloads(bad)


def test_ios_csv_carries_the_sg_columns(tmp_path, capsys):
    out = tmp_path / "ios.csv"
    assert main(["analyze", str(CASE / "inq_badpage.strace.txt"), "--ios", str(out)]) == 0
    rows = pl.read_csv(out)
    assert rows.height == 1
    # the one vocabulary (docs/schemas/README.md): bytes moved, requested_bytes asked for
    assert rows.select("sense_key", "asc", "ascq", "requested_bytes", "bytes", "data_bytes", "driver_ns").row(0) == \
        ("Illegal Request", 0x24, 0, 252, 0, 0, 4_000_000)
