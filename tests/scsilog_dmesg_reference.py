"""The dmesg events as parsers/scsilog.py made them in polars before the (device, tag)
neighbours came from Rust (`native/src/text/scsilog_pair.rs:key_neighbours`): the oracle of
tests/test_scsilog_dmesg_events.py."""
from __future__ import annotations

import polars as pl

from scsitrace.parsers.scsilog import EVENTS, _sense_after_held, _sense_events


def _dmesg_events(g: pl.DataFrame | None, st: _Events, final: bool = False) -> pl.DataFrame:
    """Events of the parsed dmesg lines `g` (and of the rows carried from earlier blocks),
    each given the CDB of the "CDB:" line after it. An event whose (device, tag) has no line
    after it in the block waits in `st.carry` for the next block (`final`: the log ended);
    the event before it is carried too, already emitted (a failed command's second end is
    dropped)."""
    parts = [p for p in (st.carry, g) if p is not None]
    g = pl.concat(parts) if len(parts) > 1 else parts[0]
    is_sense = pl.col("kind").str.starts_with("Sense Key")
    sense, g = g.filter(is_sense), g.filter(~is_sense)
    is_cdb = pl.col("kind") == "CDB:"
    key = ["device", "tag"]
    nxt = g.sort("line_no").with_columns(
        pl.col("cdb_hex").shift(-1).over(key).alias("next_cdb"),
        is_cdb.shift(-1).over(key).alias("next_is_cdb"))
    ev = nxt.filter(~is_cdb).sort("line_no")
    held = pl.col("next_is_cdb").is_null() & ~pl.col("_emitted") & pl.lit(not final)
    pending = ev.filter(~pl.col("_emitted"))
    if pending.height:
        first = int(pending["t_ns"].min())
        st.first_t = first if st.first_t is None else min(st.first_t, first)
    # per (device, tag): the last two events (the one before a held event decides whether it
    # is a failed command's second end), marked emitted unless held
    st.carry = None if final else ev.group_by(key, maintain_order=True).tail(2).with_columns(
        (pl.col("_emitted") | pl.col("next_is_cdb").is_not_null()).alias("_emitted")).select(g.columns)
    sense = _sense_after_held(sense, ev.filter(held), st)
    # a failed command is logged twice ("FAILED Result:" from the midlayer's completion,
    # "Done:" from the logging hook): an end right after an end of the same device and tag,
    # one of them FAILED, is dropped (decided from the event before it alone, so every block
    # size gives the same events). Two "Done:" in a row are two completions (a
    # completions-only log, a command requeued: "Done: ADD_TO_MLQUEUE")
    prev_kind = pl.col("kind").shift(1).over(key)
    ends = pl.col("kind").is_in(["Done:", "FAILED"])
    failed = (pl.col("kind") == "FAILED") | (prev_kind == "FAILED").fill_null(False)
    ev = ev.filter(~(ends & prev_kind.is_in(["Done:", "FAILED"]).fill_null(False) & failed))
    ev = ev.filter(~pl.col("_emitted") & ~held)
    kind = (pl.when(pl.col("kind") == "Send:").then(pl.lit("start"))
            .when(pl.col("kind") == "timing out command").then(pl.lit("timeout"))
            .when(pl.col("_timeout")).then(pl.lit("timeout"))
            .otherwise(pl.lit("done")))
    return pl.concat([ev.select(
        "t_ns",
        kind.alias("kind"),
        "device",
        pl.col("tag").cast(pl.Int64, strict=False).alias("tag"),
        pl.when(pl.col("next_is_cdb").fill_null(False)).then(pl.col("next_cdb")).str.decode("hex").alias("cdb"),
        pl.col("_host").alias("host_byte"),
        pl.when(pl.col("kind") == "FAILED").then(pl.lit("FAILED"))
        .otherwise(pl.col("_word").replace({"SUCCESS": "GOOD"})).alias("status"),
        pl.lit(None, dtype=pl.Int64).alias("rtn"),
        pl.lit("dmesg").alias("source"),
        pl.col("line_no").alias("pos"),
    ).cast(EVENTS), _sense_events(sense)]).sort("pos")
