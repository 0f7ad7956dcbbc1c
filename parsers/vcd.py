"""IEEE 1364 value change dumps (VCD) of a SCSI bus -> `transitions` frames.

Writers seen in the field: PiSCSI `scsimon` (plain names BSY SEL CD IO MSG REQ ACK ATN RST,
an 8-bit `data` vector and a `phase` string), sigrok/PulseView and other logic-analyzer
software (one wire per probe, often active-low names such as `/SCSI_BSY`, `BSY_N`, `nSEL`,
`ATN#`, data as `D0`..`D7`/`DB0`..`DB7` bits or a `DB`/`DAT`/`DATA` vector, parity `DBP`).

The header (declarations, small) is read token by token in Python. The value changes are
streamed in blocks of whole lines (`parsers/_lines.py`) and decoded with numpy on the shared
tokenizer (`parsers/_tokens.py`): tokens are classified by their first byte, identifier
codes are packed into integers and compared with the codes of the mapped bus "slots", each
slot's last value before the end of every timestamp is found by index arithmetic, and the
bits are combined into `lines`/`db`/`dbp`. Python loops run per block, per slot and per
character position of a value, never per value change. See docs/vcd.md for the mapping,
polarity and value rules.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput, MissingSignal, TruncatedInput, UsageError
from scsitrace.model import Capture
from . import _lines
from ._tokens import TokenBlock
from .ancot import level_of

ID = "vcd"
SUFFIXES = (".vcd",)
SNIFF_KEYWORDS = (b"$date", b"$version", b"$timescale", b"$scope", b"$var", b"$comment")

# ---------------------------------------------------------------- bus slots
# A slot is one thing the reader tracks the value of: a control line, the DB vector,
# one DB bit, or DBP. Control slots use their schema.SIGNAL_BIT number.
DB_SLOT = len(schema.SIGNALS)                 # 9: the 8-bit data vector
DB_BIT_SLOT0 = DB_SLOT + 1                    # 10..17: DB0..DB7 as separate wires
DBP_SLOT = DB_BIT_SLOT0 + 8                   # 18
DB_BITS = tuple(f"DB{i}" for i in range(8))
BUS_NAMES = schema.SIGNALS + ("DB", "DBP") + DB_BITS


def _slot_of(bus: str) -> int:
    if bus in schema.SIGNAL_BIT:
        return schema.SIGNAL_BIT[bus]
    if bus == "DB":
        return DB_SLOT
    if bus == "DBP":
        return DBP_SLOT
    return DB_BIT_SLOT0 + DB_BITS.index(bus)


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


# ---------------------------------------------------------------- header

_TIME_UNITS_NS = {"s": Fraction(10**9), "ms": Fraction(10**6), "us": Fraction(10**3),
                  "ns": Fraction(1), "ps": Fraction(1, 10**3), "fs": Fraction(1, 10**6)}
_TIMESCALE_RE = re.compile(r"^(1|10|100)(s|ms|us|ns|ps|fs)$")
_RANGE_RE = re.compile(r"^\[(\d+)(?::(\d+))?\]$")
_ATTACHED_RANGE_RE = re.compile(r"^(.+?)\[(\d+)(?::(\d+))?\]$")
DATA_KEYWORDS = ("$dumpvars", "$dumpall", "$dumpon", "$dumpoff")
_DATA_START_RE = re.compile(r"^(#\d|[01xXzZ]\S|[bB][01xXzZ]+$|[rRsS]\S)")


@dataclass
class Var:
    """One `$var` declaration."""

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
class Header:
    tick: Fraction = Fraction(1)            # nanoseconds per time unit
    timescale: str | None = None
    vars: list[Var] = field(default_factory=list)
    info: dict = field(default_factory=dict)   # $date, $version text
    data_offset: int = 0                    # byte offset of the first line after the header
    data_line: int = 1                      # its line number
    rest: str = ""                          # data tokens on the header's last line
    rest_line: int = 0


class _HeaderReader:
    """Declarations up to `$enddefinitions $end` (or the first value change)."""

    def __init__(self, path: str):
        self.path = path
        self.h = Header()
        self.scopes: list[str] = []
        self.cmd: str | None = None
        self.args: list[str] = []
        self.cmd_line = 0

    def read(self) -> Header:
        offset = line_no = 0
        with open(self.path, "rb") as fh:
            for raw in fh:
                line_no += 1
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise BadInput(self.path, "header is not UTF-8 text", line=line_no) from None
                offset += len(raw)
                toks = text.split()
                for i, tok in enumerate(toks):
                    rest = self._token(tok, i, toks, line_no)
                    if rest is not None:
                        self.h.rest, self.h.rest_line = " ".join(rest), line_no
                        self.h.data_offset, self.h.data_line = offset, line_no + 1
                        return self.h
        if self.cmd is not None:
            raise TruncatedInput(self.path, f"file ends inside {self.cmd} (no $end)", line=self.cmd_line)
        self.h.data_offset, self.h.data_line = offset, line_no + 1
        return self.h

    def _token(self, tok: str, i: int, toks: list[str], line_no: int) -> list[str] | None:
        """Consume one header token; returns the data tokens when the header ends here."""
        if self.cmd is None:
            if tok in DATA_KEYWORDS or (self.h.vars and _DATA_START_RE.match(tok)):
                return toks[i:]
            if not tok.startswith("$") or tok == "$end":
                raise BadInput(self.path, "expected a $keyword declaration", line=line_no, text=tok)
            self.cmd, self.args, self.cmd_line = tok, [], line_no
            return None
        if tok != "$end":
            self.args.append(tok)
            return None
        cmd, args, self.cmd = self.cmd, self.args, None
        if cmd == "$enddefinitions":
            return toks[i + 1:]
        self._declaration(cmd, args)
        return None

    def _declaration(self, cmd: str, args: list[str]) -> None:
        line = self.cmd_line
        if cmd == "$timescale":
            text = "".join(args)
            m = _TIMESCALE_RE.match(text)
            if not m:
                raise BadInput(self.path, "bad $timescale (expected 1, 10 or 100 and one of "
                               "s ms us ns ps fs)", line=line, text=" ".join(args))
            self.h.tick = int(m.group(1)) * _TIME_UNITS_NS[m.group(2)]
            self.h.timescale = f"{m.group(1)} {m.group(2)}"
        elif cmd == "$scope":
            self.scopes.append(args[-1] if args else "")
        elif cmd == "$upscope":
            if self.scopes:
                self.scopes.pop()
        elif cmd == "$var":
            self.h.vars.append(self._var(args, line))
        elif cmd in ("$date", "$version"):
            self.h.info[cmd[1:]] = " ".join(args)

    def _var(self, args: list[str], line: int) -> Var:
        if len(args) < 4:
            raise BadInput(self.path, "bad $var (expected: type width code name [range] $end)",
                           line=line, text=" ".join(args))
        kind, width, code, ref = args[0], args[1], args[2], args[3:]
        if not width.isdigit() or int(width) == 0:
            raise BadInput(self.path, f"bad $var width {width!r}", line=line, text=" ".join(args))
        msb = lsb = None
        m = _RANGE_RE.match(ref[-1])
        if m and len(ref) > 1:
            ref = ref[:-1]
        else:
            m = _ATTACHED_RANGE_RE.match(ref[-1])
            if m:
                ref = ref[:-1] + [m.group(1)]
                m = _RANGE_RE.match(f"[{m.group(2)}" + (f":{m.group(3)}]" if m.group(3) else "]"))
        if m:
            msb = int(m.group(1))
            lsb = int(m.group(2)) if m.group(2) is not None else msb
        name = " ".join(ref)
        written = name + (f"[{msb}:{lsb}]" if msb is not None and msb != lsb
                          else f"[{msb}]" if msb is not None else "")
        return Var(kind, int(width), code, ".".join(self.scopes + [written]), name, msb, lsb, line)


# ---------------------------------------------------------------- signal mapping

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


def _find_var(h: Header, signal: str) -> Var | None:
    for key in ("path", "leaf", "name"):
        for var in h.vars:
            if getattr(var, key) == signal:
                return var
    return None


def _closest(h: Header, wanted: str) -> list[str]:
    names = [v.leaf for v in h.vars]
    return difflib.get_close_matches(wanted, names, n=3, cutoff=0.3)


def resolve(h: Header, path: str, mapping: dict | None, active_low) -> tuple[list[Feed], list[str]]:
    """Which capture signal feeds each bus slot. Returns (feeds, notes)."""
    notes: list[str] = []
    chosen: dict[str, tuple[Var, bool]] = {}
    for var in h.vars:
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
        var = _find_var(h, signal)
        if var is None:
            raise MissingSignal(f"{path}: --map {name}={signal}: no signal {signal!r} in the capture"
                                + _closest_text(h, signal))
        explicit[bus] = (var, active_low_marked(var.name)[1])
    taken = {id(var) for var, _ in explicit.values()}   # a signal mapped by hand feeds only that line
    chosen = {b: c for b, c in chosen.items() if id(c[0]) not in taken}
    chosen.update(explicit)
    _drop_incomplete_db(chosen, notes, explicit=set(mapping or ()))
    _check_required(h, path, chosen)
    inverted = _inversions(h, chosen, active_low or [])
    feeds = [Feed(bus, var, bus in inverted) for bus, (var, _) in chosen.items()]
    feeds.sort(key=lambda f: BUS_NAMES.index(f.bus))
    return feeds, notes


def _closest_text(h: Header, wanted: str) -> str:
    near = _closest(h, wanted)
    return f"; closest available: {', '.join(near)}" if near else (
        f"; available: {', '.join(v.leaf for v in h.vars[:20])}" if h.vars else "; the capture declares no signals")


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


def _check_required(h: Header, path: str, chosen: dict) -> None:
    missing = [b for b in schema.REQUIRED_SIGNALS if b not in chosen]
    if not missing:
        return
    parts = []
    for bus in missing:
        near = _closest(h, bus)
        parts.append(f"{bus} (closest: {', '.join(near)})" if near else bus)
    avail = ", ".join(v.leaf for v in h.vars[:20]) or "none"
    raise MissingSignal(f"{path}: required bus line(s) missing: {'; '.join(parts)}. Signals in the "
                        f"capture: {avail}. Name them with --map NAME=SIGNAL")


def _inversions(h: Header, chosen: dict, active_low: list[str]) -> set[str]:
    inverted = {bus for bus, (_, low) in chosen.items() if low}
    for item in active_low:
        if item.lower() == "all":
            inverted |= set(chosen)
            continue
        var = _find_var(h, item)
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


# ---------------------------------------------------------------- value changes
#
# Each block of whole lines is split into tokens with numpy (parsers/_tokens.py). A token's
# kind follows from its first byte; identifier codes are packed into integers and compared
# with the mapped codes; each slot's value is forward-filled by index arithmetic; the state
# at the end of each timestamp is combined into lines/db/dbp.

KEYWORDS = ("$end", "$comment", "$dumpvars", "$dumpall", "$dumpon", "$dumpoff")
KW_NONE, KW_END, KW_COMMENT, KW_DUMPVARS, KW_DUMPALL, KW_DUMPON, KW_DUMPOFF = range(7)
BAD, TIME, SCALAR, VECTOR, REAL, STRING = range(6)          # item kinds
R_TOKEN, R_TIME, R_VECTOR, R_NO_CODE, R_UNDECLARED, R_BACKWARDS, R_TOO_BIG = range(1, 8)
REASONS = {
    R_TOKEN: "not a timestamp or a value change",
    R_TIME: "bad timestamp (expected '#' and a non-negative integer of at most 18 digits)",
    R_VECTOR: "bad binary vector value (expected b followed by 0 1 x z)",
    R_NO_CODE: "value without an identifier code on the same line",
    R_UNDECLARED: "undeclared identifier code {code}",
    R_BACKWARDS: "time goes backwards",
    R_TOO_BIG: "timestamp too large for int64 nanoseconds",
}
_I64_MAX = (1 << 63) - 1
PACKED_BYTES = 7          # identifier codes up to this long are compared as integers
VECTOR_CHECK_BYTES = 64   # longer vector values are checked one by one (rare)
READ_BLOCK_BYTES = 8 << 20


def _table(chars: str) -> np.ndarray:
    t = np.zeros(256, dtype=bool)
    t[list(chars.encode())] = True
    return t


STARTS_VALUE = _table("bBrRsS")       # a value whose identifier code is the next token
STARTS_SCALAR = _table("01xXzZ")
VECTOR_CHAR = _table("01xXzZ")
BIT_OF = np.full(256, -1, dtype=np.int16)   # '0' -> 0, '1' -> 1, x z (anything else) -> -1
BIT_OF[ord("0")], BIT_OF[ord("1")] = 0, 1
PAD_OF = np.full(256, ord("0"), dtype=np.uint8)    # left-extension of a short vector value
PAD_OF[[ord("x"), ord("X")]] = ord("x")
PAD_OF[[ord("z"), ord("Z")]] = ord("z")


class _Tokens(TokenBlock):
    """Every block through the general tokenizer (token spans for each line)."""


def pack_code(code: bytes) -> int:
    """An identifier code as the integer `_pack` gives it (0 for codes too long to pack)."""
    if not 1 <= len(code) <= PACKED_BYTES:
        return 0
    return sum(b << (8 * j) for j, b in enumerate(code)) | (len(code) << 56)


def _pack(a: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    short = (length >= 1) & (length <= PACKED_BYTES)
    key = np.where(short, length.astype(np.uint64) << np.uint64(56), np.uint64(0))
    last = len(a) - 1
    for j in range(PACKED_BYTES):
        take = short & (j < length)
        if not take.any():
            break
        byte = a[np.minimum(start + j, last)].astype(np.uint64) << np.uint64(8 * j)
        key |= np.where(take, byte, np.uint64(0))
    return key


def _last_index(hit: np.ndarray) -> np.ndarray:
    """For every position, the index of the last True at or before it (-1 if none)."""
    return np.maximum.accumulate(np.where(hit, np.arange(len(hit)), -1)) if len(hit) else \
        np.zeros(0, dtype=np.int64)


@dataclass
class _Items:
    """The timestamps and value changes of one block, in file order (numpy columns)."""

    line: np.ndarray       # line number
    start: np.ndarray      # token span (for messages)
    end: np.ndarray
    kind: np.ndarray
    ctx: np.ndarray        # last keyword before it ($dumpoff values are not applied)
    time: np.ndarray       # TIME: the timestamp
    code_start: np.ndarray  # identifier code span
    code_end: np.ndarray
    code: np.ndarray       # packed identifier code
    val_start: np.ndarray  # value span: the bit of a scalar, the digits of a vector
    val_end: np.ndarray
    reason: np.ndarray     # 0 = good

    def take(self, keep: np.ndarray) -> "_Items":
        return _Items(**{k: v[keep] for k, v in self.__dict__.items()})


def _keywords(tb: TokenBlock, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    kw = np.zeros(len(start), dtype=np.int8)
    dollar = np.flatnonzero((tb.a[start] == ord("$")) & (length > 1)) if len(start) else start
    for number, word in enumerate(KEYWORDS, 1):
        cand = dollar[length[dollar] == len(word)]
        ok = np.ones(len(cand), dtype=bool)
        for j, ch in enumerate(word.encode()):
            ok &= tb.a[start[cand] + j] == ch
        kw[cand[ok]] = number
    return kw


def _scan(tb: TokenBlock, context: int) -> tuple[_Items, int]:
    """Tokens -> items, and the keyword context at the end of the block."""
    start, end = tb.tok_start, tb.tok_end
    kw = _keywords(tb, start, end - start)
    last_kw = _last_index(kw > 0)
    ctx = np.where(last_kw >= 0, kw[np.maximum(last_kw, 0)], context).astype(np.int8)
    end_context = int(ctx[-1]) if len(ctx) else context
    line = tb.tok_line
    keep = (kw == 0) & (ctx != KW_COMMENT)
    if not keep.all():
        start, end, ctx, line = start[keep], end[keep], ctx[keep], line[keep]
    is_value, has_code, sel = _pair(tb.a[start], line)
    nxt = np.minimum(sel + 1, max(len(start) - 1, 0))
    following = (start[nxt], end[nxt])      # where a b/r/s value's identifier code is
    if len(sel) < len(start):
        start, end, ctx, line = start[sel], end[sel], ctx[sel], line[sel]
    items = _decode(tb, start, end, ctx, tb.line_no[line], is_value, has_code, following)
    return items, end_context


def _pair(c0: np.ndarray, line: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A `b`/`r`/`s` value is followed by its identifier code on the same line. In a run of
    tokens starting with those letters values and codes alternate, so the position in the
    run tells which is which (a code may itself start with `b`, or be `#` or `$`).
    Returns is_value and has_code of the items, and the items' token indexes (codes left out)."""
    n = len(c0)
    same_line = np.zeros(n, dtype=bool)
    same_line[1:] = line[1:] == line[:-1]
    cand = STARTS_VALUE[c0]
    prev_cand = np.zeros(n, dtype=bool)
    prev_cand[1:] = cand[:-1]
    run_start = _last_index(cand & ~(prev_cand & same_line))
    is_value = cand & ((np.arange(n) - run_start) % 2 == 0)
    is_code = np.zeros(n, dtype=bool)
    is_code[1:] = is_value[:-1] & same_line[1:]
    has_code = np.zeros(n, dtype=bool)
    has_code[:-1] = is_value[:-1] & same_line[1:]
    if not is_code.any():
        return is_value, has_code, np.arange(n)
    sel = np.flatnonzero(~is_code)
    return is_value[sel], has_code[sel], sel


