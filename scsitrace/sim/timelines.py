"""The host's time around each I/O, from the Sprite kernel timelines of Sec 4.7 (Tables 12-31).

The report measured, for each experiment, how long Sprite spent between one I/O's completion
interrupt and the next command's submission to the Jaguar (microseconds, averages over about
50 operations). The simulator uses a workload's own row when the report has one: the
interval is the host's part of a process's cycle; the board's part is simulated.

No-copy (Tables 22-31): interrupt -> entry avail, entry avail -> submit.
User level (Tables 12-21): after the board, interrupt handling + DMA flush + processing before
copy + kernel-to-user copy (reads) + finish + time between calls; before the board, start
system call + user-to-kernel copy and "before device driver" (writes) + device driver +
Jaguar driver. For workloads the report did not time, `HostParams` derives the same intervals
from the rates of Sec 4.7 (copy, flush) and the ranges of the tables.
"""
from __future__ import annotations

KIB = 1024

# (op, pattern, KiB) -> (interrupt -> entry avail, entry avail -> submit), us
NO_COPY = {
    ("read", "seq", 128): (180, 340),      # Table 22
    ("write", "seq", 128): (180, 290),     # Table 23
    ("read", "seq", 32): (57, 120),        # Table 24
    ("write", "seq", 32): (130, 200),      # Table 25
    ("read", "random", 32): (54, 130),     # Table 26
    ("write", "random", 32): (100, 442),   # Table 27
    ("read", "seq", 4): (43, 140),         # Table 28
    ("write", "seq", 4): (46, 120),        # Table 29
    ("read", "random", 4): (52, 120),      # Table 30
    ("write", "random", 4): (60, 150),     # Table 31
}

# (op, pattern, KiB) -> dict of the table's rows, us
USER_LEVEL = {
    ("read", "seq", 128): dict(start=420, driver=350, jaguar_driver=380, interrupt=67, flush=9600,
                               before_copy=660, copy=21000, finish=200, between=650),        # Table 12
    ("write", "seq", 128): dict(start=250, copy=23400, before_driver=170, driver=260, jaguar_driver=390,
                                interrupt=42, flush=1800, finish=680, between=190),          # Table 13
    ("read", "seq", 32): dict(start=290, driver=150, jaguar_driver=250, interrupt=21, flush=2700,
                              before_copy=420, copy=4230, finish=170, between=190),          # Table 14
    ("write", "seq", 32): dict(start=170, copy=4500, before_driver=120, driver=200, jaguar_driver=270,
                               interrupt=26, flush=570, finish=470, between=2000),           # Table 15
    ("read", "random", 32): dict(start=230, driver=110, jaguar_driver=270, interrupt=32, flush=2650,
                                 before_copy=470, copy=4450, finish=170, between=690),       # Table 16
    ("write", "random", 32): dict(start=140, copy=4400, before_driver=150, driver=225, jaguar_driver=260,
                                  interrupt=15, flush=590, finish=500, between=440),         # Table 17
    ("read", "seq", 4): dict(start=168, driver=110, jaguar_driver=170, interrupt=7, flush=480,
                             before_copy=260, copy=420, finish=120, between=90),             # Table 18
    ("write", "seq", 4): dict(start=110, copy=500, before_driver=70, driver=140, jaguar_driver=170,
                              interrupt=20, flush=145, finish=320, between=120),             # Table 19
    ("read", "random", 4): dict(start=140, driver=140, jaguar_driver=160, interrupt=28, flush=480,
                                before_copy=300, copy=500, finish=85, between=370),          # Table 20
    ("write", "random", 4): dict(start=96, copy=480, before_driver=46, driver=130, jaguar_driver=190,
                                 interrupt=18, flush=240, finish=380, between=320),          # Table 21
}

# Tables 22-31 and 12-21 also give the "Time on Jaguar board" the simulator is compared with
# (tests/test_simulate.py); they are not inputs.


def no_copy_row(op: str, pattern: str, size: int) -> tuple[int, int] | None:
    """(interrupt -> entry avail, entry avail -> submit) in us for this experiment, if timed."""
    return NO_COPY.get((op, pattern, size // KIB)) if size % KIB == 0 else None


def user_level_split(op: str, pattern: str, size: int) -> tuple[int, int] | None:
    """(host us after the board, host us before the board) for this experiment, if timed.

    After: interrupt handling to the end of the call, and the time between calls. Before: start
    system call to the command's submission (a write's user-to-kernel copy among them)."""
    row = USER_LEVEL.get((op, pattern, size // KIB)) if size % KIB == 0 else None
    if row is None:
        return None
    after = row["interrupt"] + row["flush"] + row.get("before_copy", 0) + row["finish"] + row["between"]
    before = row["start"] + row.get("before_driver", 0) + row["driver"] + row["jaguar_driver"]
    if op == "read":
        after += row["copy"]            # kernel to user, after the flush (Sec 4.7)
    else:
        before += row["copy"]           # user to kernel, before the device driver (Sec 4.7)
    return after, before
