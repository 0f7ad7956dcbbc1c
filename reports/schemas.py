"""The published schemas (docs/schemas/), generated from the declarations so they cannot drift:

- `analyze-json.schema.json`: JSON Schema (draft 2020-12) of `analyze --json`, one branch per
  layer: the keys every layer has (reports/summary.py:summary), then the layer's declared
  tables (scsitrace/tables.py `Table`: a list of objects with the declared columns, or the
  shapes in `CUSTOM_JSON` for the tables that map their rows to another shape);
- `README.md`: the one vocabulary across layers (op, status, bytes, device_id, time, percent
  bases, which layer has which column, the batch dataset);
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

from scsitrace.tables import PERCENT_BASES

LAYERS = ("bus", "block", "usb", "scsilog")
JSON_NULL = {"type": "null"}


def _scalar(dtype) -> dict:
    if dtype.is_integer():
        return {"type": "integer"}
    if dtype.is_float():
        return {"type": "number"}
    if dtype == pl.Boolean:
        return {"type": "boolean"}
    return {"type": "string"}


def _nullable(s: dict) -> dict:
    return {"anyOf": [s, JSON_NULL]}


def _obj(props: dict, required=None, extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(props if required is None else required),
            "additionalProperties": extra}


def _rows(columns: dict) -> dict:
    return {"type": "array", "items": _obj({c: _nullable(_scalar(t)) for c, t in columns.items()})}


INT, NUM, STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
CATEGORY_ROWS = {"type": "array", "items": _obj({"name": STR, "total_ns": INT, "percent": NUM,
                                                  "normalized_ns": _nullable(NUM),
                                                  "base": {"enum": list(PERCENT_BASES)}})}
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
    "start_epoch_ns": _nullable(INT),   # scsitrace/clock.py: the wall clock of time zero, where known
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
    """Every table a layer's analysis may declare in its JSON (its optional ones too), in JSON order."""
    return tuple(t for t in _declared(layer) if t.in_json)


def _declared(layer: str) -> tuple:
    from scsitrace.series import SERIES_TABLES
    from scsitrace.stats import LATENCY_TABLES
    if layer == "bus":
        return (*LATENCY_TABLES, *SERIES_TABLES)
    if layer == "block":
        from scsitrace.block.tables import TABLES
        return (*TABLES, *LATENCY_TABLES, *SERIES_TABLES)
    from scsitrace.command_tables import TABLES
    if layer == "usb":
        return (*TABLES, *LATENCY_TABLES, *SERIES_TABLES)
    from scsitrace.scsilog.analysis import SRT_DRIVER
    from scsitrace.scsilog.completions import COMPLETIONS
    return (*TABLES, *LATENCY_TABLES, *SERIES_TABLES, SRT_DRIVER, COMPLETIONS)


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


VOCABULARY_INTRO = """\
# One vocabulary across layers

Generated by `reports/schemas.py` from the declarations (`scsitrace/schema.py`,
`scsitrace/scsi.py`, `scsitrace/tables.py`, `scsitrace/clock.py`,
`reports/typed_export.py`, `reports/dataset.py`): do not edit. The columns and types of each
file are in `parquet.json`, the JSON contract in `analyze-json.schema.json`.

The I/O tables of every layer (`analyze --ios`, the batch dataset's `ios`) and the JSON
summary use the same words, so one query runs over traces of any layer.
"""


def _table(header: tuple, rows) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]


