"""usbmon URBs captured short (`len_cap` < the URB's length): records cut by the capture's
snap length, usbmon's per-event limit (a 1 MiB URB with 61,440 bytes captured): bytes and
rates from the URB length, a note counting them; UAS tags reused across devices and over
time paired right. Captures written by tests/gen_usbmon.py."""
from __future__ import annotations

import shutil
import subprocess

import pytest

import gen_usbmon as gen
from scsitrace import core, parsers
from scsitrace.reports import summary as summ

COMPARED = ["io", "device", "opcode", "command", "lba", "blocks", "bytes", "data_bytes", "start_ns", "end_ns",
            "status", "usb_tag", "residue", "response_ns", "paired", "reason"]
MON_BIN_LIMIT = 61_440       # usbmon's per-event data limit with its default 300 KiB buffer (a fifth)


def analyze(path):
    return core.analyze(parsers.parse(str(path), "usbmon"))


def short_urbs(events, captured) -> int:
    """URBs whose data (OUT submit, IN completion) is captured short: `captured(event)` is
    the number of data bytes the capture holds of it. Counted from the generator's events."""
    return sum(1 for e in events if e.data and e.xfer != 0 and 0 < captured(e) < e.length
               and ((e.ev == "S") == (not e.ep & 0x80)))


def short_note(a) -> list[str]:
    return [n for n in a.notes if "captured short" in n]


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    d = tmp_path_factory.mktemp("short")
    ev = gen.large_traffic()
    full = d / "full.pcap"
    gen.write_pcap(full, ev)
    return d, ev, analyze(full)


@pytest.mark.parametrize("writer", ["pcap", "pcapng"])
@pytest.mark.parametrize("snaplen", [65_536, 4_096, 200])
def test_records_cut_by_the_snap_length(large, writer, snaplen):
    """Cut records are good records: the same commands, bytes and times as the whole capture;
    the URBs cut are counted in a note."""
    d, ev, whole = large
    p = d / f"snap{snaplen}.{writer}"
    getattr(gen, f"write_{writer}")(p, ev, snaplen=snaplen)
    a = analyze(p)
    assert a.capture.records.skipped == 0 and a.capture.records.read == len(ev)
    assert a.ios.select(COMPARED).equals(whole.ios.select(COMPARED))
    s, w = summ.summary(a), summ.summary(whole)
    assert s["data_bytes"] == w["data_bytes"] == 6 * (1 << 20) + 3 * 4096
    assert s["bandwidth_mib_s"] == w["bandwidth_mib_s"]
    n = short_urbs(ev, lambda e: min(len(e.data), snaplen - 64))
    assert n >= 6
    assert short_note(a) == [f"{n} URBs {parsers.usbmon.SHORT_NOTE}"]
    assert not short_note(whole)


def test_a_mebibyte_urb_with_61440_bytes_captured(tmp_path, large):
    """usbmon's own limit: len_cap 61,440 of a 1 MiB URB, the record whole."""
    _, _, whole = large
    ev = gen.large_traffic(big_cap=MON_BIN_LIMIT)
    p = tmp_path / "monbin.pcap"
    gen.write_pcap(p, ev)
    a = analyze(p)
    assert a.ios.select(COMPARED).equals(whole.ios.select(COMPARED))
    big = a.ios.filter(a.ios["blocks"] == 2048)
    assert big.height == 6 and big["data_bytes"].to_list() == [1 << 20] * 6
    assert summ.summary(a)["data_bytes"] == summ.summary(whole)["data_bytes"]
    assert short_note(a) == [f"6 URBs {parsers.usbmon.SHORT_NOTE}"]
    assert a.capture.meta["urbs_captured_short"] == short_urbs(ev, lambda e: len(e.data)) == 6


