"""pcapng and usbmon text read as streams: pcapng blocks walked in bounded reads (any read
size, blocks cut by every read edge, sections restarting the interface table) and text a
block of lines at a time (any block size, the 4096 s wrap of the text timestamp across
blocks, 1t without bus numbers) give the URB table, records, anomalies and analysis of one
read of the whole file, through the streamed Bulk-Only machine (`stream_bytes=0`) as
well; bad input at any batch edge raises the same one-line error (same byte offset or
line) in strict mode and is counted alike in lenient mode."""
from __future__ import annotations

import re
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import gen_usbmon as gen
from scsitrace import core
from scsitrace.errors import BadInput
from scsitrace.parsers import usbmon
from test_usbmon_chunks import _same_analysis, _tables_equal, by_passes

SLOW = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
TEXT = settings(SLOW, max_examples=10)      # a text example reads its file block by block 4-6 times


def _blocks(raw: bytes) -> list[int]:
    pos, out = 0, []
    while pos + 8 <= len(raw):
        out.append(pos)
        pos += struct.unpack_from("<I", raw, pos + 4)[0]
    return out


def _outcome(parse, strict: bool):
    """(columns, records, anomalies, meta) of a capture, or the error it raises."""
    try:
        cap = parse(strict)
        frame = cap.frames["urbs"]
        return (frame, cap.records.as_json(), cap.anomalies.to_dicts(),
                {k: v for k, v in cap.meta.items() if k != "streamable"})
    except BadInput as exc:
        return type(exc).__name__, str(exc), exc.offset, exc.line


def _same(a, b) -> None:
    if isinstance(a[0], str) or isinstance(b[0], str):
        assert a == b
        return
    _tables_equal(a[0], b[0])
    assert a[1:] == b[1:]


# ---------------------------------------------------------------- pcapng

@SLOW
@given(st.integers(1, 50), st.integers(1, 5), st.integers(1, 3000), st.sampled_from([0, 1, 2, 3]),
       st.booleans())
def test_pcapng_any_read_size_gives_the_whole_read(tmp_path, n_commands, seed, read_bytes, cut, two_sections):
    """Bulk-Only traffic (and mixed traffic: enumeration, stalls) in a pcapng file, possibly of
    two sections (the second restarts the interface table), possibly cut anywhere: read in
    blocks of `read_bytes`, streamed through the analysis, equal to one read of it."""
    path = tmp_path / f"b{seed}.pcapng"
    gen.write_pcapng(path, gen.bulk_traffic(n_commands, seed=seed, data_cap=64))
    raw = path.read_bytes()
    if two_sections:
        gen.write_pcapng(path, gen.bulk_traffic(n_commands, seed=seed + 1, data_cap=64))
        raw += path.read_bytes()
    if cut:
        raw = raw[:len(raw) * cut // 4]
    path.write_bytes(raw)
    whole = usbmon._parse_pcap(str(path), strict=False)
    small = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes)
    _same(_outcome(lambda s: usbmon._parse_pcap(str(path), s), False),
          _outcome(lambda s: usbmon._parse_pcap(str(path), s, read_bytes=read_bytes), False))
    assert whole.records.read == sum(1 for _ in small.frames["urbs"].iter_rows())
    streamed = usbmon._parse_pcap(str(path), strict=False, read_bytes=read_bytes, stream_bytes=0)
    assert streamed.meta.get("streamable")
    b = core.analyze(streamed)
    if not two_sections:                       # one section: times only go forward, never read whole
        assert "urbs" not in dict.keys(streamed.columns)
    _same_analysis(by_passes(whole), b)
    assert whole.records.as_json() == streamed.records.as_json()
    assert whole.anomalies.equals(streamed.anomalies)
    mixed = tmp_path / "mixed.pcapng"
    gen.write_pcapng(mixed, gen.traffic(seed))
    _same_analysis(by_passes(usbmon._parse_pcap(str(mixed), strict=False)),
                   core.analyze(usbmon._parse_pcap(str(mixed), strict=False, read_bytes=read_bytes,
                                                   stream_bytes=0)))


def _damage_pcapng(raw: bytes, kind: int, k: int) -> bytes:
    b = bytearray(raw)
    blocks = _blocks(raw)
    at = blocks[2 + k % (len(blocks) - 2)]        # an enhanced packet block
    if kind == 0:
        struct.pack_into("<I", b, at + 4, 30)                  # block length not a multiple of 4
    elif kind == 1:
        b[at + 28 + 8] = ord("X")                              # usbmon event type
    elif kind == 2:
        struct.pack_into("<I", b, at + 8, 3)                   # unknown interface
    elif kind == 3:
        b[at + 28 + 9] = 7                                     # usbmon transfer type
    else:
        del b[at + 20:]                                        # cut inside the block
    return bytes(b)


