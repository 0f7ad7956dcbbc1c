"""Terminal tables of the usb and scsilog layers, from the summary dict (never recomputed):
service response time per opcode (tshark's columns plus percentiles), command
accounting, per device bandwidth and IOPS, and the response-time histogram."""
from __future__ import annotations

from rich.table import Table

from . import histogram_rows as hist
from .units import fmt_ns


def srt_table(summary: dict) -> Table:
    t = Table(title="Service response time per opcode (command -> response)", title_justify="left")
    for col in ("Opcode", "Procedure", "Calls", "Min", "Avg", "p50", "p99", "Max"):
        t.add_column(col, justify="left" if col == "Procedure" else "right")
    for r in summary.get("srt", []):
        t.add_row(f"0x{r['opcode']:02x}", r["name"], str(r["calls"]), fmt_ns(r["min_ns"]), fmt_ns(r["avg_ns"]),
                  fmt_ns(r["p50_ns"]), fmt_ns(r["p99_ns"]), fmt_ns(r["max_ns"]))
    return t


def commands_table(summary: dict) -> Table:
    c = summary["commands"]
    t = Table(title="Commands", title_justify="left")
    t.add_column("")
    t.add_column("Count", justify="right")
    t.add_row("total", str(c["total"]))
    t.add_row("paired", str(c["paired"]))
    t.add_row("unpaired", str(c["unpaired"]))
    for reason, n in c["by_reason"].items():
        t.add_row(f"  {reason}", str(n))
    return t


def devices_table(summary: dict) -> Table:
    t = Table(title="Per device", title_justify="left")
    for col in ("Device", "Commands", "Paired", "Bytes", "MBytes/sec", "IOPS", "Avg response"):
        t.add_column(col, justify="right")
    for d in summary.get("devices", []):
        t.add_row(d["device"], str(d["commands"]), str(d["paired"]),
                  "" if d["data_bytes"] is None else str(d["data_bytes"]),
                  "" if d["bandwidth_mib_s"] is None else f"{d['bandwidth_mib_s']:.2f}",
                  "" if d["iops"] is None else f"{d['iops']:.1f}", fmt_ns(d["avg_response_ns"]))
    return t


def histogram_table(summary: dict) -> Table:
    """Per procedure, one row per bucket: its upper bound, calls and a bar."""
    t = hist.histogram_table("Response time histogram (calls per bucket, upper bound)", "Procedure")
    for h in summary.get("srt_histogram", []):
        hist.histogram_rows(t, h["name"], [(b["le_ns"], b["count"]) for b in h["buckets"]])
    return t


def completions_table(summary: dict) -> Table:
    t = Table(title="Completions (device, opcode, result, sense key)", title_justify="left")
    for col in ("Device", "Opcode", "Command", "Result", "Host byte", "Sense key", "Count"):
        t.add_column(col, justify="right" if col in ("Opcode", "Count") else "left")
    for r in summary["completions"]:
        t.add_row(r["device"], "" if r["opcode"] is None else f"0x{r['opcode']:02x}", r["command"] or "",
                  r["result"] or "", r["host_byte"] or "", r["sense_key"] or "", str(r["count"]))
    return t


def _completions_worth_showing(summary: dict) -> bool:
    """A kernel log's completions table when it says more than the SRT: no command paired,
    or some ended other than GOOD or with sense data."""
    rows = summary.get("completions") or []
    return bool(rows) and (not summary.get("commands", {}).get("paired")
                           or any(r["result"] != "GOOD" or r["sense_key"] for r in rows))


def tables(summary: dict) -> list[Table]:
    out = [srt_table(summary), commands_table(summary)]
    if summary.get("devices"):
        out.append(devices_table(summary))
    if _completions_worth_showing(summary):
        out.append(completions_table(summary))
    if summary.get("srt_histogram"):
        out.append(histogram_table(summary))
    return out
