"""List TRACE's I/Os in order, one line each: time, device, command, LBA and blocks, status
(and sense), response time, bytes. The filters are analyze's, applied by the analysis."""
from __future__ import annotations

import argparse
import sys

from .analyze import add_arguments as add_analyze_arguments
from .analyze import add_input_arguments, load

FILTERS = ("target", "lun", "device", "pid", "window")


EXAMPLES = """examples:
  scsitrace ios fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0 --limit 20
  scsitrace ios fixtures/captured/usb_bufread32k/usbmon.txt --window 0.01:0.05
"""


def add_arguments(p, listing: bool = True) -> None:
    add_input_arguments(p)
    analyze_options = argparse.ArgumentParser(add_help=False)
    add_analyze_arguments(analyze_options)
    for action in analyze_options._actions:     # the filters exactly as analyze declares them
        if action.dest in FILTERS:
            p._add_action(action)
    if not listing:
        return
    p.add_argument("--limit", type=int, metavar="N", help="list the first N I/Os only")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")


class _Sink:
    """Options.ios_sink of the streaming layers: each batch listed as it comes, typed as
    `--ios` types it (device_id)."""

    def __init__(self, lister, target):
        self.lister, self.target, self.rows = lister, target, 0

    def __call__(self, batch, capture) -> None:
        import polars as pl

        from scsitrace.reports import typed_export
        if self.target is not None and "target" in batch.columns:
            batch = batch.filter(pl.col("target") == self.target)
        self.rows += batch.height
        self.lister.add(batch.with_columns(typed_export.device_id(capture.layer, batch.columns)))


def run(args) -> int:
    from scsitrace.errors import UsageError
    from scsitrace.reports import ios_list, terminal, typed_export
    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit must be 0 or more, got {args.limit}")
    width = terminal.console_for(args.width).width
    lister = ios_list.Lister(sys.stdout, width, args.limit)
    sink = _Sink(lister, args.target)
    analysis = load(args, ios_sink=sink)
    if analysis.ios_streamed:
        total = sink.rows
    else:
        ios = typed_export.ios_export(analysis, args.target)
        total = ios.height
        lister.add(ios)
    if lister.printed < total:
        print(f"first {lister.printed} of {total} I/Os (--limit)")
    elif total == 0:
        print("no I/O in the trace" + (" with these filters" if any(getattr(args, f) is not None
                                                                     for f in FILTERS) else ""))
    return 0
