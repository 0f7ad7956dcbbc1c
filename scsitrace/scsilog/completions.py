"""What a kernel log says of the commands that ended, counted per device, opcode, result,
host byte and sense key: the `completions` table (counted by the kernel-log engine,
native/src/text/scsilog_engine.rs, by these rules).

Every kernel log has it; it is all that a completions-only log holds (the kernel's SCSI
logging at the completion or error-handling level only: "Done:" lines and no "Send:", as
`scsi_logging_level` is often set when chasing an error), which has no dispatches, so no
response times and no SERVICE time: a note says so.

A `sense` event (a "Sense Key :" line) belongs to the last end of its (device, tag) before it
in the log; an end's sense key is its first. An end is counted once a later end of its
(device, tag) has come (its sense lines are before that one) or the log has ended, so at most
one end per (device, tag) waits. The parser hands an end over at most one block of lines
after its sense line, so a sense line that finds no end waits one more batch, then is counted
in a note.
"""
from __future__ import annotations

import polars as pl

from .. import scsi
from ..tables import Table

COMPLETIONS = Table(
    "completions",
    {"device": pl.Utf8, "opcode": pl.Int64, "command": pl.Utf8, "result": pl.Utf8, "host_byte": pl.Utf8,
     "sense_key": pl.Utf8, "count": pl.Int64},
    "commands that ended (done or timed out), per device, opcode, result (the SAM status, or the kernel's "
    "disposition as logged: FAILED, ADD_TO_MLQUEUE, NEEDS_RETRY; \"timed out\"), host byte and sense key")



def completions_table(counts: pl.DataFrame) -> pl.DataFrame:
    """The table from the kernel-log engine's counts (columns device, opcode, name_at: the
    command's name index of scsi.decode_cdb_matrix, result, host_byte, sense_key, count),
    once the log has ended."""
    names = scsi._decoder()[0]
    frame = counts.select("device", "opcode", names.gather(counts["name_at"]).alias("command"), "result",
                          "host_byte", "sense_key", "count").cast(COMPLETIONS.schema)
    return frame.sort("device", "opcode", "result", "sense_key", nulls_last=True)


def completions_notes(starts: int, ends: int, lost_senses: int) -> list[str]:
    """The notes on a completions-only log and on sense lines that found no end."""
    out = []
    if ends and not starts:
        out.append(f"the log holds completions only ({ends} commands that ended, no dispatch lines: "
                   "the kernel's SCSI logging at its completion or error-handling level; at level 1 it logs "
                   "only the commands that did not simply succeed): no response times, no SERVICE time and "
                   "no rates; `completions` counts them by device, opcode, result and sense key")
    if lost_senses:
        out.append(f"{lost_senses} \"Sense Key\" lines follow no command's end of their device and tag: "
                   "not counted in `completions`")
    return out