def vocabulary_markdown() -> str:
    from scsitrace import schema, scsi
    from scsitrace.clock import CLOCKS
    from scsitrace.reports import dataset, typed_export as te
    from scsitrace.tables import PERCENT_BASES
    lines = [VOCABULARY_INTRO]
    lines += ["## `op`", "", "One of " + ", ".join(f"`{o}`" for o in schema.OPS) + "; null when the trace does "
              "not say (a bus command whose CDB was not captured and that moved no data). SCSI layers "
              "(bus, usb, kernel logs, SG_IO) by the opcode: " + ", ".join(
                  f"{kind} {', '.join(f'0x{o:02X}' for o in sorted(ops))}" for kind, ops in (
                      ("read", scsi.READ_OPS), ("write", scsi.WRITE_OPS), ("flush", scsi.FLUSH_OPS),
                      ("discard", scsi.DISCARD_OPS))) + ", any other opcode `other` (a bus I/O without "
              "its CDB: the direction of its data phase). Block (`scsitrace/block/tables.py:op_expr`): "
              "discard (D); an empty flush (blkparse `FN`, `FWS` with no data) flush; a write, also with a "
              "preflush or FUA (`W`, `WS`, `FWFS`), write; a request with data that is not a write (`R`) "
              "read; anything else (`N`) other. blkparse's RWBS letters stay in the block table's `rwbs` "
              "column (`op` held them before).", ""]
    lines += ["## `status`", "", "One of " + ", ".join(f"`{st}`" for st in scsi.STATUSES) + ", `0xNN` for a "
              "reserved SCSI status code, or null when no completion was seen (`complete` is false). "
              "`ERROR` is an I/O that failed below SCSI, without a SCSI status: a bus I/O aborted by a "
              "reset or an unexpected bus free (`ABORTED (reset)`, `ABORTED (unexpected bus free)`), a "
              "Bulk-Only `PHASE ERROR`, "
              "a kernel host byte other than `DID_OK` (`DID_TIME_OUT`, ...), a block completion with a "
              "non-zero error (blktrace's `C` error field, an errno). The layer's own word stays in "
              "`status_detail` (bus, usb, kernel logs: also `host_byte`; block: the errno's name, `EIO`). The "
              "block layer: a completed request is `GOOD` (it was `OK`; not completed: null, it was "
              "`INCOMPLETE`), `ERROR` when its completion carried an error (before 2026-11-28 the block "
              "machine did not read that field and a failed request showed `GOOD`).", ""]
    lines += ["## Bytes, devices, time", "",
              "- `bytes`: the data the I/O moved, on every layer. `data_bytes` is the same values "
              "(deprecated). `requested_bytes` (usb, kernel logs and SG_IO): the length the command asked "
              "for (Bulk-Only CBW, SG_IO `dxfer_len`), what `bytes` held on those layers before.",
              "- `device_id`: `LAYER:ADDRESS` on every I/O and segment of every layer (and the batch "
              "dataset): " + ", ".join(f"{layer} `{form}`" for layer, form in te.DEVICE_FORM.items()) + ".",
              "- Times (`*_ns`) count from the trace's time zero. `start_epoch_ns` (JSON summary, "
              "batch `traces`) is the wall-clock time of that zero in ns since 1970 UTC where the capture "
              "has a clock, else null: an I/O's wall-clock start is `start_epoch_ns + start_ns`. With "
              "`--window` the bus, usb and kernel-log layers count from the window's start and "
              "`start_epoch_ns` moves with it; the block layer keeps btt's times.", ""]
    lines += _table(("format", "clock"), CLOCKS.items()) + [""]
    lines += ["## Percentages", "", "`categories[].percent` (JSON, `--csv`, the batch `categories` table) is a "
              "share of what the row's `base` names; views title their tables and plots by it:", ""]
    lines += _table(("base", "percent of"), PERCENT_BASES.items()) + [""]
    lines += ["## Which layer has which I/O column", "", "A layer's I/O table has no column of another layer "
              "(it would be null throughout): the canonical columns and the layers that have them "
              "(`scsitrace/schema.py` `IOS_LAYERS`; each layer's own columns follow in `parquet.json`).", ""]
    lines += _table(("column", "layers"), ((f"`{c}`", ", ".join(ls)) for c, ls in schema.IOS_LAYERS.items())) + [""]
    lines += ["Deprecated columns, kept for the scripts that read them:", ""]
    lines += _table(("column", "use instead"), ((f"`{c}`", why) for c, why in te.DEPRECATED.items())) + [""]
    lines += ["## The batch dataset", "", "`scsitrace batch ... -o OUT/` (reports/dataset.py):", "", "```",
              dataset.__doc__.split("\n\n", 1)[1].split("\n\n")[0].rstrip(), "```", "",
              "Every column of every table but the two kept for older scripts (`summary.parquet`, and "
              "`targets.parquet`'s `categories.<name>`) is a name SQL takes without quotes: lower case "
              "letters, digits and `_`, no SQL keyword. Block traces changed: before, `summary.parquet`'s "
              "`percent.<stage>` and `categories.percent` of a block trace were shares of Q2C time beside "
              "bus shares of elapsed time, with nothing to tell them apart; now `base` says so.", ""]
    return "\n".join(lines)


FILES = {"analyze-json.schema.json": json_schema, "parquet.json": parquet_schemas, "README.md": vocabulary_markdown}


def render() -> dict[str, str]:
    out = {}
    for name, fn in FILES.items():
        value = fn()
        out[name] = value if isinstance(value, str) else json.dumps(value, indent=1) + "\n"
    return out


def main(argv=None) -> int:
    out = Path((argv or sys.argv[1:] or ["docs/schemas"])[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render().items():
        (out / name).write_text(text, encoding="utf-8")
        print(out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
