"""The Parquet dataset of a batch run (`scsitrace batch ... -o OUT/`):

    OUT/traces.parquet       one row per trace: trace_id, trace, key, status, error, then the
                             JSON summary's figures flattened with SQL-safe names (nested keys
                             joined with '_', lower case: source_format, records_skipped,
                             start_epoch_ns); what is keyed by data goes in the long tables
    OUT/categories.parquet   long tables keyed by trace_id (and trace): one row per item of
    OUT/stages.parquet       the summary's list of the same name, nested keys dotted
    OUT/srt.parquet          (categories: name, total_ns, percent, normalized_ns and `base`,
    OUT/targets.parquet      what `percent` is a share of: elapsed, devices_x_elapsed, q2c)
    OUT/devices.parquet      (devices, stages, targets: with the device_id of the I/O tables)
    OUT/latency.parquet
    OUT/target_categories.parquet  per trace and bus target: name, total_ns
    OUT/labels.parquet       the manifest's labels: name, value (text)
    OUT/counts.parquet       the summary's counts keyed by data: what (anomalies_by_kind, events,
                             commands_by_reason, source_skipped_by_design), name, count
    OUT/skipped.parquet      files met in directories that are not traces: path, reason
    OUT/ios/trace_id=N/part-0.parquet   the per-I/O table of each trace as `--ios` writes it
                             (typed, device_id, the one vocabulary; hive partitions), but for
                             sgio's `asc` (an SQL keyword: its twin sense_asc is there)
    OUT/summary.parquet      (kept for scripts that read it; deprecated) one row per trace:
                             trace_id, trace, key, status, error, label.*, then the JSON summary
                             flattened with dots (source.format, records.skipped; the category
                             table as percent.<name>, total_ns.<name>, normalized_ns.<name>,
                             and percent_base: what percent.<name> is a share of)

Every column of every table but summary.parquet and targets.parquet's `categories.<name>`
(kept as they were) is a name SQL takes without quotes (SQL_NAME). Every file of a table has
the same columns, in the same order, with the same types (the union over the traces; a column
whose values disagree in type across traces is text), so `pl.scan_parquet("OUT/ios")` and
duckdb's `read_parquet('OUT/ios/*/*.parquet', hive_partitioning = true)` read it as it is; in
`ios` a trace's rows are null in the columns of other layers only. Rows are in trace_id order
and nothing in the dataset depends on where or when a trace ran.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import polars as pl

LONG_TABLES = ("categories", "stages", "srt", "targets", "devices", "latency")
SQL_TABLES = ("traces", "target_categories", "labels", "counts")
SQL_NAME = re.compile(r"[a-z_][a-z0-9_]*")
# --ios columns the dataset leaves out: SQL keywords, each with a twin (typed_export.SENSE_TWINS)
NOT_SQL = ("asc",)
# the summary's objects keyed by data (kinds, letters, reasons), not by the contract: counts.parquet
COUNTS = ("anomalies.by_kind", "events", "commands.by_reason", "source.skipped_by_design")
KEY_COLUMNS = {"trace_id": pl.Int64, "trace": pl.Utf8}
SQL_LONG = {"target_categories": {"target": pl.Int64, "name": pl.Utf8, "total_ns": pl.Int64},
            "labels": {"name": pl.Utf8, "value": pl.Utf8},
            "counts": {"what": pl.Utf8, "name": pl.Utf8, "count": pl.Int64}}
IOS_DIR = "ios"
# tables, even when empty (a summary key holding rows never becomes a summary column)
ROW_LISTS_LEFT_OUT = {"anomalies.first", "srt_histogram", "overhead", "latency_histogram", "processes",
                      "process_stages", "size_histogram", "srt_driver"}


def flatten(value: dict, prefix: str = "", out: dict | None = None) -> dict:
    """{"a": {"b": 1}, "c": ["x"]} -> {"a.b": 1, "c": ["x"]}. Lists of tables are left out
    (the long tables, anomalies.first, histograms): they do not fit in one row."""
    out = {} if out is None else out
    for k, v in value.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            flatten(v, name + ".", out)
        elif name not in ROW_LISTS_LEFT_OUT and not (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            out[name] = v
    return out


def summary_row(summary: dict) -> dict:
    """The summary's figures as one flat row."""
    s = {k: v for k, v in summary.items() if k not in LONG_TABLES}
    row = flatten(s)
    for c in summary.get("categories", []):
        for fig in ("percent", "total_ns", "normalized_ns"):
            row[f"{fig}.{c['name']}"] = c.get(fig)
    bases = {c["base"] for c in summary.get("categories", []) if "base" in c}
    if bases:                 # what percent.<name> is a share of (categories.base)
        row["percent_base"] = bases.pop() if len(bases) == 1 else None
    return row


