"""Terminal rendering with rich: aligned tables of the summary dict (never recomputes)."""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from scsitrace.inert import printable_tree
from scsitrace.tables import percent_title

from .units import fmt_ns


PIPE_WIDTH = 1000       # piped: tables take the width they need (rich would assume 80 columns)
TABLE_WIDTH = 1 << 16   # tables are printed on a console this wide: never narrower than they need


def console_for(width: int | None = None, file=None) -> Console:
    """A console whose tables are never cut: `width` (--width) if given; on a terminal its
    width (a wider table is printed wider, see print_table); piped, wide enough for any table."""
    console = Console(file=file, width=width, highlight=False, emoji=False)
    if width is None and not console.is_terminal:
        console = Console(file=file, width=PIPE_WIDTH, highlight=False, emoji=False)
    return console


def print_table(console: Console, table: Table) -> None:
    """Print a table without cutting or wrapping a value: cells never wrap (a number and its
    unit stay on one line), and a table wider than the console is printed at its own width
    (the terminal folds the lines; nothing is replaced by an ellipsis). Text is printed as
    it is: a process name such as `[kworker/0:1]` is not read as rich markup."""
    if isinstance(table.title, str):
        table.title = Text(table.title, style=table.title_style or "table.title")
    for column in table.columns:
        column.no_wrap = True
        column.header = _plain(column.header)
        column._cells = [_plain(cell) for cell in column._cells]   # rich keeps a column's cells there
    # a table takes the width it needs on any console at least that wide; printing on an
    # unbounded one spares measuring every cell twice (once to find the need, once to print)
    if console.width < TABLE_WIDTH:
        console = Console(file=console.file, width=TABLE_WIDTH, force_terminal=console.is_terminal,
                          color_system=console.color_system, highlight=False, emoji=False)
    console.print(table)


def _plain(value):
    return Text(value) if isinstance(value, str) else value


def phase_table(summary: dict) -> Table:
    base = (summary["categories"] or [{}])[0].get("base", "elapsed")
    title = (f"Time in each phase ({summary['profile']})" if base == "elapsed"
             else f"{percent_title(summary['categories'])} in each stage ({summary['profile']})")
    if summary.get("target") is not None:
        title += f", target {summary['target']}"
    t = Table(title=title, title_justify="left")
    t.add_column("Phase" if base == "elapsed" else "Stage")
    t.add_column("Percentage" if base == "elapsed" else f"% of {'Q2C' if base == 'q2c' else 'device time'}",
                 justify="right")
    t.add_column("Normalized", justify="right")
    t.add_column("Total", justify="right")
    for c in summary["categories"]:
        t.add_row(c["name"], f"{c['percent']:.2f} %", fmt_ns(c["normalized_ns"]), fmt_ns(c["total_ns"]))
    t.add_section()
    t.add_row("Elapsed Time of Trace", "", "", fmt_ns(summary["elapsed_ns"]))
    t.add_row("I/Os completed", "", "", str(summary["ios_completed"]))
    bw = summary["bandwidth_mib_s"]
    t.add_row("Bandwidth", "", "", f"{bw:.2f} MBytes/sec" if bw is not None else "unknown")
    if summary.get("iops") is not None:
        t.add_row("I/O rate", "", "", f"{summary['iops']:.1f} I/Os/sec")
    return t


def targets_table(summary: dict) -> Table | None:
    rows = summary.get("targets") or []
    if not rows:
        return None
    t = Table(title="Per target", title_justify="left")
    for col in ("Target", "I/Os", "Connections", "Busy", "Busy %", "Bytes", "MBytes/sec"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["target"]), str(r["ios_completed"]), str(r["connections"]), fmt_ns(r["busy_ns"]),
                  f"{r['busy_percent']:.2f}", "" if r["data_bytes"] is None else str(r["data_bytes"]),
                  "" if r["bandwidth_mib_s"] is None else f"{r['bandwidth_mib_s']:.2f}")
    return t


