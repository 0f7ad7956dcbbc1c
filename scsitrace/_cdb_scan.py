"""The CDB decode of `scsi.decode_cdb_matrix` as one compiled pass (numba): one loop over
the CDB rows, the rules of that function applied field by field, no temporary column
per rule. The opcode groups come in as 256-entry lookup tables built in scsi.py."""
from __future__ import annotations

from ._jit import compiled, inlined


@inlined
def _be(m, i, start, width):
    """Big-endian unsigned integer of `width` bytes from byte `start` of row `i`."""
    v = 0
    for b in range(start, start + width):
        v = (v << 8) | m[i, b]
    return v


@compiled
def decode(m, n, rw6, rw10, rw12, rw16, lun_groups, sa_name, no_name,
           opcode, has_op, name_at, lba, lba_known, blocks, blocks_known, lun, has_lun):
    """Per CDB row of `m` (at least 16 bytes) and its length `n` (-1: none): opcode, the
    index of its name (service actions of SERVICE ACTION IN(16) by `sa_name`, -1 where
    not one; `no_name` without an opcode), LBA and block count of READ/WRITE-like
    commands (by size class), LUN of SCSI-1 style CDBs, each with its validity."""
    for i in range(m.shape[0]):
        op = m[i, 0]
        k = n[i]
        sa = m[i, 1] & 0x1F
        opcode[i] = op
        has_op[i] = k >= 1
        if not has_op[i]:
            name_at[i] = no_name
        elif op == 0x9E and k >= 2 and sa_name[sa] >= 0:
            name_at[i] = sa_name[sa]
        else:
            name_at[i] = op
        is6 = has_op[i] and rw6[op] and k >= 6
        is10 = has_op[i] and rw10[op] and k >= 10
        is12 = has_op[i] and rw12[op] and k >= 12
        is16 = has_op[i] and rw16[op] and k >= 16
        lba[i], lba_known[i], blocks[i], blocks_known[i] = 0, False, 0, is6 or is10 or is12 or is16
        if is6:
            lba[i], lba_known[i] = (sa << 16) | _be(m, i, 2, 2), True
            blocks[i] = m[i, 4] if m[i, 4] != 0 else (0 if op == 0x0B else 256)
        elif is10:
            lba[i], lba_known[i], blocks[i] = _be(m, i, 2, 4), True, _be(m, i, 7, 2)
        elif is12:
            lba[i], lba_known[i], blocks[i] = _be(m, i, 2, 4), True, _be(m, i, 6, 4)
        elif is16:
            lba_known[i] = m[i, 2] < 0x80          # the 64-bit LBA fits an int64
            lba[i] = _be(m, i, 2, 8) if lba_known[i] else 0
            blocks[i] = _be(m, i, 10, 4)
        lun[i] = m[i, 1] >> 5
        has_lun[i] = has_op[i] and (is6 or is10 or (k >= 2 and lun_groups[op]))
