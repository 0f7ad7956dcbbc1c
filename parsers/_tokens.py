"""Shared stage for whitespace-separated text records: split a block of bytes into lines and
tokens with numpy (no Python loop per line), and decode token columns in bulk.

A `TokenBlock` knows, for every line, its number, its tokens' byte spans and whether it is
blank or a comment; the format module then asks for columns of fixed-position tokens.
"""
from __future__ import annotations

import numpy as np

WHITESPACE = np.zeros(256, dtype=bool)
WHITESPACE[[9, 10, 13, 32]] = True
HEX_VALUE = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    HEX_VALUE[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    HEX_VALUE[_c] = 10 + _i
MAX_INT_DIGITS = 18  # fits int64 whatever the digits


class TokenBlock:
    def __init__(self, buf: bytes, first_line: int, comment: bytes = b"#"):
        self.buf = buf
        self.comment = comment[0]
        a = self.a = np.frombuffer(buf, dtype=np.uint8)
        n = len(a)
        line_start = np.concatenate(([0], np.flatnonzero(a == 10) + 1))
        if len(line_start) > 1 and line_start[-1] == n:
            line_start = line_start[:-1]
        self.line_start = line_start
        self.line_no = first_line + np.arange(len(line_start), dtype=np.int64)
        self.fixed_offsets = self._fixed_layout(a, line_start)
        if self.fixed_offsets is not None:
            self._init_fixed()
        else:
            self._init_general(a, line_start)

    @staticmethod
    def _fixed_layout(a: np.ndarray, line_start: np.ndarray):
        """Token spans when every line has the same length and the tokens sit in the same
        columns, left-padded at most (what writers that align columns produce): then no
        per-byte tokenizing is needed. Returns (starts, lengths) of shape (lines, tokens)."""
        n = len(a)
        if len(line_start) < 2:
            return None
        width = int(line_start[1])
        if width < 2 or n % width or n // width != len(line_start) or not (a[width - 1::width] == 10).all():
            return None
        ws = WHITESPACE[a.reshape(-1, width)]
        sep = ws.all(axis=0)
        edge = np.flatnonzero(np.diff(np.concatenate(([True], sep, [True])).astype(np.int8)))
        span_start, span_end = edge[0::2], edge[1::2]
        leads = np.empty((len(line_start), len(span_start)), dtype=np.int64)
        for k, (s, e) in enumerate(zip(span_start, span_end)):
            if e - s == 1:
                if ws[:, s].any():  # a row with nothing in this column
                    return None
                leads[:, k] = 0
                continue
            sub = ws[:, s:e]
            # inside a column only leading blanks are allowed (else it is two tokens)
            if (sub[:, :-1] < sub[:, 1:]).any():
                return None
            leads[:, k] = sub.sum(axis=1)
        return width, span_start, span_end, leads

    def _init_fixed(self):
        width, span_start, _, leads = self.fixed_offsets
        k = len(span_start)
        self.ntok = np.full(len(self.line_start), k)
        self.first_tok = None
        first = self.line_start + span_start[0] + leads[:, 0] if k else None
        self.is_record = (self.a[first] != self.comment) if k else np.zeros(len(self.line_start), bool)

    def _init_general(self, a: np.ndarray, line_start: np.ndarray):
        n = len(a)
        ws = WHITESPACE[a]
        edge = np.empty(n + 1, dtype=bool)
        edge[0] = not ws[0] if n else False
        edge[n] = not ws[-1] if n else False
        np.not_equal(ws[1:], ws[:-1], out=edge[1:n])
        pos = np.flatnonzero(edge)          # alternating token starts and ends
        self.tok_start = pos[0::2]
        self.tok_end = pos[1::2]
        # a token never spans lines: its line is the number of newlines before it
        tok_line = np.cumsum(a == 10, dtype=np.int32)[self.tok_start] if n else self.tok_start
        self.tok_line = tok_line
        self.ntok = np.bincount(tok_line, minlength=len(line_start))
        self.first_tok = np.cumsum(self.ntok) - self.ntok
        has = self.ntok > 0
        first_char = np.zeros(len(line_start), dtype=np.uint8)
        first_char[has] = a[self.tok_start[self.first_tok[has]]]
        self.is_record = has & (first_char != self.comment)

    def line_text(self, i: int) -> str:
        start = int(self.line_start[i])
        end = int(self.line_start[i + 1]) if i + 1 < len(self.line_start) else len(self.buf)
        return self.buf[start:end].decode("utf-8", errors="replace").strip()

    def columns(self, line_mask: np.ndarray, k: int) -> "Columns":
        """The tokens of the lines in `line_mask`, which all have exactly k tokens."""
        if self.fixed_offsets is not None:
            return FixedColumns(self, line_mask)
        take = line_mask[self.tok_line]
        start = self.tok_start[take].reshape(-1, k)
        return Columns(self, start, self.tok_end[take].reshape(-1, k) - start)

    def char(self, start: np.ndarray) -> np.ndarray:
        return self.a[start]

    def integers(self, start: np.ndarray, length: np.ndarray):
        """(value int64, ok bool) of decimal tokens; not ok for non-digits or too many digits."""
        ok = (length >= 1) & (length <= MAX_INT_DIGITS)
        value = np.zeros(len(start), dtype=np.int64)
        width = int(length[ok].max()) if ok.any() else 0
        last = len(self.a) - 1
        for j in range(width):
            take = ok & (j < length)
            d = self.a[np.minimum(start + j, last)].astype(np.int64) - 48
            bad = take & ((d < 0) | (d > 9))
            ok &= ~bad
            value = np.where(take, value * 10 + d, value)
        return value, ok

    def hex_bytes(self, start: np.ndarray, length: np.ndarray, null_token: bytes = b"--"):
        """(value uint8, is_null bool, ok bool) of two-hex-digit tokens; `null_token` is null."""
        two = length == 2
        last = len(self.a) - 1
        c0 = self.a[np.minimum(start, last)]
        c1 = self.a[np.minimum(start + 1, last)]
        is_null = two & (c0 == null_token[0]) & (c1 == null_token[1])
        h0, h1 = HEX_VALUE[c0], HEX_VALUE[c1]
        ok = two & ((is_null) | ((h0 != 255) & (h1 != 255)))
        value = np.where(ok & ~is_null, (h0.astype(np.uint16) << 4) | h1, 0).astype(np.uint8)
        return value, is_null, ok


class Columns:
    """Token j of every selected line, decoded in bulk by gathering bytes."""

    def __init__(self, block: TokenBlock, start: np.ndarray, length: np.ndarray):
        self.block, self.start, self.len = block, start, length

    def length(self, j: int) -> np.ndarray:
        return self.len[:, j]

    def char(self, j: int) -> np.ndarray:
        return self.block.a[self.start[:, j]]

    def integer(self, j: int):
        return self.block.integers(self.start[:, j], self.len[:, j])

    def hex_byte(self, j: int):
        return self.block.hex_bytes(self.start[:, j], self.len[:, j])


class FixedColumns(Columns):
    """Same answers for a fixed-layout block, read through a 2-D view of the bytes
    (token positions are worked out per column, only when a column needs them)."""

    def __init__(self, block: TokenBlock, line_mask: np.ndarray):
        width, self.span_start, self.span_end, leads = block.fixed_offsets
        rows = block.a.reshape(-1, width)
        everything = bool(line_mask.all())
        self.block = block
        self.rows = rows if everything else rows[line_mask]
        self.leads = leads if everything else leads[line_mask]
        self.line_start = block.line_start if everything else block.line_start[line_mask]

    def length(self, j: int) -> np.ndarray:
        return self.span_end[j] - self.span_start[j] - self.leads[:, j]

    def _start(self, j: int) -> np.ndarray:
        return self.line_start + self.span_start[j] + self.leads[:, j]

    def char(self, j: int) -> np.ndarray:
        s, e = self.span_start[j], self.span_end[j]
        return self.rows[:, s] if e - s == 1 else self.block.a[self._start(j)]

    def hex_byte(self, j: int):
        return self.block.hex_bytes(self._start(j), self.length(j))

    def integer(self, j: int):
        s, e = int(self.span_start[j]), int(self.span_end[j])
        if e - s > MAX_INT_DIGITS:
            return self.block.integers(self._start(j), self.length(j))
        sub = self.rows[:, s:e]
        digits = sub.astype(np.int64) - 48
        digits[WHITESPACE[sub]] = 0          # leading blanks of a right-aligned number
        ok = ((digits >= 0) & (digits <= 9)).all(axis=1) & (self.length(j) >= 1)
        return digits @ (10 ** np.arange(e - s - 1, -1, -1, dtype=np.int64)), ok
