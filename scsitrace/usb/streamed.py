"""The Bulk-Only commands of a capture read as a stream (`Capture.chunks`): one machine
(scsitrace._native.usb.BotStream) pairs the URBs and groups the bulk transfers into
commands batch by batch, carrying what is in flight across batch edges, and hands back
after each batch the commands that are finished (closed, with no open command before them
in start order). Each such batch goes to the shared streaming accumulators
(scsitrace/command_stream.py): the command and latency tables, the stage tiling carried per
device, at most KEEP_IOS rows kept for the reports, every row to `options.ios_sink`. Memory
is what is in flight plus what the reports keep, not the capture's size.

The machine covers Bulk-Only captures in time order without bulk URB errors (control
requests are read for the Mass Storage Reset and CLEAR HALT anomalies); anything else (UAS
devices, bulk traffic before a device's first CBW, a CBW without its submit, failed bulk
URBs, --window, --device/--lun) and captures without chunks are analysed whole
(scsitrace/usb/analysis.py), with the same results: the machine is the whole-capture
passes' rules, fed in pieces. (Rows already handed to the I/O sink are then written again
whole: the analysis is not `ios_streamed`.)
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import completeness, schema, tiling
from .._native import usb as _usb
from ..command_stream import Kept, Tables, Tiler, thinning_notes
from ..model import Analysis
from ..schema import NULL
from ..streams import prefetched
from .bot import bot_commands
from .stages import PIECE_PHASES, STAGE_ORDER, stage_pieces
from .transfers import transfers
from .urbs import URBS, urb_columns

TIMES = ("cmd_s", "cmd_c", "sts_s", "sts_c", "data_s", "data_c")


def streamed_analysis(capture, options) -> Analysis | None:
    """The analysis of a Bulk-Only capture read as a stream; None when it is to be analysed whole."""
    if capture.chunks is None or not capture.meta.get("streamable") or (options is not None and any(
            getattr(options, k, None) is not None for k in ("window", "device", "lun", "target", "pids"))):
        return None
    machine, run = _usb.BotStream(), _Run(capture, options)
    for u in prefetched(capture.chunks()):
        if run.origin is None and len(u.t_ns):
            run.origin = int(u.t_ns[0])        # the machine refuses anything earlier
        if not machine.feed(u.t_ns, u.urb_id, u.event, u.xfer, u.ep, u.bus, u.dev, u.status, u.length,
                            u.has_setup, u.setup.reshape(-1), u.data_buf, u.data_at, u.data_size, u.data_head, u.pos):
            return None
        run.add(machine.take())
    found = machine.finish()
    if found is None:
        return None
    found["before"] = None
    run.add(found)
    return run.finish(found)


class _Run:
    """One streamed analysis as the batches of finished commands come."""

    def __init__(self, capture, options):
        from .analysis import IOS_EXTRA
        self.capture, self.origin = capture, None
        self.sink = getattr(options, "ios_sink", None)
        self.xf = transfers(urb_columns(pl.DataFrame(schema=URBS)))
        self.tables, self.tiler, self.kept = Tables(), Tiler(PIECE_PHASES), Kept("io")
        self.anomalies: list[list[pl.DataFrame]] = []
        self.columns = list({**schema.IOS, **IOS_EXTRA})
        self.rows = 0
        self.phase_code = np.array([PIECE_PHASES.index(p) for p in STAGE_ORDER], np.int64)

    def add(self, found: dict) -> None:
        from .analysis import ios_frame
        origin = self.origin or 0
        for name in TIMES:
            t = found[name]
            t[t != NULL] -= origin
        before = found["before"] - origin if found["before"] is not None else None
        if not len(found["first"]):
            self.tiler.add(_NO_PIECES, before)
            return
        cmds, anomalies, _ = bot_commands(self.xf, found)
        self.anomalies.append(anomalies)
        full = ios_frame(cmds, self.rows)
        self.rows += full.height
        ios = full.select(self.columns)
        self.tables.add(ios)
        self.kept.add(ios)
        if self.sink is not None:
            self.sink(ios, self.capture)
        self.tiler.add(self._pieces(full), before)

    def _pieces(self, full: pl.DataFrame) -> pl.DataFrame:
        """The stage pieces of a batch of commands, with their device names and blocks."""
        times = full.select(pl.col(c).cast(pl.Int64).fill_null(NULL)
                            for c in ("_dev", "io", "cmd_s", "cmd_c", "_d0", "_s0", "data_c", "sts_c", "data_bytes"))
        data_in = full.select(pl.col("data_in").fill_null(pl.col("flag_in")).fill_null(True)).to_series().to_numpy()
        out = np.empty((5 * full.height, len(tiling.PIECE_COLUMNS)), np.int64)
        blocks = np.empty(5 * full.height, np.int64)
        n, _ = stage_pieces(*(times[c].to_numpy() for c in times.columns), data_in, self.phase_code, True, out,
                            blocks)
        p = out[:n]
        names = full.select("_dev", "device").unique("_dev").sort("_dev")["device"]
        return pl.DataFrame({"device": names.gather(p[:, 0]), "io": p[:, 1], "start_ns": p[:, 2],
                             "end_ns": p[:, 3], "phase": p[:, 4], "bytes": p[:, 5], "_block": blocks[:n]}
                            ).with_columns(pl.when(pl.col("bytes") != NULL).then(pl.col("bytes")).alias("bytes"))

    def finish(self, found: dict) -> Analysis:
        from .analysis import STAGES, _control_anomalies
        capture, t = self.capture, self.tables
        origin = self.origin or 0
        elapsed = (found["t_max"] or 0) - origin if found["t_max"] is not None else 0
        ctl = dict(found)
        ctl["ctl_t"] = found["ctl_t"] - origin
        kinds = [pl.concat(parts) for parts in zip(*self.anomalies)] if self.anomalies else []
        found_an = [*kinds, *_control_anomalies(self.xf, ctl)]
        unit = capture.meta.get("position_unit", "record")
        found_an = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in found_an]
        an = pl.concat([capture.anomalies, *found_an]).cast(schema.ANOMALIES)
        segments, totals, n_dev = self.tiler.finish(elapsed)
        notes = []
        if n_dev > 1:
            notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
        if capture.meta.get("text_format") == "1t":
            notes.append("1t text has no bus numbers: devices are shown on bus 0")
        notes += completeness.usb_notes_counted(int(found["no_submit"]), int(found["no_complete"]),
                                                {k: v for k, v in t.reasons.items() if k is not None})
        notes += list(capture.notes)
        notes += thinning_notes(self.kept, self.rows, self.tiler, t, self.sink, "the capture")
        from .analysis import IOS_EXTRA
        ios = self.kept.frame(pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA}), ["io"])
        tables = t.tables(elapsed)
        tables.pop("srt_driver", None)
        from ..command_tables import TABLES
        from ..stats import LATENCY_TABLES
        capture.meta["origin_ns"] = origin
        analysis = Analysis(
            layer="usb", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=lambda: segments,
            segment_targets=False, ios=ios, anomalies=an, ios_completed=t.paired, data_bytes=t.data_bytes,
            category_order={"usb": list(STAGES)}, default_profile="usb",
            categories={"usb": tiling.category_table(totals, n_dev, STAGES, elapsed, t.paired)}, notes=notes,
            source={"path": capture.path, "format": capture.format, **{k: v for k, v in capture.meta.items()
                                                                        if k in ("container", "route", "text_format")}},
            declared=(*TABLES, *LATENCY_TABLES), tables=tables, no_normalized=("IDLE",))
        analysis.ios_streamed = self.sink is not None
        return analysis


_NO_PIECES = pl.DataFrame(schema={"device": pl.Utf8, "io": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                  "phase": pl.Int64, "bytes": pl.Int64, "_block": pl.Int64})
