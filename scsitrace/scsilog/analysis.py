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

import numpy as np
import polars as pl

from .. import bandwidth, model, schema, scsi, series, tiling
from ..streams import prefetched
from ..command_tables import SRT, TABLES
from ..errors import UsageError
from ..filters import check_found, check_window, refuse
from ..tables import Table
from ..model import Analysis, Capture
from ..stats import LATENCY_TABLES
from ..command_stream import Tables, Thinned, kept_segments, thinning_notes
from . import stream
from .completions import COMPLETIONS, completions_notes, completions_table
from .events import COMMAND_EXTRA, MLQUEUE

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
    out = _command_rows(begin.with_columns(
        end["t_ns"].alias("n_t"), end["status"].alias("n_status"), n_rtn=end["rtn"],
        n_host=end["host_byte"], reason=cmds["reason"], io=cmds["io"]))
    return out, carry, paired.next_io


def _command_rows(gathered: pl.DataFrame) -> pl.DataFrame:
    """Commands as `pair` gives them, from their first event's device, tag, cdb, pos and t_ns
    and their end's n_t, n_status, n_host and n_rtn (null: no end), `reason` (a code of
    PAIR_REASONS) and io (`pair_block`'s gathers, or the engine's rows)."""
    reason = pl.col("reason")
    done, no_start = reason == 0, reason == _NO_START
    host = pl.col("n_host")
    return gathered.select(
        "device", "tag", "cdb", "pos", pl.when(~no_start).then(pl.col("t_ns")).alias("start_ns"),
        pl.when(done | no_start).then(pl.col("n_t")).alias("end_ns"),
        # a command the host adapter could not deliver (DID_NO_CONNECT...) shows its host byte
        pl.when(done).then(pl.when(host.is_null() | (host == "DID_OK")).then(pl.col("n_status")).otherwise(host))
        .when(no_start).then(pl.col("n_status")).alias("status"),
        pl.when(done | no_start).then(host).alias("host_byte"),
        _reason_expr().alias("reason"),
        "io")


def _reason_expr() -> pl.Expr:
    """The reason of an unpaired command (null: paired) from its code and the rtn of its end."""
    rtn_name = pl.col("n_rtn").replace_strict(MLQUEUE, default=None, return_dtype=pl.Utf8)
    return pl.when(pl.col("reason") == _DISPATCH_ERROR).then(
        pl.format("dispatch error (rtn={}{})", pl.col("n_rtn"),
                  pl.when(rtn_name.is_not_null()).then(pl.concat_str(pl.lit(" "), rtn_name)).otherwise(pl.lit(""))))\
        .otherwise(pl.col("reason").replace_strict(_REASONS, return_dtype=pl.Utf8))


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
    if "commands" not in capture.frames:          # kernel-log events
        return _KernelRun(capture, options).run()
    return _SgioRun(capture, options).run()       # whole commands from the parser (sgio)


class _Sink:
    """The rows for the I/O sink in io order: rows behind a command still waiting for its end
    wait too (at most stream.HOLD of them; then they go as they are, said in a note)."""

    def __init__(self, sink, capture: Capture):
        self.sink, self.capture = sink, capture
        self.waiting, self.unordered = None, False

    def __call__(self, ios: pl.DataFrame, lowest) -> None:
        if self.waiting is not None and self.waiting.height:
            ios = pl.concat([self.waiting, ios]).sort("io") if ios.height else self.waiting
        self.waiting = None
        if lowest is not None and ios.height <= stream.HOLD:
            self.waiting, ios = ios.filter(pl.col("io") > lowest), ios.filter(pl.col("io") < lowest)
        elif lowest is not None:
            self.unordered = True
        if ios.height:
            self.sink(ios, self.capture)

    def notes(self) -> list[str]:
        if not self.unordered:
            return []
        return [f"per-command rows went to the I/O sink out of io order where more than {stream.HOLD} "
                "finished behind a command still waiting for its end"]


