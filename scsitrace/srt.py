"""Service response time per SCSI opcode, shared by the usb and scsilog layers.

The statistic is the one `tshark -z scsi,srt,<set>` prints (calls, min, max, avg of the
time from the command to its response), plus the percentiles and histogram it lacks.
Percentiles are nearest-rank (the smallest observed time with at least p % of the calls
at or below it), so they are always times that occurred.
"""
from __future__ import annotations

import math

import numpy as np
import polars as pl
import pyarrow as pa

from . import schema
from ._jit import compiled, inlined

# histogram bucket upper bounds: powers of two of microseconds, from 1 us
HIST_EDGES_NS = [1000 << k for k in range(0, 24)]


def _measured(ios: pl.DataFrame, time_col: str, ok_col: str) -> pl.DataFrame:
    """opcode, command and time of the commands with a measured response time."""
    return ios.select("opcode", "command", time_col, ok_col).filter(
        pl.col(ok_col) & pl.col(time_col).is_not_null() & pl.col("opcode").is_not_null())


def nearest_ranks(done: pl.DataFrame, time_col: str, opcodes: list[int], ps: tuple[float, ...]) -> list[list[int]]:
    """Nearest-rank percentiles `ps` of each opcode's times: of its ascending times, the
    one at rank ceil(p/100 * n) (at least 1), found by one np.partition per opcode (no
    sort). Returns one list per percentile, in `opcodes` order."""
    op, times = done["opcode"].to_numpy(), done[time_col].to_numpy()
    out = [[] for _ in ps]
    for opcode in opcodes:
        t = times[op == opcode]
        ks = [max(math.ceil(len(t) * (p / 100.0)), 1) - 1 for p in ps]
        part = np.partition(t, ks)
        for values, k in zip(out, ks):
            values.append(int(part[k]))
    return out


