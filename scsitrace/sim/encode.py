"""Bus encoder: the event model's line changes and REQ/ACK handshake runs -> transitions.

The model describes the bus compactly (a few dozen items per I/O); numpy expands them, block
by block, into `transitions` frames (four rows per byte at levels 2 and 3: REQ rises, ACK
rises, REQ falls, ACK falls), so an 80 M-transition trace never sits in memory at once.
The recorder also keeps the ground truth: one segment per run of equal phase key.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.schema import SIGNAL_BIT

BIT = {name: 1 << b for name, b in SIGNAL_BIT.items()}
REQ, ACK = BIT["REQ"], BIT["ACK"]
STEP_MASK = np.array([REQ, REQ | ACK, ACK, 0], dtype=np.int64)
LINE_STATE, HANDSHAKES = 0, 1
DB_POOL, DB_PATTERN = 0, 1
FLUSH_ROWS = 4 << 20


class Recorder:
    """Collects items in time order, flushes expanded transitions to `sink.write(frame)`.

    Ground truth is recorded beside: `segment(...)` opens a new run of phase key; every
    handshake adds to the open segment's byte count.
    """

    def __init__(self, level: int, byte_ns: int, offsets: tuple[int, int, int], sink, end_ns=None):
        self.level, self.byte_ns, self.sink, self.end_ns = level, byte_ns, sink, end_ns
        self.offsets = np.array((0,) + tuple(offsets), dtype=np.int64)
        self._cols = {k: [] for k in ("t", "kind", "lines", "db", "n", "d0", "dbk", "dbv")}
        self._pool = bytearray()
        self._rows = 0
        self._last_row = (0, None)
        self.written = 0
        self.lines = 0
        self.db = 0
        self.last_t = 0
        self.seg = {k: [] for k in ("start_ns", "phase", "connection", "io", "io_blind", "target",
                                    "initiator", "bytes", "msg", "runs", "resel_need", "resel_unique")}

    # -- line states ----------------------------------------------------------------------
    def set(self, t: int, lines: int, db: int | None = None, **segment) -> None:
        """The bus lines become `lines` at `t`; with keyword arguments a new segment starts."""
        assert t >= self.last_t, (t, self.last_t)
        self.last_t = t
        self.lines = lines
        if db is not None:
            self.db = db
        self._add(t, LINE_STATE, lines, self.db, 0, 0, DB_POOL, 0)
        if segment:
            self.segment(t, **segment)

    def segment(self, t, phase, connection=None, io=None, io_blind=None, target=None, initiator=None,
                msg=None, resel_need=None, resel_unique=None):
        s = self.seg
        s["start_ns"].append(t)
        s["phase"].append(phase)
        s["connection"].append(connection)
        s["io"].append(io)
        s["io_blind"].append(io_blind)
        s["target"].append(target)
        s["initiator"].append(initiator)
        s["bytes"].append(0)
        s["msg"].append(msg)
        s["runs"].append([])                 # (REQ rise of the first byte, bytes, first ACK delay)
        s["resel_need"].append(resel_need)   # message bytes that tie a reselection to its I/O
        s["resel_unique"].append(resel_unique)

    # -- handshakes -----------------------------------------------------------------------
    def handshakes(self, t0: int, n: int, *, ack_delay: int = 0, data: bytes | None = None,
                   pattern: int = 0) -> int:
        """`n` bytes from REQ rising at `t0`; the first ACK comes `ack_delay` late (initiator
        pause). Bytes are `data` (messages, CDB, status) or a counting pattern (data phases).
        Returns the time the next byte's REQ could rise."""
        assert t0 >= self.last_t and n > 0, (t0, self.last_t, n)
        end = t0 + ack_delay + (n - 1) * self.byte_ns + int(self.offsets[3])
        self.last_t = end
        if data is not None:
            dbk, dbv = DB_POOL, len(self._pool)
            self._pool += data
        else:
            dbk, dbv = DB_PATTERN, pattern
        self._add(t0, HANDSHAKES, self.lines, self.db, n, ack_delay, dbk, dbv)
        self.seg["bytes"][-1] += n
        self.seg["runs"][-1].append((t0, n, ack_delay))
        return t0 + ack_delay + n * self.byte_ns

    def _add(self, t, kind, lines, db, n, d0, dbk, dbv):
        c = self._cols
        for k, v in zip(("t", "kind", "lines", "db", "n", "d0", "dbk", "dbv"), (t, kind, lines, db, n, d0, dbk, dbv)):
            c[k].append(v)
        self._rows += 1 if kind == LINE_STATE else (4 * n if self.level >= 2 else 0)
        if self._rows >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        c = self._cols
        if not c["t"]:
            return
        arrays = {k: np.asarray(v, dtype=np.int64) for k, v in c.items()}
        for v in c.values():
            v.clear()
        self._rows = 0
        frame = expand(arrays, np.frombuffer(bytes(self._pool), dtype=np.uint8), self.level,
                       self.byte_ns, self.offsets, self.end_ns)
        if len(frame):
            self.sink.write(frame)
            self.written += len(frame)
            self._last_row = (int(frame["lines"][-1]), frame["db"][-1])

    def finish(self, end_ns: int) -> None:
        """Close the trace at `end_ns` with a record repeating the state there."""
        self.flush()
        lines, db = self._last_row
        self.sink.write(pl.DataFrame({"t_ns": [end_ns], "lines": [lines], "db": [db], "dbp": [None]},
                                     schema={"t_ns": pl.Int64, "lines": pl.UInt16, "db": pl.UInt8,
                                             "dbp": pl.Boolean}))
        self.written += 1


def expand(items: dict, pool: np.ndarray, level: int, byte_ns: int, offsets: np.ndarray,
           end_ns: int | None) -> pl.DataFrame:
    """Items -> transitions, vectorized: row counts, repeat, then per-row arithmetic."""
    kind = items["kind"]
    hs = kind == HANDSHAKES
    rows = np.where(hs, 4 * items["n"] if level >= 2 else 0, 1)
    total = int(rows.sum())
    item = np.repeat(np.arange(len(kind)), rows)
    first = np.cumsum(rows) - rows
    r = np.arange(total, dtype=np.int64) - first[item]
    j, s = r >> 2, r & 3
    is_hs = hs[item]
    late = np.where((j > 0) | (s > 0), items["d0"][item], 0)
    t = items["t"][item] + np.where(is_hs, j * byte_ns + offsets[s] + late, 0)
    lines = items["lines"][item] | np.where(is_hs, STEP_MASK[s], 0)
    out = {"t_ns": t, "lines": lines.astype(np.uint16)}
    if level >= 3:
        dbv = items["dbv"][item]
        from_pool = is_hs & (items["dbk"][item] == DB_POOL)
        db = np.where(is_hs, (dbv + j) & 0xFF, items["db"][item])
        if from_pool.any():
            db[from_pool] = pool[(dbv + j)[from_pool]]
        out["db"] = db.astype(np.uint8)
    df = pl.DataFrame(out)
    if "db" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.UInt8).alias("db"))
    if end_ns is not None:
        df = df.filter(pl.col("t_ns") <= end_ns)
    return df.with_columns(pl.lit(None, dtype=pl.Boolean).alias("dbp"))
