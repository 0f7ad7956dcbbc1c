"""Block layer (blktrace, blkparse text): the btt stage machine, vectorized.

Events (Q G S I M F D C R A ...) become per-I/O stage times the way btt 1.2 computes them
(see docs/blktrace.md for the rules and where this differs from btt):

- A queued bio (Q) is tracked by (device, start sector); a later Q at the same start sector
  replaces it. G, S, I, M/F, D and C find their Q by that key.
- Every D applies to the live Qs its range contains (a request carries its merged bios):
  I2D from the Q's last I, or M2D from its last merge.
- Every C completes the live Qs its range contains: Q2C, and D2C from the Q's last D.
- Every sample is `to - from`, or 1 ns when `to <= from` (btt's tdelta).
- Events of a device before its first Q or A are ignored (btt's pre-culling); Q G S I M D C
  records with zero bytes and BLK_TC_PC records are ignored; a requeue (R) is counted.

The join is done with sorted keys and as-of joins, not with a Python loop per event. Bios
that may sit inside another request's range (merged, front-merged into, or never completed
by a C at their own sector) are matched by a bounded forward scan over that device's D and
C events (`SCAN_STEPS` events at a time, vectorized over all such bios).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from . import schema
from .errors import UsageError
from .model import Analysis, Capture

# __BLK_TA_* action codes (low 16 bits of `action`), by blkparse's letter; T is blkparse's "UT"
TA = {"Q": 1, "M": 2, "F": 3, "G": 4, "S": 5, "R": 6, "D": 7, "C": 8, "P": 9, "U": 10, "T": 11,
      "I": 12, "X": 13, "B": 14, "A": 15}
LETTER = {code: letter for letter, code in TA.items()}
TC_SHIFT = 16
TC = {"READ": 1 << 0, "WRITE": 1 << 1, "FLUSH": 1 << 2, "SYNC": 1 << 3, "QUEUE": 1 << 4,
      "REQUEUE": 1 << 5, "ISSUE": 1 << 6, "COMPLETE": 1 << 7, "FS": 1 << 8, "PC": 1 << 9,
      "NOTIFY": 1 << 10, "AHEAD": 1 << 11, "META": 1 << 12, "DISCARD": 1 << 13,
      "DRV_DATA": 1 << 14, "FUA": 1 << 15}
TC_NOTIFY = TC["NOTIFY"] << TC_SHIFT
TC_PC = TC["PC"] << TC_SHIFT
TN_PROCESS, TN_TIMESTAMP, TN_MESSAGE = 0, 1, 2
REMAPPER_MAJORS = (9, 253, 254)     # md, device-mapper: btt keeps their Q2Q/Q2A/Q2C apart ("dm")
SECTOR = 512
SCAN_STEPS = 64

# What a block parser hands over before `finish_events` (binary layout, absolute times).
RAW_EVENTS = {
    "time_abs": pl.Int64, "seq": pl.Int64, "cpu": pl.Int32, "action": pl.UInt32,
    "device": pl.UInt32, "sector": pl.Int64, "bytes": pl.Int64, "pid": pl.Int64,
    "error": pl.Int16, "pdu_dev": pl.UInt32, "pdu_sector": pl.Int64, "pdu_int": pl.Int64,
    "has_remap": pl.Boolean, "has_int": pl.Boolean, "file": pl.Int16, "position": pl.Int64,
}
# Capture.frames["events"] of a block capture: one row per trace record except notify records,
# in processing order (time, then file and position).
EVENTS = {
    "t_ns": pl.Int64,          # from the first record of the capture
    "seq": pl.Int64,
    "cpu": pl.Int32,
    "action": pl.UInt32,       # raw: __BLK_TA_* | category bits << 16
    "act": pl.Utf8,            # blkparse's letter (Q, G, I, D, C, M, F, ...; T is a timer unplug)
    "rwbs": pl.Utf8,           # blkparse's RWBS field
    "device": pl.Utf8,         # "major,minor"
    "sector": pl.Int64,
    "bytes": pl.Int64,
    "pid": pl.Int64,
    "error": pl.Int16,
    "pdu_dev": pl.Utf8,        # remap: the device the bio came from
    "pdu_sector": pl.Int64,    # remap: its sector there; split: the new sector
    "pdu_int": pl.Int64,       # unplug: requests unplugged
    "file": pl.Int16,          # index into meta["files"]
    "position": pl.Int64,      # byte offset (binary) or line number (text) in that file
}
PROCESSES = {"pid": pl.Int64, "name": pl.Utf8}

STAGE_ORDER = ("Q2Qdm", "Q2Adm", "Q2Cdm", "Q2Q", "Q2A", "Q2G", "S2G", "G2I", "Q2M", "I2D",
               "M2D", "D2C", "Q2C")
JSON_STAGES = ("Q2Q", "Q2G", "G2I", "Q2M", "I2D", "D2C", "Q2C")
OVERHEAD = ("Q2G", "G2I", "Q2M", "I2D", "D2C")


def dev_name(dev: int) -> str:
    return f"{dev >> 20},{dev & 0xFFFFF}"


def _rwbs(action: int, has_bytes: bool) -> str:
    """blkparse's fill_rwbs."""
    tc = action >> TC_SHIFT
    out = "F" if tc & TC["FLUSH"] else ""
    out += "D" if tc & TC["DISCARD"] else "W" if tc & TC["WRITE"] else "R" if has_bytes else "N"
    for bit, ch in (("FUA", "F"), ("AHEAD", "A"), ("SYNC", "S"), ("META", "M")):
        if tc & TC[bit]:
            out += ch
    return out


