"""Sampled logic-analyzer captures -> `transitions` frames: what the sigrok (`.sr`), DSView
(`.dsl`) and Saleae CSV readers share.

A capture is a sequence of sample words (bit k = probe k). Probes are mapped to bus lines by
name (`parsers/_probes.py`, as for VCD, with --map and --active-low). The words are reduced
to the samples where a mapped probe changes by one compiled pass (`reduce_block`, `ProbeBus.rows`; Rust: no
Python per sample; unmapped probes never make a row); the bus lines of those rows are then
extracted in bulk with numpy. One-sample pulses (glitches) and REQ/ACK edges that fall in
the same sample are counted on the rows, so the report can say what the sample period
could not resolve (`scsitrace/sampling.py`).
"""
from __future__ import annotations

import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable, Iterable, Iterator

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace._native import bus as _bus
from scsitrace.errors import BadInput
from scsitrace.streams import prefetched
from ._probes import DB_BITS, Var, resolve

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


MAX_BITS = 64


def widen(raw: np.ndarray, unitsize: int) -> np.ndarray:
    """Little-endian sample words of `unitsize` bytes -> an unsigned array (views for 1, 2,
    4, 8 bytes; 3, 5, 6, 7 are padded)."""
    if unitsize in (1, 2, 4, 8):
        return raw.view(f"<u{unitsize}")
    width = 4 if unitsize < 4 else 8
    out = np.zeros((len(raw) // unitsize, width), dtype=np.uint8)
    out[:, :unitsize] = raw.reshape(-1, unitsize)
    return out.reshape(-1).view(f"<u{width}")


def _nulls(name: str, dtype, n: int) -> pl.Series:
    return pl.Series(name, [None], dtype=dtype).new_from_index(0, n)


class ProbeBus:
    """The mapping of probes to bus lines, the compiled reduction's tables, and the state it
    carries along a stream of sample words (values, edges, glitch counts)."""

    def __init__(self, path: str, probes: dict[int, str], *, mapping=None, active_low=None):
        self.path = path
        self.feeds, self.notes = resolve(probe_signals(probes), path, mapping, active_low)
        self.bit_of = {f.bus: int(f.var.code) for f in self.feeds}
        buses = [f.bus for f in self.feeds]
        self.signals = [s for s in schema.SIGNALS if s in buses]
        self.has_db = all(b in buses for b in DB_BITS)
        self.has_dbp = self.has_db and "DBP" in buses
        if self.has_db:
            self.signals += ["DB"] + (["DBP"] if self.has_dbp else [])
        self.inverted = {f.bus for f in self.feeds if f.inverted}
        self._tables()
        self.restart()

    def restart(self) -> None:
        """Forget the stream read so far: each read of the capture starts here (the analysis,
        attribution and annotate each read it), so its counts are never added twice."""
        self.stream = _bus.SampleStream(OUT_ROWS)      # the serial pass's carried state (rows)
        self.last_row: tuple[int, int, int] | None = None      # lines, db, dbp of the last row
        # blocks reduced on their own (reduce_block) and stitched in order (stitch)
        self.block_glitches = np.zeros(MAX_BITS, dtype=np.int64)
        self.block_same = 0
        self.example_list: list[tuple[int, int]] = []         # (sample, bit), the first few
        self._prev: tuple[int, int, int] | None = None          # last word, its row's flips, row sample

    def _tables(self) -> None:
        """Per byte of a sample word, 256-entry tables of its bits' contribution to the lines,
        DB and DBP; the inversions of active-low lines as XOR masks."""
        lut = np.zeros((8, 256), dtype=np.uint32)
        values = np.arange(256)
        inv = 0
        for bus, bit in self.bit_of.items():
            on = ((values >> (bit % 8)) & 1).astype(bool)
            if bus in schema.SIGNAL_BIT:
                at = schema.SIGNAL_BIT[bus]
            elif bus in DB_BITS:
                at = 16 + DB_BITS.index(bus)
            else:                                   # DBP
                at = 24
            lut[bit // 8, on] |= np.uint32(1 << at)
            inv |= (1 << at) if bus in self.inverted else 0
        mapped = list(self.bit_of.values())      # resolve() has dropped an incomplete data bus
        self.mask = np.uint64(sum(1 << b for b in mapped))
        self.used_bytes = np.array(sorted({b // 8 for b in mapped}), dtype=np.uint64)
        self.bus_of_bit = {b: bus for bus, b in self.bit_of.items()}
        both = 0
        if "REQ" in self.bit_of and "ACK" in self.bit_of:
            both = (1 << self.bit_of["REQ"]) | (1 << self.bit_of["ACK"])
        self.both = np.uint64(both)
        self.lut, self.inv = lut, np.uint32(inv)

    def meta(self) -> dict:
        return {"signals": list(self.signals), "level": schema.level_of(self.signals),
                "mapping": {f.bus: f.var.name for f in self.feeds},
                "probes": {f.bus: int(f.var.code) for f in self.feeds},
                "inverted": [f.bus for f in self.feeds if f.inverted]}

    def rows(self, words: np.ndarray, base: int = 0, pos: np.ndarray | None = None):
        """Reduce one block of sample words (in capture order, after the previous block) in
        one compiled pass (native/src/bus/samples.rs `SampleStream`): 32 samples compared
        at once and skipped when none changes; each kept row's bus lines, DB and DBP from one
        lookup table per byte of the word, then the active-low inversions; a probe that
        changes in two consecutive samples made a pulse one sample long (counted per probe,
        the first few kept); samples where REQ and ACK both change are counted. Yields
        (positions in `words`, sample numbers, lines, db, dbp) of its rows, in pieces of at
        most OUT_ROWS; a sample's number is pos[i] when `pos` is given, else base + i."""
        if words.dtype.byteorder == ">" or not words.flags.c_contiguous:
            words = np.ascontiguousarray(words, dtype=words.dtype.newbyteorder("="))
        if pos is not None:
            pos = np.ascontiguousarray(pos, dtype=np.int64)
        self.stream.start_block()
        while self.stream.pending(len(words)):
            r = self.stream.reduce(words, self, int(base), pos)
            if len(r.at):
                self.last_row = (int(r.lines[-1]), int(r.db[-1]), int(r.dbp[-1]))
                yield r.at, (pos[r.at] if pos is not None else r.at + base), r.lines, r.db, r.dbp

    def frame(self, t_ns: np.ndarray, lines: np.ndarray, db: np.ndarray, dbp: np.ndarray) -> pl.DataFrame:
        """One transitions frame, built eagerly (Series from the arrays; a lazy select per
        block cost ~2 ms of the main thread at 155 M transitions)."""
        n = len(lines)
        return pl.DataFrame([
            pl.Series("t_ns", t_ns.astype(np.int64, copy=False)),
            pl.Series("lines", lines),
            pl.Series("db", db) if self.has_db else _nulls("db", pl.UInt8, n),
            pl.Series("dbp", dbp.view(bool)) if self.has_dbp else _nulls("dbp", pl.Boolean, n),
        ])

    def sampling_meta(self, period: Fraction | None, period_known: bool = True) -> dict:
        """What the sample period could not resolve: for scsitrace/sampling.py."""
        ns = (lambda s: float(s * period)) if period is not None else (lambda s: None)
        serial, first = self.stream.glitches, self.stream.examples
        examples = sorted([(int(first[b, j]), self.bus_of_bit[b]) for b in self.bus_of_bit
                           for j in range(min(int(serial[b]), first.shape[1]))]
                          + [(at, self.bus_of_bit[b]) for at, b in self.example_list])
        glitches = serial + self.block_glitches
        return {
            "sample_period_ns": float(period) if period is not None else None,
            "sample_period_known": period_known,
            "glitches": {self.bus_of_bit[b]: int(glitches[b]) for b in sorted(self.bus_of_bit) if glitches[b]},
            "glitch_examples": [{"line": bus, "sample": s, "t_ns": ns(s)}
                                for s, bus in examples[:MAX_GLITCH_EXAMPLES]],
            "req_ack_same_sample": self.stream.same + self.block_same,
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


@dataclass
class Block:
    """One block of samples reduced on its own (`reduce_block`), to be stitched in order."""

    n: int                   # samples
    rows: tuple              # (positions, lines, db, dbp) of its rows; row 0 is always sample 0
    first_v: int             # masked words: the first and the last sample
    last_v: int
    f1: int                  # probes changed between samples 0 and 1
    last_f: int              # probes changed at its last row (0 when that row is sample 0)
    glitches: np.ndarray
    examples: np.ndarray     # block-local sample numbers
    same: int
    t_local: np.ndarray | None = None   # positions x the sample period, when it is whole ns


def reduce_block(bus: ProbeBus, words: np.ndarray, period_ns: int | None = None) -> Block:
    """Reduce a block as if it began the capture (its first sample is a row): blocks are
    independent, so worker threads reduce several at once (one compiled pass over the words
    that releases the GIL: native/src/bus/samples.rs `samples_block`). With a whole-ns
    `period_ns`, the rows' times from the block start are computed here too (off the thread
    that stitches)."""
    if not len(words):
        return Block(0, (), 0, 0, 0, 0, np.zeros(MAX_BITS, dtype=np.int64), np.zeros((MAX_BITS, 1), dtype=np.int64), 0)
    if words.dtype.byteorder == ">" or not words.flags.c_contiguous:
        words = np.ascontiguousarray(words, dtype=words.dtype.newbyteorder("="))
    p = _bus.samples_block(words, bus, period_ns)
    first_v = int(words[0] & bus.mask)
    f1 = int((words[1] ^ words[0]) & bus.mask) if len(words) > 1 else 0
    return Block(len(words), (p.at, p.lines, p.db, p.dbp), first_v, int(p.last_v), f1, int(p.last_f), p.glitches,
                 p.examples, int(p.same), p.t_local)


def stitch(bus: ProbeBus, block: Block, base: int) -> tuple:
    """Join a block to the blocks before it: drop its first row when nothing changed there,
    and count what the block could not see on its own (edges at its first sample: REQ/ACK in
    one sample, one-sample pulses across the edge). Returns the block's rows to keep."""
    at, lines, db, dbp = block.rows
    ex = block.examples
    for b in np.flatnonzero(block.glitches):
        bus.example_list += [(base + int(ex[b, j]), int(b)) for j in range(min(int(block.glitches[b]), ex.shape[1]))]
    bus.block_glitches += block.glitches
    bus.block_same += block.same
    keep_from = 0
    f0 = 0
    if bus._prev is not None:
        prev_v, prev_f, prev_s = bus._prev
        f0 = block.first_v ^ prev_v
        if f0 == 0:
            keep_from = 1
        else:
            both = int(bus.both)
            bus.block_same += int(both != 0 and (f0 & both) == both)
            for g, at_s in ((f0 & prev_f if prev_s == base - 1 else 0, base - 1), (block.f1 & f0, base)):
                while g:
                    low = g & -g
                    g ^= low
                    bit = low.bit_length() - 1
                    bus.block_glitches[bit] += 1
                    bus.example_list.append((at_s, bit))
    # the first few by sample, then line name: what sampling_meta keeps of the serial pass's
    bus.example_list = sorted(bus.example_list, key=lambda e: (e[0], bus.bus_of_bit[e[1]]))[:MAX_GLITCH_EXAMPLES]
    kept = len(at) - keep_from
    if kept:
        last_f = block.last_f if len(at) > 1 else f0
        bus._prev = (block.last_v, last_f, base + int(at[-1]))
        bus.last_row = (int(lines[-1]), int(db[-1]), int(dbp[-1]))
    else:
        bus._prev = (block.last_v, bus._prev[1], bus._prev[2])
    return at[keep_from:], lines[keep_from:], db[keep_from:], dbp[keep_from:]


WORKERS = max(1, min(4, os.cpu_count() or 1))


class Gap:
    """In the blocks of stream_words: `n` samples that are missing (a lenient read of an
    archive without one of its members): time advances, nothing is decoded."""

    def __init__(self, n: int):
        self.n = int(n)


def gap(n: int) -> Gap:
    return Gap(n)


def stream_words(bus: ProbeBus, blocks: Iterable[Callable[[], np.ndarray]], times: SampleTimes,
                 counter: list[int]) -> Iterator[pl.DataFrame]:
    """Blocks of sample words (each a function returning them: reading and inflating run in
    the worker too) in capture order -> transitions frames. Worker threads reduce a few
    blocks ahead (bounded memory); the blocks are stitched in order here. A last row at the
    end of the capture (the sample after the last one) gives the trace its full length.
    counter[0] counts the samples."""
    base = 0
    last_sample = -1
    ahead: deque = deque()
    blocks = iter(blocks)
    period_ns = times.num if times.den == 1 else None
    with ThreadPoolExecutor(WORKERS) as pool:
        def submit() -> None:
            make = next(blocks, None)
            if isinstance(make, Gap):
                ahead.append(make)
            elif make is not None:
                ahead.append(pool.submit(lambda: reduce_block(bus, make(), period_ns)))
        for _ in range(WORKERS + 1):
            submit()
        while ahead:
            block = ahead.popleft()
            submit()
            if isinstance(block, Gap):      # samples lost (a missing archive member): their time kept
                base += block.n
                continue
            block = block.result()
            if block.n == 0:
                continue
            at, lines, db, dbp = stitch(bus, block, base)
            if len(at):
                last_sample = base + int(at[-1])
                if block.t_local is not None:
                    t_ns = block.t_local[len(block.rows[0]) - len(at):]
                    t_ns += base * period_ns
                else:
                    t_ns = times(at + base)
                yield bus.frame(t_ns, lines, db, dbp)
            base += block.n
            counter[0] = base
    if base and last_sample < base and bus.last_row is not None:
        lines, db, dbp = bus.last_row
        yield bus.frame(times(np.array([base], dtype=np.int64)), np.array([lines], dtype=np.uint16),
                        np.array([db], dtype=np.uint8), np.array([dbp], dtype=np.uint8))


# Sample rates a capture may claim: below 1 Hz a sample period overflows int64 nanoseconds within
# a few billion samples (and no logic analyzer samples that slowly); above 1 THz none exists.
MIN_RATE_HZ, MAX_RATE_HZ = 1, 10**12


def check_rate(path: str, text: str | None, where: str) -> Fraction:
    rate = parse_samplerate(text) if text else None
    if rate is None:
        raise BadInput(path, f"{where}: no readable samplerate (expected e.g. '100 MHz')",
                       text=text[:80] if text else None)
    if not MIN_RATE_HZ <= rate <= MAX_RATE_HZ:
        raise BadInput(path, f"{where}: samplerate {text.strip()[:40]!r} outside {MIN_RATE_HZ} Hz .. 1 THz")
    return rate


class ArchiveReader:
    """Capture.chunks of a zipped logic capture (sigrok .sr, DSView .dsl): its transitions,
    streamed block by block; a format's reader supplies `_blocks(fd)`, one function per
    block returning that block's sample words (run in worker threads)."""

    def __init__(self, path: str, md: dict, bus: ProbeBus, cap, strict: bool, progress):
        self.path, self.md, self.bus, self.cap, self.strict, self.progress = path, md, bus, cap, strict, progress
        self.samples = [0]

    def _blocks(self, fd: int):
        raise NotImplementedError

    def __call__(self):
        times = SampleTimes(self.md["rate"])
        self.bus.restart()
        fd = os.open(self.path, os.O_RDONLY)
        try:       # stitched in a thread of its own too: the caller's thread is the analysis's
            yield from prefetched(stream_words(self.bus, self._blocks(fd), times, self.samples))
        finally:
            os.close(fd)
        self.cap.records.read = self.samples[0]
        self.cap.meta["samples"] = self.samples[0]
        self.cap.meta.update(self.bus.sampling_meta(times.period))
