"""Discrete-event model of one SCSI string: host, Jaguar host adapter (ID 7), 1-7 Wren IV disks.

The bus is one resource. Whenever it goes free, every device with work ready arbitrates after
the bus free delay and the highest ID wins (Sec 2.3.1); the winner's connection is then played
out step by step (Sec 2.3.2, Figure 2, Table 11) into the `Recorder`, which keeps the line
changes, the REQ/ACK handshake runs and the ground-truth segments.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from .disk import Disk
from .encode import BIT, Recorder
from . import timelines
from .params import US, Params

BSY, SEL, ATN, RST, MSG, CD, IO = (BIT[n] for n in ("BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O"))
PHASE_LINES = {"DATA OUT": BSY, "DATA IN": BSY | IO, "COMMAND": BSY | CD, "STATUS": BSY | CD | IO,
               "MESSAGE OUT": BSY | MSG | CD, "MESSAGE IN": BSY | MSG | CD | IO}
IDENTIFY_OUT, IDENTIFY_IN = 0xC0, 0x80          # disconnect privilege; LUN 0
SAVE_DATA_POINTER, RESTORE_POINTERS, DISCONNECT, COMMAND_COMPLETE = 0x02, 0x03, 0x04, 0x00
SIMPLE_QUEUE_TAG = 0x20
READ6, WRITE6 = 0x08, 0x0A


PROGRESS_EVERY = 2048    # bus grants between two progress callbacks

@dataclass
class Workload:
    disks: int = 4                 # Table 3: four disks on one string
    op: str = "read"               # Table 3: reads
    pattern: str = "seq"           # Table 3: sequential
    size: int = 32 * 1024          # Table 3: 32 KByte requests
    inflight: int = 1              # Sec 2.3.2: one outstanding operation per disk (>1: tagged what-if)
    processes: int = 1             # host processes per disk; with inflight 1 the Jaguar holds the
                                   # others' commands in the disk's work queue (Sec 2.2, 2.3.2)
    duration_ns: int | None = None
    count: int | None = None
    seed: int = 0
    reset_at_ns: int | None = None   # fixture: assert RST in the first data transfer after this
    glitch_at_ns: int | None = None  # fixture: a 100 ns BSY glitch in the first status pause after this


@dataclass
class Io:
    target: int
    op: str
    lba: int
    nsec: int
    submit_ns: int
    tag: int | None = None
    io: int | None = None          # numbered when its command goes on the bus
    start_ns: int | None = None
    command_ns: int | None = None  # its COMMAND phase begins (an analyzer numbers it there)
    end_ns: int | None = None
    next: int = 0                  # next sector to transfer
    connections: int = 0
    disconnects: int = 0
    status: str | None = None
    complete: bool = False
    slot: int = 0                  # host process that issued it


@dataclass
class Conn:
    id: int
    io: Io
    blind_io: int | None           # what an analyzer without the data bus can know
    resel_need: int | None = None  # reselection: IDENTIFY (+ queue tag) bytes that name the I/O
    resel_unique: bool = False     # reselection: the target has one outstanding I/O only


@dataclass
class Request:
    ready_ns: int
    dev: int
    io: Io
    seq: int = 0


class Sim:
    on_progress = None        # callable(bus time ns, I/Os issued), every PROGRESS_EVERY bus grants

    def __init__(self, wl: Workload, params: Params, rec: Recorder):
        self.wl, self.p, self.rec = wl, params, rec
        self.rng = np.random.default_rng(wl.seed)
        b = params.bus
        self.tick, self.settle = b.tick_ns, b.settle_ns
        self.hba = params.hba.scsi_id
        self.disks = [Disk(i, params.disk, self.rng) for i in range(wl.disks)]
        self.nsec = max(1, wl.size // params.disk.sector_bytes)
        self.requests: list[Request] = []
        self.ios: list[Io] = []
        self.issued = 0
        self.n_io = 0
        self.n_conn = 0
        # what an analyzer without IDs can know: I/Os seen disconnecting and not seen completing
        # (a reselection it cannot tie to an I/O leaves its completion anonymous)
        self.blind_outstanding: set[int] = set()
        self.outstanding_on = [set() for _ in range(wl.disks)]   # disconnected, not complete
        self.busy_until = [0] * wl.disks          # mechanism busy with an earlier queued I/O
        self.waiting = [deque() for _ in range(wl.disks)]
        self.work_queue = [deque() for _ in range(wl.disks)]   # Jaguar work queues (Sec 2.2)
        self.at_disk = [False] * wl.disks                      # a command of ours is at the disk
        self.next_lba = [int(self.rng.integers(0, params.disk.capacity_sectors // 2)) for _ in range(wl.disks)]
        self.bus_free_at = 0
        self.host_free_at = 0
        self.end_ns = None
        self.reset_pending = wl.reset_at_ns
        self.glitch_pending = wl.glitch_at_ns
        self.seq = 0

    # -- time helpers ----------------------------------------------------------------------
    def q(self, t: float) -> int:
        """Round a time up to the tick grid."""
        return int(math.ceil(t / self.tick)) * self.tick

    def sample(self, lo_hi) -> int:
        lo, hi = lo_hi
        return self.q(self.rng.uniform(lo, hi)) if hi > lo else self.q(lo)

    # -- host ------------------------------------------------------------------------------
    def submit(self, target: int, t: int, slot: int) -> None:
        if self.wl.count is not None and self.issued >= self.wl.count:
            return
        if self.wl.duration_ns is not None and t > self.wl.duration_ns:
            return
        p = self.p.disk
        if self.wl.pattern == "seq":
            lba = self.next_lba[target]
            if lba + self.nsec > p.capacity_sectors:
                lba = 0
            self.next_lba[target] = lba + self.nsec
        else:
            lba = int(self.rng.integers(0, (p.capacity_sectors - self.nsec) // self.nsec)) * self.nsec
        tag = slot if self.wl.inflight > 1 else None
        io = Io(target=target, op=self.wl.op, lba=lba, nsec=self.nsec, submit_ns=self.q(t), tag=tag, slot=slot)
        self.issued += 1
        self.ios.append(io)
        if self.wl.inflight == 1 and self.at_disk[target]:
            self.work_queue[target].append(io)       # Sec 2.3.2: at most one outstanding per disk
            return
        self.at_disk[target] = True
        self.request(self.hba, io, io.submit_ns)

    def host_work(self) -> int:
        """Host time from a completion to the next command of that process (Sec 4.7): the
        experiment's own timeline row when the report timed it (Tables 12-31), else derived
        from the ranges of those tables and the copy and flush rates."""
        h, wl = self.p.host, self.wl
        size = self.nsec * self.p.disk.sector_bytes
        if h.mode == "user-level":
            row = timelines.user_level_split(wl.op, wl.pattern, size) if h.timelines else None
            if row is not None:
                return self.q(sum(row) * US)
            t = self.sample(h.interrupt_to_avail_ns) + self.sample(h.avail_to_submit_ns)
            t += self.sample(h.user_fixed_ns) + self.q(1e9 * size / h.copy_rate(size))
            if wl.op == "read":
                return t + self.q(1e9 * size / h.read_flush_rate)
            return t + self.q(1e9 * size / self.rng.uniform(*h.write_flush_rate))
        row = timelines.no_copy_row(wl.op, wl.pattern, size) if h.timelines else None
        if row is not None:
            return self.q(sum(row) * US)
        return self.sample(h.interrupt_to_avail_ns) + self.sample(h.avail_to_submit_ns)

    def host_submit(self, target: int, t: int, slot: int) -> None:
        """The process of `slot` on `target` gets the host at t (or when the one CPU is free)
        and submits its next command when its host work is done."""
        start = max(t, self.host_free_at) if self.p.host.one_cpu else t
        end = start + self.host_work()
        self.host_free_at = end
        self.submit(target, end, slot)

    def request(self, dev: int, io: Io, ready: int) -> None:
        self.seq += 1
        self.requests.append(Request(int(ready), dev, io, self.seq))

    # -- main loop -------------------------------------------------------------------------
    def run(self) -> int:
        """Play the workload; returns the trace's end time."""
        rec = self.rec
        rec.set(0, 0, db=0, phase="BUS FREE")
        for slot in range(max(self.wl.inflight, self.wl.processes)):
            for d in range(self.wl.disks):
                self.host_submit(d, 0, slot)
        steps = 0
        while self.requests:
            first = min(r.ready_ns for r in self.requests)
            a = self.q(max(self.bus_free_at + self.p.bus.bus_free_delay_ns, first))
            steps += 1
            if self.on_progress is not None and steps % PROGRESS_EVERY == 0:
                self.on_progress(a, self.issued)
            if self.wl.duration_ns is not None and a >= self.wl.duration_ns:
                break
            contenders = [r for r in self.requests if r.ready_ns <= a]
            winner = max(r.dev for r in contenders)
            req = min((r for r in contenders if r.dev == winner), key=lambda r: (r.ready_ns, r.seq))
            self.requests.remove(req)
            bits = 0
            for r in contenders:
                bits |= 1 << r.dev
            if winner == self.hba:
                self.bus_free_at = self.select(req.io, a, bits)
            else:
                self.bus_free_at = self.reselect(req.io, a, bits)
        if self.wl.duration_ns is not None:
            return self.wl.duration_ns
        return self.bus_free_at + 10 * self.p.bus.bus_free_delay_ns

    # -- connection steps ------------------------------------------------------------------
    def seg(self, conn: Conn, phase: str, msg=None) -> dict:
        return dict(phase=phase, connection=conn.id, io=conn.io.io, io_blind=conn.blind_io,
                    target=conn.io.target, initiator=self.hba, msg=msg, resel_need=conn.resel_need,
                    resel_unique=conn.resel_unique)

    def phase(self, t: int, conn: Conn, phase: str, msg=None) -> int:
        """The target switches the phase lines at t; returns when it may first raise REQ."""
        self.rec.set(t, PHASE_LINES[phase], **self.seg(conn, phase, msg))
        return t + self.settle

    def send(self, t: int, data: bytes, acks) -> int:
        """Message/command/status bytes, one handshake run per byte with its ACK delay."""
        for b, ack in zip(data, acks):
            t = self.rec.handshakes(t, 1, ack_delay=ack, data=bytes([b]))
        return self.rec.last_t + self.settle

    def arbitrate_and_select(self, a: int, conn: Conn, bits: int, reselect: bool) -> int:
        b, rec = self.p.bus, self.rec
        ids = (1 << self.hba) | (1 << conn.io.target)
        rec.set(a, BSY, db=bits, **self.seg(conn, "ARBITRATION"))
        t = a + (b.rearbitration_ns if reselect else b.arbitration_ns)
        total = b.reselection_ns if reselect else b.selection_ns
        io_line = IO if reselect else 0
        phase = "RESELECTION" if reselect else "SELECTION"
        # winner asserts SEL (and I/O); it releases BSY (the initiator keeps ATN); the other
        # side answers with BSY; then SEL goes and the target drives the first phase
        rec.set(t, BSY | SEL | io_line, db=ids, **self.seg(conn, phase))
        rec.set(t + total * 2 // 5, SEL | io_line | (0 if reselect else ATN))
        rec.set(t + total * 4 // 5, BSY | SEL | io_line | (0 if reselect else ATN))
        return t + total

    def select(self, io: Io, a: int, bits: int) -> int:
        d, h = self.p.disk, self.p.hba
        io.io, self.n_io = self.n_io, self.n_io + 1
        io.start_ns = a
        io.connections += 1
        conn = Conn(self.n_conn, io, io.io)
        self.n_conn += 1
        t = self.arbitrate_and_select(a, conn, bits, reselect=False)
        msgs = bytes([IDENTIFY_OUT] + ([SIMPLE_QUEUE_TAG, io.tag] if io.tag is not None else []))
        self.rec.set(t, PHASE_LINES["MESSAGE OUT"] | ATN, **self.seg(conn, "MESSAGE OUT", msgs[0]))
        t = self.rec.handshakes(t + d.id_message_pause_ns, len(msgs), data=msgs)
        self.rec.set(self.rec.last_t, PHASE_LINES["MESSAGE OUT"])          # ATN released
        t = self.phase(self.rec.last_t + self.settle, conn, "COMMAND")
        io.command_ns = t - self.settle
        cdb = self.cdb(io)
        rest = h.command_rest_ack_ns // (len(cdb) - 1)
        self.send(t, cdb, [h.command_first_ack_ns] + [rest] * (len(cdb) - 1))
        t = self.q(self.rec.last_t + d.command_decode_ns)   # decoding, still in COMMAND
        disk = self.disks[io.target]
        if t < self.busy_until[io.target] or self.waiting[io.target]:
            self.waiting[io.target].append(io)               # an earlier queued command goes first
            return self.disconnect(t, conn, [DISCONNECT], [h.message_ack_ns])
        return self.start_mechanism(io, conn, disk, t)

    def start_mechanism(self, io: Io, conn: Conn | None, disk: Disk, t: int) -> int | None:
        """The disk starts on `io` at t; with `conn`, the target holds the bus and decides."""
        h = self.p.hba
        self.busy_until[io.target] = 1 << 62
        if io.op == "write":
            disk.begin_write(io.lba, t)
            if conn is None:
                self.request(io.target, io, t)               # reconnect to take the data
                return None
            return self.data_out(t, conn, io, disk)
        disk.begin_read(io.lba, io.nsec, t)
        ready = self.read_ready(io, disk)
        if conn is None:
            self.request(io.target, io, ready)
            return None
        if ready is not None and ready <= t + self.settle:
            # no disconnect: the disk sets up the transfer before it changes the phase lines,
            # so its pause before the first data byte stays in COMMAND (docs/simulator.md, A5)
            if not self.p.disk.setup_in_command:
                return self.data_in(t, conn, io, disk)
            t = self.q(t + self.sample(self.p.disk.first_data_pause_ns))
            return self.data_in(t, conn, io, disk, pause=False)
        self.request(io.target, io, ready)
        return self.disconnect(t, conn, [DISCONNECT], [h.message_ack_ns])

    def read_ready(self, io: Io, disk: Disk) -> int:
        """BFR rule (Sec 2.1.3): reconnect when min(rest of the request, BFR) is buffered."""
        need = min(io.nsec - io.next, self.p.disk.ratio_sectors(self.p.disk.bfr))
        return self.q(disk.ready_time(io.lba + io.next + need - 1))

    def cdb(self, io: Io) -> bytes:
        op = READ6 if io.op == "read" else WRITE6
        blocks = io.nsec if io.nsec < 256 else 0
        return bytes([op, (io.lba >> 16) & 0x1F, (io.lba >> 8) & 0xFF, io.lba & 0xFF, blocks, 0])

    def disconnect(self, t: int, conn: Conn, msgs: list[int], acks: list[int]) -> int:
        t = self.phase(t, conn, "MESSAGE IN", msgs[0])
        t = self.send(t, bytes(msgs), acks)
        conn.io.disconnects += 1
        self.outstanding_on[conn.io.target].add(conn.io.io)
        if conn.blind_io is not None:
            self.blind_outstanding.add(conn.blind_io)
        self.rec.set(t, 0, db=0, phase="BUS FREE")
        return t

    def reselect(self, io: Io, a: int, bits: int) -> int:
        h = self.p.hba
        blind = next(iter(self.blind_outstanding)) if len(self.blind_outstanding) == 1 else None
        conn = Conn(self.n_conn, io, blind, resel_need=3 if io.tag is not None else 1,
                    resel_unique=len(self.outstanding_on[io.target]) == 1)
        self.n_conn += 1
        io.connections += 1
        disk = self.disks[io.target]
        t = self.arbitrate_and_select(a, conn, bits, reselect=True)
        msgs = [IDENTIFY_IN] + ([SIMPLE_QUEUE_TAG, io.tag] if io.tag is not None else []) + [RESTORE_POINTERS]
        t = self.phase(t, conn, "MESSAGE IN", msgs[0])
        t = self.send(t, bytes(msgs), [h.message_ack_ns] * len(msgs))
        if io.op == "read":
            return self.data_in(t, conn, io, disk)
        if io.next < io.nsec:
            return self.data_out(t, conn, io, disk)
        return self.complete(t + self.p.disk.reconnect_status_pause_ns, conn, io)

    # -- data ------------------------------------------------------------------------------
    def data_in(self, t: int, conn: Conn, io: Io, disk: Disk, pause: bool = True) -> int:
        d, h = self.p.disk, self.p.hba
        t = self.phase(t, conn, "DATA IN") + (self.sample(d.first_data_pause_ns) if pause else 0)
        sent = 0
        while io.next < io.nsec:
            ready = disk.ready_time(io.lba + io.next)
            if ready is None or self.q(ready) > t:
                break                                        # buffer empty
            if self.reset_pending is not None and t >= self.reset_pending:
                return self.reset(t)
            t = self.sector(t, io, sent, pattern=io.lba * d.sector_bytes)
            disk.mark_sent(io.lba + io.next, t)
            io.next += 1
            sent += d.sector_bytes
        t = self.rec.last_t
        if io.next == io.nsec:
            t = self.q(t + self.sample(d.status_pause_ns))
            self.maybe_glitch(t)
            return self.complete(t, conn, io)
        t = self.q(t + self.sample(d.save_pointer_pause_ns))
        self.request(io.target, io, self.read_ready(io, disk))
        return self.disconnect(t, conn, [SAVE_DATA_POINTER, DISCONNECT], [h.save_pointer_ack_ns, h.disconnect_ack_ns])

    def sector(self, t: int, io: Io, sent_in_conn: int, pattern: int, target_pause: int = 0) -> int:
        """One sector of data: split where the initiator pauses (FIFO fill, 8 KB allocation)."""
        d, h = self.p.disk, self.p.hba
        n = d.sector_bytes
        offset = io.next * n
        pauses = {}
        if io.op == "read" and sent_in_conn < h.fifo_bytes < sent_in_conn + n:
            pauses[h.fifo_bytes - sent_in_conn] = h.fifo_ack_ns       # Sec 4.6: FIFO full
        if h.alloc_pauses and sent_in_conn > 0 and offset % h.alloc_block == 0:
            pauses[0] = pauses.get(0, 0) + self.sample(h.alloc_range(io.nsec * n))
        cuts = sorted(pauses) + [n]
        t += target_pause
        if cuts[0] != 0:
            t = self.rec.handshakes(t, cuts[0], pattern=pattern + offset)
        for a, b in zip(cuts, cuts[1:]):
            t = self.rec.handshakes(t, b - a, ack_delay=pauses[a], pattern=pattern + offset + a)
        return t

    def data_out(self, t: int, conn: Conn, io: Io, disk: Disk) -> int:
        d, h = self.p.disk, self.p.hba
        t = self.phase(t, conn, "DATA OUT")
        sent = 0
        while io.next < io.nsec:
            if self.q(disk.space_for(io.next)) > t:
                break                                        # buffer full
            if self.reset_pending is not None and t >= self.reset_pending:
                return self.reset(t)
            offset = io.next * d.sector_bytes
            pause = 0
            if offset >= d.write_pause_after and offset % d.write_pause_every == 0:
                pause = self.sample(d.write_pause_ns)          # DESIGN: write pauses (target)
            t = self.sector(t, io, sent, pattern=io.lba * d.sector_bytes, target_pause=pause)
            disk.mark_received(t)
            io.next += 1
            sent += d.sector_bytes
        t = self.q(self.rec.last_t + self.sample(d.save_pointer_pause_ns))
        if io.next == io.nsec:
            ready = self.q(disk.written_time(io.nsec - 1))
        else:
            need = min(io.nsec - io.next, d.ratio_sectors(d.ber))   # BER rule (Sec 2.1.3)
            ready = self.q(disk.space_for(io.next + need - 1))
        self.request(io.target, io, max(ready, t))
        return self.disconnect(t, conn, [SAVE_DATA_POINTER, DISCONNECT], [h.save_pointer_ack_ns, h.disconnect_ack_ns])

    # -- completion ------------------------------------------------------------------------
    def complete(self, t: int, conn: Conn, io: Io) -> int:
        h = self.p.hba
        t = self.phase(t, conn, "STATUS")
        t = self.send(t, bytes([0x00]), [h.status_ack_ns])            # GOOD
        t = self.phase(t, conn, "MESSAGE IN", COMMAND_COMPLETE)
        t = self.send(t, bytes([COMMAND_COMPLETE]), [h.complete_ack_ns])
        self.rec.set(t, 0, db=0, phase="BUS FREE")
        io.complete, io.status, io.end_ns = True, "GOOD", t
        self.blind_outstanding.discard(conn.blind_io)
        self.outstanding_on[io.target].discard(io.io)
        self.busy_until[io.target] = t
        if self.waiting[io.target]:
            nxt = self.waiting[io.target].popleft()
            self.start_mechanism(nxt, None, self.disks[io.target], t)
        self.at_disk[io.target] = False
        if self.work_queue[io.target]:               # the Jaguar sends the next queued command
            nxt = self.work_queue[io.target].popleft()
            self.at_disk[io.target] = True
            self.request(self.hba, nxt, t)
        self.host_submit(io.target, t, io.slot)
        return t

    def maybe_glitch(self, t_pause_end: int) -> None:
        """Fixture: BSY drops for 100 ns inside the status pause (the bus is otherwise quiet)."""
        if self.glitch_pending is None or self.rec.last_t < self.glitch_pending:
            return
        self.glitch_pending = None
        mid = self.q((self.rec.last_t + t_pause_end) // 2)
        self.rec.set(mid, self.rec.lines & ~BSY)
        self.rec.set(mid + 2 * self.tick, self.rec.lines | BSY)

    def reset(self, t: int) -> int:
        """Fixture: RST in mid-transfer aborts every outstanding I/O; the host reissues them."""
        b = self.p.bus
        self.reset_pending = None
        self.rec.set(t, RST, db=0, phase="RESET")
        t += b.reset_hold_ns
        self.rec.set(t, 0, db=0, phase="BUS FREE")
        aborted = [io for io in self.ios if not io.complete and io.status is None]
        for io in aborted:
            io.status, io.end_ns = "ABORTED (reset)", t - b.reset_hold_ns
        self.requests.clear()
        self.blind_outstanding.clear()
        self.outstanding_on = [set() for _ in self.disks]
        self.waiting = [deque() for _ in self.disks]
        self.work_queue = [deque() for _ in self.disks]
        self.at_disk = [False] * len(self.disks)
        self.busy_until = [0] * len(self.disks)
        for disk in self.disks:
            disk.stream, disk.expect_next = None, None
        self.issued -= len(aborted)
        for io in aborted:
            self.next_lba[io.target] = min(self.next_lba[io.target], io.lba)
        for io in sorted(aborted, key=lambda x: x.submit_ns):
            self.submit(io.target, t + b.reset_to_selection_ns, io.slot)
        return t
