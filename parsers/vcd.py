"""IEEE 1364 value change dumps (VCD) of a SCSI bus -> `transitions` frames.

Writers seen in the field: PiSCSI `scsimon` (plain names BSY SEL CD IO MSG REQ ACK ATN RST,
an 8-bit `data` vector and a `phase` string), sigrok/PulseView and other logic-analyzer
software (one wire per probe, often active-low names such as `/SCSI_BSY`, `BSY_N`, `nSEL`,
`ATN#`, data as `D0`..`D7`/`DB0`..`DB7` bits or a `DB`/`DAT`/`DATA` vector, parity `DBP`).

The header (declarations, small) is read token by token in Python (`parsers/_vcd_header.py`). The value changes are
streamed in blocks of whole lines (`parsers/_lines.py`) through two compiled passes
(`parsers/_vcd_scan.py`, Rust): one turns the bytes into items (timestamps and value
changes, identifier codes packed into integers), the other applies the changes of the mapped
bus "slots" in file order and closes a row of lines/db/dbp at each new timestamp; between
them the items are checked in bulk with numpy (undeclared codes, time going backwards).
See docs/vcd.md for the mapping, polarity and value rules.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.errors import BadInput, TruncatedInput
from scsitrace.model import Capture
from scsitrace.streams import prefetched
from . import _lines
from ._vcd_header import Header, _HeaderReader  # noqa: F401 (Header: the reader's)
from . import _vcd_scan as _scan
from ._vcd_scan import (BAD, KW_COMMENT, KW_DUMPALL, KW_DUMPOFF, KW_DUMPON, KW_DUMPVARS, KW_END,
                        PACKED_BYTES, R_NO_CODE, R_TIME, R_TOKEN, R_VECTOR, REAL, SCALAR, STRING,
                        TIME, VECTOR)
from ._probes import (BUS_NAMES, DB_BITS, NOT_MAPPABLE_TYPES, Feed, Var,  # noqa: F401 (re-exported)
                      active_low_marked, bus_name, resolve)

ID = "vcd"
SUFFIXES = (".vcd",)
SNIFF_KEYWORDS = (b"$date", b"$version", b"$timescale", b"$scope", b"$var", b"$comment")

# ---------------------------------------------------------------- bus slots
# A slot is one thing the reader tracks the value of: a control line, the DB vector,
# one DB bit, or DBP. Control slots use their schema.SIGNAL_BIT number.
DB_SLOT = len(schema.SIGNALS)                 # 9: the 8-bit data vector
DB_BIT_SLOT0 = DB_SLOT + 1                    # 10..17: DB0..DB7 as separate wires
DBP_SLOT = DB_BIT_SLOT0 + 8                   # 18
assert (DB_SLOT, DB_BIT_SLOT0, DBP_SLOT) == (_scan.DB_SLOT, _scan.DB_BIT_SLOT0, _scan.DBP_SLOT)


def _slot_of(bus: str) -> int:
    if bus in schema.SIGNAL_BIT:
        return schema.SIGNAL_BIT[bus]
    if bus == "DB":
        return DB_SLOT
    if bus == "DBP":
        return DBP_SLOT
    return DB_BIT_SLOT0 + DB_BITS.index(bus)


# ---------------------------------------------------------------- signal mapping


# ---------------------------------------------------------------- value changes
#
# Each block of whole lines goes through two compiled passes (parsers/_vcd_scan.py): the
# scanner turns bytes into items (timestamps, value changes: kind, packed identifier code,
# value span), checked here in bulk (undeclared codes, time order); then the items are
# applied in file order to the mapped slots, closing a row at each new timestamp.

KEYWORDS = tuple(k.decode() for k in _scan.KEYWORD_BYTES)
R_UNDECLARED, R_BACKWARDS, R_TOO_BIG, R_TOO_WIDE = range(_scan.R_NO_CODE + 1, _scan.R_NO_CODE + 5)
REASONS = {
    R_TOKEN: "not a timestamp or a value change",
    R_TIME: "bad timestamp (expected '#' and a non-negative integer of at most 18 digits)",
    R_VECTOR: "bad binary vector value (expected b followed by 0 1 x z)",
    R_NO_CODE: "value without an identifier code on the same line",
    R_UNDECLARED: "undeclared identifier code {code}",
    R_BACKWARDS: "time goes backwards",
    R_TOO_BIG: "timestamp too large for int64 nanoseconds",
    R_TOO_WIDE: "vector value does not fit the $var width of {code}",
}
_I64_MAX = (1 << 63) - 1
READ_BLOCK_BYTES = 8 << 20


def pack_code(code: bytes) -> int:
    """An identifier code as the integer the scanner packs it into (0 for codes too long to
    pack)."""
    if not 1 <= len(code) <= PACKED_BYTES:
        return 0
    return sum(b << (8 * j) for j, b in enumerate(code)) | (len(code) << 56)


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


@dataclass
class _Carry:
    """What one block hands to the next."""

    context: int = KW_END
    origin: int | None = None                     # first timestamp (time units)
    last_time: int | None = None                  # last accepted timestamp
    # slot values after the last change, the pending row (the last timestamp, which may still
    # change) and the last final row (compiled: `_vcd_scan.Carry`)
    state: _scan.Carry = field(default_factory=_scan.Carry)


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
        width = {}
        for v in header.vars:          # a code's width (the widest of the vars sharing it)
            key = pack_code(v.code.encode("utf-8", "surrogateescape"))
            width[key] = max(width.get(key, 0), v.width)
        self.declared_width = np.array([width[k] for k in self.declared.tolist()], dtype=np.int64)
        self.declared_long = {c for c in codes if not pack_code(c)}
        self.feed_codes = [f.var.code.encode("utf-8", "surrogateescape") for f in feeds]
        self.feed_keys = np.array([pack_code(c) for c in self.feed_codes], dtype=np.uint64)
        self.feed_slot = np.array([_slot_of(f.bus) for f in feeds], dtype=np.int64)
        self.feed_flags = np.array([_feed_flags(f) for f in feeds], dtype=np.int64)
        self.present = np.zeros(_scan.N_SLOTS, dtype=np.uint8)
        self.present[self.slots] = 1
        # what the compiled passes read by name besides the above: the keywords, the timescale
        self.keywords = list(_scan.KEYWORD_BYTES)
        self.tick_num, self.tick_den = self.tick.numerator, self.tick.denominator
        # the one-call path takes blocks of packed codes only (long ones are compared as bytes)
        self.fast = not self.declared_long and bool((self.feed_keys != 0).all())

    def __call__(self) -> Iterator[pl.DataFrame]:
        """The transitions, read up to two blocks ahead in a worker thread (the compiled
        passes release the GIL: reading and the analysis use both cores)."""
        return prefetched(self._stream())

    def _stream(self) -> Iterator[pl.DataFrame]:
        records, meta = self.cap.records, self.cap.meta
        records.read = records.skipped = 0
        records.examples.clear()
        for key in COUNT_KEYS:
            meta[key] = 0
        carry = _Carry()
        for buf, first_line in self._blocks():
            out = self._block(buf, first_line, carry)
            if out is not None:
                yield out
        self._end_of_file(carry)
        if carry.state.pending_t is not None:
            yield pl.DataFrame(carry.state.pending_rows())

    def _blocks(self) -> Iterator[tuple[bytes, int]]:
        if self.h.rest:
            yield self.h.rest.encode() + b"\n", self.h.rest_line
        yield from _lines.iter_byte_blocks(self.path, start_offset=self.h.data_offset,
                                           first_line=self.h.data_line, block_bytes=self.block_bytes,
                                           progress=self.progress, strict=self.strict)

    # -- one block
    def _block(self, buf: bytes, first_line: int, carry: _Carry) -> pl.DataFrame | None:
        if self.fast:
            done = self._fast(buf, first_line, carry)
            if done is not False:
                return done
        cols, carry.context = _scan.scan_block(buf, first_line, carry.context, self)
        items = self._check(buf, _Items(**cols), carry)
        self._count(items)
        times = items.time[(items.kind == TIME) & (items.ctx != KW_DUMPOFF)]
        if len(times):
            if carry.origin is None:
                carry.origin = int(times[0])
                self.cap.meta["origin"] = carry.origin
            carry.last_time = int(times[-1])
        return self._rows(buf, items, carry)

    def _fast(self, buf: bytes, first_line: int, carry: _Carry) -> pl.DataFrame | None | bool:
        """A block whose every item is good, in one compiled call (scan, checks, rows:
        `_vcd_scan.fast_block`); False when something in it is not (nothing was changed:
        the general path below says what)."""
        done = _scan.fast_block(buf, first_line, carry.context, self, carry.last_time, carry.origin, carry.state)
        if done is None:
            return False
        carry.context = done.context
        meta = self.cap.meta
        self.cap.records.read += done.items
        meta["real_changes_ignored"] += done.real
        meta["string_changes_ignored"] += done.string
        meta["dumpoff_changes_ignored"] += done.dumpoff
        if done.first_t is not None:
            if carry.origin is None:
                carry.origin = done.first_t
                meta["origin"] = carry.origin
            carry.last_time = done.last_t
        return self._frame(done.rows)

    def _check(self, buf: bytes, items: _Items, carry: _Carry) -> _Items:
        """Mark undeclared codes, timestamps that go backwards or overflow; raise or skip."""
        change = (items.kind >= SCALAR) & (items.reason == 0)
        at = np.minimum(np.searchsorted(self.declared, items.code), max(len(self.declared) - 1, 0))
        known = (self.declared[at] == items.code) & (items.code != 0) if len(self.declared) else \
            np.zeros(len(items.code), dtype=bool)
        for i in np.flatnonzero(change & (items.code == 0)):     # codes too long to pack
            known[i] = bytes(buf[items.code_start[i]:items.code_end[i]]) in self.declared_long
        items.reason[change & ~known] = R_UNDECLARED
        if len(self.declared):         # a vector wider than its wire (VCD pads shorter ones)
            wide = change & known & (items.kind == VECTOR) & (items.code != 0) & \
                (items.val_end - items.val_start > self.declared_width[at])
            for i in np.flatnonzero(wide):   # (rare) fine when the extra high bits are 0
                excess = bytes(buf[items.val_start[i]:items.val_end[i] - self.declared_width[at[i]]])
                if excess.strip(b"0"):
                    items.reason[i] = R_TOO_WIDE
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
                raise BadInput(self.path, self._reason(buf, items, i), line=int(items.line[i]),
                               text=self._text(buf, items, i))
            self.cap.records.skip(len(bad), [f"{self.path}:{items.line[i]}: {self._reason(buf, items, i)}"
                                             for i in bad[:5]])
            items = items.take(items.reason == 0)
        self.cap.records.read += len(items.kind)
        return items

    @staticmethod
    def _text(buf: bytes, items: _Items, i: int) -> str:
        return bytes(buf[items.start[i]:items.end[i]]).decode("utf-8", "replace")

    @staticmethod
    def _reason(buf: bytes, items: _Items, i: int) -> str:
        code = bytes(buf[items.code_start[i]:items.code_end[i]]).decode("utf-8", "replace")
        return REASONS[int(items.reason[i])].format(code=code)

    def _count(self, items: _Items) -> None:
        meta = self.cap.meta
        live = items.ctx != KW_DUMPOFF
        meta["real_changes_ignored"] += int(((items.kind == REAL) & live).sum())
        meta["string_changes_ignored"] += int(((items.kind == STRING) & live).sum())
        meta["dumpoff_changes_ignored"] += int(((items.kind != TIME) & ~live).sum())

    # -- state per timestamp
    def _rows(self, buf: bytes, items: _Items, carry: _Carry) -> pl.DataFrame | None:
        """Apply the value changes (compiled: `_vcd_scan.rows`); the rows of the timestamps
        this block closes that change something."""
        done = _scan.rows(buf, items, self._long_hits(buf, items), carry.origin if carry.origin is not None else 0,
                          self, carry.state)
        return self._frame(done)

    def _frame(self, done) -> pl.DataFrame | None:
        """A block's transitions (a `VcdRows`), None when it closes none; its x/z counts."""
        self.cap.meta["xz_control_changes"] += done.xz_control
        self.cap.meta["xz_data_changes"] += done.xz_data
        rows = pl.DataFrame(done.rows)
        return rows if rows.height else None

    def _long_hits(self, buf: bytes, items: _Items) -> np.ndarray:
        """Per item, a bit per feed whose code is too long to pack and is the item's code
        (such codes are rare: compared as bytes); empty when no feed has one."""
        long_feeds = [f for f, key in enumerate(self.feed_keys) if key == 0]
        if not long_feeds:
            return np.zeros(0, dtype=np.int64)
        hits = np.zeros(len(items.kind), dtype=np.int64)
        for i in np.flatnonzero((items.code == 0) & (items.kind >= SCALAR)):
            code = bytes(buf[items.code_start[i]:items.code_end[i]])
            for f in long_feeds:
                if code == self.feed_codes[f]:
                    hits[i] |= 1 << f
        return hits

    def _end_of_file(self, carry: _Carry) -> None:
        if carry.context in (KW_COMMENT, KW_DUMPVARS, KW_DUMPALL, KW_DUMPON, KW_DUMPOFF):
            reason = f"file ends inside {KEYWORDS[carry.context - 1]} (no $end)"
            if self.strict:
                raise TruncatedInput(self.path, reason)
            self.cap.anomalies = pl.concat([self.cap.anomalies, schema.frame(
                {"t_ns": [carry.state.pending_t or 0], "kind": ["TRUNCATED INPUT"],
                 "detail": [reason], "position": ["end of file"]}, schema.ANOMALIES)])
        # value changes but no timestamp at all: one state at time 0
        carry.state.close_untimed(self.present, self.slots)


