"""Block-layer tables in btt's shapes, rendered from the JSON summary (no figure computed
here; the AVG column is printed with btt's own arithmetic, see stage_tables):
the ALL table (per device and all devices), Device Overhead, per device, per process, and
the dispatched request-size histogram."""
from __future__ import annotations

from rich.table import Table

from .units import fmt_ns


def _secs(ns) -> str:
    return "" if ns is None else f"{ns / 1e9:13.9f}".strip()


def stage_tables(summary: dict) -> list[Table]:
    """btt's "All Devices" table (MIN AVG MAX N in seconds), one per device then all."""
    by_dev: dict[str, list[dict]] = {}
    for row in summary.get("stages", []):
        if row["n"]:
            by_dev.setdefault(row["device"], []).append(row)
    devices = [d for d in by_dev if d != "all"]
    devices = (devices if len(devices) > 1 else []) + (["all"] if "all" in by_dev else [])
    out = []
    for dev in devices:
        title = "All Devices" if dev == "all" else f"Device {dev}"
        t = Table(title=f"btt stages: {title}", title_justify="left")
        for col in ("ALL", "MIN", "AVG", "MAX", "N"):
            t.add_column(col, justify="left" if col == "ALL" else "right")
        for r in by_dev[dev]:
            # btt prints BIT_TIME(total) / n: from total and n, so the 9th decimal is btt's too
            # (avg_ns / 1e9 rounds differently now and then: 0.000082630 for btt's 0.000082629)
            avg = (r["total_ns"] / 1e9) / r["n"]
            t.add_row(r["name"], _secs(r["min_ns"]), f"{avg:.9f}", _secs(r["max_ns"]), str(r["n"]))
        out.append(t)
    return out


def overhead_table(summary: dict) -> Table | None:
    rows = summary.get("overhead") or []
    if not rows:
        return None
    t = Table(title="Device Overhead (% of Q2C time)", title_justify="left")
    t.add_column("DEV")
    names = ("Q2G", "G2I", "Q2M", "I2D", "D2C")
    for n in names:
        t.add_column(n, justify="right")
    for r in rows:
        if r["device"] == "Overall":
            t.add_section()
        t.add_row(r["device"], *(f"{r[n]:.4f}%" for n in names))
    return t


def device_table(summary: dict) -> Table | None:
    rows = summary.get("devices") or []
    if not rows:
        return None
    t = Table(title="Per device (Seek: mean |D sector - previous D end| in sectors)", title_justify="left")
    cols = ("DEV", "Q", "D", "Done", "M+F", "R", "MiB/s", "IOPS", "Busy%", "Depth max/avg", "Seek")
    for c in cols:
        t.add_column(c, justify="left" if c == "DEV" else "right")
    for r in rows:
        depth = "" if r["max_depth"] is None else f"{r['max_depth']}/{r['avg_depth'] or 0:.2f}"
        t.add_row(r["device"], str(r["queued"]), str(r["dispatched"]), str(r["ios_completed"]),
                  str(r["merges"]), str(r["requeues"]),
                  "" if r["mib_s"] is None else f"{r['mib_s']:.2f}",
                  "" if r["iops"] is None else f"{r['iops']:.1f}", f"{r['busy_percent']:.1f}", depth,
                  "" if r["seek_mean_sectors"] is None else f"{r['seek_mean_sectors']:.0f}")
    return t


def process_table(summary: dict) -> Table | None:
    rows = summary.get("processes") or []
    if not rows:
        return None
    t = Table(title="Per process (the process that queued the I/O)", title_justify="left")
    for c in ("Process", "Queued", "Completed", "Bytes", "Q2C avg", "Q2C max", "D2C avg"):
        t.add_column(c, justify="left" if c == "Process" else "right")
    for r in rows[:30]:
        t.add_row(str(r["process"]), str(r["queued"]), str(r["ios_completed"]), str(r["bytes"] or 0),
                  fmt_ns(r["q2c_avg_ns"]), fmt_ns(r["q2c_max_ns"]), fmt_ns(r["d2c_avg_ns"]))
    return t


def size_table(summary: dict) -> Table | None:
    rows = summary.get("size_histogram") or []
    if not rows:
        return None
    t = Table(title="Dispatched request sizes (D events)", title_justify="left")
    for c in ("Size up to", "Requests", "Writes", "Reads/other"):
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(_size(r["bytes_max"]), str(r["requests"]), str(r["writes"]), str(r["reads_other"]))
    return t


def _size(n) -> str:
    if n is None:
        return "0"
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"


def tables(summary: dict) -> list[Table]:
    out = stage_tables(summary)
    for make in (overhead_table, device_table, process_table, size_table):
        t = make(summary)
        if t is not None:
            out.append(t)
    return out