def finish_events(raw: pl.DataFrame) -> pl.DataFrame:
    """Raw records -> EVENTS (plus `time_abs`): notify records out, time order, names decoded."""
    raw = raw.filter((pl.col("action") & TC_NOTIFY) == 0)
    if raw.height and not raw["time_abs"].is_sorted():
        raw = raw.sort(["time_abs", "file", "position"], maintain_order=True)
    origin = raw["time_abs"].min() if raw.height else 0
    key = (pl.col("action") & 0xFFFF0000) | (pl.col("bytes") > 0).cast(pl.UInt32)
    combos = raw.select(key.alias("k")).unique()["k"].to_list()
    rwbs = {k: _rwbs(k & 0xFFFF0000, bool(k & 1)) for k in combos}
    devs = set(raw["device"].unique().to_list()) | set(raw.filter("has_remap")["pdu_dev"].unique().to_list())
    names = {d: dev_name(d) for d in devs}
    code = (pl.col("action") & 0xFF)
    letters = {c: LETTER.get(c, f"?{c}") for c in raw.select(code.unique())["action"].to_list()}
    return raw.select(
        (pl.col("time_abs") - origin).alias("t_ns"),
        "seq", "cpu", "action",
        code.replace_strict(letters, return_dtype=pl.Utf8).alias("act"),
        key.replace_strict(rwbs, return_dtype=pl.Utf8).alias("rwbs"),
        pl.col("device").replace_strict(names, return_dtype=pl.Utf8),
        "sector", "bytes", "pid", "error",
        pl.when("has_remap").then(pl.col("pdu_dev").replace_strict(names, default=None, return_dtype=pl.Utf8))
        .alias("pdu_dev"),
        pl.when(pl.col("has_remap") | ((code == TA["X"]) & pl.col("has_int"))).then("pdu_sector").alias("pdu_sector"),
        pl.when(pl.col("has_int") & (code != TA["X"])).then("pdu_int").alias("pdu_int"),
        "file", "position", "time_abs",
    )


# ---------------------------------------------------------------- filters

def _parse_window(window) -> tuple[int | None, int | None]:
    """'START:END' in seconds from the trace start (either side may be empty) -> ns."""
    if window is None:
        return None, None
    if isinstance(window, (tuple, list)):
        lo, hi = window
    else:
        lo, sep, hi = str(window).partition(":")
        if not sep:
            raise UsageError(f"--window expects START:END in seconds, got {window!r}")
    try:
        lo_ns = None if lo in ("", None) else int(round(float(lo) * 1e9))
        hi_ns = None if hi in ("", None) else int(round(float(hi) * 1e9))
    except ValueError:
        raise UsageError(f"--window expects START:END in seconds, got {window!r}") from None
    if lo_ns is not None and hi_ns is not None and hi_ns < lo_ns:
        raise UsageError(f"--window {window}: END is before START")
    return lo_ns, hi_ns


def _device_key(device) -> str:
    text = str(device).replace(":", ",").replace(" ", "")
    major, sep, minor = text.partition(",")
    if not sep or not major.isdigit() or not minor.isdigit():
        raise UsageError(f"--device expects MAJOR,MINOR (e.g. 8,0), got {device!r}")
    return f"{int(major)},{int(minor)}"


def _filtered(events: pl.DataFrame, opts: dict) -> pl.DataFrame:
    """--device keeps that device's events; --window keeps events inside the window (btt -t/-T)."""
    if opts.get("device") is not None:
        events = events.filter(pl.col("device") == _device_key(opts["device"]))
    lo, hi = _parse_window(opts.get("window"))
    if lo is not None:
        events = events.filter(pl.col("t_ns") >= lo)
    if hi is not None:
        events = events.filter(pl.col("t_ns") <= hi)
    return events


# ---------------------------------------------------------------- the stage machine

def _tdelta(frm: pl.Expr, to: pl.Expr) -> pl.Expr:
    return pl.when(frm < to).then(to - frm).otherwise(1)


