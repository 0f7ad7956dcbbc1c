"""Absolute time: `start_epoch_ns`, the wall-clock time (ns since 1970-01-01 UTC) of a trace's
time zero, the zero of every `*_ns` time in its tables, where the capture has a wall clock.

Times in the tables count from the trace's start (schema.py); the capture's own clock stays
in `Capture.meta` (`origin_ns`: the capture's time of the first record, in its own clock).
Which formats carry a wall clock (CLOCKS, published in docs/schemas/README.md):
"""
from __future__ import annotations

# An origin this large is a date, not a time of day (strace -t/-tt) or an uptime.
EPOCH_MIN_NS = 10 * 86_400 * 10**9
# layers whose --window moves the time zero to the window's start (block keeps btt's times)
WINDOW_MOVES_ZERO = ("bus", "usb", "scsilog")

CLOCKS = {
    "blktrace": "the wall clock blktrace records when tracing starts (its timestamp notify "
                "record); unknown in a capture without one",
    "blkparse": "unknown: blkparse prints times from the trace start",
    "usbmon": "pcap and pcapng: the packet times (the epoch); usbmon text: unknown (a "
              "monotonic clock in microseconds)",
    "scsilog": "unknown: dmesg and ftrace print the time since boot",
    "sgio": "strace -ttt: the epoch; -t/-tt (the time of day, no date) and no times: unknown",
    "qemu_lsi": "the host's wall clock of QEMU's trace log (pid@seconds.micros)",
    "ancot": "unknown (the text has ticks from the start)",
    "vcd": "unknown ($date is free text)",
    "sigrok": "unknown", "dsview": "unknown", "saleae": "unknown", "transitions-parquet": "unknown",
}


def origin_epoch_ns(fmt: str, meta: dict) -> int | None:
    """The epoch time of the capture's first record (its `origin_ns`), or None when the
    capture's clock is not a wall clock (CLOCKS)."""
    origin = meta.get("origin_ns")
    if origin is None:
        return None
    if fmt == "blktrace":
        stamps = meta.get("wall_clock") or []
        if not stamps:
            return None
        first = stamps[0]           # trace clock `time_abs` was wall clock `wall_clock_ns`
        return int(first["wall_clock_ns"]) + int(origin) - int(first["time_abs"])
    if fmt == "usbmon":
        return int(origin) if meta.get("container") in ("pcap", "pcapng") else None
    if fmt == "qemu_lsi":
        return int(origin) if str(meta.get("clock", "")).startswith("host wall clock") else None
    if fmt == "sgio":
        return int(origin) if origin >= EPOCH_MIN_NS else None
    return None


def window_start_ns(window) -> int:
    """Where a --window (as the user gave it: "START:END" seconds, or a pair) starts, in ns."""
    if window is None:
        return 0
    lo = window[0] if isinstance(window, (tuple, list)) else str(window).partition(":")[0]
    return max(int(round(float(lo) * 1e9)), 0) if lo not in ("", None) else 0


def start_epoch_ns(analysis) -> int | None:
    """The epoch time of the analysis' time zero, or None when the capture has no wall clock."""
    capture = analysis.capture
    if capture is None:
        return None
    origin = origin_epoch_ns(capture.format, capture.meta or {})
    if origin is None:
        return None
    shift = window_start_ns(analysis.filters.get("window")) if analysis.layer in WINDOW_MOVES_ZERO else 0
    return origin + shift
