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

from .. import bandwidth, schema, scsi, series, tiling
from ..streams import prefetched
from ..command_tables import SRT, TABLES
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..tables import Table
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES
from ..command_stream import thinning_notes
from . import stream
from .completions import COMPLETIONS, Completions
from .events import COMMAND_EXTRA, EVENTS, MLQUEUE

SRT_DRIVER = Table("srt_driver", SRT.schema, "SRT per opcode over the driver's own durations (sg_io_hdr duration)",
                   json_columns=SRT.json_columns, json_names=SRT.json_names)

STAGES = ("SERVICE", "IDLE")
IOS_EXTRA = {"response_ns": pl.Int64, "paired": pl.Boolean, "reason": pl.Utf8, "host_byte": pl.Utf8}


def commands(events: pl.DataFrame) -> pl.DataFrame:
    """One row per command: start event joined to the end event that follows it; the paired
    and unpaired starts by (device, tag, start, line), then the dones without start."""
    cmds = pair(events, None, 0, final=True)[0].drop("io")
    no_start = pl.col("start_ns").is_null() & pl.col("end_ns").is_not_null()
    return cmds.sort(no_start, "device", "tag", pl.coalesce("start_ns", "end_ns"), "pos", nulls_last=True)


def pair(events: pl.DataFrame, carry: pl.DataFrame | None, next_io: int, final: bool = False):
    """One block of events (with the starts `carry`ed from earlier blocks) -> (commands that
    are finished, in io order; starts still waiting for their next event; the next io
    number). The pairing is one compiled pass (`native/src/text/scsilog_pair.rs`: which
    event ends which start, the unpaired reasons, the numbering); here its rows are gathered."""
    e = events.with_columns(pl.lit(None, dtype=pl.Int64).alias("io"))
    if carry is not None and carry.height:
        e = pl.concat([carry, e])
    # (an empty frame has a row added: an empty Arrow string view crosses with a dangling buffer)
    keys = e.select("t_ns", "kind", "device", "tag", "pos", "io") if e.height else _NO_EVENT
    paired = _text().pair_block(keys, next_io, final)
    cmds, waiting = pl.DataFrame(paired.commands), pl.DataFrame(paired.waiting)
    carry = e.select(pl.col(events.columns).gather(waiting["row"])).with_columns(waiting["io"])
    begin = e.select(pl.col("device", "tag", "cdb", "pos", "t_ns").gather(cmds["row"]))
    end = e.select(pl.col("t_ns", "status", "host_byte", "rtn").gather(cmds["end"]))     # null: no end
    reason = pl.col("reason")
    done, no_start = reason == 0, reason == _NO_START
    rtn_name = pl.col("n_rtn").replace_strict(MLQUEUE, default=None, return_dtype=pl.Utf8)
    host = pl.col("n_host")
    out = begin.with_columns(
        end["t_ns"].alias("n_t"), end["status"].alias("n_status"), n_rtn=end["rtn"],
        n_host=end["host_byte"], reason=cmds["reason"], io=cmds["io"]).select(
        "device", "tag", "cdb", "pos", pl.when(~no_start).then(pl.col("t_ns")).alias("start_ns"),
        pl.when(done | no_start).then(pl.col("n_t")).alias("end_ns"),
        # a command the host adapter could not deliver (DID_NO_CONNECT...) shows its host byte
        pl.when(done).then(pl.when(host.is_null() | (host == "DID_OK")).then(pl.col("n_status")).otherwise(host))
        .when(no_start).then(pl.col("n_status")).alias("status"),
        pl.when(done | no_start).then(host).alias("host_byte"),
        pl.when(reason == _DISPATCH_ERROR).then(
            pl.format("dispatch error (rtn={}{})", pl.col("n_rtn"),
                      pl.when(rtn_name.is_not_null()).then(pl.concat_str(pl.lit(" "), rtn_name)).otherwise(pl.lit(""))))
        .otherwise(pl.col("reason").replace_strict(_REASONS, return_dtype=pl.Utf8)).alias("reason"),
        "io")
    return out, carry, paired.next_io


def _text():
    from .._native import text
    return text


# an event of no kind (ends nothing, begins nothing), for a block without events
_NO_EVENT = pl.DataFrame({"t_ns": [0], "kind": [""], "device": [""], "tag": [None], "pos": [0], "io": [None]},
                         schema={"t_ns": pl.Int64, "kind": pl.Utf8, "device": pl.Utf8, "tag": pl.Int64, "pos": pl.Int64,
                                 "io": pl.Int64})
_REASONS = {k: (v or None) for k, v in enumerate(_text().PAIR_REASONS)}
_DISPATCH_ERROR = next(k for k, v in _REASONS.items() if v == "dispatch error")
_NO_START = next(k for k, v in _REASONS.items() if v and v.startswith("done without start"))


