"""Attribution's rows: the handshakes collected per segment (`_PerSegment`), grouped into the
steps of the I/O sequence (the rows of the paper's Table 11), periodic pauses inside data
transfers, and the totals per component; `_report` assembles the `attribute --json` dict."""
from __future__ import annotations

from typing import Protocol

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.model import Analysis
from . import _handshakes as _hs


class Collected(Protocol):
    """What the rows are read from: the handshakes attribution.Collector gathered (per run
    columns by _handshakes index, the wait histogram, the long-wait thresholds, kept edges)."""

    hist: np.ndarray
    kept: list

    def column(self, index: int) -> np.ndarray: ...

    def long_thresholds(self) -> dict[int, float]: ...


REQ = 1 << schema.SIGNAL_BIT["REQ"]
ACK = 1 << schema.SIGNAL_BIT["ACK"]
REQ_UP, ACK_UP, REQ_DOWN, ACK_DOWN = 0, 1, 2, 3   # edge codes, in handshake order
TARGET, INITIATOR = 0, 1
DATA_OUT_KEY = 1 << schema.SIGNAL_BIT["BSY"]                        # phase keys (bus.runs.PHASE_KEY)
DATA_IN_KEY = DATA_OUT_KEY | 1 << schema.SIGNAL_BIT["I/O"]
DATA_KEYS = np.array([DATA_OUT_KEY, DATA_IN_KEY], dtype=np.int64)
NEITHER_PHASES = ("ARBITRATION", "SELECTION", "RESELECTION")
DATA_PHASES = ("DATA IN", "DATA OUT")
NOT_BUSY = ("BUS FREE",)
MIN_LONG_NS = 2000        # a DATA wait is long when above both this and LONG_FACTOR x median
LONG_FACTOR = 10
HIST_NS = 100_000         # histogram of ordinary DATA waits (for their median), 1 ns bins
FIRST_BYTES = 64          # long initiator/target waits this early in a DATA phase: FIFO/set-up
PERIODS = tuple(1 << k for k in range(6, 21))   # 64 bytes .. 1 MiB
MIN_PERIODIC_HITS = 2
MIN_PERIODIC_SHARE = 0.6  # share of the boundaries crossed inside a DATA phase that paused


class _Segments:
    """Numpy views of the segments, indexed by segment number (rows sorted by start)."""

    def __init__(self, segments: pl.DataFrame):
        seg = segments.sort("start_ns").with_row_index("seg")
        self.frame = seg
        self.start = seg["start_ns"].to_numpy()
        self.is_data = seg["phase"].is_in(DATA_PHASES).to_numpy()
        body = (seg.filter(pl.col("connection").is_not_null()
                           & ~pl.col("phase").is_in(NEITHER_PHASES + NOT_BUSY))
                .group_by("connection").agg(pl.col("start_ns").min().alias("body_start"),
                                            pl.col("end_ns").max().alias("body_end")))
        self.bodies = body
        with_body = seg.join(body, on="connection", how="left").sort("seg")   # row = segment number
        in_body = (with_body["body_start"].is_not_null()
                   & ~with_body["phase"].is_in(NEITHER_PHASES + NOT_BUSY)).to_numpy()
        self.in_body = in_body                 # edges elsewhere (stray REQ/ACK) are not attributed
        self.body_start = np.where(in_body, with_body["body_start"].fill_null(0).to_numpy(),
                                   np.iinfo(np.int64).max)
        self.n = seg.height


