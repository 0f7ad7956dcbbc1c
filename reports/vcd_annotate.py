"""The captured bus lines plus the decoding, as a VCD file for waveform viewers.

GTKWave shows string variables as text: `scsitrace.phase` (the bus phase), `scsitrace.io`
(the I/O number), `scsitrace.command` (the command name of that I/O) and
`scsitrace.data_byte` (the byte latched at each handshake, hex). sigrok/PulseView (libsigrok's
VCD input) reads one-bit wires only, so each phase is also a one-bit wire `phases.phase_NAME`
(high while the bus is in that phase): PulseView shows them as lanes under the lines.
No decoded name is a bus line's spelling, so the file reads back as the capture it came from.

Written so that libsigrok 0.5 reads it: no multi-bit vector values (its VCD input drops the rest
of a read block at the first one), and identifier codes that cannot be mistaken for a value or
a timestamp when it skips the string values it does not know (it warns once per token).
The lines are written as logical levels (1 = asserted), whatever the capture's polarity.
Changes are built per chunk of transitions with polars (no Python loop per change).
"""
from __future__ import annotations

import datetime
from typing import Iterable, TextIO

import numpy as np
import polars as pl

from scsitrace import schema

DB_BITS = tuple(f"DB{i}" for i in range(8))
_SAFE = [c for c in map(chr, range(33, 127)) if c not in "#$0123456789xXzZbBrRsS"]
_BYTE_TEXT = np.array([f"s{i:02X}" for i in range(256)], dtype=object)


def _codes():
    """Identifier codes: one or two safe characters."""
    yield from _SAFE
    for a in _SAFE:
        for b in _SAFE:
            yield a + b


def _word(text: str | None, empty: str = "-") -> str:
    """A string value without whitespace (VCD string values end at a blank)."""
    return "_".join(str(text).split()) if text else empty


def write(out: TextIO, chunks: Iterable[pl.DataFrame], segments: pl.DataFrame, ios: pl.DataFrame, *,
          signals: list[str], invert_db: bool, handshake: str | None, end_ns: int, source: str) -> dict:
    """Write the annotated VCD; returns counts of what was written."""
    codes = _codes()
    controls = [s for s in schema.SIGNALS if s in signals]
    has_db = "DB" in signals
    wires = {s: next(codes) for s in controls}
    bits = {b: next(codes) for b in DB_BITS} if has_db else {}
    c_phase, c_io, c_cmd = next(codes), next(codes), next(codes)
    c_data = next(codes) if has_db and handshake else None
    phases = segments["phase"].unique(maintain_order=True).to_list()
    phase_wires = {p: next(codes) for p in phases}
    head = [f"$date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC $end",
            "$version scsitrace annotate $end",
            f"$comment decoded by scsitrace from {_word(source)}; lines as logical levels (1 = asserted) $end",
            "$timescale 1ns $end", "$scope module bus $end"]
    head += [f"$var wire 1 {c} {name.replace('/', '')} $end" for name, c in wires.items()]
    head += [f"$var wire 1 {c} {name} $end" for name, c in bits.items()]
    head += ["$upscope $end", "$scope module scsitrace $end",
             f"$var string 1 {c_phase} phase $end", f"$var string 1 {c_io} io $end",
             f"$var string 1 {c_cmd} command $end"]
    if c_data:
        head.append(f"$var string 1 {c_data} data_byte $end")
    head += ["$upscope $end", "$scope module phases $end"]
    head += [f"$var wire 1 {c} phase_{_word(p)} $end" for p, c in phase_wires.items()]
    head += ["$upscope $end", "$enddefinitions $end"]
    out.write("\n".join(head) + "\n")

    events = _segment_events(segments, ios, c_phase, c_io, c_cmd, phase_wires)
    if c_data:
        events = pl.concat([events, pl.DataFrame({"t_ns": [0], "text": [f"s- {c_data}"]},
                                                 schema=events.schema)])
    ev_t = events["t_ns"].to_numpy()
    order = np.argsort(ev_t, kind="stable")
    events = events[order]
    ev_t = ev_t[order]
    ev_at = 0
    prev = {"lines": None, "db": None}
    last_t = None
    counts = {"changes": 0, "segments": segments.height}
    for chunk in chunks:
        if not chunk.height:
            continue
        line_ev = _line_events(chunk, prev, wires, bits, invert_db, handshake, c_data)
        t_hi = int(chunk["t_ns"][-1])
        upto = int(np.searchsorted(ev_t, t_hi, side="right"))
        merged = pl.concat([events[ev_at:upto], line_ev]) if upto > ev_at else line_ev
        ev_at = upto
        last_t = _emit(out, merged, last_t)
        counts["changes"] += line_ev.height
    if ev_at < len(ev_t):
        last_t = _emit(out, events[ev_at:], last_t)
    if last_t is None or end_ns > last_t:
        out.write(f"#{end_ns}\n")
    return counts


