"""The statistic record every latency figure uses: btt's stages, SRT per opcode, response
times per device.

STAT: n, min_ns, avg_ns, max_ns, total_ns and the nearest-rank percentiles p50, p90, p99,
p99.9 (the smallest observed time with at least p % of the samples at or below it, so a
percentile is always a time that occurred). Figures added up in a compiled pass (btt's
stages: count, min, max, sum) have no percentiles: those columns are null there.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl

STAT = {"n": pl.Int64, "min_ns": pl.Int64, "avg_ns": pl.Float64, "max_ns": pl.Int64, "total_ns": pl.Int64,
        "p50_ns": pl.Int64, "p90_ns": pl.Int64, "p99_ns": pl.Int64, "p999_ns": pl.Int64}
PERCENTILES = (50, 90, 99, 99.9)
PERCENTILE_COLUMNS = ("p50_ns", "p90_ns", "p99_ns", "p999_ns")


def from_totals(n: int, lo: int, hi: int, total: int) -> dict:
    """The record of samples added up elsewhere (no percentiles)."""
    return {"n": n, "min_ns": lo, "avg_ns": total / n, "max_ns": hi, "total_ns": total,
            **{c: None for c in PERCENTILE_COLUMNS}}


def nearest_ranks(groups: np.ndarray, values: np.ndarray, keys: list, ps=PERCENTILES) -> list[list[int]]:
    """Nearest-rank percentiles `ps` of each group's values: of its ascending values, the one
    at rank ceil(p/100 * n) (at least 1), by one np.partition per group (no sort). Returns one
    list per percentile, in `keys` order."""
    out = [[] for _ in ps]
    for key in keys:
        v = values[groups == key]
        ks = [max(math.ceil(len(v) * (p / 100.0)), 1) - 1 for p in ps]
        part = np.partition(v, ks)
        for col, k in zip(out, ks):
            col.append(int(part[k]))
    return out


def by_group(frame: pl.DataFrame, key: str, value: str, first: dict | None = None) -> pl.DataFrame:
    """One STAT row per value of `key` (ascending) over the column `value`; `first`: other
    columns to carry, {output name: input column} (their first value in each group)."""
    first = first or {}
    schema = {key: frame.schema[key], **{name: frame.schema[col] for name, col in first.items()}, **STAT}
    if not frame.height:
        return pl.DataFrame(schema=schema)
    agg = (frame.group_by(key)
           .agg(*(pl.col(col).first().alias(name) for name, col in first.items()),
                pl.len().cast(pl.Int64).alias("n"), pl.col(value).min().alias("min_ns"),
                pl.col(value).mean().alias("avg_ns"), pl.col(value).max().alias("max_ns"),
                pl.col(value).sum().alias("total_ns"))
           .sort(key))
    keys = agg[key].to_list()
    ranks = nearest_ranks(frame[key].to_numpy(), frame[value].to_numpy(), keys)
    agg = agg.with_columns(pl.Series(c, r, dtype=pl.Int64) for c, r in zip(PERCENTILE_COLUMNS, ranks))
    return agg.select(list(schema)).cast(schema)
