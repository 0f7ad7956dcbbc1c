"""usbmon reader and USB mass-storage layer: generated captures (pcap, pcapng, text) against
each other, against tshark's `scsi,srt` and against the pyshark route; hostile inputs;
the real kernel captures; the compiled record walk against a plain loop."""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from scsitrace import core, parsers
from scsitrace.cli import main
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.parsers import _pcap, usbmon
from scsitrace.reports import summary as summ

REAL = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "captured"
USBMON_REAL = sorted((REAL / "usbmon").glob("*.usbmon.txt")) if REAL.exists() else []
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
COMPARED = ["io", "device", "lun", "opcode", "command", "lba", "blocks", "bytes", "data_bytes", "start_ns",
            "end_ns", "status", "usb_tag", "residue", "stalls", "command_ns", "data_ns", "status_ns",
            "response_ns", "paired", "reason"]


def analyze(path, **opts):
    return core.analyze(parsers.parse(str(path), "usbmon", **opts))


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    d = tmp_path_factory.mktemp("usbmon")
    out = {}
    for seed in (1, 2):
        ev = gen.traffic(seed)
        paths = {"pcap": d / f"s{seed}.pcap", "pcapng": d / f"s{seed}.pcapng", "text": d / f"s{seed}.txt"}
        gen.write_pcap(paths["pcap"], ev)
        gen.write_pcapng(paths["pcapng"], ev)
        gen.write_text(paths["text"], ev)
        out[seed] = paths
    return out


# ---------------------------------------------------------------- generated traffic

def test_generated_commands_decode(generated):
    a = analyze(generated[1]["pcap"])
    ios = a.ios
    names = ios["command"].to_list()
    assert names[:2] == ["Test Unit Ready", "Inquiry"]
    assert {"Read(10)", "Write(10)", "Read(16)", "Write(16)", "Request Sense"} <= set(names)
    assert ios["paired"].all()
    failed = ios.filter(pl.col("status") == "CHECK CONDITION")
    assert failed.height == 1 and failed["lba"][0] == 999999 and failed["residue"][0] == 4096
    stalled = ios.filter(pl.col("stalls") > 0)
    assert stalled.height == 1 and stalled["lba"][0] == 1234 and stalled["data_bytes"][0] == 0
    kinds = set(a.anomalies["kind"].to_list())
    assert {"STALL", "CLEAR HALT"} <= kinds
    r16 = ios.filter(pl.col("command") == "Read(16)").row(0, named=True)
    assert r16["blocks"] == 16 and r16["bytes"] == 8192 and r16["data_bytes"] == 8192


@pytest.mark.parametrize("other", ["pcapng", "text"])
def test_same_traffic_same_table(generated, other):
    for seed in generated:
        base = analyze(generated[seed]["pcap"]).ios.select(COMPARED)
        assert analyze(generated[seed][other]).ios.select(COMPARED).equals(base)


def test_stages_tile_each_device(generated):
    a = analyze(generated[1]["text"])
    seg = a.segments
    for dev, grp in seg.group_by("device"):
        g = grp.sort("start_ns")
        assert g["start_ns"][0] == 0 and g["end_ns"][-1] == a.elapsed_ns
        assert (g["start_ns"][1:] == g["end_ns"][:-1]).all()
    cats = a.categories["usb"]
    assert abs(cats["percent"].sum() - 100.0) < 1e-9


def _tshark_srt(path) -> dict[int, tuple]:
    out = subprocess.run(["tshark", "-q", "-z", "scsi,srt,0", "-r", str(path)], capture_output=True,
                         text=True, check=True).stdout
    rows = {}
    for m in re.finditer(r"^\s*(\d+)\s+(.+?)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", out, re.M):
        rows[int(m[1])] = (m[2], int(m[3]), m[4], m[5], m[6])
    return rows


@needs_tshark
def test_srt_equals_tshark(generated):
    for seed in generated:
        want = _tshark_srt(generated[seed]["pcap"])
        assert want, "tshark printed no SRT rows: it did not recognise the mass-storage interface"
        s = summ.summary(analyze(generated[seed]["pcap"]))
        got = {r["opcode"]: (r["name"], r["calls"], f"{r['min_ns'] / 1e9:.6f}", f"{r['max_ns'] / 1e9:.6f}",
                             f"{r['avg_ns'] / 1e9:.6f}") for r in s["srt"]}
        assert got == want


