"""Many traces at once: what to analyse (paths, directories, globs, a TOML manifest) and the
work done for one trace, wherever it runs (a local worker process or a Dask worker).

`trace_result(job)` is the one call into the analysis: the same `load` and `summary` that
`scsitrace analyze` uses, returning the JSON summary, the per-I/O table and (for baselines
and the regression gate) the figures. `run_job(job)` wraps it so that no input, however bad,
escapes as an exception: every job comes back as a result dict with a status.

This module imports only the standard library at the top: a worker process must set up the
heap (scsitrace.heap) before numpy is imported.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
import time
import tomllib
from dataclasses import dataclass, field

from .errors import BadInput, ScsitraceError, UsageError
from .inert import printable
from .request import OPTION_KEYS, AnalysisRequest, OptionError

# per-trace options a manifest (or the command line, for every trace) may give: OPTION_KEYS
MANIFEST_KEYS = set(OPTION_KEYS) | {"path", "labels"}
STATUSES = ("ok", "bad", "timeout", "crashed", "error")   # bad input, time limit, worker died, internal


@dataclass
class Job:
    """One trace to analyse. `key` names it relative to the input it came from (a directory
    argument, a manifest), which is also its baseline's name in a baselines directory."""

    trace_id: int
    path: str
    key: str
    options: dict = field(default_factory=dict)
    labels: dict = field(default_factory=dict)
    figures: bool = False            # also compute the regression figures (baseline, regress)
    detected: str | None = None      # format found by the directory walk (used when format is auto)


@dataclass
class Inputs:
    jobs: list[Job]
    skipped: list[tuple[str, str]]   # (path, why): files met in a directory that are not traces


# ------------------------------------------------------------------ collecting the inputs

def collect(paths: list[str], manifest: str | None = None, defaults: dict | None = None,
            exclude: str | None = None, allow_outside: bool = False) -> Inputs:
    """Jobs for the PATH arguments (traces, directories walked recursively, globs) and the
    manifest's entries, in that order; `defaults` are options for every trace (the manifest's
    own entries override them). The walk leaves out `exclude` (the output directory) and
    hidden directories (.git, ...)."""
    defaults = {k: v for k, v in (defaults or {}).items() if v is not None}
    found: list[tuple] = []          # (path, key, options, labels, detected format)
    skipped: list[tuple[str, str]] = []
    for arg in paths:
        for path in _expand(arg):
            if os.path.isdir(path):
                for p, key, fmt in _walk(path, skipped, exclude):
                    found.append((p, key, dict(defaults), {}, fmt))   # detected once, not again
            else:
                found.append((path, os.path.basename(path.rstrip(os.sep)) or path, dict(defaults), {}, None))
    if manifest:
        for path, key, opts, labels in read_manifest(manifest, allow_outside):
            found.append((path, key, {**defaults, **opts}, labels, None))
    jobs = [Job(i, p, k, o, lab, detected=fmt) for i, (p, k, o, lab, fmt) in enumerate(found)]
    return Inputs(jobs, skipped)


