"""strace's timestamps read in Rust (native/src/text/sgio.rs `strace_clock`, through
parsers/_strace_lines.py `_timed`) against the polars patterns they replaced (the oracle here):
the same nanoseconds, or none, for any -t/-tt/-ttt stamp; and midnights counted the same
however the lines are cut into blocks."""
from __future__ import annotations

import types

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace._native import text
from scsitrace.parsers import _lines, _strace_lines

MAX_EPOCH_S = (2**63 - 1) // 1_000_000_000 - 1


def oracle(ts: pl.Expr) -> pl.Expr:
    """The time as printed, as parsers/_strace_lines.py `_clock` read it in polars."""
    clock = ts.str.contains(":")
    hms = ts.str.extract_groups(r"^(\d\d):(\d\d):(\d\d)(?:\.(\d+))?$")
    frac = lambda s: s.str.slice(0, 9).str.pad_end(9, "0").cast(pl.Int64).fill_null(0)  # noqa: E731
    h, m, s = (hms.struct[k].cast(pl.Int64) for k in range(3))
    tod = pl.when((h < 24) & (m < 60) & (s <= 60)).then((h * 3600 + m * 60 + s) * 1_000_000_000 + frac(hms.struct[3]))
    epoch = ts.str.split(".")
    whole = _lines.checked_int(epoch.list.get(0, null_on_oob=True), 0, MAX_EPOCH_S)
    return pl.when(clock).then(tod).otherwise(whole * 1_000_000_000 + frac(epoch.list.get(1, null_on_oob=True)))


digits = st.text("0123456789", min_size=1, max_size=12)
two = st.integers(0, 99).map(lambda v: f"{v:02d}")
stamps = st.one_of(
    st.builds(lambda h, m, s, f: f"{h}:{m}:{s}{f}", two, two, two, st.one_of(st.just(""), digits.map(lambda d: "." + d))),
    st.builds(lambda w, f: f"{w}.{f}", digits, digits),
    st.builds(lambda w, f: f"{w}.{f}", st.sampled_from(["9223372035", "9223372036", "09223372035", "0" * 25 + "1",
                                                        "99999999999999999999999"]), digits),
    st.none())


@settings(max_examples=400, deadline=None)
@given(st.lists(stamps, min_size=1, max_size=20))   # (no empty string view: _strace_lines._timed)
def test_stamps_read_as_the_polars_patterns(ts):
    frame = pl.DataFrame({"ts": ts}, schema={"ts": pl.Utf8})
    got = pl.DataFrame(text.strace_clock(frame))["ns"]
    assert got.to_list() == frame.select(oracle(pl.col("ts")).alias("ns"))["ns"].to_list()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 30 * 3600), min_size=1, max_size=30), st.lists(st.integers(1, 29), max_size=4))
def test_midnights_count_the_same_in_any_blocks(seconds, cuts):
    """-tt lines over several days (a step back of over 12 h is a midnight), read whole or in blocks."""
    lines = [f"{s // 3600 % 24:02d}:{s // 60 % 60:02d}:{s % 60:02d}.000001 ioctl(3, SG_IO, {{}}) = 0" for s in seconds]
    frame = pl.DataFrame({"line_no": range(1, len(lines) + 1), "t": lines})

    def read(edges):
        st_ = types.SimpleNamespace(clock=(None, 0))
        return pl.concat([_strace_lines.split(frame.slice(a, b - a), st_).sort("line_no")
                          for a, b in zip(edges, edges[1:]) if b > a])["t_ns"].to_list()

    edges = sorted({0, len(lines), *(c % (len(lines) + 1) for c in cuts)})
    assert read(edges) == read([0, len(lines)])
