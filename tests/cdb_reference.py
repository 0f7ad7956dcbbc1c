"""The CDB rules restated byte by byte from SBC/SPC, independently of scsitrace/scsi.py and
native/src/bus/cdb.rs (the one implementation the tool runs): the oracle the CDB tests
compare that implementation with."""
from __future__ import annotations

from scsitrace.scsi import OPCODE_NAMES, SERVICE_ACTION_IN_16


def _group_length(opcode: int) -> int:
    """CDB length from the opcode's group code (SPC-4 4.2.5.1); 0 when reserved/vendor."""
    return {0: 6, 1: 10, 2: 10, 4: 16, 5: 12}.get(opcode >> 5, 0)


def _name(opcode: int, service_action: int | None) -> str:
    if opcode == 0x9E and service_action in SERVICE_ACTION_IN_16:
        return SERVICE_ACTION_IN_16[service_action]
    return OPCODE_NAMES.get(opcode, f"Unknown 0x{opcode:02x}")


def decode_cdb(cdb: bytes) -> dict:
    """opcode, name, lba, blocks, lun (SCSI-1 byte 1) of a CDB; None where it has none."""
    out = {"opcode": None, "name": "", "lba": None, "blocks": None, "lun": None, "length": len(cdb)}
    if not cdb:
        return out
    op = cdb[0]
    out["opcode"] = op
    out["name"] = _name(op, cdb[1] & 0x1F if len(cdb) > 1 else None)
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
    elif n >= 2 and _group_length(op) in (6, 10):
        out["lun"] = cdb[1] >> 5
    return out
