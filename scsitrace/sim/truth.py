"""Ground truth frames from the model's own record (never from the transitions it wrote).

The segments are what the HACKING.md "Bus layer rules" say an analyzer must find, restricted
to what the trace's level lets it know: without DB (levels 1 and 2) no target IDs, no message
bytes, and a reselection is tied to its I/O only when one I/O alone is disconnected; without
REQ/ACK (level 1) no byte counts.
"""
from __future__ import annotations

import polars as pl

from scsitrace import schema, scsi

INFO = {"DATA OUT", "DATA IN", "COMMAND", "STATUS", "MESSAGE OUT", "MESSAGE IN"}
CATEGORY = {
    "ARBITRATION": "Arbitration", "SELECTION": "Selection", "RESELECTION": "Reselection",
    "COMMAND": "Command", "MESSAGE OUT": "Message Out", "MESSAGE IN": "Message In",
    "DATA IN": "Data Transfer", "DATA OUT": "Data Transfer", "STATUS": "Status",
    "BUS FREE": "Bus Free", "RESET": "Reset",
}


def segments_frame(rec, end_ns: int, level: int, bus) -> pl.DataFrame:
    s = rec.seg
    n = len(s["start_ns"])
    starts = s["start_ns"]
    ends = starts[1:] + [end_ns]
    rows = {c: [] for c in schema.SEGMENTS}
    # an I/O exists for an analyzer from its COMMAND phase on
    commanded = {s["connection"][i] for i in range(n) if s["phase"][i] == "COMMAND" and starts[i] < end_ns}
    sel_conns = {s["connection"][i] for i in range(n) if s["phase"][i] == "SELECTION"}
    saw_status: dict[int, bool] = {}
    for i in range(n):
        start, end = starts[i], min(ends[i], end_ns)
        phase, conn = s["phase"][i], s["connection"][i]
        if phase == "STATUS":
            saw_status[conn] = True
        if end <= start:
            continue
        category = CATEGORY[phase]
        if phase == "MESSAGE IN":
            after_resel = i > 0 and s["phase"][i - 1] == "RESELECTION"
            last = i + 1 >= n or starts[i + 1] >= end_ns
            ends_conn = (not last and s["phase"][i + 1] == "BUS FREE") or last
            if after_resel or (ends_conn and not saw_status.get(conn)):
                category = "Disconnect/Reconnect"
        nbytes = None
        if level >= 2 and phase in INFO:
            nbytes = _bytes_until(s["bytes"][i], s["ack_times"][i], end_ns, bus)
        blind = level < 3
        rows["start_ns"].append(start)
        rows["end_ns"].append(end)
        rows["phase"].append(phase)
        rows["category"].append(category)
        rows["target"].append(None if blind else s["target"][i])
        rows["initiator"].append(s["initiator"][i])
        rows["connection"].append(conn)
        known = conn not in sel_conns or conn in commanded
        rows["io"].append((s["io_blind"][i] if blind else s["io"][i]) if known else None)
        rows["bytes"].append(nbytes)
        rows["msg"].append(None if blind else s["msg"][i])
    return pl.DataFrame(rows, schema=schema.SEGMENTS)


def _bytes_until(total: int, straddling, end_ns: int, bus) -> int:
    """Handshakes whose ACK rose by the end of the trace (runs cut by the end count in part)."""
    if not straddling:
        return total
    ack_up = bus.handshake_offsets()[0]
    for t0, n, d0 in straddling:
        first_ack = t0 + d0 + ack_up
        done = 0 if end_ns < first_ack else min(n, (end_ns - first_ack) // bus.byte_ns + 1)
        total -= n - done
    return total


def ios_frame(ios, end_ns: int, sector_bytes: int, full_segments: pl.DataFrame) -> pl.DataFrame:
    """One row per I/O whose command reached the bus; data bytes as moved before the end."""
    moved = dict(full_segments.filter(pl.col("phase").str.starts_with("DATA"))
                 .group_by("io").agg(pl.col("bytes").sum()).iter_rows())
    rows = {c: [] for c in schema.IOS}
    for io in sorted((x for x in ios if x.io is not None and x.command_ns is not None
                                        and x.command_ns < end_ns), key=lambda x: x.io):
        opcode = 0x08 if io.op == "read" else 0x0A
        complete = io.complete and io.end_ns <= end_ns
        vals = {
            "io": io.io, "device": f"{io.target}:0", "target": io.target, "lun": 0, "tag": io.tag,
            "op": io.op, "opcode": opcode, "command": scsi.opcode_name(opcode), "lba": io.lba,
            "blocks": io.nsec, "bytes": io.nsec * sector_bytes, "data_bytes": int(moved.get(io.io) or 0),
            "start_ns": io.start_ns, "end_ns": io.end_ns if (io.end_ns or end_ns + 1) <= end_ns else None,
            "status": io.status if complete or (io.status or "").startswith("ABORTED") else None,
            "connections": io.connections, "disconnects": io.disconnects,
            "complete": complete, "partial": False,
        }
        for k, v in vals.items():
            rows[k].append(v)
    return pl.DataFrame(rows, schema=schema.IOS)
