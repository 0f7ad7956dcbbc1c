"""Compiled (numba) passes of the usb layer over URB columns, one loop each, no row objects.

`pair_urbs` pairs each submit with its completion by URB id (an open-addressing table of
ids, sized to the URBs in flight, not to the capture); `bot_pass` groups the bulk
transfers of Bulk-Only devices into commands (CBW -> data -> CSW) and aggregates each
command's times and counts. Both follow, field for field, the rules documented in
scsitrace/usb.py; null times are `NULL` (int64 min).
"""
from __future__ import annotations

import numpy as np

from ._jit import compiled, inlined
from ._keys import find, grow, home, remove
from .srt import NULL, place as srt_place

EV_S, EV_C, EV_E = ord("S"), ord("C"), ord("E")
EPIPE, EREMOTEIO = -32, -121
CSW_BYTES = 13
CBW_BYTES = 31
CBW_SIGNATURE = np.uint32(0x43425355)   # "USBC", little-endian
CSW_SIGNATURE = np.uint32(0x53425355)   # "USBS"
# transfer classes (bot_pass): why a bulk transfer is not inside a BOT command
BEFORE_CBW_DATA, BEFORE_CBW_CSW, NOT_BOT = 1, 2, 3
def pair_urbs(urb_id: np.ndarray, event: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Transfers as (submit row, completion row), -1 where absent, in row order.

    A submit pairs with the next event of its URB id when that is a completion (C or E);
    a completion not preceded (within its id) by a submit is a transfer on its own. So
    only submits still waiting for their completion need remembering: the table holds
    those (the URBs in flight), not every id of the capture."""
    n = len(urb_id)
    rows = np.empty((2, n), np.int64)     # big arrays come from numpy (lazy, huge pages)
    count = _pair_urbs(urb_id, event, rows)
    return rows[0, :count], rows[1, :count]


@compiled
def _pair_urbs(urb_id, event, rows):
    """One pass: a transfer is numbered when its naming event (submit, or lone completion)
    is met, so transfers come out in row order; the table maps a waiting submit's URB id
    to its transfer number, where its completion row is filled in."""
    keys = np.zeros(1 << 10, np.uint64)
    vals = np.full(1 << 10, -1, np.int64)     # the waiting submit's transfer
    waiting = 0
    count = 0
    for r in range(urb_id.shape[0]):
        # the slot of the URB id (the probe of find, written out: a call with array
        # arguments costs more than the probe)
        mask = keys.shape[0] - 1
        h = home(urb_id[r], mask)
        while vals[h] >= 0 and keys[h] != urb_id[r]:
            h = (h + 1) & mask
        if event[r] == EV_S:
            if 2 * (waiting + 1) > keys.shape[0]:
                keys, vals = grow(keys, vals)
                h = find(keys, vals, urb_id[r])
            if vals[h] < 0:
                waiting += 1
                keys[h] = urb_id[r]
            vals[h] = count
            rows[0, count], rows[1, count] = r, -1
            count += 1
        elif event[r] == EV_C or event[r] == EV_E:
            if vals[h] >= 0:
                rows[1, vals[h]] = r
                remove(keys, vals, h)
                waiting -= 1
            else:
                rows[0, count], rows[1, count] = -1, r
                count += 1
        else:   # another event still ends the wait of a submit (it is not its completion)
            if vals[h] >= 0:
                remove(keys, vals, h)
                waiting -= 1
    return count


def transfer_columns(s_row, c_row, t_ns, status, status_null, length, ep, xfer, bus, dev):
    """Per transfer: (naming row, data row, submit time, completion time, status, status
    unknown, requested length, actual length, direction IN, transfer type, (bus << 8) |
    device address), and whether the transfers are in time order of their submit, else
    completion. IN transfers move the completion's data, OUT transfers the submit's (a
    lone completion: its own)."""
    n = len(s_row)
    ints = np.empty((7, n), np.int64)
    out = (ints[0], ints[1], ints[2], ints[3], np.zeros(n, np.int32), np.ones(n, np.bool_), ints[4], ints[5],
           np.empty(n, np.bool_), np.empty(n, np.uint8), ints[6])
    in_order = _transfer_columns(s_row, c_row, t_ns, status, status_null, length, ep, xfer, bus, dev, *out)
    return out, in_order


@compiled
def _transfer_columns(s_row, c_row, t_ns, status, status_null, length, ep, xfer, bus, dev,
                      row, data_row, submit, complete, st, st_null, req, act, dir_in, kind, bus_dev):
    in_order = True
    prev = np.iinfo(np.int64).min
    for k in range(s_row.shape[0]):
        s, c = s_row[k], c_row[k]
        r = s if s >= 0 else c
        row[k] = r
        dir_in[k] = (ep[r] & 0x80) != 0
        data_row[k] = c if (dir_in[k] or s < 0) else s
        submit[k] = t_ns[s] if s >= 0 else NULL
        req[k] = length[s] if s >= 0 else NULL
        complete[k] = t_ns[c] if c >= 0 else NULL
        act[k] = length[c] if c >= 0 else NULL
        if c >= 0:
            st[k] = status[c]
            st_null[k] = status_null[c]
        kind[k] = xfer[r]
        bus_dev[k] = (np.int64(bus[r]) << 8) | dev[r]
        in_order = in_order and t_ns[r] >= prev
        prev = t_ns[r]
    return in_order


@inlined
def _min(cur, v):
    return v if v != NULL and (cur == NULL or v < cur) else cur


@inlined
def _max(cur, v):
    return v if v != NULL and (cur == NULL or v > cur) else cur


BOT_AGGREGATES = ("first", "last", "csw", "n_csw", "sts_s", "sts_c", "data_s", "data_c", "data_bytes",
                  "stalls", "data_in")
FIRST, LAST, CSW_K, N_CSW, STS_S, STS_C, DATA_S, DATA_C, DATA_BYTES, STALLS, DATA_IN = range(len(BOT_AGGREGATES))


def bot_pass(xfer, dir_in, device, data_row, submit_ns, complete_ns, status, status_null,
             req_len, actual, data_buf, data_at, data_size, data_head, n_devices):
    """Bulk-Only commands from transfers in time order (every array is per transfer).

    Returns (per command: a dict of BOT_AGGREGATES: first transfer (the CBW), last-of-
    device flag, CSW transfer or -1, CSW count, status-stage start, CSW completion, data
    start, data end, data bytes, stalls, data direction (-1 unknown, 0 out, 1 in); the
    CBW bytes; the CSW bytes (the first CSW's) and their count, -1 for none), then per
    transfer its class (0 in a command or not bulk, BEFORE_CBW_DATA, BEFORE_CBW_CSW,
    NOT_BOT). Signatures come from `data_head`; only CBWs and CSWs are read in `data_buf`.

    A command is the CBW and every bulk transfer of its device up to the next CBW. Status
    stage: the CSW, and failed reads of CSW size before it. Data: the other transfers;
    bytes only from those that completed (status 0 or -EREMOTEIO)."""
    n = len(xfer)
    # outputs sized for the worst case (a CBW per transfer): untouched pages cost nothing
    ints = np.empty((len(BOT_AGGREGATES), n), np.int64)
    cbw, csw = np.empty((n, CBW_BYTES), np.uint8), np.empty((n, CSW_BYTES), np.uint8)
    csw_size, kind = np.empty(n, np.int64), np.zeros(n, np.int8)
    n_cmd = _bot_pass(xfer, dir_in, device, data_row, submit_ns, complete_ns, status, status_null, req_len,
                      actual, data_buf, data_at, data_size, data_head, n_devices, ints, cbw, csw, csw_size, kind)
    agg = dict(zip(BOT_AGGREGATES, ints[:, :n_cmd]))
    agg["last"] = agg["last"] == 1
    return agg, cbw[:n_cmd], csw[:n_cmd], csw_size[:n_cmd], kind


@compiled
def _bot_pass(xfer, dir_in, device, data_row, submit_ns, complete_ns, status, status_null, req_len, actual,
              data_buf, data_at, data_size, data_head, n_devices, ints, cbw, csw, csw_size, kind):
    n = xfer.shape[0]
    bot = np.zeros(n_devices, np.bool_)
    before_cbw = False
    # each device's open command is aggregated in a row of `acc` (a cache line, not 11
    # output streams) and written out to `ints` once, when its device's next CBW or the
    # end of the capture closes it
    acc = np.empty((n_devices, ints.shape[0]), np.int64)
    current = np.full(n_devices, -1, np.int64)
    m = 0
    for k in range(n):
        if xfer[k] != 3:
            continue
        d = device[k]
        r = data_row[k]
        signed = r >= 0 and data_size[r] >= 4
        is_cbw = signed and not dir_in[k] and data_head[r] == CBW_SIGNATURE and data_size[r] >= CBW_BYTES
        is_csw = signed and dir_in[k] and data_head[r] == CSW_SIGNATURE and actual[k] == CSW_BYTES
        if is_cbw:
            bot[d] = True
            for b in range(CBW_BYTES):
                cbw[m, b] = data_buf[data_at[r] + b]
            if current[d] >= 0:
                _close(acc, d, ints, current[d])
            acc[d, FIRST], acc[d, LAST], acc[d, CSW_K], acc[d, N_CSW] = k, 0, -1, 0
            acc[d, STS_S], acc[d, STS_C], acc[d, DATA_S], acc[d, DATA_C] = NULL, NULL, NULL, NULL
            acc[d, DATA_BYTES], acc[d, STALLS], acc[d, DATA_IN] = 0, 0, -1
            csw_size[m] = -1
            current[d] = m
            m += 1
        c = current[d]
        if c < 0:     # NOT_BOT instead, below, if the device never sends a CBW
            kind[k] = BEFORE_CBW_CSW if is_csw else BEFORE_CBW_DATA
            before_cbw = True
            continue
        has_status = not status_null[k]
        st = status[k]
        if is_csw:
            if acc[d, N_CSW] == 0:
                acc[d, CSW_K] = k
                acc[d, STS_C] = complete_ns[k]
                r = data_row[k]
                csw_size[c] = data_size[r]
                for b in range(min(data_size[r], CSW_BYTES)):
                    csw[c, b] = data_buf[data_at[r] + b]
            acc[d, N_CSW] += 1
        # a failed read of CSW size is a status-stage retry (unknown when a value is null)
        retry_known = (not dir_in[k]) or is_csw or (req_len[k] != NULL and req_len[k] != CSW_BYTES) \
            or (has_status and st == 0)
        retry = dir_in[k] and not is_csw and req_len[k] == CSW_BYTES and has_status and st != 0
        if is_csw or retry:
            acc[d, STS_S] = _min(acc[d, STS_S], submit_ns[k])
        if not is_cbw and not is_csw and retry_known:
            acc[d, DATA_S] = _min(acc[d, DATA_S], submit_ns[k])
            acc[d, DATA_C] = _max(acc[d, DATA_C], complete_ns[k])
            if has_status and (st == 0 or st == EREMOTEIO) and actual[k] != NULL:
                acc[d, DATA_BYTES] += actual[k]
            if acc[d, DATA_IN] < 0:
                acc[d, DATA_IN] = 1 if dir_in[k] else 0
        if has_status and st == EPIPE:
            acc[d, STALLS] += 1
    for d in range(n_devices):
        if current[d] >= 0:
            acc[d, LAST] = 1
            _close(acc, d, ints, current[d])
    if before_cbw:
        for k in range(n):
            if xfer[k] == 3 and not bot[device[k]]:
                kind[k] = NOT_BOT
    return m


BOT_FIELDS = ("usb_tag", "bytes", "lun", "cb_len", "csw_tag", "residue", "csw_status", "reason")
NO_CSW_AT_END, NO_CSW_BEFORE_NEXT, TAG_DIFFERS, PAIRED = range(4)    # `reason` codes


def bot_fields(cbw, csw, csw_size, n_csw, last, sts_c) -> dict:
    """Per Bulk-Only command (bot_pass' outputs): the CBW's tag, transfer length, LUN and
    CDB length, the CSW's tag, residue and status (values where its `csw_size` bytes
    hold none are not to be read), the CBW's direction flag (`flag_in`), and why it is
    unpaired (`reason`, checked in this order: no CSW up to the end of the capture or the
    next CBW, a CSW with another tag, a CSW not completed (end of capture); else PAIRED)."""
    n = len(cbw)
    ints, flag_in = np.empty((len(BOT_FIELDS), n), np.int64), np.empty(n, np.bool_)
    _bot_fields(cbw, csw, csw_size, n_csw, last, sts_c, ints, flag_in)
    return {**dict(zip(BOT_FIELDS, ints)), "flag_in": flag_in}


@compiled
def _bot_fields(cbw, csw, csw_size, n_csw, last, sts_c, ints, flag_in):
    for c in range(cbw.shape[0]):
        tag = _le32(cbw, c, 4)
        ints[0, c], ints[1, c], ints[2, c], ints[3, c] = tag, _le32(cbw, c, 8), cbw[c, 13] & 0x0F, cbw[c, 14] & 0x1F
        ints[4, c], ints[5, c], ints[6, c] = _le32(csw, c, 4), _le32(csw, c, 8), csw[c, 12]
        flag_in[c] = (cbw[c, 12] & 0x80) != 0
        if n_csw[c] == 0:
            ints[7, c] = NO_CSW_AT_END if last[c] else NO_CSW_BEFORE_NEXT
        elif csw_size[c] >= 8 and ints[4, c] != tag:
            ints[7, c] = TAG_DIFFERS
        elif sts_c[c] == NULL:
            ints[7, c] = NO_CSW_AT_END
        else:
            ints[7, c] = PAIRED


@inlined
def _le32(rows, r, at):
    """The little-endian uint32 at byte `at` of row `r`."""
    return np.int64(rows[r, at]) | (np.int64(rows[r, at + 1]) << 8) | (np.int64(rows[r, at + 2]) << 16) \
        | (np.int64(rows[r, at + 3]) << 24)


@inlined
def _close(acc, d, ints, c):
    """Write device `d`'s aggregates out as those of command `c`."""
    for j in range(acc.shape[1]):
        ints[j, c] = acc[d, j]


@compiled
def take_bytes(buf, at, counts, width):
    """(len(at), width) bytes: the first `counts[i]` (at most `width`) bytes from each
    position, zero after them."""
    out = np.zeros((at.shape[0], width), np.uint8)
    for i in range(at.shape[0]):
        p = at[i]
        for b in range(min(counts[i], width)):
            out[i, b] = buf[p + b]
    return out


STAGE_ORDER = ("COMMAND", "GAP", "DATA IN", "DATA OUT", "STATUS")   # `phase_code` order below


@inlined
def _piece(block, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in):
    """A command's piece number `block` (0 COMMAND, 1 GAP to its data or status, 2 DATA,
    3 GAP after the data, 4 STATUS): (start, end, index in STAGE_ORDER); start or end
    NULL when the command has no such piece."""
    start, end, stage = NULL, NULL, 0
    if cmd_s == NULL:
        pass
    elif block == 0:
        start, end, stage = cmd_s, cmd_c, 0
    elif block == 1:
        start, end, stage = cmd_c, d0 if d0 != NULL else s0, 1
    elif block == 2:
        if data_c != NULL:
            start, end, stage = d0, data_c, 2 if data_in else 3
    elif block == 3:
        if data_c != NULL:
            start, end, stage = data_c, s0, 1
    else:
        start, end, stage = s0, sts_c, 4
    return start, end, stage


@inlined
def _after(dev, start, block, prev_dev, prev_start, prev_block):
    """Whether a piece comes at or after the previous one in (device, start, block) order."""
    return dev > prev_dev or (dev == prev_dev and (start > prev_start or (start == prev_start and block >= prev_block)))


@compiled
def stage_pieces(dev, io, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_bytes, data_in, phase_code, by_command, out):
    """Stage pieces of commands (per command columns; NULL times unknown; `_piece`) as rows
    of `out` (srt.PIECE_COLUMNS: device, io, start, end, phase, bytes), block by block:
    every COMMAND, every GAP before the data (or status), every DATA, every GAP after the
    data, every STATUS; or, with `by_command`, command by command (each one's pieces in
    that block order). Returns the count and whether the pieces came out in (device,
    start, block) order: then they are also in the order a stable sort of the
    block-by-block pieces by (device, start) gives (ties: block, then command)."""
    n = dev.shape[0]
    m = 0
    in_order = True
    prev_dev, prev_start, prev_block = np.int64(-1), NULL, -1
    for a in range(5 * n):
        block, i = (a % 5, a // 5) if by_command else (a // n, a % n)
        start, end, stage = _piece(block, cmd_s[i], cmd_c[i], d0[i], s0[i], data_c[i], sts_c[i], data_in[i])
        if start == NULL or end == NULL:
            continue
        out[m, 0], out[m, 1], out[m, 2], out[m, 3], out[m, 4] = dev[i], io[i], start, end, phase_code[stage]
        out[m, 5] = data_bytes[i] if block == 2 else NULL
        m += 1
        in_order = in_order and _after(dev[i], start, block, prev_dev, prev_start, prev_block)
        prev_dev, prev_start, prev_block = dev[i], start, block
    return m, in_order


@compiled
def stage_totals(dev, cmd_s, cmd_c, d0, s0, data_c, sts_c, data_in, phase_code, idle, elapsed, totals, counts):
    """The tiling totals (srt.tile's `totals`, as time and segments per phase code) of the
    pieces stage_pieces lists command by command, tiled as they are listed, without a
    piece table, provided they come in (device, start, block) order. Returns whether they
    did (else the totals are incomplete: list and tile the pieces) and how many devices
    have segments."""
    devices = 0
    prev_dev, prev_start, prev_block = np.int64(-1), NULL, -1
    covered, last_end = np.int64(-1), np.int64(-1)
    for i in range(dev.shape[0]):
        for block in range(5):
            start, end, stage = _piece(block, cmd_s[i], cmd_c[i], d0[i], s0[i], data_c[i], sts_c[i], data_in[i])
            if start == NULL or end == NULL:
                continue
            if not _after(dev[i], start, block, prev_dev, prev_start, prev_block):
                return False, 0
            if dev[i] != prev_dev:
                devices += _close_device(last_end, elapsed, idle, totals, counts)
                covered, last_end = np.int64(-1), np.int64(-1)
            prev_dev, prev_start, prev_block = dev[i], start, block
            kept, s, idle_from, covered, last_end = srt_place(start, end, covered, last_end)
            if kept:
                totals[idle] += s - idle_from
                counts[idle] += idle_from < s
                totals[phase_code[stage]] += end - s
                counts[phase_code[stage]] += 1
    devices += _close_device(last_end, elapsed, idle, totals, counts)
    return True, devices


@inlined
def _close_device(last_end, elapsed, idle, totals, counts):
    """The IDLE after a device's last segment (none: last_end < 0); 1 if it had segments."""
    if last_end < 0:
        return 0
    if elapsed > last_end:
        totals[idle] += elapsed - last_end
        counts[idle] += 1
    return 1
