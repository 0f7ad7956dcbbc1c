"""Two traces side by side (before/after: BFR 512 vs 16 KB, two kernels): every figure the
regression gate checks, in A and B, with B - A and B / A; --html writes both reports'
tables next to each other with overlaid plots. Both traces are read with the same options."""
from __future__ import annotations

import argparse
import json
import sys

from rich.table import Table

from scsitrace import outputs
from scsitrace.commands.analyze import add_input_arguments, load
from scsitrace.commands.regress import fmt_value
from scsitrace.errors import UsageError


class _WithoutTrace:
    """Lends add_input_arguments' options to a parser that has two traces instead of one."""

    def __init__(self, parser):
        self.parser = parser

    def add_argument(self, *names, **kw):
        if names == ("trace",):
            return None
        return self.parser.add_argument(*names, **kw)


EXAMPLES = """examples:
  scsitrace compare fixtures/captured/lsi_seqread32k/ftrace.txt fixtures/captured/lsi_randread4k/ftrace.txt --html compare.html
"""


def add_arguments(p) -> None:
    p.add_argument("trace_a", metavar="A", help="the 'before' trace")
    p.add_argument("trace_b", metavar="B", help="the 'after' trace")
    add_input_arguments(_WithoutTrace(p))
    p.add_argument("--profile", default=None, help="category profile (default: the layer's)")
    p.add_argument("--html", metavar="FILE", help="write the side-by-side HTML page")
    p.add_argument("--json", metavar="FILE|-", help="write the compared figures as JSON")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")


def _one(args, trace):
    from scsitrace.reports import html, summary as summ
    from scsitrace.reports.attribution import Collector
    ns = argparse.Namespace(**{**vars(args), "trace": trace})
    collector = Collector()
    analysis = load(ns, tap=collector.tap)
    s = summ.summary(analysis, args.profile, None, args.io_size)
    return analysis, html.report_data(analysis, s, attribution=html.attribution_for(analysis, collector))


def run(args) -> int:
    from scsitrace.reports import compare
    a, data_a = _one(args, args.trace_a)
    b, data_b = _one(args, args.trace_b)
    if a.layer != b.layer:  # their figures have different names: no row would pair up
        raise UsageError(f"{args.trace_a} is a {a.layer} trace ({a.capture.format}) and {args.trace_b} "
                         f"a {b.layer} trace ({b.capture.format}): compare takes two traces of one layer")
    if args.html:
        comp = compare.write_compare(args.html, a, data_a, b, data_b)
    else:
        comp = compare.comparison(a, data_a, b, data_b)
    if args.json:
        text = json.dumps(comp, indent=1)
        if args.json == "-":
            sys.stdout.write(text + "\n")
            return 0
        with outputs.writing(args.json) as fh:
            fh.write(text + "\n")
    if outputs.is_stdout(args.html):
        return 0
    render(comp, getattr(args, "width", None))
    return 0


def render(comp: dict, width: int | None = None) -> None:
    from scsitrace.inert import printable_tree
    comp = printable_tree(comp)
    t = Table(title=f"A = {comp['a']}\nB = {comp['b']}", title_justify="left")
    t.add_column("Figure", no_wrap=True)
    for col in ("A", "B", "B - A", "B / A"):
        t.add_column(col, justify="right", no_wrap=True)
    for r in comp["rows"]:
        d = r["delta"]
        delta = "" if d is None else ("+" if d > 0 else "") + (
            f"{d:.2f}" if r["kind"] == "percent" else fmt_value(r["kind"], d))
        t.add_row(r["figure"], fmt_value(r["kind"], r["a"]), fmt_value(r["kind"], r["b"]), delta,
                  "" if r["ratio"] is None else f"{r['ratio']:.3f}")
    from scsitrace.reports.terminal import console_for, print_table
    print_table(console_for(width), t)
