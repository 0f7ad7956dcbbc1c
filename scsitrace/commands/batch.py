"""Analyse many traces into one Parquet dataset: summary.parquet (one row per trace), the
long tables categories, stages, srt, targets, devices (keyed by trace_id), and ios/
partitioned by trace. PATH is a trace, a directory (walked recursively; files that are not
traces are listed as skipped) or a glob; --manifest FILE.toml lists traces with their own
options and labels. Traces run in --jobs worker processes, or on a Dask cluster with
--scheduler. A bad trace, a crash or a time-out gives that trace's row with the reason and
the rest goes on. Exit 0 every trace analysed, 2 some inputs bad or timed out, 1 internal
error (a trace crashed its worker or hit a bug)."""
from __future__ import annotations

import os
import sys

from scsitrace.commands.analyze import add_input_options
from scsitrace import interrupts, outputs, preflight
from scsitrace.errors import ScsitraceError, UsageError


EXAMPLES = """examples:
  scsitrace batch fixtures/captured -o dataset/ --jobs 2
"""


def add_common(p, what: str = "analyse") -> None:
    """Inputs and where they run: shared by batch, baseline (to a directory) and regress."""
    p.add_argument("--manifest", metavar="FILE.toml", help="traces with per-trace options and labels "
                   "([[trace]] path = ..., format, io_size, profile, device, pid, window, labels = {...})")
    p.add_argument("--allow-outside", action="store_true",
                   help="let --manifest name traces outside its own directory tree (refused by default)")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help=f"worker processes that {what} the traces (default: the number of CPUs; "
                        "0: in this process, without time limits)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECONDS", help="time limit per trace")
    p.add_argument("--scheduler", metavar="ADDRESS", help="run on the Dask cluster whose scheduler is at "
                   "ADDRESS (tcp://host:8786); needs pip install 'scsitrace[dask]'")


def add_arguments(p) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="trace, directory or glob (quoted)")
    p.add_argument("-o", "--output", required=True, metavar="OUT/", help="dataset directory to write")
    add_common(p)
    add_input_options(p)
    p.add_argument("--profile", default=None, help="category profile for every trace (default: each layer's)")
    p.add_argument("--target", type=int, metavar="ID", help="only this target's time and I/Os")
    p.add_argument("--lun", type=int, metavar="LUN", help="only this logical unit's I/Os (bus, usb, kernel logs)")
    p.add_argument("--device", metavar="MAJ,MIN", help="block layer: only this device")
    p.add_argument("--pid", metavar="PID[,PID|NAME...]", help="block layer: only these processes' I/Os")
    p.add_argument("--window", metavar="START:END", help="block layer: only events in this window (s)")


def default_options(args) -> dict:
    """The per-trace options given on the command line (defaults for every trace), checked
    as `analyze` checks them."""
    from scsitrace.commands.analyze import request_of
    from scsitrace.request import OPTION_KEYS
    request_of(args, trace="")
    # `is` tests: a target or size of 0 is given (0 == False would drop it)
    out = {k: v for k in OPTION_KEYS if (v := getattr(args, k, None)) is not None and v is not False and v != []}
    if out.get("format") == "auto":
        del out["format"]
    return out


def inputs_of(args, figures: bool = False):
    from scsitrace import request
    from scsitrace.batch import collect
    request.check_run(args.jobs, args.timeout, args.scheduler)    # before anything is read or written
    if not args.paths and not args.manifest:
        raise UsageError("name at least one trace, directory or glob, or --manifest FILE.toml")
    inputs = collect(args.paths, args.manifest, default_options(args), exclude=args.output,
                     allow_outside=getattr(args, "allow_outside", False))
    for job in inputs.jobs:
        job.figures = figures
    return inputs


