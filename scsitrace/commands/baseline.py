"""Save a trace's figures (phase shares, normalized and response times, bandwidth, IOPS,
attribution totals) and the options used, as the baseline that `scsitrace regress` checks.
With several traces, a directory, a glob or --manifest (or -o naming a directory), writes a
whole directory: OUT/<name>.baseline.json per trace, which `regress --baselines OUT` reads."""
from __future__ import annotations

import argparse
import glob
import os

from scsitrace.commands.analyze import add_input_options, load

# analysis options a baseline remembers, so `regress` analyses the new trace the same way
STORED_OPTIONS = ("format", "lenient", "settle_ns", "data_polarity", "map", "active_low", "io_size",
                  "profile", "target")


EXAMPLES = """examples:
  scsitrace baseline fixtures/captured/lsi_randread4k/qemu-trace.txt -o baseline.json
"""


def add_arguments(p) -> None:
    p.add_argument("trace", metavar="TRACE", nargs="*", help="trace (several, a directory or a glob: "
                   "write a directory of baselines)")
    add_input_options(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE|DIR/", help="baseline JSON to write "
                   "(a directory for several traces)")
    from scsitrace.commands.batch import add_common
    add_common(p)
    p.add_argument("--profile", default=None, help="category profile (default: the layer's)")
    p.add_argument("--target", type=int, metavar="ID", help="only this target's time and I/Os")


def current_figures(args) -> dict:
    """Analyse the trace named by args and return its figures."""
    from scsitrace.reports import summary as summ
    from scsitrace.reports.attribution import Collector
    collector = Collector()
    analysis = load(args, tap=collector.tap)
    s = summ.summary(analysis, args.profile, args.target, args.io_size)
    return figures_of(analysis, s, collector, args.target)


def figures_of(analysis, s: dict, collector, target: int | None) -> dict:
    """The baseline figures of an analysis and its summary (`collector` tapped its read)."""
    from scsitrace.reports import regress, views
    from scsitrace.reports.html import attribution_for
    attr = attribution_for(analysis, collector) if target is None else None
    return regress.figures(s, attr, views.completed_ios(analysis)["response_ns"].to_numpy())


def options_of(args) -> dict:
    return {k: getattr(args, k) for k in STORED_OPTIONS}


def args_from(trace: str, options: dict) -> argparse.Namespace:
    """The argument namespace `load` expects, from a baseline's stored options."""
    defaults = {"format": "auto", "lenient": False, "settle_ns": 400, "data_polarity": "auto", "map": [],
                "active_low": [], "io_size": None, "profile": None, "target": None}
    values = {**defaults, **{k: v for k, v in (options or {}).items() if k in defaults}}
    return argparse.Namespace(trace=trace, **values)


def directory_mode(args) -> bool:
    """Several traces, a directory, a glob, a manifest, or -o naming a directory."""
    return (len(args.trace) != 1 or bool(args.manifest) or os.path.isdir(args.trace[0])
            or (glob.has_magic(args.trace[0]) and not os.path.exists(args.trace[0]))
            or args.output.endswith(os.sep) or os.path.isdir(args.output))


def run(args) -> int:
    from scsitrace.reports import regress
    if directory_mode(args):
        return run_directory(args)
    args.trace = args.trace[0]
    figs = current_figures(args)
    regress.write_baseline(args.output, regress.make_baseline(args.trace, options_of(args), figs, args.output))
    print(f"wrote {args.output}: {len(figs)} figures of {args.trace}")
    return 0


def run_directory(args) -> int:
    """Baselines of many traces: OUT/<name>.baseline.json each."""
    from scsitrace import corpus
    from scsitrace.batch import exit_status
    from scsitrace.commands.batch import execute, inputs_of, report
    from scsitrace.errors import UsageError
    args.paths = args.trace
    inputs = inputs_of(args, figures=True)
    if not inputs.jobs:
        raise UsageError("no traces found")
    corpus.check_keys(inputs.jobs)
    results = execute(args, inputs.jobs)
    n = corpus.write_baselines(args.output, inputs.jobs, results)
    report(inputs.jobs, results, inputs.skipped, f"{n} baseline(s) in {args.output}")
    return exit_status(results)
