"""The Wren IV mechanism and track buffer (Table 1, Sec 2.1): when each sector of a request
is in the buffer (reads) or on the medium (writes).

Sectors stream under the head at the media rate; the buffer holds `buffer_sectors` sectors.
Reading stops when the buffer is full, and a stopped head must wait for the next sector to
come round again (a missed rotation); the same holds for writing when the host is late.
Times are computed lazily, sector by sector, from the bus times at which sectors left (reads)
or entered (writes) the buffer, so the bus and the mechanism stay causally consistent.
"""
from __future__ import annotations

import math

from .params import DiskParams


class Disk:
    def __init__(self, scsi_id: int, p: DiskParams, rng):
        self.id, self.p = scsi_id, p
        self.rot = p.rotation_ns
        self.sector_ns = p.sector_ns
        self.spt = p.sectors_per_track
        self.cap = p.buffer_sectors
        self.angle0 = float(rng.uniform(0, self.rot))        # where the spindle is at t = 0
        self.cyl = int(rng.integers(0, p.cylinders))
        # seek time = min_seek + k * sqrt(distance / max distance); k gives Table 1's 17.5 ms
        # average over uniformly random pairs of cylinders (E[sqrt|U1-U2|] = 8/15)
        self.seek_k = (p.avg_seek_ns - p.min_seek_ns) / (8 / 15)
        self.stream = None          # read stream: [lba0, ready times, sent times, limit]
        self.expect_next = None     # the sector after the last one requested (sequential hit)

    # -- geometry -------------------------------------------------------------------------
    def cylinder_of(self, lba: int) -> int:
        return min(self.p.cylinders - 1, lba * self.p.cylinders // self.p.capacity_sectors)

    def seek_ns(self, lba: int) -> float:
        d = abs(self.cylinder_of(lba) - self.cyl)
        self.cyl = self.cylinder_of(lba)
        if d == 0:
            return 0.0
        return self.p.min_seek_ns + self.seek_k * math.sqrt(d / max(1, self.p.cylinders - 1))

    def next_pass(self, lba: int, t: float) -> float:
        """Earliest time >= t at which sector `lba` starts passing under the head."""
        slot = (lba % self.spt) * self.sector_ns
        return t + (slot - (t - self.angle0)) % self.rot

    def _resume(self, prev_end: float, wanted: float) -> float:
        """The head was ready at prev_end but could not go on before `wanted`: whole rotations."""
        if wanted <= prev_end:
            return prev_end
        return prev_end + math.ceil((wanted - prev_end) / self.rot) * self.rot

    # -- reads ----------------------------------------------------------------------------
    def begin_read(self, lba: int, nsec: int, t: float) -> None:
        """A read command is decoded at t: keep streaming on a sequential hit, else seek."""
        s = self.stream
        hit = (self.p.readahead and s is not None and s[0] <= lba
               and (lba == self.expect_next or lba < s[0] + len(s[1])))
        if hit:
            for i in range(len(s[2]), lba - s[0]):       # skipped sectors free their space
                self.ready_time(s[0] + i)
            for i in range(lba - s[0]):
                if s[2][i] is None:
                    s[2][i] = t
            s[3] = None if self.p.readahead else lba - s[0] + nsec - 1
        else:
            start = self.next_pass(lba, t + self.seek_ns(lba))
            limit = None if self.p.readahead else nsec - 1
            self.stream = [lba, [start + self.sector_ns], [None], limit]
        self.expect_next = lba + nsec

    def ready_time(self, lba: int) -> float | None:
        """When sector `lba` is in the buffer; None while that depends on a later send."""
        lba0, ready, sent, limit = self.stream
        i = lba - lba0
        while len(ready) <= i:
            k = len(ready)
            if limit is not None and k > limit:
                return None
            start = ready[-1]
            if k >= self.cap:
                freed = sent[k - self.cap]
                if freed is None:
                    return None
                start = self._resume(start, freed)
            ready.append(start + self.sector_ns)
            sent.append(None)
        return ready[i]

    def mark_sent(self, lba: int, t: float) -> None:
        s = self.stream
        s[2][lba - s[0]] = t

    # -- writes ---------------------------------------------------------------------------
    def begin_write(self, lba: int, t: float) -> None:
        """A write command is decoded at t: the seek starts now, while data comes in."""
        self.stream = None
        self.expect_next = None
        self.w_lba = lba
        self.w_head = t + self.seek_ns(lba)
        self.w_recv: list[float] = []
        self.w_end: list[float] = []

    def mark_received(self, t: float) -> None:
        self.w_recv.append(t)
        k = len(self.w_end)
        while k < len(self.w_recv):                 # write every sector that is in
            if k == 0:
                start = self.next_pass(self.w_lba, max(self.w_head, self.w_recv[0]))
            else:
                start = self._resume(self.w_end[-1], self.w_recv[k])
            self.w_end.append(start + self.sector_ns)
            k += 1

    def written_time(self, k: int) -> float:
        """When sector k of the current write is on the medium (sector k must be received)."""
        return self.w_end[k]

    def space_for(self, k: int) -> float:
        """Earliest time sector k of the write fits in the buffer."""
        return 0.0 if k < self.cap else self.w_end[k - self.cap]
