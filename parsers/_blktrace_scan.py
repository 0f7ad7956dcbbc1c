"""The compiled (numba) passes of the blktrace reader.

Records are variable length (a 48-byte header plus `pdu_len` bytes), so finding them is
inherently sequential: `walk` follows the chain once, by header lengths, and reads the few
header fields the reader needs before merging (time, action, CPU, version). `fill` then
decodes every kept record straight from the file's bytes into the event columns, at its
place in the merged order. Field offsets and sizes come from the construct declaration
(`FIELDS`, set by parsers/blktrace.py from its numpy dtype); numba freezes them as constants.
"""
from __future__ import annotations

import numpy as np
from scsitrace._jit import compiled, no_refcount

from ._bytes import u16, u32, u64

# outcome of a walk
END, TRUNCATED_SHORT, TRUNCATED_PDU, REDO_UNALIGNED = 0, 1, 2, 3


def layout(dtype: np.dtype) -> dict[str, tuple[int, int]]:
    """{field: (byte offset, size)} of the header dtype derived from the construct declaration."""
    return {name: (dtype.fields[name][1], dtype.fields[name][0].itemsize) for name in dtype.names}


@no_refcount
def _is_record(b, pos, big, header, magic_mask, magic):
    """A whole header fits at `pos` and starts with the three magic bytes (any version)."""
    return pos + header <= b.shape[0] and (u32(b, pos, big) & magic_mask) == magic


@no_refcount
def _next_record(b, pos, big, aligned, header, magic_mask, magic):
    """The first offset after `pos` where a record could start (4-aligned ones only when
    `aligned`), or the end of the buffer."""
    step = 4 if aligned else 1
    q = (pos // step + 1) * step
    while q + header <= b.shape[0]:
        if (u32(b, q, big) & magic_mask) == magic:
            return q
        q += step
    return b.shape[0]


@compiled
def _grow(a, n):
    if n < a.shape[0]:
        return a
    out = np.empty(max(2 * a.shape[0], 16), a.dtype)
    out[:n] = a[:n]
    return out


# walk(): the header fields it reads (entries of its `fields` argument: their offsets), with
# the width it reads each one at (checked against the declaration by the reader)
WALK_FIELDS = {"pdu_len": 2, "time": 8, "action": 4, "cpu": 4}
W_PDU_LEN, W_TIME, W_ACTION, W_CPU = range(4)
# walk(): what it checks each record against (entries of its `expect` argument)
E_NOTIFY, E_VERSION, E_CPU = range(3)          # the notify bit, the version, the file's CPU (-1: none)
# walk(): where `_walk_records` stopped and what it counted (entries of its `at` argument)
AT_POS, AT_DATA, AT_OTHER, AT_OUTCOME, AT_WHERE, AT_LAST_TIME, AT_UNSORTED, AT_WRONG_CPU, AT_FIRST_WRONG = range(9)
BAD = 4                       # `_walk_records` stopped at a bad record (walk goes on after it)


@compiled
def walk(b, big, aligned, header, magic_mask, magic, fields, expect):
    """Follow the record chain from offset 0. A position that is not a record is bad; the walk
    goes on at the next position holding the magic bytes (a magic inside a PDU is never
    reached that way: records are chained by length). With `aligned`, the walk gives up
    (REDO_UNALIGNED) at the first record at an odd offset, and resynchronizes on 4-aligned
    offsets only. Returns (outcome, position of a truncated record or -1, the offsets and
    times of the data records (neither notify records nor of another version), the offsets
    of the others, bad offsets, and `at` (counts: whether the data records' times ever go
    back, AT_UNSORTED; how many records of the version name another CPU than the file,
    AT_WRONG_CPU, and where the first is, AT_FIRST_WRONG))."""
    cap = b.shape[0] // header + 1
    offs, t, other = np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.int64)
    bad = np.empty(16, np.int64)
    nbad = 0
    at = np.zeros(9, np.int64)
    at[AT_WHERE], at[AT_FIRST_WRONG], at[AT_LAST_TIME] = -1, -1, np.iinfo(np.int64).min
    _walk_records(b, big, aligned, header, magic_mask, magic, fields, expect, offs, t, other, at)
    while at[AT_OUTCOME] == BAD:
        bad = _grow(bad, nbad)
        bad[nbad] = at[AT_POS]
        nbad += 1
        at[AT_POS] = _next_record(b, at[AT_POS], big, aligned, header, magic_mask, magic)
        _walk_records(b, big, aligned, header, magic_mask, magic, fields, expect, offs, t, other, at)
    return at[AT_OUTCOME], at[AT_WHERE], offs[:at[AT_DATA]], t[:at[AT_DATA]], other[:at[AT_OTHER]], bad[:nbad], at


