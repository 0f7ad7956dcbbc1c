"""Declared tables: what an analysis hands to the reports, each declared once.

A layer's analysis returns its named tables (polars frames) in `Analysis.tables`; each is
declared by a `Table` in the layer's package (its schema, what it holds, and how the JSON
contract shows it). `check` validates a frame against its declaration where the layer hands
it over; `reports/summary.py` turns every declared table into its JSON key in one loop, and
the terminal, CSV and HTML renderers read the summary: no figure is computed twice.

The percentage table of every layer (`categories` in the JSON) is built by one function,
`percent_table`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import polars as pl

from .schema import validate

CATEGORIES = {"name": pl.Utf8, "total_ns": pl.Int64, "percent": pl.Float64, "normalized_ns": pl.Float64,
              "base": pl.Utf8}
# what a percentage table's `percent` is a share of (its `base` column), per layer
PERCENT_BASES = {
    "elapsed": "the trace's elapsed time (bus; usb and kernel logs with one device)",
    "devices_x_elapsed": "the number of devices x the elapsed time (usb and kernel logs with several "
                         "devices: each device's time is tiled once)",
    "q2c": "the Q2C time of the completed requests (block: btt's Device Overhead, not a share of the "
           "elapsed time)",
}


@dataclass(frozen=True)
class Table:
    """A table of a layer: its `name` (also its JSON key), `schema` (columns and types, in
    order), what it holds (`doc`), and how the JSON contract shows it: by default one object
    per row with the columns `json_columns` (all when empty, renamed by `json_names`), or
    `json`, a function of the frame."""

    name: str
    schema: dict
    doc: str
    json_columns: tuple[str, ...] = ()
    json_names: dict = field(default_factory=dict)
    json: Callable[[pl.DataFrame], object] | None = None
    in_json: bool = True      # False: too large for the JSON summary (exports and the API have it)

    def to_json(self, frame: pl.DataFrame):
        if self.json is not None:
            return self.json(frame)
        cols = list(self.json_columns or self.schema)
        return frame.select(pl.col(c).alias(self.json_names.get(c, c)) for c in cols).to_dicts()

    def empty(self) -> pl.DataFrame:
        return pl.DataFrame(schema=self.schema)


def check(table: Table, frame: pl.DataFrame) -> pl.DataFrame:
    """The frame with its declared columns in their order and types (a cast that would lose
    a value raises: a bug in the layer, not bad input)."""
    missing = [c for c in table.schema if c not in frame.columns]
    if missing:
        raise AssertionError(f"table {table.name}: missing columns {missing}")
    out = frame.select(list(table.schema)).cast(table.schema, strict=True)
    return validate(out, table.schema, table.name)


def mapping(key: str, value: str) -> Callable[[pl.DataFrame], dict]:
    """JSON shape: {key: value} over the rows."""
    return lambda frame: {k: v for k, v in frame.select(key, value).iter_rows()}


# how a view titles a percentage table, by its base
PERCENT_TITLES = {"elapsed": "Share of elapsed time", "devices_x_elapsed": "Share of device time (devices x elapsed)",
                  "q2c": "Share of Q2C time (not of elapsed time)"}


def percent_title(categories: list[dict], default: str = "elapsed") -> str:
    """The title of a summary's `categories` rows by the base they say (PERCENT_TITLES)."""
    return PERCENT_TITLES[categories[0].get("base", default) if categories else default]


def percent_table(totals: dict, names, whole_ns: int, ios_completed: int,
                  no_normalized=(), base: str = "elapsed") -> pl.DataFrame:
    """The percentage table (CATEGORIES): one row per name in `names`, its time (`totals`,
    0 when absent), its percentage of `whole_ns` (named by `base`, one of PERCENT_BASES:
    elapsed time, or devices x elapsed, or Q2C time for btt), and its time per completed I/O
    (null for the names in `no_normalized`, and when no I/O completed)."""
    assert base in PERCENT_BASES, base
    rows = [{"name": name, "total_ns": int(totals.get(name, 0)),
             "percent": 100.0 * totals.get(name, 0) / whole_ns if whole_ns else 0.0,
             "normalized_ns": (totals.get(name, 0) / ios_completed
                               if ios_completed and name not in no_normalized else None), "base": base}
            for name in names]
    return pl.DataFrame(rows, schema=CATEGORIES)
