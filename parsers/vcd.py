"""IEEE 1364 value change dumps (VCD) of a SCSI bus -> `transitions` frames.

Writers seen in the field: PiSCSI `scsimon` (plain names BSY SEL CD IO MSG REQ ACK ATN RST,
an 8-bit `data` vector and a `phase` string), sigrok/PulseView and other logic-analyzer
software (one wire per probe, often active-low names such as `/SCSI_BSY`, `BSY_N`, `nSEL`,
`ATN#`, data as `D0`..`D7`/`DB0`..`DB7` bits or a `DB`/`DAT`/`DATA` vector, parity `DBP`).

The header (declarations, small) is read token by token in Python; the value changes are
streamed in blocks (`parsers/_lines.py`) and decoded with polars expressions: tokens are
classified in bulk, identifier codes are joined to bus "slots", each slot's value is
forward-filled and the bits are combined into `lines`/`db`/`dbp`. The only Python loops run
per block and per slot. See docs/vcd.md for the mapping and polarity rules.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Iterator

import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput, MissingSignal, TruncatedInput, UsageError
from scsitrace.model import Capture, RecordCount
from . import _lines
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
    for name, signal in (mapping or {}).items():
        bus = bus_name(name) if name not in BUS_NAMES else name
        if bus is None:
            raise UsageError(f"--map {name}={signal}: unknown bus line {name!r} "
                             f"(known: {' '.join(BUS_NAMES)})")
        var = _find_var(h, signal)
        if var is None:
            raise MissingSignal(f"{path}: --map {name}={signal}: no signal {signal!r} in the capture"
                                + _closest_text(h, signal))
        chosen[bus] = (var, active_low_marked(var.name)[1])
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

KEYWORDS = ["$end", "$comment", "$dumpvars", "$dumpall", "$dumpon", "$dumpoff"]
_I64_MAX = (1 << 63) - 1


def _tokens(block: pl.DataFrame) -> pl.DataFrame:
    """One row per whitespace-separated token: line_no, tok."""
    text = pl.col("text").str.replace_all("\t", " ", literal=True).str.strip_chars()
    return (block.select("line_no", text.str.split(" ").alias("tok"))
            .explode("tok").filter(pl.col("tok") != ""))


def _classify(toks: pl.DataFrame, context: str) -> tuple[pl.DataFrame, str]:
    """Tokens -> (items `line_no, tok, kind, val, code, ctx, reason`, context at the end).

    kind: time, scalar, vec, real, str, bad. A `b`/`r`/`s` value is followed by its
    identifier code on the same line; in a run of tokens starting with those letters,
    values and codes alternate, so the pairing is decided by the position in the run.
    `$comment` text is dropped; `ctx` is the last keyword seen (`$dumpoff` values are
    not applied).
    """
    tok = pl.col("tok")
    is_kw = tok.is_in(KEYWORDS)
    toks = toks.with_columns(pl.when(is_kw).then(tok).forward_fill().fill_null(context).alias("ctx"),
                             is_kw.alias("kw"))
    end_context = toks["ctx"][-1] if len(toks) else context
    toks = toks.filter(~pl.col("kw") & (pl.col("ctx") != "$comment"))
    c0 = tok.str.slice(0, 1)
    same_line = (pl.col("line_no") == pl.col("line_no").shift(1)).fill_null(False)
    cand = c0.is_in(["b", "B", "r", "R", "s", "S"])
    idx = pl.int_range(pl.len(), dtype=pl.Int64)
    run_start = pl.when(cand & ~(cand.shift(1).fill_null(False) & same_line)).then(idx).forward_fill()
    toks = toks.with_columns(c0.alias("c0"), same_line.alias("same_line"),
                             (cand & ((idx - run_start) % 2 == 0)).alias("is_val"))
    toks = toks.with_columns(
        (pl.col("is_val").shift(1).fill_null(False) & pl.col("same_line")).alias("is_code"),
        pl.when(pl.col("is_val") & pl.col("same_line").shift(-1).fill_null(False))
        .then(tok.shift(-1)).alias("next_tok"))
    items = toks.filter(~pl.col("is_code"))
    c0 = pl.col("c0")
    val = pl.col("is_val")
    kind = (pl.when(val & c0.is_in(["b", "B"])).then(pl.lit("vec"))
            .when(val & c0.is_in(["r", "R"])).then(pl.lit("real"))
            .when(val).then(pl.lit("str"))
            .when(c0 == "#").then(pl.lit("time"))
            .when(c0.is_in(["0", "1", "x", "X", "z", "Z"]) & (tok.str.len_bytes() > 1)).then(pl.lit("scalar"))
            .otherwise(pl.lit("bad")))
    items = items.with_columns(kind.alias("kind"))
    k = pl.col("kind")
    items = items.with_columns(
        pl.when(k == "scalar").then(c0).when(k == "vec").then(tok.str.slice(1)).alias("val"),
        pl.when(k == "scalar").then(tok.str.slice(1)).otherwise(pl.col("next_tok")).alias("code"),
        pl.when(k == "time").then(tok.str.slice(1).str.to_integer(base=10, strict=False)).alias("time"),
    )
    reason = (pl.when(k == "bad").then(pl.lit("not a timestamp or a value change"))
              .when((k == "time") & (pl.col("time").is_null() | ~tok.str.contains(r"^#\d+$")))
              .then(pl.lit("bad timestamp (expected '#' and a non-negative integer below 2^63)"))
              .when((k == "vec") & ~pl.col("val").str.contains(r"^[01xXzZ]+$"))
              .then(pl.lit("bad binary vector value (expected b followed by 0 1 x z)"))
              .when(k.is_in(["vec", "real", "str"]) & pl.col("code").is_null())
              .then(pl.lit("value without an identifier code on the same line")))
    return items.with_columns(reason.alias("reason")).select(
        "line_no", "tok", "kind", "val", "code", "time", "ctx", "reason"), end_context


def _slot_table(feeds: list[Feed]) -> pl.DataFrame:
    """code -> slot, is_vector, inverted, reversed (a `[0:7]` range puts bit 0 first)."""
    rows = {"code": [], "slot": [], "vector": [], "inv": [], "rev": []}
    for f in feeds:
        rows["code"].append(f.var.code)
        rows["slot"].append(_slot_of(f.bus))
        rows["vector"].append(f.bus == "DB")
        rows["inv"].append(f.inverted)
        rows["rev"].append(f.bus == "DB" and f.var.msb is not None and f.var.msb < f.var.lsb)
    return pl.DataFrame(rows, schema={"code": pl.Utf8, "slot": pl.Int16, "vector": pl.Boolean,
                                      "inv": pl.Boolean, "rev": pl.Boolean})


def _value_expr() -> pl.Expr:
    """Slot value as i16: 0/1 for a wire, 0-255 for the DB vector, -1 for x or z."""
    v = pl.col("val")
    bit_c = v.str.slice(-1)
    bit = (pl.when(bit_c == "1").then(pl.lit(1, pl.Int16)).when(bit_c == "0").then(pl.lit(0, pl.Int16))
           .otherwise(pl.lit(-1, pl.Int16)))
    bit = pl.when(pl.col("inv") & (bit >= 0)).then(1 - bit).otherwise(bit)
    first = v.str.slice(0, 1)
    padded = (pl.when(first.is_in(["x", "X"])).then(v.str.pad_start(8, "x"))
              .when(first.is_in(["z", "Z"])).then(v.str.pad_start(8, "z"))
              .otherwise(v.str.pad_start(8, "0"))).str.slice(-8)
    byte = padded.str.to_integer(base=2, strict=False).cast(pl.Int16)
    rev = sum((byte // (1 << i)) % 2 * (1 << (7 - i)) for i in range(8))
    byte = pl.when(pl.col("rev")).then(rev).otherwise(byte)
    byte = pl.when(pl.col("inv")).then(byte ^ 0xFF).otherwise(byte)
    byte = pl.when(padded.str.contains("[xXzZ]")).then(pl.lit(-1, pl.Int16)).otherwise(byte)
    return pl.when(pl.col("vector")).then(byte).otherwise(bit).cast(pl.Int16)


@dataclass
class _Carry:
    """What one block hands to the next."""

    context: str = "$end"
    state: dict = field(default_factory=dict)     # slot -> value after the last change
    origin: int | None = None                     # first timestamp (time units)
    last_time: int | None = None                  # last accepted timestamp
    pending: dict | None = None                   # last output row, may still change
    final_state: tuple | None = None              # state of the last final row


class _Reader:
    """Streams the value changes as `transitions` frames; fills records and meta counts."""

    def __init__(self, path: str, header: Header, feeds: list[Feed], cap: Capture, strict: bool,
                 progress=None, block_bytes: int = _lines.BLOCK_BYTES):
        self.path, self.h, self.feeds, self.cap, self.strict = path, header, feeds, cap, strict
        self.progress, self.block_bytes = progress, block_bytes
        self.slots = sorted({_slot_of(f.bus) for f in feeds})
        self.table = _slot_table(feeds)
        self.declared = pl.Series("code", sorted({v.code for v in header.vars}), dtype=pl.Utf8)
        self.tick = header.tick

    def __call__(self) -> Iterator[pl.DataFrame]:
        records, meta = self.cap.records, self.cap.meta
        records.read = records.skipped = 0
        records.examples.clear()
        for key in COUNT_KEYS:
            meta[key] = 0
        carry = _Carry(state={s: (0 if s < DB_SLOT else -1) for s in self.slots})
        for block in self._blocks():
            out = self._block(block, carry)
            if out is not None and len(out):
                yield out
        self._end_of_file(carry)
        if carry.pending is not None:
            yield _rows_frame([carry.pending])

    def _blocks(self) -> Iterator[pl.DataFrame]:
        if self.h.rest:
            yield pl.DataFrame({"line_no": [self.h.rest_line], "text": [self.h.rest]},
                               schema={"line_no": pl.Int64, "text": pl.Utf8})
        yield from _lines.iter_line_blocks(self.path, strict=self.strict, start_offset=self.h.data_offset,
                                           first_line=self.h.data_line, block_bytes=self.block_bytes,
                                           progress=self.progress)

    # -- one block
    def _block(self, block: pl.DataFrame, carry: _Carry) -> pl.DataFrame | None:
        items, carry.context = _classify(_tokens(block), carry.context)
        items = self._check(items, carry)
        self._count(items)
        items = items.filter(pl.col("ctx") != "$dumpoff")
        times = items.filter(pl.col("kind") == "time")
        if len(times):
            if carry.origin is None:
                carry.origin = int(times["time"][0])
                self.cap.meta["origin"] = carry.origin
            carry.last_time = int(times["time"][-1])
        events = self._events(items, carry)
        if events is None:
            return None
        return self._rows(events, carry)

    def _check(self, items: pl.DataFrame, carry: _Carry) -> pl.DataFrame:
        """Mark undeclared codes and timestamps that go backwards; raise or skip bad items."""
        k = pl.col("kind")
        undeclared = k.is_in(["scalar", "vec", "real", "str"]) & ~pl.col("code").is_in(self.declared.implode())
        items = items.with_columns(
            pl.when(pl.col("reason").is_null() & undeclared)
            .then(pl.format("undeclared identifier code {}", pl.col("code")))
            .otherwise(pl.col("reason")).alias("reason"))
        good_time = pl.when(pl.col("reason").is_null() & (k == "time")).then(pl.col("time"))
        prev_max = good_time.cum_max().shift(1).forward_fill()
        if carry.last_time is not None:
            prev_max = pl.max_horizontal(prev_max.fill_null(carry.last_time), pl.lit(carry.last_time))
        backwards = pl.col("reason").is_null() & (k == "time") & (pl.col("time") < prev_max)
        items = items.with_columns(pl.when(backwards).then(pl.lit("time goes backwards"))
                                   .otherwise(pl.col("reason")).alias("reason"))
        items = self._check_range(items, carry)
        bad = items.filter(pl.col("reason").is_not_null())
        if len(bad):
            first = bad.row(0, named=True)
            if self.strict:
                raise BadInput(self.path, first["reason"], line=first["line_no"], text=first["tok"])
            self.cap.records.skip(len(bad), [f"{self.path}:{r['line_no']}: {r['reason']}"
                                             for r in bad.head(5).iter_rows(named=True)])
            items = items.filter(pl.col("reason").is_null())
        self.cap.records.read += len(items)
        return items

    def _check_range(self, items: pl.DataFrame, carry: _Carry) -> pl.DataFrame:
        """A time whose nanosecond value does not fit in int64 is bad input, not an overflow."""
        first = items.filter(pl.col("reason").is_null() & (pl.col("kind") == "time"))["time"]
        origin = carry.origin if carry.origin is not None else (int(first[0]) if len(first) else 0)
        limit = origin + _I64_MAX // self.tick.numerator
        too_big = pl.col("reason").is_null() & (pl.col("kind") == "time") & (pl.col("time") > limit)
        return items.with_columns(pl.when(too_big).then(pl.lit("timestamp too large for int64 nanoseconds"))
                                  .otherwise(pl.col("reason")).alias("reason"))

    def _count(self, items: pl.DataFrame) -> None:
        meta = self.cap.meta
        k, ctx = pl.col("kind"), pl.col("ctx")
        counts = items.select(
            ((k == "real") & (ctx != "$dumpoff")).sum().alias("real_changes_ignored"),
            ((k == "str") & (ctx != "$dumpoff")).sum().alias("string_changes_ignored"),
            ((k != "time") & (ctx == "$dumpoff")).sum().alias("dumpoff_changes_ignored"),
        ).row(0, named=True)
        for key, n in counts.items():
            meta[key] += int(n)

    def _events(self, items: pl.DataFrame, carry: _Carry) -> pl.DataFrame | None:
        """Time rows and mapped value changes, in file order: t_ns, slot, v."""
        items = items.filter(pl.col("kind").is_in(["time", "scalar", "vec"]))
        items = items.join(self.table, on="code", how="left", maintain_order="left")
        items = items.filter((pl.col("kind") == "time") | pl.col("slot").is_not_null())
        if not len(items):
            return None
        origin = carry.origin if carry.origin is not None else 0
        t_ns = ((pl.col("time") - origin) * self.tick.numerator) // self.tick.denominator
        events = items.select(t_ns.cast(pl.Int64).alias("t_ns"), "slot",
                              pl.when(pl.col("slot").is_not_null()).then(_value_expr()).alias("v"))
        self._count_xz(events)
        if carry.pending is not None:
            head = pl.DataFrame({"t_ns": [carry.pending["t_ns"]], "slot": [None], "v": [None]},
                                schema=events.schema)
            events = pl.concat([head, events])
        return events

    def _count_xz(self, events: pl.DataFrame) -> None:
        xz = events.select(((pl.col("v") == -1) & (pl.col("slot") < DB_SLOT)).sum().alias("c"),
                           ((pl.col("v") == -1) & (pl.col("slot") >= DB_SLOT)).sum().alias("d")).row(0)
        self.cap.meta["xz_control_changes"] += int(xz[0])
        self.cap.meta["xz_data_changes"] += int(xz[1])

    def _rows(self, events: pl.DataFrame, carry: _Carry) -> pl.DataFrame | None:
        """State at the end of each timestamp; emit the final rows that change something."""
        states = [pl.when(pl.col("slot") == s).then(pl.col("v")).forward_fill()
                  .fill_null(carry.state[s]).alias(f"s{s}") for s in self.slots]
        t = pl.col("t_ns").forward_fill()
        t = t.fill_null(carry.pending["t_ns"]) if carry.pending is not None else t.backward_fill()
        wide = events.select(t.alias("t_ns"), *states)
        carry.state = {s: int(wide[f"s{s}"][-1]) for s in self.slots}
        wide = wide.filter(pl.col("t_ns").is_not_null())
        if not len(wide):
            return None   # changes before any timestamp: they belong to the first one
        last_of_t = (pl.col("t_ns") != pl.col("t_ns").shift(-1)).fill_null(True)
        rows = wide.filter(last_of_t).select("t_ns", *_combine(self.slots))
        changed = (pl.col("lines") != pl.col("lines").shift(1)) | \
            pl.col("db").ne_missing(pl.col("db").shift(1)) | pl.col("dbp").ne_missing(pl.col("dbp").shift(1))
        rows = rows.with_columns(changed.fill_null(True).alias("changed"))
        if carry.final_state is not None and len(rows) and carry.pending is not None:
            first = rows.row(0)
            rows = rows.with_columns(pl.when(pl.int_range(pl.len()) == 0)
                                     .then(pl.lit(tuple(first[1:4]) != carry.final_state))
                                     .otherwise(pl.col("changed")).alias("changed"))
        final, last = rows.head(len(rows) - 1), rows.row(len(rows) - 1, named=True)
        if len(final):
            r = final.row(len(final) - 1)
            carry.final_state = tuple(r[1:4])
        carry.pending = {k: last[k] for k in ("t_ns", "lines", "db", "dbp")}
        return final.filter(pl.col("changed")).select(list(schema.TRANSITIONS))

    def _end_of_file(self, carry: _Carry) -> None:
        if carry.context in ("$comment", "$dumpvars", "$dumpall", "$dumpon", "$dumpoff"):
            reason = f"file ends inside {carry.context} (no $end)"
            if self.strict:
                raise TruncatedInput(self.path, reason)
            self.cap.anomalies = pl.concat([self.cap.anomalies, schema.frame(
                {"t_ns": [carry.pending["t_ns"] if carry.pending else 0], "kind": ["TRUNCATED INPUT"],
                 "detail": [reason], "position": ["end of file"]}, schema.ANOMALIES)])
        if carry.pending is None and any(v != (0 if s < DB_SLOT else -1) for s, v in carry.state.items()):
            # value changes but no timestamp at all: one state at time 0
            carry.pending = _combine_state(carry.state, self.slots)


COUNT_KEYS = ("xz_control_changes", "xz_data_changes", "real_changes_ignored",
              "string_changes_ignored", "dumpoff_changes_ignored")


def _combine(slots: list[int]) -> list[pl.Expr]:
    """Slot state columns -> lines (u16), db (u8, null on x/z), dbp (bool, null on x/z)."""
    lines = pl.lit(0, dtype=pl.UInt16)
    for s in slots:
        if s < DB_SLOT:
            lines = lines + pl.col(f"s{s}").clip(0, 1).cast(pl.UInt16) * (1 << s)
    if DB_SLOT in slots:
        db = pl.when(pl.col(f"s{DB_SLOT}") >= 0).then(pl.col(f"s{DB_SLOT}"))
    elif DB_BIT_SLOT0 in slots:
        bits = [pl.col(f"s{DB_BIT_SLOT0 + i}") for i in range(8)]
        db = pl.when(pl.min_horizontal(bits) >= 0).then(sum(b * (1 << i) for i, b in enumerate(bits)))
    else:
        db = pl.lit(None)
    dbp = pl.when(pl.col(f"s{DBP_SLOT}") >= 0).then(pl.col(f"s{DBP_SLOT}") == 1) \
        if DBP_SLOT in slots else pl.lit(None)
    return [lines.cast(pl.UInt16).alias("lines"), db.cast(pl.UInt8).alias("db"),
            dbp.cast(pl.Boolean).alias("dbp")]


def _combine_state(state: dict, slots: list[int]) -> dict:
    one = pl.DataFrame({f"s{s}": [state[s]] for s in slots}, schema={f"s{s}": pl.Int16 for s in slots})
    row = one.select(*_combine(slots)).row(0, named=True)
    return {"t_ns": 0, **row}


def _rows_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=schema.TRANSITIONS)


# ---------------------------------------------------------------- entry points

def sniff(head: bytes) -> bool:
    text = head.lstrip(b"\xef\xbb\xbf").lstrip()
    return text.startswith(SNIFF_KEYWORDS)


def parse(path: str, *, strict: bool = True, progress=None, mapping: dict | None = None,
          active_low: list[str] | None = None, initiator: int = 7,
          block_bytes: int = _lines.BLOCK_BYTES, **_opts) -> Capture:
    """Read a VCD file. Raises MissingSignal before decoding when BSY SEL MSG C/D I/O cannot
    be found, BadInput on the first bad line when strict."""
    path = str(path)
    header = _HeaderReader(path).read()
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
        **{k: 0 for k in COUNT_KEYS},
    }
    if header.timescale is None:
        notes.append("no $timescale in the header: 1 ns assumed")
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=notes)
    reader = _Reader(path, header, feeds, cap, strict, progress, block_bytes)
    cap.chunks = reader
    return cap
