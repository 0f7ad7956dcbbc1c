"""SCSI kernel-log layer: dispatch -> done service time per command (ftrace
scsi_dispatch_cmd_* events, or the kernel's SCSI logging in dmesg).

A command starts at its dispatch (`start`, "Send:") and ends at the next `done`, `error`
or `timeout` event of the same device and tag. Only start -> done is paired (a service
time); everything else is reported unpaired with its reason:
  dispatch error (rtn=N)     the LLD refused the command (it is requeued and dispatched again)
  timed out                  the command timed out
  no done before the tag was reused / no done (trace ended)
  done without start (trace started mid-command)
Per device, time is SERVICE (at least one command dispatched and not done) or IDLE.
"""
from __future__ import annotations

import polars as pl

from .. import schema, scsi, tiling
from ..command_tables import SRT, TABLES, command_tables, srt_table
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..tables import Table
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES, latency_tables
from .events import COMMAND_EXTRA, MLQUEUE

SRT_DRIVER = Table("srt_driver", SRT.schema, "SRT per opcode over the driver's own durations (sg_io_hdr duration)",
                   json_columns=SRT.json_columns, json_names=SRT.json_names)

STAGES = ("SERVICE", "IDLE")
IOS_EXTRA = {"response_ns": pl.Int64, "paired": pl.Boolean, "reason": pl.Utf8, "host_byte": pl.Utf8}


def commands(events: pl.DataFrame) -> pl.DataFrame:
    """One row per command: start event joined to the end event that follows it."""
    key = ["device", "tag"]
    e = events.sort(["device", "tag", "t_ns", "pos"], nulls_last=True)
    e = e.with_columns(
        pl.col("kind").shift(-1).over(key).alias("n_kind"), pl.col("t_ns").shift(-1).over(key).alias("n_t"),
        pl.col("status").shift(-1).over(key).alias("n_status"),
        pl.col("host_byte").shift(-1).over(key).alias("n_host"),
        pl.col("rtn").shift(-1).over(key).alias("n_rtn"),
        pl.col("kind").shift(1).over(key).alias("p_kind"))
    n_kind = pl.col("n_kind")
    rtn_name = pl.col("n_rtn").replace_strict(MLQUEUE, default=None, return_dtype=pl.Utf8)
    reason = (pl.when(n_kind == "done").then(None)
              .when(n_kind == "error").then(
                  pl.format("dispatch error (rtn={}{})", pl.col("n_rtn"),
                            pl.when(rtn_name.is_not_null()).then(pl.concat_str(pl.lit(" "), rtn_name))
                            .otherwise(pl.lit(""))))
              .when(n_kind == "timeout").then(pl.lit("timed out"))
              .when(n_kind == "start").then(pl.lit("no done before the tag was reused"))
              .otherwise(pl.lit("no done (trace ended)")))
    starts = e.filter(pl.col("kind") == "start").select(
        "device", "tag", "cdb", "pos", pl.col("t_ns").alias("start_ns"),
        pl.when(n_kind == "done").then(pl.col("n_t")).alias("end_ns"),
        # a command the host adapter could not deliver (DID_NO_CONNECT...) shows its host byte
        pl.when(n_kind == "done").then(
            pl.when(pl.col("n_host").is_null() | (pl.col("n_host") == "DID_OK")).then(pl.col("n_status"))
            .otherwise(pl.col("n_host"))).alias("status"),
        pl.when(n_kind == "done").then(pl.col("n_host")).alias("host_byte"),
        reason.alias("reason"))
    orphans = e.filter((pl.col("kind") == "done") & (pl.col("p_kind").is_null() | (pl.col("p_kind") != "start"))) \
        .select("device", "tag", "cdb", "pos", pl.lit(None, dtype=pl.Int64).alias("start_ns"),
                pl.col("t_ns").alias("end_ns"), "status", "host_byte",
                pl.lit("done without start (trace started mid-command)").alias("reason"))
    return pl.concat([starts, orphans], how="diagonal_relaxed")


