"""DSView captures shaped like the PC Engine CD-ROM² bus (IFU-30 interface unit and CDR-30
drive, a DSLogic at 10 MHz), as `../shared/realdata/busvcd/` describes and shows it:

- probes `D0`-`D7 REQ CD ACK BSY IO SEL MSG RST` and one unnamed (`???`), in that order;
- the control lines active-low, named without a marker (idle high); the data lines as they
  are (idle all ones; the IDs of initiator 7 and target 0 show as 0x81 in selection);
- no ATN, no arbitration: the initiator puts the IDs on the bus, pulses SEL for 5.7 us and
  releases it; the target raises BSY 632.6 us later and goes to COMMAND (6- or 10-byte
  CDBs), may hold BSY with the phase lines idle and no REQ while it seeks, then DATA IN,
  STATUS, MESSAGE IN (COMMAND COMPLETE), and releases BSY;
- handshakes timed as the capture shows them: in DATA IN, REQ and ACK released in the same
  sample; a REQ pulse shorter than a sample may not show at all (`lost_req`);
- aborts as jbrandwood's scsitest program makes them (the repository's samples/README):
  `abort="data"`: SEL asserted after `abort_after` data bytes, the drive drains `drain` more
  and releases BSY; `abort="command"`: the drive stays in COMMAND after the CDB (playing
  audio) until SEL, drops and raises BSY, takes the abort command 0xFF and closes it with
  STATUS and MESSAGE IN.

`capture(commands)` returns the sample words (bit k = probe k of PROBES) and what a decoder
must find (`Expected`); `write(path, commands)` writes the `.dsl`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import gen_logic

HZ = 10_000_000
PERIOD_NS = 100
PROBES = ["D0", "D1", "D2", "D3", "D4", "D5", "D6", "D7", "REQ", "CD", "ACK", "BSY", "IO", "SEL", "MSG", "RST", "???"]
BIT = {name: k for k, name in enumerate(PROBES)}
CONTROL = ("REQ", "CD", "ACK", "BSY", "IO", "SEL", "MSG", "RST")
IDS = 0x81                      # initiator 7, target 0
SEL_PULSE = 57                  # samples (5.7 us)
BSY_AFTER_SEL = 6326            # samples from SEL released to BSY (632.6 us)


@dataclass
class Command:
    cdb: list[int]
    data: list[int] = field(default_factory=list)      # DATA IN bytes
    seek: int = 0                # samples BSY is held with the phase lines idle, no REQ
    status: int = 0x00
    lost_req: bool = False       # the STATUS byte's REQ pulse falls between two samples
    abort: str | None = None     # "data" or "command": the initiator aborts with SEL
    abort_after: int = 0         # data bytes before SEL ("data")
    drain: int = 3               # data bytes the drive still sends while SEL is asserted ("data")


@dataclass
class Expected:
    commands: list[Command]
    selections_ns: list[int] = field(default_factory=list)       # SEL asserted
    selection_ends_ns: list[int] = field(default_factory=list)   # BSY asserted (the selection's end)
    seeks_ns: list[tuple[int, int]] = field(default_factory=list)


class _Bus:
    """Sample words at change points: lines set by name (True = asserted), the data bus."""

    def __init__(self):
        self.t = 0
        self.asserted: set[str] = set()
        self.db = 0xFF
        self.idx: list[int] = [0]
        self.words: list[int] = [self._word()]

    def _word(self) -> int:
        word = self.db
        for name in CONTROL:
            if name not in self.asserted:      # active-low: high when not asserted
                word |= 1 << BIT[name]
        return word

    def hold(self, samples: int) -> None:
        self.t += samples

    def set(self, on=(), off=(), db: int | None = None) -> None:
        self.asserted |= set(on)
        self.asserted -= set(off)
        if db is not None:
            self.db = db
        word = self._word()
        if self.idx[-1] == self.t:
            self.words[-1] = word
        else:
            self.idx.append(self.t)
            self.words.append(word)

    def byte_out(self, value: int) -> None:
        """Initiator to target (COMMAND): REQ, the byte, ACK, REQ released, ACK released."""
        self.set(on=["REQ"])
        self.hold(490)
        self.set(db=value)
        self.hold(22)
        self.set(on=["ACK"])
        self.hold(5)
        self.set(off=["REQ"])
        self.hold(19)
        self.set(off=["ACK"])
        self.hold(60)

    def byte_in(self, value: int, *, lost_req: bool = False) -> None:
        """Target to initiator: the byte, REQ, ACK, REQ and ACK released in one sample. A lost
        REQ never shows: the initiator's ACK is the only edge."""
        self.set(db=value)
        self.hold(2)
        if not lost_req:
            self.set(on=["REQ"])
        self.hold(12)
        self.set(on=["ACK"])
        self.hold(11)
        self.set(off=["REQ", "ACK"])
        self.hold(10)


