"""Bus transitions stored as Parquet by `scsitrace convert` (DESIGN: convert once, analyse
often). The canonical `transitions` columns plus the capture's metadata as JSON in the file's
key-value metadata; read back row group by row group, so it streams like the text formats."""
from __future__ import annotations

import json

import polars as pl

from scsitrace import schema
from scsitrace import outputs
from scsitrace.errors import BadInput
from scsitrace.model import Capture

ID = "transitions-parquet"
SUFFIXES = (".parquet",)
META_KEY = b"scsitrace.capture"


def sniff(head: bytes) -> bool:
    return head.startswith(b"PAR1")


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    path = str(path)
    import pyarrow.parquet as pq    # imported here: sniffing other formats does not load it
    footer = _footer_offset(path)
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow says what is wrong with the footer/magic
        raise BadInput(path, f"not a readable Parquet file ({_first_line(exc)})", offset=footer) from None
    raw = (pf.schema_arrow.metadata or {}).get(META_KEY)
    if raw is None:
        raise BadInput(path, "Parquet file without scsitrace capture metadata "
                             "(write it with `scsitrace convert`)", offset=footer)
    try:
        stored = json.loads(raw)
        meta = dict(stored["meta"])
    except (ValueError, KeyError, TypeError):
        raise BadInput(path, "damaged scsitrace capture metadata in the Parquet footer", offset=footer) from None
    bad_meta = _bad_meta(meta)
    if bad_meta:
        raise BadInput(path, f"scsitrace capture metadata: {bad_meta}", offset=footer)
    missing = [c for c in schema.TRANSITIONS if c not in pf.schema_arrow.names]
    if missing:
        raise BadInput(path, f"Parquet file lacks transitions column(s) {', '.join(missing)}", offset=footer)
    cap = Capture(layer="bus", path=path, format=ID, meta=meta)

    def chunks():
        cap.records.read = cap.records.skipped = 0
        last = [0]                      # the previous row's time: times never go back, never below 0
        for group in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(group, columns=list(schema.TRANSITIONS))
                frame = pl.from_arrow(table).cast(schema.TRANSITIONS)
            except Exception as exc:  # a damaged page: name the row group's first byte
                chunk = pf.metadata.row_group(group).column(0)
                start = chunk.dictionary_page_offset or chunk.data_page_offset
                raise BadInput(path, f"row group {group} cannot be read ({_first_line(exc)})",
                               offset=int(start)) from None
            frame = _in_order(frame, last, path, group, pf, strict, cap)
            cap.records.read += frame.height
            yield frame

    cap.chunks = chunks
    cap.notes.append(f"converted from {stored.get('source_path')} ({stored.get('source_format')})")
    return cap


# metadata key -> (lowest, highest) of a value the analysis takes from it
META_RANGES = {"initiator": (0, 15), "tick_ns": (1e-6, 1e12), "sample_period_ns": (1e-6, 1e12)}


def _bad_meta(meta: dict) -> str | None:
    """What is wrong with a value of the stored capture metadata the analysis uses, if any."""
    for key, (lo, hi) in META_RANGES.items():
        v = meta.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            return f"{key} = {str(v)[:40]!r} outside {lo:g} .. {hi:g}"
    return None


def _in_order(frame: pl.DataFrame, last: list, path: str, group: int, pf, strict: bool, cap) -> pl.DataFrame:
    """The rows of a row group whose time is present, not negative and not before the previous
    row's; strict: the first other one is bad input (offset: the row group's first page),
    lenient: skipped and counted."""
    t = frame["t_ns"]
    running = pl.select(pl.max_horizontal(t.fill_null(-1), pl.lit(last[0])).cum_max()).to_series()
    prev = running.shift(1, fill_value=last[0])
    bad = (t.is_null() | (t < 0) | (t < prev)).fill_null(True)
    if bad.any():
        row = int(bad.arg_true()[0])
        v = t[row]
        why = "t_ns is null" if v is None else "t_ns is negative" if v < 0 else \
            f"t_ns goes back in time ({v} after {prev[row]})"
        chunk = pf.metadata.row_group(group).column(0)
        where = int(chunk.dictionary_page_offset or chunk.data_page_offset)
        if strict:
            raise BadInput(path, f"row group {group}, row {row}: {why}", offset=where)
        cap.records.skip(int(bad.sum()), [f"{path}: byte offset {where}: row group {group}, row {row}: {why}"])
        frame = frame.filter(~bad)
    if frame.height:
        last[0] = max(last[0], int(frame["t_ns"].max()))
    return frame


def _footer_offset(path: str) -> int:
    """Where the footer's metadata starts (the length word before the closing magic says),
    or 0 when the file is too short to have one."""
    import os
    size = os.path.getsize(path)
    if size < 12:
        return 0
    with open(path, "rb") as fh:
        fh.seek(size - 8)
        length = int.from_bytes(fh.read(4), "little")
    return max(size - 8 - length, 0) if length <= size - 12 else size - 8


def _first_line(exc: Exception) -> str:
    """A library's message, first line only (the error contract is one line)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def write(path: str, capture: Capture) -> int:
    """Stream a bus capture's transitions into Parquet; returns the number written."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    meta = {"meta": capture.meta, "source_path": capture.path, "source_format": capture.format}
    arrow_schema = pl.DataFrame(schema=schema.TRANSITIONS).to_arrow().schema.with_metadata(
        {META_KEY: json.dumps(meta).encode()})
    n = 0
    with outputs.replacing(path) as tmp, pq.ParquetWriter(tmp, arrow_schema, compression="zstd") as writer:
        for chunk in capture.chunks():
            writer.write_table(pa.Table.from_batches(chunk.to_arrow().to_batches(), schema=arrow_schema))
            n += chunk.height
    return n
