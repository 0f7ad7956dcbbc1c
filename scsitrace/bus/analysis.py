"""The bus layer's analysis: transitions -> phase runs (`runs`) -> the walk (`machine`) ->
the canonical tables (segments, ios, anomalies) and the facts the reports state about the
source (level, polarity, merged skew)."""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import schema
from ..errors import MissingSignal
from ..filters import check_found, refuse
from ..model import Analysis, Capture
from ..schema import SIGNAL_BIT
from ..stats import LATENCY_TABLES, latency_tables
from .. import bandwidth, series
from . import polarity, sampling, selection
from .machine import RAID1990, SCSI_PHASES, Walker
from .runs import BIT, RUN_SCHEMA, Reduced, RunReducer, reduce_stretches
from .window import WindowedChunks


def detect_polarity(runs: pl.DataFrame) -> tuple[bool, str]:
    """Is DB inverted? A (re)selection puts one or two ID bits on the bus: count which reading fits."""
    sel = runs.filter(((pl.col("key").cast(pl.Int32) & BIT["SEL"]) != 0) & pl.col("db_last").is_not_null())
    if not sel.height:
        return False, "no (re)selection with data bus samples; DB taken as captured"
    ones = np.unpackbits(sel["db_last"].to_numpy()[:, None], axis=1).sum(axis=1)
    plain = int(((ones == 1) | (ones == 2)).sum())
    inverted = int(((ones == 7) | (ones == 6)).sum())
    if inverted > plain:
        return True, f"low (inverted): {inverted} of {len(ones)} selections read as 1-2 ID bits only when inverted"
    return False, f"high (as captured): {plain} of {len(ones)} selections put 1-2 ID bits on the bus"


def select(capture: Capture, options) -> None:
    """The filters that cut the capture itself, before anything reads it: --window."""
    if options.device is not None:
        refuse("--device", "bus", "a bus trace names targets and LUNs (use --target ID, --lun LUN)")
    if options.pids is not None:
        refuse("--pid", "bus", "a bus trace does not record processes")
    if options.window is not None and capture.chunks is not None:
        capture.chunks = WindowedChunks(capture.chunks, options.window)


def analyze(capture: Capture, options) -> Analysis:
    meta = capture.meta
    signals = set(meta.get("signals", ()))
    missing = [s for s in schema.REQUIRED_SIGNALS if s not in signals]
    if missing:
        raise MissingSignal(f"{capture.path}: cannot decode bus phases without {' '.join(missing)} "
                            f"(captured: {' '.join(sorted(signals)) or 'nothing'})")
    has_req, has_ack = "REQ" in signals, "ACK" in signals
    reducer = RunReducer(settle_ns=options.settle_ns, has_req=has_req, has_ack=has_ack)
    given = _given_runs(capture, options, signals)
    if given is not None:
        reducer.stats, parts, flipped, line_note = given.stats, [given.runs], [], None
    else:
        times = polarity.LineTimes()
        parts = list(reducer.runs(times.counted(capture.chunks())))
        flipped, line_note = polarity.decide(times, signals)
    if flipped:       # read again, the other way (from the kept transitions when they all fit)
        mask = polarity.mask_of(flipped)
        again = (lambda: iter(times.kept)) if times.kept is not None else capture.chunks
        capture.chunks = polarity.Inverted(capture.chunks, mask)
        reducer = RunReducer(settle_ns=options.settle_ns, has_req=has_req, has_ack=has_ack)
        parts = list(reducer.runs(polarity.Inverted(again, mask)()))
        meta["inverted_detected"] = flipped
        capture.notes = [line_note, *capture.notes]
    runs = pl.concat(parts) if parts else pl.DataFrame(schema=RUN_SCHEMA)
    has_db = "DB" in signals and runs["db_last"].null_count() < runs.height
    if options.data_polarity == "auto":
        invert, polarity_note = detect_polarity(runs) if has_db else (False, "no data bus captured")
    else:
        invert = options.data_polarity == "low"
        polarity_note = f"{options.data_polarity} (given with --data-polarity)"
    walker = Walker(meta, invert, has_bytes=has_req or has_ack, has_db=has_db).walk(runs)
    return _analysis(capture, options, runs, walker, reducer, invert, polarity_note, has_db, (flipped, line_note))


def _given_runs(capture: Capture, options, signals) -> Reduced | None:
    """The runs of a capture that hands its transitions over summed per stretch (QEMU's
    synthesized handshakes), where they are what the transitions would give: no settle
    delay to fold, no window cutting them, no control line to read the other way."""
    stretches = capture.columns.get("stretches")
    if stretches is None or options.settle_ns != 0 or options.window is not None:
        return None
    given = reduce_stretches(stretches, [SIGNAL_BIT[name] for name in polarity.DECIDING])
    times = polarity.LineTimes()
    times.asserted = {name: given.asserted[SIGNAL_BIT[name]] for name in polarity.DECIDING}
    if given.stats.first_ns is not None:
        times.first_ns, times.last = given.stats.first_ns, (given.stats.last_ns, 0)
    flipped, _ = polarity.decide(times, signals)
    return None if flipped else given


ORDER = {"raid1990": RAID1990, "scsi": SCSI_PHASES}
FREE = {"Bus Free", "BUS FREE"}
DECLARED = (*LATENCY_TABLES, *bandwidth.TABLES, selection.TARGETS, selection.TARGET_CATEGORIES)


