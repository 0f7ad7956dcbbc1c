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
    """The segments an analyzer must find in the trace `rec` wrote, which ends at `end_ns`.

    Records at `end_ns` itself are in the trace: a phase that begins there is seen (its
    zero-length segment is not listed), a byte counts when its ACK rose by then.
    """
    s = rec.seg
    n = len(s["start_ns"])
    starts = s["start_ns"]
    ends = starts[1:] + [end_ns]
    ack_up = bus.handshake_offsets()[0]
    seen_next = [i + 1 < n and starts[i + 1] <= end_ns for i in range(n)]
    # an I/O exists for an analyzer from its COMMAND phase on
    commanded = {s["connection"][i] for i in range(n) if s["phase"][i] == "COMMAND" and starts[i] <= end_ns}
    sel_conns = {s["connection"][i] for i in range(n) if s["phase"][i] == "SELECTION"}
    named = _reselections_named(s, end_ns, bus.byte_ns)
    rows = {c: [] for c in schema.SEGMENTS}
    saw_status: set[int] = set()
    for i in range(n):
        start, end = starts[i], min(ends[i], end_ns)
        phase, conn = s["phase"][i], s["connection"][i]
        if phase == "STATUS":
            saw_status.add(conn)
        if end <= start:
            continue
        category = CATEGORY[phase]
        if phase == "MESSAGE IN":
            after_resel = i > 0 and s["phase"][i - 1] == "RESELECTION"
            ends_conn = not seen_next[i] or s["phase"][i + 1] == "BUS FREE"
            if after_resel or (ends_conn and conn not in saw_status):
                category = "Disconnect/Reconnect"
        row = {"start_ns": start, "end_ns": end, "phase": phase, "category": category}
        # an arbitration the trace ends in is tied to no connection (nobody selected yet)
        if not (phase == "ARBITRATION" and not seen_next[i]):
            blind = level < 3
            if conn in sel_conns:
                known = conn in commanded
            else:
                known = blind or named.get(conn, False)
            row.update(target=None if blind else s["target"][i], initiator=s["initiator"][i],
                       connection=conn,
                       io=(s["io_blind"][i] if blind else s["io"][i]) if known else None)
            runs = s["runs"][i]
            if level >= 2 and phase in INFO:
                row["bytes"] = sum(_acks_by(r, end_ns, ack_up, bus.byte_ns) for r in runs)
            # the analyzer reads a message byte at REQ (MESSAGE IN) or ACK (MESSAGE OUT) rising
            if not blind and runs:
                t0, _, d0 = runs[0]
                if (t0 if phase == "MESSAGE IN" else t0 + d0 + ack_up) <= end_ns:
                    row["msg"] = s["msg"][i]
        for col in rows:
            rows[col].append(row.get(col))
    return pl.DataFrame(rows, schema=schema.SEGMENTS)


def _acks_by(run, end_ns: int, ack_up: int, byte_ns: int) -> int:
    """Handshakes of a run whose ACK rose by `end_ns`."""
    t0, n, d0 = run
    first = t0 + d0 + ack_up
    return 0 if end_ns < first else min(n, (end_ns - first) // byte_ns + 1)


def _reqs_by(run, end_ns: int, byte_ns: int) -> int:
    """Handshakes of a run whose REQ rose by `end_ns` (the first ACK delay shifts the rest)."""
    t0, n, d0 = run
    if end_ns < t0:
        return 0
    return 1 + (0 if end_ns < t0 + d0 + byte_ns else min(n - 1, (end_ns - t0 - d0) // byte_ns))


def _reselections_named(s, end_ns: int, byte_ns: int) -> dict[int, bool]:
    """Level 3: does the trace show enough of a reselection's IDENTIFY (and queue tag) for the
    analyzer to know its I/O? With the tag cut off, only if the target has one I/O pending."""
    named = {}
    for i in range(1, len(s["start_ns"])):
        if s["phase"][i] == "MESSAGE IN" and s["phase"][i - 1] == "RESELECTION":
            got = sum(_reqs_by(r, end_ns, byte_ns) for r in s["runs"][i])
            need = s["resel_need"][i]
            named[s["connection"][i]] = got >= need or (got >= 1 and bool(s["resel_unique"][i]))
    return named


def ios_frame(ios, end_ns: int, sector_bytes: int, full_segments: pl.DataFrame) -> pl.DataFrame:
    """One row per I/O whose command reached the bus; data bytes as moved before the end."""
    moved = dict(full_segments.filter(pl.col("phase").str.starts_with("DATA"))
                 .group_by("io").agg(pl.col("bytes").sum()).iter_rows())
    rows = {c: [] for c in schema.IOS}
    for io in sorted((x for x in ios if x.io is not None and x.command_ns is not None
                                        and x.command_ns <= end_ns), key=lambda x: x.io):
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