def table(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> pl.DataFrame:
    """One row per opcode over commands with a measured response time:
    opcode, name, calls, min_ns, max_ns, avg_ns, sum_ns, p50_ns, p99_ns (by opcode)."""
    done = _measured(ios, time_col, ok_col)
    schema = {"opcode": pl.Int64, "name": pl.Utf8, "calls": pl.Int64, "min_ns": pl.Int64,
              "max_ns": pl.Int64, "avg_ns": pl.Float64, "sum_ns": pl.Int64, "p50_ns": pl.Int64,
              "p99_ns": pl.Int64}
    if not done.height:
        return pl.DataFrame(schema=schema)
    agg = (done.group_by("opcode")
           .agg(pl.col("command").first().alias("name"),
                pl.len().cast(pl.Int64).alias("calls"),
                pl.col(time_col).min().alias("min_ns"),
                pl.col(time_col).max().alias("max_ns"),
                pl.col(time_col).mean().alias("avg_ns"),
                pl.col(time_col).sum().alias("sum_ns"))
           .sort("opcode"))
    opcodes = agg["opcode"].to_list()
    p50, p99 = nearest_ranks(done, time_col, opcodes, (50, 99))
    agg = agg.with_columns(pl.Series("p50_ns", p50, dtype=pl.Int64), pl.Series("p99_ns", p99, dtype=pl.Int64))
    return agg.with_columns(pl.col("opcode").cast(pl.Int64)).select(list(schema)).cast(schema)


def histogram(ios: pl.DataFrame, time_col: str = "response_ns", ok_col: str = "paired") -> list[dict]:
    """Per opcode, counts of response times in buckets (le_ns = bucket's upper bound):
    one bincount over (opcode, bucket) pairs."""
    done = _measured(ios, time_col, ok_col)
    if not done.height:
        return []
    edges = np.asarray(HIST_EDGES_NS, dtype=np.int64)
    width = len(edges) + 1
    op = done["opcode"].to_numpy()
    bucket = np.searchsorted(edges, done[time_col].to_numpy(), side="left")
    counts = np.bincount(op * width + bucket, minlength=(int(op.max()) + 1) * width).reshape(-1, width)
    names = dict(done.group_by("opcode").agg(pl.col("command").first()).iter_rows())
    return [{"opcode": opcode, "name": names[opcode],
             "buckets": [{"le_ns": int(edges[i]) if i < len(edges) else None, "count": int(c)}
                         for i, c in enumerate(counts[opcode]) if c]}
            for opcode in sorted(names)]


def as_json(srt: pl.DataFrame) -> list[dict]:
    """The `"srt"` key of the JSON contract (exactly its fields)."""
    return [{"opcode": int(r["opcode"]), "name": r["name"], "calls": int(r["calls"]),
             "min_ns": int(r["min_ns"]), "max_ns": int(r["max_ns"]), "avg_ns": float(r["avg_ns"]),
             "p50_ns": int(r["p50_ns"]), "p99_ns": int(r["p99_ns"])}
            for r in srt.iter_rows(named=True)]


def commands_json(ios: pl.DataFrame) -> dict:
    """The `"commands"` key: totals reconcile, total = paired + unpaired."""
    total = ios.height
    paired = int(ios["paired"].sum()) if total else 0
    reasons = (ios.filter(~pl.col("paired")).group_by("reason").len().sort("reason")
               if total else pl.DataFrame({"reason": [], "len": []}))
    return {"total": total, "paired": paired, "unpaired": total - paired,
            "by_reason": {r: int(n) for r, n in reasons.iter_rows()}}


def devices_json(ios: pl.DataFrame, elapsed_ns: int) -> list[dict]:
    """Per device (bus:addr:lun or host:channel:id:lun, in numeric order): commands, bytes,
    MiB/s, IOPS, average response. Bytes and MiB/s are null when the layer has no sizes."""
    if not ios.height:
        return []
    secs = elapsed_ns / 1e9 if elapsed_ns else 0.0
    agg = ios.group_by("device").agg(
        pl.len().alias("commands"), pl.col("paired").sum().alias("paired"),
        pl.col("data_bytes").sum().alias("data_bytes"), pl.col("data_bytes").is_not_null().any().alias("sized"),
        pl.col("response_ns").filter(pl.col("paired")).mean().alias("avg_response_ns"))
    rows = sorted(agg.iter_rows(named=True), key=lambda r: _device_key(r["device"]))
    out = []
    for r in rows:
        data = int(r["data_bytes"]) if r["sized"] else None
        out.append({"device": r["device"], "commands": int(r["commands"]), "paired": int(r["paired"]),
                    "data_bytes": data,
                    "bandwidth_mib_s": data / float(1 << 20) / secs if secs and data is not None else None,
                    "iops": r["paired"] / secs if secs else None,
                    "avg_response_ns": r["avg_response_ns"]})
    return out


def _device_key(device: str) -> list:
    return [int(p) if p.isdigit() else p for p in str(device).split(":")]


NULL = np.iinfo(np.int64).min     # a missing time in numpy columns
IDLE = "IDLE"


PIECE_COLUMNS = ("dev", "io", "start", "end", "phase", "bytes")   # a stage piece, as a row of int64


def tile_pieces(pieces: pl.DataFrame, elapsed_ns: int) -> pl.DataFrame:
    """Segments from stage pieces (device, io, start_ns, end_ns, phase, bytes): see `tile`."""
    p = pieces.filter(pl.col("start_ns").is_not_null() & pl.col("end_ns").is_not_null())
    if not p.height:
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phases = p["phase"].unique().sort()
    rows = np.column_stack([
        (p["device"].rank("dense").to_numpy() - 1).astype(np.int64),
        p["io"].cast(pl.Int64).fill_null(NULL).to_numpy(),
        p["start_ns"].to_numpy(), p["end_ns"].to_numpy(),
        (p["phase"].rank("dense").to_numpy() - 1).astype(np.int64),
        p["bytes"].cast(pl.Int64).fill_null(NULL).to_numpy()]).astype(np.int64)
    return segments_frame(tile(rows, elapsed_ns, phases.to_list()), p["device"].unique().sort())


def tile(pieces: np.ndarray, elapsed_ns: int, phases: list[str], segments: bool = True,
         in_order: bool = False) -> dict:
    """Per device, each instant goes to the earliest-starting piece covering it (later
    overlapping pieces are clipped), and IDLE fills the rest of [0, elapsed_ns]: the result
    tiles exactly. `pieces`: one row per piece, PIECE_COLUMNS (`dev`: device codes in the
    devices' report order; `phase`: index into `phases`; io and bytes NULL where none;
    start and end known); a row per piece keeps each piece in one cache line while the
    pass visits them in time order. Returns "totals" (time per phase name, IDLE included),
    "devices" (how many devices have segments) and, with `segments`, the segment columns
    in (device, time) order. `in_order`: the caller knows the pieces are in (device,
    start) order already."""
    names = [*phases, IDLE] if IDLE not in phases else list(phases)
    if not len(pieces):
        empty = np.zeros(0, np.int64)
        return {**{c: empty for c in PIECE_COLUMNS}, "phases": names, "totals": {}, "devices": 0}
    if not in_order:
        key, in_order = _device_start_key(pieces, elapsed_ns)
    # by device, start, then piece order (pieces often come in that order already)
    order = np.arange(len(pieces)) if in_order else np.argsort(key, kind="stable")
    # upper bound; untouched pages cost nothing
    out = np.empty((6, 3 * len(order) + 1 if segments else 0), np.int64)
    totals, counts = np.zeros(len(names), np.int64), np.zeros(len(names), np.int64)
    m, devices = _tile(order, pieces, names.index(IDLE), elapsed_ns, segments, out, totals, counts)
    found = tile_totals(names, totals, counts, devices)
    return {**dict(zip(PIECE_COLUMNS, out[:, :m])), **found} if segments else found


def tile_totals(names: list[str], totals: np.ndarray, counts: np.ndarray, devices: int) -> dict:
    """`tile`'s result without segments, from the time and segment count per phase code."""
    return {"phases": names, "devices": int(devices),
            "totals": {name: int(totals[k]) for k, name in enumerate(names) if counts[k]}}


@compiled
def _device_start_key(pieces, elapsed):
    """dev * span + start of each piece (rows of PIECE_COLUMNS), span past every time and
    `elapsed`: ascending keys sort by device, then start; and whether they ascend."""
    span = elapsed
    for p in range(pieces.shape[0]):
        span = max(span, pieces[p, 2], pieces[p, 3])
    span += 1
    key = np.empty(pieces.shape[0], np.int64)
    in_order = True
    for p in range(pieces.shape[0]):
        key[p] = pieces[p, 0] * span + pieces[p, 2]
        in_order = in_order and (p == 0 or key[p] >= key[p - 1])
    return key, in_order


@inlined
def place(start, end, covered, last_end):
    """Where a device's next piece [start, end) goes (pieces in start order): it starts no
    earlier than `covered`, the latest end before it (-1 for none); `last_end`: where
    the device's last segment ended (-1 for none). Returns (whether the piece keeps a
    segment (else it is left empty), the segment's start, where the IDLE before it
    starts (its start for no IDLE), covered after it, last_end after it)."""
    s = max(start, covered)
    if end <= s:
        return False, s, s, max(covered, end), last_end
    return True, s, min(max(last_end, 0), s), max(covered, end), max(covered, end)


@compiled
def _tile(order, pieces, idle, elapsed, emit, out, totals, counts):
    """Pieces taken in `order` (by device, then start) -> segments (`place`), written to
    `out` rows (PIECE_COLUMNS) when `emit`; adds time and segments per phase to `totals`
    and `counts`. Returns the number of segments and of devices with segments."""
    n = order.shape[0]
    devices = 0
    m = 0
    k = 0
    while k < n:
        d = pieces[order[k], 0]
        first_segment = m
        covered = np.int64(-1)
        last_end = np.int64(-1)
        while k < n and pieces[order[k], 0] == d:
            p = order[k]
            e = pieces[p, 3]
            kept, s, idle_from, covered, last_end = place(pieces[p, 2], e, covered, last_end)
            if kept:
                if idle_from < s:
                    if emit:
                        out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = \
                            d, NULL, idle_from, s, idle, NULL
                    totals[idle] += s - idle_from
                    counts[idle] += 1
                    m += 1
                if emit:
                    out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = \
                        d, pieces[p, 1], s, e, pieces[p, 4], pieces[p, 5]
                totals[pieces[p, 4]] += e - s
                counts[pieces[p, 4]] += 1
                m += 1
            k += 1
        if m > first_segment and elapsed > last_end:
            if emit:
                out[0, m], out[1, m], out[2, m], out[3, m], out[4, m], out[5, m] = d, NULL, last_end, elapsed, idle, NULL
            totals[idle] += elapsed - last_end
            counts[idle] += 1
            m += 1
        if m > first_segment:
            devices += 1
    return m, devices


def segments_frame(tiles: dict, devices: pl.Series) -> pl.DataFrame:
    """The segments frame (schema SEGMENTS + device) of `tile`'s columns; `devices` names
    the device codes."""
    if not len(tiles["start"]):
        return pl.DataFrame(schema={**schema.SEGMENTS, "device": pl.Utf8})
    phase = pl.Series("phase", tiles["phases"], dtype=pl.Utf8).gather(tiles["phase"])
    null = pl.lit(None)
    return pl.DataFrame({"start_ns": tiles["start"], "end_ns": tiles["end"], "phase": phase}).with_columns(
        pl.col("phase").alias("category"), null.cast(pl.Int8).alias("target"), null.cast(pl.Int8).alias("initiator"),
        null.cast(pl.Int64).alias("connection"), nullable(tiles["io"], name="io"), nullable(tiles["bytes"], name="bytes"),
        null.cast(pl.UInt8).alias("msg"), devices.cast(pl.Utf8).gather(tiles["dev"]).alias("device"))


def nullable(values: np.ndarray, null: np.ndarray | None = None, name: str = "") -> pl.Series:
    """Series of `values`, null where `null` (default: where the value is NULL)."""
    null = values == NULL if null is None else null
    if not null.any():
        return pl.Series(name, values)
    return pl.Series(name, pa.array(values, mask=null))


def categories(segments: pl.DataFrame, stages, elapsed_ns: int, completed: int) -> pl.DataFrame:
    """Stage totals summed over devices; percent of (devices x elapsed), so they sum to 100."""
    n_dev = segments["device"].n_unique() if segments.height else 0
    totals = dict(segments.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("d"))
                  .group_by("phase").agg(pl.col("d").sum()).iter_rows()) if segments.height else {}
    return category_table(totals, n_dev, stages, elapsed_ns, completed)


def category_table(totals: dict, n_dev: int, stages, elapsed_ns: int, completed: int) -> pl.DataFrame:
    """Stage rows from time per phase name over `n_dev` devices."""
    whole = elapsed_ns * n_dev
    rows = [{"name": s, "total_ns": int(totals.get(s, 0)),
             "percent": 100.0 * totals.get(s, 0) / whole if whole else 0.0,
             "normalized_ns": (totals.get(s, 0) / completed if completed and s != "IDLE" else None)}
            for s in stages]
    return pl.DataFrame(rows, schema={"name": pl.Utf8, "total_ns": pl.Int64, "percent": pl.Float64,
                                      "normalized_ns": pl.Float64})
