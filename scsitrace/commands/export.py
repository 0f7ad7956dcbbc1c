"""Export TRACE's analysis for another tool: --perfetto OUT writes a Perfetto trace (tracks
per device with every I/O, its stages, bus phases, queue depth and MB/s counters) to open
in ui.perfetto.dev. The filters are analyze's, applied by the analysis."""
from __future__ import annotations

from .analyze import load
from .ios import add_arguments as add_ios_arguments


EXAMPLES = """examples:
  scsitrace export fixtures/captured/lsi_randread4k/lsi_randread4k.blktrace.0 --perfetto trace.pftrace   (open it in ui.perfetto.dev)
"""


def add_arguments(p) -> None:
    add_ios_arguments(p, listing=False)
    p.add_argument("--perfetto", required=True, metavar="OUT.pftrace",
                   help="write a Perfetto trace (protobuf TrackEvent) of the I/Os, stages, phases and counters")


def run(args) -> int:
    from scsitrace.reports import perfetto, typed_export
    analysis = load(args, series=True)
    counts = perfetto.write(args.perfetto, analysis, typed_export.ios_export(analysis))
    print(f"{args.perfetto}: {counts['ios']} I/Os, {counts['stages']} stages, {counts['phases']} phases, "
          f"{counts['counters']} counter values")
    for note in analysis.notes:
        if "thinned" in note:       # a streaming layer kept every 2^k-th row past model.KEEP_IOS
            print(f"Note: {note}")
    return 0
