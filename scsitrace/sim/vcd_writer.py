"""A small streaming VCD writer for simulated bus traces.

Signal names follow PiSCSI's scsimon (one wire per control line, BSY SEL ATN RST MSG CD IO
REQ ACK, and the data bus as the 8-bit vector `data`); values are logical (1 = asserted),
timescale 1 ns. Only the signals that changed are written at each time stamp.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from scsitrace.schema import SIGNAL_BIT

VCD_NAMES = {"BSY": "BSY", "SEL": "SEL", "ATN": "ATN", "RST": "RST", "MSG": "MSG", "C/D": "CD",
             "I/O": "IO", "REQ": "REQ", "ACK": "ACK"}


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
        if not len(tr):
            return
        t = tr["t_ns"].to_numpy()
        lines = tr["lines"].to_numpy().astype(np.int64)
        db = tr["db"].to_numpy() if self.with_db else None
        out = []
        prev_l, prev_d, last_t = self.prev_lines, self.prev_db, self.last_t
        # one Python step per record: the VCD path serves fixtures and small traces
        for i in range(len(t)):
            changes = []
            for name in self.signals:
                bit = 1 << SIGNAL_BIT[name]
                if prev_l is None or (lines[i] ^ prev_l) & bit:
                    changes.append(f"{1 if lines[i] & bit else 0}{self.ids[name]}")
            if db is not None and db[i] is not None and (prev_d is None or db[i] != prev_d):
                changes.append(f"b{int(db[i]):08b} {self.db_id}")
                prev_d = db[i]
            prev_l = int(lines[i])
            if changes or i == len(t) - 1:
                if int(t[i]) != last_t:
                    out.append(f"#{int(t[i])}")
                    last_t = int(t[i])
                out.extend(changes)
        self.prev_lines, self.prev_db, self.last_t = prev_l, prev_d, last_t
        self.fh.write("\n".join(out) + "\n")
