"""SCSI command set facts shared by every layer: CDB decode, opcode names, status and
message codes (SAM-5, SPC-4, SBC-3, MMC-6 spellings as Wireshark prints them)."""
from __future__ import annotations

import functools
from .command_sets import COMMAND_SETS, MMC_CD

OPCODE_NAMES = {
    0x00: "Test Unit Ready", 0x01: "Rezero Unit", 0x03: "Request Sense", 0x04: "Format Unit",
    0x08: "Read(6)", 0x0A: "Write(6)", 0x0B: "Seek(6)", 0x12: "Inquiry", 0x15: "Mode Select(6)",
    0x16: "Reserve(6)", 0x17: "Release(6)", 0x1A: "Mode Sense(6)", 0x1B: "Start Stop Unit",
    0x1D: "Send Diagnostic", 0x1E: "Prevent Allow Medium Removal", 0x23: "Read Format Capacities",
    0x25: "Read Capacity(10)", 0x28: "Read(10)", 0x2A: "Write(10)", 0x2B: "Seek(10)",
    0x2E: "Write And Verify(10)", 0x2F: "Verify(10)", 0x35: "Synchronize Cache(10)",
    0x3B: "Write Buffer", 0x3C: "Read Buffer", 0x42: "Unmap", 0x43: "Read TOC/PMA/ATIP",
    0x46: "Get Configuration", 0x4A: "Get Event Status Notification", 0x51: "Read Disc Information",
    0x55: "Mode Select(10)", 0x5A: "Mode Sense(10)", 0x85: "ATA Pass-Through(16)",
    0x88: "Read(16)", 0x8A: "Write(16)", 0x8F: "Verify(16)", 0x91: "Synchronize Cache(16)",
    0x93: "Write Same(16)", 0x9E: "Service Action In(16)", 0xA0: "Report LUNs",
    0xA1: "ATA Pass-Through(12)", 0xA3: "Maintenance In", 0xA8: "Read(12)", 0xAA: "Write(12)",
    0xAD: "Read DVD Structure", 0xBD: "Mechanism Status", 0xBE: "Read CD", **MMC_CD,
}
# more of SPC/SBC and the MMC (CD/DVD) commands real captures use (vendor opcodes, such as the
# NEC drives' 0xD8-0xDE, are named by a command set: command_sets.py, --command-set)
OPCODE_NAMES.update({
    0x07: "Reassign Blocks", 0x1C: "Receive Diagnostic Results", 0x34: "Pre-Fetch(10)",
    0x37: "Read Defect Data(10)", 0x3E: "Read Long(10)", 0x3F: "Write Long(10)", 0x41: "Write Same(10)",
    0x48: "Play Audio Track Index", 0x4C: "Log Select", 0x4D: "Log Sense",
    0x52: "Read Track Information", 0x53: "Reserve Track", 0x54: "Send OPC Information",
    0x58: "Repair Track", 0x5B: "Close Track/Session", 0x5C: "Read Buffer Capacity",
    0x5D: "Send Cue Sheet", 0x5E: "Persistent Reserve In", 0x5F: "Persistent Reserve Out",
    0x7F: "Variable Length CDB", 0x83: "Extended Copy", 0x84: "Receive Copy Results",
    0x89: "Compare And Write", 0x8E: "Write And Verify(16)", 0x9F: "Service Action Out(16)",
    0xA2: "Security Protocol In", 0xA4: "Report Key",
    0xA6: "Load/Unload Medium", 0xA7: "Set Read Ahead", 0xAC: "Get Performance", 0xAF: "Verify(12)",
    0xB5: "Security Protocol Out", 0xB6: "Set Streaming", 0xBF: "Send DVD Structure",
})
SERVICE_ACTION_IN_16 = {0x10: "Read Capacity(16)", 0x12: "Get LBA Status"}

READ_OPS = {0x08, 0x28, 0xA8, 0x88}
WRITE_OPS = {0x0A, 0x2A, 0xAA, 0x8A, 0x2E}
FLUSH_OPS = {0x35, 0x91}          # SYNCHRONIZE CACHE (10), (16)
DISCARD_OPS = {0x42}              # UNMAP

