"""Terminal rendering with rich: aligned tables of the summary dict (never recomputes).

Every line fits the console: its width on a terminal, `--width`, or $COLUMNS (else 80) when
piped. A number never wraps (it stays whole, with its unit); names wrap inside their column;
a table whose numbers alone are wider than the console is printed in parts, each part
repeating the first column. Histograms are one bucket a row with a bar."""
from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from scsitrace.inert import printable_tree
from scsitrace.tables import percent_title

from .histogram_rows import histogram_rows, histogram_table
from .units import fmt_ns


def console_for(width: int | None = None, file=None) -> Console:
    """The console tables are fitted to: `width` (--width) if given, else the terminal's
    width; piped, $COLUMNS or 80 (rich's default)."""
    return Console(file=file, width=width, highlight=False, emoji=False)


def print_table(console: Console, table: Table) -> None:
    """Print a table within the console's width, no value cut or replaced by an ellipsis:
    right-aligned cells (numbers and their units) never wrap; left-aligned ones (names) wrap
    inside their column; a table that still does not fit is printed in parts of columns.
    Text is printed as it is: a process name such as `[kworker/0:1]` is not rich markup."""
    if isinstance(table.title, str):
        table.title = Text(table.title, style=table.title_style or "table.title")
    if isinstance(table.caption, str):
        table.caption = Text(table.caption, style=table.caption_style or "table.caption")
    for column in table.columns:
        column.no_wrap = column.justify not in ("left", "default")
        column.overflow = "fold"
        column.header = _plain(column.header)
        column._cells = [_plain(cell) for cell in column._cells]   # rich keeps a column's cells there
    for part in _parts(console, table):
        console.print(part)


def _needs(console: Console, table: Table) -> list[int]:
    """Each column's narrowest width: a no-wrap column as wide as its widest cell and header,
    a wrapping one as its longest word (rich's own measure takes a word for both)."""
    out = []
    for column in table.columns:
        cells = [column.header, *column._cells]
        if column.no_wrap:
            out.append(max(Measurement.get(console, console.options, c).maximum for c in cells))
        else:
            out.append(max(Measurement.get(console, console.options, c).minimum for c in cells))
    return out


def _width(table: Table, needs: list[int], columns: list[int]) -> int:
    """The narrowest width of a table of `columns` (indices) of `table`: their needs, the
    cell padding and the box."""
    _, right, _, left = table.padding
    pad = [left + right] * len(columns)
    if not table.pad_edge:
        pad[0] -= left
        pad[-1] -= right
    box = (2 if table.box and table.show_edge else 0) + (len(columns) - 1 if table.box else 0)
    return sum(needs[i] for i in columns) + sum(pad) + box


def _parts(console: Console, table: Table) -> list[Table]:
    """The table, or (when its narrowest form is wider than the console) tables of as many
    columns as fit, each with the first column again."""
    needs = _needs(console, table)
    fits = lambda cols: _width(table, needs, [0] + cols) <= console.width  # noqa: E731
    rest = list(range(1, len(table.columns)))
    if len(table.columns) <= 2 or fits(rest):
        return [table]
    parts = []
    while rest:
        take = 1
        while take < len(rest) and fits(rest[:take + 1]):
            take += 1
        parts.append(rest[:take])
        rest = rest[take:]
    every = [c for p in parts for c in p]
    even = -(-len(every) // len(parts))     # the same columns over as many parts, evenly
    balanced = [every[i:i + even] for i in range(0, len(every), even)]
    if len(balanced) == len(parts) and all(fits(p) for p in balanced):
        parts = balanced
    return [_subtable(table, [0] + p, i) for i, p in enumerate(parts)]


def _subtable(table: Table, columns: list[int], index: int) -> Table:
    title = table.title if index == 0 else Text.assemble(table.title or "", " (continued)",
                                                         style=table.title_style or "table.title")
    part = Table(title=title, title_justify=table.title_justify, box=table.box,
                 caption=table.caption, caption_justify=table.caption_justify, show_lines=table.show_lines)
    for i in columns:
        c = table.columns[i]
        part.add_column(c.header, justify=c.justify, no_wrap=c.no_wrap, overflow=c.overflow)
    for r, row in enumerate(table.rows):
        part.add_row(*(table.columns[i]._cells[r] for i in columns), end_section=row.end_section)
    return part


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
    latency, one row per bucket: its upper bound, count and a bar."""
    rows = summary.get("latency_histogram") or []
    if not rows:
        return None
    t = histogram_table("Latency histogram (I/Os per bucket, upper bound)", "Latency")
    for name in dict.fromkeys(r["name"] for r in rows):
        histogram_rows(t, name, [(r["le_ns"], r["count"]) for r in rows if r["name"] == name])
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
                  overflow="fold", style="bold")
    for line in source_lines(src):
        console.print(line, markup=False, highlight=False, overflow="fold")
    if summary.get("filters"):
        console.print("Filtered: " + ", ".join(f"--{k} {v}" for k, v in summary["filters"].items()),
                      markup=False, highlight=False, overflow="fold", style="bold")
    tables = [phase_table(summary), targets_table(summary), *layer_tables(summary), latency_table(summary),
              latency_histogram_table(summary)]
    for table in tables:
        if table is not None:
            print_table(console, table)
    an = summary["anomalies"]
    if an["count"]:
        kinds = ", ".join(f"{k} x{v}" for k, v in an["by_kind"].items())
        console.print(f"Anomalies: {an['count']} ({kinds})", markup=False, overflow="fold")
    rec = summary["records"]
    line = f"Records: {rec['read']} read, {rec['skipped']} skipped"
    console.print(line, markup=False, overflow="fold")
    for ex in rec.get("skipped_examples", []):
        console.print(f"  skipped {ex}", markup=False, overflow="fold")
    for note in summary.get("notes", []):
        console.print(f"Note: {note}", markup=False, highlight=False, overflow="fold")


def layer_tables(summary: dict) -> list[Table]:
    """The layer's own tables, rendered from their JSON keys (btt's for block traces, SRT for
    the usb and kernel-log layers)."""
    from . import btt, srt
    renderers = {"block": btt.tables, "usb": srt.tables, "scsilog": srt.tables}
    render = renderers.get(summary.get("layer"))
    return render(summary) if render else []