def _analysis(capture: Capture, t: Tables, elapsed: int, *, segments, ios, anomalies, totals: dict, n_dev: int,
              data_bytes, notes: list[str], declared: tuple, tables: dict, streamed: bool) -> Analysis:
    """The layer's Analysis from its tables (`t`), segments, kept rows (frames, or functions
    giving them), stage totals and notes."""
    analysis = Analysis(
        layer="scsilog", capture=capture, elapsed_ns=elapsed, start_ns=0, segments=segments, ios=ios,
        anomalies=anomalies, ios_completed=t.paired, data_bytes=data_bytes,
        category_order={"scsilog": list(STAGES)}, default_profile="scsilog",
        categories={"scsilog": tiling.category_table(totals, n_dev, STAGES, elapsed, t.paired)},
        notes=notes, source={"path": capture.path, "format": capture.format, "log": capture.meta.get("log"),
                             **{k: capture.meta[k] for k in ("skipped_by_design",) if k in capture.meta}},
        declared=declared, tables=tables, no_normalized=("IDLE",))
    analysis.ios_streamed = streamed
    return analysis


class _KernelRun:
    """One analysis of a kernel log: each block of events (after --window) goes to the
    compiled engine (native/src/text/scsilog_engine.rs), which pairs, adds up the tables,
    tiles, keeps the rows for the reports and counts the completions; back come the series'
    arrays and, for an I/O sink, the block's rows."""

    def __init__(self, capture: Capture, options):
        self.capture, self.options = capture, options
        self.sink = getattr(options, "ios_sink", None)
        self.to_sink = _Sink(self.sink, capture) if self.sink is not None else None
        self.series = series.Series()
        self.collect = getattr(options, "series", True)
        self.filters = self._selection(options)
        self.names: list[str] = []
        given = {col: str(value) for _, value, col in self.filters}
        self.engine = _text().ScsilogEngine(dict(
            decoder=scsi._decoder()[1], op_kind=_OP_KIND, device=given.get("device"), target=given.get("target"),
            lun=given.get("lun"), series=True, rows=self.sink is not None, keep=model.KEEP_IOS,
            collect=bandwidth.KEEP_VIEW_IOS if self.collect else 0))

    def run(self) -> Analysis:
        options = self.options
        notes = ["SERVICE = at least one command between dispatch and done; kernel logs carry no "
                 "transfer sizes, so bandwidth needs --io-size"]
        window = options.window if options is not None else None
        lo, hi = (max(window[0] or 0, 0), window[1]) if window is not None else (0, None)
        first = last = None
        for ev, held in _with_held(self.capture):
            if not ev.height:
                continue
            t0, t1 = ev["t_ns"].min(), ev["t_ns"].max()
            first, last = t0 if first is None else min(first, t0), t1 if last is None else max(last, t1)
            if window is not None:
                inside = pl.col("t_ns") >= lo if hi is None else pl.col("t_ns").is_between(lo, hi)
                ev = ev.filter(inside).with_columns(pl.col("t_ns") - lo)
            self._batch(self.engine.feed(ev, held - lo if held is not None else None), True)
        self._batch(self.engine.end(), False)
        last = last or 0
        if window is not None:
            check_window(window, first, last)
            hi = min(last if hi is None else hi, last)
            notes.append(f"--window: the events from {lo / 1e9:g} s to {hi / 1e9:g} s only, times from the "
                         "window's start; commands cut by its edges are unpaired")
            elapsed = hi - lo
        else:
            elapsed = last
        self.engine.finish(elapsed)
        r = self.engine.results()
        notes += _selection_notes(self.filters, pl.DataFrame(r.log_devices))
        return self._analysis(r, elapsed, notes)

    def _selection(self, options) -> list[tuple[str, object, str]]:
        """The selection the engine applies (`_filters`)."""
        return _filters(options)

    def _batch(self, b, more: bool) -> None:
        if b.series is not None:
            self._series(pl.DataFrame(b.series))
        if self.to_sink is not None:
            rows = pl.DataFrame(b.rows)
            ios = ios_frame(_command_rows(rows)) if rows.height else _EMPTY_IOS
            self.to_sink(ios, b.lowest if more else None)

    def _series(self, f: pl.DataFrame) -> None:
        """A block's paired commands to the series (series.add_ios' arrays: ops and devices as
        codes of the names present, in order of first appearance)."""
        if not f.height:
            return
        nbytes = f["bytes"].to_numpy() if "bytes" in f.columns else np.full(f.height, -1, np.int64)
        op = f["op"].to_numpy()
        op_codes, ops = _present(np.where(op < 0, _OTHER, op))
        dev = f["device"].fill_null(-1).to_numpy()
        dev_codes, devs = _present(dev)
        if len(self.names) <= int(dev.max()):
            self.names = self.engine.device_names()
        ids = [f"{schema.DEVICE_PREFIX['scsilog']}:{self.names[d]}" for d in devs]
        self.series.add(f["start_ns"].to_numpy(), f["end_ns"].to_numpy(), nbytes,
                        f["resp"].to_numpy(), f["lba"].fill_null(-1).to_numpy(),
                        (op_codes, [OP_NAMES[k] for k in ops]), device=(dev_codes, ids))

    def _analysis(self, r, elapsed: int, notes: list[str]) -> Analysis:
        """The analysis from what the engine added up (its `EngineResults`, `r`)."""
        capture, engine = self.capture, self.engine
        t = _tables(r, engine)
        phases = ["SERVICE", "~carried", tiling.IDLE]
        totals = {p: int(v) for p, v, n in zip(phases, r.totals, r.counts) if n and p != "~carried"}
        n_dev = r.n_dev
        if n_dev > 1:
            notes.append(f"{n_dev} devices: percentages are of {n_dev} x the elapsed time")
        notes += list(capture.notes)
        kept = Thinned(r.kept_rows, r.stride)
        tiler = Thinned(0, 1, kept=Thinned(0, r.segment_stride))
        notes += thinning_notes(kept, r.commands, tiler, t, self.sink, "the log")
        notes += self.to_sink.notes() if self.to_sink is not None else []
        ios = _Once(lambda: self._kept(r.kept_rows))
        tables = t.tables(elapsed)
        tables.pop("srt_driver", None)
        series_tables, series_notes = self.series.tables(elapsed)
        tables.update(series_tables)
        collected = _Collected(engine, r.collected_over) if self.collect else None
        notes += series_notes + bandwidth.declare(tables, ios, thinned=kept.thinned, options=self.options,
                                                  collected=collected)
        tables["completions"] = completions_table(pl.DataFrame(r.completions))
        notes += completions_notes(r.starts, r.ends, r.lost_senses)
        declared = (*TABLES, *LATENCY_TABLES, *series.SERIES_TABLES, *bandwidth.TABLES, COMPLETIONS)
        an = pl.concat([capture.anomalies, *t.timeout_anomalies()]) if t.timeouts else capture.anomalies
        segments = _Once(lambda: kept_segments(engine.segments(), phases))
        return _analysis(capture, t, elapsed, segments=segments, ios=ios, anomalies=an, totals=totals, n_dev=n_dev,
                         data_bytes=None, notes=notes, declared=declared, tables=tables,
                         streamed=self.sink is not None)

    def _kept(self, n: int) -> pl.DataFrame:
        if not n:
            return _EMPTY_IOS
        return ios_frame(_command_rows(pl.DataFrame(self.engine.kept())))