STATUS_NAMES = {
    0x00: "GOOD", 0x02: "CHECK CONDITION", 0x04: "CONDITION MET", 0x08: "BUSY",
    0x10: "INTERMEDIATE", 0x14: "INTERMEDIATE-CONDITION MET", 0x18: "RESERVATION CONFLICT",
    0x22: "COMMAND TERMINATED", 0x28: "TASK SET FULL", 0x30: "ACA ACTIVE", 0x40: "TASK ABORTED",
}
ERROR = "ERROR"
# `status` of every layer's I/Os (schema.py, one vocabulary): a SAM status name, or ERROR when
# the I/O failed below SCSI without one (a block completion's errno, a Bulk-Only PHASE ERROR, a
# host byte other than DID_OK; the layer's own word in `status_detail`); "0xNN" for a reserved
# status code; null when no completion was seen.
STATUSES = (*STATUS_NAMES.values(), ERROR)

# sense keys (SPC-4 table 27), as sg3_utils names them
SENSE_KEY_NAMES = {
    0x0: "No Sense", 0x1: "Recovered Error", 0x2: "Not Ready", 0x3: "Medium Error",
    0x4: "Hardware Error", 0x5: "Illegal Request", 0x6: "Unit Attention", 0x7: "Data Protect",
    0x8: "Blank Check", 0x9: "Vendor Specific", 0xA: "Copy Aborted", 0xB: "Aborted Command",
    0xC: "Equal", 0xD: "Volume Overflow", 0xE: "Miscompare", 0xF: "Completed",
}

MESSAGE_NAMES = {
    0x00: "COMMAND COMPLETE", 0x01: "EXTENDED MESSAGE", 0x02: "SAVE DATA POINTER",
    0x03: "RESTORE POINTERS", 0x04: "DISCONNECT", 0x05: "INITIATOR DETECTED ERROR",
    0x06: "ABORT TASK SET", 0x07: "MESSAGE REJECT", 0x08: "NO OPERATION",
    0x09: "MESSAGE PARITY ERROR", 0x0A: "LINKED COMMAND COMPLETE",
    0x0B: "LINKED COMMAND COMPLETE (WITH FLAG)", 0x0C: "TARGET RESET", 0x0D: "ABORT TASK",
    0x0E: "CLEAR TASK SET", 0x0F: "INITIATE RECOVERY", 0x10: "RELEASE RECOVERY",
    0x11: "TERMINATE I/O PROCESS", 0x16: "CLEAR ACA", 0x17: "LOGICAL UNIT RESET",
    0x20: "SIMPLE QUEUE TAG", 0x21: "HEAD OF QUEUE TAG", 0x22: "ORDERED QUEUE TAG",
    0x23: "IGNORE WIDE RESIDUE",
}
QUEUE_TAG_MESSAGES = {0x20, 0x21, 0x22}
TWO_BYTE_MESSAGES = QUEUE_TAG_MESSAGES | {0x23}


def cdb_length(opcode: int) -> int:
    """CDB length from the opcode's group code (SPC-4 4.2.5.1); 0 when reserved/vendor."""
    group = opcode >> 5
    return {0: 6, 1: 10, 2: 10, 4: 16, 5: 12}.get(group, 0)


def opcode_name(opcode: int | None, service_action: int | None = None, command_set: str | None = None) -> str:
    if opcode is None:
        return ""
    if opcode == 0x9E and service_action in SERVICE_ACTION_IN_16:
        return SERVICE_ACTION_IN_16[service_action]
    vendor = COMMAND_SETS.get(command_set, {})
    return vendor.get(opcode) or OPCODE_NAMES.get(opcode, f"Unknown 0x{opcode:02x}")


def status_name(status: int | None) -> str:
    if status is None:
        return ""
    return STATUS_NAMES.get(status & 0x3E, f"0x{status:02x}")


def message_name(msg: int) -> str:
    if msg & 0x80:
        return f"IDENTIFY (LUN {msg & 0x07})"
    return MESSAGE_NAMES.get(msg, f"0x{msg:02x}")