def ios_frame(cmds: pl.DataFrame, first_io: int = 0) -> pl.DataFrame:
    """The ios rows of commands: numbered from `first_io` in (start, line) order unless they
    carry their `io` already."""
    if "io" in cmds.columns:
        c = cmds.sort("io")
    else:
        c = cmds.sort(pl.coalesce("start_ns", "end_ns"), "pos").with_columns(
            pl.int_range(first_io, first_io + pl.len(), dtype=pl.Int64).alias("io"))
    dec = scsi.decode_cdbs(c["cdb"])
    c = c.with_columns(
        dec["opcode"], dec["command"], dec["lba"], dec["blocks"], pl.col("reason").is_null().alias("paired"),
        _device_part(c["device"], 2, pl.Int8).alias("target"), _device_part(c["device"], 3, pl.Int16).alias("lun"))
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


def _device_part(device: pl.Series, k: int, dtype) -> pl.Series:
    """Part `k` of each H:C:T:L device as `dtype` (null where there is none or it does not
    fit), read once per distinct device (a log has few)."""
    devices = device.unique().drop_nulls()
    part = devices.str.split(":").list.get(k, null_on_oob=True).cast(dtype, strict=False)
    return device.replace_strict(devices, part, default=None, return_dtype=dtype)


def analyze(capture: Capture, options=None) -> Analysis:
    """Stream the capture's blocks (kernel-log events, or the sgio parser's whole commands)
    through the pairing, the tables and the tiling; keep at most KEEP_IOS ios rows (and
    hand every batch to `options.ios_sink` when set)."""
    sgio = "commands" in capture.frames           # whole commands from the parser (sgio)
    run = _Run(capture, options, sgio)
    batches = _sgio_batches(run) if sgio else _kernel_batches(run)
    for ios, before, lowest in batches:
        run.add(ios, before, lowest)
    return run.finish()


class _Run:
    """One analysis as the batches of finished commands come."""

    def __init__(self, capture: Capture, options, sgio: bool):
        self.capture, self.options, self.sgio = capture, options, sgio
        self.tables, self.tiler, self.kept = stream.Tables(driver=sgio), stream.Tiler(), stream.Kept("io")
        self.sink = getattr(options, "ios_sink", None)
        self.elapsed, self.rows, self.notes = 0, 0, []
        self.series = series.Series()
        self.collected = bandwidth.Collected() if getattr(options, "series", True) else None
        self.waiting, self.unordered = None, False
        self.completions = None if sgio else Completions(options)

    def add(self, ios: pl.DataFrame, before, lowest) -> None:
        """A batch of finished commands; `before`: no command still to come starts earlier;
        `lowest`: none still to come has a lower io (None: the log has ended)."""
        if ios.height:
            self.rows += ios.height
            self.tables.add(ios)
            self.kept.add(ios)
            series.add_ios(self.series, ios, "scsilog")
            if self.collected is not None:
                self.collected.add(ios)
        if self.sink is not None:
            self._to_sink(ios, lowest)
        self.tiler.add(ios.filter(pl.col("paired")).select(
            "device", "io", "start_ns", "end_ns", pl.col("data_bytes").alias("bytes")), before)

    def _to_sink(self, ios: pl.DataFrame, lowest) -> None:
        """The sink gets the rows in io order: rows behind a command still waiting for its
        end wait too (at most stream.HOLD of them; then they go as they are, said in a note)."""
        if self.waiting is not None and self.waiting.height:
            ios = pl.concat([self.waiting, ios]).sort("io") if ios.height else self.waiting
        self.waiting = None
        if lowest is not None and ios.height <= stream.HOLD:
            self.waiting, ios = ios.filter(pl.col("io") > lowest), ios.filter(pl.col("io") < lowest)
        elif lowest is not None:
            self.unordered = True
        if ios.height:
            self.sink(ios, self.capture)

    def finish(self) -> Analysis:
        capture, t = self.capture, self.tables
        elapsed = self.elapsed
        segments, totals, n_dev = self.tiler.finish(elapsed)
        notes = self.notes
        if n_dev > 1:
            notes.append(f"{n_dev} devices: percentages are of {n_dev} x the elapsed time")
        if not self.sgio:
            notes += list(capture.notes)
        notes += thinning_notes(self.kept, self.rows, self.tiler, t, self.sink, "the log")
        if self.unordered:
            notes.append(f"per-command rows went to the I/O sink out of io order where more than {stream.HOLD} "
                         "finished behind a command still waiting for its end")
        empty = {**schema.IOS, **IOS_EXTRA, "kernel_tag": pl.Int64}
        ios = self.kept.frame(pl.DataFrame(schema=empty), ["io"])
        tables = t.tables(elapsed)
        series_tables, series_notes = self.series.tables(elapsed)
        tables.update(series_tables)
        notes += series_notes + bandwidth.declare(tables, ios, thinned=self.kept.thinned, options=self.options,
                                                           collected=self.collected)
        declared = (*TABLES, *LATENCY_TABLES, *series.SERIES_TABLES, *bandwidth.TABLES)
        if self.completions is not None:
            tables["completions"], declared = self.completions.table(), (*declared, COMPLETIONS)
            notes += self.completions.notes()
        if self.sgio and self.rows:      # SG_IO: the driver's own duration beside the syscall's
            declared = (*declared, SRT_DRIVER)
        else:
            tables.pop("srt_driver", None)
        an = pl.concat([capture.anomalies, *t.timeout_anomalies()]) if t.timeouts else capture.anomalies
        analysis = Analysis(
            layer="scsilog", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=segments, ios=ios,
            anomalies=an, ios_completed=t.paired, data_bytes=t.data_bytes if self.sgio and t.sized else None,
            category_order={"scsilog": list(STAGES)}, default_profile="scsilog",
            categories={"scsilog": tiling.category_table(totals, n_dev, STAGES, elapsed, t.paired)},
            notes=notes, source={"path": capture.path, "format": capture.format, "log": capture.meta.get("log"),
                                 **{k: capture.meta[k] for k in ("skipped_by_design",) if k in capture.meta}},
            declared=declared, tables=tables, no_normalized=("IDLE",))
        analysis.ios_streamed = self.sink is not None
        return analysis


