"""What a command layer accumulates while its capture streams through it, batch by batch of
finished commands (rows of the `ios` frame), so that memory follows the commands in flight,
not the capture's size. These are the rules; the scsilog engine (kernel-log events and
SG_IO commands) and the streamed usb Bulk-Only path add up by them in Rust
(native/src/commands.rs), read back through `Tables.of`, `Thinned` and `kept_segments`.
`Tables.add` serves the usb whole path (one batch); `Tiler` and `Kept` no layer runs any more:
they are the reference the engines are tested against (tests/test_scsilog_engine.py,
tests/test_sgio_engine.py):

- `Tables`: the command tables (SRT per opcode, its histogram, pairing, per device), the
  latency tables, counts and sums. Times go to the shared streaming statistic
  (`scsitrace._native.stat.Samples`: exact up to 2 M samples, then percentiles at most 0.1 %
  low; `inexact` names the records past that).
- `Tiler`: the stage segments (SERVICE, or the usb stages) and IDLE of each device
  (`scsitrace.tiling`), tiled as soon as no command still in flight can start before them,
  each device's covered time carried.
- `Kept`: at most `scsitrace.model.KEEP_IOS` rows of a growing frame for the reports, evenly
  thinned over the whole capture (every 2^k-th row).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import model, stats, tiling
from ._native import stat as _stat
from .command_tables import COMMANDS, DEVICES, SRT, SRT_HISTOGRAM, _device_key
from .stats import HIST_EDGES_NS, LATENCY_SCHEMA, HISTOGRAM_SCHEMA

EDGES = [*HIST_EDGES_NS, None]


class Tables:
    """The tables of `command_tables.command_tables` and `stats.latency_tables`, and the
    SG_IO driver's SRT (`driver`), added up batch by batch."""

    def __init__(self, driver: bool = False):
        self.reasons: dict = {}
        self.devices: dict = {}     # device -> [commands, paired, data_bytes, sized, response sum, responses]
        self.srt: dict = {}         # opcode -> [Samples, name, io of the name]
        self.driver = {} if driver else None
        self.latency = _stat.Samples()
        self.paired = self.data_bytes = self.timeouts_n = 0
        self.sized = False
        self.timeouts: list[pl.DataFrame] = []

    @classmethod
    def of(cls, **sums) -> "Tables":
        """Tables added up elsewhere (the streamed usb path's compiled command stage): the
        attributes by name (reasons, devices, srt, latency, paired, data_bytes, sized)."""
        t = cls()
        for name, value in sums.items():
            if not hasattr(t, name):
                raise AttributeError(name)
            setattr(t, name, value)
        return t

    def add(self, ios: pl.DataFrame) -> None:
        if not ios.height:
            return
        for reason, n in ios.group_by("reason").len().iter_rows():
            self.reasons[reason] = self.reasons.get(reason, 0) + n
        paired = pl.col("paired")
        agg = ios.group_by("device").agg(
            pl.len(), paired.sum().alias("paired"), pl.col("data_bytes").sum().alias("bytes"),
            pl.col("data_bytes").is_not_null().any().alias("sized"),
            pl.col("response_ns").filter(paired).sum().alias("rsum"),
            pl.col("response_ns").filter(paired).count().alias("rn"))
        for dev, n, p, b, sized, rsum, rn in agg.iter_rows():
            acc = self.devices.setdefault(dev, [0, 0, 0, False, 0, 0])
            acc[0] += n
            acc[1] += p
            acc[2] += b or 0
            acc[3] |= sized
            acc[4] += rsum or 0
            acc[5] += rn
        self.paired += int(ios["paired"].sum())
        if ios["data_bytes"].is_not_null().any():
            self.sized = True
            self.data_bytes += int(ios["data_bytes"].sum())
        measured = ios.filter(paired & pl.col("response_ns").is_not_null())
        self.latency.add(measured["response_ns"].to_numpy())
        _by_opcode(self.srt, measured)
        if self.driver is not None:
            _by_opcode(self.driver, ios.filter(paired & pl.col("driver_ns").is_not_null()), "driver_ns")
        bad = ios.filter(pl.col("reason").str.starts_with("timed out").fill_null(False))
        if bad.height:
            self.timeouts.append(bad.select(
                pl.col("start_ns").alias("t_ns"), pl.lit("TIMEOUT").alias("kind"),
                pl.format("{} on {}", "command", "device").alias("detail"),
                pl.lit(None, dtype=pl.Utf8).alias("position"), "io"))

    def tables(self, elapsed_ns: int) -> dict[str, pl.DataFrame]:
        latency = self.latency.record()
        out = {"srt": _srt(self.srt), "commands": self._pairing(), "srt_histogram": _histogram(self.srt),
               "devices": self._devices(elapsed_ns),
               "latency": pl.DataFrame([{"name": "response", **_stat_of(latency)}], schema=LATENCY_SCHEMA),
               "latency_histogram": pl.DataFrame(
                   [("response", e, c) for e, c in zip(EDGES, self.latency.histogram()) if c],
                   schema=HISTOGRAM_SCHEMA, orient="row")}
        if self.driver is not None:
            out["srt_driver"] = _srt(self.driver)
        return out

    def timeout_anomalies(self) -> list[pl.DataFrame]:
        """TIMEOUT anomalies of the commands that timed out, in command order."""
        return [pl.concat(self.timeouts).sort("io").drop("io")] if self.timeouts else []

    def inexact(self) -> list[str]:
        """The records whose percentiles came from the histogram (over 2 M samples)."""
        names = ["latency"] if not self.latency.record().exact else []
        for label, by in (("srt", self.srt), ("srt_driver", self.driver or {})):
            names += [f"{label} opcode 0x{op:02x}" for op, (s, _, _) in sorted(by.items()) if not s.record().exact]
        return names

    def _pairing(self) -> pl.DataFrame:
        if not self.reasons:
            return COMMANDS.empty()
        return pl.DataFrame({"reason": list(self.reasons), "commands": list(self.reasons.values())},
                            schema=COMMANDS.schema).sort("reason", nulls_last=False)

    def _devices(self, elapsed_ns: int) -> pl.DataFrame:
        if not self.devices:
            return DEVICES.empty()
        secs = elapsed_ns / 1e9 if elapsed_ns else 0.0
        rows = []
        for dev in sorted(self.devices, key=_device_key):
            n, p, b, sized, rsum, rn = self.devices[dev]
            data = int(b) if sized else None
            rows.append({"device": dev, "commands": n, "paired": p, "data_bytes": data,
                         "bandwidth_mib_s": data / float(1 << 20) / secs if secs and data is not None else None,
                         "iops": p / secs if secs else None, "avg_response_ns": rsum / rn if rn else None})
        return pl.DataFrame(rows, schema=DEVICES.schema)