@needs_tshark
def test_pyshark_route_same_table(generated):
    native = analyze(generated[1]["pcap"]).ios.select(COMPARED)
    via = analyze(generated[1]["pcap"], route="pyshark").ios.select(COMPARED)
    assert via.equals(native)


def test_pyshark_route_rejects_text(generated):
    from scsitrace.errors import UsageError
    with pytest.raises(UsageError):
        parsers.parse(str(generated[1]["text"]), "usbmon", route="pyshark")


def test_cli_json_contract(generated, capsys):
    assert main(["analyze", str(generated[1]["pcap"]), "--json", "-"]) == 0
    import json
    s = json.loads(capsys.readouterr().out)
    assert s["layer"] == "usb"
    c = s["commands"]
    assert c["total"] == c["paired"] + c["unpaired"] == 18
    assert set(s["srt"][0]) == {"opcode", "name", "calls", "min_ns", "max_ns", "avg_ns", "p50_ns", "p99_ns"}


# ---------------------------------------------------------------- hostile input

@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    return gen.hostile_pcaps(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("name", ["truncated_record", "truncated_header"])
def test_truncated(hostile, name):
    path, offset = hostile[name]
    with pytest.raises(TruncatedInput) as exc:
        parsers.parse(str(path), "usbmon")
    assert exc.value.offset == offset
    cap = parsers.parse(str(path), "usbmon", strict=False)
    assert cap.anomalies["kind"].to_list() == ["TRUNCATED"]
    assert cap.records.read == len(gen.traffic(3)) - 1


@pytest.mark.parametrize("name,why", [("bad_type", "not S, C or E"), ("bad_len_cap", "len_cap"),
                                      ("huge_length", "snapshot length"), ("not_usbmon", "link type 1")])
def test_bad_records(hostile, name, why):
    path, offset = hostile[name]
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(path), "usbmon")
    assert why in exc.value.reason and exc.value.offset == offset
    assert main(["analyze", str(path)]) == 2


@pytest.mark.parametrize("name", ["bad_type", "bad_len_cap"])
def test_bad_record_lenient(hostile, name):
    path, offset = hostile[name]
    cap = parsers.parse(str(path), "usbmon", strict=False)
    assert cap.records.skipped == 1 and cap.records.read == len(gen.traffic(3)) - 1
    assert f"byte offset {offset}" in cap.records.examples[0]


@pytest.mark.parametrize("k", range(len(gen.HOSTILE_TEXT)))
def test_bad_text_line(tmp_path, k):
    lines = [gen.text_line(e) for e in gen.traffic(1)]
    lines.insert(7, gen.HOSTILE_TEXT[k])
    p = tmp_path / "bad.usbmon.txt"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(p), "usbmon")
    assert exc.value.line == 8
    cap = parsers.parse(str(p), "usbmon", strict=False)
    assert cap.records.skipped == 1 and cap.records.read == len(lines) - 1
    assert main(["analyze", str(p), "--format", "usbmon"]) == 2


# ---------------------------------------------------------------- round trips (hypothesis)

events = st.builds(
    gen.Event,
    t_us=st.integers(0, 10**9), urb_id=st.integers(0, 2**64 - 1), ev=st.sampled_from("SC"),
    xfer=st.sampled_from([1, 3]), ep=st.sampled_from([0x01, 0x02, 0x81, 0x82]),
    status=st.sampled_from([0, -32, -115, -121]), length=st.integers(0, 1 << 20),
    data=st.one_of(st.none(), st.binary(min_size=1, max_size=40)),
    bus=st.integers(1, 20), dev=st.integers(1, 127))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(events, min_size=1, max_size=30))
