"""A hand-built SCSI bus (transitions + the segments/ios a bus analysis would give) whose
every handshake wait is chosen by the test, so attribution results can be checked against
the values put in rather than against our own output.

`table11_analysis()` builds the I/O sequence of RAID-I Table 11 (32 KB sequential reads,
BFR 16 KB: command, disconnect, two reconnections of 16 KB each, status) with the paper's
waits drawn from its ranges. Other report tests reuse it (`from test_attribution_synth import ...`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from scsitrace import schema
from scsitrace.model import Analysis, Capture

B = {name: 1 << bit for name, bit in schema.SIGNAL_BIT.items()}
PHASE_LINES = {
    "DATA OUT": 0, "DATA IN": B["I/O"], "COMMAND": B["C/D"], "STATUS": B["C/D"] | B["I/O"],
    "MESSAGE OUT": B["MSG"] | B["C/D"], "MESSAGE IN": B["MSG"] | B["C/D"] | B["I/O"],
}
CATEGORY = {"ARBITRATION": "Arbitration", "SELECTION": "Selection", "COMMAND": "Command",
            "MESSAGE OUT": "Message Out", "MESSAGE IN": "Message In", "DATA IN": "Data Transfer",
            "DATA OUT": "Data Transfer", "RESELECTION": "Reselection", "STATUS": "Status",
            "BUS FREE": "Bus Free"}
RAID1990 = ["Arbitration", "Selection", "Command", "Message Out", "Message In", "Data Transfer",
            "Disconnect/Reconnect", "Reselection", "Status", "Bus Free"]
SIGNALS = ["BSY", "SEL", "ATN", "RST", "MSG", "C/D", "I/O", "REQ", "ACK"]

# regular DATA handshake: REQ up after 125 ns, ACK after 100, REQ down 15, ACK down 10 = 250 ns/byte
REG = (125, 100, 15, 10)


@dataclass
class SynthBus:
    """Appends bus states in time order and the matching segments."""

    t: int = 0
    times: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    segs: list = field(default_factory=list)
    ios: list = field(default_factory=list)
    conn: int = -1
    seg_start: int = 0
    seg_phase: str = "BUS FREE"
    seg_cat: str = "Bus Free"
    seg_bytes: int | None = None
    target: int | None = None
    io: int | None = None

    def _set(self, t, lines):
        self.times.append(np.atleast_1d(np.asarray(t, dtype=np.int64)))
        self.lines.append(np.atleast_1d(np.asarray(lines, dtype=np.uint16)))

    def _close(self, t):
        in_conn = self.seg_phase != "BUS FREE"
        self.segs.append({"start_ns": self.seg_start, "end_ns": int(t), "phase": self.seg_phase,
                          "category": self.seg_cat, "target": self.target if in_conn else None,
                          "initiator": 7 if in_conn else None, "connection": self.conn if in_conn else None,
                          "io": self.io if in_conn else None, "bytes": self.seg_bytes})

    def _open(self, t, phase, category=None):
        self._close(t)
        self.seg_start, self.seg_phase = int(t), phase
        self.seg_cat = category or CATEGORY[phase]
        self.seg_bytes = None

    def start(self):
        self._set(0, 0)

    def connect(self, target, io, *, reselect, arb_ns, sel_ns, idle_ns):
        self.t += idle_ns
        self.conn += 1
        self.target, self.io = target, io
        self._open(self.t, "ARBITRATION")
        self._set(self.t, B["BSY"])
        self.t += arb_ns
        sel = "RESELECTION" if reselect else "SELECTION"
        self._open(self.t, sel)
        self._set(self.t, B["BSY"] | B["SEL"] | (B["I/O"] if reselect else 0))
        self.t += sel_ns

    def phase(self, phase, waits, *, category=None, change_ns=0):
        """waits: array (nbytes, 4) of (target REQ up, initiator ACK up, target REQ down,
        initiator ACK down) waits. The phase lines change `change_ns` after the previous
        ACK release; the first REQ then comes waits[0, 0] - change_ns later."""
        waits = np.asarray(waits, dtype=np.int64).reshape(-1, 4)
        self.t += change_ns
        self._open(self.t, phase, category)
        self.seg_bytes = len(waits)
        base = B["BSY"] | PHASE_LINES[phase]
        self._set(self.t, base)
        first = waits.copy()
        first[0, 0] -= change_ns
        assert first[0, 0] >= 0
        times = self.t + np.cumsum(first.ravel())
        lines = np.tile(np.array([base | B["REQ"], base | B["REQ"] | B["ACK"], base | B["ACK"], base],
                                 dtype=np.uint16), len(waits))
        self._set(times, lines)
        self.t = int(times[-1])

    def release(self, after_ns):
        self.t += after_ns
        self._open(self.t, "BUS FREE")
        self._set(self.t, 0)
        self.target = self.io = None

    def analysis(self, *, end_idle_ns=1000, chunk_rows=None, signals=SIGNALS, ios_done=None) -> Analysis:
        self.t += end_idle_ns
        self._set(self.t, 0)
        self._close(self.t)
        t = np.concatenate(self.times)
        lines = np.concatenate(self.lines)
        keep_bits = sum(B[s] for s in signals)
        transitions = pl.DataFrame({"t_ns": t, "lines": lines & keep_bits,
                                    "db": pl.Series([None] * len(t), dtype=pl.UInt8),
                                    "dbp": pl.Series([None] * len(t), dtype=pl.Boolean)},
                                   schema=schema.TRANSITIONS)
        step = chunk_rows or len(t)

        def chunks():
            for i in range(0, transitions.height, step):
                yield transitions.slice(i, step)

        cap = Capture(layer="bus", path="synthetic.ancot", format="ancot",
                      meta={"signals": list(signals), "level": 2 if "REQ" in signals else 1, "tick_ns": 1})
        cap.chunks = chunks
        cap.records.read = len(t)
        segments = schema.frame({k: [s.get(k) for s in self.segs] for k in schema.SEGMENTS}, schema.SEGMENTS)
        ios = schema.frame({k: [r.get(k) for r in self.ios] for k in schema.IOS}, schema.IOS)
        data = segments.filter(pl.col("phase").str.starts_with("DATA"))["bytes"].sum()
        done = int(ios["complete"].sum()) if ios_done is None else ios_done
        return Analysis(layer="bus", capture=cap, elapsed_ns=int(self.t), start_ns=0, segments=segments,
                        ios=ios, anomalies=schema.empty(schema.ANOMALIES), ios_completed=done,
                        data_bytes=int(data) if "REQ" in signals else None,
                        category_order={"raid1990": RAID1990, "scsi": list(CATEGORY)}, default_profile="raid1990",
                        source={"path": "synthetic.ancot", "format": "ancot", "level": cap.meta["level"]})


def regular(n):
    return np.tile(np.array(REG, dtype=np.int64), (n, 1))


def one_byte(t_wait, i_wait):
    return np.array([[t_wait, i_wait, REG[2], REG[3]]])


@dataclass
class Table11:
    """The waits put into the trace, per I/O, for checking what attribution recovers."""

    id_pause: int = 27_000
    first_cmd_ack: int = 22_000
    rest_cmd_ack: int = 2_200          # x5 = 11 us, Table 11's "remaining 5 command bytes"
    disconnect_pause: int = 300_000
    disconnect_ack: int = 3_000
    fifo_ack: int = 82_000             # initiator's ack of byte 8 (after the first 8 bytes)
    fifo_byte: int = 8
    save_ack: int = 100_000
    final_disconnect_ack: int = 30_000
    status_ack: int = 40_000
    complete_ack: int = 24_000
    period: int = 8192
    ranges: dict = field(default_factory=lambda: {
        "first_data": (185_000, 285_000), "buffer": (300_000, 1_700_000),
        "save_pause": (200_000, 400_000), "status_pause": (500_000, 1_000_000)})
    drawn: dict = field(default_factory=lambda: {k: [] for k in
                                                 ("first_data", "buffer", "save_pause", "status_pause")})


def table11_analysis(n_ios=3, *, seed=1, chunk_rows=None, io_bytes=32768, buffer_scale=1.0,
                     signals=SIGNALS, target=0) -> tuple[Analysis, Table11]:
    """`n_ios` sequential 32 KB reads on one disk, built as Table 11 describes them."""
    rng = np.random.default_rng(seed)
    p = Table11()
    bus = SynthBus()
    bus.start()
    half = io_bytes // 2

    def draw(key):
        lo, hi = p.ranges[key]
        v = int(rng.integers(lo, hi + 1))
        if key == "buffer":
            v = int(v * buffer_scale)
        p.drawn[key].append(v)
        return v

    def data_phase(offset):
        w = regular(half)
        w[0, 0] = draw("first_data")
        w[p.fifo_byte, 1] = p.fifo_ack
        for b in range(half):
            if (offset + b) % p.period == 0 and b > 0:
                w[b, 1] = draw("buffer")
        bus.phase("DATA IN", w, change_ns=500)

    for io in range(n_ios):
        start = bus.t + 200_000
        bus.connect(target, io, reselect=False, arb_ns=4_000, sel_ns=3_000, idle_ns=200_000)
        bus.phase("MESSAGE OUT", one_byte(p.id_pause, 1_000))
        cmd = regular(6)
        cmd[0, 0], cmd[0, 1] = 2_000, p.first_cmd_ack
        cmd[1:, 1] = p.rest_cmd_ack
        bus.phase("COMMAND", cmd, change_ns=1_000)
        bus.phase("MESSAGE IN", one_byte(p.disconnect_pause, p.disconnect_ack), category="Disconnect/Reconnect",
                  change_ns=1_000)
        bus.release(2_000)
        for offset in (0, half):
            bus.connect(target, io, reselect=True, arb_ns=3_000, sel_ns=3_000, idle_ns=5_000_000)
            bus.phase("MESSAGE IN", one_byte(1_000, 2_000), category="Disconnect/Reconnect")
            data_phase(offset)
            if offset == 0:
                msgs = np.array([[draw("save_pause"), p.save_ack, 15, 10], [1_000, p.final_disconnect_ack, 15, 10]])
                bus.phase("MESSAGE IN", msgs, category="Disconnect/Reconnect", change_ns=1_000)
                bus.release(2_000)
        bus.phase("STATUS", one_byte(draw("status_pause"), p.status_ack), change_ns=1_000)
        bus.phase("MESSAGE IN", one_byte(1_000, p.complete_ack), change_ns=1_000)
        bus.release(2_000)
        bus.ios.append({"io": io, "device": f"{target}:0", "target": target, "lun": 0, "op": "READ",
                        "opcode": 0x28, "command": "READ(10)", "lba": io * 64, "blocks": 64, "bytes": io_bytes,
                        "data_bytes": io_bytes, "start_ns": start, "end_ns": bus.t, "status": "GOOD",
                        "connections": 3, "disconnects": 2, "complete": True, "partial": False})
    return bus.analysis(chunk_rows=chunk_rows, signals=signals), p


def test_builder_segments_tile_the_trace():
    analysis, _ = table11_analysis(2)
    seg = analysis.segments
    assert seg["start_ns"][0] == 0
    assert seg["end_ns"][-1] == analysis.elapsed_ns
    assert (seg["start_ns"][1:].to_numpy() == seg["end_ns"][:-1].to_numpy()).all()
    assert seg.filter(pl.col("phase") == "DATA IN")["bytes"].sum() == 2 * 32768


def test_builder_chunks_cover_every_transition():
    whole, _ = table11_analysis(1)
    split, _ = table11_analysis(1, chunk_rows=999)
    assert whole.capture.transitions().equals(split.capture.transitions())
    assert len(list(split.capture.chunks())) > 10
