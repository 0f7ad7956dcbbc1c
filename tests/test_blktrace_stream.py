"""The streaming blktrace reader: the chunks, concatenated, equal the whole trace read at once
and an independent record-by-record reference (struct, below), for any chunk size (down to
one record) and read size (records cut by every read edge), per-CPU files interleaved in
time, piped streams (sorted whole), both byte orders, and damaged files (lenient: the same
skips, anomalies and counts whatever the sizes; strict: the same error)."""
from __future__ import annotations

import os
import re
import struct
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402

from scsitrace.block import events as block  # noqa: E402
from scsitrace.errors import BadInput  # noqa: E402
from scsitrace.parsers import blktrace as bt  # noqa: E402

SLOW = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


def reference(paths: list[str]) -> dict[str, np.ndarray]:
    """MACHINE_COLUMNS of clean files, one record at a time: the chain by pdu_len, data records
    only (version 7, no notify bit), ordered by (time, file, place in the file)."""
    rows = []
    for fi, path in enumerate(paths):
        data = open(path, "rb").read()
        order = "<" if struct.unpack_from("<I", data, 0)[0] & 0xFFFFFF00 == bt.MAGIC else ">"
        pos = 0
        while pos + 48 <= len(data):
            magic, _seq, t, sector, nbytes, action, pid, dev, _cpu, err, pdu_len = struct.unpack_from(
                order + "IIQQIIIIIhH", data, pos)
            if magic & 0xFF == bt.VERSION and not action & block.TC_NOTIFY:
                pdu = data[pos + 48:pos + 48 + pdu_len]
                remap = action & 0xFFFF == block.TA["A"] and pdu_len >= 16
                pdu_dev, pdu_sector = struct.unpack_from(">IxxxxQ", pdu) if remap else (0, 0)
                rows.append((t, fi, pos, action, dev, sector, nbytes, pid, pdu_dev, pdu_sector, err))
            pos += 48 + pdu_len
    rows.sort(key=lambda r: r[:3])
    origin = rows[0][0] if rows else 0
    names = ("t_ns", "action", "device", "sector", "bytes", "pid", "pdu_dev", "pdu_sector", "error")
    cols = [np.array([r[0] - origin for r in rows], np.int64)] + [
        np.array([r[k] for r in rows], block.MACHINE_COLUMNS[name]) for k, name in zip(range(3, 11), names[1:])]
    return dict(zip(names, cols))


def streamed(path: str, chunk: int, read_size: int, strict: bool = True):
    cap = bt.parse(path, chunk=chunk, read_size=read_size, eager=False, strict=strict)
    parts = list(cap.chunks())
    assert all(0 < len(p["t_ns"]) <= chunk for p in parts)
    cols = {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, dtype)
            for name, dtype in block.MACHINE_COLUMNS.items()}
    return cap, cols


def assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


def summary(cap) -> tuple:
    return (cap.records.as_json(), cap.notes, cap.anomalies.to_dicts(), cap.meta.get("sequence_gaps"),
            cap.meta.get("origin_ns"), cap.frames["processes"].to_dicts(), cap.meta.get("messages"))


@SLOW
@given(n_ios=st.integers(1, 60), seed=st.integers(0, 10**6), layout=st.sampled_from(["per-cpu", "pipe", "dump"]),
       order=st.sampled_from(["<", ">"]), chunk=st.integers(1, 40), read_size=st.integers(1, 400))
def test_chunks_equal_the_whole_trace_and_the_reference(tmp_path_factory, n_ios, seed, layout, order, chunk,
                                                        read_size):
    d = tmp_path_factory.mktemp("s")
    order = "<" if layout == "pipe" else order      # gen's piped stream writes its notify records little-endian
    ev = gen.workload(n_ios, seed=seed)
    ev["cpu"] = np.random.default_rng(seed).integers(0, 3, len(ev["time"]))     # CPUs interleaved in time
    paths = gen.write(ev, str(d / "t"), layout=layout, order=order)
    whole = bt.parse(paths[0], eager=True)
    cap, cols = streamed(paths[0], chunk, read_size)
    assert_same(cols, whole.columns["events"])
    assert_same(cols, reference(paths if layout == "per-cpu" else paths[:1]))
    assert summary(cap) == summary(whole)
    assert cap.records.read == len(ev["time"]) + len(gen.PIDS)
    raw = bt.parse(paths[0], chunk=chunk, read_size=read_size, eager=False).frames["events"]
    assert raw.equals(whole.frames["events"])


def _damaged(data: bytes, rng: np.random.Generator) -> bytes:
    b = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        kind = rng.integers(0, 3)
        at = int(rng.integers(0, len(b)))
        if kind == 0:
            b[at] ^= 1 << int(rng.integers(0, 8))
        elif kind == 1:
            b[at:at] = bytes(rng.integers(0, 256, int(rng.integers(1, 30)), dtype=np.uint8))
        else:
            del b[at:at + int(rng.integers(1, 60))]
    return bytes(b)


