"""The ancot-text record scanner: one compiled pass over a block of whole lines.

numpy needs a dozen passes over the bytes to split and check 80 M lines; this scanner
(numba, compiled on first use and cached beside this file) reads each byte once. It applies
the format's record rules in the order the reader reports them: field count, tick, each
signal, DB, DBP. Tick order is checked afterwards, in bulk, by the caller.
"""
from __future__ import annotations

import numpy as np
from numba import njit

BAD_COUNT, BAD_TICK, BAD_DB, BAD_DBP = 1, 2, 3, 4
BAD_SIGNAL = 16  # + index of the signal
MAX_DIGITS = 18  # any 18-digit tick fits int64


@njit(cache=True, nogil=True, inline="always")
def _blank(c):
    return c == 32 or c == 9 or c == 13


@njit(cache=True, nogil=True, inline="always")
def _hex(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@njit(cache=True, nogil=True, inline="always")
def _fast_record(a, i, sig_bits, n_data, tick, lines, db, db_null, dbp, rec):
    """A record laid out the usual way (digits, then each field after one blank, then the
    end of the line) stored at `rec`; returns the index of its newline (or of the end of
    the data), or -1 when the line has another shape (the general loop then reads it)."""
    n = a.shape[0]
    j = i
    t = np.int64(0)
    while j < n and j - i < MAX_DIGITS and 48 <= a[j] <= 57:
        t = t * 10 + (np.int64(a[j]) - 48)
        j += 1
    if j == i or j + 2 * sig_bits.shape[0] + 3 * min(n_data, 1) + 2 * max(n_data - 1, 0) > n:
        return -1
    ln = np.int64(0)
    for f in range(sig_bits.shape[0]):
        bit = np.int64(a[j + 1]) - 48
        if a[j] != 32 or bit < 0 or bit > 1:
            return -1
        ln |= np.int64(sig_bits[f]) * bit
        j += 2
    d = np.int64(0)
    dnull = True
    if n_data >= 1:
        if a[j] != 32:
            return -1
        c0 = np.int64(a[j + 1])
        c1 = np.int64(a[j + 2])
        if c0 == 45 and c1 == 45:
            dnull = True
        elif _hex(c0) >= 0 and _hex(c1) >= 0:
            d = _hex(c0) * 16 + _hex(c1)
            dnull = False
        else:
            return -1
        j += 3
    p = np.int64(-1)
    if n_data == 2:
        c0 = np.int64(a[j + 1])
        if a[j] != 32 or not (c0 == 48 or c0 == 49 or c0 == 45):
            return -1
        p = c0 - 48 if c0 != 45 else -1
        j += 2
    while j < n and (a[j] == 32 or a[j] == 9 or a[j] == 13):
        j += 1
    if j < n and a[j] != 10:
        return -1
    tick[rec] = t
    lines[rec] = ln
    if n_data >= 1:
        db[rec] = d
        db_null[rec] = dnull
    if n_data == 2:
        dbp[rec] = p
    return j


@njit(cache=True, nogil=True)
def scan(a, sig_bits, n_data, line_idx, tick, lines, db, db_null, dbp, bad_line, bad_reason, bad_found):
    """Fill the good-record arrays (line index, tick, lines, DB, DBP) and the bad-record
    arrays (line index, reason, number of fields); returns (good, bad, lines seen, tick
    decreases among the good records)."""
    n = a.shape[0]
    n_sig = sig_bits.shape[0]
    n_fields = 1 + n_sig + n_data
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
        j = _fast_record(a, i, sig_bits, n_data, tick, lines, db, db_null, dbp, rec)
        if j >= 0:  # the usual shape, read straight through
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
            db[rec] = d
            db_null[rec] = dnull
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
