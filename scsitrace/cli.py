"""The `scsitrace` command. Exit statuses: 0 ok, 1 internal error (or regression, for
`regress`), 2 bad input or usage, printed as one line without a traceback."""
from __future__ import annotations

import argparse
import gc
import os
import sys
from importlib import import_module

from . import __version__, heap, interrupts, preflight
from .errors import ScsitraceError

# name -> (module under scsitrace.commands, one-line help); explicit, no import magic
COMMANDS = {
    "analyze": ("analyze", "phase/stage tables, I/O table, JSON/CSV/HTML from one trace"),
    "ios": ("ios", "the I/Os in order, one line each: time, device, command, LBA, status, response, bytes"),
    "export": ("export", "the analysis for another tool: --perfetto writes a Perfetto trace (I/Os, stages, phases, counters)"),
    "compare": ("compare", "two traces side by side (terminal and HTML), for before/after studies"),
    "regress": ("regress", "check a trace against a baseline: exit 0 ok, 1 regressed, 2 bad input"),
    "baseline": ("baseline", "save a trace's figures as the baseline for regress"),
    "convert": ("convert", "store a bus trace's transitions as Parquet, for repeated analysis"),
    "annotate": ("annotate", "write the captured lines plus the decoded phases, I/Os, commands and bytes as VCD"),
    "report": ("report", "self-contained HTML report of one trace (plots, tables, attribution, views)"),
    "attribute": ("attribute", "who made each pause: target, initiator or neither (Table 11 form)"),
    "crosslayer": ("crosslayer", "one captured case: each I/O at block, SCSI, USB and bus level side by side"),
    "batch": ("batch", "many traces (files, directories, globs, a manifest) into one Parquet dataset"),
    "simulate": ("simulate", "simulate a SCSI string (RAID-I Table 3 defaults): bus trace + ground truth"),
}


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line, like every other error (exit 2); --help has the usage."""

    def error(self, message: str):
        self.exit(2, f"scsitrace: {self.prog.removeprefix('scsitrace').strip() + ': ' if self.prog != 'scsitrace' else ''}"
                     f"{one_line(message)} (see {self.prog} --help)\n")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser. With `only`, only that command has its module imported and its arguments
    (some modules pull in plotly and the attribution passes); every command is listed."""
    parser = OneLineParser(
        prog="scsitrace", description="Offline SCSI trace analyzer: where the time goes on a SCSI bus, in the\n"
        "block layer, on USB storage and in kernel logs.",
        epilog="examples:\n  scsitrace analyze TRACE        tables of where the time goes\n"
               "  scsitrace ios TRACE            the I/Os one line each\n"
               "  scsitrace COMMAND --help       a command's options and examples\n\n"
               "Exit status: 0 ok; 1 internal error (regress: a figure regressed); 2 bad input or usage.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"scsitrace {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks of internal errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (mod_name, help_text) in COMMANDS.items():
        if only not in (None, name):
            sub.add_parser(name, help=help_text)
            continue
        mod = import_module(f"{__package__}.commands.{mod_name}")
        p = sub.add_parser(name, help=help_text, description=(mod.__doc__ or help_text).strip(),
                           epilog=getattr(mod, "EXAMPLES", None), formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _command_in(argv: list[str]) -> str | None:
    """The command the arguments name (the first one that is not an option), if it is one."""
    first = next((arg for arg in argv if not arg.startswith("-")), None)
    return first if first in COMMANDS else None


# The garbage collector's thresholds for the command's process. Start-up leaves about
# 50 000 long-lived containers (numpy, polars, rich, our modules) for the collector to walk,
# and with the default first threshold (700) it walks them again and again: about 4 % of a
# small trace's run. Cyclic garbage is still collected, after 100 000 allocations, not 700.
COMMAND_GC_THRESHOLDS = (100_000, 20, 10)


def console() -> int:
    """The `scsitrace` console script: main() in a process of its own. The collector runs
    less often (COMMAND_GC_THRESHOLDS), and what is alive at the end is frozen, so the
    interpreter's exit frees it without walking it once more (another 5 %). Library and test
    callers of main() keep the collector as it is."""
    gc.set_threshold(*COMMAND_GC_THRESHOLDS)
    try:
        return main()
    finally:
        gc.freeze()


def main(argv: list[str] | None = None) -> int:
    heap.keep_freed_memory()            # before any import starts a thread (see heap.py)
    # numpy's OpenBLAS starts a thread pool at import (0.1 s of a 0.5 s small-trace run here);
    # nothing of ours multiplies matrices. A user's own setting stands.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = build_parser(_command_in(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(argv)
    try:
        if getattr(args, "width", None) is not None:     # every command with tables takes --width
            from .request import check_width
            check_width(args.width)
        preflight.preflight(args)       # outputs checked against the inputs before any work
        with interrupts.stopping_cleanly():
            return int(args._run(args) or 0)
    except ScsitraceError as exc:
        print(f"scsitrace: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_status
    except FileNotFoundError as exc:
        print(f"scsitrace: {one_line(str(exc.filename or exc.strerror))}: no such file", file=sys.stderr)
        return 2
    except IsADirectoryError as exc:
        print(f"scsitrace: {one_line(str(exc.filename))}: is a directory", file=sys.stderr)
        return 2
    except PermissionError as exc:
        print(f"scsitrace: {one_line(str(exc.filename))}: permission denied", file=sys.stderr)
        return 2
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # any other failure to open or read a file (a symlink loop, EIO...)
        if exc.filename is not None:
            print(f"scsitrace: {one_line(str(exc.filename))}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        return _internal(exc, args)
    except KeyboardInterrupt as exc:    # SIGINT 130, SIGTERM 143 (interrupts.py), after every cleanup
        return interrupts.exit_status(exc)
    except Exception as exc:  # an internal error: one line unless --debug
        return _internal(exc, args)


def _internal(exc: Exception, args) -> int:
    if args.debug:
        raise exc
    print(f"scsitrace: internal error: {type(exc).__name__}: {one_line(str(exc))} (rerun with --debug)",
          file=sys.stderr)
    return 1


def one_line(text: str) -> str:
    """The error contract's one line: a message that spans lines (a library's) is joined;
    control characters (a terminal escape in a file name or a record) shown escaped."""
    from .inert import printable
    return printable(" / ".join(part.strip() for part in text.splitlines() if part.strip()))


if __name__ == "__main__":
    sys.exit(console())
