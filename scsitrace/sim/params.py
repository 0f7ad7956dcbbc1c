"""Default parameters of the simulated string, each with its source.

"Table n" and "Sec n" refer to the RAID-I report (seed 002). Where the report gives a range,
the simulator samples uniformly inside it (seeded). Values the report does not give are
marked CHOICE, with the reason; docs/simulator.md lists every choice.
All times are integer nanoseconds; `MIB` is 2**20 bytes, the report's MByte (DESIGN).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from scsitrace.errors import UsageError

US = 1_000
MS = 1_000_000
MIB = 1 << 20


@dataclass
class BusTiming:
    tick_ns: int = 50                 # ancot-text default resolution (formats/ancot-text.md)
    byte_ns: int = 250                # Sec 4.1.1: "data bytes pass ... at 250 nsec per byte" (4 MB/s)
    bus_free_delay_ns: int = 800      # SCSI-2 bus free delay, before a device may arbitrate
    settle_ns: int = 450              # CHOICE: >= SCSI-2 bus settle delay (400 ns), so that no
                                      # phase line state is shorter than the analyzer's settle delay
    arbitration_ns: int = 4 * US      # Table 11: Arbitration 4 usec (initiator)
    rearbitration_ns: int = 3 * US    # Table 11: Rearbitration 3 usec (target); >= 2.4 us SCSI-2
    selection_ns: int = 3 * US        # Table 11: Selection 3 usec
    reselection_ns: int = 3 * US      # Table 11: Reselection 3 usec
    reset_hold_ns: int = 25 * US      # SCSI-2 reset hold time
    reset_to_selection_ns: int = 250 * MS  # SCSI-2 reset to selection time

    def handshake_offsets(self) -> tuple[int, int, int]:
        """ACK rise, REQ fall, ACK fall after REQ rise, on the tick grid (0, 100, 150, 200 ns
        of a 250 ns byte). Each line's rise and fall stay at distinct ticks, so a VCD (one
        value per signal and time stamp) keeps every edge; at 100 ns per byte ACK falls at the
        tick where the next REQ rises."""
        tick, p = self.tick_ns, self.byte_ns
        ack_up = max(tick, (p * 2 // 5) // tick * tick)
        req_dn = max(ack_up, (p * 3 // 5) // tick * tick)
        ack_dn = max(req_dn, (p * 4 // 5) // tick * tick)
        if ack_dn == ack_up:
            ack_dn = p
        return ack_up, req_dn, ack_dn


@dataclass
class DiskParams:
    """Imprimis Wren IV (Table 1, Sec 2.1) and its SCSI firmware pauses (Table 11)."""

    rpm: int = 3600                          # Table 1
    avg_seek_ns: int = 17_500 * US           # Table 1: average seek 17.5 msec
    min_seek_ns: int = 3 * MS                # CHOICE: track-to-track seek, not in the report
    cylinders: int = 549                     # Table 1: "549 tracks per surface"
    capacity_bytes: int = 344_000_000        # Table 1: formatted capacity 344 MBytes
    media_rate: float = 1.3 * MIB            # Sec 2.1.1: sustained 1.3 MBytes/sec
    sector_bytes: int = 512                  # Table 1: 512 bytes per sector
    buffer_bytes: int = 32 * 1024            # Sec 2.1.2: 32 KByte buffer
    bfr: float = 128 / 255                   # Sec 2.1.3: BFR 80 hex = 1/2 (16 KBytes)
    ber: float = 128 / 255                   # Sec 2.1.3: BER, same default
    readahead: bool = True                   # Sec 4.2.1: readahead on
    id_message_pause_ns: int = 27 * US       # Table 11: disk pause before request for ID message
    command_decode_ns: int = 300 * US        # Table 11: disk pause before disconnect request
    first_data_pause_ns: tuple = (185 * US, 285 * US)   # Table 11: pause before data byte
    save_pointer_pause_ns: tuple = (200 * US, 400 * US)  # Table 11: pause before save pointer
    status_pause_ns: tuple = (500 * US, 1000 * US)      # Table 11: pause before status request
    write_pause_ns: tuple = (100 * US, 400 * US)        # DESIGN (Sec 4.1.2): write pauses
    write_pause_every: int = 512             # DESIGN: every 512 bytes ...
    write_pause_after: int = 8 * 1024        # DESIGN: ... after the first 8 KB
    reconnect_status_pause_ns: int = 5 * US  # CHOICE: a write's reconnection goes to STATUS at once
    setup_in_command: bool = True            # CHOICE: a read that needs no disconnect spends its
                                             # pause before the first data byte in COMMAND (A5)

    @property
    def rotation_ns(self) -> int:
        return 60 * 1_000_000_000 // self.rpm

    @property
    def sectors_per_track(self) -> int:
        # the track holds what passes the head in one rotation at the media rate (ZBR average)
        return max(1, round(self.media_rate * self.rotation_ns / 1e9 / self.sector_bytes))

    @property
    def sector_ns(self) -> float:
        return self.rotation_ns / self.sectors_per_track

    @property
    def capacity_sectors(self) -> int:
        return self.capacity_bytes // self.sector_bytes

    @property
    def buffer_sectors(self) -> int:
        return self.buffer_bytes // self.sector_bytes

    def ratio_sectors(self, ratio: float) -> int:
        # Sec 2.1.3: ratio x buffer size; "less than a sector ... is not allowed"
        return max(1, int(ratio * self.buffer_bytes) // self.sector_bytes)


@dataclass
class HbaParams:
    """Interphase Jaguar host adapter, initiator ID 7 (Table 11, Sec 2.2)."""

    scsi_id: int = 7                          # highest priority: the HBA wins arbitration
    command_first_ack_ns: int = 22 * US       # Table 11: command phase, first byte
    command_rest_ack_ns: int = 11 * US        # Table 11: acknowledge remaining 5 command bytes
    message_ack_ns: int = 3 * US              # Table 11: "few usec" (CHOICE of 3 within "few")
    fifo_ack_ns: int = 82 * US                # Table 11: controller ack after first 8 bytes
    fifo_bytes: int = 8                       # Sec 4.6: the first eight bytes enter a FIFO
    alloc_pause_ns: tuple = (300 * US, 1700 * US)  # Table 11: buffer allocation after 8 KBytes
    alloc_block: int = 8 * 1024               # Sec 2.2: buffer allocated 8 KBytes at a time
    alloc_pauses: bool = True                 # what-if knob: --no-alloc-pauses
    alloc_fixed: bool = False                 # what-if knob: alloc_pause_ns as given, whatever the size
    save_pointer_ack_ns: int = 100 * US       # Table 11: controller ack of save pointer
    disconnect_ack_ns: int = 30 * US          # Table 11: controller ack of disconnect
    status_ack_ns: int = 40 * US              # Table 11: controller ack of status
    complete_ack_ns: int = 24 * US            # Table 11: controller ack of command complete

    def alloc_range(self, request_bytes: int) -> tuple[int, int]:
        """The pause range for one request size.

        Sec 4.6: the pauses "range from 300-1700 usec, and increase in size depending on the
        size of the transfers". CHOICE: the upper end grows linearly with the request size,
        from the minimum at the smallest transfer that crosses a boundary (8 KB + 1 sector)
        to the full range at 128 KB, the largest request of the study (Tables 12-31).
        This choice decides the Table 3 result (docs/simulator.md, choice 3).
        """
        lo, hi = self.alloc_pause_ns
        if self.alloc_fixed:
            return lo, hi
        frac = min(1.0, max(0.0, (request_bytes - self.alloc_block) / (128 * 1024 - self.alloc_block)))
        return lo, int(lo + (hi - lo) * frac)


@dataclass
class HostParams:
    """Sprite host on a Sun4/280: the time from a completion to the next command (Sec 4.7)."""

    mode: str = "no-copy"
    timelines: bool = True     # Sec 4.7: an experiment the report timed uses its own row (timelines.py)
    one_cpu: bool = True       # Sec 2: one Sun4/280 CPU; the host work of all processes runs in turn
    # Tables 22-31 (no-copy): interrupt -> entry avail 43-180 us; entry avail -> submit 120-442 us
    interrupt_to_avail_ns: tuple = (43 * US, 180 * US)
    avail_to_submit_ns: tuple = (120 * US, 442 * US)
    # Tables 12-21 (user level): everything but copy, flush and the board, per call: 925-3256 us
    user_fixed_ns: tuple = (925 * US, 3256 * US)
    read_flush_rate: float = 12 * MIB                 # Sec 4.7: DMA flush ~12 MBytes/sec on reads
    write_flush_rate: tuple = (50 * MIB, 70 * MIB)    # Sec 4.7: 50-70 MBytes/sec on writes
    # Sec 4.7: copy speed 8 MB/s at 4 KB, 7 MB/s at 32 KB, 5.7 MB/s at 128 KB
    copy_rates: tuple = ((4096, 8 * MIB), (32768, 7 * MIB), (131072, 5.7 * MIB))

    def copy_rate(self, size: int) -> float:
        pts = self.copy_rates
        if size <= pts[0][0]:
            return pts[0][1]
        for (s0, r0), (s1, r1) in zip(pts, pts[1:]):
            if size <= s1:
                return r0 + (r1 - r0) * (size - s0) / (s1 - s0)
        return pts[-1][1]


@dataclass
class Params:
    bus: BusTiming = field(default_factory=BusTiming)
    disk: DiskParams = field(default_factory=DiskParams)
    hba: HbaParams = field(default_factory=HbaParams)
    host: HostParams = field(default_factory=HostParams)


# ------------------------------------------------------------------ option texts (simulate, sweeps)

UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20}


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in UNITS:
        raise UsageError(f"--size: expected BYTES or a size like 32K, got {text!r}")
    return int(m.group(1)) * UNITS[m.group(2).lower()]


def parse_ratio(text: str, option: str, buffer_bytes: int, sector_bytes: int = 512) -> float:
    """A ratio (1/2, 0.5), the mode page value 0-255 (Sec 2.1.3: n/255), or bytes of the disk
    buffer with a unit (512B, 16K: the report speaks of "BFR = 512 bytes")."""
    t = text.strip()
    try:
        if "/" in t:
            a, b = t.split("/", 1)
            value = int(a) / int(b)
        elif re.fullmatch(r"\d*\.\d+|1", t):      # "1": the whole buffer (1/255 is refused anyway)
            value = float(t)
        elif t.isdigit():
            if int(t) > 255:
                raise ValueError
            value = int(t) / 255
        else:
            value = parse_size(t) / buffer_bytes
    except (ValueError, ZeroDivisionError, UsageError):
        raise UsageError(f"{option}: expected a ratio (1/2, 0.5), a mode page value 0-255 or bytes "
                         f"(512B, 16K), got {text!r}") from None
    if not 0 < value <= 1:
        raise UsageError(f"{option}: {text!r} is not within (0, 1] of the {buffer_bytes}-byte buffer")
    if value * buffer_bytes < sector_bytes:
        raise UsageError(f"{option}: {text!r} is less than a sector of the buffer (not allowed, Sec 2.1.3)")
    return value