@SLOW
@given(seed=st.integers(0, 10**6), chunk=st.integers(1, 30), read_size=st.integers(1, 300))
def test_damaged_files_read_alike_at_any_size(tmp_path_factory, seed, chunk, read_size):
    """Bit flips, junk and cuts in per-CPU files: the same records, skips, anomalies and notes
    (lenient), and the same error (strict), whatever the chunk and read sizes."""
    d = tmp_path_factory.mktemp("h")
    rng = np.random.default_rng(seed)
    ev = gen.workload(25, seed=seed)
    paths = gen.write(ev, str(d / "t"))
    for p in paths:
        with open(p, "rb") as fh:
            data = fh.read()
        with open(p, "wb") as fh:
            fh.write(_damaged(data, rng))
    outcomes = []
    for c, r in ((chunk, read_size), (1 << 20, 1 << 22)):
        try:
            cap, cols = streamed(paths[0], c, r, strict=False)
            outcomes.append((cols, summary(cap)))
        except BadInput as exc:          # e.g. a flip in the very first magic of the only file
            outcomes.append(str(exc))
        try:
            streamed(paths[0], c, r, strict=True)
            outcomes.append("ok")
        except BadInput as exc:
            outcomes.append((type(exc).__name__, str(exc)))
    a_lenient, a_strict, b_lenient, b_strict = outcomes
    assert a_strict == b_strict
    if isinstance(a_lenient, tuple):
        assert_same(a_lenient[0], b_lenient[0])
        assert a_lenient[1] == b_lenient[1]
    else:
        assert a_lenient == b_lenient


def test_strict_error_is_the_first_of_the_first_file_that_has_one(tmp_path):
    """Two defects: a bad time early and a bad magic late in file 0, a truncation in file 1:
    the one-shot precedence names file 0's bad magic (whatever is streamed first)."""
    ev = gen.workload(50, seed=3)
    paths = gen.write(ev, str(tmp_path / "t"))
    b = bytearray(open(paths[0], "rb").read())
    offs, pos = [], 0
    while pos + 48 <= len(b):
        offs.append(pos)
        pos += 48 + struct.unpack_from("<H", b, pos + 46)[0]
    struct.pack_into("<Q", b, offs[len(gen.PIDS) + 1] + 8, (1 << 63) + 5)
    b[offs[-3] + 2] ^= 0x10                                       # a magic byte (byte 0 is the version)
    open(paths[0], "wb").write(bytes(b))
    open(paths[1], "ab").write(b"\x07tae" + bytes(10))
    with pytest.raises(BadInput, match="bad magic") as exc:
        list(bt.parse(paths[0], eager=False, chunk=1).chunks())
    assert exc.value.offset == offs[-3] and str(exc.value).startswith(paths[0])
    lenient = bt.parse(paths[0], strict=False)
    assert lenient.records.skipped == 3
    assert [a["kind"] for a in lenient.anomalies.to_dicts()] == ["BAD RECORD", "BAD RECORD", "TRUNCATED RECORD"]


def test_late_disorder_is_merged_as_read_and_stated(tmp_path):
    """A per-CPU file whose times go back after the records merged ahead (`probe`): merged as
    read, with a note; among them: the capture is sorted. (A single file is read `window`
    records at a time, the probe covering at least one window: a window as small as a chunk.)"""
    ev = gen.workload(40, seed=9)
    ev["cpu"][:] = 0
    n = len(ev["time"])
    ev["time"][n - 5:] = 2000 + np.arange(5)
    path = gen.write(ev, str(tmp_path / "t"))[0]
    cap = bt.parse(path, chunk=7, probe=20, window=7, eager=False)
    cols = np.concatenate([p["t_ns"] for p in cap.chunks()])
    assert len(cols) == n and not np.all(np.diff(cols) >= 0)
    assert any("merged as read" in note for note in cap.notes)
    sorted_cap, sorted_cols = streamed(path, 7, 1 << 20)          # probe 1 M: sorted
    assert np.all(np.diff(sorted_cols["t_ns"]) >= 0) and not any("merged as read" in x for x in sorted_cap.notes)


# ---------------------------------------------------------------- blkparse text

from scsitrace.parsers import blkparse  # noqa: E402

BLKPARSE = sorted(str(p) for p in (Path(__file__).parent.parent / "fixtures" / "captured").rglob("ref.blkparse.txt"))


def _text_columns(cap) -> dict:
    parts = list(cap.chunks())
    return {name: np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, dtype)
            for name, dtype in block.MACHINE_COLUMNS.items()}


def _text_summary(cap) -> tuple:
    return (cap.records.as_json(), cap.notes, cap.frames["processes"].to_dicts(), cap.meta.get("messages"))


@SLOW
@given(k=st.integers(0, len(BLKPARSE) - 1), block_bytes=st.integers(100, 20_000), probe=st.integers(1, 10**6),
       swaps=st.integers(0, 40), seed=st.integers(0, 10**6))