def long_rows(summary: dict, table: str) -> list[dict]:
    return [flatten(item) if isinstance(item, dict) else {"value": item} for item in summary.get(table) or []]


def with_device_ids(rows: list[dict], layer: str) -> list[dict]:
    """Rows naming a device (`device`; bus targets: `target`) with its `device_id` first, the form
    of the I/O tables (typed_export.device_id); null for the totals ("all", "Overall")."""
    from scsitrace.reports.typed_export import DEVICE_PREFIX
    key = "target" if layer == "bus" else "device"
    if not rows or key not in rows[0]:
        return rows
    prefix = DEVICE_PREFIX[layer] + ":"
    return [{"device_id": None if r.get(key) in (None, "all", "Overall") else f"{prefix}{r[key]}", **r} for r in rows]


def sql_name(key: str) -> str:
    """A summary key path as a name SQL takes without quotes: lower case, '_' for the rest."""
    name = re.sub(r"[^a-z0-9_]", "_", key.lower())
    return name if SQL_NAME.fullmatch(name) else "_" + name


def _sql_flatten(value: dict, prefix: str, row: dict, counts: list) -> None:
    for k, v in value.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict):
            if path in COUNTS:
                counts += [{"what": sql_name(path), "name": str(n), "count": c} for n, c in v.items()]
            else:
                _sql_flatten(v, path + ".", row, counts)
        elif path not in ROW_LISTS_LEFT_OUT and not (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            row[sql_name(path)] = v


def sql_rows(summary: dict) -> dict[str, list[dict]]:
    """The summary as the SQL-safe tables: `traces` (one row of figures), `counts` (the objects
    keyed by data), `target_categories` (each target's time per category)."""
    row: dict = {}
    counts: list[dict] = []
    _sql_flatten({k: v for k, v in summary.items() if k not in LONG_TABLES}, "", row, counts)
    per_target = [{"target": t.get("target"), "name": n, "total_ns": ns}
                  for t in summary.get("targets") or [] for n, ns in (t.get("categories") or {}).items()]
    return {"traces": [row], "counts": counts, "target_categories": per_target}


def frame(rows: list[dict], first: dict | None = None) -> pl.DataFrame:
    """Rows with differing keys -> one frame: columns in order of first appearance, each of one
    type (ints and floats: float; lists of text; anything mixed: text)."""
    names: dict[str, None] = dict.fromkeys(first or {})
    for r in rows:
        names.update(dict.fromkeys(r))
    cols = {}
    for name in names:
        values = [r.get(name) for r in rows]
        cols[name] = _series(name, values, (first or {}).get(name))
    return pl.DataFrame(cols) if cols else pl.DataFrame()


def _series(name: str, values: list, dtype=None) -> pl.Series:
    if dtype is not None:
        return pl.Series(name, values, dtype=dtype)
    kinds = {_kind(v) for v in values if v is not None}
    if not kinds:
        return pl.Series(name, values, dtype=pl.Utf8)
    if kinds == {"bool"}:
        return pl.Series(name, values, dtype=pl.Boolean)
    if kinds == {"int"}:
        if all(-(1 << 63) <= v < (1 << 63) for v in values if v is not None):
            return pl.Series(name, values, dtype=pl.Int64)
        kinds = {"float"}
    if kinds <= {"int", "float"}:
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    if kinds == {"str"}:
        return pl.Series(name, values, dtype=pl.Utf8)
    if kinds == {"list"} and all(isinstance(x, str) for v in values if v is not None for x in v):
        return pl.Series(name, values, dtype=pl.List(pl.Utf8))
    return pl.Series(name, [None if v is None else v if isinstance(v, str) else v.isoformat()   # TOML dates
                            if hasattr(v, "isoformat") else json.dumps(v, default=str) for v in values], dtype=pl.Utf8)


def _kind(v) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, list):
        return "list"
    return "other"


def dataset_files() -> set[str]:
    """The names a dataset directory holds (what replacing an older dataset may remove)."""
    return {"summary.parquet", "skipped.parquet", IOS_DIR} | {f"{t}.parquet" for t in LONG_TABLES + SQL_TABLES}


def check_replaceable(out: str) -> None:
    """Refuse, before any work, an output directory that holds something else than a
    dataset: it is replaced whole when the new dataset is complete."""
    if not os.path.isdir(out):
        return
    other = sorted(set(os.listdir(out)) - dataset_files())
    if other:
        from scsitrace.outputs import OutputError
        raise OutputError(f"{out}: holds files that are not a scsitrace dataset ({', '.join(other[:3])}"
                          f"{', ...' if len(other) > 3 else ''}); the dataset replaces the directory whole: "
                          "name a new directory or an older dataset")


