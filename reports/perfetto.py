"""`scsitrace export --perfetto`: the analysis as a Perfetto trace (protobuf TrackEvent, the
`perfetto` package's protos), to zoom from the whole trace to one command in
ui.perfetto.dev. Written packet by packet (nothing held but the analysis's own tables).

Tracks, under one root track named after the layer and the file:
- per device (`device_id`; bus: per target): the I/Os as slices named by their command
  (block: btt's RWBS op), with io, command, opcode, LBA, blocks, bytes, status, complete and
  response time as debug annotations; I/Os that overlap (queued) go on lanes, child tracks
  `I/Os`, `I/Os 2`, ... (a track's slices must nest);
- nested in each I/O, its stages: block, btt's Q2G, G2I, Q2M, I2D and D2C (from the I/O's
  stage columns: Q2G, G2I, I2D follow each other from Q, Q2M from Q, D2C ends at C); usb
  and kernel logs, the command stages of the layer's segments (COMMAND, DATA, STATUS, GAP...;
  IDLE belongs to no I/O and is left out);
- bus: a `bus phases` track with every phase segment (Bus Free included); block: a `busy`
  track per device with the layer's BUSY and IDLE segments;
- per device, when there are several, a `queue depth` counter in its track
  (`device_depth_steps`: the same I/Os in flight, that device's);
- counters on the root track, the layer's declared figures over time (scsitrace/series.py,
  the tables the HTML plots draw): `queue depth` at every change (`depth_steps`: the I/Os in
  flight as `series_queue` counts them, e.g. block from dispatch to completion), `max in
  flight` and `mean in flight` per bin (`series_queue`), `MB/s` and `I/Os per second`
  (`series_rates`), one value per bin.

Times are the analysis's: ns from the trace's start. An I/O without an end (in progress
when the trace ends) ends at the end of the trace, with complete = false.
"""
from __future__ import annotations

import heapq
import os
import zlib

import polars as pl

SEQUENCE = 1
BLOCK_STAGES = ("q2g", "g2i", "i2d")          # one after the other from Q


def _pb():
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
    return pb


class TraceWriter:
    """TracePackets written one at a time, each as a `Trace.packet` field: the file is a
    valid `Trace` message however many packets it holds."""

    def __init__(self, fh):
        self.pb, self.fh, self.packets, self._uuids = _pb(), fh, 0, set()

    def _packet(self):
        p = self.pb.TracePacket()
        p.trusted_packet_sequence_id = SEQUENCE
        if self.packets == 0:
            p.sequence_flags = self.pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
        return p

    def _write(self, p) -> None:
        body = p.SerializeToString()
        self.fh.write(b"\x0a" + _varint(len(body)) + body)
        self.packets += 1

    def track(self, key: str, name: str, parent: int | None = None, counter: str | None = None) -> int:
        uuid = zlib.crc32(key.encode()) | (1 << 32)
        while uuid in self._uuids:
            uuid += 1 << 33
        self._uuids.add(uuid)
        p = self._packet()
        p.track_descriptor.uuid = uuid
        p.track_descriptor.name = name
        if parent is not None:
            p.track_descriptor.parent_uuid = parent
        if counter is not None:
            p.track_descriptor.counter.unit_name = counter
        self._write(p)
        return uuid

    def begin(self, track: int, t_ns: int, name: str, args: dict | None = None, flow: int | None = None) -> None:
        p = self._packet()
        p.timestamp = int(t_ns)
        e = p.track_event
        e.type = self.pb.TrackEvent.TYPE_SLICE_BEGIN
        e.track_uuid = track
        e.name = name
        if flow is not None:          # slices with the same flow id are joined by arrows, in time order
            e.flow_ids.append(flow)
        for key, value in (args or {}).items():
            if value is None:
                continue
            a = e.debug_annotations.add()
            a.name = key
            if isinstance(value, bool):
                a.bool_value = value
            elif isinstance(value, int):
                a.int_value = value
            elif isinstance(value, float):
                a.double_value = value
            else:
                a.string_value = str(value)
        self._write(p)

    def end(self, track: int, t_ns: int) -> None:
        p = self._packet()
        p.timestamp = int(t_ns)
        p.track_event.type = self.pb.TrackEvent.TYPE_SLICE_END
        p.track_event.track_uuid = track
        self._write(p)

    def counter(self, track: int, t_ns: int, value: float) -> None:
        p = self._packet()
        p.timestamp = int(t_ns)
        p.track_event.type = self.pb.TrackEvent.TYPE_COUNTER
        p.track_event.track_uuid = track
        p.track_event.double_counter_value = float(value)
        self._write(p)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _io_args(row: dict) -> dict:
    args = {k: row.get(k) for k in ("io", "command", "op", "lba", "blocks", "bytes", "status", "complete",
                                    "response_ns", "process", "pid", "sense_key")}
    if row.get("opcode") is not None:
        args["opcode"] = f"0x{row['opcode']:02x}"
    return args