def _by_opcode(acc: dict, done: pl.DataFrame, col: str = "response_ns") -> None:
    """Times of measured commands with an opcode into one Samples per opcode; the name of
    an opcode is its first command's (lowest io)."""
    done = done.filter(pl.col("opcode").is_not_null())
    if not done.height:
        return
    for (op,), part in done.group_by("opcode"):
        entry = acc.get(op)
        first = part.row(int(part["io"].arg_min()), named=True)
        if entry is None:
            entry = acc[op] = [_stat.Samples(), first["command"], first["io"]]
        elif first["io"] < entry[2]:
            entry[1], entry[2] = first["command"], first["io"]
        entry[0].add(part[col].cast(pl.Int64).to_numpy())


def _stat_of(record) -> dict:
    return stats.stat_row(record)


def _srt(acc: dict) -> pl.DataFrame:
    rows = [{"opcode": int(op), "name": name, **_stat_of(s.record())} for op, (s, name, _) in sorted(acc.items())]
    return pl.DataFrame(rows, schema=SRT.schema) if rows else SRT.empty()


def _histogram(acc: dict) -> pl.DataFrame:
    rows = [(int(op), name, e, int(c)) for op, (s, name, _) in sorted(acc.items())
            for e, c in zip(EDGES, s.histogram()) if c]
    return pl.DataFrame(rows, schema=SRT_HISTOGRAM.schema, orient="row") if rows else SRT_HISTOGRAM.empty()


def thinning_notes(kept: "Kept", rows: int, tiler: "Tiler", tables: Tables, sink, over: str) -> list[str]:
    """The notes of a streamed command layer on what it kept for the reports and on the
    percentiles that are not exact (`over`: "the log", "the capture")."""
    notes = []
    if kept.thinned:
        notes.append(f"per-command rows: {kept.rows} of {rows} kept for the reports (every {kept.stride}th, "
                     f"evenly over {over})" + ("; all of them went to the I/O sink" if sink is not None else ""))
    if tiler.kept.thinned:
        notes.append(f"segments: every {tiler.kept.stride}th kept for the reports; the stage percentages count "
                     "all of them")
    return notes + inexact_note(tables)