@no_refcount
def _walk_records(b, big, aligned, header, magic_mask, magic, fields, expect, offs, t, other, at):
    """The chain from at[AT_POS] on, until the end, a truncated record, an odd offset (when
    `aligned`) or a bad record: at[] says which, where, and what it counted."""
    n = b.shape[0]
    pos, ndata, nother = at[AT_POS], at[AT_DATA], at[AT_OTHER]
    last, unsorted, wrong, first_wrong = at[AT_LAST_TIME], at[AT_UNSORTED], at[AT_WRONG_CPU], at[AT_FIRST_WRONG]
    outcome = -1
    while outcome < 0:
        nxt = pos + header + np.int64(u16(b, pos + fields[W_PDU_LEN], big)) if pos + header <= n else n + 1
        if pos >= n:
            outcome = END
        elif aligned and pos % 4:
            outcome = REDO_UNALIGNED
        elif not _is_record(b, pos, big, header, magic_mask, magic):
            outcome = TRUNCATED_SHORT if n - pos < header else BAD
        elif nxt > n:
            outcome = TRUNCATED_PDU
        else:
            time = np.int64(u64(b, pos + fields[W_TIME], big))
            known = np.int64(u32(b, pos, big) & np.uint64(0xFF)) == expect[E_VERSION]
            data = known and (np.int64(u32(b, pos + fields[W_ACTION], big)) & expect[E_NOTIFY]) == 0
            offs[ndata] = pos
            t[ndata] = time
            ndata += 1 if data else 0
            other[nother] = pos
            nother += 0 if data else 1
            unsorted |= data and time < last
            last = time if data else last
            cpu_wrong = known and expect[E_CPU] >= 0 and np.int64(u32(b, pos + fields[W_CPU], big)) != expect[E_CPU]
            first_wrong = pos if cpu_wrong and wrong == 0 else first_wrong
            wrong += 1 if cpu_wrong else 0
            pos = nxt
    at[AT_POS], at[AT_DATA], at[AT_OTHER], at[AT_OUTCOME] = pos, ndata, nother, outcome
    at[AT_LAST_TIME], at[AT_UNSORTED], at[AT_WRONG_CPU], at[AT_FIRST_WRONG] = last, unsorted, wrong, first_wrong
    at[AT_WHERE] = pos if outcome == TRUNCATED_SHORT or outcome == TRUNCATED_PDU else -1


# fill(): the header fields it reads (entries of its `fields` argument: their offsets), with
# the width it reads each one at (checked against the declaration by the reader)
FILL_FIELDS = {"time": 8, "sequence": 4, "sector": 8, "bytes": 4, "pid": 4, "action": 4, "device": 4, "cpu": 4,
               "error": 2, "pdu_len": 2}
F_TIME, F_SEQ, F_SECTOR, F_BYTES, F_PID, F_ACTION, F_DEVICE, F_CPU, F_ERROR, F_PDU_LEN = range(10)
I64_COLUMNS = ("time_abs", "seq", "sector", "bytes", "pid", "pdu_sector", "pdu_int", "position")
U32_COLUMNS = ("action", "device", "pdu_dev")
I16_COLUMNS = ("error", "file")
BOOL_COLUMNS = ("has_remap", "has_int")
# fill(): the PDU rules (entries of its `pdu` argument)
P_REMAP, P_SPLIT, P_UNPLUG, P_TIMER_UNPLUG, P_NOTIFY, P_CGROUP, P_CGROUP_BYTES, P_REMAP_SIZE, \
    P_DEV_FROM, P_SECTOR_FROM = range(10)
REMAP_FIELDS = {"device_from": 4, "sector_from": 8}       # read widths, as FILL_FIELDS