def ios_frame(cmds: pl.DataFrame) -> pl.DataFrame:
    c = cmds.sort(pl.coalesce("start_ns", "end_ns"), "pos")
    dec = scsi.decode_cdbs(c["cdb"])
    c = c.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("io"),
        dec["opcode"], dec["command"], dec["lba"], dec["blocks"], pl.col("reason").is_null().alias("paired"),
        pl.col("device").str.split(":").list.get(2, null_on_oob=True).cast(pl.Int8, strict=False).alias("target"),
        pl.col("device").str.split(":").list.get(3, null_on_oob=True).cast(pl.Int16, strict=False).alias("lun"))
    given = [k for k in ("response_ns", "bytes", "data_bytes") if k in c.columns]
    c = c.with_columns(
        (pl.coalesce("response_ns", pl.col("end_ns") - pl.col("start_ns")) if "response_ns" in given
         else pl.col("end_ns") - pl.col("start_ns")).alias("_response"),
        *[pl.col(k).alias(f"_{k}") for k in given if k != "response_ns"])
    c = c.with_columns(
        pl.when(pl.col("paired")).then(pl.col("_response")).alias("response_ns"),
        scsi.op_kind_expr(pl.col("opcode")).alias("op"),
        pl.lit(None, dtype=pl.Int16).alias("tag"),
        (pl.col("_bytes") if "bytes" in given else pl.lit(None, dtype=pl.Int64)).alias("bytes"),
        (pl.col("_data_bytes") if "data_bytes" in given else pl.lit(None, dtype=pl.Int64)).alias("data_bytes"),
        pl.lit(None, dtype=pl.Int32).alias("connections"),
        pl.lit(None, dtype=pl.Int32).alias("disconnects"),
        pl.col("paired").alias("complete"),
        pl.lit(False).alias("partial"),
        pl.col("tag").alias("kernel_tag"))
    cols = {**schema.IOS, **IOS_EXTRA, "kernel_tag": pl.Int64,
            **{k: v for k, v in COMMAND_EXTRA.items() if k in c.columns and k not in schema.IOS}}
    return c.select([pl.col(k).cast(v) for k, v in cols.items()])


def analyze(capture: Capture, options=None) -> Analysis:
    ev = capture.frames["events"]
    given = capture.frames.get("commands")      # whole commands from the parser (sgio)
    notes = [] if given is not None else [
        "SERVICE = at least one command between dispatch and done; kernel logs carry no "
        "transfer sizes, so bandwidth needs --io-size"]
    if given is not None:
        given, kept_note = _filtered(given, options)
        notes = list(capture.notes) + kept_note
        elapsed = int(given["end_ns"].max() or 0) if given.height else 0
    else:
        ev, elapsed, window_notes = _windowed(ev, options)
        notes += window_notes
    cmds = given if given is not None else (commands(ev) if ev.height else None)
    ios = ios_frame(cmds) if cmds is not None and cmds.height else \
        pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA, "kernel_tag": pl.Int64})
    if given is None:
        ios, selected_notes = _selected(ios, options)
        notes += selected_notes
    pieces = ios.filter(pl.col("paired")).select(
        "device", "io", "start_ns", "end_ns", pl.lit("SERVICE").alias("phase"), pl.col("data_bytes").alias("bytes"))
    segments = tiling.tile_pieces(pieces, elapsed)
    paired = int(ios["paired"].sum()) if ios.height else 0
    sized = given is not None and ios.height and ios["data_bytes"].is_not_null().any()
    data_bytes = int(ios["data_bytes"].sum()) if sized else None
    n_dev = segments["device"].n_unique() if segments.height else 0
    if n_dev > 1:
        notes.append(f"{n_dev} devices: percentages are of {n_dev} x the elapsed time")
    an = capture.anomalies
    bad = ios.filter(pl.col("reason").str.starts_with("timed out").fill_null(False))
    if bad.height:
        an = pl.concat([an, bad.select(pl.col("start_ns").alias("t_ns"), pl.lit("TIMEOUT").alias("kind"),
                                       pl.format("{} on {}", "command", "device").alias("detail"),
                                       pl.lit(None, dtype=pl.Utf8).alias("position"))])
    responses = ios.filter(pl.col("paired") & pl.col("response_ns").is_not_null())["response_ns"].to_numpy()
    tables = {**command_tables(ios, elapsed), **latency_tables({"response": responses})}
    declared = (*TABLES, *LATENCY_TABLES)
    if "driver_ns" in ios.columns:      # SG_IO: the driver's own duration beside the syscall's
        tables["srt_driver"] = srt_table(ios, "driver_ns")
        declared = (*declared, SRT_DRIVER)
    return Analysis(
        layer="scsilog", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=segments, ios=ios,
        anomalies=an, ios_completed=paired, data_bytes=data_bytes,
        category_order={"scsilog": list(STAGES)}, default_profile="scsilog",
        categories={"scsilog": tiling.categories(segments, STAGES, elapsed, paired)},
        notes=notes if given is not None else notes + list(capture.notes),   # (sgio's are in already)
        source={"path": capture.path, "format": capture.format, "log": capture.meta.get("log"),
                             **{k: capture.meta[k] for k in ("skipped_by_design",) if k in capture.meta}},
        declared=declared, tables=tables, no_normalized=("IDLE",))


