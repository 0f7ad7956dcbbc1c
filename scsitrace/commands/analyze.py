"""Analyze one trace: phase (or stage) table, per-target table, I/O table; JSON, CSV, HTML."""
from __future__ import annotations

import json
import os
import sys

from scsitrace import core, parsers
from scsitrace.errors import UsageError


EXAMPLES = """examples:
  scsitrace analyze fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0
  scsitrace analyze fixtures/captured/lsi_randread4k/qemu-trace.txt --profile scsi --json summary.json --ios ios.parquet
  scsitrace analyze fixtures/captured/lsi_randread4k/ftrace.txt --window 0.1:0.5 --width 80
"""


def add_input_arguments(p) -> None:
    """Options shared by every command that reads a trace."""
    p.add_argument("trace", metavar="TRACE", help="the trace file: a bus capture (ancot, VCD, sigrok .sr, DSView "
                   ".dsl, Saleae CSV, QEMU LSI trace), blktrace or blkparse output, usbmon text or pcap, a kernel "
                   "log (ftrace, dmesg, SG_IO strace or sg3_utils output); the format is detected (--format to name it)")
    add_input_options(p)


def add_input_options(p) -> None:
    """The options of add_input_arguments without the TRACE argument (batch takes many)."""
    p.add_argument("--format", default="auto", help="auto (default) or one of: " + ", ".join(parsers.formats()))
    p.add_argument("--lenient", action="store_true", help="skip bad records, count them, go on")
    p.add_argument("--settle-ns", type=int, default=None, metavar="NS",
                   help="line states shorter than this are skew, merged into the next phase "
                        "(default 400, or what the format asks for: qemu_lsi 0)")
    p.add_argument("--data-polarity", choices=("auto", "high", "low"), default="auto",
                   help="DB lines as captured (high) or inverted (low); auto detects from selection IDs")
    p.add_argument("--map", action="append", default=[], metavar="NAME=SIGNAL",
                   help="VCD, sigrok, DSView, Saleae: use capture signal (probe) SIGNAL for bus line NAME (repeatable)")
    p.add_argument("--active-low", action="append", default=[], metavar="SIGNAL",
                   help="VCD, sigrok, DSView, Saleae: treat SIGNAL (or 'all') as active-low (repeatable)")
    p.add_argument("--io-size", type=int, metavar="BYTES", help="bytes per I/O, for bandwidth without REQ/ACK")


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("--profile", default=None, help="how time is grouped: bus raid1990 (default, the RAID-I "
                   "report's categories) or scsi (raw phases); block btt (stages); usb usb; kernel logs scsilog "
                   "(each layer's only profile is its default)")
    p.add_argument("--target", type=int, metavar="ID", help="bus: only this target's time and I/Os (other "
                   "targets' bus time shown as such); kernel logs: only this SCSI target ID")
    p.add_argument("--width", type=int, metavar="COLUMNS", help="width of the terminal output (default: the "
                   "terminal's; piped: $COLUMNS, else 80)")
    p.add_argument("--json", metavar="FILE|-", help="write the JSON summary")
    p.add_argument("--csv", metavar="FILE", help="write the category table as CSV")
    p.add_argument("--ios", metavar="FILE", help="write the per-I/O table: Parquet if FILE ends in .parquet, else CSV")
    p.add_argument("--segments", metavar="FILE", help="write the time segments (phases or stages): "
                   "Parquet if FILE ends in .parquet, else CSV")
    p.add_argument("--html", metavar="FILE", help="write the HTML report")
    p.add_argument("--route", choices=("native", "pyshark"), default=None,
                   help="usbmon pcap: decode natively (default) or through pyshark/tshark")
    p.add_argument("--device", metavar="DEVICE", help="only this device: block MAJ,MIN (8,0); usb BUS:ADDR or "
                   "BUS:ADDR:LUN (1:2:0); kernel logs HOST:CHANNEL:ID:LUN (2:0:0:0), or the name an sg log gives")
    p.add_argument("--lun", type=int, metavar="LUN", help="bus, usb, kernel logs: only this logical unit's I/Os")
    p.add_argument("--pid", metavar="PID[,PID|NAME...]", help="block, sg logs: only I/Os of these processes")
    p.add_argument("--window", metavar="START:END", help="only events between START and END seconds from the "
                   "trace start (either may be empty); every layer")


def parser_options(args) -> dict:
    """The format-specific options given on the command line, as parse(**opts) takes them."""
    opts = {}
    if args.map:
        opts["mapping"] = dict(_split_map(m) for m in args.map)
    if args.active_low:
        opts["active_low"] = list(args.active_low)
    if getattr(args, "route", None) is not None:
        opts["route"] = args.route
    return opts


def load(args, tap=None, ios_sink=None):
    """core.load of the trace and options named on the command line -> Analysis."""
    return core.load(args.trace, args.format, strict=not args.lenient, settle_ns=args.settle_ns,
                     data_polarity=args.data_polarity, io_size=args.io_size,
                     window=getattr(args, "window", None), device=getattr(args, "device", None),
                     pid=getattr(args, "pid", None), target=getattr(args, "target", None),
                     lun=getattr(args, "lun", None), tap=tap, ios_sink=ios_sink, **parser_options(args))


def _split_map(item: str):
    name, sep, signal = item.partition("=")
    if not sep or not name or not signal:
        raise UsageError(f"--map expects NAME=SIGNAL, got {item!r}")
    return name, signal


def run(args) -> int:
    from scsitrace.reports import summary as summ
    collector = None
    if args.html:  # attribution's pass over the transitions rides along with the analysis' read
        from scsitrace.reports.attribution import Collector
        collector = Collector()
    sink = None
    if args.ios:   # streaming layers write the per-I/O rows as they are produced
        from scsitrace.reports import typed_export
        sink = typed_export.IosWriter(args.ios, args.target)
    try:
        analysis = load(args, tap=collector.tap if collector else None, ios_sink=sink)
    except BaseException:
        _discard(sink, args.ios)
        raise
    finally:
        if sink is not None:
            sink.close()
    try:
        s = summ.summary(analysis, args.profile, args.target, args.io_size, getattr(args, "lun", None))
    except BaseException:   # a command that fails here writes no --ios file, streamed or not
        _discard(sink, args.ios)
        raise
    return _report(args, analysis, sink, collector, s)


def _discard(sink, path) -> None:
    """Remove what a streaming layer already wrote to --ios, when the command fails."""
    if sink is not None and sink.used:
        try:
            os.remove(path)
        except OSError:
            pass


def _report(args, analysis, sink, collector, s: dict) -> int:
    from scsitrace.reports import terminal, export
    if args.json == "-":
        json.dump(s, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        terminal.render(s, terminal.console_for(args.width))
        if args.json:
            export.write_json(args.json, s)
    if args.csv:
        export.write_categories_csv(args.csv, s)
    if args.ios or args.segments:
        from scsitrace.reports import typed_export
        if args.ios and not (analysis.ios_streamed and sink.used):   # (streamed nothing: an empty table)
            typed_export.write(args.ios, typed_export.ios_export(analysis, args.target))
        if args.segments:
            typed_export.write(args.segments, typed_export.segments_export(analysis, args.target))
    if args.html:
        from scsitrace.reports import html
        html.write_report(args.html, analysis, s, attribution=html.attribution_for(analysis, collector))
    return 0