def _analysis(capture, options, runs, walker: Walker, reducer, invert, polarity_note, has_db, lines) -> Analysis:
    stats = reducer.stats
    segments = walker.segments()
    ios = walker.ios_frame()
    elapsed = (stats.last_ns - stats.first_ns) if stats.first_ns is not None else 0
    has_bytes = walker.has_bytes
    notes = []
    if stats.skew_merged:
        notes.append(f"{stats.skew_merged} transitional line states shorter than the settle delay "
                     f"({options.settle_ns} ns) were merged into the phase that follows")
    partial = ios.filter(pl.col("partial"))
    if partial.height:
        notes.append(f"{partial.height} I/O(s) began before the trace started (partial)")
    open_ios = ios.filter(~pl.col("complete") & pl.col("status").is_null())
    if walker.unmatched_completions:
        # which of the untied I/Os completed is unknown: say so in the table, not False
        ios = ios.with_columns(pl.when(~pl.col("complete") & pl.col("status").is_null()).then(None)
                               .otherwise(pl.col("complete")).alias("complete"))
        notes.append(f"{walker.unmatched_completions} of {walker.completions} completions could not be tied "
                     "to their command (without the data bus a reselection does not say which target); "
                     "their I/Os show complete = unknown")
    in_flight = open_ios.height - walker.unmatched_completions
    if in_flight > 0:
        notes.append(f"{in_flight} I/O(s) still in progress when the trace ends")
    if walker.recovering:
        notes.append("the trace ends while the analyzer waits for BUS FREE after a protocol violation")
    level = schema.level_of(capture.meta.get("signals", ()))
    source = {
        "path": capture.path, "format": capture.format, "level": level,
        "signals": capture.meta.get("signals"), "tick_ns": capture.meta.get("tick_ns"),
        "initiator": capture.meta.get("initiator"), "transitions": stats.transitions,
        "runs": runs.height, "settle_ns": options.settle_ns, "skew_merged": stats.skew_merged,
        "data_polarity": ("low" if invert else "high") if has_db else None,
        "data_polarity_reason": polarity_note if has_db else None,
        "meta": {k: v for k, v in capture.meta.items() if k not in ("signals", "tick_ns", "initiator", "level")},
    }
    if lines[0]:                    # control lines read the other way (bus/polarity.py)
        source["lines_inverted"], source["lines_polarity_reason"] = lines
    _check_selection(options, segments, ios)
    targets, target_categories = selection.target_tables(segments, ios, ORDER, FREE, elapsed, has_bytes)
    chosen = selection.select(segments, ios, options.target, options.lun, FREE)
    data_bytes = None
    if has_bytes:
        data_bytes = int(chosen.segments.filter(pl.col("phase").is_in(["DATA IN", "DATA OUT"]))["bytes"].sum() or 0)
    if chosen.others is not None:
        targets = targets.filter(pl.col("target") == options.target) if options.target is not None else targets
        notes.append(f"{_given(options)}: {chosen.ios.height} of {ios.height} I/Os; the bus-busy time of the "
                     f"others is shown as {chosen.others!r}")
    completed = walker.completions if chosen.others is None else int(chosen.ios["complete"].fill_null(False).sum())
    series_tables = {}
    if options.series:              # the figures over time, when a view draws them
        over_time = series.Series(stats.first_ns or 0)
        series.add_ios(over_time, chosen.ios, "bus")
        series_tables, series_notes = over_time.tables(elapsed)
        notes += series_notes
        if walker.unmatched_completions:
            notes.append(f"rates, queue depth and latency over time count the {over_time.n} I/Os tied to their "
                         f"completion, not the {walker.unmatched_completions} completions that could not be tied")
    notes += bandwidth.declare(series_tables, chosen.ios, thinned=False, options=options)
    review, sampling_notes = sampling.review(capture.meta, options.settle_ns)
    if review is not None:          # a sampled capture: what its sample period could not resolve
        source["sampling"] = review
        notes += sampling_notes
    return Analysis(
        layer="bus", capture=capture, elapsed_ns=elapsed, start_ns=stats.first_ns or 0,
        segments=chosen.segments, ios=chosen.ios, ios_completed=completed,
        anomalies=pl.concat([capture.anomalies.cast(schema.ANOMALIES), walker.anomalies()]),  # the reader's too
        data_bytes=data_bytes,
        category_order=ORDER, default_profile="raid1990",
        categories=chosen.categories(ORDER, elapsed, completed, tuple(FREE)),
        notes=notes + list(capture.notes), source=source, runs=runs,
        declared=(*DECLARED, *series.declared(options)),
        tables={**latency_tables({"response": _responses(chosen.ios)}),
                "targets": targets, "target_categories": target_categories, **series_tables},
        no_normalized=tuple(FREE),
    )


def _given(options) -> str:
    return " ".join(f"--{k} {v}" for k, v in (("target", options.target), ("lun", options.lun)) if v is not None)


def _responses(ios: pl.DataFrame) -> np.ndarray:
    """Response times of the completed I/Os (selection of the command to its completion)."""
    done = ios.filter(pl.col("complete").fill_null(False) & pl.col("response_ns").is_not_null())
    return done["response_ns"].to_numpy()


def _check_selection(options, segments: pl.DataFrame, ios: pl.DataFrame) -> None:
    """--target and --lun must name a target (LUN) the trace has."""
    if options.target is not None and options.target not in set(segments["target"].drop_nulls().to_list()):
        check_found("--target", options.target, segments["target"].unique().to_list())
    if options.lun is not None and options.lun not in set(ios["lun"].drop_nulls().to_list()):
        check_found("--lun", options.lun, ios["lun"].unique().to_list())