def _kernel_batches(run: _Run):
    """Kernel-log events, block by block: --window, dispatch -> done pairing, --device/
    --target/--lun; yields (ios rows, the earliest time a command still to come can start)."""
    options = run.options
    run.notes.append("SERVICE = at least one command between dispatch and done; kernel logs carry no "
                     "transfer sizes, so bandwidth needs --io-size")
    select = _Selection(options)
    window = options.window if options is not None else None
    lo, hi = (max(window[0] or 0, 0), window[1]) if window is not None else (0, None)
    first = last = seen = None
    carry, next_io = None, 0
    for ev, held in _with_held(run.capture):
        if not ev.height:
            continue
        t0, t1 = int(ev["t_ns"].min()), int(ev["t_ns"].max())
        first, last = t0 if first is None else min(first, t0), t1 if last is None else max(last, t1)
        if window is not None:
            inside = pl.col("t_ns") >= lo if hi is None else pl.col("t_ns").is_between(lo, hi)
            ev = ev.filter(inside).with_columns(pl.col("t_ns") - lo)
        run.completions.add(ev)
        ev = ev.filter(pl.col("kind") != "sense")
        if ev.height:
            seen = int(ev["t_ns"].max()) if seen is None else max(seen, int(ev["t_ns"].max()))
        cmds, carry, next_io = pair(ev, carry, next_io)
        waiting = [v for v in (seen, held - lo if held is not None else None,
                               int(carry["t_ns"].min()) if carry.height else None) if v is not None]
        lowest = int(carry["io"].min()) if carry.height else next_io
        yield select(ios_frame(cmds)) if cmds.height else _EMPTY_IOS, min(waiting) if waiting else None, lowest
    cmds, carry, next_io = pair(_EMPTY_EVENTS, carry, next_io, final=True)
    yield select(ios_frame(cmds)) if cmds.height else _EMPTY_IOS, None, None
    last = last or 0
    if window is not None:
        check_window(window, first, last)
        hi = min(last if hi is None else hi, last)
        run.notes.append(f"--window: the events from {lo / 1e9:g} s to {hi / 1e9:g} s only, times from the "
                         "window's start; commands cut by its edges are unpaired")
        run.elapsed = hi - lo
    else:
        run.elapsed = last
    run.notes += select.finish()


def _with_held(capture: Capture):
    """The capture's chunks, each with the parser's `held_from` as it stood when the chunk was
    made, read ahead in a worker thread (the scan releases the GIL: it runs while this thread
    pairs and adds up the block before)."""
    def chunks():
        for ev in capture.chunks():
            yield ev, getattr(capture, "held_from", None)
    return prefetched(chunks()) if capture.chunks else chunks()