def is_url(path: str) -> bool:
    """An fsspec URL (s3://bucket/trace, https://..., file:///...): fetched by the worker."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path) is not None


def _expand(arg: str) -> list[str]:
    """A glob pattern that names no file itself -> its matches (sorted); else the argument."""
    if is_url(arg):
        return [arg]
    if glob.has_magic(arg) and not os.path.exists(arg):
        matches = sorted(glob.glob(arg, recursive=True))
        if not matches:
            raise UsageError(f"{arg}: no file matches this pattern")
        return matches
    if not os.path.exists(arg) and not _is_capture_base(arg):
        raise UsageError(f"{arg}: no such file or directory")
    return [arg]


def _is_capture_base(path: str) -> bool:
    """A blktrace capture named by its base name (`sda` for sda.blktrace.0, .1, ...)."""
    return bool(glob.glob(glob.escape(path) + ".blktrace.*"))


_PER_CPU = re.compile(r"(?P<base>.+)\.blktrace\.(?P<cpu>\d+)$")


def _walk(root: str, skipped: list, exclude: str | None = None) -> list[tuple[str, str, str]]:
    """(path, key relative to root, detected format) of every trace under root, in name order;
    other files go to `skipped` with the reason. A blktrace capture's per-CPU files are one
    trace, named by its first file (the parser reads the others)."""
    from scsitrace import parsers
    out = []
    leave_out = os.path.realpath(exclude) if exclude else None
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and os.path.realpath(os.path.join(dirpath, d)) != leave_out)
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if not os.path.isfile(path):           # FIFOs, sockets, broken links: never opened
                skipped.append((path, "not a regular file"))
                continue
            try:
                fmt = parsers.detect(path)
            except ScsitraceError:
                skipped.append((path, "not a trace (format not recognised)"))
                continue
            except OSError as exc:
                skipped.append((path, f"unreadable: {exc.strerror}"))
                continue
            m = _PER_CPU.match(path)
            if fmt == "blktrace" and m:
                first = parsers.module("blktrace").per_cpu_files(path)[0][0]
                if first != path:
                    skipped.append((path, f"per-CPU file of the blktrace capture {first}"))
                    continue
            out.append((path, os.path.relpath(path, root), fmt))
    return out


def read_manifest(path: str, allow_outside: bool = False) -> list[tuple[str, str, dict, dict]]:
    """(path, key, options, labels) of each [[trace]] of a TOML manifest. Paths are relative to
    the manifest's directory and must lie in its tree (symbolic links followed) unless
    `allow_outside` (--allow-outside): a manifest from elsewhere cannot make a batch read
    /etc/shadow. `[defaults]` gives options (and labels) for every entry. The manifest is
    read as a regular file of at most inputcheck.MANIFEST_BYTES.

        [defaults]
        io_size = 32768
        labels = {build = "4.2"}

        [[trace]]
        path = "srv1/sda.blktrace.0"
        device = "8,0"
        labels = {host = "srv1", run = 3}
    """
    from .inputcheck import MANIFEST_BYTES, inside, read_regular
    try:
        text = read_regular(path, MANIFEST_BYTES, "TOML manifest")
        doc = tomllib.loads(text.decode("utf-8"))
    except UnicodeDecodeError:
        raise BadInput(path, "not a TOML manifest (not UTF-8 text)") from None
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        raise BadInput(path, "not a TOML manifest: " + re.sub(r"\s*\(at line.*\)", "", str(exc)),
                       line=int(m.group(1)) if m else None) from None
    headers = [i + 1 for i, ln in enumerate(text.decode("utf-8").splitlines()) if ln.strip().startswith("[[trace]]")]
    unknown = set(doc) - {"defaults", "trace"}
    if unknown:
        raise BadInput(path, f"unknown table(s) {', '.join(sorted(unknown))} (a manifest has [defaults] "
                             "and [[trace]] entries)")
    base = os.path.dirname(os.path.abspath(path))
    defaults = doc.get("defaults", {})
    _check_entry(path, defaults, None, "[defaults]", need_path=False)
    _check_values(path, defaults, None, "[defaults]", "")
    entries = doc.get("trace", [])
    if not isinstance(entries, list) or not entries:
        raise BadInput(path, "no [[trace]] entries")
    out = []
    for i, entry in enumerate(entries):
        line = headers[i] if i < len(headers) else None
        _check_entry(path, entry, line, f"[[trace]] #{i + 1}", need_path=True)
        rel = entry["path"]
        full = rel if os.path.isabs(rel) else os.path.normpath(os.path.join(base, rel))
        if not allow_outside and not inside(full, base):
            raise BadInput(path, f"[[trace]] #{i + 1}: path {printable(rel)!r} is outside the manifest's directory "
                                 "(--allow-outside to allow it)", line=line)
        opts = {_opt(k): v for k, v in {**defaults, **entry}.items() if _opt(k) in OPTION_KEYS}
        _check_values(path, opts, line, f"[[trace]] #{i + 1} ({rel})", full)
        labels = {**defaults.get("labels", {}), **entry.get("labels", {})}
        key = os.path.relpath(full, base)
        if key.startswith(os.pardir):           # outside the manifest's directory: its absolute path
            key = full.lstrip(os.sep)
        out.append((full, key, opts, labels))
    return out


def _opt(key: str) -> str:
    return key.replace("-", "_")


def _check_entry(path: str, entry, line: int | None, what: str, need_path: bool) -> None:
    if not isinstance(entry, dict):
        raise BadInput(path, f"{what} must be a table", line=line)
    for key in entry:
        if _opt(key) not in MANIFEST_KEYS or (key == "path" and not need_path):
            raise BadInput(path, f"{what}: unknown key {key!r} (known: {', '.join(sorted(MANIFEST_KEYS))})",
                           line=line)
    if need_path and not isinstance(entry.get("path"), str):
        raise BadInput(path, f"{what}: needs path = \"TRACE\"", line=line)
    labels = entry.get("labels", {})
    if not isinstance(labels, dict) or any(isinstance(v, (dict, list)) for v in labels.values()):
        raise BadInput(path, f"{what}: labels must be a table of plain values (host = \"a\", run = 3)", line=line)


def _check_values(path: str, options: dict, line: int | None, what: str, trace: str) -> None:
    """The entry's option values, checked as the CLI and the API check theirs: a bad one is
    bad input of the manifest, named by its key."""
    try:
        AnalysisRequest.from_options(trace, {_opt(k): v for k, v in options.items()})
    except OptionError as exc:
        raise BadInput(path, f"{what}: {exc}", line=line) from None


# ------------------------------------------------------------------ the work for one trace

def job_request(job: Job, local: str | None = None) -> AnalysisRequest:
    """The request of a job: its options (the manifest's, or the command line's for every
    trace), the format the directory walk detected when none is given. `local`: the path to
    read instead of job.path (a URL fetched)."""
    req = AnalysisRequest.from_options(local or job.path, job.options)
    if req.format == "auto" and job.detected:
        req = AnalysisRequest.from_options(local or job.path, {**job.options, "format": job.detected})
    return req


def trace_result(job: Job, local: str | None = None):
    """(JSON summary, per-I/O table, figures or None) of one trace: what `scsitrace analyze
    --json` and `--ios` write, and (with job.figures) what `scsitrace baseline` stores.
    `local`: where the trace was fetched to, when job.path is a URL."""
    from scsitrace import core
    from scsitrace.reports import export, summary as summ
    req = job_request(job, local)
    collector = None
    if job.figures:
        from scsitrace.reports.attribution import Collector
        collector = Collector()
    analysis = core.run(req, tap=collector.tap if collector else None)
    if local is not None:                 # the summary names the trace as the user did
        analysis.capture.path = analysis.source["path"] = job.path
    s = summ.summary(analysis, req.profile, req.target, req.io_size, req.lun)
    figures = figures_of(analysis, s, collector, req.target) if job.figures else None
    return s, export.ios_table(analysis), figures


def figures_of(analysis, s: dict, collector, target: int | None) -> dict:
    """The baseline figures of an analysis and its summary (`collector` tapped its read)."""
    from scsitrace.reports import regress
    from scsitrace.reports.html import attribution_for
    attr = attribution_for(analysis, collector) if target is None else None
    return regress.figures(s, attr)


def run_job(job: Job) -> dict:
    """trace_result as a result dict that never raises: trace_id, status (ok, bad, error),
    error (one line), summary, ios, figures, seconds."""
    t0 = time.perf_counter()
    out = {"trace_id": job.trace_id, "status": "ok", "error": None, "summary": None, "ios": None,
           "figures": None}
    local = None
    try:
        with fetched(job.path) as local:
            out["summary"], out["ios"], out["figures"] = trace_result(job, local)
    except ScsitraceError as exc:
        text = str(exc)
        out.update(status="bad", error=text.replace(local, job.path) if local else text)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        why = {FileNotFoundError: "no such file", IsADirectoryError: "is a directory",
               PermissionError: "permission denied"}[type(exc)]
        out.update(status="bad", error=f"{exc.filename or job.path}: {why}")
    except MemoryError:
        out.update(status="error", error="internal error: out of memory")
    except Exception as exc:  # an internal error: recorded, the batch goes on
        out.update(status="error", error=f"internal error: {type(exc).__name__}: {exc}")
    out["seconds"] = time.perf_counter() - t0
    return out


@contextlib.contextmanager
def fetched(path: str):
    """None for a local path; for a URL, a local copy (same file name) for the time of the
    analysis. Needs fsspec (installed with the dask extra); a capture of several files
    (blktrace per-CPU files) needs a shared file system instead."""
    if not is_url(path):
        yield None
        return
    try:
        import fsspec
    except ImportError:
        raise UsageError(f"{path}: reading URLs needs fsspec (pip install 'scsitrace[dask]')") from None
    with tempfile.TemporaryDirectory(prefix="scsitrace-") as tmp:
        local = os.path.join(tmp, os.path.basename(path.rstrip("/")) or "trace")
        try:
            with fsspec.open(path, "rb") as src, open(local, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except FileNotFoundError:
            raise BadInput(path, "no such file") from None
        yield local


def failed_result(job: Job, status: str, error: str) -> dict:
    """The result of a job that never returned (its worker timed out or died)."""
    return {"trace_id": job.trace_id, "status": status, "error": error, "summary": None, "ios": None,
            "figures": None, "seconds": None}


def exit_status(results: list[dict]) -> int:
    """0 every trace analysed; 1 an internal error (a trace crashed its worker or raised an
    unexpected exception); else 2 when some inputs were bad or ran out of time."""
    statuses = {r["status"] for r in results}
    if statuses & {"error", "crashed"}:
        return 1
    if statuses - {"ok"}:
        return 2
    return 0
