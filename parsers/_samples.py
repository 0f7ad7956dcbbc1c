"""Sampled logic-analyzer captures -> `transitions` frames: what the sigrok (`.sr`), DSView
(`.dsl`) and Saleae CSV readers share.

A capture is a sequence of sample words (bit k = probe k). Probes are mapped to bus lines by
name (`parsers/_probes.py`, as for VCD, with --map and --active-low). The words are reduced
to the samples where a mapped probe changes by one compiled pass (`_scan_changes`: no
Python per sample; unmapped probes never make a row); the bus lines of those rows are then
extracted in bulk with numpy. One-sample pulses (glitches) and REQ/ACK edges that fall in
the same sample are counted on the rows, so the report can say what the sample period
could not resolve (`scsitrace/sampling.py`).
"""
from __future__ import annotations

import re
from fractions import Fraction
from typing import Iterable, Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace._jit import no_refcount
from scsitrace.errors import BadInput
from ._probes import DB_BITS, Var, resolve
from .ancot import level_of

OUT_ROWS = 1 << 20          # change rows handed over at a time (bounded memory)
MAX_GLITCH_EXAMPLES = 5


def probe_signals(probes: dict[int, str]) -> list[Var]:
    """Capture signals for probes {bit: name} (one-bit wires named as the user named them)."""
    return [Var("wire", 1, str(bit), name, name, None, None, 0) for bit, name in sorted(probes.items())]


_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKMG]?)Hz\s*$")
_RATE_UNIT = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9}


