"""Check a trace against a baseline: baseline, current, delta and verdict per figure.
Exit 0 within tolerance, 1 regressed, 2 bad input. Defaults: phase shares +-1 point,
normalized and response times +-10 %, bandwidth and IOPS +-5 %; --tolerance overrides per
figure (NAME=VALUE, NAME a figure, a glob such as 'percent.*', or a kind: percent, time,
rate; VALUE absolute in the figure's unit or relative with '%'). Over a corpus: --baselines DIR
TRACE... (or --manifest, or DIR alone: every baseline in it) checks each trace against
DIR/<name>.baseline.json in one call, one line per trace and a total; --junit FILE writes one
JUnit test case per trace and figure."""
from __future__ import annotations

import json
import os
import sys

from rich.table import Table
from rich.text import Text

from scsitrace import outputs
from scsitrace.commands.baseline import args_from, current_figures
from scsitrace.commands.batch import add_common, execute
from scsitrace.errors import UsageError
from scsitrace.reports.terminal import console_for, fmt_ns, print_table

VERDICT_STYLE = {"ok": "green", "regressed": "bold red", "missing": "bold red", "improved": "cyan", "new": "yellow",
                 "stale": "yellow"}


EXAMPLES = """examples:
  scsitrace regress fixtures/captured/lsi_randread4k/baseline.json fixtures/captured/lsi_randread4k/qemu-trace.txt --junit regress.xml
"""


def add_arguments(p) -> None:
    p.add_argument("baseline", metavar="BASELINE", nargs="?",
                   help="baseline JSON (with --baselines DIR: the first trace to check)")
    p.add_argument("trace", metavar="TRACE", nargs="*",
                   help="trace to check (default: the one the baseline was made from)")
    p.add_argument("--baselines", metavar="DIR", help="check every TRACE (or the manifest's traces, or "
                   "every baseline in DIR) against DIR/<name>.baseline.json")
    p.add_argument("--junit", metavar="FILE", help="write JUnit XML: one test case per trace and figure")
    p.add_argument("--tolerance", action="append", default=[], metavar="NAME=VALUE",
                   help="override a tolerance (repeatable), e.g. percent=2, 'response_ns.*=20%%'")
    p.add_argument("--update", action="store_true", help="rewrite the baseline with the current figures")
    p.add_argument("--json", metavar="FILE|-", help="write the comparison rows as JSON")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")
    add_common(p, "analyse")


def run(args) -> int:
    from scsitrace.reports import regress
    tolerances = regress.parse_tolerances(args.tolerance)
    if args.baselines:
        return run_corpus(args, tolerances)
    if args.baseline is None:
        raise UsageError("name the BASELINE to check (or --baselines DIR for a corpus)")
    if len(args.trace) > 1 or args.manifest:
        raise UsageError("one baseline checks one trace; check many with --baselines DIR TRACE...")
    trace = args.trace[0] if args.trace else None
    doc = regress.read_baseline(args.baseline)
    trace = trace or os.path.join(os.path.dirname(os.path.abspath(args.baseline)), doc.get("trace", ""))
    current = current_figures(_request_of_baseline(args.baseline, trace, doc))
    if args.update:
        doc = regress.make_baseline(trace, doc.get("options") or {}, current, args.baseline)
        regress.write_baseline(args.baseline, doc)
        print(f"updated {args.baseline}: {len(current)} figures of {trace}")
        return 0
    rows = regress.compare(doc["figures"], current, tolerances)
    if args.json:
        text = json.dumps({"baseline": args.baseline, "trace": trace, "rows": rows}, indent=1)
        if args.json == "-":
            sys.stdout.write(text + "\n")
        else:
            with outputs.writing(args.json) as fh:
                fh.write(text + "\n")
    if args.json != "-":
        render(rows, trace, getattr(args, "width", None))
    if args.junit:
        from scsitrace.reports import junit
        junit.write(args.junit, [{"key": trace, "trace": trace, "rows": rows}])
    return 1 if regress.failed(rows) else 0


def _request_of_baseline(path: str, trace: str, doc: dict):
    """The request the baseline's stored options make; a bad one is bad input of the baseline."""
    from scsitrace.errors import BadInput
    from scsitrace.request import OptionError
    if getattr(doc.get("options"), "items", None) is None and doc.get("options") is not None:
        raise BadInput(path, "options must be a JSON object")
    try:
        return args_from(trace, doc.get("options"))
    except OptionError as exc:
        raise BadInput(path, f"options: {exc}") from None


def run_corpus(args, tolerances) -> int:
    """The gate over many traces: one line per trace and a total."""
    from scsitrace import corpus
    if args.update:
        raise UsageError("--update rewrites one baseline; rewrite a directory with scsitrace baseline ... -o DIR/")
    paths = ([args.baseline] if args.baseline else []) + list(args.trace)
    checks, jobs = corpus.regress_entries(args.baselines, paths, args.manifest, {},
                                          getattr(args, "allow_outside", False))
    results = execute(args, jobs)
    corpus.judge(checks, results, tolerances)
    if args.json != "-":
        corpus.print_checks(checks)
    if args.json:
        corpus.write_json(args.json, checks)
    if args.junit:
        from scsitrace.reports import junit
        junit.write(args.junit, checks)
    return corpus.exit_status(checks)


def fmt_value(kind: str, v) -> str:
    if v is None:
        return "-"
    if kind == "percent":
        return f"{v:.2f} %"
    if kind == "time":
        return fmt_ns(v)
    return f"{v:.3f}"


def render(rows: list[dict], trace: str, width: int | None = None) -> None:
    from scsitrace.inert import printable, printable_tree
    rows, trace = printable_tree(rows), printable(trace)
    console = console_for(width)
    t = Table(title=f"Regression check of {trace}", title_justify="left")
    t.add_column("Figure", no_wrap=True)
    for col in ("Baseline", "Current", "Delta", "Tolerance"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("Verdict", no_wrap=True)
    for r in rows:
        delta = r["delta"]
        shown = "-" if delta is None else ("+" if delta > 0 else "") + (
            f"{delta:.2f}" if r["kind"] == "percent" else fmt_ns(delta) if r["kind"] == "time" else f"{delta:.3f}")
        t.add_row(r["figure"], fmt_value(r["kind"], r["baseline"]), fmt_value(r["kind"], r["current"]), shown,
                  r["tolerance"], Text(r["verdict"], style=VERDICT_STYLE[r["verdict"]]))
    print_table(console, t)
    bad = [r["figure"] for r in rows if r["verdict"] in ("regressed", "missing")]
    better = [r["figure"] for r in rows if r["verdict"] == "improved"]
    stale = [r["figure"] for r in rows if r["verdict"] == "stale"]
    if stale:
        console.print(f"Note: {', '.join(stale)} of this baseline were interpolated (baselines before "
                      "2026-11-28); they now are the latency table's nearest-rank values and are not compared: "
                      "re-record with --update", markup=False)
    if bad:
        console.print(f"REGRESSED: {len(bad)} figure(s) outside tolerance: {', '.join(bad)}", markup=False)
    else:
        console.print("OK: every figure within tolerance", markup=False)
    if better:
        console.print(f"{len(better)} figure(s) improved beyond tolerance; run with --update to accept them",
                      markup=False)