@SLOW
@given(st.integers(1, 3), st.integers(0, 4), st.integers(0, 200), st.integers(1, 2000), st.booleans())
def test_pcapng_bad_block_at_any_read_edge(tmp_path, seed, kind, k, read_bytes, second):
    """A bad block or record anywhere (one, or two of different kinds): strict mode raises
    the same error at the same byte offset whatever the read size; lenient mode skips and
    counts alike."""
    path = tmp_path / "bad.pcapng"
    gen.write_pcapng(path, gen.traffic(seed))
    raw = _damage_pcapng(path.read_bytes(), kind, k)
    if second and kind != 4:
        raw = _damage_pcapng(raw, (kind + 1) % 4, k + 17)
    path.write_bytes(raw)
    for strict in (True, False):
        _same(_outcome(lambda s: usbmon._parse_pcap(str(path), s), strict),
              _outcome(lambda s: usbmon._parse_pcap(str(path), s, read_bytes=read_bytes), strict))
    with pytest.raises(BadInput) as exc:
        usbmon._parse_pcap(str(path), True, read_bytes=read_bytes)
    assert exc.value.offset is not None and "\n" not in str(exc.value)


# ---------------------------------------------------------------- text

def _wrapped(lines: list[str], shift_us: int) -> list[str]:
    """The lines with their timestamps moved by `shift_us`, modulo 4096 s (the text wrap)."""
    def move(m):
        return f"{m.group(1)} {(int(m.group(2)) + shift_us) % usbmon.TEXT_TS_WRAP_US}"
    return [re.sub(r"^(\S+) (\d+)", move, ln) for ln in lines]


@TEXT
@given(st.integers(1, 50), st.integers(1, 5), st.integers(150, 3000), st.booleans(), st.booleans(), st.booleans())
def test_text_any_block_size_gives_the_whole_read(tmp_path, n_commands, seed, block_bytes, wrap, old, mixed):
    """usbmon text (1u, or 1t without bus numbers; its timestamps wrapping past 4096 s
    mid-file or not) read a block of lines at a time and streamed through the analysis: the
    frame, records, notes and tables of one read of the whole file."""
    events = gen.traffic(seed) if mixed else gen.bulk_traffic(n_commands, seed=seed, data_cap=32)
    lines = [gen.text_line(e) for e in events]
    if wrap:
        first = int(lines[0].split()[1])
        lines = _wrapped(lines, usbmon.TEXT_TS_WRAP_US - first - events[len(events) // 2].t_us)
    if old:
        lines = [re.sub(r" ([CZIB][io]):\d+:", r" \1:", ln) for ln in lines]
    path = tmp_path / "t.usbmon.txt"
    path.write_text("\n".join(lines) + "\n")
    whole = usbmon._parse_text(str(path), True, None)
    _same(_outcome(lambda s: usbmon._parse_text(str(path), s, None), True),
          _outcome(lambda s: usbmon._parse_text(str(path), s, None, block_bytes=block_bytes), True))
    assert whole.meta["text_format"] == ("1t" if old else "1u")
    streamed = usbmon._parse_text(str(path), True, None, block_bytes=block_bytes, stream_bytes=0)
    assert streamed.meta.get("streamable")
    b = core.analyze(streamed)
    assert "urbs" not in dict.keys(streamed.frames)       # the streamed machine read it: never whole
    _same_analysis(by_passes(whole), b)
    assert whole.records.as_json() == streamed.records.as_json()
    assert {k: v for k, v in streamed.meta.items() if k != "streamable"} == whole.meta
    if wrap:
        assert np.all(np.diff(whole.frames["urbs"]["t_ns"].to_numpy()) >= 0)


@TEXT
@given(st.integers(1, 3), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, len(gen.HOSTILE_TEXT) - 1)),
                                   min_size=1, max_size=3), st.integers(150, 2000))
def test_text_bad_line_at_any_block_edge(tmp_path, seed, bad, block_bytes):
    """Bad lines anywhere: strict mode names the same (first) line whatever the block size
    (one line, `file:line: what`), streamed or not; lenient mode skips and counts alike."""
    lines = [gen.text_line(e) for e in gen.traffic(seed)]
    for at, k in bad:
        lines.insert(at % (len(lines) + 1), gen.HOSTILE_TEXT[k])
    path = tmp_path / "bad.usbmon.txt"
    path.write_text("\n".join(lines) + "\n")
    first = min(i for i, ln in enumerate(lines) if ln in gen.HOSTILE_TEXT) + 1
    for strict in (True, False):
        _same(_outcome(lambda s: usbmon._parse_text(str(path), s, None), strict),
              _outcome(lambda s: usbmon._parse_text(str(path), s, None, block_bytes=block_bytes), strict))
    with pytest.raises(BadInput) as exc:
        core.analyze(usbmon._parse_text(str(path), True, None, block_bytes=block_bytes, stream_bytes=0))
    assert exc.value.line == first and "\n" not in str(exc.value)
    lenient = usbmon._parse_text(str(path), False, None, block_bytes=block_bytes, stream_bytes=0)
    a = core.analyze(lenient)
    assert lenient.records.skipped == len(bad)
    _same_analysis(core.analyze(usbmon._parse_text(str(path), False, None)), a)