def execute(args, jobs, on_result=None) -> list[dict]:
    """Run the jobs where the arguments say (local workers or Dask), with a progress bar."""
    from scsitrace import pool, request
    request.check_run(args.jobs, args.timeout, args.scheduler)
    if not jobs:
        return []
    with Bar(len(jobs)) as bar:
        def done(result):
            bar.advance(result)
            if on_result is not None:
                on_result(result)
        if args.scheduler:
            return pool.run_dask(args.scheduler, jobs, args.timeout, done)
        if args.jobs == 0:
            return pool.run_inline(jobs, done)
        n = args.jobs or len(os.sched_getaffinity(0))
        return pool.run_local(jobs, n, args.timeout, done)


class Bar:
    """A progress bar on a terminal (stderr); nothing in pipes or CI logs."""

    def __init__(self, total: int):
        self.total = total
        self.bar = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn, TimeRemainingColumn
            self.bar = Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TimeRemainingColumn(), transient=True,
                                console=Console(stderr=True))
            self.bar.__enter__()
            self.task = self.bar.add_task("traces", total=self.total)
        return self

    def advance(self, result: dict) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, 1)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.__exit__(*exc)


def report(jobs, results, skipped, what: str) -> None:
    """One line per trace that did not succeed, the skipped files, and the totals."""
    from scsitrace.inert import printable
    by_id = {j.trace_id: j for j in jobs}
    for r in results:
        if r["status"] != "ok":
            print(printable(f"{r['status']:8} {by_id[r['trace_id']].path}: {r['error']}"))
    for path, why in skipped:
        print(printable(f"skipped  {path}: {why}"))
    counts = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    parts = ", ".join(f"{n} {s}" for s, n in counts.items())
    print(f"{len(results)} trace(s) -> {what}: {parts or 'none'}; {len(skipped)} file(s) skipped")


def run(args) -> int:
    from scsitrace.batch import exit_status
    from scsitrace.reports.dataset import DatasetWriter
    inputs = inputs_of(args)
    if not inputs.jobs:
        raise UsageError("no traces found" + (f" ({len(inputs.skipped)} file(s) skipped, none a trace)"
                                               if inputs.skipped else ""))
    by_id = {j.trace_id: j for j in inputs.jobs}
    preflight.check_outputs({"-o": args.output}, [j.path for j in inputs.jobs if os.path.exists(j.path)],
                          directories={"-o"})      # a manifest's trace inside the dataset to replace
    writer = DatasetWriter(args.output)
    done: list[dict] = []
    stopped = None

    def add(result: dict) -> None:
        with interrupts.deferred():         # a result is in the dataset whole or not at all
            writer.add(by_id[result["trace_id"]], result)
            done.append(result)
    try:
        try:
            results = execute(args, inputs.jobs, add)
        except KeyboardInterrupt as exc:    # SIGINT/SIGTERM: the dataset of what finished, marked
            stopped = exc
            results = interrupted(inputs.jobs, done, exc, writer)
        with interrupts.deferred():
            writer.close(inputs.skipped)
    except BaseException as exc:     # the older dataset, if any, stays whole
        writer.abort()
        if isinstance(exc, Exception) and not isinstance(exc, ScsitraceError) and outputs.is_write_failure(exc):
            raise outputs.write_error(args.output, exc) from None
        raise
    report(inputs.jobs, results, inputs.skipped, args.output)
    return interrupts.exit_status(stopped) if stopped is not None else exit_status(results)


def interrupted(jobs, done: list[dict], exc: KeyboardInterrupt, writer) -> list[dict]:
    """The results of a batch stopped by a signal: those that finished, and for every other
    trace a row with status `interrupted` (the dataset says it is incomplete, trace by trace)."""
    from scsitrace.batch import failed_result
    have = {r["trace_id"]: r for r in done}
    name = getattr(exc, "args", None) and exc.args[0] or "SIGINT"
    for job in jobs:
        if job.trace_id not in have:
            have[job.trace_id] = failed_result(job, "interrupted", f"the batch was stopped ({name}) "
                                                                   "before this trace finished")
            writer.add(job, have[job.trace_id])
    return [have[j.trace_id] for j in jobs]
