"""The bus state machine (stage 2): walk the phase runs, rebuild connections and I/Os.

The phase of a run comes from its lines and its context (ARBITRATION and DATA OUT share a
pattern); `LEGAL_NEXT`, `CATEGORY_OF_PHASE` and the message classes are the machine as data,
here; the walk that owns every transition is compiled (Rust: native/src/bus/walker.rs, fed
these tables; its Python original is tests/bus_walker_reference.py, the reference it is
tested against). A protocol violation in the trace is not an error: it becomes an
`anomalies` row and the walk resumes at the next BUS FREE.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

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


@dataclass(frozen=True)
class WalkTables:
    """The machine as data, as the compiled walk reads it (by name; walker.rs MachineTables)."""
    legal: np.ndarray               # len(PHASES)^2 booleans: row the phase before, column after
    category: np.ndarray            # each phase's CATEGORIES number
    disconnect_category: int
    info_phase: np.ndarray          # the phase number of each MSG C/D I/O code
    messages: np.ndarray            # per message byte, bit flags: 1 queue tag, 2 two-byte, 4 completion
    lun_groups: np.ndarray          # opcodes whose CDB byte 1 carries the LUN
    bits: np.ndarray                # the key bits of RST, SEL, BSY, MSG, C/D, I/O


@dataclass(frozen=True)
class TraceOptions:
    """What a trace holds, as the compiled walk reads it (by name; walker.rs TraceOptions)."""
    initiator_id: int
    invert: bool         # the data bus reads inverted
    has_bytes: bool      # REQ/ACK captured: handshakes counted
    has_db: bool         # the data bus sampled
    use_ack: bool        # ACK (not REQ) counts the bytes


@functools.cache
def walk_tables() -> WalkTables:
    """The machine as data, built once."""
    messages = np.zeros(256, np.uint8)
    messages[sorted(scsi.QUEUE_TAG_MESSAGES)] |= 1
    messages[sorted(scsi.TWO_BYTE_MESSAGES)] |= 2
    messages[sorted(COMPLETION_MESSAGES)] |= 4
    return WalkTables(
        legal=np.array([[q in LEGAL_NEXT[p] for q in PHASES] for p in PHASES], np.bool_).ravel(),
        category=np.array([CATEGORIES.index(CATEGORY_OF_PHASE.get(p, "")) for p in PHASES], np.uint8),
        disconnect_category=CATEGORIES.index(DISCONNECT),
        info_phase=np.array([PHASES.index(INFO_PHASES.get(code, "RESERVED")) for code in range(8)], np.uint8),
        messages=messages, lun_groups=scsi._lun_groups(),
        bits=np.array([BIT[s] for s in ("RST", "SEL", "BSY", "MSG", "C/D", "I/O")], np.uint16))


class Walker:
    """The walk over the phase runs (compiled), fed runs frames in time order (`feed`, any
    batches: a run's phase looks at the key after it, across batch edges), then `finish`;
    the canonical segments, ios and anomalies frames, and its counters."""

    def __init__(self, meta: dict, polarity_invert: bool, has_bytes: bool, has_db: bool):
        self.has_bytes = has_bytes
        self.command_set = meta.get("command_set")
        options = TraceOptions(int(meta.get("initiator", 7)), polarity_invert, has_bytes, has_db,
                               "ACK" in meta.get("signals", ()))
        self._walk = _bus.Walker(walk_tables(), options)

    def walk(self, runs: pl.DataFrame) -> "Walker":
        self.feed(runs)
        self.finish()
        return self

    def feed(self, runs: pl.DataFrame) -> None:
        self._walk.feed(runs)

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
        c = pl.DataFrame(self._walk.segments())
        df = c.with_columns(_PHASE_NAMES.gather(c["phase"]).alias("phase"),
                            _CATEGORY_NAMES.gather(c["category"]).alias("category")).cast(schema.SEGMENTS)
        return df.filter(pl.col("end_ns") > pl.col("start_ns"))

    def ios_frame(self) -> pl.DataFrame:
        walked = self._walk.ios()
        c = pl.DataFrame(walked.columns)
        cdb = scsi.decode_cdb_matrix(walked.cdb, c["cdb_len"].to_numpy(), self.command_set)
        names, op_kind = _io_tables()
        # without a CDB, the data phases say which way the I/O went; neither: no op (null)
        op = np.where(c["cdb_len"].to_numpy() >= 1, op_kind[walked.cdb[:, 0]],
                      np.where(c["data_in"].to_numpy(), 1, np.where(c["data_out"].to_numpy(), 2, 0)))
        df = pl.DataFrame({
            "io": np.arange(c.height, dtype=np.int64), "device": names["device"].gather(c["device"]),
            "target": c["target"], "lun": c["lun"], "tag": c["tag"],
            "op": names["op"].gather(op), "opcode": cdb["opcode"],
            "command": cdb["command"], "lba": cdb["lba"], "blocks": cdb["blocks"], "bytes": c["data_bytes"],
            "data_bytes": c["data_bytes"], "start_ns": c["start_ns"], "end_ns": c["end_ns"],
            "status": names["status"].gather(c["status"]),
            "connections": c["connections"], "disconnects": c["disconnects"], "complete": c["complete"],
            "partial": c["partial"],
        }, schema=schema.IOS)
        return df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("response_ns"))

    def anomalies(self) -> pl.DataFrame:
        c = pl.DataFrame(self._walk.anomalies())
        return c.with_columns(_ANOMALY_NAMES.gather(c["kind"]).alias("kind")).cast(schema.ANOMALIES)


_PHASE_NAMES = pl.Series(PHASES, dtype=pl.Utf8)
_CATEGORY_NAMES = pl.Series(CATEGORIES, dtype=pl.Utf8)
_ANOMALY_NAMES = pl.Series(_bus.WALK_ANOMALIES, dtype=pl.Utf8)


@functools.cache
def _io_tables() -> tuple[dict, np.ndarray]:
    """Names the ios columns are gathered from: device (target x 8 + LUN; 64: no target), op
    (0: none, null; then schema.OPS as scsi.op_kind_expr names them), status (a status byte;
    256-258 aborted); and the op number of each opcode."""
    names = {"device": [f"{t}:{lun}" for t in range(8) for lun in range(8)] + [""],
             "op": [None, "read", "write", "other", "flush", "discard"],
             "status": [scsi.status_name(s) for s in range(256)] + list(ABORTED)}
    op_kind = np.full(256, 3, np.uint8)
    for code, opcodes in ((1, scsi.READ_OPS), (2, scsi.WRITE_OPS), (4, scsi.FLUSH_OPS), (5, scsi.DISCARD_OPS)):
        op_kind[sorted(opcodes)] = code
    return {k: pl.Series(v, dtype=pl.Utf8) for k, v in names.items()}, op_kind