class _Once:
    """A function called once, its result kept (the engine's kept rows are read out once)."""

    def __init__(self, make):
        self.make, self.done = make, None

    def __call__(self):
        if self.done is None:
            self.done = (self.make(),)
        return self.done[0]


class _Collected:
    """bandwidth.Collected of the engine: the completed commands it kept for the views."""

    def __init__(self, engine, over: bool):
        self.engine, self.over, self.limit = engine, over, bandwidth.KEEP_VIEW_IOS
        self.frame = _Once(self._frame)

    def _frame(self) -> pl.DataFrame:
        c = pl.DataFrame(self.engine.collected())
        names = pl.Series([d if d else "all" for d in self.engine.device_names()], dtype=pl.Utf8)
        return c.select(
            "io", names.gather(c["device"]).alias("device"),
            pl.Series(OP_NAMES, dtype=pl.Utf8).gather(c["op"]).alias("op"), "bytes", "start_ns", "end_ns", "response_ns",
        ).sort("start_ns", maintain_order=True)


def _tables(r, engine) -> Tables:
    """command_stream.Tables from what the engine added up (its `EngineResults`)."""
    devices = pl.DataFrame(r.devices)
    names = scsi.decode_cdbs(pl.Series([bytes(c) for c in r.srt_cdb], dtype=pl.Binary))["command"].to_list()
    reasons = pl.DataFrame(r.reasons).select(_reason_expr().alias("reason"), "commands") \
        .group_by("reason").agg(pl.col("commands").sum())
    timeouts = []
    rows = pl.DataFrame(engine.timeouts())
    if rows.height:
        timeouts.append(ios_frame(_command_rows(rows)).select(
            pl.col("start_ns").alias("t_ns"), pl.lit("TIMEOUT").alias("kind"),
            pl.format("{} on {}", "command", "device").alias("detail"),
            pl.lit(None, dtype=pl.Utf8).alias("position"), "io"))
    return Tables.of(
        reasons=dict(reasons.iter_rows()),
        devices={name: [n, p, b, False, rsum, rn] for name, n, p, b, rsum, rn in devices.iter_rows()},
        srt={op: [s, name, io] for op, s, name, io in zip(r.srt_opcodes, r.srt_samples, names, r.srt_io)},
        latency=r.latency, paired=r.paired, data_bytes=0, sized=False, timeouts=timeouts)


