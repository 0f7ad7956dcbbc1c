"""Histogram tables for the terminal: one bucket a row, its upper bound, its count and a bar
scaled to the largest count (shared by the summary's and the layers' own tables)."""
from __future__ import annotations

from rich.measure import Measurement
from rich.segment import Segment
from rich.table import Table

from .units import fmt_ns


class Bar:
    """A horizontal bar for `fraction` of its column: as wide as the column rich gives it
    (at most `widest` characters), at least one character when the fraction is not zero."""

    def __init__(self, fraction: float, widest: int = 30):
        self.fraction, self.widest = max(0.0, min(1.0, fraction)), widest

    def __rich_measure__(self, console, options):
        return Measurement(1, min(self.widest, options.max_width))

    def __rich_console__(self, console, options):
        width = min(self.widest, options.max_width)
        n = round(self.fraction * width)
        n = max(n, 1) if self.fraction > 0 else 0
        yield Segment("█" * n + " " * (width - n))


def histogram_rows(table: Table, name: str, buckets: list[tuple[object, int]]) -> None:
    """One row per bucket of `name` (its name on the first row only): upper bound, count, bar
    scaled to the largest count of this name. A section ends after each name."""
    top = max((count for _, count in buckets), default=0) or 1
    for i, (le_ns, count) in enumerate(buckets):
        bound = "inf" if le_ns is None else fmt_ns(le_ns)
        table.add_row(name if i == 0 else "", f"<= {bound}", str(count), Bar(count / top),
                      end_section=i == len(buckets) - 1)


def histogram_table(title: str, first: str) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column(first)
    t.add_column("Up to", justify="right")
    t.add_column("Count", justify="right")
    t.add_column("", header_style="")
    return t
