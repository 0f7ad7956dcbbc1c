"""The VCD value-change scanner: one compiled pass (numba, cached beside this file) over a
block of whole lines -> the block's items (timestamps and value changes) in file order.

Tokens are runs of non-blank bytes. `$end`, `$comment`, `$dumpvars`, `$dumpall`, `$dumpon`
and `$dumpoff` set the keyword context of the tokens after them (tokens inside `$comment`
are dropped). A `b`/`r`/`s` value takes the next token on its line as its identifier code:
in a run of tokens starting with those letters values and codes alternate. The constants
are parsers/vcd.py's (kinds, reasons, keyword numbers).
"""
from __future__ import annotations

import numpy as np

from scsitrace._jit import compiled, inlined

KEYWORD_BYTES = (b"$end", b"$comment", b"$dumpvars", b"$dumpall", b"$dumpon", b"$dumpoff")
KW_NONE, KW_END, KW_COMMENT, KW_DUMPVARS, KW_DUMPALL, KW_DUMPON, KW_DUMPOFF = range(7)
BAD, TIME, SCALAR, VECTOR, REAL, STRING = range(6)          # item kinds
R_TOKEN, R_TIME, R_VECTOR, R_NO_CODE = range(1, 5)           # why an item is bad (0: good)
PACKED_BYTES = 7          # identifier codes up to this long are compared as integers
MAX_TIME_DIGITS = 18      # any 18-digit timestamp fits int64


def _keyword_table() -> tuple[np.ndarray, np.ndarray]:
    width = max(len(k) for k in KEYWORD_BYTES)
    table = np.zeros((len(KEYWORD_BYTES), width), np.uint8)
    lengths = np.array([len(k) for k in KEYWORD_BYTES], np.int64)
    for i, k in enumerate(KEYWORD_BYTES):
        table[i, :len(k)] = np.frombuffer(k, np.uint8)
    return table, lengths


KEYWORD_TABLE, KEYWORD_LENGTHS = _keyword_table()


@inlined
def _blank(c):
    return c == 32 or c == 10 or c == 9 or c == 13


@inlined
def _vector_char(c):
    return c == 48 or c == 49 or c == 120 or c == 88 or c == 122 or c == 90


@inlined
def _value_letter(c):  # b B r R s S: a value whose identifier code is the next token
    return c == 98 or c == 66 or c == 114 or c == 82 or c == 115 or c == 83


@compiled
def _keyword(a, s, e, table, lengths):
    """1 + index of the keyword the token a[s:e] is, or 0."""
    if a[s] != 36 or e - s < 2:
        return 0
    for k in range(table.shape[0]):
        if lengths[k] != e - s:
            continue
        same = True
        for j in range(e - s):
            if a[s + j] != table[k, j]:
                same = False
                break
        if same:
            return k + 1
    return 0


@compiled
def _pack(a, s, e):
    """An identifier code as an integer (bytes, length in the top byte); 0 when too long."""
    n = e - s
    if n < 1 or n > PACKED_BYTES:
        return np.uint64(0)
    key = np.uint64(n) << np.uint64(56)
    for j in range(n):
        key |= np.uint64(a[s + j]) << np.uint64(8 * j)
    return key


