"""Bus transitions stored as Parquet by `scsitrace convert` (DESIGN: convert once, analyse
often). The canonical `transitions` columns plus the capture's metadata as JSON in the file's
key-value metadata; read back row group by row group, so it streams like the text formats."""
from __future__ import annotations

import json

import polars as pl
import pyarrow.parquet as pq

from scsitrace import schema
from scsitrace.errors import BadInput
from scsitrace.model import Capture

ID = "transitions-parquet"
SUFFIXES = (".parquet",)
META_KEY = b"scsitrace.capture"


def sniff(head: bytes) -> bool:
    return head.startswith(b"PAR1")


def parse(path: str, *, strict: bool = True, progress=None, **_opts) -> Capture:
    path = str(path)
    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow says what is wrong with the footer/magic
        raise BadInput(path, f"not a readable Parquet file ({exc})", offset=0) from None
    raw = (pf.schema_arrow.metadata or {}).get(META_KEY)
    if raw is None:
        raise BadInput(path, "Parquet file without scsitrace capture metadata "
                             "(write it with `scsitrace convert`)", offset=0)
    stored = json.loads(raw)
    missing = [c for c in schema.TRANSITIONS if c not in pf.schema_arrow.names]
    if missing:
        raise BadInput(path, f"Parquet file lacks transitions column(s) {', '.join(missing)}", offset=0)
    cap = Capture(layer="bus", path=path, format=ID, meta=stored["meta"])

    def chunks():
        cap.records.read = 0
        for batch in pf.iter_batches(columns=list(schema.TRANSITIONS)):
            frame = pl.from_arrow(batch).cast(schema.TRANSITIONS)
            cap.records.read += frame.height
            yield frame

    cap.chunks = chunks
    cap.notes.append(f"converted from {stored.get('source_path')} ({stored.get('source_format')})")
    return cap


def write(path: str, capture: Capture) -> int:
    """Stream a bus capture's transitions into Parquet; returns the number written."""
    import pyarrow as pa
    meta = {"meta": capture.meta, "source_path": capture.path, "source_format": capture.format}
    arrow_schema = pl.DataFrame(schema=schema.TRANSITIONS).to_arrow().schema.with_metadata(
        {META_KEY: json.dumps(meta).encode()})
    n = 0
    with pq.ParquetWriter(path, arrow_schema, compression="zstd") as writer:
        for chunk in capture.chunks():
            writer.write_table(pa.Table.from_batches(chunk.to_arrow().to_batches(), schema=arrow_schema))
            n += chunk.height
    return n
