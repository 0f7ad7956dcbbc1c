"""A piped blktrace stream (`blktrace -o -`: per-CPU buffers interleaved, times going back at
each switch) read as a stream: put in time order as read within a window of `window`
records (parsers/_time_order.py, shared with blkparse text), for any chunk, window and read
size: the records, counts, notes and btt tables of the whole stream sorted at once (an
independent record-by-record reference), unless an event is further out of place than the
window among the first `probe` records (then read whole and sorted, with a note: still
equal), or after them (handed on as read, with a note; so is a stream whose times go back
only after the first `probe` records, as a per-CPU file's). Damaged streams read alike at any
size (strict: the same one-line error at the same byte offset)."""
from __future__ import annotations

import os
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))
import gen_blktrace as gen  # noqa: E402
from test_blktrace_stream import _damaged, assert_same, reference, streamed, summary  # noqa: E402

from scsitrace import core  # noqa: E402
from scsitrace.errors import BadInput  # noqa: E402
from scsitrace.parsers import blktrace as bt  # noqa: E402

SLOW = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
TABLES = ("stages", "events", "overhead", "devices", "processes", "process_stages", "size_histogram", "latency")


def _pipe(d, n_ios: int, seed: int) -> str:
    ev = gen.workload(n_ios, seed=seed)
    ev["cpu"] = np.random.default_rng(seed).integers(0, 4, len(ev["time"]))
    return gen.write(ev, str(d / "t.bin"), layout="pipe")[0]


def _analysis(cap):
    a = core.analyze(cap)
    return {name: a.table(name) for name in TABLES}, a.ios, a.notes, a.elapsed_ns


@SLOW
@given(n_ios=st.integers(1, 120), seed=st.integers(0, 10**6), chunk=st.integers(1, 64),
       window=st.integers(1, 2000), read_size=st.integers(1, 500),
       probe=st.sampled_from([1, 100, 3000, 1 << 20]))
def test_piped_stream_in_order_at_any_size(tmp_path_factory, n_ios, seed, chunk, window, read_size, probe):
    d = tmp_path_factory.mktemp("p")
    path = _pipe(d, n_ios, seed)
    ref = reference([path])
    whole = bt.parse(path, eager=True)
    assert_same(whole.columns["events"], ref)               # the default window holds the whole stream
    cap = bt.parse(path, chunk=chunk, window=window, read_size=read_size, probe=probe, eager=False)
    _, cols = streamed(path, chunk, read_size)               # default window: in order, no note
    assert_same(cols, ref)
    parts = list(cap.chunks())
    assert all(0 < len(p["t_ns"]) <= chunk for p in parts)
    got = {name: np.concatenate([p[name] for p in parts]) for name in ref}
    late = [n for n in cap.notes if "analysed where they were read" in n or "merged as read" in n]
    sorted_whole = [n for n in cap.notes if "read whole and sorted" in n]
    if late:
        assert len(got["t_ns"]) == len(ref["t_ns"]) and probe < len(ref["t_ns"])
        return
    assert_same(got, ref)
    assert (summary(cap)[0], summary(cap)[2:]) == (summary(whole)[0], summary(whole)[2:])
    assert [n for n in cap.notes if n not in sorted_whole] == whole.notes
    if window >= 2 * 200 * 4:       # gen's pipe: 64-record buffers, 200 records apart at most, 4 CPUs
        assert not sorted_whole
    # the analysis streams it (never the whole columns), equal to the whole stream's
    one = bt.parse(path, chunk=chunk, window=window, read_size=read_size, probe=probe, eager=False)
    a = _analysis(one)
    assert not dict.__contains__(one.columns, "events")
    b = _analysis(whole)
    for name in TABLES:
        assert a[0][name].equals(b[0][name]), name
    assert a[1].equals(b[1]) and a[3] == b[3]
    assert [n for n in a[2] if n not in sorted_whole] == b[2]


@SLOW
@given(seed=st.integers(0, 10**6), chunk=st.integers(1, 40), window=st.integers(1, 600),
       read_size=st.integers(1, 300))
def test_damaged_piped_stream_reads_alike_at_any_size(tmp_path_factory, seed, chunk, window, read_size):
    """Bit flips, junk and cuts in a piped stream: the same error (strict: type, file, byte
    offset, in one line) and, leniently, the same skips, anomalies and counts whatever the
    sizes (the records themselves equal where no note says some were handed on as read)."""
    d = tmp_path_factory.mktemp("h")
    path = _pipe(d, 40, seed)
    data = open(path, "rb").read()
    open(path, "wb").write(_damaged(data, np.random.default_rng(seed)))
    outcomes = []
    for c, w, r in ((chunk, window, read_size), (1 << 20, 1 << 20, 1 << 22)):
        try:
            cap = bt.parse(path, chunk=c, window=w, read_size=r, eager=False, strict=False)
            cols = list(cap.chunks())
            outcomes.append((cols, summary(cap)))
        except BadInput as exc:
            outcomes.append(str(exc))
        try:
            list(bt.parse(path, chunk=c, window=w, read_size=r, eager=False, strict=True).chunks())
            outcomes.append("ok")
        except BadInput as exc:
            assert "\n" not in str(exc)
            outcomes.append((type(exc).__name__, str(exc), exc.offset))
    a_lenient, a_strict, b_lenient, b_strict = outcomes
    assert a_strict == b_strict
    if isinstance(a_lenient, tuple):
        sa, sb = a_lenient[1], b_lenient[1]
        assert sa[0] == sb[0] and sa[2:] == sb[2:]          # records, anomalies, gaps, origin, names, messages
        if not any("where they were read" in n or "read whole" in n or "merged as read" in n for n in sa[1]):
            assert sa[1] == sb[1]
            assert_same({k: np.concatenate([p[k] for p in a_lenient[0]]) for k in a_lenient[0][0]} if a_lenient[0]
                        else {}, {k: np.concatenate([p[k] for p in b_lenient[0]]) for k in b_lenient[0][0]}
                        if b_lenient[0] else {})
    else:
        assert a_lenient == b_lenient