def decode_cdb(cdb: bytes) -> dict:
    """opcode, name, lba, blocks (transfer length in blocks) and lun (SCSI-1 CDB byte 1) of a CDB.

    Fields a command does not have are None. A short CDB decodes what it can. One CDB
    through `decode_cdb_matrix`: the rules live once, in Rust (native/src/bus/cdb.rs).
    >>> decode_cdb(bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 0x40, 0]))["lba"]
    4096
    """
    import numpy as np
    m = np.zeros((1, 16), np.uint8)
    m[0, :min(len(cdb), 16)] = np.frombuffer(bytes(cdb[:16]), np.uint8)
    d = decode_cdb_matrix(m, np.array([len(cdb)], np.int64))
    return {"opcode": d["opcode"][0], "name": d["command"][0], "lba": d["lba"][0], "blocks": d["blocks"][0],
            "lun": d["cdb_lun"][0], "length": len(cdb)}


def op_kind(opcode: int | None) -> str | None:
    """schema.OPS of one opcode, as op_kind_expr names a column of them; None when unknown."""
    if opcode is None:
        return None
    for name, opcodes in (("read", READ_OPS), ("write", WRITE_OPS), ("flush", FLUSH_OPS), ("discard", DISCARD_OPS)):
        if opcode in opcodes:
            return name
    return "other"


# ---------------------------------------------------------------- bulk decode
# The CDB rules, over a whole Binary column of CDBs at once (one compiled pass, Rust:
# native/src/bus/cdb.rs, fed the opcode groups below); decode_cdb is one row of it.
# tests/cdb_reference.py restates them in Python, byte by byte, as the tests' oracle.

_RW6 = [0x08, 0x0A, 0x0B]
_RW10 = [0x28, 0x2A, 0x2E, 0x2F, 0x2B, 0x35]
_RW12 = [0xA8, 0xAA]
_RW16 = [0x88, 0x8A, 0x8F, 0x91, 0x93]
_ALL_OPCODE_NAMES = [opcode_name(op) for op in range(256)]   # "Unknown 0x.." included
CDB_FIELDS = ("opcode", "command", "lba", "blocks", "cdb_lun")


def binary_matrix(col, width: int):
    """(rows of the first `width` bytes of a Binary series, zero-padded; each row's byte
    count, -1 for null)."""
    import numpy as np
    import polars as pl
    from .schema import ARROW_FROM_ROWS
    n = len(col)
    sizes = col.bin.size().cast(pl.Int64).fill_null(-1).to_numpy()
    out = np.zeros((n, width), np.uint8)
    if not (width and (sizes > 0).any()):
        return out, sizes
    if n < ARROW_FROM_ROWS:
        _matrix_by_hex(col, width, out)
    else:
        import pyarrow as pa
        arr = col.rechunk().to_arrow(compat_level=pl.CompatLevel.oldest()).cast(pa.large_binary())
        offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset:arr.offset + n]
        values = np.frombuffer(arr.buffers()[2], np.uint8)
        for k in range(width):       # column by column: no (rows, width) index matrix
            rows = np.flatnonzero(sizes > k)
            out[rows, k] = values[offsets[rows] + k]
    return out, sizes


def _matrix_by_hex(col, width: int, out) -> None:
    """binary_matrix's rows through hex text (no pyarrow; for few rows)."""
    import numpy as np
    from .schema import HEX_DIGITS
    hexed = col.bin.encode("hex").str.slice(0, 2 * width).str.pad_end(2 * width, "0").fill_null("0" * 2 * width)
    digits = np.array(hexed.to_list(), dtype=f"S{2 * width}").view(np.uint8).reshape(len(col), 2 * width)
    nibble = np.zeros(256, np.uint8)
    nibble[HEX_DIGITS] = np.arange(16, dtype=np.uint8)
    out[:] = nibble[digits[:, 0::2]] << 4 | nibble[digits[:, 1::2]]


