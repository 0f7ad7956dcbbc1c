"""What a kernel log says of the commands that ended, counted per device, opcode, result,
host byte and sense key: the `completions` table.

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

ENDS = ("done", "timeout")
_KEY = ["device", "_tag"]
_GROUP = ["device", "opcode", "command", "result", "host_byte", "sense_key"]
_END_SCHEMA = {"device": pl.Utf8, "_tag": pl.Int64, "pos": pl.Int64, "opcode": pl.Int64, "command": pl.Utf8,
               "result": pl.Utf8, "host_byte": pl.Utf8, "sense_key": pl.Utf8}
_SENSE_SCHEMA = {"device": pl.Utf8, "_tag": pl.Int64, "pos": pl.Int64, "key": pl.Utf8, "_age": pl.Int64}


class Completions:
    """The completions table added up batch by batch of kernel-log events (after --window;
    --device, --target and --lun applied here to the events' device)."""

    def __init__(self, options=None):
        self.keep = _selection(options)
        self.waiting = pl.DataFrame(schema=_END_SCHEMA)
        self.senses = pl.DataFrame(schema=_SENSE_SCHEMA)
        self.counts: dict[tuple, int] = {}
        self.starts = self.ends = self.lost_senses = 0

    def add(self, events: pl.DataFrame) -> None:
        ev = events.filter(self.keep) if self.keep is not None else events
        if not ev.height and not self.senses.height:
            return
        tag = pl.col("tag").fill_null(-1).alias("_tag")
        self.starts += int((ev["kind"] == "start").sum())
        ends = ev.filter(pl.col("kind").is_in(ENDS))
        self.ends += ends.height
        dec = scsi.decode_cdbs(ends["cdb"])
        ends = ends.select(
            "device", tag, "pos", dec["opcode"].cast(pl.Int64).alias("opcode"), dec["command"].alias("command"),
            pl.when(pl.col("kind") == "timeout").then(pl.lit("timed out")).otherwise(pl.col("status")).alias("result"),
            "host_byte", pl.lit(None, dtype=pl.Utf8).alias("sense_key"))
        senses = pl.concat([self.senses.with_columns(pl.col("_age") + 1), ev.filter(pl.col("kind") == "sense").select(
            "device", tag, "pos", pl.col("status").alias("key"), pl.lit(0, dtype=pl.Int64).alias("_age"))])
        ends = pl.concat([self.waiting, ends.cast(_END_SCHEMA)]).sort("pos")
        ends, self.senses = _with_sense(ends, senses.sort("pos"))
        self.lost_senses += int((self.senses["_age"] >= 1).sum())
        self.senses = self.senses.filter(pl.col("_age") < 1)
        last = pl.col("pos") == pl.col("pos").max().over(_KEY)
        self._count(ends.filter(~last))
        self.waiting = ends.filter(last)

    def _count(self, ends: pl.DataFrame) -> None:
        for *key, n in ends.group_by(_GROUP).len().iter_rows():
            self.counts[tuple(key)] = self.counts.get(tuple(key), 0) + n

    def table(self) -> pl.DataFrame:
        """The table, once the log has ended."""
        self._count(self.waiting)
        self.waiting = self.waiting.clear()
        self.lost_senses += self.senses.height
        self.senses = self.senses.clear()
        rows = [(*k, n) for k, n in self.counts.items()]
        frame = pl.DataFrame(rows, schema=COMPLETIONS.schema, orient="row")
        return frame.sort("device", "opcode", "result", "sense_key", nulls_last=True)

    def notes(self) -> list[str]:
        out = []
        if self.ends and not self.starts:
            out.append(f"the log holds completions only ({self.ends} commands that ended, no dispatch lines: "
                       "the kernel's SCSI logging at its completion or error-handling level; at level 1 it logs "
                       "only the commands that did not simply succeed): no response times, no SERVICE time and "
                       "no rates; `completions` counts them by device, opcode, result and sense key")
        if self.lost_senses:
            out.append(f"{self.lost_senses} \"Sense Key\" lines follow no command's end of their device and tag: "
                       "not counted in `completions`")
        return out


def _with_sense(ends: pl.DataFrame, senses: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Ends given the key of their first sense line; the sense lines that found no end."""
    if not senses.height or not ends.height:
        return ends, senses
    owner = senses.join_asof(ends.select(*_KEY, pl.col("pos").alias("end_pos"), pl.col("pos").alias("_p")),
                             left_on="pos", right_on="_p", by=_KEY, strategy="backward", check_sortedness=False)
    found = owner.filter(pl.col("end_pos").is_not_null())
    first = found.sort("pos").group_by([*_KEY, "end_pos"]).agg(pl.col("key").first().alias("_key"))
    ends = ends.join(first, left_on=[*_KEY, "pos"], right_on=[*_KEY, "end_pos"], how="left").with_columns(
        pl.coalesce("sense_key", "_key").alias("sense_key")).drop("_key")
    return ends.select(list(_END_SCHEMA)), owner.filter(pl.col("end_pos").is_null()).select(list(_SENSE_SCHEMA))


def _selection(options):
    """--device H:C:T:L, --target, --lun on the events' device (LUNs are 64-bit)."""
    if options is None:
        return None
    part = lambda k: pl.col("device").str.split(":").list.get(k, null_on_oob=True)  # noqa: E731
    keep = [cond for value, cond in (
        (options.device, lambda v: pl.col("device") == str(v)),
        (options.target, lambda v: part(2) == str(v)),
        (options.lun, lambda v: part(3) == str(v))) if value is not None for cond in [cond(value)]]
    if not keep:
        return None
    out = keep[0]
    for k in keep[1:]:
        out &= k
    return out