def test_pcap_and_text_round_trip(tmp_path, evs):
    evs = sorted(evs, key=lambda e: e.t_us)
    for writer, name in ((gen.write_pcap, "r.pcap"), (gen.write_text, "r.usbmon.txt")):
        p = tmp_path / name
        writer(p, evs)
        u = parsers.parse(str(p), "usbmon").frames["urbs"]
        t0 = evs[0].t_us
        assert u["t_ns"].to_list() == [(e.t_us - t0) * 1000 for e in evs]
        assert u["urb_id"].to_list() == [e.urb_id for e in evs]
        assert u["event"].to_list() == [e.ev for e in evs]
        assert u["ep"].to_list() == [e.ep for e in evs]
        assert u["status"].to_list() == [e.status for e in evs]
        assert u["length"].to_list() == [e.length for e in evs]
        assert u["bus"].to_list() == [e.bus for e in evs] and u["dev"].to_list() == [e.dev for e in evs]
        assert u["data"].to_list() == [e.data[:32] if e.data else None for e in evs]


def _plain_walk(raw: bytes, start: int = 24) -> list[int]:
    """Record offsets by a plain Python loop over the pcap length chain."""
    out, pos = [], start
    while pos + 16 <= len(raw):
        out.append(pos)
        pos += 16 + struct.unpack_from("<I", raw, pos + 8)[0]
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 700), min_size=0, max_size=3000), st.integers(0, 40), st.integers(0, 255))
def test_record_walk_equals_plain_walk(lengths, cut, junk):
    """The compiled walk of the length chain finds exactly the records a plain loop finds,
    and reports a record cut short by the end of the file at that record's offset."""
    buf = bytearray(24)
    for n in lengths:
        buf += struct.pack("<IIII", 0, 0, n, n) + bytes([junk]) * n
    raw = bytes(buf[:len(buf) - cut]) if cut < len(buf) - 24 else bytes(buf)
    arr = np.frombuffer(raw, dtype=np.uint8)
    rdt = _pcap.dtype_of(_pcap.pcap_record_header())
    want = _plain_walk(raw)
    offs, bad, truncated = _pcap._chain(arr, 24, rdt, "incl_len", 16, "x", False, 1 << 18)
    ends_inside = bool(want) and want[-1] + 16 + struct.unpack_from("<I", raw, want[-1] + 8)[0] > len(raw)
    complete = want[:-1] if ends_inside else want
    assert offs.tolist() == complete and bad == []
    tail = want[-1] if ends_inside else (complete[-1] + 16 + struct.unpack_from("<I", raw, complete[-1] + 8)[0]
                                         if complete else 24)
    assert truncated == (tail if tail != len(raw) else None)


def test_dtype_matches_declaration():
    dt = _pcap.dtype_of(usbmon.USBMON_PACKET_MMAPPED)
    assert dt.itemsize == 64 and _pcap.dtype_of(usbmon.USBMON_PACKET).itemsize == 48
    e = gen.Event(1_234_567, 0xFFFF888000001040, "C", 3, 0x81, -32, 13, b"USBS" + bytes(9))
    raw = gen.usbmon_header(e, 13)
    rec = np.frombuffer(raw, dtype=dt)[0]
    parsed = usbmon.USBMON_PACKET_MMAPPED.parse(raw)
    for name in ("id", "type", "epnum", "status", "length", "len_cap", "ts_sec", "ts_usec"):
        assert int(rec[name]) == parsed[name]


# ---------------------------------------------------------------- real captures

def _independent_bot_and_uas(path: Path) -> list[int]:
    """Response times (us) recomputed with a plain line loop: BOT CBW submit -> CSW
    completion by tag; UAS command IU submit -> sense IU completion by tag."""
    pending, out = {}, []
    for line in path.read_text().splitlines():
        f = line.split()
        ts, ev, words = int(f[1]), f[2], f[6:]
        if len(words) < 2 or words[0] != "=":
            continue
        data = bytes.fromhex("".join(words[1:]))
        if ev == "S" and data[:4] == b"USBC":
            pending[data[4:8]] = ts
        elif ev == "C" and data[:4] == b"USBS":
            out.append(ts - pending.pop(data[4:8]))
        elif ev == "S" and data[0] == 1 and f[3].startswith("Bo"):
            pending[data[2:4]] = ts
        elif ev == "C" and data[0] == 3 and f[3].startswith("Bi"):
            out.append(ts - pending.pop(data[2:4]))
    return out