class _Selection:
    """--device HOST:CHANNEL:ID:LUN, --target and --lun keep those commands; a value the log
    lacks is a usage error naming what it has (once the log has been read)."""

    def __init__(self, options):
        self.filters = []
        if options is None:
            return
        if options.pids is not None:
            refuse("--pid", "kernel-log", "ftrace and dmesg SCSI events do not say which process issued a command")
        self.filters = [(flag, value, col) for flag, value, col in (
            ("--device", options.device, "device"), ("--target", options.target, "target"),
            ("--lun", options.lun, "lun")) if value is not None]
        self.kept = [0] * len(self.filters)
        self.values = {col: set() for _, _, col in self.filters}
        self.total = 0

    def __call__(self, ios: pl.DataFrame) -> pl.DataFrame:
        if not self.filters:
            return ios
        self.total += ios.height
        keep = pl.lit(True)
        for k, (_, value, col) in enumerate(self.filters):
            # target and LUN as the log prints them (64-bit LUNs: zfcp's 1084113024)
            have = pl.col("device").str.split(":").list.get({"target": 2, "lun": 3}[col], null_on_oob=True) \
                if col != "device" else pl.col(col)
            self.values[col].update(ios.select(have)["device"].unique().to_list())
            keep &= have == str(value)
            self.kept[k] += ios.filter(keep).height
        return ios.filter(keep)

    def finish(self) -> list[str]:
        for (flag, value, col), n in zip(self.filters, self.kept):
            if not n:
                check_found(flag, value, self.values[col])
        if not self.filters:
            return []
        given = " ".join(f"{flag} {value}" for flag, value, _ in self.filters)
        return [f"{given}: {self.kept[-1]} of {self.total} commands"]


def _sgio_batches(run: _Run):
    """The sgio parser's commands, block by block: --pid, --device (a device name as the trace
    gives it) and --window (from the first command) keep those commands; times then start at
    the first kept command."""
    options = run.options
    for flag, value in (("--target", options.target if options else None), ("--lun", options.lun if options else None)):
        if value is not None:
            refuse(flag, "sg log", "strace and sg3_utils name devices by path, not by target and LUN (use --device)")
    filtered = options is not None and (options.pids is not None or options.device is not None
                                        or options.window is not None)
    keep = pl.lit(True)
    if filtered and options.pids is not None:
        if not all(p.isdigit() for p in options.pids):
            raise UsageError(f"--pid expects process ids for SG_IO traces, got {','.join(options.pids)!r}")
        keep &= pl.col("pid").is_in([int(p) for p in options.pids])
    if filtered and options.device is not None:
        keep &= pl.col("device") == str(options.device)
    if filtered and options.window is not None:
        lo, hi = options.window
        keep &= (pl.col("start_ns") >= lo) if lo is not None else pl.lit(True)   # from the first command (0)
        keep &= (pl.col("start_ns") < hi) if hi is not None else pl.lit(True)
    checks = [(flag, value, col) for flag, value, col in (
        ("--pid", ",".join(options.pids or ()) if filtered else None, "pid"),
        ("--device", options.device if filtered else None, "device")) if value]
    found, values = [0] * len(checks), {col: set() for _, _, col in checks}
    total = kept = next_io = 0
    origin = end = start = None
    chunks = _with_held(run.capture) if run.capture.chunks else [(run.capture.frames["commands"], None)]
    for cmds, held in chunks:
        total += cmds.height
        if filtered and cmds.height:
            for k, (_, value, col) in enumerate(checks):
                values[col].update(cmds[col].unique().to_list())
                found[k] += cmds.filter(pl.col(col).cast(pl.Utf8).is_in(str(value).split(","))).height
            e, s = cmds["end_ns"].max(), cmds["start_ns"].min()
            end = e if end is None or (e is not None and e > end) else end
            start = s if start is None or (s is not None and s < start) else start
            cmds = cmds.filter(keep)
            if origin is None and cmds["start_ns"].is_not_null().any():
                origin = int(cmds["start_ns"].min())
            cmds = cmds.with_columns(pl.col("start_ns") - (origin or 0), pl.col("end_ns") - (origin or 0))
        kept += cmds.height
        if cmds.height and cmds["end_ns"].is_not_null().any():
            run.elapsed = max(run.elapsed, int(cmds["end_ns"].max()))
        ios = ios_frame(cmds, next_io) if cmds.height else _EMPTY_IOS
        next_io += cmds.height
        latest = ios["start_ns"].max() if ios.height else None
        waiting = [v - (origin or 0) for v in (held,) if v is not None] + ([latest] if latest is not None else [])
        yield ios, min(waiting) if waiting else None, None
    run.notes[:0] = list(run.capture.notes)
    if filtered:
        if not kept:     # say what the log has, for the filter that emptied it
            for (flag, value, col), n in zip(checks, found):
                if not n:
                    check_found(flag, value, values[col])
            check_window(options.window, 0, int(end or 0) - int(start or 0))
        run.notes.append(f"{kept} of {total} SG_IO commands kept by --pid/--device/--window")


_EMPTY_EVENTS = pl.DataFrame(schema=EVENTS)
_EMPTY_IOS = pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA, "kernel_tag": pl.Int64})
