"""Convert a bus trace (ancot-text, VCD, QEMU trace...) once to Parquet for repeated analysis."""
from __future__ import annotations

from scsitrace import parsers
from scsitrace.errors import UsageError
from scsitrace.progress import progress_for


def add_arguments(p) -> None:
    from scsitrace.commands.analyze import add_input_arguments
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.parquet")


def run(args) -> int:
    from scsitrace.commands.analyze import parser_options
    from scsitrace.parsers import transitions_parquet
    with progress_for(args.trace) as progress:
        capture = parsers.parse(args.trace, args.format, strict=not args.lenient, progress=progress,
                                **parser_options(args))
        if capture.layer != "bus":
            raise UsageError(f"{args.trace}: convert writes bus transitions; this is a {capture.layer} trace")
        n = transitions_parquet.write(args.output, capture)
    print(f"{args.output}: {n} transitions ({capture.records.skipped} records skipped)")
    return 0
