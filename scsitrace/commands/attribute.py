"""Overhead attribution: who made each pause (target, initiator or neither), per step of the
I/O sequence as in RAID-I Table 11, with periodic pauses and their period in bytes.
Needs REQ/ACK (level 2 or 3 traces); without them it says so and shows the phase durations."""
from __future__ import annotations

import json
import sys

from rich.table import Table

from scsitrace import outputs
from scsitrace.commands.analyze import add_input_arguments, load
from scsitrace.reports.terminal import console_for, fmt_ns, print_table


EXAMPLES = """examples:
  scsitrace attribute fixtures/bus/random4k-l3/trace.ancot --width 100
"""


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("--json", metavar="FILE|-", help="write the attribution as JSON ('-' for stdout)")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")


def run(args) -> int:
    from scsitrace.reports import attribution
    collector = attribution.Collector()       # collects while the bus analysis reads the trace
    result = attribution.attribute(load(args, tap=collector.tap), collector)
    if args.json == "-":
        json.dump(result, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if args.json:
        with outputs.writing(args.json) as fh:
            json.dump(result, fh, indent=1)
            fh.write("\n")
    console = console_for(args.width)
    for table in tables(result):
        print_table(console, table)
    for note in result["notes"]:
        console.print(f"Note: {note}", markup=False, highlight=False)
    return 0


def span(lo: int, hi: int) -> str:
    """'185.0-285.0 us' as the paper writes ranges; one value when they print alike."""
    a, b = fmt_ns(lo), fmt_ns(hi)
    if a == b:
        return a
    unit_a, unit_b = a.split()[-1], b.split()[-1]
    return f"{a.split()[0]}-{b}" if unit_a == unit_b else f"{a}-{b}"


def tables(result: dict) -> list[Table]:
    out = []
    t = Table(title="Overheads per step (Table 11 form: min-max under the component)", title_justify="left")
    t.add_column("Step", no_wrap=True)
    for col in ("Target", "Initiator", "Neither", "Count", "Total"):
        t.add_column(col, justify="right", no_wrap=True)
    for s in result["steps"]:
        cells = {"target": "", "initiator": "", "neither": ""}
        cells[s["component"]] = span(s["min_ns"], s["max_ns"])
        t.add_row(s["step"], cells["target"], cells["initiator"], cells["neither"], str(s["count"]),
                  fmt_ns(s.get("total_ns")))
    out.append(t)
    if result["periodic"]:
        p = Table(title="Periodic pauses inside data transfer", title_justify="left")
        for col in ("Component", "Every (bytes)", "Count", "Min", "Max"):
            p.add_column(col, justify="right" if col != "Component" else "left")
        for r in result["periodic"]:
            p.add_row(r["component"], str(r["period_bytes"]), str(r["count"]), fmt_ns(r["min_ns"]),
                      fmt_ns(r["max_ns"]))
        out.append(p)
    if result.get("phases_only"):
        p = Table(title="Phase durations (no REQ/ACK: not attributable)", title_justify="left")
        for col in ("Phase", "Count", "Min", "Median", "Max", "Total"):
            p.add_column(col, justify="right" if col != "Phase" else "left")
        for r in result["phases_only"]:
            p.add_row(r["phase"], str(r["count"]), fmt_ns(r["min_ns"]), fmt_ns(r["median_ns"]),
                      fmt_ns(r["max_ns"]), fmt_ns(r["total_ns"]))
        out.append(p)
    if result.get("phases"):
        ph = Table(title="Per phase (the phase of the edge that ends each wait)", title_justify="left")
        for col in ("Phase", "Target", "Initiator", "Transfer"):
            ph.add_column(col, justify="right" if col != "Phase" else "left")
        for r in result["phases"]:
            ph.add_row(r["phase"], fmt_ns(r["target_ns"]), fmt_ns(r["initiator_ns"]), fmt_ns(r["transfer_ns"]))
        out.append(ph)
    tot = Table(title="Totals per component", title_justify="left")
    tot.add_column("Component")
    tot.add_column("Time", justify="right")
    for key, name in (("target_ns", "target"), ("initiator_ns", "initiator"), ("neither_ns", "neither"),
                      ("transfer_ns", "data transfer at the bus rate")):
        v = result["totals"][key]
        tot.add_row(name, "n/a" if v is None else fmt_ns(v))
    out.append(tot)
    return out