@compiled
def scan(a, first_line, context, table, lengths, line, start, end, kind, ctx, time,
         code_start, code_end, code, val_start, val_end, reason):
    """Fill the item columns; returns (items, keyword context at the end of the block)."""
    n = a.shape[0]
    i = 0
    line_no = first_line
    cur_ctx = context
    m = 0
    prev_line = -1          # line of the previous kept token (-1: none yet)
    prev_letter = False     # the previous kept token starts with b/r/s
    prev_pos = 0            # its position in its run of such tokens
    open_value = -1         # item index of a value waiting for the token after it
    while i < n:
        c = a[i]
        if c == 10:
            line_no += 1
            i += 1
            continue
        if _blank(c):
            i += 1
            continue
        s = i
        while i < n and not _blank(a[i]):
            i += 1
        e = i
        kw = _keyword(a, s, e, table, lengths)
        if kw:
            cur_ctx = kw
            continue
        if cur_ctx == KW_COMMENT:
            continue
        same_line = line_no == prev_line
        letter = _value_letter(a[s])
        pos = prev_pos + 1 if (letter and prev_letter and same_line) else 0
        if open_value >= 0:           # the token after a value: its code when on its line
            code_start[open_value] = s
            if same_line:
                code_end[open_value] = e
            else:
                code_end[open_value] = s
                reason[open_value] = R_NO_CODE if reason[open_value] == 0 and kind[open_value] >= VECTOR \
                    else reason[open_value]
        was_code = open_value >= 0 and same_line
        open_value = -1
        prev_line, prev_letter, prev_pos = line_no, letter, pos
        if was_code:
            code[m - 1] = _pack(a, code_start[m - 1], code_end[m - 1]) if kind[m - 1] >= SCALAR else np.uint64(0)
            continue
        line[m] = line_no
        start[m] = s
        end[m] = e
        ctx[m] = cur_ctx
        time[m] = 0
        code[m] = 0
        reason[m] = 0
        c0 = a[s]
        is_value = letter and pos % 2 == 0
        if is_value:
            open_value = m
            code_start[m] = s       # until the next token is known: a value last in the block
            code_end[m] = s         # has no code
            val_start[m] = s + 1
            val_end[m] = e
            if c0 == 98 or c0 == 66:
                kind[m] = VECTOR
                ok = e - s >= 2
                for j in range(s + 1, e):
                    if not _vector_char(a[j]):
                        ok = False
                        break
                if not ok:
                    reason[m] = R_VECTOR
            elif c0 == 114 or c0 == 82:
                kind[m] = REAL
            else:
                kind[m] = STRING
        else:
            code_start[m] = s + 1
            code_end[m] = e
            if c0 == 35:
                kind[m] = TIME
                val_start[m] = s + 1
                val_end[m] = e
                digits = e - s - 1
                ok = 1 <= digits <= MAX_TIME_DIGITS
                t = np.int64(0)
                if ok:
                    for j in range(s + 1, e):
                        d = np.int64(a[j]) - 48
                        if d < 0 or d > 9:
                            ok = False
                            break
                        t = t * 10 + d
                if ok:
                    time[m] = t
                else:
                    reason[m] = R_TIME
            elif _vector_char(c0) and e - s >= 2:
                kind[m] = SCALAR
                val_start[m] = s
                val_end[m] = s + 1
                code[m] = _pack(a, s + 1, e)
            else:
                kind[m] = BAD
                val_start[m] = s + 1
                val_end[m] = e
                reason[m] = R_TOKEN
        m += 1
    if open_value >= 0 and reason[open_value] == 0:
        reason[open_value] = R_NO_CODE
    return m, cur_ctx


def scan_block(buf, first_line: int, context: int):
    """(item columns, keyword context at the end) of one block of whole lines."""
    a = np.frombuffer(buf, dtype=np.uint8)
    cap = len(a) // 2 + 1     # a token and the blank after it take at least two bytes
    cols = dict(line=np.empty(cap, np.int64), start=np.empty(cap, np.int64), end=np.empty(cap, np.int64),
                kind=np.empty(cap, np.int8), ctx=np.empty(cap, np.int8), time=np.empty(cap, np.int64),
                code_start=np.empty(cap, np.int64), code_end=np.empty(cap, np.int64),
                code=np.empty(cap, np.uint64), val_start=np.empty(cap, np.int64),
                val_end=np.empty(cap, np.int64), reason=np.empty(cap, np.int8))
    m, end_ctx = scan(a, first_line, context, KEYWORD_TABLE, KEYWORD_LENGTHS, *cols.values())
    return {k: v[:m] for k, v in cols.items()}, int(end_ctx)


# ---------------------------------------------------------------- state per timestamp

DB_SLOT, DB_BIT_SLOT0, DBP_SLOT, N_SLOTS = 9, 10, 18, 19     # parsers/vcd.py's slots
# the state carried from block to block (int64 vector); slots' values come first
PENDING, PENDING_T, PENDING_LINES, PENDING_DB, PENDING_DBP = range(N_SLOTS, N_SLOTS + 5)
FINAL, FINAL_LINES, FINAL_DB, FINAL_DBP = range(N_SLOTS + 5, N_SLOTS + 9)
CARRY_SIZE = N_SLOTS + 9


@inlined
def _bit(c):
    return 0 if c == 48 else (1 if c == 49 else -1)


