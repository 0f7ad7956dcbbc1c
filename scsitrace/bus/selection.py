"""The bus layer's filters and per-target figures: `--target` and `--lun` applied once, here.

A selection keeps the whole trace's time: the segments still tile it, and the bus-busy time
of every other target (LUN) is relabelled "Other targets" ("Other LUNs"), so the percentage
tables still sum to the elapsed time. The I/Os, bytes and response times are the selected
target's (LUN's) only. Every view and export renders what this module hands over.

The per-target tables (`targets`, `target_categories`) are of the whole trace, whatever the
selection: each target's I/Os, connections, busy time, bytes, and its time by category with
every other target's busy time set aside.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from ..tables import Table, percent_table

OTHER_TARGETS = "Other targets"
OTHER_LUNS = "Other LUNs"
OTHER_BOTH = "Other targets and LUNs"
MIB = float(1 << 20)
PROFILE_COLUMN = {"raid1990": "category", "scsi": "phase"}

TARGETS = Table("targets", {
    "target": pl.Int64, "ios_completed": pl.Int64, "ios_started": pl.Int64, "connections": pl.Int64,
    "busy_ns": pl.Int64, "busy_percent": pl.Float64, "data_bytes": pl.Int64, "bandwidth_mib_s": pl.Float64,
}, "per target seen on the bus: I/Os completed and started, connections, bus-busy time (its share "
   "of the elapsed time), bytes in its DATA phases and their rate over the elapsed time")
TARGET_CATEGORIES = Table("target_categories", {
    "target": pl.Int64, "profile": pl.Utf8, "name": pl.Utf8, "total_ns": pl.Int64,
}, "per target and profile: the target's time in each category (Bus Free: the whole trace's), "
   "every other target's busy time left out")


def others_name(target: int | None, lun: int | None) -> str:
    return OTHER_LUNS if target is None else OTHER_TARGETS if lun is None else OTHER_BOTH


def picked(target: int | None, lun: int | None) -> pl.Expr:
    """Rows (segments with a `lun` column, or ios) of the selected target and LUN."""
    keep = pl.lit(True)
    if target is not None:
        keep &= pl.col("target").fill_null(-1) == target
    if lun is not None:
        keep &= pl.col("lun").fill_null(-1) == lun
    return keep


@dataclass
class Selection:
    segments: pl.DataFrame   # every segment; the others' busy ones relabelled, without their I/O
    ios: pl.DataFrame        # the selected I/Os
    others: str | None       # the relabelled bucket's name (None: no selection)

    def categories(self, order: dict[str, list[str]], elapsed_ns: int, completed: int,
                   no_normalized: tuple) -> dict[str, pl.DataFrame]:
        """profile -> percentage table over the (relabelled) segments, in the profile's order;
        normalized by the `completed` I/Os."""
        out = {}
        for profile, names in order.items():
            col = PROFILE_COLUMN[profile]
            names = list(names) + ([self.others] if self.others else [])
            totals = _totals(self.segments, col)
            extra = sorted(n for n in totals if n not in names and totals[n])   # RESET, UNKNOWN when present
            out[profile] = percent_table(totals, names + extra, elapsed_ns, completed,
                                         tuple(no_normalized) + ((self.others,) if self.others else ()))
        return out


def _totals(segments: pl.DataFrame, col: str) -> dict:
    dur = (pl.col("end_ns") - pl.col("start_ns")).sum()
    return dict(segments.group_by(col).agg(dur).iter_rows())


def with_lun(segments: pl.DataFrame, ios: pl.DataFrame) -> pl.DataFrame:
    """The segments, each with the LUN of its I/O (null where it has none)."""
    if "lun" in segments.columns:
        return segments
    return segments.join(ios.select("io", "lun"), on="io", how="left")


def select(segments: pl.DataFrame, ios: pl.DataFrame, target: int | None, lun: int | None,
           free: set[str]) -> Selection:
    """Apply --target/--lun: `free` names the categories and phases of bus-free time."""
    if target is None and lun is None:
        return Selection(segments, ios, None)
    others = others_name(target, lun)
    seg = with_lun(segments, ios) if lun is not None else segments
    other = ~picked(target, lun) & ~pl.col("phase").is_in(list(free))
    seg = seg.with_columns(
        pl.when(other).then(pl.lit(others)).otherwise(pl.col("phase")).alias("phase"),
        pl.when(other).then(pl.lit(others)).otherwise(pl.col("category")).alias("category"),
        pl.when(other).then(None).otherwise(pl.col("io")).alias("io"),
        pl.when(other).then(None).otherwise(pl.col("bytes")).alias("bytes"),
    ).select(segments.columns)
    return Selection(seg, ios.filter(picked(target, lun)), others)


def target_tables(segments: pl.DataFrame, ios: pl.DataFrame, order: dict[str, list[str]],
                  free: set[str], elapsed_ns: int, has_bytes: bool) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(TARGETS, TARGET_CATEGORIES) of the whole trace (see the module's docstring)."""
    ids = sorted(t for t in segments["target"].unique().to_list() if t is not None)
    busy = segments.filter(pl.col("target").is_not_null() & ~pl.col("phase").is_in(list(free)))
    dur = (pl.col("end_ns") - pl.col("start_ns"))
    per = (busy.group_by("target").agg(dur.sum().alias("busy_ns"),
                                       pl.col("connection").drop_nulls().n_unique().alias("connections"),
                                       pl.when(pl.col("phase").str.starts_with("DATA")).then(pl.col("bytes"))
                                       .sum().alias("data_bytes")))
    io_counts = ios.group_by("target").agg(pl.col("complete").fill_null(False).sum().alias("ios_completed"),
                                           pl.len().alias("ios_started"))
    secs = elapsed_ns / 1e9
    rows = (pl.DataFrame({"target": ids}, schema={"target": pl.Int64})
            .join(per.with_columns(pl.col("target").cast(pl.Int64)), on="target", how="left")
            .join(io_counts.with_columns(pl.col("target").cast(pl.Int64)), on="target", how="left")
            .with_columns(pl.col("busy_ns", "connections", "ios_completed", "ios_started").fill_null(0))
            .with_columns((pl.col("data_bytes").fill_null(0) if has_bytes else pl.lit(None, pl.Int64)).alias("data_bytes")))
    # numpy, in the order the JSON has always computed them (polars may round the last bit otherwise)
    busy = rows["busy_ns"].to_numpy().astype(np.float64)
    data = rows["data_bytes"].to_numpy().astype(np.float64) if has_bytes else None
    rows = rows.with_columns(
        pl.Series("busy_percent", 100.0 * busy / elapsed_ns if elapsed_ns else np.zeros(len(busy))),
        pl.Series("bandwidth_mib_s", data / MIB / secs if data is not None and secs > 0 else [None] * len(busy),
                  dtype=pl.Float64))
    cats = []
    for t in ids:
        sel = select(segments, ios, t, None, free)
        completed = int(sel.ios["complete"].fill_null(False).sum())
        for profile, table in sel.categories(order, elapsed_ns, completed, ()).items():
            cats.append(table.filter(pl.col("name") != sel.others)
                        .select(pl.lit(t, pl.Int64).alias("target"), pl.lit(profile).alias("profile"),
                                "name", "total_ns"))
    long = pl.concat(cats) if cats else TARGET_CATEGORIES.empty()
    return rows.select(list(TARGETS.schema)), long


def targets_json(targets: pl.DataFrame, categories: pl.DataFrame, profile: str) -> list[dict]:
    """The JSON contract's `targets`: each target's row with its categories of `profile`."""
    out = []
    for row in targets.iter_rows(named=True):
        cats = categories.filter((pl.col("target") == row["target"]) & (pl.col("profile") == profile))
        out.append({**row, "categories": dict(cats.select("name", "total_ns").iter_rows())})
    return out
