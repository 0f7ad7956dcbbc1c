"""The streamed Bulk-Only path's command stage (native/src/usb/commands.rs, fed by the
machine in scsitrace/usb/streamed.py): its tables, stage tiling and kept rows do not depend
on how the URBs are split into batches (down to one record per batch), and equal the whole
capture's analysis, also with several devices and LUNs whose commands interleave, stalls,
phase errors, failed and unpaired commands, and captures cut anywhere."""
from __future__ import annotations

import random

import numpy as np
import polars as pl
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from test_usbmon_chunks import _same_analysis, by_passes
from scsitrace import core, model
from scsitrace._native import usb as _usb
from scsitrace.parsers import usbmon
from scsitrace.stats import stat_row
from scsitrace.usb import streamed


def _session(seed: int, n: int, bus: int, dev: int, start_us: int, urb_base: int, luns: int) -> list[gen.Event]:
    """One device's enumeration and `n` commands on `luns` LUNs, some of them odd: a stall in
    the data stage, a CSW with a phase error or a failure, a CSW with another tag."""
    s = gen.Session(rng=random.Random(seed), t_us=start_us, next_urb=urb_base)
    gen.enumerate_device(s)
    for i in range(n):
        kind = s.rng.randrange(8)
        lun = s.rng.randrange(luns)
        if kind == 0:
            gen.command(s, gen.read10(i, 8), 4096, True, stall=True, lun=lun)
        elif kind == 1:
            gen.command(s, gen.write10(i, 8), 4096, False, csw_status=s.rng.choice([1, 2]), lun=lun, data_cap=32)
        elif kind == 2:
            gen.command(s, bytes(6), 0, True, lun=lun)                          # TEST UNIT READY
        elif kind == 3:
            gen.command(s, gen.read16(i, 16), 8192, True, lun=lun, data_cap=16)
            s.events[-1].data = gen.csw(s.tag + 100, 0, 0)                     # the CSW's tag differs
        else:
            gen.command(s, (gen.read10 if i % 2 else gen.write10)(i * 8, 8), 4096, bool(i % 2), lun=lun, data_cap=32)
    for e in s.events:
        e.bus, e.dev = bus, dev
    return s.events


def multi_device(seed: int, n: int, devices: int, luns: int = 2) -> list[gen.Event]:
    """The events of `devices` sessions, interleaved in time (ties: session order)."""
    rng = random.Random(seed)
    events = []
    for k in range(devices):
        events += _session(seed * 10 + k, n, 1 + k // 2, 2 + k, rng.randrange(0, 3000), 0xFFFF888000001000 + (k << 32),
                           luns)
    return sorted(events, key=lambda e: e.t_us)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 40), st.integers(1, 50), st.integers(1, 3), st.integers(64, 4096), st.sampled_from([0, 1, 3]))
