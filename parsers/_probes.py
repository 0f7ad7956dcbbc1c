"""Capture signals -> SCSI bus lines, by name: shared by every reader of logic-analyzer
captures (VCD, sigrok `.sr`, DSView `.dsl`, Saleae CSV).

A capture signal (`Var`: a VCD `$var`, or one probe of a logic analyzer) stands for a bus
line when its name, once an active-low marker (`/X`, `~X`, `X#`, `X_N`, `nX`) and a `SCSI_`
prefix are removed, is one of the line's spellings (`BSY`, `BUSY`; `C/D`, `CD`; `D3`,
`DB3`, `DATA3`...). `--map NAME=SIGNAL` overrides, `--active-low SIGNAL|all` inverts.
`resolve` returns which signal feeds each bus line (`Feed`s), or raises MissingSignal
(with the closest names) before any decoding starts.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from scsitrace import schema
from scsitrace.errors import MissingSignal, UsageError

DB_BITS = tuple(f"DB{i}" for i in range(8))
BUS_NAMES = schema.SIGNALS + ("DB", "DBP") + DB_BITS
# Spellings of each bus line once active-low markers and a SCSI_ prefix are removed
# (compared upper-case). DB bits also match DATA3, DAT3, D3, DB_3 and DB[3].
_ALIASES = {
    "BSY": ("BSY", "BUSY"),
    "SEL": ("SEL", "SELECT"),
    "ATN": ("ATN", "ATTN", "ATTENTION"),
    "RST": ("RST", "RESET"),
    "MSG": ("MSG", "MESSAGE"),
    "C/D": ("C/D", "CD", "C_D", "C-D"),
    "I/O": ("I/O", "IO", "I_O", "I-O"),
    "REQ": ("REQ", "REQUEST"),
    "ACK": ("ACK", "ACKNOWLEDGE"),
    "DB": ("DB", "DAT", "DATA", "D"),
    "DBP": ("DBP", "DP", "DB_P", "DBP0", "PARITY", "DBPARITY"),
}
_BUS_BY_ALIAS = {alias: bus for bus, aliases in _ALIASES.items() for alias in aliases}
_DB_BIT_RE = re.compile(r"^(?:DB|DATA|DAT|D)[_\[]?([0-7])\]?$")
_SCSI_PREFIX_RE = re.compile(r"^SCSI[_\-.]?", re.IGNORECASE)
NOT_MAPPABLE_TYPES = ("real", "realtime", "string", "event")


def bus_name(spelling: str) -> str | None:
    """The bus line a plain spelling names (`cd` -> `C/D`, `D3` -> `DB3`), or None."""
    up = _SCSI_PREFIX_RE.sub("", spelling.strip()).upper()
    if up in _BUS_BY_ALIAS:
        return _BUS_BY_ALIAS[up]
    m = _DB_BIT_RE.match(up)
    return f"DB{m.group(1)}" if m else None


def active_low_marked(name: str) -> tuple[str, bool]:
    """Strip an active-low marker: `/X`, `~X`, `X#`, `X_N`, `X_n`, `X_L`, or `nX` when X
    is a bus line name (so `nothing` stays as it is). Returns (rest, marked)."""
    for prefix in ("/", "~", "!"):
        if name.startswith(prefix) and len(name) > 1:
            return name[1:], True
    if name.endswith("#") and len(name) > 1:
        return name[:-1], True
    if name[-2:] in ("_N", "_n", "_L", "_l") and len(name) > 2:
        return name[:-2], True
    if name.startswith("n") and len(name) > 1 and bus_name(name[1:]) is not None:
        return name[1:], True
    return name, False



@dataclass
@dataclass
class Var:
    """A capture signal: one VCD `$var` declaration, or one logic-analyzer probe."""

    kind: str        # wire, reg, ...
    width: int
    code: str        # identifier code
    path: str        # scope.path.name (with its range as written, if any)
    name: str        # reference name without the bit range
    msb: int | None
    lsb: int | None
    line: int

    @property
    def leaf(self) -> str:
        return self.path.rsplit(".", 1)[-1]



@dataclass
class Feed:
    """A capture signal feeding one bus slot."""

    bus: str
    var: Var
    inverted: bool


def _default_bus(var: Var) -> tuple[str | None, bool]:
    """Bus line a capture signal stands for by its name, and whether it is marked active-low."""
    if var.kind in NOT_MAPPABLE_TYPES:
        return None, False
    rest, low = active_low_marked(var.name)
    bus = bus_name(rest)
    if var.width == 1 and var.msb is not None and bus == "DB":
        return f"DB{var.msb}" if var.msb < 8 else None, low   # DB[3] as a 1-bit wire
    if bus == "DB" and var.width < 8:
        return None, low
    if bus is not None and bus != "DB" and var.width != 1:
        return None, low
    return bus, low


def _find_var(signals: list[Var], signal: str) -> Var | None:
    for key in ("path", "leaf", "name"):
        for var in signals:
            if getattr(var, key) == signal:
                return var
    return None


def _closest(signals: list[Var], wanted: str) -> list[str]:
    names = [v.leaf for v in signals]
    return difflib.get_close_matches(wanted, names, n=3, cutoff=0.3)


def resolve(signals: list[Var], path: str, mapping: dict | None, active_low) -> tuple[list[Feed], list[str]]:
    """Which capture signal feeds each bus slot. Returns (feeds, notes)."""
    notes: list[str] = []
    chosen: dict[str, tuple[Var, bool]] = {}
    for var in signals:
        bus, low = _default_bus(var)
        if bus is None:
            continue
        if bus in chosen:
            notes.append(f"{bus}: several candidates, using {chosen[bus][0].path} (not {var.path}); "
                         f"use --map {bus}=SIGNAL to choose")
            continue
        chosen[bus] = (var, low)
    explicit: dict[str, tuple[Var, bool]] = {}
    for name, signal in (mapping or {}).items():
        bus = bus_name(name) if name not in BUS_NAMES else name
        if bus is None:
            raise UsageError(f"--map {name}={signal}: unknown bus line {name!r} "
                             f"(known: {' '.join(BUS_NAMES)})")
        var = _find_var(signals, signal)
        if var is None:
            raise MissingSignal(f"{path}: --map {name}={signal}: no signal {signal!r} in the capture"
                                + _closest_text(signals, signal))
        explicit[bus] = (var, active_low_marked(var.name)[1])
    taken = {id(var) for var, _ in explicit.values()}   # a signal mapped by hand feeds only that line
    chosen = {b: c for b, c in chosen.items() if id(c[0]) not in taken}
    chosen.update(explicit)
    _drop_incomplete_db(chosen, notes, explicit=set(mapping or ()))
    _check_required(signals, path, chosen)
    inverted = _inversions(signals, chosen, active_low or [])
    feeds = [Feed(bus, var, bus in inverted) for bus, (var, _) in chosen.items()]
    feeds.sort(key=lambda f: BUS_NAMES.index(f.bus))
    return feeds, notes


def _closest_text(signals: list[Var], wanted: str) -> str:
    near = _closest(signals, wanted)
    return f"; closest available: {', '.join(near)}" if near else (
        f"; available: {', '.join(v.leaf for v in signals[:20])}" if signals else "; the capture declares no signals")


def _drop_incomplete_db(chosen: dict, notes: list[str], explicit: set[str]) -> None:
    """DB comes from a vector or from all eight bit wires; bits override the vector only
    when mapped explicitly."""
    bits = [b for b in DB_BITS if b in chosen]
    explicit_bits = any(bus_name(n) in DB_BITS or n in DB_BITS for n in explicit)
    if "DB" in chosen and bits and not explicit_bits:
        for b in bits:
            del chosen[b]
        return
    if bits:
        if "DB" in chosen:
            del chosen["DB"]
        missing = [b for b in DB_BITS if b not in chosen]
        if missing:
            notes.append(f"data bus ignored: bit wire(s) {' '.join(missing)} not found "
                         f"(use --map {missing[0]}=SIGNAL)")
            for b in bits:
                del chosen[b]
    if "DBP" in chosen and "DB" not in chosen and not any(b in chosen for b in DB_BITS):
        del chosen["DBP"]


def _check_required(signals: list[Var], path: str, chosen: dict) -> None:
    missing = [b for b in schema.REQUIRED_SIGNALS if b not in chosen]
    if not missing:
        return
    parts = []
    for bus in missing:
        near = _closest(signals, bus)
        parts.append(f"{bus} (closest: {', '.join(near)})" if near else bus)
    avail = ", ".join(v.leaf for v in signals[:20]) or "none"
    raise MissingSignal(f"{path}: required bus line(s) missing: {'; '.join(parts)}. Signals in the "
                        f"capture: {avail}. Name them with --map NAME=SIGNAL")


def _inversions(signals: list[Var], chosen: dict, active_low: list[str]) -> set[str]:
    inverted = {bus for bus, (_, low) in chosen.items() if low}
    for item in active_low:
        if item.lower() == "all":
            inverted |= set(chosen)
            continue
        var = _find_var(signals, item)
        bus = bus_name(item) if item not in BUS_NAMES else item
        hits = {b for b, (v, _) in chosen.items() if var is not None and v is var}
        if bus in chosen:
            hits.add(bus)
        if bus == "DB":
            hits |= {b for b in DB_BITS if b in chosen}
        if not hits:
            raise UsageError(f"--active-low {item}: neither a mapped capture signal nor a mapped "
                             f"bus line (mapped: {' '.join(chosen)})")
        inverted |= hits
    return inverted

