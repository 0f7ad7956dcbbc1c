"""Saleae Logic 2 digital CSV exports -> `transitions` frames.

Layout (Saleae's "Binary and CSV export formats" support article, digital CSV): a header
line `Time [s],NAME,NAME,...` (the channel names as set in Logic 2, `Channel 0` by
default), then one row per time at which at least one channel changes: the time in seconds
(floating point, relative to the capture's base time, so it may be negative before a
trigger) and each channel's state, `0`, `1`, or `X` (no data: a disabled channel or a gap).
The first row gives every channel's initial state.

The file carries no sample rate. The smallest interval between two rows bounds the sample
period from above; it is used as the period estimate (one-sample glitches are pulses that
short) and the report says the period was estimated. Channels map to bus lines by name
(`parsers/_probes.py`, with --map and --active-low); rows are read in blocks of lines
(`parsers/_lines.py`, views of the mapped file): a block of clean lines in one Rust pass
on both cores (`native/src/bus/saleae.rs`), any other decoded with polars, which names the bad line. `X` holds the channel's previous
state (counted in `x_values`).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import polars as pl

from scsitrace.errors import BadInput
from scsitrace.model import Capture
from scsitrace._native import bus as _bus
from . import _lines, _samples

ID = "saleae"
SUFFIXES = (".csv",)
TIME_HEADER = "Time [s]"


# Blocks of this many bytes: the mapped pages of the few in flight are what the reading holds
BLOCK_BYTES = 8 << 20

# A time in seconds whose nanoseconds, and the span between two of them, fit int64 (+-126 years)
MAX_ABS_S = 4e9


def sniff(head: bytes) -> bool:
    return head.lstrip(b"\xef\xbb\xbf").startswith(TIME_HEADER.encode() + b",")


def _header(path: str) -> tuple[list[str], int]:
    with open(path, "rb") as fh:
        first = next(_lines.bounded_lines(fh, path), b"")
    text = first.decode("utf-8", "replace").lstrip("\ufeff").rstrip("\r\n")
    names = text.split(",")
    if names[0] != TIME_HEADER or len(names) < 2:
        raise BadInput(path, f"expected a Logic 2 digital CSV header '{TIME_HEADER},CHANNEL,...'", line=1,
                       text=text)
    if len(set(names[1:])) != len(names) - 1:
        raise BadInput(path, "two channels have the same name", line=1, text=text)
    return names[1:], len(first)


class _Reader:
    PARTS = None        # the parts a block is scanned in (None: one a core for a large block)

    def __init__(self, path: str, names: list[str], offset: int, bus: _samples.ProbeBus, cap: Capture,
                 strict: bool, progress):
        self.path, self.names, self.offset, self.bus, self.cap = path, names, offset, bus, cap
        self.strict, self.progress = strict, progress
        self.used = sorted(set(bus.bit_of.values()))

    def _clean_block(self, buf: bytes, last_t: int | None, held: np.ndarray):
        """(t_ns, words) of a block whose every line is clean, in one compiled pass
        (native/src/bus/saleae.rs); None, with nothing changed, when a line is not."""
        if len(self.names) > _samples.MAX_BITS:
            return None
        col_bit = np.full(len(self.names), -1, dtype=np.int64)
        col_bit[self.used] = self.used
        held_bits = np.zeros(max(self.used) + 1, dtype=np.uint8)
        held_bits[self.used] = held
        done = _bus.saleae_clean_block({"text": np.frombuffer(buf, dtype=np.uint8), "ncol": len(self.names) + 1,
                                        "col_bit": col_bit, "last_t": last_t, "held": held_bits,
                                        "parts": self.PARTS})
        if done is None:
            return None
        held[:] = done.held[self.used]
        self.cap.meta["x_values"] += int(done.x_values)
        self.cap.records.read += len(done.t_ns)
        return done.t_ns, done.words, done.lines

    def _rows(self):
        """Blocks of (t_ns, channel words) of the good rows, in file order: clean blocks in
        one compiled pass, any other through polars (which says what is wrong)."""
        ncol = len(self.names) + 1
        last_t = None
        held = np.zeros(len(self.names), dtype=np.int8)        # X holds the previous state
        line_no = 2
        for buf, _ in _lines.iter_byte_blocks(self.path, start_offset=self.offset, first_line=2,
                                              block_bytes=BLOCK_BYTES, progress=self.progress, count_lines=False,
                                              views=True, strict=self.strict):
            clean = self._clean_block(buf, last_t, held[:len(self.used)])
            if clean is not None:
                t_ns, words, lines = clean
                line_no += lines
                if len(t_ns):
                    last_t = int(t_ns[-1])
                    yield t_ns, words
                continue
            buf = bytes(buf)
            block = _lines._block_frame(buf, self.path, line_no, self.strict)
            line_no += buf.count(b"\n")
            df = block.select(pl.col("line_no").alias("line"),
                              pl.col("text").str.strip_chars_end("\r\n").alias("row"))
            df = df.filter(pl.col("row").str.strip_chars() != "")
            parts = df["row"].str.split(",")
            t = parts.list.get(0, null_on_oob=True).str.strip_chars().cast(pl.Float64, strict=False)
            cols = [parts.list.get(j, null_on_oob=True).str.strip_chars() for j in self.used_cols()]
            bad = (parts.list.len() != ncol) | t.is_null() | ~t.is_finite() | (t.abs() > MAX_ABS_S)
            for c in cols:
                bad = bad | ~c.is_in(["0", "1", "X", "x"]).fill_null(False)
            bad = bad.fill_null(True)
            t_ns = (t * 1e9).round().cast(pl.Int64, strict=False).fill_null(0).to_numpy()
            bad = bad.to_numpy()
            # time must not go backwards
            t_fill = np.where(bad, np.iinfo(np.int64).min, t_ns)
            run_max = np.maximum.accumulate(np.concatenate(([last_t if last_t is not None else
                                                             np.iinfo(np.int64).min], t_fill)))[:-1]
            back = ~bad & (t_ns < run_max)
            bad = bad | back
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                reason = "time goes backwards" if back[i] else \
                    f"expected a time in seconds and {len(self.names)} states 0, 1 or X"
                if self.strict:
                    raise BadInput(self.path, reason, line=int(df["line"][i]), text=df["row"][i])
                lines_bad = df["line"].to_numpy()[bad]
                self.cap.records.skip(int(bad.sum()), [f"{self.path}:{n}: {reason}" for n in lines_bad[:5]])
            keep = ~bad
            if not keep.any():
                continue
            self.cap.records.read += int(keep.sum())
            states = np.zeros((int(keep.sum()), len(self.used)), dtype=np.int8)
            for k, c in enumerate(cols):
                v = c.to_numpy()[keep]
                x = (v == "X") | (v == "x")
                self.cap.meta["x_values"] += int(x.sum())
                s = np.where(x, -1, (v == "1").astype(np.int8))
                # forward-fill X from the previous state of the channel
                idx = np.where(s >= 0, np.arange(len(s)), -1)
                np.maximum.accumulate(idx, out=idx)
                prev_state = held[k]
                s = np.where(idx >= 0, s[np.maximum(idx, 0)], prev_state)
                held[k] = s[-1]
                states[:, k] = s
            words = np.zeros(len(states), dtype=np.uint64)
            for k, bit in enumerate(self.used):
                words |= states[:, k].astype(np.uint64) << np.uint64(bit)
            tk = t_ns[keep]
            last_t = int(tk[-1])
            yield tk, words

    def used_cols(self):
        return [bit + 1 for bit in self.used]

    def __call__(self):
        self.cap.records.read = self.cap.records.skipped = 0
        self.cap.meta["x_values"] = 0
        step = None
        origin = None
        # first pass: the smallest interval between rows (the sample period estimate); the
        # second decodes. Nothing is kept between blocks.
        for tk, _ in self._rows():
            if origin is None:
                origin = int(tk[0])
            d = np.diff(tk)
            d = d[d > 0]
            if len(d):
                step = int(d.min()) if step is None else min(step, int(d.min()))
        self.cap.records.read = self.cap.records.skipped = 0
        self.cap.records.examples.clear()
        self.cap.meta["x_values"] = 0
        if origin is None:
            return
        period = Fraction(step) if step else Fraction(1)
        self.cap.meta["sample_period_ns"] = float(period) if step else None
        self.cap.meta["origin_s"] = origin / 1e9
        self.bus.restart()
        end = None             # the file's last row, when only unmapped channels change in it
        for tk, words in self._rows():
            t = (tk - origin).astype(np.int64)
            end = int(t[-1])
            for at, _, lines, db, dbp in self.bus.rows(words, pos=t // int(period)):
                yield self.bus.frame(t[at], lines, db, dbp)
                if at[-1] == len(t) - 1:
                    end = None
        if end is not None and self.bus.last_row is not None:    # the trace lasts to the last row
            yield self.bus.frame(np.array([end]), *(np.array([v], dtype=d) for v, d in
                                                    zip(self.bus.last_row, (np.uint16, np.uint8, np.uint8))))
        self.cap.meta.update(self.bus.sampling_meta(period if step else None, period_known=False))


def parse(path: str, *, strict: bool = True, progress=None, mapping: dict | None = None,
          active_low: list[str] | None = None, initiator: int = 7, **_opts) -> Capture:
    """Read a Logic 2 digital CSV export. Raises MissingSignal before decoding when BSY SEL
    MSG C/D I/O cannot be found among the channel names (use --map)."""
    path = str(path)
    names, offset = _header(path)
    bus = _samples.ProbeBus(path, dict(enumerate(names)), mapping=mapping, active_low=active_low)
    meta = {**bus.meta(), "initiator": initiator, "tick_ns": 1, "sample_period_ns": None,
            "channels": names}
    notes = list(bus.notes)
    cap = Capture(layer="bus", path=path, format=ID, meta=meta, notes=notes)
    cap.chunks = _Reader(path, names, offset, bus, cap, strict, progress)
    return cap