def _feed_flags(f: Feed) -> int:
    """`_vcd_scan.rows`' flags of a feed: the DB vector, bits reversed ([0:7]), inverted."""
    reversed_bits = f.var.msb is not None and f.var.lsb is not None and f.var.msb < f.var.lsb
    return (f.bus == "DB") | (reversed_bits and f.bus == "DB") << 1 | bool(f.inverted) << 2


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
    if not header.enddefinitions:      # the value changes began inside the declarations
        if strict:
            raise BadInput(path, "no '$enddefinitions $end' before the first value change",
                           line=max(header.rest_line, header.data_line - 1, 1))
    feeds, notes = resolve(header.vars, path, mapping, active_low)
    missing_end = "the header has no '$enddefinitions $end': the declarations were taken to end at the first value change"
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
        "level": schema.level_of(signals),
        "mapping": {f.bus: f.var.path for f in feeds},
        "inverted": [f.bus for f in feeds if f.inverted],
        **{k: v for k, v in header.info.items() if v},
        "origin": None,    # the first timestamp, in file units (set while reading)
        **{k: 0 for k in COUNT_KEYS},
    }
    if header.timescale is None:
        notes.append("no $timescale in the header: 1 ns assumed")
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=notes)
    if not header.enddefinitions:
        cap.anomalies = schema.frame({"t_ns": [0], "kind": ["MALFORMED HEADER"], "detail": [missing_end],
                                      "position": [f"line {header.data_line}"]}, schema.ANOMALIES)
    reader = _Reader(path, header, feeds, cap, strict, progress, block_bytes)
    cap.chunks = reader
    return cap
