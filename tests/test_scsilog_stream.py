"""The kernel-log layer streams: a log analysed block by block (any block size, down to a few
lines) gives the tables of one block; errors name the same line; at most KEEP_IOS per-command
rows are kept (evenly thinned, said in a note) and every row goes to `ios_sink`."""
from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from scsitrace import bandwidth, core, model, parsers
from scsitrace.errors import BadInput, UsageError

from gen_scsilog import dmesg_text, ftrace_text
from gen_sgio import strace_text
from test_sgio import calls  # the SG_IO commands of 1-3 overlapping processes

DEVS = [(0, 0, 0, 0), (0, 0, 1, 0), (1, 0, 0, 2)]
CDBS = st.sampled_from([bytes.fromhex("28000000800000004000"), bytes.fromhex("2a000001000000000800"),
                        bytes(6), bytes.fromhex("120000002400")])


@st.composite
def events(draw, kinds=("done", "done", "done", "error", "timeout", None)):
    """Commands on a few devices and tags, overlapping, in time order; some never end, some
    end twice, a done without start at the top."""
    out, t = [], 1_000_000_000
    if draw(st.booleans()):
        out.append((t, "done", DEVS[0], 5, bytes(6), "GOOD"))
    for _ in range(draw(st.integers(1, 25))):
        t += draw(st.integers(0, 3000)) * 1000
        dev, tag, cdb = draw(st.sampled_from(DEVS)), draw(st.integers(0, 3)), draw(CDBS)
        end = draw(st.sampled_from(kinds))
        out.append((t, "start", dev, tag, cdb, "GOOD"))
        if end is not None:
            out.append((t + draw(st.integers(0, 5000)) * 1000, end, dev, tag, cdb,
                        draw(st.sampled_from(["GOOD", "CHECK CONDITION"]))))
    return sorted(out, key=lambda e: e[0])


def tables(a) -> dict:
    out = {name: a.table(name) for name in a.tables}
    out.update(ios=a.ios, segments=a.segments, categories=a.categories["scsilog"],
               anomalies=a.anomalies, meta=pl.DataFrame({"elapsed": [a.elapsed_ns], "ios": [a.ios_completed],
                                                         "notes": ["\n".join(a.notes)]}))
    return out


def same(a, b) -> None:
    ta, tb = tables(a), tables(b)
    assert ta.keys() == tb.keys()
    for name in ta:
        assert ta[name].equals(tb[name], null_equal=True), name
    assert a.capture.records.as_json() == b.capture.records.as_json()
    assert a.source == b.source


def analyze(path, fmt, chunk=None, **kw):
    opts = {"chunk_bytes": chunk} if chunk else {}
    options = core.Options(**kw)
    return core.analyze(parsers.parse(str(path), fmt, **opts), options)


def same_outcome(path, fmt, chunk, **kw) -> None:
    """Analysed in blocks of `chunk` bytes and in one: the same tables, or the same usage error."""
    try:
        whole = analyze(path, fmt, **kw)
    except UsageError as exc:
        with pytest.raises(UsageError) as again:
            analyze(path, fmt, chunk, **kw)
        assert str(again.value) == str(exc)
        return
    same(analyze(path, fmt, chunk, **kw), whole)


@settings(max_examples=40, deadline=None)
@given(events(), st.sampled_from(["ftrace", "dmesg"]), st.integers(40, 2000),
       st.sampled_from([None, (2_000_000, 20_000_000), (0, None)]))
def test_any_block_size_gives_the_tables_of_one_block(tmp_path_factory, evs, fmt, chunk, window):
    p = tmp_path_factory.mktemp("log") / f"t.{fmt}.txt"
    kinds = [e for e in evs if fmt == "ftrace" or e[1] != "error"]
    p.write_text(ftrace_text(kinds) if fmt == "ftrace" else dmesg_text(kinds))
    same_outcome(p, "scsilog", chunk, window=window)
    got = []        # the I/O sink gets every row, in io order, whatever the block size
    streamed = analyze(p, "scsilog", chunk, ios_sink=lambda frame, cap: got.append(frame))
    assert streamed.ios_streamed
    assert (pl.concat(got).equals(streamed.ios) if got else streamed.ios.height == 0)
    same_outcome(p, "scsilog", chunk, device="0:0:1:0")
    same_outcome(p, "scsilog", chunk, target=1, lun=0)