def inexact_note(tables: Tables) -> list[str]:
    """The note naming the statistics whose percentiles are not exact (the only figures of
    the command tables that are approximate: Samples past 2 M samples)."""
    inexact = tables.inexact()
    if not inexact:
        return []
    return [f"percentiles of {', '.join(inexact)}: over 2 M samples, read from a log-linear histogram "
            "(at most 0.1 % low); count, min, max and mean exact"]


class Thinned:
    """What thinning_notes reads of a `Kept` (and of a `Tiler`: `kept`) whose rows a compiled
    stage kept (native/src/commands.rs): how many, the stride."""

    def __init__(self, rows: int, stride: int, kept=None):
        self.rows, self.stride, self.thinned, self.kept = rows, stride, stride > 1, kept


def kept_segments(s, phases: list[str]) -> pl.DataFrame:
    """The segments a compiled stage kept (its `KeptSegments`: tiling.segments_frame), by
    device and start."""
    names = pl.Series(s.device_names, dtype=pl.Utf8)
    pieces = pl.DataFrame(s.segments).select(tiling.PIECE_COLUMNS)
    return tiling.segments_frame(pieces, phases, names).sort(["device", "start_ns"])


class Kept:
    """At most `limit` rows of a frame that grows batch by batch: the rows whose running
    number (`key`, or their order of arrival) is a multiple of the stride, the stride
    doubling whenever more would be kept. `thinned`: whether rows were dropped."""

    def __init__(self, key: str | None = None, limit: int | None = None):
        self.key, self.limit = key, limit or model.KEEP_IOS
        self.parts: list[pl.DataFrame] = []
        self.rows = self.seen = 0
        self.stride = 1

    @property
    def thinned(self) -> bool:
        return self.stride > 1

    def add(self, frame: pl.DataFrame, made=None) -> None:
        """`frame`'s rows to keep; `made`: what the kept rows become (a function of the thinned
        frame, so that only the kept rows are made)."""
        if not frame.height:
            return
        if self.key is None:
            frame = frame.with_columns(pl.int_range(self.seen, self.seen + frame.height, dtype=pl.Int64).alias("_n"))
        self.seen += frame.height
        mark = pl.col(self.key or "_n")
        frame = frame.filter(mark % self.stride == 0) if self.stride > 1 else frame
        if made is not None:
            frame = made(frame).with_columns(frame[self.key or "_n"])
        self.parts.append(frame)
        self.rows += frame.height
        while self.rows > self.limit:
            self.stride *= 2
            self.parts = [pl.concat(self.parts).filter(mark % self.stride == 0)]
            self.rows = self.parts[0].height

    def frame(self, empty: pl.DataFrame, sort: list[str]) -> pl.DataFrame:
        if not self.parts:
            return empty
        whole = pl.concat(self.parts).sort(sort)
        return whole.drop("_n") if self.key is None else whole


def _in_order(p: pl.DataFrame, keys: list[str]) -> bool:
    """Whether the pieces of one device are in (start, ...) order already (then no sort could move one)."""
    if p["device"].n_unique() != 1:
        return False
    cols = [p[k].to_numpy() for k in keys[1:]]
    ahead = np.zeros(p.height - 1, np.bool_)      # row i+1 is after row i on an earlier key
    for c in cols:
        d = np.diff(c)
        if (d[~ahead] < 0).any():
            return False
        ahead |= d > 0
    return bool(ahead.all())


