"""`scsitrace ios`: the I/Os in order, one line each, from the analysis's ios table (the
typed table `--ios` exports; nothing is computed here but the text of each cell).

Columns: I/O number, start time (seconds from the trace's start), device_id, the command
(name; block: btt's RWBS op), LBA and blocks (`LBA+n`, as blkparse writes them), status (with the sense key and ASC/ASCQ, the
host byte or the reason an I/O is unpaired where the table has them), response time (the
layer's `response_ns`; block: Q2C) and bytes. Numbers never wrap; the device, command and
status columns share what the width leaves and wrap inside their column. Batches of a
streaming layer are printed as they come, column widths only ever growing."""
from __future__ import annotations

import textwrap

import polars as pl

from .units import fmt_ns

NUMBERS = ("#", "Time s", "LBA+n", "Response", "Bytes")
TEXTS = ("Device", "Command", "Status")
ORDER = ("#", "Time s", "Device", "Command", "LBA+n", "Status", "Response", "Bytes")
NARROWEST_TEXT = 6


def _text(v) -> str:
    return "" if v is None else str(v)


def _seconds(ns) -> str:
    return "" if ns is None else f"{ns / 1e9:.6f}"


def _status(row: dict) -> str:
    parts = [_text(row.get("status"))]
    if row.get("sense_key"):
        sense = row["sense_key"]
        if row.get("asc") is not None:
            sense += f" {row['asc']:02x}/{row.get('ascq') or 0:02x}"
        parts.append(sense)
    host = row.get("host_byte")
    if host and host != "DID_OK":
        parts.append(host)
    if row.get("reason"):
        parts.append(row["reason"])
    return ", ".join(p for p in parts if p)


def _extent(row: dict) -> str:
    """LBA and blocks as blkparse writes a sector and its count: `14664+8`."""
    lba, blocks = row.get("lba"), row.get("blocks")
    if lba is None:
        return "" if blocks is None else f"+{blocks}"
    return f"{lba}+{blocks}" if blocks is not None else str(lba)


def _response(row: dict):
    value = row.get("response_ns")
    return row.get("q2c_ns") if value is None else value


def cells(frame: pl.DataFrame) -> list[dict]:
    """Each I/O's cells, as text."""
    out = []
    for row in frame.iter_rows(named=True):
        bytes_ = row.get("bytes")
        out.append({"#": _text(row.get("io")), "Time s": _seconds(row.get("start_ns")),
                    "Device": _text(row.get("device_id") or row.get("device")),
                    "Command": _text(row.get("command") or row.get("op")),
                    "LBA+n": _extent(row),
                    "Status": _status(row), "Response": fmt_ns(_response(row)),
                    "Bytes": _text(bytes_ if bytes_ is not None else row.get("data_bytes"))})
    return out


def _share(room: int, need: dict, headed: bool = True) -> dict:
    """Widths for the text columns within `room`: a column that needs less than an equal
    share gets what it needs, the others split the rest (at least their header or
    NARROWEST_TEXT each while the header is still to be written, else one character)."""
    out, rest = {}, dict(need)
    while rest:
        share = room // len(rest)
        small = {c: n for c, n in rest.items() if n <= share}
        if not small:
            break
        for c, n in small.items():
            out[c] = n
            room -= n
            del rest[c]
    if rest:                              # each its header (or NARROWEST_TEXT), then the rest evenly
        floor = {c: max(len(c), NARROWEST_TEXT) if headed else 1 for c in rest}
        extra = max(0, room - sum(floor.values()))
        for i, c in enumerate(rest):
            out[c] = floor[c] + extra // len(rest) + (1 if i < extra % len(rest) else 0)
    return out


class Lister:
    """Prints I/O rows to `out` within `width` columns, at most `limit` of them."""

    def __init__(self, out, width: int, limit: int | None = None):
        self.out, self.width, self.limit = out, width, limit
        self.printed, self.widths, self.gap = 0, None, "  "

    @property
    def full(self) -> bool:
        return self.limit is not None and self.printed >= self.limit

    def add(self, frame: pl.DataFrame) -> None:
        if self.full or frame.height == 0:
            return
        if self.limit is not None:
            frame = frame.head(self.limit - self.printed)
        rows = cells(frame)
        header = self.widths is None
        self._fit(rows)
        if header:
            self._write({c: c for c in ORDER})
        for row in rows:
            self._write(row)
        self.printed += len(rows)

    def _fit(self, rows: list[dict]) -> None:
        """Column widths: numbers as wide as their widest cell (and header), then the text
        columns share what is left (`_share`). A later batch only widens number columns and
        never widens a text column (the list stays aligned); when its numbers are wider, the
        text columns give up the room."""
        need = {c: max([len(c)] + [len(r[c]) for r in rows]) for c in ORDER}
        if self.widths is not None:
            need = {c: max(need[c], self.widths[c]) if c in NUMBERS else need[c] for c in ORDER}
        left = self.width - len(self.gap) * (len(ORDER) - 1) - sum(need[c] for c in NUMBERS)
        floors = sum(max(len(c), NARROWEST_TEXT) for c in TEXTS) if self.widths is None else len(TEXTS)
        if left < floors and self.gap != " ":
            self.gap = " "                    # narrow: one space between columns
            left += len(ORDER) - 1
        widths = {c: need[c] for c in NUMBERS}
        if self.widths is None:
            widths.update(_share(left, {c: need[c] for c in TEXTS}))
        elif sum(self.widths[c] for c in TEXTS) > left:
            widths.update(_share(left, {c: min(need[c], self.widths[c]) for c in TEXTS}, headed=False))
        else:
            widths.update({c: self.widths[c] for c in TEXTS})
        self.widths = widths

    def _write(self, row: dict) -> None:
        wrapped = {c: (textwrap.wrap(row[c], self.widths[c], break_on_hyphens=False) or [""])
                   if c in TEXTS else [row[c]] for c in ORDER}
        for i in range(max(map(len, wrapped.values()))):
            parts = []
            for c in ORDER:
                text = wrapped[c][i] if i < len(wrapped[c]) else ""
                parts.append(text.rjust(self.widths[c]) if c in NUMBERS else text.ljust(self.widths[c]))
            self.out.write(self.gap.join(parts).rstrip() + "\n")
