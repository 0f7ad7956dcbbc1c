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
from numba import njit

# outcome of a walk
END, TRUNCATED_SHORT, TRUNCATED_PDU, REDO_UNALIGNED = 0, 1, 2, 3


def layout(dtype: np.dtype) -> dict[str, tuple[int, int]]:
    """{field: (byte offset, size)} of the header dtype derived from the construct declaration."""
    return {name: (dtype.fields[name][1], dtype.fields[name][0].itemsize) for name in dtype.names}


@njit(cache=True, nogil=True)
def _uint(b, pos, size, big):
    """Unsigned integer of `size` bytes at `pos` (any alignment), in either byte order. Read
    little-endian, then swapped: a byte-order branch around the loads costs 5x."""
    v = np.uint64(0)
    for k in range(size - 1, -1, -1):
        v = (v << np.uint64(8)) | np.uint64(b[pos + k])
    return _swap(v, size) if big else v


@njit(cache=True, nogil=True)
def _swap(v, size):
    out = np.uint64(0)
    for k in range(size):
        out = (out << np.uint64(8)) | ((v >> np.uint64(8 * k)) & np.uint64(0xFF))
    return out


@njit(cache=True, nogil=True)
def _is_record(b, pos, big, header, magic_mask, magic):
    """A whole header fits at `pos` and starts with the three magic bytes (any version)."""
    return pos + header <= b.shape[0] and (_uint(b, pos, 4, big) & magic_mask) == magic


@njit(cache=True, nogil=True)
def _next_record(b, pos, big, aligned, header, magic_mask, magic):
    """The first offset after `pos` where a record could start (4-aligned ones only when
    `aligned`), or the end of the buffer."""
    step = 4 if aligned else 1
    q = (pos // step + 1) * step
    while q + header <= b.shape[0]:
        if (_uint(b, q, 4, big) & magic_mask) == magic:
            return q
        q += step
    return b.shape[0]


@njit(cache=True, nogil=True)
def _grow(a, n):
    if n < a.shape[0]:
        return a
    out = np.empty(max(2 * a.shape[0], 16), a.dtype)
    out[:n] = a[:n]
    return out


@njit(cache=True, nogil=True)
def walk(b, big, aligned, header, magic_mask, magic, pdu_len, time, action, cpu):
    """Follow the record chain from offset 0. `pdu_len`, `time`, `action`, `cpu` are
    (offset, size) of those header fields. A position that is not a record is bad; the walk
    goes on at the next position holding the magic bytes (a magic inside a PDU is never
    reached that way: records are chained by length). With `aligned`, the walk gives up
    (REDO_UNALIGNED) at the first record at an odd offset, and resynchronizes on 4-aligned
    offsets only. Returns (outcome, position of a truncated record or -1, record offsets,
    their time, action, cpu and version, bad offsets)."""
    n = b.shape[0]
    cap = n // header + 1
    offs = np.empty(cap, np.int64)
    t = np.empty(cap, np.int64)
    act = np.empty(cap, np.uint32)
    cp = np.empty(cap, np.uint32)
    ver = np.empty(cap, np.uint8)
    bad = np.empty(16, np.int64)
    nrec = 0
    nbad = 0
    outcome = END
    where = -1
    pos = 0
    while pos < n:
        if aligned and pos % 4:
            outcome = REDO_UNALIGNED
            break
        if _is_record(b, pos, big, header, magic_mask, magic):
            nxt = pos + header + np.int64(_uint(b, pos + pdu_len[0], pdu_len[1], big))
            if nxt > n:
                outcome, where = TRUNCATED_PDU, pos
                break
            offs[nrec] = pos
            t[nrec] = np.int64(_uint(b, pos + time[0], time[1], big))
            act[nrec] = np.uint32(_uint(b, pos + action[0], action[1], big))
            cp[nrec] = np.uint32(_uint(b, pos + cpu[0], cpu[1], big))
            ver[nrec] = np.uint8(_uint(b, pos, 4, big) & np.uint64(0xFF))
            nrec += 1
            pos = nxt
        elif n - pos < header:
            outcome, where = TRUNCATED_SHORT, pos
            break
        else:
            bad = _grow(bad, nbad)
            bad[nbad] = pos
            nbad += 1
            pos = _next_record(b, pos, big, aligned, header, magic_mask, magic)
    return outcome, where, offs[:nrec], t[:nrec], act[:nrec], cp[:nrec], ver[:nrec], bad[:nbad]


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


@njit(cache=True, nogil=True)
def fill(b, big, header, src, dest, fields, pdu, file_no, i64, u32, cpu, i16, flags):
    """Decode the records at byte offsets `src` of one file into rows `dest` of the event
    columns (rows of i64, u32, i16, flags: I64_COLUMNS, U32_COLUMNS, I16_COLUMNS, BOOL_COLUMNS;
    cpu alone). PDUs are big-endian whatever the header order, as the kernel writes them:
    a remap's source device and sector, or the one be64 of a split or an unplug."""
    for k in range(src.shape[0]):
        pos = src[k]
        r = dest[k]
        i64[0, r] = np.int64(_uint(b, pos + fields[F_TIME], 8, big))
        i64[1, r] = np.int64(_uint(b, pos + fields[F_SEQ], 4, big))
        i64[2, r] = np.int64(_uint(b, pos + fields[F_SECTOR], 8, big))
        i64[3, r] = np.int64(_uint(b, pos + fields[F_BYTES], 4, big))
        i64[4, r] = np.int64(_uint(b, pos + fields[F_PID], 4, big))
        i64[5, r] = 0
        i64[6, r] = 0
        i64[7, r] = pos
        action = np.int64(_uint(b, pos + fields[F_ACTION], 4, big))
        u32[0, r] = np.uint32(action)
        u32[1, r] = np.uint32(_uint(b, pos + fields[F_DEVICE], 4, big))
        u32[2, r] = 0
        cpu[r] = np.int32(np.uint32(_uint(b, pos + fields[F_CPU], 4, big)))
        i16[0, r] = np.int16(np.uint16(_uint(b, pos + fields[F_ERROR], 2, big)))
        i16[1, r] = file_no
        flags[0, r] = False
        flags[1, r] = False
        pdu_len = np.int64(_uint(b, pos + fields[F_PDU_LEN], 2, big))
        if pdu_len == 0 or action & pdu[P_NOTIFY]:
            continue
        skip = pdu[P_CGROUP_BYTES] if action & pdu[P_CGROUP] else 0
        start = pos + header + skip
        payload = pdu_len - skip
        code = action & 0xFFFF & ~pdu[P_CGROUP]
        if code == pdu[P_REMAP] and payload >= pdu[P_REMAP_SIZE]:
            u32[2, r] = np.uint32(_uint(b, start + pdu[P_DEV_FROM], 4, True))
            i64[5, r] = np.int64(_uint(b, start + pdu[P_SECTOR_FROM], 8, True))
            flags[0, r] = True
        elif (code == pdu[P_SPLIT] or code == pdu[P_UNPLUG] or code == pdu[P_TIMER_UNPLUG]) and payload >= 8:
            i64[6, r] = np.int64(_uint(b, start, 8, True))
            flags[1, r] = True
