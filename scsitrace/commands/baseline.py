"""Save a trace's figures (phase shares, normalized and response times, bandwidth, IOPS,
attribution totals) and the options used, as the baseline that `scsitrace regress` checks.
With several traces, a directory, a glob or --manifest (or -o naming a directory), writes a
whole directory: OUT/<name>.baseline.json per trace, which `regress --baselines OUT` reads."""
from __future__ import annotations


from scsitrace.commands.analyze import add_input_options, load, request_of
from scsitrace.preflight import baseline_directory_mode as directory_mode
from scsitrace.request import STORED_OPTIONS, AnalysisRequest  # noqa: F401 (STORED_OPTIONS: its old home)


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
    p.add_argument("--lun", type=int, metavar="LUN", help="only this logical unit's I/Os (bus, usb, kernel logs)")


def current_figures(req: AnalysisRequest) -> dict:
    """Analyse the requested trace and return its baseline figures."""
    from scsitrace.batch import figures_of
    from scsitrace.reports import summary as summ
    from scsitrace.reports.attribution import Collector
    collector = Collector()
    analysis = load(req, tap=collector.tap)
    s = summ.summary(analysis, req.profile, req.target, req.io_size)
    return figures_of(analysis, s, collector, req.target)


def args_from(trace: str, options: dict | None) -> AnalysisRequest:
    """The request a baseline's stored options make (for `regress`)."""
    return AnalysisRequest.from_options(trace, options)


def run(args) -> int:
    from scsitrace.reports import regress
    if directory_mode(args):
        return run_directory(args)
    args.trace = args.trace[0]
    req = request_of(args)
    figs = current_figures(req)
    regress.write_baseline(args.output, regress.make_baseline(args.trace, req.stored_options(), figs, args.output))
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
