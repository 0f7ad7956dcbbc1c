"""The kernel-log pairing as it was in polars (scsitrace/scsilog/analysis.py before the pass
moved to Rust, native/src/text/scsilog_pair.rs): the oracle the compiled pairing is tested
against (tests/test_scsilog_pair.py)."""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.scsilog.events import MLQUEUE


def pair(events: pl.DataFrame, carry: pl.DataFrame | None, next_io: int, final: bool = False):
    """One block of events (with the starts `carry`ed from earlier blocks) -> (commands that
    are finished, starts still waiting for their next event, the next io number). A command
    is numbered (`io`) when its first event comes: its start, or a done without start; in
    (time, line) order within a block, blocks in order."""
    e = events.with_columns(pl.lit(None, dtype=pl.Int64).alias("io"))
    if carry is not None and carry.height:
        e = pl.concat([carry, e])
    e = _by_key(e)
    # sorted by (device, tag): a row's neighbour in its group is its neighbour in the frame
    # when the keys agree (what shift().over(key) gives, without a group-by per column)
    e = e.with_columns(_same_key(-1).alias("_next"), _same_key(1).alias("_prev")).with_columns(
        *[pl.when(pl.col("_next")).then(pl.col(c).shift(-1)).alias(n) for c, n in (
            ("kind", "n_kind"), ("t_ns", "n_t"), ("status", "n_status"), ("host_byte", "n_host"), ("rtn", "n_rtn"))],
        pl.when(pl.col("_prev")).then(pl.col("kind").shift(1)).alias("p_kind")).drop("_next", "_prev")
    orphan = (pl.col("kind") == "done") & (pl.col("p_kind").is_null() | (pl.col("p_kind") != "start"))
    begins = e.filter(pl.col("io").is_null() & ((pl.col("kind") == "start") | orphan)).sort("t_ns", "pos")
    if begins.height:
        numbers = begins.select("pos", pl.int_range(next_io, next_io + begins.height, dtype=pl.Int64).alias("_io"))
        e = e.join(numbers, on="pos", how="left").with_columns(pl.coalesce("io", "_io").alias("io")).drop("_io")
        next_io += begins.height
    waiting = (pl.col("kind") == "start") & pl.col("n_kind").is_null() & pl.lit(not final)
    carry = e.filter(waiting).select(events.columns + ["io"])
    n_kind = pl.col("n_kind")
    rtn_name = pl.col("n_rtn").replace_strict(MLQUEUE, default=None, return_dtype=pl.Utf8)
    reason = (pl.when(n_kind == "done").then(None)
              .when(n_kind == "error").then(
                  pl.format("dispatch error (rtn={}{})", pl.col("n_rtn"),
                            pl.when(rtn_name.is_not_null()).then(pl.concat_str(pl.lit(" "), rtn_name))
                            .otherwise(pl.lit(""))))
              .when(n_kind == "timeout").then(pl.lit("timed out"))
              .when(n_kind == "start").then(pl.lit("no done before the tag was reused"))
              .otherwise(pl.lit("no done (trace ended)")))
    starts = e.filter((pl.col("kind") == "start") & ~waiting).select(
        "device", "tag", "cdb", "pos", pl.col("t_ns").alias("start_ns"),
        pl.when(n_kind == "done").then(pl.col("n_t")).alias("end_ns"),
        # a command the host adapter could not deliver (DID_NO_CONNECT...) shows its host byte
        pl.when(n_kind == "done").then(
            pl.when(pl.col("n_host").is_null() | (pl.col("n_host") == "DID_OK")).then(pl.col("n_status"))
            .otherwise(pl.col("n_host"))).alias("status"),
        pl.when(n_kind == "done").then(pl.col("n_host")).alias("host_byte"),
        reason.alias("reason"), "io")
    orphans = e.filter(orphan) \
        .select("device", "tag", "cdb", "pos", pl.lit(None, dtype=pl.Int64).alias("start_ns"),
                pl.col("t_ns").alias("end_ns"), "status", "host_byte",
                pl.lit("done without start (trace started mid-command)").alias("reason"), "io")
    return pl.concat([starts, orphans], how="diagonal_relaxed"), carry, next_io


def _same_key(n: int) -> pl.Expr:
    """Whether the row `n` away has the same (device, tag)."""
    return pl.all_horizontal(pl.col(c).eq_missing(pl.col(c).shift(n)) for c in ("device", "tag"))


def _by_key(e: pl.DataFrame) -> pl.DataFrame:
    """`e` sorted by device, tag (nulls last), time and line: numpy's lexsort over the devices'
    ranks (3x less CPU than polars' multi-column sort with a string key, the same order)."""
    if not e.height or any(e[c].null_count() for c in ("device", "t_ns", "pos")):
        return e.sort(["device", "tag", "t_ns", "pos"], nulls_last=True)
    devices = e["device"].unique().sort()
    rank = e["device"].replace_strict(devices, pl.int_range(devices.len(), eager=True, dtype=pl.UInt32),
                                      return_dtype=pl.UInt32)
    tag = e["tag"]
    order = np.lexsort((e["pos"].to_numpy(), e["t_ns"].to_numpy(), tag.fill_null(0).to_numpy(),
                        tag.is_null().to_numpy(), rank.to_numpy()))
    return e[order]