@compiled
def _byte_value(a, vs, ve):
    """Low 8 bits of a vector value left-extended as IEEE 1364 says (x or z pad with
    themselves, anything else with 0); -1 if any of them is x or z."""
    c = a[vs]
    pad = 120 if (c == 120 or c == 88) else (122 if (c == 122 or c == 90) else 48)
    value = 0
    for j in range(8):
        b = _bit(a[ve - 1 - j] if j < ve - vs else pad)
        if b < 0:
            return -1
        value |= b << j
    return value


@compiled
def _reversed(v):
    out = 0
    for j in range(8):
        out |= ((v >> j) & 1) << (7 - j)
    return out


@compiled
def combine(state, present, out, k):
    """Slot states -> lines, db (-1: not sampled), dbp (-1: not sampled) into out row k."""
    lines = 0
    for s in range(DB_SLOT):
        if present[s] and state[s] > 0:
            lines |= 1 << s
    db = -1
    if present[DB_SLOT]:
        db = state[DB_SLOT]
    elif present[DB_BIT_SLOT0]:
        db = 0
        for i in range(8):
            if state[DB_BIT_SLOT0 + i] < 0:
                db = -1
                break
            db |= state[DB_BIT_SLOT0 + i] << i
    out[k, 0] = lines
    out[k, 1] = db
    out[k, 2] = state[DBP_SLOT] if present[DBP_SLOT] else -1


@compiled
def rows(a, kind, ctx, time, val_start, val_end, code, feed_keys, long_hits, feed_slot, feed_flags,
         present, origin, num, den, carry, xz, out_t, out_row):
    """Apply the block's value changes in file order and close a row at each new timestamp.

    Item i changes feed f when its code is `feed_keys[f]` (packed; 0 for codes too long to
    pack, whose hits come as bit f of `long_hits[i]`, an empty array when there are none).
    `feed_flags[f]` bit 0: the DB vector, bit 1: its bits reversed ([0:7]), bit 2: inverted. `carry` holds each slot's
    value, the pending row (the last timestamp so far, which the next block may still
    change) and the last final row; it is updated. `xz[0]`/`xz[1]` count x/z values of
    control/data lines. Returns how many rows were emitted (those that change something)."""
    state = carry[:N_SLOTS]
    has_group = carry[PENDING] != 0
    group_t = carry[PENDING_T]
    row = np.empty((1, 3), np.int64)
    n_out = 0
    for i in range(kind.shape[0]):
        k = kind[i]
        if ctx[i] == KW_DUMPOFF:
            continue
        if k == TIME:
            t = (time[i] - origin) * num // den
            if has_group and t != group_t:     # the previous timestamp is final
                combine(state, present, row, 0)
                if carry[FINAL] == 0 or row[0, 0] != carry[FINAL_LINES] or row[0, 1] != carry[FINAL_DB] \
                        or row[0, 2] != carry[FINAL_DBP]:
                    out_t[n_out] = group_t
                    out_row[n_out, 0] = row[0, 0]
                    out_row[n_out, 1] = row[0, 1]
                    out_row[n_out, 2] = row[0, 2]
                    n_out += 1
                carry[FINAL] = 1
                carry[FINAL_LINES], carry[FINAL_DB], carry[FINAL_DBP] = row[0, 0], row[0, 1], row[0, 2]
            group_t = t
            has_group = True
            continue
        if k != SCALAR and k != VECTOR:
            continue
        mask = np.int64(long_hits[i]) if long_hits.shape[0] else np.int64(0)
        for f in range(feed_keys.shape[0]):
            if feed_keys[f] != 0 and code[i] == feed_keys[f]:
                mask |= np.int64(1) << f
        f = 0
        while mask:
            if mask & 1:
                flags = feed_flags[f]
                if flags & 1:
                    v = _byte_value(a, val_start[i], val_end[i])
                    if v >= 0 and flags & 2:
                        v = _reversed(v)
                    if v >= 0 and flags & 4:
                        v ^= 0xFF
                else:
                    v = _bit(a[val_end[i] - 1])
                    if v >= 0 and flags & 4:
                        v = 1 - v
                slot = feed_slot[f]
                if v < 0:
                    xz[0 if slot < DB_SLOT else 1] += 1
                state[slot] = v
            mask >>= 1
            f += 1
    if has_group:
        combine(state, present, row, 0)
        carry[PENDING] = 1
        carry[PENDING_T] = group_t
        carry[PENDING_LINES], carry[PENDING_DB], carry[PENDING_DBP] = row[0, 0], row[0, 1], row[0, 2]
    return n_out
