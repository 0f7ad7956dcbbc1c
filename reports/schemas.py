"""The published schemas (docs/schemas/), generated from the declarations so they cannot drift:

- `analyze-json.schema.json`: JSON Schema (draft 2020-12) of `analyze --json`, one branch per
  layer: the keys every layer has (reports/summary.py:summary), then the layer's declared
  tables (scsitrace/tables.py `Table`: a list of objects with the declared columns, or the
  shapes in `CUSTOM_JSON` for the tables that map their rows to another shape);
- `parquet.json`: the columns and types of every Parquet file the command writes:
  `analyze --ios/--segments` per layer (reports/typed_export.py) and `convert`'s canonical
  tables (scsitrace/canonical_export.py).

`python -m scsitrace.reports.schemas docs/schemas` rewrites both files; a test checks that
the committed files equal what this module generates, and validates real `--json` outputs
of every layer against the JSON Schema.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import polars as pl

LAYERS = ("bus", "block", "usb", "scsilog")
NULL = {"type": "null"}


def _scalar(dtype) -> dict:
    if dtype.is_integer():
        return {"type": "integer"}
    if dtype.is_float():
        return {"type": "number"}
    if dtype == pl.Boolean:
        return {"type": "boolean"}
    return {"type": "string"}


def _nullable(s: dict) -> dict:
    return {"anyOf": [s, NULL]}


def _obj(props: dict, required=None, extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(props if required is None else required),
            "additionalProperties": extra}


def _rows(columns: dict) -> dict:
    return {"type": "array", "items": _obj({c: _nullable(_scalar(t)) for c, t in columns.items()})}


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
CATEGORY_ROWS = {"type": "array", "items": _obj({"name": STR, "total_ns": INT, "percent": NUM,
                                                  "normalized_ns": _nullable(NUM)})}
# the tables whose JSON is not one object per row (command_tables.py, block/tables.py)
CUSTOM_JSON = {
    "srt_histogram": {"type": "array", "items": _obj({
        "opcode": _nullable(INT), "name": _nullable(STR),
        "buckets": {"type": "array", "items": _obj({"le_ns": INT, "count": INT})}})},
    "commands": _obj({"total": INT, "paired": INT, "unpaired": INT,
                      "by_reason": {"type": "object", "additionalProperties": INT}}),
    "events": {"type": "object", "additionalProperties": INT},
}
# the keys every layer's summary has (reports/summary.py:summary), in its order
COMMON = {
    "source": {"type": "object", "required": ["path", "format"],
               "properties": {"path": STR, "format": STR}, "additionalProperties": True},
    "layer": STR,
    "profile": STR,
    "target": _nullable(INT),
    "elapsed_ns": INT,
    "ios_completed": INT,
    "data_bytes": _nullable(INT),
    "bandwidth_mib_s": _nullable(NUM),
    "iops": _nullable(NUM),
    "categories": CATEGORY_ROWS,
    "targets": {"type": "array", "items": _obj({
        "target": INT, "ios_completed": INT, "ios_started": INT, "connections": INT, "busy_ns": INT,
        "busy_percent": NUM, "data_bytes": _nullable(INT), "bandwidth_mib_s": _nullable(NUM),
        "categories": {"type": "object", "additionalProperties": INT}})},
    "anomalies": _obj({"count": INT, "by_kind": {"type": "object", "additionalProperties": INT},
                       "first": {"type": "array", "items": _obj({"t_ns": _nullable(INT), "kind": STR,
                                                                 "detail": _nullable(STR),
                                                                 "position": _nullable(STR)})}}),
    "records": _obj({"read": INT, "skipped": INT, "skipped_examples": {"type": "array", "items": STR}}),
    "notes": {"type": "array", "items": STR},
    # only when a filter was given (scsitrace/core.py:load, Options.given): the filters as typed
    "filters": _obj({"window": STR, "device": STR, "pid": STR, "target": INT, "lun": INT}, required=[]),
}
OPTIONAL_KEYS = ("filters",)


def declared_tables(layer: str) -> tuple:
    """Every table a layer's analysis may declare (its optional ones too), in JSON order."""
    from scsitrace.stats import LATENCY_TABLES
    if layer == "bus":
        return LATENCY_TABLES
    if layer == "block":
        from scsitrace.block.tables import TABLES
        return (*TABLES, *LATENCY_TABLES)
    from scsitrace.command_tables import TABLES
    if layer == "usb":
        return (*TABLES, *LATENCY_TABLES)
    from scsitrace.scsilog.analysis import SRT_DRIVER
    from scsitrace.scsilog.completions import COMPLETIONS
    return (*TABLES, *LATENCY_TABLES, SRT_DRIVER, COMPLETIONS)


OPTIONAL_TABLES = {"scsilog": ("srt_driver", "completions")}  # declared only by some formats (sgio; kernel logs)


def _table_json(table) -> dict:
    if table.name in CUSTOM_JSON:
        return CUSTOM_JSON[table.name]
    cols = list(table.json_columns or table.schema)
    return _rows({table.json_names.get(c, c): table.schema[c] for c in cols})


def layer_schema(layer: str) -> dict:
    tables = declared_tables(layer)
    props = {**COMMON, "layer": {"const": layer}}
    props.update({t.name: _table_json(t) for t in tables})
    required = [k for k in props if k not in OPTIONAL_TABLES.get(layer, ()) and k not in OPTIONAL_KEYS]
    return {"title": f"{layer} layer", **_obj(props, required)}


def json_schema() -> dict:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "scsitrace/analyze-json.schema.json",
            "title": "scsitrace analyze --json",
            "description": "One object per trace; `layer` picks the branch. Generated by "
                           "reports/schemas.py from the declared tables: do not edit.",
            "oneOf": [layer_schema(layer) for layer in LAYERS]}


def _columns(schema: dict) -> dict:
    return {c: str(t) for c, t in schema.items()}


def parquet_schemas() -> dict:
    from scsitrace.canonical_export import canonical_schemas
    from scsitrace.reports import typed_export as te
    return {
        "description": "Columns and polars types of the Parquet files scsitrace writes (Int64 = int64, "
                       "times in ns from the trace's start). Generated by reports/schemas.py: do not edit.",
        "device_id": {layer: te.DEVICE_FORM[layer] for layer in LAYERS},
        "analyze --ios": {layer: _columns(te.ios_schema(layer)) for layer in LAYERS},
        "analyze --ios, format columns": {"sgio": _columns(te.schema("scsilog", "ios", "sgio"))},
        "analyze --segments": {layer: _columns(te.segments_schema(layer)) for layer in LAYERS},
        "convert": {layer: _columns_of(canonical_schemas(layer)) for layer in LAYERS},
    }


def _columns_of(tables: dict) -> dict:
    return {name: _columns(cols) for name, cols in tables.items()}


FILES = {"analyze-json.schema.json": json_schema, "parquet.json": parquet_schemas}


def render() -> dict[str, str]:
    return {name: json.dumps(fn(), indent=1) + "\n" for name, fn in FILES.items()}


def main(argv=None) -> int:
    out = Path((argv or sys.argv[1:] or ["docs/schemas"])[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (out / name).write_text(text, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