def _present(codes: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Codes (-1: none) as indexes into the list of the codes present, in order of first
    appearance (what series.Series makes of names)."""
    top = int(codes.max()) if len(codes) else -1
    if top < 0:
        return codes, []
    if top < 64:        # (a few ops and devices: a pass per code, no sort)
        firsts = [(int(np.argmax(hit)), v) for v in range(top + 1) for hit in [codes == v] if hit.any()]
        values = np.array([v for _, v in sorted(firsts)], np.int64)
    else:
        known = codes[codes >= 0]
        values, first = np.unique(known, return_index=True)
        values = values[np.argsort(first)]
    local = np.full(int(values.max()) + 1, -1, np.int64)
    local[values] = np.arange(len(values))
    return np.where(codes >= 0, local[np.maximum(codes, 0)], -1), values.tolist()


OP_NAMES = ["read", "write", "flush", "discard", "other"]
_OTHER = OP_NAMES.index("other")
# scsi.op_kind_expr's rule, per opcode
_OP_KIND = [next((k for k, ops in enumerate((scsi.READ_OPS, scsi.WRITE_OPS, scsi.FLUSH_OPS, scsi.DISCARD_OPS))
                  if op in ops), _OTHER) for op in range(256)]


def _with_held(capture: Capture):
    """The capture's chunks, each with the parser's `held_from` as it stood when the chunk was
    made, read ahead in a worker thread (the scan releases the GIL: it runs while this thread
    pairs and adds up the block before)."""
    def chunks():
        for ev in capture.chunks():
            yield ev, getattr(capture, "held_from", None)
    return prefetched(chunks()) if capture.chunks else chunks()


def _filters(options) -> list[tuple[str, object, str]]:
    """--device HOST:CHANNEL:ID:LUN, --target and --lun (flag, value, column) as given;
    --pid refused (kernel logs do not say which process issued a command)."""
    if options is None:
        return []
    if options.pids is not None:
        refuse("--pid", "kernel-log", "ftrace and dmesg SCSI events do not say which process issued a command")
    return [(flag, value, col) for flag, value, col in (
        ("--device", options.device, "device"), ("--target", options.target, "target"),
        ("--lun", options.lun, "lun")) if value is not None]


def _selection_notes(filters, devices: pl.DataFrame) -> list[str]:
    """What --device/--target/--lun kept (`devices`: every device of the log with its
    commands); a value the log lacks is a usage error naming what it has."""
    if not filters:
        return []
    devices = devices.filter(pl.col("commands") > 0)
    total = int(devices["commands"].sum())
    keep = pl.lit(True)
    kept = []
    for flag, value, col in filters:
        # target and LUN as the log prints them (64-bit LUNs: zfcp's 1084113024)
        have = pl.col("device").str.split(":").list.get({"target": 2, "lun": 3}[col], null_on_oob=True) \
            if col != "device" else pl.col(col)
        keep &= have == str(value)
        n = int(devices.filter(keep)["commands"].sum())
        kept.append(n)
        if not n:
            check_found(flag, value, set(devices.select(have)["device"].to_list()))
    given = " ".join(f"{flag} {value}" for flag, value, _ in filters)
    return [f"{given}: {kept[-1]} of {total} commands"]


def _sgio_batches(run: "_SgioRun"):
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
    total = kept = 0
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
        latest = cmds["start_ns"].max() if cmds.height else None
        waiting = [v - (origin or 0) for v in (held,) if v is not None] + ([latest] if latest is not None else [])
        yield cmds, min(waiting) if waiting else None
    run.notes[:0] = list(run.capture.notes)
    if filtered:
        if not kept:     # say what the log has, for the filter that emptied it
            for (flag, value, col), n in zip(checks, found):
                if not n:
                    check_found(flag, value, values[col])
            check_window(options.window, 0, int(end or 0) - int(start or 0))
        run.notes.append(f"{kept} of {total} SG_IO commands kept by --pid/--device/--window")


_EMPTY_IOS = pl.DataFrame(schema={**schema.IOS, **IOS_EXTRA, "kernel_tag": pl.Int64})


class _SgioRun(_KernelRun):
    """One analysis of the sgio parser's whole commands (strace SG_IO, sg3_utils): each batch
    (after --pid/--device/--window) goes to the same compiled engine (`feed_commands`), which
    numbers, adds up the tables (with the driver's own SRT), tiles and picks the rows to keep;
    the kept rows themselves stay here, the batch's few, until the end."""

    def _selection(self, options) -> list:
        """None in the engine: --pid/--device/--window keep whole commands before it (`_sgio_batches`)."""
        return []

    def __init__(self, capture: Capture, options):
        super().__init__(capture, options)
        self.elapsed, self.notes, self.parts, self.stride = 0, [], [], 1

    def run(self) -> Analysis:
        for cmds, before in _sgio_batches(self):
            if not cmds.height:
                self.engine.tile(before)
                continue
            b = self.engine.feed_commands(cmds.select(_given_columns(cmds.columns)), before)
            if b.series is not None:
                self._series(pl.DataFrame(b.series))
            self._keep(cmds, pl.DataFrame(b.kept), b.stride)
            if self.to_sink is not None:
                self.to_sink(ios_frame(cmds, b.first_io), None)
        self.engine.finish(self.elapsed)
        return self._sgio_analysis(self.engine.results())

    def _keep(self, cmds: pl.DataFrame, kept: pl.DataFrame, stride: int) -> None:
        """The batch's rows the engine keeps (copied out, so the batch's buffers can go), the
        earlier ones thinned to its stride."""
        if stride != self.stride and self.parts:
            self.parts = [pl.concat(self.parts).filter(pl.col("io") % stride == 0)]
        self.stride = stride
        if kept.height:
            rows = cmds[kept["row"]].with_columns(kept["io"])
            self.parts.append(pl.from_arrow(rows.to_arrow(compat_level=pl.CompatLevel.oldest())))

    def _sgio_analysis(self, r) -> Analysis:
        capture, engine, elapsed = self.capture, self.engine, self.elapsed
        t = _sgio_tables(r, engine)
        phases = ["SERVICE", "~carried", tiling.IDLE]
        totals = {p: int(v) for p, v, n in zip(phases, r.totals, r.counts) if n and p != "~carried"}
        notes, n_dev = self.notes, r.n_dev
        if n_dev > 1:
            notes.append(f"{n_dev} devices: percentages are of {n_dev} x the elapsed time")
        kept = Thinned(r.kept_rows, r.stride)
        notes += thinning_notes(kept, r.commands, Thinned(0, 1, kept=Thinned(0, r.segment_stride)), t, self.sink,
                                "the log")
        notes += self.to_sink.notes() if self.to_sink is not None else []
        parts = self.parts
        ios = _Once(lambda: ios_frame(pl.concat(parts)) if parts else _EMPTY_IOS)
        tables = t.tables(elapsed)
        series_tables, series_notes = self.series.tables(elapsed)
        tables.update(series_tables)
        collected = _Collected(engine, r.collected_over) if self.collect else None
        notes += series_notes + bandwidth.declare(tables, ios, thinned=kept.thinned, options=self.options,
                                                  collected=collected)
        declared = (*TABLES, *LATENCY_TABLES, *series.SERIES_TABLES, *bandwidth.TABLES)
        if r.commands:      # SG_IO: the driver's own duration beside the syscall's
            declared = (*declared, SRT_DRIVER)
        else:
            tables.pop("srt_driver", None)
        an = pl.concat([capture.anomalies, *t.timeout_anomalies()]) if t.timeouts else capture.anomalies
        segments = _Once(lambda: kept_segments(engine.segments(), phases))
        return _analysis(capture, t, elapsed, segments=segments, ios=ios, anomalies=an, totals=totals, n_dev=n_dev,
                         data_bytes=t.data_bytes if t.sized else None, notes=notes, declared=declared,
                         tables=tables, streamed=self.sink is not None)


def _sgio_tables(r, engine) -> Tables:
    """command_stream.Tables from what the engine added up of whole commands."""
    def named(opcodes, samples, ios, cdbs):
        names = scsi.decode_cdbs(pl.Series([bytes(c) for c in cdbs], dtype=pl.Binary))["command"].to_list()
        return {op: [s, name, io] for op, s, name, io in zip(opcodes, samples, names, ios)}
    devices = pl.DataFrame(r.devices)
    timeouts = []
    rows = pl.DataFrame(engine.command_timeouts())
    if rows.height:
        rows = rows.with_columns(scsi.decode_cdbs(rows["cdb"])["command"])
        timeouts.append(rows.select(
            pl.col("start_ns").alias("t_ns"), pl.lit("TIMEOUT").alias("kind"),
            pl.format("{} on {}", "command", "device").alias("detail"),
            pl.lit(None, dtype=pl.Utf8).alias("position"), "io"))
    return Tables.of(
        reasons=dict(pl.DataFrame(r.reason_texts).iter_rows()),
        devices={name: [n, p, b, sized, rsum, rn]
                 for (name, n, p, b, rsum, rn), sized in zip(devices.iter_rows(), r.sized)},
        srt=named(r.srt_opcodes, r.srt_samples, r.srt_io, r.srt_cdb),
        driver=named(r.driver_opcodes, r.driver_samples, [0] * len(r.driver_cdb), r.driver_cdb),
        latency=r.latency, paired=r.paired, data_bytes=r.data_bytes, sized=r.any_sized, timeouts=timeouts)


def _given_columns(have) -> list[pl.Expr]:
    """The sgio parser's columns `feed_commands` reads (null where the parser has none)."""
    ints = ("pos", "start_ns", "end_ns", "response_ns", "bytes", "data_bytes", "driver_ns")
    return [pl.col("device").cast(pl.Utf8), pl.col("cdb").cast(pl.Binary),
            (pl.col("reason") if "reason" in have else pl.lit(None)).cast(pl.Utf8).alias("reason"),
            *[(pl.col(k) if k in have else pl.lit(None)).cast(pl.Int64).alias(k) for k in ints]]