def _io_events(events: pl.DataFrame) -> pl.DataFrame:
    """The records btt's machine sees, with `idx` = processing order, after pre-culling."""
    ev = events.with_row_index("idx").with_columns(pl.col("idx").cast(pl.Int64))
    ev = ev.filter(((pl.col("action") & TC_PC) == 0)
                   & (pl.col("act").is_in(["R", "A"]) | (pl.col("bytes") > 0))
                   & pl.col("act").is_in(["Q", "G", "S", "I", "M", "F", "D", "C", "R", "A"]))
    first = ev.filter(pl.col("act").is_in(["Q", "A"])).group_by("device").agg(pl.col("idx").min().alias("first"))
    ev = ev.join(first, on="device", how="inner").filter(pl.col("idx") >= pl.col("first")).drop("first")
    return ev.sort("idx").with_columns((pl.col("sector") + pl.col("bytes") // SECTOR).alias("end"))


def _queues(ev: pl.DataFrame) -> pl.DataFrame:
    """One row per Q: q (id), its key, times, and the idx of the Q that replaces it."""
    q = ev.filter(pl.col("act") == "Q").select(
        pl.col("idx").alias("q_idx"), "device", "sector", "end", pl.col("t_ns").alias("q_t"),
        "pid", "bytes", "rwbs")
    q = q.with_row_index("q").with_columns(pl.col("q").cast(pl.Int64))
    nxt = q.sort("q_idx").select("q", pl.col("q_idx").shift(-1).over(["device", "sector"]).alias("replaced_idx"))
    return q.join(nxt, on="q", how="left").sort("q_idx")


def _latest_q(x: pl.DataFrame, q: pl.DataFrame) -> pl.DataFrame:
    """Each event joined to the latest earlier Q with the same (device, start sector)."""
    right = q.select(pl.col("q_idx").alias("idx_q"), "device", "sector", "q", "q_idx", "end_q", "q_t",
                     "close_idx")
    return x.sort("idx").join_asof(right.sort("idx_q"), left_on="idx", right_on="idx_q",
                                   by=["device", "sector"], strategy="backward", allow_exact_matches=False,
                                   check_sortedness=False)


def _scan(targets: pl.DataFrame, ev: pl.DataFrame, limit_col: str, first_only: bool) -> pl.DataFrame:
    """Events of `ev` (one kind) after each target Q, on its device, whose range contains the Q,
    before the target's `limit_col` idx. Vectorized over targets, SCAN_STEPS events at a time;
    with `first_only` stops at the first hit. Returns (q, idx) pairs."""
    if targets.height == 0 or ev.height == 0:
        return pl.DataFrame(schema={"q": pl.Int64, "idx": pl.Int64})
    devices = sorted(set(ev["device"].unique().to_list()) | set(targets["device"].unique().to_list()))
    dcode = {d: i for i, d in enumerate(devices)}
    e = ev.with_columns(pl.col("device").replace_strict(dcode, return_dtype=pl.Int64).alias("dc")).sort(["dc", "idx"])
    e_dc, e_idx = e["dc"].to_numpy(), e["idx"].to_numpy()
    e_start, e_end = e["sector"].to_numpy(), e["end"].to_numpy()
    seg_end = np.searchsorted(e_dc, np.arange(len(devices)), side="right")
    t = targets.with_columns(pl.col("device").replace_strict(dcode, return_dtype=pl.Int64).alias("dc"))
    q, t_dc = t["q"].to_numpy(), t["dc"].to_numpy()
    t_start, t_end, t_idx = t["sector"].to_numpy(), t["end_q"].to_numpy(), t["q_idx"].to_numpy()
    limit = t[limit_col].fill_null(np.iinfo(np.int64).max).to_numpy()
    big = np.int64(1) << 40
    pos = np.searchsorted(e_dc * big + e_idx, t_dc * big + t_idx, side="right")
    stop = seg_end[t_dc]
    active = np.ones(len(q), bool)
    hits_q, hits_idx = [], []
    while active.any():
        for _ in range(SCAN_STEPS):
            a = np.flatnonzero(active & (pos < stop))
            active[active & (pos >= stop)] = False
            if len(a) == 0:
                break
            p = pos[a]
            in_time = e_idx[p] < limit[a]
            active[a[~in_time]] = False
            hit = in_time & (e_start[p] <= t_start[a]) & (t_end[a] <= e_end[p])
            hits_q.append(q[a[hit]])
            hits_idx.append(e_idx[p[hit]])
            if first_only:
                active[a[hit]] = False
            pos[a] += 1
    if not hits_q:
        return pl.DataFrame(schema={"q": pl.Int64, "idx": pl.Int64})
    return pl.DataFrame({"q": np.concatenate(hits_q).astype(np.int64),
                         "idx": np.concatenate(hits_idx).astype(np.int64)})


def _closes(ev: pl.DataFrame, q: pl.DataFrame, maybe_merged: pl.Series) -> pl.DataFrame:
    """q -> close_idx (first C containing it before it is replaced) and that C's idx."""
    c = ev.filter(pl.col("act") == "C").select("idx", "device", "sector", "end")
    qq = q.with_columns(pl.col("end").alias("end_q"), pl.lit(None, pl.Int64).alias("close_idx"))
    exact = _latest_q(c, qq).filter(pl.col("q").is_not_null() & (pl.col("end") >= pl.col("end_q")))
    exact = exact.group_by("q").agg(pl.col("idx").min().alias("c_idx"))
    qq = qq.join(exact, on="q", how="left")
    limit = pl.min_horizontal(pl.col("replaced_idx"), pl.col("c_idx"))
    need = qq.filter(pl.col("q").is_in(maybe_merged.implode()) | pl.col("c_idx").is_null())
    scanned = _scan(need.with_columns(limit.alias("limit")), c, "limit", first_only=True)
    scanned = scanned.group_by("q").agg(pl.col("idx").min().alias("c_scan"))
    qq = qq.join(scanned, on="q", how="left").with_columns(
        pl.min_horizontal("c_idx", "c_scan").alias("c_idx")).drop("c_scan")
    return qq.with_columns(
        pl.min_horizontal(pl.col("replaced_idx"), pl.col("c_idx")).alias("close_idx"),
        pl.when(pl.col("c_idx") < pl.col("replaced_idx").fill_null(np.iinfo(np.int64).max))
        .then("c_idx").alias("c_idx"))


def machine(events: pl.DataFrame) -> dict:
    """Run the btt stage machine -> {"queues": per-Q frame, "samples": stage samples}."""
    ev = _io_events(events)
    q = _queues(ev)
    q = q.with_columns(pl.col("end").alias("end_q"), pl.lit(None, pl.Int64).alias("close_idx"))
    # bios that may end up inside a request starting elsewhere: merged ones, and the request
    # start a front merge was glued to
    mf = _latest_q(ev.filter(pl.col("act").is_in(["M", "F"])).select("idx", "device", "sector", "end", "act"), q)
    fronted = ev.filter(pl.col("act") == "F").select("device", pl.col("end").alias("sector"), "idx")
    fronted = _latest_q(fronted, q)["q"].drop_nulls()
    maybe_merged = pl.concat([mf["q"].drop_nulls(), fronted]).unique()
    q = _closes(ev, q.drop("end_q", "close_idx"), maybe_merged)
    q = q.with_columns(pl.col("end").alias("end_q"))
    idx_t = ev.select("idx", "t_ns")

    def matched(acts):
        x = ev.filter(pl.col("act").is_in(acts)).select("idx", "device", "sector", "end", "t_ns", "act")
        x = _latest_q(x, q).filter(pl.col("q").is_not_null())
        return x.filter(pl.col("idx") < pl.col("close_idx").fill_null(np.iinfo(np.int64).max))

    g, s, i, m = matched(["G"]), matched(["S"]), matched(["I"]), matched(["M", "F"])
    # D applications: exact key (D starts at the Q), plus contained Qs found by scanning
    d_exact = matched(["D"]).filter(pl.col("end_q") <= pl.col("end")).select("q", "idx")
    d_need = q.filter(pl.col("q").is_in(maybe_merged.implode())
                      | ~pl.col("q").is_in(d_exact["q"].implode()))
    d_scan = _scan(d_need, ev.filter(pl.col("act") == "D").select("idx", "device", "sector", "end"),
                   "close_idx", first_only=False)
    d_app = pl.concat([d_exact, d_scan]).unique().join(idx_t, on="idx").rename({"t_ns": "d_t"}).sort("idx")
    return _samples(ev, q, g, s, i, m, d_app, idx_t)


def _last_before(left: pl.DataFrame, right: pl.DataFrame, name: str) -> pl.DataFrame:
    """For each left row (q, idx): the latest right time of the same q strictly before idx."""
    r = right.select("q", pl.col("idx").alias(f"{name}_idx"), pl.col("t_ns").alias(f"{name}_t")).sort(f"{name}_idx")
    return left.sort("idx").join_asof(r, left_on="idx", right_on=f"{name}_idx", by="q",
                                      strategy="backward", allow_exact_matches=False, check_sortedness=False)


def _samples(ev, q, g, s, i, m, d_app, idx_t) -> dict:
    qcols = q.select("q", "device", "pid", "q_t", "bytes")
    parts = []

    def add(name, frame, value):
        parts.append(frame.join(qcols, on="q", how="left", suffix="_q").select(
            pl.lit(name).alias("stage"), "q", pl.col("device"), "pid", value.alias("ns")))

    add("Q2G", g, _tdelta(pl.col("q_t"), pl.col("t_ns")))
    sg = _last_before(g.select("q", "idx", "t_ns"), s.select("q", "idx", "t_ns"), "s").filter(pl.col("s_t").is_not_null())
    add("S2G", sg, _tdelta(pl.col("s_t"), pl.col("t_ns")))
    gi = _last_before(i.select("q", "idx", "t_ns"), g.select("q", "idx", "t_ns"), "g").filter(pl.col("g_t").is_not_null())
    add("G2I", gi, _tdelta(pl.col("g_t"), pl.col("t_ns")))
    add("Q2M", m, _tdelta(pl.col("q_t"), pl.col("t_ns")))
    di = _last_before(d_app.rename({"d_t": "t_ns"}), i.select("q", "idx", "t_ns"), "i")
    di = _last_before(di, m.select("q", "idx", "t_ns"), "m")
    add("I2D", di.filter(pl.col("i_t").is_not_null()), _tdelta(pl.col("i_t"), pl.col("t_ns")))
    add("M2D", di.filter(pl.col("i_t").is_null() & pl.col("m_t").is_not_null()),
        _tdelta(pl.col("m_t"), pl.col("t_ns")))
    done = q.filter(pl.col("c_idx").is_not_null()).join(idx_t.rename({"idx": "c_idx", "t_ns": "c_t"}), on="c_idx")
    done = _last_before(done.select("q", pl.col("c_idx").alias("idx"), "c_t", "q_t"),
                        d_app.select("q", "idx", pl.col("d_t").alias("t_ns")), "d")
    dm = _is_remapper(pl.col("device"))
    q2c = done.join(qcols.select("q", "device"), on="q").with_columns(dm.alias("dm"))
    parts.append(q2c.join(qcols.select("q", "pid"), on="q").select(
        pl.when("dm").then(pl.lit("Q2Cdm")).otherwise(pl.lit("Q2C")).alias("stage"), "q", "device", "pid",
        _tdelta(pl.col("q_t"), pl.col("c_t")).alias("ns")))
    add("D2C", done.filter(pl.col("d_t").is_not_null()), _tdelta(pl.col("d_t"), pl.col("c_t")))
    parts.extend(_q2q(q))
    parts.append(_q2a(ev, q))
    samples = pl.concat([p.select(pl.col("stage").cast(pl.Utf8), pl.col("q").cast(pl.Int64),
                                  pl.col("device").cast(pl.Utf8), pl.col("pid").cast(pl.Int64),
                                  pl.col("ns").cast(pl.Int64)) for p in parts])
    per_q = _per_q(q, g, gi, m, di, done)
    return {"queues": per_q, "samples": samples, "events": ev}


def _q2q(q: pl.DataFrame) -> list[pl.DataFrame]:
    """Q2Q per device and across devices ('all' shares one last-Q time, as btt's does)."""
    q = q.sort("q_idx").with_columns(_is_remapper(pl.col("device")).alias("dm"))
    name = pl.when("dm").then(pl.lit("Q2Qdm")).otherwise(pl.lit("Q2Q"))
    gap = lambda prev: pl.when(pl.col("q_t") > prev).then(pl.col("q_t") - prev).otherwise(1)  # noqa: E731
    per_dev = q.with_columns(pl.col("q_t").shift(1).over("device").alias("prev")).filter(pl.col("prev").is_not_null())
    per_dev = per_dev.select(name.alias("stage"), "q", "device", "pid", gap(pl.col("prev")).alias("ns"))
    overall = q.with_columns(pl.col("q_t").shift(1).alias("prev")).filter(pl.col("prev").is_not_null())
    overall = overall.select(name.alias("stage"), "q", pl.lit("all").alias("device"), "pid",
                             gap(pl.col("prev")).alias("ns"))
    return [per_dev, overall]


def _q2a(ev: pl.DataFrame, q: pl.DataFrame) -> pl.DataFrame:
    """A remap: Q2A for the Q on the device the bio came from (btt's update_q2a)."""
    a = ev.filter((pl.col("act") == "A") & pl.col("pdu_dev").is_not_null()).select(
        "idx", "t_ns", pl.col("pdu_dev").alias("device"), pl.col("pdu_sector").alias("sector"))
    if a.height == 0:
        return pl.DataFrame(schema={"stage": pl.Utf8, "q": pl.Int64, "device": pl.Utf8, "pid": pl.Int64,
                                    "ns": pl.Int64})
    a = _latest_q(a, q).filter(pl.col("q").is_not_null()
                               & (pl.col("idx") < pl.col("close_idx").fill_null(np.iinfo(np.int64).max)))
    a = a.join(q.select("q", "pid"), on="q")
    dm = _is_remapper(pl.col("device"))
    return a.select(pl.when(dm).then(pl.lit("Q2Adm")).otherwise(pl.lit("Q2A")).alias("stage"),
                    "q", "device", "pid", _tdelta(pl.col("q_t"), pl.col("t_ns")).alias("ns"))


def _per_q(q, g, gi, m, di, done) -> pl.DataFrame:
    """One row per Q with its last sample of each stage (btt keeps the last time it saw)."""
    def last(frame, value, name):
        return frame.sort("idx").group_by("q").agg(value.last().alias(name))
    out = q
    out = out.join(last(g.join(q.select("q", "q_t"), on="q", suffix="_q"),
                        _tdelta(pl.col("q_t"), pl.col("t_ns")), "q2g_ns"), on="q", how="left")
    out = out.join(last(gi, _tdelta(pl.col("g_t"), pl.col("t_ns")), "g2i_ns"), on="q", how="left")
    out = out.join(last(m.join(q.select("q", "q_t"), on="q", suffix="_q"),
                        _tdelta(pl.col("q_t"), pl.col("t_ns")), "q2m_ns"), on="q", how="left")
    out = out.join(last(di.filter(pl.col("i_t").is_not_null()), _tdelta(pl.col("i_t"), pl.col("t_ns")), "i2d_ns"),
                   on="q", how="left")
    out = out.join(last(di, pl.col("t_ns"), "d_t"), on="q", how="left")
    out = out.join(done.select("q", "c_t", pl.when(pl.col("d_t").is_not_null())
                               .then(_tdelta(pl.col("d_t"), pl.col("c_t"))).alias("d2c_ns"),
                               _tdelta(pl.col("q_t"), pl.col("c_t")).alias("q2c_ns")), on="q", how="left")
    return out.sort("q_idx")


def _is_remapper(device: pl.Expr) -> pl.Expr:
    return device.str.split(",").list.first().cast(pl.Int64).is_in(list(REMAPPER_MAJORS))


# ---------------------------------------------------------------- statistics

def stage_stats(samples: pl.DataFrame) -> pl.DataFrame:
    """btt's avg_info per (device, stage) plus device "all": n, min, avg, max, total."""
    aggs = [pl.len().alias("n"), pl.col("ns").min().alias("min_ns"), pl.col("ns").mean().alias("avg_ns"),
            pl.col("ns").max().alias("max_ns"), pl.col("ns").sum().alias("total_ns")]
    per_dev = samples.filter(pl.col("device") != "all").group_by("device", "stage").agg(aggs)
    overall_q2q = samples.filter((pl.col("device") == "all")).group_by("stage").agg(aggs)
    others = samples.filter(pl.col("device") != "all").filter(~pl.col("stage").is_in(["Q2Q", "Q2Qdm"]))
    overall = pl.concat([overall_q2q, others.group_by("stage").agg(aggs)]).with_columns(
        pl.lit("all").alias("device"))
    out = pl.concat([per_dev, overall.select(per_dev.columns)])
    order = {name: k for k, name in enumerate(STAGE_ORDER)}
    return out.with_columns(pl.col("stage").replace_strict(order, return_dtype=pl.Int32).alias("_o")) \
        .sort(pl.col("device") == "all", "device", "_o").drop("_o").with_columns(pl.col("n").cast(pl.Int64))


def overhead(stats: pl.DataFrame) -> pl.DataFrame:
    """btt's Device Overhead: each stage's total as % of Q2C's, per device and Overall."""
    per = stats.filter(pl.col("device") != "all")
    wide = {(r["device"], r["stage"]): r for r in per.iter_rows(named=True)}
    devices = sorted({d for d, _ in wide}, key=_dev_sort)
    rows, sums = [], {name: 0 for name in OVERHEAD + ("Q2C",)}
    ns = {name: 0 for name in OVERHEAD}
    for dev in devices:
        q2c = wide.get((dev, "Q2C"))
        if not q2c or q2c["n"] == 0 or q2c["total_ns"] == 0:
            continue
        row = {"device": dev}
        for name in OVERHEAD:
            st = wide.get((dev, name))
            row[name] = 100.0 * (st["total_ns"] if st else 0) / q2c["total_ns"]
            sums[name] += st["total_ns"] if st else 0
            ns[name] += st["n"] if st else 0
        sums["Q2C"] += q2c["total_ns"]
        rows.append(row)
    if rows:
        overall = {"device": "Overall"}
        for name in OVERHEAD:
            overall[name] = 100.0 * sums[name] / sums["Q2C"] if ns[name] else 0.0
        rows.append(overall)
    return pl.DataFrame(rows, schema={"device": pl.Utf8, **{n: pl.Float64 for n in OVERHEAD}})


def _dev_sort(dev: str):
    major, _, minor = dev.partition(",")
    return (int(major), int(minor)) if major.isdigit() and minor.isdigit() else (1 << 30, 0)


def _btt_categories(stats: pl.DataFrame, n_done: int) -> pl.DataFrame:
    """Profile "btt": Overall Device Overhead rows; normalized = stage total / I/Os completed."""
    od = overhead(stats)
    overall = od.filter(pl.col("device") == "Overall")
    per = stats.filter(pl.col("device") != "all")
    counted = set(od.filter(pl.col("device") != "Overall")["device"].to_list())
    rows = []
    for name in OVERHEAD:
        total = int(per.filter((pl.col("stage") == name) & pl.col("device").is_in(list(counted)))["total_ns"].sum())
        rows.append({"name": name, "total_ns": total,
                     "percent": float(overall[name][0]) if overall.height else 0.0,
                     "normalized_ns": total / n_done if n_done else None})
    return pl.DataFrame(rows, schema={"name": pl.Utf8, "total_ns": pl.Int64, "percent": pl.Float64,
                                      "normalized_ns": pl.Float64})


# ---------------------------------------------------------------- per device, time

def busy_segments(queues: pl.DataFrame, start_ns: int, end_ns: int) -> pl.DataFrame:
    """Per device, Busy (at least one request between D and C) and Idle time, tiling the trace."""
    iv = queues.filter(pl.col("d_t").is_not_null() & pl.col("c_t").is_not_null()).select(
        "device", pl.col("d_t").alias("s"), pl.max_horizontal("d_t", "c_t").alias("e")).sort("device", "s")
    iv = iv.with_columns(pl.col("e").cum_max().over("device").shift(1).over("device").alias("prev_end"))
    iv = iv.with_columns((pl.col("prev_end").is_null() | (pl.col("s") > pl.col("prev_end")))
                         .cast(pl.Int64).cum_sum().over("device").alias("run"))
    busy = iv.group_by("device", "run").agg(pl.col("s").min(), pl.col("e").max()).sort("device", "s")
    rows = []
    for dev, part in busy.group_by("device", maintain_order=True):
        t = start_ns
        for s, e in zip(part["s"].to_list(), part["e"].to_list()):
            if s > t:
                rows.append((dev[0], t, s, "IDLE", "Idle"))
            rows.append((dev[0], s, e, "BUSY", "Busy"))
            t = e
        if end_ns > t:
            rows.append((dev[0], t, end_ns, "IDLE", "Idle"))
    seg = {"start_ns": [r[1] for r in rows], "end_ns": [r[2] for r in rows],
           "phase": [r[3] for r in rows], "category": [r[4] for r in rows]}
    return schema.frame(seg, schema.SEGMENTS).with_columns(pl.Series("device", [r[0] for r in rows], pl.Utf8))


def depth_stats(queues: pl.DataFrame) -> pl.DataFrame:
    """Per device: max and time-averaged number of requests between D and C."""
    iv = queues.filter(pl.col("d_t").is_not_null() & pl.col("c_t").is_not_null())
    steps = pl.concat([iv.select("device", pl.col("d_t").alias("t"), pl.lit(1).alias("x")),
                       iv.select("device", pl.col("c_t").alias("t"), pl.lit(-1).alias("x"))])
    steps = steps.sort("device", "t", "x").with_columns(pl.col("x").cum_sum().over("device").alias("depth"))
    return steps.group_by("device").agg(pl.col("depth").max().alias("max_depth"))


def device_table(ev: pl.DataFrame, queues: pl.DataFrame, segments: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    counts = ev.group_by("device").agg(
        (pl.col("act") == "Q").sum().alias("queued"), (pl.col("act") == "D").sum().alias("dispatched"),
        (pl.col("act") == "C").sum().alias("completed_events"),
        pl.col("act").is_in(["M", "F"]).sum().alias("merges"), (pl.col("act") == "R").sum().alias("requeues"))
    done = queues.filter(pl.col("c_t").is_not_null())
    per = done.group_by("device").agg(
        pl.len().alias("ios_completed"), pl.col("bytes").sum().alias("bytes"),
        pl.col("rwbs").str.contains("W").sum().alias("writes"),
        ((pl.col("c_t") - pl.col("d_t")).clip(lower_bound=0).sum() / max(elapsed_ns, 1)).alias("avg_depth"))
    busy = segments.filter(pl.col("category") == "Busy").group_by("device").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"))
    d = ev.filter(pl.col("act") == "D").sort("idx").with_columns(
        (pl.col("sector") - pl.col("end").shift(1).over("device")).abs().alias("seek"))
    seeks = d.group_by("device").agg(pl.col("seek").drop_nulls().mean().alias("seek_mean_sectors"),
                                     pl.col("seek").drop_nulls().median().alias("seek_median_sectors"),
                                     (pl.col("seek") > 0).sum().alias("seeks"))
    secs = elapsed_ns / 1e9 if elapsed_ns else 0
    out = counts.join(per, on="device", how="left").join(busy, on="device", how="left") \
        .join(seeks, on="device", how="left").join(depth_stats(queues), on="device", how="left")
    out = out.with_columns(pl.col("ios_completed", "bytes", "busy_ns", "writes").fill_null(0))
    return out.with_columns(
        (100.0 * pl.col("busy_ns") / max(elapsed_ns, 1)).alias("busy_percent"),
        (pl.col("ios_completed") / secs if secs else pl.lit(None)).alias("iops"),
        (pl.col("bytes") / float(1 << 20) / secs if secs else pl.lit(None)).alias("mib_s"),
    ).sort(pl.col("device").str.split(",").list.first().cast(pl.Int64),
           pl.col("device").str.split(",").list.last().cast(pl.Int64))


def process_table(queues: pl.DataFrame, names: dict) -> pl.DataFrame:
    """Per process (the name of the Q's pid): I/Os queued and completed, bytes, Q2C and D2C."""
    q = queues.with_columns(pl.col("pid").replace_strict(names, default=None, return_dtype=pl.Utf8)
                            .fill_null(pl.col("pid").cast(pl.Utf8)).alias("process"))
    return q.group_by("process").agg(
        pl.len().alias("queued"), pl.col("c_t").is_not_null().sum().alias("ios_completed"),
        pl.col("bytes").filter(pl.col("c_t").is_not_null()).sum().alias("bytes"),
        pl.col("q2c_ns").mean().alias("q2c_avg_ns"), pl.col("q2c_ns").max().alias("q2c_max_ns"),
        pl.col("d2c_ns").mean().alias("d2c_avg_ns"),
    ).sort("queued", "process", descending=[True, False])


def size_histogram(ev: pl.DataFrame) -> pl.DataFrame:
    """Dispatched request sizes (D events), in power-of-two buckets of bytes."""
    d = ev.filter(pl.col("act") == "D")
    bucket = (pl.lit(2.0).pow(pl.col("bytes").cast(pl.Float64).log(2).ceil())).cast(pl.Int64)
    h = d.group_by(bucket.alias("bytes_max")).agg(
        pl.len().alias("requests"), pl.col("rwbs").str.contains("W").sum().alias("writes"))
    return h.sort("bytes_max").with_columns((pl.col("requests") - pl.col("writes")).alias("reads_other"))


# ---------------------------------------------------------------- analysis

def ios_frame(queues: pl.DataFrame, names: dict) -> pl.DataFrame:
    q = queues
    n = q.height
    base = {
        "io": q["q"], "device": q["device"],
        "op": q["rwbs"], "lba": q["sector"], "blocks": q["bytes"] // SECTOR,
        "bytes": q["bytes"], "data_bytes": q["bytes"], "start_ns": q["q_t"], "end_ns": q["c_t"],
        "status": pl.Series([None] * n, dtype=pl.Utf8),
        "complete": q["c_t"].is_not_null(), "partial": pl.Series([False] * n),
    }
    df = schema.frame({k: (v.to_list() if isinstance(v, pl.Series) else v) for k, v in base.items()}, schema.IOS)
    extra = q.select(
        "pid", pl.col("pid").replace_strict(names, default=None, return_dtype=pl.Utf8).alias("process"),
        "q2g_ns", "g2i_ns", "q2m_ns", "i2d_ns", "d2c_ns", "q2c_ns",
        pl.col("q2m_ns").is_not_null().alias("merged"))
    return pl.concat([df, extra], how="horizontal").with_columns(
        pl.when(pl.col("complete")).then(pl.lit("OK")).otherwise(pl.lit("INCOMPLETE")).alias("status"))


def analyze(capture: Capture, options) -> Analysis:
    opts = dict(getattr(options, "layer_options", {}) or {})
    events = _filtered(capture.frames["events"], opts)
    names = dict(capture.frames["processes"].iter_rows()) if "processes" in capture.frames else {}
    run = machine(events)
    queues, samples, ev = run["queues"], run["samples"], run["events"]
    if opts.get("pid") is not None:
        pids = _pid_set(opts["pid"], names)
        queues = queues.filter(pl.col("pid").is_in(pids))
        samples = samples.filter(pl.col("pid").is_in(pids))
    start_ns = int(events["t_ns"].min()) if events.height else 0
    end_ns = int(events["t_ns"].max()) if events.height else 0
    elapsed = end_ns - start_ns
    stats = stage_stats(samples)
    done = queues.filter(pl.col("c_t").is_not_null())
    segments = busy_segments(queues, start_ns, end_ns)
    json_extra = {
        "stages": _stages_json(stats),
        "events": event_counts(events),
        "overhead": overhead(stats).to_dicts(),
        "devices": device_table(ev, queues, segments, elapsed).to_dicts(),
        "processes": process_table(queues, names).to_dicts(),
        "size_histogram": size_histogram(ev).to_dicts(),
    }
    notes = [
        "block layer: stage times as btt computes them; Device Overhead percentages are of Q2C time "
        "(Q2G+G2I and Q2M are alternatives, so they need not sum to 100)",
    ]
    if opts.get("pid") is not None:
        notes.append("--pid: I/Os queued by the given process(es) only; Q2Q is between their Qs")
    n_done = int(samples.filter(pl.col("stage") == "Q2C").height)
    return Analysis(
        layer="block", capture=capture, elapsed_ns=elapsed, start_ns=start_ns,
        segments=segments, ios=ios_frame(queues, names), anomalies=capture.anomalies,
        ios_completed=int(done.height), data_bytes=int(done["bytes"].sum() or 0),
        category_order={"btt": list(OVERHEAD)}, default_profile="btt",
        categories={"btt": _btt_categories(stats, n_done)}, notes=notes,
        source={"path": capture.path, "format": capture.format, "files": capture.meta.get("files")},
        extra={"json": json_extra, "stats": stats, "no_normalized": []},
    )


def _pid_set(pid, names: dict) -> list[int]:
    out = []
    for item in str(pid).split(","):
        item = item.strip()
        if item.isdigit():
            out.append(int(item))
        else:
            matches = [p for p, n in names.items() if n == item]
            if not matches:
                raise UsageError(f"--pid {item!r}: no such pid or process name in the trace")
            out.extend(matches)
    return out


def _stages_json(stats: pl.DataFrame) -> list[dict]:
    """The issue's `stages` list: every stage with samples, per device and "all"."""
    rows = []
    for r in stats.iter_rows(named=True):
        rows.append({"device": r["device"], "name": r["stage"], "n": int(r["n"]),
                     "min_ns": int(r["min_ns"]), "avg_ns": float(r["avg_ns"]),
                     "max_ns": int(r["max_ns"]), "total_ns": int(r["total_ns"])})
    have = {(r["device"], r["name"]) for r in rows}
    for dev in sorted({r["device"] for r in rows} | {"all"}):
        for name in JSON_STAGES:
            if (dev, name) not in have:
                rows.append({"device": dev, "name": name, "n": 0, "min_ns": None, "avg_ns": None,
                             "max_ns": None, "total_ns": 0})
    return rows


def event_counts(events: pl.DataFrame) -> dict:
    """Records per blkparse action letter (T = timer unplug, blkparse's UT)."""
    return {k: int(v) for k, v in events.group_by("act").len().sort("act").iter_rows()}