class DatasetWriter:
    """Collects results as they arrive (any order), writes each trace's I/O table at once and
    the tables at `close()`, in a new directory beside `out` that `close()` swaps in for the
    old dataset (outputs.swap_in): an older dataset stays whole until the new one is;
    `abort()` removes the new one."""

    def __init__(self, out: str):
        from scsitrace import outputs
        check_replaceable(out)
        outputs.check_output(out, "-o", directory=True)
        self.final = out
        self.out = outputs.new_directory(out)
        os.makedirs(os.path.join(self.out, IOS_DIR))
        self.rows: dict[int, dict] = {}
        self.long: dict[int, dict[str, list[dict]]] = {}
        self.sql: dict[int, dict[str, list[dict]]] = {}
        self.ios_schemas: dict[int, pl.Schema] = {}

    def add(self, job, result: dict) -> None:
        row = {"trace_id": job.trace_id, "trace": job.path, "key": job.key, "status": result["status"],
               "error": result["error"]}
        row.update({f"label.{k}": v for k, v in job.labels.items()})
        sql = {"traces": [{sql_name(k): v for k, v in row.items() if not k.startswith("label.")}],
               "labels": [{"name": str(k), "value": None if v is None else str(v)} for k, v in job.labels.items()]}
        s = result.get("summary")
        if s is not None:
            row.update(summary_row(s))
            self.long[job.trace_id] = {t: with_device_ids(long_rows(s, t), s["layer"]) for t in LONG_TABLES}
            more = sql_rows(s)
            sql["traces"][0].update(more.pop("traces")[0])
            sql.update(more)
        self.rows[job.trace_id] = row
        self.sql[job.trace_id] = sql
        ios = result.get("ios")
        if ios is not None and s is not None:
            from scsitrace.reports.typed_export import typed_ios
            ios = typed_ios(ios, s["layer"], s["source"].get("format")).drop(NOT_SQL, strict=False)
        if ios is not None:
            path = self._ios_path(job.trace_id)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            ios.write_parquet(path)
            self.ios_schemas[job.trace_id] = ios.schema

    def _ios_path(self, trace_id: int) -> str:
        return os.path.join(self.out, IOS_DIR, f"trace_id={trace_id}", "part-0.parquet")

    def close(self, skipped: list[tuple[str, str]] = ()) -> None:
        ids = sorted(self.rows)
        first = {"trace_id": pl.Int64, "trace": pl.Utf8, "key": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8}
        frame([self.rows[i] for i in ids], first).write_parquet(os.path.join(self.out, "summary.parquet"))
        for table in LONG_TABLES:
            rows = [{"trace_id": i, "trace": self.rows[i]["trace"], **r}
                    for i in ids for r in self.long.get(i, {}).get(table, [])]
            frame(rows, KEY_COLUMNS).write_parquet(os.path.join(self.out, f"{table}.parquet"))
        frame([self.sql[i]["traces"][0] for i in ids], first).write_parquet(os.path.join(self.out, "traces.parquet"))
        for table, columns in SQL_LONG.items():
            rows = [{"trace_id": i, "trace": self.rows[i]["trace"], **r} for i in ids for r in self.sql[i].get(table, [])]
            frame(rows, {**KEY_COLUMNS, **columns}).write_parquet(os.path.join(self.out, f"{table}.parquet"))
        pl.DataFrame({"path": [p for p, _ in skipped], "reason": [r for _, r in skipped]},
                     schema={"path": pl.Utf8, "reason": pl.Utf8}).write_parquet(
            os.path.join(self.out, "skipped.parquet"))
        self._unify_ios()
        from scsitrace import outputs
        outputs.swap_in(self.out, self.final)

    def abort(self) -> None:
        """Remove the new dataset (the older one, if any, stays as it was)."""
        shutil.rmtree(self.out, ignore_errors=True)

    def _unify_ios(self) -> None:
        """Rewrite the partitions whose columns differ from the union (traces of other layers)."""
        union: dict[str, pl.DataType] = {}
        for i in sorted(self.ios_schemas):
            for name, dtype in self.ios_schemas[i].items():
                if name not in union:
                    union[name] = dtype
                elif union[name] != dtype:
                    union[name] = pl.Utf8
        target = pl.Schema(union)
        for i, schema in self.ios_schemas.items():
            if schema == target:
                continue
            path = self._ios_path(i)
            df = pl.read_parquet(path)
            df.select([pl.col(n).cast(t) if n in df.columns else pl.lit(None, dtype=t).alias(n)
                       for n, t in union.items()]).write_parquet(path)


def read_summary(out: str) -> pl.DataFrame:
    return pl.read_parquet(os.path.join(out, "summary.parquet"))
