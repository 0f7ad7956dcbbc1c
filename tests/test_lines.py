"""parsers/_lines.py: blocks of whole lines with exact line numbers, whichever way a block is
split into lines (polars for small blocks, pyarrow zero-copy for large ones)."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings, strategies as st

from scsitrace.parsers import _lines

LINES = st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)),
                         max_size=12), max_size=30)


def lines_of(text: str) -> list[str]:
    """Each line with its newline (only "\\n" ends a line); a last line without one as it is."""
    pieces = text.split("\n")
    return [p + "\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


@settings(deadline=None)     # the first example imports pyarrow
@given(LINES, st.booleans())
def test_both_splits_give_the_lines_with_their_newlines(lines, final_newline):
    text = "\n".join(lines) + ("\n" if final_newline and lines else "")
    buf = text.encode()
    by_polars = _lines._lines_series(buf, text)
    arrow = pl.from_arrow(_lines._lines_array(buf)).cast(pl.Utf8)
    assert by_polars.to_list() == arrow.to_list()
    assert "".join(by_polars.to_list()) == text
    expected = lines_of(text) or [""]
    assert by_polars.to_list() == expected


@settings(max_examples=40, deadline=None)
@given(LINES.filter(bool), st.integers(1, 64), st.sampled_from([0, 1 << 30]))
def test_line_blocks_number_every_line_once(tmp_path_factory, lines, block_bytes, arrow_from):
    text = "\n".join(lines) + "\n"
    path = tmp_path_factory.mktemp("lines") / "t.txt"
    path.write_text(text, encoding="utf-8")
    saved = _lines.ARROW_SPLIT_BYTES
    _lines.ARROW_SPLIT_BYTES = arrow_from        # 0: every block by pyarrow; 2^30: every block by polars
    try:
        frames = list(_lines.iter_line_blocks(str(path), strict=True, block_bytes=block_bytes))
    finally:
        _lines.ARROW_SPLIT_BYTES = saved
    got = pl.concat(frames)
    assert got["line_no"].to_list() == list(range(1, len(lines) + 1))
    assert got["text"].to_list() == lines_of(text)
