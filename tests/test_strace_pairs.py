"""strace -f halves joined (parsers/_strace_lines.py `pairs`: each `<... ioctl resumed>` to its
pid's previous `<unfinished ...>` ioctl) with the pid neighbours from Rust
(`native/src/text/scsilog_pair.rs:key_neighbours`), against the polars windows they replaced
(the oracle here): the same calls, the same count, the same halves held, for any halves of
any pids, and carried through random block edges as parsers/sgio.py carries them."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.parsers import _strace_lines


def oracle(g: pl.DataFrame, final: bool = True):
    """SG_IO calls split by -f into `<unfinished ...>` and `<... ioctl resumed>`: each resumed
    half belongs to its pid's previous unfinished ioctl. Returns the joined SG_IO calls, how
    many resumed halves they used, and (unless `final`) the unfinished halves that are their
    pid's last line so far (rows of `g`: their resumed half may come in the next block)."""
    halves = g.filter(pl.col("opens") | pl.col("closes")).sort("pid", "line_no")
    cols = ("kind", "arg", "line_no", "t_ns", "fd", "path")
    halves = halves.with_columns([pl.col(c).shift(1).over("pid").alias(f"p_{c}") for c in cols])
    done = halves.filter((pl.col("kind") == "resumed") & (pl.col("p_kind") == "unfinished")).select(
        pl.col("p_line_no").alias("line_no"), "pid", pl.col("p_t_ns").alias("t_ns"), pl.col("p_fd").alias("fd"),
        pl.col("p_path").alias("path"), pl.concat_str("p_arg", "arg").alias("arg"), "ret", "errno", "dur",
        pl.col("t_ns").alias("end_t_ns"))
    # an unfinished SG_IO whose pid has no resumed half after it: the trace ended (or the process died)
    nxt = pl.col("closes").shift(-1).over("pid")
    last = nxt.is_null() & pl.lit(not final)
    held = halves.filter((pl.col("kind") == "unfinished") & last).select(g.columns)
    open_ = halves.filter((pl.col("kind") == "unfinished") & ~nxt.fill_null(False) & ~last).select(
        "line_no", "pid", "t_ns", "fd", "path", "arg", pl.lit("?").alias("ret"),
        pl.lit(None, dtype=pl.Int64).alias("end_t_ns"))
    return pl.concat([done, open_], how="diagonal_relaxed"), done.height, held



SHAPES = {"unfinished": (True, False), "resumed": (False, True), "other": (False, False), "whole": (False, False),
          "other-open": (True, False), "other-close": (False, True)}


@st.composite
def halves(draw):
    rows = []
    for line_no in range(1, draw(st.integers(0, 40)) + 1):
        shape = draw(st.sampled_from(list(SHAPES)))
        opens, closes = SHAPES[shape]
        rows.append({"line_no": line_no, "pid": draw(st.sampled_from([None, 7, 8, 9])), "t_ns": line_no * 10,
                     "fd": str(draw(st.integers(3, 5))), "path": draw(st.sampled_from([None, "/dev/sg0"])),
                     "arg": f"a{line_no}", "ret": draw(st.sampled_from([None, "0", "-1"])), "errno": None,
                     "dur": None, "kind": shape.split("-")[0], "opens": opens, "closes": closes})
    return pl.DataFrame(rows, schema={"line_no": pl.Int64, "pid": pl.Int64, "t_ns": pl.Int64, "fd": pl.Utf8,
                                      "path": pl.Utf8, "arg": pl.Utf8, "ret": pl.Utf8, "errno": pl.Utf8,
                                      "dur": pl.Utf8, "kind": pl.Utf8, "opens": pl.Boolean, "closes": pl.Boolean})


def _blocks(g, cuts, run):
    """The calls of `g` cut at `cuts`, the held halves carried into the next block."""
    edges = sorted({0, g.height, *(c % (g.height + 1) for c in cuts)})
    held, out, used = None, [], 0
    for k, (a, b) in enumerate(zip(edges, edges[1:])):
        block = g.slice(a, b - a)
        if held is not None:
            block = pl.concat([held, block]).sort("line_no")
        calls, n, held = run(block, k == len(edges) - 2)
        out.append(calls)
        used += n
    if not out:
        return [], 0
    cols = ["line_no", "pid", "t_ns", "fd", "path", "arg", "ret", "errno", "dur", "end_t_ns"]
    return pl.concat(out, how="diagonal_relaxed").select(cols).sort("line_no").to_dicts(), used


@settings(max_examples=300, deadline=None)
@given(halves(), st.lists(st.integers(0, 50), max_size=4), st.booleans())
def test_halves_join_as_the_polars_windows(g, cuts, final):
    got, n, held = _strace_lines.pairs(g, final)
    want, m, wheld = oracle(g, final)
    cols = ["line_no", "pid", "t_ns", "fd", "path", "arg", "ret", "errno", "dur", "end_t_ns"]
    assert got.select(cols).sort("line_no").to_dicts() == want.select(cols).sort("line_no").to_dicts()
    assert n == m
    assert held.sort("line_no").to_dicts() == wheld.sort("line_no").to_dicts()
    assert _blocks(g, cuts, _strace_lines.pairs) == _blocks(g, cuts, oracle)