def test_streamed_equals_whole_with_interleaved_devices(tmp_path, n, seed, devices, read_bytes, cut):
    """Several devices and LUNs, odd commands, any read size, the capture cut anywhere: the
    streamed analysis equals the whole one (segments too), and the I/O sink gets its rows."""
    path = tmp_path / f"m{seed}.pcap"
    gen.write_pcap(path, multi_device(seed, n, devices))
    if cut:
        raw = path.read_bytes()
        path.write_bytes(raw[:24 + (len(raw) - 24) * cut // 4])
    whole = by_passes(usbmon._parse_pcap(str(path), strict=False))
    streamed = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes, stream_bytes=0)
    got = []
    b = core.analyze(streamed, core.Options(ios_sink=lambda frame, cap: got.append(frame)))
    assert b.ios_streamed or cut, "an uncut capture of these devices is streamed"
    if not b.ios_streamed:          # the machine does not cover it (e.g. cut before a CBW's submit)
        return
    _same_analysis(whole, b)
    assert (pl.concat(got) if got else whole.ios.clear()).equals(whole.ios)


def _columns(path) -> object:
    return usbmon._parse_pcap(str(path), strict=False).frames["urbs"]


def _fed(urbs, cuts: list[int], keep: int) -> tuple:
    """The machine fed the URBs split at `cuts`: (finish, results, kept rows, segments)."""
    m = _usb.BotStream(keep, False)
    edges = [0, *sorted(set(cuts)), urbs.height]
    for lo, hi in zip(edges, edges[1:]):
        assert m.feed(urbs[lo:hi])
        assert m.take() is None       # no rows handed back without a sink
    found = m.finish()
    return found, m.results(), m.kept(), m.segments()


def _plain(x):
    """A result of the machine (its pyclasses, Columns, Samples, arrays) as plain values."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    if type(x).__name__ == "Columns":
        return pl.DataFrame(x).to_dict(as_series=False)
    if type(x).__name__ == "Samples":
        return (stat_row(x.record()), x.record().exact, x.histogram())
    return {k: _plain(getattr(x, k)) for k in dir(x) if not k.startswith("_") and not callable(getattr(x, k))}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(1, 30), st.integers(1, 50), st.integers(1, 3), st.integers(1, 2), st.integers(1, 12), st.data())
def test_any_batch_split_gives_the_stage_of_one_batch(tmp_path, n, seed, devices, luns, keep, data):
    """Fed in any batches (down to one URB each), the command stage's tables, tiling totals,
    kept commands (every 2^k-th, at most `keep`) and, for one device, kept segments equal
    those of one batch."""
    path = tmp_path / f"s{seed}.pcap"
    gen.write_pcap(path, multi_device(seed, n, devices, luns))
    urbs = _columns(path)
    cuts = data.draw(st.one_of(st.just(list(range(1, len(urbs)))),
                               st.lists(st.integers(1, max(1, len(urbs) - 1)), max_size=20)))
    one, split = [_plain(x) for x in _fed(urbs, [], keep)], [_plain(x) for x in _fed(urbs, cuts, keep)]
    assert one[0] == split[0] and one[2] == split[2]      # finish (control requests, counts); kept rows
    assert len(one[2]["commands"]["io"]) <= keep and len(one[3]["segments"]["start"]) <= keep
    strides = one[1].pop("segment_stride"), split[1].pop("segment_stride")
    assert one[1] == split[1]                             # tables, Samples, totals, strides of the rows
    if devices == 1 and luns == 1:
        assert strides[0] == strides[1] and one[3] == split[3]
    elif strides == (1, 1):     # several devices: segments arrive device by device within a batch
        rows = [sorted(zip(*(p[3]["segments"][k] for k in ("dev", "start", "end", "phase", "io", "bytes"))),
                       key=repr) for p in (one, split)]
        assert rows[0] == rows[1]


def test_thinned_rows_and_segments_match_keep_ios(tmp_path):
    """With KEEP_IOS small, the analysis keeps every 2^k-th command (by io) and segment, says so,
    and its tables and stage percentages stay the whole capture's (the kept rows built in
    slices: the same frame)."""
    path = tmp_path / "t.pcap"
    gen.write_pcap(path, multi_device(3, 40, 1, luns=1))
    whole = by_passes(usbmon._parse_pcap(str(path), strict=False))
    saved, model.KEEP_IOS = model.KEEP_IOS, 16
    saved_slice, streamed.KEPT_SLICE = streamed.KEPT_SLICE, 5    # the kept rows built 5 at a time
    try:
        thin = core.analyze(usbmon._parse_pcap(str(path), strict=False, stream_bytes=0))
        assert thin.ios.height > 5
    finally:
        model.KEEP_IOS, streamed.KEPT_SLICE = saved, saved_slice
    stride = 1
    while whole.ios.filter(pl.col("io") % stride == 0).height > 16:
        stride *= 2
    assert thin.ios.equals(whole.ios.filter(pl.col("io") % stride == 0))
    seg = whole.segments() if callable(whole.segments) else whole.segments
    s = 1
    while (seg.height + s - 1) // s > 16:
        s *= 2
    # one device: segments arrive in time order, so the kept ones are every s-th of the whole tiling
    assert thin.segments.equals(seg.sort("device", "start_ns").gather_every(s))
    assert any(n.startswith(f"segments: every {s}th kept") for n in thin.notes)
    for name in whole.tables:          # the views too: built from every completed I/O (bandwidth.Collected)
        assert whole.table(name).equals(thin.table(name)), name
    assert whole.categories["usb"].equals(thin.categories["usb"])