def _decode(tb: TokenBlock, start, end, ctx, line, is_value, has_code, following) -> _Items:
    """Kind, value span, identifier code and timestamp of every item; reason if bad."""
    a = tb.a
    length = end - start
    c0 = a[start]
    n = len(start)
    code_start = np.where(is_value, following[0], start + 1)
    code_end = np.where(is_value & has_code, following[1], np.where(is_value, code_start, end))
    kind = np.full(n, BAD, dtype=np.int8)
    kind[c0 == ord("#")] = TIME
    kind[STARTS_SCALAR[c0] & (length >= 2)] = SCALAR
    kind[is_value & ((c0 == ord("b")) | (c0 == ord("B")))] = VECTOR
    kind[is_value & ((c0 == ord("r")) | (c0 == ord("R")))] = REAL
    kind[is_value & ((c0 == ord("s")) | (c0 == ord("S")))] = STRING
    scalar = kind == SCALAR
    val_start = np.where(scalar, start, start + 1)
    val_end = np.where(scalar, start + 1, end)
    reason = np.zeros(n, dtype=np.int8)
    reason[kind == BAD] = R_TOKEN
    time = np.zeros(n, dtype=np.int64)
    sub = np.flatnonzero(kind == TIME)
    time[sub], ok = tb.integers(start[sub] + 1, length[sub] - 1)
    reason[sub[~ok]] = R_TIME
    sub = np.flatnonzero(kind == VECTOR)
    reason[sub[~_vector_ok(a, val_start[sub], val_end[sub])]] = R_VECTOR
    reason[(kind >= VECTOR) & ~has_code & (reason == 0)] = R_NO_CODE
    code = np.zeros(n, dtype=np.uint64)
    sub = np.flatnonzero(kind >= SCALAR)
    code[sub] = _pack(a, code_start[sub], code_end[sub] - code_start[sub])
    return _Items(line, start, end, kind, ctx, time, code_start, code_end, code,
                  val_start, val_end, reason)


