"""USBPcap captures (Windows; link type 249, pcap and pcapng) read into the usbmon URB table:
the same traffic written as usbmon and as USBPcap (tests/gen_usbmon.py rewrites each usbmon
packet header as USBPcap's driver writes it) gives the same commands; tshark's SRT on the
USBPcap capture equals ours and its own on the usbmon one; UAS pairs by tag over USBPcap;
bad USBPcap headers follow the error contract."""
from __future__ import annotations

import shutil
import struct

import pytest

import gen_usbmon as gen
from scsitrace import core, parsers
from scsitrace.errors import BadInput
from scsitrace.reports import summary as summ
from test_usbmon import COMPARED, _tshark_srt

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")


def analyze(path):
    return core.analyze(parsers.parse(str(path)))


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    d = tmp_path_factory.mktemp("usbpcap")
    out = {}
    for seed in (1, 2):
        ev = gen.traffic(seed)
        paths = {"usbmon": d / f"m{seed}.pcap", "pcap": d / f"w{seed}.pcap", "pcapng": d / f"w{seed}.pcapng"}
        gen.write_pcap(paths["usbmon"], ev)
        gen.write_usbpcap(paths["pcap"], ev)
        gen.write_usbpcap(paths["pcapng"], ev, pcapng=True)
        out[seed] = paths
    return out


@pytest.mark.parametrize("container", ["pcap", "pcapng"])
def test_same_commands_as_usbmon(captures, container):
    for paths in captures.values():
        assert parsers.detect(str(paths[container])) == "usbmon"
        want, got = analyze(paths["usbmon"]), analyze(paths[container])
        assert got.ios.select(COMPARED).equals(want.ios.select(COMPARED))
        assert got.capture.records.skipped == 0
        assert got.capture.meta["linktypes"] == [249] and got.capture.meta["capture"] == "USBPcap"
        # four control transfers, two with an IN data stage: their status stages are merged
        assert got.capture.meta["skipped_by_design"] == {"not transfers": 0, "control stages": 2}
        s, w = summ.summary(got), summ.summary(want)
        assert s["commands"] == w["commands"] and s["data_bytes"] == w["data_bytes"]
        assert {"STALL", "CLEAR HALT"} <= set(got.anomalies["kind"].to_list())


@needs_tshark
def test_srt_equals_tshark_on_the_usbpcap_capture(captures):
    for paths in captures.values():
        want = _tshark_srt(paths["pcap"])
        assert want, "tshark printed no SRT rows: it did not decode the USBPcap capture as mass storage"
        assert want == _tshark_srt(paths["usbmon"])
        s = summ.summary(analyze(paths["pcap"]))
        got = {r["opcode"]: (r["name"], r["calls"], f"{r['min_ns'] / 1e9:.6f}", f"{r['max_ns'] / 1e9:.6f}",
                             f"{r['avg_ns'] / 1e9:.6f}") for r in s["srt"]}
        assert got == want


def test_snap_length_cut_usbpcap(tmp_path):
    ev = gen.large_traffic()
    gen.write_pcap(tmp_path / "m.pcap", ev)
    gen.write_usbpcap(tmp_path / "w.pcap", ev, snaplen=4096)
    want, got = analyze(tmp_path / "m.pcap"), analyze(tmp_path / "w.pcap")
    assert got.ios.select(COMPARED).equals(want.ios.select(COMPARED))
    # data URBs whose 27-byte header and data pass 4096 bytes: the 1 MiB ones and the 4 KiB reads
    cut = sum(1 for e in ev if e.data and e.xfer == 3 and 27 + len(e.data) > 4096)
    assert got.capture.meta["urbs_captured_short"] == cut == 9
    assert summ.summary(got)["data_bytes"] == 6 * (1 << 20) + 3 * 4096