@no_refcount
def fill(b, big, header, src, dest, fields, pdu, file_no, i64, words, cpu, i16, flags):
    """Decode the records at byte offsets `src` of one file into rows `dest` of the event
    columns (rows of i64, words, i16, flags: I64_COLUMNS, U32_COLUMNS, I16_COLUMNS,
    BOOL_COLUMNS; cpu alone). PDUs are big-endian whatever the header order, as the kernel writes them:
    a remap's source device and sector, or the one be64 of a split or an unplug."""
    for k in range(src.shape[0]):
        pos = src[k]
        r = dest[k]
        i64[0, r] = np.int64(u64(b, pos + fields[F_TIME], big))
        i64[1, r] = np.int64(u32(b, pos + fields[F_SEQ], big))
        i64[2, r] = np.int64(u64(b, pos + fields[F_SECTOR], big))
        i64[3, r] = np.int64(u32(b, pos + fields[F_BYTES], big))
        i64[4, r] = np.int64(u32(b, pos + fields[F_PID], big))
        i64[5, r] = 0
        i64[6, r] = 0
        i64[7, r] = pos
        action = np.int64(u32(b, pos + fields[F_ACTION], big))
        words[0, r] = np.uint32(action)
        words[1, r] = np.uint32(u32(b, pos + fields[F_DEVICE], big))
        words[2, r] = 0
        cpu[r] = np.int32(np.uint32(u32(b, pos + fields[F_CPU], big)))
        i16[0, r] = np.int16(np.uint16(u16(b, pos + fields[F_ERROR], big)))
        i16[1, r] = file_no
        flags[0, r] = False
        flags[1, r] = False
        kind, start = _pdu(b, big, header, pos, action, fields, pdu)
        if kind == PDU_REMAP:
            words[2, r] = np.uint32(u32(b, start + pdu[P_DEV_FROM], True))
            i64[5, r] = np.int64(u64(b, start + pdu[P_SECTOR_FROM], True))
            flags[0, r] = True
        elif kind == PDU_INT:
            i64[6, r] = np.int64(u64(b, start, True))
            flags[1, r] = True


PDU_NONE, PDU_REMAP, PDU_INT = range(3)


@no_refcount
def _pdu(b, big, header, pos, action, fields, pdu):
    """What the PDU of the record at `pos` holds for the reader: (PDU_REMAP: a remap's source
    device and sector; PDU_INT: the one be64 of a split or an unplug; PDU_NONE), and where
    its payload starts."""
    pdu_len = np.int64(u16(b, pos + fields[F_PDU_LEN], big))
    skip = pdu[P_CGROUP_BYTES] if action & pdu[P_CGROUP] else 0
    payload = pdu_len - skip
    code = action & 0xFFFF & ~pdu[P_CGROUP]
    kind = PDU_NONE
    if pdu_len == 0 or action & pdu[P_NOTIFY]:
        kind = PDU_NONE
    elif code == pdu[P_REMAP] and payload >= pdu[P_REMAP_SIZE]:
        kind = PDU_REMAP
    elif (code == pdu[P_SPLIT] or code == pdu[P_UNPLUG] or code == pdu[P_TIMER_UNPLUG]) and payload >= 8:
        kind = PDU_INT
    return kind, pos + header + skip


@no_refcount
def fill_machine(b, big, header, src, dest, fields, pdu, origin, t, action, device, sector, nbytes, pid, pdu_dev,
                 pdu_sector):
    """What the block analysis reads of each record (time from `origin`, action, device, sector,
    bytes, pid; a remap's source device and sector, else 0), decoded as `fill` decodes it into
    rows `dest`."""
    for k in range(src.shape[0]):
        pos = src[k]
        r = dest[k]
        a = np.int64(u32(b, pos + fields[F_ACTION], big))
        t[r] = np.int64(u64(b, pos + fields[F_TIME], big)) - origin
        action[r] = np.uint32(a)
        device[r] = np.uint32(u32(b, pos + fields[F_DEVICE], big))
        sector[r] = np.int64(u64(b, pos + fields[F_SECTOR], big))
        nbytes[r] = np.int64(u32(b, pos + fields[F_BYTES], big))
        pid[r] = np.int64(u32(b, pos + fields[F_PID], big))
        kind, start = _pdu(b, big, header, pos, a, fields, pdu)
        remap = kind == PDU_REMAP
        pdu_dev[r] = np.uint32(u32(b, start + pdu[P_DEV_FROM], True)) if remap else np.uint32(0)
        pdu_sector[r] = np.int64(u64(b, start + pdu[P_SECTOR_FROM], True)) if remap else 0
