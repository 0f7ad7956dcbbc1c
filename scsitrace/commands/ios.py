"""List TRACE's I/Os in order, one line each: time, device, command, LBA and blocks, status
(and sense), response time, bytes. The filters are analyze's, applied by the analysis. On a
terminal the list goes through $PAGER (less -FRX) unless --limit or --no-pager."""
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
    p.add_argument("--no-pager", action="store_true",
                   help="on a terminal, print the list as it is instead of through $PAGER (default less -FRX)")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")


class _Sink:
    """Options.ios_sink of the streaming layers: each batch listed as it comes, typed as
    `--ios` types it (device_id, the one vocabulary)."""

    def __init__(self, lister):
        self.lister, self.rows = lister, 0

    def __call__(self, batch, capture) -> None:
        from scsitrace.reports import typed_export
        self.rows += batch.height      # the layer applied the filters
        self.lister.add(typed_export.typed_ios(batch, capture.layer, capture.format))


def run(args) -> int:
    from scsitrace.errors import UsageError
    from scsitrace.reports import terminal
    if args.limit is not None and args.limit < 0:
        raise UsageError(f"--limit must be 0 or more, got {args.limit}")
    width = terminal.console_for(args.width).width
    pager = None if args.no_pager or args.limit is not None else _pager()
    out = pager.stdin if pager is not None else sys.stdout
    try:
        _list(args, out, width)
    except BrokenPipeError:           # the reader quit the pager: nothing more to show
        pass
    finally:
        if pager is not None:
            try:
                pager.stdin.close()
            except BrokenPipeError:
                pass
            pager.wait()
    return 0


def _pager():
    """$PAGER (default `less -FRX`: it exits at once when the list fits the screen) when
    standard output is a terminal, else None."""
    import os
    import shlex
    import shutil
    import subprocess
    if not sys.stdout.isatty():
        return None
    argv = shlex.split(os.environ.get("PAGER") or "less -FRX")
    if not argv or shutil.which(argv[0]) is None:
        return None
    return subprocess.Popen(argv, stdin=subprocess.PIPE, text=True, encoding="utf-8")


def _list(args, out, width: int) -> None:
    from scsitrace.reports import ios_list, typed_export
    lister = ios_list.Lister(out, width, args.limit)
    sink = _Sink(lister)
    analysis = load(args, ios_sink=sink)
    if analysis.ios_streamed:
        total = sink.rows
    else:
        ios = typed_export.ios_export(analysis)
        total = ios.height
        lister.add(ios)
    if lister.printed < total:
        out.write(f"first {lister.printed} of {total} I/Os (--limit)\n")
    elif total == 0:
        out.write("no I/O in the trace" + (" with these filters" if any(getattr(args, f) is not None
                                                                         for f in FILTERS) else "") + "\n")
