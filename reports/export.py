"""Plain exports of the summary and the canonical tables: JSON, CSV."""
from __future__ import annotations

import json

import polars as pl

from scsitrace import outputs
from scsitrace.inert import csv_safe
from scsitrace.model import Analysis
from scsitrace.tables import CATEGORIES

IO_CSV_COLUMNS = ["io", "target", "lun", "tag", "opcode", "command", "lba", "blocks", "status",
                  "start_ns", "end_ns", "data_bytes", "connections", "complete"]


def write_json(path: str, summary: dict) -> None:
    with outputs.writing(path) as fh:
        json.dump(summary, fh, indent=1)
        fh.write("\n")


def write_categories_csv(path: str, summary: dict) -> None:
    outputs.write_frame(path, csv_safe(pl.DataFrame(summary["categories"], schema=CATEGORIES)), parquet=False)


def write_ios_csv(path: str, analysis: Analysis) -> None:
    outputs.write_frame(path, csv_safe(ios_table(analysis)), parquet=False)


def ios_table(analysis: Analysis) -> pl.DataFrame:
    """The per-I/O table as exported (CSV, batch datasets): the I/O columns first, then the
    layer's own; Python-object columns left out. The layer applied the filters."""
    ios = analysis.ios
    cols = [c for c in IO_CSV_COLUMNS if c in ios.columns]
    extra = [c for c in ios.columns if c not in IO_CSV_COLUMNS and ios.schema[c] != pl.Object]
    return ios.select(cols + extra)
