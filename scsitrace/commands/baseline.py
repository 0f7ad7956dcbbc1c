"""Save a trace's figures (phase shares, normalized and response times, bandwidth, IOPS,
attribution totals) and the options used, as the baseline that `scsitrace regress` checks."""
from __future__ import annotations

import argparse

from scsitrace.commands.analyze import add_input_arguments, load

# analysis options a baseline remembers, so `regress` analyses the new trace the same way
STORED_OPTIONS = ("format", "lenient", "settle_ns", "data_polarity", "map", "active_low", "io_size",
                  "profile", "target")


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="baseline JSON to write")
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


def run(args) -> int:
    from scsitrace.reports import regress
    figs = current_figures(args)
    regress.write_baseline(args.output, regress.make_baseline(args.trace, options_of(args), figs, args.output))
    print(f"wrote {args.output}: {len(figs)} figures of {args.trace}")
    return 0
