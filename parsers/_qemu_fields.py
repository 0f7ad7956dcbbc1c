"""The fields of QEMU trace events (parsers/qemu_lsi.py): each event's text decoded with its own
pattern, every number checked against its field's range (the error contract: a field that
does not parse or does not fit names its line as bad input; `bad_field` says which)."""
from __future__ import annotations

import polars as pl

from . import _lines

# event -> regex with named groups for the fields its text carries (QEMU 7.2 hw/scsi/trace-events);
# each event's rows are decoded with its own pattern, so no row runs every pattern
_TAG_HEX = r"tag=0x(?<tag_hex>[0-9a-fA-F]+)"
_SECTORS = r"\(sector (?<sector>\d+), count (?<sectors>\d+)\)"
EVENT_FIELDS = {
    "lsi_execute_script_io_selected": r"^Selected target (?<target>\d+)(?<atn> ATN)?",
    "lsi_reselect": r"^Reselected target (?<target>\d+)",
    "lsi_do_msgout_select": r"^Select LUN (?<lun>\d+)",
    "lsi_do_msgout_simplequeue": _TAG_HEX,
    "lsi_do_msgout_extended": r"^Extended message 0x(?<ext_code>[0-9a-fA-F]+) \(len (?<ext_len>\d+)\)",
    "lsi_do_command": r"len=(?<len>\d+)",
    "lsi_do_dma": r"len=(?<len>\d+)",
    "lsi_do_status": r"len=(?<len>\d+) status=(?<status>\d+)",
    "lsi_command_complete": r"status=(?<status>\d+)",
    "lsi_add_msg_byte": r"^MSG IN 0x(?<msg_byte>[0-9a-fA-F]+)",
    "lsi_execute_script_tc_compp": r"^Compare phase (?<compare>[A-Z]+)",
    "lsi_queue_command": _TAG_HEX,
    "lsi_transfer_data": _TAG_HEX + r" len=(?<len>\d+)",
    # the USB mass-storage device models: a command received, its status sent
    "usb_msd_cmd_submit": r"tag 0x(?<tag_hex>[0-9a-fA-F]+)",
    "usb_msd_send_status": r"tag 0x(?<tag_hex>[0-9a-fA-F]+)",
    "usb_uas_command": r"tag 0x(?<tag_hex>[0-9a-fA-F]+)",
    "usb_uas_sense": r"tag 0x(?<tag_hex>[0-9a-fA-F]+)",
    "scsi_req_parsed": r"target (?<target>\d+) lun (?<lun>\d+) tag (?<tag_dec>\d+) command (?<opcode>\d+) "
                       r"dir (?<dir>\d+) length (?<length>\d+)",
    "scsi_req_parsed_lba": r"target (?<target>\d+) lun (?<lun>\d+) tag (?<tag_dec>\d+) command (?<opcode>\d+) "
                           r"lba (?<lba>\d+)",
    "scsi_disk_dma_command_READ": _SECTORS,
    "scsi_disk_dma_command_WRITE": _SECTORS,
}
FIELD_NAMES = ("target", "atn", "lun", "tag_hex", "tag_dec", "ext_code", "ext_len", "len", "status",
               "msg_byte", "compare", "opcode", "dir", "length", "lba", "sector", "sectors")
HEX_FIELDS = ("tag_hex", "msg_byte", "ext_code")
# the others: 0..2^32-1; a SCSI opcode, status, message byte and extended message are bytes
RANGES = {"lba": (0, 2**63 - 1), "sector": (0, 2**63 - 1),
          **dict.fromkeys(("opcode", "status", "msg_byte", "ext_code", "ext_len"), (0, 255))}


def decode_fields(ev: pl.DataFrame) -> pl.DataFrame:
    """The fields of each event's text (null where an event does not carry them)."""
    ev = ev.with_row_index("_row")
    parts = []
    for name in ev["event"].unique().to_list():
        rx = EVENT_FIELDS.get(name)
        if rx is None:
            continue
        sub = ev.filter(pl.col("event") == name)
        parts.append(sub.select("_row", pl.col("detail").str.extract_groups(rx).alias("f"),
                                pl.col("detail").str.contains(rx).alias("_matched")).unnest("f"))
    fields = pl.concat(parts, how="diagonal_relaxed") if parts else pl.DataFrame({"_row": []}, schema={"_row": pl.UInt32})
    for name in FIELD_NAMES:
        if name not in fields.columns:
            fields = fields.with_columns(pl.lit(None, pl.Utf8).alias(name))
    numeric = [n for n in FIELD_NAMES if n not in ("compare", "atn")]
    value = {n: _lines.checked_int(pl.col(n), *RANGES.get(n, _lines.U32), base=16 if n in HEX_FIELDS else 10)
             for n in numeric}
    out_of_range = pl.lit(None, pl.Utf8)
    for n in reversed(numeric):   # the first field that does not fit its range names the line
        out_of_range = pl.when(pl.col(n).is_not_null() & value[n].is_null()).then(pl.lit(n)).otherwise(out_of_range)
    if "_matched" not in fields.columns:
        fields = fields.with_columns(pl.lit(True).alias("_matched"))
    out_of_range = pl.when(pl.col("_matched") == False).then(pl.lit("detail")).otherwise(out_of_range)  # noqa: E712
    fields = fields.select("_row", *(v.alias(n) for n, v in value.items()), "compare",
                           pl.col("atn").is_not_null().alias("atn"), out_of_range.alias("bad_field"))
    out = ev.join(fields, on="_row", how="left", maintain_order="left").sort("_row").drop("_row")
    return out.with_columns(
        pl.coalesce(pl.col("tag_hex"), pl.col("tag_dec")).alias("tag"),
        pl.col("atn").fill_null(False),
    ).drop("tag_hex", "tag_dec")