class Tiler:
    """Stage pieces (device, io, start_ns, end_ns, bytes; `phase`: index into `phases`, all
    the first without it; `_block`: the order of pieces of equal start, before io) ->
    segments tiling each device's time with IDLE, as `tiling.tile` over the whole capture
    would. A piece is tiled once no command can still come that starts before it
    (`add(pieces, before)`: every command still to come starts at `before` or later); where
    each device's last segment ends is carried to the next batch as a leading piece
    [0, end) whose segment is dropped."""

    def __init__(self, phases=("SERVICE",)):
        self.PHASES = [*phases, "~carried"]    # then IDLE (tiling.tile adds it)
        self.waiting: list[pl.DataFrame] = []
        self.covered: dict = {}
        self.totals = {p: 0 for p in (*phases, "IDLE")}
        self.counts = dict(self.totals)
        self.kept = Kept()

    def add(self, pieces: pl.DataFrame, before: int | None) -> None:
        pieces = pieces.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
        if pieces.height:
            self.waiting.append(pieces)
        if not self.waiting:
            return
        p = pl.concat(self.waiting) if len(self.waiting) > 1 else self.waiting[0]
        ready = p if before is None else p.filter(pl.col("start_ns") < before)
        self.waiting = [p.filter(pl.col("start_ns") >= before)] if before is not None else []
        keys = ["device", "start_ns", *(["_block"] if "_block" in ready.columns else []), "io"]
        if ready.height:
            self._tile(ready if _in_order(ready, keys) else ready.sort(keys))

    def _tile(self, p: pl.DataFrame) -> None:
        devices = p["device"].unique().sort()
        code = {d: k for k, d in enumerate(devices.to_list())}
        carry = len(self.PHASES) - 1
        carried = [(code[d], c) for d, c in self.covered.items() if d in code]
        rows = tiling.pieces_frame(
            dev=[k for k, _ in carried], io=[None] * len(carried), start=[0] * len(carried),
            end=[c for _, c in carried], phase=[carry] * len(carried), bytes=[None] * len(carried))
        rows = pl.concat([rows, tiling.pieces_frame(
            dev=p["device"].rank("dense") - 1, io=p["io"], start=p["start_ns"], end=p["end_ns"],
            phase=p["phase"] if "phase" in p.columns else pl.repeat(0, p.height, eager=True), bytes=p["bytes"])])
        t = tiling.tile(rows, 0, self.PHASES)
        seg, names, names_of = t["segments"].filter(pl.col("phase") != carry), t["phases"], devices.to_list()
        # where each device's last segment ends (pieces come in start order, so a later one
        # starts there or after: the time covered before it)
        for d, end in seg.filter(pl.col("phase") != names.index(tiling.IDLE)).group_by("dev").agg(
                pl.col("end").max()).iter_rows():
            name = names_of[d]
            self.covered[name] = max(self.covered.get(name, -1), end)
        # added up by phase code, the segments frame made of the rows kept only
        self._add_up(seg.group_by("phase").agg((pl.col("end") - pl.col("start")).sum(), pl.len()), names)
        self.kept.add(seg, lambda kept: tiling.segments_frame(kept, names, devices))

    def _add_up(self, by_phase: pl.DataFrame, names: list[str]) -> None:
        for phase, d, n in by_phase.iter_rows():
            self.totals[names[phase]] += d
            self.counts[names[phase]] += n

    def _segments(self, seg: pl.DataFrame) -> None:
        if not seg.height:
            return
        for phase, d, n in seg.group_by("phase").agg((pl.col("end_ns") - pl.col("start_ns")).sum(), pl.len()).iter_rows():
            self.totals[phase] += d
            self.counts[phase] += n
        self.kept.add(seg)

    def finish(self, elapsed_ns: int) -> tuple[pl.DataFrame, dict, int]:
        """(segments kept, time per phase, devices with segments) once the log has ended."""
        self.add(pl.DataFrame(schema={"device": pl.Utf8, "io": pl.Int64, "start_ns": pl.Int64,
                                      "end_ns": pl.Int64, "bytes": pl.Int64}), None)
        tail = {d: c for d, c in sorted(self.covered.items()) if elapsed_ns > c}
        if tail:
            devices = pl.Series(list(tail), dtype=pl.Utf8)
            n = len(tail)
            self._segments(tiling.segments_frame(tiling.pieces_frame(
                dev=range(n), io=[None] * n, start=list(tail.values()), end=[elapsed_ns] * n, phase=[0] * n,
                bytes=[None] * n), ["IDLE"], devices))
        empty = tiling.segments_frame(tiling.pieces_frame(**{c: [] for c in tiling.PIECE_COLUMNS}), [],
                                      pl.Series([], dtype=pl.Utf8))
        totals = {k: v for k, v in self.totals.items() if self.counts[k]}
        return self.kept.frame(empty, ["device", "start_ns"]), totals, len(self.covered)