@pytest.mark.skipif(not USBMON_REAL, reason="../shared/realdata absent")
@pytest.mark.parametrize("path", USBMON_REAL, ids=lambda p: p.name)
def test_real_capture(path):
    a = analyze(path)
    s = summ.summary(a)
    c = s["commands"]
    assert c["total"] == c["paired"] + c["unpaired"] == a.ios.height
    assert a.ios.filter(~pl.col("paired"))["reason"].null_count() == 0
    assert s["records"]["read"] == len(path.read_text().splitlines())
    want = _independent_bot_and_uas(path)
    got = a.ios.filter(pl.col("paired")).sort("start_ns")["response_ns"].to_list()
    assert got == [us * 1000 for us in want]
    assert c["total"] == sum(1 for ln in path.read_text().splitlines()
                             if " S Bo:" in ln and (" = 55534243" in ln or " = 01"in ln))


def test_record_walk_on_usbmon_pcap(tmp_path):
    p = tmp_path / "many.pcap"
    gen.write_pcap_bulk(p, gen.bulk_traffic(3000, data_cap=40))
    pk = _pcap.read(str(p))
    assert pk.record_offset.tolist() == _plain_walk(p.read_bytes())
    assert parsers.parse(str(p), "usbmon").records.read == len(pk.record_offset)


def _uas_line(urb, t_us, ev, pipe, status, length, data=None):
    d = "i" if pipe in (2, 3) else "o"
    head = f"{urb:016x} {t_us} {ev} B{d}:3:002:{pipe} {status} {length}"
    if data:
        return head + " = " + " ".join(data[i:i + 4].hex() for i in range(0, len(data), 4))
    return head + (" <" if ev == "S" else " >")


def _command_iu(tag, cdb):
    return bytes([1, 0]) + tag.to_bytes(2, "big") + bytes(4) + bytes(8) + cdb.ljust(16, b"\0")


def _sense_iu(tag, status):
    return bytes([3, 0]) + tag.to_bytes(2, "big") + bytes([0, 0, status, 0]) + bytes(8)


def test_uas_two_commands_in_flight(tmp_path):
    """Two queued READ(10)s (tags 1 and 2); tag 2 finishes first. Status and data URBs are
    submitted ahead of the commands, as the kernel's uas driver does."""
    r1 = bytes([0x28, 0, 0, 0, 0, 8, 0, 0, 8, 0])
    r2 = bytes([0x28, 0, 0, 0, 1, 0, 0, 0, 8, 0])
    lines = [
        _uas_line(0xA1, 1000, "S", 2, -115, 112), _uas_line(0xA2, 1001, "S", 3, -115, 4096),
        _uas_line(0xA3, 1002, "S", 1, -115, 32, _command_iu(1, r1)),
        _uas_line(0xB1, 1003, "S", 2, -115, 112), _uas_line(0xB2, 1004, "S", 3, -115, 4096),
        _uas_line(0xB3, 1005, "S", 1, -115, 32, _command_iu(2, r2)),
        _uas_line(0xA3, 1010, "C", 1, 0, 32), _uas_line(0xB3, 1011, "C", 1, 0, 32),
        _uas_line(0xB2, 1500, "C", 3, 0, 4096, bytes(32)),
        _uas_line(0xA1, 1600, "C", 2, 0, 16, _sense_iu(2, 0)),
        _uas_line(0xA2, 2000, "C", 3, 0, 4096, bytes(32)),
        _uas_line(0xB1, 2100, "C", 2, 0, 16, _sense_iu(1, 2)),
    ]
    p = tmp_path / "uas.usbmon.txt"
    p.write_text("\n".join(lines) + "\n")
    a = analyze(p)
    ios = a.ios.sort("usb_tag")
    assert ios["usb_tag"].to_list() == [1, 2]
    assert ios["transport"].to_list() == ["UAS", "UAS"]
    assert ios["lba"].to_list() == [8, 256]
    # response = command IU submit -> status IU completion, matched by tag, not by order
    assert ios["response_ns"].to_list() == [(2100 - 1002) * 1000, (1600 - 1005) * 1000]
    assert ios["status"].to_list() == ["CHECK CONDITION", "GOOD"]
    assert ios["data_bytes"].to_list() == [4096, 4096]
    assert summ.summary(a)["commands"]["paired"] == 2