def decode_cdbs(cdb) -> dict:
    """opcode, command (name), lba, blocks and cdb_lun of a Binary series of CDBs, as
    series (null where decode_cdb gives None; command "" for an empty or null CDB)."""
    return decode_cdb_matrix(*binary_matrix(cdb, 16))


def _opcode_table(*groups) -> "np.ndarray":
    """256 booleans: which opcodes are in `groups` (a lookup instead of isin)."""
    import numpy as np
    table = np.zeros(256, bool)
    table[[op for g in groups for op in g]] = True
    return table


def decode_cdb_matrix(m, n, command_set: str | None = None) -> dict:
    """decode_cdbs of CDBs given as rows of at least 16 bytes (`m`, uint8) and their
    lengths (`n`, -1 for none); bytes past a CDB's length are never used. One compiled
    pass (Rust: native/src/bus/cdb.rs `CdbDecoder`, given the opcode tables once); opcodes
    named by `command_set` (command_sets.py)."""
    import numpy as np
    import polars as pl
    names, decoder = _decoder(command_set)
    m = np.asarray(m, np.uint8)
    if not len(m):      # (rust-numpy refuses the zero strides numpy gives a (0, 16) array)
        m = np.zeros((0, 16), np.uint8)
    d = pl.DataFrame(decoder.decode(np.ascontiguousarray(m), np.ascontiguousarray(n, np.int64)))
    return {"opcode": d["opcode"], "command": names.gather(d["name_at"]).alias("command"),
            "lba": d["lba"], "blocks": d["blocks"], "cdb_lun": d["cdb_lun"]}


@functools.cache
def _decoder(command_set: str | None = None):
    """(the command names a decoded CDB indexes: every opcode's, then SERVICE ACTION IN(16)'s,
    then "" for no opcode; the compiled decoder, given the tables of the CDB rules once: the
    READ/WRITE opcode groups by CDB size, the opcodes with a LUN in byte 1, each service
    action's name index)."""
    import numpy as np
    import polars as pl
    from ._native import bus
    opcode_names = _ALL_OPCODE_NAMES if command_set is None else [opcode_name(op, command_set=command_set)
                                                                  for op in range(256)]
    names = pl.Series([*opcode_names, *SERVICE_ACTION_IN_16.values(), ""], dtype=pl.Utf8)
    sa_name = np.full(32, -1, np.int64)
    sa_name[list(SERVICE_ACTION_IN_16)] = 256 + np.arange(len(SERVICE_ACTION_IN_16))
    return names, bus.CdbDecoder(_opcode_table(_RW6), _opcode_table(_RW10), _opcode_table(_RW12),
                                 _opcode_table(_RW16), _lun_groups(), sa_name, len(names) - 1)


def _lun_groups():
    """Opcodes whose CDB carries a LUN in byte 1 (groups 0-2, SCSI-1 style)."""
    return _opcode_table(range(0x60)) & ~_opcode_table(_RW12, _RW16)


def cdb_exprs(cdb) -> dict:
    """Polars expressions decoding a Binary CDB column (decode_cdbs): opcode, command, lba,
    blocks, cdb_lun."""
    import polars as pl
    types = {"opcode": pl.Int64, "command": pl.Utf8, "lba": pl.Int64, "blocks": pl.Int64, "cdb_lun": pl.Int64}
    return {k: cdb.map_batches(lambda s, k=k: decode_cdbs(s)[k], return_dtype=types[k]) for k in CDB_FIELDS}


def op_kind_expr(opcode):
    """schema.OPS of an opcode column: read, write, flush, discard, other; null when unknown."""
    import polars as pl
    return (pl.when(opcode.is_null()).then(pl.lit(None, dtype=pl.Utf8))
            .when(opcode.is_in(sorted(READ_OPS))).then(pl.lit("read"))
            .when(opcode.is_in(sorted(WRITE_OPS))).then(pl.lit("write"))
            .when(opcode.is_in(sorted(FLUSH_OPS))).then(pl.lit("flush"))
            .when(opcode.is_in(sorted(DISCARD_OPS))).then(pl.lit("discard"))
            .otherwise(pl.lit("other")))