class _PerSegment:
    """The collector's runs folded into the analysis' segments (what the report needs)."""

    def __init__(self, segs: _Segments, col: Collected):
        run_start = col.column(_hs.START)
        inner = segs.start[(segs.start > (run_start[0] if len(run_start) else 0))]
        if not np.isin(inner, run_start).all():
            bad = inner[~np.isin(inner, run_start)][0]
            raise RuntimeError(f"attribution: a bus segment starts at {bad} ns inside a run of equal "
                               "phase key; the bus segments no longer follow HACKING's bus-layer rules")
        seg = np.searchsorted(segs.start, run_start, side="right") - 1
        ok = (seg >= 0) & segs.in_body[np.maximum(seg, 0)]
        edges = col.column(_hs.EDGES)
        self.stray = int(edges[~ok].sum())
        self.totals = np.zeros((segs.n, 2), dtype=np.int64)
        np.add.at(self.totals[:, TARGET], seg[ok], col.column(_hs.TARGET_NS)[ok])
        np.add.at(self.totals[:, INITIATOR], seg[ok], col.column(_hs.INITIATOR_NS)[ok])
        self.seg_bytes = np.zeros(segs.n, dtype=np.int64)
        np.add.at(self.seg_bytes, seg[ok], col.column(_hs.UP)[ok])
        self.seg_last_t = np.full(segs.n, -1, dtype=np.int64)
        np.maximum.at(self.seg_last_t, seg[ok], col.column(_hs.LAST)[ok])
        self.seg_base = np.full(segs.n, -1, dtype=np.int64)
        first = np.r_[True, seg[1:] != seg[:-1]] & (seg >= 0)
        self.seg_base[seg[first]] = col.column(_hs.G)[first]
        self.hist = col.hist
        self.long_thresholds = col.long_thresholds
        self.kept = self._kept(segs, col, seg, ok)

    def _kept(self, segs: _Segments, col: Collected, run_seg: np.ndarray, run_ok: np.ndarray) -> list[pl.DataFrame]:
        if not col.kept:
            return []
        k = pl.concat(col.kept)
        run = k["run"].to_numpy()
        keep = run_ok[run]
        k = k.filter(pl.Series(keep))
        run = run[keep]
        seg = run_seg[run]
        t, dur, code = k["t_ns"].to_numpy(), k["dur_ns"].to_numpy().copy(), k["code"].to_numpy()
        # a connection's first edge waited since the end of (re)selection, not since the last
        # edge of an earlier connection: clip it at the body start, in the totals too
        body_start = segs.body_start[seg]
        over = body_start - (t - dur)
        clip = over > 0
        dur[clip] -= over[clip]
        np.add.at(self.totals, (seg[clip], code[clip] & 1), -over[clip])
        byte = np.maximum(k["g"].to_numpy() - 1 - self.seg_base[seg], 0)
        return [pl.DataFrame({"t_ns": t, "code": code, "comp": (code & 1).astype(np.int8), "dur_ns": dur,
                              "seg": seg.astype(np.int64), "byte": byte})]


def _segment_context(segs: pl.DataFrame) -> pl.DataFrame:
    """Per segment: the phase before it in its connection and its byte labels."""
    prev = pl.col("phase").shift(1).over("connection", order_by="start_ns")
    return segs.with_columns(prev.alias("prev_phase"))


def _label() -> pl.Expr:
    """What one byte of a non-DATA phase is, in Table 11's words (columns phase, category,
    prev_phase, byte, nbytes)."""
    phase, prev, byte = pl.col("phase"), pl.col("prev_phase"), pl.col("byte")
    last = byte == pl.col("nbytes") - 1
    after_data = prev.is_in(DATA_PHASES)
    disconnect = (pl.when(after_data & (byte == 0) & ~last).then(pl.lit("save pointer"))
                  .when(after_data & last).then(pl.lit("disconnect after data"))
                  .when(last).then(pl.lit("disconnect"))
                  .otherwise(pl.lit("messages before disconnect")))
    message_in = (pl.when(prev == "RESELECTION")
                  .then(pl.when(byte == 0).then(pl.lit("reselection ID message")).otherwise(pl.lit("restore pointers")))
                  .when(pl.col("category") == "Disconnect/Reconnect").then(disconnect)
                  .when((prev == "STATUS") & (byte == 0)).then(pl.lit("command complete"))
                  .otherwise(pl.lit("message in bytes")))
    return (pl.when(phase == "MESSAGE OUT")
            .then(pl.when((prev == "SELECTION") & (byte == 0)).then(pl.lit("ID message"))
                  .otherwise(pl.lit("message out bytes")))
            .when(phase == "COMMAND")
            .then(pl.when(byte == 0).then(pl.lit("first command byte")).otherwise(pl.lit("remaining command bytes")))
            .when(phase == "STATUS").then(pl.lit("status"))
            .when(phase == "MESSAGE IN").then(message_in)
            .otherwise(pl.format("{} bytes", phase.str.to_lowercase())))


