"""I/Os in flight over time, from a layer's canonical `ios` table: every change of the
queue depth (I/Os started and not completed) per device, exact, from the sorted start and
end edges (no per-I/O loop). The Perfetto export draws it as a counter track.

An I/O without an end (still in progress when the trace ends) stays in flight to the end."""
from __future__ import annotations

import polars as pl

DEPTH_SCHEMA = {"device": pl.Utf8, "t_ns": pl.Int64, "depth": pl.Int64}


def depth_steps(ios: pl.DataFrame, device: str = "device") -> pl.DataFrame:
    """(device, t_ns, depth): the depth once every edge at t_ns is applied, one row per
    device and time at which it changes (an end and a start at the same time cancel)."""
    if not ios.height:
        return pl.DataFrame(schema=DEPTH_SCHEMA)
    dev = pl.col(device).cast(pl.Utf8).fill_null("") if device in ios.columns else pl.lit("")
    base = ios.select(dev.alias("device"), "start_ns", "end_ns")
    edges = pl.concat([base.select("device", pl.col("start_ns").alias("t_ns"), pl.lit(1, pl.Int64).alias("d")),
                       base.filter(pl.col("end_ns").is_not_null())
                           .select("device", pl.col("end_ns").alias("t_ns"), pl.lit(-1, pl.Int64).alias("d"))])
    per_time = edges.group_by("device", "t_ns").agg(pl.col("d").sum()).sort("device", "t_ns")
    steps = per_time.with_columns(pl.col("d").cum_sum().over("device").alias("depth"))
    return steps.filter(pl.col("d") != 0).select("device", "t_ns", "depth")