def _vector_ok(a: np.ndarray, vs: np.ndarray, ve: np.ndarray) -> np.ndarray:
    length = ve - vs
    ok = length >= 1
    short = length <= VECTOR_CHECK_BYTES
    width = int(length[short].max()) if short.any() else 0
    last = len(a) - 1
    for j in range(width):
        ok &= ~(short & (j < length)) | VECTOR_CHAR[a[np.minimum(vs + j, last)]]
    for i in np.flatnonzero(~short):      # very wide vectors: rare, checked one by one
        ok[i] = bool(VECTOR_CHAR[a[vs[i]:ve[i]]].all())
    return ok


def _bit_values(a: np.ndarray, vs: np.ndarray, ve: np.ndarray) -> np.ndarray:
    """0/1 of a 1-bit value (the last character of a vector value), -1 for x or z."""
    return BIT_OF[a[ve - 1]]


def _byte_values(a: np.ndarray, vs: np.ndarray, ve: np.ndarray) -> np.ndarray:
    """Low 8 bits of a vector value left-extended as IEEE 1364 says, -1 if any is x or z."""
    length = ve - vs
    pad = PAD_OF[a[vs]]
    value = np.zeros(len(vs), dtype=np.int16)
    unknown = np.zeros(len(vs), dtype=bool)
    for j in range(8):
        ch = np.where(j < length, a[np.maximum(ve - 1 - j, vs)], pad)
        bit = BIT_OF[ch]
        unknown |= bit < 0
        value |= np.where(bit > 0, 1 << j, 0).astype(np.int16)
    return np.where(unknown, -1, value).astype(np.int16)


