"""A small streaming VCD writer for simulated bus traces.

Signal names follow PiSCSI's scsimon (one wire per control line, BSY SEL ATN RST MSG CD IO
REQ ACK, and the data bus as the 8-bit vector `data`); values are logical (1 = asserted),
timescale 1 ns. Only the signals that changed are written at each time stamp. Each block is
formatted with numpy (one pass per signal, not per record).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.schema import SIGNAL_BIT

VCD_NAMES = {"BSY": "BSY", "SEL": "SEL", "ATN": "ATN", "RST": "RST", "MSG": "MSG", "C/D": "CD",
             "I/O": "IO", "REQ": "REQ", "ACK": "ACK"}
_BIN8 = np.array([f"b{i:08b} " for i in range(256)], dtype=object)


class VcdWriter:
    def __init__(self, fh, *, signals: list[str], data: list[str] = (), meta: dict | None = None):
        self.fh, self.signals, self.with_db = fh, list(signals), "DB" in data
        self.ids = {name: chr(33 + i) for i, name in enumerate(self.signals)}
        self.db_id = chr(33 + len(self.signals))
        fh.write("$comment scsitrace simulate: logical levels, 1 = asserted\n")
        for key, value in (meta or {}).items():
            fh.write(f"  {key}: {value}\n")
        fh.write("$end\n$timescale 1ns $end\n$scope module scsi $end\n")
        for name in self.signals:
            fh.write(f"$var wire 1 {self.ids[name]} {VCD_NAMES[name]} $end\n")
        if self.with_db:
            fh.write(f"$var wire 8 {self.db_id} data $end\n")
        fh.write("$upscope $end\n$enddefinitions $end\n")
        self.prev_lines: int | None = None
        self.prev_db: int | None = None
        self.last_t: int | None = None

    def write(self, tr: pl.DataFrame) -> None:
        n = len(tr)
        if not n:
            return
        t = tr["t_ns"].to_numpy()
        lines = tr["lines"].to_numpy().astype(np.int64)
        first = self.prev_lines is None
        prev = np.concatenate(([lines[0] if first else self.prev_lines], lines[:-1]))
        rows, order, texts = [], [], []
        for k, name in enumerate(self.signals):
            bit = 1 << SIGNAL_BIT[name]
            changed = ((lines ^ prev) & bit) != 0
            if first:
                changed[0] = True
            idx = np.flatnonzero(changed)
            on = (lines[idx] & bit) != 0
            rows.append(idx)
            order.append(np.full(len(idx), 1 + k))
            texts.append(np.where(on, f"1{self.ids[name]}", f"0{self.ids[name]}").astype(object))
        if self.with_db:
            db = tr["db"].fill_null(strategy="forward").fill_null(self.prev_db or 0).cast(pl.Int64).to_numpy()
            prev_db = np.concatenate(([db[0] if self.prev_db is None else self.prev_db], db[:-1]))
            changed = db != prev_db
            if self.prev_db is None:
                changed[0] = True
            idx = np.flatnonzero(changed)
            rows.append(idx)
            order.append(np.full(len(idx), 1 + len(self.signals)))
            texts.append(_BIN8[db[idx]] + self.db_id)
            self.prev_db = int(db[-1])
        row = np.concatenate(rows)
        # a time stamp before the first change at each new time, and at the last record
        stamped = np.union1d(row, [n - 1])
        stamped = stamped[np.concatenate(([t[stamped[0]] != self.last_t], np.diff(t[stamped]) != 0))]
        rows.append(stamped)
        order.append(np.zeros(len(stamped), dtype=np.int64))
        texts.append(np.array([f"#{v}" for v in t[stamped].tolist()], dtype=object))
        row = np.concatenate(rows)
        sort = np.lexsort((np.concatenate(order), row))
        out = np.concatenate(texts)[sort]
        if len(out):
            self.fh.write("\n".join(out.tolist()) + "\n")
        self.prev_lines = int(lines[-1])
        if len(stamped):
            self.last_t = int(t[stamped[-1]])
