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

Everything per URB works on the URB table (`URBS`) with compiled passes (transfers, bot,
stages); the other frames start at one row per command.
"""
from __future__ import annotations

import polars as pl

from .. import bandwidth, completeness, schema, series, tiling
from ..command_stream import Tables, inexact_note
from ..command_tables import TABLES
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES
from .bot import bot_commands
from .stages import late_command_notes, segments_frame, tile
from .transfers import Transfers, transfers
from .uas import uas_commands
from .ios import IOS_EXTRA, STAGES, control_anomalies, ios_frame
from .urbs import from_start

def commands(urbs: pl.DataFrame) -> tuple[Transfers, pl.DataFrame, list[pl.DataFrame]]:
    """(transfers, commands with stage times, anomalies) from the URB table."""
    xf = transfers(urbs)
    bot, an1, not_bot = bot_commands(xf)
    rest = xf.frame(not_bot)
    uas, an2 = uas_commands(rest) if rest.height else (pl.DataFrame(), [])
    cmds = pl.concat([x for x in (bot, uas) if x.height], how="diagonal_relaxed") if (bot.height or uas.height) \
        else pl.DataFrame()
    return xf, cmds, [*an1, *an2, *control_anomalies(xf)]


def analyze(capture: Capture, options=None) -> Analysis:
    """The streaming machine's analysis (scsitrace/usb/streamed.py: Bulk-Only captures, read
    as a stream or fed whole as one batch), else that of the whole-capture passes."""
    from .streamed import streamed_analysis
    streamed = streamed_analysis(capture, options)
    return streamed if streamed is not None else passes_analysis(capture, options)


def passes_analysis(capture: Capture, options=None) -> Analysis:
    """The analysis by the whole-capture passes over the URB table (transfers, Bulk-Only and UAS
    commands, stage tiling): what the streaming machine does not cover (UAS devices, bulk
    traffic before a CBW, failed bulk URBs, --window, --device, --lun)."""
    urbs, elapsed, window_notes = _windowed(capture.frames["urbs"], options)
    xf, cmds, anomalies = commands(urbs)
    no_submit, no_complete = xf.cols["s_row"].null_count(), xf.cols["c_row"].null_count()
    full, filter_notes = _selected(ios_frame(cmds), options)
    tiles = tile(full, elapsed, segments=False)
    ios = full.select(list({**schema.IOS, **IOS_EXTRA}))
    paired = int(ios["paired"].sum()) if ios.height else 0
    unit = capture.meta.get("position_unit", "record")
    found = [a.with_columns(pl.format("{} {}", pl.lit(unit), "position").alias("position")) for a in anomalies]
    an = pl.concat([capture.anomalies, *found]).cast(schema.ANOMALIES)
    data_bytes = int(ios["data_bytes"].sum()) if ios.height else 0
    notes = window_notes + filter_notes + late_command_notes(full)
    n_dev = tiles["devices"]
    if n_dev > 1:
        notes.append(f"{n_dev} devices: stage percentages are of {n_dev} x the elapsed time")
    if capture.meta.get("text_format") == "1t":
        notes.append("1t text has no bus numbers: devices are shown on bus 0")
    notes += completeness.usb_notes(no_submit, no_complete, ios) + list(capture.notes)
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
        series.add_ios(over_time, ios, "usb")
        tables, more = over_time.tables(elapsed)
        notes += more
    notes += bandwidth.declare(tables, ios, thinned=False, options=options)
    return tables


def _windowed(urbs: pl.DataFrame, options) -> tuple[pl.DataFrame, int, list[str]]:
    """--window: the URB events inside it, times from its start (as if the capture had started
    then: a command cut by an edge is unpaired, with its reason). Returns (URBs, elapsed, notes)."""
    last = int(urbs["t_ns"].max()) if urbs.height else 0
    if options is None or options.window is None:
        return urbs, last, []
    check_window(options.window, int(urbs["t_ns"].min()) if urbs.height else None, last)
    lo, hi = options.window
    lo, hi = max(lo or 0, 0), min(last if hi is None else hi, last)
    kept = from_start(urbs.filter(pl.col("t_ns").is_between(lo, hi)), lo)
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

