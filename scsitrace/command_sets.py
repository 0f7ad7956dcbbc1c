"""Opcode names beyond the SPC/SBC table of `scsi.py`: MMC's CD-ROM commands (general: any
CD-ROM drive), and the vendor-specific opcodes of a device family, by command-set name
(`--command-set NAME`; `scsi.opcode_name(..., command_set=NAME)`). A set names only what it
knows; every other opcode keeps its standard name.

`pce`: the NEC PC Engine CD-ROM² drive (CDR-30, the IFU-30 interface unit as initiator), as
the community's pce-scsi sigrok decoder names its commands (dshadoff/pcengine_scsi_sigrok_
protocol_decoder): 10-byte CDBs in the vendor-specific group 6.
"""
from __future__ import annotations

# MMC-6 (CD audio and header commands), spelt as Wireshark prints them
MMC_CD = {
    0x44: "Read Header", 0x45: "Play Audio(10)", 0x47: "Play Audio MSF", 0x4B: "Pause/Resume",
    0x4E: "Stop Play/Scan", 0xA5: "Play Audio(12)", 0xB9: "Read CD MSF", 0xBA: "Scan", 0xBB: "Set CD Speed",
}

COMMAND_SETS = {
    "pce": {
        0xD8: "Audio Track Search", 0xD9: "Audio Play", 0xDA: "Audio Pause (Still)",
        0xDD: "Read Subcode Q", 0xDE: "Read TOC (PC Engine)", 0xFF: "Abort (PC Engine)",
    },
}
