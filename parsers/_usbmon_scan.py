"""The usbmon header checks and derived URB columns in one compiled pass (numba), over
the header fields parsers/usbmon.py reads; the rules are those of its docstring."""
from __future__ import annotations

import numpy as np
from numba import njit

SHORT, BAD_TYPE, BAD_XFER, BAD_LEN_CAP = 1, 2, 3, 4    # why a record is bad, in checking order
ISO = 0


@njit(cache=True, nogil=True)
def derive(buf, caplen, header_size, mmapped, ev, xfer, ndesc, len_cap, flag_data, flag_setup, ts_sec, ts_usec,
           length, head_after_48, head_after_64, data_offset, iso_descriptor_bytes, data_prefix,
           bad, t_ns, length64, data_at, data_size, data_len, has_setup, data_head):
    """Per packet: `bad` (0 or the first failed check), time, URB length, where its data
    starts (after ISO descriptors), data bytes kept (-1: none) and captured, setup flag,
    first 4 data bytes (from the words read after each header size, or for ISO packets
    from the file). Returns the number of bad packets."""
    n_bad = 0
    for i in range(caplen.shape[0]):
        size = header_size[i]
        iso = np.int64(ndesc[i]) * iso_descriptor_bytes if (xfer[i] == ISO and mmapped[i]) else 0
        if caplen[i] < size:
            bad[i] = SHORT
        elif not (ev[i] == 83 or ev[i] == 67 or ev[i] == 69):      # S C E
            bad[i] = BAD_TYPE
        elif xfer[i] > 3:
            bad[i] = BAD_XFER
        elif size + iso + np.int64(len_cap[i]) > caplen[i]:
            bad[i] = BAD_LEN_CAP
        else:
            bad[i] = 0
        n_bad += bad[i] != 0
        t_ns[i] = np.int64(ts_sec[i]) * 1_000_000_000 + np.int64(ts_usec[i]) * 1000
        length64[i] = length[i]
        data_at[i] = data_offset[i] + size + iso
        has_data = flag_data[i] == 0 and len_cap[i] > 0
        data_size[i] = min(np.int64(len_cap[i]), data_prefix) if has_data else -1
        data_len[i] = len_cap[i] if has_data else 0
        has_setup[i] = flag_setup[i] == 0 and ev[i] == 83
        if iso == 0:
            data_head[i] = head_after_64[i] if mmapped[i] else head_after_48[i]
        elif bad[i] == 0 and data_size[i] >= 4:
            p = data_at[i]
            data_head[i] = (np.uint32(buf[p]) | (np.uint32(buf[p + 1]) << 8) | (np.uint32(buf[p + 2]) << 16)
                            | (np.uint32(buf[p + 3]) << 24))
        else:
            data_head[i] = 0
    return n_bad
