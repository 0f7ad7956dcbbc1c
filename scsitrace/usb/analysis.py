"""USB mass storage layer: URB events -> SCSI commands with their transport stages.

Bulk-Only Transport (BOT): CBW -> data -> CSW, one command at a time per device, so a
command is every bulk transfer of its device from its CBW up to the next CBW; its CSW
must carry the CBW's tag. UAS: a command IU, data on the data pipes, a sense or response
IU with the same tag, possibly several commands in flight.

Times per command (all from URB submit S and complete C events, as usbmon stamps them):
  COMMAND  CBW (command IU) submit -> its completion
  DATA     first data submit (not before the command completed) -> last data completion
  STATUS   CSW (status IU) submit, not before the data ended -> its completion
  GAP      host/device turnaround between those stages
  response CBW submit -> CSW completion: what `tshark -z scsi,srt` measures
Per device these pieces, plus IDLE, tile the trace (overlapping UAS commands: each
instant goes to the earliest command still in progress).

Everything per URB works on numpy columns (`UrbColumns`) with compiled passes
(transfers, bot, stages); polars frames start at one row per command.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import bandwidth, completeness, schema, scsi, series, tiling
from ..command_stream import Tables, inexact_note
from ..command_tables import TABLES
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES
from .bot import bot_commands
from .stages import _with_stages, segments_frame, tile
from .transfers import Transfers, transfers
from .uas import uas_commands
from .._keys import dense_ids
from .urbs import EPIPE, EREMOTEIO, URBS, UrbColumns, _anomalies, _u8, urb_columns

STAGES = ("COMMAND", "DATA IN", "DATA OUT", "STATUS", "GAP", "IDLE")


def _control_anomalies(transfers: Transfers, streamed: dict | None = None) -> list[pl.DataFrame]:
    """Mass-storage resets and endpoint-halt clears (control transfers), URB errors
    (`streamed`: the resets and clears the stream machine listed; then `transfers` is empty)."""
    u, xfer = transfers.urbs, transfers.xfer
    st = transfers.status
    errors = ~transfers.status_null & (st != 0) & (st != EREMOTEIO) & (st != EPIPE)
    xf = transfers.frame(np.flatnonzero(((xfer == 2) & u.has_setup[transfers.row]) | ((xfer == 3) & errors)))
    ctl = xf.filter((pl.col("xfer") == 2) & pl.col("setup").is_not_null()).with_columns(
        _u8("setup", 0).alias("bm"), _u8("setup", 1).alias("req"))
    if streamed is not None:
        ctl = pl.DataFrame({"t0": streamed["ctl_t"], "bus": streamed["ctl_bus"].astype(np.uint16),
                            "dev": streamed["ctl_dev"].astype(np.uint8), "pos": streamed["ctl_pos"],
                            "bm": streamed["ctl_bm"], "req": streamed["ctl_req"]})
    err = xf.filter((pl.col("xfer") == 3) & pl.col("status").is_not_null()
                    & ~pl.col("status").is_in([0, EREMOTEIO, EPIPE]))
    where = pl.format("{}:{} ep {}", "bus", "dev", "ep")
    return [
        _anomalies(ctl.filter((pl.col("bm") == 0x21) & (pl.col("req") == 0xFF)), "t0", "RESET",
                   pl.format("Bulk-Only Mass Storage Reset to {}:{}", "bus", "dev")),
        _anomalies(ctl.filter((pl.col("bm") == 0x02) & (pl.col("req") == 0x01)), "t0", "CLEAR HALT",
                   pl.format("CLEAR_FEATURE(ENDPOINT_HALT) on {}:{}", "bus", "dev")),
        _anomalies(err.filter(pl.col("submit_error")), "t0", "SUBMIT ERROR",
                   pl.format("URB submission failed with {} on {}", "status", where)),
        _anomalies(err.filter(~pl.col("submit_error")), "t0", "URB ERROR",
                   pl.format("URB status {} on {}", "status", where)),
    ]

IOS_EXTRA = {
    "usb_tag": pl.Int64, "transport": pl.Utf8, "residue": pl.Int64, "stalls": pl.Int64,
    "command_ns": pl.Int64, "data_ns": pl.Int64, "status_ns": pl.Int64, "gap_ns": pl.Int64,
    "response_ns": pl.Int64, "paired": pl.Boolean, "reason": pl.Utf8, "bus": pl.Int64, "dev": pl.Int64,
}


def commands(urbs: UrbColumns) -> tuple[Transfers, pl.DataFrame, list[pl.DataFrame]]:
    """(transfers, commands with stage times, anomalies) from URB columns."""
    xf = transfers(urbs)
    bot, an1, not_bot = bot_commands(xf)
    rest = xf.frame(not_bot)
    uas, an2 = uas_commands(rest) if rest.height else (pl.DataFrame(), [])
    cmds = pl.concat([x for x in (bot, uas) if x.height], how="diagonal_relaxed") if (bot.height or uas.height) \
        else pl.DataFrame()
    return xf, cmds, [*an1, *an2, *_control_anomalies(xf)]


def ios_frame(cmds: pl.DataFrame, first_io: int = 0) -> pl.DataFrame:
    if not cmds.height:
        return pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA})
    for col, dt in {"opcode": pl.Int64, "command": pl.Utf8, "lba": pl.Int64, "blocks": pl.Int64,
                    "data_s": pl.Int64, "data_c": pl.Int64, "cmd_c": pl.Int64,
                    "data_bytes": pl.Int64, "stalls": pl.Int64, "flag_in": pl.Boolean, "data_in": pl.Boolean,
                    "lun": pl.Int64, "bytes": pl.Int64, "residue": pl.Int64, "usb_tag": pl.Int64,
                    "status": pl.Utf8, "cmd_s": pl.Int64, "sts_s": pl.Int64}.items():
        if col not in cmds.columns:
            cmds = cmds.with_columns(pl.lit(None, dtype=dt).alias(col))
    c = _in_start_order(cmds)
    names, code = _devices(c)
    c = c.with_columns(
        pl.int_range(first_io, first_io + pl.len(), dtype=pl.Int64).alias("io"),
        names.gather(code).alias("device"), pl.Series("_dev", code),
        pl.col("command").fill_null(""))   # commands without a CDB (status without command)
    c = _with_stages(c).with_columns(
        pl.col("reason").is_null().alias("paired"),
        (pl.col("response_ns") - pl.col("command_ns").fill_null(0) - pl.col("data_ns").fill_null(0)
         - pl.col("status_ns").fill_null(0)).alias("gap_ns"))
    c = c.with_columns(
        pl.when(pl.col("paired")).then(pl.col("response_ns")).alias("response_ns"),
        pl.when(pl.col("paired")).then(pl.col("gap_ns")).alias("gap_ns"))
    out = c.with_columns(
        pl.lit(None, dtype=pl.Int8).alias("target"),
        pl.lit(None, dtype=pl.Int16).alias("tag"),
        scsi.op_kind_expr(pl.col("opcode")).alias("op"),
        pl.col("data_bytes").fill_null(0).alias("data_bytes"),
        pl.coalesce("cmd_s", "sts_s", "sts_c").alias("start_ns"),
        pl.when(pl.col("paired")).then(pl.col("sts_c")).alias("end_ns"),
        pl.lit(None, dtype=pl.Int32).alias("connections"),
        pl.lit(None, dtype=pl.Int32).alias("disconnects"),
        pl.col("paired").alias("complete"),
        (pl.col("residue").fill_null(0) > 0).alias("partial"),
        pl.col("stalls").fill_null(0),
    )
    cols = {**schema.IOS, **IOS_EXTRA}
    return out.select([pl.col(k).cast(v) for k, v in cols.items()] + ["data_s", "data_c", "cmd_s", "cmd_c",
                                                                      "sts_s", "sts_c", "_d0", "_s0",
                                                                      "flag_in", "data_in", "_dev"])


def _in_start_order(cmds: pl.DataFrame) -> pl.DataFrame:
    """Commands sorted by start (command, else status submit, else status completion).
    Bulk-Only commands usually come in that order already: when the starts strictly
    increase, no sort could move a row, so the frame is returned as it is."""
    key = pl.coalesce("cmd_s", "sts_s", "sts_c")
    start = cmds.select(key).to_series()
    if start.null_count() == 0 and bool((start.diff().drop_nulls() > 0).all()):
        return cmds
    return cmds.sort(key, maintain_order=True)


def _devices(cmds: pl.DataFrame) -> tuple[pl.Series, np.ndarray]:
    """(device names "bus:address:lun" in text order, each command's index into them):
    names are formatted once per device, not per command."""
    bus, dev = cmds["bus"].cast(pl.Int64).to_numpy(), cmds["dev"].cast(pl.Int64).to_numpy()
    lun = cmds["lun"].cast(pl.Int64).fill_null(0).to_numpy()
    first_seen, where = dense_ids((bus << 32) | (dev << 16) | lun)
    n = len(where)
    names = [f"{bus[i]}:{dev[i]}:{lun[i]}" for i in where]
    rank = np.empty(n, np.int64)
    rank[sorted(range(n), key=names.__getitem__)] = np.arange(n)
    return pl.Series("device", sorted(names), dtype=pl.Utf8), rank[first_seen]


def analyze(capture: Capture, options=None) -> Analysis:
    """The streaming machine's analysis (scsitrace/usb/streamed.py: Bulk-Only captures, read
    as a stream or fed whole as one batch), else that of the whole-capture passes."""
    from .streamed import streamed_analysis
    streamed = streamed_analysis(capture, options)
    return streamed if streamed is not None else passes_analysis(capture, options)


def passes_analysis(capture: Capture, options=None) -> Analysis:
    """The analysis by the whole-capture passes over URB columns (transfers, Bulk-Only and UAS
    commands, stage tiling): what the streaming machine does not cover (UAS devices, bulk
    traffic before a CBW, failed bulk URBs, --window, --device, --lun)."""
    urbs = capture.columns["urbs"] if "urbs" in capture.columns else urb_columns(capture.frames["urbs"])
    urbs, elapsed, window_notes = _windowed(urbs, options)
    xf, cmds, anomalies = commands(urbs)
    s_row, c_row = xf.s_row, xf.c_row
    full, filter_notes = _selected(ios_frame(cmds), options)
    tiles = tile(full, elapsed, segments=False)
    ios = full.select(list({**schema.IOS, **IOS_EXTRA}))
    paired = int(ios["paired"].sum()) if ios.height else 0
    unit = capture.meta.get("position_unit", "record")
    found = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in anomalies]
    an = pl.concat([capture.anomalies, *found]).cast(schema.ANOMALIES)
    data_bytes = int(ios["data_bytes"].sum()) if ios.height else 0
    notes = window_notes + filter_notes
    n_dev = tiles["devices"]
    if n_dev > 1:
        notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
    if capture.meta.get("text_format") == "1t":
        notes.append("1t text has no bus numbers: devices are shown on bus 0")
    notes += completeness.usb_notes(s_row, c_row, ios) + list(capture.notes)
    counted = Tables()              # the command layers' streaming tables, fed the whole capture as one batch
    counted.add(ios)
    notes += inexact_note(counted)
    cats = tiling.category_table(tiles["totals"], n_dev, STAGES, elapsed, paired)
    return Analysis(
        layer="usb", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=lambda: segments_frame(full, elapsed),
        segment_targets=False, ios=ios,
        anomalies=an, ios_completed=paired, data_bytes=data_bytes,
        category_order={"usb": list(STAGES)}, default_profile="usb", categories={"usb": cats},
        notes=notes,
        source={"path": capture.path, "format": capture.format, **{k: v for k, v in capture.meta.items()
                                                                    if k in ("container", "route", "text_format")}},
        declared=(*TABLES, *LATENCY_TABLES, *series.declared(options), *bandwidth.TABLES),
        tables={**counted.tables(elapsed), **_series_tables(ios, elapsed, notes, options)},
        no_normalized=("IDLE",))


def _series_tables(ios: pl.DataFrame, elapsed: int, notes: list[str], options) -> dict:
    """The figures over time (when a view draws them) and the bandwidth views of all the I/Os."""
    tables = {}
    if getattr(options, "series", True):
        over_time = series.Series()
        series.add_ios(over_time, ios)
        tables, more = over_time.tables(elapsed)
        notes += more
    notes += bandwidth.declare(tables, ios, thinned=False)
    return tables


def _windowed(urbs: UrbColumns, options) -> tuple[UrbColumns, int, list[str]]:
    """--window: the URB events inside it, times from its start (as if the capture had started
    then: a command cut by an edge is unpaired, with its reason). Returns (URBs, elapsed, notes)."""
    last = int(urbs.t_ns.max()) if len(urbs) else 0
    if options is None or options.window is None:
        return urbs, last, []
    check_window(options.window, int(urbs.t_ns.min()) if len(urbs) else None, last)
    lo, hi = options.window
    lo, hi = max(lo or 0, 0), min(last if hi is None else hi, last)
    kept = urbs.take((urbs.t_ns >= lo) & (urbs.t_ns <= hi))
    kept.t_ns = kept.t_ns - lo
    return kept, hi - lo, [f"--window: the URB events from {lo / 1e9:g} s to {hi / 1e9:g} s only, times from "
                           f"the window's start; commands cut by its edges are unpaired"]


def _selected(full: pl.DataFrame, options) -> tuple[pl.DataFrame, list[str]]:
    """--device BUS:ADDR[:LUN] and --lun keep those commands; a value the capture lacks is a
    usage error naming what it has."""
    if options is None:
        return full, []
    if options.target is not None:
        refuse("--target", "usb", "USB mass storage has no SCSI target IDs (use --device BUS:ADDR or --lun)")
    if options.pids is not None:
        refuse("--pid", "usb", "usbmon does not record processes")
    keep, given = pl.lit(True), []
    if options.device is not None:
        parts = str(options.device).split(":")
        if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts):
            raise UsageError(f"--device expects BUS:ADDR or BUS:ADDR:LUN for usb traces, got {options.device!r}")
        name = ":".join(str(int(p)) for p in parts)
        keep &= (pl.col("device") == name) if len(parts) == 3 else pl.col("device").str.starts_with(name + ":")
        given.append(f"--device {options.device}")
        if not full.filter(keep).height:
            check_found("--device", options.device, full["device"].unique().to_list() if full.height else [])
    if options.lun is not None:
        keep &= pl.col("lun") == options.lun
        given.append(f"--lun {options.lun}")
        if not full.filter(keep).height:
            check_found("--lun", options.lun, full["lun"].unique().to_list() if full.height else [])
    if not given:
        return full, []
    kept = full.filter(keep)
    return kept, [f"{' '.join(given)}: {kept.height} of {full.height} commands (the URB anomalies are of every device)"]

