"""Write TRACE's captured bus lines plus the decoding (phase, I/O number, command name, data
byte) as a VCD file, to open in GTKWave or PulseView next to the waveforms."""
from __future__ import annotations

import sys

from scsitrace import outputs
from scsitrace.errors import UsageError
from .analyze import add_input_arguments, load


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.vcd", help="the annotated VCD file to write")


def run(args) -> int:
    from scsitrace.reports import vcd_annotate
    analysis = load(args)
    if analysis.layer != "bus":
        raise UsageError(f"{args.trace}: annotate writes bus lines; this is a {analysis.layer}-layer trace")
    capture = analysis.capture
    signals = capture.meta.get("signals") or []
    handshake = "ACK" if "ACK" in signals else "REQ" if "REQ" in signals else None
    end_ns = analysis.start_ns + analysis.elapsed_ns
    with outputs.writing(args.output) as out:
        counts = vcd_annotate.write(out, capture.chunks(), analysis.segments, analysis.ios, signals=signals,
                                    invert_db=analysis.source.get("data_polarity") == "low", handshake=handshake,
                                    end_ns=end_ns, source=capture.path)
    print(f"{args.output}: {len(signals)} captured signals, {counts['changes']} line changes, "
          f"{counts['segments']} phase segments decoded",
          file=sys.stderr if outputs.is_stdout(args.output) else sys.stdout)
    return 0
