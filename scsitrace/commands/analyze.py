"""Analyze one trace: phase (or stage) table, per-target table, I/O table; JSON, CSV, HTML."""
from __future__ import annotations

from scsitrace import core, outputs, parsers, request
from scsitrace.request import DEFAULTS, AnalysisRequest
from scsitrace.command_sets import COMMAND_SETS


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
    p.add_argument("--format", default=DEFAULTS.format,
                   help="auto (default) or one of: " + ", ".join(parsers.formats()))
    p.add_argument("--lenient", action="store_true", help="skip bad records, count them, go on")
    p.add_argument("--settle-ns", type=int, default=None, metavar="NS",
                   help="line states shorter than this are skew, merged into the next phase "
                        f"(default {request.DEFAULT_SETTLE_NS}, or what the format asks for: qemu_lsi 0)")
    p.add_argument("--data-polarity", choices=request.DATA_POLARITIES, default=DEFAULTS.data_polarity,
                   help="DB lines as captured (high) or inverted (low); auto detects from selection IDs")
    p.add_argument("--map", action="append", default=[], metavar="NAME=SIGNAL",
                   help="VCD, sigrok, DSView, Saleae: use capture signal (probe) SIGNAL for bus line NAME (repeatable)")
    p.add_argument("--active-low", action="append", default=[], metavar="SIGNAL",
                   help="VCD, sigrok, DSView, Saleae: treat SIGNAL (or 'all') as active-low (repeatable)")
    p.add_argument("--io-size", type=int, metavar="BYTES", help="bytes per I/O, for bandwidth without REQ/ACK")
    p.add_argument("--command-set", choices=sorted(COMMAND_SETS), default=None, metavar="NAME",
                   help="bus: name the vendor opcodes of a device family: " + ", ".join(sorted(COMMAND_SETS)))


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
    p.add_argument("--route", choices=request.ROUTES, default=None,
                   help="usbmon pcap: decode natively (default) or through pyshark/tshark")
    p.add_argument("--device", metavar="DEVICE", help="only this device: block MAJ,MIN (8,0); usb BUS:ADDR or "
                   "BUS:ADDR:LUN (1:2:0); kernel logs HOST:CHANNEL:ID:LUN (2:0:0:0), or the name an sg log gives")
    p.add_argument("--lun", type=int, metavar="LUN", help="bus, usb, kernel logs: only this logical unit's I/Os")
    p.add_argument("--pid", metavar="PID[,PID|NAME...]", help="block, sg logs: only I/Os of these processes")
    p.add_argument("--window", metavar="START:END", help="only events between START and END seconds from the "
                   "trace start (either may be empty); every layer")
    p.add_argument("--btt-compat", action="store_true", help="block: pair events with requests as btt does "
                   "where requests in flight share sectors (docs/blktrace.md)")


def request_of(args, trace: str | None = None) -> AnalysisRequest:
    """The analysis request the command line makes (of `trace`, if given, instead of
    args.trace), checked; errors name the flags. Also checks --width where the command has it."""
    if getattr(args, "width", None) is not None:
        request.check_width(args.width)
    values = {k: getattr(args, k) for k in REQUEST_FLAGS if getattr(args, k, None) is not None}
    return AnalysisRequest(trace=trace if trace is not None else args.trace,
                           mapping=request.split_maps(getattr(args, "map", None)), **values)


# the request's fields a command line may give (mapping comes from --map)
REQUEST_FLAGS = ("format", "lenient", "profile", "target", "lun", "io_size", "window", "device", "pid",
                 "settle_ns", "data_polarity", "active_low", "route", "command_set", "btt_compat", "stall_factor")


def parser_options(args) -> dict:
    """The format-specific options given on the command line, as parse(**opts) takes them."""
    return request_of(args).parser_options()


def load(args, tap=None, ios_sink=None, series: bool | None = None, rows: bool = True):
    """core.run of the trace and options named on the command line -> Analysis; `series`
    (default: when the command writes an HTML page) builds the figures over time; `rows`:
    keep the per-I/O rows for the outputs that read them (core.Options)."""
    req = args if isinstance(args, AnalysisRequest) else request_of(args)
    if series is None:
        series = bool(getattr(args, "html", None)) or getattr(args, "command", None) == "report"
    return core.run(req, tap=tap, ios_sink=ios_sink, series=series, rows=rows)


def run(args) -> int:
    from scsitrace.reports import summary as summ
    req = request_of(args)          # every option checked before a file is opened
    collector = None
    if args.html:  # attribution's pass over the transitions rides along with the analysis' read
        from scsitrace.reports.attribution import Collector
        collector = Collector()
    sink = None
    if args.ios:   # streaming layers write the per-I/O rows as they are produced
        from scsitrace.reports import typed_export
        sink = typed_export.IosWriter(args.ios)
    try:
        try:
            analysis = load(req, tap=collector.tap if collector else None, ios_sink=sink,
                            series=bool(args.html), rows=_reads_rows(args))
        finally:
            if sink is not None:
                sink.close()
        s = summ.summary(analysis, args.profile, args.target, args.io_size, getattr(args, "lun", None))
        status = _report(args, analysis, sink, collector, s)
    except BaseException:   # a command that fails writes no --ios file, streamed or not
        if sink is not None:
            sink.discard()
        raise
    if sink is not None:
        sink.commit()
    return status


def _reads_rows(args) -> bool:
    """Whether an output of this run reads the per-I/O rows or busy runs (the terminal and
    --json render declared tables only)."""
    return bool(args.ios or args.segments or args.html or args.csv)


def _report(args, analysis, sink, collector, s: dict) -> int:
    from scsitrace.reports import terminal, export
    to_stdout = any(outputs.is_stdout(getattr(args, k)) for k in ("json", "csv", "ios", "segments", "html"))
    if not to_stdout:       # an output on standard output replaces the terminal tables
        terminal.render(s, terminal.console_for(args.width))
    if args.json:
        export.write_json(args.json, s)
    if args.csv:
        export.write_categories_csv(args.csv, s)
    if args.ios or args.segments:
        from scsitrace.reports import typed_export
        if args.ios and not (analysis.ios_streamed and sink.used):   # (streamed nothing: an empty table)
            typed_export.write(args.ios, typed_export.ios_export(analysis))
        if args.segments:
            typed_export.write(args.segments, typed_export.segments_export(analysis))
    if args.html:
        from scsitrace.reports import html
        html.write_report(args.html, analysis, s, attribution=html.attribution_for(analysis, collector))
    return 0