def _non_data_steps(kept: pl.DataFrame, ctx: pl.DataFrame) -> pl.DataFrame:
    """One observation per (segment, step): the waits of that step summed in the segment."""
    rows = kept.filter(~pl.col("is_data")).join(
        ctx.select("seg", "phase", "category", "prev_phase", pl.col("nbytes")), on="seg", how="left")
    if not rows.height:
        return _empty_obs()
    rows = rows.with_columns(_label().alias("what"))
    code = pl.col("code")
    step = (pl.when(code == REQ_UP).then(pl.format("pause before {}", pl.col("what")))
            .when(code == ACK_UP).then(pl.format("ack of {}", pl.col("what")))
            .otherwise(pl.lit("REQ/ACK release outside data")))
    return (rows.with_columns(step.alias("step"))
            .group_by("seg", "step", "comp")
            .agg(pl.col("dur_ns").sum(), pl.col("t_ns").min()))


def _empty_obs() -> pl.DataFrame:
    return pl.DataFrame(schema={"seg": pl.Int64, "step": pl.Utf8, "comp": pl.Int8,
                                "dur_ns": pl.Int64, "t_ns": pl.Int64})


def _data_steps(kept: pl.DataFrame, ctx: pl.DataFrame, thresholds: dict[int, float]):
    """First-byte pauses, early (FIFO) acks, periodic pauses and other long DATA waits."""
    data = kept.filter(pl.col("is_data")).join(ctx.select("seg", "io_offset", "nbytes"), on="seg", how="left")
    first = (data.filter((pl.col("byte") == 0) & pl.col("code").is_in([REQ_UP, ACK_UP]))
             .with_columns(pl.when(pl.col("code") == REQ_UP).then(pl.lit("pause before first data byte"))
                           .otherwise(pl.lit("ack of first data byte")).alias("step")))
    thr = pl.when(pl.col("comp") == TARGET).then(thresholds[TARGET]).otherwise(thresholds[INITIATOR])
    long = data.filter((pl.col("byte") > 0) & (pl.col("dur_ns") > thr)).with_columns(
        (pl.col("io_offset") + pl.col("byte")).alias("offset"))
    periodic, rest = _periodic(long, ctx)
    # what counts for a component in DATA phases: the first byte's waits and the long ones
    attributed = pl.concat([first.select("seg", "comp", "dur_ns"), long.select("seg", "comp", "dur_ns")])
    early = rest.filter(pl.col("byte") < FIRST_BYTES)
    early_mode = early.group_by("comp").agg(pl.col("byte").mode().first().alias("n"))
    early = early.join(early_mode, on="comp").with_columns(
        pl.when(pl.col("comp") == INITIATOR).then(pl.format("ack after first {} bytes", pl.col("n")))
        .otherwise(pl.format("pause after first {} bytes", pl.col("n"))).alias("step"))
    other = rest.filter(pl.col("byte") >= FIRST_BYTES).with_columns(
        pl.lit("other pauses in data transfer").alias("step"))
    per_step = [f.select("seg", "step", "comp", "dur_ns", "t_ns") for f in (first, early, other)]
    periodic_obs = periodic.select("seg", pl.format("pauses every {} bytes in data transfer", pl.col("period"))
                                   .alias("step"), "comp", "dur_ns", "t_ns")
    obs = pl.concat([*per_step, periodic_obs]).with_columns(pl.col("comp").cast(pl.Int8))
    return obs, periodic, attributed


