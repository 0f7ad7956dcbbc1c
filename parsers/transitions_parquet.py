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
    missing = [c for c in schema.TRANSITIONS if c not in pf.schema_arrow.names]
    if missing:
        raise BadInput(path, f"Parquet file lacks transitions column(s) {', '.join(missing)}", offset=footer)
    cap = Capture(layer="bus", path=path, format=ID, meta=meta)

    def chunks():
        cap.records.read = 0
        for group in range(pf.num_row_groups):
            try:
                table = pf.read_row_group(group, columns=list(schema.TRANSITIONS))
                frame = pl.from_arrow(table).cast(schema.TRANSITIONS)
            except Exception as exc:  # a damaged page: name the row group's first byte
                chunk = pf.metadata.row_group(group).column(0)
                start = chunk.dictionary_page_offset or chunk.data_page_offset
                raise BadInput(path, f"row group {group} cannot be read ({_first_line(exc)})",
                               offset=int(start)) from None
            cap.records.read += frame.height
            yield frame

    cap.chunks = chunks
    cap.notes.append(f"converted from {stored.get('source_path')} ({stored.get('source_format')})")
    return cap


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