def latency_table(summary: dict) -> Table | None:
    """The layer's latencies (JSON `latency`): count, min, percentiles, max, mean."""
    rows = [r for r in summary.get("latency") or [] if r["n"]]
    if not rows:
        return None
    t = Table(title="Latency (nearest-rank percentiles)", title_justify="left")
    t.add_column("Latency")
    for col in ("N", "Min", "p50", "p90", "p99", "p99.9", "Max", "Mean"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["name"], str(r["n"]), *(fmt_ns(r[k]) for k in ("min_ns", "p50_ns", "p90_ns", "p99_ns",
                                                                      "p999_ns", "max_ns", "avg_ns")))
    return t


def latency_histogram_table(summary: dict) -> Table | None:
    """The layer's latencies counted in power-of-two buckets (JSON `latency_histogram`): per
    latency, each bucket's upper bound and count."""
    rows = summary.get("latency_histogram") or []
    if not rows:
        return None
    t = Table(title="Latency histogram (I/Os per bucket, upper bound)", title_justify="left")
    t.add_column("Latency")
    t.add_column("Buckets")
    names = list(dict.fromkeys(r["name"] for r in rows))
    for name in names:
        t.add_row(name, ", ".join(f"<={fmt_ns(r['le_ns']) if r['le_ns'] is not None else 'inf'}: {r['count']}"
                                  for r in rows if r["name"] == name))
    return t


def source_lines(src: dict) -> list[str]:
    """What the input gave and how it was read: signals and their capture names, inversions,
    data polarity, merged skew. Only the facts a source has."""
    out = []
    meta = src.get("meta") or {}
    if src.get("signals"):
        out.append("Signals: " + " ".join(src["signals"]))
    if meta.get("mapping"):
        inverted = set(meta.get("inverted") or ())
        out.append("Mapped: " + ", ".join(f"{bus} <- {name}" + (" (active-low, inverted)" if bus in inverted else "")
                                          for bus, name in meta["mapping"].items()))
    if src.get("data_polarity"):
        out.append(f"Data polarity: {src.get('data_polarity_reason') or src['data_polarity']}")
    return out


def render(summary: dict, console: Console | None = None) -> None:
    console = console or console_for()
    summary = printable_tree(summary)      # text from the trace is shown, never run by the terminal
    src = summary["source"]
    console.print(f"{src.get('path', '')}  format {src.get('format', '?')}"
                  + (f", level {src['level']}" if src.get("level") else ""), markup=False, highlight=False,
                  soft_wrap=True, style="bold")
    for line in source_lines(src):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if summary.get("filters"):
        console.print("Filtered: " + ", ".join(f"--{k} {v}" for k, v in summary["filters"].items()),
                      markup=False, highlight=False, soft_wrap=True, style="bold")
    tables = [phase_table(summary), targets_table(summary), *layer_tables(summary), latency_table(summary),
              latency_histogram_table(summary)]
    for table in tables:
        if table is not None:
            print_table(console, table)
    an = summary["anomalies"]
    if an["count"]:
        kinds = ", ".join(f"{k} x{v}" for k, v in an["by_kind"].items())
        console.print(f"Anomalies: {an['count']} ({kinds})", markup=False, soft_wrap=True)
    rec = summary["records"]
    line = f"Records: {rec['read']} read, {rec['skipped']} skipped"
    console.print(line, markup=False, soft_wrap=True)
    for ex in rec.get("skipped_examples", []):
        console.print(f"  skipped {ex}", markup=False, soft_wrap=True)
    for note in summary.get("notes", []):
        console.print(f"Note: {note}", markup=False, highlight=False, soft_wrap=True)


def layer_tables(summary: dict) -> list[Table]:
    """The layer's own tables, rendered from their JSON keys (btt's for block traces, SRT for
    the usb and kernel-log layers)."""
    from . import btt, srt
    renderers = {"block": btt.tables, "usb": srt.tables, "scsilog": srt.tables}
    render = renderers.get(summary.get("layer"))
    return render(summary) if render else []