def _segment_events(segments, ios, c_phase, c_io, c_cmd, phase_wires) -> pl.DataFrame:
    names = ios.select("io", "command") if ios.height else pl.DataFrame(schema={"io": pl.Int64, "command": pl.Utf8})
    seg = segments.select("start_ns", "phase", "io").join(names, on="io", how="left", maintain_order="left")
    start = seg["start_ns"].to_numpy()
    phase = seg["phase"].to_list()
    io = seg["io"].to_list()
    cmd = seg["command"].to_list()
    rows_t, rows = [], []
    prev_phase = prev_io = prev_cmd = object()
    for t, p, i, c in zip(start.tolist(), phase, io, cmd):  # one row per segment (thousands), not per change
        if p != prev_phase:
            rows_t += [t, t]
            rows += [f"s{_word(p)} {c_phase}", f"1{phase_wires[p]}"]
            if prev_phase in phase_wires:
                rows_t.append(t)
                rows.append(f"0{phase_wires[prev_phase]}")
            prev_phase = p
        if i != prev_io:
            rows_t.append(t)
            rows.append(f"s{i} {c_io}" if i is not None else f"s- {c_io}")
            prev_io = i
        c = c if i is not None else None
        if c != prev_cmd:
            rows_t.append(t)
            rows.append(f"s{_word(c)} {c_cmd}")
            prev_cmd = c
    if not rows_t:
        rows_t, rows = [0], [f"s- {c_phase}"]
    return pl.DataFrame({"t_ns": rows_t, "text": rows}, schema={"t_ns": pl.Int64, "text": pl.Utf8})


def _line_events(chunk: pl.DataFrame, prev: dict, wires: dict, bits: dict, invert_db: bool,
                 handshake: str | None, c_data: str | None) -> pl.DataFrame:
    """The value changes of the captured lines in one chunk (and the handshake bytes)."""
    t = chunk["t_ns"].to_numpy()
    lines = chunk["lines"].to_numpy().astype(np.int64)
    before = np.empty_like(lines)
    before[0] = -1 if prev["lines"] is None else prev["lines"]
    before[1:] = lines[:-1]
    parts = []
    for name, code in wires.items():
        bit = 1 << schema.SIGNAL_BIT[name]
        changed = (before < 0) | ((lines ^ before) & bit != 0)
        value = ((lines[changed] & bit) != 0).astype(np.int8)
        parts.append(pl.DataFrame({"t_ns": t[changed], "text": pl.Series(value).cast(pl.Utf8) + code}))
    if bits:
        db = chunk["db"].fill_null(0).to_numpy().astype(np.int64)
        if invert_db:
            db ^= 0xFF
        db_before = np.empty_like(db)
        db_before[0] = -1 if prev["db"] is None else prev["db"]
        db_before[1:] = db[:-1]
        for j, code in enumerate(bits.values()):
            changed = (db_before < 0) | (((db ^ db_before) >> j) & 1 != 0)
            value = (db[changed] >> j) & 1
            parts.append(pl.DataFrame({"t_ns": t[changed], "text": pl.Series(value).cast(pl.Utf8) + code}))
        if c_data:
            hbit = 1 << schema.SIGNAL_BIT[handshake]
            rise = ((lines & hbit) != 0) & ((np.maximum(before, 0) & hbit) == 0)
            parts.append(pl.DataFrame({"t_ns": t[rise], "text": pl.Series(_BYTE_TEXT[db[rise]], dtype=pl.Utf8)
                                       + f" {c_data}"}))
        prev["db"] = int(db[-1])
    prev["lines"] = int(lines[-1])
    frame = pl.concat([p.with_columns(pl.col("t_ns").cast(pl.Int64)) for p in parts])
    return frame


def _emit(out: TextIO, events: pl.DataFrame, last_t: int | None) -> int | None:
    """Events sorted by time (stable) -> `#t` lines and changes."""
    if not events.height:
        return last_t
    events = events.sort("t_ns", maintain_order=True)
    t = events["t_ns"]
    new = t != t.shift(1, fill_value=-1 if last_t is None else last_t)
    text = pl.select(pl.when(new).then(pl.lit("#") + t.cast(pl.Utf8) + "\n" + events["text"])
                     .otherwise(events["text"])).to_series()
    out.write(text.str.join("\n").item() + "\n")
    return int(t[-1])
