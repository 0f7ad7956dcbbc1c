"""The Bulk-Only commands of a capture, read as a stream (`Capture.chunks`) or whole (its URB
columns, fed as one batch): one machine (scsitrace._native.usb.BotStream) pairs the URBs
and groups the bulk transfers into commands batch by batch, carrying what is in flight
across batch edges, and hands back
after each batch the commands that are finished (closed, with no open command before them
in start order). Each such batch goes, inside the machine, to its command stage
(native/src/usb/commands.rs: what scsitrace/command_stream.py's accumulators keep, by their
rules): the command and latency tables, the stage tiling carried per device, at most
KEEP_IOS commands and segments kept for the reports as raw rows (made into polars rows when
a report reads them); with `options.ios_sink`, every batch's rows are also built and handed
to it. Memory is what is in flight plus what the reports keep, not the capture's size.

The machine covers Bulk-Only captures in time order without bulk URB errors (control
requests are read for the Mass Storage Reset and CLEAR HALT anomalies); anything else (UAS
devices, bulk traffic before a device's first CBW, a CBW without its submit, failed bulk
URBs, --window, --device/--lun) is analysed by the whole-capture passes
(scsitrace/usb/analysis.py), with the same results: the machine is those passes' rules,
fed in pieces (tests/test_usbmon_chunks.py compares the two). (Rows already handed to the I/O sink are then written again
whole: the analysis is not `ios_streamed`.)
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import polars as pl

from .. import bandwidth, completeness, heap, model, schema, scsi, series, tiling
from .._native import usb as _usb
from ..command_stream import Tables, Thinned, kept_segments, thinning_notes
from ..model import Analysis
from ..streams import prefetched
from .bot import BOT_REASONS, CBW_BYTES, CSW_BYTES, bot_commands
from .ios import IOS_EXTRA, STAGES, control_anomalies, ios_frame
from .stages import PIECE_PHASES
from .transfers import transfers
from .urbs import no_urbs

KEPT_SLICE = 1 << 16     # kept commands made into rows at a time


def streamed_analysis(capture, options) -> Analysis | None:
    """The analysis of a Bulk-Only capture by the streaming machine: batch by batch when it
    is read as a stream, else its URB table (read whole) as one batch. None when the
    machine does not cover it (then it is analysed by the whole-capture passes)."""
    if options is not None and any(getattr(options, k, None) is not None
                                   for k in ("window", "device", "lun", "target", "pids")):
        return None
    streaming = capture.chunks is not None and capture.meta.get("streamable")
    keep = model.KEEP_IOS
    if streaming:
        batches = prefetched(capture.chunks())
    else:       # one batch: the URB table (times from the first event, which the machine takes as its origin)
        batches = [capture.frames["urbs"]]
        # every command and segment kept, as the passes keep them (a command has at least 2
        # URBs, 4 events, and at most 6 segments): nothing thinned (reserved, not resident)
        keep = max(keep, 4 * batches[0].height)
    run = _Run(capture, options, streaming)
    machine = _usb.BotStream(keep, run.sink is not None or run.series is not None)
    for u in batches:
        if run.origin is None and u.height:
            run.origin = int(u["t_ns"][0])        # the machine refuses anything earlier
        if not machine.feed(u):
            return None
        run.sunk(machine.take())
    found = machine.finish()
    if found is None:
        return None
    run.sunk(found.commands)
    return run.finish(found, machine)


class _Run:
    """One streamed analysis: every row to the I/O sink as the batches of finished commands
    come (the tables, tiling and kept rows add up in the machine's command stage), then the
    analysis from what the stage accumulated."""

    def __init__(self, capture, options, streaming: bool):
        self.capture, self.options, self.origin, self.streaming = capture, options, None, streaming
        # read whole, every row is kept and the writer takes them from the analysis
        self.sink = getattr(options, "ios_sink", None) if streaming else None
        self.xf = transfers(no_urbs())
        self.columns = list({**schema.IOS, **IOS_EXTRA})
        self.rows = 0
        self.series = series.Series() if getattr(options, "series", True) else None
        self.collected = bandwidth.Collected() if self.series is not None else None

    def sunk(self, found) -> None:
        """A batch of commands (the machine's `BotCommands`) as `ios` rows: to the series, and
        to the sink if any."""
        if found is None or not len(found.commands):
            return
        full = self._frame(found, self.rows)[0]
        self.rows += full.height
        if self.series is not None:
            series.add_ios(self.series, full, "usb")
            self.collected.add(full)
        if self.sink is not None:
            self.sink(full.select(self.columns), self.capture)

    def _frame(self, found, first_io: int) -> tuple[pl.DataFrame, list[pl.DataFrame]]:
        """(the ios_frame of commands given as the machine's `BotCommands`, their anomalies)."""
        cmds, anomalies, _ = bot_commands(self.xf, found)
        return ios_frame(cmds, first_io), anomalies

    def finish(self, found: dict, machine) -> Analysis:
        capture = self.capture
        origin = self.origin or 0
        r = machine.results()
        t = _tables(r)
        elapsed = found.t_max - origin if found.t_max is not None else 0
        kinds = self._frame(r.anomalous, 0)[1] if len(r.anomalous.commands) else []
        found_an = [*kinds, *control_anomalies(self.xf, found)]
        unit = capture.meta.get("position_unit", "record")
        found_an = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in found_an]
        an = pl.concat([capture.anomalies, *found_an]).cast(schema.ANOMALIES)
        phases = [*PIECE_PHASES, "~carried", tiling.IDLE]
        totals = {p: int(v) for p, v, n in zip(phases, r.totals, r.counts) if n and p != "~carried"}
        n_dev = r.n_dev
        notes = []
        if n_dev > 1:
            notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
        if capture.meta.get("text_format") == "1t":
            notes.append("1t text has no bus numbers: devices are shown on bus 0")
        notes += completeness.usb_notes_counted(int(found.no_submit), int(found.no_complete),
                                                {k: v for k, v in t.reasons.items() if k is not None})
        notes += list(capture.notes)
        kept = Thinned(r.kept_rows, r.stride)
        tiler = Thinned(0, 1, kept=Thinned(0, r.segment_stride))
        notes += thinning_notes(kept, r.rows, tiler, t, self.sink, "the capture")
        tables = t.tables(elapsed)
        tables.pop("srt_driver", None)
        series_tables, series_notes = self.series.tables(elapsed) if self.series is not None else ({}, [])
        tables.update(series_tables)
        built = {}          # the kept rows are read from the machine once: through analysis.ios
        notes += series_notes + bandwidth.declare(tables, lambda: built["analysis"].ios, thinned=r.stride > 1,
                                                  options=self.options, collected=self.collected)
        from ..command_tables import TABLES
        from ..stats import LATENCY_TABLES
        if self.streaming:          # (read whole, the parser set it: the times start there)
            capture.meta["origin_ns"] = origin
        analysis = Analysis(
            layer="usb", capture=capture, elapsed_ns=elapsed, start_ns=0,
            segments=lambda: _segments(machine.segments(), phases), segment_targets=False,
            ios=lambda: self._kept(machine, kept.rows), anomalies=an, ios_completed=t.paired, data_bytes=t.data_bytes,
            category_order={"usb": list(STAGES)}, default_profile="usb",
            categories={"usb": tiling.category_table(totals, n_dev, STAGES, elapsed, t.paired)}, notes=notes,
            source={"path": capture.path, "format": capture.format, **{k: v for k, v in capture.meta.items()
                                                                        if k in ("container", "route", "text_format")}},
            declared=(*TABLES, *LATENCY_TABLES, *(series.SERIES_TABLES if self.series is not None else ()),
                      *bandwidth.TABLES),
            tables=tables,
            no_normalized=("IDLE",))
        analysis.ios_streamed = self.sink is not None
        built["analysis"] = analysis
        return analysis

    def _kept(self, machine, n: int) -> pl.DataFrame:
        """The `ios` rows of the kept commands (built when a report reads them, a slice at a
        time: the peak is the frame)."""
        if not n:
            return pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA})
        rows = machine.kept()
        commands = pl.DataFrame(rows.commands)
        parts = []
        for lo in range(0, n, KEPT_SLICE):
            hi = min(lo + KEPT_SLICE, n)
            part = SimpleNamespace(commands=commands[lo:hi], cbw=rows.cbw[lo * CBW_BYTES:hi * CBW_BYTES],
                                   csw=rows.csw[lo * CSW_BYTES:hi * CSW_BYTES], kind=rows.kind)
            parts.append(self._frame(part, 0)[0].with_columns(part.commands["io"]).select(self.columns))
        del rows, commands, part
        ios = pl.concat(parts, rechunk=True)
        heap.release_freed_memory()        # the raw rows and columns: polars' allocator cannot reuse them
        return ios


def _tables(r) -> Tables:
    """command_stream.Tables from the machine's command stage (its `StageResults`)."""
    srt = r.srt
    names = scsi.decode_cdb_matrix(np.array([e.cdb for e in srt], np.uint8).reshape(-1, 16),
                                   np.array([e.cb_len for e in srt], np.int64))["command"].fill_null("").to_list()
    devices = pl.DataFrame(r.devices)
    return Tables.of(reasons={BOT_REASONS[k]: n for k, n in enumerate(r.reasons) if n},
                     devices={name: [n, p, b, True, rsum, rn] for name, n, p, b, rsum, rn in devices.iter_rows()},
                     srt={e.opcode: [e.samples, name, e.io] for e, name in zip(srt, names)},
                     latency=r.latency, paired=r.paired, data_bytes=r.data_bytes, sized=r.rows > 0)


def _segments(s, phases: list[str]) -> pl.DataFrame:
    """The kept segments (the machine's `KeptSegments`: command_stream.kept_segments)."""
    frame = kept_segments(s, phases)
    del s
    heap.release_freed_memory()
    return frame
