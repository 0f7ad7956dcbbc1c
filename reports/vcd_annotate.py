"""The captured bus lines plus the decoding, as a VCD file for waveform viewers.

GTKWave shows string variables as text: `scsitrace.phase` (the bus phase), `scsitrace.io`
(the I/O number), `scsitrace.command` (the command name of that I/O) and
`scsitrace.data_byte` (the byte latched at each handshake, hex). sigrok/PulseView (libsigrok's
VCD input) reads one-bit wires only, so each phase is also a one-bit wire `phases.phase_NAME`
(high while the bus is in that phase) and each command name a one-bit wire
`commands.cmd_NAME` (high while an I/O of that command is on the bus): PulseView shows them
as lanes under the lines, named after the phase or command. The bytes are the DB lines at
the handshake's edges (PulseView's Parallel decoder, clock ACK or REQ, D0-D7 = DB0-DB7).
`viewer="pulseview"` leaves the string variables out (libsigrok warns once per string value
it skips). No decoded name is a bus line's spelling, so the file reads back as the capture
it came from.

The timescale is the capture's resolution: one VCD time unit per sample of a sampled capture
(its period rounded down to a power of ten, the only timescales VCD has), else the largest
power of ten dividing every time; a reader that makes samples of time units (libsigrok: one
per unit) then makes as many as the capture has, not one per nanosecond.

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


VIEWERS = ("gtkwave", "pulseview")
UNITS = ((10**9, "s"), (10**6, "ms"), (10**3, "us"), (1, "ns"))


def timescale_text(ns: int) -> str:
    """A timescale of 1, 10 or 100 of a unit, in ns -> its VCD spelling (`100ns`)."""
    for scale, unit in UNITS:
        if ns % scale == 0 and ns // scale in (1, 10, 100):
            return f"{ns // scale}{unit}"
    raise ValueError(f"{ns} ns is not a VCD timescale (1, 10 or 100 s, ms, us or ns)")


def power_of_ten_at_most(ns: float) -> int:
    """The largest 1, 10, 100... ns not above `ns` (at least 1 ns, at most 100 s)."""
    out = 1
    while out * 10 <= ns and out < 10**11:
        out *= 10
    return out


def power_of_ten_dividing(g: int) -> int:
    """The largest 1, 10, 100... ns that divides `g` ns (0: 1 ns), at most 100 s."""
    out = 1
    while g and g % (out * 10) == 0 and out < 10**11:
        out *= 10
    return out


def write(out: TextIO, chunks: Iterable[pl.DataFrame], segments: pl.DataFrame, ios: pl.DataFrame, *,
          signals: list[str], invert_db: bool, handshake: str | None, end_ns: int, source: str,
          timescale_ns: int = 1, viewer: str = "gtkwave") -> dict:
    """Write the annotated VCD; returns counts of what was written. Times are written in
    units of `timescale_ns` (rounded to the nearest)."""
    codes = _codes()
    controls = [s for s in schema.SIGNALS if s in signals]
    has_db = "DB" in signals
    strings = viewer != "pulseview"
    wires = {s: next(codes) for s in controls}
    bits = {b: next(codes) for b in DB_BITS} if has_db else {}
    c_phase, c_io, c_cmd = (next(codes), next(codes), next(codes)) if strings else (None, None, None)
    c_data = next(codes) if has_db and handshake and strings else None
    phases = segments["phase"].unique(maintain_order=True).to_list()
    phase_wires = {p: next(codes) for p in phases}
    names = ios.filter(pl.col("io").is_in(segments["io"].drop_nulls().implode())) if ios.height else ios
    command_wires = {c: next(codes) for c in (names["command"].drop_nulls().unique(maintain_order=True).to_list()
                                              if names.height else [])}
    head = [f"$date {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S} UTC $end",
            "$version scsitrace annotate $end",
            f"$comment decoded by scsitrace from {_word(source)}; lines as logical levels (1 = asserted) $end",
            f"$timescale {timescale_text(timescale_ns)} $end", "$scope module bus $end"]
    head += [f"$var wire 1 {c} {name.replace('/', '')} $end" for name, c in wires.items()]
    head += [f"$var wire 1 {c} {name} $end" for name, c in bits.items()]
    head += ["$upscope $end"]
    if strings:
        head += ["$scope module scsitrace $end",
                 f"$var string 1 {c_phase} phase $end", f"$var string 1 {c_io} io $end",
                 f"$var string 1 {c_cmd} command $end"]
        if c_data:
            head.append(f"$var string 1 {c_data} data_byte $end")
        head += ["$upscope $end"]
    head += ["$scope module phases $end"]
    head += [f"$var wire 1 {c} phase_{_word(p)} $end" for p, c in phase_wires.items()]
    head += ["$upscope $end"]
    if command_wires:
        head += ["$scope module commands $end"]
        head += [f"$var wire 1 {c} cmd_{_wire_name(p)} $end" for p, c in command_wires.items()]
        head += ["$upscope $end"]
    head += ["$enddefinitions $end"]
    out.write("\n".join(head) + "\n")

    events = _segment_events(segments, ios, c_phase, c_io, c_cmd, phase_wires, command_wires)
    if c_data:
        first = int(segments["start_ns"].min()) if segments.height else 0
        events = pl.concat([events, pl.DataFrame({"t_ns": [first], "text": [f"s- {c_data}"]},
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
        last_t = _emit(out, merged, last_t, timescale_ns)
        counts["changes"] += line_ev.height
    if ev_at < len(ev_t):
        last_t = _emit(out, events[ev_at:], last_t, timescale_ns)
    end = _units(end_ns, timescale_ns)
    if last_t is None or end > last_t:
        out.write(f"#{end}\n")
    return counts


def _units(t_ns: int, timescale_ns: int) -> int:
    return (int(t_ns) + timescale_ns // 2) // timescale_ns


def _wire_name(text: str) -> str:
    """A command name as a wire name (letters, digits and `_`): `Read(10)` -> `Read_10`."""
    return "_".join("".join(ch if ch.isalnum() else " " for ch in str(text)).split()) or "unnamed"


def _segment_events(segments, ios, c_phase, c_io, c_cmd, phase_wires, command_wires) -> pl.DataFrame:
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
            if c_phase:
                rows_t.append(t)
                rows.append(f"s{_word(p)} {c_phase}")
            rows_t.append(t)
            rows.append(f"1{phase_wires[p]}")
            if prev_phase in phase_wires:
                rows_t.append(t)
                rows.append(f"0{phase_wires[prev_phase]}")
            prev_phase = p
        if i != prev_io and c_io:
            rows_t.append(t)
            rows.append(f"s{i} {c_io}" if i is not None else f"s- {c_io}")
        prev_io = i
        c = c if i is not None else None
        if c != prev_cmd:
            if c_cmd:
                rows_t.append(t)
                rows.append(f"s{_word(c)} {c_cmd}")
            if prev_cmd in command_wires:
                rows_t.append(t)
                rows.append(f"0{command_wires[prev_cmd]}")
            if c in command_wires:
                rows_t.append(t)
                rows.append(f"1{command_wires[c]}")
            prev_cmd = c
    for code in command_wires.values():       # every command lane starts low
        rows_t.insert(0, start[0] if len(start) else 0)
        rows.insert(0, f"0{code}")
    if not rows_t and c_phase:
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


def _emit(out: TextIO, events: pl.DataFrame, last_t: int | None, timescale_ns: int = 1) -> int | None:
    """Events sorted by time (stable) -> `#t` lines (in timescale units) and changes."""
    if not events.height:
        return last_t
    events = events.sort("t_ns", maintain_order=True)
    t = (events["t_ns"] + timescale_ns // 2) // timescale_ns
    new = t != t.shift(1, fill_value=-1 if last_t is None else last_t)
    text = pl.select(pl.when(new).then(pl.lit("#") + t.cast(pl.Utf8) + "\n" + events["text"])
                     .otherwise(events["text"])).to_series()
    out.write(text.str.join("\n").item() + "\n")
    return int(t[-1])