def parse_samplerate(text: str) -> Fraction | None:
    """`1 GHz`, `100 MHz`, `2.5 MHz`, `500 kHz`, `10 Hz` (sigrok's and DSView's spelling) or a
    plain number of Hz -> samples per second; None when unreadable."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return Fraction(int(text)) if int(text) > 0 else None
    m = _RATE_RE.match(text)
    if not m:
        return None
    rate = Fraction(m.group(1)) * _RATE_UNIT[m.group(2)]
    return rate if rate > 0 else None


def rate_text(rate: Fraction) -> str:
    for unit, mult in (("GHz", 10**9), ("MHz", 10**6), ("kHz", 10**3)):
        if rate >= mult:
            return f"{float(rate / mult):g} {unit}"
    return f"{float(rate):g} Hz"


@no_refcount
def _scan_changes(words, mask, last, pos, out_idx, out_val):
    """Samples of `words` from pos[1] on whose masked value differs from last[0] (the
    previous sample's; pos[0] = 0 before the first sample of the capture, which always
    makes a row): their index and value go to out_idx/out_val until those are full.
    Returns the rows written; pos[1] is where to resume (len(words) when done)."""
    n = len(words)
    cap = len(out_idx)
    prev = last[0]
    i = pos[1]
    k = 0
    if pos[0] == 0 and i < n and cap > 0:
        prev = words[i] & mask
        out_idx[0] = i
        out_val[0] = prev
        k = 1
        i += 1
        pos[0] = 1
    while i < n:
        v = words[i] & mask
        if v != prev:
            if k == cap:
                break
            out_idx[k] = i
            out_val[k] = v
            k += 1
            prev = v
        i += 1
    last[0] = prev
    pos[1] = i
    return k


def widen(raw: np.ndarray, unitsize: int) -> np.ndarray:
    """Little-endian sample words of `unitsize` bytes -> an unsigned array (views for 1, 2,
    4, 8 bytes; 3, 5, 6, 7 are padded)."""
    if unitsize in (1, 2, 4, 8):
        return raw.view(f"<u{unitsize}")
    width = 4 if unitsize < 4 else 8
    out = np.zeros((len(raw) // unitsize, width), dtype=np.uint8)
    out[:, :unitsize] = raw.reshape(-1, unitsize)
    return out.reshape(-1).view(f"<u{width}")


class ProbeBus:
    """The mapping of probes to bus lines, and the state carried along a stream of rows."""

    def __init__(self, path: str, probes: dict[int, str], *, mapping=None, active_low=None):
        self.path = path
        self.feeds, self.notes = resolve(probe_signals(probes), path, mapping, active_low)
        self.bit_of = {f.bus: int(f.var.code) for f in self.feeds}
        self.mask = 0
        for bit in self.bit_of.values():
            self.mask |= 1 << bit
        buses = [f.bus for f in self.feeds]
        self.signals = [s for s in schema.SIGNALS if s in buses]
        self.has_db = all(b in buses for b in DB_BITS)
        if self.has_db:
            self.signals.append("DB")
            if "DBP" in buses:
                self.signals.append("DBP")
        self.inverted = {f.bus for f in self.feeds if f.inverted}
        self.last_val: int | None = None       # value of the last row
        self.last_flip = {bus: None for bus in self.bit_of}   # sample of each line's last edge
        self.glitches = {bus: 0 for bus in self.bit_of}
        self.shortest = {bus: None for bus in self.bit_of}    # shortest pulse, in samples
        self.glitch_examples: list[tuple[int, str]] = []
        self.req_ack_same_sample = 0

    def meta(self) -> dict:
        return {"signals": list(self.signals), "level": level_of(self.signals),
                "mapping": {f.bus: f.var.name for f in self.feeds},
                "probes": {f.bus: int(f.var.code) for f in self.feeds},
                "inverted": [f.bus for f in self.feeds if f.inverted]}

    def _bit(self, vals: np.ndarray, bus: str) -> np.ndarray:
        bit = ((vals >> np.uint64(self.bit_of[bus])) & np.uint64(1)).astype(np.uint16)
        return bit ^ 1 if bus in self.inverted else bit

    def frame(self, idx: np.ndarray, vals: np.ndarray, t_ns: np.ndarray) -> pl.DataFrame:
        """Rows at sample numbers `idx` (capture-wide) with probe words `vals` -> transitions."""
        vals = vals.astype(np.uint64, copy=False)
        self._count(idx, vals)
        lines = np.zeros(len(vals), dtype=np.uint16)
        for bus in self.signals:
            if bus in schema.SIGNAL_BIT:
                lines |= self._bit(vals, bus) << schema.SIGNAL_BIT[bus]
        cols = {"t_ns": t_ns.astype(np.int64, copy=False), "lines": lines}
        if self.has_db:
            db = np.zeros(len(vals), dtype=np.uint8)
            for j, bus in enumerate(DB_BITS):
                db |= (self._bit(vals, bus) << j).astype(np.uint8)
            cols["db"] = db
            cols["dbp"] = self._bit(vals, "DBP").astype(bool) if "DBP" in self.bit_of else \
                pl.Series("dbp", [None] * len(vals), dtype=pl.Boolean)
        else:
            cols["db"] = pl.Series("db", [None] * len(vals), dtype=pl.UInt8)
            cols["dbp"] = pl.Series("dbp", [None] * len(vals), dtype=pl.Boolean)
        return pl.DataFrame(cols, schema=schema.TRANSITIONS)

    def _count(self, idx: np.ndarray, vals: np.ndarray) -> None:
        """One-sample pulses and their first examples; shortest pulse per line; REQ and ACK
        edges in the same sample."""
        if not len(vals):
            return
        prev = np.empty_like(vals)
        prev[0] = vals[0] if self.last_val is None else self.last_val
        prev[1:] = vals[:-1]
        flips = vals ^ prev
        self.last_val = int(vals[-1])
        one = np.uint64(1)
        for bus, bit in self.bit_of.items():
            pos = idx[((flips >> np.uint64(bit)) & one) == one]
            if not len(pos):
                continue
            last = self.last_flip[bus]
            edges = pos if last is None else np.concatenate(([last], pos))
            self.last_flip[bus] = int(pos[-1])
            if len(edges) < 2:
                continue
            width = np.diff(edges)
            shortest = int(width.min())
            if self.shortest[bus] is None or shortest < self.shortest[bus]:
                self.shortest[bus] = shortest
            glitch = np.flatnonzero(width == 1)
            self.glitches[bus] += len(glitch)
            if len(self.glitch_examples) < MAX_GLITCH_EXAMPLES or \
                    (len(glitch) and edges[glitch[0]] < self.glitch_examples[-1][0]):
                # the earliest few over all lines: chunks come in time order
                self.glitch_examples = sorted(self.glitch_examples + [
                    (int(edges[g]), bus) for g in glitch[:MAX_GLITCH_EXAMPLES]])[:MAX_GLITCH_EXAMPLES]
        if "REQ" in self.bit_of and "ACK" in self.bit_of:
            both = (one << np.uint64(self.bit_of["REQ"])) | (one << np.uint64(self.bit_of["ACK"]))
            self.req_ack_same_sample += int(np.count_nonzero((flips & both) == both))

    def sampling_meta(self, period: Fraction | None, period_known: bool = True) -> dict:
        """What the sample period could not resolve: for scsitrace/sampling.py."""
        ns = (lambda s: float(s * period)) if period is not None else (lambda s: None)
        return {
            "sample_period_ns": float(period) if period is not None else None,
            "sample_period_known": period_known,
            "glitches": {b: n for b, n in self.glitches.items() if n},
            "glitch_examples": [{"line": bus, "sample": s, "t_ns": ns(s)} for s, bus in self.glitch_examples],
            "shortest_pulse_samples": {b: n for b, n in self.shortest.items() if n is not None},
            "req_ack_same_sample": self.req_ack_same_sample,
        }


class SampleTimes:
    """Sample number -> ns from the capture start, exact for any rate (floor)."""

    def __init__(self, rate: Fraction):
        self.period = Fraction(10**9) / rate
        self.num, self.den = self.period.numerator, self.period.denominator

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        idx = idx.astype(np.int64, copy=False)
        if self.den == 1:
            return idx * self.num
        return (idx // self.den) * self.num + (idx % self.den) * self.num // self.den


def stream_words(bus: ProbeBus, blocks: Iterable[np.ndarray], times: SampleTimes,
                 counter: list[int]) -> Iterator[pl.DataFrame]:
    """Blocks of sample words in order -> transitions frames; a last row at the end of the
    capture (the sample after the last one) gives the trace its full length. counter[0]
    counts the samples."""
    last = np.zeros(1, dtype=np.uint64)
    pos = np.zeros(2, dtype=np.int64)
    out_idx = np.empty(OUT_ROWS, dtype=np.int64)
    out_val = np.empty(OUT_ROWS, dtype=np.uint64)
    mask = np.uint64(bus.mask)
    base = 0
    last_row = -1
    for words in blocks:
        pos[1] = 0
        while pos[1] < len(words):
            k = _scan_changes(words, mask, last, pos, out_idx, out_val)
            if k:
                idx = out_idx[:k] + base
                last_row = int(idx[-1])
                yield bus.frame(idx, out_val[:k].copy(), times(idx))
        base += len(words)
        counter[0] = base
    if base and last_row < base:
        idx = np.array([base], dtype=np.int64)
        yield bus.frame(idx, last.copy(), times(idx))


def check_rate(path: str, text: str | None, where: str) -> Fraction:
    rate = parse_samplerate(text) if text else None
    if rate is None:
        raise BadInput(path, f"{where}: no readable samplerate (expected e.g. '100 MHz')",
                       text=text if text else None)
    return rate

