"""The ancot-text record scanner: one compiled pass over a block of whole lines.

numpy needs a dozen passes over the bytes to split and check 80 M lines; this scanner
(numba, compiled on first use and cached beside this file) reads each byte once. It applies
the format's record rules in the order the reader reports them: field count, tick, each
signal, DB, DBP. Tick order is checked afterwards, in bulk, by the caller.
"""
from __future__ import annotations

import numpy as np

from scsitrace._jit import compiled, inlined

BAD_COUNT, BAD_TICK, BAD_DB, BAD_DBP = 1, 2, 3, 4
BAD_SIGNAL = 16  # + index of the signal
MAX_DIGITS = 18  # any 18-digit tick fits int64


@inlined
def _blank(c):
    return c == 32 or c == 9 or c == 13


@inlined
def _hex(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@compiled
def scan(a, sig_bits, n_data, line_idx, tick, lines, db, db_null, dbp, bad_line, bad_reason, bad_found):
    """Fill the good-record arrays (line index, tick, lines, DB, DBP) and the bad-record
    arrays (line index, reason, number of fields); returns (good, bad, lines seen, tick
    decreases among the good records)."""
    n = a.shape[0]
    n_sig = sig_bits.shape[0]
    n_fields = 1 + n_sig + n_data
    fixed_width = 2 * n_sig + 3 * min(n_data, 1) + 2 * max(n_data - 1, 0)  # the fields after the tick
    i = 0
    line = 0
    rec = 0
    nbad = 0
    while i < n:
        while i < n and _blank(np.int64(a[i])):
            i += 1
        if i >= n:
            break
        c = np.int64(a[i])
        if c == 10 or c == 35:  # blank line, or a comment: skip to the next line
            while i < n and a[i] != 10:
                i += 1
            i += 1
            line += 1
            continue
        # The usual layout (digits, each field after one blank, end of line), read straight
        # through. Written out here rather than as a helper: numba's inlining of a helper
        # taking the column arrays made this loop three times slower.
        j = i
        t = np.int64(0)
        digits_end = min(n, i + MAX_DIGITS)
        while j < digits_end:
            c = np.int64(a[j])
            if c < 48 or c > 57:
                break
            t = t * 10 + (c - 48)
            j += 1
        fast = j > i and j + fixed_width <= n
        if fast:
            ln = np.int64(0)
            off = np.int64(0)
            for f in range(n_sig):  # " 0" or " 1" per signal; any other byte sets `off`
                c = np.int64(a[j + 2 * f + 1])
                off |= (np.int64(a[j + 2 * f]) ^ 32) | ((c - 48) & 0xFE)
                ln |= (c & 1) * np.int64(sig_bits[f])
            fast = off == 0
            j += 2 * n_sig
        if fast and n_data >= 1:
            c0 = np.int64(a[j + 1])
            c1 = np.int64(a[j + 2])
            if a[j] != 32:
                fast = False
            elif c0 == 45 and c1 == 45:
                db[rec] = 0
                db_null[rec] = True
            elif _hex(c0) >= 0 and _hex(c1) >= 0:
                db[rec] = _hex(c0) * 16 + _hex(c1)
                db_null[rec] = False
            else:
                fast = False
            j += 3
        if fast and n_data == 2:
            c0 = np.int64(a[j + 1])
            if a[j] != 32 or not (c0 == 48 or c0 == 49 or c0 == 45):
                fast = False
            dbp[rec] = c0 - 48 if c0 != 45 else -1
            j += 2
        if fast:
            while j < n and _blank(np.int64(a[j])):
                j += 1
            fast = j >= n or a[j] == 10
        if fast:
            tick[rec] = t
            lines[rec] = ln
            line_idx[rec] = line
            rec += 1
            line += 1
            i = j + 1
            continue
        why = 0
        nf = 0
        t = np.int64(0)
        ln = np.int64(0)
        d = np.int64(0)
        dnull = True
        p = np.int64(-1)
        while i < n:
            c = np.int64(a[i])
            if c == 10:
                break
            if _blank(c):
                i += 1
                continue
            s = i
            while i < n:
                c = np.int64(a[i])
                if c == 10 or _blank(c):
                    break
                i += 1
            f = nf
            nf += 1
            if why != 0 or f >= n_fields:
                continue
            length = i - s
            c0 = np.int64(a[s])
            if f == 0:
                if length > MAX_DIGITS:
                    why = BAD_TICK
                else:
                    for j in range(s, i):
                        c = np.int64(a[j])
                        if c < 48 or c > 57:
                            why = BAD_TICK
                            break
                        t = t * 10 + (c - 48)
            elif f <= n_sig:
                if length != 1 or (c0 != 48 and c0 != 49):
                    why = BAD_SIGNAL + f - 1
                elif c0 == 49:
                    ln |= np.int64(sig_bits[f - 1])
            elif f == n_sig + 1:
                c1 = np.int64(a[s + 1]) if length == 2 else np.int64(0)
                if length == 2 and c0 == 45 and c1 == 45:
                    dnull = True
                elif length == 2 and _hex(c0) >= 0 and _hex(c1) >= 0:
                    d = _hex(c0) * 16 + _hex(c1)
                    dnull = False
                else:
                    why = BAD_DB
            else:
                if length == 1 and (c0 == 48 or c0 == 49):
                    p = c0 - 48
                elif length == 1 and c0 == 45:
                    p = -1
                else:
                    why = BAD_DBP
        if nf != n_fields:
            why = BAD_COUNT
        if why == 0:
            line_idx[rec] = line
            tick[rec] = t
            lines[rec] = ln
            if n_data >= 1:
                db[rec] = d
                db_null[rec] = dnull
            if n_data == 2:
                dbp[rec] = p
            rec += 1
        else:
            bad_line[nbad] = line
            bad_reason[nbad] = why
            bad_found[nbad] = nf
            nbad += 1
        line += 1
        i += 1
    decreases = 0  # good ticks below the good tick before them, inside this block
    for r in range(1, rec):
        if tick[r] < tick[r - 1]:
            decreases += 1
    return rec, nbad, line, decreases


def scan_block(buf: bytes, sig_bits: np.ndarray, n_data: int):
    """Scan one block of whole lines -> (good, bad, number of lines in the block, tick
    decreases), where good = (line_idx, tick, lines, db, db_null, dbp) and bad = (line_idx,
    reason, found)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    cap = len(buf) // 2 + 1  # a record line takes at least two bytes
    good = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.uint16),
            np.zeros(cap if n_data else 0, np.uint8), np.ones(cap if n_data else 0, np.bool_),
            np.full(cap if n_data == 2 else 0, -1, np.int8))
    bad = (np.empty(cap, np.int64), np.empty(cap, np.int16), np.empty(cap, np.int32))
    n_good, n_bad, n_lines, decreases = scan(a, sig_bits, n_data, *good, *bad)
    return tuple(x[:n_good] for x in good), tuple(x[:n_bad] for x in bad), n_lines, decreases