def test_interrupt_and_control_lines(tmp_path):
    """Hub interrupt polling ("status:interval") and control setup lines parse; no commands."""
    p = tmp_path / "hub.usbmon.txt"
    p.write_text("ffff88003a1c2c00 3575914555 S Ii:1:001:1 -115:2048 4 <\n"
                 "ffff88003a1c2c00 3575914560 C Ii:1:001:1 0:2048 1 = 02\n"
                 "ffff88003a1c2d00 3575914600 S Ci:1:001:0 s a3 00 0000 0001 0004 4 <\n"
                 "ffff88003a1c2d00 3575914700 C Ci:1:001:0 0 4 = 01050000\n")
    cap = parsers.parse(str(p), "usbmon")
    u = cap.frames["urbs"]
    assert u["xfer"].to_list() == [1, 1, 2, 2]
    assert u["status"].to_list() == [-115, 0, -115, 0]
    assert u["setup"][2] == bytes([0xA3, 0x00, 0x00, 0x00, 0x01, 0x00, 0x04, 0x00])
    assert core.analyze(cap).ios.height == 0


def test_pcapng_hostile(tmp_path):
    """pcapng: a cut block is TruncatedInput at its offset (lenient: a TRUNCATED anomaly);
    a block length that is not a multiple of 4 is BadInput at its offset."""
    good = tmp_path / "g.pcapng"
    gen.write_pcapng(good, gen.traffic(1))
    raw = good.read_bytes()
    pos, blocks = 0, []
    while pos < len(raw):
        blocks.append(pos)
        pos += struct.unpack_from("<I", raw, pos + 4)[0]
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(raw[:blocks[-1] + 20])
    with pytest.raises(TruncatedInput) as exc:
        parsers.parse(str(cut), "usbmon")
    assert exc.value.offset == blocks[-1]
    lenient = parsers.parse(str(cut), "usbmon", strict=False)
    assert lenient.anomalies["kind"].to_list() == ["TRUNCATED"]
    assert lenient.records.read == len(blocks) - 3   # SHB, IDB and the cut block carry no packet
    b = bytearray(raw)
    struct.pack_into("<I", b, blocks[5] + 4, 30)
    bad = tmp_path / "bad.pcapng"
    bad.write_bytes(bytes(b))
    with pytest.raises(BadInput) as exc:
        parsers.parse(str(bad), "usbmon")
    assert exc.value.offset == blocks[5] and "block length 30" in exc.value.reason


def test_text_1t_form(generated, tmp_path):
    """The older 1t text has no bus number in the address ("Bo:002:2"): same commands,
    devices on bus 0, and a note saying so."""
    lines = Path(generated[1]["text"]).read_text().splitlines()
    old = [re.sub(r" ([CZIB][io]):\d+:", r" \1:", ln) for ln in lines]
    assert old[0] != lines[0]
    p = tmp_path / "old.usbmon.txt"
    p.write_text("\n".join(old) + "\n")
    cap = parsers.parse(str(p))
    assert cap.format == "usbmon" and cap.meta["text_format"] == "1t"
    a = core.analyze(cap)
    base = analyze(generated[1]["text"]).ios
    cols = [c for c in COMPARED if c != "device"]
    assert a.ios.select(cols).equals(base.select(cols))
    assert set(a.ios["device"]) == {"0:2:0"}
    assert any("1t" in n for n in a.notes)


# ---------------------------------------------------------------- compiled passes

