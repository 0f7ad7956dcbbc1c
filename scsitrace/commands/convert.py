"""Convert a trace once to Parquet: its canonical tables, for repeated analysis (bus
transitions, read back streamed as format transitions-parquet) or for other tools (block
events, USB URBs, kernel-log commands and events). The first table goes to OUT.parquet, the
others beside it as OUT.NAME.parquet; docs/schemas/ has every schema."""
from __future__ import annotations

from scsitrace import parsers
from scsitrace.errors import UsageError
from scsitrace.progress import progress_for


EXAMPLES = """examples:
  scsitrace convert fixtures/bus/table3-l3/trace.ancot -o transitions.parquet
"""


def add_arguments(p) -> None:
    from scsitrace.commands.analyze import add_input_arguments
    add_input_arguments(p)
    p.add_argument("-o", "--output", required=True, metavar="OUT.parquet", help="the Parquet file to write (the transitions, read back by analyze and the others)")


def run(args) -> int:
    from scsitrace import canonical_export
    from scsitrace.commands.analyze import parser_options
    if not args.output.lower().endswith(".parquet"):
        raise UsageError(f"-o {args.output}: convert writes Parquet; name the file *.parquet")
    with progress_for(args.trace) as progress:
        capture = parsers.parse(args.trace, args.format, strict=not args.lenient, progress=progress,
                                **parser_options(args))
        if capture.meta.get("not_this_format"):
            raise UsageError(capture.meta["not_this_format"])
        written = canonical_export.write(capture, args.output)
    what = "transitions" if capture.layer == "bus" else "rows"
    for path, n in written:
        print(f"{path}: {n} {what} ({capture.records.skipped} records skipped)" if path == written[0][0]
              else f"{path}: {n} {what}")
    return 0
