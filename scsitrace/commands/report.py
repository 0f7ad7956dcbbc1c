"""Write the HTML report of one trace: one self-contained file that works offline (summary,
phase and per-target tables, timeline, shares, response times, rates, attribution, bandwidth
views, anomalies). `analyze --html` writes the same page."""
from __future__ import annotations

import json
import sys

from scsitrace import outputs
from scsitrace.commands.analyze import add_input_arguments, load
from scsitrace.reports.attribution import Collector


EXAMPLES = """examples:
  scsitrace report fixtures/captured/lsi_randread4k/qemu-trace.txt -o report.html
  scsitrace report fixtures/captured/lsi_randread4k/qemu-trace.txt -o report.html --perfetto report.pftrace
"""


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the HTML file to write")
    p.add_argument("--profile", default=None, help="category profile (raid1990, scsi, or the layer's own)")
    p.add_argument("--target", type=int, metavar="ID", help="only this target's time and I/Os")
    p.add_argument("--lun", type=int, metavar="LUN", help="only this logical unit's I/Os (bus, usb, kernel logs)")
    p.add_argument("--stall-factor", type=float, default=5.0, metavar="K",
                   help="list I/Os slower than K x the median of their kind (default 5)")
    p.add_argument("--json", metavar="FILE|-", help="also write everything the page shows as JSON")
    p.add_argument("--perfetto", metavar="OUT.pftrace",
                   help="also write the Perfetto timeline (as `export --perfetto`), linked from the page")


def run(args) -> int:
    from scsitrace import bandwidth as views
    from scsitrace.reports import html, summary as summ
    collector = Collector()                  # attribution's pass, made while the trace is read
    analysis = load(args, tap=collector.tap, series=True)
    s = summ.summary(analysis, args.profile, args.target, args.io_size)
    if args.perfetto:
        from scsitrace.reports import perfetto, typed_export
        perfetto.write(args.perfetto, analysis, typed_export.ios_export(analysis))
    data = html.write_report(args.output, analysis, s, attribution=html.attribution_for(analysis, collector),
                             views=views.views(analysis, args.stall_factor), perfetto=args.perfetto)
    if args.json == "-":
        json.dump(data, sys.stdout, indent=1)
        sys.stdout.write("\n")
    elif args.json:
        with outputs.writing(args.json) as fh:
            json.dump(data, fh, indent=1)
            fh.write("\n")
    elif not outputs.is_stdout(args.output):
        print(f"wrote {args.output}")
    return 0