def _windowed(ev: pl.DataFrame, options) -> tuple[pl.DataFrame, int, list[str]]:
    """--window: the events inside it, times from its start (a command cut by an edge is
    unpaired, with its reason). Returns (events, elapsed, notes)."""
    last = int(ev["t_ns"].max()) if ev.height else 0
    if options is None or options.window is None:
        return ev, last, []
    check_window(options.window, int(ev["t_ns"].min()) if ev.height else None, last)
    lo, hi = options.window
    lo, hi = max(lo or 0, 0), min(last if hi is None else hi, last)
    kept = ev.filter(pl.col("t_ns").is_between(lo, hi)).with_columns(pl.col("t_ns") - lo)
    return kept, hi - lo, [f"--window: the events from {lo / 1e9:g} s to {hi / 1e9:g} s only, times from the "
                           "window's start; commands cut by its edges are unpaired"]


def _selected(ios: pl.DataFrame, options) -> tuple[pl.DataFrame, list[str]]:
    """--device HOST:CHANNEL:ID:LUN, --target and --lun keep those commands; a value the log
    lacks is a usage error naming what it has."""
    if options is None:
        return ios, []
    if options.pids is not None:
        refuse("--pid", "kernel-log", "ftrace and dmesg SCSI events do not say which process issued a command")
    keep, given = pl.lit(True), []
    for flag, value, col in (("--device", options.device, "device"), ("--target", options.target, "target"),
                             ("--lun", options.lun, "lun")):
        if value is None:
            continue
        keep &= pl.col(col).cast(pl.Utf8) == str(value)
        given.append(f"{flag} {value}")
        if not ios.filter(keep).height:
            check_found(flag, value, ios[col].unique().to_list() if ios.height else [])
    if not given:
        return ios, []
    kept = ios.filter(keep)
    return kept, [f"{' '.join(given)}: {kept.height} of {ios.height} commands"]


def _filtered(cmds: pl.DataFrame, options) -> tuple[pl.DataFrame, list[str]]:
    """--pid, --device (a device name as the trace gives it) and --window (from the first
    command) keep those commands; times then start at the first kept command."""
    for flag, value in (("--target", options.target if options else None), ("--lun", options.lun if options else None)):
        if value is not None:
            refuse(flag, "sg log", "strace and sg3_utils name devices by path, not by target and LUN (use --device)")
    if options is None or (options.pids is None and options.device is None and options.window is None):
        return cmds, []
    keep = pl.lit(True)
    if options.pids is not None:
        if not all(p.isdigit() for p in options.pids):
            raise UsageError(f"--pid expects process ids for SG_IO traces, got {','.join(options.pids)!r}")
        keep &= pl.col("pid").is_in([int(p) for p in options.pids])
    if options.device is not None:
        keep &= pl.col("device") == str(options.device)
    if options.window is not None:
        lo, hi = options.window
        rel = pl.col("start_ns") - (cmds["start_ns"].min() or 0 if cmds.height else 0)
        keep &= (rel >= lo) if lo is not None else pl.lit(True)
        keep &= (rel < hi) if hi is not None else pl.lit(True)
    kept = cmds.filter(keep)
    if not kept.height:     # say what the log has, for the filter that emptied it
        for flag, value, col in (("--pid", ",".join(options.pids or ()), "pid"), ("--device", options.device, "device")):
            if value and not cmds.filter(pl.col(col).cast(pl.Utf8).is_in(str(value).split(","))).height:
                check_found(flag, value, cmds[col].unique().to_list())
        check_window(options.window, 0, int(cmds["end_ns"].max() or 0) - int(cmds["start_ns"].min() or 0))
    origin = int(kept["start_ns"].min()) if kept.height and kept["start_ns"].is_not_null().any() else 0
    kept = kept.with_columns(pl.col("start_ns") - origin, pl.col("end_ns") - origin)
    return kept, [f"{kept.height} of {cmds.height} SG_IO commands kept by --pid/--device/--window"]