def capture(commands: list[Command], *, idle: int = 2000, unpowered: int = 0) -> tuple[np.ndarray, Expected]:
    """`unpowered`: samples at the start where the bus is not powered yet (every line low)."""
    bus = _Bus()
    exp = Expected(commands)
    if unpowered:
        bus.words[0] = 0
        bus.hold(unpowered)
        bus.set()
    bus.hold(idle)
    for cmd in commands:
        bus.set(db=IDS)
        bus.hold(23)
        bus.set(on=["SEL"])
        exp.selections_ns.append(bus.t * PERIOD_NS)
        bus.hold(SEL_PULSE)
        bus.set(off=["SEL"])
        bus.hold(BSY_AFTER_SEL)
        bus.set(on=["BSY"])
        exp.selection_ends_ns.append(bus.t * PERIOD_NS)
        bus.hold(534)
        bus.set(on=["CD"])
        bus.hold(159)
        for b in cmd.cdb:
            bus.byte_out(b)
        if cmd.abort == "command":      # the drive stays in COMMAND (playing) until SEL
            bus.hold(cmd.seek or 1000)
            bus.set(on=["SEL"], db=IDS)
            bus.hold(50)
            bus.set(off=["BSY"])
            bus.hold(20)
            bus.set(on=["BSY"])
            bus.hold(30)
            bus.set(off=["SEL"])
            bus.hold(100)
            bus.byte_out(0xFF)
            _close(bus, cmd)
            continue
        bus.set(off=["CD"])
        if cmd.seek:
            exp.seeks_ns.append((bus.t * PERIOD_NS, (bus.t + cmd.seek) * PERIOD_NS))
            bus.hold(cmd.seek)
        if cmd.data:
            bus.set(on=["IO"])
            bus.hold(300)
            for k, b in enumerate(cmd.data):
                if cmd.abort == "data" and k == cmd.abort_after:
                    bus.set(on=["SEL"])
                    bus.hold(40)
                if cmd.abort == "data" and k == cmd.abort_after + cmd.drain:
                    break
                bus.byte_in(b)
        if cmd.abort == "data":         # BSY goes, then the initiator releases SEL
            bus.set(on=["SEL"])
            bus.hold(200)
            bus.set(off=["BSY", "MSG", "CD", "IO"])
            bus.hold(80)
            bus.set(off=["SEL"], db=0xFF)
            bus.hold(idle)
            continue
        _close(bus, cmd)
        bus.hold(idle)
    n = bus.t + 1
    return gen_logic.expand(np.array(bus.idx), np.array(bus.words, dtype=np.uint64), n), exp


def _close(bus: _Bus, cmd: Command) -> None:
    """STATUS, MESSAGE IN (COMMAND COMPLETE), BSY released."""
    bus.set(on=["CD", "IO"], off=["MSG"])
    bus.hold(100)
    bus.byte_in(cmd.status, lost_req=cmd.lost_req)
    bus.set(on=["MSG", "CD", "IO"])
    bus.hold(100)
    bus.byte_in(0x00)
    bus.hold(300)
    bus.set(off=["BSY", "MSG", "CD", "IO"], db=0x00)


def write(path, commands: list[Command], **kw) -> Expected:
    samples, exp = capture(commands, **kw)
    gen_logic.write_dsl(path, samples, dict(enumerate(PROBES)), HZ)
    return exp
