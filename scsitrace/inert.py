"""Text from traces is inert: what a capture holds (process names, paths, file names, labels)
reaches a terminal, a spreadsheet or an XML reader as text, never as a command.

- `printable(text)`: control characters (C0, DEL, C1; the ESC of a terminal escape
  sequence) shown as Python escapes (`\\x1b`), for terminal lines and error messages.
- `excerpt(text)`: a short, escaped excerpt of file content for an error message.
- `csv_cell(text)` / `csv_safe(frame)`: the spreadsheet rule (OWASP's): a text cell that
  begins with `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading apostrophe `'`,
  so Excel, LibreOffice and Google Sheets show it as text instead of evaluating it. Only
  text columns change; numbers (a negative number is a number column) never do.
- `xml_text(text)`: characters XML 1.0 does not allow (C0 controls except tab, CR, LF;
  U+FFFE/U+FFFF; lone surrogates) shown as `\\xNN`, so a JUnit file stays well formed.
"""
from __future__ import annotations

import re

EXCERPT = 60            # characters of file content an error message shows at most

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_KEEP_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _escape(m: re.Match) -> str:
    c = m.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\x{ord(c):02x}")


def printable(text, keep_newlines: bool = False) -> str:
    """`text` with control characters escaped (`\\x1b`); everything else as it is."""
    text = str(text)
    return (_CONTROL_KEEP_NEWLINE if keep_newlines else _CONTROL).sub(_escape, text)


def printable_tree(value):
    """A JSON-like value (dicts, lists, strings) with every string made printable: what a
    terminal renderer takes from a summary."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(printable_tree(v) for v in value)
    return value


def excerpt(text, limit: int = EXCERPT) -> str:
    """A short, escaped excerpt of file content for an error line."""
    shown = printable(text)
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def xml_text(text):
    """`text` with the characters XML 1.0 cannot hold escaped (None stays None)."""
    if text is None:
        return None
    return _XML_BAD.sub(lambda m: f"\\x{ord(m.group(0)):02x}" if ord(m.group(0)) < 0x100
                        else f"\\u{ord(m.group(0)):04x}", str(text))


def terminal_safe(frame):
    """A polars frame whose text columns have their control characters escaped (printable),
    one vectorised replacement per control character present: a CSV shown on a terminal."""
    import polars as pl
    text = [name for name, dtype in frame.schema.items() if dtype in (pl.Utf8, pl.Categorical)]
    exprs = []
    for c in text:
        col = pl.col(c).cast(pl.Utf8)
        present = frame.select(col.str.extract_all(_CONTROL.pattern).explode().unique().drop_nulls()).to_series()
        for ch in present.to_list():
            col = col.str.replace_all(ch, printable(ch), literal=True)
        exprs.append(col.alias(c))
    return frame.with_columns(exprs) if exprs else frame


def csv_cell(value):
    """One CSV cell made spreadsheet-safe (see the module's rule)."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_safe(frame):
    """A polars frame whose text columns are spreadsheet-safe (csv_cell), in one pass per
    text column; other columns untouched."""
    import polars as pl
    text = [name for name, dtype in frame.schema.items() if dtype in (pl.Utf8, pl.Categorical)]
    if not text:
        return frame
    starts = "^[" + re.escape("".join(FORMULA_START)) + "]"
    return frame.with_columns([
        pl.when(pl.col(c).cast(pl.Utf8).str.contains(starts)).then(pl.lit("'") + pl.col(c).cast(pl.Utf8))
        .otherwise(pl.col(c).cast(pl.Utf8)).alias(c) for c in text])