def _reverse_bits(v: np.ndarray) -> np.ndarray:
    out = np.zeros_like(v)
    for j in range(8):
        out |= ((v >> j) & 1) << (7 - j)
    return np.where(v < 0, v, out)


@dataclass
class _Carry:
    """What one block hands to the next."""

    context: int = KW_END
    state: dict = field(default_factory=dict)     # slot -> value after the last change
    origin: int | None = None                     # first timestamp (time units)
    last_time: int | None = None                  # last accepted timestamp
    pending: tuple | None = None                  # (t_ns, lines, db, dbp) of the last row, may still change
    final_state: tuple | None = None              # (lines, db, dbp) of the last final row


COUNT_KEYS = ("xz_control_changes", "xz_data_changes", "real_changes_ignored",
              "string_changes_ignored", "dumpoff_changes_ignored")


class _Reader:
    """Streams the value changes as `transitions` frames; fills records and meta counts."""

    def __init__(self, path: str, header: Header, feeds: list[Feed], cap: Capture, strict: bool,
                 progress=None, block_bytes: int = READ_BLOCK_BYTES):
        self.path, self.h, self.feeds, self.cap, self.strict = path, header, feeds, cap, strict
        self.progress, self.block_bytes = progress, block_bytes
        self.slots = sorted({_slot_of(f.bus) for f in feeds})
        self.tick = header.tick
        codes = {v.code.encode("utf-8", "surrogateescape") for v in header.vars}
        self.declared = np.array(sorted(pack_code(c) for c in codes if pack_code(c)), dtype=np.uint64)
        self.declared_long = {c for c in codes if not pack_code(c)}

    def __call__(self) -> Iterator[pl.DataFrame]:
        records, meta = self.cap.records, self.cap.meta
        records.read = records.skipped = 0
        records.examples.clear()
        for key in COUNT_KEYS:
            meta[key] = 0
        carry = _Carry(state={s: (0 if s < DB_SLOT else -1) for s in self.slots})
        for buf, first_line in self._blocks():
            out = self._block(buf, first_line, carry)
            if out is not None:
                yield out
        self._end_of_file(carry)
        if carry.pending is not None:
            yield _frame([carry.pending])

    def _blocks(self) -> Iterator[tuple[bytes, int]]:
        if self.h.rest:
            yield self.h.rest.encode() + b"\n", self.h.rest_line
        yield from _lines.iter_byte_blocks(self.path, start_offset=self.h.data_offset,
                                           first_line=self.h.data_line, block_bytes=self.block_bytes,
                                           progress=self.progress)

    # -- one block
    def _block(self, buf: bytes, first_line: int, carry: _Carry) -> pl.DataFrame | None:
        tb = _Tokens(buf, first_line)
        items, carry.context = _scan(tb, carry.context)
        items = self._check(tb, items, carry)
        self._count(items)
        times = items.time[(items.kind == TIME) & (items.ctx != KW_DUMPOFF)]
        if len(times):
            if carry.origin is None:
                carry.origin = int(times[0])
                self.cap.meta["origin"] = carry.origin
            carry.last_time = int(times[-1])
        return self._rows(tb, items, carry)

    def _check(self, tb: TokenBlock, items: _Items, carry: _Carry) -> _Items:
        """Mark undeclared codes, timestamps that go backwards or overflow; raise or skip."""
        change = (items.kind >= SCALAR) & (items.reason == 0)
        at = np.minimum(np.searchsorted(self.declared, items.code), max(len(self.declared) - 1, 0))
        known = (self.declared[at] == items.code) & (items.code != 0) if len(self.declared) else \
            np.zeros(len(items.code), dtype=bool)
        for i in np.flatnonzero(change & (items.code == 0)):     # codes too long to pack
            known[i] = tb.buf[items.code_start[i]:items.code_end[i]] in self.declared_long
        items.reason[change & ~known] = R_UNDECLARED
        is_time = (items.kind == TIME) & (items.reason == 0)
        t = np.where(is_time, items.time, -1)
        prev_max = np.maximum.accumulate(np.concatenate(([-1 if carry.last_time is None else carry.last_time],
                                                         t)))[:-1]
        items.reason[is_time & (t < prev_max)] = R_BACKWARDS
        good = items.time[(items.kind == TIME) & (items.reason == 0)]
        origin = carry.origin if carry.origin is not None else (int(good[0]) if len(good) else 0)
        limit = origin + _I64_MAX // self.tick.numerator
        items.reason[(items.kind == TIME) & (items.reason == 0) & (items.time > limit)] = R_TOO_BIG
        bad = np.flatnonzero(items.reason)
        if len(bad):
            if self.strict:
                i = bad[0]
                raise BadInput(self.path, self._reason(tb, items, i), line=int(items.line[i]),
                               text=self._text(tb, items, i))
            self.cap.records.skip(len(bad), [f"{self.path}:{items.line[i]}: {self._reason(tb, items, i)}"
                                             for i in bad[:5]])
            items = items.take(items.reason == 0)
        self.cap.records.read += len(items.kind)
        return items

    @staticmethod
    def _text(tb: TokenBlock, items: _Items, i: int) -> str:
        return tb.buf[items.start[i]:items.end[i]].decode("utf-8", "replace")

    @staticmethod
    def _reason(tb: TokenBlock, items: _Items, i: int) -> str:
        code = tb.buf[items.code_start[i]:items.code_end[i]].decode("utf-8", "replace")
        return REASONS[int(items.reason[i])].format(code=code)

    def _count(self, items: _Items) -> None:
        meta = self.cap.meta
        live = items.ctx != KW_DUMPOFF
        meta["real_changes_ignored"] += int(((items.kind == REAL) & live).sum())
        meta["string_changes_ignored"] += int(((items.kind == STRING) & live).sum())
        meta["dumpoff_changes_ignored"] += int(((items.kind != TIME) & ~live).sum())

    # -- state per timestamp
    def _slot_changes(self, tb: TokenBlock, items: _Items) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """slot -> (item positions, values) of the mapped value changes, in file order.
        Real and string changes, and values inside $dumpoff, are not applied."""
        live = ((items.kind == SCALAR) | (items.kind == VECTOR)) & (items.ctx != KW_DUMPOFF)
        changes = {}
        for f in self.feeds:
            code = f.var.code.encode("utf-8", "surrogateescape")
            key = pack_code(code)
            if key:
                hit = items.code == key
            else:
                hit = np.array([tb.buf[s:e] == code for s, e in zip(items.code_start, items.code_end)],
                               dtype=bool) if len(items.code) else np.zeros(0, dtype=bool)
            pos = np.flatnonzero(hit & live)
            vs, ve = items.val_start[pos], items.val_end[pos]
            if f.bus == "DB":
                v = _byte_values(tb.a, vs, ve)
                if f.var.msb is not None and f.var.lsb is not None and f.var.msb < f.var.lsb:
                    v = _reverse_bits(v)
                if f.inverted:
                    v = np.where(v >= 0, v ^ 0xFF, v)
            else:
                v = _bit_values(tb.a, vs, ve)
                if f.inverted:
                    v = np.where(v >= 0, 1 - v, v)
            slot = _slot_of(f.bus)
            meta_key = "xz_control_changes" if slot < DB_SLOT else "xz_data_changes"
            self.cap.meta[meta_key] += int((v < 0).sum())
            changes[slot] = (pos, v)
        return changes

    def _rows(self, tb: TokenBlock, items: _Items, carry: _Carry) -> pl.DataFrame | None:
        """State at the end of each timestamp; emit the final rows that change something."""
        changes = self._slot_changes(tb, items)
        is_time = (items.kind == TIME) & (items.ctx != KW_DUMPOFF)
        origin = carry.origin if carry.origin is not None else 0
        t_ns = (np.where(is_time, items.time, origin) - origin) * self.tick.numerator // self.tick.denominator
        if carry.pending is not None:      # the pending timestamp heads the block
            is_time = np.concatenate(([True], is_time))
            t_ns = np.concatenate(([carry.pending[0]], t_ns))
            changes = {s: (pos + 1, v) for s, (pos, v) in changes.items()}
        last_time = _last_index(is_time)
        if not len(last_time) or last_time[-1] < 0:
            self._update_state(changes, carry)
            return None               # changes before any timestamp belong to the first one
        first = int(np.argmax(is_time))
        tt = t_ns[np.where(last_time >= 0, last_time, first)]
        ends = np.flatnonzero(np.concatenate((tt[1:] != tt[:-1], [True])))
        state = {s: _state_at(ends, *changes[s], carry.state[s]) for s in self.slots}
        self._update_state(changes, carry)
        lines, db, dbp = _combine(state, self.slots)
        rows_t = tt[ends]
        changed = np.ones(len(ends), dtype=bool)
        changed[1:] = (lines[1:] != lines[:-1]) | (db[1:] != db[:-1]) | (dbp[1:] != dbp[:-1])
        if carry.final_state is not None:
            changed[0] = (lines[0], db[0], dbp[0]) != carry.final_state
        if len(ends) > 1:
            carry.final_state = (lines[-2], db[-2], dbp[-2])
        carry.pending = (int(rows_t[-1]), int(lines[-1]), int(db[-1]), int(dbp[-1]))
        emit = np.flatnonzero(changed[:-1])
        if not len(emit):
            return None
        return _frame_from(rows_t[emit], lines[emit], db[emit], dbp[emit])

    @staticmethod
    def _update_state(changes: dict, carry: _Carry) -> None:
        for s, (pos, value) in changes.items():
            if len(pos):
                carry.state[s] = int(value[-1])

    def _end_of_file(self, carry: _Carry) -> None:
        if carry.context in (KW_COMMENT, KW_DUMPVARS, KW_DUMPALL, KW_DUMPON, KW_DUMPOFF):
            reason = f"file ends inside {KEYWORDS[carry.context - 1]} (no $end)"
            if self.strict:
                raise TruncatedInput(self.path, reason)
            self.cap.anomalies = pl.concat([self.cap.anomalies, schema.frame(
                {"t_ns": [carry.pending[0] if carry.pending else 0], "kind": ["TRUNCATED INPUT"],
                 "detail": [reason], "position": ["end of file"]}, schema.ANOMALIES)])
        initial = {s: (0 if s < DB_SLOT else -1) for s in self.slots}
        if carry.pending is None and carry.state != initial:
            # value changes but no timestamp at all: one state at time 0
            lines, db, dbp = _combine({s: np.array([v]) for s, v in carry.state.items()}, self.slots)
            carry.pending = (0, int(lines[0]), int(db[0]), int(dbp[0]))