def _uas_events():
    """Two UAS disks on bus 3 using the same tags at once, tags reused (gen_usbmon Events:
    status and data URBs submitted ahead of the command IU, as the uas driver does)."""
    events, urb = [], 0xFFFF888000100000
    for k, (t, dev, tag, took) in enumerate([(1000, 2, 1, 900), (1005, 3, 1, 300), (1010, 2, 2, 200),
                                            (1020, 3, 2, 1500), (2000, 2, 1, 100), (2001, 3, 1, 50)]):
        cdb = bytes([0x28, 0, 0, 0, 0, 16 * k, 0, 0, 8, 0])
        iu = bytes([1, 0]) + tag.to_bytes(2, "big") + bytes(12) + cdb.ljust(16, b"\0")
        sense = bytes([3, 0]) + tag.to_bytes(2, "big") + bytes([0, 0, 0, 0]) + bytes(8)
        urb += 0x100
        events += [gen.Event(t, urb, "S", 3, 0x82, -115, 112, bus=3, dev=dev),
                   gen.Event(t + 1, urb + 1, "S", 3, 0x83, -115, 4096, bus=3, dev=dev),
                   gen.Event(t + 2, urb + 2, "S", 3, 0x01, -115, 32, iu, bus=3, dev=dev),
                   gen.Event(t + 3, urb + 2, "C", 3, 0x01, 0, 32, bus=3, dev=dev),
                   gen.Event(t + took - 10, urb + 1, "C", 3, 0x83, 0, 4096, bytes(4096), bus=3, dev=dev),
                   gen.Event(t + took, urb, "C", 3, 0x82, 0, 16, sense, bus=3, dev=dev)]
    return sorted(events, key=lambda e: e.t_us)


def test_uas_over_usbpcap_pairs_by_device_and_tag(tmp_path):
    ev = _uas_events()
    gen.write_pcap(tmp_path / "m.pcap", ev)
    gen.write_usbpcap(tmp_path / "w.pcapng", ev, pcapng=True)
    want, got = analyze(tmp_path / "m.pcap"), analyze(tmp_path / "w.pcapng")
    assert got.ios.height == 6 and got.ios["paired"].all()
    assert set(got.ios["transport"].to_list()) == {"UAS"}
    assert got.ios.select(COMPARED).equals(want.ios.select(COMPARED))
    assert sorted(got.ios["response_ns"].to_list()) == sorted(1000 * (took - 2) for took in (900, 300, 200, 1500, 100, 50))


@pytest.mark.parametrize("field_at,fmt,value,why", [
    (0, "<H", 5, "headerLen"), (22, "<B", 7, "transfer type"), (23, "<I", 0x7FFFFFFF, "dataLength"),
    (19, "<H", 300, "device address")])
def test_bad_usbpcap_headers(tmp_path, field_at, fmt, value, why):
    ev = gen.traffic(1)
    p = tmp_path / "bad.pcap"
    gen.write_usbpcap(p, ev)
    raw = bytearray(p.read_bytes())
    at = gen._record_offsets(bytes(raw))[5]
    struct.pack_into(fmt, raw, at + 16 + field_at, value)
    p.write_bytes(bytes(raw))
    with pytest.raises(BadInput, match=why) as exc:
        parsers.parse(str(p))
    assert exc.value.offset == at
    cap = parsers.parse(str(p), strict=False)
    assert cap.records.skipped == 1 and cap.records.read == len(gen.usbpcap_packets(ev)) - 1


CAPTURED = sorted((gen.__file__ and __import__("pathlib").Path(gen.__file__).resolve().parents[1] / "fixtures" / "captured")
                  .glob("*/usbmon.txt"))


@pytest.mark.parametrize("text", CAPTURED, ids=lambda p: p.parent.name)
def test_real_usbmon_captures_rewritten_as_usbpcap(tmp_path, text):
    """The committed real usbmon captures (QEMU's usb-storage and uas disks; text, 32 data
    bytes a URB) written again as usbmon pcap and as USBPcap: the same commands as the text,
    and tshark's SRT of the two equal."""
    ev = gen.events_from_urbs(parsers.parse(str(text)).frames["urbs"])
    gen.write_pcap(tmp_path / "m.pcap", ev)
    gen.write_usbpcap(tmp_path / "w.pcapng", ev, pcapng=True)
    want, got = analyze(text), analyze(tmp_path / "w.pcapng")
    cols = [c for c in COMPARED if c in want.ios.columns]
    assert got.ios.select(cols).equals(want.ios.select(cols))
    assert got.ios.height >= 10 and got.ios["paired"].sum() >= 10
    if shutil.which("tshark"):
        assert _tshark_srt(tmp_path / "w.pcapng") == _tshark_srt(tmp_path / "m.pcap")


def test_pyshark_route_refuses_usbpcap(captures):
    from scsitrace.errors import UsageError
    with pytest.raises(UsageError, match="USBPcap"):
        parsers.parse(str(captures[1]["pcap"]), "usbmon", route="pyshark")