def test_a_cut_record_whose_len_cap_exceeds_its_original_length_is_still_bad(tmp_path):
    """The snap-length rule reads the record's original length: a len_cap past it is damage."""
    ev = gen.traffic(1)
    p = tmp_path / "bad.pcap"
    gen.write_pcap(p, ev, snaplen=80)
    raw = bytearray(p.read_bytes())
    at = 24                                   # the first record (a control submit: no data)
    raw[at + 16 + 36:at + 16 + 40] = (10_000).to_bytes(4, "little")   # len_cap past orig_len
    p.write_bytes(bytes(raw))
    from scsitrace.errors import BadInput
    with pytest.raises(BadInput, match="len_cap"):
        parsers.parse(str(p), "usbmon")


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark not installed")
def test_snap_cut_srt_equals_tshark(large):
    from test_usbmon import _tshark_srt
    d, ev, _ = large
    p = d / "tshark-snap.pcap"
    gen.write_pcap(p, ev, snaplen=65_536)
    want = _tshark_srt(p)
    assert want
    s = summ.summary(analyze(p))
    got = {r["opcode"]: (r["name"], r["calls"], f"{r['min_ns'] / 1e9:.6f}", f"{r['max_ns'] / 1e9:.6f}",
                         f"{r['avg_ns'] / 1e9:.6f}") for r in s["srt"]}
    assert got == want


# ---------------------------------------------------------------- UAS tags reused

def _line(urb, t_us, ev, dev, pipe, status, length, data=None):
    d = "i" if pipe in (2, 3) else "o"
    head = f"{urb:016x} {t_us} {ev} B{d}:3:{dev:03d}:{pipe} {status} {length}"
    if data:
        return head + " = " + " ".join(data[i:i + 4].hex() for i in range(0, len(data), 4))
    return head + (" <" if ev == "S" else " >")


def _command_iu(tag, cdb):
    return bytes([1, 0]) + tag.to_bytes(2, "big") + bytes(4) + bytes(8) + cdb.ljust(16, b"\0")


def _sense_iu(tag, status):
    return bytes([3, 0]) + tag.to_bytes(2, "big") + bytes([0, 0, status, 0]) + bytes(8)


def _uas_command(lines, urb, t, dev, tag, lba, took, status=0):
    """Status and data URBs submitted ahead, the command IU, data, then the status IU."""
    cdb = bytes([0x28, 0, 0, 0, lba >> 8, lba & 255, 0, 0, 8, 0])
    lines += [(t, _line(urb, t, "S", dev, 2, -115, 112)), (t + 1, _line(urb + 1, t + 1, "S", dev, 3, -115, 4096)),
              (t + 2, _line(urb + 2, t + 2, "S", dev, 1, -115, 32, _command_iu(tag, cdb))),
              (t + 3, _line(urb + 2, t + 3, "C", dev, 1, 0, 32)),
              (t + took - 10, _line(urb + 1, t + took - 10, "C", dev, 3, 0, 4096, bytes(32))),
              (t + took, _line(urb, t + took, "C", dev, 2, 0, 16, _sense_iu(tag, status)))]
    return (dev, tag, lba, took - 2, status)


def test_uas_tags_reused_across_devices_and_over_time(tmp_path):
    """Two UAS disks use the same tags at the same time, and reuse them once a command has
    ended: each command pairs with its own device's status IU of its tag."""
    lines, want, urb = [], [], 0x1000
    for k, (t, dev, tag, took) in enumerate([(1000, 2, 1, 900), (1005, 3, 1, 300), (1010, 2, 2, 200),
                                            (1020, 3, 2, 1500), (2000, 2, 1, 100), (2001, 3, 1, 50),
                                            (2500, 3, 1, 70), (2600, 2, 2, 40)]):
        want.append(_uas_command(lines, urb, t, dev, tag, 16 * k, took, status=2 * (k % 3 == 2)))
        urb += 0x10
    p = tmp_path / "uas2.usbmon.txt"
    p.write_text("\n".join(line for _, line in sorted(lines, key=lambda x: x[0])) + "\n")
    a = core.analyze(parsers.parse(str(p)))
    ios = a.ios.sort("lba")
    assert ios["paired"].all() and ios.height == len(want)
    got = list(zip(ios["device"].to_list(), ios["usb_tag"].to_list(), ios["lba"].to_list(),
                   ios["response_ns"].to_list(), ios["status"].to_list()))
    devices = sorted(set(ios["device"].to_list()))
    assert len(devices) == 2
    by_dev = {2: devices[0], 3: devices[1]}
    assert got == [(by_dev[dev], tag, lba, took * 1000, "CHECK CONDITION" if st else "GOOD")
                   for dev, tag, lba, took, st in sorted(want, key=lambda w: w[2])]
