"""Write TRACE's captured bus lines plus the decoding (phase, I/O number, command name, data
byte) as a VCD file, to open in GTKWave or PulseView next to the waveforms.

The timescale is the capture's sample period (a power of ten at most that period), or the
largest power of ten dividing every time of an unsampled trace, or --timescale; so PulseView
makes as many samples as the capture has. Phases and command names are also one-bit lanes
PulseView keeps; --for pulseview leaves out the text variables it cannot read."""
from __future__ import annotations

import argparse
import re
import sys

import numpy as np

from scsitrace import outputs
from scsitrace.errors import UsageError
from .analyze import add_arguments as add_analyze_arguments
from .analyze import add_input_arguments, load

TIMESCALE = re.compile(r"^\s*(1|10|100)\s*(s|ms|us|ns)\s*$")
UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}


EXAMPLES = """examples:
  scsitrace annotate fixtures/bus/table3-l3/trace.ancot -o annotated.vcd   (GTKWave)
  scsitrace annotate capture.sr -o capture.vcd --window 0.9:1.0 --for pulseview
"""


def add_arguments(p) -> None:
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.vcd", help="the annotated VCD file to write")
    analyze_options = argparse.ArgumentParser(add_help=False)
    add_analyze_arguments(analyze_options)
    for action in analyze_options._actions:     # --window exactly as analyze declares it
        if action.dest == "window":
            p._add_action(action)
    p.add_argument("--timescale", metavar="1|10|100 s|ms|us|ns",
                   help="VCD time unit (default: the capture's sample period, rounded down to a power of ten)")
    p.add_argument("--for", dest="viewer", choices=("gtkwave", "pulseview"), default="gtkwave",
                   help="gtkwave (default): text variables for phase, I/O, command and byte, plus one-bit lanes; "
                        "pulseview: the one-bit lanes only (PulseView reads no text variable)")


def parse_timescale(text: str) -> int:
    m = TIMESCALE.match(text)
    if not m:
        raise UsageError(f"--timescale expects 1, 10 or 100 followed by s, ms, us or ns (as VCD has), got {text!r}")
    return int(m.group(1)) * UNIT_NS[m.group(2)]


def timescale_of(capture, segments) -> int:
    """The capture's resolution as a VCD timescale (see the module doc)."""
    from scsitrace.reports import vcd_annotate
    period = capture.meta.get("sample_period_ns")
    if period and capture.meta.get("sample_period_known", True):     # (Saleae CSV: estimated, not known)
        return vcd_annotate.power_of_ten_at_most(float(period))
    g = 0
    for chunk in capture.chunks():
        if chunk.height:
            g = int(np.gcd.reduce(np.append(chunk["t_ns"].to_numpy().astype(np.int64), g)))
    for col in ("start_ns", "end_ns"):
        if segments.height:
            g = int(np.gcd.reduce(np.append(segments[col].to_numpy().astype(np.int64), g)))
    return vcd_annotate.power_of_ten_dividing(g)


def run(args) -> int:
    from scsitrace.reports import vcd_annotate
    timescale = parse_timescale(args.timescale) if args.timescale else None
    analysis = load(args)
    if analysis.layer != "bus":
        raise UsageError(f"{args.trace}: annotate writes bus lines; this is a {analysis.layer}-layer trace")
    capture = analysis.capture
    timescale = timescale or timescale_of(capture, analysis.segments)
    signals = capture.meta.get("signals") or []
    handshake = "ACK" if "ACK" in signals else "REQ" if "REQ" in signals else None
    end_ns = analysis.start_ns + analysis.elapsed_ns
    with outputs.writing(args.output) as out:
        counts = vcd_annotate.write(out, capture.chunks(), analysis.segments, analysis.ios, signals=signals,
                                    invert_db=analysis.source.get("data_polarity") == "low", handshake=handshake,
                                    end_ns=end_ns, source=capture.path, timescale_ns=timescale,
                                    viewer=args.viewer)
    print(f"{args.output}: {len(signals)} captured signals, {counts['changes']} line changes, "
          f"{counts['segments']} phase segments decoded, timescale {vcd_annotate.timescale_text(timescale)}",
          file=sys.stderr if outputs.is_stdout(args.output) else sys.stdout)
    return 0