def _stage_columns(seed, commands):
    """Per-command stage columns of generated commands (device, command time, command, data
    gap, data, has data, has status; the frame stages.command_stages makes, null where a
    time is unknown), and the elapsed time past their last end."""
    dev = np.array(sorted(c[0] for c in commands), np.int64) if seed % 2 else np.array([c[0] for c in commands])
    cmd_s = np.cumsum([c[1] for c in commands]).astype(np.int64)
    cmd_c = cmd_s + [c[2] for c in commands]
    has_data, has_status = np.array([c[5] for c in commands]), np.array([c[6] for c in commands])
    d0 = cmd_c + [c[3] for c in commands]
    data_c = d0 + [c[4] for c in commands]
    s0 = np.where(has_data, data_c, cmd_c) + 1
    sts_c = s0 + 2
    elapsed = int(max(cmd_s.max(), np.max(np.where(has_status, sts_c, 0))) + seed)
    n = len(commands)

    def known(values, where):
        return pl.Series([int(v) if w else None for v, w in zip(values, where)], dtype=pl.Int64)

    return pl.DataFrame({"dev": dev.astype(np.int64), "io": np.arange(n, dtype=np.int64), "cmd_s": cmd_s,
                         "cmd_c": cmd_c, "d0": known(d0, has_data), "s0": s0, "data_c": known(data_c, has_data),
                         "sts_c": known(sts_c, has_status), "data_bytes": np.zeros(n, np.int64),
                         "data_in": has_data.astype(np.int64)}), elapsed


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(0, 6),
                                             st.integers(0, 6), st.integers(0, 6), st.booleans(), st.booleans()),
                                   min_size=1, max_size=40))
def test_stage_totals_equal_tiled_pieces(seed, commands):
    """The totals tiled while the pieces are listed (stages.stage_totals) equal those of
    tiling the listed pieces (tiling.tile), whenever the former reports them in order."""
    from scsitrace import tiling
    from scsitrace.usb import stages
    cols, elapsed = _stage_columns(seed, commands)
    names = [*stages.PIECE_PHASES, tiling.IDLE]
    t = stages.stage_totals(cols, names.index(tiling.IDLE), len(names), elapsed)
    totals, counts, in_order, devices = t.totals, t.counts, t.in_order, t.devices
    pieces, _ = stages.stage_pieces(cols, by_command=False)
    assert set(pieces["block"]) <= set(range(5))
    want = tiling.tile(pieces, elapsed, stages.PIECE_PHASES, segments=False)
    _, listed_in_order = stages.stage_pieces(cols, by_command=True)
    assert in_order == listed_in_order
    if in_order:
        assert tiling.tile_totals(names, totals, counts, devices) == want


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 3), st.lists(st.tuples(st.integers(0, 1), st.integers(0, 40), st.integers(0, 6),
                                             st.integers(0, 6), st.integers(0, 6), st.booleans(), st.booleans()),
                                   min_size=1, max_size=40))
def test_pieces_listed_by_command_tile_as_sorted_pieces(seed, commands):
    """When the pieces listed command by command (stages.stage_pieces) say they are in
    (device, start, block) order, tiling them as listed gives the segments and totals of
    tiling the block-by-block pieces sorted (what stages.tile relies on)."""
    from scsitrace import tiling
    from scsitrace.usb import stages
    cols, elapsed = _stage_columns(seed, commands)
    pieces, _ = stages.stage_pieces(cols, by_command=False)
    want = tiling.tile(pieces, elapsed, stages.PIECE_PHASES)
    listed, in_order = stages.stage_pieces(cols, by_command=True)
    assert listed.height == pieces.height
    if in_order:
        got = tiling.tile(listed, elapsed, stages.PIECE_PHASES)
        assert got["totals"] == want["totals"] and got["devices"] == want["devices"]
        assert got["segments"].equals(want["segments"])


def test_uas_write_data_seen_before_its_command_keeps_every_stage_non_negative():
    """UAS writes queue the data OUT URB before the command IU, and the host reports the
    data's completion first (every command of uas_seqwrite32k): no stage is negative, the
    stages of each command add up to its response time, and a note says what COMMAND holds."""
    import scsitrace
    r = scsitrace.analyze(Path(__file__).parent.parent / "fixtures/captured/uas_seqwrite32k/usbmon.txt")
    ios = r.analysis.ios
    stages = ("command_ns", "data_ns", "status_ns", "gap_ns")
    assert ios.height == 64
    assert all(ios[c].fill_null(0).min() >= 0 for c in stages)
    total = sum(ios[c].fill_null(0) for c in stages)
    assert (total == ios["response_ns"]).all()
    assert any(n.startswith("64 commands: the host saw their data complete before") for n in r.summary["notes"])
    assert all(c["percent"] >= 0 for c in r.summary["categories"])