def _block_stages(row: dict, end: int) -> list[tuple[str, int, int]]:
    """btt's stages of a block I/O as (name, start, end), within [start_ns, end]."""
    out, t = [], row["start_ns"]
    if row.get("q2m_ns") is not None:
        out.append(("Q2M", t, t + row["q2m_ns"]))
    for stage in BLOCK_STAGES:
        if row.get(f"{stage}_ns") is not None:
            out.append((stage.upper(), t, t + row[f"{stage}_ns"]))
            t += row[f"{stage}_ns"]
    if row.get("d2c_ns") is not None and row.get("end_ns") is not None:
        out.append(("D2C", row["end_ns"] - row["d2c_ns"], row["end_ns"]))
    return [s for s in out if row["start_ns"] <= s[1] <= s[2] <= end]


class _Lanes:
    """I/Os that overlap on one device go on separate child tracks (first free lane)."""

    def __init__(self, writer: TraceWriter, device_track: int, key: str):
        self.w, self.parent, self.key = writer, device_track, key
        self.free: list[tuple[int, int]] = []    # (end of its last I/O, lane number)
        self.tracks: list[int] = []

    def take(self, start: int, end: int) -> int:
        if self.free and self.free[0][0] <= start:
            _, lane = heapq.heappop(self.free)
        else:
            lane = len(self.tracks)
            name = "I/Os" if lane == 0 else f"I/Os {lane + 1}"
            self.tracks.append(self.w.track(f"{self.key}/lane{lane}", name, self.parent))
        heapq.heappush(self.free, (end, lane))
        return self.tracks[lane]


def write(path: str, analysis, ios: pl.DataFrame) -> dict:
    """Write the Perfetto trace of `analysis` (its typed `ios` table, as `--ios` exports it)
    to `path`; returns counts of what was written."""
    layer, elapsed = analysis.layer, int(analysis.elapsed_ns or 0)
    named = lambda c: pl.when(pl.col(c) == "").then(None).otherwise(pl.col(c))  # noqa: E731
    ios = ios.with_columns(pl.coalesce(named("device_id"), named("device"), pl.lit("unknown")).alias("device_id"))
    counts = {"ios": 0, "stages": 0, "phases": 0, "counters": 0}
    with open(path, "wb") as fh:
        w = TraceWriter(fh)
        name = os.path.basename(str(analysis.capture.path or "")) or "trace"
        root = w.track("root", f"scsitrace {layer}: {name}")
        devices = {d: w.track(f"device/{d}", d, root) for d in ios["device_id"].unique(maintain_order=True)}
        if layer == "bus":
            counts["phases"] = _bus_phases(w, root, analysis.segments)
        elif layer == "block":
            counts["phases"] = _busy(w, root, devices, analysis.segments)
        stages = _stage_rows(analysis.segments) if layer in ("usb", "scsilog") else {}
        lanes = {d: _Lanes(w, t, f"device/{d}") for d, t in devices.items()}
        for row in ios.sort("start_ns", "io").iter_rows(named=True):
            end = row["end_ns"] if row["end_ns"] is not None else max(elapsed, row["start_ns"])
            track = lanes[row["device_id"]].take(row["start_ns"], end)
            w.begin(track, row["start_ns"], row.get("command") or row.get("op") or "I/O", _io_args(row))
            nested = _block_stages(row, end) if layer == "block" else stages.get(row["io"], [])
            for stage, s, e in nested:
                if row["start_ns"] <= s <= e <= end:
                    w.begin(track, s, stage)
                    w.end(track, e)
                    counts["stages"] += 1
            w.end(track, end)
            counts["ios"] += 1
        counts["counters"] = _series_counters(w, root, analysis) + _device_depth(w, root, devices, analysis)
    counts["packets"] = w.packets
    return counts


def _stage_rows(segments: pl.DataFrame) -> dict:
    """io -> [(phase, start, end)] of the segments that belong to an I/O."""
    seg = segments.filter(pl.col("io").is_not_null()).sort("io", "start_ns")
    out: dict = {}
    for io, phase, s, e in seg.select("io", "phase", "start_ns", "end_ns").iter_rows():
        out.setdefault(io, []).append((phase, s, e))
    return out


def _bus_phases(w: TraceWriter, root: int, segments: pl.DataFrame) -> int:
    track = w.track("bus/phases", "bus phases", root)
    n = 0
    for row in segments.sort("start_ns").iter_rows(named=True):
        w.begin(track, row["start_ns"], row["phase"], {"category": row["category"], "target": row["target"],
                                                        "initiator": row["initiator"], "io": row["io"],
                                                        "bytes": row["bytes"]})
        w.end(track, row["end_ns"])
        n += 1
    return n


