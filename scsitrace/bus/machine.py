"""The bus state machine (stage 2): walk the phase runs, rebuild connections and I/Os.

The phase of a run comes from its lines and its context (ARBITRATION and DATA OUT share a
pattern); `LEGAL_NEXT`, `CATEGORY_OF_PHASE` and the message classes are the machine as data,
here; the walk that owns every transition is compiled (Rust: native/src/bus/walker.rs, fed
these tables; its Python original is tests/bus_walker_reference.py, the reference it is
tested against). A protocol violation in the trace is not an error: it becomes an
`anomalies` row and the walk resumes at the next BUS FREE.
"""
from __future__ import annotations

import numpy as np
import polars as pl

from .. import schema, scsi
from .._native import bus as _bus
from .runs import BIT, INFO_PHASES

NO_TRANSFER = "CONNECTED, NO TRANSFER"   # BSY held, phase lines idle (the DATA OUT pattern), no REQ nor ACK
SEL_ABORT = "ABORT (SEL)"                # SEL asserted inside a connection: the initiator's abort request
INFO = frozenset(INFO_PHASES.values()) | {NO_TRANSFER}
CONNECTED = INFO | {SEL_ABORT}           # the phases inside a connection
ALWAYS = frozenset({"BUS FREE", "RESET"})
LEGAL_NEXT = {
    "START": INFO | {"ARBITRATION", "SELECTION", "RESELECTION"} | ALWAYS,
    "BUS FREE": frozenset({"ARBITRATION", "SELECTION"}) | ALWAYS,  # SCSI-1: selection without arbitration
    "ARBITRATION": frozenset({"SELECTION", "RESELECTION"}) | ALWAYS,
    "SELECTION": INFO | ALWAYS,
    "RESELECTION": INFO | ALWAYS,
    "RESET": INFO | {"ARBITRATION", "SELECTION", "RESELECTION"} | ALWAYS,
    "RESERVED": INFO | ALWAYS,  # only reached while recovering
    **{p: CONNECTED | ALWAYS for p in CONNECTED},
}

RAID1990 = ["Arbitration", "Selection", "Command", "Message Out", "Message In", "Data Transfer",
            "Disconnect/Reconnect", "Reselection", "Status", "Bus Free"]
SCSI_PHASES = ["ARBITRATION", "SELECTION", "RESELECTION", "MESSAGE OUT", "COMMAND", "DATA OUT",
               "DATA IN", "STATUS", "MESSAGE IN", "BUS FREE"]
CATEGORY_OF_PHASE = {
    "ARBITRATION": "Arbitration", "SELECTION": "Selection", "RESELECTION": "Reselection",
    "COMMAND": "Command", "MESSAGE OUT": "Message Out", "MESSAGE IN": "Message In",
    "DATA IN": "Data Transfer", "DATA OUT": "Data Transfer", "STATUS": "Status",
    "BUS FREE": "Bus Free", "RESET": "Reset", "RESERVED": "Unknown", NO_TRANSFER: "Target Busy",
    SEL_ABORT: "Abort",
}
DISCONNECT = "Disconnect/Reconnect"   # MESSAGE IN that ends a connection without STATUS, or follows RESELECTION
COMPLETION_MESSAGES = {0x00, 0x0A, 0x0B}

PHASES = tuple(_bus.WALK_PHASES)      # the compiled walk's numbering of the phases ("START": none yet)
CATEGORIES = tuple(dict.fromkeys([*CATEGORY_OF_PHASE.values(), DISCONNECT, ""]))
ABORTED = ("ABORTED (reset)", "ABORTED (unexpected bus free)", "ABORTED (SEL)")   # an I/O's status after these
_TABLES: tuple | None = None


def _tables() -> tuple:
    """The machine as data, as the compiled walk takes it (built once)."""
    global _TABLES
    if _TABLES is None:
        legal = np.array([[q in LEGAL_NEXT[p] for q in PHASES] for p in PHASES], np.bool_).ravel()
        category = np.array([CATEGORIES.index(CATEGORY_OF_PHASE.get(p, "")) for p in PHASES], np.uint8)
        info_phase = np.array([PHASES.index(INFO_PHASES.get(code, "RESERVED")) for code in range(8)], np.uint8)
        messages = np.zeros(256, np.uint8)       # bit flags: 1 queue tag, 2 two-byte, 4 completion
        messages[sorted(scsi.QUEUE_TAG_MESSAGES)] |= 1
        messages[sorted(scsi.TWO_BYTE_MESSAGES)] |= 2
        messages[sorted(COMPLETION_MESSAGES)] |= 4
        bits = np.array([BIT[s] for s in ("RST", "SEL", "BSY", "MSG", "C/D", "I/O")], np.uint16)
        _TABLES = (legal, category, CATEGORIES.index(DISCONNECT), info_phase, messages, scsi._lun_groups(), bits)
    return _TABLES