def test_blkparse_chunks_equal_the_whole_file(tmp_path_factory, k, block_bytes, probe, swaps, seed):
    """A blkparse text (its events in time order, then `swaps` neighbouring lines swapped, as
    blkparse's own output has them) read in blocks of any size: the events, counts, notes and
    names of the whole file read at once; a note (and the lines where they were read) only
    where a swap straddles blocks after the first `probe` events."""
    d = tmp_path_factory.mktemp("b")
    lines = open(BLKPARSE[k], encoding="utf-8").read().splitlines(keepends=True)
    n_ev = next((i for i, line in enumerate(lines) if not line.strip() or re.match(blkparse.SUMMARY_START, line)),
                len(lines))
    rng = np.random.default_rng(seed)
    body = lines[:n_ev]
    for _ in range(swaps if len(body) > 2 else 0):
        i = int(rng.integers(0, len(body) - 1))
        body[i], body[i + 1] = body[i + 1], body[i]
    path = d / "t.blkparse.txt"
    path.write_text("".join(body + lines[n_ev:]), encoding="utf-8")
    one = blkparse.parse(str(path), eager=True)
    cap = blkparse.parse(str(path), eager=False, block_bytes=block_bytes, probe=probe)
    cols = _text_columns(cap)
    if not any("not in time order" in note for note in cap.notes):
        assert_same(cols, one.columns["events"])
        assert _text_summary(cap) == _text_summary(one)
        raw = blkparse.parse(str(path), eager=False, block_bytes=block_bytes, probe=probe).frames["events"]
        assert raw.equals(one.frames["events"])
    else:
        assert len(cols["t_ns"]) == len(one.columns["events"]["t_ns"]) and probe < n_ev


def test_prefetched_chunks_fill_the_capture_at_their_end(tmp_path):
    """Read ahead in a worker thread (streams.prefetched, as the analysis reads them): the same
    chunks, and the counts, names and notes are there once the last chunk is handed on."""
    from scsitrace.streams import prefetched
    ev = gen.workload(300, seed=12)
    paths = gen.write(ev, str(tmp_path / "t"))
    whole = bt.parse(paths[0], eager=True)
    cap = bt.parse(paths[0], eager=False, chunk=100)
    assert cap.records.read == 0
    parts = list(prefetched(cap.chunks()))
    assert len(parts) == -(-len(ev["time"]) // 100)
    assert_same({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, whole.columns["events"])
    assert summary(cap) == summary(whole)


@pytest.mark.parametrize("pid", [None, "NAME", "PID"])
def test_the_analysis_of_a_streamed_capture_never_holds_the_whole_trace(tmp_path, pid):
    """The block analysis reads a streamed capture chunk by chunk: the whole-trace columns are
    never built, and process names (notify records anywhere in the files) reach its tables,
    through one more streamed pass when `--pid NAME` needs them before."""
    from scsitrace import core
    ev = gen.workload(400, seed=3)
    paths = gen.write(ev, str(tmp_path / "t"))
    whole = bt.parse(paths[0], eager=True)
    names = dict(whole.frames["processes"].iter_rows())
    some_pid, some_name = next(iter(names.items()))
    pids = {None: None, "NAME": (some_name,), "PID": (str(some_pid),)}[pid]
    cap = bt.parse(paths[0], eager=False, chunk=64)
    got = core.analyze(cap, core.Options(pids=pids))
    assert not dict.__contains__(cap.columns, "events")
    want = core.analyze(whole, core.Options(pids=pids))
    for name in ("stages", "processes", "process_stages", "devices"):
        assert got.table(name).equals(want.table(name)), name
    assert got.ios.equals(want.ios)


def test_rows_not_kept_when_no_output_reads_them(tmp_path):
    """`analyze` to the terminal or --json reads no per-I/O row: the block machine then keeps
    none (core.Options.rows False), and every declared table, note and figure is the one of a
    run that kept them; asking such an analysis for its rows or segments is an error, not an
    empty table."""
    from scsitrace import core
    ev = gen.workload(600, seed=5)
    path = gen.write(ev, str(tmp_path / "t"))[0]
    kept = core.analyze(bt.parse(path, eager=False, chunk=64), core.Options())
    bare = core.analyze(bt.parse(path, eager=False, chunk=64), core.Options(rows=False))
    assert kept.ios.height > 0
    assert (bare.elapsed_ns, bare.ios_completed, bare.data_bytes, bare.notes) == \
        (kept.elapsed_ns, kept.ios_completed, kept.data_bytes, kept.notes)
    for name in ("stages", "events", "overhead", "devices", "processes", "process_stages", "size_histogram",
                 "latency", "latency_histogram"):
        assert bare.table(name).equals(kept.table(name)), name
    with pytest.raises(RuntimeError, match="not kept"):
        bare.ios
    with pytest.raises(RuntimeError, match="not kept"):
        bare.segments