@settings(max_examples=40, deadline=None)
@given(calls(), st.sampled_from([None, "tt", "ttt"]), st.booleans(), st.sampled_from(["bracket", "plain"]),
       st.integers(60, 3000))
def test_strace_any_block_size(tmp_path_factory, cmds, ts, T, f, chunk):
    p = tmp_path_factory.mktemp("sg") / "t.strace"
    p.write_text(strace_text(cmds, ts=ts, T=T, y=False, f=f, other=True))
    same(analyze(p, "sgio", chunk), analyze(p, "sgio"))
    same_outcome(p, "sgio", chunk, pids=(str(cmds[0]["pid"]),))
    same_outcome(p, "sgio", chunk, device=cmds[-1]["path"], window=(1_000_000, None))


def test_sg3_any_block_size(tmp_path):
    p = tmp_path / "t.sg3.txt"
    p.write_text("open /dev/sg0 with flags=0x800\n    inquiry cdb: [12 00 00 00 24 00]\n      duration=20 ms\n"
                 "    inquiry: pass-through requested 36 bytes (data-in) but got 36 bytes\n"
                 "open /dev/sg1 with flags=0x800\n    test unit ready cdb: [00 00 00 00 00 00]\n"
                 "Fixed format, current; Sense key: Not Ready\n Raw sense data (in hex), sb_len=18, embedded_len=18\n"
                 "        70 00 02 00 00 00 00 0a  00 00 00 00 3a 00 00 00\n      duration=3 ms\n")
    whole = analyze(p, "sgio")
    assert whole.ios.height == 2 and whole.ios["device"].to_list() == ["/dev/sg0", "/dev/sg1"]
    for chunk in (10, 40, 90, 200):
        same(analyze(p, "sgio", chunk), whole)


def test_bad_line_in_a_later_block_names_its_line(tmp_path):
    evs = [(1_000_000_000 + k * 1000_000, "start" if k % 2 == 0 else "done", DEVS[0], 1, bytes(6), "GOOD")
           for k in range(40)]
    lines = ftrace_text(evs).splitlines()
    lines[30] = lines[30].replace("raw=00", "raw=0z")
    p = tmp_path / "t.ftrace.txt"
    p.write_text("\n".join(lines) + "\n")
    for chunk in (None, 300, 5000):
        with pytest.raises(BadInput) as exc:
            analyze(p, "scsilog", chunk)
        assert exc.value.line == 31
        a = core.analyze(parsers.parse(str(p), "scsilog", strict=False, **({"chunk_bytes": chunk} if chunk else {})))
        assert a.capture.records.skipped == 1 and a.capture.records.read == len(lines) - 1


def test_rows_kept_are_thinned_evenly_and_the_sink_gets_all(tmp_path, monkeypatch):
    evs = []
    for k in range(300):
        t = 1_000_000_000 + k * 100_000
        evs += [(t, "start", DEVS[k % 2], k % 4, bytes(6), "GOOD"), (t + 50_000, "done", DEVS[k % 2], k % 4, bytes(6), "GOOD")]
    p = tmp_path / "t.ftrace.txt"
    p.write_text(ftrace_text(evs))
    whole = analyze(p, "scsilog")
    monkeypatch.setattr(model, "KEEP_IOS", 64)
    got = []
    thin = analyze(p, "scsilog", 2000, ios_sink=lambda frame, cap: got.append(frame))
    assert thin.ios_streamed and pl.concat(got).equals(whole.ios)
    assert thin.ios.height <= 64 and thin.ios["io"].to_list() == list(range(0, 300, 8))
    assert thin.ios.equals(whole.ios.filter(pl.col("io") % 8 == 0))
    assert any("every 8th" in n for n in thin.notes) and thin.segments.height <= 64
    for name in whole.tables:        # the views too: built from every completed I/O (bandwidth.Collected)
        assert thin.table(name).equals(whole.table(name)), name
    assert thin.table("stalls").height == 1          # built (its factor and count), not left empty
    assert not any("bandwidth views" in n for n in thin.notes)
    assert thin.categories["scsilog"].equals(whole.categories["scsilog"])
    monkeypatch.setattr(bandwidth, "KEEP_VIEW_IOS", 100)     # past what the views may hold: empty, said
    over = analyze(p, "scsilog", 2000)
    assert all(over.table(t.name).is_empty() for t in bandwidth.TABLES)
    assert any("bandwidth views" in n and "past 100 I/Os" in n for n in over.notes)
