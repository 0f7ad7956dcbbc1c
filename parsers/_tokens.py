"""Shared stage for whitespace-separated text: split a block of bytes into lines and tokens
with numpy (no Python loop per line), and decode decimal tokens in bulk.

A `TokenBlock` knows, for every line, its number, its tokens' byte spans (`tok_start`,
`tok_end`, `tok_line`) and whether it is a record (not blank, not a comment).
"""
from __future__ import annotations

import numpy as np

WHITESPACE = np.zeros(256, dtype=bool)
WHITESPACE[[9, 10, 13, 32]] = True
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
