"""The bus walk as it was in Python, one run at a time: the reference the compiled walk
(native/src/bus/walker.rs, `scsitrace.bus.machine.Walker`) is tested against
(tests/test_bus_walker.py). Not used by the analysis.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from scsitrace import schema, scsi
NO_TRANSFER_MIN_NS = 10_000     # as native/src/bus/walker.rs
from scsitrace.bus.machine import CATEGORY_OF_PHASE, COMPLETION_MESSAGES, CONNECTED, LEGAL_NEXT, NO_TRANSFER, SEL_ABORT
from scsitrace.bus.runs import BIT, INFO_PHASES, info_code


LATE_BSY_NS = 250_000_000   # a selection's BUS FREE this long at most may still be answered by BSY


@dataclass
class _Io:
    io: int
    target: int | None = None
    lun: int | None = None
    tag: int | None = None
    cdb: bytes = b""
    start_ns: int | None = None
    end_ns: int | None = None
    status: str | None = None
    data_bytes: int = 0
    data_in: bool = False
    data_out: bool = False
    connections: int = 0
    disconnects: int = 0
    complete: bool = False
    partial: bool = False


@dataclass
class _Conn:
    id: int
    kind: str                      # "sel", "resel" or "partial" (trace began inside it)
    start_ns: int
    target: int | None = None
    initiator: int | None = None
    io: _Io | None = None
    atn: bool = False
    saw_status: bool = False
    completed: bool = False
    abort: tuple | None = None     # the initiator's first abort request (SEL): when, and the phase it interrupted
    lun: int | None = None
    tag: int | None = None
    segs: list = field(default_factory=list)   # indexes of segments still waiting for the io


class ReferenceWalker:
    def __init__(self, meta: dict, polarity_invert: bool, has_bytes: bool, has_db: bool):
        self.meta = meta
        self.initiator_id = int(meta.get("initiator", 7))
        self.invert = polarity_invert
        self.has_bytes = has_bytes
        self.has_db = has_db
        self.seg = {c: [] for c in schema.SEGMENTS}
        self.anoms = {c: [] for c in schema.ANOMALIES}
        self.ios: list[_Io] = []
        self.outstanding: dict[tuple, _Io] = {}
        self.prev = "START"
        self.conn: _Conn | None = None
        self.recovering = False
        self.n_conn = 0
        self.completions = 0
        self.unmatched_completions = 0
        self.ambiguous_reselections = 0
        self.arb_seg: int | None = None
        self.arb_db: int | None = None
        self.late_bsy: tuple | None = None     # (connection, its SELECTION segment, BUS FREE start)

    # -- helpers -----------------------------------------------------------------------
    def db(self, v):
        if v is None:
            return None
        return v ^ 0xFF if self.invert else v

    def anomaly(self, t_ns: int, kind: str, detail: str = ""):
        self.anoms["t_ns"].append(t_ns)
        self.anoms["kind"].append(kind)
        self.anoms["detail"].append(detail)
        self.anoms["position"].append(f"t={t_ns} ns")

    def add_segment(self, run, phase: str, category: str, *, msg=None, nbytes=None):
        c = self.conn
        self.seg["start_ns"].append(run["start_ns"])
        self.seg["end_ns"].append(run["end_ns"])
        self.seg["phase"].append(phase)
        self.seg["category"].append(category)
        self.seg["target"].append(c.target if c else None)
        self.seg["initiator"].append(c.initiator if c else None)
        self.seg["connection"].append(c.id if c else None)
        self.seg["io"].append(c.io.io if c and c.io else None)
        self.seg["bytes"].append(nbytes)
        self.seg["msg"].append(msg)
        idx = len(self.seg["start_ns"]) - 1
        if c is not None and c.io is None:
            c.segs.append(idx)
        return idx

    def patch_connection(self):
        """Fill ids learnt late (target from selection, io from IDENTIFY) into earlier segments."""
        c = self.conn
        for i in c.segs:
            self.seg["target"][i] = c.target
            self.seg["initiator"][i] = c.initiator
            if c.io is not None:
                self.seg["io"][i] = c.io.io
        if c.io is not None:
            c.segs.clear()

    def new_io(self, t_ns: int, partial=False) -> _Io:
        io = _Io(io=len(self.ios), start_ns=None if partial else t_ns, partial=partial)
        self.ios.append(io)
        return io

    # -- phase of a run ----------------------------------------------------------------
    def phase_of(self, key: int, next_key: int | None) -> str:
        if key & BIT["RST"]:
            return "RESET"
        if key & BIT["SEL"]:
            return "RESELECTION" if key & BIT["I/O"] else "SELECTION"
        if not key & BIT["BSY"]:
            return "BUS FREE"
        code = info_code(key)
        next_selects = next_key is not None and bool(next_key & BIT["SEL"])
        # ARBITRATION and DATA OUT share the pattern: after BUS FREE it is arbitration; at the
        # start of the trace only if a (re)selection follows
        if code == 0 and (self.prev in ("BUS FREE", "RESET") or (self.prev == "START" and next_selects)):
            return "ARBITRATION"
        return INFO_PHASES.get(code, "RESERVED")

    # -- the one function that owns every transition -----------------------------------
    def step(self, run, next_key):
        if self.late_bsy is not None:
            self.answer_late(run, next_key)
        phase = self.phase_of(run["key"], next_key)
        if phase == "DATA OUT" and self.has_bytes and run["n_req"] == 0 and run["n_ack"] == 0 \
                and run["end_ns"] - run["start_ns"] >= NO_TRANSFER_MIN_NS:
            phase = NO_TRANSFER
        if phase in ("SELECTION", "RESELECTION") and self.conn is not None and not self.recovering \
                and self.prev in CONNECTED:
            phase = SEL_ABORT
        t = run["start_ns"]
        if phase not in LEGAL_NEXT[self.prev] and phase != "RESERVED" and not self.recovering:
            self.anomaly(t, "ILLEGAL TRANSITION", f"{self.prev} -> {phase}")
            self.recovering = True
        if phase == "RESERVED":
            if not self.recovering:
                self.anomaly(t, "RESERVED PHASE", f"MSG C/D I/O = {info_code(run['key']):03b}")
            self.recovering = True
            self.add_segment(run, phase, CATEGORY_OF_PHASE[phase])
        elif phase == "RESET":
            self.on_reset(run)
        elif phase == "BUS FREE":
            self.on_bus_free(run)
        elif phase == "ARBITRATION":
            self.on_arbitration(run, next_key)
        elif phase in ("SELECTION", "RESELECTION"):
            self.on_selection(run, phase)
        elif phase == SEL_ABORT:
            self.on_abort(run)
        else:
            self.on_info(run, phase, next_key)
        self.prev = phase

    def on_reset(self, run):
        victims = list(self.outstanding.values())
        if self.conn is not None and self.conn.io is not None and self.conn.io not in victims:
            victims.append(self.conn.io)
        victims = [io for io in victims if not io.complete]
        for io in victims:
            io.status = "ABORTED (reset)"
            io.end_ns = run["start_ns"]
        self.anomaly(run["start_ns"], "RESET", f"RST asserted; {len(victims)} outstanding I/O(s) aborted")
        self.outstanding.clear()
        self.conn = None
        self.add_segment(run, "RESET", "Reset")
        self.recovering = False

    def on_bus_free(self, run):
        c = self.conn
        late = self.prev == "SELECTION" and run["end_ns"] - run["start_ns"] <= LATE_BSY_NS
        if c is not None and not self.recovering and late:
            self.late_bsy = (c, len(self.seg["start_ns"]) - 1, run["start_ns"])
        elif c is not None and not self.recovering:
            self.close_connection(c, run["start_ns"])
        self.conn = None
        self.recovering = False
        self.arb_seg = None
        self.add_segment(run, "BUS FREE", "Bus Free")

    def answer_late(self, run, next_key):
        """BSY without SEL after a selection's BUS FREE (and no selection after it): the target
        answered after SEL was released; the BUS FREE joins the selection."""
        c, sel_seg, t_ns = self.late_bsy
        self.late_bsy = None
        key = run["key"]
        selects_next = next_key is not None and bool(next_key & BIT["SEL"])
        if not (key & BIT["BSY"] and not key & (BIT["SEL"] | BIT["RST"]) and not selects_next):
            self.timeout(c, t_ns)
            return
        free_start, free_end = self.seg["start_ns"][-1], self.seg["end_ns"][-1]
        for col in self.seg.values():
            col.pop()
        self.seg["end_ns"][sel_seg] = free_end
        self.anomaly(t_ns, "SEL RELEASED BEFORE BSY",
                     f"SEL released {free_end - free_start} ns before the target raised BSY; taken as the selection")
        self.conn = c
        self.prev = "SELECTION"

    def timeout(self, c: _Conn, t_ns: int):
        self.anomaly(t_ns, "SELECTION TIMEOUT",
                     f"no target answered selection of target {c.target}" if c.target is not None else
                     "no target answered the selection")

    def finish(self):
        if self.late_bsy is not None:
            self.timeout(self.late_bsy[0], self.late_bsy[2])
            self.late_bsy = None

    def on_abort(self, run):
        """SEL asserted inside a connection: the initiator's abort request; handshakes while
        SEL is held drain the interrupted DATA phase."""
        c = self.conn
        nbytes = self.handshakes(run)
        if c.abort is None:
            c.abort = (run["start_ns"], self.prev)
            self.anomaly(run["start_ns"], "ABORT BY SEL", f"the initiator asserted SEL during {self.prev}: abort request")
        if c.io is not None and c.abort[1] in ("DATA IN", "DATA OUT"):
            c.io.data_bytes += nbytes or 0
        self.add_segment(run, SEL_ABORT, CATEGORY_OF_PHASE[SEL_ABORT], nbytes=nbytes)

    def end_aborted(self, io: _Io, t_ns: int):
        if not io.complete:
            io.status = "ABORTED (SEL)"
            io.end_ns = t_ns
            self.outstanding.pop(self.nexus_of(io), None)

    def close_connection(self, c: _Conn, t_ns: int):
        last = self.prev
        io = c.io
        if not c.completed and c.abort is not None:
            if io is not None:
                self.end_aborted(io, t_ns)
        elif c.completed:
            self.completions += 1
            if io is not None:
                io.complete = True
                io.end_ns = t_ns
                self.outstanding.pop(self.nexus_of(io), None)
            else:
                self.unmatched_completions += 1
        elif last == "MESSAGE IN":
            if io is not None:
                io.disconnects += 1
                self.outstanding[self.nexus_of(io)] = io
        elif last == "SELECTION":
            self.timeout(c, t_ns)
        elif last == "RESELECTION":
            self.anomaly(t_ns, "RESELECTION TIMEOUT", "the initiator did not answer the reselection")
        else:
            self.anomaly(t_ns, "UNEXPECTED BUS FREE", f"bus went free after {last}")
            if io is not None and not io.complete:
                io.status = "ABORTED (unexpected bus free)"
                io.end_ns = t_ns
                self.outstanding.pop(self.nexus_of(io), None)

    @staticmethod
    def nexus_of(io: _Io) -> tuple:
        """I_T_L_Q nexus; an I/O whose target is unknown (no data bus) is its own key."""
        return ("io", io.io) if io.target is None else (io.target, io.lun, io.tag)

    def on_arbitration(self, run, next_key):
        self.conn = None
        self.arb_db = self.db(run["db_last"])
        if next_key is None or not next_key & BIT["SEL"]:
            self.anomaly(run["start_ns"], "ARBITRATION WITHOUT SELECTION",
                         "BSY asserted after BUS FREE but no device went on to select")
        self.arb_seg = self.add_segment(run, "ARBITRATION", "Arbitration")

    def on_selection(self, run, phase):
        if self.recovering:
            self.add_segment(run, phase, CATEGORY_OF_PHASE[phase])
            return
        c = _Conn(id=self.n_conn, kind="sel" if phase == "SELECTION" else "resel", start_ns=run["start_ns"],
                  atn=bool(run["atn"]))
        self.n_conn += 1
        c.initiator, c.target = self.ids_of(self.db(run["db_last"]), phase == "RESELECTION",
                                             run["start_ns"])
        self.conn = c
        if self.arb_seg is not None:
            c.start_ns = self.seg["start_ns"][self.arb_seg]
            c.segs.append(self.arb_seg)
            self.seg["connection"][self.arb_seg] = c.id
            self.arb_seg = None
        self.add_segment(run, phase, CATEGORY_OF_PHASE[phase])
        self.patch_connection()
        if c.kind == "resel":
            self.match_reselection(c)

    def ids_of(self, bits: int | None, reselect: bool, t_ns: int):
        """(initiator, target) from the ID bits of a (re)selection, or the header's initiator."""
        if bits is None:
            return (self.initiator_id if not self.has_db else None), None
        ids = [i for i in range(8) if bits >> i & 1]
        winner = None
        if self.arb_db:
            winner = max(i for i in range(8) if self.arb_db >> i & 1)
        if len(ids) == 1:  # SCSI-1: the target's bit alone
            return self.initiator_id, ids[0]
        if winner in ids and len(ids) == 2:
            other = ids[0] if ids[1] == winner else ids[1]
            return (other, winner) if reselect else (winner, other)
        if self.initiator_id in ids and len(ids) == 2:
            other = ids[0] if ids[1] == self.initiator_id else ids[1]
            return self.initiator_id, other
        self.anomaly(t_ns, "BAD SELECTION IDS",
                     f"ID bits 0x{bits:02x} on the data bus")
        return None, None

    def match_reselection(self, c: _Conn):
        """Level 1-2: no IDs on the bus, so a reselection resumes the one outstanding I/O when
        there is exactly one; with none it resumes an I/O begun before the trace."""
        if self.has_db:
            return  # wait for IDENTIFY (and a queue tag) in MESSAGE IN
        if len(self.outstanding) == 1:
            self.bind(c, next(iter(self.outstanding.values())))
        elif not self.outstanding:
            self.bind(c, self.new_io(c.start_ns, partial=True))
        else:
            self.ambiguous_reselections += 1

    def resume_nexus(self, c: _Conn):
        """Level 3: find the I/O a reselection resumes from its target, LUN and tag."""
        io = self.outstanding.get((c.target, c.lun, c.tag))
        if io is None and c.tag is None:
            same = [x for x in self.outstanding.values() if x.target == c.target and x.lun == c.lun]
            io = same[0] if len(same) == 1 else None
        if io is None:  # an I/O whose command went out before the trace began
            unknown = [x for x in self.outstanding.values() if x.partial and x.target is None]
            if len(unknown) == 1:
                io = unknown[0]
                del self.outstanding[self.nexus_of(io)]
                io.target, io.lun, io.tag = c.target, c.lun, c.tag
            else:
                io = self.new_io(c.start_ns, partial=True)
                io.target, io.lun, io.tag = c.target, c.lun, c.tag
        self.bind(c, io)

    def bind(self, c: _Conn, io: _Io):
        c.io = io
        io.connections += 1
        self.patch_connection()

    def on_info(self, run, phase, next_key):
        c = self.conn
        if c is None:  # the trace began inside a connection
            c = self.conn = _Conn(id=self.n_conn, kind="partial", start_ns=run["start_ns"],
                                  initiator=self.initiator_id if not self.has_db else None)
            self.n_conn += 1
        data = bytes(self.db(b) for b in (run["info_bytes"] or [])) if self.has_db else b""
        nbytes = self.handshakes(run)
        msg = data[0] if data and phase.startswith("MESSAGE") else None
        category = CATEGORY_OF_PHASE[phase]
        if self.recovering:
            self.add_segment(run, phase, category, msg=msg, nbytes=nbytes)
            return
        if phase == "MESSAGE OUT":
            self.read_messages(c, data, True, run["start_ns"])
        elif phase == "COMMAND":
            self.on_command(c, run, data)
        elif phase == "MESSAGE IN":
            self.read_messages(c, data, False, run["start_ns"])
            ends = next_key is not None and not next_key & (BIT["BSY"] | BIT["SEL"]) and not c.saw_status
            if self.prev == "RESELECTION" or ends or next_key is None and not c.saw_status:
                category = "Disconnect/Reconnect"
            if c.saw_status and (not self.has_db or any(m in COMPLETION_MESSAGES for m in data)):
                c.completed = True
        elif phase == "STATUS":
            c.saw_status = True
            if c.io is None and c.kind == "partial":
                self.bind(c, self.new_io(run["start_ns"], partial=True))
            if c.io is not None and data:
                c.io.status = scsi.status_name(data[0])
        elif phase in ("DATA IN", "DATA OUT"):
            if c.io is None and c.kind == "partial":
                self.bind(c, self.new_io(run["start_ns"], partial=True))
            if c.io is not None:
                c.io.data_bytes += nbytes or 0
                c.io.data_in |= phase == "DATA IN"
                c.io.data_out |= phase == "DATA OUT"
        self.add_segment(run, phase, category, msg=msg, nbytes=nbytes)

    def handshakes(self, run) -> int | None:
        if not self.has_bytes:
            return None
        return int(run["n_ack"] if self.meta_has("ACK") else run["n_req"])

    def meta_has(self, signal: str) -> bool:
        return signal in self.meta.get("signals", ())

    def on_command(self, c: _Conn, run, cdb: bytes):
        if c.io is not None and c.abort is not None and c.io.cdb and cdb:
            # a new command after an abort request: the aborted I/O ends there, the new one begins
            self.end_aborted(c.io, c.abort[0])
            c.io, c.abort, c.saw_status, c.completed, c.start_ns, c.kind = None, None, False, False, run["start_ns"], "sel"
        if c.io is not None:
            c.io.cdb = c.io.cdb or cdb
            return
        io = self.new_io(c.start_ns)
        io.target, io.lun, io.tag, io.cdb = c.target, c.lun, c.tag, cdb
        if io.lun is None and cdb:
            io.lun = scsi.decode_cdb(cdb)["lun"]
        if c.kind == "partial":
            io.partial, io.start_ns = True, None
        self.bind(c, io)

    def read_messages(self, c: _Conn, data: bytes, outbound: bool, t_ns: int):
        i = 0
        while i < len(data):
            m = data[i]
            if m & 0x80:
                c.lun = m & 0x07
            elif m in scsi.QUEUE_TAG_MESSAGES and i + 1 < len(data):
                c.tag = data[i + 1]
                i += 1
            elif m == 0x01 and i + 1 < len(data):  # extended message: length byte, then payload
                i += 1 + data[i + 1]
            elif m in scsi.TWO_BYTE_MESSAGES:
                i += 1
            elif m == 0x07:
                self.anomaly(t_ns, "MESSAGE REJECT",
                             "MESSAGE REJECT " + ("sent by the initiator" if outbound else "from the target"))
            i += 1
        if c.io is None and c.kind == "resel" and data and not outbound:
            self.resume_nexus(c)

    # -- results ------------------------------------------------------------------------
    def segments(self) -> pl.DataFrame:
        df = pl.DataFrame(self.seg, schema=schema.SEGMENTS)
        return df.filter(pl.col("end_ns") > pl.col("start_ns"))

    def ios_frame(self) -> pl.DataFrame:
        rows = {c: [] for c in schema.IOS}
        for io in self.ios:
            d = scsi.decode_cdb(io.cdb) if io.cdb else {"opcode": None, "name": "", "lba": None, "blocks": None}
            op = scsi.op_kind(d["opcode"]) or ("read" if io.data_in else "write" if io.data_out else None)
            vals = {
                "io": io.io, "device": "" if io.target is None else f"{io.target}:{io.lun or 0}",
                "target": io.target, "lun": io.lun, "tag": io.tag, "op": op, "opcode": d["opcode"],
                "command": d["name"], "lba": d["lba"], "blocks": d["blocks"],
                "bytes": io.data_bytes if self.has_bytes else None,
                "data_bytes": io.data_bytes if self.has_bytes else None,
                "start_ns": io.start_ns, "end_ns": io.end_ns, "status": io.status,
                "connections": io.connections, "disconnects": io.disconnects,
                "complete": io.complete, "partial": io.partial,
            }
            for k, v in vals.items():
                rows[k].append(v)
        df = pl.DataFrame(rows, schema=schema.IOS)
        return df.with_columns((pl.col("end_ns") - pl.col("start_ns")).alias("response_ns"))

    def anomalies(self) -> pl.DataFrame:
        return pl.DataFrame(self.anoms, schema=schema.ANOMALIES)


def walk(runs: pl.DataFrame, meta: dict, invert: bool, has_bytes: bool, has_db: bool) -> ReferenceWalker:
    """The runs frame walked one row at a time, as the analysis did."""
    walker = ReferenceWalker(meta, invert, has_bytes=has_bytes, has_db=has_db)
    keys = runs["key"].to_list()
    for i, run in enumerate(runs.iter_rows(named=True)):
        walker.step(run, keys[i + 1] if i + 1 < len(keys) else None)
    walker.finish()
    return walker