class Walker:
    """The walk over the phase runs (compiled), fed runs frames in time order (`feed`, any
    batches: a run's phase looks at the key after it, across batch edges), then `finish`;
    the canonical segments, ios and anomalies frames, and its counters."""

    def __init__(self, meta: dict, polarity_invert: bool, has_bytes: bool, has_db: bool):
        self.has_bytes = has_bytes
        self.command_set = meta.get("command_set")
        self._walk = _bus.Walker(*_tables(), int(meta.get("initiator", 7)), polarity_invert, has_bytes, has_db,
                                 "ACK" in meta.get("signals", ()))

    def walk(self, runs: pl.DataFrame) -> "Walker":
        self.feed(runs)
        self.finish()
        return self

    def feed(self, runs: pl.DataFrame) -> None:
        if not runs.height:
            return
        info = runs["info_bytes"]
        offsets = np.zeros(runs.height + 1, np.int64)
        values = np.zeros(0, np.uint8)
        if info.null_count() < runs.height:       # bytes are sampled only with the data bus
            np.cumsum(info.list.len().fill_null(0).to_numpy(), out=offsets[1:])
            values = info.explode().drop_nulls().to_numpy().astype(np.uint8, copy=False)
        db = runs["db_last"]

        def col(name, dtype):
            return np.ascontiguousarray(runs[name].to_numpy(), dtype)

        self._walk.feed(col("start_ns", np.int64), col("end_ns", np.int64), col("key", np.uint16),
                        col("n_req", np.int64), col("n_ack", np.int64),
                        np.ascontiguousarray(db.fill_null(0).to_numpy(), np.uint8), db.is_not_null().to_numpy(),
                        values, offsets)

    def finish(self) -> None:
        self._walk.finish()

    @property
    def completions(self) -> int:
        return self._walk.completions

    @property
    def unmatched_completions(self) -> int:
        return self._walk.unmatched_completions

    @property
    def ambiguous_reselections(self) -> int:
        return self._walk.ambiguous_reselections

    @property
    def recovering(self) -> bool:
        return self._walk.recovering

    # -- results ------------------------------------------------------------------------
    def segments(self) -> pl.DataFrame:
        c = self._walk.segments()
        df = pl.DataFrame({
            "start_ns": c["start_ns"], "end_ns": c["end_ns"],
            "phase": pl.Series(PHASES, dtype=pl.Utf8).gather(c["phase"]),
            "category": pl.Series(CATEGORIES, dtype=pl.Utf8).gather(c["category"]),
            **{k: _optional(c, k) for k in ("target", "initiator", "connection", "io", "bytes", "msg")},
        }, schema=schema.SEGMENTS)
        return df.filter(pl.col("end_ns") > pl.col("start_ns"))

    def ios_frame(self) -> pl.DataFrame:
        c = self._walk.ios()
        n, has_op = len(c["status"]), c["cdb_len"] >= 1
        cdb = scsi.decode_cdb_matrix(c["cdb"], c["cdb_len"], self.command_set)
        names, op_kind = _io_tables()
        # without a CDB, the data phases say which way the I/O went
        op = np.where(has_op, op_kind[c["cdb"][:, 0]], np.where(c["data_in"], 1, np.where(c["data_out"], 2, 0)))
        op_names = schema.nullable(names["op"].gather(op), op == 0)
        nbytes = pl.Series(c["data_bytes"]) if self.has_bytes else schema.nullable(np.zeros(n, np.int64), np.ones(n, bool))
        df = pl.DataFrame({
            "io": np.arange(n, dtype=np.int64), "device": names["device"].gather(c["device"]),
            "target": _optional(c, "target"), "lun": _optional(c, "lun"), "tag": _optional(c, "tag"),
            "op": op_names, "opcode": schema.nullable(c["cdb"][:, 0].astype(np.int16), ~has_op),
            "command": cdb["command"], "lba": cdb["lba"], "blocks": cdb["blocks"], "bytes": nbytes, "data_bytes": nbytes,
            "start_ns": _optional(c, "start_ns"), "end_ns": _optional(c, "end_ns"),
            "status": schema.nullable(names["status"].gather(np.maximum(c["status"], 0)), c["status"] < 0),
            "connections": c["connections"], "disconnects": c["disconnects"], "complete": c["complete"],
            "partial": c["partial"],
        }, schema=schema.IOS)
        return df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("response_ns"))

    def anomalies(self) -> pl.DataFrame:
        c = self._walk.anomalies()
        return pl.DataFrame({
            "t_ns": c["t_ns"], "kind": pl.Series(_bus.WALK_ANOMALIES, dtype=pl.Utf8).gather(c["kind"]),
            "detail": pl.Series(c["detail"], dtype=pl.Utf8), "position": pl.Series(c["position"], dtype=pl.Utf8),
        }, schema=schema.ANOMALIES)


def _io_tables() -> tuple[dict, np.ndarray]:
    """Names the ios columns are gathered from: device (target x 8 + LUN; 64: no target), op
    (0 unknown: no CDB and no data phase, then schema.OPS as scsi.op_kind_expr names them),
    status (a status byte; 256, 257 aborted); and the op of each opcode."""
    names = {"device": [f"{t}:{lun}" for t in range(8) for lun in range(8)] + [""],
             "op": ["", "read", "write", "other", "flush", "discard"],
             "status": [scsi.status_name(s) for s in range(256)] + list(ABORTED)}
    op_kind = np.full(256, 3, np.uint8)
    for code, opcodes in ((1, scsi.READ_OPS), (2, scsi.WRITE_OPS), (4, scsi.FLUSH_OPS), (5, scsi.DISCARD_OPS)):
        op_kind[sorted(opcodes)] = code
    return {k: pl.Series(v, dtype=pl.Utf8) for k, v in names.items()}, op_kind


def _optional(columns: dict, name: str) -> pl.Series:
    """Column `name` of the walk's output, null where its `name_valid` mask is False."""
    return schema.nullable(columns[name], ~columns[f"{name}_valid"], name)
