"""Before any work: every output of a command checked against its inputs (outputs.py
writes them; this module reads the command's arguments, so it sits with the CLI): an output
that names an input (same inode, a blktrace per-CPU sibling, a trace of the manifest, a trace
inside a dataset directory) or that cannot be written is refused, exit 2."""
from __future__ import annotations

import glob
import os
import re

from .errors import ScsitraceError
from .outputs import STDOUT, OutputError, check_output, is_stdout

def _identity(path: str):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def input_files(path) -> list[str]:
    """The files an input names: itself, or every per-CPU file of a blktrace capture."""
    path = str(path)
    if re.search(r"\.blktrace\.\d+$", path) or not os.path.exists(path):
        from scsitrace.parsers.blktrace import per_cpu_files
        return [f for f, _ in per_cpu_files(path)] + [path]
    return [path]


def check_outputs(outputs: dict, inputs=(), *, streams=(), directories=()) -> None:
    """Every output (flag -> path, None for not given) checked by check_output, then refused
    when it names an input file (same inode or same path; a blktrace input's per-CPU files
    count), or, for a directory output, when an input lies inside it; at most one output on
    standard output. `streams`: the flags that may be `-`; `directories`: dataset flags."""
    given = {flag: str(p) for flag, p in outputs.items() if p is not None}
    if not given:
        return
    to_stdout = [flag for flag, p in given.items() if is_stdout(p)]
    if len(to_stdout) > 1:
        raise OutputError(f"{' and '.join(to_stdout)} both name standard output (-); one may")
    files = [f for i in inputs if i is not None for f in input_files(i)]
    ids = {_identity(f): f for f in files if _identity(f) is not None}
    real = {os.path.realpath(f): f for f in files}
    for flag, path in given.items():
        check_output(path, flag, can_stream=flag in streams, directory=flag in directories)
        if is_stdout(path):
            continue
        named = ids.get(_identity(path)) or real.get(os.path.realpath(path)) or _capture_member(path, inputs)
        if named is not None:
            raise OutputError(f"{path}: {flag} names an input ({named}); writing it would destroy the input")
        if flag in directories:
            inside = _inside(path, files)
            if inside is not None:
                raise OutputError(f"{path}: {flag} holds an input ({inside}); the dataset replaces the "
                                  "directory, name another one")


_PER_CPU = re.compile(r"^(?P<base>.*)\.blktrace\.\d+$")


def _capture_member(path: str, inputs) -> str | None:
    """An input whose blktrace capture `path` would join (`x.blktrace.7` beside an input
    `x.blktrace.0` or `x`): the next read of the capture would take it for a CPU's file."""
    m = _PER_CPU.match(os.path.realpath(path))
    if not m:
        return None
    for i in inputs:
        if i is None:
            continue
        mi = _PER_CPU.match(os.path.realpath(str(i)))
        if os.path.realpath(mi.group("base") if mi else str(i)) == m.group("base"):
            return str(i)
    return None


def _inside(directory: str, files) -> str | None:
    root = os.path.realpath(directory) + os.sep
    return next((f for f in files if os.path.realpath(f).startswith(root)), None)


# ---------------------------------------------------------------- the commands' outputs

# argparse dest -> the flag as the user types it
FLAGS = {"json": "--json", "csv": "--csv", "ios": "--ios", "segments": "--segments", "html": "--html",
         "junit": "--junit", "output": "-o", "parquet": "--parquet", "perfetto": "--perfetto"}
# argparse dests that name inputs (a path or a list of them)
INPUTS = ("trace", "paths", "trace_a", "trace_b", "case_dir", "baseline", "manifest")
# command -> its outputs that may be `-` (CSV outputs only when not .parquet: see preflight)
STREAMS = {"analyze": {"json", "csv", "ios", "segments", "html"}, "annotate": {"output"},
           "attribute": {"json"}, "compare": {"json", "html"}, "crosslayer": {"json"},
           "regress": {"json", "junit"}, "report": {"json", "output"}, "baseline": {"output"},
           "simulate": {"csv"}}


def preflight(args) -> None:
    """The command's outputs checked against its inputs before any work (check_outputs)."""
    command = getattr(args, "command", None)
    outputs = {FLAGS[d]: getattr(args, d) for d in FLAGS if isinstance(getattr(args, d, None), str)}
    if command == "baseline" and baseline_directory_mode(args):
        outputs.pop("-o", None)          # a directory of baselines: corpus.write_baselines checks it
    streams = {FLAGS[d] for d in STREAMS.get(command, ())
               if not str(getattr(args, d, "") or "").lower().endswith(".parquet")}
    inputs = []
    for dest in INPUTS:
        value = getattr(args, dest, None)
        inputs += [value] if isinstance(value, str) else list(value or [])
    if not outputs:
        return
    inputs += _manifest_traces(args)
    check_outputs(outputs, [i for i in inputs if i != STDOUT], streams=streams,
                  directories={"-o"} if command == "batch" else ())


def _manifest_traces(args) -> list[str]:
    """The traces a --manifest names (outputs must not overwrite them either); a manifest that
    cannot be read is left to the command, which says why."""
    manifest = getattr(args, "manifest", None)
    if not manifest:
        return []
    from scsitrace.batch import read_manifest
    try:
        return [path for path, *_ in read_manifest(manifest, allow_outside=True)]
    except ScsitraceError:
        return []


def baseline_directory_mode(args) -> bool:
    """`baseline` writes a directory: several traces, a directory, a glob, a manifest, or -o
    naming a directory (here, so that this module imports no command)."""
    return (len(args.trace) != 1 or bool(args.manifest) or os.path.isdir(args.trace[0])
            or (glob.has_magic(args.trace[0]) and not os.path.exists(args.trace[0]))
            or args.output.endswith(os.sep) or os.path.isdir(args.output))
