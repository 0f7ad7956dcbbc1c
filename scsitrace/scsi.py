"""SCSI command set facts shared by every layer: CDB decode, opcode names, status and
message codes (SAM-5, SPC-4, SBC-3, MMC-6 spellings as Wireshark prints them)."""
from __future__ import annotations

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
    0xAD: "Read DVD Structure", 0xBD: "Mechanism Status", 0xBE: "Read CD",
}
SERVICE_ACTION_IN_16 = {0x10: "Read Capacity(16)", 0x12: "Get LBA Status"}

READ_OPS = {0x08, 0x28, 0xA8, 0x88}
WRITE_OPS = {0x0A, 0x2A, 0xAA, 0x8A, 0x2E}

STATUS_NAMES = {
    0x00: "GOOD", 0x02: "CHECK CONDITION", 0x04: "CONDITION MET", 0x08: "BUSY",
    0x10: "INTERMEDIATE", 0x14: "INTERMEDIATE-CONDITION MET", 0x18: "RESERVATION CONFLICT",
    0x22: "COMMAND TERMINATED", 0x28: "TASK SET FULL", 0x30: "ACA ACTIVE", 0x40: "TASK ABORTED",
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


def opcode_name(opcode: int | None, service_action: int | None = None) -> str:
    if opcode is None:
        return ""
    if opcode == 0x9E and service_action in SERVICE_ACTION_IN_16:
        return SERVICE_ACTION_IN_16[service_action]
    return OPCODE_NAMES.get(opcode, f"Unknown 0x{opcode:02x}")


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

    Fields a command does not have are None. A short CDB decodes what it can.
    >>> decode_cdb(bytes([0x28, 0, 0, 0, 0x10, 0, 0, 0, 0x40, 0]))["lba"]
    4096
    """
    out = {"opcode": None, "name": "", "lba": None, "blocks": None, "lun": None, "length": len(cdb)}
    if not cdb:
        return out
    op = cdb[0]
    out["opcode"] = op
    sa = cdb[1] & 0x1F if len(cdb) > 1 else None
    out["name"] = opcode_name(op, sa)
    n = len(cdb)
    if op in (0x08, 0x0A, 0x0B) and n >= 6:
        out["lba"] = ((cdb[1] & 0x1F) << 16) | (cdb[2] << 8) | cdb[3]
        out["blocks"] = cdb[4] or (256 if op != 0x0B else 0)
        out["lun"] = cdb[1] >> 5
    elif op in (0x28, 0x2A, 0x2E, 0x2F, 0x2B, 0x35) and n >= 10:
        out["lba"] = int.from_bytes(cdb[2:6], "big")
        out["blocks"] = int.from_bytes(cdb[7:9], "big")
        out["lun"] = cdb[1] >> 5
    elif op in (0xA8, 0xAA) and n >= 12:
        out["lba"] = int.from_bytes(cdb[2:6], "big")
        out["blocks"] = int.from_bytes(cdb[6:10], "big")
    elif op in (0x88, 0x8A, 0x8F, 0x91, 0x93) and n >= 16:
        out["lba"] = int.from_bytes(cdb[2:10], "big")
        out["blocks"] = int.from_bytes(cdb[10:14], "big")
    elif n >= 2 and cdb_length(op) in (6, 10):
        out["lun"] = cdb[1] >> 5
    return out


def op_kind(opcode: int | None) -> str:
    """'read', 'write' or 'other' (or '' when unknown), for I/O tables."""
    if opcode is None:
        return ""
    if opcode in READ_OPS:
        return "read"
    if opcode in WRITE_OPS:
        return "write"
    return "other"


# ---------------------------------------------------------------- bulk decode (polars)
# The same rules as decode_cdb, as expressions over a Binary column of CDBs, for layers
# that decode thousands of commands at once (usb, scsilog). tests check they agree.

_RW6 = [0x08, 0x0A, 0x0B]
_RW10 = [0x28, 0x2A, 0x2E, 0x2F, 0x2B, 0x35]
_RW12 = [0xA8, 0xAA]
_RW16 = [0x88, 0x8A, 0x8F, 0x91, 0x93]


def _byte(cdb, i: int):
    import polars as pl
    return pl.when(cdb.bin.size() > i).then(cdb.bin.slice(i, 1).bin.reinterpret(dtype=pl.UInt8)) \
        .cast(pl.Int64)


def _be(cdb, start: int, n: int):
    """Big-endian unsigned field of 2, 4 or 8 bytes (null when the CDB is shorter); values
    beyond int64 (LBAs >= 2^63) become null. One reinterpret, not one slice per byte."""
    import polars as pl
    field = cdb.bin.slice(start, n).bin.reinterpret(dtype={2: pl.UInt16, 4: pl.UInt32, 8: pl.UInt64}[n],
                                                    endianness="big")
    return field.cast(pl.Int64, strict=False) if n == 8 else field.cast(pl.Int64)


_ALL_OPCODE_NAMES = {op: opcode_name(op) for op in range(256)}   # "Unknown 0x.." included


def cdb_exprs(cdb) -> dict:
    """Polars expressions decoding a Binary CDB column: opcode, name, lba, blocks, lun."""
    import polars as pl
    op = _byte(cdb, 0)
    n = cdb.bin.size()
    sa = _byte(cdb, 1) & 0x1F
    name = (pl.when((op == 0x9E) & sa.is_in(list(SERVICE_ACTION_IN_16)))
            .then(sa.replace_strict(SERVICE_ACTION_IN_16, default=None, return_dtype=pl.Utf8))
            .otherwise(op.replace_strict(_ALL_OPCODE_NAMES, default=None, return_dtype=pl.Utf8)))
    name = pl.when(op.is_null()).then(pl.lit("")).otherwise(name)
    is6, is10 = op.is_in(_RW6) & (n >= 6), op.is_in(_RW10) & (n >= 10)
    is12, is16 = op.is_in(_RW12) & (n >= 12), op.is_in(_RW16) & (n >= 16)
    lba = (pl.when(is6).then(((_byte(cdb, 1) & 0x1F) * 65536) + _be(cdb, 2, 2))
           .when(is10 | is12).then(_be(cdb, 2, 4))
           .when(is16).then(_be(cdb, 2, 8)))
    len6 = _byte(cdb, 4)
    blocks = (pl.when(is6).then(pl.when(len6 == 0).then(pl.when(op == 0x0B).then(0).otherwise(256))
                                .otherwise(len6))
              .when(is10).then(_be(cdb, 7, 2))
              .when(is12).then(_be(cdb, 6, 4))
              .when(is16).then(_be(cdb, 10, 4)))
    group = op // 32
    lun = pl.when(is6 | is10 | ((n >= 2) & group.is_in([0, 1, 2]) & ~op.is_in(_RW12 + _RW16))) \
        .then(_byte(cdb, 1) // 32)
    return {"opcode": op, "command": name, "lba": lba, "blocks": blocks, "cdb_lun": lun}


def op_kind_expr(opcode):
    import polars as pl
    return (pl.when(opcode.is_null()).then(pl.lit(""))
            .when(opcode.is_in(sorted(READ_OPS))).then(pl.lit("read"))
            .when(opcode.is_in(sorted(WRITE_OPS))).then(pl.lit("write"))
            .otherwise(pl.lit("other")))
