"""The statistic record every latency figure uses: btt's stages, SRT per opcode, the latency
table of every layer (bus I/O response, block Q2C and D2C, USB and kernel-log response).

STAT: n, min_ns, avg_ns, max_ns, total_ns and the nearest-rank percentiles p50, p90, p95, p99,
p99.9 (the smallest observed time with at least p % of the samples at or below it, so a
percentile is always a time that occurred). Figures added up in a compiled pass (btt's
stages: count, min, max, sum) have no percentiles: those columns are null there.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl

STAT = {"n": pl.Int64, "min_ns": pl.Int64, "avg_ns": pl.Float64, "max_ns": pl.Int64, "total_ns": pl.Int64,
        "p50_ns": pl.Int64, "p90_ns": pl.Int64, "p95_ns": pl.Int64, "p99_ns": pl.Int64, "p999_ns": pl.Int64}
PERCENTILES = (50, 90, 95, 99, 99.9)
PERCENTILE_COLUMNS = ("p50_ns", "p90_ns", "p95_ns", "p99_ns", "p999_ns")
# histogram bucket upper bounds: powers of two of microseconds, from 1 us (the last bucket: above)
HIST_EDGES_NS = [1000 << k for k in range(0, 24)]


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


def stat_row(record) -> dict:
    """The STAT figures of a compiled record (`scsitrace._native.stat.Stat`), in STAT order."""
    return {k: getattr(record, k) for k in STAT}


def of_samples(values: np.ndarray) -> dict:
    """The STAT record of one set of samples (exact: nearest-rank percentiles)."""
    values = np.asarray(values, dtype=np.int64)
    if not len(values):
        return {"n": 0, "total_ns": 0, **{c: None for c in ("min_ns", "avg_ns", "max_ns", *PERCENTILE_COLUMNS)}}
    ranks = nearest_ranks(np.zeros(len(values), np.int8), values, [0])
    total = int(values.sum())
    return {"n": len(values), "min_ns": int(values.min()), "avg_ns": total / len(values),
            "max_ns": int(values.max()), "total_ns": total,
            **{c: r[0] for c, r in zip(PERCENTILE_COLUMNS, ranks)}}


def latency_table(samples: dict) -> pl.DataFrame:
    """LATENCY: one STAT row per named set of samples ({name: int64 array of ns}), in order."""
    return pl.DataFrame([{"name": name, **of_samples(v)} for name, v in samples.items()],
                        schema=LATENCY_SCHEMA)


def histogram_table(samples: dict) -> pl.DataFrame:
    """LATENCY_HISTOGRAM: per named set of samples, the counts in HIST_EDGES_NS buckets
    (le_ns: the bucket's upper bound, null for the last); empty buckets left out."""
    edges = np.asarray(HIST_EDGES_NS, dtype=np.int64)
    rows = []
    for name, v in samples.items():
        counts = np.bincount(np.searchsorted(edges, np.asarray(v, np.int64), side="left"),
                             minlength=len(edges) + 1)
        rows += [(name, int(edges[i]) if i < len(edges) else None, int(c)) for i, c in enumerate(counts) if c]
    return pl.DataFrame(rows, schema=HISTOGRAM_SCHEMA, orient="row")


def latency_tables(samples: dict) -> dict[str, pl.DataFrame]:
    """Both latency tables of a layer (its LATENCY_TABLES)."""
    return {"latency": latency_table(samples), "latency_histogram": histogram_table(samples)}


LATENCY_SCHEMA = {"name": pl.Utf8, **STAT}
HISTOGRAM_SCHEMA = {"name": pl.Utf8, "le_ns": pl.Int64, "count": pl.Int64}


def _declared():
    from .tables import Table
    return (Table("latency", LATENCY_SCHEMA, "the layer's latencies: n, min, avg, max, total, p50, p90, p99, "
                  "p99.9 (bus: I/O response; block: Q2C, D2C; usb, scsilog: command response)"),
            Table("latency_histogram", HISTOGRAM_SCHEMA,
                  "the same latencies counted in power-of-two buckets of microseconds (le_ns: upper bound)"))


LATENCY_TABLES = _declared()
