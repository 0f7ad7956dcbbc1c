"""A small, independent model of a SCSI bus for tests: it drives the lines the way the
SCSI-2 phase sequences do and records, beside the transitions, the segments and I/Os an
analyzer must find. It shares no code with scsitrace.bus on purpose.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from scsitrace.schema import SIGNAL_BIT, SIGNALS, TRANSITIONS

LEVEL_SIGNALS = {
    1: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O"],
    2: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"],
    3: ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"],
}
CODES = {"DATA OUT": (0, 0, 0), "DATA IN": (0, 0, 1), "COMMAND": (0, 1, 0), "STATUS": (0, 1, 1),
         "MESSAGE OUT": (1, 1, 0), "MESSAGE IN": (1, 1, 1), "RESERVED": (1, 0, 0)}
CAT = {"ARBITRATION": "Arbitration", "SELECTION": "Selection", "RESELECTION": "Reselection",
       "COMMAND": "Command", "MESSAGE OUT": "Message Out", "MESSAGE IN": "Message In",
       "DATA IN": "Data Transfer", "DATA OUT": "Data Transfer", "STATUS": "Status", "BUS FREE": "Bus Free",
       "RESET": "Reset", "RESERVED": "Unknown"}


@dataclass
class Seg:
    start_ns: int
    end_ns: int | None
    phase: str
    category: str
    target: int | None = None
    connection: int | None = None
    io: int | None = None
    bytes: int | None = None


@dataclass
class BusBuilder:
    level: int = 3
    initiator: int = 7
    tick_ns: int = 50
    byte_ns: int = 250
    invert_db: bool = False
    t: int = 0
    lines: int = 0
    db: int | None = None
    rows: list = field(default_factory=list)
    segs: list = field(default_factory=list)
    n_conn: int = 0
    n_io: int = 0
    completed: int = 0
    data_bytes: int = 0
    skewed: int = 0

    # -- raw line control ----------------------------------------------------------------
    def emit(self, **changes):
        for name, value in changes.items():
            if name == "DB":
                self.db = value
                continue
            bit = 1 << SIGNAL_BIT[name.replace("_", "/") if name in ("C_D", "I_O") else name]
            self.lines = (self.lines | bit) if value else (self.lines & ~bit)
        db = None
        if self.level == 3 and self.db is not None:
            db = self.db ^ 0xFF if self.invert_db else self.db
        shown = self.lines
        if self.level == 1:
            shown &= ~((1 << SIGNAL_BIT["REQ"]) | (1 << SIGNAL_BIT["ACK"]))
        self.rows.append((self.t, shown, db))

    def wait(self, ns: int):
        assert ns % self.tick_ns == 0, ns
        self.t += ns

    def begin(self, phase, target=None, conn=None, io=None, category=None):
        if self.segs and self.segs[-1].end_ns is None:
            self.segs[-1].end_ns = self.t
        self.segs.append(Seg(self.t, None, phase, category or CAT[phase], target, conn, io,
                             0 if self.level >= 2 and phase in CODES else None))

    # -- phases --------------------------------------------------------------------------
    def bus_free(self, ns: int = 2000):
        self.begin("BUS FREE")
        self.emit(BSY=0, SEL=0, ATN=0, MSG=0, C_D=0, I_O=0, REQ=0, ACK=0, DB=None)
        self.wait(ns)

    def arbitrate(self, dev: int, conn: int, target: int, io=None, ns: int = 2400):
        self.begin("ARBITRATION", target, conn, io)
        self.emit(BSY=1, DB=1 << dev)
        self.wait(ns)

    def select(self, target: int, conn: int, io=None, atn=True, reselect=False, ns: int = 3000,
               initiator=None):
        initiator = self.initiator if initiator is None else initiator
        self.begin("RESELECTION" if reselect else "SELECTION", target, conn, io)
        self.emit(SEL=1, ATN=1 if atn else 0, I_O=1 if reselect else 0, DB=(1 << target) | (1 << initiator))
        self.wait(ns // 3)
        self.emit(BSY=0)          # the arbitration winner lets go of BSY ...
        self.wait(ns // 3)
        self.emit(BSY=1)          # ... and the selected device answers
        self.wait(ns - 2 * (ns // 3))

    def info(self, phase: str, data: bytes, target=None, conn=None, io=None, pause_ns: int = 1000,
             category=None, atn_off=False, skew_ns: int = 0):
        """An information phase; with `skew_ns`, I/O changes that much before MSG and C/D
        (a transitional line state that belongs to this phase)."""
        msg, cd, io_bit = CODES[phase]
        self.begin(phase, target, conn, io, category)
        io_now = (self.lines >> SIGNAL_BIT["I/O"]) & 1
        if skew_ns and io_now != io_bit and (self.lines >> SIGNAL_BIT["BSY"]) & 1:
            self.emit(SEL=0, I_O=io_bit)
            self.wait(skew_ns)
            self.skewed += 1
        self.emit(SEL=0, MSG=msg, C_D=cd, I_O=io_bit, DB=None, **({"ATN": 0} if atn_off else {}))
        self.wait(pause_ns)
        inbound = bool(io_bit)
        for b in data:
            if self.level >= 2:
                self.emit(REQ=1, **({"DB": b} if inbound else {}))
                self.wait(self.byte_ns // 2 // self.tick_ns * self.tick_ns or self.tick_ns)
                self.emit(ACK=1, **({} if inbound else {"DB": b}))
                self.wait(self.tick_ns)
                self.emit(REQ=0)
                self.wait(self.tick_ns)
                self.emit(ACK=0)
                rest = self.byte_ns - (self.byte_ns // 2 // self.tick_ns * self.tick_ns or self.tick_ns) \
                    - 2 * self.tick_ns
                self.wait(max(rest, 0))
            else:
                self.wait(self.byte_ns)
        if self.level >= 2:
            self.segs[-1].bytes = len(data)
        self.wait(200)
        if phase.startswith("DATA"):
            self.data_bytes += len(data)

    # -- whole sequences -----------------------------------------------------------------
    def open_io(self, target: int, lun: int = 0):
        """Arbitration, selection with ATN and IDENTIFY: the start of a new I/O, left open
        for the test to drive. Returns (io, connection)."""
        io, conn = self.n_io, self.n_conn
        self.n_io += 1
        self.n_conn += 1
        self.arbitrate(self.initiator, conn, target, io)
        self.select(target, conn, io)
        self.info("MESSAGE OUT", bytes([0xC0 | lun]), target, conn, io, atn_off=True)
        return io, conn

    def command(self, target: int, cdb: bytes, *, lun=0, tag=None, atn=True, data_in: bytes = b"",
                data_out: bytes = b"", disconnect_after_command=False, status=0x00, arbitrate=True):
        """One I/O from arbitration to completion or to its first disconnect. Returns (io, conn)."""
        io, conn = self.n_io, self.n_conn
        self.n_io += 1
        self.n_conn += 1
        if arbitrate:
            self.arbitrate(self.initiator, conn, target, io)
        self.select(target, conn, io, atn=atn)
        if atn:
            msgs = bytes([0xC0 | lun]) + (bytes([0x20, tag]) if tag is not None else b"")
            self.info("MESSAGE OUT", msgs, target, conn, io, atn_off=True)
        self.info("COMMAND", cdb, target, conn, io)
        if disconnect_after_command:
            self.info("MESSAGE IN", b"\x04", target, conn, io, category="Disconnect/Reconnect")
            self.bus_free()
            return io, conn
        self.transfer_and_complete(target, conn, io, data_in, data_out, status)
        return io, conn

    def reconnect(self, target: int, io: int, *, lun=0, tag=None, data_in: bytes = b"",
                  data_out: bytes = b"", status=0x00, disconnect_again=False):
        conn = self.n_conn
        self.n_conn += 1
        self.arbitrate(target, conn, target, io)
        self.select(target, conn, io, atn=False, reselect=True)
        msgs = bytes([0x80 | lun]) + (bytes([0x20, tag]) if tag is not None else b"") + b"\x03"
        self.info("MESSAGE IN", msgs, target, conn, io, category="Disconnect/Reconnect")
        if disconnect_again:
            self.info("DATA IN" if data_in else "DATA OUT", data_in or data_out, target, conn, io)
            self.info("MESSAGE IN", b"\x02\x04", target, conn, io, category="Disconnect/Reconnect")
            self.bus_free()
            return conn
        self.transfer_and_complete(target, conn, io, data_in, data_out, status)
        return conn

    def transfer_and_complete(self, target, conn, io, data_in, data_out, status):
        if data_in:
            self.info("DATA IN", data_in, target, conn, io)
        if data_out:
            self.info("DATA OUT", data_out, target, conn, io)
        self.info("STATUS", bytes([status]), target, conn, io)
        self.info("MESSAGE IN", b"\x00", target, conn, io)
        self.completed += 1
        self.bus_free()

    def reset(self, ns: int = 25000):
        self.begin("RESET")
        self.emit(RST=1, BSY=0, SEL=0, MSG=0, C_D=0, I_O=0, REQ=0, ACK=0, ATN=0, DB=None)
        self.wait(ns)
        self.begin("BUS FREE")
        self.emit(RST=0)
        self.wait(2000)

    # -- results -------------------------------------------------------------------------
    def finish(self):
        """Close the last segment with one last record (the trace covers first to last tick)."""
        self.emit()
        if self.segs and self.segs[-1].end_ns is None:
            self.segs[-1].end_ns = self.t
        self.segs = [s for s in self.segs if s.end_ns > s.start_ns]

    def transitions(self) -> pl.DataFrame:
        t, lines, db = zip(*self.rows)
        return pl.DataFrame({"t_ns": t, "lines": lines, "db": db, "dbp": [None] * len(t)}, schema=TRANSITIONS)

    def signals(self) -> list[str]:
        return LEVEL_SIGNALS[self.level] + (["DB"] if self.level == 3 else [])

    def expected_segments(self) -> pl.DataFrame:
        return pl.DataFrame([s.__dict__ for s in self.segs], schema={
            "start_ns": pl.Int64, "end_ns": pl.Int64, "phase": pl.Utf8, "category": pl.Utf8,
            "target": pl.Int8, "connection": pl.Int64, "io": pl.Int64, "bytes": pl.Int64})

    def capture(self, settle_ns=None):
        from scsitrace.model import Capture
        tr = self.transitions()
        cap = Capture(layer="bus", path="<model>", format="model",
                      meta={"tick_ns": self.tick_ns, "initiator": self.initiator, "signals": self.signals()})
        cap.chunks = lambda: iter([tr])
        cap.records.read = tr.height
        return cap


ALL_SIGNALS = SIGNALS