def _busy(w: TraceWriter, root: int, devices: dict, segments: pl.DataFrame) -> int:
    n = 0
    for device, rows in segments.sort("start_ns").group_by("device", maintain_order=True):
        device_id = f"block:{device[0]}"
        parent = devices.get(device_id) or w.track(f"device/{device_id}", device_id, root)
        track = w.track(f"busy/{device_id}", "busy", parent)
        for phase, s, e in rows.select("phase", "start_ns", "end_ns").iter_rows():
            w.begin(track, s, phase)
            w.end(track, e)
            n += 1
    return n


def _series_counters(w: TraceWriter, root, analysis) -> int:
    """The layer's declared figures over time as counters of the whole trace (the HTML plots
    draw the same tables): `queue depth` at every change (`depth_steps`), and one value at the
    start of each bin of `max in flight` and `mean in flight` (`series_queue`), `MB/s` and
    `I/Os per second` (`series_rates`)."""
    n = 0
    for table, column, name, unit in (("depth_steps", "in_flight", "queue depth", "I/Os"),
                                      ("series_queue", "max_in_flight", "max in flight", "I/Os"),
                                      ("series_queue", "mean_in_flight", "mean in flight", "I/Os"),
                                      ("series_rates", "mib_s", "MB/s", "MiB/s"),
                                      ("series_rates", "iops", "I/Os per second", "I/Os/s")):
        if table not in analysis.tables:
            continue
        frame = analysis.table(table).filter(pl.col(column).is_not_null())
        if not frame.height:
            continue
        track = w.track(f"series/{column}", name, root, counter=unit)
        time = "t_ns" if table == "depth_steps" else "start_ns"
        if table == "depth_steps" and frame[time][0] > 0:      # nothing in flight before the first start
            w.counter(track, 0, 0)
            n += 1
        for t, value in frame.select(time, column).iter_rows():
            w.counter(track, t, value)
            n += 1
    return n


def _device_depth(w: TraceWriter, root: int, devices: dict, analysis) -> int:
    """A `queue depth` counter in each device's track (`device_depth_steps`), when the trace has
    more than one device (with one, the root's counter is that device's)."""
    if "device_depth_steps" not in analysis.tables:
        return 0
    steps = analysis.table("device_depth_steps")
    if steps["device_id"].n_unique() < 2:
        return 0
    n = 0
    for (device_id,), rows in steps.group_by("device_id", maintain_order=True):
        parent = devices.get(device_id) or w.track(f"device/{device_id}", device_id, root)
        track = w.track(f"depth/{device_id}", "queue depth", parent, counter="I/Os")
        if rows["t_ns"][0] > 0:
            w.counter(track, 0, 0)
            n += 1
        for t, value in rows.select("t_ns", "in_flight").iter_rows():
            w.counter(track, t, value)
            n += 1
    return n


def write_crosslayer(path: str, case: str, table: pl.DataFrame) -> dict:
    """The crosslayer table (`reports/crosslayer.py:match`) as a Perfetto trace: one track
    group per layer (blktrace D..C, ftrace dispatch..done, usbmon CBW..CSW, the QEMU bus or
    device), each matched I/O a slice there named `op #n` with its sector and length, and one
    flow per I/O through its slices, layer to layer. Each layer keeps its own clock, counted
    from its first I/O (as the table's `X@` columns): the slices line up by I/O, not by the
    layers' absolute times, which no two of these captures share."""
    from .crosslayer import LAYER_ORDER, LAYER_SPANS
    layers = [layer for layer in LAYER_ORDER if f"{layer}_start_us" in table.columns]
    counts = {"ios": table.height, "slices": 0}
    with open(path, "wb") as fh:
        w = TraceWriter(fh)
        root = w.track("crosslayer", f"scsitrace crosslayer: {case}")
        lanes = {}
        for layer in layers:
            label, start, end = LAYER_SPANS[layer]
            group = w.track(f"layer/{layer}", f"{label} ({start}..{end})", root)
            lanes[layer] = _Lanes(w, group, f"layer/{layer}")
        for layer in layers:
            rows = table.select("io", "op", "sector", "sectors", f"{layer}_start_us", f"{layer}_dur_us")
            for io, op, sector, sectors, start_us, dur_us in rows.sort(f"{layer}_start_us").iter_rows():
                if start_us is None or dur_us is None:
                    continue
                s, e = round(start_us * 1000), round((start_us + dur_us) * 1000)
                track = lanes[layer].take(s, e)
                w.begin(track, s, f"{op} #{io}", {"io": io, "sector": sector, "sectors": sectors,
                                                  "layer": layer}, flow=io + 1)
                w.end(track, e)
                counts["slices"] += 1
    counts["packets"] = w.packets
    return counts
