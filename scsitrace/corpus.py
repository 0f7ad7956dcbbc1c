"""Baselines and the regression gate over a corpus of traces, in one call.

A baselines directory holds one `<key>.baseline.json` per trace, `key` being the trace's
name relative to the input it came from (the directory argument, or the manifest's path);
`scsitrace baseline PATH... -o DIR/` writes them, `scsitrace regress --baselines DIR
PATH...` finds them again by the same names. `regress --baselines DIR` alone checks every
baseline found under DIR (any `*.json` that is a scsitrace baseline, the committed fixture
baselines included) against the trace it names.
"""
from __future__ import annotations

import json
import os

from .batch import Job, collect
from . import outputs
from .errors import BadInput, UsageError
from .request import OPTION_KEYS, AnalysisRequest, OptionError

SUFFIX = ".baseline.json"


def baseline_path(directory: str, job: Job) -> str:
    path = os.path.normpath(os.path.join(directory, job.key + SUFFIX))
    if os.path.isabs(job.key) or os.path.relpath(path, directory).startswith(os.pardir):
        raise UsageError(f"{job.path}: its name {job.key!r} would put its baseline outside {directory}")
    return path


def stored_options(job: Job) -> dict:
    """The options a baseline remembers: `scsitrace baseline`'s, plus any layer filter set
    (the format as given, not as detected)."""
    return AnalysisRequest.from_options(job.path, job.options).stored_options()


def check_keys(jobs: list[Job]) -> None:
    seen: dict[str, str] = {}
    for job in jobs:
        if job.key in seen:
            raise UsageError(f"{job.path} and {seen[job.key]} would share the baseline name {job.key!r}; "
                             "give their directory instead, or a manifest")
        seen[job.key] = job.path


def write_baselines(directory: str, jobs: list[Job], results: list[dict]) -> int:
    """Write DIR/<key>.baseline.json for every trace analysed; returns how many."""
    from scsitrace.reports import regress
    n = 0
    for job, result in zip(jobs, results):
        if result["status"] != "ok":
            continue
        path = baseline_path(directory, job)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        regress.write_baseline(path, regress.make_baseline(job.path, stored_options(job), result["figures"], path))
        n += 1
    return n


def regress_entries(directory: str, paths: list[str], manifest: str | None, defaults: dict,
                    allow_outside: bool = False):
    """(checks, jobs): one check per trace {key, trace, baseline, doc, status, error}, and the
    jobs to run for the checks that have a baseline."""
    from scsitrace.reports import regress
    if not os.path.isdir(directory):
        raise UsageError(f"--baselines {directory}: not a directory")
    checks, jobs = [], []
    if paths or manifest:
        inputs = collect(paths, manifest, defaults, allow_outside=allow_outside)
        check_keys(inputs.jobs)
        for job in inputs.jobs:
            check = {"key": job.key, "trace": job.path, "baseline": baseline_path(directory, job)}
            try:
                check["doc"] = regress.read_baseline(check["baseline"])
            except FileNotFoundError:
                check.update(status="no baseline", error=f"no baseline {check['baseline']} "
                             f"(write one with scsitrace baseline ... -o {directory}/)")
            except BadInput as exc:
                check.update(status="bad", error=str(exc))
            checks.append((check, job))
    else:
        for path in _baseline_files(directory):
            try:
                doc = regress.read_baseline(path)
            except BadInput as exc:
                if "not a scsitrace baseline" in str(exc) or "not a JSON baseline" in str(exc):
                    continue                      # other JSON files of a fixture directory
                checks.append(({"key": _key(directory, path), "trace": path, "baseline": path,
                                "status": "bad", "error": str(exc)}, None))
                continue
            trace = os.path.normpath(os.path.join(os.path.dirname(path), doc.get("trace", "")))
            checks.append(({"key": _key(directory, path), "trace": trace, "baseline": path, "doc": doc},
                           Job(0, trace, _key(directory, path), dict(defaults))))
        if not checks:
            raise UsageError(f"--baselines {directory}: no scsitrace baselines found")
    out = []
    for check, job in checks:
        if "doc" in check and job is not None:
            job.options = _options(check["doc"].get("options") or {}, job.options)
            try:
                AnalysisRequest.from_options(job.path, job.options)
            except OptionError as exc:            # a baseline's stored options are its content
                check.update(status="bad", error=f"{check['baseline']}: options: {exc}")
                del check["doc"]
                out.append(check)
                continue
            job.trace_id = len(jobs)
            job.figures = True
            check["job"] = job.trace_id
            jobs.append(job)
        out.append(check)
    return out, jobs


def _options(stored: dict, given: dict) -> dict:
    """The baseline's options (the trace is analysed as the baseline was made); what the command
    line or a manifest gives fills what the baseline leaves at its default."""
    out = {k: v for k, v in stored.items() if k in OPTION_KEYS}
    for k, v in given.items():
        if out.get(k) in (None, "auto", [], False):
            out[k] = v
    return out


def _baseline_files(directory: str) -> list[str]:
    found = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames.sort()
        found.extend(os.path.join(dirpath, n) for n in sorted(filenames) if n.endswith(".json"))
    return found


def _key(directory: str, path: str) -> str:
    rel = os.path.relpath(path, directory)
    return rel[:-len(SUFFIX)] if rel.endswith(SUFFIX) else rel[:-len(".json")]


def judge(checks: list[dict], results: list[dict], tolerances) -> None:
    """Fill each check's rows and status (ok, regressed, or the trace's failure)."""
    from scsitrace.reports import regress
    for check in checks:
        if "job" not in check:
            check["rows"] = None
            continue
        result = results[check["job"]]
        if result["status"] != "ok":
            check.update(status=result["status"], error=result["error"], rows=None)
            continue
        rows = regress.compare(check["doc"]["figures"], result["figures"], tolerances)
        check.update(rows=rows, status="regressed" if regress.failed(rows) else "ok", error=None)


def print_checks(checks: list[dict]) -> None:
    """One line per trace, then the total (names and errors shown inert)."""
    from .inert import printable
    counts: dict[str, int] = {}
    for c in checks:
        c = {**c, "key": printable(c["key"]), "error": printable(c["error"]) if c.get("error") else c.get("error")}
        counts[c["status"]] = counts.get(c["status"], 0) + 1
        if c["rows"] is None:
            print(f"{c['status'].upper():11} {c['key']}: {c['error']}")
            continue
        bad = [r["figure"] for r in c["rows"] if r["verdict"] in ("regressed", "missing")]
        better = sum(r["verdict"] == "improved" for r in c["rows"])
        hint = f", {better} improved" if better else ""
        if bad:
            print(f"{'REGRESSED':11} {c['key']}: {len(bad)} of {len(c['rows'])} figures: {', '.join(bad)}")
        else:
            print(f"{'ok':11} {c['key']}: {len(c['rows'])} figures within tolerance{hint}")
    parts = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    print(f"total: {len(checks)} trace(s): {parts}")


def exit_status(checks: list[dict]) -> int:
    """1 a figure regressed or a trace hit an internal error; 2 bad input (or no baseline); 0 ok."""
    statuses = {c["status"] for c in checks}
    if statuses & {"regressed", "error", "crashed"}:
        return 1
    return 2 if statuses - {"ok"} else 0


def write_json(path: str, checks: list[dict]) -> None:
    doc = {"traces": [{k: c.get(k) for k in ("key", "trace", "baseline", "status", "error", "rows")}
                      for c in checks]}
    text = json.dumps(doc, indent=1) + "\n"
    with outputs.writing(path) as fh:
        fh.write(text)