def _state_at(ends: np.ndarray, pos: np.ndarray, value: np.ndarray, before: int) -> np.ndarray:
    """A slot's value at each group end: its last change at or before it (`before` if none).

    Each change falls in the group of the first end at or after it; the last change of each
    group is written there and carried forward over the groups without a change.
    """
    if not len(pos):
        return np.full(len(ends), before, dtype=np.int16)
    group = np.searchsorted(ends, pos)
    last_of_group = np.concatenate((group[1:] != group[:-1], [True]))
    at = np.full(len(ends), -1, dtype=np.int64)
    at[group[last_of_group]] = np.flatnonzero(last_of_group)
    at = np.maximum.accumulate(at)
    return np.where(at >= 0, value[np.maximum(at, 0)], before).astype(np.int16)


def _combine(state: dict, slots: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Slot states -> lines, db (-1 = not sampled), dbp (-1 = not sampled, else 0/1)."""
    n = len(next(iter(state.values())))
    lines = np.zeros(n, dtype=np.int32)
    for s in slots:
        if s < DB_SLOT:
            lines |= (state[s] > 0).astype(np.int32) << s
    db = np.full(n, -1, dtype=np.int32)
    if DB_SLOT in state:
        db = state[DB_SLOT].astype(np.int32)
    elif DB_BIT_SLOT0 in state:
        bits = [state[DB_BIT_SLOT0 + i].astype(np.int32) for i in range(8)]
        db = np.where(np.min(bits, axis=0) >= 0, sum(b << i for i, b in enumerate(bits)), -1)
    dbp = state[DBP_SLOT].astype(np.int32) if DBP_SLOT in state else np.full(n, -1, dtype=np.int32)
    return lines, db, dbp


def _frame_from(t_ns, lines, db, dbp) -> pl.DataFrame:
    raw = pl.DataFrame({"t_ns": np.asarray(t_ns, dtype=np.int64), "lines": np.asarray(lines, dtype=np.uint16),
                        "db": np.asarray(db, dtype=np.int16), "dbp": np.asarray(dbp, dtype=np.int8)})
    return raw.select(
        "t_ns", "lines",
        pl.when(pl.col("db") >= 0).then(pl.col("db")).cast(pl.UInt8).alias("db"),
        pl.when(pl.col("dbp") >= 0).then(pl.col("dbp") == 1).alias("dbp"))


def _frame(rows: list[tuple]) -> pl.DataFrame:
    t, lines, db, dbp = zip(*rows)
    return _frame_from(t, lines, db, dbp)


# ---------------------------------------------------------------- entry points

def sniff(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return text.startswith(SNIFF_KEYWORDS)


def parse(path: str, *, strict: bool = True, progress=None, mapping: dict | None = None,
          active_low: list[str] | None = None, initiator: int = 7,
          block_bytes: int = READ_BLOCK_BYTES, **_opts) -> Capture:
    """Read a VCD file. Raises MissingSignal before decoding when BSY SEL MSG C/D I/O cannot
    be found, BadInput on the first bad line when strict."""
    path = str(path)
    header = _HeaderReader(path).read()
    if not header.vars:
        raise BadInput(path, "no $var declaration before the value changes (not a VCD file?)",
                       line=header.data_line - 1 if header.data_line > 1 else 1)
    feeds, notes = resolve(header, path, mapping, active_low)
    buses = [f.bus for f in feeds]
    signals = [s for s in schema.SIGNALS if s in buses]
    if "DB" in buses or DB_BITS[0] in buses:
        signals.append("DB")
    if "DBP" in buses:
        signals.append("DBP")
    meta = {
        "tick_ns": int(header.tick) if header.tick.denominator == 1 else float(header.tick),
        "timescale": header.timescale or "1 ns (no $timescale; assumed)",
        "initiator": initiator,
        "signals": signals,
        "level": level_of(signals),
        "mapping": {f.bus: f.var.path for f in feeds},
        "inverted": [f.bus for f in feeds if f.inverted],
        **{k: v for k, v in header.info.items() if v},
        "origin": None,    # the first timestamp, in file units (set while reading)
        **{k: 0 for k in COUNT_KEYS},
    }
    if header.timescale is None:
        notes.append("no $timescale in the header: 1 ns assumed")
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=notes)
    reader = _Reader(path, header, feeds, cap, strict, progress, block_bytes)
    cap.chunks = reader
    return cap