def _periodic(long: pl.DataFrame, ctx: pl.DataFrame):
    """Split long DATA waits into periodic ones (with a `period` column) and the rest.

    A period P fits a component when its waits fall at byte offsets (within the I/O) that
    are multiples of P, at >= MIN_PERIODIC_SHARE of the multiples of P crossed inside a
    DATA phase, at least MIN_PERIODIC_HITS times. The P explaining most waits wins (the
    larger on a tie: pauses every 8192 bytes also sit on multiples of 4096, but only half
    of the 4096 boundaries pause). Up to two periods per component (writes: the disk every
    512 bytes, the host adapter every 8192)."""
    found = []
    rest = long
    data_ctx = ctx.filter(pl.col("is_data_seg") & (pl.col("nbytes") > 0))
    lo = data_ctx["io_offset"].to_numpy()
    hi = lo + data_ctx["nbytes"].to_numpy()     # bytes [lo, hi); boundary b crossed when lo < b < hi
    for comp in (TARGET, INITIATOR):
        for _ in range(2):
            cand = rest.filter((pl.col("comp") == comp) & (pl.col("offset") > 0))
            if cand.height < MIN_PERIODIC_HITS:
                break
            offs = cand["offset"].to_numpy()
            best = None
            for p in PERIODS:
                hits = int((offs % p == 0).sum())
                chances = int(np.maximum((hi - 1) // p - lo // p, 0).sum())
                if hits >= MIN_PERIODIC_HITS and chances and hits / chances >= MIN_PERIODIC_SHARE:
                    if best is None or hits >= best[1]:
                        best = (p, hits)
            if best is None:
                break
            p = best[0]
            is_hit = (pl.col("comp") == comp) & (pl.col("offset") > 0) & (pl.col("offset") % p == 0)
            found.append(rest.filter(is_hit).with_columns(pl.lit(p, dtype=pl.Int64).alias("period")))
            rest = rest.filter(~is_hit)
    periodic = pl.concat(found) if found else rest.clear().with_columns(pl.lit(0, dtype=pl.Int64).alias("period"))
    return periodic, rest


def _neither_steps(ctx: pl.DataFrame) -> pl.DataFrame:
    """Arbitration and (re)selection: the bus protocol's own time, nobody's pause."""
    resel = ctx.filter(pl.col("phase") == "RESELECTION").select("connection").unique()
    seg = ctx.filter(pl.col("phase").is_in(NEITHER_PHASES)).with_columns(
        pl.col("connection").is_in(resel["connection"].implode()).alias("re"))
    step = (pl.when(pl.col("phase") == "ARBITRATION")
            .then(pl.when(pl.col("re")).then(pl.lit("rearbitration")).otherwise(pl.lit("arbitration")))
            .otherwise(pl.col("phase").str.to_lowercase()))
    return seg.select("seg", step.alias("step"), pl.lit(2, dtype=pl.Int8).alias("comp"),
                      (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"), pl.col("start_ns").alias("t_ns"))


def _release_steps(segs: _Segments, p: "_PerSegment") -> pl.DataFrame:
    """After the last ACK release of a connection the target drops BSY: its time."""
    seg = segs.frame.with_columns(pl.Series("last_t", p.seg_last_t))
    last = (seg.filter(pl.col("last_t") >= 0).group_by("connection")
            .agg(pl.col("last_t").max(), pl.col("seg").max()))
    rel = last.join(segs.bodies, on="connection").select(
        "seg", pl.lit("bus release after last byte").alias("step"), pl.lit(TARGET, dtype=pl.Int8).alias("comp"),
        (pl.col("body_end") - pl.col("last_t")).alias("dur_ns"), pl.col("last_t").alias("t_ns"))
    silent = segs.bodies.join(last.select("connection"), on="connection", how="anti").select(
        pl.lit(-1, dtype=pl.Int64).alias("seg"), pl.lit("connection without handshakes").alias("step"),
        pl.lit(TARGET, dtype=pl.Int8).alias("comp"), (pl.col("body_end") - pl.col("body_start")).alias("dur_ns"),
        pl.col("body_start").alias("t_ns"))
    return pl.concat([rel.with_columns(pl.col("seg").cast(pl.Int64)), silent])

COMPONENT_NAMES = {TARGET: "target", INITIATOR: "initiator", 2: "neither"}


def _context(segs: _Segments, p: "_PerSegment") -> pl.DataFrame:
    ctx = _segment_context(segs.frame).with_columns(
        pl.Series("nbytes", p.seg_bytes), pl.col("phase").is_in(DATA_PHASES).alias("is_data_seg"))
    data_bytes = pl.when(pl.col("is_data_seg")).then(pl.col("nbytes")).otherwise(0)
    # bytes of the same I/O moved in earlier DATA phases (the I/O's offset at this phase)
    io_off = (data_bytes.cum_sum().over("io", order_by="start_ns") - data_bytes)
    return ctx.with_columns(pl.when(pl.col("io").is_not_null()).then(io_off)
                            .otherwise(pl.lit(0, dtype=pl.Int64)).alias("io_offset"))


def _report(segs: _Segments, p: "_PerSegment") -> dict:
    ctx = _context(segs, p)
    kept = (pl.concat(p.kept) if p.kept else pl.DataFrame(schema={
        "t_ns": pl.Int64, "code": pl.Int8, "comp": pl.Int8, "dur_ns": pl.Int64, "seg": pl.Int64, "byte": pl.Int64}))
    kept = kept.with_columns(pl.Series("is_data", segs.is_data[kept["seg"].to_numpy()]) if kept.height
                             else pl.lit(False).alias("is_data"))
    thresholds = p.long_thresholds()
    data_obs, periodic, attributed = _data_steps(kept, ctx, thresholds)
    release = _release_steps(segs, p)
    obs = pl.concat([
        _neither_steps(ctx),
        _non_data_steps(kept, ctx).select("seg", "step", "comp", "dur_ns", "t_ns"),
        data_obs,
        release,
    ], how="vertical_relaxed")
    steps = _step_rows(obs)
    totals, phases = _totals(p, ctx, attributed, int(release["dur_ns"].sum() or 0))
    notes = [f"in DATA phases the first byte's waits and waits longer than {thresholds[TARGET]:.0f} ns "
             f"(target) / {thresholds[INITIATOR]:.0f} ns (initiator) count for their component; "
             "the other handshakes are the transfer itself (transfer_ns)"]
    if p.stray:
        notes.append(f"{p.stray} REQ/ACK edges outside any connection were not attributed")
    return {
        "available": True,
        "steps": steps,
        "periodic": _periodic_rows(periodic),
        "totals": totals,
        "phases": phases,
        "notes": notes,
    }


def _step_rows(obs: pl.DataFrame) -> list[dict]:
    agg = (obs.group_by("step", "comp")
           .agg(pl.len().alias("count"), pl.col("dur_ns").min().alias("min_ns"),
                pl.col("dur_ns").median().alias("median_ns"), pl.col("dur_ns").max().alias("max_ns"),
                pl.col("dur_ns").sum().alias("total_ns"), pl.col("t_ns").min().alias("first"))
           .sort("first", "step"))
    return [{"step": r["step"], "component": COMPONENT_NAMES[r["comp"]], "count": int(r["count"]),
             "min_ns": int(r["min_ns"]), "median_ns": int(round(r["median_ns"])),
             "max_ns": int(r["max_ns"]), "total_ns": int(r["total_ns"])}
            for r in agg.iter_rows(named=True)]


def _periodic_rows(periodic: pl.DataFrame) -> list[dict]:
    if not periodic.height:
        return []
    agg = (periodic.group_by("comp", "period")
           .agg(pl.len().alias("count"), pl.col("dur_ns").min().alias("min_ns"),
                pl.col("dur_ns").max().alias("max_ns"), pl.col("dur_ns").median().alias("median_ns"),
                pl.col("dur_ns").sum().alias("total_ns"))
           .sort("comp", "period"))
    return [{"component": COMPONENT_NAMES[r["comp"]], "period_bytes": int(r["period"]), "count": int(r["count"]),
             "min_ns": int(r["min_ns"]), "max_ns": int(r["max_ns"]), "median_ns": int(round(r["median_ns"])),
             "total_ns": int(r["total_ns"])}
            for r in agg.iter_rows(named=True)]


def _totals(p: "_PerSegment", ctx: pl.DataFrame, attributed: pl.DataFrame, release: int):
    """Per-component totals and the per-phase breakdown (phase of the edge ending each wait)."""
    tot = ctx.select("seg", "phase", "is_data_seg").with_columns(
        pl.Series("target", p.totals[:, TARGET]), pl.Series("initiator", p.totals[:, INITIATOR]))
    long_by_seg = attributed.group_by("seg", "comp").agg(pl.col("dur_ns").sum())
    lt = long_by_seg.filter(pl.col("comp") == TARGET).select("seg", pl.col("dur_ns").alias("long_t"))
    li = long_by_seg.filter(pl.col("comp") == INITIATOR).select("seg", pl.col("dur_ns").alias("long_i"))
    tot = tot.join(lt, on="seg", how="left").join(li, on="seg", how="left").fill_null(0)
    data = pl.col("is_data_seg")
    tot = tot.with_columns(
        pl.when(data).then(pl.col("long_t")).otherwise(pl.col("target")).alias("target_ns"),
        pl.when(data).then(pl.col("long_i")).otherwise(pl.col("initiator")).alias("initiator_ns"),
        pl.when(data).then(pl.col("target") + pl.col("initiator") - pl.col("long_t") - pl.col("long_i"))
        .otherwise(0).alias("transfer_ns"))
    neither = int(ctx.filter(pl.col("phase").is_in(NEITHER_PHASES))
                  .select((pl.col("end_ns") - pl.col("start_ns")).sum()).item() or 0)
    by_phase = (tot.group_by("phase").agg(pl.col("target_ns").sum(), pl.col("initiator_ns").sum(),
                                          pl.col("transfer_ns").sum())
                .filter((pl.col("target_ns") + pl.col("initiator_ns") + pl.col("transfer_ns")) > 0)
                .sort("phase"))
    totals = {
        "target_ns": int(tot["target_ns"].sum()) + release,
        "initiator_ns": int(tot["initiator_ns"].sum()),
        "neither_ns": neither,
        "transfer_ns": int(tot["transfer_ns"].sum()),
    }
    phases = [{k: (int(v) if k != "phase" else v) for k, v in r.items()} for r in by_phase.iter_rows(named=True)]
    phases.append({"phase": "(bus release)", "target_ns": release, "initiator_ns": 0, "transfer_ns": 0})
    return totals, phases


def _phases_only(analysis: Analysis, why_not: str) -> dict:
    """Without REQ/ACK: per phase (and who it must belong to, where the protocol says)."""
    seg = analysis.segments.filter(~pl.col("phase").is_in(NOT_BUSY)).with_columns(
        (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))
    agg = (seg.group_by("phase").agg(pl.len().alias("count"), pl.col("dur_ns").min().alias("min_ns"),
                                     pl.col("dur_ns").median().alias("median_ns"),
                                     pl.col("dur_ns").max().alias("max_ns"), pl.col("dur_ns").sum().alias("total_ns"),
                                     pl.col("start_ns").min().alias("first"))
           .sort("first"))
    rows = [{"phase": r["phase"], "count": int(r["count"]), "min_ns": int(r["min_ns"]),
             "median_ns": int(round(r["median_ns"])), "max_ns": int(r["max_ns"]), "total_ns": int(r["total_ns"])}
            for r in agg.iter_rows(named=True)]
    steps = [{"step": r["phase"].lower(), "component": "neither", **{k: r[k] for k in
             ("count", "min_ns", "median_ns", "max_ns", "total_ns")}}
             for r in rows if r["phase"] in NEITHER_PHASES]
    neither = sum(r["total_ns"] for r in rows if r["phase"] in NEITHER_PHASES)
    return {
        "available": False,
        "steps": steps,
        "periodic": [],
        "totals": {"target_ns": None, "initiator_ns": None, "neither_ns": int(neither), "transfer_ns": None},
        "phases_only": rows,
        "notes": [why_not],
    }
